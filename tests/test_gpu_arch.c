// tests/test_gpu_arch.c: which GPUs a build runs on and what each precision needs
// (kernels/gpu_arch.c), on the CPU: CUDA's cubin/PTX rules for the default targets and for
// narrower builds, the targets in words, the compute-capability parser and the test hook, and
// the start-up refusals (one line each): a GPU below every target, bf16 and TF32 below 8.0.
// The same refusals run through ./train_t5 --explain with the hook (tests/post_commands.sh)
// and, on the GPU machine, against the real GPU (bench/gpu_targets.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gpu_arch.h"
#include "test.h"
#include "test_fork.h"

#define DEFAULT_CUBINS "75 80 86 89 90"
#define DEFAULT_PTX "90"

static void expect_match(int cc, const char *cubins, const char *ptx, GpuRunHow how, int target) {
    int got = -1;
    GpuRunHow h = gpu_arch_match(cc, cubins, ptx, &got);
    char what[256];
    snprintf(what, sizeof what, "cc %d.%d on cubins \"%s\" + PTX \"%s\": %s %d (got %s %d)", cc / 10, cc % 10, cubins,
             ptx, how == GPU_RUN_CUBIN ? "cubin" : how == GPU_RUN_PTX ? "PTX" : "none", target,
             h == GPU_RUN_CUBIN ? "cubin" : h == GPU_RUN_PTX ? "PTX" : "none", h == GPU_RUN_NONE ? 0 : got);
    test_check(h == how && (how == GPU_RUN_NONE || got == target), what);
}

static GpuInfo gpu(const char *name, int cc) {
    GpuInfo g = {.index = 0, .cc = cc, .cc_real = cc, .mem_total = (size_t)24 << 30};
    snprintf(g.name, sizeof g.name, "%s", name);
    return g;
}

static void fail_targets(const void *arg) { gpu_arch_require_targets((const GpuInfo *)arg); }
static void fail_bf16(const void *arg) { gpu_arch_require_precision((const GpuInfo *)arg, "bf16", "--bf16"); }
static void fail_tf32(const void *arg) { gpu_arch_require_precision((const GpuInfo *)arg, "tf32", "--tf32"); }
static void fail_fp8(const void *arg) { gpu_arch_require_precision((const GpuInfo *)arg, "fp8", "--fp8"); }
static void fake_bad(const void *arg) {
    setenv("T5_TEST_COMPUTE_CAPABILITY", (const char *)arg, 1);
    (void)gpu_arch_fake_cc();
}

