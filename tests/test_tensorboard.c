// tests/test_tensorboard.c: the pieces of `--report_to tensorboard` (trainer/tensorboard.h):
//   crc32c    CRC-32C against the published vectors (RFC 3720 B.4, "123456789") and TFRecord's mask
//   framing   a TFRecord: length, masked CRCs, data, checked byte by byte
//   encoding  one scalar Event's protobuf bytes, worked out by hand from event.proto/summary.proto
//   tags      HF's rewrite_logs: eval_x -> eval/x, test_x -> test/x, else train/x
//   file      tb_open + tb_log into a scratch directory, read back record by record: every CRC
//             right, the file_version event first, then one scalar event per number, decoded
// tests/tensorboard_events.sh reads a real run's file with TensorBoard's own reader.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/crc32c.h"
#include "../trainer/tensorboard.h"
#include "../trainer/tfrecord.h"
#include "tensorboard.pb-c.h"
#include "test.h"
#include "test_tmp.h"

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static void check_crc32c(void) {
    char buf[160];
    struct { const char *what; unsigned char data[32]; size_t n; uint32_t want; } v[] = {
        {"32 zero bytes (RFC 3720 B.4)", {0}, 32, 0x8A9136AAu},
        {"empty", {0}, 0, 0x00000000u},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint32_t got = crc32c_compute(v[i].data, v[i].n);
        snprintf(buf, sizeof buf, "crc32c(%s) = 0x%08X (want 0x%08X)", v[i].what, got, v[i].want);
        test_check(got == v[i].want, buf);
    }
    unsigned char ones[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xFF, inc[i] = (unsigned char)i, dec[i] = (unsigned char)(31 - i);
    uint32_t got = crc32c_compute(ones, 32);
    snprintf(buf, sizeof buf, "crc32c(32 bytes 0xFF, RFC 3720 B.4) = 0x%08X (want 0x62A8AB43)", got);
    test_check(got == 0x62A8AB43u, buf);
    got = crc32c_compute(inc, 32);
    snprintf(buf, sizeof buf, "crc32c(bytes 0..31, RFC 3720 B.4) = 0x%08X (want 0x46DD794E)", got);
    test_check(got == 0x46DD794Eu, buf);
    got = crc32c_compute(dec, 32);
    snprintf(buf, sizeof buf, "crc32c(bytes 31..0, RFC 3720 B.4) = 0x%08X (want 0x113FDB5C)", got);
    test_check(got == 0x113FDB5Cu, buf);
    got = crc32c_compute("123456789", 9);
    snprintf(buf, sizeof buf, "crc32c(\"123456789\") = 0x%08X (want 0xE3069283)", got);
    test_check(got == 0xE3069283u, buf);
    // the mask: rotate right by 15, add 0xa282ead8
    uint32_t m = crc32c_mask(0xE3069283u), want = ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u;
    snprintf(buf, sizeof buf, "crc32c_mask(0xE3069283) = 0x%08X (want 0x%08X)", m, want);
    test_check(m == want && m == 0xC78AB0E5u, buf);  // the value worked out in Python
}

static void check_framing(void) {
    const char data[] = "hello, tensorboard";
    size_t n = sizeof data - 1;
    unsigned char rec[64];
    size_t len = tfrecord_frame(data, n, rec);
    char buf[200];
    snprintf(buf, sizeof buf, "tfrecord_frame: %zu bytes for %zu of data (want %zu)", len, n, n + 16);
    test_check(len == n + 16, buf);
    test_check(le64(rec) == n, "tfrecord: uint64 little-endian length first");
    test_check(le32(rec + 8) == crc32c_mask(crc32c_compute(rec, 8)), "tfrecord: masked CRC-32C of the length");
    test_check(!memcmp(rec + 12, data, n), "tfrecord: the data");
    test_check(le32(rec + 12 + n) == crc32c_mask(crc32c_compute(data, n)), "tfrecord: masked CRC-32C of the data");
    len = tfrecord_frame("", 0, rec);
    test_check(len == 16 && le64(rec) == 0 && le32(rec + 12) == crc32c_mask(0), "tfrecord: an empty record");
}

static void check_encoding(void) {
    // Event{wall_time 1.5 (field 1, fixed64), step 3 (field 2, varint),
    //       summary (field 5) {value (field 1) {tag "a" (field 1), simple_value 2.0f (field 2, fixed32)}}}
    static const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x10, 0x03, 0x2A, 0x0A,
                                         0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0, 0, 0, 0x40};
    size_t n;
    unsigned char *got = tb_encode_scalar("a", 2.0f, 3, 1.5, &n);
    char buf[200];
    snprintf(buf, sizeof buf, "scalar Event: %zu bytes, the bytes of event.proto/summary.proto by hand (want %zu)", n,
             sizeof want);
    test_check(n == sizeof want && !memcmp(got, want, n), buf);
    free(got);
}

