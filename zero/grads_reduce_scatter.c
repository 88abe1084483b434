// zero/grads_reduce_scatter.c: ZeRO stage 2 = gradients are partitioned too. Backward announces each
// unit (model/params.h: the embedding, one block, a final norm) before it writes the
// unit's gradient and after its last write (zero/step.c, from the segments' grad_begins and
// grad_ends: model/t5.h). Open points the unit's gradient at a zeroed work buffer;
// zero_reduce_scatter_unit_grads reduce-scatters the buffer, in buckets of
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
// With offload_optimizer the partition lives in host memory (ZeroGradBuffers.on_host) and the
// device holds only the work buffers: each unit's piece is reduced in place in its work
// buffer and goes down to the host on the copy engine while backward computes the next
// units; a work buffer is zeroed for a new unit only once that copy is done. A micro-batch
// after the step's first brings the piece's running sum up into the zeroed buffer when the
// unit opens, and backward adds onto it. On the step's last micro-batch each piece's
// per-tensor norms are taken on the device as it is reduced (z->grads.sq), for the clip.
// DeepSpeed streams its offload's gradients to pinned buffers the same way (the memory of a
// stage-2 offload run is the weights, the activations and a few unit-sized buffers).
#include "zero.h"

#include <stdlib.h>

#include "../common/check.h"

// A work buffer's index (its copy slot): 0 or 1, or 2 for the embedding's.
static int work_index(const ZeroState *z, const void *buf) {
    return buf == z->grads.shared ? 2 : buf == z->grads.work[0] ? 0 : 1;
}

// This rank's piece [b, e) of unit u; none: b == e, at the partition's edge nearest the unit.
static Range owned_piece(const ZeroState *z, const ParamUnit *u) {
    size_t b = u->lo > z->part.begin ? u->lo : z->part.begin, e = u->hi < z->part.end ? u->hi : z->part.end;
    if (b >= e) b = e = u->hi <= z->part.begin ? z->part.begin : z->part.end;
    return (Range){b, e};
}

void zero_reduce_scatter_open(ZeroState *z, int unit) {
    T5Model *m = z->m;
    const ParamUnit *u = &m->lay.units[unit];
    void *buf;
    if (unit == m->lay.unit_shared) {
        comm_wait(z->comm, z->grads.shared_ticket);
        buf = z->grads.shared;
    } else {
        int k = z->grads.next;
        z->grads.next ^= 1;
        comm_wait(z->comm, z->grads.work_ticket[k]);  // the previous reduce-scatter out of this buffer is done
        buf = z->grads.work[k];
        for (int o = 0; o < m->lay.n_units; o++)
            if (m->unit_grads[o] == buf)
                t5_die(__FILE__, __LINE__, "ZeRO stage 2: a work buffer taken by a unit whose gradient is still open",
                       "backward must end a unit's gradient before beginning the one after next");
    }
    if (z->grads.on_host) m->be->copy_wait(ZERO_SLOT_GRAD_DOWN + work_index(z, buf));  // its last piece went down
    m->be->zero(buf, (u->hi - u->lo) * m->elem);
    m->unit_grads[unit] = buf;
    Range p = owned_piece(z, u);
    if (z->grads.on_host && z->grads.started && p.end > p.begin) {  // backward adds onto the running sum
        m->be->to_device_async(buf + (p.begin - u->lo) * m->elem, (char *)z->grads.part + (p.begin - z->part.begin) * m->elem,
                               (p.end - p.begin) * m->elem, ZERO_SLOT_GRAD_UP);
        m->be->copy_wait(ZERO_SLOT_GRAD_UP);  // before backward's kernels are queued (they do not wait for it)
    }
}

void zero_reduce_scatter_unit_grads(ZeroState *z, int unit, int last_micro) {
    T5Model *m = z->m;
    const ParamUnit *u = &m->lay.units[unit];
    size_t e = m->elem, n = m->lay.total, step = z->reduce_bucket ? z->reduce_bucket : u->hi - u->lo;
    char *buf = m->unit_grads[unit];
    const int k = work_index(z, buf);
    // this rank's piece [b, en) of the unit, reduced into the partition (element part.begin
    // first), or in place in the work buffer (element u->lo first) on its way to the host
    const Range p = owned_piece(z, u);
    const size_t b = p.begin, en = p.end;
    char *part = z->grads.part;
    // add the partition's running sum into the buffer, so the reduce-scatter below leaves
    // (earlier micro-batches + this one) there (host partition: begin_grads put it there)
    if (b < en && !z->grads.on_host)
        m->be->add(buf + (b - u->lo) * e, buf + (b - u->lo) * e, part + (b - z->part.begin) * e, en - b);
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = u->lo; lo < u->hi; lo += step) {
        size_t hi = u->hi - lo < step ? u->hi : lo + step;
        size_t pb = lo > b ? lo : b;  // the bucket's first element in this rank's piece
        if (pb > en) pb = en;
        const void *send = buf + (lo - u->lo) * e;
        void *recv = z->grads.on_host ? buf + (pb > u->lo ? pb - u->lo : 0) * e : part + (pb - z->part.begin) * e;
        if (z->overlap_comm) last = comm_reduce_scatter_range_async(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
        else comm_reduce_scatter_range(z->comm, send, recv, lo, hi, n, m->be->act_dtype);
    }
    if (buf == z->grads.shared) z->grads.shared_ticket = last;
    else z->grads.work_ticket[k] = last;
    m->unit_grads[unit] = NULL;
    if (z->grads.on_host && b < en) {  // the reduced piece: its norms (last micro-batch), then down
        comm_wait(z->comm, last);
        const char *piece = buf + (b - u->lo) * e;
        if (last_micro) {
            double *sq = mallocCheck(((size_t)m->lay.count + 1) * sizeof(double));
            optimizer_tensor_norms_sq(m->be, &m->lay, piece, e, b, en, sq);  // 0 outside [b, en)
            for (int i = 0; i < m->lay.count; i++) z->grads.sq[i] += sq[i];
            free(sq);
        }
        m->be->to_host_async((char *)z->grads.part + (b - z->part.begin) * e, piece, (en - b) * e,
                             ZERO_SLOT_GRAD_DOWN + k);
    }
}

void zero_reduce_scatter_wait_host(ZeroState *z) {
    if (!z->grads.on_host) return;
    for (int k = 0; k < 3; k++) z->m->be->copy_wait(ZERO_SLOT_GRAD_DOWN + k);
    z->grads.started = 1;
}
