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

// tests/emu/flash_emu_backend.cc
const Backend *flash_emu_backend(Dtype dt);
int flash_emu_takes(int B, int H, int Tq, int Tk, int kv_rows, int dk);

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
            const char *why = flash_emu_takes(c->B, c->H, c->Tq, c->Tk, c->kv_rows, c->dk) ? NULL : "not a tile kernel shape";
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
