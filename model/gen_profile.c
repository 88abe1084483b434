// model/gen_profile.c: printing generation's phase profile (model/gen_profile.h).
#include "gen_profile.h"

#include <stdio.h>

void gen_profile_print(const GenProfile *p, const char *prefix, int async) {
    double total = p->setup + p->issue + p->gpu_wait + p->readback + p->search + p->reorder + p->teardown;
    double per = p->steps > 0 ? 1e3 / (double)p->steps : 0.0;
    printf("%s generation profile: %ld batches, %ld decoder steps (%.1f decoder rows a batch), %.3f s in generate\n", prefix,
           p->batches, p->steps, p->steps > 0 ? (double)p->rows / (double)p->batches : 0.0, total);
    printf("%s generation profile: %-9s %9s %9s %7s\n", prefix, "phase", "seconds", "ms/step", "share");
#define GP_ROW(name, v)                                                                                          \
    printf("%s generation profile: %-9s %9.3f %9.3f %6.1f%%\n", prefix, name, v, (v) * per,                      \
           total > 0 ? 100.0 * (v) / total : 0.0)
    GP_ROW("setup", p->setup);
    GP_ROW("issue", p->issue);
    GP_ROW("gpu_wait", p->gpu_wait);
    GP_ROW("readback", p->readback);
    GP_ROW("search", p->search);
    GP_ROW("reorder", p->reorder);
    GP_ROW("teardown", p->teardown);
#undef GP_ROW
    if (!async) return;
    // the reading: issue >> gpu_wait means the GPU waits on the host (launch-bound: CUDA graphs
    // help); gpu_wait >> issue means the kernels themselves are the time
    printf("%s generation profile: %s\n", prefix,
           p->issue > p->gpu_wait ? "host-bound: the launches take longer than the GPU work they issue"
                                  : "GPU-bound: the step's kernels take longer than issuing them");
}
