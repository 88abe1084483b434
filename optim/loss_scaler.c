// optim/loss_scaler.c: DeepSpeed's DynamicLossScaler.update_scale (see loss_scaler.h).
#include "loss_scaler.h"

#include <math.h>

#include "../common/check.h"

LossScaler loss_scaler_dynamic(int initial_scale_power, long window, int hysteresis, double min_scale,
                               int consecutive_hysteresis) {
    LossScaler s = {0};
    s.dynamic = 1;
    s.cur_scale = ldexp(1.0, initial_scale_power);
    s.last_overflow_iter = -1;
    s.scale_factor = 2.0;
    s.scale_window = window;
    s.min_scale = min_scale;
    s.delayed_shift = hysteresis;
    s.cur_hysteresis = hysteresis;
    s.consecutive_hysteresis = consecutive_hysteresis;
    return s;
}

LossScaler loss_scaler_static(double scale) {
    LossScaler s = {0};
    s.cur_scale = scale;
    s.last_overflow_iter = -1;
    return s;
}

void loss_scaler_update(LossScaler *s, int overflow) {
    if (overflow) s->skipped_steps++;
    if (!s->dynamic) {
        s->cur_iter++;
        return;
    }
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            if (s->cur_scale == s->min_scale)
                t5_fail("fp16 loss scale is already at its minimum (%g) and the gradients still overflow; HINT: "
                        "lower the learning rate, or train in bf16 (--bf16)", s->min_scale);
            double next = s->cur_scale / s->scale_factor;
            s->cur_scale = next > s->min_scale ? next : s->min_scale;
        } else {
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
        long stable = (s->cur_iter - s->last_overflow_iter) - 1;
        if (stable > 0 && stable % s->scale_window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
            s->cur_scale *= s->scale_factor;
        }
    }
    s->cur_iter++;
}
