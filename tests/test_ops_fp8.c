// tests/test_ops_fp8.c: the fp8 formats (kernels/fp8_format.h) and the CPU reference of the fp8
// linear (kernels/cpu/fp8.c: backend.h fp8_matmul_forward, fp8_matmul_backward,
// fp8_scales_update):
//   - every code of e4m3 and e5m2 decodes and encodes back; encoding against a brute-force
//     nearest-code search (ties to even, saturation) and a table of known values; the
//     delayed-scaling rule fp8_scale_from_amax;
//   - forward and backward against a double-precision recomputation from the rounded operands,
//     amax exact, the first step's scales, "+=" and dinp_set, NULL gradients, strides;
//   - the end-of-step scale update (history column, row max, margin, kept scales);
//   - the error of fp8 against the fp32 product, determinism and thread-count independence.
// Prints one OK / NOT OK line per check; exits non-zero on any failure.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/backend.h"
#include "../kernels/cpu/cpu_ops.h"
#include "../kernels/fp8_format.h"
#include "test.h"
#include "test_ops_util.h"

#define FP8_TOL 1e-6  // normalized max error of an fp8 op vs its double recomputation

static const char *fmt_name(Fp8Format f) { return f == FP8_E4M3 ? "e4m3" : "e5m2"; }
static int fmt_maxcode(Fp8Format f) { return f == FP8_E4M3 ? 0x7E : 0x7B; }

// ---- formats ------------------------------------------------------------------------------

// Every code: finite codes encode back to themselves (both zeros included), NaN codes to a NaN
// code, e5m2's infinities to +-max; positive finite codes increase.
static void test_format_round_trip(Fp8Format f) {
    int bad = 0, nan_codes = 0, monotonic = 1;
    for (int c = 0; c < 256; c++) {
        const float v = fp8_decode((uint8_t)c, f);
        const uint8_t back = fp8_encode(v, f);
        const uint8_t sign = (uint8_t)(c & 0x80);
        if (isnan(v)) {
            nan_codes++;
            bad += !isnan(fp8_decode(back, f));  // the sign may go: fp8_decode gives one NaN
        } else if (isinf(v)) {
            bad += back != (sign | fmt_maxcode(f));
        } else {
            bad += back != c;
        }
        if (c > 0 && c <= fmt_maxcode(f)) monotonic &= v > fp8_decode((uint8_t)(c - 1), f);
    }
    char what[160];
    snprintf(what, sizeof what, "%s: 256 codes decode -> encode round trip (%d NaN codes, %d wrong)", fmt_name(f),
             nan_codes, bad);
    test_check(bad == 0 && nan_codes == (f == FP8_E4M3 ? 2 : 6), what);
    snprintf(what, sizeof what, "%s: positive finite codes decode increasing, largest %g", fmt_name(f),
             fp8_decode((uint8_t)fmt_maxcode(f), f));
    test_check(monotonic && fp8_decode((uint8_t)fmt_maxcode(f), f) == fp8_format_max(f), what);
}

// The code a correct round-to-nearest-even, saturating encoder gives, by searching all codes.
static uint8_t brute_encode(float x, Fp8Format f) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7F;
    const double a = fabs((double)x);
    if (a >= fp8_format_max(f)) return (uint8_t)(sign | fmt_maxcode(f));
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= fmt_maxcode(f); c++) {
        const double d = fabs(a - (double)fp8_decode((uint8_t)c, f));
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return (uint8_t)(sign | best);
}

