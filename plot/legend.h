// plot/legend.h: a legend: entries of a swatch (line, dashed line, dot or box) and a label,
// laid out left to right and wrapped onto further rows when the width runs out.
#pragma once
#include <stdint.h>

#include "canvas.h"

typedef enum { LEGEND_LINE = 0, LEGEND_DASHED_DOTS, LEGEND_BOX, LEGEND_HATCHED_BOX } LegendSwatch;

typedef struct {
    const char *label;
    uint32_t color;
    LegendSwatch swatch;
} LegendEntry;

// Draw the entries from (x, y) (top left) within width w; returns the height used.
double legend_draw(Canvas *c, double x, double y, double w, const LegendEntry *e, int n);
