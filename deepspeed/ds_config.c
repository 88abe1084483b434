// deepspeed/ds_config.c: DeepSpeed JSON config: the loader (each key checked against the key
// table, deepspeed/ds_keys.c; checks across keys) and the printers (see ds_config.h). The
// "auto" resolution against the flags is ds_resolve.c's.
#include "ds_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/flags.h"
#include "../common/json_read.h"
#include "../optim/adamw.h"
#include "ds_keys.h"

// enum fields are written through int pointers by the table
_Static_assert(sizeof(ZeroStage) == sizeof(int), "ZeroStage must be int-sized");
_Static_assert(sizeof(OffloadDevice) == sizeof(int), "OffloadDevice must be int-sized");
_Static_assert(sizeof(DsOptimizerType) == sizeof(int), "DsOptimizerType must be int-sized");
_Static_assert(sizeof(DsSchedulerType) == sizeof(int), "DsSchedulerType must be int-sized");
_Static_assert(sizeof(DsWarmupType) == sizeof(int), "DsWarmupType must be int-sized");

// ---------------------------------------------------------------------------------------
// Loading

typedef struct {
    DsConfig *c;
    int notice_cpu_offload, notice_cpu_offload_param;
} Loader;

static int is_auto_value(const cJSON *it) { return cJSON_IsString(it) && !strcmp(it->valuestring, "auto"); }

// The value as it is in the file, quoted for a message.
static void json_repr(const cJSON *it, char *out, size_t cap) {
    if (cJSON_IsNumber(it) && !isfinite(it->valuedouble)) {  // cJSON would print null
        snprintf(out, cap, "a number beyond a double's range (read as %g)", it->valuedouble);
        return;
    }
    char *s = cJSON_PrintUnformatted(it);
    if (!s) {
        snprintf(out, cap, "(unprintable)");
        return;
    }
    if (strlen(s) > 60) snprintf(out, cap, "%.57s...", s);
    else snprintf(out, cap, "%s", s);
    cJSON_free(s);
}

static void fmt_bound(double x, char *out, size_t cap) {
    if (x >= BIG) snprintf(out, cap, "inf");
    else snprintf(out, cap, "%.10g", x);
}

// What a key takes, for messages and the reference.
static void describe(const KeySpec *s, char *out, size_t cap) {
    char lo[32], hi[32];
    fmt_bound(s->lo, lo, sizeof lo);
    fmt_bound(s->hi, hi, sizeof hi);
    size_t k = 0;
    switch (s->kind) {
    case K_SECTION: k = (size_t)snprintf(out, cap, "an object {...}"); break;
    case K_INT:
        if (s->hi >= BIG && s->lo == 0) k = (size_t)snprintf(out, cap, "a non-negative integer");
        else if (s->hi >= BIG && s->lo == 1) k = (size_t)snprintf(out, cap, "a positive integer");
        else k = (size_t)snprintf(out, cap, "an integer in [%s, %s]", lo, hi);
        break;
    case K_NUM:
        if (s->hi >= BIG) k = (size_t)snprintf(out, cap, "a number %s %s", (s->fl & F_LO_OPEN) ? ">" : ">=", lo);
        else k = (size_t)snprintf(out, cap, "a number in %c%s, %s]", (s->fl & F_LO_OPEN) ? '(' : '[', lo, hi);
        break;
    case K_STAGE: k = (size_t)snprintf(out, cap, "0, 1, 2 or 3 (the ZeRO stage)"); break;
    case K_BOOL:
    case K_ONLY_BOOL: k = (size_t)snprintf(out, cap, "true or false"); break;
    case K_ONLY_NUM: k = (size_t)snprintf(out, cap, "a number"); break;
    case K_PATH: k = (size_t)snprintf(out, cap, "a path string"); break;
    case K_STR: k = (size_t)snprintf(out, cap, "a string (at most %d bytes)", DS_PATH_MAX - 1); break;
    case K_STRLIST:
        k = (size_t)snprintf(out, cap, "a list of at most %d non-empty strings (each under %d bytes)", DS_LIST_MAX,
                             DS_NAME_MAX);
        break;
    case K_BETAS: k = (size_t)snprintf(out, cap, "[beta1, beta2] with each in [0, 1)"); break;
    case K_ENUM:
        for (const EnumName *e = s->names; e->name && k < cap; e++)
            k += (size_t)snprintf(out + k, cap - k, "%s\"%s\"", e == s->names ? "" : (e[1].name ? ", " : " or "),
                                  e->name);
        break;
    case K_UNSUPPORTED: k = (size_t)snprintf(out, cap, "nothing (not supported)"); break;
    }
    if ((s->fl & F_AUTO) && k < cap) k += (size_t)snprintf(out + k, cap - k, " or \"auto\"");
    if ((s->fl & F_NULL) && k < cap) snprintf(out + k, cap - k, " or null");
}

