// model/fp8.c: --fp8's scaling state: the slots of the blocks' linear layers, their
// device arrays, and the end-of-step update (model/fp8.h says the recipe).
#include "fp8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../kernels/fp8_format.h"

unsigned t5_fp8_parse_keep(const char *list, const char *flag) {
    unsigned keep = 0;
    if (!list || !*list || !strcmp(list, "none")) return 0;
    char buf[256];
    if (strlen(list) >= sizeof buf) t5_fail("%s \"%.40s...\": too long (names: attention_output, first_last)", flag, list);
    strcpy(buf, list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "attention_output")) keep |= T5_FP8_KEEP_ATTN_OUT;
        else if (!strcmp(tok, "first_last")) keep |= T5_FP8_KEEP_FIRST_LAST;
        else
            t5_fail("%s: unknown name \"%s\" (names: attention_output, first_last, comma-separated; the LM head is "
                    "always bf16)", flag, tok);
    }
    return keep;
}

void t5_fp8_describe_keep(unsigned keep, char *buf, size_t n) {
    snprintf(buf, n, "LM head%s%s", keep & T5_FP8_KEEP_ATTN_OUT ? ", attention outputs" : "",
             keep & T5_FP8_KEEP_FIRST_LAST ? ", first and last blocks" : "");
}

// The linear groups of one block (model/fp8.h: q covers q, k, v; cross k covers k, v). keep
// drops the o projections; `whole` drops the block. b NULL: keys 0 (the widths only).
static int block_groups(const T5Config *c, const BlockOffsets *b, int decoder, unsigned keep, int whole,
                        T5Fp8Group *out) {
    if (whole) return 0;
    const int D = c->d_model, HK = t5_config_inner_dim(c), F = c->d_ff, enc = !decoder;
    const int outs = !(keep & T5_FP8_KEEP_ATTN_OUT);
    int n = 0;
    out[n++] = (T5Fp8Group){b ? b->self.q : 0, D, 3 * HK, enc};
    if (outs) out[n++] = (T5Fp8Group){b ? b->self.o : 0, HK, D, enc};
    if (decoder) {
        out[n++] = (T5Fp8Group){b ? b->cross.q : 0, D, HK, 0};
        out[n++] = (T5Fp8Group){b ? b->cross.k : 0, D, 2 * HK, 1};
        if (outs) out[n++] = (T5Fp8Group){b ? b->cross.o : 0, HK, D, 0};
    }
    out[n++] = (T5Fp8Group){b ? b->ffn.wi : 0, D, (c->is_gated ? 2 : 1) * F, enc};
    out[n++] = (T5Fp8Group){b ? b->ffn.wo : 0, F, D, enc};
    return n;
}

// Every group of the model, in block order; returns the count. L NULL: keys 0.
static int model_groups(const T5Config *c, const ParamLayout *L, unsigned keep, T5Fp8Group *out) {
    const int ends = keep & T5_FP8_KEEP_FIRST_LAST;
    int n = 0;
    for (int l = 0; l < c->num_layers; l++)
        n += block_groups(c, L ? &L->enc[l] : NULL, 0, keep, ends && (l == 0 || l == c->num_layers - 1), out + n);
    for (int l = 0; l < c->num_decoder_layers; l++)
        n += block_groups(c, L ? &L->dec[l] : NULL, 1, keep, ends && (l == 0 || l == c->num_decoder_layers - 1),
                          out + n);
    return n;
}

static int cmp_group(const void *a, const void *b) {
    size_t x = ((const T5Fp8Group *)a)->key, y = ((const T5Fp8Group *)b)->key;
    return x < y ? -1 : x > y;
}

enum { GROUPS_PER_BLOCK_MAX = 7 };

static int slots_max(const T5Config *cfg) { return (cfg->num_layers + cfg->num_decoder_layers) * GROUPS_PER_BLOCK_MAX; }

size_t t5_fp8_state_bytes(const T5Config *cfg, int hist_len) {
    return (size_t)slots_max(cfg) * FP8_OPERANDS * (3 + (size_t)hist_len) * sizeof(float);
}

