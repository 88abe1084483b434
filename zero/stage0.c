// zero/stage0.c: ZeRO stage 0 = plain data parallelism. Every rank holds every state
// whole; after the step's last backward the gradients are summed over ranks with an
// all-reduce per bucket (allreduce_bucket_size elements), so every rank takes the same
// AdamW update. Stage 1 reduces gradients the same way (zero/stage1.c).
#include "zero.h"

void zero_stage0_allreduce_grads(ZeroState *z) {
    if (z->comm->world == 1) return;
    T5Model *m = z->m;
    size_t n = m->lay.total, step = z->reduce_bucket ? z->reduce_bucket : n;
    for (size_t lo = 0; lo < n; lo += step) {
        size_t k = n - lo < step ? n - lo : step;
        comm_allreduce_sum(z->comm, (char *)m->grads + lo * m->elem, k, m->be->act_dtype);
    }
}
