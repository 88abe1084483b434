// tests/test_ops.c: the CPU reference backend (kernels/cpu/) op by op: the backend struct,
// embedding, RMS norm, matmul, position buckets and bias, attention, row copies (the
// pointwise ops, cross-entropy and the optimizer ops: tests/test_ops_pointwise.c).
//   - every backward against central finite differences of its forward, on random
//     inputs (never zeros) of odd sizes: L = sum(out * R) for a random R, analytic
//     gradients from the backward into zeroed buffers, numeric ones by perturbing one
//     fp32 input element at a time (all elements) and evaluating L in double;
//   - every backward ADDS into its gradients (checked against prefilled buffers);
//   - forwards against naive double-precision computations, the relative position
//     buckets against values computed with numpy float32 from HF's formula, dropout
//     statistics and determinism, AdamW against a double-precision formula, and
//     results that must not depend on the number of OpenMP threads.
// Prints one OK / NOT OK line per tensor with its max difference; exits non-zero on any failure.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/backend.h"
#include "../kernels/cpu/cpu_ops.h"
#include "test.h"
#include "test_ops_util.h"

// ---- backend struct, memory --------------------------------------------------------------

static void test_backend_struct(void) {
    const void *fns[] = {
        (const void *)be->alloc, (const void *)be->free, (const void *)be->zero, (const void *)be->to_device,
        (const void *)be->to_host, (const void *)be->embedding_forward, (const void *)be->embedding_backward,
        (const void *)be->rmsnorm_forward, (const void *)be->rmsnorm_backward, (const void *)be->matmul_forward,
        (const void *)be->matmul_backward, (const void *)be->position_bias_forward,
        (const void *)be->position_bias_backward, (const void *)be->attention_forward,
        (const void *)be->attention_backward, (const void *)be->ffn_act_forward,
        (const void *)be->ffn_act_backward, (const void *)be->dropout_add, (const void *)be->dropout_add_guard,
        (const void *)be->mem_capacity, (const void *)be->clamp_fp16_overflow, (const void *)be->rmsnorm_backward_dropout,
        (const void *)be->init_random,
        (const void *)be->add, (const void *)be->axpy, (const void *)be->scale, (const void *)be->dropout_forward,
        (const void *)be->dropout_backward, (const void *)be->crossentropy_forward_backward,
        (const void *)be->sumsq, (const void *)be->tensor_norm, (const void *)be->tensor_norms, (const void *)be->adamw_update,
        (const void *)be->beam_topk, (const void *)be->beam_table_reorder, (const void *)be->attention_decode,
        (const void *)be->matmul_forward_batched, (const void *)be->matmul_backward_weights_batched,
        (const void *)be->residual_rmsnorm_forward, (const void *)be->relu_drop_forward,
        (const void *)be->relu_drop_backward, (const void *)be->side_begin, (const void *)be->side_end,
        (const void *)be->side_mark, (const void *)be->wait_mark,
    };
    int all = 1;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) all &= fns[i] != NULL;
    test_check(all && strcmp(be->name, "cpu") == 0 && be->act_dtype == DTYPE_F32,
               "backend_cpu: name \"cpu\", fp32, every entry set");

    size_t n = 1001;
    float *d = be->alloc(n * sizeof(float));
    int zeroed = 1;
    for (size_t i = 0; i < n; i++) zeroed &= d[i] == 0.0f;
    float *h = rand_array(n, 1.0f), *back = zeros_array(n);
    be->to_device(d, h, n * sizeof(float));
    be->to_host(back, d, n * sizeof(float));
    int same = memcmp(h, back, n * sizeof(float)) == 0;
    be->zero(d, n * sizeof(float));
    int cleared = 1;
    for (size_t i = 0; i < n; i++) cleared &= d[i] == 0.0f;
    test_check(zeroed && same && cleared, "memory: alloc is zeroed, to_device/to_host round trip, zero clears");
    be->free(d);
    free(h);
    free(back);
}

// ---- embedding ---------------------------------------------------------------------------

typedef struct {
    const int *ids;
    float *table, *out;
    const float *R;
    int N, D;
} EmbCtx;
static double emb_loss(void *c_) {
    EmbCtx *c = c_;
    be->embedding_forward(c->out, c->ids, c->table, c->N, c->D);
    return dot_double(c->out, c->R, (size_t)c->N * c->D);
}

static void test_embedding(void) {
    enum { V = 29, D = 13, N = 7 };
    const int ids[N] = {3, 17, 3, 28, 0, 17, 3};  // repeated ids accumulate
    float *table = rand_array((size_t)V * D, 1.0f), *out = zeros_array((size_t)N * D);
    float *R = rand_array((size_t)N * D, 1.0f);
    be->embedding_forward(out, ids, table, N, D);
    int exact = 1;
    for (int n = 0; n < N; n++) exact &= memcmp(out + n * D, table + ids[n] * D, D * sizeof(float)) == 0;
    test_check(exact, "embedding_forward: rows copied exactly");

    float *dtable = zeros_array((size_t)V * D);
    be->embedding_backward(dtable, R, ids, N, D);
    EmbCtx c = {ids, table, out, R, N, D};
    check_grad("embedding dtable (V=29 D=13 N=7, repeated ids)", table, (size_t)V * D, dtable, emb_loss, &c);

    float *pre = rand_array((size_t)V * D, 1.0f), *acc = copy_array(pre, (size_t)V * D);
    be->embedding_backward(acc, R, ids, N, D);
    check_accumulates("embedding dtable", acc, pre, dtable, (size_t)V * D);
    free(table), free(out), free(R), free(dtable), free(pre), free(acc);
}

