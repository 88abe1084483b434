// model/block.c: the T5 blocks and their sublayers, forward and backward (see block.h).
// One implementation for training (model/t5.c) and generation (model/kv_decoder.c): the
// decoder step of generation is this forward with Tq = 1, dropout off, and keys/values
// from a KV cache, so the two cannot drift apart.
#include "block.h"

#include "../common/check.h"
#include "../kernels/dropout_rng.h"

static DropoutArgs site_dropout(float p, uint64_t seed, int win_on, int win_i0, int stack, int layer, int sub,
                                int site) {
    DropoutArgs d;
    d.p = p;
    uint64_t id = ((((uint64_t)stack * 4096 + (uint64_t)layer) * 4 + (uint64_t)sub) * SITE_COUNT) + (uint64_t)site;
    // a window of the batch (checkpointing in sub-batches) draws its own masks: the mask
    // index restarts at 0 in each window, the window's first row tells them apart
    if (win_on) id ^= ((uint64_t)win_i0 + 1) << 40;
    d.seed = dropout_rng_mix64(seed ^ dropout_rng_mix64(id + DROPOUT_RNG_GAMMA));
    return d;
}

DropoutArgs t5_site_dropout(const T5Model *m, int stack, int layer, int sub, int site) {
    return site_dropout(m->dropout_p, m->dropout_seed, m->win.on, m->win.i0, stack, layer, sub, site);
}

DropoutArgs t5_view_dropout(const T5BlockView *v, int stack, int layer, int sub, int site) {
    return site_dropout(v->dropout_p, v->dropout_seed, v->win_on, v->win_i0, stack, layer, sub, site);
}

// The RMS norm of a sublayer. Forward calls it; when the outputs are not kept
// (T5Model.keep_sublayer_acts off: the memory plan has no room) backward calls it again
// (into the model's shared v->scratch->ln_out) right before the weight gradients that read its
// output: the same kernel on the same input and weight gives the same bits. The rerun is
// one memory-bound pass (read x, write out: 34 MB at t5-large B=64, 12 us on the H200;
// 1.5 ms for the 120 sublayers of a 95 ms step) and saves keeping 120 outputs (1.9 GB).
void t5_sublayer_norm(const T5BlockView *v, const SublayerScratch *s, size_t ln_weight, const void *x_in, int n) {
    const T5Config *c = v->cfg;
    v->be->rmsnorm_forward(s->ln_out, s->ln_rstd, x_in, t5_view_param(v, ln_weight), n, c->d_model, c->layer_norm_epsilon);
}

// x_out = x_in + dropout(y) (y (n,D) is left as it was unless it is x_out); HF T5Block's fp16 guard.
static void residual_add(const T5BlockView *v, void *x_out, void *y, const void *x_in, size_t nD, DropoutArgs drop) {
    const Backend *be = v->be;
    be->dropout_add_guard(x_out, y, x_in, nD, drop);  // one pass (+ a clamp launch in fp16)
}

// Project keys and values of nk rows into k_out, v_out.
static void attn_project_kv(const T5BlockView *v, const SublayerScratch *s, const AttnOffsets *w, void *k_out, void *v_out,
                            const void *kv_src, int nk) {
    const Backend *be = v->be;
    int D = v->cfg->d_model, HK = t5_config_inner_dim(v->cfg);
    const void *src = kv_src ? kv_src : s->ln_out;
    be->matmul_forward(k_out, src, t5_view_param(v, w->k), nk, D, HK);
    be->matmul_forward(v_out, src, t5_view_param(v, w->v), nk, D, HK);
}

void t5_attn_sublayer_forward(const T5BlockView *v, const SublayerScratch *s, const AttnOffsets *w, AttnActs *a,
                              const void *x_in, void *x_out, int B, int Tq, const void *kv_src, int Tk,
                              KvCache *cache, const void *bias, const int *key_mask, int causal, int stack,
                              int layer, int sub) {
    const Backend *be = v->be;
    const T5Config *c = v->cfg;
    int D = c->d_model, HK = t5_config_inner_dim(c), nq = B * Tq;
    SublayerScratch kept = *s;  // the norm into the sublayer's own buffers when they are kept
    if (a->ln) kept.ln_out = a->ln, kept.ln_rstd = a->rstd;
    s = &kept;
    t5_sublayer_norm(v, s, w->ln, x_in, nq);
    be->matmul_forward(a->q, s->ln_out, t5_view_param(v, w->q), nq, D, HK);
    if (cache) {
        if (Tq != 1) t5_fail("t5_attn_sublayer_forward: a cached step has one query per row, not %d", Tq);
        if (cache->append_k) {
            attn_project_kv(v, s, w, cache->append_k, cache->append_v, NULL, nq);
            if (cache->view.pos)  // position-major: position t's block is pos_stride rows of HK
                be->kv_append((void *)cache->view.k, (void *)cache->view.v, cache->append_k, cache->append_v,
                              cache->view.pos, (size_t)cache->view.pos_stride * HK * v->elem);
        }
        be->attention_decode(a->ctx, a->q, &cache->view, bias, nq, cache->len, c->num_heads, c->d_kv);
    } else {
        attn_project_kv(v, s, w, a->k, a->v, kv_src, kv_src ? B * Tk : nq);
        be->attention_forward(a->ctx, a->att, a->q, a->k, a->v, bias, key_mask, B, Tq, Tk, Tk, c->num_heads, c->d_kv,
                              causal, 0, t5_view_dropout(v, stack, layer, sub, SITE_ATT));
    }
    void *y = s->proj ? s->proj : x_out;
    be->matmul_forward(y, a->ctx, t5_view_param(v, w->o), nq, HK, D);
    residual_add(v, x_out, y, x_in, (size_t)nq * D, t5_view_dropout(v, stack, layer, sub, SITE_ATT_OUT));
}

