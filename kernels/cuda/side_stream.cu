// kernels/cuda/side_stream.cu: the backend's side stream (backend.h side_begin, side_end,
// side_mark, wait_mark), for work that overlaps the ops queued after it: the optimizer's
// update runs there while the next forward starts (zero/update_async.c), and the forward
// waits for each unit's point only when it reaches the unit.
//
// side_begin records an event on the compute stream and makes the side stream wait for it,
// then points the context's current stream (cuda_stream(), which every op launches on) at
// the side stream until side_end. A mark is an event recorded on the side stream;
// wait_mark makes the compute stream wait for it (cudaStreamWaitEvent: the host does not
// wait). The side stream has the device's lowest priority and the compute stream its
// highest (memory.cu), so where both have blocks waiting the compute stream's go first and
// the update fills what the forward leaves idle.
#include "common.cuh"
#include "cuda_ops.h"

extern "C" void cuda_side_begin(void) {
    CudaContext *cx = cuda_ctx();
    if (cx->stream != cx->main_stream)
        t5_die(__FILE__, __LINE__, "side_begin: the side stream is open already", "a bug in the caller: report it");
    if (!cx->side_stream) {
        int prio_low = 0, prio_high = 0;
        cudaCheck(cudaDeviceGetStreamPriorityRange(&prio_low, &prio_high));
        cudaCheck(cudaStreamCreateWithPriority(&cx->side_stream, cudaStreamNonBlocking, prio_low));
        cudaCheck(cudaEventCreateWithFlags(&cx->side_fork, cudaEventDisableTiming));
    }
    cudaCheck(cudaEventRecord(cx->side_fork, cx->main_stream));
    cudaCheck(cudaStreamWaitEvent(cx->side_stream, cx->side_fork, 0));
    cx->stream = cx->side_stream;
}

extern "C" void cuda_side_end(void) {
    CudaContext *cx = cuda_ctx();
    if (cx->stream != cx->side_stream)
        t5_die(__FILE__, __LINE__, "side_end: no side stream is open", "a bug in the caller: report it");
    cx->stream = cx->main_stream;
}

extern "C" void cuda_side_mark(int k) {
    CudaContext *cx = cuda_ctx();
    if (cx->stream != cx->side_stream || k < 0)
        t5_die(__FILE__, __LINE__, "side_mark: outside side_begin / side_end, or a negative point",
               "a bug in the caller: report it");
    if (k >= cx->n_side_marks) {  // grow the events to k + 1 (a few dozen: one a ZeRO unit)
        int n = k + 1 > 2 * cx->n_side_marks ? k + 1 : 2 * cx->n_side_marks;
        cudaEvent_t *marks = (cudaEvent_t *)reallocCheck(cx->side_marks, (size_t)n * sizeof(cudaEvent_t));
        for (int i = cx->n_side_marks; i < n; i++) cudaCheck(cudaEventCreateWithFlags(&marks[i], cudaEventDisableTiming));
        cx->side_marks = marks;
        cx->n_side_marks = n;
    }
    cudaCheck(cudaEventRecord(cx->side_marks[k], cx->side_stream));
}

extern "C" void cuda_wait_mark(int k) {
    CudaContext *cx = cuda_ctx();
    if (cx->stream != cx->main_stream || k < 0 || k >= cx->n_side_marks)
        t5_die(__FILE__, __LINE__, "wait_mark: inside side_begin / side_end, or a point never marked",
               "a bug in the caller: report it");
    cudaCheck(cudaStreamWaitEvent(cx->main_stream, cx->side_marks[k], 0));
}
