// trainer/accelerate_env.c: what `accelerate launch` tells HF's Trainer through the environment
// (accelerate_env.h), read as transformers 5.17 + accelerate 1.16 read it.
#include "accelerate_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <errno.h>

#include "../common/check.h"
#include "../common/json_read.h"

// accelerate's str_to_bool: y/yes/t/true/on/1 and n/no/f/false/off/0, any case; -1 when unset
// (or empty), a one-line error naming the variable for anything else.
static int env_bool(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    static const char *const yes[] = {"y", "yes", "t", "true", "on", "1"}, *const no[] = {"n", "no", "f", "false", "off", "0"};
    for (int i = 0; i < 6; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    t5_fail("%s=\"%s\": expected true or false (as accelerate reads it)", name, v);
}

static const char *env_str(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "none") != 0 ? v : NULL;  // accelerate writes "none" for unset paths
}

// The config accelerate's DeepSpeedPlugin builds from its variables when no config file is named
// (accelerate/utils/dataclasses.py DeepSpeedPlugin.__post_init__): stage (2 by default), offload
// devices and NVMe paths, accumulation and clipping ("auto": the flags'), the 16-bit save.
static cJSON *plugin_config(void) {
    const char *stage = env_str("ACCELERATE_DEEPSPEED_ZERO_STAGE"), *ga = env_str("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    const char *clip = env_str("ACCELERATE_GRADIENT_CLIPPING");
    const char *opt_dev = env_str("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"),
               *par_dev = env_str("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE");
    const char *opt_nvme = env_str("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"),
               *par_nvme = env_str("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH");
    int save16 = env_bool("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL");
    // numbers go in as JSON numbers, so that the config loader checks them as it checks a file's
    char *end = NULL;
    long st = stage ? strtol(stage, &end, 10) : 2;
    if (stage && (*end || st < 0 || st > 3))
        t5_fail("ACCELERATE_DEEPSPEED_ZERO_STAGE=\"%s\": expected 0, 1, 2 or 3 (accelerate launch --zero_stage)", stage);
    char ga_json[64] = "\"auto\"", clip_json[64] = "\"auto\"";
    if (ga && strcmp(ga, "auto") != 0) {
        long g = strtol(ga, &end, 10);
        if (*end || g < 1) t5_fail("ACCELERATE_GRADIENT_ACCUMULATION_STEPS=\"%s\": expected a whole number >= 1 or auto", ga);
        snprintf(ga_json, sizeof ga_json, "%ld", g);
    }
    if (clip && strcmp(clip, "auto") != 0) {
        double x = strtod(clip, &end);
        if (*end || !(x >= 0)) t5_fail("ACCELERATE_GRADIENT_CLIPPING=\"%s\": expected a number >= 0 or auto", clip);
        snprintf(clip_json, sizeof clip_json, "%.17g", x);
    }
    const char *devs[2] = {opt_dev ? opt_dev : "none", par_dev ? par_dev : "none"}, *nvme[2] = {opt_nvme, par_nvme};
    char off[2][1200];
    for (int k = 0; k < 2; k++) {
        if (strchr(devs[k], '"') || (nvme[k] && (strchr(nvme[k], '"') || strchr(nvme[k], '\\'))))
            t5_fail("ACCELERATE_DEEPSPEED_OFFLOAD_%s_%s: a quote or backslash in it; HINT: a plain device name and path",
                    k ? "PARAM" : "OPTIMIZER", strchr(devs[k], '"') ? "DEVICE" : "NVME_PATH");
        if (!strcmp(devs[k], "nvme") && nvme[k])
            snprintf(off[k], sizeof off[k], "{\"device\": \"nvme\", \"nvme_path\": \"%s\"}", nvme[k]);
        else snprintf(off[k], sizeof off[k], "{\"device\": \"%s\"}", devs[k]);
    }
    char json[4096];
    snprintf(json, sizeof json,
             "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\", "
             "\"gradient_accumulation_steps\": %s, \"gradient_clipping\": %s, \"zero_optimization\": {\"stage\": %ld, "
             "\"offload_optimizer\": %s, \"offload_param\": %s, \"stage3_gather_16bit_weights_on_model_save\": %s}}",
             ga_json, clip_json, st, off[0], off[1], save16 == 1 ? "true" : "false");
    cJSON *root = cJSON_Parse(json);
    if (!root) t5_fail("out of memory building accelerate's plugin config");
    return root;
}

// The plugin's value of each setting it maps into a config file (accelerate's
// plugin_to_config_mapping), as JSON text: "auto" where the variable is unset and accelerate
// keeps "auto" (accumulation, clipping), its defaults elsewhere (stage 2, devices "none").
static const struct { const char *var, *path, *fallback; int kind; } k_file_fill[] = {
    {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "gradient_accumulation_steps", "auto", 'i'},
    {"ACCELERATE_GRADIENT_CLIPPING", "gradient_clipping", "auto", 'f'},
    {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "zero_optimization.stage", "2", 'i'},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "zero_optimization.offload_optimizer.device", "none", 's'},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "zero_optimization.offload_param.device", "none", 's'},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "zero_optimization.offload_optimizer.nvme_path", "none", 's'},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "zero_optimization.offload_param.nvme_path", "none", 's'},
    {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "zero_optimization.stage3_gather_16bit_weights_on_model_save",
     "false", 'b'},
};

