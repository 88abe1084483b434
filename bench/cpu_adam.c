// bench/cpu_adam.c: parameters per second of ZeRO-Offload's CPU AdamW (optim/cpu_adam.c)
// per instruction set and thread count, and (--compare DIR) our step against
// DeepSpeedCPUAdam's on the same inputs (bench/cpu_adam_ds.py writes them). Built by
// `make build/bench/cpu_adam`; bench/cpu_adam.sh runs both sides in one call.
//
//   build/bench/cpu_adam [--n ELEMENTS] [--threads "1 16"] [--steps K] [--compare DIR]
//
// Timing: K steps over n elements after one warm-up step; fp32 gradient in and no 16-bit
// copy out (DeepSpeedCPUAdam.step's work), then bf16 gradient in and the bf16 copy out in
// the same pass (what the offloaded trainer runs). One line per case:
//   RESULT impl=train_t5 isa=avx512 mode=fp32 threads=16 params_per_s=... per_core=...
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/check.h"
#include "../common/half.h"
#include "../optim/cpu_adam.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void time_case(CpuAdamIsa isa, int bf16, int threads, size_t n, int steps, float *p, float *m, float *v,
                      void *g, void *out) {
    omp_set_num_threads(threads);
    Dtype t = bf16 ? DTYPE_BF16 : DTYPE_F32;
    double best = 1e30;
    for (int s = 0; s <= steps; s++) {  // step 0 warms up
        AdamwConsts c = adamw_consts(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, s + 1);
        double t0 = now();
        cpu_adam_update(p, m, v, g, t, bf16 ? out : NULL, t, n, &c, isa);
        double dt = now() - t0;
        if (s > 0 && dt < best) best = dt;
    }
    double pps = (double)n / best;
    printf("RESULT impl=train_t5 isa=%s mode=%s threads=%d n=%zu params_per_s=%.4g per_core=%.4g best_step_s=%.4f\n",
           cpu_adam_isa_name(isa), bf16 ? "bf16_grad_and_copy" : "fp32", threads, n, pps, pps / threads, best);
    fflush(stdout);
}

static float *read_f32(const char *dir, const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopenCheck(path, "rb");
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (bytes <= 0 || bytes % 4) t5_fail("%s: expected raw float32 data, found %ld bytes", path, bytes);
    float *x = mallocCheck((size_t)bytes);
    freadCheck(x, 1, (size_t)bytes, f, path);
    fcloseCheck(f, path);
    *n = (size_t)bytes / 4;
    return x;
}

// One step on DeepSpeed's inputs (params, grads, exp_avg, exp_avg_sq before the step numbered
// in step.txt; lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, AdamW mode:
// bench/cpu_adam_ds.py), against DeepSpeedCPUAdam's params and moments after it.
static int compare(const char *dir) {
    size_t n, k;
    float *p = read_f32(dir, "param_in.f32", &n), *g = read_f32(dir, "grad.f32", &k);
    float *m = read_f32(dir, "exp_avg_in.f32", &k), *v = read_f32(dir, "exp_avg_sq_in.f32", &k);
    float *dp = read_f32(dir, "param_ds.f32", &k), *dm = read_f32(dir, "exp_avg_ds.f32", &k);
    float *dv = read_f32(dir, "exp_avg_sq_ds.f32", &k);
    char path[1024];
    snprintf(path, sizeof path, "%s/step.txt", dir);
    FILE *f = fopenCheck(path, "r");
    int step = 0;
    if (fscanf(f, "%d", &step) != 1 || step < 1) t5_fail("%s: expected the step number (>= 1)", path);
    fcloseCheck(f, path);
    AdamwConsts c = adamw_consts(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, step);
    float *p_before = mallocCheck(n * sizeof(float));
    memcpy(p_before, p, n * sizeof(float));
    cpu_adam_update(p, m, v, g, DTYPE_F32, NULL, DTYPE_F32, n, &c, CPU_ADAM_AUTO);
    // per array: the largest difference over the array's largest magnitude (test_close's
    // measure; an element-wise relative difference is meaningless where a moment or a
    // weight crosses zero), and the same for the update itself (params after - before)
    double worst[4] = {0, 0, 0, 0}, scale[4] = {0, 0, 0, 0};
    const float *ours[3] = {p, m, v}, *theirs[3] = {dp, dm, dv};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < n; i++) {
            worst[a] = fmax(worst[a], fabs((double)ours[a][i] - theirs[a][i]));
            scale[a] = fmax(scale[a], fabs((double)theirs[a][i]));
        }
    for (size_t i = 0; i < n; i++) {  // the update: the same difference over the largest step
        worst[3] = fmax(worst[3], fabs((double)p[i] - dp[i]));
        scale[3] = fmax(scale[3], fabs((double)dp[i] - p_before[i]));
    }
    for (int a = 0; a < 4; a++) worst[a] /= fmax(scale[a], 1e-30);
    printf("COMPARE n=%zu against DeepSpeedCPUAdam (max |ours - theirs| / max |theirs|): params %.3g, exp_avg %.3g, "
           "exp_avg_sq %.3g; of the update itself %.3g (target 1e-6 for the state)\n", n, worst[0], worst[1], worst[2],
           worst[3]);
    free(p_before);
    return worst[0] <= 1e-6 && worst[1] <= 1e-6 && worst[2] <= 1e-6 ? 0 : 1;
}

int main(int argc, char **argv) {
    size_t n = (size_t)64 << 20;
    int steps = 5;
    const char *threads = NULL, *cmp = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = argv[++i];
        else if (!strcmp(argv[i], "--compare") && i + 1 < argc) cmp = argv[++i];
        else t5_fail("cpu_adam: unknown argument \"%s\"; usage: cpu_adam [--n N] [--steps K] [--threads \"1 16\"] "
                     "[--compare DIR]", argv[i]);
    }
    if (cmp) return compare(cmp);
    if (n < 1 || steps < 1) t5_fail("cpu_adam: --n and --steps must be positive");
    float *p = mallocCheck(n * 4), *m = mallocCheck(n * 4), *v = mallocCheck(n * 4), *g = mallocCheck(n * 4);
    uint16_t *gh = mallocCheck(n * 2), *out = mallocCheck(n * 2);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        g[i] = (float)((i * 40503u) % 1000) * 1e-4f - 0.05f;
        gh[i] = half_f32_to_bf16(g[i]);
        m[i] = v[i] = 0.0f;
        out[i] = 0;
    }
    char list[256];
    snprintf(list, sizeof list, "%s", threads ? threads : "1");
    if (!threads) snprintf(list, sizeof list, "1 %d", omp_get_num_procs());
    const CpuAdamIsa isas[3] = {CPU_ADAM_SCALAR, CPU_ADAM_AVX2, CPU_ADAM_AVX512};
    for (char *tok = strtok(list, " "); tok; tok = strtok(NULL, " ")) {
        int th = atoi(tok);
        if (th < 1) t5_fail("cpu_adam: --threads \"%s\": each count must be >= 1", threads);
        for (int k = 0; k < 3; k++) {
            if (!cpu_adam_isa_supported(isas[k])) continue;
            time_case(isas[k], 0, th, n, steps, p, m, v, g, NULL);
            time_case(isas[k], 1, th, n, steps, p, m, v, gh, out);
        }
    }
    return 0;
}
