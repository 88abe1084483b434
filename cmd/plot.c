// cmd/plot.c: `train_t5 plot`: a PNG of one or more runs' training curves from their
// trainer_state.json (trainer/log_history.c): loss with eval_loss, learning_rate, grad_norm,
// and eval_bleu when a run has it, one panel each, one colour per run, the folders named in
// the legend. Drawn by plot/ (cairo); written atomically, after every input was read.
#include "cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../common/flags.h"
#include "../plot/canvas.h"
#include "../plot/chart.h"
#include "../plot/legend.h"
#include "../trainer/log_history.h"

#define PLOT_USAGE "usage: train_t5 plot OUTPUT_DIR [OUTPUT_DIR2 ...] [--out FILE.png] [--width W --height H]"
#define MAX_RUNS PLOT_PALETTE_SIZE  // one colour each
#define MAX_PANELS 4
#define STYLE_COLOR 0x555555

// The folder a run is named by in the legend: as given, without a trailing '/'.
static void run_label(const char *arg, char *buf, size_t n) {
    snprintf(buf, n, "%s", arg);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
}

// The default --out: the first run's folder (the file's folder when a trainer_state.json was given).
static char *default_out(const char *first) {
    if (!path_is_file(first)) return path_join(first, "training_curves.png");
    const char *slash = strrchr(first, '/');
    if (!slash) return path_join(".", "training_curves.png");
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - first), first);
    return path_join(dir, "training_curves.png");
}

typedef struct {
    const char *title, *ylabel;
    LogKey key, dashed_key;  // dashed_key: a second series of the same run (eval_loss), or LOG_KEY_COUNT
} PanelSpec;

static void draw(const char *out, int width, int height, const char *const *labels, const LogRun *runs, int n_runs) {
    int have_bleu = 0, have_eval_loss = 0;
    for (int r = 0; r < n_runs; r++) {
        have_bleu |= runs[r].series[LOG_EVAL_BLEU].n > 0;
        have_eval_loss |= runs[r].series[LOG_EVAL_LOSS].n > 0;
    }
    PanelSpec specs[MAX_PANELS] = {
        {have_eval_loss ? "loss (train) and eval_loss" : "loss (train)", "loss", LOG_LOSS, LOG_EVAL_LOSS},
        {"learning_rate", "learning rate", LOG_LEARNING_RATE, LOG_KEY_COUNT},
        {"grad_norm (before clipping)", "gradient norm", LOG_GRAD_NORM, LOG_KEY_COUNT},
        {"eval_bleu", "BLEU", LOG_EVAL_BLEU, LOG_KEY_COUNT},
    };
    int n_panels = have_bleu ? 4 : 3;
    double x_lo = INFINITY, x_hi = -INFINITY;  // every panel on the same steps
    for (int r = 0; r < n_runs; r++)
        for (int k = 0; k < LOG_KEY_COUNT; k++)
            for (int i = 0; i < runs[r].series[k].n; i++)
                x_lo = fmin(x_lo, runs[r].series[k].x[i]), x_hi = fmax(x_hi, runs[r].series[k].x[i]);
    if (x_lo > 0 && x_lo <= 0.2 * x_hi) x_lo = 0;

    Canvas *c = canvas_create(width, height);
    char title[512];
    if (n_runs == 1) snprintf(title, sizeof title, "training curves: %s", labels[0]);
    else if (n_runs == 2) snprintf(title, sizeof title, "training curves: %s vs %s", labels[0], labels[1]);
    else snprintf(title, sizeof title, "training curves of %d runs", n_runs);
    canvas_set_color(c, 0x111111, 1);
    canvas_text(c, width / 2.0, 28, title, 18, 1, TEXT_CENTER, 0);

    LegendEntry le[MAX_RUNS + 2];
    int nl = 0;
    for (int r = 0; r < n_runs; r++) le[nl++] = (LegendEntry){labels[r], plot_palette[r], LEGEND_LINE};
    if (have_eval_loss) {
        le[nl++] = (LegendEntry){"solid: logged every --logging_steps", STYLE_COLOR, LEGEND_LINE};
        le[nl++] = (LegendEntry){"dashed, dots: evaluation (eval_loss)", STYLE_COLOR, LEGEND_DASHED_DOTS};
    }
    double top = 44 + legend_draw(c, 24, 40, width - 48, le, nl) + 8;

    // panels: two per row; an odd last one spans the row
    int rows = (n_panels + 1) / 2;
    double ph = (height - top - 10) / rows, pw = (width - 20) / 2.0;
    for (int p = 0; p < n_panels; p++) {
        const PanelSpec *ps = &specs[p];
        ChartSeries se[2 * MAX_RUNS];
        int ns = 0;
        for (int r = 0; r < n_runs; r++) {
            const LogSeries *s = &runs[r].series[ps->key];
            se[ns++] = (ChartSeries){s->x, s->y, s->n, plot_palette[r], 0, 0};
            if (ps->dashed_key != LOG_KEY_COUNT) {
                const LogSeries *d = &runs[r].series[ps->dashed_key];
                se[ns++] = (ChartSeries){d->x, d->y, d->n, plot_palette[r], 6, 1};
            }
        }
        char note[128];
        snprintf(note, sizeof note, "no \"%s\" in log_history", log_key_names[ps->key]);
        ChartPanel cp = {ps->title, "step", ps->ylabel, se, ns, note, x_lo, x_hi};
        int row = p / 2, col = p % 2;
        int span = p == n_panels - 1 && n_panels % 2 == 1;
        chart_draw(c, 10 + col * pw, top + row * ph, span ? 2 * pw : pw, ph, &cp);
    }
    canvas_save_png(c, out);
    canvas_free(c);
}

