// kernels/cpu/position_bias.c: T5 relative position bias.
//   bucket(rp) for rp = key_pos - query_pos, as HF T5Attention._relative_position_bucket
//   bias (H,Tq,Tk):  bias[h,i,j] = table[bucket(j - (q_offset + i)) * H + h]
//   table (num_buckets,H) is HF's relative_attention_bias.weight (nn.Embedding rows).
#include <math.h>
#include <stdlib.h>

#include "../../common/check.h"
#include "cpu_ops.h"

// The float32 steps follow torch exactly: log of a float tensor divided by max_exact
// (float), divided by the python float math.log(max_distance / max_exact) cast to
// float32, times the int (num_buckets - max_exact) as float32, truncated toward zero
// by .to(torch.long). (torch's vectorized logf and glibc's logf can differ in the last
// ulp, which matters only if the product lands within an ulp of an integer.)
int t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets, int max_distance) {
    int bucket = 0, rp = relative_position;
    if (bidirectional) {
        num_buckets /= 2;
        if (rp > 0) bucket += num_buckets;
        rp = abs(rp);
    } else {
        rp = rp < 0 ? -rp : 0;
    }
    int max_exact = num_buckets / 2;
    if (max_exact < 1)
        t5_fail("relative_attention_num_buckets too small: %d buckets (%s) leave no exact bucket; T5 needs at least %d",
                bidirectional ? 2 * num_buckets : num_buckets, bidirectional ? "bidirectional" : "causal",
                bidirectional ? 4 : 2);
    if (rp < max_exact) return bucket + rp;
    float ratio = (float)rp / (float)max_exact;
    float log_range = (float)log((double)max_distance / (double)max_exact);
    float scaled = logf(ratio) / log_range * (float)(num_buckets - max_exact);
    int large = max_exact + (int)scaled;  // scaled >= 0: (int) truncates like .to(long)
    if (large > num_buckets - 1) large = num_buckets - 1;
    return bucket + large;
}

// Buckets for every relative position the (Tq,Tk) grid touches:
// rp = j - (q_offset + i) ranges over [-(q_offset+Tq-1), Tk-1-q_offset]; index rp - rp_min.
static int *position_bias_buckets(int Tq, int Tk, int q_offset, int num_buckets, int max_distance,
                                  int bidirectional, int *rp_min) {
    int lo = -(q_offset + Tq - 1), hi = Tk - 1 - q_offset;
    int *b = mallocCheck((size_t)(hi - lo + 1) * sizeof(int));
    for (int rp = lo; rp <= hi; rp++) {
        b[rp - lo] = t5_relative_position_bucket(rp, bidirectional, num_buckets, max_distance);
        if (b[rp - lo] < 0 || b[rp - lo] >= num_buckets)
            t5_fail("relative position bias: bucket %d out of [0, %d) for relative position %d "
                    "(relative_attention_max_distance %d is smaller than the exact range)",
                    b[rp - lo], num_buckets, rp, max_distance);
    }
    *rp_min = lo;
    return b;
}

void cpu_position_bias_forward(void *bias_, const void *table_, int Tq, int Tk, int H, int q_offset,
                               int num_buckets, int max_distance, int bidirectional) {
    float *bias = bias_;
    const float *table = table_;
    int rp_min;
    int *buckets = position_bias_buckets(Tq, Tk, q_offset, num_buckets, max_distance, bidirectional, &rp_min);
#pragma omp parallel for collapse(2) schedule(static)
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Tq; i++) {
            float *row = bias + ((size_t)h * Tq + i) * Tk;
            for (int j = 0; j < Tk; j++) row[j] = table[(size_t)buckets[j - (q_offset + i) - rp_min] * H + h];
        }
    free(buckets);
}

// dtable[bucket, h] += sum of dbias[h, i, j] over the (i, j) in that bucket. Each thread
// owns one head (one column of dtable) and visits (i, j) in order; the sums are formed in
// double and added once.
void cpu_position_bias_backward(void *dtable_, const void *dbias_, int Tq, int Tk, int H, int q_offset,
                                int num_buckets, int max_distance, int bidirectional) {
    float *dtable = dtable_;
    const float *dbias = dbias_;
    int rp_min;
    int *buckets = position_bias_buckets(Tq, Tk, q_offset, num_buckets, max_distance, bidirectional, &rp_min);
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double *acc = callocCheck((size_t)num_buckets, sizeof(double));
        for (int i = 0; i < Tq; i++) {
            const float *row = dbias + ((size_t)h * Tq + i) * Tk;
            for (int j = 0; j < Tk; j++) acc[buckets[j - (q_offset + i) - rp_min]] += row[j];
        }
        for (int b = 0; b < num_buckets; b++) dtable[(size_t)b * H + h] += (float)acc[b];
        free(acc);
    }
    free(buckets);
}
