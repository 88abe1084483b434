// tests/test_retention.c: checkpoint retention and the best model (trainer/retention.h) as
// transformers 5.17's Trainer does them, on the tiny fixture model (CPU):
//   limit      --save_total_limit 2, a save every step: the two newest stay, the log says
//              HF's "Deleting older checkpoint [...] due to args.save_total_limit"
//   best       --metric_for_best_model loss --greater_is_better (the WORST loss is "best", so
//              that it is an early step, not the newest) with --save_total_limit 2 and
//              --load_best_model_at_end --do_eval: trainer_state.json's best_metric,
//              best_global_step and best_model_checkpoint are the ones the log_history
//              implies; the best checkpoint survives the rotation; the final
//              model.safetensors is the best checkpoint's byte for byte, and eval_results'
//              eval_loss is the best step's
//   limit1     --save_total_limit 1 with --load_best_model_at_end: only the best stays
//   ranks      the best model on 2 mpirun ranks at ZeRO stage 3: loaded back byte for byte
//   resume     a run stopped at step 3 and resumed keeps its best_* (the same trainer_state
//              best fields as an uninterrupted run); its best step has no checkpoint
//              (--save_steps 2), so best_model_checkpoint stays null, as HF's os.path.exists test
//   metric     an unknown --metric_for_best_model stops at the first evaluation, listing the
//              metrics there are
//   only_model --save_only_model: no optimizer state in the checkpoints; resuming one (by
//              the flag, or by the same command) is refused, saying why
//   auto       the same command again resumes at the last checkpoint-N (HF's "Checkpoint
//              detected" line), never a newer checkpoint-N.tmp; run once more after it finished,
//              it finishes again from its last step; --overwrite_output_dir starts from scratch
//              and removes the earlier run's checkpoints
//   continuity the final save cut short, the evaluation after training killed: the
//              same command finishes the job; an older run's checkpoints never pass for a
//              new --overwrite_output_dir run's (rotation, a later resume)
// Run from the repository root after `make` (uses ./train_t5).
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "test.h"
#include "test_files.h"
#include "test_tmp.h"

static char tmp[] = "/tmp/t5_test_retention.XXXXXX";
static const char *launcher = "";  // "mpirun ... -np 2 " for the runs on several ranks

// Runs ./train_t5 with the shared flags, --max_steps steps and extra into OUT=tmp/out; the
// exit status (0: exit 0). env: variables before the command ("" for none).
static int train(const char *env, const char *out, int steps, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s exec %s./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name "
             "data/sample/spiece.model --data_dir %s/data --per_device_train_batch_size 8 --logging_steps 1 "
             "--max_steps %d --do_train --disable_tqdm --learning_rate 3e-3 --cache_dir %s/cache --output_dir %s/%s %s "
             "> '%s/%s.log' 2>&1",
             env, launcher, tmp, steps, tmp, tmp, out, extra, tmp, out);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *out_file(const char *out, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s/%s", tmp, out, name);
    return path_join("", p);
}

static int out_has(const char *out, const char *name) {
    char *p = out_file(out, name);
    int e = path_exists(p);
    free(p);
    return e;
}

static char *log_text(const char *out) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s.log", tmp, out);
    return test_slurp(p);
}

static int log_has(const char *out, const char *needle) {
    char *t = log_text(out);
    int has = strstr(t, needle) != NULL;
    free(t);
    return has;
}

static void show_log(const char *out) {
    char *t = log_text(out);
    printf("       | %.2500s\n", t);
    free(t);
}

static int ran_ok(const char *what, int rc, const char *out) {
    char buf[300];
    snprintf(buf, sizeof buf, "%s: ./train_t5 exits 0 (got %d)", what, rc);
    if (!test_check(rc == 0, buf)) {
        show_log(out);
        return 0;
    }
    return 1;
}

// The checkpoint-N directories of out, as a string "1 4 5" (ascending).
static void checkpoints(const char *out, char *list, size_t cap) {
    list[0] = '\0';
    size_t len = 0;
    for (int s = 1; s < 100; s++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%d", s);
        if (out_has(out, name)) len += (size_t)snprintf(list + len, cap - len, "%s%d", len ? " " : "", s);
    }
}

