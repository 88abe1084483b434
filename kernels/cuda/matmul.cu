// kernels/cuda/matmul.cu: the linear layer on cuBLASLt, and the two-level batched GEMM
// (entry (b,h) of a batch at base + b*sb + h*sh) that attention.cu builds on.
//
// Everything is row-major for the caller; cuBLASLt is column-major. A row-major (R,C)
// matrix is a column-major (C,R) one with the same leading dimension, so each product is
// issued transposed (C^T = B^T A^T) and nothing is copied. The three linear products:
//   forward  out (N,O)  = inp (N,I) @ W^T   -> col-major m=O n=N k=I: A=W (T, lda I),  B=inp (N, ldb I),  C ldc O
//   dinp     (N,I)     += dout (N,O) @ W    -> m=I n=N k=O:           A=W (N, lda I),  B=dout (N, ldb O), C ldc I
//   dweight  (O,I)     += dout^T @ inp      -> m=I n=O k=N:           A=inp (N, lda I), B=dout (T, ldb O), C ldc I
// Accumulation is fp32 (CUBLAS_COMPUTE_32F) for every dtype, and fp32 inputs get plain
// fp32 (not TF32), so fp32 results match the CPU reference to rounding; with --tf32
// (cuda_set_tf32(1), HF's torch.backends.cuda.matmul.allow_tf32) fp32 products run on TF32
// tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to 10 mantissa bits, fp32 sums). Backward adds
// with beta = 1. The workspace is the context's (context.cuh); every call is on the stream.
//
// Descriptors and the heuristic's algorithm are cached per (dtype, transposes, shape,
// leading dimensions, batch strides, pointer alignment, beta): the heuristic runs once
// per distinct product. Where cuBLASLt offers no algorithm (odd leading dimensions in
// 16-bit types can do that) a simple tiled kernel computes the product instead and a
// one-time NOTICE names the shape, so a slow path is never silent.
//
// fp8 (cuda_gemm_fp8, for fp8.cu): A and B are 8-bit codes (e4m3 / e5m2, kernels/fp8_format.h),
// C stays in the activation dtype, and each operand has a device fp32 scale (cuBLASLt's
// A_SCALE_POINTER / B_SCALE_POINTER, 16-byte aligned): C = scale_a * scale_b * (A B) (+ C).
// cuBLASLt's fp8 kernels take only the "TN" form (A transposed, B not) with m, k and the
// leading dimensions multiples of 16, on compute capability 8.9 and up; the same plan cache
// holds them (the key adds the operand types and fast accumulation). Where they do not apply,
// the fallback kernel decodes the codes (fp8_decode) and a NOTICE names the shape and reason.
//
// Environment (diagnostics): T5_GEMM_VERBOSE=1 prints each plan's algorithm (tile,
// split-K, reduction scheme, workspace) when it is made; T5_GEMM_FALLBACK=1 runs every
// product on the simple kernel (tests/gpu runs its checks once that way too).
//
// Batches: a GEMM over B*H heads whose operands are laid out uniformly (sb = H*sh for all
// three: scores (B,H,Tq,Tk)) is cuBLASLt's strided batch; one whose heads sit inside rows
// (q (B,T,H*dk): sb = T*H*dk, sh = dk) is its pointer-array batch, the B*H addresses
// written by one small kernel into a context scratch just before the product (stream
// order keeps them until it has run). So attention reads and writes q, k, v, out and
// their gradients where they are, with no head permutes.
//
// Determinism: a given product always runs the same cached algorithm with the same
// workspace on one stream, and cuBLASLt is bitwise reproducible run to run for a fixed
// algorithm on one GPU model (cuBLAS "Results reproducibility").
#include <stdlib.h>
#include <string.h>

#include "gemm.cuh"
extern "C" {
#include "../../common/t5_env.h"  // T5_GEMM_VERBOSE, T5_GEMM_FALLBACK
}

static size_t dtype_bytes(Dtype dt) { return dt == DTYPE_F32 ? 4 : 2; }

static cudaDataType_t dtype_cuda(Dtype dt) {
    switch (dt) {
        case DTYPE_F32: return CUDA_R_32F;
        case DTYPE_BF16: return CUDA_R_16BF;
        case DTYPE_F16: return CUDA_R_16F;
    }
    t5_fail("cuda matmul: unknown dtype code %d (supported: fp32, fp16, bf16)", (int)dt);
}

