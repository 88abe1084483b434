// tests/test_data.c: the data's way in without a GPU: text readers (.source/.target
// pairs, JSON lines, CRLF, first-N), prepare + open of .t5ds files against tokenize_t5,
// the cache key, `train_t5 prepare`, and every error path: corrupt dataset files and bad
// text. Batches made from a dataset (collation, samplers) are tests/test_batching.c's. Error paths exit the process, so each runs in a forked
// child whose exit code and stderr are checked (as tests/test_io.c does): exit 1, one
// "error:" line (plus an optional "HINT:" line) that names the file.
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../data/dataset.h"
#include "../cmd/cmd.h"
#include "../data/spm.h"
#include "../data/text_reader.h"
#include "../data/tokenize.h"
#include "test.h"
#include "test_tmp.h"
#include "test_fork.h"
#include "test_t5ds.h"

#define SAMPLE "data/sample"
#define SPIECE SAMPLE "/spiece.model"
#define PREFIX "translate English to Romanian: "

static char g_tmp[256];
static Spm *g_spm;

static char *tmp_path(const char *name) { return path_join(g_tmp, name); }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopenCheck(path, "wb");
    if (n) fwriteCheck(data, 1, n, f, path);
    fcloseCheck(f, path);
}
static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static unsigned char *read_bytes(const char *path, size_t *n) { return (unsigned char *)read_text_file(path, n); }

// ---- forked error checks ------------------------------------------------------------

// forked error checks: tests/test_fork.h
#define expect_error test_expect_error

// ---- readers --------------------------------------------------------------------------

// Line `want` (1-based) of a file, without the newline, read independently of the reader.
static char *nth_line(const char *path, long want) {
    FILE *f = fopenCheck(path, "rb");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = 0;
    for (long i = 0; i < want; i++) n = getline(&line, &cap, f);
    fclose(f);
    if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
    return line;
}

static void test_reader_pairs(void) {
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = SAMPLE "/train.source", .target_path = SAMPLE "/train.target",
                     .source_prefix = "", .max_examples = -1};
    TextReader *r = text_reader_open(&spec);
    long count = text_reader_count(r), n = 0, bad_line = 0;
    char *s1 = nth_line(spec.source_path, 1), *t1 = nth_line(spec.target_path, 1);
    char *s2000 = nth_line(spec.source_path, 2000), *t3009 = nth_line(spec.target_path, 3009);
    int first_ok = 0, mid_ok = 0, last_ok = 0;
    TextExample ex;
    while (text_reader_next(r, &ex)) {
        n++;
        if (ex.line != n && !bad_line) bad_line = n;
        if (n == 1) first_ok = !strcmp(ex.src, s1) && !strcmp(ex.tgt, t1) && ex.src_len == strlen(s1);
        if (n == 2000) mid_ok = !strcmp(ex.src, s2000);
        if (n == 3009) last_ok = !strcmp(ex.tgt, t3009) && ex.tgt_len == strlen(t3009);
    }
    text_reader_close(r);
    char msg[256];
    snprintf(msg, sizeof msg, "pairs: train has %ld examples (count %ld), want 3009", n, count);
    test_check(n == 3009 && count == 3009 && !bad_line, msg);
    test_check(first_ok && mid_ok && last_ok, "pairs: lines 1, 2000 and 3009 as in the files");
    test_check(!strcmp(s1, "Welsh AMs worried about 'looking like muppets'") &&
                   !strncmp(t1, "Membrii Adun\xc4\x83rii Na\xc8\x9bionale", 24),
               "pairs: line 1 is \"Welsh AMs worried about 'looking like muppets'\" / \"Membrii Adunării Naționale...\"");
    free(s1);
    free(t1);
    free(s2000);
    free(t3009);

    spec.max_examples = 25;
    r = text_reader_open(&spec);
    n = 0;
    while (text_reader_next(r, &ex)) n++;
    test_check(n == 25 && text_reader_count(r) == 25, "pairs: max_examples 25 gives the first 25");
    text_reader_close(r);
}

