// tests/test_run_guards.c: a run that cannot mean anything stops in one line before it starts,
// and no command writes where another run lives (run from the repository root, ./train_t5 built):
//   - empty splits: a training, validation or test split with no examples (an empty file, an empty
//     JSON-lines file; --n_train 0 by its own check) is refused naming the file the user gave (not the cache), instead
//     of "fewer than one batch; lower the batch size" or metrics of nothing;
//   - --output_dir under a plain file (afile/sub, afile/x/y, and under a symlink to a file): said as
//     such, not "Permission denied";
//   - a batch file whose labels are all -100 (`train_t5 loss`, `overfit`): the loss has no token,
//     refused instead of printing "loss -nan" with exit 0;
//   - `export --overwrite` into a directory a live run holds (its lock taken here as a run takes
//     it): refused naming the run; an export into a free directory prints its "exported" line only
//     once every file is written;
//   - start-up lines: the CPU backend's plan against the host's memory before anything is allocated
//     (t5-11b at batch 16: refused at once, not after minutes of random init); gradient
//     checkpointing said as such; an evaluation-only DeepSpeed run claims no training scheduler;
//   - CPU ranks started with different settings (two app contexts of one mpirun): --learning_rate,
//     --seed, --max_steps, --label_smoothing, --per_device_train_batch_size, --sampler each refused
//     in one line by rank 0 naming the rank and the flag; --output_dir and --local_rank may differ.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../formats/safetensors.h"
#include "test.h"
#include "test_files.h"
#include "test_tmp.h"

static char tmp[64];

static int sh(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// ./train_t5 ARGS > tmp/LOG.log 2>&1; the exit code.
static int run(const char *log, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 ./train_t5 %s > %s/%s.log 2>&1", args, tmp, log);
    return sh(cmd);
}

static char *log_of(const char *log) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s.log", tmp, log);
    char *t = test_slurp(p);
    return t ? t : calloc(1, 1);
}

// exit 1 and exactly one "error:" line holding every needle (NULL-terminated)
static void expect_refusal(const char *what, const char *log, int rc, const char *needle1, const char *needle2) {
    char *t = log_of(log);
    int errors = 0;
    for (const char *p = t; (p = strstr(p, "error: ")); p++) errors++;
    char buf[700];
    const char *e = strstr(t, "error: ");
    snprintf(buf, sizeof buf, "%s: exit %d, %d error line(s): %.400s", what, rc, errors, e ? e : "(none)");
    char *nl = strchr(buf + strlen(what), '\n');
    if (nl) *nl = '\0';
    test_check(rc == 1 && errors == 1 && strstr(t, needle1) && (!needle2 || strstr(t, needle2)), buf);
    free(t);
}

#define MODEL "--device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) t5_fail("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void empty_splits(void) {
    char cmd[1024], args[2048], path[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/e1 %s/e2 %s/e3 && : > %s/e1/train.source && : > %s/e1/train.target && "
             "cp tests/fixtures/trainer_data/train.* %s/e2/ && : > %s/e2/val.source && : > %s/e2/val.target && "
             "cp tests/fixtures/trainer_data/train.* %s/e3/ && : > %s/e3/test.source && : > %s/e3/test.target",
             tmp, tmp, tmp, tmp, tmp, tmp, tmp, tmp, tmp, tmp, tmp);
    if (sh(cmd) != 0) t5_fail("cannot write the empty splits");
    snprintf(args, sizeof args, MODEL "--data_dir %s/e1 --do_train --output_dir %s/o_e1 --cache_dir %s/cache", tmp, tmp, tmp);
    snprintf(path, sizeof path, "%s/e1/train.source: the training (--do_train) split has no examples", tmp);
    expect_refusal("an empty train.source", "e1", run("e1", args), path, NULL);
    snprintf(args, sizeof args, MODEL "--data_dir %s/e2 --do_train --do_eval --output_dir %s/o_e2 --cache_dir %s/cache",
             tmp, tmp, tmp);
    snprintf(path, sizeof path, "%s/e2/val.source: the validation", tmp);
    expect_refusal("an empty val.source with --do_eval", "e2", run("e2", args), path, NULL);
    snprintf(args, sizeof args, MODEL "--data_dir %s/e3 --do_predict --output_dir %s/o_e3 --cache_dir %s/cache", tmp,
             tmp, tmp);
    snprintf(path, sizeof path, "%s/e3/test.source: the test (--do_predict) split", tmp);
    expect_refusal("an empty test.source with --do_predict", "e3", run("e3", args), path, NULL);
    snprintf(args, sizeof args, MODEL "--data_dir tests/fixtures/trainer_data --n_train 0 --do_train --output_dir %s/o_e4 "
             "--cache_dir %s/cache", tmp, tmp);
    expect_refusal("--n_train 0", "e4", run("e4", args), "--n_train/--n_val/--n_test 0: selects no examples", NULL);
    snprintf(path, sizeof path, "%s/empty.jsonl", tmp);
    write_text(path, "");
    snprintf(args, sizeof args, MODEL "--train_file %s --source_lang en --target_lang ro --do_train --output_dir "
             "%s/o_e5 --cache_dir %s/cache", path, tmp, tmp);
    expect_refusal("an empty JSON-lines --train_file", "e5", run("e5", args), "empty.jsonl: the training", NULL);
}

