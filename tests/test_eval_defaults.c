// tests/test_eval_defaults.c: issue 15's two start-up pieces, through ./train_t5 on the CPU.
//   defaults  generation settings and the source prefix from the model directory
//             (trainer/gen_defaults.c): config.json's task_specific_params[--task], then
//             generation_config.json over it, flags over both; each value taken a NOTICE naming
//             file and key; an eval run generates within the max_length taken; bad values are
//             one-line errors naming file and key
//   eval-only no gradients, master weights or moments (the --explain plan, zero_init's counts),
//             and a DeepSpeed config with "auto" optimizer values and an "auto" total_num_steps
//             runs: its optimizer and scheduler are dropped, said in a NOTICE
// Run from the repository root after `make` (uses ./train_t5; CPU only).
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "test_files.h"
#include "test.h"

static char tmp[] = "/tmp/t5_test_eval_defaults.XXXXXX";
static const char *data = "d";  // TMP/d: val and test splits; TMP/dt: a train split too

// ./train_t5 with the tokenizer and the 8-line data, then `args`; stdout into TMP/NAME.log,
// stderr into TMP/NAME.err.
static int run(const char *name, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "./train_t5 --tokenizer_name data/sample/spiece.model --cache_dir %s/cache --data_dir %s/%s --device cpu "
             "--per_device_eval_batch_size 4 --task translation_en_to_ro %s > %s/%s.log 2> %s/%s.err",
             tmp, tmp, data, args, tmp, name, tmp, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int has(const char *name, const char *ext, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.%s", tmp, name, ext);
    char *t = test_slurp(path);
    int ok = strstr(t, needle) != NULL;
    free(t);
    return ok;
}

static void show(const char *name) {
    char cmd[900];
    snprintf(cmd, sizeof cmd, "sed -n '1,20s/^/       | /p' %s/%s.log %s/%s.err", tmp, name, tmp, name);
    if (system(cmd) != 0) printf("       (no log)\n");
}

static void expect(const char *name, int ok, const char *what) {
    if (!test_check(ok, what)) show(name);
}

static void says(const char *name, const char *needle, int want) {
    char what[700];
    snprintf(what, sizeof what, "%s: the output %s \"%s\"", name, want ? "says" : "does not say", needle);
    expect(name, has(name, "log", needle) == want, what);
}

// A copy of the tiny model with config.json's task_specific_params (tsp: JSON text or NULL)
// and a generation_config.json (gen: JSON text or NULL).
static void make_model(const char *dir, const char *tsp, const char *gen) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "set -e; D=%s/%s; mkdir -p $D; cp tests/fixtures/trainer_model/model.safetensors $D/; "
             "python3 -c \"import json,sys; c=json.load(open('tests/fixtures/trainer_model/config.json'));\n"
             "t=sys.argv[1]\nif t: c['task_specific_params']=json.loads(t)\n"
             "json.dump(c, open(sys.argv[2]+'/config.json','w'))\" '%s' $D; %s%s%s",
             tmp, dir, tsp ? tsp : "", gen ? "printf '%s' '" : "", gen ? gen : "", gen ? "' > $D/generation_config.json" : "");
    if (system(cmd) != 0) t5_fail("could not write the test model %s/%s", tmp, dir);
}

static double eval_number(const char *name, const char *key) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/eval_results.json", tmp, name);
    char *t = read_text_file(path, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    const cJSON *v = j ? cJSON_GetObjectItem(j, key) : NULL;
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(j);
    return d;
}

#define TSP "{\"translation_en_to_ro\": {\"early_stopping\": true, \"max_length\": 5, \"num_beams\": 3, " \
            "\"prefix\": \"translate English to Romanian: \"}}"

// task_specific_params alone: an eval run takes num_beams, max_length, early_stopping and the
// prefix, says so, and generates within max_length 5 (4 tokens after the start token).
static void from_task_params(void) {
    make_model("m_tsp", TSP, NULL);
    char args[1024];
    snprintf(args, sizeof args, "--model %s/m_tsp --do_eval --predict_with_generate --output_dir %s/tsp", tmp, tmp);
    int rc = run("tsp", args);
    expect("tsp", rc == 0, "eval run with task_specific_params: exit 0");
    says("tsp", "NOTICE: generation num_beams 3 from", 1);
    says("tsp", "config.json: key \"task_specific_params.translation_en_to_ro.num_beams\" (--generation_num_beams not "
                "given)", 1);
    says("tsp", "NOTICE: generation max_length 5 from", 1);
    says("tsp", "NOTICE: generation early_stopping true from", 1);
    says("tsp", "NOTICE: source prefix \"translate English to Romanian: \" from", 1);
    says("tsp", "length_penalty", 0);
    double len = eval_number("tsp", "eval_gen_len");
    char what[200];
    snprintf(what, sizeof what, "eval_gen_len %.3f <= 5 (the max_length taken; --max_target_length would allow 128)", len);
    expect("tsp", len > 0 && len <= 5, what);
}

