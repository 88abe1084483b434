// zero/checkpoint_fp8.c: --fp8's scaling state (model/fp8.h) in a checkpoint's index
// (zero_index.json, "fp8"), so a resumed fp8 run rounds with the scales the straight run had:
// the step count, each entry's scale and its amax history. Every rank holds the same state
// (zero/step.c all-reduces the amaxes), so the index keeps one copy; the amaxes of a step in
// progress are zero at a save (the update has taken them). A checkpoint without the state, or
// with another slot layout or history length, is resumed with current scaling, said in a
// NOTICE.
#include "checkpoint_fp8.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../kernels/backend.h"
#include "../model/fp8.h"

void zero_ckpt_fp8_add(cJSON *index, const T5Model *m) {
    const T5Fp8 *f = m->fp8;
    if (!f) return;
    const size_t e = (size_t)f->n_slots * FP8_OPERANDS, h = e * (size_t)f->hist_len;
    float *scale = mallocCheck(e * sizeof(float) + 1), *hist = mallocCheck(h * sizeof(float) + 1);
    if (e) m->be->to_host(scale, f->scale, e * sizeof(float));
    if (h) m->be->to_host(hist, f->history, h * sizeof(float));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "updates", (double)f->updates);
    cJSON_AddNumberToObject(o, "slots", f->n_slots);
    cJSON_AddNumberToObject(o, "amax_history", f->hist_len);
    cJSON_AddNumberToObject(o, "margin", f->margin);
    cJSON_AddItemToObject(o, "scale", cJSON_CreateFloatArray(scale, (int)e));
    cJSON_AddItemToObject(o, "history", cJSON_CreateFloatArray(hist, (int)h));
    cJSON_AddItemToObject(index, "fp8", o);
    freeCheck(scale);
    freeCheck(hist);
}

// arr's n numbers into out; 0 when arr is not an array of n finite-or-not numbers.
static int floats_from(const cJSON *arr, float *out, size_t n) {
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) != n) return 0;
    size_t i = 0;
    for (const cJSON *x = arr->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x)) return 0;
        out[i] = (float)x->valuedouble;
    }
    return i == n;
}

void zero_ckpt_fp8_restore(const cJSON *index, const char *path, T5Model *m, int main_rank) {
    const cJSON *o = index ? cJSON_GetObjectItemCaseSensitive(index, "fp8") : NULL;
    T5Fp8 *f = m->fp8;
    if (!f) {
        if (o && main_rank)
            printf("NOTICE: %s holds --fp8's scaling state; this run is not --fp8 and does not use it\n", path);
        return;
    }
    if (!cJSON_IsObject(o)) {
        if (main_rank)
            printf("NOTICE: %s holds no --fp8 scaling state (saved without --fp8, or by an earlier train_t5): the first "
                   "step scales from its own tensors\n", path);
        return;
    }
    const cJSON *updates = cJSON_GetObjectItemCaseSensitive(o, "updates"), *slots = cJSON_GetObjectItemCaseSensitive(o, "slots"),
                *hist_len = cJSON_GetObjectItemCaseSensitive(o, "amax_history");
    if (!cJSON_IsNumber(updates) || !cJSON_IsNumber(slots) || !cJSON_IsNumber(hist_len) || updates->valuedouble < 0 ||
        updates->valuedouble != floor(updates->valuedouble))
        t5_fail("%s: \"fp8\" lacks whole numbers \"updates\", \"slots\", \"amax_history\"; HINT: a checkpoint written by "
                "train_t5, or resume from an earlier one", path);
    if ((int)slots->valuedouble != f->n_slots || (int)hist_len->valuedouble != f->hist_len) {
        if (main_rank)
            printf("NOTICE: %s: --fp8's state there has %d linear groups and %d steps of history, this run %d and %d "
                   "(another --fp8_bf16 or --fp8_amax_history): not used; the first step scales from its own tensors\n",
                   path, (int)slots->valuedouble, (int)hist_len->valuedouble, f->n_slots, f->hist_len);
        return;
    }
    const size_t e = (size_t)f->n_slots * FP8_OPERANDS, h = e * (size_t)f->hist_len;
    float *scale = mallocCheck(e * sizeof(float) + 1), *inv = mallocCheck(e * sizeof(float) + 1);
    float *hist = mallocCheck(h * sizeof(float) + 1), *zeros = callocCheck(e + 1, sizeof(float));
    if (!floats_from(cJSON_GetObjectItemCaseSensitive(o, "scale"), scale, e) ||
        !floats_from(cJSON_GetObjectItemCaseSensitive(o, "history"), hist, h))
        t5_fail("%s: \"fp8.scale\" / \"fp8.history\" are not arrays of %zu / %zu numbers; HINT: a checkpoint written by "
                "train_t5, or resume from an earlier one", path, e, h);
    for (size_t i = 0; i < e; i++) {
        if (!(scale[i] > 0.0f) || !isfinite(scale[i]))
            t5_fail("%s: \"fp8.scale\"[%zu] = %g is not a positive finite scale; HINT: resume from an earlier checkpoint",
                    path, i, scale[i]);
        inv[i] = 1.0f / scale[i];  // as fp8_scales_update makes it (correctly rounded)
    }
    if (e) {
        m->be->to_device(f->scale, scale, e * sizeof(float));
        m->be->to_device(f->inv, inv, e * sizeof(float));
        m->be->to_device(f->amax, zeros, e * sizeof(float));
        m->be->to_device(f->history, hist, h * sizeof(float));
    }
    f->updates = (long)updates->valuedouble;
    freeCheck(scale), freeCheck(inv), freeCheck(hist), freeCheck(zeros);
}
