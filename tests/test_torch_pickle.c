// tests/test_torch_pickle.c: the pickle VM (formats/torch_pickle.c, formats/torch_pickle_key.c)
// on pickles written byte by byte here, for what a whole-file test cannot see (issue 35):
//  - dict keys as Python's dict has them: a key stored again keeps its place and takes the
//    last value; 1 == 1.0 == True, -0.0 == 0, a NaN only equals itself, tuples by items,
//    classes by name, other objects by identity; unhashable keys refused;
//  - time linear in the pickle: 10^6 keys, tuple keys that share sub-tuples (a 2^60-step
//    comparison item by item), pk_dict_get on a large dict;
//  - the memo: any 32-bit index, its memory by what is stored (a PUT of index 2^28 made a
//    4 GiB table), a PUT again replaces;
//  - BUILD: a second dict state updates the first (into a new dict); on a tensor, refused;
//  - _rebuild_tensor_v2's bounds as torch's set_ computes them, without overflow.
// tests/bad_input_pickle.sh runs the hostile files through the binary under ASan.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../formats/torch_pickle.h"
#include "test.h"
#include "test_fork.h"
#include "test_io_util.h"
#include "test_tmp.h"

// ---- writing pickles --------------------------------------------------------------------
typedef struct {
    unsigned char *b;
    size_t n, cap;
} Pb;

static void pb_bytes(Pb *p, const void *src, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = reallocCheck(p->b, p->cap);
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}
static void pb_op(Pb *p, int op) {
    unsigned char c = (unsigned char)op;
    pb_bytes(p, &c, 1);
}
static void pb_le(Pb *p, uint64_t v, int n) {
    for (int k = 0; k < n; k++) pb_op(p, (int)(v >> (8 * k)) & 0xff);
}
static void pb_str_n(Pb *p, const char *s, size_t n) {
    pb_op(p, 'X');
    pb_le(p, n, 4);
    pb_bytes(p, s, n);
}
static void pb_str(Pb *p, const char *s) { pb_str_n(p, s, strlen(s)); }
static void pb_int(Pb *p, int64_t v) {
    if (v >= 0 && v < 256) {
        pb_op(p, 'K');
        pb_le(p, (uint64_t)v, 1);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        pb_op(p, 'J');
        pb_le(p, (uint64_t)v, 4);
    } else {
        pb_op(p, 0x8a);
        pb_op(p, 8);
        pb_le(p, (uint64_t)v, 8);
    }
}
static void pb_float(Pb *p, double f) {
    uint64_t u;
    memcpy(&u, &f, 8);
    pb_op(p, 'G');
    for (int k = 7; k >= 0; k--) pb_op(p, (int)(u >> (8 * k)) & 0xff);
}
static void pb_global(Pb *p, const char *mod, const char *name) {
    pb_op(p, 'c');
    pb_bytes(p, mod, strlen(mod));
    pb_op(p, '\n');
    pb_bytes(p, name, strlen(name));
    pb_op(p, '\n');
}
static void pb_put(Pb *p, uint32_t idx) {
    pb_op(p, 'r');
    pb_le(p, idx, 4);
}
static void pb_get(Pb *p, uint32_t idx) {
    pb_op(p, 'j');
    pb_le(p, idx, 4);
}
static void pb_begin(Pb *p) {
    p->n = 0;
    pb_op(p, 0x80);
    pb_op(p, 2);
}

// The pickle in a file of its own (the VM reads from a FILE range).
static char *pb_file(const Pb *p, const char *name) {
    char *path = tmp_path(name);
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(p->b, 1, p->n, f, path);
    fcloseCheck(f, path);
    return path;
}

static PkValue *pb_load(const Pb *p, PkArena *a, const char *name) {
    char *path = pb_file(p, name);
    FILE *f = fopenCheck(path, "rb");
    uint64_t stop;
    PkValue *v = pk_load(a, f, path, NULL, 0, p->n, &stop);
    fclose(f);
    free(path);
    return v;
}
static void do_load(const void *arg) {
    PkArena a = {0};
    pb_load(arg, &a, "fail.pkl");
}

