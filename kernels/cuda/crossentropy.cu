// kernels/cuda/crossentropy.cu: token cross-entropy with label smoothing, fused with its
// gradient (kernels/cpu/crossentropy.c is the reference). logits (N,V), labels (N), -100
// ignored. Per active row, in fp32:
//   lse = max + log(sum exp(x - max))     (online max / sum-exp in one pass)
//   loss = (1-eps) * (lse - x[label]) + eps * (lse - sum(x)/V)     (HF LabelSmoother)
//   dlogits_j = dloss * (exp(lsm_j) - (1-eps) * [j == label] - eps/V),  lsm_j = (x_j - max) - log(sum)
//   (the log-softmax rounded to fp32 first, as torch does on both devices: exp(x_j - lse)
//   would carry lse's rounding, up to 2e-6 relative for |lse| ~ 50, into a whole row)
// One block per row. dlogits may alias logits: a block reads its whole row (and x[label])
// before the barrier of the reduction, and afterwards each element is read and then
// written by the same thread. Ignored rows get loss 0 and dlogits 0.
// Per-row losses go to a device buffer (double); one block sums them in a fixed order,
// and ONE copy brings the sum and the first bad label (if any) back to the host.
#include "common.cuh"

#define CE_MAX_THREADS 512
#define IGNORE_INDEX (-100)

typedef struct {
    double total;
    unsigned long long bad;  // (row << 32 | label) of the first row with a label outside [0,V); ~0 if none
} CEResult;

// Merge two (max, sum of exp(x - max)) pairs. Written with _rn operations so that the
// merge is symmetric (no contracted multiply-add): both lanes of a shuffle get one value.
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
    const float nm = fmaxf(m, m2);
    if (nm == -INFINITY) return;  // both empty
    s = __fadd_rn(__fmul_rn(s, expf(m - nm)), __fmul_rn(s2, expf(m2 - nm)));
    m = nm;
}

template <typename T, int V>
__global__ void __launch_bounds__(CE_MAX_THREADS)
    crossentropy_kernel(T *dlogits, const T *logits, const int *labels, double *row_loss, unsigned long long *bad,
                        int Vocab, float eps, float dloss) {
    const int n = blockIdx.x;
    const T *x = logits + (size_t)n * Vocab;
    T *g = dlogits ? dlogits + (size_t)n * Vocab : nullptr;
    const int label = labels[n];
    if (label == IGNORE_INDEX || label < 0 || label >= Vocab) {
        if (threadIdx.x == 0) {
            row_loss[n] = 0.0;
            if (label != IGNORE_INDEX) atomicMin(bad, ((unsigned long long)n << 32) | (unsigned)label);
        }
        if (g) {
            float z[V];
#pragma unroll
            for (int k = 0; k < V; k++) z[k] = 0.0f;
            for (int c = threadIdx.x * V; c < Vocab; c += blockDim.x * V) store_vec<T, V>(g + c, z);
        }
        return;
    }
    const float xl = to_float(x[label]);  // read before any thread writes g (aliasing)
    float m = -INFINITY, s = 0.0f, sx = 0.0f;
    for (int c = threadIdx.x * V; c < Vocab; c += blockDim.x * V) {
        float f[V];
        load_vec<T, V>(f, x + c);
        float lm = f[0];
#pragma unroll
        for (int k = 0; k < V; k++) {
            lm = fmaxf(lm, f[k]);
            sx += f[k];
        }
        if (lm > m) {
            s *= expf(m - lm);
            m = lm;
        }
#pragma unroll
        for (int k = 0; k < V; k++) s += expf(f[k] - m);
    }
    // block reduction of (m, s) and sx: xor shuffles, then the warps' results through
    // shared memory, reduced again by every warp (all threads end with the same values)
    __shared__ float sh_m[32], sh_s[32], sh_x[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
        sx += __shfl_xor_sync(0xffffffffu, sx, o);
    }
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
        sh_x[warp] = sx;
    }
    __syncthreads();
    m = lane < nwarps ? sh_m[lane] : -INFINITY;
    s = lane < nwarps ? sh_s[lane] : 0.0f;
    sx = lane < nwarps ? sh_x[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
        sx += __shfl_xor_sync(0xffffffffu, sx, o);
    }
    const float log_s = logf(s), lse = m + log_s;
    if (threadIdx.x == 0) {
        const double nll = (double)lse - (double)xl;
        const double smooth = (double)lse - (double)sx / Vocab;
        row_loss[n] = (1.0 - (double)eps) * nll + (double)eps * smooth;
    }
    if (!g) return;
    const float t_other = eps / (float)Vocab, t_label = (1.0f - eps) + t_other;
    for (int c = threadIdx.x * V; c < Vocab; c += blockDim.x * V) {
        float f[V];
        load_vec<T, V>(f, x + c);
#pragma unroll
        for (int k = 0; k < V; k++)  // p from the fp32 log-softmax (x - max) - log(s), as torch rounds it
            f[k] = dloss * (expf(__fsub_rn(__fsub_rn(f[k], m), log_s)) - (c + k == label ? t_label : t_other));
        store_vec<T, V>(g + c, f);
    }
}

