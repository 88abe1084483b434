// plot/canvas.h: a white picture to draw on and save as a PNG (train_t5 plot, estimate --png).
// The only interface to cairo (canvas.c); canvas_nocairo.c stands in for it in a build
// without libcairo2-dev and refuses with the fix. Coordinates are pixels, y down. A PNG is
// written to "<path>.tmp" and renamed into place (common/fileio.h): never half-written.
#pragma once
#include <stdint.h>

typedef struct Canvas Canvas;

typedef enum { TEXT_LEFT = 0, TEXT_CENTER, TEXT_RIGHT } TextAlign;

// One colour per run / per kind of memory: the tab10 palette (matplotlib's default).
#define PLOT_PALETTE_SIZE 10
extern const uint32_t plot_palette[PLOT_PALETTE_SIZE];  // 0xRRGGBB

// Before any work: dies in one line when `path` cannot be written (its folder is missing or
// not writable, or it is a folder); `flag` names the option that gave it ("--out").
void canvas_check_out_path(const char *path, const char *flag);

Canvas *canvas_create(int width, int height);  // filled white
void canvas_free(Canvas *c);
// Write the PNG atomically; errors exit naming the path.
void canvas_save_png(Canvas *c, const char *path);

void canvas_set_color(Canvas *c, uint32_t rgb, double alpha);
// A straight line; dash > 0: dashes of that many pixels.
void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, double width, double dash);
// A polyline through n points (x[i], y[i]); NaN points break it.
void canvas_polyline(Canvas *c, const double *x, const double *y, int n, double width, double dash);
void canvas_rect_fill(Canvas *c, double x, double y, double w, double h);
void canvas_rect_stroke(Canvas *c, double x, double y, double w, double h, double width, double dash);
// Diagonal hatching inside the rectangle (what lives in host memory, in the ZeRO picture).
void canvas_rect_hatch(Canvas *c, double x, double y, double w, double h, double spacing);
void canvas_circle_fill(Canvas *c, double x, double y, double r);
// Text with its baseline at y; angle_deg 0 or 90 (vertical, reading bottom to top, centred
// on (x, y) when TEXT_CENTER). Returns the width in pixels.
double canvas_text(Canvas *c, double x, double y, const char *s, double size, int bold, TextAlign align,
                   double angle_deg);
double canvas_text_width(Canvas *c, const char *s, double size, int bold);
