// common/ticker.h: progress for a long task the person at the terminal waits on (evaluation,
// prediction, bench, tokenizing a large file), from a thread of its own, so that a line moves
// even while one unit of work (a batch of beam search, a training step) takes minutes.
//   on a terminal (stderr is a tty): one line on stderr, drawn when the task starts and redrawn
//       every second: "eval: batch 4/40, 57 tokens generated in it | 0:00:12 elapsed, ETA
//       0:02:40"; the line is cleared when the task ends;
//   otherwise: a plain line on stdout after 10 s, then every 30 s (log files stay readable).
// The task moves the counters (ticker_set, and a detail counter it points the ticker at);
// the thread only reads them. ticker_stop clears the line. NULL tickers are no-ops, so a
// caller on a rank that does not print passes NULL around.
#pragma once

typedef struct Ticker Ticker;

// what: the task ("eval", "tokenizing train.source"); unit: what is counted ("batch", "line",
// "step"; NULL: nothing is counted, elapsed time only); total: units in all (0: unknown, no ETA).
Ticker *ticker_start(const char *what, const char *unit, long total);
// units done so far (the ETA follows from them)
void ticker_set(Ticker *t, long done);
// a finer counter inside the current unit, read when drawing: "<*value> <label>" (e.g. the
// decode position of the batch being generated); value may be NULL.
void ticker_detail(Ticker *t, const int *value, const char *label);
// the phase's name, replacing `what` ("bench: warm-up" -> "bench: timed steps")
void ticker_phase(Ticker *t, const char *what, long total);
void ticker_stop(Ticker *t);
