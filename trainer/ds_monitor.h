// trainer/ds_monitor.h: DeepSpeed's monitors ("tensorboard" and "csv_monitor" in --deepspeed's
// config; deepspeed/monitor/{tensorboard,csv_monitor}.py), written as DeepSpeed 0.19.8's engine
// writes them (runtime/engine.py step()): at each optimizer step, rank 0 writes
//   Train/Samples/lr          the optimizer's lr after the step (what get_lr() returns then:
//                             the scheduler has stepped, so the next update's; an overflow-
//                             skipped step does not advance it)
//   Train/Samples/loss_scale  fp16 only: the loss scale after the step's update
// at step = global_samples, the samples of every step so far (train_batch_size per step).
// Where: os.path.join(output_path, job_name) ("" output_path: the working directory).
//   tensorboard: an event file events.out.tfevents.<time>.<host>.<pid>.0 there (torch's
//                SummaryWriter name, trainer/tensorboard.h's writer), flushed every step;
//   csv_monitor: <tag with / and space -> _>.csv there, opened for appending at each event,
//                a "step,<last part of the tag>" header the first time this process writes
//                the file, then "step,value" rows (Python's csv module: \r\n, repr floats).
// DeepSpeed's timer tags (wall_clock_breakdown, Train/Samples/elapsed_time_ms_*) are not
// written: the key is a no-op here (deepspeed/ds_keys.c).
#pragma once
#include "../deepspeed/ds_config.h"
#include "tensorboard.h"

typedef struct {
    TbWriter tb;         // "tensorboard" enabled (tb.f NULL: off)
    char *csv_dir;       // "csv_monitor" enabled: its directory (NULL: off)
    int csv_header[2];   // the header of Train_Samples_lr.csv / Train_Samples_loss_scale.csv is written
} DsMonitor;

// The enabled monitors' directories made and the event file created; one line each says
// where. Rank 0 only. A directory that cannot be made is one error line naming the key.
void ds_monitor_open(DsMonitor *m, const DsConfig *c);
// The events of one optimizer step (fp16: with the loss scale).
void ds_monitor_step(DsMonitor *m, double lr, int fp16, double loss_scale, long long samples);
void ds_monitor_close(DsMonitor *m);
// os.path.join(a, b) (malloc'd): b when it is absolute or a is empty, else a/b.
char *ds_monitor_path_join(const char *a, const char *b);
