// model/generate.c: greedy and beam-search generation over a KV-cached decoder (see
// generate.h). The search code follows transformers 5.17, generation/utils.py:
//   greedy: GenerationMixin._sample with do_sample False (argmax of the fp32 logits;
//           finished rows continue with pad; stop when every row has eos or at max_length)
//   beam:   GenerationMixin._beam_search and its helpers _get_top_k_continuations,
//           _get_running_beams_for_next_iteration, _update_finished_beams,
//           _check_early_stop_heuristic, _beam_search_has_unfinished_sequences
// with the same fp32 arithmetic (log_softmax of fp32 logits, running sums in fp32, the
// -1e9 penalties, scores divided by length ** length_penalty as an fp32 division) and
// torch.topk's CPU order for equal values (generate_topk).
#include "generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

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

// fp32 log_softmax of one row: (x - max) - log(sum exp(x - max))
static void log_softmax_row(float *out, const float *x, int V) {
    float mx = x[0];
    for (int v = 1; v < V; v++)
        if (x[v] > mx) mx = x[v];
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)(x[v] - mx));
    float lse = (float)log(sum);
    for (int v = 0; v < V; v++) out[v] = (x[v] - mx) - lse;
}

// _sample with do_sample False
static int greedy_search(T5Decoder *d, const GenerateConfig *gc, int *out, int *out_len) {
    const T5Config *c = &d->m->cfg;
    int B = d->B, V = c->vocab_size, Lmax = gc->max_length;
    int eos = c->eos_token_id, pad = c->pad_token_id;
    int *tokens = mallocCheck((size_t)B * sizeof(int));
    int *unfinished = mallocCheck((size_t)B * sizeof(int));
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < Lmax; j++) out[(size_t)b * Lmax + j] = pad;
        out[(size_t)b * Lmax] = tokens[b] = c->decoder_start_token_id;
        unfinished[b] = 1;
        out_len[b] = 0;
    }
    int cur_len = 1, done = 0;
    for (;;) {
        const float *logits = t5_decoder_step(d, tokens);
        // synced (ZeRO stage 3): a rank that has finished keeps stepping, results unused,
        // until every rank has (the steps' weight gathers are collectives)
        if (done) {
            if (t5_all_finished(d->m, 1)) break;
            continue;
        }
        int any = 0;
        for (int b = 0; b < B; b++) {
            const float *row = logits + (size_t)b * V;
            int best = 0;  // torch.argmax: the first maximal value
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            int next = unfinished[b] ? best : pad;
            out[(size_t)b * Lmax + cur_len] = tokens[b] = next;
            // stopping criteria: EosTokenCriteria (last token is eos), MaxLengthCriteria
            if (unfinished[b] && (next == eos || cur_len + 1 >= Lmax)) {
                unfinished[b] = 0;
                out_len[b] = cur_len + 1;
            }
            any |= unfinished[b];
        }
        cur_len++;
        done = !any;
        if (t5_all_finished(d->m, done)) break;
    }
    free(tokens);
    free(unfinished);
    return cur_len;
}

