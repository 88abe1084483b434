// zero/ds_config.c: DeepSpeed JSON config: key table, loader, "auto" resolution (see
// ds_config.h). Defaults and bounds follow DeepSpeed's runtime/config.py, runtime/constants.py,
// runtime/zero/config.py, runtime/zero/offload_config.py and runtime/lr_schedules.py; the
// "auto" rules follow transformers' integrations/deepspeed.py (HfTrainerDeepSpeedConfig).
#include "ds_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/check.h"
#include "../common/flags.h"

// enum fields are written through int pointers by the table
_Static_assert(sizeof(ZeroStage) == sizeof(int), "ZeroStage must be int-sized");
_Static_assert(sizeof(OffloadDevice) == sizeof(int), "OffloadDevice must be int-sized");
_Static_assert(sizeof(DsOptimizerType) == sizeof(int), "DsOptimizerType must be int-sized");
_Static_assert(sizeof(DsSchedulerType) == sizeof(int), "DsSchedulerType must be int-sized");
_Static_assert(sizeof(DsWarmupType) == sizeof(int), "DsWarmupType must be int-sized");

// ---------------------------------------------------------------------------------------
// The key table: one row per key DeepSpeed reads.

typedef enum {
    K_SECTION,     // a JSON object; `off` (if any) is an int set to 1 when present
    K_INT,         // DsInt: integral number in [lo, hi]
    K_NUM,         // DsNum: number in [lo, hi] (lo exclusive with F_LO_OPEN)
    K_BOOL,        // DsBool
    K_STAGE,       // ZeroStage: integer in [lo, hi]
    K_ENUM,        // a string from `names`, into an int-sized enum
    K_PATH,        // string (or null) into char[DS_PATH_MAX]
    K_BETAS,       // [beta1, beta2] or "auto"
    K_ONLY_BOOL,   // accepted only at DeepSpeed's default `dflt` (what train_t5 does); no storage
    K_ONLY_NUM,
    K_UNSUPPORTED, // any value: error; doc says what to use instead
} Kind;

enum {
    F_AUTO = 1,     // "auto" allowed (HF Trainer fills it in)
    F_LO_OPEN = 2,  // lo bound exclusive
    F_NOOP = 4,     // accepted, changes nothing here (documented why)
    F_NOCASE = 8,   // K_ENUM compares case-insensitively (DeepSpeed lower-cases optimizer names)
};

typedef struct {
    const char *name;
    int value;
} EnumName;

typedef struct {
    const char *path;            // dotted key path
    Kind kind;
    size_t off;                  // into DsConfig
    double lo, hi, dflt;
    unsigned fl;
    const EnumName *names;       // K_ENUM, NULL-terminated
    const char *const *others;   // K_ENUM: values DeepSpeed knows and train_t5 does not support
    unsigned sched;              // scheduler.params: bit per DsSchedulerType taking the key
    const char *dflt_text;       // the default in words, where `dflt` is not it
    const char *doc;
} KeySpec;

#define NO_OFF ((size_t)-1)
#define O(f) offsetof(DsConfig, f)
#define BIG 9007199254740992.0   // 2^53: integers a double holds exactly
#define INF HUGE_VAL
#define SB(t) (1u << (t))
#define S_WARM (SB(DS_SCHEDULER_WARMUP_LR) | SB(DS_SCHEDULER_WARMUP_DECAY_LR))
#define S_TOTAL (SB(DS_SCHEDULER_WARMUP_DECAY_LR) | SB(DS_SCHEDULER_WARMUP_COSINE_LR))
#define S_ALL (S_WARM | SB(DS_SCHEDULER_WARMUP_COSINE_LR))

#define SEC(p, o, d) {.path = p, .kind = K_SECTION, .off = o, .doc = d}
#define INT(p, f, l, h, df, fl_, d) {.path = p, .kind = K_INT, .off = O(f), .lo = l, .hi = h, .dflt = df, .fl = fl_, .doc = d}
#define IMAX 2147483647.0  // keys the run keeps in an int (batch sizes, step counts)
#define INT_DERIVED(p, f, d) {.path = p, .kind = K_INT, .off = O(f), .lo = 1, .hi = IMAX, .fl = F_AUTO, .dflt_text = "derived", .doc = d}
#define NUM(p, f, l, h, df, fl_, d) {.path = p, .kind = K_NUM, .off = O(f), .lo = l, .hi = h, .dflt = df, .fl = fl_, .doc = d}
#define BOOL(p, f, df, fl_, d) {.path = p, .kind = K_BOOL, .off = O(f), .dflt = df, .fl = fl_, .doc = d}
#define ONLY_BOOL(p, df, d) {.path = p, .kind = K_ONLY_BOOL, .off = NO_OFF, .dflt = df, .doc = d}
#define ONLY_NUM(p, df, d) {.path = p, .kind = K_ONLY_NUM, .off = NO_OFF, .dflt = df, .doc = d}
#define UNSUP(p, d) {.path = p, .kind = K_UNSUPPORTED, .off = NO_OFF, .doc = d}

static const EnumName k_optimizer_names[] = {{"Adam", DS_OPTIMIZER_ADAM}, {"AdamW", DS_OPTIMIZER_ADAMW}, {NULL, 0}};
// DeepSpeed's DEEPSPEED_OPTIMIZERS (runtime/config.py) and common torch.optim names
static const char *const k_optimizer_others[] = {"Adagrad", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb",
                                                 "MuAdam", "MuAdamW", "MuSGD", "Lion", "SGD", "Adafactor",
                                                 "RMSprop", NULL};
static const EnumName k_scheduler_names[] = {{"WarmupLR", DS_SCHEDULER_WARMUP_LR},
                                             {"WarmupDecayLR", DS_SCHEDULER_WARMUP_DECAY_LR},
                                             {"WarmupCosineLR", DS_SCHEDULER_WARMUP_COSINE_LR},
                                             {NULL, 0}};
static const char *const k_scheduler_others[] = {"LRRangeTest", "OneCycle", NULL};
static const EnumName k_warmup_names[] = {{"log", DS_WARMUP_LOG}, {"linear", DS_WARMUP_LINEAR}, {NULL, 0}};
static const EnumName k_device_names[] = {{"none", OFFLOAD_NONE}, {"cpu", OFFLOAD_CPU}, {"nvme", OFFLOAD_NVME}, {NULL, 0}};
static const char *const k_device_others[] = {"hpu", NULL};

