// kernels/cpu/fp8.c: the fp32 reference of the fp8 linear (backend.h fp8_matmul_forward,
// fp8_matmul_backward, fp8_scales_update; fp8_relu_drop_matmul_* compose them with ffn_act.c's): every operand is rounded to its 8-bit grid
// (kernels/fp8_format.h, scaled values kept in fp32 buffers), the rounded copies go through
// the fp32 GEMM of matmul.c, and each sum is then multiplied by one fp32 factor
// inv[a] * inv[b]. The sums are matmul.c's (fp32 over blocks of 64 terms, the blocks added
// in double, rounded to float once); fp8 products are exact in fp32, so only the sums round.
// Dimension letters as backend.h: N rows, I in features, O out features.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../common/check.h"
#include "../fp8_format.h"
#include "cpu_ops.h"

// *amax = max(*amax, max |x|) over x (n); a NaN in either stays NaN (a comparison with
// NaN is false, so the NaN branch is explicit).
static void cpu_fp8_reduce_amax(float *amax, const float *x, size_t n) {
    float m = *amax;
    for (size_t i = 0; i < n && !isnan(m); i++) {
        const float a = fabsf(x[i]);
        if (a > m || isnan(a)) m = a;
    }
    *amax = m;
}

// The first step (s.current): scale[k] from the amax reduced so far, inv[k] = 1 / scale[k].
static void cpu_fp8_set_current_scale(Fp8Scales s, int k) {
    if (!s.current) return;
    s.scale[k] = fp8_scale_from_amax(s.amax[k], fp8_operand_format(k), 0, s.scale[k]);
    s.inv[k] = 1.0f / s.scale[k];
}

// dst (n) = x (n) * scale rounded to operand k's format, in fp32 (a fresh buffer).
static float *cpu_fp8_round_operand(const float *x, size_t n, Fp8Scales s, int k) {
    float *dst = mallocCheck(n * sizeof(float));
    const float scale = s.scale[k];
    const Fp8Format f = fp8_operand_format(k);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = fp8_round_scaled(x[i], scale, f);
    return dst;
}

// out (n) = sum (n) * factor (set) or out += sum * factor.
static void cpu_fp8_write_scaled(float *out, const float *sum, size_t n, float factor, int set) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float v = sum[i] * factor;
        out[i] = set ? v : out[i] + v;
    }
}

// kept (I, N16) = the e4m3 codes of inp (N,I) * scale, transposed; rows N..N16-1 zero
// (backend.h Fp8Scales.inp_t).
static void cpu_fp8_keep_transposed(uint8_t *kept, const float *inp, int N, int I, float scale) {
    const size_t N16 = fp8_rows_padded((size_t)N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < I; i++)
        for (size_t n = 0; n < N16; n++)
            kept[(size_t)i * N16 + n] = n < (size_t)N ? fp8_encode(inp[n * (size_t)I + i] * scale, FP8_E4M3) : 0;
}

// (N,I) in fp32 from kept e4m3 codes stored transposed, (I, ld): the values rounded earlier
// (the forward's input: ld = N padded to 16; the step's weight codes w4t: ld = N).
static float *cpu_fp8_unkeep(const uint8_t *kept, int N, int I, size_t ld) {
    float *q4 = mallocCheck((size_t)N * I * sizeof(float) + 1);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) q4[(size_t)n * I + i] = fp8_decode(kept[(size_t)i * ld + n], FP8_E4M3);
    return q4;
}

// The step's kept weight codes (Fp8Scales.w4, w4t) of a (R, C) weight at scale: row-major and
// transposed.
static void cpu_fp8_keep_weight(uint8_t *w4, uint8_t *w4t, const float *w, size_t R, size_t C, float scale) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++)
        for (size_t c = 0; c < C; c++) {
            const uint8_t code = fp8_encode(w[r * C + c] * scale, FP8_E4M3);
            w4[r * C + c] = code;
            w4t[c * R + r] = code;
        }
}

