// tests/test_fork.h: the check every bad-input test needs: run a function in a child
// process and pass if it exits with status 1 and its stderr is ONE "error:" line (plus an
// optional "HINT:" line) naming what it should (needle1, and needle2 when not NULL).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

typedef void (*FailFn)(const void *arg);
extern void __lsan_disable(void) __attribute__((weak));

static inline void test_expect_error(const char *what, FailFn fn, const void *arg, const char *needle1,
                              const char *needle2) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        // the error exit leaves allocations behind by design (the process ends): keep
        // LeakSanitizer (when built in) from reporting them
        if (__lsan_disable) __lsan_disable();
        close(fds[0]);
        dup2(fds[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(3);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    const char *second = strchr(buf, '\n');
    int shape_ok = strncmp(buf, "error: ", 7) == 0 && n > 0 && buf[n - 1] == '\n' &&
                   (lines == 1 || (lines == 2 && strncmp(second + 1, "HINT:", 5) == 0));
    int ok = code == 1 && shape_ok && strstr(buf, needle1) && (!needle2 || strstr(buf, needle2));
    char desc[1200];
    char *nl = strchr(buf, '\n');
    if (nl) *nl = '\0';
    snprintf(desc, sizeof desc, "error: %-30s exit %d, %d line(s): %.600s", what, code, lines, buf);
    test_check(ok, desc);
    if (!ok) printf("       (wanted exit 1, one error line containing \"%s\"%s%s)\n", needle1, needle2 ? " and " : "",
                    needle2 ? needle2 : "");
}
