// zero/checkpoint_fp8.h: --fp8's scaling state in a checkpoint's index (zero/checkpoint_fp8.c).
#pragma once
#include <cjson/cJSON.h>

#include "../model/t5.h"

// Add "fp8" (the step count, every scale and the amax history) to index when m runs --fp8.
void zero_ckpt_fp8_add(cJSON *index, const T5Model *m);
// Restore m's --fp8 state from index's "fp8" (index NULL: a checkpoint layout without one).
// What cannot be restored (no state, another slot layout or history length) is said by
// main_rank in a NOTICE and leaves current scaling for the first step; a malformed state fails
// naming path.
void zero_ckpt_fp8_restore(const cJSON *index, const char *path, T5Model *m, int main_rank);
