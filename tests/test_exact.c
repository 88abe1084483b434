// tests/test_exact.c: `train_t5 --do_train` against HF Trainer where torch's fp32 rounding
// shows: tiny T5s with the full 32128-token vocabulary, on the first 16 en-ro
// lines of wmt_en_ro val, 4 steps (tools/make_exact_fixture.py made tests/fixtures/exact/).
// Per case: the initial weights are made again with `./train_t5 convert --init random`
// (checked against the fixture's checksum), ./train_t5 trains with the fixture's flags and
// T5_DUMP_GRAD_NORMS, and we compare
//   loss, every step                      1e-6 relative
//   grad_norm, steps 1-2                  1e-6 (later steps 1e-3: AdamW turns ulp-level
//                                         differences of near-zero gradients into lr-sized
//                                         ones; transformers' own reruns on other thread
//                                         counts drift ~3e-4 from each other by step 4)
//   every tensor's gradient norm          2e-6 at step 1, 1e-5 at step 2 (before clipping)
//   every tensor's norm after the run     1e-5
//   learning_rate, epoch                  1e-9, 1e-12
// Cases: relu / gated FFN, scaled / unscaled tied head, more decoder than encoder layers and
// the reverse, inner dim != d_model, label smoothing on / off (see the tool's table).
// Run from the repository root after `make` (uses ./train_t5).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../formats/safetensors.h"
#include "test_files.h"
#include "test.h"

static const char *CASES[] = {"relu_3dec", "relu_3dec_ls", "relu_3enc", "gated_noscale_ls", "gated_noscale",
                              "gated_scaled_3dec_ls", "inner32_d24_ls", "inner32_d24_ls_ga2", "inner32_d24_ls_b8",
                              "inner40_d24_relu_ls", "inner16_d32_ls", "inner32_d24_3dec_ls"};

static double rel(double got, double want) { return fabs(got - want) / fmax(fabs(want), 1e-30); }

static int rel_ok(const char *what, double got, double want, double tol) {
    char buf[300];
    snprintf(buf, sizeof buf, "%-44s got %.9g want %.9g rel %.2e (tol %.0e)", what, got, want, rel(got, want), tol);
    return test_check(isfinite(got) && rel(got, want) <= tol, buf);
}

// The fixture's checksum: the file's bytes as little-endian uint32 words (zero-padded), summed mod 2^64.
static uint64_t checksum(const char *path) {
    FILE *f = fopenCheck(path, "rb");
    uint64_t s = 0;
    unsigned char b[4];
    size_t n;
    while ((n = fread(b, 1, 4, f)) > 0) {
        for (size_t i = n; i < 4; i++) b[i] = 0;
        s += (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24;
    }
    fclose(f);
    return s;
}

// s with the fixture's placeholders filled in (a new string): "{model}" the initial weights'
// directory, "{case_dir}" the case's own fixture directory (its config.json), "{data_dir}" the
// shared tokenized data. The fixtures name no path of the machine that made them.
static char *fixture_expand(const char *s, const char *model, const char *name) {
    char case_dir[300];
    snprintf(case_dir, sizeof case_dir, "tests/fixtures/exact/%s", name);
    const struct {
        const char *key, *value;
    } subst[] = {{"{model}", model}, {"{case_dir}", case_dir}, {"{data_dir}", "tests/fixtures/exact/data"}};
    size_t cap = strlen(s) + 1, len = 0;
    for (size_t k = 0; k < sizeof subst / sizeof subst[0]; k++) cap += 16 * strlen(subst[k].value);
    char *out = mallocCheck(cap);
    for (const char *p = s; *p;) {
        size_t k = 0;
        while (k < sizeof subst / sizeof subst[0] && strncmp(p, subst[k].key, strlen(subst[k].key))) k++;
        if (k < sizeof subst / sizeof subst[0]) {
            len += (size_t)snprintf(out + len, cap - len, "%s", subst[k].value);
            p += strlen(subst[k].key);
        } else {
            out[len++] = *p++;
        }
    }
    out[len] = 0;
    return out;
}

// 1 when a fixture's command or flag names an absolute path other than the test's own
// temporary directory (a path of the machine that made the fixture: nothing a clone has)
static int names_foreign_path(const char *expanded, const char *tmp) {
    for (const char *p = expanded; (p = strchr(p, '/')) != NULL; p++)
        if ((p == expanded || p[-1] == ' ') && strncmp(p, tmp, strlen(tmp)) != 0) return 1;
    return 0;
}

// The JSON line of step `step` in a T5_DUMP_GRAD_NORMS file, or NULL.
static cJSON *dumped_norms(const char *path, int step) {
    char *text = read_text_file(path, NULL);
    if (!text) return NULL;
    cJSON *found = NULL;
    for (char *line = strtok(text, "\n"); line && !found; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (j && test_json_num(j, "step") == step) found = j;
        else cJSON_Delete(j);
    }
    free(text);
    return found;
}

// Every tensor's gradient norm of one step against HF's; returns the worst relative difference.
static double compare_tensor_norms(const char *name, const cJSON *want, const char *dump, int step, int *missing) {
    cJSON *got = dumped_norms(dump, step);
    double worst = 0;
    const char *worst_name = "";
    *missing = !got;
    if (!got) return INFINITY;
    const cJSON *g = cJSON_GetObjectItem(got, "grad_norms"), *w;
    int count = 0;
    cJSON_ArrayForEach(w, want) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, w->string);
        count++;
        if (!cJSON_IsNumber(v)) {
            (*missing)++;
            continue;
        }
        double r = rel(v->valuedouble, w->valuedouble);
        if (r > worst) worst = r, worst_name = w->string;
    }
    *missing += cJSON_GetArraySize(g) != count;
    printf("  %s step %d: worst tensor gradient norm %.2e (%s)\n", name, step, worst, worst_name);
    cJSON_Delete(got);
    return worst;
}