// One block: res->total = sum of row_loss in a fixed order.
__global__ void crossentropy_sum_kernel(CEResult *res, const double *row_loss, int N) {
    double s = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += row_loss[i];
    s = block_sum(s);
    if (threadIdx.x == 0) res->total = s;
}


template <typename T>
static double crossentropy(void *dlogits, const void *logits, const int *labels, int N, int V, float eps,
                           float dloss) {
    if (N <= 0) return 0.0;
    if (V <= 0) t5_fail("crossentropy: vocabulary size %d", V);
    const size_t need = 256 + (size_t)N * sizeof(double);
    void *ce_scratch = cuda_scratch_reserve(CUDA_SCRATCH_CROSSENTROPY, need);  // CEResult, then row_loss (N doubles)
    CEResult *res = (CEResult *)ce_scratch;
    double *row_loss = (double *)((char *)ce_scratch + 256);
    cudaStream_t st = t5_stream();
    cudaCheck(cudaMemsetAsync(&res->bad, 0xff, sizeof res->bad, st));
    constexpr int P = pack_of<T>();
    const bool vec = V % P == 0 && aligned16(logits) && aligned16(dlogits);
    const int threads = row_block_threads(vec ? V / P : V, CE_MAX_THREADS);
    if (vec)
        crossentropy_kernel<T, P><<<N, threads, 0, st>>>((T *)dlogits, (const T *)logits, labels, row_loss, &res->bad,
                                                         V, eps, dloss);
    else
        crossentropy_kernel<T, 1><<<N, threads, 0, st>>>((T *)dlogits, (const T *)logits, labels, row_loss, &res->bad,
                                                         V, eps, dloss);
    cudaLaunchCheck();
    crossentropy_sum_kernel<<<1, 1024, 0, st>>>(res, row_loss, N);
    cudaLaunchCheck();
    CEResult h;
    cuda_to_host(&h, res, sizeof h);
    if (h.bad != ~0ull)
        t5_fail("label %d at position %d is outside the vocabulary [0, %d) (and is not the ignore index -100); "
                "check the tokenizer and the model's vocab_size",
                (int)(unsigned)(h.bad & 0xffffffffu), (int)(h.bad >> 32), V);
    return h.total;
}

extern "C" double cuda_crossentropy_forward_backward(Dtype dt, void *dlogits, const void *logits, const int *labels,
                                                     int N, int V, float label_smoothing, float dloss) {
    switch (dt) {
    case DTYPE_F32: return crossentropy<float>(dlogits, logits, labels, N, V, label_smoothing, dloss);
    case DTYPE_BF16: return crossentropy<__nv_bfloat16>(dlogits, logits, labels, N, V, label_smoothing, dloss);
    case DTYPE_F16: return crossentropy<__half>(dlogits, logits, labels, N, V, label_smoothing, dloss);
    default: dtype_unknown(dt, __func__);
    }
    return 0.0;
}
