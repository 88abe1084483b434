// kernels/cpu/matmul.c: linear layer without bias, out (N,O) = inp (N,I) @ weight (O,I)^T,
// and its backward. All three products go through one register-tiled kernel
// (gemm_f32): every output element is a fresh sum over k in increasing k order,
// computed by one thread, so results do not depend on the thread count. Backward sums
// are formed first and then added to the gradient (dinp += sum), as torch does when it
// accumulates .grad.
//
// The sum over k runs in blocks of GEMM_KC terms: each block is summed in fp32 (the
// SIMD loop), the block sums are added in double. One fp32 running sum over all of k
// is not accurate enough for long k: the head's backward sums V = 32128 terms
// dlogits[n,v] * W[v,d], one of them (the label's) ~V times larger than the rest, and
// every later term is rounded against that large partial sum. That lost ~1e-5 (relative)
// of d(decoder output) where torch's blocked sgemm (MKL) loses ~4e-7, and moved
// near-zero gradient elements enough to flip their sign, which AdamW's first step turns
// into a full +-lr difference (tests/test_exact.c). Blocks keep the error at the level of a
// GEMM_KC-term fp32 sum.
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "cpu_ops.h"

enum { GEMM_MR = 4, GEMM_NR = 16, GEMM_KC = 64 };  // register tile: 4 rows x 16 columns of C; k block

// C (M,P) = or += sum_k A(m,k) * B(k,p).
// A(m,k) is A[m*sam + k*sak] (strides let dout be read transposed); B is (K,P) with row
// stride ldb; C has row stride ldc. accumulate 0 stores the sum, 1 adds it to C.
static void gemm_f32(float *C, size_t ldc, const float *A, size_t sam, size_t sak, const float *B, size_t ldb, int M,
                     int K, int P, int accumulate) {
    int mblocks = (M + GEMM_MR - 1) / GEMM_MR, pblocks = (P + GEMM_NR - 1) / GEMM_NR;
    // Tiles column block by column block: the (K,16) panel of B stays in cache while every
    // row block of A passes it (an LM head's B is d_model x 32128; rows-first streamed all of
    // it for each 4 rows). Each tile is computed alone, so the order changes no result.
#pragma omp parallel for collapse(2) schedule(static)
    for (int pb = 0; pb < pblocks; pb++) {
        for (int mb = 0; mb < mblocks; mb++) {
            int m0 = mb * GEMM_MR, mr = M - m0 < GEMM_MR ? M - m0 : GEMM_MR;
            int p0 = pb * GEMM_NR, pw = P - p0 < GEMM_NR ? P - p0 : GEMM_NR;
            double acc[GEMM_MR][GEMM_NR] = {{0}};  // the sum of the k blocks done
            for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                int k1 = k0 + GEMM_KC < K ? k0 + GEMM_KC : K;
                if (mr == GEMM_MR && pw == GEMM_NR) {
                    // Full tile: four named accumulator rows so the compiler keeps them in
                    // registers (an acc[r][j] loop nest is ~2x slower with gcc -O2).
                    float c0[GEMM_NR] = {0}, c1[GEMM_NR] = {0}, c2[GEMM_NR] = {0}, c3[GEMM_NR] = {0};
                    const float *a0 = A + (size_t)m0 * sam, *a1 = a0 + sam, *a2 = a1 + sam, *a3 = a2 + sam;
                    for (int k = k0; k < k1; k++) {
                        const float *b = B + (size_t)k * ldb + p0;
                        size_t ko = (size_t)k * sak;
                        float x0 = a0[ko], x1 = a1[ko], x2 = a2[ko], x3 = a3[ko];
#pragma omp simd
                        for (int j = 0; j < GEMM_NR; j++) {
                            float bj = b[j];
                            c0[j] += x0 * bj;
                            c1[j] += x1 * bj;
                            c2[j] += x2 * bj;
                            c3[j] += x3 * bj;
                        }
                    }
                    for (int j = 0; j < GEMM_NR; j++) {
                        acc[0][j] += c0[j];
                        acc[1][j] += c1[j];
                        acc[2][j] += c2[j];
                        acc[3][j] += c3[j];
                    }
                } else {
                    // Edge tile: same arithmetic, same order, generic bounds.
                    float part[GEMM_MR][GEMM_NR] = {{0}};
                    for (int k = k0; k < k1; k++) {
                        const float *b = B + (size_t)k * ldb + p0;
                        for (int r = 0; r < mr; r++) {
                            float x = A[(size_t)(m0 + r) * sam + (size_t)k * sak];
                            for (int j = 0; j < pw; j++) part[r][j] += x * b[j];
                        }
                    }
                    for (int r = 0; r < mr; r++)
                        for (int j = 0; j < pw; j++) acc[r][j] += part[r][j];
                }
            }
            for (int r = 0; r < mr; r++) {
                float *c = C + (size_t)(m0 + r) * ldc + p0;
                if (accumulate)
                    for (int j = 0; j < pw; j++) c[j] += (float)acc[r][j];
                else
                    for (int j = 0; j < pw; j++) c[j] = (float)acc[r][j];
            }
        }
    }
}

