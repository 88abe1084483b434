// trainer/accelerate_env.h: the Accelerate route. `accelerate launch [--use_deepspeed ...]
// [--mixed_precision bf16] --no_python ./train_t5 ...` starts the ranks as torchrun does (the
// launcher variables comm/launch.h reads) and passes its choices in variables that HF's Trainer
// reads: ACCELERATE_USE_DEEPSPEED with ACCELERATE_DEEPSPEED_CONFIG_FILE (a config file) or the
// ACCELERATE_DEEPSPEED_ZERO_STAGE / _OFFLOAD_* / _ZERO3_SAVE_16BIT_MODEL and
// ACCELERATE_GRADIENT_ACCUMULATION_STEPS / _GRADIENT_CLIPPING variables (the config accelerate's
// DeepSpeedPlugin builds from them), and ACCELERATE_MIXED_PRECISION. They are taken as HF does:
// --deepspeed and --fp16/--bf16 win when given (fp8 is --fp8 --bf16); what cannot be honoured (FSDP) is refused in
// one line; what changes nothing here is said. docs/LAUNCH.md has the command lines.
#pragma once
#include "args.h"

// What messages call the config the plugin builds.
#define ACCELERATE_PLUGIN_LABEL "ACCELERATE_DEEPSPEED_* (accelerate's plugin config)"

// Before the DeepSpeed config loads: may set a->deepspeed (a file's path, or the label above
// with a->deepspeed_text = the JSON the plugin would build), a->fp16/bf16 (with their *_from and
// ds_flag_mask bits), a->use_cpu, and notices.
void accelerate_env_apply(TrainArgs *a);