// (n) e4m3 codes -> their values in fp32 (a fresh buffer).
static float *cpu_fp8_decode_all(const uint8_t *codes, size_t n) {
    float *v = mallocCheck(n * sizeof(float) + 1);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) v[i] = fp8_decode(codes[i], FP8_E4M3);
    return v;
}

// out_z (N,O) = (q4(inp) (N,I) @ w4_z (O,I)^T) * inv[INP] * inv[WEIGHT], z < count;
// weight_z at weight + z * weight_stride, out_z at out + z * out_stride (elements). With the
// step's weight codes kept (s.w4): written first (s.w_round) or read as written.
void cpu_fp8_matmul_forward(void *out_, size_t out_stride, const void *inp_, const void *weight_,
                            size_t weight_stride, int N, int I, int O, int count, Fp8Scales s) {
    float *out = out_;
    const float *inp = inp_, *weight = weight_;
    const size_t ni = (size_t)N * I, oi = (size_t)O * I, no = (size_t)N * O;
    const int wround = !s.w4 || s.w_round;  // kept codes read as written: the weight's scale and amax stand
    if (s.w4 && count > 1 && weight_stride != oi)
        t5_fail("fp8_matmul_forward: kept weight codes need the %d weights adjacent (stride %zu, not %zu)", count,
                weight_stride, oi);
    cpu_fp8_reduce_amax(&s.amax[FP8_INP], inp, ni);
    if (wround)
        for (int z = 0; z < count; z++) cpu_fp8_reduce_amax(&s.amax[FP8_WEIGHT], weight + z * weight_stride, oi);
    cpu_fp8_set_current_scale(s, FP8_INP);
    if (wround) cpu_fp8_set_current_scale(s, FP8_WEIGHT);
    if (s.w4 && s.w_round) cpu_fp8_keep_weight(s.w4, s.w4t, weight, (size_t)count * O, I, s.scale[FP8_WEIGHT]);
    const float factor = s.inv[FP8_INP] * s.inv[FP8_WEIGHT];
    float *q4 = cpu_fp8_round_operand(inp, ni, s, FP8_INP);  // (N,I)
    if (s.inp_t) cpu_fp8_keep_transposed(s.inp_t, inp, N, I, s.scale[FP8_INP]);
    for (int z = 0; z < count; z++) {
        float *w4 = s.w4 ? cpu_fp8_decode_all(s.w4 + z * oi, oi)
                         : cpu_fp8_round_operand(weight + z * weight_stride, oi, s, FP8_WEIGHT);  // (O,I)
        float *oz = out + z * out_stride;
        cpu_matmul_forward(oz, q4, w4, N, I, O);
        cpu_fp8_write_scaled(oz, oz, no, factor, 1);
        freeCheck(w4);
    }
    freeCheck(q4);
}

