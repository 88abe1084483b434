// optim/adamw.h: AdamW over the flat parameter space, as HF Trainer runs
// torch.optim.AdamW: weight decay on every tensor except those the layout marks
// no_decay (norm weights), global-norm gradient clipping with the pre-clip norm
// reported. Works on any contiguous range [begin, end) of the flat space, so a ZeRO
// rank updates just its partition (zero/partition.h decides the range).
// Optimizer state is fp32 and lives wherever ZeRO placed the owned range (zero/owned.h:
// device here; host memory with offload, zero/offload.c); this file only does the math
// through the backend.
#pragma once
#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/params.h"

// HF TrainingArguments' optimizer defaults, which DeepSpeed's optimizer.params share: the
// one table every default comes from (trainer/args.c, deepspeed/, train_t5.c, adamw.c).
#define ADAMW_HF_LR 5e-5
#define ADAMW_HF_BETA1 0.9
#define ADAMW_HF_BETA2 0.999
#define ADAMW_HF_EPS 1e-8
#define ADAMW_HF_WEIGHT_DECAY 0.0
#define ADAMW_HF_MAX_GRAD_NORM 1.0

typedef struct {
    float lr;            // base learning rate (the schedule scales it)
    float beta1, beta2;  // HF defaults ADAMW_HF_BETA1, ADAMW_HF_BETA2
    float eps;           // HF default ADAMW_HF_EPS
    float weight_decay;  // HF default ADAMW_HF_WEIGHT_DECAY
    float max_grad_norm; // HF default ADAMW_HF_MAX_GRAD_NORM; <= 0 disables clipping
} AdamWConfig;

typedef struct {
    AdamWConfig cfg;
    size_t begin, end;   // owned range of the flat parameter space (elements)
    float *m, *v;        // (end - begin) fp32 moments on the backend
    int step;            // optimizer steps taken (for bias correction)
} AdamW;

AdamWConfig adamw_default_config(void);
// Allocate zeroed moments for the range [begin, end).
void adamw_init(AdamW *opt, const Backend *be, AdamWConfig cfg, size_t begin, size_t end);
void adamw_free(AdamW *opt, const Backend *be);

// Global L2 norm of grads over [begin, end) squared (add across ranks before sqrt).
double optimizer_grad_sumsq(const Backend *be, const void *grads, size_t elem_size, size_t begin, size_t end);
// torch.nn.utils.clip_grad_norm_'s total norm, in two parts so that ranks holding pieces of
// the gradient can add theirs in between. First, per non-frozen tensor of the layout (in
// layout order = model.parameters() order), into sq[tensor index] (lay->count entries,
// zeroed here; frozen tensors and those outside [begin, end) stay 0): the square of
// be->tensor_norm when the whole tensor lies in [begin, end) (all such tensors in one
// be->tensor_norms call; exact in double), else the
// double sumsq of the piece. Frozen tensors are left out (torch: they have no .grad).
// grads points at element `begin` (a partition's gradient, or the start of the whole
// buffer when begin is 0).
void optimizer_tensor_norms_sq(const Backend *be, const ParamLayout *lay, const void *grads, size_t elem_size,
                               size_t begin, size_t end, double *sq);
// Then the norm of the per-tensor norms (after the ranks' sq were summed): each norm
// rounded to fp32, and their L2 norm taken as torch's CPU vector_norm takes it (8 fp32
// lanes): torch.linalg.vector_norm(torch.stack(norms)). Frozen tensors are left out.
float optimizer_total_norm(const ParamLayout *lay, const double *sq);
// torch.nn.utils.clip_grad_norm_: coefficient min(1, max_norm / (norm + 1e-6)).
float optimizer_clip_coef(double grad_norm, float max_grad_norm);

// One AdamW update of the owned range [opt->begin, opt->end). Every pointer points at
// element opt->begin (the owned range's first element: a partition buffer, or the start
// of the whole flat buffer when begin is 0). grad_scale multiplies every gradient first
// (clip coefficient, loss-scale unscaling). The range is split at tensor boundaries so
// each tensor gets its own weight decay.
// master: fp32 weights; param_out: the act-dtype compute copy to refresh, or NULL when
// master is the parameter itself (fp32 training).
void adamw_step(AdamW *opt, const Backend *be, const ParamLayout *lay, float *master, void *param_out,
                const void *grads, size_t elem_size, float lr, float grad_scale);
// The update of the elements [from, to) of the flat layout (clipped to the owned range)
// at step opt->step, which the caller has advanced: adamw_step is opt->step++ and the
// whole range; zero/update_async.c goes unit by unit, so the next forward can start on the
// first units while the last are still updated. Elementwise: any split gives the same bits.
void adamw_step_range(const AdamW *opt, const Backend *be, const ParamLayout *lay, float *master, void *param_out,
                      const void *grads, size_t elem_size, float lr, float grad_scale, size_t from, size_t to);
