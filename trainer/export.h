// trainer/export.h: `train_t5 export CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB]
// [--overwrite]`: an HF model directory from a train_t5 checkpoint, streamed (export.c).
#pragma once

int export_main(int argc, char **argv, int start);