__attribute__((noreturn)) static void fail_expected(const Loader *L, const KeySpec *s, const char *path,
                                                    const cJSON *it) {
    char want[256], found[96];
    describe(s, want, sizeof want);
    json_repr(it, found, sizeof found);
    t5_fail("%s: key \"%s\": expected %s, found %s%s", L->c->file, path, want, found,
            is_auto_value(it) ? " (\"auto\" is only for the values HF Trainer fills in from its flags)" : "");
}

static int is_integral(double x) { return x == floor(x) && fabs(x) <= BIG; }

// A number within the key's bounds; finite always (cJSON reads 1e400 as inf), and within
// fp32 for the values the optimizer computes with.
static int in_bounds(const KeySpec *s, double x) {
    if (!isfinite(x) || fabs(x) > FLT_MAX) return 0;
    if ((s->fl & F_LO_OPEN) ? !(x > s->lo) : !(x >= s->lo)) return 0;
    return s->hi >= BIG || x <= s->hi;
}

static const char *enum_name(const EnumName *names, int v) {
    for (const EnumName *e = names; e->name; e++)
        if (e->value == v) return e->name;
    return "?";
}

static void walk(Loader *L, const cJSON *obj, const char *prefix);

__attribute__((noreturn)) static void fail_unknown(const Loader *L, const char *prefix, const char *key,
                                                   const char *path) {
    const char *names[N_KEYS];
    int n = 0;
    size_t plen = strlen(prefix);
    const DsConfig *c = L->c;
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        if (s->kind == K_UNSUPPORTED) continue;  // suggest only what works
        const char *leaf;
        if (plen) {
            if (strncmp(s->path, prefix, plen) != 0 || s->path[plen] != '.') continue;
            leaf = s->path + plen + 1;
        } else {
            leaf = s->path;
        }
        if (strchr(leaf, '.')) continue;
        if (s->sched && c->scheduler.type != DS_SCHEDULER_NONE && !(s->sched & SB(c->scheduler.type))) continue;
        names[n++] = leaf;
    }
    const char *best = flags_closest(key, names, n);
    if (best)
        t5_fail("%s: unknown key \"%s\" (did you mean \"%s%s%s\"?)", c->file, path, prefix, plen ? "." : "", best);
    t5_fail("%s: unknown key \"%s\": not a DeepSpeed setting train_t5 knows; remove it", c->file, path);
}

// The parameters a scheduler type takes, for messages.
static void sched_params(unsigned type, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < N_KEYS && k < cap; i++)
        if (k_keys[i].sched & SB(type))
            k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? ", " : "", k_keys[i].path + strlen("scheduler.params."));
}

// K_INT, K_NUM, K_BOOL: a value or "auto" (the table says where "auto" is allowed).
static void apply_scalar(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    char *base = (char *)L->c;
    if (cJSON_IsNull(it) && (s->fl & F_NULL)) {  // DeepSpeed's None: the default stays
        if (s->kind == K_INT) ((DsInt *)(base + s->off))->is_set = ((DsInt *)(base + s->off))->is_null = 1;
        else if (s->kind == K_BOOL) ((DsBool *)(base + s->off))->is_set = ((DsBool *)(base + s->off))->is_null = 1;
        return;
    }
    switch (s->kind) {
    case K_INT: {
        DsInt *d = (DsInt *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsNumber(it) || !is_integral(it->valuedouble) || !in_bounds(s, it->valuedouble))
            fail_expected(L, s, path, it);
        d->v = (long long)it->valuedouble;
        d->is_auto = 0;
        return;
    }
    case K_NUM: {
        DsNum *d = (DsNum *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsNumber(it) || !in_bounds(s, it->valuedouble)) fail_expected(L, s, path, it);
        d->v = it->valuedouble;
        d->is_auto = 0;
        return;
    }
    default: {  // K_BOOL
        DsBool *d = (DsBool *)(base + s->off);
        d->is_set = 1;
        if (is_auto_value(it)) {
            d->is_auto = 1;
            return;
        }
        if (!cJSON_IsBool(it)) fail_expected(L, s, path, it);
        d->v = cJSON_IsTrue(it);
        d->is_auto = 0;
        return;
    }
    }
}

// K_ENUM: one of the names; a DeepSpeed choice this build lacks is said as such.
static void apply_enum(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    if (!cJSON_IsString(it)) fail_expected(L, s, path, it);
    const char *v = it->valuestring;
    for (const EnumName *e = s->names; e->name; e++)
        if ((s->fl & F_NOCASE) ? !strcasecmp(v, e->name) : !strcmp(v, e->name)) {
            *(int *)((char *)L->c + s->off) = e->value;
            return;
        }
    for (const char *const *o = s->others; o && *o; o++)
        if ((s->fl & F_NOCASE) ? !strcasecmp(v, *o) : !strcmp(v, *o)) {
            char want[128];
            describe(s, want, sizeof want);
            t5_fail("%s: key \"%s\": \"%s\" is a DeepSpeed choice train_t5 does not support; use %s", L->c->file,
                    path, v, want);
        }
    fail_expected(L, s, path, it);
}

