// tests/test_args.c: the trainer's command line as an HF user writes it (trainer/args.c, trainer/args_table.c).
//   table    docs/TRAINER.md's flag table and the parser's table agree, row by row, both ways
//            (implemented / alias of --x / accepted, changes nothing / refused [unless v])
//   flags    the list, each implemented with HF's meaning or refused by name: a run
//            per group of flags, checked in its log, trainer_state.json and results files
//   errors   three unknown flags named in one error; refused flags one error naming each
//   device   the default on this machine (cpu without a GPU), said at start-up; --num_gpus
//            without a GPU says so; fp16 from a DeepSpeed file on a CPU run names file and key
//   order    --explain is a dry run (exit 0, nothing trained, no --output_dir); an early error
//            leaves no --output_dir behind; --help prints one usage line
// Run from the repository root after `make` (uses ./train_t5; CPU only).
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../formats/safetensors.h"
#include "../trainer/args.h"
#include "test_files.h"
#include "test.h"

static char tmp[] = "/tmp/t5_test_args.XXXXXX";
static int gpu_visible;  // nvidia-smi -L succeeds: the device default is cuda here

// ---- helpers ------------------------------------------------------------------------------

// ./train_t5 with the tiny model and tokenizer, then `args`; stdout+stderr into TMP/NAME.log.
static int run(const char *name, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "./train_t5 --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--cache_dir %s/cache --per_device_train_batch_size 4 --per_device_eval_batch_size 4 %s > %s/%s.log 2>&1",
             tmp, args, tmp, name);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int log_has(const char *name, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.log", tmp, name);
    char *t = test_slurp(path);
    int ok = strstr(t, needle) != NULL;
    free(t);
    return ok;
}

static void show_log(const char *name) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -n '1,15s/^/       | /p' %s/%s.log", tmp, name);
    if (system(cmd) != 0) printf("       (no log)\n");
}

static int check_log(const char *name, const char *needle, const char *what) {
    char buf[600];
    snprintf(buf, sizeof buf, "%s: the output says \"%s\"", what, needle);
    int ok = test_check(log_has(name, needle), buf);
    if (!ok) show_log(name);
    return ok;
}

static int check_rc(const char *name, int rc, int want, const char *what) {
    char buf[600];
    snprintf(buf, sizeof buf, "%s: exit %d (want %d)", what, rc, want);
    int ok = test_check(rc == want, buf);
    if (!ok) show_log(name);
    return ok;
}

// An error run: exit 1 and every needle in the output. label: what the run is about.
static void expect_refused(const char *name, const char *label, const char *args, const char *const *needles, int n) {
    int rc = run(name, args);
    char what[300];
    snprintf(what, sizeof what, "refused: %s", label);
    check_rc(name, rc, 1, what);
    for (int i = 0; i < n; i++) check_log(name, needles[i], what);
}

static cJSON *load_json(const char *dir, const char *file) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/%s", tmp, dir, file);
    char *t = read_text_file(path, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

// The steps of the log_history entries that have `key` (loss: training logs; eval_loss: evals),
// as "1,3"; the learning rates of the loss entries into lr[] when given.
static void steps_with(const char *dir, const char *key, char *out, size_t cap, double *lr) {
    out[0] = '\0';
    cJSON *st = load_json(dir, "trainer_state.json");
    if (!st) {
        snprintf(out, cap, "(no trainer_state.json)");
        return;
    }
    const cJSON *e;
    size_t len = 0;
    int k = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(st, "log_history")) {
        if (!cJSON_GetObjectItem(e, key)) continue;
        len += (size_t)snprintf(out + len, cap - len, "%s%.0f", len ? "," : "", test_json_num(e, "step"));
        if (lr) lr[k++] = test_json_num(e, "learning_rate");
    }
    cJSON_Delete(st);
}

static int path_missing(const char *p) { return access(p, F_OK) != 0; }

// ---- docs/TRAINER.md's table against the parser's --------------------------------------------

// Split a markdown table row on unescaped '|' into at most 4 trimmed cells.
static int row_cells(char *line, char **cells, int max) {
    int n = 0;
    char *p = line;
    if (*p == '|') p++;
    while (*p && n < max) {
        char *start = p;
        while (*p && !(*p == '|' && p[-1] != '\\')) p++;
        char *end = p;
        while (start < end && *start == ' ') start++;
        while (end > start && end[-1] == ' ') end--;
        if (*p) p++;
        *end = '\0';
        cells[n++] = start;
    }
    return n;
}

