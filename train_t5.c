// train_t5.c: the entry point. Fine-tuning with HF Trainer flags (`train_t5 --model ...
// --do_train ...`) and the subcommands (prepare, bleu, bench, estimate, plot, export,
// import-deepspeed, info, convert, loss, overfit): one file each in cmd/, dispatched by the
// table in cmd/cmd.c.
#include <signal.h>

#include "cmd/cmd.h"

int main(int argc, char **argv) {
    // past the file-size limit (ulimit -f) a write fails with EFBIG, which is reported and
    // cleaned up (common/fileio.h), instead of SIGXFSZ killing the process without a word
    signal(SIGXFSZ, SIG_IGN);
    return cmd_dispatch(argc, argv);
}
