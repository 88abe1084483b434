// trainer/args.c: the flag table with each flag's role, HF defaults, and whole-set
// validation (see args.h). docs/TRAINER.md's flag table lists the same roles;
// tests/test_args.c checks the two agree.
#include "args.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../deepspeed/ds_source.h"
#include "../formats/hf_cache.h"
#include "../dist/launch.h"
#include "../optim/adamw.h"
#include "../optim/lr_schedule.h"
#include "accelerate_env.h"
#include "device.h"
#include "retention.h"

#define COUNT(x) ((int)(sizeof(x) / sizeof((x)[0])))

TrainArgs train_args_default(void) {
    TrainArgs a;
    memset(&a, 0, sizeof a);
    a.init = "pretrained";
    a.dropout_rate = -1;
    a.source_lang = "en";
    a.target_lang = "ro";
    a.max_source_length = 1024;  // run_translation.py / finetune_trainer.py defaults
    a.max_target_length = 128;
    a.val_max_target_length = a.test_max_target_length = -1;
    a.n_train = a.n_val = a.n_test = -1;
    a.include_num_input_tokens_seen = "no";
    a.per_device_train_batch_size = 8;
    a.per_device_eval_batch_size = 8;
    a.gradient_accumulation_steps = 1;
    a.learning_rate = ADAMW_HF_LR;  // optim/adamw.h: HF's optimizer defaults, one table
    a.adam_beta1 = ADAMW_HF_BETA1;
    a.adam_beta2 = ADAMW_HF_BETA2;
    a.adam_epsilon = ADAMW_HF_EPS;
    a.weight_decay = ADAMW_HF_WEIGHT_DECAY;
    a.max_grad_norm = ADAMW_HF_MAX_GRAD_NORM;
    a.lr_scheduler_type = "linear";
    a.optim = "adamw_torch";
    a.num_train_epochs = 3.0;
    a.max_steps = -1;
    a.seed = 42;
    a.data_seed = -1;
    a.logging_steps = 500;
    a.save_steps = 500;
    a.logging_strategy = "steps";
    a.report_to = "none";
    a.eval_strategy = "no";
    a.save_strategy = "steps";
    a.greater_is_better = -1;  // HF's None: decided by the metric's name (trainer/retention.c)
    a.device = NULL;  // resolved by train_args_parse: cuda when a GPU is visible
    a.ddp_timeout = 1800;
    a.generation_max_length = -1;
    a.generation_num_beams = 1;
    a.length_penalty = 1.0;
    a.local_rank = -1;
    a.tf32 = -1;
    return a;
}

typedef struct {
    FlagSpec f;          // f.help: the help line, or the reason (noop / refused)
    ArgRole role;
    const char *accepted;  // ARG_REFUSED: the values that are fine ("false", "none|all"); NULL: none
} TrainFlag;

// One entry per flag. USE: implemented with HF's meaning; ALIAS: another name of one;
// NOOP: accepted, changes nothing here (the text says why; a notice at start-up);
// REFUSE: an error with the reason, unless the value is one of `ok` (HF's default, which
// is what train_t5 does).
#define USE(name, type, field, help) {{name, type, &a->field, help}, ARG_IMPLEMENTED, NULL}
#define ALIAS(name, type, field, of) {{name, type, &a->field, "alias of --" of}, ARG_ALIAS, NULL}
#define NOOP(name, type, why) {{name, type, NULL, why}, ARG_NOOP, NULL}
#define REFUSE(name, type, ok, why) {{name, type, NULL, why}, ARG_REFUSED, ok}

#define NO_HUB "changes nothing: it configures --push_to_hub, which is not built (nothing is uploaded)"
#define NO_DOWNLOAD "changes nothing: nothing is downloaded (--model is a local directory or a preset)"
#define NO_REPORTING "changes nothing: it names the run for the reporting integrations not built here (wandb, trackio, ...); TensorBoard's event files go to --logging_dir"
#define COMPILED "changes nothing: train_t5 is compiled C/CUDA already"
#define NO_LOADER "changes nothing: the data is memory-mapped and collated in the training loop; there are no loader workers"
#define DDP_KNOB "changes nothing: a PyTorch DDP setting; train_t5's data parallel all-reduces each unit's gradients as backward goes (NCCL on GPUs, MPI on CPU ranks)"
#define EVAL_STREAM "changes nothing: evaluation sends each batch's results to rank 0's host memory as it goes"
#define NO_FSDP "FSDP is not built; HINT: --deepspeed with ZeRO stage 3 partitions the weights the same way (configs/ds_config_zero3.json)"
#define NO_DATASETS "datasets from the hub are not built (nothing is downloaded); HINT: write the dataset you have as JSON lines (python3 -c \"import datasets; d = datasets.load_dataset('wmt16', 'ro-en'); [d[s].to_json(f'{s}.json') for s in d]\") and give --train_file train.json --validation_file validation.json --source_lang en --target_lang ro (README.md, \"Your data\")"