// out (N,O) = inp (N,I) @ weight (O,I)^T. The weight is transposed once to (I,O) so the
// kernel's inner loop runs over contiguous output columns.
void cpu_matmul_forward(void *out, const void *inp, const void *weight_, int N, int I, int O) {
    const float *weight = weight_;
    float *wt = mallocCheck((size_t)I * O * sizeof(float));  // (I,O)
    enum { TB = 32 };
    int iblocks = (I + TB - 1) / TB;
#pragma omp parallel for schedule(static)
    for (int ib = 0; ib < iblocks; ib++) {
        int i0 = ib * TB, i1 = i0 + TB < I ? i0 + TB : I;
        for (int o = 0; o < O; o++)
            for (int i = i0; i < i1; i++) wt[(size_t)i * O + o] = weight[(size_t)o * I + i];
    }
    gemm_f32(out, (size_t)O, inp, (size_t)I, 1, wt, (size_t)O, N, I, O, 0);
    free(wt);
}

// The batched linears of backend.h: operand z at z * its stride. One call per z, so each
// result is bitwise matmul_forward's / matmul_backward's on that operand.
void cpu_matmul_forward_batched(void *out, size_t out_stride, const void *inp, size_t inp_stride, const void *weight,
                                size_t weight_stride, int N, int I, int O, int batch) {
    for (int z = 0; z < batch; z++)
        cpu_matmul_forward((float *)out + z * out_stride, (const float *)inp + z * inp_stride,
                           (const float *)weight + z * weight_stride, N, I, O);
}

void cpu_matmul_backward_weights_batched(void *dweight, size_t dweight_stride, const void *dout, size_t dout_stride,
                                         const void *inp, size_t inp_stride, int N, int I, int O, int batch) {
    for (int z = 0; z < batch; z++)
        gemm_f32((float *)dweight + z * dweight_stride, (size_t)I, (const float *)dout + z * dout_stride, 1,
                 (size_t)O, (const float *)inp + z * inp_stride, (size_t)I, O, N, I, 1);
}

// dinp (N,I) += dout (N,O) @ weight (O,I)      (skipped when dinp is NULL)
// dweight (O,I) += dout^T (O,N) @ inp (N,I)  (skipped when dweight is NULL: frozen weight)
void cpu_matmul_backward(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight, int N,
                         int I, int O, int dinp_set) {
    if (dinp) gemm_f32(dinp, (size_t)I, dout, (size_t)O, 1, weight, (size_t)I, N, O, I, !dinp_set);
    if (dweight) gemm_f32(dweight, (size_t)I, dout, 1, (size_t)O, inp, (size_t)I, O, N, I, 1);
}
