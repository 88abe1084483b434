// kernels/cuda/attention_tile_dropout.cuh: the dropout draws of an attention score tile held in
// mma.sync's C layout (kernels/cuda/mma_tile.cuh: a thread holds rows g and g + 8, keys
// 8t + 2qd, +1 of n-tile t), shared by the forward (attention_flash.cu), which drops P, and the
// backward (attention_flash_backward.cu), which must draw the same mask. The mask is
// kernels/dropout_rng.h's at the flattened (b,h,i,j): one 64-bit hash serves 4 keys, 16 bits a
// key. A thread's two keys of a row are always one 32-bit half of a hash (their flat index is
// even), so the draws travel as 32-bit words: key 8t + 2qd in the low 16 bits, + 1 in the high.
#pragma once
#include <stdint.h>

#include "../dropout_rng.h"

// The keep flags of the two keys of a word: bit 0 the low key, bit 1 the high one; thr is
// dropout_rng_threshold(p) (k >= thr is exactly the float test u >= p, test_ops_pointwise).
__device__ __forceinline__ unsigned tile_keep2(uint32_t w, uint32_t thr) {
    return (unsigned)((w & 0xFFFFu) >= thr) | ((unsigned)((w >> 16) >= thr) << 1);
}

// A thread's draws over a tile's n-tiles. N-tile t holds keys 8t + 2qd, + 1 of rows g and
// g + 8, whose groups of 4 lie 2t groups past n-tile 0's ((idx + 8t) >> 2 = (idx >> 2) + 2t), so
// tile t's hash is that of counter z + t 2 GAMMA (dropout_rng_counter): one 64-bit add a tile,
// the multiply once.
//   Tk % 4 == 0 (quads): the 4 keys of the group 8t + 4 (qd >> 1) .. of a row sit on threads
//   qd, qd ^ 1 (the thread's keys are half qd & 1 of the hash): thread qd hashes row
//   (qd & 1)'s group, keeps its own half and gives the partner the other (one 32-bit
//   shuffle), so each gets both rows' words with one hash.
//   Else (any even Tk): one hash for a row's pair of keys, the half its flat index picks.
// row0: the flat index of the thread's row g at key 0; row8: 8 Tk (row g + 8).
struct TileDraws {
    uint64_t z[2];  // quads: z[0], the counter of the group this thread hashes; else rows g, g + 8
    bool quads, high[2];
    int mine;

    __device__ __forceinline__ TileDraws(uint64_t key, uint64_t row0, uint64_t row8, int qd, bool quads_)
        : quads(quads_), mine(qd & 1) {
        if (quads) {
            z[0] = dropout_rng_counter(key, (row0 + (uint64_t)mine * row8 + 4 * (qd >> 1)) >> 2);
            z[1] = 0, high[0] = high[1] = false;
        } else {
            for (int r = 0; r < 2; r++) {
                const uint64_t idx = row0 + (uint64_t)r * row8 + 2 * qd;  // even
                z[r] = dropout_rng_counter(key, idx >> 2), high[r] = (idx & 2u) != 0;
            }
        }
    }

    // w[r]: n-tile t's word of row g + 8r (key 8t + 2qd in the low 16 bits, + 1 in the high).
    // QUADS: the mode the draws were made for, as a template argument so that the caller's loop
    // over n-tiles has no branch (one per tile kept each hash waiting for the one before it):
    // tile_draws_each below.
    template <bool QUADS> __device__ __forceinline__ void words(int t, uint32_t (&w)[2]) const {
        const uint64_t step = (uint64_t)t * (2 * DROPOUT_RNG_GAMMA);
        if constexpr (QUADS) {
            const uint64_t bm = dropout_rng_mix64(z[0] + step);
            const uint32_t lo = (uint32_t)bm, hi = (uint32_t)(bm >> 32);
            const uint32_t own = mine ? hi : lo, other = __shfl_xor_sync(0xffffffffu, mine ? lo : hi, 1);
            w[0] = mine ? other : own, w[1] = mine ? own : other;
        } else {
            for (int r = 0; r < 2; r++) {
                const uint64_t bits = dropout_rng_mix64(z[r] + step);
                w[r] = high[r] ? (uint32_t)(bits >> 32) : (uint32_t)bits;
            }
        }
    }
};

// body(t, w) for the NT n-tiles of a thread's draws (w as TileDraws::words), the loop unrolled
// in the draws' mode: straight-line code, so the tiles' hashes interleave.
template <int NT, typename Body> __device__ __forceinline__ void tile_draws_each(const TileDraws &d, Body body) {
    if (d.quads) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint32_t w[2];
            d.words<true>(t, w);
            body(t, w);
        }
    } else {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint32_t w[2];
            d.words<false>(t, w);
            body(t, w);
        }
    }
}
