// optim/cpu_adam.c: the CPU AdamW step of ZeRO-Offload, scalar / AVX2 / AVX-512 (see
// cpu_adam.h). Each vector function is the scalar loop below, lane for lane: the same
// operations in the same order. The AVX2 and AVX-512 functions are one loop written twice
// (8 and 16 lanes), kept apart on purpose so that each reads as plain intrinsics of its set.
#include "cpu_adam.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_ADAM_X86 1
#else
#define CPU_ADAM_X86 0
#endif

// ---- scalar: the reference --------------------------------------------------------------

static inline float grad_at(const void *g, Dtype t, size_t i) {
    if (t == DTYPE_F32) return ((const float *)g)[i];
    uint16_t h = ((const uint16_t *)g)[i];
    return t == DTYPE_BF16 ? half_bf16_to_f32(h) : half_f16_to_f32(h);
}

static inline void out_put(void *out, Dtype t, size_t i, float x) {
    if (t == DTYPE_F32) ((float *)out)[i] = x;
    else ((uint16_t *)out)[i] = t == DTYPE_BF16 ? half_f32_to_bf16(x) : half_f32_to_f16(x);
}

static void adam_scalar(float *p, float *m, float *v, const void *g, Dtype gt, void *out, Dtype ot, size_t lo,
                        size_t hi, const AdamwConsts *c) {
    for (size_t i = lo; i < hi; i++) {
        adamw_math_update(&p[i], &m[i], &v[i], grad_at(g, gt, i), c);
        if (out) out_put(out, ot, i, p[i]);
    }
}

#if CPU_ADAM_X86
// out's element lo starts a whole vector of `lanes` elements of dtype t (streaming stores need it)
static inline int out_aligned(const void *out, Dtype t, size_t lo, size_t lanes) {
    const size_t e = t == DTYPE_F32 ? 4 : 2;
    return ((uintptr_t)((const char *)out + lo * e) % (lanes * e)) == 0;
}

// ---- AVX2 + FMA + F16C: 8 lanes -----------------------------------------------------------
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