// ---- dict keys ------------------------------------------------------------------------------

static void test_keys(void) {
    Pb p = {0};
    PkArena a = {0};
    char msg[256];

    // {"a": 1, "b": 2, "a": 3}: two keys, "a" first, holding 3
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    pb_str(&p, "a"), pb_int(&p, 1), pb_str(&p, "b"), pb_int(&p, 2), pb_str(&p, "a"), pb_int(&p, 3);
    pb_op(&p, 'u');
    pb_op(&p, '.');
    const PkValue *d = pb_load(&p, &a, "dup.pkl");
    const PkValue *va = pk_dict_get(d, "a");
    snprintf(msg, sizeof msg, "repeated str key: %d pairs (want 2), first key \"%s\", d[\"a\"] = %lld (want 3, the last)",
             d->n / 2, d->n ? d->items[0]->s : "", va ? (long long)va->i : -1LL);
    test_check(d->n == 4 && !strcmp(d->items[0]->s, "a") && va && va->i == 3 && d->items[1] == va, msg);

    // {1: "i", True: "b", 1.0: "f", -0.0: "z", 0: "0"}: keys 1 and -0.0; values "f" and "0"
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    pb_int(&p, 1), pb_str(&p, "i");
    pb_op(&p, 0x88), pb_str(&p, "b");
    pb_float(&p, 1.0), pb_str(&p, "f");
    pb_float(&p, -0.0), pb_str(&p, "z");
    pb_int(&p, 0), pb_str(&p, "0");
    pb_op(&p, 'u');
    pb_op(&p, '.');
    d = pb_load(&p, &a, "num.pkl");
    const PkValue *v1 = pk_dict_get_int(d, 1), *v0 = pk_dict_get_int(d, 0);
    snprintf(msg, sizeof msg, "1 == True == 1.0, -0.0 == 0: %d pairs (want 2), d[1] = \"%s\" (want f), d[0] = \"%s\" (want 0), "
             "first key an int", d->n / 2, v1 ? v1->s : "?", v0 ? v0->s : "?");
    test_check(d->n == 4 && d->items[0]->kind == PK_INT && v1 && !strcmp(v1->s, "f") && v0 && !strcmp(v0->s, "0") &&
                   d->items[2]->kind == PK_FLOAT, msg);

    // 2^53 + 1 (an int) and 2^53 as a float are different keys; 2^53 the int and the float one
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    pb_int(&p, (1LL << 53) + 1), pb_op(&p, 'N');
    pb_float(&p, 9007199254740992.0), pb_op(&p, 'N');
    pb_int(&p, 1LL << 53), pb_op(&p, 'N');
    pb_float(&p, 1e300), pb_op(&p, 'N');
    pb_float(&p, 1e300), pb_op(&p, 'N');
    pb_op(&p, 'u');
    pb_op(&p, '.');
    d = pb_load(&p, &a, "big.pkl");
    snprintf(msg, sizeof msg, "2^53+1 != 2^53.0 == 2^53, 1e300 == 1e300: %d pairs (want 3)", d->n / 2);
    test_check(d->n == 6, msg);

    // two NaN objects are two keys; one NaN object (through the memo) twice is one
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    pb_float(&p, NAN), pb_op(&p, 'N');
    pb_float(&p, NAN), pb_put(&p, 7), pb_op(&p, 'N');
    pb_get(&p, 7), pb_op(&p, 'N');
    pb_op(&p, 'u');
    pb_op(&p, '.');
    d = pb_load(&p, &a, "nan.pkl");
    snprintf(msg, sizeof msg, "NaN keys: %d pairs (want 2: a NaN equals only itself)", d->n / 2);
    test_check(d->n == 4, msg);

    // tuples by their items: (1, "x") twice, (1,) and (1.0,); None twice; a class twice;
    // two opaque objects are two keys, one object twice is one
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    pb_int(&p, 1), pb_str(&p, "x"), pb_op(&p, 0x86), pb_op(&p, 'N');
    pb_int(&p, 1), pb_str(&p, "x"), pb_op(&p, 0x86), pb_op(&p, 'N');
    pb_int(&p, 1), pb_op(&p, 0x85), pb_op(&p, 'N');
    pb_float(&p, 1.0), pb_op(&p, 0x85), pb_op(&p, 'N');
    pb_op(&p, 'N'), pb_op(&p, 'N');
    pb_op(&p, 'N'), pb_op(&p, 'N');
    pb_global(&p, "torch", "float32"), pb_op(&p, 'N');
    pb_global(&p, "torch", "float32"), pb_op(&p, 'N');
    pb_global(&p, "argparse", "Namespace"), pb_op(&p, ')'), pb_op(&p, 'R'), pb_op(&p, 'N');
    pb_global(&p, "argparse", "Namespace"), pb_op(&p, ')'), pb_op(&p, 'R'), pb_put(&p, 9), pb_op(&p, 'N');
    pb_get(&p, 9), pb_op(&p, 'N');
    pb_op(&p, 'u');
    pb_op(&p, '.');
    d = pb_load(&p, &a, "kinds.pkl");
    snprintf(msg, sizeof msg, "tuple, None, class and object keys: %d pairs (want 6)", d->n / 2);
    test_check(d->n == 12, msg);

    // unhashable keys and keys nested too deep: refused in one line
    pb_begin(&p);
    pb_op(&p, '}'), pb_op(&p, ']'), pb_op(&p, 'N'), pb_op(&p, 's'), pb_op(&p, '.');
    test_expect_error("list key", do_load, &p, "fail.pkl: pickle: opcode SETITEM", "a list is unhashable");
    pb_begin(&p);
    pb_op(&p, '}'), pb_op(&p, '}'), pb_op(&p, 0x85), pb_op(&p, 'N'), pb_op(&p, 's'), pb_op(&p, '.');
    test_expect_error("tuple holding a dict as key", do_load, &p, "fail.pkl", "a dict is unhashable");
    pb_begin(&p);
    pb_op(&p, '}'), pb_op(&p, ')');
    for (int k = 0; k < 100000; k++) pb_op(&p, 0x85);
    pb_op(&p, 'N'), pb_op(&p, 's'), pb_op(&p, '.');
    test_expect_error("tuple key 100000 deep", do_load, &p, "fail.pkl", "a tuple key nested more than 100 deep");
    pb_begin(&p);  // 100 deep is fine
    pb_op(&p, '}'), pb_op(&p, ')');
    for (int k = 0; k < 99; k++) pb_op(&p, 0x85);
    pb_op(&p, 'N'), pb_op(&p, 's'), pb_op(&p, '.');
    d = pb_load(&p, &a, "deep99.pkl");
    test_check(d->n == 2 && d->items[0]->depth == 100, "a tuple key 100 deep is a key");
    pk_arena_free(&a);
    free(p.b);
}

