// tests/test_signals.c: a training run stopped by SIGTERM / SIGINT / SIGUSR1 (trainer/signals.h)
// finishes its step, saves checkpoint-N, exits 0, and resuming from that checkpoint ends
// BIT FOR BIT where an uninterrupted run ends: model.safetensors byte for byte, and every
// logged loss, grad_norm, learning_rate and eval_loss equal as doubles.
//   random   SIGTERM from outside at a random moment of the run (the delay is printed)
//   begin    SIGTERM before the first step finishes: checkpoint-1
//   eval     SIGUSR1 during the first evaluation (step 3): checkpoint-3 with its eval entry
//   saved    SIGINT at a step --save_steps saves anyway (the stop does not save it again)
//   twice    a second signal ends the process at once (its default action), no checkpoint
//   ranks    2 CPU ranks under mpirun, SIGTERM to rank 1 only: both stop after the same step
// The resumed runs continue the same way the user would: --resume_from_checkpoint, or the
// same command again (run_translation.py's resume from the last checkpoint in --output_dir).
// Run from the repository root after `make` (uses ./train_t5; the tiny fixture model on CPU).
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "test.h"
#include "test_tmp.h"

#define STEPS 10           // each run's --max_steps (24 examples, batch 4: 6 steps an epoch)
#define WAIT_START_S 120.0 // the run's start-up (tokenizing the fixture) may take this long at most

static char tmp[] = "/tmp/t5_test_signals.XXXXXX";

// The flags every run shares; out: --output_dir; extra: more flags.
static void flags(char *buf, size_t cap, const char *out, const char *extra) {
    snprintf(buf, cap,
             "./train_t5 --device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "
             "--data_dir %s/data --per_device_train_batch_size 4 --logging_steps 1 --max_steps %d --do_train "
             "--disable_tqdm --cache_dir %s/cache --output_dir %s/%s %s",
             tmp, STEPS, tmp, tmp, out, extra);
}

// Runs `env cmd` (exec'd by sh, so the status is train_t5's own) with stdout+stderr in log.
static int run_cmd(const char *env, const char *cmd, const char *log) {
    char full[4096];
    snprintf(full, sizeof full, "%s exec %s > '%s/%s' 2>&1", env, cmd, tmp, log);
    return system(full);
}

static char *read_log(const char *log) {
    char *p = path_join(tmp, log);
    char *text = read_text_file(p, NULL);
    free(p);
    return text ? text : calloc(1, 1);
}

static void show_log(const char *log) {
    char *text = read_log(log);
    printf("       | %.3000s\n", text);
    free(text);
}

static int exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// The checkpoint the stop message names ("the checkpoint is PATH"), or NULL.
static char *stop_checkpoint(const char *log) {
    char *text = read_log(log), *at = strstr(text, "the checkpoint is ");
    char *ckpt = NULL;
    if (at) {
        at += strlen("the checkpoint is ");
        size_t n = strcspn(at, " \n");
        ckpt = calloc(n + 1, 1);
        memcpy(ckpt, at, n);
    }
    free(text);
    return ckpt;
}

static int file_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        na += ca != EOF;
        nb += cb != EOF;
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same && na > 0 && na == nb;
}

static cJSON *load_state(const char *out) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s/trainer_state.json", tmp, out);
    char *text = read_text_file(path, NULL);
    cJSON *st = text ? cJSON_Parse(text) : NULL;
    free(text);
    return st;
}

