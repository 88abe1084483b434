// deepspeed/ds_keys.c: the key table (see ds_keys.h). Defaults and bounds follow DeepSpeed's
// runtime/config.py, runtime/constants.py, runtime/zero/config.py,
// runtime/zero/offload_config.py and runtime/lr_schedules.py.
#include "ds_keys.h"

#include <string.h>

#include "../optim/adamw.h"

#define O(f) offsetof(DsConfig, f)
#define SEC(p, o, d) {.path = p, .kind = K_SECTION, .off = o, .doc = d}
#define INT(p, f, l, h, df, fl_, d) {.path = p, .kind = K_INT, .off = O(f), .lo = l, .hi = h, .dflt = df, .fl = fl_, .doc = d}
#define INT_DERIVED(p, f, d) {.path = p, .kind = K_INT, .off = O(f), .lo = 1, .hi = IMAX, .fl = F_AUTO, .dflt_text = "derived", .doc = d}
#define NUM(p, f, l, h, df, fl_, d) {.path = p, .kind = K_NUM, .off = O(f), .lo = l, .hi = h, .dflt = df, .fl = fl_, .doc = d}
#define BOOL(p, f, df, fl_, d) {.path = p, .kind = K_BOOL, .off = O(f), .dflt = df, .fl = fl_, .doc = d}
#define ONLY_BOOL(p, df, d) {.path = p, .kind = K_ONLY_BOOL, .off = NO_OFF, .dflt = df, .doc = d}
#define ONLY_NUM(p, df, d) {.path = p, .kind = K_ONLY_NUM, .off = NO_OFF, .dflt = df, .doc = d}
#define STR(p, f, fl_, dt, d) {.path = p, .kind = K_STR, .off = O(f), .fl = fl_, .dflt_text = dt, .doc = d}
#define UNSUP(p, d) {.path = p, .kind = K_UNSUPPORTED, .off = NO_OFF, .doc = d}

const EnumName k_optimizer_names[] = {{"Adam", DS_OPTIMIZER_ADAM}, {"AdamW", DS_OPTIMIZER_ADAMW}, {NULL, 0}};
// DeepSpeed's DEEPSPEED_OPTIMIZERS (runtime/config.py) and common torch.optim names
const char *const k_optimizer_others[] = {"Adagrad", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb",
                                                 "MuAdam", "MuAdamW", "MuSGD", "Lion", "SGD", "Adafactor",
                                                 "RMSprop", NULL};
const EnumName k_scheduler_names[] = {{"WarmupLR", DS_SCHEDULER_WARMUP_LR},
                                             {"WarmupDecayLR", DS_SCHEDULER_WARMUP_DECAY_LR},
                                             {"WarmupCosineLR", DS_SCHEDULER_WARMUP_COSINE_LR},
                                             {NULL, 0}};
const char *const k_scheduler_others[] = {"LRRangeTest", "OneCycle", NULL};
const EnumName k_warmup_names[] = {{"log", DS_WARMUP_LOG}, {"linear", DS_WARMUP_LINEAR}, {NULL, 0}};
const EnumName k_device_names[] = {{"none", OFFLOAD_NONE}, {"cpu", OFFLOAD_CPU}, {"nvme", OFFLOAD_NVME}, {NULL, 0}};
const char *const k_device_others[] = {"hpu", NULL};

