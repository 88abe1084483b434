// zero/offload.c: the optimizer's state in host memory and its update on the CPU (see
// offload.h). The element math is the CPU backend's AdamW (kernels/cpu/adamw_math.h, the
// torch step the CPU tests check against Hugging Face), fused here with the dtype
// conversions into one OpenMP pass per tensor slice; chunks keep the extra host memory to
// two staging buffers. sqrt without errno lets the loops vectorize (same IEEE results).
#pragma GCC optimize("no-math-errno")
#include "offload.h"

#include <string.h>

#include "../common/check.h"
#include "../common/half.h"
#include "../kernels/cpu/adamw_math.h"
#include "../optim/cpu_adam.h"

#define OFFLOAD_CHUNK ((size_t)32 << 20)  // elements per transfer (64-128 MiB of staging)

void offload_init(ZeroOffload *o, AdamW *opt, const Backend *be, AdamWConfig cfg, size_t begin, size_t end,
                  const float *master_init, int init_on_host, int pinned) {
    memset(o, 0, sizeof *o);
    size_t n = end - begin, e = be->act_dtype == DTYPE_F32 ? 4 : 2;
    o->pinned = pinned;
    o->chunk = n < OFFLOAD_CHUNK ? (n ? n : 1) : OFFLOAD_CHUNK;
    o->master = be->host_alloc(n * sizeof(float), pinned);
    if (init_on_host) memcpy(o->master, master_init, n * sizeof(float));
    else be->to_host(o->master, master_init, n * sizeof(float));
    memset(opt, 0, sizeof *opt);
    opt->cfg = cfg;
    opt->begin = begin;
    opt->end = end;
    opt->m = be->host_alloc(n * sizeof(float), pinned);
    opt->v = be->host_alloc(n * sizeof(float), pinned);
    o->stage_grad = be->host_alloc(o->chunk * e, pinned);
    o->stage_param = be->host_alloc(o->chunk * e, pinned);
    o->host_bytes = 3 * n * sizeof(float);
    o->stage_bytes = o->chunk * 2 * e;
}

void offload_free(ZeroOffload *o, AdamW *opt, const Backend *be) {
    be->host_free(o->master, o->pinned);
    be->host_free(opt->m, o->pinned);
    be->host_free(opt->v, o->pinned);
    be->host_free(o->stage_grad, o->pinned);
    be->host_free(o->stage_param, o->pinned);
    memset(o, 0, sizeof *o);
    opt->m = opt->v = NULL;
}

// One tensor's slice [lo, hi) of the chunk: widen its gradient, AdamW on master and
// moments (kernels/cpu/adamw_math.h: the CPU backend's exact step), narrow the new master
// into the compute weights, in one pass over memory. frozen: the weights are only copied.
static void update_slice(ZeroOffload *o, AdamW *opt, Dtype t, size_t lo, size_t hi, size_t lo_c, float wd,
                         int frozen, float lr, float grad_scale) {
    const AdamwConsts c = adamw_consts(lr, opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, wd, grad_scale, opt->step);
    const size_t n = hi - lo, j0 = lo - opt->begin, s0 = lo - lo_c;  // partition / chunk positions
    float *master = o->master + j0, *m = opt->m + j0, *v = opt->v + j0;
    if (frozen) {  // not trained: the compute weights stay the master's
        if (t == DTYPE_F32) memcpy((float *)o->stage_param + s0, master, n * sizeof(float));
        else if (t == DTYPE_BF16)
            for (size_t i = 0; i < n; i++) ((uint16_t *)o->stage_param)[s0 + i] = half_f32_to_bf16(master[i]);
        else
            for (size_t i = 0; i < n; i++) ((uint16_t *)o->stage_param)[s0 + i] = half_f32_to_f16(master[i]);
        return;
    }
    // widen, step, narrow in one pass, SIMD and threads (optim/cpu_adam.c: the scalar step's bits)
    const size_t e = t == DTYPE_F32 ? 4 : 2;
    cpu_adam_update(master, m, v, (const char *)o->stage_grad + s0 * e, t, (char *)o->stage_param + s0 * e, t, n, &c,
                    CPU_ADAM_AUTO);
}

void offload_adamw_step(ZeroOffload *o, AdamW *opt, const Backend *be, const ParamLayout *lay, const void *grads,
                        void *params, float lr, float grad_scale) {
    opt->step++;
    const Dtype t = be->act_dtype;
    const size_t e = t == DTYPE_F32 ? 4 : 2, n = opt->end - opt->begin;
    for (size_t off = 0; off < n; off += o->chunk) {
        size_t k = n - off < o->chunk ? n - off : o->chunk;
        size_t lo_c = opt->begin + off, hi_c = lo_c + k;  // the chunk in the flat space
        be->to_host(o->stage_grad, (const char *)grads + off * e, k * e);
        // tensor by tensor (each its own weight decay), clipped to the chunk; the tensors
        // tile the flat space, so every element of the chunk is written
        for (int i = 0; i < lay->count; i++) {
            const ParamSpec *p = &lay->specs[i];
            size_t lo = p->offset > lo_c ? p->offset : lo_c;
            size_t hi = p->offset + p->numel < hi_c ? p->offset + p->numel : hi_c;
            if (lo >= hi) continue;
            update_slice(o, opt, t, lo, hi, lo_c, p->no_decay ? 0.0f : opt->cfg.weight_decay, p->frozen, lr,
                         grad_scale);
        }
        be->to_device((char *)params + off * e, o->stage_param, k * e);
    }
}