int cmd_run_plot(int argc, char **argv) {
    const char *out = NULL;
    int width = 1200, height = 800, help = 0;
    FlagSpec specs[] = {
        {"out", FLAG_STRING, &out, "the PNG to write (OUTPUT_DIR/training_curves.png)"},
        {"width", FLAG_INT, &width, "pixels (1200)"},
        {"height", FLAG_INT, &height, "pixels (800)"},
        {"help", FLAG_BOOL, &help, "this help"},
    };
    int n_specs = (int)(sizeof specs / sizeof specs[0]);
    // the folders are the words that are neither a flag nor a flag's value
    const char **dirs = mallocCheck(sizeof(char *) * (size_t)(argc ? argc : 1));
    int nd = flags_parse_words(argc, argv, 2, specs, n_specs, "plot", dirs);
    if (help) {
        printf("%s\n  A PNG of each run's trainer_state.json log_history: loss and eval_loss, learning_rate,\n"
               "  grad_norm and eval_bleu against step; several folders are overlaid, one colour each.\n", PLOT_USAGE);
        flags_print_help(specs, n_specs);
        return 0;
    }
    if (nd == 0) t5_fail("plot: no OUTPUT_DIR given; HINT: %s", PLOT_USAGE);
    if (nd > MAX_RUNS) t5_fail("plot: %d folders given, at most %d can be told apart by colour; HINT: plot fewer at a time", nd, MAX_RUNS);
    if (width < 400 || width > 8000 || height < 300 || height > 8000)
        t5_fail("plot: --width %d --height %d: the picture must be 400-8000 x 300-8000 pixels", width, height);
    char *out_path = out ? NULL : default_out(dirs[0]);
    if (!out) out = out_path;
    LogRun runs[MAX_RUNS];
    char labels_buf[MAX_RUNS][512];
    const char *labels[MAX_RUNS];
    for (int r = 0; r < nd; r++) {  // every input is read before the output is checked or written
        log_history_load(&runs[r], dirs[r]);
        run_label(dirs[r], labels_buf[r], sizeof labels_buf[r]);
        labels[r] = labels_buf[r];
    }
    canvas_check_out_path(out, "--out");
    draw(out, width, height, labels, runs, nd);
    printf("wrote %s (%dx%d PNG", out, width, height);
    for (int r = 0; r < nd; r++)
        printf("; %s: %d loss, %d eval_loss, %d eval_bleu points%s", labels[r], runs[r].series[LOG_LOSS].n,
               runs[r].series[LOG_EVAL_LOSS].n, runs[r].series[LOG_EVAL_BLEU].n,
               runs[r].eval_from_results ? " (evaluation from eval_results.json)" : "");
    for (int r = 0; r < nd; r++)
        if (runs[r].skipped)
            printf("; %s: %d non-finite values (NaN, inf or null) left out", labels[r], runs[r].skipped);
    printf(")\n");
    for (int r = 0; r < nd; r++) log_history_free(&runs[r]);
    free(out_path);
    free(dirs);
    return 0;
}
