// kernels/cuda/mma_tile.cuh: the warp-level tensor-core pieces the register-tile attention
// kernels share (attention_flash.cu forward, attention_flash_backward.cu): mma.sync
// m16n8k16 with fp32 accumulators, ldmatrix loads of 8x8 tiles from shared memory (plain and
// transposed), two floats packed as one 32-bit pair of T, and cp.async row copies into shared
// memory. All of it needs compute capability 8.0 (MMA_TILE_OK); below that the bodies are
// empty and the callers' host side never launches them.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, lane = 4 g + qd):
//   A (16x16, row-major): a[0] rows g, cols 2qd..2qd+1; a[1] row g+8; a[2] cols +8; a[3] both
//   B (16x8, "col"): b0 rows (k) 2qd..2qd+1, col (n) g; b1 rows +8
//   C/D (16x8 fp32): d[0..1] row g, cols 2qd..2qd+1; d[2..3] row g+8
// so the C tiles of two adjacent n-tiles, packed to pairs of T, are the A operand of a k16
// step: the softmax's probabilities (and the backward's dS) feed the next product in place.
#pragma once
#include <stdint.h>

#include <type_traits>

#include "device_common.cuh"

// T5_WARP_EMU: compiled as host C++ under tests/emu/warp_emu.h, which runs a block's threads
// as fibers on the CPU; each piece below then calls the emulator's version of its instruction
// (the PTX ISA's fragment layouts, above), so tests/test_flash_emu.c checks the kernels'
// indexing, masks and dropout draws against the CPU backend without a GPU.
#if defined(T5_WARP_EMU)
#define MMA_TILE_OK 1
#define MMA_TILE_EMU 1
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MMA_TILE_OK 1
#define MMA_TILE_EMU 0
#else
#define MMA_TILE_OK 0
#define MMA_TILE_EMU 0
#endif

namespace mma_tile {

// d += A B: A as four 32-bit pairs of T (bf16 or fp16), B as two
template <typename T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if MMA_TILE_EMU
    warp_emu_mma16816(d, a, b0, b1, std::is_same<T, __nv_bfloat16>::value);
#elif MMA_TILE_OK
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// four 8x8 tiles of 16-bit elements; lane l gives the address of row l%8 of tile l/8.
// Plain: r[i] holds tile i's (row g, cols 2qd, 2qd+1). Trans: its (rows 2qd, 2qd+1, col g).
template <bool TRANS> __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
#if MMA_TILE_EMU
    warp_emu_ldmatrix_x4(r, p, TRANS);
#elif MMA_TILE_OK
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

// Two floats as one 32-bit pair of T (x in the low half: the lower index).
template <typename T> __device__ __forceinline__ uint32_t pack2(float x, float y) {
    T t[2] = {from_float<T>(x), from_float<T>(y)};
    return *reinterpret_cast<uint32_t *>(t);
}

// The two floats of a pair of T.
template <typename T> __device__ __forceinline__ void unpack2(float (&f)[2], uint32_t v) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        f[0] = __uint_as_float(v << 16), f[1] = __uint_as_float(v & 0xFFFF0000u);  // bf16 is fp32's top half
    } else {
        const T *t = reinterpret_cast<const T *>(&v);
        f[0] = to_float(t[0]), f[1] = to_float(t[1]);
    }
}

// x and y rounded to T in place (round_to<T> of each, as one pair); returns the pair.
template <typename T> __device__ __forceinline__ uint32_t round_pair(float &x, float &y) {
    const uint32_t w = pack2<T>(x, y);
    float f[2];
    unpack2<T>(f, w);
    x = f[0], y = f[1];
    return w;
}

// A pair of T with the halves whose bit in keep2 (bit 0 low, bit 1 high) is clear set to +0.
__device__ __forceinline__ uint32_t pair_keep(uint32_t w, unsigned keep2) {
    return w & ((keep2 & 1u ? 0x0000FFFFu : 0u) | (keep2 & 2u ? 0xFFFF0000u : 0u));
}

