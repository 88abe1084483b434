// zero/debug.h: the test and debug switches of a rank's ZeRO state in one object (ZeroDebug):
// a fault to inject (an overflowing gradient), a per-step dump of the gradient norms, the
// step's phase times, the offloaded update run in place. Filled once at set-up
// (zero_debug_from_env: the only place in zero/ that reads these T5_* variables) and read by
// zero/step.c and zero/update_async.c; nothing else in zero/ asks the environment about them.
#pragma once

typedef struct {
    long overflow_step;           // T5_TEST_OVERFLOW_STEP=N[:R]: this rank's gradient overflows at step N (0: never)
    const char *dump_grad_norms;  // T5_DUMP_GRAD_NORMS=FILE (rank 0): file to append each step's per-tensor norms to
    const char *dump_fp8_scales;  // T5_DUMP_FP8_SCALES=FILE (every rank): FILE.rankN, --fp8's scales after each step
    int step_times;               // T5_STEP_TIMES=1 (rank 0): print each step's phases (zero/step.c)
    int sync_update;              // T5_SYNC_UPDATE=1: the offloaded update runs on the calling thread
                                  // (zero/update_async.c), for the CPU tests' comparison
    int offload_threads;          // T5_OFFLOAD_THREADS=N: the overlapped update's OpenMP team (0: the
                                  // default, the host's cores less one; zero/update_async.c)
} ZeroDebug;

// step_times: wall seconds at the step's marks (zero/step.c)
typedef struct {
    double step_begin, backward_end;
} ZeroStepMarks;

// The switches as the environment sets them for rank `rank` (zero/debug.c); a malformed
// T5_TEST_OVERFLOW_STEP is an error.
ZeroDebug zero_debug_from_env(int rank);
