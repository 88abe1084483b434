// trainer/gen_defaults.h: the generation settings and the source prefix a model directory
// carries, taken as Hugging Face does when the flags leave them unset (docs/EVALUATION.md
// "Defaults from the model directory").
#pragma once
#include "args.h"

// With --model a directory: generation_config.json's num_beams, max_length, early_stopping,
// length_penalty, then config.json's task_specific_params[--task] (the same keys and its
// "prefix"), fill what no flag gave (flags > generation_config.json > task_specific_params >
// HF's defaults); the generation settings only with --predict_with_generate. Each value taken
// is a NOTICE line naming file and key; a bad value is a one-line error naming both.
void gen_defaults_apply(TrainArgs *a);
