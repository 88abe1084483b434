// kernels/cpu/crossentropy.c: token cross-entropy with label smoothing, fused with its
// gradient. logits (N,V), labels (N) with -100 = ignored.
//   per active row: loss = (1-eps) * (lse - x[label]) + eps * (lse - mean_j x_j)
//   which is HF LabelSmoother's (1-eps) * nll + eps * (-sum_j log p_j) / V,
//   dlogits_j = dloss * (p_j - (1-eps) * [j == label] - eps / V)
// Returns the SUM of the per-row losses (the caller divides by the global token count).
// Row statistics are accumulated in double; rows are independent and summed in order.
#include <math.h>
#include <stdlib.h>

#include "../../common/check.h"
#include "cpu_ops.h"

#define IGNORE_INDEX (-100)

double cpu_crossentropy_forward_backward(void *dlogits_, const void *logits_, const int *labels, int N, int V,
                                         float label_smoothing, float dloss) {
    float *dlogits = dlogits_;  // may alias logits: each row is read fully before it is written
    const float *logits = logits_;
    for (int n = 0; n < N; n++)
        if (labels[n] != IGNORE_INDEX && (labels[n] < 0 || labels[n] >= V))
            t5_fail("label %d at position %d is outside the vocabulary [0, %d) (and is not the ignore index -100); "
                    "check the tokenizer and the model's vocab_size",
                    labels[n], n, V);
    const double eps = label_smoothing;
    double *row_loss = mallocCheck((size_t)(N > 0 ? N : 1) * sizeof(double));
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *g = dlogits ? dlogits + (size_t)n * V : NULL;
        int label = labels[n];
        if (label == IGNORE_INDEX) {
            row_loss[n] = 0.0;
            if (g)
                for (int j = 0; j < V; j++) g[j] = 0.0f;
            continue;
        }
        float mx = x[0];
        for (int j = 1; j < V; j++)
            if (x[j] > mx) mx = x[j];
        double sum_exp = 0.0, sum_x = 0.0;
        for (int j = 0; j < V; j++) {
            sum_exp += exp((double)x[j] - mx);
            sum_x += x[j];
        }
        double lse = mx + log(sum_exp);
        double nll = lse - x[label];
        double smooth = lse - sum_x / V;
        row_loss[n] = (1.0 - eps) * nll + eps * smooth;
        if (g) {  // x[j] is read before g[j] overwrites it (aliasing)
            for (int j = 0; j < V; j++) {
                double p = exp((double)x[j] - lse);
                double t = (j == label ? 1.0 - eps : 0.0) + eps / V;
                g[j] = (float)(dloss * (p - t));
            }
        }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    return total;
}
