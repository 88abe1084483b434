// deepspeed/ds_config.h: the DeepSpeed JSON config (--deepspeed FILE) as a typed object.
// Two steps, as HF Trainer + DeepSpeed do:
//   ds_config_load     parse + check types and bounds; "auto" is kept (is_auto) for now.
//   ds_config_resolve  fill every "auto" from the flags (HfTrainerDeepSpeedConfig's
//                      trainer_config_process / trainer_config_finalize), apply DeepSpeed's
//                      batch rule, and refuse a config value that contradicts a flag.
// Every key DeepSpeed reads is one of: supported (a field below), an accepted no-op (only
// where it changes nothing here; documented as such), accepted only at DeepSpeed's default
// value, or an error saying train_t5 does not support it. Unknown keys are errors with the
// closest known key. Errors are one line naming the file, the key, what was expected and
// what was found (common/check.h t5_fail). The full key table with defaults, bounds and a
// doc line each: ds_config_print_reference(), from the table in ds_keys.c. The blocks around
// training (activation_checkpointing, aio, tensorboard, csv_monitor, flops_profiler,
// comms_logger, wandb, comet) are read here and acted on by the trainer (docs/TRAINER.md
// "DeepSpeed blocks around training").
#pragma once
#include <stdio.h>

#define IMAX 2147483647.0  // keys the run keeps in an int (batch sizes, step counts)

typedef enum {
    ZERO_STAGE_DISABLED = 0,       // plain data parallel
    ZERO_STAGE_OPTIMIZER_STATES,   // 1: optimizer states partitioned
    ZERO_STAGE_GRADIENTS,          // 2: + gradients partitioned
    ZERO_STAGE_WEIGHTS,            // 3: + parameters partitioned
} ZeroStage;

typedef enum { OFFLOAD_NONE = 0, OFFLOAD_CPU, OFFLOAD_NVME } OffloadDevice;

typedef enum {
    DS_OPTIMIZER_NONE = 0,  // no "optimizer" section: HF Trainer's AdamW from the flags
    DS_OPTIMIZER_ADAM,      // DeepSpeed "Adam": decoupled weight decay unless adam_w_mode false
    DS_OPTIMIZER_ADAMW,
} DsOptimizerType;

typedef enum {
    DS_SCHEDULER_NONE = 0,        // no "scheduler" section: HF's --lr_scheduler_type
    DS_SCHEDULER_WARMUP_LR,       // min -> max over warmup_num_steps, then constant
    DS_SCHEDULER_WARMUP_DECAY_LR, // WarmupLR, then linear decay to 0 at total_num_steps
    DS_SCHEDULER_WARMUP_COSINE_LR // ratio warmup_min_ratio -> 1, then cosine to cos_min_ratio
} DsSchedulerType;

typedef enum { DS_WARMUP_LOG = 0, DS_WARMUP_LINEAR } DsWarmupType;

// One config value. is_set: the key is in the file; is_auto: its value is "auto" (until
// ds_config_resolve replaces it). When !is_set, v holds DeepSpeed's default.
// is_null: the file says null (DeepSpeed's None; only where the key takes it), v the default.
typedef struct { long long v; unsigned char is_set, is_auto, is_null; } DsInt;
typedef struct { double v; unsigned char is_set, is_auto; } DsNum;
typedef struct { int v; unsigned char is_set, is_auto, is_null; } DsBool;

#define DS_PATH_MAX 512
typedef struct { char v[DS_PATH_MAX]; unsigned char is_set, is_null; } DsStr;  // a string ("" allowed)
#define DS_LIST_MAX 16
#define DS_NAME_MAX 64
typedef struct { char v[DS_LIST_MAX][DS_NAME_MAX]; int n; unsigned char is_set; } DsStrList;  // ["a", "b"]

// "tensorboard" and "csv_monitor" (DeepSpeed's monitor/config.py): files under
// output_path/job_name, written by rank 0 at each optimizer step (trainer/ds_monitor.h).
typedef struct {
    DsBool enabled;           // (false)
    DsStr output_path;        // ("": the working directory, as DeepSpeed's os.path.join("", job_name))
    DsStr job_name;           // ("DeepSpeedJobName")
} DsMonitorBlock;

typedef struct {
    int present;              // the section is in the file
    OffloadDevice device;     // none|cpu|nvme (none)
    char nvme_path[DS_PATH_MAX]; // required for nvme
    DsBool pin_memory;        // page-locked host buffers (false)
    DsNum ratio;              // fraction of optimizer states offloaded, [0, 1] (1); < 1 needs stage 3
    DsInt buffer_count;       // NVMe swap buffers, >= 0 (4)
    DsBool fast_init;         // fast optimizer-state init on NVMe (false)
} DsOffloadOptimizer;