// ---- rmsnorm -----------------------------------------------------------------------------

typedef struct {
    float *inp, *weight, *out, *rstd;
    const float *R;
    int N, D;
    float eps;
} NormCtx;
static double norm_loss(void *c_) {
    NormCtx *c = c_;
    be->rmsnorm_forward(c->out, c->rstd, c->inp, c->weight, c->N, c->D, c->eps);
    return dot_double(c->out, c->R, (size_t)c->N * c->D);
}

static void test_rmsnorm(void) {
    enum { N = 7, D = 13 };
    const float eps = 1e-6f;
    float *inp = rand_array((size_t)N * D, 1.0f), *weight = rand_array(D, 1.0f);
    for (int d = 0; d < D; d++) weight[d] += weight[d] > 0 ? 0.5f : -0.5f;
    float *out = zeros_array((size_t)N * D), *rstd = zeros_array(N), *R = rand_array((size_t)N * D, 1.0f);
    be->rmsnorm_forward(out, rstd, inp, weight, N, D, eps);

    double ref_out[N * D], ref_rstd[N];
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int d = 0; d < D; d++) ss += (double)inp[n * D + d] * inp[n * D + d];
        ref_rstd[n] = 1.0 / sqrt(ss / D + eps);
        for (int d = 0; d < D; d++) ref_out[n * D + d] = weight[d] * inp[n * D + d] * ref_rstd[n];
    }
    float *fo = to_float(ref_out, N * D), *fr = to_float(ref_rstd, N);
    test_close("rmsnorm_forward out vs double reference", out, fo, (size_t)N * D, FWD_TOL);
    test_close("rmsnorm_forward rstd vs double reference", rstd, fr, N, FWD_TOL);

    float *dinp = zeros_array((size_t)N * D), *dw = zeros_array(D);
    be->rmsnorm_backward(dinp, dw, R, inp, weight, rstd, N, D);
    NormCtx c = {inp, weight, out, rstd, R, N, D, eps};
    check_grad("rmsnorm dinp (N=7 D=13)", inp, (size_t)N * D, dinp, norm_loss, &c);
    check_grad("rmsnorm dweight", weight, D, dw, norm_loss, &c);

    be->rmsnorm_forward(out, rstd, inp, weight, N, D, eps);
    float *pre_i = rand_array((size_t)N * D, 1.0f), *pre_w = rand_array(D, 1.0f);
    float *acc_i = copy_array(pre_i, (size_t)N * D), *acc_w = copy_array(pre_w, D);
    be->rmsnorm_backward(acc_i, acc_w, R, inp, weight, rstd, N, D);
    check_accumulates("rmsnorm dinp", acc_i, pre_i, dinp, (size_t)N * D);
    check_accumulates("rmsnorm dweight", acc_w, pre_w, dw, D);
    free(inp), free(weight), free(out), free(rstd), free(R), free(fo), free(fr), free(dinp), free(dw);
    free(pre_i), free(pre_w), free(acc_i), free(acc_w);
}

// ---- matmul ------------------------------------------------------------------------------

typedef struct {
    float *inp, *weight, *out;
    const float *R;
    int N, I, O;
} MatCtx;
static double mat_loss(void *c_) {
    MatCtx *c = c_;
    be->matmul_forward(c->out, c->inp, c->weight, c->N, c->I, c->O);
    return dot_double(c->out, c->R, (size_t)c->N * c->O);
}

// out, dinp, dweight in double for L = sum(out * R)
static void naive_matmul(double *out, double *dinp, double *dw, const float *inp, const float *w, const float *R,
                         int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = 0;
            for (int i = 0; i < I; i++) s += (double)inp[(size_t)n * I + i] * w[(size_t)o * I + i];
            out[(size_t)n * O + o] = s;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double s = 0;
            for (int o = 0; o < O; o++) s += (double)R[(size_t)n * O + o] * w[(size_t)o * I + i];
            dinp[(size_t)n * I + i] = s;
        }
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)R[(size_t)n * O + o] * inp[(size_t)n * I + i];
            dw[(size_t)o * I + i] = s;
        }
}

