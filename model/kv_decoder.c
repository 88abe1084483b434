// model/kv_decoder.c: the incremental decoder of generation (see kv_decoder.h): its
// buffers, the encoder pass with the cross-attention K/V per beam, one decoder step over
// the self-attention K/V cache, and the cache reordering of beam search.
#include "kv_decoder.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "block.h"
#include "bump.h"
#include "safetensors.h"

// Assign (or, with base NULL, measure) every buffer of the decoder.
static size_t decoder_layout(T5Decoder *d, char *base) {
    const T5Config *c = &d->m->cfg;
    Bump bp = {base, 0};
    size_t e = d->m->elem, N = (size_t)d->N, S = (size_t)d->S, cap = (size_t)d->cap;
    size_t D = (size_t)c->d_model, HK = (size_t)t5_config_inner_dim(c), F = (size_t)c->d_ff;
    size_t H = (size_t)c->num_heads, V = (size_t)c->vocab_size;
    for (int l = 0; l < c->num_decoder_layers; l++) {
        d->k_cache[l] = bump_take(&bp, N * cap * HK * e);
        d->v_cache[l] = bump_take(&bp, N * cap * HK * e);
        d->k_spare[l] = bump_take(&bp, N * cap * HK * e);
        d->v_spare[l] = bump_take(&bp, N * cap * HK * e);
        d->cross_k[l] = bump_take(&bp, N * S * HK * e);
        d->cross_v[l] = bump_take(&bp, N * S * HK * e);
    }
    d->mask = bump_take(&bp, N * S * sizeof(int));
    d->tokens = bump_take(&bp, N * sizeof(int));
    d->x = bump_take(&bp, N * D * e);
    d->y = bump_take(&bp, N * D * e);
    d->ln = bump_take(&bp, N * D * e);
    d->rstd = bump_take(&bp, N * sizeof(float));
    d->q = bump_take(&bp, N * HK * e);
    d->ctx = bump_take(&bp, N * HK * e);
    d->kv_new = bump_take(&bp, N * HK * e);
    d->att = bump_take(&bp, N * H * (cap > S ? cap : S) * e);
    d->bias = bump_take(&bp, H * cap * e);
    d->ffa = bump_take(&bp, N * F * e);
    d->ffb = c->is_gated ? bump_take(&bp, N * F * e) : NULL;
    d->ffh = bump_take(&bp, N * F * e);
    d->kv_tmp = bump_take(&bp, (size_t)d->B * S * HK * e);
    d->logits = bump_take(&bp, N * V * e);
    d->topk_scores = bump_take(&bp, (size_t)d->B * 2 * d->beams * sizeof(float));
    d->topk_idx = bump_take(&bp, (size_t)d->B * 2 * d->beams * sizeof(int));
    d->beam_scores = bump_take(&bp, N * sizeof(float));
    return bp.used;
}

void t5_decoder_init(T5Decoder *d, T5Model *m, int B, int beams, int S, int max_length) {
    memset(d, 0, sizeof *d);
    if (B < 1 || beams < 1 || S < 1 || max_length < 2)
        t5_fail("generation: batch %d, beams %d, source length %d must be >= 1 and max_length %d >= 2", B, beams, S,
                max_length);
    if (!m->arena || B > m->maxB || S > m->maxS)
        t5_fail("generation: batch B=%d S=%d does not fit the activation plan (B<=%d S<=%d) the encoder runs in\n"
                "HINT: call t5_plan_activations(m, B, S, T) with B and S at least the generation batch's",
                B, S, m->arena ? m->maxB : 0, m->arena ? m->maxS : 0);
    const T5Config *c = &m->cfg;
    d->m = m;
    d->B = B;
    d->beams = beams;
    d->N = B * beams;
    d->S = S;
    d->cap = max_length - 1;
    int Ld = c->num_decoder_layers;
    void **tables = callocCheck((size_t)Ld * 6, sizeof(void *));
    d->k_cache = tables;
    d->v_cache = tables + Ld;
    d->k_spare = tables + 2 * Ld;
    d->v_spare = tables + 3 * Ld;
    d->cross_k = tables + 4 * Ld;
    d->cross_v = tables + 5 * Ld;
    d->arena_bytes = decoder_layout(d, NULL);
    d->arena = m->be->alloc(d->arena_bytes);
    decoder_layout(d, d->arena);
    size_t NV = (size_t)d->N * c->vocab_size;
    d->logits_host = mallocCheck(NV * sizeof(float));
    d->logits_raw = m->be->act_dtype == DTYPE_F32 ? NULL : mallocCheck(NV * m->elem);
    d->rows_dst = mallocCheck((size_t)d->N * d->cap * sizeof(int));
    d->rows_src = mallocCheck((size_t)d->N * d->cap * sizeof(int));
    d->mask_host = mallocCheck((size_t)d->N * S * sizeof(int));
}

