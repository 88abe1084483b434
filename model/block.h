// model/block.h: the T5 blocks and their sublayers (self-attention, cross-attention,
// feed-forward), forward and backward, written once. The training forward and backward
// (model/t5.c) and the incremental decoder of generation (model/kv_decoder.c) both call
// these; only where keys/values come from differs (computed here, or a KV cache).
// Internal to model/.
//
// Letters as in t5.h: B batch rows, Tq query positions, Tk key positions, D d_model,
// HK inner attention width, F d_ff, cap cache positions per row.
#pragma once
#include "t5.h"

// Dropout sites: each dropout call gets its own seed, a hash of (step seed, site).
enum { SITE_EMBED = 0, SITE_ATT, SITE_ATT_OUT, SITE_FFN_HIDDEN, SITE_FFN_OUT, SITE_FINAL, SITE_COUNT };
// stack: 0 encoder, 1 decoder; layer: block index (0 for stack-level sites); sub: sublayer
// index within the block. p is m->dropout_p (0: every dropout is the identity).
DropoutArgs t5_site_dropout(const T5Model *m, int stack, int layer, int sub, int site);

// Buffers a forward sublayer writes besides its saved activations (n = B*Tq rows).
typedef struct {
    void *ln_out;    // (n,D) the sublayer's RMS norm output
    float *ln_rstd;  // (n)
    void *ffn_h;     // (n,F) FFN hidden state act(a) [* b], after dropout
    void *proj;      // (n,D) output projection before the residual add; NULL: written into
                     // x_out directly (x_out must then not be x_in)
} SublayerScratch;

// Keys and values kept across decoding steps (generation, one query per row): where the
// attention reads them (a KvView, kernels/backend.h) and, for self-attention, where this
// step's keys and values go.
typedef struct {
    KvView view;             // keys/values of positions 0..len-1 of every row
    int len;                 // positions attended over after this step
    void *append_k, *append_v;  // (rows, HK): this step's keys / values are projected straight
                                // here (the cache slot of position len-1); NULL: the cache is
                                // complete (cross-attention K/V). With view.pos set (the step's
                                // position in device memory, a graph-replayed step) they are
                                // staging buffers that kv_append copies into the position-major
                                // cache view.k / view.v at *view.pos, and len is the capacity
    void *append_qkv;           // (rows, 3 HK) or NULL; with view.pos, when the q, k, v weights lie
                                // one after the other: q, k, v by one GEMM here, split by qkv_append
                                // into q and the cache at *view.pos (append_k / append_v unused)
} KvCache;

// What the block code sees of the model: the backend and config, the units' weights and
// gradients (wherever they are now: t5_view_param, t5_view_grad), the rows of the batch (or
// of its window), this micro-step's dropout, the shared scratch and the test knobs; never
// the activation arena, which callers pass slot by slot. t5_block_view makes one from the
// model at the call (the rows and the window change between calls).
typedef struct {
    const Backend *be;
    const T5Config *cfg;
    const ParamLayout *lay;
    size_t elem;                           // bytes per element of act_dtype
    void *const *unit_params, *const *unit_grads;  // (lay->n_units) as T5Model's
    int B;                                 // rows (T5Model.B: the window's with sub-batches)
    float dropout_p;
    uint64_t dropout_seed;
    int win_on, win_i0;                    // the sub-batch window (T5Window), for the masks
    T5Scratch *scratch;
    T5TestKnobs *test;
    const struct T5Fp8 *fp8;               // the fp8 scaling state in a training step, else NULL
} T5BlockView;

static inline T5BlockView t5_block_view(T5Model *m) {
    T5BlockView v = {m->be, &m->cfg, &m->lay, m->elem, m->unit_params, m->unit_grads, m->B, m->dropout_p,
                     m->dropout_seed, m->win.on, m->win.i0, &m->scratch, &m->test, m->fp8_training ? m->fp8 : NULL};
    return v;
}
// t5_param / t5_grad through a view.
static inline void *t5_view_param(const T5BlockView *v, size_t off) {
    int u = params_unit_of(v->lay, off);
    return (char *)v->unit_params[u] + (off - v->lay->units[u].lo) * v->elem;
}
static inline void *t5_view_grad(const T5BlockView *v, size_t off) {
    int u = params_unit_of(v->lay, off);
    return (char *)v->unit_grads[u] + (off - v->lay->units[u].lo) * v->elem;
}
// t5_site_dropout through a view.
DropoutArgs t5_view_dropout(const T5BlockView *v, int stack, int layer, int sub, int site);

