// model/gen_profile.h: where generation's wall time goes, phase by phase (a debug hook:
// T5_EVAL_PROFILE=1 makes trainer/evaluate.c pass one to t5_generate and print it at the end
// of an evaluation). The question it answers: is a decode step bound by the GPU's work or by
// the host issuing it (launches, syncs, bookkeeping)? So each step is split where the host
// finishes issuing its launches: the profile then waits for the GPU (be->synchronize), and
// the candidates' read-back after it is the copy alone. That one wait per step is the
// readback's own (the step already waited there), so profiling moves time between columns
// without adding a sync.
// Times are seconds of host wall clock (common/clock.h), summed over batches.
#pragma once

typedef struct {
    double setup;     // decoder arena, cross-attention K/V, beam table upload (t5_decoder_init, _encoded)
    double issue;     // host time issuing a step: token upload, the layers' launches, LM head, beam_topk
    double gpu_wait;  // then waiting for the step's GPU work to finish (launched but not yet run)
    double readback;  // the step's candidates to the host (the copy; the GPU is idle by then)
    double search;    // host search bookkeeping (greedy/beam updates, early-stop checks, stage-3 votes)
    double reorder;   // beam table reorder: sources upload + gather launch
    double teardown;  // decoder free
    long steps;       // decoder steps run
    long batches;     // generate calls
    long rows;        // decoder rows summed over batches (N = batch x beams)
} GenProfile;

// The profile as a few lines (prefix: "eval", "predict"); per step in ms. async: the backend
// queues its work (a GPU), so issue and gpu_wait are apart and the last line reads them; on
// the CPU backend issue is the compute itself.
void gen_profile_print(const GenProfile *p, const char *prefix, int async);
