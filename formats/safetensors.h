// formats/safetensors.h: streaming reader and writer for the safetensors format
// (8-byte little-endian header length, JSON header {name: {dtype, shape,
// data_offsets}}, optional "__metadata__", then the raw tensor bytes).
// The header is validated in full before any tensor is read: dtype known, shape
// matches the byte range, ranges inside the file, in order, non-overlapping.
// Tensors are read and written in chunks, so a file is never held in memory whole.
// Writes go to "<path>.tmp" and are renamed into place on close: no half-written file.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "../common/fileio.h"

typedef enum { ST_F32 = 0, ST_F16, ST_BF16, ST_I64, ST_I32 } StDtype;

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end;  // byte range relative to the data section
} StTensor;

struct cJSON;

typedef struct {
    char *path;
    FILE *f;
    uint64_t data_start;  // file offset of the data section
    StTensor *tensors;
    int count;
    struct cJSON *metadata;  // "__metadata__" (an object of strings), or NULL: st_metadata reads it
} StFile;

// Open and validate. Any problem is a one-line error naming the file; exits non-zero.
void st_open(StFile *st, const char *path);
void st_close(StFile *st);
// Tensor by name, or NULL.
const StTensor *st_find(const StFile *st, const char *name);
// The "__metadata__" string under key, or NULL (no such key, or no metadata).
const char *st_metadata(const StFile *st, const char *key);
// Read a float tensor (F32/F16/BF16) converting to fp32 into dst (numel floats).
void st_read_f32(const StFile *st, const StTensor *t, float *dst);
// Read elements [first, first + n) of a float tensor (F32/F16/BF16) as fp32 into dst (n
// floats): one seek and one read of those bytes only (a rank reads its piece of a shard).
// A range outside the tensor is an error naming the file and tensor.
void st_read_f32_range(const StFile *st, const StTensor *t, uint64_t first, uint64_t n, float *dst);
// Read an integer tensor (I64/I32) converting to int32 into dst (numel ints); values
// outside int32 are an error.
void st_read_i32(const StFile *st, const StTensor *t, int32_t *dst);
const char *st_dtype_name(StDtype d);
int st_dtype_size(StDtype d);

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} StTensorDesc;

typedef struct {
    AtomicFile file;       // written to "<path>.tmp", renamed on close (common/fileio.h)
    FILE *f;
    const StTensorDesc *descs;
    int count;
    int next;              // index of the tensor being written
    uint64_t written;      // bytes of tensor `next` written so far
    int checksum;          // st_writer_open_checksummed: crc32c and bytes follow every byte written
    uint32_t crc32c;       //   CRC-32C of the whole file (header included), as file_crc32c reads it back
    uint64_t bytes;        //   its size
} StWriter;

// Write the header for `count` tensors (data in that order); metadata_json may be NULL.
// The writer keeps `descs` (and their names): they must stay alive until st_writer_close.
// (else a JSON object of string values, e.g. {"format":"pt"}).
void st_writer_open(StWriter *w, const char *path, const StTensorDesc *descs, int count, const char *metadata_json);
// The same, keeping the file's CRC-32C and size in w->crc32c / w->bytes as it is written
// (a checkpoint shard's index records them: no second read of the file); read them before
// st_writer_close, which clears the writer.
void st_writer_open_checksummed(StWriter *w, const char *path, const StTensorDesc *descs, int count,
                                const char *metadata_json);
// Append n fp32 values of the current tensor, converting to its dtype; may be called
// several times per tensor (streaming). Moves to the next tensor when one is complete.
void st_writer_write_f32(StWriter *w, const float *src, uint64_t n);
// Same for integer tensors.
void st_writer_write_i32(StWriter *w, const int32_t *src, uint64_t n);
// Check that every tensor was written in full, flush, and rename into place.
void st_writer_close(StWriter *w);

// fp16 / bf16 conversions (round to nearest even), shared with the rest of the code.
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);
