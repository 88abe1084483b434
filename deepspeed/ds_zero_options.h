// deepspeed/ds_zero_options.h: a resolved DeepSpeed config's zero_optimization section as the
// options zero/ takes (zero/options.h ZeroOptions): the one place that translates DeepSpeed's
// keys for zero/, so zero/ knows nothing of DeepSpeed's config.
#pragma once
#include "../zero/options.h"
#include "ds_config.h"

// The zero_optimization section of a resolved DeepSpeed config as ZeroOptions; what DeepSpeed
// has and this build does not (NVMe parameter offload, parameter offload without optimizer
// offload, a partial offload ratio) is refused by name, with the config's path.
ZeroOptions zero_options_from_config(const DsConfig *c, const char *path);
