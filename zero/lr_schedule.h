// zero/lr_schedule.h: learning-rate schedules as Hugging Face's get_scheduler builds
// them (LambdaLR multipliers on the base lr). `step` is the number of optimizer steps
// already taken: the first update uses step 0, as HF does.
#pragma once

typedef enum {
    LR_LINEAR = 0,              // warmup then linear decay to 0 at total_steps
    LR_CONSTANT,                // base lr, no warmup
    LR_CONSTANT_WITH_WARMUP,    // warmup then base lr
    LR_COSINE,                  // warmup then half-cosine decay to 0 at total_steps
} LrScheduleType;

typedef struct {
    LrScheduleType type;
    double base_lr;
    int warmup_steps;   // resolved (see lr_schedule_warmup_steps for warmup_ratio)
    int total_steps;    // number of optimizer steps of the run
} LrSchedule;

// Parse an HF lr_scheduler_type name; returns 1 on success, 0 if unknown.
int lr_schedule_parse(const char *name, LrScheduleType *out);
const char *lr_schedule_name(LrScheduleType t);
// HF TrainingArguments.get_warmup_steps: warmup_steps if > 0, else ceil(ratio * total).
int lr_schedule_warmup_steps(int warmup_steps, double warmup_ratio, int total_steps);
// Learning rate for the update after `step` completed optimizer steps.
double lr_schedule_at(const LrSchedule *s, int step);
