// cmd/import_deepspeed.c: `train_t5 import-deepspeed` (see cmd.h).
//
// The checkpoint is read by formats/ds_checkpoint.c; here its tensors are matched BY NAME to
// train_t5's flat layout (DeepSpeed's order is its param groups', e.g. HF's decay / no-decay
// split), and OUT gets:
//   config.json, model.safetensors     the fp32 weights (hf_save_model), = zero_to_fp32's
//   optimizer.safetensors              "exp_avg", "exp_avg_sq" over the whole flat space in
//                                      layout order (frozen parameters: zeros)
//   zero_state.json                    optimizer_step, parameters, loss_scaler{...}
//   trainer_state.json                 CKPT_DIR's own (HF Trainer's) or {global_step, log_history: []}
// the last three as zero/checkpoint.c and trainer/checkpoint.c read them, so OUT is a
// checkpoint-N folder that --resume_from_checkpoint accepts: everything written is first held
// to the rules that resume applies (zero_counters_ok, trainer_state_read; finite weights and
// moments), and a value it would refuse, or one that misleads (a negative step count, a loss
// scale of nan), is refused here naming the DeepSpeed file and field.
#include "cmd.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/flags.h"
#include "../common/json_read.h"
#include "../formats/ds_checkpoint.h"
#include "../model/hf_dir.h"
#include "../model/params.h"
#include "../optim/loss_scaler.h"
#include "../zero/checkpoint.h"
#include "../trainer/run.h"

#define USAGE "train_t5 import-deepspeed CKPT_DIR OUT [--tag TAG] [--model M]"
#define STRAY_CROSS_BIAS "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"
#define OPT_FILE "optimizer.safetensors"   // zero/checkpoint.c's names
#define STATE_FILE "zero_state.json"
#define TRAINER_STATE "trainer_state.json"
#define HINT_DAMAGED "HINT: the DeepSpeed checkpoint is damaged or not one that DeepSpeed wrote: import another " \
                     "(--tag global_stepN of an earlier save)"

static const char *const EMBED_ALIASES[] = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"};

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

// The checkpoint's tensor for layout tensor `name`: itself, or for shared.weight one of its
// tied aliases (as model/hf_dir.c accepts them).
static const DsTensor *find_for(const DsCheckpoint *c, const char *name, int untied) {
    const DsTensor *t = ds_checkpoint_find(c, name);
    if (t || strcmp(name, "shared.weight") != 0) return t;
    for (int i = 0; i < 2 && !t; i++) t = ds_checkpoint_find(c, EMBED_ALIASES[i]);
    if (!t && !untied) t = ds_checkpoint_find(c, "lm_head.weight");
    return t;
}

// Every tensor of the checkpoint is the layout's, an alias of the embedding (shared with it,
// or the one copy that shared.weight is read from), or the stray cross-attention bias
// transformers ignores: a checkpoint of another model is caught.
static void check_no_extra(const DsCheckpoint *c, const ParamLayout *lay, int untied, const DsTensor *embedding) {
    for (int i = 0; i < c->count; i++) {
        const DsTensor *t = &c->tensors[i];
        if (params_find(lay, t->name) >= 0 || !strcmp(t->name, STRAY_CROSS_BIAS)) continue;
        int alias = !strcmp(t->name, EMBED_ALIASES[0]) || !strcmp(t->name, EMBED_ALIASES[1]) ||
                    (!untied && !strcmp(t->name, "lm_head.weight"));
        if (alias) {
            if (!t->alias_of && t != embedding)  // a second copy of its own: not a tied T5
                t5_fail("%s: \"%s\" is a parameter of its own, not shared with shared.weight: not a T5 layout train_t5 "
                        "knows", c->dir, t->name);
            continue;
        }
        t5_fail("%s: unexpected tensor \"%s\": not a T5ForConditionalGeneration with this config (wrong --model, or "
                "a config.json that does not match the checkpoint?)", c->dir, t->name);
    }
}

static void write_optimizer(const char *out, const ParamLayout *lay, const float *m, const float *v) {
    int64_t total = (int64_t)lay->total;
    StTensorDesc descs[2] = {{.name = "exp_avg", .dtype = ST_F32, .ndim = 1, .shape = {total}},
                             {.name = "exp_avg_sq", .dtype = ST_F32, .ndim = 1, .shape = {total}}};
    char *path = path_join(out, OPT_FILE);
    StWriter w;
    st_writer_open(&w, path, descs, 2, "{\"format\":\"train_t5\"}");
    st_writer_write_f32(&w, m, (uint64_t)total);
    st_writer_write_f32(&w, v, (uint64_t)total);
    st_writer_close(&w);
    free(path);
}