// Encoding of the codes, the midpoints between neighbours (ties), one float either side of
// each midpoint, and random values over the whole range, against brute_encode.
static void test_format_nearest(Fp8Format f) {
    int n = 0, bad = 0;
    float worst = 0.0f;
    for (int c = 0; c < fmt_maxcode(f); c++) {
        const float lo = fp8_decode((uint8_t)c, f), hi = fp8_decode((uint8_t)(c + 1), f);
        const float mid = (lo + hi) * 0.5f;  // exact: the grids have few bits
        const float xs[5] = {lo, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), hi};
        for (int j = 0; j < 5; j++)
            for (int s = 0; s < 2; s++) {
                const float x = s ? -xs[j] : xs[j];
                n++;
                if (fp8_encode(x, f) != brute_encode(x, f)) bad++, worst = x;
            }
    }
    for (int i = 0; i < 20000; i++) {
        const float x = ldexpf(1.0f + rng_uniform(), (int)(rng_u32() % 40) - 22) * (rng_u32() & 1 ? 1.0f : -1.0f);
        n++;
        if (fp8_encode(x, f) != brute_encode(x, f)) bad++, worst = x;
    }
    char what[200];
    snprintf(what, sizeof what, "%s: encode = nearest code, ties to even, saturating (%d values, %d wrong, e.g. %g)",
             fmt_name(f), n, bad, worst);
    test_check(bad == 0, what);
}

static void test_format_known_values(void) {
    const struct {
        float x;
        Fp8Format f;
        uint8_t code;
        const char *what;
    } cases[] = {
        {448.0f, FP8_E4M3, 0x7E, "448"},
        {480.0f, FP8_E4M3, 0x7E, "480 saturates"},
        {1e9f, FP8_E4M3, 0x7E, "1e9 saturates"},
        {INFINITY, FP8_E4M3, 0x7E, "+inf saturates"},
        {-INFINITY, FP8_E4M3, 0xFE, "-inf saturates"},
        {-448.0f, FP8_E4M3, 0xFE, "-448"},
        {0x1p-9f, FP8_E4M3, 0x01, "2^-9 smallest subnormal"},
        {0x1p-10f, FP8_E4M3, 0x00, "2^-10 ties to even (0)"},
        {0x1.8p-10f, FP8_E4M3, 0x01, "1.5*2^-10"},
        {1.0625f, FP8_E4M3, 0x38, "1.0625 ties to even (1.0)"},
        {1.1875f, FP8_E4M3, 0x3A, "1.1875 ties to even (1.25)"},
        {-0.0f, FP8_E4M3, 0x80, "-0.0"},
        {NAN, FP8_E4M3, 0x7F, "NaN"},
        {-NAN, FP8_E4M3, 0xFF, "-NaN"},
        {57344.0f, FP8_E5M2, 0x7B, "57344"},
        {61440.0f, FP8_E5M2, 0x7B, "61440 saturates"},
        {INFINITY, FP8_E5M2, 0x7B, "+inf saturates"},
        {-INFINITY, FP8_E5M2, 0xFB, "-inf saturates"},
        {0x1p-16f, FP8_E5M2, 0x01, "2^-16 smallest subnormal"},
        {0x1p-17f, FP8_E5M2, 0x00, "2^-17 ties to even (0)"},
        {1.125f, FP8_E5M2, 0x3C, "1.125 ties to even (1.0)"},
        {1.375f, FP8_E5M2, 0x3E, "1.375 ties to even (1.5)"},
        {-0.0f, FP8_E5M2, 0x80, "-0.0"},
        {NAN, FP8_E5M2, 0x7F, "NaN"},
        {-NAN, FP8_E5M2, 0xFF, "-NaN"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint8_t got = fp8_encode(cases[i].x, cases[i].f);
        char what[160];
        snprintf(what, sizeof what, "%s encode %s -> 0x%02X (got 0x%02X)", fmt_name(cases[i].f), cases[i].what,
                 cases[i].code, got);
        test_check(got == cases[i].code, what);
    }
    test_check(fp8_decode(0x7E, FP8_E4M3) == 448.0f && isnan(fp8_decode(0x7F, FP8_E4M3)) &&
                   fp8_decode(0x01, FP8_E4M3) == 0x1p-9f && fp8_decode(0x08, FP8_E4M3) == 0x1p-6f,
               "e4m3 decode 0x7E = 448, 0x7F NaN, 0x01 = 2^-9, 0x08 = 2^-6");
    test_check(fp8_decode(0x7B, FP8_E5M2) == 57344.0f && fp8_decode(0x7C, FP8_E5M2) == INFINITY &&
                   fp8_decode(0xFC, FP8_E5M2) == -INFINITY && isnan(fp8_decode(0x7D, FP8_E5M2)) &&
                   fp8_decode(0x01, FP8_E5M2) == 0x1p-16f,
               "e5m2 decode 0x7B = 57344, 0x7C +inf, 0xFC -inf, 0x7D NaN, 0x01 = 2^-16");
    test_check(fp8_round_scaled(1.0f, 100.0f, FP8_E4M3) == 96.0f && fp8_round_scaled(10.0f, 100.0f, FP8_E4M3) == 448.0f,
               "fp8_round_scaled: 1 * 100 -> 96 (e4m3 grid 8 in [64,128)), 10 * 100 saturates to 448");
    test_check(fp8_operand_format(FP8_INP) == FP8_E4M3 && fp8_operand_format(FP8_WEIGHT) == FP8_E4M3 &&
                   fp8_operand_format(FP8_GRAD) == FP8_E5M2,
               "fp8_operand_format: INP, WEIGHT e4m3, GRAD e5m2");
}

static void test_scale_from_amax(void) {
    char what[200];
    const float s = fp8_scale_from_amax(3.0f, FP8_E4M3, 0, 7.0f);
    snprintf(what, sizeof what, "fp8_scale_from_amax e4m3: amax 2 -> 224, amax 3 -> 448/3 (%.9g), margin 1, 2 halve",
             s);
    test_check(fp8_scale_from_amax(2.0f, FP8_E4M3, 0, 7.0f) == 224.0f && s == 448.0f / 3.0f &&
                   fp8_scale_from_amax(2.0f, FP8_E4M3, 1, 7.0f) == 112.0f &&
                   fp8_scale_from_amax(2.0f, FP8_E4M3, 2, 7.0f) == 56.0f,
               what);
    test_check(fp8_scale_from_amax(2.0f, FP8_E5M2, 0, 7.0f) == 28672.0f &&
                   fp8_scale_from_amax(2.0f, FP8_E5M2, 1, 7.0f) == 14336.0f,
               "fp8_scale_from_amax e5m2: amax 2 -> 28672, margin 1 -> 14336");
    test_check(fp8_scale_from_amax(0.0f, FP8_E4M3, 0, 7.0f) == 7.0f && fp8_scale_from_amax(NAN, FP8_E4M3, 0, 7.0f) == 7.0f &&
                   fp8_scale_from_amax(INFINITY, FP8_E5M2, 0, 7.0f) == 7.0f &&
                   fp8_scale_from_amax(-1.0f, FP8_E4M3, 0, 7.0f) == 7.0f &&
                   fp8_scale_from_amax(1e-45f, FP8_E4M3, 0, 7.0f) == 7.0f,
               "fp8_scale_from_amax keeps the scale for amax 0, NaN, inf, negative, and when 448/amax overflows");
}

// ---- the linear -----------------------------------------------------------------------------

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

// Normal(0, 1) by Box-Muller.
static float *randn_array(size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const double u1 = (rng_uniform() + 0x1p-25), u2 = rng_uniform();
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
    }
    return x;
}