// generation_config.json over task_specific_params, flags over both (--explain: a dry run).
static void precedence(void) {
    make_model("m_both", TSP, "{\"num_beams\": 2, \"max_length\": 6, \"length_penalty\": 0.5}");
    char args[1024];
    snprintf(args, sizeof args, "--model %s/m_both --do_eval --predict_with_generate --explain --output_dir %s/x", tmp,
             tmp);
    expect("both", run("both", args) == 0, "--explain with generation_config.json and task_specific_params: exit 0");
    says("both", "NOTICE: generation num_beams 2 from", 1);
    says("both", "generation_config.json: key \"num_beams\"", 1);
    says("both", "NOTICE: generation max_length 6 from", 1);
    says("both", "NOTICE: generation length_penalty 0.5 from", 1);
    says("both", "NOTICE: generation early_stopping true from", 1);  // only task_specific_params has it
    says("both", "num_beams 3", 0);
    snprintf(args, sizeof args, "--model %s/m_both --do_eval --predict_with_generate --explain --output_dir %s/x "
             "--num_beams 1 --generation_max_length 9 --early_stopping false --length_penalty 1 --source_prefix 'x: '",
             tmp, tmp);
    expect("flags", run("flags", args) == 0, "--explain with every flag given: exit 0");
    says("flags", "NOTICE: generation", 0);
    says("flags", "NOTICE: source prefix", 0);
    // without --predict_with_generate the generation keys are not taken; the prefix is
    snprintf(args, sizeof args, "--model %s/m_both --do_eval --explain --output_dir %s/x", tmp, tmp);
    expect("nogen", run("nogen", args) == 0, "--explain without --predict_with_generate: exit 0");
    says("nogen", "NOTICE: generation", 0);
    says("nogen", "NOTICE: source prefix", 1);
}

// A bad value: exit 1, one stderr line naming the file and the key.
static void bad_value(const char *name, const char *tsp, const char *gen, const char *file, const char *key) {
    make_model(name, tsp, gen);
    char args[1024], err[600];
    snprintf(args, sizeof args, "--model %s/%s --do_eval --predict_with_generate --explain --output_dir %s/x", tmp,
             name, tmp);
    int rc = run(name, args);
    snprintf(err, sizeof err, "%s/%s.err", tmp, name);
    char *t = test_slurp(err);
    int lines = 0;
    for (char *p = t; *p; p++) lines += *p == '\n';
    char what[700];
    snprintf(what, sizeof what, "%s: exit %d (want 1), %d stderr line(s) naming %s and %s: %.200s", name, rc, lines, file,
             key, t);
    expect(name, rc == 1 && lines <= 2 && !strncmp(t, "error: ", 7) && strstr(t, file) && strstr(t, key), what);
    free(t);
}

// An eval-only run with configs/ds_config_zero2.json's "auto" optimizer and a WarmupDecayLR
// whose total_num_steps is "auto": the optimizer and scheduler are dropped, nothing of training
// is allocated; --explain's plan has zero grads and optimizer columns.
static void eval_only(void) {
    char cmd[1024], args[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import json,sys; c=json.load(open('configs/ds_config_zero2.json'));\n"
             "c['scheduler']={'type':'WarmupDecayLR','params':{'warmup_min_lr':'auto','warmup_max_lr':'auto',"
             "'warmup_num_steps':'auto','total_num_steps':'auto'}}\n"
             "json.dump(c, open(sys.argv[1],'w'))\" %s/ds_auto.json", tmp);
    if (system(cmd) != 0) t5_fail("could not write %s/ds_auto.json", tmp);
    snprintf(args, sizeof args, "--model tests/fixtures/trainer_model --do_eval --deepspeed %s/ds_auto.json "
             "--output_dir %s/ds_eval", tmp, tmp);
    expect("ds_eval", run("ds_eval", args) == 0, "eval-only with an \"auto\" total_num_steps config: exit 0");
    says("ds_eval", "evaluation only: its optimizer and scheduler are dropped", 1);
    says("ds_eval", "grads 0 B, master 0 B, moments 0 B", 1);
    expect("ds_eval", eval_number("ds_eval", "eval_loss") > 0, "eval-only with --deepspeed: eval_results.json has eval_loss");
    // t5-small (random init: --explain loads nothing), large enough for the GiB columns to show
    snprintf(args, sizeof args, "--model t5-small --init random --do_eval --do_predict --deepspeed %s/ds_auto.json "
             "--explain --output_dir %s/x", tmp, tmp);
    expect("ds_explain", run("ds_explain", args) == 0, "eval-only --explain: exit 0");
    says("ds_explain", "evaluation only (no gradients, no optimizer)", 1);
    says("ds_explain", "grads 0.00  master 0.00  adam m+v 0.00  activations", 1);
    // the table's stage 2 row: grads and optim(master+m+v) columns 0.00, params not
    says("ds_explain", "->stage 2        0.23    0.00               0.00", 1);
    snprintf(args, sizeof args, "--model t5-small --init random --do_train --do_eval --deepspeed %s/ds_auto.json "
             "--explain --output_dir %s/x", tmp, tmp);
    data = "dt";
    expect("ds_train_explain", run("ds_train_explain", args) == 0, "training --explain: exit 0");
    data = "d";
    says("ds_train_explain", "grads 0.00  master 0.00  adam m+v 0.00", 0);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "set -e; T=%s; mkdir -p $T/d; F=tests/fixtures/trainer_data; for s in val test; do "
             "head -n 8 $F/train.source > $T/d/$s.source; head -n 8 $F/train.target > $T/d/$s.target; done; "
             "cp -r $T/d $T/dt; cp $F/train.source $F/train.target $T/dt/", tmp);
    if (system(cmd) != 0) t5_fail("could not write the test data under %s", tmp);
    from_task_params();
    precedence();
    bad_value("bad_beams", NULL, "{\"num_beams\": 0}", "generation_config.json", "\"num_beams\"");
    bad_value("bad_len", "{\"translation_en_to_ro\": {\"max_length\": \"x\"}}", NULL, "config.json",
              "\"task_specific_params.translation_en_to_ro.max_length\"");
    bad_value("bad_stop", "{\"translation_en_to_ro\": {\"early_stopping\": \"never\"}}", NULL, "config.json",
              "early_stopping");
    bad_value("bad_tsp", "[1]", NULL, "config.json", "\"task_specific_params\"");
    eval_only();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
