// data/collate.h: examples -> a padded T5Batch, as HF's DataCollatorForSeq2Seq with
// T5: source truncated to max_source_length-1 tokens + </s>, target likewise; dynamic
// padding to the longest in the batch; input pad 0 with attention_mask 0; labels padded
// with -100; decoder_input_ids = labels shifted right (start 0, -100 -> pad 0).
#pragma once
#include <stdint.h>

#include "../model/t5.h"
#include "dataset.h"

typedef struct {
    T5Batch batch;         // points into the arrays below
    int *input_ids, *attention_mask, *labels, *decoder_input_ids;
    int capB, capS, capT;  // allocated capacity
} Collated;

// Collate the examples idx[0..B) of ds. Reuses c's storage (grows as needed).
void collate_batch(Collated *c, const Dataset *ds, const uint64_t *idx, int B, int max_source_length,
                   int max_target_length, int eos_id, int pad_id, int decoder_start_id);
void collate_free(Collated *c);
// Label tokens (labels != -100) the examples idx[0..n) get in collate_batch: each target
// truncated to max_target_length. Every rank counts a step's global batch this way.
long collate_label_count(const Dataset *ds, const uint64_t *idx, long n, int max_target_length);
// The input_ids tokens of the batch collate_batch makes of these examples: padded (n x the
// longest truncated source, HF's input_ids.numel()) or not (the sources' truncated lengths).
long collate_source_count(const Dataset *ds, const uint64_t *idx, long n, int max_source_length, int padded);
