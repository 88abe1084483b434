// kernels/cuda/attention_fused.cu: T5 attention core as one kernel per direction for the
// training shapes (bf16/fp16, d_kv 64 or 128, Tq and Tk up to 128): one thread block per
// head (b,h) keeps Q, K, V, the scores and the probabilities in shared memory and runs the
// products on tensor cores (WMMA 16x16x16, fp32 accumulation), so the scores never make
// the round trips through memory of attention.cu's GEMM + softmax + GEMM path.
// Semantics are attention.cu's, step for step (and so the CPU reference's):
//   forward   S = T(Q K^T); s = S + bias (fp32); masked keys (key_mask 0, or causal
//             j > q_offset + i) get P = 0, a row with every key masked P = 0 and O = 0;
//             P = T(softmax(s)) is written to att; Pd = T(P * mask / (1-p)) with
//             kernels/dropout_rng.h's mask at the flattened (b,h,i,j); O = T(Pd V).
//   backward  dPd = T(dO V^T); g = mask / (1-p) * dPd; dS = T(P (g - sum_j P g));
//             dV = Pd^T dO, dQ = dS K, dK = dS^T Q, each written (set) or added to the
//             old value in fp32 with one rounding (the GEMMs' beta = 1); dS is written to
//             `ds` (B,H,Tq,Tk) when the caller needs the bias gradient (attention.cu sums
//             it over b).
// Shapes as attention.cu: q (B,Tq,H*dk), k and v (B,kv_rows,H*dk) (first Tk rows; kv_rows =
// Tk in backward), out/dout (B,Tq,H*dk), att/ds (B,H,Tq,Tk), bias (H,Tq,Tk), key_mask
// (B,kv_rows).
//
// Layout of one block (8 warps; warp w owns query rows [16w, 16w+16) and key rows
// [16w, 16w+16) of the head, so Tq, Tk <= 128 = 8 strips of 16):
//   forward   sF float (128, 132)  scores, then O's fp32 accumulators (row strip w)
//             sQ, sK, sV T (128, dk+8); sP T (128, 136) dropped probabilities Pd
//   backward  sF float (128, 132)  dPd, then the dV, dQ, dK accumulators of strip w
//             sX1 T (128, dk+8) dO then Q; sX2 T (128, dk+8) V then K
//             sP T (128, 136) P then dS (in place); sPd T (128, 136) Pd
// Rows and keys past Tq, Tk are zero in shared memory and never written out. The +8 / +4
// paddings keep WMMA's 32-byte-aligned tile starts while moving rows off the same banks.
// At dk = 64 the forward needs 154 KiB and the backward 170 KiB of shared memory (one
// block per SM); at dk = 128, 202 KiB each.
//
// Determinism: fixed warp-shuffle row sums, WMMA products in a fixed order, no atomics.
// attention.cu calls attention_fused_forward/backward first; they return false (nothing
// done) when the version is off or the shape is not covered, and the GEMM path runs.
//
// Measured (H200, bf16, B=64 H=16 T=128 dk=64, bias + mask + dropout 0.1; the perf lines of
// tests/gpu/test_backend_ops_perf.c): this version forward 0.234 ms, backward 0.341 ms;
// the GEMM path 0.099 and 0.162. One 154-170 KiB block per SM leaves 8 warps per SM
// whose phases (load, products, softmax) run one after another with nothing to overlap,
// so the version is OFF by default (cuda_attention_set_fused(1) turns it on) and kept as
// the correct, tested starting point of a faster one (two heads' phases overlapped per
// SM, scores in registers, a q-tile per block).
#include <mma.h>

#include <initializer_list>
#include <type_traits>

#include "../dropout_rng.h"
#include "attention_fused.cuh"
#include "common.cuh"

using namespace nvcuda;