// The training scratch: the model's shared norm buffers and FFN hidden buffer.
static inline SublayerScratch t5_train_scratch(T5Scratch *sc) {
    SublayerScratch s = {sc->ln_out, sc->ln_rstd, sc->tmp_f, NULL};
    return s;
}

// The RMS norm of a sublayer into s->ln_out / s->ln_rstd (n rows).
void t5_sublayer_norm(const T5BlockView *v, const SublayerScratch *s, size_t ln_weight, const void *x_in, int n);

// x_out = x_in + dropout(o(attn(norm(x_in)))). Keys and values: cache != NULL (Tq must
// be 1): from the cache through attention_decode (this step's projected into
// cache->append_k / append_v first when set; key_mask and causal unused: the view has the
// mask, and a cache holds only past positions); else projected into a->k, a->v from
// kv_src (B,Tk,D) (cross-attention) or, kv_src NULL, from the normed input (self), and
// attention_forward. bias (H,Tq,Tk) or NULL; key_mask (B,Tk) or NULL; causal: key j
// visible to query i when j <= i.
void t5_attn_sublayer_forward(const T5BlockView *v, const SublayerScratch *s, const AttnOffsets *w, AttnActs *a,
                              const void *x_in, void *x_out, int B, int Tq, const void *kv_src, int Tk,
                              KvCache *cache, const void *bias, const int *key_mask, int causal, int stack,
                              int layer, int sub);
// x_out = x_in + dropout(wo(dropout(act(wi x) [* wi_1 x]))), x = norm(x_in).
void t5_ffn_sublayer_forward(const T5BlockView *v, const SublayerScratch *s, const FfnOffsets *w, FfnActs *a,
                             const void *x_in, void *x_out, int B, int Tq, int stack, int layer, int sub);

// One encoder block of the training forward: x[0] -> x[1] -> x[2] (enc_x[2l..2l+2], each
// (B,S,D)); a: its saved activations; bias (H,S,S) the stack's position bias; mask (B,S).
void t5_enc_block_forward(const T5BlockView *v, int l, BlockActs *a, void *const *x, int S, const void *bias,
                          const int *mask);
// One decoder block: x[0] -> x[1] -> x[2] -> x[3], each (B,T,D) (generation passes one
// buffer four times with a scratch proj). self_cache / cross_cache NULL: training (keys
// from the block's input and from enc_out (B,S,D)); else generation's caches (enc_out
// unused). bias (H,T,T or cache len) of the self-attention; enc_mask (B,S).
void t5_dec_block_forward(const T5BlockView *v, const SublayerScratch *s, int l, BlockActs *a, void *const *x, int B, int T,
                          const void *enc_out, int S, const void *bias, const int *enc_mask, KvCache *self_cache,
                          KvCache *cross_cache);

// Backward of the sublayers (training; model buffers). dx: (B,Tq,D) gradient of x_out,
// becomes the gradient of x_in. d_kv_src: gradient of the encoder output for
// cross-attention, else NULL.
// next: the output dropout of the sublayer whose backward comes next (or the embedding's),
// or NULL: the norm backward also writes that branch's input, dropout(dx), into d_tmp_d
// (t5_norm_backward), sparing the next sublayer a pass over dx.
void t5_attn_sublayer_backward(const T5BlockView *v, const AttnOffsets *w, const AttnActs *a, const void *x_in, void *dx,
                               int Tq, const void *kv_src, void *d_kv_src, int Tk, void *dbias, int stack, int layer,
                               int sub, const DropoutArgs *next);
void t5_ffn_sublayer_backward(const T5BlockView *v, const FfnOffsets *w, const FfnActs *a, const void *x_in, void *dx, int Tq,
                              int stack, int layer, int sub, const DropoutArgs *next);

// d_tmp_d = dropout(dx) (n elements) for the branch whose backward starts: already there
// when the norm backward before it wrote exactly that (m->scratch.d_tmp_valid), else one pass.
void t5_branch_grad(const T5BlockView *v, const void *dx, size_t n, DropoutArgs drop);
// rmsnorm_backward into dx; with next (and fusion on) also d_tmp_d = dropout(next) of the
// updated dx, recorded for t5_branch_grad.
void t5_norm_backward(const T5BlockView *v, void *dx, void *dweight, const void *dout, const void *x_in, const void *weight,
                      const float *rstd, int n, const DropoutArgs *next);
