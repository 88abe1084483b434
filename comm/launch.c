// comm/launch.c: launcher environments, the TCP rendezvous that carries the NCCL id, and
// --num_gpus (see launch.h).
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "liveness.h"
#include "../common/t5_env.h"

extern char **environ;

// ---- environment ----------------------------------------------------------------------

// 0: unset or empty; 1: *out holds the value. A value that is not an integer is an error.
static int env_int(const char *name, int *out);

int launch_slurm_tasks_on_node(const char *spec, int node) {
    if (!spec || node < 0) return 0;
    int at = 0;  // the first node of the current group
    for (const char *p = spec; *p;) {
        char *end = NULL;
        long tasks = strtol(p, &end, 10), times = 1;
        if (end == p || tasks < 1) return 0;
        p = end;
        if (*p == '(') {  // "(xN)"
            if (p[1] != 'x') return 0;
            times = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || times < 1) return 0;
            p = end + 1;
        }
        if (node < at + times) return (int)tasks;
        at += (int)times;
        if (*p == ',') p++;
        else if (*p) return 0;
    }
    return 0;
}

int launch_ranks_on_host(const char *launcher, int world) {
    int k = 0, node = 0;
    if (env_int("LOCAL_WORLD_SIZE", &k) && k > 0) return k;   // torchrun
    if (env_int("LOCAL_SIZE", &k) && k > 0) return k;         // the deepspeed launcher (launch.py)
    if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &k) && k > 0) return k;
    const char *s = getenv("SLURM_TASKS_PER_NODE");  // "2(x3),1": this node's entry (SLURM_NODEID)
    if (s && *s) {
        if (!env_int("SLURM_NODEID", &node)) node = 0;
        if ((k = launch_slurm_tasks_on_node(s, node)) > 0) return k;
    }
    return !strcmp(launcher, "none") || !strcmp(launcher, "num_gpus") ? world : 1;
}

static int env_int(const char *name, int *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < INT_MIN || x > INT_MAX) t5_fail("%s=\"%s\": expected an integer", name, v);
    *out = (int)x;
    return 1;
}

int launch_under_mpirun(void) {
    int n = 0;
    return (env_int("OMPI_COMM_WORLD_SIZE", &n) && n > 0) || (env_int("PMI_SIZE", &n) && n > 0);
}

void launch_master_addr(const char *launcher, const char **addr, int *port) {
    int slurm = !strcmp(launcher, "slurm");
    const char *what = slurm ? "a Slurm launch (SLURM_NTASKS > 1, no mpirun)"
                       : !strcmp(launcher, "num_gpus") ? "--num_gpus"
                                                       : "a torchrun-style launch (WORLD_SIZE > 1)";
    const char *hint = slurm ? "HINT: export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) "
                               "MASTER_PORT=29500 before srun"
                             : "HINT: torchrun and deepspeed set it; by hand, export MASTER_ADDR=<rank 0's host> "
                               "(127.0.0.1 on one host) MASTER_PORT=29500 for every rank";
    const char *a = getenv("MASTER_ADDR");
    if (!a || !*a)
        t5_fail("%s without MASTER_ADDR: the ranks meet at rank 0's MASTER_ADDR:MASTER_PORT; %s", what, hint);
    int p = 0;
    if (!env_int("MASTER_PORT", &p))
        t5_fail("%s without MASTER_PORT: the ranks meet at rank 0's MASTER_ADDR:MASTER_PORT; %s", what, hint);
    if (p < 1 || p > 65535) t5_fail("MASTER_PORT=%d: expected a TCP port in [1, 65535]", p);
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agent && !strcmp(agent, "True")) {  // torchrun's agent serves its own store on MASTER_PORT
        if (p == 65535) t5_fail("MASTER_PORT=65535 under torchrun: the rendezvous needs MASTER_PORT + 1; pick a lower port");
        p++;
    }
    *addr = a;
    *port = p;
}

