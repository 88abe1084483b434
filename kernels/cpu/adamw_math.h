// kernels/cpu/adamw_math.h: one element of torch.optim.AdamW on fp32 state, inline, shared
// by the CPU backend's adamw_update (kernels/cpu/optimizer.c, where the torch semantics
// are written out) and the offloaded optimizer (zero/offload.c), so both take the same
// step bit for bit.
#pragma once
#include <math.h>

typedef struct {
    float neg_step_size, bc2_sqrt, decay, w1, w2, beta2, eps, grad_scale;
    int small_w1, has_decay;
} AdamwConsts;

// The step's scalars, in double where torch keeps python floats, then cast to fp32.
static inline AdamwConsts adamw_consts(float lr, float beta1, float beta2, float eps, float weight_decay,
                                       float grad_scale, int step) {
    AdamwConsts c;
    const double bc1 = 1.0 - pow((double)beta1, step);
    const double bc2 = 1.0 - pow((double)beta2, step);
    c.neg_step_size = (float)(-((double)lr / bc1));
    c.bc2_sqrt = (float)sqrt(bc2);
    c.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    c.w1 = (float)(1.0 - (double)beta1);
    c.w2 = (float)(1.0 - (double)beta2);
    c.beta2 = beta2;
    c.eps = eps;
    c.grad_scale = grad_scale;
    c.small_w1 = fabsf(c.w1) < 0.5f;
    c.has_decay = weight_decay != 0.0f;
    return c;
}

// param, m, v updated in place from the raw gradient g (grad_scale applied here).
static inline void adamw_math_update(float *param, float *m, float *v, float g_raw, const AdamwConsts *c) {
    float g = g_raw * c->grad_scale;
    float p = *param;
    if (c->has_decay) p = p * c->decay;
    // exp_avg.lerp_(grad, w1) and exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=w2) as
    // torch's CPU kernels round them: lerp_vec is fmadd(w, end - start, start) (weight < 0.5;
    // else fmadd(w - 1, end - start, end)), and gcc contracts addcmul's self + w * t1 * t2 to
    // fmadd(w * t1, t2, self). Bit-equal to torch 2.11 on AVX2 over 1e6 random elements
    // (two separate roundings differ in the last bit for 11% of exp_avg).
    float mi = *m;
    mi = c->small_w1 ? fmaf(c->w1, g - mi, mi) : fmaf(c->w1 - 1.0f, g - mi, g);
    float vi = fmaf(c->w2 * g, g, *v * c->beta2);
    float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
    *param = p + c->neg_step_size * mi / denom;
    *m = mi;
    *v = vi;
}
