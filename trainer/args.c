// trainer/args.c: argv parsed against the flag table (args_table.c), then the checks and
// resolutions of the whole set: required flags, ranges, strategies, device, precision,
// sampler, launchers (see args.h); and the run's fingerprint of them.
#include "args.h"
#include "args_table.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/flags.h"
#include "../deepspeed/ds_source.h"
#include "../formats/hf_cache.h"
#include "../model/fp8.h"
#include "../comm/launch.h"
#include "../optim/lr_schedule.h"
#include "accelerate_env.h"
#include "device.h"
#include "retention.h"

#define COUNT(x) ((int)(sizeof(x) / sizeof((x)[0])))


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
    TrainFlag *t = train_args_flag_table(a, &n);
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
    if (!a->fp8 && (a->fp8_bf16 || a->fp8_margin || a->fp8_amax_history != T5_FP8_HISTORY_DEFAULT))
        t5_fail("%s is an --fp8 option: add --fp8, or drop it", a->fp8_bf16 ? "--fp8_bf16" : a->fp8_margin ? "--fp8_margin"
                                                                                    : "--fp8_amax_history");
    a->fp8_keep = t5_fp8_parse_keep(a->fp8_bf16, "--fp8_bf16");
    if (a->fp8 && (a->fp8_amax_history < 1 || a->fp8_amax_history > 1024))
        t5_fail("--fp8_amax_history %d: must be in 1..1024 (Transformer Engine's default is 1024, ours %d)",
                a->fp8_amax_history, T5_FP8_HISTORY_DEFAULT);
    if (a->fp8 && (a->fp8_margin < 0 || a->fp8_margin > 30)) t5_fail("--fp8_margin %d: must be in 0..30", a->fp8_margin);
    if (a->fp8 && a->fp16)
        t5_fail("--fp8 with %s: fp8 GEMMs run with bf16 activations (no loss scaler); HINT: --fp8 --bf16", a->fp16_from);
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
    TrainFlag *t = train_args_flag_table(&copy, &n);
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
