// data/sampler.h: the order in which one epoch visits a dataset. The order is GLOBAL
// (the same on every rank); the trainer cuts it into global batches and each rank takes
// its slice of each (data/collate.h), so a step sees the same examples whatever the
// world size. Every sampler is a pure function of (seed, epoch): resumable.
#pragma once
#include <stdint.h>

#include "dataset.h"

typedef enum {
    SAMPLER_RANDOM = 0,   // a seeded permutation per epoch (default, as HF's RandomSampler)
    SAMPLER_SEQUENTIAL,   // 0, 1, 2, ...
    SAMPLER_SORTISH,      // finetune_trainer's SortishSampler: chunks of 50 batches sorted by
                          // source length, batch with the longest source first, others shuffled
} SamplerType;

int sampler_parse(const char *name, SamplerType *out);  // 1 ok, 0 unknown
const char *sampler_name(SamplerType t);

// Fill order[0..n) for epoch `epoch`. batch_size: the global batch (sortish needs it).
void sampler_epoch_order(SamplerType type, const Dataset *ds, uint64_t seed, int epoch, int batch_size,
                         uint64_t *order);
