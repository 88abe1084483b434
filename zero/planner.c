// zero/planner.c: memory plan and model FLOPs (see planner.h).
#include "planner.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "../common/check.h"

#include "../model/fp8.h"
#include "../model/kv_decoder.h"
#include "../model/params.h"
#include "../model/t5.h"
#include "zero.h"
#include "../common/t5_env.h"

MemPlan planner_memory(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int gradient_checkpointing, int window) {
    MemPlan p = {0};
    ParamLayout lay;
    params_build_layout(cfg, &lay);
    size_t n = lay.total, e = act_dtype == DTYPE_F32 ? 4 : 2;
    params_free_layout(&lay);
    p.params = n * e;
    p.grads = n * e;
    p.master = e == 4 ? 0 : n * 4;
    p.moments = 2 * n * 4;
    p.activations = t5_activation_bytes(cfg, act_dtype, B, S, T, gradient_checkpointing ? T5_ACTS_CHECKPOINT : T5_ACTS_TRAIN,
                                        window);
    // attention scratch: permuted q,k,v,out and their gradients, probabilities with
    // dropout, the dS buffer; embedding-gradient sort; 32 MiB GEMM workspace
    // (the attention runs inside the blocks: one checkpoint window's rows at a time)
    size_t HK = (size_t)cfg->num_heads * cfg->d_kv, M = (size_t)(S > T ? S : T);
    size_t Bw = gradient_checkpointing && window > 0 && window < B ? (size_t)window : (size_t)B;
    p.workspace = Bw * M * HK * e * 8 + Bw * cfg->num_heads * M * M * e * 2 + (size_t)B * M * 16 + ((size_t)32 << 20);
    p.total = p.params + p.grads + p.master + p.moments + p.activations + p.workspace;
    return p;
}

ZeroPlan planner_memory_zero(const T5Config *cfg, Dtype act_dtype, int B, int S, int T, int gradient_checkpointing,
                             int window, int stage, int world, int offload_optimizer) {
    ZeroOptions o = zero_options_stage(stage);
    o.offload_optimizer = offload_optimizer;
    return planner_memory_zero_opts(cfg, act_dtype, B, S, T, gradient_checkpointing, window, &o, world);
}

// Evaluation only (zero_init without an optimizer): no gradients, master weights or moments,
// a forward-only activation plan (T5_ACTS_INFERENCE); of stage 2-3's work buffers only
// stage 3's gathered weights remain.
static void plan_drop_training(ZeroPlan *z, const T5Config *cfg, Dtype act_dtype, const ZeroOptions *o, int stage,
                               int B, int S, int T) {
    z->gpu.grads = z->gpu.master = z->gpu.moments = 0;
    z->gpu.activations = t5_activation_bytes(cfg, act_dtype, B, S, T, T5_ACTS_INFERENCE, 0);
    z->gpu.zero_work = 0;
    z->host = 0;
    if (stage >= 3) {
        ParamLayout lay;
        params_build_layout(cfg, &lay);
        Stage3Buffers b = zero_stage3_buffers(&lay, o);
        z->gpu.zero_work = ((size_t)b.n_pool * b.pool_elems + b.persist_elems) * (act_dtype == DTYPE_F32 ? 4 : 2);
        params_free_layout(&lay);
    }
}

ZeroPlan planner_memory_zero_opts(const T5Config *cfg, Dtype act_dtype, int B, int S, int T,
                                  int gradient_checkpointing, int window, const void *zero_options, int world) {
    const ZeroOptions *o = zero_options;
    int stage = o->stage, offload_optimizer = o->offload_optimizer;
    ZeroPlan z = {0};
    z.gpu = planner_memory(cfg, act_dtype, B, S, T, gradient_checkpointing, window);
    size_t e = act_dtype == DTYPE_F32 ? 4 : 2;
    size_t n = z.gpu.params / e, part = (n + (size_t)world - 1) / (size_t)world;  // elements per rank
    if (stage >= 1) {  // optimizer states: master weights and moments of the owned range only
        z.gpu.master = z.gpu.master ? part * 4 : 0;
        z.gpu.moments = 2 * part * 4;
    }
    if (stage >= 2) {
        // the partition, plus (zero/zero.c) the embedding's gradient and the largest other unit's
        ParamLayout lay;
        params_build_layout(cfg, &lay);
        size_t shared = 0, largest = 0;
        for (int u = 0; u < lay.n_units; u++) {
            size_t k = lay.units[u].hi - lay.units[u].lo;
            if (u == lay.unit_shared) shared = k;
            else if (k > largest) largest = k;
        }
        z.gpu.grads = part * e;
        z.gpu.zero_work = (shared + 2 * largest) * e;  // two work buffers take turns
        if (offload_optimizer && !o->inference) {  // the partition's gradient streams to host memory
            z.gpu.grads = 0;
            z.host += part * e;
        }
        if (stage >= 3) {  // the gather pool and the persistent units (zero/params_fetch.c)
            Stage3Buffers b = zero_stage3_buffers(&lay, o);
            z.gpu.params = part * e;
            z.gpu.zero_work += ((size_t)b.n_pool * b.pool_elems + b.persist_elems) * e;
            if (o->offload_param) {  // the partition in host memory; one unit's piece goes up at a time
                z.host += part * e;
                z.gpu.params = 0;
                z.gpu.zero_work += (largest < part ? largest : part) * e;
            }
        }
        params_free_layout(&lay);
    }
    if (offload_optimizer && !o->inference) {  // zero/offload.c: an fp32 master in host memory even for fp32 compute
        size_t state = (stage >= 1 ? part : n) * 4 + z.gpu.moments;
        z.gpu.master = z.gpu.moments = 0;
        if (o->nvme_path[0]) z.nvme = state;  // zero/nvme.h: the state in a file, a chunk in memory
        else z.host += state;
    }
    if (o->inference) plan_drop_training(&z, cfg, act_dtype, o, stage, B, S, T);
    z.gpu.total = z.gpu.params + z.gpu.grads + z.gpu.master + z.gpu.moments + z.gpu.activations + z.gpu.workspace +
                  z.gpu.zero_work;
    z.comm_elems = world > 1 ? (stage >= 3 ? 3.0 : 2.0) * (double)n : 0.0;
    return z;
}

