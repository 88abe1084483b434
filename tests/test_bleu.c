// tests/test_bleu.c: corpus BLEU and chrF (eval/bleu.c) against sacreBLEU 2.6.0, using
// tests/fixtures/bleu/cases.json written by tools/make_bleu_fixture.py: for every case
// (hypothesis sets derived from the 1999-line data/sample/test.target, the English source,
// tiny hand cases) the summed statistics must be equal, the scores within 0.005 (they are
// bit-identical) and the printed strings equal, both through the streaming API and through
// `train_t5 bleu` (bleu_main, run in a child with its stdout captured); the 13a tokenizer on
// tricky strings; merging partial statistics; error paths (forked children: exit 1, one
// "error:" line). Run from the repository root.
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../cmd/cmd.h"
#include "../common/check.h"
#include "../eval/bleu.h"
#include "test.h"
#include "../trainer/progress.h"

#define FIXTURE "tests/fixtures/bleu/cases.json"
#define SCORE_TOL 0.005

static char *read_or_die(const char *path, size_t *len) {
    char *s = read_text_file(path, len);
    if (!s) {
        printf("NOT OK cannot read %s (run from the repository root; regenerate with tools/make_bleu_fixture.py)\n",
               path);
        exit(1);
    }
    return s;
}

// Lines as sacrebleu's CLI iterates a file (split on '\n'; a final piece without '\n'
// counts). Returns the count; the lines stay in buf (not NUL-terminated: lens given).
static int split_lines(const char *buf, size_t len, const char ***lines_out, size_t **lens_out) {
    int n = 0, cap = 4096;
    const char **lines = mallocCheck(cap * sizeof *lines);
    size_t *lens = mallocCheck(cap * sizeof *lens);
    size_t start = 0;
    while (start < len) {
        const char *nl = memchr(buf + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - buf) : len;
        if (n == cap) {
            cap *= 2;
            lines = realloc(lines, cap * sizeof *lines);
            lens = realloc(lens, cap * sizeof *lens);
            if (!lines || !lens) t5_die(__FILE__, __LINE__, "out of memory", NULL);
        }
        lines[n] = buf + start;
        lens[n] = end - start;
        n++;
        start = end + 1;
    }
    *lines_out = lines;
    *lens_out = lens;
    return n;
}

static int64_t jint(const cJSON *o, const char *key) { return (int64_t)cJSON_GetObjectItem(o, key)->valuedouble; }
static const char *jstr(const cJSON *o, const char *key) { return cJSON_GetObjectItem(o, key)->valuestring; }
static int jarr_eq(const cJSON *o, const char *key, const int64_t *got, int n) {
    const cJSON *a = cJSON_GetObjectItem(o, key);
    if (cJSON_GetArraySize(a) != n) return 0;
    for (int i = 0; i < n; i++)
        if ((int64_t)cJSON_GetArrayItem(a, i)->valuedouble != got[i]) return 0;
    return 1;
}

// ---- run bleu_main in a child; capture stdout, stderr and the exit code ------------------

typedef struct {
    int code;
    char out[4096], err[4096];
    double seconds;
} MainRun;

static void drain(int fd, char *buf, size_t cap) {
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fd);
}

extern void __lsan_disable(void) __attribute__((weak));