// K_BETAS: [beta1, beta2], each in [0, 1), or "auto" for the pair.
static void apply_betas(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    DsNum *b = (DsNum *)((char *)L->c + s->off);
    b[0].is_set = b[1].is_set = 1;
    if (is_auto_value(it)) {
        b[0].is_auto = b[1].is_auto = 1;
        return;
    }
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) fail_expected(L, s, path, it);
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem(it, i);
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < 1)) fail_expected(L, s, path, it);
        b[i].v = x->valuedouble;
        b[i].is_auto = 0;
    }
}

// K_STR: a string ("" too; null where the key takes it: the default stays).
static void apply_str(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    DsStr *d = (DsStr *)((char *)L->c + s->off);
    if (cJSON_IsNull(it) && (s->fl & F_NULL)) {
        d->is_set = d->is_null = 1;
        return;
    }
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= DS_PATH_MAX) fail_expected(L, s, path, it);
    snprintf(d->v, sizeof d->v, "%s", it->valuestring);
    d->is_set = 1;
}

// K_STRLIST: ["name", ...].
static void apply_strlist(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    DsStrList *d = (DsStrList *)((char *)L->c + s->off);
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > DS_LIST_MAX) fail_expected(L, s, path, it);
    d->n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, it) {
        if (!cJSON_IsString(x) || !x->valuestring[0] || strlen(x->valuestring) >= DS_NAME_MAX)
            fail_expected(L, s, path, it);
        snprintf(d->v[d->n++], DS_NAME_MAX, "%s", x->valuestring);
    }
    d->is_set = 1;
}

// K_ONLY_BOOL, K_ONLY_NUM: accepted at DeepSpeed's default only (what train_t5 does).
static void apply_only_default(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    int ok_type = s->kind == K_ONLY_BOOL ? cJSON_IsBool(it) : cJSON_IsNumber(it);
    if (!ok_type) fail_expected(L, s, path, it);
    double x = s->kind == K_ONLY_BOOL ? (double)cJSON_IsTrue(it) : it->valuedouble;
    if (x == s->dflt) return;  // DeepSpeed's default: what train_t5 does
    char found[96], want[32];
    json_repr(it, found, sizeof found);
    if (s->kind == K_ONLY_BOOL) snprintf(want, sizeof want, "%s", s->dflt != 0 ? "true" : "false");
    else snprintf(want, sizeof want, "%.10g", s->dflt);
    t5_fail("%s: key \"%s\": %s asks for a DeepSpeed feature train_t5 does not support (%s); remove it or set "
            "it to %s",
            L->c->file, path, found, s->doc, want);
}

static void apply(Loader *L, const KeySpec *s, const cJSON *it, const char *path) {
    DsConfig *c = L->c;
    char *base = (char *)c;
    if (s->sched && c->scheduler.type != DS_SCHEDULER_NONE && !(s->sched & SB(c->scheduler.type))) {
        char takes[256];
        sched_params(c->scheduler.type, takes, sizeof takes);
        t5_fail("%s: key \"%s\" is not a parameter of %s (it takes %s)", c->file, path,
                enum_name(k_scheduler_names, c->scheduler.type), takes);
    }
    if (is_auto_value(it) && !(s->fl & F_AUTO) && s->kind != K_UNSUPPORTED) fail_expected(L, s, path, it);
    switch (s->kind) {
    case K_SECTION:
        if (!cJSON_IsObject(it)) fail_expected(L, s, path, it);
        if (s->off != NO_OFF) *(int *)(base + s->off) = 1;
        walk(L, it, path);
        return;
    case K_INT:
    case K_NUM:
    case K_BOOL: apply_scalar(L, s, it, path); return;
    case K_STAGE:
        if (!cJSON_IsNumber(it) || !is_integral(it->valuedouble) || !in_bounds(s, it->valuedouble))
            fail_expected(L, s, path, it);
        *(int *)(base + s->off) = (int)it->valuedouble;
        return;
    case K_ENUM: apply_enum(L, s, it, path); return;
    case K_PATH: {
        char *d = base + s->off;
        if (cJSON_IsNull(it)) return;  // accelerate writes null when the device is not nvme
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= DS_PATH_MAX)
            fail_expected(L, s, path, it);
        snprintf(d, DS_PATH_MAX, "%s", it->valuestring);
        return;
    }
    case K_BETAS: apply_betas(L, s, it, path); return;
    case K_STR: apply_str(L, s, it, path); return;
    case K_STRLIST: apply_strlist(L, s, it, path); return;
    case K_ONLY_BOOL:
    case K_ONLY_NUM: apply_only_default(L, s, it, path); return;
    case K_UNSUPPORTED:
        t5_fail("%s: key \"%s\" is a DeepSpeed feature train_t5 does not support (%s); remove it", c->file, path,
                s->doc);
    }
}

