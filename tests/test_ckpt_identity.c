// tests/test_ckpt_identity.c: a checkpoint's shards carry their identity (zero/checkpoint.c:
// rank, world size, [begin, end), global step, parameter count and the save's random id in each
// shard's safetensors __metadata__, the id in zero_index.json too), and every reader checks it
// against the index and the index against trainer_state.json. Through ./train_t5 on CPU ranks
// under mpirun (run from the repository root, after make; TRAIN_T5=path picks another binary).
//
// Runs: a (2 ranks, checkpoints at steps 2 and 4), b (the same model, world size and steps,
// another learning rate: another run), c (3 ranks). Each lie below is made in a copy of
// a/checkpoint-2 with the index's byte counts and CRC-32Cs made to match the files (so that
// only the identity can catch it), and must be refused by --resume_from_checkpoint (1 and 2
// ranks) and by `train_t5 export` in one error line naming the file and the field, with a
// HINT, writing nothing:
//   the two ranks' shards swapped (issue 35's example: resumed with the halves exchanged,
//   exit 0), a shard of another save of this run (step 4), a shard of another run (same
//   step), a shard copied under another rank's name, a shard of a 3-rank run, a range lie in
//   the index only, the index of another checkpoint of this run and of another run, `latest`
//   naming another save's tag, trainer_state.json of another step, a shard without identity in
//   a version-2 index, an index passed off as version 1 over version-2 shards.
// And what must still load: the checkpoint as written (1 and 2 ranks, export), and a
// checkpoint of the layout before the identity (index version 1, shards with their range
// only: made here by rewriting the headers) with a NOTICE, its export the same bytes; swapped,
// it is refused by its ranges.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../formats/safetensors.h"
#include "test.h"
#include "test_files.h"
#include "test_tmp.h"

static char TMP[] = "/tmp/t5_test_ckpt_id.XXXXXX";
static const char *BIN = "./train_t5";

static int sh(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void must(const char *cmd) {
    if (sh(cmd) != 0) t5_fail("%s failed", cmd);
}

// ./train_t5 on `world` CPU ranks into TMP/<out> (log TMP/<out>.log), 4 steps of 8 rows, a
// checkpoint every 2; extra flags last. The exit code.
static int train(const char *out, int world, const char *extra) {
    char cmd[4096], launcher[200] = "";
    if (world > 1)
        snprintf(launcher, sizeof launcher,
                 "OMP_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -np %d ",
                 world);
    snprintf(cmd, sizeof cmd,
             "%s%s --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir tests/fixtures/trainer_data --task translation_en_to_ro --max_source_length 24 "
             "--max_target_length 20 --per_device_train_batch_size %d --max_steps 4 --save_steps 2 --logging_steps 1 "
             "--sampler sequential --dropout_rate 0 --do_train --output_dir %s/%s --cache_dir %s/cache %s > %s/%s.log "
             "2>&1",
             launcher, BIN, world == 3 ? 4 : 8 / world, TMP, out, TMP, extra ? extra : "", TMP, out);
    return sh(cmd);
}

// A fresh copy of run/checkpoint-<step> as TMP/<name>; its path in dir.
static void copy_ckpt(const char *run, int step, const char *name, char *dir, size_t n) {
    char cmd[1600];
    snprintf(dir, n, "%s/%s", TMP, name);
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/%s/checkpoint-%d %s", dir, TMP, run, step, dir);
    must(cmd);
}

static void shard_path(const char *dir, int step, int rank, char *p, size_t n) {
    snprintf(p, n, "%s/global_step%d/rank_%05d.safetensors", dir, step, rank);
}

// The index's bytes and crc32c of every shard set to the files' (a lie the checksums pass).
static void index_match_files(const char *dir, int step) {
    char ip[1200], sp[1200];
    snprintf(ip, sizeof ip, "%s/global_step%d/zero_index.json", dir, step);
    cJSON *idx = test_load_json(ip, "");
    cJSON *e;
    int r = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(idx, "shards")) {
        shard_path(dir, step, r++, sp, sizeof sp);
        uint32_t crc;
        uint64_t bytes;
        if (!file_crc32c(sp, 1 << 20, &crc, &bytes)) continue;  // a missing shard stays missing
        cJSON_ReplaceItemInObject(e, "bytes", cJSON_CreateNumber((double)bytes));
        cJSON_ReplaceItemInObject(e, "crc32c", cJSON_CreateNumber((double)crc));
    }
    json_save_atomic(idx, ip);
    cJSON_Delete(idx);
}

