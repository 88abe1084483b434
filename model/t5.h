// model/t5.h: T5ForConditionalGeneration forward and backward, described once as calls
// on the backend interface (kernels/backend.h). The same code drives the CPU reference
// and the CUDA backend.
//
// Memory: parameters and gradients are one flat allocation each (model/params.h);
// activations live in one arena planned for a maximum (B, S, T) before the first step
// (t5_plan_activations), so the peak is known up front. A batch may be smaller than the
// plan in every dimension; buffers are then used as if they had the batch's shape.
//
// Letters: B batch, S source (encoder) length, T target (decoder) length, D d_model,
// HK = num_heads*d_kv (inner attention width), H heads, F d_ff, V vocab.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"
#include "config.h"
#include "params.h"

// One batch on the host, int32, row-major.
typedef struct {
    int B, S, T;
    const int *input_ids;          // (B,S) source ids, pad 0 after </s>
    const int *attention_mask;     // (B,S) 1 = token, 0 = padding
    const int *decoder_input_ids;  // (B,T) labels shifted right (t5_shift_right)
    const int *labels;             // (B,T) target ids, -100 = ignored
} T5Batch;

// Saved activations of one attention sublayer (self or cross). The sublayer's RMS norm
// (output and rstd) is kept only when the memory plan has room (T5Model.keep_sublayer_acts);
// else ln is NULL and backward recomputes it from the sublayer input, which the residual
// stream keeps anyway (block.c, t5_sublayer_norm).
typedef struct {
    void *q;       // (B,Tq,HK)
    void *k, *v;   // (B,Tk,HK)
    void *att;     // (B,H,Tq,Tk) softmax probabilities
    void *ctx;     // (B,Tq,HK) attention output, input of the o projection
    void *ln;      // (B,Tq,D) the sublayer's norm output, or NULL (recomputed)
    float *rstd;   // (B*Tq) its rstd, or NULL
} AttnActs;

// Saved activations of one feed-forward sublayer (the norm as above).
typedef struct {
    void *a;       // (B,T,F) wi (or wi_0) output, or NULL where bits are kept (it then goes to
                   // the shared scratch: backward needs only h and the bits)
    void *b;       // (B,T,F) wi_1 output (gated only)
    void *ln;      // (B,T,D) the sublayer's norm output, or NULL (recomputed)
    float *rstd;   // (B*T) its rstd, or NULL
    void *h;       // (B,T,F) the hidden state act(a) [* b] after its dropout (wo's input), or
                   // NULL: backward regenerates it from a (and b)
    uint8_t *bits; // (B*T*F/8) plain ReLU with h kept: h's keep bits (backend.h relu_drop_forward),
                   // which backward reads instead of a; else NULL
} FfnActs;

typedef struct {
    AttnActs self, cross;  // cross: decoder blocks only
    FfnActs ffn;
} BlockActs;

typedef struct T5Model T5Model;

// Forward and backward as a fixed sequence of segments (model/segments.c). A segment reads
// the weights of at most one unit (model/params.h: the embedding, one block, a final norm,
// an untied head) and writes the gradient of at most one, so whoever drives the segments
// can make a unit's weights present just before the segment that reads them and reduce a
// unit's gradient right after the segment that completes it. A ZeRO training step drives
// them itself and names each collective there (zero/step.c); t5_forward and t5_backward run
// them in order for everyone else.
typedef enum {
    T5_SEG_ENC_EMBED,   // forward: the source embedding (+ dropout); backward: its gradient
    T5_SEG_ENC_BLOCK,   // encoder block `layer` (block 0 also makes / takes the position bias)
    T5_SEG_ENC_FINAL,   // the encoder's final norm (+ dropout)
    T5_SEG_DEC_EMBED,   // the target embedding (+ dropout)
    T5_SEG_DEC_BLOCK,   // decoder block `layer`
    T5_SEG_DEC_FINAL,   // the decoder's final norm (+ dropout, the head scale)
    T5_SEG_HEAD,        // the LM head and the loss (forward); from the loss to the head's input (backward)
    // backward only, reading no weights and writing no weight gradient:
    T5_SEG_DEC_OUT,     // the head input's gradient back through the head scale and the final dropout
    T5_SEG_DEC_CLEAR,   // clear what the decoder blocks add into: the encoder output's and the position bias's gradients
    T5_SEG_ENC_OUT,     // the encoder output's gradient back through its final dropout
    T5_SEG_ENC_CLEAR,   // clear the encoder's position bias gradient
} T5SegKind;

