// common/json_read.c: JSON as Python's json reads it (see json_read.h).
//
// cJSON parses; then one pass over the text finds what cJSON accepts and Python does not (and
// "\u0000", which cJSON turns into the end of a C string), and one walk over the tree settles
// duplicate keys. The keys of an object are compared after sorting them (a document of 10^5
// keys costs n log n, not n^2).
#include "json_read.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "utf8.h"

#define PATH_CAP 160   // a key path in a message is cut after this many bytes
#define NOTICE_MAX 3   // duplicate keys named one by one; more are counted

// "byte N (line L, column C)" of text[0..len), for messages; "byte N" for a one-line text.
static void json_where(const char *text, size_t len, size_t at, char *out, size_t cap) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') line++, col = 1;
        else col++;
    }
    if (memchr(text, '\n', len)) snprintf(out, cap, "byte %zu (line %zu, column %zu)", at, line, col);
    else snprintf(out, cap, "byte %zu", at);
}

// ---- the key path of a byte of the text (for "\u0000") -----------------------------------

typedef struct {
    int is_object;
    const char *key;  // object: the raw text of the current key (escapes as written)
    size_t key_len;
    long index;       // array: the current element
} Frame;

static void path_add(char *path, size_t *k, const char *s, size_t n) {
    for (size_t i = 0; i < n && *k + 4 < PATH_CAP; i++) path[(*k)++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    if (*k + 4 >= PATH_CAP && n) memcpy(path + PATH_CAP - 4, "...", 4), *k = PATH_CAP - 1;
    path[*k] = '\0';
}

// The key path ("translation.en", "shards[1].file") of the string that starts at byte `at`
// (its opening quote); the text is valid JSON (cJSON parsed it).
static void json_path_at(const char *t, size_t len, size_t at, char *path) {
    Frame *st = mallocCheck((CJSON_NESTING_LIMIT + 2) * sizeof *st);
    int depth = 0, want_key = 0;
    size_t i = 0;
    while (i < at) {
        char c = t[i];
        if (c == '"') {  // a whole string: a key, or a value
            size_t s = ++i;
            while (i < len && t[i] != '"') i += t[i] == '\\' ? 2 : 1;
            if (depth && st[depth - 1].is_object && want_key) {
                st[depth - 1].key = t + s, st[depth - 1].key_len = i - s;
                want_key = 0;
            }
            i++;
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth <= CJSON_NESTING_LIMIT) st[depth++] = (Frame){c == '{', NULL, 0, 0};
            want_key = c == '{';
        } else if ((c == '}' || c == ']') && depth) {
            depth--;
        } else if (c == ',' && depth) {
            if (st[depth - 1].is_object) want_key = 1;
            else st[depth - 1].index++;
        }
        i++;
    }
    int is_key = depth && st[depth - 1].is_object && want_key;
    size_t k = 0;
    path[0] = '\0';
    for (int d = 0; d < depth; d++) {
        if (st[d].is_object) {
            if (d == depth - 1 && is_key) break;  // the string at `at` is this object's next key
            if (k) path_add(path, &k, ".", 1);
            path_add(path, &k, st[d].key ? st[d].key : "", st[d].key ? st[d].key_len : 0);
        } else {
            char ix[24];
            int n = snprintf(ix, sizeof ix, "[%ld]", st[d].index);
            path_add(path, &k, ix, (size_t)n);
        }
    }
    if (is_key) {  // the key itself, as written
        size_t e = at + 1;
        while (e < len && t[e] != '"') e += t[e] == '\\' ? 2 : 1;
        if (k) path_add(path, &k, ".", 1);
        path_add(path, &k, t + at + 1, (e < len ? e : len) - at - 1);
    }
    freeCheck(st);
}

// ---- what cJSON accepts and Python's json refuses ------------------------------------------

// A number as JSON (and Python) spells it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
static int json_number_ok(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n) return 0;
    if (s[i] == '0') i++;
    else if (s[i] >= '1' && s[i] <= '9')
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    else return 0;
    if (i < n && s[i] == '.') {
        size_t d = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) return 0;
    }
    return i == n;
}

