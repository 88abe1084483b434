// data/spm.h: a small C API over libsentencepiece (the C++ shim is data/spm_shim.cc; the
// rest of the project is C). Tokenization as Hugging Face gives for T5 checkpoints:
// sentencepiece ids, then </s> (id 1) appended by the caller (data/tokenize.c), pad 0.
// Ids >= the piece count (32000 for T5) are the 100 <extra_id_N> sentinels HF adds
// (32099 = <extra_id_0>); the model's vocab (32128) is padded past them.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct Spm Spm;

// Load a spiece.model file, checked first for what libsentencepiece trusts (data/spm_check.h).
// Any problem is a one-line error naming the file; exits. No function here lets a C++
// exception out (std::bad_alloc and the rest become one-line errors).
Spm *spm_load(const char *path);
void spm_free(Spm *spm);
// Number of sentencepiece pieces (32000 for T5), not counting the extra ids.
int spm_piece_count(const Spm *spm);
// Encode UTF-8 text (len bytes, not NUL-terminated) to ids, stored at (*ids)[0..n) (the
// buffer grown with realloc, with room for one more id; *cap is its capacity in ids).
// Returns n (no </s>).
int spm_encode(const Spm *spm, const char *text, size_t len, int32_t **ids, size_t *cap);
// Decode ids to UTF-8 text as HF's decode(skip_special_tokens=True): the special ids
// (pad 0, </s> 1, <unk> 2) and the extra ids (>= piece count) are dropped, the rest
// decoded by sentencepiece. Returns a malloc'd NUL-terminated string. An id outside
// [0, 32128) (the piece count plus 100, rounded up to 128) is an error (exits).
char *spm_decode(const Spm *spm, const int32_t *ids, int n);
// A hash of the model file's bytes (for dataset cache keys).
uint64_t spm_model_hash(const Spm *spm);
