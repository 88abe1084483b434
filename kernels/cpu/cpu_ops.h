// kernels/cpu/cpu_ops.h: the fp32 CPU reference ops, one declaration per Backend entry
// (kernels/backend.h says what each computes and its conventions). backend_cpu.c puts
// them into the Backend struct; tests may call them directly.
//
// Determinism: every output element is computed by one thread in a fixed order, so
// results do not depend on the number of OpenMP threads.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

// memory.c
void *cpu_memory_alloc(size_t bytes);
void cpu_memory_free(void *p);
void cpu_memory_zero(void *p, size_t bytes);
void cpu_memory_to_device(void *dst, const void *host_src, size_t bytes);
void cpu_memory_to_host(void *host_dst, const void *src, size_t bytes);
size_t cpu_memory_in_use(void);
size_t cpu_memory_peak(void);
void *cpu_memory_host_alloc(size_t bytes, int pinned);
void cpu_memory_host_free(void *p, int pinned);
void cpu_memory_synchronize(void);
void cpu_memory_to_host_async(void *host_dst, const void *src, size_t bytes, int slot);   // copies at once
void cpu_memory_to_device_async(void *dst, const void *host_src, size_t bytes, int slot);
void cpu_memory_copy_wait(int slot);     // nothing is queued: returns at once
void cpu_memory_side_begin(void);        // the side stream's four: ops run at once, in order;
void cpu_memory_side_end(void);          // these only check the calls' pairing
void cpu_memory_side_mark(int k);
void cpu_memory_wait_mark(int k);
void cpu_memory_set_cap(size_t bytes); // 0 only: the CPU backend has no memory cap
void cpu_memory_set_tf32(int on);      // 0 only: the CPU backend's products are exact fp32
size_t cpu_memory_cap(void);           // 0
size_t cpu_memory_capacity(void);      // the host's physical memory

// init.c
void cpu_init_random(void *dst, Dtype dt, size_t n, uint64_t key, uint64_t first, double std, int is_const);

// embedding.c
void cpu_embedding_forward(void *out, const int *ids, const void *table, int N, int D);
void cpu_embedding_backward(void *dtable, const void *dout, const int *ids, int N, int D);

// rmsnorm.c
void cpu_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *weight, int N, int D, float eps);
void cpu_rmsnorm_backward(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                          const float *rstd, int N, int D);
void cpu_rmsnorm_backward_dropout(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                                  const float *rstd, int N, int D, void *dnext, DropoutArgs next_drop);
void cpu_residual_rmsnorm_forward(void *x_out, void *out, float *rstd, const void *y, const void *x_in,
                                  const void *weight, int N, int D, float eps, DropoutArgs drop);

// matmul.c
void cpu_matmul_forward(void *out, const void *inp, const void *weight, int N, int I, int O);
void cpu_matmul_backward(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight, int N,
                         int I, int O, int dinp_set);
void cpu_matmul_forward_batched(void *out, size_t out_stride, const void *inp, size_t inp_stride, const void *weight,
                                size_t weight_stride, int N, int I, int O, int batch);
void cpu_matmul_backward_weights_batched(void *dweight, size_t dweight_stride, const void *dout, size_t dout_stride,
                                         const void *inp, size_t inp_stride, int N, int I, int O, int batch);

// fp8.c (the fp8 linear: operands rounded to e4m3 / e5m2, then matmul.c's sums)
void cpu_fp8_matmul_forward(void *out, size_t out_stride, const void *inp, const void *weight, size_t weight_stride,
                            int N, int I, int O, int count, Fp8Scales s);
void cpu_fp8_matmul_backward(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight, int N,
                             int I, int O, int dinp_set, Fp8Scales s);
void cpu_fp8_scales_update(float *scale, float *inv, float *amax, float *history, int n, int hist_len, int col,
                           int margin);
void cpu_fp8_relu_drop_matmul_forward(void *out, uint8_t *bits, const void *a, const void *weight, int N, int I, int O,
                                      DropoutArgs drop, Fp8Scales s);
void cpu_fp8_relu_drop_matmul_backward(void *dinp, void *dweight, const void *dh, const uint8_t *bits, const void *inp,
                                       const void *weight, int N, int I, int O, int dinp_set, DropoutArgs drop,
                                       Fp8Scales s);