// Every numeric value of every log_history entry but the timing ones, equal as doubles, in
// the same entries at the same steps.
static int same_history(const char *what, const char *got_out, const char *want_out) {
    cJSON *got = load_state(got_out), *want = load_state(want_out);
    const cJSON *hg = cJSON_GetObjectItem(got, "log_history"), *hw = cJSON_GetObjectItem(want, "log_history");
    int n = cJSON_GetArraySize(hw), bad = 0, compared = 0;
    char first[300] = "";
    if (!hg || !hw || cJSON_GetArraySize(hg) != n) bad = 1;
    for (int i = 0; !bad && i < n; i++) {
        const cJSON *eg = cJSON_GetArrayItem(hg, i), *ew = cJSON_GetArrayItem(hw, i), *v;
        cJSON_ArrayForEach(v, ew) {
            // train_loss: HF's _total_loss_scalar restarts at 0 on resume and is divided by all steps;
            // train_t5 does the same, so it differs from an uninterrupted run's by design
            if (!cJSON_IsNumber(v) || strstr(v->string, "runtime") || strstr(v->string, "per_second") ||
                !strcmp(v->string, "train_loss"))
                continue;
            const cJSON *g = cJSON_GetObjectItem(eg, v->string);
            compared++;
            if (!cJSON_IsNumber(g) || g->valuedouble != v->valuedouble) {
                if (!bad++)
                    snprintf(first, sizeof first, " (first: entry %d %s %.17g, want %.17g)", i, v->string,
                             g ? g->valuedouble : -1.0, v->valuedouble);
            }
        }
    }
    char buf[600];
    snprintf(buf, sizeof buf, "%s: log_history as the uninterrupted run's: %d entries, %d numbers, %d differ%s", what, n,
             compared, bad, first);
    cJSON_Delete(got);
    cJSON_Delete(want);
    return test_check(n > 0 && compared > 0 && !bad, buf);
}

// The resumed run's final model and log against the uninterrupted run `ref`.
static void check_same_as(const char *what, const char *out, const char *ref) {
    char a[600], b[600], buf[900];
    snprintf(a, sizeof a, "%s/%s/model.safetensors", tmp, out);
    snprintf(b, sizeof b, "%s/%s/model.safetensors", tmp, ref);
    snprintf(buf, sizeof buf, "%s: the final model.safetensors equals the uninterrupted run's byte for byte", what);
    test_check(file_equal(a, b), buf);
    same_history(what, out, ref);
}

// A stopped run: exit 0, the message, checkpoint-<step> whole (no .tmp), then the resume.
// resume_by_flag: --resume_from_checkpoint; else the same command again.
static void check_stop_and_resume(const char *what, int status, const char *out, const char *log, int want_step,
                                  const char *signame, const char *extra, int resume_by_flag, const char *ref) {
    char buf[900], path[700], cmd[3000];
    snprintf(buf, sizeof buf, "%s: the stopped run exits 0 (status %d)", what, status);
    if (!test_check(exited_ok(status), buf)) {
        show_log(log);
        return;
    }
    char *text = read_log(log);
    char want[200];
    snprintf(want, sizeof want, "stopped by %s", signame);
    snprintf(buf, sizeof buf, "%s: the message names %s, the checkpoint and the command to continue", what, signame);
    test_check(strstr(text, want) && strstr(text, "To continue: ./train_t5 ") && strstr(text, "--resume_from_checkpoint"),
               buf);
    free(text);
    char *ckpt = stop_checkpoint(log);
    snprintf(path, sizeof path, "%s/%s/checkpoint-%d", tmp, out, want_step);
    // no step is lost: the checkpoint is of the last step the run computed (its last loss line)
    char *text2 = read_log(log);
    int steps_done = 0;
    for (const char *p = text2; (p = strstr(p, "{'loss': ")); p++) steps_done++;
    free(text2);
    const char *slash = ckpt ? strrchr(ckpt, '-') : NULL;
    int ckpt_step = slash ? atoi(slash + 1) : -1;
    snprintf(buf, sizeof buf, "%s: checkpoint-%d is saved, of the last step computed (%d)%s (named: %s)", what, ckpt_step,
             steps_done, want_step > 0 ? " and the step the signal came in" : "", ckpt ? ckpt : "none");
    int ok = ckpt && path_is_dir(ckpt) && ckpt_step == steps_done && (want_step <= 0 || !strcmp(ckpt, path));
    test_check(ok, buf);
    snprintf(path, sizeof path, "ls '%s/%s' | grep -q '\\.tmp$'", tmp, out);
    snprintf(buf, sizeof buf, "%s: no .tmp directory left", what);
    test_check(system(path) != 0, buf);
    if (!ok) {
        free(ckpt);
        return;
    }
    char resume[800];
    snprintf(resume, sizeof resume, "%s%s%s", extra, resume_by_flag ? " --resume_from_checkpoint " : "",
             resume_by_flag ? ckpt : "");
    flags(cmd, sizeof cmd, out, resume);
    char rlog[128];
    snprintf(rlog, sizeof rlog, "%s.resume.log", out);
    int rc = run_cmd("", cmd, rlog);
    snprintf(buf, sizeof buf, "%s: resuming (%s) exits 0", what, resume_by_flag ? "--resume_from_checkpoint" : "the same command");
    if (!test_check(exited_ok(rc), buf)) show_log(rlog);
    else check_same_as(what, out, ref);
    free(ckpt);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int log_has(const char *log, const char *needle) {
    char *text = read_log(log);
    int has = strstr(text, needle) != NULL;
    free(text);
    return has;
}

// SIGTERM from outside after a random delay into training (the handler is on once "Running
// training" is printed); train_s: how long the reference run trained.
static void random_stop(double train_s) {
    char cmd[3000], full[3200], out[700];
    flags(cmd, sizeof cmd, "random", "");
    snprintf(full, sizeof full, "exec %s > '%s/random.log' 2>&1", cmd, tmp);
    snprintf(out, sizeof out, "%s/random", tmp);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    double delay = train_s * 0.8 * rand() / (double)RAND_MAX;
    int status = 0, stopped = 0;
    // the machine may be slower or faster than for the reference run: a run that ended before
    // the signal is tried again with half the delay
    for (int attempt = 0; attempt < 3 && !stopped; attempt++, delay /= 2) {
        rm_rf(out);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", full, (char *)NULL);
            _exit(127);
        }
        double t0 = now();
        while (now() - t0 < WAIT_START_S && !log_has("random.log", "Running training") && waitpid(pid, NULL, WNOHANG) == 0)
            usleep(20000);
        usleep((useconds_t)(delay * 1e6));
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
        stopped = log_has("random.log", "stopped by SIGTERM on 1 of 1 rank after step");
        printf("       (random: SIGTERM %.3f s into training of ~%.2f s, seed %u: %s)\n", delay, train_s, seed,
               stopped ? "stopped" : "the run had ended");
    }
    if (!test_check(stopped, "random: the signal came before the run ended (it stopped early)")) {
        show_log("random.log");
        return;
    }
    check_stop_and_resume("random", status, "random", "random.log", 0, "SIGTERM", "", 1, "ref");
}

