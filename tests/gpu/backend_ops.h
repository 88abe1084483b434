// tests/gpu/backend_ops.h: the harness of tests/gpu/test_backend_ops.c (ggml's
// test-backend-ops, for this project's Backend): every op case runs the same inputs through
// two `const Backend *`: the oracle (the fp32 CPU backend, kernels/cpu/) and the subject
// (the CUDA backend in one act dtype), and compares. Nothing here names CUDA: buffers of
// the subject are made and read through its alloc / to_device / to_host entries.
//   - inputs are random (never zero) and rounded to the subject's dtype first, so both
//     backends see the same values;
//   - errors are normalized max errors max|sub - ref| / max|ref| (tests/test.h);
//   - check_exact: the oracle's result rounded to the dtype, tolerance 0 (ops whose fp32
//     operations are the CPU's exactly); check_same_bytes: two subject buffers hold the
//     same bytes (reproducibility, in place vs out of place).
// Header-only (static functions): the Makefile builds each tests/gpu/test_*.c alone.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../kernels/backend.h"
#include "../test.h"

// The two backends of a case; dt = sub->act_dtype.
typedef struct {
    const Backend *ref;  // oracle: the fp32 CPU backend
    const Backend *sub;  // subject: the backend under test
    Dtype dt;
} OpsPair;

static inline const char *dt_name(Dtype dt) { return dt == DTYPE_F32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "fp16"; }
static inline size_t dt_size(Dtype dt) { return dt == DTYPE_F32 ? 4 : 2; }

// ---- host rounding (round to nearest even, as __float2bfloat16_rn / __float2half_rn) ----

static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t f16_bits(float f) {
    _Float16 h = (_Float16)f;  // one rounding, to nearest even (libgcc soft-fp)
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
static inline float f16_float(uint16_t b) {
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}
static inline float round_dt(Dtype dt, float x) {
    if (dt == DTYPE_BF16) return bf16_float(bf16_bits(x));
    if (dt == DTYPE_F16) return f16_float(f16_bits(x));
    return x;
}
static inline void round_array(Dtype dt, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = round_dt(dt, x[i]);
}

// ---- random inputs ---------------------------------------------------------------------------
// One stream; each group of cases starts it from its own seed (rng_seed), so a case sees
// the numbers it saw when the groups were separate binaries.

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static inline void rng_seed(uint64_t s) { rng_state = s; }
static inline uint32_t rng_u32(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}
static inline float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1.0p-24f; }

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

// Values in [-scale, -0.05*scale] U [0.05*scale, scale] (never zero), rounded to dt.
static inline float *rand_dt(Dtype dt, size_t n, float scale) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float u = 0.05f + 0.95f * rng_uniform();
        x[i] = round_dt(dt, (rng_u32() & 1 ? u : -u) * scale);
    }
    return x;
}
static inline float *copy_f(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}
static inline float *alloc_f(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// ---- subject buffers in a dtype ----------------------------------------------------------

static inline void upload(const Backend *be, Dtype dt, void *d, const float *x, size_t n) {
    if (dt == DTYPE_F32) {
        be->to_device(d, x, n * 4);
        return;
    }
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = dt == DTYPE_BF16 ? bf16_bits(x[i]) : f16_bits(x[i]);
    be->to_device(d, h, n * 2);
    free(h);
}
static inline void download(const Backend *be, Dtype dt, float *x, const void *d, size_t n) {
    if (dt == DTYPE_F32) {
        be->to_host(x, d, n * 4);
        return;
    }
    uint16_t *h = xmalloc(n * 2);
    be->to_host(h, d, n * 2);
    for (size_t i = 0; i < n; i++) x[i] = dt == DTYPE_BF16 ? bf16_float(h[i]) : f16_float(h[i]);
    free(h);
}
static inline void *dev_from(const Backend *be, Dtype dt, const float *x, size_t n) {
    void *d = be->alloc(n * dt_size(dt));
    upload(be, dt, d, x, n);
    return d;
}
static inline float *host_from(const Backend *be, Dtype dt, const void *d, size_t n) {
    float *x = alloc_f(n);
    download(be, dt, x, d, n);
    return x;
}
static inline int *dev_ints(const Backend *be, const int *x, size_t n) {
    int *d = be->alloc(n * sizeof(int));
    be->to_device(d, x, n * sizeof(int));
    return d;
}
static inline void free_all(const Backend *be, void *const *bufs, size_t n) {  // NULL entries skipped
    for (size_t i = 0; i < n; i++)
        if (bufs[i]) be->free(bufs[i]);
}
static inline void free_host(float *const *bufs, size_t n) {
    for (size_t i = 0; i < n; i++) free(bufs[i]);
}
#define FREE_SUB(be, ...)                                          \
    do {                                                           \
        void *const bufs_[] = {__VA_ARGS__};                       \
        free_all(be, bufs_, sizeof bufs_ / sizeof bufs_[0]);       \
    } while (0)
#define FREE_HOST(...)                                             \
    do {                                                           \
        float *const bufs_[] = {__VA_ARGS__};                      \
        free_host(bufs_, sizeof bufs_ / sizeof bufs_[0]);          \
    } while (0)

// ---- checks --------------------------------------------------------------------------------

// Compare a subject tensor (dtype dt) with the oracle's result.
static inline int check_dev(const Backend *be, const char *name, Dtype dt, const void *d, const float *want, size_t n,
                     double tol) {
    float *got = host_from(be, dt, d, n);
    int ok = test_close(name, got, want, n, tol);
    free(got);
    return ok;
}
// The oracle's result rounded to dt, compared with tolerance 0.
static inline int check_dev_exact(const Backend *be, const char *name, Dtype dt, const void *d, const float *want,
                           size_t n) {
    float *w = copy_f(want, n);
    round_array(dt, w, n);
    int ok = check_dev(be, name, dt, d, w, n, 0.0);
    free(w);
    return ok;
}
// Two subject buffers hold the same bytes.
static inline int same_bytes(const Backend *be, const void *a, const void *b, size_t bytes) {
    unsigned char *x = xmalloc(bytes), *y = xmalloc(bytes);
    be->to_host(x, a, bytes);
    be->to_host(y, b, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}
static inline int check_same_bytes(const Backend *be, const char *name, const void *a, const void *b, size_t bytes) {
    unsigned char *x = xmalloc(bytes), *y = xmalloc(bytes);
    be->to_host(x, a, bytes);
    be->to_host(y, b, bytes);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += x[i] != y[i];
    char buf[512];
    snprintf(buf, sizeof buf, "%-60s %zu of %zu bytes differ", name, diff, bytes);
    free(x);
    free(y);
    return test_check(diff == 0, buf);
}

// ---- error exits: a function run in a forked child --------------------------------------------

typedef void (*ChildFn)(void);

// Runs fn in a child with stderr captured; checks exit code 1 and that the message holds
// `expect` (and "HINT:" when hint is set).
static inline void check_child_exit(const char *name, ChildFn fn, const char *expect, int hint) {
    int fds[2];
    if (pipe(fds) != 0) {
        test_check(0, "pipe() for a child test");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        fprintf(stderr, "(the call returned instead of exiting)\n");
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    char msg[4096];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)r;
    msg[len] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int ok = code == 1 && strstr(msg, expect) != NULL && (!hint || strstr(msg, "HINT:") != NULL);
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = '|';
    char buf[4600];
    snprintf(buf, sizeof buf, "%-34s exit %d, stderr: %s", name, code, msg);
    test_check(ok, buf);
}
