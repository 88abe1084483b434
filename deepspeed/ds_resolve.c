// deepspeed/ds_resolve.c: the DeepSpeed config's "auto" values resolved against the
// trainer's flags, the batch rule and the contradictions between the file and a flag the user
// set (see ds_config.h). The rules follow transformers' integrations/deepspeed.py
// (HfTrainerDeepSpeedConfig).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../optim/adamw.h"
#include "ds_config.h"

DsResolveArgs ds_resolve_args_default(void) {
    DsResolveArgs a;
    memset(&a, 0, sizeof a);
    a.per_device_train_batch_size = 8;
    a.gradient_accumulation_steps = 1;
    a.world_size = 1;
    a.learning_rate = ADAMW_HF_LR;  // optim/adamw.h: HF's defaults
    a.adam_beta1 = ADAMW_HF_BETA1;
    a.adam_beta2 = ADAMW_HF_BETA2;
    a.adam_epsilon = ADAMW_HF_EPS;
    a.weight_decay = ADAMW_HF_WEIGHT_DECAY;
    a.max_grad_norm = ADAMW_HF_MAX_GRAD_NORM;
    return a;
}

unsigned ds_flag_set_mask_from_argv(int argc, char **argv, int start) {
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"per_device_train_batch_size", DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE},
        {"gradient_accumulation_steps", DS_FLAG_GRADIENT_ACCUMULATION_STEPS},
        {"learning_rate", DS_FLAG_LEARNING_RATE},
        {"adam_beta1", DS_FLAG_ADAM_BETA1},
        {"adam_beta2", DS_FLAG_ADAM_BETA2},
        {"adam_epsilon", DS_FLAG_ADAM_EPSILON},
        {"adam_eps", DS_FLAG_ADAM_EPSILON},
        {"weight_decay", DS_FLAG_WEIGHT_DECAY},
        {"max_grad_norm", DS_FLAG_MAX_GRAD_NORM},
        {"warmup_steps", DS_FLAG_WARMUP_STEPS},
        {"warmup_ratio", DS_FLAG_WARMUP_STEPS},
        {"max_steps", DS_FLAG_TOTAL_STEPS},
        {"num_train_epochs", DS_FLAG_TOTAL_STEPS},
        {"fp16", DS_FLAG_FP16},
        {"bf16", DS_FLAG_BF16},
    };
    unsigned bits = 0;
    for (int i = start; i < argc; i++) {
        const char *s = argv[i];
        if (strncmp(s, "--", 2) != 0) continue;
        s += 2;
        size_t n = strcspn(s, "=");
        for (size_t j = 0; j < sizeof names / sizeof names[0]; j++)
            if (strlen(names[j].name) == n && !strncmp(s, names[j].name, n)) bits |= names[j].bit;
    }
    return bits;
}

static int same_value(double a, double b) {
    double m = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= 1e-12 * m;
}

static const char *absent_note(int is_set) { return is_set ? "" : " (DeepSpeed's default: the key is absent)"; }

// HF's fill_match: a value in the file that differs from a flag the user set.
static void must_match(const DsConfig *c, const char *key, double v, const char *how, const char *flag, double fv) {
    if (same_value(v, fv)) return;
    t5_fail("%s: \"%s\" is %.10g%s but --%s is %.10g; set the key to \"auto\" or make them equal", c->file, key, v, how,
            flag, fv);
}

static void must_match_bool(const DsConfig *c, const char *key, int v, int is_set, const char *flag, int fv) {
    if (!v == !fv) return;
    t5_fail("%s: \"%s\" is %s%s but --%s is %s; set the key to \"auto\" or make them equal", c->file, key,
            v ? "true" : "false", absent_note(is_set), flag, fv ? "true" : "false");
}

static void fill_num(DsNum *d, double v) {
    d->v = v;
    d->is_auto = 0;
}

static void fill_int(DsInt *d, long long v) {
    d->v = v;
    d->is_auto = 0;
}

