// kernels/cuda/graph.cu: CUDA graphs of the backend (backend.h graph_begin / graph_end /
// graph_replay / graph_free), for generation's decoder step (model/kv_decoder.c): one step's
// ~450 launches (24 layers x ~18 ops, the LM head, beam_topk) recorded once per decoder and
// replayed as one launch per step, so the host's launch overhead stops bounding the step.
// Capture runs on the process's one stream (cuda_stream) in relaxed mode: the ops may look up
// cached GEMM plans and scratch while recording (they were made by an eager step before);
// nothing they record may change between replays but device memory (backend.h says which).
#include "common.cuh"
#include "cuda_ops.h"

extern "C" void cuda_graph_begin(void) {
    cudaCheck(cudaStreamBeginCapture(t5_stream(), cudaStreamCaptureModeRelaxed));
}

extern "C" void *cuda_graph_end(void) {
    cudaGraph_t g = nullptr;
    cudaCheck(cudaStreamEndCapture(t5_stream(), &g));
    cudaGraphExec_t exec = nullptr;
    cudaCheck(cudaGraphInstantiate(&exec, g, 0));
    cudaCheck(cudaGraphDestroy(g));  // the executable graph keeps what it needs
    return (void *)exec;
}

extern "C" void cuda_graph_replay(void *graph) {
    cudaCheck(cudaGraphLaunch((cudaGraphExec_t)graph, t5_stream()));
}

extern "C" void cuda_graph_free(void *graph) {
    if (graph) cudaCheck(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}
