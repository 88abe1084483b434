// tests/test_launch.c: the launchers on the CPU, no NCCL (comm/launch.c, comm_init and
// comm_attach_device in comm/comm.c):
//   - launch_tcp_broadcast: 3 forked ranks on 127.0.0.1 receive rank 0's blob byte for
//     byte (the 128 bytes of an NCCL id, and 3 MB); a rank with nobody listening, rank 0
//     with a rank missing, and a WORLD_SIZE mismatch end with an error naming the address
//     within the deadline;
//   - torchrun-style and Slurm variables -> Comm; missing or malformed ones -> one error line;
//     several CPU ranks without mpirun refused;
//   - launch_spawn (--num_gpus): 3 re-executed copies of this binary get RANK = LOCAL_RANK,
//     WORLD_SIZE, MASTER_ADDR/PORT, argv without --num_gpus, and meet at the rendezvous; a
//     rank that exits non-zero or is killed stops the others and is named; a rank that
//     ignores SIGTERM is killed after the grace period; a stopped (SIGSTOP) rank is woken
//     with the SIGTERM, so it ends at once, not after the grace period; a rank that stops
//     itself after the rendezvous (launch_tcp_broadcast_watched, as GPU ranks) is named by
//     the heartbeat within 30 s, and no child is left;
//   - a stop signal to the --num_gpus parent reaches the ranks, which stop by themselves (exit
//     0); sent to the whole group, the parent's copy is not a second one; a second signal to
//     the parent stops them at once;
//   - --local_rank: checked against LOCAL_RANK (and mpirun's local rank), sets it when unset,
//     picks a lone rank's GPU; parsed as --local_rank N, --local_rank=N, --local-rank=N.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <errno.h>

#include "../common/check.h"

#include "../kernels/backend.h"
#include "../trainer/args.h"
#include "../trainer/signals.h"
#include "../comm/comm.h"
#include "../comm/launch.h"
#include "test.h"
#include "test_fork.h"

static const char *const launcher_vars[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                            "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "T5_LAUNCHER",
                                            "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "TORCHELASTIC_USE_AGENT_STORE"};

// Clear every launcher variable, then set "NAME=value" entries (NULL-terminated).
static void env_set(const char *const *kv) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) unsetenv(launcher_vars[i]);
    for (; kv && *kv; kv++) {
        char name[64];
        const char *eq = strchr(*kv, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - *kv), *kv);
        setenv(name, eq + 1, 1);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Rank 0's blob: bytes that differ from a zeroed buffer and from each other.
static void fill_pattern(unsigned char *b, size_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (unsigned char)(x >> 24);
    }
}

// Rank `rank` of `world` at 127.0.0.1:port; returns 0 when the blob it holds afterwards is
// rank 0's, 10 when it differs (errors exit 1 from inside launch_tcp_broadcast).
static int rank_run(int port, int rank, int world, size_t n, double timeout_s) {
    unsigned char *want = malloc(n), *blob = calloc(n, 1);
    fill_pattern(want, n);
    if (rank == 0) memcpy(blob, want, n);
    launch_tcp_broadcast("127.0.0.1", port, rank, world, blob, n, timeout_s);
    int same = memcmp(blob, want, n) == 0;
    free(want);
    free(blob);
    return same ? 0 : 10;
}

static void test_broadcast(size_t n) {
    const int world = 3;
    int port = launch_free_port();
    pid_t pids[3];
    fflush(stdout);
    for (int r = world - 1; r >= 0; r--) {  // the clients first: they retry until rank 0 listens
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_run(port, r, world, n, 20.0));
    }
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        char what[200];
        snprintf(what, sizeof what, "tcp broadcast of %zu bytes, 3 ranks: rank %d holds rank 0's bytes (exit %d)", n, r,
                 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        test_check(WIFEXITED(st) && WEXITSTATUS(st) == 0, what);
    }
}

typedef struct {
    int port, rank, world;
    double timeout_s;
} RankArg;

static void run_rank_fn(const void *p) {
    const RankArg *a = p;
    rank_run(a->port, a->rank, a->world, 128, a->timeout_s);
}

