// comm/comm_nccl_absent.c: the NCCL table's entry points in a build without nvcc (the
// Makefile links this file instead of comm/comm_nccl.cu): GPU ranks are refused, naming
// the build, never run on another transport.
#include "../common/check.h"
#include "comm.h"

static void fail_no_cuda(void) {
    t5_fail("--device cuda needs NCCL for its ranks, and this build has no CUDA (nvcc not found at build time)");
}

const CommOps *comm_nccl_ops(void) {
    fail_no_cuda();
    return NULL;
}

void comm_nccl_attach(Comm *c) {
    (void)c;
    fail_no_cuda();
}
