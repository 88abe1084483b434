// kernels/cpu/attention.c: T5 multi-head attention core (after the q/k/v projections).
//   q (B,Tq,H*dk), k and v (B,Tk,H*dk): head h occupies columns h*dk .. h*dk+dk-1
//   (forward: k, v and key_mask have kv_rows >= Tk rows per batch entry, a KV cache)
//   scores[b,h,i,j] = q_i . k_j (no 1/sqrt(dk) scaling in T5) + bias[h,i,j]
//   att (B,H,Tq,Tk) = softmax_j(scores) with masked keys at probability exactly 0
//   out (B,Tq,H*dk) = dropout(att) @ v   (dropout index = flattened (b,h,i,j))
// Masked keys: key_mask[b,j] == 0, or causal and j > q_offset + i. HF adds finfo.min
// to their scores, which makes exp() exactly 0; we skip them, which gives the same
// probabilities. A row whose keys are all masked gets att = 0 and out = 0 (HF would
// spread it uniformly over the masked keys; T5 never produces such rows for real tokens,
// only for fully padded query rows whose output is ignored by the loss).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "cpu_ops.h"

// key_mask has `rows` entries per batch entry (kv_rows in forward)
static inline int attention_key_masked(const int *key_mask, int b, int rows, int j, int causal, int qpos) {
    return (key_mask && key_mask[(size_t)b * rows + j] == 0) || (causal && j > qpos);
}

int cpu_attention_softmax_row(float *p, int Tk) {
    float mx = -INFINITY;
    for (int j = 0; j < Tk; j++)
        if (p[j] > mx) mx = p[j];  // -inf (masked) never raises it
    if (mx == -INFINITY) {
        for (int j = 0; j < Tk; j++) p[j] = 0.0f;
        return 0;
    }
    // softmax as torch's CPU kernel: exp(s - max), then times 1/sum; exp(-inf) = 0 adds nothing
    float sum = 0.0f;
    for (int j = 0; j < Tk; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < Tk; j++) p[j] *= inv;
    return 1;
}