// Shard `path` written again with the same tensors and __metadata__ `meta` (a JSON object of
// strings): the layout before the identity, or a shard without one.
static void rewrite_meta(const char *path, const char *meta) {
    StFile f;
    st_open(&f, path);
    StTensorDesc d[3];
    float *vals[3];
    for (int k = 0; k < f.count && k < 3; k++) {
        const StTensor *t = &f.tensors[k];
        d[k] = (StTensorDesc){.name = t->name, .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)t->numel}};
        vals[k] = mallocCheck((t->numel ? t->numel : 1) * sizeof(float));
        st_read_f32(&f, t, vals[k]);
    }
    StWriter w;
    st_writer_open(&w, path, d, f.count, meta);
    for (int k = 0; k < f.count; k++) st_writer_write_f32(&w, vals[k], f.tensors[k].numel);
    st_writer_close(&w);
    for (int k = 0; k < f.count; k++) free(vals[k]);
    st_close(&f);
}

// The layout before the identity: each shard's metadata its format and range only, the index
// version 1 without save_id.
static void make_version1(const char *dir, int step, int world) {
    char ip[1200], sp[1200], meta[256];
    snprintf(ip, sizeof ip, "%s/global_step%d/zero_index.json", dir, step);
    cJSON *idx = test_load_json(ip, "");
    for (int r = 0; r < world; r++) {
        const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "shards"), r);
        snprintf(meta, sizeof meta, "{\"format\":\"train_t5 zero shards\",\"begin\":\"%.0f\",\"end\":\"%.0f\"}",
                 test_json_num(e, "begin"), test_json_num(e, "end"));
        shard_path(dir, step, r, sp, sizeof sp);
        rewrite_meta(sp, meta);
    }
    cJSON_ReplaceItemInObject(idx, "version", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(idx, "save_id");
    json_save_atomic(idx, ip);
    cJSON_Delete(idx);
    index_match_files(dir, step);
}

static void swap_shards(const char *dir, int step) {
    char a[800], b[800], cmd[5000];
    shard_path(dir, step, 0, a, sizeof a);
    shard_path(dir, step, 1, b, sizeof b);
    snprintf(cmd, sizeof cmd, "mv %s %s.x && mv %s %s && mv %s.x %s", a, a, b, a, a, b);
    must(cmd);
    index_match_files(dir, step);
}

static int log_has(const char *log, const char *needle) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s.log", TMP, log);
    char *t = test_slurp(path);
    int has = strstr(t, needle) != NULL;
    free(t);
    return has;
}

// The error lines of a log each hold needle and a HINT (the ranks that found it say the same).
static int error_names(const char *log, const char *needle) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s.log", TMP, log);
    char *t = test_slurp(path);
    int n = 0, good = 1;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "error: ", 7)) {
            n++;
            good &= strstr(line, needle) != NULL && strstr(line, "; HINT: ") != NULL;
        }
    free(t);
    return n > 0 && good;
}

static void show_log(const char *log) {
    char cmd[900];
    snprintf(cmd, sizeof cmd, "grep -v '^ ' %s/%s.log | tail -n 3 | cut -c1-400", TMP, log);
    sh(cmd);
}

static void tag_of(const char *prefix, const char *name, int world, char *tag, size_t n) {
    snprintf(tag, n, "%s_%s_w%d", prefix, name, world);
    for (char *c = tag; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) *c = '_';
}

