// common/file_open.h: opening a path the user named without ever blocking on it.
//
// open(2) of a FIFO waits for the other end (forever when nobody comes), a read of /dev/zero
// never ends, a socket does not open, and a directory opens but does not read. Every file
// train_t5 reads or writes goes through here: opened with O_NONBLOCK (so the open returns at
// once), then fstat; anything but a regular file is one error line saying what the path is
// ("PATH: is a FIFO (a pipe), not a regular file"), and O_NONBLOCK is cleared again.
// Failures of the open itself (ENOENT, EACCES) come back to the caller, who says them in the
// words of its file.
#pragma once
#include <stdio.h>
#include <sys/types.h>

// A descriptor of the regular file at path, opened with open(2)'s flags and mode (O_CLOEXEC
// added); -1 with errno when it cannot be opened. `what` names the file's role in the error
// line ("the DeepSpeed config, --deepspeed"), or NULL.
int file_open_regular_fd(const char *path, int flags, mode_t mode, const char *what);

// The same as a stdio stream; mode as fopen's ("rb", "wb", "ab", "w+b", "r+b"). NULL with
// errno when it cannot be opened.
FILE *file_open_regular(const char *path, const char *mode, const char *what);

// A file read once from start to end (train_t5 bleu HYP REF): a regular file or a pipe (the
// shell's <(cmd)); a FIFO that nobody writes reads as empty instead of waiting for a writer.
FILE *file_open_stream(const char *path, const char *what);

// One error line when path exists (symlinks followed) and is not a regular file.
void file_refuse_non_regular(const char *path, const char *what);

// "a FIFO (a pipe)", "a directory", ... for a stat mode; NULL for a regular file.
const char *file_kind_name(mode_t mode);
