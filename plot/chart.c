// plot/chart.c: a line-chart panel (chart.h).
#include "chart.h"

#include <math.h>

#include "ticks.h"

#define FONT 13.0
#define TITLE_FONT 15.0
#define AXIS_COLOR 0x333333
#define GRID_COLOR 0xdddddd

static double map(double v, double lo, double hi, double a, double b) { return a + (v - lo) / (hi - lo) * (b - a); }

void chart_draw(Canvas *c, double x, double y, double w, double h, const ChartPanel *p) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < p->n_series; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double xv = p->series[s].x[i], yv = p->series[s].y[i];
            if (!isfinite(xv) || !isfinite(yv)) continue;
            xmin = fmin(xmin, xv), xmax = fmax(xmax, xv), ymin = fmin(ymin, yv), ymax = fmax(ymax, yv);
        }
    int empty = !(xmin <= xmax);
    if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (p->x_hi > p->x_lo) xmin = p->x_lo, xmax = p->x_hi;
    if (xmin > 0 && xmin <= 0.2 * xmax) xmin = 0;  // steps: start the axis at 0 when close
    Ticks tx = ticks_nice(xmin, xmax, 6), ty = ticks_nice(ymin, ymax, 5);

    // the plot area: room for the title above, tick labels and the x label below, the y label left
    char buf[64];
    double ylab_w = 0;
    for (int i = 0; i < ty.n; i++) {
        ticks_format(&ty, ty.at[i], buf, sizeof buf);
        ylab_w = fmax(ylab_w, canvas_text_width(c, buf, FONT, 0));
    }
    double left = x + 22 + ylab_w + 10, right = x + w - 12, top = y + 30, bottom = y + h - 44;

    canvas_set_color(c, 0x111111, 1);
    canvas_text(c, (left + right) / 2, y + 20, p->title, TITLE_FONT, 1, TEXT_CENTER, 0);
    for (int i = 0; i < ty.n; i++) {  // y grid + labels
        double py = map(ty.at[i], ty.lo, ty.hi, bottom, top);
        canvas_set_color(c, GRID_COLOR, 1);
        canvas_line(c, left, py, right, py, 1, 0);
        canvas_set_color(c, AXIS_COLOR, 1);
        canvas_line(c, left - 5, py, left, py, 1, 0);
        ticks_format(&ty, ty.at[i], buf, sizeof buf);
        canvas_text(c, left - 8, py + FONT * 0.35, buf, FONT, 0, TEXT_RIGHT, 0);
    }
    for (int i = 0; i < tx.n; i++) {  // x grid + labels
        double px = map(tx.at[i], tx.lo, tx.hi, left, right);
        canvas_set_color(c, GRID_COLOR, 1);
        canvas_line(c, px, top, px, bottom, 1, 0);
        canvas_set_color(c, AXIS_COLOR, 1);
        canvas_line(c, px, bottom, px, bottom + 5, 1, 0);
        ticks_format(&tx, tx.at[i], buf, sizeof buf);
        canvas_text(c, px, bottom + 8 + FONT, buf, FONT, 0, TEXT_CENTER, 0);
    }
    canvas_set_color(c, AXIS_COLOR, 1);
    canvas_rect_stroke(c, left, top, right - left, bottom - top, 1.2, 0);
    canvas_text(c, (left + right) / 2, y + h - 6, p->xlabel, FONT, 0, TEXT_CENTER, 0);
    canvas_text(c, x + 16, (top + bottom) / 2, p->ylabel, FONT, 0, TEXT_CENTER, 90);
    if (empty) {
        canvas_set_color(c, 0x888888, 1);
        if (p->empty_note) canvas_text(c, (left + right) / 2, (top + bottom) / 2, p->empty_note, FONT, 0, TEXT_CENTER, 0);
        return;
    }
    for (int s = 0; s < p->n_series; s++) {
        const ChartSeries *se = &p->series[s];
        if (se->n == 0) continue;
        double px[se->n], py[se->n];
        for (int i = 0; i < se->n; i++) {
            int ok = isfinite(se->x[i]) && isfinite(se->y[i]);
            px[i] = ok ? map(se->x[i], tx.lo, tx.hi, left, right) : NAN;
            py[i] = ok ? map(se->y[i], ty.lo, ty.hi, bottom, top) : NAN;
        }
        canvas_set_color(c, se->color, 1);
        if (se->n > 1) canvas_polyline(c, px, py, se->n, 2.0, se->dash);
        if (se->markers || se->n < 3)
            for (int i = 0; i < se->n; i++)
                if (!isnan(px[i])) canvas_circle_fill(c, px[i], py[i], 3.5);
    }
}
