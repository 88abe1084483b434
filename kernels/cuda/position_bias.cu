// kernels/cuda/position_bias.cu: T5 relative position bias.
//   bias (H,Tq,Tk): bias[h,i,j] = table[bucket(j - (q_offset+i)) * H + h], table (num_buckets,H)
// Buckets are computed on the host by the shared t5_relative_position_bucket
// (kernels/cpu/position_bias.c: torch's exact float32 steps; logf is not ported to the
// device) and uploaded as a table over a range of relative positions. One table per
// bucketing kind (bidirectional / causal) is kept on the device and only re-uploaded when
// a call needs relative positions outside its range (the range then grows to the union),
// so steady-state training uploads nothing.
//   backward  dtable[b,h] += sum of dbias[h,i,j] over the (i,j) whose bucket is b, in two
//             deterministic fp32 steps: one thread per (relative position, h) sums its
//             diagonal over i in order; one thread per (bucket, h) sums the diagonals of
//             that bucket in order of relative position and adds into dtable.
#include <vector>

#include "common.cuh"

typedef struct {
    int *d;                          // device buckets of relative positions lo .. hi
    int capacity;                    // ints allocated
    int lo, hi, num_buckets, max_distance;
    int valid;
} BucketTable;

struct BucketTableCache {  // the context's (context.cuh)
    BucketTable tables[2];    // [bidirectional]
};

// Device buckets covering relative positions [lo, hi]; *table_lo = the table's first one.
static const int *bucket_table(int lo, int hi, int num_buckets, int max_distance, int bidirectional, int *table_lo) {
    CudaContext *cx = cuda_ctx();
    if (!cx->bucket_tables) cx->bucket_tables = (BucketTableCache *)callocCheck(1, sizeof(BucketTableCache));
    BucketTable *t = &cx->bucket_tables->tables[bidirectional ? 1 : 0];
    const int same = t->valid && t->num_buckets == num_buckets && t->max_distance == max_distance;
    if (same && lo >= t->lo && hi <= t->hi) {
        *table_lo = t->lo;
        return t->d;
    }
    if (same) {  // grow to the union, so alternating shapes settle on one table
        lo = lo < t->lo ? lo : t->lo;
        hi = hi > t->hi ? hi : t->hi;
    }
    const int count = hi - lo + 1;
    std::vector<int> h((size_t)count);
    for (int rp = lo; rp <= hi; rp++) {
        int b = t5_relative_position_bucket(rp, bidirectional, num_buckets, max_distance);
        if (b < 0 || b >= num_buckets)
            t5_fail("relative position bias: bucket %d out of [0, %d) for relative position %d "
                    "(relative_attention_max_distance %d is smaller than the exact range)",
                    b, num_buckets, rp, max_distance);
        h[(size_t)(rp - lo)] = b;
    }
    if (count > t->capacity) {
        cuda_free(t->d);
        t->d = (int *)cuda_alloc((size_t)count * sizeof(int));
        t->capacity = count;
    }
    cuda_to_device(t->d, h.data(), (size_t)count * sizeof(int));  // stream-ordered after earlier readers
    t->lo = lo;
    t->hi = hi;
    t->num_buckets = num_buckets;
    t->max_distance = max_distance;
    t->valid = 1;
    *table_lo = lo;
    return t->d;
}

// grid (ceil(Tk/256), Tq, H): thread j of row (h, i).
template <typename T>
__global__ void position_bias_forward_kernel(T *bias, const T *table, const int *buckets, int Tq, int Tk, int H,
                                             int q_offset, int table_lo) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= Tk) return;
    const int i = blockIdx.y, h = blockIdx.z;
    const int b = buckets[j - (q_offset + i) - table_lo];
    bias[((size_t)h * Tq + i) * Tk + j] = table[(size_t)b * H + h];
}

// grid (ceil(R/128), H), R = Tq+Tk-1: thread r sums relative position rp = rp_lo + r over
// i = 0..Tq-1 (j = rp + q_offset + i when inside [0, Tk)). At each i, neighbouring threads
// read neighbouring columns of row i.
template <typename T>
__global__ void position_bias_diag_kernel(float *diag, const T *dbias, int Tq, int Tk, int q_offset, int rp_lo,
                                          int R) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    const int h = blockIdx.y;
    const int j0 = rp_lo + r + q_offset;  // j at i = 0
    const T *base = dbias + (size_t)h * Tq * Tk;
    float s = 0.0f;
    for (int i = 0; i < Tq; i++) {
        const int j = j0 + i;
        if (j >= 0 && j < Tk) s += to_float(base[(size_t)i * Tk + j]);
    }
    diag[(size_t)h * R + r] = s;
}

