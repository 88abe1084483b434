// tests/test_eval_loss.c: eval_loss as HF Seq2SeqTrainer.evaluate reports it (trainer/evaluate.c),
// through ./train_t5 on the CPU against tests/fixtures/eval_loss/expected.json
// (tools/make_eval_loss_fixture.py, transformers 5.17): the mean of the batches' mean token
// losses, the short last batch weighing as much as a full one, with and without label
// smoothing. Each short-batch case also checks that the fixture can tell that figure from the
// row-weighted mean (else the comparison could not fail). Two MPI ranks give the one-rank figure.
// Run from the repository root after `make` (uses ./train_t5 and mpirun).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "test.h"
#include "test_files.h"

static char tmp[] = "/tmp/t5_test_eval_loss.XXXXXX";
#define FIXTURE "tests/fixtures/eval_loss/expected.json"
#define TOL 1e-6  // relative: fp32 kernels against torch's fp32 on the CPU

// ./train_t5 --do_eval on TMP/d at batch bs and smoothing s on `world` ranks; returns eval_loss
// (NAN when the run failed, after showing its log).
static double eval_loss(const cJSON *fx, int bs, double s, int world) {
    char name[64], cmd[4096], launcher[128] = "";
    snprintf(name, sizeof name, "b%d_s%g_w%d", bs, s, world);
    if (world > 1) snprintf(launcher, sizeof launcher, "mpirun --allow-run-as-root --oversubscribe -np %d ", world);
    snprintf(cmd, sizeof cmd,
             "%s./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir %s/d --task translation_en_to_ro --source_prefix '%s' --max_source_length %d "
             "--max_target_length %d --per_device_eval_batch_size %d --label_smoothing_factor %g --do_eval "
             "--report_to none --output_dir %s/%s > %s/%s.log 2>&1",
             launcher, tmp, cJSON_GetObjectItem(fx, "source_prefix")->valuestring,
             (int)test_json_num(fx, "max_source_length"), (int)test_json_num(fx, "max_target_length"), bs, s, tmp,
             name, tmp, name);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "tail -5 %s/%s.log | sed 's/^/       | /'", tmp, name);
        if (system(cmd) != 0) printf("       (no log)\n");
        return NAN;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/%s/eval_results.json", tmp, name);
    cJSON *r = test_load_json(path, " (the run wrote no eval_results.json)");
    double v = test_json_num(r, "eval_loss");
    cJSON_Delete(r);
    return v;
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    cJSON *fx = test_load_json(FIXTURE, " (python3 tools/make_eval_loss_fixture.py makes it)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p %s/d; F=tests/fixtures/trainer_data; "
             "cp $F/train.source %s/d/val.source; cp $F/train.target %s/d/val.target", tmp, tmp, tmp);
    if (system(cmd) != 0) t5_fail("could not write the test data under %s", tmp);
    int rows = (int)test_json_num(fx, "rows");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) {
        int bs = (int)test_json_num(c, "per_device_eval_batch_size");
        double s = test_json_num(c, "label_smoothing_factor"), want = test_json_num(c, "eval_loss");
        double weighted = test_json_num(c, "row_weighted_mean");
        double got = eval_loss(fx, bs, s, 1), rel = fabs(got - want) / fabs(want);
        char what[400];
        snprintf(what, sizeof what, "batch %d, smoothing %g: eval_loss %.9g vs HF Seq2SeqTrainer %.9g (rel %.1e)", bs,
                 s, got, want, rel);
        test_check(rel <= TOL, what);
        if (rows % bs != 0) {
            double gap = fabs(weighted - want) / fabs(want);
            snprintf(what, sizeof what,
                     "batch %d, smoothing %g: the row-weighted mean %.9g is %.1e from HF's, more than 20x the "
                     "tolerance (the check can fail)", bs, s, weighted, gap);
            test_check(gap > 20 * TOL, what);
        }
        if (bs == 5 && s == 0.0) {
            double two = eval_loss(fx, bs, s, 2);
            snprintf(what, sizeof what, "batch 5 on 2 MPI ranks: eval_loss %.9g, the one-rank figure %.9g", two, got);
            test_check(fabs(two - got) <= 1e-9 * fabs(got), what);
        }
    }
    cJSON_Delete(fx);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
