// tests/gpu/backend_ops_fp8.h: the fp8 linear cases of tests/gpu/test_backend_ops.c
// (backend.h fp8_matmul_forward, fp8_matmul_backward, fp8_scales_update), through P->ref (the
// CPU oracle, kernels/cpu/fp8.c) and P->sub (kernels/cuda/fp8.cu), at P->dt:
//   - forward with one weight and with 3 (one scale over them; gaps between the weights and
//     between the outputs, which must come back unchanged), backward into prefilled buffers
//     (+=) and with dinp_set, NULL gradients giving the other bitwise the same, delayed and
//     current scaling (the scale, inv and amax arrays after each call bitwise the CPU's);
//   - odd shapes (N=7 I=13 O=29: not multiples of 16, the simple kernel with its NOTICE;
//     N=33 I=64 O=48: cuBLASLt with N padded to 48 in the transposed copies), t5-large shapes
//     (N=2048 I=1024 O=4096 and I=4096 O=1024);
//   - bitwise rounding: identity matrices and power-of-two scales make an output exactly a
//     rounded operand, so the GPU's cvt.rn.satfinite (or fp8_encode below 8.9) is compared to
//     fp8_format.h's fp8_encode for every code, the ties between codes, points either side of
//     them, subnormals and saturation (NaN left out): e4m3 through the forward's q4 and the
//     backward's transposed q4^T and w4^T, e5m2 through g5 and g5^T;
//   - determinism (a repeated call bitwise equal), no allocation on a repeated call, and
//     fp8_scales_update's scale, inv, amax and history bitwise the CPU's;
//   - fp8_relu_drop_matmul_forward / _backward bitwise relu_drop_* followed by fp8_matmul_* on
//     the GPU (the fast passes and the fallback), and near the CPU's (fp8_relu_case);
//   - the step's kept weight codes (Fp8Scales.w4, w4t) bitwise the CPU's, and the products from
//     them bitwise rounding the weight again (fp8_kept_weight_case).
// Tolerances (normalized; worst measured on an H200 in brackets, 2026-12-04): both sides
// multiply the same fp8 codes (exact products), so what differs is the order of the sums, the
// output's rounding to the dtype and the tensor cores' accumulation: Hopper's fp8 MMA keeps
// fewer bits than fp32 in its partial sums (about 2^-14 relative) even with cuBLASLt's
// promotion to fp32 (the backward), and fast accumulation (the forward) skips the promotion.
//   forward  fp32 8e-3 [3.5e-3 at I=4096], bf16 1.2e-2 [4.2e-3], fp16 8e-3 [4.0e-3]
//   backward fp32 3e-4 [1.2e-4 at N=2048], bf16 6e-3 [3.4e-3], fp16 1.5e-3 [4.2e-4];
//            twice that into prefilled buffers (fp32: the same) [bf16 5.9e-3, fp16 7.3e-4]
// The simple kernel (odd shapes, T5_GEMM_FALLBACK=1, compute capability < 8.9) sums in fp32:
// its fp32 results equal the CPU's to 0 at these sizes.
#pragma once
#include "../../kernels/fp8_format.h"
#include "backend_ops.h"

typedef struct {
    Dtype dt;
    double fwd, bwd, acc;  // acc: factor for backward into prefilled buffers
} Fp8Tol;
static const Fp8Tol FP8_TOLS[] = {
    {DTYPE_F32, 8e-3, 3e-4, 1.0},
    {DTYPE_BF16, 1.2e-2, 6e-3, 2.0},
    {DTYPE_F16, 8e-3, 1.5e-3, 2.0},
};
static const Fp8Tol *fp8_tol_of(Dtype dt) {
    for (size_t i = 0; i < sizeof FP8_TOLS / sizeof FP8_TOLS[0]; i++)
        if (FP8_TOLS[i].dt == dt) return &FP8_TOLS[i];
    return &FP8_TOLS[0];
}

// ---- the scaling state on either backend ---------------------------------------------------

// Host view of an Fp8Scales: (FP8_OPERANDS) each.
typedef struct {
    float scale[FP8_OPERANDS], inv[FP8_OPERANDS], amax[FP8_OPERANDS];
} Fp8State;

// One allocation of be holding scale | inv | amax, filled from h.
static Fp8Scales fp8_state_upload(const Backend *be, const Fp8State *h, int current) {
    float *d = be->alloc(sizeof(Fp8State));
    be->to_device(d, h, sizeof(Fp8State));
    Fp8Scales s = 
            {.scale = d, .inv = d + FP8_OPERANDS, .amax = d + 2 * FP8_OPERANDS, .current = current, .inp_t = NULL};
    return s;
}
static void fp8_state_download(const Backend *be, Fp8State *h, Fp8Scales s) { be->to_host(h, s.scale, sizeof *h); }

// scale[k] = given, inv = 1/scale (fp32), amax = given.
static Fp8State fp8_state_make(float s_inp, float s_w, float s_grad, float a_inp, float a_w, float a_grad) {
    Fp8State h;
    const float sc[FP8_OPERANDS] = {s_inp, s_w, s_grad}, am[FP8_OPERANDS] = {a_inp, a_w, a_grad};
    for (int k = 0; k < FP8_OPERANDS; k++) h.scale[k] = sc[k], h.inv[k] = 1.0f / sc[k], h.amax[k] = am[k];
    return h;
}