static const KeySpec k_keys[] = {
    // ---- top level ----
    INT_DERIVED("train_batch_size", train_batch_size,
        "samples per optimizer step over all ranks (= micro x accumulation x world size)"),
    INT_DERIVED("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu,
        "samples per rank per forward/backward (HF: --per_device_train_batch_size)"),
    INT_DERIVED("gradient_accumulation_steps", gradient_accumulation_steps,
        "micro-batches per optimizer step (HF: --gradient_accumulation_steps)"),
    NUM("gradient_clipping", gradient_clipping, 0, INF, 0, F_AUTO,
        "clip the global gradient norm to this; 0 = off (HF: --max_grad_norm)"),
    INT("steps_per_print", steps_per_print, 1, BIG, 10, F_NOOP,
        "no-op: DeepSpeed's progress print period; train_t5 logs every --logging_steps"),
    BOOL("wall_clock_breakdown", wall_clock_breakdown, 0, F_NOOP, "no-op: DeepSpeed's timer prints"),
    BOOL("memory_breakdown", memory_breakdown, 0, F_NOOP, "no-op: DeepSpeed's memory prints"),
    BOOL("zero_allow_untested_optimizer", zero_allow_untested_optimizer, 0, F_NOOP,
         "no-op: only Adam/AdamW exist here, both tested"),
    BOOL("zero_force_ds_cpu_optimizer", zero_force_ds_cpu_optimizer, 1, F_NOOP,
         "no-op: optimizer offload always runs train_t5's CPU Adam"),
    ONLY_BOOL("prescale_gradients", 0, "scale gradients before the allreduce"),
    ONLY_NUM("gradient_predivide_factor", 1, "split gradient averaging before/after the allreduce"),
    ONLY_BOOL("sparse_gradients", 0, "CSR sparse embedding gradients"),
    ONLY_BOOL("disable_allgather", 0, "broadcasts instead of allgather"),
    ONLY_BOOL("dump_state", 0, "DeepSpeed state dump"),
    ONLY_BOOL("dataloader_drop_last", 0, "DeepSpeed's own dataloader; train_t5 has its own sampler"),
    UNSUP("activation_checkpointing", "use --gradient_checkpointing"),
    UNSUP("amp", "apex AMP; use fp16 or bf16"),
    UNSUP("aio", "NVMe async I/O tuning"),
    UNSUP("autotuning", "DeepSpeed autotuner"),
    UNSUP("checkpoint", "DeepSpeed checkpoint options; train_t5 writes its own checkpoints"),
    UNSUP("comet", "Comet monitor"),
    UNSUP("comms_logger", "communication logger"),
    UNSUP("communication_data_type", "gradient communication dtype"),
    UNSUP("compression_training", "compression/quantization-aware training"),
    UNSUP("csv_monitor", "CSV monitor; train_t5 logs to trainer_state.json"),
    UNSUP("curriculum_learning", "curriculum learning"),
    UNSUP("data_efficiency", "data efficiency library"),
    UNSUP("data_types", "gradient accumulation dtype"),
    UNSUP("eigenvalue", "eigenvalue computation"),
    UNSUP("elasticity", "elastic training"),
    UNSUP("flops_profiler", "FLOPs profiler"),
    UNSUP("hybrid_engine", "RLHF hybrid engine"),
    UNSUP("nebula", "Nebula checkpointing"),
    UNSUP("pipeline", "pipeline parallelism"),
    UNSUP("progressive_layer_drop", "progressive layer drop"),
    UNSUP("quantize_training", "MoQ quantized training"),
    UNSUP("seq_parallel_communication_data_type", "sequence parallelism"),
    UNSUP("sparse_attention", "sparse attention"),
    UNSUP("tensor_parallel", "tensor parallelism"),
    UNSUP("tensorboard", "TensorBoard monitor; train_t5 logs to trainer_state.json"),
    UNSUP("torch_autocast", "torch autocast; use fp16 or bf16"),
    UNSUP("wandb", "Weights & Biases monitor"),
    UNSUP("weight_quantization", "weight quantization"),

    // ---- fp16 ----
    SEC("fp16", NO_OFF, "fp16 mixed precision and its dynamic loss scaler"),
    BOOL("fp16.enabled", fp16.enabled, 0, F_AUTO, "fp16 mixed precision (HF: --fp16)"),
    NUM("fp16.loss_scale", fp16.loss_scale, 0, INF, 0, 0, "0: dynamic loss scaling; > 0: this fixed scale"),
    INT("fp16.initial_scale_power", fp16.initial_scale_power, 0, 64, 16, 0, "the dynamic scale starts at 2^this"),
    INT("fp16.loss_scale_window", fp16.loss_scale_window, 1, BIG, 1000, 0,
        "clean steps before the dynamic scale doubles"),
    INT("fp16.hysteresis", fp16.hysteresis, 1, IMAX, 2, 0, "overflows tolerated before the scale halves"),
    BOOL("fp16.consecutive_hysteresis", fp16.consecutive_hysteresis, 0, 0,
         "refill the hysteresis on every clean step"),
    NUM("fp16.min_loss_scale", fp16.min_loss_scale, 0, INF, 1, F_LO_OPEN, "the dynamic scale never goes below this"),
    BOOL("fp16.auto_cast", fp16.auto_cast, 0, F_NOOP,
         "no-op: casts floating inputs to fp16; T5's inputs are integer token ids"),
    ONLY_BOOL("fp16.fp16_master_weights_and_grads", 0, "fp16 master weights"),

    // ---- bf16 (old name: bfloat16) ----
    SEC("bf16", NO_OFF, "bf16 mixed precision (old section name: bfloat16)"),
    BOOL("bf16.enabled", bf16.enabled, 0, F_AUTO, "bf16 mixed precision (HF: --bf16)"),

    // ---- optimizer ----
    SEC("optimizer", O(optimizer.present), "the optimizer; absent: HF Trainer's AdamW from the flags"),
    {.path = "optimizer.type", .kind = K_ENUM, .off = O(optimizer.type), .fl = F_NOCASE, .names = k_optimizer_names,
     .others = k_optimizer_others, .doc = "Adam or AdamW, any case; both decoupled weight decay (DeepSpeed)"},
    ONLY_BOOL("optimizer.legacy_fusion", 0, "legacy fused optimizer"),
    SEC("optimizer.params", NO_OFF, "the optimizer's arguments"),
    NUM("optimizer.params.lr", optimizer.lr, 0, INF, 1e-3, F_AUTO, "learning rate (HF: --learning_rate)"),
    {.path = "optimizer.params.betas", .kind = K_BETAS, .off = O(optimizer.betas), .fl = F_AUTO,
     .dflt_text = "[0.9,0.999]",
     .doc = "[beta1, beta2], each in [0, 1) (default [0.9, 0.999]; HF: --adam_beta1, --adam_beta2)"},
    NUM("optimizer.params.eps", optimizer.eps, 0, INF, 1e-8, F_AUTO | F_LO_OPEN, "Adam epsilon (HF: --adam_epsilon)"),
    NUM("optimizer.params.weight_decay", optimizer.weight_decay, 0, INF, 0, F_AUTO,
        "decoupled weight decay (HF: --weight_decay)"),
    BOOL("optimizer.params.torch_adam", optimizer.torch_adam, 0, F_NOOP,
         "no-op: torch's Adam instead of DeepSpeed's fused one; same math"),
    BOOL("optimizer.params.adam_w_mode", optimizer.adam_w_mode, 1, 0,
         "decoupled weight decay for Adam; only true (DeepSpeed's default) is supported"),
    ONLY_BOOL("optimizer.params.amsgrad", 0, "AMSGrad"),
    ONLY_BOOL("optimizer.params.bias_correction", 1, "Adam without bias correction"),
    UNSUP("optimizer.params.max_grad_norm", "legacy clipping; use the top-level gradient_clipping"),

    // ---- scheduler ----
    SEC("scheduler", O(scheduler.present), "the lr schedule; absent: HF's --lr_scheduler_type"),
    {.path = "scheduler.type", .kind = K_ENUM, .off = O(scheduler.type), .names = k_scheduler_names,
     .others = k_scheduler_others, .doc = "WarmupLR, WarmupDecayLR or WarmupCosineLR (exact case, as DeepSpeed)"},
    SEC("scheduler.params", NO_OFF, "the schedule's arguments (which ones depends on the type)"),
    {.path = "scheduler.params.warmup_min_lr", .kind = K_NUM, .off = O(scheduler.warmup_min_lr), .lo = 0, .hi = INF,
     .dflt = 0, .fl = F_AUTO, .sched = S_WARM, .doc = "lr at step 0 (HF auto: 0)"},
    {.path = "scheduler.params.warmup_max_lr", .kind = K_NUM, .off = O(scheduler.warmup_max_lr), .lo = 0, .hi = INF,
     .dflt = 0, .fl = F_AUTO, .sched = S_WARM, .dflt_text = "see doc",
     .doc = "lr after warmup (default: WarmupLR the optimizer's lr, WarmupDecayLR 0.001; HF: --learning_rate)"},
    {.path = "scheduler.params.warmup_num_steps", .kind = K_INT, .off = O(scheduler.warmup_num_steps), .lo = 0,
     .hi = IMAX, .dflt = 1000, .fl = F_AUTO, .sched = S_ALL, .doc = "warmup length in optimizer steps (HF: --warmup_steps)"},
    {.path = "scheduler.params.warmup_type", .kind = K_ENUM, .off = O(scheduler.warmup_type), .names = k_warmup_names,
     .sched = S_ALL, .doc = "warmup curve: log (DeepSpeed's default) or linear"},
    {.path = "scheduler.params.total_num_steps", .kind = K_INT, .off = O(scheduler.total_num_steps), .lo = 1, .hi = IMAX,
     .fl = F_AUTO, .sched = S_TOTAL, .dflt_text = "required", .doc = "required: steps of the whole run (HF: the computed number of steps)"},
    {.path = "scheduler.params.warmup_min_ratio", .kind = K_NUM, .off = O(scheduler.warmup_min_ratio), .lo = 0, .hi = 1,
     .dflt = 0, .sched = SB(DS_SCHEDULER_WARMUP_COSINE_LR), .doc = "lr ratio at step 0"},
    {.path = "scheduler.params.cos_min_ratio", .kind = K_NUM, .off = O(scheduler.cos_min_ratio), .lo = 0, .hi = 1,
     .dflt = 1e-4, .sched = SB(DS_SCHEDULER_WARMUP_COSINE_LR), .doc = "lr ratio at the end of the cosine"},

    // ---- zero_optimization ----
    SEC("zero_optimization", NO_OFF, "ZeRO: what is partitioned across ranks, buckets, offload"),
    {.path = "zero_optimization.stage", .kind = K_STAGE, .off = O(zero.stage), .lo = 0, .hi = 3, .dflt = 0,
     .doc = "0 disabled, 1 optimizer states, 2 + gradients, 3 + weights"},
    {.path = "zero_optimization.overlap_comm", .kind = K_BOOL, .off = O(zero.overlap_comm), .dflt_text = "stage==3",
     .doc = "overlap gradient reduction with backward (default: true at stage 3, else false)"},
    BOOL("zero_optimization.contiguous_gradients", zero.contiguous_gradients, 1, F_NOOP,
         "no-op: gradients always live in one flat buffer here (DeepSpeed: copy them into one as produced)"),
    BOOL("zero_optimization.allgather_partitions", zero.allgather_partitions, 1, F_NOOP,
         "no-op: updated partitions are always all-gathered (DeepSpeed false: one broadcast per rank, same bytes)"),
    BOOL("zero_optimization.reduce_scatter", zero.reduce_scatter, 1, F_NOOP,
         "no-op: stages 2-3 always reduce-scatter (DeepSpeed false: all-reduce, same sums)"),
    BOOL("zero_optimization.round_robin_gradients", zero.round_robin_gradients, 0, F_NOOP,
         "no-op: with offload each rank copies only its own partition (DeepSpeed: interleave the copies)"),
    INT("zero_optimization.reduce_bucket_size", zero.reduce_bucket_size, 0, BIG, 5e8, F_AUTO,
        "elements reduced at a time (HF auto: d_model^2)"),
    INT("zero_optimization.allgather_bucket_size", zero.allgather_bucket_size, 0, BIG, 5e8, 0,
        "elements allgathered at a time"),
    INT("zero_optimization.stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size, 0, BIG, 5e7, F_AUTO,
        "stage 3: parameter elements fetched ahead of use (HF auto: 0.9 x d_model^2)"),
    INT("zero_optimization.stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold, 0, BIG, 1e5,
        F_AUTO, "stage 3: parameters smaller than this stay unpartitioned (HF auto: 10 x d_model)"),
    INT("zero_optimization.stage3_max_live_parameters", zero.stage3_max_live_parameters, 0, BIG, 1e9, 0,
        "stage 3: gathered parameter elements kept before releasing"),
    INT("zero_optimization.stage3_max_reuse_distance", zero.stage3_max_reuse_distance, 0, BIG, 1e9, 0,
        "stage 3: keep a parameter gathered if reused within this many elements"),
    BOOL("zero_optimization.stage3_gather_16bit_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save,
         0, F_AUTO | F_NOOP, "no-op: the saved model is always gathered whole, in fp32, on rank 0 "
         "(DeepSpeed: gather 16-bit weights at stage 3 save)"),
    BOOL("zero_optimization.stage3_gather_fp16_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save,
         0, F_AUTO | F_NOOP, "old name of stage3_gather_16bit_weights_on_model_save (no-op here)"),
    INT("zero_optimization.sub_group_size", zero.sub_group_size, 0, BIG, 1e9, F_NOOP,
        "no-op: the optimizer steps over the rank's partition in chunks of its own (DeepSpeed: step tile)"),
    BOOL("zero_optimization.cpu_offload", zero.cpu_offload, 0, 0,
         "2021 spelling: true = offload_optimizer {device: cpu} (a NOTICE says so)"),
    BOOL("zero_optimization.cpu_offload_param", zero.cpu_offload_param, 0, 0,
         "2021 spelling: true = offload_param {device: cpu} (a NOTICE says so)"),
    BOOL("zero_optimization.ignore_unused_parameters", zero.ignore_unused_parameters, 1, F_NOOP,
         "no-op: every T5 parameter gets a gradient"),
    BOOL("zero_optimization.use_multi_rank_bucket_allreduce", zero.use_multi_rank_bucket_allreduce, 1, F_NOOP,
         "no-op: a choice of collective, same result"),
    BOOL("zero_optimization.memory_efficient_linear", zero.memory_efficient_linear, 1, F_NOOP,
         "no-op: train_t5's linear layers are its own"),
    BOOL("zero_optimization.override_module_apply", zero.override_module_apply, 1, F_NOOP,
         "no-op: there is no torch module to patch"),
    ONLY_BOOL("zero_optimization.load_from_fp32_weights", 1, "initializing master weights from 16-bit copies"),
    ONLY_BOOL("zero_optimization.elastic_checkpoint", 0, "elastic checkpoints"),
    ONLY_BOOL("zero_optimization.legacy_stage1", 0, "the old stage 1"),
    ONLY_NUM("zero_optimization.zero_hpz_partition_size", 1, "ZeRO++ hierarchical partitioning"),
    ONLY_BOOL("zero_optimization.zero_quantized_weights", 0, "ZeRO++ quantized weights"),
    ONLY_BOOL("zero_optimization.zero_quantized_nontrainable_weights", 0, "ZeRO++ quantized frozen weights"),
    ONLY_BOOL("zero_optimization.zero_quantized_gradients", 0, "ZeRO++ quantized gradients"),
    ONLY_NUM("zero_optimization.mics_shard_size", -1, "MiCS sharding"),
    ONLY_BOOL("zero_optimization.mics_hierarchical_params_gather", 0, "MiCS hierarchical gather"),
    ONLY_BOOL("zero_optimization.stage3_use_all_reduce_for_fetch_params", 0, "allreduce parameter fetch"),
    ONLY_NUM("zero_optimization.stage3_module_granularity_threshold", 0, "fine-grained module fetch"),
    ONLY_BOOL("zero_optimization.pipeline_loading_checkpoint", 0, "pipeline checkpoint loading"),
    UNSUP("zero_optimization.zeropp_loco_param", "ZeRO++ LoCo"),
    UNSUP("zero_optimization.stage3_model_persistence_threshold", "a cap on persistent parameters"),
    UNSUP("zero_optimization.cpu_offload_use_pin_memory",
          "set pin_memory in offload_optimizer / offload_param instead"),

    SEC("zero_optimization.offload_optimizer", O(zero.offload_optimizer.present),
        "optimizer states and step on the host (stages 1-3)"),
    {.path = "zero_optimization.offload_optimizer.device", .kind = K_ENUM, .off = O(zero.offload_optimizer.device),
     .names = k_device_names, .others = k_device_others, .doc = "none, cpu or nvme"},
    {.path = "zero_optimization.offload_optimizer.nvme_path", .kind = K_PATH,
     .off = O(zero.offload_optimizer.nvme_path), .doc = "directory for NVMe swap files (device nvme)"},
    BOOL("zero_optimization.offload_optimizer.pin_memory", zero.offload_optimizer.pin_memory, 0, 0,
         "page-locked host buffers"),
    NUM("zero_optimization.offload_optimizer.ratio", zero.offload_optimizer.ratio, 0, 1, 1, 0,
        "fraction of the optimizer offloaded (< 1: stage 3 only)"),
    INT("zero_optimization.offload_optimizer.buffer_count", zero.offload_optimizer.buffer_count, 0, BIG, 4, 0,
        "NVMe swap buffers"),
    BOOL("zero_optimization.offload_optimizer.fast_init", zero.offload_optimizer.fast_init, 0, 0,
         "fast optimizer-state initialization on NVMe"),
    ONLY_BOOL("zero_optimization.offload_optimizer.pipeline_read", 0, "overlapped NVMe reads"),
    ONLY_BOOL("zero_optimization.offload_optimizer.pipeline_write", 0, "overlapped NVMe writes"),
    ONLY_BOOL("zero_optimization.offload_optimizer.pipeline", 0, "overlapped NVMe I/O"),

    SEC("zero_optimization.offload_param", O(zero.offload_param.present), "parameters on the host (stage 3)"),
    {.path = "zero_optimization.offload_param.device", .kind = K_ENUM, .off = O(zero.offload_param.device),
     .names = k_device_names, .others = k_device_others, .doc = "none, cpu or nvme"},
    {.path = "zero_optimization.offload_param.nvme_path", .kind = K_PATH, .off = O(zero.offload_param.nvme_path),
     .doc = "directory for NVMe swap files (device nvme)"},
    BOOL("zero_optimization.offload_param.pin_memory", zero.offload_param.pin_memory, 0, 0, "page-locked host buffers"),
    INT("zero_optimization.offload_param.buffer_count", zero.offload_param.buffer_count, 0, BIG, 5, 0,
        "NVMe parameter buffers"),
    INT("zero_optimization.offload_param.buffer_size", zero.offload_param.buffer_size, 0, BIG, 1e8, 0,
        "elements per NVMe parameter buffer"),
    INT("zero_optimization.offload_param.max_in_cpu", zero.offload_param.max_in_cpu, 0, BIG, 1e9, 0,
        "parameter elements kept in host memory with NVMe"),
};
#define N_KEYS ((int)(sizeof k_keys / sizeof k_keys[0]))

