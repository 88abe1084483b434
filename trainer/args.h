// trainer/args.h: the training run's arguments, with Hugging Face Trainer names and
// defaults (TrainingArguments / Seq2SeqTrainingArguments, plus the data arguments of
// run_translation.py and finetune_trainer.py). Parsed from the command line, then
// validated as a whole: contradictory flags are an error naming both.
// Every HF flag a translation user passes has a role (the table in args.c, listed in
// docs/TRAINER.md): implemented, an alias, accepted with a start-up notice saying why it
// changes nothing, or refused naming the reason. Unknown flags are one error naming all.
// Settings that can come from several places (the device, fp16/bf16) carry where they came
// from, and the errors about them say it.
#pragma once
#include "../deepspeed/ds_config.h"
#include "../kernels/gpu_arch.h"

typedef struct {
    // ---- model and tokenizer ----
    const char *model;            // --model: HF directory or preset name
    const char *init;             // --init pretrained|random
    const char *tokenizer_name;   // --tokenizer_name: spiece.model or a dir holding one
    double dropout_rate;          // --dropout_rate (< 0: the config's)
    int freeze_embeds;            // --freeze_embeds: shared.weight (and a tied head) frozen
    int freeze_encoder;           // --freeze_encoder: the encoder and shared.weight (its embedding) frozen

    // ---- data ----
    const char *data_dir;         // --data_dir: {train,val,test}.{source,target} or *.t5ds
    const char *train_file, *validation_file, *test_file;  // JSON lines (run_translation.py)
    const char *source_lang, *target_lang;
    const char *task;             // --task translation_en_to_ro
    const char *source_prefix;    // --source_prefix (NULL: from --task)
    const char *cache_dir;        // --cache_dir: tokenized dataset cache
    int max_source_length, max_target_length;
    int val_max_target_length;    // labels of the validation split (-1: max_target_length)
    int test_max_target_length;   // labels of the test split (-1: val_max_target_length)
    int n_train, n_val, n_test;   // -1: all
    const char *sampler;          // --sampler random|sequential|sortish
    int sortish_sampler;          // --sortish_sampler (finetune_trainer's flag)
    const char *train_sampling_strategy;  // HF 5.17: random|sequential|group_by_length
    int group_by_length;          // HF 4.x: the sortish sampler, with a notice

    // ---- what to do ----
    const char *output_dir;
    int overwrite_output_dir;
    int do_train, do_eval, do_predict;

    // ---- optimization ----
    int per_device_train_batch_size, per_device_eval_batch_size, gradient_accumulation_steps;
    double learning_rate, weight_decay, adam_beta1, adam_beta2, adam_epsilon, max_grad_norm;
    const char *lr_scheduler_type;
    double warmup_steps_arg;      // --warmup_steps as given: >= 1 steps, (0, 1) a ratio (HF 5.17)
    int warmup_steps;             // resolved
    double warmup_ratio;
    double num_train_epochs;
    int max_steps;                // -1: from num_train_epochs
    int seed;
    int data_seed;                // the sampler's seed (-1: --seed)
    double label_smoothing_factor;
    const char *optim;            // AdamW by any of HF's names for it

    // ---- generation in evaluation (Seq2SeqTrainingArguments) ----
    int predict_with_generate;    // eval/predict generate, then BLEU, chrF and gen_len
    int generation_max_length;    // counts the decoder start token; -1: max_target_length
    int generation_num_beams;     // 1: greedy
    double length_penalty;        // beam search (HF generation default 1.0)
    int early_stopping;           // beam search (HF generation default false)
    unsigned gen_flag_mask;       // GEN_FLAG_* of the generation flags given (the rest may come from
                                  // the model directory: trainer/gen_defaults.c)
    int prediction_loss_only;     // eval/predict: the loss only, no generation

    // ---- logging / saving / evaluation ----
    double logging_steps, eval_steps, save_steps;  // >= 1: steps; (0, 1): of the total steps (HF 5.17)
    const char *logging_strategy; // steps|epoch|no
    int logging_first_step;       // log step 1 too
    int disable_tqdm;             // no progress bar (the log lines stay)
    const char *report_to;        // none (HF 5.17's default) | tensorboard | all (= tensorboard)
    int report_tensorboard;       // resolved: write TensorBoard event files (rank 0)
    const char *logging_dir;      // --logging_dir, else $TENSORBOARD_LOGGING_DIR; NULL: OUTPUT/runs/<date>_<host>
    char *logging_dir_owned;      // $TENSORBOARD_LOGGING_DIR with ~ expanded (malloc'd), or NULL
    const char *eval_strategy;    // no|steps|epoch
    double eval_delay;            // no evaluation before this step (steps) or epoch (epoch)
    int eval_on_start;            // evaluate before the first step
    const char *save_strategy;    // no|steps|epoch
    int save_total_limit;         // keep the newest N checkpoint-N (and the best one); 0: every one (trainer/retention.h)
    int save_only_model;          // checkpoints without the optimizer's state (they cannot be resumed)
    int save_on_each_node;        // checkpoints on each host's own disk (HF's; node-local storage)
    int load_best_model_at_end;   // the best checkpoint's weights are loaded back after training
    const char *metric_for_best_model;  // "loss", "eval_bleu", ... (NULL: no best-model tracking)
    int greater_is_better;        // 1/0; -1: from the metric's name (HF: not ending in "loss")
    const char *include_num_input_tokens_seen;  // no|all|non_padding (HF 5.17; true: all, false: no)

    // ---- hardware and precision ----
    const char *device;           // cpu|cuda (resolved: cuda when built with CUDA and a GPU is visible)
    const char *device_from;      // where it came from: "--device", "--use_cpu", "default: ..."
    int use_cpu;                  // --use_cpu / --no_cuda: --device cpu
    int fp16, bf16;
    const char *fp16_from, *bf16_from;  // "--fp16", "--fp16_full_eval", "FILE: fp16.enabled" (NULL: off)
    int fp16_full_eval, bf16_full_eval; // evaluation in 16 bits
    int tf32;                     // --tf32: 1 TF32 tensor cores for fp32 GEMMs, 0 exact fp32, -1 not given (exact)
    int fp8;                      // --fp8: the blocks' linears of training steps in fp8 (model/fp8.h)
    const char *fp8_bf16;         // --fp8_bf16: linears kept in bf16 (t5_fp8_parse_keep's names)
    int fp8_amax_history, fp8_margin;  // --fp8_amax_history (16), --fp8_margin (0)
    unsigned fp8_keep;            // --fp8_bf16 parsed (T5Fp8Keep bits)
    int ddp_timeout;              // seconds a collective may take (T5_NCCL_TIMEOUT; HF's 1800)
    double max_gpu_memory;        // GiB cap on everything train_t5 allocates on the GPU (0: none)
    int gradient_checkpointing;   // recompute each block's activations in backward
    int checkpoint_sub_batch;     // with it: rows each block runs at a time (T5Model.sub_batch; 0: all)
    const char *deepspeed;        // DeepSpeed config: a file's path, or what messages call it when it is text
    char *deepspeed_text;         // the config's JSON when --deepspeed is JSON/base64 text or accelerate's
                                  // plugin config (deepspeed/ds_source.h, accelerate_env.h); NULL: a file
    const char *sharded_ddp;      // HF 4.x's FairScale options, space-separated: simple, zero_dp_2, zero_dp_3,
                                  // offload (NULL or "": not given); check_sharded_ddp maps them:
    int sharded_stage;            //   the ZeRO stage they stand for (0: not given; simple, zero_dp_2: 2; zero_dp_3: 3)
    int sharded_offload;          //   offload: the optimizer state on the host (zero_dp_3: the parameters too)
    const char *resume_from_checkpoint;  // checkpoint-N directory to continue from (NULL: start fresh)
    int num_gpus;                 // --num_gpus N: start N GPU ranks on this host (0: not given)
    int local_rank;               // --local_rank N: this rank's GPU, as launchers pass it (-1: not given)
    int explain;                  // --explain: dry run: print the plan (trainer/estimate.c), exit 0
    const char *explain_png;      // --explain_png FILE: with --explain, draw the plan (estimate_draw_png)
    int find_max_batch;           // --find_max_batch: with --explain, the largest batch whose plan fits --max_gpu_memory

    unsigned ds_flag_mask;        // DS_FLAG_* of the flags given (for --deepspeed's "auto" and conflicts)
    char *notices;                // "NOTICE: ..." lines for the flags accepted that change nothing (NULL: none)
    int help;
} TrainArgs;

