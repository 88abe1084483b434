// formats/torch_pickle.c: the pickle VM of torch_pickle.h.
//
// Semantics follow CPython's Lib/pickle.py (_Unpickler) for the opcodes implemented; torch's
// classes follow torch/_utils.py (_rebuild_tensor_v2, _rebuild_parameter) and
// torch/serialization.py (the `storage` persistent id), torch/_tensor.py (_rebuild_from_type_v2:
// a tensor with Python attributes). Every other class is kept opaque:
// REDUCE/NEWOBJ record the class and its args, BUILD records the state. collections.OrderedDict
// is a dict; torch.Size is a tuple.
//
// The file is untrusted. Dict keys are hashed and compared as Python compares them
// (torch_pickle_key.c); the memo is a hash map, so an index costs what it stores, not its
// size; every size, offset and count is checked without overflow; the stack, the marks and a
// container hold at most PK_MAX_ITEMS; the only recursion (_rebuild_from_type_v2 inside
// itself, tuple keys) is bounded. Time and memory are linear in the pickle's size.
#include "torch_pickle.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "../common/check.h"
#include "../common/hash_index.h"
#include "torch_pickle_key.h"

// ---- opcodes (CPython Lib/pickle.py names) ----------------------------------------------
enum {
    OP_MARK = '(',
    OP_STOP = '.',
    OP_NONE = 'N',
    OP_BININT = 'J',
    OP_BININT1 = 'K',
    OP_BININT2 = 'M',
    OP_BINFLOAT = 'G',
    OP_BINUNICODE = 'X',
    OP_BINPERSID = 'Q',
    OP_REDUCE = 'R',
    OP_APPEND = 'a',
    OP_APPENDS = 'e',
    OP_BUILD = 'b',
    OP_GLOBAL = 'c',
    OP_EMPTY_DICT = '}',
    OP_EMPTY_LIST = ']',
    OP_EMPTY_TUPLE = ')',
    OP_SETITEM = 's',
    OP_SETITEMS = 'u',
    OP_TUPLE = 't',
    OP_BINGET = 'h',
    OP_LONG_BINGET = 'j',
    OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r',
    OP_PROTO = 0x80,
    OP_NEWOBJ = 0x81,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
};

