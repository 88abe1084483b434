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
// Threads: OpenMP over blocks of CPU_ADAM_BLOCK elements, each block one thread's, taken
// CPU_ADAM_GRAB at a time as threads come free (a preempted thread holds up only those). The
// offloaded step hands a chunk's tensor slices to one call (cpu_adam_update_slices): one fork
// and join per chunk instead of one per tensor (t5-large: ~510 a step), and the blocks of all
// slices shared out together, so a small tensor no longer leaves the other threads idle.
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
#define CPU_ADAM_GRAB 4       // blocks a thread takes at a time (~0.9 MB of traffic)

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

// One tensor's slice of a step: n elements of each array from its first (out may be NULL),
// with the tensor's own constants (weight decay differs between tensors).
typedef struct {
    float *master, *m, *v;  // (n) fp32
    const void *g;          // (n) gradient, dtype gt of the call
    void *out;              // (n) new master in dtype ot of the call, or NULL
    size_t n;
    AdamwConsts c;
} CpuAdamSlice;
// cpu_adam_update of each slice, in one parallel pass over the blocks of all of them (each
// slice cut into CPU_ADAM_BLOCK blocks from its first element, as cpu_adam_update cuts it):
// every element gets the bits cpu_adam_update gives it.
void cpu_adam_update_slices(const CpuAdamSlice *s, int count, Dtype gt, Dtype ot, CpuAdamIsa isa);
