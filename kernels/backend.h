// kernels/backend.h: the backend interface. model/t5.c describes forward and backward
// once, as calls through this struct of function pointers; kernels/cpu/ is the fp32
// reference implementation, kernels/cuda/ the fast one. Every op of a backend has a
// CPU twin and a test comparing them (tests/test_ops.c for the CPU finite differences;
// tests/gpu/ runs one table of cases through both backends).
//
// The object: a Backend is a table of functions plus `ctx`, the device state behind it
// (CUDA: the stream, cuBLASLt handle and workspace, GEMM plan cache, allocator bookkeeping,
// memory cap and the ops' scratch buffers: kernels/cuda/context.cuh; the CPU: NULL, it
// keeps only its allocation counters). The ops do not take the Backend as an argument:
// model/ calls them as be->op(...), and each implementation reaches its own state (a
// process drives one device, so a backend's ops find their context without being told;
// context.cuh says how). Callers never branch on the name: what differs between devices
// is asked through the table (synchronize, the memory cap, device_memory).
// Backends are opened by device name in kernels/backend_registry.h.
//
// Conventions (hold for every backend):
// - Pointers are device pointers of the backend (host memory for the CPU backend).
//   Activations, parameters and their gradients are `void *` in the backend's compute
//   dtype (`act_dtype`); the CPU backend is fp32 throughout. Optimizer state (master
//   weights, moments) and row statistics (rstd) are always fp32. Token ids, labels and
//   masks are int32.
// - Every *_backward ADDS into the gradients it produces (dinp += ..., dweight += ...).
//   The caller zeroes gradient buffers once; residual branches then accumulate for free,
//   and gradient accumulation over micro-batches needs no extra code. Where a buffer's
//   first write is a backward op, matmul_backward's dinp_set overwrites instead (dinp =
//   ...): no memset before it (weight gradients always add).
// - Dimension letters: B batch, Tq/Tk query/key length, N = rows (B*T), D = d_model,
//   H heads, dk = d_kv, I/O in/out features, V vocab, F = d_ff.
// - Dropout is counter-based: the mask element i of a call is a pure function of
//   (seed, i), so backward regenerates it instead of storing it, and a run's RNG state
//   is one integer (serializable for checkpoints). p == 0 makes dropout the identity.
// - Elementwise ops (ffn_act_forward, add, axpy, scale, dropout_forward) allow the
//   output to alias an input (in-place use); other ops do not.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DTYPE_F32 = 0, DTYPE_F16, DTYPE_BF16 } Dtype;

typedef enum {
    ACT_RELU = 0,  // "relu"
    ACT_GELU,      // "gelu": exact erf form
    ACT_GELU_NEW,  // "gelu_new": tanh approximation (T5 1.1 / FLAN "gated-gelu")
    ACT_SILU,      // "silu"
} Activation;

typedef struct {
    // dropout_p = 0 disables; seed selects the mask (see header comment)
    float p;
    uint64_t seed;
} DropoutArgs;

// The scaling state of one fp8 linear (fp8_matmul_*; model/fp8.c): device fp32 arrays of
// FP8_OPERANDS entries, one per operand kind. INP and WEIGHT are rounded to e4m3, GRAD (the
// output gradient) to e5m2 (kernels/fp8_format.h).
enum { FP8_INP = 0, FP8_WEIGHT, FP8_GRAD, FP8_OPERANDS };
typedef struct {
    float *scale;  // (FP8_OPERANDS) x -> fp8: round(x * scale)
    float *inv;    // (FP8_OPERANDS) 1 / scale: the GEMM's dequantizing factors
    float *amax;   // (FP8_OPERANDS) the largest |x| this step, max-reduced into
    int current;   // 1: set scale (and inv) from amax before rounding (the first step)
    uint8_t *inp_t;  // NULL, or the input's e4m3 codes transposed, (I, fp8_rows_padded(N)) with
                     // zero padding: fp8_matmul_forward writes them, fp8_matmul_backward reads
                     // them instead of rounding inp again (inp may then be NULL; the INP scale
                     // and amax are the forward's). model/fp8.c keeps one a linear group.
    uint8_t *w4;     // NULL, or the weight's e4m3 codes kept for the step: (count*O, I) row-major
    uint8_t *w4t;    // and transposed (I, count*O) (count weights adjacent: weight_stride O*I).
                     // Forward: w_round 1 rounds the weight into both and max-reduces its amax;
                     // w_round 0 reads w4 as this step's earlier forward wrote it (the weight is
                     // not read, its scale and amax stand). Backward with w4t and dinp: dinp
                     // from w4t (O here the forward's count*O), the weight not read, its scale
                     // and amax the forward's. model/fp8.c keeps them a linear group.
    int w_round;
} Fp8Scales;

