// cmd/train.c: fine-tuning, the default subcommand: `train_t5 --model M --do_train ...` (HF
// Trainer flags from argv[1]) or `train_t5 train --model M ...` (from argv[2]). The run itself
// is trainer/trainer.c's trainer_main.
#include "cmd.h"

#include <string.h>

#include "../trainer/trainer.h"

int cmd_run_train(int argc, char **argv) {
    int start = strncmp(argv[1], "--", 2) == 0 ? 1 : 2;  // the HF Trainer form has no subcommand word
    return trainer_main(argc, argv, start);
}
