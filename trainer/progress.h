// trainer/progress.h: what a person watching the run sees. On a terminal (stderr is a
// tty): one redrawn progress line with step, loss, samples/s and ETA. Otherwise: a plain
// log line at every logging step (like HF's printed log dicts), nothing redrawn.
#pragma once

typedef struct {
    int is_tty;
    int total_steps;
    double t_start;      // seconds (monotonic)
    long samples_done;
    int last_len;        // chars of the last redrawn line
} Progress;

double now_seconds(void);  // monotonic clock
void progress_init(Progress *p, int total_steps);
// After each optimizer step (redraws on a terminal).
void progress_step(Progress *p, int step, double loss, long samples);
// A log record: printed as a line in either mode (terminal: above the bar).
void progress_log(Progress *p, const char *line);
void progress_done(Progress *p);