#define TRAIN_FLAGS(a)                                                                                               \
    /* ---- model ---- */                                                                                           \
    USE("model", FLAG_STRING, model, "model directory, a name in the Hugging Face cache, or preset name"),            \
    ALIAS("model_name_or_path", FLAG_STRING, model, "model"),                                                        \
    USE("init", FLAG_STRING, init, "pretrained (default) or random (required for a bare preset)"),                 \
    USE("tokenizer_name", FLAG_STRING, tokenizer_name, "spiece.model file or directory (default: the model's)"),   \
    USE("dropout_rate", FLAG_FLOAT, dropout_rate, "override the config's dropout_rate"),                           \
    ALIAS("dropout", FLAG_FLOAT, dropout_rate, "dropout_rate"),                                                      \
    USE("freeze_embeds", FLAG_BOOL, freeze_embeds, "freeze shared.weight (and a tied lm head)"),                   \
    USE("freeze_encoder", FLAG_BOOL, freeze_encoder, "freeze the encoder, its embedding (shared.weight) included"), \
    REFUSE("config_name", FLAG_STRING, NULL, "the config is --model's config.json; HINT: put the config.json you want in the model directory"), \
    NOOP("use_fast_tokenizer", FLAG_BOOL, "changes nothing: one SentencePiece tokenizer (T5's slow and fast tokenizers give the same ids)"), \
    NOOP("model_revision", FLAG_STRING, NO_DOWNLOAD),                                                               \
    NOOP("token", FLAG_STRING, NO_DOWNLOAD),                                                                        \
    NOOP("use_auth_token", FLAG_BOOL, NO_DOWNLOAD),                                                                 \
    NOOP("trust_remote_code", FLAG_BOOL, "changes nothing: no model code is loaded, T5 is built in"),              \
    REFUSE("encoder_layerdrop", FLAG_FLOAT, NULL, "T5 has no layerdrop (finetune_trainer.py stops on it for T5 too)"), \
    REFUSE("decoder_layerdrop", FLAG_FLOAT, NULL, "T5 has no layerdrop (finetune_trainer.py stops on it for T5 too)"), \
    REFUSE("attention_dropout", FLAG_FLOAT, NULL, "T5 has one dropout, applied to the attention probabilities too; HINT: use --dropout_rate"), \
    /* ---- data ---- */                                                                                            \
    USE("data_dir", FLAG_STRING, data_dir, "dir with {train,val,test}.{source,target} (or .t5ds)"),                \
    USE("train_file", FLAG_STRING, train_file, "JSON lines {\"translation\": {src: ..., tgt: ...}}"),              \
    USE("validation_file", FLAG_STRING, validation_file, "JSON lines for evaluation"),                             \
    USE("test_file", FLAG_STRING, test_file, "JSON lines for prediction"),                                         \
    USE("source_lang", FLAG_STRING, source_lang, "source key in JSON lines (default en)"),                         \
    USE("target_lang", FLAG_STRING, target_lang, "target key in JSON lines (default ro)"),                         \
    NOOP("src_lang", FLAG_STRING, "changes nothing for T5: a language code for mBART's tokenizer (--source_lang names the JSON key)"), \
    NOOP("tgt_lang", FLAG_STRING, "changes nothing for T5: a language code for mBART's tokenizer (--target_lang names the JSON key)"), \
    USE("task", FLAG_STRING, task, "translation_X_to_Y: sets the T5 source prefix"),                              \
    USE("source_prefix", FLAG_STRING, source_prefix, "text prepended to every source (overrides --task's)"),       \
    REFUSE("forced_bos_token", FLAG_STRING, NULL, "a first generated token for mBART-like models; T5 starts from its decoder start token"), \
    USE("cache_dir", FLAG_STRING, cache_dir, "tokenized dataset cache (default ~/.cache/train_t5); nothing is downloaded"), \
    NOOP("overwrite_cache", FLAG_BOOL, "changes nothing: the cache key covers the text files (path, size, mtime), the tokenizer, the prefix and --n_*, so a stale cache is never used"), \
    NOOP("preprocessing_num_workers", FLAG_INT, "changes nothing: tokenization runs once, into the dataset cache"),  \
    NOOP("pad_to_max_length", FLAG_BOOL, "changes nothing in the results: padding is masked out; batches are padded to their longest example"), \
    REFUSE("dataset_name", FLAG_STRING, NULL, NO_DATASETS),                                                          \
    REFUSE("dataset_config_name", FLAG_STRING, NULL, "goes with --dataset_name, which is not built either"),         \
    REFUSE("dataset_config", FLAG_STRING, NULL, "goes with --dataset_name, which is not built either"),              \
    USE("max_source_length", FLAG_INT, max_source_length, "source tokens incl. </s> (default 1024)"),            \
    USE("max_target_length", FLAG_INT, max_target_length, "target tokens incl. </s> (default 128)"),             \
    USE("val_max_target_length", FLAG_INT, val_max_target_length,                                                  \
        "validation labels' tokens, and the generation length unless --generation_max_length (default: max_target_length)"), \
    USE("test_max_target_length", FLAG_INT, test_max_target_length,                                                \
        "test labels' tokens (default: val_max_target_length)"),                                                    \
    REFUSE("ignore_pad_token_for_loss", FLAG_BOOL, "true", "pad labels are always left out of the loss (-100)"),    \
    USE("n_train", FLAG_INT, n_train, "use the first N training examples (-1: all)"),                             \
    ALIAS("max_train_samples", FLAG_INT, n_train, "n_train"),                                                        \
    USE("n_val", FLAG_INT, n_val, "use the first N validation examples"),                                          \
    ALIAS("max_eval_samples", FLAG_INT, n_val, "n_val"),                                                             \
    ALIAS("max_val_samples", FLAG_INT, n_val, "n_val"),                                                              \
    USE("n_test", FLAG_INT, n_test, "use the first N test examples"),                                              \
    ALIAS("max_predict_samples", FLAG_INT, n_test, "n_test"),                                                        \
    ALIAS("max_test_samples", FLAG_INT, n_test, "n_test"),                                                           \
    USE("sampler", FLAG_STRING, sampler, "random (default), sequential, sortish"),                                \
    USE("sortish_sampler", FLAG_BOOL, sortish_sampler, "same as --sampler sortish"),                               \
    USE("train_sampling_strategy", FLAG_STRING, train_sampling_strategy,                                            \
        "random or sequential (as --sampler); group_by_length as --group_by_length"),                               \
    USE("group_by_length", FLAG_BOOL, group_by_length,                                                              \
        "the sortish sampler, with a notice (it batches similar lengths too; the order differs from HF's)"),       \
    NOOP("length_column_name", FLAG_STRING, "changes nothing: lengths are read from the tokenized data"),           \
    NOOP("remove_unused_columns", FLAG_BOOL, "changes nothing: the tokenized data holds only the columns used"),    \
    REFUSE("label_names", FLAG_STRING, NULL, "T5's labels are the only labels"),                                    \
    NOOP("dataloader_num_workers", FLAG_INT, NO_LOADER),                                                            \
    NOOP("dataloader_pin_memory", FLAG_BOOL, NO_LOADER),                                                            \
    NOOP("dataloader_persistent_workers", FLAG_BOOL, NO_LOADER),                                                    \
    NOOP("dataloader_prefetch_factor", FLAG_INT, NO_LOADER),                                                        \
    NOOP("dataloader_multiprocessing_context", FLAG_STRING, NO_LOADER),                                             \
    NOOP("dataloader_in_order", FLAG_BOOL, NO_LOADER),                                                              \
    REFUSE("dataloader_drop_last", FLAG_BOOL, "false", "not built: the last, shorter micro-batch of an epoch is kept (HF's default)"), \
    /* ---- what to do ---- */                                                                                      \
    USE("output_dir", FLAG_STRING, output_dir, "where results and the model go"),                                 \
    USE("overwrite_output_dir", FLAG_BOOL, overwrite_output_dir, "allow a non-empty --output_dir"),              \
    USE("do_train", FLAG_BOOL, do_train, "train"),                                                                 \
    USE("do_eval", FLAG_BOOL, do_eval, "evaluate on the validation split"),                                       \
    USE("do_predict", FLAG_BOOL, do_predict, "evaluate on the test split"),                                       \
    /* ---- optimization ---- */                                                                                    \
    USE("per_device_train_batch_size", FLAG_INT, per_device_train_batch_size, "micro-batch per rank (8)"),       \
    ALIAS("per_gpu_train_batch_size", FLAG_INT, per_device_train_batch_size, "per_device_train_batch_size"),         \
    USE("per_device_eval_batch_size", FLAG_INT, per_device_eval_batch_size, "eval batch per rank (8)"),          \
    ALIAS("per_gpu_eval_batch_size", FLAG_INT, per_device_eval_batch_size, "per_device_eval_batch_size"),            \
    USE("gradient_accumulation_steps", FLAG_INT, gradient_accumulation_steps, "micro-batches per step (1)"),     \
    USE("optim", FLAG_STRING, optim, "adamw_torch (default), adamw_torch_fused, adamw_hf, adamw_apex_fused: all AdamW"), \
    REFUSE("optim_args", FLAG_STRING, NULL, "optimizer arguments are not built; HINT: use --adam_beta1/--adam_beta2/--adam_epsilon/--weight_decay"), \
    REFUSE("optim_target_modules", FLAG_STRING, NULL, "GaLore/APOLLO optimizers are not built (AdamW only)"),       \
    REFUSE("adafactor", FLAG_BOOL, "false", "Adafactor is not built; train_t5's optimizer is AdamW (drop --adafactor)"), \
    USE("learning_rate", FLAG_FLOAT, learning_rate, "AdamW learning rate (5e-5)"),                                \
    USE("weight_decay", FLAG_FLOAT, weight_decay, "AdamW weight decay, not on norms/biases (0)"),                \
    USE("adam_beta1", FLAG_FLOAT, adam_beta1, "AdamW beta1 (0.9)"),                                               \
    USE("adam_beta2", FLAG_FLOAT, adam_beta2, "AdamW beta2 (0.999)"),                                             \
    USE("adam_epsilon", FLAG_FLOAT, adam_epsilon, "AdamW epsilon (1e-8)"),                                        \
    ALIAS("adam_eps", FLAG_FLOAT, adam_epsilon, "adam_epsilon"),                                                     \
    USE("max_grad_norm", FLAG_FLOAT, max_grad_norm, "global gradient clipping (1.0; 0 = off)"),                   \
    REFUSE("average_tokens_across_devices", FLAG_BOOL, "true", "train_t5 always divides by the label tokens of all ranks (HF's default)"), \
    USE("lr_scheduler_type", FLAG_STRING, lr_scheduler_type, "linear, constant, constant_with_warmup, cosine"),    \
    ALIAS("lr_scheduler", FLAG_STRING, lr_scheduler_type, "lr_scheduler_type"),                                      \
    REFUSE("lr_scheduler_kwargs", FLAG_STRING, NULL, "scheduler arguments are not built: the four schedules use HF's defaults"), \
    USE("warmup_steps", FLAG_FLOAT, warmup_steps_arg, "linear warmup steps; below 1: a ratio of all steps (HF 5.17)"), \
    USE("warmup_ratio", FLAG_FLOAT, warmup_ratio, "warmup as a fraction of all steps"),                           \
    USE("num_train_epochs", FLAG_FLOAT, num_train_epochs, "epochs (3.0)"),                                        \
    USE("max_steps", FLAG_INT, max_steps, "optimizer steps; overrides epochs (-1: off)"),                         \
    USE("seed", FLAG_INT, seed, "seed for init, sampling and dropout (42)"),                                      \
    USE("data_seed", FLAG_INT, data_seed, "seed of the sampler's order (default: --seed)"),                       \
    REFUSE("full_determinism", FLAG_BOOL, "false", "not verified on the GPU (CPU runs repeat bit for bit with the same seed)"), \
    USE("label_smoothing_factor", FLAG_FLOAT, label_smoothing_factor, "label smoothing epsilon (0)"),             \
    ALIAS("label_smoothing", FLAG_FLOAT, label_smoothing_factor, "label_smoothing_factor"),                          \
    REFUSE("neftune_noise_alpha", FLAG_FLOAT, NULL, "NEFTune embedding noise is not built"),                        \
    /* ---- generation in evaluation ---- */                                                                        \
    USE("predict_with_generate", FLAG_BOOL, predict_with_generate, "generate in eval/predict: BLEU, chrF, gen_len"),\
    USE("generation_max_length", FLAG_INT, generation_max_length,                                                   \
        "generate up to N tokens incl. the start (default: val_max_target_length)"),                                \
    USE("generation_num_beams", FLAG_INT, generation_num_beams, "beam search width (1: greedy)"),                 \
    ALIAS("num_beams", FLAG_INT, generation_num_beams, "generation_num_beams"),                                      \
    ALIAS("eval_beams", FLAG_INT, generation_num_beams, "generation_num_beams"),                                     \
    USE("length_penalty", FLAG_FLOAT, length_penalty, "beam search length penalty (1.0)"),                         \
    USE("early_stopping", FLAG_BOOL, early_stopping, "beam search stops when num_beams hypotheses are done"),      \
    REFUSE("generation_config", FLAG_STRING, NULL, "not built; HINT: use --generation_num_beams, --generation_max_length, --length_penalty, --early_stopping"), \
    USE("prediction_loss_only", FLAG_BOOL, prediction_loss_only, "eval/predict report the loss only (no generation)"), \
    NOOP("use_cache", FLAG_BOOL, "changes nothing: training never uses the decoder cache, generation always does"), \
    /* ---- logging ---- */                                                                                         \
    USE("logging_strategy", FLAG_STRING, logging_strategy, "steps (default), epoch, no"),                         \
    USE("logging_steps", FLAG_FLOAT, logging_steps, "log every N steps (500); below 1: a ratio of all steps"),     \
    USE("logging_first_step", FLAG_BOOL, logging_first_step, "log step 1 too"),                                    \
    USE("disable_tqdm", FLAG_BOOL, disable_tqdm, "no progress bar (the log lines stay)"),                          \
    USE("report_to", FLAG_STRING, report_to,                                                                      \
        "none (HF 5.17's default), tensorboard (event files in --logging_dir), or all (= tensorboard, the one built)"), \
    USE("logging_dir", FLAG_STRING, logging_dir,                                                                    \
        "where --report_to tensorboard writes (default: $TENSORBOARD_LOGGING_DIR, else OUTPUT/runs/MonDD_HH-MM-SS_HOST)"), \
    NOOP("run_name", FLAG_STRING, NO_REPORTING),                                                                    \
    NOOP("project", FLAG_STRING, NO_REPORTING),                                                                     \
    NOOP("trackio_space_id", FLAG_STRING, NO_REPORTING),                                                            \
    NOOP("trackio_bucket_id", FLAG_STRING, NO_REPORTING),                                                           \
    NOOP("trackio_static_space_id", FLAG_STRING, NO_REPORTING),                                                     \
    NOOP("log_level", FLAG_STRING, "changes nothing: train_t5 prints a fixed set of lines"),                        \
    NOOP("log_level_replica", FLAG_STRING, "changes nothing: only rank 0 prints"),                                  \
    NOOP("log_on_each_node", FLAG_BOOL, "changes nothing: only rank 0 prints"),                                     \
    REFUSE("logging_nan_inf_filter", FLAG_BOOL, "false", "not built: the logged loss is the loss as computed (HF's default replaces nan/inf step losses)"), \
    USE("include_num_input_tokens_seen", FLAG_STRING, include_num_input_tokens_seen,                                 \
        "count the input tokens trained on into num_input_tokens_seen (logs, trainer_state.json): no, all (padded; true) or non_padding"), \
    REFUSE("include_tokens_per_second", FLAG_BOOL, "false", "not reported yet (train_samples_per_second is)"),      \
    REFUSE("include_for_metrics", FLAG_STRING, NULL, "metrics are computed in C from the predictions and labels only"), \
    REFUSE("include_inputs_for_metrics", FLAG_BOOL, "false", "metrics are computed in C from the predictions and labels only"), \
    NOOP("skip_memory_metrics", FLAG_BOOL, "changes nothing: train_peak_gpu_memory_gib is reported on the GPU either way (HF's train_mem_* keys are not written)"), \
    REFUSE("debug", FLAG_STRING, "", "HF's debug options (underflow_overflow, tpu_metrics_debug) are not built"),   \
    /* ---- evaluation ---- */                                                                                      \
    USE("eval_strategy", FLAG_STRING, eval_strategy, "no (default), steps, epoch"),                               \
    ALIAS("evaluation_strategy", FLAG_STRING, eval_strategy, "eval_strategy"),                                       \
    REFUSE("evaluate_during_training", FLAG_BOOL, "false", "removed in transformers 4; HINT: use --eval_strategy steps"), \
    USE("eval_steps", FLAG_FLOAT, eval_steps, "evaluate every N steps (default: --logging_steps); below 1: a ratio"), \
    USE("eval_delay", FLAG_FLOAT, eval_delay, "no evaluation before this step (steps) or epoch (epoch)"),          \
    USE("eval_on_start", FLAG_BOOL, eval_on_start, "evaluate once before the first step"),                        \
    NOOP("eval_accumulation_steps", FLAG_INT, EVAL_STREAM),                                                         \
    NOOP("eval_do_concat_batches", FLAG_BOOL, EVAL_STREAM),                                                         \
    NOOP("eval_use_gather_object", FLAG_BOOL, EVAL_STREAM),                                                         \
    NOOP("batch_eval_metrics", FLAG_BOOL, "changes nothing: BLEU and chrF statistics are summed batch by batch already"), \
    NOOP("use_legacy_prediction_loop", FLAG_BOOL, "changes nothing: there is one evaluation loop"),                 \
    REFUSE("past_index", FLAG_INT, "-1", "T5 has no past/mems output in training"),                                 \
    /* ---- saving ---- */                                                                                          \
    USE("save_steps", FLAG_FLOAT, save_steps, "save a checkpoint every N steps (500); below 1: a ratio"),          \
    USE("save_strategy", FLAG_STRING, save_strategy, "steps (default), epoch, no"),                               \
    USE("save_total_limit", FLAG_INT, save_total_limit,                                                            \
        "keep the newest N checkpoint-N (the best one too) and delete the older ones after each save (default: all)"), \
    USE("save_only_model", FLAG_BOOL, save_only_model,                                                              \
        "checkpoints hold the model only (no optimizer state): smaller, but they cannot be resumed"),                \
    USE("load_best_model_at_end", FLAG_BOOL, load_best_model_at_end,                                                \
        "after training, load the best checkpoint (--metric_for_best_model) and save and evaluate it as the final model"), \
    USE("metric_for_best_model", FLAG_STRING, metric_for_best_model,                                                \
        "the evaluation metric that picks the best checkpoint: loss, bleu, chrf, gen_len (eval_ prefix optional; default loss with --load_best_model_at_end)"), \
    USE("greater_is_better", FLAG_BOOL, greater_is_better,                                                          \
        "a larger --metric_for_best_model is better (default: true unless the metric ends in loss)"),              \
    REFUSE("save_safetensors", FLAG_BOOL, "true", "model.safetensors is the only format written"),                 \
    USE("save_on_each_node", FLAG_BOOL, save_on_each_node,                                                          \
        "checkpoints on each host's own disk: each host writes its ranks' shards and its copy of the small files, rank 0 model.safetensors (DeepSpeed's checkpoint.use_node_local_storage)"), \
    REFUSE("enable_jit_checkpoint", FLAG_BOOL, "false", "not built: checkpoints are written at --save_steps"),      \
    REFUSE("ignore_data_skip", FLAG_BOOL, "false", "resuming always walks the sampler to the checkpoint's step (the exact resume)"), \
    NOOP("restore_callback_states_from_checkpoint", FLAG_BOOL, "changes nothing: there are no callbacks with state"), \
    REFUSE("push_to_hub", FLAG_BOOL, "false", "not built: nothing is uploaded"),                                    \
    NOOP("hub_model_id", FLAG_STRING, NO_HUB),                                                                      \
    NOOP("hub_token", FLAG_STRING, NO_HUB),                                                                         \
    NOOP("hub_strategy", FLAG_STRING, NO_HUB),                                                                      \
    NOOP("hub_private_repo", FLAG_BOOL, NO_HUB),                                                                    \
    NOOP("hub_always_push", FLAG_BOOL, NO_HUB),                                                                     \
    NOOP("hub_revision", FLAG_STRING, NO_HUB),                                                                      \
    NOOP("push_to_hub_model_id", FLAG_STRING, NO_HUB),                                                              \
    NOOP("push_to_hub_organization", FLAG_STRING, NO_HUB),                                                          \
    NOOP("push_to_hub_token", FLAG_STRING, NO_HUB),                                                                 \
    /* ---- hardware and precision ---- */                                                                          \
    USE("device", FLAG_STRING, device, "cpu or cuda (default: cuda when a GPU is visible, else cpu)"),             \
    USE("use_cpu", FLAG_BOOL, use_cpu, "same as --device cpu"),                                                    \
    ALIAS("no_cuda", FLAG_BOOL, use_cpu, "use_cpu"),                                                                 \
    REFUSE("use_mps_device", FLAG_BOOL, "false", "Apple MPS is not built (cpu or cuda)"),                           \
    REFUSE("use_ipex", FLAG_BOOL, "false", "Intel IPEX is not built (cpu or cuda)"),                                \
    REFUSE("tpu_num_cores", FLAG_INT, NULL, "TPUs are not built (cpu or cuda)"),                                    \
    REFUSE("tpu_metrics_debug", FLAG_BOOL, "false", "TPUs are not built (cpu or cuda)"),                            \
    USE("fp16", FLAG_BOOL, fp16, "fp16 mixed precision with dynamic loss scaling (GPU)"),                         \
    USE("bf16", FLAG_BOOL, bf16, "bf16 mixed precision (GPU)"),                                                    \
    USE("fp16_full_eval", FLAG_BOOL, fp16_full_eval, "evaluate in fp16: an eval-only run computes in fp16; training with --fp16 evaluates in fp16 already"), \
    USE("bf16_full_eval", FLAG_BOOL, bf16_full_eval, "evaluate in bf16: an eval-only run computes in bf16; training with --bf16 evaluates in bf16 already"), \
    USE("tf32", FLAG_BOOL, tf32,                                                                                    \
        "TF32 tensor cores for fp32 GEMMs (Ampere and newer GPUs); false or unset: exact fp32 products"),        \
    NOOP("fp16_opt_level", FLAG_STRING, "changes nothing: apex is not used (HF too ignores it without apex); --fp16 is mixed precision with fp32 master weights"), \
    NOOP("fp16_backend", FLAG_STRING, "changes nothing: apex is not used; --fp16 is mixed precision with fp32 master weights"), \
    NOOP("half_precision_backend", FLAG_STRING, "changes nothing: apex is not used; --fp16 is mixed precision with fp32 master weights"), \
    USE("max_gpu_memory", FLAG_FLOAT, max_gpu_memory, "cap on GPU memory in GiB (emulate a smaller card)"),      \
    USE("gradient_checkpointing", FLAG_BOOL, gradient_checkpointing, "recompute block activations in backward"), \
    USE("checkpoint_sub_batch", FLAG_INT, checkpoint_sub_batch,                                                     \
        "train_t5's: with --gradient_checkpointing, each block runs N rows of the micro-batch at a time (its activations planned for N rows)"), \
    NOOP("gradient_checkpointing_kwargs", FLAG_STRING, "changes nothing: PyTorch checkpoint options (use_reentrant); train_t5 recomputes each block one way"), \
    REFUSE("auto_find_batch_size", FLAG_BOOL, "false", "not built; HINT: --explain prints what each ZeRO stage needs, and --max_gpu_memory checks the plan before loading"), \
    NOOP("torch_empty_cache_steps", FLAG_INT, "changes nothing: train_t5 allocates its GPU memory once; there is no cache to empty"), \
    NOOP("torch_compile", FLAG_BOOL, COMPILED),                                                                     \
    NOOP("torch_compile_backend", FLAG_STRING, COMPILED),                                                           \
    NOOP("torch_compile_mode", FLAG_STRING, COMPILED),                                                              \
    NOOP("torchdynamo", FLAG_STRING, COMPILED),                                                                     \
    NOOP("jit_mode_eval", FLAG_BOOL, COMPILED),                                                                     \
    NOOP("use_liger_kernel", FLAG_BOOL, "changes nothing: train_t5's kernels are its own (C/CUDA)"),               \
    NOOP("liger_kernel_config", FLAG_STRING, "changes nothing: train_t5's kernels are its own (C/CUDA)"),          \
    USE("deepspeed", FLAG_STRING, deepspeed, "DeepSpeed JSON config"),                                             \
    REFUSE("fsdp", FLAG_STRING, "", NO_FSDP),                                                                       \
    REFUSE("fsdp_config", FLAG_STRING, NULL, NO_FSDP),                                                              \
    REFUSE("fsdp_min_num_params", FLAG_INT, "0", NO_FSDP),                                                          \
    REFUSE("fsdp_transformer_layer_cls_to_wrap", FLAG_STRING, NULL, NO_FSDP),                                       \
    USE("sharded_ddp", FLAG_STRING, sharded_ddp,                                                                   \
        "FairScale's sharded DDP as HF 4.x named it (simple, zero_dp_2, zero_dp_3, \"zero_dp_3 offload\"; bare, as " \
        "HF 4.2's boolean: simple), run as ZeRO stage 2 or 3 without a config (docs/TRAINER.md)"),                 \
    REFUSE("accelerator_config", FLAG_STRING, NULL, "accelerate is not used; its options are not built"),          \
    REFUSE("parallelism_config", FLAG_STRING, NULL, "tensor/context parallelism is not built (data parallel and ZeRO are)"), \
    REFUSE("mp_parameters", FLAG_STRING, NULL, "SageMaker model parallelism is not built"),                         \
    NOOP("ray_scope", FLAG_STRING, "changes nothing: hyperparameter search is not built"),                          \
    USE("resume_from_checkpoint", FLAG_STRING, resume_from_checkpoint,                                              \
        "continue from OUTPUT_DIR/checkpoint-N (weights, optimizer, scaler, step; any world size or stage)"),       \
    USE("num_gpus", FLAG_INT, num_gpus, "start N GPU ranks on this host (like the deepspeed launcher)"),          \
    USE("local_rank", FLAG_INT, local_rank,                                                                         \
        "GPU index on this host; the deepspeed launcher and torch.distributed.launch pass it, and it must equal "   \
        "LOCAL_RANK when both are set (-1: none)"),                                                                 \
    ALIAS("local-rank", FLAG_INT, local_rank, "local_rank"),                                                         \
    USE("ddp_timeout", FLAG_INT, ddp_timeout, "seconds a GPU collective may take before the run stops (1800; T5_NCCL_TIMEOUT)"), \
    NOOP("ddp_backend", FLAG_STRING, DDP_KNOB),                                                                     \
    NOOP("ddp_find_unused_parameters", FLAG_BOOL, DDP_KNOB),                                                        \
    NOOP("ddp_bucket_cap_mb", FLAG_INT, DDP_KNOB),                                                                  \
    NOOP("ddp_broadcast_buffers", FLAG_BOOL, DDP_KNOB),                                                             \
    NOOP("ddp_static_graph", FLAG_BOOL, DDP_KNOB),                                                                  \
    USE("explain", FLAG_BOOL, explain,                                                                              \
        "dry run: check the flags, the config and the data, print the per-rank memory plan of ZeRO stages 0-3, and exit 0 without training"), \
    USE("explain_png", FLAG_STRING, explain_png,                                                                    \
        "with --explain: also draw that plan as a PNG (what each rank holds at each stage, as estimate --png)"), \
    USE("find_max_batch", FLAG_BOOL, find_max_batch,                                                                \
        "with --explain and --max_gpu_memory: print the largest per-device batch (train and eval alike) whose memory plan fits the cap"), \
    USE("help", FLAG_BOOL, help, "this help"),

