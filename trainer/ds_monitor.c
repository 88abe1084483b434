// trainer/ds_monitor.c: DeepSpeed's tensorboard and csv_monitor blocks (see ds_monitor.h).
#include "ds_monitor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "log_format.h"

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(mallocCheck(n), s, n);
}

char *ds_monitor_path_join(const char *a, const char *b) {
    if (b[0] == '/' || !a[0]) return dup(b);
    size_t n = strlen(a);
    char *out = mallocCheck(n + strlen(b) + 2);
    snprintf(out, n + strlen(b) + 2, "%s%s%s", a, a[n - 1] == '/' ? "" : "/", b);
    return out;
}

// DeepSpeed's os.makedirs(log_dir, exist_ok=True), each failure one line naming the block.
static void make_dirs(const char *dir, const char *block, const char *file) {
    char *p = dup(dir);
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            t5_fail("%s: \"%s\": cannot create the directory '%s' (%s); HINT: set \"%s.output_path\" to a writable "
                    "directory", file, block, p, strerror(errno), block);
        p[i] = c;
    }
    if (!path_is_dir(dir))
        t5_fail("%s: \"%s\": '%s' exists and is not a directory; HINT: change \"%s.output_path\" or \"%s.job_name\"",
                file, block, dir, block, block);
    free(p);
}

static char *block_dir(const DsMonitorBlock *b) {
    char *d = ds_monitor_path_join(b->output_path.v, b->job_name.v);
    if (!d[0]) {  // both empty: the working directory
        free(d);
        d = dup(".");
    }
    return d;
}

void ds_monitor_open(DsMonitor *m, const DsConfig *c) {
    memset(m, 0, sizeof *m);
    if (c->tensorboard.enabled.v) {
        char *dir = block_dir(&c->tensorboard);
        make_dirs(dir, "tensorboard", c->file);
        tb_open_for(&m->tb, dir, "DeepSpeed's tensorboard monitor",
                    "set \"tensorboard.output_path\" to a writable directory");
        printf("DeepSpeed tensorboard monitor: %s (Train/Samples/lr%s at step = samples; tensorboard --logdir %s)\n",
               m->tb.path, c->fp16.enabled.v ? ", Train/Samples/loss_scale" : "", dir);
        free(dir);
    }
    if (c->csv_monitor.enabled.v) {
        m->csv_dir = block_dir(&c->csv_monitor);
        make_dirs(m->csv_dir, "csv_monitor", c->file);
        printf("DeepSpeed csv_monitor: %s/Train_Samples_lr.csv%s (appended: step,value at step = samples)\n",
               m->csv_dir, c->fp16.enabled.v ? " and Train_Samples_loss_scale.csv" : "");
    }
    fflush(stdout);
}

// csvMonitor.write_events for one event.
static void csv_event(DsMonitor *m, int which, const char *tag, double value, long long step) {
    char name[128], *path, v[40];
    snprintf(name, sizeof name, "%s.csv", tag);
    for (char *p = name; *p; p++)
        if (*p == '/' || *p == ' ') *p = '_';
    path = path_join(m->csv_dir, name);
    FILE *f = file_open_regular(path, "a", "DeepSpeed's csv_monitor file");
    if (!f) t5_fail("csv_monitor: cannot open %s for appending (%s); HINT: set \"csv_monitor.output_path\" to a writable "
                    "directory", path, strerror(errno));
    if (!m->csv_header[which]) {
        fprintf(f, "step,%s\r\n", strrchr(tag, '/') ? strrchr(tag, '/') + 1 : tag);
        m->csv_header[which] = 1;
    }
    pyfloat_repr(value, v, sizeof v);
    fprintf(f, "%lld,%s\r\n", step, v);
    fcloseCheck(f, path);
    free(path);
}

void ds_monitor_step(DsMonitor *m, double lr, int fp16, double loss_scale, long long samples) {
    if (m->tb.f) {
        tb_log_scalar(&m->tb, "Train/Samples/lr", lr, samples);
        if (fp16) tb_log_scalar(&m->tb, "Train/Samples/loss_scale", loss_scale, samples);
        tb_flush(&m->tb);
    }
    if (m->csv_dir) {
        csv_event(m, 0, "Train/Samples/lr", lr, samples);
        if (fp16) csv_event(m, 1, "Train/Samples/loss_scale", loss_scale, samples);
    }
}

void ds_monitor_close(DsMonitor *m) {
    tb_close(&m->tb);
    free(m->csv_dir);
    memset(m, 0, sizeof *m);
}
