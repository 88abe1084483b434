// zero/options.h: what a run asks of ZeRO (ZeroOptions: the stage, buckets, stage-3 keys,
// offload), the only part of zero/ that the layers translating a DeepSpeed config
// (deepspeed/ds_zero_options.c) and the memory planner (zero/planner.c) need to see.
#pragma once
#include <stddef.h>

#include "nvme.h"  // NvmeAio: the "aio" block

// What a run asks of ZeRO (from --deepspeed's zero_optimization; zeros = stage 0 defaults).
typedef struct {
    int stage;             // 0-3
    size_t reduce_bucket;  // elements per all-reduce / reduce-scatter (0: a whole unit / the whole model)
    size_t gather_bucket;  // elements per all-gather (0: a whole unit / the whole model)
    int overlap_comm;      // a unit's gradient reduction runs while backward goes on, and (stage 1-2)
                           // the weights' all-gather while the next forward goes on (GPU ranks)
    int prefetch;          // stage 3: gather coming units while the current one computes (GPU ranks)
    size_t prefetch_elems; // stage 3: elements gathered ahead (stage3_prefetch_bucket_size; at least
                           // one unit when > 0: a unit is the smallest piece gathered)
    size_t max_live;       // stage 3: gathered elements alive at once (stage3_max_live_parameters):
                           // bounds the buffer pool
    size_t persist_threshold;  // stage 3: units this small stay gathered (stage3_param_persistence_threshold)
    size_t max_reuse;      // stage 3: stage3_max_reuse_distance (elements)
    int offload_optimizer; // stage 1-3: master weights and moments in host memory, AdamW on the CPU (offload.h)
    int pin_memory;        // offload: page-locked host buffers
    int offload_param;     // stage 3 ("offload_param": {"device": "cpu"}): the partition of the compute
                           // weights in host memory; each unit's piece goes up to be gathered
    int offload_param_pin; // offload_param: page-locked
    char nvme_path[512];   // offload to NVMe ("device": "nvme"): the directory of the rank's state file
                           // (zero/nvme.h); "" = host memory
    NvmeAio nvme_aio;      // the NVMe I/O: the config's "aio" block (zero/nvme.h), else DeepSpeed's defaults
    int inference;         // evaluation only (no --do_train): no gradients, master weights or moments,
                           // in the plan (zero/planner.c) as in zero_init (which gets no AdamWConfig)
} ZeroOptions;
