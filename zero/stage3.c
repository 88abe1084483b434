// zero/stage3.c: ZeRO stage 3 = the compute weights are partitioned as well. A rank keeps
// only its partition of them (zero_init frees the whole copy); before forward or backward
// reads a unit (model/params.h), fetch all-gathers the unit's pieces from every rank into
// one of two weight buffers, in buckets of allgather_bucket_size elements, and release
// marks it no longer in use. A buffer remembers its unit until the weights change (the
// optimizer's update), so a unit used twice in a row (the tied embedding: the head at the
// end of forward, again at the start of backward) is gathered once.
//
// Prefetch (GPU ranks): the fetches of one micro-batch come in the same order every time
// (forward, then backward). The first micro-batch records that order; later ones, on
// fetching unit i of it, start gathering unit i+1 into the other buffer on the
// communication stream, so it arrives while unit i computes. Gradients go as at stage 2
// (zero/stage2.c).
#include "zero.h"

#include "../common/check.h"

// Gather unit u into weight buffer k; returns the ticket of the last bucket.
static CommTicket gather_unit(ZeroState *z, int u, int k, int async) {
    T5Model *m = z->m;
    const ParamUnit *pu = &m->lay.units[u];
    size_t e = m->elem, n = m->lay.total, step = z->gather_bucket ? z->gather_bucket : pu->hi - pu->lo;
    char *part = z->param_part, *work = z->param_work[k];
    CommTicket last = COMM_TICKET_NONE;
    for (size_t lo = pu->lo; lo < pu->hi; lo += step) {
        size_t hi = pu->hi - lo < step ? pu->hi : lo + step;
        size_t pb = lo > z->part.begin ? lo : z->part.begin;
        if (pb > z->part.end) pb = z->part.end;
        const void *mine = part + (pb - z->part.begin) * e;
        void *out = work + (lo - pu->lo) * e;
        if (async) last = comm_allgather_range_async(z->comm, mine, out, lo, hi, n, m->be->act_dtype);
        else comm_allgather_range(z->comm, mine, out, lo, hi, n, m->be->act_dtype);
    }
    z->param_unit[k] = u;
    z->param_ticket[k] = last;
    return last;
}

// The unit the recorded order says comes after this fetch, or -1.
static int trace_next(ZeroState *z, int unit) {
    if (z->trace_state == TRACE_RECORD) {  // the first micro-batch's order
        if (z->trace_len < z->trace_cap) z->trace[z->trace_len++] = unit;
        return -1;
    }
    if (z->trace_state == TRACE_WAIT) return -1;
    if (z->trace_pos >= z->trace_len || z->trace[z->trace_pos] != unit) {
        z->trace_state = TRACE_WAIT;  // the order changed (it should not): record the next micro-batch anew
        return -1;
    }
    z->trace_pos++;
    return z->trace_pos < z->trace_len ? z->trace[z->trace_pos] : -1;
}

void zero_stage3_fetch_params(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    if (z->fetched >= 0)
        t5_die(__FILE__, __LINE__, "ZeRO stage 3: a unit was fetched while another one is in use",
               "forward/backward must release a unit before fetching the next");
    int k = z->param_unit[0] == unit ? 0 : z->param_unit[1] == unit ? 1 : -1;
    if (k < 0) {  // not gathered (or prefetched) yet: into the buffer not holding the last unit used
        k = z->fetched_buf >= 0 ? 1 - z->fetched_buf : 0;
        gather_unit(z, unit, k, 0);
        z->n_gathered++;
    } else {
        if (k == z->fetched_buf) z->n_reused++;  // the unit used last, still there
        else z->n_prefetched++;
        comm_wait(z->comm, z->param_ticket[k]);  // a prefetch: wait for it to land
    }
    m->unit_params[unit] = z->param_work[k];
    z->fetched = unit;
    z->fetched_buf = k;
    int next = trace_next(z, unit);
    // prefetch into the other buffer; the gather starts after the compute queued so far,
    // which includes every use of that buffer's previous unit
    if (z->prefetch && next >= 0 && next != unit && z->param_unit[1 - k] != next) gather_unit(z, next, 1 - k, 1);
}

void zero_stage3_release_params(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    m->unit_params[unit] = NULL;
    z->fetched = -1;
}

void zero_stage3_begin_micro(ZeroState *z) {
    if (z->stage != 3) return;
    if (z->trace_state == TRACE_RECORD && z->trace_len > 0) z->trace_state = TRACE_FOLLOW;  // recorded
    if (z->trace_state == TRACE_WAIT) {
        z->trace_len = 0;
        z->trace_state = TRACE_RECORD;
    }
    z->trace_pos = 0;
}

void zero_stage3_forget_gathered(ZeroState *z) {
    if (z->stage != 3) return;
    comm_wait_all(z->comm);  // no gather still writing into the buffers
    z->param_unit[0] = z->param_unit[1] = -1;
    z->param_ticket[0] = z->param_ticket[1] = COMM_TICKET_NONE;
    z->fetched = z->fetched_buf = -1;
}
