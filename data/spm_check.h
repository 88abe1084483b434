// data/spm_check.h: check the bytes of a spiece.model (a sentencepiece ModelProto) for what
// libsentencepiece trusts without checking, before data/spm_shim.cc hands them to it.
// The library reads the normalizer's precompiled_charsmap (a darts-clone double-array
// trie, then the NUL-terminated replacement strings) with no bounds check: a damaged trie
// makes Normalizer::NormalizePrefix read outside the blob (SIGSEGV) or overrun its 32-entry
// result array. Pieces with a NUL byte reach darts-clone as C strings (an exception, or two
// pieces made one). So, walking the protobuf wire format by hand (no generated code):
//   - the wire format itself: every field complete, lengths inside their message;
//   - ModelProto.pieces (1): a non-empty piece without NUL bytes, a finite score, a known
//     type (NORMAL .. BYTE); trainer_spec (2): a known model_type (UNIGRAM .. CHAR);
//   - normalizer_spec (3) and denormalizer_spec (5): precompiled_charsmap = <trie bytes,
//     4-byte little-endian><trie units><replacement strings>; the trie size a multiple of 4
//     inside the blob; from the root, every reachable unit's 256-unit block of children
//     inside the trie, no cycle, at most 32 matches along any key (the library's result
//     array), each match's string offset inside the strings region and NUL-terminated there.
// Every occurrence of a field is checked (protobuf merges repeated messages, the last
// scalar wins), so the one the library ends up with was checked too.
#pragma once
#include <stddef.h>

// 0: the bytes are safe to hand to libsentencepiece. -1: why (cap bytes, one line, no
// file name) says what is wrong and where ("normalizer_spec.precompiled_charsmap: ...").
int spm_check_model(const unsigned char *bytes, size_t n, char *why, size_t cap);
