// model/generate.h: text generation with a key/value cache, greedy and beam search,
// token for token what transformers 5.17's GenerationMixin.generate returns for
// T5ForConditionalGeneration (do_sample False, no logits processors, one eos token).
//
// The encoder runs once (t5_encoder_forward, in the model's activation arena); each
// decoder layer's cross-attention K/V is computed once per batch item; then the decoder
// advances one position at a time over a per-layer self-attention K/V cache (T5Decoder,
// model/kv_decoder.h, running training's decoder block from model/block.c). generate.c
// keeps the search only. All math goes through the backend, the step's candidate
// selection too (beam_topk: log_softmax, running scores, top 2*num_beams per item, or the
// argmax): only B x 2*num_beams candidates come back to the host per step, where the
// beam bookkeeping runs (generate.c's header says why).
//
// Letters: B batch, S source length, N = B*beams decoder rows, L = max_length,
// cap = L-1 cache positions, D d_model, HK = num_heads*d_kv, F d_ff, V vocab.
#pragma once
#include "kv_decoder.h"
#include "t5.h"

typedef struct {
    int num_beams;         // 1 = greedy
    int max_length;        // counts the decoder start token (HF max_length / generation_max_length)
    float length_penalty;  // HF default 1.0
    int early_stopping;    // HF bool (True/False); "never" not needed
    int encoder_ready;     // 1: the model's encoder output (m->acts.enc_final) is that of exactly these
                           // input_ids / attention_mask with dropout off (a t5_forward on the same
                           // batch just ran): generation does not run the encoder again
    int *progress;         // when set: the decode position after every step (a progress line reads it
                           // from another thread: common/ticker.h)
    GenProfile *profile;   // when set: phase times are added there (model/gen_profile.h; one extra
                           // wait per step splits issuing from the GPU's work, the tokens unchanged)
} GenerateConfig;

// input_ids / attention_mask (B,S): host int arrays (a padded batch). out (B, max_length)
// host ints: each row = decoder_start, generated ids, then filler; out_len[b] = tokens of
// row b up to and including its eos (or max_length). Returns the longest row length, the
// width of HF's returned tensor. The filler is what HF puts there: pad_token_id for
// greedy; for beam search 5.17 fills with `pad_token_id or eos_token_id`, i.e. eos when
// pad is 0 (T5), so rows of HF's beam output end in repeated eos tokens.
// Needs an activation plan (t5_plan_activations) with maxB >= B and maxS >= S: the encoder
// runs in that arena, overwriting the last forward's activations (do not call t5_backward
// after a generate). Dropout is off during generation.
int t5_generate(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S, const GenerateConfig *gc,
                int *out, int *out_len);
// The beam-search path even for num_beams 1 (tests: it must agree with greedy).
int t5_generate_beam(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S,
                     const GenerateConfig *gc, int *out, int *out_len);

// torch.topk(x, k) (largest, sorted) as torch 2.11 computes it on the CPU, including the
// order of equal values (not stable: libstdc++'s partial_sort when k*64 <= n, else
// nth_element + sort of the first k-1, on (value, index) pairs). idx (k), val (k) may be NULL.
void generate_topk(const float *x, int n, int k, int *idx, float *val);
