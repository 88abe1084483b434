// kernels/backend_cuda_absent.c: the CUDA entry points of backend_registry.h in a build
// without nvcc (the Makefile links this file instead of kernels/cuda/): no GPU is offered,
// and opening one fails naming the build.
#include "../common/check.h"
#include "backend_registry.h"

int backend_cuda_built(void) { return 0; }

int backend_cuda_device_count(void) { return 0; }

int backend_cuda_device_info(int device, GpuInfo *g) {
    (void)device, (void)g;
    return 0;
}

const Backend *backend_cuda_open(int device, Dtype act_dtype) {
    (void)device, (void)act_dtype;
    t5_fail("--device cuda: this train_t5 was built without CUDA (nvcc not found at build time; see `make`'s "
            "feature line)");
}

const Backend *backend_profile_wrap(const Backend *be, int vocab) {
    (void)be, (void)vocab;
    t5_fail("--profile: the op profiler times CUDA ops; this train_t5 was built without CUDA");
}

void backend_profile_report(FILE *f, double wall_ms, int steps, int top) { (void)f, (void)wall_ms, (void)steps, (void)top; }
