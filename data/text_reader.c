// data/text_reader.c: the examples of a split from .source/.target pairs or JSON lines
// (see text_reader.h for the rules and the errors).
#include "text_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/json_read.h"
#include "../common/utf8.h"

struct TextReader {
    TextSpec spec;
    FILE *fs, *ft;         // source / target (ft NULL for JSON lines)
    char *ls, *lt;         // line buffers
    size_t caps, capt;
    char *js, *jt;         // JSON lines: copies of the two strings
    size_t capjs, capjt;
    long line;             // lines read so far
    long count;            // examples to yield
};


// O_NONBLOCK: opening a FIFO must not wait for a writer. A split is read twice (its lines
// counted first, then read), so only a regular file will do: a pipe (--train_file
// /dev/stdin) or a device is refused here, not half-read.
static FILE *open_text(const char *path, const char *what) {
    static const char layout[] = "--data_dir holds train/val/test .source and .target files; --train_file etc. name "
                                 "JSON lines files";
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            t5_fail("%s: is %s, not a regular file (the %s file); HINT: write the data to a regular file first (%s)",
                    path, file_kind_name(st.st_mode), what, layout);
        t5_fail("%s: cannot open the %s file: %s; check the path (%s)", path, what, strerror(err), layout);
    }
    if (fstat(fd, &st) != 0) t5_fail("%s: cannot stat the %s file: %s", path, what, strerror(errno));
    if (S_ISDIR(st.st_mode))
        t5_fail("%s: is a directory, where the %s file is expected; HINT: %s", path, what, layout);
    if (!S_ISREG(st.st_mode))
        t5_fail("%s: is %s, not a regular file (the %s file: it is read twice, counted, then read); HINT: write the "
                "data to a regular file first (%s)",
                path, file_kind_name(st.st_mode), what, layout);
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        t5_fail("%s: cannot set the %s file to blocking reads: %s", path, what, strerror(errno));
    FILE *f = fdopen(fd, "rb");
    if (!f) t5_fail("%s: cannot open the %s file: %s", path, what, strerror(errno));
    return f;
}

// Line ends as Python's universal newlines (open() in text mode, which HF's readers use):
// "\n", "\r\n" and a lone "\r" each end a line, so "a\r\r\nb" is "a", "", "b".
// Lines in f (a last line without an end counts), then rewind. Reads in blocks: cheap next
// to tokenizing, and it lets a pair mismatch be reported before any work.
static long count_lines(FILE *f, const char *path) {
    enum { BLOCK = 1 << 16 };
    char *buf = mallocCheck(BLOCK);
    long lines = 0;
    size_t n;
    char last = '\n';
    while ((n = fread(buf, 1, BLOCK, f)) > 0) {
        for (size_t i = 0; i < n; i++) {
            char c = buf[i];
            if (c == '\r' || (c == '\n' && last != '\r')) lines++;
            last = c;
        }
    }
    if (ferror(f)) t5_fail("%s: read error: %s", path, strerror(errno));
    free(buf);
    if (last != '\n' && last != '\r') lines++;
    rewind(f);
    return lines;
}

TextReader *text_reader_open(const TextSpec *spec) {
    TextReader *r = callocCheck(1, sizeof *r);
    r->spec = *spec;
    if (spec->format == TEXT_PAIRS) {
        if (!spec->target_path) t5_fail("%s: a .source file needs its .target file (none given)", spec->source_path);
        r->fs = open_text(spec->source_path, "source");
        r->ft = open_text(spec->target_path, "target");
        long ns = count_lines(r->fs, spec->source_path), nt = count_lines(r->ft, spec->target_path);
        if (ns != nt)
            t5_fail("%s has %ld lines but %s has %ld; line i of one must be the translation of line i of the "
                    "other: find the missing or extra line (a blank line at the end counts)",
                    spec->source_path, ns, spec->target_path, nt);
        r->count = ns;
    } else if (spec->format == TEXT_JSONL) {
        if (!spec->src_lang || !spec->tgt_lang)
            t5_fail("%s: JSON lines need the language keys (--source_lang, --target_lang)", spec->source_path);
        r->fs = open_text(spec->source_path, "JSON lines");
        r->count = count_lines(r->fs, spec->source_path);
    } else {
        t5_fail("text_reader_open: unknown text format %d", (int)spec->format);
    }
    if (spec->max_examples >= 0 && spec->max_examples < r->count) r->count = spec->max_examples;
    return r;
}

long text_reader_count(const TextReader *r) { return r->count; }

// The next line of f into *buf (NUL-terminated, its end taken off; see count_lines for
// what ends a line). Its length, or -1 at the end of the file.
static ssize_t get_line(FILE *f, char **buf, size_t *cap) {
    size_t n = 0;
    int c;
    while ((c = getc_unlocked(f)) != EOF && c != '\n') {
        if (c == '\r') {
            int d = getc_unlocked(f);
            if (d != '\n' && d != EOF) ungetc(d, f);
            break;
        }
        if (n + 1 >= *cap) {
            *cap = *cap ? 2 * *cap : 256;
            *buf = reallocCheck(*buf, *cap);
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && n == 0) return -1;
    if (!*buf) {
        *cap = 256;
        *buf = mallocCheck(*cap);
    }
    (*buf)[n] = '\0';
    return (ssize_t)n;
}

// Read line number r->line (already incremented) of f into *buf: check it is not empty and
// is valid UTF-8. Returns its length.
static size_t read_line(TextReader *r, FILE *f, const char *path, char **buf, size_t *cap, const char *empty_hint) {
    errno = 0;
    ssize_t n = get_line(f, buf, cap);
    if (ferror(f)) t5_fail("%s:%ld: read error: %s", path, r->line, strerror(errno));
    if (n < 0) t5_fail("%s:%ld: the file ended early (it changed while being read?); run again", path, r->line);
    size_t len = (size_t)n;
    if (len == 0) t5_fail("%s:%ld: empty line; %s", path, r->line, empty_hint);
    size_t bad = 0;
    if (!utf8_valid(*buf, len, &bad))
        t5_fail("%s:%ld: invalid UTF-8 at byte %zu of the line (0x%02x); convert the file to UTF-8 (iconv) or fix "
                "that line",
                path, r->line, bad, (unsigned)(unsigned char)(*buf)[bad]);
    return len;
}

static void list_keys(const cJSON *obj, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    for (const cJSON *c = obj ? obj->child : NULL; c && k + 8 < cap; c = c->next) {
        int w = snprintf(out + k, cap - k, "%s\"%.40s\"", k ? ", " : "", c->string ? c->string : "");
        if (w < 0 || (size_t)w >= cap - k) break;
        k += (size_t)w;
    }
    if (!obj || !obj->child) snprintf(out, cap, "none");
}

static const char *json_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "not a string";
}

