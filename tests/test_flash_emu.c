// tests/test_flash_emu.c: the CUDA backend's attention tile kernels (forward and backward,
// kernels/cuda/attention_flash*_kernel.cuh) run on the CPU by tests/emu/warp_emu.h, through
// the attention cases of test_backend_ops (tests/gpu/backend_ops_attention.h) against the CPU
// backend, in bf16 and fp16: the same checks and tolerances as on the GPU (forward, backward
// into prefilled gradients and into zeros, row strides, the dbias sum, masked probabilities
// exactly 0, repeated calls bitwise equal). The cases the kernels do not take (d_kv other than
// 64, odd Tk, Tk or a backward's Tq over 128) are listed as left out: the GPU test runs them
// through attention.cu's other paths. T5_TEST_QUICK=1: the cases under 20000 scores only.
#include <stdio.h>
#include <string.h>

#include "gpu/backend_ops_attention.h"

const Backend *flash_emu_backend(Dtype dt);  // tests/emu/flash_emu_backend.cc

// attention_flash_forward's shapes, and attention_flash_backward's when the case has a
// backward (dense keys: kv_rows == Tk)
static const char *flash_left_out(const AttCase *c) {
    if (c->dk != 64) return "d_kv is not 64";
    if (c->Tk % 2 != 0 || c->Tk > 128) return "Tk odd or over 128";
    if (c->kv_rows == c->Tk && c->Tq > 128) return "a backward with Tq over 128";
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int quick = getenv("T5_TEST_QUICK") && strcmp(getenv("T5_TEST_QUICK"), "0") != 0;
    static const Dtype DT[] = {DTYPE_BF16, DTYPE_F16};
    int ran = 0;
    for (int d = 0; d < 2; d++) {
        const OpsPair p = {backend_cpu(), flash_emu_backend(DT[d]), DT[d]};
        rng_seed(0x9e3779b97f4a7c15ULL);
        printf("--- attention tile kernels, emulated: %s\n", dt_name(p.dt));
        for (size_t i = 0; i < sizeof ATT_CASES / sizeof ATT_CASES[0]; i++) {
            const AttCase *c = &ATT_CASES[i];
            const char *why = flash_left_out(c);
            if (!why && quick && (size_t)c->B * c->H * c->Tq * c->Tk > 20000) why = "T5_TEST_QUICK";
            if (why) {
                if (d == 0) printf("left out: %s (%s)\n", c->label, why);
                continue;
            }
            attention_case(&p, tol_of(p.dt), c);
            ran++;
        }
    }
    char what[120];
    snprintf(what, sizeof what, "the tile kernels ran %d cases (bf16 and fp16)", ran);
    test_check(ran >= (quick ? 2 : 2 * 8), what);
    return test_summary();
}