// Every opcode of pickle protocols 0-5, so that an unimplemented one is refused by name.
static const struct {
    unsigned char code;
    const char *name;
} OPCODE_NAMES[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
    {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
    {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
    {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"},
    {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"},
    {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"},
    {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

static const char *opcode_name(int op) {
    for (size_t i = 0; i < sizeof OPCODE_NAMES / sizeof OPCODE_NAMES[0]; i++)
        if (OPCODE_NAMES[i].code == op) return OPCODE_NAMES[i].name;
    return "(not a pickle opcode)";
}

#define PK_MAX_PROTOCOL 5           // the highest protocol CPython knows
#define PK_MAX_GLOBAL_NAME 256      // "module\nname\n" lines
#define PK_MAX_ITEMS (1 << 28)       // a container larger than this is not a state dict

// ---- dtypes ---------------------------------------------------------------------------
static const struct {
    const char *storage;  // torch.<storage> as pickled
    const char *name;
    int size;
} DTYPES[TORCH_DTYPE_COUNT] = {
    [TORCH_F32] = {"torch.FloatStorage", "float32", 4},    [TORCH_F16] = {"torch.HalfStorage", "float16", 2},
    [TORCH_BF16] = {"torch.BFloat16Storage", "bfloat16", 2}, [TORCH_F64] = {"torch.DoubleStorage", "float64", 8},
    [TORCH_I64] = {"torch.LongStorage", "int64", 8},       [TORCH_I32] = {"torch.IntStorage", "int32", 4},
    [TORCH_I16] = {"torch.ShortStorage", "int16", 2},      [TORCH_I8] = {"torch.CharStorage", "int8", 1},
    [TORCH_U8] = {"torch.ByteStorage", "uint8", 1},        [TORCH_BOOL] = {"torch.BoolStorage", "bool", 1},
};

const char *torch_dtype_name(TorchDtype d) { return (unsigned)d < TORCH_DTYPE_COUNT ? DTYPES[d].name : "?"; }
int torch_dtype_size(TorchDtype d) { return (unsigned)d < TORCH_DTYPE_COUNT ? DTYPES[d].size : 0; }

const char *pk_kind_name(PkKind k) {
    static const char *const N[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict",
                                    "global", "object", "storage", "tensor"};
    return (unsigned)k < sizeof N / sizeof N[0] ? N[k] : "?";
}

// ---- the machine ----------------------------------------------------------------------

typedef struct {
    PkArena *a;
    FILE *f;
    const char *path, *where;
    uint64_t begin, end, pos;  // file offsets; pos: next byte to read
    uint64_t op_at;            // offset (from begin) of the opcode being run
    int op;
    int proto;                 // as the last PROTO said (0 before one)
    PkValue **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    // the memo: any 32-bit index, stored sparsely (a PUT of index 2^31 costs one entry)
    HashIndex memo_index;
    uint32_t *memo_keys;
    PkValue **memo_vals;
    size_t memo_n, memo_cap;
    PkKeys keys;               // dict keys' canonical values
} Vm;

__attribute__((noreturn, format(printf, 2, 3))) static void vm_fail(const Vm *vm, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char place[96] = "";
    if (vm->where) snprintf(place, sizeof place, " %s", vm->where);
    if (vm->op >= 0)
        t5_fail("%s: pickle%s: opcode %s (0x%02x) at byte %llu: %s; HINT: a whole file written by torch.save (a "
                "PyTorch state dict or a DeepSpeed checkpoint)", vm->path, place, opcode_name(vm->op), vm->op,
                (unsigned long long)vm->op_at, msg);
    t5_fail("%s: pickle%s at byte %llu: %s; HINT: a whole file written by torch.save (a PyTorch state dict or a "
            "DeepSpeed checkpoint)", vm->path, place, (unsigned long long)vm->op_at, msg);
}

static void vm_read(Vm *vm, void *dst, size_t n) {
    if (n > vm->end - vm->pos)
        vm_fail(vm, "needs %zu more bytes, the pickle ends at byte %llu (truncated)", n,
                (unsigned long long)(vm->end - vm->begin));
    if (n && fread(dst, 1, n, vm->f) != n)
        vm_fail(vm, "short read (%s)", ferror(vm->f) ? strerror(errno) : "end of file: truncated");
    vm->pos += n;
}
static uint64_t vm_le(Vm *vm, int n) {
    unsigned char b[8];
    vm_read(vm, b, (size_t)n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static PkValue *vm_new(Vm *vm, PkKind k) {
    PkArena *a = vm->a;
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->all = reallocCheck(a->all, a->cap * sizeof *a->all);
    }
    PkValue *v = callocCheck(1, sizeof *v);
    v->kind = k;
    a->all[a->n++] = v;
    return v;
}
// None, True, False, (): one value each, as in Python (a pickle of N of them costs N pointers)
static PkValue *vm_constant(Vm *vm, PkValue **slot, PkKind k, int64_t i) {
    if (!*slot) {
        *slot = vm_new(vm, k);
        (*slot)->i = i;
    }
    return *slot;
}
static void vm_add(Vm *vm, PkValue *c, PkValue *item) {
    if (c->n >= PK_MAX_ITEMS) vm_fail(vm, "a %s of more than %d items", pk_kind_name(c->kind), PK_MAX_ITEMS);
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 4;
        c->items = reallocCheck(c->items, (size_t)c->cap * sizeof *c->items);
    }
    c->items[c->n++] = item;
}
static void vm_push(Vm *vm, PkValue *v) {
    if (vm->sp == vm->scap) {
        if (vm->scap >= PK_MAX_ITEMS) vm_fail(vm, "more than %d values on the stack", PK_MAX_ITEMS);
        vm->scap = vm->scap ? vm->scap * 2 : 64;
        vm->stack = reallocCheck(vm->stack, vm->scap * sizeof *vm->stack);
    }
    vm->stack[vm->sp++] = v;
}
// The floor of the stack: the last MARK (values below it belong to an outer container).
static size_t vm_floor(const Vm *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }
static PkValue *vm_pop(Vm *vm) {
    if (vm->sp <= vm_floor(vm)) vm_fail(vm, "the stack is empty");
    return vm->stack[--vm->sp];
}
static PkValue *vm_top(Vm *vm) {
    if (vm->sp <= vm_floor(vm)) vm_fail(vm, "the stack is empty");
    return vm->stack[vm->sp - 1];
}
// Pops to the last MARK; returns the index of the first value above it.
static size_t vm_pop_mark(Vm *vm) {
    if (!vm->nmarks) vm_fail(vm, "no MARK on the stack");
    return vm->marks[--vm->nmarks];
}

// The container a MARK-delimited run of values goes into: the value just below the mark.
static PkValue *vm_below_mark(Vm *vm, size_t k) {
    if (k <= vm_floor(vm)) vm_fail(vm, "no container below the MARK");
    return vm->stack[k - 1];
}

// Python decodes BINUNICODE as UTF-8 with errors="surrogatepass" (encoded surrogates are
// fine, anything else malformed is a UnicodeDecodeError). Returns the offset of the first
// bad byte, or n. A NUL is refused too, though Python takes it: strings are C strings here,
// and a NUL would make two different keys ("a\0b" and "a") one.
static size_t vm_utf8_bad(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || c == 0 || len > n - i || c == 0xc0 || c == 0xc1 || c > 0xf4) return i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80) return i;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f))
            return i;  // overlong, or above U+10FFFF
        i += len;
    }
    return n;
}

static PkValue *vm_tuple(Vm *vm, PkValue **items, size_t n) {
    if (!n) {
        PkValue *e = vm_constant(vm, &vm->a->empty_tuple, PK_TUPLE, 0);
        e->depth = 1;
        return e;
    }
    PkValue *t = vm_new(vm, PK_TUPLE);
    t->depth = 1;
    for (size_t i = 0; i < n; i++) {
        vm_add(vm, t, items[i]);
        // saturated: a pickle of 2^31 TUPLE1s must not overflow an int (keys stop at 100 anyway)
        if (items[i]->kind == PK_TUPLE && items[i]->depth >= t->depth)
            t->depth = items[i]->depth < (1 << 30) ? items[i]->depth + 1 : items[i]->depth;
    }
    return t;
}

static int64_t want_int(Vm *vm, const PkValue *v, const char *what) {
    if (!v || v->kind != PK_INT) vm_fail(vm, "%s: expected an int, found %s", what, v ? pk_kind_name(v->kind) : "nothing");
    return v->i;
}

// ---- dicts ----------------------------------------------------------------------------

// d[k] = v as Python does it: a key equal to one stored keeps the stored key and its place,
// and takes the new value. Hashed: N keys cost N look-ups, not N^2 comparisons.
static void vm_setitem(Vm *vm, PkValue *d, PkValue *k, PkValue *v) {
    if (d->kind != PK_DICT) vm_fail(vm, "SETITEM on a %s, not a dict", pk_kind_name(d->kind));
    const char *why = NULL;
    PkValue *c = pk_key_canon(&vm->keys, k, &why);
    if (!c) vm_fail(vm, "dict key: %s", why);
    if (!d->index) d->index = callocCheck(1, sizeof *d->index);
    HashProbe p;
    for (size_t pos = hidx_first(d->index, c->hash, &p); pos != SIZE_MAX; pos = hidx_next(&p))
        if (d->items[2 * pos]->canon == c) {
            d->items[2 * pos + 1] = v;
            return;
        }
    vm_add(vm, d, k);
    vm_add(vm, d, v);
    hidx_add(d->index, c->hash, (size_t)d->n / 2 - 1);
}

// ---- the memo ---------------------------------------------------------------------------

static void vm_memo_put(Vm *vm, uint32_t idx) {
    PkValue *v = vm_top(vm);
    HashProbe p;
    uint64_t h = hash_u64(idx);
    for (size_t pos = hidx_first(&vm->memo_index, h, &p); pos != SIZE_MAX; pos = hidx_next(&p))
        if (vm->memo_keys[pos] == idx) {
            vm->memo_vals[pos] = v;  // a PUT again replaces, as in Python
            return;
        }
    if (vm->memo_n == vm->memo_cap) {
        vm->memo_cap = vm->memo_cap ? 2 * vm->memo_cap : 256;
        vm->memo_keys = reallocCheck(vm->memo_keys, vm->memo_cap * sizeof *vm->memo_keys);
        vm->memo_vals = reallocCheck(vm->memo_vals, vm->memo_cap * sizeof *vm->memo_vals);
    }
    vm->memo_keys[vm->memo_n] = idx;
    vm->memo_vals[vm->memo_n] = v;
    hidx_add(&vm->memo_index, h, vm->memo_n++);
}
static void vm_memo_get(Vm *vm, uint32_t idx) {
    HashProbe p;
    for (size_t pos = hidx_first(&vm->memo_index, hash_u64(idx), &p); pos != SIZE_MAX; pos = hidx_next(&p))
        if (vm->memo_keys[pos] == idx) {
            vm_push(vm, vm->memo_vals[pos]);
            return;
        }
    vm_fail(vm, "memo index %lu was never stored", (unsigned long)idx);
}

// ---- torch: storages, tensors ---------------------------------------------------------

// BINPERSID: ('storage', storage_type, key, location, numel) as torch's zip format writes it,
// or with a sixth view_metadata (None or (view_key, offset, view_size)) in the legacy format.
static PkValue *vm_persistent(Vm *vm, const PkValue *pid) {
    if (pid->kind != PK_TUPLE || pid->n < 5 || pid->n > 6 || pid->items[0]->kind != PK_STR ||
        strcmp(pid->items[0]->s, "storage") != 0)
        vm_fail(vm, "persistent id is not a ('storage', type, key, location, numel) tuple");
    const PkValue *type = pid->items[1], *key = pid->items[2];
    if (type->kind != PK_GLOBAL) vm_fail(vm, "storage type is a %s, not a class", pk_kind_name(type->kind));
    int d = -1;
    for (int i = 0; i < TORCH_DTYPE_COUNT && d < 0; i++)
        if (strcmp(type->s, DTYPES[i].storage) == 0) d = i;
    if (d < 0) vm_fail(vm, "storage type %s is not supported (float, half, bfloat16, double, integer, bool)", type->s);
    if (key->kind != PK_STR) vm_fail(vm, "storage key is a %s, not a str", pk_kind_name(key->kind));
    int64_t numel = want_int(vm, pid->items[4], "storage numel");
    uint64_t bytes;
    if (numel < 0 || __builtin_mul_overflow((uint64_t)numel, (uint64_t)DTYPES[d].size, &bytes) || bytes > INT64_MAX)
        vm_fail(vm, "storage \"%s\": numel %lld (%s) is negative or its size in bytes overflows", key->s,
                (long long)numel, DTYPES[d].name);
    PkValue *s = vm_new(vm, PK_STORAGE);
    s->s = strdup(key->s);
    if (!s->s) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    s->dtype = (TorchDtype)d;
    s->numel = s->root_numel = (uint64_t)numel;
    s->legacy_id = pid->n == 6;
    if (pid->n == 6 && pid->items[5]->kind != PK_NONE) {  // a view of a root storage (torch < 1.6)
        const PkValue *vw = pid->items[5];
        if (vw->kind != PK_TUPLE || vw->n != 3 || vw->items[0]->kind != PK_STR)
            vm_fail(vm, "storage view metadata is not a (key, offset, size) tuple");
        int64_t off = want_int(vm, vw->items[1], "view offset"), size = want_int(vm, vw->items[2], "view size");
        if (off < 0 || size < 0 || (uint64_t)off > (uint64_t)numel || (uint64_t)size > (uint64_t)numel - (uint64_t)off)
            vm_fail(vm, "storage view [%lld, +%lld) outside its root storage of %lld elements", (long long)off,
                    (long long)size, (long long)numel);
        s->view_offset = (uint64_t)off;
        s->numel = (uint64_t)size;
    }
    return s;
}

static int64_t *want_dims(Vm *vm, const PkValue *t, const char *what, int *ndim) {
    if (!t || t->kind != PK_TUPLE) vm_fail(vm, "_rebuild_tensor_v2: %s is not a tuple", what);
    if (t->n > PK_MAX_DIMS) vm_fail(vm, "_rebuild_tensor_v2: %d dimensions, at most %d supported", t->n, PK_MAX_DIMS);
    int64_t *out = mallocCheck(PK_MAX_DIMS * sizeof *out);
    for (int i = 0; i < t->n; i++) out[i] = want_int(vm, t->items[i], what);
    *ndim = t->n;
    return out;
}

// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks[, metadata]). Bounds as torch's set_ checks them (computeStorageNbytes: a
// tensor with a size-0 dimension needs no storage; otherwise offset + sum((size-1)*stride)
// + 1 elements), with every product and sum checked for overflow.
static PkValue *vm_rebuild_tensor(Vm *vm, const PkValue *args) {
    if (args->n < 4 || args->n > 7) vm_fail(vm, "_rebuild_tensor_v2 with %d arguments", args->n);
    if (args->items[0]->kind != PK_STORAGE)
        vm_fail(vm, "_rebuild_tensor_v2 over a %s, not a storage", pk_kind_name(args->items[0]->kind));
    PkValue *t = vm_new(vm, PK_TENSOR);
    PkValue *s = t->storage = args->items[0];
    int64_t off = want_int(vm, args->items[1], "storage_offset");
    if (off < 0) vm_fail(vm, "_rebuild_tensor_v2: storage_offset %lld is negative", (long long)off);
    t->storage_offset = (uint64_t)off;
    int nstride;
    t->shape = want_dims(vm, args->items[2], "size", &t->ndim);
    t->stride = want_dims(vm, args->items[3], "stride", &nstride);
    if (nstride != t->ndim) vm_fail(vm, "_rebuild_tensor_v2: %d sizes but %d strides", t->ndim, nstride);
    uint64_t last = 0, numel = 1;  // last: the farthest element from the offset
    int empty = 0, overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->stride[i] < 0)
            vm_fail(vm, "_rebuild_tensor_v2: size %lld or stride %lld of dimension %d is negative",
                    (long long)t->shape[i], (long long)t->stride[i], i);
        uint64_t reach;
        empty |= t->shape[i] == 0;
        overflow |= __builtin_mul_overflow((uint64_t)t->shape[i], numel, &numel);
        if (t->shape[i] > 0)
            overflow |= __builtin_mul_overflow((uint64_t)t->shape[i] - 1, (uint64_t)t->stride[i], &reach) ||
                        __builtin_add_overflow(last, reach, &last);
    }
    uint64_t need = 0;  // elements of the storage the tensor reaches
    if (!empty) overflow |= __builtin_add_overflow(t->storage_offset, last, &need) || __builtin_add_overflow(need, 1, &need);
    if (overflow && !empty) vm_fail(vm, "_rebuild_tensor_v2 over storage \"%s\": its size, strides and offset overflow", s->s);
    if (need > s->numel)
        vm_fail(vm, "_rebuild_tensor_v2: storage_offset %llu with its sizes and strides reaches element %llu of storage "
                "\"%s\", which has %llu elements", (unsigned long long)t->storage_offset, (unsigned long long)(need - 1),
                s->s, (unsigned long long)s->numel);
    return t;
}

