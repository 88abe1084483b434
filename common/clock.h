// common/clock.h: the monotonic wall clock every timing in the project reads (step phases,
// progress lines, heartbeats, start-up figures).
#pragma once
#include <time.h>

static inline double clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