// c (M,P) = sum_k round(a(m,k)) * round(b(p,k)) * inv_a * inv_b in double; a(m,k) at
// a[m*sam + k*sak], b(p,k) at b[p*sbp + k*sbk]. The independent recomputation of every product.
static double *ref_gemm(const float *a, size_t sam, size_t sak, float sa, Fp8Format fa, const float *b, size_t sbp,
                        size_t sbk, float sb, Fp8Format fb, int M, int P, int K, float inv_a, float inv_b) {
    double *c = malloc((size_t)M * P * sizeof(double));
    for (int m = 0; m < M; m++)
        for (int p = 0; p < P; p++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)fp8_round_scaled(a[m * sam + k * sak], sa, fa) *
                     (double)fp8_round_scaled(b[p * sbp + k * sbk], sb, fb);
            c[(size_t)m * P + p] = s * (double)inv_a * (double)inv_b;
        }
    return c;
}

// Forward over `count` weights with gaps between operands (filled with 1000, which would show in
// amax or the outputs if read or written). current 0: given scales, amax max-reduced onto earlier
// values; current 1: the scales come from the operands.
static void test_forward_case(int N, int I, int O, int count, int current) {
    const size_t ni = (size_t)N * I, oi = (size_t)O * I, no = (size_t)N * O;
    const size_t wstride = oi + 7, ostride = no + 5;
    float *inp = rand_array(ni, 2.0f);
    float *w = malloc(count * wstride * sizeof(float));
    for (size_t i = 0; i < count * wstride; i++) w[i] = 1000.0f;
    for (int z = 0; z < count; z++) {
        float *r = rand_array(oi, 1.0f);
        memcpy(w + z * wstride, r, oi * sizeof(float));
        free(r);
    }
    w[(count - 1) * wstride + oi - 1] = -1.75f;  // the largest |w|: in the last weight only
    float *out = malloc(count * ostride * sizeof(float));
    for (size_t i = 0; i < count * ostride; i++) out[i] = 12345.0f;

    float scale[3] = {150.0f, 300.0f, 999.0f}, inv[3] = {1 / 150.0f, 1 / 300.0f, 0.5f};
    float amax[3] = {0.5f, count == 1 ? 3.0f : 0.25f, 7.0f};  // count 1: an earlier amax above the data's
    if (current) amax[0] = amax[1] = 0.0f, scale[0] = scale[1] = 1.0f, inv[0] = inv[1] = 1.0f;
    const float amax_in = amax[0] > max_abs(inp, ni) ? amax[0] : max_abs(inp, ni);
    const float amax_w = amax[1] > 1.75f ? amax[1] : 1.75f;
    float want_scale[3] = {scale[0], scale[1], scale[2]}, want_inv[3] = {inv[0], inv[1], inv[2]};
    if (current) {
        want_scale[0] = 448.0f / amax_in, want_scale[1] = 448.0f / amax_w;
        want_inv[0] = 1.0f / want_scale[0], want_inv[1] = 1.0f / want_scale[1];
    }
    Fp8Scales s = {.scale = scale, .inv = inv, .amax = amax, .current = current, .inp_t = NULL};
    be->fp8_matmul_forward(out, ostride, inp, w, wstride, N, I, O, count, s);

    char tag[96], what[240];
    snprintf(tag, sizeof tag, "fp8 forward N=%d I=%d O=%d count=%d%s", N, I, O, count, current ? " current" : "");
    float *got = malloc(count * no * sizeof(float)), *want = malloc(count * no * sizeof(float));
    int gaps_kept = 1;
    for (int z = 0; z < count; z++) {
        double *r = ref_gemm(inp, I, 1, want_scale[0], FP8_E4M3, w + z * wstride, I, 1, want_scale[1], FP8_E4M3, N, O,
                             I, want_inv[0], want_inv[1]);
        for (size_t i = 0; i < no; i++) want[z * no + i] = (float)r[i];
        memcpy(got + z * no, out + z * ostride, no * sizeof(float));
        for (size_t i = no; i < ostride; i++) gaps_kept &= out[z * ostride + i] == 12345.0f;
        free(r);
    }
    snprintf(what, sizeof what, "%s vs double from rounded operands", tag);
    test_close(what, got, want, count * no, FP8_TOL);
    snprintf(what, sizeof what, "%s: amax INP %g WEIGHT %g exact (over all weights), GRAD untouched", tag, amax[0],
             amax[1]);
    test_check(amax[0] == amax_in && amax[1] == amax_w && amax[2] == 7.0f, what);
    snprintf(what, sizeof what, "%s: scale %g %g, inv = 1/scale%s; GRAD's untouched; gaps between outputs untouched",
             tag, scale[0], scale[1], current ? " (448/amax)" : " (given, unchanged)");
    test_check(!memcmp(scale, want_scale, sizeof scale) && !memcmp(inv, want_inv, sizeof inv) && gaps_kept, what);
    free(inp), free(w), free(out), free(got), free(want);
}

