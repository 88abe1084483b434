// model/t5.c: T5ForConditionalGeneration forward and backward as calls on the backend
// interface (see t5.h). Mirrors transformers' modeling_t5.py:
//   encoder: x = dropout(embed(ids)); per block: x += dropout(SelfAttn(norm(x)));
//            x += dropout(FFN(norm(x))); out = dropout(final_norm(x))
//   decoder: the same with causal self-attention and a cross-attention sublayer
//            (no position bias) between self-attention and FFN
//   head:    logits = (dropout(final_norm(x)) [* D^-0.5]) @ W^T, W = lm_head or shared
// Position bias: computed from block 0's relative_attention_bias and shared by every
// block of the stack. The blocks and sublayers themselves are in model/block.c, shared
// with generation's incremental decoder (model/kv_decoder.c); this file holds the memory
// plan and the stacks: embeddings, final norms, head and loss.
#include "t5.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "block.h"
#include "bump.h"
#include "fp8.h"

// ---------------------------------------------------------------------------------
// init / memory plan

static size_t dtype_size(Dtype d) { return d == DTYPE_F32 ? 4 : 2; }

void t5_init_layout(T5Model *m, const T5Config *cfg, const Backend *be) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    m->elem = dtype_size(be->act_dtype);
    params_build_layout(&m->cfg, &m->lay);
    t5_segments_build(m);
    m->unit_params = callocCheck((size_t)m->lay.n_units, sizeof(void *));
    m->unit_grads = callocCheck((size_t)m->lay.n_units, sizeof(void *));
    m->dropout_p = cfg->dropout_rate;
}

void t5_init(T5Model *m, const T5Config *cfg, const Backend *be) {
    t5_init_layout(m, cfg, be);
    m->params = be->alloc(m->lay.total * m->elem);
    m->grads = be->alloc(m->lay.total * m->elem);
    t5_bind_flat(m);
}

void t5_bind_flat(T5Model *m) {
    for (int u = 0; u < m->lay.n_units; u++) {
        size_t lo = m->lay.units[u].lo * m->elem;
        m->unit_params[u] = m->params ? (char *)m->params + lo : NULL;
        m->unit_grads[u] = m->grads ? (char *)m->grads + lo : NULL;
    }
}

void t5_free(T5Model *m) {
    if (m->acts.arena) m->be->free(m->acts.arena);
    if (m->params) m->be->free(m->params);
    if (m->grads) m->be->free(m->grads);
    free(m->acts.enc_x);
    free(m->acts.dec_x);
    free(m->acts.enc);
    free(m->acts.dec);
    free(m->unit_params);
    free(m->unit_grads);
    t5_segments_free(m);
    t5_fp8_free(m);
    params_free_layout(&m->lay);
    memset(m, 0, sizeof *m);
}

// The residual stream at block boundaries: enc_x (2L+1) of enc_bytes each, dec_x (3Ld+1)
// of dec_bytes. Gradient checkpointing keeps only the boundaries (the sublayer outputs
// inside a block share one buffer per position); inference (forward only) keeps nothing
// for backward: the stream rotates through three buffers per stack (a sublayer's input and
// output always differ).
static void acts_layout_residual(T5Model *m, Bump *bp, size_t enc_bytes, size_t dec_bytes) {
    const int L = m->cfg.num_layers, Ld = m->cfg.num_decoder_layers, ckpt = m->gradient_checkpointing;
    if (m->inference) {
        void *er[3], *dr[3];
        for (int k = 0; k < 3; k++) er[k] = bump_take(bp, enc_bytes), dr[k] = bump_take(bp, dec_bytes);
        for (int i = 0; i <= L * 2; i++) m->acts.enc_x[i] = er[i % 3];
        for (int i = 0; i <= Ld * 3; i++) m->acts.dec_x[i] = dr[i % 3];
        return;
    }
    void *enc_mid = ckpt ? bump_take(bp, enc_bytes) : NULL;
    void *dec_mid[2] = {ckpt ? bump_take(bp, dec_bytes) : NULL, ckpt ? bump_take(bp, dec_bytes) : NULL};
    for (int i = 0; i <= L * 2; i++) m->acts.enc_x[i] = ckpt && i % 2 ? enc_mid : bump_take(bp, enc_bytes);
    for (int i = 0; i <= Ld * 3; i++) m->acts.dec_x[i] = ckpt && i % 3 ? dec_mid[i % 3 - 1] : bump_take(bp, dec_bytes);
}

// Training a plain ReLU FFN (T5 1.0) with d_ff a multiple of 8: the hidden state's keep bits
// (backend.h relu_drop_forward) replace the wi output in backward (model/block.c).
static int relu_bits(const T5Model *m) {
    return !m->inference && m->cfg.act == ACT_RELU && !m->cfg.is_gated && m->cfg.d_ff % 8 == 0;
}
// ... kept per block with the kept hidden state (keep_sublayer_acts): the wi output then goes to
// the shared scratch tmp_f (block.c); else one scratch of bits, regenerated with h in backward.
static int relu_bits_kept(const T5Model *m) { return relu_bits(m) && m->keep_sublayer_acts; }

