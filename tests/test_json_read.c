// tests/test_json_read.c: JSON read as Python's json reads it (common/json_read.c) and files
// opened without blocking (common/file_open.c), without a GPU.
//  - duplicate keys: the last wins at the first one's place (JSON_DUP_LAST), or one error
//    line naming the key path (JSON_DUP_REFUSE), at every depth and in arrays; 10^5 keys in
//    well under a second;
//  - "\u0000" in a value, a key, an array element, the top-level string: one error line
//    naming the key; an escaped backslash before "u0000" is no NUL;
//  - what cJSON accepts and Python refuses (text after the document, 01, 1., a raw tab in a
//    string, a control character as whitespace, a byte-order mark) is malformed JSON with
//    the offset and the reason; a NUL byte and invalid UTF-8 are errors naming the file;
//  - a FIFO (read and write), a socket, a directory, /dev/null, /dev/zero: one error line
//    saying what the path is, within 10 s (a child that hangs is killed by alarm and fails);
//    a missing file is NULL with errno; a regular file comes back in blocking mode; a FIFO
//    nobody writes reads as empty through file_open_stream; atomic_open refuses a FIFO at
//    the target or at its .tmp.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "../trainer/progress.h"
#include "test.h"
#include "test_fork.h"
#include "test_tmp.h"

static char g_dir[] = "/tmp/t5_test_json_read_XXXXXX";

// ---- JSON ------------------------------------------------------------------------------------

static cJSON *parse(const char *text, JsonDupRule rule) {
    return json_read_parse(text, strlen(text), "doc.json", rule, NULL);
}

static int get_int(const cJSON *o, const char *k, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valueint;
    return 1;
}

static void test_dup_last(void) {
    int stderr_fd = dup(2), null_fd = open("/dev/null", O_WRONLY);  // the NOTICE lines are not checked here
    dup2(null_fd, 2);
    cJSON *r = parse("{\"a\": 1, \"b\": 2, \"a\": 3}", JSON_DUP_LAST);
    int a = 0, b = 0;
    int ok = r && get_int(r, "a", &a) && get_int(r, "b", &b) && a == 3 && b == 2 && cJSON_GetArraySize(r) == 2 &&
             strcmp(r->child->string, "a") == 0 && r->child->next->next == NULL && r->child->prev == r->child->next;
    cJSON_Delete(r);
    r = parse("{\"tie_word_embeddings\": true, \"x\": 0, \"tie_word_embeddings\": false, \"tie_word_embeddings\": 7}",
              JSON_DUP_LAST);
    int t = 0;
    ok = ok && r && get_int(r, "tie_word_embeddings", &t) && t == 7 && cJSON_GetArraySize(r) == 2;
    cJSON_Delete(r);
    r = parse("{\"x\": {\"k\": true, \"k\": false}, \"l\": [{\"a\": 1, \"a\": 2}]}", JSON_DUP_LAST);
    const cJSON *x = r ? cJSON_GetObjectItemCaseSensitive(r, "x") : NULL;
    const cJSON *l0 = r ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "l"), 0) : NULL;
    ok = ok && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(x, "k")) && cJSON_GetArraySize(x) == 1 &&
         get_int(l0, "a", &a) && a == 2 && cJSON_GetArraySize(l0) == 1;
    cJSON_Delete(r);
    // the last member duplicated into the first place: the list's tail pointer stays right
    r = parse("{\"a\": 1, \"a\": 2}", JSON_DUP_LAST);
    ok = ok && r && cJSON_GetArraySize(r) == 1 && r->child->prev == r->child && get_int(r, "a", &a) && a == 2;
    if (r) cJSON_AddNumberToObject(r, "z", 5);
    ok = ok && r && get_int(r, "z", &a) && a == 5 && cJSON_GetArraySize(r) == 2;
    cJSON_Delete(r);
    fflush(stderr);
    dup2(stderr_fd, 2);
    close(null_fd);
    close(stderr_fd);
    test_check(ok, "JSON_DUP_LAST: the last value of a duplicate key, at the first one's place, at every depth");
}

static void dup_refuse_nested(const void *arg) {
    (void)arg;
    parse("{\"fp16\": {\"enabled\": true, \"x\": 1, \"enabled\": false}}", JSON_DUP_REFUSE);
}
static void dup_refuse_array(const void *arg) {
    (void)arg;
    parse("{\"shards\": [{\"file\": \"a\"}, {\"file\": \"b\", \"bytes\": 1, \"file\": \"c\"}]}", JSON_DUP_REFUSE);
}
static void dup_refuse_thrice(const void *arg) {
    (void)arg;
    parse("{\"global_step\": 2, \"global_step\": 3, \"global_step\": 4}", JSON_DUP_REFUSE);
}