// A second signal: the default action at once (killed by it), no checkpoint of that step.
static void second_signal(const char *what, const char *spec, int want_sig) {
    char cmd[3000], env[200], log[64], buf[600], path[700];
    flags(cmd, sizeof cmd, what, "");
    snprintf(env, sizeof env, "T5_TEST_SIGNAL=%s", spec);
    snprintf(log, sizeof log, "%s.log", what);
    int status = run_cmd(env, cmd, log);
    snprintf(buf, sizeof buf, "%s (%s): the process ends by signal %d at once (status %d)", what, spec, want_sig, status);
    if (!test_check(WIFSIGNALED(status) && WTERMSIG(status) == want_sig, buf)) show_log(log);
    snprintf(path, sizeof path, "%s/%s/checkpoint-2", tmp, what);
    snprintf(buf, sizeof buf, "%s: no checkpoint-2 (it did not wait for the step's save)", what);
    test_check(!path_exists(path), buf);
}

// 2 CPU ranks, the signal reaches rank 1 alone: both stop after the same step (the collective
// at the step boundary); resuming on 2 ranks ends as 2 uninterrupted ranks do.
static void ranks_stop(void) {
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        test_check(0, "ranks: mpirun is needed (make deps installs openmpi-bin)");
        return;
    }
    char cmd[3000], mp[3200];
    const char *launcher = "mpirun --allow-run-as-root --oversubscribe -np 2 ";
    flags(cmd, sizeof cmd, "ranks_ref", "");
    snprintf(mp, sizeof mp, "%s%s", launcher, cmd);
    if (!test_check(exited_ok(run_cmd("", mp, "ranks_ref.log")), "ranks: the uninterrupted 2-rank run exits 0")) {
        show_log("ranks_ref.log");
        return;
    }
    flags(cmd, sizeof cmd, "ranks", "");
    snprintf(mp, sizeof mp, "%s%s", launcher, cmd);
    int status = run_cmd("T5_TEST_SIGNAL=step4:TERM@1", mp, "ranks.log");
    test_check(log_has("ranks.log", "stopped by SIGTERM on 1 of 2 ranks after step 4"),
               "ranks: rank 0, which got no signal, stops after step 4 with rank 1 and says so");
    if (!test_check(exited_ok(status), "ranks: mpirun exits 0")) {
        show_log("ranks.log");
        return;
    }
    // resume on 2 ranks too: the same command, through mpirun
    if (!test_check(exited_ok(run_cmd("", mp, "ranks.resume.log")), "ranks: the same command resumes on 2 ranks, exit 0")) {
        show_log("ranks.resume.log");
        return;
    }
    check_same_as("ranks", "ranks", "ranks_ref");
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed: %s", strerror(errno));
    char cmd[3000], buf[300];
    // the fixture's 24 training lines, and 4 of them as a validation split
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/data && cp tests/fixtures/trainer_data/train.* %s/data/ && head -n 4 "
             "tests/fixtures/trainer_data/train.source > %s/data/val.source && head -n 4 "
             "tests/fixtures/trainer_data/train.target > %s/data/val.target",
             tmp, tmp, tmp, tmp);
    if (system(cmd) != 0) t5_fail("cannot write the test data into %s", tmp);

    // the uninterrupted runs everything is compared with
    flags(cmd, sizeof cmd, "ref", "");
    if (!test_check(exited_ok(run_cmd("", cmd, "ref.log")), "ref: the uninterrupted run exits 0")) show_log("ref.log");
    cJSON *ref_state = load_state("ref");
    const cJSON *hist = cJSON_GetObjectItem(ref_state, "log_history");
    const cJSON *rt = cJSON_GetObjectItem(cJSON_GetArrayItem(hist, cJSON_GetArraySize(hist) - 1), "train_runtime");
    double train_s = cJSON_IsNumber(rt) ? rt->valuedouble : 1.0;  // the training loop alone, not the start-up
    cJSON_Delete(ref_state);
    flags(cmd, sizeof cmd, "ref_eval", "--eval_strategy steps --eval_steps 3");
    if (!test_check(exited_ok(run_cmd("", cmd, "ref_eval.log")), "ref_eval: the uninterrupted run with evaluation exits 0"))
        show_log("ref_eval.log");

    random_stop(train_s);

    flags(cmd, sizeof cmd, "begin", "");
    int st = run_cmd("T5_TEST_SIGNAL=begin:TERM", cmd, "begin.log");
    check_stop_and_resume("begin", st, "begin", "begin.log", 1, "SIGTERM", "", 0, "ref");

    flags(cmd, sizeof cmd, "eval", "--eval_strategy steps --eval_steps 3");
    st = run_cmd("T5_TEST_SIGNAL=eval:USR1", cmd, "eval.log");
    cJSON *state = NULL;
    {
        char p[700];
        snprintf(p, sizeof p, "%s/eval/checkpoint-3/trainer_state.json", tmp);
        char *text = read_text_file(p, NULL);
        state = text ? cJSON_Parse(text) : NULL;
        free(text);
        const cJSON *h = cJSON_GetObjectItem(state, "log_history");
        const cJSON *last = cJSON_GetArrayItem(h, cJSON_GetArraySize(h) - 1);
        snprintf(buf, sizeof buf, "eval: checkpoint-3's log ends with the evaluation of step 3 (finished, then saved)");
        const cJSON *step = last ? cJSON_GetObjectItem(last, "step") : NULL;
        test_check(last && cJSON_GetObjectItem(last, "eval_loss") && cJSON_IsNumber(step) && step->valuedouble == 3, buf);
    }
    cJSON_Delete(state);
    check_stop_and_resume("eval", st, "eval", "eval.log", 3, "SIGUSR1", "--eval_strategy steps --eval_steps 3", 1,
                          "ref_eval");

    flags(cmd, sizeof cmd, "saved", "--save_steps 2");
    st = run_cmd("T5_TEST_SIGNAL=step4:INT", cmd, "saved.log");
    check_stop_and_resume("saved", st, "saved", "saved.log", 4, "SIGINT", "--save_steps 2", 1, "ref");

    second_signal("twice", "step2:TERM,TERM", SIGTERM);
    second_signal("twice_mixed", "step2:INT,USR1", SIGUSR1);

    ranks_stop();

    rm_rf(tmp);
    return test_summary();
}