static void check_tags(void) {
    struct { const char *key, *tag; } t[] = {
        {"loss", "train/loss"},           {"learning_rate", "train/learning_rate"}, {"grad_norm", "train/grad_norm"},
        {"epoch", "train/epoch"},         {"eval_loss", "eval/loss"},               {"eval_bleu", "eval/bleu"},
        {"test_bleu", "test/bleu"},       {"train_loss", "train/train_loss"},       {"total_flos", "train/total_flos"},
        {"predict_loss", "train/predict_loss"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char tag[128], buf[256];
        tb_tag(t[i].key, tag, sizeof tag);
        snprintf(buf, sizeof buf, "rewrite_logs: %s -> %s (want %s)", t[i].key, tag, t[i].tag);
        test_check(!strcmp(tag, t[i].tag), buf);
    }
}

// Read every record of the file; check the CRCs; decode each Event.
static void check_file(void) {
    char dir[] = "/tmp/t5_tb_XXXXXX";
    if (!mkdtemp(dir)) t5_fail("mkdtemp failed");
    char *logdir = path_join(dir, "runs/x");
    TbWriter w;
    tb_open(&w, logdir);
    cJSON *logs = cJSON_Parse("{\"loss\": 8.61085325331505, \"grad_norm\": 0.5, \"learning_rate\": 1e-05, "
                              "\"epoch\": 0.25}");
    tb_log(&w, logs, 7);
    cJSON_Delete(logs);
    logs = cJSON_Parse("{\"eval_loss\": 7.5, \"eval_bleu\": 0.1069, \"epoch\": 0.25}");
    tb_log(&w, logs, 8);
    cJSON_Delete(logs);
    char *path = strdup(w.path);
    // the file is flushed at each tb_log: read it before closing, as after a crash
    size_t size = 0;
    char *bytes = read_text_file(path, &size);
    tb_close(&w);
    char buf[400];
    const char *base = strrchr(path, '/') + 1;
    char host[256];
    gethostname(host, sizeof host);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "events.out.tfevents.");
    snprintf(buf, sizeof buf, "event file named like torch's SummaryWriter: %s (host %s, pid %ld, .0)", base, host,
             (long)getpid());
    char tail[300];
    snprintf(tail, sizeof tail, ".%s.%ld.0", host, (long)getpid());
    test_check(!strncmp(base, prefix, strlen(prefix)) && strlen(base) > strlen(tail) &&
                   !strcmp(base + strlen(base) - strlen(tail), tail),
               buf);
    const char *want_tags[] = {"train/loss", "train/grad_norm", "train/learning_rate", "train/epoch",
                               "eval/loss", "eval/bleu", "train/epoch"};
    const float want_vals[] = {8.61085325331505f, 0.5f, 1e-05f, 0.25f, 7.5f, 0.1069f, 0.25f};
    const long want_steps[] = {7, 7, 7, 7, 8, 8, 8};
    size_t off = 0;
    int k = -1, crc_ok = 1, decoded_ok = 1;
    while (bytes && off + 12 <= size) {
        const unsigned char *p = (const unsigned char *)bytes + off;
        uint64_t n = le64(p);
        if (off + 16 + n > size || le32(p + 8) != crc32c_mask(crc32c_compute(p, 8)) ||
            le32(p + 12 + n) != crc32c_mask(crc32c_compute(p + 12, n))) {
            crc_ok = 0;
            break;
        }
        Tensorboard__Event *ev = tensorboard__event__unpack(NULL, n, p + 12);
        if (!ev) {
            decoded_ok = 0;
            break;
        }
        if (k < 0) {
            snprintf(buf, sizeof buf, "first event: file_version \"%s\" (want brain.Event:2), wall_time %.3f",
                     ev->what_case == TENSORBOARD__EVENT__WHAT_FILE_VERSION ? ev->file_version : "(none)", ev->wall_time);
            test_check(ev->what_case == TENSORBOARD__EVENT__WHAT_FILE_VERSION &&
                           !strcmp(ev->file_version, "brain.Event:2") && ev->wall_time > 1.6e9,
                       buf);
        } else if (k < 7) {
            int ok = ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY && ev->summary->n_value == 1;
            const Tensorboard__SummaryValue *v = ok ? ev->summary->value[0] : NULL;
            ok = ok && !strcmp(v->tag, want_tags[k]) && v->value_case == TENSORBOARD__SUMMARY_VALUE__VALUE_SIMPLE_VALUE &&
                 v->simple_value == want_vals[k] && ev->step == want_steps[k];
            snprintf(buf, sizeof buf, "event %d: %s = %.9g at step %ld (want %s = %.9g at step %ld)", k + 1,
                     v ? v->tag : "?", v ? v->simple_value : 0.0f, (long)ev->step, want_tags[k], want_vals[k],
                     want_steps[k]);
            test_check(ok, buf);
        }
        tensorboard__event__free_unpacked(ev, NULL);
        off += 16 + n;
        k++;
    }
    test_check(crc_ok && decoded_ok && off == size, "every record's length and CRCs are right, every Event decodes");
    snprintf(buf, sizeof buf, "%d events after file_version (want 7: one per number of the two records)", k);
    test_check(k == 7, buf);
    free(bytes);
    free(path);
    free(logdir);
    rm_rf(dir);
}

int main(void) {
    check_crc32c();
    check_framing();
    check_encoding();
    check_tags();
    check_file();
    return test_summary();
}