// micro x accumulation x world size: more than an int holds (or a long long) is an error.
static long long batch_product(const DsConfig *c, long long m, long long g, long long w) {
    long long mg, t;
    if (__builtin_mul_overflow(m, g, &mg) || __builtin_mul_overflow(mg, w, &t) || t > (long long)IMAX)
        t5_fail("%s: micro-batch %lld x gradient accumulation %lld x world size %lld is more than %.0f samples per "
                "optimizer step; HINT: lower \"train_micro_batch_size_per_gpu\" / \"gradient_accumulation_steps\" "
                "(or the flags their \"auto\" takes)", c->file, m, g, w, IMAX);
    return t;
}

static void resolve_batch(DsConfig *c, const DsResolveArgs *a) {
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    long long P = a->per_device_train_batch_size, G = a->gradient_accumulation_steps, W = a->world_size;
    DsInt *t = &c->train_batch_size, *m = &c->train_micro_batch_size_per_gpu, *g = &c->gradient_accumulation_steps;
    const char *how_t = t->is_auto ? " (\"auto\": world size x --per_device_train_batch_size x "
                                     "--gradient_accumulation_steps)"
                                   : "";
    const char *how_m = m->is_auto ? " (\"auto\": --per_device_train_batch_size)" : "";
    const char *how_g = g->is_auto ? " (\"auto\": --gradient_accumulation_steps)" : "";
    // HF trainer_config_process: "auto" takes the flags (train_batch_size from the flags too)
    if (m->is_auto) fill_int(m, P);
    if (g->is_auto) fill_int(g, G);
    if (t->is_auto) fill_int(t, batch_product(c, P, G, W));
    // DeepSpeed _set_batch_related_parameters: any two give the third. A key absent when the
    // others cannot give it takes the flag (HF 4.2 filled these from the flags itself).
    int ht = t->is_set, hm = m->is_set, hg = g->is_set;
    if (ht && hm && !hg) {
        g->v = t->v / (m->v * W);
        how_g = " (derived)";
    } else if (ht && hg && !hm) {
        m->v = t->v / (g->v * W);
        how_m = " (derived)";
    } else if (hm && hg && !ht) {
        t->v = batch_product(c, m->v, g->v, W);
    } else if (ht && !hm && !hg) {
        g->v = G;
        m->v = t->v / (g->v * W);
        how_m = " (derived)";
    } else if (hm && !ht && !hg) {
        g->v = G;
        t->v = batch_product(c, m->v, g->v, W);
    } else if (!ht && !hm) {
        m->v = P;
        if (!hg) g->v = G;
        t->v = batch_product(c, m->v, g->v, W);
    }
    // DeepSpeed _batch_assertion
    if (m->v < 1 || g->v < 1 || t->v != batch_product(c, m->v, g->v, W))
        t5_fail("%s: batch sizes do not multiply out: \"train_batch_size\" %lld%s != \"train_micro_batch_size_per_gpu\" "
                "%lld%s x \"gradient_accumulation_steps\" %lld%s x world size %lld (= %.0f); fix them or set them to "
                "\"auto\"",
                f, t->v, how_t, m->v, how_m, g->v, how_g, W, (double)m->v * (double)g->v * (double)W);
    if ((ex & DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE) && m->v != P)
        t5_fail("%s: \"train_micro_batch_size_per_gpu\" is %lld%s but --per_device_train_batch_size is %lld; set the "
                "key to \"auto\" or make them equal",
                f, m->v, how_m, P);
    if ((ex & DS_FLAG_GRADIENT_ACCUMULATION_STEPS) && g->v != G)
        t5_fail("%s: \"gradient_accumulation_steps\" is %lld%s but --gradient_accumulation_steps is %lld; set the key "
                "to \"auto\" or make them equal",
                f, g->v, how_g, G);
}

