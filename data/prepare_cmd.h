// data/prepare_cmd.h: `train_t5 prepare`: tokenize the text of each split once into
// OUTPUT_DIR/{train,val,test}.t5ds (format: docs/DATASET.md), which the trainer then
// maps directly (--data_dir OUTPUT_DIR). Text from --data_dir DIR ({train,val,test}
// .source/.target, finetune_trainer's layout; each split whose .source exists) or from
// --train_file / --validation_file / --test_file (JSON lines, run_translation's layout).
#pragma once

// argv as train_t5's main gets it (argv[1] == "prepare"), or with the subcommand
// already removed (flags from argv[1]). Returns the exit code; bad input exits 1 with a
// one-line error.
int prepare_main(int argc, char **argv);
