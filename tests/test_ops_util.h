// tests/test_ops_util.h: what the CPU op tests share (tests/test_ops.c,
// tests/test_ops_pointwise.c): tolerances, a seeded random generator, random arrays that
// are never zero, the finite-difference gradient check and the "backward adds" check.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/backend.h"
#include "test.h"

#define FD_STEP 1e-3f   // finite-difference step on an fp32 input element
#define GRAD_TOL 2e-3   // normalized max error of a finite-difference gradient (fp32 forward;
                        // measured worst 4e-4 with these inputs and FD_STEP)
#define CE_GRAD_TOL 1e-5  // the same for cross-entropy, whose loss is formed in double
#define FWD_TOL 1e-5    // normalized max error of an fp32 forward vs a double reference
#define ACC_TOL 1e-6    // "backward adds": (prefilled result - prefill) vs fresh result

static const Backend *be;

// ---- small helpers -------------------------------------------------------------------

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static inline uint32_t rng_u32(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}
static inline float rng_uniform(void) { return (float)(rng_u32() >> 8) * 0x1.0p-24f; }  // [0,1)

// Random values in [-scale, -0.05*scale] U [0.05*scale, scale]: never zero, and away from
// relu's kink by far more than the finite-difference step.
static inline float *rand_array(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float u = 0.05f + 0.95f * rng_uniform();
        x[i] = (rng_u32() & 1 ? u : -u) * scale;
    }
    return x;
}
static inline float *zeros_array(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static inline float *copy_array(const float *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}
static inline float *to_float(const double *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}
static inline double dot_double(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

// Central differences of loss() with respect to every element of x, compared with the
// analytic gradient. loss() recomputes the forward from the current inputs.
typedef double (*LossFn)(void *ctx);
static inline void check_grad_tol(const char *name, float *x, size_t n, const float *analytic, LossFn loss, void *ctx,
                           double tol) {
    float *numeric = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i], xp = x0 + FD_STEP, xm = x0 - FD_STEP;
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        numeric[i] = (float)((lp - lm) / ((double)xp - (double)xm));
    }
    char what[320];
    snprintf(what, sizeof what, "%s: analytic vs finite differences", name);
    test_close(what, analytic, numeric, n, tol);
    free(numeric);
}
static inline void check_grad(const char *name, float *x, size_t n, const float *analytic, LossFn loss, void *ctx) {
    check_grad_tol(name, x, n, analytic, loss, ctx, GRAD_TOL);
}

// A backward run into buffers prefilled with `before` must give before + fresh.
static inline void check_accumulates(const char *name, const float *after, const float *before, const float *fresh,
                              size_t n) {
    float *delta = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) delta[i] = after[i] - before[i];
    char what[320];
    snprintf(what, sizeof what, "%s: backward adds into its gradient", name);
    test_close(what, delta, fresh, n, ACC_TOL);
    free(delta);
}

static inline void check_bitwise(const char *what, const void *a, const void *b, size_t bytes) {
    test_check(memcmp(a, b, bytes) == 0, what);
}