static MainRun run_main(int argc, char **argv) {
    MainRun m;
    memset(&m, 0, sizeof m);
    int po[2], pe[2];
    if (pipe(po) != 0 || pipe(pe) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    fflush(stderr);
    double t0 = now_seconds();
    pid_t pid = fork();
    if (pid == 0) {
        if (__lsan_disable) __lsan_disable();
        close(po[0]);
        close(pe[0]);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        int rc = bleu_main(argc, argv);
        fflush(stdout);
        _exit(rc);
    }
    close(po[1]);
    close(pe[1]);
    // outputs are small (< pipe buffer), so reading one after the other cannot deadlock
    drain(po[0], m.out, sizeof m.out);
    drain(pe[0], m.err, sizeof m.err);
    int status = 0;
    waitpid(pid, &status, 0);
    m.seconds = now_seconds() - t0;
    m.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return m;
}

// ---- the fixture cases ---------------------------------------------------------------------

static int g_exact = 0, g_cases = 0;

static void test_case(const cJSON *c) {
    const char *name = jstr(c, "name");
    size_t hl, rl;
    char *hbuf = read_or_die(jstr(c, "hyp"), &hl), *rbuf = read_or_die(jstr(c, "ref"), &rl);
    const char **hyps, **refs;
    size_t *hlens, *rlens;
    int nh = split_lines(hbuf, hl, &hyps, &hlens), nr = split_lines(rbuf, rl, &refs, &rlens);
    char what[1024];
    snprintf(what, sizeof what, "%-22s line counts %d / %d (fixture %lld)", name, nh, nr, (long long)jint(c, "lines"));
    test_check(nh == nr && nh == jint(c, "lines"), what);

    BleuStats bs;
    ChrfStats cs;
    bleu_stats_init(&bs);
    chrf_stats_init(&cs);
    for (int i = 0; i < nh && i < nr; i++) {
        bleu_stats_add_n(&bs, hyps[i], hlens[i], refs[i], rlens[i]);
        chrf_stats_add_n(&cs, hyps[i], hlens[i], refs[i], rlens[i]);
    }
    // statistics: exact integers
    const cJSON *jb = cJSON_GetObjectItem(c, "bleu_stats"), *jc = cJSON_GetObjectItem(c, "chrf_stats");
    int bst_ok = bs.sys_len == jint(jb, "sys_len") && bs.ref_len == jint(jb, "ref_len") &&
                 jarr_eq(jb, "correct", bs.correct, BLEU_MAX_ORDER) && jarr_eq(jb, "total", bs.total, BLEU_MAX_ORDER);
    snprintf(what, sizeof what,
             "%-22s BLEU statistics equal (len %lld/%lld, correct %lld/%lld/%lld/%lld of %lld/%lld/%lld/%lld)", name,
             (long long)bs.sys_len, (long long)bs.ref_len, (long long)bs.correct[0], (long long)bs.correct[1],
             (long long)bs.correct[2], (long long)bs.correct[3], (long long)bs.total[0], (long long)bs.total[1],
             (long long)bs.total[2], (long long)bs.total[3]);
    test_check(bst_ok, what);
    int cst_ok = jarr_eq(jc, "hyp", cs.hyp, CHRF_CHAR_ORDER) && jarr_eq(jc, "ref", cs.ref, CHRF_CHAR_ORDER) &&
                 jarr_eq(jc, "match", cs.match, CHRF_CHAR_ORDER);
    snprintf(what, sizeof what, "%-22s chrF statistics equal (6 orders x hyp/ref/match)", name);
    test_check(cst_ok, what);

    // scores and strings
    BleuScore b = bleu_stats_score(&bs);
    double want_b = cJSON_GetObjectItem(c, "bleu")->valuedouble;
    double want_c = cJSON_GetObjectItem(c, "chrf")->valuedouble;
    double got_c = chrf_stats_score(&cs);
    double db = fabs(b.score - want_b), dc = fabs(got_c - want_c);
    snprintf(what, sizeof what, "%-22s BLEU %.17g vs sacrebleu %.17g  |diff| %.3e (tol %.3f)", name, b.score, want_b,
             db, SCORE_TOL);
    test_check(db <= SCORE_TOL, what);
    snprintf(what, sizeof what, "%-22s chrF %.17g vs sacrebleu %.17g  |diff| %.3e (tol %.3f)", name, got_c, want_c,
             dc, SCORE_TOL);
    test_check(dc <= SCORE_TOL, what);
    g_cases++;
    g_exact += b.score == want_b && got_c == want_c;
    char line[512], cline[64];
    bleu_score_format(&b, line, sizeof line);
    chrf_score_format(got_c, cline, sizeof cline);
    snprintf(what, sizeof what, "%-22s strings: %s | %s", name, line, cline);
    int str_ok = !strcmp(line, jstr(c, "bleu_string")) && !strcmp(cline, jstr(c, "chrf_string"));
    test_check(str_ok, what);
    if (!str_ok) printf("       want: %s | %s\n", jstr(c, "bleu_string"), jstr(c, "chrf_string"));
    snprintf(what, sizeof what, "%-22s signatures equal", name);
    test_check(!strcmp(BLEU_SIGNATURE, jstr(c, "bleu_signature")) && !strcmp(CHRF_SIGNATURE, jstr(c, "chrf_signature")),
               what);

    // the same through `train_t5 bleu HYP REF`
    char *argv[] = {"bleu", (char *)jstr(c, "hyp"), (char *)jstr(c, "ref"), NULL};
    MainRun m = run_main(3, argv);
    char want[2048];
    snprintf(want, sizeof want, "%s\n%s\nBLEU signature: %s\nchrF2 signature: %s\n", jstr(c, "bleu_string"),
             jstr(c, "chrf_string"), jstr(c, "bleu_signature"), jstr(c, "chrf_signature"));
    snprintf(what, sizeof what, "%-22s train_t5 bleu: exit %d, stdout as sacrebleu, stderr empty (%.0f ms)", name,
             m.code, 1e3 * m.seconds);
    int main_ok = m.code == 0 && !strcmp(m.out, want) && m.err[0] == '\0';
    test_check(main_ok, what);
    if (!main_ok) printf("       got:\n%s       stderr: %s\n       want:\n%s", m.out, m.err, want);

    free(hyps);
    free(refs);
    free(hlens);
    free(rlens);
    free(hbuf);
    free(rbuf);
}

static void test_tokenizer(const cJSON *toks) {
    int n = cJSON_GetArraySize(toks);
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(toks, i);
        const char *in = jstr(t, "input"), *want = jstr(t, "output");
        size_t len;
        char *got = bleu_tokenize_13a(in, strlen(in), &len);
        int ok = len == strlen(want) && !strcmp(got, want);
        char what[512];
        snprintf(what, sizeof what, "13a tokenizer %2d: [%.80s]", i, got);
        test_check(ok, what);
        if (!ok) printf("       want: [%s]\n", want);
        free(got);
    }
}

