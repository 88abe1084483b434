// optim/loss_scaler.h: DeepSpeed's dynamic loss scaler (deepspeed/runtime/fp16/
// loss_scaler.py, DynamicLossScaler.update_scale), as one small state machine.
// fp16 training multiplies the loss by `scale` so small gradients survive in fp16;
// an inf/nan anywhere in the gradients means the step is skipped and:
//   - if hysteresis is exhausted (delayed_shift == 1 or cur_hysteresis == 1): the scale
//     halves (not below min_scale; already at min_scale is a fatal error, as DeepSpeed's
//     raise_error_at_min_scale);
//   - else cur_hysteresis counts down by one and the scale stays.
// After `window` consecutive clean steps since the last overflow the scale doubles (and,
// without consecutive_hysteresis, cur_hysteresis is refilled). With consecutive_hysteresis
// every clean step refills it. Config keys: fp16.loss_scale (0 = dynamic),
// initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis,
// min_loss_scale. Every field is plain data: the state checkpoints as is.
#pragma once

typedef struct {
    int dynamic;                 // 0: static scale (fp16.loss_scale > 0) or no scaling (1.0)
    double cur_scale;
    long cur_iter;
    long last_overflow_iter;     // -1 before the first overflow
    double scale_factor;         // 2
    long scale_window;           // loss_scale_window (1000)
    double min_scale;            // min_loss_scale (1)
    int delayed_shift;           // hysteresis (2)
    int cur_hysteresis;
    int consecutive_hysteresis;  // false
    long skipped_steps;          // steps skipped because of overflow
} LossScaler;

// DeepSpeed defaults: initial_scale_power 16, window 1000, hysteresis 2, min 1.
LossScaler loss_scaler_dynamic(int initial_scale_power, long window, int hysteresis, double min_scale,
                               int consecutive_hysteresis);
// A fixed scale (1.0 = no scaling: fp32 and bf16).
LossScaler loss_scaler_static(double scale);
// After each step: overflow = inf/nan found in the gradients of this step.
void loss_scaler_update(LossScaler *s, int overflow);