// Old names: (parent, old key, new key). Giving both is an error.
static const struct {
    const char *parent, *old_key, *new_key;
} k_aliases[] = {
    {"", "bfloat16", "bf16"},
    {"zero_optimization", "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
};

static const KeySpec *spec_find(const char *path) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(k_keys[i].path, path)) return &k_keys[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------
// Loading

typedef struct {
    DsConfig *c;
    int notice_cpu_offload, notice_cpu_offload_param;
} Loader;

static int is_auto_value(const cJSON *it) { return cJSON_IsString(it) && !strcmp(it->valuestring, "auto"); }

// The value as it is in the file, quoted for a message.
static void json_repr(const cJSON *it, char *out, size_t cap) {
    if (cJSON_IsNumber(it) && !isfinite(it->valuedouble)) {  // cJSON would print null
        snprintf(out, cap, "a number beyond a double's range (read as %g)", it->valuedouble);
        return;
    }
    char *s = cJSON_PrintUnformatted(it);
    if (!s) {
        snprintf(out, cap, "(unprintable)");
        return;
    }
    if (strlen(s) > 60) snprintf(out, cap, "%.57s...", s);
    else snprintf(out, cap, "%s", s);
    cJSON_free(s);
}

static void fmt_bound(double x, char *out, size_t cap) {
    if (x >= BIG) snprintf(out, cap, "inf");
    else snprintf(out, cap, "%.10g", x);
}

// What a key takes, for messages and the reference.
static void describe(const KeySpec *s, char *out, size_t cap) {
    char lo[32], hi[32];
    fmt_bound(s->lo, lo, sizeof lo);
    fmt_bound(s->hi, hi, sizeof hi);
    size_t k = 0;
    switch (s->kind) {
    case K_SECTION: k = (size_t)snprintf(out, cap, "an object {...}"); break;
    case K_INT:
        if (s->hi >= BIG && s->lo == 0) k = (size_t)snprintf(out, cap, "a non-negative integer");
        else if (s->hi >= BIG && s->lo == 1) k = (size_t)snprintf(out, cap, "a positive integer");
        else k = (size_t)snprintf(out, cap, "an integer in [%s, %s]", lo, hi);
        break;
    case K_NUM:
        if (s->hi >= BIG) k = (size_t)snprintf(out, cap, "a number %s %s", (s->fl & F_LO_OPEN) ? ">" : ">=", lo);
        else k = (size_t)snprintf(out, cap, "a number in %c%s, %s]", (s->fl & F_LO_OPEN) ? '(' : '[', lo, hi);
        break;
    case K_STAGE: k = (size_t)snprintf(out, cap, "0, 1, 2 or 3 (the ZeRO stage)"); break;
    case K_BOOL:
    case K_ONLY_BOOL: k = (size_t)snprintf(out, cap, "true or false"); break;
    case K_ONLY_NUM: k = (size_t)snprintf(out, cap, "a number"); break;
    case K_PATH: k = (size_t)snprintf(out, cap, "a path string"); break;
    case K_BETAS: k = (size_t)snprintf(out, cap, "[beta1, beta2] with each in [0, 1)"); break;
    case K_ENUM:
        for (const EnumName *e = s->names; e->name && k < cap; e++)
            k += (size_t)snprintf(out + k, cap - k, "%s\"%s\"", e == s->names ? "" : (e[1].name ? ", " : " or "),
                                  e->name);
        break;
    case K_UNSUPPORTED: k = (size_t)snprintf(out, cap, "nothing (not supported)"); break;
    }
    if ((s->fl & F_AUTO) && k < cap) snprintf(out + k, cap - k, " or \"auto\"");
}

__attribute__((noreturn)) static void fail_expected(const Loader *L, const KeySpec *s, const char *path,
                                                    const cJSON *it) {
    char want[256], found[96];
    describe(s, want, sizeof want);
    json_repr(it, found, sizeof found);
    t5_fail("%s: key \"%s\": expected %s, found %s%s", L->c->file, path, want, found,
            is_auto_value(it) ? " (\"auto\" is only for the values HF Trainer fills in from its flags)" : "");
}

static int is_integral(double x) { return x == floor(x) && fabs(x) <= BIG; }

// A number within the key's bounds; finite always (cJSON reads 1e400 as inf), and within
// fp32 for the values the optimizer computes with.
static int in_bounds(const KeySpec *s, double x) {
    if (!isfinite(x) || fabs(x) > FLT_MAX) return 0;
    if ((s->fl & F_LO_OPEN) ? !(x > s->lo) : !(x >= s->lo)) return 0;
    return s->hi >= BIG || x <= s->hi;
}

static const char *enum_name(const EnumName *names, int v) {
    for (const EnumName *e = names; e->name; e++)
        if (e->value == v) return e->name;
    return "?";
}

static void walk(Loader *L, const cJSON *obj, const char *prefix);

__attribute__((noreturn)) static void fail_unknown(const Loader *L, const char *prefix, const char *key,
                                                   const char *path) {
    const char *names[N_KEYS];
    int n = 0;
    size_t plen = strlen(prefix);
    const DsConfig *c = L->c;
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        if (s->kind == K_UNSUPPORTED) continue;  // suggest only what works
        const char *leaf;
        if (plen) {
            if (strncmp(s->path, prefix, plen) != 0 || s->path[plen] != '.') continue;
            leaf = s->path + plen + 1;
        } else {
            leaf = s->path;
        }
        if (strchr(leaf, '.')) continue;
        if (s->sched && c->scheduler.type != DS_SCHEDULER_NONE && !(s->sched & SB(c->scheduler.type))) continue;
        names[n++] = leaf;
    }
    const char *best = flags_closest(key, names, n);
    if (best)
        t5_fail("%s: unknown key \"%s\" (did you mean \"%s%s%s\"?)", c->file, path, prefix, plen ? "." : "", best);
    t5_fail("%s: unknown key \"%s\": not a DeepSpeed setting train_t5 knows; remove it", c->file, path);
}

