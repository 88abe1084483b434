// tests/test_tokenize.c: the sentencepiece shim (data/spm_shim.cc), T5 tokenization
// (data/tokenize.c) and UTF-8 validation (data/utf8.c) against references written by
// tools/make_token_fixture.py with python sentencepiece: every line of the 10,019-line
// tests/fixtures/tatoeba.en (count + FNV-1a hash; full ids for the first 300), decode
// with pad/</s>/<unk>/extra ids mixed in, the T5 task prefix and edge cases
// (tests/fixtures/tokenize_cases.jsonl). Bad model files and bad ids must exit 1 with one
// "error:" line; they run in forked children. Run from the repository root.
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../common/utf8.h"
#include "../data/spm.h"
#include "../data/tokenize.h"
#include "test.h"
#include "../trainer/progress.h"
#include "test_fork.h"

#define MODEL_PATH "data/sample/spiece.model"
#define FIX "tests/fixtures/"
#define MAX_DETAIL 5  // mismatches printed in full per check

static uint64_t fnv1a64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static char *read_fixture(const char *path, size_t *len) {
    char *s = read_text_file(path, len);
    if (!s) {
        printf("NOT OK cannot read %s (run from the repository root; regenerate with tools/make_token_fixture.py)\n",
               path);
        exit(1);
    }
    return s;
}

// Split buf in place into lines (on '\n' only); a final empty piece is not a line.
static int split_lines(char *buf, size_t len, char ***lines_out, size_t **lens_out) {
    int n = 0, cap = 1024;
    char **lines = mallocCheck(cap * sizeof *lines);
    size_t *lens = mallocCheck(cap * sizeof *lens);
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && buf[i] != '\n') continue;
        if (i == len && start == len) break;
        if (n == cap) {
            cap *= 2;
            lines = realloc(lines, cap * sizeof *lines);
            lens = realloc(lens, cap * sizeof *lens);
            if (!lines || !lens) t5_die(__FILE__, __LINE__, "out of memory", NULL);
        }
        lines[n] = buf + start;
        lens[n] = i - start;
        if (i < len) buf[i] = '\0';
        n++;
        start = i + 1;
    }
    *lines_out = lines;
    *lens_out = lens;
    return n;
}

// Parse space-separated ints; returns the count.
static int parse_ids(const char *s, int32_t *out, int max) {
    int n = 0;
    char *end;
    while (n < max) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static void print_ids(const char *label, const int32_t *ids, int n) {
    printf("       %s (%d):", label, n);
    for (int i = 0; i < n && i < 40; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

// ---- forked error checks (the pattern of tests/test_io.c) -----------------------------------

// forked error checks: tests/test_fork.h
static void expect_error(const char *what, FailFn fn, const void *arg, const char *needle) {
    test_expect_error(what, fn, arg, needle, NULL);
}

static void load_fn(const void *arg) { spm_load((const char *)arg); }

static const Spm *g_spm;
static void decode_fn(const void *arg) {
    int32_t ids[3] = {8774, *(const int32_t *)arg, 55};
    free(spm_decode(g_spm, ids, 3));
}

static void test_errors(const Spm *spm) {
    expect_error("missing model file", load_fn, "no/such/dir/spiece.model", "no/such/dir/spiece.model");
    expect_error("a text file as model", load_fn, FIX "tatoeba.en", FIX "tatoeba.en");
    char empty[] = "/tmp/t5_test_tokenize_XXXXXX";
    int fd = mkstemp(empty);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    close(fd);
    expect_error("an empty model file", load_fn, empty, empty);
    unlink(empty);
    expect_error("a directory as model", load_fn, "data/sample", "data/sample");
    g_spm = spm;
    int32_t bad[] = {-1, 32128, 1 << 30};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "decode id %d", bad[i]);
        char needle[64];
        snprintf(needle, sizeof needle, "token id %d", bad[i]);
        expect_error(what, decode_fn, &bad[i], needle);
    }
}

// ---- UTF-8 ------------------------------------------------------------------------------------

static void test_utf8(void) {
    struct {
        const char *name, *s;
        size_t len;
        int valid;
        size_t bad;
    } cases[] = {
        {"empty", "", 0, 1, 0},
        {"ASCII", "Hello World!", 12, 1, 0},
        {"2/3/4-byte (ă € 😀)", "\xC4\x83 \xE2\x82\xAC \xF0\x9F\x98\x80", 11, 1, 0},
        {"edges U+7F U+80 U+7FF U+800", "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80", 8, 1, 0},
        {"edges U+D7FF U+E000 U+FFFF", "\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF", 9, 1, 0},
        {"edges U+10000 U+10FFFF", "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", 8, 1, 0},
        {"NUL is valid", "a\0b", 3, 1, 0},
        {"overlong 2-byte '/' (C0 AF)", "ab\xC0\xAF", 4, 0, 2},
        {"overlong 2-byte (C1 BF)", "\xC1\xBF", 2, 0, 0},
        {"overlong 3-byte (E0 80 AF)", "x\xE0\x80\xAF", 4, 0, 1},
        {"overlong 4-byte (F0 8F BF BF)", "\xF0\x8F\xBF\xBF", 4, 0, 0},
        {"surrogate U+D800 (ED A0 80)", "ok \xED\xA0\x80", 6, 0, 3},
        {"surrogate U+DFFF (ED BF BF)", "\xED\xBF\xBF", 3, 0, 0},
        {"> U+10FFFF (F4 90 80 80)", "\xF4\x90\x80\x80", 4, 0, 0},
        {"lead F5", "\xF5\x80\x80\x80", 4, 0, 0},
        {"FF byte", "a\xFF", 2, 0, 1},
        {"lone continuation", "ab\x80", 3, 0, 2},
        {"truncated 3-byte at end", "a\xE2\x82", 3, 0, 1},
        {"truncated 4-byte at end", "\xF0\x9F\x98", 3, 0, 0},
        {"truncated 2-byte then ASCII", "\xC4x", 2, 0, 0},
        {"bad 3rd byte", "\xE2\x82x", 3, 0, 0},
        {"bad 4th byte", "ab\xF0\x9F\x98\xC0", 6, 0, 2},
    };
    int n = sizeof cases / sizeof cases[0], bad = 0;
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)-1;
        int v = utf8_valid(cases[i].s, cases[i].len, &off);
        int ok = v == cases[i].valid && (v || off == cases[i].bad);
        if (!ok) {
            bad++;
            printf("       utf8 %-32s got valid=%d offset=%zd, want valid=%d offset=%zu\n", cases[i].name, v,
                   v ? (ssize_t)-1 : (ssize_t)off, cases[i].valid, cases[i].bad);
        }
    }
    char msg[128];
    snprintf(msg, sizeof msg, "utf8_valid: %d/%d cases (multibyte, overlong, surrogate, truncated, > U+10FFFF)",
             n - bad, n);
    test_check(bad == 0, msg);
}