static void test_reader_jsonl(void) {
    TextSpec spec = {.format = TEXT_JSONL, .source_path = SAMPLE "/wmt16_sample.jsonl", .src_lang = "en",
                     .tgt_lang = "ro", .source_prefix = "", .max_examples = -1};
    TextReader *r = text_reader_open(&spec);
    TextExample ex;
    long n = 0;
    int first_ok = 0;
    while (text_reader_next(r, &ex)) {
        n++;
        if (n == 1)
            first_ok = !strcmp(ex.src, "Membership of Parliament: see Minutes") &&
                       !strcmp(ex.tgt, "Componen\xc5\xa3" "a Parlamentului: a se vedea procesul-verbal");
    }
    text_reader_close(r);
    test_check(n == 10, "jsonl: the wmt16 sample has 10 examples");
    test_check(first_ok, "jsonl: line 1 is {en: \"Membership of Parliament: see Minutes\", ro: \"Componenţa ...\"}");

    // Escapes decode, other keys are ignored, languages swap.
    char *p = tmp_path("esc.jsonl");
    write_text(p, "{\"id\": 7, \"translation\": {\"ro\": \"a\\u0163b\", \"en\": \"say \\\"hi\\\"\"}}\r\n");
    TextSpec s2 = {.format = TEXT_JSONL, .source_path = p, .src_lang = "ro", .tgt_lang = "en", .max_examples = -1};
    r = text_reader_open(&s2);
    int ok = text_reader_next(r, &ex) && !strcmp(ex.src, "a\xc5\xa3" "b") && !strcmp(ex.tgt, "say \"hi\"") &&
             !text_reader_next(r, &ex);
    text_reader_close(r);
    test_check(ok, "jsonl: \\u escapes and \\\" decode, CRLF line, extra keys ignored");
    free(p);
}

static void test_reader_crlf(void) {
    char *s = tmp_path("crlf.source"), *t = tmp_path("crlf.target");
    write_text(s, "one two\r\nthree\r\nlast line without newline");
    write_text(t, "unu doi\r\ntrei\r\nultima");
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = s, .target_path = t, .max_examples = -1};
    TextReader *r = text_reader_open(&spec);
    TextExample ex;
    int ok = text_reader_count(r) == 3;
    ok &= text_reader_next(r, &ex) && !strcmp(ex.src, "one two") && ex.src_len == 7 && !strcmp(ex.tgt, "unu doi");
    ok &= text_reader_next(r, &ex) && !strcmp(ex.src, "three") && ex.line == 2;
    ok &= text_reader_next(r, &ex) && !strcmp(ex.src, "last line without newline") && !strcmp(ex.tgt, "ultima");
    ok &= !text_reader_next(r, &ex);
    text_reader_close(r);
    test_check(ok, "pairs: CRLF stripped, a last line without newline is read");
    free(s);
    free(t);
}

// Every example of a pair of texts as "src|tgt;" (or "ERR" if the count differs from
// want_count), read with the reader.
static char *read_all_pairs(const char *src, size_t src_len, const char *tgt, size_t tgt_len, long *count) {
    char *s = tmp_path("un.source"), *t = tmp_path("un.target");
    write_bytes(s, src, src_len);
    write_bytes(t, tgt, tgt_len);
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = s, .target_path = t, .max_examples = -1};
    TextReader *r = text_reader_open(&spec);
    *count = text_reader_count(r);
    size_t cap = 4096, n = 0;
    char *out = mallocCheck(cap);
    out[0] = '\0';
    TextExample ex;
    while (text_reader_next(r, &ex)) {
        size_t need = n + ex.src_len + ex.tgt_len + 3;
        if (need > cap) {
            cap = 2 * need;
            out = reallocCheck(out, cap);
        }
        n += (size_t)sprintf(out + n, "%s|%s;", ex.src, ex.tgt);
    }
    text_reader_close(r);
    free(s);
    free(t);
    return out;
}