// --fp8 with every block's FFN output projection (wo) in fp8 and the linears' rounded inputs
// kept (model/fp8.h): wo's backward reads its input's kept fp8 codes and the ReLU's backward
// its keep bits, never the hidden state h, so the kept sublayer activations leave h out (the
// forward writes it to the shared scratch, or not at all: block.c fp8_relu_drop_matmul_forward).
static int fp8_h_unneeded(const T5Model *m) {
    return !m->inference && m->fp8 && m->fp8->kept && !(m->fp8->keep & T5_FP8_KEEP_FIRST_LAST);
}

// The norm outputs and FFN hidden state of one block (T5Model.keep_sublayer_acts), or
// NULLs: backward then recomputes them into the shared m->scratch.ln_out / m->scratch.tmp_f.
static void acts_layout_kept(T5Model *m, Bump *bp, BlockActs *a, int is_dec, size_t nq, size_t D, size_t F) {
    const int keep = m->keep_sublayer_acts && !m->inference;
    // plain ReLU: the kept h comes with its keep bits, and backward reads those instead of the
    // wi output, which then needs no buffer of its own (acts_layout, relu_bits_kept)
    const int bits = relu_bits_kept(m);
    size_t e = m->elem;
    AttnActs *att[2] = {&a->self, is_dec ? &a->cross : NULL};
    for (int k = 0; k < 2; k++) {
        if (!att[k]) continue;
        att[k]->ln = keep ? bump_take(bp, nq * D * e) : NULL;
        att[k]->rstd = keep ? bump_take(bp, nq * sizeof(float)) : NULL;
    }
    a->ffn.ln = keep ? bump_take(bp, nq * D * e) : NULL;
    a->ffn.rstd = keep ? bump_take(bp, nq * sizeof(float)) : NULL;
    const int h_kept = keep && !fp8_h_unneeded(m);
    a->ffn.h = h_kept ? bump_take(bp, nq * F * e) : NULL;
    if (keep && !h_kept) m->acts.h_unkept_bytes += nq * F * e;
    a->ffn.bits = bits ? bump_take(bp, nq * F / 8) : NULL;
}

// Whole logits up to this many bytes; past it, the head runs in chunks of a quarter of it.
#define T5_HEAD_LOGITS_BYTES ((size_t)1 << 30)

// Rows of m->acts.logits for nT = B*T rows of V logits of e bytes (T5Acts.head_rows).
static size_t head_rows_for(const T5Model *m, size_t nT, size_t V, size_t e) {
    size_t cap = m->acts.head_logits_bytes ? m->acts.head_logits_bytes : T5_HEAD_LOGITS_BYTES;
    if (nT * V * e <= cap) return nT;
    size_t rows = cap / 4 / (V * e);
    if (rows >= 64) rows -= rows % 64;  // whole GEMM tiles
    return rows ? rows : 1;
}

// ---- checkpointing in sub-batches ----------------------------------------------------
// With gradient_checkpointing and sub_batch < B, each block's forward, recompute and backward
// run over the batch in windows of sub_batch rows: rows are independent inside a block (the
// weight gradients and the position bias gradient add over windows: backward ops accumulate),
// so a block's activations and the backward's HK- and F-wide scratch need one window's rows,
// while the residual stream (the checkpoints) holds the whole batch. A window shifts the
// batch-wide pointers to its first row and sets m->B to its rows; the blocks' code is unchanged.

// The rows one window holds for a batch of B.
static int window_rows(const T5Model *m, int B) {
    const int on = m->gradient_checkpointing && !m->inference && m->sub_batch > 0 && m->sub_batch < B;
    return on ? m->sub_batch : B;
}

static void window_enter(T5Model *m, int i0, int rows) {
    const T5Config *c = &m->cfg;
    const size_t D = (size_t)c->d_model, e = m->elem;
    const size_t oS = (size_t)i0 * m->S * D * e, oT = (size_t)i0 * m->T * D * e;
    const int L = c->num_layers, Ld = c->num_decoder_layers;
    m->win.on = 1, m->win.i0 = i0, m->win.B = m->B;
    for (int i = 0; i <= 2 * L; i++) m->win.enc_x[i] = m->acts.enc_x[i], m->acts.enc_x[i] = (char *)m->acts.enc_x[i] + oS;
    for (int i = 0; i <= 3 * Ld; i++) m->win.dec_x[i] = m->acts.dec_x[i], m->acts.dec_x[i] = (char *)m->acts.dec_x[i] + oT;
    m->win.enc_final = m->acts.enc_final, m->acts.enc_final = (char *)m->acts.enc_final + oS;
    m->win.d_enc_x = m->scratch.d_enc_x, m->scratch.d_enc_x = (char *)m->scratch.d_enc_x + oS;
    m->win.d_enc_final = m->scratch.d_enc_final, m->scratch.d_enc_final = (char *)m->scratch.d_enc_final + oS;
    m->win.d_dec_x = m->scratch.d_dec_x, m->scratch.d_dec_x = (char *)m->scratch.d_dec_x + oT;
    m->win.attention_mask = m->acts.attention_mask, m->acts.attention_mask += (size_t)i0 * m->S;
    m->B = rows;
}

