// model/kv_decoder.c: the incremental decoder of generation (see kv_decoder.h): its
// buffers, the encoder pass with the cross-attention K/V per batch item, one decoder step
// over the position-major self-attention cache read through the beam table, and the beam
// table's reordering.
#include "kv_decoder.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../common/t5_env.h"
#include "block.h"
#include "bump.h"
#include "../formats/safetensors.h"

// Assign (or, with base NULL, measure) every buffer of the decoder.
static size_t decoder_layout(T5Decoder *d, char *base) {
    const T5Config *c = &d->m->cfg;
    Bump bp = {base, 0};
    size_t e = d->m->elem, N = (size_t)d->N, B = (size_t)d->B, S = (size_t)d->S, cap = (size_t)d->cap;
    size_t D = (size_t)c->d_model, HK = (size_t)t5_config_inner_dim(c), F = (size_t)c->d_ff;
    size_t H = (size_t)c->num_heads, V = (size_t)c->vocab_size;
    for (int l = 0; l < c->num_decoder_layers; l++) {
        d->k_cache[l] = bump_take(&bp, cap * N * HK * e);
        d->v_cache[l] = bump_take(&bp, cap * N * HK * e);
        d->cross_k[l] = bump_take(&bp, B * S * HK * e);
        d->cross_v[l] = bump_take(&bp, B * S * HK * e);
    }
    d->table[0] = bump_take(&bp, N * cap * sizeof(int));
    d->table[1] = bump_take(&bp, N * cap * sizeof(int));
    d->src_rows = bump_take(&bp, N * sizeof(int));
    d->mask = bump_take(&bp, B * S * sizeof(int));
    d->tokens = bump_take(&bp, (N + 1) * sizeof(int));
    d->pos = d->tokens ? d->tokens + N : NULL;
    // k_new, v_new, ctx in a row: the fused q, k, v GEMM's (N, 3 HK) output lies over them
    // (qkv_append reads it before attention_decode writes ctx; k_new / v_new serve only the
    // unfused path), so the fusion costs no memory
    d->k_new = bump_take(&bp, N * HK * e);
    d->v_new = bump_take(&bp, N * HK * e);
    d->ctx = bump_take(&bp, N * HK * e);
    d->qkv = d->k_new;
    d->x = bump_take(&bp, N * D * e);
    d->y = bump_take(&bp, N * D * e);
    d->ln = bump_take(&bp, N * D * e);
    d->rstd = bump_take(&bp, N * sizeof(float));
    d->q = bump_take(&bp, N * HK * e);
    d->bias = bump_take(&bp, H * cap * e);
    d->ffa = bump_take(&bp, N * F * e);
    d->ffb = c->is_gated ? bump_take(&bp, N * F * e) : NULL;
    d->ffh = bump_take(&bp, N * F * e);
    d->logits = bump_take(&bp, N * V * e);
    d->topk_scores = bump_take(&bp, B * 2 * d->beams * sizeof(float));
    d->topk_idx = bump_take(&bp, B * 2 * d->beams * sizeof(int));
    d->beam_scores = bump_take(&bp, N * sizeof(float));
    return bp.used;
}

// The shape fields and the per-layer pointer tables (no device memory yet).
static void decoder_shape(T5Decoder *d, T5Model *m, int B, int beams, int S, int max_length) {
    memset(d, 0, sizeof *d);
    if (B < 1 || beams < 1 || S < 1 || max_length < 2)
        t5_fail("generation: batch %d, beams %d, source length %d must be >= 1 and max_length %d >= 2", B, beams, S,
                max_length);
    d->m = m;
    d->B = B;
    d->beams = beams;
    d->N = B * beams;
    d->S = S;
    d->cap = max_length - 1;
    int Ld = m->cfg.num_decoder_layers;
    void **tables = callocCheck((size_t)Ld * 4, sizeof(void *));
    d->k_cache = tables;
    d->v_cache = tables + Ld;
    d->cross_k = tables + 2 * Ld;
    d->cross_v = tables + 3 * Ld;
}

size_t t5_decoder_bytes(const T5Config *cfg, Dtype act_dtype, int B, int beams, int S, int max_length) {
    T5Model m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.elem = act_dtype == DTYPE_F32 ? 4 : 2;
    T5Decoder d;
    decoder_shape(&d, &m, B, beams, S, max_length);
    size_t bytes = decoder_layout(&d, NULL);
    free(d.k_cache);
    return bytes;
}

