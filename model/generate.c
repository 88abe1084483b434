// model/generate.c: greedy and beam-search generation over a KV-cached decoder (see
// generate.h). The search code follows transformers 5.17, generation/utils.py:
//   greedy: GenerationMixin._sample with do_sample False (argmax of the fp32 logits;
//           finished rows continue with pad; stop when every row has eos or at max_length)
//   beam:   GenerationMixin._beam_search and its helpers _get_top_k_continuations,
//           _get_running_beams_for_next_iteration, _update_finished_beams,
//           _check_early_stop_heuristic, _beam_search_has_unfinished_sequences
// with the same fp32 arithmetic (log_softmax of fp32 logits, running sums in fp32, the
// -1e9 penalties, scores divided by length ** length_penalty as an fp32 division).
//
// Where the work runs: each step's logits never leave the device. The backend's
// beam_topk (model/kv_decoder.c, t5_decoder_step_topk) does the log_softmax, adds the
// running beam scores and selects every item's top 2*num_beams candidates (greedy: the
// argmax); only those come back, B x 2*num_beams (score, index) pairs (4 KB at batch 64,
// 4 beams, instead of 64 x 4 x 32128 logits). The bookkeeping of _beam_search over those
// candidates (running and finished beams, their sequences, the early-stop heuristic) is a
// few hundred operations per item per step and stays here on the host, in the fp32
// arithmetic and with torch.topk's CPU order of equal values (generate_topk) that HF's
// selections of num_beams among 2*num_beams and 3*num_beams use; the beams' sources go
// back as N ints that reorder the device's beam table (t5_decoder_reorder).
// Equal candidate scores at the 2*num_beams cut are ordered by lower flat index (the
// backend's rule; torch's CPU topk order for such exact ties is not reproduced there).
#include "generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"

// ---------------------------------------------------------------------------------
// torch.topk on the CPU: aten/src/ATen/native/TopKImpl.h (topk_impl_loop) fills a queue of
// (value as accscalar_t = double, index) pairs, then for largest=True, sorted=True runs
//   k * 64 <= n:  std::partial_sort(q, q + k, q + n, comp)
//   otherwise:    std::nth_element(q, q + k - 1, q + n, comp); std::sort(q, q + k - 1, comp)
// with comp(x, y) = (isnan(x) && !isnan(y)) || x > y. Neither is stable, so the order of
// equal values is whatever libstdc++'s algorithms produce; they are transcribed below
// (bits/stl_heap.h, bits/stl_algo.h), operation for operation.

typedef struct {
    double v;
    long i;
} TkElem;

static inline int tk_comp(const TkElem *x, const TkElem *y) {
    return (isnan(x->v) && !isnan(y->v)) || x->v > y->v;
}

static inline void tk_swap(TkElem *a, TkElem *b) {
    TkElem t = *a;
    *a = *b;
    *b = t;
}

