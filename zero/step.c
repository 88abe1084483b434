// zero/step.c: one optimizer step on one rank (see step.h). The step drives forward and
// backward segment by segment (model/t5.h T5Segment) and issues every collective of the step
// itself, here, by name:
//   forward, before a segment reads unit u    stage 1-2: wait for u's all-gather of the last
//                                              update (offloaded update: first wait for the CPU
//                                              to reach u and all-gather the units up to it);
//                                              stage 3: all-gather u, prefetch the next units
//   backward, the same before each segment, then
//     before its first write to u's gradient  stage 2-3: open u's work buffer
//     after its last                          stage 0-1: all-reduce u's gradient (last micro-
//                                              batch only); stage 2-3: reduce-scatter it into
//                                              the owners' partitions
//     after the segment                       stage 3: release u
//   after each backward                       wait for every collective issued during it
//   apply                                     all-reduce of the per-tensor norms (stage 2-3);
//                                              stage 1-2: all-gather of the updated weights,
//                                              unit by unit (or on the update's thread's
//                                              behalf, at the next forward); stage 3: the
//                                              gathered copies are forgotten
// The global label-token count (when the caller does not give it) and the step's loss are
// all-reduced too (zero_step_accumulate). Evaluation reaches stage 3's units through
// zero/eval.c.
#include "step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../model/fp8.h"

// T5_STEP_TIMES: wall seconds after the device has finished everything queued
static double step_mark(const ZeroState *z) {
    z->m->be->synchronize();
    return clock_seconds();
}

// T5_STEP_TIMES: one line for the step; t_update < 0: the update overlaps the next forward
// (the offloaded one's thread prints its time when it is joined, update_async.c).
static void print_step_times(const ZeroState *z, double t_norm, double t_update) {
    printf("step %ld times (ms): forward+backward %.1f, norms %.1f, ", z->steps_seen,
           1e3 * (z->marks.backward_end - z->marks.step_begin), 1e3 * (t_norm - z->marks.backward_end));
    if (t_update < 0) printf("update overlapping the next forward (%s)\n", z->upd.on ? "its own thread" : "the side stream");
    else printf("update %.1f\n", 1e3 * (t_update - t_norm));
    fflush(stdout);
}

const Comm *zero_comm_single(void) {
    static const Comm one = {.rank = 0, .world = 1, .local_rank = 0, .launcher = "none", .ops = &comm_single_ops};
    return &one;
}

// ---- the collectives at the segments' unit boundaries ----

// Before a segment reads unit u's weights.
static void weights_fetch(ZeroState *z, int u) {
    if (u < 0) return;
    // the last update still in flight (offloaded on its own thread, or on the side stream):
    // wait until its new weights of the units up to u have landed, and all-gather them at
    // stages 1-2 (zero/update_async.c)
    if (z->upd.running) zero_update_publish_unit(z, u);
    if (z->stage == 1 || z->stage == 2) {
        zero_allgather_wait_unit(z, u);  // the compute stream waits for u's all-gather, if in flight
    } else if (z->stage == 3) {
        zero_fetch_unit(&z->fetch, u);  // all-gather u (unless gathered already), prefetch the next units
    }
}

// After the segment: u's weights are no longer in use.
static void weights_release(ZeroState *z, int u) {
    if (u >= 0 && z->stage == 3) zero_fetch_release(&z->fetch, u);
}

// Before backward's first write to u's gradient.
static void grads_open(ZeroState *z, int u) {
    if (z->stage >= 2) zero_reduce_scatter_open(z, u);  // u's gradient in a zeroed work buffer
}

// After backward's last write to u's gradient.
static void grads_reduce(ZeroState *z, int u, int last_micro) {
    if (z->stage <= 1) {
        // as DDP: earlier micro-batches only accumulate (no_sync)
        if (last_micro) zero_allreduce_unit_grads(z, u);  // all-reduce u's gradient
    } else {
        zero_reduce_scatter_unit_grads(z, u, last_micro);  // reduce-scatter u's gradient into the partitions
    }
}

