// zero/checkpoint.c: save and load the optimizer state of a checkpoint (checkpoint.h).
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../model/safetensors.h"

#define OPT_FILE "optimizer.safetensors"
#define STATE_FILE "zero_state.json"

// The whole flat moment (m or v of the owned range, z->own) on rank 0 (NULL elsewhere):
// stage 0 owns everything already.
static float *moment_gather(const ZeroState *z, const OwnedBuf *mom) {
    size_t total = z->m->lay.total, n = z->own.range.end - z->own.range.begin;
    float *mine = mallocCheck((n ? n : 1) * sizeof(float));
    zero_owned_f32_to_host(mom, z->m->be, 0, n, mine);
    if (!z->own.range_is_partition) {
        if (z->comm->rank == 0) return mine;
        free(mine);
        return NULL;
    }
    float *all = z->comm->rank == 0 ? mallocCheck(total * sizeof(float)) : NULL;
    comm_gather_partitions_host_f32(z->comm, mine, all, total);
    free(mine);
    return all;
}

void zero_save_optimizer(ZeroState *z, const LossScaler *scaler, const char *dir) {
    zero_sync(z);  // the offloaded update may still be writing the moments
    if (z->own.m.place == OWNED_NONE) t5_fail("checkpoint: no optimizer state to save (not a training run)");
    float *m = moment_gather(z, &z->own.m), *v = moment_gather(z, &z->own.v);
    if (z->comm->rank != 0) return;
    int64_t total = (int64_t)z->m->lay.total;
    StTensorDesc descs[2] = {{.name = "exp_avg", .dtype = ST_F32, .ndim = 1, .shape = {total}},
                             {.name = "exp_avg_sq", .dtype = ST_F32, .ndim = 1, .shape = {total}}};
    char *path = path_join(dir, OPT_FILE);
    StWriter w;
    st_writer_open(&w, path, descs, 2, "{\"format\":\"train_t5\"}");
    st_writer_write_f32(&w, m, (uint64_t)total);
    st_writer_write_f32(&w, v, (uint64_t)total);
    st_writer_close(&w);
    free(path);
    free(m);
    free(v);

    cJSON *st = cJSON_CreateObject(), *ls = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "optimizer_step", z->opt.step);
    cJSON_AddNumberToObject(st, "parameters", (double)total);
    cJSON_AddNumberToObject(ls, "dynamic", scaler->dynamic);
    cJSON_AddNumberToObject(ls, "cur_scale", scaler->cur_scale);
    cJSON_AddNumberToObject(ls, "cur_iter", (double)scaler->cur_iter);
    cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)scaler->last_overflow_iter);
    cJSON_AddNumberToObject(ls, "cur_hysteresis", scaler->cur_hysteresis);
    cJSON_AddNumberToObject(ls, "skipped_steps", (double)scaler->skipped_steps);
    cJSON_AddItemToObject(st, "loss_scaler", ls);
    path = path_join(dir, STATE_FILE);
    json_save_atomic(st, path);
    free(path);
    cJSON_Delete(st);
}

// A finite number within [lo, hi] (whole when `whole`): checkpoint files are user input too.
static double json_number(const cJSON *o, const char *key, const char *path, double lo, double hi, int whole) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) t5_fail("%s: \"%s\" is missing or not a number; HINT: a checkpoint written by train_t5", path, key);
    double x = v->valuedouble;
    if (!(isfinite(x) && x >= lo && x <= hi) || (whole && x != floor(x)))
        t5_fail("%s: \"%s\" is %g, expected a %s in [%g, %g]; HINT: a checkpoint written by train_t5", path, key, x,
                whole ? "whole number" : "finite number", lo, hi);
    return x;
}

// The parameter tensor that flat element i belongs to, for messages.
static const char *tensor_of(const ParamLayout *lay, size_t i) {
    for (int k = 0; k < lay->count; k++)
        if (i >= lay->specs[k].offset && i < lay->specs[k].offset + lay->specs[k].numel) return lay->specs[k].name;
    return "?";
}

