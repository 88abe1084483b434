// zero/grads_reduce_scatter.c: ZeRO stage 2 = gradients are partitioned too. Backward announces each
// unit (model/params.h: the embedding, one block, a final norm) before it writes the
// unit's gradient and after its last write (T5UnitHooks). Begin points the unit's
// gradient at a zeroed work buffer; end reduce-scatters the buffer, in buckets of
// reduce_bucket_size elements, so that each rank receives the sum over ranks of the
// piece that falls in its partition, and adds it to what the partition already holds
// (earlier micro-batches of the step). A rank thus never holds a whole gradient: its
// partition (Psi/N), the units in flight, and the shared embedding's, which backward
// writes at its start (tied head) and at its very end (the encoder's embedding).
//
// overlap_comm (GPU ranks): the reduce-scatter runs on the communication stream while
// backward computes the next unit into the other work buffer; a buffer is zeroed for a
// new unit only after the reduce-scatter that read it has finished (its ticket), and
// zero/step.c waits for all of them after each backward (the next micro-batch adds into
// the partitions, the optimizer reads them).
#include "zero.h"

#include "../common/check.h"

void zero_reduce_scatter_begin_grads(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    const ParamUnit *u = &m->lay.units[unit];
    void *buf;
    if (unit == m->lay.unit_shared) {
        comm_wait(z->comm, z->grad_shared_ticket);
        buf = z->grad_shared;
    } else {
        int k = z->grad_next;
        z->grad_next ^= 1;
        comm_wait(z->comm, z->grad_ticket[k]);  // the previous reduce-scatter out of this buffer is done
        buf = z->grad_work[k];
        for (int o = 0; o < m->lay.n_units; o++)
            if (m->unit_grads[o] == buf)
                t5_die(__FILE__, __LINE__, "ZeRO stage 2: a work buffer taken by a unit whose gradient is still open",
                       "backward must end a unit's gradient before beginning the one after next");
    }
    m->be->zero(buf, (u->hi - u->lo) * m->elem);
    m->unit_grads[unit] = buf;
}

void zero_reduce_scatter_end_grads(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    const ParamUnit *u = &m->lay.units[unit];
    size_t e = m->elem, n = m->lay.total, step = z->reduce_bucket ? z->reduce_bucket : u->hi - u->lo;
    char *buf = m->unit_grads[unit], *part = z->grad_part;
    // this rank's piece [b, en) of the unit: add the partition's running sum into the
    // buffer, so the reduce-scatter below leaves (earlier micro-batches + this one) there
    size_t b = u->lo > z->part.begin ? u->lo : z->part.begin, en = u->hi < z->part.end ? u->hi : z->part.end;
    if (b < en) m->be->add(buf + (b - u->lo) * e, buf + (b - u->lo) * e, part + (b - z->part.begin) * e, en - b);
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = u->lo; lo < u->hi; lo += step) {
        size_t hi = u->hi - lo < step ? u->hi : lo + step;
        size_t pb = lo > z->part.begin ? lo : z->part.begin;
        if (pb > z->part.end) pb = z->part.end;
        const void *send = buf + (lo - u->lo) * e;
        void *recv = part + (pb - z->part.begin) * e;
        if (z->overlap_comm) last = comm_reduce_scatter_range_async(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
        else comm_reduce_scatter_range(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
    }
    if (buf == z->grad_shared) z->grad_shared_ticket = last;
    else z->grad_ticket[buf == z->grad_work[0] ? 0 : 1] = last;
    m->unit_grads[unit] = NULL;
}
