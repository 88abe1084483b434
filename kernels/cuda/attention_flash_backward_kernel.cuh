// kernels/cuda/attention_flash_backward_kernel.cuh: the attention backward kernel of
// attention_flash_backward.cu (what it computes and how: that file's header), apart from its
// host side so that tests/test_flash_emu.c can run it on the CPU (tests/emu/warp_emu.h): it
// includes only device code.
#pragma once
#include <stdint.h>

#include "../dropout_rng.h"
#include "attention_tile_dropout.cuh"
#include "device_common.cuh"
#include "mma_tile.cuh"

namespace flash_bwd {

using namespace mma_tile;

constexpr int DK = 64;           // d_kv covered
constexpr int WARPS = 8;         // 16 query rows and 16 keys a warp
constexpr int THREADS = 32 * WARPS;
constexpr int TMAX = 16 * WARPS; // Tq and Tk covered: 128
constexpr int LDS = DK + 8;      // (., 64) tiles' shared row stride: 144 bytes, ldmatrix without bank conflicts
constexpr int LDP = TMAX + 8;    // sP's row stride: 272 bytes
static_assert(LDS * 2 % 16 == 0 && LDP * 2 % 16 == 0, "ldmatrix needs every shared row on 16 bytes");
constexpr size_t SMEM_BYTES = (size_t)3 * TMAX * LDS * 2 + (size_t)TMAX * LDP * 2;  // 90,112 bytes

struct Args {
    int H, Tq, Tk, set;
    int ldq, ldkv;  // row strides (elements) of dq and of dk, dv
    float p, scale;  // scale = 1/(1-p), 1 without dropout
    unsigned long long key;
};

// The shapes the kernel takes (ld_dq, ld_dkv even: pairs of gradient elements are 4-byte
// stores); attention_flash_backward adds the dtype, alignment and GPU (tests/emu asks the same).
inline bool shape_covered(int B, int Tq, int Tk, int d_kv, int ld_dq, int ld_dkv) {
    return d_kv == DK && Tq >= 1 && Tq <= TMAX && Tk >= 2 && Tk <= TMAX && Tk % 2 == 0 && B <= 65535 &&
           ld_dq % 2 == 0 && ld_dkv % 2 == 0;
}

// keep[r] bit 2t + e: the element (row g + 8r, key 8t + 2qd + e) survives dropout (all ones
// without dropout). row0: the flat (b,h,i,j) index of the thread's row g at key 0. The draws
// are the forward's: with Tk % 4 == 0 one hash for both rows' groups of 4 keys
// (attention_tile_dropout.cuh), else one hash a pair of keys.
template <int NT>
__device__ __forceinline__ void keep_bits(unsigned (&keep)[2], const Args &a, uint64_t row0, int qd) {
    keep[0] = keep[1] = ~0u;
    if (a.p == 0.0f) return;
    keep[0] = keep[1] = 0u;
    const uint64_t row8 = (uint64_t)8 * a.Tk;  // row g + 8
    const uint32_t thr = dropout_rng_threshold(a.p);
    tile_draws_each<NT>(TileDraws(a.key, row0, row8, qd, a.Tk % 4 == 0), [&](int t, const uint32_t (&w)[2]) {
        keep[0] |= tile_keep2(w[0], thr) << (2 * t);  // w: rows g, g + 8 (attention_tile_dropout.cuh)
        keep[1] |= tile_keep2(w[1], thr) << (2 * t);
    });
}

// a warp's (16, 64) fp32 tile (acc[t][2r + e]: row g + 8r, column 8t + 2qd + e) into rows
// row0 + ... of dst (row stride ld), rows from nrows on left out; add: + the old value first
template <typename T>
__device__ __forceinline__ void store_tile(T *dst, size_t ld, int row0, int nrows, const float (&acc)[DK / 8][4],
                                           int add, int g, int qd) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = row0 + g + 8 * r;
        if (i >= nrows) continue;
        T *row = dst + (size_t)i * ld;
#pragma unroll
        for (int t = 0; t < DK / 8; t++) {
            float x[2] = {acc[t][2 * r], acc[t][2 * r + 1]};
            if (add) {
                float old[2];
                load_vec<T, 2>(old, row + 8 * t + 2 * qd);
                x[0] += old[0], x[1] += old[1];
            }
            store_vec<T, 2>(row + 8 * t + 2 * qd, x);
        }
    }
}

