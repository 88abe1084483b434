// tests/gpu/test_backend_ops_perf.c: timings of the CUDA backend's ops at t5-large sizes
// (PERF lines, informational: no checks), called through the Backend and timed with CUDA
// events on the backend's stream: rmsnorm, cross-entropy, embedding backward, FFN
// activations, AdamW and sumsq (bf16), residual add + norm fused, matmul TFLOP/s (and q, k, v as one
// batched GEMM), the fp8 linear against the bf16 one, and attention ms.
// Environment: T5_TEST_NO_PERF=1 or T5_TEST_QUICK=1 skip everything (compute-sanitizer
// runs); T5_GEMM_FALLBACK=1 skips the matmul/attention timings (the slow kernel);
// T5_TEST_PERF_ONLY=1 times the encoder self-attention only (for profilers; with
// T5_TEST_PERF_ATTENTION=1 also decoder self- and cross-attention); T5_TEST_PERF_DECODE=1
// only generation's decoder-step ops at t5-large, 64 items x 4 beams; T5_TEST_PERF_FP8=1 only
// the fp8 linear against bf16.
#include <cuda_runtime.h>

#include "../../kernels/backend_registry.h"
#include "../../kernels/cuda/cuda_ops.h"  // cuda_stream(): the stream the events are recorded on
#include "backend_ops.h"

static const Backend *BF16;  // the bf16 CUDA backend of the pointwise timings

#define PERF_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef void (*PerfFn)(void *ctx);

// Mean milliseconds per call over `iters` calls after one warm-up call.
static double time_ms(PerfFn fn, void *ctx, int iters) {
    cudaStream_t st = (cudaStream_t)cuda_stream();
    cudaEvent_t a, b;
    PERF_CHECK(cudaEventCreate(&a));
    PERF_CHECK(cudaEventCreate(&b));
    fn(ctx);
    PERF_CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < iters; i++) fn(ctx);
    PERF_CHECK(cudaEventRecord(b, st));
    PERF_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    PERF_CHECK(cudaEventElapsedTime(&ms, a, b));
    PERF_CHECK(cudaEventDestroy(a));
    PERF_CHECK(cudaEventDestroy(b));
    return ms / iters;
}

static void perf_print(const char *what, double ms, double bytes) {
    printf("PERF %-58s %8.3f ms %8.0f GB/s\n", what, ms, bytes / (ms * 1e-3) / 1e9);
}

typedef struct {
    void *a, *b, *c, *d, *e;
    float *f;
    int *ids;
    int N, D;
    size_t n;
} PerfCtx;

static void perf_rms_fwd(void *p) {
    PerfCtx *c = p;
    BF16->rmsnorm_forward(c->b, c->f, c->a, c->c, c->N, c->D, 1e-6f);
}
static void perf_rms_bwd(void *p) {
    PerfCtx *c = p;
    BF16->rmsnorm_backward(c->d, c->e, c->b, c->a, c->c, c->f, c->N, c->D);
}
static void perf_ce(void *p) {
    PerfCtx *c = p;
    BF16->crossentropy_forward_backward(c->a, c->a, c->ids, c->N, c->D, 0.1f, 1e-4f);
}
static void perf_adamw(void *p) {
    PerfCtx *c = p;
    BF16->adamw_update(c->f, c->e, c->a, (float *)c->b, (float *)c->c, c->n, 1e-4f, 0.9f, 0.999f, 1e-8f,
                      0.01f, 1.0f, 1);
}
static void perf_sumsq(void *p) {
    PerfCtx *c = p;
    BF16->sumsq(c->a, c->n);
}
static void perf_emb_bwd(void *p) {
    PerfCtx *c = p;
    BF16->embedding_backward(c->a, c->b, c->ids, c->N, c->D);
}
static void perf_relu(void *p) {
    PerfCtx *c = p;
    BF16->ffn_act_forward(c->a, c->a, NULL, c->n, ACT_RELU, (DropoutArgs){0.0f, 0});
}
static void perf_gated_bwd(void *p) {
    PerfCtx *c = p;
    BF16->ffn_act_backward(c->c, c->d, c->e, c->a, c->b, c->n, ACT_GELU_NEW, (DropoutArgs){0.0f, 0}, 0);
}