// 10^5 keys, one duplicate at the very end: found, and fast (a pairwise check is 5*10^9 strcmp)
static char *many_keys(int n, int dup_at_end) {
    char *t = mallocCheck((size_t)n * 24 + 64);
    size_t k = 0;
    t[k++] = '{';
    for (int i = 0; i < n; i++) k += (size_t)sprintf(t + k, "%s\"k%d\": %d", i ? ", " : "", i, i);
    if (dup_at_end) k += (size_t)sprintf(t + k, ", \"k0\": -1");
    t[k++] = '}';
    t[k] = '\0';
    return t;
}
static void dup_refuse_many(const void *arg) {
    (void)arg;
    parse(many_keys(100000, 1), JSON_DUP_REFUSE);
}

static void test_dup_many_fast(void) {
    char *t = many_keys(100000, 0);
    double t0 = now_seconds();
    cJSON *r = parse(t, JSON_DUP_REFUSE);
    double s = now_seconds() - t0;
    char what[160];
    snprintf(what, sizeof what, "10^5 distinct keys read in %.2f s (under 2 s)", s);
    test_check(r && cJSON_GetArraySize(r) == 100000 && s < 2.0, what);
    cJSON_Delete(r);
    free(t);
}

static void nul_value(const void *arg) {
    (void)arg;
    parse("{\"translation\": {\"en\": \"Hello\\u0000 world\", \"ro\": \"Salut\"}}", JSON_DUP_REFUSE);
}
static void nul_key(const void *arg) {
    (void)arg;
    parse("{\"__metadata__\": {}, \"shared.weight\\u0000x\": {\"dtype\": \"F32\"}}", JSON_DUP_REFUSE);
}
static void nul_array(const void *arg) {
    (void)arg;
    parse("{\"a\": [1, {\"b\": 2}, \"x\\u0000\"]}", JSON_DUP_LAST);
}
static void nul_top(const void *arg) {
    (void)arg;
    parse("\"abc\\u0000\"", JSON_DUP_LAST);
}
static void nul_after_escapes(const void *arg) {
    (void)arg;
    parse("{\"a\\\"b\": {\"c\": \"\\\\\\\\\\u0000\"}}", JSON_DUP_LAST);  // "a\"b": {"c": "\\\\\u0000"}
}
static void nul_byte(const void *arg) {
    (void)arg;
    const char t[] = "{\"a\": \"x\0y\"}";
    json_read_parse(t, sizeof t - 1, "doc.json", JSON_DUP_LAST, NULL);
}
static void bad_utf8(const void *arg) {
    (void)arg;
    parse("{\"a\": \"caf\xe9\"}", JSON_DUP_LAST);
}
static void surrogate_utf8(const void *arg) {
    (void)arg;
    parse("{\"a\": \"\xed\xa0\x80\"}", JSON_DUP_LAST);  // a UTF-16 surrogate as UTF-8: Python refuses it
}

static void test_not_nul(void) {
    // "\\u0000" is a backslash then u0000; \u0001 is a character Python keeps too
    cJSON *r = parse("{\"a\": \"\\\\u0000\", \"b\": \"\\u0001\", \"c\": \"\\ud83d\\ude00\"}", JSON_DUP_LAST);
    const cJSON *a = r ? cJSON_GetObjectItemCaseSensitive(r, "a") : NULL;
    const cJSON *b = r ? cJSON_GetObjectItemCaseSensitive(r, "b") : NULL;
    const cJSON *c = r ? cJSON_GetObjectItemCaseSensitive(r, "c") : NULL;
    test_check(cJSON_IsString(a) && strcmp(a->valuestring, "\\u0000") == 0 && cJSON_IsString(b) &&
                   strcmp(b->valuestring, "\x01") == 0 && cJSON_IsString(c) && strcmp(c->valuestring, "\xf0\x9f\x98\x80") == 0,
               "an escaped backslash before u0000, \\u0001 and a surrogate pair read as Python reads them");
    cJSON_Delete(r);
}

