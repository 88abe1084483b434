// eval/bleu.c: sacreBLEU-exact corpus BLEU and chrF (see bleu.h). Sources reproduced
// (sacrebleu 2.6.0): tokenizers/tokenizer_13a.py, tokenizers/tokenizer_re.py,
// metrics/helpers.py, metrics/bleu.py (compute_bleu), metrics/chrf.py
// (_compute_f_score, _get_match_statistics), utils.py (my_log), sacrebleu.py (files read as
// strict UTF-8 with newline="\n", each line rstrip()ed; the file reading is cmd/bleu.c).
#include "bleu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

// ---- UTF-8 and Python's whitespace ---------------------------------------------------------

// Decode the code point at s[i] (i < n); returns its byte length. An invalid byte is one
// character of its own (cp 0xDC00 + byte: never whitespace, never equal to valid text).
static size_t utf8_next(const unsigned char *s, size_t i, size_t n, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else goto bad;
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) goto bad;
    for (size_t k = 1; k < len; k++) {
        if (k > 1 && (s[i + k] < 0x80 || s[i + k] > 0xBF)) goto bad;
        v = (v << 6) | (s[i + k] & 0x3F);
    }
    *cp = v;
    return len;
bad:
    *cp = 0xDC00 + c;
    return 1;
}

// Python str.isspace(), which str.split() and str.rstrip() use (checked against CPython
// 3.11 over all of Unicode).
static int py_isspace(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t bleu_rstrip_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_next(u, i, n, &cp);
        i += k;
        if (!py_isspace(cp)) end = i;
    }
    return end;
}

// ---- growable byte buffer ----------------------------------------------------------------