// Per-step figures of trainer_state.json's log_history against the reference steps.
static void check_log_history(const char *name, const char *out, const cJSON *steps, const cJSON *tol) {
    char path[700], what[200];
    snprintf(path, sizeof path, "%s/trainer_state.json", out);
    cJSON *state = test_load_json(path, " (run tools/make_exact_fixture.py)");
    const cJSON *hist = cJSON_GetObjectItem(state, "log_history");
    int early = (int)test_json_num(tol, "early_steps");
    for (int i = 0; i < cJSON_GetArraySize(steps); i++) {
        const cJSON *want = cJSON_GetArrayItem(steps, i), *got = cJSON_GetArrayItem(hist, i);
        snprintf(what, sizeof what, "%s: log_history has step %d", name, i + 1);
        if (!test_check(got && test_json_num(got, "step") == i + 1, what)) continue;
        snprintf(what, sizeof what, "%s: step %d loss", name, i + 1);
        rel_ok(what, test_json_num(got, "loss"), test_json_num(want, "loss"), test_json_num(tol, "loss"));
        snprintf(what, sizeof what, "%s: step %d grad_norm", name, i + 1);
        rel_ok(what, test_json_num(got, "grad_norm"), test_json_num(want, "grad_norm"),
               test_json_num(tol, i < early ? "grad_norm_early" : "grad_norm_late"));
        snprintf(what, sizeof what, "%s: step %d learning_rate", name, i + 1);
        rel_ok(what, test_json_num(got, "learning_rate"), test_json_num(want, "learning_rate"), 1e-9);
        snprintf(what, sizeof what, "%s: step %d epoch", name, i + 1);
        rel_ok(what, test_json_num(got, "epoch"), test_json_num(want, "epoch"), 1e-12);
    }
    cJSON_Delete(state);

}

// Every tensor's gradient norm, steps 1 and 2 (T5_DUMP_GRAD_NORMS dump).
static void check_grad_norms(const char *name, const char *dump, const cJSON *steps, const cJSON *tol) {
    char what[200];
    for (int s = 1; s <= 2; s++) {
        int missing = 0;
        const cJSON *want = cJSON_GetObjectItem(cJSON_GetArrayItem(steps, s - 1), "grad_norms");
        double worst = compare_tensor_norms(name, want, dump, s, &missing), t;
        char key[40];
        snprintf(key, sizeof key, "tensor_grad_norm_step%d", s);
        t = test_json_num(tol, key);
        snprintf(what, sizeof what, "%s: step %d gradient norm of every tensor (T5_DUMP_GRAD_NORMS), worst %.2e (tol %.0e)",
                 name, s, worst, t);
        test_check(!missing && worst <= t, what);
    }

}

