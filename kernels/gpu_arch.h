// kernels/gpu_arch.h: which NVIDIA GPUs a train_t5 binary runs on, and what each precision
// needs of the GPU. Pure C (no CUDA): the CUDA backend checks every rank's GPU with it at
// start-up (kernels/cuda/memory.cu cuda_init), the trainer checks --bf16/--tf32 against it
// before anything loads (trainer/args_device.c), --explain checks the GPU it plans for, and
// tests/test_gpu_arch.c checks the rules on the CPU.
//
// Compute capability (cc) is written as major*10 + minor: 7.5 -> 75, 9.0 -> 90.
// The binary's targets are the Makefile's CUDA_ARCH (one cubin per entry: "75 80 86 89 90")
// and CUDA_PTX (PTX of one architecture, JIT-compiled by the driver for any newer GPU).
// What runs where (CUDA's compatibility rules):
//   a cubin sm_XY runs on a GPU of the same major version and a minor >= Y (sm_80 runs on
//     8.0, 8.6, 8.7, 8.9); an arch-specific one (sm_90a) only on exactly that cc;
//   PTX compute_XY is compiled by the driver for any GPU of cc >= XY (once, at start-up;
//     the driver caches it), compute_XYa only for exactly XY.
// Precision needs: bf16 and TF32 tensor cores are Ampere's (8.0); fp16 and fp32 run on every
// target CUDA 13 builds for (7.5, Turing, and newer).
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_CC_BF16 80  // the first compute capability with bf16 tensor cores (Ampere)
#define GPU_CC_TF32 80  // and with TF32 tensor cores
#define GPU_CC_FP8 89   // the first with fp8 tensor cores (Ada; cuBLASLt's fp8 GEMMs)

typedef enum { GPU_RUN_NONE = 0, GPU_RUN_CUBIN, GPU_RUN_PTX } GpuRunHow;

// The targets this binary's CUDA code was built for, as the Makefile passed them: cubins
// ("75 80 86 89 90") and PTX ("90", or "" for none). In a build without nvcc: the targets a
// CUDA build of this tree would have (the Makefile's CUDA_ARCH), which is what --explain
// checks a planned GPU against.
const char *gpu_arch_cubins(void);
const char *gpu_arch_ptx(void);

// How a GPU of compute capability cc runs code built for `cubins` and `ptx` (lists as above):
// a cubin (*target = its cc, e.g. 80 for a 8.6 GPU), the PTX (*target = the PTX's cc), or
// not at all. A malformed list entry counts as no target.
GpuRunHow gpu_arch_match(int cc, const char *cubins, const char *ptx, int *target);

// "cubins sm_75 sm_80 ... and PTX compute_90 (JIT-compiled for 9.0 and newer)": the
// targets in words, for messages.
void gpu_arch_describe(const char *cubins, const char *ptx, char *buf, size_t n);

// The compute capability a precision needs (GPU_CC_BF16 for "bf16", GPU_CC_TF32 for "tf32",
// GPU_CC_FP8 for "fp8",
// 0 for what runs everywhere).
int gpu_arch_cc_needed(const char *precision);

// "7.5" -> 75; -1 when s is not MAJOR.MINOR with 1 <= MAJOR <= 99 and 0 <= MINOR <= 9.
int gpu_arch_parse_cc(const char *s);

// One GPU as the checks see it (backend_cuda_device_info fills it).
typedef struct {
    int index;           // CUDA device index on this host (a rank's local rank); -1: a GPU --explain
                         // plans for without one (name says where its compute capability came from)
    char name[256];      // cudaDeviceProp.name
    int cc;              // compute capability the checks use (the hook's when set)
    int cc_real;         // the GPU's own
    size_t mem_total;    // bytes (cudaDeviceProp.totalGlobalMem)
} GpuInfo;

// Start-up refusals (one line each, exit 1): g cannot run this binary's code (no cubin or PTX
// target fits its compute capability) -- every CUDA process calls it before its first launch,
// so "no kernel image is available" never comes from the middle of a step;
void gpu_arch_require_targets(const GpuInfo *g);
// precision ("bf16", "tf32"; others always pass), asked for by `from` ("--bf16",
// "ds.json: bf16.enabled") needs a newer GPU than g.
void gpu_arch_require_precision(const GpuInfo *g, const char *precision, const char *from);

// The test hook T5_TEST_COMPUTE_CAPABILITY=MAJOR.MINOR: the compute capability every GPU
// reports to the checks above (the CUDA backend's cuda_init and the trainer's), so that the
// refusals of older GPUs can be run on a newer one and in --explain on a machine without a
// GPU. 0 when unset; a malformed value is an error naming the variable.
int gpu_arch_fake_cc(void);

#ifdef __cplusplus
}
#endif
