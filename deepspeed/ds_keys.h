// deepspeed/ds_keys.h: the DeepSpeed config's key table, shared by the loader and the
// printers (ds_config.c) and defined in ds_keys.c: one row per key DeepSpeed reads, with its
// kind, bounds, default and one-line doc. Internal to deepspeed/.
#pragma once
#include <math.h>
#include <stddef.h>

#include "ds_config.h"

typedef enum {
    K_SECTION,     // a JSON object; `off` (if any) is an int set to 1 when present
    K_INT,         // DsInt: integral number in [lo, hi]
    K_NUM,         // DsNum: number in [lo, hi] (lo exclusive with F_LO_OPEN)
    K_BOOL,        // DsBool
    K_STAGE,       // ZeroStage: integer in [lo, hi]
    K_ENUM,        // a string from `names`, into an int-sized enum
    K_PATH,        // string (or null) into char[DS_PATH_MAX]
    K_STR,         // DsStr: a string, "" allowed (null with F_NULL)
    K_STRLIST,     // DsStrList: a list of non-empty strings
    K_BETAS,       // [beta1, beta2] or "auto"
    K_ONLY_BOOL,   // accepted only at DeepSpeed's default `dflt` (what train_t5 does); no storage
    K_ONLY_NUM,
    K_UNSUPPORTED, // any value: error; doc says what to use instead
} Kind;

enum {
    F_AUTO = 1,     // "auto" allowed (HF Trainer fills it in)
    F_LO_OPEN = 2,  // lo bound exclusive
    F_NOOP = 4,     // accepted, changes nothing here (documented why)
    F_NOCASE = 8,   // K_ENUM compares case-insensitively (DeepSpeed lower-cases optimizer names)
    F_NULL = 16,    // null accepted (DeepSpeed's None: the default); K_INT, K_BOOL, K_STR
    F_SECRET = 32,  // K_STR: never printed (a NOTICE says "(set)")
};

typedef struct {
    const char *name;
    int value;
} EnumName;

typedef struct {
    const char *path;            // dotted key path
    Kind kind;
    size_t off;                  // into DsConfig
    double lo, hi, dflt;
    unsigned fl;
    const EnumName *names;       // K_ENUM, NULL-terminated
    const char *const *others;   // K_ENUM: values DeepSpeed knows and train_t5 does not support
    unsigned sched;              // scheduler.params: bit per DsSchedulerType taking the key
    const char *dflt_text;       // the default in words, where `dflt` is not it
    const char *doc;
} KeySpec;

#define NO_OFF ((size_t)-1)
#define BIG 9007199254740992.0   // 2^53: integers a double holds exactly
#define INF HUGE_VAL
#define SB(t) (1u << (t))
#define S_WARM (SB(DS_SCHEDULER_WARMUP_LR) | SB(DS_SCHEDULER_WARMUP_DECAY_LR))
#define S_TOTAL (SB(DS_SCHEDULER_WARMUP_DECAY_LR) | SB(DS_SCHEDULER_WARMUP_COSINE_LR))
#define S_ALL (S_WARM | SB(DS_SCHEDULER_WARMUP_COSINE_LR))


// Old names: (parent, old key, new key). Giving both is an error.
typedef struct {
    const char *parent, *old_key, *new_key;
} DsKeyAlias;

extern const KeySpec k_keys[];
extern const int k_n_keys;
#define N_KEYS k_n_keys
extern const DsKeyAlias k_aliases[];
extern const int k_n_aliases;
extern const EnumName k_optimizer_names[], k_scheduler_names[], k_warmup_names[], k_device_names[];
extern const char *const k_optimizer_others[], *const k_scheduler_others[], *const k_device_others[];

const KeySpec *ds_key_find(const char *path);  // NULL: not a key DeepSpeed reads