// REDUCE: callable(*args). torch's tensors and parameters, OrderedDict and torch.Size are
// understood; anything else becomes an opaque object. `depth` counts nested
// _rebuild_from_type_v2 calls (Python would hit its recursion limit; a bound keeps our stack).
#define PK_MAX_REBUILD_DEPTH 16
static PkValue *vm_reduce(Vm *vm, const PkValue *fn, PkValue *args, int depth) {
    if (args->kind != PK_TUPLE) vm_fail(vm, "REDUCE arguments are a %s, not a tuple", pk_kind_name(args->kind));
    if (fn->kind != PK_GLOBAL) vm_fail(vm, "REDUCE of a %s, not a class or function", pk_kind_name(fn->kind));
    if (!strcmp(fn->s, "torch._utils._rebuild_tensor_v2")) return vm_rebuild_tensor(vm, args);
    if (!strcmp(fn->s, "torch._utils._rebuild_parameter")) {  // (data, requires_grad, backward_hooks)
        if (args->n < 1 || args->items[0]->kind != PK_TENSOR) vm_fail(vm, "_rebuild_parameter without a tensor");
        return args->items[0];
    }
    // (func, type, args, state): a tensor with Python attributes (DeepSpeed's ds_id on ZeRO-3's
    // flat groups); the attributes and the subclass are dropped, the tensor is func(*args)
    if (!strcmp(fn->s, "torch._tensor._rebuild_from_type_v2")) {
        if (args->n != 4 || args->items[2]->kind != PK_TUPLE)
            vm_fail(vm, "_rebuild_from_type_v2 without (func, type, args, state)");
        if (depth >= PK_MAX_REBUILD_DEPTH)
            vm_fail(vm, "_rebuild_from_type_v2 nested more than %d deep", PK_MAX_REBUILD_DEPTH);
        return vm_reduce(vm, args->items[0], args->items[2], depth + 1);
    }
    if (!strcmp(fn->s, "collections.OrderedDict")) {
        if (args->n != 0) vm_fail(vm, "OrderedDict with %d constructor arguments (torch.save writes none)", args->n);
        return vm_new(vm, PK_DICT);
    }
    if (!strcmp(fn->s, "torch.Size")) {
        if (args->n != 1 || args->items[0]->kind != PK_TUPLE) vm_fail(vm, "torch.Size without a tuple of sizes");
        return args->items[0];
    }
    PkValue *o = vm_new(vm, PK_OBJECT);
    o->s = strdup(fn->s);
    if (!o->s) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    vm_add(vm, o, args);
    vm_add(vm, o, NULL);  // BUILD state
    return o;
}

