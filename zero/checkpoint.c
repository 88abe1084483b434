// zero/checkpoint.c: save and load the ZeRO part of a checkpoint as per-rank shards, an
// index and a `latest` marker; read the older whole layout by ranges (checkpoint.h).
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/check.h"
#include "../common/crc32c.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../model/safetensors.h"

#define OLD_OPT_FILE "optimizer.safetensors"  // the layout before the shards
#define OLD_STATE_FILE "zero_state.json"
#define SHARD_FORMAT "rank_%05d.safetensors"
#define INDEX_FORMAT_NAME "train_t5 zero shards"
#define INDEX_VERSION 1
#define CHUNK_MAX_ELEMS ((size_t)1 << 18)    // 1 MiB of fp32 per read, write or checksum
#define JSON_WHOLE_MAX 9007199254740992.0     // whole numbers a double holds exactly
#define CRC_MAX 4294967295.0
#define N_STATES 3
#define HINT_EARLIER "HINT: resume from an earlier checkpoint-N (the files of this one are damaged or incomplete)"
static const char *const STATE_NAMES[N_STATES] = {"master", "exp_avg", "exp_avg_sq"};

size_t zero_ckpt_chunk_elems(const ParamLayout *lay) {
    size_t big = params_largest_numel(lay);
    if (big < 1) big = 1;
    return big < CHUNK_MAX_ELEMS ? big : CHUNK_MAX_ELEMS;
}

// ---- memory accounting (a test hook) ----------------------------------------------------
static size_t mem_base;

void zero_ckpt_mem_begin(void) {
    if (!check_mem_counting()) return;
    mem_base = check_mem_current();
    check_mem_reset_peak();
}

void zero_ckpt_mem_print(const ParamLayout *lay, const Comm *comm, const char *what, size_t bytes) {
    if (!check_mem_counting()) return;
    Range p = partition_range(lay->total, comm->world, comm->rank);
    size_t big = params_largest_numel(lay);
    printf("checkpoint host memory: %s rank %d peak +%zu bytes (partition %zu elements, largest tensor %zu elements)\n",
           what, comm->rank, bytes, p.end - p.begin, big);
    fflush(stdout);
}

void zero_ckpt_mem_report(const ZeroState *z, const char *what) {
    if (!check_mem_counting()) return;
    size_t peak = check_mem_peak();
    zero_ckpt_mem_print(&z->m->lay, z->comm, what, peak > mem_base ? peak - mem_base : 0);
}

// ---- names -----------------------------------------------------------------------------
static char *tag_dir(const char *dir, int global_step) {
    char tag[64];
    snprintf(tag, sizeof tag, ZERO_CKPT_TAG_PREFIX "%d", global_step);
    return path_join(dir, tag);
}

static char *shard_path(const char *tagdir, int rank) {
    char name[64];
    snprintf(name, sizeof name, SHARD_FORMAT, rank);
    return path_join(tagdir, name);
}

// The range a rank writes: its partition (stage 0 too: every rank holds everything there,
// and the same split lets them write in parallel).
static Range write_range(const ZeroState *z) {
    return partition_range(z->m->lay.total, z->comm->world, z->comm->rank);
}

// ---- save ------------------------------------------------------------------------------
typedef struct {
    uint64_t begin, end, bytes;
    uint32_t crc;
} ShardRecord;

static void json_add_scaler(cJSON *st, const LossScaler *scaler) {
    cJSON *ls = cJSON_CreateObject();
    cJSON_AddNumberToObject(ls, "dynamic", scaler->dynamic);
    cJSON_AddNumberToObject(ls, "cur_scale", scaler->cur_scale);
    cJSON_AddNumberToObject(ls, "cur_iter", (double)scaler->cur_iter);
    cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)scaler->last_overflow_iter);
    cJSON_AddNumberToObject(ls, "cur_hysteresis", scaler->cur_hysteresis);
    cJSON_AddNumberToObject(ls, "skipped_steps", (double)scaler->skipped_steps);
    cJSON_AddItemToObject(st, "loss_scaler", ls);
}