// Partial statistics add up: two halves merged == one pass; NULL counts as "".
static void test_streaming(void) {
    size_t hl, rl;
    char *hbuf = read_or_die("data/sample/test.source", &hl), *rbuf = read_or_die("data/sample/test.target", &rl);
    const char **hyps, **refs;
    size_t *hlens, *rlens;
    int n = split_lines(hbuf, hl, &hyps, &hlens);
    split_lines(rbuf, rl, &refs, &rlens);
    BleuStats all, a, b;
    ChrfStats call, ca, cb;
    bleu_stats_init(&all);
    bleu_stats_init(&a);
    bleu_stats_init(&b);
    chrf_stats_init(&call);
    chrf_stats_init(&ca);
    chrf_stats_init(&cb);
    double t0 = now_seconds();
    for (int i = 0; i < n; i++) {
        bleu_stats_add_n(&all, hyps[i], hlens[i], refs[i], rlens[i]);
        chrf_stats_add_n(&call, hyps[i], hlens[i], refs[i], rlens[i]);
    }
    double dt = now_seconds() - t0;
    for (int i = 0; i < n; i++) {
        bleu_stats_add_n(i % 3 ? &a : &b, hyps[i], hlens[i], refs[i], rlens[i]);
        chrf_stats_add_n(i % 3 ? &ca : &cb, hyps[i], hlens[i], refs[i], rlens[i]);
    }
    bleu_stats_merge(&a, &b);
    chrf_stats_merge(&ca, &cb);
    test_check(!memcmp(&a, &all, sizeof a) && !memcmp(&ca, &call, sizeof ca),
               "streaming: statistics of two interleaved parts merged == one pass (BleuStats, ChrfStats)");
    char what[256];
    snprintf(what, sizeof what, "streaming: %d sentence pairs scored (BLEU + chrF) in %.1f ms", n, 1e3 * dt);
    test_check(all.n_sentences == n && dt < 5.0, what);

    BleuStats s1, s2;
    bleu_stats_init(&s1);
    bleu_stats_init(&s2);
    bleu_stats_add(&s1, NULL, "un doi");
    bleu_stats_add(&s2, "", "un doi");
    ChrfStats c1, c2;
    chrf_stats_init(&c1);
    chrf_stats_init(&c2);
    chrf_stats_add(&c1, "un doi", NULL);
    chrf_stats_add(&c2, "un doi", "");
    test_check(!memcmp(&s1, &s2, sizeof s1) && !memcmp(&c1, &c2, sizeof c1) && s1.ref_len == 2 && s1.sys_len == 0 &&
                   c2.hyp[0] == 0 && c2.ref[0] == 0,
               "NULL hypothesis/reference counts as an empty line");
    free(hyps);
    free(refs);
    free(hlens);
    free(rlens);
    free(hbuf);
    free(rbuf);
}

// ---- error paths -------------------------------------------------------------------------

static char g_tmp[64];

static char *tmp_file(const char *name, const char *data, size_t len) {
    char *p = path_join(g_tmp, name);
    FILE *f = fopenCheck(p, "wb");
    if (len) fwriteCheck(data, 1, len, f, p);
    fcloseCheck(f, p);
    return p;
}

// bleu_main(argv) must exit 1 with one "error:" line containing every needle, nothing on stdout.
static void expect_error(const char *what, int argc, char **argv, const char *needle1, const char *needle2) {
    MainRun m = run_main(argc, argv);
    int lines = 0;
    for (const char *p = m.err; *p; p++) lines += *p == '\n';
    size_t n = strlen(m.err);
    int ok = m.code == 1 && lines == 1 && !strncmp(m.err, "error: ", 7) && n > 0 && m.err[n - 1] == '\n' &&
             m.out[0] == '\0' && strstr(m.err, needle1) && (!needle2 || strstr(m.err, needle2));
    char *nl = strchr(m.err, '\n');
    if (nl) *nl = '\0';
    char desc[1024];
    snprintf(desc, sizeof desc, "error: %-26s exit %d, %d line(s): %.400s", what, m.code, lines, m.err);
    test_check(ok, desc);
    if (!ok) printf("       (wanted exit 1, one error line containing \"%s\"%s%s)\n", needle1, needle2 ? " and " : "",
                    needle2 ? needle2 : "");
}