// The parameters a scheduler type takes, for messages.
static void sched_params(unsigned type, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < N_KEYS && k < cap; i++)
        if (k_keys[i].sched & SB(type))
            k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "", k_keys[i].path + strlen("scheduler.params."));
}

static void apply(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    DsConfig *c = L->c;
    char *base = (char *)c;
    if (s->sched && c->scheduler.type != DS_SCHEDULER_NONE && !(s->sched & SB(c->scheduler.type))) {
        char takes[256];
        sched_params(c->scheduler.type, takes, sizeof takes);
        t5_fail("%s: key \"%s\" is not a parameter of %s (it takes %s)", c->file, path,
                enum_name(k_scheduler_names, c->scheduler.type), takes);
    }
    if (is_auto_value(it) && !(s->fl & F_AUTO) && s->kind != K_UNSUPPORTED) fail_expected(L, s, path, it);
    switch (s->kind) {
    case K_SECTION:
        if (!cJSON_IsObject(it)) fail_expected(L, s, path, it);
        if (s->off != NO_OFF) *(int *)(base + s->off) = 1;
        walk(L, it, path);
        return;
    case K_INT: {
        DsInt *d = (DsInt *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsNumber(it) || !is_integral(it->valuedouble) || !in_bounds(s, it->valuedouble))
            fail_expected(L, s, path, it);
        d->v = (long long)it->valuedouble;
        d->is_auto = 0;
        return;
    }
    case K_NUM: {
        DsNum *d = (DsNum *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsNumber(it) || !in_bounds(s, it->valuedouble)) fail_expected(L, s, path, it);
        d->v = it->valuedouble;
        d->is_auto = 0;
        return;
    }
    case K_BOOL: {
        DsBool *d = (DsBool *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsBool(it)) fail_expected(L, s, path, it);
        d->v = cJSON_IsTrue(it);
        d->is_auto = 0;
        return;
    }
    case K_STAGE:
        if (!cJSON_IsNumber(it) || !is_integral(it->valuedouble) || !in_bounds(s, it->valuedouble))
            fail_expected(L, s, path, it);
        *(int *)(base + s->off) = (int)it->valuedouble;
        return;
    case K_ENUM: {
        if (!cJSON_IsString(it)) fail_expected(L, s, path, it);
        const char *v = it->valuestring;
        for (const EnumName *e = s->names; e->name; e++)
            if ((s->fl & F_NOCASE) ? !strcasecmp(v, e->name) : !strcmp(v, e->name)) {
                *(int *)(base + s->off) = e->value;
                return;
            }
        for (const char *const *o = s->others; o && *o; o++)
            if ((s->fl & F_NOCASE) ? !strcasecmp(v, *o) : !strcmp(v, *o)) {
                char want[128];
                describe(s, want, sizeof want);
                t5_fail("%s: key \"%s\": \"%s\" is a DeepSpeed choice train_t5 does not support; use %s", c->file,
                        path, v, want);
            }
        fail_expected(L, s, path, it);
    }
    case K_PATH: {
        char *d = base + s->off;
        if (cJSON_IsNull(it)) return;  // accelerate writes null when the device is not nvme
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= DS_PATH_MAX)
            fail_expected(L, s, path, it);
        snprintf(d, DS_PATH_MAX, "%s", it->valuestring);
        return;
    }
    case K_BETAS: {
        DsNum *b = (DsNum *)(base + s->off);
        b[0].is_set = b[1].is_set = 1;
        if (is_auto_value(it)) {
            b[0].is_auto = b[1].is_auto = 1;
            return;
        }
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) fail_expected(L, s, path, it);
        for (int i = 0; i < 2; i++) {
            const cJSON *x = cJSON_GetArrayItem(it, i);
            if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < 1)) fail_expected(L, s, path, it);
            b[i].v = x->valuedouble;
            b[i].is_auto = 0;
        }
        return;
    }
    case K_ONLY_BOOL:
    case K_ONLY_NUM: {
        int ok_type = s->kind == K_ONLY_BOOL ? cJSON_IsBool(it) : cJSON_IsNumber(it);
        if (!ok_type) fail_expected(L, s, path, it);
        double x = s->kind == K_ONLY_BOOL ? (double)cJSON_IsTrue(it) : it->valuedouble;
        if (x == s->dflt) return;  // DeepSpeed's default: what train_t5 does
        char found[96], want[32];
        json_repr(it, found, sizeof found);
        if (s->kind == K_ONLY_BOOL) snprintf(want, sizeof want, "%s", s->dflt != 0 ? "true" : "false");
        else snprintf(want, sizeof want, "%.10g", s->dflt);
        t5_fail("%s: key \"%s\": %s asks for a DeepSpeed feature train_t5 does not support (%s); remove it or set "
                "it to %s",
                c->file, path, found, s->doc, want);
    }
    case K_UNSUPPORTED:
        t5_fail("%s: key \"%s\" is a DeepSpeed feature train_t5 does not support (%s); remove it", c->file, path,
                s->doc);
    }
}

