// eval/bleu.h: corpus BLEU and chrF that give sacreBLEU's numbers exactly (sacrebleu 2.6.0
// defaults: BLEU with the 13a tokenizer, 4-gram, "exp" smoothing, mixed case; chrF2 with
// 6 character orders, no word orders, whitespace removed, effective-order averaging).
//
// Streaming: the statistics of a corpus are sums of per-sentence integer counts (as in
// sacrebleu's `_extract_corpus_statistics` + `sum_of_lists`), so the trainer feeds each
// (prediction, reference) pair as it is decoded and scores at the end; two partial
// BleuStats/ChrfStats (e.g. from different ranks) add up field by field.
//
// Text is UTF-8 (validate with utf8_valid first: sacreBLEU reads files as strict UTF-8;
// stray invalid bytes here count as one non-space character each). Lines are compared as
// sacreBLEU's CLI does after its `line.rstrip()`: Python's Unicode whitespace
// (str.isspace) is trailing-stripped for BLEU and removed for chrF.
// `train_t5 bleu HYP REF` (cmd/bleu.c) prints the scores and signatures.
#pragma once
#include <stddef.h>

// A growing byte buffer (the scorer's tokens, the bleu command's files): bleu_buf_reserve
// makes room for `extra` more bytes and a NUL after len, doubling.
typedef struct {
    char *p;
    size_t len, cap;
} BleuBuf;
void bleu_buf_reserve(BleuBuf *b, size_t extra);
#include <stdint.h>

#define BLEU_MAX_ORDER 4   // sacrebleu BLEU.MAX_NGRAM_ORDER
#define CHRF_CHAR_ORDER 6  // sacrebleu CHRF.CHAR_ORDER
#define CHRF_BETA 2        // sacrebleu CHRF.BETA

// The sacreBLEU release these numbers and strings reproduce (its signature ends with it).
#define BLEU_SACREBLEU_VERSION "2.6.0"
#define BLEU_SIGNATURE "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" BLEU_SACREBLEU_VERSION
#define CHRF_SIGNATURE "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" BLEU_SACREBLEU_VERSION

// Sufficient statistics of corpus BLEU (one reference per hypothesis). Only int64 fields,
// so a struct can be summed elementwise (bleu_stats_merge, or an allreduce of
// BLEU_NSTATS int64 values).
typedef struct {
    int64_t sys_len;                  // hypothesis tokens (13a), summed over sentences
    int64_t ref_len;                  // reference tokens
    int64_t correct[BLEU_MAX_ORDER];  // clipped n-gram matches, n = 1..4
    int64_t total[BLEU_MAX_ORDER];    // hypothesis n-grams, n = 1..4
    int64_t n_sentences;
} BleuStats;
#define BLEU_NSTATS ((int)(sizeof(BleuStats) / sizeof(int64_t)))

typedef struct {
    double score;                        // 0..100
    double precisions[BLEU_MAX_ORDER];   // percent, after exp smoothing
    double bp;                           // brevity penalty
    double ratio;                        // sys_len / ref_len (0 when ref_len is 0)
    int64_t sys_len, ref_len;
} BleuScore;

// chrF statistics per character order n = 1..6 (sacrebleu's [hyp, ref, match] triplets).
typedef struct {
    int64_t hyp[CHRF_CHAR_ORDER];    // hypothesis n-grams (0 for a sentence whose reference has none)
    int64_t ref[CHRF_CHAR_ORDER];    // reference n-grams
    int64_t match[CHRF_CHAR_ORDER];  // clipped matches
    int64_t n_sentences;
} ChrfStats;
#define CHRF_NSTATS ((int)(sizeof(ChrfStats) / sizeof(int64_t)))

void bleu_stats_init(BleuStats *s);
// Add one sentence pair (NUL-terminated UTF-8; NULL counts as "").
void bleu_stats_add(BleuStats *s, const char *hyp, const char *ref);
// Same with explicit lengths (the text may contain NUL bytes, as Python strings may).
void bleu_stats_add_n(BleuStats *s, const char *hyp, size_t hyp_len, const char *ref, size_t ref_len);
void bleu_stats_merge(BleuStats *dst, const BleuStats *src);
// sacrebleu BLEU.compute_bleu with smooth_method "exp", effective_order false.
BleuScore bleu_stats_score(const BleuStats *s);
// "BLEU = 59.70 100.0/81.3/64.3/47.0 (BP = 0.848 ratio = 0.858 hyp_len = 10989 ref_len = 12806)"
// (str() of sacrebleu's BLEUScore). Returns what snprintf returns.
int bleu_score_format(const BleuScore *sc, char *buf, size_t cap);

void chrf_stats_init(ChrfStats *s);
void chrf_stats_add(ChrfStats *s, const char *hyp, const char *ref);
void chrf_stats_add_n(ChrfStats *s, const char *hyp, size_t hyp_len, const char *ref, size_t ref_len);
void chrf_stats_merge(ChrfStats *dst, const ChrfStats *src);
// sacrebleu CHRF._compute_f_score with eps_smoothing false: average precision and recall
// over the orders that have both hypothesis and reference n-grams, then F-beta. 0..100.
double chrf_stats_score(const ChrfStats *s);
// "chrF2 = 58.41"
int chrf_score_format(double score, char *buf, size_t cap);

// Length of s after Python's s.rstrip() (sacreBLEU's CLI strips every line so).
size_t bleu_rstrip_len(const char *s, size_t n);

// sacrebleu Tokenizer13a()(s) (without BLEU's rstrip): returns a malloc'd NUL-terminated
// string, its length in *out_len when not NULL.
char *bleu_tokenize_13a(const char *s, size_t len, size_t *out_len);
