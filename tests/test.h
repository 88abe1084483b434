// tests/test.h: the tiny test harness shared by every C test. Each check prints
// "OK" or "NOT OK" with the figure it compared; test_summary() prints
// "N passed, M failed" and returns the exit code (non-zero on any failure).
// tests/run_tests.sh adds the per-binary counts into the final line of `make test`.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_passed_count = 0, test_failed_count = 0;

// Record one check. `cond` true = pass.
static inline int test_check(int cond, const char *what) {
    if (cond) {
        test_passed_count++;
        printf("OK     %s\n", what);
    } else {
        test_failed_count++;
        printf("NOT OK %s\n", what);
    }
    fflush(stdout);
    return cond;
}

// Normalized max error: max|a-b| / max(max|b|, tiny). Prints it with the name.
static inline int test_close(const char *name, const float *got, const float *want, size_t n, double tol) {
    double maxdiff = 0, maxref = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) finite = 0;
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)want[i]) > maxref) maxref = fabs((double)want[i]);
    }
    double rel = maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
    char buf[512];
    snprintf(buf, sizeof buf, "%-60s max abs diff %.3e  rel %.3e  (tol %.0e, n=%zu)", name, maxdiff, rel, tol, n);
    return test_check(finite && rel <= tol, buf);
}

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
    return test_failed_count ? 1 : 0;
}
