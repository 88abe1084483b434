// common/check.c: implementation of the checked libc wrappers (see check.h).
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "file_open.h"
#include "t5_env.h"

// A write that failed: the disk is full, the file-size limit is reached (EFBIG: the process
// ignores SIGXFSZ, train_t5.c), or permissions; the unfinished file is removed at exit.
#define WRITE_HINT "free disk space (df), check the file-size limit (ulimit -f) and permissions, then run again; " \
                   "the unfinished file was removed"

void t5_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void t5_die(const char *file, int line, const char *msg, const char *hint) {
    fflush(stdout);
    fprintf(stderr, "error: %s:%d: %s\n", file, line, msg);
    if (hint) fprintf(stderr, "HINT: %s\n", hint);
    exit(1);
}

FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *f = file_open_regular(path, mode, NULL);  // a FIFO or device: one line, never a wait
    if (!f) {
        char msg[1024];
        snprintf(msg, sizeof msg, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
        t5_die(file, line, msg,
               mode[0] == 'r' ? "check that the path exists and is readable"
                              : "check that the directory exists and is writable");
    }
    return f;
}

void fread_check(void *dst, size_t size, size_t n, FILE *f, const char *path, const char *file, int line) {
    size_t got = fread(dst, size, n, f);
    if (got != n) {
        char msg[1024];
        snprintf(msg, sizeof msg, "short read from '%s': wanted %zu items of %zu bytes, got %zu (%s)", path, n,
                 size, got, feof(f) ? "end of file" : strerror(errno));
        t5_die(file, line, msg, "the file is truncated or corrupt; regenerate it");
    }
}

void fwrite_check(const void *src, size_t size, size_t n, FILE *f, const char *path, const char *file, int line) {
    size_t put = fwrite(src, size, n, f);
    if (put != n) {
        char msg[1024];
        snprintf(msg, sizeof msg, "short write to '%s': wanted %zu items, wrote %zu (%s)", path, n, put,
                 strerror(errno));
        t5_die(file, line, msg, WRITE_HINT);
    }
}

void fclose_check(FILE *f, const char *path, const char *file, int line) {
    if (fclose(f) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "closing '%s' failed: %s", path, strerror(errno));
        t5_die(file, line, msg, WRITE_HINT);
    }
}

// A request larger than the machine's RAM and swap together cannot be met: it is said
// before malloc is asked (an AddressSanitizer build would abort on the failed malloc, and
// an overcommitting kernel could hand it out and kill the process at first touch).
static void check_host_size(double bytes, const char *file, int line) {
    static double limit;
    if (limit == 0) {
        struct sysinfo si;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        limit = pages > 0 && page > 0 ? (double)pages * (double)page : 1e300;
        if (sysinfo(&si) == 0) limit += (double)si.totalswap * si.mem_unit;
    }
    if (bytes <= limit) return;
    char msg[256];
    snprintf(msg, sizeof msg, "out of host memory: allocating %.4g GiB, more than this machine's %.4g GiB (RAM and swap)",
             bytes / 1073741824.0, limit / 1073741824.0);
    t5_die(file, line, msg, "a size flag is far too large (a length, a batch size), or use a smaller model or batch");
}

// ---- counting mode (check.h) -----------------------------------------------------------
// Atomic counters: the offloaded update's threads allocate too.
static int count_state;  // 0: not yet decided, 1: on, -1: off
static size_t count_current, count_peak;

int check_mem_counting(void) {
    int s = __atomic_load_n(&count_state, __ATOMIC_RELAXED);
    if (s == 0) {
        const char *e = t5_env_get(T5_ENV_COUNT_HOST_MEM);
        s = e && strcmp(e, "1") == 0 ? 1 : -1;
        __atomic_store_n(&count_state, s, __ATOMIC_RELAXED);
    }
    return s > 0;
}

static void count_add(void *p) {
    if (!p || !check_mem_counting()) return;
    size_t now = __atomic_add_fetch(&count_current, malloc_usable_size(p), __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&count_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&count_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void count_sub(void *p) {
    if (!p || !check_mem_counting()) return;
    __atomic_sub_fetch(&count_current, malloc_usable_size(p), __ATOMIC_RELAXED);
}

size_t check_mem_current(void) { return check_mem_counting() ? __atomic_load_n(&count_current, __ATOMIC_RELAXED) : 0; }
size_t check_mem_peak(void) { return check_mem_counting() ? __atomic_load_n(&count_peak, __ATOMIC_RELAXED) : 0; }
void check_mem_reset_peak(void) {
    if (check_mem_counting()) __atomic_store_n(&count_peak, __atomic_load_n(&count_current, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

void free_check(void *p) {
    count_sub(p);
    free(p);
}

void *malloc_check(size_t bytes, const char *file, int line) {
    check_host_size((double)bytes, file, line);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        char msg[256];
        snprintf(msg, sizeof msg, "out of host memory allocating %zu bytes", bytes);
        t5_die(file, line, msg, "use a smaller model or batch, or a machine with more RAM");
    }
    count_add(p);
    return p;
}

void *realloc_check(void *p, size_t bytes, const char *file, int line) {
    check_host_size((double)bytes, file, line);
    count_sub(p);
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) {
        char msg[256];
        snprintf(msg, sizeof msg, "out of host memory growing a buffer to %zu bytes", bytes);
        t5_die(file, line, msg, "use a smaller model or batch, or a machine with more RAM");
    }
    count_add(q);
    return q;
}

void *calloc_check(size_t n, size_t size, const char *file, int line) {
    check_host_size((double)n * (double)size, file, line);
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        char msg[256];
        snprintf(msg, sizeof msg, "out of host memory allocating %zu x %zu bytes", n, size);
        t5_die(file, line, msg, "use a smaller model or batch, or a machine with more RAM");
    }
    count_add(p);
    return p;
}

char *read_text_file(const char *path, size_t *len_out) {
    // a directory, FIFO or device: one line saying so (common/file_open.h), never a wait
    FILE *f = file_open_regular(path, "rb", NULL);
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) t5_fail("%s: cannot seek: %s", path, strerror(errno));
    long len = ftell(f);
    if (len < 0) t5_fail("%s: cannot tell size: %s", path, strerror(errno));
    rewind(f);
    char *buf = mallocCheck((size_t)len + 1);
    if (len > 0) freadCheck(buf, 1, (size_t)len, f, path);
    buf[len] = '\0';
    fclose(f);
    if (len_out) *len_out = (size_t)len;
    return buf;
}

char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = mallocCheck(a + b + 2);
    memcpy(s, dir, a);
    size_t k = a;
    if (k > 0 && s[k - 1] != '/') s[k++] = '/';
    memcpy(s + k, name, b + 1);
    return s;
}