typedef struct {
    T5SegKind kind;
    int layer;        // *_BLOCK: the block's index in its stack
    int unit;         // the unit whose weights the segment reads, or -1
    int grad_unit;    // backward: the unit whose gradient the segment adds into, or -1
    int grad_begins;  // backward: the segment's writes are the first to grad_unit's gradient
    int grad_ends;    // backward: after the segment, grad_unit's gradient is complete
} T5Segment;

typedef struct {
    T5Segment *fwd, *bwd;  // (n_fwd), (n_bwd) in the order they run
    int n_fwd, n_bwd;
} T5Segments;

// How evaluation and generation reach weights that are not all in place: ZeRO stage 3
// keeps only a partition and gathers a unit when it is read. zero_eval_begin installs it for
// the length of an evaluation (zero/eval.c, which names the collectives); t5_forward,
// t5_encoder_forward and the generation decoder (model/kv_decoder.c) fetch a unit before
// reading its weights and release it after. all_finished (generation, model/generate.c):
// every rank must then run the same number of decoder steps; each step the search asks
// all_finished(its own "finished"), a collective that returns 1 when every rank has
// finished; a rank that finished early keeps stepping (results unused) until then, as HF's
// generate(synced_gpus=True). NULL (T5Model.visitor): every unit's weights are in place
// (unit_params) and ranks generate independently.
typedef struct {
    void *ctx;
    void (*fetch)(void *ctx, int unit);
    void (*release)(void *ctx, int unit);
    int (*all_finished)(void *ctx, int finished);
} T5UnitVisitor;

// The activation arena, planned for a maximum (B, S, T) (t5_plan_activations): the batch's
// device copies, the residual stream, each block's saved activations, the position biases,
// the final norms' outputs and the logits (T5Model.acts).
typedef struct {
    int maxB, maxS, maxT;
    void *arena;          // one allocation holding everything below
    size_t arena_bytes;
    size_t h_unkept_bytes;  // --fp8 with kept inputs: the FFN hidden states' bytes the kept sublayer
                            // activations leave out (t5.c fp8_h_unneeded), else 0
    int *input_ids, *attention_mask, *dec_ids, *labels;  // (B,S) (B,S) (B,T) (B,T) device copies
    void **enc_x;         // (num_layers*2+1) residual stream (B,S,D): input of each sublayer, then the last output
    void **dec_x;         // (num_decoder_layers*3+1) (B,T,D)
    BlockActs *enc, *dec;
    void *enc_bias;       // (H,S,S) encoder position bias
    void *dec_bias;       // (H,T,T) decoder position bias (causal bucketing)
    float *enc_final_rstd, *dec_final_rstd;  // (B*S), (B*T)
    void *enc_final;      // (B,S,D) encoder output (after final norm and dropout)
    void *dec_final;      // (B,T,D) decoder output, after final norm and dropout, scaled: the LM head input
    void *logits;         // (head_rows,V): all B*T rows, or one chunk of them (head_rows below)
    size_t head_rows;     // rows of logits, set by the activation plan: B*T when the whole (B*T,V)
                          // logits take at most head_logits_bytes; else the head and its loss run in
                          // chunks of this many rows, the backward recomputing each chunk's logits
                          // (the logits are the largest activation: 3.2 GB at t5-large bf16 B=384)
    size_t head_logits_bytes;  // 0: T5_HEAD_LOGITS_BYTES (1 GiB); set before the plan (tests set it small)
} T5Acts;

