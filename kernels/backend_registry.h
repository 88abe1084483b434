// kernels/backend_registry.h: Backends by device name, and what the build and the machine
// offer. The CUDA entry points come from kernels/cuda/backend_cuda.cu when the binary was
// built with nvcc, else from kernels/backend_cuda_absent.c (the Makefile links one of the
// two): no caller needs an #ifdef, and asking for CUDA in a CPU-only build is an error
// naming the build, never a fall-back to the CPU.
#pragma once
#include <stdio.h>

#include "backend.h"
#include "gpu_arch.h"

#ifdef __cplusplus
extern "C" {
#endif

// Open a backend. device: "cpu" (fp32 only) or "cuda" (GPU device_index, which becomes
// this process's one device; act_dtype fp32, bf16 or fp16). Fails with a hint otherwise.
const Backend *backend_open(const char *device, int device_index, Dtype act_dtype);
// 1 when the CUDA backend is linked in.
int backend_cuda_built(void);
// GPUs the CUDA runtime sees (no context made, nothing allocated); 0 without CUDA, without
// a driver, or with CUDA_VISIBLE_DEVICES hiding them all.
int backend_cuda_device_count(void);
// GPU `device` as the start-up checks see it (name, compute capability: the test hook's when
// set, memory); 0 when there is no such GPU (or no CUDA in this build).
int backend_cuda_device_info(int device, GpuInfo *g);
// The CUDA backend on GPU `device` (creates its context on first use).
const Backend *backend_cuda_open(int device, Dtype act_dtype);
// The op profiler (kernels/cuda/profile.cu): a Backend running `be`'s ops (a CUDA backend),
// each timed on the device by a CUDA event pair and summed per op, shape and class (GEMMs
// with O or I = vocab count as the LM head's). One profiler per process.
const Backend *backend_profile_wrap(const Backend *be, int vocab);
// Print to f the profile of the ops since the last report: per class ms per step and share of
// the steps' wall time (wall_ms over `steps` steps; the rest is GPU idle), then the `top`
// ops by time; then start over.
void backend_profile_report(FILE *f, double wall_ms, int steps, int top);

#ifdef __cplusplus
}
#endif
