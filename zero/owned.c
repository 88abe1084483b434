// zero/owned.c: the update and the host copies of a rank's owned range, through the record
// zero_init filled (owned.h).
#include "owned.h"

#include <string.h>

#include "../common/check.h"

void zero_owned_update(const ZeroOwned *w, AdamW *opt, ZeroOffload *off, const Backend *be, const ParamLayout *lay,
                       float lr, float grad_scale) {
    size_t e = w->grads.dtype == DTYPE_F32 ? 4 : 2;  // bytes per gradient element (fp32, or bf16/fp16)
    const void *g = (const char *)w->grads.ptr + (w->range.begin - w->grad_range.begin) * e;
    if (w->master.place == OWNED_HOST) {  // the CPU updates the host master; the new weights go up into params
        if (!off) t5_die(__FILE__, __LINE__, "zero_owned_update: a host master without offload buffers",
                         "a bug in zero_init's record: report it");
        offload_adamw_step(off, opt, be, lay, g, w->params.ptr, lr, grad_scale);
    } else {
        adamw_step(opt, be, lay, (float *)w->master.ptr, w->params.ptr, g, e, lr, grad_scale);
    }
}

void zero_owned_f32_to_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, float *dst) {
    const float *src = (const float *)b->ptr + from;
    if (b->place == OWNED_HOST) memcpy(dst, src, n * sizeof(float));
    else be->to_host(dst, src, n * sizeof(float));
}

void zero_owned_f32_from_host(const OwnedBuf *b, const Backend *be, size_t from, size_t n, const float *src) {
    float *dst = (float *)b->ptr + from;
    if (b->place == OWNED_HOST) memcpy(dst, src, n * sizeof(float));
    else be->to_device(dst, src, n * sizeof(float));
}