int launch_env_read(LaunchEnv *e) {
    memset(e, 0, sizeof *e);
    int world = 0, rank = 0, local = 0;
    if (env_int("WORLD_SIZE", &world)) {
        const char *by = t5_env_get(T5_ENV_LAUNCHER);
        e->launcher = by && !strcmp(by, "num_gpus") ? "num_gpus" : "torchrun";
        if (world < 1) t5_fail("WORLD_SIZE=%d: must be >= 1", world);
        if (!env_int("RANK", &rank) && world > 1)
            t5_fail("WORLD_SIZE=%d is set but RANK is not: a torchrun-style launch sets RANK, LOCAL_RANK, MASTER_ADDR "
                    "and MASTER_PORT for every rank", world);
        if (rank < 0 || rank >= world) t5_fail("RANK=%d: must be in [0, WORLD_SIZE=%d)", rank, world);
        if (world > 1) {
            const char *addr;
            int port;
            launch_master_addr(e->launcher, &addr, &port);
        }
        if (!env_int("LOCAL_RANK", &local) && world > 1)
            t5_fail("WORLD_SIZE=%d is set but LOCAL_RANK is not: it picks this rank's GPU (torchrun sets it)", world);
        if (local < 0) t5_fail("LOCAL_RANK=%d: must be >= 0", local);
    } else if (env_int("SLURM_NTASKS", &world) && world > 1 && getenv("SLURM_PROCID")) {
        e->launcher = "slurm";
        env_int("SLURM_PROCID", &rank);
        if (rank < 0 || rank >= world) t5_fail("SLURM_PROCID=%d: must be in [0, SLURM_NTASKS=%d)", rank, world);
        const char *addr;
        int port;
        launch_master_addr(e->launcher, &addr, &port);
        if (!env_int("SLURM_LOCALID", &local) || local < 0)
            t5_fail("SLURM_LOCALID is missing or negative: it picks this rank's GPU (srun sets it)");
    } else {
        // one rank: LOCAL_RANK (or --local_rank, launch_use_local_rank_flag) still picks the GPU
        if (env_int("LOCAL_RANK", &local) && local < 0) t5_fail("LOCAL_RANK=%d: must be >= 0", local);
        e->local_rank = local;
        return 0;
    }
    e->rank = rank;
    e->world = world;
    e->local_rank = local;
    return 1;
}

void launch_use_local_rank_flag(int local_rank) {
    if (local_rank == -1) return;  // HF's default: not given
    if (local_rank < 0) t5_fail("--local_rank %d: must be >= 0 (the GPU index on this host), or -1 for none", local_rank);
    int env = 0;
    if (env_int("LOCAL_RANK", &env) && env != local_rank)
        t5_fail("--local_rank %d disagrees with LOCAL_RANK=%d: the launcher set both; pass one (deepspeed: "
                "--no_local_rank drops the flag)", local_rank, env);
    const char *mpi_local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (mpi_local && *mpi_local && atoi(mpi_local) != local_rank)
        t5_fail("--local_rank %d disagrees with mpirun's local rank OMPI_COMM_WORLD_LOCAL_RANK=%s: under mpirun drop "
                "--local_rank", local_rank, mpi_local);
    char buf[16];
    snprintf(buf, sizeof buf, "%d", local_rank);
    if (setenv("LOCAL_RANK", buf, 1) != 0) t5_die(__FILE__, __LINE__, strerror(errno), "the environment is full");
}

// ---- TCP rendezvous ----------------------------------------------------------------------

#define HELLO_MAGIC 0x54354944u  // "T5ID"


static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// Wait for `events` on fd until the deadline: 1 ready, 0 timed out.
static int fd_wait(int fd, short events, double deadline) {
    for (;;) {
        double left = deadline - clock_seconds();
        if (left <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 1;  // let the following call report the error
    }
}

typedef enum { IO_OK = 0, IO_ERROR, IO_TIMEOUT, IO_CLOSED } IoResult;

// Send or receive exactly n bytes on a non-blocking socket before the deadline.
static IoResult fd_io(int fd, void *buf, size_t n, int sending, double deadline) {
    char *p = buf;
    while (n > 0) {
        if (!fd_wait(fd, sending ? POLLOUT : POLLIN, deadline)) return IO_TIMEOUT;
        ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return IO_ERROR;
        }
        if (k == 0) return IO_CLOSED;
        p += k;
        n -= (size_t)k;
    }
    return IO_OK;
}

static void set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) t5_die(__FILE__, __LINE__, strerror(errno), NULL);
}

