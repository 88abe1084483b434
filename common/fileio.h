// common/fileio.h: files that are never half-written. An AtomicFile writes to
// "<path>.tmp" and renames it into place on commit (after fflush + fsync), so a crash
// or an error exit leaves either the old file or none, never a truncated one.
// Also: mkdir -p, whole-file copy, and JSON documents saved atomically.
#pragma once
#include <stdio.h>

typedef struct {
    char *path, *tmp_path;
    FILE *f;
} AtomicFile;

// An error exit (any t5_fail / t5_die) before atomic_commit removes the temp file. A FIFO,
// socket or device at path or at its .tmp is refused in one line (nothing waits on it, and
// the rename never replaces a device node).
FILE *atomic_open(AtomicFile *af, const char *path);
// That check of path alone, for a flag checked before any work (plot --out, --explain_png).
void atomic_check_target(const char *path);
void atomic_commit(AtomicFile *af);   // flush, fsync, close, rename; errors exit

// A directory being written (a checkpoint before its rename): an error exit removes it
// with everything in it, unless fileio_keep(path) was called first.
void fileio_remove_at_exit(const char *dir);
void fileio_keep(const char *path);
// rm -rf: what can be removed is (no symlink is followed).
void remove_tree(const char *path);

// mkdir -p; errors exit with the path and reason.
void mkdir_p(const char *dir);
// 1 if path is a directory holding at least one entry (other than . and ..).
int dir_is_nonempty(const char *dir);
int path_is_dir(const char *path);
int path_is_file(const char *path);  // a regular file
int path_exists(const char *path);
// CRC-32C (common/crc32c.h) and size of a whole file, read in chunks of chunk_bytes (one
// buffer, mallocCheck'ed: counted in check.h's counting mode). 0 (errno kept) when it cannot
// be opened; a read error is a one-line error naming the file.
#include <stdint.h>
int file_crc32c(const char *path, size_t chunk_bytes, uint32_t *crc, uint64_t *bytes);
// Copy src to dst atomically.
void file_copy_atomic(const char *src, const char *dst);

struct cJSON;
// Print a cJSON document (formatted, 2-space indent as HF writes) atomically.
void json_save_atomic(const struct cJSON *root, const char *path);
// A deep copy with every object's keys sorted (Python's json.dumps(sort_keys=True), as HF
// writes trainer_state.json and the *_results.json files); the caller frees it.
struct cJSON *json_sorted_copy(const struct cJSON *item);