// The subject's state bitwise the oracle's (all three arrays).
static int check_fp8_state(const char *name, const Backend *S, Fp8Scales ss, const Fp8State *ref) {
    Fp8State got;
    fp8_state_download(S, &got, ss);
    int diff = 0;
    for (int k = 0; k < FP8_OPERANDS; k++)
        diff += memcmp(&got.scale[k], &ref->scale[k], 4) != 0 || memcmp(&got.inv[k], &ref->inv[k], 4) != 0 ||
                memcmp(&got.amax[k], &ref->amax[k], 4) != 0;
    char buf[512];
    snprintf(buf, sizeof buf,
             "%-60s scale %g %g %g (cpu %g %g %g), amax %.9g %.9g %.9g (cpu %.9g %.9g %.9g): %d of %d differ", name,
             got.scale[0], got.scale[1], got.scale[2], ref->scale[0], ref->scale[1], ref->scale[2], got.amax[0],
             got.amax[1], got.amax[2], ref->amax[0], ref->amax[1], ref->amax[2], diff, FP8_OPERANDS);
    return test_check(diff == 0, buf);
}

// ---- forward ----------------------------------------------------------------------------------

// count weights at stride O*I + gap, outputs at N*O + gap; every buffer starts random (the gaps
// must come back as they were: the whole output is compared). current: the first step (scales
// 1, amax 0: the call sets them); else delayed scales (not powers of two) and amax prefills that
// the call must max-reduce into (the weight's 2.0 is above every |w|: it stays).
static void fp8_forward_case(const OpsPair *P, int N, int I, int O, int count, size_t gap, int current) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const Fp8Tol *t = fp8_tol_of(dt);
    const size_t es = dt_size(dt), sw = (size_t)O * I + gap, so = (size_t)N * O + gap;
    const size_t nin = (size_t)N * I, nw = sw * count, nout = so * count;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 0.5f), *out_c = rand_dt(dt, nout, 1.0f);
    const Fp8State init =
        current ? fp8_state_make(1, 1, 1, 0, 0, 0) : fp8_state_make(300.0f, 700.0f, 1.0f, 0.25f, 2.0f, 0);
    Fp8State ref = init;
    Fp8Scales sr = {.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = current, .inp_t = NULL};
    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw);
    void *out_g = dev_from(S, dt, out_c, nout), *out2_g = dev_from(S, dt, out_c, nout);
    Fp8Scales ss = fp8_state_upload(S, &init, current);
    R->fp8_matmul_forward(out_c, so, inp, w, sw, N, I, O, count, sr);
    S->fp8_matmul_forward(out_g, so, inp_g, w_g, sw, N, I, O, count, ss);
    const size_t mem_before = S->mem_in_use();
    S->fp8_matmul_forward(out2_g, so, inp_g, w_g, sw, N, I, O, count, ss);  // the same amax: the same state
    const size_t mem_after = S->mem_in_use();

    char name[256], tag[160];
    snprintf(tag, sizeof tag, "%s %s%d x N=%d I=%d O=%d gap %zu", dt_name(dt), current ? "current " : "", count, N, I,
             O, gap);
    snprintf(name, sizeof name, "fp8_matmul_forward [%s] out (gaps kept)", tag);
    check_dev(S, name, dt, out_g, out_c, nout, t->fwd);
    snprintf(name, sizeof name, "fp8_matmul_forward [%s] scale, inv, amax", tag);
    check_fp8_state(name, S, ss, &ref);
    snprintf(name, sizeof name, "fp8_matmul_forward [%s] repeated call bitwise equal", tag);
    test_check(same_bytes(S, out_g, out2_g, nout * es), name);
    snprintf(name, sizeof name, "fp8_matmul_forward [%s] repeated call allocates nothing (%zu -> %zu bytes)", tag,
             mem_before, mem_after);
    test_check(mem_before == mem_after, name);
    FREE_SUB(S, inp_g, w_g, out_g, out2_g, ss.scale);
    FREE_HOST(inp, w, out_c);
}

// ---- backward ---------------------------------------------------------------------------------

