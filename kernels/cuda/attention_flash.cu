// kernels/cuda/attention_flash.cu: T5 attention forward as one kernel with the scores in
// registers (FlashAttention-2's layout, for keys that fit one tile: Tk <= 128), bf16/fp16,
// d_kv 64, compute capability 8.0 and up (mma.sync m16n8k16). attention.cu calls
// attention_flash_forward first (after the off-by-default attention_fused.cu); it returns
// false when the shape, dtype, alignment or GPU is not covered, and the GEMM path runs.
//
// Semantics are attention.cu's GEMM path, step for step (backend.h; kernels/cpu/attention.c):
//   S = T(Q K^T)           the product's fp32 sum rounded to T, as the GEMM stores its scores
//   s = S + bias (fp32)    bias (H,Tq,Tk) or NULL; key_mask 0 or causal j > q_offset + i: masked
//   P = T(exp(s - max) / sum)  over the live keys (masked P = 0; all masked: P = 0, O = 0),
//                          written to att (B,H,Tq,Tk): the backward reads it (attention.cu)
//   Pd = T(P * keep / (1-p))   kernels/dropout_rng.h's mask at the flattened (b,h,i,j), the
//                          same draw as the softmax kernels (p = 0: Pd = P)
//   O = T(Pd V)            fp32 sum, one rounding
// The sums' order differs from cuBLASLt's and from the softmax kernel's warp tree, so the
// outputs match the GEMM path to rounding, not bitwise (test_backend_ops checks both
// against the CPU). Deterministic: fixed orders, no atomics.
//
// The kernel is attention_flash_kernel.cuh (device code only: tests/test_flash_emu.c runs it on
// the CPU); this file launches it.
//
// One block per (128 query rows, head h, batch row b), 8 warps; warp w owns rows 16w..16w+15.
//   1. Q (128, 64), K and V (128, 64) of the head into shared memory (rows past Tq and Tk zero)
//      by cp.async, every copy in flight at once; V's copies overlap steps 2 and 3.
//   2. S (16, NT*8) per warp = Q K^T by mma.m16n8k16 (fp32 accumulators in registers: a
//      thread holds rows g = lane/4 and g + 8, keys 8t + 2(lane%4) + {0,1} of n-tile t).
//   3. Softmax in registers: a row's max and sum over the 4 threads of a quad (xor 1, 2).
//      Which keys are live is one 32-bit mask a thread (the key mask by warp ballots into
//      shared words, causality applied only when causal): per-element reads and compares of
//      the mask cost more than the rest of the section (docs/CUDA.md). exp stays expf: the
//      SFU's ex2.approx was faster but moved the 20-step losses past issue 38's 2e-3. No
//      branch per element: the mask picks expf's argument (-inf gives +0 exactly), where a
//      branch around each expf had made a thread's 64 exp chains run one after another
//      (docs/CUDA.md "Issue 38, fifth part"). The dropout mode is chosen once outside the
//      n-tile loop, a thread's hash counter steps by an add from one n-tile to the next
//      (attention_tile_dropout.cuh), a draw's keep test is its 16 bits against ceil(p 2^16),
//      and P is kept as pairs of T.
//   4. O (16, 64) = Pd V by mma: Pd's pairs are the A operand in place (the C layout of
//      m16n8 is the A layout of k16 halves), V read with ldmatrix.trans.
// NT = 8 (Tk <= 64) or 16 (Tk <= 128) n-tiles of 8 keys. Tk must be even (pairs of keys are
// one 4-byte access of att and bias); with Tk % 4 == 0 one dropout hash serves the 4 keys of a
// group held by two threads, else one a pair.
#include <stdint.h>

#include "attention_flash.cuh"
#include "attention_flash_kernel.cuh"
#include "common.cuh"
#include "point_drop.cuh"

// ---- host side ----------------------------------------------------------------------------------

static int attention_flash_enabled = 1;

extern "C" void cuda_attention_set_flash(int on) { attention_flash_enabled = on != 0; }

// mma.sync m16n8k16 in bf16/fp16 needs compute capability 8.0 (Turing's 7.5 takes the GEMM
// path), and a block of smem_bytes of shared memory (opted into above 48 KiB: every GPU from 8.0
// on allows 99 KiB or more)
bool attention_flash_usable(size_t smem_bytes) {
    static int major = -1, optin = 0;
    if (major < 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    }
    return attention_flash_enabled && major >= 8 && (size_t)optin >= smem_bytes;
}

template <typename T, int NT>
static void flash_launch(void *out, void *att, const void *q, const void *k, const void *v, const void *bias, int B,
                         const flash::Args &a) {
    static int opted = 0;  // the shared memory above 48 KiB, opted into once per instantiation
    if (!opted) {
        cudaCheck(cudaFuncSetAttribute(flash::flash_forward_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)flash::SMEM_BYTES));
        opted = 1;
    }
    const dim3 grid((unsigned)((a.Tq + flash::QROWS - 1) / flash::QROWS), (unsigned)a.H, (unsigned)B);
    flash::flash_forward_kernel<T, NT><<<grid, flash::THREADS, flash::SMEM_BYTES, t5_stream()>>>(
        (T *)out, (T *)att, (const T *)q, (const T *)k, (const T *)v, (const T *)bias, a);
    cudaLaunchCheck();
}

bool attention_flash_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                             const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk,
                             int causal, int q_offset, DropoutArgs drop) {
    if ((dt != DTYPE_BF16 && dt != DTYPE_F16) || !flash::shape_covered(B, H, Tq, Tk, dk)) return false;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 != 0 || ((uintptr_t)out | (uintptr_t)att | (uintptr_t)bias) % 4 != 0)
        return false;
    if (!attention_flash_usable(flash::SMEM_BYTES)) return false;
    flash::Args a;
    a.key_mask = key_mask;
    a.H = H, a.Tq = Tq, a.Tk = Tk, a.kv_rows = kv_rows, a.causal = causal, a.q_offset = q_offset;
    const PointDrop pd = point_drop(drop);  // p, 1/(1-p) and the RNG key, as the pointwise kernels take them
    a.p = pd.p, a.scale = pd.scale, a.key = pd.key;
    const int nt = Tk <= 64 ? 8 : 16;
    if (dt == DTYPE_BF16) {
        if (nt == 8) flash_launch<__nv_bfloat16, 8>(out, att, q, k, v, bias, B, a);
        else flash_launch<__nv_bfloat16, 16>(out, att, q, k, v, bias, B, a);
    } else {
        if (nt == 8) flash_launch<__half, 8>(out, att, q, k, v, bias, B, a);
        else flash_launch<__half, 16>(out, att, q, k, v, bias, B, a);
    }
    return true;
}