namespace attf {

enum { WARPS = 8, THREADS = 32 * WARPS, TMAX = 16 * WARPS, LDF = TMAX + 4, LDP = TMAX + 8 };

template <int DK> struct Ld {
    static constexpr int X = DK + 8;  // row stride of the (rows, dk) tiles
};

template <typename T, int DK> constexpr size_t forward_smem() {
    return (size_t)TMAX * LDF * sizeof(float) + 3 * (size_t)TMAX * Ld<DK>::X * sizeof(T) + (size_t)TMAX * LDP * sizeof(T);
}
template <typename T, int DK> constexpr size_t backward_smem() {
    return (size_t)TMAX * LDF * sizeof(float) + 2 * (size_t)TMAX * Ld<DK>::X * sizeof(T) +
           2 * (size_t)TMAX * LDP * sizeof(T);
}

struct Args {
    const int *key_mask;  // (B,kv_rows) or NULL
    int H, Tq, Tk, kv_rows, causal, q_offset;
    int vec4;                // Tk % 4 == 0 and att/ds 8-byte aligned: rows in groups of 4
    float p, scale;          // dropout probability, 1/(1-p); p == 0: none
    unsigned long long key;  // dropout_rng_key(seed)
};

__device__ __forceinline__ int pad16(int n) { return (n + 15) & ~15; }

// Rows [0, n) of one head of a (.., H*dk) tensor (row stride ld elements) into dst (row
// stride DK+8), rows [n, npad) zero. 16-byte copies.
template <typename T, int DK> __device__ void load_head(T *dst, const T *src, long long ld, int n, int npad) {
    constexpr int E = 16 / (int)sizeof(T), CH = DK / E;
    for (int c = threadIdx.x; c < npad * CH; c += THREADS) {
        const int r = c / CH, q = c % CH;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < n) v = *reinterpret_cast<const uint4 *>(src + (size_t)r * ld + q * E);
        *reinterpret_cast<uint4 *>(dst + r * Ld<DK>::X + q * E) = v;
    }
}

// Rows [0, n) of a (n, Tk) score block at src into dst (row stride LDP), zero elsewhere in
// (npad, kpad).
template <typename T> __device__ void load_scores(T *dst, const T *src, int n, int Tk, int npad, int kpad) {
    for (int c = threadIdx.x; c < npad * kpad; c += THREADS) {
        const int r = c / kpad, j = c % kpad;
        dst[r * LDP + j] = (r < n && j < Tk) ? src[(size_t)r * Tk + j] : from_float<T>(0.0f);
    }
}

// A warp writes rows [0, n) of an fp32 strip (row stride LDF, dk columns) to dst rows (row
// stride ld), adding the old value first when `add` (fp32, one rounding).
template <typename T, int DK> __device__ void store_strip(T *dst, long long ld, const float *src, int n, int add) {
    constexpr int CH = DK / 8;
    const int lane = threadIdx.x % 32;
    for (int c = lane; c < n * CH; c += 32) {
        const int r = c / CH, q = c % CH;
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = src[r * LDF + q * 8 + e];
        T *d = dst + (size_t)r * ld + q * 8;
        if (add) {
            float o[8];
            load_vec<T, 8>(o, d);
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] = __fadd_rn(o[e], f[e]);
        }
        store_vec<T, 8>(d, f);
    }
}

// Dropout keep flags of keys j0..j0+3 of the score row starting at flat index rowbase.
__device__ __forceinline__ void keep4(const Args &a, size_t rowbase, int j0, bool kp[4]) {
    if (a.vec4) {  // rowbase and j0 are multiples of 4: one RNG group
        const uint64_t bits = dropout_rng_bits(a.key, (rowbase + (size_t)j0) >> 2);
#pragma unroll
        for (int e = 0; e < 4; e++) kp[e] = dropout_rng_lane(bits, (unsigned)e) >= a.p;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) kp[e] = dropout_rng_uniform_keyed(a.key, rowbase + (size_t)(j0 + e)) >= a.p;
    }
}

// Keys j0..j0+3 (those < Tk) of a global score row.
template <typename T> __device__ __forceinline__ void store_row4(T *row, int j0, int Tk, int vec4, const float (&v)[4]) {
    if (j0 >= Tk) return;
    if (vec4) {
        store_vec<T, 4>(row + j0, v);
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (j0 + e < Tk) row[j0 + e] = from_float<T>(v[e]);
    }
}

// WMMA on T exists in this compilation pass: bf16 fragments need sm_80, fp16 ones sm_70. On a
// Turing (sm_75) cubin the bf16 kernels are stubs that trap; they are never launched there
// (bf16 is refused at start-up below compute capability 8.0: kernels/gpu_arch.h).
template <typename T> struct WmmaOn {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    static constexpr bool value = !std::is_same<T, __nv_bfloat16>::value;
#else
    static constexpr bool value = true;
#endif
};