// ---- time ----------------------------------------------------------------------------------

static void test_time(void) {
    Pb p = {0};
    PkArena a = {0};
    char msg[256], key[32];
    enum { NKEYS = 1000000 };
    pb_begin(&p);
    pb_op(&p, '}');
    pb_op(&p, '(');
    for (int k = 0; k < NKEYS; k++) {
        snprintf(key, sizeof key, "k%d", k);
        pb_str(&p, key);
        pb_int(&p, k);
    }
    pb_op(&p, 'u');
    pb_op(&p, '.');
    double t0 = now_seconds();
    const PkValue *d = pb_load(&p, &a, "keys.pkl");
    int found = 0;
    for (int k = 0; k < NKEYS; k += 1) {
        snprintf(key, sizeof key, "k%d", k);
        const PkValue *v = pk_dict_get(d, key);
        found += v && v->i == k;
    }
    double secs = now_seconds() - t0;
    snprintf(msg, sizeof msg, "10^6 keys (%.1f MB): loaded and every key looked up in %.2f s (limit 10 s), %d found",
             p.n / 1e6, secs, found);
    test_check(d->n == 2 * NKEYS && found == NKEYS && secs < 10, msg);
    pk_arena_free(&a);

    // P_k = (P_{k-1}, Q_{k-1}), Q_k = (Q_{k-1}, P_{k-1}) from 1 and 1.0: equal, never the same
    // object (item by item, comparing P_60 with Q_60 takes 2^60 steps). The tuples go into a
    // list as they are made; the list ends with {P_60: 1, Q_60: 2}, which has one key.
    pb_begin(&p);
    pb_op(&p, ']');
    pb_int(&p, 1), pb_put(&p, 0), pb_op(&p, 'a');
    pb_float(&p, 1.0), pb_put(&p, 1), pb_op(&p, 'a');
    for (uint32_t k = 0; k < 60; k++) {
        pb_get(&p, 2 * k), pb_get(&p, 2 * k + 1), pb_op(&p, 0x86), pb_put(&p, 2 * k + 2), pb_op(&p, 'a');
        pb_get(&p, 2 * k + 1), pb_get(&p, 2 * k), pb_op(&p, 0x86), pb_put(&p, 2 * k + 3), pb_op(&p, 'a');
    }
    pb_op(&p, '}');
    pb_get(&p, 120), pb_int(&p, 1), pb_op(&p, 's');
    pb_get(&p, 121), pb_int(&p, 2), pb_op(&p, 's');
    pb_op(&p, 'a');
    pb_op(&p, '.');
    t0 = now_seconds();
    const PkValue *l = pb_load(&p, &a, "dag.pkl");
    secs = now_seconds() - t0;
    d = l->items[l->n - 1];
    snprintf(msg, sizeof msg, "{P_60: 1, Q_60: 2} of equal tuples sharing sub-tuples: %d key(s) (want 1) holding %lld "
             "(want 2), %.3f s (limit 5 s)", d->n / 2, d->n ? (long long)d->items[1]->i : -1LL, secs);
    test_check(d->kind == PK_DICT && d->n == 2 && d->items[1]->i == 2 && secs < 5, msg);
    pk_arena_free(&a);
    free(p.b);
}