// The node at a dotted path and its parent (NULL when a level is missing).
static cJSON *config_node(cJSON *root, const char *path, cJSON **parent, char *leaf, size_t cap) {
    cJSON *node = root;
    *parent = NULL;
    const char *p = path;
    while (node) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= cap) return NULL;
        memcpy(leaf, p, n);
        leaf[n] = '\0';
        *parent = node;
        node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, leaf) : NULL;
        if (!dot) return node;
        p = dot + 1;
    }
    return NULL;
}

// ACCELERATE_DEEPSPEED_CONFIG_FILE as accelerate's DeepSpeedPlugin reads it: its fields from
// the accelerate config file refused beside it (_deepspeed_config_checks), "zero_optimization"
// required, gradient_accumulation_steps 1 when absent, and every "auto" of the mapped keys
// replaced by the plugin's value (fill_match(must_match=False)). The result as JSON text.
static cJSON *file_config(const char *file) {
    const char *fields = getenv("ACCELERATE_CONFIG_DS_FIELDS");
    static const char *const ignored[] = {"gradient_accumulation_steps", "gradient_clipping", "zero_stage",
                                          "offload_optimizer_device", "offload_param_device",
                                          "offload_param_nvme_path", "offload_optimizer_nvme_path",
                                          "zero3_save_16bit_model", "mixed_precision"};
    for (size_t i = 0; fields && i < sizeof ignored / sizeof ignored[0]; i++) {
        const char *hit = strstr(fields, ignored[i]);
        size_t n = strlen(ignored[i]);
        if (hit && (hit == fields || hit[-1] == ',') && (hit[n] == ',' || hit[n] == '\0'))
            t5_fail("ACCELERATE_CONFIG_DS_FIELDS has \"%s\" beside ACCELERATE_DEEPSPEED_CONFIG_FILE=%s: accelerate "
                    "refuses accelerate-config DeepSpeed fields beside a DeepSpeed config file; HINT: put it in %s and "
                    "remove it from the accelerate config", ignored[i], file, file);
    }
    cJSON *root = json_read_file(file, JSON_DUP_REFUSE, "fix the DeepSpeed config's syntax");
    if (!root)
        t5_fail("ACCELERATE_DEEPSPEED_CONFIG_FILE=%s: cannot open it (%s); HINT: the path accelerate launch "
                "--deepspeed_config_file names, from this rank's working directory", file, strerror(errno));
    if (!cJSON_IsObject(root)) t5_fail("%s: expected a JSON object { ... } at the top level", file);
    if (!cJSON_GetObjectItemCaseSensitive(root, "zero_optimization"))
        t5_fail("%s: no \"zero_optimization\" section: accelerate requires one in a config file "
                "(ACCELERATE_DEEPSPEED_CONFIG_FILE); HINT: add \"zero_optimization\": {\"stage\": 2}", file);
    if (!cJSON_GetObjectItemCaseSensitive(root, "gradient_accumulation_steps"))
        cJSON_AddNumberToObject(root, "gradient_accumulation_steps", 1);
    for (size_t i = 0; i < sizeof k_file_fill / sizeof k_file_fill[0]; i++) {
        cJSON *parent;
        char leaf[64];
        cJSON *node = config_node(root, k_file_fill[i].path, &parent, leaf, sizeof leaf);
        if (!node || !cJSON_IsString(node) || strcmp(node->valuestring, "auto") != 0) continue;
        const char *v = getenv(k_file_fill[i].var);
        v = v && *v ? v : k_file_fill[i].fallback;
        cJSON *fill;
        char *end = NULL;
        if (!strcmp(v, "auto") || k_file_fill[i].kind == 's') fill = cJSON_CreateString(v);
        else if (k_file_fill[i].kind == 'b') fill = cJSON_CreateBool(!strcasecmp(v, "true"));
        else {
            double x = strtod(v, &end);
            if (*end || !(x >= 0) || (k_file_fill[i].kind == 'i' && x != (double)(long)x))
                t5_fail("%s=\"%s\": expected %s or auto, to fill \"%s\": \"auto\" of %s", k_file_fill[i].var, v,
                        k_file_fill[i].kind == 'i' ? "a whole number" : "a number >= 0", k_file_fill[i].path, file);
            fill = cJSON_CreateNumber(x);
        }
        if (!fill) t5_fail("out of memory filling %s of %s", k_file_fill[i].path, file);
        cJSON_ReplaceItemInObjectCaseSensitive(parent, leaf, fill);
    }
    return root;
}

