// deepspeed/ds_source.h: where a --deepspeed value's JSON comes from. HF and accelerate
// (accelerate/utils/deepspeed.py, HfDeepSpeedConfig) take, in this order: the path of an
// existing file; else the value itself as JSON text; else the value as urlsafe base64 of JSON
// text. train_t5 takes the same three, in the same order (docs/TRAINER.md, "--deepspeed").
#pragma once
#include <stddef.h>

// Labels the config is named by in messages when it is not a file.
#define DS_SOURCE_JSON_LABEL "--deepspeed (JSON text)"
#define DS_SOURCE_BASE64_LABEL "--deepspeed (base64 of JSON text)"

// `arg` as given to --deepspeed. Returns what messages call the config: `arg` itself when it
// names an existing path (*text = NULL: the loader reads the file, and says what is wrong with
// it) or when it is neither JSON text nor base64 of a JSON object (*text = NULL: the loader's
// "cannot open" names it); else one of the labels above, with *text = the JSON text (malloc'd,
// the caller frees it).
const char *ds_source_resolve(const char *arg, char **text);

// Standard or urlsafe base64 (both alphabets, '=' padding optional, no other byte) decoded into
// a malloc'd NUL-terminated buffer; NULL when `s` is not base64. *len = the decoded length.
char *ds_source_base64_decode(const char *s, size_t *len);
