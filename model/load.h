// model/load.h: one call from a --model argument to a ready T5Model: resolve the
// directory or preset, decide the head's tying from the weights file, build the
// layout, and load (or randomly initialize) the parameters.
#pragma once
#include "t5.h"

typedef struct {
    int init_random;     // 1: random init (required for a preset name without weights)
    unsigned long long seed;
    float **host_weights;  // non-NULL: receives the fp32 weights on the host (lay.total floats), for
                           // zero_init to place the optimizer's master where the ZeRO stage and
                           // offload want it (it takes them over); NULL: they are freed here (then
                           // 16-bit compute cannot train: its fp32 master comes only from them)
    int defer_weights;     // nothing on the device at all (needs host_weights): zero_init allocates
                           // and uploads only what the stage keeps (stage 3: the rank's partition),
                           // so set-up never holds a whole copy on the device
    int device_init;       // with init_random and defer_weights: no host copy at all (*host_weights
                           // = NULL); zero_init_random makes the weights where they live (the GPU
                           // for the CUDA backend: t5-large start-up neither draws nor copies 3 GB)
    int shards_init;       // with defer_weights, not init_random: no host copy at all (*host_weights =
                           // NULL); zero_init_checkpoint fills each buffer from the resumed
                           // checkpoint's shards by ranges (no whole model on any rank's host)
    struct HostWeightsJob *job;  // non-NULL: the host weights come from this model_weights_begin
                                 // (same model, cfg and options), joined instead of made again
} ModelLoadOptions;

// Start-up overlap: makes the fp32 host weights (random init, or read from the model's
// file) on a helper thread while the caller opens the device and plans; pass the job in
// ModelLoadOptions.job to model_load_resolved, which waits for it. model_arg, cfg, has_weights
// and opt as they will be passed to model_load_resolved.
typedef struct HostWeightsJob HostWeightsJob;
HostWeightsJob *model_weights_begin(const char *model_arg, const T5Config *cfg, int has_weights,
                                    ModelLoadOptions opt);
// Waits for a job whose weights will not be used and frees it (NULL: nothing).
void model_weights_discard(HostWeightsJob *job);

void model_load(T5Model *m, const char *model_arg, const Backend *be, ModelLoadOptions opt);
// The same with model_arg's config already resolved (hf_resolve_model's cfg and return
// value): the trainer parses config.json once, at start-up (trainer/plan.c).
void model_load_resolved(T5Model *m, const char *model_arg, const T5Config *cfg, int has_weights,
                         const Backend *be, ModelLoadOptions opt);
