// trainer/args.c: flag table, HF defaults, and whole-set validation (see args.h).
#include "args.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../zero/launch.h"
#include "device.h"

TrainArgs train_args_default(void) {
    TrainArgs a;
    memset(&a, 0, sizeof a);
    a.init = "pretrained";
    a.dropout_rate = -1;
    a.source_lang = "en";
    a.target_lang = "ro";
    a.max_source_length = 1024;  // run_translation.py / finetune_trainer.py defaults
    a.max_target_length = 128;
    a.n_train = a.n_val = a.n_test = -1;
    a.per_device_train_batch_size = 8;
    a.per_device_eval_batch_size = 8;
    a.gradient_accumulation_steps = 1;
    a.learning_rate = 5e-5;
    a.adam_beta1 = 0.9;
    a.adam_beta2 = 0.999;
    a.adam_epsilon = 1e-8;
    a.max_grad_norm = 1.0;
    a.lr_scheduler_type = "linear";
    a.num_train_epochs = 3.0;
    a.max_steps = -1;
    a.seed = 42;
    a.logging_steps = 500;
    a.save_steps = 500;
    a.eval_strategy = "no";
    a.save_strategy = "steps";
    a.device = "cpu";
    a.generation_max_length = -1;
    a.generation_num_beams = 1;
    a.length_penalty = 1.0;
    a.local_rank = -1;
    return a;
}

