// tests/gpu/test_backend_ops.c: every op of the CUDA backend against the fp32 CPU
// reference, as ggml's test-backend-ops does it: one table of cases (OP_CASES), each run
// through two `const Backend *` (oracle: backend_cpu(); subject: the CUDA backend in
// fp32, bf16 and fp16), plus the checks of the Backend object itself (its entries, the
// allocator, the memory cap, error exits). The cases live in backend_ops_pointwise.h and
// backend_ops_matmul_attention.h, backend_ops_search.h and backend_ops_fp8.h, the harness in backend_ops.h; timings are
// test_backend_ops_perf.c's.
// Prints OK / NOT OK per check with the max difference; exits non-zero on any failure.
// Environment: T5_TEST_QUICK=1 small matmul/attention shapes only (for compute-sanitizer);
// T5_GEMM_FALLBACK=1 every GEMM on matmul.cu's simple kernel (read by matmul.cu);
// T5_TEST_GROUP=NAME one group of cases only (group_wanted).
#include <cuda_runtime_api.h>

#include "../../common/check.h"
#include "../../kernels/backend_registry.h"
#include "backend_ops.h"
#include "backend_ops_fp8.h"
#include "backend_ops_matmul_attention.h"
#include "backend_ops_pointwise.h"
#include "backend_ops_search.h"

// Cases run in groups; a group starts the random stream from its seed for each dtype's
// first case, so every case sees the inputs it saw before the table existed.
enum { GROUP_POINTWISE, GROUP_MATMUL_ATTENTION, GROUP_SEARCH, GROUP_FP8, GROUP_COUNT };
static const uint64_t GROUP_SEED[GROUP_COUNT] = {0x853c49e6748fea9bULL, 0x9e3779b97f4a7c15ULL, 0x2545f4914f6cdd1dULL,
                                                 0xda942042e4dd58b5ULL};
static const char *const GROUP_NAME[GROUP_COUNT] = {"pointwise and reductions", "matmul, attention",
                                                    "generation search", "fp8 linear"};

typedef struct {
    const char *op;  // the Backend entries it covers
    int group;
    void (*run)(const OpsPair *p);
} OpCase;

static const OpCase OP_CASES[] = {
    {"embedding_forward/backward", GROUP_POINTWISE, case_embedding},
    {"rmsnorm_forward/backward", GROUP_POINTWISE, case_rmsnorm},
    {"position_bias_forward/backward", GROUP_POINTWISE, case_position_bias},
    {"ffn_act_forward/backward", GROUP_POINTWISE, case_ffn_act},
    {"relu_drop_forward/backward", GROUP_POINTWISE, case_relu_drop},
    {"dropout_add", GROUP_POINTWISE, case_dropout_add},
    {"dropout_add_guard", GROUP_POINTWISE, case_dropout_add_guard},
    {"add, axpy, scale, dropout_forward/backward", GROUP_POINTWISE, case_elementwise},
    {"crossentropy_forward_backward", GROUP_POINTWISE, case_crossentropy},
    {"sumsq", GROUP_POINTWISE, case_sumsq},
    {"tensor_norms", GROUP_POINTWISE, case_tensor_norms},
    {"adamw_update", GROUP_POINTWISE, case_adamw},
    {"residual_rmsnorm_forward", GROUP_POINTWISE, case_residual_rmsnorm},  // last: the cases above keep their inputs
    {"matmul_forward/backward", GROUP_MATMUL_ATTENTION, case_matmul},
    {"attention_forward/backward", GROUP_MATMUL_ATTENTION, case_attention},
    {"matmul_forward_batched, matmul_backward_weights_batched", GROUP_MATMUL_ATTENTION, case_matmul_batched},
    {"beam_topk", GROUP_SEARCH, case_beam_topk},
    {"beam_table_reorder", GROUP_SEARCH, case_beam_table_reorder},
    {"attention_decode", GROUP_SEARCH, case_attention_decode},
    {"kv_append", GROUP_SEARCH, case_kv_append},
    {"qkv_append", GROUP_SEARCH, case_qkv_append},
    {"fp8_matmul_forward/backward", GROUP_FP8, case_fp8_matmul},
    {"fp8_matmul_forward/backward: bitwise rounding", GROUP_FP8, case_fp8_rounding},
    {"fp8_scales_update", GROUP_FP8, case_fp8_scales_update},
};

