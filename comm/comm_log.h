// comm/comm_log.h: DeepSpeed's comms logger ("comms_logger" in --deepspeed's config;
// deepspeed/utils/comms_logging.py): every collective the Comm runs, recorded by op name and
// message size with its latency, and DeepSpeed's summary table (op, message size, count,
// total and trimmed-mean latency, algbw, busbw) printed at the end of training.
//
// It is a CommOps table wrapping the one in use (as kernels/cuda/profile.cu wraps a Backend):
// comm_log_install swaps c->ops for it, comm_log_uninstall puts the real one back; nothing
// else in the code changes. Names are DeepSpeed's: all_reduce (device buffers, bucketed
// groups and host scalars alike), all_gather_into_tensor, reduce_scatter_tensor, gather,
// barrier. Message sizes are the bytes DeepSpeed's get_msg_size_from_args counts (the input
// tensor: a rank's partition for all_gather_into_tensor, the whole range for
// reduce_scatter_tensor); the bandwidths are its calc_bw_log's formulas.
//
// Timing, as DeepSpeed's logger makes every op blocking to time it: a GPU rank's collectives
// on the communication stream are timed by its event pair (comm_busy_ms, which waits for them);
// the rest (MPI, host arrays) by the wall clock around the blocking call. So steps run slower
// while it is on. One logger per process.
#pragma once
#include <stdio.h>

#include "comm.h"

#define COMM_LOG_MAX_OPS 16

typedef struct {
    int verbose;                        // one line per recorded collective, rank 0
    int prof_all;                       // record every collective; else only `ops`
    int n_ops;
    char ops[COMM_LOG_MAX_OPS][64];     // DeepSpeed's prof_ops
} CommLogOptions;

// The names train_t5's collectives are recorded under (NULL-terminated).
extern const char *const comm_log_op_names[];
// 1 when `name` is one of comm_log_op_names.
int comm_log_known_op(const char *name);

// Wrap c->ops: from here on every collective of c is recorded (rank 0 prints verbose lines).
void comm_log_install(Comm *c, const CommLogOptions *o);
// DeepSpeed's log_all table of what was recorded (this rank's), then forget it.
void comm_log_summary(FILE *f);
// The real table back (c->ops), the records freed.
void comm_log_uninstall(Comm *c);

// DeepSpeed's convert_size (1536 -> "1.5 KB") and calc_bw_log (Gbps), for the table and tests.
void comm_log_size_text(double bytes, char *out, size_t cap);
void comm_log_bandwidth(const char *op, double bytes, double ms, int world, double *algbw, double *busbw);
