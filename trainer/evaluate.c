// trainer/evaluate.c: evaluation and prediction as HF's evaluation_loop +
// Seq2SeqTrainer.prediction_step + run_translation's compute_metrics, spread over the ranks:
//   batches: the dataset in order, per_device_eval_batch_size examples each (the last one
//            shorter); batch k goes to rank k mod world, as accelerate's sharded eval
//            dataloader does, so every batch holds the same examples whatever the world
//            size and each rank's results are those one rank would compute;
//   loss:    the mean over batches of each batch's mean token loss (label smoothing included
//            when set): Seq2SeqTrainer.evaluate gathers each batch's loss repeated
//            eval_batch_size times (the configured size, also for the short last batch) and
//            takes the mean, so every batch weighs the same (transformers 5.17 trainer.py,
//            evaluation_loop; checked against it in tests/fixtures). With several ranks HF's
//            figure also counts the samples accelerate's even_batches repeats to fill the last
//            batches; ours stays the one-process figure at any world size (docs/TRAINER.md);
//   with --predict_with_generate: generate (greedy or beam), decode predictions and the
//            (truncated) labels with special tokens skipped, strip; corpus BLEU (sacreBLEU's
//            numbers, eval/bleu.c), chrF, and gen_len = mean count of non-pad ids of each
//            returned row (HF counts the eos filler of beam outputs too, and so do we).
// Every rank sends its batches' records (loss, predictions, references, lengths) to rank 0
// (comm_gather_bytes_host), which puts them back in batch order and computes the metrics
// and generated_predictions.txt exactly as one rank would (same sums in the same order);
// the metrics then go back to every rank. At ZeRO stage 3 the weights are gathered unit by
// unit as in training (never whole on one rank); those gathers are collectives, so every
// rank runs the same number of batches (a rank short of one repeats batch 0 and drops the
// result, as accelerate's even_batches pads) and generation steps in lock-step
// (T5UnitVisitor.all_finished, zero/eval.c, model/generate.c).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/t5_env.h"
#include "../common/fileio.h"
#include "../common/ticker.h"
#include "../eval/bleu.h"
#include "../kernels/backend_registry.h"
#include "../data/collate.h"
#include "../model/generate.h"
#include "log_format.h"
#include "run.h"

// A growable byte buffer: this rank's records.
typedef struct {
    char *p;
    size_t n, cap;
} Bytes;

