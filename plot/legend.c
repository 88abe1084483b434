// plot/legend.c: a wrapping legend (legend.h).
#include "legend.h"

#define FONT 13.0
#define ROW 22.0
#define SWATCH 28.0

double legend_draw(Canvas *c, double x, double y, double w, const LegendEntry *e, int n) {
    double cx = x, cy = y + ROW / 2;
    for (int i = 0; i < n; i++) {
        double item = SWATCH + 6 + canvas_text_width(c, e[i].label, FONT, 0) + 22;
        if (cx > x && cx + item > x + w) cx = x, cy += ROW;  // wrap
        canvas_set_color(c, e[i].color, 1);
        switch (e[i].swatch) {
        case LEGEND_LINE: canvas_line(c, cx, cy, cx + SWATCH, cy, 2.5, 0); break;
        case LEGEND_DASHED_DOTS:
            canvas_line(c, cx, cy, cx + SWATCH, cy, 2.0, 5);
            canvas_circle_fill(c, cx + SWATCH / 2, cy, 3.5);
            break;
        case LEGEND_BOX: canvas_rect_fill(c, cx, cy - 7, SWATCH, 14); break;
        case LEGEND_HATCHED_BOX:
            canvas_rect_hatch(c, cx, cy - 7, SWATCH, 14, 5);
            canvas_rect_stroke(c, cx, cy - 7, SWATCH, 14, 1, 0);
            break;
        }
        canvas_set_color(c, 0x111111, 1);
        canvas_text(c, cx + SWATCH + 6, cy + FONT * 0.35, e[i].label, FONT, 0, TEXT_LEFT, 0);
        cx += item;
    }
    return cy + ROW / 2 - y;
}
