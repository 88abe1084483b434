// kernels/backend_registry.c: backend_open by device name (see backend_registry.h).
#include "backend_registry.h"

#include <string.h>

#include "../common/check.h"

const Backend *backend_open(const char *device, int device_index, Dtype act_dtype) {
    if (!strcmp(device, "cpu")) {
        if (act_dtype != DTYPE_F32)
            t5_fail("--%s needs --device cuda: the CPU backend is the fp32 reference",
                    act_dtype == DTYPE_BF16 ? "bf16" : "fp16");
        return backend_cpu();
    }
    if (strcmp(device, "cuda") != 0) t5_fail("--device \"%s\": expected cpu or cuda", device);
    return backend_cuda_open(device_index, act_dtype);
}
