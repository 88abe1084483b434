// tests/test_checkpoint.c: checkpoints at any scale (zero/checkpoint.c, trainer/checkpoint.c,
// cmd/export.c) through ./train_t5 on CPU ranks under mpirun (run from the repository
// root, after make).
//
// 1. Exact resume: 10 steps straight (a checkpoint at 5 and 10) against the same run resumed
//    from its checkpoint-5: the same losses and grad norms, the same final weights and the
//    same checkpoint-10 shards (master and both moments; their metadata but each save's own
//    save_id), bit for bit, at stages 0-3, at 1
//    and 3 ranks, with and without the optimizer offloaded to the CPU (and at stage 2, 3
//    ranks, to a file: NVMe), and with --fp8 (stage 0 at 1 rank, stage 2 at 3: its scaling state
//    goes through the checkpoint's index). The stage-3 runs
//    without offload leave stage3_gather_16bit_weights_on_model_save unset (false): their
//    --output_dir holds the shards, compared instead, and exported.
// 2. Any layout: the 3-rank stage-3 checkpoint resumed at 2 ranks, stage 1, and (with
//    offload) at 1 rank, stage 0: losses and weights within 1e-6 of the straight run (the
//    logged gradient norm, summed over other partitions, within 1e-5); a checkpoint in the
//    layout before the shards (optimizer.safetensors, made here from a 1-rank checkpoint)
//    resumed at 1 rank bit for bit, and at 3 ranks.
// 3. Integrity: a flipped byte, a truncated shard, a missing shard, a missing `latest`, an
//    index that disagrees with the files (a checksum, the ranges), a checkpoint-N.tmp, and a
//    flipped byte found by rank 1 of 3: each refused with one line naming the file, with a
//    HINT, before the run writes anything.
// 4. Memory: with T5_COUNT_HOST_MEM=1 every rank reports its peak host bytes (the allocation
//    wrappers' counting mode) while saving, loading the optimizer state and reading a resumed
//    run's compute weights from the shards (zero_init_checkpoint: no rank reads the whole
//    model); each must be at most 4 (P + U) bytes, P its partition and U the largest tensor
//    (elements), at 1, 2 and 3 ranks.
// 5. Export: the sharded checkpoint exported as fp32 is the checkpoint's model.safetensors
//    byte for byte and loads (hf_load_weights) to the same weights; bf16 and fp16 exports,
//    split by --max_shard_size into model-0000i-of-0000n.safetensors + index, load to the
//    rounding of the fp32 weights, element for element; the old layout exports too.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../model/hf_dir.h"
#include "../model/params.h"
#include "../formats/safetensors.h"
#include "test.h"
#include "test_files.h"
#include "test_tmp.h"

#define STEPS 10
#define SAVE_AT 5
#define GLOBAL_ROWS 12  // examples per micro-batch over all ranks (1 x 12, 2 x 6, 3 x 4)
#define CROSS_TOL 1e-6
#define NORM_TOL 1e-5  // the logged gradient norm across world sizes (test_data_parallel's 1e-5)
#define MEM_BYTES_PER_ELEM 4.0

