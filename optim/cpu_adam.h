// optim/cpu_adam.h: the CPU AdamW step of ZeRO-Offload (zero/offload.c), with explicit
// SIMD. Per element it is kernels/cpu/adamw_math.h's step (torch.optim.AdamW as torch's CPU
// kernels round it) with the gradient widened from its dtype first and the new master
// narrowed into the 16-bit compute copy in the same pass (DeepSpeedCPUAdam's "step and copy").
// Every instruction set gives the same bits: the vector code runs the scalar code's
// operations in the scalar code's order (mul, fma, sqrt and div are correctly rounded in
// every lane), so tests/test_cpu_adam.c compares the vector paths with the scalar one
// bitwise, and the offloaded optimizer still equals the GPU/CPU backends' adamw_update.
//
// Instruction sets: AVX-512 (16 lanes; F + BW), AVX2 + FMA + F16C (8 lanes), scalar; the
// best the CPU has is chosen at run time (cpu_adam_isa_best), so one binary runs anywhere.
// Threads: OpenMP over blocks of CPU_ADAM_BLOCK elements, each block one thread's.
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../kernels/cpu/adamw_math.h"

typedef enum {
    CPU_ADAM_AUTO = 0,  // the best of the ones below that the CPU runs
    CPU_ADAM_SCALAR,
    CPU_ADAM_AVX2,
    CPU_ADAM_AVX512,
} CpuAdamIsa;

#define CPU_ADAM_BLOCK 8192  // elements per OpenMP work item (a multiple of 16)

// The best instruction set this CPU runs (never CPU_ADAM_AUTO).
CpuAdamIsa cpu_adam_isa_best(void);
// 1 when this CPU can run isa (CPU_ADAM_AUTO and CPU_ADAM_SCALAR: always).
int cpu_adam_isa_supported(CpuAdamIsa isa);
const char *cpu_adam_isa_name(CpuAdamIsa isa);

// One AdamW step of n elements: master, m, v (n) fp32, updated in place; g (n) the raw
// gradient in dtype gt (c->grad_scale applied here); out (n) receives the new master in
// dtype ot (NULL: nothing written). isa: CPU_ADAM_AUTO, or one the CPU supports (a bug
// otherwise: refused loudly).
void cpu_adam_update(float *master, float *m, float *v, const void *g, Dtype gt, void *out, Dtype ot, size_t n,
                     const AdamwConsts *c, CpuAdamIsa isa);
