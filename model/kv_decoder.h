// model/kv_decoder.h: the incremental decoder of generation (model/generate.c): the
// encoder runs once, each decoder layer's cross-attention K/V is computed once and copied
// per beam, then the decoder advances one position at a time over a per-layer
// self-attention K/V cache. Each step runs the same decoder block as training
// (model/block.c, t5_dec_block_forward) with one query position and dropout off.
//
// Letters: B batch, S source length, N = B*beams decoder rows, cap = max_length-1 cache
// positions, D d_model, HK = num_heads*d_kv, H heads, F d_ff, V vocab.
#pragma once
#include "t5.h"

// One allocation per decoder (be->alloc), sized for N rows and cap positions; no
// allocation per step. Row b*beams+j is beam j of batch item b.
typedef struct {
    T5Model *m;
    int B, beams, N, S, cap;
    int t;                      // positions decoded so far (the next step writes position t)
    void *arena;                // one backend allocation holding everything below
    size_t arena_bytes;
    void **k_cache, **v_cache;  // (Ld) each (N, cap, HK) self-attention keys / values
    void **k_spare, **v_spare;  // (Ld) each (N, cap, HK): reorder targets, swapped with the caches
    void **cross_k, **cross_v;  // (Ld) each (N, S, HK) cross-attention keys / values
    int *mask;                  // (N, S) encoder attention mask per row
    int *tokens;                // (N) input token of the step
    void *x, *y, *ln;           // (N, D) residual stream, sublayer output before the residual add, norm output
    float *rstd;                // (N)
    void *q, *ctx, *kv_new;     // (N, HK); kv_new: the step's K, then its V, before the cache append
    void *att;                  // (N, H, max(cap, S)) attention probabilities (unused after)
    void *bias;                 // (H, cap) position bias of the step's query
    void *ffa, *ffb, *ffh;      // (N, F) FFN input projections and activation
    void *kv_tmp;               // (B, S, HK) encoder K or V before the per-beam copies
    void *logits;               // (N, V)
    float *topk_scores;         // (B, 2*beams) beam_topk's candidates (t5_decoder_step_topk)
    int *topk_idx;              // (B, 2*beams) their flat indices beam*V + token
    float *beam_scores;         // (N) the running beam scores, uploaded per step_topk
    // host side
    float *logits_host;         // (N, V) fp32 logits of the last step
    void *logits_raw;           // (N, V) act-dtype bytes when act_dtype is not fp32, else NULL
    int *rows_dst, *rows_src;   // (N * cap) row index lists for copy_rows
    int *mask_host;             // (N, S)
} T5Decoder;

// Allocate for B batch items x beams rows, sources up to S, sequences up to max_length
// (so cap = max_length-1 positions are ever fed to the decoder).
void t5_decoder_init(T5Decoder *d, T5Model *m, int B, int beams, int S, int max_length);
// Encoder + cross-attention K/V for a (B,S) host batch; resets the cache (t = 0).
void t5_decoder_encode(T5Decoder *d, const int *input_ids, const int *attention_mask);
// Feed one token per row (N host ids) at position t; returns the host fp32 logits (N,V)
// of that position (valid until the next step). t advances by one.
const float *t5_decoder_step(T5Decoder *d, const int *tokens);
// The same step with the search's candidate selection on the device (backend beam_topk):
// beam_scores (N host floats) the running scores: out (B, K = 2*beams) candidates, scores
// fp32 log-probability + beam score and flat indices beam*V + token, sorted descending,
// ties by lower index; beam_scores NULL: greedy, K = 1, the argmax of each row's logits
// (out_scores its logit; beams must be 1). Only the candidates come back to the host.
// Nothing calls it yet (issue 15: the next step moves generate.c's search onto it).
void t5_decoder_step_topk(T5Decoder *d, const int *tokens, const float *beam_scores, float *out_scores, int *out_idx);
// Beam reordering: new row i continues the sequence (cache) of old row src_rows[i] (N host ints).
void t5_decoder_reorder(T5Decoder *d, const int *src_rows);
void t5_decoder_free(T5Decoder *d);