// dinp and dweight into random prefills (+=), dinp_set over a prefill, each gradient alone
// (NULL for the other: bitwise the same), a repeated call; the state after each call
// bitwise the CPU's. current: the call sets GRAD's scale (and WEIGHT's, INP's) from amax.
static void fp8_backward_case(const OpsPair *P, int N, int I, int O, int current) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const Fp8Tol *t = fp8_tol_of(dt);
    const double tol_acc = t->bwd * t->acc;
    const size_t es = dt_size(dt), nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 0.5f), *dout = rand_dt(dt, nout, 1.0f);
    float *pin = rand_dt(dt, nin, 1.0f), *pw = rand_dt(dt, nw, 1.0f);
    const Fp8State init =
        current ? fp8_state_make(1, 1, 1, 0, 0, 0) : fp8_state_make(300.0f, 700.0f, 30000.0f, 1.0f, 0.5f, 0.001f);
    Fp8State ref = init, ref_set;
    Fp8Scales sr = {.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = current, .inp_t = NULL};
    float *din_c = copy_f(pin, nin), *dw_c = copy_f(pw, nw), *dset_c = copy_f(pin, nin);
    R->fp8_matmul_backward(din_c, dw_c, dout, inp, w, N, I, O, 0, sr);
    ref_set = ref;
    Fp8Scales sr_set = 
            {.scale = ref_set.scale, .inv = ref_set.inv, .amax = ref_set.amax, .current = current, .inp_t = NULL};
    R->fp8_matmul_backward(dset_c, NULL, dout, inp, w, N, I, O, 1, sr_set);

    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw), *dout_g = dev_from(S, dt, dout, nout);
    void *din_g = dev_from(S, dt, pin, nin), *dw_g = dev_from(S, dt, pw, nw);
    void *din2_g = dev_from(S, dt, pin, nin), *dw2_g = dev_from(S, dt, pw, nw);
    void *din3_g = dev_from(S, dt, pin, nin), *dw3_g = dev_from(S, dt, pw, nw);
    void *dset_g = dev_from(S, dt, pin, nin);
    Fp8Scales ss = fp8_state_upload(S, &init, current);
    S->fp8_matmul_backward(din_g, dw_g, dout_g, inp_g, w_g, N, I, O, 0, ss);
    char name[256], tag[160];
    snprintf(tag, sizeof tag, "%s %sN=%d I=%d O=%d", dt_name(dt), current ? "current " : "", N, I, O);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] scale, inv, amax", tag);
    check_fp8_state(name, S, ss, &ref);
    const size_t mem_before = S->mem_in_use();
    S->fp8_matmul_backward(din2_g, NULL, dout_g, inp_g, w_g, N, I, O, 0, ss);  // dinp only
    S->fp8_matmul_backward(NULL, dw2_g, dout_g, inp_g, NULL, N, I, O, 0, ss);  // dweight only (no weight)
    S->fp8_matmul_backward(din3_g, dw3_g, dout_g, inp_g, w_g, N, I, O, 0, ss);  // repeated
    S->fp8_matmul_backward(dset_g, NULL, dout_g, inp_g, w_g, N, I, O, 1, ss);
    const size_t mem_after = S->mem_in_use();
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] scale, inv, amax after 4 more calls", tag);
    check_fp8_state(name, S, ss, &ref_set);

    snprintf(name, sizeof name, "fp8_matmul_backward [%s] dinp (+= prefill)", tag);
    check_dev(S, name, dt, din_g, din_c, nin, tol_acc);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] dweight (+= prefill)", tag);
    check_dev(S, name, dt, dw_g, dw_c, nw, tol_acc);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] dinp_set (overwrites the prefill)", tag);
    check_dev(S, name, dt, dset_g, dset_c, nin, t->bwd);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] dweight NULL: same dinp bitwise", tag);
    test_check(same_bytes(S, din_g, din2_g, nin * es), name);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] dinp NULL: same dweight bitwise", tag);
    test_check(same_bytes(S, dw_g, dw2_g, nw * es), name);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] repeated call bitwise equal", tag);
    test_check(same_bytes(S, din_g, din3_g, nin * es) && same_bytes(S, dw_g, dw3_g, nw * es), name);
    snprintf(name, sizeof name, "fp8_matmul_backward [%s] repeated calls allocate nothing (%zu -> %zu bytes)", tag,
             mem_before, mem_after);
    test_check(mem_before == mem_after, name);
    FREE_SUB(S, inp_g, w_g, dout_g, din_g, dw_g, din2_g, dw2_g, din3_g, dw3_g, dset_g, ss.scale);
    FREE_HOST(inp, w, dout, pin, pw, din_c, dw_c, dset_c);
}

// ---- the kept input (Fp8Scales.inp_t) -----------------------------------------------------------

// The forward writes the input's codes transposed (I, N16), padding zero: bitwise the CPU's
// kept codes; a backward reading them (inp NULL) gives the dinp and dweight of one rounding
// inp again, bit for bit, and the state of the forward for INP.
static void fp8_kept_input_case(const OpsPair *P, int N, int I, int O, int current) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const size_t es = dt_size(dt), nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    const size_t N16 = fp8_rows_padded((size_t)N), nk = (size_t)I * N16;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 0.5f), *dout = rand_dt(dt, nout, 1.0f);
    const Fp8State init =
        current ? fp8_state_make(1, 1, 1, 0, 0, 0) : fp8_state_make(300.0f, 700.0f, 30000.0f, 1.0f, 0.5f, 0.001f);
    Fp8State ref = init;
    uint8_t *kept_c = xmalloc(nk);
    float *out_c = xmalloc(nout * sizeof(float));
    R->fp8_matmul_forward(out_c, 0, inp, w, 0, N, I, O, 1,
            (Fp8Scales){.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = current, .inp_t = kept_c});

    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw), *dout_g = dev_from(S, dt, dout, nout);
    void *out_g = S->alloc(nout * es), *kept_g = S->alloc(nk);
    void *din_a = S->alloc(nin * es), *dw_a = S->alloc(nw * es), *din_b = S->alloc(nin * es), *dw_b = S->alloc(nw * es);
    S->zero(dw_a, nw * es), S->zero(dw_b, nw * es);
    Fp8Scales ss = fp8_state_upload(S, &init, current), sk = ss;
    sk.inp_t = (uint8_t *)kept_g;
    S->fp8_matmul_forward(out_g, 0, inp_g, w_g, 0, N, I, O, 1, sk);
    char name[256], tag[160];
    snprintf(tag, sizeof tag, "%s %sN=%d I=%d O=%d", dt_name(dt), current ? "current " : "", N, I, O);
    uint8_t *kept_h = xmalloc(nk);
    S->to_host(kept_h, kept_g, nk);
    snprintf(name, sizeof name, "fp8 kept input [%s]: the forward's transposed codes bitwise the CPU's", tag);
    test_check(!memcmp(kept_h, kept_c, nk), name);
    S->fp8_matmul_backward(din_a, dw_a, dout_g, inp_g, w_g, N, I, O, 1, ss);
    S->fp8_matmul_backward(din_b, dw_b, dout_g, NULL, w_g, N, I, O, 1, sk);
    snprintf(name, sizeof name, "fp8 kept input [%s]: the backward from them bitwise the one rounding inp again", tag);
    test_check(same_bytes(S, din_a, din_b, nin * es) && same_bytes(S, dw_a, dw_b, nw * es), name);
    snprintf(name, sizeof name, "fp8 kept input [%s]: scale, inv, amax as the CPU's forward", tag);
    Fp8State after;
    fp8_state_download(S, &after, ss);
    test_check(after.scale[FP8_INP] == ref.scale[FP8_INP] && after.inv[FP8_INP] == ref.inv[FP8_INP] &&
                   after.amax[FP8_INP] == ref.amax[FP8_INP], name);
    FREE_SUB(S, inp_g, w_g, dout_g, out_g, kept_g, din_a, dw_a, din_b, dw_b, ss.scale);
    FREE_HOST(inp, w, dout, out_c);
    free(kept_c), free(kept_h);
}

