// tests/emu/warp_emu.cc: the fiber scheduler and the emulated warp instructions of
// tests/emu/warp_emu.h. A block's threads are fibers run round-robin on one OS
// thread; a thread runs until it must wait (a barrier, or a warp collective whose other
// lanes have not arrived), then the next one runs. A warp collective is a rendezvous of the
// warp's 32 lanes: each lane leaves its operands in the warp's slots; once all have, the first
// lane to run computes every lane's result, and each takes its own.
#include "warp_emu.h"

#include <stdio.h>
#if !defined(__x86_64__) || defined(WARP_EMU_UCONTEXT)
#include <ucontext.h>
#endif

#include <vector>

extern "C" {
#include "../../common/check.h"
}

WarpEmuDim warp_emu_thread_idx, warp_emu_block_idx, warp_emu_block_dim, warp_emu_grid_dim;

namespace {

enum { STACK_BYTES = 128 * 1024, WARP = 32, MAX_THREADS = 1024, SLOT_WORDS = 6 };

// which collective a lane is in: all 32 lanes of a rendezvous must be in the same one
enum Kind { K_SHFL = 1, K_BALLOT, K_MMA_BF16, K_MMA_F16, K_LDSM, K_LDSM_T };

// Switching fibers: on x86-64 a stack switch of the callee-saved registers (the System V
// ABI's rbx, rbp, r12-r15; the fibers run plain C++ and change no control registers), since
// swapcontext also saves the signal mask with a system call on every switch, which made the
// emulation 3-4x slower (test_flash_emu 87 s against 23 s); elsewhere, or built with
// -DWARP_EMU_UCONTEXT, ucontext.
#if defined(__x86_64__) && !defined(WARP_EMU_UCONTEXT)
struct Context {
    void *sp = nullptr;
};
extern "C" void warp_emu_switch(void **save_sp, void *load_sp);
asm(R"(
    .text
    .globl warp_emu_switch
    .type warp_emu_switch, @function
warp_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size warp_emu_switch, .-warp_emu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
void context_switch(Context *from, Context *to) { warp_emu_switch(&from->sp, to->sp); }
// a new context that starts in entry() on the given stack (entry never returns)
void context_make(Context *c, std::vector<char> &stack, void (*entry)(void)) {
    uintptr_t top = ((uintptr_t)stack.data() + stack.size()) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;          // entry's return address slot: entry sees rsp % 16 == 8, as after a call
    *--sp = (void *)entry;    // warp_emu_switch's ret goes here
    for (int r = 0; r < 6; r++) *--sp = nullptr;  // the six callee-saved registers it pops
    c->sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
void context_switch(Context *from, Context *to) {
    if (swapcontext(&from->uc, &to->uc) != 0)
        t5_die(__FILE__, __LINE__, "warp_emu: swapcontext failed", "the fiber stacks (STACK_BYTES) may be too small");
}
void context_make(Context *c, std::vector<char> &stack, void (*entry)(void)) {
    if (getcontext(&c->uc) != 0)
        t5_die(__FILE__, __LINE__, "warp_emu: getcontext failed",
               "ucontext is unavailable on this platform: run make test-gpu on a GPU instead");
    c->uc.uc_stack.ss_sp = stack.data();
    c->uc.uc_stack.ss_size = stack.size();
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif

// a cp.async in flight: done at the cp.async.wait_group that covers it, so that a kernel
// reading its destination before waiting (or before the barrier after the wait) reads the
// 0xA5 fill, not the data
struct PendingCopy {
    void *dst;
    const void *src;
    int bytes;
};

struct Fiber {
    Context ctx;
    std::vector<char> stack;
    bool done = false;
    std::vector<PendingCopy> copies;  // issued, not yet done
    std::vector<size_t> groups;       // the end (in copies) of each committed group, oldest first
};

// A warp's operands of one collective. Two of them, used in turn: a lane that has its
// result and runs on to the warp's next collective writes the other, while slower lanes
// still read this one (they cannot be two collectives behind: the next one's rendezvous
// waits for them), so each collective needs one rendezvous, not two.
struct Operands {
    int kind[WARP];
    uint32_t word[WARP][SLOT_WORDS];
    const void *ptr[WARP];
    unsigned long long built;  // 1 + the collective number whose results are in out
    uint32_t out[WARP][4];     // each lane's result, computed once by the first lane after the rendezvous
    double sum[WARP][4];       // mma: each lane's four exact products' sums
};

struct WarpSlots {
    int arrived = 0;
    unsigned gen = 0;
    unsigned long long seq[WARP];  // each lane's count of collectives (equal across the warp at a rendezvous)
    Operands ops[2];
};

struct Emu {
    Context sched;
    std::vector<Fiber> fibers;
    int cur = 0, nthreads = 0;
    const std::function<void()> *body = nullptr;
    int block_arrived = 0;
    unsigned block_gen = 0;
    unsigned long long progress = 0;  // barriers passed and threads finished: the deadlock check
    unsigned long long launches = 0;  // picks each launch's schedule
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    WarpSlots warps[MAX_THREADS / WARP];
    const unsigned char *smem = nullptr;
    size_t smem_bytes = 0;
};
Emu E;

void fail(const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, "warp_emu: %s (block %u,%u,%u thread %d)", what, warp_emu_block_idx.x, warp_emu_block_idx.y,
             warp_emu_block_idx.z, E.cur);
    t5_die(__FILE__, __LINE__, msg, "the emulated kernel broke a CUDA rule the GPU would not report this clearly");
}

void yield_to_scheduler(void) {
    context_switch(&E.fibers[(size_t)E.cur].ctx, &E.sched);
}

// Wait until `count` threads have arrived at the barrier whose state is (*arrived, *gen).
void rendezvous(int *arrived, unsigned *gen, int count) {
    const unsigned mine = *gen;
    if (++*arrived == count) {
        *arrived = 0;
        ++*gen;
        E.progress++;
        return;
    }
    while (*gen == mine) yield_to_scheduler();
    E.progress++;
}

void trampoline(void) {
    (*E.body)();
    E.fibers[(size_t)E.cur].done = true;
    E.progress++;
    yield_to_scheduler();  // never resumed
}

// a lane enters a collective: its operand slot (the caller fills it, then calls warp_meet)
Operands &warp_enter(unsigned mask, Kind kind, unsigned long long *seq) {
    if (mask != 0xffffffffu) fail("a warp collective with a partial mask (not emulated)");
    const int lane = E.cur % WARP;
    WarpSlots &w = E.warps[E.cur / WARP];
    *seq = w.seq[lane]++;
    Operands &o = w.ops[*seq & 1];
    o.kind[lane] = kind;
    return o;
}

// the rendezvous; returns 1 for the one lane that must compute the results (then marks them)
int warp_meet(Operands &o, unsigned long long seq) {
    WarpSlots &w = E.warps[E.cur / WARP];
    rendezvous(&w.arrived, &w.gen, WARP);
    if (o.built == seq + 1) return 0;
    for (int l = 1; l < WARP; l++)
        if (o.kind[l] != o.kind[0]) fail("the lanes of a warp are in different collectives (divergent warp)");
    o.built = seq + 1;
    return 1;
}

float half_bits_to_float(uint16_t h, bool bf16) {
    if (bf16) {
        const uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
}

void check_shared(const void *p, size_t bytes, const char *what) {
    const unsigned char *c = (const unsigned char *)p;
    if (c < E.smem || c + bytes > E.smem + E.smem_bytes) fail(what);
}

// The threads one pass over the block resumes, in order. Launch k runs every thread in order
// (k % 3 == 0), in reverse (1), or (2) in a new random order each pass, half the warps (at
// random) sitting the pass out, so that warps drift apart by many collectives: a missing
// barrier lets one warp overwrite shared memory another still reads, which a fixed order can
// hide (the warps reach their collectives in step) but not all three. all: every warp this
// pass (mode 2, after a pass that made no progress: a deadlock is then real). A caller running
// a kernel twice and comparing the results bitwise (test_backend_ops' repeated calls)
// compares two schedules.
void schedule_order(std::vector<int> &order, unsigned long long launch, int nthreads, bool all) {
    order.clear();
    if (launch % 3 != 2) {
        for (int i = 0; i < nthreads; i++) order.push_back(launch % 3 == 1 ? nthreads - 1 - i : i);
        return;
    }
    auto next = [] {
        E.rng ^= E.rng << 13, E.rng ^= E.rng >> 7, E.rng ^= E.rng << 17;
        return E.rng;
    };
    const uint64_t skip = all ? 0 : next();  // bit w: warp w sits this pass out
    for (int i = 0; i < nthreads; i++)
        if (!((skip >> (i / WARP)) & 1u)) order.push_back(i);
    for (size_t i = order.size(); i > 1; i--) std::swap(order[i - 1], order[(size_t)(next() % i)]);  // Fisher-Yates
}

}  // namespace

void __syncthreads(void) { rendezvous(&E.block_arrived, &E.block_gen, E.nthreads); }

unsigned __ballot_sync(unsigned mask, int pred) {
    unsigned long long seq;
    Operands &o = warp_enter(mask, K_BALLOT, &seq);
    o.word[E.cur % WARP][0] = pred != 0;
    if (warp_meet(o, seq)) {
        unsigned r = 0;
        for (int l = 0; l < WARP; l++) r |= o.word[l][0] << l;
        for (int l = 0; l < WARP; l++) o.out[l][0] = r;
    }
    return o.out[E.cur % WARP][0];
}

unsigned warp_emu_shfl_xor_bits(unsigned mask, unsigned bits, int lane_mask) {
    unsigned long long seq;
    Operands &o = warp_enter(mask, K_SHFL, &seq);
    o.word[E.cur % WARP][0] = bits;
    o.word[E.cur % WARP][1] = (unsigned)lane_mask;
    if (warp_meet(o, seq))
        for (int l = 0; l < WARP; l++) o.out[l][0] = o.word[(l ^ (int)o.word[l][1]) & (WARP - 1)][0];
    return o.out[E.cur % WARP][0];
}

// Fragments (lane = 4 g + qd): A 16x16 row-major, a[0] (g, 2qd..+1), a[1] (g+8, ..), a[2]
// (g, 2qd+8..+9), a[3] (g+8, 2qd+8..); B 16x8, b0 (k 2qd..+1, n g), b1 (k 2qd+8..+9, n g);
// D 16x8 fp32, d[0..1] (g, 2qd..+1), d[2..3] (g+8, 2qd..+1). Low half of a pair: lower index.
// Each lane's C comes in with its operands, so the products are shared and the sums its own.
void warp_emu_mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
    unsigned long long seq;
    Operands &o = warp_enter(0xffffffffu, bf16 ? K_MMA_BF16 : K_MMA_F16, &seq);
    const int lane = E.cur % WARP;
    for (int i = 0; i < 4; i++) o.word[lane][i] = a[i];
    o.word[lane][4] = b0, o.word[lane][5] = b1;
    if (warp_meet(o, seq)) {
        float A[16][16], B[16][8];
        for (int l = 0; l < WARP; l++) {
            const int g = l / 4, q = l % 4;
            for (int i = 0; i < 4; i++)
                for (int h = 0; h < 2; h++)
                    A[g + 8 * (i & 1)][2 * q + h + 8 * (i >> 1)] = half_bits_to_float((uint16_t)(o.word[l][i] >> (16 * h)), bf16);
            for (int i = 0; i < 2; i++)
                for (int h = 0; h < 2; h++)
                    B[2 * q + h + 8 * i][g] = half_bits_to_float((uint16_t)(o.word[l][4 + i] >> (16 * h)), bf16);
        }
        for (int l = 0; l < WARP; l++)
            for (int e = 0; e < 4; e++) {
                const int row = l / 4 + 8 * (e >> 1), col = 2 * (l % 4) + (e & 1);
                double s = 0.0;  // products of 16-bit values are exact in double
                for (int k = 0; k < 16; k++) s += (double)A[row][k] * (double)B[k][col];
                o.sum[l][e] = s;
            }
    }
    for (int e = 0; e < 4; e++) d[e] = (float)((double)d[e] + o.sum[lane][e]);  // one rounding: the GPU sums in its own order
}

// matrix i's rows come from lanes 8i..8i+7. Plain: r[i] = (row g, cols 2qd, 2qd+1) of matrix i;
// .trans: (rows 2qd, 2qd+1, col g).
void warp_emu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans) {
    unsigned long long seq;
    Operands &o = warp_enter(0xffffffffu, trans ? K_LDSM_T : K_LDSM, &seq);
    const int lane = E.cur % WARP;
    if ((uintptr_t)row % 16 != 0) fail("ldmatrix row address not 16-byte aligned");
    check_shared(row, 16, "ldmatrix row outside the block's shared memory");
    o.ptr[lane] = row;
    if (warp_meet(o, seq))
        for (int l = 0; l < WARP; l++) {
            const int g = l / 4, q = l % 4;
            for (int i = 0; i < 4; i++) {
                uint16_t lo, hi;
                if (!trans) {
                    const uint16_t *p = (const uint16_t *)o.ptr[8 * i + g];
                    lo = p[2 * q], hi = p[2 * q + 1];
                } else {
                    lo = ((const uint16_t *)o.ptr[8 * i + 2 * q])[g];
                    hi = ((const uint16_t *)o.ptr[8 * i + 2 * q + 1])[g];
                }
                o.out[l][i] = (uint32_t)lo | ((uint32_t)hi << 16);
            }
        }
    for (int i = 0; i < 4; i++) r[i] = o.out[lane][i];
}

void warp_emu_copy16(void *dst, const void *src, int bytes) {
    if ((uintptr_t)dst % 16 != 0 || (bytes && (uintptr_t)src % 16 != 0)) fail("cp.async of 16 bytes not 16-byte aligned");
    if (bytes != 0 && bytes != 16) fail("cp.async source size other than 0 or 16");
    check_shared(dst, 16, "cp.async destination outside the block's shared memory");
    E.fibers[(size_t)E.cur].copies.push_back(PendingCopy{dst, src, bytes});
}

void warp_emu_cp_async_commit(void) {
    Fiber &f = E.fibers[(size_t)E.cur];
    f.groups.push_back(f.copies.size());
}

void warp_emu_cp_async_wait(int n) {
    Fiber &f = E.fibers[(size_t)E.cur];
    if ((int)f.groups.size() <= n) return;
    const size_t groups_done = f.groups.size() - (size_t)n, end = f.groups[groups_done - 1];
    for (size_t i = 0; i < end; i++) {
        const PendingCopy &c = f.copies[i];
        memset(c.dst, 0, 16);
        if (c.bytes) memcpy(c.dst, c.src, (size_t)c.bytes);
    }
    f.copies.erase(f.copies.begin(), f.copies.begin() + (ptrdiff_t)end);
    f.groups.erase(f.groups.begin(), f.groups.begin() + (ptrdiff_t)groups_done);
    for (size_t &g : f.groups) g -= end;
}

void warp_emu_launch(WarpEmuDim grid, WarpEmuDim block, unsigned char *smem, size_t smem_bytes,
                     const std::function<void()> &body) {
    if (block.x == 0 || block.x % WARP != 0 || block.x > MAX_THREADS || block.y != 1 || block.z != 1)
        fail("block shape not emulated (x a multiple of 32 up to 1024, y = z = 1)");
    if (smem_bytes > WARP_EMU_SMEM_MAX) fail("dynamic shared memory above 227 KiB");
    E.nthreads = (int)block.x;
    E.body = &body;
    E.smem = smem, E.smem_bytes = smem_bytes;
    const unsigned long long launch = E.launches++;
    std::vector<int> order((size_t)E.nthreads);
    if (E.fibers.size() < (size_t)E.nthreads) E.fibers.resize((size_t)E.nthreads);  // stacks kept across launches
    for (Fiber &f : E.fibers) f.stack.resize(STACK_BYTES);
    warp_emu_grid_dim = grid, warp_emu_block_dim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                warp_emu_block_idx = WarpEmuDim{bx, by, bz};
                memset(smem, 0xA5, smem_bytes);
                E.block_arrived = 0;
                for (WarpSlots &w : E.warps) w = WarpSlots();
                for (int t = 0; t < E.nthreads; t++) {
                    Fiber &f = E.fibers[(size_t)t];
                    f.done = false;
                    f.copies.clear(), f.groups.clear();
                    context_make(&f.ctx, f.stack, trampoline);
                }
                bool stalled = false;  // the last pass made no progress
                for (int live = E.nthreads; live > 0;) {
                    const unsigned long long before = E.progress;
                    schedule_order(order, launch, E.nthreads, stalled);
                    for (int t : order) {
                        if (E.fibers[(size_t)t].done) continue;
                        E.cur = t;
                        warp_emu_thread_idx = WarpEmuDim{(unsigned)t, 0, 0};
                        context_switch(&E.sched, &E.fibers[(size_t)t].ctx);
                    }
                    live = 0;
                    for (int t = 0; t < E.nthreads; t++) live += !E.fibers[(size_t)t].done;
                    const bool all = order.size() == (size_t)E.nthreads;
                    if (live > 0 && E.progress == before && all)
                        fail("deadlock: every live thread waits at a barrier or collective the others do not reach");
                    stalled = E.progress == before;
                }
            }
}
