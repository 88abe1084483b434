// kernels/cuda/attention_decode.cu: attention of one query per row over cached keys and
// values (backend.h attention_decode; kernels/cpu/attention_decode.c is the reference).
// Generation's decoder step: N = batch * beams rows, each attending over Tk cached
// positions of its own sequence, read in place through a KvView (the beam table or the
// per-item encoder K/V): no head permutes, no cache copies, no (N, H, Tk) scratch.
//
// One block per (head h, row i), DECODE_THREADS threads = DECODE_WARPS warps:
//   1. scores: warp w takes keys j = w, w + warps, ...; each lane holds dims lane,
//      lane + 32, ... of q (fp32) and of k_j; the dot is a warp_sum, rounded to the
//      activation dtype (as attention_forward's GEMM stores its scores), plus the bias in
//      fp32; masked keys are -inf. Scores live in shared memory (Tk floats).
//   2. softmax over the block: max and sum of exp (fixed reduction trees), P_j =
//      exp(s_j - max) * (1/sum) rounded to the activation dtype (as attention_forward
//      stores its probabilities before the P.V GEMM).
//   3. out: warp w sums P_j v_j over its keys (fp32), the warps' sums are added in warp
//      order in shared memory, rounded once.
// A warp reads one key row of a head as one contiguous dk-element range (128 bytes for
// bf16 dk = 64): the reads are coalesced whatever slot the beam table names.
// Deterministic: no atomics, fixed orders.
// KvView.pos set (generation's graph-replayed step): the position t comes from memory, the
// loops run over t + 1 keys and key j reads bias[h][Tk - 1 - t + j] (an (H, Tk) bias by
// distance); Tk (the capacity) only sizes the shared scores. The same loops over the same keys: the bits of Tk = t + 1.
// kv_append (the step's K/V into the cache at the position from memory) is here too.
#include <math.h>
#include <stdint.h>

#include "common.cuh"

#define DECODE_WARPS 4
#define DECODE_THREADS (32 * DECODE_WARPS)
#define DECODE_MAX_DK 256  // dims per lane <= 8 (registers)

__device__ __forceinline__ size_t decode_kv_row(const KvView &kv, int i, int j) {
    const long p = kv.table ? kv.table[(size_t)i * kv.table_ld + j] : i / kv.slot_div;
    return (size_t)(p * kv.slot_stride + (long)j * kv.pos_stride);
}

// 2. of both kernels: softmax over the block's scores sc[0..len) in place. mx: this warp's
// maximum (in lane 0); wred: DECODE_WARPS floats of shared scratch. The block's maximum, the sum
// of exp (fixed reduction trees), then P_j = exp(s_j - max) * (1/sum) rounded to T (masked keys,
// -inf, get 0; every key masked: all 0). Ends with a barrier: sc holds P for every thread.
template <typename T>
__device__ __forceinline__ void decode_softmax(float *sc, float *wred, float mx, int len, int lane, int warp) {
    if (lane == 0) wred[warp] = mx;
    __syncthreads();
    mx = wred[0];
#pragma unroll
    for (int w = 1; w < DECODE_WARPS; w++) mx = fmaxf(mx, wred[w]);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < len; j += DECODE_THREADS) sum += sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mx);
    sum = warp_sum(sum);
    __syncthreads();  // every thread has read wred's maxima
    if (lane == 0) wred[warp] = sum;
    __syncthreads();
    sum = 0.0f;
#pragma unroll
    for (int w = 0; w < DECODE_WARPS; w++) sum += wred[w];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // sum == 0: every key masked
    for (int j = threadIdx.x; j < len; j += DECODE_THREADS)
        sc[j] = sc[j] == -INFINITY ? 0.0f : round_to<T>(expf(sc[j] - mx) * inv);
    __syncthreads();
}

