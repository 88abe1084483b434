// zero/nvme.c: the NVMe store of the optimizer offload (see nvme.h).
#include "nvme.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

void nvme_open(NvmeStore *s, const char *dir, int rank, size_t n) {
    memset(s, 0, sizeof *s);
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

// One pread/pwrite of the whole range, retried on partial transfers.
static void nvme_io(const NvmeStore *s, int write, int a, size_t from, size_t count, void *buf) {
    if (a < 0 || a >= NVME_ARRAYS || from + count > s->n || from % (NVME_ALIGN / sizeof(float)))
        t5_die(__FILE__, __LINE__, "nvme_io: a range outside the store or not aligned",
               "a bug in zero/offload.c: chunks start at multiples of 1024 elements");
    if ((uintptr_t)buf % NVME_ALIGN)
        t5_die(__FILE__, __LINE__, "nvme_io: an unaligned buffer", "a bug in the caller: use nvme_buffer");
    size_t bytes = s->direct ? round_up(count * sizeof(float)) : count * sizeof(float);
    off_t off = (off_t)(s->stride * (size_t)a + from * sizeof(float));
    char *p = buf;
    while (bytes > 0) {
        ssize_t k = write ? pwrite(s->fd, p, bytes, off) : pread(s->fd, p, bytes, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            t5_fail("nvme_path: %s of %zu bytes at %lld in \"%s\" failed (%s); HINT: %s", write ? "write" : "read",
                    bytes, (long long)off, s->path, k < 0 ? strerror(errno) : "unexpected end of file",
                    errno == ENOSPC ? "free space on that disk" : "check the disk (dmesg)");
        p += k, off += k, bytes -= (size_t)k;
    }
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