static char TMP[] = "/tmp/t5_test_ckpt.XXXXXX";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) t5_fail("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static int sh(const char *cmd) { return system(cmd); }

// Stage s config: cfg/s<s>[o][g].json, o: the optimizer offloaded to the CPU, g: the stage-3
// weights gathered at the final save (stage3_gather_16bit_weights_on_model_save true).
static void write_configs(void) {
    char path[600], text[600];
    for (int s = 0; s <= 3; s++)
        for (int off = 0; off <= 1; off++)
            for (int g = 0; g <= 1; g++) {
                snprintf(path, sizeof path, "%s/s%d%s%s.json", TMP, s, off ? "o" : "", g ? "g" : "");
                snprintf(text, sizeof text,
                         "{\"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 3000, "
                         "\"allgather_bucket_size\": 5000%s%s}, \"gradient_clipping\": \"auto\"}\n",
                         s, off ? ", \"offload_optimizer\": {\"device\": \"cpu\"}" : "",
                         g ? ", \"stage3_gather_16bit_weights_on_model_save\": true" : "");
                write_file(path, text);
            }
    // stage 2 with the optimizer state in a file (zero/nvme.h): the shards read and write it by ranges
    snprintf(path, sizeof path, "%s/nvme", TMP);
    mkdir_p(path);
    snprintf(path, sizeof path, "%s/s2n.json", TMP);
    snprintf(text, sizeof text, "{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\", "
             "\"nvme_path\": \"%s/nvme\"}}, \"gradient_clipping\": \"auto\"}\n", TMP);
    write_file(path, text);
}

// One ./train_t5 run into TMP/<tag> (log TMP/<tag>.log); cfg NULL: no --deepspeed. rc 0?
static int train(const char *tag, int world, const char *cfg, const char *extra) {
    char cmd[4096], launcher[160] = "", ds[700] = "";
    // several ranks share few cores: one OpenMP thread each (3x faster on 2 cores than each
    // rank spinning up a thread per core)
    if (world > 1)
        snprintf(launcher, sizeof launcher,
                 "OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np %d ", world);
    if (cfg) snprintf(ds, sizeof ds, "--deepspeed %s/%s.json", TMP, cfg);
    snprintf(cmd, sizeof cmd,
             "T5_COUNT_HOST_MEM=1 %s./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name "
             "data/sample/spiece.model --data_dir tests/fixtures/trainer_data --task translation_en_to_ro "
             "--max_source_length 24 --max_target_length 20 --per_device_train_batch_size %d "
             "--gradient_accumulation_steps 2 --max_steps %d --save_steps %d --learning_rate 3e-3 --weight_decay 0.01 "
             "--max_grad_norm 0.5 --warmup_steps 2 --label_smoothing 0.1 --logging_steps 1 --sampler sequential "
             "--dropout_rate 0 --do_train --output_dir %s/%s --cache_dir %s/cache %s %s > %s/%s.log 2>&1",
             launcher, GLOBAL_ROWS / world, STEPS, SAVE_AT, TMP, tag, TMP, ds, extra ? extra : "", TMP, tag);
    return sh(cmd) == 0;
}

static void show_log(const char *tag) {
    char cmd[800];
    snprintf(cmd, sizeof cmd, "tail -n 4 '%s/%s.log'", TMP, tag);
    if (sh(cmd) != 0) printf("(no log)\n");
}

static int files_equal(const char *a, const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return sh(cmd) == 0;
}

// Two shards hold the same tensors bit for bit and the same __metadata__ but for the save's
// random id (zero/checkpoint.c: each save's shards carry their own save_id).
static int shards_equal(const char *a, const char *b) {
    StFile fa, fb;
    st_open(&fa, a);
    st_open(&fb, b);
    int same = fa.count == fb.count;
    const char *keys[] = {"format", "version", "rank", "world_size", "global_step", "parameters", "begin", "end"};
    for (size_t k = 0; same && k < sizeof keys / sizeof keys[0]; k++) {
        const char *x = st_metadata(&fa, keys[k]), *y = st_metadata(&fb, keys[k]);
        same = x && y && !strcmp(x, y);
    }
    for (int i = 0; same && i < fa.count; i++) {
        const StTensor *ta = &fa.tensors[i], *tb = st_find(&fb, ta->name);
        same = tb && tb->numel == ta->numel;
        if (!same) break;
        size_t bytes = (ta->numel ? ta->numel : 1) * sizeof(float);
        float *x = mallocCheck(bytes), *y = mallocCheck(bytes);
        st_read_f32(&fa, ta, x);
        st_read_f32(&fb, tb, y);
        same = memcmp(x, y, ta->numel * sizeof(float)) == 0;
        free(x);
        free(y);
    }
    st_close(&fa);
    st_close(&fb);
    return same;
}

// log_history entries with a loss: step, loss, grad_norm.
static int read_losses(const char *tag, double *loss, double *norm, int cap) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s/trainer_state.json", TMP, tag);
    cJSON *st = test_load_json(path, "");
    const cJSON *h = cJSON_GetObjectItem(st, "log_history"), *e;
    int n = 0;
    cJSON_ArrayForEach(e, h) {
        const cJSON *l = cJSON_GetObjectItem(e, "loss"), *g = cJSON_GetObjectItem(e, "grad_norm");
        if (!l || n >= cap) continue;
        loss[n] = l->valuedouble;
        norm[n] = g ? g->valuedouble : 0;
        n++;
    }
    cJSON_Delete(st);
    return n;
}

// Losses and grad norms of two runs: the largest relative difference of each (-1: different
// step counts).
static void losses_norms_diff(const char *a, const char *b, int *steps, double *loss_diff, double *norm_diff) {
    double la[64], na[64], lb[64], nb[64];
    int n = read_losses(a, la, na, 64), m = read_losses(b, lb, nb, 64);
    *steps = n;
    *loss_diff = *norm_diff = -1;
    if (n != m || n != STEPS) return;
    *loss_diff = *norm_diff = 0;
    for (int i = 0; i < n; i++) {
        *loss_diff = fmax(*loss_diff, fabs(la[i] - lb[i]) / fmax(fabs(lb[i]), 1e-30));
        *norm_diff = fmax(*norm_diff, fabs(na[i] - nb[i]) / fmax(fabs(nb[i]), 1e-30));
    }
}