// The optimizer: HF's AdamW from the flags when the file has none; else "auto" filled
// and a flag the user set that the file contradicts is an error.
static void resolve_optimizer(DsConfig *c, const DsResolveArgs *a) {
    unsigned ex = a->flag_set_mask;
    if (!c->optimizer.present) {
        // HF Trainer creates its own AdamW from the flags
        c->optimizer.type = DS_OPTIMIZER_ADAMW;
        c->optimizer.lr.v = a->learning_rate;
        c->optimizer.betas[0].v = a->adam_beta1;
        c->optimizer.betas[1].v = a->adam_beta2;
        c->optimizer.eps.v = a->adam_epsilon;
        c->optimizer.weight_decay.v = a->weight_decay;
    } else {
        DsNum *lr = &c->optimizer.lr, *b = c->optimizer.betas, *eps = &c->optimizer.eps, *wd = &c->optimizer.weight_decay;
        if (lr->is_auto) fill_num(lr, a->learning_rate);
        else if (ex & DS_FLAG_LEARNING_RATE)
            must_match(c, "optimizer.params.lr", lr->v, absent_note(lr->is_set), "learning_rate", a->learning_rate);
        if (b[0].is_auto) {
            fill_num(&b[0], a->adam_beta1);
            fill_num(&b[1], a->adam_beta2);
        } else {
            if (ex & DS_FLAG_ADAM_BETA1)
                must_match(c, "optimizer.params.betas[0]", b[0].v, absent_note(b[0].is_set), "adam_beta1", a->adam_beta1);
            if (ex & DS_FLAG_ADAM_BETA2)
                must_match(c, "optimizer.params.betas[1]", b[1].v, absent_note(b[1].is_set), "adam_beta2", a->adam_beta2);
        }
        if (eps->is_auto) fill_num(eps, a->adam_epsilon);
        else if (ex & DS_FLAG_ADAM_EPSILON)
            must_match(c, "optimizer.params.eps", eps->v, absent_note(eps->is_set), "adam_epsilon", a->adam_epsilon);
        if (wd->is_auto) fill_num(wd, a->weight_decay);
        else if (ex & DS_FLAG_WEIGHT_DECAY)
            must_match(c, "optimizer.params.weight_decay", wd->v, absent_note(wd->is_set), "weight_decay",
                       a->weight_decay);
    }
}

// The scheduler (HF's trainer_config_process / trainer_config_finalize).
static void resolve_scheduler(DsConfig *c, const DsResolveArgs *a) {
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    if (c->scheduler.present) {
        DsSchedulerType st = c->scheduler.type;
        if (st != DS_SCHEDULER_WARMUP_COSINE_LR) {
            DsNum *mn = &c->scheduler.warmup_min_lr, *mx = &c->scheduler.warmup_max_lr;
            if (mn->is_auto) fill_num(mn, 0.0);  // HF fill_only: not a trainer flag
            const char *how = absent_note(mx->is_set);
            if (mx->is_auto) {
                fill_num(mx, a->learning_rate);
            } else {
                if (!mx->is_set && st == DS_SCHEDULER_WARMUP_LR) {
                    mx->v = c->optimizer.lr.v;  // WarmupLR's default: the optimizer's lr
                    how = " (the key is absent: the optimizer's lr)";
                }
                if (ex & DS_FLAG_LEARNING_RATE)
                    must_match(c, "scheduler.params.warmup_max_lr", mx->v, how, "learning_rate", a->learning_rate);
            }
        }
        DsInt *wn = &c->scheduler.warmup_num_steps;
        if (wn->is_auto) fill_int(wn, a->warmup_steps);
        else if ((ex & DS_FLAG_WARMUP_STEPS) && !(a->steps_pending && a->warmup_from_ratio))
            must_match(c, "scheduler.params.warmup_num_steps", (double)wn->v, absent_note(wn->is_set), "warmup_steps",
                       a->warmup_steps);
        if (st == DS_SCHEDULER_WARMUP_DECAY_LR || st == DS_SCHEDULER_WARMUP_COSINE_LR) {
            DsInt *tn = &c->scheduler.total_num_steps;
            if (tn->is_auto && a->total_steps <= 0 && a->steps_pending) {
                // filled by the resolve that follows, once the data gives the step count
            } else if (tn->is_auto) {
                if (a->total_steps <= 0)
                    t5_fail("%s: key \"scheduler.params.total_num_steps\" is \"auto\" but the run's number of optimizer "
                            "steps is not known; set --max_steps or a number in the file",
                            f);
                fill_int(tn, a->total_steps);
            } else if ((ex & DS_FLAG_TOTAL_STEPS) && a->total_steps > 0 && tn->v != a->total_steps) {
                t5_fail("%s: \"scheduler.params.total_num_steps\" is %lld but the run has %d optimizer steps (from "
                        "--max_steps / --num_train_epochs); set the key to \"auto\" or make them equal",
                        f, tn->v, a->total_steps);
            }
        }
    }
}

