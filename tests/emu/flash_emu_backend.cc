// tests/emu/flash_emu_backend.cc: a Backend whose attention_forward / attention_backward run
// the CUDA backend's tile kernels (kernels/cuda/attention_flash_kernel.cuh,
// attention_flash_backward_kernel.cuh) on the CPU under tests/emu/warp_emu.h, with host memory
// for its buffers, so that tests/gpu/backend_ops_attention.h's cases check those kernels
// against the CPU backend without a GPU (tests/test_flash_emu.c). The launches mirror
// kernels/cuda/attention_flash.cu and attention_flash_backward.cu (the grids, NT, the
// arguments) and attention.cu (the backward's dbias sum over b); a call the kernels do not
// cover (attention_flash_forward / _backward would return false and attention.cu would take
// its GEMM path) is refused in one line, since nothing here emulates that path.
#include "warp_emu.h"  // first: the kernel headers below compile under its definitions

#include "../../kernels/cuda/attention_flash_backward_kernel.cuh"
#include "../../kernels/cuda/attention_flash_kernel.cuh"

#include <stdlib.h>

#include <map>

extern "C" {
#include "../../common/check.h"
#include "../../kernels/backend.h"
#include "../../kernels/dropout_rng.h"
}

// the storage behind each kernel's `extern __shared__` array (warp_emu.h)
namespace flash {
alignas(16) unsigned char smem_raw[WARP_EMU_SMEM_MAX];
}
namespace flash_bwd {
alignas(16) unsigned char smem_raw[WARP_EMU_SMEM_MAX];
}

namespace {

Dtype emu_dt = DTYPE_BF16;
std::map<void *, size_t> emu_live;  // alloc'd buffers and their sizes: mem_in_use
size_t emu_bytes = 0;

void *emu_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) t5_fail("flash emulation: out of host memory (%zu bytes)", bytes);
    emu_live[p] = bytes;
    emu_bytes += bytes;
    return p;
}
void emu_free(void *p) {
    if (!p) return;
    auto it = emu_live.find(p);
    if (it == emu_live.end()) t5_fail("flash emulation: free of a pointer it did not allocate");
    emu_bytes -= it->second;
    emu_live.erase(it);
    free(p);
}
void emu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
size_t emu_mem_in_use(void) { return emu_bytes; }

// p, 1/(1-p) and the RNG key as kernels/cuda/point_drop.cuh's point_drop gives them
void emu_dropout(DropoutArgs d, float *p, float *scale, unsigned long long *key) {
    if (!(d.p >= 0.0f && d.p <= 1.0f)) t5_fail("flash emulation: dropout probability %g outside [0, 1]", d.p);
    *p = d.p, *scale = d.p > 0.0f ? dropout_rng_scale(d.p) : 1.0f, *key = dropout_rng_key(d.seed);
}

template <typename T, int NT> void forward_run(void *out, void *att, const void *q, const void *k, const void *v,
                                               const void *bias, int B, const flash::Args &a) {
    const WarpEmuDim grid{(unsigned)((a.Tq + flash::QROWS - 1) / flash::QROWS), (unsigned)a.H, (unsigned)B};
    warp_emu_launch(grid, WarpEmuDim{flash::THREADS, 1, 1}, flash::smem_raw, flash::SMEM_BYTES, [&] {
        flash::flash_forward_kernel<T, NT>((T *)out, (T *)att, (const T *)q, (const T *)k, (const T *)v, (const T *)bias, a);
    });
}

void emu_attention_forward(void *out, void *att, const void *q, const void *k, const void *v, const void *bias,
                           const int *key_mask, int B, int Tq, int Tk, int kv_rows, int H, int dk, int causal,
                           int q_offset, DropoutArgs drop) {
    if (!flash::shape_covered(B, H, Tq, Tk, dk))  // the alignment holds for calloc'd buffers
        t5_fail("flash emulation: attention_forward B=%d Tq=%d Tk=%d d_kv=%d is not a shape the tile kernel takes", B, Tq,
                Tk, dk);
    flash::Args a;
    a.key_mask = key_mask;
    a.H = H, a.Tq = Tq, a.Tk = Tk, a.kv_rows = kv_rows, a.causal = causal, a.q_offset = q_offset;
    emu_dropout(drop, &a.p, &a.scale, &a.key);
    const bool wide = Tk > 64;  // NT = 16 key tiles, else 8
    if (emu_dt == DTYPE_BF16) {
        if (wide) forward_run<__nv_bfloat16, 16>(out, att, q, k, v, bias, B, a);
        else forward_run<__nv_bfloat16, 8>(out, att, q, k, v, bias, B, a);
    } else {
        if (wide) forward_run<__half, 16>(out, att, q, k, v, bias, B, a);
        else forward_run<__half, 8>(out, att, q, k, v, bias, B, a);
    }
}