static void test_broadcast_failures(void) {
    int port = launch_free_port();  // closed again: nobody listens there
    char needle[64], what[200];
    snprintf(needle, sizeof needle, "127.0.0.1:%d", port);
    RankArg client = {port, 1, 2, 2.0};
    double t0 = now_s();
    test_expect_error("rendezvous, nobody listens", run_rank_fn, &client, needle, "within 2 s");
    double dt = now_s() - t0;
    snprintf(what, sizeof what, "rank 1 gave up after %.2f s (deadline 2 s)", dt);
    test_check(dt > 1.5 && dt < 6.0, what);

    RankArg server = {launch_free_port(), 0, 2, 1.5};
    snprintf(needle, sizeof needle, "port %d", server.port);
    t0 = now_s();
    test_expect_error("rendezvous, a rank missing", run_rank_fn, &server, needle, "0 of the other 1");
    dt = now_s() - t0;
    snprintf(what, sizeof what, "rank 0 gave up after %.2f s (deadline 1.5 s)", dt);
    test_check(dt > 1.0 && dt < 5.5, what);

    // a rank started with another WORLD_SIZE: rank 0 names both sizes
    RankArg mismatch = {launch_free_port(), 0, 2, 10.0};
    fflush(stdout);
    pid_t other = fork();
    if (other == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        _exit(rank_run(mismatch.port, 1, 3, 128, 10.0));
    }
    test_expect_error("rendezvous, WORLD_SIZE mismatch", run_rank_fn, &mismatch, "WORLD_SIZE=3", "rank 0 has 2");
    int st = 0;
    waitpid(other, &st, 0);
    test_check(WIFEXITED(st) && WEXITSTATUS(st) == 1, "rendezvous, WORLD_SIZE mismatch: the other rank fails too");
}

// ---- environment -> Comm -----------------------------------------------------------------

static void comm_init_fn(const void *p) {
    env_set((const char *const *)p);
    Comm c;
    comm_init(&c);
}

static void attach_cpu_fn(const void *p) {
    env_set((const char *const *)p);
    Comm c;
    comm_init(&c);
    comm_attach_device(&c, "cpu");
}

static void expect_comm(const char *what, const char *const *kv, int rank, int world, int local, const char *launcher) {
    env_set(kv);
    Comm c;
    comm_init(&c);
    char desc[256];
    snprintf(desc, sizeof desc, "%-34s -> rank %d world %d local %d launcher %s mpi %d", what, c.rank, c.world,
             c.local_rank, c.launcher, c.mpi);
    test_check(c.rank == rank && c.world == world && c.local_rank == local && !strcmp(c.launcher, launcher) && !c.mpi,
               desc);
}