static void walk(Loader *L, const cJSON *obj, const char *prefix) {
    const DsConfig *c = L->c;
    // DeepSpeed loads with dict_raise_error_on_duplicate_keys
    for (const cJSON *a = obj->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (!strcmp(a->string, b->string))
                t5_fail("%s: key \"%s%s%s\" appears twice; keep one", c->file, prefix, *prefix ? "." : "", a->string);
    // scalars first, so "type" is known before "params"
    for (int pass = 0; pass < 2; pass++)
        for (const cJSON *it = obj->child; it; it = it->next) {
            if (cJSON_IsObject(it) != (pass == 1)) continue;
            const char *key = it->string;
            for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
                if (!strcmp(prefix, k_aliases[i].parent) && !strcmp(key, k_aliases[i].old_key) &&
                    cJSON_GetObjectItemCaseSensitive(obj, k_aliases[i].new_key))
                    t5_fail("%s: keys \"%s\" and \"%s\" are the same setting (old and new name); keep \"%s\"", c->file,
                            key, k_aliases[i].new_key, k_aliases[i].new_key);
            if (!strcmp(key, "bfloat16") && !*prefix) key = "bf16";
            char path[256];
            snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
            const KeySpec *s = spec_find(path);
            if (!s) fail_unknown(L, prefix, key, path);
            apply(L, s, it, path);
        }
}

static void set_defaults(DsConfig *c) {
    char *base = (char *)c;
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        switch (s->kind) {
        case K_INT: ((DsInt *)(base + s->off))->v = (long long)s->dflt; break;
        case K_NUM: ((DsNum *)(base + s->off))->v = s->dflt; break;
        case K_BOOL: ((DsBool *)(base + s->off))->v = (int)s->dflt; break;
        case K_STAGE: *(int *)(base + s->off) = (int)s->dflt; break;
        default: break;
        }
    }
    c->optimizer.betas[0].v = 0.9;
    c->optimizer.betas[1].v = 0.999;
}

static const char *stage_name(ZeroStage s) {
    static const char *const names[] = {"disabled", "optimizer states", "gradients", "weights"};
    return (unsigned)s < 4 ? names[s] : "?";
}

// Checks across keys, DeepSpeed's defaults that depend on other keys, and the 2021 spellings.
static void finalize(Loader *L) {
    DsConfig *c = L->c;
    const char *f = c->file;
    if (c->optimizer.present && c->optimizer.type == DS_OPTIMIZER_NONE)
        t5_fail("%s: key \"optimizer.type\" is missing: expected \"Adam\" or \"AdamW\"", f);
    if (c->optimizer.adam_w_mode.is_set && !c->optimizer.adam_w_mode.v)
        t5_fail("%s: key \"optimizer.params.adam_w_mode\": false (Adam with L2 weight decay%s) is a DeepSpeed feature "
                "train_t5 does not support; remove it or set it to true",
                f, c->optimizer.type == DS_OPTIMIZER_ADAMW ? ", which DeepSpeed ignores for AdamW" : "");
    if (c->scheduler.present && c->scheduler.type == DS_SCHEDULER_NONE)
        t5_fail("%s: key \"scheduler.type\" is missing: expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                f);
    if ((c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR || c->scheduler.type == DS_SCHEDULER_WARMUP_COSINE_LR) &&
        !c->scheduler.total_num_steps.is_set)
        t5_fail("%s: key \"scheduler.params.total_num_steps\" is missing: %s needs it (a number of optimizer steps, "
                "or \"auto\")",
                f, enum_name(k_scheduler_names, c->scheduler.type));
    if (c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR && !c->scheduler.warmup_max_lr.is_set)
        c->scheduler.warmup_max_lr.v = 0.001;  // WarmupDecayLR's signature default
    if (c->fp16.enabled.v && !c->fp16.enabled.is_auto && c->bf16.enabled.v && !c->bf16.enabled.is_auto)
        t5_fail("%s: keys \"fp16.enabled\" and \"bf16.enabled\" are both true: enable one of them", f);

    // ---- ZeRO ----
    if (!c->zero.overlap_comm.is_set) c->zero.overlap_comm.v = c->zero.stage == ZERO_STAGE_WEIGHTS;
    DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    DsOffloadParam *op = &c->zero.offload_param;
    if (c->zero.cpu_offload.is_set && oo->present)
        t5_fail("%s: keys \"zero_optimization.cpu_offload\" (2021 spelling) and \"zero_optimization.offload_optimizer\" "
                "set the same thing; keep offload_optimizer",
                f);
    if (c->zero.cpu_offload_param.is_set && op->present)
        t5_fail("%s: keys \"zero_optimization.cpu_offload_param\" (2021 spelling) and "
                "\"zero_optimization.offload_param\" set the same thing; keep offload_param",
                f);
    const char *oo_key = "zero_optimization.offload_optimizer", *op_key = "zero_optimization.offload_param";
    if (c->zero.cpu_offload.v) {
        oo->device = OFFLOAD_CPU;
        oo_key = "zero_optimization.cpu_offload";
    }
    if (c->zero.cpu_offload_param.v) {
        op->device = OFFLOAD_CPU;
        op_key = "zero_optimization.cpu_offload_param";
    }
    if (oo->device != OFFLOAD_NONE && c->zero.stage == ZERO_STAGE_DISABLED)
        t5_fail("%s: key \"%s\": optimizer offload needs ZeRO stage 1, 2 or 3, but \"zero_optimization.stage\" is 0", f,
                oo_key);
    if (op->device != OFFLOAD_NONE && c->zero.stage != ZERO_STAGE_WEIGHTS)
        t5_fail("%s: key \"%s\": parameter offload needs ZeRO stage 3, but \"zero_optimization.stage\" is %d (%s)", f,
                op_key, (int)c->zero.stage, stage_name(c->zero.stage));
    if (oo->ratio.v < 1 && c->zero.stage != ZERO_STAGE_WEIGHTS)
        t5_fail("%s: key \"zero_optimization.offload_optimizer.ratio\": %g (partial offload) needs ZeRO stage 3, but "
                "\"zero_optimization.stage\" is %d",
                f, oo->ratio.v, (int)c->zero.stage);
    if (oo->device == OFFLOAD_NVME && !oo->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_optimizer.nvme_path\" is missing: device \"nvme\" needs a "
                "directory on the NVMe drive",
                f);
    if (op->device == OFFLOAD_NVME && !op->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_param.nvme_path\" is missing: device \"nvme\" needs a directory "
                "on the NVMe drive",
                f);
    if (oo->device != OFFLOAD_NVME && oo->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_optimizer.nvme_path\" is set but the device is \"%s\": remove it "
                "or use device \"nvme\"",
                f, enum_name(k_device_names, oo->device));
    if (op->device != OFFLOAD_NVME && op->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_param.nvme_path\" is set but the device is \"%s\": remove it or "
                "use device \"nvme\"",
                f, enum_name(k_device_names, op->device));

    // the NOTICE lines are printed by ds_config_load once everything else has passed
    L->notice_cpu_offload = c->zero.cpu_offload.v;
    L->notice_cpu_offload_param = c->zero.cpu_offload_param.v;
}

// "line L, column C" of byte `at` in text.
static void text_position(const char *text, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

void ds_config_load(DsConfig *c, const char *path) {
    memset(c, 0, sizeof *c);
    if (strlen(path) >= DS_PATH_MAX) t5_fail("DeepSpeed config path too long (%zu bytes): %.80s...", strlen(path), path);
    snprintf(c->file, sizeof c->file, "%s", path);
    set_defaults(c);

    size_t len = 0;
    char *text = read_text_file(path, &len);
    if (!text)
        t5_fail("%s: cannot open the DeepSpeed config (%s); check the --deepspeed path", path, strerror(errno));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        if (!at || at < text || at > text + len) at = text + len;
        int line, col;
        text_position(text, at, &line, &col);
        // cJSON points at or just past the problem: show a little on both sides, whitespace collapsed
        char near[40];
        size_t k = 0;
        const char *p = at - text > 14 ? at - 14 : text;
        for (; p < text + len && p < at + 10 && k < sizeof near - 1; p++) {
            char ch = *p == '"' ? '\'' : (*p >= ' ' && *p != 0x7f) ? *p : ' ';
            if (ch == ' ' && (k == 0 || near[k - 1] == ' ')) continue;
            near[k++] = ch;
        }
        while (k && near[k - 1] == ' ') k--;
        near[k] = '\0';
        t5_fail("%s: invalid JSON at line %d, column %d (near \"%s\"): fix the syntax", path, line, col,
                k ? near : "the start");
    }
    if (!cJSON_IsObject(root)) t5_fail("%s: expected a JSON object { ... } at the top level", path);

    Loader L = {.c = c};
    walk(&L, root, "");
    finalize(&L);
    if (L.notice_cpu_offload)
        fprintf(stderr, "NOTICE: %s: \"zero_optimization.cpu_offload\": true is DeepSpeed's 2021 spelling; read as "
                        "\"offload_optimizer\": {\"device\": \"cpu\"}\n", path);
    if (L.notice_cpu_offload_param)
        fprintf(stderr, "NOTICE: %s: \"zero_optimization.cpu_offload_param\": true is DeepSpeed's 2021 spelling; "
                        "read as \"offload_param\": {\"device\": \"cpu\"}\n", path);
    cJSON_Delete(root);
    free(text);
}

// ---------------------------------------------------------------------------------------
// Resolution ("auto" from the flags, the batch rule, contradictions)

DsResolveArgs ds_resolve_args_default(void) {
    DsResolveArgs a;
    memset(&a, 0, sizeof a);
    a.per_device_train_batch_size = 8;
    a.gradient_accumulation_steps = 1;
    a.world_size = 1;
    a.learning_rate = 5e-5;
    a.adam_beta1 = 0.9;
    a.adam_beta2 = 0.999;
    a.adam_epsilon = 1e-8;
    a.weight_decay = 0.0;
    a.max_grad_norm = 1.0;
    return a;
}

unsigned ds_flag_set_mask_from_argv(int argc, char **argv, int start) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"per_device_train_batch_size", DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE},
        {"gradient_accumulation_steps", DS_FLAG_GRADIENT_ACCUMULATION_STEPS},
        {"learning_rate", DS_FLAG_LEARNING_RATE},
        {"adam_beta1", DS_FLAG_ADAM_BETA1},
        {"adam_beta2", DS_FLAG_ADAM_BETA2},
        {"adam_epsilon", DS_FLAG_ADAM_EPSILON},
        {"adam_eps", DS_FLAG_ADAM_EPSILON},
        {"weight_decay", DS_FLAG_WEIGHT_DECAY},
        {"max_grad_norm", DS_FLAG_MAX_GRAD_NORM},
        {"warmup_steps", DS_FLAG_WARMUP_STEPS},
        {"warmup_ratio", DS_FLAG_WARMUP_STEPS},
        {"max_steps", DS_FLAG_TOTAL_STEPS},
        {"num_train_epochs", DS_FLAG_TOTAL_STEPS},
        {"fp16", DS_FLAG_FP16},
        {"bf16", DS_FLAG_BF16},
    };
    unsigned bits = 0;
    for (int i = start; i < argc; i++) {
        const char *s = argv[i];
        if (strncmp(s, "--", 2) != 0) continue;
        s += 2;
        size_t n = strcspn(s, "=");
        for (size_t j = 0; j < sizeof names / sizeof names[0]; j++)
            if (strlen(names[j].name) == n && !strncmp(s, names[j].name, n)) bits |= names[j].bit;
    }
    return bits;
}

