// model/kv_decoder.h: the incremental decoder of generation (model/generate.c): the
// encoder runs once per batch, each decoder layer's cross-attention K/V is computed once
// per batch item (its beams read the same rows), then the decoder advances one position
// at a time over a per-layer self-attention K/V cache. Each step runs the same decoder
// block as training (model/block.c, t5_dec_block_forward) with one query position and
// dropout off; attention reads the caches in place (backend attention_decode).
//
// The self-attention cache is position-major, (cap, N, HK): the step at position t writes
// its keys/values of all N rows as one (N, HK) block, straight from the projection GEMM.
// Beam search reorders beams through a *beam table* (N, cap) int32 on the device:
// table[i][j] = the cache slot (row) holding position j of row i's sequence. Reordering
// (HF: Cache.reorder_cache(beam_idx), a copy of every layer's cache) becomes a gather of
// N*t ints (backend beam_table_reorder); position t of row i is written at slot i, so
// no cache entry is ever moved or overwritten.
//
// A step's launches take no argument that changes from step to step: the position t, the
// tokens and the running beam scores are device memory uploaded before it, the self-attention
// keys/values go to position t by qkv_append (or kv_append), attention_decode reads t (KvView.pos) and the
// per-batch (H, cap) position bias by distance from cap-1-t on. So on a backend with graphs (CUDA) the
// step is captured once per decoder and live beam table and replayed (t5_decoder_step_topk):
// the same kernels with the same arguments, so the same bits as running them one by one.
// Not captured: fp16 (its overflow guard keeps host state between launches), ZeRO units
// fetched per layer (stage 3, offload: host work inside the step), T5_GEN_GRAPHS=0.
//
// Letters: B batch, S source length, N = B*beams decoder rows, cap = max_length-1 cache
// positions, D d_model, HK = num_heads*d_kv, H heads, F d_ff, V vocab.
#pragma once
#include "gen_profile.h"
#include "t5.h"

// One allocation per decoder (be->alloc), sized for N rows and cap positions; no
// allocation per step. Row b*beams+j is beam j of batch item b.
typedef struct {
    T5Model *m;
    int B, beams, N, S, cap;
    int t;                      // positions decoded so far (the next step writes position t)
    void *arena;                // one backend allocation holding everything below
    size_t arena_bytes;
    void **k_cache, **v_cache;  // (Ld) each (cap, N, HK) self-attention keys / values, position-major
    void **cross_k, **cross_v;  // (Ld) each (B, S, HK) cross-attention keys / values per batch item
    int *table[2];              // (N, cap) beam tables: table[cur] is live, the other the reorder target
    int cur;
    int *src_rows;              // (N) reorder sources, uploaded per reorder
    int *mask;                  // (B, S) encoder attention mask
    int *tokens;                // (N + 1) input token of each row, then the step's position t
    const int *pos;             // = tokens + N: t in device memory (KvView.pos), uploaded with the tokens
    void *k_new, *v_new;        // (N, HK) the step's self-attention keys / values (kv_append copies them to t)
    void *qkv;                  // (N, 3 HK) the step's q, k, v by one GEMM (qkv_append splits them; block.h
                                // KvCache): over k_new, v_new and ctx, which lie in a row
    void *x, *y, *ln;           // (N, D) residual stream, sublayer output before the residual add, norm output
    float *rstd;                // (N)
    void *q, *ctx;              // (N, HK)
    void *bias;                 // (H, cap) causal position bias by distance: entry i is relative position i-(cap-1) (made per batch)
    void *ffa, *ffb, *ffh;      // (N, F) FFN input projections and activation
    void *logits;               // (N, V)
    float *topk_scores;         // (B, 2*beams) beam_topk's candidates (t5_decoder_step_topk)
    int *topk_idx;              // (B, 2*beams) their flat indices beam*V + token
    float *beam_scores;         // (N) the running beam scores, uploaded per step_topk
    // host side
    float *logits_host;         // (N, V) fp32 logits of the last step (t5_decoder_step; made on its first call)
    void *logits_raw;           // (N, V) act-dtype bytes when act_dtype is not fp32, else NULL
    int *table_host;            // (N, cap) the identity table, uploaded by encode
    int *step_host;             // (N + 1) the tokens and t, uploaded as one copy
    GenProfile *prof;           // NULL, or where step_topk and reorder add their phase times
    // CUDA graphs of t5_decoder_step_topk (backend graph_*): the step's launches read
    // everything that changes from device memory (tokens, t, beam scores, the beam table), so
    // one graph per live table (table[cur], cur = 0, 1) replays every step after the first
    int graphs;                 // 1: steps after the first replay a graph (see t5_decoder_init)
    void *graph[2];             // (2) the captured step for table[0] / table[1], NULL until made
} T5Decoder;

// Allocate for B batch items x beams rows, sources up to S, sequences up to max_length
// (so cap = max_length-1 positions are ever fed to the decoder).
void t5_decoder_init(T5Decoder *d, T5Model *m, int B, int beams, int S, int max_length);
// Encoder + cross-attention K/V for a (B,S) host batch; resets the cache (t = 0) and the
// beam table (every row reads its own slots).
void t5_decoder_encode(T5Decoder *d, const int *input_ids, const int *attention_mask);
// The same after the model's encoder already ran on this batch (m->acts.enc_final holds its
// output, m->B x m->S = B x S): the cross-attention K/V and the resets only.
void t5_decoder_encoded(T5Decoder *d, const int *attention_mask);
// Bytes of a decoder's device allocation (caches, beam tables, one step's activations,
// logits) for these shapes: the memory planner's generation term.
size_t t5_decoder_bytes(const T5Config *cfg, Dtype act_dtype, int B, int beams, int S, int max_length);
// Feed one token per row (N host ids) at position t; returns the host fp32 logits (N,V)
// of that position (valid until the next step). t advances by one. (Tests: the search
// uses t5_decoder_step_topk, which brings back only the candidates.)
const float *t5_decoder_step(T5Decoder *d, const int *tokens);
// The same step with the search's candidate selection on the device (backend beam_topk):
// beam_scores (N host floats) the running scores: out (B, K = 2*beams) candidates, scores
// fp32 log-probability + beam score and flat indices beam*V + token, sorted descending,
// ties by lower index; beam_scores NULL: greedy, K = 1, the argmax of each row's logits
// (out_scores its logit; beams must be 1). Only the candidates come back to the host.
void t5_decoder_step_topk(T5Decoder *d, const int *tokens, const float *beam_scores, float *out_scores, int *out_idx);
// Beam reordering: new row i continues the sequence (cache) of old row src_rows[i] (N host
// ints): N*t ints of the beam table move, the cache stays where it is.
void t5_decoder_reorder(T5Decoder *d, const int *src_rows);
void t5_decoder_free(T5Decoder *d);