static void test_matmul_size(int N, int I, int O, int finite_differences) {
    size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *inp = rand_array(nin, 1.0f), *w = rand_array(nw, 1.0f), *R = rand_array(nout, 1.0f);
    float *out = zeros_array(nout), *dinp = zeros_array(nin), *dw = zeros_array(nw);
    double *rout = malloc(nout * sizeof(double)), *rdinp = malloc(nin * sizeof(double)),
           *rdw = malloc(nw * sizeof(double));
    naive_matmul(rout, rdinp, rdw, inp, w, R, N, I, O);
    be->matmul_forward(out, inp, w, N, I, O);
    be->matmul_backward(dinp, dw, R, inp, w, N, I, O, 0);
    float *fo = to_float(rout, nout), *fi = to_float(rdinp, nin), *fw = to_float(rdw, nw);
    char name[160];
    snprintf(name, sizeof name, "matmul_forward N=%d I=%d O=%d vs double reference", N, I, O);
    test_close(name, out, fo, nout, FWD_TOL);
    snprintf(name, sizeof name, "matmul_backward dinp N=%d I=%d O=%d vs double reference", N, I, O);
    test_close(name, dinp, fi, nin, FWD_TOL);
    snprintf(name, sizeof name, "matmul_backward dweight N=%d I=%d O=%d vs double reference", N, I, O);
    test_close(name, dw, fw, nw, FWD_TOL);

    if (finite_differences) {
        MatCtx c = {inp, w, out, R, N, I, O};
        snprintf(name, sizeof name, "matmul dinp (N=%d I=%d O=%d)", N, I, O);
        check_grad(name, inp, nin, dinp, mat_loss, &c);
        snprintf(name, sizeof name, "matmul dweight (N=%d I=%d O=%d)", N, I, O);
        check_grad(name, w, nw, dw, mat_loss, &c);
    }

    float *pre_i = rand_array(nin, 1.0f), *pre_w = rand_array(nw, 1.0f);
    float *acc_i = copy_array(pre_i, nin), *acc_w = copy_array(pre_w, nw);
    be->matmul_backward(acc_i, acc_w, R, inp, w, N, I, O, 0);
    check_accumulates("matmul dinp", acc_i, pre_i, dinp, nin);
    check_accumulates("matmul dweight", acc_w, pre_w, dw, nw);
    float *acc_w2 = copy_array(pre_w, nw);
    be->matmul_backward(NULL, acc_w2, R, inp, w, N, I, O, 0);
    check_bitwise("matmul_backward with dinp NULL gives the same dweight", acc_w2, acc_w, nw * sizeof(float));
    float *set_i = rand_array(nin, 1.0f);  // old contents that dinp_set must ignore
    be->matmul_backward(set_i, NULL, R, inp, w, N, I, O, 1);
    check_bitwise("matmul_backward dinp_set overwrites: = dinp computed into zeros", set_i, dinp, nin * sizeof(float));
    free(set_i);

    // the thread count must not change a single bit
    int threads = omp_get_max_threads();
    float *o1 = zeros_array(nout), *w1 = zeros_array(nw), *o3 = zeros_array(nout), *w3 = zeros_array(nw);
    omp_set_num_threads(1);
    be->matmul_forward(o1, inp, w, N, I, O);
    be->matmul_backward(NULL, w1, R, inp, w, N, I, O, 0);
    omp_set_num_threads(3);
    be->matmul_forward(o3, inp, w, N, I, O);
    be->matmul_backward(NULL, w3, R, inp, w, N, I, O, 0);
    omp_set_num_threads(threads);
    snprintf(name, sizeof name, "matmul N=%d I=%d O=%d: 1 and 3 threads give identical bits", N, I, O);
    check_bitwise(name, o1, o3, nout * sizeof(float));
    check_bitwise(name, w1, w3, nw * sizeof(float));
    free(inp), free(w), free(R), free(out), free(dinp), free(dw), free(rout), free(rdinp), free(rdw);
    free(fo), free(fi), free(fw), free(pre_i), free(pre_w), free(acc_i), free(acc_w), free(acc_w2);
    free(o1), free(w1), free(o3), free(w3);
}

// matmul_forward_batched / matmul_backward_weights_batched: entry z is bitwise the single op
// on operand z (backend.h), with the input shared (stride 0) or its own, operands spaced by a
// gap past their size (strides are distances, not sizes), gradients added to a prefill.
static void test_matmul_batched_case(int N, int I, int O, int batch, int shared_inp) {
    const size_t gap = 5, si = shared_inp ? 0 : (size_t)N * I + gap, sw = (size_t)O * I + gap, so = (size_t)N * O + gap;
    const size_t nin = shared_inp ? (size_t)N * I : si * batch, nw = sw * batch, nout = so * batch;
    float *inp = rand_array(nin, 1.0f), *w = rand_array(nw, 1.0f), *dout = rand_array(nout, 1.0f);
    float *out = rand_array(nout, 1.0f), *want = copy_array(out, nout);  // the gaps must stay as they are
    float *dw = rand_array(nw, 1.0f), *dw_want = copy_array(dw, nw);
    be->matmul_forward_batched(out, so, inp, si, w, sw, N, I, O, batch);
    be->matmul_backward_weights_batched(dw, sw, dout, so, inp, si, N, I, O, batch);
    for (int z = 0; z < batch; z++) {
        be->matmul_forward(want + z * so, inp + z * si, w + z * sw, N, I, O);
        be->matmul_backward(NULL, dw_want + z * sw, dout + z * so, inp + z * si, w + z * sw, N, I, O, 0);
    }
    char name[160];
    snprintf(name, sizeof name, "matmul_forward_batched %d x N=%d I=%d O=%d (%s input) = matmul_forward each, bitwise",
             batch, N, I, O, shared_inp ? "shared" : "own");
    check_bitwise(name, out, want, nout * sizeof(float));
    snprintf(name, sizeof name,
             "matmul_backward_weights_batched %d x N=%d I=%d O=%d (%s input) += as matmul_backward's dweight, bitwise",
             batch, N, I, O, shared_inp ? "shared" : "own");
    check_bitwise(name, dw, dw_want, nw * sizeof(float));
    free(inp), free(w), free(dout), free(out), free(want), free(dw), free(dw_want);
}