static void run_perf_pointwise_1(void) {
    printf("--- timings (bf16, t5-large sizes; informational, the H200's copy ceiling is ~4.3 TB/s)\n");
    PerfCtx c;
    memset(&c, 0, sizeof c);
    char what[128];
    {  // rmsnorm N=8192 D=1024
        c.N = 8192;
        c.D = 1024;
        size_t ND = (size_t)c.N * c.D;
        c.a = BF16->alloc(ND * 2);
        c.b = BF16->alloc(ND * 2);
        c.c = BF16->alloc(c.D * 2);
        c.d = BF16->alloc(ND * 2);
        c.e = BF16->alloc(c.D * 2);
        c.f = BF16->alloc(c.N * 4);
        snprintf(what, sizeof what, "rmsnorm_forward  N=%d D=%d", c.N, c.D);
        perf_print(what, time_ms(perf_rms_fwd, &c, 20), 2.0 * ND * 2);
        snprintf(what, sizeof what, "rmsnorm_backward N=%d D=%d (incl. dweight)", c.N, c.D);
        perf_print(what, time_ms(perf_rms_bwd, &c, 20), 4.0 * ND * 2);
        BF16->free(c.a);
        BF16->free(c.b);
        BF16->free(c.c);
        BF16->free(c.d);
        BF16->free(c.e);
        BF16->free(c.f);
    }
    {  // cross-entropy N=8192 V=32128, dlogits in place
        c.N = 8192;
        c.D = 32128;
        int *lab = malloc(c.N * sizeof(int));
        for (int i = 0; i < c.N; i++) lab[i] = (int)(rng_u32() % c.D);
        c.ids = dev_ints(BF16, lab, c.N);
        c.a = BF16->alloc((size_t)c.N * c.D * 2);
        snprintf(what, sizeof what, "crossentropy N=%d V=%d in place (1 read + 1 write)", c.N, c.D);
        perf_print(what, time_ms(perf_ce, &c, 10), 2.0 * c.N * c.D * 2);
        BF16->free(c.a);
        BF16->free(c.ids);
        free(lab);
    }
    {  // embedding backward N=8192 D=1024, 30% padding id
        c.N = 8192;
        c.D = 1024;
        int *ids = malloc(c.N * sizeof(int));
        for (int i = 0; i < c.N; i++) ids[i] = rng_u32() % 10 < 3 ? 0 : (int)(rng_u32() % 32128);
        c.ids = dev_ints(BF16, ids, c.N);
        c.a = BF16->alloc((size_t)32128 * c.D * 2);
        c.b = BF16->alloc((size_t)c.N * c.D * 2);
        snprintf(what, sizeof what, "embedding_backward N=%d D=%d (30%% one id; dout bytes)", c.N, c.D);
        perf_print(what, time_ms(perf_emb_bwd, &c, 10), (double)c.N * c.D * 2);
        BF16->free(c.a);
        BF16->free(c.b);
        BF16->free(c.ids);
        free(ids);
    }
}

