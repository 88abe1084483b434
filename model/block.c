// model/block.c: the T5 blocks and their sublayers, forward and backward (see block.h).
// One implementation for training (model/t5.c) and generation (model/kv_decoder.c): the
// decoder step of generation is this forward with Tq = 1, dropout off, and keys/values
// from a KV cache, so the two cannot drift apart.
#include "block.h"
#include "fp8.h"

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

// x_out = x_in + dropout(y) (y (n,D) is left as it was unless it is x_out); HF T5Block's fp16
// guard. When the block forward named the next sublayer's norm (scratch next_ln_w), that norm
// of x_out too, in the same pass (residual_rmsnorm_forward: bitwise the two ops).
static void residual_add(const T5BlockView *v, void *x_out, void *y, const void *x_in, int n, DropoutArgs drop) {
    const Backend *be = v->be;
    T5Scratch *sc = v->scratch;
    const int D = v->cfg->d_model;
    sc->normed_x = NULL;
    if (sc->next_ln_w && !v->test->unfused_residual_norm) {
        be->residual_rmsnorm_forward(x_out, sc->next_ln_out, sc->next_ln_rstd, y, x_in, sc->next_ln_w, n, D,
                                     v->cfg->layer_norm_epsilon, drop);
        sc->normed_x = x_out;
        v->test->fused_residual_norms++;
    } else {
        be->dropout_add_guard(x_out, y, x_in, (size_t)n * D, drop);  // one pass (+ a clamp launch in fp16)
    }
    sc->next_ln_w = NULL;
}

// The forward norm of a sublayer: already written by the residual add before it when that
// add was told this sublayer's weight and destination (block forwards: next_norm), else run.
static void sublayer_norm_forward(const T5BlockView *v, const SublayerScratch *s, size_t ln_weight, const void *x_in,
                                  int n) {
    T5Scratch *sc = v->scratch;
    const int done = sc->normed_x == x_in && sc->next_ln_out == s->ln_out && sc->next_ln_rstd == s->ln_rstd &&
                     sc->next_ln_done_w == t5_view_param(v, ln_weight);
    sc->normed_x = NULL;
    if (!done) t5_sublayer_norm(v, s, ln_weight, x_in, n);
}

// Called before a sublayer of a block: names the norm of the sublayer after it (its weight, and
// its kept ln or the shared s->ln_out, as that sublayer's forward picks them) for the first
// one's residual add to fuse. Only within a block: the next block's weights belong to another
// unit, which ZeRO-3 may not have fetched yet.
static void next_norm(const T5BlockView *v, const SublayerScratch *s, size_t ln_weight, void *kept_ln, float *kept_rstd) {
    T5Scratch *sc = v->scratch;
    sc->next_ln_w = sc->next_ln_done_w = t5_view_param(v, ln_weight);
    sc->next_ln_out = kept_ln ? kept_ln : s->ln_out;
    sc->next_ln_rstd = kept_ln ? kept_rstd : s->ln_rstd;
}

// The fp8 slot of the linear group whose first weight is at w (model/fp8.h); -1 outside a
// --fp8 training step or for a bf16 linear.
static int fp8_slot(const T5BlockView *v, size_t w) { return v->fp8 ? t5_fp8_slot(v->fp8, w) : -1; }

// The stride (elements) of n buffers p[0..n-1] that lie evenly spaced in increasing order,
// each at least `size` elements (no overlap), as matmul_*_batched takes them; 0 when they do
// not, or when the stride's bytes are not a multiple of 16 (cuBLASLt's vector loads: a
// lesser alignment could cost it its fast algorithms), or the test knob forbids batches.
// Weights of one unit are adjacent (params.c adds q, k, v and wi_0, wi_1 in a row, unpadded;
// a unit is one contiguous range under every ZeRO stage), and t5.c takes the activations
// q, k, v and the scratch d_q, d_k, d_v one after the other, so training batches them.
static size_t linears_stride(const T5BlockView *v, const void *const *p, int n, size_t size) {
    if (n < 2 || v->test->unbatched_linears) return 0;
    const ptrdiff_t d = (const char *)p[1] - (const char *)p[0];
    if (d <= 0 || d % 16 || (size_t)d % v->elem || (size_t)d / v->elem < size) return 0;
    for (int i = 2; i < n; i++)
        if ((const char *)p[i] - (const char *)p[i - 1] != d) return 0;
    return (size_t)d / v->elem;
}

