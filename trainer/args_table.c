// trainer/args_table.c: the table of every HF Trainer flag train_t5 knows, with its role
// (implemented, alias, accepted as a no-op, refused), its help line and where its value goes,
// HF's defaults, and --help. The checks of a whole set of flags are args.c's (see args.h).
// docs/TRAINER.md's flag table lists the same roles; tests/test_args.c checks the two agree.
#include "args_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../model/fp8.h"
#include "../optim/adamw.h"

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
    a.fp8_amax_history = T5_FP8_HISTORY_DEFAULT;
    return a;
}

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
    USE("fp8", FLAG_BOOL, fp8,                                                                                      \
        "train_t5's: the blocks' linear GEMMs of training steps in fp8 (e4m3 forward, e5m2 gradients, delayed scaling; Ada/Hopper and newer, with --bf16; docs/TRAINER.md)"), \
    USE("fp8_bf16", FLAG_STRING, fp8_bf16,                                                                          \
        "train_t5's: with --fp8, linears kept in bf16 besides the LM head: attention_output, first_last (comma list)"), \
    USE("fp8_amax_history", FLAG_INT, fp8_amax_history, "train_t5's: with --fp8, steps of amax history a scale is taken over (16)"), \
    USE("fp8_margin", FLAG_INT, fp8_margin, "train_t5's: with --fp8, scales 2^margin below the format's largest value (0)"), \
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

TrainFlag *train_args_flag_table(TrainArgs *a, int *n) {
    TrainFlag t[] = {TRAIN_FLAGS(a)};
    TrainFlag *out = mallocCheck(sizeof t);
    memcpy(out, t, sizeof t);
    *n = COUNT(t);
    return out;
}

int train_args_flag_role(const char *name, ArgRole *role, const char **help, const char **accepted) {
    TrainArgs tmp = train_args_default();
    int n, found = 0;
    TrainFlag *t = train_args_flag_table(&tmp, &n);
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
    TrainFlag *t = train_args_flag_table(&tmp, &n);
    const char *name = k >= 0 && k < n ? t[k].f.name : NULL;  // a string literal
    free(t);
    return name;
}

void train_args_print_help(int usage_line) {
    TrainArgs tmp = train_args_default();
    int n;
    TrainFlag *t = train_args_flag_table(&tmp, &n);
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