void t5_decoder_init(T5Decoder *d, T5Model *m, int B, int beams, int S, int max_length) {
    if (!m->acts.arena || B > m->acts.maxB || S > m->acts.maxS)
        t5_fail("generation: batch B=%d S=%d does not fit the activation plan (B<=%d S<=%d) the encoder runs in\n"
                "HINT: call t5_plan_activations(m, B, S, T) with B and S at least the generation batch's",
                B, S, m->acts.arena ? m->acts.maxB : 0, m->acts.arena ? m->acts.maxS : 0);
    decoder_shape(d, m, B, beams, S, max_length);
    d->arena_bytes = decoder_layout(d, NULL);
    d->arena = m->be->alloc(d->arena_bytes);
    decoder_layout(d, d->arena);
    d->table_host = mallocCheck((size_t)d->N * d->cap * sizeof(int));
    for (int i = 0; i < d->N; i++)
        for (int j = 0; j < d->cap; j++) d->table_host[(size_t)i * d->cap + j] = i;
    d->step_host = mallocCheck(((size_t)d->N + 1) * sizeof(int));
    // graphs where a step is only launches (kv_decoder.h says why not fp16 nor fetched units)
    const Backend *be = m->be;
    const int units_fetched = m->visitor && (m->visitor->fetch || m->visitor->release);
    const char *off = t5_env_get(T5_ENV_GEN_GRAPHS);
    d->graphs = be->graph_begin && be->act_dtype != DTYPE_F16 && !units_fetched && !(off && !strcmp(off, "0"));
}

void t5_decoder_free(T5Decoder *d) {
    for (int k = 0; k < 2; k++)
        if (d->graph[k]) d->m->be->graph_free(d->graph[k]);
    free(d->step_host);
    if (d->arena) d->m->be->free(d->arena);
    free(d->k_cache);  // the pointer-table block
    free(d->logits_host);
    free(d->logits_raw);
    free(d->table_host);
    memset(d, 0, sizeof *d);
}

void t5_decoder_encode(T5Decoder *d, const int *input_ids, const int *attention_mask) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    size_t nS = (size_t)d->B * d->S;
    m->B = d->B;
    m->S = d->S;
    be->to_device(m->acts.input_ids, input_ids, nS * sizeof(int));
    be->to_device(m->acts.attention_mask, attention_mask, nS * sizeof(int));
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;  // generation is evaluation
    t5_encoder_forward(m);
    m->dropout_p = saved_p;
    t5_decoder_encoded(d, attention_mask);
}

void t5_decoder_encoded(T5Decoder *d, const int *attention_mask) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int D = c->d_model, HK = t5_config_inner_dim(c);
    size_t nS = (size_t)d->B * d->S;
    if (m->B != d->B || m->S != d->S)
        t5_fail("t5_decoder_encoded: the encoder ran on %d x %d, the decoder is for %d x %d", m->B, m->S, d->B, d->S);
    be->to_device(d->mask, attention_mask, nS * sizeof(int));
    for (int l = 0; l < c->num_decoder_layers; l++) {
        const AttnOffsets *w = &L->dec[l].cross;
        t5_unit_fetch(m, L->unit_dec0 + l);
        // the causal bias by distance, once per batch: one query at position cap-1 over keys
        // 0..cap-1 holds every relative position -(cap-1)..0 (the step at t reads it from
        // cap-1-t on: KvView.pos); the same table entries as a bias with q_offset t
        if (l == 0)
            be->position_bias_forward(d->bias, t5_param(m, L->dec[0].self.relbias), 1, d->cap, c->num_heads,
                                      d->cap - 1, c->relative_attention_num_buckets,
                                      c->relative_attention_max_distance, 0);
        be->matmul_forward(d->cross_k[l], m->acts.enc_final, t5_param(m, w->k), (int)nS, D, HK);
        be->matmul_forward(d->cross_v[l], m->acts.enc_final, t5_param(m, w->v), (int)nS, D, HK);
        t5_unit_release(m, L->unit_dec0 + l);
    }
    // every row reads its own slots until beams are reordered
    for (int k = 0; k < 2; k++) be->to_device(d->table[k], d->table_host, (size_t)d->N * d->cap * sizeof(int));
    d->cur = 0;
    d->t = 0;
}

// The step's inputs to the device, one copy: each row's token and the position t (d->pos).
static void decoder_upload(T5Decoder *d, const int *tokens) {
    const int N = d->N, V = d->m->cfg.vocab_size;
    if (d->t >= d->cap)
        t5_fail("t5_decoder_step: position %d is past the cache capacity %d (max_length %d)", d->t, d->cap, d->cap + 1);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= V) t5_fail("t5_decoder_step: token %d of row %d is outside [0, %d)", tokens[i], i, V);
    memcpy(d->step_host, tokens, (size_t)N * sizeof(int));
    d->step_host[N] = d->t;
    d->m->be->to_device(d->tokens, d->step_host, ((size_t)N + 1) * sizeof(int));
}

