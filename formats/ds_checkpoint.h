// formats/ds_checkpoint.h: DeepSpeed ZeRO-2/3 checkpoints read without DeepSpeed or torch
// (layout of DeepSpeed 0.19: DIR/latest names the tag; DIR/TAG/*_model_states.pt and
// *_optim_states.pt, one optim file per data-parallel rank). The full fp32 parameters are
// reassembled from the ranks' partitions exactly as deepspeed/utils/zero_to_fp32.py does
// (ZeRO-2: each group's rank partitions concatenated, parameters back to back; ZeRO-3: every
// parameter split over the ranks in ceil(numel / world_size) pieces, padding at the end), and
// so are the Adam moments (exp_avg, exp_avg_sq of the base optimizer over the same flat
// partitions). Frozen parameters and buffers come as zero_to_fp32 gives them (no moments);
// shared parameters (tied weights) are aliases.
#pragma once
#include <stdint.h>

#include "torch_file.h"

typedef enum { DS_TRAINABLE = 0, DS_FROZEN, DS_BUFFER } DsTensorKind;

typedef struct {
    char *name;           // HF state-dict name
    DsTensorKind kind;
    const char *alias_of; // shared params: the name of the tensor holding the data (else NULL)
    int ndim;
    int64_t shape[PK_MAX_DIMS];
    uint64_t numel;
    // where the data is: trainable: in the per-rank flat space (ZeRO-2: group, offset in the
    // group's concatenated partitions; ZeRO-3: offset in each rank's flat sub-groups); frozen
    // and buffers: the pickled value(s) (one per model-states file for ZeRO-3 frozen)
    int group;
    uint64_t offset;
    const PkValue **values;
} DsTensor;

typedef struct {
    char *dir;           // DIR/TAG
    int zero_stage;      // 2 or 3 (1 reads as 2, as zero_to_fp32 does)
    int world_size;
    TorchFile *model_files;  // (n_model_files): 1 for ZeRO-2, world_size for ZeRO-3
    int n_model_files;
    TorchFile *optim_files;  // (world_size) in rank order
    int n_groups;            // flat fp32 groups per rank (ZeRO-3: sub-groups)
    TorchTensor *fp32;       // (world_size, n_groups)
    TorchTensor *exp_avg, *exp_avg_sq;  // (world_size, n_groups), when has_moments
    int has_moments;
    uint64_t *group_offset;  // ZeRO-3: (n_groups + 1) offsets of the sub-groups in a rank's flat space
    DsTensor *tensors;
    int count;
    // counters and the loss scaler, as the files hold them (each a number of the right kind;
    // their ranges are what import-deepspeed checks, against the rules of a resume)
    int has_global_steps;    // the model states' "global_steps" is there
    long global_steps, skipped_steps;
    long optimizer_step;     // the base optimizer's "step" (-1 when it has none)
    long scaler_dynamic;     // the scaler's "dynamic" (0 when it has none)
    double scaler_cur_scale; // 1 when the checkpoint has no scaler
    long scaler_cur_iter, scaler_last_overflow_iter;
    int has_hysteresis;      // a static scaler has no "cur_hysteresis"
    long scaler_cur_hysteresis;
    char ds_version[32];
} DsCheckpoint;

// Opens DIR/TAG (tag NULL: the one DIR/latest names) and checks it as zero_to_fp32 does
// (one optim file per rank, every element of the flat groups consumed). The tag is a folder
// name of DIR (not "", ".", "..", nor a path). Errors are one line naming the file.
void ds_checkpoint_open(DsCheckpoint *c, const char *dir, const char *tag);
void ds_checkpoint_close(DsCheckpoint *c);
const DsTensor *ds_checkpoint_find(const DsCheckpoint *c, const char *name);
// The tensor's fp32 values (numel floats); an alias reads its target.
void ds_checkpoint_read(const DsCheckpoint *c, const DsTensor *t, float *dst);
// exp_avg (which 0) or exp_avg_sq (which 1) of a trainable tensor (needs has_moments).
void ds_checkpoint_read_moment(const DsCheckpoint *c, const DsTensor *t, int which, float *dst);