// Scratch the sublayers share, in the same arena: the norm output of the sublayer being
// computed, and backward's running gradients and per-sublayer work buffers (T5Model.scratch;
// t5_plan_activations sizes them, model/block.c uses them).
typedef struct {
    // The RMS norm of the sublayer being computed, shared by all sublayers: forward writes
    // it, backward rewrites it (same kernel, same input, same bits) right before the
    // weight gradients that read it. One per sublayer would be 2 GB at t5-large B=64.
    void *ln_out;         // (B,max(S,T),D)
    float *ln_rstd;       // (B*max(S,T))
    // The next sublayer's norm fused into a residual add (block.c residual_add): set by the
    // block forward before a sublayer (next_ln_w NULL: none), consumed by its residual add, which
    // then records the x_out it normed; the next sublayer skips its norm when its input,
    // weight and destination are those.
    const void *next_ln_w;     // the next sublayer's norm weight (D), or NULL
    void *next_ln_out;         // (n,D) where its output goes (its kept ln, or ln_out)
    float *next_ln_rstd;       // (n)
    const void *normed_x;      // the residual add's x_out whose norm is in next_ln_out, or NULL
    const void *next_ln_done_w;  // the weight that norm used
    // ---- backward ----
    void *d_enc_x, *d_dec_x;        // (B,S,D), (B,T,D) running residual gradient
    void *d_enc_final;              // (B,S,D) gradient of the encoder output (from cross-attention)
    void *d_tmp_d;                  // (B,max(S,T),D) the branch gradient: dropout of dx (block.c)
    int d_tmp_valid;                // 1: d_tmp_d holds dropout(d_tmp_drop) of the running dx over
    DropoutArgs d_tmp_drop;         //    d_tmp_n elements, written by the previous norm backward
    size_t d_tmp_n;                 //    (rmsnorm_backward_dropout); the next sublayer skips that pass
    void *d_ln;                     // (B,max(S,T),D)
    void *d_ctx, *d_q, *d_k, *d_v;  // (B,max(S,T),HK) each; d_q, d_k, d_v one buffer, also (rows, 3 HK)
    void *d_h, *tmp_f;              // (B,max(S,T),F); tmp_f is also d(wi output), see ffn_sublayer_backward
    void *d_b;                      // (B,max(S,T),F) d(wi_1 output); NULL unless gated
    uint8_t *ffn_bits;              // (B*max(S,T)*F/8) plain ReLU without kept h: the keep bits of
                                    // the h backward regenerates (block.c); else NULL
    void *d_enc_bias, *d_dec_bias;  // (H,S,S), (H,T,T)
} T5Scratch;

// The sub-batch window in use (T5Model.sub_batch; t5.c window_enter / window_leave): while
// on, the batch-wide pointers below are shifted to the window's first row i0 and T5Model.B
// is the window's rows; these hold the batch-wide values to put back.
typedef struct {
    int on, i0, B;
    void **enc_x, **dec_x;   // (as T5Acts.enc_x, dec_x) the batch-wide residual buffers
    void *enc_final, *d_enc_x, *d_dec_x, *d_enc_final;
    int *attention_mask;
} T5Window;

// What only tests set or read (T5Model.test).
typedef struct {
    int unfused_backward_dropout;   // 1 = every branch dropout as its own pass (no fusion)
    int unbatched_linears;          // 1 = q, k, v (and wi_0, wi_1) as separate GEMMs, never
                                    // matmul_*_batched (block.c linears_stride)
    long batched_linear_calls;      // matmul_*_batched calls made (block.c; tests check it)
    long joined_qkv_backward_calls; // attention sublayers whose q, k, v (or k, v) backward was one GEMM (block.c)
    int unfused_residual_norm;      // 1 = residual add and the next norm as two ops (no residual_rmsnorm_forward)
    long fused_residual_norms;      // residual_rmsnorm_forward calls made (block.c; tests check it)
    long branch_passes;             // t5_branch_grad's own passes since t5_backward began (0 when
                                    // every branch gradient came fused: tests check it)
    int unfused_fp8_relu;           // 1 = --fp8's ReLU FFN as relu_drop_* and fp8_matmul_* (no
                                    // fp8_relu_drop_matmul_*)
    long fused_fp8_relu_calls;      // fp8_relu_drop_matmul_forward + _backward calls made (block.c)
} T5TestKnobs;

