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
//
// With offload_optimizer the partition lives in host memory (ZeroState.grad_on_host): the
// reduce-scatter receives into the work buffer's landing buffer, which goes down to the
// host on the copy engine while backward computes the next units; the landing buffer is
// reused only once that copy is done. A micro-batch after the step's first brings the
// piece's running sum up into the landing buffer when the unit begins (it has the unit's
// whole backward to arrive) and adds it in at the end, as the device partition is added.
// The device then holds two unit-sized work buffers, three landing buffers and the
// embedding's gradient, never the partition (DeepSpeed streams to pinned buffers the same
// way: its offload's memory figure).
#include "zero.h"

#include "../common/check.h"

// The landing buffer (and copy slot) paired with a work buffer: 0, 1, or 2 for the embedding's.
static int land_index(const ZeroState *z, const void *buf) {
    return buf == z->grad_shared ? 2 : buf == z->grad_work[0] ? 0 : 1;
}

// This rank's piece [b, e) of unit u; none: b == e, at the partition's edge nearest the unit.
static Range owned_piece(const ZeroState *z, const ParamUnit *u) {
    size_t b = u->lo > z->part.begin ? u->lo : z->part.begin, e = u->hi < z->part.end ? u->hi : z->part.end;
    if (b >= e) b = e = u->hi <= z->part.begin ? z->part.begin : z->part.end;
    return (Range){b, e};
}

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
    if (z->grad_on_host) {
        int k = land_index(z, buf);
        Range p = owned_piece(z, u);
        m->be->copy_wait(ZERO_SLOT_LAND_DOWN + k);  // the piece that last landed here has gone down
        if (z->grads_started && p.end > p.begin)    // the running sum comes up during the unit's backward
            m->be->to_device_async(z->grad_land[k], (char *)z->grad_part + (p.begin - z->part.begin) * m->elem,
                                   (p.end - p.begin) * m->elem, ZERO_SLOT_LAND_UP);
    }
}

void zero_reduce_scatter_end_grads(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    const ParamUnit *u = &m->lay.units[unit];
    size_t e = m->elem, n = m->lay.total, step = z->reduce_bucket ? z->reduce_bucket : u->hi - u->lo;
    char *buf = m->unit_grads[unit];
    const int k = land_index(z, buf);
    // where the reduced piece goes: the partition (element part.begin first), or the landing
    // buffer (element b first) on its way to the host partition
    const Range p = owned_piece(z, u);
    const size_t b = p.begin, en = p.end;
    char *recv_base = z->grad_on_host ? (char *)z->grad_land[k] - (b - z->part.begin) * e : z->grad_part;
    // this rank's piece [b, en) of the unit: add the partition's running sum into the
    // buffer, so the reduce-scatter below leaves (earlier micro-batches + this one) there
    if (b < en && z->grad_on_host && z->grads_started) {
        m->be->copy_wait(ZERO_SLOT_LAND_UP);  // the running sum is up (begin_grads)
        m->be->add(buf + (b - u->lo) * e, buf + (b - u->lo) * e, z->grad_land[k], en - b);
    } else if (b < en && !z->grad_on_host) {
        m->be->add(buf + (b - u->lo) * e, buf + (b - u->lo) * e, recv_base + (b - z->part.begin) * e, en - b);
    }
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = u->lo; lo < u->hi; lo += step) {
        size_t hi = u->hi - lo < step ? u->hi : lo + step;
        size_t pb = lo > b ? lo : b;  // the bucket's first element in this rank's piece
        if (pb > en) pb = en;
        const void *send = buf + (lo - u->lo) * e;
        void *recv = recv_base + (pb - z->part.begin) * e;
        if (z->overlap_comm) last = comm_reduce_scatter_range_async(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
        else comm_reduce_scatter_range(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
    }
    if (buf == z->grad_shared) z->grad_shared_ticket = last;
    else z->grad_ticket[k] = last;
    m->unit_grads[unit] = NULL;
    if (z->grad_on_host && b < en) {  // the reduced piece goes down behind the collective
        comm_wait(z->comm, last);
        m->be->to_host_async((char *)z->grad_part + (b - z->part.begin) * e, z->grad_land[k], (en - b) * e,
                             ZERO_SLOT_LAND_DOWN + k);
    }
}

void zero_reduce_scatter_wait_host(ZeroState *z) {
    if (!z->grad_on_host) return;
    for (int k = 0; k < 3; k++) z->m->be->copy_wait(ZERO_SLOT_LAND_DOWN + k);
    z->grads_started = 1;
}