// S (tiles of strip `s`) = A B^T over DK: A rows of strip s (row stride LDA), B rows
// 0..kpad (row stride LDB), fp32 into sF rows of strip s.
template <typename T, int DK>
__device__ void strip_a_bt(float *sF, const T *A, const T *B, int s, int kpad) {
    if constexpr (!WmmaOn<T>::value) {
        __trap();
    } else {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[DK / 16];
#pragma unroll
    for (int kk = 0; kk < DK / 16; kk++) wmma::load_matrix_sync(fa[kk], A + s * 16 * Ld<DK>::X + kk * 16, Ld<DK>::X);
    for (int tj = 0; tj < kpad / 16; tj++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < DK / 16; kk++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
            wmma::load_matrix_sync(fb, B + tj * 16 * Ld<DK>::X + kk * 16, Ld<DK>::X);
            wmma::mma_sync(acc, fa[kk], fb, acc);
        }
        wmma::store_matrix_sync(sF + s * 16 * LDF + tj * 16, acc, LDF, wmma::mem_row_major);
    }
    }
}

// sF rows of strip `out_strip` (dk columns) = op(S) X over `kdim` (a multiple of 16):
// op(S) is the score tile strip s of sS (row stride LDP) when !trans (rows of strip s,
// columns kk), or its transpose (columns of strip s, rows kk) when trans; X (kdim, DK)
// row stride DK+8.
template <typename T, int DK, bool TRANS>
__device__ void strip_s_x(float *sF, const T *sS, const T *X, int s, int kdim) {
    if constexpr (!WmmaOn<T>::value) {
        __trap();
    } else {
    typedef typename std::conditional<TRANS, wmma::col_major, wmma::row_major>::type LayoutA;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[DK / 16];
#pragma unroll
    for (int tn = 0; tn < DK / 16; tn++) wmma::fill_fragment(acc[tn], 0.0f);
    for (int kk = 0; kk < kdim / 16; kk++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
        // element (r, c) of op(S)'s tile: S[16s + r][16kk + c], or S[16kk + c][16s + r]
        wmma::load_matrix_sync(fa, TRANS ? sS + kk * 16 * LDP + s * 16 : sS + s * 16 * LDP + kk * 16, LDP);
#pragma unroll
        for (int tn = 0; tn < DK / 16; tn++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fb, X + kk * 16 * Ld<DK>::X + tn * 16, Ld<DK>::X);
            wmma::mma_sync(acc[tn], fa, fb, acc[tn]);
        }
    }
#pragma unroll
    for (int tn = 0; tn < DK / 16; tn++)
        wmma::store_matrix_sync(sF + s * 16 * LDF + tn * 16, acc[tn], LDF, wmma::mem_row_major);
    }
}

template <typename T, int DK>
__global__ void __launch_bounds__(THREADS)
    forward_kernel(T *__restrict__ out, T *__restrict__ att, const T *__restrict__ q, const T *__restrict__ k,
                   const T *__restrict__ v, const T *__restrict__ bias, Args a) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int LX = Ld<DK>::X;
    float *sF = reinterpret_cast<float *>(smem);
    T *sQ = reinterpret_cast<T *>(smem + (size_t)TMAX * LDF * sizeof(float));
    T *sK = sQ + TMAX * LX, *sV = sK + TMAX * LX, *sP = sV + TMAX * LX;
    const int h = blockIdx.x, b = blockIdx.y, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int Tq = a.Tq, Tk = a.Tk, qpad = pad16(Tq), kpad = pad16(Tk);
    const long long ld = (long long)a.H * DK;
    load_head<T, DK>(sQ, q + (size_t)b * Tq * ld + (size_t)h * DK, ld, Tq, qpad);
    load_head<T, DK>(sK, k + (size_t)b * a.kv_rows * ld + (size_t)h * DK, ld, Tk, kpad);
    load_head<T, DK>(sV, v + (size_t)b * a.kv_rows * ld + (size_t)h * DK, ld, Tk, kpad);
    __syncthreads();
    if (w >= qpad / 16) return;  // no barrier below: each warp works on its own strip
    strip_a_bt<T, DK>(sF, sQ, sK, w, kpad);
    __syncwarp();
    const int *mrow = a.key_mask ? a.key_mask + (size_t)b * a.kv_rows : nullptr;
    const int j0 = lane * 4;  // this lane's 4 keys (kpad <= 128)
    for (int r = 0; r < 16; r++) {
        const int i = w * 16 + r;
        float pd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (i < Tq) {
            const int qpos = a.q_offset + i;
            const T *brow = bias ? bias + ((size_t)h * Tq + i) * Tk : nullptr;
            float s[4];
            bool live[4];
            float mx = -INFINITY;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = j0 + e;
                live[e] = j < Tk && !(mrow && mrow[j] == 0) && !(a.causal && j > qpos);
                s[e] = 0.0f;
                if (live[e]) {
                    s[e] = round_to<T>(sF[(w * 16 + r) * LDF + j]) + (brow ? to_float(brow[j]) : 0.0f);
                    mx = fmaxf(mx, s[e]);
                }
            }
            mx = warp_max(mx);
            float sum = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[e] = live[e] ? expf(s[e] - mx) : 0.0f;
                sum += s[e];
            }
            sum = warp_sum(sum);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum == 0: every key masked
            float P[4];
