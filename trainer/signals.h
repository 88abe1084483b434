// trainer/signals.h: a training run stopped by SIGTERM, SIGINT or SIGUSR1 (Slurm's preemption,
// Ctrl-C, `scancel --signal=USR1`) loses at most the step in progress. The handler only
// records the signal; the loop (trainer/trainer.c) asks at every step boundary whether any
// rank got one (signals_agree_stop: one all-reduce of three counts, so every rank stops after
// the same step even when the signal reached only some of them), saves checkpoint-N as
// --save_steps does, says how to continue and exits 0. A second signal takes the default
// action at once (the process ends); a duplicate sent by the --num_gpus launcher, which
// passes a signal on to its ranks, is not a second one.
#pragma once
#include <stddef.h>

#include "../comm/comm.h"

// Handlers on for SIGTERM, SIGINT, SIGUSR1 (training begins); off: their old actions back.
void signals_install(void);
void signals_uninstall(void);
// Collective (every rank calls it at the same step): did any rank get a stop signal? 1 and,
// in what (cap bytes), the signals and on how many ranks ("SIGTERM on 1 of 4 ranks"); 0: none.
int signals_agree_stop(const Comm *c, char *what, size_t cap);
// This process got a stop signal (no collective; after training, where each rank decides alone).
int signals_received(void);
// Test hook (tests/test_signals.c): T5_TEST_SIGNAL=WHERE:SIG[,SIG...][@RANK] raises the
// signals in this process (on rank RANK alone when given) when the run reaches WHERE
// ("begin": training set up, no step taken yet; "stepN": in step N, after its update, before
// its log/eval/save; "eval": the first evaluation during training, before it runs).
// SIG: TERM, INT or USR1.
void signals_test_hook(const char *where, int rank);
