// zero/checkpoint.c: save and load the ZeRO part of a checkpoint as per-rank shards, an
// index and a `latest` marker; read the older whole layout by ranges (checkpoint.h). The
// counters' bounds are in zero/checkpoint_counters.c, the completion of a host's copy of a
// node-local checkpoint in zero/checkpoint_fetch.c (both over zero/checkpoint_index.h).
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
#include <sys/random.h>
#include <sys/stat.h>

#include "../common/check.h"
#include "../common/crc32c.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../formats/safetensors.h"
#include "checkpoint_fp8.h"
#include "checkpoint_index.h"

#define OLD_OPT_FILE "optimizer.safetensors"  // the layout before the shards
#define OLD_STATE_FILE "zero_state.json"
#define SHARD_FORMAT "rank_%05d.safetensors"
#define INDEX_FORMAT_NAME "train_t5 zero shards"
#define INDEX_VERSION 2         // each shard's metadata: its rank, world size, step, save (shard_identity_check)
#define INDEX_VERSION_RANGES 1  // before: a shard's metadata held its range only (still read, with a NOTICE)
#define CHUNK_MAX_ELEMS ((size_t)1 << 18)    // 1 MiB of fp32 per read, write or checksum
#define JSON_WHOLE_MAX 9007199254740992.0     // whole numbers a double holds exactly
#define CRC_MAX 4294967295.0
#define N_STATES 3
#define HINT_IDENTITY "HINT: a checkpoint's files must all come from one save: put them back as train_t5 wrote them " \
                      "(each rank's shard under its own name), or resume from an earlier checkpoint-N"
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
// A save's identity, made by rank 0 and sent to every rank: written into the index and into
// every shard, so that a shard of another save (of this run or of another run with the same
// step, world size and model) never passes for one of this save's.
static void save_id_make(const Comm *c, char id[SAVE_ID_HEX + 1]) {
    unsigned char raw[SAVE_ID_HEX / 2] = {0};
    for (size_t got = 0; c->rank == 0 && got < sizeof raw;) {
        ssize_t k = getrandom(raw + got, sizeof raw - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) t5_die(__FILE__, __LINE__, "getrandom failed: no random save_id for the checkpoint", strerror(errno));
        got += (size_t)k;
    }
    comm_broadcast_bytes_host(c, 0, raw, sizeof raw);
    for (size_t i = 0; i < sizeof raw; i++) snprintf(id + 2 * i, 3, "%02x", raw[i]);
}

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
                        const ShardRecord *recs, const char *save_id) {
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "format", INDEX_FORMAT_NAME);
    cJSON_AddNumberToObject(st, "version", INDEX_VERSION);
    cJSON_AddStringToObject(st, "save_id", save_id);
    cJSON_AddNumberToObject(st, "global_step", global_step);
    cJSON_AddNumberToObject(st, "optimizer_step", z->opt.step);
    cJSON_AddNumberToObject(st, "parameters", (double)z->m->lay.total);
    cJSON_AddNumberToObject(st, "world_size", z->comm->world);
    cJSON_AddNumberToObject(st, "zero_stage", z->stage);
    cJSON_AddNumberToObject(st, "offload_optimizer", z->offload);
    json_add_scaler(st, scaler);
    zero_ckpt_fp8_add(st, z->m);
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
    char save_id[SAVE_ID_HEX + 1];
    save_id_make(z->comm, save_id);

    Range wr = write_range(z);
    uint64_t n = wr.end - wr.begin;
    size_t from = wr.begin - z->own.range.begin;  // the write range inside the owned range
    StTensorDesc descs[N_STATES];
    for (int k = 0; k < N_STATES; k++)
        descs[k] = (StTensorDesc){.name = STATE_NAMES[k], .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}};
    // the shard's identity, which every reader checks against the index (shard_identity_check)
    char meta[512];
    snprintf(meta, sizeof meta, "{\"format\":\"%s\",\"version\":\"%d\",\"rank\":\"%d\",\"world_size\":\"%d\","
             "\"global_step\":\"%d\",\"parameters\":\"%zu\",\"begin\":\"%zu\",\"end\":\"%zu\",\"save_id\":\"%s\"}",
             INDEX_FORMAT_NAME, INDEX_VERSION, z->comm->rank, z->comm->world, global_step, z->m->lay.total, wr.begin,
             wr.end, save_id);
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
        if (writes_index(z, 1)) write_index(z, scaler, tagdir, global_step, all, save_id);
        freeCheck(all);
    } else {
        char *all = NULL;
        size_t *counts = z->comm->rank == 0 ? mallocCheck((size_t)z->comm->world * sizeof(size_t)) : NULL;
        comm_gather_bytes_host(z->comm, &rec, sizeof rec, &all, counts);
        if (z->comm->rank == 0) write_index(z, scaler, tagdir, global_step, (const ShardRecord *)all, save_id);
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

void zero_ckpt_index_free(ShardIndex *x) {
    free(x->tagdir);
    free(x->index_path);
    cJSON_Delete(x->root);
    freeCheck(x->shards);
    memset(x, 0, sizeof *x);
}

// The tag `latest` names (one line "global_stepN", nothing else; N as train_t5 writes it: no
// sign, no leading zero, so that one step has one tag): its directory, and N in *step_out.
static char *read_latest(const char *dir, int *step_out) {
    char *path = path_join(dir, ZERO_CKPT_LATEST);
    size_t len = 0;
    char *text = read_text_file(path, &len);
    if (!text)
        t5_fail("%s: missing (%s): the checkpoint was not finished (the marker is written last); HINT: resume from an "
                "earlier checkpoint-N", path, strerror(errno));
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
    int step = -1, used = 0;
    char canon[64];
    if (sscanf(text, ZERO_CKPT_TAG_PREFIX "%d%n", &step, &used) != 1 || (size_t)used != len || step < 0 ||
        (snprintf(canon, sizeof canon, ZERO_CKPT_TAG_PREFIX "%d", step), strcmp(canon, text) != 0))
        t5_fail("%s: holds \"%.40s\", expected \"%sN\"; %s", path, text, ZERO_CKPT_TAG_PREFIX, HINT_EARLIER);
    *step_out = step;
    char *tagdir = path_join(dir, text);
    if (!path_is_dir(tagdir)) t5_fail("%s: names %s, which is not a directory; %s", path, tagdir, HINT_EARLIER);
    free(text);
    free(path);
    return tagdir;
}

// latest, the index, and the shards' ranges tiling [0, parameters) in order.
void zero_ckpt_index_read(ShardIndex *x, const char *dir) {
    memset(x, 0, sizeof *x);
    int tag_step;
    x->tagdir = read_latest(dir, &tag_step);
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
    x->version = (int)json_number(x->root, "version", p, 0, INT_MAX, 1);
    if (x->version != INDEX_VERSION && x->version != INDEX_VERSION_RANGES)
        t5_fail("%s: version %d, this build reads versions %d and %d; HINT: use the train_t5 that wrote it", p,
                x->version, INDEX_VERSION_RANGES, INDEX_VERSION);
    if (x->version >= INDEX_VERSION) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(x->root, "save_id");
        int ok = cJSON_IsString(id) && strlen(id->valuestring) == SAVE_ID_HEX;
        for (int i = 0; ok && i < SAVE_ID_HEX; i++) ok = strchr("0123456789abcdef", id->valuestring[i]) != NULL;
        if (!ok)
            t5_fail("%s: \"save_id\" is missing or not %d hex digits; %s", p, SAVE_ID_HEX, HINT_EARLIER);
        snprintf(x->save_id, sizeof x->save_id, "%s", id->valuestring);
    }
    x->global_step = (int)json_number(x->root, "global_step", p, 0, INT_MAX, 1);
    if (x->global_step != tag_step)
        t5_fail("%s: global_step %d, but it lies in %s%d, the tag that %s/%s names: the index of another checkpoint; "
                "%s", p, x->global_step, ZERO_CKPT_TAG_PREFIX, tag_step, dir, ZERO_CKPT_LATEST, HINT_IDENTITY);
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

// Shard r's record of itself (its safetensors __metadata__, written with it by
// zero_save_shards) against the index: a shard renamed, swapped or copied from another rank,
// one of another save of this run or of another run, and an index of another checkpoint are
// refused naming the file and the field. 0 when they agree; else 1 with msg (n bytes) saying
// which field disagrees. An index of version 1 (shards that carried their range only) has its
// range and format checked.
static int shard_identity_check(const ShardIndex *x, int r, const StFile *f, char *msg, size_t n) {
    const ShardInfo *s = &x->shards[r];
    char version[16], rank[16], world[16], step[16], params[32], begin[32], end[32];
    snprintf(version, sizeof version, "%d", x->version);
    snprintf(rank, sizeof rank, "%d", r);
    snprintf(world, sizeof world, "%d", x->world);
    snprintf(step, sizeof step, "%d", x->global_step);
    snprintf(params, sizeof params, "%.0f", x->parameters);
    snprintf(begin, sizeof begin, "%llu", (unsigned long long)s->begin);
    snprintf(end, sizeof end, "%llu", (unsigned long long)s->end);
    const struct {
        const char *key, *want, *means;
        int since;  // the index version that wrote it
    } fields[] = {
        {"format", INDEX_FORMAT_NAME, "not a train_t5 checkpoint shard", INDEX_VERSION_RANGES},
        {"version", version, "the shard and the index were written by different train_t5 versions",
         INDEX_VERSION_RANGES},
        {"rank", rank, "the file is another rank's shard (renamed, swapped or copied)", INDEX_VERSION},
        {"world_size", world, "a shard of a run with another number of ranks", INDEX_VERSION},
        {"global_step", step, "a shard of another save", INDEX_VERSION},
        {"parameters", params, "a shard of another model", INDEX_VERSION},
        {"begin", begin, "the shard holds another part of the parameters", INDEX_VERSION_RANGES},
        {"end", end, "the shard holds another part of the parameters", INDEX_VERSION_RANGES},
        {"save_id", x->save_id, "a shard of another save, of this run or of another one", INDEX_VERSION},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fields[i].since > x->version) continue;
        const char *got = st_metadata(f, fields[i].key);
        if (!got && !strcmp(fields[i].key, "version")) got = "1";  // version 1 shards carry none
        if (got && !strcmp(got, fields[i].want)) continue;
        if (got)
            snprintf(msg, n, "%s: __metadata__ \"%s\" is \"%.40s\", the index (%s) records \"%s\" for it: %s; %s",
                     f->path, fields[i].key, got, x->index_path, fields[i].want, fields[i].means, HINT_IDENTITY);
        else
            snprintf(msg, n, "%s: __metadata__ has no \"%s\", the index (%s) records \"%s\" for it: %s; %s", f->path,
                     fields[i].key, x->index_path, fields[i].want, fields[i].means, HINT_IDENTITY);
        return 1;
    }
    return 0;
}