int main(void) {
    // the build's own targets: the Makefile's default unless CUDA_ARCH was given
    printf("this build: cubins \"%s\", PTX \"%s\"\n", gpu_arch_cubins(), gpu_arch_ptx());
    test_check(gpu_arch_cubins()[0] != 0, "the Makefile passed the targets (CUDA_ARCH) into the binary");

    // the default targets: every GPU from Turing on runs a cubin or the PTX
    expect_match(75, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 75);   // Titan RTX, T4
    expect_match(80, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 80);   // A100
    expect_match(86, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 86);   // A10, RTX 3090
    expect_match(87, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 86);   // Jetson Orin: the 8.6 cubin
    expect_match(89, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 89);   // L4, RTX 4090
    expect_match(90, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_CUBIN, 90);   // H100, H200
    expect_match(100, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_PTX, 90);    // B200: the 9.0 PTX, JIT-compiled
    expect_match(120, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_PTX, 90);    // RTX 5090
    expect_match(70, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_NONE, 0);     // V100: CUDA 13 has no sm_70
    expect_match(61, DEFAULT_CUBINS, DEFAULT_PTX, GPU_RUN_NONE, 0);
    // narrower builds: a cubin never crosses a major version; PTX runs on newer GPUs only
    expect_match(86, "80", "", GPU_RUN_CUBIN, 80);
    expect_match(90, "80", "", GPU_RUN_NONE, 0);
    expect_match(90, "80", "80", GPU_RUN_PTX, 80);
    expect_match(80, "90", "90", GPU_RUN_NONE, 0);
    expect_match(75, "80 86", "86", GPU_RUN_NONE, 0);
    // arch-specific targets (sm_90a): that compute capability only
    expect_match(90, "90a", "", GPU_RUN_CUBIN, 90);
    expect_match(100, "90a", "90a", GPU_RUN_NONE, 0);
    expect_match(89, "", "", GPU_RUN_NONE, 0);
    expect_match(86, "x8 80 9", "", GPU_RUN_CUBIN, 80);  // malformed entries are no target

    char words[256];
    gpu_arch_describe(DEFAULT_CUBINS, DEFAULT_PTX, words, sizeof words);
    test_check(!strcmp(words, "cubins sm_75 sm_80 sm_86 sm_89 sm_90 and PTX compute_90 (JIT-compiled for 9.0 and newer)"),
               words);
    gpu_arch_describe("80", "", words, sizeof words);
    test_check(!strcmp(words, "cubins sm_80 and no PTX"), words);

    test_check(gpu_arch_cc_needed("bf16") == 80 && gpu_arch_cc_needed("tf32") == 80 && gpu_arch_cc_needed("fp16") == 0 &&
                   gpu_arch_cc_needed("fp32") == 0 && gpu_arch_cc_needed("fp8") == 89,
               "bf16 and TF32 need 8.0, fp8 8.9; fp16 and fp32 run on every target");
    test_check(gpu_arch_parse_cc("7.5") == 75 && gpu_arch_parse_cc("12.0") == 120 && gpu_arch_parse_cc("9.0") == 90,
               "compute capabilities parse: 7.5, 12.0, 9.0");
    test_check(gpu_arch_parse_cc("75") < 0 && gpu_arch_parse_cc("7.") < 0 && gpu_arch_parse_cc("7.55") < 0 &&
                   gpu_arch_parse_cc("") < 0 && gpu_arch_parse_cc("a.b") < 0 && gpu_arch_parse_cc("0.5") < 0,
               "malformed compute capabilities are refused: 75, 7., 7.55, empty, a.b, 0.5");
    unsetenv("T5_TEST_COMPUTE_CAPABILITY");
    test_check(gpu_arch_fake_cc() == 0, "the hook unset: no faked compute capability");
    setenv("T5_TEST_COMPUTE_CAPABILITY", "7.5", 1);
    test_check(gpu_arch_fake_cc() == 75, "T5_TEST_COMPUTE_CAPABILITY=7.5: 75");
    unsetenv("T5_TEST_COMPUTE_CAPABILITY");
    test_expect_error("a malformed hook value", fake_bad, "sm75", "T5_TEST_COMPUTE_CAPABILITY=\"sm75\"", "MAJOR.MINOR");

    // the refusals: one line each, naming the GPU, its compute capability and the way out
    GpuInfo ampere = gpu("NVIDIA A10", 86), turing = gpu("Tesla T4", 75), pascal = gpu("NVIDIA GeForce GTX 1080", 61);
    test_expect_error("bf16 on a 7.5 GPU", fail_bf16, &turing, "Tesla T4 (compute capability 7.5)", "--fp16");
    test_expect_error("TF32 on a 7.5 GPU", fail_tf32, &turing, "--tf32: TF32 needs an Ampere or newer GPU",
                      "compute capability 7.5");
    test_expect_error("fp8 on an 8.6 GPU", fail_fp8, &ampere, "--fp8: fp8 GEMMs need an Ada or Hopper GPU",
                      "compute capability 8.6");
    GpuInfo faked = turing;
    faked.cc_real = 90;
    test_expect_error("bf16 on a faked 7.5", fail_bf16, &faked, "faked by T5_TEST_COMPUTE_CAPABILITY; really 9.0",
                      NULL);
    if (!strcmp(gpu_arch_cubins(), DEFAULT_CUBINS)) {  // the messages of the default build
        test_expect_error("a 6.1 GPU below every target", fail_targets, &pascal,
                          "compute capability 6.1), and this train_t5 holds cubins sm_75", "CUDA 13 builds for");
        GpuInfo volta = gpu("Tesla V100", 70);
        test_expect_error("a 7.0 GPU below every target", fail_targets, &volta, "Tesla V100", "make CUDA_ARCH=70");
    } else {
        printf("(this build's CUDA_ARCH is not the default: the refusal texts are checked by the default build)\n");
    }
    // what passes must pass silently (a child that returns exits 0, and the checks print nothing)
    gpu_arch_require_precision(&ampere, "bf16", "--bf16");
    gpu_arch_require_precision(&ampere, "tf32", "--tf32");
    gpu_arch_require_precision(&turing, "fp16", "--fp16");
    GpuInfo ada = gpu("NVIDIA L4", 89);
    gpu_arch_require_precision(&ada, "fp8", "--fp8");
    test_check(1, "bf16 and TF32 on 8.6, fp16 on 7.5, fp8 on 8.9: accepted");
    return test_summary();
}
