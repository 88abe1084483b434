// bench/blog_chart.c: the chart of bench/blog_table.sh's table (issue 20): for every row of the
// 2021 post's benchmark, three panels side by side (the largest batch per GPU, train seconds,
// eval seconds), each with up to three horizontal bars: the post's 2021 figure (grey), HF +
// DeepSpeed measured today (orange) and train_t5 (blue). A row that did not run says why in
// place of its bar ("OOM", or the start of the error). Drawn with plot/ (cairo).
//   build/bench/blog_chart OUT/blog_table.json OUT/blog_table.png    (make build/bench/blog_chart)
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../plot/canvas.h"
#include "../plot/legend.h"

enum { WIDTH = 1500, LABEL_W = 270, TOP = 120, ROW_H = 66, BAR_H = 16, PANEL_GAP = 30, N_PANELS = 3, N_SOURCES = 3 };
static const char *const panel_title[N_PANELS] = {"largest batch per GPU", "train seconds", "eval seconds (4 beams + BLEU)"};
static const char *const panel_key[N_PANELS] = {"batch", "train_s", "eval_s"};
static const char *const source_name[N_SOURCES] = {"the post (2x Titan RTX, 2021)", "HF + DeepSpeed today",
                                                   "train_t5"};
static const char *const source_key[N_SOURCES] = {"post", "hf", "train_t5"};
static const uint32_t source_color[N_SOURCES] = {0x9a9a9a, 0xff7f0e, 0x1f77b4};

// A row's value for one source and panel: NAN when absent; *why the text to draw instead (or NULL).
static double row_value(const cJSON *row, int s, int p, const char **why) {
    *why = NULL;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(row, source_key[s]);
    if (!cJSON_IsObject(o)) return NAN;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (cJSON_IsString(err)) {
        const char *e = err->valuestring;
        *why = strstr(e, "out of memory") || strstr(e, "OutOfMemory") ? "out of memory"
               : strstr(e, "not even batch 1 fits") || strstr(e, "does not fit") ? "does not fit at batch 1 (plan)"
               : e;
        return NAN;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, panel_key[p]);
    if (cJSON_IsNumber(v)) return v->valuedouble;
    if (cJSON_IsString(v) && *v->valuestring) {  // the post's batch: "16", "20 (30 OOM)", "OOM at 1"
        char *end;
        double d = strtod(v->valuestring, &end);
        if (end != v->valuestring) return d;
        *why = v->valuestring;
    }
    return NAN;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s BLOG_TABLE.json OUT.png\n", argv[0]);
        return 2;
    }
    canvas_check_out_path(argv[2], "OUT.png");
    size_t len = 0;
    char *text = read_text_file(argv[1], &len);
    if (!text) t5_fail("blog_chart: %s: cannot read it; HINT: run bench/blog_table.sh first", argv[1]);
    cJSON *root = json_read_parse(text, len, argv[1], JSON_DUP_LAST, NULL);  // as Python wrote it (json.dump)
    free(text);
    const cJSON *rows = root ? cJSON_GetObjectItemCaseSensitive(root, "rows") : NULL;
    if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) == 0)
        t5_fail("blog_chart: %s: no \"rows\" array with rows; HINT: bench/blog_table_md.py writes it", argv[1]);
    int n = cJSON_GetArraySize(rows);
    Canvas *c = canvas_create(WIDTH, TOP + n * ROW_H + 40);
    const cJSON *date = cJSON_GetObjectItemCaseSensitive(root, "date"), *machine = cJSON_GetObjectItemCaseSensitive(root, "machine");
    char title[400];
    snprintf(title, sizeof title, "The 2021 post's table re-measured: t5-large en-ro, 24 GiB per GPU (%s, %s)%s",
             cJSON_IsString(date) ? date->valuestring : "?", cJSON_IsString(machine) ? machine->valuestring : "?",
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "fake")) ? "  [FAKE RESULTS]" : "");
    canvas_set_color(c, 0x111111, 1);
    canvas_text(c, WIDTH / 2.0, 30, title, 18, 1, TEXT_CENTER, 0);
    LegendEntry le[N_SOURCES];
    for (int s = 0; s < N_SOURCES; s++) le[s] = (LegendEntry){source_name[s], source_color[s], LEGEND_BOX};
    legend_draw(c, LABEL_W, 48, WIDTH - LABEL_W - 40, le, N_SOURCES);
    double panel_w = (WIDTH - LABEL_W - 20 - (N_PANELS - 1) * PANEL_GAP) / (double)N_PANELS;
    for (int p = 0; p < N_PANELS; p++) {
        double x0 = LABEL_W + p * (panel_w + PANEL_GAP), vmax = 0;
        for (int i = 0; i < n; i++)
            for (int s = 0; s < N_SOURCES; s++) {
                const char *why;
                double v = row_value(cJSON_GetArrayItem(rows, i), s, p, &why);
                if (isfinite(v) && v > vmax) vmax = v;
            }
        if (vmax <= 0) vmax = 1;
        canvas_set_color(c, 0x111111, 1);
        canvas_text(c, x0 + panel_w / 2, TOP - 14, panel_title[p], 14, 1, TEXT_CENTER, 0);
        canvas_set_color(c, 0x666666, 1);
        canvas_line(c, x0, TOP - 6, x0, TOP + n * ROW_H, 1, 0);
        double scale = (panel_w - 70) / vmax;  // room for the value after the longest bar
        for (int i = 0; i < n; i++) {
            const cJSON *row = cJSON_GetArrayItem(rows, i);
            double y = TOP + i * ROW_H + 6;
            if (p == 0) {  // the row's label, left of the first panel
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(row, "id"), *label = cJSON_GetObjectItemCaseSensitive(row, "label");
                char buf[200];
                snprintf(buf, sizeof buf, "%d. %s", cJSON_IsNumber(id) ? id->valueint : 0,
                         cJSON_IsString(label) ? label->valuestring : "?");
                canvas_set_color(c, 0x111111, 1);
                canvas_text(c, LABEL_W - 12, y + ROW_H / 2.0 - 4, buf, 12, 0, TEXT_RIGHT, 0);
                canvas_set_color(c, 0xe6e6e6, 1);
                canvas_line(c, 20, y + ROW_H - 6, WIDTH - 20, y + ROW_H - 6, 1, 0);
            }
            for (int s = 0; s < N_SOURCES; s++) {
                const char *why;
                double v = row_value(row, s, p, &why), by = y + s * (BAR_H + 2);
                char buf[64];
                if (isfinite(v)) {
                    canvas_set_color(c, source_color[s], 1);
                    canvas_rect_fill(c, x0, by, v * scale, BAR_H);
                    snprintf(buf, sizeof buf, p == 0 ? "%.0f" : "%.1f", v);
                    canvas_set_color(c, 0x111111, 1);
                    canvas_text(c, x0 + v * scale + 4, by + BAR_H - 4, buf, 11, 0, TEXT_LEFT, 0);
                } else if (why) {
                    snprintf(buf, sizeof buf, "%.40s", why);
                    canvas_set_color(c, source_color[s], 1);
                    canvas_text(c, x0 + 4, by + BAR_H - 4, buf, 11, 1, TEXT_LEFT, 0);
                }
            }
        }
    }
    canvas_save_png(c, argv[2]);
    canvas_free(c);
    printf("blog_chart: wrote %s (%d rows)\n", argv[2], n);
    cJSON_Delete(root);
    return 0;
}