static int files_equal(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = 0;
    if (fa && fb) {
        fseek(fa, 0, SEEK_END);
        fseek(fb, 0, SEEK_END);
        nx = (size_t)ftell(fa);
        ny = (size_t)ftell(fb);
        rewind(fa);
        rewind(fb);
        x = malloc(nx + 1);
        y = malloc(ny + 1);
        same = nx == ny && nx > 0 && fread(x, 1, nx, fa) == nx && fread(y, 1, ny, fb) == ny && !memcmp(x, y, nx);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    free(x);
    free(y);
    return same;
}

// The best step and metric the log_history implies: the eval entry with the largest
// (greater) or smallest eval_loss, the first of equals (HF replaces only a strictly better one).
static int best_from_history(const cJSON *hist, int greater, double *metric) {
    int best = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, hist) {
        double v = test_json_num(e, "eval_loss");
        if (isnan(v) || cJSON_GetObjectItem(e, "train_runtime")) continue;
        if (!best || (greater ? v > *metric : v < *metric)) {
            best = (int)test_json_num(e, "step");
            *metric = v;
        }
    }
    return best;
}

static void limit_two(void) {
    if (!ran_ok("limit", train("", "limit", 5, "--save_steps 1 --save_total_limit 2"), "limit")) return;
    char list[200], buf[400];
    checkpoints("limit", list, sizeof list);
    snprintf(buf, sizeof buf, "limit: --save_total_limit 2 keeps the two newest checkpoints (have: %s; want: 4 5)", list);
    test_check(!strcmp(list, "4 5"), buf);
    char want[700];
    snprintf(want, sizeof want, "Deleting older checkpoint [%s/limit/checkpoint-1] due to args.save_total_limit", tmp);
    test_check(log_has("limit", want), "limit: the log says HF's \"Deleting older checkpoint [...checkpoint-1] due to "
                                       "args.save_total_limit\"");
    cJSON *st = NULL;
    char *p = out_file("limit", "trainer_state.json");
    st = test_load_json(p, "");
    free(p);
    test_check(cJSON_IsNull(cJSON_GetObjectItem(st, "best_metric")) &&
                   cJSON_IsNull(cJSON_GetObjectItem(st, "best_global_step")) &&
                   cJSON_IsNull(cJSON_GetObjectItem(st, "best_model_checkpoint")),
               "limit: no --metric_for_best_model: trainer_state.json's best_* are null (as HF)");
    cJSON_Delete(st);
}

// The best fields of out's trainer_state.json against its own log_history; save_every: the
// run's --save_steps (HF names best_model_checkpoint only when that step's checkpoint exists).
static int check_best_state(const char *what, const char *out, int greater, int save_every, int *best_step) {
    char *p = out_file(out, "trainer_state.json");
    cJSON *st = test_load_json(p, "");
    free(p);
    double metric = NAN;
    int best = best_from_history(cJSON_GetObjectItem(st, "log_history"), greater, &metric);
    char want_ckpt[700], buf[1200];
    snprintf(want_ckpt, sizeof want_ckpt, "%s/%s/checkpoint-%d", tmp, out, best);
    const cJSON *bc = cJSON_GetObjectItem(st, "best_model_checkpoint");
    snprintf(buf, sizeof buf,
             "%s: trainer_state.json best_global_step %g, best_metric %.17g, best_model_checkpoint %s: the log_history's "
             "best eval_loss is step %d, %.17g%s",
             what, test_json_num(st, "best_global_step"), test_json_num(st, "best_metric"),
             cJSON_IsString(bc) ? bc->valuestring : "null", best, metric,
             best % save_every ? " (no checkpoint of that step: null, as HF)" : "");
    int saved = best > 0 && best % save_every == 0;
    int ok = best > 0 && test_json_num(st, "best_global_step") == best && test_json_num(st, "best_metric") == metric &&
             (saved ? cJSON_IsString(bc) && !strcmp(bc->valuestring, want_ckpt) : cJSON_IsNull(bc));
    test_check(ok, buf);
    cJSON_Delete(st);
    *best_step = best;
    return ok;
}