typedef struct {
    int present;              // the section is in the file
    OffloadDevice device;     // none|cpu|nvme (none); stage 3 only
    char nvme_path[DS_PATH_MAX]; // required for nvme
    DsBool pin_memory;        // page-locked host buffers (false)
    DsInt buffer_count;       // NVMe parameter buffers, >= 0 (5)
    DsInt buffer_size;        // elements per NVMe parameter buffer, >= 0 (1e8)
    DsInt max_in_cpu;         // parameter elements kept in host memory with NVMe, >= 0 (1e9)
} DsOffloadParam;

typedef struct {
    char file[DS_PATH_MAX];   // the path given to ds_config_load (for messages)
    int resolved;             // ds_config_resolve ran: no field is "auto" any more

    // ---- batch: train_batch_size = micro * gradient_accumulation_steps * world size ----
    DsInt train_batch_size;               // samples per optimizer step, all ranks; >= 1, auto
    DsInt train_micro_batch_size_per_gpu; // samples per rank per forward/backward; >= 1, auto
    DsInt gradient_accumulation_steps;    // micro-batches per optimizer step; >= 1, auto
    DsNum gradient_clipping;              // global grad-norm clip, >= 0 (0 = off, DeepSpeed's default), auto
    DsInt steps_per_print;                // no-op (train_t5 logs by --logging_steps); >= 1 (10)
    DsBool wall_clock_breakdown;          // no-op (DeepSpeed timer prints) (false)
    DsBool memory_breakdown;              // no-op (DeepSpeed memory prints) (false)
    DsBool zero_allow_untested_optimizer; // no-op (only Adam/AdamW exist here) (false)
    DsBool zero_force_ds_cpu_optimizer;   // no-op (offload always uses our CPU Adam) (true)

    struct {
        DsBool enabled;               // fp16 mixed precision (false), auto
        DsNum loss_scale;             // 0 = dynamic, > 0 = static scale (0)
        DsInt initial_scale_power;    // dynamic scale starts at 2^this, [0, 64] (16)
        DsInt loss_scale_window;      // clean steps before the scale doubles, >= 1 (1000)
        DsInt hysteresis;             // overflows tolerated before halving, >= 1 (2)
        DsBool consecutive_hysteresis;// refill hysteresis on every clean step (false)
        DsNum min_loss_scale;         // scale floor, > 0 (1)
        DsBool auto_cast;             // no-op: casts float inputs; T5's inputs are token ids (false)
    } fp16;
    struct {
        DsBool enabled;               // bf16 mixed precision (false), auto; old section name "bfloat16"
    } bf16;

    struct {
        int present;                  // the file has an "optimizer" section
        DsOptimizerType type;         // Adam|AdamW, any case (DeepSpeed lower-cases it)
        DsNum lr;                     // >= 0 (1e-3, FusedAdam's default), auto
        DsNum betas[2];               // each in [0, 1) ([0.9, 0.999]); "auto" is for the pair
        DsNum eps;                    // > 0 (1e-8), auto
        DsNum weight_decay;           // >= 0, decoupled (AdamW) (0), auto
        DsBool torch_adam;            // no-op: torch's Adam vs DeepSpeed's fused one, same math (false)
        DsBool adam_w_mode;           // decoupled weight decay for "Adam" (true); false is not supported
    } optimizer;

    struct {
        int present;                  // the file has a "scheduler" section
        DsSchedulerType type;         // WarmupLR|WarmupDecayLR|WarmupCosineLR (case as DeepSpeed: exact)
        DsNum warmup_min_lr;          // WarmupLR/WarmupDecayLR: lr at step 0, >= 0 (0), auto (HF: 0)
        DsNum warmup_max_lr;          // WarmupLR/WarmupDecayLR: lr after warmup, >= 0, auto
                                      //   (WarmupLR: the optimizer's lr; WarmupDecayLR: 0.001)
        DsInt warmup_num_steps;       // >= 0 (1000), auto (HF: --warmup_steps / --warmup_ratio)
        DsWarmupType warmup_type;     // log|linear (log)
        DsInt total_num_steps;        // WarmupDecayLR/WarmupCosineLR (required): >= 1, auto
        DsNum warmup_min_ratio;       // WarmupCosineLR: start ratio, [0, 1] (0)
        DsNum cos_min_ratio;          // WarmupCosineLR: end ratio, [0, 1] (0.0001)
    } scheduler;

    struct {
        DsBool use_node_local_storage;         // each host writes its ranks' shards locally (false)
    } checkpoint;

    // ---- the blocks around training (docs/TRAINER.md "DeepSpeed blocks") ----
    struct {                                   // present: gradient checkpointing on (as --gradient_checkpointing)
        int present;
        DsBool partition_activations;          // no-op: no model parallelism to split activations over (false)
        DsBool cpu_checkpointing;              // no-op: the checkpointed block inputs stay on the device (false)
        DsBool contiguous_memory_optimization; // no-op: activations are planned in one arena already (false)
        DsInt number_checkpoints;              // no-op: every block's input is a checkpoint (null)
        DsBool synchronize_checkpoint_boundary;// no-op (false)
        DsBool profile;                        // no-op (false)
    } activation_checkpointing;
    struct {                                   // the NVMe offload's I/O (zero/nvme.h), with device nvme
        int present;
        DsInt block_size;                      // bytes per read/write request, a multiple of 4096 (1048576)
        DsInt queue_depth;                     // requests in flight per I/O thread (8)
        DsInt intra_op_parallelism;            // I/O threads per transfer (1); docs' old name thread_count
        DsBool single_submit;                  // one request per submit call (false)
        DsBool overlap_events;                 // submit the next requests while earlier ones complete (true)
        DsBool use_gds;                        // GPUDirect Storage: only false (false)
    } aio;
    DsMonitorBlock tensorboard;                // event file of Train/Samples/lr (+ loss_scale with fp16)
    DsMonitorBlock csv_monitor;                // one .csv per tag
    struct {
        DsBool enabled;                        // GPU: the op profile of one step (false)
        DsNum recompute_fwd_factor;            // no-op: ops are timed, not FLOP-counted (0)
        DsInt profile_step;                    // the step that runs after this many steps (1)
        DsInt module_depth;                    // no-op: ops, not modules (-1)
        DsInt top_modules;                     // how many top ops are listed (1)
        DsBool detailed;                       // no-op (true)
        DsStr output_file;                     // the profile goes here (null: stdout)
    } flops_profiler;
    struct {
        int present;
        DsBool enabled;                        // record every collective; table at the end (false)
        DsBool verbose;                        // a line per collective as it runs (false)
        DsBool prof_all;                       // every collective, else only prof_ops (true)
        DsStrList prof_ops;                    // collective names recorded when prof_all is false ([])
        DsBool debug;                          // no-op: no caller names (false)
    } comms_logger;
    struct {                                   // enabled true refused: nothing leaves the machine
        DsBool enabled;
        DsStr group, team, project;            // no-op
    } wandb;
    struct {                                   // enabled true refused, as wandb
        DsBool enabled, online;
        DsInt samples_log_interval;
        DsStr project, workspace, api_key, experiment_name, experiment_key, mode;  // no-op (api_key never printed)
    } comet;

    struct {
        ZeroStage stage;                       // 0..3 (0)
        DsBool overlap_comm;                   // overlap reduction with backward (stage 3: true, else false)
        DsBool contiguous_gradients;           // copy gradients into one buffer as produced (true)
        DsBool allgather_partitions;           // allgather vs broadcasts after the step (true)
        DsBool reduce_scatter;                 // reduce-scatter vs allreduce for gradients (true)
        DsBool round_robin_gradients;          // stage 1/2 offload: interleave gradient copies (false)
        DsInt reduce_bucket_size;              // elements per reduction, >= 0 (5e8), auto (HF: d_model^2)
        DsInt allgather_bucket_size;           // elements per allgather, >= 0 (5e8)
        DsOffloadOptimizer offload_optimizer;  // stages 1-3
        DsOffloadParam offload_param;          // stage 3 only
        DsInt stage3_prefetch_bucket_size;     // >= 0 (5e7), auto (HF: 0.9 * d_model^2)
        DsInt stage3_param_persistence_threshold; // >= 0 (1e5), auto (HF: 10 * d_model)
        DsInt stage3_max_live_parameters;      // >= 0 (1e9)
        DsInt stage3_max_reuse_distance;       // >= 0 (1e9)
        DsBool stage3_gather_16bit_weights_on_model_save; // (false), auto (accelerate: false);
                                               //   alias stage3_gather_fp16_weights_on_model_save
        DsInt sub_group_size;                  // optimizer-step tile, elements, >= 0 (1e9)
        DsBool cpu_offload;                    // 2021 spelling of offload_optimizer.device cpu (notice)
        DsBool cpu_offload_param;              // 2021 spelling of offload_param.device cpu (notice)
        DsBool ignore_unused_parameters;       // no-op: every T5 parameter gets a gradient (true)
        DsBool use_multi_rank_bucket_allreduce;// no-op: a collective choice, same result (true)
        DsBool memory_efficient_linear;        // no-op: our linear layers are our own (true)
        DsBool override_module_apply;          // no-op: no torch module to patch (true)
    } zero;
} DsConfig;