// Scales that are powers of two and an identity weight: out is the input rounded to e4m3's grid,
// exactly (scale 8, so the grid is e4m3's divided by 8).
static void test_forward_identity(void) {
    const int N = 5, D = 8;
    float *inp = rand_array((size_t)N * D, 3.0f), *w = zeros_array((size_t)D * D), *out = zeros_array((size_t)N * D);
    for (int i = 0; i < D; i++) w[i * D + i] = 1.0f;
    float scale[3] = {8.0f, 4.0f, 1.0f}, inv[3] = {0.125f, 0.25f, 1.0f}, amax[3] = {0};
    be->fp8_matmul_forward(out, 0, inp, w, 0, N, D, D, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 0, .inp_t = NULL});
    int same = 1, moved = 0;
    for (int i = 0; i < N * D; i++) {
        const float want = fp8_decode(fp8_encode(inp[i] * 8.0f, FP8_E4M3), FP8_E4M3) / 8.0f;
        same &= out[i] == want;
        moved += out[i] != inp[i];
    }
    char what[160];
    snprintf(what, sizeof what, "fp8 forward, identity weight, scales 8 and 4: out = e4m3-rounded input bitwise "
                                "(%d of %d values moved)", moved, N * D);
    test_check(same && moved > 0, what);
    free(inp), free(w), free(out);
}

