// kernels/cpu/embedding.c: token embedding lookup and its gradient.
//   out (N,D) = table (V,D)[ids (N)];  dtable (V,D) += scatter-add of dout (N,D).
// ids are not range-checked here (the op does not know V); the data loader and the
// model validate token ids against the vocabulary before they reach the kernels.
#include <string.h>

#include "cpu_ops.h"

void cpu_embedding_forward(void *out_, const int *ids, const void *table_, int N, int D) {
    float *out = out_;
    const float *table = table_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, table + (size_t)ids[n] * D, (size_t)D * sizeof(float));
}

// Repeated ids accumulate into the same table row. Rows are visited in order n = 0..N-1
// on one thread, so the summation order is fixed; threads split the columns instead.
void cpu_embedding_backward(void *dtable_, const void *dout_, const int *ids, int N, int D) {
    float *dtable = dtable_;
    const float *dout = dout_;
    enum { CB = 256 };  // columns per task
    int nblocks = (D + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < nblocks; cb++) {
        int c0 = cb * CB, c1 = c0 + CB < D ? c0 + CB : D;
        for (int n = 0; n < N; n++) {
            float *drow = dtable + (size_t)ids[n] * D;
            const float *g = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) drow[c] += g[c];
        }
    }
}
