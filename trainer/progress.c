// trainer/progress.c: progress bar / log lines (see progress.h).
#include "progress.h"

#include "../common/clock.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) { return clock_seconds(); }

void progress_init(Progress *p, int total_steps) {
    p->is_tty = isatty(fileno(stderr));
    p->total_steps = total_steps;
    p->t_start = now_seconds();
    p->samples_done = 0;
    p->last_len = 0;
}

static void format_hms(double s, char *out, size_t cap) {
    long t = (long)(s + 0.5);
    snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
}

void progress_step(Progress *p, int step, double loss, long samples) {
    p->samples_done = samples;
    if (!p->is_tty) return;
    double el = now_seconds() - p->t_start;
    double eta = step > 0 ? el / step * (p->total_steps - step) : 0;
    char e1[32], e2[32], bar[31];
    format_hms(el, e1, sizeof e1);
    format_hms(eta, e2, sizeof e2);
    int filled = p->total_steps > 0 ? (int)(30.0 * step / p->total_steps) : 0;
    for (int i = 0; i < 30; i++) bar[i] = i < filled ? '#' : '.';
    bar[30] = '\0';
    p->last_len = fprintf(stderr, "\r[%s] %d/%d  loss %.4f  %.1f samples/s  %s elapsed, ETA %s ", bar, step,
                          p->total_steps, loss, el > 0 ? samples / el : 0.0, e1, e2);
    fflush(stderr);
}

void progress_log(Progress *p, const char *line) {
    if (p->is_tty && p->last_len) fprintf(stderr, "\r%*s\r", p->last_len, "");
    fprintf(p->is_tty ? stderr : stdout, "%s\n", line);
    fflush(p->is_tty ? stderr : stdout);
}

void progress_done(Progress *p) {
    if (p->is_tty && p->last_len) fprintf(stderr, "\n");
}
