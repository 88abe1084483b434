// cmd/model_tool.c: the shared flags of the model tools (info, convert, loss, overfit) and
// the model they load (see model_tool.h).
#include "model_tool.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../model/load.h"
#include "../optim/adamw.h"
#include "cmd.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static ModelToolArgs model_tool_default_args(void) {
    ModelToolArgs a = {0};
    a.dtype = "f32";
    a.init = "pretrained";
    a.lr_scheduler_type = "linear";
    a.seed = 42;
    a.steps = 10;
    a.learning_rate = ADAMW_HF_LR;  // optim/adamw.h: HF's defaults
    a.adam_beta1 = ADAMW_HF_BETA1;
    a.adam_beta2 = ADAMW_HF_BETA2;
    a.adam_epsilon = ADAMW_HF_EPS;
    a.max_grad_norm = ADAMW_HF_MAX_GRAD_NORM;
    a.dropout_rate = -1.0f;  // -1: keep the config's
    return a;
}

int model_tool_parse_args(ModelToolArgs *a, int argc, char **argv) {
    *a = model_tool_default_args();
    FlagSpec specs[] = {
        {"model", FLAG_STRING, &a->model, "model directory or preset name"},
        {"init", FLAG_STRING, &a->init, "pretrained (default) or random"},
        {"seed", FLAG_INT, &a->seed, "random seed (init, dropout)"},
        {"output_dir", FLAG_STRING, &a->output_dir, "where to save the model"},
        {"dtype", FLAG_STRING, &a->dtype, "saved tensor dtype: f32, f16, bf16"},
        {"batch", FLAG_STRING, &a->batch, "batch file (safetensors with input_ids, attention_mask, labels)"},
        {"steps", FLAG_INT, &a->steps, "optimizer steps (overfit)"},
        {"learning_rate", FLAG_FLOAT, &a->learning_rate, "AdamW learning rate"},
        {"weight_decay", FLAG_FLOAT, &a->weight_decay, "AdamW weight decay (not on norm weights)"},
        {"adam_beta1", FLAG_FLOAT, &a->adam_beta1, "AdamW beta1"},
        {"adam_beta2", FLAG_FLOAT, &a->adam_beta2, "AdamW beta2"},
        {"adam_epsilon", FLAG_FLOAT, &a->adam_epsilon, "AdamW epsilon"},
        {"max_grad_norm", FLAG_FLOAT, &a->max_grad_norm, "global gradient clipping norm (0: off)"},
        {"lr_scheduler_type", FLAG_STRING, &a->lr_scheduler_type, "linear, constant, constant_with_warmup, cosine"},
        {"warmup_steps", FLAG_INT, &a->warmup_steps, "linear warmup steps"},
        {"warmup_ratio", FLAG_FLOAT, &a->warmup_ratio, "warmup as a fraction of the steps"},
        {"label_smoothing", FLAG_FLOAT, &a->label_smoothing, "label smoothing epsilon (HF LabelSmoother)"},
        {"dropout_rate", FLAG_FLOAT, &a->dropout_rate, "override the config's dropout"},
        {"help", FLAG_BOOL, &a->help, "this help"},
    };
    flags_parse(argc, argv, 2, specs, COUNT(specs), argv[1]);
    if (a->help) {
        cmd_print_usage();
        flags_print_help(specs, COUNT(specs));
        return 0;
    }
    return 1;
}

void model_tool_load_model(T5Model *m, const ModelToolArgs *a) {
    if (!a->model) t5_fail("--model is required (a model directory or a preset name such as t5-small)");
    if (strcmp(a->init, "random") != 0 && strcmp(a->init, "pretrained") != 0)
        t5_fail("--init: expected random or pretrained, found \"%s\"", a->init);
    ModelLoadOptions opt = {.init_random = !strcmp(a->init, "random"), .seed = (unsigned long long)a->seed};
    model_load(m, a->model, backend_cpu(), opt);
    if (a->dropout_rate >= 0) {
        if (a->dropout_rate >= 1.0f) t5_fail("--dropout_rate must be in [0, 1), found %g", a->dropout_rate);
        m->cfg.dropout_rate = m->dropout_p = a->dropout_rate;
    }
}

StDtype model_tool_parse_dtype(const char *s) {
    if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) return ST_F32;
    if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) return ST_F16;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return ST_BF16;
    t5_fail("--dtype: expected f32, f16 or bf16, found \"%s\"", s);
}
