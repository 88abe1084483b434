// model/load.c: --model argument -> T5Model with parameters on the backend.
#include "load.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/half.h"
#include "hf_dir.h"

void model_load(T5Model *m, const char *model_arg, const Backend *be, ModelLoadOptions opt) {
    T5Config cfg;
    int has_weights = hf_resolve_model(model_arg, &cfg);
    model_load_resolved(m, model_arg, &cfg, has_weights, be, opt);
}

void model_load_resolved(T5Model *m, const char *model_arg, const T5Config *resolved, int has_weights,
                         const Backend *be, ModelLoadOptions opt) {
    T5Config cfg = *resolved;
    if (!has_weights && !opt.init_random)
        t5_fail("--model \"%s\" is a preset with no local weights; pass a model directory, or --init random to "
                "train from a random initialization", model_arg);
    if (has_weights && !opt.init_random) cfg.untied_lm_head = hf_probe_untied(model_arg);
    if (opt.defer_weights && !opt.host_weights)
        t5_die(__FILE__, __LINE__, "model_load: defer_weights without host_weights would lose the weights",
               "a bug in the caller: pass host_weights and hand them to zero_init");
    if (opt.defer_weights) t5_init_layout(m, &cfg, be);
    else t5_init(m, &cfg, be);
    float *host = mallocCheck(m->lay.total * sizeof(float));
    if (has_weights && !opt.init_random) {
        hf_load_weights(model_arg, &m->cfg, &m->lay, host);
    } else {
        fprintf(stderr, "NOTICE: %s: random initialization (seed %llu), not pretrained weights\n", model_arg,
                opt.seed);
        params_init_random(&m->cfg, &m->lay, host, opt.seed);
    }
    size_t n = m->lay.total;
    if (!opt.defer_weights) {
        if (be->act_dtype == DTYPE_F32) {
            be->to_device(m->params, host, n * sizeof(float));
        } else {  // mixed precision: a 16-bit copy to compute with (the fp32 master is ZeRO's: zero_init)
            uint16_t *half = mallocCheck(n * sizeof(uint16_t));
            half_from_f32_array(half, host, n, be->act_dtype == DTYPE_BF16);
            be->to_device(m->params, half, n * sizeof(uint16_t));
            free(half);
        }
    }
    if (opt.host_weights) *opt.host_weights = host;  // zero_init places the master (and, deferred, the rest)
    else free(host);
}