// Parse and check `path`; exits with a one-line error on anything wrong. Prints a NOTICE
// line on stderr for each 2021 spelling it translates (cpu_offload, cpu_offload_param).
void ds_config_load(DsConfig *c, const char *path);
// The same for a config given as text (--deepspeed JSON or base64: deepspeed/ds_source.h);
// `label` names it in every message.
void ds_config_load_text(DsConfig *c, const char *label, const char *text);

// Flags HF's "auto" values come from, and which of them the user set explicitly.
typedef enum {
    DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE = 1u << 0,
    DS_FLAG_GRADIENT_ACCUMULATION_STEPS = 1u << 1,
    DS_FLAG_LEARNING_RATE = 1u << 2,
    DS_FLAG_ADAM_BETA1 = 1u << 3,
    DS_FLAG_ADAM_BETA2 = 1u << 4,
    DS_FLAG_ADAM_EPSILON = 1u << 5,
    DS_FLAG_WEIGHT_DECAY = 1u << 6,
    DS_FLAG_MAX_GRAD_NORM = 1u << 7,
    DS_FLAG_WARMUP_STEPS = 1u << 8,   // --warmup_steps or --warmup_ratio
    DS_FLAG_TOTAL_STEPS = 1u << 9,    // --max_steps or --num_train_epochs
    DS_FLAG_FP16 = 1u << 10,
    DS_FLAG_BF16 = 1u << 11,
    DS_FLAGS_ALL = (1u << 12) - 1,    // every flag counts as set: HF's own strictness
} DsFlag;

