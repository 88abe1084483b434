// kernels/cuda/cuda_ops.h: the CUDA backend's ops, callable from C. Each takes the
// activation dtype first (DTYPE_F32, DTYPE_BF16, DTYPE_F16) and otherwise the arguments
// of the matching Backend entry in kernels/backend.h, with the same semantics (backward
// ops ADD into their gradients; elementwise ops allow in-place use; dropout masks from
// kernels/dropout_rng.h). backend_cuda.cu binds them into one Backend per dtype.
// All math accumulates in fp32. Every launch goes to the backend's stream
// (cuda_stream()); the only host synchronizations are in the ops that return a host
// value (crossentropy, sumsq) and in to_host.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "../backend.h"
#include "../gpu_arch.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- context (memory.cu; the state is a CudaContext, context.cuh, = Backend.ctx) ---
void cuda_init(int device);                  // select the device, create stream and handles
void *cuda_stream(void);                     // cudaStream_t
void cuda_set_memory_cap(size_t bytes);      // 0 = no cap; alloc beyond it fails with a hint
size_t cuda_memory_cap(void);
size_t cuda_memory_capacity(void);          // the device's total memory (bytes)
void cuda_set_tf32(int on);                  // fp32 GEMMs on TF32 tensor cores (matmul.cu)
int cuda_device_count(void);                 // cudaGetDeviceCount, 0 without a driver or device
int cuda_device_info(int device, GpuInfo *g);  // name, compute capability, memory; 0: no such device
int cuda_compute_capability(void);           // of the initialized device (major*10 + minor)
void *cuda_alloc(size_t bytes);              // zeroed; fails loudly (file/line/hint)
void cuda_free(void *p);
void cuda_zero(void *p, size_t bytes);
void cuda_to_device(void *dst, const void *host_src, size_t bytes);
void cuda_to_host(void *host_dst, const void *src, size_t bytes);
// init.cu: the random init in place (backend.h init_random; dt fp32 or any act dtype)
void cuda_init_random(void *dst, Dtype dt, size_t n, uint64_t key, uint64_t first, double std, int is_const);
size_t cuda_mem_in_use(void);
size_t cuda_mem_peak(void);
void *cuda_host_alloc(size_t bytes, int pinned);  // zeroed; pinned: cudaHostAlloc
void cuda_host_free(void *p, int pinned);
// asynchronous copies on the context's copy streams (backend.h to_host_async / to_device_async)
void cuda_to_host_async(void *host_dst, const void *src, size_t bytes, int slot);
void cuda_to_device_async(void *dst, const void *host_src, size_t bytes, int slot);
void cuda_copy_wait(int slot);
void cuda_side_begin(void);  // side_stream.cu: backend.h's side stream
void cuda_side_end(void);
void cuda_side_mark(int k);
void cuda_wait_mark(int k);
void cuda_synchronize(void);

// ---- pointwise / reductions (embedding.cu, rmsnorm.cu, position_bias.cu, ffn_act.cu,
// elementwise.cu, crossentropy.cu, optimizer.cu) -------------------------------------
void cuda_embedding_forward(Dtype dt, void *out, const int *ids, const void *table, int N, int D);
void cuda_embedding_backward(Dtype dt, void *dtable, const void *dout, const int *ids, int N, int D);
void cuda_rmsnorm_forward(Dtype dt, void *out, float *rstd, const void *inp, const void *weight, int N, int D,
                          float eps);
void cuda_rmsnorm_backward_dropout(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                                   const void *weight, const float *rstd, int N, int D, void *dnext, DropoutArgs drop);
void cuda_rmsnorm_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                           const void *weight, const float *rstd, int N, int D);
void cuda_residual_rmsnorm_forward(Dtype dt, void *x_out, void *out, float *rstd, const void *y, const void *x_in,
                                   const void *weight, int N, int D, float eps, DropoutArgs drop);
void cuda_position_bias_forward(Dtype dt, void *bias, const void *table, int Tq, int Tk, int H, int q_offset,
                                int num_buckets, int max_distance, int bidirectional);
void cuda_position_bias_backward(Dtype dt, void *dtable, const void *dbias, int Tq, int Tk, int H, int q_offset,
                                 int num_buckets, int max_distance, int bidirectional);
void cuda_dropout_add(Dtype dt, void *out, const void *y, const void *x, size_t n, DropoutArgs drop);
void cuda_dropout_add_guard(Dtype dt, void *out, const void *y, const void *x, size_t n, DropoutArgs drop);
void cuda_ffn_act_forward(Dtype dt, void *out, const void *a, const void *b, size_t n, Activation act,
                          DropoutArgs drop);
void cuda_ffn_act_backward(Dtype dt, void *da, void *db, const void *dout, const void *a, const void *b, size_t n,
                           Activation act, DropoutArgs drop, int set);
void cuda_relu_drop_forward(Dtype dt, void *out, uint8_t *bits, const void *a, size_t n, DropoutArgs drop);
void cuda_relu_drop_backward(Dtype dt, void *da, const void *dout, const uint8_t *bits, size_t n,
                             DropoutArgs drop, int set);