// accelerate's DeepSpeedPlugin.set_mixed_precision on the config it owns: the precision's section
// added when absent, the other precision enabled in the config refused, an "auto" enabled filled.
// Then the config as JSON text (malloc'd). `where` names the config in messages.
static char *config_finish(cJSON *root, const TrainArgs *a, const char *where) {
    const char *mp = a->fp16 ? "fp16" : a->bf16 ? "bf16" : "no", *from = a->fp16 ? a->fp16_from : a->bf16_from;
    static const char *const dtypes[2] = {"fp16", "bf16"};
    for (int k = 0; k < 2; k++) {
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, dtypes[k]);
        cJSON *en = cJSON_IsObject(sec) ? cJSON_GetObjectItemCaseSensitive(sec, "enabled") : NULL;
        int want = !strcmp(mp, dtypes[k]);
        if (!want && strcmp(mp, "no") != 0 && en && (cJSON_IsTrue(en) || (cJSON_IsString(en) &&
                                                                          !strcasecmp(en->valuestring, "true"))))
            t5_fail("%s (from %s) against %s: \"%s.enabled\" is true there; accelerate refuses this pair too "
                    "(\"--mixed_precision arg cannot be set to %s when %s is set in the DeepSpeed config file\"); "
                    "HINT: pick one precision", mp, from, where, dtypes[k], mp, dtypes[k]);
        if (!sec) {
            sec = cJSON_AddObjectToObject(root, dtypes[k]);
            if (!sec || !cJSON_AddBoolToObject(sec, "enabled", want))
                t5_fail("out of memory building the config of %s", where);
        } else if (cJSON_IsString(en) && !strcmp(en->valuestring, "auto")) {
            cJSON_ReplaceItemInObjectCaseSensitive(sec, "enabled", cJSON_CreateBool(want));
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    if (!text) t5_fail("out of memory writing the config of %s", where);
    cJSON_Delete(root);
    size_t n = strlen(text) + 1;
    char *out = memcpy(mallocCheck(n), text, n);
    cJSON_free(text);
    return out;
}

// accelerate writes its accumulation into the config; HF's Trainer then requires the flag to
// match it (fill_match: "ds gradient_accumulation_steps=N vs hf gradient_accumulation_steps=M").
// Said here in one line with both sources, instead of as a batch product that does not add up.
static void check_accumulation(const TrainArgs *a) {
    const char *ga = env_str("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
    if (!ga || !strcmp(ga, "auto")) return;
    cJSON *root = cJSON_Parse(a->deepspeed_text);  // the text built or filled above: well formed
    const cJSON *node = root ? cJSON_GetObjectItemCaseSensitive(root, "gradient_accumulation_steps") : NULL;
    long in_config = cJSON_IsNumber(node) ? (long)node->valuedouble : -1;
    cJSON_Delete(root);
    if (in_config == strtol(ga, NULL, 10) && in_config != a->gradient_accumulation_steps)
        t5_fail("ACCELERATE_GRADIENT_ACCUMULATION_STEPS=%s (accelerate launch --gradient_accumulation_steps) puts "
                "gradient_accumulation_steps %ld in the DeepSpeed config, and --gradient_accumulation_steps is %d: HF's "
                "Trainer refuses the mismatch too; HINT: give --gradient_accumulation_steps %ld to train_t5 as well",
                ga, in_config, a->gradient_accumulation_steps, in_config);
}

void accelerate_env_apply(TrainArgs *a) {
    // FSDP and CPU placement first: they decide what the rest means
    if (env_bool("ACCELERATE_USE_FSDP") == 1)
        t5_fail("ACCELERATE_USE_FSDP=true (accelerate launch --use_fsdp): FSDP is not built; HINT: accelerate launch "
                "--use_deepspeed --zero_stage 3 shards the same state (ZeRO-3), or pass --deepspeed with a config");
    if (env_bool("ACCELERATE_USE_CPU") == 1 && !a->use_cpu) {
        a->use_cpu = 1;
        train_args_add_notice(a, "NOTICE: ACCELERATE_USE_CPU=true: --use_cpu (accelerate launch --cpu)");
    }
    // mixed precision: the flags win, as TrainingArguments sets mixed_precision from them
    const char *mp = getenv("ACCELERATE_MIXED_PRECISION");
    if (mp && *mp && !a->fp16 && !a->bf16) {
        // as the flag would: the DeepSpeed config's "auto" follows it, and an explicit false contradicts it
        if (!strcmp(mp, "fp16")) a->fp16 = 1, a->fp16_from = "ACCELERATE_MIXED_PRECISION=fp16", a->ds_flag_mask |= DS_FLAG_FP16;
        else if (!strcmp(mp, "bf16")) a->bf16 = 1, a->bf16_from = "ACCELERATE_MIXED_PRECISION=bf16", a->ds_flag_mask |= DS_FLAG_BF16;
        else if (!strcmp(mp, "fp8")) {  // accelerate's fp8 (Transformer Engine): fp8 GEMMs, bf16 autocast around them
            a->fp8 = 1, a->bf16 = 1, a->bf16_from = "ACCELERATE_MIXED_PRECISION=fp8", a->ds_flag_mask |= DS_FLAG_BF16;
            train_args_add_notice(a, "NOTICE: ACCELERATE_MIXED_PRECISION=fp8: --fp8 --bf16 (train_t5's fp8: delayed "
                                     "scaling of its own, not Transformer Engine; accelerate's fp8 recipe variables "
                                     "are not read)");
        }
        else if (strcmp(mp, "no") != 0)
            t5_fail("ACCELERATE_MIXED_PRECISION=\"%s\": unknown mixed_precision mode; choose between no, fp16, bf16 and "
                    "fp8 (accelerate's list)", mp);
    }
    const char *dynamo = getenv("ACCELERATE_DYNAMO_BACKEND");
    if (dynamo && *dynamo && strcasecmp(dynamo, "no") != 0)
        train_args_add_notice(a, "NOTICE: ACCELERATE_DYNAMO_BACKEND is accepted and changes nothing here: train_t5's "
                                 "kernels are compiled C/CUDA (there is no torch.compile)");
    // other parallelisms accelerate can launch: not built, and training without them would mislead
    if (env_bool("ACCELERATE_USE_MEGATRON_LM") == 1)
        t5_fail("ACCELERATE_USE_MEGATRON_LM=true (accelerate launch --use_megatron_lm): Megatron-LM tensor/pipeline "
                "parallelism is not built; HINT: accelerate launch --use_deepspeed (ZeRO shards the state instead)");
    if (env_bool("ACCELERATE_USE_PARALLELISM_CONFIG") == 1)
        t5_fail("ACCELERATE_USE_PARALLELISM_CONFIG=true (accelerate launch --use_parallelism_config): tensor and "
                "context parallelism are not built; HINT: data parallelism with ZeRO (accelerate launch "
                "--use_deepspeed)");
    if (env_bool("ACCELERATE_DEBUG_MODE") == 1)
        train_args_add_notice(a, "NOTICE: ACCELERATE_DEBUG_MODE=true is accepted and changes nothing here: its "
                                 "collective shape checks are not built; the ranks' resolved plans are compared at "
                                 "start instead");
    const char *affinity = getenv("ACCELERATE_CPU_AFFINITY");
    if (affinity && !strcmp(affinity, "1"))
        train_args_add_notice(a, "NOTICE: ACCELERATE_CPU_AFFINITY=1 is accepted and changes nothing here: no rank is "
                                 "pinned to CPU cores (numactl or taskset around ./train_t5 does it)");
    // DeepSpeed through accelerate's plugin: only when --deepspeed is not given (TrainingArguments
    // takes --deepspeed first)
    if (env_bool("ACCELERATE_USE_DEEPSPEED") != 1) return;
    if (env_bool("ACCELERATE_DEEPSPEED_ZERO3_INIT") == 1)
        train_args_add_notice(a, "NOTICE: ACCELERATE_DEEPSPEED_ZERO3_INIT=true is accepted and changes nothing here: "
                                 "deepspeed.zero.Init builds torch modules already partitioned; train_t5 loads the "
                                 "weights into host memory and each ZeRO-3 rank places only its partition on the "
                                 "device (docs/ZERO.md, \"Set-up\")");
    if (env_str("ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"))
        train_args_add_notice(a, "NOTICE: ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES is accepted and changes nothing "
                                 "here: T5 has no mixture-of-experts layers");
    if (a->deepspeed) {
        train_args_add_notice(a, "NOTICE: ACCELERATE_USE_DEEPSPEED=true and --deepspeed: the --deepspeed config is "
                                 "used (as HF's Trainer does); the ACCELERATE_DEEPSPEED_* variables are not read");
        return;
    }
    const char *file = env_str("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    char line[1400];
    if (file) {
        a->deepspeed = file;
        a->deepspeed_text = config_finish(file_config(file), a, file);
        snprintf(line, sizeof line, "NOTICE: ACCELERATE_USE_DEEPSPEED=true: the DeepSpeed config is "
                 "ACCELERATE_DEEPSPEED_CONFIG_FILE=%s (accelerate launch --deepspeed_config_file); its explicit "
                 "values win, and its \"auto\" stage, offload, accumulation and clipping take the "
                 "ACCELERATE_DEEPSPEED_* variables, as accelerate fills them", file);
        train_args_add_notice(a, line);
    } else {
        a->deepspeed_text = config_finish(plugin_config(), a, ACCELERATE_PLUGIN_LABEL);
        a->deepspeed = ACCELERATE_PLUGIN_LABEL;
        snprintf(line, sizeof line, "NOTICE: ACCELERATE_USE_DEEPSPEED=true without a config file: the config "
                 "accelerate's DeepSpeedPlugin builds from its variables: %.1200s", a->deepspeed_text);
        train_args_add_notice(a, line);
    }
    check_accumulation(a);
}
