// cmd/convert.c: `train_t5 convert --model M --output_dir D [--dtype f32|f16|bf16]`: the model
// re-saved as a Hugging Face directory.
#include "cmd.h"

#include <stdio.h>

#include "../common/check.h"
#include "../model/hf_dir.h"
#include "model_tool.h"

int cmd_run_convert(int argc, char **argv) {
    ModelToolArgs args;
    if (!model_tool_parse_args(&args, argc, argv)) return 0;
    const ModelToolArgs *a = &args;
    if (!a->output_dir) t5_fail("convert: --output_dir is required");
    StDtype dt = model_tool_parse_dtype(a->dtype);
    T5Model m;
    model_tool_load_model(&m, a);
    hf_save_model(a->output_dir, &m.cfg, &m.lay, m.params, dt);
    printf("saved %s (%zu parameters, %s)\n", a->output_dir, m.lay.total, st_dtype_name(dt));
    t5_free(&m);
    return 0;
}
