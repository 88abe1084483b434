// trainer/args_table.h: the flag table shared by args_table.c (which holds it, with HF's
// defaults and --help) and args.c (which parses argv against it and checks the whole set).
// Private to those two files; everyone else uses args.h.
#pragma once

#include "../common/flags.h"
#include "args.h"

typedef struct {
    FlagSpec f;          // f.help: the help line, or the reason (noop / refused)
    ArgRole role;
    const char *accepted;  // ARG_REFUSED: the values that are fine ("false", "none|all"); NULL: none
} TrainFlag;

// The table for `a` (its fields are the flags' destinations); *n entries, malloc'd.
TrainFlag *train_args_flag_table(TrainArgs *a, int *n);