static void run_perf_pointwise_2(void) {
    PerfCtx c;
    memset(&c, 0, sizeof c);
    char what[128];
    {  // FFN activations n = 8192 x 4096
        c.n = (size_t)8192 * 4096;
        c.a = BF16->alloc(c.n * 2);
        c.b = BF16->alloc(c.n * 2);
        c.c = BF16->alloc(c.n * 2);
        c.d = BF16->alloc(c.n * 2);
        c.e = BF16->alloc(c.n * 2);
        snprintf(what, sizeof what, "ffn_act_forward relu in place n=%zu", c.n);
        perf_print(what, time_ms(perf_relu, &c, 20), 2.0 * c.n * 2);
        snprintf(what, sizeof what, "ffn_act_backward gelu_new gated n=%zu", c.n);
        perf_print(what, time_ms(perf_gated_bwd, &c, 20), 7.0 * c.n * 2);
        BF16->free(c.a);
        BF16->free(c.b);
        BF16->free(c.c);
        BF16->free(c.d);
        BF16->free(c.e);
    }
    {  // optimizer over t5-large's 737.7M parameters
        c.n = 737668096;
        c.a = BF16->alloc(c.n * 2);                 // grad (bf16)
        c.b = BF16->alloc(c.n * 4);                 // m
        c.c = BF16->alloc(c.n * 4);                 // v
        c.f = BF16->alloc(c.n * 4);                 // master
        c.e = BF16->alloc(c.n * 2);                 // param_out (bf16)
        snprintf(what, sizeof what, "adamw_update n=%zu (bf16 grad + param_out)", c.n);
        perf_print(what, time_ms(perf_adamw, &c, 5), 28.0 * c.n);
        snprintf(what, sizeof what, "sumsq n=%zu", c.n);
        perf_print(what, time_ms(perf_sumsq, &c, 5), 2.0 * c.n);
        BF16->free(c.a);
        BF16->free(c.b);
        BF16->free(c.c);
        BF16->free(c.f);
        BF16->free(c.e);
    }
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

static void perf_matmul(Dtype dt, int N, int I, int O) {
    const Backend *be = backend_open("cuda", 0, dt);
    const size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *h = rand_dt(dt, nin > nout ? (nin > nw ? nin : nw) : (nout > nw ? nout : nw), 1.0f);
    void *inp = dev_from(be, dt, h, nin), *w = dev_from(be, dt, h, nw), *dout = dev_from(be, dt, h, nout);
    void *out = be->alloc(nout * dt_size(dt)), *din = be->alloc(nin * dt_size(dt)), *dw = be->alloc(nw * dt_size(dt));
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM; i++) {
        be->matmul_forward(out, inp, w, N, I, O);
        be->matmul_backward(din, dw, dout, inp, w, N, I, O, 0);
    }
    cudaEventRecord(e0, s);
    for (int i = 0; i < ITERS; i++) be->matmul_forward(out, inp, w, N, I, O);
    cudaEventRecord(e1, s);
    for (int i = 0; i < ITERS; i++) be->matmul_backward(din, dw, dout, inp, w, N, I, O, 0);
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
    for (int i = 0; i < 6; i++) be->free(bufs[i]);
    free(h);
}

