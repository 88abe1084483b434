// common/utf8.h: strict UTF-8 validation for the text readers and JSON files (sentencepiece would take
// invalid bytes silently and give ids HF never produces: HF reads text as Python str).
#pragma once
#include <stddef.h>

// 1 if s[0..len) is well-formed UTF-8 (Unicode Table 3-7: no overlong forms, no
// surrogates U+D800..U+DFFF, nothing above U+10FFFF, no truncated sequence), else 0 with
// *bad_offset (when not NULL) set to the byte offset where the bad sequence starts.
// NUL bytes are valid UTF-8 (U+0000); readers that care reject them themselves.
int utf8_valid(const char *s, size_t len, size_t *bad_offset);
