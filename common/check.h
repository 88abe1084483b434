// common/check.h: checked wrappers for every libc call that can fail, and the one
// error exit of the program. A failure prints "file:line: what failed" plus a HINT
// line telling the user what to do, then exits non-zero (never abort/assert).
//
// User-facing input errors (bad config, bad checkpoint, bad flag) use t5_fail():
// one line naming the file, the key, what was expected and what was found.
#pragma once
#include <stddef.h>
#include <stdio.h>

// Print "error: <msg>" (one line) and exit(1). For bad user input.
__attribute__((noreturn, format(printf, 1, 2))) void t5_fail(const char *fmt, ...);

// Print "<file>:<line>: <msg>\nHINT: <hint>" and exit(1). For failed system calls.
__attribute__((noreturn)) void t5_die(const char *file, int line, const char *msg, const char *hint);

// Regular files only (common/file_open.h): a directory, FIFO or device is one error line.
FILE *fopen_check(const char *path, const char *mode, const char *file, int line);
void fread_check(void *dst, size_t size, size_t n, FILE *f, const char *path, const char *file, int line);
void fwrite_check(const void *src, size_t size, size_t n, FILE *f, const char *path, const char *file, int line);
void fclose_check(FILE *f, const char *path, const char *file, int line);
void *malloc_check(size_t bytes, const char *file, int line);
void *calloc_check(size_t n, size_t size, const char *file, int line);
void *realloc_check(void *p, size_t bytes, const char *file, int line);

#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)
#define freadCheck(dst, size, n, f, path) fread_check(dst, size, n, f, path, __FILE__, __LINE__)
#define fwriteCheck(src, size, n, f, path) fwrite_check(src, size, n, f, path, __FILE__, __LINE__)
#define fcloseCheck(f, path) fclose_check(f, path, __FILE__, __LINE__)
#define mallocCheck(bytes) malloc_check(bytes, __FILE__, __LINE__)
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)
#define reallocCheck(p, bytes) realloc_check(p, bytes, __FILE__, __LINE__)
// Frees what mallocCheck / callocCheck / reallocCheck gave (NULL is fine); with counting on
// (below), the block leaves the count.
void free_check(void *p);
#define freeCheck(p) free_check(p)

// Counting mode (a test hook: T5_COUNT_HOST_MEM=1 in the environment turns it on at the
// first allocation): the wrappers above keep the bytes they handed out (the allocator's
// usable size of each block) that freeCheck has not taken back, and the highest that count
// reached. Code that must stay within a memory bound (the checkpoint's save and load,
// zero/checkpoint.c) allocates and frees through them; a block freed with plain free() is
// never taken off, so the figures err high, never low. 0 when counting is off.
int check_mem_counting(void);
size_t check_mem_current(void);
size_t check_mem_peak(void);
// The peak starts again from the current count (the start of a measured section).
void check_mem_reset_peak(void);

// Read a whole (small) text file into a NUL-terminated malloc'd buffer; NULL if it
// cannot be opened (errno kept), fails loudly on read errors and on anything but a regular
// file (a directory, FIFO, device: common/file_open.h).
char *read_text_file(const char *path, size_t *len_out);

// Join dir and name with exactly one '/'; returns a malloc'd string.
char *path_join(const char *dir, const char *name);