// The string translation[key] of line r->line, copied to *dst.
static size_t json_text(TextReader *r, const cJSON *tr, const char *key, char **dst, size_t *cap) {
    const char *path = r->spec.source_path;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tr, key);
    if (!v) {
        char keys[512];
        list_keys(tr, keys, sizeof keys);
        t5_fail("%s:%ld: \"translation\" has no key \"%s\" (it has: %s); set --source_lang / --target_lang to the "
                "keys the file uses",
                path, r->line, key, keys);
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        t5_fail("%s:%ld: \"translation\".\"%s\" is %s; it must be a string", path, r->line, key, json_type(v));
    size_t len = strlen(v->valuestring);
    if (len == 0)
        t5_fail("%s:%ld: \"translation\".\"%s\" is an empty string; an empty side of a translation pair is almost "
                "always a data error: fix or delete that line",
                path, r->line, key);
    size_t bad = 0;
    if (!utf8_valid(v->valuestring, len, &bad))
        t5_fail("%s:%ld: \"translation\".\"%s\" is not valid UTF-8 after decoding its escapes (byte %zu); fix that "
                "line",
                path, r->line, key, bad);
    if (*cap < len + 1) {
        *cap = len + 1 > 2 * *cap ? len + 1 : 2 * *cap;
        free(*dst);
        *dst = mallocCheck(*cap);
    }
    memcpy(*dst, v->valuestring, len + 1);
    return len;
}

static void next_jsonl(TextReader *r, TextExample *ex) {
    const char *path = r->spec.source_path;
    size_t len = read_line(r, r->fs, path, &r->ls, &r->caps,
                           "a JSON lines file holds one {\"translation\": {...}} object per line: delete it");
    // read as Python's json reads it; a duplicate key refused, as HF datasets' pyarrow reader
    // does (common/json_read.h)
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%ld", path, r->line);
    size_t err = len;
    cJSON *root = json_read_parse(r->ls, len, where, JSON_DUP_REFUSE, &err);
    if (!root) {
        long off = (long)err;
        const char *what = json_read_error_what();  // text after the object, a raw tab ...: Python refuses them
        if (what)
            t5_fail("%s:%ld: %s at byte %ld of the line (malformed JSON for Python's json); put one JSON object per "
                    "line", path, r->line, what, off);
        t5_fail("%s:%ld: malformed JSON (near byte %ld of the line); each line must be one JSON object such as "
                "{\"translation\": {\"en\": \"...\", \"ro\": \"...\"}}",
                path, r->line, off);
    }
    if (!cJSON_IsObject(root))
        t5_fail("%s:%ld: the line is %s, not a JSON object; expected {\"translation\": {...}}", path, r->line,
                json_type(root));
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "translation");
    if (!tr || !cJSON_IsObject(tr)) {
        char keys[512];
        list_keys(root, keys, sizeof keys);
        t5_fail("%s:%ld: %s (keys: %s); run_translation-style JSON lines look like {\"translation\": {\"%s\": "
                "\"...\", \"%s\": \"...\"}}",
                path, r->line, tr ? "\"translation\" is not an object" : "no \"translation\" object", keys,
                r->spec.src_lang, r->spec.tgt_lang);
    }
    ex->src_len = json_text(r, tr, r->spec.src_lang, &r->js, &r->capjs);
    ex->tgt_len = json_text(r, tr, r->spec.tgt_lang, &r->jt, &r->capjt);
    ex->src = r->js;
    ex->tgt = r->jt;
    cJSON_Delete(root);
}

int text_reader_next(TextReader *r, TextExample *ex) {
    if (r->line >= r->count) return 0;
    r->line++;
    ex->line = r->line;
    if (r->spec.format == TEXT_JSONL) {
        next_jsonl(r, ex);
        return 1;
    }
    static const char hint[] =
        "an empty line in a parallel corpus almost always means .source and .target are misaligned "
        "(HF would train on an empty string): fix or delete this line in both files";
    ex->src_len = read_line(r, r->fs, r->spec.source_path, &r->ls, &r->caps, hint);
    ex->tgt_len = read_line(r, r->ft, r->spec.target_path, &r->lt, &r->capt, hint);
    ex->src = r->ls;
    ex->tgt = r->lt;
    return 1;
}

void text_reader_close(TextReader *r) {
    if (!r) return;
    if (r->fs) fclose(r->fs);
    if (r->ft) fclose(r->ft);
    free(r->ls);
    free(r->lt);
    free(r->js);
    free(r->jt);
    free(r);
}