// Malformed for Python: NULL, the offset and the reason
static void expect_malformed(const char *name, const char *text, size_t want_at, const char *why) {
    size_t at = 12345;
    cJSON *r = json_read_parse(text, strlen(text), "doc.json", JSON_DUP_LAST, &at);
    const char *what = json_read_error_what();
    char desc[256];
    snprintf(desc, sizeof desc, "malformed: %-28s at %zu (want %zu): %s", name, at, want_at, what ? what : "(cJSON's)");
    test_check(!r && at == want_at && (why ? what && strstr(what, why) : !what), desc);
    cJSON_Delete(r);
}

static void test_malformed(void) {
    expect_malformed("text after the document", "{\"a\": 1} x", 9, "extra text");
    expect_malformed("a second document", "{\"a\": 1}\n{\"a\": 2}\n", 9, "extra text");
    expect_malformed("leading zero", "{\"d_model\": 08}", 12, "number");
    expect_malformed("negative leading zero", "[-01]", 1, "number");
    expect_malformed("point without digits", "{\"x\": 1.}", 6, "number");
    expect_malformed("point, then exponent", "{\"x\": 1.e5}", 6, "number");
    expect_malformed("raw tab in a string", "{\"x\": \"a\tb\"}", 8, "control character");
    expect_malformed("raw newline in a key", "{\"x\ny\": 1}", 3, "control character");
    expect_malformed("control char as space", "{\"x\":\x0b 1}", 5, "control character");
    expect_malformed("byte-order mark", "\xef\xbb\xbf{\"x\": 1}", 0, "byte-order mark");
    expect_malformed("truncated", "{\"d_model\": 16, \"d_kv\": ", 24, NULL);
    expect_malformed("NaN (Python's only)", "{\"x\": NaN}", 6, NULL);
    expect_malformed("empty", "", 0, NULL);
    // what stays valid
    cJSON *r = parse(" {\"a\": [0, -0, 1e5, 1E+5, 0.5, -0.0e-0, 10, 123.456e-7]}\r\n\t ", JSON_DUP_REFUSE);
    test_check(r && cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "a")) == 8,
               "valid: JSON's numbers and whitespace (space, tab, CR, LF) before and after the document");
    cJSON_Delete(r);
}

// ---- files -----------------------------------------------------------------------------------

static char *in_dir(const char *name) { return path_join(g_dir, name); }

static void open_read(const void *arg) {
    alarm(10);  // a wait on the path is a failure, not a stuck test
    file_open_regular((const char *)arg, "rb", "the test's input");
}
static void open_write(const void *arg) {
    alarm(10);
    file_open_regular((const char *)arg, "wb", NULL);
}
static void open_fd_rdwr(const void *arg) {
    alarm(10);
    file_open_regular_fd((const char *)arg, O_RDWR | O_CREAT, 0644, NULL);
}
static void read_text(const void *arg) {
    alarm(10);
    read_text_file((const char *)arg, NULL);
}
static void fopen_checked(const void *arg) {
    alarm(10);
    fopenCheck((const char *)arg, "rb");
}
static void stream_dev(const void *arg) {
    alarm(10);
    file_open_stream((const char *)arg, "hypothesis");
}
static void atomic_to(const void *arg) {
    alarm(10);
    AtomicFile af;
    atomic_open(&af, (const char *)arg);
}
static void json_file(const void *arg) {
    alarm(10);
    json_read_file((const char *)arg, JSON_DUP_LAST, "fix it");
}

