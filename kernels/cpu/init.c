// kernels/cpu/init.c: the random init in place (backend.h init_random) on the CPU: the
// host values of model/params.c, element for element (the same kernels/init_rng.h code).
#include "../../common/check.h"
#include "../init_rng.h"
#include "cpu_ops.h"

void cpu_init_random(void *dst, Dtype dt, size_t n, uint64_t key, uint64_t first, double std, int is_const) {
    if (dt != DTYPE_F32)
        t5_die(__FILE__, __LINE__, "cpu init_random: the CPU backend holds fp32 only",
               "a bug in the caller: pass DTYPE_F32 (the CPU backend's act_dtype)");
    float *out = dst;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = is_const ? (float)std : init_rng_value(key, first + i, std);
}