template <typename T, int NT>
void backward_run(void *dq, void *dk, void *dv, void *ds, const void *dout, const void *att, const void *q,
                  const void *k, const void *v, int B, const flash_bwd::Args &a) {
    warp_emu_launch(WarpEmuDim{(unsigned)a.H, (unsigned)B, 1}, WarpEmuDim{flash_bwd::THREADS, 1, 1}, flash_bwd::smem_raw,
                    flash_bwd::SMEM_BYTES, [&] {
                        flash_bwd::flash_backward_kernel<T, NT>((T *)dq, (T *)dk, (T *)dv, (T *)ds, (const T *)dout,
                                                                (const T *)att, (const T *)q, (const T *)k, (const T *)v, a);
                    });
}

// attention.cu's dbias_reduce_kernel: dbias[e] += the fp32 sum over b, in order, of ds[b][e]
template <typename T> void dbias_sum(void *dbias, const void *ds, int B, size_t n) {
    T *db = (T *)dbias;
    const T *s = (const T *)ds;
    for (size_t e = 0; e < n; e++) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += to_float(s[(size_t)b * n + e]);
        db[e] = from_float<T>(to_float(db[e]) + acc);
    }
}

void emu_attention_backward(void *dq, void *dk, void *dv, void *dbias, const void *dout, const void *att,
                            const void *q, const void *k, const void *v, int B, int Tq, int Tk, int H, int d_kv,
                            DropoutArgs drop, int dqkv_set, int ld_dq, int ld_dkv) {
    const int ldq = ld_dq ? ld_dq : H * d_kv, ldkv = ld_dkv ? ld_dkv : H * d_kv;  // cuda_attention_backward's 0
    if (!flash_bwd::shape_covered(B, Tq, Tk, d_kv, ldq, ldkv))
        t5_fail("flash emulation: attention_backward B=%d Tq=%d Tk=%d d_kv=%d is not a shape the tile kernel takes", B,
                Tq, Tk, d_kv);
    flash_bwd::Args a;
    a.H = H, a.Tq = Tq, a.Tk = Tk, a.set = dqkv_set, a.ldq = ldq, a.ldkv = ldkv;
    emu_dropout(drop, &a.p, &a.scale, &a.key);
    const size_t n = (size_t)H * Tq * Tk;
    void *ds = dbias ? emu_alloc((size_t)B * n * 2) : nullptr;
    const bool wide = Tk > 64;
    if (emu_dt == DTYPE_BF16) {
        if (wide) backward_run<__nv_bfloat16, 16>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        else backward_run<__nv_bfloat16, 8>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        if (dbias) dbias_sum<__nv_bfloat16>(dbias, ds, B, n);
    } else {
        if (wide) backward_run<__half, 16>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        else backward_run<__half, 8>(dq, dk, dv, ds, dout, att, q, k, v, B, a);
        if (dbias) dbias_sum<__half>(dbias, ds, B, n);
    }
    emu_free(ds);  // CUDA keeps its scratch across calls; here it is freed, so mem_in_use is unchanged
}

}  // namespace

// 1 when the tile kernels take an attention case of these shapes: its forward, and its backward
// when it has one (dense keys, kv_rows == Tk), as attention_flash_forward / _backward decide.
extern "C" int flash_emu_takes(int B, int H, int Tq, int Tk, int kv_rows, int dk) {
    return flash::shape_covered(B, H, Tq, Tk, dk) &&
           (kv_rows != Tk || flash_bwd::shape_covered(B, Tq, Tk, dk, H * dk, H * dk));
}

// The emulated backend in bf16 or fp16 (the tile kernels' dtypes): memory and attention only.
extern "C" const Backend *flash_emu_backend(Dtype dt) {
    static Backend be;
    if (dt != DTYPE_BF16 && dt != DTYPE_F16) t5_fail("flash emulation: dtype %d (the tile kernels take bf16 and fp16)", (int)dt);
    emu_dt = dt;
    be = Backend();
    be.name = dt == DTYPE_BF16 ? "flash-emu-bf16" : "flash-emu-fp16";
    be.act_dtype = dt;
    be.alloc = emu_alloc;
    be.free = emu_free;
    be.to_device = emu_copy;
    be.to_host = emu_copy;
    be.mem_in_use = emu_mem_in_use;
    be.attention_forward = emu_attention_forward;
    be.attention_backward = emu_attention_backward;
    return &be;
}