static void window_leave(T5Model *m) {
    const int L = m->cfg.num_layers, Ld = m->cfg.num_decoder_layers;
    for (int i = 0; i <= 2 * L; i++) m->acts.enc_x[i] = m->win.enc_x[i];
    for (int i = 0; i <= 3 * Ld; i++) m->acts.dec_x[i] = m->win.dec_x[i];
    m->acts.enc_final = m->win.enc_final;
    m->scratch.d_enc_x = m->win.d_enc_x;
    m->scratch.d_enc_final = m->win.d_enc_final;
    m->scratch.d_dec_x = m->win.d_dec_x;
    m->acts.attention_mask = m->win.attention_mask;
    m->B = m->win.B;
    m->win.on = 0;
}

// Window w of the batch entered (rows [w*rows, ...)): 0 when there is none left. Usage:
//   for (int w = 0; window_next(m, w); w++) { ...block code...; } (leaves the last one)
static int window_next(T5Model *m, int w) {
    if (m->win.on) window_leave(m);
    const int B = m->B, rows = window_rows(m, B), i0 = w * rows;
    if (i0 >= B) return 0;
    if (rows < B) window_enter(m, i0, B - i0 < rows ? B - i0 : rows);
    else if (w > 0) return 0;  // no windows: the whole batch, once
    return 1;
}