void t5_fp8_init(T5Model *m, unsigned keep, int hist_len, int margin) {
    if (hist_len < 1) t5_fail("--fp8_amax_history %d: must be at least 1", hist_len);
    if (margin < 0 || margin > 30) t5_fail("--fp8_margin %d: must be in 0..30", margin);
    T5Fp8 *f = callocCheck(1, sizeof *f);
    const T5Config *c = &m->cfg;
    f->hist_len = hist_len, f->margin = margin, f->keep = keep;
    f->groups = mallocCheck((size_t)slots_max(c) * sizeof(T5Fp8Group));
    f->n_slots = model_groups(c, &m->lay, keep, f->groups);
    qsort(f->groups, (size_t)f->n_slots, sizeof(T5Fp8Group), cmp_group);
    const size_t ns = (size_t)(f->n_slots ? f->n_slots : 1);
    f->inp_t = callocCheck(ns, sizeof(uint8_t *));
    f->w4 = callocCheck(ns, sizeof(uint8_t *));
    f->w4t = callocCheck(ns, sizeof(uint8_t *));
    f->w_step = mallocCheck(ns * sizeof(long));
    for (size_t i = 0; i < ns; i++) f->w_step[i] = -1;  // no step has rounded them
    const size_t e = (size_t)f->n_slots * FP8_OPERANDS;
    const size_t bytes = (e * 3 + e * (size_t)hist_len) * sizeof(float);
    float *host = callocCheck(bytes / sizeof(float) + 1, sizeof(float));
    for (size_t i = 0; i < 2 * e; i++) host[i] = 1.0f;  // scale and inv 1; amax and history 0
    f->dev = m->be->alloc(bytes ? bytes : sizeof(float));
    if (bytes) m->be->to_device(f->dev, host, bytes);
    freeCheck(host);
    f->scale = f->dev, f->inv = f->dev + e, f->amax = f->dev + 2 * e, f->history = f->dev + 3 * e;
    m->fp8 = f;
}

void t5_fp8_free(T5Model *m) {
    T5Fp8 *f = m->fp8;
    if (!f) return;
    m->be->free(f->dev);
    if (f->kept) m->be->free(f->kept);
    if (f->wkept) m->be->free(f->wkept);
    freeCheck(f->inp_t);
    freeCheck(f->w4), freeCheck(f->w4t), freeCheck(f->w_step);
    freeCheck(f->groups);
    freeCheck(f);
    m->fp8 = NULL;
}