static void docs_table(void) {
    char *doc = read_text_file("docs/TRAINER.md", NULL);
    if (!test_check(doc != NULL, "docs/TRAINER.md is readable")) return;
    int rows = 0, bad = 0, n_flags = 0;
    while (train_args_flag_at(n_flags)) n_flags++;
    char *seen = calloc((size_t)n_flags, 1);
    for (char *line = strtok(doc, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "| `--", 5) != 0) continue;
        char *cells[4];
        if (row_cells(line, cells, 4) < 3) continue;
        rows++;
        char name[128];
        if (sscanf(cells[0], "`--%127[^`]`", name) != 1) continue;
        ArgRole role;
        const char *help, *accepted;
        const char *text = cells[2];
        char why[400] = "";
        if (!train_args_flag_role(name, &role, &help, &accepted)) {
            snprintf(why, sizeof why, "not known to the parser");
        } else if (!strncmp(text, "implemented", 11)) {
            if (role != ARG_IMPLEMENTED) snprintf(why, sizeof why, "docs: implemented, parser role %d", role);
        } else if (!strncmp(text, "alias of `--", 12)) {
            char target[128], want[160];
            sscanf(text + 12, "%127[^`]", target);
            snprintf(want, sizeof want, "alias of --%s", target);
            if (role != ARG_ALIAS || strcmp(help, want) != 0)
                snprintf(why, sizeof why, "docs: %s, parser: role %d \"%s\"", want, role, help);
        } else if (!strncmp(text, "accepted, changes nothing", 25)) {
            if (role != ARG_NOOP) snprintf(why, sizeof why, "docs: accepted (no-op), parser role %d", role);
        } else if (!strncmp(text, "refused unless ", 15)) {
            char v[64] = "";
            sscanf(text + 15, "`%63[^`]`", v);
            if (!strcmp(v, "\"\"")) v[0] = '\0';  // `""`: the empty string
            if (role != ARG_REFUSED || !accepted || !strstr(accepted, v))
                snprintf(why, sizeof why, "docs: refused unless \"%s\", parser role %d accepts \"%s\"", v, role,
                         accepted ? accepted : "(nothing)");
        } else if (!strncmp(text, "refused", 7)) {
            if (role != ARG_REFUSED || accepted)
                snprintf(why, sizeof why, "docs: refused, parser role %d accepts \"%s\"", role, accepted ? accepted : "");
        } else {
            snprintf(why, sizeof why, "docs: unrecognized kind \"%.40s\"", text);
        }
        for (int k = 0; k < n_flags; k++)
            if (!strcmp(train_args_flag_at(k), name)) seen[k] = 1;
        if (why[0]) {
            bad++;
            char buf[600];
            snprintf(buf, sizeof buf, "docs/TRAINER.md --%s: %s", name, why);
            test_check(0, buf);
        }
    }
    char buf[300];
    snprintf(buf, sizeof buf, "docs/TRAINER.md's flag table: %d rows, each known to the parser as the docs say (%d wrong)",
             rows, bad);
    test_check(rows > 0 && bad == 0, buf);
    int missing = 0;
    for (int k = 0; k < n_flags; k++)
        if (!seen[k] && strcmp(train_args_flag_at(k), "help") != 0) {
            missing++;
            snprintf(buf, sizeof buf, "the parser's --%s has a row in docs/TRAINER.md", train_args_flag_at(k));
            test_check(0, buf);
        }
    snprintf(buf, sizeof buf, "every one of the parser's %d flags has a row in docs/TRAINER.md (%d missing)", n_flags, missing);
    test_check(missing == 0, buf);
    free(seen);
    free(doc);
}

// ---- runs -----------------------------------------------------------------------------------