struct T5Model {
    T5Config cfg;
    ParamLayout lay;
    const Backend *be;
    size_t elem;     // bytes per element of act_dtype
    void *params;    // (lay.total) in act dtype on the backend
    void *grads;     // (lay.total)
    // Where each unit's weights and gradient are now: (lay.n_units) pointers, into params and
    // grads after t5_init (t5_bind_flat). ZeRO stage 2 points unit_grads at work buffers and
    // frees grads; stage 3 also points unit_params at gathered copies and frees params.
    void **unit_params, **unit_grads;
    T5Segments seg;            // the order of forward and backward (model/segments.c)
    const T5UnitVisitor *visitor;  // evaluation at ZeRO stage 3 (zero/eval.c); NULL: weights in place

    T5Acts acts;          // the activation arena and what lives in it (maximum shapes)
    T5Scratch scratch;    // the sublayers' shared norm output and backward's scratch (in the arena)
    T5TestKnobs test;     // test-only switches and counters

    // ---- per-batch state ----
    int B, S, T;
    uint64_t dropout_seed;  // set per micro-step by the trainer; masks derive from it
    // set per micro-step by a caller whose backward follows this forward with dloss head_dloss
    // (zero/step.c): the head's cross-entropy then writes the logits' gradient in the same pass
    // as the loss, in place over the unchunked logits, and backward skips that pass
    // (head_grad_ready: the logits buffer holds it). 0: the forward computes the loss only.
    int head_grad_in_forward;
    float head_dloss;
    int head_grad_ready;
    float dropout_p;        // usually cfg.dropout_rate; 0 = off (eval, tests)
    int gradient_checkpointing;  // set before t5_plan_activations: keep block inputs only, recompute
    int keep_sublayer_acts;      // set before t5_plan_activations: also keep each sublayer's norm output
                                 // and the FFN hidden state (AttnActs.ln, FfnActs.h), so backward
                                 // recomputes neither (about 3.5 ms of a 95 ms t5-large B=64 step on
                                 // the H200; 2.1 GiB there since a ReLU FFN's kept hidden state takes
                                 // the place of its wi output, with its keep bits); the trainer and
                                 // bench set it when the plan with them fits (t5_keep_bytes,
                                 // zero/planner.h planner_keep_sublayer_acts)
    int sub_batch;               // set before t5_plan_activations, with gradient_checkpointing: each
                                 // block's forward, recompute and backward run over the batch in
                                 // windows of this many rows (t5.c window_enter), so the block's
                                 // activations and the backward scratch are planned for sub_batch
                                 // rows, not B (0: the whole batch at once)
    T5Window win;                // the sub-batch window in use (sub_batch)
    struct T5Fp8 *fp8;           // --fp8's scaling state (model/fp8.h), or NULL: every GEMM in act_dtype
    int fp8_training;            // set by zero/step.c for a training step's forwards and backwards: the
                                 // blocks' linears run in fp8 then (evaluation and generation do not)
    int inference;               // set before t5_plan_activations: forward only (evaluation-only runs):
                                 // one shared set of block activations, three rotating residual
                                 // buffers per stack, no backward scratch; t5_backward refuses
};

// What an activation plan keeps (t5_activation_bytes).
typedef enum {
    T5_ACTS_TRAIN = 0,       // every block's saved activations
    T5_ACTS_CHECKPOINT = 1,  // block inputs only (gradient checkpointing)
    T5_ACTS_INFERENCE = 2,   // forward only (T5Model.inference)
} T5ActsMode;

// Build layout, allocate params and grads (zeroed) on the backend.
void t5_init(T5Model *m, const T5Config *cfg, const Backend *be);
// The layout only: params and grads stay NULL (zero_init allocates what the ZeRO stage keeps).
void t5_init_layout(T5Model *m, const T5Config *cfg, const Backend *be);
void t5_free(T5Model *m);
// Point every unit at its place in the flat params/grads buffers (either may be NULL).
void t5_bind_flat(T5Model *m);
// Bytes the activation arena needs for (B,S,T); the planner's single source of truth.
// window: T5Model.sub_batch (checkpointing in sub-batches; 0: the whole batch).
size_t t5_activation_bytes(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, T5ActsMode mode, int window);
// The bytes T5Model.keep_sublayer_acts adds to a training plan (T5_ACTS_TRAIN or, with
// checkpoint, T5_ACTS_CHECKPOINT: one block's worth per stack).
size_t t5_keep_bytes(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int checkpoint, int window);
// Allocate the activation arena for batches up to (B,S,T).
void t5_plan_activations(T5Model *m, int B, int S, int T);

