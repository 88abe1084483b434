// plot/ticks.c: nice tick marks (see ticks.h).
#include "ticks.h"

#include <math.h>
#include <stdio.h>

// The nice number 1, 2, 5 or 10 x 10^k closest above raw / target.
static double nice_step(double span, int target) {
    double raw = span / (target > 1 ? target : 1);
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

Ticks ticks_nice(double lo, double hi, int target) {
    Ticks t = {0};
    if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
    if (hi < lo) {
        double s = lo;
        lo = hi, hi = s;
    }
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi)) || hi == lo) {  // one value: a range around it
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad, hi += pad;
    }
    for (;;) {
        t.step = nice_step(hi - lo, target);
        t.lo = floor(lo / t.step) * t.step;
        t.hi = ceil(hi / t.step) * t.step;
        t.n = (int)llround((t.hi - t.lo) / t.step) + 1;
        if (t.n <= TICKS_MAX) break;
        target--;  // rounding made too many: fewer, wider steps
    }
    for (int i = 0; i < t.n; i++) {
        t.at[i] = t.lo + i * t.step;
        if (fabs(t.at[i]) < t.step * 1e-9) t.at[i] = 0;  // -0 and 1e-17 are 0
    }
    return t;
}

void ticks_format(const Ticks *t, double v, char *buf, size_t n) {
    double a = fabs(t->step), top = fmax(fabs(t->lo), fabs(t->hi));
    if (v == 0) {
        snprintf(buf, n, "0");
    } else if (top < 1e-3 || top >= 1e6) {  // scientific: the digits the step needs at v's exponent
        int digits = (int)floor(log10(fabs(v)) + 1e-9) - (int)floor(log10(a) + 1e-9);
        snprintf(buf, n, "%.*e", digits < 0 ? 0 : digits > 6 ? 6 : digits, v);
    } else if (a >= 1000 && fmod(v, 1000) == 0) {
        snprintf(buf, n, "%.0fk", v / 1000);
    } else {
        int dec = a >= 1 ? 0 : (int)ceil(-log10(a) - 1e-9);
        if (a < 1 && fabs(a * pow(10, dec) - llround(a * pow(10, dec))) > 1e-6) dec++;  // 0.25
        snprintf(buf, n, "%.*f", dec, v);
    }
}
