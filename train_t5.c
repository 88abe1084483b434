// train_t5.c: the entry point. Flags -> a run; subcommands:
//   train_t5 info     --model M                 config, parameter count, checksum
//   train_t5 convert  --model M --output_dir D  re-save as an HF directory (dtype f32|f16|bf16)
//   train_t5 loss     --model M --batch F       loss of a batch file (safetensors ids)
//   train_t5 overfit  --model M --batch F ...   N AdamW steps on one batch, then save
// Fine-tuning from text (`train_t5 --model ... --do_train ...`, HF Trainer flags) is
// trainer/trainer.c's trainer_main; prepare, bleu, bench, estimate, plot, export and import-deepspeed
// have their own files.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/fileio.h"
#include "common/flags.h"
#include "data/batch_file.h"
#include "eval/bleu.h"
#include "data/prepare_cmd.h"
#include "model/hf_dir.h"
#include "model/load.h"
#include "optim/adamw.h"
#include "trainer/args.h"
#include "trainer/bench.h"
#include "trainer/estimate.h"
#include "trainer/export.h"
#include "trainer/import_deepspeed.h"
#include "trainer/plot_cmd.h"
#include "trainer/trainer.h"
#include "zero/step.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    const char *model, *output_dir, *batch, *dtype, *init, *lr_scheduler_type;
    int seed, steps, warmup_steps, help;
    double learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon, max_grad_norm, label_smoothing,
        dropout_rate, warmup_ratio;
} Args;

static Args args_default(void) {
    Args a = {0};
    a.dtype = "f32";
    a.init = "pretrained";
    a.lr_scheduler_type = "linear";
    a.seed = 42;
    a.steps = 10;
    a.learning_rate = ADAMW_HF_LR;  // optim/adamw.h: HF's defaults
    a.adam_beta1 = ADAMW_HF_BETA1;
    a.adam_beta2 = ADAMW_HF_BETA2;
    a.adam_epsilon = ADAMW_HF_EPS;
    a.max_grad_norm = ADAMW_HF_MAX_GRAD_NORM;
    a.dropout_rate = -1.0f;  // -1: keep the config's
    return a;
}

static void load_model(T5Model *m, const Args *a) {
    if (!a->model) t5_fail("--model is required (a model directory or a preset name such as t5-small)");
    if (strcmp(a->init, "random") != 0 && strcmp(a->init, "pretrained") != 0)
        t5_fail("--init: expected random or pretrained, found \"%s\"", a->init);
    ModelLoadOptions opt = {.init_random = !strcmp(a->init, "random"), .seed = (unsigned long long)a->seed};
    model_load(m, a->model, backend_cpu(), opt);
    if (a->dropout_rate >= 0) {
        if (a->dropout_rate >= 1.0f) t5_fail("--dropout_rate must be in [0, 1), found %g", a->dropout_rate);
        m->cfg.dropout_rate = m->dropout_p = a->dropout_rate;
    }
}

static StDtype parse_dtype(const char *s) {
    if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) return ST_F32;
    if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) return ST_F16;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return ST_BF16;
    t5_fail("--dtype: expected f32, f16 or bf16, found \"%s\"", s);
}

static int cmd_info(Args *a) {
    T5Model m;
    load_model(&m, a);
    const T5Config *c = &m.cfg;
    printf("model        %s\n", a->model);
    const char *wf = path_is_dir(a->model) && strcmp(a->init, "random") != 0 ? hf_weights_file(a->model) : NULL;
    if (wf) printf("weights      %s\n", wf);  // which file loaded: safetensors is preferred to a .bin
    printf("d_model %d  d_kv %d  heads %d  d_ff %d  layers %d/%d  vocab %d  ffn %s\n", c->d_model, c->d_kv,
           c->num_heads, c->d_ff, c->num_layers, c->num_decoder_layers, c->vocab_size, c->feed_forward_proj);
    printf("lm head      %s, %s\n", c->untied_lm_head ? "untied (lm_head.weight)" : "tied to shared.weight",
           c->scale_decoder_outputs ? "decoder output scaled by d_model^-0.5" : "no output scaling");
    printf("parameters   %zu in %d tensors (%.1f MiB fp32)\n", m.lay.total, m.lay.count,
           m.lay.total * 4.0 / (1 << 20));
    double sum = 0;
    const float *p = m.params;
    for (size_t i = 0; i < m.lay.total; i++) sum += fabs(p[i]);
    printf("mean |w|     %.9g\n", sum / (double)m.lay.total);
    t5_free(&m);
    return 0;
}

