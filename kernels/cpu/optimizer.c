// kernels/cpu/optimizer.c: optimizer building blocks on fp32 state.
//   sumsq         sum of g^2 (n) in double, for the global gradient norm
//   adamw_update  torch.optim.AdamW (foreach=False, i.e. _single_tensor_adam with
//                 decoupled weight decay) on one contiguous range.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
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

// torch, per parameter tensor (python floats are doubles, tensors fp32):
//   param.mul_(1 - lr * weight_decay)                    scalar in double, cast to fp32
//   exp_avg.lerp_(grad, 1 - beta1)                       m + w * (g - m) for |w| < 0.5
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   bias_correction1 = 1 - beta1 ** step; bias_correction2 = 1 - beta2 ** step  (double)
//   step_size = lr / bias_correction1; bias_correction2_sqrt = sqrt(bias_correction2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)     param + (value * m) / denom
// Here lr, betas and eps arrive as floats (torch keeps them as doubles), so scalars can
// differ from torch's by the fp32 rounding of the hyperparameters themselves.
// (torch's AVX2 lerp uses a fused multiply-add; its scalar path, followed here, does not.)
void cpu_optimizer_adamw_update(float *param, void *param_out_, const void *grad_, float *m, float *v, size_t n, float lr, float beta1,
                                float beta2, float eps, float weight_decay, float grad_scale, int step) {
    const float *grad = grad_;
    if (step < 1) t5_fail("adamw_update: optimizer step %d, but steps count from 1", step);
    const double bc1 = 1.0 - pow((double)beta1, step);
    const double bc2 = 1.0 - pow((double)beta2, step);
    const float neg_step_size = (float)(-((double)lr / bc1));
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float w1 = (float)(1.0 - (double)beta1);
    const float w2 = (float)(1.0 - (double)beta2);
    const int small_w1 = fabsf(w1) < 0.5f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float p = param[i];
        if (weight_decay != 0.0f) p = p * decay;
        float mi = m[i];
        mi = small_w1 ? mi + w1 * (g - mi) : g - (g - mi) * (1.0f - w1);
        float vi = v[i] * beta2;
        vi = vi + w2 * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = p + neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
    // fp32 backend: the parameter is the master itself; a separate fp32 copy is kept exact
    float *param_out = param_out_;
    if (param_out && param_out != param) memcpy(param_out, param, n * sizeof(float));
}
