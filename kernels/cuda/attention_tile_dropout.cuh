// kernels/cuda/attention_tile_dropout.cuh: the dropout draws of an attention score tile held in
// mma.sync's C layout (kernels/cuda/mma_tile.cuh: a thread holds rows g and g + 8, keys
// 8t + 2qd, +1 of n-tile t), shared by the forward (attention_flash.cu), which drops P, and the
// backward (attention_flash_backward.cu), which must draw the same mask. The mask is
// kernels/dropout_rng.h's at the flattened (b,h,i,j): one 64-bit hash serves 4 keys.
#pragma once
#include <stdint.h>

#include "../dropout_rng.h"

// With Tk % 4 == 0 the 4 keys of the group 8t + 4 (qd >> 1) .. of a row sit on threads qd,
// qd ^ 1: thread qd hashes row (qd & 1)'s group and the two swap (two 32-bit shuffles), so each
// gets both rows' 64 bits with one hash. row0: the flat index of the thread's row g at key 0;
// row8: 8 Tk (row g + 8). *b0, *b1: the draws of rows g and g + 8; the thread's first key is
// lane 2 (qd & 1) of them.
__device__ __forceinline__ void tile_group_draws(uint64_t key, uint64_t row0, uint64_t row8, int t, int qd,
                                                 uint64_t *b0, uint64_t *b1) {
    const int mine = qd & 1;
    const uint64_t bm = dropout_rng_bits(key, (row0 + (uint64_t)mine * row8 + 8 * t + 4 * (qd >> 1)) >> 2);
    const unsigned lo = __shfl_xor_sync(0xffffffffu, (unsigned)bm, 1);
    const unsigned hi = __shfl_xor_sync(0xffffffffu, (unsigned)(bm >> 32), 1);
    const uint64_t bo = ((uint64_t)hi << 32) | lo;
    *b0 = mine ? bo : bm, *b1 = mine ? bm : bo;
}
