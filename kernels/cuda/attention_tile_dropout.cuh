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

// With Tk % 4 == 0 the 4 keys of the group 8t + 4 (qd >> 1) .. of a row sit on threads qd,
// qd ^ 1 (the thread's keys are half qd & 1 of the hash): thread qd hashes row (qd & 1)'s
// group, keeps its own half and gives the partner the other (one 32-bit shuffle), so each gets
// both rows' words with one hash. row0: the flat index of the thread's row g at key 0; row8:
// 8 Tk (row g + 8). *w0, *w1: the words of rows g and g + 8.
__device__ __forceinline__ void tile_group_words(uint64_t key, uint64_t row0, uint64_t row8, int t, int qd,
                                                 uint32_t *w0, uint32_t *w1) {
    const int mine = qd & 1;
    const uint64_t bm = dropout_rng_bits(key, (row0 + (uint64_t)mine * row8 + 8 * t + 4 * (qd >> 1)) >> 2);
    const uint32_t lo = (uint32_t)bm, hi = (uint32_t)(bm >> 32);
    const uint32_t own = mine ? hi : lo, other = __shfl_xor_sync(0xffffffffu, mine ? lo : hi, 1);
    *w0 = mine ? other : own, *w1 = mine ? own : other;
}

// Any Tk (even): the word of the pair of keys at flat index idx (even), one hash a pair.
__device__ __forceinline__ uint32_t tile_pair_word(uint64_t key, uint64_t idx) {
    const uint64_t bits = dropout_rng_bits(key, idx >> 2);
    return (idx & 2u) ? (uint32_t)(bits >> 32) : (uint32_t)bits;
}