// Where attention_decode finds row i's key/value at position j: in a cache *slot* p, at
// element offset (p * slot_stride + j * pos_stride) * H*dk of k / v, where
//   p = table[i * table_ld + j]  (table != NULL: generation's beam table, model/kv_decoder.c)
//   p = i / slot_div             (table == NULL: e.g. beams sharing one item's encoder K/V)
// The self-attention cache is position-major (cap, N, H*dk): slot_stride 1, pos_stride N,
// so one step's keys of all rows are one contiguous (N, H*dk) block a GEMM writes directly.
// The cross-attention K/V are per item (B, S, H*dk): slot_stride S, pos_stride 1.
// key_mask (N / slot_div, mask_ld) int32 0/1 (1 = attend) or NULL: row i uses row
// i / slot_div of it. All pointers are device pointers.
// pos (device int) NULL: the keys are j < Tk and the bias is (H, Tk). pos set (generation's
// step, so that a captured CUDA graph replays every step: the position comes from memory,
// not from a launch argument): the query sits at position t = *pos < Tk, the keys are j <= t,
// and the bias is (H, Tk) by distance: key j reads bias[h][Tk - 1 - t + j] (what
// position_bias_forward gives for one query at q_offset Tk - 1: entry i holds relative
// position i - (Tk - 1)); Tk is then the capacity. The caller checks t < Tk before it uploads t.
typedef struct {
    const void *k, *v;
    long slot_stride, pos_stride;
    const int *table;
    int table_ld, slot_div;
    const int *key_mask;
    int mask_ld;
    const int *pos;
} KvView;

#define BACKEND_COPY_SLOTS 8  // slots of to_host_async / to_device_async