// A test hook's bytes, or -1 when it is not set.
static double test_hook_bytes(T5EnvVar var) {
    const char *v = t5_env_get(var), *name = t5_env_name(var);
    if (!v || !*v) return -1;
    char *end = NULL;
    double x = strtod(v, &end);
    if (*end || x < 0) t5_fail("%s=\"%s\": expected a number of bytes (a test hook)", name, v);
    return x;
}

// MemAvailable of /proc/meminfo in bytes, or -1 when it cannot be read (not Linux).
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    double kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

double planner_host_available(void) { return host_available_bytes(); }

// "12.34 GiB", or MiB / KiB below them, into buf.
static const char *size_text(char *buf, size_t cap, double bytes) {
    if (bytes >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= 1048576.0) snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    else snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    return buf;
}

// A refusal of the offload check: one error line, or in a dry run (--explain) a verdict line
// naming this machine (where the dry run runs, not necessarily where the run will), exit 0.
static void offload_verdict(int dry, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void offload_verdict(int dry, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!dry) t5_fail("%s", msg);
    printf("--explain: host check on this machine: does NOT fit here (the run would stop before loading): %s\n", msg);
}

void planner_check_offload(const ZeroPlan *z, const void *zero_options, int ranks_here, const char *config_path,
                           int dry) {
    const ZeroOptions *o = zero_options;
    const double k = ranks_here > 0 ? ranks_here : 1;
    char need[32], one[32], avail[32];
    if (z->host > 0) {
        double have = test_hook_bytes(T5_ENV_TEST_HOST_AVAILABLE);
        if (have < 0) have = host_available_bytes();
        if (have >= 0 && k * (double)z->host > have)
            offload_verdict(dry, "%s: the offloaded state needs %s of host memory (%s a rank x %d rank%s on this host) "
                            "but %s is available; HINT: %s", config_path,
                            size_text(need, sizeof need, k * (double)z->host),
                            size_text(one, sizeof one, (double)z->host), (int)k, k > 1 ? "s" : "",
                            size_text(avail, sizeof avail, have),
                            o->offload_param ? "spread the run over more hosts, or keep the parameters on the GPU (drop "
                                               "offload_param)"
                                             : "put the optimizer state on NVMe (\"offload_optimizer\": {\"device\": "
                                               "\"nvme\", \"nvme_path\": DIR}) or spread the run over more hosts");
        else if (dry && have >= 0)
            printf("--explain: host check on this machine: fits here: the offloaded state needs %s of host memory (%s "
                   "a rank x %d rank%s on a host), %s is available\n", size_text(need, sizeof need, k * (double)z->host),
                   size_text(one, sizeof one, (double)z->host), (int)k, k > 1 ? "s" : "",
                   size_text(avail, sizeof avail, have));
    }
    if (z->nvme > 0 && o->nvme_path[0]) {
        double have = test_hook_bytes(T5_ENV_TEST_NVME_FREE);
        struct statvfs st;
        if (have < 0 && statvfs(o->nvme_path, &st) == 0) have = (double)st.f_bavail * (double)st.f_frsize;
        if (have >= 0 && k * (double)z->nvme > have)
            offload_verdict(dry, "%s: key \"zero_optimization.offload_optimizer.nvme_path\": the optimizer state needs "
                            "%s (%s a rank x %d rank%s on this host) but \"%s\" has %s free; HINT: free space there, "
                            "choose a bigger disk, or spread the run over more hosts", config_path,
                            size_text(need, sizeof need, k * (double)z->nvme),
                            size_text(one, sizeof one, (double)z->nvme), (int)k, k > 1 ? "s" : "", o->nvme_path,
                            size_text(avail, sizeof avail, have));
    }
}

