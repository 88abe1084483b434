// zero/grads_allreduce.c: the gradient reduction of ZeRO stages 0 and 1 (stage 0 = plain data
// parallelism; stage 1 reduces the same way, then each rank updates only its partition).
// Every rank holds every state
// whole, and every rank must end the step with the gradient summed over ranks. As
// PyTorch DDP does, the sum is not left to the end of backward: on the step's last
// micro-batch (earlier ones only accumulate locally, DDP's no_sync), as soon as backward has
// finished a unit (zero/step.c, after the segment that completes the unit's gradient: it is
// then final on this rank) its range of the flat gradient is all-reduced, in buckets of
// reduce_bucket_size elements grouped into one NCCL launch. With overlap_comm (GPU
// ranks) that runs on the communication stream while backward computes the units before
// it; zero/step.c waits for all of it before the norm. Stage 1 reduces gradients the
// same way (it partitions only the optimizer state). Units finish in backward order: the
// head, decoder blocks last to first, the encoder, and the shared embedding last (its
// gradient is written at both ends of backward).
#include "zero.h"

void zero_allreduce_unit_grads(ZeroState *z, int unit) {
    if (z->comm->world == 1) return;
    T5Model *m = z->m;
    const ParamUnit *u = &m->lay.units[unit];
    void *g = (char *)m->grads + u->lo * m->elem;
    CommTicket t = comm_allreduce_sum_async(z->comm, g, u->hi - u->lo, z->reduce_bucket, m->be->act_dtype);
    if (!z->overlap_comm) comm_wait(z->comm, t);  // the compute stream waits now: no overlap
}