static void walk(Loader *L, const cJSON *obj, const char *prefix) {
    const DsConfig *c = L->c;  // (duplicate keys were refused when the file was read: json_read_parse)
    // scalars first, so "type" is known before "params"
    for (int pass = 0; pass < 2; pass++)
        for (const cJSON *it = obj->child; it; it = it->next) {
            if (cJSON_IsObject(it) != (pass == 1)) continue;
            const char *key = it->string;
            for (int i = 0; i < k_n_aliases; i++)
                if (!strcmp(prefix, k_aliases[i].parent) && !strcmp(key, k_aliases[i].old_key) &&
                    cJSON_GetObjectItemCaseSensitive(obj, k_aliases[i].new_key))
                    t5_fail("%s: keys \"%s\" and \"%s\" are the same setting (old and new name); keep \"%s\"", c->file,
                            key, k_aliases[i].new_key, k_aliases[i].new_key);
            if (!strcmp(key, "bfloat16") && !*prefix) key = "bf16";
            char path[256];
            snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
            const KeySpec *s = ds_key_find(path);
            if (!s) fail_unknown(L, prefix, key, path);
            apply(L, s, it, path);
        }
}

static void set_defaults(DsConfig *c) {
    char *base = (char *)c;
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        switch (s->kind) {
        case K_INT: ((DsInt *)(base + s->off))->v = (long long)s->dflt; break;
        case K_NUM: ((DsNum *)(base + s->off))->v = s->dflt; break;
        case K_BOOL: ((DsBool *)(base + s->off))->v = (int)s->dflt; break;
        case K_STAGE: *(int *)(base + s->off) = (int)s->dflt; break;
        default: break;
        }
    }
    c->optimizer.betas[0].v = ADAMW_HF_BETA1;
    c->optimizer.betas[1].v = ADAMW_HF_BETA2;
    // the monitors' string defaults (monitor/config.py); the others are "" or None
    snprintf(c->tensorboard.job_name.v, DS_PATH_MAX, "DeepSpeedJobName");
    snprintf(c->csv_monitor.job_name.v, DS_PATH_MAX, "DeepSpeedJobName");
    snprintf(c->wandb.project.v, DS_PATH_MAX, "deepspeed");
}

static const char *stage_name(ZeroStage s) {
    static const char *const names[] = {"disabled", "optimizer states", "gradients", "weights"};
    return (unsigned)s < 4 ? names[s] : "?";
}