int t5_fp8_slot(const T5Fp8 *f, size_t w) {
    int lo = 0, hi = f->n_slots - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (f->groups[mid].key == w) return mid;
        if (f->groups[mid].key < w) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

Fp8Scales t5_fp8_scales(const T5Fp8 *f, int slot) {
    const size_t o = (size_t)slot * FP8_OPERANDS;
    Fp8Scales s = {f->scale + o, f->inv + o, f->amax + o, f->updates == 0, f->inp_t[slot], NULL, NULL, 0};
    return s;
}

Fp8Scales t5_fp8_forward_scales(const T5Fp8 *f, int slot) {
    Fp8Scales s = t5_fp8_scales(f, slot);
    if (f->w4[slot]) {
        s.w4 = f->w4[slot], s.w4t = f->w4t[slot];
        s.w_round = f->w_step[slot] != f->step;
        f->w_step[slot] = f->step;  // the array, not the state: the forward's view is const
    }
    return s;
}

Fp8Scales t5_fp8_backward_scales(const T5Fp8 *f, int slot, int O) {
    Fp8Scales s = t5_fp8_scales(f, slot);
    // only codes this step's forward rounded (a forward that ran its weights one call each, or
    // none yet: the backward rounds its own)
    if (f->w4t[slot] && O == f->groups[slot].outs && f->w_step[slot] == f->step) s.w4t = f->w4t[slot];
    return s;
}

void t5_fp8_step_begin(T5Model *m) {
    if (m->fp8) m->fp8->step++;
}

// What t5_fp8_keep_inputs and t5_fp8_keep_weights keep of a group: its input's codes
// transposed, (width, rows of a (B, S, T) plan padded to 16); or its weight codes, (outs,
// width) and their transpose. Each region on 256 bytes.
typedef enum { KEEP_INPUT, KEEP_WEIGHT } KeepKind;
static size_t group_bytes(const T5Fp8Group *g, KeepKind kind, int B, int S, int T) {
    if (kind == KEEP_WEIGHT) return 2 * FP8_REGION((size_t)g->outs * (size_t)g->width);
    const size_t rows = (size_t)B * (size_t)(g->enc_rows ? S : T);
    return FP8_REGION((size_t)g->width * fp8_rows_padded(rows));
}

// The bytes of one kind over every group of cfg under keep (model_groups).
static size_t model_keep_bytes(const T5Config *cfg, unsigned keep, KeepKind kind, int B, int S, int T) {
    T5Fp8Group *g = mallocCheck((size_t)slots_max(cfg) * sizeof(T5Fp8Group));
    const int n = model_groups(cfg, NULL, keep, g);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += group_bytes(&g[i], kind, B, S, T);
    freeCheck(g);
    return total;
}

// One device block for a kind over f's slots; at[i] = slot i's region. Returns the block.
static void *keep_alloc(T5Model *m, KeepKind kind, int B, int S, int T, uint8_t **at, size_t *bytes) {
    const T5Fp8 *f = m->fp8;
    size_t total = 0;
    for (int i = 0; i < f->n_slots; i++) total += group_bytes(&f->groups[i], kind, B, S, T);
    uint8_t *p = m->be->alloc(total);
    *bytes = total;
    for (int i = 0; i < f->n_slots; i++) at[i] = p, p += group_bytes(&f->groups[i], kind, B, S, T);
    return at[0];
}

size_t t5_fp8_keep_bytes(const T5Config *cfg, unsigned keep, int B, int S, int T) {
    return model_keep_bytes(cfg, keep, KEEP_INPUT, B, S, T);
}

void t5_fp8_keep_inputs(T5Model *m, int B, int S, int T) {
    T5Fp8 *f = m->fp8;
    if (!f || !f->n_slots || f->kept) return;
    f->kept = keep_alloc(m, KEEP_INPUT, B, S, T, f->inp_t, &f->kept_bytes);
}

size_t t5_fp8_weight_bytes(const T5Config *cfg, unsigned keep) { return model_keep_bytes(cfg, keep, KEEP_WEIGHT, 0, 0, 0); }

void t5_fp8_keep_weights(T5Model *m) {
    T5Fp8 *f = m->fp8;
    if (!f || !f->n_slots || f->wkept) return;
    f->wkept = keep_alloc(m, KEEP_WEIGHT, 0, 0, 0, f->w4, &f->wkept_bytes);
    for (int i = 0; i < f->n_slots; i++)  // the transpose: the region's second half
        f->w4t[i] = f->w4[i] + group_bytes(&f->groups[i], KEEP_WEIGHT, 0, 0, 0) / 2;
}

void t5_fp8_step_end(T5Model *m) {
    T5Fp8 *f = m->fp8;
    if (!f || !f->n_slots) return;
    m->be->fp8_scales_update(f->scale, f->inv, f->amax, f->history, f->n_slots, f->hist_len,
                             (int)(f->updates % f->hist_len), f->margin);
    f->updates++;
}

// fp8_scratch_bytes of one linear shape, max-reduced into *best.
static void shape_max(size_t *best, size_t n, size_t I, size_t O, size_t count) {
    const size_t b = fp8_scratch_bytes(n, I, O, count);
    if (b > *best) *best = b;
}

size_t t5_fp8_scratch_bytes(const T5Config *cfg, int B, int S, int T) {
    const size_t D = (size_t)cfg->d_model, HK = (size_t)t5_config_inner_dim(cfg), F = (size_t)cfg->d_ff;
    const size_t ne = (size_t)B * S, nd = (size_t)B * T, g = cfg->is_gated ? 2 : 1;
    size_t best = 0;
    const size_t rows[2] = {ne, nd};
    for (int s = 0; s < 2; s++) {
        const size_t n = rows[s];
        shape_max(&best, n, D, HK, 3);      // q, k, v forward
        shape_max(&best, n, D, 3 * HK, 1);  // their joined backward
        shape_max(&best, n, HK, D, 1);      // o
        shape_max(&best, n, D, F, g);       // wi (wi_0, wi_1)
        shape_max(&best, n, F, D, 1);       // wo
    }
    shape_max(&best, ne, D, HK, 2);      // cross k, v over the encoder output
    shape_max(&best, ne, D, 2 * HK, 1);  // their joined backward
    return best;
}