AVX2_TARGET static inline __m256 avx2_load_grad(const void *g, Dtype t, size_t i) {
    if (t == DTYPE_F32) return _mm256_loadu_ps((const float *)g + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
    if (t == DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16: the high half
}

// half_f32_to_bf16 in 8 lanes: round to nearest even, nan kept quiet (never inf).
AVX2_TARGET static inline __m128i avx2_to_bf16(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                              _mm256_set1_epi32(0x7F800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    // 32 -> 16 bits (every value fits: packus does not saturate), lanes back in order
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
}

// nt: streaming (non-temporal) stores, out + i aligned to the vector's bytes: the 16-bit copy
// goes to the staging buffer the copy engine reads next, so its lines are not read in first
// (a read-for-ownership would add 2 bytes to the 28 a parameter moves) nor kept in cache.
AVX2_TARGET static inline void avx2_store_out(void *out, Dtype t, size_t i, __m256 x, int nt) {
    if (t == DTYPE_F32) {
        if (nt) _mm256_stream_ps((float *)out + i, x);
        else _mm256_storeu_ps((float *)out + i, x);
        return;
    }
    const __m128i h = t == DTYPE_F16 ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT) : avx2_to_bf16(x);
    if (nt) _mm_stream_si128((__m128i *)((uint16_t *)out + i), h);
    else _mm_storeu_si128((__m128i *)((uint16_t *)out + i), h);
}

AVX2_TARGET static void adam_avx2(float *p, float *m, float *v, const void *g, Dtype gt, void *out, Dtype ot,
                                  size_t lo, size_t hi, const AdamwConsts *c) {
    const __m256 gs = _mm256_set1_ps(c->grad_scale), decay = _mm256_set1_ps(c->decay);
    const __m256 w1 = _mm256_set1_ps(c->w1), w1m1 = _mm256_set1_ps(c->w1 - 1.0f), w2 = _mm256_set1_ps(c->w2);
    const __m256 b2 = _mm256_set1_ps(c->beta2), bc2 = _mm256_set1_ps(c->bc2_sqrt), eps = _mm256_set1_ps(c->eps);
    const __m256 nss = _mm256_set1_ps(c->neg_step_size);
    const int nt = out && out_aligned(out, ot, lo, 8);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        const __m256 gg = _mm256_mul_ps(avx2_load_grad(g, gt, i), gs);
        __m256 pp = _mm256_loadu_ps(p + i);
        if (c->has_decay) pp = _mm256_mul_ps(pp, decay);
        __m256 mi = _mm256_loadu_ps(m + i);
        const __m256 d = _mm256_sub_ps(gg, mi);
        mi = c->small_w1 ? _mm256_fmadd_ps(w1, d, mi) : _mm256_fmadd_ps(w1m1, d, gg);
        const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(w2, gg), gg, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        pp = _mm256_add_ps(pp, _mm256_div_ps(_mm256_mul_ps(nss, mi), den));
        _mm256_storeu_ps(p + i, pp);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        if (out) avx2_store_out(out, ot, i, pp, nt);
    }
    adam_scalar(p, m, v, g, gt, out, ot, i, hi, c);  // the tail
}

// ---- AVX-512 (F + BW): 16 lanes ---------------------------------------------------------
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

AVX512_TARGET static inline __m512 avx512_load_grad(const void *g, Dtype t, size_t i) {
    if (t == DTYPE_F32) return _mm512_loadu_ps((const float *)g + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
    if (t == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512_TARGET static inline __m256i avx512_to_bf16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                     _mm512_set1_epi32(0x7F800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

AVX512_TARGET static inline void avx512_store_out(void *out, Dtype t, size_t i, __m512 x, int nt) {  // nt: as avx2_store_out
    if (t == DTYPE_F32) {
        if (nt) _mm512_stream_ps((float *)out + i, x);
        else _mm512_storeu_ps((float *)out + i, x);
        return;
    }
    const __m256i h = t == DTYPE_F16 ? _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT) : avx512_to_bf16(x);
    if (nt) _mm256_stream_si256((__m256i *)((uint16_t *)out + i), h);
    else _mm256_storeu_si256((__m256i *)((uint16_t *)out + i), h);
}

AVX512_TARGET static void adam_avx512(float *p, float *m, float *v, const void *g, Dtype gt, void *out, Dtype ot,
                                      size_t lo, size_t hi, const AdamwConsts *c) {
    const __m512 gs = _mm512_set1_ps(c->grad_scale), decay = _mm512_set1_ps(c->decay);
    const __m512 w1 = _mm512_set1_ps(c->w1), w1m1 = _mm512_set1_ps(c->w1 - 1.0f), w2 = _mm512_set1_ps(c->w2);
    const __m512 b2 = _mm512_set1_ps(c->beta2), bc2 = _mm512_set1_ps(c->bc2_sqrt), eps = _mm512_set1_ps(c->eps);
    const __m512 nss = _mm512_set1_ps(c->neg_step_size);
    const int nt = out && out_aligned(out, ot, lo, 16);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        const __m512 gg = _mm512_mul_ps(avx512_load_grad(g, gt, i), gs);
        __m512 pp = _mm512_loadu_ps(p + i);
        if (c->has_decay) pp = _mm512_mul_ps(pp, decay);
        __m512 mi = _mm512_loadu_ps(m + i);
        const __m512 d = _mm512_sub_ps(gg, mi);
        mi = c->small_w1 ? _mm512_fmadd_ps(w1, d, mi) : _mm512_fmadd_ps(w1m1, d, gg);
        const __m512 vi = _mm512_fmadd_ps(_mm512_mul_ps(w2, gg), gg, _mm512_mul_ps(_mm512_loadu_ps(v + i), b2));
        const __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
        pp = _mm512_add_ps(pp, _mm512_div_ps(_mm512_mul_ps(nss, mi), den));
        _mm512_storeu_ps(p + i, pp);
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        if (out) avx512_store_out(out, ot, i, pp, nt);
    }
    adam_scalar(p, m, v, g, gt, out, ot, i, hi, c);
}
#endif  // CPU_ADAM_X86

// ---- dispatch -----------------------------------------------------------------------------

int cpu_adam_isa_supported(CpuAdamIsa isa) {
    switch (isa) {
    case CPU_ADAM_AUTO:
    case CPU_ADAM_SCALAR: return 1;
#if CPU_ADAM_X86
    case CPU_ADAM_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case CPU_ADAM_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               cpu_adam_isa_supported(CPU_ADAM_AVX2);
#endif
    default: return 0;
    }
}

CpuAdamIsa cpu_adam_isa_best(void) {
    if (cpu_adam_isa_supported(CPU_ADAM_AVX512)) return CPU_ADAM_AVX512;
    if (cpu_adam_isa_supported(CPU_ADAM_AVX2)) return CPU_ADAM_AVX2;
    return CPU_ADAM_SCALAR;
}

const char *cpu_adam_isa_name(CpuAdamIsa isa) {
    switch (isa) {
    case CPU_ADAM_AUTO: return "auto";
    case CPU_ADAM_SCALAR: return "scalar";
    case CPU_ADAM_AVX2: return "avx2";
    case CPU_ADAM_AVX512: return "avx512";
    }
    return "?";
}

void cpu_adam_update(float *master, float *m, float *v, const void *g, Dtype gt, void *out, Dtype ot, size_t n,
                     const AdamwConsts *c, CpuAdamIsa isa) {
    const CpuAdamSlice s = {.master = master, .m = m, .v = v, .g = g, .out = out, .n = n, .c = *c};
    cpu_adam_update_slices(&s, 1, gt, ot, isa);
}

void cpu_adam_update_slices(const CpuAdamSlice *s, int count, Dtype gt, Dtype ot, CpuAdamIsa isa) {
    if (isa == CPU_ADAM_AUTO) isa = cpu_adam_isa_best();
    if (!cpu_adam_isa_supported(isa))
        t5_die(__FILE__, __LINE__, "cpu_adam_update: this CPU does not run the instruction set asked for",
               "a bug in the caller: ask cpu_adam_isa_supported first, or pass CPU_ADAM_AUTO");
    if (count <= 0) return;
    // first[k]: the pass's index of slice k's first block; first[count]: all the blocks
    size_t *first = mallocCheck(((size_t)count + 1) * sizeof(size_t));
    first[0] = 0;
    for (int k = 0; k < count; k++) first[k + 1] = first[k] + (s[k].n + CPU_ADAM_BLOCK - 1) / CPU_ADAM_BLOCK;
    const size_t blocks = first[count];
    // Blocks are taken a few at a time as threads come free (dynamic), not dealt out in equal
    // shares up front (static): a thread the OS preempts (the main thread launching the next
    // forward, the driver's threads, any other process on the host) then delays the pass by
    // the blocks in its hands, not by its whole share. The bits do not depend on which
    // thread runs a block.
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, CPU_ADAM_GRAB) nowait
        for (size_t b = 0; b < blocks; b++) {
            int lo_k = 0, hi_k = count - 1;  // the slice holding block b: the last k with first[k] <= b
            while (lo_k < hi_k) {
                int mid = (lo_k + hi_k + 1) / 2;
                if (first[mid] <= b) lo_k = mid;
                else hi_k = mid - 1;
            }
            const CpuAdamSlice *x = &s[lo_k];
            const size_t lo = (b - first[lo_k]) * CPU_ADAM_BLOCK, hi = lo + CPU_ADAM_BLOCK < x->n ? lo + CPU_ADAM_BLOCK : x->n;
            // (the kernels index from the slice's first element: i in [lo, hi))
            switch (isa) {
#if CPU_ADAM_X86
            case CPU_ADAM_AVX512: adam_avx512(x->master, x->m, x->v, x->g, gt, x->out, ot, lo, hi, &x->c); break;
            case CPU_ADAM_AVX2: adam_avx2(x->master, x->m, x->v, x->g, gt, x->out, ot, lo, hi, &x->c); break;
#endif
            default: adam_scalar(x->master, x->m, x->v, x->g, gt, x->out, ot, lo, hi, &x->c); break;
            }
        }
#if CPU_ADAM_X86
        _mm_sfence();  // this thread's streaming stores are seen before the region ends (the copy engine reads next)
#endif
    }
    free(first);
}