// ---- the memo ------------------------------------------------------------------------------

static void test_memo(void) {
    Pb p = {0};
    PkArena a = {0};
    char msg[256];
    // [v, v, w]: PUT 2^28, 2^32 - 1; GET both; a PUT again at 2^28 replaces
    pb_begin(&p);
    pb_op(&p, ']');
    pb_op(&p, '(');
    pb_str(&p, "v"), pb_put(&p, 0x10000000), pb_put(&p, 0xffffffffu);
    pb_get(&p, 0xffffffffu);
    pb_str(&p, "w"), pb_put(&p, 0x10000000);
    pb_op(&p, 'e');
    pb_get(&p, 0x10000000), pb_op(&p, 'a');
    pb_op(&p, '.');
    size_t before = check_mem_current();
    check_mem_reset_peak();
    const PkValue *l = pb_load(&p, &a, "memo.pkl");
    size_t grew = check_mem_peak() - before;
    snprintf(msg, sizeof msg, "memo indices 2^28 and 2^32-1: list [%s, %s, %s, %s] (want v v w w), peak memory +%zu "
             "bytes (limit 1 MiB)", l->n > 0 ? l->items[0]->s : "?", l->n > 1 ? l->items[1]->s : "?",
             l->n > 2 ? l->items[2]->s : "?", l->n > 3 ? l->items[3]->s : "?", grew);
    test_check(l->kind == PK_LIST && l->n == 4 && !strcmp(l->items[0]->s, "v") && !strcmp(l->items[1]->s, "v") &&
                   !strcmp(l->items[2]->s, "w") && l->items[3] == l->items[2] && grew < (1u << 20),
               msg);
    pk_arena_free(&a);

    // 10^5 PUTs spread over the whole index range: memory by what is stored
    pb_begin(&p);
    pb_op(&p, '}');
    for (uint32_t k = 0; k < 100000; k++) pb_put(&p, k * 42949u);
    pb_op(&p, '.');
    before = check_mem_current();
    check_mem_reset_peak();
    pb_load(&p, &a, "memo_spread.pkl");
    grew = check_mem_peak() - before;
    snprintf(msg, sizeof msg, "10^5 PUTs spread over 2^32 indices: peak memory +%.1f MiB (limit 64 MiB)", grew / 1048576.0);
    test_check(grew < (64u << 20), msg);
    pk_arena_free(&a);

    pb_begin(&p);
    pb_op(&p, '}'), pb_get(&p, 0x7fffffff), pb_op(&p, '.');
    test_expect_error("GET of an unset index", do_load, &p, "fail.pkl", "memo index 2147483647 was never stored");
    free(p.b);
}

