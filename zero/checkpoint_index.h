// zero/checkpoint_index.h: the index of a checkpoint's shards as zero/checkpoint.c reads it
// (latest -> global_stepN/ -> the index JSON -> each shard's range, size and CRC-32C), shared
// with zero/checkpoint_fetch.c, which completes a host's copy from the others. Private to zero/.
#pragma once
#include <cjson/cJSON.h>
#include <stdint.h>

#define SAVE_ID_HEX 32          // a save's identity: 128 random bits in hex
#define HINT_EARLIER "HINT: resume from an earlier checkpoint-N (the files of this one are damaged or incomplete)"

typedef struct {
    char file[64];
    uint64_t begin, end, bytes;
    uint32_t crc;
} ShardInfo;

typedef struct {
    char *tagdir, *index_path;
    double parameters;
    int version, global_step, world, stage, optimizer_step;
    char save_id[SAVE_ID_HEX + 1];  // version 2 on ("" before)
    cJSON *root;  // the index (loss_scaler is read from it)
    ShardInfo *shards;
    int n_shards;
} ShardIndex;

// latest, the index, and the shards' ranges tiling [0, parameters) in order (errors stop the run).
void zero_ckpt_index_read(ShardIndex *x, const char *dir);
void zero_ckpt_index_free(ShardIndex *x);
// Opens shard r only to check its identity against the index (a shard sent from another host).
void zero_ckpt_shard_identity_open(const ShardIndex *x, int r);