// The two flags are read from the environment once per process (not device state).
static int gemm_verbose(void) {
    static int flag = -1;
    if (flag < 0) flag = t5_env_flag(T5_ENV_GEMM_VERBOSE);
    return flag;
}
static int gemm_force_fallback(void) {
    static int flag = -1;
    if (flag < 0) {
        flag = t5_env_flag(T5_ENV_GEMM_FALLBACK);
        if (flag) fprintf(stderr, "NOTICE: T5_GEMM_FALLBACK is set: every GEMM runs on the simple CUDA kernel (slow)\n");
    }
    return flag;
}

static const char *dtype_name(Dtype dt) { return dt == DTYPE_F32 ? "fp32" : dt == DTYPE_BF16 ? "bf16" : "fp16"; }

// Largest power of two (<= 256) dividing the address of every batch entry.
static uint32_t alignment_of(const void *p, long long stride_bytes, int batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) bits |= (uint64_t)stride_bytes;
    return (uint32_t)(bits & (~bits + 1));
}

// ---- the plan cache ---------------------------------------------------------------------
// Operand types of a key: the activation dtype (every product but fp8.cu's), or 8-bit codes.
enum { GEMM_TYPE_ACT = 0, GEMM_TYPE_E4M3, GEMM_TYPE_E5M2 };

typedef struct {
    int dt, transa, transb, m, n, k, lda, ldb, ldc, batch, accumulate;
    int type_a, type_b;  // GEMM_TYPE_*: A and B (C is always dt)
    int fast_accum;     // fp8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
    int tf32;           // fp32 only: CUBLAS_COMPUTE_32F_FAST_TF32 (cuda_set_tf32)
    int nh;             // heads per outer batch entry: entry z = (b, h) = (z / nh, z % nh)
    int pointer_array;  // 1: cuBLASLt reads the entries' addresses from device arrays
    long long sa, sb, sc;     // outer strides (elements) of A, B, C
    long long sha, shb, shc;  // inner (head) strides; 0 when nh == 1
    uint32_t align_a, align_b, align_c;
} GemmKey;

typedef struct {
    GemmKey key;
    int used;
    int have_algo;  // 0: cuBLASLt has none for this key; the fallback kernel runs
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t workspace;  // bytes the algorithm needs
} GemmPlan;

enum { GEMM_PLAN_SLOTS = 256 };
struct GemmPlanCache {  // the context's (context.cuh): plans depend on the device and its handle
    GemmPlan plans[GEMM_PLAN_SLOTS];
    int next;  // round-robin eviction once full
};

static void gemm_plan_release(GemmPlan *p) {
    if (!p->used) return;
    cublasCheck(cublasLtMatmulDescDestroy(p->op));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lc));
    p->used = 0;
}

static cublasLtMatrixLayout_t gemm_layout(cudaDataType_t type, int rows, int cols, int ld, int batch,
                                          long long stride, int pointer_array) {
    cublasLtMatrixLayout_t l;
    cublasCheck(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (batch > 1) {
        int32_t count = batch;
        cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        if (pointer_array) {
            uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
            cublasCheck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
        } else {
            int64_t off = stride;
            cublasCheck(
                cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off, sizeof off));
        }
    }
    return l;
}

static int gemm_is_fp8(const GemmKey *key) { return key->type_a != GEMM_TYPE_ACT; }

static cudaDataType_t gemm_operand_cuda(int type, Dtype dt) {
    return type == GEMM_TYPE_E4M3 ? CUDA_R_8F_E4M3 : type == GEMM_TYPE_E5M2 ? CUDA_R_8F_E5M2 : dtype_cuda(dt);
}
static const char *gemm_operand_name(int type, Dtype dt) {
    return type == GEMM_TYPE_E4M3 ? "e4m3" : type == GEMM_TYPE_E5M2 ? "e5m2" : dtype_name(dt);
}

