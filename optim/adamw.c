// optim/adamw.c: AdamW over ranges of the flat parameter space (see adamw.h).
#include "adamw.h"

#include <math.h>
#include <stdlib.h>

#include "../common/check.h"
#include "../kernels/cpu/cpu_ops.h"

AdamWConfig adamw_default_config(void) {
    AdamWConfig c = {.lr = (float)ADAMW_HF_LR, .beta1 = (float)ADAMW_HF_BETA1, .beta2 = (float)ADAMW_HF_BETA2,
                     .eps = (float)ADAMW_HF_EPS, .weight_decay = (float)ADAMW_HF_WEIGHT_DECAY,
                     .max_grad_norm = (float)ADAMW_HF_MAX_GRAD_NORM};
    return c;
}

void adamw_init(AdamW *opt, const Backend *be, AdamWConfig cfg, size_t begin, size_t end) {
    opt->cfg = cfg;
    opt->begin = begin;
    opt->end = end;
    opt->step = 0;
    opt->m = be->alloc((end - begin) * sizeof(float));
    opt->v = be->alloc((end - begin) * sizeof(float));
}

void adamw_free(AdamW *opt, const Backend *be) {
    be->free(opt->m);
    be->free(opt->v);
    opt->m = opt->v = NULL;
}

double optimizer_grad_sumsq(const Backend *be, const void *grads, size_t elem_size, size_t begin, size_t end) {
    return be->sumsq((const char *)grads + begin * elem_size, end - begin);
}

void optimizer_tensor_norms_sq(const Backend *be, const ParamLayout *lay, const void *grads, size_t elem_size,
                               size_t begin, size_t end, double *sq) {
    // whole tensors: one tensor_norms call over all of them; pieces split between ranks
    // (ZeRO 2-3): their exact sums of squares
    size_t *offsets = mallocCheck(((size_t)lay->count + 1) * sizeof(size_t));
    size_t *counts = mallocCheck(((size_t)lay->count + 1) * sizeof(size_t));
    int *which = mallocCheck(((size_t)lay->count + 1) * sizeof(int)), n = 0;
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *p = &lay->specs[i];
        sq[i] = 0;
        size_t lo = p->offset > begin ? p->offset : begin;
        size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
        if (lo >= hi || p->frozen) continue;
        if (lo == p->offset && hi == p->offset + p->numel) {
            offsets[n] = lo - begin, counts[n] = p->numel, which[n++] = i;
        } else {
            sq[i] = optimizer_grad_sumsq(be, grads, elem_size, lo - begin, hi - begin);
        }
    }
    float *norms = mallocCheck(((size_t)n + 1) * sizeof(float));
    be->tensor_norms(norms, grads, offsets, counts, n);
    for (int k = 0; k < n; k++) sq[which[k]] = (double)norms[k] * norms[k];  // exact: sqrt(sq) gives the fp32 norm back
    free(norms), free(offsets), free(counts), free(which);
}

float optimizer_total_norm(const ParamLayout *lay, const double *sq) {
    float *norms = mallocCheck(((size_t)lay->count + 1) * sizeof(float));
    size_t n = 0;
    for (int i = 0; i < lay->count; i++)
        if (!lay->specs[i].frozen) norms[n++] = (float)sqrt(sq[i]);
    float total = cpu_optimizer_tensor_norm(norms, n);  // the same kernel on the stacked norms
    free(norms);
    return total;
}

float optimizer_clip_coef(double grad_norm, float max_grad_norm) {
    if (max_grad_norm <= 0) return 1.0f;
    // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.0, in fp32
    float coef = max_grad_norm / ((float)grad_norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

void adamw_step(AdamW *opt, const Backend *be, const ParamLayout *lay, float *master, void *param_out,
                const void *grads, size_t elem_size, float lr, float grad_scale) {
    opt->step++;
    adamw_step_range(opt, be, lay, master, param_out, grads, elem_size, lr, grad_scale, opt->begin, opt->end);
}

void adamw_step_range(const AdamW *opt, const Backend *be, const ParamLayout *lay, float *master, void *param_out,
                      const void *grads, size_t elem_size, float lr, float grad_scale, size_t from, size_t to) {
    if (from < opt->begin) from = opt->begin;
    if (to > opt->end) to = opt->end;
    // one adamw_update per run of adjacent tensors with the same weight decay (the flat
    // buffers hold them back to back; the update is elementwise, so runs give the same bits
    // as tensor by tensor, in fewer launches: t5-large's 509 tensors take about 250)
    size_t run_lo = 0, run_hi = 0;
    float run_wd = 0.0f;
    for (int i = 0; i <= lay->count; i++) {
        size_t lo = 0, hi = 0;
        float wd = 0.0f;
        if (i < lay->count) {
            const ParamSpec *p = &lay->specs[i];
            lo = p->offset > from ? p->offset : from;
            hi = p->offset + p->numel < to ? p->offset + p->numel : to;
            if (lo >= hi || p->frozen) continue;
            wd = p->no_decay ? 0.0f : opt->cfg.weight_decay;
            if (run_hi > run_lo && lo == run_hi && wd == run_wd) {  // extends the run
                run_hi = hi;
                continue;
            }
        }
        if (run_hi > run_lo) {
            size_t k = run_lo - opt->begin;  // position in the owned range
            be->adamw_update(master + k, param_out ? (char *)param_out + k * elem_size : NULL,
                             (const char *)grads + k * elem_size, opt->m + k, opt->v + k, run_hi - run_lo, lr,
                             opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, run_wd, grad_scale, opt->step);
        }
        run_lo = lo, run_hi = hi, run_wd = wd;
    }
}
