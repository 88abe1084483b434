// kernels/gpu_arch.c: the binary's CUDA targets and CUDA's rules for which GPU runs them
// (gpu_arch.h).
#include "gpu_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/t5_env.h"

// The Makefile passes both (CUDA_ARCH, CUDA_PTX); a build by other means says "none".
#ifndef T5_CUDA_CUBINS
#define T5_CUDA_CUBINS ""
#endif
#ifndef T5_CUDA_PTX
#define T5_CUDA_PTX ""
#endif

const char *gpu_arch_cubins(void) { return T5_CUDA_CUBINS; }
const char *gpu_arch_ptx(void) { return T5_CUDA_PTX; }

// One list entry "86" or "90a" -> cc 86 / 90 and whether it is arch-specific ('a').
// 0 when malformed.
static int parse_target(const char *tok, size_t len, int *specific) {
    int cc = 0;
    size_t i = 0;
    for (; i < len && tok[i] >= '0' && tok[i] <= '9'; i++) cc = cc * 10 + (tok[i] - '0');
    if (i == 0 || i > 3 || cc < 10) return 0;
    *specific = 0;
    if (i < len) {
        if (i + 1 != len || tok[i] != 'a') return 0;
        *specific = 1;
    }
    return cc;
}

// Calls fn(cc, specific, arg) for each entry of a space-separated list; stops at a non-zero return.
static int each_target(const char *list, int (*fn)(int, int, void *), void *arg) {
    for (const char *p = list; p && *p;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, " ");
        if (!len) break;
        int specific = 0, cc = parse_target(p, len, &specific);
        if (cc) {
            int r = fn(cc, specific, arg);
            if (r) return r;
        }
        p += len;
    }
    return 0;
}

typedef struct {
    int cc, best;  // best: the highest cubin target that runs on cc (0: none)
} CubinQuery;

static int cubin_fits(int target, int specific, void *arg) {
    CubinQuery *q = arg;
    int ok = specific ? target == q->cc : target / 10 == q->cc / 10 && target % 10 <= q->cc % 10;
    if (ok && target > q->best) q->best = target;
    return 0;
}

static int ptx_fits(int target, int specific, void *arg) {
    CubinQuery *q = arg;
    int ok = specific ? target == q->cc : target <= q->cc;
    if (ok && target > q->best) q->best = target;
    return 0;
}

GpuRunHow gpu_arch_match(int cc, const char *cubins, const char *ptx, int *target) {
    CubinQuery q = {cc, 0};
    each_target(cubins, cubin_fits, &q);
    if (q.best) {
        if (target) *target = q.best;
        return GPU_RUN_CUBIN;
    }
    each_target(ptx, ptx_fits, &q);
    if (q.best) {
        if (target) *target = q.best;
        return GPU_RUN_PTX;
    }
    return GPU_RUN_NONE;
}

typedef struct {
    char *buf;
    size_t n, used, start;  // start: where the list begins (no space before its first word)
    const char *prefix;
} Words;

static int add_word(int cc, int specific, void *arg) {
    Words *w = arg;
    if (w->used < w->n) {
        int k = snprintf(w->buf + w->used, w->n - w->used, "%s%s%d%s", w->used > w->start ? " " : "", w->prefix, cc,
                         specific ? "a" : "");
        if (k > 0) w->used += (size_t)k;
    }
    return 0;
}

void gpu_arch_describe(const char *cubins, const char *ptx, char *buf, size_t n) {
    if (!n) return;
    buf[0] = 0;
    Words w = {buf, n, 0, 0, "sm_"};
    w.used = w.start = (size_t)snprintf(buf, n, "cubins ");
    each_target(cubins, add_word, &w);
    if (w.used == w.start && w.used < n) w.used += (size_t)snprintf(buf + w.used, n - w.used, "none");
    int newest = 0;
    CubinQuery q = {999, 0};
    each_target(ptx, ptx_fits, &q);
    newest = q.best;
    if (w.used < n) {
        if (newest)
            snprintf(buf + w.used, n - w.used, " and PTX compute_%d (JIT-compiled for %d.%d and newer)", newest,
                     newest / 10, newest % 10);
        else snprintf(buf + w.used, n - w.used, " and no PTX");
    }
}