// std::__push_heap
static void tk_push_heap(TkElem *first, long hole, long top, TkElem value) {
    long parent = (hole - 1) / 2;
    while (hole > top && tk_comp(first + parent, &value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

// std::__adjust_heap
static void tk_adjust_heap(TkElem *first, long hole, long len, TkElem value) {
    const long top = hole;
    long child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (tk_comp(first + child, first + (child - 1))) child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    tk_push_heap(first, hole, top, value);
}

// std::__make_heap on [first, first + len)
static void tk_make_heap(TkElem *first, long len) {
    if (len < 2) return;
    long parent = (len - 2) / 2;
    for (;;) {
        TkElem value = first[parent];
        tk_adjust_heap(first, parent, len, value);
        if (parent == 0) return;
        parent--;
    }
}

// std::__pop_heap(first, first + len, result)
static void tk_pop_heap(TkElem *first, long len, TkElem *result) {
    TkElem value = *result;
    *result = *first;
    tk_adjust_heap(first, 0, len, value);
}

// std::__heap_select(first, first + middle, first + last)
static void tk_heap_select(TkElem *first, long middle, long last) {
    tk_make_heap(first, middle);
    for (long i = middle; i < last; i++)
        if (tk_comp(first + i, first)) tk_pop_heap(first, middle, first + i);
}

// std::__sort_heap on [first, first + len)
static void tk_sort_heap(TkElem *first, long len) {
    while (len > 1) {
        len--;
        tk_pop_heap(first, len, first + len);
    }
}

// std::__partial_sort(first, first + middle, first + last)
static void tk_partial_sort(TkElem *first, long middle, long last) {
    tk_heap_select(first, middle, last);
    tk_sort_heap(first, middle);
}

// std::__move_median_to_first
static void tk_move_median_to_first(TkElem *result, TkElem *a, TkElem *b, TkElem *c) {
    if (tk_comp(a, b)) {
        if (tk_comp(b, c))
            tk_swap(result, b);
        else if (tk_comp(a, c))
            tk_swap(result, c);
        else
            tk_swap(result, a);
    } else if (tk_comp(a, c)) {
        tk_swap(result, a);
    } else if (tk_comp(b, c)) {
        tk_swap(result, c);
    } else {
        tk_swap(result, b);
    }
}

// std::__unguarded_partition
static TkElem *tk_unguarded_partition(TkElem *first, TkElem *last, TkElem *pivot) {
    for (;;) {
        while (tk_comp(first, pivot)) first++;
        last--;
        while (tk_comp(pivot, last)) last--;
        if (!(first < last)) return first;
        tk_swap(first, last);
        first++;
    }
}

// std::__unguarded_partition_pivot
static TkElem *tk_partition_pivot(TkElem *first, TkElem *last) {
    TkElem *mid = first + (last - first) / 2;
    tk_move_median_to_first(first, first + 1, mid, last - 1);
    return tk_unguarded_partition(first + 1, last, first);
}

// std::__unguarded_linear_insert
static void tk_unguarded_linear_insert(TkElem *last) {
    TkElem value = *last;
    TkElem *next = last - 1;
    while (tk_comp(&value, next)) {
        *last = *next;
        last = next;
        next--;
    }
    *last = value;
}

// std::__insertion_sort
static void tk_insertion_sort(TkElem *first, TkElem *last) {
    if (first == last) return;
    for (TkElem *i = first + 1; i != last; i++) {
        if (tk_comp(i, first)) {
            TkElem value = *i;
            memmove(first + 1, first, (size_t)(i - first) * sizeof *i);
            *first = value;
        } else {
            tk_unguarded_linear_insert(i);
        }
    }
}

static int tk_lg(long n) { return 63 - __builtin_clzl((unsigned long)n); }  // std::__lg

// std::__introselect
static void tk_introselect(TkElem *first, TkElem *nth, TkElem *last, int depth_limit) {
    while (last - first > 3) {
        if (depth_limit == 0) {
            tk_heap_select(first, nth + 1 - first, last - first);
            tk_swap(first, nth);
            return;
        }
        depth_limit--;
        TkElem *cut = tk_partition_pivot(first, last);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    tk_insertion_sort(first, last);
}

enum { TK_SORT_THRESHOLD = 16 };  // std::_S_threshold

// std::__introsort_loop
static void tk_introsort_loop(TkElem *first, TkElem *last, int depth_limit) {
    while (last - first > TK_SORT_THRESHOLD) {
        if (depth_limit == 0) {
            tk_partial_sort(first, last - first, last - first);
            return;
        }
        depth_limit--;
        TkElem *cut = tk_partition_pivot(first, last);
        tk_introsort_loop(cut, last, depth_limit);
        last = cut;
    }
}

// std::sort = __introsort_loop + __final_insertion_sort
static void tk_sort(TkElem *first, TkElem *last) {
    if (first == last) return;
    tk_introsort_loop(first, last, tk_lg(last - first) * 2);
    if (last - first > TK_SORT_THRESHOLD) {
        tk_insertion_sort(first, first + TK_SORT_THRESHOLD);
        for (TkElem *i = first + TK_SORT_THRESHOLD; i != last; i++) tk_unguarded_linear_insert(i);
    } else {
        tk_insertion_sort(first, last);
    }
}

// topk_impl_loop for one row; q is scratch of n elements.
static void topk_with(TkElem *q, const float *x, int n, int k, int *idx, float *val) {
    if (k < 1 || k > n) t5_fail("generate_topk: k = %d is outside [1, n = %d]", k, n);
    for (int j = 0; j < n; j++) {
        q[j].v = (double)x[j];
        q[j].i = j;
    }
    if ((long)k * 64 <= n) {
        tk_partial_sort(q, k, n);
    } else {
        // std::nth_element returns early only when nth == last, impossible for k <= n
        tk_introselect(q, q + k - 1, q + n, tk_lg(n) * 2);
        tk_sort(q, q + k - 1);
    }
    for (int j = 0; j < k; j++) {
        if (idx) idx[j] = (int)q[j].i;
        if (val) val[j] = (float)q[j].v;
    }
}

void generate_topk(const float *x, int n, int k, int *idx, float *val) {
    TkElem *q = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(TkElem));
    topk_with(q, x, n, k, idx, val);
    free(q);
}

// ---------------------------------------------------------------------------------
// search

enum { MAX_BEAMS = 64 };  // bounds the per-item scratch arrays of beam_search

static void check_inputs(const T5Model *m, const int *input_ids, const int *attention_mask, int B, int S,
                         const GenerateConfig *gc) {
    const T5Config *c = &m->cfg;
    if (gc->num_beams < 1 || gc->num_beams > MAX_BEAMS)
        t5_fail("generation: num_beams = %d; it must be in [1, %d] (1 = greedy)", gc->num_beams, MAX_BEAMS);
    if (gc->max_length < 2)
        t5_fail("generation: max_length = %d; it must be >= 2 (it counts the decoder start token)", gc->max_length);
    if (!isfinite(gc->length_penalty)) t5_fail("generation: length_penalty %g is not a finite number", gc->length_penalty);
    if (gc->early_stopping != 0 && gc->early_stopping != 1)
        t5_fail("generation: early_stopping = %d; it must be 0 (False) or 1 (True)", gc->early_stopping);
    if (B < 1 || S < 1) t5_fail("generation: batch %d x source length %d must be positive", B, S);
    for (int b = 0; b < B; b++) {
        int any = 0;
        for (int s = 0; s < S; s++) {
            long i = (long)b * S + s;
            if (input_ids[i] < 0 || input_ids[i] >= c->vocab_size)
                t5_fail("generation: input_ids[%d][%d] = %d is outside the vocabulary [0, %d)", b, s, input_ids[i],
                        c->vocab_size);
            if (attention_mask[i] != 0 && attention_mask[i] != 1)
                t5_fail("generation: attention_mask[%d][%d] = %d; it must be 0 or 1", b, s, attention_mask[i]);
            any |= attention_mask[i];
        }
        if (!any) t5_fail("generation: row %d of attention_mask is all 0 (an empty source; it needs at least </s>)", b);
    }
}

// The length penalty as HF holds it: a python float parsed from the user's decimal text.
// The float we are given came from such a text; the shortest decimal that rounds back to
// it is that text for every usual value (0.6f -> "0.6" -> 0.6, not 0.60000002384).
static double length_penalty_as_typed(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double v = strtod(buf, NULL);
        if ((float)v == f) return v;
    }
    return (double)f;
}

// _sample with do_sample False (the argmax on the device: t5_decoder_step_topk with K = 1)
static int greedy_search(T5Decoder *d, const GenerateConfig *gc, int *out, int *out_len) {
    const T5Config *c = &d->m->cfg;
    int B = d->B, Lmax = gc->max_length;
    int eos = c->eos_token_id, pad = c->pad_token_id;
    int *tokens = mallocCheck((size_t)B * sizeof(int));
    int *best = mallocCheck((size_t)B * sizeof(int));
    float *best_logit = mallocCheck((size_t)B * sizeof(float));
    int *unfinished = mallocCheck((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < Lmax; j++) out[(size_t)b * Lmax + j] = pad;
        out[(size_t)b * Lmax] = tokens[b] = c->decoder_start_token_id;
        unfinished[b] = 1;
        out_len[b] = 0;
    }
    int cur_len = 1, done = 0;
    for (;;) {
        t5_decoder_step_topk(d, tokens, NULL, best_logit, best);  // torch.argmax: the first maximal value
        // synced (ZeRO stage 3): a rank that has finished keeps stepping, results unused,
        // until every rank has (the steps' weight gathers are collectives)
        if (done) {
            if (t5_all_finished(d->m, 1)) break;
            continue;
        }
        int any = 0;
        for (int b = 0; b < B; b++) {
            int next = unfinished[b] ? best[b] : pad;
            out[(size_t)b * Lmax + cur_len] = tokens[b] = next;
            // stopping criteria: EosTokenCriteria (last token is eos), MaxLengthCriteria
            if (unfinished[b] && (next == eos || cur_len + 1 >= Lmax)) {
                unfinished[b] = 0;
                out_len[b] = cur_len + 1;
            }
            any |= unfinished[b];
        }
        cur_len++;
        if (gc->progress) __atomic_store_n(gc->progress, cur_len, __ATOMIC_RELAXED);  // a ticker reads it
        done = !any;
        if (t5_all_finished(d->m, done)) break;
    }
    free(tokens);
    free(best);
    free(best_logit);
    free(unfinished);
    return cur_len;
}

// _beam_search state. Per batch item: `nb` running beams and `nb` finished hypotheses
// (HF's `sequences`, `beam_scores`, `is_sent_finished`), K = 2*nb candidates per step.
typedef struct {
    int B, nb, N, V, Lmax, K, eos, fill;
    int early_stopping;
    double lp;         // length penalty as typed
    size_t Ls;         // (size_t)Lmax
    int *run_seq;      // (B, nb, L) running_sequences
    float *run_score;  // (B, nb) running_beam_scores
    int *fin_seq;      // (B, nb, L) sequences
    float *fin_score;  // (B, nb) beam_scores
    int *fin_done;     // (B, nb) is_sent_finished
    int *fin_len;      // (B, nb) generated tokens (beam_indices != -1)
    int *unsat;        // (B) is_early_stop_heuristic_unsatisfied
    int *cand_seq;     // (K, L) topk_running_sequences of one item
    int *new_seq;      // (nb + K, L) next running set, then the next finished set
    float *cand_score; // (B, K) the step's candidates from the device: accumulated log-probs
    int *cand_idx;     // (B, K) and flat indices beam*V + token
    TkElem *queue;     // (nb + K) top-k scratch of the small selections
    int *tokens;       // (N) next input token per row
    int *src_rows;     // (N) the row each new running beam continues
} BeamState;

// Candidates of one step for one item (filled by beam_candidates, read by beam_update_*).
typedef struct {
    int beam[2 * MAX_BEAMS];   // (K) source beam of each candidate
    float score[2 * MAX_BEAMS];  // (K) accumulated log-prob
    int hit[2 * MAX_BEAMS];    // (K) candidate meets a stopping criterion
} BeamCands;

static const float BEAM_NEG = -1.0e9f;  // HF's penalty for excluded beams
enum { BEAM_PROMPT = 1 };  // decoder_prompt_len: the start token

static void beam_state_init(BeamState *st, const T5Decoder *d, const GenerateConfig *gc) {
    const T5Config *c = &d->m->cfg;
    memset(st, 0, sizeof *st);
    st->B = d->B;
    st->nb = d->beams;
    st->N = d->N;
    st->V = c->vocab_size;
    st->Lmax = gc->max_length;
    st->K = 2 * st->nb;  // beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams, one eos token
    st->eos = c->eos_token_id;
    st->fill = c->pad_token_id ? c->pad_token_id : st->eos;  // `pad_token_id or eos_token_id[0]`
    st->early_stopping = gc->early_stopping;
    st->lp = length_penalty_as_typed(gc->length_penalty);
    size_t N = (size_t)st->N, Ls = st->Ls = (size_t)st->Lmax, nb = (size_t)st->nb;
    st->run_seq = mallocCheck(N * Ls * sizeof(int));
    st->run_score = mallocCheck(N * sizeof(float));
    st->fin_seq = mallocCheck(N * Ls * sizeof(int));
    st->fin_score = mallocCheck(N * sizeof(float));
    st->fin_done = mallocCheck(N * sizeof(int));
    st->fin_len = mallocCheck(N * sizeof(int));
    st->unsat = mallocCheck((size_t)st->B * sizeof(int));
    st->cand_seq = mallocCheck((size_t)st->K * Ls * sizeof(int));
    st->new_seq = mallocCheck((nb + (size_t)st->K) * Ls * sizeof(int));
    st->cand_score = mallocCheck((size_t)st->B * st->K * sizeof(float));
    st->cand_idx = mallocCheck((size_t)st->B * st->K * sizeof(int));
    st->queue = mallocCheck((nb + (size_t)st->K) * sizeof(TkElem));
    st->tokens = mallocCheck(N * sizeof(int));
    st->src_rows = mallocCheck(N * sizeof(int));
    for (size_t r = 0; r < N; r++) {
        for (size_t j = 0; j < Ls; j++) st->run_seq[r * Ls + j] = st->fill;
        st->run_seq[r * Ls] = c->decoder_start_token_id;
        st->run_score[r] = (r % nb) ? BEAM_NEG : 0.0f;  // only beam 0 is live at the start
        st->fin_score[r] = BEAM_NEG;
        st->fin_done[r] = 0;
        st->fin_len[r] = 0;
        st->tokens[r] = c->decoder_start_token_id;
    }
    memcpy(st->fin_seq, st->run_seq, N * Ls * sizeof(int));
    for (int b = 0; b < st->B; b++) st->unsat[b] = 1;
}

static void beam_state_free(BeamState *st) {
    free(st->run_seq), free(st->run_score), free(st->fin_seq), free(st->fin_score), free(st->fin_done);
    free(st->fin_len), free(st->unsat), free(st->cand_seq), free(st->new_seq), free(st->cand_score), free(st->cand_idx);
    free(st->queue), free(st->tokens), free(st->src_rows);
}

// b.-d.: the item's candidates from the device (accumulated scores, _get_top_k_continuations),
// their sequences and stopping criteria (length cur_len + 1). Returns 1 when every
// candidate hit a criterion.
static int beam_candidates(BeamState *st, int b, int cur_len, BeamCands *cd) {
    const int nb = st->nb, V = st->V, K = st->K;
    const size_t Ls = st->Ls;
    const int *rs = st->run_seq + (size_t)b * nb * Ls;
    const int *cidx = st->cand_idx + (size_t)b * K;
    int all_hit = 1;
    for (int i = 0; i < K; i++) {
        int beam = cidx[i] / V, tok = cidx[i] % V;
        memcpy(st->cand_seq + i * Ls, rs + beam * Ls, Ls * sizeof(int));
        st->cand_seq[i * Ls + cur_len] = tok;
        cd->beam[i] = beam;
        cd->score[i] = st->cand_score[(size_t)b * K + i];
        // d. stopping criteria of the candidate
        cd->hit[i] = tok == st->eos || cur_len + 1 >= st->Lmax;
        all_hit &= cd->hit[i];
    }
    return all_hit;
}

// e. _get_running_beams_for_next_iteration: the next running beams into new_seq[0..nb),
// their scores into new_rsc, their sources and tokens into src_rows / tokens.
static void beam_update_running(BeamState *st, int b, int cur_len, const BeamCands *cd, float *new_rsc) {
    const int nb = st->nb, K = st->K;
    const size_t Ls = st->Ls;
    float rval[2 * MAX_BEAMS];
    int sel[MAX_BEAMS];
    for (int i = 0; i < K; i++) rval[i] = cd->score[i] + (cd->hit[i] ? BEAM_NEG : -0.0f);
    topk_with(st->queue, rval, K, nb, sel, NULL);
    for (int j = 0; j < nb; j++) {
        memcpy(st->new_seq + j * Ls, st->cand_seq + sel[j] * Ls, Ls * sizeof(int));
        st->src_rows[b * nb + j] = b * nb + cd->beam[sel[j]];
        st->tokens[b * nb + j] = st->cand_seq[sel[j] * Ls + cur_len];
        new_rsc[j] = rval[sel[j]];
    }
}

// f. _update_finished_beams (uses the heuristic flag of the previous step); the new
// finished set goes into new_seq[nb..2nb) and the item's fin_* arrays.
static void beam_update_finished(BeamState *st, int b, int cur_len, const BeamCands *cd, float denom) {
    const int nb = st->nb, K = st->K;
    const size_t Ls = st->Ls;
    const int *fs = st->fin_seq + (size_t)b * nb * Ls;
    float *fsc = st->fin_score + (size_t)b * nb;
    int *fd = st->fin_done + (size_t)b * nb, *fl = st->fin_len + (size_t)b * nb;
    int full = st->early_stopping;
    for (int j = 0; j < nb; j++) full &= fd[j];
    float merged[3 * MAX_BEAMS];
    int mfin[3 * MAX_BEAMS], sel[MAX_BEAMS];
    for (int i = 0; i < K; i++) {
        int just_finished = cd->hit[i] && i < nb;  // top_num_beam_mask
        float s = cd->score[i] / denom;
        s += full ? BEAM_NEG : -0.0f;
        s += st->unsat[b] ? -0.0f : BEAM_NEG;
        s += just_finished ? -0.0f : BEAM_NEG;
        merged[nb + i] = s;
        mfin[nb + i] = just_finished;
    }
    for (int j = 0; j < nb; j++) {
        merged[j] = fsc[j];
        mfin[j] = fd[j];
    }
    topk_with(st->queue, merged, nb + K, nb, sel, NULL);
    // gather the new finished set (sources: old finished j < nb, candidates nb + i)
    int *fseq = st->new_seq + (size_t)nb * Ls;
    float nfsc[MAX_BEAMS];
    int nfd[MAX_BEAMS], nfl[MAX_BEAMS];
    for (int j = 0; j < nb; j++) {
        int s = sel[j];
        const int *src = s < nb ? fs + s * Ls : st->cand_seq + (s - nb) * Ls;
        memcpy(fseq + (size_t)j * Ls, src, Ls * sizeof(int));
        nfsc[j] = merged[s];
        nfd[j] = mfin[s];
        nfl[j] = s < nb ? fl[s] : cur_len + 1 - BEAM_PROMPT;
    }
    memcpy(st->fin_seq + (size_t)b * nb * Ls, fseq, (size_t)nb * Ls * sizeof(int));
    memcpy(fsc, nfsc, (size_t)nb * sizeof(float));
    memcpy(fd, nfd, (size_t)nb * sizeof(int));
    memcpy(fl, nfl, (size_t)nb * sizeof(int));
}

// _check_early_stop_heuristic (early_stopping True/False: best length = cur_len - prompt)
// and _beam_search_has_unfinished_sequences, after cur_len was advanced. Returns done.
static int beam_check_done(BeamState *st, int cur_len, int all_hit) {
    const int nb = st->nb;
    const float best_den = (float)pow((double)(cur_len - BEAM_PROMPT), st->lp);
    int improvement_possible = 0, all_finished = 1;
    for (int b = 0; b < st->B; b++) {
        const float *fsc = st->fin_score + (size_t)b * nb;
        const int *fd = st->fin_done + (size_t)b * nb;
        float best = st->run_score[(size_t)b * nb] / best_den, worst = fsc[0];
        for (int j = 1; j < nb; j++)
            if (fsc[j] < worst) worst = fsc[j];
        int better = 0;
        for (int j = 0; j < nb; j++) better |= best > (fd[j] ? worst : BEAM_NEG);
        st->unsat[b] &= better;
        improvement_possible |= st->unsat[b];
        for (int j = 0; j < nb; j++) all_finished &= fd[j];
    }
    int exists_open_beam = !(all_finished && st->early_stopping);
    return !(improvement_possible && exists_open_beam && !all_hit);
}

// One step of every item on the step's candidates (st->cand_*). Returns 1 when every
// candidate of every item hit a stopping criterion.
static int beam_step(BeamState *st, int cur_len) {
    const int nb = st->nb;
    // HF: topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** length_penalty), the
    // python float cast to fp32 by the tensor division
    const float denom = (float)pow((double)(cur_len + 1 - BEAM_PROMPT), st->lp);
    int all_hit = 1;
    for (int b = 0; b < st->B; b++) {
        BeamCands cd;
        float new_rsc[MAX_BEAMS];
        all_hit &= beam_candidates(st, b, cur_len, &cd);
        beam_update_running(st, b, cur_len, &cd, new_rsc);
        beam_update_finished(st, b, cur_len, &cd, denom);
        memcpy(st->run_seq + (size_t)b * nb * st->Ls, st->new_seq, (size_t)nb * st->Ls * sizeof(int));
        memcpy(st->run_score + (size_t)b * nb, new_rsc, (size_t)nb * sizeof(float));
    }
    return all_hit;
}

// _beam_search over the decoder's rows (beam j of item b is row b*nb+j).
static int beam_search(T5Decoder *d, const GenerateConfig *gc, int *out, int *out_len) {
    BeamState st;
    beam_state_init(&st, d, gc);
    int cur_len = BEAM_PROMPT, done = 0;
    for (;;) {
        // b.-c. on the device: log_softmax + running scores, each item's top 2*num_beams
        t5_decoder_step_topk(d, st.tokens, st.run_score, st.cand_score, st.cand_idx);
        if (done) {  // synced generation: see greedy_search
            if (t5_all_finished(d->m, 1)) break;
            continue;
        }
        int all_hit = beam_step(&st, cur_len);
        cur_len++;
        if (gc->progress) __atomic_store_n(gc->progress, cur_len, __ATOMIC_RELAXED);  // a ticker reads it
        done = beam_check_done(&st, cur_len, all_hit);
        if (t5_all_finished(d->m, done)) break;
        if (!done) t5_decoder_reorder(d, st.src_rows);  // HF reorders the cache with the running beams' sources
    }
    // 5. the best finished hypothesis of each item; width = prompt + longest generated length
    int width = 0;
    for (int b = 0; b < st.B; b++) {
        memcpy(out + (size_t)b * st.Ls, st.fin_seq + (size_t)b * st.nb * st.Ls, st.Ls * sizeof(int));
        out_len[b] = BEAM_PROMPT + st.fin_len[(size_t)b * st.nb];
        if (out_len[b] > width) width = out_len[b];
    }
    beam_state_free(&st);
    return width;
}

static int generate_impl(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S,
                         const GenerateConfig *gc, int *out, int *out_len, int force_beam) {
    check_inputs(m, input_ids, attention_mask, B, S, gc);
    GenProfile *p = gc->profile;
    double t0 = p ? clock_seconds() : 0.0;
    T5Decoder d;
    t5_decoder_init(&d, m, B, gc->num_beams, S, gc->max_length);
    if (gc->encoder_ready) {
        if (m->B != B || m->S != S)
            t5_fail("generation: encoder_ready, but the last forward was batch %d x %d, not %d x %d", m->B, m->S, B, S);
        t5_decoder_encoded(&d, attention_mask);
    } else {
        t5_decoder_encode(&d, input_ids, attention_mask);
    }
    double t1 = 0.0, in_steps = 0.0;
    if (p) {
        m->be->synchronize();  // the cross-attention K/V GEMMs count as setup, not as the first step
        t1 = clock_seconds();
        p->setup += t1 - t0;
        p->batches++;
        p->rows += d.N;
        in_steps = p->issue + p->gpu_wait + p->readback + p->reorder;
        d.prof = p;
    }
    int width = (gc->num_beams == 1 && !force_beam) ? greedy_search(&d, gc, out, out_len)
                                                    : beam_search(&d, gc, out, out_len);
    double t2 = p ? clock_seconds() : 0.0;
    t5_decoder_free(&d);
    if (p) {  // the search loop's time not spent in the decoder's steps and reorders is bookkeeping
        p->search += (t2 - t1) - (p->issue + p->gpu_wait + p->readback + p->reorder - in_steps);
        p->teardown += clock_seconds() - t2;
    }
    return width;
}

int t5_generate(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S, const GenerateConfig *gc,
                int *out, int *out_len) {
    return generate_impl(m, input_ids, attention_mask, B, S, gc, out, out_len, 0);
}

int t5_generate_beam(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S,
                     const GenerateConfig *gc, int *out, int *out_len) {
    return generate_impl(m, input_ids, attention_mask, B, S, gc, out, out_len, 1);
}
