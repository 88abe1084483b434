// cmd/prepare.c: `train_t5 prepare` (see cmd.h).
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../common/fileio.h"
#include "../common/flags.h"
#include "../data/dataset.h"
#include "../data/splits.h"
#include "../data/spm.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))


// --tokenizer_name: a spiece.model file, or a directory holding one (an HF model dir).
static char *tokenizer_path(const char *name) {
    if (!name) t5_fail("prepare: --tokenizer_name is required (a spiece.model file or a model directory holding one)");
    if (path_is_dir(name)) {
        char *p = path_join(name, "spiece.model");
        if (!path_exists(p))
            t5_fail("--tokenizer_name %s: the directory has no spiece.model; pass the file itself or a T5 model "
                    "directory",
                    name);
        return p;
    }
    if (!path_exists(name)) t5_fail("--tokenizer_name %s: no such file or directory; pass a spiece.model file", name);
    return strdup(name);
}

// "translation_en_to_ro" -> "en", "ro" (for JSON lines when --source_lang / --target_lang
// are not given, the task names the keys).
static void langs_from_task(const char *task, char *src, char *tgt, size_t cap) {
    const char *head = "translation_", *mid = task ? strstr(task, "_to_") : NULL;
    src[0] = tgt[0] = '\0';
    if (!task || strncmp(task, head, strlen(head)) != 0 || !mid) return;
    size_t ls = (size_t)(mid - task) - strlen(head), lt = strlen(mid + 4);
    if (ls + 1 > cap || lt + 1 > cap) return;
    memcpy(src, task + strlen(head), ls);
    src[ls] = '\0';
    memcpy(tgt, mid + 4, lt + 1);
}

static int text_split_present(const DataArgs *a, Split s) {
    if (!a->data_dir) return data_split_available(a, s);
    char name[32];
    snprintf(name, sizeof name, "%s.source", split_name(s));
    char *p = path_join(a->data_dir, name);
    int ok = path_exists(p);
    free(p);
    return ok;
}

// The flag combinations prepare needs; fills the JSON-lines language keys from --task.
// ls, lt (cap bytes each) hold the task's languages, which a->source_lang may point at.
static void prepare_check_args(DataArgs *a, const char *output_dir, char *ls, char *lt, size_t cap) {
    int jsonl = a->train_file || a->validation_file || a->test_file;
    if (a->data_dir && jsonl)
        t5_fail("prepare: give either --data_dir or --train_file/--validation_file/--test_file, not both");
    if (!a->data_dir && !jsonl)
        t5_fail("prepare: no text: pass --data_dir DIR (with train.source/.target ...) or --train_file F (JSON lines)");
    if (!output_dir) t5_fail("prepare: --output_dir is required (where train.t5ds, val.t5ds, test.t5ds go)");
    if (a->data_dir && !path_is_dir(a->data_dir))
        t5_fail("--data_dir %s: not a directory; it should hold train.source, train.target, ...", a->data_dir);
    for (int s = 0; s < SPLIT_COUNT; s++)
        if (a->n[s] < -1)
            t5_fail("--n_%s %d: give a count (0 or more), or -1 for all", split_name((Split)s), a->n[s]);
    langs_from_task(a->task, ls, lt, cap);
    if (jsonl && !a->source_lang) a->source_lang = ls[0] ? ls : NULL;
    if (jsonl && !a->target_lang) a->target_lang = lt[0] ? lt : NULL;
    if (jsonl && (!a->source_lang || !a->target_lang))
        t5_fail("prepare: JSON lines need --source_lang and --target_lang (the keys inside \"translation\"), or a "
                "--task translation_X_to_Y naming them");
}

