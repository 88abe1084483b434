// data/dataset.c: tokenize a split into a .t5ds file, and open one with mmap after
// checking every byte of it (format: docs/DATASET.md).
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "text_reader.h"
#include "tokenize.h"
#include "../common/ticker.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .t5ds format is little-endian; offsets and tokens are written and mapped as host integers"
#endif

enum { DS_HEADER_BYTES = 64, DS_VERSION = 1, DS_EXTRA_IDS = 100 };
// "T5DS" then \r\n\x1a\n as PNG does: a file that went through newline conversion
// is caught by the magic rather than by a checksum.
static const unsigned char DS_MAGIC[8] = {'T', '5', 'D', 'S', 0x0D, 0x0A, 0x1A, 0x0A};

// Header field offsets (bytes).
enum { H_MAGIC = 0, H_VERSION = 8, H_VOCAB = 12, H_COUNT = 16, H_NTOK = 24, H_CHECKSUM = 32, H_TOKHASH = 40,
       H_RESERVED = 48 };

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// ---- prepare ------------------------------------------------------------------------

// The temp file being written, removed if an error exits the process half-way (atexit), or
// a signal ends it (below).
static char *volatile g_tmp_path;
static void remove_tmp(void) {
    if (g_tmp_path) unlink(g_tmp_path);
}

// A signal whose action ends the process skips atexit: SIGTERM from a scheduler or
// `timeout`, Ctrl-C, SIGPIPE from `prepare | head`, the CPU-time limit, a crash in a
// library. While the temp file exists, each such signal removes it first (unlink is
// async-signal-safe) and then takes its default action. A signal the program already
// handles (the trainer's stop signals, AddressSanitizer's SIGSEGV) or ignores is left as it is.
static const int TMP_SIGS[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGABRT, SIGFPE,  SIGSEGV,
                               SIGBUS,  SIGPIPE, SIGALRM, SIGTERM, SIGUSR1, SIGUSR2, SIGXCPU};
enum { TMP_NSIGS = (int)(sizeof TMP_SIGS / sizeof TMP_SIGS[0]) };
static struct sigaction g_tmp_old[TMP_NSIGS];
static int g_tmp_hooked[TMP_NSIGS];

static void tmp_on_signal(int sig) {
    remove_tmp();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);  // pending until this handler returns, then the default action
}

static void tmp_signals_on(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tmp_on_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < TMP_NSIGS; i++) sigaddset(&sa.sa_mask, TMP_SIGS[i]);
    for (int i = 0; i < TMP_NSIGS; i++) {
        struct sigaction old;
        g_tmp_hooked[i] = 0;
        if (sigaction(TMP_SIGS[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            continue;
        if (sigaction(TMP_SIGS[i], &sa, &g_tmp_old[i]) == 0) g_tmp_hooked[i] = 1;
    }
}

static void tmp_signals_off(void) {
    for (int i = 0; i < TMP_NSIGS; i++)
        if (g_tmp_hooked[i]) {
            sigaction(TMP_SIGS[i], &g_tmp_old[i], NULL);
            g_tmp_hooked[i] = 0;
        }
}

static void check_tokens(const int32_t *ids, int n, uint32_t vocab, const char *path, long line, const char *side) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab)
            t5_fail("%s:%ld: the tokenizer gave %s id %d, outside [0, %u); the tokenizer model is inconsistent",
                    path, line, side, ids[i], vocab);
}

