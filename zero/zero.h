// zero/zero.h: the ZeRO state of one rank and what every stage shares. A stage decides
// which of the four model states a rank holds whole and which only as its partition
// (zero/partition.h: one contiguous range of the flat parameter space per rank):
//
//   state (per element)        stage 0   stage 1   stage 2   stage 3
//   compute weights (act dtype)  whole     whole     whole     partition  (zero/params_fetch.c)
//   gradients (act dtype)        whole     whole     partition partition  (zero/grads_reduce_scatter.c)
//   fp32 master weights          whole     partition partition partition  (zero/params_allgather.c)
//   AdamW moments m, v (fp32)    whole     partition partition partition
//   (offload_optimizer: the last two rows in host memory, updated by the CPU: offload.h)
//
// (the master is the compute weights themselves when training in fp32). zero_init decides
// once where the range a rank updates lives and records it in ZeroState.own (a ZeroOwned,
// zero/owned.h): the range (stage 0: all; 1-3: the partition), and for its fp32 master, its
// moments m and v, its reduced gradient and its compute weights a pointer, the memory
// (device or host) and the dtype. The step, the checkpoint and the weights' host copy read
// that record; nothing after zero_init asks the stage or offload where a state is. The model
// (T5Model) holds only the compute weights and gradients it computes with. One optimizer
// step (zero/step.c) is then the same at every stage:
//   forward/backward per micro-batch   segment by segment (model/t5.h T5Segment), each
//                                       collective named in zero/step.c: stage 0-1: on the
//                                       step's last micro-batch, each unit's gradient is
//                                       all-reduced as soon as backward finishes it
//                                       (zero/grads_allreduce.c); stage 2-3: each unit's
//                                       gradient is reduce-scattered into the owners'
//                                       partitions as soon as backward finishes it; stage 3:
//                                       each unit's weights are all-gathered just before
//                                       use, freed after
//   reduce gradients                   wait for the collectives issued during backward
//   norm, clip, loss-scaler check      on the partition, summed over ranks (stage 2-3)
//   AdamW on the owned range           stage 0: everything; 1-3: the partition
//   publish weights                    stage 1-2: all-gather the partitions of the compute
//                                       weights unit by unit, in forward order; the next
//                                       forward waits for each unit as it reaches it
//                                       (zero/params_allgather.c); stage 3: nothing (gathered at use)
// docs/ZERO.md walks through a step at each stage.
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "../model/t5.h"
#include "../comm/comm.h"
#include "offload.h"
#include "../optim/adamw.h"
#include "debug.h"
#include "grads_reduce_scatter.h"
#include "options.h"
#include "owned.h"
#include "params_fetch.h"
#include "partition.h"
#include "phases.h"
#include "update_async.h"

// Bytes this rank allocated for each model state, counted by the backend's allocator
// (mem_in_use before and after each allocation), and for the working buffers.
typedef struct {
    size_t params, grads, master, moments;
    size_t grad_work;   // stage 2-3: the gradient of the unit backward is writing (+ the embedding's)
    size_t param_work;  // stage 3: the gathered weights of the unit in use
    size_t host;        // offload: master + moments + staging in host memory
    size_t host_grads;  // offload at stage 2-3: the gradient partition in host memory (grads.on_host)
} ZeroMem;