// dinp (N,I) (+)= (g5 (N,O) @ w4 (O,I)) * inv[GRAD] * inv[WEIGHT]     (dinp NULL: skipped)
// dweight (O,I) += (g5^T (O,N) @ q4 (N,I)) * inv[GRAD] * inv[INP]     (dweight NULL: skipped)
// Only the operands a product reads are reduced and rounded: WEIGHT when dinp is set, INP
// when dweight is set (their amax is the forward's anyway: the same values).
void cpu_fp8_matmul_backward(void *dinp, void *dweight, const void *dout_, const void *inp_, const void *weight_,
                             int N, int I, int O, int dinp_set, Fp8Scales s) {
    const float *dout = dout_, *inp = inp_, *weight = weight_;
    const size_t ni = (size_t)N * I, oi = (size_t)O * I, no = (size_t)N * O;
    cpu_fp8_reduce_amax(&s.amax[FP8_GRAD], dout, no);
    const int round_w = dinp && !s.w4t;         // the step's kept weight codes: its scale and amax stand
    if (round_w) cpu_fp8_reduce_amax(&s.amax[FP8_WEIGHT], weight, oi);
    const int round_inp = dweight && !s.inp_t;  // kept by the forward: its scale and amax stand
    if (round_inp) cpu_fp8_reduce_amax(&s.amax[FP8_INP], inp, ni);
    cpu_fp8_set_current_scale(s, FP8_GRAD);
    if (round_w) cpu_fp8_set_current_scale(s, FP8_WEIGHT);
    if (round_inp) cpu_fp8_set_current_scale(s, FP8_INP);
    float *g5 = cpu_fp8_round_operand(dout, no, s, FP8_GRAD);  // (N,O)
    if (dinp) {
        // (O,I): rounded now, or the step's kept transposed codes (I, O)
        float *w4 = round_w ? cpu_fp8_round_operand(weight, oi, s, FP8_WEIGHT) : cpu_fp8_unkeep(s.w4t, O, I, (size_t)O);
        float *sum = mallocCheck(ni * sizeof(float));                   // (N,I)
        cpu_matmul_backward(sum, NULL, g5, NULL, w4, N, I, O, 1);
        cpu_fp8_write_scaled(dinp, sum, ni, s.inv[FP8_GRAD] * s.inv[FP8_WEIGHT], dinp_set);
        freeCheck(w4), freeCheck(sum);
    }
    if (dweight) {
        float *q4 = round_inp ? cpu_fp8_round_operand(inp, ni, s, FP8_INP) : cpu_fp8_unkeep(s.inp_t, N, I, fp8_rows_padded((size_t)N));  // (N,I)
        float *sum = callocCheck(oi ? oi : 1, sizeof(float));     // (O,I): the GEMM adds into zeros
        cpu_matmul_backward(NULL, sum, g5, q4, NULL, N, I, O, 0);
        cpu_fp8_write_scaled(dweight, sum, oi, s.inv[FP8_GRAD] * s.inv[FP8_INP], 0);
        freeCheck(q4), freeCheck(sum);
    }
    freeCheck(g5);
}

// The ReLU FFN's linears with the activation between them (backend.h): the two ops in turn,
// through a buffer of their own for h (da).
void cpu_fp8_relu_drop_matmul_forward(void *out, uint8_t *bits, const void *a, const void *weight, int N, int I, int O,
                                      DropoutArgs drop, Fp8Scales s) {
    const size_t n = (size_t)N * I;
    float *h = mallocCheck(n * sizeof(float) + 1);
    cpu_relu_drop_forward(h, bits, a, n, drop);
    cpu_fp8_matmul_forward(out, 0, h, weight, 0, N, I, O, 1, s);
    freeCheck(h);
}

void cpu_fp8_relu_drop_matmul_backward(void *dinp, void *dweight, const void *dh, const uint8_t *bits, const void *inp,
                                       const void *weight, int N, int I, int O, int dinp_set, DropoutArgs drop,
                                       Fp8Scales s) {
    const size_t n = (size_t)N * O;
    float *da = mallocCheck(n * sizeof(float) + 1);
    cpu_relu_drop_backward(da, dh, bits, n, drop, 1);
    cpu_fp8_matmul_backward(dinp, dweight, da, inp, weight, N, I, O, dinp_set, s);
    freeCheck(da);
}

// Entry e < n * FP8_OPERANDS: history row e (hist_len) gets amax[e] at col, amax[e] = 0, and
// the scale follows the row's max (NaN anywhere in the row: not finite, the scale is kept).
void cpu_fp8_scales_update(float *scale, float *inv, float *amax, float *history, int n, int hist_len, int col,
                           int margin) {
    for (size_t e = 0; e < (size_t)n * FP8_OPERANDS; e++) {
        float *row = history + e * (size_t)hist_len;
        row[col] = amax[e];
        amax[e] = 0.0f;
        float m = 0.0f;
        cpu_fp8_reduce_amax(&m, row, (size_t)hist_len);
        scale[e] = fp8_scale_from_amax(m, fp8_operand_format((int)(e % FP8_OPERANDS)), margin, scale[e]);
        inv[e] = 1.0f / scale[e];
    }
}
