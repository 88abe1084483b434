// cmd/cmd.h: the subcommands of train_t5, one file each in cmd/, and the table that
// dispatches them (cmd.c). An entry `cmd_run_X(argc, argv)` takes argv as main gets it
// (argv[1] is the subcommand's name) and returns the exit code; bad input exits 1 with a
// one-line error. The work they do lives in the rooms below (trainer/, data/, eval/, zero/ ...).
#pragma once

// One subcommand: its name, its entry, and its line of `train_t5 --help` (NULL: none; the
// usage's first line is the training form).
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
    int model_flags;  // 1: takes the model tools' shared flags (model_tool.c)
} CmdSpec;

// main's body after the signal set-up: --help, the deepspeed launcher's leading
// --local_rank=N, the HF Trainer form (`train_t5 --model ...`), then the table.
int cmd_dispatch(int argc, char **argv);
// The usage lines of `train_t5 --help` (every subcommand with a help line).
void cmd_print_usage(void);

// Fine-tuning with HF Trainer flags (train.c): `train_t5 train ...` or `train_t5 --model ...`.
int cmd_run_train(int argc, char **argv);

// `train_t5 prepare` (prepare.c): tokenize the text of each split once into
// OUTPUT_DIR/{train,val,test}.t5ds (format: docs/DATASET.md), which the trainer then
// maps directly (--data_dir OUTPUT_DIR). Text from --data_dir DIR ({train,val,test}
// .source/.target, finetune_trainer's layout; each split whose .source exists) or from
// --train_file / --validation_file / --test_file (JSON lines, run_translation's layout).
int cmd_run_prepare(int argc, char **argv);
// The same with argv as main gets it (argv[1] == "prepare"), or with the subcommand
// already removed (flags from argv[1]).
int prepare_main(int argc, char **argv);

// `train_t5 bleu HYP_FILE REF_FILE` (bleu.c): corpus BLEU and chrF exactly as sacreBLEU.
int cmd_run_bleu(int argc, char **argv);
// The same with argv[0] the subcommand name ("bleu"), argv[1] the hypotheses, argv[2] the
// references (one per line, same line count). Prints
//   BLEU = ... (bleu_score_format)
//   chrF2 = ... (chrf_score_format)
//   BLEU signature: <BLEU_SIGNATURE>
//   chrF2 signature: <CHRF_SIGNATURE>
// and returns 0. Bad input (missing file, invalid UTF-8, line counts that differ, empty
// files, extra arguments) exits 1 with one "error:" line. -h/--help prints the usage.
int bleu_main(int argc, char **argv);

// `train_t5 bench` (bench.c): training throughput on synthetic batches.
int cmd_run_bench(int argc, char **argv);
// `train_t5 estimate` (estimate.c): per-rank memory for ZeRO stages 0-3 [--png F].
int cmd_run_estimate(int argc, char **argv);
// `train_t5 plot OUTPUT_DIR [OUTPUT_DIR2 ...] [--out FILE.png]` (plot.c).
int cmd_run_plot(int argc, char **argv);
// `train_t5 export CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB] [--overwrite]`
// (export.c): an HF model directory from a train_t5 checkpoint, streamed.
int cmd_run_export(int argc, char **argv);
// `train_t5 import-deepspeed CKPT_DIR OUT [--tag TAG] [--model M]` (import_deepspeed.c):
// a DeepSpeed ZeRO-2/3 checkpoint (as HF Trainer + DeepSpeed write it) into an HF model
// directory equal to zero_to_fp32's output, plus the Adam moments and step counters in
// train_t5's checkpoint files, so that --resume_from_checkpoint OUT goes on.
int cmd_run_import_deepspeed(int argc, char **argv);

// The model tools (model_tool.c parses their shared flags): info, convert, loss, overfit.
int cmd_run_info(int argc, char **argv);
int cmd_run_convert(int argc, char **argv);
int cmd_run_loss(int argc, char **argv);
int cmd_run_overfit(int argc, char **argv);
