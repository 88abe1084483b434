// data/tokenize.h: T5 input/label tokenization as Hugging Face gives it for T5 checkpoints:
// sentencepiece ids of prefix + text, then </s> (id 1).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "spm.h"

#define T5_PAD_ID 0
#define T5_EOS_ID 1

// Ids of prefix + text (the two joined into one string first, as HF tokenizes
// `prefix + line`; encoding them separately gives different ids), then </s>. Stored at
// (*ids)[0..count), *ids grown with realloc (*cap its capacity in ids). Returns count.
// prefix may be NULL or "". No truncation here: collation keeps the first max_length-1
// ids and puts </s> back at the end, which equals HF's truncation of the full sequence
// (HF truncates the sentencepiece ids to max_length-1 before adding </s>).
int tokenize_t5(const Spm *spm, const char *prefix, const char *text, size_t len, int32_t **ids, size_t *cap);
