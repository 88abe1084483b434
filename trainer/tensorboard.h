// trainer/tensorboard.h: `--report_to tensorboard`: TensorBoard event files written by the
// binary itself, as transformers 5.17's TensorBoardCallback writes them through torch's
// SummaryWriter: in the logging dir (--logging_dir, else $TENSORBOARD_LOGGING_DIR, else
// OUTPUT/runs/<Mon><DD>_<HH>-<MM>-<SS>_<hostname>), a file
// events.out.tfevents.<time>.<hostname>.<pid>.0 holding an Event{file_version
// "brain.Event:2"} and then, for every log record (on_log), one Event{wall_time, step,
// summary{value{tag, simple_value}}} per number, the key renamed by HF's rewrite_logs
// (eval_loss -> eval/loss, test_x -> test/x, anything else -> train/loss, train/epoch ...).
// The file is flushed after each record, so it is whole after a crash. Rank 0 only.
//
// Encoding: protobuf-c (Debian's libprotobuf-c-dev), from trainer/tensorboard.proto, which
// copies TensorFlow's field numbers. A real protobuf library rather than hand-written varints:
// the wire format (zigzag, fixed64 doubles, nested lengths, oneofs) is then right by
// construction, and the tests decode what we write with the same generated code.
// Framing: trainer/tfrecord.c; checksums: common/crc32c.c.
#pragma once
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;     // NULL: not open
    char *path;  // the event file
    char *dir;   // the logging dir
    const char *who;  // for messages: "--report_to tensorboard", or DeepSpeed's monitor
} TbWriter;

// HF's default_logdir() under output_dir: OUTPUT/runs/%b%d_%H-%M-%S_<hostname> (malloc'd).
char *tb_default_logdir(const char *output_dir);
// Make dir (and its parents), create the event file, write the file_version event.
void tb_open(TbWriter *w, const char *dir);
// The same for another writer of event files (DeepSpeed's monitor, trainer/ds_monitor.h): its
// errors name `who` and end with HINT: `hint`.
void tb_open_for(TbWriter *w, const char *dir, const char *who, const char *hint);
// One scalar at step (not flushed; tb_flush).
void tb_log_scalar(TbWriter *w, const char *tag, double value, long long step);
void tb_flush(TbWriter *w);
// HF's TensorBoardCallback.on_log: every number of logs as a scalar at step; flushed.
void tb_log(TbWriter *w, const cJSON *logs, long step);
void tb_close(TbWriter *w);

// HF's rewrite_logs for one key: "eval_x" -> "eval/x", "test_x" -> "test/x", else "train/x".
void tb_tag(const char *key, char *out, size_t cap);
// One scalar Event, protobuf-encoded into a malloc'd buffer (*n bytes); for tests too.
unsigned char *tb_encode_scalar(const char *tag, float value, long step, double wall_time, size_t *n);