template <typename T>
__global__ void __launch_bounds__(DECODE_THREADS)
    attention_decode_kernel(T *__restrict__ out, const T *__restrict__ q, KvView kv, const T *__restrict__ bias,
                            int Tk, int H, int dk) {
    extern __shared__ float sc[];                 // (Tk) scores, then probabilities
    __shared__ float red[DECODE_WARPS][DECODE_MAX_DK];  // the warps' partial outputs
    __shared__ float wred[DECODE_WARPS];
    const int h = blockIdx.x, i = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // kv.pos: the query's position t from memory (a replayed graph's step), keys 0..t, the
    // (H, Tk) bias by distance; the host checked t < Tk (clamped only against a wild read)
    const int t = kv.pos ? min(max(*kv.pos, 0), Tk - 1) : Tk - 1, len = t + 1;
    const size_t brow = (size_t)h * Tk + (size_t)(Tk - 1 - t);
    const size_t HD = (size_t)H * dk, col = (size_t)h * dk;
    const T *K = (const T *)kv.k, *Vv = (const T *)kv.v;
    const int *mrow = kv.key_mask ? kv.key_mask + (size_t)(i / kv.slot_div) * kv.mask_ld : nullptr;
    constexpr int MAXD = DECODE_MAX_DK / 32;
    float qd[MAXD];
#pragma unroll
    for (int e = 0; e < MAXD; e++) {
        const int d = lane + 32 * e;
        qd[e] = d < dk ? to_float(q[(size_t)i * HD + col + d]) : 0.0f;
    }
    // 1. scores
    float mx = -INFINITY;
    for (int j = warp; j < len; j += DECODE_WARPS) {
        if (mrow && mrow[j] == 0) {
            if (lane == 0) sc[j] = -INFINITY;
            continue;
        }
        const T *kj = K + decode_kv_row(kv, i, j) * HD + col;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < MAXD; e++) {
            const int d = lane + 32 * e;
            if (d < dk) s += qd[e] * to_float(kj[d]);
        }
        s = round_to<T>(warp_sum(s));
        if (bias) s += to_float(bias[brow + j]);
        if (lane == 0) sc[j] = s;
        mx = fmaxf(mx, s);
    }
    // 2. softmax over the block
    decode_softmax<T>(sc, wred, mx, len, lane, warp);
    // 3. out = P @ v
    float acc[MAXD];
#pragma unroll
    for (int e = 0; e < MAXD; e++) acc[e] = 0.0f;
    for (int j = warp; j < len; j += DECODE_WARPS) {
        const float p = sc[j];
        if (p == 0.0f) continue;  // masked (or underflowed: adds nothing)
        const T *vj = Vv + decode_kv_row(kv, i, j) * HD + col;
#pragma unroll
        for (int e = 0; e < MAXD; e++) {
            const int d = lane + 32 * e;
            if (d < dk) acc[e] += p * to_float(vj[d]);
        }
    }
#pragma unroll
    for (int e = 0; e < MAXD; e++) {
        const int d = lane + 32 * e;
        if (d < dk) red[warp][d] = acc[e];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < dk; d += DECODE_THREADS) {
        float o = red[0][d];
#pragma unroll
        for (int w = 1; w < DECODE_WARPS; w++) o += red[w][d];
        out[(size_t)i * HD + col + d] = from_float<T>(o);
    }
}