// BUILD: obj.__setstate__(state), or obj.__dict__.update(state). Kept on opaque objects (a
// second dict state updates the first, into a new dict: the first may be shared); an
// OrderedDict's attributes (state_dict()'s _metadata) do not touch its items. A tensor's
// __setstate__ would replace its data, and other kinds have no state in Python: refused.
static void vm_build(Vm *vm, PkValue *obj, PkValue *state) {
    if (obj->kind == PK_DICT) return;
    if (obj->kind != PK_OBJECT)
        vm_fail(vm, "BUILD on a %s (torch.save never sets the state of one)", pk_kind_name(obj->kind));
    PkValue *old = obj->items[1];
    if (!old) {
        obj->items[1] = state;
        return;
    }
    if (old->kind != PK_DICT || state->kind != PK_DICT)
        vm_fail(vm, "a second BUILD on a %s object with a %s state (only dict states are merged)", obj->s,
                pk_kind_name(state->kind));
    PkValue *merged = vm_new(vm, PK_DICT);
    for (int i = 0; i < old->n; i += 2) vm_setitem(vm, merged, old->items[i], old->items[i + 1]);
    for (int i = 0; i < state->n; i += 2) vm_setitem(vm, merged, state->items[i], state->items[i + 1]);
    obj->items[1] = merged;
}

