// trainer/signals.c: the stop signals of a training run (see signals.h). The handler is
// async-signal-safe: it stores to volatile sig_atomic_t flags, and for a second signal
// restores the default action (sigaction) and raises it again (raise); the line it prints
// goes through write(2).
#include "signals.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/t5_env.h"

enum { SIG_STOP_COUNT = 3 };
static const int STOP_SIGS[SIG_STOP_COUNT] = {SIGTERM, SIGINT, SIGUSR1};
static const char *const STOP_NAMES[SIG_STOP_COUNT] = {"SIGTERM", "SIGINT", "SIGUSR1"};

static volatile sig_atomic_t g_got[SIG_STOP_COUNT];  // 1: that signal came
static volatile sig_atomic_t g_any;                  // 1: a stop signal came (the next one aborts)
static pid_t g_launcher;                             // the --num_gpus parent (0: none): its duplicates are not a second signal
static struct sigaction g_old[SIG_STOP_COUNT];
static int g_installed;

static void say(const char *s) {
    ssize_t n = write(STDERR_FILENO, s, strlen(s));  // async-signal-safe; nothing to do if it fails
    (void)n;
}

static void on_stop_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    int from_launcher = g_launcher > 0 && info && info->si_code == SI_USER && info->si_pid == g_launcher;
    if (g_any && !from_launcher) {  // a second signal: the default action, at once
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        say("train_t5: a second signal: stopping at once, without a checkpoint\n");
        raise(sig);  // delivered when this handler returns (the signal is blocked while it runs)
        return;
    }
    for (int i = 0; i < SIG_STOP_COUNT; i++)
        if (STOP_SIGS[i] == sig) g_got[i] = 1;
    if (!g_any) say("train_t5: stop signal received: the run stops after this step and saves a checkpoint (a second "
                    "signal ends it at once)\n");
    g_any = 1;
}

void signals_install(void) {
    if (g_installed) return;
    const char *launcher = t5_env_get(T5_ENV_LAUNCHER);  // comm/launch.c sets it for the ranks it starts
    g_launcher = launcher && !strcmp(launcher, "num_gpus") ? getppid() : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;  // MPI, NCCL's host calls and file writes carry on
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < SIG_STOP_COUNT; i++) sigaddset(&sa.sa_mask, STOP_SIGS[i]);  // one handler at a time
    for (int i = 0; i < SIG_STOP_COUNT; i++)
        if (sigaction(STOP_SIGS[i], &sa, &g_old[i]) != 0)
            t5_die(__FILE__, __LINE__, "sigaction: cannot install the stop-signal handler",
                   "this should not fail; report it with the output of `ulimit -a`");
    g_installed = 1;
}

void signals_uninstall(void) {
    if (!g_installed) return;
    for (int i = 0; i < SIG_STOP_COUNT; i++)
        if (sigaction(STOP_SIGS[i], &g_old[i], NULL) != 0)
            t5_die(__FILE__, __LINE__, "sigaction: cannot restore a signal's action", "this should not fail; report it");
    g_installed = 0;
}

int signals_received(void) { return g_any != 0; }

int signals_agree_stop(const Comm *c, char *what, size_t cap) {
    double n[SIG_STOP_COUNT];
    for (int i = 0; i < SIG_STOP_COUNT; i++) n[i] = g_got[i];
    comm_allreduce_sum_f64(c, n, SIG_STOP_COUNT);  // every rank learns what every rank got
    size_t len = 0;
    if (cap) what[0] = '\0';
    for (int i = 0; i < SIG_STOP_COUNT; i++) {
        if (n[i] <= 0 || len >= cap) continue;
        len += (size_t)snprintf(what + len, cap - len, "%s%s on %.0f of %d rank%s", len ? ", " : "", STOP_NAMES[i],
                                n[i], c->world, c->world > 1 ? "s" : "");
    }
    return len > 0;
}

void signals_test_hook(const char *where, int rank) {
    const char *spec = t5_env_get(T5_ENV_TEST_SIGNAL);
    if (!spec) return;
    const char *colon = strchr(spec, ':'), *at = strchr(spec, '@');
    if (!colon || (size_t)(colon - spec) != strlen(where) || strncmp(spec, where, strlen(where)) != 0) return;
    if (at && atoi(at + 1) != rank) return;
    const char *end = at ? at : spec + strlen(spec);
    for (const char *p = colon + 1; p < end;) {
        size_t n = strcspn(p, ",@");
        int sig = 0;
        for (int i = 0; i < SIG_STOP_COUNT; i++)
            if (n == strlen(STOP_NAMES[i]) - 3 && !strncmp(p, STOP_NAMES[i] + 3, n)) sig = STOP_SIGS[i];
        if (!sig) t5_fail("T5_TEST_SIGNAL=%s: expected WHERE:SIG[,SIG...][@RANK] with SIG one of TERM, INT, USR1", spec);
        fflush(stdout);
        raise(sig);
        p += n + (p[n] == ',');
    }
}
