// common/t5_env.c: the one place that reads T5_* environment variables (see t5_env.h).
#include "t5_env.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *const k_names[T5_ENV_COUNT] = {
    [T5_ENV_HEARTBEAT_TIMEOUT] = "T5_HEARTBEAT_TIMEOUT",
    [T5_ENV_NCCL_TIMEOUT] = "T5_NCCL_TIMEOUT",
    [T5_ENV_HOST_NAME] = "T5_HOST_NAME",
    [T5_ENV_LAUNCHER] = "T5_LAUNCHER",
    [T5_ENV_TEST_STALL_RANK] = "T5_TEST_STALL_RANK",
    [T5_ENV_TEST_STALL_S] = "T5_TEST_STALL_S",
    [T5_ENV_TEST_SIGNAL] = "T5_TEST_SIGNAL",
    [T5_ENV_TEST_OVERFLOW_STEP] = "T5_TEST_OVERFLOW_STEP",
    [T5_ENV_TEST_COMPUTE_CAPABILITY] = "T5_TEST_COMPUTE_CAPABILITY",
    [T5_ENV_TEST_HOST_AVAILABLE] = "T5_TEST_HOST_AVAILABLE",
    [T5_ENV_TEST_NVME_FREE] = "T5_TEST_NVME_FREE",
    [T5_ENV_OFFLOAD_CHUNK] = "T5_OFFLOAD_CHUNK",
    [T5_ENV_SYNC_UPDATE] = "T5_SYNC_UPDATE",
    [T5_ENV_OFFLOAD_THREADS] = "T5_OFFLOAD_THREADS",
    [T5_ENV_DUMP_GRAD_NORMS] = "T5_DUMP_GRAD_NORMS",
    [T5_ENV_DUMP_FP8_SCALES] = "T5_DUMP_FP8_SCALES",
    [T5_ENV_STEP_TIMES] = "T5_STEP_TIMES",
    [T5_ENV_EVAL_PROFILE] = "T5_EVAL_PROFILE",
    [T5_ENV_GEN_GRAPHS] = "T5_GEN_GRAPHS",
    [T5_ENV_COUNT_HOST_MEM] = "T5_COUNT_HOST_MEM",
    [T5_ENV_GEMM_VERBOSE] = "T5_GEMM_VERBOSE",
    [T5_ENV_GEMM_FALLBACK] = "T5_GEMM_FALLBACK",
};

const char *t5_env_name(T5EnvVar v) {
    if ((int)v < 0 || v >= T5_ENV_COUNT || !k_names[v])
        t5_die(__FILE__, __LINE__, "a T5_* variable code outside the table", "add it to k_names (a bug)");
    return k_names[v];
}

const char *t5_env_get(T5EnvVar v) { return getenv(t5_env_name(v)); }

int t5_env_flag(T5EnvVar v) {
    const char *s = t5_env_get(v);
    return s && s[0] && strcmp(s, "0") != 0;
}
