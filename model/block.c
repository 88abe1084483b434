// model/block.c: the T5 blocks and their sublayers, forward and backward (see block.h).
// One implementation for training (model/t5.c) and generation (model/kv_decoder.c): the
// decoder step of generation is this forward with Tq = 1, dropout off, and keys/values
// from a KV cache, so the two cannot drift apart.
#include "block.h"

#include "../common/check.h"
#include "../kernels/dropout_rng.h"

DropoutArgs t5_site_dropout(const T5Model *m, int stack, int layer, int sub, int site) {
    DropoutArgs d;
    d.p = m->dropout_p;
    uint64_t id = ((((uint64_t)stack * 4096 + (uint64_t)layer) * 4 + (uint64_t)sub) * SITE_COUNT) + (uint64_t)site;
    // a window of the batch (checkpointing in sub-batches) draws its own masks: the mask
    // index restarts at 0 in each window, the window's first row tells them apart
    if (m->win.on) id ^= ((uint64_t)m->win.i0 + 1) << 40;
    d.seed = dropout_rng_mix64(m->dropout_seed ^ dropout_rng_mix64(id + DROPOUT_RNG_GAMMA));
    return d;
}

// The RMS norm of a sublayer. Forward calls it; when the outputs are not kept
// (T5Model.keep_sublayer_acts off: the memory plan has no room) backward calls it again
// (into the model's shared m->scratch.ln_out) right before the weight gradients that read its
// output: the same kernel on the same input and weight gives the same bits. The rerun is
// one memory-bound pass (read x, write out: 34 MB at t5-large B=64, 12 us on the H200;
// 1.5 ms for the 120 sublayers of a 95 ms step) and saves keeping 120 outputs (1.9 GB).
void t5_sublayer_norm(T5Model *m, const SublayerScratch *s, size_t ln_weight, const void *x_in, int n) {
    const T5Config *c = &m->cfg;
    m->be->rmsnorm_forward(s->ln_out, s->ln_rstd, x_in, t5_param(m, ln_weight), n, c->d_model, c->layer_norm_epsilon);
}

// x_out = x_in + dropout(y) (y (n,D) is left as it was unless it is x_out); HF T5Block's fp16 guard.
static void residual_add(T5Model *m, void *x_out, void *y, const void *x_in, size_t nD, DropoutArgs drop) {
    const Backend *be = m->be;
    be->dropout_add_guard(x_out, y, x_in, nD, drop);  // one pass (+ a clamp launch in fp16)
}

// Project keys and values of nk rows into k_out, v_out.
static void attn_project_kv(T5Model *m, const SublayerScratch *s, const AttnOffsets *w, void *k_out, void *v_out,
                            const void *kv_src, int nk) {
    const Backend *be = m->be;
    int D = m->cfg.d_model, HK = t5_config_inner_dim(&m->cfg);
    const void *src = kv_src ? kv_src : s->ln_out;
    be->matmul_forward(k_out, src, t5_param(m, w->k), nk, D, HK);
    be->matmul_forward(v_out, src, t5_param(m, w->v), nk, D, HK);
}

void t5_attn_sublayer_forward(T5Model *m, const SublayerScratch *s, const AttnOffsets *w, AttnActs *a,
                              const void *x_in, void *x_out, int B, int Tq, const void *kv_src, int Tk,
                              KvCache *cache, const void *bias, const int *key_mask, int causal, int stack,
                              int layer, int sub) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    int D = c->d_model, HK = t5_config_inner_dim(c), nq = B * Tq;
    SublayerScratch kept = *s;  // the norm into the sublayer's own buffers when they are kept
    if (a->ln) kept.ln_out = a->ln, kept.ln_rstd = a->rstd;
    s = &kept;
    t5_sublayer_norm(m, s, w->ln, x_in, nq);
    be->matmul_forward(a->q, s->ln_out, t5_param(m, w->q), nq, D, HK);
    if (cache) {
        if (Tq != 1) t5_fail("t5_attn_sublayer_forward: a cached step has one query per row, not %d", Tq);
        if (cache->append_k) attn_project_kv(m, s, w, cache->append_k, cache->append_v, NULL, nq);
        be->attention_decode(a->ctx, a->q, &cache->view, bias, nq, cache->len, c->num_heads, c->d_kv);
    } else {
        attn_project_kv(m, s, w, a->k, a->v, kv_src, kv_src ? B * Tk : nq);
        be->attention_forward(a->ctx, a->att, a->q, a->k, a->v, bias, key_mask, B, Tq, Tk, Tk, c->num_heads, c->d_kv,
                              causal, 0, t5_site_dropout(m, stack, layer, sub, SITE_ATT));
    }
    void *y = s->proj ? s->proj : x_out;
    be->matmul_forward(y, a->ctx, t5_param(m, w->o), nq, HK, D);
    residual_add(m, x_out, y, x_in, (size_t)nq * D, t5_site_dropout(m, stack, layer, sub, SITE_ATT_OUT));
}

