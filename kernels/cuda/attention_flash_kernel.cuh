// kernels/cuda/attention_flash_kernel.cuh: the attention forward kernel of attention_flash.cu
// (what it computes and how: that file's header), apart from its host side so that
// tests/test_flash_emu.c can run it on the CPU (tests/emu/warp_emu.h): it includes only
// device code.
#pragma once
#include <stdint.h>

#include "../dropout_rng.h"
#include "attention_tile_dropout.cuh"
#include "device_common.cuh"
#include "mma_tile.cuh"

namespace flash {

constexpr int DK = 64;        // d_kv covered
constexpr int WARPS = 8;      // 16 rows a warp
constexpr int QROWS = 16 * WARPS;  // query rows a block: every row of a head up to 128
constexpr int THREADS = 32 * WARPS;
constexpr int TKMAX = 128;    // keys that fit the tile
constexpr int LDS = DK + 8;   // shared row stride (elements): 144 bytes, ldmatrix without bank conflicts
static_assert(LDS * 2 % 16 == 0, "ldmatrix needs every shared row on 16 bytes");
constexpr size_t SMEM_BYTES = (size_t)(QROWS + 2 * TKMAX) * LDS * 2 + TKMAX / 8;  // 55,312 bytes: above 48 KiB, opted into

struct Args {
    const int *key_mask;
    int H, Tq, Tk, kv_rows, causal, q_offset;
    float p, scale;
    unsigned long long key;
};

// The shapes the kernel takes; attention_flash_forward adds the dtype, alignment and GPU
// (tests/emu/flash_emu_backend.cc asks the same).
inline bool shape_covered(int B, int H, int Tq, int Tk, int dk) {
    return dk == DK && Tk >= 1 && Tk <= TKMAX && Tk % 2 == 0 && Tq >= 1 && B <= 65535 && H <= 65535;
}

using namespace mma_tile;

template <typename T, int NT>
__global__ void __launch_bounds__(THREADS, 2)
    flash_forward_kernel(T *__restrict__ out, T *__restrict__ att, const T *__restrict__ q, const T *__restrict__ k,
                         const T *__restrict__ v, const T *__restrict__ bias, Args a) {
#if MMA_TILE_OK
    extern __shared__ __align__(16) unsigned char smem_raw[];  // SMEM_BYTES: sQ, sK, sV, slive
    T *sQ = reinterpret_cast<T *>(smem_raw), *sK = sQ + QROWS * LDS, *sV = sK + TKMAX * LDS;
    unsigned *slive = reinterpret_cast<unsigned *>(sV + TKMAX * LDS);  // bit j: key j < Tk and not padding
    const int i0 = blockIdx.x * QROWS, h = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    const int Tq = a.Tq, Tk = a.Tk;
    const size_t HD = (size_t)a.H * DK;
    // 1. the head's Q rows of this block, K and V (NT * 8 rows, zero past Tk), asynchronously:
    // Q and K first (group 1), V (group 2) arrives while S and the softmax are computed
    load_rows_async<T, DK, LDS, THREADS>(sQ, q + ((size_t)b * Tq + i0) * HD + (size_t)h * DK, HD, min(QROWS, Tq - i0), QROWS);
    load_rows_async<T, DK, LDS, THREADS>(sK, k + (size_t)b * a.kv_rows * HD + (size_t)h * DK, HD, Tk, NT * 8);
    cp_async_commit();
    load_rows_async<T, DK, LDS, THREADS>(sV, v + (size_t)b * a.kv_rows * HD + (size_t)h * DK, HD, Tk, NT * 8);
    cp_async_commit();
    const int *mrow = a.key_mask ? a.key_mask + (size_t)b * a.kv_rows : nullptr;
    if (warp < TKMAX / 32) {
        const int j = warp * 32 + lane;
        const unsigned w = __ballot_sync(0xffffffffu, j < Tk && !(mrow && mrow[j] == 0));
        if (lane == 0) slive[warp] = w;
    }
    cp_async_wait<1>();
    __syncthreads();
    // 2. S = Q K^T over the warp's 16 rows (4 k-steps of 16 dims: mma_tile.cuh)
    float s[NT][4];
    warp_rows_abt<T, NT, DK / 16>(s, sQ + warp * 16 * LDS, sK, LDS, lane);
    // 3. softmax of rows r = 0 (i = row g) and r = 1 (row g + 8): s[t][2r], s[t][2r + 1] are
    // keys j = 8t + 2qd, j + 1. Branch-free: a branch per element (around expf, say) makes each
    // element's chain wait for the last one's, where straight-line code interleaves them.
    unsigned keys_live = 0;  // bit 2t + e: key 8t + 2qd + e is live (before causality)
#pragma unroll
    for (int t = 0; t < NT; t++) keys_live |= ((slive[t >> 2] >> (8 * (t & 3) + 2 * qd)) & 3u) << (2 * t);
    uint32_t pk[NT][2];  // P, then Pd, as pairs of T: [t][r] = keys 8t + 2qd, +1 of row g + 8r
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = i0 + warp * 16 + g + 8 * r, qpos = a.q_offset + i;
        const bool row_in = i < Tq;
        const T *brow = bias && row_in ? bias + ((size_t)h * Tq + i) * Tk : nullptr;
        float mx = -INFINITY;
        unsigned live = keys_live;  // bit 2t + e
        if (a.causal)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (8 * t + 2 * qd + e > qpos) live &= ~(1u << (2 * t + e));
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int j = 8 * t + 2 * qd;
            float x0 = s[t][2 * r], x1 = s[t][2 * r + 1];
            round_pair<T>(x0, x1);  // S as the GEMM stores it
            if (brow && j < Tk) {  // Tk even: j + 1 < Tk too
                float bb[2];
                load_vec<T, 2>(bb, brow + j);
                x0 += bb[0], x1 += bb[1];
            }
            if ((live >> (2 * t)) & 1u) mx = fmaxf(mx, x0);
            if ((live >> (2 * t + 1)) & 1u) mx = fmaxf(mx, x1);
            s[t][2 * r] = x0, s[t][2 * r + 1] = x1;
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                // the mask picks the exponent (exp(-inf) = +0 exactly), not whether exp runs
                const float x = expf((live >> (2 * t + e)) & 1u ? s[t][2 * r + e] - mx : -INFINITY);
                s[t][2 * r + e] = x;
                sum += x;
            }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum == 0: every key masked
        T *arow = att + (((size_t)b * a.H + h) * Tq + i) * Tk;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int j = 8 * t + 2 * qd;
            pk[t][r] = pack2<T>(s[t][2 * r] * inv, s[t][2 * r + 1] * inv);
            if (row_in && j < Tk) *reinterpret_cast<uint32_t *>(arow + j) = pk[t][r];
        }
    }
    // dropout: Pd = T(P * scale) where the draw keeps it, else 0. Tk % 4 == 0: one hash for
    // both rows' groups of 4 keys (attention_tile_dropout.cuh); else one hash a pair of keys.
    if (a.p != 0.0f) {
        const uint64_t row0 = (((size_t)b * a.H + h) * Tq + i0 + warp * 16 + g) * Tk, row8 = (uint64_t)8 * Tk;
        const uint32_t thr = dropout_rng_threshold(a.p);
        // w: the draws of n-tile t's keys in rows g, g + 8
        tile_draws_each<NT>(TileDraws(a.key, row0, row8, qd, Tk % 4 == 0), [&](int t, const uint32_t (&w)[2]) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float P[2];
                unpack2<T>(P, pk[t][r]);
                pk[t][r] = pair_keep(pack2<T>(P[0] * a.scale, P[1] * a.scale), tile_keep2(w[r], thr));
            }
        });
    }
    // 4. O = Pd V
    cp_async_wait<0>();
    __syncthreads();
    float o[DK / 8][4];
    warp_pairs_ab<T, NT, DK / 8>(o, pk, sV, LDS, lane);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = i0 + warp * 16 + g + 8 * r;
        if (i >= Tq) continue;
        T *orow = out + ((size_t)b * Tq + i) * HD + (size_t)h * DK;
#pragma unroll
        for (int t = 0; t < DK / 8; t++) {
            const float O[2] = {o[t][2 * r], o[t][2 * r + 1]};
            store_vec<T, 2>(orow + 8 * t + 2 * qd, O);
        }
    }
#endif
}

}  // namespace flash

