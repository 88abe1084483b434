// trainer/device.c: backend selection (see device.h).
#include "device.h"

#include <string.h>

#include "../common/check.h"
#ifdef T5_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../kernels/cuda/cuda_ops.h"
#endif

int device_cuda_built(void) {
#ifdef T5_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int device_gpu_count(void) {
#ifdef T5_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {  // no driver, no device: the CPU it is
        (void)cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

const Backend *device_backend(const char *device, int device_index, int bf16, int fp16, double max_gpu_memory_gib) {
    if (!strcmp(device, "cpu")) {
        if (bf16 || fp16)
            t5_fail("--%s needs --device cuda: the CPU backend is the fp32 reference", bf16 ? "bf16" : "fp16");
        if (max_gpu_memory_gib > 0) t5_fail("--max_gpu_memory needs --device cuda");
        return backend_cpu();
    }
    if (strcmp(device, "cuda") != 0) t5_fail("--device \"%s\": expected cpu or cuda", device);
#ifdef T5_HAVE_CUDA
    cuda_init(device_index);  // fails naming the index when it is not a visible GPU
    if (max_gpu_memory_gib > 0) cuda_set_memory_cap((size_t)(max_gpu_memory_gib * 1073741824.0));
    return backend_cuda(bf16 ? DTYPE_BF16 : fp16 ? DTYPE_F16 : DTYPE_F32);
#else
    t5_fail("--device cuda: this train_t5 was built without CUDA (nvcc not found at build time; see `make`'s "
            "feature line)");
#endif
}

void device_synchronize(const Backend *be) {
#ifdef T5_HAVE_CUDA
    if (strncmp(be->name, "cuda", 4) == 0) cuda_synchronize();
#else
    (void)be;
#endif
}
