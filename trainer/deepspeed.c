// trainer/deepspeed.c: --deepspeed applied to the run plan (trainer/plan.h): the config
// (loaded and validated at start-up by deepspeed/) resolved against the flags as HF's
// integration does, then its batch sizes, optimizer, clipping, precision, loss scaler,
// scheduler and ZeRO settings taken into the plan. TrainArgs is not edited.
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../model/params.h"
#include "../comm/comm_log.h"
#include "../deepspeed/ds_zero_options.h"
#include "plan.h"

// "auto" from the flags as HF does (the batch rule; contradictions with explicit flags are
// errors). Twice when the file's batch sizes replace flags left at their defaults: the
// step count ("auto" total_num_steps) depends on them.
static DsConfig resolve_against_flags(RunPlan *p, const TrainArgs *a, long n_train, int world) {
    DsResolveArgs ra = ds_resolve_args_default();
    ra.world_size = world;
    ra.learning_rate = a->learning_rate;
    ra.adam_beta1 = a->adam_beta1;
    ra.adam_beta2 = a->adam_beta2;
    ra.adam_epsilon = a->adam_epsilon;
    ra.weight_decay = a->weight_decay;
    ra.max_grad_norm = a->max_grad_norm;
    ra.fp16 = a->fp16;
    ra.bf16 = a->bf16;
    ra.d_model = p->model_cfg.d_model;
    ra.flag_set_mask = a->ds_flag_mask;  // the flags given, by any of their names (trainer/args.c)
    DsConfig c;
    for (int pass = 0; pass < 2; pass++) {
        ra.per_device_train_batch_size = p->micro_batch;
        ra.gradient_accumulation_steps = p->grad_accum;
        ra.total_steps = n_train > 0 ? run_plan_steps(p, n_train, world, NULL, NULL) : 0;
        ra.warmup_steps = lr_schedule_warmup_steps(p->warmup_steps, p->warmup_ratio, ra.total_steps);
        ra.steps_pending = n_train < 0;
        ra.warmup_from_ratio = p->warmup_ratio > 0;
        c = p->ds_loaded;
        if (!a->do_train) c.optimizer.present = c.scheduler.present = 0;  // HF: dropped for inference
        ds_config_resolve(&c, &ra, a->deepspeed);
        int micro = (int)c.train_micro_batch_size_per_gpu.v, ga = (int)c.gradient_accumulation_steps.v;
        if (micro == p->micro_batch && ga == p->grad_accum) break;
        p->micro_batch = micro;
        p->grad_accum = ga;
    }
    return c;
}

// The config's optimizer, clipping, precision and fp16 loss scaler.
static void take_optimizer_precision(RunPlan *p, const DsConfig *c) {
    if (c->optimizer.present) {
        p->lr = c->optimizer.lr.v;
        p->beta1 = c->optimizer.betas[0].v;
        p->beta2 = c->optimizer.betas[1].v;
        p->eps = c->optimizer.eps.v;
        p->weight_decay = c->optimizer.weight_decay.v;
    }
    p->max_grad_norm = c->gradient_clipping.v;  // DeepSpeed clips only when the key says so
    // as train_args_take_ds_precision saw it (the device checks ran on that)
    p->precision = c->fp16.enabled.v ? PRECISION_FP16 : c->bf16.enabled.v ? PRECISION_BF16 : PRECISION_FP32;
    if (p->precision == PRECISION_FP16 && c->fp16.loss_scale.v == 0) {
        p->ds_scaler = loss_scaler_dynamic((int)c->fp16.initial_scale_power.v, (long)c->fp16.loss_scale_window.v,
                                           (int)c->fp16.hysteresis.v, c->fp16.min_loss_scale.v,
                                           c->fp16.consecutive_hysteresis.v);
        p->has_ds_scaler = 1;
    } else if (p->precision == PRECISION_FP16) {
        p->ds_scaler = loss_scaler_static(c->fp16.loss_scale.v);
        p->has_ds_scaler = 1;
    }
}

// The config's scheduler (DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR).
static void take_scheduler(RunPlan *p, const DsConfig *c, long n_train, int world) {
    if (!c->scheduler.present) return;
    LrSchedule *s = &p->ds_sched;
    memset(s, 0, sizeof *s);
    s->type = c->scheduler.type == DS_SCHEDULER_WARMUP_LR         ? LR_DS_WARMUP
              : c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR ? LR_DS_WARMUP_DECAY
                                                                  : LR_DS_WARMUP_COSINE;
    s->base_lr = p->lr;
    s->ds_min_lr = c->scheduler.warmup_min_lr.v;
    s->ds_max_lr = c->scheduler.warmup_max_lr.v;
    s->warmup_steps = (int)c->scheduler.warmup_num_steps.v;
    s->total_steps = c->scheduler.total_num_steps.is_set ? (int)c->scheduler.total_num_steps.v
                                                          : run_plan_steps(p, n_train, world, NULL, NULL);
    s->ds_warmup_log = c->scheduler.warmup_type == DS_WARMUP_LOG;
    s->ds_warmup_min_ratio = c->scheduler.warmup_min_ratio.v;
    s->ds_cos_min_ratio = c->scheduler.cos_min_ratio.v;
    p->has_ds_sched = 1;
}

