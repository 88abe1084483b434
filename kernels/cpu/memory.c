// kernels/cpu/memory.c: memory entries of the CPU backend. "Device" memory is host
// memory, so copies are memcpy; alloc returns zeroed memory as backend.h requires.
#include <stdlib.h>
#include <string.h>

#include "../../common/check.h"
#include "cpu_ops.h"

void *cpu_memory_alloc(size_t bytes) { return callocCheck(1, bytes); }

void cpu_memory_free(void *p) { free(p); }

void cpu_memory_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

void cpu_memory_to_device(void *dst, const void *host_src, size_t bytes) {
    if (bytes) memcpy(dst, host_src, bytes);
}

void cpu_memory_to_host(void *host_dst, const void *src, size_t bytes) {
    if (bytes) memcpy(host_dst, src, bytes);
}