static int cmd_convert(Args *a) {
    if (!a->output_dir) t5_fail("convert: --output_dir is required");
    StDtype dt = parse_dtype(a->dtype);
    T5Model m;
    load_model(&m, a);
    hf_save_model(a->output_dir, &m.cfg, &m.lay, m.params, dt);
    printf("saved %s (%zu parameters, %s)\n", a->output_dir, m.lay.total, st_dtype_name(dt));
    t5_free(&m);
    return 0;
}

static int cmd_loss(Args *a) {
    if (!a->batch) t5_fail("loss: --batch FILE (a safetensors file with input_ids, attention_mask, labels) is required");
    T5Model m;
    load_model(&m, a);
    m.dropout_p = 0.0f;  // evaluation
    BatchFile bf;
    batch_file_load(&bf, a->batch, m.cfg.vocab_size, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    t5_plan_activations(&m, bf.batch.B, bf.batch.S, bf.batch.T);
    long n = 0;
    double plain = t5_forward(&m, &bf.batch, 0.0f, &n);
    double smooth = t5_forward(&m, &bf.batch, a->label_smoothing, &n);
    printf("loss %.9g loss_smoothed %.9g label_smoothing %g tokens %ld\n", plain / n, smooth / n, a->label_smoothing, n);
    batch_file_free(&bf);
    t5_free(&m);
    return 0;
}

static int cmd_overfit(Args *a) {
    if (!a->batch) t5_fail("overfit: --batch FILE is required");
    if (!a->output_dir) t5_fail("overfit: --output_dir is required");
    if (a->steps < 1) t5_fail("overfit: --steps must be >= 1, found %d", a->steps);
    T5Model m;
    load_model(&m, a);
    BatchFile bf;
    batch_file_load(&bf, a->batch, m.cfg.vocab_size, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    t5_plan_activations(&m, bf.batch.B, bf.batch.S, bf.batch.T);
    LrSchedule sched = {.base_lr = a->learning_rate, .total_steps = a->steps};
    if (!lr_schedule_parse(a->lr_scheduler_type, &sched.type))
        t5_fail("--lr_scheduler_type: expected linear, constant, constant_with_warmup or cosine, found \"%s\"",
                a->lr_scheduler_type);
    sched.warmup_steps = lr_schedule_warmup_steps(a->warmup_steps, a->warmup_ratio, a->steps);
    AdamWConfig oc = {.lr = a->learning_rate, .beta1 = a->adam_beta1, .beta2 = a->adam_beta2,
                      .eps = a->adam_epsilon, .weight_decay = a->weight_decay, .max_grad_norm = a->max_grad_norm};
    ZeroState z;
    ZeroOptions zo = zero_options_stage(0);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc, NULL);  // fp32 CPU: the weights are the master
    for (int s = 0; s < a->steps; s++) {
        m.dropout_seed = (unsigned long long)a->seed * 1000003ULL + (unsigned long long)s;
        StepResult r = zero_train_step(&z, &sched, NULL, &bf.batch, 1, a->label_smoothing);
        printf("step %d loss %.9g grad_norm %.9g learning_rate %.9g\n", s + 1, r.loss, r.grad_norm, r.lr);
    }
    hf_save_model(a->output_dir, &m.cfg, &m.lay, m.params, parse_dtype(a->dtype));
    printf("saved %s\n", a->output_dir);
    zero_free(&z);
    batch_file_free(&bf);
    t5_free(&m);
    return 0;
}

static void usage(void) {
    printf("usage: train_t5 --model M --output_dir D --do_train [--data_dir DIR] [HF Trainer flags]  \n"
           "       train_t5 COMMAND [flags]\n"
           "  prepare  --data_dir D --tokenizer_name F --output_dir O   tokenize text into .t5ds datasets\n"
           "  bleu     HYP_FILE REF_FILE              corpus BLEU and chrF exactly as sacreBLEU prints them\n"
           "  bench    --model t5-large --batch B --bf16 ...   training throughput on synthetic batches\n"
           "  estimate --model t5-3b --world_size 2 --bf16 ...   per-rank memory for ZeRO stages 0-3 [--png F]\n"
           "  plot     OUTPUT_DIR [OUTPUT_DIR2 ...] [--out F.png]   a PNG of the runs' training curves\n"
           "  export   CKPT OUT [--dtype fp32|bf16|fp16] [--max_shard_size 5GB]   an HF directory from a checkpoint\n"
           "  import-deepspeed CKPT_DIR OUT [--tag T]   a DeepSpeed ZeRO-2/3 checkpoint as an HF dir + resumable state\n"
           "  info     --model M                      print the model's config and parameter count\n"
           "  convert  --model M --output_dir D       save as a Hugging Face directory [--dtype f32|f16|bf16]\n"
           "  loss     --model M --batch F            loss of a batch file [--label_smoothing x]\n"
           "  overfit  --model M --batch F --output_dir D [--steps N --learning_rate x ...]\n"
           "M is a directory with config.json + model.safetensors, or a preset (with --init random).\n"
           "The device is cuda when a GPU is visible, else cpu (--device says which). Several ranks: --num_gpus N\n"
           "(GPUs), torchrun, srun, or mpirun -np N (as root, OpenMPI needs --allow-run-as-root).\n");
}

int main(int argc, char **argv) {
    // past the file-size limit (ulimit -f) a write fails with EFBIG, which is reported and
    // cleaned up (common/fileio.h), instead of SIGXFSZ killing the process without a word
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        if (argc >= 2) {
            printf("\ntraining flags (HF Trainer names):\n");
            train_args_print_help(0);  // usage() above has the usage lines
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
    Args a = args_default();
    FlagSpec specs[] = {
        {"model", FLAG_STRING, &a.model, "model directory or preset name"},
        {"init", FLAG_STRING, &a.init, "pretrained (default) or random"},
        {"seed", FLAG_INT, &a.seed, "random seed (init, dropout)"},
        {"output_dir", FLAG_STRING, &a.output_dir, "where to save the model"},
        {"dtype", FLAG_STRING, &a.dtype, "saved tensor dtype: f32, f16, bf16"},
        {"batch", FLAG_STRING, &a.batch, "batch file (safetensors with input_ids, attention_mask, labels)"},
        {"steps", FLAG_INT, &a.steps, "optimizer steps (overfit)"},
        {"learning_rate", FLAG_FLOAT, &a.learning_rate, "AdamW learning rate"},
        {"weight_decay", FLAG_FLOAT, &a.weight_decay, "AdamW weight decay (not on norm weights)"},
        {"adam_beta1", FLAG_FLOAT, &a.adam_beta1, "AdamW beta1"},
        {"adam_beta2", FLAG_FLOAT, &a.adam_beta2, "AdamW beta2"},
        {"adam_epsilon", FLAG_FLOAT, &a.adam_epsilon, "AdamW epsilon"},
        {"max_grad_norm", FLAG_FLOAT, &a.max_grad_norm, "global gradient clipping norm (0: off)"},
        {"lr_scheduler_type", FLAG_STRING, &a.lr_scheduler_type, "linear, constant, constant_with_warmup, cosine"},
        {"warmup_steps", FLAG_INT, &a.warmup_steps, "linear warmup steps"},
        {"warmup_ratio", FLAG_FLOAT, &a.warmup_ratio, "warmup as a fraction of the steps"},
        {"label_smoothing", FLAG_FLOAT, &a.label_smoothing, "label smoothing epsilon (HF LabelSmoother)"},
        {"dropout_rate", FLAG_FLOAT, &a.dropout_rate, "override the config's dropout"},
        {"help", FLAG_BOOL, &a.help, "this help"},
    };
    if (strncmp(cmd, "--", 2) == 0) return trainer_main(argc, argv, 1);  // the HF Trainer form
    if (!strcmp(cmd, "train")) return trainer_main(argc, argv, 2);
    if (!strcmp(cmd, "prepare")) return prepare_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "bleu")) return bleu_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return bench_main(argc, argv, 2);
    if (!strcmp(cmd, "estimate")) return estimate_main(argc, argv, 2);
    if (!strcmp(cmd, "plot")) return plot_main(argc, argv, 2);
    if (!strcmp(cmd, "export")) return export_main(argc, argv, 2);
    if (!strcmp(cmd, "import-deepspeed")) return import_deepspeed_main(argc, argv, 2);
    flags_parse(argc, argv, 2, specs, COUNT(specs), cmd);
    if (a.help) {
        usage();
        flags_print_help(specs, COUNT(specs));
        return 0;
    }
    if (!strcmp(cmd, "info")) return cmd_info(&a);
    if (!strcmp(cmd, "convert")) return cmd_convert(&a);
    if (!strcmp(cmd, "loss")) return cmd_loss(&a);
    if (!strcmp(cmd, "overfit")) return cmd_overfit(&a);
    const char *cmds[] = {"info", "convert", "loss", "overfit", "train", "prepare", "bleu", "bench", "estimate", "plot",
                          "export", "import-deepspeed"};
    const char *near = flags_closest(cmd, cmds, COUNT(cmds));
    if (near) t5_fail("unknown command \"%s\" (did you mean %s?)", cmd, near);
    t5_fail("unknown command \"%s\" (commands: train, prepare, bleu, bench, estimate, plot, export, import-deepspeed, info, "
            "convert, loss, overfit)", cmd);
}
