// data/batch_file.h: a batch stored as a safetensors file with int tensors
// input_ids (B,S), attention_mask (B,S), labels (B,T) and optionally
// decoder_input_ids (B,T) (else labels shifted right). The fixture generator writes
// these; `train_t5 loss` and `train_t5 overfit` read them.
#pragma once
#include "../model/t5.h"

typedef struct {
    T5Batch batch;
    int *input_ids, *attention_mask, *labels, *decoder_input_ids;  // owned storage
} BatchFile;

// Ids and labels are checked against vocab_size (an error names the file and tensor).
void batch_file_load(BatchFile *bf, const char *path, int vocab_size, int decoder_start_id, int pad_id);
void batch_file_free(BatchFile *bf);
