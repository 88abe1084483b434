// zero/step.h: one optimizer step as HF Trainer (+ DeepSpeed's fp16 loss scaler) takes it,
// on one rank of a ZeRO run (zero/zero.h says what each stage partitions), in two phases:
//   accumulate: the label tokens of the whole global batch are counted (summed over ranks),
//               then per micro-batch forward and backward with dloss = scale / that count:
//               the gradient of scale * the mean loss over the global batch, whatever the
//               world size or accumulation (HF's average_tokens_across_devices).
//               Stages 2-3 reduce-scatter each unit's gradient during backward.
//   apply:      stages 0-1 all-reduce the gradients; grad_norm = global L2 norm / scale
//               (pre-clip, reported; summed over the partitions at stages 2-3); an inf/nan
//               norm is an overflow on every rank alike: the step is skipped (no update, no
//               lr-schedule advance, as DeepSpeed) and the scaler reacts (a static scale of 1,
//               fp32/bf16: the trainer stops the run after a few in a row; no scaler at
//               all: an error at once); else clip,
//               lr = schedule(step), AdamW on the owned range with gradients unscaled and
//               clipped in one multiply; stages 1-2 all-gather the updated weights; zero grads.
#pragma once
#include "../model/t5.h"
#include "../optim/loss_scaler.h"
#include "../optim/lr_schedule.h"
#include "zero.h"

typedef struct {
    double loss;        // mean loss over the step's label tokens (unscaled)
    double grad_norm;   // before clipping, unscaled; inf/nan on overflow
    double lr;          // the learning rate this update used (0 when skipped)
    double loss_scale;  // the scale this step ran with
    long n_tokens;      // label tokens in the step
    int skipped;        // 1: overflow, the update was skipped
} StepResult;

// Phase 1. Returns the step's mean loss; *n_tokens = label tokens of the step.
// global_tokens > 0: the label tokens of the whole global batch, known to the caller (every
// rank can count them from the sampler's order: trainer/trainer.c), so no collective is
// needed before the step; 0: counted here (an all-reduce of the ranks' counts).
double zero_step_accumulate(ZeroState *z, const T5Batch *micro, int n_micro, float label_smoothing,
                            double loss_scale, long global_tokens, long *n_tokens);
// Phase 2. scaler may be NULL (no scaling).
StepResult zero_step_apply(ZeroState *z, const LrSchedule *sched, LossScaler *scaler);
// Both phases (the global token count counted here, or given: zero_train_step_tokens).
StepResult zero_train_step(ZeroState *z, const LrSchedule *sched, LossScaler *scaler, const T5Batch *micro,
                           int n_micro, float label_smoothing);
StepResult zero_train_step_tokens(ZeroState *z, const LrSchedule *sched, LossScaler *scaler, const T5Batch *micro,
                                  int n_micro, float label_smoothing, long global_tokens);
// A one-rank Comm (no launcher, no MPI, no NCCL) for tools and tests that train alone.
const Comm *zero_comm_single(void);