// The fp8 linear (fp8_matmul_forward / fp8_matmul_backward, delayed scaling: the rounding
// passes with their amax included) against matmul_forward / matmul_backward, both with bf16
// activations; TFLOP/s count the products' 2*N*I*O (forward) and twice that (backward).
static void perf_fp8(int N, int I, int O) {
    const Dtype dt = DTYPE_BF16;
    const Backend *be = backend_open("cuda", 0, dt);
    const size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *h = rand_dt(dt, nin > nout ? (nin > nw ? nin : nw) : (nout > nw ? nout : nw), 1.0f);
    void *inp = dev_from(be, dt, h, nin), *w = dev_from(be, dt, h, nw), *dout = dev_from(be, dt, h, nout);
    void *out = be->alloc(nout * dt_size(dt)), *din = be->alloc(nin * dt_size(dt)), *dw = be->alloc(nw * dt_size(dt));
    const float hs[3 * FP8_OPERANDS] = {224.0f, 224.0f, 28672.0f, 1 / 224.0f, 1 / 224.0f, 1 / 28672.0f, 0, 0, 0};
    float *st = be->alloc(sizeof hs);
    be->to_device(st, hs, sizeof hs);
    const Fp8Scales s = 
            {.scale = st, .inv = st + FP8_OPERANDS, .amax = st + 2 * FP8_OPERANDS, .current = 0, .inp_t = NULL};
    cudaStream_t cs = (cudaStream_t)cuda_stream();
    cudaEvent_t e[5];
    for (int i = 0; i < 5; i++) cudaEventCreate(&e[i]);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM; i++) {
        be->matmul_forward(out, inp, w, N, I, O);
        be->matmul_backward(din, dw, dout, inp, w, N, I, O, 0);
        be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1, s);
        be->fp8_matmul_backward(din, dw, dout, inp, w, N, I, O, 0, s);
    }
    cudaEventRecord(e[0], cs);
    for (int i = 0; i < ITERS; i++) be->matmul_forward(out, inp, w, N, I, O);
    cudaEventRecord(e[1], cs);
    for (int i = 0; i < ITERS; i++) be->fp8_matmul_forward(out, 0, inp, w, 0, N, I, O, 1, s);
    cudaEventRecord(e[2], cs);
    for (int i = 0; i < ITERS; i++) be->matmul_backward(din, dw, dout, inp, w, N, I, O, 0);
    cudaEventRecord(e[3], cs);
    for (int i = 0; i < ITERS; i++) be->fp8_matmul_backward(din, dw, dout, inp, w, N, I, O, 0, s);
    cudaEventRecord(e[4], cs);
    float t[4];
    for (int i = 0; i < 4; i++) t[i] = elapsed_ms(e[i], e[i + 1]) / ITERS;
    const double flop = 2.0 * N * I * O;
    printf("PERF fp8 vs bf16 N=%d I=%d O=%d: fwd bf16 %.3f ms %.1f TFLOP/s, fp8 %.3f ms %.1f TFLOP/s (%.2fx) | "
           "bwd bf16 %.3f ms %.1f TFLOP/s, fp8 %.3f ms %.1f TFLOP/s (%.2fx)\n",
           N, I, O, t[0], flop / t[0] * 1e-9, t[1], flop / t[1] * 1e-9, t[0] / t[1], t[2], 2 * flop / t[2] * 1e-9,
           t[3], 2 * flop / t[3] * 1e-9, t[2] / t[3]);
    fflush(stdout);
    for (int i = 0; i < 5; i++) cudaEventDestroy(e[i]);
    FREE_SUB(be, inp, w, dout, out, din, dw, st);
    free(h);
}

// A sublayer's residual add then the next norm: dropout_add_guard + rmsnorm_forward against
// residual_rmsnorm_forward (model/block.c residual_add), dropout on as in training.
static void perf_residual_rmsnorm(Dtype dt, int N, int D) {
    const Backend *be = backend_open("cuda", 0, dt);
    const size_t ND = (size_t)N * D;
    float *h = rand_dt(dt, ND, 1.0f);
    void *y = dev_from(be, dt, h, ND), *x = dev_from(be, dt, h, ND), *w = dev_from(be, dt, h, D);
    void *xo = be->alloc(ND * dt_size(dt)), *ln = be->alloc(ND * dt_size(dt));
    float *rstd = be->alloc(N * sizeof(float));
    const DropoutArgs drop = {0.1f, 7};
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++) cudaEventCreate(&e[i]);
    enum { WARM = 3, ITERS = 50 };
    for (int i = 0; i < WARM + ITERS; i++) {
        if (i == WARM) cudaEventRecord(e[0], s);
        be->dropout_add_guard(xo, y, x, ND, drop);
        be->rmsnorm_forward(ln, rstd, xo, w, N, D, 1e-6f);
    }
    cudaEventRecord(e[1], s);
    for (int i = 0; i < ITERS; i++) be->residual_rmsnorm_forward(xo, ln, rstd, y, x, w, N, D, 1e-6f, drop);
    cudaEventRecord(e[2], s);
    float two = elapsed_ms(e[0], e[1]) / ITERS * 1e3f, one = elapsed_ms(e[1], e[2]) / ITERS * 1e3f;
    double bytes = 4.0 * ND * dt_size(dt);  // fused: read y, x; write x_out, out
    printf("PERF residual add + rmsnorm %s N=%d D=%d p=0.1: two ops %.1f us | fused %.1f us (%.0f GB/s)\n", dt_name(dt),
           N, D, two, one, bytes / one * 1e-3);
    fflush(stdout);
    for (int i = 0; i < 3; i++) cudaEventDestroy(e[i]);
    FREE_SUB(be, y, x, w, xo, ln, rstd);
    free(h);
}

