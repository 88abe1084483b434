// tests/gpu/test_cuda_ops_matmul_attention.c: the CUDA matmul, attention and copy_rows
// ops (kernels/cuda/matmul.cu, attention.cu, backend_cuda.cu) against the fp32 CPU
// reference backend, at fp32, bf16 and fp16.
//   - inputs are random, never zero, and rounded to the dtype before the CPU sees them,
//     so both sides start from the same numbers; errors are normalized max errors
//     (max |gpu - cpu| / max |cpu|, tests/test.h);
//   - backward ops run into prefilled gradient buffers (they must ADD); the attention
//     backward gets the GPU's own saved probabilities on both sides, so its check
//     measures the backward alone;
//   - odd shapes (matmul N=7 I=13 O=29; attention B=3 H=3 Tq=7 Tk=11 dk=5), shapes that
//     take every softmax path (scalar Tk=11/301, vector Tk=12/128/300, looping Tk=1100),
//     kv_rows > Tk (generation cache), and
//     t5-large shapes (N=2048 I=1024 O=4096; B=4 H=16 T=128 dk=64);
//   - bitwise determinism (every op run twice), NULL gradient outputs giving the same
//     other gradients bitwise, masked probabilities exactly 0, no allocation on a
//     repeated call;
//   - a perf print (PERF lines, not checks): matmul TFLOP/s and attention ms from CUDA
//     events.
// Tolerances (normalized; worst measured on an H200 in brackets):
//   matmul fp32 1e-5 (2e-5 when a dimension is >= 1024) [3.4e-6]; bf16 5e-3 [3.2e-3] and
//   fp16 1e-3 [4.1e-4]: one rounding of the output, at most 2^-8 / 2^-11 of the value.
//   Backward into prefilled buffers (+=) allows twice that [bf16 6.0e-3, fp16 8.7e-4]:
//   cuBLASLt's 16-bit epilogue rounds the product before adding beta*C, the same two
//   roundings as torch's grad += of a 16-bit gradient. The "into zeros" checks hold the
//   single-rounding bound.
//   attention fp32 1e-5 forward [7.6e-7], 2e-5 backward [3.0e-7]; bf16 3e-2 [1.1e-2] and
//   fp16 5e-3 [1.1e-3] both ways: scores and probabilities are stored in the activation
//   dtype between the GEMMs and the softmax (as HF does), and a bf16 score of 4..8 is off
//   by up to 2^-6, which moves a probability by ~1.5%.
// Environment: T5_TEST_QUICK=1 small shapes only, no perf (for compute-sanitizer);
// T5_GEMM_FALLBACK=1 every GEMM on matmul.cu's simple kernel (checks only);
// T5_TEST_PERF_ONLY=1 the PERF lines only (for profilers).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/backend.h"
#include "../../kernels/cuda/cuda_ops.h"
#include "../test.h"

// ---- random numbers and dtype conversions on the host ---------------------------------------

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rng_u32(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}
static float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1.0p-24f; }

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fff + ((u >> 16) & 1);                                            // round to nearest even
    return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return (uint16_t)(sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00));
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // >= 65520 rounds to inf
    if (ax < 0x38800000) {                                   // below 2^-14: subnormal, units of 2^-24
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    }
    uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffff) >> 13), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31) u = sign | 0x7f800000 | (m << 13);
    else u = sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const char *dt_name(Dtype dt) { return dt == DTYPE_F32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "fp16"; }
static size_t dt_size(Dtype dt) { return dt == DTYPE_F32 ? 4 : 2; }
static float round_dt(Dtype dt, float x) {
    return dt == DTYPE_F32 ? x : dt == DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
}
static void encode(Dtype dt, void *dst, const float *src, size_t n) {
    if (dt == DTYPE_F32) memcpy(dst, src, n * 4);
    else
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = dt == DTYPE_BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
}
static void decode(Dtype dt, float *dst, const void *src, size_t n) {
    if (dt == DTYPE_F32) memcpy(dst, src, n * 4);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = dt == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)src)[i]) : f16_to_f32(((const uint16_t *)src)[i]);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