// "comms_logger" enabled: what is recorded, and prof_ops names that record nothing.
static void comm_log_print_plan(const DsConfig *c, const char *f, FILE *out) {
    const DsStrList *ops = &c->comms_logger.prof_ops;
    char names[256] = "";
    for (int i = 0; comm_log_op_names[i]; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", comm_log_op_names[i]);
    fprintf(out, "DeepSpeed comms_logger: %s recorded with its size and time (each made blocking to time it, as "
            "DeepSpeed does); rank 0's table after training%s\n", c->comms_logger.prof_all.v ? "every collective"
            : "the collectives in prof_ops", c->comms_logger.verbose.v ? ", and a line per collective (verbose)" : "");
    if (c->comms_logger.prof_all.v && ops->n)
        fprintf(out, "NOTICE: %s: \"comms_logger.prof_ops\" is accepted and changes nothing here: prof_all is true, so "
                "every collective is recorded\n", f);
    if (!c->comms_logger.prof_all.v && !ops->n)
        fprintf(out, "NOTICE: %s: \"comms_logger\": prof_all is false and prof_ops is empty: no collective is "
                "recorded\n", f);
    for (int i = 0; i < ops->n; i++)
        if (!comm_log_known_op(ops->v[i]))
            fprintf(out, "NOTICE: %s: \"comms_logger.prof_ops\": \"%s\" records nothing here: train_t5 runs no "
                    "collective of that name (its collectives: %s)\n", f, ops->v[i], names);
}

// The blocks around training (docs/TRAINER.md "DeepSpeed blocks"): the keys whose effect
// depends on the run are named here when this run does not act on them; the ones it acts on
// are said by what acts (the monitors, the NVMe engine, the comms logger).
static void print_blocks(const RunPlan *p, const TrainArgs *a, const DsConfig *c, long n_train, int world) {
    const char *f = a->deepspeed;
    if (c->aio.present && !(c->zero.offload_optimizer.device == OFFLOAD_NVME && a->do_train))
        ds_config_print_section_unacted(c, "aio", f, a->do_train ? "no NVMe offload in this config (aio tunes the I/O of "
                                        "\"offload_optimizer\": {\"device\": \"nvme\"})"
                                        : "evaluation only: there is no optimizer state to offload", stdout);
    static const char *const monitors[] = {"tensorboard", "csv_monitor"};
    const DsMonitorBlock *mb[] = {&c->tensorboard, &c->csv_monitor};
    for (int i = 0; i < 2; i++) {
        char why[96];
        snprintf(why, sizeof why, "\"%s.enabled\" is false", monitors[i]);
        if (!mb[i]->enabled.v) ds_config_print_section_unacted(c, monitors[i], f, why, stdout);
        else if (!a->do_train)
            ds_config_print_section_unacted(c, monitors[i], f, "evaluation only: the monitor writes at optimizer steps",
                                            stdout);
    }
    if (!c->flops_profiler.enabled.v)
        ds_config_print_section_unacted(c, "flops_profiler", f, "\"flops_profiler.enabled\" is false", stdout);
    else if (p->device != DEVICE_CUDA)
        ds_config_print_section_unacted(c, "flops_profiler", f, "the profiler times CUDA ops and this run is on the CPU "
                                        "(it trains as without the block)", stdout);
    else if (!a->do_train)
        ds_config_print_section_unacted(c, "flops_profiler", f, "evaluation only: the profile is of a training step",
                                        stdout);
    else {
        int total = n_train > 0 ? run_plan_steps(p, n_train, world, NULL, NULL) : 0;
        const char *out = c->flops_profiler.output_file.v[0] ? c->flops_profiler.output_file.v : "stdout";
        if (c->flops_profiler.profile_step.v >= total)
            printf("NOTICE: %s: \"flops_profiler.profile_step\" = %lld: the run has %d optimizer step%s, so no step is "
                   "profiled (DeepSpeed profiles the step after profile_step steps)\n", f,
                   c->flops_profiler.profile_step.v, total, total == 1 ? "" : "s");
        else
            printf("DeepSpeed flops_profiler: optimizer step %lld (after %lld) on rank 0 under the CUDA op profiler, the "
                   "top %lld op%s, to %s\n", c->flops_profiler.profile_step.v + 1, c->flops_profiler.profile_step.v,
                   c->flops_profiler.top_modules.v, c->flops_profiler.top_modules.v == 1 ? "" : "s", out);
    }
    if (c->comms_logger.present && !c->comms_logger.enabled.v)
        ds_config_print_section_unacted(c, "comms_logger", f, "\"comms_logger.enabled\" is false", stdout);
    else if (c->comms_logger.present && !a->do_train)
        ds_config_print_section_unacted(c, "comms_logger", f, "evaluation only: it records the training loop's "
                                        "collectives", stdout);
    else if (c->comms_logger.present)
        comm_log_print_plan(c, f, stdout);
}

// The config as taken, and what it asks that this build does differently, said instead of ignored.
static void print_applied(const RunPlan *p, const TrainArgs *a, const DsConfig *c, long n_train, int world) {
    if (a->do_train)
        printf("DeepSpeed config %s: micro-batch %d, accumulation %d, train_batch_size %lld, %s%s, clip %g, "
               "scheduler %s, zero stage %d%s\n", a->deepspeed, p->micro_batch, p->grad_accum,
               (long long)c->train_batch_size.v, run_plan_precision_name(p->precision),
               c->optimizer.present ? ", optimizer from the config" : "", p->max_grad_norm,
               p->has_ds_sched ? lr_schedule_name(p->ds_sched.type) : a->lr_scheduler_type, (int)c->zero.stage,
               world == 1 && c->zero.stage >= 1 ? " (one rank: its partition is the whole model)" : "");
    else  // evaluation only: no batch of training, no optimizer, no schedule to speak of
        printf("DeepSpeed config %s: evaluation only, %s, zero stage %d%s\n", a->deepspeed,
               run_plan_precision_name(p->precision), (int)c->zero.stage,
               world == 1 && c->zero.stage >= 1 ? " (one rank: its partition is the whole model)" : "");
    if (c->zero.stage >= 2 && (c->zero.overlap_comm.v || c->zero.stage3_prefetch_bucket_size.v > 0) &&
        p->device != DEVICE_CUDA && world > 1)
        printf("NOTICE: %s: overlap_comm / prefetch: CPU ranks (MPI) finish each collective before going on; "
               "GPU ranks overlap them (same result)\n", a->deepspeed);
    if (c->zero.stage == 3) {  // the layout from the config: the model is not loaded yet
        ParamLayout lay;
        params_build_layout(&p->model_cfg, &lay);
        zero_stage3_describe(&lay, &p->zopt, a->deepspeed);
        params_free_layout(&lay);
    }
    if (!a->do_train && (p->ds_loaded.optimizer.present || p->ds_loaded.scheduler.present))
        printf("NOTICE: %s: evaluation only: its optimizer and scheduler are dropped (HF's deepspeed_init(inference="
               "True)); no gradients, master weights or moments are allocated\n", a->deepspeed);
    ds_config_print_unacted(&p->ds_loaded, a->deepspeed, stdout);
    print_blocks(p, a, &p->ds_loaded, n_train, world);
    fflush(stdout);
}

// What DeepSpeed has and this build does not (NVMe, parameter offload, a partial offload
// ratio) is refused by name (zero_options_from_config).
void run_plan_apply_deepspeed(RunPlan *p, const TrainArgs *a, long n_train, int world, int print) {
    DsConfig c = resolve_against_flags(p, a, n_train, world);
    // the ZeRO stage, buckets, overlap, prefetch and optimizer offload
    p->zopt = zero_options_from_config(&c, a->deepspeed);
    p->zopt.inference = !a->do_train;
    take_optimizer_precision(p, &c);
    take_scheduler(p, &c, n_train, world);
    if (print) print_applied(p, a, &c, n_train, world);
}

// Before the data is read: every check of the config against the flags that does not need
// the run's step count, so that a contradiction is said before anything is tokenized or
// written (the step-count "auto" values are filled by run_plan_apply_deepspeed later). The
// plan is not changed.
void run_plan_check_deepspeed(const RunPlan *p, const TrainArgs *a, int world) {
    RunPlan trial = *p;  // resolve_against_flags may adopt the file's batch sizes
    DsConfig c = resolve_against_flags(&trial, a, -1, world);
    (void)zero_options_from_config(&c, a->deepspeed);
}

void train_args_take_ds_checkpointing(TrainArgs *a, const DsConfig *c) {
    if (!c->activation_checkpointing.present) return;
    char line[DS_PATH_MAX + 320];
    snprintf(line, sizeof line, "NOTICE: %s: \"activation_checkpointing\": gradient checkpointing is on, as "
             "--gradient_checkpointing%s: each block keeps only its input and is recomputed in backward", c->file,
             a->gradient_checkpointing ? " (given too)" : "");
    a->gradient_checkpointing = 1;
    train_args_add_notice(a, line);
}