// s (16, NT*8) = A B^T for a warp: A the warp's 16 rows (a: its first row, row stride ld, K =
// 16*KSTEPS elements a row), B the NT*8 rows at b (row stride ld): the attention's S = Q K^T
// and dPd = dO V^T. A's fragments once (ldmatrix), then per pair of n-tiles and k-step one
// ldmatrix.x4 of B (rows n0..n0+15, k0..k0+15) and two mma; fp32 sums from zero.
template <typename T, int NT, int KSTEPS>
__device__ __forceinline__ void warp_rows_abt(float (&s)[NT][4], const T *a, const T *b, int ld, int lane) {
    uint32_t af[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) ldsm_x4<false>(af[kk], a + (lane & 15) * ld + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int t = 0; t < NT; t++) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
    for (int np = 0; np < NT / 2; np++)
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            uint32_t bf[4];
            ldsm_x4<false>(bf, b + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * ld + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816<T>(s[2 * np], af[kk], bf[0], bf[1]);
            mma16816<T>(s[2 * np + 1], af[kk], bf[2], bf[3]);
        }
}

// acc (16, 8*N8) += A B for one k-step: A (16 x 16) as four pairs in registers (a softmax's P,
// the backward's dS, or a Pd^T / dS^T tile), B the 16 rows at b (k = rows, row stride ld, N8*8
// columns) by ldmatrix.trans: the attention's O = Pd V, dQ = dS K, dV = Pd^T dO, dK = dS^T Q.
template <typename T, int N8>
__device__ __forceinline__ void warp_kstep_ab(float (&acc)[N8][4], const uint32_t (&a)[4], const T *b, int ld, int lane) {
#pragma unroll
    for (int dp = 0; dp < N8 / 2; dp++) {
        uint32_t bf[4];
        ldsm_x4<true>(bf, b + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + dp * 16 + (lane >> 4) * 8);
        mma16816<T>(acc[2 * dp], a, bf[0], bf[1]);
        mma16816<T>(acc[2 * dp + 1], a, bf[2], bf[3]);
    }
}

// acc (16, 8*N8) = A B with A (16, 8*NT) the C tiles of a warp_rows_abt-shaped product held as
// pairs of T (p[t][r]: n-tile t, row g + 8r: a softmax's P, the backward's dS) and B the 8*NT
// rows at b (row stride ld): k-step kk takes n-tiles 2kk, 2kk + 1 as its A operand in place (the
// C layout of m16n8 is the A layout of k16 halves). O = Pd V, dQ = dS K.
template <typename T, int NT, int N8>
__device__ __forceinline__ void warp_pairs_ab(float (&acc)[N8][4], const uint32_t (&p)[NT][2], const T *b, int ld,
                                              int lane) {
#pragma unroll
    for (int t = 0; t < N8; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        const uint32_t pa[4] = {p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0], p[2 * kk + 1][1]};
        warp_kstep_ab<T, N8>(acc, pa, b + kk * 16 * ld, ld, lane);
    }
}

// rows [0, nrows) of COLS elements (row stride ld elements in global memory) into shared rows
// of LDS elements, rows [nrows, cap) zero: 16-byte cp.async copies (zero-filled where the row
// is past the end) by the block's NTHREADS threads, all in flight at once; the caller commits
// and waits
template <typename T, int COLS, int LDS, int NTHREADS>
__device__ __forceinline__ void load_rows_async(T *dst, const T *src, size_t ld, int nrows, int cap) {
#if MMA_TILE_OK
    constexpr int CH = COLS * (int)sizeof(T) / 16;  // 16-byte chunks a row
    constexpr int EL = 16 / (int)sizeof(T);
    for (int c = threadIdx.x; c < cap * CH; c += NTHREADS) {
        const int r = c / CH, x = c % CH;
        const bool in = r < nrows;
        const T *from = in ? src + (size_t)r * ld + x * EL : src;  // not read when !in (src-size 0)
#if MMA_TILE_EMU
        warp_emu_copy16(dst + r * LDS + x * EL, from, in ? 16 : 0);
#else
        const unsigned to = (unsigned)__cvta_generic_to_shared(dst + r * LDS + x * EL);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(in ? 16 : 0));
#endif
    }
#endif
}

__device__ __forceinline__ void cp_async_commit(void) {
#if MMA_TILE_EMU
    warp_emu_cp_async_commit();
#elif MMA_TILE_OK
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// wait until at most N committed groups are still in flight
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
#if MMA_TILE_EMU
    warp_emu_cp_async_wait(N);
#elif MMA_TILE_OK
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace mma_tile