static void write_index(const ZeroState *z, const LossScaler *scaler, const char *tagdir, int global_step,
                        const ShardRecord *recs) {
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "format", INDEX_FORMAT_NAME);
    cJSON_AddNumberToObject(st, "version", INDEX_VERSION);
    cJSON_AddNumberToObject(st, "global_step", global_step);
    cJSON_AddNumberToObject(st, "optimizer_step", z->opt.step);
    cJSON_AddNumberToObject(st, "parameters", (double)z->m->lay.total);
    cJSON_AddNumberToObject(st, "world_size", z->comm->world);
    cJSON_AddNumberToObject(st, "zero_stage", z->stage);
    cJSON_AddNumberToObject(st, "offload_optimizer", z->offload);
    json_add_scaler(st, scaler);
    cJSON *arr = cJSON_AddArrayToObject(st, "shards");
    for (int r = 0; r < z->comm->world; r++) {
        char name[64];
        snprintf(name, sizeof name, SHARD_FORMAT, r);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "file", name);
        cJSON_AddNumberToObject(e, "begin", (double)recs[r].begin);
        cJSON_AddNumberToObject(e, "end", (double)recs[r].end);
        cJSON_AddNumberToObject(e, "bytes", (double)recs[r].bytes);
        cJSON_AddNumberToObject(e, "crc32c", (double)recs[r].crc);
        cJSON_AddItemToArray(arr, e);
    }
    char *path = path_join(tagdir, ZERO_CKPT_INDEX);
    json_save_atomic(st, path);
    free(path);
    cJSON_Delete(st);
}

// Who writes the checkpoint's directories, index and `latest`: rank 0 on a shared file system;
// with node-local storage the lowest rank of each host, into that host's own disk.
static int writes_index(const ZeroState *z, int node_local) {
    return node_local ? comm_is_host_leader(z->comm) : z->comm->rank == 0;
}

void zero_save_shards(ZeroState *z, const LossScaler *scaler, const char *dir, int global_step, int node_local) {
    zero_sync(z);  // the offloaded update may still be writing the moments
    if (z->own.m.place == OWNED_NONE || z->own.master.place == OWNED_NONE)
        t5_fail("checkpoint: no optimizer state to save (not a training run)");
    char *tagdir = tag_dir(dir, global_step);
    if (writes_index(z, node_local)) mkdir_p(tagdir);
    comm_barrier(z->comm);  // the tag directory exists for every rank

    Range wr = write_range(z);
    uint64_t n = wr.end - wr.begin;
    size_t from = wr.begin - z->own.range.begin;  // the write range inside the owned range
    StTensorDesc descs[N_STATES];
    for (int k = 0; k < N_STATES; k++)
        descs[k] = (StTensorDesc){.name = STATE_NAMES[k], .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}};
    char meta[160];
    snprintf(meta, sizeof meta, "{\"format\":\"%s\",\"begin\":\"%zu\",\"end\":\"%zu\"}", INDEX_FORMAT_NAME, wr.begin,
             wr.end);
    char *path = shard_path(tagdir, z->comm->rank);
    StWriter w;
    st_writer_open_checksummed(&w, path, descs, N_STATES, meta);
    const OwnedBuf *src[N_STATES] = {&z->own.master, &z->own.m, &z->own.v};
    size_t chunk = zero_ckpt_chunk_elems(&z->m->lay);
    float *buf = mallocCheck((n < chunk ? (n ? n : 1) : chunk) * sizeof(float));
    for (int k = 0; k < N_STATES; k++)
        for (size_t i = 0; i < n;) {
            size_t c = n - i < chunk ? n - i : chunk;
            zero_owned_f32_to_host(src[k], z->m->be, from + i, c, buf);
            st_writer_write_f32(&w, buf, c);
            i += c;
        }
    ShardRecord rec = {.begin = wr.begin, .end = wr.end, .crc = w.crc32c, .bytes = w.bytes};  // every byte is written
    st_writer_close(&w);
    freeCheck(buf);
    free(path);

    if (node_local) {  // every host's leader writes the same index
        ShardRecord *all = mallocCheck((size_t)z->comm->world * sizeof rec);
        comm_allgather_bytes_host(z->comm, &rec, sizeof rec, all);
        if (writes_index(z, 1)) write_index(z, scaler, tagdir, global_step, all);
        freeCheck(all);
    } else {
        char *all = NULL;
        size_t *counts = z->comm->rank == 0 ? mallocCheck((size_t)z->comm->world * sizeof(size_t)) : NULL;
        comm_gather_bytes_host(z->comm, &rec, sizeof rec, &all, counts);
        if (z->comm->rank == 0) write_index(z, scaler, tagdir, global_step, (const ShardRecord *)all);
        freeCheck(all);
        freeCheck(counts);
    }
    free(tagdir);
}

void zero_save_latest(const ZeroState *z, const char *dir, int global_step, int node_local) {
    comm_barrier(z->comm);  // every rank's shard is complete
    if (!writes_index(z, node_local)) return;
    char *path = path_join(dir, ZERO_CKPT_LATEST);
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    if (fprintf(f, ZERO_CKPT_TAG_PREFIX "%d", global_step) < 0)
        t5_die(__FILE__, __LINE__, "writing the checkpoint's latest file failed", "free disk space, then run again");
    atomic_commit(&af);
    free(path);
}