// The table for `a` (its fields are the flags' destinations); *n entries, malloc'd.
static TrainFlag *flag_table(TrainArgs *a, int *n) {
    TrainFlag t[] = {TRAIN_FLAGS(a)};
    TrainFlag *out = mallocCheck(sizeof t);
    memcpy(out, t, sizeof t);
    *n = COUNT(t);
    return out;
}

int train_args_flag_role(const char *name, ArgRole *role, const char **help, const char **accepted) {
    TrainArgs tmp = train_args_default();
    int n, found = 0;
    TrainFlag *t = flag_table(&tmp, &n);
    for (int k = 0; k < n && !found; k++)
        if (!strcmp(t[k].f.name, name)) {
            found = 1;
            if (role) *role = t[k].role;
            if (help) *help = t[k].f.help;  // string literals: they outlive the table
            if (accepted) *accepted = t[k].accepted;
        }
    free(t);
    return found;
}

const char *train_args_flag_at(int k) {
    TrainArgs tmp = train_args_default();
    int n;
    TrainFlag *t = flag_table(&tmp, &n);
    const char *name = k >= 0 && k < n ? t[k].f.name : NULL;  // a string literal
    free(t);
    return name;
}

void train_args_print_help(int usage_line) {
    TrainArgs tmp = train_args_default();
    int n;
    TrainFlag *t = flag_table(&tmp, &n);
    if (usage_line)
        printf("usage: train_t5 --model M --output_dir D --do_train [--data_dir DIR | --train_file F] [flags]\n");
    for (int k = 0; k < n; k++)
        if (t[k].role == ARG_IMPLEMENTED || t[k].role == ARG_ALIAS) flags_print_help(&t[k].f, 1);
    // the others by name only: their notice or error says why (docs/TRAINER.md has the table)
    for (int pass = 0; pass < 2; pass++) {
        ArgRole want = pass ? ARG_REFUSED : ARG_NOOP;
        printf("%s", pass ? "\nHF flags refused (some accept HF's default value; the error says why and what to use):\n "
                          : "\nHF flags accepted that change nothing here (a notice at start-up says why):\n ");
        int col = 1;
        for (int k = 0; k < n; k++) {
            if (t[k].role != want) continue;
            int w = (int)strlen(t[k].f.name) + 3;
            if (col + w > 100) {
                printf("\n ");
                col = 1;
            }
            col += printf(" --%s", t[k].f.name);
        }
        printf("\n");
    }
    printf("\nSeveral CPU ranks: mpirun -np N ./train_t5 ... --device cpu (as root, OpenMPI also needs "
           "--allow-run-as-root).\n");
    free(t);
}

