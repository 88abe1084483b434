// tests/gpu/backend_ops_matmul_attention.h: the matmul and attention cases of
// tests/gpu/test_backend_ops.c, through P->ref (the CPU oracle) and P->sub (the backend
// under test), at P->dt:
//   - backward ops run into prefilled gradient buffers (they must ADD); the attention
//     backward gets the subject's own saved probabilities on both sides, so its check
//     measures the backward alone;
//   - the batched linears (q, k, v in one GEMM) with shared and own inputs, gaps between
//     entries and a batch of one;
//   - odd shapes (matmul N=7 I=13 O=29; attention B=3 H=3 Tq=7 Tk=11 dk=5), shapes that
//     take every softmax path (scalar Tk=11/301, vector Tk=12/128/300, looping Tk=1100),
//     kv_rows > Tk (keys in a longer buffer), and
//     t5-large shapes (N=2048 I=1024 O=4096; B=4 H=16 T=128 dk=64);
//   - bitwise determinism (every op run twice), NULL gradient outputs giving the same
//     other gradients bitwise, masked probabilities exactly 0, no allocation on a
//     repeated call.
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
#pragma once
#include "../../kernels/cuda/cuda_ops.h"  // cuda_attention_set_fused
#include "backend_ops.h"
#include "backend_ops_attention.h"  // Tol, tol_of, the attention cases

// ---- matmul ------------------------------------------------------------------------------------