// ---- bitwise rounding ----------------------------------------------------------------------------

// Values v on and around format f's grid: every finite code, the tie between each pair of
// neighbours and the points 3/8 and 5/8 of the way (exact in bf16), below the smallest
// subnormal, and past the largest finite (saturation); each also negated. n_out: the count.
static float *fp8_grid_values(Fp8Format f, size_t *n_out) {
    const int maxcode = f == FP8_E4M3 ? 0x7E : 0x7B;
    const float maxv = fp8_format_max(f), big[] = {maxv * 1.0625f, maxv * 1.5f, maxv * 4.0f};
    float *v = xmalloc(((size_t)maxcode * 4 + 16) * 2 * sizeof(float));
    size_t n = 0;
    for (int c = 0; c < maxcode; c++) {
        const float lo = fp8_decode((uint8_t)c, f), hi = fp8_decode((uint8_t)(c + 1), f), q = (hi - lo) / 8;
        v[n++] = lo, v[n++] = lo + 3 * q, v[n++] = lo + 4 * q, v[n++] = lo + 5 * q;
    }
    v[n++] = maxv;
    for (int i = 0; i < 3; i++) v[n++] = big[i];
    v[n++] = fp8_decode(1, f) / 4;  // rounds to zero
    const size_t half = n;
    for (size_t i = 0; i < half; i++) v[n++] = -v[i];
    *n_out = n;
    return v;
}

// x (R, C): the grid values of f times 1/scale, cycled, rounded to dt.
static float *fp8_grid_matrix(Dtype dt, Fp8Format f, float scale, int R, int C) {
    size_t nv = 0;
    float *v = fp8_grid_values(f, &nv);
    float *x = xmalloc((size_t)R * C * sizeof(float));
    for (size_t i = 0; i < (size_t)R * C; i++) x[i] = round_dt(dt, v[i % nv] / scale);
    free(v);
    return x;
}
static float *fp8_identity(int n) {
    float *x = calloc((size_t)n * n, sizeof(float));
    for (int i = 0; i < n; i++) x[(size_t)i * n + i] = 1.0f;
    return x;
}

// The subject's (R, C) result against the exact rounding of x (R, C) (transposed: of x^T):
// fp8_round_scaled(x, scale) * out_factor with fp8_format.h's encoder, and against the CPU's.
static void check_fp8_rounded(const OpsPair *P, const char *name, const void *d, const float *cpu, const float *x,
                              int R, int C, int transposed, float scale, float out_factor, Fp8Format f) {
    const size_t n = (size_t)R * C;
    float *want = xmalloc(n * sizeof(float));
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            const float xv = transposed ? x[(size_t)c * R + r] : x[(size_t)r * C + c];
            want[(size_t)r * C + c] = round_dt(P->dt, fp8_round_scaled(xv, scale, f) * out_factor);
        }
    char buf[300];
    snprintf(buf, sizeof buf, "%s == fp8_encode", name);
    check_dev(P->sub, buf, P->dt, d, want, n, 0.0);
    snprintf(buf, sizeof buf, "%s == cpu", name);
    check_dev_exact(P->sub, buf, P->dt, d, cpu, n);
    free(want);
}