void t5_decoder_free(T5Decoder *d) {
    if (d->arena) d->m->be->free(d->arena);
    free(d->k_cache);  // the table block
    free(d->logits_host);
    free(d->logits_raw);
    free(d->rows_dst);
    free(d->rows_src);
    free(d->mask_host);
    memset(d, 0, sizeof *d);
}

void t5_decoder_encode(T5Decoder *d, const int *input_ids, const int *attention_mask) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int B = d->B, S = d->S, nb = d->beams, N = d->N, D = c->d_model, HK = t5_config_inner_dim(c);
    size_t nS = (size_t)B * S;
    m->B = B;
    m->S = S;
    be->to_device(m->input_ids, input_ids, nS * sizeof(int));
    be->to_device(m->attention_mask, attention_mask, nS * sizeof(int));
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;  // generation is evaluation
    t5_encoder_forward(m);
    m->dropout_p = saved_p;

    // row b*nb+j of the decoder uses batch item b's encoder output and mask
    for (int i = 0; i < N; i++) {
        d->rows_src[i] = i / nb;
        memcpy(d->mask_host + (size_t)i * S, attention_mask + (size_t)(i / nb) * S, (size_t)S * sizeof(int));
    }
    be->to_device(d->mask, d->mask_host, (size_t)N * S * sizeof(int));
    for (int l = 0; l < c->num_decoder_layers; l++) {
        const AttnOffsets *w = &L->dec[l].cross;
        void *dst[2] = {d->cross_k[l], d->cross_v[l]};
        size_t wo[2] = {w->k, w->v};
        t5_unit_fetch(m, L->unit_dec0 + l);
        for (int kv = 0; kv < 2; kv++) {
            if (nb == 1) {
                be->matmul_forward(dst[kv], m->enc_final, t5_param(m, wo[kv]), (int)nS, D, HK);
            } else {
                be->matmul_forward(d->kv_tmp, m->enc_final, t5_param(m, wo[kv]), (int)nS, D, HK);
                be->copy_rows(dst[kv], NULL, d->kv_tmp, d->rows_src, N, (size_t)S * HK);
            }
        }
        t5_unit_release(m, L->unit_dec0 + l);
    }
    d->t = 0;
}

// The step on the device: one token per row at position t, logits (N,V) into d->logits.
static void decoder_step_device(T5Decoder *d, const int *tokens) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int N = d->N, S = d->S, t = d->t, cap = d->cap;
    int D = c->d_model, H = c->num_heads, V = c->vocab_size;
    float eps = c->layer_norm_epsilon;
    size_t nD = (size_t)N * D;
    if (t >= cap) t5_fail("t5_decoder_step: position %d is past the cache capacity %d (max_length %d)", t, cap, cap + 1);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= V) t5_fail("t5_decoder_step: token %d of row %d is outside [0, %d)", tokens[i], i, V);

    be->to_device(d->tokens, tokens, (size_t)N * sizeof(int));
    t5_unit_fetch(m, L->unit_shared);
    be->embedding_forward(d->x, d->tokens, t5_param(m, L->shared), N, D);
    t5_unit_release(m, L->unit_shared);
    for (int i = 0; i < N; i++) d->rows_dst[i] = i * cap + t;
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;  // generation is evaluation
    SublayerScratch s = {d->ln, d->rstd, d->ffh, d->y};
    BlockActs acts = {{d->q, d->kv_new, d->kv_new, d->att, d->ctx}, {d->q, NULL, NULL, d->att, d->ctx}, {d->ffa, d->ffb}};
    void *x[4] = {d->x, d->x, d->x, d->x};  // in place: each sublayer adds its output (in d->y) to d->x
    for (int l = 0; l < c->num_decoder_layers; l++) {
        t5_unit_fetch(m, L->unit_dec0 + l);
        // query position t against keys 0..t, causal bucketing (HF compute_bias with cache_position)
        if (l == 0)
            be->position_bias_forward(d->bias, t5_param(m, L->dec[0].self.relbias), 1, t + 1, H, t,
                                      c->relative_attention_num_buckets, c->relative_attention_max_distance, 0);
        KvCache self = {d->k_cache[l], d->v_cache[l], cap, t + 1, d->rows_dst};
        KvCache cross = {d->cross_k[l], d->cross_v[l], S, S, NULL};
        t5_dec_block_forward(m, &s, l, &acts, x, N, 1, NULL, S, d->bias, d->mask, &self, &cross);
        t5_unit_release(m, L->unit_dec0 + l);
    }
    m->dropout_p = saved_p;
    t5_unit_fetch(m, L->unit_dec_final);
    be->rmsnorm_forward(d->ln, d->rstd, d->x, t5_param(m, L->dec_final_ln), N, D, eps);
    t5_unit_release(m, L->unit_dec_final);
    if (c->scale_decoder_outputs) be->scale(d->ln, d->ln, t5_head_scale(D), nD);
    t5_unit_fetch(m, L->unit_lm_head);
    be->matmul_forward(d->logits, d->ln, t5_param(m, L->lm_head), N, D, V);
    t5_unit_release(m, L->unit_lm_head);
}

