// cmd/bleu.c: `train_t5 bleu HYP_FILE REF_FILE`: the files read as sacreBLEU's CLI reads
// them (strict UTF-8, lines split on '\n' only, each line rstrip()ed), scored by eval/bleu.c,
// printed as sacreBLEU prints them (see bleu_main in cmd.h).
#include "cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/utf8.h"
#include "../eval/bleu.h"

#define BLEU_USAGE "usage: train_t5 bleu HYP_FILE REF_FILE"

// Whole file (regular file or pipe) into a NUL-terminated buffer.
static char *slurp(const char *path, const char *what, size_t *len_out) {
    FILE *f = file_open_stream(path, what);  // a device or directory: one line; a FIFO nobody writes: empty
    if (!f) t5_fail("cannot open %s file '%s': %s (%s)", what, path, strerror(errno), BLEU_USAGE);
    BleuBuf b = {0};
    bleu_buf_reserve(&b, 1 << 16);
    for (;;) {
        bleu_buf_reserve(&b, 1 << 16);
        size_t got = fread(b.p + b.len, 1, b.cap - b.len - 1, f);
        b.len += got;
        if (got == 0) break;
    }
    if (ferror(f)) t5_fail("cannot read %s file '%s': %s", what, path, strerror(errno));
    fclose(f);
    b.p[b.len] = '\0';
    *len_out = b.len;
    return b.p;
}

// Lines as Python iterates a file opened with newline="\n": split on '\n' only, a final
// line without '\n' counts, nothing after a final '\n'. Returns the count; starts[k] and
// lens[k] (without the '\n').
static size_t split_lines(const char *buf, size_t len, size_t **starts_out, size_t **lens_out) {
    size_t cap = 1024, n = 0;
    size_t *st = mallocCheck(cap * sizeof *st), *ln = mallocCheck(cap * sizeof *ln);
    size_t start = 0;
    while (start < len) {
        const char *nl = memchr(buf + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - buf) : len;
        if (n == cap) {
            cap *= 2;
            st = realloc(st, cap * sizeof *st);
            ln = realloc(ln, cap * sizeof *ln);
            if (!st || !ln) t5_die(__FILE__, __LINE__, "out of memory", "score a smaller file");
        }
        st[n] = start;
        ln[n] = end - start;
        n++;
        start = end + 1;
    }
    *starts_out = st;
    *lens_out = ln;
    return n;
}

static void check_utf8(const char *buf, size_t len, const char *what, const char *path) {
    size_t bad;
    if (utf8_valid(buf, len, &bad)) return;
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < bad; i++)
        if (buf[i] == '\n') line++, line_start = i + 1;
    t5_fail("%s file '%s' line %zu: invalid UTF-8 (byte 0x%02x at byte %zu of the line); sacreBLEU reads text as "
            "strict UTF-8: re-encode the file as UTF-8",
            what, path, line, (unsigned char)buf[bad], bad - line_start + 1);
}

int bleu_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s\n"
                   "  Corpus BLEU and chrF of HYP_FILE against REF_FILE (one sentence per line, same line\n"
                   "  count, UTF-8), exactly as sacreBLEU %s with its defaults (BLEU: 13a tokenizer,\n"
                   "  exp smoothing, mixed case; chrF2: 6 character orders, whitespace removed). Prints\n"
                   "  the two scores as sacreBLEU's Python API str() does, then their signatures.\n",
                   BLEU_USAGE, BLEU_SACREBLEU_VERSION);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            t5_fail("unknown option '%s': train_t5 bleu takes no options (%s)", argv[i], BLEU_USAGE);
    }
    if (argc != 3) t5_fail("train_t5 bleu takes exactly two files, got %d argument(s) (%s)", argc - 1, BLEU_USAGE);
    const char *hyp_path = argv[1], *ref_path = argv[2];
    size_t hlen, rlen;
    char *hbuf = slurp(hyp_path, "hypothesis", &hlen);
    char *rbuf = slurp(ref_path, "reference", &rlen);
    check_utf8(hbuf, hlen, "hypothesis", hyp_path);
    check_utf8(rbuf, rlen, "reference", ref_path);
    size_t *hst, *hln, *rst, *rln;
    size_t nh = split_lines(hbuf, hlen, &hst, &hln);
    size_t nr = split_lines(rbuf, rlen, &rst, &rln);
    if (nh != nr)
        t5_fail("hypothesis file '%s' has %zu lines but reference file '%s' has %zu: they must match line by line", hyp_path,
                nh, ref_path, nr);
    if (nh == 0)
        t5_fail("hypothesis file '%s' and reference file '%s' are empty (0 lines): nothing to score", hyp_path, ref_path);

    BleuStats bs;
    ChrfStats cs;
    bleu_stats_init(&bs);
    chrf_stats_init(&cs);
    for (size_t i = 0; i < nh; i++) {
        // sacrebleu.py reads every line as line.rstrip()
        const char *h = hbuf + hst[i], *r = rbuf + rst[i];
        size_t hl = bleu_rstrip_len(h, hln[i]), rl = bleu_rstrip_len(r, rln[i]);
        bleu_stats_add_n(&bs, h, hl, r, rl);
        chrf_stats_add_n(&cs, h, hl, r, rl);
    }
    BleuScore b = bleu_stats_score(&bs);
    char line[512];
    bleu_score_format(&b, line, sizeof line);
    printf("%s\n", line);
    chrf_score_format(chrf_stats_score(&cs), line, sizeof line);
    printf("%s\n", line);
    printf("BLEU signature: %s\n", BLEU_SIGNATURE);
    printf("chrF%d signature: %s\n", CHRF_BETA, CHRF_SIGNATURE);
    fflush(stdout);
    free(hst);
    free(hln);
    free(rst);
    free(rln);
    free(hbuf);
    free(rbuf);
    return 0;
}

int cmd_run_bleu(int argc, char **argv) { return bleu_main(argc - 1, argv + 1); }