void cuda_add(Dtype dt, void *out, const void *a, const void *b, size_t n);
void cuda_axpy(Dtype dt, void *y, const void *x, float alpha, size_t n);
void cuda_scale(Dtype dt, void *out, const void *inp, float alpha, size_t n);
void cuda_dropout_forward(Dtype dt, void *out, const void *inp, size_t n, DropoutArgs drop);
void cuda_dropout_backward(Dtype dt, void *dinp, const void *dout, size_t n, DropoutArgs drop);
void cuda_clamp_fp16_overflow(Dtype dt, void *x, size_t n);
double cuda_crossentropy_forward_backward(Dtype dt, void *dlogits, const void *logits, const int *labels, int N,
                                          int V, float label_smoothing, float dloss);
double cuda_sumsq(Dtype dt, const void *g, size_t n);
void cuda_sumsq_many(Dtype dt, double *out, const void *g, const size_t *offsets, const size_t *counts, int n);
void cuda_adamw_update(Dtype dt, float *master, void *param_out, const void *grad, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int step);

// ---- matrix products and attention (matmul.cu, fp8.cu, attention.cu) ---------------
void cuda_matmul_forward(Dtype dt, void *out, const void *inp, const void *weight, int N, int I, int O);
void cuda_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                          int N, int I, int O, int dinp_set);
void cuda_matmul_forward_batched(Dtype dt, void *out, size_t out_stride, const void *inp, size_t inp_stride,
                                 const void *weight, size_t weight_stride, int N, int I, int O, int batch);
void cuda_matmul_backward_weights_batched(Dtype dt, void *dweight, size_t dweight_stride, const void *dout,
                                          size_t dout_stride, const void *inp, size_t inp_stride, int N, int I, int O,
                                          int batch);
// fp8.cu: the fp8 linear (backend.h fp8_matmul_forward / fp8_matmul_backward / fp8_scales_update,
// fp8_relu_drop_matmul_forward / _backward)
void cuda_fp8_matmul_forward(Dtype dt, void *out, size_t out_stride, const void *inp, const void *weight,
                             size_t weight_stride, int N, int I, int O, int count, Fp8Scales s);
void cuda_fp8_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                              const void *weight, int N, int I, int O, int dinp_set, Fp8Scales s);
void cuda_fp8_scales_update(float *scale, float *inv, float *amax, float *history, int n, int hist_len, int col,
                            int margin);
void cuda_fp8_relu_drop_matmul_forward(Dtype dt, void *out, uint8_t *bits, const void *a, const void *weight, int N,
                                       int I, int O, DropoutArgs drop, Fp8Scales s);
void cuda_fp8_relu_drop_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dh, const uint8_t *bits,
                                        const void *inp, const void *weight, int N, int I, int O, int dinp_set,
                                        DropoutArgs drop, Fp8Scales s);
void cuda_attention_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                            const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H,
                            int d_kv, int causal, int q_offset, DropoutArgs drop);
void cuda_attention_backward(Dtype dt, void *dq, void *dk, void *dv, void *dbias, const void *dout, const void *att,
                             const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                             DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv);
// on = 0 makes attention take the GEMM path for every shape (attention_fused.cu covers
// bf16/fp16, d_kv 64 or 128, Tq and Tk up to 128); for tests and timings of both versions.
void cuda_attention_set_fused(int on);
// on = 0 turns off attention_flash.cu's forward and attention_flash_backward.cu's backward (on
// by default: bf16/fp16, d_kv 64, Tk <= 128 and even (the backward also Tq <= 128), compute
// capability 8.0 and up); for tests and timings of the other versions.
void cuda_attention_set_flash(int on);

// ---- generation search (search.cu) ------------------------------------------------------
void cuda_beam_topk(Dtype dt, float *out_scores, int *out_idx, const void *logits, const float *beam_scores, int B,
                    int beams, int V, int K);
void cuda_beam_table_reorder(int *dst, const int *src, const int *src_rows, int N, int cap, int t);

// ---- attention of one query per row over cached keys/values (attention_decode.cu) --------
void cuda_attention_decode(Dtype dt, void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk,
                           int H, int dk);
void cuda_kv_append(void *k_cache, void *v_cache, const void *k_new, const void *v_new, const int *pos,
                    size_t slot_bytes);
void cuda_qkv_append(void *q_out, void *k_cache, void *v_cache, const void *qkv, const int *pos, size_t rows,
                     size_t part_bytes);

// ---- CUDA graphs (graph.cu) ----------------------------------------------------------------
void cuda_graph_begin(void);
void *cuda_graph_end(void);
void cuda_graph_replay(void *graph);
void cuda_graph_free(void *graph);

// The Backend for a dtype (backend_cuda.cu). cuda_init must have been called.
const Backend *backend_cuda(Dtype dt);

#ifdef __cplusplus
}
#endif