// Line ends as Python's universal newlines: "\n", "\r\n" and a lone "\r" (python3:
// open(f).read().split("\n") after the translation; the wants below are what it gives).
static void test_reader_universal_newlines(void) {
    struct {
        const char *what, *src, *tgt, *want;
        long count;
    } cases[] = {
        // the example: 8 pairs with CR-only ends read as 1 example
        {"CR-only ends (8 pairs)", "s1\rs2\rs3\rs4\rs5\rs6\rs7\rs8\r", "t1\rt2\rt3\rt4\rt5\rt6\rt7\rt8\r",
         "s1|t1;s2|t2;s3|t3;s4|t4;s5|t5;s6|t6;s7|t7;s8|t8;", 8},
        {"CR-only, last line without an end", "a\rb", "x\ry", "a|x;b|y;", 2},
        {"mixed \\n, \\r, \\r\\n in one file", "a\nb\rc\r\nd", "w\r\nx\ny\rz\n", "a|w;b|x;c|y;d|z;", 4},
        {"\\r\\n in one file, \\r in the other", "a\r\nb\r\n", "x\ry\r", "a|x;b|y;", 2},
        {"a lone \\r at the end of the file", "a\rb\r", "x\ny\n", "a|x;b|y;", 2},
        {"\\r inside a line is an end", "one\rtwo three\n", "unu\ndoi trei\n", "one|unu;two three|doi trei;", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long count = 0;
        char *got = read_all_pairs(cases[i].src, strlen(cases[i].src), cases[i].tgt, strlen(cases[i].tgt), &count);
        char msg[512];
        snprintf(msg, sizeof msg, "newlines: %-36s %ld examples \"%.120s\"", cases[i].what, count, got);
        test_check(count == cases[i].count && !strcmp(got, cases[i].want), msg);
        if (count != cases[i].count || strcmp(got, cases[i].want))
            printf("       (wanted %ld: \"%s\")\n", cases[i].count, cases[i].want);
        free(got);
    }
    // "\r" closing the reader's 64 KiB count block and "\n" opening the next: one line end.
    size_t big = 65535;
    char *src = mallocCheck(big + 4);
    memset(src, 'x', big);
    memcpy(src + big, "\r\nb", 3);
    long count = 0;
    char *got = read_all_pairs(src, big + 3, "t\nu", 3, &count);
    int ok = count == 2 && strlen(got) == big + 7 && !strcmp(got + big, "|t;b|u;");
    test_check(ok, "newlines: \\r\\n split across the 64 KiB count block is one line end (a 65535-byte line)");
    free(got);
    free(src);
    // JSON lines with CR-only ends
    char *j = tmp_path("cr.jsonl");
    write_text(j, "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\r{\"translation\": {\"en\": \"c\", \"ro\": \"d\"}}\r"
                  "{\"translation\": {\"en\": \"e\", \"ro\": \"f\"}}");
    TextSpec jl = {.format = TEXT_JSONL, .source_path = j, .src_lang = "en", .tgt_lang = "ro", .max_examples = -1};
    TextReader *r = text_reader_open(&jl);
    TextExample ex;
    int n = 0, texts_ok = 1;
    while (text_reader_next(r, &ex)) {
        char want_src[2] = {(char)('a' + 2 * n), 0}, want_tgt[2] = {(char)('b' + 2 * n), 0};
        texts_ok &= !strcmp(ex.src, want_src) && !strcmp(ex.tgt, want_tgt);
        n++;
    }
    test_check(n == 3 && texts_ok && text_reader_count(r) == 3, "newlines: JSON lines with CR-only ends: 3 examples");
    text_reader_close(r);
    free(j);
}

// ---- prepare + open -----------------------------------------------------------------

// JSON lines, and the hand-made format (tests docs/DATASET.md independently).
static void check_prepare_jsonl(void) {
    Dataset ds;
    const int32_t *src, *tgt;
    int ls, lt;
    int32_t *ids;
    size_t cap;
    TextSpec js = {.format = TEXT_JSONL, .source_path = SAMPLE "/wmt16_sample.jsonl", .src_lang = "en", .tgt_lang = "ro",
                   .source_prefix = "", .max_examples = -1};
    char *jout = tmp_path("js.t5ds");
    dataset_prepare(&js, g_spm, jout);
    dataset_open(&ds, jout);
    ids = NULL;
    cap = 0;
    int n = tokenize_t5(g_spm, "", "Membership of Parliament: see Minutes", 37, &ids, &cap);
    dataset_example(&ds, 0, &src, &ls, &tgt, &lt);
    test_check(ds.count == 10 && n == ls && !memcmp(ids, src, (size_t)n * 4), "jsonl prepare: 10 examples, line 1 as tokenize_t5");
    free(ids);
    dataset_close(&ds);
    free(jout);

}

// An empty split opens (the trainer decides whether that is an error).
static void check_prepare_empty(void) {
    Dataset ds;
    char *es = tmp_path("empty.source"), *et = tmp_path("empty.target"), *eo = tmp_path("empty.t5ds");
    write_text(es, "");
    write_text(et, "");
    TextSpec e = {.format = TEXT_PAIRS, .source_path = es, .target_path = et, .source_prefix = "", .max_examples = -1};
    dataset_prepare(&e, g_spm, eo);
    dataset_open(&ds, eo);
    test_check(ds.count == 0 && ds.map_bytes == 72, "an empty split gives a 72-byte dataset that opens with count 0");
    dataset_close(&ds);
    free(es);
    free(et);
    free(eo);

}

static void test_prepare_roundtrip(void) {
    char *out = tmp_path("rt.t5ds");
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = SAMPLE "/train.source", .target_path = SAMPLE "/train.target",
                     .source_prefix = PREFIX, .max_examples = 300};
    dataset_prepare(&spec, g_spm, out);
    char *tmp = tmp_path("rt.t5ds.tmp");
    test_check(access(tmp, F_OK) != 0, "prepare: no .tmp file left after the rename");
    free(tmp);
    Dataset ds;
    dataset_open(&ds, out);
    char msg[256];
    snprintf(msg, sizeof msg, "open: count %llu (want 300), vocab %u (want 32100), tokenizer hash matches",
             (unsigned long long)ds.count, ds.vocab_size);
    test_check(ds.count == 300 && ds.vocab_size == 32100 && ds.tokenizer_hash == spm_model_hash(g_spm), msg);

    TextReader *r = text_reader_open(&spec);
    TextExample ex;
    int32_t *ids = NULL;
    size_t cap = 0;
    long bad = -1, i = 0, eos_bad = 0;
    while (text_reader_next(r, &ex)) {
        const int32_t *src, *tgt;
        int ls, lt;
        dataset_example(&ds, (uint64_t)i, &src, &ls, &tgt, &lt);
        int n = tokenize_t5(g_spm, PREFIX, ex.src, ex.src_len, &ids, &cap);
        if (bad < 0 && (n != ls || memcmp(ids, src, (size_t)n * 4))) bad = i;
        n = tokenize_t5(g_spm, "", ex.tgt, ex.tgt_len, &ids, &cap);
        if (bad < 0 && (n != lt || memcmp(ids, tgt, (size_t)n * 4))) bad = i;
        eos_bad += src[ls - 1] != 1 || tgt[lt - 1] != 1;
        i++;
    }
    text_reader_close(r);
    free(ids);
    snprintf(msg, sizeof msg, "round trip: 300 examples equal tokenize_t5 (source with prefix) (first bad: %ld)", bad);
    test_check(bad < 0 && i == 300, msg);
    test_check(eos_bad == 0, "round trip: every source and target ends with </s> (1)");
    // The prefix is really there: "translate English to Romanian: " + line 1 starts with the prefix's ids.
    int32_t *pre = NULL;
    size_t pcap = 0;
    int np = spm_encode(g_spm, "translate English to Romanian:", 30, &pre, &pcap);
    const int32_t *src, *tgt;
    int ls, lt;
    dataset_example(&ds, 0, &src, &ls, &tgt, &lt);
    test_check(np > 0 && ls > np && !memcmp(pre, src, (size_t)np * 4), "round trip: sources start with the task prefix ids");
    free(pre);
    dataset_close(&ds);

    check_prepare_jsonl();
    check_prepare_empty();

    // Timing: the whole train split.
    spec.max_examples = -1;
    double t0 = now_seconds();
    dataset_prepare(&spec, g_spm, out);
    double t1 = now_seconds();
    dataset_open(&ds, out);
    double t2 = now_seconds();
    snprintf(msg, sizeof msg, "prepare all %llu train lines: %.3f s (open + validate %.3f s)",
             (unsigned long long)ds.count, t1 - t0, t2 - t1);
    test_check(ds.count == 3009, msg);
    dataset_close(&ds);
    free(out);
}