#pragma unroll
            for (int e = 0; e < 4; e++) P[e] = round_to<T>(s[e] * inv);
            const size_t rowbase = (((size_t)b * a.H + h) * Tq + i) * Tk;
            store_row4<T>(att + rowbase, j0, Tk, a.vec4, P);
            if (a.p != 0.0f) {
                bool kp[4];
                keep4(a, rowbase, j0, kp);
#pragma unroll
                for (int e = 0; e < 4; e++) pd[e] = kp[e] ? P[e] * a.scale : 0.0f;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) pd[e] = P[e];
            }
        }
        store_vec<T, 4>(sP + (w * 16 + r) * LDP + j0, pd);  // rounds Pd to T
    }
    __syncwarp();
    strip_s_x<T, DK, false>(sF, sP, sV, w, kpad);  // O (strip w) = Pd V
    __syncwarp();
    const int n = min(16, Tq - w * 16);
    store_strip<T, DK>(out + ((size_t)b * Tq + w * 16) * ld + (size_t)h * DK, ld, sF + w * 16 * LDF, n, 0);
}

template <typename T, int DK>
__global__ void __launch_bounds__(THREADS)
    backward_kernel(T *__restrict__ dq, T *__restrict__ dk, T *__restrict__ dv, T *__restrict__ ds,
                    const T *__restrict__ dout, const T *__restrict__ att, const T *__restrict__ q,
                    const T *__restrict__ k, const T *__restrict__ v, Args a, int add) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int LX = Ld<DK>::X;
    float *sF = reinterpret_cast<float *>(smem);
    T *sX1 = reinterpret_cast<T *>(smem + (size_t)TMAX * LDF * sizeof(float));
    T *sX2 = sX1 + TMAX * LX, *sP = sX2 + TMAX * LX, *sPd = sP + TMAX * LDP;
    const int h = blockIdx.x, b = blockIdx.y, w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int Tq = a.Tq, Tk = a.Tk, qpad = pad16(Tq), kpad = pad16(Tk);
    const long long ld = (long long)a.H * DK;
    const size_t head_scores = (((size_t)b * a.H + h) * Tq) * Tk;
    const T *qh = q + (size_t)b * Tq * ld + (size_t)h * DK, *doh = dout + (size_t)b * Tq * ld + (size_t)h * DK;
    const T *kh = k + (size_t)b * Tk * ld + (size_t)h * DK, *vh = v + (size_t)b * Tk * ld + (size_t)h * DK;
    load_head<T, DK>(sX1, doh, ld, Tq, qpad);
    load_head<T, DK>(sX2, vh, ld, Tk, kpad);
    load_scores<T>(sP, att + head_scores, Tq, Tk, qpad, kpad);
    __syncthreads();
    const bool qstrip = w < qpad / 16, kstrip = w < kpad / 16;
    if (qstrip) {
        strip_a_bt<T, DK>(sF, sX1, sX2, w, kpad);  // dPd (strip w) = dO V^T
        __syncwarp();
        const int j0 = lane * 4;
        for (int r = 0; r < 16; r++) {
            const int i = w * 16 + r;
            float P[4], g[4], pd[4], dsv[4];
            load_vec<T, 4>(P, sP + (w * 16 + r) * LDP + j0);  // 0 past Tq and in [Tk, kpad)
            float dot = 0.0f;
            bool kp[4] = {true, true, true, true};
            const size_t rowbase = head_scores + (size_t)i * Tk;
            if (a.p != 0.0f && i < Tq) keep4(a, rowbase, j0, kp);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (j0 + e >= Tk) {  // padding (beyond kpad, shared memory was never written)
                    P[e] = g[e] = pd[e] = 0.0f;
                    continue;
                }
                g[e] = round_to<T>(sF[(w * 16 + r) * LDF + j0 + e]);
                if (a.p != 0.0f) {
                    g[e] = kp[e] ? g[e] * a.scale : 0.0f;
                    pd[e] = kp[e] ? P[e] * a.scale : 0.0f;
                } else {
                    pd[e] = P[e];
                }
                dot += P[e] * g[e];
            }
            dot = warp_sum(dot);
#pragma unroll
            for (int e = 0; e < 4; e++) dsv[e] = round_to<T>(P[e] * (g[e] - dot));
            store_vec<T, 4>(sP + (w * 16 + r) * LDP + j0, dsv);
            store_vec<T, 4>(sPd + (w * 16 + r) * LDP + j0, pd);
            if (ds && i < Tq) store_row4<T>(ds + rowbase, j0, Tk, a.vec4, dsv);
        }
    }
    __syncthreads();  // every strip's dS and Pd are in place; V is no longer read
    if (dq) load_head<T, DK>(sX2, kh, ld, Tk, kpad);
    if (dv && kstrip) {  // dV (key strip w) = Pd^T dO
        strip_s_x<T, DK, true>(sF, sPd, sX1, w, qpad);
        __syncwarp();
        store_strip<T, DK>(dv + ((size_t)b * Tk + w * 16) * ld + (size_t)h * DK, ld, sF + w * 16 * LDF,
                           min(16, Tk - w * 16), add);
    }
    __syncthreads();  // K in place; dO is no longer read
    if (dk) load_head<T, DK>(sX1, qh, ld, Tq, qpad);
    __syncthreads();
    if (dq && qstrip) {  // dQ (query strip w) = dS K
        strip_s_x<T, DK, false>(sF, sP, sX2, w, kpad);
        __syncwarp();
        store_strip<T, DK>(dq + ((size_t)b * Tq + w * 16) * ld + (size_t)h * DK, ld, sF + w * 16 * LDF,
                           min(16, Tq - w * 16), add);
        __syncwarp();
    }
    if (dk && kstrip) {  // dK (key strip w) = dS^T Q
        strip_s_x<T, DK, true>(sF, sP, sX1, w, qpad);
        __syncwarp();
        store_strip<T, DK>(dk + ((size_t)b * Tk + w * 16) * ld + (size_t)h * DK, ld, sF + w * 16 * LDF,
                           min(16, Tk - w * 16), add);
    }
}

}  // namespace attf