// ---- BUILD and tensors ------------------------------------------------------------------------

static void pb_tensor(Pb *p, int64_t numel, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride) {
    pb_global(p, "torch._utils", "_rebuild_tensor_v2");
    pb_op(p, '(');
    pb_op(p, '(');
    pb_str(p, "storage"), pb_global(p, "torch", "FloatStorage"), pb_str(p, "0"), pb_str(p, "cpu"), pb_int(p, numel);
    pb_op(p, 't');
    pb_op(p, 'Q');
    pb_int(p, offset);
    pb_op(p, '(');
    for (int d = 0; d < ndim; d++) pb_int(p, shape[d]);
    pb_op(p, 't');
    pb_op(p, '(');
    for (int d = 0; d < ndim; d++) pb_int(p, stride[d]);
    pb_op(p, 't');
    pb_op(p, 0x89);
    pb_op(p, ')');
    pb_op(p, 't');
    pb_op(p, 'R');
}

static void test_build_and_tensors(void) {
    Pb p = {0};
    PkArena a = {0};
    char msg[256];
    // obj with state {"a": 1, "b": 2}, then BUILD {"b": 3}: {"a": 1, "b": 3}; the first dict is kept as it was
    pb_begin(&p);
    pb_op(&p, ']');
    pb_global(&p, "deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler");
    pb_op(&p, ')');
    pb_op(&p, 0x81);
    pb_op(&p, '}'), pb_put(&p, 5), pb_op(&p, '(');
    pb_str(&p, "a"), pb_int(&p, 1), pb_str(&p, "b"), pb_int(&p, 2);
    pb_op(&p, 'u'), pb_op(&p, 'b');
    pb_op(&p, '}'), pb_str(&p, "b"), pb_int(&p, 3), pb_op(&p, 's'), pb_op(&p, 'b');
    pb_op(&p, 'a');
    pb_get(&p, 5), pb_op(&p, 'a');
    pb_op(&p, '.');
    const PkValue *l = pb_load(&p, &a, "build.pkl");
    const PkValue *st = l->items[0]->items[1], *first = l->items[1];
    const PkValue *sa = pk_dict_get(st, "a"), *sb = pk_dict_get(st, "b"), *fb = pk_dict_get(first, "b");
    snprintf(msg, sizeof msg, "BUILD twice: state a=%lld b=%lld (want 1 3), the first state's b=%lld (want 2)",
             sa ? (long long)sa->i : -1LL, sb ? (long long)sb->i : -1LL, fb ? (long long)fb->i : -1LL);
    test_check(sa && sa->i == 1 && sb && sb->i == 3 && fb && fb->i == 2, msg);
    pk_arena_free(&a);

    int64_t shape[2] = {4, 3}, stride[2] = {3, 1};
    pb_begin(&p);
    pb_tensor(&p, 12, 0, 2, shape, stride);
    pb_op(&p, '(');
    pb_op(&p, 't');
    pb_op(&p, 'b');
    pb_op(&p, '.');
    test_expect_error("BUILD on a tensor", do_load, &p, "fail.pkl", "BUILD on a tensor");

    // bounds: offset + (size-1)*stride + 1 <= numel, overflow-safe; a size-0 tensor needs no storage
    pb_begin(&p);
    pb_tensor(&p, 12, 0, 2, shape, stride);
    pb_op(&p, '.');
    const PkValue *t = pb_load(&p, &a, "t_ok.pkl");
    test_check(t->kind == PK_TENSOR && t->ndim == 2 && t->shape[0] == 4 && t->stride[0] == 3, "a 4x3 tensor over 12 elements");
    int64_t empty[2] = {0, 5}, estride[2] = {5, 1};
    pb_begin(&p);
    pb_tensor(&p, 0, (int64_t)1 << 62, 2, empty, estride);
    pb_op(&p, '.');
    t = pb_load(&p, &a, "t_empty.pkl");
    test_check(t->kind == PK_TENSOR && t->shape[0] == 0, "a 0x5 tensor at offset 2^62 of an empty storage (torch: 0 bytes)");
    pk_arena_free(&a);
    pb_begin(&p);
    pb_tensor(&p, ((int64_t)1 << 60) + 12, (int64_t)1 << 62, 2, shape, stride);
    pb_op(&p, '.');
    test_expect_error("offset past the storage", do_load, &p, "fail.pkl", "reaches element");
    int64_t huge[2] = {(int64_t)1 << 33, (int64_t)1 << 32}, hstride[2] = {(int64_t)1 << 32, 1};
    pb_begin(&p);
    pb_tensor(&p, 12, 0, 2, huge, hstride);
    pb_op(&p, '.');
    test_expect_error("sizes whose product overflows", do_load, &p, "fail.pkl", "overflow");
    int64_t far[2] = {2, 2}, fstride[2] = {INT64_MAX, 1};
    pb_begin(&p);
    pb_tensor(&p, 12, 0, 2, far, fstride);
    pb_op(&p, '.');
    test_expect_error("a stride of 2^63-1", do_load, &p, "fail.pkl", "reaches element");
    pb_begin(&p);
    pb_tensor(&p, INT64_MAX / 2, 0, 2, shape, stride);
    pb_op(&p, '.');
    test_expect_error("numel * 4 overflows", do_load, &p, "fail.pkl", "size in bytes overflows");

    free(p.b);
}