static void test_cache_path(void) {
    TextSpec spec = {.format = TEXT_PAIRS, .source_path = SAMPLE "/val.source", .target_path = SAMPLE "/val.target",
                     .source_prefix = PREFIX, .max_examples = -1};
    char *a = dataset_cache_path("/tmp/cache", "val", &spec, g_spm), *b = dataset_cache_path("/tmp/cache", "val", &spec, g_spm);
    spec.source_prefix = "";
    char *c = dataset_cache_path("/tmp/cache", "val", &spec, g_spm);
    spec.source_prefix = PREFIX;
    spec.max_examples = 100;
    char *d = dataset_cache_path("/tmp/cache", "val", &spec, g_spm);
    int shape = strncmp(a, "/tmp/cache/val-", 15) == 0 && strlen(a) == 15 + 16 + 5 && !strcmp(a + 31, ".t5ds");
    char msg[256];
    snprintf(msg, sizeof msg, "cache path %s: stable, changes with prefix and max_examples", a);
    test_check(shape && !strcmp(a, b) && strcmp(a, c) && strcmp(a, d) && strcmp(c, d), msg);
    free(a);
    free(b);
    free(c);
    free(d);
}

// ---- prepare command ------------------------------------------------------------------------

static void test_prepare_cmd(void) {
    char *dir = tmp_path("data"), *out = tmp_path("prepared");
    mkdir(dir, 0755);
    char *s = path_join(dir, "train.source"), *t = path_join(dir, "train.target");
    char *vs = path_join(dir, "val.source"), *vt = path_join(dir, "val.target");
    write_text(s, "Hello world.\nHow are you?\nGood.\n");
    write_text(t, "Salut lume.\nCe faci?\nBine.\n");
    write_text(vs, "One.\n");
    write_text(vt, "Unu.\n");
    char *argv[] = {"train_t5", "prepare", "--data_dir", dir, "--tokenizer_name", SAMPLE, "--task", "translation_en_to_ro",
                    "--n_train", "2", "--output_dir", out};
    int rc = prepare_main(12, argv);
    char *tr = path_join(out, "train.t5ds"), *va = path_join(out, "val.t5ds"), *te = path_join(out, "test.t5ds");
    Dataset a, b;
    dataset_open(&a, tr);
    dataset_open(&b, va);
    int32_t *ids = NULL;
    size_t cap = 0;
    int n = tokenize_t5(g_spm, PREFIX, "How are you?", 12, &ids, &cap);
    const int32_t *src, *tgt;
    int ls, lt;
    dataset_example(&a, 1, &src, &ls, &tgt, &lt);
    test_check(rc == 0 && a.count == 2 && b.count == 1 && access(te, F_OK) != 0 && n == ls && !memcmp(ids, src, 4 * (size_t)n),
               "prepare --data_dir --n_train 2: train.t5ds (2, with the task prefix), val.t5ds (1), no test.t5ds");
    free(ids);
    dataset_close(&a);
    dataset_close(&b);

    char *argv2[] = {"prepare", "--train_file", SAMPLE "/wmt16_sample.jsonl", "--tokenizer_name", SPIECE, "--task",
                     "translation_en_to_ro", "--output_dir", out};
    rc = prepare_main(9, argv2);
    dataset_open(&a, tr);
    test_check(rc == 0 && a.count == 10, "prepare --train_file (JSON lines, languages from --task): 10 examples");
    dataset_close(&a);
    free(dir);
    free(out);
    free(s);
    free(t);
    free(vs);
    free(vt);
    free(tr);
    free(va);
    free(te);
}