// The operation descriptor and the three layouts of a key (an fp8 key: also its scale
// pointers, reset before every call, and fast accumulation).
static void gemm_plan_describe(GemmPlan *p, const GemmKey *key, const float *scale_a, const float *scale_b) {
    const Dtype dt = (Dtype)key->dt;
    cudaDataType_t type = dtype_cuda(dt), type_a = gemm_operand_cuda(key->type_a, dt),
                   type_b = gemm_operand_cuda(key->type_b, dt);
    cublasCheck(cublasLtMatmulDescCreate(&p->op, key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                         CUDA_R_32F));
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (gemm_is_fp8(key)) {
        const int8_t fast = (int8_t)key->fast_accum;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a,
                                                   sizeof scale_a));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b,
                                                   sizeof scale_b));
    }
    const int pa = key->pointer_array;
    p->la = key->transa ? gemm_layout(type_a, key->k, key->m, key->lda, key->batch, key->sa, pa)
                        : gemm_layout(type_a, key->m, key->k, key->lda, key->batch, key->sa, pa);
    p->lb = key->transb ? gemm_layout(type_b, key->n, key->k, key->ldb, key->batch, key->sb, pa)
                        : gemm_layout(type_b, key->k, key->n, key->ldb, key->batch, key->sb, pa);
    p->lc = gemm_layout(type, key->m, key->n, key->ldc, key->batch, key->sc, pa);
}

// Why cuBLASLt's fp8 kernels cannot take an fp8 key (NULL: they can; then the heuristic
// decides): cuBLAS's documented requirements for fp8 (cublasLtMatmul, "FP8" and "Tensor Core
// usage"), checked here so that a shape outside them never reaches cublasLtMatmul.
static const char *gemm_fp8_unsupported(const GemmKey *key, char *buf, size_t len) {
    const int cc = cuda_ctx()->cc;
    if (cc < GPU_CC_FP8) {
        snprintf(buf, len, "compute capability %d.%d has no fp8 tensor cores (8.9 and up)", cc / 10, cc % 10);
        return buf;
    }
    if (!key->transa || key->transb) return "cuBLASLt's fp8 GEMMs take A transposed and B not (TN) only";
    if (key->m % 16 || key->k % 16 || key->lda % 16 || key->ldb % 16)
        return "cuBLASLt's fp8 GEMMs need m, k and the leading dimensions of A and B multiples of 16";
    if (key->align_a < 16 || key->align_b < 16) return "cuBLASLt's fp8 GEMMs need A and B 16-byte aligned";
    return NULL;
}

// cuBLASLt's best algorithm for a described plan (the workspace and alignments of the key
// as constraints); the status, *found and *res as cublasLtMatmulAlgoGetHeuristic gives them.
static cublasStatus_t gemm_plan_heuristic(GemmPlan *p, const GemmKey *key, cublasLtMatmulHeuristicResult_t *res,
                                          int *found, const char *unsupported) {
    size_t ws_bytes = 0;
    (void)cuda_lt_workspace(&ws_bytes);
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = ws_bytes;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_a,
                                               sizeof key->align_a));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_b,
                                               sizeof key->align_b));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_c,
                                               sizeof key->align_c));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_c,
                                               sizeof key->align_c));
    // split-K partial sums in fp32 only (never rounded to a 16-bit output type midway)
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                     sizeof reduction));
    cublasStatus_t st = gemm_force_fallback() || unsupported
                            ? CUBLAS_STATUS_NOT_SUPPORTED
                            : cublasLtMatmulAlgoGetHeuristic(cuda_lt_handle(), p->op, p->la, p->lb, p->lc, p->lc,
                                                             pref, 1, res, found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return st;
}

// T5_GEMM_VERBOSE: the algorithm chosen for a plan.
static void gemm_plan_print(const GemmPlan *p, const GemmKey *key, const cublasLtMatmulHeuristicResult_t *res) {
    int id = 0, tile = 0, splitk = 0, stages = 0;
    uint32_t scheme = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk,
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                         sizeof scheme, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages,
                                         &w);
    fprintf(stderr,
            "gemm plan: %s%s%s%s%s m=%d n=%d k=%d trans=%c%c ld=%d,%d,%d batch=%d%s beta=%d align=%u,%u,%u: algo %d "
            "tile %d stages %d splitK %d reduction %u workspace %zu waves %.2f\n",
            dtype_name((Dtype)key->dt), gemm_is_fp8(key) ? " <- " : "",
            gemm_is_fp8(key) ? gemm_operand_name(key->type_a, (Dtype)key->dt) : "", gemm_is_fp8(key) ? " x " : "",
            gemm_is_fp8(key) ? gemm_operand_name(key->type_b, (Dtype)key->dt) : "", key->m, key->n, key->k,
            key->transa ? 'T' : 'N',
            key->transb ? 'T' : 'N', key->lda, key->ldb, key->ldc, key->batch,
            key->pointer_array ? " (pointer array)" : "", key->accumulate,
            key->align_a, key->align_b, key->align_c, id, tile, stages, splitk, scheme, p->workspace,
            res->wavesCount);
}

