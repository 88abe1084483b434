// formats/ds_checkpoint.c: DeepSpeed ZeRO-2/3 checkpoints (see ds_checkpoint.h).
//
// Facts from DeepSpeed 0.19 (deepspeed/utils/zero_to_fp32.py, runtime/engine.py,
// runtime/zero/stage_1_and_2.py and stage3.py), re-written here:
//  - DIR/TAG/*_model_states.pt: {module, buffer_names, param_shapes (a list of OrderedDicts
//    name -> torch.Size, one per param group, in flat order), frozen_param_shapes,
//    frozen_param_fragments, shared_params {alias: name}, global_steps, skipped_steps, ...}.
//  - DIR/TAG/*_optim_states.pt, one per rank (natural sort order): {optimizer_state_dict:
//    {zero_stage, partition_count, loss_scaler, ZeRO-2: single_partition_of_fp32_groups (the
//    rank's partition of each group, padding removed) + base_optimizer_state (the torch
//    optimizer's state_dict over the padded partitions, or per-group lean states when
//    elastic); ZeRO-3: fp32_flat_groups + optimizer_state_dict}}.
//  - ZeRO-2: a group's full flat vector is the ranks' partitions concatenated; the group's
//    parameters lie back to back from 0; what is left is alignment padding (2 * world_size).
//  - ZeRO-3: each parameter is split in ceil(numel / world_size) elements per rank, padded at
//    the end; a rank's flat space holds its pieces in parameter order across the sub-groups.
#include "ds_checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"

#define MODEL_SUFFIX "_model_states.pt"
#define OPTIM_SUFFIX "_optim_states.pt"
#define MP_RANK_0 "mp_rank_00_"
#define ZERO2_ALIGN_PER_RANK 2  // zero_to_fp32: align_to = 2 * world_size
#define HINT_DS "HINT: pass the directory DeepSpeed's save_checkpoint wrote (it holds `latest` and the tag folder), " \
                "complete, as zero_to_fp32.py takes it"

// ---- small helpers ---------------------------------------------------------------------

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

// zero_to_fp32's natural_keys order: digit runs compare as numbers.
static int natural_cmp(const void *pa, const void *pb) {
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            unsigned long long x = strtoull(a, (char **)&a, 10), y = strtoull(b, (char **)&b, 10);
            if (x != y) return x < y ? -1 : 1;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++, b++;
        }
    }
    return (unsigned char)*a - (unsigned char)*b;
}

static char *dup_str(const char *s) {
    char *d = strdup(s);
    if (!d) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    return d;
}

// An int: a Python int or bool, or an IntEnum (ZeroStageEnum pickles as REDUCE(cls, (value,))).
static int pk_as_int(const PkValue *v, long *out) {
    if (v && (v->kind == PK_INT || v->kind == PK_BOOL)) {
        *out = (long)v->i;
        return 1;
    }
    if (v && v->kind == PK_OBJECT && v->items[0] && v->items[0]->n == 1 && v->items[0]->items[0]->kind == PK_INT) {
        *out = (long)v->items[0]->items[0]->i;
        return 1;
    }
    return 0;
}
static int pk_as_double(const PkValue *v, double *out) {
    if (v && v->kind == PK_FLOAT) {
        *out = v->f;
        return 1;
    }
    long i;
    if (pk_as_int(v, &i)) {
        *out = (double)i;
        return 1;
    }
    return 0;
}

static const PkValue *need(const TorchFile *tf, const PkValue *dict, const char *key, PkKind kind, const char *where) {
    const PkValue *v = pk_dict_get(dict, key);
    if (!v || v->kind != kind)
        t5_fail("%s: %s\"%s\" is %s, expected a %s; %s", tf->path, where, key, v ? pk_kind_name(v->kind) : "missing",
                pk_kind_name(kind), HINT_DS);
    return v;
}

static long need_int(const TorchFile *tf, const PkValue *dict, const char *key, const char *where) {
    long x;
    if (!pk_as_int(pk_dict_get(dict, key), &x))
        t5_fail("%s: %s\"%s\" is missing or not an integer; %s", tf->path, where, key, HINT_DS);
    return x;
}

