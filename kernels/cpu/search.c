// kernels/cpu/search.c: the CPU twins of the generation-search ops (backend.h):
//   beam_topk   per row fp32 log_softmax (the sum of exp in double, as model/generate.c's
//               log_softmax_row) plus the row's beam score, then per batch item the K best
//               of its beams*V candidates by (score descending, flat index ascending),
//               kept in a sorted list of K while scanning in index order
//   beam_table_reorder  positions 0..t-1 of each beam-table row gathered from its source row
// Rows of the CPU backend are fp32. Ties follow the GPU rule (lower flat index first),
// not torch's CPU topk order: the host search (generate.c) keeps that one.
#include <math.h>
#include <string.h>

#include "../../common/check.h"
#include "cpu_ops.h"

// (max, log(sum exp(x - max))) of one fp32 row, as generate.c's log_softmax_row.
static void row_log_softmax_stats(const float *x, int V, float *mx, float *log_sum) {
    float m = x[0];
    for (int v = 1; v < V; v++)
        if (x[v] > m) m = x[v];
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)(x[v] - m));
    *mx = m;
    *log_sum = (float)log(sum);
}

// Insert (s, i) into the sorted list (val, idx) of n <= K entries when it ranks among the
// K best; candidates arrive in increasing index order, so an equal score goes after.
static void topk_list_insert(float *val, int *idx, int *n, int K, float s, int i) {
    if (*n == K && !(s > val[K - 1])) return;
    int p = *n < K ? (*n)++ : K - 1;
    while (p > 0 && s > val[p - 1]) {
        val[p] = val[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    val[p] = s;
    idx[p] = i;
}

void cpu_search_beam_topk(float *out_scores, int *out_idx, const void *logits, const float *beam_scores, int B,
                          int beams, int V, int K) {
    if (B < 1 || beams < 1 || V < 1 || K < 1 || K > V || K > BEAM_TOPK_MAX_K)
        t5_fail("beam_topk: B %d, beams %d, V %d, K %d: need each >= 1 and K <= min(V, %d)", B, beams, V, K,
                BEAM_TOPK_MAX_K);
    const float *x = logits;
#pragma omp parallel for schedule(static) if (B > 1)
    for (int b = 0; b < B; b++) {
        float *val = out_scores + (size_t)b * K;
        int *idx = out_idx + (size_t)b * K, n = 0;
        for (int j = 0; j < beams; j++) {
            const size_t r = (size_t)b * beams + j;
            const float *row = x + r * V;
            float mx = 0.0f, ls = 0.0f;
            if (beam_scores) row_log_softmax_stats(row, V, &mx, &ls);
            for (int v = 0; v < V; v++) {
                const float s = beam_scores ? ((row[v] - mx) - ls) + beam_scores[r] : row[v];
                topk_list_insert(val, idx, &n, K, s, j * V + v);
            }
        }
    }
}

void cpu_search_beam_table_reorder(int *dst, const int *src, const int *src_rows, int N, int cap, int t) {
    if (t < 0 || t > cap) t5_fail("beam_table_reorder: %d positions to copy, but the table holds %d", t, cap);
    for (int i = 0; i < N; i++)
        if (src_rows[i] < 0 || src_rows[i] >= N)
            t5_fail("beam_table_reorder: source row %d of row %d is outside [0, %d)", src_rows[i], i, N);
    for (int i = 0; i < N; i++)
        if (t) memcpy(dst + (size_t)i * cap, src + (size_t)src_rows[i] * cap, (size_t)t * sizeof(int));
}