static int same_value(double a, double b) {
    double m = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= 1e-12 * m;
}

static const char *absent_note(int is_set) { return is_set ? "" : " (DeepSpeed's default: the key is absent)"; }

// HF's fill_match: a value in the file that differs from a flag the user set.
static void must_match(const DsConfig *c, const char *key, double v, const char *how, const char *flag, double fv) {
    if (same_value(v, fv)) return;
    t5_fail("%s: \"%s\" is %.10g%s but --%s is %.10g; set the key to \"auto\" or make them equal", c->file, key, v, how,
            flag, fv);
}

static void must_match_bool(const DsConfig *c, const char *key, int v, int is_set, const char *flag, int fv) {
    if (!v == !fv) return;
    t5_fail("%s: \"%s\" is %s%s but --%s is %s; set the key to \"auto\" or make them equal", c->file, key,
            v ? "true" : "false", absent_note(is_set), flag, fv ? "true" : "false");
}

static void fill_num(DsNum *d, double v) {
    d->v = v;
    d->is_auto = 0;
}

static void fill_int(DsInt *d, long long v) {
    d->v = v;
    d->is_auto = 0;
}

// micro x accumulation x world size: more than an int holds (or a long long) is an error.
static long long batch_product(const DsConfig *c, long long m, long long g, long long w) {
    long long mg, t;
    if (__builtin_mul_overflow(m, g, &mg) || __builtin_mul_overflow(mg, w, &t) || t > (long long)IMAX)
        t5_fail("%s: micro-batch %lld x gradient accumulation %lld x world size %lld is more than %.0f samples per "
                "optimizer step; HINT: lower \"train_micro_batch_size_per_gpu\" / \"gradient_accumulation_steps\" "
                "(or the flags their \"auto\" takes)", c->file, m, g, w, IMAX);
    return t;
}

static void resolve_batch(DsConfig *c, const DsResolveArgs *a) {
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    long long P = a->per_device_train_batch_size, G = a->gradient_accumulation_steps, W = a->world_size;
    DsInt *t = &c->train_batch_size, *m = &c->train_micro_batch_size_per_gpu, *g = &c->gradient_accumulation_steps;
    const char *how_t = t->is_auto ? " (\"auto\": world size x --per_device_train_batch_size x "
                                     "--gradient_accumulation_steps)"
                                   : "";
    const char *how_m = m->is_auto ? " (\"auto\": --per_device_train_batch_size)" : "";
    const char *how_g = g->is_auto ? " (\"auto\": --gradient_accumulation_steps)" : "";
    // HF trainer_config_process: "auto" takes the flags (train_batch_size from the flags too)
    if (m->is_auto) fill_int(m, P);
    if (g->is_auto) fill_int(g, G);
    if (t->is_auto) fill_int(t, batch_product(c, P, G, W));
    // DeepSpeed _set_batch_related_parameters: any two give the third. A key absent when the
    // others cannot give it takes the flag (HF 4.2 filled these from the flags itself).
    int ht = t->is_set, hm = m->is_set, hg = g->is_set;
    if (ht && hm && !hg) {
        g->v = t->v / (m->v * W);
        how_g = " (derived)";
    } else if (ht && hg && !hm) {
        m->v = t->v / (g->v * W);
        how_m = " (derived)";
    } else if (hm && hg && !ht) {
        t->v = batch_product(c, m->v, g->v, W);
    } else if (ht && !hm && !hg) {
        g->v = G;
        m->v = t->v / (g->v * W);
        how_m = " (derived)";
    } else if (hm && !ht && !hg) {
        g->v = G;
        t->v = batch_product(c, m->v, g->v, W);
    } else if (!ht && !hm) {
        m->v = P;
        if (!hg) g->v = G;
        t->v = batch_product(c, m->v, g->v, W);
    }
    // DeepSpeed _batch_assertion
    if (m->v < 1 || g->v < 1 || t->v != batch_product(c, m->v, g->v, W))
        t5_fail("%s: batch sizes do not multiply out: \"train_batch_size\" %lld%s != \"train_micro_batch_size_per_gpu\" "
                "%lld%s x \"gradient_accumulation_steps\" %lld%s x world size %lld (= %.0f); fix them or set them to "
                "\"auto\"",
                f, t->v, how_t, m->v, how_m, g->v, how_g, W, (double)m->v * (double)g->v * (double)W);
    if ((ex & DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE) && m->v != P)
        t5_fail("%s: \"train_micro_batch_size_per_gpu\" is %lld%s but --per_device_train_batch_size is %lld; set the "
                "key to \"auto\" or make them equal",
                f, m->v, how_m, P);
    if ((ex & DS_FLAG_GRADIENT_ACCUMULATION_STEPS) && g->v != G)
        t5_fail("%s: \"gradient_accumulation_steps\" is %lld%s but --gradient_accumulation_steps is %lld; set the key "
                "to \"auto\" or make them equal",
                f, g->v, how_g, G);
}

