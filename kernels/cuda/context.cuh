// kernels/cuda/context.cuh: the CUDA backend's shared context, owned by memory.cu and
// created by cuda_init(): the one non-blocking stream every op launches on (cuda_stream()
// in cuda_ops.h), the cuBLASLt handle with its workspace (for matmul.cu), and device
// figures kernels size their grids with. Internal to kernels/cuda/*.cu.
#pragma once
#include <stddef.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

cublasLtHandle_t cuda_lt_handle(void);     // created by cuda_init
void *cuda_lt_workspace(size_t *bytes);    // 32 MiB, counted in cuda_mem_in_use; *bytes = its size
int cuda_sm_count(void);                   // multiprocessors of the device chosen by cuda_init