// Forward pass. Leaves logits in m->acts.logits (all of them when m->acts.head_rows covers B*T, else
// the last chunk's) and returns the loss SUM over label tokens
// (label smoothing as HF LabelSmoother); *n_tokens gets the count of labels != -100.
// The segments of m->seg.fwd in order, each unit fetched and released through m->visitor.
double t5_forward(T5Model *m, const T5Batch *batch, float label_smoothing, long *n_tokens);
// The encoder part of t5_forward, for generation (model/kv_decoder.c): runs the encoder
// on m->acts.input_ids / attention_mask (device copies, already uploaded) with the shape
// (m->B, m->S) and leaves its output in m->acts.enc_final (B,S,D).
void t5_encoder_forward(T5Model *m);
// Backward pass of the last forward: grads += d(loss_sum * dloss)/dparams. Pass
// dloss = 1 / (label tokens of the whole global batch) for HF's mean loss. The segments of
// m->seg.bwd in order, with every unit's weights and gradient in place.
void t5_backward(T5Model *m, float label_smoothing, float dloss);
// The same, segment by segment (zero/step.c): t5_forward_begin checks and uploads the batch
// (*n_tokens as above; may be NULL), then each segment of m->seg.fwd; the head's returns the
// loss sum, the others 0. t5_backward_begin, then each segment of m->seg.bwd.
void t5_forward_begin(T5Model *m, const T5Batch *batch, long *n_tokens);
double t5_forward_segment(T5Model *m, const T5Segment *sg, float label_smoothing);
void t5_backward_begin(T5Model *m);
void t5_backward_segment(T5Model *m, const T5Segment *sg, float label_smoothing, float dloss);
// Build / free m->seg for m's layout (t5_init_layout, t5_free).
void t5_segments_build(T5Model *m);
void t5_segments_free(T5Model *m);
void t5_zero_grads(T5Model *m);

// Pointer to the weights / gradient at element offset off, wherever its unit lives now
// (unit_params / unit_grads: the flat buffers, or ZeRO's work buffers).
static inline void *t5_param(const T5Model *m, size_t off) {
    int u = params_unit_of(&m->lay, off);
    return (char *)m->unit_params[u] + (off - m->lay.units[u].lo) * m->elem;
}
static inline void *t5_grad(const T5Model *m, size_t off) {
    int u = params_unit_of(&m->lay, off);
    return (char *)m->unit_grads[u] + (off - m->lay.units[u].lo) * m->elem;
}
// Unit boundaries for code that reads weights outside a training step (t5_forward, the
// generation decoder model/kv_decoder.c): fetch before reading a unit's weights, release
// after (m->visitor: ZeRO stage 3 gathers them during an evaluation); t5_all_finished: the
// collective "has every rank finished generating" (without a visitor: this rank's own answer).
static inline void t5_unit_fetch(T5Model *m, int u) {
    if (m->visitor && m->visitor->fetch) m->visitor->fetch(m->visitor->ctx, u);
}
static inline void t5_unit_release(T5Model *m, int u) {
    if (m->visitor && m->visitor->release) m->visitor->release(m->visitor->ctx, u);
}
static inline int t5_synced_generation(const T5Model *m) { return m->visitor && m->visitor->all_finished; }
static inline int t5_all_finished(T5Model *m, int finished) {
    return t5_synced_generation(m) ? m->visitor->all_finished(m->visitor->ctx, finished) : finished;
}
// HF multiplies the decoder output by the python float model_dim**-0.5 (a double cast to
// fp32) before a tied head.
static inline float t5_head_scale(int D) { return (float)pow((double)D, -0.5); }

// decoder_input_ids from labels: shift right, decoder_start first, -100 -> pad.
void t5_shift_right(const int *labels, int *dec_ids, int B, int T, int decoder_start_id, int pad_id);