// Values in [-scale, -0.05 scale] U [0.05 scale, scale], rounded to dt: never zero.
static float *rand_dt(Dtype dt, size_t n, float scale) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float u = 0.05f + 0.95f * rng_uniform();
        x[i] = round_dt(dt, (rng_u32() & 1 ? u : -u) * scale);
    }
    return x;
}
static float *copy_floats(const float *x, size_t n) {
    float *y = xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

// Device copies of host float arrays (converted to dt) and back.
static void *gpu_from(Dtype dt, const float *x, size_t n) {
    void *d = cuda_alloc(n * dt_size(dt));
    void *h = xmalloc(n * dt_size(dt));
    encode(dt, h, x, n);
    cuda_to_device(d, h, n * dt_size(dt));
    free(h);
    return d;
}
static float *gpu_floats(Dtype dt, const void *d, size_t n) {
    void *h = xmalloc(n * dt_size(dt));
    cuda_to_host(h, d, n * dt_size(dt));
    float *x = xmalloc(n * sizeof(float));
    decode(dt, x, h, n);
    free(h);
    return x;
}
static void *gpu_raw(Dtype dt, const void *d, size_t n) {
    void *h = xmalloc(n * dt_size(dt));
    cuda_to_host(h, d, n * dt_size(dt));
    return h;
}
static int *gpu_ints(const int *x, size_t n) {
    int *d = cuda_alloc(n * sizeof(int));
    cuda_to_device(d, x, n * sizeof(int));
    return d;
}
static int same_bytes(Dtype dt, const void *a_dev, const void *b_dev, size_t n) {
    void *a = gpu_raw(dt, a_dev, n), *b = gpu_raw(dt, b_dev, n);
    int same = memcmp(a, b, n * dt_size(dt)) == 0;
    free(a);
    free(b);
    return same;
}

typedef struct {
    Dtype dt;
    double mm, mm_long_k, mm_acc, att_fwd, att_bwd;  // mm_acc: factor for backward into prefilled buffers
} Tol;
static const Tol TOLS[] = {
    {DTYPE_F32, 1e-5, 2e-5, 1.0, 1e-5, 2e-5},
    {DTYPE_BF16, 5e-3, 5e-3, 2.0, 3e-2, 3e-2},
    {DTYPE_F16, 1e-3, 1e-3, 2.0, 5e-3, 5e-3},
};

static const Backend *cpu;

// ---- matmul ------------------------------------------------------------------------------------

static void test_matmul_case(const Tol *t, int N, int I, int O) {
    const Dtype dt = t->dt;
    const double tol = (I >= 1024 || O >= 1024 || N >= 1024) ? t->mm_long_k : t->mm, tol_acc = tol * t->mm_acc;
    const size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 1.0f), *dout = rand_dt(dt, nout, 1.0f);
    float *pin = rand_dt(dt, nin, 1.0f), *pw = rand_dt(dt, nw, 1.0f);
    char name[256], tag[96];
    snprintf(tag, sizeof tag, "%s N=%d I=%d O=%d", dt_name(dt), N, I, O);

    float *out_c = xmalloc(nout * sizeof(float)), *din_c = copy_floats(pin, nin), *dw_c = copy_floats(pw, nw);
    float *din0_c = calloc(nin, sizeof(float)), *dw0_c = calloc(nw, sizeof(float));
    cpu->matmul_forward(out_c, inp, w, N, I, O);
    cpu->matmul_backward(din_c, dw_c, dout, inp, w, N, I, O);
    cpu->matmul_backward(din0_c, dw0_c, dout, inp, w, N, I, O);

    void *inp_g = gpu_from(dt, inp, nin), *w_g = gpu_from(dt, w, nw), *dout_g = gpu_from(dt, dout, nout);
    void *out_g = cuda_alloc(nout * dt_size(dt)), *out2_g = cuda_alloc(nout * dt_size(dt));
    void *din_g = gpu_from(dt, pin, nin), *dw_g = gpu_from(dt, pw, nw);
    void *din2_g = gpu_from(dt, pin, nin), *dw2_g = gpu_from(dt, pw, nw);
    cuda_matmul_forward(dt, out_g, inp_g, w_g, N, I, O);
    cuda_matmul_backward(dt, din_g, dw_g, dout_g, inp_g, w_g, N, I, O);
    size_t mem_before = cuda_mem_in_use();
    cuda_matmul_forward(dt, out2_g, inp_g, w_g, N, I, O);
    cuda_matmul_backward(dt, din2_g, NULL, dout_g, inp_g, w_g, N, I, O);  // dinp only
    cuda_matmul_backward(dt, NULL, dw2_g, dout_g, inp_g, w_g, N, I, O);   // dweight only
    size_t mem_after = cuda_mem_in_use();
    void *din0_g = cuda_alloc(nin * dt_size(dt)), *dw0_g = cuda_alloc(nw * dt_size(dt));  // zeroed
    cuda_matmul_backward(dt, din0_g, dw0_g, dout_g, inp_g, w_g, N, I, O);

    float *out = gpu_floats(dt, out_g, nout), *din = gpu_floats(dt, din_g, nin), *dw = gpu_floats(dt, dw_g, nw);
    snprintf(name, sizeof name, "matmul_forward  [%s] out", tag);
    test_close(name, out, out_c, nout, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dinp (into zeros)", tag);
    float *din0 = gpu_floats(dt, din0_g, nin), *dw0 = gpu_floats(dt, dw0_g, nw);
    test_close(name, din0, din0_c, nin, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dweight (into zeros)", tag);
    test_close(name, dw0, dw0_c, nw, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dinp (+= prefill)", tag);
    test_close(name, din, din_c, nin, tol_acc);
    snprintf(name, sizeof name, "matmul_backward [%s] dweight (+= prefill)", tag);
    test_close(name, dw, dw_c, nw, tol_acc);
    snprintf(name, sizeof name, "matmul [%s] repeated forward bitwise equal", tag);
    test_check(same_bytes(dt, out_g, out2_g, nout), name);
    snprintf(name, sizeof name, "matmul [%s] backward with dweight NULL: same dinp bitwise", tag);
    test_check(same_bytes(dt, din_g, din2_g, nin), name);
    snprintf(name, sizeof name, "matmul [%s] backward with dinp NULL: same dweight bitwise", tag);
    test_check(same_bytes(dt, dw_g, dw2_g, nw), name);
    snprintf(name, sizeof name, "matmul [%s] repeated calls allocate nothing (%zu -> %zu bytes)", tag, mem_before,
             mem_after);
    test_check(mem_before == mem_after, name);

    void *bufs[] = {inp_g, w_g, dout_g, out_g, out2_g, din_g, dw_g, din2_g, dw2_g, din0_g, dw0_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
    float *hb[] = {inp, w, dout, pin, pw, out_c, din_c, dw_c, out, din, dw, din0_c, dw0_c, din0, dw0};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

// ---- attention -----------------------------------------------------------------------------------

typedef struct {
    const char *label;
    int B, H, Tq, Tk, kv_rows, dk;
    int use_mask, all_masked_batch, use_bias, causal, q_offset;
    float p;
} AttCase;

static int key_masked(const int *mask, int kv_rows, int b, int j, int causal, int qpos) {
    return (mask && mask[(size_t)b * kv_rows + j] == 0) || (causal && j > qpos);
}

static void test_attention_case(const Tol *t, const AttCase *c) {
    const Dtype dt = t->dt;
    const int B = c->B, H = c->H, Tq = c->Tq, Tk = c->Tk, KR = c->kv_rows, DK = c->dk;
    const size_t HD = (size_t)H * DK, nq = (size_t)B * Tq * HD, nkv = (size_t)B * KR * HD, nk = (size_t)B * Tk * HD,
                 nbias = (size_t)H * Tq * Tk, natt = (size_t)B * H * Tq * Tk;
    char name[320], tag[200];
    snprintf(tag, sizeof tag, "%s %s B=%d H=%d Tq=%d Tk=%d kv_rows=%d dk=%d", dt_name(dt), c->label, B, H, Tq, Tk, KR,
             DK);

    float *q = rand_dt(dt, nq, 0.6f), *kf = rand_dt(dt, nkv, 0.6f), *vf = rand_dt(dt, nkv, 1.0f);
    for (int b = 0; b < B; b++)  // cache rows past Tk: values that would show if read
        for (int j = Tk; j < KR; j++)
            for (size_t e = 0; e < HD; e++) kf[((size_t)b * KR + j) * HD + e] = vf[((size_t)b * KR + j) * HD + e] = 100.0f;
    float *bias = c->use_bias ? rand_dt(dt, nbias, 1.0f) : NULL;
    int *mask = NULL, *maskc = NULL;
    if (c->use_mask) {
        mask = xmalloc((size_t)B * KR * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < KR; j++)
                mask[(size_t)b * KR + j] = j < Tk ? j < Tk - 2 - 2 * b : (j & 1);  // end padding; past Tk: ignored
        mask[1] = 0;                                                                // a hole
        if (c->all_masked_batch)
            for (int j = 0; j < Tk; j++) mask[(size_t)(B - 1) * KR + j] = 0;
        maskc = xmalloc((size_t)B * Tk * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < Tk; j++) maskc[(size_t)b * Tk + j] = mask[(size_t)b * KR + j];
    }
    // dense (B,Tk,HD) keys and values for the CPU
    float *kc = xmalloc(nk * sizeof(float)), *vc = xmalloc(nk * sizeof(float));
    for (int b = 0; b < B; b++) {
        memcpy(kc + (size_t)b * Tk * HD, kf + (size_t)b * KR * HD, (size_t)Tk * HD * sizeof(float));
        memcpy(vc + (size_t)b * Tk * HD, vf + (size_t)b * KR * HD, (size_t)Tk * HD * sizeof(float));
    }
    DropoutArgs drop = {c->p, 0x5eed0000ULL + (uint64_t)Tq * 131 + (uint64_t)Tk};

    float *out_c = xmalloc(nq * sizeof(float)), *att_c = xmalloc(natt * sizeof(float));
    cpu->attention_forward(out_c, att_c, q, kc, vc, bias, maskc, B, Tq, Tk, Tk, H, DK, c->causal, c->q_offset, drop);

    void *q_g = gpu_from(dt, q, nq), *k_g = gpu_from(dt, kf, nkv), *v_g = gpu_from(dt, vf, nkv);
    void *bias_g = bias ? gpu_from(dt, bias, nbias) : NULL;
    int *mask_g = mask ? gpu_ints(mask, (size_t)B * KR) : NULL;
    void *out_g = cuda_alloc(nq * dt_size(dt)), *att_g = cuda_alloc(natt * dt_size(dt));
    void *out2_g = cuda_alloc(nq * dt_size(dt)), *att2_g = cuda_alloc(natt * dt_size(dt));
    cuda_attention_forward(dt, out_g, att_g, q_g, k_g, v_g, bias_g, mask_g, B, Tq, Tk, KR, H, DK, c->causal,
                           c->q_offset, drop);
    size_t mem_before = cuda_mem_in_use();
    cuda_attention_forward(dt, out2_g, att2_g, q_g, k_g, v_g, bias_g, mask_g, B, Tq, Tk, KR, H, DK, c->causal,
                           c->q_offset, drop);
    size_t mem_mid = cuda_mem_in_use();
    float *out = gpu_floats(dt, out_g, nq), *att = gpu_floats(dt, att_g, natt);

    snprintf(name, sizeof name, "attention_forward [%s] att", tag);
    test_close(name, att, att_c, natt, t->att_fwd);
    snprintf(name, sizeof name, "attention_forward [%s] out", tag);
    test_close(name, out, out_c, nq, t->att_fwd);
    int zeros_ok = 1, full_rows = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *prow = att + (((size_t)b * H + h) * Tq + i) * Tk;
                int any = 0;
                for (int j = 0; j < Tk; j++) {
                    int masked = key_masked(mask, KR, b, j, c->causal, c->q_offset + i);
                    if (masked) zeros_ok &= prow[j] == 0.0f;
                    any |= !masked;
                }
                if (!any) {
                    full_rows++;
                    for (size_t e = 0; e < (size_t)DK; e++) zeros_ok &= out[((size_t)b * Tq + i) * HD + h * DK + e] == 0.0f;
                }
            }
    snprintf(name, sizeof name, "attention_forward [%s] masked keys exactly 0, %d fully masked rows output 0", tag,
             full_rows);
    test_check(zeros_ok, name);
    snprintf(name, sizeof name, "attention_forward [%s] repeated call bitwise equal (att, out)", tag);
    test_check(same_bytes(dt, att_g, att2_g, natt) && same_bytes(dt, out_g, out2_g, nq), name);

    if (KR == Tk) {  // backward is dense (backend.h)
        float *dout = rand_dt(dt, nq, 1.0f), *pq = rand_dt(dt, nq, 0.1f), *pk = rand_dt(dt, nk, 0.1f),
              *pv = rand_dt(dt, nk, 0.1f), *pb = bias ? rand_dt(dt, nbias, 0.1f) : NULL;
        float *dq_c = copy_floats(pq, nq), *dk_c = copy_floats(pk, nk), *dv_c = copy_floats(pv, nk),
              *db_c = pb ? copy_floats(pb, nbias) : NULL;
        // both sides differentiate the GPU's saved probabilities
        cpu->attention_backward(dq_c, dk_c, dv_c, db_c, dout, att, q, kc, vc, B, Tq, Tk, H, DK, drop);

        void *dout_g = gpu_from(dt, dout, nq);
        void *dq_g[3], *dk_g[3], *dv_g[3], *db_g[3] = {NULL, NULL, NULL};
        for (int r = 0; r < 3; r++) {
            dq_g[r] = gpu_from(dt, pq, nq);
            dk_g[r] = gpu_from(dt, pk, nk);
            dv_g[r] = gpu_from(dt, pv, nk);
            if (pb && r < 2) db_g[r] = gpu_from(dt, pb, nbias);
        }
        cuda_attention_backward(dt, dq_g[0], dk_g[0], dv_g[0], db_g[0], dout_g, att_g, q_g, k_g, v_g, B, Tq, Tk, H, DK,
                                drop);
        size_t mem_b0 = cuda_mem_in_use();
        cuda_attention_backward(dt, dq_g[1], dk_g[1], dv_g[1], db_g[1], dout_g, att_g, q_g, k_g, v_g, B, Tq, Tk, H, DK,
                                drop);
        cuda_attention_backward(dt, dq_g[2], dk_g[2], dv_g[2], NULL, dout_g, att_g, q_g, k_g, v_g, B, Tq, Tk, H, DK,
                                drop);
        size_t mem_b1 = cuda_mem_in_use();

        float *dq = gpu_floats(dt, dq_g[0], nq), *dkk = gpu_floats(dt, dk_g[0], nk), *dv = gpu_floats(dt, dv_g[0], nk);
        snprintf(name, sizeof name, "attention_backward [%s] dq (+= prefill)", tag);
        test_close(name, dq, dq_c, nq, t->att_bwd);
        snprintf(name, sizeof name, "attention_backward [%s] dk (+= prefill)", tag);
        test_close(name, dkk, dk_c, nk, t->att_bwd);
        snprintf(name, sizeof name, "attention_backward [%s] dv (+= prefill)", tag);
        test_close(name, dv, dv_c, nk, t->att_bwd);
        if (pb) {
            float *db = gpu_floats(dt, db_g[0], nbias);
            snprintf(name, sizeof name, "attention_backward [%s] dbias (+= prefill)", tag);
            test_close(name, db, db_c, nbias, t->att_bwd);
            free(db);
        }
        int same = same_bytes(dt, dq_g[0], dq_g[1], nq) && same_bytes(dt, dk_g[0], dk_g[1], nk) &&
                   same_bytes(dt, dv_g[0], dv_g[1], nk) && (!pb || same_bytes(dt, db_g[0], db_g[1], nbias));
        snprintf(name, sizeof name, "attention_backward [%s] repeated call bitwise equal", tag);
        test_check(same, name);
        same = same_bytes(dt, dq_g[0], dq_g[2], nq) && same_bytes(dt, dk_g[0], dk_g[2], nk) &&
               same_bytes(dt, dv_g[0], dv_g[2], nk);
        snprintf(name, sizeof name, "attention_backward [%s] dbias NULL: same dq, dk, dv bitwise", tag);
        test_check(same, name);
        snprintf(name, sizeof name, "attention [%s] repeated calls allocate nothing (%zu -> %zu -> %zu bytes)", tag,
                 mem_before, mem_b0, mem_b1);
        test_check(mem_before == mem_mid && mem_b0 == mem_b1, name);

        cuda_free(dout_g);
        for (int r = 0; r < 3; r++) {
            cuda_free(dq_g[r]);
            cuda_free(dk_g[r]);
            cuda_free(dv_g[r]);
            if (db_g[r]) cuda_free(db_g[r]);
        }
        float *hb[] = {dout, pq, pk, pv, pb, dq_c, dk_c, dv_c, db_c, dq, dkk, dv};
        for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    } else {
        snprintf(name, sizeof name, "attention [%s] repeated forward allocates nothing (%zu -> %zu bytes)", tag,
                 mem_before, mem_mid);
        test_check(mem_before == mem_mid, name);
    }

    void *bufs[] = {q_g, k_g, v_g, bias_g, mask_g, out_g, att_g, out2_g, att2_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) cuda_free(bufs[i]);
    float *hb[] = {q, kf, vf, bias, kc, vc, out_c, att_c, out, att};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    free(mask);
    free(maskc);
}

static const AttCase ATT_CASES[] = {
    // label                                   B   H  Tq  Tk  kvr  dk mask full bias causal qoff  p
    {"plain", 3, 3, 7, 11, 11, 5, 0, 0, 0, 0, 0, 0.0f},
    {"mask+bias", 3, 3, 7, 11, 11, 5, 1, 0, 1, 0, 0, 0.0f},
    {"causal+mask+bias", 3, 3, 7, 7, 7, 5, 1, 0, 1, 1, 0, 0.0f},
    {"causal q_offset=4 +bias", 3, 3, 7, 11, 11, 5, 0, 0, 1, 1, 4, 0.0f},
    {"cross Tq!=Tk mask, no bias", 3, 3, 7, 11, 11, 5, 1, 0, 0, 0, 0, 0.0f},
    {"mask+bias+dropout 0.1", 3, 3, 7, 11, 11, 5, 1, 0, 1, 0, 0, 0.1f},
    {"causal+bias+dropout 0.1", 3, 3, 7, 7, 7, 5, 0, 0, 1, 1, 0, 0.1f},
    {"one batch row fully masked +bias", 3, 3, 7, 11, 11, 5, 1, 1, 1, 0, 0, 0.0f},
    {"kv cache (fwd only) mask+bias causal q_offset=4", 3, 3, 7, 11, 14, 5, 1, 0, 1, 1, 4, 0.0f},
    {"decode step (fwd only) Tq=1 causal q_offset=8", 3, 3, 1, 9, 16, 5, 1, 0, 1, 1, 8, 0.0f},
    {"kv cache, vector softmax (fwd only) mask+bias+dropout", 3, 3, 4, 12, 16, 8, 1, 0, 1, 1, 8, 0.1f},
    {"Tk=300 (vector softmax) causal q_offset=295 mask+dropout", 2, 2, 5, 300, 300, 16, 1, 0, 0, 1, 295, 0.1f},
    {"Tk=301 (scalar softmax) mask+bias+dropout", 2, 2, 5, 301, 301, 16, 1, 0, 1, 0, 0, 0.1f},
    {"Tk=1100 (looping softmax) mask+bias+dropout", 1, 2, 3, 1100, 1100, 8, 1, 0, 1, 0, 0, 0.1f},
    {"t5-large encoder self mask+bias+dropout", 4, 16, 128, 128, 128, 64, 1, 0, 1, 0, 0, 0.1f},
    {"t5-large decoder self causal+bias+dropout", 4, 16, 128, 128, 128, 64, 0, 0, 1, 1, 0, 0.1f},
    {"t5-large cross Tq=96 Tk=128 mask+dropout", 4, 16, 96, 128, 128, 64, 1, 0, 0, 0, 0, 0.1f},
};

// ---- copy_rows -------------------------------------------------------------------------------------

static void test_copy_rows(Dtype dt) {
    const Backend *be = backend_cuda(dt);
    const size_t row_elems[] = {7, 64};
    for (int r = 0; r < 2; r++) {
        const size_t E = row_elems[r];
        enum { SRC = 10, DST = 12, NCOPY = 5 };
        float *src = rand_dt(dt, SRC * E, 1.0f), *dst0 = rand_dt(dt, DST * E, 1.0f);
        const int src_rows[NCOPY] = {9, 0, 4, 4, 7}, dst_rows[NCOPY] = {11, 3, 0, 6, 2};
        for (int mode = 0; mode < 4; mode++) {  // neither, gather, scatter, both
            const int *sr = (mode & 1) ? src_rows : NULL, *dr = (mode & 2) ? dst_rows : NULL;
            float *want = copy_floats(dst0, DST * E);
            for (int i = 0; i < NCOPY; i++)
                memcpy(want + (size_t)(dr ? dr[i] : i) * E, src + (size_t)(sr ? sr[i] : i) * E, E * sizeof(float));
            void *src_g = gpu_from(dt, src, SRC * E), *dst_g = gpu_from(dt, dst0, DST * E);
            be->copy_rows(dst_g, dr, src_g, sr, NCOPY, E);
            float *got = gpu_floats(dt, dst_g, DST * E);
            char name[160];
            snprintf(name, sizeof name, "copy_rows [%s row_elems=%zu %s] exact", dt_name(dt), E,
                     mode == 0 ? "plain" : mode == 1 ? "gather" : mode == 2 ? "scatter" : "gather+scatter");
            test_check(memcmp(got, want, DST * E * sizeof(float)) == 0, name);
            cuda_free(src_g);
            cuda_free(dst_g);
            free(want);
            free(got);
        }
        free(src);
        free(dst0);
    }
    {  // more rows than one launch carries (1024): 1500 rows, gather + scatter
        enum { SRC = 2000, DST = 1600, NCOPY = 1500, E = 3 };
        int *sr = xmalloc(NCOPY * sizeof(int)), *dr = xmalloc(NCOPY * sizeof(int));
        for (int i = 0; i < NCOPY; i++) {
            sr[i] = (int)((i * 7919u) % SRC);
            dr[i] = DST - 1 - i;
        }
        float *src = rand_dt(dt, (size_t)SRC * E, 1.0f), *want = rand_dt(dt, (size_t)DST * E, 1.0f);
        void *src_g = gpu_from(dt, src, (size_t)SRC * E), *dst_g = gpu_from(dt, want, (size_t)DST * E);
        for (int i = 0; i < NCOPY; i++) memcpy(want + (size_t)dr[i] * E, src + (size_t)sr[i] * E, E * sizeof(float));
        be->copy_rows(dst_g, dr, src_g, sr, NCOPY, E);
        float *got = gpu_floats(dt, dst_g, (size_t)DST * E);
        char name[160];
        snprintf(name, sizeof name, "copy_rows [%s row_elems=3, 1500 rows (two launches)] exact", dt_name(dt));
        test_check(memcmp(got, want, (size_t)DST * E * sizeof(float)) == 0, name);
        cuda_free(src_g);
        cuda_free(dst_g);
        free(sr);
        free(dr);
        free(src);
        free(want);
        free(got);
    }
}

// ---- backend structs ---------------------------------------------------------------------------------

static void test_backend_structs(void) {
    const Dtype dts[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    const char *names[] = {"cuda-fp32", "cuda-bf16", "cuda-fp16"};
    for (int i = 0; i < 3; i++) {
        const Backend *be = backend_cuda(dts[i]);
        int ok = be && strcmp(be->name, names[i]) == 0 && be->act_dtype == dts[i];
        // every entry bound (the struct is a sequence of pointers after name/act_dtype)
        const void *const *fp = (const void *const *)&be->alloc;
        const void *const *end = (const void *const *)(&be->adamw_update + 1);
        int nulls = 0;
        for (; fp < end; fp++) nulls += *fp == NULL;
        char name[128];
        snprintf(name, sizeof name, "backend_cuda(%s): name \"%s\", act_dtype, %d NULL entries", dt_name(dts[i]),
                 be ? be->name : "?", nulls);
        test_check(ok && nulls == 0, name);
    }
}

// ---- perf ------------------------------------------------------------------------------------------------

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

static void perf_matmul(Dtype dt, int N, int I, int O) {
    const size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *h = rand_dt(dt, nin > nout ? (nin > nw ? nin : nw) : (nout > nw ? nout : nw), 1.0f);
    void *inp = gpu_from(dt, h, nin), *w = gpu_from(dt, h, nw), *dout = gpu_from(dt, h, nout);
    void *out = cuda_alloc(nout * dt_size(dt)), *din = cuda_alloc(nin * dt_size(dt)), *dw = cuda_alloc(nw * dt_size(dt));
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM; i++) {
        cuda_matmul_forward(dt, out, inp, w, N, I, O);
        cuda_matmul_backward(dt, din, dw, dout, inp, w, N, I, O);
    }
    cudaEventRecord(e0, s);
    for (int i = 0; i < ITERS; i++) cuda_matmul_forward(dt, out, inp, w, N, I, O);
    cudaEventRecord(e1, s);
    for (int i = 0; i < ITERS; i++) cuda_matmul_backward(dt, din, dw, dout, inp, w, N, I, O);
    cudaEventRecord(e2, s);
    float fwd = elapsed_ms(e0, e1) / ITERS, bwd = elapsed_ms(e1, e2) / ITERS;
    double flop = 2.0 * N * I * O;
    printf("PERF matmul %s N=%d I=%d O=%d: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s | fwd+bwd %.1f TFLOP/s\n",
           dt_name(dt), N, I, O, fwd, flop / fwd * 1e-9, bwd, 2 * flop / bwd * 1e-9, 3 * flop / (fwd + bwd) * 1e-9);
    fflush(stdout);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    void *bufs[] = {inp, w, dout, out, din, dw};
    for (int i = 0; i < 6; i++) cuda_free(bufs[i]);
    free(h);
}

static void perf_attention(Dtype dt, int B, int H, int T, int DK, int use_bias, int use_mask, int causal, float p) {
    const size_t HD = (size_t)H * DK, n = (size_t)B * T * HD, natt = (size_t)B * H * T * T, nbias = (size_t)H * T * T;
    float *h = rand_dt(dt, n > natt ? n : natt, 0.6f);
    void *q = gpu_from(dt, h, n), *k = gpu_from(dt, h, n), *v = gpu_from(dt, h, n), *dout = gpu_from(dt, h, n);
    void *bias = use_bias ? gpu_from(dt, h, nbias) : NULL, *dbias = use_bias ? cuda_alloc(nbias * dt_size(dt)) : NULL;
    void *out = cuda_alloc(n * dt_size(dt)), *att = cuda_alloc(natt * dt_size(dt));
    void *dq = cuda_alloc(n * dt_size(dt)), *dk = cuda_alloc(n * dt_size(dt)), *dv = cuda_alloc(n * dt_size(dt));
    int *mask_h = xmalloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) mask_h[(size_t)b * T + j] = j < T - (b % 17);
    int *mask = use_mask ? gpu_ints(mask_h, (size_t)B * T) : NULL;
    DropoutArgs drop = {p, 42};
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM; i++) {
        cuda_attention_forward(dt, out, att, q, k, v, bias, mask, B, T, T, T, H, DK, causal, 0, drop);
        cuda_attention_backward(dt, dq, dk, dv, dbias, dout, att, q, k, v, B, T, T, H, DK, drop);
    }
    cudaEventRecord(e0, s);
    for (int i = 0; i < ITERS; i++)
        cuda_attention_forward(dt, out, att, q, k, v, bias, mask, B, T, T, T, H, DK, causal, 0, drop);
    cudaEventRecord(e1, s);
    for (int i = 0; i < ITERS; i++)
        cuda_attention_backward(dt, dq, dk, dv, dbias, dout, att, q, k, v, B, T, T, H, DK, drop);
    cudaEventRecord(e2, s);
    float fwd = elapsed_ms(e0, e1) / ITERS, bwd = elapsed_ms(e1, e2) / ITERS;
    double flop = 4.0 * B * H * T * (double)T * DK;  // two GEMMs forward, four backward
    printf("PERF attention %s B=%d H=%d T=%d dk=%d%s%s%s p=%.1f: fwd %.3f ms (%.1f TFLOP/s) | bwd %.3f ms "
           "(%.1f TFLOP/s) | fwd+bwd %.3f ms\n",
           dt_name(dt), B, H, T, DK, use_bias ? " bias" : "", use_mask ? " mask" : "", causal ? " causal" : "", p,
           fwd, flop / fwd * 1e-9, bwd, 2 * flop / bwd * 1e-9, fwd + bwd);
    fflush(stdout);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    void *bufs[] = {q, k, v, dout, bias, dbias, out, att, dq, dk, dv, mask};
    for (int i = 0; i < 12; i++)
        if (bufs[i]) cuda_free(bufs[i]);
    free(h);
    free(mask_h);
}

int main(void) {
    // T5_TEST_QUICK=1: small shapes only, no perf (for compute-sanitizer runs);
    // T5_GEMM_FALLBACK=1 (read by matmul.cu): every GEMM on the simple kernel, no perf.
    const int quick = getenv("T5_TEST_QUICK") && strcmp(getenv("T5_TEST_QUICK"), "0") != 0;
    const int fallback = getenv("T5_GEMM_FALLBACK") && strcmp(getenv("T5_GEMM_FALLBACK"), "0") != 0;
    const int perf_only = getenv("T5_TEST_PERF_ONLY") && strcmp(getenv("T5_TEST_PERF_ONLY"), "0") != 0;
    cuda_init(0);
    cpu = backend_cpu();
    struct cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    printf("device: %s (%d SMs)%s%s%s\n", prop.name, prop.multiProcessorCount, quick ? ", quick mode" : "",
           fallback ? ", every GEMM on the fallback kernel" : "", perf_only ? ", perf only" : "");

    test_backend_structs();
    for (int d = 0; d < (perf_only ? 0 : 3); d++) {
        const Tol *t = &TOLS[d];
        test_matmul_case(t, 7, 13, 29);
        test_matmul_case(t, 130, 72, 48);
        if (!quick) {
            test_matmul_case(t, 2048, 1024, 4096);
            test_matmul_case(t, 2048, 4096, 1024);
        }
        for (size_t c = 0; c < sizeof ATT_CASES / sizeof ATT_CASES[0]; c++) {
            const AttCase *a = &ATT_CASES[c];
            if (quick && (size_t)a->B * a->H * a->Tq * a->Tk > 200000) continue;
            test_attention_case(t, a);
        }
        test_copy_rows(t->dt);
    }

    if (perf_only) {  // attention first: a profiler can skip to it by launch count
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 1, 0, 0.1f);
    } else if (!quick && !fallback) {
        perf_matmul(DTYPE_BF16, 8192, 1024, 4096);
        perf_matmul(DTYPE_BF16, 8192, 4096, 1024);
        perf_matmul(DTYPE_F16, 8192, 1024, 4096);
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 1, 0, 0.1f);  // encoder self-attention, training
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 0, 1, 0.1f);  // decoder self-attention, training
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 0, 1, 0, 0.0f);  // cross-attention, no dropout
    }
    printf("device memory: %.1f MiB in use, %.1f MiB peak\n", cuda_mem_in_use() / 1048576.0,
           cuda_mem_peak() / 1048576.0);
    return test_summary();
}