// One micro-batch's forward; returns its loss sum.
static double step_forward(ZeroState *z, const T5Batch *micro, float label_smoothing) {
    T5Model *m = z->m;
    double loss = 0.0;
    t5_forward_begin(m, micro, NULL);
    for (int k = 0; k < m->seg.n_fwd; k++) {
        const T5Segment *sg = &m->seg.fwd[k];
        weights_fetch(z, sg->unit);
        loss += t5_forward_segment(m, sg, label_smoothing);
        weights_release(z, sg->unit);
    }
    return loss;
}

// Its backward: each unit's gradient reduced as soon as backward has finished it.
static void step_backward(ZeroState *z, float label_smoothing, float dloss, int last_micro) {
    T5Model *m = z->m;
    t5_backward_begin(m);
    for (int k = 0; k < m->seg.n_bwd; k++) {
        const T5Segment *sg = &m->seg.bwd[k];
        weights_fetch(z, sg->unit);
        if (sg->grad_begins) grads_open(z, sg->grad_unit);
        t5_backward_segment(m, sg, label_smoothing, dloss);
        if (sg->grad_ends) grads_reduce(z, sg->grad_unit, last_micro);
        weights_release(z, sg->unit);
    }
}

// T5_DUMP_FP8_SCALES (zero/debug.c): FILE.rankN gets one line a step, the scales in slot order.
static void dump_fp8_scales(const ZeroState *z) {
    const T5Fp8 *f = z->m->fp8;
    const size_t n = (size_t)f->n_slots * FP8_OPERANDS;
    float *s = mallocCheck(n * sizeof(float) + 1);
    z->m->be->to_host(s, f->scale, n * sizeof(float));
    char path[1024];
    snprintf(path, sizeof path, "%s.rank%d", z->debug.dump_fp8_scales, z->comm->rank);
    FILE *out = fopenCheck(path, "a");
    for (size_t i = 0; i < n; i++) fprintf(out, "%s%.9g", i ? " " : "", s[i]);
    fprintf(out, "\n");
    fclose(out);
    freeCheck(s);
}

double zero_step_accumulate(ZeroState *z, const T5Batch *micro, int n_micro, float label_smoothing,
                            double loss_scale, long global_tokens, long *n_tokens) {
    // The loss is normalized by the label tokens of the whole step (HF's
    // num_items_in_batch, which its LabelSmoother honours), so split micro-batches give
    // the same gradient as one big batch. HF 5.17 WITHOUT label smoothing sums the
    // micro-batches' own means instead (T5's loss ignores num_items_in_batch and the
    // Trainer skips the division by the accumulation steps): a bug we do not copy
    // (docs/TRAINER.md).
    T5Model *m = z->m;
    if (z->debug.step_times) z->marks.step_begin = step_mark(z);
    const double t_begin = clock_seconds();  // (z->phases)
    long long total_ll = 0;
    for (int i = 0; i < n_micro; i++)
        for (long k = 0; k < (long)micro[i].B * micro[i].T; k++) total_ll += micro[i].labels[k] != -100;
    if (global_tokens > 0) {
        // given by the caller: no collective (a host round trip that would also wait for the
        // previous step's weight gathers of stages 1-2); one rank checks it against its own
        if (z->comm->world == 1 && total_ll != global_tokens)
            t5_die(__FILE__, __LINE__, "training step: the given global label-token count differs from the batch's",
                   "a bug in the caller's count: report it");
        total_ll = global_tokens;
    } else {
        comm_allreduce_sum_i64(z->comm, &total_ll, 1);  // all-reduce: the global batch's label tokens
    }
    long total = (long)total_ll;
    if (total == 0) t5_fail("training step: the step has no label tokens (every label is -100)");
    double loss = 0;
    m->fp8_training = m->fp8 != NULL;  // --fp8: the blocks' linears in fp8 (model/fp8.h), this step only
    t5_fp8_step_begin(m);              // --fp8: the kept weight codes are rounded again by this step's forwards
    for (int i = 0; i < n_micro; i++) {
        const int last_micro = i == n_micro - 1;  // stages 0-1 reduce during this backward
        float dloss = (float)(loss_scale / (double)total);
        if (z->debug.overflow_step == z->steps_seen + 1) dloss = INFINITY;  // T5_TEST_OVERFLOW_STEP (zero/debug.c)
        // backward follows with this dloss: the head's loss pass also writes its gradient
        m->head_grad_in_forward = 1, m->head_dloss = dloss;
        loss += step_forward(z, &micro[i], label_smoothing) / (double)total;
        m->head_grad_in_forward = 0;
        if (i == 0) zero_update_join(z);  // the last step's update reads the gradients backward writes
        if (z->grads.on_host && last_micro)  // offload: this backward's reduce-scatters take the norms
            memset(z->grads.sq, 0, (size_t)m->lay.count * sizeof(double));
        step_backward(z, label_smoothing, dloss, last_micro);
        // stages 2-3 with overlap_comm: the gradient partitions are complete only when every
        // reduce-scatter of this backward is (the next micro-batch adds into them); stages
        // 0-1: the step's all-reduces issued during the last backward
        const double t_wait = clock_seconds();
        comm_wait_all(z->comm);
        zero_reduce_scatter_wait_host(z);  // offload: every piece is down in host memory
        z->phases.grads_wait_s += clock_seconds() - t_wait;
    }
    m->fp8_training = 0;
    if (m->fp8 && m->fp8->n_slots)  // all-reduce (max): --fp8's amaxes, one set of scales on every rank (TE's reduce_amax)
        comm_allreduce_max_f32(z->comm, m->fp8->amax, (size_t)m->fp8->n_slots * FP8_OPERANDS);
    t5_fp8_step_end(m);  // --fp8: this step's amaxes into the history, the next step's scales
    if (m->fp8 && z->debug.dump_fp8_scales) dump_fp8_scales(z);
    z->phases.accumulate_s += clock_seconds() - t_begin;
    if (z->debug.step_times) z->marks.backward_end = step_mark(z);
    comm_allreduce_sum_f64(z->comm, &loss, 1);  // all-reduce: the step's loss over ranks
    *n_tokens = total;
    return loss;
}