// ---- reading the index -------------------------------------------------------------------
// A finite number within [lo, hi] (whole when `whole`): checkpoint files are user input too.
static double json_number(const cJSON *o, const char *key, const char *path, double lo, double hi, int whole) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        t5_fail("%s: \"%s\" is missing or not a number; HINT: a checkpoint written by train_t5, or resume from an "
                "earlier one", path, key);
    double x = v->valuedouble;
    if (!(isfinite(x) && x >= lo && x <= hi) || (whole && x != floor(x)))
        t5_fail("%s: \"%s\" is %g, expected a %s in [%g, %g]; HINT: a checkpoint written by train_t5, or resume from "
                "an earlier one", path, key, x, whole ? "whole number" : "finite number", lo, hi);
    return x;
}

typedef struct {
    char file[64];
    uint64_t begin, end, bytes;
    uint32_t crc;
} ShardInfo;

typedef struct {
    char *tagdir, *index_path;
    double parameters;
    int global_step, world, stage, optimizer_step;
    cJSON *root;  // the index (loss_scaler is read from it)
    ShardInfo *shards;
    int n_shards;
} ShardIndex;

static void index_free(ShardIndex *x) {
    free(x->tagdir);
    free(x->index_path);
    cJSON_Delete(x->root);
    freeCheck(x->shards);
    memset(x, 0, sizeof *x);
}

// The tag `latest` names (one line "global_stepN", nothing else): its directory.
static char *read_latest(const char *dir) {
    char *path = path_join(dir, ZERO_CKPT_LATEST);
    char *text = read_text_file(path, NULL);
    if (!text)
        t5_fail("%s: missing (%s): the checkpoint was not finished (the marker is written last); HINT: resume from an "
                "earlier checkpoint-N", path, strerror(errno));
    size_t len = strlen(text);
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
    int step = -1, used = 0;
    if (sscanf(text, ZERO_CKPT_TAG_PREFIX "%d%n", &step, &used) != 1 || (size_t)used != len || step < 0)
        t5_fail("%s: holds \"%.40s\", expected \"%sN\"; %s", path, text, ZERO_CKPT_TAG_PREFIX, HINT_EARLIER);
    char *tagdir = path_join(dir, text);
    if (!path_is_dir(tagdir)) t5_fail("%s: names %s, which is not a directory; %s", path, tagdir, HINT_EARLIER);
    free(text);
    free(path);
    return tagdir;
}

// latest, the index, and the shards' ranges tiling [0, parameters) in order.
static void index_read(ShardIndex *x, const char *dir) {
    memset(x, 0, sizeof *x);
    x->tagdir = read_latest(dir);
    x->index_path = path_join(x->tagdir, ZERO_CKPT_INDEX);
    const char *p = x->index_path;
    size_t len = 0;
    char *text = read_text_file(p, &len);
    if (!text) t5_fail("%s: cannot read it (%s); %s", p, strerror(errno), HINT_EARLIER);
    x->root = json_read_parse(text, len, p, JSON_DUP_REFUSE, NULL);  // train_t5's own: a duplicate is an edit
    free(text);
    if (!cJSON_IsObject(x->root)) t5_fail("%s: malformed JSON; %s", p, HINT_EARLIER);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(x->root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, INDEX_FORMAT_NAME) != 0)
        t5_fail("%s: \"format\" is not \"%s\"; HINT: a checkpoint written by train_t5", p, INDEX_FORMAT_NAME);
    if (json_number(x->root, "version", p, 0, INT_MAX, 1) != INDEX_VERSION)
        t5_fail("%s: version %g, this build reads version %d; HINT: use the train_t5 that wrote it", p,
                json_number(x->root, "version", p, 0, INT_MAX, 1), INDEX_VERSION);
    x->global_step = (int)json_number(x->root, "global_step", p, 0, INT_MAX, 1);
    x->optimizer_step = (int)json_number(x->root, "optimizer_step", p, 0, INT_MAX, 1);
    x->parameters = json_number(x->root, "parameters", p, 1, JSON_WHOLE_MAX, 1);
    x->world = (int)json_number(x->root, "world_size", p, 1, INT_MAX, 1);
    x->stage = (int)json_number(x->root, "zero_stage", p, 0, 3, 1);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(x->root, "shards");
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != x->world)
        t5_fail("%s: \"shards\" must list world_size (%d) shards; %s", p, x->world, HINT_EARLIER);
    x->n_shards = x->world;
    x->shards = callocCheck((size_t)x->world, sizeof *x->shards);
    uint64_t expect = 0;
    for (int r = 0; r < x->world; r++) {
        const cJSON *e = cJSON_GetArrayItem(arr, r);
        ShardInfo *s = &x->shards[r];
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
        char want[64];
        snprintf(want, sizeof want, SHARD_FORMAT, r);
        if (!cJSON_IsString(file) || strcmp(file->valuestring, want) != 0)
            t5_fail("%s: shard %d's \"file\" is not \"%s\"; %s", p, r, want, HINT_EARLIER);
        snprintf(s->file, sizeof s->file, "%s", want);
        s->begin = (uint64_t)json_number(e, "begin", p, 0, x->parameters, 1);
        s->end = (uint64_t)json_number(e, "end", p, 0, x->parameters, 1);
        s->bytes = (uint64_t)json_number(e, "bytes", p, 0, JSON_WHOLE_MAX, 1);
        s->crc = (uint32_t)json_number(e, "crc32c", p, 0, CRC_MAX, 1);
        if (s->begin != expect || s->end < s->begin)
            t5_fail("%s: shard %d covers [%llu, %llu), expected to start at %llu: the shards must tile the parameters "
                    "in order; %s", p, r, (unsigned long long)s->begin, (unsigned long long)s->end,
                    (unsigned long long)expect, HINT_EARLIER);
        expect = s->end;
    }
    if ((double)expect != x->parameters)
        t5_fail("%s: the shards cover %llu of %.0f parameters; %s", p, (unsigned long long)expect, x->parameters,
                HINT_EARLIER);
}