// out_z (n, O) = inp (n, I) @ W_z^T for the `count` weights w[z]: one batched GEMM when the
// weights and outputs lie evenly (linears_stride), else one GEMM each (the same numbers).
// In a --fp8 training step a group with an fp8 slot (model/fp8.h) runs fp8_matmul_forward
// instead: one call over the evenly spaced weights (one input rounding, one weight scale),
// else one call each under the group's one slot.
static void linears_forward(const T5BlockView *v, void *const *out, const void *inp, const size_t *w, int count, int n,
                            int I, int O) {
    const void *W[3];
    for (int z = 0; z < count; z++) W[z] = t5_view_param(v, w[z]);
    size_t ws = linears_stride(v, W, count, (size_t)O * I);
    size_t os = linears_stride(v, (const void *const *)out, count, (size_t)n * O);
    const int slot = fp8_slot(v, w[0]);
    if (slot >= 0) {
        if (count == 1 || (ws == (size_t)O * I && os))  // the group's weights in one call: its kept codes
            v->be->fp8_matmul_forward(out[0], os, inp, W[0], ws, n, I, O, count, t5_fp8_forward_scales(v->fp8, slot));
        else  // one call each under the group's slot, rounding its own weight
            for (int z = 0; z < count; z++)
                v->be->fp8_matmul_forward(out[z], 0, inp, W[z], 0, n, I, O, 1, t5_fp8_scales(v->fp8, slot));
        return;
    }
    if (ws && os) {
        v->be->matmul_forward_batched(out[0], os, inp, 0, W[0], ws, n, I, O, count);
        v->test->batched_linear_calls++;
        return;
    }
    for (int z = 0; z < count; z++) v->be->matmul_forward(out[z], inp, W[z], n, I, O);
}

// The backward of linears_forward: dW_z += dout_z^T inp (one batched GEMM when the
// gradients and dout lie evenly), then dinp (+)= sum_z dout_z @ W_z as `count` GEMMs in z
// order (dinp_set: the first one overwrites). dinp and dW are independent products, so the
// split leaves every number as matmul_backward's.
static void linears_backward(const T5BlockView *v, void *dinp, const void *const *dout, const void *inp, const size_t *w,
                             int count, int n, int I, int O, int dinp_set) {
    const Backend *be = v->be;
    const void *dW[3];
    for (int z = 0; z < count; z++) dW[z] = t5_view_grad(v, w[z]);
    const int slot = fp8_slot(v, w[0]);
    if (slot >= 0) {  // fp8: one call each, under the group's slot
        const Fp8Scales sc = t5_fp8_scales(v->fp8, slot);
        for (int z = 0; z < count; z++)
            be->fp8_matmul_backward(dinp, (void *)dW[z], dout[z], inp, t5_view_param(v, w[z]), n, I, O,
                                    dinp_set && z == 0, sc);
        return;
    }
    size_t gs = linears_stride(v, dW, count, (size_t)O * I), ds = linears_stride(v, dout, count, (size_t)n * O);
    const int batched = gs && ds;
    for (int z = 0; z < count; z++)
        be->matmul_backward(dinp, batched ? NULL : (void *)dW[z], dout[z], inp, t5_view_param(v, w[z]), n, I, O,
                            dinp_set && z == 0);
    if (batched) {
        be->matmul_backward_weights_batched((void *)dW[0], gs, dout[0], ds, inp, 0, n, I, O, count);
        v->test->batched_linear_calls++;
    }
}

// One linear, out (n,O) = inp (n,I) @ W^T, and its backward: through the door above.
static void linear_forward(const T5BlockView *v, void *out, const void *inp, size_t w, int n, int I, int O) {
    linears_forward(v, &out, inp, &w, 1, n, I, O);
}
static void linear_backward(const T5BlockView *v, void *dinp, const void *dout, const void *inp, size_t w, int n, int I,
                            int O, int dinp_set) {
    const int slot = fp8_slot(v, w);
    if (slot >= 0)
        v->be->fp8_matmul_backward(dinp, t5_view_grad(v, w), dout, inp, t5_view_param(v, w), n, I, O, dinp_set,
                                   t5_fp8_backward_scales(v->fp8, slot, O));
    else
        v->be->matmul_backward(dinp, t5_view_grad(v, w), dout, inp, t5_view_param(v, w), n, I, O, dinp_set);
}

// --fp8 and the plain ReLU FFN with its keep bits (bits): the slot of the linear at w, when
// its fp8 linear may take the activation in its rounding pass (backend.h
// fp8_relu_drop_matmul_*: delayed scaling; the forward also needs the input kept for the
// weight gradient, as it stores no h); -1 otherwise.
static int fp8_relu_slot(const T5BlockView *v, const void *bits, size_t w, int need_kept) {
    const int slot = bits && !v->test->unfused_fp8_relu ? fp8_slot(v, w) : -1;
    if (slot < 0) return -1;
    const Fp8Scales sc = t5_fp8_scales(v->fp8, slot);
    return sc.current || (need_kept && !sc.inp_t) ? -1 : slot;
}