// The step's launches: logits (N,V) into d->logits of the tokens at position t, both read
// from d->tokens; with K > 0 also beam_topk's candidates (d->beam_scores when with_scores).
// No argument depends on t or on the tokens, so this can be captured as a graph (beyond the
// live beam table, table[cur]: one graph per cur).
static void decoder_launch(T5Decoder *d, int K, int with_scores) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    const T5Config *c = &m->cfg;
    const ParamLayout *L = &m->lay;
    int N = d->N, S = d->S, cap = d->cap;
    int D = c->d_model, V = c->vocab_size;
    float eps = c->layer_norm_epsilon;
    size_t nD = (size_t)N * D;
    t5_unit_fetch(m, L->unit_shared);
    be->embedding_forward(d->x, d->tokens, t5_param(m, L->shared), N, D);
    t5_unit_release(m, L->unit_shared);
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;  // generation is evaluation
    SublayerScratch s = {d->ln, d->rstd, d->ffh, d->y};
    BlockActs acts = {.self = {.q = d->q, .ctx = d->ctx}, .cross = {.q = d->q, .ctx = d->ctx},
                      .ffn = {.a = d->ffa, .b = d->ffb}};  // norms and hidden state in the scratch s
    void *x[4] = {d->x, d->x, d->x, d->x};  // in place: each sublayer adds its output (in d->y) to d->x
    for (int l = 0; l < c->num_decoder_layers; l++) {
        t5_unit_fetch(m, L->unit_dec0 + l);
        // query position t (d->pos) against keys 0..t, the bias by distance; the
        // step's keys/values go into the cache at t: q, k, v by one GEMM into d->qkv, split by
        // qkv_append (block.c; kv_append of k_new / v_new where the weights are not adjacent)
        KvCache self = {{d->k_cache[l], d->v_cache[l], 1, N, d->table[d->cur], cap, 1, NULL, 0, d->pos}, cap,
                        d->k_new, d->v_new, d->qkv};
        KvCache cross = {{d->cross_k[l], d->cross_v[l], S, 1, NULL, 0, d->beams, d->mask, S, NULL}, S, NULL, NULL, NULL};
        T5BlockView v = t5_block_view(m);
        t5_dec_block_forward(&v, &s, l, &acts, x, N, 1, NULL, S, d->bias, NULL, &self, &cross);
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
    if (K > 0) be->beam_topk(d->topk_scores, d->topk_idx, d->logits, with_scores ? d->beam_scores : NULL, d->B, d->beams, V, K);
}

const float *t5_decoder_step(T5Decoder *d, const int *tokens) {
    T5Model *m = d->m;
    const Backend *be = m->be;
    decoder_upload(d, tokens);
    decoder_launch(d, 0, 0);
    size_t NV = (size_t)d->N * m->cfg.vocab_size;
    if (!d->logits_host) {  // on first use: the search (t5_decoder_step_topk) never needs them
        d->logits_host = mallocCheck(NV * sizeof(float));
        d->logits_raw = be->act_dtype == DTYPE_F32 ? NULL : mallocCheck(NV * m->elem);
    }
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
    const int B = d->B, nb = d->beams, K = beam_scores ? 2 * nb : 1;
    if (!beam_scores && nb != 1) t5_fail("t5_decoder_step_topk: greedy (no beam scores) with %d beams; it needs 1", nb);
    double t0 = d->prof ? clock_seconds() : 0.0, t2 = 0.0;
    decoder_upload(d, tokens);
    if (beam_scores) be->to_device(d->beam_scores, beam_scores, (size_t)d->N * sizeof(float));
    // the first step runs op by op (it makes the GEMM plans and scratch the capture then finds);
    // after it, each live table's step is captured once and replayed: the same launches
    if (d->graphs && d->t > 0) {
        if (!d->graph[d->cur]) {
            be->graph_begin();
            decoder_launch(d, K, beam_scores != NULL);
            d->graph[d->cur] = be->graph_end();
        }
        be->graph_replay(d->graph[d->cur]);
    } else {
        decoder_launch(d, K, beam_scores != NULL);
    }
    if (d->prof) {  // the read-back below waits for the GPU anyway: wait here, to see how long
        double t1 = clock_seconds();
        be->synchronize();
        t2 = clock_seconds();
        d->prof->issue += t1 - t0;
        d->prof->gpu_wait += t2 - t1;
        d->prof->steps++;
    }
    be->to_host(out_scores, d->topk_scores, (size_t)B * K * sizeof(float));
    be->to_host(out_idx, d->topk_idx, (size_t)B * K * sizeof(int));
    if (d->prof) d->prof->readback += clock_seconds() - t2;
    d->t++;
}

void t5_decoder_reorder(T5Decoder *d, const int *src_rows) {
    const Backend *be = d->m->be;
    int N = d->N, identity = 1;
    for (int i = 0; i < N; i++) {
        if (src_rows[i] < 0 || src_rows[i] >= N) t5_fail("t5_decoder_reorder: source row %d is outside [0, %d)", src_rows[i], N);
        identity &= src_rows[i] == i;
    }
    if (identity || d->t == 0) return;
    double t0 = d->prof ? clock_seconds() : 0.0;
    be->to_device(d->src_rows, src_rows, (size_t)N * sizeof(int));
    be->beam_table_reorder(d->table[1 - d->cur], d->table[d->cur], d->src_rows, N, d->cap, d->t);
    d->cur = 1 - d->cur;
    if (d->prof) d->prof->reorder += clock_seconds() - t0;
}