// Tokens stream to their place after the offsets (the count is known from the line
// count); offsets stay in memory (16 bytes an example, *off: 2*count+1 of them) and are
// written at the end. Reads r to the end and closes it. Returns the number of tokens.
static uint64_t prepare_write_tokens(const TextSpec *spec, const Spm *spm, TextReader *r, uint64_t count,
                                     uint32_t vocab, FILE *f, const char *tmp, long tok_start, uint64_t *off) {
    const char *prefix = spec->source_prefix ? spec->source_prefix : "";
    if (fseek(f, tok_start, SEEK_SET) != 0) t5_fail("%s: seek failed: %s", tmp, strerror(errno));
    int32_t *ids = NULL;
    size_t cap = 0;
    uint64_t pos = 0, k = 0;
    TextExample ex;
    off[0] = 0;
    // a large file takes minutes: a line that moves (nothing for a small one: common/ticker.h)
    char what[512];
    const char *base = strrchr(spec->source_path, '/');
    snprintf(what, sizeof what, "tokenizing %s", base ? base + 1 : spec->source_path);
    Ticker *tick = ticker_start(what, "example", (long)count);
    while (text_reader_next(r, &ex)) {
        if ((k & 1023) == 0) ticker_set(tick, (long)(k / 2));
        for (int side = 0; side < 2; side++) {
            const char *path = side == 0 ? spec->source_path : (spec->target_path ? spec->target_path : spec->source_path);
            int n = side == 0 ? tokenize_t5(spm, prefix, ex.src, ex.src_len, &ids, &cap)
                              : tokenize_t5(spm, "", ex.tgt, ex.tgt_len, &ids, &cap);
            if (n < 1) t5_fail("%s:%ld: tokenization failed (%d ids)", path, ex.line, n);
            check_tokens(ids, n, vocab, path, ex.line, side == 0 ? "a source" : "a target");
            fwriteCheck(ids, sizeof(int32_t), (size_t)n, f, tmp);
            pos += (uint64_t)n;
            off[++k] = pos;
        }
    }
    ticker_stop(tick);
    text_reader_close(r);
    free(ids);
    if (k != 2 * count) t5_fail("%s: read %llu examples, expected %llu", spec->source_path,
                                (unsigned long long)(k / 2), (unsigned long long)count);

    return pos;
}

// Checksum: offsets bytes then tokens bytes (ntok of them), the tokens read back from the file.
static uint64_t prepare_checksum(FILE *f, const char *tmp, long tok_start, const uint64_t *off, uint64_t n_off,
                                 uint64_t pos) {
    uint64_t h = fnv1a(FNV_OFFSET, off, n_off * sizeof(uint64_t));
    if (fseek(f, tok_start, SEEK_SET) != 0) t5_fail("%s: seek failed: %s", tmp, strerror(errno));
    enum { BLOCK = 1 << 20 };
    unsigned char *buf = mallocCheck(BLOCK);
    uint64_t left = pos * sizeof(int32_t);
    while (left > 0) {
        size_t n = left < BLOCK ? (size_t)left : BLOCK;
        freadCheck(buf, 1, n, f, tmp);
        h = fnv1a(h, buf, n);
        left -= n;
    }
    free(buf);

    return h;
}

void dataset_prepare(const TextSpec *spec, const Spm *spm, const char *out_path) {
    static int atexit_done = 0;
    if (!atexit_done) {
        atexit(remove_tmp);
        atexit_done = 1;
    }
    uint32_t vocab = (uint32_t)spm_piece_count(spm) + DS_EXTRA_IDS;
    TextReader *r = text_reader_open(spec);
    uint64_t count = (uint64_t)text_reader_count(r);

    // the temp name holds the pid: two runs preparing the same cache file at once (a shared
    // --cache_dir) each write their own, and the last rename wins with a whole file
    size_t tmp_cap = strlen(out_path) + 32;
    char *tmp = mallocCheck(tmp_cap);
    snprintf(tmp, tmp_cap, "%s.%ld.tmp", out_path, (long)getpid());
    g_tmp_path = tmp;  // before the file exists: no moment where it exists unregistered
    tmp_signals_on();
    FILE *f = file_open_regular(tmp, "w+b", NULL);
    if (!f) t5_fail("%s: cannot create: %s; check that the directory exists and is writable", tmp, strerror(errno));

    uint64_t n_off = 2 * count + 1;
    long tok_start = DS_HEADER_BYTES + (long)(n_off * sizeof(uint64_t));
    uint64_t *off = mallocCheck(n_off * sizeof(uint64_t));
    uint64_t pos = prepare_write_tokens(spec, spm, r, count, vocab, f, tmp, tok_start, off);
    uint64_t h = prepare_checksum(f, tmp, tok_start, off, n_off, pos);

    unsigned char hdr[DS_HEADER_BYTES] = {0};
    memcpy(hdr + H_MAGIC, DS_MAGIC, sizeof DS_MAGIC);
    put_u32(hdr + H_VERSION, DS_VERSION);
    put_u32(hdr + H_VOCAB, vocab);
    put_u64(hdr + H_COUNT, count);
    put_u64(hdr + H_NTOK, pos);
    put_u64(hdr + H_CHECKSUM, h);
    put_u64(hdr + H_TOKHASH, spm_model_hash(spm));
    if (fseek(f, 0, SEEK_SET) != 0) t5_fail("%s: seek failed: %s", tmp, strerror(errno));
    fwriteCheck(hdr, 1, sizeof hdr, f, tmp);
    fwriteCheck(off, sizeof(uint64_t), (size_t)n_off, f, tmp);
    free(off);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        t5_fail("%s: cannot flush to disk: %s; check free disk space", tmp, strerror(errno));
    fcloseCheck(f, tmp);
    if (rename(tmp, out_path) != 0) t5_fail("cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
    g_tmp_path = NULL;
    tmp_signals_off();
    free(tmp);
    // Make the rename itself durable.
    char *slash = strrchr(out_path, '/');
    char *dir = slash ? strndup(out_path, (size_t)(slash - out_path) + 1) : strdup(".");
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY) : -1;
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir);
}

