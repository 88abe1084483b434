// optim/lr_schedule.c: HF get_scheduler's lambdas (transformers optimization.py),
// computed in double as Python does, then used as fp32 by the optimizer.
#include "lr_schedule.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[] = {"linear", "constant", "constant_with_warmup", "cosine",
                                    "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};

int lr_schedule_parse(const char *name, LrScheduleType *out) {
    for (int i = 0; i <= LR_COSINE; i++)  // HF names only; DeepSpeed's come from the config
        if (strcmp(name, NAMES[i]) == 0) {
            *out = (LrScheduleType)i;
            return 1;
        }
    return 0;
}

const char *lr_schedule_name(LrScheduleType t) { return NAMES[t]; }

int lr_schedule_warmup_steps(int warmup_steps, double warmup_ratio, int total_steps) {
    if (warmup_steps > 0) return warmup_steps;
    return (int)ceil(warmup_ratio * total_steps);
}

static double max1(int x) { return x > 1 ? (double)x : 1.0; }

// DeepSpeed: the warmup fraction at batch iteration `it` (0 <= it < W), W >= 2
static double ds_warmup_gamma(const LrSchedule *s, int it, int W) {
    return s->ds_warmup_log ? log((double)it + 1.0) / log((double)W) : (double)it / (double)W;
}

static double ds_lr_at(const LrSchedule *s, int it) {
    int W = s->warmup_steps > 2 ? s->warmup_steps : 2, n = s->total_steps;
    double delta = s->ds_max_lr - s->ds_min_lr;
    if (s->type == LR_DS_WARMUP_COSINE) {
        if (it < 0) return 0.0;
        double ratio;
        if (it < W) {
            ratio = s->ds_warmup_min_ratio + ds_warmup_gamma(s, it, W) * (1.0 - s->ds_warmup_min_ratio);
        } else {
            double real_last = (double)(it - W + 1), real_total = n - W > 1 ? (double)(n - W) : 1.0;
            double progress = fmin(1.0, real_last / real_total);
            ratio = fmax(0.0, s->ds_cos_min_ratio + (1.0 - s->ds_cos_min_ratio) * (1.0 + cos(M_PI * progress)) / 2.0);
        }
        return s->base_lr * ratio;
    }
    if (it < 0) return s->ds_min_lr;
    if (it < W) return s->ds_min_lr + delta * ds_warmup_gamma(s, it, W);
    if (s->type == LR_DS_WARMUP) return s->ds_max_lr;
    double den = n - W > 1 ? (double)(n - W) : 1.0;  // WarmupDecayLR
    return s->ds_min_lr + delta * fmax(0.0, (double)(n - it) / den);
}

double lr_schedule_at(const LrSchedule *s, int step) {
    if (s->type >= LR_DS_WARMUP) return ds_lr_at(s, step - 1);
    int w = s->warmup_steps, n = s->total_steps;
    double f = 1.0;
    switch (s->type) {
    case LR_CONSTANT: f = 1.0; break;
    case LR_CONSTANT_WITH_WARMUP: f = step < w ? (double)step / max1(w) : 1.0; break;
    case LR_LINEAR:
        if (step < w) f = (double)step / max1(w);
        else f = fmax(0.0, (double)(n - step) / max1(n - w));
        break;
    case LR_COSINE:
        if (step < w) f = (double)step / max1(w);
        else {
            double progress = (double)(step - w) / max1(n - w);
            f = fmax(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress)));  // num_cycles = 0.5
        }
        break;
    default: break;  // DeepSpeed types: handled by ds_lr_at
    }
    return s->base_lr * f;
}