static void best_model(void) {
    const char *flags = "--eval_strategy steps --eval_steps 1 --save_steps 1 --save_total_limit 2 "
                        "--metric_for_best_model eval_loss --greater_is_better --load_best_model_at_end --do_eval";
    if (!ran_ok("best", train("", "best", 5, flags), "best")) return;
    int best = 0;
    if (!check_best_state("best", "best", 1, 1, &best)) return;
    char list[200], want[200], buf[600];
    checkpoints("best", list, sizeof list);
    if (best < 4) snprintf(want, sizeof want, "%d 5", best);
    else snprintf(want, sizeof want, "4 5");
    snprintf(buf, sizeof buf, "best: the best checkpoint-%d survives the rotation beside the newest (have: %s; want: %s)",
             best, list, want);
    test_check(!strcmp(list, want), buf);
    snprintf(buf, sizeof buf, "Loading best model from %s/best/checkpoint-%d (score: ", tmp, best);
    test_check(log_has("best", buf), "best: the log says HF's \"Loading best model from ... (score: ...).\"");
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d/model.safetensors", best);
    char *a = out_file("best", "model.safetensors"), *b = out_file("best", name);
    snprintf(buf, sizeof buf, "best: the final model.safetensors is checkpoint-%d's byte for byte", best);
    test_check(files_equal(a, b), buf);
    free(a);
    free(b);
    // the evaluation after training is the best model's: its eval_loss is the best step's
    char *p = out_file("best", "eval_results.json");
    cJSON *er = test_load_json(p, "");
    free(p);
    p = out_file("best", "trainer_state.json");
    cJSON *st = test_load_json(p, "");
    free(p);
    snprintf(buf, sizeof buf, "best: eval_results.json's eval_loss %.17g is the best step's %.17g",
             test_json_num(er, "eval_loss"), test_json_num(st, "best_metric"));
    test_check(test_json_num(er, "eval_loss") == test_json_num(st, "best_metric"), buf);
    cJSON_Delete(er);
    cJSON_Delete(st);
}

// 2 CPU ranks at ZeRO stage 3 (the weights partitioned): every rank tracks the same best, and
// the best checkpoint's weights load back on both (the ZeRO state set up again).
static void ranks_best(void) {
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        test_check(0, "ranks: mpirun is needed (make deps installs openmpi-bin)");
        return;
    }
    launcher = "mpirun --allow-run-as-root --oversubscribe -np 2 ";
    const char *flags = "--eval_strategy steps --eval_steps 1 --save_steps 1 --save_total_limit 2 "
                        "--metric_for_best_model loss --greater_is_better --load_best_model_at_end --do_eval "
                        "--deepspeed configs/ds_config_zero3.json";
    int rc = train("", "ranks", 4, flags);
    launcher = "";
    if (!ran_ok("ranks (2 ranks, stage 3)", rc, "ranks")) return;
    int best = 0;
    if (!check_best_state("ranks", "ranks", 1, 1, &best)) return;
    char name[64], buf[300];
    snprintf(name, sizeof name, "checkpoint-%d/model.safetensors", best);
    char *a = out_file("ranks", "model.safetensors"), *b = out_file("ranks", name);
    snprintf(buf, sizeof buf, "ranks: the final model.safetensors is checkpoint-%d's byte for byte (stage 3, 2 ranks)",
             best);
    test_check(files_equal(a, b), buf);
    free(a);
    free(b);
}

static void limit_one(void) {
    const char *flags = "--eval_strategy steps --eval_steps 1 --save_steps 1 --save_total_limit 1 "
                        "--metric_for_best_model loss --greater_is_better --load_best_model_at_end";
    if (!ran_ok("limit1", train("", "limit1", 4, flags), "limit1")) return;
    int best = 0;
    if (!check_best_state("limit1", "limit1", 1, 1, &best)) return;
    char list[200], want[64], buf[400];
    checkpoints("limit1", list, sizeof list);
    snprintf(want, sizeof want, "%d", best);
    snprintf(buf, sizeof buf, "limit1: at the end only the best checkpoint stays (have: %s; want: %s)", list, want);
    test_check(!strcmp(list, want), buf);
}