void zero_load_optimizer(ZeroState *z, LossScaler *scaler, const char *dir, int global_step) {
    zero_sync(z);
    if (z->own.m.place == OWNED_NONE) t5_fail("--resume_from_checkpoint: no optimizer to restore (pass --do_train)");
    char *path = path_join(dir, STATE_FILE);
    char *text = read_text_file(path, NULL);
    if (!text)
        t5_fail("%s: cannot read it; HINT: --resume_from_checkpoint takes a checkpoint-N directory written by "
                "train_t5 (it holds %s and %s)", path, STATE_FILE, OPT_FILE);
    cJSON *st = cJSON_Parse(text);
    free(text);
    if (!st) t5_fail("%s: malformed JSON", path);
    size_t total = z->m->lay.total;
    double params = json_number(st, "parameters", path, 0, 9007199254740992.0, 1);
    if (params != (double)total)
        t5_fail("%s: written for %.0f parameters, this model has %zu; HINT: resume with the same model", path, params,
                total);
    const double LMAX = 9007199254740992.0;  // whole numbers a double holds exactly
    int opt_step = (int)json_number(st, "optimizer_step", path, 0, INT_MAX, 1);
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(st, "loss_scaler");
    if (!cJSON_IsObject(ls)) t5_fail("%s: \"loss_scaler\" is missing", path);
    int dynamic = (int)json_number(ls, "dynamic", path, 0, 1, 1);
    double cur_scale = json_number(ls, "cur_scale", path, 0, 1e300, 0);
    long cur_iter = (long)json_number(ls, "cur_iter", path, 0, LMAX, 1);
    long last_overflow = (long)json_number(ls, "last_overflow_iter", path, -1, LMAX, 1);
    int hysteresis = (int)json_number(ls, "cur_hysteresis", path, 0, INT_MAX, 1);
    long skipped = (long)json_number(ls, "skipped_steps", path, 0, LMAX, 1);
    if (!(cur_scale > 0)) t5_fail("%s: \"loss_scaler.cur_scale\" is 0, expected a scale > 0", path);
    // every step the checkpoint took either updated (optimizer_step) or was skipped on an
    // overflow: a step count that disagrees would resume the lr schedule at the wrong place
    if ((long)opt_step + skipped != (long)global_step)
        t5_fail("%s: optimizer_step %d + skipped_steps %ld != the checkpoint's global_step %d (trainer_state.json): "
                "the optimizer state is not this checkpoint's; HINT: resume from a checkpoint-N directory as train_t5 "
                "wrote it", path, opt_step, skipped, global_step);
    z->opt.step = opt_step;
    scaler->skipped_steps = skipped;  // the run's count, whatever the scaler: the sum above holds on
    if (dynamic == scaler->dynamic) {  // the same scaler kind: its state goes on
        scaler->cur_scale = cur_scale;
        scaler->cur_iter = cur_iter;
        scaler->last_overflow_iter = last_overflow;
        scaler->cur_hysteresis = hysteresis;
    }
    cJSON_Delete(st);
    free(path);

    path = path_join(dir, OPT_FILE);
    StFile f;
    st_open(&f, path);
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    const OwnedBuf *dst[2] = {&z->own.m, &z->own.v};
    size_t n = z->own.range.end - z->own.range.begin;
    float *all = mallocCheck(total * sizeof(float));
    for (int k = 0; k < 2; k++) {
        const StTensor *t = st_find(&f, names[k]);
        if (!t || t->numel != total)
            t5_fail("%s: tensor \"%s\" of %zu elements is missing; HINT: a checkpoint of this model written by "
                    "train_t5", path, names[k], total);
        st_read_f32(&f, t, all);
        // a nan/inf moment (or a negative second moment) turns every weight it touches into nan
        // at the first update: refused here, naming where it is
        for (size_t i = 0; i < total; i++)
            if (!isfinite(all[i]) || (k == 1 && all[i] < 0))
                t5_fail("%s: tensor \"%s\" holds %g at element %zu (parameter \"%s\"): the optimizer state is "
                        "damaged; HINT: resume from an earlier checkpoint", path, names[k], (double)all[i], i,
                        tensor_of(&z->m->lay, i));
        zero_owned_f32_from_host(dst[k], z->m->be, 0, n, all + z->own.range.begin);
    }
    free(all);
    st_close(&f);
    free(path);
}