void bleu_buf_reserve(BleuBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) t5_die(__FILE__, __LINE__, "out of memory", "score fewer or shorter lines");
    b->p = p;
    b->cap = cap;
}
static void buf_put(BleuBuf *b, const void *s, size_t n) {
    bleu_buf_reserve(b, n);
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void buf_putc(BleuBuf *b, char c) { buf_put(b, &c, 1); }

// ---- the 13a tokenizer -----------------------------------------------------------------

// out = in.replace(from, to) (Python str.replace: left to right, non-overlapping).
static void replace_all(BleuBuf *out, const BleuBuf *in, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    out->len = 0;
    bleu_buf_reserve(out, in->len);
    const char *p = in->p, *end = in->p + in->len;
    for (;;) {
        const char *hit = memmem(p, (size_t)(end - p), from, fl);
        if (!hit) break;
        buf_put(out, p, (size_t)(hit - p));
        buf_put(out, to, tl);
        p = hit + fl;
    }
    buf_put(out, p, (size_t)(end - p));
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// tokenizer_re.py, first regex: ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 "
static int is_re1_char(unsigned char c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
           (c >= ':' && c <= '@') || c == '/';
}

// The three context regexes of tokenizer_re.py, applied one after the other as re.sub does
// (left to right, non-overlapping). They run on bytes: their classes are ASCII, and a
// multi-byte character is a non-digit that is never '.', ',' or '-', so every match and
// every skipped byte is the same as on code points.
//   2: ([^0-9])([\.,]) -> "\1 \2 "   3: ([\.,])([^0-9]) -> " \1 \2"   4: ([0-9])(-) -> "\1 \2 "
static void re_pass(BleuBuf *out, const BleuBuf *in, int which) {
    const unsigned char *s = (const unsigned char *)in->p;
    size_t n = in->len;
    out->len = 0;
    bleu_buf_reserve(out, n + n / 2);
    for (size_t i = 0; i < n;) {
        if (i + 1 < n) {
            unsigned char a = s[i], b = s[i + 1];
            int hit = (which == 2 && !is_digit(a) && (b == '.' || b == ',')) ||
                      (which == 3 && (a == '.' || a == ',') && !is_digit(b)) || (which == 4 && is_digit(a) && b == '-');
            if (hit) {
                char rep[4];
                if (which == 3) rep[0] = ' ', rep[1] = (char)a, rep[2] = ' ', rep[3] = (char)b;
                else rep[0] = (char)a, rep[1] = ' ', rep[2] = (char)b, rep[3] = ' ';
                buf_put(out, rep, 4);
                i += 2;
                continue;
            }
        }
        buf_putc(out, (char)s[i]);
        i++;
    }
}

// ' '.join(s.split()) with Python's whitespace.
static void collapse_spaces(BleuBuf *out, const BleuBuf *in) {
    const unsigned char *s = (const unsigned char *)in->p;
    out->len = 0;
    bleu_buf_reserve(out, in->len);
    int pending = 0;
    for (size_t i = 0; i < in->len;) {
        uint32_t cp;
        size_t k = utf8_next(s, i, in->len, &cp);
        if (py_isspace(cp)) {
            pending = out->len > 0;
        } else {
            if (pending) buf_putc(out, ' ');
            pending = 0;
            buf_put(out, s + i, k);
        }
        i += k;
    }
}

// Tokenizer13a.__call__ into *out (cleared first).
static void tokenize_13a(const char *s, size_t len, BleuBuf *out) {
    BleuBuf a = {0}, b = {0};
    buf_put(&a, s, len);
    replace_all(&b, &a, "<skipped>", "");
    replace_all(&a, &b, "-\n", "");
    replace_all(&b, &a, "\n", " ");
    if (memchr(b.p, '&', b.len)) {
        replace_all(&a, &b, "&quot;", "\"");
        replace_all(&b, &a, "&amp;", "&");
        replace_all(&a, &b, "&lt;", "<");
        replace_all(&b, &a, "&gt;", ">");
    }
    // f' {line} ', then the first regex (context free: every class char c -> " c ",
    // the padding spaces included)
    a.len = 0;
    buf_putc(&a, ' ');
    buf_put(&a, b.p, b.len);
    buf_putc(&a, ' ');
    b.len = 0;
    bleu_buf_reserve(&b, 3 * a.len);
    for (size_t i = 0; i < a.len; i++) {
        unsigned char c = (unsigned char)a.p[i];
        if (is_re1_char(c)) {
            char rep[3] = {' ', (char)c, ' '};
            buf_put(&b, rep, 3);
        } else {
            buf_putc(&b, (char)c);
        }
    }
    re_pass(&a, &b, 2);
    re_pass(&b, &a, 3);
    re_pass(&a, &b, 4);
    collapse_spaces(out, &a);
    free(a.p);
    free(b.p);
}

char *bleu_tokenize_13a(const char *s, size_t len, size_t *out_len) {
    BleuBuf out = {0};
    tokenize_13a(s ? s : "", s ? len : 0, &out);
    bleu_buf_reserve(&out, 0);  // a NUL-terminated buffer even for ""
    out.p[out.len] = '\0';
    if (out_len) *out_len = out.len;
    return out.p;
}

// ---- n-gram multiset: byte strings of one order with counts ------------------------------

typedef struct {
    const char *p;
    uint32_t len, order;
    uint64_t hash;
    int64_t count;
    int used;
} NgramSlot;

typedef struct {
    NgramSlot *slots;
    size_t mask;
} NgramTable;

static void ngt_init(NgramTable *t, size_t n_keys) {
    size_t cap = 16;
    while (cap < 2 * n_keys + 8) cap *= 2;
    t->slots = callocCheck(cap, sizeof(NgramSlot));
    t->mask = cap - 1;
}

static uint64_t ngram_hash(const char *p, size_t len, int order) {
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)order;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

// The slot of (p, len, order): the existing one, else a new one when `insert`, else NULL.
static NgramSlot *ngt_find(NgramTable *t, const char *p, size_t len, int order, int insert) {
    uint64_t h = ngram_hash(p, len, order);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        NgramSlot *e = &t->slots[i];
        if (!e->used) {
            if (!insert) return NULL;
            *e = (NgramSlot){p, (uint32_t)len, (uint32_t)order, h, 0, 1};
            return e;
        }
        if (e->hash == h && e->len == len && e->order == (uint32_t)order && memcmp(e->p, p, len) == 0) return e;
    }
}

// ---- BLEU ----------------------------------------------------------------------------------

void bleu_stats_init(BleuStats *s) { memset(s, 0, sizeof *s); }

void bleu_stats_merge(BleuStats *dst, const BleuStats *src) {
    int64_t *d = (int64_t *)dst;
    const int64_t *a = (const int64_t *)src;
    for (int i = 0; i < BLEU_NSTATS; i++) d[i] += a[i];
}

// Token start offsets of a tokenized line (tokens separated by single spaces); the token
// k spans [start[k], start[k+1] - 1), with start[ntok] = len + 1.
static size_t token_starts(const BleuBuf *t, size_t **starts_out) {
    size_t n = 0;
    size_t *st = mallocCheck((t->len / 2 + 2) * sizeof *st);
    if (t->len > 0) {
        st[n++] = 0;
        for (size_t i = 0; i < t->len; i++)
            if (t->p[i] == ' ') st[n++] = i + 1;
    }
    st[n] = t->len + 1;
    *starts_out = st;
    return n;
}

void bleu_stats_add_n(BleuStats *s, const char *hyp, size_t hyp_len, const char *ref, size_t ref_len) {
    if (!hyp) hyp = "", hyp_len = 0;
    if (!ref) ref = "", ref_len = 0;
    // BLEU._preprocess_segment: tokenizer(sent.rstrip())
    BleuBuf th = {0}, tr = {0};
    tokenize_13a(hyp, bleu_rstrip_len(hyp, hyp_len), &th);
    tokenize_13a(ref, bleu_rstrip_len(ref, ref_len), &tr);
    size_t *hs, *rs;
    size_t nh = token_starts(&th, &hs), nr = token_starts(&tr, &rs);
    s->sys_len += (int64_t)nh;
    s->ref_len += (int64_t)nr;  // one reference: the "closest" length is its length
    s->n_sentences++;

    NgramTable t;
    ngt_init(&t, BLEU_MAX_ORDER * nr);
    for (int n = 1; n <= BLEU_MAX_ORDER; n++)
        for (size_t i = 0; i + n <= nr; i++)
            ngt_find(&t, tr.p + rs[i], rs[i + n] - 1 - rs[i], n, 1)->count++;
    // sum over distinct n-grams of min(hyp count, ref count) == matches taken one by one
    // from the reference's remaining count
    for (int n = 1; n <= BLEU_MAX_ORDER; n++) {
        for (size_t i = 0; i + n <= nh; i++) {
            s->total[n - 1]++;
            NgramSlot *e = ngt_find(&t, th.p + hs[i], hs[i + n] - 1 - hs[i], n, 0);
            if (e && e->count > 0) {
                e->count--;
                s->correct[n - 1]++;
            }
        }
    }
    free(t.slots);
    free(hs);
    free(rs);
    free(th.p);
    free(tr.p);
}

void bleu_stats_add(BleuStats *s, const char *hyp, const char *ref) {
    bleu_stats_add_n(s, hyp, hyp ? strlen(hyp) : 0, ref, ref ? strlen(ref) : 0);
}

// utils.my_log: log floored at -9999999999 for 0
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

BleuScore bleu_stats_score(const BleuStats *s) {
    // BLEU.compute_bleu (smooth_method "exp", effective_order false); the operation order
    // follows the Python expressions so the doubles are bit-identical.
    BleuScore r;
    memset(&r, 0, sizeof r);
    r.sys_len = s->sys_len;
    r.ref_len = s->ref_len;
    r.ratio = s->ref_len ? (double)s->sys_len / (double)s->ref_len : 0.0;
    r.bp = 1.0;
    if (s->sys_len < s->ref_len) r.bp = s->sys_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->sys_len) : 0.0;
    int any = 0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) any |= s->correct[n] != 0;
    if (!any) return r;  // score 0, precisions 0 (sacrebleu #141)
    double smooth_mteval = 1.0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) {
        if (s->total[n] == 0) break;
        if (s->correct[n] == 0) {
            smooth_mteval *= 2;
            r.precisions[n] = 100.0 / (smooth_mteval * (double)s->total[n]);
        } else {
            r.precisions[n] = 100.0 * (double)s->correct[n] / (double)s->total[n];
        }
    }
    double sum = 0.0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) sum += my_log(r.precisions[n]);
    r.score = r.bp * exp(sum / BLEU_MAX_ORDER);
    return r;
}

