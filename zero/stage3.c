// zero/stage3.c: ZeRO stage 3 = the compute weights are partitioned as well. A rank keeps
// only its partition of them (zero_init frees the whole copy); before forward or backward
// reads a unit (model/params.h), fetch all-gathers the unit's pieces from every rank into
// one work buffer, and release forgets it afterwards, so at most one unit's weights are
// whole at a time. Gradients go as at stage 2 (zero/stage2.c). Gathers run in buckets of
// allgather_bucket_size elements, on the compute stream: no prefetch yet (docs/ZERO.md).
#include "zero.h"

#include "../common/check.h"

void zero_stage3_fetch_params(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    if (z->fetched >= 0)
        t5_die(__FILE__, __LINE__, "ZeRO stage 3: a unit was fetched while another one is in use",
               "forward/backward must release a unit before fetching the next");
    const ParamUnit *u = &m->lay.units[unit];
    size_t e = m->elem, n = m->lay.total, step = z->gather_bucket ? z->gather_bucket : u->hi - u->lo;
    char *part = z->param_part, *work = z->param_work;
    for (size_t lo = u->lo; lo < u->hi; lo += step) {
        size_t hi = u->hi - lo < step ? u->hi : lo + step;
        size_t pb = lo > z->part.begin ? lo : z->part.begin;
        if (pb > z->part.end) pb = z->part.end;
        comm_allgather_range(z->comm, part + (pb - z->part.begin) * e, work + (lo - u->lo) * e, lo, hi, n,
                             m->be->act_dtype);
    }
    m->unit_params[unit] = work;
    z->fetched = unit;
}

void zero_stage3_release_params(void *ctx, T5Model *m, int unit) {
    ZeroState *z = ctx;
    m->unit_params[unit] = NULL;
    z->fetched = -1;
}
