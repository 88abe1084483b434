// model/load.c: --model argument -> T5Model with parameters on the backend.
#include "load.h"

#include <pthread.h>
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

// The fp32 weights of cfg's layout into host (lay.total floats).
static void host_weights_make(const char *model_arg, const T5Config *cfg, const ParamLayout *lay, int from_file,
                              unsigned long long seed, float *host) {
    if (from_file) {
        hf_load_weights(model_arg, cfg, lay, host);
        const char *file = hf_weights_file(model_arg);  // said when it is not the usual safetensors
        if (file && strncmp(file, "model.safetensors", strlen("model.safetensors")) != 0)
            fprintf(stderr, "NOTICE: %s: weights from %s (PyTorch format, read without torch)\n", model_arg, file);
    } else {
        fprintf(stderr, "NOTICE: %s: random initialization (seed %llu), not pretrained weights\n", model_arg, seed);
        params_init_random(cfg, lay, host, seed);
    }
}

struct HostWeightsJob {
    pthread_t thread;
    char *model_arg;
    T5Config cfg;
    ParamLayout lay;
    int from_file;
    unsigned long long seed;
    float *host;  // lay.total floats
};

static void *host_weights_job_run(void *arg) {
    HostWeightsJob *j = arg;
    host_weights_make(j->model_arg, &j->cfg, &j->lay, j->from_file, j->seed, j->host);
    return NULL;
}

HostWeightsJob *model_weights_begin(const char *model_arg, const T5Config *cfg, int has_weights,
                                    ModelLoadOptions opt) {
    if (!has_weights && !opt.init_random) return NULL;  // model_load_resolved says why
    if (opt.init_random && opt.device_init) return NULL;  // nothing to make on the host
    if (opt.shards_init) return NULL;                     // zero_init_checkpoint reads the shards
    HostWeightsJob *j = callocCheck(1, sizeof *j);
    size_t len = strlen(model_arg) + 1;
    j->model_arg = mallocCheck(len);
    memcpy(j->model_arg, model_arg, len);
    j->cfg = *cfg;
    j->from_file = has_weights && !opt.init_random;
    if (j->from_file) j->cfg.untied_lm_head = hf_probe_untied(model_arg);  // as model_load_resolved decides
    params_build_layout(&j->cfg, &j->lay);
    j->seed = opt.seed;
    j->host = mallocCheck(j->lay.total * sizeof(float));
    int rc = pthread_create(&j->thread, NULL, host_weights_job_run, j);
    if (rc != 0) t5_fail("model_weights_begin: pthread_create failed (%s); HINT: the system is out of threads or "
                         "memory", strerror(rc));
    return j;
}

// Waits for the job and takes its weights (the layout must be the model's).
static float *host_weights_job_join(HostWeightsJob *j, const ParamLayout *lay) {
    int rc = pthread_join(j->thread, NULL);
    if (rc != 0) t5_fail("model_load: pthread_join failed (%s)", strerror(rc));
    if (j->lay.total != lay->total)
        t5_die(__FILE__, __LINE__, "model_load: the weights job was begun with another config",
               "a bug in the caller: begin the job with the config passed to model_load_resolved");
    float *host = j->host;
    params_free_layout(&j->lay);
    free(j->model_arg);
    free(j);
    return host;
}

void model_weights_discard(HostWeightsJob *job) {
    if (!job) return;
    ParamLayout lay = job->lay;  // the job's own: the join's check passes
    free(host_weights_job_join(job, &lay));
}

void model_load_resolved(T5Model *m, const char *model_arg, const T5Config *resolved, int has_weights,
                         const Backend *be, ModelLoadOptions opt) {
    T5Config cfg = *resolved;
    if (!has_weights && !opt.init_random)
        t5_fail("--model \"%s\" is a preset with no local weights; pass a model directory, or --init random to "
                "train from a random initialization", model_arg);
    // from the weights file; a checkpoint read from its shards alone (a node-local one on a host
    // without model.safetensors) has config.json's (train_t5 writes tie_word_embeddings as it is)
    if (has_weights && !opt.init_random && (!opt.shards_init || hf_has_weights_file(model_arg)))
        cfg.untied_lm_head = hf_probe_untied(model_arg);
    if (opt.defer_weights && !opt.host_weights)
        t5_die(__FILE__, __LINE__, "model_load: defer_weights without host_weights would lose the weights",
               "a bug in the caller: pass host_weights and hand them to zero_init");
    if (opt.device_init && !(opt.init_random && opt.defer_weights && opt.host_weights && !opt.job))
        t5_die(__FILE__, __LINE__, "model_load: device_init needs init_random, defer_weights and host_weights, no job",
               "a bug in the caller: set them, then call zero_init_random");
    if (opt.shards_init && (opt.init_random || opt.device_init || !opt.defer_weights || !opt.host_weights || opt.job))
        t5_die(__FILE__, __LINE__, "model_load: shards_init needs defer_weights and host_weights, no random init, no job",
               "a bug in the caller: set them, then call zero_init_checkpoint");
    if (opt.defer_weights) t5_init_layout(m, &cfg, be);
    else t5_init(m, &cfg, be);
    if (opt.shards_init) {
        *opt.host_weights = NULL;  // zero_init_checkpoint reads them where each buffer lives
        return;
    }
    if (opt.device_init) {
        fprintf(stderr, "NOTICE: %s: random initialization (seed %llu, made on the %s), not pretrained weights\n",
                model_arg, opt.seed, be->device_memory ? "device" : "host");
        *opt.host_weights = NULL;  // zero_init_random makes them
        return;
    }
    float *host;
    if (opt.job) {
        host = host_weights_job_join(opt.job, &m->lay);
    } else {
        host = mallocCheck(m->lay.total * sizeof(float));
        host_weights_make(model_arg, &m->cfg, &m->lay, has_weights && !opt.init_random, opt.seed, host);
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
