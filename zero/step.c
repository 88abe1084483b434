// zero/step.c: one optimizer step on one rank (see step.h).
#include "step.h"

#include <math.h>

#include "../common/check.h"

StepResult zero_train_step(T5Model *m, AdamW *opt, const LrSchedule *sched, const T5Batch *micro, int n_micro,
                           float label_smoothing) {
    StepResult r = {0};
    if (m->be->act_dtype != DTYPE_F32) t5_fail("zero_train_step: only fp32 parameters on this path so far");
    // the loss is normalized by the label tokens of the whole step (HF's
    // average_tokens_across_devices / num_items_in_batch), so split micro-batches
    // give the same gradient as one big batch
    long total = 0;
    for (int i = 0; i < n_micro; i++)
        for (long k = 0; k < (long)micro[i].B * micro[i].T; k++) total += micro[i].labels[k] != -100;
    if (total == 0) t5_fail("zero_train_step: the step has no label tokens (every label is -100)");
    double loss_sum = 0;
    for (int i = 0; i < n_micro; i++) {
        long n_tok = 0;
        loss_sum += t5_forward(m, &micro[i], label_smoothing, &n_tok);
        t5_backward(m, label_smoothing, (float)(1.0 / (double)total));
    }
    r.loss = loss_sum / (double)total;
    r.n_tokens = total;
    r.grad_norm = sqrt(optimizer_grad_sumsq(m->be, m->grads, m->elem, 0, m->lay.total));
    float coef = optimizer_clip_coef(r.grad_norm, opt->cfg.max_grad_norm);
    r.lr = lr_schedule_at(sched, opt->step);
    adamw_step(opt, m->be, &m->lay, (float *)m->params, m->grads, m->elem, (float)r.lr, coef);
    t5_zero_grads(m);
    return r;
}
