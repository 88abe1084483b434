// kernels/cuda/profile.cu: the op profiler (backend_registry.h backend_profile_wrap): a
// Backend whose every op calls the real CUDA backend's, bracketed by a pair of CUDA events
// on the stream. Events are recorded, not waited for, so the step runs as it would (one
// stream, same launches); backend_profile_report synchronizes once, reads each pair's
// elapsed time and sums them per op and shape (a matrix product's N x I -> O, an
// attention's B, H, Tq, Tk, an elementwise op's length) and per class. The GPU is busy
// during the ops; "idle (launch gaps)" is the steps' wall time minus the ops' sum: time
// the GPU waited for the host (launch overhead, host work, synchronizations).
// A class is what the op is for: GEMMs, the LM head's GEMMs (O or I = the vocabulary),
// attention (score/value GEMMs, permutes and softmax inside), norms, elementwise and
// residual, memsets, copies, cross-entropy, optimizer (the fp8 linears count as GEMMs, their
// rounding passes included, and with them the ReLU of fp8_relu_drop_matmul_*;
// fp8_scales_update as optimizer). Event overhead: about 1-2 us of
// host time per op, so "idle" reads a little high under the profiler.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend_registry.h"
#include "common.cuh"

enum {
    PC_GEMM = 0, PC_LM_HEAD, PC_ATTENTION, PC_NORM, PC_ELEMENTWISE, PC_EMBED_BIAS, PC_MEMSET, PC_COPY, PC_CE,
    PC_OPTIMIZER, PC_SEARCH, PC_COUNT
};
static const char *const PC_NAMES[PC_COUNT] = {
    "GEMM (linear layers)", "LM head GEMMs", "attention (GEMMs, permutes, softmax)", "RMSNorm",
    "elementwise, residual, dropout, activation", "embedding, position bias", "memsets", "copies (host<->device, rows)",
    "cross-entropy", "optimizer (AdamW, norms)", "generation search"};

typedef struct {
    char key[112];
    int cls;
    double ms;
    long calls;
} ProfRow;

typedef struct {
    cudaEvent_t a, b;
    int row;
} ProfRec;

static struct {
    const Backend *real;
    Backend wrapped;
    int vocab;
    ProfRow *rows;
    int nrows, cap_rows;
    ProfRec *recs;
    size_t nrec, cap_rec, made;  // made: events created so far (reused after a report)
} P;

static int prof_row(const char *key, int cls) {
    for (int i = 0; i < P.nrows; i++)
        if (P.rows[i].cls == cls && strcmp(P.rows[i].key, key) == 0) return i;
    if (P.nrows == P.cap_rows) {
        P.cap_rows = P.cap_rows ? 2 * P.cap_rows : 256;
        P.rows = (ProfRow *)reallocCheck(P.rows, (size_t)P.cap_rows * sizeof(ProfRow));
    }
    ProfRow *r = &P.rows[P.nrows];
    memset(r, 0, sizeof *r);
    snprintf(r->key, sizeof r->key, "%s", key);
    r->cls = cls;
    return P.nrows++;
}

static size_t prof_begin(int cls, const char *fmt, ...) {
    char key[112];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    if (P.nrec == P.cap_rec) {
        P.cap_rec = P.cap_rec ? 2 * P.cap_rec : 4096;
        P.recs = (ProfRec *)reallocCheck(P.recs, P.cap_rec * sizeof(ProfRec));
    }
    ProfRec *r = &P.recs[P.nrec];
    if (P.nrec == P.made) {
        cudaCheck(cudaEventCreate(&r->a));
        cudaCheck(cudaEventCreate(&r->b));
        P.made++;
    }
    r->row = prof_row(key, cls);
    cudaCheck(cudaEventRecord(r->a, t5_stream()));
    return P.nrec++;
}
static void prof_end(size_t i) { cudaCheck(cudaEventRecord(P.recs[i].b, t5_stream())); }