// The flag table. Aliases point at the same field (HF's argparse also accepts unique
// prefixes such as the 2021 post's --adam_eps; we list the ones people use).
#define FLAG_TABLE(a)                                                                                               \
    {"model", FLAG_STRING, &a->model, "model directory (config.json + model.safetensors) or preset name"},         \
    {"model_name_or_path", FLAG_STRING, &a->model, "alias of --model"},                                              \
    {"init", FLAG_STRING, &a->init, "pretrained (default) or random (required for a bare preset)"},                \
    {"tokenizer_name", FLAG_STRING, &a->tokenizer_name, "spiece.model file or directory (default: the model's)"},  \
    {"dropout_rate", FLAG_FLOAT, &a->dropout_rate, "override the config's dropout_rate"},                          \
    {"freeze_embeds", FLAG_BOOL, &a->freeze_embeds, "freeze shared.weight (and a tied lm head)"},                  \
    {"data_dir", FLAG_STRING, &a->data_dir, "dir with {train,val,test}.{source,target} (or .t5ds)"},               \
    {"train_file", FLAG_STRING, &a->train_file, "JSON lines {\"translation\": {src: ..., tgt: ...}}"},             \
    {"validation_file", FLAG_STRING, &a->validation_file, "JSON lines for evaluation"},                            \
    {"test_file", FLAG_STRING, &a->test_file, "JSON lines for prediction"},                                        \
    {"source_lang", FLAG_STRING, &a->source_lang, "source key in JSON lines (default en)"},                        \
    {"target_lang", FLAG_STRING, &a->target_lang, "target key in JSON lines (default ro)"},                        \
    {"task", FLAG_STRING, &a->task, "translation_X_to_Y: sets the T5 source prefix"},                             \
    {"source_prefix", FLAG_STRING, &a->source_prefix, "text prepended to every source (overrides --task's)"},      \
    {"cache_dir", FLAG_STRING, &a->cache_dir, "tokenized dataset cache (default ~/.cache/train_t5)"},              \
    {"max_source_length", FLAG_INT, &a->max_source_length, "source tokens incl. </s> (default 1024)"},            \
    {"max_target_length", FLAG_INT, &a->max_target_length, "target tokens incl. </s> (default 128)"},             \
    {"n_train", FLAG_INT, &a->n_train, "use the first N training examples (-1: all)"},                            \
    {"max_train_samples", FLAG_INT, &a->n_train, "alias of --n_train"},                                            \
    {"n_val", FLAG_INT, &a->n_val, "use the first N validation examples"},                                         \
    {"max_eval_samples", FLAG_INT, &a->n_val, "alias of --n_val"},                                                 \
    {"n_test", FLAG_INT, &a->n_test, "use the first N test examples"},                                             \
    {"max_predict_samples", FLAG_INT, &a->n_test, "alias of --n_test"},                                            \
    {"sampler", FLAG_STRING, &a->sampler, "random (default), sequential, sortish"},                               \
    {"sortish_sampler", FLAG_BOOL, &a->sortish_sampler, "same as --sampler sortish"},                              \
    {"output_dir", FLAG_STRING, &a->output_dir, "where results and the model go"},                                 \
    {"overwrite_output_dir", FLAG_BOOL, &a->overwrite_output_dir, "allow a non-empty --output_dir"},              \
    {"do_train", FLAG_BOOL, &a->do_train, "train"},                                                                 \
    {"do_eval", FLAG_BOOL, &a->do_eval, "evaluate on the validation split"},                                       \
    {"do_predict", FLAG_BOOL, &a->do_predict, "evaluate on the test split"},                                       \
    {"per_device_train_batch_size", FLAG_INT, &a->per_device_train_batch_size, "micro-batch per rank (8)"},       \
    {"per_device_eval_batch_size", FLAG_INT, &a->per_device_eval_batch_size, "eval batch per rank (8)"},          \
    {"gradient_accumulation_steps", FLAG_INT, &a->gradient_accumulation_steps, "micro-batches per step (1)"},     \
    {"learning_rate", FLAG_FLOAT, &a->learning_rate, "AdamW learning rate (5e-5)"},                                \
    {"weight_decay", FLAG_FLOAT, &a->weight_decay, "AdamW weight decay, not on norms/biases (0)"},                \
    {"adam_beta1", FLAG_FLOAT, &a->adam_beta1, "AdamW beta1 (0.9)"},                                               \
    {"adam_beta2", FLAG_FLOAT, &a->adam_beta2, "AdamW beta2 (0.999)"},                                             \
    {"adam_epsilon", FLAG_FLOAT, &a->adam_epsilon, "AdamW epsilon (1e-8)"},                                        \
    {"adam_eps", FLAG_FLOAT, &a->adam_epsilon, "alias of --adam_epsilon"},                                         \
    {"max_grad_norm", FLAG_FLOAT, &a->max_grad_norm, "global gradient clipping (1.0; 0 = off)"},                   \
    {"lr_scheduler_type", FLAG_STRING, &a->lr_scheduler_type, "linear, constant, constant_with_warmup, cosine"},    \
    {"warmup_steps", FLAG_INT, &a->warmup_steps, "linear warmup steps"},                                           \
    {"warmup_ratio", FLAG_FLOAT, &a->warmup_ratio, "warmup as a fraction of all steps"},                           \
    {"num_train_epochs", FLAG_FLOAT, &a->num_train_epochs, "epochs (3.0)"},                                        \
    {"max_steps", FLAG_INT, &a->max_steps, "optimizer steps; overrides epochs (-1: off)"},                         \
    {"seed", FLAG_INT, &a->seed, "seed for init, sampling and dropout (42)"},                                      \
    {"label_smoothing_factor", FLAG_FLOAT, &a->label_smoothing_factor, "label smoothing epsilon (0)"},             \
    {"label_smoothing", FLAG_FLOAT, &a->label_smoothing_factor, "alias of --label_smoothing_factor"},              \
    {"predict_with_generate", FLAG_BOOL, &a->predict_with_generate, "generate in eval/predict: BLEU, chrF, gen_len"},\
    {"generation_max_length", FLAG_INT, &a->generation_max_length, "generate up to N tokens incl. the start (-1: max_target_length)"},\
    {"val_max_target_length", FLAG_INT, &a->generation_max_length, "alias of --generation_max_length"},             \
    {"generation_num_beams", FLAG_INT, &a->generation_num_beams, "beam search width (1: greedy)"},                 \
    {"num_beams", FLAG_INT, &a->generation_num_beams, "alias of --generation_num_beams"},                          \
    {"eval_beams", FLAG_INT, &a->generation_num_beams, "alias of --generation_num_beams (finetune_trainer)"},       \
    {"length_penalty", FLAG_FLOAT, &a->length_penalty, "beam search length penalty (1.0)"},                         \
    {"early_stopping", FLAG_BOOL, &a->early_stopping, "beam search stops when num_beams hypotheses are done"},      \
    {"logging_steps", FLAG_INT, &a->logging_steps, "log every N steps (500)"},                                     \
    {"eval_steps", FLAG_INT, &a->eval_steps, "evaluate every N steps (with --eval_strategy steps)"},               \
    {"eval_strategy", FLAG_STRING, &a->eval_strategy, "no (default), steps, epoch"},                               \
    {"evaluation_strategy", FLAG_STRING, &a->eval_strategy, "alias of --eval_strategy"},                           \
    {"save_steps", FLAG_INT, &a->save_steps, "save a checkpoint every N steps (500)"},                            \
    {"save_strategy", FLAG_STRING, &a->save_strategy, "steps (default), epoch, no"},                               \
    {"device", FLAG_STRING, &a->device, "cpu or cuda"},                                                             \
    {"fp16", FLAG_BOOL, &a->fp16, "fp16 mixed precision with dynamic loss scaling (cuda)"},                       \
    {"bf16", FLAG_BOOL, &a->bf16, "bf16 mixed precision (cuda)"},                                                  \
    {"max_gpu_memory", FLAG_FLOAT, &a->max_gpu_memory, "cap on GPU memory in GiB (emulate a smaller card)"},     \
    {"gradient_checkpointing", FLAG_BOOL, &a->gradient_checkpointing, "recompute block activations in backward"},\
    {"deepspeed", FLAG_STRING, &a->deepspeed, "DeepSpeed JSON config"},                                            \
    {"resume_from_checkpoint", FLAG_STRING, &a->resume_from_checkpoint,                                             \
     "continue from OUTPUT_DIR/checkpoint-N (weights, optimizer, scaler, step; any world size or stage)"},           \
    {"num_gpus", FLAG_INT, &a->num_gpus, "start N GPU ranks on this host (like the deepspeed launcher)"},         \
    {"local_rank", FLAG_INT, &a->local_rank,                                                                        \
     "GPU index on this host; the deepspeed launcher and torch.distributed.launch pass it, and it must equal "          \
     "LOCAL_RANK when both are set (-1: none)"},                                                                        \
    {"local-rank", FLAG_INT, &a->local_rank, "alias of --local_rank (torch.distributed.launch's spelling)"},          \
    {"explain", FLAG_BOOL, &a->explain, "print the per-rank memory table of stages 0-3 at start-up (as estimate)"}, \
    {"help", FLAG_BOOL, &a->help, "this help"},