static void test_env(void) {
    const char *torchrun[] = {"WORLD_SIZE=4", "RANK=3", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", NULL};
    expect_comm("torchrun variables", torchrun, 3, 4, 1, "torchrun");
    const char *spawned[] = {"WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                             "T5_LAUNCHER=num_gpus", NULL};
    expect_comm("--num_gpus child", spawned, 1, 2, 1, "num_gpus");
    const char *slurm[] = {"SLURM_NTASKS=8", "SLURM_PROCID=5", "SLURM_LOCALID=1", "MASTER_ADDR=node1",
                           "MASTER_PORT=29500", NULL};
    expect_comm("Slurm variables", slurm, 5, 8, 1, "slurm");
    const char *slurm1[] = {"SLURM_NTASKS=1", "SLURM_PROCID=0", "SLURM_LOCALID=0", NULL};
    expect_comm("Slurm, one task", slurm1, 0, 1, 0, "none");
    const char *world1[] = {"WORLD_SIZE=1", "RANK=0", "LOCAL_RANK=0", NULL};
    expect_comm("WORLD_SIZE=1 (no MASTER_* needed)", world1, 0, 1, 0, "torchrun");
    expect_comm("no launcher", NULL, 0, 1, 0, "none");
    const char *plain[] = {"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", NULL};
    const char *agent[] = {"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    for (int k = 0; k < 2; k++) {
        env_set(k ? agent : plain);
        const char *addr = NULL;
        int port = 0;
        launch_master_addr("torchrun", &addr, &port);
        char what[160];
        snprintf(what, sizeof what, "rendezvous at %s:%d (MASTER_PORT 29500%s)", addr, port,
                 k ? ", torchrun's agent holds it" : "");
        test_check(!strcmp(addr, "10.0.0.1") && port == (k ? 29501 : 29500), what);
    }

    const char *no_addr[] = {"WORLD_SIZE=2", "RANK=0", NULL};
    test_expect_error("WORLD_SIZE=2 without MASTER_ADDR", comm_init_fn, no_addr, "MASTER_ADDR", NULL);
    const char *no_port[] = {"WORLD_SIZE=2", "RANK=0", "MASTER_ADDR=127.0.0.1", NULL};
    test_expect_error("WORLD_SIZE=2 without MASTER_PORT", comm_init_fn, no_port, "MASTER_PORT", NULL);
    const char *bad_port[] = {"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=70000", NULL};
    test_expect_error("MASTER_PORT=70000", comm_init_fn, bad_port, "MASTER_PORT=70000", NULL);
    const char *bad_rank[] = {"WORLD_SIZE=2", "RANK=2", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    test_expect_error("RANK=2 of 2", comm_init_fn, bad_rank, "RANK=2", NULL);
    const char *no_rank[] = {"WORLD_SIZE=2", NULL};
    test_expect_error("WORLD_SIZE=2 without RANK", comm_init_fn, no_rank, "RANK", NULL);
    const char *no_local[] = {"WORLD_SIZE=2", "RANK=1", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    test_expect_error("WORLD_SIZE=2 without LOCAL_RANK", comm_init_fn, no_local, "LOCAL_RANK", NULL);
    const char *junk[] = {"WORLD_SIZE=two", NULL};
    test_expect_error("WORLD_SIZE=two", comm_init_fn, junk, "WORLD_SIZE=\"two\"", NULL);
    const char *slurm_no_addr[] = {"SLURM_NTASKS=2", "SLURM_PROCID=0", "SLURM_LOCALID=0", NULL};
    test_expect_error("Slurm without MASTER_ADDR", comm_init_fn, slurm_no_addr, "MASTER_ADDR", "scontrol show hostnames");
    test_expect_error("torchrun, 2 CPU ranks", attach_cpu_fn, torchrun, "mpirun", NULL);
    test_expect_error("Slurm, 8 CPU ranks", attach_cpu_fn, slurm, "mpirun", NULL);
    env_set(NULL);
}

// ---- --num_gpus ------------------------------------------------------------------------------

// A rank re-executed by launch_spawn: argv = {exe, "child", MODE}. Checks what the launcher
// set, then does what MODE says.
static int child_main(int argc, char **argv) {
    const char *mode = argc > 2 ? argv[2] : "?";
    for (int i = 0; i < argc; i++)
        if (strstr(argv[i], "num_gpus")) {
            fprintf(stderr, "child: argv still holds %s\n", argv[i]);
            return 4;
        }
    Comm c;
    comm_init(&c);
    const char *local = getenv("LOCAL_RANK"), *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (c.world != 3 || strcmp(c.launcher, "num_gpus") != 0 || !local || atoi(local) != c.rank ||
        c.local_rank != c.rank || !addr || strcmp(addr, "127.0.0.1") != 0 || !port || c.mpi) {
        fprintf(stderr, "child: unexpected launch environment (rank %d world %d launcher %s)\n", c.rank, c.world,
                c.launcher);
        return 4;
    }
    if (!strcmp(mode, "ok")) return rank_run(atoi(port), c.rank, c.world, 128, 20.0);
    if (!strcmp(mode, "freeze")) {  // as GPU ranks meet (comm_nccl_init), then rank 1 freezes
        unsigned char id[128] = {0};
        launch_tcp_broadcast_watched(addr, atoi(port), c.rank, c.world, id, sizeof id, 20.0);
        if (c.rank == 1) raise(SIGSTOP);
    }
    if (!strcmp(mode, "stopped")) {  // no heartbeat: rank 1 stopped, rank 2 fails
        if (c.rank == 1) raise(SIGSTOP);
        if (c.rank == 2) {
            sleep(1);
            return 3;
        }
    }
    if (!strcmp(mode, "fail") && c.rank == 1) return 3;
    if (!strcmp(mode, "signal") && c.rank == 2) kill(getpid(), SIGKILL);
    if (!strcmp(mode, "stop")) {  // a training rank: the stop signal handler, a "checkpoint" of 1 s, exit 0
        signals_install();
        char ready[600];
        snprintf(ready, sizeof ready, "%s/ready%d", getenv("T5_TEST_READY_DIR"), c.rank);
        FILE *f = fopen(ready, "w");
        if (f) fclose(f);
        for (int i = 0; i < 6000 && !signals_received(); i++) usleep(10000);
        if (!signals_received()) return 5;
        for (double t0 = now_s(); now_s() - t0 < 1.0;) usleep(10000);  // a signal cuts a usleep short
        return 0;
    }
    if (!strcmp(mode, "stubborn")) {
        if (c.rank == 1) {
            sleep(1);  // let the others install their handlers
            return 3;
        }
        if (c.rank == 0) signal(SIGTERM, SIG_IGN);
    }
    sleep(60);  // the launcher must stop this rank long before
    return 0;
}

typedef struct {
    const char *exe, *mode;
    double grace_s;
} SpawnArg;

static int spawn(const SpawnArg *a) {
    char *argv[] = {(char *)a->exe, "child", (char *)a->mode, "--num_gpus", "3", NULL};
    return launch_spawn(3, 5, argv, a->grace_s);
}

static void spawn_fn(const void *p) { exit(spawn((const SpawnArg *)p)); }

// Processes (not zombies) running this binary as a rank of `mode`.
static int children_left(const char *mode) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        size_t a = strlen(buf);  // argv[0] \0 "child" \0 mode
        if (a + 1 >= k || strcmp(buf + a + 1, "child") != 0 || a + 7 >= k || strcmp(buf + a + 7, mode) != 0) continue;
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        f = fopen(path, "r");
        if (!f) continue;
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *paren = strrchr(buf, ')');
        if (paren && paren[2] != 'Z') n++;
    }
    if (d) closedir(d);
    return n;
}

// launch_spawn in a child with stderr captured; returns its exit code, *dt its run time.
static int spawn_capture(const SpawnArg *a, char *err, size_t cap, double *dt) {
    int fds[2];
    if (pipe(fds) != 0) exit(2);
    fflush(stdout);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        spawn_fn(a);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *dt = now_s() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_spawn_frozen(const char *exe) {
    char what[300], err[8192];
    double dt = 0;
    env_set(NULL);
    // rank 1 stopped while rank 2 fails: the SIGTERM comes with SIGCONT, so rank 1 ends at once
    SpawnArg stopped = {exe, "stopped", 20.0};
    int code = spawn_capture(&stopped, err, sizeof err, &dt);
    snprintf(what, sizeof what, "--num_gpus, rank 1 stopped, rank 2 exits 3: the job ends after %.2f s (grace 20 s), "
             "exit %d: %.*s", dt, code, (int)strcspn(err, "\n"), err);
    test_check(code == 1 && dt < 6 && strstr(err, "rank 2 exited with status 3"), what);
    snprintf(what, sizeof what, "--num_gpus, rank 1 stopped: no child left (%d)", children_left("stopped"));
    test_check(children_left("stopped") == 0, what);

    // the heartbeat: rank 1 stops itself after the rendezvous; rank 0 names it
    setenv("T5_HEARTBEAT_TIMEOUT", "3", 1);
    SpawnArg frozen = {exe, "freeze", LAUNCH_GRACE_S};
    code = spawn_capture(&frozen, err, sizeof err, &dt);
    unsetenv("T5_HEARTBEAT_TIMEOUT");
    const char *line = strstr(err, "rank 1 of 3 stopped responding");
    snprintf(what, sizeof what, "--num_gpus, rank 1 frozen (SIGSTOP) after the rendezvous: the job ends after %.2f s "
             "(<= 30; heartbeat timeout 3 s), exit %d: %.*s", dt, code, line ? (int)strcspn(line, "\n") : 9,
             line ? line : "(missing)");
    test_check(code == 1 && dt <= 30 && line, what);
    snprintf(what, sizeof what, "--num_gpus, rank 1 frozen: no child left (%d)", children_left("freeze"));
    test_check(children_left("freeze") == 0, what);
}

// ---- --local_rank ---------------------------------------------------------------------------

static void local_rank_fn(const void *p) {
    const char *const *kv = p;
    env_set(kv + 1);
    launch_use_local_rank_flag(atoi(kv[0]));
}

static void args_fn(const void *p) {
    char **argv = (char **)p;
    int argc = 0;
    while (argv[argc]) argc++;
    TrainArgs a = train_args_default();
    train_args_parse(&a, argc, argv, 1);
}

static void test_local_rank(void) {
    const char *torchrun[] = {"1", "WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    local_rank_fn(torchrun);
    Comm c;
    comm_init(&c);
    test_check(c.local_rank == 1 && c.rank == 1, "--local_rank=1 with LOCAL_RANK=1 (torch.distributed.launch): local rank 1");
    const char *alone[] = {"2", NULL};
    local_rank_fn(alone);
    comm_init(&c);
    const char *lr = getenv("LOCAL_RANK");
    char what[160];
    snprintf(what, sizeof what, "--local_rank=2 alone: LOCAL_RANK=%s, one rank on GPU %d", lr ? lr : "(unset)",
             c.local_rank);
    test_check(lr && !strcmp(lr, "2") && c.world == 1 && c.local_rank == 2, what);
    const char *none[] = {"-1", NULL};
    local_rank_fn(none);
    test_check(!getenv("LOCAL_RANK"), "--local_rank -1 (HF's default): nothing set");
    const char *differ[] = {"0", "WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    test_expect_error("--local_rank 0 with LOCAL_RANK=1", local_rank_fn, differ, "--local_rank 0", "LOCAL_RANK=1");
    const char *mpi[] = {"1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0", NULL};
    test_expect_error("--local_rank 1 under mpirun's 0", local_rank_fn, mpi, "--local_rank 1",
                      "OMPI_COMM_WORLD_LOCAL_RANK=0");
    const char *neg[] = {"-3", NULL};
    test_expect_error("--local_rank -3", local_rank_fn, neg, "--local_rank -3", NULL);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");

    // the trainer's flag, in the spellings launchers use
    const char *spell[3] = {"--local_rank=1", "--local-rank=1", "--local_rank"};
    for (int k = 0; k < 3; k++) {
        env_set(NULL);
        char *argv[] = {"train_t5", (char *)spell[k], k == 2 ? "1" : "--help", "--help", NULL};
        TrainArgs a = train_args_default();
        train_args_parse(&a, 4, argv, 1);
        snprintf(what, sizeof what, "train_t5 %s%s: local_rank %d", spell[k], k == 2 ? " 1" : "", a.local_rank);
        test_check(a.local_rank == 1, what);
    }
    char *both[] = {"train_t5", "--model", "m", "--output_dir", "o", "--do_train", "--data_dir", "d", "--device",
                    "cuda", "--num_gpus", "2", "--local_rank=0", NULL};
    test_expect_error("--num_gpus with --local_rank", args_fn, both, "--local_rank", NULL);
    env_set(NULL);
}

static void test_spawn(const char *exe) {
    char what[200];
    env_set(NULL);
    SpawnArg ok = {exe, "ok", 5.0};
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) spawn_fn(&ok);
    int st = 0;
    waitpid(pid, &st, 0);
    snprintf(what, sizeof what, "--num_gpus 3: every rank sees its variables and gets rank 0's id (exit %d)",
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    test_check(WIFEXITED(st) && WEXITSTATUS(st) == 0, what);

    SpawnArg fail = {exe, "fail", 5.0}, sig = {exe, "signal", 5.0}, stubborn = {exe, "stubborn", 1.0};
    double t0 = now_s();
    test_expect_error("--num_gpus, rank 1 exits 3", spawn_fn, &fail, "rank 1", "exited with status 3");
    snprintf(what, sizeof what, "--num_gpus, rank 1 exits 3: the others stopped after %.2f s", now_s() - t0);
    test_check(now_s() - t0 < 10, what);
    t0 = now_s();
    test_expect_error("--num_gpus, rank 2 killed", spawn_fn, &sig, "rank 2", "killed by signal 9");
    snprintf(what, sizeof what, "--num_gpus, rank 2 killed: the others stopped after %.2f s", now_s() - t0);
    test_check(now_s() - t0 < 10, what);
    t0 = now_s();
    test_expect_error("--num_gpus, rank 0 ignores SIGTERM", spawn_fn, &stubborn, "rank 1", "exited with status 3");
    double dt = now_s() - t0;
    snprintf(what, sizeof what, "--num_gpus, rank 0 ignores SIGTERM: SIGKILL after the 1 s grace (%.2f s)", dt);
    test_check(dt > 1.9 && dt < 10, what);

    const char *torchrun[] = {"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    env_set(torchrun);
    test_expect_error("--num_gpus under WORLD_SIZE", spawn_fn, &ok, "--num_gpus", "WORLD_SIZE=2");
    const char *mpirun[] = {"OMPI_COMM_WORLD_SIZE=2", NULL};
    env_set(mpirun);
    test_expect_error("--num_gpus under mpirun", spawn_fn, &ok, "--num_gpus", "mpirun");
    env_set(NULL);
}

// A stop signal to the --num_gpus parent (trainer/signals.h): passed on to the ranks, which
// stop by themselves, exit 0, and the parent with them; the same signal to the whole process
// group (Ctrl-C, Slurm) reaches each rank twice, and the parent's copy is not a second signal;
// a second signal to the parent stops the ranks at once.
static void test_spawn_stop(const char *exe) {
    char dir[] = "/tmp/t5_test_launch_stop.XXXXXX", what[300];
    if (!mkdtemp(dir)) t5_fail("mkdtemp failed");
    setenv("T5_TEST_READY_DIR", dir, 1);
    const char *names[3] = {"SIGTERM to the parent", "SIGTERM to the process group", "SIGINT, then SIGTERM, to the parent"};
    for (int k = 0; k < 3; k++) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -f %s/ready*", dir);
        if (system(cmd) != 0) t5_fail("cannot clear %s", dir);
        env_set(NULL);
        SpawnArg stop = {exe, "stop", 5.0};
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);  // a group of its own: the launcher and its ranks
            char errlog[700];
            snprintf(errlog, sizeof errlog, "%s/stderr", dir);
            if (!freopen(errlog, "w", stderr)) _exit(3);
            spawn_fn(&stop);
        }
        setpgid(pid, pid);
        int ready = 0;
        for (int i = 0; i < 3000 && ready < 3; i++) {
            ready = 0;
            for (int r = 0; r < 3; r++) {
                char p[700];
                snprintf(p, sizeof p, "%s/ready%d", dir, r);
                ready += access(p, F_OK) == 0;
            }
            usleep(10000);
        }
        double t0 = now_s();
        if (k == 1) kill(-pid, SIGTERM);
        else kill(pid, k == 2 ? SIGINT : SIGTERM);
        if (k == 2) {
            usleep(300000);
            kill(pid, SIGTERM);
        }
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
        if (w != pid) printf("waitpid: %d errno %d\n", (int)w, errno);
        double dt = now_s() - t0;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (k < 2) {
            snprintf(what, sizeof what, "--num_gpus, %s: the 3 ranks stop after their 1 s checkpoint, exit 0 (exit %d, "
                     "%.2f s; ranks ready %d)", names[k], code, dt, ready);
            if (!test_check(code == 0 && dt >= 0.9 && dt < 10, what)) {
                snprintf(cmd, sizeof cmd, "sed 's/^/       | /' %s/stderr", dir);
                if (system(cmd) != 0) printf("       (no stderr)\n");
            }
        } else {
            snprintf(what, sizeof what, "--num_gpus, %s: the ranks are stopped at once, exit %d (want %d, %.2f s)",
                     names[k], code, 128 + SIGTERM, dt);
            test_check(code == 128 + SIGTERM && dt < 0.9, what);
        }
    }
    unsetenv("T5_TEST_READY_DIR");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "child")) return child_main(argc, argv);
    env_set(NULL);
    test_broadcast(128);  // an NCCL unique id
    test_broadcast(3u << 20);
    test_broadcast_failures();
    test_env();
    test_spawn(argv[0]);
    test_spawn_frozen(argv[0]);
    test_spawn_stop(argv[0]);
    test_local_rank();
    return test_summary();
}