// n x n identities and grid values (n = 64: cuBLASLt's fp8 path on 8.9+). Power-of-two scales
// make every output exactly a rounded operand times a power of two:
//   forward  inp = e4m3 grid, W = I:          out  = q4 / s_inp
//   backward dout = I, W, inp = e4m3 grids:   dinp = w4 / s_w (via w4^T), dW = q4 / s_inp (via q4^T)
//   backward dout = e5m2 grid, W = inp = I:   dinp = g5 / s_grad (g5), dW = g5^T / s_grad (g5^T)
static void fp8_rounding_case(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    enum { n = 64 };
    const size_t nn = (size_t)n * n, es = dt_size(dt);
    const float s_in = 16.0f, s_w = 8.0f, s_g = 4.0f;  // x = v / s: e5m2's 4 * 57344 / 4 stays inside fp16
    float *eye = fp8_identity(n), *x4 = fp8_grid_matrix(dt, FP8_E4M3, s_in, n, n);
    float *w4 = fp8_grid_matrix(dt, FP8_E4M3, s_w, n, n), *g5 = fp8_grid_matrix(dt, FP8_E5M2, s_g, n, n);
    // the fp8 weight of the identity is 1 * s_w, the gradient's 1 * s_g: exact codes
    const Fp8State init = fp8_state_make(s_in, s_w, s_g, 0, 0, 0);
    float *a_c = calloc(nn, sizeof(float)), *b_c = calloc(nn, sizeof(float));
    void *eye_g = dev_from(S, dt, eye, nn), *x4_g = dev_from(S, dt, x4, nn), *w4_g = dev_from(S, dt, w4, nn);
    void *g5_g = dev_from(S, dt, g5, nn), *a_g = S->alloc(nn * es), *b_g = S->alloc(nn * es);
    char name[200];

    Fp8State ref = init;
    Fp8Scales sr = 
            {.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = 0, .inp_t = NULL}, ss = fp8_state_upload(S, &init, 0);
    R->fp8_matmul_forward(a_c, 0, x4, eye, 0, n, n, n, 1, sr);
    S->fp8_matmul_forward(a_g, 0, x4_g, eye_g, 0, n, n, n, 1, ss);
    snprintf(name, sizeof name, "fp8 rounding [%s] e4m3 forward q4", dt_name(dt));
    check_fp8_rounded(P, name, a_g, a_c, x4, n, n, 0, s_in, 1.0f / s_in, FP8_E4M3);

    memset(b_c, 0, nn * sizeof(float));
    S->zero(b_g, nn * es);
    R->fp8_matmul_backward(a_c, b_c, eye, x4, w4, n, n, n, 1, sr);
    S->fp8_matmul_backward(a_g, b_g, eye_g, x4_g, w4_g, n, n, n, 1, ss);
    snprintf(name, sizeof name, "fp8 rounding [%s] e4m3 backward w4^T (dinp)", dt_name(dt));
    check_fp8_rounded(P, name, a_g, a_c, w4, n, n, 0, s_w, 1.0f / s_w, FP8_E4M3);
    snprintf(name, sizeof name, "fp8 rounding [%s] e4m3 backward q4^T (dweight)", dt_name(dt));
    check_fp8_rounded(P, name, b_g, b_c, x4, n, n, 0, s_in, 1.0f / s_in, FP8_E4M3);

    memset(b_c, 0, nn * sizeof(float));
    S->zero(b_g, nn * es);
    R->fp8_matmul_backward(a_c, b_c, g5, eye, eye, n, n, n, 1, sr);
    S->fp8_matmul_backward(a_g, b_g, g5_g, eye_g, eye_g, n, n, n, 1, ss);
    snprintf(name, sizeof name, "fp8 rounding [%s] e5m2 backward g5 (dinp)", dt_name(dt));
    check_fp8_rounded(P, name, a_g, a_c, g5, n, n, 0, s_g, 1.0f / s_g, FP8_E5M2);
    snprintf(name, sizeof name, "fp8 rounding [%s] e5m2 backward g5^T (dweight)", dt_name(dt));
    check_fp8_rounded(P, name, b_g, b_c, g5, n, n, 1, s_g, 1.0f / s_g, FP8_E5M2);
    S->fp8_matmul_backward(a_g, NULL, g5_g, eye_g, eye_g, n, n, n, 1, ss);  // g5 alone (no transposed pass)
    snprintf(name, sizeof name, "fp8 rounding [%s] e5m2 backward g5 (dinp alone)", dt_name(dt));
    check_fp8_rounded(P, name, a_g, a_c, g5, n, n, 0, s_g, 1.0f / s_g, FP8_E5M2);
    snprintf(name, sizeof name, "fp8 rounding [%s] amax of every operand", dt_name(dt));
    check_fp8_state(name, S, ss, &ref);
    FREE_SUB(S, eye_g, x4_g, w4_g, g5_g, a_g, b_g, ss.scale);
    FREE_HOST(eye, x4, w4, g5, a_c, b_c);
}

// ---- fp8_scales_update -------------------------------------------------------------------------

// n slots x FP8_OPERANDS entries with random histories and amax, and the entries that keep
// their scale: amax and history all zero, an infinite amax, a NaN in the history. Two calls
// (margin 1 at column 3, margin 0 at column 4); every array bitwise the CPU's after each.
static void fp8_scales_update_case(const OpsPair *P) {
    const Backend *R = P->ref, *S = P->sub;
    enum { SLOTS = 5, E = SLOTS * FP8_OPERANDS, HIST = 7 };
    float scale[E], inv[E], amax[E], hist[E * HIST];
    for (int e = 0; e < E; e++) {
        scale[e] = 1.0f + 99.0f * rng_uniform();
        inv[e] = 1.0f / scale[e];
        amax[e] = 0.01f + 10.0f * rng_uniform();
        for (int j = 0; j < HIST; j++) hist[e * HIST + j] = 0.01f + 10.0f * rng_uniform();
    }
    amax[2] = 0.0f;
    for (int j = 0; j < HIST; j++) hist[2 * HIST + j] = 0.0f;
    amax[4] = INFINITY;
    hist[7 * HIST + 5] = NAN;
    float *d = S->alloc(sizeof scale + sizeof inv + sizeof amax + sizeof hist);
    float *ds = d, *di = d + E, *da = d + 2 * E, *dh = d + 3 * E;
    S->to_device(ds, scale, sizeof scale), S->to_device(di, inv, sizeof inv);
    S->to_device(da, amax, sizeof amax), S->to_device(dh, hist, sizeof hist);
    const float keep[3] = {scale[2], scale[4], scale[7]};
    for (int call = 0; call < 2; call++) {
        const int col = 3 + call, margin = 1 - call;
        if (call == 1) {  // new amax after the reset (both sides)
            amax[5] = 123.0f, amax[9] = 0.5f;
            S->to_device(da, amax, sizeof amax);
        }
        R->fp8_scales_update(scale, inv, amax, hist, SLOTS, HIST, col, margin);
        S->fp8_scales_update(ds, di, da, dh, SLOTS, HIST, col, margin);
        float got[E * 3 + E * HIST];
        S->to_host(got, d, sizeof got);
        int diff = 0;
        for (int e = 0; e < E; e++) {
            diff += memcmp(&got[e], &scale[e], 4) != 0 || memcmp(&got[E + e], &inv[e], 4) != 0 ||
                    memcmp(&got[2 * E + e], &amax[e], 4) != 0;
            diff += memcmp(&got[3 * E + e * HIST], &hist[e * HIST], HIST * 4) != 0;
        }
        const int kept = got[2] == keep[0] && got[4] == keep[1] && got[7] == keep[2];
        char buf[300];
        snprintf(buf, sizeof buf,
                 "fp8_scales_update %d x %d entries, history %d, column %d, margin %d: scale, inv, amax, history "
                 "bitwise the cpu's (%d entries differ), zero / inf / NaN entries kept %s",
                 SLOTS, FP8_OPERANDS, HIST, col, margin, diff, kept ? "yes" : "NO");
        test_check(diff == 0 && kept, buf);
    }
    S->free(d);
}