static double losses_diff(const char *a, const char *b, int *steps) {
    double l, g;
    losses_norms_diff(a, b, steps, &l, &g);
    return l < 0 ? -1 : fmax(l, g);
}

// The fp32 weights of an HF directory, loaded as from_pretrained would (hf_load_weights).
static float *load_hf(const char *dir, ParamLayout *lay) {
    T5Config cfg;
    hf_resolve_model(dir, &cfg);
    cfg.untied_lm_head = hf_probe_untied(dir);
    params_build_layout(&cfg, lay);
    float *w = mallocCheck(lay->total * sizeof(float));
    hf_load_weights(dir, &cfg, lay, w);
    return w;
}

static double weights_diff(const char *dir_a, const char *dir_b) {
    ParamLayout la, lb;
    float *a = load_hf(dir_a, &la), *b = load_hf(dir_b, &lb);
    double worst = la.total == lb.total ? 0 : INFINITY, big = 0;
    for (size_t i = 0; i < la.total && la.total == lb.total; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    free(a);
    free(b);
    params_free_layout(&la);
    params_free_layout(&lb);
    return worst / fmax(big, 1e-30);
}

// ---- 1. exact resume ------------------------------------------------------------------
enum { OFFLOAD_NONE = 0, OFFLOAD_CPU, OFFLOAD_NVME };
typedef struct {
    int stage, offload, world;  // offload: OFFLOAD_*
    int fp8;                    // 1: both runs with --fp8 (its scaling state goes through the checkpoint)
} Config;

static const char *offload_suffix(const Config *c) {
    return c->offload == OFFLOAD_CPU ? "o" : c->offload == OFFLOAD_NVME ? "n" : "";
}

static void config_tag(const Config *c, char *tag, size_t n, const char *what) {
    snprintf(tag, n, "s%d%s_w%d%s_%s", c->stage, offload_suffix(c), c->world, c->fp8 ? "_fp8" : "", what);
}

// The stage-3 runs without offload keep the key unset (false): the final save is shards.
static int gathers(const Config *c) { return !(c->stage == 3 && !c->offload); }

static int exact_resume(const Config *c) {
    char straight[64], resumed[64], cfg[16], what[400], extra[900], a[900], b[900];
    config_tag(c, straight, sizeof straight, "straight");
    config_tag(c, resumed, sizeof resumed, "resumed");
    if (c->offload == OFFLOAD_NVME) snprintf(cfg, sizeof cfg, "s%dn", c->stage);
    else snprintf(cfg, sizeof cfg, "s%d%s%s", c->stage, offload_suffix(c), gathers(c) ? "g" : "");
    const char *label_off = c->fp8 ? ", --fp8" : c->offload == OFFLOAD_CPU ? ", offload" : c->offload == OFFLOAD_NVME ? ", offload to NVMe" : "";
    snprintf(what, sizeof what, "stage %d%s, %d rank%s: 10 steps with checkpoints at 5 and 10 run", c->stage,
             label_off, c->world, c->world > 1 ? "s" : "");
    if (!test_check(train(straight, c->world, cfg, c->fp8 ? "--fp8" : NULL), what)) return show_log(straight), 0;
    // the layout: latest names global_step5, the index lists one shard per rank
    snprintf(a, sizeof a, "%s/%s/checkpoint-%d/latest", TMP, straight, SAVE_AT);
    char *latest = test_slurp(a);
    snprintf(a, sizeof a, "%s/%s/checkpoint-%d/global_step%d/zero_index.json", TMP, straight, SAVE_AT, SAVE_AT);
    cJSON *idx = test_load_json(a, "");
    int n_shards = cJSON_GetArraySize(cJSON_GetObjectItem(idx, "shards"));
    int world = (int)cJSON_GetObjectItem(idx, "world_size")->valuedouble;
    snprintf(what, sizeof what, "stage %d%s, %d ranks: latest \"%s\", index of %d shards, world_size %d", c->stage,
             label_off, c->world, latest, n_shards, world);
    test_check(!strcmp(latest, "global_step5") && n_shards == c->world && world == c->world, what);
    free(latest);
    cJSON_Delete(idx);
    // resume from a copy of the straight run's checkpoint-5
    snprintf(a, sizeof a, "mkdir -p %s/%s && cp -r %s/%s/checkpoint-%d %s/%s/", TMP, resumed, TMP, straight, SAVE_AT,
             TMP, resumed);
    if (sh(a) != 0) t5_fail("%s failed", a);
    snprintf(extra, sizeof extra, "--resume_from_checkpoint %s/%s/checkpoint-%d%s", TMP, resumed, SAVE_AT,
             c->fp8 ? " --fp8" : "");
    snprintf(what, sizeof what, "stage %d%s, %d rank%s: resumed from checkpoint-5, run", c->stage, label_off, c->world,
             c->world > 1 ? "s" : "");
    if (!test_check(train(resumed, c->world, cfg, extra), what)) return show_log(resumed), 0;
    int steps;
    double d = losses_diff(resumed, straight, &steps);
    snprintf(what, sizeof what, "stage %d%s, %d rank%s: 5 + resume + 5 steps = 10 straight: losses and grad norms "
             "bit for bit (%d steps, max rel diff %.3g)", c->stage, label_off, c->world, c->world > 1 ? "s" : "", steps,
             d);
    test_check(d == 0, what);
    // the final weights: model.safetensors, or the shards of a stage-3 save without gathering
    int same = 1;
    if (gathers(c)) {
        snprintf(a, sizeof a, "%s/%s/model.safetensors", TMP, straight);
        snprintf(b, sizeof b, "%s/%s/model.safetensors", TMP, resumed);
        same = files_equal(a, b);
    } else {
        snprintf(a, sizeof a, "%s/%s/model.safetensors", TMP, resumed);
        same = !path_exists(a);
        snprintf(a, sizeof a, "grep -q 'run `train_t5 export' %s/%s.log", TMP, resumed);
        same = same && sh(a) == 0;
        for (int r = 0; r < c->world; r++) {
            snprintf(a, sizeof a, "%s/%s/global_step%d/rank_%05d.safetensors", TMP, straight, STEPS, r);
            snprintf(b, sizeof b, "%s/%s/global_step%d/rank_%05d.safetensors", TMP, resumed, STEPS, r);
            same = same && shards_equal(a, b);
        }
    }
    snprintf(what, sizeof what, "stage %d%s, %d rank%s: final weights bit for bit (%s)", c->stage, label_off, c->world,
             c->world > 1 ? "s" : "", gathers(c) ? "model.safetensors" : "no model.safetensors, the export hint, "
             "the output_dir's shards");
    test_check(same, what);
    same = 1;
    for (int r = 0; r < c->world; r++) {
        snprintf(a, sizeof a, "%s/%s/checkpoint-%d/global_step%d/rank_%05d.safetensors", TMP, straight, STEPS, STEPS, r);
        snprintf(b, sizeof b, "%s/%s/checkpoint-%d/global_step%d/rank_%05d.safetensors", TMP, resumed, STEPS, STEPS, r);
        same = same && shards_equal(a, b);
    }
    snprintf(what, sizeof what, "stage %d%s, %d rank%s: checkpoint-10's shards (master, exp_avg, exp_avg_sq and the "
             "metadata but the save_id) bit for bit",
             c->stage, label_off, c->world, c->world > 1 ? "s" : "");
    test_check(same, what);
    return 1;
}

// ---- 2. any layout --------------------------------------------------------------------
// A checkpoint in the layout before the shards, from a 1-rank one: optimizer.safetensors
// (exp_avg, exp_avg_sq whole) + zero_state.json; no latest, no tag directory.
static void make_old_layout(const char *src_tag, const char *dst) {
    char cmd[2400], p[1100], tagdir[900];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/%s/checkpoint-%d %s", dst, TMP, src_tag, SAVE_AT, dst);
    if (sh(cmd) != 0) t5_fail("%s failed", cmd);
    snprintf(tagdir, sizeof tagdir, "%s/global_step%d", dst, SAVE_AT);
    snprintf(p, sizeof p, "%s/rank_00000.safetensors", tagdir);
    StFile f;
    st_open(&f, p);
    const StTensor *m = st_find(&f, "exp_avg"), *v = st_find(&f, "exp_avg_sq");
    float *bm = mallocCheck(m->numel * sizeof(float)), *bv = mallocCheck(v->numel * sizeof(float));
    st_read_f32(&f, m, bm);
    st_read_f32(&f, v, bv);
    StTensorDesc d[2] = {{.name = "exp_avg", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)m->numel}},
                         {.name = "exp_avg_sq", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)v->numel}}};
    snprintf(p, sizeof p, "%s/optimizer.safetensors", dst);
    StWriter w;
    st_writer_open(&w, p, d, 2, "{\"format\":\"train_t5\"}");
    st_writer_write_f32(&w, bm, m->numel);
    st_writer_write_f32(&w, bv, v->numel);
    st_writer_close(&w);
    st_close(&f);
    free(bm);
    free(bv);
    snprintf(p, sizeof p, "%s/zero_index.json", tagdir);
    cJSON *idx = test_load_json(p, ""), *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "optimizer_step", cJSON_GetObjectItem(idx, "optimizer_step")->valuedouble);
    cJSON_AddNumberToObject(st, "parameters", cJSON_GetObjectItem(idx, "parameters")->valuedouble);
    cJSON_AddItemToObject(st, "loss_scaler", cJSON_Duplicate(cJSON_GetObjectItem(idx, "loss_scaler"), 1));
    snprintf(p, sizeof p, "%s/zero_state.json", dst);
    json_save_atomic(st, p);
    cJSON_Delete(st);
    cJSON_Delete(idx);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s/latest", tagdir, dst);
    if (sh(cmd) != 0) t5_fail("%s failed", cmd);
}

