// kernels/cpu/crossentropy.c: token cross-entropy with label smoothing, fused with its
// gradient. logits (N,V), labels (N) with -100 = ignored.
//   per active row: loss = (1-eps) * (lse - x[label]) + eps * (lse - mean_j x_j)
//   which is HF LabelSmoother's (1-eps) * nll + eps * (-sum_j log p_j) / V,
//   dlogits_j = dloss * (p_j - (1-eps) * [j == label] - eps / V)
// Returns the SUM of the per-row losses (the caller divides by the global token count).
// The loss is accumulated in double; rows are independent and summed in order.
//
// The gradient is computed as torch computes it on the CPU in fp32 (log_softmax, then
// its backward), rounding for rounding where it matters:
//   lsm_j = (x_j - max) - log(s),  s = sum_j exp(x_j - max)          (log_softmax)
//   g_j   = d loss / d lsm_j: -dloss*eps/V, and -dloss*((1-eps) + eps/V) at the label
//   S     = sum_j g_j
//   dlogits_j = g_j - exp(lsm_j) * S                                 (its backward)
// Two roundings of torch's decide the result at 1e-5 (tests/test_exact.c):
//   * p_j = exp(lsm_j) of the fp32 lsm, whose rounding (an ulp of |lsm|, 4e-6 at |lsm|
//     ~ 50 with an unscaled head) moves p_j by up to ~4e-6 relative;
//   * s and S are vec::reduce_all / map_reduce_all sums (ATen/cpu/vec/functional_base.h):
//     TORCH_LANES running fp32 sums over j = lane, lane + TORCH_LANES, ..., then a
//     butterfly over the lanes. With label smoothing, S adds V/8 copies of the tiny
//     -dloss*eps/V to the label's -dloss*(1-eps) in one lane: every add is rounded
//     against the large value, the same way each time, so S is off by ~3e-5 relative,
//     and so is every p_j * S. That is torch's gradient, and the grad_norm HF logs,
//     1e-5 away from the exact one.
// TORCH_LANES = 8: torch's AVX2 kernels (what torch 2.11 picked on the machine that made
// tests/fixtures/exact: cpu_capability in its steps.json; on an AVX-512 CPU it would use
// 16 lanes, and its gradient would differ from its own AVX2 one by about as much). exp/log are glibc's expf/logf (torch:
// SLEEF's, within 1 ulp). The backward's `g - exp(lsm) * S` is one fused multiply-add
// in torch's build (gcc contracts the AVX2 intrinsics), so fmaf here.
#include <math.h>
#include <stdlib.h>

#include "../../common/check.h"
#include "cpu_ops.h"

#define IGNORE_INDEX (-100)
#define TORCH_LANES 8

// The terms a torch lane sum adds: exp(x_j - mx) (log_softmax's map_reduce_all), or the
// upstream gradient g_j (its backward's reduce_all).
typedef struct {
    const float *x;
    float mx;       // LANE_EXP
    int label;      // LANE_GRAD: g_label there, g_other elsewhere
    float g_label, g_other;
} LaneTerms;
enum { LANE_EXP, LANE_GRAD };

static inline float lane_term(const LaneTerms *t, int kind, int j) {
    return kind == LANE_EXP ? expf(t->x[j] - t->mx) : j == t->label ? t->g_label : t->g_other;
}

// torch's vec::reduce_all / map_reduce_all sum of n terms with AVX2 vectors.
static float torch_lane_sum(const LaneTerms *t, int kind, int n) {
    if (n < TORCH_LANES) {  // one partial vector: its lanes summed in order
        float s = lane_term(t, kind, 0);
        for (int j = 1; j < n; j++) s += lane_term(t, kind, j);
        return s;
    }
    float lane[TORCH_LANES];
    for (int l = 0; l < TORCH_LANES; l++) lane[l] = lane_term(t, kind, l);
    int full = n - n % TORCH_LANES, j = TORCH_LANES;
    for (; j < full; j += TORCH_LANES)
        for (int l = 0; l < TORCH_LANES; l++) lane[l] += lane_term(t, kind, j + l);
    for (int l = 0; j + l < n; l++) lane[l] += lane_term(t, kind, j + l);  // the tail: into the first lanes
    // butterfly: lanes i and i^4, then i^2, then i^1 (vec_reduce_all for AVX2)
    float a0 = lane[0] + lane[4], a1 = lane[1] + lane[5], a2 = lane[2] + lane[6], a3 = lane[3] + lane[7];
    return (a0 + a2) + (a1 + a3);
}

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
    // d loss / d lsm, as torch forms it in fp32: (1-eps)/N at the label (nll) and
    // eps/(N*V) everywhere (the smoothing sum), negated (here dloss = 1/N)
    const float c_nll = (float)((1.0 - eps) * (double)dloss), c_smooth = (float)(eps * (double)dloss / V);
    const float g_other = -c_smooth, g_label = -(c_nll + c_smooth);
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
        if (g) {
            LaneTerms t = {.x = x, .mx = mx, .label = label, .g_label = g_label, .g_other = g_other};
            const float log_s = logf(torch_lane_sum(&t, LANE_EXP, V));
            const float S = torch_lane_sum(&t, LANE_GRAD, V);
            for (int j = 0; j < V; j++) {  // x[j] is read before g[j] overwrites it (aliasing)
                float lsm = (x[j] - mx) - log_s;
                g[j] = fmaf(-expf(lsm), S, j == label ? g_label : g_other);
            }
        }
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    return total;
}