static int one_of(const char *v, const char *const *options, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, options[i])) return 1;
    return 0;
}

// Is `v` one of "a|b|c"? Numbers compare by value ("-1" == "-1.0").
static int value_accepted(const char *accepted, const char *v, FlagType type) {
    if (!accepted) return 0;
    const char *p = accepted;
    for (;;) {
        size_t len = strcspn(p, "|");
        char one[64];
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        if (!strcmp(one, v)) return 1;
        if ((type == FLAG_INT || type == FLAG_FLOAT) && *one && strtod(one, NULL) == strtod(v, NULL)) return 1;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

// "--name value" as the user wrote it ("--name" for a boolean given as true).
static void flag_text(char *out, size_t cap, const TrainFlag *f, const char *v) {
    if (f->f.type == FLAG_BOOL && !strcmp(v, "true")) snprintf(out, cap, "--%s", f->f.name);
    else if (f->f.type == FLAG_STRING) snprintf(out, cap, "--%s \"%s\"", f->f.name, v);
    else snprintf(out, cap, "--%s %s", f->f.name, v);
}

void train_args_add_notice(TrainArgs *a, const char *line) {
    size_t old = a->notices ? strlen(a->notices) : 0, add = strlen(line) + 2;
    a->notices = reallocCheck(a->notices, old + add);
    snprintf(a->notices + old, add, "%s\n", line);
}

static void notice_add(TrainArgs *a, const char *fmt, const char *x, const char *y) {
    char line[1024];
    snprintf(line, sizeof line, fmt, x, y);
    train_args_add_notice(a, line);
}

// Refused flags: one error naming each with its reason. Accepted no-ops: a notice each.
static void judge_roles(TrainArgs *a, const TrainFlag *t, const char **given, int n) {
    char err[8192] = "";
    size_t len = 0;
    for (int k = 0; k < n; k++) {
        if (!given[k]) continue;
        char text[256];
        flag_text(text, sizeof text, &t[k], given[k]);
        if (t[k].role == ARG_REFUSED && !value_accepted(t[k].accepted, given[k], t[k].f.type) && len < sizeof err)
            len += (size_t)snprintf(err + len, sizeof err - len, "%s%s: %s", len ? "; " : "", text, t[k].f.help);
        if (t[k].role == ARG_NOOP) notice_add(a, "NOTICE: %s %s", text, t[k].f.help);
    }
    if (len) t5_fail("train_t5: %s", err);
}

// The flag given for a field (the last one, when several names write it), or NULL.
static const TrainFlag *given_for(const TrainFlag *t, const char **given, int n, const void *field,
                                  const char **value) {
    const TrainFlag *f = NULL;
    for (int k = 0; k < n; k++)
        if (given[k] && t[k].f.dst == field) {
            f = &t[k];
            if (value) *value = given[k];
        }
    return f;
}

// HF 5.17: a count of steps >= 1 must be whole; (0, 1) is a ratio of all steps.
#define MAX_TOKENS TRAIN_ARGS_MAX_TOKENS

static void check_steps(const char *name, double v, int zero_ok) {
    if (!(v >= 0) || (v == 0 && !zero_ok))
        t5_fail("--%s %g: must be > 0 (a number of steps, or below 1 a ratio of all steps)", name, v);
    if (v > INT_MAX) t5_fail("--%s %g: must be at most %d steps", name, v, INT_MAX);
    if (v > 1 && v != (double)(long)v) t5_fail("--%s %g: must be a whole number of steps when above 1", name, v);
}

static void resolve_device(TrainArgs *a, const TrainFlag *t, const char **given, int n) {
    const char *dev_v = NULL, *cpu_v = NULL;
    const TrainFlag *dev = given_for(t, given, n, &a->device, &dev_v);
    const TrainFlag *cpu = given_for(t, given, n, &a->use_cpu, &cpu_v);
    if (cpu && a->use_cpu) {
        if (dev && strcmp(a->device, "cpu") != 0)
            t5_fail("--%s and --device %s contradict each other: pick one", cpu->f.name, a->device);
        a->device = "cpu";
        a->device_from = cpu->f.name[0] == 'n' ? "--no_cuda" : "--use_cpu";
    } else if (dev) {
        a->device_from = !strcmp(a->device, "cpu") ? "--device cpu" : "--device cuda";
    } else {
        int gpus = device_gpu_count();
        a->device = gpus > 0 ? "cuda" : "cpu";
        a->device_from = gpus > 0 ? "default: a GPU is visible; --device cpu to use the CPU"
                         : device_cuda_built() ? "default: no GPU visible"
                                               : "default: this train_t5 was built without CUDA";
    }
    if (strcmp(a->device, "cpu") != 0 && strcmp(a->device, "cuda") != 0)
        t5_fail("--device \"%s\": expected cpu or cuda", a->device);
}

// Which flags the user set (by any of their names), for the checks that depend on it.
typedef struct {
    int num_gpus, warmup_ratio;
    int predict_with_generate;
} GivenFlags;

// The table parse: values into *a, refused flags judged, the --deepspeed "auto" mask, the
// device. Returns 0 for --help.
// String flags that HF once had as booleans, given bare (the end of the line or another
// --flag next): the value they meant. The 2021 post's `--sharded_ddp` (HF 4.2) is FairScale's
// ShardedDDP, HF 4.3's "simple".
static const struct { const char *flag, *meant; } BARE_STRING_FLAGS[] = {{"--sharded_ddp", "--sharded_ddp=simple"}};

// argv with each bare flag of BARE_STRING_FLAGS given its value (the strings are static or argv's).
static char **argv_with_bare_values(int argc, char **argv, int start) {
    char **out = mallocCheck((size_t)(argc + 1) * sizeof *out);
    for (int i = 0; i < argc; i++) {
        out[i] = argv[i];
        if (i < start) continue;
        for (size_t k = 0; k < sizeof BARE_STRING_FLAGS / sizeof BARE_STRING_FLAGS[0]; k++)
            if (!strcmp(argv[i], BARE_STRING_FLAGS[k].flag) && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)))
                out[i] = (char *)BARE_STRING_FLAGS[k].meant;
    }
    out[argc] = NULL;
    return out;
}

