// plot/canvas_nocairo.c: the Canvas of a build without cairo (the Makefile picks this file
// when libcairo2-dev is missing and says so): every picture is refused with the fix, before
// anything is drawn or written.
#include "canvas.h"

#include <stdlib.h>

#include "../common/check.h"

const uint32_t plot_palette[PLOT_PALETTE_SIZE] = {0};

#define NO_CAIRO "this train_t5 was built without cairo, which draws the PNG; HINT: make deps (installs libcairo2-dev), then make"

void canvas_check_out_path(const char *path, const char *flag) { t5_fail("%s %s: %s", flag, path, NO_CAIRO); }
Canvas *canvas_create(int width, int height) { t5_fail("%s", NO_CAIRO); }
void canvas_free(Canvas *c) {}
void canvas_save_png(Canvas *c, const char *path) { t5_fail("%s", NO_CAIRO); }
void canvas_set_color(Canvas *c, uint32_t rgb, double alpha) {}
void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, double width, double dash) {}
void canvas_polyline(Canvas *c, const double *x, const double *y, int n, double width, double dash) {}
void canvas_rect_fill(Canvas *c, double x, double y, double w, double h) {}
void canvas_rect_stroke(Canvas *c, double x, double y, double w, double h, double width, double dash) {}
void canvas_rect_hatch(Canvas *c, double x, double y, double w, double h, double spacing) {}
void canvas_circle_fill(Canvas *c, double x, double y, double r) {}
double canvas_text(Canvas *c, double x, double y, const char *s, double size, int bold, TextAlign align,
                   double angle_deg) { return 0; }
double canvas_text_width(Canvas *c, const char *s, double size, int bold) { return 0; }
