// kernels/cuda/attention_flash_backward.cu: T5 attention backward as one kernel with the
// score-shaped products in registers, for heads that fit one tile (Tq, Tk <= 128), bf16/fp16,
// d_kv 64, compute capability 8.0 and up (mma.sync m16n8k16, kernels/cuda/mma_tile.cuh).
// attention.cu calls attention_flash_backward before its GEMM path; it returns false when the
// shape, dtype, alignment or GPU is not covered, and the GEMM path runs.
//
// Semantics are attention.cu's GEMM path, step for step (backend.h; kernels/cpu/attention.c),
// from the probabilities P = att the forward saved:
//   dPd = T(dO V^T)              fp32 sum rounded to T, as the GEMM stores it
//   g   = keep ? dPd * scale : 0 the forward's dropout mask (kernels/dropout_rng.h, element
//                                (b,h,i,j) flattened); without dropout g = dPd
//   dS  = T(P (g - sum_j P g))   fp32 (masked keys have P = 0, so dS = 0)
//   Pd  = T(keep ? P * scale : 0)
//   dV = T(Pd^T dO [+ dv]), dQ = T(dS K [+ dq]), dK = T(dS^T Q [+ dk])   fp32 sums, one rounding
//   ds (B,H,Tq,Tk) = dS when the caller wants the position-bias gradient (attention.cu sums it
//   over b in order, as the GEMM path does)
// The sums run in another order than cuBLASLt's and the softmax kernel's warp tree, so results
// match the GEMM path to rounding, not bitwise (test_backend_ops checks both against the CPU).
// Deterministic: fixed orders, no atomics.
//
// The kernel is attention_flash_backward_kernel.cuh (device code only: tests/test_flash_emu.c
// runs it on the CPU); this file launches it.
//
// One block per head (h, b), 8 warps. Warp w owns query rows 16w..16w+15 for the row products
// and keys 16w..16w+15 for the key products:
//   1. V, dO, then K into shared memory by cp.async (rows past Tq, Tk zero).
//   2. dPd (16, NT*8) = dO V^T by mma into registers (the forward's S = Q K^T with dO, V).
//      Then V's space takes Q, arriving while 3 and 4 run.
//   3. g, the row dot sum (a quad's 4 threads), dS kept in registers as pairs of T; Pd into
//      shared sP (every element of the warp's rows, zeros past Tq and Tk).
//   4. dQ (16, 64) = dS K: dS's pairs are the A operand in place, K by ldmatrix.trans.
//   5. dV (16 keys, 64) = Pd^T dO: Pd^T by ldmatrix.trans of sP, dO by ldmatrix.trans.
//   6. dS into sP (over Pd), 7. dK (16 keys, 64) = dS^T Q the same way, 8. dS from sP to ds
//      (coalesced) when the caller wants it.
// Shared memory: V/Q, dO, K (128 x 72 each) and sP (128 x 136): 90,112 bytes, so two blocks
// an SM on 9.0 and it fits the 99 KiB of 8.6/8.9.
#include <stdint.h>

#include "attention_flash.cuh"
#include "attention_flash_backward_kernel.cuh"
#include "common.cuh"
#include "point_drop.cuh"

// ---- host side ----------------------------------------------------------------------------------

template <typename T, int NT>
static void flash_backward_launch(void *dq, void *dk, void *dv, void *ds, const void *dout, const void *att,
                                  const void *q, const void *k, const void *v, int B, const flash_bwd::Args &a) {
    static int opted = 0;  // the shared memory above 48 KiB, opted into once per instantiation
    if (!opted) {
        cudaCheck(cudaFuncSetAttribute(flash_bwd::flash_backward_kernel<T, NT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_bwd::SMEM_BYTES));
        opted = 1;
    }
    const dim3 grid((unsigned)a.H, (unsigned)B);
    flash_bwd::flash_backward_kernel<T, NT><<<grid, flash_bwd::THREADS, flash_bwd::SMEM_BYTES, t5_stream()>>>(
        (T *)dq, (T *)dk, (T *)dv, (T *)ds, (const T *)dout, (const T *)att, (const T *)q, (const T *)k, (const T *)v,
        a);
    cudaLaunchCheck();
}

bool attention_flash_backward(Dtype dt, void *dq, void *dk, void *dv, void *ds, const void *dout, const void *att,
                              const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                              DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv) {
    if ((dt != DTYPE_BF16 && dt != DTYPE_F16) || !flash_bwd::shape_covered(B, Tq, Tk, d_kv, ld_dq, ld_dkv)) return false;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)dout) % 16 != 0 ||
        ((uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dv | (uintptr_t)att | (uintptr_t)ds) % 4 != 0)
        return false;
    if (!attention_flash_usable(flash_bwd::SMEM_BYTES)) return false;
    flash_bwd::Args a;
    a.H = H, a.Tq = Tq, a.Tk = Tk, a.set = dqkv_set, a.ldq = ld_dq, a.ldkv = ld_dkv;
    const PointDrop pd = point_drop(drop);  // p, 1/(1-p) and the RNG key, as the pointwise kernels take them
    a.p = pd.p, a.scale = pd.scale, a.key = pd.key;
    const int nt = Tk <= 64 ? 8 : 16;
    if (dt == DTYPE_BF16) {
        if (nt == 8) flash_backward_launch<__nv_bfloat16, 8>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        else flash_backward_launch<__nv_bfloat16, 16>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
    } else {
        if (nt == 8) flash_backward_launch<__half, 8>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        else flash_backward_launch<__half, 16>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
    }
    return true;
}