// train_t5's loss scaler from DeepSpeed's fields (a static DeepSpeed scaler counts no
// iterations: the step stands for them), after check_counters.
static LossScaler import_scaler(const DsCheckpoint *c, long global_step) {
    LossScaler s = loss_scaler_static(c->scaler_cur_scale);
    s.dynamic = (int)c->scaler_dynamic;
    s.cur_iter = c->scaler_cur_iter ? c->scaler_cur_iter : global_step;
    s.last_overflow_iter = c->scaler_last_overflow_iter;
    s.cur_hysteresis = c->has_hysteresis ? (int)c->scaler_cur_hysteresis : 0;
    s.skipped_steps = c->skipped_steps;
    return s;
}

// The counters OUT gets (zero_state.json and trainer_state.json's global_step) against the
// rules of a resume, each named by the DeepSpeed file and field it comes from (step_file,
// step_key: where the step was read).
static void check_counters(const DsCheckpoint *c, long step, const char *step_file, const char *step_key) {
    double v[ZC_COUNT] = {
        [ZC_GLOBAL_STEP] = (double)step,
        [ZC_OPTIMIZER_STEP] = (double)c->optimizer_step,
        [ZC_SKIPPED_STEPS] = (double)c->skipped_steps,
        [ZC_DYNAMIC] = (double)c->scaler_dynamic,
        [ZC_CUR_SCALE] = c->scaler_cur_scale,
        [ZC_CUR_ITER] = (double)(c->scaler_cur_iter ? c->scaler_cur_iter : step),
        [ZC_LAST_OVERFLOW_ITER] = (double)c->scaler_last_overflow_iter,
        [ZC_CUR_HYSTERESIS] = c->has_hysteresis ? (double)c->scaler_cur_hysteresis : 0,
    };
    int bad;
    char why[256];
    if (zero_counters_ok(v, &bad, why, sizeof why)) return;
    if (bad == ZC_STEP_SUM)
        t5_fail("%s: the optimizer took %ld steps and skipped %ld, but the checkpoint is at step %ld (%s's %s): the "
                "moments cannot resume it; %s", c->dir, c->optimizer_step, c->skipped_steps, step, step_file, step_key,
                HINT_DAMAGED);
    const char *file = c->optim_files[0].path, *field = NULL;
    char scaler_field[96];
    snprintf(scaler_field, sizeof scaler_field, "optimizer_state_dict.%s", ZERO_COUNTER_NAMES[bad]);
    if (bad == ZC_GLOBAL_STEP) file = step_file, field = step_key;
    else if (bad == ZC_OPTIMIZER_STEP) field = "the base optimizer's \"step\"";
    else if (bad == ZC_SKIPPED_STEPS) file = c->model_files[0].path, field = "skipped_steps";
    else field = scaler_field;
    t5_fail("%s: %s %s (as --resume_from_checkpoint would read it); %s", file, field, why, HINT_DAMAGED);
}

// The step OUT resumes at: DeepSpeed's global_steps, else the optimizer's steps and the
// skipped ones; HF Trainer's trainer_state.json beside the tag folder, when there, must be of
// that step and pass a resume's checks (it is copied). -1: unknown (no counters, no moments).
static long import_step(const DsCheckpoint *c, const char *ckpt_dir) {
    const char *mf = c->model_files[0].path;
    if (c->has_global_steps && !(c->global_steps >= 0 && c->global_steps <= INT_MAX))
        t5_fail("%s: global_steps is %ld, expected a whole number of steps in [0, %d]; %s", mf, c->global_steps,
                INT_MAX, HINT_DAMAGED);
    long step = c->has_global_steps ? c->global_steps : c->has_moments ? c->optimizer_step + c->skipped_steps : -1;
    if (!c->has_moments) return step;  // OUT is a model: no counters are written
    char *src = path_join(ckpt_dir, TRAINER_STATE);
    if (path_exists(src)) {  // read through read_text_file: a FIFO or a directory is refused there
        int hf_step;
        cJSON_Delete(trainer_state_read(src, &hf_step));
        if (hf_step != step)
            t5_fail("%s: global_step %d, but the DeepSpeed checkpoint is at step %ld: they are not one checkpoint; "
                    "HINT: pass the checkpoint-N folder HF Trainer wrote, or --tag of its step", src, hf_step, step);
    }
    check_counters(c, step, c->has_global_steps ? mf : c->optim_files[0].path,
                   c->has_global_steps ? "global_steps" : "step (the optimizer's, with skipped_steps)");
    free(src);
    return step;
}