// ---- encode -----------------------------------------------------------------------------------

static void test_known(const Spm *spm) {
    char msg[256];
    snprintf(msg, sizeof msg, "piece count %d (want 32000)", spm_piece_count(spm));
    test_check(spm_piece_count(spm) == 32000, msg);

    size_t mlen;
    char *model = read_fixture(MODEL_PATH, &mlen);
    uint64_t h = fnv1a64(model, mlen);
    free(model);
    snprintf(msg, sizeof msg, "spm_model_hash %016llx = FNV-1a 64 of the file (%016llx)",
             (unsigned long long)spm_model_hash(spm), (unsigned long long)h);
    test_check(spm_model_hash(spm) == h, msg);

    int32_t *ids = NULL;
    size_t cap = 0;
    const char *hw = "Hello World!";
    int n = spm_encode(spm, hw, strlen(hw), &ids, &cap);
    test_check(n == 3 && ids[0] == 8774 && ids[1] == 1150 && ids[2] == 55 && cap >= 4,
               "spm_encode(\"Hello World!\") = 8774 1150 55");
    n = tokenize_t5(spm, "", hw, strlen(hw), &ids, &cap);
    int ok = n == 4 && ids[0] == 8774 && ids[1] == 1150 && ids[2] == 55 && ids[3] == 1;
    n = tokenize_t5(spm, NULL, hw, strlen(hw), &ids, &cap);
    ok = ok && n == 4 && ids[3] == 1;
    test_check(ok, "tokenize_t5(\"\" or NULL, \"Hello World!\") = 8774 1150 55 1");
    // Only len bytes are read: "Hello World!" with the trailing "!" cut off.
    n = spm_encode(spm, hw, 11, &ids, &cap);
    test_check(n == 2 && ids[0] == 8774 && ids[1] == 1150, "spm_encode reads len bytes, not up to the NUL");
    n = tokenize_t5(spm, "", "", 0, &ids, &cap);
    test_check(n == 1 && ids[0] == 1, "tokenize_t5 of empty text = </s>");
    char *s = spm_decode(spm, ids, 0);
    test_check(strcmp(s, "") == 0, "spm_decode of no ids = \"\"");
    free(s);
    free(ids);
}