// ---- open ---------------------------------------------------------------------------

static const char REDO[] = "delete it and run train_t5 prepare again";

void dataset_open(Dataset *ds, const char *path) {
    memset(ds, 0, sizeof *ds);
    int fd = file_open_regular_fd(path, O_RDONLY, 0, "a .t5ds dataset");  // a FIFO: one line, never a wait
    if (fd < 0)
        t5_fail("%s: cannot open the dataset: %s; make it with train_t5 prepare (or check the path)", path,
                strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) t5_fail("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) t5_fail("%s: not a regular file; a dataset is a .t5ds file from train_t5 prepare", path);
    uint64_t size = (uint64_t)sb.st_size;
    if (size < DS_HEADER_BYTES)
        t5_fail("%s: %llu bytes, too small for a train_t5 dataset (the header alone is %d); %s", path,
                (unsigned long long)size, DS_HEADER_BYTES, REDO);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) t5_fail("%s: mmap failed: %s", path, strerror(errno));
    const unsigned char *h = map;

    if (memcmp(h, DS_MAGIC, 4) != 0)
        t5_fail("%s: not a train_t5 dataset (the file does not start with \"T5DS\"); make one with train_t5 prepare",
                path);
    if (memcmp(h, DS_MAGIC, sizeof DS_MAGIC) != 0)
        t5_fail("%s: damaged header magic (newline conversion by a text-mode copy?); %s", path, REDO);
    uint32_t version = get_u32(h + H_VERSION);
    if (version != DS_VERSION)
        t5_fail("%s: dataset format version %u, this train_t5 reads version %d; %s", path, version, DS_VERSION, REDO);
    uint32_t vocab = get_u32(h + H_VOCAB);
    uint64_t count = get_u64(h + H_COUNT), n_tokens = get_u64(h + H_NTOK);
    for (int i = H_RESERVED; i < DS_HEADER_BYTES; i++)
        if (h[i]) t5_fail("%s: reserved header byte %d is not zero (written by another program?); %s", path, i, REDO);
    if (vocab == 0 || vocab > INT32_MAX) t5_fail("%s: vocab_size %u is invalid; %s", path, vocab, REDO);
    // Sizes, overflow-safe: count and n_tokens must fit in the bytes after the header.
    uint64_t body = size - DS_HEADER_BYTES;
    if (count > body / 16 || n_tokens > body / 4 || DS_HEADER_BYTES + 8 * (2 * count + 1) + 4 * n_tokens != size)
        t5_fail("%s: the header says %llu examples and %llu tokens (%llu bytes) but the file has %llu bytes "
                "(truncated?); %s",
                path, (unsigned long long)count, (unsigned long long)n_tokens,
                count > body / 16 || n_tokens > body / 4
                    ? 0ULL
                    : (unsigned long long)(DS_HEADER_BYTES + 8 * (2 * count + 1) + 4 * n_tokens),
                (unsigned long long)size, REDO);
    uint64_t want = get_u64(h + H_CHECKSUM), got = fnv1a(FNV_OFFSET, h + DS_HEADER_BYTES, (size_t)body);
    if (want != got)
        t5_fail("%s: corrupt (checksum %016llx, the header says %016llx); %s", path, (unsigned long long)got,
                (unsigned long long)want, REDO);

    const uint64_t *off = (const uint64_t *)(h + DS_HEADER_BYTES);
    const int32_t *tok = (const int32_t *)(h + DS_HEADER_BYTES + 8 * (2 * count + 1));
    if (off[0] != 0 || off[2 * count] != n_tokens)
        t5_fail("%s: offsets run from %llu to %llu, expected 0 to %llu; %s", path, (unsigned long long)off[0],
                (unsigned long long)off[2 * count], (unsigned long long)n_tokens, REDO);
    for (uint64_t i = 0; i < 2 * count; i++)
        if (off[i + 1] <= off[i] || off[i + 1] - off[i] > INT_MAX)
            t5_fail("%s: offsets not increasing at example %llu (%s: %llu -> %llu; every sequence holds at least "
                    "</s>); %s",
                    path, (unsigned long long)(i / 2), i % 2 ? "target" : "source", (unsigned long long)off[i],
                    (unsigned long long)off[i + 1], REDO);
    for (uint64_t i = 0; i < n_tokens; i++)
        if (tok[i] < 0 || (uint32_t)tok[i] >= vocab)
            t5_fail("%s: token %llu is %d, outside the vocabulary [0, %u); %s", path, (unsigned long long)i, tok[i],
                    vocab, REDO);

    ds->path = strdup(path);
    ds->map = map;
    ds->map_bytes = (size_t)size;
    ds->vocab_size = vocab;
    ds->tokenizer_hash = get_u64(h + H_TOKHASH);
    ds->count = count;
    ds->offsets = off;
    ds->tokens = tok;
}