// 1 when the `count` weights w[z] (each `size` elements) and their gradients lie one after the
// other (linears_stride == size), so that they are one (count*O, I) weight: the q, k, v (or
// k, v) of a sublayer are (params.c, one ZeRO unit), unless the test knob asks for one GEMM each.
static int linears_adjacent(const T5BlockView *v, const size_t *w, int count, size_t size) {
    const void *W[3], *dW[3];
    for (int z = 0; z < count; z++) {
        W[z] = t5_view_param(v, w[z]), dW[z] = t5_view_grad(v, w[z]);
        if (!dW[z]) return 0;  // a frozen weight
    }
    return linears_stride(v, W, count, size) == size && linears_stride(v, dW, count, size) == size;
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
    sublayer_norm_forward(v, s, w->ln, x_in, nq);
    if (cache) {  // generation: q alone, this step's k, v into the cache (separate GEMMs)
        if (Tq != 1) t5_fail("t5_attn_sublayer_forward: a cached step has one query per row, not %d", Tq);
        const char *wq = t5_view_param(v, w->q);
        const size_t w_bytes = (size_t)HK * D * v->elem;
        const int fused = cache->append_qkv && cache->view.pos && be->qkv_append && cache->view.pos_stride == nq &&
                          (const char *)t5_view_param(v, w->k) == wq + w_bytes &&
                          (const char *)t5_view_param(v, w->v) == wq + 2 * w_bytes;
        if (fused) {  // the (3 HK, D) weights of q, k, v as one GEMM, then q out and k, v to *pos
            be->matmul_forward(cache->append_qkv, s->ln_out, wq, nq, D, 3 * HK);
            be->qkv_append(a->q, (void *)cache->view.k, (void *)cache->view.v, cache->append_qkv, cache->view.pos,
                           (size_t)nq, (size_t)HK * v->elem);
        } else {
            be->matmul_forward(a->q, s->ln_out, wq, nq, D, HK);
        }
        if (cache->append_k && !fused) {
            attn_project_kv(v, s, w, cache->append_k, cache->append_v, NULL, nq);
            if (cache->view.pos)  // position-major: position t's block is pos_stride rows of HK
                be->kv_append((void *)cache->view.k, (void *)cache->view.v, cache->append_k, cache->append_v,
                              cache->view.pos, (size_t)cache->view.pos_stride * HK * v->elem);
        }
        be->attention_decode(a->ctx, a->q, &cache->view, bias, nq, cache->len, c->num_heads, c->d_kv);
    } else {
        // self: q, k, v of the norm output in one launch; cross: q, then k, v of kv_src in one
        const size_t qkv[3] = {w->q, w->k, w->v};
        void *outs[3] = {a->q, a->k, a->v};
        if (kv_src) {
            linear_forward(v, a->q, s->ln_out, w->q, nq, D, HK);
            linears_forward(v, outs + 1, kv_src, qkv + 1, 2, B * Tk, D, HK);
        } else {
            linears_forward(v, outs, s->ln_out, qkv, 3, nq, D, HK);
        }
        be->attention_forward(a->ctx, a->att, a->q, a->k, a->v, bias, key_mask, B, Tq, Tk, Tk, c->num_heads, c->d_kv,
                              causal, 0, t5_view_dropout(v, stack, layer, sub, SITE_ATT));
    }
    void *y = s->proj ? s->proj : x_out;
    linear_forward(v, y, a->ctx, w->o, nq, HK, D);
    residual_add(v, x_out, y, x_in, nq, t5_view_dropout(v, stack, layer, sub, SITE_ATT_OUT));
}