// tatoeba.head.ids.txt: the full ids of the first lines (hlines past hskip comment lines).
static void check_tatoeba_head(char **hlines, int nh, int hskip, char **lines, int32_t *const *all, const int *counts,
                               int n) {
    char msg[256];
    int shown;
    int hn = nh - hskip, hmatch = 0;
    shown = 0;
    int32_t *want = mallocCheck(4096 * sizeof *want);
    for (int i = 0; i < hn && i < n; i++) {
        int wn = parse_ids(hlines[hskip + i], want, 4096);
        if (wn == counts[i] && memcmp(want, all[i], wn * sizeof(int32_t)) == 0) {
            hmatch++;
        } else if (shown++ < MAX_DETAIL) {
            printf("       line %d %.100s\n", i + 1, lines[i]);
            print_ids("got ", all[i], counts[i]);
            print_ids("want", want, wn);
        }
    }
    free(want);
    snprintf(msg, sizeof msg, "tatoeba.head.ids.txt: %d/%d lines match (full ids)", hmatch, hn);
    test_check(hn == 300 && hmatch == hn, msg);

}

static void test_tatoeba(const Spm *spm) {
    size_t tlen, rlen, hlen;
    char *text = read_fixture(FIX "tatoeba.en", &tlen);
    char *ref = read_fixture(FIX "tatoeba.ids.txt", &rlen);
    char *head = read_fixture(FIX "tatoeba.head.ids.txt", &hlen);
    char **lines, **rlines, **hlines;
    size_t *lens, *rlens, *hlens;
    int n = split_lines(text, tlen, &lines, &lens);
    int nr = split_lines(ref, rlen, &rlines, &rlens);
    int nh = split_lines(head, hlen, &hlines, &hlens);
    int skip = 0, hskip = 0;
    while (skip < nr && rlines[skip][0] == '#') skip++;
    while (hskip < nh && hlines[hskip][0] == '#') hskip++;
    if (skip > 0) printf("       reference: %s\n", rlines[0] + 2);

    char msg[256];
    snprintf(msg, sizeof msg, "%s: %d lines, %d reference lines", FIX "tatoeba.en", n, nr - skip);
    test_check(n == 10019 && nr - skip == n, msg);
    if (nr - skip < n) n = nr - skip;

    // Encode everything first (timed), then compare.
    int32_t **all = mallocCheck(n * sizeof *all);
    int *counts = mallocCheck(n * sizeof *counts);
    int32_t *ids = NULL;
    size_t cap = 0, total = 0;
    double t0 = now_seconds();
    for (int i = 0; i < n; i++) {
        counts[i] = tokenize_t5(spm, "", lines[i], lens[i], &ids, &cap);
        all[i] = mallocCheck(counts[i] * sizeof(int32_t));
        memcpy(all[i], ids, counts[i] * sizeof(int32_t));
        total += counts[i];
    }
    double dt = now_seconds() - t0;
    free(ids);

    int match = 0, shown = 0;
    for (int i = 0; i < n; i++) {
        int want_n = 0;
        unsigned long long want_h = 0;
        if (sscanf(rlines[skip + i], "%d %llx", &want_n, &want_h) != 2) want_n = -1;
        uint64_t h = fnv1a64(all[i], counts[i] * sizeof(int32_t));
        if (counts[i] == want_n && h == want_h) {
            match++;
        } else if (shown++ < MAX_DETAIL) {
            printf("       line %d %.100s\n       got %d ids hash %016llx, want %s\n", i + 1, lines[i], counts[i],
                   (unsigned long long)h, rlines[skip + i]);
            print_ids("got", all[i], counts[i]);
        }
    }
    snprintf(msg, sizeof msg, "tatoeba.ids.txt: %d/%d lines match (count + FNV-1a of the ids)", match, n);
    test_check(match == n && n == 10019, msg);

    check_tatoeba_head(hlines, nh, hskip, lines, all, counts, n);

    snprintf(msg, sizeof msg, "encode time: %d lines, %zu ids in %.1f ms (%.0f lines/s)", n, total, 1e3 * dt,
             n / dt);
    test_check(1, msg);

    for (int i = 0; i < n; i++) free(all[i]);
    free(all);
    free(counts);
    free(lines);
    free(lens);
    free(rlines);
    free(rlens);
    free(hlines);
    free(hlens);
    free(text);
    free(ref);
    free(head);
}