static int parse_table(TrainArgs *a, int argc, char **argv, int start, GivenFlags *g) {
    int n;
    TrainFlag *t = flag_table(a, &n);
    FlagSpec *specs = mallocCheck((size_t)n * sizeof *specs);
    const char **given = callocCheck((size_t)n, sizeof *given);
    for (int k = 0; k < n; k++) specs[k] = t[k].f;
    char **args = argv_with_bare_values(argc, argv, start);
    flags_parse_given(argc, args, start, specs, n, "train_t5", given);
    free(args);  // the values point into argv or BARE_STRING_FLAGS, not into this array
    free(specs);
    if (a->help) {
        free(given);
        free(t);
        return 0;
    }
    judge_roles(a, t, given, n);

    // what --deepspeed's "auto" follows, and which of its values a flag contradicts
    static const struct { size_t offset; unsigned bit; } ds_bits[] = {
        {offsetof(TrainArgs, per_device_train_batch_size), DS_FLAG_PER_DEVICE_TRAIN_BATCH_SIZE},
        {offsetof(TrainArgs, gradient_accumulation_steps), DS_FLAG_GRADIENT_ACCUMULATION_STEPS},
        {offsetof(TrainArgs, learning_rate), DS_FLAG_LEARNING_RATE},
        {offsetof(TrainArgs, adam_beta1), DS_FLAG_ADAM_BETA1},
        {offsetof(TrainArgs, adam_beta2), DS_FLAG_ADAM_BETA2},
        {offsetof(TrainArgs, adam_epsilon), DS_FLAG_ADAM_EPSILON},
        {offsetof(TrainArgs, weight_decay), DS_FLAG_WEIGHT_DECAY},
        {offsetof(TrainArgs, max_grad_norm), DS_FLAG_MAX_GRAD_NORM},
        {offsetof(TrainArgs, warmup_steps_arg), DS_FLAG_WARMUP_STEPS},
        {offsetof(TrainArgs, warmup_ratio), DS_FLAG_WARMUP_STEPS},
        {offsetof(TrainArgs, max_steps), DS_FLAG_TOTAL_STEPS},
        {offsetof(TrainArgs, num_train_epochs), DS_FLAG_TOTAL_STEPS},
        {offsetof(TrainArgs, fp16), DS_FLAG_FP16},
        {offsetof(TrainArgs, bf16), DS_FLAG_BF16},
    };
    for (int i = 0; i < COUNT(ds_bits); i++)
        if (given_for(t, given, n, (char *)a + ds_bits[i].offset, NULL)) a->ds_flag_mask |= ds_bits[i].bit;
    g->num_gpus = given_for(t, given, n, &a->num_gpus, NULL) != NULL;
    g->warmup_ratio = given_for(t, given, n, &a->warmup_ratio, NULL) != NULL;
    g->predict_with_generate = given_for(t, given, n, &a->predict_with_generate, NULL) != NULL;
    const void *gen_fields[] = {&a->generation_num_beams, &a->generation_max_length, &a->early_stopping,
                                &a->length_penalty};
    for (int i = 0; i < 4; i++)
        if (given_for(t, given, n, gen_fields[i], NULL)) a->gen_flag_mask |= 1u << i;
    if (given_for(t, given, n, &a->val_max_target_length, NULL)) a->gen_flag_mask |= GEN_FLAG_MAX_LENGTH;
    // what `accelerate launch` passes in the environment, then --deepspeed's path or text: both
    // before the device (ACCELERATE_USE_CPU) and the checks that read --deepspeed
    accelerate_env_apply(a);
    if (a->deepspeed && !a->deepspeed_text) a->deepspeed = ds_source_resolve(a->deepspeed, &a->deepspeed_text);
    resolve_device(a, t, given, n);
    free(given);
    free(t);
    return 1;
}

