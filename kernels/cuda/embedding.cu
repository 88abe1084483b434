// kernels/cuda/embedding.cu: token embedding lookup and its deterministic gradient.
//   forward   out (N,D) = table (V,D)[ids (N)]: one block per row, 16-byte copies.
//   backward  dtable (V,D) += scatter-add of dout (N,D) without atomics:
//             1. sort (id, row) pairs by id (cub radix sort: stable, so equal ids keep
//                row order);
//             2. one block per (run of equal ids, column tile): the block at the first
//                position of a run sums the run's rows in fp32, split over WARPS warps by
//                fixed 32-row chunks (warp w takes chunks w, w+WARPS, ...), combines the
//                warp sums in warp order and adds into dtable once. Blocks at other
//                positions return at once. The order of every sum is fixed by the ids
//                alone, so results are bitwise reproducible.
// Scratch (sorted keys, rows, cub temp) grows on demand and is kept (cuda_alloc).
#include <cub/cub.cuh>

#include "common.cuh"

#define EMB_WARPS 4

// ---- forward ----------------------------------------------------------------------------------

// V == 1: element copies; V > 1: V elements (16 bytes) per access.
template <typename T, int V>
__global__ void embedding_forward_kernel(T *out, const int *ids, const T *table, int D) {
    const size_t n = blockIdx.x;
    const T *src = table + (size_t)ids[n] * D;
    T *dst = out + n * D;
    for (int c = threadIdx.x * V; c < D; c += blockDim.x * V) {
        if constexpr (V == 1)
            dst[c] = src[c];
        else
            *reinterpret_cast<uint4 *>(dst + c) = *reinterpret_cast<const uint4 *>(src + c);
    }
}

template <typename T> static void embedding_forward(void *out, const int *ids, const void *table, int N, int D) {
    if (N <= 0 || D <= 0) return;
    constexpr int P = pack_of<T>();
    const bool vec = D % P == 0 && aligned16(out) && aligned16(table);
    const int threads = row_block_threads(vec ? D / P : D, 256);
    if (vec)
        embedding_forward_kernel<T, P><<<N, threads, 0, t5_stream()>>>((T *)out, ids, (const T *)table, D);
    else
        embedding_forward_kernel<T, 1><<<N, threads, 0, t5_stream()>>>((T *)out, ids, (const T *)table, D);
    cudaLaunchCheck();
}

// ---- backward ---------------------------------------------------------------------------------

__global__ void iota_kernel(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// grid (N, column tiles), block (32, EMB_WARPS). Lane l of every warp owns columns
// c .. c+V-1 with c = (tile*32 + l) * V. keys/rows: ids and row numbers sorted by id.
template <typename T, int V>
__global__ void __launch_bounds__(32 * EMB_WARPS)
    embedding_backward_kernel(T *dtable, const T *dout, const int *keys, const int *rows, int N, int D) {
    const int s = blockIdx.x;
    const int id = keys[s];
    if (s > 0 && keys[s - 1] == id) return;  // not the first position of its run
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int c = (blockIdx.y * 32 + lane) * V;
    const bool active = c < D;  // inactive lanes still take part in ballots and shuffles
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    // Runs are contiguous in the sorted keys: a chunk's matching positions are a prefix.
    for (int k0 = s + warp * 32; k0 < N; k0 += EMB_WARPS * 32) {
        const int k = k0 + lane;
        const bool in = k < N && keys[k] == id;
        const int row = in ? rows[k] : 0;
        const int cnt = __popc(__ballot_sync(0xffffffffu, in));
#pragma unroll 8
        for (int j = 0; j < cnt; j++) {
            const int r = __shfl_sync(0xffffffffu, row, j);
            if (active) {
                float g[V];
                load_vec<T, V>(g, dout + (size_t)r * D + c);
#pragma unroll
                for (int q = 0; q < V; q++) acc[q] += g[q];
            }
        }
        if (cnt < 32) break;  // the run ended inside this chunk: later chunks are past it
    }
    __shared__ float part[EMB_WARPS][V][32];
#pragma unroll
    for (int q = 0; q < V; q++) part[warp][q][lane] = acc[q];
    __syncthreads();
    if (warp != 0 || !active) return;
    float sum[V], cur[V];
    T *dst = dtable + (size_t)id * D + c;
    load_vec<T, V>(cur, dst);
#pragma unroll
    for (int q = 0; q < V; q++) {
        float t = part[0][q][lane];
#pragma unroll
        for (int w = 1; w < EMB_WARPS; w++) t += part[w][q][lane];
        sum[q] = cur[q] + t;
    }
    store_vec<T, V>(dst, sum);
}

// Sort scratch: keys_out, rows_in, rows_out (N ints each, 256-byte aligned), cub temp.

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

template <typename T>
static void embedding_backward(void *dtable, const void *dout, const int *ids, int N, int D) {
    if (N <= 0 || D <= 0) return;
    cudaStream_t st = t5_stream();
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const int *)nullptr, (int *)nullptr,
                                              (const int *)nullptr, (int *)nullptr, N, 0, 32, st));
    const size_t ints = align256((size_t)N * sizeof(int));
    const size_t need = 3 * ints + align256(temp_bytes);
    char *base = (char *)cuda_scratch_reserve(CUDA_SCRATCH_EMBEDDING, need);
    int *keys_out = (int *)base, *rows_in = (int *)(base + ints), *rows_out = (int *)(base + 2 * ints);
    void *temp = base + 3 * ints;
    iota_kernel<<<CEIL_DIV(N, 256), 256, 0, st>>>(rows_in, N);
    cudaLaunchCheck();
    cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, keys_out, rows_in, rows_out, N, 0, 32, st));

    // 8 bytes per lane: a warp reads 256 contiguous bytes of a row; more column tiles
    // (more warps in parallel) for a long run of one id, such as the padding token.
    constexpr int VB = 8 / (int)sizeof(T);
    const bool vec = D % VB == 0 && ((uintptr_t)dtable & 7) == 0 && ((uintptr_t)dout & 7) == 0;
    const dim3 block(32, EMB_WARPS);
    if (vec) {
        const dim3 grid(N, CEIL_DIV(D, 32 * VB));
        embedding_backward_kernel<T, VB>
            <<<grid, block, 0, st>>>((T *)dtable, (const T *)dout, keys_out, rows_out, N, D);
    } else {
        const dim3 grid(N, CEIL_DIV(D, 32));
        embedding_backward_kernel<T, 1>
            <<<grid, block, 0, st>>>((T *)dtable, (const T *)dout, keys_out, rows_out, N, D);
    }
    cudaLaunchCheck();
}

extern "C" void cuda_embedding_forward(Dtype dt, void *out, const int *ids, const void *table, int N, int D) {
    DISPATCH_DTYPE(dt, embedding_forward, out, ids, table, N, D);
}

extern "C" void cuda_embedding_backward(Dtype dt, void *dtable, const void *dout, const int *ids, int N, int D) {
    DISPATCH_DTYPE(dt, embedding_backward, dtable, dout, ids, N, D);
}