void ds_config_resolve(DsConfig *c, const DsResolveArgs *a, const char *path) {
    if (path && path != c->file) snprintf(c->file, sizeof c->file, "%s", path);
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    if (a->world_size < 1) t5_fail("%s: world size %d: must be >= 1", f, a->world_size);
    if (a->per_device_train_batch_size < 1)
        t5_fail("--per_device_train_batch_size %d: must be >= 1", a->per_device_train_batch_size);
    if (a->gradient_accumulation_steps < 1)
        t5_fail("--gradient_accumulation_steps %d: must be >= 1", a->gradient_accumulation_steps);

    resolve_batch(c, a);

    // gradient clipping (DeepSpeed's default 0 = off when the key is absent)
    if (c->gradient_clipping.is_auto) fill_num(&c->gradient_clipping, a->max_grad_norm);
    else if (ex & DS_FLAG_MAX_GRAD_NORM)
        must_match(c, "gradient_clipping", c->gradient_clipping.v, absent_note(c->gradient_clipping.is_set),
                   "max_grad_norm", a->max_grad_norm);

    // optimizer
    if (!c->optimizer.present) {
        // HF Trainer creates its own AdamW from the flags
        c->optimizer.type = DS_OPTIMIZER_ADAMW;
        c->optimizer.lr.v = a->learning_rate;
        c->optimizer.betas[0].v = a->adam_beta1;
        c->optimizer.betas[1].v = a->adam_beta2;
        c->optimizer.eps.v = a->adam_epsilon;
        c->optimizer.weight_decay.v = a->weight_decay;
    } else {
        DsNum *lr = &c->optimizer.lr, *b = c->optimizer.betas, *eps = &c->optimizer.eps, *wd = &c->optimizer.weight_decay;
        if (lr->is_auto) fill_num(lr, a->learning_rate);
        else if (ex & DS_FLAG_LEARNING_RATE)
            must_match(c, "optimizer.params.lr", lr->v, absent_note(lr->is_set), "learning_rate", a->learning_rate);
        if (b[0].is_auto) {
            fill_num(&b[0], a->adam_beta1);
            fill_num(&b[1], a->adam_beta2);
        } else {
            if (ex & DS_FLAG_ADAM_BETA1)
                must_match(c, "optimizer.params.betas[0]", b[0].v, absent_note(b[0].is_set), "adam_beta1", a->adam_beta1);
            if (ex & DS_FLAG_ADAM_BETA2)
                must_match(c, "optimizer.params.betas[1]", b[1].v, absent_note(b[1].is_set), "adam_beta2", a->adam_beta2);
        }
        if (eps->is_auto) fill_num(eps, a->adam_epsilon);
        else if (ex & DS_FLAG_ADAM_EPSILON)
            must_match(c, "optimizer.params.eps", eps->v, absent_note(eps->is_set), "adam_epsilon", a->adam_epsilon);
        if (wd->is_auto) fill_num(wd, a->weight_decay);
        else if (ex & DS_FLAG_WEIGHT_DECAY)
            must_match(c, "optimizer.params.weight_decay", wd->v, absent_note(wd->is_set), "weight_decay",
                       a->weight_decay);
    }

    // scheduler (trainer_config_process / trainer_config_finalize)
    if (c->scheduler.present) {
        DsSchedulerType st = c->scheduler.type;
        if (st != DS_SCHEDULER_WARMUP_COSINE_LR) {
            DsNum *mn = &c->scheduler.warmup_min_lr, *mx = &c->scheduler.warmup_max_lr;
            if (mn->is_auto) fill_num(mn, 0.0);  // HF fill_only: not a trainer flag
            const char *how = absent_note(mx->is_set);
            if (mx->is_auto) {
                fill_num(mx, a->learning_rate);
            } else {
                if (!mx->is_set && st == DS_SCHEDULER_WARMUP_LR) {
                    mx->v = c->optimizer.lr.v;  // WarmupLR's default: the optimizer's lr
                    how = " (the key is absent: the optimizer's lr)";
                }
                if (ex & DS_FLAG_LEARNING_RATE)
                    must_match(c, "scheduler.params.warmup_max_lr", mx->v, how, "learning_rate", a->learning_rate);
            }
        }
        DsInt *wn = &c->scheduler.warmup_num_steps;
        if (wn->is_auto) fill_int(wn, a->warmup_steps);
        else if (ex & DS_FLAG_WARMUP_STEPS)
            must_match(c, "scheduler.params.warmup_num_steps", (double)wn->v, absent_note(wn->is_set), "warmup_steps",
                       a->warmup_steps);
        if (st == DS_SCHEDULER_WARMUP_DECAY_LR || st == DS_SCHEDULER_WARMUP_COSINE_LR) {
            DsInt *tn = &c->scheduler.total_num_steps;
            if (tn->is_auto) {
                if (a->total_steps <= 0)
                    t5_fail("%s: key \"scheduler.params.total_num_steps\" is \"auto\" but the run's number of optimizer "
                            "steps is not known; set --max_steps or a number in the file",
                            f);
                fill_int(tn, a->total_steps);
            } else if ((ex & DS_FLAG_TOTAL_STEPS) && a->total_steps > 0 && tn->v != a->total_steps) {
                t5_fail("%s: \"scheduler.params.total_num_steps\" is %lld but the run has %d optimizer steps (from "
                        "--max_steps / --num_train_epochs); set the key to \"auto\" or make them equal",
                        f, tn->v, a->total_steps);
            }
        }
    }

    // precision
    if (c->fp16.enabled.is_auto) c->fp16.enabled = (DsBool){.v = a->fp16 != 0, .is_set = 1};
    else if (ex & DS_FLAG_FP16) must_match_bool(c, "fp16.enabled", c->fp16.enabled.v, c->fp16.enabled.is_set, "fp16", a->fp16);
    if (c->bf16.enabled.is_auto) c->bf16.enabled = (DsBool){.v = a->bf16 != 0, .is_set = 1};
    else if (ex & DS_FLAG_BF16) must_match_bool(c, "bf16.enabled", c->bf16.enabled.v, c->bf16.enabled.is_set, "bf16", a->bf16);
    if (c->fp16.enabled.v && c->bf16.enabled.v)
        t5_fail("%s: \"fp16.enabled\" and \"bf16.enabled\" are both true (after \"auto\" from --fp16/--bf16): enable "
                "one of them",
                f);

    // ZeRO buckets from the hidden size (trainer_config_finalize; HF fills the stage3_* ones only
    // at stage 3, where they matter; below stage 3 they are unused, so filling them is harmless)
    DsInt *rb = &c->zero.reduce_bucket_size, *pf = &c->zero.stage3_prefetch_bucket_size,
          *pt = &c->zero.stage3_param_persistence_threshold;
    if (rb->is_auto || pf->is_auto || pt->is_auto) {
        const char *key = rb->is_auto ? "zero_optimization.reduce_bucket_size"
                          : pf->is_auto ? "zero_optimization.stage3_prefetch_bucket_size"
                                        : "zero_optimization.stage3_param_persistence_threshold";
        if (a->d_model <= 0)
            t5_fail("%s: key \"%s\" is \"auto\" but the model's d_model (hidden size) is not known yet", f, key);
        long long d = a->d_model;
        if (rb->is_auto) fill_int(rb, d * d);
        if (pf->is_auto) fill_int(pf, (long long)(0.9 * (double)(d * d)));
        if (pt->is_auto) fill_int(pt, 10 * d);
    }
    if (c->zero.stage3_gather_16bit_weights_on_model_save.is_auto)
        c->zero.stage3_gather_16bit_weights_on_model_save = (DsBool){.v = 0, .is_set = 1};
    c->resolved = 1;
}

// ---------------------------------------------------------------------------------------
// Printing

static const char *fmt_int(const DsInt *d, char *buf, size_t cap) {
    if (d->is_auto) snprintf(buf, cap, "auto");
    else snprintf(buf, cap, "%lld", d->v);
    return buf;
}

static const char *fmt_num(const DsNum *d, char *buf, size_t cap) {
    if (d->is_auto) snprintf(buf, cap, "auto");
    else snprintf(buf, cap, "%g", d->v);
    return buf;
}

static const char *fmt_bool(const DsBool *d) { return d->is_auto ? "auto" : d->v ? "true" : "false"; }

