// cmd/info.c: `train_t5 info --model M`: the model's config, which weights file loaded, its
// parameter count and mean |w| (a checksum to compare two loads by).
#include "cmd.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/fileio.h"
#include "../model/hf_dir.h"
#include "model_tool.h"

int cmd_run_info(int argc, char **argv) {
    ModelToolArgs args;
    if (!model_tool_parse_args(&args, argc, argv)) return 0;
    const ModelToolArgs *a = &args;
    T5Model m;
    model_tool_load_model(&m, a);
    const T5Config *c = &m.cfg;
    printf("model        %s\n", a->model);
    const char *wf = path_is_dir(a->model) && strcmp(a->init, "random") != 0 ? hf_weights_file(a->model) : NULL;
    if (wf) printf("weights      %s\n", wf);  // which file loaded: safetensors is preferred to a .bin
    printf("d_model %d  d_kv %d  heads %d  d_ff %d  layers %d/%d  vocab %d  ffn %s\n", c->d_model, c->d_kv,
           c->num_heads, c->d_ff, c->num_layers, c->num_decoder_layers, c->vocab_size, c->feed_forward_proj);
    printf("lm head      %s, %s\n", c->untied_lm_head ? "untied (lm_head.weight)" : "tied to shared.weight",
           c->scale_decoder_outputs ? "decoder output scaled by d_model^-0.5" : "no output scaling");
    printf("parameters   %zu in %d tensors (%.1f MiB fp32)\n", m.lay.total, m.lay.count,
           m.lay.total * 4.0 / (1 << 20));
    double sum = 0;
    const float *p = m.params;
    for (size_t i = 0; i < m.lay.total; i++) sum += fabs(p[i]);
    printf("mean |w|     %.9g\n", sum / (double)m.lay.total);
    t5_free(&m);
    return 0;
}