// Assign (or, with base NULL, measure) every activation buffer for (B,S,T).
static size_t acts_layout(T5Model *m, char *base, int B, int S, int T) {
    const T5Config *c = &m->cfg;
    Bump bp = {base, 0};
    size_t e = m->elem;
    m->acts.h_unkept_bytes = 0;
    size_t D = (size_t)c->d_model, HK = (size_t)t5_config_inner_dim(c), F = (size_t)c->d_ff;
    size_t H = (size_t)c->num_heads, V = (size_t)c->vocab_size;
    size_t nS = (size_t)B * S, nT = (size_t)B * T, nM = (size_t)B * (S > T ? S : T);
    int L = c->num_layers, Ld = c->num_decoder_layers;
    // checkpointing in sub-batches: a block's activations and the backward's wide scratch
    // (HK and F columns) hold one window of Bw rows (window_enter); the residual stream and
    // the D-wide buffers the whole batch
    const int Bw = window_rows(m, B);
    const size_t wS = (size_t)Bw * S, wT = (size_t)Bw * T, wM = (size_t)Bw * (S > T ? S : T);

    m->acts.input_ids = bump_take(&bp, nS * sizeof(int));
    m->acts.attention_mask = bump_take(&bp, nS * sizeof(int));
    m->acts.dec_ids = bump_take(&bp, nT * sizeof(int));
    m->acts.labels = bump_take(&bp, nT * sizeof(int));
    // Gradient checkpointing keeps only the residual stream at block boundaries; the
    // sublayer outputs inside a block and the block's saved activations live in ONE
    // shared set per stack, recomputed block by block in backward.
    int inf = m->inference, ckpt = m->gradient_checkpointing || inf;
    acts_layout_residual(m, &bp, nS * D * e, nT * D * e);
    // training with checkpointing: the decoder's shared set reuses the encoder's bytes. Every
    // block is recomputed in backward, so the encoder's set is live only during the
    // encoder's forward and backward, the decoder's only during the decoder's.
    const int alias_sets = m->gradient_checkpointing && !inf;
    size_t sets_begin = 0, enc_set_end = 0;
    for (int l = 0; l < L + Ld; l++) {
        int is_dec = l >= L;
        BlockActs *a = is_dec ? &m->acts.dec[l - L] : &m->acts.enc[l];
        if (ckpt && l != 0 && l != L) {  // share block 0's (encoder) or block L's (decoder) buffers
            *a = is_dec ? m->acts.dec[0] : m->acts.enc[0];
            continue;
        }
        if (alias_sets && l == 0) sets_begin = bp.used;
        if (alias_sets && l == L) enc_set_end = bp.used, bp.used = sets_begin;
        size_t nq = is_dec ? wT : wS;
        int Tq = is_dec ? T : S;
        a->self.q = bump_take(&bp, nq * HK * e);
        a->self.k = bump_take(&bp, nq * HK * e);
        a->self.v = bump_take(&bp, nq * HK * e);
        a->self.att = bump_take(&bp, (size_t)Bw * H * Tq * Tq * e);
        a->self.ctx = bump_take(&bp, nq * HK * e);
        if (is_dec) {
            a->cross.q = bump_take(&bp, wT * HK * e);
            a->cross.k = bump_take(&bp, wS * HK * e);
            a->cross.v = bump_take(&bp, wS * HK * e);
            a->cross.att = bump_take(&bp, (size_t)Bw * H * T * S * e);
            a->cross.ctx = bump_take(&bp, wT * HK * e);
        }
        a->ffn.a = relu_bits_kept(m) ? NULL : bump_take(&bp, nq * F * e);
        a->ffn.b = c->is_gated ? bump_take(&bp, nq * F * e) : NULL;
        acts_layout_kept(m, &bp, a, is_dec, nq, D, F);
    }
    if (alias_sets && bp.used < enc_set_end) bp.used = enc_set_end;
    m->acts.enc_bias = bump_take(&bp, H * S * S * e);
    m->acts.dec_bias = bump_take(&bp, H * T * T * e);
    m->acts.enc_final_rstd = bump_take(&bp, nS * sizeof(float));
    m->acts.dec_final_rstd = bump_take(&bp, nT * sizeof(float));
    m->acts.enc_final = bump_take(&bp, nS * D * e);
    m->acts.dec_final = bump_take(&bp, nT * D * e);
    m->acts.head_rows = head_rows_for(m, nT, V, e);
    m->acts.logits = bump_take(&bp, m->acts.head_rows * V * e);
    m->scratch.ln_out = bump_take(&bp, nM * D * e);
    m->scratch.ln_rstd = bump_take(&bp, nM * sizeof(float));
    m->scratch.tmp_f = bump_take(&bp, wM * F * e);
    if (inf) {  // no backward scratch
        m->scratch.d_enc_x = m->scratch.d_dec_x = m->scratch.d_enc_final = m->scratch.d_tmp_d = m->scratch.d_ln = NULL;
        m->scratch.d_ctx = m->scratch.d_q = m->scratch.d_k = m->scratch.d_v = m->scratch.d_h = m->scratch.d_b = m->scratch.d_enc_bias = m->scratch.d_dec_bias = NULL;
        m->scratch.ffn_bits = NULL;
        return bp.used;
    }
    m->scratch.d_enc_x = bump_take(&bp, nS * D * e);
    m->scratch.d_dec_x = bump_take(&bp, nT * D * e);
    m->scratch.d_enc_final = bump_take(&bp, nS * D * e);
    m->scratch.d_tmp_d = bump_take(&bp, nM * D * e);
    m->scratch.d_ln = bump_take(&bp, nM * D * e);
    m->scratch.d_ctx = bump_take(&bp, wM * HK * e);
    // d_q, d_k, d_v back to back in one buffer: block.c batches them, or interleaves the
    // three (self) or d_k, d_v (cross) in it row by row, (rows, 3 HK) / (rows, 2 HK)
    m->scratch.d_q = bump_take(&bp, 3 * wM * HK * e);
    m->scratch.d_k = (char *)m->scratch.d_q + wM * HK * e;
    m->scratch.d_v = (char *)m->scratch.d_k + wM * HK * e;
    m->scratch.d_h = bump_take(&bp, wM * F * e);
    m->scratch.d_b = c->is_gated ? bump_take(&bp, wM * F * e) : NULL;
    m->scratch.ffn_bits = relu_bits(m) && !relu_bits_kept(m) ? bump_take(&bp, wM * F / 8) : NULL;
    m->scratch.d_enc_bias = bump_take(&bp, H * S * S * e);
    m->scratch.d_dec_bias = bump_take(&bp, H * T * T * e);
    return bp.used;
}

static void acts_alloc_tables(T5Model *m) {
    if (m->acts.enc_x) return;
    m->acts.enc_x = callocCheck((size_t)m->cfg.num_layers * 2 + 1, sizeof(void *));
    m->acts.dec_x = callocCheck((size_t)m->cfg.num_decoder_layers * 3 + 1, sizeof(void *));
    m->acts.enc = callocCheck((size_t)m->cfg.num_layers, sizeof(BlockActs));
    m->acts.dec = callocCheck((size_t)m->cfg.num_decoder_layers, sizeof(BlockActs));
    m->win.enc_x = callocCheck((size_t)m->cfg.num_layers * 2 + 1, sizeof(void *));
    m->win.dec_x = callocCheck((size_t)m->cfg.num_decoder_layers * 3 + 1, sizeof(void *));
}