void t5_ffn_sublayer_forward(const T5BlockView *v, const SublayerScratch *s, const FfnOffsets *w, FfnActs *a,
                             const void *x_in, void *x_out, int B, int Tq, int stack, int layer, int sub) {
    const Backend *be = v->be;
    const T5Config *c = v->cfg;
    int n = B * Tq, D = c->d_model, F = c->d_ff;
    size_t nF = (size_t)n * F;
    void *const shared_h = s->ffn_h;  // the shared (B,T,F) scratch
    SublayerScratch kept = *s;  // the norm and hidden state into the sublayer's own buffers when kept
    if (a->ln) kept.ln_out = a->ln, kept.ln_rstd = a->rstd;
    if (a->h) kept.ffn_h = a->h;
    s = &kept;
    sublayer_norm_forward(v, s, w->ln, x_in, n);
    const size_t wi[2] = {w->wi, w->wi_1};
    // with keep bits (plain ReLU, h kept) the wi output is needed only here: the shared scratch
    void *outs[2] = {a->bits ? shared_h : a->a, a->b};
    linears_forward(v, outs, s->ln_out, wi, c->is_gated ? 2 : 1, n, D, F);  // gated: wi_0, wi_1 in one launch
    const DropoutArgs drop_h = t5_view_dropout(v, stack, layer, sub, SITE_FFN_HIDDEN);
    void *y = s->proj ? s->proj : x_out;
    const int slot_o = fp8_relu_slot(v, a->bits, w->wo, 1);
    if (slot_o >= 0) {  // --fp8: h straight from the wi output to wo's fp8 operands, never stored
        be->fp8_relu_drop_matmul_forward(y, a->bits, shared_h, t5_view_param(v, w->wo), n, F, D, drop_h,
                                         t5_fp8_forward_scales(v->fp8, slot_o));
        v->test->fused_fp8_relu_calls++;
    } else {
        if (a->bits)  // relu and its dropout in one pass, and the keep bits backward reads instead of a
            be->relu_drop_forward(s->ffn_h, a->bits, shared_h, nF, drop_h);
        else  // act and its dropout in one pass; unless kept, backward regenerates h from a (and b)
            be->ffn_act_forward(s->ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h);
        linear_forward(v, y, s->ffn_h, w->wo, n, F, D);
    }
    residual_add(v, x_out, y, x_in, n, t5_view_dropout(v, stack, layer, sub, SITE_FFN_OUT));
}

void t5_enc_block_forward(const T5BlockView *v, int l, BlockActs *a, void *const *x, int S, const void *bias,
                          const int *mask) {
    const ParamLayout *L = v->lay;
    SublayerScratch s = t5_train_scratch(v->scratch);
    int B = v->B;
    next_norm(v, &s, L->enc[l].ffn.ln, a->ffn.ln, a->ffn.rstd);  // the FFN's norm in the attention's residual add
    t5_attn_sublayer_forward(v, &s, &L->enc[l].self, &a->self, x[0], x[1], B, S, NULL, S, NULL, bias, mask, 0, 0, l, 0);
    t5_ffn_sublayer_forward(v, &s, &L->enc[l].ffn, &a->ffn, x[1], x[2], B, S, 0, l, 1);
}