void train_args_print_help(void) {
    TrainArgs tmp = train_args_default(), *a = &tmp;
    FlagSpec specs[] = {FLAG_TABLE(a)};
    printf("usage: train_t5 --model M --output_dir D --do_train [--data_dir DIR | --train_file F] [flags]\n");
    flags_print_help(specs, (int)(sizeof specs / sizeof specs[0]));
}

static int one_of(const char *v, const char *const *options, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, options[i])) return 1;
    return 0;
}

void train_args_parse(TrainArgs *a, int argc, char **argv, int start) {
    FlagSpec specs[] = {FLAG_TABLE(a)};
    flags_parse(argc, argv, start, specs, (int)(sizeof specs / sizeof specs[0]), "train_t5");
    if (a->help) return;

    // ---- required and contradictory ----
    if (!a->model) t5_fail("--model is required (a model directory, or a preset name such as t5-small with --init random)");
    if (!a->output_dir) t5_fail("--output_dir is required");
    if (!a->do_train && !a->do_eval && !a->do_predict)
        t5_fail("nothing to do: pass --do_train, --do_eval and/or --do_predict");
    if (a->fp16 && a->bf16) t5_fail("--fp16 and --bf16 contradict each other: pick one");
    if (a->max_steps == 0 || a->max_steps < -1)
        t5_fail("--max_steps %d: must be a positive number of optimizer steps, or -1 to use --num_train_epochs", a->max_steps);
    if (a->max_steps == -1 && !(a->num_train_epochs > 0))
        t5_fail("--num_train_epochs %g: must be > 0 (or set --max_steps)", a->num_train_epochs);
    if (a->data_dir && (a->train_file || a->validation_file || a->test_file))
        t5_fail("--data_dir and --train_file/--validation_file/--test_file contradict each other: use one layout");
    if (a->do_train && !a->data_dir && !a->train_file)
        t5_fail("--do_train needs data: --data_dir DIR (train.source/train.target) or --train_file FILE (JSON lines)");
    if (a->do_eval && !a->data_dir && !a->validation_file)
        t5_fail("--do_eval needs data: --data_dir DIR (val.source/val.target) or --validation_file FILE");
    if (a->do_predict && !a->data_dir && !a->test_file)
        t5_fail("--do_predict needs data: --data_dir DIR (test.source/test.target) or --test_file FILE");

    // ---- ranges ----
    if (a->per_device_train_batch_size < 1) t5_fail("--per_device_train_batch_size %d: must be >= 1", a->per_device_train_batch_size);
    if (a->per_device_eval_batch_size < 1) t5_fail("--per_device_eval_batch_size %d: must be >= 1", a->per_device_eval_batch_size);
    if (a->gradient_accumulation_steps < 1) t5_fail("--gradient_accumulation_steps %d: must be >= 1", a->gradient_accumulation_steps);
    if (!(a->learning_rate >= 0)) t5_fail("--learning_rate %g: must be >= 0", a->learning_rate);
    if (!(a->weight_decay >= 0)) t5_fail("--weight_decay %g: must be >= 0", a->weight_decay);
    if (!(a->adam_beta1 >= 0 && a->adam_beta1 < 1)) t5_fail("--adam_beta1 %g: must be in [0, 1)", a->adam_beta1);
    if (!(a->adam_beta2 >= 0 && a->adam_beta2 < 1)) t5_fail("--adam_beta2 %g: must be in [0, 1)", a->adam_beta2);
    if (!(a->adam_epsilon > 0)) t5_fail("--adam_epsilon %g: must be > 0", a->adam_epsilon);
    if (!(a->max_grad_norm >= 0)) t5_fail("--max_grad_norm %g: must be >= 0 (0 turns clipping off)", a->max_grad_norm);
    if (a->warmup_steps < 0) t5_fail("--warmup_steps %d: must be >= 0", a->warmup_steps);
    if (!(a->warmup_ratio >= 0 && a->warmup_ratio <= 1)) t5_fail("--warmup_ratio %g: must be in [0, 1]", a->warmup_ratio);
    if (!(a->label_smoothing_factor >= 0 && a->label_smoothing_factor < 1))
        t5_fail("--label_smoothing_factor %g: must be in [0, 1)", a->label_smoothing_factor);
    if (a->dropout_rate >= 1) t5_fail("--dropout_rate %g: must be in [0, 1)", a->dropout_rate);
    if (a->max_source_length < 2) t5_fail("--max_source_length %d: must be >= 2 (one token plus </s>)", a->max_source_length);
    if (a->max_target_length < 2) t5_fail("--max_target_length %d: must be >= 2 (one token plus </s>)", a->max_target_length);
    if (a->generation_max_length == -1) a->generation_max_length = a->max_target_length;
    if (a->generation_max_length < 2)
        t5_fail("--generation_max_length %d: must be >= 2 (the start token plus one)", a->generation_max_length);
    if (a->generation_num_beams < 1 || a->generation_num_beams > 64)
        t5_fail("--generation_num_beams %d: must be in [1, 64]", a->generation_num_beams);
    if (a->logging_steps < 1) t5_fail("--logging_steps %d: must be >= 1", a->logging_steps);
    if (a->save_steps < 1) t5_fail("--save_steps %d: must be >= 1", a->save_steps);
    if (a->n_train == 0 || a->n_val == 0 || a->n_test == 0)
        t5_fail("--n_train/--n_val/--n_test 0: selects no examples (use -1 for all)");
    static const char *const strategies[] = {"no", "steps", "epoch"};
    if (!one_of(a->eval_strategy, strategies, 3)) t5_fail("--eval_strategy \"%s\": expected no, steps or epoch", a->eval_strategy);
    if (!one_of(a->save_strategy, strategies, 3)) t5_fail("--save_strategy \"%s\": expected no, steps or epoch", a->save_strategy);
    if (!strcmp(a->eval_strategy, "steps") && a->eval_steps < 1)
        t5_fail("--eval_strategy steps needs --eval_steps N (N >= 1)");
    if (a->eval_steps > 0 && !strcmp(a->eval_strategy, "no")) a->eval_strategy = "steps";  // HF: eval_steps implies steps
    if (strcmp(a->eval_strategy, "no") != 0 && !a->data_dir && !a->validation_file)
        t5_fail("--eval_strategy %s needs validation data (--data_dir or --validation_file)", a->eval_strategy);
    if (strcmp(a->init, "pretrained") != 0 && strcmp(a->init, "random") != 0)
        t5_fail("--init \"%s\": expected pretrained or random", a->init);

    // ---- sampler ----
    if (a->sortish_sampler) {
        if (a->sampler && strcmp(a->sampler, "sortish") != 0)
            t5_fail("--sortish_sampler and --sampler %s contradict each other", a->sampler);
        a->sampler = "sortish";
    }
    if (!a->sampler) a->sampler = "random";

    // ---- device and precision ----
    if (a->num_gpus > 0 && a->local_rank != -1)
        t5_fail("--num_gpus %d and --local_rank %d contradict each other: --num_gpus gives each rank it starts its own "
                "local rank; drop --local_rank", a->num_gpus, a->local_rank);
    launch_use_local_rank_flag(a->local_rank);  // checked against LOCAL_RANK; comm_init reads LOCAL_RANK
    if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
        t5_fail("--device \"%s\": expected cpu or cuda", a->device);
    if ((a->fp16 || a->bf16) && strcmp(a->device, "cuda") != 0)
        t5_fail("--%s needs --device cuda: the CPU backend is the fp32 reference", a->fp16 ? "fp16" : "bf16");
    if (a->max_gpu_memory < 0) t5_fail("--max_gpu_memory %g: must be > 0 GiB", a->max_gpu_memory);
    if (a->max_gpu_memory > 0 && strcmp(a->device, "cuda") != 0) t5_fail("--max_gpu_memory needs --device cuda");
    if (!strcmp(a->device, "cuda") && !device_cuda_built())
        t5_fail("--device cuda: this train_t5 was built without CUDA (nvcc not found at build time; see make's "
                "feature line)");
    // --num_gpus: 0 is the default, so a given 0 is found in argv
    int num_gpus_given = 0;
    for (int i = start; i < argc; i++)
        if (!strcmp(argv[i], "--num_gpus") || !strncmp(argv[i], "--num_gpus=", 11)) num_gpus_given = 1;
    if (num_gpus_given && a->num_gpus < 1)
        t5_fail("--num_gpus %d: must be >= 1 (the number of GPU ranks to start on this host)", a->num_gpus);
    if (a->num_gpus > 0 && strcmp(a->device, "cuda") != 0)
        t5_fail("--num_gpus %d with --device %s: --num_gpus starts GPU ranks (NCCL); several CPU ranks run only under "
                "mpirun (MPI is their transport): mpirun -np %d ./train_t5 ...", a->num_gpus, a->device, a->num_gpus);
    // --deepspeed is loaded (full schema, zero/ds_config.c) and applied by the trainer
    // before anything is written (trainer/deepspeed.c)
}