// The size check every rank can make without reading data (zero_check_checkpoint).
static void shard_check_size(const ShardIndex *x, int r) {
    char *path = path_join(x->tagdir, x->shards[r].file);
    struct stat sb;
    if (stat(path, &sb) != 0)
        t5_fail("%s: missing (%s), listed in %s; %s", path, strerror(errno), x->index_path, HINT_EARLIER);
    if (!S_ISREG(sb.st_mode)) t5_fail("%s: is %s, not a regular file; %s", path, file_kind_name(sb.st_mode), HINT_EARLIER);
    if ((uint64_t)sb.st_size != x->shards[r].bytes)
        t5_fail("%s: %llu bytes, the index (%s) records %llu: %s; %s", path, (unsigned long long)sb.st_size,
                x->index_path, (unsigned long long)x->shards[r].bytes,
                (uint64_t)sb.st_size < x->shards[r].bytes ? "truncated" : "the file and the index disagree",
                HINT_EARLIER);
    free(path);
}

void zero_check_checkpoint(const char *dir, int node_local) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n >= 4 && strncmp(dir + n - 4, ".tmp", 4) == 0)
        t5_fail("%s: a checkpoint still being written (or left by a run that stopped while saving); HINT: resume from "
                "a checkpoint-N directory without .tmp", dir);
    char *latest = path_join(dir, ZERO_CKPT_LATEST), *old = path_join(dir, OLD_OPT_FILE);
    int has_latest = path_exists(latest), has_old = path_is_file(old);
    free(latest);
    free(old);
    if (!has_latest && has_old) {  // the whole layout of earlier train_t5 versions
        char *st = path_join(dir, OLD_STATE_FILE);
        file_refuse_non_regular(st, NULL);  // a FIFO is said as such, not as missing
        if (!path_is_file(st))
            t5_fail("%s: missing (the checkpoint holds %s); %s", st, OLD_OPT_FILE, HINT_EARLIER);
        free(st);
        return;
    }
    ShardIndex x;
    index_read(&x, dir);  // a missing latest is refused here, naming it
    for (int r = 0; r < x.n_shards; r++) {
        char *path = path_join(x.tagdir, x.shards[r].file);
        int present = path_exists(path);
        free(path);
        if (present || !node_local) shard_check_size(&x, r);
    }
    index_free(&x);
}

// ---- load ------------------------------------------------------------------------------
// One refusal, made by whichever rank found it; every rank learns that there was one
// (an all-reduce) before any of them sets any state.
typedef struct {
    char msg[1024];
    int bad;
} Verdict;