static void test_matmul(void) {
    test_matmul_size(7, 13, 11, 1);
    test_matmul_size(9, 21, 35, 1);     // one full 4x16 register tile plus edges
    test_matmul_size(37, 70, 133, 0);   // many full tiles and ragged edges
    test_matmul_batched_case(7, 13, 29, 3, 1);  // q, k, v of one norm output
    test_matmul_batched_case(9, 21, 35, 2, 0);  // operands of their own
    test_matmul_batched_case(37, 70, 17, 1, 1);
}

// ---- relative position bucket and bias ---------------------------------------------------

// Values of HF's formula in numpy float32 (torch.log on float32, / float32(math.log(...)),
// * float32(num_buckets - max_exact), .to(long)), generated on this machine:
//   bidirectional=1, num_buckets=32, max_distance=128, rp = -135 .. 135
static const signed char bucket_ref_bidir[271] = {
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 14, 14, 14, 14, 14, 14, 14, 14, 14,
    14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 13, 13, 13, 13, 13, 13, 13, 13, 13,
    13, 13, 13, 13, 13, 13, 13, 13, 13, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 11, 11, 11, 11,
    11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 9,  9,  9,  9,  8,  8,  8,  8,  7,  6,  5,  4,  3,  2,  1,
    0,  17, 18, 19, 20, 21, 22, 23, 24, 24, 24, 24, 25, 25, 25, 25, 26, 26, 26, 26, 26, 26, 26, 27, 27, 27, 27,
    27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 29, 29, 29, 29, 29, 29, 29, 29,
    29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 30,
    30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31,
    31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31,
    31,
};
//   bidirectional=0, num_buckets=32, max_distance=128, rp = -135 .. 135
static const signed char bucket_ref_causal[271] = {
    31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 30, 30, 30, 30,
    30, 30, 30, 30, 30, 30, 30, 30, 30, 30, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 28, 28, 28, 28, 28,
    28, 28, 28, 28, 28, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 26, 26, 26, 26, 26, 26, 26, 26, 25, 25, 25, 25,
    25, 25, 25, 24, 24, 24, 24, 24, 24, 23, 23, 23, 23, 23, 23, 22, 22, 22, 22, 22, 21, 21, 21, 21, 20, 20, 20,
    20, 19, 19, 19, 18, 18, 18, 17, 17, 16, 16, 16, 15, 14, 13, 12, 11, 10, 9,  8,  7,  6,  5,  4,  3,  2,  1,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,
};