// ---- the step's kept weight codes (Fp8Scales.w4, w4t, w_round) ------------------------------------

// Both states bitwise equal (scale, inv, amax).
static int same_fp8_state(const Backend *S, Fp8Scales a, Fp8Scales b) {
    Fp8State ha, hb;
    fp8_state_download(S, &ha, a);
    fp8_state_download(S, &hb, b);
    return !memcmp(&ha, &hb, sizeof ha);
}

// count adjacent weights (count*O, I): a forward rounding them into w4, w4t (w_round 1) gives
// the out and state of one without them, bit for bit, and codes bitwise the CPU's; a second
// forward reading them (w_round 0, the weight passed NULL: not read) the same out again; a
// backward reading w4t (weight NULL) the dinp, dweight and state of one rounding the weight.
static void fp8_kept_weight_case(const OpsPair *P, int N, int I, int O, int count, int current) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const int OC = count * O;
    const size_t es = dt_size(dt), nin = (size_t)N * I, nw = (size_t)OC * I, nout = (size_t)N * O * count;
    const size_t nbo = (size_t)N * OC;  // the backward's (joined) output gradient
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 0.5f), *dout = rand_dt(dt, nbo, 1.0f);
    const Fp8State init =
        current ? fp8_state_make(1, 1, 1, 0, 0, 0) : fp8_state_make(300.0f, 700.0f, 30000.0f, 1.0f, 0.5f, 0.001f);
    char name[256], tag[160];
    snprintf(tag, sizeof tag, "%s %s%d x N=%d I=%d O=%d", dt_name(dt), current ? "current " : "", count, N, I, O);
    // the CPU's codes
    Fp8State ref = init;
    uint8_t *w4_c = xmalloc(nw), *w4t_c = xmalloc(nw), *w4_h = xmalloc(nw), *w4t_h = xmalloc(nw);
    float *out_c = xmalloc(nout * sizeof(float));
    R->fp8_matmul_forward(out_c, (size_t)N * O, inp, w, (size_t)O * I, N, I, O, count,
                          (Fp8Scales){.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = current, .w4 = w4_c, .w4t = w4t_c, .w_round = 1});
    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw), *dout_g = dev_from(S, dt, dout, nbo);
    void *out_a = S->alloc(nout * es), *out_b = S->alloc(nout * es), *out_c2 = S->alloc(nout * es);
    uint8_t *w4_g = S->alloc(nw), *w4t_g = S->alloc(nw);
    Fp8Scales sa = fp8_state_upload(S, &init, current), sb = fp8_state_upload(S, &init, current);
    S->fp8_matmul_forward(out_a, (size_t)N * O, inp_g, w_g, (size_t)O * I, N, I, O, count, sa);
    Fp8Scales kb = sb;
    kb.w4 = w4_g, kb.w4t = w4t_g, kb.w_round = 1;
    S->fp8_matmul_forward(out_b, (size_t)N * O, inp_g, w_g, (size_t)O * I, N, I, O, count, kb);
    snprintf(name, sizeof name, "fp8 kept weights [%s] forward rounding them: out and state bitwise without", tag);
    test_check(same_bytes(S, out_a, out_b, nout * es) && same_fp8_state(S, sa, sb), name);
    S->to_host(w4_h, w4_g, nw);
    S->to_host(w4t_h, w4t_g, nw);
    snprintf(name, sizeof name, "fp8 kept weights [%s] the codes and their transpose bitwise the CPU's", tag);
    test_check(!memcmp(w4_h, w4_c, nw) && !memcmp(w4t_h, w4t_c, nw), name);
    kb.w_round = 0;
    S->fp8_matmul_forward(out_c2, (size_t)N * O, inp_g, NULL, (size_t)O * I, N, I, O, count, kb);
    snprintf(name, sizeof name, "fp8 kept weights [%s] a forward reading them (weight not read): the same out", tag);
    test_check(same_bytes(S, out_a, out_c2, nout * es) && same_fp8_state(S, sa, sb), name);
    // the joined backward over the (count*O, I) weight
    void *din_a = S->alloc(nin * es), *din_b = S->alloc(nin * es), *dw_a = S->alloc(nw * es), *dw_b = S->alloc(nw * es);
    S->zero(dw_a, nw * es), S->zero(dw_b, nw * es);
    S->fp8_matmul_backward(din_a, dw_a, dout_g, inp_g, w_g, N, I, OC, 1, sa);
    Fp8Scales kbw = sb;
    kbw.w4t = w4t_g;
    S->fp8_matmul_backward(din_b, dw_b, dout_g, inp_g, NULL, N, I, OC, 1, kbw);
    snprintf(name, sizeof name, "fp8 kept weights [%s] backward from w4t: dinp, dweight, state bitwise rounding again",
             tag);
    test_check(same_bytes(S, din_a, din_b, nin * es) && same_bytes(S, dw_a, dw_b, nw * es) && same_fp8_state(S, sa, sb),
               name);
    FREE_SUB(S, inp_g, w_g, dout_g, out_a, out_b, out_c2, w4_g, w4t_g, sa.scale, sb.scale, din_a, din_b, dw_a, dw_b);
    FREE_HOST(inp, w, dout, out_c);
    free(w4_c), free(w4t_c), free(w4_h), free(w4t_h);
}

// ---- the ReLU FFN's linears with the activation fused (fp8_relu_drop_matmul_*) --------------------

