// trainer/plan.h: the run plan: what `train_t5 --do_train ...` will do, resolved once from
// the flags (TrainArgs, trainer/args.c) and the DeepSpeed config (deepspeed/ds_config.h)
// before anything is written. Strings become enums here; the numbers the run uses (batch,
// optimizer, clipping, warmup, steps) come from the flags, whose defaults are HF's
// (optim/adamw.h holds the optimizer's), and then from --deepspeed, which overrides them
// here rather than in TrainArgs: TrainArgs stays what the user typed (plus the defaults).
// config.json is parsed once, here. Order of resolution: docs/TRAINER.md "Start-up".
#pragma once
#include "../data/sampler.h"
#include "../kernels/backend.h"
#include "../deepspeed/ds_config.h"
#include "../model/config.h"
#include "../optim/loss_scaler.h"
#include "../optim/lr_schedule.h"
#include "../zero/zero.h"
#include "args.h"

// --logging_strategy / --eval_strategy / --save_strategy (HF's IntervalStrategy)
typedef enum { STRATEGY_NO = 0, STRATEGY_STEPS, STRATEGY_EPOCH } Strategy;
typedef enum { PRECISION_FP32 = 0, PRECISION_FP16, PRECISION_BF16 } Precision;
typedef enum { DEVICE_CPU = 0, DEVICE_CUDA } DeviceKind;
typedef enum { OPTIM_ADAMW = 0 } OptimKind;  // every name HF has for AdamW (--optim adamw_*)
typedef enum { INIT_PRETRAINED = 0, INIT_RANDOM } InitKind;

typedef struct {
    // ---- from the flags (run_plan_resolve) ----
    SamplerType sampler;
    LrScheduleType lr_type;
    Strategy logging, eval, save;
    Precision precision;      // fp16/bf16 from a flag or the config's "enabled": true
    DeviceKind device;
    OptimKind optim;
    InitKind init;
    int has_val;              // the validation split is used (--do_eval or an eval strategy)
    T5Config model_cfg;       // config.json of --model (or the checkpoint resumed), parsed once
    int model_has_weights;    // --model is a directory with weights (not a bare preset)
    // ---- the numbers the run uses: the flags', then --deepspeed's (run_plan_apply_deepspeed) ----
    int micro_batch;          // per-device train batch
    int grad_accum;           // gradient accumulation steps
    double lr, beta1, beta2, eps, weight_decay, max_grad_norm;
    int warmup_steps;         // as given (0: from warmup_ratio against the total steps)
    double warmup_ratio;
    int max_steps;            // -1: from num_train_epochs
    double num_train_epochs;
    // ---- from --deepspeed ----
    DsConfig ds_loaded;       // as loaded and validated (before the output dir is touched)
    int has_ds_sched;         // the config's scheduler replaces --lr_scheduler_type
    LrSchedule ds_sched;
    int has_ds_scaler;        // the config's fp16 block sets the loss scaler
    LossScaler ds_scaler;
    ZeroOptions zopt;         // stage 0 with overlapped all-reduce without --deepspeed
    int node_local;           // checkpoints on each host's own disk (--save_on_each_node, or the config's
                              // checkpoint.use_node_local_storage): trainer/checkpoint.c, docs/LAUNCH.md
} RunPlan;

// The flags' plan: enums from the (already validated) strings, the numbers, config.json.
// ds_loaded: --deepspeed as ds_config_load read it (NULL: none). Every error names the
// flag; nothing is written and no data is read.
void run_plan_resolve(RunPlan *p, const TrainArgs *a, const DsConfig *ds_loaded);
// --deepspeed applied to the plan (trainer/deepspeed.c): "auto" resolved against the flags
// as HF does, then the config's batch, optimizer, clipping, precision, scaler, scheduler
// and ZeRO settings. n_train: training examples (0: not training). print: this rank prints.
void run_plan_apply_deepspeed(RunPlan *p, const TrainArgs *a, long n_train, int world, int print);
// --deepspeed's "activation_checkpointing" block: gradient checkpointing on (as
// --gradient_checkpointing), with a NOTICE saying so. Before the plan (trainer/deepspeed.c).
void train_args_take_ds_checkpointing(TrainArgs *a, const DsConfig *c);
// The same resolve before the data is read (step count unknown): contradictions and
// unsupported keys are errors before anything is tokenized or written; the plan is unchanged.
void run_plan_check_deepspeed(const RunPlan *p, const TrainArgs *a, int world);
// Optimizer steps of the run, as HF: steps per epoch ceil(ceil(N / (B*world)) / GA).
int run_plan_steps(const RunPlan *p, long N, int world, int *steps_per_epoch, int *num_epochs);
// The activations' dtype of the plan's precision.
Dtype run_plan_dtype(const RunPlan *p);
const char *run_plan_precision_name(Precision p);