static GemmPlan *gemm_plan_get(const GemmKey *key, const float *scale_a, const float *scale_b) {
    CudaContext *cx = cuda_ctx();
    if (!cx->gemm_plans) cx->gemm_plans = (GemmPlanCache *)callocCheck(1, sizeof(GemmPlanCache));
    GemmPlanCache *cache = cx->gemm_plans;
    for (int i = 0; i < GEMM_PLAN_SLOTS; i++)
        if (cache->plans[i].used && memcmp(&cache->plans[i].key, key, sizeof *key) == 0) return &cache->plans[i];

    GemmPlan *p = &cache->plans[cache->next];
    cache->next = (cache->next + 1) % GEMM_PLAN_SLOTS;
    gemm_plan_release(p);
    memset(p, 0, sizeof *p);
    p->key = *key;
    gemm_plan_describe(p, key, scale_a, scale_b);
    char why[160];
    const char *unsupported = gemm_is_fp8(key) ? gemm_fp8_unsupported(key, why, sizeof why) : NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = gemm_plan_heuristic(p, key, &res, &found, unsupported);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->have_algo = 1;
        p->algo = res.algo;
        p->workspace = res.workspaceSize;
        if (gemm_verbose()) gemm_plan_print(p, key, &res);
    } else if (gemm_force_fallback()) {
        if (gemm_verbose())
            fprintf(stderr, "gemm plan: %s m=%d n=%d k=%d batch=%d: simple kernel (T5_GEMM_FALLBACK)\n",
                    dtype_name((Dtype)key->dt), key->m, key->n, key->k, key->batch);
    } else if (gemm_is_fp8(key)) {
        fprintf(stderr,
                "NOTICE: no cuBLASLt fp8 GEMM for %s <- %s x %s m=%d n=%d k=%d trans=%c%c ld=%d,%d,%d batch=%d "
                "(alignment %u,%u,%u bytes; %s): using the simple CUDA kernel for this shape (slow)\n",
                dtype_name((Dtype)key->dt), gemm_operand_name(key->type_a, (Dtype)key->dt),
                gemm_operand_name(key->type_b, (Dtype)key->dt), key->m, key->n, key->k, key->transa ? 'T' : 'N',
                key->transb ? 'T' : 'N', key->lda, key->ldb, key->ldc, key->batch, key->align_a, key->align_b,
                key->align_c, unsupported ? unsupported : cublasLtGetStatusName(st));
    } else {
        fprintf(stderr,
                "NOTICE: cuBLASLt has no algorithm for %s GEMM m=%d n=%d k=%d trans=%c%c ld=%d,%d,%d batch=%d "
                "(alignment %u,%u,%u bytes; status %s): using the simple CUDA kernel for this shape\n",
                dtype_name((Dtype)key->dt), key->m, key->n, key->k, key->transa ? 'T' : 'N', key->transb ? 'T' : 'N',
                key->lda, key->ldb, key->ldc, key->batch, key->align_a, key->align_b, key->align_c,
                cublasLtGetStatusName(st));
    }
    p->used = 1;
    return p;
}