// q, k, v of one norm output (N, D) -> 3 x (N, HK): three matmul_forward calls against one
// matmul_forward_batched, and the three weight gradients against one
// matmul_backward_weights_batched (model/block.c linears_forward / linears_backward).
static void perf_matmul_qkv(Dtype dt, int N, int D, int HK) {
    const Backend *be = backend_open("cuda", 0, dt);
    const size_t es = dt_size(dt), nin = (size_t)N * D, nw = (size_t)HK * D, nout = (size_t)N * HK;
    const size_t nh = nout > nw ? (nout > nin ? nout : nin) : (nw > nin ? nw : nin);
    float *h = rand_dt(dt, nh, 1.0f);
    void *inp = dev_from(be, dt, h, nin), *w = be->alloc(3 * nw * es), *out = be->alloc(3 * nout * es);
    void *dout = be->alloc(3 * nout * es), *dw = be->alloc(3 * nw * es);
    for (int z = 0; z < 3; z++) {
        upload(be, dt, (char *)w + z * nw * es, h, nw);
        upload(be, dt, (char *)dout + z * nout * es, h, nout);
    }
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e[5];
    for (int i = 0; i < 5; i++) cudaEventCreate(&e[i]);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM + ITERS; i++) {
        if (i == WARM) cudaEventRecord(e[0], s);
        for (int z = 0; z < 3; z++)
            be->matmul_forward((char *)out + z * nout * es, inp, (char *)w + z * nw * es, N, D, HK);
    }
    cudaEventRecord(e[1], s);
    for (int i = 0; i < ITERS; i++) be->matmul_forward_batched(out, nout, inp, 0, w, nw, N, D, HK, 3);
    cudaEventRecord(e[2], s);
    for (int i = 0; i < ITERS; i++)
        for (int z = 0; z < 3; z++)
            be->matmul_backward(NULL, (char *)dw + z * nw * es, (char *)dout + z * nout * es, inp, NULL, N, D, HK, 0);
    cudaEventRecord(e[3], s);
    for (int i = 0; i < ITERS; i++) be->matmul_backward_weights_batched(dw, nw, dout, nout, inp, 0, N, D, HK, 3);
    cudaEventRecord(e[4], s);
    float t[4];
    for (int i = 0; i < 4; i++) t[i] = elapsed_ms(e[i], e[i + 1]) / ITERS;
    double flop = 3 * 2.0 * N * (double)D * HK;
    printf("PERF matmul q,k,v %s N=%d D=%d HK=%d: fwd 3 calls %.3f ms %.1f TFLOP/s, batched %.3f ms %.1f TFLOP/s | "
           "dW 3 calls %.3f ms %.1f TFLOP/s, batched %.3f ms %.1f TFLOP/s\n",
           dt_name(dt), N, D, HK, t[0], flop / t[0] * 1e-9, t[1], flop / t[1] * 1e-9, t[2], flop / t[2] * 1e-9, t[3],
           flop / t[3] * 1e-9);
    fflush(stdout);
    for (int i = 0; i < 5; i++) cudaEventDestroy(e[i]);
    FREE_SUB(be, inp, w, out, dout, dw);
    free(h);
}