// Backward: dinp set and "+=", dweight "+=", each gradient alone (the other NULL) bitwise the same,
// amax exact; current: the GRAD scale from dout's amax (57344 / amax).
static void test_backward_case(int N, int I, int O, int current) {
    const size_t ni = (size_t)N * I, oi = (size_t)O * I, no = (size_t)N * O;
    float *inp = rand_array(ni, 2.0f), *w = rand_array(oi, 1.0f), *dout = rand_array(no, 0.01f);
    float *P = rand_array(ni, 1.0f), *Q = rand_array(oi, 0.01f);
    float scale[3] = {150.0f, 300.0f, 1e6f}, inv[3] = {1 / 150.0f, 1 / 300.0f, 1e-6f}, amax[3] = {0.5f, 0.5f, 0.0f};
    if (current) {
        amax[0] = amax[1] = 0.0f;
        scale[0] = scale[1] = scale[2] = 1.0f, inv[0] = inv[1] = inv[2] = 1.0f;
    }
    const float a_in = max_abs(inp, ni), a_w = max_abs(w, oi), a_g = max_abs(dout, no);
    float ws[3] = {scale[0], scale[1], scale[2]}, wi[3] = {inv[0], inv[1], inv[2]};
    if (current) {
        ws[0] = 448.0f / a_in, ws[1] = 448.0f / a_w, ws[2] = 57344.0f / a_g;
        for (int k = 0; k < 3; k++) wi[k] = 1.0f / ws[k];
    }
    const Fp8Scales s = {.scale = scale, .inv = inv, .amax = amax, .current = current, .inp_t = NULL};
    float *dinp_set = rand_array(ni, 5.0f), *dinp_acc = copy_array(P, ni), *dweight = copy_array(Q, oi);
    be->fp8_matmul_backward(dinp_set, NULL, dout, inp, w, N, I, O, 1, s);
    be->fp8_matmul_backward(dinp_acc, dweight, dout, inp, w, N, I, O, 0, s);

    char tag[96], what[240];
    snprintf(tag, sizeof tag, "fp8 backward N=%d I=%d O=%d%s", N, I, O, current ? " current" : "");
    // dinp (N,I) = g5 (N,O) @ w4 (O,I); dweight (O,I) = g5^T (O,N) @ q4 (N,I)
    double *rd = ref_gemm(dout, O, 1, ws[2], FP8_E5M2, w, 1, I, ws[1], FP8_E4M3, N, I, O, wi[2], wi[1]);
    double *rw = ref_gemm(dout, 1, O, ws[2], FP8_E5M2, inp, 1, I, ws[0], FP8_E4M3, O, I, N, wi[2], wi[0]);
    float *want_set = to_float(rd, ni), *want_acc = malloc(ni * sizeof(float)), *want_w = malloc(oi * sizeof(float));
    for (size_t i = 0; i < ni; i++) want_acc[i] = (float)(P[i] + rd[i]);
    for (size_t i = 0; i < oi; i++) want_w[i] = (float)(Q[i] + rw[i]);
    snprintf(what, sizeof what, "%s dinp_set (old contents ignored) vs double", tag);
    test_close(what, dinp_set, want_set, ni, FP8_TOL);
    snprintf(what, sizeof what, "%s dinp += vs prefill + double", tag);
    test_close(what, dinp_acc, want_acc, ni, FP8_TOL);
    snprintf(what, sizeof what, "%s dweight += vs prefill + double", tag);
    test_close(what, dweight, want_w, oi, FP8_TOL);
    snprintf(what, sizeof what, "%s: amax GRAD %g INP %g WEIGHT %g exact", tag, amax[2], amax[0], amax[1]);
    test_check(amax[2] == a_g && amax[0] == (a_in > 0.5f || current ? a_in : 0.5f) &&
                   amax[1] == (a_w > 0.5f || current ? a_w : 0.5f),
               what);
    snprintf(what, sizeof what, "%s: scales %g %g %g, inv = 1/scale%s", tag, scale[0], scale[1], scale[2],
             current ? " (448/amax, GRAD 57344/amax)" : " (given, unchanged)");
    test_check(!memcmp(scale, ws, sizeof ws) && !memcmp(inv, wi, sizeof wi), what);

    float *d_only = copy_array(P, ni), *w_only = copy_array(Q, oi);
    be->fp8_matmul_backward(d_only, NULL, dout, NULL, w, N, I, O, 0, s);
    be->fp8_matmul_backward(NULL, w_only, dout, inp, NULL, N, I, O, 0, s);
    snprintf(what, sizeof what, "%s: dweight NULL (inp NULL) gives dinp bitwise", tag);
    check_bitwise(what, d_only, dinp_acc, ni * sizeof(float));
    snprintf(what, sizeof what, "%s: dinp NULL (weight NULL) gives dweight bitwise", tag);
    check_bitwise(what, w_only, dweight, oi * sizeof(float));
    free(inp), free(w), free(dout), free(P), free(Q), free(dinp_set), free(dinp_acc), free(dweight), free(rd), free(rw);
    free(want_set), free(want_acc), free(want_w), free(d_only), free(w_only);
}