// ---- fallback: a plain tiled GEMM (fp32 accumulation), column-major like cuBLASLt ------
namespace {
enum { FB_TILE = 16 };

// Element i of an operand as fp32: T, or an 8-bit code of GEMM_TYPE type (fp8 keys).
template <typename T> __device__ __forceinline__ float fb_value(const T *p, long long i, int) { return to_float(p[i]); }
__device__ __forceinline__ float fb_value(const uint8_t *p, long long i, int type) {
    return fp8_decode(p[i], type == GEMM_TYPE_E5M2 ? FP8_E5M2 : FP8_E4M3);
}

// C[r,c] (+)= factor * sum_p opA(r,p) opB(p,c); one thread per element of C, K in tiles of
// 16. E: the operands' element type (T, or uint8_t codes of an fp8 key); factor = *scale_a *
// *scale_b for fp8 keys (fp8.cu's dequantization, as cuBLASLt's scale pointers), else 1.
template <typename T, typename E>
__global__ void gemm_fallback_kernel(T *C, const E *A, const E *B, GemmKey key, const float *scale_a,
                                     const float *scale_b) {
    __shared__ float As[FB_TILE][FB_TILE + 1], Bs[FB_TILE][FB_TILE + 1];
    const int m = key.m, n = key.n, k = key.k, lda = key.lda, ldb = key.ldb, ldc = key.ldc;
    const int transa = key.transa, transb = key.transb, accumulate = key.accumulate;
    const long long zb = blockIdx.z / key.nh, zh = blockIdx.z % key.nh;
    A += zb * key.sa + zh * key.sha;
    B += zb * key.sb + zh * key.shb;
    C += zb * key.sc + zh * key.shc;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r = blockIdx.x * FB_TILE + tx, c = blockIdx.y * FB_TILE + ty;
    float acc = 0.0f;
    for (int p0 = 0; p0 < k; p0 += FB_TILE) {
        // As[tx][ty] = opA(blockrow + tx, p0 + ty); Bs[tx][ty] = opB(p0 + tx, blockcol + ty)
        int ar = blockIdx.x * FB_TILE + tx, ap = p0 + ty;
        float av = 0.0f;
        if (ar < m && ap < k)
            av = fb_value(A, transa ? ap + (long long)ar * lda : ar + (long long)ap * lda, key.type_a);
        As[tx][ty] = av;
        int bp = p0 + tx, bc = blockIdx.y * FB_TILE + ty;
        float bv = 0.0f;
        if (bp < k && bc < n)
            bv = fb_value(B, transb ? bc + (long long)bp * ldb : bp + (long long)bc * ldb, key.type_b);
        Bs[tx][ty] = bv;
        __syncthreads();
        for (int q = 0; q < FB_TILE; q++) acc += As[tx][q] * Bs[q][ty];
        __syncthreads();
    }
    if (r < m && c < n) {
        if (scale_a) acc *= *scale_a * *scale_b;
        T *dst = C + r + (long long)c * ldc;
        *dst = from_float<T>(accumulate ? to_float(*dst) + acc : acc);
    }
}

template <typename T>
void gemm_fallback(const GemmKey *key, void *C, const void *A, const void *B, const float *scale_a,
                   const float *scale_b) {
    dim3 block(FB_TILE, FB_TILE);
    dim3 grid((key->m + FB_TILE - 1) / FB_TILE, (key->n + FB_TILE - 1) / FB_TILE, key->batch);
    if (key->batch > 65535) t5_fail("cuda matmul: batch %d exceeds the fallback kernel's grid limit", key->batch);
    if (gemm_is_fp8(key))
        gemm_fallback_kernel<T, uint8_t><<<grid, block, 0, t5_stream()>>>(
            (T *)C, (const uint8_t *)A, (const uint8_t *)B, *key, scale_a, scale_b);
    else
        gemm_fallback_kernel<T, T><<<grid, block, 0, t5_stream()>>>((T *)C, (const T *)A, (const T *)B, *key, NULL,
                                                                    NULL);
    cudaLaunchCheck();
}
}  // namespace

// ---- the GEMM entry points ----------------------------------------------------------------
// Column-major: C = op(A) op(B) + (accumulate ? C : 0) with op(A) m x k, op(B) k x n, C m x n,
// for every entry of the batch. All on cuda_stream().

// The key of a product, apart from batching: zero everywhere else (padding takes part in memcmp).
static GemmKey gemm_key_base(Dtype dt, int transa, int transb, int m, int n, int k, int lda, int ldb, int ldc,
                             int batch, int accumulate) {
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.dt = (int)dt;
    key.transa = transa ? 1 : 0;
    key.transb = transb ? 1 : 0;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.batch = batch;
    key.accumulate = accumulate ? 1 : 0;
    key.tf32 = dt == DTYPE_F32 && cuda_ctx()->tf32;
    key.nh = 1;
    return key;
}

extern "C" void cuda_set_tf32(int on) { cuda_ctx()->tf32 = on != 0; }