static const Dtype DTYPES[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

static const Backend *open_subject(Dtype dt) { return backend_open("cuda", 0, dt); }

// ---- error exits (forked children, before this process uses the GPU) ----------------------

static void child_cap(void) {
    const Backend *be = open_subject(DTYPE_F32);
    be->set_mem_cap(be->mem_in_use() + ((size_t)1 << 20));
    be->alloc((size_t)2 << 20);
}
static void child_malloc_fail(void) { open_subject(DTYPE_F32)->alloc((size_t)1 << 50); }  // 1 PiB
static void child_bad_free(void) {
    int x;
    open_subject(DTYPE_F32)->free(&x);
}
static void child_bad_label(void) {
    const Backend *be = open_subject(DTYPE_F32);
    const int labels[3] = {3, 40, -100};  // 40 is outside V = 29
    float *x = rand_dt(DTYPE_F32, 3 * 29, 1.0f);
    void *d = dev_from(be, DTYPE_F32, x, 3 * 29);
    int *dl = dev_ints(be, labels, 3);
    be->crossentropy_forward_backward(d, d, dl, 3, 29, 0.1f, 1.0f);
}
static void child_bad_dropout(void) {
    const Backend *be = open_subject(DTYPE_F32);
    void *d = be->alloc(64);
    DropoutArgs drop = {1.5f, 1};
    be->dropout_forward(d, d, 16, drop);
}

static void test_error_exits(void) {
    printf("--- error exits (children)\n");
    check_child_exit("alloc beyond --max_gpu_memory", child_cap, "GPU memory cap of", 1);
    check_child_exit("cudaMalloc failure names bytes", child_malloc_fail, "1125899906842624 bytes", 1);
    check_child_exit("cuda_free of a foreign pointer", child_bad_free, "not a live pointer", 1);
    check_child_exit("crossentropy label outside V", child_bad_label, "label 40 at position 1", 0);
    check_child_exit("dropout p outside [0,1]", child_bad_dropout, "dropout probability", 0);
}

// ---- the Backend objects ---------------------------------------------------------------------

static void test_backend_structs(void) {
    const char *names[] = {"cuda-fp32", "cuda-bf16", "cuda-fp16"};
    for (int i = 0; i < 3; i++) {
        const Backend *be = open_subject(DTYPES[i]);
        int ok = be && strcmp(be->name, names[i]) == 0 && be->act_dtype == DTYPES[i] && be->device_memory == 1 &&
                 be->ctx != NULL && be->ctx == open_subject(DTYPE_F32)->ctx;  // one context per device
        // every entry bound (the struct is a sequence of function pointers from synchronize on)
        const void *const *fp = (const void *const *)&be->synchronize;
        const void *const *end = (const void *const *)(&be->graph_free + 1);
        int nulls = 0;
        for (; fp < end; fp++) nulls += *fp == NULL;
        char name[160];
        snprintf(name, sizeof name, "backend %s: name \"%s\", act_dtype, device memory, shared ctx, %d NULL entries",
                 dt_name(DTYPES[i]), be ? be->name : "?", nulls);
        test_check(ok && nulls == 0, name);
    }
}

static void test_allocator(const Backend *S) {
    printf("--- allocator\n");
    char buf[256];
    const size_t base = S->mem_in_use(), peak0 = S->mem_peak();
    snprintf(buf, sizeof buf, "after opening: %zu bytes in use (the 32 MiB cuBLASLt workspace counts)", base);
    test_check(base >= ((size_t)32 << 20), buf);
    void *a = S->alloc(1000);
    snprintf(buf, sizeof buf, "alloc 1000: in use %zu = base + %zu", S->mem_in_use(), S->mem_in_use() - base);
    test_check(S->mem_in_use() == base + 1000, buf);
    void *b = S->alloc(5000);
    const size_t peak_b = peak0 > base + 6000 ? peak0 : base + 6000;
    snprintf(buf, sizeof buf, "alloc 5000: in use base + %zu, peak %zu (want %zu)", S->mem_in_use() - base,
             S->mem_peak(), peak_b);
    test_check(S->mem_in_use() == base + 6000 && S->mem_peak() == peak_b, buf);
    unsigned char *h = malloc(5000);
    memset(h, 0xab, 5000);
    S->to_host(h, b, 5000);
    size_t nonzero = 0;
    for (int i = 0; i < 5000; i++) nonzero += h[i] != 0;
    snprintf(buf, sizeof buf, "alloc returns zeroed memory (%zu of 5000 bytes non-zero)", nonzero);
    test_check(nonzero == 0, buf);
    free(h);
    S->free(a);
    snprintf(buf, sizeof buf, "free 1000: in use base + %zu, peak unchanged %zu", S->mem_in_use() - base,
             S->mem_peak());
    test_check(S->mem_in_use() == base + 5000 && S->mem_peak() == peak_b, buf);
    S->free(b);
    void *z1 = S->alloc(0), *z2 = S->alloc(0);
    snprintf(buf, sizeof buf, "alloc 0: distinct non-NULL pointers, in use base + %zu", S->mem_in_use() - base);
    test_check(z1 && z2 && z1 != z2 && S->mem_in_use() == base, buf);
    S->free(z1);
    S->free(z2);
    S->set_mem_cap(base + 10000);
    snprintf(buf, sizeof buf, "mem_cap reads back the cap set (%zu)", S->mem_cap());
    test_check(S->mem_cap() == base + 10000, buf);
    void *c = S->alloc(8000);  // fits under the cap
    S->free(c);
    S->set_mem_cap(0);
    snprintf(buf, sizeof buf, "alloc under the cap succeeds; all freed: in use base + %zu", S->mem_in_use() - base);
    test_check(S->mem_in_use() == base, buf);
}

// ---- the table ----------------------------------------------------------------------------------

// T5_TEST_GROUP=fp8 (or pointwise, matmul, search): that group only, after the checks of the
// Backend object (a GPU call that measures one group). Unset: every group.
static int group_wanted(int group) {
    static const char *const KEY[GROUP_COUNT] = {"pointwise", "matmul", "search", "fp8"};
    const char *only = getenv("T5_TEST_GROUP");
    if (!only || !*only) return 1;
    int known = 0;
    for (int g = 0; g < GROUP_COUNT; g++) known |= !strcmp(only, KEY[g]);
    if (!known) t5_fail("T5_TEST_GROUP=\"%s\": expected pointwise, matmul, search or fp8", only);
    return !strcmp(only, KEY[group]);
}

static void run_group(int group) {
    if (!group_wanted(group)) {
        printf("--- %s: left out (T5_TEST_GROUP)\n", GROUP_NAME[group]);
        return;
    }
    for (int d = 0; d < 3; d++) {
        GpuInfo g;
        if (DTYPES[d] == DTYPE_BF16 && backend_cuda_device_info(0, &g) && g.cc < GPU_CC_BF16) {
            printf("--- %s: bf16 skipped: compute capability %d.%d (bf16 needs 8.0)\n", GROUP_NAME[group], g.cc / 10,
                   g.cc % 10);
            continue;
        }
        const OpsPair p = {backend_cpu(), open_subject(DTYPES[d]), DTYPES[d]};
        if (d == 0) rng_seed(GROUP_SEED[group]);
        printf("--- %s: %s\n", GROUP_NAME[group], dt_name(p.dt));
        for (size_t i = 0; i < sizeof OP_CASES / sizeof OP_CASES[0]; i++)
            if (OP_CASES[i].group == group) OP_CASES[i].run(&p);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ops_quick = getenv("T5_TEST_QUICK") && strcmp(getenv("T5_TEST_QUICK"), "0") != 0;
    fp8_quick = ops_quick;
    test_error_exits();  // before opening the backend: the children open it themselves
    const Backend *S = open_subject(DTYPE_F32);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("device: %s (%d SMs)%s\n", prop.name, prop.multiProcessorCount, ops_quick ? ", quick mode" : "");
    test_backend_structs();
    test_allocator(S);
    const size_t base = S->mem_in_use();
    run_group(GROUP_POINTWISE);
    // what remains is the ops' kept scratch (sort buffers, partial sums, bucket tables): small
    char buf[200];
    const size_t kept = S->mem_in_use() - base;
    snprintf(buf, sizeof buf, "test buffers all freed: %zu bytes of op scratch kept (< 16 MiB)", kept);
    test_check(S->mem_in_use() >= base && kept < ((size_t)16 << 20), buf);
    run_group(GROUP_MATMUL_ATTENTION);
    run_group(GROUP_SEARCH);
    run_group(GROUP_FP8);
    printf("device memory: %.1f MiB in use, %.1f MiB peak\n", S->mem_in_use() / 1048576.0,
           S->mem_peak() / 1048576.0);
    S->synchronize();
    return test_summary();
}
