// tests/test_files.h: the small file and JSON readers the C tests share (a test reads what
// ./train_t5 or a fixture generator wrote). Needs common/check.h and cJSON.
#pragma once
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#include "../common/check.h"

// The whole file as a string; an empty string when it cannot be read (a check then fails on it).
static inline char *test_slurp(const char *path) {
    char *t = read_text_file(path, NULL);
    return t ? t : calloc(1, 1);
}

// A JSON file the test needs: missing or malformed ends the test binary with the path
// (hint: how to make the file, or "").
static inline cJSON *test_load_json(const char *path, const char *hint) {
    char *text = read_text_file(path, NULL);
    if (!text) t5_fail("%s: cannot open%s", path, hint);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) t5_fail("%s: malformed JSON", path);
    return j;
}

// o[key] as a number; NAN when absent or not a number (a comparison with it then fails).
static inline double test_json_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