static void verdict_set(Verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict_set(Verdict *v, const char *fmt, ...) {
    if (v->bad) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->bad = 1;
}

static void verdict_agree(const Comm *c, const Verdict *v) {
    double bad = v->bad;
    comm_allreduce_sum_f64(c, &bad, 1);
    if (bad == 0) return;
    if (v->bad) t5_fail("%s", v->msg);
    exit(1);  // the rank that found it says why
}

// Shard r: its size, CRC-32C and header against the index (the data is read once, here).
static void shard_verify(const ShardIndex *x, int r, size_t chunk, Verdict *v) {
    const ShardInfo *s = &x->shards[r];
    char *path = path_join(x->tagdir, s->file);
    uint32_t crc;
    uint64_t bytes;
    if (!file_crc32c(path, chunk * sizeof(float), &crc, &bytes))
        verdict_set(v, "%s: missing (%s), listed in %s; %s", path, strerror(errno), x->index_path, HINT_EARLIER);
    else if (bytes != s->bytes)
        verdict_set(v, "%s: %llu bytes, the index (%s) records %llu: %s; %s", path, (unsigned long long)bytes,
                    x->index_path, (unsigned long long)s->bytes, bytes < s->bytes ? "truncated" : "the file and the "
                    "index disagree", HINT_EARLIER);
    else if (crc != s->crc)
        verdict_set(v, "%s: CRC-32C 0x%08x, the index (%s) records 0x%08x: the file is damaged; %s", path, crc,
                    x->index_path, s->crc, HINT_EARLIER);
    free(path);
}

static void scaler_from_json(const cJSON *root, const char *path, LossScaler *scaler, int opt_step, int global_step,
                             int *opt_step_out) {
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "loss_scaler");
    if (!cJSON_IsObject(ls)) t5_fail("%s: \"loss_scaler\" is missing; HINT: a checkpoint written by train_t5", path);
    int dynamic = (int)json_number(ls, "dynamic", path, 0, 1, 1);
    double cur_scale = json_number(ls, "cur_scale", path, 0, 1e300, 0);
    long cur_iter = (long)json_number(ls, "cur_iter", path, 0, JSON_WHOLE_MAX, 1);
    long last_overflow = (long)json_number(ls, "last_overflow_iter", path, -1, JSON_WHOLE_MAX, 1);
    int hysteresis = (int)json_number(ls, "cur_hysteresis", path, 0, INT_MAX, 1);
    long skipped = (long)json_number(ls, "skipped_steps", path, 0, JSON_WHOLE_MAX, 1);
    if (!(cur_scale > 0)) t5_fail("%s: \"loss_scaler.cur_scale\" is 0, expected a scale > 0", path);
    // every step the checkpoint took either updated (optimizer_step) or was skipped on an
    // overflow: a step count that disagrees would resume the lr schedule at the wrong place
    if ((long)opt_step + skipped != (long)global_step)
        t5_fail("%s: optimizer_step %d + skipped_steps %ld != the checkpoint's global_step %d (trainer_state.json): "
                "the optimizer state is not this checkpoint's; HINT: resume from a checkpoint-N directory as train_t5 "
                "wrote it", path, opt_step, skipped, global_step);
    *opt_step_out = opt_step;
    scaler->skipped_steps = skipped;  // the run's count, whatever the scaler: the sum above holds on
    if (dynamic == scaler->dynamic) {  // the same scaler kind: its state goes on
        scaler->cur_scale = cur_scale;
        scaler->cur_iter = cur_iter;
        scaler->last_overflow_iter = last_overflow;
        scaler->cur_hysteresis = hysteresis;
    }
}

// The parameter tensor that flat element i belongs to, for messages.
static const char *tensor_of(const ParamLayout *lay, size_t i) {
    for (int k = 0; k < lay->count; k++)
        if (i >= lay->specs[k].offset && i < lay->specs[k].offset + lay->specs[k].numel) return lay->specs[k].name;
    return "?";
}

// Elements [lo, hi) of the flat space from tensor t of an open file whose element 0 is flat
// element `base`, into the owned state dst, a chunk at a time, each checked: a nan/inf
// weight or moment (or a negative second moment) would turn every weight it touches into
// nan at the first update.
static void place_range(const ZeroState *z, const StFile *f, const StTensor *t, size_t base, size_t lo, size_t hi,
                        const OwnedBuf *dst, int second_moment, float *buf, size_t chunk) {
    for (size_t i = lo; i < hi;) {
        size_t c = hi - i < chunk ? hi - i : chunk;
        st_read_f32_range(f, t, i - base, c, buf);
        for (size_t j = 0; j < c; j++)
            if (!isfinite(buf[j]) || (second_moment && buf[j] < 0))
                t5_fail("%s: tensor \"%s\" holds %g at flat element %zu (parameter \"%s\"): the checkpoint is "
                        "damaged; %s", f->path, t->name, (double)buf[j], i + j, tensor_of(&z->m->lay, i + j),
                        HINT_EARLIER);
        zero_owned_f32_from_host(dst, z->m->be, i - z->own.range.begin, c, buf);
        i += c;
    }
}