static void test_bucket(void) {
    int bad_bi = 0, bad_ca = 0, first_bi = 0, first_ca = 0;
    for (int rp = -135; rp <= 135; rp++) {
        int b = t5_relative_position_bucket(rp, 1, 32, 128), c = t5_relative_position_bucket(rp, 0, 32, 128);
        if (b != bucket_ref_bidir[rp + 135] && !bad_bi++) first_bi = rp;
        if (c != bucket_ref_causal[rp + 135] && !bad_ca++) first_ca = rp;
    }
    char what[160];
    snprintf(what, sizeof what, "relative_position_bucket bidirectional 32/128, rp -135..135 (%d wrong, first rp %d)",
             bad_bi, first_bi);
    test_check(bad_bi == 0, what);
    snprintf(what, sizeof what, "relative_position_bucket causal 32/128, rp -135..135 (%d wrong, first rp %d)", bad_ca,
             first_ca);
    test_check(bad_ca == 0, what);
    // beyond max_distance the last bucket holds; other configurations (numpy float32 values)
    static const struct { int rp, bi, nb, md, want; } pts[] = {
        {-1000, 1, 32, 128, 15}, {1000, 1, 32, 128, 31}, {-1000, 0, 32, 128, 31}, {1000, 0, 32, 128, 0},
        {-20, 1, 32, 128, 10},   {16, 1, 32, 128, 26},   {-16, 1, 32, 128, 10},   {-128, 0, 32, 128, 31},
        {-200, 1, 8, 20, 3},     {-3, 1, 8, 20, 2},      {-2, 1, 8, 20, 2},       {1, 1, 8, 20, 5},
        {2, 1, 8, 20, 6},        {7, 1, 8, 20, 7},       {-21, 0, 16, 40, 12},    {-11, 0, 16, 40, 9},
        {-9, 0, 16, 40, 8},      {-7, 0, 16, 40, 7},     {-200, 0, 16, 40, 15},   {9, 0, 16, 40, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++)
        bad += t5_relative_position_bucket(pts[i].rp, pts[i].bi, pts[i].nb, pts[i].md) != pts[i].want;
    snprintf(what, sizeof what, "relative_position_bucket: 20 values of other configurations (%d wrong)", bad);
    test_check(bad == 0, what);
}

typedef struct {
    float *table, *bias;
    const float *R;
    int Tq, Tk, H, q_offset, nb, md, bi;
} PbCtx;
static double pb_loss(void *c_) {
    PbCtx *c = c_;
    be->position_bias_forward(c->bias, c->table, c->Tq, c->Tk, c->H, c->q_offset, c->nb, c->md, c->bi);
    return dot_double(c->bias, c->R, (size_t)c->H * c->Tq * c->Tk);
}

static void test_position_bias_case(int Tq, int Tk, int q_offset, int bi) {
    enum { H = 3, NB = 32, MD = 128 };
    size_t nt = (size_t)NB * H, nbias = (size_t)H * Tq * Tk;
    float *table = rand_array(nt, 1.0f), *bias = zeros_array(nbias), *R = rand_array(nbias, 1.0f);
    be->position_bias_forward(bias, table, Tq, Tk, H, q_offset, NB, MD, bi);
    int exact = 1;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Tq; i++)
            for (int j = 0; j < Tk; j++) {
                int bk = t5_relative_position_bucket(j - (q_offset + i), bi, NB, MD);
                exact &= bias[((size_t)h * Tq + i) * Tk + j] == table[bk * H + h];
            }
    char name[160];
    snprintf(name, sizeof name, "position_bias_forward %s Tq=%d Tk=%d q_offset=%d: table[bucket(j-i-q_offset)*H+h]",
             bi ? "bidirectional" : "causal", Tq, Tk, q_offset);
    test_check(exact, name);

    float *dtable = zeros_array(nt);
    be->position_bias_backward(dtable, R, Tq, Tk, H, q_offset, NB, MD, bi);
    PbCtx c = {table, bias, R, Tq, Tk, H, q_offset, NB, MD, bi};
    snprintf(name, sizeof name, "position_bias dtable (%s, Tq=%d Tk=%d q_offset=%d)", bi ? "bidirectional" : "causal",
             Tq, Tk, q_offset);
    check_grad(name, table, nt, dtable, pb_loss, &c);
    pb_loss(&c);  // bias of the unperturbed table again
    float *pre = rand_array(nt, 1.0f), *acc = copy_array(pre, nt);
    be->position_bias_backward(acc, R, Tq, Tk, H, q_offset, NB, MD, bi);
    check_accumulates("position_bias dtable", acc, pre, dtable, nt);

    // decoding with a cache: rows q_offset.. of the full (q_offset = 0) bias
    if (q_offset > 0) {
        int Tfull = q_offset + Tq;
        float *full = zeros_array((size_t)H * Tfull * Tk);
        be->position_bias_forward(full, table, Tfull, Tk, H, 0, NB, MD, bi);
        int same = 1;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++)
                same &= memcmp(bias + ((size_t)h * Tq + i) * Tk, full + ((size_t)h * Tfull + q_offset + i) * Tk,
                               Tk * sizeof(float)) == 0;
        test_check(same, "position_bias_forward with q_offset = the matching rows of the q_offset 0 bias");
        free(full);
    }
    free(table), free(bias), free(R), free(dtable), free(pre), free(acc);
}

static void test_position_bias(void) {
    test_position_bias_case(7, 11, 0, 1);
    test_position_bias_case(9, 45, 0, 1);    // reaches the logarithmic buckets on both sides
    test_position_bias_case(7, 11, 4, 0);    // causal, decoding with q_offset > 0
    test_position_bias_case(7, 140, 133, 0); // causal, far beyond max_distance
}

// ---- attention ---------------------------------------------------------------------------

typedef struct {
    float *q, *k, *v, *bias, *out, *att;
    const int *key_mask;
    const float *R;
    int B, Tq, Tk, H, dk, causal, q_offset;
    DropoutArgs drop;
} AttCtx;
static double att_loss(void *c_) {
    AttCtx *c = c_;
    be->attention_forward(c->out, c->att, c->q, c->k, c->v, c->bias, c->key_mask, c->B, c->Tq, c->Tk, c->Tk, c->H,
                          c->dk, c->causal, c->q_offset, c->drop);
    return dot_double(c->out, c->R, (size_t)c->B * c->Tq * c->H * c->dk);
}

// Double-precision attention from the definition; dropout index (b,h,i,j) flattened.
static void naive_attention(double *out, double *att, const AttCtx *c) {
    int B = c->B, Tq = c->Tq, Tk = c->Tk, H = c->H, dk = c->dk;
    size_t HD = (size_t)H * dk;
    double *s = malloc(Tk * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                double mx = -INFINITY;
                int any = 0;
                for (int j = 0; j < Tk; j++) {
                    int masked = (c->key_mask && !c->key_mask[b * Tk + j]) || (c->causal && j > c->q_offset + i);
                    if (masked) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double d = 0;
                    for (int e = 0; e < dk; e++)
                        d += (double)c->q[(b * Tq + i) * HD + h * dk + e] * c->k[(b * Tk + j) * HD + h * dk + e];
                    if (c->bias) d += c->bias[((size_t)h * Tq + i) * Tk + j];
                    s[j] = d;
                    if (d > mx) mx = d;
                    any = 1;
                }
                double sum = 0;
                for (int j = 0; j < Tk; j++) sum += any ? exp(s[j] - mx) : 0.0;
                for (int e = 0; e < dk; e++) out[(b * Tq + i) * HD + h * dk + e] = 0;
                for (int j = 0; j < Tk; j++) {
                    size_t idx = (((size_t)b * H + h) * Tq + i) * Tk + j;
                    double p = any ? exp(s[j] - mx) / sum : 0.0;
                    att[idx] = p;
                    if (c->drop.p > 0) p = cpu_dropout_uniform(c->drop.seed, idx) >= c->drop.p ? p / (1 - c->drop.p) : 0;
                    for (int e = 0; e < dk; e++)
                        out[(b * Tq + i) * HD + h * dk + e] += p * c->v[(b * Tk + j) * HD + h * dk + e];
                }
            }
    free(s);
}

