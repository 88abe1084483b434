// kernels/cpu/memory.c: memory entries of the CPU backend. "Device" memory is host
// memory, so copies are memcpy; alloc returns
// zeroed memory as backend.h requires.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/check.h"
#include "cpu_ops.h"

// Every block carries a 64-byte header holding its size, so the backend can count the
// bytes in use and the peak (backend.h mem_in_use / mem_peak) like the CUDA allocator.
#define HEADER 64
static size_t in_use = 0, peak = 0;

void *cpu_memory_alloc(size_t bytes) {
    char *block = callocCheck(1, bytes + HEADER);
    memcpy(block, &bytes, sizeof bytes);
    in_use += bytes;
    if (in_use > peak) peak = in_use;
    return block + HEADER;
}

void cpu_memory_free(void *p) {
    if (!p) return;
    char *block = (char *)p - HEADER;
    size_t bytes;
    memcpy(&bytes, block, sizeof bytes);
    in_use -= bytes;
    free(block);
}

size_t cpu_memory_in_use(void) { return in_use; }

// host memory of the CPU backend: the same memory, not counted as "device" bytes
void *cpu_memory_host_alloc(size_t bytes, int pinned) {
    (void)pinned;
    return callocCheck(1, bytes ? bytes : 1);
}

void cpu_memory_host_free(void *p, int pinned) {
    (void)pinned;
    free(p);
}
size_t cpu_memory_peak(void) { return peak; }

void cpu_memory_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

void cpu_memory_to_device(void *dst, const void *host_src, size_t bytes) {
    if (bytes) memcpy(dst, host_src, bytes);
}

void cpu_memory_to_host(void *host_dst, const void *src, size_t bytes) {
    if (bytes) memcpy(host_dst, src, bytes);
}

void cpu_memory_synchronize(void) {}

// "Device" memory is host memory: the asynchronous copies are done when they return.
static void copy_slot_check(int slot) {
    if (slot < 0 || slot >= BACKEND_COPY_SLOTS)
        t5_die(__FILE__, __LINE__, "an asynchronous copy names a slot outside 0 .. BACKEND_COPY_SLOTS-1",
               "a bug in the caller: use the slots kernels/backend.h provides");
}

void cpu_memory_to_host_async(void *host_dst, const void *src, size_t bytes, int slot) {
    copy_slot_check(slot);
    cpu_memory_to_host(host_dst, src, bytes);
}

void cpu_memory_to_device_async(void *dst, const void *host_src, size_t bytes, int slot) {
    copy_slot_check(slot);
    cpu_memory_to_device(dst, host_src, bytes);
}

void cpu_memory_copy_wait(int slot) { copy_slot_check(slot); }

// The side stream's ops run at once like every other op; the state only checks that the
// caller pairs side_begin / side_end and marks inside them, as the CUDA backend requires.
static int side_open;

void cpu_memory_side_begin(void) {
    if (side_open) t5_die(__FILE__, __LINE__, "side_begin: the side stream is open already", "a bug in the caller: report it");
    side_open = 1;
}

void cpu_memory_side_end(void) {
    if (!side_open) t5_die(__FILE__, __LINE__, "side_end: no side stream is open", "a bug in the caller: report it");
    side_open = 0;
}

void cpu_memory_side_mark(int k) {
    if (!side_open || k < 0)
        t5_die(__FILE__, __LINE__, "side_mark: outside side_begin / side_end, or a negative point", "a bug in the caller: report it");
}

void cpu_memory_wait_mark(int k) {
    if (side_open || k < 0)
        t5_die(__FILE__, __LINE__, "wait_mark: inside side_begin / side_end, or a negative point", "a bug in the caller: report it");
}

void cpu_memory_set_cap(size_t bytes) {
    if (bytes) t5_fail("a memory cap (--max_gpu_memory) needs --device cuda: the CPU backend has none");
}

size_t cpu_memory_cap(void) { return 0; }

void cpu_memory_set_tf32(int on) {
    if (on) t5_fail("--tf32 requires Ampere or a newer GPU (--device cuda): the CPU backend computes in exact fp32");
}

size_t cpu_memory_capacity(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;  // 0: unknown
}
