// common/file_open.c: regular files only, opened without blocking (see file_open.h).
#include "file_open.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

const char *file_kind_name(mode_t mode) {
    if (S_ISREG(mode)) return NULL;
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (a pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "neither a file nor a directory";
}

__attribute__((noreturn)) static void file_refuse(const char *path, const char *kind, const char *what) {
    const char *hint = strcmp(kind, "a directory") == 0
                           ? "name the file itself"
                           : "give the path of a regular file (a FIFO or a device would make the run wait, or read "
                             "without end)";
    t5_fail("%s: is %s, not a regular file%s%s%s; HINT: %s", path, kind, what ? " (" : "", what ? what : "",
            what ? ")" : "", hint);
}

void file_refuse_non_regular(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    const char *kind = file_kind_name(st.st_mode);
    if (kind) file_refuse(path, kind, what);
}

// Open with O_NONBLOCK, then the kind of file; regular files (and pipes when allowed) come back
// in blocking mode.
static int open_checked(const char *path, int flags, mode_t mode, const char *what, int pipes_ok) {
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) {
        int err = errno;
        // a socket does not open (ENXIO), nor does a FIFO for writing with no reader; a
        // directory does not open for writing (EISDIR): say what the path is
        if (err == ENXIO || err == EISDIR) file_refuse_non_regular(path, what);
        errno = err;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    const char *kind = file_kind_name(st.st_mode);
    if (kind && !(pipes_ok && S_ISFIFO(st.st_mode))) {
        close(fd);
        file_refuse(path, kind, what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

int file_open_regular_fd(const char *path, int flags, mode_t mode, const char *what) {
    return open_checked(path, flags, mode, what, 0);
}

// fopen's mode string as open(2) flags.
static int mode_flags(const char *mode) {
    int plus = strchr(mode, '+') != NULL;
    switch (mode[0]) {
    case 'w': return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
    case 'a': return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
    default: return plus ? O_RDWR : O_RDONLY;
    }
}

static FILE *stream_of(int fd, const char *mode) {
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

FILE *file_open_regular(const char *path, const char *mode, const char *what) {
    return stream_of(open_checked(path, mode_flags(mode), 0666, what, 0), mode);
}

FILE *file_open_stream(const char *path, const char *what) {
    return stream_of(open_checked(path, O_RDONLY, 0, what, 1), "rb");
}