// --resume_from_checkpoint ckpt at `world` ranks: refused naming needle, nothing written.
static void expect_resume_refused(const char *name, const char *ckpt, int world, const char *needle) {
    char tag[200], extra[900], out[900], what[1200];
    tag_of("resume", name, world, tag, sizeof tag);
    snprintf(extra, sizeof extra, "--resume_from_checkpoint %s", ckpt);
    int rc = train(tag, world, extra);
    snprintf(out, sizeof out, "%s/%s", TMP, tag);
    int named = error_names(tag, needle), wrote = path_exists(out);
    snprintf(what, sizeof what, "%s: resume at %d rank%s refused (exit %d), one error naming '%s' with a HINT%s", name,
             world, world > 1 ? "s" : "", rc, needle, wrote ? ", BUT --output_dir was written" : ", nothing written");
    if (!test_check(rc != 0 && named && !wrote, what)) show_log(tag);
}

// `train_t5 export ckpt OUT`: refused naming needle, no OUT.
static void expect_export_refused(const char *name, const char *ckpt, const char *needle) {
    char tag[200], cmd[3000], out[900], what[1200];
    tag_of("export", name, 1, tag, sizeof tag);
    snprintf(out, sizeof out, "%s/%s", TMP, tag);
    snprintf(cmd, sizeof cmd, "%s export %s %s > %s.log 2>&1", BIN, ckpt, out, out);
    int rc = sh(cmd);
    int named = error_names(tag, needle), wrote = path_exists(out);
    snprintf(what, sizeof what, "%s: export refused (exit %d), one error naming '%s' with a HINT%s", name, rc, needle,
             wrote ? ", BUT OUT was written" : ", no OUT");
    if (!test_check(rc != 0 && named && !wrote, what)) show_log(tag);
}

static int resume_ok(const char *name, const char *ckpt, int world) {
    char tag[200], extra[900];
    tag_of("resume", name, world, tag, sizeof tag);
    snprintf(extra, sizeof extra, "--resume_from_checkpoint %s", ckpt);
    int rc = train(tag, world, extra);
    if (rc != 0) show_log(tag);
    return rc == 0 && log_has(tag, "resuming from");
}

static int export_ok(const char *name, const char *ckpt) {
    char tag[200], cmd[2000];
    tag_of("export", name, 1, tag, sizeof tag);
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s && %s export %s %s/%s > %s/%s.log 2>&1", TMP, tag, BIN, ckpt, TMP, tag, TMP,
             tag);
    int rc = sh(cmd);
    if (rc != 0) show_log(tag);
    return rc == 0;
}

static void set_index_key(const char *dir, int step, const char *key, double v) {
    char ip[1200];
    snprintf(ip, sizeof ip, "%s/global_step%d/zero_index.json", dir, step);
    cJSON *idx = test_load_json(ip, "");
    cJSON_ReplaceItemInObject(idx, key, cJSON_CreateNumber(v));
    json_save_atomic(idx, ip);
    cJSON_Delete(idx);
}

