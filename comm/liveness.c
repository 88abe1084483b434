// comm/liveness.c: the heartbeat between ranks (see liveness.h). One thread per process; it
// owns the sockets and never touches stdio buffers the main thread may hold: a failure is
// one write(2) of the whole message to stderr, then _exit(1), as the NCCL watchdog does
// (the main thread may be blocked inside MPI, NCCL or CUDA, so it is not waited for).
#include "liveness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "hosts.h"
#include "../common/t5_env.h"

// A message: four 32-bit words in network order, {MAGIC | type, a, b, c}.
#define LV_MAGIC 0x4C560000u  // "LV"
enum { LV_HELLO = 1, LV_BEAT, LV_BYE, LV_FAIL };  // HELLO: a = pid, (b, c) = host key
enum { LV_FROZEN = 1, LV_ENDED = 2 };             // FAIL: a = rank, b = kind | noticer << 8, c = ms silent
#define LV_MSG 16
#define LV_OUT 512         // unsent bytes kept per peer (a peer that does not read is ended long before)
#define LV_TICK_S 0.25     // how often the thread looks
#define LV_SELF_GAP_S 1.0  // a tick this late: this process was not running, the silence is not the peers'

typedef struct {
    int rank, fd;  // fd -1: closed (after its goodbye)
    double last_heard;
    pid_t pid;      // from its hello; 0: not yet
    uint64_t host;  // same value: same kernel and pid namespace, so pid means the same process
    unsigned char in[LV_MSG], out[LV_OUT];
    size_t in_len, out_len;
} Peer;

static struct {
    int rank, world, n;
    double timeout_s;
    uint64_t host;
    Peer *peers;
    int wake[2];  // liveness_stop writes a byte to wake[1]
    pthread_t thread;
    int running;
} lv;


// The host of each rank, for messages (liveness_name_hosts); NULL until known or on one host.
// Published once with a release store, read by the thread with an acquire load; never freed.
static char (*lv_host_names)[HOST_NAME_CHARS];
static int lv_host_world;

void liveness_name_hosts(const void *host_layout) {
    const HostLayout *h = host_layout;
    if (!h || h->n_hosts < 2 || __atomic_load_n(&lv_host_names, __ATOMIC_ACQUIRE)) return;
    char (*names)[HOST_NAME_CHARS] = callocCheck((size_t)h->world, HOST_NAME_CHARS);
    for (int r = 0; r < h->world; r++) memcpy(names[r], h->names[h->host_of[r]], HOST_NAME_CHARS);
    lv_host_world = h->world;
    __atomic_store_n(&lv_host_names, names, __ATOMIC_RELEASE);
}

// " (host b)" for rank r when the hosts are known, else "".
static const char *host_of(int r, char *buf, size_t n) {
    char (*names)[HOST_NAME_CHARS] = __atomic_load_n(&lv_host_names, __ATOMIC_ACQUIRE);
    if (names && r >= 0 && r < lv_host_world) snprintf(buf, n, " (host %s)", names[r]);
    else buf[0] = '\0';
    return buf;
}

double liveness_timeout_s(void) {
    const char *v = t5_env_get(T5_ENV_HEARTBEAT_TIMEOUT);
    if (!v || !*v) return LIVENESS_DEFAULT_TIMEOUT_S;
    char *end = NULL;
    double s = strtod(v, &end);
    if (*end || !(s == 0 || (s >= LIVENESS_MIN_TIMEOUT_S && s <= 1e6)))
        t5_fail("T5_HEARTBEAT_TIMEOUT=\"%s\": expected seconds >= %.0f (a rank silent that long ends the job; default "
                "%.0f), or 0 to never end a silent rank", v, LIVENESS_MIN_TIMEOUT_S, LIVENESS_DEFAULT_TIMEOUT_S);
    return s;
}