void ds_config_print(const DsConfig *c, FILE *f) {
    char a[32], b[32], d[32], e[32], g[32];
    fprintf(f, "deepspeed config %s%s\n", c->file, c->resolved ? "" : " (not resolved: \"auto\" values pending)");
    if (c->resolved)
        fprintf(f, "  batch      train_batch_size %lld = micro %lld x accumulation %lld x world size %lld\n",
                c->train_batch_size.v, c->train_micro_batch_size_per_gpu.v, c->gradient_accumulation_steps.v,
                c->train_batch_size.v / (c->train_micro_batch_size_per_gpu.v * c->gradient_accumulation_steps.v));
    else if (c->train_batch_size.is_set)
        fprintf(f, "  batch      train_batch_size %s = micro %s x accumulation %s x world size\n",
                fmt_int(&c->train_batch_size, a, sizeof a), fmt_int(&c->train_micro_batch_size_per_gpu, b, sizeof b),
                fmt_int(&c->gradient_accumulation_steps, d, sizeof d));
    else
        fprintf(f, "  batch      micro %s x accumulation %s x world size (train_batch_size from the flags)\n",
                c->train_micro_batch_size_per_gpu.is_set ? fmt_int(&c->train_micro_batch_size_per_gpu, b, sizeof b)
                                                         : "flags",
                c->gradient_accumulation_steps.is_set ? fmt_int(&c->gradient_accumulation_steps, d, sizeof d) : "flags");
    if (c->fp16.enabled.is_auto || c->bf16.enabled.is_auto)
        fprintf(f, "  precision  fp16 %s, bf16 %s\n", fmt_bool(&c->fp16.enabled), fmt_bool(&c->bf16.enabled));
    else if (c->fp16.enabled.v && c->fp16.loss_scale.v == 0)
        fprintf(f, "  precision  fp16, dynamic loss scale 2^%lld (window %lld, hysteresis %lld, min %g)\n",
                c->fp16.initial_scale_power.v, c->fp16.loss_scale_window.v, c->fp16.hysteresis.v, c->fp16.min_loss_scale.v);
    else if (c->fp16.enabled.v)
        fprintf(f, "  precision  fp16, static loss scale %g\n", c->fp16.loss_scale.v);
    else
        fprintf(f, "  precision  %s\n", c->bf16.enabled.v ? "bf16" : "fp32");
    if (c->optimizer.present || c->resolved)
        fprintf(f, "  optimizer  %s%s lr %s betas (%s, %s) eps %s weight_decay %s\n",
                c->optimizer.present ? enum_name(k_optimizer_names, c->optimizer.type) : "AdamW",
                c->optimizer.present ? "" : " (from the flags)", fmt_num(&c->optimizer.lr, a, sizeof a),
                c->optimizer.betas[0].is_auto ? "auto" : fmt_num(&c->optimizer.betas[0], b, sizeof b),
                c->optimizer.betas[1].is_auto ? "auto" : fmt_num(&c->optimizer.betas[1], d, sizeof d),
                fmt_num(&c->optimizer.eps, e, sizeof e), fmt_num(&c->optimizer.weight_decay, g, sizeof g));
    else
        fprintf(f, "  optimizer  AdamW from the flags\n");
    if (!c->scheduler.present) {
        fprintf(f, "  scheduler  from --lr_scheduler_type\n");
    } else if (c->scheduler.type == DS_SCHEDULER_WARMUP_COSINE_LR) {
        fprintf(f, "  scheduler  WarmupCosineLR (%s warmup) ratio %g -> 1 over %s steps, cosine to %g at %s\n",
                enum_name(k_warmup_names, c->scheduler.warmup_type), c->scheduler.warmup_min_ratio.v,
                fmt_int(&c->scheduler.warmup_num_steps, a, sizeof a), c->scheduler.cos_min_ratio.v,
                fmt_int(&c->scheduler.total_num_steps, b, sizeof b));
    } else {
        int decay = c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR;
        const char *mx = !c->scheduler.warmup_max_lr.is_set && !c->resolved && !decay
                             ? "(optimizer lr)"
                             : fmt_num(&c->scheduler.warmup_max_lr, b, sizeof b);
        fprintf(f, "  scheduler  %s (%s warmup) %s -> %s over %s steps%s%s\n",
                enum_name(k_scheduler_names, c->scheduler.type), enum_name(k_warmup_names, c->scheduler.warmup_type),
                fmt_num(&c->scheduler.warmup_min_lr, a, sizeof a), mx,
                fmt_int(&c->scheduler.warmup_num_steps, d, sizeof d), decay ? ", linear decay to 0 at " : "",
                decay ? fmt_int(&c->scheduler.total_num_steps, e, sizeof e) : "");
    }
    fprintf(f, "  zero       stage %d (%s): reduce bucket %s, allgather bucket %s%s%s%s\n", (int)c->zero.stage,
            stage_name(c->zero.stage), fmt_int(&c->zero.reduce_bucket_size, a, sizeof a),
            fmt_int(&c->zero.allgather_bucket_size, b, sizeof b), c->zero.overlap_comm.v ? ", overlap_comm" : "",
            c->zero.reduce_scatter.v ? ", reduce_scatter" : "", c->zero.contiguous_gradients.v ? ", contiguous_gradients" : "");
    if (c->zero.stage == ZERO_STAGE_WEIGHTS)
        fprintf(f, "  stage 3    prefetch %s, persistence threshold %s, max live %lld, reuse distance %lld\n",
                fmt_int(&c->zero.stage3_prefetch_bucket_size, a, sizeof a),
                fmt_int(&c->zero.stage3_param_persistence_threshold, b, sizeof b), c->zero.stage3_max_live_parameters.v,
                c->zero.stage3_max_reuse_distance.v);
    const DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    const DsOffloadParam *op = &c->zero.offload_param;
    if (oo->device != OFFLOAD_NONE || op->device != OFFLOAD_NONE)
        fprintf(f, "  offload    optimizer %s%s%s, parameters %s%s%s\n", enum_name(k_device_names, oo->device),
                oo->pin_memory.v && oo->device ? " (pinned)" : "", oo->device == OFFLOAD_NVME ? oo->nvme_path : "",
                enum_name(k_device_names, op->device), op->pin_memory.v && op->device ? " (pinned)" : "",
                op->device == OFFLOAD_NVME ? op->nvme_path : "");
    if (c->gradient_clipping.is_auto) fprintf(f, "  clipping   auto\n");
    else if (c->gradient_clipping.v > 0) fprintf(f, "  clipping   global norm %g\n", c->gradient_clipping.v);
    else fprintf(f, "  clipping   off\n");
}

void ds_config_print_reference(FILE *f) {
    fprintf(f, "%-62s %-10s %s\n", "key", "default", "takes / what it does");
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        char want[256], dflt[32] = "";
        describe(s, want, sizeof want);
        if (s->dflt_text) snprintf(dflt, sizeof dflt, "%s", s->dflt_text);
        else switch (s->kind) {
        case K_INT:
        case K_NUM:
        case K_STAGE:
        case K_ONLY_NUM: snprintf(dflt, sizeof dflt, "%.10g", s->dflt); break;
        case K_BOOL:
        case K_ONLY_BOOL: snprintf(dflt, sizeof dflt, "%s", s->dflt != 0 ? "true" : "false"); break;
        case K_ENUM: snprintf(dflt, sizeof dflt, "%s", s->names == k_device_names ? "none" : s->names == k_warmup_names ? "log" : "-"); break;
        default: snprintf(dflt, sizeof dflt, "-"); break;
        }
        if (s->kind == K_UNSUPPORTED)
            fprintf(f, "%-62s %-10s NOT SUPPORTED (error): %s\n", s->path, "-", s->doc);
        else if (s->kind == K_ONLY_BOOL || s->kind == K_ONLY_NUM)
            fprintf(f, "%-62s %-10s only %s accepted (else error): %s\n", s->path, dflt, dflt, s->doc);
        else
            fprintf(f, "%-62s %-10s %s; %s\n", s->path, dflt, want, s->doc);
    }
}

// Keys in the file that this build accepts and does not act on (F_NOOP), one NOTICE each.
void ds_config_print_unacted(const DsConfig *c, const char *path, FILE *f) {
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &k_keys[i];
        if (!(k->fl & F_NOOP) || k->off == NO_OFF) continue;
        if (i > 0 && k_keys[i - 1].off == k->off) continue;  // an old name of the key before: said once
        const char *p = (const char *)c + k->off;
        int set = 0, is_auto = 0;
        char val[64] = "";
        if (k->kind == K_BOOL) {
            const DsBool *b = (const DsBool *)p;
            set = b->is_set, is_auto = b->is_auto;
            snprintf(val, sizeof val, "%s", b->v ? "true" : "false");
        } else if (k->kind == K_INT) {
            const DsInt *n = (const DsInt *)p;
            set = n->is_set, is_auto = n->is_auto;
            snprintf(val, sizeof val, "%lld", n->v);
        } else if (k->kind == K_NUM) {
            const DsNum *n = (const DsNum *)p;
            set = n->is_set, is_auto = n->is_auto;
            snprintf(val, sizeof val, "%g", n->v);
        }
        if (!set && !is_auto) continue;
        const char *why = !strncmp(k->doc, "no-op: ", 7) ? k->doc + 7 : k->doc;
        fprintf(f, "NOTICE: %s: \"%s\" = %s is accepted and changes nothing here: %s\n", path, k->path,
                is_auto ? "\"auto\"" : val, why);
    }
}