// ---- the lies --------------------------------------------------------------------------
static void lies(void) {
    char d[800], p[1200], q[1200], cmd[4000];

    // issue 35: the ranks' shards swapped, the index's bytes and CRCs with them
    copy_ckpt("a", 2, "swapped", d, sizeof d);
    swap_shards(d, 2);
    const char *swapped = "rank_00000.safetensors: __metadata__ \"rank\" is \"1\"";
    expect_resume_refused("swapped shards", d, 1, swapped);
    expect_resume_refused("swapped shards", d, 2, swapped);
    expect_export_refused("swapped shards", d, swapped);

    // a shard of another save of this run: checkpoint-4's rank 1 in checkpoint-2
    copy_ckpt("a", 2, "other_save", d, sizeof d);
    shard_path(d, 2, 1, p, sizeof p);
    snprintf(cmd, sizeof cmd, "cp %s/a/checkpoint-4/global_step4/rank_00001.safetensors %s", TMP, p);
    must(cmd);
    index_match_files(d, 2);
    const char *other_save = "rank_00001.safetensors: __metadata__ \"global_step\" is \"4\"";
    expect_resume_refused("shard of another save", d, 1, other_save);
    expect_resume_refused("shard of another save", d, 2, other_save);
    expect_export_refused("shard of another save", d, other_save);

    // a shard of another run at the same step, world size and model
    copy_ckpt("a", 2, "other_run", d, sizeof d);
    shard_path(d, 2, 1, p, sizeof p);
    snprintf(cmd, sizeof cmd, "cp %s/b/checkpoint-2/global_step2/rank_00001.safetensors %s", TMP, p);
    must(cmd);
    index_match_files(d, 2);
    const char *other_run = "rank_00001.safetensors: __metadata__ \"save_id\"";
    expect_resume_refused("shard of another run", d, 1, other_run);
    expect_resume_refused("shard of another run", d, 2, other_run);
    expect_export_refused("shard of another run", d, other_run);

    // rank 0's shard copied under rank 1's name
    copy_ckpt("a", 2, "copied", d, sizeof d);
    shard_path(d, 2, 0, p, sizeof p);
    shard_path(d, 2, 1, q, sizeof q);
    snprintf(cmd, sizeof cmd, "cp %s %s", p, q);
    must(cmd);
    index_match_files(d, 2);
    const char *copied = "rank_00001.safetensors: __metadata__ \"rank\" is \"0\"";
    expect_resume_refused("shard under another rank's name", d, 1, copied);
    expect_export_refused("shard under another rank's name", d, copied);

    // a shard of a 3-rank run
    copy_ckpt("a", 2, "other_world", d, sizeof d);
    shard_path(d, 2, 1, p, sizeof p);
    snprintf(cmd, sizeof cmd, "cp %s/c/checkpoint-2/global_step2/rank_00001.safetensors %s", TMP, p);
    must(cmd);
    index_match_files(d, 2);
    expect_resume_refused("shard of a 3-rank run", d, 1,
                          "rank_00001.safetensors: __metadata__ \"world_size\" is \"3\"");

    // the ranges moved in the index only (they still tile the parameters)
    copy_ckpt("a", 2, "range_lie", d, sizeof d);
    snprintf(p, sizeof p, "%s/global_step2/zero_index.json", d);
    cJSON *idx = test_load_json(p, "");
    cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "shards"), 0);
    cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "shards"), 1);
    double mid = test_json_num(s0, "end") - 8;
    cJSON_ReplaceItemInObject(s0, "end", cJSON_CreateNumber(mid));
    cJSON_ReplaceItemInObject(s1, "begin", cJSON_CreateNumber(mid));
    json_save_atomic(idx, p);
    cJSON_Delete(idx);
    const char *range = "rank_00000.safetensors: __metadata__ \"end\"";
    expect_resume_refused("range lie in the index", d, 1, range);
    expect_export_refused("range lie in the index", d, range);

    // the index of another checkpoint: of this run (step 4), of another run (step 2)
    copy_ckpt("a", 2, "index_step4", d, sizeof d);
    snprintf(cmd, sizeof cmd, "cp %s/a/checkpoint-4/global_step4/zero_index.json %s/global_step2/", TMP, d);
    must(cmd);
    const char *idx4 = "global_step2/zero_index.json: global_step 4, but it lies in global_step2";
    expect_resume_refused("index of checkpoint-4", d, 1, idx4);
    expect_export_refused("index of checkpoint-4", d, idx4);
    copy_ckpt("a", 2, "index_other_run", d, sizeof d);
    snprintf(cmd, sizeof cmd, "cp %s/b/checkpoint-2/global_step2/zero_index.json %s/global_step2/", TMP, d);
    must(cmd);
    expect_resume_refused("index of another run", d, 1, "rank_00000.safetensors: __metadata__ \"save_id\"");
    expect_export_refused("index of another run", d, "rank_00000.safetensors: __metadata__ \"save_id\"");

    // `latest` naming another save's tag (checkpoint-4's, copied in whole)
    copy_ckpt("a", 2, "latest_other", d, sizeof d);
    snprintf(cmd, sizeof cmd, "cp -r %s/a/checkpoint-4/global_step4 %s/ && printf global_step4 > %s/latest", TMP, d, d);
    must(cmd);
    const char *latest = "global_step4/zero_index.json: global_step 4, ";
    expect_resume_refused("latest names another tag", d, 1, latest);
    expect_export_refused("latest names another tag", d, "trainer_state.json says 2");

    // trainer_state.json of another step than the shards' (export reads the shards alone)
    copy_ckpt("a", 2, "state_step", d, sizeof d);
    snprintf(cmd, sizeof cmd, "cp %s/a/checkpoint-4/trainer_state.json %s/", TMP, d);
    must(cmd);
    expect_export_refused("trainer_state.json of step 4", d, "global_step 2, ");

    // a shard without its identity in a version-2 index; a version-1 index over version-2 shards
    copy_ckpt("a", 2, "no_identity", d, sizeof d);
    shard_path(d, 2, 1, p, sizeof p);
    rewrite_meta(p, "{\"format\":\"train_t5 zero shards\",\"begin\":\"129776\",\"end\":\"259552\"}");
    index_match_files(d, 2);
    expect_resume_refused("shard without identity", d, 1, "rank_00001.safetensors: __metadata__ \"version\" is \"1\"");
    copy_ckpt("a", 2, "index_v1", d, sizeof d);
    set_index_key(d, 2, "version", 1);
    expect_resume_refused("index passed off as version 1", d, 2,
                          "rank_00000.safetensors: __metadata__ \"version\" is \"2\"");
}