int bleu_score_format(const BleuScore *sc, char *buf, size_t cap) {
    return snprintf(buf, cap, "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                    sc->score, sc->precisions[0], sc->precisions[1], sc->precisions[2], sc->precisions[3], sc->bp,
                    sc->ratio, (long long)sc->sys_len, (long long)sc->ref_len);
}

// ---- chrF ----------------------------------------------------------------------------------

void chrf_stats_init(ChrfStats *s) { memset(s, 0, sizeof *s); }

void chrf_stats_merge(ChrfStats *dst, const ChrfStats *src) {
    int64_t *d = (int64_t *)dst;
    const int64_t *a = (const int64_t *)src;
    for (int i = 0; i < CHRF_NSTATS; i++) d[i] += a[i];
}

// ''.join(s.split()) into *out; returns the number of characters, with the byte offset of
// each in offs[0..n] (offs[n] = out->len).
static size_t strip_whitespace(const char *s, size_t len, BleuBuf *out, size_t **offs_out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t *offs = mallocCheck((len + 1) * sizeof *offs);
    size_t n = 0;
    out->len = 0;
    bleu_buf_reserve(out, len);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = utf8_next(u, i, len, &cp);
        if (!py_isspace(cp)) {
            offs[n++] = out->len;
            buf_put(out, s + i, k);
        }
        i += k;
    }
    offs[n] = out->len;
    *offs_out = offs;
    return n;
}

