// plot/chart.h: one panel of a line chart: a frame, x and y axes with nice ticks
// (plot/ticks.h), a light grid, axis labels, a title, and its series as lines, with dots
// where a series has few points (an evaluation logged once shows as a dot).
#pragma once
#include <stdint.h>

#include "canvas.h"

typedef struct {
    const double *x, *y;  // (n)
    int n;
    uint32_t color;
    double dash;          // 0: solid line; > 0: dashed
    int markers;          // 1: a dot at every point
} ChartSeries;

typedef struct {
    const char *title, *xlabel, *ylabel;
    const ChartSeries *series;
    int n_series;
    const char *empty_note;  // drawn in the middle when no series has a point
    double x_lo, x_hi;       // the x range when x_hi > x_lo (panels side by side share it); else the data's
} ChartPanel;

// Draw panel p into the box (x, y, w, h) of canvas c (pixels, labels included).
void chart_draw(Canvas *c, double x, double y, double w, double h, const ChartPanel *p);