static void test_attention_case(const char *label, int B, int Tq, int Tk, int use_mask, int all_masked_batch,
                                int use_bias, int causal, int q_offset, float p) {
    enum { H = 3, DK = 5 };
    size_t HD = (size_t)H * DK, nq = (size_t)B * Tq * HD, nk = (size_t)B * Tk * HD, nbias = (size_t)H * Tq * Tk,
           natt = (size_t)B * H * Tq * Tk;
    float *q = rand_array(nq, 1.0f), *k = rand_array(nk, 1.0f), *v = rand_array(nk, 1.0f);
    float *bias = use_bias ? rand_array(nbias, 1.0f) : NULL;
    float *out = zeros_array(nq), *att = zeros_array(natt), *R = rand_array(nq, 1.0f);
    int *mask = NULL;
    if (use_mask) {
        mask = malloc((size_t)B * Tk * sizeof(int));
        for (int b = 0; b < B; b++)
            for (int j = 0; j < Tk; j++) mask[b * Tk + j] = j < Tk - 2 - 2 * b;  // padding at the end, per row
        mask[1] = 0;                                                          // and a hole
        if (all_masked_batch)
            for (int j = 0; j < Tk; j++) mask[(B - 1) * Tk + j] = 0;
    }
    AttCtx c = {q, k, v, bias, out, att, mask, R, B, Tq, Tk, H, DK, causal, q_offset, {p, 1234567}};
    att_loss(&c);

    double *rout = malloc(nq * sizeof(double)), *ratt = malloc(natt * sizeof(double));
    naive_attention(rout, ratt, &c);
    float *fo = to_float(rout, nq), *fa = to_float(ratt, natt);
    char name[200];
    snprintf(name, sizeof name, "attention_forward [%s] att vs double reference", label);
    test_close(name, att, fa, natt, FWD_TOL);
    snprintf(name, sizeof name, "attention_forward [%s] out vs double reference", label);
    test_close(name, out, fo, nq, FWD_TOL);
    // masked keys get probability exactly 0; live rows sum to 1
    int zeros_ok = 1;
    double worst_sum = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *prow = att + (((size_t)b * H + h) * Tq + i) * Tk;
                double s = 0;
                int any = 0;
                for (int j = 0; j < Tk; j++) {
                    int masked = (mask && !mask[b * Tk + j]) || (causal && j > q_offset + i);
                    if (masked) zeros_ok &= prow[j] == 0.0f;
                    any |= !masked;
                    s += prow[j];
                }
                if (any && fabs(s - 1) > worst_sum) worst_sum = fabs(s - 1);
                if (!any) {
                    zeros_ok &= s == 0.0;
                    for (int e = 0; e < DK; e++) zeros_ok &= out[((size_t)b * Tq + i) * HD + h * DK + e] == 0.0f;
                }
            }
    snprintf(name, sizeof name, "attention_forward [%s] masked keys exactly 0 (and all-masked rows output 0)", label);
    test_check(zeros_ok, name);
    snprintf(name, sizeof name, "attention_forward [%s] probability rows sum to 1 (max |sum-1| %.1e)", label,
             worst_sum);
    test_check(worst_sum < 1e-6, name);

    float *dq = zeros_array(nq), *dk = zeros_array(nk), *dv = zeros_array(nk);
    float *dbias = use_bias ? zeros_array(nbias) : NULL;
    be->attention_backward(dq, dk, dv, dbias, R, att, q, k, v, B, Tq, Tk, H, DK, c.drop, 0, 0, 0);
    snprintf(name, sizeof name, "attention dq [%s]", label);
    check_grad(name, q, nq, dq, att_loss, &c);
    snprintf(name, sizeof name, "attention dk [%s]", label);
    check_grad(name, k, nk, dk, att_loss, &c);
    snprintf(name, sizeof name, "attention dv [%s]", label);
    check_grad(name, v, nk, dv, att_loss, &c);
    if (use_bias) {
        snprintf(name, sizeof name, "attention dbias [%s]", label);
        check_grad(name, bias, nbias, dbias, att_loss, &c);
    }

    att_loss(&c);  // att of the unperturbed inputs
    float *pq = rand_array(nq, 1.0f), *pk = rand_array(nk, 1.0f), *pv = rand_array(nk, 1.0f);
    float *pb = use_bias ? rand_array(nbias, 1.0f) : NULL;
    float *aq = copy_array(pq, nq), *ak = copy_array(pk, nk), *av = copy_array(pv, nk);
    float *ab = use_bias ? copy_array(pb, nbias) : NULL;
    be->attention_backward(aq, ak, av, ab, R, att, q, k, v, B, Tq, Tk, H, DK, c.drop, 0, 0, 0);
    snprintf(name, sizeof name, "attention dq [%s]", label);
    check_accumulates(name, aq, pq, dq, nq);
    snprintf(name, sizeof name, "attention dk [%s]", label);
    check_accumulates(name, ak, pk, dk, nk);
    snprintf(name, sizeof name, "attention dv [%s]", label);
    check_accumulates(name, av, pv, dv, nk);
    if (use_bias) {
        snprintf(name, sizeof name, "attention dbias [%s]", label);
        check_accumulates(name, ab, pb, dbias, nbias);
    }
    {  // dqkv_set overwrites whatever dq, dk, dv held: the gradients computed into zeros
        float *sq = rand_array(nq, 1.0f), *sk = rand_array(nk, 1.0f), *sv = rand_array(nk, 1.0f);
        be->attention_backward(sq, sk, sv, NULL, R, att, q, k, v, B, Tq, Tk, H, DK, c.drop, 1, 0, 0);
        snprintf(name, sizeof name, "attention_backward [%s] dqkv_set: = dq, dk, dv into zeros", label);
        test_check(!memcmp(sq, dq, nq * 4) && !memcmp(sk, dk, nk * 4) && !memcmp(sv, dv, nk * 4), name);
        free(sq), free(sk), free(sv);
    }
    {  // row strides: dq rows HD + 2 apart, dk and dv interleaved (2 HD); the same numbers, the gaps untouched
        const size_t ldq = HD + 2, ldkv = 2 * HD, rq = nq / HD, rk = nk / HD;
        float *gq = rand_array(rq * ldq, 1.0f), *gkv = rand_array(rk * ldkv, 1.0f);
        float *gq0 = malloc(rq * ldq * 4), *gkv0 = malloc(rk * ldkv * 4);
        memcpy(gq0, gq, rq * ldq * 4), memcpy(gkv0, gkv, rk * ldkv * 4);
        be->attention_backward(gq, gkv, gkv + HD, NULL, R, att, q, k, v, B, Tq, Tk, H, DK, c.drop, 1, (int)ldq,
                               (int)ldkv);
        int same = 1;
        for (size_t r = 0; r < rq; r++)
            same &= !memcmp(gq + r * ldq, dq + r * HD, HD * 4) && !memcmp(gq + r * ldq + HD, gq0 + r * ldq + HD, 2 * 4);
        for (size_t r = 0; r < rk; r++)
            same &= !memcmp(gkv + r * ldkv, dk + r * HD, HD * 4) && !memcmp(gkv + r * ldkv + HD, dv + r * HD, HD * 4);
        snprintf(name, sizeof name, "attention_backward [%s] row strides (dq %zu, dk/dv interleaved %zu): same gradients",
                 label, ldq, ldkv);
        test_check(same, name);
        free(gq), free(gkv), free(gq0), free(gkv0);
    }
    if (use_bias) {  // dbias NULL leaves the other gradients unchanged
        float *nq2 = zeros_array(nq), *nk2 = zeros_array(nk), *nv2 = zeros_array(nk);
        be->attention_backward(nq2, nk2, nv2, NULL, R, att, q, k, v, B, Tq, Tk, H, DK, c.drop, 0, 0, 0);
        snprintf(name, sizeof name, "attention_backward [%s] with dbias NULL: same dq, dk, dv", label);
        test_check(!memcmp(nq2, dq, nq * 4) && !memcmp(nk2, dk, nk * 4) && !memcmp(nv2, dv, nk * 4), name);
        free(nq2), free(nk2), free(nv2);
    }
    free(q), free(k), free(v), free(bias), free(out), free(att), free(R), free(mask), free(rout), free(ratt);
    free(fo), free(fa), free(dq), free(dk), free(dv), free(dbias), free(pq), free(pk), free(pv), free(pb);
    free(aq), free(ak), free(av), free(ab);
}