static size_t malformed(const char **what, const char *why, size_t at) {
    *what = why;
    return at;
}

// One pass over the document text[0..end) that cJSON parsed, and the rest of the text: the
// offset of the first thing Python's json refuses as malformed (a raw control character in a
// string or as whitespace, a number such as 01 or 1., text after the document), or `len`.
// A string holding "\u0000" is an error line here.
static size_t json_scan(const char *t, size_t len, size_t end, const char *where, const char **what) {
    for (size_t i = 0; i < end;) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"') {
            size_t start = i++;
            for (; i < end && t[i] != '"'; i++) {
                unsigned char s = (unsigned char)t[i];
                if (s < 0x20) return malformed(what, "a raw control character inside a string", i);
                if (s != '\\') continue;
                i++;
                if (i + 4 < end && t[i] == 'u' && memcmp(t + i + 1, "0000", 4) == 0) {
                    char path[PATH_CAP], key[PATH_CAP + 8] = "the document";
                    json_path_at(t, len, start, path);
                    if (path[0]) snprintf(key, sizeof key, "key \"%s\"", path);
                    t5_fail("%s: %s: a string holding \\u0000 (the NUL character), which train_t5 cannot keep (it "
                            "ends a C string: the text would be cut there); HINT: remove the \\u0000", where, key);
                }
            }
            i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t s = i;
            while (i < end && t[i] && strchr("0123456789+-.eE", t[i])) i++;
            if (!json_number_ok(t + s, i - s)) return malformed(what, "a number spelled as JSON does not (01, 1.)", s);
            continue;
        }
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return malformed(what, "a control character", i);
        i++;
    }
    for (size_t i = end; i < len; i++)
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\n' && t[i] != '\r')
            return malformed(what, "extra text after the JSON document", i);
    return len;
}

// ---- duplicate keys ---------------------------------------------------------------------------

typedef struct {
    const char *where;
    JsonDupRule rule;
    int notices;  // duplicate keys met so far (JSON_DUP_LAST)
    int quiet;    // this document's NOTICEs were printed before (a file read twice)
} Dups;

// 1 the first time `where` asks (config.json is read by the model loader and again for the
// generation defaults: its NOTICE is said once); a short list, then always 1.
static int json_first_notice(const char *where) {
    enum { MAX_SEEN = 16 };
    static char *seen[MAX_SEEN];
    static int nseen;
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i], where) == 0) return 0;
    if (nseen < MAX_SEEN) {
        size_t n = strlen(where) + 1;
        seen[nseen] = mallocCheck(n);
        memcpy(seen[nseen++], where, n);
    }
    return 1;
}

typedef struct {
    cJSON *item;
    int index;  // place in the object
} Keyed;