static void load_shards(ZeroState *z, LossScaler *scaler, const char *dir, int global_step) {
    ShardIndex x;
    index_read(&x, dir);
    const ParamLayout *lay = &z->m->lay;
    if (x.parameters != (double)lay->total)
        t5_fail("%s: written for %.0f parameters, this model has %zu; HINT: resume with the same model",
                x.index_path, x.parameters, lay->total);
    if (x.global_step != global_step)
        t5_fail("%s: global_step %d, trainer_state.json says %d: the files are of different saves; %s", x.index_path,
                x.global_step, global_step, HINT_EARLIER);
    // every shard's checksum, each file by one rank, before any state is set
    size_t chunk = zero_ckpt_chunk_elems(lay);
    Verdict v = {0};
    for (int r = z->comm->rank; r < x.n_shards; r += z->comm->world) shard_verify(&x, r, chunk, &v);
    verdict_agree(z->comm, &v);
    int opt_step;
    scaler_from_json(x.root, x.index_path, scaler, x.optimizer_step, global_step, &opt_step);
    z->opt.step = opt_step;

    // the pieces of the shards that overlap this rank's range
    const OwnedBuf *dst[N_STATES] = {&z->own.master, &z->own.m, &z->own.v};
    Range own = z->own.range;
    float *buf = mallocCheck(chunk * sizeof(float));
    for (int r = 0; r < x.n_shards; r++) {
        const ShardInfo *s = &x.shards[r];
        size_t lo = s->begin > own.begin ? s->begin : own.begin, hi = s->end < own.end ? s->end : own.end;
        if (lo >= hi) continue;
        char *path = path_join(x.tagdir, s->file);
        StFile f;
        st_open(&f, path);
        for (int k = 0; k < N_STATES; k++) {
            const StTensor *t = st_find(&f, STATE_NAMES[k]);
            if (!t || t->numel != s->end - s->begin)
                t5_fail("%s: tensor \"%s\" of %llu elements (the index's [%llu, %llu)) is missing; %s", path,
                        STATE_NAMES[k], (unsigned long long)(s->end - s->begin), (unsigned long long)s->begin,
                        (unsigned long long)s->end, HINT_EARLIER);
            place_range(z, &f, t, s->begin, lo, hi, dst[k], k == 2, buf, chunk);
        }
        st_close(&f);
        free(path);
    }
    freeCheck(buf);
    index_free(&x);
}

// The layout before the shards: zero_state.json and the moments whole in
// optimizer.safetensors, read by ranges (the master weights are the checkpoint's
// model.safetensors, which the model loader read).
static void load_whole(ZeroState *z, LossScaler *scaler, const char *dir, int global_step) {
    char *path = path_join(dir, OLD_STATE_FILE);
    size_t len = 0;
    char *text = read_text_file(path, &len);
    if (!text)
        t5_fail("%s: cannot read it; HINT: --resume_from_checkpoint takes a checkpoint-N directory written by "
                "train_t5", path);
    cJSON *st = json_read_parse(text, len, path, JSON_DUP_REFUSE, NULL);  // train_t5's own: a duplicate is an edit
    free(text);
    if (!st) t5_fail("%s: malformed JSON; %s", path, HINT_EARLIER);
    size_t total = z->m->lay.total;
    double params = json_number(st, "parameters", path, 0, JSON_WHOLE_MAX, 1);
    if (params != (double)total)
        t5_fail("%s: written for %.0f parameters, this model has %zu; HINT: resume with the same model", path, params,
                total);
    int opt_step = (int)json_number(st, "optimizer_step", path, 0, INT_MAX, 1);
    scaler_from_json(st, path, scaler, opt_step, global_step, &opt_step);
    z->opt.step = opt_step;
    cJSON_Delete(st);
    free(path);

    path = path_join(dir, OLD_OPT_FILE);
    StFile f;
    st_open(&f, path);
    const OwnedBuf *dst[2] = {&z->own.m, &z->own.v};
    size_t chunk = zero_ckpt_chunk_elems(&z->m->lay);
    float *buf = mallocCheck(chunk * sizeof(float));
    for (int k = 0; k < 2; k++) {
        const StTensor *t = st_find(&f, STATE_NAMES[k + 1]);
        if (!t || t->numel != total)
            t5_fail("%s: tensor \"%s\" of %zu elements is missing; HINT: a checkpoint of this model written by "
                    "train_t5", path, STATE_NAMES[k + 1], total);
        place_range(z, &f, t, 0, z->own.range.begin, z->own.range.end, dst[k], k == 1, buf, chunk);
    }
    freeCheck(buf);
    st_close(&f);
    free(path);
}