#define TRAIN_ARGS_MAX_TOKENS 1048576  // the longest sequence a length flag (or file key) may ask for

// The generation settings a flag gave (by any of its names); --val_max_target_length counts
// for the length, as run_translation.py passes it to evaluate().
enum { GEN_FLAG_NUM_BEAMS = 1u, GEN_FLAG_MAX_LENGTH = 2u, GEN_FLAG_EARLY_STOPPING = 4u, GEN_FLAG_LENGTH_PENALTY = 8u };

// How train_t5 takes a flag (the table in args.c; docs/TRAINER.md's flag table says the same).
typedef enum {
    ARG_IMPLEMENTED = 0,  // HF's meaning
    ARG_ALIAS,            // another name of an implemented flag (help: "alias of --NAME")
    ARG_NOOP,             // accepted; changes nothing here (help: why); a notice at start-up
    ARG_REFUSED,          // an error naming the reason (help), unless its value is one of `accepted`
} ArgRole;

// HF defaults.
TrainArgs train_args_default(void);
// Parse argv[start..) into *a: unknown flags are one error naming all of them (each with a
// suggestion), refused flags one error naming each with its reason; then the whole set is
// validated and the device default resolved (cuda when a GPU is visible).
void train_args_parse(TrainArgs *a, int argc, char **argv, int start);
// --deepspeed's precision: fp16/bf16 "enabled": true in the file turns it on, named as
// "FILE: fp16.enabled" in every message about it. Call before train_args_check_device.
void train_args_take_ds_precision(TrainArgs *a, const DsConfig *loaded);
// The device checks, in one place: --device, fp16/bf16 (from a flag or the config),
// --max_gpu_memory and --num_gpus against the device and the GPUs visible; each error says
// where the setting came from.
void train_args_check_device(const TrainArgs *a);
// --explain plans the run it is given on any machine: a line that asks for a GPU (fp16/bf16 from a
// flag or the config, --num_gpus, --max_gpu_memory, --tf32) and leaves --device at its default is
// planned for a GPU where none is visible, saying so in device_from. Before train_args_check_device.
void train_args_resolve_dry_run_device(TrainArgs *a);
// Every implemented flag's resolved value, one "--name value" line each (malloc'd), but the
// ones that may differ between ranks (--local_rank, and paths: --output_dir, --logging_dir,
// --cache_dir, --resume_from_checkpoint, which a node-local run finds on each host's own disk):
// the ranks of one job compare it at start (trainer.c check_ranks_agree).
char *train_args_fingerprint(const TrainArgs *a);
// What the run asks of its GPU (bf16, TF32) against that GPU: one-line refusals naming the
// setting's source and the GPU's compute capability (kernels/gpu_arch.h).
void train_args_check_gpu(const TrainArgs *a, const GpuInfo *g);
// Append one start-up line (printed by rank 0 after the device line).
void train_args_add_notice(TrainArgs *a, const char *line);
// The target length of a split's labels: val/test_max_target_length, else max_target_length.
int train_args_label_length(const TrainArgs *a, int is_test);
void train_args_print_help(int usage_line);  // usage_line: start with the usage line
// The role of flag `name` (without "--"): 1 and *role, *help (its help or reason) and
// *accepted ("v1|v2": the values a refused flag accepts; NULL: none) when train_t5 knows it.
int train_args_flag_role(const char *name, ArgRole *role, const char **help, const char **accepted);
// The k-th flag's name (table order), NULL past the end.
const char *train_args_flag_at(int k);
