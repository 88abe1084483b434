// zero/checkpoint.h: the ZeRO part of a training checkpoint, written by every rank in
// parallel and read back by ranges, so that a run resumes exactly where it stopped (HF's
// --resume_from_checkpoint) at any world size, stage and offload setting, and no rank ever
// holds more than its own partition plus one tensor. Layout of a checkpoint directory D
// (DeepSpeed's: a `latest` file naming a tag directory of per-rank files):
//   D/global_stepN/rank_RRRRR.safetensors   one per rank of the saving run: "master",
//                       "exp_avg", "exp_avg_sq" (fp32, 1-D) over that rank's range
//                       [begin, end) of the flat parameter space (zero/partition.h; at
//                       stage 0, where every rank holds everything, the same split, so the
//                       ranks still write in parallel); its __metadata__ says what it is: rank,
//                       world size, [begin, end), global step, parameter count, save_id
//   D/global_stepN/zero_index.json           rank 0: world size, stage, the parameter count,
//                       optimizer step, loss scaler, global step, the save's random save_id,
//                       and per shard its file, [begin, end), byte size and CRC-32C
//                       (common/crc32c.h)
//   D/latest            "global_stepN", written LAST, after a barrier: a directory without it
//                       is a half-written checkpoint and is never resumed
// Every reader checks each shard's identity against the index, and the index's step against
// the tag directory's and trainer_state.json's: a shard swapped, renamed, or of another save
// or run is refused naming the file and the field. An index of version 1 (shards that carried
// their range only) still loads, with a NOTICE.
// Checkpoints written before the shards (optimizer.safetensors with the moments whole,
// zero_state.json) still load, each rank reading only its range of the moments.
// docs/TRAINER.md ("Checkpoint format") walks through it.
#pragma once
#include "../optim/loss_scaler.h"
#include "zero.h"

#define ZERO_CKPT_LATEST "latest"
#define ZERO_CKPT_INDEX "zero_index.json"
#define ZERO_CKPT_TAG_PREFIX "global_step"  // the tag directory: global_stepN

// Collective: every rank writes its shard into dir/global_step<global_step>/ (created
// here), rank 0 the index. `latest` is not written: zero_save_latest, once every other file
// of the checkpoint is complete. node_local (DeepSpeed's checkpoint.use_node_local_storage):
// dir is on each host's own disk; the lowest rank of every host creates the directories there
// and writes its copy of the index (and `latest`), so each host's directory lists every shard
// and holds its own ranks' (zero_checkpoint_fetch_missing completes it at resume).
void zero_save_shards(ZeroState *z, const LossScaler *scaler, const char *dir, int global_step, int node_local);
// Collective: a barrier (every rank's files are complete), then rank 0 (node_local: every
// host's lowest rank) writes dir/latest.
void zero_save_latest(const ZeroState *z, const char *dir, int global_step, int node_local);
// The checks that need no model and read no tensor data (before anything is written, on
// every rank): dir is not a ".tmp" directory, `latest` names a tag directory whose index is
// well formed, of that tag's step and trainer_state.json's, its shards tile the parameter space
// and every shard file exists with the recorded size and the identity the index expects (its
// header); or, without `latest`, the older whole layout's files are there. Each refusal is one
// line naming the file (and the field), with a HINT.
// node_local: a node-local checkpoint seen from one host, which holds only some shards: those
// present are checked, the missing ones come at resume (zero_checkpoint_fetch_missing).
void zero_check_checkpoint(const char *dir, int node_local);
// Every rank reads the master weights (new layout) and moments of the range it owns, the
// step and the scaler from dir, after the shard files' checksums and identities were verified
// (each file by one rank; a mismatch anywhere stops every rank before any state is set; an
// index of version 1 is said in a NOTICE by rank 0). Refused, naming
// the file and key or tensor: a number out of range, inf/nan moments, and an optimizer step
// that with the skipped steps does not make global_step (the checkpoint's, from
// trainer_state.json).
void zero_load_optimizer(ZeroState *z, LossScaler *scaler, const char *dir, int global_step);