// Required flags and contradictory pairs; a hub name found in the HF cache.
static void check_required(TrainArgs *a) {
    if (!a->model) t5_fail("--model is required (a model directory, or a preset name such as t5-small with --init random)");
    // a hub name transformers has downloaded: its cached snapshot, as from_pretrained finds it
    const char **names[] = {&a->model, &a->tokenizer_name};
    const char *flag_names[] = {"--model", "--tokenizer_name"};
    for (int i = 0; i < 2; i++) {
        char *snap = hf_cache_find(*names[i]);
        if (!snap) continue;
        char what[600];
        snprintf(what, sizeof what, "%s %s", flag_names[i], *names[i]);
        notice_add(a, "NOTICE: %s: found in the Hugging Face cache, at %s", what, snap);
        *names[i] = snap;
    }
    if (!a->output_dir) t5_fail("--output_dir is required");
    if (!a->do_train && !a->do_eval && !a->do_predict)
        t5_fail("nothing to do: pass --do_train, --do_eval and/or --do_predict");
    if (a->fp16 && a->bf16) t5_fail("--fp16 and --bf16 contradict each other: pick one");
    if (a->fp16_full_eval && a->bf16_full_eval) t5_fail("--fp16_full_eval and --bf16_full_eval contradict each other: pick one");
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
}

// Ranges; --warmup_steps below 1 is a ratio (HF 5.17).
static void check_ranges(TrainArgs *a, const GivenFlags *g) {
    if (a->per_device_train_batch_size < 1) t5_fail("--per_device_train_batch_size %d: must be >= 1", a->per_device_train_batch_size);
    if (a->per_device_eval_batch_size < 1) t5_fail("--per_device_eval_batch_size %d: must be >= 1", a->per_device_eval_batch_size);
    if (a->gradient_accumulation_steps < 1) t5_fail("--gradient_accumulation_steps %d: must be >= 1", a->gradient_accumulation_steps);
    if (!(a->learning_rate >= 0)) t5_fail("--learning_rate %g: must be >= 0", a->learning_rate);
    if (!(a->weight_decay >= 0)) t5_fail("--weight_decay %g: must be >= 0", a->weight_decay);
    if (!(a->adam_beta1 >= 0 && a->adam_beta1 < 1)) t5_fail("--adam_beta1 %g: must be in [0, 1)", a->adam_beta1);
    if (!(a->adam_beta2 >= 0 && a->adam_beta2 < 1)) t5_fail("--adam_beta2 %g: must be in [0, 1)", a->adam_beta2);
    if (!(a->adam_epsilon > 0)) t5_fail("--adam_epsilon %g: must be > 0", a->adam_epsilon);
    if (!(a->max_grad_norm >= 0)) t5_fail("--max_grad_norm %g: must be >= 0 (0 turns clipping off)", a->max_grad_norm);
    if (!(a->warmup_ratio >= 0 && a->warmup_ratio <= 1)) t5_fail("--warmup_ratio %g: must be in [0, 1]", a->warmup_ratio);
    // HF 5.17: --warmup_steps below 1 is a ratio of all steps (it has no --warmup_ratio any more)
    if (!(a->warmup_steps_arg >= 0)) t5_fail("--warmup_steps %g: must be >= 0", a->warmup_steps_arg);
    if (a->warmup_steps_arg > INT_MAX) t5_fail("--warmup_steps %g: must be at most %d steps", a->warmup_steps_arg, INT_MAX);
    if (a->warmup_steps_arg > 0 && a->warmup_steps_arg < 1) {
        if (g->warmup_ratio && a->warmup_ratio != a->warmup_steps_arg)
            t5_fail("--warmup_steps %g (a ratio, below 1) and --warmup_ratio %g contradict each other: pick one",
                    a->warmup_steps_arg, a->warmup_ratio);
        a->warmup_ratio = a->warmup_steps_arg;
        a->warmup_steps = 0;
    } else {
        a->warmup_steps = (int)a->warmup_steps_arg;  // HF: int(warmup_steps)
    }
    if (!(a->label_smoothing_factor >= 0 && a->label_smoothing_factor < 1))
        t5_fail("--label_smoothing_factor %g: must be in [0, 1)", a->label_smoothing_factor);
    // -1: unset (the config's); any other value must be a probability, as torch's Dropout asks
    if (a->dropout_rate != -1 && !(a->dropout_rate >= 0 && a->dropout_rate < 1))
        t5_fail("--dropout_rate %g: must be in [0, 1)", a->dropout_rate);
    // token lengths size buffers (the generation output is batch x length): a length no T5
    // run can mean is refused here, not by an allocation of gigabytes at the first evaluation
    const int *const lens[] = {&a->max_source_length, &a->max_target_length, &a->val_max_target_length,
                               &a->test_max_target_length, &a->generation_max_length};
    const char *const len_names[] = {"max_source_length", "max_target_length", "val_max_target_length",
                                     "test_max_target_length", "generation_max_length"};
    for (int i = 0; i < 5; i++)
        if (*lens[i] > MAX_TOKENS)
            t5_fail("--%s %d: must be at most %d tokens", len_names[i], *lens[i], MAX_TOKENS);
    if (a->max_source_length < 2) t5_fail("--max_source_length %d: must be >= 2 (one token plus </s>)", a->max_source_length);
    if (a->max_target_length < 2) t5_fail("--max_target_length %d: must be >= 2 (one token plus </s>)", a->max_target_length);
    if (a->val_max_target_length != -1 && a->val_max_target_length < 2)
        t5_fail("--val_max_target_length %d: must be >= 2 (one token plus </s>)", a->val_max_target_length);
    if (a->test_max_target_length != -1 && a->test_max_target_length < 2)
        t5_fail("--test_max_target_length %d: must be >= 2 (one token plus </s>)", a->test_max_target_length);
    // run_translation.py: generate up to generation_max_length, else val_max_target_length
    if (a->generation_max_length == -1) a->generation_max_length = train_args_label_length(a, 0);
    if (a->generation_max_length < 2)
        t5_fail("--generation_max_length %d: must be >= 2 (the start token plus one)", a->generation_max_length);
    if (a->generation_num_beams < 1 || a->generation_num_beams > 64)
        t5_fail("--generation_num_beams %d: must be in [1, 64]", a->generation_num_beams);
    // HF 5.17: a bool means all (true) or no (false)
    static const char *const yes_words[] = {"true", "True", "1"}, *const no_words[] = {"false", "False", "0"};
    if (one_of(a->include_num_input_tokens_seen, yes_words, 3)) a->include_num_input_tokens_seen = "all";
    if (one_of(a->include_num_input_tokens_seen, no_words, 3)) a->include_num_input_tokens_seen = "no";
    static const char *const token_counts[] = {"no", "all", "non_padding"};
    if (!one_of(a->include_num_input_tokens_seen, token_counts, 3))
        t5_fail("--include_num_input_tokens_seen \"%s\": expected no, all (true) or non_padding",
                a->include_num_input_tokens_seen);
    if (a->n_train < -1 || a->n_val < -1 || a->n_test < -1)
        t5_fail("--n_train/--n_val/--n_test %d: must be >= 1 (or -1 for all)",
                a->n_train < -1 ? a->n_train : a->n_val < -1 ? a->n_val : a->n_test);
    if (a->n_train == 0 || a->n_val == 0 || a->n_test == 0)
        t5_fail("--n_train/--n_val/--n_test 0: selects no examples (use -1 for all)");
    if (a->data_seed < -1) t5_fail("--data_seed %d: must be >= 0", a->data_seed);
    if (a->ddp_timeout < 1) t5_fail("--ddp_timeout %d: must be >= 1 second", a->ddp_timeout);
    if (strcmp(a->init, "pretrained") != 0 && strcmp(a->init, "random") != 0)
        t5_fail("--init \"%s\": expected pretrained or random", a->init);
}