#define PROF(cls, call, ...)                       \
    do {                                           \
        size_t i_ = prof_begin(cls, __VA_ARGS__);  \
        call;                                      \
        prof_end(i_);                              \
    } while (0)

// ---- the wrappers: one per op ----------------------------------------------------------------
static void w_zero(void *p, size_t bytes) { PROF(PC_MEMSET, P.real->zero(p, bytes), "zero %zu B", bytes); }
static void w_to_device(void *d, const void *h, size_t bytes) {
    PROF(PC_COPY, P.real->to_device(d, h, bytes), "to_device %zu B", bytes);
}
static void w_to_host(void *h, const void *d, size_t bytes) {
    PROF(PC_COPY, P.real->to_host(h, d, bytes), "to_host %zu B", bytes);
}
static void w_embedding_forward(void *out, const int *ids, const void *table, int N, int D) {
    PROF(PC_EMBED_BIAS, P.real->embedding_forward(out, ids, table, N, D), "embedding_forward N=%d D=%d", N, D);
}
static void w_embedding_backward(void *dt, const void *dout, const int *ids, int N, int D) {
    PROF(PC_EMBED_BIAS, P.real->embedding_backward(dt, dout, ids, N, D), "embedding_backward N=%d D=%d", N, D);
}
static void w_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, int N, int D, float eps) {
    PROF(PC_NORM, P.real->rmsnorm_forward(out, rstd, inp, w, N, D, eps), "rmsnorm_forward N=%d D=%d", N, D);
}
static void w_rmsnorm_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                               const float *rstd, int N, int D) {
    PROF(PC_NORM, P.real->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, D), "rmsnorm_backward N=%d D=%d", N, D);
}
static void w_rmsnorm_backward_dropout(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                                       const float *rstd, int N, int D, void *dnext, DropoutArgs drop) {
    PROF(PC_NORM, P.real->rmsnorm_backward_dropout(dinp, dw, dout, inp, w, rstd, N, D, dnext, drop),
         "rmsnorm_backward+dropout N=%d D=%d", N, D);
}
static void w_residual_rmsnorm_forward(void *xo, void *out, float *rstd, const void *y, const void *xi, const void *w,
                                       int N, int D, float eps, DropoutArgs drop) {
    PROF(PC_NORM, P.real->residual_rmsnorm_forward(xo, out, rstd, y, xi, w, N, D, eps, drop),
         "residual+rmsnorm_forward N=%d D=%d%s", N, D, drop.p > 0 ? " dropout" : "");
}
static int gemm_class(int I, int O) { return O == P.vocab || I == P.vocab ? PC_LM_HEAD : PC_GEMM; }
static void w_matmul_forward(void *out, const void *inp, const void *w, int N, int I, int O) {
    PROF(gemm_class(I, O), P.real->matmul_forward(out, inp, w, N, I, O), "matmul_forward %dx%d->%d", N, I, O);
}
static void w_matmul_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w, int N, int I,
                              int O, int dinp_set) {
    PROF(gemm_class(I, O), P.real->matmul_backward(dinp, dw, dout, inp, w, N, I, O, dinp_set),
         "matmul_backward %dx%d->%d%s%s", N, I, O, dinp ? (dinp_set ? " dinp=" : " dinp+=") : "", dw ? " dw" : "");
}
static void w_matmul_forward_batched(void *out, size_t os, const void *inp, size_t is, const void *w, size_t ws,
                                     int N, int I, int O, int batch) {
    PROF(gemm_class(I, O), P.real->matmul_forward_batched(out, os, inp, is, w, ws, N, I, O, batch),
         "matmul_forward_batched %d x %dx%d->%d", batch, N, I, O);
}
static void w_matmul_backward_weights_batched(void *dw, size_t dws, const void *dout, size_t ds, const void *inp,
                                              size_t is, int N, int I, int O, int batch) {
    PROF(gemm_class(I, O), P.real->matmul_backward_weights_batched(dw, dws, dout, ds, inp, is, N, I, O, batch),
         "matmul_backward_weights_batched %d x %dx%d->%d dw", batch, N, I, O);
}
// fp8: the rounding passes (and, at s.current, the amax passes) are inside the op's time
static void w_fp8_matmul_forward(void *out, size_t os, const void *inp, const void *w, size_t ws, int N, int I, int O,
                                 int count, Fp8Scales s) {
    char batch[24] = "";
    if (count > 1) snprintf(batch, sizeof batch, "%d x ", count);
    PROF(gemm_class(I, O), P.real->fp8_matmul_forward(out, os, inp, w, ws, N, I, O, count, s),
         "fp8_matmul_forward %s%dx%d->%d%s", batch, N, I, O, s.current ? " current" : "");
}
static void w_fp8_matmul_backward(void *dinp, void *dw, const void *dout, const void *inp, const void *w, int N, int I,
                                  int O, int dinp_set, Fp8Scales s) {
    PROF(gemm_class(I, O), P.real->fp8_matmul_backward(dinp, dw, dout, inp, w, N, I, O, dinp_set, s),
         "fp8_matmul_backward %dx%d->%d%s%s%s", N, I, O, dinp ? (dinp_set ? " dinp=" : " dinp+=") : "",
         dw ? " dw" : "", s.current ? " current" : "");
}
static void w_fp8_relu_drop_matmul_forward(void *out, uint8_t *bits, const void *a, const void *w, int N, int I, int O,
                                           DropoutArgs drop, Fp8Scales s) {
    PROF(gemm_class(I, O), P.real->fp8_relu_drop_matmul_forward(out, bits, a, w, N, I, O, drop, s),
         "fp8_relu_drop_matmul_forward %dx%d->%d%s%s", N, I, O, drop.p > 0.0f ? " +dropout" : "",
         s.current ? " current" : "");
}
static void w_fp8_relu_drop_matmul_backward(void *dinp, void *dw, const void *dh, const uint8_t *bits, const void *inp,
                                            const void *w, int N, int I, int O, int dinp_set, DropoutArgs drop,
                                            Fp8Scales s) {
    PROF(gemm_class(I, O),
         P.real->fp8_relu_drop_matmul_backward(dinp, dw, dh, bits, inp, w, N, I, O, dinp_set, drop, s),
         "fp8_relu_drop_matmul_backward %dx%d->%d%s%s%s%s", N, I, O, dinp ? (dinp_set ? " dinp=" : " dinp+=") : "",
         dw ? " dw" : "", drop.p > 0.0f ? " +dropout" : "", s.current ? " current" : "");
}
static void w_fp8_scales_update(float *scale, float *inv, float *amax, float *history, int n, int hist_len, int col,
                                int margin) {
    PROF(PC_OPTIMIZER, P.real->fp8_scales_update(scale, inv, amax, history, n, hist_len, col, margin),
         "fp8_scales_update %d x %d entries", n, FP8_OPERANDS);
}
static void w_position_bias_forward(void *bias, const void *table, int Tq, int Tk, int H, int qo, int nb, int md,
                                    int bi) {
    PROF(PC_EMBED_BIAS, P.real->position_bias_forward(bias, table, Tq, Tk, H, qo, nb, md, bi),
         "position_bias_forward %dx%d H=%d", Tq, Tk, H);
}
static void w_position_bias_backward(void *dt, const void *db, int Tq, int Tk, int H, int qo, int nb, int md,
                                     int bi) {
    PROF(PC_EMBED_BIAS, P.real->position_bias_backward(dt, db, Tq, Tk, H, qo, nb, md, bi),
         "position_bias_backward %dx%d H=%d", Tq, Tk, H);
}
static void w_attention_forward(void *out, void *att, const void *q, const void *k, const void *v, const void *bias,
                                const int *mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                                int qo, DropoutArgs drop) {
    PROF(PC_ATTENTION,
         P.real->attention_forward(out, att, q, k, v, bias, mask, B, Tq, Tk, kv_rows, H, dk, causal, qo, drop),
         "attention_forward B=%d H=%d %dx%d%s", B, H, Tq, Tk, drop.p > 0 ? " dropout" : "");
}
static void w_attention_backward(void *dq, void *dk, void *dv, void *dbias, const void *dout, const void *att,
                                 const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                                 DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv) {
    PROF(PC_ATTENTION,
         P.real->attention_backward(dq, dk, dv, dbias, dout, att, q, k, v, B, Tq, Tk, H, d_kv, drop, dqkv_set, ld_dq,
                                    ld_dkv),
         "attention_backward B=%d H=%d %dx%d%s", B, H, Tq, Tk, drop.p > 0 ? " dropout" : "");
}
static void w_ffn_act_forward(void *out, const void *a, const void *b, size_t n, Activation act, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->ffn_act_forward(out, a, b, n, act, drop), "ffn_act_forward n=%zu%s", n,
         drop.p > 0 ? " +dropout" : "");
}
static void w_relu_drop_forward(void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->relu_drop_forward(out, bits, a, n, drop), "relu_drop_forward n=%zu%s%s", n,
         bits ? " +bits" : "", drop.p > 0.0f ? " +dropout" : "");
}
static void w_relu_drop_backward(void *da, const void *dout, const uint8_t *bits, size_t n, DropoutArgs drop, int set) {
    PROF(PC_ELEMENTWISE, P.real->relu_drop_backward(da, dout, bits, n, drop, set), "relu_drop_backward n=%zu%s", n,
         drop.p > 0.0f ? " +dropout" : "");
}
static void w_ffn_act_backward(void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                               Activation act, DropoutArgs drop, int set) {
    PROF(PC_ELEMENTWISE, P.real->ffn_act_backward(da, db, dout, a, b, n, act, drop, set), "ffn_act_backward n=%zu%s", n,
         drop.p > 0 ? " +dropout" : "");
}
static void w_add(void *out, const void *a, const void *b, size_t n) {
    PROF(PC_ELEMENTWISE, P.real->add(out, a, b, n), "add n=%zu", n);
}
static void w_axpy(void *y, const void *x, float alpha, size_t n) {
    PROF(PC_ELEMENTWISE, P.real->axpy(y, x, alpha, n), "axpy n=%zu", n);
}
static void w_scale(void *out, const void *inp, float alpha, size_t n) {
    PROF(PC_ELEMENTWISE, P.real->scale(out, inp, alpha, n), "scale n=%zu", n);
}
static void w_dropout_forward(void *out, const void *inp, size_t n, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->dropout_forward(out, inp, n, drop), "dropout_forward n=%zu%s", n,
         drop.p > 0 ? "" : " (p=0)");
}
static void w_dropout_backward(void *dinp, const void *dout, size_t n, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->dropout_backward(dinp, dout, n, drop), "dropout_backward n=%zu%s", n,
         drop.p > 0 ? "" : " (p=0: add)");
}
static void w_dropout_add(void *out, const void *y, const void *x, size_t n, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->dropout_add(out, y, x, n, drop), "dropout_add n=%zu%s", n, drop.p > 0 ? "" : " (p=0)");
}
static void w_dropout_add_guard(void *out, const void *y, const void *x, size_t n, DropoutArgs drop) {
    PROF(PC_ELEMENTWISE, P.real->dropout_add_guard(out, y, x, n, drop), "dropout_add_guard n=%zu%s", n,
         drop.p > 0 ? "" : " (p=0)");
}
static void w_clamp(void *x, size_t n) { PROF(PC_ELEMENTWISE, P.real->clamp_fp16_overflow(x, n), "clamp_fp16 n=%zu", n); }
static double w_ce(void *dl, const void *l, const int *labels, int N, int V, float ls, float dloss) {
    double r = 0;
    PROF(PC_CE, r = P.real->crossentropy_forward_backward(dl, l, labels, N, V, ls, dloss), "crossentropy N=%d V=%d%s",
         N, V, dl ? " +grad" : "");
    return r;
}
static double w_sumsq(const void *g, size_t n) {
    double r = 0;
    PROF(PC_OPTIMIZER, r = P.real->sumsq(g, n), "sumsq n=%zu", n);
    return r;
}
static float w_tensor_norm(const void *g, size_t n) {
    float r = 0;
    PROF(PC_OPTIMIZER, r = P.real->tensor_norm(g, n), "tensor_norm");
    return r;
}
static void w_tensor_norms(float *out, const void *g, const size_t *offsets, const size_t *counts, int n) {
    PROF(PC_OPTIMIZER, P.real->tensor_norms(out, g, offsets, counts, n), "tensor_norms %d tensors", n);
}
static void w_adamw(float *master, void *po, const void *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, float gs, int step) {
    PROF(PC_OPTIMIZER, P.real->adamw_update(master, po, g, m, v, n, lr, b1, b2, eps, wd, gs, step), "adamw_update");
}
static void w_beam_topk(float *os, int *oi, const void *l, const float *bs, int B, int beams, int V, int K) {
    PROF(PC_SEARCH, P.real->beam_topk(os, oi, l, bs, B, beams, V, K), "beam_topk B=%d beams=%d", B, beams);
}
static void w_table_reorder(int *d, const int *s, const int *sr, int N, int cap, int t) {
    PROF(PC_SEARCH, P.real->beam_table_reorder(d, s, sr, N, cap, t), "beam_table_reorder N=%d", N);
}
static void w_attention_decode(void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk, int H,
                               int dk) {
    PROF(PC_ATTENTION, P.real->attention_decode(out, q, kv, bias, N, Tk, H, dk), "attention_decode N=%d H=%d %s", N, H,
         kv->table ? "self (beam table)" : "cross");
}
static void w_kv_append(void *kc, void *vc, const void *kn, const void *vn, const int *pos, size_t slot_bytes) {
    PROF(PC_ATTENTION, P.real->kv_append(kc, vc, kn, vn, pos, slot_bytes), "kv_append %zu bytes", slot_bytes);
}
static void w_qkv_append(void *q, void *kc, void *vc, const void *qkv, const int *pos, size_t rows, size_t part) {
    PROF(PC_ATTENTION, P.real->qkv_append(q, kc, vc, qkv, pos, rows, part), "qkv_append %zu x 3 x %zu bytes", rows, part);
}

