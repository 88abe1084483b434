// zero/debug.c: the test and debug switches from the environment (see debug.h).
#include "debug.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/t5_env.h"

// Test hook T5_TEST_OVERFLOW_STEP=N[:R]: rank R (default every rank) scales step N's
// backward by infinity, as an fp16 overflow in that rank's backward would; the reduction
// carries the inf/nan to every rank, which must all skip step N (tests of the loss scaler
// across ranks, bench/zero_equivalence.sh). Returns N for this rank, else 0.
static long test_overflow_step(int rank) {
    const char *v = t5_env_get(T5_ENV_TEST_OVERFLOW_STEP);
    if (!v || !*v) return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10), r = -1;
    if (*end == ':') r = strtol(end + 1, &end, 10);
    if (*end || n < 1) t5_fail("T5_TEST_OVERFLOW_STEP=\"%s\": expected STEP or STEP:RANK (a test hook)", v);
    return r < 0 || r == rank ? n : 0;
}

ZeroDebug zero_debug_from_env(int rank) {
    ZeroDebug d = {0};
    d.overflow_step = test_overflow_step(rank);
    // Debug hook T5_DUMP_GRAD_NORMS=FILE: rank 0 appends, per optimizer step, every tensor's
    // pre-clip gradient norm (zero/step.c), to set beside the norms torch's clip_grad_norm_
    // stacks (tools/make_exact_fixture.py records HF's; tests/test_exact.c compares them)
    const char *dump = t5_env_get(T5_ENV_DUMP_GRAD_NORMS);
    d.dump_grad_norms = rank == 0 && dump && *dump ? dump : NULL;
    // Test hook T5_DUMP_FP8_SCALES=FILE: every rank writes FILE.rankN, one line per optimizer
    // step with --fp8's scales after the update (zero/step.c): the ranks' files are the same
    // when the amaxes are all-reduced (tests/test_data_parallel.c)
    const char *fp8 = t5_env_get(T5_ENV_DUMP_FP8_SCALES);
    d.dump_fp8_scales = fp8 && *fp8 ? fp8 : NULL;
    // Debug hook T5_STEP_TIMES=1: rank 0 prints where each optimizer step's time went
    // (zero/step.c; the device is synchronized at each mark, which costs a little)
    d.step_times = rank == 0 && t5_env_flag(T5_ENV_STEP_TIMES);
    // Test hook T5_SYNC_UPDATE=1: the offloaded update in place (zero/update_async.c)
    d.sync_update = t5_env_flag(T5_ENV_SYNC_UPDATE);
    // Measurement knob T5_OFFLOAD_THREADS=N: the overlapped update's team size instead of the
    // host's cores less one (bench: is one core fewer still right on this host?)
    const char *th = t5_env_get(T5_ENV_OFFLOAD_THREADS);
    if (th && *th) {
        char *end = NULL;
        long k = strtol(th, &end, 10);
        if (*end || k < 1 || k > 4096) t5_fail("T5_OFFLOAD_THREADS=\"%s\": expected a number of threads, 1 to 4096", th);
        d.offload_threads = (int)k;
    }
    return d;
}