void dataset_close(Dataset *ds) {
    if (ds->map) munmap(ds->map, ds->map_bytes);
    free(ds->path);
    memset(ds, 0, sizeof *ds);
}

// ---- cache path ---------------------------------------------------------------------

static uint64_t hash_str(uint64_t h, const char *s) {
    s = s ? s : "";
    return fnv1a(h, s, strlen(s) + 1);  // the NUL separates fields
}

static uint64_t hash_file(uint64_t h, const char *path) {
    if (!path) return hash_str(h, "(none)");
    char *real = realpath(path, NULL);
    h = hash_str(h, real ? real : path);
    free(real);
    struct stat sb;
    int64_t v[3] = {-1, -1, -1};
    if (stat(path, &sb) == 0) {
        v[0] = (int64_t)sb.st_size;
        v[1] = (int64_t)sb.st_mtim.tv_sec;
        v[2] = (int64_t)sb.st_mtim.tv_nsec;
    }
    return fnv1a(h, v, sizeof v);
}

char *dataset_cache_path(const char *dir, const char *split, const TextSpec *spec, const Spm *spm) {
    uint64_t h = hash_str(FNV_OFFSET, "t5ds-v1");
    int64_t v[3] = {(int64_t)spec->format, (int64_t)spec->max_examples, (int64_t)spm_piece_count(spm)};
    h = fnv1a(h, v, sizeof v);
    h = hash_file(h, spec->source_path);
    h = hash_file(h, spec->target_path);
    h = hash_str(h, spec->format == TEXT_JSONL ? spec->src_lang : "");
    h = hash_str(h, spec->format == TEXT_JSONL ? spec->tgt_lang : "");
    h = hash_str(h, spec->source_prefix);
    uint64_t th = spm_model_hash(spm);
    h = fnv1a(h, &th, sizeof th);
    char name[256];
    snprintf(name, sizeof name, "%s-%016llx.t5ds", split, (unsigned long long)h);
    return path_join(dir, name);
}
