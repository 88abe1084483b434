// cmd/overfit.c: `train_t5 overfit --model M --batch F --output_dir D [--steps N ...]`: N AdamW
// steps on one batch (fp32, CPU, ZeRO stage 0), the loss of each printed, then the model saved.
#include "cmd.h"

#include <stdio.h>

#include "../common/check.h"
#include "../data/batch_file.h"
#include "../model/hf_dir.h"
#include "../optim/adamw.h"
#include "../zero/step.h"
#include "model_tool.h"

int cmd_run_overfit(int argc, char **argv) {
    ModelToolArgs args;
    if (!model_tool_parse_args(&args, argc, argv)) return 0;
    const ModelToolArgs *a = &args;
    if (!a->batch) t5_fail("overfit: --batch FILE is required");
    if (!a->output_dir) t5_fail("overfit: --output_dir is required");
    if (a->steps < 1) t5_fail("overfit: --steps must be >= 1, found %d", a->steps);
    T5Model m;
    model_tool_load_model(&m, a);
    BatchFile bf;
    batch_file_load(&bf, a->batch, m.cfg.vocab_size, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    t5_plan_activations(&m, bf.batch.B, bf.batch.S, bf.batch.T);
    LrSchedule sched = {.base_lr = a->learning_rate, .total_steps = a->steps};
    if (!lr_schedule_parse(a->lr_scheduler_type, &sched.type))
        t5_fail("--lr_scheduler_type: expected linear, constant, constant_with_warmup or cosine, found \"%s\"",
                a->lr_scheduler_type);
    sched.warmup_steps = lr_schedule_warmup_steps(a->warmup_steps, a->warmup_ratio, a->steps);
    AdamWConfig oc = {.lr = a->learning_rate, .beta1 = a->adam_beta1, .beta2 = a->adam_beta2,
                      .eps = a->adam_epsilon, .weight_decay = a->weight_decay, .max_grad_norm = a->max_grad_norm};
    ZeroState z;
    ZeroOptions zo = zero_options_stage(0);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc, NULL);  // fp32 CPU: the weights are the master
    for (int s = 0; s < a->steps; s++) {
        m.dropout_seed = (unsigned long long)a->seed * 1000003ULL + (unsigned long long)s;
        StepResult r = zero_train_step(&z, &sched, NULL, &bf.batch, 1, a->label_smoothing);
        printf("step %d loss %.9g grad_norm %.9g learning_rate %.9g\n", s + 1, r.loss, r.grad_norm, r.lr);
    }
    hf_save_model(a->output_dir, &m.cfg, &m.lay, m.params, model_tool_parse_dtype(a->dtype));
    printf("saved %s\n", a->output_dir);
    zero_free(&z);
    batch_file_free(&bf);
    t5_free(&m);
    return 0;
}