static void test_decode_fixture(const Spm *spm) {
    size_t len;
    char *buf = read_fixture(FIX "tatoeba.decode.txt", &len);
    char **lines;
    size_t *lens;
    int n = split_lines(buf, len, &lines, &lens);
    int rows = 0, match = 0, shown = 0;
    int32_t ids[1024];
    for (int i = 0; i < n; i++) {
        if (lines[i][0] == '#') continue;
        char *tab = strchr(lines[i], '\t');
        if (!tab) {
            printf("NOT OK tatoeba.decode.txt line %d has no tab\n", i + 1);
            exit(1);
        }
        *tab = '\0';
        int k = parse_ids(lines[i], ids, 1024);
        rows++;
        char *got = spm_decode(spm, ids, k);
        if (strcmp(got, tab + 1) == 0) match++;
        else if (shown++ < MAX_DETAIL) printf("       got  \"%s\"\n       want \"%s\"\n", got, tab + 1);
        free(got);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "tatoeba.decode.txt: %d/%d decodes match (pad, </s>, <unk>, extra ids dropped)", match,
             rows);
    test_check(rows == 20 && match == rows, msg);
    free(lines);
    free(lens);
    free(buf);
}

static int json_ids(const cJSON *arr, int32_t **out) {
    int n = cJSON_GetArraySize(arr);
    *out = mallocCheck((n + 1) * sizeof **out);
    for (int i = 0; i < n; i++) (*out)[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return n;
}

static void test_cases(const Spm *spm) {
    size_t len;
    char *buf = read_fixture(FIX "tokenize_cases.jsonl", &len);
    char **lines;
    size_t *lens;
    int n = split_lines(buf, len, &lines, &lens);
    int enc = 0, enc_ok = 0, pre = 0, pre_ok = 0, dec = 0, dec_ok = 0, shown = 0;
    int32_t *ids = NULL;
    size_t cap = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_Parse(lines[i]);
        if (!o) {
            printf("NOT OK tokenize_cases.jsonl line %d is not JSON\n", i + 1);
            exit(1);
        }
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "sentencepiece");
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(o, "prefix");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, "text");
        const cJSON *want_ids = cJSON_GetObjectItemCaseSensitive(o, "ids");
        const cJSON *dec_ids = cJSON_GetObjectItemCaseSensitive(o, "decode");
        if (cJSON_IsString(ver)) {
            printf("       tokenize_cases.jsonl: python sentencepiece %s\n", ver->valuestring);
        } else if (cJSON_IsString(prefix) && cJSON_IsString(text) && cJSON_IsArray(want_ids)) {
            int32_t *want;
            int wn = json_ids(want_ids, &want);
            int got = tokenize_t5(spm, prefix->valuestring, text->valuestring, strlen(text->valuestring), &ids,
                                  &cap);
            int ok = got == wn && memcmp(ids, want, wn * sizeof *want) == 0;
            int has_prefix = prefix->valuestring[0] != '\0';
            pre += has_prefix;
            pre_ok += has_prefix && ok;
            enc += !has_prefix;
            enc_ok += !has_prefix && ok;
            if (!ok && shown++ < MAX_DETAIL) {
                printf("       encode \"%s\" + \"%.80s\"\n", prefix->valuestring, text->valuestring);
                print_ids("got ", ids, got);
                print_ids("want", want, wn);
            }
            free(want);
        } else if (cJSON_IsArray(dec_ids) && cJSON_IsString(text)) {
            int32_t *d;
            int dn = json_ids(dec_ids, &d);
            char *got = spm_decode(spm, d, dn);
            dec++;
            if (strcmp(got, text->valuestring) == 0) dec_ok++;
            else if (shown++ < MAX_DETAIL) printf("       decode got \"%s\" want \"%s\"\n", got, text->valuestring);
            free(got);
            free(d);
        } else {
            printf("NOT OK tokenize_cases.jsonl line %d: unknown case\n", i + 1);
            exit(1);
        }
        cJSON_Delete(o);
    }
    free(ids);
    char msg[256];
    snprintf(msg, sizeof msg, "prefix + text encoded as one string: %d/%d match python", pre_ok, pre);
    test_check(pre > 10 && pre_ok == pre, msg);
    snprintf(msg, sizeof msg, "edge cases (whitespace, NFKC, unknown chars, 9 KB text): %d/%d match", enc_ok, enc);
    test_check(enc > 10 && enc_ok == enc, msg);
    snprintf(msg, sizeof msg, "decode cases (only specials, <unk>, ids 32100..32127): %d/%d match", dec_ok, dec);
    test_check(dec >= 5 && dec_ok == dec, msg);
    free(lines);
    free(lens);
    free(buf);
}

int main(void) {
    Spm *spm = spm_load(MODEL_PATH);
    test_known(spm);
    test_tatoeba(spm);
    test_decode_fixture(spm);
    test_cases(spm);
    test_utf8();
    test_errors(spm);
    spm_free(spm);
    return test_summary();
}
