// common/t5_env.h: the T5_* environment variables, every one read here and nowhere else.
//
// Two kinds. Settings that must reach every rank a launcher starts (the heartbeat's limit,
// the NCCL watchdog's, the host name a rank gives, the launcher's own mark on its children):
// docs/LAUNCH.md lists them. Test and debug hooks (fault injection, timers and dumps, limits a
// CPU test fakes): docs/TESTS.md lists them. A user's setting is a flag or a config key; these
// live in the environment because they cross process boundaries or must stay out of --help.
// Each call site keeps its own parsing and error text; this file only names the variables,
// so `grep T5_ENV_` finds every switch and no other library file reads a T5_ variable itself.
#pragma once

typedef enum {
    // settings passed to every rank
    T5_ENV_HEARTBEAT_TIMEOUT,  // seconds a silent rank may stay silent (comm/liveness.c)
    T5_ENV_NCCL_TIMEOUT,       // seconds a GPU collective may take (comm/comm_nccl.cu; --ddp_timeout)
    T5_ENV_HOST_NAME,          // the name this rank gives its host (comm/hosts.c)
    T5_ENV_LAUNCHER,           // "num_gpus": set by comm/launch.c for the ranks it starts
    // test and debug hooks
    T5_ENV_TEST_STALL_RANK,    // with T5_TEST_STALL_S: that rank sleeps after step 2 (trainer/trainer.c)
    T5_ENV_TEST_STALL_S,
    T5_ENV_TEST_SIGNAL,        // WHERE:SIG[,SIG][@RANK]: raise a stop signal at a named point (trainer/signals.c)
    T5_ENV_TEST_OVERFLOW_STEP, // STEP[:RANK]: that step's backward overflows (zero/zero.c)
    T5_ENV_TEST_COMPUTE_CAPABILITY,  // MAJOR.MINOR the GPU checks assume (kernels/gpu_arch.c)
    T5_ENV_TEST_HOST_AVAILABLE,      // bytes of host memory the plan assumes free (zero/planner.c)
    T5_ENV_TEST_NVME_FREE,           // bytes free on the NVMe path the plan assumes (zero/planner.c)
    T5_ENV_OFFLOAD_CHUNK,      // elements per offload transfer (zero/offload.c)
    T5_ENV_SYNC_UPDATE,        // 1: the update never overlaps the next forward (zero/update_async.c)
    T5_ENV_OFFLOAD_THREADS,    // N: the offloaded update's OpenMP team (zero/update_async.c; a measurement knob)
    T5_ENV_DUMP_GRAD_NORMS,    // FILE: rank 0 appends each tensor's pre-clip gradient norm (zero/zero.c)
    T5_ENV_DUMP_FP8_SCALES,    // FILE: each rank writes --fp8's scales after every step to FILE.rankN (zero/step.c)
    T5_ENV_STEP_TIMES,         // 1: rank 0 prints where each step's time went (zero/zero.c)
    T5_ENV_EVAL_PROFILE,       // 1: rank 0 prints where an evaluation's time went (trainer/evaluate.c)
    T5_ENV_GEN_GRAPHS,         // 0: generation's decoder steps run op by op, no CUDA graphs (model/kv_decoder.c)
    T5_ENV_COUNT_HOST_MEM,     // 1: count host allocations (common/check.c)
    T5_ENV_GEMM_VERBOSE,       // 1: each cuBLASLt choice printed (kernels/cuda/matmul.cu)
    T5_ENV_GEMM_FALLBACK,      // 1: every GEMM on the simple CUDA kernel (kernels/cuda/matmul.cu)
    T5_ENV_COUNT
} T5EnvVar;

// The variable's value as getenv returns it (NULL when unset); read at each call, so a test
// that sets a variable between two calls sees the new value.
const char *t5_env_get(T5EnvVar v);
// "T5_HEARTBEAT_TIMEOUT" etc., for messages.
const char *t5_env_name(T5EnvVar v);
// 1 when the variable is set, not empty and not "0".
int t5_env_flag(T5EnvVar v);
