// tests/test_cpu_adam.c: the CPU AdamW of ZeRO-Offload (optim/cpu_adam.c). Every
// instruction set this CPU runs gives bitwise the scalar reference's master, moments and
// narrowed output (kernels/cpu/adamw_math.h's step, common/half.h's rounding), for each
// gradient/output dtype, with and without weight decay, both lerp branches (beta1 0.9 and
// 0.3), a grad scale, lengths with vector tails and several OpenMP blocks, the output on and
// off its vector alignment (streaming and plain stores), and values that
// round to inf, to fp16 subnormals and to nan in the 16-bit copy. cpu_adam_update_slices (the
// offloaded step's one pass over a chunk's tensors) gives each slice cpu_adam_update's bits,
// with slices of odd and empty lengths and their own weight decay. Also: the dispatch refuses
// nothing the CPU runs and names every set.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/half.h"
#include "../optim/cpu_adam.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

static const char *dt_name(Dtype t) { return t == DTYPE_F32 ? "fp32" : t == DTYPE_BF16 ? "bf16" : "fp16"; }

// Random state of n elements; a few masters large enough to round to inf in fp16 / bf16
// after the step, tiny ones (fp16 subnormals), and a nan.
static void fill(float *p, float *m, float *v, void *g, Dtype gt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        p[i] = urand();
        if (i % 97 == 5) p[i] = 70000.0f * (i % 2 ? 1.0f : -1.0f);  // fp16 inf
        if (i % 89 == 7) p[i] = 3e-6f * urand();                      // fp16 subnormal
        if (i % 83 == 11) p[i] = 3.4e38f;                             // bf16 rounds up to inf
        if (i % 7 == 3) p[i] = (i % 2 ? 1.0f + 0x1.0p-8f : 1.0f + 0x1.0p-11f) * (i % 3 ? 1.0f : 3.0f);  // ties
        if (i == 13) p[i] = NAN;
        m[i] = 0.1f * urand();
        v[i] = 0.01f * fabsf(urand());
        float gr = urand();
        if (gt == DTYPE_F32) ((float *)g)[i] = gr;
        else ((uint16_t *)g)[i] = gt == DTYPE_BF16 ? half_f32_to_bf16(gr) : half_f32_to_f16(gr);
    }
}

// lr 0 leaves the master as it was (p + -0 * m / den), so the planted ties of fill reach the
// narrowing exactly: round-half-even must be done as the scalar does it.
// shift: the output starts that many elements after a 64-byte boundary (0: the vector paths'
// streaming stores; 1: their plain stores).
static void one_case(CpuAdamIsa isa, Dtype t, size_t n, float beta1, float wd, float lr, size_t shift) {
    size_t e = t == DTYPE_F32 ? 4 : 2;
    float *p = mallocCheck(n * 4), *m = mallocCheck(n * 4), *v = mallocCheck(n * 4);
    float *p2 = mallocCheck(n * 4), *m2 = mallocCheck(n * 4), *v2 = mallocCheck(n * 4);
    void *g = mallocCheck(n * e), *out2 = mallocCheck(n * e), *out_base = NULL;
    if (posix_memalign(&out_base, 64, (n + 16) * e) != 0) t5_fail("test_cpu_adam: out of memory");
    char *out = (char *)out_base + shift * e;
    fill(p, m, v, g, t, n);
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
    memset(out, 0xAB, n * e), memset(out2, 0xCD, n * e);
    AdamwConsts c = adamw_consts(lr, beta1, 0.999f, 1e-8f, wd, 0.5f, 3);
    cpu_adam_update(p, m, v, g, t, out, t, n, &c, isa);
    cpu_adam_update(p2, m2, v2, g, t, out2, t, n, &c, CPU_ADAM_SCALAR);
    size_t diff = 0, nonfinite_out = 0;
    for (size_t i = 0; i < n; i++) {
        diff += memcmp(&p[i], &p2[i], 4) != 0 || memcmp(&m[i], &m2[i], 4) != 0 || memcmp(&v[i], &v2[i], 4) != 0;
        diff += memcmp(out + i * e, (char *)out2 + i * e, e) != 0;
        float o = t == DTYPE_F32 ? ((float *)out2)[i]
                  : t == DTYPE_BF16 ? half_bf16_to_f32(((uint16_t *)out2)[i]) : half_f16_to_f32(((uint16_t *)out2)[i]);
        nonfinite_out += !isfinite(o);
    }
    char what[220];
    snprintf(what, sizeof what, "%s %s n=%zu lr %g beta1 %.1f decay %g, output %s: %zu elements differ from scalar "
             "(%zu non-finite in the copy)", cpu_adam_isa_name(isa), dt_name(t), n, lr, beta1, wd,
             shift ? "off its vector alignment" : "aligned (streaming stores)", diff, nonfinite_out);
    test_check(diff == 0 && nonfinite_out > 0, what);
    free(p), free(m), free(v), free(p2), free(m2), free(v2), free(g), free(out_base), free(out2);
}