// version: "flash" (attention_flash.cu's forward where the shape allows: the default),
// "fused" (attention_fused.cu where the shape allows) or "gemm" (attention.cu's cuBLASLt +
// softmax path for every shape).
static void perf_attention_version(const char *version, Dtype dt, int B, int H, int T, int DK, int use_bias,
                                   int use_mask, int causal, float p) {
    cuda_attention_set_fused(strcmp(version, "fused") == 0);
    cuda_attention_set_flash(strcmp(version, "flash") == 0);
    const Backend *be = backend_open("cuda", 0, dt);
    const size_t HD = (size_t)H * DK, n = (size_t)B * T * HD, natt = (size_t)B * H * T * T, nbias = (size_t)H * T * T;
    float *h = rand_dt(dt, n > natt ? n : natt, 0.6f);
    void *q = dev_from(be, dt, h, n), *k = dev_from(be, dt, h, n), *v = dev_from(be, dt, h, n), *dout = dev_from(be, dt, h, n);
    void *bias = use_bias ? dev_from(be, dt, h, nbias) : NULL, *dbias = use_bias ? be->alloc(nbias * dt_size(dt)) : NULL;
    void *out = be->alloc(n * dt_size(dt)), *att = be->alloc(natt * dt_size(dt));
    void *dq = be->alloc(n * dt_size(dt)), *dk = be->alloc(n * dt_size(dt)), *dv = be->alloc(n * dt_size(dt));
    int *mask_h = xmalloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) mask_h[(size_t)b * T + j] = j < T - (b % 17);
    int *mask = use_mask ? dev_ints(be, mask_h, (size_t)B * T) : NULL;
    DropoutArgs drop = {p, 42};
    cudaStream_t s = (cudaStream_t)cuda_stream();
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    enum { WARM = 3, ITERS = 20 };
    for (int i = 0; i < WARM; i++) {
        be->attention_forward(out, att, q, k, v, bias, mask, B, T, T, T, H, DK, causal, 0, drop);
        be->attention_backward(dq, dk, dv, dbias, dout, att, q, k, v, B, T, T, H, DK, drop, 0, 0, 0);
    }
    cudaEventRecord(e0, s);
    for (int i = 0; i < ITERS; i++)
        be->attention_forward(out, att, q, k, v, bias, mask, B, T, T, T, H, DK, causal, 0, drop);
    cudaEventRecord(e1, s);
    for (int i = 0; i < ITERS; i++)
        be->attention_backward(dq, dk, dv, dbias, dout, att, q, k, v, B, T, T, H, DK, drop, 0, 0, 0);
    cudaEventRecord(e2, s);
    float fwd = elapsed_ms(e0, e1) / ITERS, bwd = elapsed_ms(e1, e2) / ITERS;
    double flop = 4.0 * B * H * T * (double)T * DK;  // two GEMMs forward, four backward
    printf("PERF attention %s %s B=%d H=%d T=%d dk=%d%s%s%s p=%.1f: fwd %.3f ms (%.1f TFLOP/s) | bwd %.3f ms "
           "(%.1f TFLOP/s) | fwd+bwd %.3f ms\n",
           version, dt_name(dt), B, H, T, DK, use_bias ? " bias" : "", use_mask ? " mask" : "", causal ? " causal" : "", p,
           fwd, flop / fwd * 1e-9, bwd, 2 * flop / bwd * 1e-9, fwd + bwd);
    fflush(stdout);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    void *bufs[] = {q, k, v, dout, bias, dbias, out, att, dq, dk, dv, mask};
    for (int i = 0; i < 12; i++)
        if (bufs[i]) be->free(bufs[i]);
    free(h);
    free(mask_h);
    cuda_attention_set_fused(0);
    cuda_attention_set_flash(1);
}

static void perf_attention(Dtype dt, int B, int H, int T, int DK, int use_bias, int use_mask, int causal, float p) {
    perf_attention_version("flash", dt, B, H, T, DK, use_bias, use_mask, causal, p);
    perf_attention_version("fused", dt, B, H, T, DK, use_bias, use_mask, causal, p);
    perf_attention_version("gemm", dt, B, H, T, DK, use_bias, use_mask, causal, p);
}