void cpu_attention_forward(void *out_, void *att_, const void *q_, const void *k_, const void *v_, const void *bias_,
                           const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                           int q_offset, DropoutArgs drop) {
    float *out = out_, *att = att_;
    const float *q = q_, *k = k_, *v = v_, *bias = bias_;
    const size_t HD = (size_t)H * dk;
    const int dropping = drop.p != 0.0f;
    const float drop_scale = dropping ? cpu_dropout_scale(drop.p) : 1.0f;
    if (!(drop.p >= 0.0f && drop.p <= 1.0f)) t5_fail("attention dropout probability %g is outside [0, 1]", drop.p);
    if (kv_rows < Tk) t5_fail("attention_forward: kv_rows %d is smaller than the key length %d", kv_rows, Tk);
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *qi = q + ((size_t)b * Tq + i) * HD + (size_t)h * dk;
                const float *brow = bias ? bias + ((size_t)h * Tq + i) * Tk : NULL;
                const size_t row = (((size_t)b * H + h) * Tq + i) * Tk;  // (b,h,i,0) in att
                float *p = att + row;
                float *o = out + ((size_t)b * Tq + i) * HD + (size_t)h * dk;
                const int qpos = q_offset + i;
                // scores; masked keys -inf (probability exactly 0)
                for (int j = 0; j < Tk; j++) {
                    if (attention_key_masked(key_mask, b, kv_rows, j, causal, qpos)) {
                        p[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = k + ((size_t)b * kv_rows + j) * HD + (size_t)h * dk;
                    p[j] = cpu_attention_score(qi, kj, dk, brow ? brow + j : NULL);
                }
                for (int d = 0; d < dk; d++) o[d] = 0.0f;
                if (!cpu_attention_softmax_row(p, Tk)) continue;
                // out = dropout(p) @ v, summed over j in order
                for (int j = 0; j < Tk; j++) {
                    float pj = p[j];
                    if (dropping) pj = cpu_dropout_uniform(drop.seed, row + j) >= drop.p ? pj * drop_scale : 0.0f;
                    const float *vj = v + ((size_t)b * kv_rows + j) * HD + (size_t)h * dk;
                    for (int d = 0; d < dk; d++) o[d] += pj * vj[d];
                }
            }
}

// With P = att, Pd = dropout(P), dO = dout:
//   dv_j += sum_i Pd_ij dO_i;   dPd_ij = dO_i . v_j;   dP_ij = mask_ij * scale * dPd_ij
//   dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')   (masked keys: P = 0, so dS = 0)
//   dq_i += sum_j dS_ij k_j;    dk_j += sum_i dS_ij q_i;    dbias[h] += sum_b dS
// Each thread owns one head: the head's columns of dq/dk/dv for every batch row, and
// dbias[h]. Sums are formed in scratch buffers in a fixed order and then added.
void cpu_attention_backward(void *dq_, void *dk_, void *dv_, void *dbias_, const void *dout_, const void *att_,
                            const void *q_, const void *k_, const void *v_, int B, int Tq, int Tk, int H, int dk,
                            DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv) {
    float *dq = dq_, *dkey = dk_, *dv = dv_, *dbias = dbias_;
    const float *dout = dout_, *att = att_, *q = q_, *k = k_, *v = v_;
    const size_t HD = (size_t)H * dk;
    const size_t ldq = ld_dq ? (size_t)ld_dq : HD, ldkv = ld_dkv ? (size_t)ld_dkv : HD;  // output row strides
    const int dropping = drop.p != 0.0f;
    const float drop_scale = dropping ? cpu_dropout_scale(drop.p) : 1.0f;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *dp = mallocCheck((size_t)Tk * sizeof(float));
        float *gq = mallocCheck((size_t)Tq * dk * sizeof(float));
        float *gk = mallocCheck((size_t)Tk * dk * sizeof(float));
        float *gv = mallocCheck((size_t)Tk * dk * sizeof(float));
        float *gb = dbias ? callocCheck((size_t)Tq * Tk, sizeof(float)) : NULL;
        for (int b = 0; b < B; b++) {
            memset(gq, 0, (size_t)Tq * dk * sizeof(float));
            memset(gk, 0, (size_t)Tk * dk * sizeof(float));
            memset(gv, 0, (size_t)Tk * dk * sizeof(float));
            for (int i = 0; i < Tq; i++) {
                const size_t row = (((size_t)b * H + h) * Tq + i) * Tk;
                const float *p = att + row;
                const float *go = dout + ((size_t)b * Tq + i) * HD + (size_t)h * dk;
                const float *qi = q + ((size_t)b * Tq + i) * HD + (size_t)h * dk;
                for (int j = 0; j < Tk; j++) {
                    const float *vj = v + ((size_t)b * Tk + j) * HD + (size_t)h * dk;
                    int keep = !dropping || cpu_dropout_uniform(drop.seed, row + j) >= drop.p;
                    float pd = dropping ? (keep ? p[j] * drop_scale : 0.0f) : p[j];
                    float s = 0.0f;
                    for (int d = 0; d < dk; d++) {
                        gv[(size_t)j * dk + d] += pd * go[d];
                        s += go[d] * vj[d];
                    }
                    dp[j] = dropping ? (keep ? s * drop_scale : 0.0f) : s;
                }
                float pdp = 0.0f;
                for (int j = 0; j < Tk; j++) pdp += p[j] * dp[j];
                for (int j = 0; j < Tk; j++) {
                    float ds = p[j] * (dp[j] - pdp);
                    if (gb) gb[(size_t)i * Tk + j] += ds;
                    const float *kj = k + ((size_t)b * Tk + j) * HD + (size_t)h * dk;
                    for (int d = 0; d < dk; d++) {
                        gq[(size_t)i * dk + d] += ds * kj[d];
                        gk[(size_t)j * dk + d] += ds * qi[d];
                    }
                }
            }
            for (int i = 0; i < Tq; i++) {
                float *dst = dq + ((size_t)b * Tq + i) * ldq + (size_t)h * dk;
                for (int d = 0; d < dk; d++) dst[d] = (dqkv_set ? 0.0f : dst[d]) + gq[(size_t)i * dk + d];
            }
            for (int j = 0; j < Tk; j++) {
                float *dkj = dkey + ((size_t)b * Tk + j) * ldkv + (size_t)h * dk;
                float *dvj = dv + ((size_t)b * Tk + j) * ldkv + (size_t)h * dk;
                for (int d = 0; d < dk; d++) {
                    dkj[d] = (dqkv_set ? 0.0f : dkj[d]) + gk[(size_t)j * dk + d];
                    dvj[d] = (dqkv_set ? 0.0f : dvj[d]) + gv[(size_t)j * dk + d];
                }
            }
        }
        if (gb) {
            float *dst = dbias + (size_t)h * Tq * Tk;
            for (size_t e = 0; e < (size_t)Tq * Tk; e++) dst[e] += gb[e];
        }
        free(dp);
        free(gq);
        free(gk);
        free(gv);
        free(gb);
    }
}