static void write_zero_state(const char *out, const DsCheckpoint *c, const ParamLayout *lay, long global_step) {
    LossScaler s = import_scaler(c, global_step);
    cJSON *st = cJSON_CreateObject(), *ls = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "optimizer_step", (double)c->optimizer_step);
    cJSON_AddNumberToObject(st, "parameters", (double)lay->total);
    cJSON_AddNumberToObject(ls, "dynamic", s.dynamic);
    cJSON_AddNumberToObject(ls, "cur_scale", s.cur_scale);
    cJSON_AddNumberToObject(ls, "cur_iter", (double)s.cur_iter);
    cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)s.last_overflow_iter);
    cJSON_AddNumberToObject(ls, "cur_hysteresis", s.cur_hysteresis);
    cJSON_AddNumberToObject(ls, "skipped_steps", (double)s.skipped_steps);
    cJSON_AddItemToObject(st, "loss_scaler", ls);
    char *path = path_join(out, STATE_FILE);
    json_save_atomic(st, path);
    free(path);
    cJSON_Delete(st);
}

// CKPT_DIR/trainer_state.json when HF Trainer wrote one (import_step checked it), else a
// minimal one.
static void write_trainer_state(const char *ckpt_dir, const char *out, long step) {
    char *src = path_join(ckpt_dir, TRAINER_STATE), *dst = path_join(out, TRAINER_STATE);
    if (path_exists(src)) {  // a FIFO or a directory there was refused when import_step read it, not skipped
        file_copy_atomic(src, dst);
    } else {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddNumberToObject(st, "global_step", (double)step);
        cJSON_AddItemToObject(st, "log_history", cJSON_CreateArray());
        json_save_atomic(st, dst);
        cJSON_Delete(st);
    }
    free(src);
    free(dst);
}

// Values a resume would refuse (zero/checkpoint.c's place_range, the model loader): a weight or
// moment that is not finite, a negative second moment. Named by the checkpoint's tensor.
static void check_values(const DsCheckpoint *c, const char *name, const char *what, const float *x, size_t n,
                         int second_moment) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (second_moment && x[i] < 0))
            t5_fail("%s: \"%s\" (%s) holds %g at element %zu, which --resume_from_checkpoint refuses; %s", c->dir,
                    name, what, (double)x[i], i, HINT_DAMAGED);
}