// _beam_search. Per batch item: `nb` running beams and `nb` finished hypotheses (HF's
// `sequences`, `beam_scores`, `is_sent_finished`), K = 2*nb candidates per step.
static int beam_search(T5Decoder *d, const GenerateConfig *gc, int *out, int *out_len) {
    const T5Config *c = &d->m->cfg;
    const int B = d->B, nb = d->beams, N = d->N, V = c->vocab_size, Lmax = gc->max_length;
    const int eos = c->eos_token_id, prompt = 1;  // decoder_prompt_len: the start token
    const int K = 2 * nb;  // beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams, one eos token
    const int fill = c->pad_token_id ? c->pad_token_id : eos;  // `pad_token_id or eos_token_id[0]`
    const double lp = length_penalty_as_typed(gc->length_penalty);
    const float NEG = -1.0e9f;
    size_t Ls = (size_t)Lmax;

    int *run_seq = mallocCheck((size_t)N * Ls * sizeof(int));    // running_sequences (B, nb, L)
    float *run_score = mallocCheck((size_t)N * sizeof(float));    // running_beam_scores
    int *fin_seq = mallocCheck((size_t)N * Ls * sizeof(int));     // sequences
    float *fin_score = mallocCheck((size_t)N * sizeof(float));    // beam_scores
    int *fin_done = mallocCheck((size_t)N * sizeof(int));         // is_sent_finished
    int *fin_len = mallocCheck((size_t)N * sizeof(int));          // generated tokens (beam_indices != -1)
    int *unsat = mallocCheck((size_t)B * sizeof(int));            // is_early_stop_heuristic_unsatisfied
    int *cand_seq = mallocCheck((size_t)K * Ls * sizeof(int));    // topk_running_sequences of one item
    int *new_seq = mallocCheck((size_t)(nb + K) * Ls * sizeof(int));
    float *logp = mallocCheck((size_t)N * V * sizeof(float));
    float *acc = mallocCheck((size_t)nb * V * sizeof(float));
    TkElem *queue = mallocCheck((size_t)nb * V * sizeof(TkElem));
    int *tokens = mallocCheck((size_t)N * sizeof(int)), *src_rows = mallocCheck((size_t)N * sizeof(int));
    int cidx[2 * MAX_BEAMS], sel[3 * MAX_BEAMS], hit[2 * MAX_BEAMS], mfin[3 * MAX_BEAMS];
    float cval[2 * MAX_BEAMS], rval[2 * MAX_BEAMS], merged[3 * MAX_BEAMS];

    for (int r = 0; r < N; r++) {
        for (size_t j = 0; j < Ls; j++) run_seq[r * Ls + j] = fill;
        run_seq[r * Ls] = c->decoder_start_token_id;
        run_score[r] = (r % nb) ? NEG : 0.0f;  // only beam 0 is live at the start
        fin_score[r] = NEG;
        fin_done[r] = 0;
        fin_len[r] = 0;
        tokens[r] = c->decoder_start_token_id;
    }
    memcpy(fin_seq, run_seq, (size_t)N * Ls * sizeof(int));
    for (int b = 0; b < B; b++) unsat[b] = 1;

    int cur_len = prompt, done = 0;
    for (;;) {
        const float *logits = t5_decoder_step(d, tokens);
        if (done) {  // synced generation: see greedy_search
            if (t5_all_finished(d->m, 1)) break;
            continue;
        }
        // rows are independent: threads over rows give the same bits as one thread
#pragma omp parallel for schedule(static)
        for (int r = 0; r < N; r++) log_softmax_row(logp + (size_t)r * V, logits + (size_t)r * V, V);
        int all_hit = 1;
        // HF: topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** length_penalty), the
        // python float cast to fp32 by the tensor division
        const float denom = (float)pow((double)(cur_len + 1 - prompt), lp);
        for (int b = 0; b < B; b++) {
            int *rs = run_seq + (size_t)b * nb * Ls, *fs = fin_seq + (size_t)b * nb * Ls;
            float *rsc = run_score + (size_t)b * nb, *fsc = fin_score + (size_t)b * nb;
            int *fd = fin_done + (size_t)b * nb, *fl = fin_len + (size_t)b * nb;
            // b. accumulated scores (nb*V): log_probs + running_beam_scores, fp32
            for (int j = 0; j < nb; j++)
                for (int v = 0; v < V; v++) acc[(size_t)j * V + v] = logp[((size_t)b * nb + j) * V + v] + rsc[j];
            // c. _get_top_k_continuations
            topk_with(queue, acc, nb * V, K, cidx, cval);
            for (int i = 0; i < K; i++) {
                int beam = cidx[i] / V, tok = cidx[i] % V;
                memcpy(cand_seq + i * Ls, rs + beam * Ls, Ls * sizeof(int));
                cand_seq[i * Ls + cur_len] = tok;
                cidx[i] = beam;  // keep the source beam
                // d. stopping criteria of the candidate (length cur_len + 1)
                hit[i] = tok == eos || cur_len + 1 >= Lmax;
                all_hit &= hit[i];
            }
            // e. _get_running_beams_for_next_iteration
            for (int i = 0; i < K; i++) rval[i] = cval[i] + (hit[i] ? NEG : -0.0f);
            topk_with(queue, rval, K, nb, sel, NULL);
            for (int j = 0; j < nb; j++) {
                memcpy(new_seq + j * Ls, cand_seq + sel[j] * Ls, Ls * sizeof(int));
                src_rows[b * nb + j] = b * nb + cidx[sel[j]];
                tokens[b * nb + j] = cand_seq[sel[j] * Ls + cur_len];
            }
            float new_rsc[MAX_BEAMS];
            for (int j = 0; j < nb; j++) new_rsc[j] = rval[sel[j]];
            // f. _update_finished_beams (uses the heuristic flag of the previous step)
            int full = gc->early_stopping;
            for (int j = 0; j < nb; j++) full &= fd[j];
            for (int i = 0; i < K; i++) {
                int just_finished = hit[i] && i < nb;  // top_num_beam_mask
                float s = cval[i] / denom;
                s += full ? NEG : -0.0f;
                s += unsat[b] ? -0.0f : NEG;
                s += just_finished ? -0.0f : NEG;
                merged[nb + i] = s;
                mfin[nb + i] = just_finished;
            }
            for (int j = 0; j < nb; j++) {
                merged[j] = fsc[j];
                mfin[j] = fd[j];
            }
            topk_with(queue, merged, nb + K, nb, sel, NULL);
            // gather the new finished set (sources: old finished j < nb, candidates nb + i)
            int *fseq = new_seq + (size_t)nb * Ls;
            float nfsc[MAX_BEAMS];
            int nfd[MAX_BEAMS], nfl[MAX_BEAMS];
            for (int j = 0; j < nb; j++) {
                int s = sel[j];
                const int *src = s < nb ? fs + s * Ls : cand_seq + (s - nb) * Ls;
                memcpy(fseq + (size_t)j * Ls, src, Ls * sizeof(int));
                nfsc[j] = merged[s];
                nfd[j] = mfin[s];
                nfl[j] = s < nb ? fl[s] : cur_len + 1 - prompt;
            }
            memcpy(rs, new_seq, (size_t)nb * Ls * sizeof(int));
            memcpy(rsc, new_rsc, (size_t)nb * sizeof(float));
            memcpy(fs, fseq, (size_t)nb * Ls * sizeof(int));
            memcpy(fsc, nfsc, (size_t)nb * sizeof(float));
            memcpy(fd, nfd, (size_t)nb * sizeof(int));
            memcpy(fl, nfl, (size_t)nb * sizeof(int));
        }
        cur_len++;
        // _check_early_stop_heuristic (early_stopping True/False: best length = cur_len - prompt)
        const float best_den = (float)pow((double)(cur_len - prompt), lp);
        int improvement_possible = 0, all_finished = 1;
        for (int b = 0; b < B; b++) {
            const float *fsc = fin_score + (size_t)b * nb;
            const int *fd = fin_done + (size_t)b * nb;
            float best = run_score[(size_t)b * nb] / best_den, worst = fsc[0];
            for (int j = 1; j < nb; j++)
                if (fsc[j] < worst) worst = fsc[j];
            int better = 0;
            for (int j = 0; j < nb; j++) better |= best > (fd[j] ? worst : NEG);
            unsat[b] &= better;
            improvement_possible |= unsat[b];
            for (int j = 0; j < nb; j++) all_finished &= fd[j];
        }
        // _beam_search_has_unfinished_sequences
        int exists_open_beam = !(all_finished && gc->early_stopping);
        done = !(improvement_possible && exists_open_beam && !all_hit);
        if (t5_all_finished(d->m, done)) break;
        if (!done) t5_decoder_reorder(d, src_rows);  // HF reorders the cache with the running beams' sources
    }

    // 5. the best finished hypothesis of each item; width = prompt + longest generated length
    int width = 0;
    for (int b = 0; b < B; b++) {
        const int *best = fin_seq + (size_t)b * nb * Ls;
        memcpy(out + (size_t)b * Ls, best, Ls * sizeof(int));
        out_len[b] = prompt + fin_len[(size_t)b * nb];
        if (out_len[b] > width) width = out_len[b];
    }
    free(run_seq), free(run_score), free(fin_seq), free(fin_score), free(fin_done), free(fin_len), free(unsat);
    free(cand_seq), free(new_seq), free(logp), free(acc), free(queue), free(tokens), free(src_rows);
    return width;
}

static int generate_impl(T5Model *m, const int *input_ids, const int *attention_mask, int B, int S,
                         const GenerateConfig *gc, int *out, int *out_len, int force_beam) {
    check_inputs(m, input_ids, attention_mask, B, S, gc);
    T5Decoder d;
    t5_decoder_init(&d, m, B, gc->num_beams, S, gc->max_length);
    t5_decoder_encode(&d, input_ids, attention_mask);
    int width = (gc->num_beams == 1 && !force_beam) ? greedy_search(&d, gc, out, out_len)
                                                    : beam_search(&d, gc, out, out_len);
    t5_decoder_free(&d);
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