// A NaN in an operand makes its amax NaN, and a NaN amax stays NaN over later clean calls; a
// current step with a NaN amax keeps the scale.
static void test_amax_nan(void) {
    const int N = 3, I = 5, O = 4;
    float *inp = rand_array(N * I, 1.0f), *w = rand_array(O * I, 1.0f), *dout = rand_array(N * O, 1.0f);
    float *out = zeros_array(N * O), *dinp = zeros_array(N * I);
    float scale[3] = {2.0f, 2.0f, 2.0f}, inv[3] = {0.5f, 0.5f, 0.5f}, amax[3] = {0};
    inp[7] = NAN;
    be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 0, .inp_t = NULL});
    const int first = isnan(amax[0]) && amax[1] == max_abs(w, O * I);
    inp[7] = 0.5f;
    be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 1, .inp_t = NULL});
    test_check(first && isnan(amax[0]) && scale[0] == 2.0f && inv[0] == 0.5f && scale[1] == 448.0f / amax[1],
               "fp8 amax: a NaN input gives NaN, which stays over a clean call; current keeps the NaN operand's scale");
    dout[N * O - 1] = -NAN;
    be->fp8_matmul_backward(dinp, NULL, dout, inp, w, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 0, .inp_t = NULL});
    test_check(isnan(amax[2]), "fp8 amax: a NaN in dout (the last element) gives amax[GRAD] NaN");
    free(inp), free(w), free(dout), free(out), free(dinp);
}

