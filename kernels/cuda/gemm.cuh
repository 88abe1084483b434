// kernels/cuda/gemm.cuh: the batched GEMMs of matmul.cu that other kernels build on
// (attention.cu, fp8.cu). Column-major like cuBLASLt: C = op(A) op(B) (+ C when accumulate),
// op(A) m x k, op(B) k x n, C m x n, fp32 accumulation, on the context's stream.
#pragma once
#include "../fp8_format.h"
#include "common.cuh"

// Batched by one stride (elements) per operand: entry z at A + z*sa, B + z*sb, C + z*sc.
void cuda_gemm_strided(Dtype dt, int transa, int transb, int m, int n, int k, const void *A, int lda, long long sa,
                       const void *B, int ldb, long long sb, void *C, int ldc, long long sc, int batch,
                       int accumulate);

// One operand of a two-level batch: entry (b,h) starts at p + b*sb + h*sh (elements),
// leading dimension ld. Heads inside rows, q (B,T,H*dk): ld = H*dk, sb = T*H*dk, sh = dk.
struct GemmHeads {
    const void *p;
    int ld;
    long long sb, sh;
};

// nb x nh products (entry z = b*nh + h); one cuBLASLt call (strided when every operand's
// sb = nh*sh, pointer-array otherwise).
void cuda_gemm_heads(Dtype dt, int transa, int transb, int m, int n, int k, GemmHeads A, GemmHeads B, GemmHeads C,
                     int nb, int nh, int accumulate);

// fp8 operands (fp8.cu): C (m x n, dt) (+)= *scale_a * *scale_b * (A^T B), A stored k x m (lda)
// and B k x n (ldb) as 8-bit codes of formats fa / fb (the "TN" form cuBLASLt's fp8 kernels
// take), the scales fp32 device pointers, 16-byte aligned (cublasLtMatmul returns NOT_SUPPORTED
// for others although its heuristic offers an algorithm: H200, CUDA 13.0); entry z at A + z*sa, B + z*sb (bytes = elements),
// C + z*sc (elements). fast_accum: CUBLASLT_MATMUL_DESC_FAST_ACCUM (Hopper's tensor cores
// skip the periodic promotion of partial sums to full fp32). Where cuBLASLt cannot (matmul.cu's
// header), a simple kernel computes the same sums, with a one-time NOTICE.
void cuda_gemm_fp8(Dtype dt, int m, int n, int k, const void *A, Fp8Format fa, int lda, long long sa,
                   const float *scale_a, const void *B, Fp8Format fb, int ldb, long long sb, const float *scale_b,
                   void *C, int ldc, long long sc, int batch, int accumulate, int fast_accum);
