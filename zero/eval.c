// zero/eval.c: evaluation and generation on a ZeRO run. Stages 0-2 hold the compute weights
// whole once the last step's collectives (and offloaded update) have finished, so
// zero_eval_begin only waits for those. Stage 3 keeps gathering unit by unit (never the whole
// model on one rank): zero_eval_begin installs a unit visitor (model/t5.h T5UnitVisitor)
// through which t5_forward and the generation decoder (model/kv_decoder.c) fetch and release
// units, and generation steps in lock-step across ranks, as HF's generate(synced_gpus=True):
//   fetch         all-gather the unit (zero_fetch_unit: the same pool, prefetch and learned
//                 order as training, which adapts to generation's order)
//   release       the unit is no longer in use (zero_fetch_release)
//   all_finished  all-reduce of the ranks' "not finished yet" flags
#include "zero.h"

static void eval_fetch(void *ctx, int unit) {
    ZeroState *z = ctx;
    zero_fetch_unit(&z->fetch, unit);  // all-gather (or find it gathered), prefetch the next units
}

static void eval_release(void *ctx, int unit) {
    ZeroState *z = ctx;
    zero_fetch_release(&z->fetch, unit);
}

// Every rank keeps stepping until all are finished.
static int eval_all_finished(void *ctx, int finished) {
    ZeroState *z = ctx;
    if (z->comm->world == 1) return finished;
    long long open = !finished;
    comm_allreduce_sum_i64(z->comm, &open, 1);  // all-reduce: the ranks still generating
    return open == 0;
}

void zero_eval_begin(ZeroState *z) {
    if (!z) return;
    zero_sync(z);
    if (z->stage != 3) return;
    z->visitor = (T5UnitVisitor){.ctx = z, .fetch = eval_fetch, .release = eval_release,
                                 .all_finished = eval_all_finished};
    z->m->visitor = &z->visitor;
}

void zero_eval_end(ZeroState *z) {
    if (z && z->m->visitor == &z->visitor) z->m->visitor = NULL;
}