// ---- what still loads ------------------------------------------------------------------
static void still_loads(void) {
    char d[800], a[900], b[900], what[300];
    snprintf(d, sizeof d, "%s/a/checkpoint-2", TMP);
    test_check(resume_ok("as written", d, 1) && resume_ok("as written", d, 2),
               "the checkpoint as written resumes at 1 and 2 ranks");
    int exported = export_ok("as written", d);
    test_check(exported, "the checkpoint as written exports");

    copy_ckpt("a", 2, "v1", d, sizeof d);
    make_version1(d, 2, 2);
    int ok = resume_ok("version 1", d, 1);
    snprintf(a, sizeof a, "resume_version_1_w1");
    snprintf(what, sizeof what, "a version-1 checkpoint (shards with their range only) resumes, with a NOTICE");
    test_check(ok && log_has(a, "NOTICE: ") && log_has(a, "zero_index.json: version 1"), what);
    snprintf(a, sizeof a, "%s/export_version_1_w1/model.safetensors", TMP);
    snprintf(b, sizeof b, "%s/export_as_written_w1/model.safetensors", TMP);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    test_check(export_ok("version 1", d) && exported && sh(cmd) == 0,
               "a version-1 checkpoint exports the same model.safetensors, byte for byte");
    swap_shards(d, 2);
    expect_resume_refused("version 1 swapped", d, 1, "rank_00000.safetensors: __metadata__ \"begin\" is \"129776\"");
}

int main(void) {
    if (getenv("TRAIN_T5")) BIN = getenv("TRAIN_T5");
    if (access(BIN, X_OK) != 0) t5_fail("%s not built; run make first (from the repository root)", BIN);
    if (!mkdtemp(TMP)) t5_fail("mkdtemp failed");
    int ra = train("a", 2, "--learning_rate 3e-3"), rb = train("b", 2, "--learning_rate 1e-3");
    int rc = train("c", 3, NULL);
    if (test_check(ra == 0 && rb == 0 && rc == 0, "runs a, b (2 ranks) and c (3 ranks) save checkpoints at 2 and 4")) {
        lies();
        still_loads();
    }
    int fail = test_summary();
    if (fail == 0) rm_rf(TMP);
    else printf("logs kept in %s\n", TMP);
    return fail;
}
