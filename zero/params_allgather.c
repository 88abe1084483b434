// zero/params_allgather.c: publishing the updated weights at ZeRO stages 1 and 2. Stage 1 = the optimizer state is partitioned. Each rank keeps the
// fp32 master weights and AdamW moments of its partition only (zero_init), updates just
// that range, then the compute weights of every partition are all-gathered so that each
// rank again holds the whole model for the next forward. Gradients are still whole and
// all-reduced (zero/grads_allreduce.c). Stage 2 publishes weights the same way.
//
// The all-gather goes unit by unit in the order forward uses them (the layout's order:
// embedding, encoder blocks, encoder norm, decoder blocks, decoder norm, head). With
// overlap_comm (GPU ranks) it runs on the communication stream and nothing waits for it
// at the end of the step: the next forward waits for each unit's gather just before
// reading the unit (zero_allgather_wait_unit, called by zero/step.c), so the tail of the gather hides behind the first units'
// compute. Whatever reads the weights outside forward/backward (evaluation, a
// checkpoint) first calls comm_wait_all. With the optimizer offloaded the update runs on
// its own thread and each unit is gathered when the next forward reaches it, once its new
// weights have landed (zero/update_async.c).
#include "zero.h"

void zero_allgather_unit(ZeroState *z, int u) {
    if (z->comm->world == 1) return;
    T5Model *m = z->m;
    const ParamLayout *L = &m->lay;
    size_t n = L->total, e = m->elem;
    size_t ulo = L->units[u].lo, uhi = L->units[u].hi, step = z->gather_bucket ? z->gather_bucket : uhi - ulo;
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = ulo; lo < uhi; lo += step) {
        size_t hi = uhi - lo < step ? uhi : lo + step;
        // this rank's piece of [lo, hi) is already in place in m->params: an in-place gather
        size_t b = z->part.begin > lo ? z->part.begin : lo;
        if (b > hi) b = hi;
        last = comm_allgather_range_async(z->comm, (char *)m->params + b * e, (char *)m->params + lo * e, lo, hi, n,
                                          m->be->act_dtype);
    }
    if (z->overlap_comm) z->unit_ticket[u] = last;
    else comm_wait(z->comm, last);
}

void zero_allgather_params(ZeroState *z) {
    for (int u = 0; u < z->m->lay.n_units; u++) zero_allgather_unit(z, u);
}

void zero_allgather_wait_unit(ZeroState *z, int unit) {
    if (z->unit_ticket[unit].slot < 0) return;
    comm_wait(z->comm, z->unit_ticket[unit]);
    z->unit_ticket[unit] = COMM_TICKET_NONE;
}
