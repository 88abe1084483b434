// plot/ticks.h: axis ranges and tick marks at 1, 2 or 5 x 10^k, and their labels, as a
// reader expects them (0.0018 stays 0.0018, 2e-05 is written so). Pure functions.
#pragma once
#include <stddef.h>

#define TICKS_MAX 16

typedef struct {
    double lo, hi;            // the axis range: the data's, widened to whole ticks
    double step;              // between ticks
    int n;                    // ticks
    double at[TICKS_MAX];     // their values, lo..hi
} Ticks;

// Ticks for data in [lo, hi] (lo == hi: a range around the value), about `target` of them.
Ticks ticks_nice(double lo, double hi, int target);
// The label of tick value v of axis t ("0", "2.5", "0.0015", "2.5e-05", "2k"): fixed decimals
// as many as the step needs, scientific when the axis' largest value is below 1e-3 or 1e6 and up.
void ticks_format(const Ticks *t, double v, char *buf, size_t n);
