// common/json_read.h: every JSON document train_t5 reads, read as Python's json reads it, or
// refused in one line naming the file and the key.
//
// cJSON alone reads some texts differently from Python's json.loads (transformers, DeepSpeed,
// HF datasets), and a value read differently is a different model or run, silently:
//  - a duplicate key: cJSON_GetObjectItem finds the FIRST, a Python dict keeps the LAST;
//  - "\u0000" in a string: the C string ends there ("Hello\u0000 world" reads as "Hello",
//    a tensor "shared.weight\u0000x" as "shared.weight");
//  - text that Python refuses: something after the document, a byte-order mark, raw control
//    characters (in strings, or as whitespace), numbers such as 01 or 1., invalid UTF-8.
// json_read_parse keeps Python's meaning for the first, refuses the second (a C string cannot
// hold U+0000) and reads the third as Python does: malformed JSON (invalid UTF-8: its own error,
// as Python's decoder has).
//
// Duplicate keys, per kind of file (JsonDupRule):
//  - JSON_DUP_LAST where the reader of reference is Python's json.load (config.json,
//    generation_config.json, model.safetensors.index.json, trainer_state.json,
//    all_results.json): the last value, at the first one's place (a dict's order), with a
//    NOTICE line on stderr naming the key, since the file may not say what its writer meant;
//  - JSON_DUP_REFUSE where the reader of reference refuses them: DeepSpeed's config
//    (dict_raise_error_on_duplicate_keys), safetensors headers (the Rust library), JSON lines
//    data (HF datasets' pyarrow reader: "specified twice"), and the files only train_t5 writes
//    (zero_index.json, zero_state.json), where a duplicate means the file was edited.
// Python's NaN / Infinity / -Infinity stay malformed JSON, as cJSON reads them (the plot of a
// trainer_state.json rewrites them as null first: trainer/log_history.c).
#pragma once
#include <stddef.h>

struct cJSON;

typedef enum {
    JSON_DUP_LAST,    // Python's json: the last of duplicate keys wins (and a NOTICE)
    JSON_DUP_REFUSE,  // a duplicate key is an error naming it
} JsonDupRule;

// Parse text[0..len); text[len] must be a NUL (read_text_file and getline give one). `where` names the document in messages (a
// path, or "path:line" for a JSON line). Malformed JSON (as Python's json sees it) returns NULL
// with *err_at (when not NULL) the byte offset of the error, for the caller's own message;
// the other refusals above (a duplicate key under JSON_DUP_REFUSE, "\u0000", a NUL byte,
// invalid UTF-8) are one error line here. The caller cJSON_Deletes the result.
struct cJSON *json_read_parse(const char *text, size_t len, const char *where, JsonDupRule dups, size_t *err_at);

// After json_read_parse returned NULL: what Python's json refuses there that cJSON accepts
// ("extra text after the JSON document", "a UTF-8 byte-order mark", ...), or NULL for a syntax
// error that cJSON found itself.
const char *json_read_error_what(void);

// A whole file through read_text_file and json_read_parse: NULL with errno when it cannot be
// opened; a syntax error is one line "PATH: malformed JSON at line L, column C; HINT: hint".
struct cJSON *json_read_file(const char *path, JsonDupRule dups, const char *hint);