// The scalar path is adamw_math_update element by element (what the GPU/CPU backends' adamw_update
// equal), and out is master narrowed by common/half.h.
static void scalar_is_the_reference(void) {
    enum { N = 1000 };
    float p[N], m[N], v[N], p2[N], m2[N], v2[N];
    uint16_t g[N], out[N];
    fill(p, m, v, g, DTYPE_BF16, N);
    memcpy(p2, p, sizeof p), memcpy(m2, m, sizeof m), memcpy(v2, v, sizeof v);
    AdamwConsts c = adamw_consts(2e-3f, 0.9f, 0.98f, 1e-6f, 0.01f, 0.25f, 7);
    cpu_adam_update(p, m, v, g, DTYPE_BF16, out, DTYPE_BF16, N, &c, CPU_ADAM_SCALAR);
    int same = 1;
    for (int i = 0; i < N; i++) {
        adamw_math_update(&p2[i], &m2[i], &v2[i], half_bf16_to_f32(g[i]), &c);
        same &= !memcmp(&p[i], &p2[i], 4) && !memcmp(&m[i], &m2[i], 4) && !memcmp(&v[i], &v2[i], 4) &&
                out[i] == half_f32_to_bf16(p2[i]);
    }
    test_check(same, "scalar cpu_adam_update = adamw_math_update + half_f32_to_bf16, element by element");
}

// Slices of a chunk (lengths: empty, under a vector, odd, several blocks, an exact block), each
// with its own weight decay, in one cpu_adam_update_slices pass against the scalar
// cpu_adam_update of each slice alone; the poisoned gap between slices' outputs stays untouched.
static void slices_case(CpuAdamIsa isa, Dtype t) {
    enum { K = 7, GAP = 5 };
    const size_t lens[K] = {0, 3, 1003, 2 * CPU_ADAM_BLOCK + 17, 0, CPU_ADAM_BLOCK, 29};
    size_t total = 0, e = t == DTYPE_F32 ? 4 : 2;
    for (int k = 0; k < K; k++) total += lens[k] + GAP;
    float *p = mallocCheck(total * 4), *m = mallocCheck(total * 4), *v = mallocCheck(total * 4);
    float *p2 = mallocCheck(total * 4), *m2 = mallocCheck(total * 4), *v2 = mallocCheck(total * 4);
    void *g = mallocCheck(total * e), *out = mallocCheck(total * e), *out2 = mallocCheck(total * e);
    fill(p, m, v, g, t, total);
    memcpy(p2, p, total * 4), memcpy(m2, m, total * 4), memcpy(v2, v, total * 4);
    memset(out, 0xAB, total * e), memset(out2, 0xAB, total * e);
    CpuAdamSlice s[K];
    size_t off = 0;
    for (int k = 0; k < K; k++) {
        s[k] = (CpuAdamSlice){.master = p + off, .m = m + off, .v = v + off, .g = (const char *)g + off * e,
                              .out = (char *)out + off * e, .n = lens[k],
                              .c = adamw_consts(1e-3f, k % 2 ? 0.3f : 0.9f, 0.999f, 1e-8f, k % 3 ? 0.01f : 0.0f, 0.5f, 3)};
        cpu_adam_update(p2 + off, m2 + off, v2 + off, (const char *)g + off * e, t, (char *)out2 + off * e, t, lens[k],
                        &s[k].c, CPU_ADAM_SCALAR);
        off += lens[k] + GAP;
    }
    cpu_adam_update_slices(s, K, t, t, isa);
    size_t diff = 0;
    for (size_t i = 0; i < total; i++) {
        diff += memcmp(&p[i], &p2[i], 4) != 0 || memcmp(&m[i], &m2[i], 4) != 0 || memcmp(&v[i], &v2[i], 4) != 0;
        diff += memcmp((char *)out + i * e, (char *)out2 + i * e, e) != 0;
    }
    char what[200];
    snprintf(what, sizeof what, "%s %s: %d slices in one pass (lengths 0 to %d, own decay): %zu elements differ from "
             "each slice's scalar step", cpu_adam_isa_name(isa), dt_name(t), K, 2 * CPU_ADAM_BLOCK + 17, diff);
    test_check(diff == 0, what);
    free(p), free(m), free(v), free(p2), free(m2), free(v2), free(g), free(out), free(out2);
}

int main(void) {
    scalar_is_the_reference();
    for (int d = 0; d < 3; d++) slices_case(cpu_adam_isa_best(), (Dtype[]){DTYPE_F32, DTYPE_BF16, DTYPE_F16}[d]);
    slices_case(CPU_ADAM_SCALAR, DTYPE_BF16);
    const CpuAdamIsa isas[] = {CPU_ADAM_AVX2, CPU_ADAM_AVX512};
    const Dtype dts[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    const size_t lens[] = {1003, 3 * CPU_ADAM_BLOCK + 21};
    int ran = 0;
    for (int k = 0; k < 2; k++) {
        if (!cpu_adam_isa_supported(isas[k])) {
            printf("(this CPU does not run %s: not compared)\n", cpu_adam_isa_name(isas[k]));
            continue;
        }
        ran++;
        for (int d = 0; d < 3; d++)
            for (int l = 0; l < 2; l++) {
                for (size_t shift = 0; shift < 2; shift++) {
                    one_case(isas[k], dts[d], lens[l], 0.9f, 0.0f, 1e-3f, shift);
                    one_case(isas[k], dts[d], lens[l], 0.3f, 0.01f, 1e-3f, shift);
                    one_case(isas[k], dts[d], lens[l], 0.9f, 0.0f, 0.0f, shift);
                }
            }
    }
    char what[160];
    snprintf(what, sizeof what, "best instruction set here: %s (%d vector set(s) compared)",
             cpu_adam_isa_name(cpu_adam_isa_best()), ran);
    test_check(cpu_adam_isa_best() != CPU_ADAM_AUTO && cpu_adam_isa_supported(cpu_adam_isa_best()), what);
    return test_summary();
}
