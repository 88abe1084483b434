// optim/lr_schedule.h: learning-rate schedules as Hugging Face's get_scheduler builds
// them (LambdaLR multipliers on the base lr). `step` is the number of optimizer steps
// already taken: the first update uses step 0, as HF does.
#pragma once

typedef enum {
    LR_LINEAR = 0,              // warmup then linear decay to 0 at total_steps
    LR_CONSTANT,                // base lr, no warmup
    LR_CONSTANT_WITH_WARMUP,    // warmup then base lr
    LR_COSINE,                  // warmup then half-cosine decay to 0 at total_steps
    // DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py), from a --deepspeed config
    LR_DS_WARMUP,               // WarmupLR: min -> max over warmup (log or linear), then max
    LR_DS_WARMUP_DECAY,         // WarmupDecayLR: WarmupLR, then linear to 0 at total_steps
    LR_DS_WARMUP_COSINE,        // WarmupCosineLR: ratio warmup_min_ratio -> 1, cosine to cos_min_ratio
} LrScheduleType;

typedef struct {
    LrScheduleType type;
    double base_lr;
    int warmup_steps;   // resolved (see lr_schedule_warmup_steps for warmup_ratio)
    int total_steps;    // number of optimizer steps of the run
    // DeepSpeed schedulers only:
    double ds_min_lr, ds_max_lr;  // WarmupLR / WarmupDecayLR: warmup_min_lr, warmup_max_lr
    int ds_warmup_log;            // warmup_type log (1, DeepSpeed's default) or linear (0)
    double ds_warmup_min_ratio, ds_cos_min_ratio;  // WarmupCosineLR (lr = base_lr * ratio)
} LrSchedule;

// Parse an HF lr_scheduler_type name; returns 1 on success, 0 if unknown.
int lr_schedule_parse(const char *name, LrScheduleType *out);
const char *lr_schedule_name(LrScheduleType t);
// HF TrainingArguments.get_warmup_steps: warmup_steps if > 0, else ceil(ratio * total).
int lr_schedule_warmup_steps(int warmup_steps, double warmup_ratio, int total_steps);
// Learning rate for the update after `step` completed optimizer steps. DeepSpeed's
// schedulers set the optimizer's lr at construction (batch iteration -1: warmup_min_lr,
// or 0 for WarmupCosineLR) and step after each update, so update k (1-based) uses
// iteration k-2: the first two updates both run at the warmup start.
double lr_schedule_at(const LrSchedule *s, int step);