static void test_files(void) {
    char *fifo = in_dir("fifo"), *sock = in_dir("sock"), *dir = in_dir("adir"), *reg = in_dir("reg.json");
    char *missing = in_dir("missing"), *out = in_dir("out.png"), *out_tmp = in_dir("out.png.tmp");
    char *target = in_dir("target");
    if (mkfifo(fifo, 0600) != 0 || mkdir(dir, 0700) != 0 || mkfifo(out_tmp, 0600) != 0 || mkfifo(target, 0600) != 0) {
        test_check(0, "making the FIFOs and the directory");
        return;
    }
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    int have_sock = s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0;
    FILE *f = fopen(reg, "wb");
    fputs("{\"a\": 1,\n \"a\": 2} trailing", f);
    fclose(f);

    test_expect_error("FIFO read", open_read, fifo, "fifo: is a FIFO", "(the test's input)");
    test_expect_error("FIFO write, no reader", open_write, fifo, "fifo: is a FIFO", NULL);
    test_expect_error("FIFO O_RDWR (lock file)", open_fd_rdwr, fifo, "fifo: is a FIFO", NULL);
    test_expect_error("FIFO read_text_file", read_text, fifo, "fifo: is a FIFO", NULL);
    test_expect_error("FIFO fopenCheck", fopen_checked, fifo, "fifo: is a FIFO", NULL);
    test_expect_error("FIFO json_read_file", json_file, fifo, "fifo: is a FIFO", NULL);
    if (have_sock) {
        test_expect_error("socket read", open_read, sock, "sock: is a socket", NULL);
        test_expect_error("socket write", open_write, sock, "sock: is a socket", NULL);
    } else {
        test_check(0, "a unix socket to open");
    }
    test_expect_error("directory read", open_read, dir, "adir: is a directory", NULL);
    test_expect_error("directory write", open_write, dir, "adir: is a directory", NULL);
    test_expect_error("directory read_text_file", read_text, dir, "adir: is a directory", NULL);
    test_expect_error("/dev/null read", open_read, "/dev/null", "/dev/null: is a character device", NULL);
    test_expect_error("/dev/zero read_text_file", read_text, "/dev/zero", "/dev/zero: is a character device", NULL);
    test_expect_error("/dev/zero as a stream", stream_dev, "/dev/zero", "/dev/zero: is a character device", NULL);
    test_expect_error("atomic_open, FIFO .tmp", atomic_to, out, "out.png.tmp: is a FIFO", NULL);
    test_expect_error("atomic_open onto a FIFO", atomic_to, target, "target: is a FIFO", NULL);
    test_expect_error("json_read_file, trailing text", json_file, reg, "reg.json: malformed JSON at byte 18", "fix it");

    errno = 0;
    FILE *m = file_open_regular(missing, "rb", NULL);
    test_check(!m && errno == ENOENT, "a missing file: NULL with errno ENOENT (the caller's own message)");
    f = file_open_regular(reg, "rb", NULL);
    int fl = f ? fcntl(fileno(f), F_GETFL) : -1;
    char buf[8] = {0};
    test_check(f && fl >= 0 && !(fl & O_NONBLOCK) && fread(buf, 1, 7, f) == 7 && !strcmp(buf, "{\"a\": 1"),
               "a regular file opens, in blocking mode, and reads");
    if (f) fclose(f);
    alarm(10);
    f = file_open_stream(fifo, "hypothesis");
    size_t got = f ? fread(buf, 1, sizeof buf, f) : 99;
    alarm(0);
    test_check(f && got == 0 && feof(f), "file_open_stream: a FIFO nobody writes reads as empty, without waiting");
    if (f) fclose(f);
    if (s >= 0) close(s);
    free(fifo), free(sock), free(dir), free(reg), free(missing), free(out), free(out_tmp), free(target);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_dup_last();
    test_expect_error("dup refused, nested", dup_refuse_nested, NULL, "doc.json: key \"fp16.enabled\" appears twice",
                      "keep one");
    test_expect_error("dup refused, in an array", dup_refuse_array, NULL, "key \"shards[1].file\" appears twice", NULL);
    test_expect_error("dup refused, 3 times", dup_refuse_thrice, NULL, "key \"global_step\" appears 3 times", NULL);
    test_expect_error("dup refused, of 10^5 keys", dup_refuse_many, NULL, "key \"k0\" appears twice", NULL);
    test_dup_many_fast();
    test_expect_error("\\u0000 in a value", nul_value, NULL, "doc.json: key \"translation.en\": a string holding \\u0000",
                      "remove the \\u0000");
    test_expect_error("\\u0000 in a key", nul_key, NULL, "key \"shared.weight\\u0000x\"", NULL);
    test_expect_error("\\u0000 in an array", nul_array, NULL, "key \"a[2]\"", NULL);
    test_expect_error("\\u0000 at the top", nul_top, NULL, "doc.json: the document: a string holding \\u0000", NULL);
    test_expect_error("\\u0000 after escapes", nul_after_escapes, NULL, "key \"a\\\"b.c\"", NULL);
    test_expect_error("a NUL byte", nul_byte, NULL, "doc.json: a NUL byte at byte 8", NULL);
    test_expect_error("invalid UTF-8", bad_utf8, NULL, "doc.json: invalid UTF-8 at byte 10", NULL);
    test_expect_error("UTF-8 surrogate", surrogate_utf8, NULL, "doc.json: invalid UTF-8 at byte 7", NULL);
    test_not_nul();
    test_malformed();
    test_files();
    rm_rf(g_dir);
    return test_summary();
}