// Each fused op on the subject against its two ops in turn there (relu_drop_* into a buffer,
// then fp8_matmul_*): out, keep bits, kept input, dinp, dweight and the state bit for bit (the
// fast pass where it applies: delayed scaling, the forward with the kept input, F % 8 == 0;
// the two ops otherwise); the keep bits bitwise the CPU's, the rest within the fp8 tolerances
// where the CPU's h and da are the GPU's values: in fp32, or without dropout (the CPU keeps
// h * 1/(1-p) in fp32, a 16-bit activation rounds it first, and an fp8 code can then differ by
// one step: 2% of an output). Forward: out (N, D) = relu_drop(a (N, F)) @ wo (D, F)^T; backward: the wi
// linear x (N, D) -> (N, F), da = relu_drop_backward(dh, bits): dx = da wi, dwi += da^T x, and
// each gradient alone (the other NULL) bitwise the same.
static void fp8_relu_case(const OpsPair *P, int N, int F, int D, int current, int kept, float p) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = P->dt;
    const Fp8Tol *t = fp8_tol_of(dt);
    const DropoutArgs drop = {p, 1234};
    const int vs_cpu = dt == DTYPE_F32 || p == 0.0f;
    const size_t es = dt_size(dt), nF = (size_t)N * F, nD = (size_t)N * D, nw = (size_t)D * F;
    const size_t nk = (size_t)F * fp8_rows_padded((size_t)N);
    char name[256], tag[160];
    snprintf(tag, sizeof tag, "%s %s%sN=%d F=%d D=%d dropout %g", dt_name(dt), current ? "current " : "",
             kept ? "kept input " : "", N, F, D, p);
    const Fp8State init =
        current ? fp8_state_make(1, 1, 1, 0, 0, 0) : fp8_state_make(300.0f, 700.0f, 30000.0f, 1.0f, 0.5f, 0.001f);
    // forward
    float *a = rand_dt(dt, nF, 1.0f), *wo = rand_dt(dt, nw, 0.5f), *out_c = xmalloc(nD * sizeof(float));
    uint8_t *bits_c = xmalloc(nF / 8), *kept_c = kept ? xmalloc(nk) : NULL, *bits_h = xmalloc(nF / 8);
    Fp8State ref = init;
    R->fp8_relu_drop_matmul_forward(out_c, bits_c, a, wo, N, F, D, drop,
                                    (Fp8Scales){.scale = ref.scale, .inv = ref.inv, .amax = ref.amax, .current = current, .inp_t = kept_c});
    void *a_g = dev_from(S, dt, a, nF), *wo_g = dev_from(S, dt, wo, nw), *h_u = S->alloc(nF * es);
    void *out_f = S->alloc(nD * es), *out_u = S->alloc(nD * es);
    uint8_t *bits_f = S->alloc(nF / 8), *bits_u = S->alloc(nF / 8);
    uint8_t *kept_f = kept ? S->alloc(nk) : NULL, *kept_u = kept ? S->alloc(nk) : NULL;
    Fp8Scales sf = fp8_state_upload(S, &init, current), su = fp8_state_upload(S, &init, current);
    sf.inp_t = kept_f, su.inp_t = kept_u;
    S->fp8_relu_drop_matmul_forward(out_f, bits_f, a_g, wo_g, N, F, D, drop, sf);
    S->relu_drop_forward(h_u, bits_u, a_g, nF, drop);
    S->fp8_matmul_forward(out_u, 0, h_u, wo_g, 0, N, F, D, 1, su);
    snprintf(name, sizeof name, "fp8_relu_drop_matmul_forward [%s] out, bits, kept, state bitwise the two ops", tag);
    test_check(same_bytes(S, out_f, out_u, nD * es) && same_bytes(S, bits_f, bits_u, nF / 8) &&
                   (!kept || same_bytes(S, kept_f, kept_u, nk)) && same_fp8_state(S, sf, su),
               name);
    S->to_host(bits_h, bits_f, nF / 8);
    snprintf(name, sizeof name, "fp8_relu_drop_matmul_forward [%s] keep bits bitwise the CPU's", tag);
    test_check(!memcmp(bits_h, bits_c, nF / 8), name);
    if (vs_cpu) {
        snprintf(name, sizeof name, "fp8_relu_drop_matmul_forward [%s] out", tag);
        check_dev(S, name, dt, out_f, out_c, nD, t->fwd);
        snprintf(name, sizeof name, "fp8_relu_drop_matmul_forward [%s] scale, inv, amax", tag);
        check_fp8_state(name, S, sf, &ref);
    }
    // backward, from the forward's bits
    float *dh = rand_dt(dt, nF, 1.0f), *x = rand_dt(dt, nD, 1.0f), *wi = rand_dt(dt, nw, 0.5f);
    float *dx_c = xmalloc(nD * sizeof(float)), *dwi_c = rand_dt(dt, nw, 1.0f);
    void *dwi0 = dev_from(S, dt, dwi_c, nw), *dwi_f = dev_from(S, dt, dwi_c, nw), *dwi_u = dev_from(S, dt, dwi_c, nw);
    void *dwi_alone = dev_from(S, dt, dwi_c, nw);
    Fp8State refb = init;
    R->fp8_relu_drop_matmul_backward(dx_c, dwi_c, dh, bits_c, x, wi, N, D, F, 1, drop,
                                     (Fp8Scales){.scale = refb.scale, .inv = refb.inv, .amax = refb.amax, .current = current, .inp_t = NULL});
    void *dh_g = dev_from(S, dt, dh, nF), *x_g = dev_from(S, dt, x, nD), *wi_g = dev_from(S, dt, wi, nw);
    void *dx_f = S->alloc(nD * es), *dx_u = S->alloc(nD * es), *dx_alone = S->alloc(nD * es), *da_u = S->alloc(nF * es);
    Fp8Scales bf = fp8_state_upload(S, &init, current), bu = fp8_state_upload(S, &init, current);
    S->fp8_relu_drop_matmul_backward(dx_f, dwi_f, dh_g, bits_f, x_g, wi_g, N, D, F, 1, drop, bf);
    S->relu_drop_backward(da_u, dh_g, bits_f, nF, drop, 1);
    S->fp8_matmul_backward(dx_u, dwi_u, da_u, x_g, wi_g, N, D, F, 1, bu);
    snprintf(name, sizeof name, "fp8_relu_drop_matmul_backward [%s] dx, dwi, state bitwise the two ops", tag);
    test_check(same_bytes(S, dx_f, dx_u, nD * es) && same_bytes(S, dwi_f, dwi_u, nw * es) && same_fp8_state(S, bf, bu),
               name);
    if (vs_cpu) {
        snprintf(name, sizeof name, "fp8_relu_drop_matmul_backward [%s] dx", tag);
        check_dev(S, name, dt, dx_f, dx_c, nD, t->bwd);
        snprintf(name, sizeof name, "fp8_relu_drop_matmul_backward [%s] dwi (+= prefill)", tag);
        check_dev(S, name, dt, dwi_f, dwi_c, nw, t->bwd * t->acc);
        snprintf(name, sizeof name, "fp8_relu_drop_matmul_backward [%s] scale, inv, amax", tag);
        check_fp8_state(name, S, bf, &refb);
    }
    S->fp8_relu_drop_matmul_backward(dx_alone, NULL, dh_g, bits_f, x_g, wi_g, N, D, F, 1, drop, bf);
    S->fp8_relu_drop_matmul_backward(NULL, dwi_alone, dh_g, bits_f, x_g, NULL, N, D, F, 1, drop, bf);
    snprintf(name, sizeof name, "fp8_relu_drop_matmul_backward [%s] each gradient alone bitwise the same", tag);
    test_check(same_bytes(S, dx_alone, dx_f, nD * es) && same_bytes(S, dwi_alone, dwi_f, nw * es), name);
    FREE_SUB(S, a_g, wo_g, h_u, out_f, out_u, bits_f, bits_u, sf.scale, su.scale, dwi0, dwi_f, dwi_u, dwi_alone, dh_g,
             x_g, wi_g, dx_f, dx_u, dx_alone, da_u, bf.scale, bu.scale);
    if (kept) FREE_SUB(S, kept_f, kept_u);
    FREE_HOST(a, wo, out_c, dh, x, wi, dx_c, dwi_c);
    free(bits_c), free(bits_h), free(kept_c);
}

