// common/hash_index.c: SipHash-1-3 under a per-process key, and the open-addressing index
// (linear probing, grown to stay at most half full) of hash_index.h.
#include "hash_index.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static uint64_t key0, key1;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void hash_make_key(void) {
    uint64_t k[2];
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {  // no entropy yet: the clock and pid
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
        k[1] = (uint64_t)ts.tv_sec * 0xc2b2ae3d27d4eb4full ^ (uint64_t)(uintptr_t)&ts;
    }
    key0 = k[0];
    key1 = k[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                    \
    do {                                                                                                            \
        v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32);                                                   \
        v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                                                                      \
        v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                                                                      \
        v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32);                                                   \
    } while (0)

uint64_t hash_bytes(const void *data, size_t n) {
    pthread_once(&key_once, hash_make_key);
    const unsigned char *p = data;
    uint64_t v0 = key0 ^ 0x736f6d6570736575ull, v1 = key1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = key0 ^ 0x6c7967656e657261ull, v3 = key1 ^ 0x7465646279746573ull;
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = 0;
        for (int k = 7; k >= 0; k--) m = m << 8 | p[i + (size_t)k];
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t k = 0; k < (n & 7); k++) b |= (uint64_t)p[whole + k] << (8 * k);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t hash_u64(uint64_t x) {
    unsigned char b[8];
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(x >> (8 * k));
    return hash_bytes(b, sizeof b);
}

uint64_t hash_combine(uint64_t h, uint64_t x) {
    unsigned char b[16];
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(h >> (8 * k)), b[8 + k] = (unsigned char)(x >> (8 * k));
    return hash_bytes(b, sizeof b);
}

size_t hidx_next(HashProbe *p) {
    const HashIndex *h = p->h;
    if (!h->cap) return SIZE_MAX;
    for (; h->slots[p->at]; p->at = (p->at + 1) & (h->cap - 1)) {
        size_t at = p->at;
        if (h->hashes[at] == p->hash) {
            p->at = (p->at + 1) & (h->cap - 1);
            return h->slots[at] - 1;
        }
    }
    return SIZE_MAX;
}

size_t hidx_first(const HashIndex *h, uint64_t hash, HashProbe *p) {
    *p = (HashProbe){.h = h, .hash = hash, .at = h->cap ? (size_t)hash & (h->cap - 1) : 0};
    return hidx_next(p);
}

static void hidx_put(uint64_t *hashes, size_t *slots, size_t cap, uint64_t hash, size_t slot) {
    size_t at = (size_t)hash & (cap - 1);
    while (slots[at]) at = (at + 1) & (cap - 1);
    hashes[at] = hash;
    slots[at] = slot;
}

void hidx_add(HashIndex *h, uint64_t hash, size_t pos) {
    if (2 * (h->n + 1) > h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        uint64_t *hashes = mallocCheck(cap * sizeof *hashes);
        size_t *slots = callocCheck(cap, sizeof *slots);
        for (size_t i = 0; i < h->cap; i++)
            if (h->slots[i]) hidx_put(hashes, slots, cap, h->hashes[i], h->slots[i]);
        freeCheck(h->hashes);
        freeCheck(h->slots);
        h->hashes = hashes;
        h->slots = slots;
        h->cap = cap;
    }
    hidx_put(h->hashes, h->slots, h->cap, hash, pos + 1);
    h->n++;
}

void hidx_free(HashIndex *h) {
    freeCheck(h->hashes);
    freeCheck(h->slots);
    memset(h, 0, sizeof *h);
}