void t5_dec_block_forward(const T5BlockView *v, const SublayerScratch *s, int l, BlockActs *a, void *const *x, int B, int T,
                          const void *enc_out, int S, const void *bias, const int *enc_mask, KvCache *self_cache,
                          KvCache *cross_cache) {
    const BlockOffsets *w = &v->lay->dec[l];
    // each sublayer's residual add also makes the next one's norm (residual_add)
    next_norm(v, s, w->cross.ln, a->cross.ln, a->cross.rstd);
    t5_attn_sublayer_forward(v, s, &w->self, &a->self, x[0], x[1], B, T, NULL, T, self_cache, bias, NULL, 1, 1, l, 0);
    next_norm(v, s, w->ffn.ln, a->ffn.ln, a->ffn.rstd);
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
    linear_backward(v, v->scratch->d_ctx, v->scratch->d_tmp_d, a->ctx, w->o, nq, HK, D, 1);
    // The input-side gradients. Where the weights of q, k, v (self) or k, v (cross) and their
    // gradients are adjacent, attention_backward writes d_q, d_k, d_v (or d_k, d_v) side by
    // side in each row, and each side's input gradient and weight gradients are ONE GEMM over
    // the (count*HK, D) weight: one K = 3 HK product instead of three accumulating K = HK ones
    // (one rounding of the sum, not three). Else d_q, d_k, d_v dense and one GEMM each
    // (linears_backward). Written whole either way (dqkv_set: no memsets).
    const size_t qkv[3] = {w->q, w->k, w->v};
    const size_t wsize = (size_t)HK * D, e = v->elem;
    char *dq = v->scratch->d_q, *dk = v->scratch->d_k, *dv = v->scratch->d_v;
    int ld_q = 0, ld_kv = 0;  // 0: dense
    const int joined = linears_adjacent(v, kv_src ? qkv + 1 : qkv, kv_src ? 2 : 3, wsize);
    if (joined && !kv_src) dk = dq + HK * e, dv = dq + 2 * HK * e, ld_q = ld_kv = 3 * HK;  // (nq, 3 HK)
    if (joined && kv_src) dv = dk + HK * e, ld_kv = 2 * HK;                                 // (nk, 2 HK)
    be->attention_backward(dq, dk, dv, dbias, v->scratch->d_ctx, a->att, a->q, a->k, a->v, B, Tq, Tk, c->num_heads,
                           c->d_kv, t5_view_dropout(v, stack, layer, sub, SITE_ATT), 1, ld_q, ld_kv);
    const void *ln = a->ln;  // the input of q (and self k, v) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(v, &s, w->ln, x_in, nq);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    // joined: the first weight's view spans all of them; else the weight gradients as one batched
    // GEMM where they lie evenly (linears_backward)
    const void *d_qkv[3] = {dq, dk, dv};
    if (kv_src) {  // q from the decoder side, k and v from the encoder output (into d_kv_src)
        linear_backward(v, v->scratch->d_ln, dq, ln, w->q, nq, D, HK, 1);
        if (joined) linear_backward(v, d_kv_src, dk, kv_src, w->k, nk, D, 2 * HK, 0);
        else linears_backward(v, d_kv_src, d_qkv + 1, kv_src, qkv + 1, 2, nk, D, HK, 0);
    } else if (joined) {
        linear_backward(v, v->scratch->d_ln, dq, ln, w->q, nq, D, 3 * HK, 1);
    } else {
        linears_backward(v, v->scratch->d_ln, d_qkv, ln, qkv, 3, nq, D, HK, 1);
    }
    v->test->joined_qkv_backward_calls += joined;
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
    // plain ReLU: the keep bits of h (kept with it, or regenerated with it) stand for a
    const uint8_t *bits = a->bits ? a->bits : v->scratch->ffn_bits;
    const int wo_slot = fp8_slot(v, w->wo);
    // wo's weight gradient reads its kept fp8 input, so h may not be stored (t5.c fp8_h_unneeded);
    // unless the keep bits were not kept either (then they are regenerated with h, below)
    if (wo_slot >= 0 && t5_fp8_scales(v->fp8, wo_slot).inp_t && (a->bits || !bits)) {
        h = NULL;
    } else if (!h) {
        if (bits) be->relu_drop_forward(s.ffn_h, v->scratch->ffn_bits, a->a, nF, drop_h);
        else be->ffn_act_forward(s.ffn_h, a->a, c->is_gated ? a->b : NULL, nF, c->act, drop_h);
        h = s.ffn_h;
    }
    linear_backward(v, v->scratch->d_h, v->scratch->d_tmp_d, h, w->wo, n, F, D, 1);
    const void *ln = a->ln;  // the input of wi (and wi_1) and its rstd: kept, or recomputed
    const float *rstd = a->rstd;
    if (!ln) {
        t5_sublayer_norm(v, &s, w->ln, x_in, n);
        ln = s.ln_out, rstd = s.ln_rstd;
    }
    const int slot_i = c->is_gated ? -1 : fp8_relu_slot(v, bits, w->wi, 0);
    if (slot_i >= 0) {  // --fp8: the wi output's gradient straight from d_h to fp8, never stored
        be->fp8_relu_drop_matmul_backward(v->scratch->d_ln, t5_view_grad(v, w->wi), v->scratch->d_h, bits, ln,
                                          t5_view_param(v, w->wi), n, D, F, 1, drop_h,
                                          t5_fp8_backward_scales(v->fp8, slot_i, F));
        v->test->fused_fp8_relu_calls++;
    } else {
        // tmp_f (the dropped hidden state) is no longer needed: it receives the gradient of the
        // wi output, from d_h through the hidden dropout's backward and the activation's (one
        // pass; one (B,T,F) buffer fewer: 67 MB at t5-large B=64)
        void *d_a = v->scratch->tmp_f;  // written whole (set: no memsets)
        if (bits)  // reads d_h and a bit an element: 4.1 bytes an element instead of 6 (bf16)
            be->relu_drop_backward(d_a, v->scratch->d_h, bits, nF, drop_h, 1);
        else
            be->ffn_act_backward(d_a, c->is_gated ? v->scratch->d_b : NULL, v->scratch->d_h, a->a,
                                 c->is_gated ? a->b : NULL, nF, c->act, drop_h, 1);
        const size_t wi[2] = {w->wi, w->wi_1};
        const void *d_wi[2] = {d_a, v->scratch->d_b};
        linears_backward(v, v->scratch->d_ln, d_wi, ln, wi, c->is_gated ? 2 : 1, n, D, F, 1);
    }
    t5_norm_backward(v, dx, t5_view_grad(v, w->ln), v->scratch->d_ln, x_in, t5_view_param(v, w->ln), rstd, n, next);
}