// ---- files -----------------------------------------------------------------------------

// The files of DIR/TAG ending in suffix, natural-sorted; each must be of model-parallel rank 0.
static char **list_files(const char *dir, const char *suffix, int *n) {
    DIR *d = opendir(dir);
    if (!d) t5_fail("%s: cannot open the checkpoint folder (%s); %s", dir, strerror(errno), HINT_DS);
    char **names = NULL;
    int cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!ends_with(e->d_name, suffix)) continue;
        if (!strstr(e->d_name, MP_RANK_0))
            t5_fail("%s/%s: a model-parallel rank other than 0: tensor- or pipeline-parallel checkpoints are not "
                    "supported (zero_to_fp32 reads mp_rank_00 only)", dir, e->d_name);
        if (cnt == cap) {
            cap = cap ? 2 * cap : 8;
            names = reallocCheck(names, (size_t)cap * sizeof *names);
        }
        names[cnt++] = path_join(dir, e->d_name);
    }
    closedir(d);
    if (!cnt) t5_fail("%s: no *%s files: not a DeepSpeed ZeRO checkpoint folder; %s", dir, suffix, HINT_DS);
    qsort(names, (size_t)cnt, sizeof *names, natural_cmp);
    *n = cnt;
    return names;
}

// A tag names a folder of DIR: one path component, not DIR itself or its parent (DeepSpeed
// would join "..", or an absolute path, and read another checkpoint). `from` says where it came
// from ("DIR/latest", "--tag").
static void check_tag(const char *tag, size_t len, const char *from, const char *dir) {
    const char *why = !len                                    ? "is empty"
                      : strlen(tag) != len                    ? "holds a NUL byte"
                      : !strcmp(tag, ".") || !strcmp(tag, "..") ? "names the checkpoint folder itself or its parent"
                      : strchr(tag, '/')                      ? "is a path, not a folder name"
                                                              : NULL;
    if (why)
        t5_fail("%s: the tag \"%.60s\" %s; HINT: the tag is a folder of %s (global_stepN, as DeepSpeed's "
                "save_checkpoint writes it): fix %s or pass --tag", from, tag, why, dir, from);
}

// DIR/latest holds the tag (zero_to_fp32: open(latest).read().strip()).
static char *read_tag(const char *dir) {
    char *latest = path_join(dir, "latest");
    size_t len = 0;
    char *text = read_text_file(latest, &len);
    if (!text)
        t5_fail("%s: cannot read it (%s), so the tag is unknown; HINT: pass --tag global_stepN (a folder in %s)",
                latest, strerror(errno), dir);
    char *s = text, *end = text + len;
    while (s < end && isspace((unsigned char)*s)) s++;
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    check_tag(s, (size_t)(end - s), latest, dir);
    char *tag = dup_str(s);
    free(text);
    free(latest);
    return tag;
}

// ---- optimizer states ------------------------------------------------------------------

static void tensor_list(const TorchFile *tf, const PkValue *list, const char *what, int n, TorchTensor *out) {
    if (list->n != n)
        t5_fail("%s: %s holds %d tensors, the first rank's %d; %s", tf->path, what, list->n, n, HINT_DS);
    for (int g = 0; g < n; g++) {
        char name[96];
        snprintf(name, sizeof name, "%s[%d]", what, g);
        torch_file_tensor(tf, list->items[g], name, &out[g]);
        if (out[g].dtype != TORCH_F32)
            t5_fail("%s: %s is %s, expected the fp32 master (float32)", tf->path, name, torch_dtype_name(out[g].dtype));
    }
}

