// zero/zero.h: the ZeRO state of one rank and what every stage shares. A stage decides
// which of the four model states a rank holds whole and which only as its partition
// (zero/partition.h: one contiguous range of the flat parameter space per rank):
//
//   state (per element)        stage 0   stage 1   stage 2   stage 3
//   compute weights (act dtype)  whole     whole     whole     partition  (zero/stage3.c)
//   gradients (act dtype)        whole     whole     partition partition  (zero/stage2.c)
//   fp32 master weights          whole     partition partition partition  (zero/stage1.c)
//   AdamW moments m, v (fp32)    whole     partition partition partition
//
// (the master is the compute weights themselves when training in fp32). One optimizer
// step (zero/step.c) is then the same at every stage:
//   forward/backward per micro-batch   stage 2-3: each unit's gradient is reduce-scattered
//                                       into the owners' partitions as soon as backward
//                                       finishes it (T5UnitHooks); stage 3: each unit's
//                                       weights are all-gathered just before use, freed after
//   reduce gradients                   stage 0-1: all-reduce (in buckets) at the step's end
//   norm, clip, loss-scaler check      on the partition, summed over ranks (stage 2-3)
//   AdamW on the owned range           stage 0: everything; 1-3: the partition
//   publish weights                    stage 1-2: all-gather the partitions of the compute
//                                       weights; stage 3: nothing (gathered at next use)
// docs/ZERO.md walks through a step at each stage.
#pragma once
#include <stddef.h>

#include "../model/t5.h"
#include "comm.h"
#include "optimizer.h"
#include "partition.h"

// Bytes this rank allocated for each model state, counted by the backend's allocator
// (mem_in_use before and after each allocation), and for the working buffers.
typedef struct {
    size_t params, grads, master, moments;
    size_t grad_work;   // stage 2-3: the gradient of the unit backward is writing (+ the embedding's)
    size_t param_work;  // stage 3: the gathered weights of the unit in use
} ZeroMem;

typedef struct ZeroState {
    int stage;          // 0-3
    const Comm *comm;
    T5Model *m;
    Range part;         // this rank's partition of [0, lay.total)
    size_t reduce_bucket;  // elements per all-reduce / reduce-scatter (reduce_bucket_size; 0 = whole unit)
    size_t gather_bucket;  // elements per all-gather (allgather_bucket_size; 0 = whole unit)
    float *master;      // (part) fp32 master weights of the partition: stage >= 1 with 16-bit compute
    void *grad_part;    // (part) act dtype: stage >= 2, the reduced gradient of the partition
    void *param_part;   // (part) act dtype: stage 3, the partition of the compute weights
    void *grad_work;    // stage >= 2: (largest unit but the embedding) the unit gradient in flight
    void *grad_shared;  // stage >= 2: (the shared embedding) its gradient, open for all of backward
    void *param_work;   // stage 3: (largest unit) the gathered weights of the unit in use
    int fetched;        // stage 3: the unit whose weights are in param_work, or -1
    T5UnitHooks hooks;
    AdamW opt;
    ZeroMem mem;
} ZeroState;

// Set up stage `stage` for a loaded model (params, grads, master as model_load left them):
// take the partition, re-home or free what the stage partitions, allocate the AdamW moments
// of the owned range. Buckets: elements per collective (0: a whole unit, or the whole
// model for stage 0-1's all-reduce and all-gather).
// oc NULL: no optimizer state (evaluation only).
void zero_init(ZeroState *z, T5Model *m, const Comm *comm, int stage, size_t reduce_bucket, size_t gather_bucket,
               const AdamWConfig *oc);
void zero_free(ZeroState *z);
// One line per rank with the allocator's counts (what tests/test_data_parallel.c checks).
void zero_print_memory(const ZeroState *z);
// The fp32 weights of the whole model on rank 0 (host, lay.total floats); collective:
// every rank calls it. host is unused on other ranks (may be NULL there).
void zero_params_to_host(ZeroState *z, float *host);
// Evaluation/generation need whole weights: stage 3 gathers them into m->params for the
// duration (2 Psi bytes more) and stops fetching per unit; a no-op at stages 0-2.
void zero_eval_begin(ZeroState *z);
void zero_eval_end(ZeroState *z);

// ---- per stage (zero/stage0.c .. stage3.c) --------------------------------------------
// stage 0-1: sum the whole gradient over ranks, bucket by bucket
void zero_stage0_allreduce_grads(ZeroState *z);
// stage 1-2: all-gather every rank's partition of the compute weights after the update
void zero_stage1_allgather_params(ZeroState *z);
// stage 2-3: gradient hooks (begin: point the unit at a zeroed work buffer; end: reduce-
// scatter it into the owners' partitions, adding what the partition already holds)
void zero_stage2_begin_grads(void *ctx, T5Model *m, int unit);
void zero_stage2_end_grads(void *ctx, T5Model *m, int unit);
// stage 3: weight hooks (fetch: all-gather the unit into param_work; release: forget it)
void zero_stage3_fetch_params(void *ctx, T5Model *m, int unit);
void zero_stage3_release_params(void *ctx, T5Model *m, int unit);
