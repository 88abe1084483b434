// common/hash_index.h: a keyed hash and an open-addressing index of positions by hash, for
// readers of untrusted files that look names up (pickle dict keys and memo, zip entries,
// torch storages): a linear scan per look-up makes a file of N names cost N^2 time.
// The hash is SipHash-1-3 (Aumasson and Bernstein; the variant CPython and Rust use for the
// same reason) under a key drawn once per process, so that a file cannot be crafted to put
// all its names in one chain. Only speed depends on the key: positions and the order of
// what is stored never do.
#pragma once
#include <stddef.h>
#include <stdint.h>

uint64_t hash_bytes(const void *p, size_t n);
uint64_t hash_u64(uint64_t x);
// Mixes one more hash into h (tuples: the hash of each item in turn).
uint64_t hash_combine(uint64_t h, uint64_t x);

// Positions (the caller's indices into its own arrays) under their hashes. The caller
// decides equality: look-ups hand back each position stored under the same hash in turn.
typedef struct HashIndex {
    uint64_t *hashes;
    size_t *slots;  // position + 1; 0: empty
    size_t cap, n;  // cap: 0 or a power of two, at most half full
} HashIndex;

typedef struct {
    const HashIndex *h;
    uint64_t hash;
    size_t at;
} HashProbe;

// The first (then the next) position stored under `hash`, or SIZE_MAX when there is none.
size_t hidx_first(const HashIndex *h, uint64_t hash, HashProbe *p);
size_t hidx_next(HashProbe *p);
// Stores pos under hash (the caller has checked that no equal entry is there).
void hidx_add(HashIndex *h, uint64_t hash, size_t pos);
void hidx_free(HashIndex *h);
