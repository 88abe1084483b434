// trainer/log_history.c: trainer_state.json's log_history as series (log_history.h).
#include "log_history.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"

const char *const log_key_names[LOG_KEY_COUNT] = {"loss", "eval_loss", "learning_rate", "grad_norm", "eval_bleu"};

#define STATE_FILE "trainer_state.json"

// Line and column (from 1) of byte offset `at` in text.
static void line_col(const char *text, size_t at, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at && text[i]; i++) {
        if (text[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

static const char *json_kind(const cJSON *v) {
    return cJSON_IsString(v) ? "a string" : cJSON_IsBool(v) ? "a boolean" : cJSON_IsArray(v) ? "an array"
           : cJSON_IsObject(v) ? "an object" : "not a number";
}

static void series_push(LogSeries *s, double x, double y) {
    if ((s->n & (s->n - 1)) == 0) {  // 0, 1, 2, 4, ...: grow to the next power of two
        int cap = s->n ? 2 * s->n : 1;
        s->x = reallocCheck(s->x, cap * sizeof *s->x);
        s->y = reallocCheck(s->y, cap * sizeof *s->y);
    }
    s->x[s->n] = x, s->y[s->n] = y, s->n++;
}

// Python's json (so HF's trainer_state.json) writes non-finite floats as the bare words NaN,
// Infinity and -Infinity, which JSON lacks: rewrite each, outside strings, as null (the chart
// leaves nulls out and counts them). Returns a new text; *len is updated.
static char *json_python_nonfinite_to_null(const char *text, size_t *len) {
    static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
    static const size_t word_len[] = {9, 8, 3};
    char *out = mallocCheck(*len * 2 + 1);  // "NaN" -> "null" grows by one byte in three
    size_t o = 0;
    int in_string = 0;
    for (size_t i = 0; i < *len;) {
        char ch = text[i];
        if (in_string) {
            out[o++] = ch, i++;
            if (ch == '\\' && i < *len) out[o++] = text[i++];
            else if (ch == '"') in_string = 0;
            continue;
        }
        if (ch == '"') in_string = 1;
        size_t w = 0;
        for (int k = 0; k < 3 && !w; k++)
            if (*len - i >= word_len[k] && memcmp(text + i, words[k], word_len[k]) == 0) w = word_len[k];
        if (w) {
            memcpy(out + o, "null", 4), o += 4, i += w;
        } else {
            out[o++] = ch, i++;
        }
    }
    out[o] = '\0';
    *len = o;
    return out;
}

// A JSON document, or a one-line error naming the file.
static cJSON *json_load(const char *path, char **text_out) {
    size_t len;
    char *raw = read_text_file(path, &len);
    if (!raw) t5_fail("plot: %s: cannot read it (%s); HINT: check its permissions", path, strerror(errno));
    char *text = json_python_nonfinite_to_null(raw, &len);
    free(raw);
    size_t err = len;  // as HF reads it (json.load; common/json_read.h)
    cJSON *root = json_read_parse(text, len, path, JSON_DUP_LAST, &err);
    if (!root) {
        int line = 0, col = 0;
        line_col(text, err, &line, &col);
        t5_fail("plot: %s: not valid JSON (line %d, column %d); HINT: the file is damaged: restore it, or train "
                "again to rewrite it", path, line, col);
    }
    *text_out = text;
    return root;
}

// The evaluation after training, from eval_results.json next to the state, at global_step.
static void add_final_eval(LogRun *r, const cJSON *state) {
    const char *slash = strrchr(r->state_path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - r->state_path) : 1, slash ? r->state_path : ".");
    char *path = path_join(dir, "eval_results.json");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(state, "global_step");
    if (!path_exists(path) || !cJSON_IsNumber(step)) {  // a FIFO there is refused when read, not skipped
        free(path);
        return;
    }
    char *text;
    cJSON *root = json_load(path, &text);
    const LogKey keys[] = {LOG_EVAL_LOSS, LOG_EVAL_BLEU};
    for (int i = 0; i < 2; i++) {
        LogKey k = keys[i];
        const cJSON *v = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, log_key_names[k]) : NULL;
        if (!v) continue;
        if (cJSON_IsNull(v)) {
            r->skipped++;
            continue;
        }
        if (!cJSON_IsNumber(v))
            t5_fail("plot: %s: \"%s\" is %s, expected a number; HINT: the file is damaged: evaluate again to "
                    "rewrite it", path, log_key_names[k], json_kind(v));
        series_push(&r->series[k], step->valuedouble, v->valuedouble);
        r->eval_from_results = 1;
    }
    cJSON_Delete(root);
    free(text);
    free(path);
}

void log_history_load(LogRun *r, const char *dir) {
    memset(r, 0, sizeof *r);
    if (path_exists(dir) && !path_is_dir(dir)) file_refuse_non_regular(dir, "plot: a run's folder or its " STATE_FILE);
    if (path_is_file(dir)) {
        size_t n = strlen(dir) + 1;  // the file itself, as given
        r->state_path = mallocCheck(n);
        memcpy(r->state_path, dir, n);
    } else if (!path_exists(dir)) {
        t5_fail("plot: %s: no such folder; HINT: give the --output_dir of a training run (the folder holding "
                STATE_FILE ")", dir);
    } else {
        r->state_path = path_join(dir, STATE_FILE);
        if (!path_exists(r->state_path))
            t5_fail("plot: %s: not found; HINT: give a run's --output_dir after training (--do_train writes "
                    STATE_FILE " at the end) or one of its checkpoint-N/ folders", r->state_path);
    }
    const char *path = r->state_path;
    char *text;
    cJSON *root = json_load(path, &text);
    const cJSON *lh = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "log_history") : NULL;
    if (!cJSON_IsArray(lh))
        t5_fail("plot: %s: no \"log_history\" array; HINT: give the trainer_state.json that train_t5 or HF Trainer "
                "writes into --output_dir", path);
    int i = 0, points = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lh) {
        if (!cJSON_IsObject(e))
            t5_fail("plot: %s: log_history[%d] is %s, expected an object; HINT: the file is damaged: train again to "
                    "rewrite it", path, i, json_kind(e));
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(e, "step");
        for (int k = 0; k < LOG_KEY_COUNT; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, log_key_names[k]);
            if (!v) continue;
            if (cJSON_IsNull(v)) {
                r->skipped++;
                continue;
            }
            if (!cJSON_IsNumber(v))
                t5_fail("plot: %s: log_history[%d].%s is %s, expected a number; HINT: the file is damaged: train "
                        "again to rewrite it", path, i, log_key_names[k], json_kind(v));
            if (!cJSON_IsNumber(step))
                t5_fail("plot: %s: log_history[%d] has \"%s\" but no numeric \"step\"; HINT: every logged entry "
                        "needs the step it was logged at", path, i, log_key_names[k]);
            series_push(&r->series[k], step->valuedouble, v->valuedouble);
            points++;
        }
        i++;
    }
    r->entries = i;
    if (r->series[LOG_EVAL_LOSS].n == 0 && r->series[LOG_EVAL_BLEU].n == 0) add_final_eval(r, root);
    if (points == 0)
        t5_fail("plot: %s: log_history has %d entries but none with loss, eval_loss, learning_rate, grad_norm or "
                "eval_bleu; HINT: train with --logging_steps below the number of steps, or with --do_eval",
                path, i);
    cJSON_Delete(root);
    free(text);
}

void log_history_free(LogRun *r) {
    for (int k = 0; k < LOG_KEY_COUNT; k++) free(r->series[k].x), free(r->series[k].y);
    free(r->state_path);
    memset(r, 0, sizeof *r);
}