void zero_load_optimizer(ZeroState *z, LossScaler *scaler, const char *dir, int global_step) {
    zero_sync(z);
    if (z->own.m.place == OWNED_NONE) t5_fail("--resume_from_checkpoint: no optimizer to restore (pass --do_train)");
    char *latest = path_join(dir, ZERO_CKPT_LATEST), *old = path_join(dir, OLD_OPT_FILE);
    int shards = path_exists(latest) || !path_is_file(old);  // neither: load_shards names the missing latest
    free(latest);
    free(old);
    if (shards) load_shards(z, scaler, dir, global_step);
    else load_whole(z, scaler, dir, global_step);
}

// ---- node-local storage: completing each host's copy at resume -------------------------------
#define FETCH_CHUNK_BYTES ((size_t)4 << 20)  // a shard travels between hosts 4 MiB at a time

// The same verdict on every rank (each computed it from the same gathered table): rank 0 says
// it in one line, the others exit quietly.
static void agreed_failure(const Comm *c, const char *msg) {
    if (c->rank == 0) t5_fail("%s", msg);
    exit(1);
}

// Shard s streamed from rank `from` to the lowest rank of every host in `to` (to[h] = 1: host h
// lacks it), which writes it atomically and checks its size and CRC-32C against the index.
static void fetch_shard(const Comm *c, const ShardIndex *x, int s, int from, const unsigned char *to) {
    const ShardInfo *sh = &x->shards[s];
    char *path = path_join(x->tagdir, sh->file);
    const HostLayout *h = &c->hosts;
    const int receiver = to[h->host_of[c->rank]] && comm_is_host_leader(c);
    FILE *in = c->rank == from ? fopenCheck(path, "rb") : NULL;
    AtomicFile af;
    FILE *out = receiver ? atomic_open(&af, path) : NULL;
    unsigned char *buf = mallocCheck(FETCH_CHUNK_BYTES);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < sh->bytes;) {
        size_t k = sh->bytes - done < FETCH_CHUNK_BYTES ? (size_t)(sh->bytes - done) : FETCH_CHUNK_BYTES;
        if (in) freadCheck(buf, 1, k, in, path);
        comm_broadcast_bytes_host(c, from, buf, k);  // the one collective: rank `from`'s bytes to every rank
        if (out) {
            fwriteCheck(buf, 1, k, out, af.tmp_path);
            crc = crc32c_update(crc, buf, k);
        }
        done += k;
    }
    if (in) fcloseCheck(in, path);
    if (out) {
        if (crc != sh->crc)
            t5_fail("%s: the copy sent from rank %d has CRC-32C 0x%08x, the index (%s) records 0x%08x: the source "
                    "file on that host is damaged; %s", path, from, crc, x->index_path, sh->crc, HINT_EARLIER);
        atomic_commit(&af);
    }
    freeCheck(buf);
    free(path);
}

// The last two components of a tag directory ("checkpoint-10/global_step10"): each host has its
// own path to it, so messages name the checkpoint's part.
static const char *tag_shown(const char *tagdir) {
    const char *end = tagdir + strlen(tagdir), *p = end;
    for (int slashes = 0; p > tagdir; p--)
        if (p[-1] == '/' && p < end && ++slashes == 2) break;
    return p;
}