void planner_add_generation(MemPlan *p, const T5Config *cfg, Dtype act_dtype, int B, int beams, int S,
                            int max_length) {
    p->generation = t5_decoder_bytes(cfg, act_dtype, B, beams, S, max_length);
    p->total += p->generation;
}

void planner_add_fp8(MemPlan *p, const T5Config *cfg, int B, int S, int T, int hist_len) {
    const size_t b = t5_fp8_scratch_bytes(cfg, B, S, T) + t5_fp8_state_bytes(cfg, hist_len);
    p->workspace += b;
    p->total += b;
}

static size_t keep_budget(const Backend *be) {
    size_t cap = be->mem_cap();
    return cap ? cap : (size_t)(0.9 * (double)be->mem_capacity());
}

int planner_keep_sublayer_acts(const Backend *be, size_t plan_total, size_t keep_bytes) {
    return plan_total + keep_bytes <= keep_budget(be);
}

PlannerFp8Keep planner_keep_fp8(const Backend *be, struct T5Model *m, size_t plan_total, int B, int S, int T) {
    PlannerFp8Keep k = {0, 0, t5_fp8_keep_bytes(&m->cfg, m->fp8->keep, B, S, T), t5_fp8_weight_bytes(&m->cfg, m->fp8->keep)};
    k.inputs = plan_total + k.input_bytes <= keep_budget(be);
    if (k.inputs) t5_fp8_keep_inputs(m, B, S, T), plan_total += k.input_bytes;
    k.weights = plan_total + k.weight_bytes <= keep_budget(be);
    if (k.weights) t5_fp8_keep_weights(m);
    return k;
}

void planner_print_fp8_h_unkept(const struct T5Model *m) {
    if (m->acts.h_unkept_bytes)
        printf("fp8: the FFN hidden states are not kept: the backward reads wo's kept fp8 input instead (%.2f GiB less "
               "than the activations above)\n", m->acts.h_unkept_bytes / 1073741824.0);
}

void planner_print_keep(const Backend *be, int kept, size_t plan_total, size_t keep_bytes, int checkpointing,
                        int sub_batch) {
    const double G = 1073741824.0;
    const char *of = be->mem_cap() ? "the --max_gpu_memory cap" : "90% of the device's memory";
    if (checkpointing) {  // what checkpointing keeps, then what a block's recompute keeps
        if (sub_batch > 0)
            printf("activations: gradient checkpointing: each block keeps its input only, and backward recomputes the "
                   "block, %d rows of the micro-batch at a time (--checkpoint_sub_batch)\n", sub_batch);
        else
            printf("activations: gradient checkpointing: each block keeps its input only, and backward recomputes the "
                   "block\n");
        printf("activations: within a block's recompute the sublayer norms and FFN hidden states are %s (%s%.2f GiB, "
               "plan %.2f GiB %s %.2f, %s)\n", kept ? "kept" : "recomputed once more",
               kept ? "+" : "keeping them needs ", keep_bytes / G, (plan_total + keep_bytes) / G,
               kept ? "within" : "over", keep_budget(be) / G, of);
        fflush(stdout);
        return;
    }
    if (kept)
        printf("activations: the sublayer norms and FFN hidden states are kept (+%.2f GiB, plan %.2f GiB within %.2f, "
               "%s): backward does not recompute them\n", keep_bytes / G, (plan_total + keep_bytes) / G,
               keep_budget(be) / G, of);
    else
        printf("activations: the sublayer norms and FFN hidden states are recomputed in backward (keeping them needs "
               "%.2f GiB more: plan %.2f GiB, over %.2f, %s)\n", keep_bytes / G, (plan_total + keep_bytes) / G,
               keep_budget(be) / G, of);
    fflush(stdout);
}

void planner_print(const MemPlan *p, double cap_gib) {
    const double G = 1073741824.0;
    printf("memory plan (GiB): params %.2f  grads %.2f  master %.2f  adam m+v %.2f  activations %.2f  "
           "workspace %.2f  zero buffers %.2f", p->params / G, p->grads / G, p->master / G,
           p->moments / G, p->activations / G, p->workspace / G, p->zero_work / G);
    if (p->generation) printf("  generation %.2f", p->generation / G);
    printf("  = total %.2f", p->total / G);
    if (cap_gib > 0) printf("  (cap %.1f)", cap_gib);
    printf("\n");
}

double planner_flops_per_sample(const T5Config *c, int S, int T) {
    double D = c->d_model, HK = (double)c->num_heads * c->d_kv, F = c->d_ff, V = c->vocab_size;
    double ffn = (c->is_gated ? 3.0 : 2.0) * D * F;
    double enc_layer = 4.0 * D * HK + ffn, dec_layer = 8.0 * D * HK + ffn;
    double fwd = 2.0 * (c->num_layers * enc_layer * S + (c->num_decoder_layers * dec_layer + V * D) * T);
    fwd += c->num_layers * 4.0 * S * S * HK + c->num_decoder_layers * 4.0 * ((double)T * T + (double)T * S) * HK;
    return 3.0 * fwd;
}