static size_t activation_bytes(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, T5ActsMode mode, int keep,
                               int window) {
    T5Model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.cfg = *cfg;
    tmp.gradient_checkpointing = mode == T5_ACTS_CHECKPOINT;
    tmp.inference = mode == T5_ACTS_INFERENCE;
    tmp.keep_sublayer_acts = keep;
    tmp.sub_batch = window;
    tmp.elem = dtype_size(act_dtype);
    acts_alloc_tables(&tmp);
    size_t bytes = acts_layout(&tmp, NULL, B, S, T);
    free(tmp.acts.enc_x);
    free(tmp.acts.dec_x);
    free(tmp.acts.enc);
    free(tmp.acts.dec);
    free(tmp.win.enc_x);
    free(tmp.win.dec_x);
    return bytes;
}

size_t t5_activation_bytes(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, T5ActsMode mode, int window) {
    return activation_bytes(cfg, act_dtype, B, S, T, mode, 0, window);
}

size_t t5_keep_bytes(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int checkpoint, int window) {
    T5ActsMode mode = checkpoint ? T5_ACTS_CHECKPOINT : T5_ACTS_TRAIN;
    return activation_bytes(cfg, act_dtype, B, S, T, mode, 1, window) -
           activation_bytes(cfg, act_dtype, B, S, T, mode, 0, window);
}

void t5_plan_activations(T5Model *m, int B, int S, int T) {
    if (B <= 0 || S <= 0 || T <= 0) t5_fail("activation plan: batch %d, source length %d, target length %d must be positive", B, S, T);
    acts_alloc_tables(m);
    if (m->acts.arena) m->be->free(m->acts.arena);
    m->acts.arena_bytes = acts_layout(m, NULL, B, S, T);
    m->acts.arena = m->be->alloc(m->acts.arena_bytes);
    acts_layout(m, m->acts.arena, B, S, T);
    m->acts.maxB = B;
    m->acts.maxS = S;
    m->acts.maxT = T;
}

void t5_zero_grads(T5Model *m) {
    if (m->grads) m->be->zero(m->grads, m->lay.total * m->elem);
}

void t5_shift_right(const int *labels, int *dec_ids, int B, int T, int decoder_start_id, int pad_id) {
    for (int b = 0; b < B; b++) {
        dec_ids[b * T] = decoder_start_id;
        for (int t = 1; t < T; t++) {
            int y = labels[b * T + t - 1];
            dec_ids[b * T + t] = y == -100 ? pad_id : y;
        }
    }
}

// ---------------------------------------------------------------------------------
// forward, segment by segment (T5Segment: the caller fetches each segment's unit before it)

static void check_batch(const T5Model *m, const T5Batch *b) {
    if (!m->acts.arena) t5_fail("t5_forward: no activation plan (call t5_plan_activations first)");
    if (b->B < 1 || b->S < 1 || b->T < 1 || b->B > m->acts.maxB || b->S > m->acts.maxS || b->T > m->acts.maxT)
        t5_fail("batch of shape B=%d S=%d T=%d does not fit the activation plan B<=%d S<=%d T<=%d", b->B, b->S, b->T,
                m->acts.maxB, m->acts.maxS, m->acts.maxT);
    int V = m->cfg.vocab_size;
    for (long i = 0; i < (long)b->B * b->S; i++)
        if (b->input_ids[i] < 0 || b->input_ids[i] >= V)
            t5_fail("input_ids[%ld] = %d is outside the vocabulary [0, %d)", i, b->input_ids[i], V);
    for (long i = 0; i < (long)b->B * b->T; i++) {
        if (b->decoder_input_ids[i] < 0 || b->decoder_input_ids[i] >= V)
            t5_fail("decoder_input_ids[%ld] = %d is outside the vocabulary [0, %d)", i, b->decoder_input_ids[i], V);
        if (b->labels[i] != -100 && (b->labels[i] < 0 || b->labels[i] >= V))
            t5_fail("labels[%ld] = %d is outside the vocabulary [0, %d) and is not -100", i, b->labels[i], V);
    }
}

// One encoder block of the training forward: enc_x[2l] -> enc_x[2l+2] (also the recompute
// of checkpointing).
static void enc_block_forward(T5Model *m, int l) {
    T5BlockView v = t5_block_view(m);
    t5_enc_block_forward(&v, l, &m->acts.enc[l], &m->acts.enc_x[2 * l], m->S, m->acts.enc_bias, m->acts.attention_mask);
}

// One decoder block of the training forward: dec_x[3l] -> dec_x[3l+3] (also the
// recompute of checkpointing).
static void dec_block_forward(T5Model *m, int l) {
    SublayerScratch s = t5_train_scratch(&m->scratch);
    T5BlockView v = t5_block_view(m);
    t5_dec_block_forward(&v, &s, l, &m->acts.dec[l], &m->acts.dec_x[3 * l], m->B, m->T, m->acts.enc_final, m->S, m->acts.dec_bias,
                         m->acts.attention_mask, NULL, NULL);
}

