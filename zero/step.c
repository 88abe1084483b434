// zero/step.c: one optimizer step on one rank (see step.h).
#include "step.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"

double zero_step_accumulate(T5Model *m, const Comm *comm, const T5Batch *micro, int n_micro, float label_smoothing,
                            double loss_scale, long *n_tokens) {
    // The loss is normalized by the label tokens of the whole step (HF's
    // num_items_in_batch, which its LabelSmoother honours), so split micro-batches give
    // the same gradient as one big batch. HF 5.17 WITHOUT label smoothing sums the
    // micro-batches' own means instead (T5's loss ignores num_items_in_batch and the
    // Trainer skips the division by the accumulation steps): a bug we do not copy
    // (docs/TRAINER.md).
    long long total_ll = 0;
    for (int i = 0; i < n_micro; i++)
        for (long k = 0; k < (long)micro[i].B * micro[i].T; k++) total_ll += micro[i].labels[k] != -100;
    if (comm) comm_allreduce_sum_i64(comm, &total_ll, 1);  // the global batch's label tokens
    long total = (long)total_ll;
    if (total == 0) t5_fail("training step: the step has no label tokens (every label is -100)");
    double loss = 0;
    for (int i = 0; i < n_micro; i++) {
        long n_tok = 0;
        loss += t5_forward(m, &micro[i], label_smoothing, &n_tok) / (double)total;
        t5_backward(m, label_smoothing, (float)(loss_scale / (double)total));
    }
    if (comm) comm_allreduce_sum_f64(comm, &loss, 1);
    *n_tokens = total;
    return loss;
}

StepResult zero_step_apply(T5Model *m, const Comm *comm, AdamW *opt, const LrSchedule *sched, LossScaler *scaler) {
    StepResult r = {0};
    if (comm && comm->world > 1) {
        // stage 0 (data parallel): sum the gradients of all ranks (each already divided by
        // the global token count), so every rank holds the gradient of the global batch
        if (m->be->act_dtype != DTYPE_F32 || strncmp(m->be->name, "cpu", 3) != 0)
            t5_fail("several ranks on the %s backend need NCCL, which is not built yet; HINT: run CPU ranks "
                    "(--device cpu) under mpirun, or one GPU rank", m->be->name);
        comm_allreduce_sum_f32(comm, (float *)m->grads, m->lay.total);
    }
    double scale = scaler ? scaler->cur_scale : 1.0;
    r.loss_scale = scale;
    r.grad_norm = sqrt(optimizer_grad_sumsq_layout(m->be, &m->lay, m->grads, m->elem, 0, m->lay.total)) / scale;
    if (!isfinite(r.grad_norm)) {
        r.skipped = 1;
        if (scaler) loss_scaler_update(scaler, 1);
        else t5_fail("training step %d: the gradient norm is %g (inf/nan); HINT: lower --learning_rate", opt->step + 1, r.grad_norm);
        t5_zero_grads(m);
        return r;
    }
    float coef = optimizer_clip_coef(r.grad_norm, opt->cfg.max_grad_norm);
    r.lr = lr_schedule_at(sched, opt->step);
    adamw_step(opt, m->be, &m->lay, t5_master_weights(m), m->master ? m->params : NULL, m->grads, m->elem, (float)r.lr, (float)(coef / scale));
    if (comm && comm->world > 1 && (opt->begin != 0 || opt->end != m->lay.total)) {
        // ZeRO stage 1: this rank updated only its partition (its optimizer state covers
        // just that range); all-gather the partitions so every rank has all parameters
        comm_allgather_partitions_f32(comm, (float *)m->params, m->lay.total);
    }
    if (scaler) loss_scaler_update(scaler, 0);
    t5_zero_grads(m);
    return r;
}

StepResult zero_train_step(T5Model *m, const Comm *comm, AdamW *opt, const LrSchedule *sched, LossScaler *scaler,
                           const T5Batch *micro, int n_micro, float label_smoothing) {
    long n_tok = 0;
    double loss =
        zero_step_accumulate(m, comm, micro, n_micro, label_smoothing, scaler ? scaler->cur_scale : 1.0, &n_tok);
    StepResult r = zero_step_apply(m, comm, opt, sched, scaler);
    r.loss = loss;
    r.n_tokens = n_tok;
    return r;
}