void t5_ffn_sublayer_forward(const T5BlockView *v, const SublayerScratch *s, const FfnOffsets *w, FfnActs *a,
                             const void *x_in, void *x_out, int B, int Tq, int stack, int layer, int sub) {
    const Backend *be = v->be;
    const T5Config *c = v->cfg;
    int n = B * Tq, D = c->d_model, F = c->d_ff;
    size_t nF = (size_t)n * F;
    SublayerScratch kept = *s;  // the norm and hidden state into the sublayer's own buffers when kept
    if (a->ln) kept.ln_out = a->ln, kept.ln_rstd = a->rstd;
    if (a->h) kept.ffn_h = a->h;
    s = &kept;
    t5_sublayer_norm(v, s, w->ln, x_in, n);
    be->matmul_forward(a->a, s->ln_out, t5_view_param(v, w->wi), n, D, F);
    if (c->is_gated) be->matmul_forward(a->b, s->ln_out, t5_view_param(v, w->wi_1), n, D, F);
    // the hidden state act(a) [* b] is not stored: backward regenerates it from a (and b)
    be->ffn_act_forward(s->ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act,
                        t5_view_dropout(v, stack, layer, sub, SITE_FFN_HIDDEN));  // act and its dropout in one pass
    void *y = s->proj ? s->proj : x_out;
    be->matmul_forward(y, s->ffn_h, t5_view_param(v, w->wo), n, F, D);
    residual_add(v, x_out, y, x_in, (size_t)n * D, t5_view_dropout(v, stack, layer, sub, SITE_FFN_OUT));
}

void t5_enc_block_forward(const T5BlockView *v, int l, BlockActs *a, void *const *x, int S, const void *bias,
                          const int *mask) {
    const ParamLayout *L = v->lay;
    SublayerScratch s = t5_train_scratch(v->scratch);
    int B = v->B;
    t5_attn_sublayer_forward(v, &s, &L->enc[l].self, &a->self, x[0], x[1], B, S, NULL, S, NULL, bias, mask, 0, 0, l, 0);
    t5_ffn_sublayer_forward(v, &s, &L->enc[l].ffn, &a->ffn, x[1], x[2], B, S, 0, l, 1);
}

void t5_dec_block_forward(const T5BlockView *v, const SublayerScratch *s, int l, BlockActs *a, void *const *x, int B, int T,
                          const void *enc_out, int S, const void *bias, const int *enc_mask, KvCache *self_cache,
                          KvCache *cross_cache) {
    const BlockOffsets *w = &v->lay->dec[l];
    t5_attn_sublayer_forward(v, s, &w->self, &a->self, x[0], x[1], B, T, NULL, T, self_cache, bias, NULL, 1, 1, l, 0);
    t5_attn_sublayer_forward(v, s, &w->cross, &a->cross, x[1], x[2], B, T, enc_out, S, cross_cache, NULL, enc_mask, 0,
                             1, l, 1);
    t5_ffn_sublayer_forward(v, s, &w->ffn, &a->ffn, x[2], x[3], B, T, 1, l, 2);
}

// ---------------------------------------------------------------------------------
// backward: each step reads the running residual gradient dx and ADDS the branch's
// contribution into it (backend convention: backward ops accumulate).

void t5_branch_grad(const T5BlockView *v, const void *dx, size_t n, DropoutArgs drop) {
    const int given = v->scratch->d_tmp_valid && v->scratch->d_tmp_n == n && v->scratch->d_tmp_drop.seed == drop.seed && v->scratch->d_tmp_drop.p == drop.p;
    // through the dropout: dropout_backward into zeros, as one write (no memset)
    if (!given) v->be->dropout_forward(v->scratch->d_tmp_d, dx, n, drop), v->test->branch_passes++;
    v->scratch->d_tmp_valid = 0;
}

