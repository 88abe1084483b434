// zero/step.h: one optimizer step as HF Trainer (+ DeepSpeed's fp16 loss scaler) takes
// it, on one rank, in two phases so that ZeRO stages can put their communication between
// them (reduce gradients after accumulate; all-gather parameters after apply):
//   accumulate: for each micro-batch forward, backward with dloss = scale / (label tokens
//               of the whole step): the gradient of scale * the mean loss over the step
//   (ranks)     stage 0 across ranks: the label-token count is summed over ranks before
//               backward (so every rank divides by the GLOBAL count), gradients are
//               summed over ranks before apply; every rank then takes the same update.
//               comm NULL = one rank. Stage 1: the optimizer owns one partition
//               (zero/partition.h) of the flat space, updates only it, and the
//               partitions are all-gathered after the update. Stages 2-3: next.
//   apply:      grad_norm = global L2 norm / scale (pre-clip, reported); an inf/nan norm
//               is an overflow: the step is skipped (no update, no lr-schedule advance,
//               as DeepSpeed) and the scaler reacts; else clip, lr = schedule(step),
//               AdamW with gradients unscaled and clipped in one multiply; zero grads.
#pragma once
#include "../model/t5.h"
#include "comm.h"
#include "loss_scaler.h"
#include "lr_schedule.h"
#include "optimizer.h"

typedef struct {
    double loss;        // mean loss over the step's label tokens (unscaled)
    double grad_norm;   // before clipping, unscaled; inf/nan on overflow
    double lr;          // the learning rate this update used (0 when skipped)
    double loss_scale;  // the scale this step ran with
    long n_tokens;      // label tokens in the step
    int skipped;        // 1: overflow, the update was skipped
} StepResult;

// Phase 1. Returns the step's mean loss; *n_tokens = label tokens of the step.
double zero_step_accumulate(T5Model *m, const Comm *comm, const T5Batch *micro, int n_micro, float label_smoothing,
                            double loss_scale, long *n_tokens);
// Phase 2. scaler may be NULL (no scaling).
StepResult zero_step_apply(T5Model *m, const Comm *comm, AdamW *opt, const LrSchedule *sched, LossScaler *scaler);
// Both phases.
StepResult zero_train_step(T5Model *m, const Comm *comm, AdamW *opt, const LrSchedule *sched, LossScaler *scaler,
                           const T5Batch *micro, int n_micro, float label_smoothing);