const float *t5_decoder_step(T5Decoder *d, const int *tokens) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    decoder_step_device(d, tokens);
    size_t NV = (size_t)d->N * m->cfg.vocab_size;
    if (be->act_dtype == DTYPE_F32) {
        be->to_host(d->logits_host, d->logits, NV * sizeof(float));
    } else {  // HF: logits[:, -1, :].to(float32)
        be->to_host(d->logits_raw, d->logits, NV * m->elem);
        const uint16_t *r = d->logits_raw;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < NV; i++)
            d->logits_host[i] = be->act_dtype == DTYPE_BF16 ? st_bf16_to_f32(r[i]) : st_f16_to_f32(r[i]);
    }
    d->t++;
    return d->logits_host;
}

void t5_decoder_step_topk(T5Decoder *d, const int *tokens, const float *beam_scores, float *out_scores, int *out_idx) {
    const Backend *be = d->m->be;
    const int B = d->B, nb = d->beams, V = d->m->cfg.vocab_size, K = beam_scores ? 2 * nb : 1;
    if (!beam_scores && nb != 1) t5_fail("t5_decoder_step_topk: greedy (no beam scores) with %d beams; it needs 1", nb);
    decoder_step_device(d, tokens);
    if (beam_scores) be->to_device(d->beam_scores, beam_scores, (size_t)d->N * sizeof(float));
    be->beam_topk(d->topk_scores, d->topk_idx, d->logits, beam_scores ? d->beam_scores : NULL, B, nb, V, K);
    be->to_host(out_scores, d->topk_scores, (size_t)B * K * sizeof(float));
    be->to_host(out_idx, d->topk_idx, (size_t)B * K * sizeof(int));
    d->t++;
}

void t5_decoder_reorder(T5Decoder *d, const int *src_rows) {
    const Backend *be = d->m->be;
    int N = d->N, t = d->t, cap = d->cap, HK = t5_config_inner_dim(&d->m->cfg);
    int identity = 1;
    for (int i = 0; i < N; i++) {
        if (src_rows[i] < 0 || src_rows[i] >= N) t5_fail("t5_decoder_reorder: source row %d is outside [0, %d)", src_rows[i], N);
        identity &= src_rows[i] == i;
    }
    if (identity || t == 0) return;
    // positions 0..t-1 of every row, one HK-wide cache row each
    for (int i = 0; i < N; i++)
        for (int j = 0; j < t; j++) {
            d->rows_dst[(size_t)i * t + j] = i * cap + j;
            d->rows_src[(size_t)i * t + j] = src_rows[i] * cap + j;
        }
    for (int l = 0; l < d->m->cfg.num_decoder_layers; l++) {
        be->copy_rows(d->k_spare[l], d->rows_dst, d->k_cache[l], d->rows_src, N * t, (size_t)HK);
        be->copy_rows(d->v_spare[l], d->rows_dst, d->v_cache[l], d->rows_src, N * t, (size_t)HK);
        void *tk = d->k_cache[l], *tv = d->v_cache[l];
        d->k_cache[l] = d->k_spare[l];
        d->v_cache[l] = d->v_spare[l];
        d->k_spare[l] = tk;
        d->v_spare[l] = tv;
    }
}
