// model/hf_dir.h: Hugging Face model directories in and out.
// Load: config.json + model.safetensors or pytorch_model.bin (tied or untied head; shared.weight may be
// stored as encoder.embed_tokens.weight / decoder.embed_tokens.weight instead) into a
// flat fp32 buffer. Save: config.json + model.safetensors that
// T5ForConditionalGeneration.from_pretrained loads.
// Every problem (missing file, bad header, missing tensor, shape or dtype mismatch) is
// a one-line error naming the file, the tensor, expected vs found.
#pragma once
#include "config.h"
#include "params.h"
#include "../formats/safetensors.h"

// Resolve --model: a directory with config.json, or a preset name. Fills cfg and
// returns 1 if there are weights to load (a directory), 0 for a bare preset.
int hf_resolve_model(const char *model_arg, T5Config *cfg);

// Untied head test: 1 when the file holds an lm_head.weight that differs from the
// stored embedding (hub T5 1.1 / FLAN); an lm_head.weight equal to shared.weight, or the
// only copy of the embedding, counts as tied (what transformers' tie_weights does).
// Call it first, set cfg->untied_lm_head, build the layout, then hf_load_weights().
int hf_probe_untied(const char *dir);
// dir holds a weights file weights_open would read (model.safetensors, its sharded index, or
// pytorch_model.bin / its index).
int hf_has_weights_file(const char *dir);
// The file (name inside dir) the weights load from: model.safetensors,
// model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json; NULL if none.
const char *hf_weights_file(const char *dir);
// Load dir/model.safetensors (or a sharded model.safetensors.index.json, or, when neither is
// there, pytorch_model.bin or its sharded index) into params (lay->total floats).
void hf_load_weights(const char *dir, const T5Config *cfg, const ParamLayout *lay, float *params);

// Save config.json + model.safetensors into dir (created if missing) with the tensors
// in `dtype` (ST_F32, ST_F16 or ST_BF16).
void hf_save_model(const char *dir, const T5Config *cfg, const ParamLayout *lay, const float *params, StDtype dtype);

// The same, streamed (a checkpoint gathers one tensor at a time; export reads one at a
// time): config.json is written now, then dir/<file> (file NULL: model.safetensors) is
// opened for the tensors lay->specs[first, last) in `dtype`; write each whole, in layout
// order, with st_writer_write_f32, then st_writer_close and free the returned descriptions.
// A value the dtype cannot hold is the caller's to refuse (hf_check_tensor), before close.
StTensorDesc *hf_save_begin(const char *dir, const char *file, const T5Config *cfg, const ParamLayout *lay,
                            int first, int last, StDtype dtype, StWriter *w);
// config.json alone (tie_word_embeddings as the layout is: a separate lm_head.weight means untied).
void hf_save_config(const char *dir, const T5Config *cfg, const ParamLayout *lay);
// 1 when every value of tensor i (vals, its numel floats) is finite and within dtype's range;
// else 0 with *at the first element that is not.
int hf_check_tensor(const ParamLayout *lay, int i, const float *vals, StDtype dtype, size_t *at);
