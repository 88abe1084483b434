// zero/nvme.c: the NVMe store of the optimizer offload (see nvme.h).
#include "nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/file_open.h"

static size_t round_up(size_t x) { return (x + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }

void nvme_check_dir(const char *dir, const char *key, const char *config_path) {
    struct stat st;
    if (stat(dir, &st) != 0)
        t5_fail("%s: key \"%s\": \"%s\" does not exist (%s); HINT: create the directory on a fast local disk, or "
                "use \"device\": \"cpu\"", config_path, key, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        t5_fail("%s: key \"%s\": \"%s\" is not a directory; HINT: give a directory on a fast local disk", config_path,
                key, dir);
    if (access(dir, W_OK | X_OK) != 0)
        t5_fail("%s: key \"%s\": the directory \"%s\" is not writable (%s); HINT: fix its permissions or choose "
                "another directory", config_path, key, dir, strerror(errno));
}

// Linux native AIO through its system calls (no libaio needed).
static long sys_io_setup(unsigned nr, aio_context_t *ctx) { return syscall(SYS_io_setup, nr, ctx); }
static long sys_io_destroy(aio_context_t ctx) { return syscall(SYS_io_destroy, ctx); }
static long sys_io_submit(aio_context_t ctx, long n, struct iocb **cbs) { return syscall(SYS_io_submit, ctx, n, cbs); }
static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event *ev) {
    return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

// Can this process set up an AIO context of queue_depth? 1 yes; 0 the kernel has no native AIO
// for it (ENOSYS, EPERM: said, and pread/pwrite used); a depth beyond the system's limit is an error.
static int native_aio_works(int queue_depth) {
    aio_context_t ctx = 0;
    if (sys_io_setup((unsigned)queue_depth, &ctx) == 0) {
        sys_io_destroy(ctx);
        return 1;
    }
    if (errno == EAGAIN || errno == EINVAL)
        t5_fail("aio: an AIO context of queue_depth %d requests cannot be set up (%s); HINT: a smaller \"aio\": "
                "{\"queue_depth\": ...} (DeepSpeed's default 8), or raise the system's limit (sysctl fs.aio-max-nr)",
                queue_depth, strerror(errno));
    return 0;
}

void nvme_describe(const NvmeStore *s, char *out, size_t cap) {
    const NvmeAio *a = &s->aio;
    if (s->native_aio)
        snprintf(out, cap, "Linux native AIO%s, requests of %zu B, queue depth %d, %d thread%s, %s submits, %s "
                 "completions", s->direct ? ", O_DIRECT" : " (buffered)", a->block_size, a->queue_depth, a->threads,
                 a->threads == 1 ? "" : "s", a->single_submit ? "single" : "batched",
                 a->overlap_events ? "overlapped" : "batch-wise");
    else
        snprintf(out, cap, "pread/pwrite%s (no native AIO here), requests of %zu B, %d thread%s", s->direct ? ", O_DIRECT"
                 : " (buffered)", a->block_size, a->threads, a->threads == 1 ? "" : "s");
}

void nvme_open(NvmeStore *s, const char *dir, int rank, size_t n, const NvmeAio *aio) {
    memset(s, 0, sizeof *s);
    s->aio = aio ? *aio : NVME_AIO_DEFAULT;
    if (s->aio.block_size == 0 || s->aio.block_size % NVME_ALIGN || s->aio.queue_depth < 1 || s->aio.threads < 1)
        t5_die(__FILE__, __LINE__, "nvme_open: aio settings out of range", "a bug: the config loader checks them");
    s->stats = callocCheck(1, sizeof *s->stats);
    s->native_aio = native_aio_works(s->aio.queue_depth);
    if (!s->native_aio)
        fprintf(stderr, "NOTICE: aio: this kernel refuses Linux native AIO (io_setup: %s): each I/O thread reads and "
                        "writes its requests one at a time with pread/pwrite (queue_depth, single_submit and "
                        "overlap_events change nothing)\n", strerror(errno));
    s->n = n;
    s->stride = round_up(n * sizeof(float));
    int len = snprintf(s->path, sizeof s->path, "%s/train_t5_optimizer_rank%d_%ld.swp", dir, rank, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof s->path)
        t5_fail("nvme_path \"%s\": the path is too long (%d characters); HINT: a shorter directory", dir, len);
    static const char what[] = "the optimizer's swap file in nvme_path";  // a FIFO or device there: refused
    s->fd = file_open_regular_fd(s->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600, what);
    s->direct = s->fd >= 0;
    if (s->fd < 0 && errno == EINVAL)
        s->fd = file_open_regular_fd(s->path, O_RDWR | O_CREAT | O_TRUNC, 0600, what);  // no O_DIRECT here
    if (s->fd < 0)
        t5_fail("nvme_path: cannot create \"%s\" (%s); HINT: check that the directory is writable and not full",
                s->path, strerror(errno));
    if (!s->direct)
        fprintf(stderr, "NOTICE: nvme_path: %s does not take O_DIRECT: the optimizer state goes through the page "
                        "cache (host memory may hold it)\n", dir);
    off_t bytes = (off_t)(s->stride * NVME_ARRAYS);
    int rc = bytes ? posix_fallocate(s->fd, 0, bytes) : 0;
    if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(s->fd, bytes) == 0 ? 0 : errno;  // no preallocation there
    if (rc != 0) {
        unlink(s->path);
        t5_fail("nvme_path: cannot allocate %.2f GiB for the optimizer state in \"%s\" (%s); HINT: %s", bytes / 1073741824.0,
                s->path, strerror(rc), rc == ENOSPC ? "free space on that disk, or use more ranks or device cpu"
                                                    : "check the disk");
    }
}

__attribute__((noreturn)) static void io_fail(const NvmeStore *s, int write, size_t bytes, off_t off, int err) {
    t5_fail("nvme_path: %s of %zu bytes at %lld in \"%s\" failed (%s); HINT: %s", write ? "write" : "read", bytes,
            (long long)off, s->path, err ? strerror(err) : "unexpected end of file",
            err == ENOSPC ? "free space on that disk" : "check the disk (dmesg)");
}

// pread/pwrite of [p, p + bytes) at off, retried on partial transfers.
static void rw_sync(const NvmeStore *s, int write, char *p, off_t off, size_t bytes) {
    while (bytes > 0) {
        ssize_t k = write ? pwrite(s->fd, p, bytes, off) : pread(s->fd, p, bytes, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) io_fail(s, write, bytes, off, k < 0 ? errno : 0);
        p += k, off += k, bytes -= (size_t)k;
    }
}

static void stat_add(long *x, long v) { __atomic_fetch_add(x, v, __ATOMIC_RELAXED); }
static void stat_max(long *x, long v) {
    long cur = __atomic_load_n(x, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(x, &cur, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

// One thread's contiguous part of a transfer: block_size requests, up to queue_depth in flight
// in its own AIO context (see nvme.h); pread/pwrite one at a time without native AIO.
static void io_part(const NvmeStore *s, int write, char *p, off_t off, size_t bytes) {
    const size_t bs = s->aio.block_size;
    const long nblk = (long)((bytes + bs - 1) / bs);
    if (!s->native_aio) {
        for (long b = 0; b < nblk; b++) {
            size_t len = bytes - (size_t)b * bs < bs ? bytes - (size_t)b * bs : bs;
            rw_sync(s, write, p + (size_t)b * bs, off + (off_t)((size_t)b * bs), len);
        }
        stat_add(&s->stats->requests, nblk);
        stat_max(&s->stats->max_in_flight, nblk ? 1 : 0);
        return;
    }
    const int qd = s->aio.queue_depth;
    aio_context_t ctx = 0;
    if (sys_io_setup((unsigned)qd, &ctx) != 0) io_fail(s, write, bytes, off, errno);
    struct iocb *cbs = callocCheck((size_t)qd, sizeof *cbs);
    struct iocb **ready = mallocCheck((size_t)qd * sizeof *ready);
    struct io_event *ev = mallocCheck((size_t)qd * sizeof *ev);
    int *free_slot = mallocCheck((size_t)qd * sizeof *free_slot), n_free = qd;
    for (int i = 0; i < qd; i++) free_slot[i] = qd - 1 - i;
    long next = 0, done = 0, in_flight = 0;
    while (done < nblk) {
        // overlap_events: every free slot is refilled now; else a new batch only once the last is all back
        int k = 0;
        if (s->aio.overlap_events || in_flight == 0)
            for (; n_free > 0 && next < nblk; next++, k++) {
                int slot = free_slot[--n_free];
                size_t at = (size_t)next * bs, len = bytes - at < bs ? bytes - at : bs;
                struct iocb *cb = &cbs[slot];
                memset(cb, 0, sizeof *cb);
                cb->aio_data = (unsigned long long)slot;
                cb->aio_lio_opcode = write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
                cb->aio_fildes = (unsigned)s->fd;
                cb->aio_buf = (unsigned long long)(uintptr_t)(p + at);
                cb->aio_nbytes = len;
                cb->aio_offset = (long long)(off + (off_t)at);
                ready[k] = cb;
            }
        for (int i = 0; i < k;) {  // single_submit: one request per call; else all of them (the kernel may take fewer)
            long r = sys_io_submit(ctx, s->aio.single_submit ? 1 : k - i, ready + i);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) io_fail(s, write, ready[i]->aio_nbytes, (off_t)ready[i]->aio_offset, r < 0 ? errno : EIO);
            i += (int)r;
            stat_add(&s->stats->submits, 1);
        }
        in_flight += k;
        stat_add(&s->stats->requests, k);
        stat_max(&s->stats->max_in_flight, in_flight);
        long got = sys_io_getevents(ctx, s->aio.overlap_events ? 1 : in_flight, qd, ev);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) io_fail(s, write, bytes, off, errno);
        for (long e = 0; e < got; e++) {
            const struct iocb *cb = &cbs[ev[e].data];
            long long res = ev[e].res;
            if (res < 0) io_fail(s, write, cb->aio_nbytes, (off_t)cb->aio_offset, (int)-res);
            if ((unsigned long long)res < cb->aio_nbytes)  // short: the rest synchronously
                rw_sync(s, write, (char *)(uintptr_t)cb->aio_buf + res, (off_t)(cb->aio_offset + res),
                        (size_t)(cb->aio_nbytes - (unsigned long long)res));
            free_slot[n_free++] = (int)ev[e].data;
            in_flight--, done++;
        }
    }
    sys_io_destroy(ctx);
    free(cbs);
    free(ready);
    free(ev);
    free(free_slot);
}

typedef struct {
    const NvmeStore *s;
    int write;
    char *p;
    off_t off;
    size_t bytes;
} IoPart;

static void *io_part_thread(void *arg) {
    const IoPart *t = arg;
    io_part(t->s, t->write, t->p, t->off, t->bytes);
    return NULL;
}

// A transfer over intra_op_parallelism threads, each a contiguous run of whole requests.
static void io_transfer(const NvmeStore *s, int write, char *p, off_t off, size_t bytes) {
    const size_t bs = s->aio.block_size;
    size_t nblk = (bytes + bs - 1) / bs;
    int threads = s->aio.threads < (int)nblk ? s->aio.threads : (int)(nblk ? nblk : 1);
    stat_add(&s->stats->transfers, 1);
    stat_max(&s->stats->max_threads, threads);
    if (threads <= 1) {
        io_part(s, write, p, off, bytes);
        return;
    }
    IoPart *parts = mallocCheck((size_t)threads * sizeof *parts);
    pthread_t *tid = mallocCheck((size_t)threads * sizeof *tid);
    size_t at = 0;
    for (int t = 0; t < threads; t++) {
        size_t blocks = nblk / (size_t)threads + ((size_t)t < nblk % (size_t)threads);
        size_t len = blocks * bs < bytes - at ? blocks * bs : bytes - at;
        parts[t] = (IoPart){s, write, p + at, off + (off_t)at, len};
        at += len;
        if (t > 0) {
            int rc = pthread_create(&tid[t], NULL, io_part_thread, &parts[t]);
            if (rc != 0)
                t5_fail("aio: cannot start I/O thread %d of %d (%s); HINT: a smaller \"aio\": {\"intra_op_parallelism\": "
                        "...}", t + 1, threads, strerror(rc));
        }
    }
    io_part(s, write, parts[0].p, parts[0].off, parts[0].bytes);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    free(parts);
    free(tid);
}

// One range of an array, as the aio settings cut it.
static void nvme_io(const NvmeStore *s, int write, int a, size_t from, size_t count, void *buf) {
    if (a < 0 || a >= NVME_ARRAYS || from + count > s->n || from % (NVME_ALIGN / sizeof(float)))
        t5_die(__FILE__, __LINE__, "nvme_io: a range outside the store or not aligned",
               "a bug in zero/offload.c: chunks start at multiples of 1024 elements");
    if ((uintptr_t)buf % NVME_ALIGN)
        t5_die(__FILE__, __LINE__, "nvme_io: an unaligned buffer", "a bug in the caller: use nvme_buffer");
    size_t bytes = s->direct ? round_up(count * sizeof(float)) : count * sizeof(float);
    off_t off = (off_t)(s->stride * (size_t)a + from * sizeof(float));
    if (bytes) io_transfer(s, write, buf, off, bytes);
}

void nvme_read(const NvmeStore *s, int a, size_t from, size_t count, float *dst) { nvme_io(s, 0, a, from, count, dst); }

void nvme_write(const NvmeStore *s, int a, size_t from, size_t count, const float *src) {
    nvme_io(s, 1, a, from, count, (void *)src);
}

float *nvme_buffer(size_t count) {
    void *p = NULL;
    size_t bytes = round_up(count * sizeof(float));
    int rc = posix_memalign(&p, NVME_ALIGN, bytes ? bytes : NVME_ALIGN);
    if (rc != 0) t5_fail("nvme: out of host memory for a %zu-byte chunk buffer (%s)", bytes, strerror(rc));
    memset(p, 0, bytes);
    return p;
}

void nvme_buffer_free(float *p) { free(p); }

void nvme_close(NvmeStore *s) {
    if (s->path[0]) {
        close(s->fd);
        unlink(s->path);
    }
    free(s->stats);
    memset(s, 0, sizeof *s);
}

// ---- the I/O queue ----------------------------------------------------------------------

static void *queue_run(void *arg) {
    NvmeQueue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->done == q->submitted && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        if (q->done == q->submitted) break;  // stop, and nothing left
        NvmeJob j = q->jobs[q->done % NVME_QUEUE_JOBS];
        pthread_mutex_unlock(&q->mu);
        if (j.write) nvme_write(q->store, j.array, j.from, j.count, j.buf);
        else nvme_read(q->store, j.array, j.from, j.count, j.buf);
        pthread_mutex_lock(&q->mu);
        q->done++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void nvme_queue_start(NvmeQueue *q, const NvmeStore *s) {
    memset(q, 0, sizeof *q);
    q->store = s;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    int rc = pthread_create(&q->thread, NULL, queue_run, q);
    if (rc != 0) t5_fail("nvme: cannot start an I/O thread (%s); HINT: the system is out of threads or memory", strerror(rc));
    q->running = 1;
}

long nvme_queue_submit(NvmeQueue *q, int write, int array, size_t from, size_t count, float *buf) {
    pthread_mutex_lock(&q->mu);
    while (q->submitted - q->done >= NVME_QUEUE_JOBS) pthread_cond_wait(&q->cv, &q->mu);
    q->jobs[q->submitted % NVME_QUEUE_JOBS] = (NvmeJob){write, array, from, count, buf};
    long t = ++q->submitted;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return t;
}

void nvme_queue_wait(NvmeQueue *q, long t) {
    pthread_mutex_lock(&q->mu);
    while (q->done < t) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void nvme_queue_stop(NvmeQueue *q) {
    if (!q->running) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    q->running = 0;
}