// The step counters and loss scaler a checkpoint resumes with (the index's or zero_state.json's,
// with trainer_state.json's global_step), as read, and the one set of rules a resume holds
// them to (zero_load_optimizer); `train_t5 import-deepspeed` checks what it writes with it.
typedef enum {
    ZC_GLOBAL_STEP,
    ZC_OPTIMIZER_STEP,
    ZC_SKIPPED_STEPS,
    ZC_DYNAMIC,
    ZC_CUR_SCALE,
    ZC_CUR_ITER,
    ZC_LAST_OVERFLOW_ITER,
    ZC_CUR_HYSTERESIS,
    ZC_COUNT
} ZeroCounter;
#define ZC_STEP_SUM ZC_COUNT  // zero_counters_ok's *bad for the rule optimizer_step + skipped_steps = global_step
extern const char *const ZERO_COUNTER_NAMES[ZC_COUNT];  // their keys in the index ("loss_scaler.cur_scale")
// 1 when every value is in its range (a whole number where a count is; cur_scale finite and
// > 0) and optimizer_step + skipped_steps = global_step; else 0, with *bad the counter out of
// range (or ZC_STEP_SUM) and why (n bytes) what was found and what is expected ("is nan,
// expected a finite number > 0, at most 1e+300").
int zero_counters_ok(const double v[ZC_COUNT], int *bad, char *why, size_t n);

// Node-local storage at resume (collective, after the ranks' transport is up, before anything
// loads): every host's copy of dir must hold every shard (stages 0-2 read every shard's master
// weights). Each rank reads its host's `latest` and index; every host must hold the same
// checkpoint (step and saving world size), else one error naming two hosts. A shard that a
// host lacks (or holds at another size) is streamed from the lowest rank that has it, over
// the communicator, to that host's lowest rank, which writes it atomically and checks its
// size and CRC-32C against the index; rank 0 prints a line per copy ("host b lacks
// global_step10/rank_00000.safetensors; rank 0 (host a) sends it"). A shard on no host is one
// error naming it. On one host: nothing (its directory is the whole checkpoint).
void zero_checkpoint_fetch_missing(const char *dir, const Comm *c);

// Elements a checkpoint moves at a time (reads, writes, checksums): the largest tensor of the
// layout, at most a MiB of fp32, so a rank's buffers stay within one tensor.
size_t zero_ckpt_chunk_elems(const ParamLayout *lay);
// Counting mode (common/check.h, T5_COUNT_HOST_MEM=1): begin marks the start of a measured
// save or load; report prints one line per rank, "checkpoint host memory: <what> rank R peak
// +B bytes (partition P elements, largest tensor U elements)", what tests/test_checkpoint.c
// checks against the bound 4 (P + U) bytes. Both do nothing with counting off.
void zero_ckpt_mem_begin(void);
void zero_ckpt_mem_report(const ZeroState *z, const char *what);
// That line with the bytes measured by the caller (zero_init_checkpoint's reads).
void zero_ckpt_mem_print(const ParamLayout *lay, const Comm *comm, const char *what, size_t bytes);

// Reading a checkpoint's master weights by flat ranges: train_t5 export (one process, every
// shard's checksum verified at open: verify 1), and a resumed run's compute weights
// (zero_init_checkpoint: verify 0, since zero_load_optimizer verifies every file, each by one
// rank, before the first step; every shard's identity is checked when it is opened). NULL when
// dir has no `latest` (the caller then reads model.safetensors); a damaged one is refused, and
// one whose trainer_state.json (when dir has one) is of another step.
typedef struct ZeroShardReader ZeroShardReader;
ZeroShardReader *zero_shards_open(const char *dir, size_t total, int verify);
// dir holds the shards' `latest` (a checkpoint written since the shards).
int zero_checkpoint_has_shards(const char *dir);
// Flat elements [lo, hi) of the fp32 master into dst (hi - lo floats), from the shards that
// hold them.
void zero_shards_read_master(ZeroShardReader *rd, size_t lo, size_t hi, float *dst);
void zero_shards_close(ZeroShardReader *rd);
