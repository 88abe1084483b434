// tests/test_data_parallel.c: CPU ranks under mpirun (ZeRO stage 0 = data parallel and
// stage 1 = partitioned optimizer state, zero/step.c + zero/comm.c + zero/partition.c). The same global batch (12 examples per step as 1 x 6 x 2,
// 2 x 3 x 2 and 3 x 2 x 2 ranks x micro-batch x accumulation) must give the same per-step
// loss and grad_norm (1e-5 relative) and the same final weights (1e-5) whatever the world
// size: the loss is normalized by the global label-token count and gradients are summed
// over ranks. Runs ./train_t5 through mpirun; run from the repository root.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../model/safetensors.h"
#include "test.h"

static cJSON *load_json(const char *path) {
    char *text = read_text_file(path, NULL);
    if (!text) t5_fail("%s: cannot open", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) t5_fail("%s: malformed JSON", path);
    return j;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    char tmp[] = "/tmp/t5_test_dp.XXXXXX";
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    // runs: 1 rank; 2 and 3 ranks at stage 0; 2 and 3 ranks at stage 1 (--deepspeed)
    const int worlds[5] = {1, 2, 3, 2, 3}, stages[5] = {0, 0, 0, 1, 1};
    char cmd[2048], path[600], what[256];
    snprintf(path, sizeof path, "%s/stage1.json", tmp);
    FILE *f = fopen(path, "w");
    if (!f) t5_fail("cannot write %s", path);
    fprintf(f, "{\"zero_optimization\": {\"stage\": 1}, \"gradient_clipping\": \"auto\"}\n");
    fclose(f);
    for (int w = 0; w < 5; w++) {
        int np = worlds[w];
        char ds[700] = "";
        if (stages[w]) snprintf(ds, sizeof ds, " --deepspeed %s/stage1.json", tmp);
        snprintf(cmd, sizeof cmd,
                 "%s ./train_t5 --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
                 "--data_dir tests/fixtures/trainer_data --task translation_en_to_ro --max_source_length 24 "
                 "--max_target_length 20 --per_device_train_batch_size %d --gradient_accumulation_steps 2 --max_steps 5 "
                 "--learning_rate 3e-3 --weight_decay 0.01 --max_grad_norm 0.5 --warmup_steps 2 --label_smoothing 0.1 "
                 "--logging_steps 1 --sampler sequential --dropout_rate 0 --do_train --output_dir %s/run%d "
                 "--cache_dir %s/cache%s > %s/run%d.log 2>&1",
                 np == 1 ? "" : (np == 2 ? "mpirun --allow-run-as-root --oversubscribe -np 2"
                                         : "mpirun --allow-run-as-root --oversubscribe -np 3"),
                 12 / np, tmp, w, tmp, ds, tmp, w);
        snprintf(what, sizeof what, "%d rank%s, stage %d: ./train_t5 exits 0", np, np > 1 ? "s (mpirun)" : "", stages[w]);
        if (!test_check(system(cmd) == 0, what)) {
            snprintf(cmd, sizeof cmd, "tail -5 %s/run%d.log", tmp, w);
            if (system(cmd) != 0) printf("(no log)\n");
            return test_summary();
        }
    }
    cJSON *ref = NULL;
    StFile ref_st;
    for (int w = 0; w < 5; w++) {
        snprintf(path, sizeof path, "%s/run%d/trainer_state.json", tmp, w);
        cJSON *st = load_json(path);
        snprintf(path, sizeof path, "%s/run%d/model.safetensors", tmp, w);
        StFile model;
        st_open(&model, path);
        if (w == 0) {
            ref = st;
            ref_st = model;
            continue;
        }
        const cJSON *h = cJSON_GetObjectItem(st, "log_history"), *h0 = cJSON_GetObjectItem(ref, "log_history");
        double worst_loss = 0, worst_norm = 0;
        for (int s = 0; s < 5; s++) {
            const cJSON *a = cJSON_GetArrayItem(h, s), *b = cJSON_GetArrayItem(h0, s);
            worst_loss = fmax(worst_loss, fabs(num(a, "loss") - num(b, "loss")) / fabs(num(b, "loss")));
            worst_norm = fmax(worst_norm, fabs(num(a, "grad_norm") - num(b, "grad_norm")) / fabs(num(b, "grad_norm")));
        }
        snprintf(what, sizeof what, "%d ranks, stage %d: 5 steps' loss and grad_norm equal 1 rank's (worst rel %.2e, %.2e)",
                 worlds[w], stages[w], worst_loss, worst_norm);
        test_check(worst_loss <= 1e-5 && worst_norm <= 1e-5, what);
        double worst_w = 0;
        int missing = 0;
        for (int t = 0; t < ref_st.count; t++) {
            const StTensor *a = &ref_st.tensors[t], *b = st_find(&model, a->name);
            if (!b || b->numel != a->numel) {
                missing++;
                continue;
            }
            float *x = mallocCheck(a->numel * sizeof(float)), *y = mallocCheck(a->numel * sizeof(float));
            st_read_f32(&ref_st, a, x);
            st_read_f32(&model, b, y);
            double md = 0, mr = 0;
            for (uint64_t k = 0; k < a->numel; k++) {
                md = fmax(md, fabs((double)x[k] - y[k]));
                mr = fmax(mr, fabs((double)x[k]));
            }
            worst_w = fmax(worst_w, md / fmax(mr, 1e-30));
            free(x);
            free(y);
        }
        snprintf(what, sizeof what, "%d ranks, stage %d: final weights equal 1 rank's (worst tensor rel %.2e)", worlds[w],
                 stages[w], worst_w);
        test_check(!missing && worst_w <= 1e-5, what);
        if (stages[w] == 1) {
            // the allocator's count on rank 0 = 2 moments x 4 bytes x ceil(params / ranks)
            size_t n = 0;
            for (int t = 0; t < ref_st.count; t++) n += (size_t)ref_st.tensors[t].numel;
            size_t part = (n + (size_t)worlds[w] - 1) / (size_t)worlds[w];
            char grep[800];
            snprintf(grep, sizeof grep, "grep -q 'optimizer state allocated on rank 0: %zu bytes' %s/run%d.log", part * 8,
                     tmp, w);
            snprintf(what, sizeof what, "%d ranks, stage 1: optimizer state allocated per rank = 8 x ceil(%zu / %d) = %zu B",
                     worlds[w], n, worlds[w], part * 8);
            test_check(system(grep) == 0, what);
        }
        st_close(&model);
        cJSON_Delete(st);
    }
    st_close(&ref_st);
    cJSON_Delete(ref);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
