// model/fp8.h: --fp8's scaling state (Transformer Engine's delayed-scaling recipe).
//
// Every linear layer of the blocks that runs in fp8 has a *slot*: three scales (its input,
// its weight, its output gradient: FP8_INP, FP8_WEIGHT, FP8_GRAD of kernels/backend.h), the
// largest |x| each operand showed this step (amax) and a history of the last hist_len steps'
// amaxes. A step rounds its operands with the scales the history gave (delayed scaling: no
// pass over a tensor before rounding it); at the end of the step (zero/step.c) one
// fp8_scales_update moves the amaxes into the history and makes the next step's scales,
// scale = 448 (e4m3) or 57344 (e5m2) / max(history) / 2^margin. The first step has no history:
// its scales come from the tensors themselves (current scaling, Fp8Scales.current).
//
// A slot covers a group of linears that share an input: a self-attention's q, k, v (one
// batched GEMM forward, one joined backward), a cross-attention's k, v; else one weight
// (q of cross-attention, o, wi, wo). The LM head stays bf16 always (its logits feed the loss
// directly); --fp8_bf16 keeps more in bf16 (T5Fp8Keep). Generation and evaluation run the
// bf16 GEMMs on the same weights: fp8 is a training-step option (T5Model.fp8_training).
//
// A checkpoint's index keeps the state (zero/checkpoint_fp8.c): a resumed run rounds as the
// straight run did. zero/step.c all-reduces the amaxes (max) over the ranks before the update, as Transformer
// Engine's reduce_amax does over the data-parallel group: every rank holds the same scales.
#pragma once
#include "t5.h"

// Which linears stay bf16 besides the LM head (--fp8_bf16, a comma list of these names).
typedef enum {
    T5_FP8_KEEP_ATTN_OUT = 1,    // "attention_output": every attention's o projection
    T5_FP8_KEEP_FIRST_LAST = 2,  // "first_last": the first and last block of each stack, whole
} T5Fp8Keep;

// One linear group (a slot): its first weight, the width of its input, the rows of its weights
// stacked (q, k, v: 3 * inner; a gated wi: 2 * d_ff), and whether its rows are the encoder's
// (B*S: the encoder's linears and a cross-attention's k, v) or the decoder's (B*T).
typedef struct {
    size_t key;  // the param offset of the group's first weight
    int width, outs, enc_rows;
} T5Fp8Group;

// --fp8_amax_history's default (Transformer Engine's is 1024: 16 follows the weights and
// activations of a fine-tune more closely; bench --fp8 runs with it too).
#define T5_FP8_HISTORY_DEFAULT 16

typedef struct T5Fp8 {
    int n_slots, hist_len, margin;
    unsigned keep;       // T5Fp8Keep bits
    T5Fp8Group *groups;  // (n_slots) by increasing key
    float *dev;          // one device block: scale | inv | amax (n_slots * FP8_OPERANDS each) | history
    float *scale, *inv, *amax, *history;  // views into dev; history (n_slots * FP8_OPERANDS, hist_len)
    long updates;        // fp8_scales_update calls made: 0 = current scaling (no history yet)
    // The forward's rounded input of each group, transposed (Fp8Scales.inp_t), so the backward
    // does not round it again: one block of kept_bytes on the device, or NULL (inp_t all NULL)
    // when t5_fp8_keep_inputs was not called (the memory plan had no room).
    void *kept;
    size_t kept_bytes;
    uint8_t **inp_t;     // (n_slots) into kept, or NULL
    // The weights' e4m3 codes, row-major and transposed (Fp8Scales.w4, w4t), rounded by the
    // first forward of a group in each step and read by its later forwards (micro-batches,
    // recomputes) and backwards: one block of wkept_bytes, or NULL when t5_fp8_keep_weights was
    // not called (each call rounds its weight again).
    void *wkept;
    size_t wkept_bytes;
    uint8_t **w4, **w4t;  // (n_slots) into wkept, or NULL
    long step;            // training steps begun (t5_fp8_step_begin); not `updates`, which a restored
                          // checkpoint sets back, so marks from later steps could match it
    long *w_step;         // (n_slots) the step whose forward rounded the slot's kept codes
} T5Fp8;

// Parse --fp8_bf16's list into T5Fp8Keep bits ("" or "none": 0); a bad name fails naming it.
unsigned t5_fp8_parse_keep(const char *list, const char *flag);
// The names of keep, for start-up lines ("LM head" always first).
void t5_fp8_describe_keep(unsigned keep, char *buf, size_t n);

// Build m->fp8 for m's layout on m->be (scales 1, histories 0).
void t5_fp8_init(T5Model *m, unsigned keep, int hist_len, int margin);
void t5_fp8_free(T5Model *m);
// The slot of the linear group whose first weight is at param offset w; -1: bf16.
int t5_fp8_slot(const T5Fp8 *f, size_t w);
// A slot's scales for a call that reads no kept weight codes (w4, w4t NULL).
Fp8Scales t5_fp8_scales(const T5Fp8 *f, int slot);
// For the group's forward over all its weights at once: with kept weight codes, the first call
// of a step rounds them (w_round 1, and the slot is marked), later ones read them.
Fp8Scales t5_fp8_forward_scales(const T5Fp8 *f, int slot);
// For a backward whose weight is (O, I): the kept transposed codes when O is the whole group's.
Fp8Scales t5_fp8_backward_scales(const T5Fp8 *f, int slot, int O);
// The start of a training step (zero/step.c): the kept weight codes are stale.
void t5_fp8_step_begin(T5Model *m);
// The end of a training step: this step's amaxes into the history, the next step's scales.
void t5_fp8_step_end(T5Model *m);
// The largest scratch one fp8 linear call of a (B, S, T) training step takes on the backend
// (fp8_scratch_bytes over the model's linear shapes; the planner adds it to the workspace).
size_t t5_fp8_scratch_bytes(const T5Config *cfg, int B, int S, int T);
// The device bytes t5_fp8_keep_inputs takes for a (B, S, T) plan (1 byte an element of every
// fp8 linear input; t5-large B=64: 3.4 GiB); the trainer and bench keep them when the plan has
// room, as they keep the sublayer activations (zero/planner.h planner_keep_sublayer_acts).
size_t t5_fp8_keep_bytes(const T5Config *cfg, unsigned keep, int B, int S, int T);
// Allocate and hand out the kept inputs (Fp8Scales.inp_t) for batches up to (B, S, T).
void t5_fp8_keep_inputs(T5Model *m, int B, int S, int T);
// The device bytes t5_fp8_keep_weights takes: 2 bytes a weight of every fp8 linear (t5-large:
// 1.25 GiB); kept when the plan has room (zero/planner.h planner_keep_fp8).
size_t t5_fp8_weight_bytes(const T5Config *cfg, unsigned keep);
void t5_fp8_keep_weights(T5Model *m);
// The state's device bytes.
size_t t5_fp8_state_bytes(const T5Config *cfg, int hist_len);