void t5_ffn_sublayer_forward(T5Model *m, const SublayerScratch *s, const FfnOffsets *w, FfnActs *a,
                             const void *x_in, void *x_out, int B, int Tq, int stack, int layer, int sub) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    int n = B * Tq, D = c->d_model, F = c->d_ff;
    size_t nF = (size_t)n * F;
    SublayerScratch kept = *s;  // the norm and hidden state into the sublayer's own buffers when kept
    if (a->ln) kept.ln_out = a->ln, kept.ln_rstd = a->rstd;
    if (a->h) kept.ffn_h = a->h;
    s = &kept;
    t5_sublayer_norm(m, s, w->ln, x_in, n);
    be->matmul_forward(a->a, s->ln_out, t5_param(m, w->wi), n, D, F);
    if (c->is_gated) be->matmul_forward(a->b, s->ln_out, t5_param(m, w->wi_1), n, D, F);
    // the hidden state act(a) [* b] is not stored: backward regenerates it from a (and b)
    be->ffn_act_forward(s->ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act,
                        t5_site_dropout(m, stack, layer, sub, SITE_FFN_HIDDEN));  // act and its dropout in one pass
    void *y = s->proj ? s->proj : x_out;
    be->matmul_forward(y, s->ffn_h, t5_param(m, w->wo), n, F, D);
    residual_add(m, x_out, y, x_in, (size_t)n * D, t5_site_dropout(m, stack, layer, sub, SITE_FFN_OUT));
}

void t5_enc_block_forward(T5Model *m, int l) {
    const ParamLayout *L = &m->lay;
    SublayerScratch s = t5_train_scratch(m);
    int B = m->B, S = m->S;
    void **x = &m->acts.enc_x[2 * l];
    t5_attn_sublayer_forward(m, &s, &L->enc[l].self, &m->acts.enc[l].self, x[0], x[1], B, S, NULL, S, NULL, m->acts.enc_bias,
                             m->acts.attention_mask, 0, 0, l, 0);
    t5_ffn_sublayer_forward(m, &s, &L->enc[l].ffn, &m->acts.enc[l].ffn, x[1], x[2], B, S, 0, l, 1);
}

void t5_dec_block_forward(T5Model *m, const SublayerScratch *s, int l, BlockActs *a, void *const *x, int B, int T,
                          const void *enc_out, int S, const void *bias, const int *enc_mask, KvCache *self_cache,
                          KvCache *cross_cache) {
    const BlockOffsets *w = &m->lay.dec[l];
    t5_attn_sublayer_forward(m, s, &w->self, &a->self, x[0], x[1], B, T, NULL, T, self_cache, bias, NULL, 1, 1, l, 0);
    t5_attn_sublayer_forward(m, s, &w->cross, &a->cross, x[1], x[2], B, T, enc_out, S, cross_cache, NULL, enc_mask, 0,
                             1, l, 1);
    t5_ffn_sublayer_forward(m, s, &w->ffn, &a->ffn, x[2], x[3], B, T, 1, l, 2);
}

// ---------------------------------------------------------------------------------
// backward: each step reads the running residual gradient dx and ADDS the branch's
// contribution into it (backend convention: backward ops accumulate).

void t5_branch_grad(T5Model *m, const void *dx, size_t n, DropoutArgs drop) {
    const int given = m->scratch.d_tmp_valid && m->scratch.d_tmp_n == n && m->scratch.d_tmp_drop.seed == drop.seed && m->scratch.d_tmp_drop.p == drop.p;
    // through the dropout: dropout_backward into zeros, as one write (no memset)
    if (!given) m->be->dropout_forward(m->scratch.d_tmp_d, dx, n, drop), m->test.branch_passes++;
    m->scratch.d_tmp_valid = 0;
}

void t5_norm_backward(T5Model *m, void *dx, void *dweight, const void *dout, const void *x_in, const void *weight,
                      const float *rstd, int n, const DropoutArgs *next) {
    const Backend *be = m->be;
    int D = m->cfg.d_model;
    m->scratch.d_tmp_valid = 0;
    if (!next || m->test.unfused_backward_dropout) {
        be->rmsnorm_backward(dx, dweight, dout, x_in, weight, rstd, n, D);
        return;
    }
    be->rmsnorm_backward_dropout(dx, dweight, dout, x_in, weight, rstd, n, D, m->scratch.d_tmp_d, *next);
    m->scratch.d_tmp_valid = 1;
    m->scratch.d_tmp_drop = *next;
    m->scratch.d_tmp_n = (size_t)n * D;
}