typedef struct ZeroState {
    int stage;          // 0-3
    const Comm *comm;
    T5Model *m;
    Range part;         // this rank's partition of [0, lay.total)
    size_t reduce_bucket;  // elements per all-reduce / reduce-scatter (reduce_bucket_size; 0 = whole unit)
    size_t gather_bucket;  // elements per all-gather (allgather_bucket_size; 0 = whole unit)
    int overlap_comm;            // ZeroOptions
    int offload;                 // the optimizer state is in host memory (off)
    ZeroOffload off;
    float *master;      // (part) fp32 master weights on the device: 16-bit compute without offload
    ZeroGradBuffers grads;  // stage 2-3: the gradient partition and the work buffers (grads_reduce_scatter.h)
    // stage 1-2: each unit's pending all-gather of the updated weights (COMM_TICKET_NONE once
    // the compute stream waited for it)
    CommTicket *unit_ticket;    // (lay.n_units)
    long steps_seen;            // optimizer steps taken or skipped (zero_step_apply calls)
    ZeroDebug debug;            // test and debug switches (debug.h)
    ZeroStepMarks marks;        // debug.step_times: the step's marks
    ZeroFetch fetch;            // stage 3: the partition of the compute weights and the units gathered from it
    ZeroUpdateAsync upd;        // offload at stage 1-2: the CPU update on its own thread (update_async.h)
    ZeroPhases phases;          // offload: where the steps' time went (phases.h)
    T5UnitVisitor visitor;      // evaluation at stage 3 (zero/eval.c): how t5_forward and generation fetch units
    AdamW opt;
    ZeroOwned own;      // where the owned range's master, moments, gradient and weights live (owned.h)
    ZeroMem mem;
} ZeroState;

// Set up stage `stage` for a loaded model (params and grads as model_load left them, or not
// allocated with defer_weights): take the partition, re-home or free what the stage
// partitions, place the fp32 master and allocate the AdamW moments of the owned range, and
// record where each lives (z->own). Buckets: elements per collective (0: a whole unit, or
// the whole model for stage 0-1's all-reduce and all-gather).
// oc NULL: no optimizer state (evaluation only). host_weights: the fp32 weights on the host
// from model_load (ModelLoadOptions.host_weights; lay.total floats, freed here), the source
// of the master; NULL: fp32 compute only (the weights are the master), or evaluation.
void zero_init(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
               float *host_weights);
// The same for a model loaded with defer_weights and no host copy (ModelLoadOptions
// device_random_init): the random init (seed) is made where each buffer lives, through
// the backend (model/params.h params_init_random_backend): the compute weights, the fp32
// master and stage 3's partition on the device, an offloaded master on the host. The
// values are params_init_random's (kernels/init_rng.h says how close CUDA's are).
void zero_init_random(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
                      unsigned long long seed);
// The same for a resumed run (ModelLoadOptions shards_init: no host copy either): each
// buffer is filled from the fp32 master in the checkpoint's shards (zero/checkpoint.h),
// read by flat ranges a chunk at a time, so a rank never holds the whole model on the host
// (stage 3: only its partition is read). zero_load_optimizer then verifies the files and
// reads the master and moments of the owned range. In counting mode (T5_COUNT_HOST_MEM=1)
// prints the "checkpoint host memory: weights" line of what the reads held at most.
void zero_init_checkpoint(ZeroState *z, T5Model *m, const Comm *comm, const ZeroOptions *o, const AdamWConfig *oc,
                          const char *dir);
// Stage 0 on one rank (tools and tests that train alone).
ZeroOptions zero_options_stage(int stage);
void zero_free(ZeroState *z);
// One line per rank with the allocator's counts (what tests/test_data_parallel.c checks).
void zero_print_memory(const ZeroState *z);
// The fp32 weights of the whole model on rank 0 (host, lay.total floats); collective:
// every rank calls it. host is unused on other ranks (may be NULL there).
void zero_params_to_host(ZeroState *z, float *host);
// The fp32 weights as a saved model reads them (trainer/checkpoint.c trainer_save_model),
// without knowing where they live: has: this rank has them (16-bit compute loaded without
// host weights has none); partitioned: each rank holds only its partition (stages 1-3; else
// every rank holds them whole); piece: the part of flat range [lo, hi) this rank sends to
// rank 0 (whole: rank 0 all of it, the others none; partitioned: its partition's share;
// none: {0, 0}); piece_to_host: those weights into dst (host, p.end - p.begin floats).
int zero_has_fp32_weights(const ZeroState *z);
int zero_weights_partitioned(const ZeroState *z);
Range zero_weights_piece(const ZeroState *z, size_t lo, size_t hi);
void zero_weights_piece_to_host(const ZeroState *z, Range p, float *dst);
// A resumed run: the optimizer steps the checkpoint took (zero/step.c counts on from there).
void zero_resume_at_step(ZeroState *z, long steps);
// Evaluation and generation (zero/eval.c): begin finishes what the last step left in flight
// (stages 0-2 then hold whole weights) and, at stage 3, installs the unit visitor (model/t5.h)
// through which t5_forward and generation gather each unit as they read it, in lock-step
// across ranks; end removes it. z may be NULL (no ZeRO state: nothing to do).
void zero_eval_begin(ZeroState *z);
void zero_eval_end(ZeroState *z);

