// trainer/device.h: --device / --bf16 / --fp16 / --max_gpu_memory -> a Backend (through
// kernels/backend_registry.h; the cap goes to the backend's set_mem_cap).
// cpu: the fp32 reference backend. cuda: the CUDA backend in fp32, bf16 or fp16
// (16-bit = mixed precision: fp32 master weights and moments, 16-bit compute), present
// when the binary was built with nvcc (the Makefile says so); asking for it otherwise is
// an error, never a silent fall-back to the CPU.
#pragma once
#include "../kernels/backend.h"
#include "../kernels/gpu_arch.h"

int device_cuda_built(void);
// GPUs the CUDA runtime sees (cudaGetDeviceCount: no context, nothing allocated); 0 without
// CUDA, without a driver, or with CUDA_VISIBLE_DEVICES hiding them all. The trainer's
// --device default is cuda when this is > 0.
int device_gpu_count(void);
// GPU `index` as the start-up checks see it (kernels/gpu_arch.h: name, compute capability, the
// test hook's when set, memory); 0 when there is none (or no CUDA in this build).
int device_gpu_info(int index, GpuInfo *g);
// Select and initialize. device_index: the GPU (a rank's local rank; unused for cpu).
// max_gpu_memory_gib <= 0: no cap. tf32 1: fp32 GEMMs on TF32 tensor cores (--tf32; the caller
// has checked the GPU), else exact.
const Backend *device_backend(const char *device, int device_index, int bf16, int fp16, double max_gpu_memory_gib,
                              int tf32);