// ---- errors ---------------------------------------------------------------------------------

static void fail_open(const void *arg) {
    Dataset ds;
    dataset_open(&ds, (const char *)arg);
}

static void fail_prepare(const void *arg) {
    char *out = tmp_path("fail.t5ds");
    dataset_prepare((const TextSpec *)arg, g_spm, out);
}

// A child that blocks (a FIFO opened for reading waits for a writer) ends by SIGALRM: a
// failure, not a hang of the test.
static void fail_prepare_10s(const void *arg) {
    alarm(10);
    fail_prepare(arg);
}

// 1 if dir holds a file whose name ends in ".tmp" (its name copied to name).
static int tmp_files_in(const char *dir, char *name, size_t cap) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".tmp")) {
            snprintf(name, cap, "%s", e->d_name);
            found = 1;
        }
    }
    if (d) closedir(d);
    return found;
}

static void fail_prepare_cmd(const void *arg) {
    char **argv = (char **)arg;
    int argc = 0;
    while (argv[argc]) argc++;
    prepare_main(argc, argv);
}

static void corrupt_copy(const char *src, const char *dst, long at, const void *bytes, size_t n, long truncate_by) {
    size_t len;
    unsigned char *buf = read_bytes(src, &len);
    if (at >= 0) memcpy(buf + at, bytes, n);
    write_bytes(dst, buf, len - (size_t)truncate_by);
    free(buf);
}