// Runs a keyed product: A, B, C are the operands (strided batch, or the device arrays of
// addresses for a pointer-array key); base_* are the first entries (for the fallback kernel).
// scale_a, scale_b: an fp8 key's device scales (NULL otherwise).
static void gemm_run(const GemmKey *key, const void *A, const void *B, void *C, const void *base_a,
                     const void *base_b, void *base_c, const float *scale_a = NULL, const float *scale_b = NULL) {
    GemmPlan *p = gemm_plan_get(key, scale_a, scale_b);
    if (!p->have_algo) {
        switch ((Dtype)key->dt) {
            case DTYPE_F32: gemm_fallback<float>(key, base_c, base_a, base_b, scale_a, scale_b); break;
            case DTYPE_BF16: gemm_fallback<__nv_bfloat16>(key, base_c, base_a, base_b, scale_a, scale_b); break;
            case DTYPE_F16: gemm_fallback<__half>(key, base_c, base_a, base_b, scale_a, scale_b); break;
            default: dtype_unknown((Dtype)key->dt, __func__);
        }
        return;
    }
    if (gemm_is_fp8(key)) {  // the plan is shared by every call of its shape: this call's scales
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a,
                                                   sizeof scale_a));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b,
                                                   sizeof scale_b));
    }
    size_t ws_bytes = 0;
    void *ws = cuda_lt_workspace(&ws_bytes);
    if (p->workspace > ws_bytes)
        t5_fail("cuda matmul: the cached algorithm needs %zu workspace bytes, the context has %zu", p->workspace,
                ws_bytes);
    const float alpha = 1.0f, beta = key->accumulate ? 1.0f : 0.0f;
    cublasCheck(cublasLtMatmul(cuda_lt_handle(), p->op, &alpha, A, p->la, B, p->lb, &beta, C, p->lc, C, p->lc,
                               &p->algo, ws, ws_bytes, t5_stream()));
}

static int gemm_empty(int m, int n, int k, int batch, int accumulate) {
    if (m <= 0 || n <= 0 || batch <= 0) return 1;
    if (k <= 0) {  // empty sum: C = 0 (or unchanged)
        if (!accumulate) t5_fail("cuda gemm: k = %d with accumulate 0 is not supported", k);
        return 1;
    }
    return 0;
}

// Batched by one stride (elements) per operand.
void cuda_gemm_strided(Dtype dt, int transa, int transb, int m, int n, int k, const void *A, int lda, long long sa,
                       const void *B, int ldb, long long sb, void *C, int ldc, long long sc, int batch,
                       int accumulate) {
    if (gemm_empty(m, n, k, batch, accumulate)) return;
    const long long es = (long long)dtype_bytes(dt);
    GemmKey key = gemm_key_base(dt, transa, transb, m, n, k, lda, ldb, ldc, batch, accumulate);
    key.sa = batch > 1 ? sa : 0;
    key.sb = batch > 1 ? sb : 0;
    key.sc = batch > 1 ? sc : 0;
    key.align_a = alignment_of(A, key.sa * es, batch);
    key.align_b = alignment_of(B, key.sb * es, batch);
    key.align_c = alignment_of(C, key.sc * es, batch);
    gemm_run(&key, A, B, C, A, B, C);
}

// fp8 operands (gemm.cuh): A (transposed) and B 8-bit codes, C in dt; strided batch.
void cuda_gemm_fp8(Dtype dt, int m, int n, int k, const void *A, Fp8Format fa, int lda, long long sa,
                   const float *scale_a, const void *B, Fp8Format fb, int ldb, long long sb, const float *scale_b,
                   void *C, int ldc, long long sc, int batch, int accumulate, int fast_accum) {
    if (gemm_empty(m, n, k, batch, accumulate)) return;
    if (((uintptr_t)scale_a | (uintptr_t)scale_b) & 15)  // cublasLtMatmul would refuse at run time (gemm.cuh)
        t5_fail("cuda_gemm_fp8: scale pointers %p, %p are not 16-byte aligned (a bug in the caller)",
                (const void *)scale_a, (const void *)scale_b);
    GemmKey key = gemm_key_base(dt, 1, 0, m, n, k, lda, ldb, ldc, batch, accumulate);
    key.tf32 = 0;
    key.type_a = fa == FP8_E5M2 ? GEMM_TYPE_E5M2 : GEMM_TYPE_E4M3;
    key.type_b = fb == FP8_E5M2 ? GEMM_TYPE_E5M2 : GEMM_TYPE_E4M3;
    key.fast_accum = fast_accum ? 1 : 0;
    key.sa = batch > 1 ? sa : 0;
    key.sb = batch > 1 ? sb : 0;
    key.sc = batch > 1 ? sc : 0;
    key.align_a = alignment_of(A, key.sa, batch);
    key.align_b = alignment_of(B, key.sb, batch);
    key.align_c = alignment_of(C, key.sc * (long long)dtype_bytes(dt), batch);
    gemm_run(&key, A, B, C, A, B, C, scale_a, scale_b);
}

