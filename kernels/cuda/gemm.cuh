// kernels/cuda/gemm.cuh: the batched GEMMs of matmul.cu that other kernels build on
// (attention.cu). Column-major like cuBLASLt: C = op(A) op(B) (+ C when accumulate),
// op(A) m x k, op(B) k x n, C m x n, fp32 accumulation, on the context's stream.
#pragma once
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