int gpu_arch_cc_needed(const char *precision) {
    if (!strcmp(precision, "bf16")) return GPU_CC_BF16;
    if (!strcmp(precision, "tf32")) return GPU_CC_TF32;
    if (!strcmp(precision, "fp8")) return GPU_CC_FP8;
    return 0;
}

int gpu_arch_parse_cc(const char *s) {
    if (!s) return -1;
    char *end = NULL;
    long major = strtol(s, &end, 10);
    if (end == s || *end != '.' || major < 1 || major > 99) return -1;
    const char *m = end + 1;
    if (m[0] < '0' || m[0] > '9' || m[1] != 0) return -1;
    return (int)major * 10 + (m[0] - '0');
}

int gpu_arch_fake_cc(void) {
    const char *v = t5_env_get(T5_ENV_TEST_COMPUTE_CAPABILITY);
    if (!v || !*v) return 0;
    int cc = gpu_arch_parse_cc(v);
    if (cc < 0)
        t5_fail("T5_TEST_COMPUTE_CAPABILITY=\"%s\": expected MAJOR.MINOR, e.g. 7.5 (a test hook: the compute "
                "capability the GPU checks assume)", v);
    return cc;
}

// "GPU 0 is NVIDIA H200 (compute capability 9.0)", with the hook named when it set the figure
static void gpu_words(const GpuInfo *g, char *buf, size_t n) {
    if (g->index < 0)  // --explain without a GPU: the one it plans for
        snprintf(buf, n, "the GPU planned for has compute capability %d.%d (%s)", g->cc / 10, g->cc % 10, g->name);
    else if (g->cc != g->cc_real)
        snprintf(buf, n, "GPU %d is %s (compute capability %d.%d, faked by T5_TEST_COMPUTE_CAPABILITY; really %d.%d)",
                 g->index, g->name, g->cc / 10, g->cc % 10, g->cc_real / 10, g->cc_real % 10);
    else snprintf(buf, n, "GPU %d is %s (compute capability %d.%d)", g->index, g->name, g->cc / 10, g->cc % 10);
}

void gpu_arch_require_targets(const GpuInfo *g) {
    if (gpu_arch_match(g->cc, gpu_arch_cubins(), gpu_arch_ptx(), NULL) != GPU_RUN_NONE) return;
    char who[512], what[256];
    gpu_words(g, who, sizeof who);
    gpu_arch_describe(gpu_arch_cubins(), gpu_arch_ptx(), what, sizeof what);
    if (g->cc < 75)
        t5_fail("%s, and this train_t5 holds %s: none runs on it; HINT: CUDA 13 builds for compute capability 7.5 "
                "(Turing) and newer only: on this GPU train with --device cpu, or build with a CUDA 12 toolkit and "
                "make CUDA_ARCH=%d (not tested)", who, what, g->cc);
    t5_fail("%s, and this train_t5 holds %s: none runs on it; HINT: rebuild with make CUDA_ARCH=\"%d\" (or the "
            "default CUDA_ARCH, which covers 7.5 to 9.0 and newer GPUs through PTX)", who, what, g->cc);
}

void gpu_arch_require_precision(const GpuInfo *g, const char *precision, const char *from) {
    int need = gpu_arch_cc_needed(precision);
    if (g->cc >= need) return;
    char who[512];
    gpu_words(g, who, sizeof who);
    if (!strcmp(precision, "fp8"))
        t5_fail("%s: fp8 GEMMs need an Ada or Hopper GPU or newer (compute capability %d.%d: L4, RTX 40xx, H100, H200, "
                "Blackwell), and %s; HINT: drop --fp8 and train with --bf16", from, need / 10, need % 10, who);
    if (!strcmp(precision, "tf32"))
        t5_fail("%s: TF32 needs an Ampere or newer GPU (compute capability %d.%d), and %s; HINT: drop --tf32 (fp32 "
                "GEMMs then run exactly), or use --fp16", from, need / 10, need % 10, who);
    t5_fail("%s: bf16 needs an Ampere or newer GPU (compute capability %d.%d: A100, A10, L4, RTX 30xx/40xx, H100 and "
            "later), and %s; HINT: train with --fp16 (its dynamic loss scaler) or in fp32 on this GPU", from,
            need / 10, need % 10, who);
}
