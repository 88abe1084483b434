// formats/torch_file.h: files written by torch.save, read without torch: the zip format
// (torch >= 1.6: an uncompressed zip, ZIP64 when large, holding PREFIX/data.pkl and one
// PREFIX/data/KEY file per storage) and the legacy format (torch < 1.6, as hub T5 .bin files
// were written: a magic-number pickle, the protocol version, sys_info, the main pickle, the
// list of storage keys, then each storage as an int64 element count and its raw bytes).
// The main pickle becomes a value tree (formats/torch_pickle.h); tensors stay in the file and
// are read on demand, converted to fp32. Any problem is a one-line error naming the file.
// Names (zip entries, storage keys) are looked up by hash; every offset and size from the
// file is checked without overflow against the file's size, and each storage must hold
// exactly the bytes its pickled type and element count say (as torch checks on load).
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "../common/hash_index.h"
#include "safetensors.h"
#include "torch_pickle.h"

typedef struct {
    char *key;
    TorchDtype dtype;   // as the pickle names it (every id of one key agrees)
    uint64_t numel;     // elements of the root storage as pickled
    uint64_t offset;    // file offset of the storage's first byte
    uint64_t bytes;     // bytes the file holds for it: numel * the dtype's size
    int found;          // its bytes were located in the file
} TorchStorageRec;

typedef struct {
    char *path;
    FILE *f;
    int legacy;        // 1: the pre-1.6 format
    PkArena arena;
    PkValue *root;     // the value of the main pickle
    TorchStorageRec *storages;
    int nstorages;
    HashIndex storage_index;  // storages by key
} TorchFile;

// A contiguous tensor inside the file.
typedef struct {
    TorchDtype dtype;
    int ndim;
    int64_t shape[PK_MAX_DIMS];
    uint64_t numel;
    uint64_t offset;  // file offset of element 0
} TorchTensor;

void torch_file_open(TorchFile *tf, const char *path);
void torch_file_close(TorchFile *tf);
// Resolves a PK_TENSOR of tf's pickle: its storage exists, holds the elements, and the
// tensor is contiguous (views with offsets are fine; strided views are refused). `name`
// (the state-dict key or a path of keys) goes into messages.
void torch_file_tensor(const TorchFile *tf, const PkValue *v, const char *name, TorchTensor *out);
// Elements [first, first + n) of a float tensor (float32, float16, bfloat16) as fp32.
void torch_file_read_f32(const TorchFile *tf, const TorchTensor *t, const char *name, uint64_t first, uint64_t n,
                         float *dst);

// An HF pytorch_model.bin (a state dict {name: tensor}) opened as an StFile whose tensors
// point into the .bin (data_start 0, begin/end absolute offsets), so that st_read_f32 and
// everything built on StFile read it as it reads safetensors. Tied weights (two names,
// one storage) are two entries over the same bytes. st_close closes it.
void torch_bin_open(StFile *st, const char *path);