void t5_attn_sublayer_backward(T5Model *m, const AttnOffsets *w, const AttnActs *a, const void *x_in, void *dx,
                               int Tq, const void *kv_src, void *d_kv_src, int Tk, void *dbias, int stack, int layer,
                               int sub, const DropoutArgs *next) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    SublayerScratch s = t5_train_scratch(m);
    int B = m->B, D = c->d_model, HK = t5_config_inner_dim(c);
    int nq = B * Tq, nk = B * Tk;
    t5_branch_grad(m, dx, (size_t)nq * D, t5_site_dropout(m, stack, layer, sub, SITE_ATT_OUT));
    be->matmul_backward(m->scratch.d_ctx, t5_grad(m, w->o), m->scratch.d_tmp_d, a->ctx, t5_param(m, w->o), nq, HK, D, 1);
    // d_q, d_k, d_v are written whole here (dqkv_set: no memsets)
    be->attention_backward(m->scratch.d_q, m->scratch.d_k, m->scratch.d_v, dbias, m->scratch.d_ctx, a->att, a->q, a->k, a->v, B, Tq, Tk, c->num_heads,
                           c->d_kv, t5_site_dropout(m, stack, layer, sub, SITE_ATT), 1);
    const void *ln = a->ln;  // the input of q (and self k, v) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(m, &s, w->ln, x_in, nq);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    be->matmul_backward(m->scratch.d_ln, t5_grad(m, w->q), m->scratch.d_q, ln, t5_param(m, w->q), nq, D, HK, 1);
    const void *src = kv_src ? kv_src : ln;
    void *dsrc = kv_src ? d_kv_src : m->scratch.d_ln;
    be->matmul_backward(dsrc, t5_grad(m, w->k), m->scratch.d_k, src, t5_param(m, w->k), nk, D, HK, 0);
    be->matmul_backward(dsrc, t5_grad(m, w->v), m->scratch.d_v, src, t5_param(m, w->v), nk, D, HK, 0);
    t5_norm_backward(m, dx, t5_grad(m, w->ln), m->scratch.d_ln, x_in, t5_param(m, w->ln), rstd, nq, next);
}

void t5_ffn_sublayer_backward(T5Model *m, const FfnOffsets *w, const FfnActs *a, const void *x_in, void *dx, int Tq,
                              int stack, int layer, int sub, const DropoutArgs *next) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    SublayerScratch s = t5_train_scratch(m);
    int n = m->B * Tq, D = c->d_model, F = c->d_ff;
    size_t nF = (size_t)n * F, nD = (size_t)n * D;
    DropoutArgs drop_h = t5_site_dropout(m, stack, layer, sub, SITE_FFN_HIDDEN);
    t5_branch_grad(m, dx, nD, t5_site_dropout(m, stack, layer, sub, SITE_FFN_OUT));
    const void *h = a->h;  // wo's input: kept, or regenerated
    if (!h) {
        be->ffn_act_forward(s.ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h);
        h = s.ffn_h;
    }
    be->matmul_backward(m->scratch.d_h, t5_grad(m, w->wo), m->scratch.d_tmp_d, h, t5_param(m, w->wo), n, F, D, 1);
    // tmp_f (the dropped hidden state) is no longer needed: it receives the gradient of the
    // wi output, from d_h through the hidden dropout's backward and the activation's (one
    // pass; one (B,T,F) buffer fewer: 67 MB at t5-large B=64)
    void *d_a = m->scratch.tmp_f;  // written whole (set: no memsets)
    be->ffn_act_backward(d_a, c->is_gated ? m->scratch.d_b : NULL, m->scratch.d_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h,
                         1);
    const void *ln = a->ln;  // the input of wi (and wi_1) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(m, &s, w->ln, x_in, n);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    be->matmul_backward(m->scratch.d_ln, t5_grad(m, w->wi), d_a, ln, t5_param(m, w->wi), n, D, F, 1);
    if (c->is_gated) be->matmul_backward(m->scratch.d_ln, t5_grad(m, w->wi_1), m->scratch.d_b, ln, t5_param(m, w->wi_1), n, D, F, 0);
    t5_norm_backward(m, dx, t5_grad(m, w->ln), m->scratch.d_ln, x_in, t5_param(m, w->ln), rstd, n, next);
}
