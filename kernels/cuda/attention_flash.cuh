// kernels/cuda/attention_flash.cuh: the register-tile attention forward of attention_flash.cu,
// called by attention.cu before its GEMM path. Returns false, having done nothing, for a
// shape, dtype, alignment or GPU it does not cover (then the GEMM path runs); arguments as
// cuda_attention_forward.
#pragma once
#include "common.cuh"

bool attention_flash_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                             const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk,
                             int causal, int q_offset, DropoutArgs drop);