// One thread per (bucket b, head h), t = b*H + h (coalesced dtable writes).
template <typename T>
__global__ void position_bias_bucket_kernel(T *dtable, const float *diag, const int *buckets, int num_buckets, int H,
                                            int rp_lo, int table_lo, int R) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= num_buckets * H) return;
    const int b = t / H, h = t % H;
    const int *bk = buckets + (rp_lo - table_lo);
    const float *dg = diag + (size_t)h * R;
    float s = 0.0f;
    for (int r = 0; r < R; r++)
        if (bk[r] == b) s += dg[r];
    dtable[t] = from_float<T>(to_float(dtable[t]) + s);
}

static void position_bias_check(const char *op, int Tq, int Tk, int H, int q_offset, int num_buckets) {
    if (Tq > 65535 || H > 65535 || q_offset < 0 || num_buckets <= 0)
        t5_fail("%s: unsupported shape Tq=%d Tk=%d H=%d q_offset=%d num_buckets=%d (Tq and H at most 65535)", op, Tq,
                Tk, H, q_offset, num_buckets);
}

template <typename T>
static void position_bias_forward(void *bias, const void *table, int Tq, int Tk, int H, int q_offset, int num_buckets,
                                  int max_distance, int bidirectional) {
    if (Tq <= 0 || Tk <= 0 || H <= 0) return;
    position_bias_check("position_bias_forward", Tq, Tk, H, q_offset, num_buckets);
    int table_lo;
    const int *bk = bucket_table(-(q_offset + Tq - 1), Tk - 1 - q_offset, num_buckets, max_distance, bidirectional,
                                 &table_lo);
    const dim3 grid(CEIL_DIV(Tk, 256), Tq, H);
    position_bias_forward_kernel<T>
        <<<grid, 256, 0, t5_stream()>>>((T *)bias, (const T *)table, bk, Tq, Tk, H, q_offset, table_lo);
    cudaLaunchCheck();
}

template <typename T>
static void position_bias_backward(void *dtable, const void *dbias, int Tq, int Tk, int H, int q_offset,
                                   int num_buckets, int max_distance, int bidirectional) {
    if (Tq <= 0 || Tk <= 0 || H <= 0) return;
    position_bias_check("position_bias_backward", Tq, Tk, H, q_offset, num_buckets);
    const int rp_lo = -(q_offset + Tq - 1), rp_hi = Tk - 1 - q_offset, R = rp_hi - rp_lo + 1;
    int table_lo;
    const int *bk = bucket_table(rp_lo, rp_hi, num_buckets, max_distance, bidirectional, &table_lo);
    const size_t need = (size_t)H * R * sizeof(float);
    float *diag_scratch = (float *)cuda_scratch_reserve(CUDA_SCRATCH_POSITION_DIAG, need);
    position_bias_diag_kernel<T><<<dim3(CEIL_DIV(R, 128), H), 128, 0, t5_stream()>>>(diag_scratch, (const T *)dbias,
                                                                                     Tq, Tk, q_offset, rp_lo, R);
    cudaLaunchCheck();
    position_bias_bucket_kernel<T><<<CEIL_DIV(num_buckets * H, 128), 128, 0, t5_stream()>>>(
        (T *)dtable, diag_scratch, bk, num_buckets, H, rp_lo, table_lo, R);
    cudaLaunchCheck();
}

extern "C" void cuda_position_bias_forward(Dtype dt, void *bias, const void *table, int Tq, int Tk, int H,
                                           int q_offset, int num_buckets, int max_distance, int bidirectional) {
    DISPATCH_DTYPE(dt, position_bias_forward, bias, table, Tq, Tk, H, q_offset, num_buckets, max_distance,
                   bidirectional);
}

extern "C" void cuda_position_bias_backward(Dtype dt, void *dtable, const void *dbias, int Tq, int Tk, int H,
                                            int q_offset, int num_buckets, int max_distance, int bidirectional) {
    DISPATCH_DTYPE(dt, position_bias_backward, dtable, dbias, Tq, Tk, H, q_offset, num_buckets, max_distance,
                   bidirectional);
}