static void resume_keeps_best(void) {
    const char *flags = "--eval_strategy steps --eval_steps 1 --save_steps 2 --metric_for_best_model loss "
                        "--greater_is_better";
    if (!ran_ok("resume ref", train("", "resume_ref", 5, flags), "resume_ref")) return;
    int rc = train("T5_TEST_SIGNAL=step3:TERM", "resume", 5, flags);
    if (!ran_ok("resume (stopped at step 3)", rc, "resume")) return;
    if (!ran_ok("resume (the same command)", train("", "resume", 5, flags), "resume")) return;
    int a = 0, b = 0;
    check_best_state("resume ref", "resume_ref", 1, 2, &a);
    check_best_state("resume", "resume", 1, 2, &b);
    char buf[200];
    snprintf(buf, sizeof buf, "resume: the resumed run's best step (%d) is the uninterrupted run's (%d)", b, a);
    test_check(a > 0 && a == b, buf);
}

static void unknown_metric(void) {
    int rc = train("", "metric", 3, "--eval_strategy steps --eval_steps 2 --metric_for_best_model bleu");
    char *t = log_text("metric");
    char want[300];
    snprintf(want, sizeof want, "error: --metric_for_best_model bleu: \"eval_bleu\" is not found in the evaluation "
                                "metrics; the available evaluation metrics are: eval_loss, eval_runtime");
    test_check(rc == 1 && strstr(t, want),
               "metric: an unknown --metric_for_best_model stops at the first evaluation, listing the metrics there are");
    free(t);
}

static void only_model(void) {
    if (!ran_ok("only_model", train("", "only", 2, "--save_steps 1 --save_only_model"), "only")) return;
    test_check(out_has("only", "checkpoint-1/model.safetensors") && !out_has("only", "checkpoint-1/optimizer.safetensors") &&
                   !out_has("only", "checkpoint-1/zero_state.json"),
               "only_model: checkpoint-1 has model.safetensors and no optimizer state");
    char flag[800];
    snprintf(flag, sizeof flag, "--resume_from_checkpoint %s/only/checkpoint-1 --overwrite_output_dir", tmp);
    int rc = train("", "only_resume", 3, flag);
    test_check(rc == 1 && log_has("only_resume", "saved with --save_only_model") &&
                   log_has("only_resume", "cannot be resumed"),
               "only_model: --resume_from_checkpoint of a --save_only_model checkpoint is refused, saying why");
    // the same command again: the last checkpoint is the model-only one
    rc = train("", "only", 3, "--save_steps 1 --save_only_model");
    test_check(rc == 1 && log_has("only", "cannot be resumed"),
               "only_model: the same command again (resuming the last checkpoint) is refused too");
}

static void auto_resume(void) {
    if (!ran_ok("auto (first run)", train("", "auto", 2, "--save_steps 1"), "auto")) return;
    char p[700];
    snprintf(p, sizeof p, "%s/auto/checkpoint-9.tmp", tmp);  // a half-written checkpoint of a killed run
    mkdir_p(p);
    if (!ran_ok("auto (the same command, 3 steps)", train("", "auto", 3, "--save_steps 1"), "auto")) return;
    char want[900];
    snprintf(want, sizeof want, "Checkpoint detected, resuming training at %s/auto/checkpoint-2. To avoid this "
             "behavior, change the `--output_dir` or add `--overwrite_output_dir` to train from scratch.", tmp);
    test_check(log_has("auto", want), "auto: HF's \"Checkpoint detected, resuming training at .../checkpoint-2\" "
                                      "(not the newer checkpoint-9.tmp)");
    test_check(log_has("auto", "resuming from") && out_has("auto", "checkpoint-3"),
               "auto: it resumed at step 2 and went on to checkpoint-3");
    // the same finished command once more: it resumes at the last step and finishes (HF's does the same)
    int rc = train("", "auto", 3, "--save_steps 1");
    test_check(rc == 0 && log_has("auto", "is the run's last step (3 of 3): nothing is left to train") &&
                   out_has("auto", "model.safetensors"),
               "auto: the finished command run again finishes from its last checkpoint (exit 0, the final model)");
    if (!ran_ok("auto (--overwrite_output_dir)", train("", "auto", 1, "--save_steps 1 --overwrite_output_dir"), "auto"))
        return;
    test_check(!log_has("auto", "Checkpoint detected") && !log_has("auto", "resuming from"),
               "auto: --overwrite_output_dir trains from scratch");
    test_check(log_has("auto", "--overwrite_output_dir: removed the earlier run's") && !out_has("auto", "checkpoint-3") &&
                   !out_has("auto", "checkpoint-2") && !out_has("auto", "checkpoint-9.tmp") &&
                   out_has("auto", "checkpoint-1"),
               "auto: --overwrite_output_dir removed the earlier run's checkpoint-2, -3 and -9.tmp (checkpoint-1 is the "
               "new run's)");
}

