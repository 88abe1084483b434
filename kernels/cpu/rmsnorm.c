// kernels/cpu/rmsnorm.c: T5's RMS norm (T5LayerNorm in HF): no mean subtraction, no bias.
//   rstd (N) = 1 / sqrt(mean(inp^2) + eps);  out (N,D) = weight (D) * (inp * rstd)
// HF computes hidden_states * torch.rsqrt(variance + eps), then multiplies by the weight;
// the float operations below follow that order. The mean of squares is accumulated in
// double (torch uses a cascade sum in fp32; double is at least as accurate).
#include <math.h>

#include "cpu_ops.h"

void cpu_rmsnorm_forward(void *out_, float *rstd, const void *inp_, const void *weight_, int N, int D, float eps) {
    float *out = out_;
    const float *inp = inp_, *weight = weight_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * D;
        float *y = out + (size_t)n * D;
        double ss = 0.0;
        for (int d = 0; d < D; d++) ss += (double)x[d] * (double)x[d];
        float variance = (float)(ss / D);
        float r = 1.0f / sqrtf(variance + eps);
        rstd[n] = r;
        for (int d = 0; d < D; d++) y[d] = weight[d] * (x[d] * r);
    }
}

// With xhat = x * r and r = (mean(x^2) + eps)^(-1/2):
//   dweight_d += sum_n dout_nd * xhat_nd
//   dx_d      += r * (w_d * dout_d - xhat_d * mean_e(w_e * dout_e * xhat_e))
void cpu_rmsnorm_backward(void *dinp_, void *dweight_, const void *dout_, const void *inp_, const void *weight_,
                          const float *rstd, int N, int D) {
    float *dinp = dinp_, *dweight = dweight_;
    const float *dout = dout_, *inp = inp_, *weight = weight_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * D, *g = dout + (size_t)n * D;
        float *dx = dinp + (size_t)n * D;
        float r = rstd[n];
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += (double)weight[d] * g[d] * ((double)x[d] * r);
        float mean_dot = (float)(dot / D);
        for (int d = 0; d < D; d++) dx[d] += r * (weight[d] * g[d] - (x[d] * r) * mean_dot);
    }
    // dweight: threads own column blocks and sum the rows in order, so the result does
    // not depend on the thread count.
    enum { CB = 64 };
    int nblocks = (D + CB - 1) / CB;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < nblocks; cb++) {
        int c0 = cb * CB, c1 = c0 + CB < D ? c0 + CB : D;
        double acc[CB] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * D, *g = dout + (size_t)n * D;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) acc[c - c0] += (double)g[c] * (x[c] * r);
        }
        for (int c = c0; c < c1; c++) dweight[c] += (float)acc[c - c0];
    }
}

// The two ops one after the other: the CPU reference has no passes to save.
void cpu_rmsnorm_backward_dropout(void *dinp, void *dweight, const void *dout, const void *inp, const void *weight,
                                  const float *rstd, int N, int D, void *dnext, DropoutArgs next_drop) {
    cpu_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, D);
    cpu_dropout_forward(dnext, dinp, (size_t)N * D, next_drop);
}

// The residual add of a sublayer, then the next sublayer's norm (backend.h): the two ops.
void cpu_residual_rmsnorm_forward(void *x_out, void *out, float *rstd, const void *y, const void *x_in,
                                  const void *weight, int N, int D, float eps, DropoutArgs drop) {
    cpu_dropout_add_guard(x_out, y, x_in, (size_t)N * D, drop);
    cpu_rmsnorm_forward(out, rstd, x_out, weight, N, D, eps);
}