// Rank 0's listening socket on `port` (0: any free port); *bound gets the port.
static int tcp_listen(int port, int backlog, int *bound) {
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (ls < 0) t5_die(__FILE__, __LINE__, strerror(errno), "the system is out of sockets (ulimit -n)");
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = {htonl(INADDR_ANY)}};
    socklen_t len = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, backlog) != 0 ||
        getsockname(ls, (struct sockaddr *)&sa, &len) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "rank 0 cannot listen on port %d%s: %s", port, port ? " (MASTER_PORT)" : "",
                 strerror(errno));
        t5_die(__FILE__, __LINE__, msg, "another program or an earlier run holds this port: pick another MASTER_PORT");
    }
    *bound = ntohs(sa.sin_port);
    return ls;
}

// Rank 0: accept world-1 ranks on ls (then closed), check their hello, send each the blob.
// keep: fds[r] = the connection to rank r; NULL: closed.
static void tcp_serve(int ls, int port, int world, const void *blob, size_t n, double timeout_s, int *keep) {
    double deadline = clock_seconds() + timeout_s;
    int *fds = callocCheck((size_t)world, sizeof(int));
    int got = 0;
    while (got < world - 1) {
        if (!fd_wait(ls, POLLIN, deadline)) {
            char msg[256];
            snprintf(msg, sizeof msg, "rank 0 waited %.0f s on port %d: %d of the other %d rank(s) connected",
                     timeout_s, port, got, world - 1);
            t5_die(__FILE__, __LINE__, msg,
                   "start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and check that they can "
                   "reach rank 0's host (firewall); a rank that failed before this point says why in its own output");
        }
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        uint32_t hello[4];
        // something else knocking on the port (no hello, wrong magic): ignore it
        if (fd_io(fd, hello, sizeof hello, 0, clock_seconds() + 5 < deadline ? clock_seconds() + 5 : deadline) != IO_OK ||
            ntohl(hello[0]) != HELLO_MAGIC) {
            close(fd);
            continue;
        }
        int r = (int)ntohl(hello[1]), w = (int)ntohl(hello[2]);
        if (w != world)
            t5_fail("rank %d joined the rendezvous on port %d with WORLD_SIZE=%d, rank 0 has %d: start every rank "
                    "with the same world size", r, port, w, world);
        if ((size_t)ntohl(hello[3]) != n) t5_fail("rank %d expects %u bytes, rank 0 sends %zu", r, ntohl(hello[3]), n);
        if (r < 1 || r >= world || fds[r])
            t5_fail("a rank joined the rendezvous on port %d as rank %d, %s", port, r,
                    r < 1 || r >= world ? "outside [1, WORLD_SIZE)" : "which another rank already is: RANK must be unique");
        fds[r] = fd;
        got++;
    }
    close(ls);
    for (int r = 1; r < world; r++) {
        if (fd_io(fds[r], (void *)blob, n, 1, deadline) != IO_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "rank 0 could not send the NCCL id to rank %d: %s", r, strerror(errno));
            t5_die(__FILE__, __LINE__, msg, "that rank died during start-up: see its output");
        }
        if (keep) keep[r] = fds[r];
        else close(fds[r]);  // the hello was read in full, so close sends FIN after the data, no reset
    }
    if (keep) keep[0] = -1;
    free(fds);
}

// Ranks > 0: connect (retrying until the deadline), send the hello, receive the blob.
// Returns the connection when keep, else closes it and returns -1.
static int tcp_fetch(const char *addr, int port, int rank, int world, void *blob, size_t n, double timeout_s,
                     int keep) {
    double deadline = clock_seconds() + timeout_s;
    char port_str[16], last[256] = "no attempt";
    snprintf(port_str, sizeof port_str, "%d", port);
    int fd = -1;
    while (fd < 0) {
        if (clock_seconds() >= deadline) {
            char msg[512];
            snprintf(msg, sizeof msg, "rank %d could not reach rank 0 at %s:%d within %.0f s (%s)", rank, addr, port,
                     timeout_s, last);
            t5_die(__FILE__, __LINE__, msg,
                   "check MASTER_ADDR/MASTER_PORT (rank 0's host and a free port), that rank 0 is running, and that "
                   "its port is reachable from here");
        }
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int gai = getaddrinfo(addr, port_str, &hints, &res);
        if (gai != 0) snprintf(last, sizeof last, "cannot resolve %s: %s", addr, gai_strerror(gai));
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (s < 0) continue;
            set_nonblocking(s);
            int err = 0;
            if (connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
                err = errno;
                if (err == EINPROGRESS) {
                    socklen_t len = sizeof err;
                    double d = clock_seconds() + 2.0 < deadline ? clock_seconds() + 2.0 : deadline;
                    if (!fd_wait(s, POLLOUT, d)) err = ETIMEDOUT;
                    else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
                }
            }
            if (err == 0) fd = s;
            else {
                snprintf(last, sizeof last, "%s", strerror(err));
                close(s);
            }
        }
        if (res) freeaddrinfo(res);
        if (fd < 0) sleep_s(clock_seconds() + 0.1 < deadline ? 0.1 : 0.0);
    }
    uint32_t hello[4] = {htonl(HELLO_MAGIC), htonl((uint32_t)rank), htonl((uint32_t)world), htonl((uint32_t)n)};
    IoResult r = fd_io(fd, hello, sizeof hello, 1, deadline);
    if (r == IO_OK) r = fd_io(fd, blob, n, 0, deadline);
    int err = errno;
    if (r != IO_OK || !keep) close(fd);
    if (r != IO_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "rank %d: the rendezvous with rank 0 at %s:%d broke off: %s", rank, addr, port,
                 r == IO_TIMEOUT ? "no reply" : r == IO_CLOSED ? "rank 0 closed the connection" : strerror(err));
        t5_die(__FILE__, __LINE__, msg,
               "rank 0 failed (see its output), or another program owns MASTER_PORT on that host: pick another port");
    }
    return keep ? fd : -1;
}