namespace {
struct GemmPointerArgs {
    const char *base[3];
    long long sb[3], sh[3];  // bytes
    int nh, batch;
};

// out[o * batch + z] = base[o] + b * sb[o] + h * sh[o] for the entry z = (b, h).
__global__ void gemm_pointers_kernel(const void **out, GemmPointerArgs a) {
    const int z = blockIdx.x * blockDim.x + threadIdx.x;
    if (z >= a.batch) return;
    const long long b = z / a.nh, h = z % a.nh;
#pragma unroll
    for (int o = 0; o < 3; o++) out[(size_t)o * a.batch + z] = a.base[o] + b * a.sb[o] + h * a.sh[o];
}
}  // namespace

// Largest power of two (<= 256) dividing every entry's address.
static uint32_t alignment_of_heads(const void *p, long long sb_bytes, long long sh_bytes, int nb, int nh) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
    if (nb > 1) bits |= (uint64_t)sb_bytes;
    if (nh > 1) bits |= (uint64_t)sh_bytes;
    return (uint32_t)(bits & (~bits + 1));
}

void cuda_gemm_heads(Dtype dt, int transa, int transb, int m, int n, int k, GemmHeads A, GemmHeads B, GemmHeads C,
                     int nb, int nh, int accumulate) {
    if (nb <= 0 || nh <= 0 || (long long)nb * nh > 0x7fffffffLL)
        t5_fail("cuda gemm: batch %d x %d is outside 1 .. 2^31-1", nb, nh);
    const int batch = nb * nh;
    if (gemm_empty(m, n, k, batch, accumulate)) return;
    if (nh == 1 || (A.sb == nh * A.sh && B.sb == nh * B.sh && C.sb == nh * C.sh)) {  // one stride serves
        cuda_gemm_strided(dt, transa, transb, m, n, k, A.p, A.ld, nh == 1 ? A.sb : A.sh, B.p, B.ld,
                          nh == 1 ? B.sb : B.sh, (void *)C.p, C.ld, nh == 1 ? C.sb : C.sh, batch, accumulate);
        return;
    }
    const long long es = (long long)dtype_bytes(dt);
    GemmKey key = gemm_key_base(dt, transa, transb, m, n, k, A.ld, B.ld, C.ld, batch, accumulate);
    key.nh = nh;
    key.pointer_array = 1;
    key.sa = A.sb, key.sb = B.sb, key.sc = C.sb;
    key.sha = A.sh, key.shb = B.sh, key.shc = C.sh;
    key.align_a = alignment_of_heads(A.p, A.sb * es, A.sh * es, nb, nh);
    key.align_b = alignment_of_heads(B.p, B.sb * es, B.sh * es, nb, nh);
    key.align_c = alignment_of_heads(C.p, C.sb * es, C.sh * es, nb, nh);
    const void **ptrs = (const void **)cuda_scratch_reserve(CUDA_SCRATCH_GEMM_POINTERS, 3 * (size_t)batch * sizeof(void *));
    GemmPointerArgs a;
    const GemmHeads *ops[3] = {&A, &B, &C};
    for (int o = 0; o < 3; o++) {
        a.base[o] = (const char *)ops[o]->p;
        a.sb[o] = ops[o]->sb * es;
        a.sh[o] = ops[o]->sh * es;
    }
    a.nh = nh;
    a.batch = batch;
    const int threads = 256;
    gemm_pointers_kernel<<<(unsigned)((batch + threads - 1) / threads), threads, 0, t5_stream()>>>(ptrs, a);
    cudaLaunchCheck();
    gemm_run(&key, ptrs, ptrs + batch, (void *)(ptrs + 2 * (size_t)batch), A.p, B.p, (void *)C.p);
}

