// cmd/model_tool.h: the flags the model tools share (info, convert, loss, overfit: one model,
// optionally a batch file and AdamW settings), their parsing and the model they load.
#pragma once

#include "../formats/safetensors.h"
#include "../model/t5.h"

typedef struct {
    const char *model, *output_dir, *batch, *dtype, *init, *lr_scheduler_type;
    int seed, steps, warmup_steps, help;
    double learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon, max_grad_norm, label_smoothing,
        dropout_rate, warmup_ratio;
} ModelToolArgs;

// Fills a from argv (argv[1] is the subcommand, flags from argv[2]). --help prints the
// usage and these flags and returns 0; else returns 1. Bad flags exit 1.
int model_tool_parse_args(ModelToolArgs *a, int argc, char **argv);
// --model with --init, --seed and --dropout_rate applied, on the CPU backend.
void model_tool_load_model(T5Model *m, const ModelToolArgs *a);
// --dtype: f32 (fp32, float32), f16 (fp16, float16), bf16 (bfloat16).
StDtype model_tool_parse_dtype(const char *s);
