// trainer/estimate_png.c: `train_t5 estimate --png FILE`: the ZeRO paper's Figure 1 for this
// model, batch and world size. For each stage 0-3 and each rank, a bar of what the rank holds
// on the GPU (parameters, gradients, fp32 master weights, Adam m and v, activations, kernel
// workspace, ZeRO work buffers) and, with offload, in host memory (hatched), all to one scale
// in GiB, from the plan `estimate` prints (estimate_rows -> zero/planner.c); under it, the
// paper's model states for the stage (its formula, the same three colours, pale), so the
// planned bytes stand beside the formula. A partitioned piece is labelled with its shard.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../plot/canvas.h"
#include "../plot/legend.h"
#include "../plot/ticks.h"
#include "estimate.h"

#define GIB 1073741824.0
#define WIDTH 1400
#define LEFT 150.0          // row labels
#define RIGHT 280.0         // per-row totals
#define BAR 24.0
#define ROW 30.0
#define FONT 13.0
#define MAX_DRAWN_RANKS 4   // more ranks hold the same amounts: drawn once, said in a note

typedef enum { SEG_PARAMS = 0, SEG_GRADS, SEG_MASTER, SEG_MOMENTS, SEG_ACTS, SEG_WORKSPACE, SEG_ZERO, SEG_COUNT } Seg;
static const uint32_t seg_color[SEG_COUNT] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0x98df8a, 0x9467bd, 0xc5b0d5, 0x8c564b};
static const char *const seg_short[SEG_COUNT] = {"params", "grads", "master", "Adam m+v", "activations", "wksp",
                                                 "ZeRO bufs"};

typedef struct {
    double x0, x1, scale;  // pixels: the bar area and pixels per byte
} Scale;

// Which of a stage's model states each rank holds only its 1/N piece of (the paper's Figure 1).
static int seg_partitioned(Seg s, int stage) {
    return (s == SEG_MASTER || s == SEG_MOMENTS) ? stage >= 1 : s == SEG_GRADS ? stage >= 2 : s == SEG_PARAMS && stage >= 3;
}

// One stacked bar of `bytes` per segment at row y; host: hatched. Returns its end (pixels).
static double draw_bar(Canvas *c, const Scale *sc, double y, const double bytes[SEG_COUNT], int stage, int rank,
                       int world, int host, double alpha) {
    double x = sc->x0;
    for (int s = 0; s < SEG_COUNT; s++) {
        double w = bytes[s] * sc->scale;
        if (w <= 0) continue;
        canvas_set_color(c, seg_color[s], alpha);
        canvas_rect_fill(c, x, y, w, BAR);
        if (host) {
            canvas_set_color(c, 0xffffff, 0.8);
            canvas_rect_hatch(c, x, y, w, BAR, 6);
        }
        canvas_set_color(c, 0xffffff, 1);
        canvas_line(c, x + w, y, x + w, y + BAR, 1, 0);  // a seam between pieces
        char label[64];
        if (world > 1 && seg_partitioned((Seg)s, stage) && rank >= 0)
            snprintf(label, sizeof label, "%s %d/%d", seg_short[s], rank + 1, world);
        else snprintf(label, sizeof label, "%s", seg_short[s]);
        if (canvas_text_width(c, label, 11, 0) + 6 > w) snprintf(label, sizeof label, "%s", seg_short[s]);
        if (canvas_text_width(c, label, 11, 0) + 6 > w && world > 1 && seg_partitioned((Seg)s, stage) && rank >= 0)
            snprintf(label, sizeof label, "%d/%d", rank + 1, world);  // the shard, at least
        if (canvas_text_width(c, label, 11, 0) + 6 <= w) {
            canvas_set_color(c, s == SEG_MOMENTS || s == SEG_WORKSPACE ? 0x111111 : 0xffffff, 1);
            canvas_text(c, x + w / 2, y + BAR / 2 + 4, label, 11, 0, TEXT_CENTER, 0);
        }
        x += w;
    }
    return x;
}

static const char *stage_title(int stage) {
    return stage == 0 ? "stage 0: nothing partitioned, every rank holds everything (DDP)"
           : stage == 1 ? "stage 1: optimizer states partitioned (master weights, Adam m and v)"
           : stage == 2 ? "stage 2: optimizer states and gradients partitioned"
                        : "stage 3: optimizer states, gradients and parameters partitioned";
}