// The base optimizer's state of each flat group: exp_avg, exp_avg_sq, step. 0 when it has
// none (an optimizer without moments, or no step taken yet).
static int read_moments(DsCheckpoint *c, int r, const PkValue *osd) {
    const TorchFile *tf = &c->optim_files[r];
    int ng = c->n_groups;
    const PkValue *base = pk_dict_get(osd, c->zero_stage == 3 ? "optimizer_state_dict" : "base_optimizer_state");
    const PkValue **st = callocCheck((size_t)ng, sizeof *st);
    const PkValue *step_v = NULL;
    int have = 1;
    if (base && base->kind == PK_LIST) {  // ZeRO-2 elastic: one lean state per group
        if (base->n != ng) t5_fail("%s: base_optimizer_state holds %d groups, expected %d; %s", tf->path, base->n, ng, HINT_DS);
        for (int g = 0; g < ng; g++) st[g] = base->items[g];
        step_v = pk_dict_get(osd, "base_optimizer_state_step");
    } else if (base && base->kind == PK_DICT) {  // torch's Optimizer.state_dict(): ids numbered over the groups
        const PkValue *groups = need(tf, base, "param_groups", PK_LIST, "optimizer state ");
        const PkValue *state = need(tf, base, "state", PK_DICT, "optimizer state ");
        int k = 0;
        for (int i = 0; i < groups->n; i++) {
            const PkValue *ids = need(tf, groups->items[i], "params", PK_LIST, "param_groups entry ");
            for (int j = 0; j < ids->n; j++, k++) {
                long id;
                if (!pk_as_int(ids->items[j], &id)) t5_fail("%s: a param_groups id is not an integer; %s", tf->path, HINT_DS);
                if (k < ng) st[k] = pk_dict_get_int(state, id);
            }
        }
        if (k != ng)
            t5_fail("%s: the optimizer has %d parameters, but there are %d flat fp32 groups; %s", tf->path, k, ng, HINT_DS);
    } else {
        have = 0;
    }
    for (int g = 0; g < ng && have; g++) {
        if (!st[g] || !pk_dict_get(st[g], "exp_avg") || !pk_dict_get(st[g], "exp_avg_sq")) {
            have = 0;
            break;
        }
        const char *keys[2] = {"exp_avg", "exp_avg_sq"};
        TorchTensor *dst[2] = {&c->exp_avg[r * ng + g], &c->exp_avg_sq[r * ng + g]};
        for (int m = 0; m < 2; m++) {
            char name[64];
            snprintf(name, sizeof name, "optimizer state %s of group %d", keys[m], g);
            torch_file_tensor(tf, pk_dict_get(st[g], keys[m]), name, dst[m]);
            if (dst[m]->dtype != TORCH_F32) t5_fail("%s: %s is %s, expected float32", tf->path, name, torch_dtype_name(dst[m]->dtype));
            // ZeRO-2's rigid state keeps the alignment padding at the end of the last rank
            if (dst[m]->numel < c->fp32[r * ng + g].numel)
                t5_fail("%s: %s has %llu elements, the fp32 partition %llu; %s", tf->path, name,
                        (unsigned long long)dst[m]->numel, (unsigned long long)c->fp32[r * ng + g].numel, HINT_DS);
        }
        if (!step_v) step_v = pk_dict_get(st[g], "step");
    }
    if (have && r == 0) {  // the step count: a number, or a 0-d float32 tensor (torch >= 1.12)
        double step = -1;
        if (step_v && step_v->kind == PK_TENSOR) {
            TorchTensor t;
            torch_file_tensor(tf, step_v, "optimizer state step", &t);
            float f = -1;
            if (t.numel == 1) torch_file_read_f32(tf, &t, "optimizer state step", 0, 1, &f);
            step = f;
        } else if (step_v) {
            pk_as_double(step_v, &step);
        }
        if (!(step >= 0 && step == floor(step) && step < 1e15))
            t5_fail("%s: the optimizer's \"step\" is missing or not a whole number; %s", tf->path, HINT_DS);
        c->optimizer_step = (long)step;
    }
    free(st);
    return have;
}