// Tokenize one split into out, read it back (dataset_open validates it) and print its line.
static void prepare_split(Split s, const Spm *spm, const TextSpec *spec, const char *out) {
    double t0 = clock_seconds();
    dataset_prepare(spec, spm, out);
    Dataset ds;
    dataset_open(&ds, out);  // validates what was just written
    double secs = clock_seconds() - t0;
    uint64_t src_tok = 0, tgt_tok = 0;
    int src_max = 0, tgt_max = 0;
    for (uint64_t i = 0; i < ds.count; i++) {
        const int32_t *x, *y;
        int nx, ny;
        dataset_example(&ds, i, &x, &nx, &y, &ny);
        src_tok += (uint64_t)nx;
        tgt_tok += (uint64_t)ny;
        if (nx > src_max) src_max = nx;
        if (ny > tgt_max) tgt_max = ny;
    }
    double c = ds.count ? (double)ds.count : 1.0;
    printf("%-5s %8llu examples %10llu tokens  source max %4d mean %6.1f  target max %4d mean %6.1f  %6.2f s  -> %s\n",
           split_name(s), (unsigned long long)ds.count, (unsigned long long)(src_tok + tgt_tok), src_max,
           (double)src_tok / c, tgt_max, (double)tgt_tok / c, secs, out);
    fflush(stdout);
    dataset_close(&ds);
}

int prepare_main(int argc, char **argv) {
    int start = argc > 1 && !strcmp(argv[1], "prepare") ? 2 : 1;
    DataArgs a = {.n = {-1, -1, -1}};
    const char *tokenizer = NULL, *output_dir = NULL;
    int help = 0;
    FlagSpec specs[] = {
        {"data_dir", FLAG_STRING, &a.data_dir, "directory with {train,val,test}.{source,target} (one example a line)"},
        {"train_file", FLAG_STRING, &a.train_file, "JSON lines: {\"translation\": {SRC: ..., TGT: ...}} per line"},
        {"validation_file", FLAG_STRING, &a.validation_file, "JSON lines, validation split"},
        {"test_file", FLAG_STRING, &a.test_file, "JSON lines, test split"},
        {"source_lang", FLAG_STRING, &a.source_lang, "JSON lines: source key in \"translation\" (default: from --task)"},
        {"target_lang", FLAG_STRING, &a.target_lang, "JSON lines: target key in \"translation\" (default: from --task)"},
        {"task", FLAG_STRING, &a.task, "translation_X_to_Y (X, Y among en ro de fr): sets T5's source prefix"},
        {"source_prefix", FLAG_STRING, &a.source_prefix, "prefix of every source line (overrides --task's)"},
        {"tokenizer_name", FLAG_STRING, &tokenizer, "spiece.model, or a model directory holding one (required)"},
        {"n_train", FLAG_INT, &a.n[SPLIT_TRAIN], "first N training examples (-1: all)"},
        {"n_val", FLAG_INT, &a.n[SPLIT_VAL], "first N validation examples (-1: all)"},
        {"n_test", FLAG_INT, &a.n[SPLIT_TEST], "first N test examples (-1: all)"},
        {"output_dir", FLAG_STRING, &output_dir, "where train.t5ds, val.t5ds, test.t5ds go (required)"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    flags_parse(argc, argv, start, specs, COUNT(specs), "prepare");
    if (help) {
        printf("usage: train_t5 prepare --tokenizer_name T --output_dir D (--data_dir DIR | --train_file F ...)\n");
        flags_print_help(specs, COUNT(specs));
        return 0;
    }
    char ls[32], lt[32];
    prepare_check_args(&a, output_dir, ls, lt, sizeof ls);
    const char *prefix = data_source_prefix(&a);  // checks --task

    int any = 0;
    for (int s = 0; s < SPLIT_COUNT; s++) any |= text_split_present(&a, (Split)s);
    if (!any) t5_fail("--data_dir %s: no train.source, val.source or test.source there", a.data_dir);

    char *tok_path = tokenizer_path(tokenizer);
    Spm *spm = spm_load(tok_path);
    mkdir_p(output_dir);
    printf("prepare: tokenizer %s (%d pieces), source prefix \"%s\"\n", tok_path, spm_piece_count(spm), prefix);
    for (int si = 0; si < SPLIT_COUNT; si++) {
        Split s = (Split)si;
        if (!text_split_present(&a, s)) continue;
        TextSpec spec;
        char *storage;
        data_split_spec(&a, s, &spec, &storage);
        char name[32];
        snprintf(name, sizeof name, "%s.t5ds", split_name(s));
        char *out = path_join(output_dir, name);
        prepare_split(s, spm, &spec, out);
        free(out);
        free(storage);
    }
    spm_free(spm);
    free(tok_path);
    return 0;
}

int cmd_run_prepare(int argc, char **argv) { return prepare_main(argc - 1, argv + 1); }