static void test_dataset_errors(void) {
    char *good = tmp_path("js.t5ds");  // from the round trip: 10 examples
    char *p = tmp_path("bad.t5ds");
    uint32_t v2 = 2;
    corrupt_copy(good, p, 0, "GGUF", 4, 0);
    expect_error("open: wrong magic", fail_open, p, p, "not a train_t5 dataset");
    corrupt_copy(good, p, 8, &v2, 4, 0);
    expect_error("open: version 2", fail_open, p, p, "version 2");
    corrupt_copy(good, p, -1, NULL, 0, 4);
    expect_error("open: truncated by 4 bytes", fail_open, p, p, "truncated");
    unsigned char z = 0x7f;
    corrupt_copy(good, p, 64 + 8 * 21 + 5, &z, 1, 0);
    expect_error("open: one byte changed", fail_open, p, p, "corrupt");
    expect_error("open: checksum message", fail_open, p, p, "delete it and run train_t5 prepare again");
    write_text(p, "T5DS");
    expect_error("open: 4-byte file", fail_open, p, p, "too small");
    char *missing = tmp_path("missing.t5ds");
    expect_error("open: missing file", fail_open, missing, missing, "cannot open");
    free(missing);

    // Valid checksums but bad content: only a buggy writer makes these.
    static const int32_t ok[] = {5, 1}, big[] = {5, 100, 1};
    const int32_t *seqs[] = {ok, ok, big, ok};
    int lens[] = {2, 2, 3, 2};
    write_t5ds(p, 100, 2, seqs, lens, 1);
    expect_error("open: token id 100 of vocab 100", fail_open, p, p, "outside the vocabulary [0, 100)");
    int lens0[] = {2, 0, 3, 4};
    const int32_t *seqs0[] = {ok, ok, ok, ok};
    static const int32_t four[] = {5, 6, 7, 1};
    seqs0[3] = four;
    seqs0[2] = big;
    write_t5ds(p, 1000, 2, seqs0, lens0, 1);
    expect_error("open: empty target (offsets)", fail_open, p, p, "offsets not increasing");
    write_t5ds(p, 1000, 2, seqs, lens, 0);
    expect_error("open: wrong header checksum", fail_open, p, p, "corrupt");
    free(p);
    free(good);
}