// ---- host side ----------------------------------------------------------------------------------

static int attention_fused_enabled = 0;  // off: measured slower (header), kept as the version to beat

extern "C" void cuda_attention_set_fused(int on) { attention_fused_enabled = on != 0; }

// The kernel's shared memory, opted into once per instantiation; false when the device
// allows less per block (the GEMM path then runs).
template <typename K> static bool smem_opt_in(K kernel, size_t bytes, int *state) {
    if (*state == 0) {
        int dev = 0, max_optin = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if ((size_t)max_optin < bytes) {
            *state = -1;
        } else {
            cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
            *state = 1;
        }
    }
    return *state == 1;
}

static bool fused_shape_ok(Dtype dt, int B, int Tq, int Tk, int H, int dk) {
    return attention_fused_enabled && (dt == DTYPE_BF16 || dt == DTYPE_F16) && (dk == 64 || dk == 128) && Tq >= 1 &&
           Tq <= attf::TMAX && Tk >= 1 && Tk <= attf::TMAX && B >= 1 && B <= 65535 && H >= 1;
}

static bool all_aligned16(std::initializer_list<const void *> ps) {
    for (const void *p : ps)
        if (p && !aligned16(p)) return false;
    return true;
}

static attf::Args fused_args(const int *key_mask, int H, int Tq, int Tk, int kv_rows, int causal, int q_offset,
                             DropoutArgs drop, const void *scores0, const void *scores1) {
    attf::Args a;
    a.key_mask = key_mask;
    a.H = H;
    a.Tq = Tq;
    a.Tk = Tk;
    a.kv_rows = kv_rows;
    a.causal = causal;
    a.q_offset = q_offset;
    a.vec4 = Tk % 4 == 0 && ((uintptr_t)scores0 % 8) == 0 && ((uintptr_t)scores1 % 8) == 0;
    a.p = drop.p;
    a.scale = drop.p != 0.0f ? dropout_rng_scale(drop.p) : 1.0f;
    a.key = dropout_rng_key(drop.seed);
    return a;
}

