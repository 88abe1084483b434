// data/splits.h: where each split's examples come from, shared by `train_t5 prepare`
// and the trainer. Two text layouts (finetune_trainer.py's --data_dir with
// {train,val,test}.{source,target}; run_translation.py's JSON lines files) plus the
// prepared form: a --data_dir holding {train,val,test}.t5ds from `train_t5 prepare`.
// Text is tokenized once into a cache file keyed by its content (dataset_cache_path).
#pragma once
#include "dataset.h"
#include "spm.h"

typedef enum { SPLIT_TRAIN = 0, SPLIT_VAL, SPLIT_TEST, SPLIT_COUNT } Split;

typedef struct {
    const char *data_dir;
    const char *train_file, *validation_file, *test_file;  // JSON lines
    const char *source_lang, *target_lang;
    const char *task;           // translation_X_to_Y, or NULL
    const char *source_prefix;  // overrides the task's prefix; NULL = from task
    int n[SPLIT_COUNT];         // first-N selection per split, -1 = all
} DataArgs;

const char *split_name(Split s);  // "train", "val", "test"

// T5's source prefix for a task name ("translation_en_to_ro" ->
// "translate English to Romanian: "). An unknown task is an error listing the known ones.
const char *data_task_prefix(const char *task);
// The prefix in effect: --source_prefix, else the task's, else "".
const char *data_source_prefix(const DataArgs *a);

// 1 if the args name data for this split (files present for --data_dir).
int data_split_available(const DataArgs *a, Split s);
// The text of a split as a TextSpec (strings owned by *spec_storage, free with free()).
void data_split_spec(const DataArgs *a, Split s, TextSpec *spec, char **spec_storage);
// Open a split: DATA_DIR/<split>.t5ds if there, else the cached tokenization of its text
// (made now when missing; cache_dir NULL = ~/.cache/train_t5/datasets).
void data_open_split(const DataArgs *a, Split s, const Spm *spm, const char *cache_dir, Dataset *ds);
