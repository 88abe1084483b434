// model/bump.h: the bump allocator that lays out an arena of buffers (the training
// activations in model/t5.c, the decoder state of model/kv_decoder.c). With base == NULL it
// only measures, so one function both sizes the arena and assigns the buffers in it.
#pragma once
#include <stddef.h>

typedef struct {
    char *base;
    size_t used;
} Bump;

static inline void *bump_take(Bump *b, size_t bytes) {
    size_t off = (b->used + 255) & ~(size_t)255;  // 256-byte alignment for GPU kernels
    b->used = off + bytes;
    return b->base ? (void *)(b->base + off) : NULL;
}