const KeySpec k_keys[] = {
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
    BOOL("wall_clock_breakdown", wall_clock_breakdown, 0, F_NOOP,
         "no-op: DeepSpeed's timer prints (and, with a monitor, its Train/Samples/elapsed_time_ms_* tags: not written)"),
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
    UNSUP("amp", "apex AMP; use fp16 or bf16"),
    UNSUP("autotuning", "DeepSpeed autotuner"),
    UNSUP("communication_data_type", "gradient communication dtype"),
    UNSUP("compression_training", "compression/quantization-aware training"),
    UNSUP("curriculum_learning", "curriculum learning"),
    UNSUP("data_efficiency", "data efficiency library"),
    UNSUP("data_types", "gradient accumulation dtype"),
    UNSUP("eigenvalue", "eigenvalue computation"),
    UNSUP("elasticity", "elastic training"),
    UNSUP("hybrid_engine", "RLHF hybrid engine"),
    UNSUP("nebula", "Nebula checkpointing"),
    UNSUP("pipeline", "pipeline parallelism"),
    UNSUP("progressive_layer_drop", "progressive layer drop"),
    UNSUP("quantize_training", "MoQ quantized training"),
    UNSUP("seq_parallel_communication_data_type", "sequence parallelism"),
    UNSUP("sparse_attention", "sparse attention"),
    UNSUP("tensor_parallel", "tensor parallelism"),
    UNSUP("torch_autocast", "torch autocast; use fp16 or bf16"),
    UNSUP("weight_quantization", "weight quantization"),

    // ---- activation_checkpointing (runtime/activation_checkpointing/config.py) ----
    SEC("activation_checkpointing", O(activation_checkpointing.present),
        "present: gradient checkpointing on, as --gradient_checkpointing (a NOTICE says so): each block's input kept, "
        "the block recomputed in backward"),
    BOOL("activation_checkpointing.partition_activations", activation_checkpointing.partition_activations, 0, F_NOOP,
         "no-op: DeepSpeed splits checkpoints across model-parallel ranks; train_t5's ranks are data-parallel, none "
         "holds a piece of another's sample, so there is nothing to partition"),
    BOOL("activation_checkpointing.cpu_checkpointing", activation_checkpointing.cpu_checkpointing, 0, F_NOOP,
         "no-op: the checkpointed block inputs stay in device memory (DeepSpeed true: moved to host memory)"),
    BOOL("activation_checkpointing.contiguous_memory_optimization",
         activation_checkpointing.contiguous_memory_optimization, 0, F_NOOP,
         "no-op: every activation, checkpoints included, is planned in one arena before the first step "
         "(model/t5.c), so there is no fragmentation to avoid"),
    {.path = "activation_checkpointing.number_checkpoints", .kind = K_INT,
     .off = O(activation_checkpointing.number_checkpoints), .lo = 1, .hi = IMAX, .fl = F_NOOP | F_NULL,
     .dflt_text = "null", .doc = "no-op: the checkpoints are the encoder's and decoder's blocks, one each (DeepSpeed: "
                                 "buffers for contiguous_memory_optimization)"},
    BOOL("activation_checkpointing.synchronize_checkpoint_boundary",
         activation_checkpointing.synchronize_checkpoint_boundary, 0, F_NOOP,
         "no-op: a device synchronize at each checkpoint for DeepSpeed's timers; same result"),
    BOOL("activation_checkpointing.profile", activation_checkpointing.profile, 0, F_NOOP,
         "no-op: DeepSpeed's checkpoint forward/recompute timers; flops_profiler times the ops here"),

    // ---- aio (runtime/swap_tensor/aio_config.py): the NVMe offload's I/O, zero/nvme.h ----
    SEC("aio", O(aio.present), "the NVMe offload's I/O (offload_optimizer device nvme): Linux native AIO"),
    INT("aio.block_size", aio.block_size, 4096, 1073741824, 1048576, 0,
        "bytes per read/write request a transfer is cut into; a multiple of 4096 (O_DIRECT's alignment)"),
    INT("aio.queue_depth", aio.queue_depth, 1, 65536, 8, 0, "requests in flight per I/O thread (its AIO context's size)"),
    INT("aio.intra_op_parallelism", aio.intra_op_parallelism, 1, 256, 1, 0,
        "I/O threads per transfer, each with its own contiguous part of it"),
    INT("aio.thread_count", aio.intra_op_parallelism, 1, 256, 1, 0,
        "the docs' name of intra_op_parallelism (DeepSpeed 0.19.8 reads only intra_op_parallelism; train_t5 takes "
        "either)"),
    BOOL("aio.single_submit", aio.single_submit, 0, 0, "true: one request per submit call; false: a batch per call"),
    BOOL("aio.overlap_events", aio.overlap_events, 1, 0,
         "true: each completed request is replaced by the next at once; false: a batch is submitted, then all of it "
         "waited for"),
    ONLY_BOOL("aio.use_gds", 0, "GPUDirect Storage: the NVMe offload moves optimizer state through host memory"),

    // ---- monitors (monitor/config.py): written by rank 0 at each optimizer step, trainer/ds_monitor.h ----
    SEC("tensorboard", NO_OFF, "DeepSpeed's TensorBoard monitor: an event file in output_path/job_name"),
    BOOL("tensorboard.enabled", tensorboard.enabled, 0, 0,
         "write Train/Samples/lr (fp16: and Train/Samples/loss_scale) at step = samples so far, each optimizer step"),
    STR("tensorboard.output_path", tensorboard.output_path, 0, "\"\"",
        "directory of job_name (\"\": the working directory, as DeepSpeed)"),
    STR("tensorboard.job_name", tensorboard.job_name, 0, "DeepSpeedJobName", "the directory the event file goes in"),
    SEC("csv_monitor", NO_OFF, "DeepSpeed's CSV monitor: output_path/job_name/<tag, / -> _>.csv"),
    BOOL("csv_monitor.enabled", csv_monitor.enabled, 0, 0,
         "append \"step,<name>\" rows (a header first) to Train_Samples_lr.csv (fp16: and Train_Samples_loss_scale.csv)"),
    STR("csv_monitor.output_path", csv_monitor.output_path, 0, "\"\"",
        "directory of job_name (\"\": the working directory, as DeepSpeed)"),
    STR("csv_monitor.job_name", csv_monitor.job_name, 0, "DeepSpeedJobName", "the directory the .csv files go in"),
    SEC("wandb", NO_OFF, "Weights & Biases: enabled true is refused (nothing leaves the machine)"),
    BOOL("wandb.enabled", wandb.enabled, 0, F_NOOP,
         "no-op: train_t5 sends nothing over the network, so true is refused (use tensorboard or csv_monitor)"),
    STR("wandb.group", wandb.group, F_NOOP | F_NULL, "null", "no-op: W&B run group"),
    STR("wandb.team", wandb.team, F_NOOP | F_NULL, "null", "no-op: W&B team"),
    STR("wandb.project", wandb.project, F_NOOP, "deepspeed", "no-op: W&B project"),
    SEC("comet", NO_OFF, "Comet: enabled true is refused (nothing leaves the machine)"),
    BOOL("comet.enabled", comet.enabled, 0, F_NOOP,
         "no-op: train_t5 sends nothing over the network, so true is refused (use tensorboard or csv_monitor)"),
    INT("comet.samples_log_interval", comet.samples_log_interval, 0, BIG, 100, F_NOOP, "no-op: Comet's log period"),
    STR("comet.project", comet.project, F_NOOP | F_NULL, "null", "no-op: Comet project"),
    STR("comet.workspace", comet.workspace, F_NOOP | F_NULL, "null", "no-op: Comet workspace"),
    STR("comet.api_key", comet.api_key, F_NOOP | F_NULL | F_SECRET, "null", "no-op: Comet API key (never printed)"),
    STR("comet.experiment_name", comet.experiment_name, F_NOOP | F_NULL, "null", "no-op: Comet experiment name"),
    STR("comet.experiment_key", comet.experiment_key, F_NOOP | F_NULL, "null", "no-op: Comet experiment key"),
    BOOL("comet.online", comet.online, 0, F_NOOP | F_NULL, "no-op: Comet online/offline"),
    STR("comet.mode", comet.mode, F_NOOP | F_NULL, "null", "no-op: Comet get/create mode"),

    // ---- flops_profiler (profiling/config.py): the op profiler of `train_t5 bench --profile` ----
    SEC("flops_profiler", NO_OFF, "GPU runs: one step under the CUDA op profiler (kernels/cuda/profile.cu)"),
    BOOL("flops_profiler.enabled", flops_profiler.enabled, 0, 0,
         "profile one optimizer step on rank 0 (GPU; on the CPU a NOTICE says it changes nothing)"),
    NUM("flops_profiler.recompute_fwd_factor", flops_profiler.recompute_fwd_factor, 0, INF, 0, F_NOOP,
        "no-op: the profiler times the ops, recomputed forwards included; it counts no FLOPs to correct"),
    INT("flops_profiler.profile_step", flops_profiler.profile_step, 0, IMAX, 1, 0,
        "profile the step that runs after this many optimizer steps (DeepSpeed's global_steps: 1 = the second)"),
    INT("flops_profiler.module_depth", flops_profiler.module_depth, -1, IMAX, -1, F_NOOP,
        "no-op: the profile is per op and shape, not per torch module"),
    INT("flops_profiler.top_modules", flops_profiler.top_modules, 1, IMAX, 1, 0, "how many of the top ops by time are listed"),
    BOOL("flops_profiler.detailed", flops_profiler.detailed, 1, F_NOOP,
         "no-op: the profile is always the class table and the top ops"),
    STR("flops_profiler.output_file", flops_profiler.output_file, F_NULL, "null",
        "the profile is written to this file (null or \"\": printed)"),

    // ---- comms_logger (comm/config.py, utils/comms_logging.py): comm/comm_log.h ----
    SEC("comms_logger", O(comms_logger.present), "every collective's size and time; DeepSpeed's table at the end"),
    BOOL("comms_logger.enabled", comms_logger.enabled, 0, 0,
         "record each collective (made blocking to time it, as DeepSpeed does) and print the summary table after "
         "training, rank 0"),
    BOOL("comms_logger.verbose", comms_logger.verbose, 0, 0, "also one line per collective as it runs, rank 0"),
    BOOL("comms_logger.prof_all", comms_logger.prof_all, 1, 0, "record every collective; false: only prof_ops"),
    {.path = "comms_logger.prof_ops", .kind = K_STRLIST, .off = O(comms_logger.prof_ops), .dflt_text = "[]",
     .doc = "the collectives recorded when prof_all is false: all_reduce, all_gather_into_tensor, "
            "reduce_scatter_tensor, gather, barrier"},
    BOOL("comms_logger.debug", comms_logger.debug, 0, F_NOOP,
         "no-op: DeepSpeed appends the calling Python function to each name; there is none here"),

    // ---- checkpoint ----
    SEC("checkpoint", NO_OFF, "where checkpoints are written (DeepSpeed's checkpoint options)"),
    BOOL("checkpoint.use_node_local_storage", checkpoint.use_node_local_storage, 0, 0,
         "each host writes its own ranks' shards (and its copy of the small files) to its own disk; rank 0 writes "
         "model.safetensors; a resume fetches the shards its host lacks from the hosts that have them "
         "(HF: --save_on_each_node; docs/LAUNCH.md)"),
    ONLY_BOOL("checkpoint.load_universal", 0, "universal checkpoints (train_t5's shards already resume at any layout)"),
    SEC("checkpoint.parallel_write", NO_OFF, "pipeline-parallel checkpoint writing"),
    ONLY_BOOL("checkpoint.parallel_write.pipeline_stage", 0, "pipeline-stage parallel writes (no pipeline here)"),

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
    NUM("optimizer.params.eps", optimizer.eps, 0, INF, ADAMW_HF_EPS, F_AUTO | F_LO_OPEN, "Adam epsilon (HF: --adam_epsilon)"),
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
         0, F_AUTO, "stage 3: the final save streams the fp32 weights into model.safetensors; false: it writes "
         "the ZeRO shards only, and train_t5 export makes the HF directory (DeepSpeed: gather 16-bit weights at save)"),
    BOOL("zero_optimization.stage3_gather_fp16_weights_on_model_save", zero.stage3_gather_16bit_weights_on_model_save,
         0, F_AUTO, "old name of stage3_gather_16bit_weights_on_model_save"),
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
    INT("zero_optimization.offload_optimizer.buffer_count", zero.offload_optimizer.buffer_count, 0, BIG, 4, F_NOOP,
        "no-op: train_t5's NVMe swap (zero/offload.c) always uses three chunk buffers: read ahead, update, write behind"),
    BOOL("zero_optimization.offload_optimizer.fast_init", zero.offload_optimizer.fast_init, 0, F_NOOP,
         "no-op: the NVMe state file is allocated and the master written once at start-up either way"),
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
const int k_n_keys = (int)(sizeof k_keys / sizeof k_keys[0]);

const DsKeyAlias k_aliases[] = {
    {"", "bfloat16", "bf16"},
    {"zero_optimization", "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
    {"aio", "thread_count", "intra_op_parallelism"},
};

const int k_n_aliases = (int)(sizeof k_aliases / sizeof k_aliases[0]);

const KeySpec *ds_key_find(const char *path) {
    for (int i = 0; i < k_n_keys; i++)
        if (!strcmp(k_keys[i].path, path)) return &k_keys[i];
    return NULL;
}