// fp16 / bf16 "enabled" from --fp16 / --bf16.
static void resolve_precision(DsConfig *c, const DsResolveArgs *a) {
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    if (c->fp16.enabled.is_auto) c->fp16.enabled = (DsBool){.v = a->fp16 != 0, .is_set = 1};
    else if (ex & DS_FLAG_FP16) must_match_bool(c, "fp16.enabled", c->fp16.enabled.v, c->fp16.enabled.is_set, "fp16", a->fp16);
    if (c->bf16.enabled.is_auto) c->bf16.enabled = (DsBool){.v = a->bf16 != 0, .is_set = 1};
    else if (ex & DS_FLAG_BF16) must_match_bool(c, "bf16.enabled", c->bf16.enabled.v, c->bf16.enabled.is_set, "bf16", a->bf16);
    if (c->fp16.enabled.v && c->bf16.enabled.v)
        t5_fail("%s: \"fp16.enabled\" and \"bf16.enabled\" are both true (after \"auto\" from --fp16/--bf16): enable "
                "one of them",
                f);
}

// ZeRO buckets from the hidden size (trainer_config_finalize; HF fills the stage3_* ones only
// at stage 3, where they matter; below stage 3 they are unused, so filling them is harmless).
static void resolve_zero_buckets(DsConfig *c, const DsResolveArgs *a) {
    const char *f = c->file;
    DsInt *rb = &c->zero.reduce_bucket_size, *pf = &c->zero.stage3_prefetch_bucket_size,
          *pt = &c->zero.stage3_param_persistence_threshold;
    if (rb->is_auto || pf->is_auto || pt->is_auto) {
        const char *key = rb->is_auto ? "zero_optimization.reduce_bucket_size"
                          : pf->is_auto ? "zero_optimization.stage3_prefetch_bucket_size"
                                        : "zero_optimization.stage3_param_persistence_threshold";
        if (a->d_model <= 0)
            t5_fail("%s: key \"%s\" is \"auto\" but the model's d_model (hidden size) is not known yet", f, key);
        long long d = a->d_model;
        if (rb->is_auto) fill_int(rb, d * d);
        if (pf->is_auto) fill_int(pf, (long long)(0.9 * (double)(d * d)));
        if (pt->is_auto) fill_int(pt, 10 * d);
    }
}

void ds_config_resolve(DsConfig *c, const DsResolveArgs *a, const char *path) {
    if (path && path != c->file) snprintf(c->file, sizeof c->file, "%s", path);
    const char *f = c->file;
    unsigned ex = a->flag_set_mask;
    if (a->world_size < 1) t5_fail("%s: world size %d: must be >= 1", f, a->world_size);
    if (a->per_device_train_batch_size < 1)
        t5_fail("--per_device_train_batch_size %d: must be >= 1", a->per_device_train_batch_size);
    if (a->gradient_accumulation_steps < 1)
        t5_fail("--gradient_accumulation_steps %d: must be >= 1", a->gradient_accumulation_steps);

    resolve_batch(c, a);

    // gradient clipping (DeepSpeed's default 0 = off when the key is absent)
    if (c->gradient_clipping.is_auto) fill_num(&c->gradient_clipping, a->max_grad_norm);
    else if (ex & DS_FLAG_MAX_GRAD_NORM)
        must_match(c, "gradient_clipping", c->gradient_clipping.v, absent_note(c->gradient_clipping.is_set),
                   "max_grad_norm", a->max_grad_norm);

    resolve_optimizer(c, a);
    resolve_scheduler(c, a);
    resolve_precision(c, a);
    resolve_zero_buckets(c, a);
    if (c->zero.stage3_gather_16bit_weights_on_model_save.is_auto)
        c->zero.stage3_gather_16bit_weights_on_model_save = (DsBool){.v = 0, .is_set = 1};
    c->resolved = 1;
}