// The vec kernels' key score: the pack's products summed in order, then the G lanes' partials
// by a fixed xor tree (every lane of the warp must call it); kd is read only when live.
template <int G, int PACK>
__device__ __forceinline__ float decode_vec_dot(const float (&qd)[PACK], const float (&kd)[PACK], int live) {
    float s = 0.0f;
    if (live)
#pragma unroll
        for (int e = 0; e < PACK; e++) s += qd[e] * kd[e];
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// The vec kernels' end for one row: each lane's pack of sum_j P_j v_j summed over the warp's
// key groups (xor tree over the lanes G apart), the warps' sums added in warp order through red
// (DECODE_WARPS x DK shared floats), rounded once into orow (DK elements). Every thread of the
// block must call it; it ends before red may be written again (the caller's next barrier).
template <typename T, int G, int PACK>
__device__ __forceinline__ void decode_vec_store_row(T *orow, float (&acc)[PACK], float (*red)[G * PACK], int part,
                                                     int sub, int warp) {
#pragma unroll
    for (int o = G; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < PACK; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    if (sub == 0)
#pragma unroll
        for (int e = 0; e < PACK; e++) red[warp][part * PACK + e] = acc[e];
    __syncthreads();
    for (int d = threadIdx.x; d < G * PACK; d += DECODE_THREADS) {
        float o = red[0][d];
#pragma unroll
        for (int w = 1; w < DECODE_WARPS; w++) o += red[w][d];
        orow[d] = from_float<T>(o);
    }
}

// The same attention with 16-byte loads (the generation shapes: dk = G x pack, G lanes per
// key, pack = 16 bytes of T): a warp takes 32 / G keys at once, lane part p = lane % G holding
// dims [p*pack, (p+1)*pack) of q and of each key and value row it reads. Scores: the pack's
// products summed in order, then the G lanes' partials by a fixed xor tree; rounded to T and
// biased as above. Softmax: as above. Out: each lane's pack of P_j v_j summed over its keys,
// then the warp's key groups (xor tree over the lanes G apart) and the warps in order.
// Deterministic (fixed trees, no atomics); the sums are in a different order than
// attention_decode_kernel's, so the two differ by rounding, not more.
template <typename T, int G>
__global__ void __launch_bounds__(DECODE_THREADS)
    attention_decode_vec_kernel(T *__restrict__ out, const T *__restrict__ q, KvView kv, const T *__restrict__ bias,
                                int Tk, int H) {
    constexpr int PACK = pack_of<T>(), DK = G * PACK, KPW = 32 / G, STEP = KPW * DECODE_WARPS;
    extern __shared__ float sc[];  // (Tk) scores, then probabilities
    __shared__ float red[DECODE_WARPS][DK];
    __shared__ float wred[DECODE_WARPS];
    const int h = blockIdx.x, i = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int part = lane % G, sub = lane / G;
    const int t = kv.pos ? min(max(*kv.pos, 0), Tk - 1) : Tk - 1, len = t + 1;
    const size_t brow = (size_t)h * Tk + (size_t)(Tk - 1 - t);
    const size_t HD = (size_t)H * DK, col = (size_t)h * DK + (size_t)part * PACK;
    const T *K = (const T *)kv.k, *Vv = (const T *)kv.v;
    const int *mrow = kv.key_mask ? kv.key_mask + (size_t)(i / kv.slot_div) * kv.mask_ld : nullptr;
    float qd[PACK];
    load_vec<T, PACK>(qd, q + (size_t)i * HD + col);
    // 1. scores: the warp's key groups j = warp * KPW + sub + STEP * n (every lane runs the
    // same trip count, so the xor tree's shuffles see the whole warp)
    float mx = -INFINITY;
    for (int j0 = warp * KPW; j0 < len; j0 += STEP) {
        const int j = j0 + sub;
        const int live = j < len && !(mrow && mrow[j] == 0);
        float kd[PACK];
        if (live) load_vec<T, PACK>(kd, K + decode_kv_row(kv, i, j) * HD + col);
        float s = decode_vec_dot<G, PACK>(qd, kd, live);
        if (j < len) {
            s = live ? round_to<T>(s) + (bias ? to_float(bias[brow + j]) : 0.0f) : -INFINITY;
            if (part == 0) sc[j] = s;
            mx = fmaxf(mx, s);
        }
    }
    mx = warp_max(mx);
    // 2. softmax over the block
    decode_softmax<T>(sc, wred, mx, len, lane, warp);
    // 3. out = P @ v
    float acc[PACK];
#pragma unroll
    for (int e = 0; e < PACK; e++) acc[e] = 0.0f;
    for (int j = warp * KPW + sub; j < len; j += STEP) {
        const float p = sc[j];
        if (p == 0.0f) continue;  // masked (or underflowed: adds nothing)
        float vd[PACK];
        load_vec<T, PACK>(vd, Vv + decode_kv_row(kv, i, j) * HD + col);
#pragma unroll
        for (int e = 0; e < PACK; e++) acc[e] += p * vd[e];
    }
    decode_vec_store_row<T, G, PACK>(out + (size_t)i * HD + (size_t)h * DK, acc, red, part, sub, warp);
}

// The vec kernel for rows that share their keys (table == NULL: the slot is i / slot_div, e.g.
// the beams of one item over its encoder K/V in cross-attention): one block per (head, up to
// ITEMS_ROWS rows of one slot), so each key and value row is read once for those rows instead
// of once a row. Per row, every sum runs in the vec kernel's order (the same lanes, the same
// xor trees, the same warps in order, decode_softmax once a row), so its bits are the vec
// kernel's: the rows only share the loads (tests/gpu: bitwise against a beam-table view of the
// same keys, which takes the vec kernel).
#define ITEMS_ROWS 4
template <typename T, int G>
__global__ void __launch_bounds__(DECODE_THREADS)
    attention_decode_items_kernel(T *__restrict__ out, const T *__restrict__ q, KvView kv, const T *__restrict__ bias,
                                  int N, int Tk, int H) {
    constexpr int PACK = pack_of<T>(), DK = G * PACK, KPW = 32 / G, STEP = KPW * DECODE_WARPS;
    extern __shared__ float sc[];  // (ITEMS_ROWS, Tk) scores, then probabilities
    __shared__ float red[DECODE_WARPS][DK];
    __shared__ float wred[DECODE_WARPS];
    const int chunks = (kv.slot_div + ITEMS_ROWS - 1) / ITEMS_ROWS;  // blocks a slot
    const int h = blockIdx.x, slot = blockIdx.y / chunks, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i0 = slot * kv.slot_div + (blockIdx.y % chunks) * ITEMS_ROWS;
    const int nr = min(min(ITEMS_ROWS, (slot + 1) * kv.slot_div - i0), N - i0);  // rows of this block
    const int part = lane % G, sub = lane / G, len = Tk;
    const size_t brow = (size_t)h * Tk;
    const size_t HD = (size_t)H * DK, col = (size_t)h * DK + (size_t)part * PACK;
    const T *K = (const T *)kv.k + (size_t)slot * kv.slot_stride * HD, *Vv = (const T *)kv.v + (size_t)slot * kv.slot_stride * HD;
    const int *mrow = kv.key_mask ? kv.key_mask + (size_t)slot * kv.mask_ld : nullptr;
    float qd[ITEMS_ROWS][PACK];
#pragma unroll
    for (int r = 0; r < ITEMS_ROWS; r++)
        if (r < nr) load_vec<T, PACK>(qd[r], q + (size_t)(i0 + r) * HD + col);
    // 1. scores: as the vec kernel, one key load for the block's rows
    float mx[ITEMS_ROWS];
#pragma unroll
    for (int r = 0; r < ITEMS_ROWS; r++) mx[r] = -INFINITY;
    for (int j0 = warp * KPW; j0 < len; j0 += STEP) {
        const int j = j0 + sub;
        const int live = j < len && !(mrow && mrow[j] == 0);
        float kd[PACK];
        if (live) load_vec<T, PACK>(kd, K + (size_t)j * kv.pos_stride * HD + col);
        const float bj = live && bias ? to_float(bias[brow + j]) : 0.0f;
#pragma unroll
        for (int r = 0; r < ITEMS_ROWS; r++) {
            if (r >= nr) break;
            float s = decode_vec_dot<G, PACK>(qd[r], kd, live);
            if (j < len) {
                s = live ? round_to<T>(s) + bj : -INFINITY;
                if (part == 0) sc[r * Tk + j] = s;
                mx[r] = fmaxf(mx[r], s);
            }
        }
    }
    // 2. softmax, a row at a time over the whole block (the vec kernel's trees)
#pragma unroll
    for (int r = 0; r < ITEMS_ROWS; r++)
        if (r < nr) decode_softmax<T>(sc + r * Tk, wred, warp_max(mx[r]), len, lane, warp);
    // 3. out = P @ v: one value load for the rows; a row whose P_j is 0 skips it (as the vec kernel)
    float acc[ITEMS_ROWS][PACK];
#pragma unroll
    for (int r = 0; r < ITEMS_ROWS; r++)
#pragma unroll
        for (int e = 0; e < PACK; e++) acc[r][e] = 0.0f;
    for (int j = warp * KPW + sub; j < len; j += STEP) {
        float p[ITEMS_ROWS];
        int any = 0;
#pragma unroll
        for (int r = 0; r < ITEMS_ROWS; r++) {
            p[r] = r < nr ? sc[r * Tk + j] : 0.0f;
            any |= p[r] != 0.0f;
        }
        if (!any) continue;
        float vd[PACK];
        load_vec<T, PACK>(vd, Vv + (size_t)j * kv.pos_stride * HD + col);
#pragma unroll
        for (int r = 0; r < ITEMS_ROWS; r++)
            if (p[r] != 0.0f)
#pragma unroll
                for (int e = 0; e < PACK; e++) acc[r][e] += p[r] * vd[e];
    }
#pragma unroll
    for (int r = 0; r < ITEMS_ROWS; r++) {
        if (r >= nr) break;
        decode_vec_store_row<T, G, PACK>(out + (size_t)(i0 + r) * HD + (size_t)h * DK, acc[r], red, part, sub, warp);
        __syncthreads();  // red is reused by the next row
    }
}

// The 16-byte-load kernels for G lanes a key: the items kernel (items: rows sharing their
// keys, blocks of up to ITEMS_ROWS rows of a slot) or the one-row kernel.
template <typename T, int G>
static void decode_vec_launch(int items, void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk,
                              int H, size_t smem) {
    if (items) {
        const int chunks = (kv->slot_div + ITEMS_ROWS - 1) / ITEMS_ROWS, slots = (N + kv->slot_div - 1) / kv->slot_div;
        if (slots * chunks > 65535) t5_fail("attention_decode: %d blocks a head; the grid takes at most 65535", slots * chunks);
        attention_decode_items_kernel<T, G><<<dim3((unsigned)H, (unsigned)(slots * chunks)), DECODE_THREADS,
                                              smem * ITEMS_ROWS, t5_stream()>>>((T *)out, (const T *)q, *kv,
                                                                                (const T *)bias, N, Tk, H);
    } else {
        attention_decode_vec_kernel<T, G><<<dim3((unsigned)H, (unsigned)N), DECODE_THREADS, smem, t5_stream()>>>(
            (T *)out, (const T *)q, *kv, (const T *)bias, Tk, H);
    }
}

template <typename T>
static void decode_launch(void *out, const void *q, const KvView *kv, const void *bias, int N, int Tk, int H, int dk) {
    if (N < 1 || Tk < 1 || H < 1 || dk < 1 || kv->slot_div < 1)
        t5_fail("attention_decode: N %d, Tk %d, H %d, dk %d, slot_div %d must all be >= 1", N, Tk, H, dk, kv->slot_div);
    if (dk > DECODE_MAX_DK) t5_fail("attention_decode: d_kv %d is above the kernel's %d", dk, DECODE_MAX_DK);
    if (kv->table && kv->table_ld < Tk)
        t5_fail("attention_decode: beam table rows of %d positions, %d keys", kv->table_ld, Tk);
    if (kv->key_mask && kv->mask_ld < Tk)
        t5_fail("attention_decode: key mask rows of %d positions, %d keys", kv->mask_ld, Tk);
    if (N > 65535) t5_fail("attention_decode: %d rows; the grid takes at most 65535", N);
    const size_t smem = (size_t)Tk * sizeof(float);
    if (smem > 48 * 1024)
        t5_fail("attention_decode: %d keys need %zu bytes of shared memory (at most 48 KiB: 12288 keys)", Tk, smem);
    // 16-byte loads where dk is 4, 8, 16 or 32 packs and every row starts on 16 bytes
    constexpr int PACK = pack_of<T>();
    const int aligned = ((uintptr_t)out | (uintptr_t)q | (uintptr_t)kv->k | (uintptr_t)kv->v) % 16 == 0;
    const dim3 grid((unsigned)H, (unsigned)N);
    const int G = aligned && dk % PACK == 0 ? dk / PACK : 0;
    // rows sharing their keys (no table, no position from memory, a slot of >= 2 rows): the
    // items kernel, one key/value load for up to ITEMS_ROWS rows
    const int items = !kv->table && !kv->pos && kv->slot_div >= 2 && smem * ITEMS_ROWS <= 48 * 1024;
    if (G == 4)
        decode_vec_launch<T, 4>(items, out, q, kv, bias, N, Tk, H, smem);
    else if (G == 8)
        decode_vec_launch<T, 8>(items, out, q, kv, bias, N, Tk, H, smem);
    else if (G == 16)
        decode_vec_launch<T, 16>(items, out, q, kv, bias, N, Tk, H, smem);
    else if (G == 32)
        decode_vec_launch<T, 32>(items, out, q, kv, bias, N, Tk, H, smem);
    else
        attention_decode_kernel<T><<<grid, DECODE_THREADS, smem, t5_stream()>>>((T *)out, (const T *)q, *kv, (const T *)bias, Tk, H, dk);
    cudaLaunchCheck();
}

// kv_append: one slot (N x HK elements) of K and of V into position *pos of the caches.
// 16-byte units when the slot and every pointer allow, else bytes; blockIdx.y: 0 K, 1 V.
template <typename U>
__global__ void kv_append_kernel(char *k_cache, char *v_cache, const char *k_new, const char *v_new, const int *pos,
                                 size_t n_units, size_t slot_bytes) {
    char *dst = (blockIdx.y ? v_cache : k_cache) + (size_t)*pos * slot_bytes;
    const U *src = (const U *)(blockIdx.y ? v_new : k_new);
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < n_units; u += (size_t)gridDim.x * blockDim.x)
        ((U *)dst)[u] = src[u];
}

extern "C" void cuda_kv_append(void *k_cache, void *v_cache, const void *k_new, const void *v_new, const int *pos,
                               size_t slot_bytes) {
    if (slot_bytes == 0) return;
    const int wide = slot_bytes % 16 == 0 && ((uintptr_t)k_cache | (uintptr_t)v_cache | (uintptr_t)k_new |
                                              (uintptr_t)v_new) % 16 == 0;
    const size_t units = wide ? slot_bytes / 16 : slot_bytes;
    const unsigned blocks = (unsigned)(units / 256 + 1 < 1024 ? units / 256 + 1 : 1024);
    if (wide)
        kv_append_kernel<uint4><<<dim3(blocks, 2), 256, 0, t5_stream()>>>(
            (char *)k_cache, (char *)v_cache, (const char *)k_new, (const char *)v_new, pos, units, slot_bytes);
    else
        kv_append_kernel<unsigned char><<<dim3(blocks, 2), 256, 0, t5_stream()>>>(
            (char *)k_cache, (char *)v_cache, (const char *)k_new, (const char *)v_new, pos, units, slot_bytes);
    cudaLaunchCheck();
}

// qkv_append: qkv (rows, q | k | v parts of part_bytes) split into q_out and the caches at
// *pos. 16-byte units when the parts and every pointer allow, else bytes; blockIdx.y: the part.
template <typename U>
__global__ void qkv_append_kernel(char *q_out, char *k_cache, char *v_cache, const char *qkv, const int *pos,
                                  size_t rows, size_t part_units) {
    const int z = blockIdx.y;
    const size_t slot = (size_t)*pos * rows * part_units * sizeof(U);  // position t's slot in a cache
    char *dst = z == 0 ? q_out : z == 1 ? k_cache + slot : v_cache + slot;
    const U *src = (const U *)qkv;
    for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < rows * part_units; u += (size_t)gridDim.x * blockDim.x) {
        const size_t r = u / part_units, c = u % part_units;
        ((U *)dst)[u] = src[(r * 3 + (size_t)z) * part_units + c];
    }
}

