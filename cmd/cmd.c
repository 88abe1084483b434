// cmd/cmd.c: the table of train_t5's subcommands (name, entry, help line) and the dispatch
// that main calls: --help, the deepspeed launcher's leading --local_rank=N, the HF Trainer
// form, then a subcommand by name, with a did-you-mean for a word that is none.
#include "cmd.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../trainer/args.h"
#include "model_tool.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// In the order of `train_t5 --help`; the model tools last.
static const CmdSpec CMDS[] = {
    {"train", cmd_run_train, NULL, 0},
    {"prepare", cmd_run_prepare, "--data_dir D --tokenizer_name F --output_dir O   tokenize text into .t5ds datasets", 0},
    {"bleu", cmd_run_bleu, "HYP_FILE REF_FILE              corpus BLEU and chrF exactly as sacreBLEU prints them", 0},
    {"bench", cmd_run_bench, "--model t5-large --batch B --bf16 ...   training throughput on synthetic batches", 0},
    {"estimate", cmd_run_estimate, "--model t5-3b --world_size 2 --bf16 ...   per-rank memory for ZeRO stages 0-3 [--png F]", 0},
    {"plot", cmd_run_plot, "OUTPUT_DIR [OUTPUT_DIR2 ...] [--out F.png]   a PNG of the runs' training curves", 0},
    {"export", cmd_run_export, "CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB]   an HF directory from a checkpoint", 0},
    {"import-deepspeed", cmd_run_import_deepspeed, "CKPT_DIR OUT [--tag T]   a DeepSpeed ZeRO-2/3 checkpoint as an HF dir + resumable state", 0},
    {"info", cmd_run_info, "--model M                      print the model's config and parameter count", 1},
    {"convert", cmd_run_convert, "--model M --output_dir D       save as a Hugging Face directory [--dtype f32|f16|bf16]", 1},
    {"loss", cmd_run_loss, "--model M --batch F            loss of a batch file [--label_smoothing x]", 1},
    {"overfit", cmd_run_overfit, "--model M --batch F --output_dir D [--steps N --learning_rate x ...]", 1},
};

void cmd_print_usage(void) {
    printf("usage: train_t5 --model M --output_dir D --do_train [--data_dir DIR] [HF Trainer flags]  \n"
           "       train_t5 COMMAND [flags]\n");
    for (int i = 0; i < COUNT(CMDS); i++)
        if (CMDS[i].help) printf("  %-8s %s\n", CMDS[i].name, CMDS[i].help);
    printf("M is a directory with config.json + model.safetensors, or a preset (with --init random).\n"
           "The device is cuda when a GPU is visible, else cpu (--device says which). Several ranks: --num_gpus N\n"
           "(GPUs), torchrun, srun, or mpirun -np N (as root, OpenMPI needs --allow-run-as-root).\n");
}

// A word that names no subcommand: the nearest name, the model tools tried first (on a tie
// they win), or the whole list.
static _Noreturn void cmd_fail_unknown(const char *cmd) {
    const char *names[COUNT(CMDS)];
    int n = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < COUNT(CMDS); i++)
            if (CMDS[i].model_flags == pass) names[n++] = CMDS[i].name;
    const char *near = flags_closest(cmd, names, n);
    if (near) t5_fail("unknown command \"%s\" (did you mean %s?)", cmd, near);
    char list[512];
    size_t k = 0;
    for (int i = 0; i < COUNT(CMDS) && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", CMDS[i].name);
    t5_fail("unknown command \"%s\" (commands: %s)", cmd, list);
}

int cmd_dispatch(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        cmd_print_usage();
        if (argc >= 2) {
            printf("\ntraining flags (HF Trainer names):\n");
            train_args_print_help(0);  // cmd_print_usage above has the usage lines
        }
        return argc < 2;
    }
    // the deepspeed launcher (without --no_local_rank) puts --local_rank=N before everything:
    // `train_t5 --local_rank=0 bench ...` is `train_t5 bench --local_rank=0 ...`
    if (argc > 2 && (!strncmp(argv[1], "--local_rank=", 13) || !strncmp(argv[1], "--local-rank=", 13)) &&
        argv[2][0] != '-') {
        char *flag = argv[1];
        argv[1] = argv[2];
        argv[2] = flag;
    }
    const char *cmd = argv[1];
    if (strncmp(cmd, "--", 2) == 0) return cmd_run_train(argc, argv);  // the HF Trainer form
    for (int i = 0; i < COUNT(CMDS); i++)
        if (!strcmp(cmd, CMDS[i].name)) return CMDS[i].run(argc, argv);
    // before "unknown command", the model tools' flags are checked and --help answered, as
    // for a model tool
    ModelToolArgs a;
    if (!model_tool_parse_args(&a, argc, argv)) return 0;
    cmd_fail_unknown(cmd);
}