// FNV-1a over the boot id and the pid namespace: equal keys, the pid is the same process.
// 0: unknown (never signal).
static uint64_t host_key(void) {
    char buf[256] = "";
    ssize_t k = 0;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        k = read(fd, buf, 64);
        close(fd);
    }
    if (k <= 0) return 0;
    ssize_t m = readlink("/proc/self/ns/pid", buf + k, sizeof buf - 1 - (size_t)k);
    if (m <= 0) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (ssize_t i = 0; i < k + m; i++) h = (h ^ (unsigned char)buf[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

// ---- messages ------------------------------------------------------------------------------

static void queue_msg(Peer *p, uint32_t type, uint32_t a, uint32_t b, uint32_t c) {
    if (p->fd < 0 || p->out_len + LV_MSG > LV_OUT) return;  // full: a beat more or less changes nothing
    uint32_t w[4] = {htonl(LV_MAGIC | type), htonl(a), htonl(b), htonl(c)};
    memcpy(p->out + p->out_len, w, LV_MSG);
    p->out_len += LV_MSG;
}

static void flush_peer(Peer *p) {
    while (p->fd >= 0 && p->out_len > 0) {
        ssize_t k = send(p->fd, p->out, p->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;  // full (EAGAIN) or broken: reading the socket tells which
        memmove(p->out, p->out + k, p->out_len - (size_t)k);
        p->out_len -= (size_t)k;
    }
}

// Everything queued out before the deadline, as far as the peers take it.
static void flush_all(double deadline) {
    for (;;) {
        int left = 0;
        for (int i = 0; i < lv.n; i++) {
            flush_peer(&lv.peers[i]);
            left += lv.peers[i].fd >= 0 && lv.peers[i].out_len > 0;
        }
        if (!left || clock_seconds() >= deadline) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

// ---- the end of the job ----------------------------------------------------------------------

// Tell the peers (but `from`, who told us) which rank failed, wake that rank when it is a
// stopped process here, print one error and end this process.
__attribute__((noreturn)) static void fail(int failed, int kind, int noticer, double silent_s, const Peer *from) {
    for (int i = 0; i < lv.n; i++)
        if (&lv.peers[i] != from)
            queue_msg(&lv.peers[i], LV_FAIL, (uint32_t)failed, (uint32_t)(kind | noticer << 8),
                      (uint32_t)(silent_s * 1000));
    flush_all(clock_seconds() + 1.0);
    if (kind == LV_FROZEN)
        for (int i = 0; i < lv.n; i++) {
            const Peer *p = &lv.peers[i];
            // SIGCONT: a stopped process resumes, reads the message and ends; a running one is unaffected
            if (p->rank == failed && p->pid > 0 && lv.host && p->host == lv.host) kill(p->pid, SIGCONT);
        }
    char msg[1024], hf[96], hn[96], hs[96];
    int k;
    host_of(failed, hf, sizeof hf);
    if (kind == LV_FROZEN)
        k = snprintf(msg, sizeof msg, "error: rank %d of %d%s stopped responding: no heartbeat for %.0f s (the process "
                     "is frozen, stopped, or its host is gone)", failed, lv.world, hf, silent_s);
    else
        k = snprintf(msg, sizeof msg, "error: rank %d of %d%s ended unexpectedly (its output says why)", failed,
                     lv.world, hf);
    if (noticer != lv.rank)
        k += snprintf(msg + k, sizeof msg - (size_t)k, "; rank %d%s noticed, rank %d%s stops too", noticer,
                      host_of(noticer, hn, sizeof hn), lv.rank, host_of(lv.rank, hs, sizeof hs));
    else if (hf[0])
        k += snprintf(msg + k, sizeof msg - (size_t)k, "; rank %d%s noticed", lv.rank, host_of(lv.rank, hs, sizeof hs));
    if (kind == LV_FROZEN)
        snprintf(msg + k, sizeof msg - (size_t)k,
                 "\nHINT: a stopped (SIGSTOP, Ctrl-Z, a debugger), swapping or hung process, or a lost host; the job "
                 "ends rather than wait forever. T5_HEARTBEAT_TIMEOUT=<seconds> sets the limit (0: never end a silent "
                 "rank)\n");
    else
        snprintf(msg + k, sizeof msg - (size_t)k,
                 "\nHINT: the job ends with it; rank %d's own error (or the launcher's line, if it was killed) says why%s\n",
                 failed, hf[0] ? ", in the output of the launcher on that host" : "");
    // stdout only when no other thread holds it (a main thread blocked in a write must not block the exit)
    if (ftrylockfile(stdout) == 0) {
        fflush_unlocked(stdout);
        funlockfile(stdout);
    }
    size_t len = strlen(msg), done = 0;
    while (done < len) {
        ssize_t w = write(STDERR_FILENO, msg + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    _exit(1);
}

// ---- the thread -------------------------------------------------------------------------------

// Read what peer p sent; handles every whole message. 0: the connection closed (EOF or error).
static int read_peer(Peer *p, double t) {
    for (;;) {
        ssize_t k = recv(p->fd, p->in + p->in_len, LV_MSG - p->in_len, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        if (k <= 0) return 0;
        p->in_len += (size_t)k;
        if (p->in_len < LV_MSG) continue;
        p->in_len = 0;
        uint32_t w[4];
        memcpy(w, p->in, LV_MSG);
        for (int i = 0; i < 4; i++) w[i] = ntohl(w[i]);
        if ((w[0] & 0xFFFF0000u) != LV_MAGIC) return 0;  // not our protocol: treat as a broken connection
        p->last_heard = t;
        switch (w[0] & 0xFFFF) {
        case LV_HELLO:
            p->pid = (pid_t)w[1];
            p->host = (uint64_t)w[2] << 32 | w[3];
            break;
        case LV_BYE:
            close(p->fd);  // finished cleanly: no longer watched
            p->fd = -1;
            return 1;
        case LV_FAIL:
            fail((int)w[1], (int)(w[2] & 0xFF), (int)(w[2] >> 8), w[3] / 1000.0, p);
        default:
            break;  // LV_BEAT
        }
    }
}

static void *thread_main(void *arg) {
    (void)arg;
    struct pollfd *pfd = callocCheck((size_t)lv.n + 1, sizeof(struct pollfd));
    double t = clock_seconds(), last_tick = t, next_beat = t;
    for (int i = 0; i < lv.n; i++) lv.peers[i].last_heard = t;
    int stop = 0;
    while (!stop) {
        int m = 0;
        pfd[m++] = (struct pollfd){lv.wake[0], POLLIN, 0};
        for (int i = 0; i < lv.n; i++)
            if (lv.peers[i].fd >= 0) pfd[m++] = (struct pollfd){lv.peers[i].fd, POLLIN, 0};
        poll(pfd, (nfds_t)m, (int)(LV_TICK_S * 1000));  // an error (EINTR, ENOMEM) is one tick: look again
        t = clock_seconds();
        if (t - last_tick > LV_SELF_GAP_S)  // this process was stopped or starved: start the peers' clocks anew
            for (int i = 0; i < lv.n; i++) lv.peers[i].last_heard = t;
        last_tick = t;
        if (pfd[0].revents) stop = 1;
        // read before judging: after a pause the peers' beats are waiting in the socket
        for (int i = 0; i < lv.n; i++) {
            Peer *p = &lv.peers[i];
            if (p->fd >= 0 && !read_peer(p, t)) fail(p->rank, LV_ENDED, lv.rank, 0, NULL);
        }
        if (stop) break;
        if (t >= next_beat) {
            for (int i = 0; i < lv.n; i++) queue_msg(&lv.peers[i], LV_BEAT, 0, 0, 0);
            next_beat = t + LIVENESS_BEAT_S;
        }
        for (int i = 0; i < lv.n; i++) flush_peer(&lv.peers[i]);
        if (lv.timeout_s > 0)
            for (int i = 0; i < lv.n; i++) {
                Peer *p = &lv.peers[i];
                if (p->fd >= 0 && t - p->last_heard > lv.timeout_s) fail(p->rank, LV_FROZEN, lv.rank, lv.timeout_s, NULL);
            }
    }
    for (int i = 0; i < lv.n; i++) queue_msg(&lv.peers[i], LV_BYE, 0, 0, 0);
    flush_all(clock_seconds() + 1.0);
    for (int i = 0; i < lv.n; i++) {
        Peer *p = &lv.peers[i];
        if (p->fd < 0) continue;
        // drop what is unread: closing with unread bytes would send a reset instead of a plain close
        unsigned char sink[256];
        while (recv(p->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
        close(p->fd);
        p->fd = -1;
    }
    free(pfd);
    return NULL;
}

void liveness_start(int rank, int world, const int *fds, double timeout_s) {
    if (world <= 1) return;
    if (lv.running) t5_fail("liveness_start: a heartbeat already runs in this process (a bug in the caller)");
    memset(&lv, 0, sizeof lv);
    lv.rank = rank;
    lv.world = world;
    lv.timeout_s = timeout_s;
    lv.host = host_key();
    lv.n = rank == 0 ? world - 1 : 1;
    lv.peers = callocCheck((size_t)lv.n, sizeof(Peer));
    for (int i = 0; i < lv.n; i++) {
        lv.peers[i].rank = rank == 0 ? i + 1 : 0;
        lv.peers[i].fd = rank == 0 ? fds[i + 1] : fds[0];
        if (lv.peers[i].fd < 0) t5_fail("liveness_start: no connection for rank %d (a bug in the caller)", lv.peers[i].rank);
        // the hello goes out now, not when the thread first runs: a rank stopped right after
        // this call is still known by its pid (to wake it)
        queue_msg(&lv.peers[i], LV_HELLO, (uint32_t)getpid(), (uint32_t)(lv.host >> 32), (uint32_t)lv.host);
        flush_peer(&lv.peers[i]);
    }
    if (pipe2(lv.wake, O_CLOEXEC) != 0)
        t5_die(__FILE__, __LINE__, strerror(errno), "the system is out of file descriptors (ulimit -n)");
    if (pthread_create(&lv.thread, NULL, thread_main, NULL) != 0)
        t5_die(__FILE__, __LINE__, "cannot start the heartbeat thread", "the system is out of threads (ulimit -u)");
    lv.running = 1;
}

void liveness_stop(void) {
    if (!lv.running) return;
    lv.running = 0;
    char b = 1;
    while (write(lv.wake[1], &b, 1) < 0 && errno == EINTR) {}
    pthread_join(lv.thread, NULL);
    close(lv.wake[0]);
    close(lv.wake[1]);
    free(lv.peers);
    lv.peers = NULL;
}