// Generation's decoder step at t5-large, 64 items x 4 beams (N = 256 rows): attention_decode
// over the self-attention cache (capacity 127, position t, each row's beam table pointing at
// its item's beams) and over the encoder K/V (S keys per item, shared by its 4 beams), and
// kv_append's slot; back-to-back launches, as a replayed graph runs them.
static void perf_decode_attention(Dtype dt, int t, int S) {
    const Backend *be = backend_open("cuda", 0, dt);
    enum { ITEMS = 64, BEAMS = 4, N = ITEMS * BEAMS, H = 16, DK = 64, CAP = 127, ITERS = 50 };
    const size_t es = dt_size(dt), HK = (size_t)H * DK, nkv = (size_t)CAP * N * HK, nx = (size_t)ITEMS * S * HK;
    float *h = rand_dt(dt, nkv, 1.0f);
    void *kc = dev_from(be, dt, h, nkv), *vc = dev_from(be, dt, h, nkv), *ck = dev_from(be, dt, h, nx),
         *cv = dev_from(be, dt, h, nx), *q = dev_from(be, dt, h, (size_t)N * HK), *bias = dev_from(be, dt, h, (size_t)H * CAP);
    void *out = be->alloc((size_t)N * HK * es);
    int *tab = xmalloc((size_t)N * CAP * sizeof(int)), *mask = xmalloc((size_t)ITEMS * S * sizeof(int));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < CAP; j++) tab[i * CAP + j] = (i / BEAMS) * BEAMS + (int)(rng_u32() % BEAMS);
    for (int b = 0; b < ITEMS; b++)
        for (int j = 0; j < S; j++) mask[b * S + j] = j < S - (b % 8);
    int *tg = dev_ints(be, tab, (size_t)N * CAP), *mg = dev_ints(be, mask, (size_t)ITEMS * S), tpos = t;
    int *pg = dev_ints(be, &tpos, 1);
    KvView self = {kc, vc, 1, N, tg, CAP, 1, NULL, 0, pg};
    KvView cross = {ck, cv, S, 1, NULL, 0, BEAMS, mg, S, NULL};
    cudaStream_t st = (cudaStream_t)cuda_stream();
    cudaEvent_t e[4];
    for (int i = 0; i < 4; i++) cudaEventCreate(&e[i]);
    be->attention_decode(out, q, &self, bias, N, CAP, H, DK);
    be->attention_decode(out, q, &cross, NULL, N, S, H, DK);
    cudaEventRecord(e[0], st);
    for (int i = 0; i < ITERS; i++) be->attention_decode(out, q, &self, bias, N, CAP, H, DK);
    cudaEventRecord(e[1], st);
    for (int i = 0; i < ITERS; i++) be->attention_decode(out, q, &cross, NULL, N, S, H, DK);
    cudaEventRecord(e[2], st);
    for (int i = 0; i < ITERS; i++) be->kv_append(kc, vc, q, q, pg, (size_t)N * HK * es);
    cudaEventRecord(e[3], st);
    float us[3];
    for (int i = 0; i < 3; i++) us[i] = elapsed_ms(e[i], e[i + 1]) / ITERS * 1e3f;
    printf("PERF decode %s N=%d H=%d dk=%d: attention_decode self t=%d %.1f us (%.0f GB/s of K,V rows) | cross S=%d "
           "%.1f us | kv_append %.1f us\n", dt_name(dt), N, H, DK, t, us[0], 2.0 * N * (t + 1) * HK * es / us[0] * 1e-3,
           S, us[1], us[2]);
    fflush(stdout);
    for (int i = 0; i < 4; i++) cudaEventDestroy(e[i]);
    FREE_SUB(be, kc, vc, ck, cv, q, bias, out, tg, mg, pg);
    free(h), free(tab), free(mask);
}

