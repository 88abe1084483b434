// formats/torch_pickle_key.c: Python's == and hash for dict keys (see torch_pickle_key.h).
//
// Python (Objects/dictobject.c): a key stored again keeps its first key object and takes the
// last value; keys compare by identity first, then ==. Numbers compare by exact value across
// int, bool and float (so their hashes must agree: an integral float hashes as the int); a
// NaN equals only itself; str by their bytes (UTF-8 is one-to-one); classes (GLOBAL) by
// name, since one name resolves to one class object; tuples item by item. Other instances
// (tensors, storages, opaque objects) hash by identity (object.__hash__). A list or a dict
// is unhashable (TypeError in Python: the pickle is refused).
//
// Comparing tuples item by item can cost exponential time on shared sub-tuples (CPython's
// would too); here the items of a tuple are canonical first, so two tuples are compared by
// their items' canonical pointers: each value is canonicalized once, and a look-up costs
// the length of the key.
#include "torch_pickle_key.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

// distinct kinds that are never equal may share a hash; tags only spread them
#define TAG_NONE 0x4e6f6e65ull
#define TAG_GLOBAL 0x676c6f62616cull
#define TAG_TUPLE 0x7475706c65ull
#define PK_STRINGIFY_(x) #x
#define PK_STRINGIFY(x) PK_STRINGIFY_(x)

// v as an int64 when it is a number of integral value in int64's range.
static int key_as_int64(const PkValue *v, int64_t *out) {
    if (v->kind == PK_INT || v->kind == PK_BOOL) {
        *out = v->i;
        return 1;
    }
    if (v->kind != PK_FLOAT) return 0;
    double f = v->f;
    // [-2^63, 2^63): the range where (int64_t)f is defined
    if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != floor(f)) return 0;
    *out = (int64_t)f;
    return 1;
}

static int key_is_number(const PkValue *v) { return v->kind == PK_INT || v->kind == PK_BOOL || v->kind == PK_FLOAT; }

uint64_t pk_key_hash_str(const char *s) { return hash_bytes(s, strlen(s)); }
uint64_t pk_key_hash_int(int64_t i) { return hash_u64((uint64_t)i); }

int pk_key_equals_int(const PkValue *v, int64_t i) {
    int64_t x;
    return v && key_as_int64(v, &x) && x == i;
}

// Kinds compared by identity: they are their own canonical value.
static int key_by_identity(const PkValue *v) {
    return v->kind == PK_OBJECT || v->kind == PK_STORAGE || v->kind == PK_TENSOR || (v->kind == PK_FLOAT && isnan(v->f));
}

// The hash of v's value; a tuple's items are canonical already.
static uint64_t key_hash(const PkValue *v) {
    int64_t x;
    if (key_is_number(v)) {
        if (key_as_int64(v, &x)) return pk_key_hash_int(x);
        double f = v->f;  // not integral in int64's range: no int equals it
        return hash_bytes(&f, sizeof f);
    }
    switch (v->kind) {
    case PK_NONE: return hash_u64(TAG_NONE);
    case PK_STR: return pk_key_hash_str(v->s);
    case PK_GLOBAL: return hash_combine(TAG_GLOBAL, pk_key_hash_str(v->s));
    case PK_TUPLE: {
        uint64_t h = hash_combine(TAG_TUPLE, (uint64_t)v->n);
        for (int i = 0; i < v->n; i++) h = hash_combine(h, v->items[i]->canon->hash);
        return h;
    }
    default: return hash_u64((uint64_t)(uintptr_t)v);
    }
}

// Python's a == b for two values of hashable kinds (a tuple's items canonical already).
static int key_equal(const PkValue *a, const PkValue *b) {
    if (a == b) return 1;
    if (key_is_number(a) && key_is_number(b)) {
        int64_t x = 0, y = 0;
        int ia = key_as_int64(a, &x), ib = key_as_int64(b, &y);
        if (ia || ib) return ia && ib && x == y;
        return a->f == b->f;  // both floats, neither integral in range (a NaN is never equal)
    }
    if (a->kind != b->kind) return 0;
    switch (a->kind) {
    case PK_NONE: return 1;
    case PK_STR:
    case PK_GLOBAL: return strcmp(a->s, b->s) == 0;
    case PK_TUPLE:
        if (a->n != b->n) return 0;
        for (int i = 0; i < a->n; i++)
            if (a->items[i]->canon != b->items[i]->canon) return 0;
        return 1;
    default: return 0;  // identity kinds: a != b
    }
}

PkValue *pk_key_canon(PkKeys *k, PkValue *v, const char **why) {
    if (v->canon) return v->canon;
    if (v->kind == PK_LIST || v->kind == PK_DICT) {
        *why = v->kind == PK_LIST ? "a list is unhashable (Python refuses it as a dict key)"
                                  : "a dict is unhashable (Python refuses it as a dict key)";
        return NULL;
    }
    if (key_by_identity(v)) {
        v->canon = v;
        v->hash = key_hash(v);
        return v;
    }
    if (v->kind == PK_TUPLE) {
        if (v->depth > PK_MAX_KEY_DEPTH) {
            *why = "a tuple key nested more than " PK_STRINGIFY(PK_MAX_KEY_DEPTH) " deep";
            return NULL;
        }
        for (int i = 0; i < v->n; i++)  // recursion bounded by the depth above
            if (!pk_key_canon(k, v->items[i], why)) return NULL;
    }
    uint64_t h = key_hash(v);
    HashProbe p;
    for (size_t pos = hidx_first(&k->index, h, &p); pos != SIZE_MAX; pos = hidx_next(&p))
        if (key_equal(k->vals[pos], v)) {
            v->canon = k->vals[pos];
            v->hash = h;
            return v->canon;
        }
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 64;
        k->vals = reallocCheck(k->vals, k->cap * sizeof *k->vals);
    }
    k->vals[k->n] = v;
    hidx_add(&k->index, h, k->n++);
    v->canon = v;
    v->hash = h;
    return v;
}

void pk_keys_free(PkKeys *k) {
    hidx_free(&k->index);
    free(k->vals);
    memset(k, 0, sizeof *k);
}
