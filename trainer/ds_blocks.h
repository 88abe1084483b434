// trainer/ds_blocks.h: the DeepSpeed config's blocks that act during the training loop
// (docs/TRAINER.md "DeepSpeed blocks"), called by trainer/trainer.c at the loop's begin, around
// each step and at its end:
//   tensorboard, csv_monitor  rank 0's monitor files at each optimizer step (ds_monitor.h);
//   comms_logger              the Comm's collectives recorded (comm/comm_log.h), rank 0's table
//                             printed when training ends;
//   flops_profiler            GPU runs: the step after profile_step steps runs on rank 0 under
//                             the CUDA op profiler (kernels/backend_registry.h), whose table
//                             (top_modules ops) goes to stdout or output_file.
// activation_checkpointing acts before the plan (train_args_take_ds_checkpointing) and aio in
// the NVMe engine (zero/nvme.h); the start-up lines and NOTICEs are trainer/deepspeed.c's.
#pragma once
#include "../deepspeed/ds_config.h"
#include "../comm/comm.h"
#include "../model/t5.h"
#include "../optim/lr_schedule.h"
#include "../zero/zero.h"
#include "ds_monitor.h"

typedef struct {
    DsMonitor mon;
    int comm_logging;      // the comms logger is installed on the Comm
    const Backend *real;   // during the profiled step: the backend the profiler wraps (else NULL)
    double t0;             // the profiled step's start
    long updates;          // optimizer updates applied so far (skipped fp16 steps do not count)
} DsBlocks;

// updates: the optimizer's step count now (a resumed run's). Every rank calls it.
void ds_blocks_begin(DsBlocks *b, const DsConfig *c, Comm *comm, long updates);
// Before a step, after steps_done optimizer steps.
void ds_blocks_step_begin(DsBlocks *b, const DsConfig *c, T5Model *m, int cuda, int rank, int steps_done);
// After it: the profile (if it ran), the monitors' events (lr after the step from the schedule,
// the loss scale after it, at step = samples so far).
void ds_blocks_step_end(DsBlocks *b, const DsConfig *c, T5Model *m, ZeroState *z, int skipped,
                        const LrSchedule *sched, int fp16, double loss_scale, long long samples);
// The loop ended (finished or stopped by a signal): the comms table (rank 0), files closed.
void ds_blocks_end(DsBlocks *b, Comm *comm);