// Errors of JSON-lines text.
static void check_jsonl_errors(void) {
    char *j = tmp_path("e.jsonl");
    char needle[512];
    TextSpec jl = {.format = TEXT_JSONL, .source_path = j, .src_lang = "en", .tgt_lang = "ro", .source_prefix = "",
                   .max_examples = -1};
    write_text(j, "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\n{\"translation\": {\"en\": \"a\", \"ro\": }}\n");
    snprintf(needle, sizeof needle, "%s:2: malformed JSON", j);
    expect_error("jsonl: malformed line 2", fail_prepare, &jl, needle, NULL);
    write_text(j, "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}} x\n");
    snprintf(needle, sizeof needle, "%s:1: extra text", j);
    expect_error("jsonl: trailing text", fail_prepare, &jl, needle, NULL);
    write_text(j, "{\"translation\": {\"en\": \"a\", \"de\": \"b\"}}\n");
    snprintf(needle, sizeof needle, "%s:1: \"translation\" has no key \"ro\"", j);
    expect_error("jsonl: missing language key", fail_prepare, &jl, needle, "(it has: \"en\", \"de\")");
    write_text(j, "{\"en\": \"a\", \"ro\": \"b\"}\n");
    snprintf(needle, sizeof needle, "%s:1: no \"translation\" object", j);
    expect_error("jsonl: no translation", fail_prepare, &jl, needle, "keys: \"en\", \"ro\"");
    write_text(j, "{\"translation\": {\"en\": \"a\", \"ro\": 5}}\n");
    expect_error("jsonl: number value", fail_prepare, &jl, j, "is a number; it must be a string");
    write_text(j, "{\"translation\": {\"en\": \"\", \"ro\": \"b\"}}\n");
    expect_error("jsonl: empty string", fail_prepare, &jl, j, "empty string");
    write_text(j, "{\"translation\": {\"en\": \"a\", \"ro\": \"b\"}}\n\n");
    snprintf(needle, sizeof needle, "%s:2: empty line", j);
    expect_error("jsonl: blank line", fail_prepare, &jl, needle, NULL);
    write_text(j, "{\"translation\": {\"en\": \"a\xff\", \"ro\": \"b\"}}\n");
    snprintf(needle, sizeof needle, "%s:1: invalid UTF-8", j);
    expect_error("jsonl: invalid UTF-8", fail_prepare, &jl, needle, NULL);
    unlink(j);
    expect_error("jsonl: missing file", fail_prepare, &jl, j, "cannot open");

    free(j);
}