typedef struct Backend {
    const char *name;    // "cpu", "cuda-fp32", "cuda-bf16", "cuda-fp16": for messages only
    Dtype act_dtype;     // dtype of activations, parameters and their gradients
    int device_memory;   // 1: alloc returns accelerator memory (reported as GPU memory), 0: host
    void *ctx;           // the device state behind the ops (see the top); NULL for the CPU

    // ---- device -----------------------------------------------------------------------
    // Wait until every op queued so far has finished (timing); the CPU returns at once.
    void (*synchronize)(void);
    // Cap on the bytes alloc may hold (--max_gpu_memory; 0 = none): an alloc beyond it
    // fails with the figures, as a smaller GPU would. The CPU backend has no cap and
    // refuses a nonzero one.
    void (*set_mem_cap)(size_t bytes);
    size_t (*mem_cap)(void);
    // Bytes the device holds in all (the GPU's total memory; the CPU backend: the host's
    // physical memory). The planner's budget when there is no cap (planner_keep_sublayer_acts).
    size_t (*mem_capacity)(void);
    // TF32 tensor cores for the fp32 GEMMs (HF's --tf32 True): 1 on (Ampere and newer; the
    // trainer checks the GPU first), 0 the exact fp32 products (the default). Affects only
    // GEMMs whose operands are fp32; the CPU backend has no TF32 and refuses 1.
    void (*set_tf32)(int on);

    // ---- memory (bytes); alloc returns zeroed memory -------------------------------
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*to_device)(void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    // The random init in place (model/params.c params_init_random_backend): dst (n elements
    // of dtype dt: fp32, or the backend's act_dtype) = element first .. first+n-1 of the
    // tensor keyed key, kernels/init_rng.h's normal draw times std as a float (then
    // rounded to dt); is_const: every element is (float)std (norm weights; key unused).
    void (*init_random)(void *dst, Dtype dt, size_t n, uint64_t key, uint64_t first, double std, int is_const);
    // bytes currently allocated through alloc, and the peak since start (the planner and
    // --max_gpu_memory use these; the CPU backend counts too, for the ZeRO memory tests)
    size_t (*mem_in_use)(void);
    size_t (*mem_peak)(void);
    // host memory for state kept off the device (ZeRO-Offload), zeroed; pinned: page-locked
    // for fast transfers (CUDA; the CPU backend ignores it). Not counted in mem_in_use.
    void *(*host_alloc)(size_t bytes, int pinned);
    void (*host_free)(void *p, int pinned);
    // Copies that overlap the host and each other (ZeRO-Offload's pipeline, zero/offload.c):
    // queued after every op queued so far, device-to-host on one copy stream and
    // host-to-device on another (the GPU's two copy engines), each finishing into a slot
    // (0 .. BACKEND_COPY_SLOTS-1) that copy_wait waits for: the host may then read what
    // came down, or reuse the buffer that went up. Host buffers should be pinned
    // (host_alloc) or the copy does not overlap. Ops queued later do not wait for an upload:
    // copy_wait its slot before queuing work that reads it. The CPU backend copies at once.
    void (*to_host_async)(void *host_dst, const void *src, size_t bytes, int slot);
    void (*to_device_async)(void *dst, const void *host_src, size_t bytes, int slot);
    void (*copy_wait)(int slot);
    // A second queue for work that overlaps the ops queued after it (the optimizer's update
    // under the next forward, zero/update_async.c). side_begin: the ops that follow run on a
    // side stream, after every op queued so far, until side_end. side_mark(k) (k >= 0, any
    // number of points): point k of the side stream, reached when what was queued on it before
    // the mark has finished. wait_mark(k): the ops queued after it wait for point k; the host
    // does not wait. synchronize waits for the main stream only: wait_mark the side's last
    // point first. The CPU runs every op at once, in order: its four do nothing. NULL (the op
    // profiler, which times ops one at a time): no side stream, the caller runs in order.
    void (*side_begin)(void);
    void (*side_end)(void);
    void (*side_mark)(int k);
    void (*wait_mark)(int k);

    // ---- embedding: out (N,D) = table (V,D)[ids (N)] ---------------------------------
    void (*embedding_forward)(void *out, const int *ids, const void *table, int N, int D);
    void (*embedding_backward)(void *dtable, const void *dout, const int *ids, int N, int D);

    // ---- T5 RMS norm: out = inp * rsqrt(mean(inp^2) + eps) * weight; no mean, no bias.
    // rstd (N) is saved for backward.
    void (*rmsnorm_forward)(void *out, float *rstd, const void *inp, const void *weight, int N, int D, float eps);
    void (*rmsnorm_backward)(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                             const float *rstd, int N, int D);
    // rmsnorm_backward, then dnext (N,D) = dropout_forward(dinp, next_drop) of the updated dinp:
    // the input gradient of the next sublayer backward (its output dropout) in the same
    // pass (CUDA), one pass over dinp fewer a sublayer (model/block.c).
    void (*rmsnorm_backward_dropout)(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                                     const float *rstd, int N, int D, void *dnext, DropoutArgs next_drop);
    // dropout_add_guard(x_out, y, x_in, N*D, drop), then rmsnorm_forward(out, rstd, x_out, weight,
    // N, D, eps): a sublayer's residual add and the next sublayer's norm, bitwise the two calls,
    // in one pass where they take two (CUDA bf16/fp32; fp16 runs the two calls: its overflow
    // guard looks at the whole tensor first). x_out may alias x_in or y; out aliases none.
    void (*residual_rmsnorm_forward)(void *x_out, void *out, float *rstd, const void *y, const void *x_in,
                                     const void *weight, int N, int D, float eps, DropoutArgs drop);

    // ---- linear without bias: out (N,O) = inp (N,I) @ weight (O,I)^T --------------
    void (*matmul_forward)(void *out, const void *inp, const void *weight, int N, int I, int O);
    // dinp (N,I) += dout @ weight (dinp_set: dinp = dout @ weight, its old contents ignored);
    // dweight (O,I) += dout^T @ inp. dinp or dweight may be NULL (skipped; a frozen weight).
    void (*matmul_backward)(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                            int N, int I, int O, int dinp_set);
    // `batch` linears in one call (a sublayer's q, k, v over one input; cross-attention's k, v;
    // a gated FFN's wi_0, wi_1): one launch with batch times the tiles of each, which fills a
    // large GPU where one 1024-wide projection leaves SMs idle. Operand z of each argument is
    // at element offset z * its stride (inp_stride 0: one input shared by all z):
    //   out_z (N,O) = inp_z (N,I) @ weight_z (O,I)^T                    (forward)
    //   dweight_z (O,I) += dout_z (N,O)^T @ inp_z (N,I)                 (backward_weights)
    // Each z gives the numbers of matmul_forward / matmul_backward's dweight on its operands
    // (the CPU backend: bitwise; CUDA: the same fp32 sums, under the algorithm cuBLASLt picks for
    // the batched shape). Strides >= the operand's size (no overlap) except inp's 0.
    void (*matmul_forward_batched)(void *out, size_t out_stride, const void *inp, size_t inp_stride,
                                   const void *weight, size_t weight_stride, int N, int I, int O, int batch);
    void (*matmul_backward_weights_batched)(void *dweight, size_t dweight_stride, const void *dout, size_t dout_stride,
                                            const void *inp, size_t inp_stride, int N, int I, int O, int batch);

    // ---- fp8 linear (--fp8, Transformer Engine's delayed-scaling recipe; model/fp8.c keeps
    // the scaling state). The same products as matmul_forward / matmul_backward with every
    // operand rounded to an 8-bit float first (kernels/fp8_format.h):
    //   q4(x) = e4m3(x * scale[FP8_INP]), w4 = e4m3(W * scale[FP8_WEIGHT]),
    //   g5 = e5m2(dout * scale[FP8_GRAD])   (x * s in fp32, rounded to nearest even, saturated
    //                                         to the format's largest finite: 448 / 57344)
    //   forward   out_z (N,O)  = T( (q4(inp) @ w4_z^T) * inv[FP8_INP] * inv[FP8_WEIGHT] )
    //   backward  dinp (N,I)  (+)= T( (g5 @ w4) * inv[FP8_GRAD] * inv[FP8_WEIGHT] )
    //             dweight (O,I) += T( (g5^T @ q4(inp)) * inv[FP8_GRAD] * inv[FP8_INP] )
    // products of fp8 values (exact) summed in fp32 on the CPU; Hopper's fp8 tensor cores keep
    // about 14 bits in their partial sums before promoting them to fp32 (fewer promotions with
    // the forward's fast accumulation), so the GPU agrees to about 1e-4 (backward) and 4e-3
    // (forward, K = 4096) of the output's magnitude, not to rounding. inv = 1/scale. Operands keep act_dtype in memory; the rounded copies live in the
    // backend's scratch for the call. Each call also max-reduces into amax[k] the largest |x|
    // of every operand k it reads (before scaling; NaN propagates): the forward INP and WEIGHT
    // (over all `count` weights), the backward GRAD, and WEIGHT when dinp is wanted, INP when
    // dweight is (again: the forward's values; an operand no product reads may be NULL).
    // current != 0 (the first step, no history yet): each operand's scale is first set from
    // that max-reduced amax (fp8_scale_from_amax below, margin 0) and then used: the scale and
    // inv arrays are written. Forward: `count` weights at weight + z * weight_stride (one
    // scale over them: a sublayer's q, k, v), outputs at out + z * out_stride, one input.
    // Backward: dinp or dweight may be NULL (skipped); dinp_set as matmul_backward.
    void (*fp8_matmul_forward)(void *out, size_t out_stride, const void *inp, const void *weight,
                               size_t weight_stride, int N, int I, int O, int count, Fp8Scales s);
    void (*fp8_matmul_backward)(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                                int N, int I, int O, int dinp_set, Fp8Scales s);
    // The end of an optimizer step, for n slots of FP8_OPERANDS entries (entry e = slot *
    // FP8_OPERANDS + k): history (n * FP8_OPERANDS, hist_len) row e gets amax[e] at column
    // `col` (the step modulo hist_len); amax[e] = 0; then from m = the row's max,
    // scale[e] = fp8_scale_from_amax(m, format of k, margin), inv[e] = 1 / scale[e] (m = 0 or
    // not finite: scale kept). Every entry in one call (one launch on CUDA).
    void (*fp8_scales_update)(float *scale, float *inv, float *amax, float *history, int n, int hist_len, int col,
                              int margin);
    // The plain ReLU FFN's fp8 linears with the activation between them (model/block.c, when the
    // keep bits are kept), bitwise the two ops each stands for, h and da being buffers of its own:
    //   fp8_relu_drop_matmul_forward:  relu_drop_forward(h, bits, a, N*I, drop), then
    //                                  fp8_matmul_forward(out, 0, h, weight, 0, N, I, O, 1, s)
    //   fp8_relu_drop_matmul_backward: relu_drop_backward(da, dh, bits, N*O, drop, set 1), then
    //                                  fp8_matmul_backward(dinp, dweight, da, inp, weight, N, I, O, dinp_set, s)
    // CUDA rounds h (da) to fp8 in the pass that computes it, so neither reaches memory in the
    // activation dtype (delayed scaling; the forward needs s.inp_t, as h is not kept for the
    // weight gradient). (N*I and N*O) % 8 == 0.
    void (*fp8_relu_drop_matmul_forward)(void *out, uint8_t *bits, const void *a, const void *weight, int N, int I,
                                         int O, DropoutArgs drop, Fp8Scales s);
    void (*fp8_relu_drop_matmul_backward)(void *dinp, void *dweight, const void *dh, const uint8_t *bits,
                                          const void *inp, const void *weight, int N, int I, int O, int dinp_set,
                                          DropoutArgs drop, Fp8Scales s);

    // ---- T5 relative position bias: bias (H,Tq,Tk) = table (num_buckets,H)[bucket(k - q)]
    // with query positions q_offset .. q_offset+Tq-1 (q_offset > 0 when decoding with a
    // cache). bidirectional: encoder (1) or causal decoder (0) bucketing.
    void (*position_bias_forward)(void *bias, const void *table, int Tq, int Tk, int H, int q_offset,
                                  int num_buckets, int max_distance, int bidirectional);
    void (*position_bias_backward)(void *dtable, const void *dbias, int Tq, int Tk, int H, int q_offset,
                                   int num_buckets, int max_distance, int bidirectional);

    // ---- attention (T5: no 1/sqrt(dk) scaling) ---------------------------------------
    // A row whose keys are all masked gets att = 0 and out = 0 (HF would spread it
    // uniformly; T5 batches never have such rows: every sequence has its </s>).
    // q (B,Tq,H*dk), k and v (B,kv_rows,H*dk) of which the first Tk rows of each batch
    // entry are the keys (kv_rows >= Tk; kv_rows == Tk for dense tensors), bias (H,Tq,Tk) shared by the
    // batch or NULL, key_mask (B,kv_rows) 1 = attend / 0 = padding (first Tk used), or
    // NULL; causal masks key j > q_offset+i.
    // att (B,H,Tq,Tk) receives the softmax probabilities (before dropout) for backward;
    // out (B,Tq,H*dk) = dropout(att) @ v.
    // (kv_rows: keys in a longer buffer; attention_backward stays dense, kv_rows == Tk.
    // Generation's one-query steps use attention_decode below.)
    void (*attention_forward)(void *out, void *att, const void *q, const void *k, const void *v, const void *bias,
                              const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int d_kv, int causal,
                              int q_offset, DropoutArgs drop);
    // dq, dk, dv += ... (dqkv_set: dq, dk, dv = ..., their old contents ignored); dbias
    // (H,Tq,Tk) += sum over the batch (dbias may be NULL).
    // ld_dq, ld_dkv: the row stride (elements) of dq and of dk, dv; 0 = H*d_kv (dense). A
    // larger stride interleaves them: dq, dk, dv of a row side by side in one (B*T, 3*H*d_kv)
    // buffer, which the q, k, v input gradient takes as one GEMM (model/block.c).
    void (*attention_backward)(void *dq, void *dk, void *dv, void *dbias, const void *dout, const void *att,
                               const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                               DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv);

    // ---- feed-forward activation: out = act(a) (plain) or act(a) * b (gated, b != NULL)
    // drop: dropout of the result in the same pass (out = dropout(act(a) [* b]), the mask of
    // dropout_forward over these n elements with drop.seed; p == 0: none).
    void (*ffn_act_forward)(void *out, const void *a, const void *b, size_t n, Activation act, DropoutArgs drop);
    // da += dout * act'(a) [* b]; db += dout * act(a) (gated only); set: = instead of +=
    // (the old contents of da and db ignored: no memset before a first write).
    // drop: dout is first taken through dropout_backward (into zeros) in the same pass: the
    // gradient of the act output when the forward dropped it with drop.
    void (*ffn_act_backward)(void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                             Activation act, DropoutArgs drop, int set);
    // ---- the plain ReLU FFN's activation with keep bits (training; T5 1.0's FFN) ------------
    // relu_drop_forward: out = ffn_act_forward(a, ACT_RELU, drop) (plain), and, when bits is not
    // NULL, the keep bits of out: bit k (least significant first) of byte j is 1 where element
    // 8j+k holds a kept positive value (a > 0 and the dropout kept it). relu_drop_backward: da
    // (+)= ffn_act_backward's gradient of that element from the bits alone: dropout_backward(dout)
    // where the bit is set, 0 elsewhere (set: = instead of +=). Backward thus reads a bit an
    // element instead of a (2 bytes in 16-bit types), and a need not be kept (model/block.c).
    // n % 8 == 0. Bitwise ffn_act_forward / ffn_act_backward, up to the sign of a zero gradient.
    void (*relu_drop_forward)(void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop);
    void (*relu_drop_backward)(void *da, const void *dout, const uint8_t *bits, size_t n, DropoutArgs drop, int set);

    // ---- elementwise -----------------------------------------------------------------
    void (*add)(void *out, const void *a, const void *b, size_t n);          // out = a + b
    void (*axpy)(void *y, const void *x, float alpha, size_t n);             // y += alpha * x
    void (*scale)(void *out, const void *inp, float alpha, size_t n);        // out = alpha * inp
    void (*dropout_forward)(void *out, const void *inp, size_t n, DropoutArgs drop);
    void (*dropout_backward)(void *dinp, const void *dout, size_t n, DropoutArgs drop);  // dinp +=
    // out = x + dropout(y): a sublayer's residual add (y unchanged unless out aliases it)
    void (*dropout_add)(void *out, const void *y, const void *x, size_t n, DropoutArgs drop);
    // HF T5Block's fp16 guard, applied to each sublayer's output when act_dtype is fp16:
    // if any element of x (n) is +-inf, clamp all of x to +-(65504 - 1000), else to
    // +-65504 (a no-op for finite values). Other dtypes: no-op. Backward treats it as the
    // identity (it only changes values that were already inf).
    void (*clamp_fp16_overflow)(void *x, size_t n);
    // dropout_add, then (act_dtype fp16) clamp_fp16_overflow on out: the residual add of
    // every sublayer, in one pass over the data where the two ops take two (CUDA).
    void (*dropout_add_guard)(void *out, const void *y, const void *x, size_t n, DropoutArgs drop);

    // ---- cross-entropy over logits (N,V) with labels (N); label -100 is ignored -----
    // Per active token: (1-eps) * nll + eps * (-sum_j log p_j) / V  (HF LabelSmoother).
    // Returns the SUM over active tokens (the caller divides by the global count of
    // label tokens). If dlogits != NULL: dlogits = dloss * d(sum)/dlogits (overwrites;
    // rows of ignored tokens are zeroed). dlogits may alias logits.
    double (*crossentropy_forward_backward)(void *dlogits, const void *logits, const int *labels, int N, int V,
                                            float label_smoothing, float dloss);

    // ---- optimizer building blocks (fp32 state) ---------------------------------------
    // sum of squares of g (n) as double, for the global gradient norm
    double (*sumsq)(const void *g, size_t n);
    // L2 norm of one tensor's gradient g (n), rounded as torch.linalg.vector_norm rounds it
    // on this device (what clip_grad_norm_ takes per parameter): the CPU backend follows
    // torch's AVX2 kernel (8 fp32 lanes, kernels/cpu/optimizer.c); CUDA rounds its sumsq
    // (torch's CUDA reduction is an fp32 tree, accurate to about an ulp).
    float (*tensor_norm)(const void *g, size_t n);
    // tensor_norms: out[i] = tensor_norm(g + offsets[i], counts[i]) for i < n, bitwise; out,
    // offsets (elements of act_dtype) and counts are HOST arrays. One pass over many tensors
    // (clip_grad_norm_'s per-parameter norms) with one wait instead of one per tensor.
    void (*tensor_norms)(float *out, const void *g, const size_t *offsets, const size_t *counts, int n);
    // torch.optim.AdamW on one contiguous range of fp32 master weights: g_eff = grad *
    // grad_scale (grad in act_dtype); master *= 1 - lr*wd; m,v updated; master -= lr/bc1 *
    // m / (sqrt(v)/sqrt(bc2) + eps). step counts from 1. param_out (act_dtype, may be
    // NULL): receives the updated master rounded to act_dtype (the 16-bit compute copy of
    // mixed precision); NULL when the master IS the parameter (fp32 training).
    void (*adamw_update)(float *master, void *param_out, const void *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int step);

    // ---- generation search on the device (the step's candidates; model/generate.c) -------
    // beam_topk: logits (N = B*beams, V) in act_dtype. With beam_scores (N, fp32): per row
    // the fp32 log_softmax lsm = (x - max) - log(sum exp(x - max)) (torch's log_softmax of
    // fp32 logits; the CPU sums exp in double as model/generate.c, CUDA in fp32), candidate
    // (beam j, token v) of item b = lsm[b*beams+j][v] + beam_scores[b*beams+j] (one fp32 add);
    // beam_scores NULL (greedy): the candidates are the fp32 logits themselves (HF's argmax
    // over next_token_logits). out_scores (B,K) fp32 and out_idx (B,K) int32, flat index
    // j*V + v, receive item b's K best of its beams*V candidates, sorted descending; equal
    // scores: the lower flat index first (with K = 1 that is torch.argmax's first maximum).
    // This rule is the GPU path's; torch's CPU topk order for ties (an introselect, not
    // stable) is reproduced only by the host search (generate.c's generate_topk).
    // 1 <= K <= min(V, BEAM_TOPK_MAX_K). Logits are finite or -inf (no NaN).
    void (*beam_topk)(float *out_scores, int *out_idx, const void *logits, const float *beam_scores, int B,
                      int beams, int V, int K);
    // beam_table_reorder: the beam table of generation's self-attention cache (KvView.table,
    // int32 (N, cap)): positions 0..t-1 of dst row i = those of src row src_rows[i]. Rows of
    // the table name, per position, the cache slot that holds the keys/values of that row's
    // sequence, so reordering beams moves N*t ints instead of the cache itself (HF copies
    // the cache: Cache.reorder_cache(beam_idx)). src_rows (N) is a DEVICE int32 array, each
    // in [0, N); dst and src are distinct. Positions t..cap-1 of dst are left as they were.
    void (*beam_table_reorder)(int *dst, const int *src, const int *src_rows, int N, int cap, int t);

    // ---- attention of one query per row over cached keys/values (generation) ----------
    // out (N, H*dk) act_dtype: for row i, head h, with keys j < Tk read through kv (below):
    //   s_j = round(q_i,h . k_j)  (fp32 sum, rounded to act_dtype as the GEMM of
    //         attention_forward rounds its scores), x_j = s_j + bias[h*Tk + j] in fp32
    //         (bias (H, Tk) or NULL), masked keys left out, P = softmax(x) in fp32 rounded
    //         to act_dtype, out = round(sum_j P_j v_j) (fp32 sum).
    // No 1/sqrt(dk) (T5). A row whose keys are all masked gets out = 0. The same numbers as
    // attention_forward with Tq = 1 up to the order of the sums.
    void (*attention_decode)(void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk, int H,
                             int dk);
    // kv_append: k_cache + t * slot_bytes <- k_new, v_cache + t * slot_bytes <- v_new
    // (slot_bytes each), t = *pos read from device memory (the step's position, as
    // attention_decode's KvView.pos): a step's keys and values into a position-major cache
    // with the same launch at every position. The caller checks t against the capacity.
    void (*kv_append)(void *k_cache, void *v_cache, const void *k_new, const void *v_new, const int *pos,
                      size_t slot_bytes);
    // qkv_append: the output of one GEMM over the fused q, k, v weights, qkv (rows, 3 parts of
    // part_bytes: q | k | v), split: row r's q part to q_out + r * part_bytes, its k and v
    // parts to k_cache / v_cache + (t * rows + r) * part_bytes, t = *pos (as kv_append: the
    // slot of position t is rows * part_bytes). Exact bytes.
    void (*qkv_append)(void *q_out, void *k_cache, void *v_cache, const void *qkv, const int *pos, size_t rows,
                       size_t part_bytes);

    // ---- CUDA graphs (generation's decoder step); NULL where the backend has none (CPU) ----
    // graph_begin: the ops that follow on this process's stream are recorded, not run, until
    // graph_end, which returns the instantiated graph; graph_replay runs it (on the stream, in
    // order with the ops around it); graph_free releases it. Only ops whose arguments stay
    // valid may be recorded: no host copies (to_device / to_host), no allocations.
    void (*graph_begin)(void);
    void *(*graph_end)(void);
    void (*graph_replay)(void *graph);
    void (*graph_free)(void *graph);
} Backend;

// Largest K of beam_topk: 2 * generate.c's MAX_BEAMS (64).
#define BEAM_TOPK_MAX_K 128

// The fp32 CPU reference backend (kernels/cpu/backend_cpu.c).
const Backend *backend_cpu(void);

// Bucket of relative position (key - query), as HF T5Attention._relative_position_bucket,
// including its float32 rounding. Shared by every backend's position bias.
int t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance);

#ifdef __cplusplus
}
#endif
