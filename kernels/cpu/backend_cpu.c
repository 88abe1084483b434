// kernels/cpu/backend_cpu.c: the fp32 CPU reference backend, one Backend struct whose
// entries are the cpu_* functions of this directory (see cpu_ops.h).
#include "cpu_ops.h"

static const Backend cpu_backend = {
    .name = "cpu",
    .act_dtype = DTYPE_F32,
    .device_memory = 0,
    .ctx = NULL,  // the allocation counters of memory.c are its only state
    .synchronize = cpu_memory_synchronize,
    .set_mem_cap = cpu_memory_set_cap,
    .mem_cap = cpu_memory_cap,
    .alloc = cpu_memory_alloc,
    .free = cpu_memory_free,
    .zero = cpu_memory_zero,
    .to_device = cpu_memory_to_device,
    .to_host = cpu_memory_to_host,
    .mem_in_use = cpu_memory_in_use,
    .host_alloc = cpu_memory_host_alloc,
    .host_free = cpu_memory_host_free,
    .mem_peak = cpu_memory_peak,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .position_bias_forward = cpu_position_bias_forward,
    .position_bias_backward = cpu_position_bias_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .copy_rows = cpu_copy_rows,
    .ffn_act_forward = cpu_ffn_act_forward,
    .ffn_act_backward = cpu_ffn_act_backward,
    .add = cpu_elementwise_add,
    .axpy = cpu_elementwise_axpy,
    .scale = cpu_elementwise_scale,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .clamp_fp16_overflow = cpu_clamp_fp16_overflow,
    .crossentropy_forward_backward = cpu_crossentropy_forward_backward,
    .sumsq = cpu_optimizer_sumsq,
    .tensor_norm = cpu_optimizer_tensor_norm,
    .adamw_update = cpu_optimizer_adamw_update,
    .beam_topk = cpu_search_beam_topk,
    .kv_reorder = cpu_search_kv_reorder,
};

const Backend *backend_cpu(void) { return &cpu_backend; }
