// kernels/cuda/attention_flash.cuh: the register-tile attention kernels, forward
// (attention_flash.cu) and backward (attention_flash_backward.cu), called by attention.cu
// before its GEMM path. Each returns false, having done nothing, for a shape, dtype,
// alignment or GPU it does not cover (then the GEMM path runs); arguments as
// cuda_attention_forward / cuda_attention_backward.
#pragma once
#include "common.cuh"

bool attention_flash_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                             const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk,
                             int causal, int q_offset, DropoutArgs drop);

// ds: where dS (B,H,Tq,Tk) is written for the position-bias gradient's sum over b
// (attention.cu's dbias kernel), or NULL when no dbias is wanted; ld_dq, ld_dkv: the
// gradients' row strides (elements, not 0: attention.cu resolves backend.h's 0)
bool attention_flash_backward(Dtype dt, void *dq, void *dk, void *dv, void *ds, const void *dout, const void *att,
                              const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                              DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv);

// cuda_attention_set_flash is on, the GPU has mma.sync (compute capability 8.0) and allows a
// block smem_bytes of shared memory
bool attention_flash_usable(size_t smem_bytes);
