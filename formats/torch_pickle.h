// formats/torch_pickle.h: a small pickle VM for the pickles torch.save writes (protocol 2):
// state dicts of HF pytorch_model.bin files and DeepSpeed checkpoints. It builds a tree of
// plain values (None, bool, int, float, str, tuple, list, dict) plus three torch kinds:
// a storage reference (the `storage` persistent id), a tensor (_rebuild_tensor_v2 over a
// storage) and an opaque object (any other class: its name, constructor args and BUILD
// state are kept, nothing is run). Only the opcodes these files use are implemented; any
// other opcode is refused by name, with the file and byte offset.
// Bytes are read from a FILE range, so a pickle is never held whole in memory. The file is
// untrusted: every length, count and index in it is checked, dict keys and the memo are
// hashed (time linear in the pickle's size; memory too, whatever index a memo PUT names),
// and nothing recurses deeper than a fixed bound.
#pragma once
#include <stdint.h>
#include <stdio.h>

// torch storage element types (the legacy storage class names torch.save pickles).
typedef enum {
    TORCH_F32 = 0,  // FloatStorage
    TORCH_F16,      // HalfStorage
    TORCH_BF16,     // BFloat16Storage
    TORCH_F64,      // DoubleStorage
    TORCH_I64,      // LongStorage
    TORCH_I32,      // IntStorage
    TORCH_I16,      // ShortStorage
    TORCH_I8,       // CharStorage
    TORCH_U8,       // ByteStorage
    TORCH_BOOL,     // BoolStorage
    TORCH_DTYPE_COUNT
} TorchDtype;

const char *torch_dtype_name(TorchDtype d);  // "float32", "bfloat16", ...
int torch_dtype_size(TorchDtype d);

#define PK_MAX_DIMS 8

typedef enum {
    PK_NONE = 0,
    PK_BOOL,
    PK_INT,
    PK_FLOAT,
    PK_STR,
    PK_TUPLE,
    PK_LIST,
    PK_DICT,     // also collections.OrderedDict; keys at items[2k], values at items[2k+1]
    PK_GLOBAL,   // a class or function named by GLOBAL: s = "module.name"
    PK_OBJECT,   // opaque instance: s = class name, items[0] = args (tuple), items[1] = BUILD state or NULL
    PK_STORAGE,  // persistent id ('storage', type, key, location, numel[, view]): s = key
    PK_TENSOR,   // _rebuild_tensor_v2(storage, offset, size, stride, ...)
} PkKind;

typedef struct PkValue PkValue;
struct HashIndex;
struct PkValue {
    PkKind kind;
    int n, cap;       // items
    int depth;        // PK_TUPLE: 1 + the deepest tuple among its items (keys nest to a bound)
    char *s;          // PK_STR (NUL-terminated UTF-8, no NUL inside), PK_GLOBAL, PK_OBJECT, PK_STORAGE key
    PkValue **items;  // PK_TUPLE, PK_LIST, PK_DICT, PK_OBJECT
    union {
        int64_t i;  // PK_INT, PK_BOOL
        double f;   // PK_FLOAT
        struct {    // PK_STORAGE
            TorchDtype dtype;
            int legacy_id;         // the persistent id had a 6th item (view metadata: the legacy format's)
            uint64_t numel;        // elements of the storage (of the view, for a view) as pickled
            uint64_t root_numel;   // elements of the root storage as pickled
            uint64_t view_offset;  // legacy storage views: first element of the view in the root storage
        };
        struct {  // PK_TENSOR
            PkValue *storage;
            uint64_t storage_offset;  // in elements
            int ndim;
            int64_t *shape, *stride;  // ndim each
        };
    };
    // As a dict key (formats/torch_pickle_key.c): the first value seen equal to this one as
    // Python's == says (1 == 1.0 == True), and the hash of that value.
    PkValue *canon;
    uint64_t hash;
    struct HashIndex *index;  // PK_DICT: pair k under its key's hash
};

// Every value of one or more pickles of a file; freed together. None, True, False and the
// empty tuple are one value each (as in Python), made on first use.
typedef struct {
    PkValue **all;
    size_t n, cap;
    PkValue *none, *truth[2], *empty_tuple;
} PkArena;

// Runs the pickle at file offset [begin, end) of f until STOP; returns its value (owned by
// the arena) and stores the offset after STOP in *stop_end. `path` and `where` (the
// pickle's name inside the file, e.g. "archive/data.pkl", or NULL) go into messages; byte
// offsets in messages are relative to `begin`. A malformed pickle is a one-line error.
PkValue *pk_load(PkArena *a, FILE *f, const char *path, const char *where, uint64_t begin, uint64_t end,
                 uint64_t *stop_end);
void pk_arena_free(PkArena *a);

// Look-ups for callers, by hash. NULL when absent or of another kind. A key stored more
// than once holds its last value, as a Python dict does.
const PkValue *pk_dict_get(const PkValue *dict, const char *key);       // str keys
const PkValue *pk_dict_get_int(const PkValue *dict, int64_t key);       // int keys (and equal bools, floats)
const char *pk_kind_name(PkKind k);