static int cmp_keyed(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    int c = strcmp(x->item->string, y->item->string);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static void key_path(char *out, const char *prefix, const char *key) {
    size_t k = 0;
    out[0] = '\0';
    path_add(out, &k, prefix, strlen(prefix));
    if (k) path_add(out, &k, ".", 1);
    path_add(out, &k, key, strlen(key));
}

// The duplicate keys of one object settled; then its members, recursively.
static void json_dedupe(cJSON *node, const char *prefix, Dups *d) {
    int n = cJSON_GetArraySize(node);
    if (cJSON_IsObject(node) && n > 1) {
        Keyed *keys = mallocCheck((size_t)n * sizeof *keys);
        int k = 0;
        for (cJSON *it = node->child; it; it = it->next) keys[k] = (Keyed){it, k}, k++;
        qsort(keys, (size_t)n, sizeof *keys, cmp_keyed);
        for (int a = 0, b; a < n; a = b) {
            for (b = a + 1; b < n && strcmp(keys[a].item->string, keys[b].item->string) == 0;) b++;
            if (b - a == 1) continue;
            char path[PATH_CAP], times[32] = "twice";
            key_path(path, prefix, keys[a].item->string);
            if (b - a > 2) snprintf(times, sizeof times, "%d times", b - a);
            if (d->rule == JSON_DUP_REFUSE)
                t5_fail("%s: key \"%s\" appears %s in one object, which this file's readers refuse (or would each "
                        "take another value); HINT: keep one", d->where, path, times);
            if (++d->notices == 1) d->quiet = !json_first_notice(d->where);
            if (d->notices <= NOTICE_MAX && !d->quiet)
                fprintf(stderr, "NOTICE: %s: key \"%s\" appears %s; the last value is used, as Python's json (and "
                                "transformers) reads the file\n", d->where, path, times);
            // Python's dict: the last value, at the first key's place
            cJSON *last = cJSON_DetachItemViaPointer(node, keys[b - 1].item);
            for (int m = a + 1; m < b - 1; m++) cJSON_Delete(cJSON_DetachItemViaPointer(node, keys[m].item));
            cJSON_ReplaceItemViaPointer(node, keys[a].item, last);
        }
        free(keys);
    }
    int i = 0;
    for (cJSON *it = node->child; it; it = it->next, i++) {
        if (!cJSON_IsObject(it) && !cJSON_IsArray(it)) continue;
        char path[PATH_CAP];
        if (cJSON_IsObject(node)) {
            key_path(path, prefix, it->string);
        } else {
            size_t k = 0;
            char ix[24];
            int w = snprintf(ix, sizeof ix, "[%d]", i);
            path_add(path, &k, prefix, strlen(prefix));
            path_add(path, &k, ix, (size_t)w);
        }
        json_dedupe(it, path, d);
    }
}

static const char *g_error_what;  // json_read_error_what

const char *json_read_error_what(void) { return g_error_what; }

cJSON *json_read_parse(const char *text, size_t len, const char *where, JsonDupRule dups, size_t *err_at) {
    char at[96];
    g_error_what = NULL;
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        json_where(text, len, (size_t)(nul - text), at, sizeof at);
        t5_fail("%s: a NUL byte at %s: not a JSON text file; HINT: restore the file (it is damaged, or not JSON)",
                where, at);
    }
    size_t bad;
    if (!utf8_valid(text, len, &bad)) {
        json_where(text, len, bad, at, sizeof at);
        t5_fail("%s: invalid UTF-8 at %s (0x%02x); Python reads the file as UTF-8 and refuses it; HINT: convert the "
                "file to UTF-8 (iconv)", where, at, (unsigned char)text[bad]);
    }
    // a byte-order mark: cJSON skips it, Python's json refuses it ("Unexpected UTF-8 BOM")
    const char *end = NULL;
    int bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0;
    if (text[len] != '\0') t5_die(__FILE__, __LINE__, "json_read_parse: the text must end in a NUL", where);
    // with the NUL in the length, a text that ends too early is an error at byte len, as Python says
    cJSON *root = len && !bom ? cJSON_ParseWithLengthOpts(text, len + 1, &end, 0) : NULL;
    if (!root) {
        const char *ep = len && !bom ? cJSON_GetErrorPtr() : NULL;
        if (err_at) *err_at = ep && ep >= text && ep <= text + len ? (size_t)(ep - text) : bom ? 0 : len;
        if (bom) g_error_what = "a UTF-8 byte-order mark";
        return NULL;
    }
    size_t bad_at = json_scan(text, len, (size_t)(end - text), where, &g_error_what);
    if (bad_at < len) {
        cJSON_Delete(root);
        if (err_at) *err_at = bad_at;
        return NULL;
    }
    Dups d = {where, dups, 0, 0};
    json_dedupe(root, "", &d);
    if (d.notices > NOTICE_MAX && !d.quiet)
        fprintf(stderr, "NOTICE: %s: %d more keys appear more than once; the last value of each is used\n", where,
                d.notices - NOTICE_MAX);
    return root;
}

cJSON *json_read_file(const char *path, JsonDupRule dups, const char *hint) {
    size_t len;
    char *text = read_text_file(path, &len);
    if (!text) return NULL;
    size_t err = 0;
    cJSON *root = json_read_parse(text, len, path, dups, &err);
    if (!root) {
        char at[96];
        json_where(text, len, err, at, sizeof at);
        t5_fail("%s: malformed JSON at %s; HINT: %s", path, at, hint);
    }
    free(text);
    return root;
}