static void output_under_file(void) {
    char cmd[700], args[2048];
    snprintf(cmd, sizeof cmd, "cd %s && : > afile && ln -sf afile alink", tmp);
    if (sh(cmd) != 0) t5_fail("cannot write afile");
    const char *subs[] = {"afile/sub", "afile/x/y", "alink/sub"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, MODEL "--data_dir tests/fixtures/trainer_data --do_train --output_dir %s/%s "
                 "--cache_dir %s/cache", tmp, subs[i], tmp);
        char what[128];
        snprintf(what, sizeof what, "--output_dir %s", subs[i]);
        expect_refusal(what, "outfile", run("outfile", args), "is a file, not a directory", NULL);
    }
}

// A batch file of 2 rows whose labels are all -100.
static void write_ignored_batch(const char *path) {
    const StTensorDesc d[3] = {{"input_ids", ST_I32, 2, {2, 3}}, {"attention_mask", ST_I32, 2, {2, 3}},
                               {"labels", ST_I32, 2, {2, 2}}};
    const int32_t ids[6] = {5, 6, 1, 7, 1, 0}, mask[6] = {1, 1, 1, 1, 1, 0}, labels[4] = {-100, -100, -100, -100};
    StWriter w;
    st_writer_open(&w, path, d, 3, NULL);
    st_writer_write_i32(&w, ids, 6);
    st_writer_write_i32(&w, mask, 6);
    st_writer_write_i32(&w, labels, 4);
    st_writer_close(&w);
}

static void ignored_labels(void) {
    char path[256], args[1024];
    snprintf(path, sizeof path, "%s/ignored.safetensors", tmp);
    write_ignored_batch(path);
    snprintf(args, sizeof args, "loss --model tests/fixtures/trainer_model --batch %s", path);
    expect_refusal("loss of a batch whose labels are all -100", "lossnan", run("lossnan", args),
                   "every one of its 4 entries is -100", NULL);
    snprintf(args, sizeof args, "overfit --model tests/fixtures/trainer_model --batch %s --steps 2 --output_dir %s/of",
             path, tmp);
    expect_refusal("overfit on a batch whose labels are all -100", "overfitnan", run("overfitnan", args),
                   "every one of its 4 entries is -100", NULL);
}

static void export_guards(void) {
    char args[2048], dir[256], lockp[300];
    // a finished run to export
    snprintf(args, sizeof args, MODEL "--data_dir tests/fixtures/trainer_data --do_train --max_steps 1 "
             "--per_device_train_batch_size 4 --output_dir %s/run --cache_dir %s/cache", tmp, tmp);
    if (!test_check(run("run", args) == 0, "export: a 1-step run to export exits 0")) return;
    // a directory a live run holds: its lock, taken as output_dir_lock takes it
    snprintf(dir, sizeof dir, "%s/live", tmp);
    mkdir(dir, 0755);
    snprintf(lockp, sizeof lockp, "%s/.train_t5.lock", dir);
    int fd = open(lockp, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) t5_fail("cannot take %s", lockp);
    if (write(fd, "pid 4242 on host testhost\n", 26) != 26) t5_fail("cannot write %s", lockp);
    char marker[300];
    snprintf(marker, sizeof marker, "%s/config.json", dir);
    write_text(marker, "{\"the live run's\": true}\n");
    snprintf(args, sizeof args, "export %s/run %s --overwrite", tmp, dir);
    expect_refusal("export --overwrite into a directory a live run holds", "exp_live", run("exp_live", args),
                   "export: OUT", "is in use by another train_t5 run (pid 4242 on host testhost");
    char *t = test_slurp(marker);
    test_check(t && strstr(t, "the live run's"), "export: the live run's files are untouched");
    free(t);
    close(fd);
    // free again: the export goes through, its line last
    snprintf(args, sizeof args, "export %s/run %s/free", tmp, tmp);
    int rc = run("exp_free", args);
    t = log_of("exp_free");
    snprintf(marker, sizeof marker, "%s/free/model.safetensors", tmp);
    test_check(rc == 0 && strstr(t, "exported ") && access(marker, F_OK) == 0,
               "export into a free directory: exit 0, the \"exported\" line, the model there");
    free(t);
}

