// plot/canvas.c: the Canvas on cairo's image surface (ARGB32, antialiased, the "sans" face).
// Saving streams cairo's PNG encoder into an AtomicFile (common/fileio.h).
#include "canvas.h"

#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/fileio.h"

const uint32_t plot_palette[PLOT_PALETTE_SIZE] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                                  0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};

struct Canvas {
    cairo_surface_t *surface;
    cairo_t *cr;
    int width, height;
};

// cairo reports failures as a status; every call that can fail is checked here.
static void cairo_check(cairo_status_t st, const char *what, const char *file, int line) {
    if (st == CAIRO_STATUS_SUCCESS) return;
    char msg[512];
    snprintf(msg, sizeof msg, "cairo: %s failed: %s", what, cairo_status_to_string(st));
    t5_die(file, line, msg, "out of memory, or a picture too large (--width/--height); try a smaller one");
}
#define cairoCheck(st, what) cairo_check(st, what, __FILE__, __LINE__)

void canvas_check_out_path(const char *path, const char *flag) {
    if (!*path) t5_fail("%s: empty path; HINT: give a file name such as curves.png", flag);
    if (path_is_dir(path)) t5_fail("%s %s: is a directory; HINT: give a file name inside it, e.g. %s/picture.png", flag, path, path);
    atomic_check_target(path);  // a FIFO or device: said now, before the picture is drawn
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (path_exists(dir) && !path_is_dir(dir))
        t5_fail("%s %s: %s is not a folder; HINT: write the picture elsewhere", flag, path, dir);
    if (!path_is_dir(dir))
        t5_fail("%s %s: the folder %s does not exist; HINT: create it (mkdir -p %s) or write elsewhere", flag, path, dir, dir);
    if (access(dir, W_OK) != 0)
        t5_fail("%s %s: the folder %s is not writable (%s); HINT: write the picture elsewhere", flag, path, dir,
                strerror(errno));
}

Canvas *canvas_create(int width, int height) {
    Canvas *c = callocCheck(1, sizeof *c);
    c->width = width;
    c->height = height;
    c->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
    cairoCheck(cairo_surface_status(c->surface), "cairo_image_surface_create");
    c->cr = cairo_create(c->surface);
    cairoCheck(cairo_status(c->cr), "cairo_create");
    cairo_set_source_rgb(c->cr, 1, 1, 1);
    cairo_paint(c->cr);
    cairo_set_line_cap(c->cr, CAIRO_LINE_CAP_BUTT);
    cairo_set_line_join(c->cr, CAIRO_LINE_JOIN_ROUND);
    return c;
}

void canvas_free(Canvas *c) {
    if (!c) return;
    cairo_destroy(c->cr);
    cairo_surface_destroy(c->surface);
    free(c);
}

typedef struct {
    FILE *f;
    const char *path;
} PngSink;

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int length) {
    PngSink *s = closure;
    fwriteCheck(data, 1, length, s->f, s->path);
    return CAIRO_STATUS_SUCCESS;
}

void canvas_save_png(Canvas *c, const char *path) {
    cairoCheck(cairo_status(c->cr), "drawing");
    cairo_surface_flush(c->surface);
    AtomicFile af;
    PngSink sink = {atomic_open(&af, path), af.tmp_path};
    cairoCheck(cairo_surface_write_to_png_stream(c->surface, png_write, &sink), "writing the PNG");
    atomic_commit(&af);
}

void canvas_set_color(Canvas *c, uint32_t rgb, double alpha) {
    cairo_set_source_rgba(c->cr, ((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0, alpha);
}

static void stroke(Canvas *c, double width, double dash) {
    cairo_set_line_width(c->cr, width);
    if (dash > 0) cairo_set_dash(c->cr, (double[]){dash, dash * 0.6}, 2, 0);
    cairo_stroke(c->cr);
    cairo_set_dash(c->cr, NULL, 0, 0);
}

void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, double width, double dash) {
    cairo_move_to(c->cr, x0, y0);
    cairo_line_to(c->cr, x1, y1);
    stroke(c, width, dash);
}

void canvas_polyline(Canvas *c, const double *x, const double *y, int n, double width, double dash) {
    int pen_down = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i]) || isnan(y[i])) {
            pen_down = 0;
            continue;
        }
        if (pen_down) cairo_line_to(c->cr, x[i], y[i]);
        else cairo_move_to(c->cr, x[i], y[i]);
        pen_down = 1;
    }
    stroke(c, width, dash);
}

void canvas_rect_fill(Canvas *c, double x, double y, double w, double h) {
    cairo_rectangle(c->cr, x, y, w, h);
    cairo_fill(c->cr);
}

void canvas_rect_stroke(Canvas *c, double x, double y, double w, double h, double width, double dash) {
    cairo_rectangle(c->cr, x, y, w, h);
    stroke(c, width, dash);
}

void canvas_rect_hatch(Canvas *c, double x, double y, double w, double h, double spacing) {
    cairo_save(c->cr);
    cairo_rectangle(c->cr, x, y, w, h);
    cairo_clip(c->cr);
    for (double d = -h; d < w; d += spacing) {
        cairo_move_to(c->cr, x + d, y + h);
        cairo_line_to(c->cr, x + d + h, y);
    }
    cairo_set_line_width(c->cr, 1.0);
    cairo_stroke(c->cr);
    cairo_restore(c->cr);
}

void canvas_circle_fill(Canvas *c, double x, double y, double r) {
    cairo_new_sub_path(c->cr);
    cairo_arc(c->cr, x, y, r, 0, 2 * M_PI);
    cairo_fill(c->cr);
}

static void set_font(Canvas *c, double size, int bold) {
    cairo_select_font_face(c->cr, "sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(c->cr, size);
}

double canvas_text_width(Canvas *c, const char *s, double size, int bold) {
    set_font(c, size, bold);
    cairo_text_extents_t e;
    cairo_text_extents(c->cr, s, &e);
    return e.x_advance;
}

double canvas_text(Canvas *c, double x, double y, const char *s, double size, int bold, TextAlign align,
                   double angle_deg) {
    double w = canvas_text_width(c, s, size, bold);
    double shift = align == TEXT_CENTER ? w / 2 : align == TEXT_RIGHT ? w : 0;
    cairo_save(c->cr);
    cairo_translate(c->cr, x, y);
    cairo_rotate(c->cr, -angle_deg * M_PI / 180.0);
    cairo_move_to(c->cr, -shift, 0);
    cairo_show_text(c->cr, s);
    cairo_restore(c->cr);
    return w;
}