// GLOBAL "module\nname\n" as find_class resolves it: a dotted name is an attribute path only
// from protocol 4 on (getattr(module, "a.b") fails before).
static PkValue *vm_global(Vm *vm) {
    char buf[2 * PK_MAX_GLOBAL_NAME];
    size_t len = 0, name_at = 0;
    int lines = 0;
    while (lines < 2) {
        char c;
        vm_read(vm, &c, 1);
        if (len + 1 >= sizeof buf) vm_fail(vm, "a class name longer than %d bytes", PK_MAX_GLOBAL_NAME);
        if (c == '\0') vm_fail(vm, "a NUL byte in a class name");
        if (c == '\n') {
            lines++;
            c = lines == 1 ? '.' : '\0';
            if (lines == 1) name_at = len + 1;
        }
        buf[len++] = c;
    }
    if (name_at == 1 || buf[name_at] == '\0') vm_fail(vm, "an empty module or class name");
    if (vm->proto < 4 && strchr(buf + name_at, '.'))
        vm_fail(vm, "class name \"%s\" is dotted: protocol %d resolves no attribute path (Python refuses it)",
                buf + name_at, vm->proto);
    PkValue *g = vm_new(vm, PK_GLOBAL);
    g->s = strdup(buf);
    if (!g->s) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    return g;
}