typedef struct {
    int per_device_train_batch_size, gradient_accumulation_steps;
    int world_size;                   // data-parallel ranks
    double learning_rate, adam_beta1, adam_beta2, adam_epsilon, weight_decay, max_grad_norm;
    int warmup_steps;                 // resolved (HF get_warmup_steps: steps, or ceil(ratio * total))
    int total_steps;                  // optimizer steps of the run (HF num_training_steps); <= 0: unknown
    int steps_pending;                // 1: a check before the data is read: the step count (and a warmup
                                      // taken as a ratio of it) is not known yet; "auto" and checks that
                                      // need them are left to the resolve that follows
    int warmup_from_ratio;            // warmup_steps derives from a ratio of total_steps
    int fp16, bf16;
    int d_model;                      // hidden size for the bucket "auto" values; <= 0: unknown
    unsigned flag_set_mask;           // DsFlag bits the user set on the command line (ds_flag_set_mask_from_argv)
} DsResolveArgs;

// HF TrainingArguments defaults, world size 1, nothing explicit, steps and d_model unknown.
DsResolveArgs ds_resolve_args_default(void);
// DsFlag bits for the flags present in argv[start..) (--name value, --name=value, aliases).
unsigned ds_flag_set_mask_from_argv(int argc, char **argv, int start);

// Fill "auto" from the flags as HF does, derive missing batch values (DeepSpeed's rule),
// check train_batch_size == micro * gradient_accumulation_steps * world size, and fail
// when a value in the file contradicts a flag the user set (error naming both). A value
// the file sets wins over a flag left at its default. `path` names the file in messages
// (NULL: the path given to ds_config_load).
void ds_config_resolve(DsConfig *c, const DsResolveArgs *a, const char *path);

// One NOTICE line for each key the file sets that this build accepts but does not act on
// (DeepSpeed print periods, and settings whose effect is built in here, such as
// contiguous_gradients): call with the config as loaded, before ds_config_resolve.
void ds_config_print_unacted(const DsConfig *c, const char *path, FILE *f);
// One NOTICE for each key of `section` ("tensorboard", "aio" ...) the file sets that is not
// F_NOOP (those are ds_config_print_unacted's), saying it changes nothing because `why`:
// the blocks whose effect depends on the run (the device, an NVMe offload, "enabled" false).
void ds_config_print_section_unacted(const DsConfig *c, const char *section, const char *path, const char *why,
                                     FILE *f);
// A few lines summarizing the (resolved or not) config.
void ds_config_print(const DsConfig *c, FILE *f);
// Every key: path, default, bounds, "auto" or not, one-line doc; and the rejected ones.
void ds_config_print_reference(FILE *f);