// scales_update over 2 slots (6 entries), history of 4, margin 1 then 0.
static void test_scales_update(void) {
    enum { NS = 2, E = NS * FP8_OPERANDS, H = 4 };
    float hist[E][H] = {
        {1, 2, 0, 0.5f},       // INP: amax 3 written at col 2 is the max
        {4, 0, 9, 1},          // WEIGHT: col 2's old 9 replaced by 2: the max is 4
        {0.5f, 0, 0, 0},       // GRAD: max 0.5 from history, amax 0.25 -> e5m2 max
        {0, 0, 0, 0},          // all zero: kept
        {1, NAN, 0, 0},        // NaN in the row: kept
        {0, 0, 0, 0},          // amax NaN: kept
    };
    float amax[E] = {3, 2, 0.25f, 0, 1, NAN};
    float scale[E] = {1, 1, 1, 3.5f, 2.5f, 1.5f}, inv[E];
    for (int e = 0; e < E; e++) inv[e] = 1.0f / scale[e];
    float old[E][H];
    memcpy(old, hist, sizeof hist);
    be->fp8_scales_update(scale, inv, amax, &hist[0][0], NS, H, 2, 1);
    const float want[E] = {448.0f / 3.0f / 2, 448.0f / 4 / 2, 57344.0f / 0.5f / 2, 3.5f, 2.5f, 1.5f};
    int col_ok = 1, others_ok = 1, amax_zero = 1, scale_ok = 1;
    const float wrote[E] = {3, 2, 0.25f, 0, 1, NAN};
    for (int e = 0; e < E; e++) {
        col_ok &= isnan(wrote[e]) ? isnan(hist[e][2]) : hist[e][2] == wrote[e];
        for (int j = 0; j < H; j++)
            if (j != 2) others_ok &= !memcmp(&hist[e][j], &old[e][j], sizeof(float));
        amax_zero &= amax[e] == 0.0f && !signbit(amax[e]);
        scale_ok &= scale[e] == want[e] && inv[e] == 1.0f / want[e];
    }
    test_check(col_ok && others_ok, "fp8_scales_update: amax written to history column 2, other columns untouched");
    test_check(amax_zero, "fp8_scales_update: amax zeroed");
    char what[240];
    snprintf(what, sizeof what,
             "fp8_scales_update margin 1: scales %g %g %g (row max, GRAD e5m2) kept %g %g %g (zero, NaN row, NaN amax)",
             scale[0], scale[1], scale[2], scale[3], scale[4], scale[5]);
    test_check(scale_ok, what);
    be->fp8_scales_update(scale, inv, amax, &hist[0][0], NS, H, 3, 0);  // col 3 <- 0
    test_check(scale[0] == 448.0f / 3.0f && scale[1] == 448.0f / 4 && scale[2] == 57344.0f / 0.5f &&
                   hist[0][3] == 0.0f && scale[3] == 3.5f && inv[0] == 1.0f / scale[0],
               "fp8_scales_update margin 0, col 3: scale = max / row max (the amax 0 written does not lower it)");
}

// fp8 against the exact fp32 product on N(0,1) data with the first step's scales: the relative
// Frobenius error of two e4m3 roundings (a few percent); the same call again bitwise the same,
// and the same on one thread.
static void test_error_and_determinism(void) {
    const int N = 32, I = 256, O = 64;
    const size_t no = (size_t)N * O;
    float *inp = randn_array((size_t)N * I), *w = randn_array((size_t)O * I);
    float *ref = zeros_array(no), *out = zeros_array(no), *again = zeros_array(no), *one = zeros_array(no);
    be->matmul_forward(ref, inp, w, N, I, O);
    float scale[3] = {1, 1, 1}, inv[3] = {1, 1, 1}, amax[3] = {0};
    be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 1, .inp_t = NULL});
    double num = 0, den = 0;
    for (size_t i = 0; i < no; i++) {
        num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    const double rel = sqrt(num / den);
    char what[200];
    snprintf(what, sizeof what, "fp8 forward N(0,1) N=%d I=%d O=%d current: relative Frobenius error vs fp32 %.4f "
                                "(< 0.1, > 0: it rounded)", N, I, O, rel);
    test_check(rel < 0.1 && rel > 1e-4, what);
    be->fp8_matmul_forward(again, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 1, .inp_t = NULL});
    check_bitwise("fp8 forward: a second call on the same data (amax carried over) bitwise the same", out, again,
                  no * sizeof(float));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    be->fp8_matmul_forward(one, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = scale, .inv = inv, .amax = amax, .current = 0, .inp_t = NULL});
    omp_set_num_threads(threads);
    snprintf(what, sizeof what, "fp8 forward: 1 thread bitwise %d threads", threads);
    check_bitwise(what, out, one, no * sizeof(float));
    free(inp), free(w), free(ref), free(out), free(again), free(one);
}

