// trainer/tensorboard.c: TensorBoard event files (see tensorboard.h).
#include "tensorboard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "tensorboard.pb-c.h"
#include "tfrecord.h"

static double wall_seconds(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void host_name(char *out, size_t cap) {
    if (gethostname(out, cap) != 0) snprintf(out, cap, "localhost");
    out[cap - 1] = '\0';
}

char *tb_default_logdir(const char *output_dir) {
    // datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname(), in the C locale
    // (Python's %b is the locale's month too; in the C locale both say Jan..Dec)
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char host[256], name[512];
    host_name(host, sizeof host);
    snprintf(name, sizeof name, "runs/%s%02d_%02d-%02d-%02d_%s", months[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min,
             tm.tm_sec, host);
    return path_join(output_dir, name);
}

// Pack an Event, frame it as a TFRecord, write it.
static void write_event(TbWriter *w, const Tensorboard__Event *ev) {
    size_t n = tensorboard__event__get_packed_size(ev);
    unsigned char *buf = mallocCheck(n ? n : 1);
    tensorboard__event__pack(ev, buf);
    tfrecord_write(w->f, w->path, buf, n);
    free(buf);
}

void tb_open(TbWriter *w, const char *dir) {
    tb_open_for(w, dir, "--report_to tensorboard", "give a writable --logging_dir");
}

void tb_open_for(TbWriter *w, const char *dir, const char *who, const char *hint) {
    memset(w, 0, sizeof *w);
    mkdir_p(dir);
    char host[256], name[512];
    host_name(host, sizeof host);
    double now = wall_seconds();
    // torch.utils.tensorboard's name: "events.out.tfevents.%010d.%s.%s.%s" (time, host, pid, uid 0)
    snprintf(name, sizeof name, "events.out.tfevents.%010ld.%s.%ld.0", (long)now, host, (long)getpid());
    w->dir = path_join(dir, "");  // a copy (with a trailing /)
    w->path = path_join(dir, name);
    w->f = file_open_regular(w->path, "wb", "the TensorBoard event file");  // a FIFO: one line, never a wait
    if (!w->f)
        t5_fail("%s: cannot create %s: %s; HINT: %s", who, w->path, strerror(errno), hint);
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    write_event(w, &ev);
    if (fflush(w->f) != 0) t5_fail("%s: writing %s failed: %s", who, w->path, strerror(errno));
    w->who = who;
}

void tb_tag(const char *key, char *out, size_t cap) {
    if (!strncmp(key, "eval_", 5)) snprintf(out, cap, "eval/%s", key + 5);
    else if (!strncmp(key, "test_", 5)) snprintf(out, cap, "test/%s", key + 5);
    else snprintf(out, cap, "train/%s", key);
}

unsigned char *tb_encode_scalar(const char *tag, float value, long step, double wall_time, size_t *n) {
    Tensorboard__SummaryValue v = TENSORBOARD__SUMMARY_VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = TENSORBOARD__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    Tensorboard__SummaryValue *vs[1] = {&v};
    Tensorboard__Summary s = TENSORBOARD__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    *n = tensorboard__event__get_packed_size(&ev);
    unsigned char *buf = mallocCheck(*n);
    tensorboard__event__pack(&ev, buf);
    return buf;
}

void tb_log(TbWriter *w, const cJSON *logs, long step) {
    if (!w->f) return;
    double now = wall_seconds();
    const cJSON *it;
    cJSON_ArrayForEach(it, logs) {
        if (!cJSON_IsNumber(it)) continue;  // HF writes strings as text summaries; our logs hold numbers only
        char tag[256];
        tb_tag(it->string, tag, sizeof tag);
        size_t n;
        unsigned char *buf = tb_encode_scalar(tag, (float)it->valuedouble, step, now, &n);  // add_scalar: float32
        tfrecord_write(w->f, w->path, buf, n);
        free(buf);
    }
    // HF flushes after every record (tb_writer.flush()): the file is whole if the run dies later
    tb_flush(w);
}

void tb_log_scalar(TbWriter *w, const char *tag, double value, long long step) {
    if (!w->f) return;
    size_t n;
    unsigned char *buf = tb_encode_scalar(tag, (float)value, (long)step, wall_seconds(), &n);  // add_scalar: float32
    tfrecord_write(w->f, w->path, buf, n);
    free(buf);
}

void tb_flush(TbWriter *w) {
    if (w->f && fflush(w->f) != 0) t5_fail("%s: writing %s failed: %s", w->who, w->path, strerror(errno));
}

void tb_close(TbWriter *w) {
    if (w->f) fcloseCheck(w->f, w->path);
    free(w->path);
    free(w->dir);
    memset(w, 0, sizeof *w);
}