void t5_forward_begin(T5Model *m, const T5Batch *batch, long *n_tokens) {
    check_batch(m, batch);
    const Backend *be = m->be;
    int B = m->B = batch->B, S = m->S = batch->S, T = m->T = batch->T;
    size_t nS = (size_t)B * S, nT = (size_t)B * T;
    be->to_device(m->acts.input_ids, batch->input_ids, nS * sizeof(int));
    be->to_device(m->acts.attention_mask, batch->attention_mask, nS * sizeof(int));
    be->to_device(m->acts.dec_ids, batch->decoder_input_ids, nT * sizeof(int));
    be->to_device(m->acts.labels, batch->labels, nT * sizeof(int));
    long count = 0;
    for (size_t i = 0; i < nT; i++) count += batch->labels[i] != -100;
    if (n_tokens) *n_tokens = count;
}

// The head and its loss, in chunks of m->acts.head_rows rows; returns the loss sum. With
// m->head_grad_in_forward and the logits in one chunk, the same pass also writes their
// gradient over them (head_backward then starts from it).
static double head_forward(T5Model *m, float label_smoothing) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int D = c->d_model, V = c->vocab_size;
    size_t nT = (size_t)m->B * m->T;
    const int grad = m->head_grad_in_forward && m->acts.head_rows >= nT;
    double loss = 0.0;
    for (size_t r0 = 0; r0 < nT; r0 += m->acts.head_rows) {
        int n = (int)(nT - r0 < m->acts.head_rows ? nT - r0 : m->acts.head_rows);
        be->matmul_forward(m->acts.logits, (char *)m->acts.dec_final + r0 * D * m->elem, t5_param(m, L->lm_head), n, D, V);
        loss += be->crossentropy_forward_backward(grad ? m->acts.logits : NULL, m->acts.logits, m->acts.labels + r0, n, V,
                                                  label_smoothing, grad ? m->head_dloss : 0.0f);
    }
    m->head_grad_ready = grad;
    return loss;
}

double t5_forward_segment(T5Model *m, const T5Segment *sg, float label_smoothing) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int S = m->S, T = m->T, D = c->d_model, H = c->num_heads, l = sg->layer;
    size_t nS = (size_t)m->B * S, nT = (size_t)m->B * T;
    switch (sg->kind) {
    case T5_SEG_ENC_EMBED:
        be->embedding_forward(m->acts.enc_x[0], m->acts.input_ids, t5_param(m, L->shared), (int)nS, D);
        be->dropout_forward(m->acts.enc_x[0], m->acts.enc_x[0], nS * D, t5_site_dropout(m, 0, 0, 0, SITE_EMBED));
        break;
    case T5_SEG_ENC_BLOCK:
        if (l == 0)
            be->position_bias_forward(m->acts.enc_bias, t5_param(m, L->enc[0].self.relbias), S, S, H, 0,
                                      c->relative_attention_num_buckets, c->relative_attention_max_distance, 1);
        for (int w = 0; window_next(m, w); w++) enc_block_forward(m, l);
        break;
    case T5_SEG_ENC_FINAL:
        be->rmsnorm_forward(m->acts.enc_final, m->acts.enc_final_rstd, m->acts.enc_x[2 * c->num_layers], t5_param(m, L->enc_final_ln),
                            (int)nS, D, c->layer_norm_epsilon);
        be->dropout_forward(m->acts.enc_final, m->acts.enc_final, nS * D, t5_site_dropout(m, 0, 0, 0, SITE_FINAL));
        break;
    case T5_SEG_DEC_EMBED:
        be->embedding_forward(m->acts.dec_x[0], m->acts.dec_ids, t5_param(m, L->shared), (int)nT, D);
        be->dropout_forward(m->acts.dec_x[0], m->acts.dec_x[0], nT * D, t5_site_dropout(m, 1, 0, 0, SITE_EMBED));
        break;
    case T5_SEG_DEC_BLOCK:
        if (l == 0)
            be->position_bias_forward(m->acts.dec_bias, t5_param(m, L->dec[0].self.relbias), T, T, H, 0,
                                      c->relative_attention_num_buckets, c->relative_attention_max_distance, 0);
        for (int w = 0; window_next(m, w); w++) dec_block_forward(m, l);
        break;
    case T5_SEG_DEC_FINAL:
        be->rmsnorm_forward(m->acts.dec_final, m->acts.dec_final_rstd, m->acts.dec_x[3 * c->num_decoder_layers],
                            t5_param(m, L->dec_final_ln), (int)nT, D, c->layer_norm_epsilon);
        be->dropout_forward(m->acts.dec_final, m->acts.dec_final, nT * D, t5_site_dropout(m, 1, 0, 0, SITE_FINAL));
        if (c->scale_decoder_outputs) be->scale(m->acts.dec_final, m->acts.dec_final, t5_head_scale(D), nT * D);
        break;
    case T5_SEG_HEAD:
        return head_forward(m, label_smoothing);
    default:
        t5_die(__FILE__, __LINE__, "t5_forward_segment: a backward-only segment", "a bug: report it");
    }
    return 0.0;
}