static void resume_into(const char *tag, int world, const char *cfg, const char *ckpt, const char *label,
                        const char *ref, double tol) {
    char extra[900], what[600], a[700], b[700];
    snprintf(a, sizeof a, "rm -rf %s/%s", TMP, tag);
    sh(a);
    snprintf(extra, sizeof extra, "--resume_from_checkpoint %s", ckpt);
    snprintf(what, sizeof what, "%s: run", label);
    if (!test_check(train(tag, world, cfg, extra), what)) return show_log(tag);
    // the resumed run's log: the checkpoint's steps 1-5, then its own 6-10. Across world sizes
    // the gradient norm is summed over partitions of other sizes, in another order: the
    // logged norm differs by a few 1e-6 while the loss and weights stay within tol
    int steps;
    double worst, norms;
    losses_norms_diff(tag, ref, &steps, &worst, &norms);
    if (worst < 0) worst = norms = INFINITY;
    if (tol == 0) worst = fmax(worst, norms);
    snprintf(a, sizeof a, "%s/%s", TMP, tag);
    snprintf(b, sizeof b, "%s/%s/checkpoint-%d", TMP, ref, STEPS);
    double wd = weights_diff(a, b);
    if (tol == 0) {
        snprintf(what, sizeof what, "%s: losses, grad norms and final weights bit for bit (%.3g, %.3g)", label, worst,
                 wd);
        test_check(worst == 0 && wd == 0, what);
        return;
    }
    snprintf(what, sizeof what, "%s: losses and final weights within %g of the straight run (losses %.3g, weights "
             "%.3g), grad norms within %g (%.3g)", label, tol, worst, wd, NORM_TOL, norms);
    test_check(worst <= tol && wd <= tol && norms <= NORM_TOL, what);
}