static void shard_identity_require(const ShardIndex *x, int r, const StFile *f) {
    char msg[1024];
    if (shard_identity_check(x, r, f, msg, sizeof msg)) t5_fail("%s", msg);
}

// Opens shard r only to check its identity (zero_check_checkpoint, a shard sent from another host).
void zero_ckpt_shard_identity_open(const ShardIndex *x, int r) {
    char *path = path_join(x->tagdir, x->shards[r].file);
    StFile f;
    st_open(&f, path);
    shard_identity_require(x, r, &f);
    st_close(&f);
    free(path);
}

// The index's step against the checkpoint's (trainer_state.json, state_path).
static void index_check_step(const ShardIndex *x, int global_step, const char *state_path) {
    if (x->global_step != global_step)
        t5_fail("%s: global_step %d, %s says %d: the files are of different saves; %s", x->index_path, x->global_step,
                state_path, global_step, HINT_IDENTITY);
}

// dir/trainer_state.json's global_step against the index, when dir has one (a final --output_dir
// or a copy made by hand may not: trainer_check_resume_dir requires it for a resume).
static void index_check_state(const ShardIndex *x, const char *dir) {
    char *path = path_join(dir, "trainer_state.json");
    if (path_exists(path)) {
        char *text = read_text_file(path, NULL);
        if (!text) t5_fail("%s: cannot read it (%s); %s", path, strerror(errno), HINT_EARLIER);
        cJSON *st = cJSON_Parse(text);
        free(text);
        if (!cJSON_IsObject(st)) t5_fail("%s: malformed JSON; %s", path, HINT_EARLIER);
        index_check_step(x, (int)json_number(st, "global_step", path, 0, INT_MAX, 1), path);
        cJSON_Delete(st);
    }
    free(path);
}