// ---------------------------------------------------------------------------------
// backward: each step reads the running residual gradient dx and ADDS the branch's
// contribution into it (backend convention: backward ops accumulate). Unit order: head,
// decoder final norm, decoder blocks (last first), encoder final norm, encoder blocks, shared
// embedding (its gradient is open from the tied head, or from the decoder's embedding, to
// the end).

// The output dropout of what feeds block l of a stack (0 encoder, 1 decoder): block l-1's
// FFN, or the embedding for l == 0. Backward's norm of block l (or the stack's final norm,
// l = number of layers) makes that branch's gradient for the sublayer below (t5_norm_backward).
static DropoutArgs dropout_below(const T5Model *m, int stack, int l) {
    if (l == 0) return t5_site_dropout(m, stack, 0, 0, SITE_EMBED);
    return t5_site_dropout(m, stack, l - 1, stack ? 2 : 1, SITE_FFN_OUT);
}

// Head: from the loss to the gradient of the head's input, in m->scratch.d_tmp_d (B,T,D). dlogits
// overwrite the logits in place (B*T*V is the largest activation); in chunks of m->acts.head_rows
// rows when the plan chunked the head, each chunk's logits recomputed first (the head's
// weight gradient then adds chunk by chunk).
static void head_backward(T5Model *m, float label_smoothing, float dloss) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int D = c->d_model, V = c->vocab_size;
    size_t nT = (size_t)m->B * m->T, e = m->elem;
    const int ready = m->head_grad_ready;  // the forward wrote dlogits already (head_forward)
    m->head_grad_ready = 0;
    if (ready && dloss != m->head_dloss)
        t5_die(__FILE__, __LINE__, "head_backward: dloss differs from the head_dloss the forward used",
               "a bug in the caller (zero/step.c): report it");
    for (size_t r0 = 0; r0 < nT; r0 += m->acts.head_rows) {
        int n = (int)(nT - r0 < m->acts.head_rows ? nT - r0 : m->acts.head_rows);
        void *x = (char *)m->acts.dec_final + r0 * D * e;
        if (m->acts.head_rows < nT) be->matmul_forward(m->acts.logits, x, t5_param(m, L->lm_head), n, D, V);
        if (!ready)
            be->crossentropy_forward_backward(m->acts.logits, m->acts.logits, m->acts.labels + r0, n, V, label_smoothing, dloss);
        be->matmul_backward((char *)m->scratch.d_tmp_d + r0 * D * e, t5_grad(m, L->lm_head), m->acts.logits, x,
                            t5_param(m, L->lm_head), n, D, V, 1);
    }
}

// Decoder block l (its windows), block 0 also the position bias table's gradient.
static void dec_block_backward(T5Model *m, int l) {
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int S = m->S, T = m->T, H = c->num_heads;
    for (int w = 0; window_next(m, w); w++) {  // (one window: the whole batch)
        void **x = &m->acts.dec_x[3 * l], *dxw = m->scratch.d_dec_x;
        if (m->gradient_checkpointing) dec_block_forward(m, l);
        T5BlockView v = t5_block_view(m);
        // each sublayer's norm backward also makes the next one's branch gradient (t5_branch_grad)
        DropoutArgs to_cross = t5_site_dropout(m, 1, l, 1, SITE_ATT_OUT), to_self = t5_site_dropout(m, 1, l, 0, SITE_ATT_OUT);
        DropoutArgs to_prev = dropout_below(m, 1, l);
        t5_ffn_sublayer_backward(&v, &L->dec[l].ffn, &m->acts.dec[l].ffn, x[2], dxw, T, 1, l, 2, &to_cross);
        t5_attn_sublayer_backward(&v, &L->dec[l].cross, &m->acts.dec[l].cross, x[1], dxw, T, m->acts.enc_final, m->scratch.d_enc_final,
                                  S, NULL, 1, l, 1, &to_self);
        t5_attn_sublayer_backward(&v, &L->dec[l].self, &m->acts.dec[l].self, x[0], dxw, T, NULL, NULL, T, m->scratch.d_dec_bias, 1,
                                  l, 0, &to_prev);
    }
    if (l == 0)  // block 0 holds the table every block's position bias came from
        m->be->position_bias_backward(t5_grad(m, L->dec[0].self.relbias), m->scratch.d_dec_bias, T, T, H, 0,
                                      c->relative_attention_num_buckets, c->relative_attention_max_distance, 0);
}

