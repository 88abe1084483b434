// tests/test_liveness.c: a frozen or dead rank ends the whole job, a slow one does not
// (comm/liveness.c, launch_tcp_broadcast_watched / launch_tcp_watch in comm/launch.c, the
// heartbeat's start in comm_init). Run from the repository root.
//   - the heartbeat alone: groups of forked ranks on 127.0.0.1 with T5_HEARTBEAT_TIMEOUT=3:
//     a stopped rank (SIGSTOP) is named by rank 0, which wakes it (SIGCONT) so it ends too;
//     rank 0 stopped is named by the others; a rank that exits without goodbye is named and
//     the news relayed; goodbyes at different times (each rank alive and silent after its
//     own) and the whole group stopped and resumed end nobody; T5_HEARTBEAT_TIMEOUT=0
//     never ends a silent rank; the variable is validated, its default is <= 15 s;
//   - ./train_t5 under mpirun -np 2 and 3 (CPU ranks, T5_HEARTBEAT_TIMEOUT=5), mid-run:
//     a non-zero rank or rank 0 stopped (SIGSTOP), or killed (SIGKILL), ends the job
//     within 30 s, non-zero, naming the rank, with no train_t5 process left; a rank whose
//     main thread sleeps 15 s (T5_TEST_STALL_RANK, 3x the timeout) finishes normally.
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../comm/launch.h"
#include "../comm/liveness.h"
#include "test_files.h"
#include "test.h"
#include "test_fork.h"
#include "test_tmp.h"

#define MAX_RANKS 4
#define HB 3.0  // T5_HEARTBEAT_TIMEOUT of the forked groups

static char tmp[64];

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

// ---- groups of forked ranks ------------------------------------------------------------------

typedef enum {
    SC_STOP_RANK1,      // rank 1 stops itself (SIGSTOP); the others wait
    SC_STOP_RANK0,      // rank 0 stops itself
    SC_EXIT_RANK2,      // rank 2 exits 3 without goodbye
    SC_GOODBYES,        // each rank says goodbye at its own time and stays on, silent
    SC_PAUSED_GROUP,    // the parent stops every rank for 2x the timeout, then resumes them
    SC_NEVER,           // T5_HEARTBEAT_TIMEOUT=0: rank 1 stopped for 2x the timeout is not ended
} Scenario;

static pid_t pids[MAX_RANKS];

// What rank r does once the heartbeat runs; the return value is its exit code.
static int rank_act(Scenario sc, int r) {
    switch (sc) {
    case SC_STOP_RANK1:
    case SC_STOP_RANK0:
        if (r == (sc == SC_STOP_RANK1 ? 1 : 0)) raise(SIGSTOP);
        sleep_s(20);  // the heartbeat ends this rank long before
        return 0;
    case SC_EXIT_RANK2:
        if (r == 2) {
            sleep_s(0.5);
            _exit(3);
        }
        sleep_s(20);
        return 0;
    case SC_GOODBYES:  // rank 0 watches rank 2 silent for 4 s, rank 1 watches rank 0 silent for 4.5 s
        sleep_s(r == 0 ? 5.0 : r == 1 ? 9.5 : 1.0);
        liveness_stop();
        sleep_s(r == 0 ? 5.0 : r == 1 ? 0.2 : 9.0);
        return 0;
    case SC_PAUSED_GROUP:
        sleep_s(3 * HB + 1);
        liveness_stop();
        return 0;
    case SC_NEVER:
        if (r == 1) {
            raise(SIGSTOP);
        } else {
            sleep_s(2 * HB);
            kill(pids[1], SIGCONT);  // forked before rank 0, so rank 0 knows its pid
            sleep_s(0.5);
        }
        liveness_stop();
        return 0;
    }
    return 9;
}

typedef struct {
    int code[MAX_RANKS];     // exit code, 128 + signal, or -1: still running at the deadline (killed)
    double end[MAX_RANKS];   // seconds after the start
    char *err[MAX_RANKS];    // its stderr
} GroupResult;

static int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