static void ranks_agree(void) {
    const char *base = MODEL "--data_dir tests/fixtures/trainer_data --do_train --max_steps 2 --save_strategy no";
    struct {
        const char *what, *a, *b, *needle;
    } cases[] = {
        {"--learning_rate", "--learning_rate 1e-3", "--learning_rate 2e-3", "--learning_rate 0.002 (rank 0: --learning_rate 0.001)"},
        {"--seed", "--seed 1", "--seed 2", "--seed 2 (rank 0: --seed 1)"},
        {"--max_steps", "", "--max_steps 3", "--max_steps 3 (rank 0: --max_steps 2)"},
        {"--label_smoothing", "", "--label_smoothing 0.1", "--label_smoothing_factor 0.10000000000000001"},
        {"--per_device_train_batch_size", "--per_device_train_batch_size 4", "--per_device_train_batch_size 6",
         "--per_device_train_batch_size 6"},
        {"--sampler", "--sampler random", "--sampler sequential", "--sampler sequential"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 ./train_t5 %s %s "
                 "--output_dir %s/agree_a --cache_dir %s/cache : -np 1 ./train_t5 %s %s --output_dir %s/agree_b "
                 "--cache_dir %s/cache > %s/agree.log 2>&1", base, cases[i].a, tmp, tmp, base, cases[i].b, tmp, tmp, tmp);
        int rc = sh(cmd);
        char what[200];
        snprintf(what, sizeof what, "ranks started with different %s", cases[i].what);
        char *t = log_of("agree");
        int errors = 0;
        for (const char *p = t; (p = strstr(p, "error: ")); p++) errors++;
        char line[600];
        const char *e = strstr(t, "error: ");
        snprintf(line, sizeof line, "%s: exit %d, %d error line(s), naming rank 1 and the flag: %.300s", what, rc,
                 errors, e ? e : "(none)");
        char *nl = strchr(line + strlen(what), '\n');
        if (nl) *nl = '\0';
        test_check(rc != 0 && errors == 1 && strstr(t, "rank 1 was started with other settings than rank 0") &&
                       strstr(t, cases[i].needle),
                   line);
        free(t);
    }
    // what may differ: the output directory (a host's own disk) -- the job runs
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 ./train_t5 %s --output_dir "
             "%s/same_a --cache_dir %s/cache : -np 1 ./train_t5 %s --output_dir %s/same_b --cache_dir %s/cache2 "
             "> %s/same.log 2>&1", base, tmp, tmp, base, tmp, tmp, tmp);
    test_check(sh(cmd) == 0, "ranks with different --output_dir and --cache_dir (per-host paths) train: exit 0");
}

// Start-up lines that tell the truth, and a plan that refuses before anything is allocated.
static void startup_lines(void) {
    char args[2048];
    // the CPU backend's plan against this machine's memory: t5-11b at batch 16 is hundreds of GiB
    snprintf(args, sizeof args, "--device cpu --model t5-11b --init random --tokenizer_name data/sample/spiece.model "
             "--data_dir tests/fixtures/trainer_data --do_train --per_device_train_batch_size 16 --output_dir %s/big "
             "--cache_dir %s/cache", tmp, tmp);
    double t0 = now_seconds();
    int rc = run("big", args);
    double dt = now_seconds() - t0;
    char what[200];
    snprintf(what, sizeof what, "t5-11b at batch 16 on the CPU: refused by the plan before any allocation (%.1f s)", dt);
    expect_refusal(what, "big", rc, "of host memory on the CPU backend", "is available; HINT: lower");
    test_check(dt < 10, "... and at once (under 10 s: no random init first)");
    // gradient checkpointing said as such
    snprintf(args, sizeof args, MODEL "--data_dir tests/fixtures/trainer_data --do_train --max_steps 1 "
             "--gradient_checkpointing --output_dir %s/gc --cache_dir %s/cache", tmp, tmp);
    rc = run("gc", args);
    char *t = log_of("gc");
    test_check(rc == 0 && strstr(t, "gradient checkpointing: each block keeps its input only, and backward "
                                    "recomputes the block") && !strstr(t, "backward does not recompute them"),
               "--gradient_checkpointing: the start-up line says blocks are recomputed (not that nothing is)");
    free(t);
    // an evaluation-only run with a WarmupLR config: no training scheduler claimed
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/warmup.json", tmp);
    write_text(cfg, "{\"train_micro_batch_size_per_gpu\": \"auto\", \"scheduler\": {\"type\": \"WarmupLR\", "
                    "\"params\": {\"warmup_num_steps\": \"auto\"}}, \"zero_optimization\": {\"stage\": 2}}\n");
    snprintf(args, sizeof args, MODEL "--data_dir data/sample --do_eval --n_val 4 --deepspeed %s "
             "--output_dir %s/evalonly --cache_dir %s/cache", cfg, tmp, tmp);
    snprintf(args + strlen(args), sizeof args - strlen(args), " --explain");
    rc = run("evalonly", args);
    t = log_of("evalonly");
    test_check(rc == 0 && strstr(t, "evaluation only, fp32, zero stage 2") && !strstr(t, "scheduler linear"),
               "an evaluation-only run with a WarmupLR config: the config line says evaluation only, no scheduler");
    free(t);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    snprintf(tmp, sizeof tmp, "/tmp/t5_test_guards.XXXXXX");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    empty_splits();
    output_under_file();
    ignored_labels();
    export_guards();
    ranks_agree();
    startup_lines();
    if (!test_failed_count) rm_rf(tmp);
    else printf("logs kept in %s\n", tmp);
    return test_summary();
}