// Decoding with a cache: queries q_offset.. of a causal call equal the matching rows of
// the full call.
static void test_attention_q_offset_rows(void) {
    enum { B = 2, H = 3, DK = 5, T = 11, OFF = 4, TQ = T - OFF };
    size_t HD = H * DK;
    float *q = rand_array((size_t)B * T * HD, 1.0f), *k = rand_array((size_t)B * T * HD, 1.0f);
    float *v = rand_array((size_t)B * T * HD, 1.0f), *bias = rand_array((size_t)H * T * T, 1.0f);
    float *out = zeros_array((size_t)B * T * HD), *att = zeros_array((size_t)B * H * T * T);
    DropoutArgs nodrop = {0.0f, 0};
    be->attention_forward(out, att, q, k, v, bias, NULL, B, T, T, T, H, DK, 1, 0, nodrop);
    float *q2 = malloc((size_t)B * TQ * HD * sizeof(float)), *bias2 = malloc((size_t)H * TQ * T * sizeof(float));
    for (int b = 0; b < B; b++) memcpy(q2 + (size_t)b * TQ * HD, q + ((size_t)b * T + OFF) * HD, TQ * HD * sizeof(float));
    for (int h = 0; h < H; h++) memcpy(bias2 + (size_t)h * TQ * T, bias + ((size_t)h * T + OFF) * T, TQ * T * sizeof(float));
    float *out2 = zeros_array((size_t)B * TQ * HD), *att2 = zeros_array((size_t)B * H * TQ * T);
    be->attention_forward(out2, att2, q2, k, v, bias2, NULL, B, TQ, T, T, H, DK, 1, OFF, nodrop);
    int same = 1;
    for (int b = 0; b < B; b++)
        same &= !memcmp(out2 + (size_t)b * TQ * HD, out + ((size_t)b * T + OFF) * HD, TQ * HD * sizeof(float));
    test_check(same, "attention_forward causal with q_offset 4 = rows 4.. of the q_offset 0 call (bitwise)");
    free(q), free(k), free(v), free(bias), free(out), free(att), free(q2), free(bias2), free(out2), free(att2);
}

