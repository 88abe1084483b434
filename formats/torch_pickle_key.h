// formats/torch_pickle_key.h: dict keys of the pickle VM (formats/torch_pickle.c) compared as
// Python compares them, in time linear in the pickle. Each value used as a key gets a
// canonical value (PkValue.canon): the first value seen that Python's == finds equal to it
// (1, 1.0 and True are one key; two tuples are one key when their items are), so that two
// keys are equal exactly when their canonical values are the same pointer. Used by the VM
// only; callers of torch_pickle.h look keys up with pk_dict_get / pk_dict_get_int.
#pragma once
#include <stdint.h>

#include "../common/hash_index.h"
#include "torch_pickle.h"

#define PK_MAX_KEY_DEPTH 100  // tuples inside tuples of one key (CPython's own limit is ~1000)

typedef struct {
    HashIndex index;  // canonical values by hash
    PkValue **vals;
    size_t n, cap;
} PkKeys;

// v's canonical value (set in v->canon, its hash in v->hash); NULL with *why set when v
// cannot be a key: unhashable in Python (a list, a dict, a tuple holding one) or nested
// deeper than PK_MAX_KEY_DEPTH.
PkValue *pk_key_canon(PkKeys *k, PkValue *v, const char **why);
void pk_keys_free(PkKeys *k);

// The hash pk_key_canon gives a str / an int (callers looking keys up by C value).
uint64_t pk_key_hash_str(const char *s);
uint64_t pk_key_hash_int(int64_t i);
// 1 if v is a number equal to i (an int, a bool, or a float of that exact value).
int pk_key_equals_int(const PkValue *v, int64_t i);