// The rendezvous; keep: the connections stay open in fds (see launch_tcp_broadcast_watched).
static void tcp_meet(const char *addr, int port, int listen_fd, int rank, int world, void *blob, size_t n,
                     double timeout_s, int *keep) {
    if (n > UINT32_MAX) t5_fail("launch_tcp_broadcast: %zu bytes is more than the rendezvous carries", n);
    if (rank == 0) {
        int bound = port;
        if (listen_fd < 0) listen_fd = tcp_listen(port, world, &bound);
        tcp_serve(listen_fd, bound, world, blob, n, timeout_s, keep);
    } else {
        int fd = tcp_fetch(addr, port, rank, world, blob, n, timeout_s, keep != NULL);
        if (keep) keep[0] = fd;
    }
}

void launch_tcp_broadcast(const char *addr, int port, int rank, int world, void *blob, size_t n, double timeout_s) {
    if (world <= 1) return;
    tcp_meet(addr, port, -1, rank, world, blob, n, timeout_s, NULL);
}

void launch_tcp_broadcast_watched(const char *addr, int port, int rank, int world, void *blob, size_t n,
                                  double timeout_s) {
    if (world <= 1) return;
    double hb = liveness_timeout_s();  // a malformed value fails before anyone waits
    int *fds = callocCheck((size_t)world, sizeof(int));
    tcp_meet(addr, port, -1, rank, world, blob, n, timeout_s, fds);
    liveness_start(rank, world, fds, hb);
    free(fds);
}

int launch_tcp_listen_any(LaunchRank0 *at) {
    memset(at, 0, sizeof *at);
    if (gethostname(at->host, sizeof at->host - 1) != 0)
        t5_die(__FILE__, __LINE__, strerror(errno), "gethostname failed: check the host's configuration");
    return tcp_listen(0, 64, &at->port);
}

void launch_tcp_watch(const LaunchRank0 *at, int listen_fd, int rank, int world) {
    if (world <= 1) return;
    double hb = liveness_timeout_s();
    char host[sizeof at->host] = "";
    gethostname(host, sizeof host - 1);
    // the same host: loopback always works; elsewhere MASTER_ADDR (when set) beats a host name
    // that may not resolve everywhere
    const char *addr = !strcmp(host, at->host) ? "127.0.0.1" : getenv("MASTER_ADDR") && *getenv("MASTER_ADDR")
                                                                  ? getenv("MASTER_ADDR")
                                                                  : at->host;
    int *fds = callocCheck((size_t)world, sizeof(int));
    tcp_meet(addr, at->port, listen_fd, rank, world, NULL, 0, LAUNCH_TCP_TIMEOUT_S, fds);
    liveness_start(rank, world, fds, hb);
    free(fds);
}

int launch_free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_ANY)}};
    socklen_t len = sizeof sa;
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || getsockname(s, (struct sockaddr *)&sa, &len) != 0)
        t5_die(__FILE__, __LINE__, strerror(errno), "no free TCP port on this host?");
    close(s);
    return ntohs(sa.sin_port);
}

