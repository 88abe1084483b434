// trainer/import_deepspeed.h: `train_t5 import-deepspeed CKPT_DIR OUT [--tag TAG] [--model M]`
// (import_deepspeed.c): a DeepSpeed ZeRO-2/3 checkpoint (as HF Trainer + DeepSpeed write it)
// into an HF model directory equal to zero_to_fp32's output, plus the Adam moments and step
// counters in train_t5's checkpoint files, so that --resume_from_checkpoint OUT goes on.
#pragma once

int import_deepspeed_main(int argc, char **argv, int start);
