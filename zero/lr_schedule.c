// zero/lr_schedule.c: HF get_scheduler's lambdas (transformers optimization.py),
// computed in double as Python does, then used as fp32 by the optimizer.
#include "lr_schedule.h"

#include <math.h>
#include <string.h>

static const char *const NAMES[] = {"linear", "constant", "constant_with_warmup", "cosine"};

int lr_schedule_parse(const char *name, LrScheduleType *out) {
    for (int i = 0; i < (int)(sizeof NAMES / sizeof NAMES[0]); i++)
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

double lr_schedule_at(const LrSchedule *s, int step) {
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
    }
    return s->base_lr * f;
}