static void any_layout(void) {
    char ckpt[700], old[700];
    snprintf(ckpt, sizeof ckpt, "%s/s3_w3_straight/checkpoint-%d", TMP, SAVE_AT);
    resume_into("cross_w2_s1", 2, "s1", ckpt, "checkpoint of 3 ranks, stage 3, resumed at 2 ranks, stage 1",
                "s3_w3_straight", CROSS_TOL);
    snprintf(ckpt, sizeof ckpt, "%s/s3o_w3_straight/checkpoint-%d", TMP, SAVE_AT);
    resume_into("cross_w1_s0", 1, "s0", ckpt, "checkpoint of 3 ranks, stage 3 with offload, resumed at 1 rank, stage 0",
                "s3o_w3_straight", CROSS_TOL);
    snprintf(old, sizeof old, "%s/old_layout", TMP);
    make_old_layout("s0_w1_straight", old);
    resume_into("old_w1", 1, "s0", old, "old layout (optimizer.safetensors) resumed at 1 rank, stage 0",
                "s0_w1_straight", 0.0);
    resume_into("old_w3_s2", 3, "s2o", old, "old layout resumed at 3 ranks, stage 2 with offload (by ranges)",
                "s0_w1_straight", CROSS_TOL);
}

// ---- 3. integrity ---------------------------------------------------------------------
static void flip_byte(const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) t5_fail("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long mid = ftell(f) / 2;
    fseek(f, mid, SEEK_SET);
    int c = fgetc(f);
    fseek(f, mid, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
}

// A damaged copy of the 3-rank stage-3 checkpoint-5 in TMP/bad_<name>/checkpoint-5.
static void damaged_copy(const char *name, char *dir, size_t n) {
    char cmd[1600];
    snprintf(dir, n, "%s/bad_%s/checkpoint-%d", TMP, name, SAVE_AT);
    snprintf(cmd, sizeof cmd, "rm -rf %s/bad_%s && mkdir -p %s/bad_%s && cp -r %s/s3_w3_straight/checkpoint-%d %s",
             TMP, name, TMP, name, TMP, SAVE_AT, dir);
    if (sh(cmd) != 0) t5_fail("%s failed", cmd);
}

// Resuming from ckpt must fail with one error line naming `needle` (and a HINT), and the
// run's --output_dir gets no model, state or checkpoint.
static void expect_refusal(const char *name, const char *ckpt, int world, const char *needle) {
    char tag[128], extra[900], cmd[1600], what[700];
    snprintf(tag, sizeof tag, "refused_%s", name);
    for (char *c = tag; *c; c++)
        if (*c == ' ' || *c == '.' || *c == '-') *c = '_';
    snprintf(extra, sizeof extra, "--resume_from_checkpoint %s", ckpt);
    int ran = train(tag, world, world > 1 ? "s2" : NULL, extra);
    snprintf(cmd, sizeof cmd, "grep -F 'error: ' %s/%s.log | grep -F -- '%s' | grep -q HINT", TMP, tag, needle);
    int named = sh(cmd) == 0;
    snprintf(cmd, sizeof cmd, "grep -c '^error: ' %s/%s.log", TMP, tag);
    char out[700];
    snprintf(out, sizeof out, "%s/%s/trainer_state.json", TMP, tag);
    int wrote = path_exists(out);
    snprintf(out, sizeof out, "%s/%s/model.safetensors", TMP, tag);
    wrote |= path_exists(out);
    snprintf(out, sizeof out, "%s/%s/checkpoint-%d", TMP, tag, STEPS);
    wrote |= path_exists(out);
    snprintf(what, sizeof what, "refused, %s (%d rank%s): exit non-zero, an error naming \"%s\" with a HINT, nothing "
             "written", name, world, world > 1 ? "s" : "", needle);
    if (!test_check(!ran && named && !wrote, what)) show_log(tag);
}

static void integrity(void) {
    char dir[700], p[900];
    damaged_copy("flip", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/global_step%d/rank_00001.safetensors", dir, SAVE_AT);
    flip_byte(p);
    expect_refusal("flipped byte", dir, 1, "rank_00001.safetensors: CRC-32C");
    expect_refusal("flipped byte found by rank 1 of 3", dir, 3, "rank_00001.safetensors: CRC-32C");

    damaged_copy("trunc", dir, sizeof dir);
    snprintf(p, sizeof p, "truncate -s -100 %s/global_step%d/rank_00002.safetensors", dir, SAVE_AT);
    if (sh(p) != 0) t5_fail("%s failed", p);
    expect_refusal("truncated shard", dir, 1, "rank_00002.safetensors");

    damaged_copy("missing", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/global_step%d/rank_00000.safetensors", dir, SAVE_AT);
    unlink(p);
    expect_refusal("missing shard", dir, 1, "rank_00000.safetensors: missing");

    damaged_copy("latest", dir, sizeof dir);
    snprintf(p, sizeof p, "%s/latest", dir);
    unlink(p);
    expect_refusal("missing latest", dir, 1, "latest: missing");

    // the index disagrees with the files: a checksum, then the ranges
    for (int k = 0; k < 2; k++) {
        damaged_copy(k ? "index_range" : "index_crc", dir, sizeof dir);
        snprintf(p, sizeof p, "%s/global_step%d/zero_index.json", dir, SAVE_AT);
        cJSON *idx = test_load_json(p, "");
        cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "shards"), 1);
        const char *key = k ? "begin" : "crc32c";
        double v = cJSON_GetObjectItem(s1, key)->valuedouble;
        cJSON_ReplaceItemInObject(s1, key, cJSON_CreateNumber(k ? v + 1 : (double)((uint32_t)v ^ 1u)));
        json_save_atomic(idx, p);
        cJSON_Delete(idx);
        expect_refusal(k ? "index ranges do not tile" : "index checksum disagrees", dir, 1,
                       k ? "zero_index.json: shard 1 covers" : "the index");
    }

    // a checkpoint still being written
    snprintf(p, sizeof p, "rm -rf %s/half && mkdir -p %s/half && cp -r %s/s3_w3_straight/checkpoint-%d "
             "%s/half/checkpoint-%d.tmp", TMP, TMP, TMP, SAVE_AT, TMP, SAVE_AT);
    if (sh(p) != 0) t5_fail("%s failed", p);
    snprintf(dir, sizeof dir, "%s/half/checkpoint-%d.tmp", TMP, SAVE_AT);
    expect_refusal("checkpoint-N.tmp", dir, 1, "checkpoint-5.tmp: a checkpoint still being written");
}

// ---- 4. memory ------------------------------------------------------------------------
// Every "checkpoint host memory:" line of the runs at `world` ranks: peak <= 4 (P + U).
static void memory_bound(int world, const char *tags) {
    char cmd[1200], what[400];
    snprintf(cmd, sizeof cmd, "cd %s && cat %s 2>/dev/null | grep '^checkpoint host memory:'", TMP, tags);
    FILE *p = popen(cmd, "r");
    if (!p) t5_fail("popen failed");
    char line[512];
    int n_save = 0, n_load = 0, n_weights = 0, within = 1;
    double worst = 0;
    while (fgets(line, sizeof line, p)) {
        char kind[16];
        int rank;
        double peak, part, unit;
        if (sscanf(line, "checkpoint host memory: %15s rank %d peak +%lf bytes (partition %lf elements, largest tensor "
                         "%lf elements)", kind, &rank, &peak, &part, &unit) != 5) {
            within = 0;
            continue;
        }
        double bound = MEM_BYTES_PER_ELEM * (part + unit);
        worst = fmax(worst, peak / bound);
        within &= peak <= bound && rank < world;
        n_save += !strcmp(kind, "save");
        n_load += !strcmp(kind, "load");
        n_weights += !strcmp(kind, "weights");  // a resume's compute weights read from the shards
    }
    pclose(p);
    snprintf(what, sizeof what, "memory, %d rank%s: %d save, %d load and %d weights reports, every peak within partition "
             "+ largest tensor (worst %.2f of the bound)", world, world > 1 ? "s" : "", n_save, n_load, n_weights, worst);
    test_check(within && n_save >= world && n_load >= world && n_weights >= world, what);
}

// ---- 5. export ------------------------------------------------------------------------
static int export_cmd(const char *args, const char *label) {
    char cmd[1600], what[300];
    snprintf(cmd, sizeof cmd, "./train_t5 export %s > %s/export.log 2>&1", args, TMP);
    snprintf(what, sizeof what, "export %s: exits 0", label);
    int ok = test_check(sh(cmd) == 0, what);
    if (!ok) {
        snprintf(cmd, sizeof cmd, "cat %s/export.log", TMP);
        sh(cmd);
    }
    return ok;
}

// Every weight of dir (loaded through hf_load_weights) is the rounding of ref's to dtype.
static void check_rounded(const char *dir, const char *ref, StDtype dtype, const char *label) {
    ParamLayout la, lb;
    float *got = load_hf(dir, &la), *want = load_hf(ref, &lb);
    size_t bad = la.total == lb.total ? 0 : 1;
    for (size_t i = 0; i < la.total && la.total == lb.total; i++) {
        float r = dtype == ST_BF16 ? st_bf16_to_f32(st_f32_to_bf16(want[i])) : st_f16_to_f32(st_f32_to_f16(want[i]));
        bad += memcmp(&r, &got[i], sizeof r) != 0;
    }
    char what[300];
    snprintf(what, sizeof what, "%s: every weight is the %s rounding of the fp32 one (%zu of %zu differ)", label,
             st_dtype_name(dtype), bad, la.total);
    test_check(bad == 0, what);
    free(got);
    free(want);
    params_free_layout(&la);
    params_free_layout(&lb);
}

static void export_round_trip(void) {
    char args[1600], a[900], b[900], ck[700], what[300];
    snprintf(ck, sizeof ck, "%s/s3_w3_straight/checkpoint-%d", TMP, STEPS);
    snprintf(args, sizeof args, "%s %s/exp32", ck, TMP);
    if (export_cmd(args, "fp32 of the 3-rank stage-3 shards")) {
        snprintf(a, sizeof a, "%s/exp32/model.safetensors", TMP);
        snprintf(b, sizeof b, "%s/model.safetensors", ck);
        test_check(files_equal(a, b), "export fp32: model.safetensors is the checkpoint's, byte for byte");
        snprintf(a, sizeof a, "%s/exp32", TMP);
        double d = weights_diff(a, ck);
        snprintf(what, sizeof what, "export fp32: loaded as an HF directory, the same weights (max rel diff %.3g)", d);
        test_check(d == 0, what);
        snprintf(a, sizeof a, "%s/exp32/spiece.model", TMP);
        test_check(path_is_file(a), "export fp32: spiece.model copied");
    }
    snprintf(args, sizeof args, "%s %s/exp_bf16 --dtype bf16 --max_shard_size 300KB", ck, TMP);
    if (export_cmd(args, "bf16, --max_shard_size 300KB")) {
        snprintf(a, sizeof a, "%s/exp_bf16/model.safetensors.index.json", TMP);
        snprintf(b, sizeof b, "%s/exp_bf16/model-00001-of-00002.safetensors", TMP);
        char c[900];
        snprintf(c, sizeof c, "%s/exp_bf16/model.safetensors", TMP);
        test_check(path_is_file(a) && path_is_file(b) && !path_exists(c),
                   "export bf16: split into model-00001-of-00002.safetensors ... + model.safetensors.index.json");
        snprintf(a, sizeof a, "%s/exp_bf16", TMP);
        check_rounded(a, ck, ST_BF16, "export bf16");
    }
    snprintf(args, sizeof args, "%s %s/exp_f16 --dtype fp16", ck, TMP);
    if (export_cmd(args, "fp16")) {
        snprintf(a, sizeof a, "%s/exp_f16", TMP);
        check_rounded(a, ck, ST_F16, "export fp16");
    }
    // a stage-3 --output_dir without gathering (the shards only) and the old layout
    snprintf(args, sizeof args, "%s/s3_w3_straight %s/exp_final", TMP, TMP);
    if (export_cmd(args, "of a stage-3 --output_dir holding shards")) {
        snprintf(a, sizeof a, "%s/exp_final/model.safetensors", TMP);
        test_check(files_equal(a, strcat(strcpy(b, ck), "/model.safetensors")),
                   "export of the final shards: the same model.safetensors as checkpoint-10's");
    }
    snprintf(args, sizeof args, "%s/old_layout %s/exp_old", TMP, TMP);
    if (export_cmd(args, "of the old layout (model.safetensors)")) {
        snprintf(a, sizeof a, "%s/exp_old/model.safetensors", TMP);
        snprintf(b, sizeof b, "%s/old_layout/model.safetensors", TMP);
        test_check(files_equal(a, b), "export of the old layout: its model.safetensors, byte for byte");
    }
    // a damaged shard is refused by export too
    snprintf(args, sizeof args, "./train_t5 export %s/bad_flip/checkpoint-%d %s/exp_bad > %s/export_bad.log 2>&1", TMP,
             SAVE_AT, TMP, TMP);
    int rc = sh(args);
    snprintf(args, sizeof args, "grep -q 'rank_00001.safetensors: CRC-32C' %s/export_bad.log", TMP);
    snprintf(a, sizeof a, "%s/exp_bad", TMP);
    test_check(rc != 0 && sh(args) == 0 && !path_exists(a),
               "export of a damaged checkpoint: refused naming the shard, no OUT directory left");
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first (from the repository root)");
    if (!mkdtemp(TMP)) t5_fail("mkdtemp failed");
    write_configs();
    int ok = 1;
    const int worlds[2] = {1, 3};
    for (int wi = 0; wi < 2; wi++)
        for (int s = 0; s <= 3; s++)
            for (int off = 0; off <= (s > 0); off++) {
                Config c = {.stage = s, .offload = off, .world = worlds[wi]};
                ok &= exact_resume(&c);
            }
    Config nvme = {.stage = 2, .offload = OFFLOAD_NVME, .world = 3};
    ok &= exact_resume(&nvme);
    // --fp8: the scaling state (the amaxes all-reduced: one copy in the index) resumes too
    Config fp8_1 = {.stage = 0, .world = 1, .fp8 = 1}, fp8_3 = {.stage = 2, .world = 3, .fp8 = 1};
    ok &= exact_resume(&fp8_1);
    ok &= exact_resume(&fp8_3);
    if (ok) {
        any_layout();
        integrity();
        memory_bound(1, "s*_w1_*.log old_w1.log cross_w1_s0.log");
        memory_bound(2, "cross_w2_s1.log");
        memory_bound(3, "s*_w3_*.log old_w3_s2.log");
        export_round_trip();
    }
    int rc = test_summary();
    if (rc == 0) rm_rf(TMP);
    else printf("logs kept in %s\n", TMP);
    return rc;
}