void chrf_stats_add_n(ChrfStats *s, const char *hyp, size_t hyp_len, const char *ref, size_t ref_len) {
    if (!hyp) hyp = "", hyp_len = 0;
    if (!ref) ref = "", ref_len = 0;
    BleuBuf bh = {0}, br = {0};
    size_t *oh, *orf;
    size_t lh = strip_whitespace(hyp, hyp_len, &bh, &oh);
    size_t lr = strip_whitespace(ref, ref_len, &br, &orf);
    s->n_sentences++;

    NgramTable t;
    ngt_init(&t, CHRF_CHAR_ORDER * lr);
    for (int n = 1; n <= CHRF_CHAR_ORDER; n++)
        for (size_t i = 0; i + n <= lr; i++) ngt_find(&t, br.p + orf[i], orf[i + n] - orf[i], n, 1)->count++;
    for (int n = 1; n <= CHRF_CHAR_ORDER; n++) {
        int64_t rn = lr >= (size_t)n ? (int64_t)(lr - n + 1) : 0;
        int64_t hn = lh >= (size_t)n ? (int64_t)(lh - n + 1) : 0;
        s->ref[n - 1] += rn;
        if (rn == 0) continue;  // _get_match_statistics: no hits counted without reference n-grams
        s->hyp[n - 1] += hn;
        for (size_t i = 0; i + n <= lh; i++) {
            NgramSlot *e = ngt_find(&t, bh.p + oh[i], oh[i + n] - oh[i], n, 0);
            if (e && e->count > 0) {
                e->count--;
                s->match[n - 1]++;
            }
        }
    }
    free(t.slots);
    free(oh);
    free(orf);
    free(bh.p);
    free(br.p);
}

void chrf_stats_add(ChrfStats *s, const char *hyp, const char *ref) {
    chrf_stats_add_n(s, hyp, hyp ? strlen(hyp) : 0, ref, ref ? strlen(ref) : 0);
}

double chrf_stats_score(const ChrfStats *s) {
    // CHRF._compute_f_score with eps_smoothing false (the default; signature "eff:yes"),
    // operation order as in Python.
    const double factor = (double)(CHRF_BETA * CHRF_BETA);
    double avg_prec = 0.0, avg_rec = 0.0;
    int effective_order = 0;
    for (int i = 0; i < CHRF_CHAR_ORDER; i++) {
        if (s->hyp[i] > 0 && s->ref[i] > 0) {
            avg_prec += (double)s->match[i] / (double)s->hyp[i];
            avg_rec += (double)s->match[i] / (double)s->ref[i];
            effective_order++;
        }
    }
    if (effective_order == 0) return 0.0;
    avg_prec /= effective_order;
    avg_rec /= effective_order;
    if (avg_prec + avg_rec == 0.0) return 0.0;
    double score = (1 + factor) * avg_prec * avg_rec;
    score /= (factor * avg_prec) + avg_rec;
    return 100 * score;
}

int chrf_score_format(double score, char *buf, size_t cap) {
    return snprintf(buf, cap, "chrF%d = %.2f", CHRF_BETA, score);
}
