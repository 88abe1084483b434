// deepspeed/ds_zero_options.c: see ds_zero_options.h.
#include "ds_zero_options.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
#include "../zero/nvme.h"  // nvme_check_dir

ZeroOptions zero_options_from_config(const DsConfig *c, const char *path) {
    const DsOffloadOptimizer *oo = &c->zero.offload_optimizer;
    if (oo->device != OFFLOAD_NONE && oo->ratio.v < 1.0)
        t5_fail("%s: zero_optimization.offload_optimizer.ratio %g: a partial offload is not built yet; HINT: remove "
                "ratio (1: all of the optimizer state in host memory)", path, oo->ratio.v);
    if (oo->device != OFFLOAD_NONE && c->zero.stage < 1)
        t5_fail("%s: zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is %d), as in DeepSpeed", path,
                (int)c->zero.stage);
    const DsOffloadParam *op = &c->zero.offload_param;
    if (op->device == OFFLOAD_NVME)
        t5_fail("%s: zero_optimization.offload_param.device \"nvme\" is not built yet; HINT: \"device\": \"cpu\" "
                "(parameters in host memory), or offload only the optimizer to nvme", path);
    if (op->device == OFFLOAD_CPU && oo->device == OFFLOAD_NONE)
        t5_fail("%s: zero_optimization.offload_param without offload_optimizer: this build offloads the parameters "
                "only together with the optimizer state; HINT: add \"offload_optimizer\": {\"device\": \"cpu\"}", path);
    ZeroOptions o = {0};
    o.stage = (int)c->zero.stage;
    o.offload_param = op->device == OFFLOAD_CPU;
    o.offload_param_pin = op->pin_memory.v;
    o.offload_optimizer = oo->device == OFFLOAD_CPU || oo->device == OFFLOAD_NVME;
    if (oo->device == OFFLOAD_NVME) {  // ZeRO-Infinity: the optimizer state in a file on a fast disk
        nvme_check_dir(oo->nvme_path, "zero_optimization.offload_optimizer.nvme_path", path);
        if (strlen(oo->nvme_path) >= sizeof o.nvme_path)
            t5_fail("%s: key \"zero_optimization.offload_optimizer.nvme_path\": the path is longer than %zu characters; "
                    "HINT: a shorter directory", path, sizeof o.nvme_path - 1);
        snprintf(o.nvme_path, sizeof o.nvme_path, "%s", oo->nvme_path);
    }
    o.nvme_aio = (NvmeAio){.block_size = (size_t)c->aio.block_size.v, .queue_depth = (int)c->aio.queue_depth.v,
                           .threads = (int)c->aio.intra_op_parallelism.v, .single_submit = c->aio.single_submit.v,
                           .overlap_events = c->aio.overlap_events.v};
    o.pin_memory = oo->pin_memory.v;
    o.reduce_bucket = (size_t)c->zero.reduce_bucket_size.v;
    o.gather_bucket = (size_t)c->zero.allgather_bucket_size.v;
    o.overlap_comm = c->zero.overlap_comm.v;
    o.prefetch = c->zero.stage3_prefetch_bucket_size.v > 0;
    o.prefetch_elems = (size_t)c->zero.stage3_prefetch_bucket_size.v;
    o.max_live = (size_t)c->zero.stage3_max_live_parameters.v;
    o.persist_threshold = (size_t)c->zero.stage3_param_persistence_threshold.v;
    o.max_reuse = (size_t)c->zero.stage3_max_reuse_distance.v;
    return o;
}
