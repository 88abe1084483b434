// common/ticker.c: a progress line redrawn from its own thread (ticker.h).
#include "ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"

#define TICK_TTY_S 1.0       // redraw period on a terminal (and the quiet first second)
#define TICK_LOG_FIRST_S 10.0  // off a terminal: the first line after this long
#define TICK_LOG_EVERY_S 30.0  // then one every this long

struct Ticker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, tty, drawn_len;
    char what[160];
    const char *unit, *detail_label;
    const int *detail;
    long total, done;  // read and written under mu
    double t0, phase_t0;
};

static void hms(double s, char *out, size_t cap) {
    long t = (long)(s + 0.5);
    snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
}

// The line, under mu.
static int format_line(const Ticker *t, char *buf, size_t cap) {
    double now = clock_seconds(), el = now - t->phase_t0;
    char e1[32], e2[32] = "";
    hms(now - t->t0, e1, sizeof e1);
    int k = t->unit ? snprintf(buf, cap, "%s: %s %ld", t->what, t->unit,
                               t->done + (t->done < t->total || !t->total ? 1 : 0))
                    : snprintf(buf, cap, "%s", t->what);
    if (t->unit && t->total > 0) k += snprintf(buf + k, cap - (size_t)k, "/%ld", t->total);
    if (t->detail && k < (int)cap) {
        int v = __atomic_load_n(t->detail, __ATOMIC_RELAXED);
        k += snprintf(buf + k, cap - (size_t)k, ", %d %s", v, t->detail_label ? t->detail_label : "");
    }
    if (t->total > 0 && t->done > 0 && k < (int)cap) {
        hms(el / (double)t->done * (double)(t->total - t->done), e2, sizeof e2);
        k += snprintf(buf + k, cap - (size_t)k, " | %s elapsed, ETA %s", e1, e2);
    } else if (k < (int)cap) {
        k += snprintf(buf + k, cap - (size_t)k, " | %s elapsed", e1);
    }
    return k < (int)cap ? k : (int)cap - 1;
}

static void *ticker_main(void *arg) {
    Ticker *t = arg;
    pthread_mutex_lock(&t->mu);
    double next = t->t0 + (t->tty ? 0.0 : TICK_LOG_FIRST_S);  // on a terminal: drawn at once, then every second
    while (!t->stop) {
        double now = clock_seconds();
        if (now >= next) {
            char line[512];
            int n = format_line(t, line, sizeof line);
            if (t->tty) {
                fprintf(stderr, "\r%s%*s", line, t->drawn_len > n ? t->drawn_len - n : 0, "");
                fflush(stderr);
                t->drawn_len = n;
            } else {
                printf("%s\n", line);
                fflush(stdout);
            }
            next = now + (t->tty ? TICK_TTY_S : TICK_LOG_EVERY_S);
            continue;
        }
        double wait = next - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);  // pthread_cond_timedwait's default clock
        ts.tv_sec += (time_t)wait;
        ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    if (t->tty && t->drawn_len) {  // leave the terminal as it was
        fprintf(stderr, "\r%*s\r", t->drawn_len, "");
        fflush(stderr);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

Ticker *ticker_start(const char *what, const char *unit, long total) {
    Ticker *t = callocCheck(1, sizeof *t);
    snprintf(t->what, sizeof t->what, "%s", what);
    t->unit = unit;
    t->total = total;
    t->tty = isatty(STDERR_FILENO);
    t->t0 = t->phase_t0 = clock_seconds();
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int err = pthread_create(&t->thread, NULL, ticker_main, t);
    if (err) t5_die(__FILE__, __LINE__, strerror(err), "the system is out of threads (ulimit -u)");
    return t;
}

void ticker_set(Ticker *t, long done) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->done = done;
    pthread_mutex_unlock(&t->mu);
}

void ticker_detail(Ticker *t, const int *value, const char *label) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->detail = value;
    t->detail_label = label;
    pthread_mutex_unlock(&t->mu);
}

void ticker_phase(Ticker *t, const char *what, long total) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    snprintf(t->what, sizeof t->what, "%s", what);
    t->total = total;
    t->done = 0;
    t->phase_t0 = clock_seconds();
    pthread_mutex_unlock(&t->mu);
}

void ticker_stop(Ticker *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}
