// zero/phases.c: the offloaded steps' phases, reset and printed (see phases.h).
#include <string.h>

#include "../optim/cpu_adam.h"
#include "zero.h"

void zero_phases_reset(ZeroState *z) {
    memset(&z->phases, 0, sizeof z->phases);
    int threads = z->off.times.threads;
    memset(&z->off.times, 0, sizeof z->off.times);
    z->off.times.threads = threads;
}

void zero_phases_print(const ZeroState *z, FILE *f) {
    if (!z->offload) return;
    const ZeroPhases *p = &z->phases;
    const OffloadTimes *t = &z->off.times;
    const double k = p->steps > 0 ? 1e3 / (double)p->steps : 0.0;  // seconds summed -> ms per step
    const double ku = t->steps > 0 ? 1e3 / (double)t->steps : 0.0;
    const double n = (double)(z->opt.end - z->opt.begin);
    const double pps = t->adam_s > 0 ? n * (double)t->steps / t->adam_s : 0.0;
    const char *isa = cpu_adam_isa_name(cpu_adam_isa_best());
    fprintf(f,
            "offload phases (ms per step, mean of %ld steps; host clocks): forward+backward %.1f (of it waiting for "
            "the update's new weights %.1f, for its thread to end %.1f, for backward's gradients to land in host "
            "memory %.1f), apply %.1f; the update %.1f %s (CPU AdamW %.1f on %d OpenMP threads, %s, %.2e params/s; "
            "waited for weight uploads %.1f, gradient copies %.1f, NVMe %.1f)\n",
            p->steps, k * p->accumulate_s, k * p->fwd_wait_s, k * p->join_wait_s, k * p->grads_wait_s, k * p->apply_s,
            k * p->update_s, z->upd.on ? "on its own thread" : "in place (within apply)", ku * t->adam_s, t->threads,
            isa, pps, ku * t->param_wait_s, ku * t->grad_wait_s, ku * t->nvme_wait_s);
    fprintf(f,
            "PHASES steps=%ld accumulate_ms=%.2f fwd_wait_ms=%.2f join_wait_ms=%.2f grads_wait_ms=%.2f apply_ms=%.2f "
            "update_ms=%.2f update_overlaps=%d adam_ms=%.2f h2d_wait_ms=%.2f d2h_wait_ms=%.2f nvme_wait_ms=%.2f "
            "omp_threads=%d isa=%s adam_params_per_s=%.3e\n",
            p->steps, k * p->accumulate_s, k * p->fwd_wait_s, k * p->join_wait_s, k * p->grads_wait_s, k * p->apply_s,
            k * p->update_s, z->upd.on, ku * t->adam_s, ku * t->param_wait_s, ku * t->grad_wait_s, ku * t->nvme_wait_s,
            t->threads, isa, pps);
    fflush(f);
}
