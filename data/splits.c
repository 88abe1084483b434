// data/splits.c: split -> TextSpec / Dataset (see splits.h).
#include "splits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"

static const char *const SPLIT_NAMES[SPLIT_COUNT] = {"train", "val", "test"};

const char *split_name(Split s) { return SPLIT_NAMES[s]; }

// T5 paper task prefixes use full language names.
static const struct {
    const char *code, *name;
} LANGS[] = {{"en", "English"}, {"ro", "Romanian"}, {"de", "German"}, {"fr", "French"}};

static const char *lang_name(const char *code, size_t len) {
    for (size_t i = 0; i < sizeof LANGS / sizeof LANGS[0]; i++)
        if (strlen(LANGS[i].code) == len && !strncmp(LANGS[i].code, code, len)) return LANGS[i].name;
    return NULL;
}

const char *data_task_prefix(const char *task) {
    static char prefix[128];
    const char *head = "translation_", *mid = strstr(task, "_to_");
    if (strncmp(task, head, strlen(head)) == 0 && mid) {
        const char *src = task + strlen(head);
        const char *s = lang_name(src, (size_t)(mid - src)), *t = lang_name(mid + 4, strlen(mid + 4));
        if (s && t) {
            snprintf(prefix, sizeof prefix, "translate %s to %s: ", s, t);
            return prefix;
        }
    }
    t5_fail("--task \"%s\": expected translation_X_to_Y with X, Y among en, ro, de, fr (e.g. translation_en_to_ro)", task);
}

const char *data_source_prefix(const DataArgs *a) {
    if (a->source_prefix) return a->source_prefix;
    if (a->task) return data_task_prefix(a->task);
    return "";
}

static const char *jsonl_file(const DataArgs *a, Split s) {
    return s == SPLIT_TRAIN ? a->train_file : s == SPLIT_VAL ? a->validation_file : a->test_file;
}

static char *dir_file(const char *dir, Split s, const char *ext) {
    char name[32];
    snprintf(name, sizeof name, "%s.%s", SPLIT_NAMES[s], ext);
    return path_join(dir, name);
}

static int prepared_exists(const DataArgs *a, Split s) {
    if (!a->data_dir) return 0;
    char *p = dir_file(a->data_dir, s, "t5ds");
    int ok = path_exists(p);
    free(p);
    return ok;
}

int data_split_available(const DataArgs *a, Split s) {
    if (a->data_dir) {
        if (prepared_exists(a, s)) return 1;
        char *p = dir_file(a->data_dir, s, "source");
        int ok = path_exists(p);
        free(p);
        return ok;
    }
    return jsonl_file(a, s) != NULL;
}

void data_split_spec(const DataArgs *a, Split s, TextSpec *spec, char **spec_storage) {
    memset(spec, 0, sizeof *spec);
    *spec_storage = NULL;
    spec->source_prefix = data_source_prefix(a);
    spec->max_examples = a->n[s];
    spec->src_lang = a->source_lang;
    spec->tgt_lang = a->target_lang;
    if (a->data_dir) {
        char *src = dir_file(a->data_dir, s, "source"), *tgt = dir_file(a->data_dir, s, "target");
        size_t ls = strlen(src) + 1, lt = strlen(tgt) + 1;
        char *both = mallocCheck(ls + lt);  // one allocation owns both paths
        memcpy(both, src, ls);
        memcpy(both + ls, tgt, lt);
        free(src);
        free(tgt);
        spec->format = TEXT_PAIRS;
        spec->source_path = both;
        spec->target_path = both + ls;
        *spec_storage = both;
        if (!path_exists(spec->source_path))
            t5_fail("--data_dir %s: no %s.source (and no %s.t5ds); HINT: the directory needs %s.source and %s.target",
                    a->data_dir, SPLIT_NAMES[s], SPLIT_NAMES[s], SPLIT_NAMES[s], SPLIT_NAMES[s]);
    } else {
        const char *f = jsonl_file(a, s);
        if (!f) t5_fail("no %s data: pass --%s_file", SPLIT_NAMES[s], s == SPLIT_TRAIN ? "train" : s == SPLIT_VAL ? "validation" : "test");
        spec->format = TEXT_JSONL;
        spec->source_path = f;
    }
}

static char *default_cache_dir(void) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *base = xdg && *xdg ? path_join(xdg, "train_t5") : path_join(home && *home ? home : "/tmp", ".cache/train_t5");
    char *dir = path_join(base, "datasets");
    free(base);
    return dir;
}

void data_open_split(const DataArgs *a, Split s, const Spm *spm, const char *cache_dir, Dataset *ds) {
    if (prepared_exists(a, s)) {
        char *p = dir_file(a->data_dir, s, "t5ds");
        dataset_open(ds, p);
        free(p);
        if (a->n[s] > 0 && (uint64_t)a->n[s] < ds->count) ds->count = (uint64_t)a->n[s];  // first N, as HF's select(range(N))
        return;
    }
    TextSpec spec;
    char *storage;
    data_split_spec(a, s, &spec, &storage);
    char *dir = cache_dir ? NULL : default_cache_dir();
    mkdir_p(cache_dir ? cache_dir : dir);
    char *path = dataset_cache_path(cache_dir ? cache_dir : dir, SPLIT_NAMES[s], &spec, spm);
    if (!path_exists(path)) dataset_prepare(&spec, spm, path);
    dataset_open(ds, path);
    free(path);
    free(dir);
    free(storage);
}