// Encoder block l, as dec_block_backward.
static void enc_block_backward(T5Model *m, int l) {
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int S = m->S, H = c->num_heads;
    for (int w = 0; window_next(m, w); w++) {  // (one window: the whole batch)
        if (m->gradient_checkpointing) enc_block_forward(m, l);
        T5BlockView v = t5_block_view(m);
        DropoutArgs to_self = t5_site_dropout(m, 0, l, 0, SITE_ATT_OUT);
        DropoutArgs to_prev = dropout_below(m, 0, l);
        t5_ffn_sublayer_backward(&v, &L->enc[l].ffn, &m->acts.enc[l].ffn, m->acts.enc_x[2 * l + 1], m->scratch.d_enc_x, S, 0, l, 1,
                                 &to_self);
        t5_attn_sublayer_backward(&v, &L->enc[l].self, &m->acts.enc[l].self, m->acts.enc_x[2 * l], m->scratch.d_enc_x, S, NULL, NULL,
                                  S, m->scratch.d_enc_bias, 0, l, 0, &to_prev);
    }
    if (l == 0)
        m->be->position_bias_backward(t5_grad(m, L->enc[0].self.relbias), m->scratch.d_enc_bias, S, S, H, 0,
                                      c->relative_attention_num_buckets, c->relative_attention_max_distance, 1);
}

void t5_backward_begin(T5Model *m) {
    if (m->inference) t5_fail("t5_backward: the activation plan is forward-only (T5Model.inference); a bug: report it");
    m->scratch.d_tmp_valid = 0;
    m->test.branch_passes = 0;
}

void t5_backward_segment(T5Model *m, const T5Segment *sg, float label_smoothing, float dloss) {
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int S = m->S, T = m->T, D = c->d_model, H = c->num_heads;
    const int Le = c->num_layers, Ld = c->num_decoder_layers;
    size_t nS = (size_t)m->B * S, nT = (size_t)m->B * T, e = m->elem;
    DropoutArgs first;
    const T5BlockView bv = t5_block_view(m);  // (no window here: the whole batch)
    switch (sg->kind) {
    case T5_SEG_HEAD:
        head_backward(m, label_smoothing, dloss);
        break;
    case T5_SEG_DEC_OUT:
        if (c->scale_decoder_outputs) be->scale(m->scratch.d_tmp_d, m->scratch.d_tmp_d, t5_head_scale(D), nT * D);
        // through the dropout: dropout_backward into zeros, as one write (no memset)
        be->dropout_forward(m->scratch.d_ln, m->scratch.d_tmp_d, nT * D, t5_site_dropout(m, 1, 0, 0, SITE_FINAL));
        be->zero(m->scratch.d_dec_x, nT * D * e);
        break;
    case T5_SEG_DEC_FINAL:  // from the head's input to the gradient of the last decoder block's output
        first = dropout_below(m, 1, Ld);
        t5_norm_backward(&bv, m->scratch.d_dec_x, t5_grad(m, L->dec_final_ln), m->scratch.d_ln, m->acts.dec_x[3 * Ld],
                         t5_param(m, L->dec_final_ln), m->acts.dec_final_rstd, (int)nT, &first);
        break;
    case T5_SEG_DEC_CLEAR:
        be->zero(m->scratch.d_enc_final, nS * D * e);
        be->zero(m->scratch.d_dec_bias, (size_t)H * T * T * e);
        break;
    case T5_SEG_DEC_BLOCK:
        dec_block_backward(m, sg->layer);
        break;
    case T5_SEG_DEC_EMBED:  // leaves the gradient of the encoder output in m->scratch.d_enc_final
        t5_branch_grad(&bv, m->scratch.d_dec_x, nT * D, dropout_below(m, 1, 0));
        be->embedding_backward(t5_grad(m, L->shared), m->scratch.d_tmp_d, m->acts.dec_ids, (int)nT, D);
        break;
    case T5_SEG_ENC_OUT:
        // through the dropout: dropout_backward into zeros, as one write (no memset)
        be->dropout_forward(m->scratch.d_ln, m->scratch.d_enc_final, nS * D, t5_site_dropout(m, 0, 0, 0, SITE_FINAL));
        be->zero(m->scratch.d_enc_x, nS * D * e);
        break;
    case T5_SEG_ENC_FINAL:
        first = dropout_below(m, 0, Le);
        t5_norm_backward(&bv, m->scratch.d_enc_x, t5_grad(m, L->enc_final_ln), m->scratch.d_ln, m->acts.enc_x[2 * Le],
                         t5_param(m, L->enc_final_ln), m->acts.enc_final_rstd, (int)nS, &first);
        break;
    case T5_SEG_ENC_CLEAR:
        be->zero(m->scratch.d_enc_bias, (size_t)H * S * S * e);
        break;
    case T5_SEG_ENC_BLOCK:
        enc_block_backward(m, sg->layer);
        break;
    case T5_SEG_ENC_EMBED:
        t5_branch_grad(&bv, m->scratch.d_enc_x, nS * D, dropout_below(m, 0, 0));
        be->embedding_backward(t5_grad(m, L->shared), m->scratch.d_tmp_d, m->acts.input_ids, (int)nS, D);
        break;
    }
}