int cmd_run_import_deepspeed(int argc, char **argv) {
    const char *tag = NULL, *model = NULL;
    int help = 0;
    FlagSpec specs[] = {
        {"tag", FLAG_STRING, &tag, "the checkpoint's tag folder (default: the one CKPT_DIR/latest names)"},
        {"model", FLAG_STRING, &model, "the architecture (a preset or a directory with config.json) when CKPT_DIR has "
                                       "no config.json"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    // CKPT_DIR and OUT: the words that are neither a flag nor a flag's value
    const char **pos = mallocCheck(sizeof(char *) * (size_t)(argc ? argc : 1));
    int npos = flags_parse_words(argc, argv, 2, specs, n_specs, "import-deepspeed", pos);
    if (npos > 2) t5_fail("import-deepspeed: unexpected argument \"%s\"; HINT: %s", pos[2], USAGE);
    if (help) {
        printf("%s\n  A DeepSpeed ZeRO-2/3 checkpoint into an HF model directory OUT (fp32 model.safetensors equal to\n"
               "  zero_to_fp32's), with the Adam moments and counters so that --resume_from_checkpoint OUT goes on.\n",
               USAGE);
        flags_print_help(specs, n_specs);
        free(pos);
        return 0;
    }
    if (npos != 2) t5_fail("import-deepspeed: CKPT_DIR and OUT are required; HINT: %s", USAGE);
    const char *ckpt = pos[0], *out = pos[1];
    if (!path_is_dir(ckpt))
        t5_fail("import-deepspeed: %s: %s; HINT: CKPT_DIR is the folder DeepSpeed's save_checkpoint wrote (HF "
                "Trainer's checkpoint-N, with `latest` and global_stepN/)", ckpt,
                path_exists(ckpt) ? "not a directory" : "not found");
    if (path_exists(out) && (!path_is_dir(out) || dir_is_nonempty(out)))
        t5_fail("import-deepspeed: OUT %s %s; HINT: name a new directory", out,
                path_is_dir(out) ? "is a directory that is not empty" : "exists and is not a directory");

    // the architecture: --model, else the config.json HF Trainer writes beside global_stepN/
    T5Config cfg;
    char *ckpt_cfg = path_join(ckpt, "config.json");
    if (model) {
        hf_resolve_model(model, &cfg);
    } else if (path_exists(ckpt_cfg)) {  // a FIFO there is refused when read
        t5_config_load_json(ckpt_cfg, &cfg);
    } else {
        t5_fail("import-deepspeed: %s has no config.json; HINT: pass --model with the architecture (a preset such as "
                "t5-small, or a directory with config.json)", ckpt);
    }
    free(ckpt_cfg);

    DsCheckpoint c;
    ds_checkpoint_open(&c, ckpt, tag);
    const DsTensor *lm = ds_checkpoint_find(&c, "lm_head.weight");
    int untied = lm && !lm->alias_of;
    cfg.untied_lm_head = untied;
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    check_no_extra(&c, &lay, untied, find_for(&c, "shared.weight", untied));
    long step = import_step(&c, ckpt);  // every counter checked before anything is read or written

    float *params = mallocCheck(lay.total * sizeof(float));
    float *m = c.has_moments ? callocCheck(lay.total, sizeof(float)) : NULL;
    float *v = c.has_moments ? callocCheck(lay.total, sizeof(float)) : NULL;
    char want[64], got[64];
    for (int i = 0; i < lay.count; i++) {
        const ParamSpec *s = &lay.specs[i];
        const DsTensor *t = find_for(&c, s->name, untied);
        shape_str(want, sizeof want, s->ndim, s->shape);
        if (!t) t5_fail("%s: missing tensor \"%s\" (expected shape %s); HINT: --model must be the checkpoint's architecture", c.dir, s->name, want);
        int same = t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
        if (!same) {
            shape_str(got, sizeof got, t->ndim, t->shape);
            t5_fail("%s: tensor \"%s\": expected shape %s, found %s; HINT: --model must be the checkpoint's architecture",
                    c.dir, t->name, want, got);
        }
        ds_checkpoint_read(&c, t, params + s->offset);
        check_values(&c, t->name, "the fp32 weights", params + s->offset, s->numel, 0);
        const DsTensor *data = t->alias_of ? ds_checkpoint_find(&c, t->alias_of) : t;
        if (c.has_moments && data->kind == DS_TRAINABLE) {
            ds_checkpoint_read_moment(&c, data, 0, m + s->offset);
            ds_checkpoint_read_moment(&c, data, 1, v + s->offset);
            check_values(&c, data->name, "exp_avg", m + s->offset, s->numel, 0);
            check_values(&c, data->name, "exp_avg_sq", v + s->offset, s->numel, 1);
        }
    }

    mkdir_p(out);
    fileio_remove_at_exit(out);  // an error from here on leaves no half-written OUT
    hf_save_model(out, &cfg, &lay, params, ST_F32);
    if (c.has_moments) {
        write_trainer_state(ckpt, out, step);
        write_optimizer(out, &lay, m, v);
        write_zero_state(out, &c, &lay, step);
    }
    fileio_keep(out);
    char step_text[32] = "step unknown";
    if (step >= 0) snprintf(step_text, sizeof step_text, "step %ld", step);
    printf("imported %s (DeepSpeed %s, ZeRO-%d, %d rank%s, %s): %zu parameters in %d tensors -> %s/model.safetensors%s\n",
           c.dir, c.ds_version, c.zero_stage, c.world_size, c.world_size == 1 ? "" : "s", step_text, lay.total,
           lay.count, out, c.has_moments ? ", optimizer.safetensors, zero_state.json, trainer_state.json" : "");
    if (!c.has_moments)
        printf("NOTICE: the checkpoint holds no Adam moments (exp_avg, exp_avg_sq): OUT is a model, not a checkpoint "
               "to resume\n");
    free(params);
    free(m);
    free(v);
    params_free_layout(&lay);
    ds_checkpoint_close(&c);
    free(pos);
    return 0;
}
