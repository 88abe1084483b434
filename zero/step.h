// zero/step.h: one optimizer step as HF Trainer takes it, on one rank:
//   for each micro-batch: forward, backward with dloss = 1 / (label tokens of the
//   whole step), so the accumulated gradient is that of the mean loss over the step;
//   grad_norm = global L2 norm (pre-clip, reported); clip; lr = schedule(step);
//   AdamW update; zero the gradients.
// This is ZeRO stage 0 on a world of one rank; the stages (zero/stage*.c, later)
// insert their reduce-scatter / all-gather between these same phases.
#pragma once
#include "../model/t5.h"
#include "lr_schedule.h"
#include "optimizer.h"

typedef struct {
    double loss;       // mean loss over the step's label tokens
    double grad_norm;  // before clipping
    double lr;         // the learning rate used by this update
    long n_tokens;     // label tokens in the step
} StepResult;

StepResult zero_train_step(T5Model *m, AdamW *opt, const LrSchedule *sched, const T5Batch *micro, int n_micro,
                           float label_smoothing);
