// model/segments.c: the order forward and backward run in, as segments (model/t5.h T5Segment),
// and the plain drivers t5_forward, t5_encoder_forward and t5_backward that run them in that
// order. The segments themselves are in model/t5.c. A ZeRO training step runs the same
// tables with its collectives between the segments (zero/step.c).
//
//   forward:  enc embed (shared), enc blocks 0..L-1, enc final, dec embed (shared),
//             dec blocks 0..Ld-1, dec final, head (lm_head: the shared unit when tied)
//   backward: head, dec out, dec final, dec clear, dec blocks Ld-1..0, dec embed, enc out,
//             enc final, enc clear, enc blocks L-1..0, enc embed
// Backward writes the shared embedding's gradient from its first write (the tied head, else
// the decoder's embedding) to its last (the encoder's embedding): the unit's gradient is
// open across the segments in between. The embeddings' backward reads no weights.
#include <stdlib.h>

#include "../common/check.h"
#include "t5.h"

static T5Segment seg(T5SegKind kind, int layer, int unit) {
    T5Segment s = {.kind = kind, .layer = layer, .unit = unit, .grad_unit = -1};
    return s;
}

// A backward segment that reads unit `unit` (or none: -1) and writes grad_unit's gradient.
static T5Segment seg_grad(T5SegKind kind, int layer, int unit, int grad_unit, int begins, int ends) {
    T5Segment s = {kind, layer, unit, grad_unit, begins, ends};
    return s;
}

void t5_segments_build(T5Model *m) {
    const ParamLayout *L = &m->lay;
    const int Le = m->cfg.num_layers, Ld = m->cfg.num_decoder_layers;
    const int tied = L->unit_lm_head == L->unit_shared;
    T5Segments *g = &m->seg;
    g->fwd = mallocCheck((size_t)(Le + Ld + 5) * sizeof(T5Segment));
    g->bwd = mallocCheck((size_t)(Le + Ld + 9) * sizeof(T5Segment));
    int n = 0;
    g->fwd[n++] = seg(T5_SEG_ENC_EMBED, 0, L->unit_shared);
    for (int l = 0; l < Le; l++) g->fwd[n++] = seg(T5_SEG_ENC_BLOCK, l, L->unit_enc0 + l);
    g->fwd[n++] = seg(T5_SEG_ENC_FINAL, 0, L->unit_enc_final);
    g->fwd[n++] = seg(T5_SEG_DEC_EMBED, 0, L->unit_shared);
    for (int l = 0; l < Ld; l++) g->fwd[n++] = seg(T5_SEG_DEC_BLOCK, l, L->unit_dec0 + l);
    g->fwd[n++] = seg(T5_SEG_DEC_FINAL, 0, L->unit_dec_final);
    g->fwd[n++] = seg(T5_SEG_HEAD, 0, L->unit_lm_head);
    g->n_fwd = n;
    n = 0;
    // tied: the head's gradient is the shared embedding's, open until the encoder's embedding
    g->bwd[n++] = seg_grad(T5_SEG_HEAD, 0, L->unit_lm_head, L->unit_lm_head, 1, !tied);
    g->bwd[n++] = seg(T5_SEG_DEC_OUT, 0, -1);
    g->bwd[n++] = seg_grad(T5_SEG_DEC_FINAL, 0, L->unit_dec_final, L->unit_dec_final, 1, 1);
    g->bwd[n++] = seg(T5_SEG_DEC_CLEAR, 0, -1);
    for (int l = Ld - 1; l >= 0; l--) g->bwd[n++] = seg_grad(T5_SEG_DEC_BLOCK, l, L->unit_dec0 + l, L->unit_dec0 + l, 1, 1);
    g->bwd[n++] = seg_grad(T5_SEG_DEC_EMBED, 0, -1, L->unit_shared, !tied, 0);
    g->bwd[n++] = seg(T5_SEG_ENC_OUT, 0, -1);
    g->bwd[n++] = seg_grad(T5_SEG_ENC_FINAL, 0, L->unit_enc_final, L->unit_enc_final, 1, 1);
    g->bwd[n++] = seg(T5_SEG_ENC_CLEAR, 0, -1);
    for (int l = Le - 1; l >= 0; l--) g->bwd[n++] = seg_grad(T5_SEG_ENC_BLOCK, l, L->unit_enc0 + l, L->unit_enc0 + l, 1, 1);
    g->bwd[n++] = seg_grad(T5_SEG_ENC_EMBED, 0, -1, L->unit_shared, 0, 1);
    g->n_bwd = n;
}

void t5_segments_free(T5Model *m) {
    free(m->seg.fwd);
    free(m->seg.bwd);
}

// Forward segments [0, n) with each unit fetched and released through m->visitor.
static double forward_segments(T5Model *m, int n, float label_smoothing) {
    double loss = 0.0;
    for (int k = 0; k < n; k++) {
        const T5Segment *sg = &m->seg.fwd[k];
        t5_unit_fetch(m, sg->unit);
        loss += t5_forward_segment(m, sg, label_smoothing);
        t5_unit_release(m, sg->unit);
    }
    return loss;
}

void t5_encoder_forward(T5Model *m) {
    forward_segments(m, m->cfg.num_layers + 2, 0.0f);  // enc embed, blocks, enc final
}

double t5_forward(T5Model *m, const T5Batch *batch, float label_smoothing, long *n_tokens) {
    t5_forward_begin(m, batch, n_tokens);
    return forward_segments(m, m->seg.n_fwd, label_smoothing);
}

void t5_backward(T5Model *m, float label_smoothing, float dloss) {
    t5_backward_begin(m);
    for (int k = 0; k < m->seg.n_bwd; k++) t5_backward_segment(m, &m->seg.bwd[k], label_smoothing, dloss);
}