static int env_on(const char *name) { return getenv(name) && strcmp(getenv(name), "0") != 0; }

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int perf_only = env_on("T5_TEST_PERF_ONLY");
    if (env_on("T5_TEST_NO_PERF") || env_on("T5_TEST_QUICK")) {
        printf("--- timings skipped (T5_TEST_NO_PERF or T5_TEST_QUICK is set)\n");
        return test_summary();
    }
    BF16 = backend_open("cuda", 0, DTYPE_BF16);
    if (perf_only) {  // attention first: a profiler can skip to it by launch count
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 1, 0, 0.1f);
        if (env_on("T5_TEST_PERF_ATTENTION")) {  // the other training shapes of t5-large too
            perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 0, 1, 0.1f);
            perf_attention(DTYPE_BF16, 64, 16, 128, 64, 0, 1, 0, 0.0f);
        }
        return test_summary();
    }
    if (env_on("T5_TEST_PERF_FP8")) {  // the fp8 linear against bf16 only (t5-large's linears, B=64)
        const int fp8_io[][2] = {{1024, 1024}, {1024, 4096}, {4096, 1024}, {1024, 3072}};
        for (int k = 0; k < 4; k++) perf_fp8(8192, fp8_io[k][0], fp8_io[k][1]);
        return test_summary();
    }
    if (env_on("T5_TEST_PERF_DECODE")) {  // generation's decoder step only (t5-large, 64 x 4 beams)
        perf_decode_attention(DTYPE_BF16, 16, 98);
        perf_decode_attention(DTYPE_BF16, 64, 98);
        perf_decode_attention(DTYPE_BF16, 120, 98);
        perf_decode_attention(DTYPE_F32, 64, 98);
        perf_residual_rmsnorm(DTYPE_BF16, 256, 1024);
        const int io[][2] = {{1024, 1024}, {1024, 3072}, {1024, 4096}, {4096, 1024}, {1024, 32128}};
        for (int k = 0; k < 5; k++) perf_matmul(DTYPE_BF16, 256, io[k][0], io[k][1]);
        perf_matmul_qkv(DTYPE_BF16, 256, 1024, 1024);
        perf_matmul(DTYPE_F32, 256, 1024, 1024);
        BF16->synchronize();
        return test_summary();
    }
    run_perf_pointwise_1();
    run_perf_pointwise_2();
    perf_residual_rmsnorm(DTYPE_BF16, 8192, 1024);  // t5-large B=64 x 128 tokens
    perf_residual_rmsnorm(DTYPE_BF16, 2048, 1024);  // B=16
    if (!env_on("T5_GEMM_FALLBACK")) {
        perf_matmul(DTYPE_BF16, 8192, 1024, 4096);
        perf_matmul(DTYPE_BF16, 8192, 4096, 1024);
        perf_matmul(DTYPE_F16, 8192, 1024, 4096);
        perf_matmul_qkv(DTYPE_BF16, 8192, 1024, 1024);  // t5-large B=64 x 128 tokens
        perf_matmul_qkv(DTYPE_BF16, 2048, 1024, 1024);  // B=16
        const int fp8_io[][2] = {{1024, 1024}, {1024, 4096}, {4096, 1024}, {1024, 3072}};  // t5-large's linears
        for (int k = 0; k < 4; k++) perf_fp8(8192, fp8_io[k][0], fp8_io[k][1]);
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 1, 0, 0.1f);  // encoder self-attention, training
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 1, 0, 1, 0.1f);  // decoder self-attention, training
        perf_attention(DTYPE_BF16, 64, 16, 128, 64, 0, 1, 0, 0.0f);  // cross-attention, no dropout
        perf_attention(DTYPE_BF16, 16, 32, 128, 128, 1, 1, 0, 0.1f);  // t5-3b encoder self-attention
    }
    BF16->synchronize();
    return test_summary();
}