extern "C" void cuda_qkv_append(void *q_out, void *k_cache, void *v_cache, const void *qkv, const int *pos, size_t rows,
                                size_t part_bytes) {
    if (rows == 0 || part_bytes == 0) return;
    const int wide = part_bytes % 16 == 0 &&
                     ((uintptr_t)q_out | (uintptr_t)k_cache | (uintptr_t)v_cache | (uintptr_t)qkv) % 16 == 0;
    const size_t part_units = wide ? part_bytes / 16 : part_bytes, units = rows * part_units;
    const unsigned blocks = (unsigned)(units / 256 + 1 < 1024 ? units / 256 + 1 : 1024);
    if (wide)
        qkv_append_kernel<uint4><<<dim3(blocks, 3), 256, 0, t5_stream()>>>((char *)q_out, (char *)k_cache, (char *)v_cache,
                                                                          (const char *)qkv, pos, rows, part_units);
    else
        qkv_append_kernel<unsigned char><<<dim3(blocks, 3), 256, 0, t5_stream()>>>(
            (char *)q_out, (char *)k_cache, (char *)v_cache, (const char *)qkv, pos, rows, part_units);
    cudaLaunchCheck();
}

extern "C" void cuda_attention_decode(Dtype dt, void *out, const void *q, const KvView *kv, const void *bias, int N,
                                      int Tk, int H, int dk) {
    DISPATCH_DTYPE(dt, decode_launch, out, q, kv, bias, N, Tk, H, dk);
}