// ---- strings and classes ------------------------------------------------------------------------

static void test_strings(void) {
    Pb p = {0};
    PkArena a = {0};
    pb_begin(&p);
    pb_str_n(&p, "shared.weight\0x", 15);
    pb_op(&p, '.');
    test_expect_error("a NUL inside a str", do_load, &p, "fail.pkl", "a NUL at its byte 13");
    pb_begin(&p);
    pb_str_n(&p, "\xc0\xaf", 2);  // overlong "/"
    pb_op(&p, '.');
    test_expect_error("overlong UTF-8", do_load, &p, "fail.pkl", "malformed UTF-8 at its byte 0");
    pb_begin(&p);
    pb_str_n(&p, "ok\xf4\x90\x80\x80", 6);  // above U+10FFFF
    pb_op(&p, '.');
    test_expect_error("UTF-8 above U+10FFFF", do_load, &p, "fail.pkl", "malformed UTF-8 at its byte 2");
    pb_begin(&p);
    pb_str_n(&p, "\xed\xa0\x80\xe2\x82\xac", 6);  // a lone surrogate (Python's surrogatepass) and the euro sign
    pb_op(&p, '.');
    const PkValue *s = pb_load(&p, &a, "surrogate.pkl");
    test_check(s->kind == PK_STR && strlen(s->s) == 6, "an encoded surrogate decodes (surrogatepass), as in Python");
    pb_begin(&p);
    pb_global(&p, "torch", "_utils._rebuild_tensor_v2");
    pb_op(&p, '.');
    test_expect_error("a dotted class name at protocol 2", do_load, &p, "fail.pkl", "is dotted");
    p.b[1] = 4;  // PROTO 4: an attribute path
    s = pb_load(&p, &a, "dotted4.pkl");
    test_check(s->kind == PK_GLOBAL && !strcmp(s->s, "torch._utils._rebuild_tensor_v2"),
               "a dotted class name at protocol 4 is an attribute path");
    pk_arena_free(&a);
    free(p.b);
}

int main(void) {
    setenv("T5_COUNT_HOST_MEM", "1", 1);  // before the first allocation: check.h's counting mode
    if (!io_tmp_begin("torch_pickle")) return 2;
    test_keys();
    test_time();
    test_memo();
    test_build_and_tensors();
    test_strings();
    rm_rf(g_tmp);
    return test_summary();
}
