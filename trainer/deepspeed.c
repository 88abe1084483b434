// trainer/deepspeed.c: --deepspeed applied to a run: the config (loaded and validated at
// start-up by deepspeed/ds_config.c) resolved against the flags as HF's integration does, then
// its batch sizes, optimizer, clipping, precision, loss scaler, scheduler and ZeRO settings
// taken into the run.
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../model/hf_dir.h"
#include "run.h"

// --deepspeed: load the config, resolve "auto" from the flags as HF does (the batch rule,
// contradictions with explicit flags are errors), then take its batch sizes, optimizer,
// clipping, precision, loss scaler and scheduler, the ZeRO stage with its buckets, overlap,
// prefetch and optimizer offload (zero/zero.h). What DeepSpeed has and this build does not
// (NVMe, parameter offload, a partial offload ratio) is refused by name.
void trainer_apply_deepspeed(Run *r, long n_train) {
    TrainArgs *a = &r->a;
    const DsConfig loaded = r->ds_loaded;
    DsConfig c;
    T5Config mc;
    hf_resolve_model(a->model, &mc);
    DsResolveArgs ra = ds_resolve_args_default();
    ra.world_size = r->comm.world;
    ra.learning_rate = a->learning_rate;
    ra.adam_beta1 = a->adam_beta1;
    ra.adam_beta2 = a->adam_beta2;
    ra.adam_epsilon = a->adam_epsilon;
    ra.weight_decay = a->weight_decay;
    ra.max_grad_norm = a->max_grad_norm;
    ra.fp16 = a->fp16;
    ra.bf16 = a->bf16;
    ra.d_model = mc.d_model;
    ra.flag_set_mask = a->ds_flag_mask;  // the flags given, by any of their names (trainer/args.c)
    // twice when the file's batch sizes replace flags left at their defaults: the step
    // count ("auto" total_num_steps) depends on them
    for (int pass = 0; pass < 2; pass++) {
        ra.per_device_train_batch_size = a->per_device_train_batch_size;
        ra.gradient_accumulation_steps = a->gradient_accumulation_steps;
        ra.total_steps = n_train > 0 ? trainer_plan_steps(a, n_train, r->comm.world, NULL, NULL) : 0;
        ra.warmup_steps = lr_schedule_warmup_steps(a->warmup_steps, a->warmup_ratio, ra.total_steps);
        c = loaded;
        ds_config_resolve(&c, &ra, a->deepspeed);
        int micro = (int)c.train_micro_batch_size_per_gpu.v, ga = (int)c.gradient_accumulation_steps.v;
        if (micro == a->per_device_train_batch_size && ga == a->gradient_accumulation_steps) break;
        a->per_device_train_batch_size = micro;
        a->gradient_accumulation_steps = ga;
    }
    // the ZeRO stage, buckets, overlap, prefetch and optimizer offload; NVMe, a partial
    // offload ratio and parameter offload are refused by name
    r->zopt = zero_options_from_config(&c, a->deepspeed);
    if (c.optimizer.present) {
        a->learning_rate = c.optimizer.lr.v;
        a->adam_beta1 = c.optimizer.betas[0].v;
        a->adam_beta2 = c.optimizer.betas[1].v;
        a->adam_epsilon = c.optimizer.eps.v;
        a->weight_decay = c.optimizer.weight_decay.v;
    }
    a->max_grad_norm = c.gradient_clipping.v;  // DeepSpeed clips only when the key says so
    a->fp16 = c.fp16.enabled.v;  // as train_args_take_ds_precision saw it (the device checks ran on that)
    a->bf16 = c.bf16.enabled.v;
    if (a->fp16 && c.fp16.loss_scale.v == 0) {
        r->ds_scaler = loss_scaler_dynamic((int)c.fp16.initial_scale_power.v, (long)c.fp16.loss_scale_window.v,
                                           (int)c.fp16.hysteresis.v, c.fp16.min_loss_scale.v,
                                           c.fp16.consecutive_hysteresis.v);
        r->has_ds_scaler = 1;
    } else if (a->fp16) {
        r->ds_scaler = loss_scaler_static(c.fp16.loss_scale.v);
        r->has_ds_scaler = 1;
    }
    if (c.scheduler.present) {
        LrSchedule *s = &r->ds_sched;
        memset(s, 0, sizeof *s);
        s->type = c.scheduler.type == DS_SCHEDULER_WARMUP_LR         ? LR_DS_WARMUP
                  : c.scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR ? LR_DS_WARMUP_DECAY
                                                                     : LR_DS_WARMUP_COSINE;
        s->base_lr = a->learning_rate;
        s->ds_min_lr = c.scheduler.warmup_min_lr.v;
        s->ds_max_lr = c.scheduler.warmup_max_lr.v;
        s->warmup_steps = (int)c.scheduler.warmup_num_steps.v;
        s->total_steps = c.scheduler.total_num_steps.is_set ? (int)c.scheduler.total_num_steps.v
                                                             : trainer_plan_steps(a, n_train, r->comm.world, NULL, NULL);
        s->ds_warmup_log = c.scheduler.warmup_type == DS_WARMUP_LOG;
        s->ds_warmup_min_ratio = c.scheduler.warmup_min_ratio.v;
        s->ds_cos_min_ratio = c.scheduler.cos_min_ratio.v;
        r->has_ds_sched = 1;
    }
    if (is_main(r)) {
        printf("DeepSpeed config %s: micro-batch %d, accumulation %d, train_batch_size %lld, %s%s, clip %g, "
               "scheduler %s, zero stage %d%s\n", a->deepspeed, a->per_device_train_batch_size,
               a->gradient_accumulation_steps, (long long)c.train_batch_size.v, a->fp16 ? "fp16" : a->bf16 ? "bf16" : "fp32",
               c.optimizer.present ? ", optimizer from the config" : "", a->max_grad_norm,
               r->has_ds_sched ? lr_schedule_name(r->ds_sched.type) : a->lr_scheduler_type, (int)c.zero.stage,
               r->comm.world == 1 && c.zero.stage >= 1 ? " (one rank: its partition is the whole model)" : "");
        // what the config asks that this build does differently, said instead of ignored
        int cpu = strcmp(a->device, "cuda") != 0;
        if (c.zero.stage >= 2 && (c.zero.overlap_comm.v || c.zero.stage3_prefetch_bucket_size.v > 0) && cpu &&
            r->comm.world > 1)
            printf("NOTICE: %s: overlap_comm / prefetch: CPU ranks (MPI) finish each collective before going on; "
                   "GPU ranks overlap them (same result)\n", a->deepspeed);
        if (c.zero.stage == 3) {  // the layout from the config: the model is not loaded yet
            ParamLayout lay;
            params_build_layout(&mc, &lay);
            zero_stage3_describe(&lay, &r->zopt, a->deepspeed);
            params_free_layout(&lay);
        }
        ds_config_print_unacted(&loaded, a->deepspeed, stdout);
        fflush(stdout);
    }
}