void estimate_draw_png(const EstimateSetup *su, const char *path) {
    EstimateRow rows[ESTIMATE_STAGES];
    double psi = estimate_rows(su, rows);
    int N = su->world, drawn = N < MAX_DRAWN_RANKS ? N : MAX_DRAWN_RANKS;
    double e = su->dt == DTYPE_F32 ? 4 : 2;
    double part = ceil(psi / N);  // elements a rank owns (zero/partition.h: ceil partitions)
    const char *prec = su->dt == DTYPE_F32 ? "fp32" : su->dt == DTYPE_BF16 ? "bf16" : "fp16";

    // per stage and rank: GPU and host bytes by segment, and the paper's three terms
    double gpu[ESTIMATE_STAGES][SEG_COUNT], host[ESTIMATE_STAGES][SEG_COUNT], paper[ESTIMATE_STAGES][SEG_COUNT];
    double maxb = 0;
    int any_host = 0;
    for (int st = 0; st < ESTIMATE_STAGES; st++) {
        const ZeroPlan *z = &rows[st].plan;
        double g[SEG_COUNT] = {z->gpu.params, z->gpu.grads, z->gpu.master, z->gpu.moments, z->gpu.activations,
                               z->gpu.workspace, z->gpu.zero_work};
        memcpy(gpu[st], g, sizeof g);
        // host memory (zero/planner.c): the owned fp32 master and moments, and from stage 2 the
        // owned gradient piece, which streams down during backward
        memset(host[st], 0, sizeof host[st]);
        if (z->host > 0) {
            host[st][SEG_MASTER] = part * 4;
            host[st][SEG_MOMENTS] = part * 8;
            double rest = (double)z->host - part * 12;
            host[st][SEG_GRADS] = rest > 0 ? rest : 0;
            any_host = 1;
        }
        double div = N;
        memset(paper[st], 0, sizeof paper[st]);
        paper[st][SEG_PARAMS] = e * psi / (st >= 3 ? div : 1);
        paper[st][SEG_GRADS] = e * psi / (st >= 2 ? div : 1);
        paper[st][SEG_MASTER] = (su->dt == DTYPE_F32 ? 0 : 4) * psi / (st >= 1 ? div : 1);
        paper[st][SEG_MOMENTS] = 8 * psi / (st >= 1 ? div : 1);
        double sum_paper = 0;
        for (int s = 0; s < SEG_COUNT; s++) sum_paper += paper[st][s];
        maxb = fmax(maxb, fmax((double)z->gpu.total, fmax((double)z->host, sum_paper)));
    }

    double head = 150, height = head + 70 + (N > drawn ? 18 : 0);
    for (int st = 0; st < ESTIMATE_STAGES; st++)  // a host row per rank where the stage has host memory
        height += 30 + drawn * (rows[st].plan.host > 0 ? 2 : 1) * ROW + ROW + 18;
    Canvas *c = canvas_create(WIDTH, (int)height);
    Scale sc = {LEFT, WIDTH - RIGHT, 0};
    Ticks tk = ticks_nice(0, maxb / GIB, 8);
    sc.scale = (sc.x1 - sc.x0) / (tk.hi * GIB);

    char buf[512], f[64];
    canvas_set_color(c, 0x111111, 1);
    snprintf(buf, sizeof buf, "What each rank holds at each ZeRO stage: %s, %s%s, %d rank%s", su->model, prec,
             su->dt == DTYPE_F32 ? "" : " mixed precision", N, N > 1 ? "s" : "");
    canvas_text(c, WIDTH / 2.0, 30, buf, 19, 1, TEXT_CENTER, 0);
    snprintf(buf, sizeof buf, "\xce\xa8 = %.2fM parameters; batch %d x %d+%d tokens a rank%s%s; bars to scale (GiB a rank), "
             "from the plan train_t5 estimate prints (zero/planner.c)", psi / 1e6, su->batch, su->S, su->T,
             su->ckpt ? ", gradient checkpointing" : "", su->offload ? ", optimizer offloaded to host memory" : "");
    canvas_text(c, WIDTH / 2.0, 54, buf, FONT, 0, TEXT_CENTER, 0);
    char pn[64], gn[64];
    snprintf(pn, sizeof pn, "parameters (%s)", prec);
    snprintf(gn, sizeof gn, "gradients (%s)", prec);
    LegendEntry le[] = {
        {pn, seg_color[SEG_PARAMS], LEGEND_BOX},
        {gn, seg_color[SEG_GRADS], LEGEND_BOX},
        {"fp32 master weights", seg_color[SEG_MASTER], LEGEND_BOX},
        {"Adam m + v (fp32)", seg_color[SEG_MOMENTS], LEGEND_BOX},
        {"activations", seg_color[SEG_ACTS], LEGEND_BOX},
        {"kernel workspace", seg_color[SEG_WORKSPACE], LEGEND_BOX},
        {"ZeRO work buffers (stages 2-3)", seg_color[SEG_ZERO], LEGEND_BOX},
        {"in host memory (offload)", 0x555555, LEGEND_HATCHED_BOX},
    };
    int nle = (int)(sizeof le / sizeof le[0]) - (any_host ? 0 : 1);
    legend_draw(c, 40, 66, WIDTH - 80, le, nle);
    canvas_set_color(c, 0x333333, 1);
    canvas_text(c, 40, 128, "n/N on a piece: rank n's shard of N (each rank updates only its own). Pale bar: the "
                "ZeRO paper's model states (Figure 1) for the stage; activations, workspace and buffers are not in it.",
                12, 0, TEXT_LEFT, 0);

    double y = head, grid_top = head - 6;
    for (int st = 0; st < ESTIMATE_STAGES; st++) {
        const ZeroPlan *z = &rows[st].plan;
        canvas_set_color(c, 0x111111, 1);
        canvas_text(c, 20, y + 16, stage_title(st), 14, 1, TEXT_LEFT, 0);
        double planned_states = (double)(z->gpu.params + z->gpu.grads + z->gpu.master + z->gpu.moments + z->host);
        estimate_paper_formula(st, su->dt, 1, f, sizeof f);
        snprintf(buf, sizeof buf, "model states: planned %.2f GiB, paper %s = %.2f GiB", planned_states / GIB, f,
                 rows[st].paper / GIB);
        canvas_text(c, WIDTH - 20, y + 16, buf, 13, 0, TEXT_RIGHT, 0);
        y += 30;
        for (int r = 0; r < drawn; r++) {
            canvas_set_color(c, 0x111111, 1);
            snprintf(buf, sizeof buf, "rank %d GPU", r);
            canvas_text(c, LEFT - 10, y + BAR / 2 + 5, buf, FONT, 0, TEXT_RIGHT, 0);
            double end = draw_bar(c, &sc, y, gpu[st], st, r, N, 0, 1);
            canvas_set_color(c, 0x111111, 1);
            snprintf(buf, sizeof buf, "%.2f GiB", (double)z->gpu.total / GIB);
            canvas_text(c, end + 8, y + BAR / 2 + 5, buf, FONT, 1, TEXT_LEFT, 0);
            y += ROW;
            if (z->host > 0) {
                canvas_set_color(c, 0x111111, 1);
                snprintf(buf, sizeof buf, "rank %d host", r);
                canvas_text(c, LEFT - 10, y + BAR / 2 + 5, buf, FONT, 0, TEXT_RIGHT, 0);
                end = draw_bar(c, &sc, y, host[st], st, r, N, 1, 1);
                canvas_set_color(c, 0x111111, 1);
                snprintf(buf, sizeof buf, "%.2f GiB", (double)z->host / GIB);
                canvas_text(c, end + 8, y + BAR / 2 + 5, buf, FONT, 0, TEXT_LEFT, 0);
                y += ROW;
            }
        }
        canvas_set_color(c, 0x111111, 1);
        canvas_text(c, LEFT - 10, y + BAR / 2 + 5, "paper, a rank", FONT, 0, TEXT_RIGHT, 0);
        double end = draw_bar(c, &sc, y, paper[st], st, -1, N, 0, 0.35);
        canvas_set_color(c, 0x555555, 1);
        canvas_rect_stroke(c, sc.x0, y, end - sc.x0, BAR, 1, 4);
        snprintf(buf, sizeof buf, "%s = %.2f GiB", f, rows[st].paper / GIB);
        canvas_text(c, end + 8, y + BAR / 2 + 5, buf, FONT, 0, TEXT_LEFT, 0);
        y += ROW + 18;
        canvas_set_color(c, 0xbbbbbb, 1);
        if (st + 1 < ESTIMATE_STAGES) canvas_line(c, 20, y - 10, WIDTH - 20, y - 10, 1, 0);
    }
    // the GiB axis under everything, with light grid lines through the stages
    for (int i = 0; i < tk.n; i++) {
        double x = sc.x0 + tk.at[i] * GIB * sc.scale;
        canvas_set_color(c, 0x999999, 0.35);
        canvas_line(c, x, grid_top, x, y, 1, 3);
        canvas_set_color(c, 0x333333, 1);
        canvas_line(c, x, y, x, y + 5, 1, 0);
        ticks_format(&tk, tk.at[i], buf, sizeof buf);
        canvas_text(c, x, y + 20, buf, FONT, 0, TEXT_CENTER, 0);
    }
    canvas_set_color(c, 0x333333, 1);
    canvas_line(c, sc.x0, y, sc.x1, y, 1.2, 0);
    canvas_text(c, (sc.x0 + sc.x1) / 2, y + 42, "GiB a rank", FONT, 0, TEXT_CENTER, 0);
    if (N > drawn) {
        snprintf(buf, sizeof buf, "ranks %d to %d hold the same amounts, each its own shard (partitions are "
                 "ceil(\xce\xa8/N) elements)", drawn, N - 1);
        canvas_text(c, 40, y + 62, buf, 12, 0, TEXT_LEFT, 0);
    }
    canvas_save_png(c, path);
    canvas_free(c);
}