static void unknown_and_refused(void) {
    const char *d = "--do_train --data_dir %s/d --max_steps 2 --output_dir %s/o_err";
    char base[600], args[2048];
    snprintf(base, sizeof base, d, tmp, tmp);
    snprintf(args, sizeof args, "%s --foo 1 --bar --learning_rte 1e-3 --qux", base);
    const char *unknown[] = {"unknown flags --foo, --bar, --learning_rte (did you mean --learning_rate?), --qux"};
    expect_refused("unknown", "--foo 1 --bar --learning_rte 1e-3 --qux", args, unknown, 1);
    struct {
        const char *flags;
        const char *needle;
    } refused[] = {
        {"--adafactor", "--adafactor: Adafactor is not built"},
        {"--optim adafactor", "--optim adafactor: Adafactor is not built"},
        {"--optim sgd", "--optim sgd: not built; train_t5's optimizer is AdamW"},
        {"--save_total_limit -1", "--save_total_limit -1: must be >= 1"},
        {"--load_best_model_at_end", "--load_best_model_at_end requires the save and eval strategy to match, but found "
                                     "eval strategy no and save strategy steps"},
        {"--save_strategy best", "--save_strategy best: not built"},
        {"--report_to wandb", "--report_to wandb: not built: train_t5 writes TensorBoard event files only"},
        {"--report_to comet_ml", "--report_to comet_ml: not built"},
        {"--fp16_full_eval --device cpu", "--fp16_full_eval after training in fp32: switching precision"},
        {"--attention_dropout 0.1", "--attention_dropout 0.1: T5 has one dropout"},
        {"--fp8 --fp16", "--fp8 with --fp16: fp8 GEMMs run with bf16 activations"},
        {"--fp8_bf16 first_last", "--fp8_bf16 is an --fp8 option: add --fp8, or drop it"},
        {"--fp8 --fp8_bf16 attention_output,bogus", "--fp8_bf16: unknown name \"bogus\""},
        {"--fp8 --fp8_amax_history 0", "--fp8_amax_history 0: must be in 1..1024"},
        {"--fp8 --fp8_margin -1", "--fp8_margin -1: must be in 0..30"},
        {"--dataset_name wmt16 --dataset_config ro-en", "--dataset_config \"ro-en\": goes with --dataset_name, which is not built either"},
        {"--adafactor --include_for_metrics inputs --tf32", "--adafactor: Adafactor is not built; train_t5's optimizer is "
                                                            "AdamW (drop --adafactor); --include_for_metrics \"inputs\": "
                                                            "metrics are computed in C"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(args, sizeof args, "%s %s", base, refused[i].flags);
        const char *needles[] = {refused[i].needle};
        expect_refused("refused", refused[i].flags, args, needles, 1);
    }
    snprintf(args, sizeof args, "%s/o_err", tmp);
    test_check(path_missing(args), "refused and unknown flags: no --output_dir created");
}

// --fp8 on the CPU: the fp8 rounding emulated on the fp32 reference, said at start-up; the
// run trains (a finite loss) and its log has the step lines.
static void run_fp8(void) {
    char args[2048];
    snprintf(args, sizeof args,
             "--do_train --device cpu --data_dir %s/d --max_steps 3 --logging_steps 1 --fp8 --fp8_bf16 attention_output "
             "--save_strategy no --output_dir %s/f8", tmp, tmp);
    int rc = run("f8", args);
    if (!check_rc("f8", rc, 0, "run f8 (--fp8 on the CPU reference)")) return;
    check_log("f8", "fp8: the blocks' linear GEMMs of training steps in fp8", "--fp8 start-up line");
    check_log("f8", "emulated on the CPU reference", "--fp8 on the CPU says it is emulated");
    check_log("f8", "bf16: LM head, attention outputs;", "--fp8_bf16 attention_output named at start-up");
    check_log("f8", "'loss': ", "--fp8 run logs its losses");
}

// Training with the accepted flags: logging_first_step, eval_strategy steps with the
// logging_steps fallback, eval_delay, eval_on_start, max_val_samples, warmup_steps as a ratio,
// the no-ops with their notices, group_by_length's notice, report_to all, optim fused.
static void run_a(void) {
    char args[2048];
    snprintf(args, sizeof args,
             "--do_train --do_eval --data_dir %s/d --max_steps 4 --logging_first_step --logging_steps 3 "
             "--eval_strategy steps --eval_delay 4 --eval_on_start --max_val_samples 3 --warmup_steps 0.5 "
             "--dataloader_num_workers 2 --torch_compile --logging_dir %s/logs --report_to all "
             "--optim adamw_torch_fused --disable_tqdm --group_by_length --load_best_model_at_end false "
             "--adafactor false --save_strategy no --output_dir %s/a",
             tmp, tmp, tmp);
    int rc = run("a", args);
    if (!check_rc("a", rc, 0, "run a (training with the accepted flags)")) return;
    check_log("a", gpu_visible ? "device: cuda (default: a GPU is visible; --device cpu to use the CPU)"
                               : "device: cpu (default: no GPU visible)",
              "device default");
    check_log("a", "NOTICE: --dataloader_num_workers 2 changes nothing: the data is memory-mapped", "--dataloader_num_workers");
    check_log("a", "NOTICE: --torch_compile changes nothing: train_t5 is compiled C/CUDA already", "--torch_compile");
    check_log("a", "NOTICE: --report_to all: TensorBoard event files", "--report_to all");
    check_log("a", "NOTICE: --group_by_length: using the sortish sampler", "--group_by_length");
    char logs[600];
    snprintf(logs, sizeof logs, "%s/logs", tmp);
    char *events = NULL;
    DIR *dl = opendir(logs);
    struct dirent *de;
    while (dl && (de = readdir(dl)))
        if (!strncmp(de->d_name, "events.out.tfevents.", 20)) events = strdup(de->d_name);
    if (dl) closedir(dl);
    char what_ev[700];
    snprintf(what_ev, sizeof what_ev, "--report_to all --logging_dir: the event file is there (%s)", events ? events : "none");
    test_check(events != NULL, what_ev);
    free(events);
    char steps[256], what[400];
    double lr[8] = {0};
    steps_with("a", "loss", steps, sizeof steps, lr);
    snprintf(what, sizeof what, "--logging_first_step --logging_steps 3 (4 steps): loss logged at steps %s (want 1,3)", steps);
    test_check(!strcmp(steps, "1,3"), what);
    // warmup 0.5 of 4 steps = 2: update 1 runs at lr 0, update 3 at the peak (linear decay from step 2)
    snprintf(what, sizeof what, "--warmup_steps 0.5 is a ratio (2 of 4 steps): lr at steps 1, 3 = %g, %g (want 0, 5e-05)",
             lr[0], lr[1]);
    test_check(lr[0] == 0 && fabs(lr[1] - 5e-5) < 1e-12, what);
    steps_with("a", "eval_loss", steps, sizeof steps, NULL);
    snprintf(what, sizeof what, "--eval_on_start --eval_delay 4, eval_steps from logging_steps 3: evals at %s (want 0,4)", steps);
    test_check(!strcmp(steps, "0,4"), what);
    cJSON *res = load_json("a", "eval_results.json");
    snprintf(what, sizeof what, "--max_val_samples 3: eval_samples %g (want 3)", test_json_num(res, "eval_samples"));
    test_check(test_json_num(res, "eval_samples") == 3, what);
    cJSON_Delete(res);
}

// --logging_strategy epoch, --lr_scheduler (finetune_trainer's spelling), --freeze_encoder,
// --data_seed, --use_cpu.
static void run_b(void) {
    char args[2048];
    snprintf(args, sizeof args,
             "--do_train --data_dir %s/d --max_steps 4 --logging_strategy epoch --lr_scheduler constant_w_warmup "
             "--warmup_steps 2 --learning_rate 1e-2 --freeze_encoder --data_seed 7 --use_cpu --save_strategy no "
             "--output_dir %s/b",
             tmp, tmp);
    int rc = run("b", args);
    if (!check_rc("b", rc, 0, "run b (logging per epoch, frozen encoder)")) return;
    check_log("b", "device: cpu (--use_cpu)", "--use_cpu");
    char steps[256], what[400];
    double lr[8] = {0};
    steps_with("b", "loss", steps, sizeof steps, lr);
    snprintf(what, sizeof what, "--logging_strategy epoch (2 steps per epoch): loss logged at steps %s (want 2,4)", steps);
    test_check(!strcmp(steps, "2,4"), what);
    snprintf(what, sizeof what, "--lr_scheduler constant_w_warmup: lr at steps 2, 4 = %g, %g (want 0.005, 0.01)", lr[0], lr[1]);
    test_check(fabs(lr[0] - 5e-3) < 1e-12 && fabs(lr[1] - 1e-2) < 1e-12, what);
    StFile a, b;
    char path[600];
    st_open(&a, "tests/fixtures/trainer_model/model.safetensors");
    snprintf(path, sizeof path, "%s/b/model.safetensors", tmp);
    st_open(&b, path);
    const char *names[3] = {"shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight",
                            "decoder.block.0.layer.0.SelfAttention.q.weight"};
    for (int k = 0; k < 3; k++) {
        const StTensor *ta = st_find(&a, names[k]), *tb = st_find(&b, names[k]);
        if (!ta || !tb || ta->numel != tb->numel) {
            test_check(0, "--freeze_encoder: tensors present");
            continue;
        }
        float *x = mallocCheck(ta->numel * sizeof(float)), *y = mallocCheck(ta->numel * sizeof(float));
        st_read_f32(&a, ta, x);
        st_read_f32(&b, tb, y);
        int same = !memcmp(x, y, ta->numel * sizeof(float));
        snprintf(what, sizeof what, "--freeze_encoder: %s %s", names[k], k < 2 ? "unchanged" : "trained (changed)");
        test_check(k < 2 ? same : !same, what);
        free(x);
        free(y);
    }
    st_close(&a);
    st_close(&b);
}

// --test_max_target_length truncates the test labels only: eval-only runs over the same text
// as validation and test split.
static void run_lengths(void) {
    char args[2048];
    // --device cpu: two runs compared to the last bit (a GPU machine would otherwise default to cuda)
    snprintf(args, sizeof args, "--do_eval --do_predict --data_dir %s/d --device cpu --output_dir %s/len_default", tmp, tmp);
    int rc1 = run("len_default", args);
    snprintf(args, sizeof args,
             "--do_eval --do_predict --data_dir %s/d --device cpu --test_max_target_length 3 --predict_with_generate "
             "--prediction_loss_only --output_dir %s/len_3", tmp, tmp);
    int rc2 = run("len_3", args);
    if (!check_rc("len_default", rc1, 0, "eval-only run") || !check_rc("len_3", rc2, 0, "eval-only run, test length 3"))
        return;
    cJSON *ed = load_json("len_default", "eval_results.json"), *pd = load_json("len_default", "predict_results.json");
    cJSON *e3 = load_json("len_3", "eval_results.json"), *p3 = load_json("len_3", "predict_results.json");
    char what[400];
    snprintf(what, sizeof what, "--test_max_target_length 3: eval_loss unchanged (%.6f vs %.6f), predict_loss changed "
             "(%.6f vs %.6f)", test_json_num(e3, "eval_loss"), test_json_num(ed, "eval_loss"), test_json_num(p3, "predict_loss"), test_json_num(pd, "predict_loss"));
    test_check(test_json_num(e3, "eval_loss") == test_json_num(ed, "eval_loss") && test_json_num(pd, "predict_loss") == test_json_num(ed, "eval_loss") &&
                   fabs(test_json_num(p3, "predict_loss") - test_json_num(pd, "predict_loss")) > 1e-3, what);
    test_check(!cJSON_GetObjectItem(e3, "eval_bleu"), "--prediction_loss_only: no generation (no eval_bleu)");
    check_log("len_3", "NOTICE: --predict_with_generate is off", "--prediction_loss_only");
    cJSON_Delete(ed);
    cJSON_Delete(pd);
    cJSON_Delete(e3);
    cJSON_Delete(p3);
}

static void device_and_provenance(void) {
    char args[2048], what[300];
    snprintf(args, sizeof args, "--do_train --data_dir %s/d --deepspeed configs/ds_config.json --device cpu "
             "--output_dir %s/o_fp16", tmp, tmp);
    const char *cfg[] = {"configs/ds_config.json: fp16.enabled is true, which needs a GPU (--device cuda), but the "
                         "device is cpu (--device cpu)"};
    expect_refused("fp16_config", "configs/ds_config.json (fp16) --device cpu", args, cfg, 1);
    snprintf(args, sizeof args, "--do_train --data_dir %s/d --fp16_full_eval --device cpu --output_dir %s/o_fe", tmp, tmp);
    expect_refused("fp16_full_eval", "--fp16_full_eval, training in fp32", args, (const char *[]){"error: --fp16_full_eval after training in fp32"}, 1);
    snprintf(args, sizeof args, "--do_eval --data_dir %s/d --fp16_full_eval --device cpu --output_dir %s/o_fe", tmp, tmp);
    expect_refused("fp16_full_eval_only", "--fp16_full_eval --do_eval --device cpu", args,
                   (const char *[]){"--fp16_full_eval needs a GPU (--device cuda), but the device is cpu (--device cpu)"},
                   1);
    if (gpu_visible) {
        printf("(a GPU is visible: the no-GPU defaults are not checked here)\n");
        return;
    }
    snprintf(args, sizeof args, "--do_train --data_dir %s/d --deepspeed configs/ds_config.json --output_dir %s/o_fp16",
             tmp, tmp);
    expect_refused("fp16_config_default", "configs/ds_config.json (fp16), no --device, no GPU", args,
                   (const char *[]){"configs/ds_config.json: fp16.enabled is true", "(default: no GPU visible)"}, 2);
    snprintf(args, sizeof args, "--do_train --data_dir %s/d --num_gpus 1 --output_dir %s/o_ng", tmp, tmp);
    expect_refused("num_gpus", "--num_gpus 1, no --device, no GPU", args, (const char *[]){"--num_gpus 1: no GPU is visible"}, 1);
    snprintf(what, sizeof what, "%s/o_fp16", tmp);
    test_check(path_missing(what), "device errors: no --output_dir created");
}

static void dry_run_and_order(void) {
    char args[2048], what[800], out[600];
    // --explain: JSON lines without a prefix also get run_translation.py's warning
    snprintf(args, sizeof args, "--do_train --train_file %s/train.json --explain --output_dir %s/explain", tmp, tmp);
    int rc = run("explain", args);
    check_rc("explain", rc, 0, "--explain (a dry run) exits 0");
    check_log("explain", "--explain: dry run", "--explain");
    check_log("explain", "->stage 0", "--explain prints the memory plan");
    test_check(!log_has("explain", "Running training"), "--explain: nothing trained");
    snprintf(out, sizeof out, "%s/explain", tmp);
    test_check(path_missing(out), "--explain: no --output_dir created");
    check_log("explain", "WARNING: You're running a t5 model but didn't provide a source prefix", "JSON lines, no prefix");
    // an error after the data is read (a split smaller than one batch): no --output_dir left
    snprintf(args, sizeof args, "--do_train --data_dir %s/small --output_dir %s/early", tmp, tmp);
    rc = run("early", args);
    check_rc("early", rc, 1, "a split smaller than one batch");
    snprintf(out, sizeof out, "%s/early", tmp);
    snprintf(what, sizeof what, "an early error leaves no --output_dir (%s)", out);
    test_check(path_missing(out), what);
    // --help: one usage line
    const char *helps[2] = {"./train_t5 --help", "./train_t5 --model m --help"};
    for (int k = 0; k < 2; k++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s > %s/help.log 2>&1", helps[k], tmp);
        int st = system(cmd);
        snprintf(cmd, sizeof cmd, "%s/help.log", tmp);
        char *t = test_slurp(cmd);
        int n = 0;
        for (char *p = t; (p = strstr(p, "usage:")); p++) n++;
        snprintf(what, sizeof what, "%s: exit %d, %d usage line(s) (want 1), mpirun's --allow-run-as-root said", helps[k],
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, n);
        test_check(WIFEXITED(st) && WEXITSTATUS(st) == 0 && n == 1 && strstr(t, "--allow-run-as-root"), what);
        free(t);
    }
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    gpu_visible = system("nvidia-smi -L > /dev/null 2>&1") == 0;
    char cmd[2048];
    // 8 lines as train, val and test; a 2-line split; the same 8 as JSON lines
    snprintf(cmd, sizeof cmd,
             "set -e; T=%s; mkdir -p $T/d $T/small; F=tests/fixtures/trainer_data; for s in train val test; do "
             "head -n 8 $F/train.source > $T/d/$s.source; head -n 8 $F/train.target > $T/d/$s.target; done; "
             "head -n 2 $F/train.source > $T/small/train.source; head -n 2 $F/train.target > $T/small/train.target; "
             "paste -d '\\t' $T/d/train.source $T/d/train.target | python3 -c \"import sys, json\n"
             "for l in sys.stdin:\n s, t = l.rstrip('\\n').split('\\t')\n"
             " print(json.dumps({'translation': {'en': s, 'ro': t}}))\" > $T/train.json",
             tmp);
    if (system(cmd) != 0) t5_fail("could not write the test data under %s", tmp);
    docs_table();
    unknown_and_refused();
    run_a();
    run_fp8();
    run_b();
    run_lengths();
    device_and_provenance();
    dry_run_and_order();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    return test_summary();
}
