// trainer/device.c: backend selection (see device.h), over kernels/backend_registry.h.
#include "device.h"

#include <string.h>

#include "../common/check.h"
#include "../kernels/backend_registry.h"

int device_cuda_built(void) { return backend_cuda_built(); }

int device_gpu_count(void) { return backend_cuda_device_count(); }

int device_gpu_info(int index, GpuInfo *g) { return backend_cuda_device_info(index, g); }

const Backend *device_backend(const char *device, int device_index, int bf16, int fp16, double max_gpu_memory_gib,
                              int tf32) {
    if (!strcmp(device, "cpu")) {
        if (bf16 || fp16)
            t5_fail("--%s needs --device cuda: the CPU backend is the fp32 reference", bf16 ? "bf16" : "fp16");
        if (max_gpu_memory_gib > 0) t5_fail("--max_gpu_memory needs --device cuda");
    }
    const Backend *be = backend_open(device, device_index, bf16 ? DTYPE_BF16 : fp16 ? DTYPE_F16 : DTYPE_F32);
    if (max_gpu_memory_gib > 0) be->set_mem_cap((size_t)(max_gpu_memory_gib * 1073741824.0));
    be->set_tf32(tf32 == 1);
    return be;
}
