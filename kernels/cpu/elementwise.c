// kernels/cpu/elementwise.c: add, axpy, scale, and dropout with its counter-based RNG.
//
// Dropout RNG: kernels/dropout_rng.h (shared with the CUDA backend).
#include <string.h>

#include "../../common/check.h"
#include "../dropout_rng.h"
#include "cpu_ops.h"

float cpu_dropout_uniform(uint64_t seed, uint64_t index) { return dropout_rng_uniform(seed, index); }

float cpu_dropout_scale(float p) { return dropout_rng_scale(p); }

// The CPU backend is fp32: HF applies this guard to fp16 tensors only.
void cpu_clamp_fp16_overflow(void *x, size_t n) {
    (void)x;
    (void)n;
}

static void dropout_check_p(float p) {
    if (!(p >= 0.0f && p <= 1.0f)) t5_fail("dropout probability %g is outside [0, 1]; set dropout_rate in [0, 1)", p);
}

void cpu_elementwise_add(void *out_, const void *a_, const void *b_, size_t n) {
    float *out = out_;
    const float *a = a_, *b = b_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_elementwise_axpy(void *y_, const void *x_, float alpha, size_t n) {
    float *y = y_;
    const float *x = x_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void cpu_elementwise_scale(void *out_, const void *inp_, float alpha, size_t n) {
    float *out = out_;
    const float *inp = inp_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = alpha * inp[i];
}

// out (n) = dropout(inp); out may alias inp.
void cpu_dropout_forward(void *out_, const void *inp_, size_t n, DropoutArgs drop) {
    float *out = out_;
    const float *inp = inp_;
    dropout_check_p(drop.p);
    if (drop.p == 0.0f) {
        if (out != inp && n) memmove(out, inp, n * sizeof(float));
        return;
    }
    float scale = cpu_dropout_scale(drop.p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = cpu_dropout_uniform(drop.seed, i) >= drop.p ? inp[i] * scale : 0.0f;
}

// dinp (n) += dropout mask * scale * dout (the mask of the forward call with the same seed).
void cpu_dropout_backward(void *dinp_, const void *dout_, size_t n, DropoutArgs drop) {
    float *dinp = dinp_;
    const float *dout = dout_;
    dropout_check_p(drop.p);
    if (drop.p == 0.0f) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dinp[i] += dout[i];
        return;
    }
    float scale = cpu_dropout_scale(drop.p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        if (cpu_dropout_uniform(drop.seed, i) >= drop.p) dinp[i] += dout[i] * scale;
}

// out = x + dropout(y), as dropout_forward of y then add (y + x, in that order)
void cpu_dropout_add(void *out_, const void *y_, const void *x_, size_t n, DropoutArgs drop) {
    float *out = out_;
    const float *y = y_, *x = x_;
    dropout_check_p(drop.p);
    const float scale = drop.p != 0.0f ? cpu_dropout_scale(drop.p) : 1.0f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = drop.p == 0.0f ? y[i] : cpu_dropout_uniform(drop.seed, i) >= drop.p ? y[i] * scale : 0.0f;
        out[i] = d + x[i];
    }
}

// The guard is fp16's (cpu_clamp_fp16_overflow): in fp32 the residual add alone.
void cpu_dropout_add_guard(void *out, const void *y, const void *x, size_t n, DropoutArgs drop) {
    cpu_dropout_add(out, y, x, n, drop);
    cpu_clamp_fp16_overflow(out, n);
}