// acc (16 keys kw.., 64) = sM^T sB over the first 16 * qt rows: sM (rows i, LDP) holds Pd or
// dS, sB (rows i, LDS) dO or Q; both operands by ldmatrix.trans
template <typename T>
__device__ __forceinline__ void key_product(float (&acc)[DK / 8][4], const T *sM, const T *sB, int kw, int qt,
                                            int lane) {
#pragma unroll
    for (int t = 0; t < DK / 8; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    for (int kk = 0; kk < qt; kk++) {
        uint32_t ma[4];
        ldsm_x4<true>(ma, sM + (kk * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDP + kw + ((lane >> 3) & 1) * 8);
        warp_kstep_ab<T, DK / 8>(acc, ma, sB + kk * 16 * LDS, LDS, lane);
    }
}

template <typename T, int NT>
__global__ void __launch_bounds__(THREADS, 2)
    flash_backward_kernel(T *__restrict__ dq, T *__restrict__ dk, T *__restrict__ dv, T *__restrict__ ds,
                          const T *__restrict__ dout, const T *__restrict__ att, const T *__restrict__ q,
                          const T *__restrict__ k, const T *__restrict__ v, Args a) {
#if MMA_TILE_OK
    extern __shared__ __align__(16) unsigned char smem_raw[];  // SMEM_BYTES: sA (V, then Q), sO, sK, sP
    T *sA = reinterpret_cast<T *>(smem_raw), *sO = sA + TMAX * LDS, *sK = sO + TMAX * LDS, *sP = sK + TMAX * LDS;
    const int h = blockIdx.x, b = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    const int Tq = a.Tq, Tk = a.Tk;
    const size_t HD = (size_t)a.H * DK;
    const size_t qoff = (size_t)b * Tq * HD + (size_t)h * DK, koff = (size_t)b * Tk * HD + (size_t)h * DK;
    const size_t dqoff = (size_t)b * Tq * a.ldq + (size_t)h * DK, dkoff = (size_t)b * Tk * a.ldkv + (size_t)h * DK;
    // 1. V and dO (group 1), K (group 2)
    load_rows_async<T, DK, LDS, THREADS>(sA, v + koff, HD, Tk, NT * 8);
    load_rows_async<T, DK, LDS, THREADS>(sO, dout + qoff, HD, Tq, TMAX);
    cp_async_commit();
    load_rows_async<T, DK, LDS, THREADS>(sK, k + koff, HD, Tk, NT * 8);
    cp_async_commit();
    const int rw = warp * 16;  // the warp's first query row (and first key in 5 and 7)
    const uint64_t row0 = (((uint64_t)b * a.H + h) * Tq + rw + g) * Tk;
    unsigned keep[2];
    keep_bits<NT>(keep, a, row0, qd);  // while the copies fly
    cp_async_wait<1>();
    __syncthreads();
    // 2. dPd = dO V^T: as the forward's S = Q K^T, then rounded to pairs of T as the GEMM stores it
    uint32_t xs[NT][2];  // [t][r]: keys 8t + 2qd, +1 of row g + 8r
    {
        float s[NT][4];
        warp_rows_abt<T, NT, DK / 16>(s, sO + rw * LDS, sA, LDS, lane);
#pragma unroll
        for (int t = 0; t < NT; t++) xs[t][0] = pack2<T>(s[t][0], s[t][1]), xs[t][1] = pack2<T>(s[t][2], s[t][3]);
    }
    __syncthreads();  // every warp is done with V: Q takes its place (group 3)
    load_rows_async<T, DK, LDS, THREADS>(sA, q + qoff, HD, Tq, TMAX);
    cp_async_commit();
    // 3. per row r (g, g + 8): g = dropout(T(dPd)), dot = sum P g, dS = T(P (g - dot)), Pd
    uint32_t dsp[NT][2];  // dS pairs: [t][r] = keys 8t + 2qd, +1 of row g + 8r
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int il = rw + g + 8 * r;
        const bool row_in = il < Tq;
        const T *prow = att + row0 + (uint64_t)r * 8 * Tk;
        uint32_t pp[NT];  // P pairs (exact in T)
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int j = 8 * t + 2 * qd;
            pp[t] = row_in && j < Tk ? *reinterpret_cast<const uint32_t *>(prow + j) : 0u;  // Tk even: j + 1 < Tk
            float P[2], x[2];
            unpack2<T>(P, pp[t]);
            unpack2<T>(x, xs[t][r]);
#pragma unroll
            for (int e = 0; e < 2; e++) dot += P[e] * ((keep[r] >> (2 * t + e)) & 1u ? x[e] * a.scale : 0.0f);
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int j = 8 * t + 2 * qd;
            float P[2], x[2];
            unpack2<T>(P, pp[t]);
            unpack2<T>(x, xs[t][r]);
            const bool k0 = (keep[r] >> (2 * t)) & 1u, k1 = (keep[r] >> (2 * t + 1)) & 1u;
            const float g0 = k0 ? x[0] * a.scale : 0.0f, g1 = k1 ? x[1] * a.scale : 0.0f;
            dsp[t][r] = pack2<T>(P[0] * (g0 - dot), P[1] * (g1 - dot));
            const float d0 = k0 ? P[0] * a.scale : 0.0f, d1 = k1 ? P[1] * a.scale : 0.0f;
            *reinterpret_cast<uint32_t *>(sP + il * LDP + j) = pack2<T>(d0, d1);
        }
    }
    cp_async_wait<1>();  // K (group 2) is in
    __syncthreads();     // sP holds Pd
    const int qt = (Tq + 15) / 16;  // query row tiles
    float acc[DK / 8][4];
    // 4. dQ (16, 64) = dS K
    if (dq) {
        warp_pairs_ab<T, NT, DK / 8>(acc, dsp, sK, LDS, lane);
        store_tile<T>(dq + dqoff, a.ldq, rw, Tq, acc, !a.set, g, qd);
    }
    // 5. dV (keys rw.., 64) = Pd^T dO
    const bool keys_in = rw < Tk;
    if (dv && keys_in) {
        key_product<T>(acc, sP, sO, rw, qt, lane);
        store_tile<T>(dv + dkoff, a.ldkv, rw, Tk, acc, !a.set, g, qd);
    }
    __syncthreads();  // Pd is read: dS over it
    // 6. dS into sP
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) *reinterpret_cast<uint32_t *>(sP + (rw + g + 8 * r) * LDP + 8 * t + 2 * qd) = dsp[t][r];
    cp_async_wait<0>();  // Q (group 3)
    __syncthreads();
    // 7. dK (keys rw.., 64) = dS^T Q
    if (dk && keys_in) {
        key_product<T>(acc, sP, sA, rw, qt, lane);
        store_tile<T>(dk + dkoff, a.ldkv, rw, Tk, acc, !a.set, g, qd);
    }
    // 8. dS to ds for the bias gradient: the head's (Tq, Tk) block, a pair of keys a thread,
    // consecutive threads on consecutive pairs
    if (ds) {
        T *dsh = ds + ((size_t)b * a.H + h) * Tq * Tk;
        const int half = Tk / 2;
        for (int c = threadIdx.x; c < Tq * half; c += THREADS) {
            const int i = c / half, j = 2 * (c % half);
            *reinterpret_cast<uint32_t *>(dsh + (size_t)i * Tk + j) = *reinterpret_cast<const uint32_t *>(sP + i * LDP + j);
        }
    }
#endif
}

}  // namespace flash_bwd