static void test_errors(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/t5_test_bleu_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        exit(2);
    }
    char *three = tmp_file("three.txt", "a\nb\nc\n", 6);
    char *two = tmp_file("two.txt", "a\nb", 3);
    char *badh = tmp_file("bad_hyp.txt", "ok\nab\xff\x63\nok\n", 10);
    char *badr = tmp_file("bad_ref.txt", "ok\nok\n\xed\xa0\x80 surrogate\n", 18);  // U+D800 encoded
    char *empty = tmp_file("empty.txt", "", 0);
    char *ok3 = tmp_file("ok3.txt", "x\n\ny z\n", 7);

    char *a1[] = {"bleu", three, two, NULL};
    expect_error("different line counts", 3, a1, "has 3 lines but reference file", "has 2");
    char *a2[] = {"bleu", "no/such/hyp.txt", two, NULL};
    expect_error("missing hypothesis file", 3, a2, "cannot open hypothesis file 'no/such/hyp.txt'", NULL);
    char *a3[] = {"bleu", two, "no/such/ref.txt", NULL};
    expect_error("missing reference file", 3, a3, "cannot open reference file 'no/such/ref.txt'", NULL);
    char *a4[] = {"bleu", badh, three, NULL};
    expect_error("invalid UTF-8 in hypotheses", 3, a4, "bad_hyp.txt' line 2: invalid UTF-8", "byte 0xff at byte 3");
    char *a5[] = {"bleu", three, badr, NULL};
    expect_error("surrogate in references", 3, a5, "bad_ref.txt' line 3: invalid UTF-8", NULL);
    char *a6[] = {"bleu", empty, empty, NULL};
    expect_error("empty files", 3, a6, "empty (0 lines)", NULL);
    char *a7[] = {"bleu", three, NULL};
    expect_error("one file only", 2, a7, "exactly two files", "usage: train_t5 bleu HYP_FILE REF_FILE");
    char *a8[] = {"bleu", "--tokenize", "intl", three, NULL};
    expect_error("unknown option", 4, a8, "unknown option '--tokenize'", NULL);
    char *a9[] = {"bleu", g_tmp, three, NULL};
    expect_error("a directory as file", 3, a9, "is a directory, not a regular file (hypothesis)", NULL);

    // an empty hypothesis line is valid; so are all-empty hypotheses
    char *b1[] = {"bleu", ok3, three, NULL};
    MainRun m = run_main(3, b1);
    const char *want0 = "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)\nchrF2 = 0.00\n";
    test_check(m.code == 0 && !strncmp(m.out, want0, strlen(want0)),
               "empty hypothesis lines are valid (exit 0, scores printed)");
    char *h[] = {"bleu", "--help", NULL};
    m = run_main(2, h);
    test_check(m.code == 0 && strstr(m.out, "usage: train_t5 bleu HYP_FILE REF_FILE"), "--help prints the usage, exit 0");

    const char *names[] = {"three.txt", "two.txt", "bad_hyp.txt", "bad_ref.txt", "empty.txt", "ok3.txt"};
    for (int i = 0; i < 6; i++) {
        char *p = path_join(g_tmp, names[i]);
        unlink(p);
        free(p);
    }
    rmdir(g_tmp);
    free(three), free(two), free(badh), free(badr), free(empty), free(ok3);
}

int main(void) {
    size_t len;
    char *text = read_or_die(FIXTURE, &len);
    cJSON *fx = cJSON_Parse(text);
    if (!fx) {
        printf("NOT OK %s does not parse as JSON\n", FIXTURE);
        return 1;
    }
    const char *ver = jstr(fx, "sacrebleu_version");
    char what[256];
    snprintf(what, sizeof what, "fixture made with sacrebleu %s, eval/bleu.h reproduces %s", ver,
             BLEU_SACREBLEU_VERSION);
    test_check(!strcmp(ver, BLEU_SACREBLEU_VERSION), what);

    const cJSON *cases = cJSON_GetObjectItem(fx, "cases");
    for (int i = 0; i < cJSON_GetArraySize(cases); i++) test_case(cJSON_GetArrayItem(cases, i));
    printf("       bit-identical BLEU and chrF doubles on %d of %d cases\n", g_exact, g_cases);
    test_tokenizer(cJSON_GetObjectItem(fx, "tokenizer"));
    test_streaming();
    test_errors();
    cJSON_Delete(fx);
    free(text);
    return test_summary();
}