// ---- the linear layer (cuda_ops.h) --------------------------------------------------------
extern "C" void cuda_matmul_forward(Dtype dt, void *out, const void *inp, const void *weight, int N, int I, int O) {
    if (N <= 0 || O <= 0) return;
    if (I <= 0) {
        cudaCheck(cudaMemsetAsync(out, 0, (size_t)N * O * dtype_bytes(dt), t5_stream()));
        return;
    }
    cuda_gemm_strided(dt, 1, 0, O, N, I, weight, I, 0, inp, I, 0, out, O, 0, 1, 0);
}

extern "C" void cuda_matmul_backward(Dtype dt, void *dinp, void *dweight, const void *dout, const void *inp,
                                     const void *weight, int N, int I, int O, int dinp_set) {
    if (dinp) cuda_gemm_strided(dt, 0, 0, I, N, O, weight, I, 0, dout, O, 0, dinp, I, 0, 1, !dinp_set);
    if (dweight) cuda_gemm_strided(dt, 0, 1, I, O, N, inp, I, 0, dout, O, 0, dweight, I, 0, 1, 1);
}

// The batched linears (backend.h): the forward and dweight products above as one strided
// batch, operand z at z * stride (inp's stride 0: every entry reads the same input).
// One launch is not always faster: cuBLASLt's choice for the strided batch measured (H200,
// bf16, D = HK = 1024, 3 entries; test_backend_ops_perf "PERF matmul q,k,v", 2026-12-03)
// forward N=8192 0.073 ms batched vs 0.080 as three GEMMs, but N=2048 0.246 vs 0.039; dW
// N=2048 0.030 vs 0.045, but N=8192 0.264 vs 0.226. So the forward batches from 4096 rows up
// and dW up to 2048 rows; otherwise the entries run as single GEMMs (the same sums either way).
enum { MATMUL_BATCHED_FWD_MIN_ROWS = 4096, MATMUL_BATCHED_DW_MAX_ROWS = 2048 };
extern "C" void cuda_matmul_forward_batched(Dtype dt, void *out, size_t out_stride, const void *inp,
                                            size_t inp_stride, const void *weight, size_t weight_stride, int N,
                                            int I, int O, int batch) {
    if (N <= 0 || O <= 0 || batch <= 0) return;
    if (I <= 0) {
        for (int z = 0; z < batch; z++)
            cudaCheck(cudaMemsetAsync((char *)out + z * out_stride * dtype_bytes(dt), 0,
                                      (size_t)N * O * dtype_bytes(dt), t5_stream()));
        return;
    }
    if (N < MATMUL_BATCHED_FWD_MIN_ROWS) {  // one GEMM each (the same sums)
        const size_t e = dtype_bytes(dt);
        for (int z = 0; z < batch; z++)
            cuda_gemm_strided(dt, 1, 0, O, N, I, (const char *)weight + z * weight_stride * e, I, 0,
                              (const char *)inp + z * inp_stride * e, I, 0, (char *)out + z * out_stride * e, O, 0, 1,
                              0);
        return;
    }
    cuda_gemm_strided(dt, 1, 0, O, N, I, weight, I, (long long)weight_stride, inp, I, (long long)inp_stride, out, O,
                      (long long)out_stride, batch, 0);
}

extern "C" void cuda_matmul_backward_weights_batched(Dtype dt, void *dweight, size_t dweight_stride, const void *dout,
                                                     size_t dout_stride, const void *inp, size_t inp_stride, int N,
                                                     int I, int O, int batch) {
    if (N > MATMUL_BATCHED_DW_MAX_ROWS) {  // one GEMM each (the same sums)
        const size_t e = dtype_bytes(dt);
        for (int z = 0; z < batch; z++)
            cuda_gemm_strided(dt, 0, 1, I, O, N, (const char *)inp + z * inp_stride * e, I, 0,
                              (const char *)dout + z * dout_stride * e, O, 0, (char *)dweight + z * dweight_stride * e,
                              I, 0, 1, 1);
        return;
    }
    cuda_gemm_strided(dt, 0, 1, I, O, N, inp, I, (long long)inp_stride, dout, O, (long long)dout_stride, dweight, I,
                      (long long)dweight_stride, batch, 1);
}