// ---- --num_gpus ----------------------------------------------------------------------------

static volatile sig_atomic_t spawn_signal, spawn_signals;  // the last signal, and how many came
static void spawn_on_signal(int sig) {
    spawn_signal = sig;
    spawn_signals++;
}

// environ without the launcher variables, plus this rank's.
// *own: the index of the first of the six strings allocated here (the caller frees them).
static char **child_env(int rank, int n, int port, size_t *own) {
    static const char *const drop[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
                                       "T5_LAUNCHER="};
    size_t count = 0;
    while (environ[count]) count++;
    char **env = callocCheck(count + 8, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        int keep = 1;
        for (size_t d = 0; d < sizeof drop / sizeof drop[0]; d++)
            if (!strncmp(environ[i], drop[d], strlen(drop[d]))) keep = 0;
        if (keep) env[k++] = environ[i];
    }
    *own = k;
    char buf[64];
    const char *vars[6][2] = {{"RANK", NULL}, {"LOCAL_RANK", NULL}, {"WORLD_SIZE", NULL},
                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", NULL}, {"T5_LAUNCHER", "num_gpus"}};
    for (int v = 0; v < 6; v++) {
        int num = v == 0 || v == 1 ? rank : v == 2 ? n : port;
        if (vars[v][1]) snprintf(buf, sizeof buf, "%s=%s", vars[v][0], vars[v][1]);
        else snprintf(buf, sizeof buf, "%s=%d", vars[v][0], num);
        env[k] = mallocCheck(strlen(buf) + 1);
        strcpy(env[k++], buf);
    }
    return env;
}

static void describe_status(int status, char *out, size_t cap) {
    if (WIFEXITED(status)) snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(out, cap, "ended with wait status %d", status);
}

// SIGTERM (+ SIGCONT) to every live child, SIGKILL to those still alive after grace_s; reaps them all.
static void stop_children(pid_t *pids, int n, double grace_s) {
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGTERM);
            kill(pids[i], SIGCONT);  // a stopped (frozen) rank acts on SIGTERM only once it runs again
        }
    double deadline = clock_seconds() + grace_s;
    for (;;) {
        int alive = 0;
        for (int i = 0; i < n; i++)
            if (pids[i] > 0) {
                if (waitpid(pids[i], NULL, WNOHANG) == pids[i]) pids[i] = 0;
                else alive++;
            }
        if (!alive) return;
        if (clock_seconds() >= deadline) break;
        sleep_s(0.05);
    }
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

enum { SPAWN_NSIGS = 3 };
static const int SPAWN_SIGS[SPAWN_NSIGS] = {SIGINT, SIGTERM, SIGHUP};

// Fork and exec the n ranks (pids[i] > 0 for each started one). Returns the first rank
// that could not be started (its reason in why), or -1.
static int spawn_start_ranks(int n, int port, char **cargv, const struct sigaction *old, pid_t *pids, char *why,
                             size_t why_cap) {
    const int *sigs = SPAWN_SIGS;
    pid_t parent = getpid();
    int failed = -1;
    for (int i = 0; i < n && failed < 0; i++) {
        size_t own = 0;
        char **env = child_env(i, n, port, &own);
        // a SIGTERM between fork and the child's own handlers would run the parent's (and be
        // lost): blocked until they are restored, it then ends the child as it should
        sigset_t block, prev;
        sigemptyset(&block);
        for (int s = 0; s < 3; s++) sigaddset(&block, sigs[s]);
        sigprocmask(SIG_BLOCK, &block, &prev);
        pid_t pid = fork();
        if (pid == 0) {
            for (int s = 0; s < 3; s++) sigaction(sigs[s], &old[s], NULL);
            sigprocmask(SIG_SETMASK, &prev, NULL);
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // the parent killed outright takes its ranks along
            if (getppid() != parent) _exit(1);
            execve("/proc/self/exe", cargv, env);
            fprintf(stderr, "error: --num_gpus: cannot execute /proc/self/exe for rank %d: %s\n", i, strerror(errno));
            _exit(127);
        }
        sigprocmask(SIG_SETMASK, &prev, NULL);
        if (pid < 0) {
            failed = i;
            snprintf(why, why_cap, "could not be started: fork: %s", strerror(errno));
        } else {
            pids[i] = pid;
        }
        for (size_t v = own; env[v]; v++) free(env[v]);
        free(env);
    }
    return failed;
}