// Errors of the prepare command's flags.
static void check_prepare_cmd_errors(void) {
    char *o = tmp_path("prep_err");
    char *a1[] = {"prepare", "--data_dir", SAMPLE, "--tokenizer_name", SAMPLE, "--task", "translation_en_to_xx",
                  "--output_dir", o, NULL};
    expect_error("prepare: unknown task", fail_prepare_cmd, a1, "translation_en_to_xx", "en, ro, de, fr");
    char *a2[] = {"prepare", "--data_dir", SAMPLE, "--output_dir", o, NULL};
    expect_error("prepare: no tokenizer", fail_prepare_cmd, a2, "--tokenizer_name", "required");
    char *a3[] = {"prepare", "--train_file", SAMPLE "/wmt16_sample.jsonl", "--tokenizer_name", SPIECE, "--output_dir", o,
                  NULL};
    expect_error("prepare: JSON lines, no languages", fail_prepare_cmd, a3, "--source_lang", "--target_lang");
    char *a4[] = {"prepare", "--data_dir", g_tmp, "--tokenizer_name", SPIECE, "--output_dir", o, NULL};
    expect_error("prepare: no splits in --data_dir", fail_prepare_cmd, a4, g_tmp, "train.source");
    free(o);
}
static void test_text_errors(void) {
    char *s = tmp_path("e.source"), *t = tmp_path("e.target");
    char needle[512];
    TextSpec pairs = {.format = TEXT_PAIRS, .source_path = s, .target_path = t, .source_prefix = "", .max_examples = -1};

    unlink(s);
    write_text(t, "x\n");
    expect_error("text: missing .source", fail_prepare, &pairs, s, "cannot open");

    write_text(s, "a\nb\nc\n");
    write_text(t, "a\nb\n");
    expect_error("text: 3 vs 2 lines", fail_prepare, &pairs, "has 3 lines", "has 2");
    expect_error("text: mismatch names the target", fail_prepare, &pairs, t, "translation of line i");

    write_text(s, "a\n\nc\n");
    write_text(t, "a\nb\nc\n");
    snprintf(needle, sizeof needle, "%s:2: empty line", s);
    expect_error("text: empty source line 2", fail_prepare, &pairs, needle, "misaligned");
    char left[256];
    test_check(!tmp_files_in(g_tmp, left, sizeof left), "a failed prepare leaves no .tmp file (fail.t5ds.<pid>.tmp)");

    write_text(s, "a\nb\nc");
    write_text(t, "a\r\n\r\nc");
    snprintf(needle, sizeof needle, "%s:2: empty line", t);
    expect_error("text: CRLF-only target line 2", fail_prepare, &pairs, needle, NULL);
    // universal newlines: "\r\r\n" is two ends (an empty line 2), "\n\r" too, and a CR-only
    // file against an LF file of another line count is a count mismatch
    write_text(s, "a\r\r\nc\r\n");
    write_text(t, "a\nb\nc\n");
    snprintf(needle, sizeof needle, "%s:2: empty line", s);
    expect_error("text: \\r\\r\\n is two line ends", fail_prepare, &pairs, needle, NULL);
    write_text(s, "a\n\rc");
    snprintf(needle, sizeof needle, "%s:2: empty line", s);
    expect_error("text: \\n\\r is two line ends", fail_prepare, &pairs, needle, NULL);
    write_text(s, "a\rb\rc\rd");
    expect_error("text: CR-only 4 lines vs 3", fail_prepare, &pairs, "has 4 lines", "has 3");
    write_text(t, "x\ry\r\rz");
    snprintf(needle, sizeof needle, "%s:3: empty line", t);
    expect_error("text: CR-only empty line 3", fail_prepare, &pairs, needle, NULL);

    // Not a regular file: a FIFO (no writer: the old open blocked), a character device, a
    // socket; refused in one line saying what the path is, before anything is read.
    write_text(t, "a\nb\n");
    unlink(s);
    if (mkfifo(s, 0600) == 0) {
        expect_error("text: .source a FIFO", fail_prepare_10s, &pairs, s, "is a FIFO (a pipe)");
        unlink(s);
    } else {
        test_check(0, "mkfifo for the FIFO case");
    }
    TextSpec dev = pairs;
    dev.source_path = "/dev/null";
    expect_error("text: .source /dev/null", fail_prepare_10s, &dev, "/dev/null", "is a character device");
    dev.source_path = "/dev/zero";  // would never end
    expect_error("text: .source /dev/zero", fail_prepare_10s, &dev, "/dev/zero", "is a character device");
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s);
    if (sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0) {
        expect_error("text: .source a socket", fail_prepare_10s, &pairs, s, "is a socket");
        unlink(s);
    } else {
        test_check(0, "a UNIX socket for the socket case");
    }
    if (sock >= 0) close(sock);
    char *j = tmp_path("fifo.jsonl");
    TextSpec jf = {.format = TEXT_JSONL, .source_path = j, .src_lang = "en", .tgt_lang = "ro", .source_prefix = "",
                   .max_examples = -1};
    if (mkfifo(j, 0600) == 0) {
        expect_error("jsonl: a FIFO", fail_prepare_10s, &jf, j, "is a FIFO (a pipe)");
        unlink(j);
    }
    free(j);

    write_text(s, "good\nab\xff" "cd\n");
    write_text(t, "bun\nab\n");
    snprintf(needle, sizeof needle, "%s:2: invalid UTF-8 at byte 2", s);
    expect_error("text: invalid UTF-8", fail_prepare, &pairs, needle, NULL);
    write_text(s, "good\n\xc3\xa9t\xc3\n");
    snprintf(needle, sizeof needle, "%s:2: invalid UTF-8 at byte 3", s);
    expect_error("text: truncated UTF-8 sequence", fail_prepare, &pairs, needle, NULL);

    // max_examples stops before a bad line: only the first N are read.
    pairs.max_examples = 1;
    write_text(s, "good\n\n");
    write_text(t, "bun\n\n");
    char *out = tmp_path("first1.t5ds");
    dataset_prepare(&pairs, g_spm, out);
    Dataset ds;
    dataset_open(&ds, out);
    test_check(ds.count == 1, "max_examples 1 reads only line 1 (a bad line 2 is never seen)");
    dataset_close(&ds);
    free(out);
    pairs.max_examples = -1;

    check_jsonl_errors();
    check_prepare_cmd_errors();
    free(s);
    free(t);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/t5_test_data_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    g_spm = spm_load(SPIECE);
    test_reader_pairs();
    test_reader_jsonl();
    test_reader_crlf();
    test_reader_universal_newlines();
    test_prepare_roundtrip();
    test_cache_path();
    test_prepare_cmd();
    test_dataset_errors();
    test_text_errors();
    spm_free(g_spm);
    rm_rf(g_tmp);
    return test_summary();
}
