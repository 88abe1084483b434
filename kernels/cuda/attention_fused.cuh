// kernels/cuda/attention_fused.cuh: the fused attention kernels of attention_fused.cu,
// called by attention.cu before its GEMM path. Each returns false, having done nothing,
// for a shape or dtype it does not cover (then the GEMM path runs); arguments as
// cuda_attention_forward / cuda_attention_backward, plus `ds` (B,H,Tq,Tk): where backward
// writes dS for the bias gradient, or NULL.
#pragma once
#include "common.cuh"

bool attention_fused_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                             const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk,
                             int causal, int q_offset, DropoutArgs drop);
bool attention_fused_backward(Dtype dt, void *dq, void *dk_, void *dv, void *ds, const void *dout, const void *att,
                              const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int dk,
                              DropoutArgs drop, int dqkv_set);