// A loss-scaler attribute: absent, 0 (the default stays); present, it must be an integer
// (as_double: or a float), else one line naming the file and attribute (never a silent default).
static int scaler_attr(const DsCheckpoint *c, const PkValue *state, const char *key, long *l, double *d) {
    const PkValue *v = pk_dict_get(state, key);
    if (!v) return 0;
    if (l ? pk_as_int(v, l) : pk_as_double(v, d)) return 1;
    t5_fail("%s: optimizer_state_dict.loss_scaler.%s is %s, expected %s; %s", c->optim_files[0].path, key,
            pk_kind_name(v->kind), l ? "an integer" : "a number", HINT_DS);
}

static void read_loss_scaler(DsCheckpoint *c, const PkValue *osd) {
    c->scaler_dynamic = 0;
    c->scaler_cur_scale = 1.0;
    c->scaler_cur_iter = 0;
    c->scaler_last_overflow_iter = -1;
    c->has_hysteresis = 0;
    c->scaler_cur_hysteresis = 0;
    const PkValue *ls = pk_dict_get(osd, "loss_scaler");
    if (!ls || ls->kind == PK_NONE) return;
    const PkValue *state = ls->kind == PK_OBJECT ? ls->items[1] : ls;  // BUILD's state: the __dict__
    if (!state || state->kind != PK_DICT)
        t5_fail("%s: the loss scaler (%s) has no attribute dict; %s", c->optim_files[0].path,
                ls->kind == PK_OBJECT ? ls->s : pk_kind_name(ls->kind), HINT_DS);
    scaler_attr(c, state, "dynamic", &c->scaler_dynamic, NULL);
    scaler_attr(c, state, "cur_scale", NULL, &c->scaler_cur_scale);
    scaler_attr(c, state, "cur_iter", &c->scaler_cur_iter, NULL);
    scaler_attr(c, state, "last_overflow_iter", &c->scaler_last_overflow_iter, NULL);
    c->has_hysteresis = scaler_attr(c, state, "cur_hysteresis", &c->scaler_cur_hysteresis, NULL);
}

// ---- the tensor table --------------------------------------------------------------------

static DsTensor *add_tensor(DsCheckpoint *c, const TorchFile *tf, const char *name, const PkValue *shape,
                            DsTensorKind kind) {
    c->tensors = reallocCheck(c->tensors, (size_t)(c->count + 1) * sizeof *c->tensors);
    DsTensor *t = &c->tensors[c->count++];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    t->kind = kind;
    t->numel = 1;
    if (shape) {
        if (shape->kind != PK_TUPLE || shape->n > PK_MAX_DIMS)
            t5_fail("%s: the shape of \"%s\" is a %s, not a torch.Size; %s", tf->path, name, pk_kind_name(shape->kind), HINT_DS);
        t->ndim = shape->n;
        for (int d = 0; d < shape->n; d++) {
            long s;
            if (!pk_as_int(shape->items[d], &s) || s < 0) t5_fail("%s: the shape of \"%s\" is not sizes; %s", tf->path, name, HINT_DS);
            t->shape[d] = s;
            t->numel *= (uint64_t)s;
        }
    }
    return t;
}