// ---- per stage: grads_allreduce.c (0-1), params_allgather.c (1-2), grads_reduce_scatter.c (2-3), params_fetch.c (3)
// stage 0-1: all-reduce a finished unit's gradient over ranks in buckets of
// reduce_bucket_size, on the communication stream (zero/step.c: on the step's last micro-batch)
void zero_allreduce_unit_grads(ZeroState *z, int unit);
// stage 1-2: all-gather every rank's partition of the compute weights after the update,
// unit by unit (asynchronous with overlap_comm); wait_unit: the compute stream waits for a
// unit's gather before forward or backward reads it (zero/step.c)
void zero_allgather_params(ZeroState *z);
void zero_allgather_unit(ZeroState *z, int unit);  // one unit's (the same, asynchronous with overlap_comm)
void zero_allgather_wait_unit(ZeroState *z, int unit);
// stage 1-2 with offload (update_async.c): the CPU update on its own thread while the next
// forward starts; publish_unit (zero/step.c, before forward reads a unit) waits for the
// new weights of the units up to it and all-gathers them;
// join waits for the thread and publishes what is left. overlaps: this run does so (not
// with the test hook T5_SYNC_UPDATE=1).
int zero_update_overlaps(const ZeroState *z);
void zero_update_start(ZeroState *z, float lr, float grad_scale);
// stage 0, or stages 1-2 on one rank, without offload (update_async.c): the device update on
// the backend's side stream, unit by unit, while the next forward starts; publish_unit makes
// the compute stream wait for the unit's point; join for all of them (and the cleared
// gradients). side_overlaps: this run does so (not with T5_SYNC_UPDATE=1, nor on a backend
// without a side stream: the op profiler's).
int zero_update_side_overlaps(const ZeroState *z);
void zero_update_start_side(ZeroState *z, float lr, float grad_scale);
void zero_update_publish_unit(ZeroState *z, int unit);
void zero_update_join(ZeroState *z);
// Everything a step left in flight has finished: the offloaded update's thread, the
// collectives (the compute stream waits for them). Before reading weights or optimizer
// state outside forward/backward, or timing a step.
void zero_sync(ZeroState *z);
// The gradients the step consumed are cleared for the next one (zero/step.c).
void zero_clear_grads(ZeroState *z);
// stage 2-3 (zero/step.c around backward's segments): open points the unit's gradient at a
// zeroed work buffer; unit_grads reduce-scatters it into the owners' partitions, adding what
// the partition already holds (last_micro: offload also takes the piece's norms)
void zero_reduce_scatter_open(ZeroState *z, int unit);
void zero_reduce_scatter_unit_grads(ZeroState *z, int unit, int last_micro);
// stage 2-3 with grads.on_host: wait until every piece of this backward is in host memory
// (zero/step.c after each backward; the next one adds to them, the optimizer reads them)
void zero_reduce_scatter_wait_host(ZeroState *z);
// stage 3: one line with the fetches so far (zero_fetch_print_stats); nothing at other stages
void zero_stage3_print_stats(const ZeroState *z);
// offload (zero/phases.c): reset starts counting the phases again (bench: at the first timed
// step); print writes "offload phases (ms per step, N steps): ..." and a key=value line for
// scripts ("PHASES ..."); nothing without offload.
void zero_phases_reset(ZeroState *z);
void zero_phases_print(const ZeroState *z, FILE *f);