static void bytes_put(Bytes *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        b->p = reallocCheck(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bytes_put_str(Bytes *b, const char *s) {
    uint32_t len = (uint32_t)strlen(s);
    bytes_put(b, &len, sizeof len);
    bytes_put(b, s, len);
}

// Reading records back (rank 0): a cursor over the gathered bytes.
typedef struct {
    const char *p, *end;
} Cursor;

static void cursor_get(Cursor *c, void *dst, size_t n) {
    if ((size_t)(c->end - c->p) < n)
        t5_die(__FILE__, __LINE__, "evaluation: a rank's records are cut short", "a bug: report it");
    memcpy(dst, c->p, n);
    c->p += n;
}

static const char *cursor_str(Cursor *c, uint32_t *len) {
    cursor_get(c, len, sizeof *len);
    if ((size_t)(c->end - c->p) < *len)
        t5_die(__FILE__, __LINE__, "evaluation: a rank's records are cut short", "a bug: report it");
    const char *s = c->p;
    c->p += *len;
    return s;
}

// Where read_record puts a batch's results (rank 0, in batch order).
typedef struct {
    BleuStats *bleu;
    ChrfStats *chrf;
    FILE *predictions;   // may be NULL
    double batch_loss;   // the batch's mean token loss
    double gen_tokens;   // its generated tokens
} EvalSink;

// Read one batch record (eval_batch's layout); with a sink, add its results there.
// Returns the batch index.
static int64_t read_record(Cursor *c, int generated, EvalSink *sink) {
    int64_t k;
    int32_t nb;
    double w;
    cursor_get(c, &k, sizeof k);
    cursor_get(c, &nb, sizeof nb);
    cursor_get(c, &w, sizeof w);
    if (sink) sink->batch_loss = w;
    for (int i = 0; generated && i < nb; i++) {
        double gen;
        uint32_t lp, lr;
        cursor_get(c, &gen, sizeof gen);
        const char *p = cursor_str(c, &lp), *rf = cursor_str(c, &lr);
        if (!sink) continue;
        sink->gen_tokens += gen;
        bleu_stats_add_n(sink->bleu, p, lp, rf, lr);
        chrf_stats_add_n(sink->chrf, p, lp, rf, lr);
        if (sink->predictions) fprintf(sink->predictions, "%.*s\n", (int)lp, p);
    }
    return k;
}

// Decode one generated row as HF's batch_decode(skip_special_tokens=True) + strip():
// tokens after the decoder start token.
static char *decode_row(const Spm *spm, const int *row, int len) {
    char *text = spm_decode(spm, (const int32_t *)row + 1, len > 1 ? len - 1 : 0);
    char *start = text, *end = text + strlen(text);
    while (*start == ' ' || *start == '\t' || *start == '\n') start++;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n')) end--;
    *end = '\0';
    if (start != text) memmove(text, start, (size_t)(end - start) + 1);
    return text;
}

// One batch on this rank; appends its record to out when keep (a padding batch is not kept):
//   int64 k, int32 nb, double mean token loss, then per example (generation only):
//   double generated tokens, string prediction, string reference.
// label_len: the split's target length (val/test_max_target_length, trainer/args.h).
// times: seconds added to [0] the loss pass, [1] generation, [2] decoding the predictions,
// [3] collating the batch; decoded: where generation writes its decode position (a progress
// line reads it); prof: NULL, or generation's phase profile (T5_EVAL_PROFILE).
static void eval_batch(Run *r, const Dataset *ds, long k, int keep, int label_len, Collated *c, int *out, int *out_len,
                       Bytes *rec, double times[4], int *decoded, GenProfile *prof) {
    const TrainArgs *a = &r->a;
    T5Model *m = &r->m;
    int B = a->per_device_eval_batch_size, L = a->generation_max_length;
    long n = (long)ds->count, start = k * B;
    int nb = (int)(n - start < B ? n - start : B);
    double tc = now_seconds();
    uint64_t *idx = mallocCheck((size_t)B * sizeof(uint64_t));
    for (int i = 0; i < nb; i++) idx[i] = (uint64_t)(start + i);
    collate_batch(c, ds, idx, nb, a->max_source_length, label_len, m->cfg.eos_token_id,
                  m->cfg.pad_token_id, m->cfg.decoder_start_token_id);
    free(idx);
    long ntok = 0;
    double t0 = now_seconds();
    times[3] += now_seconds() - tc;
    double sum = t5_forward(m, &c->batch, (float)a->label_smoothing_factor, &ntok);  // the loss read back: synchronized
    double t1 = now_seconds();
    times[0] += t1 - t0;
    double batch_loss = ntok > 0 ? sum / (double)ntok : 0.0;
    int width = 0;
    if (a->predict_with_generate) {
        // the loss pass above ran the encoder on this very batch (dropout off): generation
        // starts from its output (HF runs the encoder twice; the numbers are the same)
        GenerateConfig gc = {.num_beams = a->generation_num_beams, .max_length = L,
                             .length_penalty = (float)a->length_penalty, .early_stopping = a->early_stopping,
                             .encoder_ready = 1, .progress = decoded, .profile = prof};
        width = t5_generate(m, c->batch.input_ids, c->batch.attention_mask, nb, c->batch.S, &gc, out, out_len);
    }
    double t2 = now_seconds();
    times[1] += t2 - t1;
    if (!keep) return;
    int64_t k64 = k;
    int32_t nb32 = nb;
    bytes_put(rec, &k64, sizeof k64);
    bytes_put(rec, &nb32, sizeof nb32);
    bytes_put(rec, &batch_loss, sizeof batch_loss);
    if (!a->predict_with_generate) return;
    int *ids = mallocCheck(((size_t)c->batch.T + 1) * sizeof(int));
    for (int i = 0; i < nb; i++) {
        const int *row = out + (size_t)i * L;
        double gen = 0;
        for (int t = 0; t < width; t++) gen += row[t] != m->cfg.pad_token_id;
        char *pred = decode_row(r->spm, row, out_len[i]);
        // the reference: the labels as the model saw them (truncated), decoded and stripped
        // the same way (ids[0] stands in for the decoder start decode_row skips)
        const int *lab = c->batch.labels + (size_t)i * c->batch.T;
        int kk = 0;
        ids[kk++] = m->cfg.decoder_start_token_id;
        for (int t = 0; t < c->batch.T; t++)
            if (lab[t] != -100) ids[kk++] = lab[t];
        char *ref = decode_row(r->spm, ids, kk);
        bytes_put(rec, &gen, sizeof gen);
        bytes_put_str(rec, pred);
        bytes_put_str(rec, ref);
        free(pred);
        free(ref);
    }
    free(ids);
    times[2] += now_seconds() - t2;
}

// Rank 0: every batch's record (the ranks' records one after the other in all[0..total)),
// in batch order; metrics as one rank computes them into v ([0] the sum of batch losses, [1] bleu, [2]
// chrf, [3] generated tokens); predictions_path (may be NULL) written.
static void evaluate_collect(const TrainArgs *a, const char *all, size_t total, long n_batches,
                             const char *predictions_path, double v[6]) {
    const char **at = callocCheck((size_t)(n_batches ? n_batches : 1), sizeof(char *));
    Cursor cur = {all, all + total};
    while (cur.p < cur.end) {
        const char *begin = cur.p;
        int64_t k = read_record(&cur, a->predict_with_generate, NULL);
        if (k < 0 || k >= n_batches || at[k])
            t5_die(__FILE__, __LINE__, "evaluation: a batch came back twice or out of range", "a bug: report it");
        at[k] = begin;
    }
    BleuStats bleu;
    ChrfStats chrf;
    bleu_stats_init(&bleu);
    chrf_stats_init(&chrf);
    AtomicFile af;
    FILE *pf = predictions_path ? atomic_open(&af, predictions_path) : NULL;
    for (long k = 0; k < n_batches; k++) {
        if (!at[k]) t5_die(__FILE__, __LINE__, "evaluation: a batch did not come back", "a bug: report it");
        Cursor rc = {at[k], all + total};
        EvalSink sink = {&bleu, &chrf, pf, 0, 0};
        read_record(&rc, a->predict_with_generate, &sink);
        v[0] += sink.batch_loss;
        v[3] += sink.gen_tokens;
    }
    if (pf) atomic_commit(&af);
    if (a->predict_with_generate) {
        v[1] = bleu_stats_score(&bleu).score;
        v[2] = chrf_stats_score(&chrf);
    }
    free(at);
}

// PREFIX_loss, _bleu, _chrf, _gen_len (run_translation.py rounds them to 4 decimals), _runtime ...
static cJSON *evaluate_metrics(const char *prefix, int with_generate, const double v[6], long n, long n_batches) {
    double rt = v[4];
    cJSON *met = cJSON_CreateObject();
    char key[64];
#define ADD_METRIC(name, value)                           \
    do {                                                  \
        snprintf(key, sizeof key, "%s_%s", prefix, name); \
        cJSON_AddNumberToObject(met, key, value);         \
    } while (0)
    ADD_METRIC("loss", n_batches > 0 ? v[0] / (double)n_batches : 0.0);
    if (with_generate) {
        ADD_METRIC("bleu", round(v[1] * 1e4) / 1e4);
        ADD_METRIC("chrf", round(v[2] * 1e4) / 1e4);
        ADD_METRIC("gen_len", round(v[3] / (double)n * 1e4) / 1e4);
    }
    ADD_METRIC("runtime", pyfloat_round(rt, 4));  // HF's speed_metrics rounds these three
    if (v[5] > 0) ADD_METRIC("peak_gpu_memory_gib", v[5]);
    ADD_METRIC("samples_per_second", rt > 0 ? pyfloat_round(n / rt, 3) : 0);
    ADD_METRIC("steps_per_second", rt > 0 ? pyfloat_round(n_batches / rt, 3) : 0);
#undef ADD_METRIC
    return met;
}

cJSON *trainer_evaluate(Run *r, const Dataset *ds, const char *prefix, const char *predictions_path) {
    const TrainArgs *a = &r->a;
    T5Model *m = &r->m;
    const int world = r->comm.world, rank = r->comm.rank;
    float saved_p = m->dropout_p;
    m->dropout_p = 0.0f;
    zero_eval_begin(r->zero.m ? &r->zero : NULL);
    double t0 = now_seconds();
    int B = a->per_device_eval_batch_size, L = a->generation_max_length;
    int label_len = train_args_label_length(a, !strcmp(prefix, "predict"));
    long n = (long)ds->count, n_batches = (n + B - 1) / B;
    // this rank's batches k = rank, rank + world, ...; synced (stage 3): as many as rank 0
    long mine = rank < n_batches ? (n_batches - rank + world - 1) / world : 0;
    long rounds = t5_synced_generation(m) ? (n_batches + world - 1) / world : mine;
    int *out = mallocCheck((size_t)B * L * sizeof(int)), *out_len = mallocCheck((size_t)B * sizeof(int));
    Collated c = {0};
    Bytes rec = {0};
    double times[4] = {0};
    GenProfile prof = {0};
    const int profiling = is_main(r) && t5_env_flag(T5_ENV_EVAL_PROFILE);
    // T5_EVAL_PROFILE=ops: also every op's GPU time (the op profiler, kernels/cuda/profile.cu;
    // its Backend has no graphs, so the decoder steps run op by op under it)
    const Backend *be_plain = m->be;
    const char *pv = t5_env_get(T5_ENV_EVAL_PROFILE);
    const int op_profile = profiling && pv && !strcmp(pv, "ops") && m->be->device_memory;
    if (op_profile) m->be = backend_profile_wrap(be_plain, m->cfg.vocab_size);
    double t_loop = now_seconds();
    // what a person waits on: rank 0's batches, and the decode position inside the current one
    char what[64];
    snprintf(what, sizeof what, "%s%s", prefix, world > 1 ? " (rank 0's batches)" : "");
    Ticker *tick = is_main(r) ? ticker_start(what, "batch", rounds) : NULL;
    int decoded = 0;
    if (a->predict_with_generate) ticker_detail(tick, &decoded, "tokens generated in it");
    for (long i = 0; i < rounds; i++) {
        long k = i * world + rank;
        int keep = k < n_batches;
        __atomic_store_n(&decoded, 0, __ATOMIC_RELAXED);
        eval_batch(r, ds, keep ? k : 0, keep, label_len, &c, out, out_len, &rec, times, &decoded,
                   profiling ? &prof : NULL);
        ticker_set(tick, i + 1);
    }
    ticker_stop(tick);
    if (op_profile) {
        m->be = be_plain;
        backend_profile_report(stdout, 1e3 * (now_seconds() - t_loop), 1, 40);
    }
    if (is_main(r))  // where the time went (rank 0's batches); the runtime adds the metrics
        printf("%s time (rank 0, %ld batches): loss pass %.2f s, generation %.2f s, decoding predictions %.2f s\n",
               prefix, mine, times[0], times[1], times[2]);
    if (profiling) {
        printf("%s profile: collating batches %.3f s\n", prefix, times[3]);
        if (a->predict_with_generate) gen_profile_print(&prof, prefix, m->be->device_memory);
    }
    free(out);
    free(out_len);
    collate_free(&c);
    m->dropout_p = saved_p;
    zero_eval_end(r->zero.m ? &r->zero : NULL);

    // rank 0: every batch's record, in batch order; metrics as one rank computes them
    char *all = NULL;
    size_t *counts = callocCheck((size_t)world, sizeof(size_t));
    comm_gather_bytes_host(&r->comm, rec.p ? rec.p : "", rec.n, &all, counts);
    free(rec.p);
    // [0] the sum of batch losses, [1] bleu, [2] chrf, [3] generated tokens, [4] runtime: rank 0's, then
    // everyone's; [5] the GPU memory peak so far (GiB; 0 on the CPU), rank 0's
    double v[6] = {0};
    if (is_main(r)) {
        size_t total = 0;
        for (int q = 0; q < world; q++) total += counts[q];
        double tm = now_seconds();
        evaluate_collect(a, all, total, n_batches, predictions_path, v);
        if (profiling)
            printf("%s profile: metrics (BLEU, chrF%s) %.3f s; evaluation so far %.3f s\n", prefix,
                   predictions_path ? ", predictions file" : "", now_seconds() - tm, now_seconds() - t0);
        v[4] = now_seconds() - t0;
        if (m->be->device_memory) v[5] = (double)m->be->mem_peak() / 1073741824.0;
    }
    free(all);
    free(counts);
    if (world > 1) {  // rank 0's figures to every rank (the others contribute zeros)
        if (!is_main(r)) memset(v, 0, sizeof v);
        comm_allreduce_sum_f64(&r->comm, v, 6);
    }
    return evaluate_metrics(prefix, a->predict_with_generate, v, n, n_batches);
}