static PkValue *vm_unicode(Vm *vm) {
    uint64_t n = vm_le(vm, 4);
    if (n > vm->end - vm->pos)
        vm_fail(vm, "a %llu-byte string runs past the end of the pickle (truncated)", (unsigned long long)n);
    PkValue *v = vm_new(vm, PK_STR);
    v->s = mallocCheck(n + 1);
    vm_read(vm, v->s, n);
    v->s[n] = '\0';
    size_t bad = vm_utf8_bad((const unsigned char *)v->s, n);
    if (bad < n)
        vm_fail(vm, "the %llu-byte string has %s at its byte %zu (%s)", (unsigned long long)n,
                v->s[bad] ? "malformed UTF-8" : "a NUL", bad,
                v->s[bad] ? "Python refuses it" : "not supported: names here end at a NUL");
    return v;
}

PkValue *pk_load(PkArena *a, FILE *f, const char *path, const char *where, uint64_t begin, uint64_t end,
                 uint64_t *stop_end) {
    Vm vm = {.a = a, .f = f, .path = path, .where = where, .begin = begin, .end = end, .pos = begin, .op = -1};
    if (end < begin) vm_fail(&vm, "the pickle ends (%llu) before it begins", (unsigned long long)end);
    if (fseeko(f, (off_t)begin, SEEK_SET) != 0) vm_fail(&vm, "cannot seek (%s)", strerror(errno));
    PkValue *result = NULL;
    while (!result) {
        vm.op = -1;
        vm.op_at = vm.pos - begin;
        unsigned char opb;
        vm_read(&vm, &opb, 1);
        vm.op = opb;
        switch (vm.op) {
        case OP_PROTO: {
            uint64_t p = vm_le(&vm, 1);
            if (p < 2 || p > PK_MAX_PROTOCOL) vm_fail(&vm, "protocol %llu (expected 2 to %d)", (unsigned long long)p, PK_MAX_PROTOCOL);
            vm.proto = (int)p;
            break;
        }
        case OP_STOP:
            if (vm.nmarks) vm_fail(&vm, "STOP inside an unfinished MARK");
            if (vm.sp != 1) vm_fail(&vm, "STOP with %zu values on the stack (expected 1)", vm.sp);
            result = vm.stack[0];
            break;
        case OP_MARK:
            if (vm.nmarks == vm.mcap) {
                if (vm.mcap >= PK_MAX_ITEMS) vm_fail(&vm, "more than %d open MARKs", PK_MAX_ITEMS);
                vm.mcap = vm.mcap ? vm.mcap * 2 : 16;
                vm.marks = reallocCheck(vm.marks, vm.mcap * sizeof *vm.marks);
            }
            vm.marks[vm.nmarks++] = vm.sp;
            break;
        case OP_NONE: vm_push(&vm, vm_constant(&vm, &a->none, PK_NONE, 0)); break;
        case OP_NEWTRUE: vm_push(&vm, vm_constant(&vm, &a->truth[1], PK_BOOL, 1)); break;
        case OP_NEWFALSE: vm_push(&vm, vm_constant(&vm, &a->truth[0], PK_BOOL, 0)); break;
        case OP_BININT:
        case OP_BININT1:
        case OP_BININT2: {
            PkValue *v = vm_new(&vm, PK_INT);
            if (vm.op == OP_BININT) v->i = (int32_t)(uint32_t)vm_le(&vm, 4);  // signed
            else v->i = (int64_t)vm_le(&vm, vm.op == OP_BININT1 ? 1 : 2);    // unsigned
            vm_push(&vm, v);
            break;
        }
        case OP_LONG1: {  // n-byte little-endian two's complement
            uint64_t n = vm_le(&vm, 1);
            if (n > 8) vm_fail(&vm, "a %llu-byte integer (at most 8 supported)", (unsigned long long)n);
            uint64_t u = n ? vm_le(&vm, (int)n) : 0;
            if (n && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~(uint64_t)0 << (8 * n);  // sign-extend
            PkValue *v = vm_new(&vm, PK_INT);
            v->i = (int64_t)u;
            vm_push(&vm, v);
            break;
        }
        case OP_BINFLOAT: {  // big-endian IEEE double
            unsigned char b[8];
            vm_read(&vm, b, 8);
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = (u << 8) | b[i];
            PkValue *v = vm_new(&vm, PK_FLOAT);
            memcpy(&v->f, &u, 8);
            vm_push(&vm, v);
            break;
        }
        case OP_BINUNICODE: vm_push(&vm, vm_unicode(&vm)); break;
        case OP_GLOBAL: vm_push(&vm, vm_global(&vm)); break;
        case OP_EMPTY_TUPLE: vm_push(&vm, vm_tuple(&vm, NULL, 0)); break;
        case OP_EMPTY_LIST: vm_push(&vm, vm_new(&vm, PK_LIST)); break;
        case OP_EMPTY_DICT: vm_push(&vm, vm_new(&vm, PK_DICT)); break;
        case OP_TUPLE1:
        case OP_TUPLE2:
        case OP_TUPLE3: {
            size_t n = (size_t)(vm.op - OP_TUPLE1 + 1);
            if (vm.sp - vm_floor(&vm) < n) vm_fail(&vm, "needs %zu values on the stack", n);
            vm.sp -= n;
            vm_push(&vm, vm_tuple(&vm, vm.stack + vm.sp, n));
            break;
        }
        case OP_TUPLE: {
            size_t k = vm_pop_mark(&vm);
            PkValue *t = vm_tuple(&vm, vm.stack + k, vm.sp - k);
            vm.sp = k;
            vm_push(&vm, t);
            break;
        }
        case OP_APPEND: {
            PkValue *v = vm_pop(&vm), *l = vm_top(&vm);
            if (l->kind != PK_LIST) vm_fail(&vm, "APPEND to a %s, not a list", pk_kind_name(l->kind));
            vm_add(&vm, l, v);
            break;
        }
        case OP_APPENDS: {
            size_t k = vm_pop_mark(&vm);
            PkValue *l = vm_below_mark(&vm, k);
            if (l->kind != PK_LIST) vm_fail(&vm, "APPENDS to a %s, not a list", pk_kind_name(l->kind));
            for (size_t i = k; i < vm.sp; i++) vm_add(&vm, l, vm.stack[i]);
            vm.sp = k;
            break;
        }
        case OP_SETITEM: {
            PkValue *v = vm_pop(&vm), *k = vm_pop(&vm);
            vm_setitem(&vm, vm_top(&vm), k, v);
            break;
        }
        case OP_SETITEMS: {
            size_t k = vm_pop_mark(&vm);
            if ((vm.sp - k) % 2) vm_fail(&vm, "an odd number of values (%zu) for key/value pairs", vm.sp - k);
            PkValue *d = vm_below_mark(&vm, k);
            for (size_t i = k; i < vm.sp; i += 2) vm_setitem(&vm, d, vm.stack[i], vm.stack[i + 1]);
            vm.sp = k;
            break;
        }
        case OP_REDUCE: {
            PkValue *args = vm_pop(&vm), *fn = vm_pop(&vm);
            vm_push(&vm, vm_reduce(&vm, fn, args, 0));
            break;
        }
        case OP_NEWOBJ: {  // cls.__new__(cls, *args): an opaque object
            PkValue *args = vm_pop(&vm), *cls = vm_pop(&vm);
            if (cls->kind != PK_GLOBAL) vm_fail(&vm, "NEWOBJ of a %s, not a class", pk_kind_name(cls->kind));
            if (args->kind != PK_TUPLE) vm_fail(&vm, "NEWOBJ arguments are a %s, not a tuple", pk_kind_name(args->kind));
            PkValue *o = vm_new(&vm, PK_OBJECT);
            o->s = strdup(cls->s);
            if (!o->s) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
            vm_add(&vm, o, args);
            vm_add(&vm, o, NULL);
            vm_push(&vm, o);
            break;
        }
        case OP_BUILD: {
            PkValue *state = vm_pop(&vm);
            vm_build(&vm, vm_top(&vm), state);
            break;
        }
        case OP_BINPERSID: vm_push(&vm, vm_persistent(&vm, vm_pop(&vm))); break;
        case OP_BINPUT: vm_memo_put(&vm, (uint32_t)vm_le(&vm, 1)); break;
        case OP_LONG_BINPUT: vm_memo_put(&vm, (uint32_t)vm_le(&vm, 4)); break;
        case OP_BINGET: vm_memo_get(&vm, (uint32_t)vm_le(&vm, 1)); break;
        case OP_LONG_BINGET: vm_memo_get(&vm, (uint32_t)vm_le(&vm, 4)); break;
        default:
            vm_fail(&vm, "not supported (this reader implements the opcodes torch.save's protocol-2 pickles use)");
        }
    }
    if (stop_end) *stop_end = vm.pos;
    free(vm.stack);
    free(vm.marks);
    hidx_free(&vm.memo_index);
    free(vm.memo_keys);
    free(vm.memo_vals);
    pk_keys_free(&vm.keys);
    return result;
}

void pk_arena_free(PkArena *a) {
    for (size_t i = 0; i < a->n; i++) {
        PkValue *v = a->all[i];
        if (v->kind == PK_TENSOR) {
            free(v->shape);
            free(v->stride);
        }
        if (v->index) {
            hidx_free(v->index);
            free(v->index);
        }
        free(v->s);
        free(v->items);
        free(v);
    }
    free(a->all);
    memset(a, 0, sizeof *a);
}

const PkValue *pk_dict_get(const PkValue *d, const char *key) {
    if (!d || d->kind != PK_DICT || !d->index) return NULL;
    HashProbe p;
    for (size_t pos = hidx_first(d->index, pk_key_hash_str(key), &p); pos != SIZE_MAX; pos = hidx_next(&p)) {
        const PkValue *k = d->items[2 * pos];
        if (k->kind == PK_STR && !strcmp(k->s, key)) return d->items[2 * pos + 1];
    }
    return NULL;
}

const PkValue *pk_dict_get_int(const PkValue *d, int64_t key) {
    if (!d || d->kind != PK_DICT || !d->index) return NULL;
    HashProbe p;
    for (size_t pos = hidx_first(d->index, pk_key_hash_int(key), &p); pos != SIZE_MAX; pos = hidx_next(&p))
        if (pk_key_equals_int(d->items[2 * pos], key)) return d->items[2 * pos + 1];
    return NULL;
}
