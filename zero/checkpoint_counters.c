// zero/checkpoint_counters.c: the counters a checkpoint resumes with (global step, optimizer
// step, the loss scaler's state: checkpoint.h ZeroCounter) and the bounds each must be in.
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "checkpoint.h"

#define JSON_WHOLE_MAX 9007199254740992.0     // whole numbers a double holds exactly

// ---- the counters a checkpoint resumes with (checkpoint.h) --------------------------------
const char *const ZERO_COUNTER_NAMES[ZC_COUNT] = {
    [ZC_GLOBAL_STEP] = "global_step",
    [ZC_OPTIMIZER_STEP] = "optimizer_step",
    [ZC_SKIPPED_STEPS] = "loss_scaler.skipped_steps",
    [ZC_DYNAMIC] = "loss_scaler.dynamic",
    [ZC_CUR_SCALE] = "loss_scaler.cur_scale",
    [ZC_CUR_ITER] = "loss_scaler.cur_iter",
    [ZC_LAST_OVERFLOW_ITER] = "loss_scaler.last_overflow_iter",
    [ZC_CUR_HYSTERESIS] = "loss_scaler.cur_hysteresis",
};

static const struct {
    double lo, hi;
    int whole, positive;  // positive: > lo, not >= lo
} COUNTER_RULES[ZC_COUNT] = {
    [ZC_GLOBAL_STEP] = {0, INT_MAX, 1, 0},
    [ZC_OPTIMIZER_STEP] = {0, INT_MAX, 1, 0},
    [ZC_SKIPPED_STEPS] = {0, JSON_WHOLE_MAX, 1, 0},
    [ZC_DYNAMIC] = {0, 1, 1, 0},
    [ZC_CUR_SCALE] = {0, 1e300, 0, 1},
    [ZC_CUR_ITER] = {0, JSON_WHOLE_MAX, 1, 0},
    [ZC_LAST_OVERFLOW_ITER] = {-1, JSON_WHOLE_MAX, 1, 0},
    [ZC_CUR_HYSTERESIS] = {0, INT_MAX, 1, 0},
};

int zero_counters_ok(const double v[ZC_COUNT], int *bad, char *why, size_t n) {
    for (int k = 0; k < ZC_COUNT; k++) {
        double x = v[k], lo = COUNTER_RULES[k].lo, hi = COUNTER_RULES[k].hi;
        int in = isfinite(x) && (COUNTER_RULES[k].positive ? x > lo : x >= lo) && x <= hi &&
                 (!COUNTER_RULES[k].whole || x == floor(x));
        if (in) continue;
        *bad = k;
        if (COUNTER_RULES[k].whole) snprintf(why, n, "is %g, expected a whole number in [%g, %g]", x, lo, hi);
        else snprintf(why, n, "is %g, expected a finite number > %g, at most %g", x, lo, hi);
        return 0;
    }
    // every step the checkpoint took either updated (optimizer_step) or was skipped on an
    // overflow: a step count that disagrees would resume the lr schedule at the wrong place
    if (v[ZC_OPTIMIZER_STEP] + v[ZC_SKIPPED_STEPS] != v[ZC_GLOBAL_STEP]) {
        *bad = ZC_STEP_SUM;
        snprintf(why, n, "optimizer_step %.0f + skipped_steps %.0f != the checkpoint's global_step %.0f",
                 v[ZC_OPTIMIZER_STEP], v[ZC_SKIPPED_STEPS], v[ZC_GLOBAL_STEP]);
        return 0;
    }
    return 1;
}