// The norm of every tensor of the saved model after the run.
static void check_final_norms(const char *name, const char *out, const cJSON *ref, const cJSON *tol) {
    char path[700], what[200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    StFile st;
    st_open(&st, path);
    const cJSON *w;
    double worst = 0;
    int missing = 0, count = 0;
    const char *worst_name = "";
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(ref, "final_norms")) {
        const StTensor *t = st_find(&st, w->string);
        count++;
        if (!t) {
            missing++;
            continue;
        }
        float *v = mallocCheck(t->numel * sizeof(float));
        st_read_f32(&st, t, v);
        double ss = 0;
        for (uint64_t k = 0; k < t->numel; k++) ss += (double)v[k] * v[k];
        free(v);
        double r = rel(sqrt(ss), w->valuedouble);
        if (r > worst) worst = r, worst_name = w->string;
    }
    snprintf(what, sizeof what, "%s: norm of each of %d tensors after 4 steps, worst %.2e (%s) (tol %.0e)", name, count,
             worst, worst_name, test_json_num(tol, "final_norms"));
    test_check(!missing && worst <= test_json_num(tol, "final_norms"), what);
    st_close(&st);
}

static void run_case(const char *name, const char *tmp) {
    char path[700], what[200], model[600], out[600], dump[600];
    printf("--- case %s\n", name);
    snprintf(path, sizeof path, "tests/fixtures/exact/%s/args.json", name);
    cJSON *args = test_load_json(path, " (run tools/make_exact_fixture.py)");
    snprintf(path, sizeof path, "tests/fixtures/exact/%s/steps.json", name);
    cJSON *ref = test_load_json(path, " (run tools/make_exact_fixture.py)");
    const cJSON *init = cJSON_GetObjectItem(args, "init"), *tol = cJSON_GetObjectItem(args, "tolerances");
    snprintf(model, sizeof model, "%s/%s_model", tmp, name);
    snprintf(out, sizeof out, "%s/%s_out", tmp, name);
    snprintf(dump, sizeof dump, "%s/%s_norms.jsonl", tmp, name);

    // the initial weights, made again
    char *init_cmd = fixture_expand(cJSON_GetObjectItem(init, "command")->valuestring, model, name);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s > '%s.log' 2>&1", init_cmd, model);
    snprintf(what, sizeof what, "%s: the init command names only the fixture's directories (%s)", name, init_cmd);
    const int foreign = names_foreign_path(init_cmd, tmp);
    free(init_cmd);
    if (!test_check(!foreign, what)) goto done;
    snprintf(what, sizeof what, "%s: initial weights made by train_t5 convert --init random", name);
    if (!test_check(system(cmd) == 0, what)) {
        snprintf(cmd, sizeof cmd, "tail -5 '%s.log'", model);
        if (system(cmd) != 0) printf("(no log)\n");
        goto done;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", model);
    uint64_t want_sum = strtoull(cJSON_GetObjectItem(init, "checksum_u32_sum")->valuestring, NULL, 10);
    snprintf(what, sizeof what, "%s: initial weights are the fixture's (checksum; else train_t5's init changed: "
             "rerun tools/make_exact_fixture.py)", name);
    if (!test_check(checksum(path) == want_sum, what)) goto done;

    // the run
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "T5_DUMP_GRAD_NORMS='%s' ./train_t5", dump);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(args, "train_t5_flags")) {
        char *flag = fixture_expand(f->valuestring, model, name);
        if (names_foreign_path(flag, tmp)) {
            snprintf(what, sizeof what, "%s: flag %s names a path of the machine that made the fixture", name, flag);
            test_check(0, what);
            free(flag);
            goto done;
        }
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s'", flag);
        free(flag);
    }
    snprintf(cmd + len, sizeof cmd - len, " --output_dir '%s' --cache_dir '%s/cache' > '%s.log' 2>&1", out, tmp, out);
    snprintf(what, sizeof what, "%s: ./train_t5 exits 0", name);
    if (!test_check(system(cmd) == 0, what)) {
        snprintf(cmd, sizeof cmd, "tail -5 '%s.log'", out);
        if (system(cmd) != 0) printf("(no log)\n");
        goto done;
    }

    const cJSON *steps = cJSON_GetObjectItem(ref, "steps");
    check_log_history(name, out, steps, tol);
    check_grad_norms(name, dump, steps, tol);
    check_final_norms(name, out, ref, tol);
done:
    cJSON_Delete(args);
    cJSON_Delete(ref);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    char tmp[] = "/tmp/t5_test_exact.XXXXXX";
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    char own[200];
    snprintf(own, sizeof own, "--model tests/fixtures/exact/c --output_dir %s/m", tmp);
    test_check(names_foreign_path("./train_t5 convert --model /tmp/exactfix/c --output_dir x", tmp) == 1 &&
                   names_foreign_path(own, tmp) == 0,
               "planted: a path of the machine that made a fixture is reported, the test's own is not");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(CASES[i], tmp);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