extern "C" const Backend *backend_profile_wrap(const Backend *be, int vocab) {
    if (!be->device_memory) t5_fail("the op profiler times CUDA ops; backend %s is not a CUDA backend", be->name);
    P.real = be;
    P.vocab = vocab;
    Backend w = *be;  // allocation, limits and the names stay the real backend's
    w.zero = w_zero, w.to_device = w_to_device, w.to_host = w_to_host;
    w.embedding_forward = w_embedding_forward, w.embedding_backward = w_embedding_backward;
    w.rmsnorm_forward = w_rmsnorm_forward, w.rmsnorm_backward = w_rmsnorm_backward;
    w.rmsnorm_backward_dropout = w_rmsnorm_backward_dropout;
    w.residual_rmsnorm_forward = w_residual_rmsnorm_forward;
    w.matmul_forward = w_matmul_forward, w.matmul_backward = w_matmul_backward;
    w.matmul_forward_batched = w_matmul_forward_batched;
    w.matmul_backward_weights_batched = w_matmul_backward_weights_batched;
    w.fp8_matmul_forward = w_fp8_matmul_forward, w.fp8_matmul_backward = w_fp8_matmul_backward;
    w.fp8_scales_update = w_fp8_scales_update;
    w.fp8_relu_drop_matmul_forward = w_fp8_relu_drop_matmul_forward;
    w.fp8_relu_drop_matmul_backward = w_fp8_relu_drop_matmul_backward;
    w.position_bias_forward = w_position_bias_forward, w.position_bias_backward = w_position_bias_backward;
    w.attention_forward = w_attention_forward, w.attention_backward = w_attention_backward;
    w.ffn_act_forward = w_ffn_act_forward, w.ffn_act_backward = w_ffn_act_backward;
    w.relu_drop_forward = w_relu_drop_forward, w.relu_drop_backward = w_relu_drop_backward;
    w.add = w_add, w.axpy = w_axpy, w.scale = w_scale;
    w.dropout_forward = w_dropout_forward, w.dropout_backward = w_dropout_backward, w.clamp_fp16_overflow = w_clamp;
    w.dropout_add = w_dropout_add;
    w.dropout_add_guard = w_dropout_add_guard;
    w.crossentropy_forward_backward = w_ce, w.sumsq = w_sumsq, w.tensor_norm = w_tensor_norm, w.tensor_norms = w_tensor_norms,
    w.adamw_update = w_adamw;
    w.beam_topk = w_beam_topk, w.beam_table_reorder = w_table_reorder, w.attention_decode = w_attention_decode;
    w.kv_append = w_kv_append;
    w.qkv_append = w_qkv_append;
    // no graphs under the profiler: its event pairs time each op as it runs, a replay has none
    w.graph_begin = NULL, w.graph_end = NULL, w.graph_replay = NULL, w.graph_free = NULL;
    // nor a side stream: an op overlapping others would count its time twice (the update then
    // runs in place, after the step's backward, zero/update_async.c)
    w.side_begin = NULL, w.side_end = NULL, w.side_mark = NULL, w.wait_mark = NULL;
    P.wrapped = w;
    return &P.wrapped;
}

