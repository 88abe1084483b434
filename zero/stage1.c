// zero/stage1.c: ZeRO stage 1 = the optimizer state is partitioned. Each rank keeps the
// fp32 master weights and AdamW moments of its partition only (zero_init), updates just
// that range, then the compute weights of every partition are all-gathered so that each
// rank again holds the whole model for the next forward. Gradients are still whole and
// all-reduced (zero/stage0.c). Stage 2 publishes weights the same way.
#include "zero.h"

void zero_stage1_allgather_params(ZeroState *z) {
    if (z->comm->world == 1) return;
    T5Model *m = z->m;
    size_t n = m->lay.total, e = m->elem, step = z->gather_bucket ? z->gather_bucket : n;
    for (size_t lo = 0; lo < n; lo += step) {
        size_t hi = n - lo < step ? n : lo + step;
        // this rank's piece of [lo, hi) is already in place in m->params: an in-place gather
        size_t b = z->part.begin > lo ? z->part.begin : lo;
        if (b > hi) b = hi;
        comm_allgather_range(z->comm, (char *)m->params + b * e, (char *)m->params + lo * e, lo, hi, n,
                             m->be->act_dtype);
    }
}
