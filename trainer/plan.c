// trainer/plan.c: the run plan resolved from the flags (see plan.h): strings to enums,
// the numbers the run uses, config.json parsed once. --deepspeed's part is deepspeed.c's.
#include "plan.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "../common/check.h"
#include "../model/hf_dir.h"

static Strategy strategy_parse(const char *flag, const char *v) {
    if (!strcmp(v, "no")) return STRATEGY_NO;
    if (!strcmp(v, "steps")) return STRATEGY_STEPS;
    if (!strcmp(v, "epoch")) return STRATEGY_EPOCH;
    t5_fail("--%s \"%s\": expected no, steps or epoch", flag, v);
}

const char *run_plan_precision_name(Precision p) {
    static const char *const names[] = {"fp32", "fp16", "bf16"};
    return (unsigned)p < 3 ? names[p] : "?";
}

Dtype run_plan_dtype(const RunPlan *p) {
    return p->precision == PRECISION_BF16 ? DTYPE_BF16 : p->precision == PRECISION_FP16 ? DTYPE_F16 : DTYPE_F32;
}

// config.json of the model the run loads (the checkpoint's when resuming), once; a bare
// preset needs --init random (checked here, before any data is read).
static void resolve_model(RunPlan *p, const TrainArgs *a) {
    const char *arg = a->resume_from_checkpoint ? a->resume_from_checkpoint : a->model;
    p->model_has_weights = hf_resolve_model(arg, &p->model_cfg);
    int random = p->init == INIT_RANDOM && !a->resume_from_checkpoint;  // a checkpoint has its weights
    if (!p->model_has_weights && !random)
        t5_fail("--model \"%s\" is a preset with no local weights; pass a model directory, or --init random to "
                "train from a random initialization", arg);
}

void run_plan_resolve(RunPlan *p, const TrainArgs *a, const DsConfig *ds_loaded) {
    memset(p, 0, sizeof *p);
    if (ds_loaded) p->ds_loaded = *ds_loaded;
    // checkpoints on each host's own disk: HF's --save_on_each_node or DeepSpeed's key (one is enough)
    p->node_local = a->save_on_each_node || (ds_loaded && ds_loaded->checkpoint.use_node_local_storage.v);
    if (!sampler_parse(a->sampler, &p->sampler))
        t5_fail("--sampler \"%s\": expected random, sequential or sortish", a->sampler);
    if (!lr_schedule_parse(a->lr_scheduler_type, &p->lr_type))
        t5_fail("--lr_scheduler_type \"%s\": expected linear, constant, constant_with_warmup or cosine",
                a->lr_scheduler_type);
    p->logging = strategy_parse("logging_strategy", a->logging_strategy);
    p->eval = strategy_parse("eval_strategy", a->eval_strategy);
    p->save = strategy_parse("save_strategy", a->save_strategy);
    p->precision = a->fp16 ? PRECISION_FP16 : a->bf16 ? PRECISION_BF16 : PRECISION_FP32;
    p->device = !strcmp(a->device, "cuda") ? DEVICE_CUDA : DEVICE_CPU;  // validated by train_args_parse
    p->optim = OPTIM_ADAMW;  // train_args_parse refuses the others by name
    p->init = !strcmp(a->init, "random") ? INIT_RANDOM : INIT_PRETRAINED;
    p->has_val = a->do_eval || p->eval != STRATEGY_NO;
    p->micro_batch = a->per_device_train_batch_size;
    p->grad_accum = a->gradient_accumulation_steps;
    p->lr = a->learning_rate;
    p->beta1 = a->adam_beta1;
    p->beta2 = a->adam_beta2;
    p->eps = a->adam_epsilon;
    p->weight_decay = a->weight_decay;
    p->max_grad_norm = a->max_grad_norm;
    p->warmup_steps = a->warmup_steps;
    p->warmup_ratio = a->warmup_ratio;
    p->max_steps = a->max_steps;
    p->num_train_epochs = a->num_train_epochs;
    // without --deepspeed: stage 0 with each unit's gradient all-reduced while backward
    // goes on, as PyTorch DDP does; a config says for itself (DeepSpeed's overlap_comm)
    p->zopt.overlap_comm = 1;
    if (a->sharded_stage) {  // --sharded_ddp (trainer/args.c check_sharded_ddp): its stage, no config
        p->zopt = zero_options_stage(a->sharded_stage);
        p->zopt.overlap_comm = 1;
        p->zopt.offload_optimizer = a->sharded_offload;
        p->zopt.offload_param = a->sharded_offload && a->sharded_stage == 3;
        p->zopt.pin_memory = p->zopt.offload_param_pin = a->sharded_offload;  // FSDP's cpu_offload pins
    }
    p->zopt.inference = !a->do_train;  // evaluation only: no gradients, master weights or moments
    resolve_model(p, a);
}

int run_plan_steps(const RunPlan *p, long N, int world, int *steps_per_epoch, int *num_epochs) {
    // every count here comes from user numbers: each is checked to fit before it is used
    long long B = p->micro_batch, GA = p->grad_accum, batch;
    if (__builtin_mul_overflow(B * world, GA, &batch) || batch > INT_MAX)
        t5_fail("--per_device_train_batch_size %lld x --gradient_accumulation_steps %lld x %d rank%s is more than %d "
                "samples per optimizer step; HINT: lower --gradient_accumulation_steps", B, GA, world,
                world > 1 ? "s" : "", INT_MAX);
    long long micro = ((long long)N + B * world - 1) / (B * world);
    long long spe = (micro + GA - 1) / GA;
    if (spe < 1) spe = 1;
    if (spe > INT_MAX)
        t5_fail("%ld training examples in batches of %lld make %lld optimizer steps per epoch, more than %d; HINT: "
                "raise --per_device_train_batch_size or --gradient_accumulation_steps, or lower --n_train", N, B * world,
                spe, INT_MAX);
    long long total, epochs;
    if (p->max_steps > 0) {
        total = p->max_steps;
        epochs = (total + spe - 1) / spe;
    } else {
        double t = ceil(p->num_train_epochs * (double)spe);
        if (!(t <= INT_MAX))
            t5_fail("--num_train_epochs %g: %g epochs of %lld optimizer steps is %.4g steps, more than %d; HINT: lower "
                    "--num_train_epochs, or set --max_steps", p->num_train_epochs, p->num_train_epochs, spe, t, INT_MAX);
        total = (long long)t;
        epochs = (long long)ceil(p->num_train_epochs);
    }
    if (total < 1)  // a --do_train run that would train nothing (and save an untrained model) is an error
        t5_fail("--num_train_epochs %g / --max_steps %d make %lld optimizer steps: nothing would be trained; HINT: "
                "raise --num_train_epochs or --max_steps", p->num_train_epochs, p->max_steps, total);
    if (steps_per_epoch) *steps_per_epoch = (int)spe;
    if (num_epochs) *num_epochs = (int)epochs;
    return (int)total;
}