// --optim (AdamW by any name) and --lr_scheduler_type.
static void check_optim_schedule(TrainArgs *a) {
    static const char *const adamw[] = {"adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused"};
    if (!one_of(a->optim, adamw, COUNT(adamw))) {
        if (!strcmp(a->optim, "adafactor")) t5_fail("--optim adafactor: Adafactor is not built; train_t5's optimizer is AdamW");
        t5_fail("--optim %s: not built; train_t5's optimizer is AdamW (--optim adamw_torch, adamw_torch_fused, adamw_hf "
                "or adamw_apex_fused: the same update)", a->optim);
    }
    if (!strcmp(a->lr_scheduler_type, "constant_w_warmup")) a->lr_scheduler_type = "constant_with_warmup";  // finetune_trainer's name
    LrScheduleType lr_type;
    if (!lr_schedule_parse(a->lr_scheduler_type, &lr_type))
        t5_fail("--lr_scheduler_type \"%s\": not built; expected linear, constant, constant_with_warmup or cosine",
                a->lr_scheduler_type);
}

// --report_to and where TensorBoard writes: --logging_dir (HF 4.x's flag), else HF 5.17's
// $TENSORBOARD_LOGGING_DIR (~ expanded, as TensorBoardCallback does), else OUTPUT/runs/... at
// the start (trainer/tensorboard.c tb_default_logdir).
static void check_report_to(TrainArgs *a) {
    // one reporter, or several as a comma-separated list (HF's list, "tensorboard,wandb"):
    // each must be built; none stands alone
    static const char *const built[] = {"none", "tensorboard", "all"};
    int items = 0, none = 0;
    for (const char *p = a->report_to;; p++) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item ? n : sizeof item - 1), p);
        if (!n) t5_fail("--report_to \"%s\": an empty name in the list; HINT: --report_to tensorboard", a->report_to);
        if (!one_of(item, built, 3))
            t5_fail("--report_to %s: not built: train_t5 writes TensorBoard event files only (no other integration, "
                    "and nothing is sent over the network); HINT: --report_to tensorboard, or none (HF 5.17's default)",
                    item);
        items++;
        none += !strcmp(item, "none");
        if (!end) break;
        p = end;
    }
    if (none && items > 1)
        t5_fail("--report_to %s: none with other reporters contradicts itself; HINT: --report_to none, or the reporters "
                "alone", a->report_to);
    a->report_tensorboard = !none;
    if (strstr(a->report_to, "all"))
        notice_add(a, "NOTICE: --report_to all: %s%s", "TensorBoard event files, the one reporting integration built ",
                   "(HF's all means every installed one)");
    const char *env = getenv("TENSORBOARD_LOGGING_DIR");
    if (a->logging_dir && !*a->logging_dir)
        t5_fail("--logging_dir \"\": empty; HINT: give a directory, or leave the flag out (OUTPUT/runs/...)");
    if (env && !*env)
        t5_fail("TENSORBOARD_LOGGING_DIR is set but empty; HINT: set it to a directory, or unset it (OUTPUT/runs/...)");
    if (env && a->logging_dir && strcmp(env, a->logging_dir) != 0)
        t5_fail("--logging_dir %s and TENSORBOARD_LOGGING_DIR=%s contradict each other: drop one", a->logging_dir, env);
    if (!a->logging_dir && env) {
        const char *home = getenv("HOME");
        if (env[0] == '~' && (env[1] == '/' || !env[1]) && home) {
            size_t n = strlen(home) + strlen(env) + 1;
            a->logging_dir_owned = mallocCheck(n);
            snprintf(a->logging_dir_owned, n, "%s%s", home, env + 1);
            a->logging_dir = a->logging_dir_owned;
        } else {
            a->logging_dir = env;
        }
    }
    const char *from = a->logging_dir == env || a->logging_dir_owned ? "TENSORBOARD_LOGGING_DIR" : "--logging_dir";
    if (a->logging_dir && !a->report_tensorboard)
        notice_add(a, "NOTICE: %s changes nothing: %s", from,
                   "--report_to is none (HF 5.17's default); HINT: add --report_to tensorboard");
}

// --checkpoint_sub_batch windows the checkpointed blocks: nothing to window without checkpointing.
static void check_sub_batch(const TrainArgs *a) {
    if (a->checkpoint_sub_batch < 0)
        t5_fail("--checkpoint_sub_batch %d: expected a positive number of rows (0: the whole micro-batch)",
                a->checkpoint_sub_batch);
    if (a->checkpoint_sub_batch && !a->gradient_checkpointing)
        t5_fail("--checkpoint_sub_batch %d without --gradient_checkpointing: the windows are the checkpointed blocks'; "
                "HINT: add --gradient_checkpointing", a->checkpoint_sub_batch);
}

// --explain_png draws --explain's plan: without --explain there is no plan to draw.
static void check_explain(const TrainArgs *a) {
    if (a->explain_png && !a->explain)
        t5_fail("--explain_png %s without --explain: the picture is of --explain's dry-run plan; HINT: add --explain",
                a->explain_png);
    if (a->explain_png && !*a->explain_png) t5_fail("--explain_png \"\": empty; HINT: give a .png path");
    if (a->find_max_batch && !a->explain)
        t5_fail("--find_max_batch without --explain: the search runs on the dry run's memory plan; HINT: add --explain");
    if (a->find_max_batch && a->max_gpu_memory <= 0)
        t5_fail("--find_max_batch without --max_gpu_memory: the largest batch is searched under a cap; HINT: add "
                "--max_gpu_memory GiB (24 for the 2021 post's cards)");
}

// Logging, evaluation, saving (HF 5.17's DefaultFlowCallback), --report_to, generation.
static void check_strategies(TrainArgs *a, const GivenFlags *g) {
    static const char *const strategies[] = {"no", "steps", "epoch"};
    if (!one_of(a->logging_strategy, strategies, 3))
        t5_fail("--logging_strategy \"%s\": expected steps, epoch or no", a->logging_strategy);
    if (!strcmp(a->save_strategy, "best"))
        t5_fail("--save_strategy best: not built (a checkpoint at each new best evaluation); HINT: use steps or epoch "
                "with --metric_for_best_model (best_model_checkpoint names the best) and --save_total_limit");
    if (!one_of(a->eval_strategy, strategies, 3)) t5_fail("--eval_strategy \"%s\": expected no, steps or epoch", a->eval_strategy);
    if (!one_of(a->save_strategy, strategies, 3)) t5_fail("--save_strategy \"%s\": expected no, steps or epoch", a->save_strategy);
    if (a->eval_steps > 0 && !strcmp(a->eval_strategy, "no")) a->eval_strategy = "steps";  // HF: eval_steps implies steps
    if (!strcmp(a->eval_strategy, "steps") && a->eval_steps == 0) a->eval_steps = a->logging_steps;  // HF 5.17
    check_steps("logging_steps", a->logging_steps, strcmp(a->logging_strategy, "steps") != 0);
    check_steps("eval_steps", a->eval_steps, strcmp(a->eval_strategy, "steps") != 0);
    check_steps("save_steps", a->save_steps, strcmp(a->save_strategy, "steps") != 0);
    if (!(a->eval_delay >= 0)) t5_fail("--eval_delay %g: must be >= 0", a->eval_delay);
    if (strcmp(a->eval_strategy, "no") != 0 && !a->data_dir && !a->validation_file)
        t5_fail("--eval_strategy %s needs validation data (--data_dir or --validation_file)", a->eval_strategy);
    if (a->eval_on_start && !a->do_train) t5_fail("--eval_on_start evaluates before training: it needs --do_train");
    if (a->eval_on_start && !a->data_dir && !a->validation_file)
        t5_fail("--eval_on_start needs validation data (--data_dir or --validation_file)");
    check_report_to(a);
    if (a->prediction_loss_only && a->predict_with_generate) {
        if (g->predict_with_generate) notice_add(a, "NOTICE: --predict_with_generate is off: %s%s", "--prediction_loss_only reports the loss only ",
                            "(as HF's Seq2SeqTrainer)");
        a->predict_with_generate = 0;
    }
}

// --sampler and the flags that pick one (HF 5.17, HF 4.x, finetune_trainer.py).
static void resolve_sampler(TrainArgs *a) {
    if (a->train_sampling_strategy) {
        static const char *const ok[] = {"random", "sequential"};
        if (!strcmp(a->train_sampling_strategy, "group_by_length")) a->group_by_length = 1;
        else if (!one_of(a->train_sampling_strategy, ok, 2))
            t5_fail("--train_sampling_strategy %s: not built; expected random, sequential or group_by_length",
                    a->train_sampling_strategy);
        else if (a->sampler && strcmp(a->sampler, a->train_sampling_strategy) != 0)
            t5_fail("--train_sampling_strategy %s and --sampler %s contradict each other", a->train_sampling_strategy, a->sampler);
        else a->sampler = a->train_sampling_strategy;
    }
    if (a->group_by_length) {
        if (a->sampler && strcmp(a->sampler, "sortish") != 0)
            t5_fail("--group_by_length and --sampler %s contradict each other", a->sampler);
        if (!a->sortish_sampler)
            notice_add(a, "NOTICE: --group_by_length: %s%s", "using the sortish sampler (finetune_trainer's), which also ",
                       "batches examples of similar length; its order differs from HF's LengthGroupedSampler");
        a->sortish_sampler = 1;
    }
    if (a->sortish_sampler) {
        if (a->sampler && strcmp(a->sampler, "sortish") != 0)
            t5_fail("--sortish_sampler and --sampler %s contradict each other", a->sampler);
        a->sampler = "sortish";
    }
    if (!a->sampler) a->sampler = "random";
    static const char *const samplers[] = {"random", "sequential", "sortish"};
    if (!one_of(a->sampler, samplers, 3)) t5_fail("--sampler \"%s\": expected random, sequential or sortish", a->sampler);
}