// Checks across keys, DeepSpeed's defaults that depend on other keys, and the 2021 spellings.
static void finalize(Loader *L) {
    DsConfig *c = L->c;
    const char *f = c->file;
    if (c->optimizer.present && c->optimizer.type == DS_OPTIMIZER_NONE)
        t5_fail("%s: key \"optimizer.type\" is missing: expected \"Adam\" or \"AdamW\"", f);
    if (c->optimizer.adam_w_mode.is_set && !c->optimizer.adam_w_mode.v)
        t5_fail("%s: key \"optimizer.params.adam_w_mode\": false (Adam with L2 weight decay%s) is a DeepSpeed feature "
                "train_t5 does not support; remove it or set it to true",
                f, c->optimizer.type == DS_OPTIMIZER_ADAMW ? ", which DeepSpeed ignores for AdamW" : "");
    if (c->scheduler.present && c->scheduler.type == DS_SCHEDULER_NONE)
        t5_fail("%s: key \"scheduler.type\" is missing: expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                f);
    if ((c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR || c->scheduler.type == DS_SCHEDULER_WARMUP_COSINE_LR) &&
        !c->scheduler.total_num_steps.is_set)
        t5_fail("%s: key \"scheduler.params.total_num_steps\" is missing: %s needs it (a number of optimizer steps, "
                "or \"auto\")",
                f, enum_name(k_scheduler_names, c->scheduler.type));
    if (c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR && !c->scheduler.warmup_max_lr.is_set)
        c->scheduler.warmup_max_lr.v = 0.001;  // WarmupDecayLR's signature default
    if (c->fp16.enabled.v && !c->fp16.enabled.is_auto && c->bf16.enabled.v && !c->bf16.enabled.is_auto)
        t5_fail("%s: keys \"fp16.enabled\" and \"bf16.enabled\" are both true: enable one of them", f);

    // ---- ZeRO ----
    if (!c->zero.overlap_comm.is_set) c->zero.overlap_comm.v = c->zero.stage == ZERO_STAGE_WEIGHTS;
    DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    DsOffloadParam *op = &c->zero.offload_param;
    if (c->zero.cpu_offload.is_set && oo->present)
        t5_fail("%s: keys \"zero_optimization.cpu_offload\" (2021 spelling) and \"zero_optimization.offload_optimizer\" "
                "set the same thing; keep offload_optimizer",
                f);
    if (c->zero.cpu_offload_param.is_set && op->present)
        t5_fail("%s: keys \"zero_optimization.cpu_offload_param\" (2021 spelling) and "
                "\"zero_optimization.offload_param\" set the same thing; keep offload_param",
                f);
    const char *oo_key = "zero_optimization.offload_optimizer", *op_key = "zero_optimization.offload_param";
    if (c->zero.cpu_offload.v) {
        oo->device = OFFLOAD_CPU;
        oo_key = "zero_optimization.cpu_offload";
    }
    if (c->zero.cpu_offload_param.v) {
        op->device = OFFLOAD_CPU;
        op_key = "zero_optimization.cpu_offload_param";
    }
    if (oo->device != OFFLOAD_NONE && c->zero.stage == ZERO_STAGE_DISABLED)
        t5_fail("%s: key \"%s\": optimizer offload needs ZeRO stage 1, 2 or 3, but \"zero_optimization.stage\" is 0", f,
                oo_key);
    if (op->device != OFFLOAD_NONE && c->zero.stage != ZERO_STAGE_WEIGHTS)
        t5_fail("%s: key \"%s\": parameter offload needs ZeRO stage 3, but \"zero_optimization.stage\" is %d (%s)", f,
                op_key, (int)c->zero.stage, stage_name(c->zero.stage));
    if (oo->ratio.v < 1 && c->zero.stage != ZERO_STAGE_WEIGHTS)
        t5_fail("%s: key \"zero_optimization.offload_optimizer.ratio\": %g (partial offload) needs ZeRO stage 3, but "
                "\"zero_optimization.stage\" is %d",
                f, oo->ratio.v, (int)c->zero.stage);
    if (oo->device == OFFLOAD_NVME && !oo->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_optimizer.nvme_path\" is missing: device \"nvme\" needs a "
                "directory on the NVMe drive",
                f);
    if (op->device == OFFLOAD_NVME && !op->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_param.nvme_path\" is missing: device \"nvme\" needs a directory "
                "on the NVMe drive",
                f);
    if (oo->device != OFFLOAD_NVME && oo->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_optimizer.nvme_path\" is set but the device is \"%s\": remove it "
                "or use device \"nvme\"",
                f, enum_name(k_device_names, oo->device));
    if (op->device != OFFLOAD_NVME && op->nvme_path[0])
        t5_fail("%s: key \"zero_optimization.offload_param.nvme_path\" is set but the device is \"%s\": remove it or "
                "use device \"nvme\"",
                f, enum_name(k_device_names, op->device));

    // ---- the blocks around training ----
    if (c->aio.block_size.v % 4096)
        t5_fail("%s: key \"aio.block_size\": %lld is not a multiple of 4096 (O_DIRECT reads and writes whole 4 KiB "
                "blocks); HINT: 1048576, DeepSpeed's default", f, c->aio.block_size.v);
    static const char *const net_why = "train_t5 sends nothing over the network (no account, no upload); HINT: "
                                       "\"tensorboard\": {\"enabled\": true} or \"csv_monitor\" write the same "
                                       "numbers to local files (or --report_to tensorboard); or set it to false";
    if (c->wandb.enabled.v) t5_fail("%s: key \"wandb.enabled\": true asks for Weights & Biases, but %s", f, net_why);
    if (c->comet.enabled.v) t5_fail("%s: key \"comet.enabled\": true asks for Comet, but %s", f, net_why);

    // the NOTICE lines are printed by ds_config_load once everything else has passed
    L->notice_cpu_offload = c->zero.cpu_offload.v;
    L->notice_cpu_offload_param = c->zero.cpu_offload_param.v;
}

// "line L, column C" of byte `at` in text.
static void text_position(const char *text, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

// The config's text, named `path` in every message (a file's path or a --deepspeed label).
static void load_text(DsConfig *c, const char *path, const char *text, size_t len) {
    memset(c, 0, sizeof *c);
    if (strlen(path) >= DS_PATH_MAX) t5_fail("DeepSpeed config path too long (%zu bytes): %.80s...", strlen(path), path);
    snprintf(c->file, sizeof c->file, "%s", path);
    set_defaults(c);
    // DeepSpeed reads it with json.load(object_pairs_hook=dict_raise_error_on_duplicate_keys):
    // a duplicate key anywhere is refused, and the text is read as Python's json reads it
    size_t err = len;
    cJSON *root = json_read_parse(text, len, path, JSON_DUP_REFUSE, &err);
    if (!root) {
        const char *at = text + (err <= len ? err : len);
        int line, col;
        text_position(text, at, &line, &col);
        // cJSON points at or just past the problem: show a little on both sides, whitespace collapsed
        char near[40];
        size_t k = 0;
        const char *p = at - text > 14 ? at - 14 : text;
        for (; p < text + len && p < at + 10 && k < sizeof near - 1; p++) {
            char ch = *p == '"' ? '\'' : (*p >= ' ' && *p != 0x7f) ? *p : ' ';
            if (ch == ' ' && (k == 0 || near[k - 1] == ' ')) continue;
            near[k++] = ch;
        }
        while (k && near[k - 1] == ' ') k--;
        near[k] = '\0';
        t5_fail("%s: invalid JSON at line %d, column %d (near \"%s\"): fix the syntax", path, line, col,
                k ? near : "the start");
    }
    if (!cJSON_IsObject(root)) t5_fail("%s: expected a JSON object { ... } at the top level", path);

    Loader L = {.c = c};
    walk(&L, root, "");
    finalize(&L);
    if (L.notice_cpu_offload)
        fprintf(stderr, "NOTICE: %s: \"zero_optimization.cpu_offload\": true is DeepSpeed's 2021 spelling; read as "
                        "\"offload_optimizer\": {\"device\": \"cpu\"}\n", path);
    if (L.notice_cpu_offload_param)
        fprintf(stderr, "NOTICE: %s: \"zero_optimization.cpu_offload_param\": true is DeepSpeed's 2021 spelling; "
                        "read as \"offload_param\": {\"device\": \"cpu\"}\n", path);
    cJSON_Delete(root);
}

void ds_config_load(DsConfig *c, const char *path) {
    size_t len = 0;
    file_refuse_non_regular(path, "the DeepSpeed config, --deepspeed");  // a FIFO: said, never waited on
    char *text = read_text_file(path, &len);
    if (!text)
        t5_fail("%s: cannot open the DeepSpeed config (%s); check the --deepspeed path (or give the config's JSON "
                "text, or base64 of it)", path, strerror(errno));
    load_text(c, path, text, len);
    free(text);
}

void ds_config_load_text(DsConfig *c, const char *label, const char *text) {
    load_text(c, label, text, strlen(text));
}

// ---------------------------------------------------------------------------------------
// Printing

static const char *fmt_int(const DsInt *d, char *buf, size_t cap) {
    if (d->is_auto) snprintf(buf, cap, "auto");
    else snprintf(buf, cap, "%lld", d->v);
    return buf;
}

static const char *fmt_num(const DsNum *d, char *buf, size_t cap) {
    if (d->is_auto) snprintf(buf, cap, "auto");
    else snprintf(buf, cap, "%g", d->v);
    return buf;
}

static const char *fmt_bool(const DsBool *d) { return d->is_auto ? "auto" : d->v ? "true" : "false"; }

void ds_config_print(const DsConfig *c, FILE *f) {
    char a[32], b[32], d[32], e[32], g[32];
    fprintf(f, "deepspeed config %s%s\n", c->file, c->resolved ? "" : " (not resolved: \"auto\" values pending)");
    if (c->resolved)
        fprintf(f, "  batch      train_batch_size %lld = micro %lld x accumulation %lld x world size %lld\n",
                c->train_batch_size.v, c->train_micro_batch_size_per_gpu.v, c->gradient_accumulation_steps.v,
                c->train_batch_size.v / (c->train_micro_batch_size_per_gpu.v * c->gradient_accumulation_steps.v));
    else if (c->train_batch_size.is_set)
        fprintf(f, "  batch      train_batch_size %s = micro %s x accumulation %s x world size\n",
                fmt_int(&c->train_batch_size, a, sizeof a), fmt_int(&c->train_micro_batch_size_per_gpu, b, sizeof b),
                fmt_int(&c->gradient_accumulation_steps, d, sizeof d));
    else
        fprintf(f, "  batch      micro %s x accumulation %s x world size (train_batch_size from the flags)\n",
                c->train_micro_batch_size_per_gpu.is_set ? fmt_int(&c->train_micro_batch_size_per_gpu, b, sizeof b)
                                                         : "flags",
                c->gradient_accumulation_steps.is_set ? fmt_int(&c->gradient_accumulation_steps, d, sizeof d) : "flags");
    if (c->fp16.enabled.is_auto || c->bf16.enabled.is_auto)
        fprintf(f, "  precision  fp16 %s, bf16 %s\n", fmt_bool(&c->fp16.enabled), fmt_bool(&c->bf16.enabled));
    else if (c->fp16.enabled.v && c->fp16.loss_scale.v == 0)
        fprintf(f, "  precision  fp16, dynamic loss scale 2^%lld (window %lld, hysteresis %lld, min %g)\n",
                c->fp16.initial_scale_power.v, c->fp16.loss_scale_window.v, c->fp16.hysteresis.v, c->fp16.min_loss_scale.v);
    else if (c->fp16.enabled.v)
        fprintf(f, "  precision  fp16, static loss scale %g\n", c->fp16.loss_scale.v);
    else
        fprintf(f, "  precision  %s\n", c->bf16.enabled.v ? "bf16" : "fp32");
    if (c->optimizer.present || c->resolved)
        fprintf(f, "  optimizer  %s%s lr %s betas (%s, %s) eps %s weight_decay %s\n",
                c->optimizer.present ? enum_name(k_optimizer_names, c->optimizer.type) : "AdamW",
                c->optimizer.present ? "" : " (from the flags)", fmt_num(&c->optimizer.lr, a, sizeof a),
                c->optimizer.betas[0].is_auto ? "auto" : fmt_num(&c->optimizer.betas[0], b, sizeof b),
                c->optimizer.betas[1].is_auto ? "auto" : fmt_num(&c->optimizer.betas[1], d, sizeof d),
                fmt_num(&c->optimizer.eps, e, sizeof e), fmt_num(&c->optimizer.weight_decay, g, sizeof g));
    else
        fprintf(f, "  optimizer  AdamW from the flags\n");
    if (!c->scheduler.present) {
        fprintf(f, "  scheduler  from --lr_scheduler_type\n");
    } else if (c->scheduler.type == DS_SCHEDULER_WARMUP_COSINE_LR) {
        fprintf(f, "  scheduler  WarmupCosineLR (%s warmup) ratio %g -> 1 over %s steps, cosine to %g at %s\n",
                enum_name(k_warmup_names, c->scheduler.warmup_type), c->scheduler.warmup_min_ratio.v,
                fmt_int(&c->scheduler.warmup_num_steps, a, sizeof a), c->scheduler.cos_min_ratio.v,
                fmt_int(&c->scheduler.total_num_steps, b, sizeof b));
    } else {
        int decay = c->scheduler.type == DS_SCHEDULER_WARMUP_DECAY_LR;
        const char *mx = !c->scheduler.warmup_max_lr.is_set && !c->resolved && !decay
                             ? "(optimizer lr)"
                             : fmt_num(&c->scheduler.warmup_max_lr, b, sizeof b);
        fprintf(f, "  scheduler  %s (%s warmup) %s -> %s over %s steps%s%s\n",
                enum_name(k_scheduler_names, c->scheduler.type), enum_name(k_warmup_names, c->scheduler.warmup_type),
                fmt_num(&c->scheduler.warmup_min_lr, a, sizeof a), mx,
                fmt_int(&c->scheduler.warmup_num_steps, d, sizeof d), decay ? ", linear decay to 0 at " : "",
                decay ? fmt_int(&c->scheduler.total_num_steps, e, sizeof e) : "");
    }
    fprintf(f, "  zero       stage %d (%s): reduce bucket %s, allgather bucket %s%s%s%s\n", (int)c->zero.stage,
            stage_name(c->zero.stage), fmt_int(&c->zero.reduce_bucket_size, a, sizeof a),
            fmt_int(&c->zero.allgather_bucket_size, b, sizeof b), c->zero.overlap_comm.v ? ", overlap_comm" : "",
            c->zero.reduce_scatter.v ? ", reduce_scatter" : "", c->zero.contiguous_gradients.v ? ", contiguous_gradients" : "");
    if (c->zero.stage == ZERO_STAGE_WEIGHTS)
        fprintf(f, "  stage 3    prefetch %s, persistence threshold %s, max live %lld, reuse distance %lld\n",
                fmt_int(&c->zero.stage3_prefetch_bucket_size, a, sizeof a),
                fmt_int(&c->zero.stage3_param_persistence_threshold, b, sizeof b), c->zero.stage3_max_live_parameters.v,
                c->zero.stage3_max_reuse_distance.v);
    const DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    const DsOffloadParam *op = &c->zero.offload_param;
    if (oo->device != OFFLOAD_NONE || op->device != OFFLOAD_NONE)
        fprintf(f, "  offload    optimizer %s%s%s, parameters %s%s%s\n", enum_name(k_device_names, oo->device),
                oo->pin_memory.v && oo->device ? " (pinned)" : "", oo->device == OFFLOAD_NVME ? oo->nvme_path : "",
                enum_name(k_device_names, op->device), op->pin_memory.v && op->device ? " (pinned)" : "",
                op->device == OFFLOAD_NVME ? op->nvme_path : "");
    if (c->gradient_clipping.is_auto) fprintf(f, "  clipping   auto\n");
    else if (c->gradient_clipping.v > 0) fprintf(f, "  clipping   global norm %g\n", c->gradient_clipping.v);
    else fprintf(f, "  clipping   off\n");
}

void ds_config_print_reference(FILE *f) {
    fprintf(f, "%-62s %-10s %s\n", "key", "default", "takes / what it does");
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *s = &k_keys[i];
        char want[256], dflt[32] = "";
        describe(s, want, sizeof want);
        if (s->dflt_text) snprintf(dflt, sizeof dflt, "%s", s->dflt_text);
        else switch (s->kind) {
        case K_INT:
        case K_NUM:
        case K_STAGE:
        case K_ONLY_NUM: snprintf(dflt, sizeof dflt, "%.10g", s->dflt); break;
        case K_BOOL:
        case K_ONLY_BOOL: snprintf(dflt, sizeof dflt, "%s", s->dflt != 0 ? "true" : "false"); break;
        case K_ENUM: snprintf(dflt, sizeof dflt, "%s", s->names == k_device_names ? "none" : s->names == k_warmup_names ? "log" : "-"); break;
        default: snprintf(dflt, sizeof dflt, "-"); break;
        }
        if (s->kind == K_UNSUPPORTED)
            fprintf(f, "%-62s %-10s NOT SUPPORTED (error): %s\n", s->path, "-", s->doc);
        else if (s->kind == K_ONLY_BOOL || s->kind == K_ONLY_NUM)
            fprintf(f, "%-62s %-10s only %s accepted (else error): %s\n", s->path, dflt, dflt, s->doc);
        else
            fprintf(f, "%-62s %-10s %s; %s\n", s->path, dflt, want, s->doc);
    }
}

// The key holds null (DeepSpeed's None).
static int key_is_null(const KeySpec *k, const char *p) {
    switch (k->kind) {
    case K_INT: return ((const DsInt *)p)->is_null;
    case K_BOOL: return ((const DsBool *)p)->is_null;
    case K_STR: return ((const DsStr *)p)->is_null;
    default: return 0;
    }
}

// The key is in the file (any kind with storage).
static int key_is_set(const KeySpec *k, const DsConfig *c) {
    if (k->off == NO_OFF) return 0;
    const char *p = (const char *)c + k->off;
    switch (k->kind) {
    case K_INT: return ((const DsInt *)p)->is_set;
    case K_NUM: return ((const DsNum *)p)->is_set;
    case K_BOOL: return ((const DsBool *)p)->is_set;
    case K_STR: return ((const DsStr *)p)->is_set;
    case K_STRLIST: return ((const DsStrList *)p)->is_set;
    case K_PATH: return p[0] != '\0';
    default: return 0;
    }
}

void ds_config_print_section_unacted(const DsConfig *c, const char *section, const char *path, const char *why,
                                     FILE *f) {
    size_t n = strlen(section);
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &k_keys[i];
        if (strncmp(k->path, section, n) != 0 || k->path[n] != '.' || (k->fl & F_NOOP) || k->kind == K_SECTION)
            continue;
        if (i > 0 && k_keys[i - 1].off == k->off) continue;  // an old name of the key before: said once
        if (!key_is_set(k, c)) continue;
        const char *other = i + 1 < N_KEYS && k_keys[i + 1].off == k->off ? strrchr(k_keys[i + 1].path, '.') : NULL;
        fprintf(f, "NOTICE: %s: \"%s\"%s%s%s is accepted and changes nothing here: %s\n", path, k->path,
                other ? " (or its other name \"" : "", other ? other + 1 : "", other ? "\")" : "", why);
    }
}