static void set_shape_from(DsTensor *t, const TorchTensor *tt) {
    t->ndim = tt->ndim;
    for (int d = 0; d < tt->ndim; d++) t->shape[d] = tt->shape[d];
    t->numel = tt->numel;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static void build_table(DsCheckpoint *c) {
    const TorchFile *mf = &c->model_files[0];
    const PkValue *ms = mf->root;
    if (ms->kind != PK_DICT || !pk_dict_get(ms, "buffer_names"))
        t5_fail("%s: not a model state checkpoint (no buffer_names); %s", mf->path, HINT_DS);
    // 1. buffers: module entries named in buffer_names, as fp32
    const PkValue *bufs = need(mf, ms, "buffer_names", PK_LIST, "");
    const PkValue *module = pk_dict_get(ms, "module");
    for (int i = 0; module && module->kind == PK_DICT && i < module->n; i += 2) {
        const PkValue *k = module->items[i];
        int is_buf = 0;
        for (int b = 0; b < bufs->n && !is_buf; b++) is_buf = bufs->items[b]->kind == PK_STR && k->kind == PK_STR && !strcmp(bufs->items[b]->s, k->s);
        if (!is_buf) continue;
        DsTensor *t = add_tensor(c, mf, k->s, NULL, DS_BUFFER);
        TorchTensor tt;
        torch_file_tensor(mf, module->items[i + 1], k->s, &tt);
        set_shape_from(t, &tt);
        t->values = callocCheck(1, sizeof *t->values);
        t->values[0] = module->items[i + 1];
    }
    // 2. frozen parameters
    const PkValue *fshapes = pk_dict_get(ms, "frozen_param_shapes");
    if (fshapes && fshapes->kind == PK_DICT) {
        for (int i = 0; i < fshapes->n; i += 2) {
            const char *name = fshapes->items[i]->kind == PK_STR ? fshapes->items[i]->s : "?";
            DsTensor *t = add_tensor(c, mf, name, fshapes->items[i + 1], DS_FROZEN);
            int nv = c->zero_stage == 3 ? c->world_size : 1;
            if (nv > c->n_model_files)
                t5_fail("%s: ZeRO-3 frozen parameters need one model-states file per rank (%d), found %d; %s", c->dir,
                        nv, c->n_model_files, HINT_DS);
            t->values = callocCheck((size_t)nv, sizeof *t->values);
            for (int r = 0; r < nv; r++) {
                const PkValue *frags = pk_dict_get(c->model_files[r].root, "frozen_param_fragments");
                t->values[r] = pk_dict_get(frags, name);
                if (!t->values[r])
                    t5_fail("%s: frozen parameter \"%s\" has no fragment; %s", c->model_files[r].path, name, HINT_DS);
            }
        }
    }
    // 3. trainable parameters in flat order
    const PkValue *pshapes = need(mf, ms, "param_shapes", PK_LIST, "");
    int ng = c->n_groups, ws = c->world_size;
    if (c->zero_stage <= 2) {
        if (pshapes->n != ng)
            t5_fail("%s: param_shapes has %d groups, the optimizer %d flat fp32 groups; %s", mf->path, pshapes->n, ng, HINT_DS);
        for (int g = 0; g < ng; g++) {
            const PkValue *shapes = pshapes->items[g];
            if (shapes->kind != PK_DICT) t5_fail("%s: param_shapes[%d] is not a dict; %s", mf->path, g, HINT_DS);
            uint64_t offset = 0, avail = 0;
            for (int r = 0; r < ws; r++) avail += c->fp32[r * ng + g].numel;
            for (int i = 0; i < shapes->n; i += 2) {
                DsTensor *t = add_tensor(c, mf, shapes->items[i]->kind == PK_STR ? shapes->items[i]->s : "?",
                                         shapes->items[i + 1], DS_TRAINABLE);
                t->group = g;
                t->offset = offset;
                offset += t->numel;
            }
            uint64_t align = (uint64_t)ZERO2_ALIGN_PER_RANK * (uint64_t)ws;
            if (offset > avail || ceil_div(offset, align) * align != ceil_div(avail, align) * align)
                t5_fail("%s: group %d: the parameters need %llu elements, the ranks' partitions hold %llu (zero_to_fp32: "
                        "\"consumed %llu numels out of %llu - something is wrong\"); %s", c->dir, g,
                        (unsigned long long)offset, (unsigned long long)avail, (unsigned long long)offset,
                        (unsigned long long)avail, HINT_DS);
        }
    } else {
        c->group_offset = callocCheck((size_t)ng + 1, sizeof *c->group_offset);
        for (int g = 0; g < ng; g++) {
            c->group_offset[g + 1] = c->group_offset[g] + c->fp32[g].numel;
            for (int r = 1; r < ws; r++)
                if (c->fp32[r * ng + g].numel != c->fp32[g].numel)
                    t5_fail("%s: rank %d's fp32_flat_groups[%d] has %llu elements, rank 0's %llu; %s", c->optim_files[r].path,
                            r, g, (unsigned long long)c->fp32[r * ng + g].numel, (unsigned long long)c->fp32[g].numel, HINT_DS);
        }
        uint64_t offset = 0;
        for (int g = 0; g < pshapes->n; g++) {
            const PkValue *shapes = pshapes->items[g];
            if (shapes->kind != PK_DICT) t5_fail("%s: param_shapes[%d] is not a dict; %s", mf->path, g, HINT_DS);
            for (int i = 0; i < shapes->n; i += 2) {
                DsTensor *t = add_tensor(c, mf, shapes->items[i]->kind == PK_STR ? shapes->items[i]->s : "?",
                                         shapes->items[i + 1], DS_TRAINABLE);
                t->offset = offset;
                offset += ceil_div(t->numel, (uint64_t)ws);
            }
        }
        if (offset != c->group_offset[ng])
            t5_fail("%s: the parameters need %llu elements per rank, the fp32_flat_groups hold %llu (zero_to_fp32: "
                    "\"consumed %llu numels out of %llu - something is wrong\"); %s", c->dir, (unsigned long long)offset,
                    (unsigned long long)c->group_offset[ng], (unsigned long long)(offset * (uint64_t)ws),
                    (unsigned long long)(c->group_offset[ng] * (uint64_t)ws), HINT_DS);
    }
    // 4. shared parameters: aliases of tensors already there (zero_to_fp32 skips the others)
    const PkValue *shared = pk_dict_get(ms, "shared_params");
    for (int i = 0; shared && shared->kind == PK_DICT && i < shared->n; i += 2) {
        const PkValue *k = shared->items[i], *v = shared->items[i + 1];
        if (k->kind != PK_STR || v->kind != PK_STR) continue;
        const DsTensor *target = ds_checkpoint_find(c, v->s);
        if (!target) continue;
        int ti = (int)(target - c->tensors);
        DsTensor *t = add_tensor(c, mf, k->s, NULL, c->tensors[ti].kind);
        const DsTensor *tg = &c->tensors[ti];  // after the realloc
        t->alias_of = tg->name;
        t->ndim = tg->ndim;
        memcpy(t->shape, tg->shape, sizeof t->shape);
        t->numel = tg->numel;
    }
    for (int i = 0; i < c->count; i++)  // names unique (a later entry replaces, as in zero_to_fp32's dict)
        for (int j = i + 1; j < c->count; j++)
            if (!strcmp(c->tensors[i].name, c->tensors[j].name))
                t5_fail("%s: \"%s\" appears twice among the parameters, buffers and shared names; %s", mf->path,
                        c->tensors[i].name, HINT_DS);
}

// ---- public ----------------------------------------------------------------------------

void ds_checkpoint_open(DsCheckpoint *c, const char *dir, const char *tag_arg) {
    memset(c, 0, sizeof *c);
    if (!path_is_dir(dir)) t5_fail("%s: %s; %s", dir, path_exists(dir) ? "not a directory" : "not found", HINT_DS);
    if (tag_arg) check_tag(tag_arg, strlen(tag_arg), "--tag", dir);
    char *tag = tag_arg ? dup_str(tag_arg) : read_tag(dir);
    c->dir = path_join(dir, tag);
    if (!path_is_dir(c->dir))
        t5_fail("%s: the tag folder \"%s\" is not there; HINT: pass --tag with a folder of %s", c->dir, tag, dir);
    free(tag);
    int nm, no;
    char **mnames = list_files(c->dir, MODEL_SUFFIX, &nm);
    char **onames = list_files(c->dir, OPTIM_SUFFIX, &no);
    c->model_files = callocCheck((size_t)nm, sizeof *c->model_files);
    for (int i = 0; i < nm; i++, c->n_model_files = i) torch_file_open(&c->model_files[i], mnames[i]);
    c->optim_files = callocCheck((size_t)no, sizeof *c->optim_files);
    for (int i = 0; i < no; i++) torch_file_open(&c->optim_files[i], onames[i]);
    c->world_size = no;

    const TorchFile *o0 = &c->optim_files[0];
    const PkValue *osd0 = pk_dict_get(o0->root, "optimizer_state_dict");
    long stage;
    if (!osd0 || osd0->kind != PK_DICT || !pk_as_int(pk_dict_get(osd0, "zero_stage"), &stage))
        t5_fail("%s: not a ZeRO checkpoint (no optimizer_state_dict.zero_stage); %s", o0->path, HINT_DS);
    if (stage < 1 || stage > 3) t5_fail("%s: zero_stage %ld: only ZeRO stages 1-3 are supported", o0->path, stage);
    c->zero_stage = (int)stage;
    const PkValue *pc = pk_dict_get(osd0, "partition_count");
    long ws = 0, x;
    if (pc && pc->kind == PK_LIST) {  // ZeRO-2: one per group; zero_to_fp32 takes the max
        for (int i = 0; i < pc->n; i++)
            if (pk_as_int(pc->items[i], &x) && x > ws) ws = x;
    } else if (pk_as_int(pc, &x)) {
        ws = x;
    }
    if (ws != no)
        t5_fail("%s: expected %ld *%s files (partition_count) but found %d: an overwritten checkpoint, or one that a "
                "rank did not finish saving; %s", c->dir, ws, OPTIM_SUFFIX, no, HINT_DS);
    const char *gkey = c->zero_stage <= 2 ? "single_partition_of_fp32_groups" : "fp32_flat_groups";
    for (int r = 0; r < no; r++) {
        const TorchFile *tf = &c->optim_files[r];
        const PkValue *osd = pk_dict_get(tf->root, "optimizer_state_dict");
        if (!osd || osd->kind != PK_DICT) t5_fail("%s: no optimizer_state_dict; %s", tf->path, HINT_DS);
        const PkValue *groups = need(tf, osd, gkey, PK_LIST, "optimizer_state_dict ");
        if (r == 0) {
            c->n_groups = groups->n;
            c->fp32 = callocCheck((size_t)no * (size_t)(groups->n ? groups->n : 1), sizeof *c->fp32);
            c->exp_avg = callocCheck((size_t)no * (size_t)(groups->n ? groups->n : 1), sizeof *c->exp_avg);
            c->exp_avg_sq = callocCheck((size_t)no * (size_t)(groups->n ? groups->n : 1), sizeof *c->exp_avg_sq);
        }
        tensor_list(tf, groups, gkey, c->n_groups, &c->fp32[r * c->n_groups]);
    }
    c->optimizer_step = -1;
    c->has_moments = 1;
    for (int r = 0; r < no; r++)
        c->has_moments &= read_moments(c, r, pk_dict_get(c->optim_files[r].root, "optimizer_state_dict"));
    read_loss_scaler(c, osd0);
    const TorchFile *mf = &c->model_files[0];
    c->has_global_steps = pk_dict_get(mf->root, "global_steps") != NULL;
    c->global_steps = c->has_global_steps ? need_int(mf, mf->root, "global_steps", "") : 0;
    c->skipped_steps = pk_dict_get(mf->root, "skipped_steps") ? need_int(mf, mf->root, "skipped_steps", "") : 0;
    const PkValue *ver = pk_dict_get(mf->root, "ds_version");
    snprintf(c->ds_version, sizeof c->ds_version, "%s", ver && ver->kind == PK_STR ? ver->s : "unknown");
    build_table(c);
    for (int i = 0; i < nm; i++) free(mnames[i]);
    for (int i = 0; i < no; i++) free(onames[i]);
    free(mnames);
    free(onames);
}

void ds_checkpoint_close(DsCheckpoint *c) {
    for (int i = 0; i < c->n_model_files; i++) torch_file_close(&c->model_files[i]);
    for (int i = 0; i < c->world_size; i++) torch_file_close(&c->optim_files[i]);
    for (int i = 0; i < c->count; i++) {
        free(c->tensors[i].name);
        free(c->tensors[i].values);
    }
    free(c->tensors);
    free(c->model_files);
    free(c->optim_files);
    free(c->fp32);
    free(c->exp_avg);
    free(c->exp_avg_sq);
    free(c->group_offset);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

const DsTensor *ds_checkpoint_find(const DsCheckpoint *c, const char *name) {
    for (int i = 0; i < c->count; i++)
        if (!strcmp(c->tensors[i].name, name)) return &c->tensors[i];
    return NULL;
}

// A trainable tensor from the per-rank flat arrays src (fp32, exp_avg or exp_avg_sq).
static void read_flat(const DsCheckpoint *c, const DsTensor *t, const TorchTensor *src, float *dst) {
    int ng = c->n_groups, ws = c->world_size;
    if (c->zero_stage <= 2) {  // the group's rank partitions back to back; the lean length is fp32's
        uint64_t base = 0, lo0 = t->offset, hi0 = t->offset + t->numel;
        for (int r = 0; r < ws; r++) {
            uint64_t len = c->fp32[r * ng + t->group].numel;
            uint64_t lo = lo0 > base ? lo0 : base, hi = hi0 < base + len ? hi0 : base + len;
            if (lo < hi) torch_file_read_f32(&c->optim_files[r], &src[r * ng + t->group], t->name, lo - base, hi - lo, dst + (lo - lo0));
            base += len;
        }
        return;
    }
    // ZeRO-3: rank r holds elements [r*pn, (r+1)*pn) of the padded parameter at t->offset
    uint64_t pn = ceil_div(t->numel, (uint64_t)ws);
    for (int r = 0; r < ws; r++) {
        uint64_t first = (uint64_t)r * pn;
        if (first >= t->numel) break;
        uint64_t need_n = t->numel - first < pn ? t->numel - first : pn;
        uint64_t lo0 = t->offset, hi0 = t->offset + need_n;
        for (int g = 0; g < ng; g++) {
            uint64_t gl = c->group_offset[g], gh = c->group_offset[g + 1];
            uint64_t lo = lo0 > gl ? lo0 : gl, hi = hi0 < gh ? hi0 : gh;
            if (lo < hi) torch_file_read_f32(&c->optim_files[r], &src[r * ng + g], t->name, lo - gl, hi - lo, dst + first + (lo - lo0));
        }
    }
}

void ds_checkpoint_read(const DsCheckpoint *c, const DsTensor *t, float *dst) {
    if (t->alias_of) t = ds_checkpoint_find(c, t->alias_of);
    if (t->kind == DS_TRAINABLE) {
        read_flat(c, t, c->fp32, dst);
        return;
    }
    int nv = t->kind == DS_FROZEN && c->zero_stage == 3 ? c->world_size : 1;
    uint64_t done = 0;
    for (int r = 0; r < nv && done < t->numel; r++) {  // ZeRO-3 frozen: the ranks' fragments, cut to numel
        const TorchFile *tf = t->kind == DS_BUFFER ? &c->model_files[0] : &c->model_files[r];
        TorchTensor tt;
        torch_file_tensor(tf, t->values[r], t->name, &tt);
        uint64_t n = t->numel - done < tt.numel ? t->numel - done : tt.numel;
        if (nv == 1 && tt.numel != t->numel)
            t5_fail("%s: \"%s\" holds %llu elements, its shape %llu; %s", tf->path, t->name,
                    (unsigned long long)tt.numel, (unsigned long long)t->numel, HINT_DS);
        torch_file_read_f32(tf, &tt, t->name, 0, n, dst + done);
        done += n;
    }
    if (done != t->numel)
        t5_fail("%s: frozen parameter \"%s\": the fragments hold %llu of its %llu elements; %s", c->dir, t->name,
                (unsigned long long)done, (unsigned long long)t->numel, HINT_DS);
}

void ds_checkpoint_read_moment(const DsCheckpoint *c, const DsTensor *t, int which, float *dst) {
    if (t->alias_of) t = ds_checkpoint_find(c, t->alias_of);
    if (!c->has_moments || t->kind != DS_TRAINABLE)
        t5_die(__FILE__, __LINE__, "ds_checkpoint_read_moment: no moments for this tensor", "a bug in the caller");
    read_flat(c, t, which ? c->exp_avg_sq : c->exp_avg, dst);
}
