// tests/emu/warp_emu.h: run a CUDA kernel body on the CPU, one block at a time, each thread a
// fiber (ucontext), so that the tensor-core tile kernels (kernels/cuda/attention_flash*_kernel.cuh)
// are tested where CI runs: without a GPU. Include this first, then a kernel header compiled as
// host C++ (g++ -DT5_WARP_EMU): the CUDA keywords become empty, the built-in variables
// (threadIdx, blockIdx, ...) read the running fiber's, and the warp-wide instructions the
// kernels use are emulated here with the PTX ISA's semantics:
//   __syncthreads, __shfl_xor_sync, __ballot_sync (full warps only, as the kernels call them);
//   mma.sync m16n8k16 (bf16/fp16 in, fp32 sums: each output one fp32 sum over k in order,
//   then + c: the GPU's tensor cores sum in another order, so results match to rounding);
//   ldmatrix .x4 (plain and .trans) from shared memory; cp.async's 16-byte copies (zero fill)
//   done by the issuing thread at the cp.async.wait_group that covers them.
// What it checks: a kernel's indexing, masks, layouts, dropout draws and synchronization
// (a thread waiting at a barrier no other thread reaches is reported as a deadlock). What it
// does not: speed, the compiler's code, memory-model races beyond the barrier order.
// Shared memory: the kernels' one dynamic `extern __shared__` array (static __shared__ arrays
// are not supported: __shared__ is empty here, so one would be each fiber's own).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef T5_WARP_EMU
#error "compile the emulated kernels with -DT5_WARP_EMU"
#endif

// the CUDA keywords: nothing on the host (cuda_runtime's host_defines.h gives them attributes
// g++ does not know)
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct WarpEmuDim {
    unsigned x, y, z;
};
extern WarpEmuDim warp_emu_thread_idx, warp_emu_block_idx, warp_emu_block_dim, warp_emu_grid_dim;
#define threadIdx warp_emu_thread_idx
#define blockIdx warp_emu_block_idx
#define blockDim warp_emu_block_dim
#define gridDim warp_emu_grid_dim

// the device `min` of two ints
static inline int min(int a, int b) { return a < b ? a : b; }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void __syncthreads(void);
unsigned __ballot_sync(unsigned mask, int pred);
unsigned warp_emu_shfl_xor_bits(unsigned mask, unsigned bits, int lane_mask);
template <typename V> static inline V __shfl_xor_sync(unsigned mask, V v, int lane_mask) {
    static_assert(sizeof(V) == 4, "the emulated shuffle moves 32-bit values");
    unsigned bits;
    memcpy(&bits, &v, 4);
    bits = warp_emu_shfl_xor_bits(mask, bits, lane_mask);
    memcpy(&v, &bits, 4);
    return v;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d += A B (mma_tile.cuh's fragment layouts)
void warp_emu_mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives row l%8 of matrix l/8
void warp_emu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans);
// cp.async.cg 16 bytes: `bytes` (16 or 0) copied, the rest of the 16 zero-filled, when a
// cp.async.wait_group covers it (commit_group closes the thread's open group; wait_group n
// completes all but the n newest groups)
void warp_emu_copy16(void *dst, const void *src, int bytes);
void warp_emu_cp_async_commit(void);
void warp_emu_cp_async_wait(int n);

// Run body() as the threads of every block of grid (block.x threads, a multiple of 32; y = z =
// 1), blocks in order. smem: the storage behind the kernel's `extern __shared__` array (a
// block-scope extern names a member of the kernel's namespace: the test defines it there),
// smem_bytes of it the launch's dynamic shared memory, filled with 0xA5 before every block (a
// GPU does not zero it either: a kernel reading what it did not write shows up). Fails loudly
// (t5_die) on a deadlock or a collective called by part of a warp.
enum { WARP_EMU_SMEM_MAX = 232448 };  // 227 KiB: the most a block may have on 9.0
void warp_emu_launch(WarpEmuDim grid, WarpEmuDim block, unsigned char *smem, size_t smem_bytes,
                     const std::function<void()> &body);