// Fp8Scales.inp_t: the forward writes the input's e4m3 codes transposed (I, N16), padding
// zero; a backward that reads them (inp NULL) gives the dweight of one that rounds inp again,
// bit for bit, and leaves the INP amax and scale alone.
static void test_kept_input(int N, int I, int O, int current) {
    const size_t N16 = fp8_rows_padded((size_t)N), ni = (size_t)N * I, oi = (size_t)O * I, no = (size_t)N * O;
    float *inp = rand_array(ni, 2.0f), *w = rand_array(oi, 0.5f), *dout = rand_array(no, 1e-3f);
    float *out = zeros_array(no), *dw_a = zeros_array(oi), *dw_b = zeros_array(oi), *din_a = zeros_array(ni),
          *din_b = zeros_array(ni);
    uint8_t *kept = malloc(I * N16);
    memset(kept, 0xAB, I * N16);
    float sa[3] = {4.0f, 8.0f, 1024.0f}, ia[3] = {0.25f, 0.125f, 1.0f / 1024}, aa[3] = {0};
    be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = sa, .inv = ia, .amax = aa, .current = current, .inp_t = kept});
    int codes_ok = 1;
    for (int i = 0; i < I; i++)
        for (size_t n = 0; n < N16; n++) {
            const uint8_t want = n < (size_t)N ? fp8_encode(inp[n * I + i] * sa[0], FP8_E4M3) : 0;
            codes_ok &= kept[(size_t)i * N16 + n] == want;
        }
    char what[200];
    snprintf(what, sizeof what, "fp8 kept input N=%d I=%d%s: the forward's codes, transposed, padding zero", N, I,
             current ? " current" : "");
    test_check(codes_ok, what);
    float sb[3], ib[3], ab[3];
    memcpy(sb, sa, sizeof sa), memcpy(ib, ia, sizeof ia), memcpy(ab, aa, sizeof aa);
    const float inp_scale = sa[0], inp_amax = aa[0];
    be->fp8_matmul_backward(din_a, dw_a, dout, inp, w, N, I, O, 1,
            (Fp8Scales){.scale = sa, .inv = ia, .amax = aa, .current = current, .inp_t = NULL});
    be->fp8_matmul_backward(din_b, dw_b, dout, NULL, w, N, I, O, 1,
            (Fp8Scales){.scale = sb, .inv = ib, .amax = ab, .current = current, .inp_t = kept});
    snprintf(what, sizeof what, "fp8 kept input N=%d I=%d O=%d%s: dweight from the kept codes bitwise the rounded inp's", N,
             I, O, current ? " current" : "");
    check_bitwise(what, dw_a, dw_b, oi * sizeof(float));
    snprintf(what, sizeof what, "fp8 kept input N=%d I=%d O=%d%s: dinp the same, the INP scale and amax left as the "
             "forward's", N, I, O, current ? " current" : "");
    test_check(!memcmp(din_a, din_b, ni * sizeof(float)) && sb[0] == inp_scale && ab[0] == inp_amax && sb[2] == sa[2],
               what);
    free(inp), free(w), free(dout), free(out), free(dw_a), free(dw_b), free(din_a), free(din_b), free(kept);
}

int main(void) {
    be = backend_cpu();
    test_format_round_trip(FP8_E4M3);
    test_format_round_trip(FP8_E5M2);
    test_format_nearest(FP8_E4M3);
    test_format_nearest(FP8_E5M2);
    test_format_known_values();
    test_scale_from_amax();
    const int shapes[2][3] = {{7, 13, 29}, {32, 64, 48}};
    for (int i = 0; i < 2; i++)
        for (int current = 0; current <= 1; current++) {
            test_forward_case(shapes[i][0], shapes[i][1], shapes[i][2], 1, current);
            test_forward_case(shapes[i][0], shapes[i][1], shapes[i][2], 3, current);
            test_backward_case(shapes[i][0], shapes[i][1], shapes[i][2], current);
        }
    test_kept_input(7, 13, 29, 0);
    test_kept_input(33, 64, 48, 1);
    test_forward_identity();
    test_amax_nan();
    test_scales_update();
    test_error_and_determinism();
    return test_summary();
}