// Run continuity: an interrupted end of a run (the final save cut short, the evaluation after
// training killed) leaves checkpoint-N at the last step; the same command finishes the job: the
// final model and the evaluations asked for.
static void continuity(void) {
    const char *flags = "--save_steps 2 --do_eval";
    if (!ran_ok("finish (first run)", train("", "finish", 4, flags), "finish")) return;
    // the final save "killed": the final model and the results gone, checkpoint-4 whole
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd %s/finish && rm -f model.safetensors train_results.json eval_results.json "
             "all_results.json && : > model.safetensors.tmp", tmp);
    if (system(cmd) != 0) t5_fail("cannot damage the run");
    int rc = train("", "finish", 4, flags);
    test_check(rc == 0 && log_has("finish", "is the run's last step (4 of 4)") && out_has("finish", "model.safetensors") &&
                   out_has("finish", "eval_results.json") && out_has("finish", "train_results.json"),
               "finish: the final save cut short at the last step: the same command writes the final model and runs "
               "the evaluation (exit 0)");
    // killed in the evaluation after training: the final model there, no eval results; the same
    // command evaluates
    snprintf(cmd, sizeof cmd, "rm -f %s/finish/eval_results.json %s/finish/all_results.json", tmp, tmp);
    if (system(cmd) != 0) t5_fail("rm");
    rc = train("", "finish", 4, flags);
    test_check(rc == 0 && out_has("finish", "eval_results.json"),
               "finish: killed in the evaluation after training, then the same command: the evaluation happens");
    // --overwrite_output_dir --save_total_limit 1 over an older run's folder: only the new run's
    // checkpoints rotate, and a later run without the flag resumes the new run, not the old one
    if (!ran_ok("overwrite (an older run, 4 steps)", train("", "ow", 4, "--save_steps 1"), "ow")) return;
    if (!ran_ok("overwrite (the new run)", train("", "ow", 2, "--save_steps 1 --overwrite_output_dir --save_total_limit 1"),
                "ow"))
        return;
    test_check(out_has("ow", "checkpoint-2") && !out_has("ow", "checkpoint-4") && !out_has("ow", "checkpoint-1"),
               "overwrite: --overwrite_output_dir --save_total_limit 1 keeps the new run's checkpoint-2, not the old "
               "run's checkpoint-4");
    rc = train("", "ow", 3, "--save_steps 1");
    char want[900];
    snprintf(want, sizeof want, "resuming training at %s/ow/checkpoint-2.", tmp);
    test_check(rc == 0 && log_has("ow", want), "overwrite: a later run without the flag resumes the new run's "
                                               "checkpoint-2");
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed: %s", strerror(errno));
    char cmd[1200];
    // the fixture's 24 training lines, and 8 of them as a validation split
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/data && cp tests/fixtures/trainer_data/train.* %s/data/ && head -n 8 "
             "tests/fixtures/trainer_data/train.source > %s/data/val.source && head -n 8 "
             "tests/fixtures/trainer_data/train.target > %s/data/val.target",
             tmp, tmp, tmp, tmp);
    if (system(cmd) != 0) t5_fail("cannot write the test data into %s", tmp);
    limit_two();
    best_model();
    limit_one();
    ranks_best();
    resume_keeps_best();
    unknown_metric();
    only_model();
    auto_resume();
    continuity();
    rm_rf(tmp);
    return test_summary();
}