static int row_by_ms(const void *a, const void *b) {
    double x = ((const ProfRow *)a)->ms, y = ((const ProfRow *)b)->ms;
    return (x < y) - (x > y);
}

extern "C" void backend_profile_report(FILE *f, double wall_ms, int steps, int top) {
    cudaCheck(cudaStreamSynchronize(t5_stream()));
    for (size_t i = 0; i < P.nrec; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, P.recs[i].a, P.recs[i].b));
        P.rows[P.recs[i].row].ms += ms;
        P.rows[P.recs[i].row].calls++;
    }
    double cls_ms[PC_COUNT] = {0}, busy = 0;
    long cls_calls[PC_COUNT] = {0};
    for (int i = 0; i < P.nrows; i++) {
        cls_ms[P.rows[i].cls] += P.rows[i].ms;
        cls_calls[P.rows[i].cls] += P.rows[i].calls;
        busy += P.rows[i].ms;
    }
    const double per = 1.0 / (steps > 0 ? steps : 1), wall = wall_ms * per;
    fprintf(f, "profile: %d step%s, %.2f ms a step (wall), ops busy %.2f ms, idle %.2f ms\n", steps, steps == 1 ? "" : "s",
           wall, busy * per, wall - busy * per);
    fprintf(f, "| class | ms / step | share of the step | calls / step |\n|---|---|---|---|\n");
    for (int c = 0; c < PC_COUNT; c++)
        if (cls_calls[c])
            fprintf(f, "| %s | %.2f | %.1f%% | %ld |\n", PC_NAMES[c], cls_ms[c] * per, 100.0 * cls_ms[c] * per / wall,
                   (long)(cls_calls[c] * per));
    fprintf(f, "| idle (launch gaps, host work, waits) | %.2f | %.1f%% | |\n", wall - busy * per,
           100.0 * (wall - busy * per) / wall);
    qsort(P.rows, (size_t)P.nrows, sizeof(ProfRow), row_by_ms);
    fprintf(f, "top %d ops by time (op and shape | ms / step | calls / step | us / call):\n", top);
    for (int i = 0; i < P.nrows && i < top; i++)
        fprintf(f, "  %-64s %8.3f %6ld %9.1f\n", P.rows[i].key, P.rows[i].ms * per, (long)(P.rows[i].calls * per),
               P.rows[i].calls ? 1e3 * P.rows[i].ms / P.rows[i].calls : 0.0);
    P.nrows = 0;
    P.nrec = 0;
}
