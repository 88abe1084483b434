// tests/ds_config_test.h: what the DeepSpeed config tests share (tests/test_ds_config.c,
// tests/test_ds_config_errors.c): a temp dir with the configs they write, checks that print
// what they compared, and a child that loads (and resolves) one config.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../deepspeed/ds_config.h"
#include "../deepspeed/ds_zero_options.h"
#include "../zero/zero.h"
#include "test.h"
#include "test_fork.h"

static char g_tmp[64];      // this run's temp dir (ds_test_begin)
static char *g_files[1024];  // the files written there (removed by ds_test_end)
static int g_nfiles;

// Write `text` to <tmp>/<name>; returns the path (kept for cleanup).
static inline const char *write_tmp(const char *name, const char *text) {
    char *path = path_join(g_tmp, name);
    FILE *f = fopenCheck(path, "w");
    fwriteCheck(text, 1, strlen(text), f, path);
    fcloseCheck(f, path);
    if (g_nfiles < 1024) g_files[g_nfiles++] = path;
    return path;
}

static inline int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

// check helpers printing what they compared
static inline void check_ll(const char *what, long long got, long long want) {
    char buf[256];
    snprintf(buf, sizeof buf, "%-60s %lld (want %lld)", what, got, want);
    test_check(got == want, buf);
}
static inline void check_num(const char *what, double got, double want) {
    char buf[256];
    snprintf(buf, sizeof buf, "%-60s %.10g (want %.10g)", what, got, want);
    test_check(near(got, want), buf);
}

// ---- children --------------------------------------------------------------------------
typedef struct {
    const char *path;
    DsResolveArgs a;
    int resolve;
    const char *shown;  // the name ds_config_resolve gives in messages (NULL: the path)
} Job;

static inline void job_fn(const void *arg) {
    const Job *j = arg;
    DsConfig c;
    ds_config_load(&c, j->path);
    if (j->resolve) {
        ds_config_resolve(&c, &j->a, j->shown);
        (void)zero_options_from_config(&c, j->shown ? j->shown : j->path);
    }
}

// Run fn in a child; returns its exit status (128+signal if killed), its stderr in buf.
static inline int run_child(FailFn fn, const void *arg, char *buf, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) exit(2);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// t5-large-like flags with every flag explicit (HF's own strictness)
static inline DsResolveArgs args_explicit(void) {
    DsResolveArgs a = ds_resolve_args_default();
    a.world_size = 2;
    a.per_device_train_batch_size = 4;
    a.gradient_accumulation_steps = 3;
    a.learning_rate = 1e-4;
    a.adam_beta1 = 0.85;
    a.adam_beta2 = 0.995;
    a.adam_epsilon = 1e-7;
    a.weight_decay = 0.01;
    a.max_grad_norm = 0.5;
    a.warmup_steps = 10;
    a.total_steps = 200;
    a.bf16 = 1;
    a.d_model = 1024;
    a.flag_set_mask = DS_FLAGS_ALL;
    return a;
}

// The temp dir (0: made), and its removal with what was written there.
static inline int ds_test_begin(const char *name) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    return 0;
}

static inline void ds_test_end(void) {
    for (int i = 0; i < g_nfiles; i++) {
        unlink(g_files[i]);
        free(g_files[i]);
    }
    rmdir(g_tmp);
}
