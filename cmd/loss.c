// cmd/loss.c: `train_t5 loss --model M --batch F [--label_smoothing x]`: the loss of a batch
// file (safetensors ids), plain and label-smoothed, on the CPU reference.
#include "cmd.h"

#include <stdio.h>

#include "../common/check.h"
#include "../data/batch_file.h"
#include "model_tool.h"

int cmd_run_loss(int argc, char **argv) {
    ModelToolArgs args;
    if (!model_tool_parse_args(&args, argc, argv)) return 0;
    const ModelToolArgs *a = &args;
    if (!a->batch) t5_fail("loss: --batch FILE (a safetensors file with input_ids, attention_mask, labels) is required");
    T5Model m;
    model_tool_load_model(&m, a);
    m.dropout_p = 0.0f;  // evaluation
    BatchFile bf;
    batch_file_load(&bf, a->batch, m.cfg.vocab_size, m.cfg.decoder_start_token_id, m.cfg.pad_token_id);
    t5_plan_activations(&m, bf.batch.B, bf.batch.S, bf.batch.T);
    long n = 0;
    double plain = t5_forward(&m, &bf.batch, 0.0f, &n);
    double smooth = t5_forward(&m, &bf.batch, a->label_smoothing, &n);
    printf("loss %.9g loss_smoothed %.9g label_smoothing %g tokens %ld\n", plain / n, smooth / n, a->label_smoothing, n);
    batch_file_free(&bf);
    t5_free(&m);
    return 0;
}