static void matmul_case(const OpsPair *P, const Tol *t, int N, int I, int O) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = t->dt;
    const double tol = (I >= 1024 || O >= 1024 || N >= 1024) ? t->mm_long_k : t->mm, tol_acc = tol * t->mm_acc;
    const size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 1.0f), *dout = rand_dt(dt, nout, 1.0f);
    float *pin = rand_dt(dt, nin, 1.0f), *pw = rand_dt(dt, nw, 1.0f);
    char name[256], tag[96];
    snprintf(tag, sizeof tag, "%s N=%d I=%d O=%d", dt_name(dt), N, I, O);

    float *out_c = xmalloc(nout * sizeof(float)), *din_c = copy_f(pin, nin), *dw_c = copy_f(pw, nw);
    float *din0_c = calloc(nin, sizeof(float)), *dw0_c = calloc(nw, sizeof(float));
    R->matmul_forward(out_c, inp, w, N, I, O);
    R->matmul_backward(din_c, dw_c, dout, inp, w, N, I, O, 0);
    R->matmul_backward(din0_c, dw0_c, dout, inp, w, N, I, O, 0);

    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw), *dout_g = dev_from(S, dt, dout, nout);
    void *out_g = S->alloc(nout * dt_size(dt)), *out2_g = S->alloc(nout * dt_size(dt));
    void *din_g = dev_from(S, dt, pin, nin), *dw_g = dev_from(S, dt, pw, nw);
    void *din2_g = dev_from(S, dt, pin, nin), *dw2_g = dev_from(S, dt, pw, nw);
    S->matmul_forward(out_g, inp_g, w_g, N, I, O);
    S->matmul_backward(din_g, dw_g, dout_g, inp_g, w_g, N, I, O, 0);
    size_t mem_before = S->mem_in_use();
    S->matmul_forward(out2_g, inp_g, w_g, N, I, O);
    S->matmul_backward(din2_g, NULL, dout_g, inp_g, w_g, N, I, O, 0);  // dinp only
    S->matmul_backward(NULL, dw2_g, dout_g, inp_g, w_g, N, I, O, 0);   // dweight only
    size_t mem_after = S->mem_in_use();
    void *din0_g = S->alloc(nin * dt_size(dt)), *dw0_g = S->alloc(nw * dt_size(dt));  // zeroed
    S->matmul_backward(din0_g, dw0_g, dout_g, inp_g, w_g, N, I, O, 0);
    void *dset_g = dev_from(S, dt, pin, nin);  // old contents that dinp_set must ignore
    S->matmul_backward(dset_g, NULL, dout_g, inp_g, w_g, N, I, O, 1);
    snprintf(name, sizeof name, "matmul_backward [%s] dinp_set (overwrites the prefill)", tag);
    float *dset = host_from(S, dt, dset_g, nin);
    test_close(name, dset, din0_c, nin, tol);
    free(dset);
    S->free(dset_g);

    float *out = host_from(S, dt, out_g, nout), *din = host_from(S, dt, din_g, nin), *dw = host_from(S, dt, dw_g, nw);
    snprintf(name, sizeof name, "matmul_forward  [%s] out", tag);
    test_close(name, out, out_c, nout, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dinp (into zeros)", tag);
    float *din0 = host_from(S, dt, din0_g, nin), *dw0 = host_from(S, dt, dw0_g, nw);
    test_close(name, din0, din0_c, nin, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dweight (into zeros)", tag);
    test_close(name, dw0, dw0_c, nw, tol);
    snprintf(name, sizeof name, "matmul_backward [%s] dinp (+= prefill)", tag);
    test_close(name, din, din_c, nin, tol_acc);
    snprintf(name, sizeof name, "matmul_backward [%s] dweight (+= prefill)", tag);
    test_close(name, dw, dw_c, nw, tol_acc);
    snprintf(name, sizeof name, "matmul [%s] repeated forward bitwise equal", tag);
    test_check(same_bytes(S, out_g, out2_g, nout * dt_size(dt)), name);
    snprintf(name, sizeof name, "matmul [%s] backward with dweight NULL: same dinp bitwise", tag);
    test_check(same_bytes(S, din_g, din2_g, nin * dt_size(dt)), name);
    snprintf(name, sizeof name, "matmul [%s] backward with dinp NULL: same dweight bitwise", tag);
    test_check(same_bytes(S, dw_g, dw2_g, nw * dt_size(dt)), name);
    snprintf(name, sizeof name, "matmul [%s] repeated calls allocate nothing (%zu -> %zu bytes)", tag, mem_before,
             mem_after);
    test_check(mem_before == mem_after, name);

    void *bufs[] = {inp_g, w_g, dout_g, out_g, out2_g, din_g, dw_g, din2_g, dw2_g, din0_g, dw0_g};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) S->free(bufs[i]);
    float *hb[] = {inp, w, dout, pin, pw, out_c, din_c, dw_c, out, din, dw, din0_c, dw0_c, din0, dw0};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

// matmul_forward_batched / matmul_backward_weights_batched: `batch` linears with operand z
// at z * stride, the input shared (stride 0) or its own; `gap` elements between operands
// (strides are distances: an odd gap also drops the entries' alignment to 2 bytes). Outputs
// start from random values: the gaps must come back as they were (the whole buffer is
// compared), dweight adds into them. Also: the subject's batch against its own single calls
// on each operand (printed: bitwise equal or not; cuBLASLt may pick another algorithm for the
// batched shape, and the CPU check is what decides), and a repeated call bitwise equal.
static void matmul_batched_case(const OpsPair *P, const Tol *t, int N, int I, int O, int batch, int shared, size_t gap) {
    const Backend *R = P->ref, *S = P->sub;
    const Dtype dt = t->dt;
    const size_t es = dt_size(dt);
    const double tol = (I >= 1024 || O >= 1024 || N >= 1024) ? t->mm_long_k : t->mm, tol_acc = tol * t->mm_acc;
    const size_t si = shared ? 0 : (size_t)N * I + gap, sw = (size_t)O * I + gap, so = (size_t)N * O + gap;
    const size_t nin = shared ? (size_t)N * I : si * batch, nw = sw * batch, nout = so * batch;
    float *inp = rand_dt(dt, nin, 1.0f), *w = rand_dt(dt, nw, 1.0f), *dout = rand_dt(dt, nout, 1.0f);
    float *out_c = rand_dt(dt, nout, 1.0f), *dw_c = rand_dt(dt, nw, 1.0f);
    void *inp_g = dev_from(S, dt, inp, nin), *w_g = dev_from(S, dt, w, nw), *dout_g = dev_from(S, dt, dout, nout);
    void *out_g = dev_from(S, dt, out_c, nout), *dw_g = dev_from(S, dt, dw_c, nw);
    void *out1_g = dev_from(S, dt, out_c, nout), *dw1_g = dev_from(S, dt, dw_c, nw);  // single calls
    void *out2_g = dev_from(S, dt, out_c, nout), *dw2_g = dev_from(S, dt, dw_c, nw);  // repeated batch
    R->matmul_forward_batched(out_c, so, inp, si, w, sw, N, I, O, batch);
    R->matmul_backward_weights_batched(dw_c, sw, dout, so, inp, si, N, I, O, batch);
    S->matmul_forward_batched(out_g, so, inp_g, si, w_g, sw, N, I, O, batch);
    S->matmul_backward_weights_batched(dw_g, sw, dout_g, so, inp_g, si, N, I, O, batch);
    size_t mem_before = S->mem_in_use();
    S->matmul_forward_batched(out2_g, so, inp_g, si, w_g, sw, N, I, O, batch);
    S->matmul_backward_weights_batched(dw2_g, sw, dout_g, so, inp_g, si, N, I, O, batch);
    size_t mem_after = S->mem_in_use();
    for (int z = 0; z < batch; z++) {
        S->matmul_forward((char *)out1_g + z * so * es, (const char *)inp_g + z * si * es,
                          (const char *)w_g + z * sw * es, N, I, O);
        S->matmul_backward(NULL, (char *)dw1_g + z * sw * es, (const char *)dout_g + z * so * es,
                           (const char *)inp_g + z * si * es, NULL, N, I, O, 0);
    }
    char name[256], tag[128];
    snprintf(tag, sizeof tag, "%s %d x N=%d I=%d O=%d %s input, gap %zu", dt_name(dt), batch, N, I, O,
             shared ? "shared" : "own", gap);
    snprintf(name, sizeof name, "matmul_forward_batched          [%s] out (gaps kept)", tag);
    check_dev(S, name, dt, out_g, out_c, nout, tol);
    snprintf(name, sizeof name, "matmul_backward_weights_batched [%s] dweight (+= prefill, gaps kept)", tag);
    check_dev(S, name, dt, dw_g, dw_c, nw, tol_acc);
    snprintf(name, sizeof name, "matmul batched [%s] repeated call bitwise equal", tag);
    test_check(same_bytes(S, out_g, out2_g, nout * es) && same_bytes(S, dw_g, dw2_g, nw * es), name);
    snprintf(name, sizeof name, "matmul batched [%s] repeated calls allocate nothing (%zu -> %zu bytes)", tag,
             mem_before, mem_after);
    test_check(mem_before == mem_after, name);
    printf("INFO   matmul batched [%s] vs one call per entry: forward %s, dweight %s\n", tag,
           same_bytes(S, out_g, out1_g, nout * es) ? "bitwise equal" : "DIFFERENT bits",
           same_bytes(S, dw_g, dw1_g, nw * es) ? "bitwise equal" : "DIFFERENT bits");
    FREE_SUB(S, inp_g, w_g, dout_g, out_g, dw_g, out1_g, dw1_g, out2_g, dw2_g);
    FREE_HOST(inp, w, dout, out_c, dw_c);
}


// The cases of the table (test_backend_ops.c); `quick` (T5_TEST_QUICK) leaves out the
// t5-large matmuls and the attention shapes over 200000 scores.
static int ops_quick;

static void case_matmul(const OpsPair *P) {
    const Tol *t = tol_of(P->dt);
    matmul_case(P, t, 7, 13, 29);
    matmul_case(P, t, 130, 72, 48);
    if (!ops_quick) {
        matmul_case(P, t, 2048, 1024, 4096);
        matmul_case(P, t, 2048, 4096, 1024);
    }
}

static void case_matmul_batched(const OpsPair *P) {
    const Tol *t = tol_of(P->dt);
    matmul_batched_case(P, t, 7, 13, 29, 3, 1, 5);    // odd everything, 2-byte aligned entries
    matmul_batched_case(P, t, 130, 72, 48, 2, 0, 8);  // own inputs (cross-attention k, v; gated wi)
    matmul_batched_case(P, t, 33, 64, 40, 1, 1, 0);   // a batch of one
    if (!ops_quick) matmul_batched_case(P, t, 2048, 1024, 1024, 3, 1, 0);  // t5-large q, k, v
}

// Every case once as the backend chooses (attention_flash.cu's forward where it applies), and
// the d_kv 64/128 cases again with attention_fused.cu's kernels on (off by default), and with
// both off (the GEMM path): every version against the CPU.
static void case_attention(const OpsPair *P) {
    const Tol *t = tol_of(P->dt);
    static const char *const VERSION[] = {"", "fused kernels: ", "gemm path: "};
    for (int version = 0; version < 3; version++) {
        cuda_attention_set_flash(version == 0);
        cuda_attention_set_fused(version == 1);
        for (size_t c = 0; c < sizeof ATT_CASES / sizeof ATT_CASES[0]; c++) {
            AttCase a = ATT_CASES[c];
            if (ops_quick && (size_t)a.B * a.H * a.Tq * a.Tk > 200000) continue;
            char label[160];
            if (version > 0) {
                if (a.dk != 64 && a.dk != 128) continue;
                snprintf(label, sizeof label, "%s%s", VERSION[version], a.label);
                a.label = label;
            }
            attention_case(P, t, &a);
        }
    }
    cuda_attention_set_flash(1);
    cuda_attention_set_fused(0);
}