// Keys in the file that this build accepts and does not act on (F_NOOP), one NOTICE each.
void ds_config_print_unacted(const DsConfig *c, const char *path, FILE *f) {
    for (int i = 0; i < N_KEYS; i++) {
        const KeySpec *k = &k_keys[i];
        if (!(k->fl & F_NOOP) || k->off == NO_OFF) continue;
        if (i > 0 && k_keys[i - 1].off == k->off) continue;  // an old name of the key before: said once
        const char *p = (const char *)c + k->off;
        int set = 0, is_auto = 0;
        char val[64] = "";
        if (k->kind == K_BOOL) {
            const DsBool *b = (const DsBool *)p;
            set = b->is_set, is_auto = b->is_auto;
            snprintf(val, sizeof val, "%s", b->v ? "true" : "false");
        } else if (k->kind == K_INT) {
            const DsInt *n = (const DsInt *)p;
            set = n->is_set, is_auto = n->is_auto;
            snprintf(val, sizeof val, "%lld", n->v);
        } else if (k->kind == K_NUM) {
            const DsNum *n = (const DsNum *)p;
            set = n->is_set, is_auto = n->is_auto;
            snprintf(val, sizeof val, "%g", n->v);
        } else if (k->kind == K_STR) {
            const DsStr *t = (const DsStr *)p;
            set = t->is_set;
            if (k->fl & F_SECRET) snprintf(val, sizeof val, "(set; not shown)");
            else snprintf(val, sizeof val, "\"%.56s%s\"", t->v, strlen(t->v) > 56 ? "..." : "");
        }
        if (key_is_null(k, p)) snprintf(val, sizeof val, "null");
        if (!set && !is_auto) continue;
        const char *why = !strncmp(k->doc, "no-op: ", 7) ? k->doc + 7 : k->doc;
        fprintf(f, "NOTICE: %s: \"%s\" = %s is accepted and changes nothing here: %s\n", path, k->path,
                is_auto ? "\"auto\"" : val, why);
    }
}