void zero_clear_grads(ZeroState *z) {
    t5_zero_grads(z->m);
    if (z->grads.on_host) z->grads.started = 0;  // the next backward's pieces overwrite, not add
    else if (z->grads.part) z->m->be->zero(z->grads.part, (z->part.end - z->part.begin) * z->m->elem);
}

// T5_DUMP_GRAD_NORMS (zero/debug.c): one JSON line per step, {"step": N, "grad_norms": {name: norm}},
// the norms in layout order (= model.parameters() order), unscaled, frozen tensors left out.
static void dump_grad_norms(const ZeroState *z, const double *sq, double scale) {
    const ParamLayout *L = &z->m->lay;
    FILE *f = fopenCheck(z->debug.dump_grad_norms, "a");
    fprintf(f, "{\"step\": %ld, \"grad_norms\": {", z->steps_seen + 1);
    for (int i = 0, k = 0; i < L->count; i++)
        if (!L->specs[i].frozen) fprintf(f, "%s\"%s\": %.9g", k++ ? ", " : "", L->specs[i].name, (float)sqrt(sq[i]) / scale);
    fprintf(f, "}}\n");
    fclose(f);
}

StepResult zero_step_apply(ZeroState *z, const LrSchedule *sched, LossScaler *scaler) {
    T5Model *m = z->m;
    AdamW *opt = &z->opt;
    StepResult r = {0};
    const double t_begin = clock_seconds();  // (z->phases)
    z->phases.steps++;
    zero_update_join(z);  // (a no-op here unless a caller skipped zero_step_accumulate)
    // every stage reduced its gradients during the last backward (zero_step_accumulate waited)
    double scale = scaler ? scaler->cur_scale : 1.0;
    r.loss_scale = scale;
    // clip_grad_norm_'s total norm: per-tensor norms of the owned range, summed over ranks
    // when ranges are partitions (stages 0-1 hold the whole, identical gradient on every
    // rank: no sum needed), then the norm of the norms, rounded as torch rounds them
    const ZeroOwned *w = &z->own;
    double *sq = mallocCheck(((size_t)m->lay.count + 1) * sizeof(double));
    if (z->grads.on_host)  // taken piece by piece during the last backward (grads_reduce_scatter.c)
        memcpy(sq, z->grads.sq, (size_t)m->lay.count * sizeof(double));
    else
        optimizer_tensor_norms_sq(m->be, &m->lay, w->grads.ptr, m->elem, w->grad_range.begin, w->grad_range.end, sq);
    if (w->grads_partitioned) comm_allreduce_sum_f64(z->comm, sq, (size_t)m->lay.count);  // all-reduce: norms of the partitions
    r.grad_norm = optimizer_total_norm(&m->lay, sq) / scale;
    if (z->debug.dump_grad_norms) dump_grad_norms(z, sq, scale);
    free(sq);
    z->steps_seen++;
    if (!isfinite(r.grad_norm)) {
        r.skipped = 1;
        if (scaler) {
            loss_scaler_update(scaler, 1);
            // every rank says so, as DeepSpeed does: the same step on all of them (a scale of 1,
            // fp32 and bf16: the trainer says it, and stops the run after a few in a row)
            if (scaler->dynamic || scale != 1.0)
                printf("rank %d: step %ld: gradient overflow (norm %g), update skipped; loss scale %g -> %g\n",
                       z->comm->rank, z->steps_seen, r.grad_norm, scale, scaler->cur_scale);
            fflush(stdout);
        }
        else t5_fail("training step %ld: the gradient norm is %g (inf/nan); HINT: lower --learning_rate", z->steps_seen, r.grad_norm);
        zero_clear_grads(z);
        z->phases.apply_s += clock_seconds() - t_begin;
        return r;
    }
    float coef = optimizer_clip_coef(r.grad_norm, opt->cfg.max_grad_norm);
    r.lr = lr_schedule_at(sched, opt->step);
    double t_norm = z->debug.step_times ? step_mark(z) : 0;
    // the profiler's backend has no side stream (it times ops one at a time): in place there
    const int side = z->upd.side && m->be->side_begin != NULL;
    if (z->upd.on) {
        // offload at stage 1-2: on its own thread while the next forward starts; zero_update_join
        // publishes the weights and clears the gradients
        zero_update_start(z, (float)r.lr, (float)(coef / scale));
    } else if (side) {
        // stage 0 (or 1-2 on one rank): on the device's side stream while the next forward
        // starts, which waits for each unit's new weights when it reaches the unit; the side
        // stream clears the gradients after the update
        zero_update_start_side(z, (float)r.lr, (float)(coef / scale));
    } else {
        // AdamW on the owned range, wherever zero_init placed it (device, or host with offload)
        const double t_update = clock_seconds();
        zero_owned_update(w, opt, &z->off, m->be, &m->lay, (float)r.lr, (float)(coef / scale), NULL, NULL);
        z->phases.update_s += clock_seconds() - t_update;
    }
    if (z->debug.step_times) print_step_times(z, t_norm, z->upd.on || side ? -1 : step_mark(z));
    if (!z->upd.on && !side) {
        if (z->stage == 1 || z->stage == 2) zero_allgather_params(z);  // all-gather the updated weights, unit by unit
        if (z->stage == 3) zero_fetch_forget(&z->fetch);  // the gathered copies predate the update (re-gathers the persistent units)
        zero_clear_grads(z);
    }
    if (scaler) loss_scaler_update(scaler, 0);
    z->phases.apply_s += clock_seconds() - t_begin;
    return r;
}

StepResult zero_train_step(ZeroState *z, const LrSchedule *sched, LossScaler *scaler, const T5Batch *micro,
                           int n_micro, float label_smoothing) {
    return zero_train_step_tokens(z, sched, scaler, micro, n_micro, label_smoothing, 0);
}

StepResult zero_train_step_tokens(ZeroState *z, const LrSchedule *sched, LossScaler *scaler, const T5Batch *micro,
                                  int n_micro, float label_smoothing, long global_tokens) {
    long n_tok = 0;
    double loss = zero_step_accumulate(z, micro, n_micro, label_smoothing, scaler ? scaler->cur_scale : 1.0,
                                       global_tokens, &n_tok);
    StepResult r = zero_step_apply(z, sched, scaler);
    r.loss = loss;
    r.n_tokens = n_tok;
    return r;
}