// run_translation.py's prefix warning; the precision of an eval-only run.
static void resolve_precision(TrainArgs *a) {
    // ---- data: run_translation.py's warning ----
    if ((a->train_file || a->validation_file || a->test_file) && !a->source_prefix && !a->task)
        notice_add(a, "WARNING: %s%s", "You're running a t5 model but didn't provide a source prefix, which is expected, "
                   "e.g. with `--source_prefix 'translate English to Romanian: '` ",
                   "(or --task translation_en_to_ro)");

    // ---- precision for an eval-only run ----
    if (a->fp16_full_eval && !a->do_train && !a->fp16) {
        a->fp16 = 1;
        a->fp16_from = "--fp16_full_eval";
        a->ds_flag_mask |= DS_FLAG_FP16;
    }
    if (a->bf16_full_eval && !a->do_train && !a->bf16) {
        a->bf16 = 1;
        a->bf16_from = "--bf16_full_eval";
        a->ds_flag_mask |= DS_FLAG_BF16;
    }
    if (a->fp16 && !a->fp16_from) a->fp16_from = "--fp16";
    if (a->bf16 && !a->bf16_from) a->bf16_from = "--bf16";
    if (a->fp16 && a->bf16) t5_fail("%s and %s contradict each other: pick one", a->fp16_from, a->bf16_from);
}

// --num_gpus / --local_rank; --max_gpu_memory.
// --sharded_ddp (HF 4.x, FairScale, gone from transformers since): the options and HF's own
// errors for their combinations, mapped to the ZeRO stage that shards the same state.
// simple (ShardedDDP + OSS: optimizer state sharded, each gradient reduced to the rank that
// owns it) and zero_dp_2 (FullyShardedDDP keeping the weights between forward and backward)
// are ZeRO stage 2; zero_dp_3 (FSDP resharding the weights after use) is stage 3; offload
// (FSDP's cpu_offload) puts the optimizer state, and at stage 3 the weights, in host memory.
static void check_sharded_ddp(TrainArgs *a) {
    if (!a->sharded_ddp || !a->sharded_ddp[0]) return;
    int simple = 0, dp2 = 0, dp3 = 0, offload = 0;
    char words[256];
    snprintf(words, sizeof words, "%s", a->sharded_ddp);
    for (char *save = NULL, *w = strtok_r(words, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
        if (!strcmp(w, "simple")) simple = 1;
        else if (!strcmp(w, "zero_dp_2")) dp2 = 1;
        else if (!strcmp(w, "zero_dp_3")) dp3 = 1;
        else if (!strcmp(w, "offload")) offload = 1;
        else
            t5_fail("--sharded_ddp \"%s\": unknown option \"%s\"; HINT: simple, zero_dp_2, zero_dp_3, offload (two "
                    "together in one quoted value: \"zero_dp_2 offload\")", a->sharded_ddp, w);
    }
    // HF 4.x's messages (trainer.py / training_args.py)
    if (simple && (dp2 || dp3 || offload))
        t5_fail("`--sharded_ddp simple` is not compatible with any other option.");
    if (dp2 && dp3) t5_fail("`--sharded_ddp zero_dp_2` is not compatible with `--sharded_ddp zero_dp_3`.");
    if (offload && !dp2 && !dp3)
        t5_fail("`--sharded_ddp offload` can't work on its own. It needs to be added to `--sharded_ddp zero_dp_2` or "
                "`--sharded_ddp zero_dp_3`.");
    if (a->deepspeed)
        t5_fail("Using --sharded_ddp %s together with --deepspeed is not possible, deactivate one of those flags.",
                a->sharded_ddp);
    a->sharded_stage = dp3 ? 3 : 2;
    a->sharded_offload = offload;
    char what[160];
    snprintf(what, sizeof what, "ZeRO stage %d%s", a->sharded_stage,
             !offload ? "" : dp3 ? " with the optimizer state and the weights in host memory"
                                 : " with the optimizer state in host memory");
    notice_add(a, "NOTICE: --sharded_ddp %s: FairScale is gone from transformers; the same state is sharded as %s "
               "(docs/TRAINER.md, \"--sharded_ddp\")", a->sharded_ddp, what);
}

static void check_launchers(const TrainArgs *a, const GivenFlags *g) {
    if (a->num_gpus > 0 && a->local_rank != -1)
        t5_fail("--num_gpus %d and --local_rank %d contradict each other: --num_gpus gives each rank it starts its own "
                "local rank; drop --local_rank", a->num_gpus, a->local_rank);
    launch_use_local_rank_flag(a->local_rank);  // checked against LOCAL_RANK; comm_init reads LOCAL_RANK
    if (g->num_gpus && a->num_gpus < 1)
        t5_fail("--num_gpus %d: must be >= 1 (the number of GPU ranks to start on this host)", a->num_gpus);
    if (a->max_gpu_memory < 0) t5_fail("--max_gpu_memory %g: must be > 0 GiB", a->max_gpu_memory);
    if (a->max_gpu_memory > 1048576) t5_fail("--max_gpu_memory %g: must be at most 1048576 GiB", a->max_gpu_memory);
}

void train_args_parse(TrainArgs *a, int argc, char **argv, int start) {
    GivenFlags g = {0};
    if (!parse_table(a, argc, argv, start, &g)) return;  // --help
    check_required(a);
    check_ranges(a, &g);
    check_optim_schedule(a);
    check_strategies(a, &g);
    retention_check_args(a);  // --load_best_model_at_end, --metric_for_best_model, ... (trainer/retention.c)
    check_explain(a);
    check_sub_batch(a);
    check_sharded_ddp(a);
    resolve_sampler(a);
    resolve_precision(a);
    check_launchers(a, &g);
    // the device checks need --deepspeed's precision: train_args_check_device, after the config loads
}

// Flags whose values may differ between the ranks of one job: the launcher gives each rank its
// own --local_rank, and paths may name a host's own disk (node-local checkpoints, scratch caches).
static const char *const PER_RANK_FLAGS[] = {"local_rank", "output_dir", "logging_dir", "cache_dir",
                                             "resume_from_checkpoint"};

char *train_args_fingerprint(const TrainArgs *a) {
    int n;
    TrainArgs copy = *a;  // the table points into its argument: read the values from a copy
    TrainFlag *t = flag_table(&copy, &n);
    size_t cap = 4096, len = 0;
    char *out = mallocCheck(cap);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (t[i].role != ARG_IMPLEMENTED || !t[i].f.dst) continue;
        int skip = 0;
        for (size_t k = 0; k < sizeof PER_RANK_FLAGS / sizeof PER_RANK_FLAGS[0]; k++)
            skip |= !strcmp(t[i].f.name, PER_RANK_FLAGS[k]);
        if (skip) continue;
        char val[1024];
        switch (t[i].f.type) {
        case FLAG_STRING: {
            const char *v = *(const char **)t[i].f.dst;
            snprintf(val, sizeof val, "%s", v ? v : "(none)");
            break;
        }
        case FLAG_FLOAT: snprintf(val, sizeof val, "%.17g", *(double *)t[i].f.dst); break;
        default: snprintf(val, sizeof val, "%d", *(int *)t[i].f.dst); break;  // FLAG_INT, FLAG_BOOL
        }
        size_t need = strlen(t[i].f.name) + strlen(val) + 4;
        while (len + need >= cap) out = reallocCheck(out, cap *= 2);
        len += (size_t)snprintf(out + len, cap - len, "--%s %s\n", t[i].f.name, val);
    }
    free(t);
    if (a->deepspeed_text) {  // --deepspeed names a label then: the text itself is what must agree
        size_t need = strlen(a->deepspeed_text) + 32;
        while (len + need >= cap) out = reallocCheck(out, cap *= 2);
        len += (size_t)snprintf(out + len, cap - len, "--deepspeed text %s\n", a->deepspeed_text);
    }
    return out;
}

int train_args_label_length(const TrainArgs *a, int is_test) {
    if (is_test && a->test_max_target_length != -1) return a->test_max_target_length;
    if (a->val_max_target_length != -1) return a->val_max_target_length;
    return a->max_target_length;
}