void t5_norm_backward(const T5BlockView *v, void *dx, void *dweight, const void *dout, const void *x_in, const void *weight,
                      const float *rstd, int n, const DropoutArgs *next) {
    const Backend *be = v->be;
    int D = v->cfg->d_model;
    v->scratch->d_tmp_valid = 0;
    if (!next || v->test->unfused_backward_dropout) {
        be->rmsnorm_backward(dx, dweight, dout, x_in, weight, rstd, n, D);
        return;
    }
    be->rmsnorm_backward_dropout(dx, dweight, dout, x_in, weight, rstd, n, D, v->scratch->d_tmp_d, *next);
    v->scratch->d_tmp_valid = 1;
    v->scratch->d_tmp_drop = *next;
    v->scratch->d_tmp_n = (size_t)n * D;
}

void t5_attn_sublayer_backward(const T5BlockView *v, const AttnOffsets *w, const AttnActs *a, const void *x_in, void *dx,
                               int Tq, const void *kv_src, void *d_kv_src, int Tk, void *dbias, int stack, int layer,
                               int sub, const DropoutArgs *next) {
    const Backend *be = v->be;
    const T5Config *c = v->cfg;
    SublayerScratch s = t5_train_scratch(v->scratch);
    int B = v->B, D = c->d_model, HK = t5_config_inner_dim(c);
    int nq = B * Tq, nk = B * Tk;
    t5_branch_grad(v, dx, (size_t)nq * D, t5_view_dropout(v, stack, layer, sub, SITE_ATT_OUT));
    be->matmul_backward(v->scratch->d_ctx, t5_view_grad(v, w->o), v->scratch->d_tmp_d, a->ctx, t5_view_param(v, w->o), nq, HK, D, 1);
    // d_q, d_k, d_v are written whole here (dqkv_set: no memsets)
    be->attention_backward(v->scratch->d_q, v->scratch->d_k, v->scratch->d_v, dbias, v->scratch->d_ctx, a->att, a->q, a->k, a->v, B, Tq, Tk, c->num_heads,
                           c->d_kv, t5_view_dropout(v, stack, layer, sub, SITE_ATT), 1);
    const void *ln = a->ln;  // the input of q (and self k, v) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(v, &s, w->ln, x_in, nq);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    be->matmul_backward(v->scratch->d_ln, t5_view_grad(v, w->q), v->scratch->d_q, ln, t5_view_param(v, w->q), nq, D, HK, 1);
    const void *src = kv_src ? kv_src : ln;
    void *dsrc = kv_src ? d_kv_src : v->scratch->d_ln;
    be->matmul_backward(dsrc, t5_view_grad(v, w->k), v->scratch->d_k, src, t5_view_param(v, w->k), nk, D, HK, 0);
    be->matmul_backward(dsrc, t5_view_grad(v, w->v), v->scratch->d_v, src, t5_view_param(v, w->v), nk, D, HK, 0);
    t5_norm_backward(v, dx, t5_view_grad(v, w->ln), v->scratch->d_ln, x_in, t5_view_param(v, w->ln), rstd, nq, next);
}

void t5_ffn_sublayer_backward(const T5BlockView *v, const FfnOffsets *w, const FfnActs *a, const void *x_in, void *dx, int Tq,
                              int stack, int layer, int sub, const DropoutArgs *next) {
    const Backend *be = v->be;
    const T5Config *c = v->cfg;
    SublayerScratch s = t5_train_scratch(v->scratch);
    int n = v->B * Tq, D = c->d_model, F = c->d_ff;
    size_t nF = (size_t)n * F, nD = (size_t)n * D;
    DropoutArgs drop_h = t5_view_dropout(v, stack, layer, sub, SITE_FFN_HIDDEN);
    t5_branch_grad(v, dx, nD, t5_view_dropout(v, stack, layer, sub, SITE_FFN_OUT));
    const void *h = a->h;  // wo's input: kept, or regenerated
    if (!h) {
        be->ffn_act_forward(s.ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h);
        h = s.ffn_h;
    }
    be->matmul_backward(v->scratch->d_h, t5_view_grad(v, w->wo), v->scratch->d_tmp_d, h, t5_view_param(v, w->wo), n, F, D, 1);
    // tmp_f (the dropped hidden state) is no longer needed: it receives the gradient of the
    // wi output, from d_h through the hidden dropout's backward and the activation's (one
    // pass; one (B,T,F) buffer fewer: 67 MB at t5-large B=64)
    void *d_a = v->scratch->tmp_f;  // written whole (set: no memsets)
    be->ffn_act_backward(d_a, c->is_gated ? v->scratch->d_b : NULL, v->scratch->d_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h,
                         1);
    const void *ln = a->ln;  // the input of wi (and wi_1) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(v, &s, w->ln, x_in, n);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    be->matmul_backward(v->scratch->d_ln, t5_view_grad(v, w->wi), d_a, ln, t5_view_param(v, w->wi), n, D, F, 1);
    if (c->is_gated) be->matmul_backward(v->scratch->d_ln, t5_view_grad(v, w->wi_1), v->scratch->d_b, ln, t5_view_param(v, w->wi_1), n, D, F, 0);
    t5_norm_backward(v, dx, t5_view_grad(v, w->ln), v->scratch->d_ln, x_in, t5_view_param(v, w->ln), rstd, n, next);
}