// An index of version 1 loads (its shards' ranges are checked), said once.
static void index_notice_version(const ShardIndex *x) {
    if (x->version != INDEX_VERSION_RANGES) return;
    printf("NOTICE: %s: version %d, written before each shard carried its rank, step and save: each shard's range is "
           "checked against the index, not where it comes from (a checkpoint saved by this train_t5 carries all of "
           "it)\n", x->index_path, x->version);
    fflush(stdout);
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

// Every shard's size and identity (its header only; node_local: those this host holds): each
// rank reads every header, a few hundred bytes each, so that no rank starts on a checkpoint
// another would refuse, and a shard of another save is named as one before any checksum.
static void index_check_shards(const ShardIndex *x, int node_local) {
    for (int r = 0; r < x->n_shards; r++) {
        char *path = path_join(x->tagdir, x->shards[r].file);
        int present = path_exists(path);
        free(path);
        if (!present && node_local) continue;
        shard_check_size(x, r);
        zero_ckpt_shard_identity_open(x, r);
    }
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
    zero_ckpt_index_read(&x, dir);  // a missing latest is refused here, naming it
    index_check_state(&x, dir);
    index_check_shards(&x, node_local);
    zero_ckpt_index_free(&x);
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
    comm_agree_or_fail(c, v->bad ? v->msg : NULL);  // the lowest rank that found it says why; all stop
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
    else {  // the bytes are the ones the index recorded: now whether they are the shard it lists
        StFile f;
        st_open(&f, path);
        char msg[1024];
        if (shard_identity_check(x, r, &f, msg, sizeof msg)) verdict_set(v, "%s", msg);
        st_close(&f);
    }
    free(path);
}

static void scaler_from_json(const cJSON *root, const char *path, LossScaler *scaler, int opt_step, int global_step,
                             int *opt_step_out) {
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "loss_scaler");
    if (!cJSON_IsObject(ls)) t5_fail("%s: \"loss_scaler\" is missing; HINT: a checkpoint written by train_t5", path);
    double v[ZC_COUNT] = {[ZC_GLOBAL_STEP] = global_step, [ZC_OPTIMIZER_STEP] = opt_step};
    for (int k = ZC_SKIPPED_STEPS; k < ZC_COUNT; k++) {  // the loss_scaler object's
        const char *key = ZERO_COUNTER_NAMES[k] + strlen("loss_scaler.");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(ls, key);
        if (!cJSON_IsNumber(x))
            t5_fail("%s: \"%s\" is missing or not a number; HINT: a checkpoint written by train_t5, or resume from an "
                    "earlier one", path, ZERO_COUNTER_NAMES[k]);
        v[k] = x->valuedouble;
    }
    int bad;
    char why[256];
    if (!zero_counters_ok(v, &bad, why, sizeof why)) {
        if (bad == ZC_STEP_SUM)
            t5_fail("%s: %s (trainer_state.json): the optimizer state is not this checkpoint's; HINT: resume from a "
                    "checkpoint-N directory as train_t5 wrote it", path, why);
        t5_fail("%s: \"%s\" %s; HINT: a checkpoint written by train_t5, or resume from an earlier one", path,
                ZERO_COUNTER_NAMES[bad], why);
    }
    *opt_step_out = opt_step;
    scaler->skipped_steps = (long)v[ZC_SKIPPED_STEPS];  // the run's count, whatever the scaler: the sum holds on
    if ((int)v[ZC_DYNAMIC] == scaler->dynamic) {  // the same scaler kind: its state goes on
        scaler->cur_scale = v[ZC_CUR_SCALE];
        scaler->cur_iter = (long)v[ZC_CUR_ITER];
        scaler->last_overflow_iter = (long)v[ZC_LAST_OVERFLOW_ITER];
        scaler->cur_hysteresis = (int)v[ZC_CUR_HYSTERESIS];
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
    zero_ckpt_index_read(&x, dir);
    const ParamLayout *lay = &z->m->lay;
    if (x.parameters != (double)lay->total)
        t5_fail("%s: written for %.0f parameters, this model has %zu; HINT: resume with the same model",
                x.index_path, x.parameters, lay->total);
    index_check_step(&x, global_step, "trainer_state.json");
    if (z->comm->rank == 0) index_notice_version(&x);
    // every shard's checksum, each file by one rank, before any state is set
    size_t chunk = zero_ckpt_chunk_elems(lay);
    Verdict v = {0};
    for (int r = z->comm->rank; r < x.n_shards; r += z->comm->world) shard_verify(&x, r, chunk, &v);
    verdict_agree(z->comm, &v);
    int opt_step;
    scaler_from_json(x.root, x.index_path, scaler, x.optimizer_step, global_step, &opt_step);
    z->opt.step = opt_step;
    zero_ckpt_fp8_restore(x.root, x.index_path, z->m, z->comm->rank == 0);

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
        shard_identity_require(&x, r, &f);  // verified by one rank above; this rank reads it, so checks what it opened
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
    zero_ckpt_index_free(&x);
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
    zero_ckpt_fp8_restore(NULL, path, z->m, z->comm->rank == 0);
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
    zero_ckpt_index_read(&rd->x, dir);
    if (rd->x.parameters != (double)total)
        t5_fail("%s: written for %.0f parameters, the model of %s/config.json has %zu; HINT: the config.json beside "
                "the shards is the training run's", rd->x.index_path, rd->x.parameters, dir, total);
    index_check_state(&rd->x, dir);
    if (verify) {  // export (a resume checked them in zero_check_checkpoint; zero_load_optimizer says the NOTICE)
        index_check_shards(&rd->x, 0);
        index_notice_version(&rd->x);
    }
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
            shard_identity_require(&rd->x, r, f);
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
    zero_ckpt_index_free(&rd->x);
    freeCheck(rd);
}
