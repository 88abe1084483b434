// data/text_reader.h: stream the examples of one split out of its text files, as the
// Hugging Face scripts read them:
//   TEXT_PAIRS  X.source / X.target, line i of one is the translation of line i of the
//               other (examples/legacy/seq2seq/finetune_trainer.py's data_dir layout);
//   TEXT_JSONL  one JSON object per line, {"translation": {"en": "...", "ro": "..."}}
//               (examples/pytorch/translation/run_translation.py's --train_file).
// Line by line, never a whole file in memory, from regular files only (a pipe, FIFO or
// device is refused: each file is read twice, counted then read). Lines end as Python's
// universal newlines end them: "\n", "\r\n" and a lone "\r" (CR-only files read line by
// line; "a\r\r\nb" is "a", "", "b"); a last line without an end is an ordinary line.
// max_examples takes the first N examples, as HF's --max_train_samples / --n_train do.
//
// Every problem is a one-line error naming the file and line and saying what to fix
// (t5_fail, exits): a missing file or one that is not a regular file; .source and
// .target with different line counts (checked over the whole files when the reader opens,
// before any example is read);
// an empty line or an empty text (almost always a misaligned parallel corpus);
// invalid UTF-8 (with the byte offset in the line); a malformed JSON line; a JSON line
// without "translation" or without a language key (listing the keys it has).
#pragma once
#include <stddef.h>

#include "dataset.h"

typedef struct TextReader TextReader;

typedef struct {
    const char *src, *tgt;  // NUL-terminated, without prefix; valid until the next call
    size_t src_len, tgt_len;
    long line;              // 1-based line number of this example
} TextExample;

// Open a split's files and count its lines (the count check of TEXT_PAIRS happens here).
TextReader *text_reader_open(const TextSpec *spec);
// Examples the reader will yield: the line count, capped by max_examples.
long text_reader_count(const TextReader *r);
// Next example: 1 and *ex filled, or 0 at the end.
int text_reader_next(TextReader *r, TextExample *ex);
void text_reader_close(TextReader *r);