// ---- the cases of the table ----------------------------------------------------------------------

static int fp8_quick;  // T5_TEST_QUICK: small shapes only (test_backend_ops.c sets it)

static void case_fp8_matmul(const OpsPair *P) {
    for (int current = 0; current < 2; current++) {
        fp8_forward_case(P, 7, 13, 29, 1, 0, current);    // odd: the simple kernel (NOTICE)
        fp8_forward_case(P, 33, 64, 48, 1, 0, current);   // cuBLASLt, N not a multiple of 16
        fp8_forward_case(P, 7, 13, 29, 3, 5, current);    // 3 weights, odd gaps (2-byte aligned outputs)
        fp8_forward_case(P, 130, 64, 48, 3, 8, current);  // 3 weights, 16-byte gaps
        fp8_backward_case(P, 7, 13, 29, current);
        fp8_backward_case(P, 33, 64, 48, current);  // N16 = 48: padded rows in g5^T, q4^T
        fp8_backward_case(P, 130, 72, 48, current);
        fp8_kept_input_case(P, 33, 64, 48, current);  // cuBLASLt, padded rows
        fp8_kept_input_case(P, 7, 13, 29, current);   // the simple kernel
        fp8_kept_weight_case(P, 130, 64, 48, 3, current);  // q, k, v adjacent: the fast pass
        fp8_kept_weight_case(P, 7, 13, 29, 1, current);    // odd: the byte-tile pass, the simple kernel
        for (int kept = 0; kept < 2; kept++)
            for (int d = 0; d < 2; d++) {
                const float p = d ? 0.0f : 0.1f;
                fp8_relu_case(P, 130, 72, 48, current, kept, p);  // the fast passes (delayed, F % 8 == 0)
                fp8_relu_case(P, 8, 13, 29, current, kept, p);    // F % 8 != 0: the two ops in turn
            }
    }
    if (!fp8_quick) fp8_relu_case(P, 2048, 4096, 1024, 0, 1, 0.1f);  // t5-large's FFN, B=16
    if (!fp8_quick) fp8_kept_weight_case(P, 2048, 1024, 1024, 3, 0);  // t5-large's q, k, v
    if (!fp8_quick) fp8_kept_input_case(P, 2048, 1024, 4096, 0);
    if (!fp8_quick) {
        fp8_forward_case(P, 2048, 1024, 4096, 1, 0, 0);
        fp8_forward_case(P, 2048, 4096, 1024, 1, 0, 0);
        fp8_forward_case(P, 2048, 1024, 1024, 3, 0, 0);  // t5-large q, k, v
        fp8_backward_case(P, 2048, 1024, 4096, 0);
        fp8_backward_case(P, 2048, 4096, 1024, 0);
    }
}

static void case_fp8_rounding(const OpsPair *P) { fp8_rounding_case(P); }

static void case_fp8_scales_update(const OpsPair *P) {
    if (P->dt == DTYPE_F32) fp8_scales_update_case(P);  // fp32 state: the same for every dtype
}
