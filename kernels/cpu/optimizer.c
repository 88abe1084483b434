// kernels/cpu/optimizer.c: optimizer building blocks on fp32 state.
//   sumsq         sum of g^2 (n) in double, for the global gradient norm
//   tensor_norm   one tensor's L2 norm as torch.linalg.vector_norm computes it on the CPU
//   adamw_update  torch.optim.AdamW (foreach=False, i.e. _single_tensor_adam with
//                 decoupled weight decay) on one contiguous range.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "adamw_math.h"
#include "cpu_ops.h"

// Fixed chunks, each summed in order by one thread, then the chunk sums in order: the
// result does not depend on the thread count.
#define SUMSQ_CHUNK ((size_t)1 << 16)

double cpu_optimizer_sumsq(const void *g_, size_t n) {
    const float *g = g_;
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    if (nchunks == 0) return 0.0;
    double *part = mallocCheck(nchunks * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < n ? i0 + SUMSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * (double)g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (size_t c = 0; c < nchunks; c++) total += part[c];
    free(part);
    return total;
}

// torch 2.11's CPU vector_norm (p=2, contiguous fp32: norm_kernel_tensor_iterator_impl in
// ATen/native/cpu/ReduceOpsKernel.cpp) with AVX2 vectors: 8 fp32 lane sums of x*x over
// j = lane, lane + 8, ... (multiply, then add), folded left into lane 0, the n % 8 tail
// added there, then sqrtf. Every lane of a large tensor adds ~n/8 small squares to a
// growing fp32 sum: torch's norm of a (32128, 24) tied embedding gradient is 1.5e-4 below
// the exact one, which moves the grad_norm HF logs by 1e-6 (tests/test_exact.c). Bit-equal to
// torch.linalg.vector_norm on every gradient tensor of those full-vocabulary fixtures.
float cpu_optimizer_tensor_norm(const void *g_, size_t n) {
    const float *g = g_;
    float lane[8] = {0};
    size_t full = n - n % 8, j = 0;
    for (; j < full; j += 8)
        for (int l = 0; l < 8; l++) lane[l] += g[j + l] * g[j + l];
    float s = lane[0];
    for (int l = 1; l < 8; l++) s += lane[l];
    for (; j < n; j++) s += g[j] * g[j];
    return sqrtf(s);
}

// torch, per parameter tensor (python floats are doubles, tensors fp32):
//   param.mul_(1 - lr * weight_decay)                    scalar in double, cast to fp32
//   exp_avg.lerp_(grad, 1 - beta1)                       fma(w, g - m, m) for |w| < 0.5
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)   fma(w2 * g, g, v * beta2)
//   bias_correction1 = 1 - beta1 ** step; bias_correction2 = 1 - beta2 ** step  (double)
//   step_size = lr / bias_correction1; bias_correction2_sqrt = sqrt(bias_correction2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)     param + (value * m) / denom
// Here lr, betas and eps arrive as floats (torch keeps them as doubles), so scalars can
// differ from torch's by the fp32 rounding of the hyperparameters themselves.
// (torch's vectorized lerp and addcmul round as one fused multiply-add each: adamw_math.h)
void cpu_optimizer_adamw_update(float *param, void *param_out_, const void *grad_, float *m, float *v, size_t n, float lr, float beta1,
                                float beta2, float eps, float weight_decay, float grad_scale, int step) {
    const float *grad = grad_;
    if (step < 1) t5_fail("adamw_update: optimizer step %d, but steps count from 1", step);
    const AdamwConsts c = adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, step);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) adamw_math_update(&param[i], &m[i], &v[i], grad[i], &c);
    // fp32 backend: the parameter is the master itself; a separate fp32 copy is kept exact
    float *param_out = param_out_;
    if (param_out && param_out != param) memcpy(param_out, param, n * sizeof(float));
}

void cpu_optimizer_tensor_norms(float *out, const void *g, const size_t *offsets, const size_t *counts, int n) {
    for (int i = 0; i < n; i++) out[i] = cpu_optimizer_tensor_norm((const float *)g + offsets[i], counts[i]);
}
