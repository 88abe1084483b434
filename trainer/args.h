// trainer/args.h: the training run's arguments, with Hugging Face Trainer names and
// defaults (TrainingArguments / Seq2SeqTrainingArguments, plus the data arguments of
// run_translation.py and finetune_trainer.py). Parsed from the command line, then
// validated as a whole: contradictory flags are an error naming both.
#pragma once

typedef struct {
    // ---- model and tokenizer ----
    const char *model;            // --model: HF directory or preset name
    const char *init;             // --init pretrained|random
    const char *tokenizer_name;   // --tokenizer_name: spiece.model or a dir holding one
    double dropout_rate;          // --dropout_rate (< 0: the config's)
    int freeze_embeds;            // --freeze_embeds: shared.weight (and a tied head) frozen

    // ---- data ----
    const char *data_dir;         // --data_dir: {train,val,test}.{source,target} or *.t5ds
    const char *train_file, *validation_file, *test_file;  // JSON lines (run_translation.py)
    const char *source_lang, *target_lang;
    const char *task;             // --task translation_en_to_ro
    const char *source_prefix;    // --source_prefix (NULL: from --task)
    const char *cache_dir;        // --cache_dir: tokenized dataset cache
    int max_source_length, max_target_length;
    int n_train, n_val, n_test;   // -1: all
    const char *sampler;          // --sampler random|sequential|sortish
    int sortish_sampler;          // --sortish_sampler (finetune_trainer's flag)

    // ---- what to do ----
    const char *output_dir;
    int overwrite_output_dir;
    int do_train, do_eval, do_predict;

    // ---- optimization ----
    int per_device_train_batch_size, per_device_eval_batch_size, gradient_accumulation_steps;
    double learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon, max_grad_norm;
    const char *lr_scheduler_type;
    int warmup_steps;
    double warmup_ratio;
    double num_train_epochs;
    int max_steps;                // -1: from num_train_epochs
    int seed;
    double label_smoothing_factor;

    // ---- generation in evaluation (Seq2SeqTrainingArguments) ----
    int predict_with_generate;    // eval/predict generate, then BLEU, chrF and gen_len
    int generation_max_length;    // counts the decoder start token; -1: max_target_length
    int generation_num_beams;     // 1: greedy
    double length_penalty;        // beam search (HF generation default 1.0)
    int early_stopping;           // beam search (HF generation default false)

    // ---- logging / saving / evaluation ----
    int logging_steps, eval_steps, save_steps;
    const char *eval_strategy;    // no|steps|epoch
    const char *save_strategy;    // no|steps|epoch

    // ---- hardware and precision ----
    const char *device;           // cpu|cuda
    int fp16, bf16;
    double max_gpu_memory;        // GiB cap on everything train_t5 allocates on the GPU (0: none)
    int gradient_checkpointing;   // recompute each block's activations in backward
    const char *deepspeed;        // DeepSpeed JSON config path
    const char *resume_from_checkpoint;  // checkpoint-N directory to continue from (NULL: start fresh)
    int num_gpus;                 // --num_gpus N: start N GPU ranks on this host (0: not given)
    int local_rank;               // --local_rank N: this rank's GPU, as launchers pass it (-1: not given)
    int explain;                  // --explain: print the ZeRO memory table (trainer/estimate.c) at start-up

    int help;
} TrainArgs;

// HF defaults.
TrainArgs train_args_default(void);
// Parse argv[start..) into *a (exits with a one-line error on an unknown flag, with a
// suggestion) and validate the whole set.
void train_args_parse(TrainArgs *a, int argc, char **argv, int start);
void train_args_print_help(void);