// Wait for the ranks until all exited, one failed (returned, its reason in why) or a
// signal came (spawn_signal). Returns -1 when no rank failed.
static int spawn_wait_ranks(int n, pid_t *pids, char *why, size_t why_cap) {
    int failed = -1, status = 0;
    int alive = 0;
    for (int i = 0; i < n; i++) alive += pids[i] > 0;
    while (alive > 0 && failed < 0 && !spawn_signal) {
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < n; i++)
            if (pids[i] == pid) {
                pids[i] = 0;
                alive--;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                    failed = i;
                    describe_status(status, why, why_cap);
                }
            }
    }
    return failed;
}

// A stop signal to this process: passed on to every live rank (SIGHUP as SIGTERM, which the
// ranks handle), which finish their step, save a checkpoint and exit 0 (trainer/signals.h: a
// copy from this process is not their second signal, so a Ctrl-C that reached them too stops
// them once). Waits for them; returns the first rank that failed, or -1. A second signal
// here leaves the ranks to the caller (stopped at once).
static int spawn_pass_signal(int n, pid_t *pids, char *why, size_t why_cap) {
    int sig = spawn_signal == SIGHUP ? SIGTERM : spawn_signal;
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], sig);
            kill(pids[i], SIGCONT);  // a stopped rank acts on it once it runs again
        }
    spawn_signal = 0;
    return spawn_wait_ranks(n, pids, why, why_cap);
}

int launch_spawn(int n, int argc, char **argv, double grace_s) {
    if (n < 1) t5_fail("--num_gpus %d: must be >= 1 (the number of GPU ranks to start on this host)", n);
    if (launch_under_mpirun())
        t5_fail("--num_gpus under mpirun: mpirun already starts the ranks (one GPU each); drop --num_gpus");
    if (getenv("WORLD_SIZE"))
        t5_fail("--num_gpus with WORLD_SIZE=%s set: a launcher (torchrun, deepspeed, --num_gpus) already started "
                "the ranks; drop --num_gpus or unset WORLD_SIZE", getenv("WORLD_SIZE"));
    int port = launch_free_port();
    // argv without "--num_gpus N" / "--num_gpus=N"
    char **cargv = callocCheck((size_t)argc + 1, sizeof(char *));
    int k = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--num_gpus")) {
            i++;
            continue;
        }
        if (i > 0 && !strncmp(argv[i], "--num_gpus=", 11)) continue;
        cargv[k++] = argv[i];
    }
    struct sigaction sa, old[SPAWN_NSIGS];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = spawn_on_signal;  // no SA_RESTART: waitpid returns EINTR
    const int *sigs = SPAWN_SIGS;
    spawn_signal = spawn_signals = 0;
    for (int s = 0; s < 3; s++) sigaction(sigs[s], &sa, &old[s]);
    fflush(stdout);
    fflush(stderr);
    pid_t *pids = callocCheck((size_t)n, sizeof(pid_t));
    char why[160] = "";
    int failed = spawn_start_ranks(n, port, cargv, old, pids, why, sizeof why);
    if (failed < 0) failed = spawn_wait_ranks(n, pids, why, sizeof why);
    int first_signal = spawn_signal;
    if (failed < 0 && spawn_signal) failed = spawn_pass_signal(n, pids, why, sizeof why);
    int code = 0;
    if (failed < 0 && first_signal && !spawn_signal) {  // every rank stopped by itself, after its checkpoint
        fflush(stdout);
        fprintf(stderr, "--num_gpus %d: got signal %d (%s): passed on to the ranks, which stopped after saving a "
                "checkpoint\n", n, first_signal, strsignal(first_signal));
    } else if (failed >= 0 || spawn_signal) {
        stop_children(pids, n, spawn_signals >= 2 ? 0.0 : grace_s);  // a second signal: at once
        fflush(stdout);
        if (failed >= 0) {
            fprintf(stderr, "error: --num_gpus %d: rank %d %s; the other ranks were stopped\n", n, failed, why);
            code = 1;
        } else {
            fprintf(stderr, "error: --num_gpus %d: got signal %d (%s); the ranks were stopped\n", n, (int)spawn_signal,
                    strsignal(spawn_signal));
            code = 128 + spawn_signal;
        }
    }
    for (int s = 0; s < 3; s++) sigaction(sigs[s], &old[s], NULL);
    free(pids);
    free(cargv);
    return code;
}