// A KV cache: k, v and key_mask with kv_rows > Tk rows per batch entry (the rows past Tk
// hold garbage that must not be read) give bitwise the dense call's results.
static void test_attention_kv_rows(int use_mask) {
    enum { B = 3, H = 3, DK = 5, TQ = 2, TK = 6, CAP = 9, OFF = 4 };
    size_t HD = H * DK;
    float *q = rand_array((size_t)B * TQ * HD, 1.0f), *k = rand_array((size_t)B * TK * HD, 1.0f);
    float *v = rand_array((size_t)B * TK * HD, 1.0f), *bias = rand_array((size_t)H * TQ * TK, 1.0f);
    float *kc = rand_array((size_t)B * CAP * HD, 100.0f), *vc = rand_array((size_t)B * CAP * HD, 100.0f);
    int mask[B * TK], maskc[B * CAP];
    for (int b = 0; b < B; b++) {
        memcpy(kc + (size_t)b * CAP * HD, k + (size_t)b * TK * HD, TK * HD * sizeof(float));
        memcpy(vc + (size_t)b * CAP * HD, v + (size_t)b * TK * HD, TK * HD * sizeof(float));
        for (int j = 0; j < CAP; j++) maskc[b * CAP + j] = j < TK ? (j != b) : 0;  // a hole per row
        for (int j = 0; j < TK; j++) mask[b * TK + j] = maskc[b * CAP + j];
    }
    float *out = zeros_array((size_t)B * TQ * HD), *att = zeros_array((size_t)B * H * TQ * TK);
    float *out2 = zeros_array((size_t)B * TQ * HD), *att2 = zeros_array((size_t)B * H * TQ * TK);
    DropoutArgs nodrop = {0.0f, 0};
    be->attention_forward(out, att, q, k, v, bias, use_mask ? mask : NULL, B, TQ, TK, TK, H, DK, 1, OFF, nodrop);
    be->attention_forward(out2, att2, q, kc, vc, bias, use_mask ? maskc : NULL, B, TQ, TK, CAP, H, DK, 1, OFF,
                          nodrop);
    char what[200];
    snprintf(what, sizeof what, "attention_forward kv_rows %d > Tk %d%s = the dense call (bitwise out and att)", CAP,
             TK, use_mask ? " with key_mask (B,kv_rows)" : "");
    test_check(!memcmp(out, out2, (size_t)B * TQ * HD * sizeof(float)) &&
                   !memcmp(att, att2, (size_t)B * H * TQ * TK * sizeof(float)),
               what);
    free(q), free(k), free(v), free(bias), free(kc), free(vc), free(out), free(att), free(out2), free(att2);
}

static void test_attention(void) {
    // label, B, Tq, Tk, mask, all-masked batch, bias, causal, q_offset, dropout p
    test_attention_case("plain", 2, 7, 11, 0, 0, 0, 0, 0, 0.0f);
    test_attention_case("mask+bias", 2, 7, 11, 1, 0, 1, 0, 0, 0.0f);
    test_attention_case("causal+mask+bias", 2, 7, 7, 1, 0, 1, 1, 0, 0.0f);
    test_attention_case("causal q_offset=4 +bias", 2, 7, 11, 0, 0, 1, 1, 4, 0.0f);
    test_attention_case("cross Tq=7 Tk=11 mask, no bias", 3, 7, 11, 1, 0, 0, 0, 0, 0.0f);
    test_attention_case("mask+bias+dropout 0.2", 2, 7, 11, 1, 0, 1, 0, 0, 0.2f);
    test_attention_case("causal+bias+dropout 0.3", 2, 7, 7, 0, 0, 1, 1, 0, 0.3f);
    test_attention_case("one batch row fully masked", 2, 7, 11, 1, 1, 1, 0, 0, 0.0f);
    test_attention_q_offset_rows();
    test_attention_kv_rows(0);
    test_attention_kv_rows(1);
}

int main(void) {
    be = backend_cpu();
    test_backend_struct();
    test_embedding();
    test_rmsnorm();
    test_matmul();
    test_bucket();
    test_position_bias();
    test_attention();
    return test_summary();
}