template <typename T, int DK>
static bool fused_forward_t(void *out, void *att, const void *q, const void *k, const void *v, const void *bias,
                            int B, int H, const attf::Args &a) {
    static int opted = 0;
    const size_t smem = attf::forward_smem<T, DK>();
    if (!smem_opt_in(attf::forward_kernel<T, DK>, smem, &opted)) return false;
    attf::forward_kernel<T, DK><<<dim3((unsigned)H, (unsigned)B), attf::THREADS, smem, t5_stream()>>>(
        (T *)out, (T *)att, (const T *)q, (const T *)k, (const T *)v, (const T *)bias, a);
    cudaLaunchCheck();
    return true;
}

template <typename T, int DK>
static bool fused_backward_t(void *dq, void *dk, void *dv, void *ds, const void *dout, const void *att, const void *q,
                             const void *k, const void *v, int B, int H, const attf::Args &a, int add) {
    static int opted = 0;
    const size_t smem = attf::backward_smem<T, DK>();
    if (!smem_opt_in(attf::backward_kernel<T, DK>, smem, &opted)) return false;
    attf::backward_kernel<T, DK><<<dim3((unsigned)H, (unsigned)B), attf::THREADS, smem, t5_stream()>>>(
        (T *)dq, (T *)dk, (T *)dv, (T *)ds, (const T *)dout, (const T *)att, (const T *)q, (const T *)k, (const T *)v,
        a, add);
    cudaLaunchCheck();
    return true;
}

bool attention_fused_forward(Dtype dt, void *out, void *att, const void *q, const void *k, const void *v,
                             const void *bias, const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk,
                             int causal, int q_offset, DropoutArgs drop) {
    if (!fused_shape_ok(dt, B, Tq, Tk, H, dk) || !all_aligned16({out, q, k, v})) return false;
    const attf::Args a = fused_args(key_mask, H, Tq, Tk, kv_rows, causal, q_offset, drop, att, att);
    if (dt == DTYPE_BF16)
        return dk == 64 ? fused_forward_t<__nv_bfloat16, 64>(out, att, q, k, v, bias, B, H, a)
                        : fused_forward_t<__nv_bfloat16, 128>(out, att, q, k, v, bias, B, H, a);
    return dk == 64 ? fused_forward_t<__half, 64>(out, att, q, k, v, bias, B, H, a)
                    : fused_forward_t<__half, 128>(out, att, q, k, v, bias, B, H, a);
}

bool attention_fused_backward(Dtype dt, void *dq, void *dk_, void *dv, void *ds, const void *dout, const void *att,
                              const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int dk,
                              DropoutArgs drop, int dqkv_set) {
    if (!fused_shape_ok(dt, B, Tq, Tk, H, dk) || !all_aligned16({dq, dk_, dv, dout, q, k, v})) return false;
    const attf::Args a = fused_args(NULL, H, Tq, Tk, Tk, 0, 0, drop, att, ds ? ds : att);
    const int add = !dqkv_set;
    if (dt == DTYPE_BF16)
        return dk == 64 ? fused_backward_t<__nv_bfloat16, 64>(dq, dk_, dv, ds, dout, att, q, k, v, B, H, a, add)
                        : fused_backward_t<__nv_bfloat16, 128>(dq, dk_, dv, ds, dout, att, q, k, v, B, H, a, add);
    return dk == 64 ? fused_backward_t<__half, 64>(dq, dk_, dv, ds, dout, att, q, k, v, B, H, a, add)
                    : fused_backward_t<__half, 128>(dq, dk_, dv, ds, dout, att, q, k, v, B, H, a, add);
}