static GroupResult run_group(int world, Scenario sc, const char *timeout) {
    GroupResult g;
    memset(&g, 0, sizeof g);
    int port = launch_free_port();
    setenv("T5_HEARTBEAT_TIMEOUT", timeout, 1);
    fflush(stdout);
    fflush(stderr);
    double t0 = now_seconds();
    for (int r = world - 1; r >= 0; r--) {  // rank 0 last: it knows the others' pids
        pids[r] = fork();
        if (pids[r] == 0) {
            char path[128];
            snprintf(path, sizeof path, "%s/rank%d.err", tmp, r);
            if (!freopen(path, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(8);
            unsigned char blob[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            launch_tcp_broadcast_watched("127.0.0.1", port, r, world, blob, sizeof blob, 20.0);
            fflush(stderr);
            _exit(rank_act(sc, r));
        }
    }
    if (sc == SC_PAUSED_GROUP) {
        sleep_s(1.0);
        for (int r = 0; r < world; r++) kill(pids[r], SIGSTOP);
        sleep_s(2 * HB);
        for (int r = 0; r < world; r++) kill(pids[r], SIGCONT);
    }
    int left = world;
    while (left > 0 && now_seconds() - t0 < 40) {
        for (int r = 0; r < world; r++) {
            int st = 0;
            if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
                g.code[r] = exit_code(st);
                g.end[r] = now_seconds() - t0;
                pids[r] = 0;
                left--;
            }
        }
        sleep_s(0.02);
    }
    for (int r = 0; r < world; r++) {
        if (pids[r] > 0) {  // left behind: a failure, and cleaned up here
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
            g.code[r] = -1;
            g.end[r] = now_seconds() - t0;
        }
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.err", tmp, r);
        g.err[r] = test_slurp(path);
    }
    unsetenv("T5_HEARTBEAT_TIMEOUT");
    return g;
}

static void group_free(GroupResult *g) {
    for (int r = 0; r < MAX_RANKS; r++) free(g->err[r]);
}

// Rank r ended with `code` by `by` seconds, its stderr holding `needle` (NULL: empty stderr).
static void expect_rank(const char *label, const GroupResult *g, int r, int code, double by, const char *needle) {
    char what[600], first[200] = "";
    snprintf(first, sizeof first, "%.*s", (int)strcspn(g->err[r], "\n"), g->err[r]);
    int text_ok = needle ? strstr(g->err[r], needle) != NULL : g->err[r][0] == '\0';
    snprintf(what, sizeof what, "%s: rank %d exits %d after %.2f s (want %d within %.1f s): %s", label, r, g->code[r],
             g->end[r], code, by, first[0] ? first : "(no error output)");
    test_check(g->code[r] == code && g->end[r] <= by && text_ok, what);
    if (!text_ok) printf("       (wanted stderr %s%s%s)\n", needle ? "holding \"" : "empty", needle ? needle : "",
                         needle ? "\"" : "");
}

static void test_heartbeat(void) {
    GroupResult g = run_group(2, SC_STOP_RANK1, "3");
    expect_rank("rank 1 stopped", &g, 0, 1, HB + 2, "rank 1 of 2 stopped responding: no heartbeat for 3 s");
    char what[200];
    snprintf(what, sizeof what, "rank 1 stopped: rank 0 noticed after %.2f s (timeout %.0f s, a beat a second)",
             g.end[0], HB);
    test_check(g.end[0] >= HB - LIVENESS_BEAT_S - 0.3, what);
    expect_rank("rank 1 stopped", &g, 1, 1, HB + 3, "rank 1 of 2 stopped responding: no heartbeat for 3 s (the "
                "process is frozen, stopped, or its host is gone); rank 0 noticed, rank 1 stops too");
    group_free(&g);

    g = run_group(3, SC_STOP_RANK0, "3");
    expect_rank("rank 0 stopped, 3 ranks", &g, 1, 1, HB + 2, "rank 0 of 3 stopped responding");
    expect_rank("rank 0 stopped, 3 ranks", &g, 2, 1, HB + 2, "rank 0 of 3 stopped responding");
    expect_rank("rank 0 stopped, 3 ranks", &g, 0, 1, HB + 3, "rank 0 of 3 stopped responding");
    group_free(&g);

    g = run_group(3, SC_EXIT_RANK2, "3");
    expect_rank("rank 2 exits 3 without goodbye", &g, 2, 3, 2, NULL);
    expect_rank("rank 2 exits 3 without goodbye", &g, 0, 1, g.end[2] + 1.5,
                "error: rank 2 of 3 ended unexpectedly (its output says why)\nHINT:");
    expect_rank("rank 2 exits 3 without goodbye", &g, 1, 1, g.end[2] + 1.5,
                "rank 2 of 3 ended unexpectedly (its output says why); rank 0 noticed, rank 1 stops too");
    group_free(&g);

    // every main thread here only sleeps: the heartbeat runs beside it (./train_t5's stall test
    // below does the same with the others waiting in MPI collectives)
    g = run_group(3, SC_GOODBYES, "3");
    for (int r = 0; r < 3; r++)
        expect_rank("goodbyes at 5, 9.5, 1 s, each rank alive and silent after it", &g, r, 0, 13, NULL);
    group_free(&g);

    g = run_group(2, SC_PAUSED_GROUP, "3");
    for (int r = 0; r < 2; r++) expect_rank("every rank stopped for 6 s, then resumed", &g, r, 0, 14, NULL);
    group_free(&g);

    g = run_group(2, SC_NEVER, "0");
    for (int r = 0; r < 2; r++) expect_rank("T5_HEARTBEAT_TIMEOUT=0: rank 1 stopped for 6 s", &g, r, 0, 10, NULL);
    group_free(&g);
}

static void timeout_fn(const void *v) {
    setenv("T5_HEARTBEAT_TIMEOUT", (const char *)v, 1);
    liveness_timeout_s();
}

static void test_timeout_variable(void) {
    unsetenv("T5_HEARTBEAT_TIMEOUT");
    double d = liveness_timeout_s();
    char what[160];
    snprintf(what, sizeof what, "T5_HEARTBEAT_TIMEOUT unset: %.0f s (<= 15 s, so detection + teardown fit in 30 s)", d);
    test_check(d > 0 && d <= 15, what);
    setenv("T5_HEARTBEAT_TIMEOUT", "0", 1);
    test_check(liveness_timeout_s() == 0, "T5_HEARTBEAT_TIMEOUT=0: off (0)");
    setenv("T5_HEARTBEAT_TIMEOUT", "7.5", 1);
    test_check(liveness_timeout_s() == 7.5, "T5_HEARTBEAT_TIMEOUT=7.5: 7.5 s");
    unsetenv("T5_HEARTBEAT_TIMEOUT");
    test_expect_error("T5_HEARTBEAT_TIMEOUT=abc", timeout_fn, "abc", "T5_HEARTBEAT_TIMEOUT=\"abc\"", ">= 3");
    test_expect_error("T5_HEARTBEAT_TIMEOUT=1", timeout_fn, "1", "T5_HEARTBEAT_TIMEOUT=\"1\"", ">= 3");
    test_expect_error("T5_HEARTBEAT_TIMEOUT=-5", timeout_fn, "-5", "T5_HEARTBEAT_TIMEOUT=\"-5\"", NULL);
}

// ---- ./train_t5 under mpirun --------------------------------------------------------------------

// pids of the train_t5 processes whose command line holds `tag` (not zombies); with
// rank >= 0 only the one whose OMPI_COMM_WORLD_RANK is rank. Returns how many.
static int find_ranks(const char *tag, int rank, pid_t *out, int cap) {
    DIR *d = opendir("/proc");
    if (!d) t5_fail("cannot open /proc");
    struct dirent *e;
    int n = 0;
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    while ((e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[8192];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < k; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[k] = '\0';
        if (!strstr(buf, "train_t5") || !strstr(buf, tag) || strstr(buf, "mpirun") || strstr(buf, "timeout")) continue;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (!f) continue;
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *paren = strrchr(buf, ')');
        if (!paren || paren[2] == 'Z') continue;  // dead, waiting to be reaped
        if (rank >= 0) {
            snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
            f = fopen(path, "r");
            if (!f) continue;
            k = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[k] = '\0';
            int match = 0;
            for (size_t i = 0; i < k; i += strlen(buf + i) + 1)
                if (!strcmp(buf + i, want)) match = 1;
            if (!match) continue;
        }
        if (n < cap) out[n] = pid;
        n++;
    }
    closedir(d);
    return n;
}

// mpirun -np world ./train_t5 ... in the background; returns the shell's pid.
static pid_t start_job(const char *tag, int world, int max_steps, const char *env) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec env %s timeout 120 mpirun --allow-run-as-root --oversubscribe -np %d ./train_t5 --device cpu "
             "--model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir tests/fixtures/trainer_data --max_steps %d --per_device_train_batch_size 4 --do_train "
             "--save_strategy no --output_dir %s/%s --cache_dir %s/cache > %s/%s.log 2>&1",
             env, world, max_steps, tmp, tag, tmp, tmp, tag);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

// Waits for the job; returns its exit code, -1 (killed here) past the deadline.
static int wait_job(pid_t pid, double deadline_s) {
    double t0 = now_seconds();
    while (now_seconds() - t0 < deadline_s) {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid) return exit_code(st);
        sleep_s(0.05);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static int log_has(const char *tag, const char *needle) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s.log", tmp, tag);
    char *t = test_slurp(path);
    int has = strstr(t, needle) != NULL;
    free(t);
    return has;
}

// The job `tag` of `world` ranks mid-run gets `sig` on rank `victim`.
static void job_signal_test(const char *tag, int world, int victim, int sig) {
    char run[96], what[400];
    snprintf(run, sizeof run, "%s/%s", tmp, tag);
    pid_t job = start_job(tag, world, 100000, "T5_HEARTBEAT_TIMEOUT=5");
    double t0 = now_seconds();
    while (!log_has(tag, "Running training") && now_seconds() - t0 < 90) sleep_s(0.2);
    sleep_s(1.0);  // mid-step
    pid_t pid = 0;
    int found = find_ranks(run, victim, &pid, 1);
    snprintf(what, sizeof what, "%s: mpirun -np %d, rank %d found (pid %d) mid-run", tag, world, victim, (int)pid);
    if (!test_check(found == 1, what)) {
        wait_job(job, 0);
        return;
    }
    double ts = now_seconds();
    kill(pid, sig);
    int rc = wait_job(job, 60);
    double dt = now_seconds() - ts;
    char needle[96];
    if (sig == SIGSTOP) snprintf(needle, sizeof needle, "rank %d of %d stopped responding", victim, world);
    else snprintf(needle, sizeof needle, "rank %d of %d ended unexpectedly", victim, world);
    char mpi_needle[96];  // mpirun's own line for a killed rank
    snprintf(mpi_needle, sizeof mpi_needle, "rank %d with PID", victim);
    int named = log_has(tag, needle) || (sig == SIGKILL && log_has(tag, mpi_needle));
    snprintf(what, sizeof what, "%s: rank %d of %d %s mid-run: the job ends after %.1f s (<= 30), exit %d, the "
             "output names it (\"%s\")", tag, victim, world, sig == SIGSTOP ? "stopped (SIGSTOP)" : "killed (SIGKILL)",
             dt, rc, needle);
    test_check(rc > 0 && rc != 124 && dt <= 30 && named, what);
    pid_t left[8];
    int n = find_ranks(run, -1, left, 8);
    for (int i = 0; i < 50 && n > 0; i++) {  // a moment for the launcher's last kills
        sleep_s(0.1);
        n = find_ranks(run, -1, left, 8);
    }
    snprintf(what, sizeof what, "%s: no train_t5 process left behind (%d found)", tag, n);
    test_check(n == 0, what);
    for (int i = 0; i < n && i < 8; i++) kill(left[i], SIGKILL);
}

static void job_stall_test(int stalled) {
    char tag[32], env[160], what[300];
    snprintf(tag, sizeof tag, "stall%d", stalled);
    snprintf(env, sizeof env, "T5_HEARTBEAT_TIMEOUT=5 T5_TEST_STALL_RANK=%d T5_TEST_STALL_S=15", stalled);
    double t0 = now_seconds();
    int rc = wait_job(start_job(tag, 2, 3, env), 110);
    snprintf(what, sizeof what, "rank %d's main thread asleep 15 s (3x the 5 s timeout) after step 2: the job "
             "finishes, exit %d, after %.1f s", stalled, rc, now_seconds() - t0);
    test_check(rc == 0 && log_has(tag, "sleeping 15 s") && log_has(tag, "train_runtime") &&
                   !log_has(tag, "stopped responding"), what);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    snprintf(tmp, sizeof tmp, "/tmp/t5_test_liveness.XXXXXX");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    test_timeout_variable();
    test_heartbeat();
    job_signal_test("stop1_np2", 2, 1, SIGSTOP);
    job_signal_test("stop2_np3", 3, 2, SIGSTOP);
    job_signal_test("stop0_np2", 2, 0, SIGSTOP);
    job_signal_test("kill1_np2", 2, 1, SIGKILL);
    job_stall_test(1);
    job_stall_test(0);
    if (!test_failed_count) rm_rf(tmp);
    else printf("logs kept in %s\n", tmp);
    return test_summary();
}
