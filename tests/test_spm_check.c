// tests/test_spm_check.c: damaged spiece.model files (data/spm_check.c, data/spm_shim.cc).
// Each variant is data/sample/spiece.model with one field rewritten by the small protobuf
// writer below: the normalizer's precompiled_charsmap (its trie size, its double-array
// units, its replacement strings; synthetic tries with a cycle or too many matches along a
// key), the denormalizer's, pieces (NUL byte, empty, NaN/inf score, unknown type),
// trainer_spec.model_type, the wire format (truncation, a length past the end, a group).
// spm_check_model must refuse each naming the field; spm_load (in a forked child) must exit
// 1 with one "error:" line naming the file; the sample model and tries at the limits must
// load and encode. A fixed-seed fuzz of the real trie: whatever the check lets through must
// load and encode in a child without a signal. Run from the repository root.
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../data/spm.h"
#include "../data/spm_check.h"
#include "../trainer/progress.h"
#include "test.h"
#include "test_fork.h"

#define MODEL_PATH "data/sample/spiece.model"

// ---- a protobuf writer ------------------------------------------------------------------------

typedef struct {
    unsigned char *p;
    size_t n, cap;
} Buf;

static void buf_put(Buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = reallocCheck(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void buf_varint(Buf *b, uint64_t v) {
    do {
        unsigned char c = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        buf_put(b, &c, 1);
    } while (v);
}
static void buf_len(Buf *b, unsigned num, const void *data, size_t n) {
    buf_varint(b, (uint64_t)num << 3 | 2);
    buf_varint(b, n);
    buf_put(b, data, n);
}
static void buf_uint(Buf *b, unsigned num, uint64_t v) {
    buf_varint(b, (uint64_t)num << 3);
    buf_varint(b, v);
}
static void buf_float(Buf *b, unsigned num, float f) {
    buf_varint(b, (uint64_t)num << 3 | 5);
    unsigned char le[4];
    uint32_t bits;
    memcpy(&bits, &f, 4);
    for (int i = 0; i < 4; i++) le[i] = (unsigned char)(bits >> (8 * i));
    buf_put(b, le, 4);
}
static void buf_u32le(Buf *b, uint32_t v) {
    unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    buf_put(b, le, 4);
}

// The sample model's top-level fields, as (number, raw bytes of the whole field).
typedef struct {
    unsigned num;
    const unsigned char *raw, *payload;
    size_t raw_len, payload_len;
} Field;
static unsigned char *g_model;
static size_t g_model_len;
static Field *g_fields;
static int g_nfields;
static const unsigned char *g_charsmap;  // the sample's normalizer_spec.precompiled_charsmap
static size_t g_charsmap_len;

static uint64_t rd_varint(const unsigned char **p) {
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
        unsigned char c = *(*p)++;
        v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return v;
    }
}

// Split a well-formed message (the sample) into fields; LEN fields get their payload.
static int split_fields(const unsigned char *p, size_t n, Field *out, int max) {
    const unsigned char *end = p + n;
    int k = 0;
    while (p < end && k < max) {
        Field f = {.raw = p};
        uint64_t key = rd_varint(&p);
        f.num = (unsigned)(key >> 3);
        switch (key & 7) {
        case 0: rd_varint(&p); break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2: {
            uint64_t len = rd_varint(&p);
            f.payload = p;
            f.payload_len = (size_t)len;
            p += len;
            break;
        }
        default: printf("NOT OK the sample model has wire type %d\n", (int)(key & 7)); exit(1);
        }
        f.raw_len = (size_t)(p - f.raw);
        out[k++] = f;
    }
    return k;
}

static void load_sample(void) {
    g_model = (unsigned char *)read_text_file(MODEL_PATH, &g_model_len);
    if (!g_model) {
        printf("NOT OK cannot read %s (run from the repository root)\n", MODEL_PATH);
        exit(1);
    }
    g_fields = mallocCheck(40000 * sizeof *g_fields);
    g_nfields = split_fields(g_model, g_model_len, g_fields, 40000);
    for (int i = 0; i < g_nfields; i++) {
        if (g_fields[i].num != 3) continue;
        Field ns[16];
        int k = split_fields(g_fields[i].payload, g_fields[i].payload_len, ns, 16);
        for (int j = 0; j < k; j++)
            if (ns[j].num == 2) {
                g_charsmap = ns[j].payload;
                g_charsmap_len = ns[j].payload_len;
            }
    }
    if (!g_charsmap) {
        printf("NOT OK %s has no precompiled_charsmap\n", MODEL_PATH);
        exit(1);
    }
}

// The sample with every top-level field `drop` removed and `extra` (raw field bytes) appended.
static Buf model_with(unsigned drop, const Buf *extra) {
    Buf b = {0};
    for (int i = 0; i < g_nfields; i++)
        if (g_fields[i].num != drop) buf_put(&b, g_fields[i].raw, g_fields[i].raw_len);
    if (extra) buf_put(&b, extra->p, extra->n);
    return b;
}

// A normalizer_spec field (number num: 3 normalizer, 5 denormalizer) holding charsmap cm.
static Buf spec_field(unsigned num, const void *cm, size_t cm_len) {
    Buf spec = {0}, f = {0};
    buf_len(&spec, 1, "nmt_nfkc", 8);
    buf_len(&spec, 2, cm, cm_len);
    buf_uint(&spec, 3, 1);
    buf_uint(&spec, 4, 1);
    buf_uint(&spec, 5, 1);
    buf_len(&f, num, spec.p, spec.n);
    free(spec.p);
    return f;
}

static Buf model_with_charsmap(const void *cm, size_t cm_len) {
    Buf f = spec_field(3, cm, cm_len);
    Buf m = model_with(3, &f);
    free(f.p);
    return m;
}

// The sample's charsmap with the 4 bytes at byte offset `at` set to v.
static Buf charsmap_poke(size_t at, uint32_t v) {
    Buf cm = {0};
    buf_put(&cm, g_charsmap, g_charsmap_len);
    for (int i = 0; i < 4; i++) cm.p[at + (size_t)i] = (unsigned char)(v >> (8 * i));
    return cm;
}

// ---- synthetic tries ----------------------------------------------------------------------------
// Units as darts.h lays them out: offset in bits 10.., has_leaf bit 8, label the low byte; a
// leaf (value) unit has bit 31 set. Offsets here are < 2^21, so bit 9 (the <<8 form) stays 0.
static uint32_t u_node(uint32_t index, uint32_t base, unsigned label, int leaf) {
    return ((index ^ base) << 10) | (leaf ? 1u << 8 : 0) | label;
}
static uint32_t u_value(uint32_t v) { return (1u << 31) | v; }

// A chain of `depth` nodes for the key "aaa...": node i sits in block i+1, its children in
// block i+2; each has a leaf (value `value` into strs) when leaves is set. cycle: the last
// node's children block is its own block, so "a" after it leads back to it. A free unit has
// bit 31 set, as darts-clone leaves them (a zero unit would match the key byte 0).
static Buf chain_charsmap(int depth, int leaves, int cycle, uint32_t value, const char *strs, size_t strs_len) {
    uint32_t nunits = 256u * (uint32_t)(depth + 2);
    uint32_t *u = mallocCheck(nunits * sizeof *u);
    for (uint32_t i = 0; i < nunits; i++) u[i] = 1u << 31;  // free units: no byte matches their label
    u[0] = u_node(0, 256, 0, 0);  // the root's children: block 1
    for (int i = 0; i < depth; i++) {
        uint32_t base = 256u * (uint32_t)(i + 1), node = base ^ 'a';
        uint32_t next = (cycle && i == depth - 1) ? base : base + 256;
        u[node] = u_node(node, next, 'a', leaves);
        u[next] = u_value(value);  // the leaf's value unit sits at the node's children base
    }
    Buf cm = {0};
    buf_u32le(&cm, nunits * 4);
    for (uint32_t i = 0; i < nunits; i++) buf_u32le(&cm, u[i]);
    buf_put(&cm, strs, strs_len);
    free(u);
    return cm;
}

// ---- checks ---------------------------------------------------------------------------------

static void expect_refused(const char *what, const Buf *m, const char *needle) {
    char why[512];
    int rc = spm_check_model(m->p, m->n, why, sizeof why);
    char msg[800];
    snprintf(msg, sizeof msg, "refused: %-34s %s", what, rc ? why : "(accepted)");
    test_check(rc != 0 && strstr(why, needle), msg);
    if (rc == 0 || !strstr(why, needle)) printf("       (wanted a refusal naming \"%s\")\n", needle);
}

static void write_file(const char *path, const Buf *b) {
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(b->p, 1, b->n, f, path);
    fcloseCheck(f, path);
}

static void load_fn(const void *arg) { spm_load((const char *)arg); }

// spm_load on m: one error line naming the file and needle.
static void expect_load_error(const char *what, const Buf *m, const char *needle) {
    char path[] = "/tmp/t5_test_spm_check_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    close(fd);
    write_file(path, m);
    char label[128];
    snprintf(label, sizeof label, "spm_load: %s", what);
    test_expect_error(label, load_fn, path, path, needle);
    unlink(path);
}

// In a child: load m and encode each text; 0: exit 0, no signal. *status_out: wait status.
static int load_and_encode(const Buf *m, const char *const *texts, int ntexts, int *status_out) {
    char path[] = "/tmp/t5_test_spm_check_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    close(fd);
    write_file(path, m);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        Spm *spm = spm_load(path);
        int32_t *ids = NULL;
        size_t cap = 0;
        for (int i = 0; i < ntexts; i++) spm_encode(spm, texts[i], strlen(texts[i]), &ids, &cap);
        free(ids);
        spm_free(spm);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    unlink(path);
    if (status_out) *status_out = status;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static const char *const TEXTS[] = {
    "Hello world.", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "\xef\xac\x81 \xe2\x91\xa0 \xef\xbc\xa1 caf\xc3\xa9",
    "Ein Haus am See, 1234 \xe2\x82\xac.", "  leading and   inner   spaces  ", "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf",
};
#define NTEXTS ((int)(sizeof TEXTS / sizeof TEXTS[0]))

static void test_sample_accepted(void) {
    char why[512];
    int rc = spm_check_model(g_model, g_model_len, why, sizeof why);
    char msg[700];
    snprintf(msg, sizeof msg, "the sample spiece.model passes the check%s%s", rc ? ": " : "", rc ? why : "");
    test_check(rc == 0, msg);
    Buf m = model_with(0, NULL);  // rebuilt by the writer: the same bytes
    test_check(m.n == g_model_len && !memcmp(m.p, g_model, m.n), "the test's protobuf writer rebuilds the sample byte for byte");
    free(m.p);
}

static void test_charsmap(void) {
    uint32_t trie = (uint32_t)g_charsmap[0] | (uint32_t)g_charsmap[1] << 8 | (uint32_t)g_charsmap[2] << 16 |
                    (uint32_t)g_charsmap[3] << 24;
    uint32_t units = trie / 4;
    struct {
        const char *what;
        size_t at;
        uint32_t v;
        const char *needle;
    } pokes[] = {
        // the example: the root's offset far outside the trie
        {"root offset outside", 4, (0x3fffffu << 10) | (1u << 9), "the root's children"},
        {"trie size past the blob", 0, (uint32_t)g_charsmap_len, "the trie size says"},
        {"trie size 2^32-4", 0, 0xfffffffcu, "the trie size says"},
        {"trie size not 4-aligned", 0, trie - 2, "not a multiple of the 4-byte units"},
        {"trie size cut to 1024 units", 0, 1024 * 4, "lie outside the trie's 1024 units"},
        {"trie size 0", 0, 0, "an empty trie"},
        {"trie size 4 (root only)", 0, 4, "the root's children"},
    };
    for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
        Buf cm = charsmap_poke(pokes[i].at, pokes[i].v);
        Buf m = model_with_charsmap(cm.p, cm.n);
        expect_refused(pokes[i].what, &m, pokes[i].needle);
        if (i == 0) expect_load_error(pokes[i].what, &m, "precompiled_charsmap");
        free(cm.p);
        free(m.p);
    }
    // A reachable unit whose children lie past the end: the first child of the root.
    uint32_t root = (uint32_t)g_charsmap[4] | (uint32_t)g_charsmap[5] << 8 | (uint32_t)g_charsmap[6] << 16 |
                    (uint32_t)g_charsmap[7] << 24;
    uint32_t rbase = (root >> 10) << ((root & (1u << 9)) >> 6);
    uint32_t child = 0;
    for (uint32_t c = 0x20; c < 0x100; c++) {  // a byte that has a rule (" " is rewritten)
        uint32_t idx = rbase ^ c, u;
        memcpy(&u, g_charsmap + 4 + 4 * (size_t)idx, 4);
        if ((u & ((1u << 31) | 0xffu)) == c) {
            child = idx;
            break;
        }
    }
    {
        uint32_t u;
        memcpy(&u, g_charsmap + 4 + 4 * (size_t)child, 4);
        uint32_t far = (units + 512) ^ child;  // base past the end
        Buf cm = charsmap_poke(4 + 4 * (size_t)child, (u & 0x1ffu) | (far << 10));
        Buf m = model_with_charsmap(cm.p, cm.n);
        expect_refused("inner unit's offset outside", &m, "lie outside the trie's");
        free(cm.p);
        free(m.p);
    }
    // Strings: a 3-byte blob, the strings region cut off, its last NUL gone.
    {
        Buf m = model_with_charsmap("\x10\x00\x00", 3);
        expect_refused("a 3-byte charsmap", &m, "shorter than its 4-byte trie size");
        expect_load_error("a 3-byte charsmap", &m, "precompiled_charsmap");
        free(m.p);
        m = model_with_charsmap(g_charsmap, 4 + trie);
        expect_refused("no strings region", &m, "outside the 0-byte strings region");
        free(m.p);
        Buf cm = {0};
        buf_put(&cm, g_charsmap, g_charsmap_len);
        cm.p[cm.n - 1] = 'x';  // the last string loses its terminator
        m = model_with_charsmap(cm.p, cm.n);
        expect_refused("last string not terminated", &m, "has no NUL before the blob's end");
        free(cm.p);
        free(m.p);
    }
    // Synthetic tries: a cycle with a leaf (every "a" one more match: the library's 32-entry
    // result array overruns), 33 matches along "a"*33, a value outside the strings.
    {
        Buf cm = chain_charsmap(3, 1, 1, 0, "x", 2);
        Buf m = model_with_charsmap(cm.p, cm.n);
        expect_refused("a cycle in the trie", &m, "(a cycle)");
        expect_load_error("a cycle in the trie", &m, "a cycle");
        free(cm.p);
        free(m.p);
        cm = chain_charsmap(33, 1, 0, 0, "x", 2);
        m = model_with_charsmap(cm.p, cm.n);
        expect_refused("33 matches along one key", &m, "more than the 32");
        free(cm.p);
        free(m.p);
        cm = chain_charsmap(4, 1, 0, 7, "x", 2);
        m = model_with_charsmap(cm.p, cm.n);
        expect_refused("a value past the strings", &m, "offset 7, outside the 2-byte strings region");
        free(cm.p);
        free(m.p);
        cm = chain_charsmap(4, 1, 0, 0, "xy", 2);
        m = model_with_charsmap(cm.p, cm.n);
        expect_refused("a string without NUL", &m, "has no NUL");
        free(cm.p);
        free(m.p);
        // At the limits: 32 matches along a key, and a cycle-free chain without leaves.
        const char *const aa[] = {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "a b aa", "Hello"};
        cm = chain_charsmap(32, 1, 0, 0, "x", 2);
        m = model_with_charsmap(cm.p, cm.n);
        char why[512];
        int st = 0, rc = spm_check_model(m.p, m.n, why, sizeof why);
        int code = rc == 0 ? load_and_encode(&m, aa, 3, &st) : -1;
        char msg[700];
        snprintf(msg, sizeof msg, "a trie with 32 matches along one key passes and encodes (check %d%s%s, child exit %d)", rc,
                 rc ? ": " : "", rc ? why : "", code);
        test_check(rc == 0 && code == 0, msg);
        free(cm.p);
        free(m.p);
    }
    // The denormalizer's charsmap is read the same way (decode), and a second normalizer_spec
    // (protobuf merges the two: the last charsmap wins) is checked too.
    {
        Buf cm = charsmap_poke(4, (0x3fffffu << 10) | (1u << 9));
        Buf f = spec_field(5, cm.p, cm.n);
        Buf m = model_with(0, &f);
        expect_refused("denormalizer_spec's trie", &m, "denormalizer_spec.precompiled_charsmap");
        free(f.p);
        free(m.p);
        f = spec_field(3, cm.p, cm.n);
        m = model_with(0, &f);  // the sample's normalizer_spec, then a damaged second one
        expect_refused("a second normalizer_spec", &m, "normalizer_spec.precompiled_charsmap");
        expect_load_error("a second normalizer_spec", &m, "root's children");
        free(f.p);
        free(m.p);
        free(cm.p);
    }
}

static Buf piece_field(const void *piece, size_t len, int with_score, float score, int type) {
    Buf p = {0}, f = {0};
    if (piece) buf_len(&p, 1, piece, len);
    if (with_score) buf_float(&p, 2, score);
    if (type >= 0) buf_uint(&p, 3, (uint64_t)type);
    buf_len(&f, 1, p.p, p.n);
    free(p.p);
    return f;
}

static void test_pieces_and_specs(void) {
    struct {
        const char *what;
        const char *piece;
        size_t len;
        int with_score;
        float score;
        int type;
        const char *needle;
    } cases[] = {
        {"a piece with a NUL byte", "ab\0cd", 5, 1, -3.0f, 1, "holds a NUL byte at offset 2"},
        {"a piece of NUL alone", "\0", 1, 1, -3.0f, 1, "holds a NUL byte at offset 0"},
        {"an empty piece", "", 0, 1, -3.0f, 1, "an empty piece string"},
        {"a piece without its string", NULL, 0, 1, -3.0f, 1, "no piece string"},
        {"a NaN score", "\xe2\x96\x81zz", 5, 1, NAN, 1, "score nan is not a finite number"},
        {"an infinite score", "\xe2\x96\x81zz", 5, 1, -INFINITY, 1, "score -inf is not a finite number"},
        {"piece type 7", "\xe2\x96\x81zz", 5, 1, -3.0f, 7, "type 7, expected 1..6"},
        {"piece type 0", "\xe2\x96\x81zz", 5, 1, -3.0f, 0, "type 0, expected 1..6"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Buf f = piece_field(cases[i].piece, cases[i].len, cases[i].with_score, cases[i].score, cases[i].type);
        Buf m = model_with(0, &f);
        expect_refused(cases[i].what, &m, cases[i].needle);
        if (i == 0 || i == 4) expect_load_error(cases[i].what, &m, "pieces[32000]");
        free(f.p);
        free(m.p);
    }
    // trainer_spec.model_type: appended as a second trainer_spec (protobuf merges it in)
    uint64_t types[] = {0, 5, 1ull << 40};
    for (int i = 0; i < 3; i++) {
        Buf ts = {0}, f = {0};
        buf_uint(&ts, 3, types[i]);
        buf_len(&f, 2, ts.p, ts.n);
        Buf m = model_with(0, &f);
        char what[64];
        snprintf(what, sizeof what, "model_type %llu", (unsigned long long)types[i]);
        expect_refused(what, &m, "trainer_spec.model_type");
        if (i == 1) expect_load_error(what, &m, "model_type");
        free(ts.p);
        free(f.p);
        free(m.p);
    }
    // the wire format
    {
        Buf m = model_with(0, NULL);
        m.n = g_model_len / 2;  // cut inside the pieces
        expect_refused("truncated in the pieces", &m, "truncated file?");
        expect_load_error("truncated in the pieces", &m, "truncated");
        m.n = g_model_len - 3;  // cut inside the normalizer_spec
        expect_refused("truncated at the end", &m, "truncated file?");
        free(m.p);
        Buf f = {0};
        buf_varint(&f, (uint64_t)7 << 3 | 2);
        buf_varint(&f, 1u << 30);  // a length past the end
        m = model_with(0, &f);
        expect_refused("a length past the end", &m, "field 7 at byte");
        free(f.p);
        free(m.p);
        f = (Buf){0};
        buf_varint(&f, (uint64_t)9 << 3 | 3);  // a group
        buf_varint(&f, (uint64_t)9 << 3 | 4);
        m = model_with(0, &f);
        expect_refused("a group field", &m, "wire type 3");
        free(f.p);
        free(m.p);
        f = (Buf){0};
        buf_uint(&f, 3, 1);  // normalizer_spec as a varint
        m = model_with(3, &f);
        expect_refused("normalizer_spec as a varint", &m, "expected length-delimited");
        free(f.p);
        free(m.p);
        unsigned char ten[12] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
        m = model_with(0, NULL);
        buf_put(&m, ten, sizeof ten);  // an 11-byte varint
        expect_refused("an 11-byte varint", &m, "longer than 10 bytes");
        free(m.p);
    }
}

// The largest trie the check takes (16 MiB, 4M units) with every unit reachable: block k's
// 256 units (labels 0..255) all lead to block k+1, so 256 units share each state. The check
// visits each state once, not once per unit that leads to it (which was 2^30 steps, 3 s).
static void test_worst_case_time(void) {
    uint32_t nunits = (16u << 20) / 4, nb = nunits / 256;
    Buf cm = {0};
    buf_u32le(&cm, nunits * 4);
    buf_u32le(&cm, 256u << 10);  // the root: block 1
    for (uint32_t i = 1; i < 256; i++) buf_u32le(&cm, 1u << 31);
    for (uint32_t b = 1; b < nb; b++)
        for (uint32_t c = 0; c < 256; c++) {
            uint32_t idx = b * 256 + c, next = (b + 1) * 256;
            buf_u32le(&cm, b + 1 < nb ? ((idx ^ next) << 10) | c : 1u << 31);
        }
    buf_put(&cm, "x", 2);
    Buf m = model_with_charsmap(cm.p, cm.n);
    double t0 = now_seconds();
    char why[512];
    int rc = spm_check_model(m.p, m.n, why, sizeof why);
    double secs = now_seconds() - t0;
    char msg[700];
    snprintf(msg, sizeof msg, "a 16 MiB trie, every unit reachable: checked in %.2f s (under 3 s)%s%s", secs,
             rc ? ": " : "", rc ? why : "");
    test_check(rc == 0 && secs < 3.0, msg);
    free(m.p);
    Buf cm2 = {0};  // one unit more than the bound
    buf_u32le(&cm2, nunits * 4 + 4);
    buf_put(&cm2, cm.p + 4, cm.n - 4);
    buf_put(&cm2, "\0\0\0\0", 4);
    m = model_with_charsmap(cm2.p, cm2.n);
    expect_refused("a trie over 16 MiB", &m, "more than 16777216");
    free(m.p);
    free(cm.p);
    free(cm2.p);
}

// xorshift: a fixed sequence, so a failure reproduces.
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

// Random damage to the real trie: bytes of reachable-looking units (the first 2048) and of
// anywhere in it. What the check accepts must load and encode without a signal.
static void test_fuzz(void) {
    uint32_t trie = (uint32_t)g_charsmap[0] | (uint32_t)g_charsmap[1] << 8 | (uint32_t)g_charsmap[2] << 16 |
                    (uint32_t)g_charsmap[3] << 24;
    int accepted = 0, refused = 0, bad = 0;
    char first_bad[256] = "";
    for (int v = 0; v < 120; v++) {
        Buf cm = {0};
        buf_put(&cm, g_charsmap, g_charsmap_len);
        int flips = 1 + (int)(rng() % 6);
        for (int k = 0; k < flips; k++) {
            size_t span = v % 2 ? 2048 * 4 : trie;
            size_t at = 4 + (size_t)(rng() % span);
            cm.p[at] ^= (unsigned char)(1u << (rng() % 8));
        }
        Buf m = model_with_charsmap(cm.p, cm.n);
        char why[512];
        if (spm_check_model(m.p, m.n, why, sizeof why) != 0) {
            refused++;
        } else {
            accepted++;
            int st = 0, code = load_and_encode(&m, TEXTS, NTEXTS, &st);
            // exit 1 is a one-line refusal (a self-test failure, say); a signal is a crash
            if (code != 0 && code != 1) {
                if (!bad) snprintf(first_bad, sizeof first_bad, " (variant %d: child status %d)", v, code);
                bad++;
            }
        }
        free(cm.p);
        free(m.p);
    }
    char msg[400];
    snprintf(msg, sizeof msg, "fuzz: 120 damaged tries, %d refused, %d accepted, %d of those crashed%s", refused, accepted,
             bad, first_bad);
    test_check(bad == 0 && refused > 0, msg);
}

int main(void) {
    load_sample();
    test_sample_accepted();
    test_charsmap();
    test_pieces_and_specs();
    test_worst_case_time();
    test_fuzz();
    free(g_fields);
    free(g_model);
    return test_summary();
}