void zero_checkpoint_fetch_missing(const char *dir, const Comm *c) {
    ShardIndex x;
    index_read(&x, dir);  // this host's latest and index (each host's leader wrote its copy)
    const HostLayout *h = &c->hosts;
    if (h->n_hosts < 1)
        t5_die(__FILE__, __LINE__, "zero_checkpoint_fetch_missing before the hosts are known",
               "a bug in the caller: call it after comm_attach_device");
    char msg[1024];
    // the same checkpoint on every host: its step and the world it was saved from
    long long mine[2] = {x.global_step, x.world}, *all = mallocCheck((size_t)c->world * sizeof mine);
    comm_allgather_bytes_host(c, mine, sizeof mine, all);
    for (int r = 1; r < c->world; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
            char a[96], b[96];
            snprintf(msg, sizeof msg, "%s (node-local storage): %s has global_step%lld of a %lld-rank run, %s has "
                     "global_step%lld of a %lld-rank run: every host must resume the same checkpoint; HINT: pass "
                     "--resume_from_checkpoint OUTPUT_DIR/checkpoint-N with an N every host holds", dir,
                     comm_rank_words(c, 0, a, sizeof a), all[0], all[1], comm_rank_words(c, r, b, sizeof b),
                     all[2 * r], all[2 * r + 1]);
            agreed_failure(c, msg);
        }
    free(all);
    // which shards each rank's host holds at their recorded size
    const int n = x.n_shards;
    unsigned char *here = callocCheck((size_t)n, 1), *table = mallocCheck((size_t)c->world * (size_t)n);
    for (int s = 0; s < n; s++) {
        char *path = path_join(x.tagdir, x.shards[s].file);
        struct stat sb;
        here[s] = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == x.shards[s].bytes;
        free(path);
    }
    comm_allgather_bytes_host(c, here, (size_t)n, table);
    unsigned char *to = mallocCheck((size_t)h->n_hosts);
    for (int s = 0; s < n; s++) {
        int from = -1, lacking = 0;
        for (int r = 0; r < c->world && from < 0; r++)
            if (table[(size_t)r * n + s]) from = r;
        for (int k = 0; k < h->n_hosts; k++) lacking += (to[k] = !table[(size_t)h->first_rank[k] * n + s]);
        if (!lacking) continue;
        if (from < 0) {
            snprintf(msg, sizeof msg, "%s/%s: no host of this run has it (node-local storage keeps a shard on the "
                     "host whose rank wrote it; %d host%s looked); HINT: copy it from the host where the saving run's "
                     "rank %d ran into that directory on any host of this run, or resume from an earlier checkpoint-N",
                     x.tagdir, x.shards[s].file, h->n_hosts, h->n_hosts > 1 ? "s" : "", s);
            agreed_failure(c, msg);
        }
        if (c->rank == 0)
            for (int k = 0; k < h->n_hosts; k++)
                if (to[k])
                    printf("resume (node-local storage): host %s lacks %s/%s (%.1f MB); rank %d (host %s) sends it "
                           "over the communicator\n", h->names[k], tag_shown(x.tagdir), x.shards[s].file,
                           x.shards[s].bytes / 1e6, from, h->names[h->host_of[from]]);
        fflush(stdout);
        fetch_shard(c, &x, s, from, to);
    }
    comm_barrier(c);  // every host's copy is whole before any rank reads it
    free(to);
    free(here);
    free(table);
    index_free(&x);
}

// ---- reading without a run (export) ----------------------------------------------------
struct ZeroShardReader {
    ShardIndex x;
    StFile *files;  // (n_shards) opened on first use (f == NULL: not yet)
    int *master;    // (n_shards) the index of tensor "master" in each open file
};

int zero_checkpoint_has_shards(const char *dir) {
    char *latest = path_join(dir, ZERO_CKPT_LATEST);
    int has = path_exists(latest);
    free(latest);
    return has;
}

ZeroShardReader *zero_shards_open(const char *dir, size_t total, int verify) {
    if (!zero_checkpoint_has_shards(dir)) return NULL;
    ZeroShardReader *rd = callocCheck(1, sizeof *rd);
    index_read(&rd->x, dir);
    if (rd->x.parameters != (double)total)
        t5_fail("%s: written for %.0f parameters, the model of %s/config.json has %zu; HINT: the config.json beside "
                "the shards is the training run's", rd->x.index_path, rd->x.parameters, dir, total);
    Verdict v = {0};
    for (int r = 0; verify && r < rd->x.n_shards; r++) shard_verify(&rd->x, r, CHUNK_MAX_ELEMS, &v);
    if (v.bad) t5_fail("%s", v.msg);
    rd->files = callocCheck((size_t)rd->x.n_shards, sizeof *rd->files);
    rd->master = callocCheck((size_t)rd->x.n_shards, sizeof *rd->master);
    return rd;
}

void zero_shards_read_master(ZeroShardReader *rd, size_t lo, size_t hi, float *dst) {
    for (int r = 0; r < rd->x.n_shards; r++) {
        const ShardInfo *s = &rd->x.shards[r];
        size_t a = s->begin > lo ? s->begin : lo, b = s->end < hi ? s->end : hi;
        if (a >= b) continue;
        StFile *f = &rd->files[r];
        if (!f->f) {
            char *path = path_join(rd->x.tagdir, s->file);
            st_open(f, path);
            const StTensor *t = st_find(f, STATE_NAMES[0]);
            if (!t || t->numel != s->end - s->begin)
                t5_fail("%s: tensor \"%s\" of %llu elements is missing; %s", path, STATE_NAMES[0],
                        (unsigned long long)(s->end - s->begin), HINT_EARLIER);
            rd->master[r] = (int)(t - f->tensors);
            free(path);
        }
        st_read_f32_range(f, &f->tensors[rd->master[r]], a - s->begin, b - a, dst + (a - lo));
    }
}

void zero_shards_close(ZeroShardReader *rd) {
    if (!rd) return;
    for (int r = 0; r < rd->x.n_shards; r++)
        if (rd->files[r].f) st_close(&rd->files[r]);
    freeCheck(rd->files);
    freeCheck(rd->master);
    index_free(&rd->x);
    freeCheck(rd);
}