// position_bias.c (t5_relative_position_bucket is declared in backend.h)
void cpu_position_bias_forward(void *bias, const void *table, int Tq, int Tk, int H, int q_offset, int num_buckets,
                               int max_distance, int bidirectional);
void cpu_position_bias_backward(void *dtable, const void *dbias, int Tq, int Tk, int H, int q_offset,
                                int num_buckets, int max_distance, int bidirectional);

// attention.c
void cpu_attention_forward(void *out, void *att, const void *q, const void *k, const void *v, const void *bias,
                           const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                           int q_offset, DropoutArgs drop);
void cpu_attention_backward(void *dq, void *dkey, void *dv, void *dbias, const void *dout, const void *att,
                            const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int dk,
                            DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv);

// memory.c (row copies)

// ffn_act.c
void cpu_ffn_act_forward(void *out, const void *a, const void *b, size_t n, Activation act, DropoutArgs drop);
void cpu_ffn_act_backward(void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                          Activation act, DropoutArgs drop, int set);
void cpu_relu_drop_forward(void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop);
void cpu_relu_drop_backward(void *da, const void *dout, const uint8_t *bits, size_t n, DropoutArgs drop, int set);

// elementwise.c
void cpu_elementwise_add(void *out, const void *a, const void *b, size_t n);
void cpu_elementwise_axpy(void *y, const void *x, float alpha, size_t n);
void cpu_elementwise_scale(void *out, const void *inp, float alpha, size_t n);
void cpu_dropout_forward(void *out, const void *inp, size_t n, DropoutArgs drop);
void cpu_dropout_add(void *out, const void *y, const void *x, size_t n, DropoutArgs drop);
void cpu_dropout_add_guard(void *out, const void *y, const void *x, size_t n, DropoutArgs drop);  // fp32: dropout_add
void cpu_dropout_backward(void *dinp, const void *dout, size_t n, DropoutArgs drop);
// The counter-based dropout RNG, shared by every dropout of the CPU backend (and the
// definition a GPU twin must reproduce): a uniform float in [0,1) that is a pure function
// of (seed, index); element `index` is kept when u >= p, and a kept value is multiplied
// by cpu_dropout_scale(p).
float cpu_dropout_uniform(uint64_t seed, uint64_t index);
void cpu_clamp_fp16_overflow(void *x, size_t n);  // fp32 backend: a no-op
float cpu_dropout_scale(float p);

// crossentropy.c
double cpu_crossentropy_forward_backward(void *dlogits, const void *logits, const int *labels, int N, int V,
                                         float label_smoothing, float dloss);

// optimizer.c
double cpu_optimizer_sumsq(const void *g, size_t n);
float cpu_optimizer_tensor_norm(const void *g, size_t n);
void cpu_optimizer_tensor_norms(float *out, const void *g, const size_t *offsets, const size_t *counts, int n);
void cpu_optimizer_adamw_update(float *param, void *param_out, const void *grad, float *m, float *v, size_t n, float lr, float beta1,
                                float beta2, float eps, float weight_decay, float grad_scale, int step);

// search.c (generation search: backend.h beam_topk, beam_table_reorder)
void cpu_search_beam_topk(float *out_scores, int *out_idx, const void *logits, const float *beam_scores, int B,
                          int beams, int V, int K);
void cpu_search_beam_table_reorder(int *dst, const int *src, const int *src_rows, int N, int cap, int t);

// attention.c: one row of scores (n) to probabilities in place, as torch's CPU softmax;
// masked keys hold -inf on entry and get exactly 0. Every key masked: the row becomes 0 and
// it returns 0 (the caller's output row stays 0), else 1.
int cpu_attention_softmax_row(float *p, int n);
// One attention score: q . k summed in order over dk, plus *bias when bias != NULL.
static inline float cpu_attention_score(const float *q, const float *k, int dk, const float *bias) {
    float s = 0.0f;
    for (int d = 0; d < dk; d++) s += q[d] * k[d];
    if (bias) s += *bias;
    return s;
}

// attention_decode.c (one query per row over cached keys/values)
void cpu_attention_decode(void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk, int H, int dk);
void cpu_attention_kv_append(void *k_cache, void *v_cache, const void *k_new, const void *v_new, const int *pos,
                             size_t slot_bytes);
void cpu_attention_qkv_append(void *q_out, void *k_cache, void *v_cache, const void *qkv, const int *pos, size_t rows,
                              size_t part_bytes);
