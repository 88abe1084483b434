// kernels/backend_registry.h: Backends by device name, and what the build and the machine
// offer. The CUDA entry points come from kernels/cuda/backend_cuda.cu when the binary was
// built with nvcc, else from kernels/backend_cuda_absent.c (the Makefile links one of the
// two): no caller needs an #ifdef, and asking for CUDA in a CPU-only build is an error
// naming the build, never a fall-back to the CPU.
#pragma once
#include "backend.h"

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
// The CUDA backend on GPU `device` (creates its context on first use).
const Backend *backend_cuda_open(int device, Dtype act_dtype);

#ifdef __cplusplus
}
#endif
