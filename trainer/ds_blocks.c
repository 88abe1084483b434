// trainer/ds_blocks.c: the DeepSpeed blocks that act in the training loop (see ds_blocks.h).
#include "ds_blocks.h"

#include <errno.h>
#include <string.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../comm/comm_log.h"
#include "../kernels/backend_registry.h"
#include "progress.h"

void ds_blocks_begin(DsBlocks *b, const DsConfig *c, Comm *comm, long updates) {
    memset(b, 0, sizeof *b);
    b->updates = updates;
    if (comm->rank == 0) ds_monitor_open(&b->mon, c);
    if (c->comms_logger.present && c->comms_logger.enabled.v) {
        CommLogOptions o = {.verbose = c->comms_logger.verbose.v, .prof_all = c->comms_logger.prof_all.v,
                            .n_ops = c->comms_logger.prof_ops.n};
        for (int i = 0; i < o.n_ops && i < COMM_LOG_MAX_OPS; i++)
            snprintf(o.ops[i], sizeof o.ops[i], "%s", c->comms_logger.prof_ops.v[i]);
        comm_log_install(comm, &o);
        b->comm_logging = 1;
    }
}

void ds_blocks_step_begin(DsBlocks *b, const DsConfig *c, T5Model *m, int cuda, int rank, int steps_done) {
    // DeepSpeed profiles on rank 0 the step during which global_steps == profile_step
    if (!c->flops_profiler.enabled.v || !cuda || rank != 0 || steps_done != c->flops_profiler.profile_step.v) return;
    b->real = m->be;
    m->be = backend_profile_wrap(m->be, m->cfg.vocab_size);
    b->real->synchronize();  // the step's wall time starts with nothing queued before it
    b->t0 = now_seconds();
}

// The profiled step's table, to output_file or stdout.
static void profile_report(DsBlocks *b, const DsConfig *c, T5Model *m, ZeroState *z) {
    zero_sync(z);  // the offloaded update's thread too: its ops belong to the step
    b->real->synchronize();
    double wall_ms = 1e3 * (now_seconds() - b->t0);
    m->be = b->real;
    b->real = NULL;
    const char *path = c->flops_profiler.output_file.v;
    FILE *f = stdout;
    if (path[0]) {
        f = file_open_regular(path, "w", "flops_profiler.output_file");
        if (!f) t5_fail("%s: key \"flops_profiler.output_file\": cannot create %s (%s); HINT: a writable path, or null "
                        "to print the profile", c->file, path, strerror(errno));
    }
    fprintf(f, "DeepSpeed flops_profiler: optimizer step %lld on rank 0 (after %lld steps), CUDA ops timed on the "
            "device\n", c->flops_profiler.profile_step.v + 1, c->flops_profiler.profile_step.v);
    backend_profile_report(f, wall_ms, 1, (int)c->flops_profiler.top_modules.v);
    if (f != stdout) {
        fcloseCheck(f, path);
        printf("DeepSpeed flops_profiler: the profile of step %lld is in %s\n", c->flops_profiler.profile_step.v + 1,
               path);
    }
    fflush(stdout);
}

void ds_blocks_step_end(DsBlocks *b, const DsConfig *c, T5Model *m, ZeroState *z, int skipped,
                        const LrSchedule *sched, int fp16, double loss_scale, long long samples) {
    if (b->real) profile_report(b, c, m, z);
    if (!skipped) b->updates++;
    // get_lr() after the step: the scheduler stepped with the update (not on an overflow)
    if (b->mon.tb.f || b->mon.csv_dir)
        ds_monitor_step(&b->mon, lr_schedule_at(sched, (int)b->updates), fp16, loss_scale, samples);
}

void ds_blocks_end(DsBlocks *b, Comm *comm) {
    if (b->comm_logging) {
        if (comm->rank == 0) {
            printf("DeepSpeed comms_logger: the collectives of training on rank 0 (latencies in ms, trimmed means):\n");
            comm_log_summary(stdout);
        }
        comm_log_uninstall(comm);
    }
    ds_monitor_close(&b->mon);
    memset(b, 0, sizeof *b);
}
