// tests/test_io.c: model I/O without a GPU: presets and config.json round trips, the
// parameter layout (HF names, order, shapes, known parameter counts), the random init,
// fp16/bf16 rounding, safetensors write/read (and its validation errors), and Hugging
// Face model directories (tied, untied, aliases, shards, and their errors).
// Error paths exit the process, so each is run in a forked child whose exit code and
// stderr are checked: exit 1, one "error:" line (plus an optional "HINT:" line).
#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../model/config.h"
#include "../model/hf_dir.h"
#include "../model/params.h"
#include "../model/safetensors.h"
#include "test.h"
#include "test_tmp.h"
#include "test_fork.h"

static char g_tmp[256];

static char *tmp_path(const char *name) { return path_join(g_tmp, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopenCheck(path, "wb");
    fwriteCheck(text, 1, strlen(text), f, path);
    fcloseCheck(f, path);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- forked error checks ------------------------------------------------------------------

// forked error checks: tests/test_fork.h
static void expect_error(const char *what, FailFn fn, const void *arg, const char *needle) {
    test_expect_error(what, fn, arg, needle, NULL);
}

// ---- fp16 / bf16 --------------------------------------------------------------------------

// Independent bf16 reference: the nearer of the two neighbours, ties to even, in double.
static uint16_t ref_bf16(float f) {
    uint32_t u = fbits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xFFFF) == 0) return lo;
    double x = fabs((double)f), a = fabs((double)bitsf((uint32_t)lo << 16));
    double b = ((hi & 0x7FFF) == 0x7F80) ? ldexp(1.0, 128) : fabs((double)bitsf((uint32_t)hi << 16));
    if (x - a < b - x) return lo;
    if (x - a > b - x) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_half_conversions(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        uint16_t back = st_f32_to_f16(f);
        if (isnan(f)) bad += !((back & 0x7C00) == 0x7C00 && (back & 0x3FF));
        else bad += back != h;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "f16 -> f32 -> f16 identity on all 65536 halves (%d differ)", bad);
    test_check(bad == 0, msg);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        uint16_t back = st_f32_to_bf16(f);
        if (isnan(f)) bad += !(isnan(st_bf16_to_f32(back)));
        else bad += back != h;
    }
    snprintf(msg, sizeof msg, "bf16 -> f32 -> bf16 identity on all 65536 values (%d differ)", bad);
    test_check(bad == 0, msg);

    struct {
        float in;
        uint16_t f16;
        const char *what;
    } c16[] = {
        {1.0f, 0x3C00, "1"},
        {-2.5f, 0xC100, "-2.5"},
        {0.0f, 0x0000, "+0"},
        {-0.0f, 0x8000, "-0"},
        {65504.0f, 0x7BFF, "max half"},
        {65519.996f, 0x7BFF, "just below the inf threshold"},
        {65520.0f, 0x7C00, "65520 ties to inf"},
        {1e6f, 0x7C00, "overflow to inf"},
        {INFINITY, 0x7C00, "inf"},
        {-INFINITY, 0xFC00, "-inf"},
        {0x1p-24f, 0x0001, "smallest subnormal"},
        {0x1p-25f, 0x0000, "half the smallest subnormal ties to 0"},
        {0x1.000002p-25f, 0x0001, "just above that rounds up"},
        {0x3p-25f, 0x0002, "1.5 subnormal units ties to 2"},
        {0x5p-25f, 0x0002, "2.5 subnormal units ties to 2"},
        {0x1p-14f, 0x0400, "smallest normal"},
        {0x1.ff8p-15f, 0x03FF, "largest subnormal"},
        {0x1.ffcp-15f, 0x0400, "halfway from the largest subnormal to the smallest normal ties to even (up)"},
        {0x1.ffap-15f, 0x03FF, "a quarter of the way rounds down to the largest subnormal"},
        {1.0f + 0x1p-11f, 0x3C00, "1 + half ulp ties to even (down)"},
        {1.0f + 0x3p-11f, 0x3C02, "1 + 1.5 ulp ties to even (up)"},
        {1.0f + 0x1p-11f + 0x1p-23f, 0x3C01, "1 + just over half ulp rounds up"},
        {0.1f, 0x2E66, "0.1"},
        {1e-8f, 0x0000, "tiny to 0"},
    };
    bad = 0;
    for (size_t i = 0; i < sizeof c16 / sizeof c16[0]; i++) {
        uint16_t got = st_f32_to_f16(c16[i].in);
        if (got != c16[i].f16) {
            printf("       f16(%a) [%s] = 0x%04X, want 0x%04X\n", (double)c16[i].in, c16[i].what, got, c16[i].f16);
            bad++;
        }
    }
    snprintf(msg, sizeof msg, "f32 -> f16 rounding cases (%zu cases, %d wrong)", sizeof c16 / sizeof c16[0], bad);
    test_check(bad == 0, msg);
    uint16_t hn = st_f32_to_f16(NAN), hsn = st_f32_to_f16(bitsf(0x7F800001u));
    test_check((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) && (hsn & 0x7C00) == 0x7C00 && (hsn & 0x3FF),
               "f32 -> f16 keeps NaN (also a NaN with only a low payload bit) a NaN");

    struct {
        uint32_t in;
        uint16_t bf;
        const char *what;
    } cb[] = {
        {0x3F800000u, 0x3F80, "1"},
        {0x3F808000u, 0x3F80, "1 + half ulp ties to even (down)"},
        {0x3F818000u, 0x3F82, "1 + 1.5 ulp ties to even (up)"},
        {0x3F808001u, 0x3F81, "just over half ulp rounds up"},
        {0x3DCCCCCDu, 0x3DCD, "0.1"},
        {0x7F7FFFFFu, 0x7F80, "FLT_MAX rounds to inf"},
        {0x7F7F7FFFu, 0x7F7F, "just below the inf threshold"},
        {0x7F800000u, 0x7F80, "inf"},
        {0xFF800000u, 0xFF80, "-inf"},
        {0x000116C2u, 0x0001, "f32 subnormal"},
        {0x80000000u, 0x8000, "-0"},
    };
    bad = 0;
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++) {
        uint16_t got = st_f32_to_bf16(bitsf(cb[i].in));
        if (got != cb[i].bf) {
            printf("       bf16(0x%08X) [%s] = 0x%04X, want 0x%04X\n", cb[i].in, cb[i].what, got, cb[i].bf);
            bad++;
        }
    }
    snprintf(msg, sizeof msg, "f32 -> bf16 rounding cases (%zu cases, %d wrong)", sizeof cb / sizeof cb[0], bad);
    test_check(bad == 0, msg);
    uint16_t bn = st_f32_to_bf16(bitsf(0x7F800001u));
    test_check(isnan(st_bf16_to_f32(bn)), "f32 -> bf16 keeps a low-payload NaN a NaN (plain truncation gives inf)");

    // Random bit patterns against independent references.
    uint64_t s = 0x1234567;
    int bad16 = 0, badbf = 0, n = 2000000;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float f = bitsf((uint32_t)(s >> 32));
        if (isnan(f)) continue;
        badbf += st_f32_to_bf16(f) != ref_bf16(f);
#ifdef __FLT16_MAX__
        _Float16 hv = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &hv, 2);
        bad16 += st_f32_to_f16(f) != hb;
#endif
    }
#ifdef __FLT16_MAX__
    snprintf(msg, sizeof msg, "f32 -> f16 equals the compiler's _Float16 cast on %d random floats (%d differ)", n, bad16);
    test_check(bad16 == 0, msg);
#endif
    snprintf(msg, sizeof msg, "f32 -> bf16 equals a double-precision reference on %d random floats (%d differ)", n,
             badbf);
    test_check(badbf == 0, msg);
}

// ---- safetensors ----------------------------------------------------------------------------

static void test_safetensors_roundtrip(void) {
    char *path = tmp_path("rt.safetensors");
    enum { BIG = 700001 };  // > the 1 MiB conversion chunk in F16
    StTensorDesc d[] = {
        {"a", ST_F32, 2, {3, 4}}, {"b", ST_F16, 1, {12}},  {"c", ST_BF16, 2, {2, 3}}, {"d", ST_I64, 1, {4}},
        {"e", ST_I32, 2, {2, 2}}, {"s", ST_F32, 0, {0}},   {"z", ST_F16, 2, {0, 3}},  {"big", ST_F16, 1, {BIG}},
        {"w\"q", ST_BF16, 1, {1}},
    };
    int nd = (int)(sizeof d / sizeof d[0]);
    float a[12];
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.37f - 1.5f;
    float b[12] = {1.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f, 65520.0f, 0x1p-24f,
                   0x1p-25f, 0.1f, -2.5f, NAN, -INFINITY, 0x3p-25f};
    float b_want[12] = {1.0f, 1.0f, 1.0f + 0x1p-9f, 65504.0f, INFINITY, 0x1p-24f,
                        0.0f, 0.0999755859375f, -2.5f, NAN, -INFINITY, 0x1p-23f};
    float c[6] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 0.1f, -3.0f, FLT_MAX, bitsf(0x000116C2u)};
    float c_want[6] = {1.0f, 1.0f + 0x1p-6f, 0.10009765625f, -3.0f, INFINITY, bitsf(0x00010000u)};
    int32_t di[4] = {-5, 0, INT32_MAX, INT32_MIN};
    int32_t ei[4] = {7, -7, 123456789, -1};
    float *big = mallocCheck((BIG + 1) * sizeof(float));
    big[0] = 42.5f;  // the scalar "s"
    for (int i = 0; i < BIG; i++) big[1 + i] = (float)((i % 2049) - 1024) * 0.25f;  // exact in f16
    float wq = 3.0f;

    StWriter w;
    st_writer_open(&w, path, d, nd, "{\"format\":\"pt\"}");
    st_writer_write_f32(&w, a, 5);  // one tensor in two pieces
    st_writer_write_f32(&w, a + 5, 7);
    st_writer_write_f32(&w, b, 12);
    st_writer_write_f32(&w, c, 6);
    st_writer_write_i32(&w, di, 4);
    st_writer_write_i32(&w, ei, 4);
    st_writer_write_f32(&w, big, BIG + 1);  // scalar, empty tensor and big one in one call
    st_writer_write_f32(&w, &wq, 1);
    char *tmp = tmp_path("rt.safetensors.tmp");
    test_check(access(tmp, F_OK) == 0 && access(path, F_OK) != 0, "writer: data goes to <path>.tmp until close");
    st_writer_close(&w);
    test_check(access(tmp, F_OK) != 0 && access(path, F_OK) == 0, "writer: close renames <path>.tmp into place");

    // Raw layout: 8-byte little-endian length, header padded with spaces to 8 bytes.
    size_t flen;
    char *raw = read_text_file(path, &flen);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)raw[i];
    uint64_t data = 12 * 4 + 12 * 2 + 6 * 2 + 4 * 8 + 4 * 4 + 4 + 0 + (uint64_t)BIG * 2 + 2;
    test_check(hlen % 8 == 0 && 8 + hlen + data == flen, "file size = 8 + header (multiple of 8) + data");
    int pad_ok = 1;
    uint64_t last = 7 + hlen;
    while (raw[last] == ' ') last--;
    pad_ok = raw[last] == '}' && raw[8] == '{';
    test_check(pad_ok, "header is one JSON object followed only by space padding");
    char *hdr = strndup(raw + 8, hlen);
    cJSON *root = cJSON_Parse(hdr);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(meta, "format");
    test_check(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "pt"), "header has __metadata__ {\"format\": \"pt\"}");
    cJSON_Delete(root);
    free(hdr);
    free(raw);

    StFile st;
    st_open(&st, path);
    test_check(st.count == nd, "reader: tensor count");
    const StTensor *ta = st_find(&st, "a"), *tb = st_find(&st, "b"), *tc = st_find(&st, "c"), *td = st_find(&st, "d"),
                   *te = st_find(&st, "e"), *ts = st_find(&st, "s"), *tz = st_find(&st, "z"),
                   *tbig = st_find(&st, "big"), *twq = st_find(&st, "w\"q");
    test_check(ta && tb && tc && td && te && ts && tz && tbig && twq && !st_find(&st, "nope"),
               "reader: st_find finds every tensor (also a name with a quote) and not a missing one");
    test_check(ta->ndim == 2 && ta->shape[0] == 3 && ta->shape[1] == 4 && ta->dtype == ST_F32 && ts->ndim == 0 &&
                   ts->numel == 1 && tz->numel == 0 && tz->shape[1] == 3 && tbig->numel == BIG,
               "reader: shapes, dtypes, scalar and empty tensors");
    float ra[12], rb[12], rc[6], rs, rwq;
    int32_t rd[4], re[4];
    st_read_f32(&st, ta, ra);
    st_read_f32(&st, tb, rb);
    st_read_f32(&st, tc, rc);
    st_read_f32(&st, ts, &rs);
    st_read_f32(&st, twq, &rwq);
    st_read_i32(&st, td, rd);
    st_read_i32(&st, te, re);
    test_check(memcmp(ra, a, sizeof a) == 0, "F32 read back bit-exact");
    int okb = 1;
    for (int i = 0; i < 12; i++) okb &= isnan(b_want[i]) ? isnan(rb[i]) : fbits(rb[i]) == fbits(b_want[i]);
    test_check(okb, "F16 read back = round-to-nearest-even values (ties, overflow to inf, subnormals, NaN)");
    int okc = 1;
    for (int i = 0; i < 6; i++) okc &= fbits(rc[i]) == fbits(c_want[i]);
    test_check(okc, "BF16 read back = round-to-nearest-even values (ties, FLT_MAX to inf, subnormal)");
    test_check(!memcmp(rd, di, sizeof di) && !memcmp(re, ei, sizeof ei), "I64 and I32 read back as int32 exactly");
    test_check(rs == 42.5f && rwq == 3.0f, "scalar F32 and the quoted-name BF16 tensor read back");
    float *rbig = mallocCheck((size_t)BIG * sizeof(float));
    st_read_f32(&st, tbig, rbig);
    test_check(memcmp(rbig, big + 1, (size_t)BIG * sizeof(float)) == 0, "700001-element F16 tensor (chunked) exact");
    st_close(&st);
    free(rbig);
    free(big);
    free(tmp);
    free(path);
}

// A safetensors file with the given header text (padded or not) and n data bytes.
static char *write_raw_st(const char *name, const char *header, uint64_t header_len_field, size_t data_bytes) {
    char *path = tmp_path(name);
    FILE *f = fopenCheck(path, "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(header_len_field >> (8 * i));
    fwriteCheck(len, 1, 8, f, path);
    fwriteCheck(header, 1, strlen(header), f, path);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fcloseCheck(f, path);
    return path;
}

static void do_st_open(const void *arg) {
    StFile st;
    st_open(&st, (const char *)arg);
}

static void do_read_f32_of_int(const void *arg) {
    StFile st;
    st_open(&st, (const char *)arg);
    float x[4];
    st_read_f32(&st, &st.tensors[0], x);
}

static void do_read_i32_overflow(const void *arg) {
    StFile st;
    st_open(&st, (const char *)arg);
    int32_t x[1];
    st_read_i32(&st, &st.tensors[0], x);
}

static void test_safetensors_errors(void) {
    struct {
        const char *name, *header;
        int64_t len_field;  // -1: strlen(header)
        size_t data;
        const char *needle;
    } cases[] = {
        {"ok.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, NULL},
        {"zerolen.st", "", 0, 0, "too small"},
        {"hugelen.st", "{}", 200000000, 0, "100 MB"},
        {"pastend.st", "{\"x\":{}}", 4096, 0, "runs past the end"},
        {"notjson.st", "this is not json", -1, 0, "not valid JSON"},
        {"array.st", "[1,2,3]", -1, 0, "not an object"},
        {"f64.st", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1, 16, "\"F64\" is not supported"},
        {"mismatch.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", -1, 20, "needs 24"},
        {"negshape.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8, "non-negative"},
        {"fracshape.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", -1, 8, "non-negative"},
        {"noshape.st", "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", -1, 8, "\"shape\""},
        {"gap.st",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         -1, 12, "leave a gap"},
        {"overlap.st",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         -1, 8, "overlap"},
        {"notzero.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, "\"x\""},
        {"trunc.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 10, "truncated"},
        {"trailing.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 9, "trailing"},
        {"dup.st",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         -1, 8, "twice"},
        {"badmeta.st", "{\"__metadata__\":{\"format\":1}}", -1, 0, "__metadata__"},
        {"baddtype.st", "{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4, "dtype"},
        {"badoff.st", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", -1, 4, "data_offsets"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t lf = cases[i].len_field < 0 ? strlen(cases[i].header) : (uint64_t)cases[i].len_field;
        char *p = write_raw_st(cases[i].name, cases[i].header, lf, cases[i].data);
        if (!cases[i].needle) {  // the control case must open fine
            StFile st;
            st_open(&st, p);
            test_check(st.count == 1 && st.tensors[0].numel == 2, "reader: a minimal valid hand-written file opens");
            st_close(&st);
        } else {
            char what[64];
            snprintf(what, sizeof what, "safetensors %s", cases[i].name);
            expect_error(what, do_st_open, p, cases[i].needle);
        }
        free(p);
    }
    char *p = tmp_path("short.st");
    write_text(p, "\x10\x00\x00");
    expect_error("safetensors 1-byte file", do_st_open, p, "too short");
    free(p);
    p = tmp_path("missing.st");
    expect_error("safetensors missing file", do_st_open, p, "cannot open");
    free(p);
    p = write_raw_st("i64.st", "{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                     strlen("{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}"), 8);
    expect_error("st_read_f32 of an I64 tensor", do_read_f32_of_int, p, "expected a float tensor");
    free(p);
    // I64 value outside int32
    p = tmp_path("i64big.st");
    StTensorDesc dd = {"x", ST_I64, 1, {1}};
    StWriter w;
    st_writer_open(&w, p, &dd, 1, NULL);
    FILE *f = w.f;  // write a raw int64 past int32 by hand
    int64_t v = (int64_t)1 << 40;
    fwriteCheck(&v, 8, 1, f, p);
    w.written = 8;
    st_writer_close(&w);
    expect_error("st_read_i32 of a value beyond int32", do_read_i32_overflow, p, "outside the int32 range");
    free(p);
}

// ---- config ---------------------------------------------------------------------------------

static const char *ALL_PRESETS[] = {
    "t5-small",          "t5-base",           "t5-large",           "t5-3b",              "t5-11b",
    "google/t5-v1_1-small", "google/t5-v1_1-base", "google/t5-v1_1-large", "google/t5-v1_1-xl", "google/t5-v1_1-xxl",
    "google/flan-t5-small", "google/flan-t5-base", "google/flan-t5-large", "google/flan-t5-xl", "google/flan-t5-xxl",
};
#define N_PRESETS ((int)(sizeof ALL_PRESETS / sizeof ALL_PRESETS[0]))

static int same_config(const T5Config *a, const T5Config *b) {
    return a->vocab_size == b->vocab_size && a->d_model == b->d_model && a->d_kv == b->d_kv && a->d_ff == b->d_ff &&
           a->num_layers == b->num_layers && a->num_decoder_layers == b->num_decoder_layers &&
           a->num_heads == b->num_heads && a->relative_attention_num_buckets == b->relative_attention_num_buckets &&
           a->relative_attention_max_distance == b->relative_attention_max_distance &&
           a->dropout_rate == b->dropout_rate && a->layer_norm_epsilon == b->layer_norm_epsilon &&
           a->initializer_factor == b->initializer_factor && !strcmp(a->feed_forward_proj, b->feed_forward_proj) &&
           a->act == b->act && a->is_gated == b->is_gated && a->tie_word_embeddings == b->tie_word_embeddings &&
           a->scale_decoder_outputs == b->scale_decoder_outputs && a->untied_lm_head == b->untied_lm_head &&
           a->pad_token_id == b->pad_token_id && a->eos_token_id == b->eos_token_id &&
           a->decoder_start_token_id == b->decoder_start_token_id;
}

static void test_presets(void) {
    char *path = tmp_path("preset_config.json");
    int all_ok = 1;
    for (int i = 0; i < N_PRESETS; i++) {
        T5Config c, back;
        if (!t5_config_preset(ALL_PRESETS[i], &c)) {
            printf("       preset %s unknown\n", ALL_PRESETS[i]);
            all_ok = 0;
            continue;
        }
        t5_config_save_json(&c, path);
        t5_config_load_json(path, &back);
        if (!same_config(&c, &back)) {
            printf("       preset %s: config.json round trip differs\n", ALL_PRESETS[i]);
            all_ok = 0;
        }
    }
    test_check(all_ok, "every preset (15) saves to config.json and loads back equal");
    free(path);

    T5Config a, b;
    int alias_ok = 1;
    const char *pairs[][2] = {{"t5-small", "google-t5/t5-small"},
                              {"t5-11b", "google-t5/t5-11b"},
                              {"flan-t5-small", "google/flan-t5-small"},
                              {"t5-v1_1-xl", "google/t5-v1_1-xl"}};
    for (int i = 0; i < 4; i++)
        alias_ok &= t5_config_preset(pairs[i][0], &a) && t5_config_preset(pairs[i][1], &b) && same_config(&a, &b);
    test_check(alias_ok, "presets accept names with and without the google-t5/ or google/ prefix");
    test_check(!t5_config_preset("t5-tiny", &a) && !t5_config_preset("google/t5-small", &a) &&
                   !t5_config_preset("", &a) && !t5_config_preset("google-t5/flan-t5-small", &a),
               "unknown names are not presets (t5-tiny, google/t5-small, empty, wrong prefix)");
    test_check(strstr(t5_config_preset_names(), "t5-small") && strstr(t5_config_preset_names(), "google/flan-t5-xxl"),
               "t5_config_preset_names lists the presets");

    t5_config_preset("t5-small", &a);
    test_check(a.vocab_size == 32128 && a.d_model == 512 && a.d_kv == 64 && a.d_ff == 2048 && a.num_layers == 6 &&
                   a.num_decoder_layers == 6 && a.num_heads == 8 && a.act == ACT_RELU && !a.is_gated &&
                   a.tie_word_embeddings && a.scale_decoder_outputs && !a.untied_lm_head &&
                   a.relative_attention_num_buckets == 32 && a.relative_attention_max_distance == 128 &&
                   a.dropout_rate == 0.1f && a.layer_norm_epsilon == 1e-6f && a.initializer_factor == 1.0f &&
                   a.pad_token_id == 0 && a.eos_token_id == 1 && a.decoder_start_token_id == 0,
               "t5-small preset: hub values, relu, tied and scaled head");
    t5_config_preset("t5-3b", &a);
    t5_config_preset("t5-11b", &b);
    test_check(a.d_model == 1024 && a.d_kv == 128 && a.d_ff == 16384 && a.num_heads == 32 && a.num_layers == 24 &&
                   b.d_kv == 128 && b.d_ff == 65536 && b.num_heads == 128,
               "t5-3b / t5-11b presets: d_kv 128, inner width != d_model");
    t5_config_preset("google/flan-t5-small", &a);
    test_check(a.d_model == 512 && a.d_ff == 1024 && a.num_layers == 8 && a.num_decoder_layers == 8 &&
                   a.num_heads == 6 && a.is_gated && a.act == ACT_GELU_NEW &&
                   !strcmp(a.feed_forward_proj, "gated-gelu") && !a.tie_word_embeddings && !a.scale_decoder_outputs &&
                   a.untied_lm_head,
               "flan-t5-small preset: 8 layers, 6 heads, d_ff 1024, gated-gelu (gelu_new), untied, unscaled");
    t5_config_preset("google/t5-v1_1-xxl", &a);
    test_check(a.d_model == 4096 && a.d_ff == 10240 && a.num_heads == 64 && a.untied_lm_head,
               "t5-v1_1-xxl preset: 4096 / 10240 / 64 heads");
}

static void test_parse_ffn(void) {
    struct {
        const char *s;
        int ok;
        Activation act;
        int gated;
    } c[] = {
        {"relu", 1, ACT_RELU, 0},          {"gelu", 1, ACT_GELU, 0},           {"gelu_new", 1, ACT_GELU_NEW, 0},
        {"silu", 1, ACT_SILU, 0},          {"gated-gelu", 1, ACT_GELU_NEW, 1}, {"gated-relu", 1, ACT_RELU, 1},
        {"gated-silu", 1, ACT_SILU, 1},    {"gated-gelu_new", 1, ACT_GELU_NEW, 1}, {"gated-foo", 0, ACT_RELU, 0},
        {"swiglu", 0, ACT_RELU, 0},        {"gated-", 0, ACT_RELU, 0},         {"", 0, ACT_RELU, 0},
        {"relu-gated", 0, ACT_RELU, 0},    {"gated-gated-gelu", 0, ACT_RELU, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        Activation act = ACT_SILU;
        int gated = -1;
        int ok = t5_config_parse_ffn(c[i].s, &act, &gated);
        if (ok != c[i].ok || (ok && (act != c[i].act || gated != c[i].gated))) {
            printf("       parse_ffn(\"%s\") = %d act %d gated %d\n", c[i].s, ok, act, gated);
            bad++;
        }
    }
    test_check(bad == 0, "t5_config_parse_ffn: 8 accepted forms (gated-gelu -> gelu_new), 6 rejected");
}

static void test_config_json(void) {
    char *p = tmp_path("config.json");
    T5Config c;
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_heads\": 2}");
    t5_config_load_json(p, &c);
    test_check(c.num_decoder_layers == 3 && c.act == ACT_RELU && !c.is_gated && !strcmp(c.feed_forward_proj, "relu") &&
                   c.tie_word_embeddings && c.scale_decoder_outputs && !c.untied_lm_head && c.dropout_rate == 0.1f &&
                   c.layer_norm_epsilon == 1e-6f && c.initializer_factor == 1.0f &&
                   c.relative_attention_num_buckets == 32 && c.relative_attention_max_distance == 128 &&
                   c.pad_token_id == 0 && c.eos_token_id == 1 && c.decoder_start_token_id == 0 &&
                   !strcmp(c.name, p),
               "config.json with only the required keys gets T5Config's defaults");

    // A transformers 5 config: tied head without output scaling.
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_decoder_layers\": 2, \"num_heads\": 2, \"tie_word_embeddings\": true, "
                  "\"scale_decoder_outputs\": false, \"dropout_rate\": 0.0, \"feed_forward_proj\": \"gated-silu\", "
                  "\"decoder_start_token_id\": 5, \"pad_token_id\": 3, \"eos_token_id\": 4, "
                  "\"relative_attention_num_buckets\": 8, \"relative_attention_max_distance\": 20, "
                  "\"layer_norm_epsilon\": 1e-5, \"initializer_factor\": 0.5, \"model_type\": \"t5\"}");
    t5_config_load_json(p, &c);
    test_check(c.num_decoder_layers == 2 && c.tie_word_embeddings && !c.scale_decoder_outputs && !c.untied_lm_head &&
                   c.dropout_rate == 0.0f && c.act == ACT_SILU && c.is_gated && c.decoder_start_token_id == 5 &&
                   c.pad_token_id == 3 && c.eos_token_id == 4 && c.relative_attention_num_buckets == 8 &&
                   c.relative_attention_max_distance == 20 && c.layer_norm_epsilon == 1e-5f &&
                   c.initializer_factor == 0.5f,
               "config.json: every key read (transformers-5 tie=true, scale_decoder_outputs=false)");
    write_text(p, "{\"vocab_size\": 100, \"d_model\": 16, \"d_kv\": 4, \"d_ff\": 32, \"num_layers\": 3, "
                  "\"num_heads\": 2, \"pad_token_id\": 7}");
    t5_config_load_json(p, &c);
    test_check(c.decoder_start_token_id == 7, "decoder_start_token_id defaults to pad_token_id");

    // The hub's google/flan-t5-large config.json, verbatim.
    write_text(p, "{\n  \"architectures\": [\n    \"T5ForConditionalGeneration\"\n  ],\n  \"d_ff\": 2816,\n"
                  "  \"d_kv\": 64,\n  \"d_model\": 1024,\n  \"decoder_start_token_id\": 0,\n"
                  "  \"dense_act_fn\": \"gelu_new\",\n  \"dropout_rate\": 0.1,\n  \"eos_token_id\": 1,\n"
                  "  \"feed_forward_proj\": \"gated-gelu\",\n  \"initializer_factor\": 1.0,\n"
                  "  \"is_encoder_decoder\": true,\n  \"is_gated_act\": true,\n  \"layer_norm_epsilon\": 1e-06,\n"
                  "  \"model_type\": \"t5\",\n  \"n_positions\": 512,\n  \"num_decoder_layers\": 24,\n"
                  "  \"num_heads\": 16,\n  \"num_layers\": 24,\n  \"output_past\": true,\n  \"pad_token_id\": 0,\n"
                  "  \"relative_attention_max_distance\": 128,\n  \"relative_attention_num_buckets\": 32,\n"
                  "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float32\",\n"
                  "  \"transformers_version\": \"4.23.1\",\n  \"use_cache\": true,\n  \"vocab_size\": 32128\n}\n");
    T5Config want;
    t5_config_load_json(p, &c);
    t5_config_preset("google/flan-t5-large", &want);
    test_check(same_config(&c, &want), "hub flan-t5-large config.json loads equal to the preset");
    // The hub's t5-small config.json (2019: no feed_forward_proj, no tie key).
    write_text(p, "{\"d_ff\": 2048, \"d_kv\": 64, \"d_model\": 512, \"dropout_rate\": 0.1, \"finetuning_task\": null,"
                  " \"initializer_factor\": 1.0, \"is_decoder\": false, \"layer_norm_epsilon\": 1e-06,"
                  " \"n_positions\": 512, \"num_heads\": 8, \"num_labels\": 2, \"num_layers\": 6,"
                  " \"output_attentions\": false, \"output_hidden_states\": false, \"output_past\": true,"
                  " \"pruned_heads\": {}, \"relative_attention_num_buckets\": 32, \"torchscript\": false,"
                  " \"use_bfloat16\": false, \"vocab_size\": 32128}");
    t5_config_load_json(p, &c);
    t5_config_preset("t5-small", &want);
    test_check(same_config(&c, &want), "hub t5-small config.json (old style) loads equal to the preset");

    // What we write: transformers-5 keys, parseable, no temp file left.
    t5_config_preset("google/flan-t5-base", &c);
    t5_config_save_json(&c, p);
    size_t len;
    char *text = read_text_file(p, &len);
    cJSON *root = cJSON_Parse(text);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    int ok = root && cJSON_IsArray(arch) &&
             !strcmp(cJSON_GetArrayItem(arch, 0)->valuestring, "T5ForConditionalGeneration") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "model_type")->valuestring, "t5") &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "is_encoder_decoder")) &&
             cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings")) &&
             cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "scale_decoder_outputs")) &&
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "is_gated_act")) &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "dense_act_fn")->valuestring, "gelu_new") &&
             !strcmp(cJSON_GetObjectItemCaseSensitive(root, "feed_forward_proj")->valuestring, "gated-gelu") &&
             cJSON_GetObjectItemCaseSensitive(root, "relative_attention_max_distance")->valueint == 128 &&
             cJSON_GetObjectItemCaseSensitive(root, "d_ff")->valueint == 2048;
    test_check(ok, "saved config.json has architectures, model_type, is_encoder_decoder, tie/scale, dense_act_fn, "
                   "is_gated_act");
    test_check(strstr(text, "\"dropout_rate\": 0.1,") && strstr(text, "\"layer_norm_epsilon\": 1e-06,"),
               "saved floats are short (0.1, 1e-06), as Python writes them");
    char *tmp = tmp_path("config.json.tmp");
    test_check(access(tmp, F_OK) != 0, "config save leaves no temp file");
    free(tmp);
    cJSON_Delete(root);
    free(text);
    free(p);
}

typedef struct {
    const char *name, *json, *needle;
} CfgCase;

static void do_load_cfg(const void *arg) {
    T5Config c;
    t5_config_load_json((const char *)arg, &c);
}

#define REQ "\"vocab_size\": 100, \"d_ff\": 32, \"num_layers\": 2, \"num_heads\": 2, \"d_kv\": 4"
static void test_config_errors(void) {
    CfgCase cases[] = {
        {"truncated JSON", "{\"d_model\": 16, \"d_kv\": ", "malformed JSON: unexpected end of file at byte 24"},
        {"malformed JSON", "{\"d_model\": 16, \"d_kv\": x}", "malformed JSON at byte 24 of 26 (near \"x}\")"},
        {"trailing garbage", "{\"d_model\": 16} x", "malformed JSON at byte"},
        {"not an object", "[1, 2]", "JSON object"},
        {"missing d_model", "{" REQ "}", "missing required key \"d_model\""},
        {"d_model a string", "{" REQ ", \"d_model\": \"abc\"}", "key \"d_model\": expected a positive integer"},
        {"d_model negative", "{" REQ ", \"d_model\": -4}", "key \"d_model\""},
        {"d_model 0", "{" REQ ", \"d_model\": 0}", "key \"d_model\""},
        {"d_model 3.5", "{" REQ ", \"d_model\": 3.5}", "found 3.5"},
        {"d_model huge", "{" REQ ", \"d_model\": 1e12}", "key \"d_model\""},
        {"num_decoder_layers 0", "{" REQ ", \"d_model\": 16, \"num_decoder_layers\": 0}", "num_decoder_layers"},
        {"bad feed_forward_proj", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"gated-foo\"}",
         "key \"feed_forward_proj\": expected one of relu"},
        {"feed_forward_proj a number", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": 3}", "feed_forward_proj"},
        {"dropout 1.0", "{" REQ ", \"d_model\": 16, \"dropout_rate\": 1.0}", "key \"dropout_rate\""},
        {"dropout negative", "{" REQ ", \"d_model\": 16, \"dropout_rate\": -0.1}", "key \"dropout_rate\""},
        {"dropout a string", "{" REQ ", \"d_model\": 16, \"dropout_rate\": \"0.1\"}", "key \"dropout_rate\""},
        {"eps 0", "{" REQ ", \"d_model\": 16, \"layer_norm_epsilon\": 0}", "key \"layer_norm_epsilon\""},
        {"tie as string", "{" REQ ", \"d_model\": 16, \"tie_word_embeddings\": \"yes\"}", "tie_word_embeddings"},
        {"dense_act_fn contradiction", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"gated-gelu\", "
                                       "\"dense_act_fn\": \"silu\"}", "key \"dense_act_fn\""},
        {"is_gated_act contradiction", "{" REQ ", \"d_model\": 16, \"feed_forward_proj\": \"relu\", "
                                       "\"is_gated_act\": true}", "key \"is_gated_act\""},
        {"model_type bart", "{" REQ ", \"d_model\": 16, \"model_type\": \"bart\"}", "key \"model_type\""},
        {"pad id beyond vocab", "{" REQ ", \"d_model\": 16, \"pad_token_id\": 100}", "key \"pad_token_id\""},
        {"3 buckets", "{" REQ ", \"d_model\": 16, \"relative_attention_num_buckets\": 3}",
         "relative_attention_num_buckets"},
        {"max_distance too small", "{" REQ ", \"d_model\": 16, \"relative_attention_max_distance\": 16}",
         "relative_attention_max_distance"},
    };
    char *p = tmp_path("bad_config.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(p, cases[i].json);
        char what[80];
        snprintf(what, sizeof what, "config %s", cases[i].name);
        expect_error(what, do_load_cfg, p, cases[i].needle);
    }
    char *missing = tmp_path("no_such_dir/config.json");
    expect_error("config missing file", do_load_cfg, missing, "cannot open config.json (No such file or directory)");
    free(missing);
    free(p);
}

// ---- parameter layout -----------------------------------------------------------------------

static T5Config tiny_config(int gated, int untied) {
    T5Config c;
    t5_config_preset(gated ? "google/flan-t5-small" : "t5-small", &c);
    snprintf(c.name, sizeof c.name, "tiny");
    c.vocab_size = 37;
    c.d_model = 16;
    c.d_kv = 4;
    c.num_heads = 3;  // inner width 12 != d_model
    c.d_ff = 24;
    c.num_layers = 2;
    c.num_decoder_layers = 3;
    c.relative_attention_num_buckets = 8;
    c.relative_attention_max_distance = 20;
    c.untied_lm_head = untied;
    c.tie_word_embeddings = !untied;
    return c;
}

static void test_layout_counts(void) {
    struct {
        const char *name;
        size_t want;
    } c[] = {
        // t5-*: num_parameters() of T5ForConditionalGeneration (tied head); flan: untied.
        {"t5-small", 60506624},         {"t5-base", 222903552},         {"t5-large", 737668096},
        {"t5-3b", 2851598336},          {"t5-11b", 11307321344ull},     {"google/flan-t5-small", 76961152},
        {"google/flan-t5-base", 247577856}, {"google/flan-t5-large", 783150080}, {"google/flan-t5-xl", 2849757184},
        {"google/flan-t5-xxl", 11135332352ull}, {"google/t5-v1_1-small", 76961152},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        T5Config cfg;
        ParamLayout lay;
        t5_config_preset(c[i].name, &cfg);
        params_build_layout(&cfg, &lay);
        char msg[160];
        snprintf(msg, sizeof msg, "%-22s parameters %15zu (want %zu)", c[i].name, lay.total, c[i].want);
        test_check(lay.total == c[i].want, msg);
        params_free_layout(&lay);
    }
}

static void test_layout_order(void) {
    T5Config cfg = tiny_config(1, 1);
    cfg.num_layers = 2;
    cfg.num_decoder_layers = 2;
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    const char *want[] = {
        "shared.weight",
        "encoder.block.0.layer.0.SelfAttention.q.weight",
        "encoder.block.0.layer.0.SelfAttention.k.weight",
        "encoder.block.0.layer.0.SelfAttention.v.weight",
        "encoder.block.0.layer.0.SelfAttention.o.weight",
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "encoder.block.0.layer.0.layer_norm.weight",
        "encoder.block.0.layer.1.DenseReluDense.wi_0.weight",
        "encoder.block.0.layer.1.DenseReluDense.wi_1.weight",
        "encoder.block.0.layer.1.DenseReluDense.wo.weight",
        "encoder.block.0.layer.1.layer_norm.weight",
        "encoder.block.1.layer.0.SelfAttention.q.weight",
        "encoder.block.1.layer.0.SelfAttention.k.weight",
        "encoder.block.1.layer.0.SelfAttention.v.weight",
        "encoder.block.1.layer.0.SelfAttention.o.weight",
        "encoder.block.1.layer.0.layer_norm.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi_0.weight",
        "encoder.block.1.layer.1.DenseReluDense.wi_1.weight",
        "encoder.block.1.layer.1.DenseReluDense.wo.weight",
        "encoder.block.1.layer.1.layer_norm.weight",
        "encoder.final_layer_norm.weight",
        "decoder.block.0.layer.0.SelfAttention.q.weight",
        "decoder.block.0.layer.0.SelfAttention.k.weight",
        "decoder.block.0.layer.0.SelfAttention.v.weight",
        "decoder.block.0.layer.0.SelfAttention.o.weight",
        "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        "decoder.block.0.layer.0.layer_norm.weight",
        "decoder.block.0.layer.1.EncDecAttention.q.weight",
        "decoder.block.0.layer.1.EncDecAttention.k.weight",
        "decoder.block.0.layer.1.EncDecAttention.v.weight",
        "decoder.block.0.layer.1.EncDecAttention.o.weight",
        "decoder.block.0.layer.1.layer_norm.weight",
        "decoder.block.0.layer.2.DenseReluDense.wi_0.weight",
        "decoder.block.0.layer.2.DenseReluDense.wi_1.weight",
        "decoder.block.0.layer.2.DenseReluDense.wo.weight",
        "decoder.block.0.layer.2.layer_norm.weight",
        "decoder.block.1.layer.0.SelfAttention.q.weight",
        "decoder.block.1.layer.0.SelfAttention.k.weight",
        "decoder.block.1.layer.0.SelfAttention.v.weight",
        "decoder.block.1.layer.0.SelfAttention.o.weight",
        "decoder.block.1.layer.0.layer_norm.weight",
        "decoder.block.1.layer.1.EncDecAttention.q.weight",
        "decoder.block.1.layer.1.EncDecAttention.k.weight",
        "decoder.block.1.layer.1.EncDecAttention.v.weight",
        "decoder.block.1.layer.1.EncDecAttention.o.weight",
        "decoder.block.1.layer.1.layer_norm.weight",
        "decoder.block.1.layer.2.DenseReluDense.wi_0.weight",
        "decoder.block.1.layer.2.DenseReluDense.wi_1.weight",
        "decoder.block.1.layer.2.DenseReluDense.wo.weight",
        "decoder.block.1.layer.2.layer_norm.weight",
        "decoder.final_layer_norm.weight",
        "lm_head.weight",
    };
    int n = (int)(sizeof want / sizeof want[0]);
    int ok = lay.count == n;
    for (int i = 0; ok && i < n; i++)
        if (strcmp(lay.specs[i].name, want[i])) {
            printf("       spec %d is %s, want %s\n", i, lay.specs[i].name, want[i]);
            ok = 0;
        }
    test_check(ok, "layout: HF state-dict names in state-dict order (gated, untied, 2+2 blocks)");

    // Shapes, offsets, kinds, no_decay.
    size_t off = 0;
    int contiguous = 1, shapes = 1, decay = 1;
    int64_t D = cfg.d_model, I = (int64_t)cfg.num_heads * cfg.d_kv, F = cfg.d_ff, V = cfg.vocab_size;
    for (int i = 0; i < lay.count; i++) {
        const ParamSpec *s = &lay.specs[i];
        contiguous &= s->offset == off && s->numel == (size_t)s->shape[0] * (size_t)(s->ndim == 2 ? s->shape[1] : 1);
        off += s->numel;
        const char *leaf = strrchr(s->name, '.');
        while (leaf > s->name && leaf[-1] != '.') leaf--;
        int64_t e0 = -1, e1 = -1;
        if (!strncmp(leaf, "q.", 2) || !strncmp(leaf, "k.", 2) || !strncmp(leaf, "v.", 2)) e0 = I, e1 = D;
        else if (!strncmp(leaf, "o.", 2)) e0 = D, e1 = I;
        else if (!strncmp(leaf, "wi", 2)) e0 = F, e1 = D;
        else if (!strncmp(leaf, "wo.", 3)) e0 = D, e1 = F;
        else if (!strncmp(leaf, "relative_attention_bias.", 24)) e0 = cfg.relative_attention_num_buckets, e1 = cfg.num_heads;
        else if (strstr(s->name, "layer_norm")) e0 = D, e1 = 0;
        else e0 = V, e1 = D;  // shared, lm_head
        shapes &= s->shape[0] == e0 && (e1 ? s->ndim == 2 && s->shape[1] == e1 : s->ndim == 1);
        int want_no_decay = strstr(s->name, "layer_norm") || strstr(s->name, "bias");
        decay &= s->no_decay == want_no_decay;
        ParamKind k = strstr(s->name, "layer_norm") ? PARAM_NORM
                      : strstr(s->name, "relative_attention_bias") ? PARAM_RELBIAS
                      : !strcmp(s->name, "shared.weight") ? PARAM_EMBEDDING
                                                           : PARAM_LINEAR;
        decay &= s->kind == k;
    }
    test_check(contiguous && off == lay.total, "layout: offsets contiguous from 0, total = sum of numel");
    test_check(shapes, "layout: q,k,v (H*dk, D), o (D, H*dk), wi* (F, D), wo (D, F), relbias (buckets, H), norms (D)");
    test_check(decay, "layout: no_decay on norms and relative_attention_bias (HF Trainer's \"bias\" name rule), kinds");
    int offs = lay.shared == lay.specs[params_find(&lay, "shared.weight")].offset &&
               lay.lm_head == lay.specs[params_find(&lay, "lm_head.weight")].offset &&
               lay.enc[1].self.k == lay.specs[params_find(&lay, "encoder.block.1.layer.0.SelfAttention.k.weight")].offset &&
               lay.enc[0].self.has_relbias && !lay.enc[1].self.has_relbias &&
               lay.enc[0].self.relbias ==
                   lay.specs[params_find(&lay, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")].offset &&
               lay.dec[1].cross.o == lay.specs[params_find(&lay, "decoder.block.1.layer.1.EncDecAttention.o.weight")].offset &&
               !lay.dec[0].cross.has_relbias && lay.dec[0].self.has_relbias &&
               lay.dec[1].ffn.wi_1 == lay.specs[params_find(&lay, "decoder.block.1.layer.2.DenseReluDense.wi_1.weight")].offset &&
               lay.dec[1].cross.ln == lay.specs[params_find(&lay, "decoder.block.1.layer.1.layer_norm.weight")].offset &&
               lay.enc_final_ln == lay.specs[params_find(&lay, "encoder.final_layer_norm.weight")].offset &&
               lay.dec_final_ln == lay.specs[params_find(&lay, "decoder.final_layer_norm.weight")].offset &&
               params_find(&lay, "nope") == -1;
    test_check(offs, "layout: block offset tables agree with the name table; params_find");
    params_free_layout(&lay);

    cfg = tiny_config(0, 0);
    params_build_layout(&cfg, &lay);
    test_check(params_find(&lay, "lm_head.weight") == -1 && lay.lm_head == lay.shared &&
                   params_find(&lay, "encoder.block.0.layer.1.DenseReluDense.wi.weight") >= 0 &&
                   params_find(&lay, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight") == -1 &&
                   !strcmp(lay.specs[lay.count - 1].name, "decoder.final_layer_norm.weight"),
               "layout (relu, tied): wi instead of wi_0/wi_1, no lm_head.weight, lm_head offset = shared");
    params_free_layout(&lay);
}

static void test_init(void) {
    T5Config cfg;
    t5_config_preset("google/flan-t5-small", &cfg);
    cfg.vocab_size = 1000;
    cfg.d_model = 256;
    cfg.d_kv = 32;
    cfg.num_heads = 8;
    cfg.d_ff = 1024;
    cfg.num_layers = 1;
    cfg.num_decoder_layers = 1;
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    float *p1 = mallocCheck(lay.total * sizeof(float)), *p2 = mallocCheck(lay.total * sizeof(float));
    params_init_random(&cfg, &lay, p1, 1234);
    params_init_random(&cfg, &lay, p2, 1234);
    test_check(memcmp(p1, p2, lay.total * sizeof(float)) == 0, "init: same seed, same values");
    params_init_random(&cfg, &lay, p2, 1235);
    size_t same = 0;
    for (size_t i = 0; i < lay.total; i++) same += p1[i] == p2[i];
    size_t norms = 0;
    for (int i = 0; i < lay.count; i++) norms += lay.specs[i].kind == PARAM_NORM ? lay.specs[i].numel : 0;
    test_check(same == norms, "init: another seed changes every random value (norms stay 1)");

    double D = cfg.d_model, dk = cfg.d_kv, H = cfg.num_heads, F = cfg.d_ff;
    int ok = 1;
    for (int i = 0; i < lay.count; i++) {
        const ParamSpec *s = &lay.specs[i];
        const float *x = p1 + s->offset;
        const char *nm = s->name;
        double want;
        if (s->kind == PARAM_NORM) {
            for (size_t j = 0; j < s->numel; j++) ok &= x[j] == 1.0f;
            continue;
        }
        if (strstr(nm, ".q.")) want = 1 / sqrt(D * dk);
        else if (strstr(nm, ".k.") || strstr(nm, ".v.")) want = 1 / sqrt(D);
        else if (strstr(nm, ".o.")) want = 1 / sqrt(H * dk);
        else if (strstr(nm, "relative_attention_bias")) want = 1 / sqrt(D);
        else if (strstr(nm, ".wi")) want = 1 / sqrt(D);
        else if (strstr(nm, ".wo.")) want = 1 / sqrt(F);
        else want = 1.0;  // shared, lm_head
        double sum = 0, sq = 0;
        for (size_t j = 0; j < s->numel; j++) sum += x[j], sq += (double)x[j] * x[j];
        double mean = sum / s->numel, sd = sqrt(sq / s->numel - mean * mean);
        double tol = 5.0 / sqrt((double)s->numel);  // ~5 sigma of the sample std's relative error
        if (fabs(sd / want - 1) > tol + 0.01 || fabs(mean) > 5 * want / sqrt((double)s->numel)) {
            printf("       %s: std %.5f want %.5f, mean %.5f\n", nm, sd, want, mean);
            ok = 0;
        }
    }
    test_check(ok, "init: per-tensor mean ~0 and std as HF _init_weights (q (D*dk)^-.5, k/v/wi/relbias D^-.5, "
                   "o (H*dk)^-.5, wo F^-.5, shared/lm_head 1, norms 1)");
    cfg.initializer_factor = 2.0f;
    params_init_random(&cfg, &lay, p2, 1234);
    int scaled = 1;
    for (size_t i = 0; i < lay.total; i++) scaled &= p2[i] == 2.0f * p1[i];
    test_check(scaled, "init: initializer_factor 2 doubles every value (norms = 2)");
    free(p1);
    free(p2);
    params_free_layout(&lay);
}

// ---- Hugging Face directories ------------------------------------------------------------------

static float *random_params(const T5Config *cfg, const ParamLayout *lay, uint64_t seed) {
    float *p = mallocCheck(lay->total * sizeof(float));
    params_init_random(cfg, lay, p, seed);
    // Norm weights are all 1 after init; make them distinct so a mix-up would show.
    for (int i = 0; i < lay->count; i++)
        if (lay->specs[i].kind == PARAM_NORM)
            for (size_t j = 0; j < lay->specs[i].numel; j++) p[lay->specs[i].offset + j] = 1.0f + 0.01f * (float)(i + j);
    return p;
}

static float round_to(StDtype d, float x) {
    return d == ST_F16 ? st_f16_to_f32(st_f32_to_f16(x)) : d == ST_BF16 ? st_bf16_to_f32(st_f32_to_bf16(x)) : x;
}

static void test_hf_roundtrip(void) {
    for (int untied = 0; untied <= 1; untied++) {
        for (int di = 0; di < 3; di++) {
            StDtype dt = (StDtype[]){ST_F32, ST_F16, ST_BF16}[di];
            T5Config cfg = tiny_config(untied, untied);
            ParamLayout lay;
            params_build_layout(&cfg, &lay);
            float *p = random_params(&cfg, &lay, 7 + (uint64_t)di);
            char name[64];
            snprintf(name, sizeof name, "model_%s_%s", untied ? "untied" : "tied", st_dtype_name(dt));
            char *dir = tmp_path(name);
            char *sub = path_join(dir, "nested/dir");  // mkdir -p
            hf_save_model(sub, &cfg, &lay, p, dt);

            T5Config back;
            int has_weights = hf_resolve_model(sub, &back);
            back.untied_lm_head = hf_probe_untied(sub);
            ParamLayout lay2;
            params_build_layout(&back, &lay2);
            float *q = mallocCheck(lay2.total * sizeof(float));
            hf_load_weights(sub, &back, &lay2, q);
            int ok = has_weights == 1 && back.untied_lm_head == untied && lay2.total == lay.total;
            T5Config cmp = back;
            snprintf(cmp.name, sizeof cmp.name, "tiny");
            ok &= same_config(&cmp, &cfg);
            for (size_t i = 0; ok && i < lay.total; i++) ok &= fbits(q[i]) == fbits(round_to(dt, p[i]));
            char msg[160];
            snprintf(msg, sizeof msg, "hf_save_model + hf_load_weights %s %s: config equal, probe %d, values %s",
                     untied ? "untied" : "tied", st_dtype_name(dt), back.untied_lm_head,
                     dt == ST_F32 ? "bit-exact" : "= rounded originals");
            test_check(ok, msg);

            if (di == 0) {  // the file holds exactly the layout's tensors, in layout order
                char *stp = path_join(sub, "model.safetensors");
                StFile st;
                st_open(&st, stp);
                int order = st.count == lay.count;
                for (int i = 0; order && i < st.count; i++)
                    order &= !strcmp(st.tensors[i].name, lay.specs[i].name) &&
                             (i == 0 || st.tensors[i].begin == st.tensors[i - 1].end);
                test_check(order && (st_find(&st, "lm_head.weight") != NULL) == untied &&
                               !st_find(&st, "encoder.embed_tokens.weight"),
                           untied ? "saved file: layout order, shared.weight + lm_head.weight, no embed_tokens"
                                  : "saved file: layout order, only shared.weight for the tied embedding");
                st_close(&st);
                free(stp);
            }
            params_free_layout(&lay2);
            params_free_layout(&lay);
            free(q);
            free(p);
            free(sub);
            free(dir);
        }
    }
}

// Write dir/model.safetensors (or a shard) with the layout's tensors renamed/dropped/added.
typedef struct {
    const char *rename_from, *rename_to;  // a layout tensor stored under another name
    const char *drop;                     // a layout tensor left out
    const char *extra_name;               // an extra tensor, copy of shared.weight
    int64_t extra_shape[2];               // shape of the extra (0: same as shared)
    StDtype extra_dtype;
    const char *reshape;                  // a layout tensor stored with a wrong shape (numel kept)
    int lm_head_differs;                  // extra lm_head.weight perturbed
} Variant;

static void write_variant(const char *dir, const T5Config *cfg, const ParamLayout *lay, const float *p,
                          const Variant *v) {
    mkdir(dir, 0755);
    char *cp = path_join(dir, "config.json");
    t5_config_save_json(cfg, cp);
    free(cp);
    StTensorDesc *d = callocCheck((size_t)lay->count + 1, sizeof *d);
    const float **src = callocCheck((size_t)lay->count + 1, sizeof *src);
    uint64_t *n = callocCheck((size_t)lay->count + 1, sizeof *n);
    int k = 0;
    const ParamSpec *shared = &lay->specs[params_find(lay, "shared.weight")];
    for (int i = 0; i < lay->count; i++) {
        const ParamSpec *s = &lay->specs[i];
        if (v->drop && !strcmp(v->drop, s->name)) continue;
        d[k].name = (v->rename_from && !strcmp(v->rename_from, s->name)) ? v->rename_to : s->name;
        d[k].dtype = ST_F32;
        d[k].ndim = s->ndim;
        d[k].shape[0] = s->shape[0];
        d[k].shape[1] = s->shape[1];
        if (v->reshape && !strcmp(v->reshape, s->name)) {
            d[k].shape[0] = s->shape[1];
            d[k].shape[1] = s->shape[0];
        }
        src[k] = p + s->offset;
        n[k++] = s->numel;
    }
    float *pert = NULL;
    if (v->extra_name) {
        d[k].name = v->extra_name;
        d[k].dtype = v->extra_dtype;
        d[k].ndim = 2;
        d[k].shape[0] = v->extra_shape[0] ? v->extra_shape[0] : shared->shape[0];
        d[k].shape[1] = v->extra_shape[1] ? v->extra_shape[1] : shared->shape[1];
        n[k] = (uint64_t)d[k].shape[0] * (uint64_t)d[k].shape[1];
        pert = mallocCheck(n[k] * sizeof(float));
        for (uint64_t j = 0; j < n[k]; j++) pert[j] = j < shared->numel ? p[shared->offset + j] : 0.5f;
        if (v->lm_head_differs) pert[3] += 1.0f;
        src[k++] = pert;
    }
    char *sp = path_join(dir, "model.safetensors");
    StWriter w;
    st_writer_open(&w, sp, d, k, "{\"format\":\"pt\"}");
    for (int i = 0; i < k; i++) {
        if (d[i].dtype == ST_I64) {
            int32_t *ints = callocCheck(n[i], sizeof *ints);
            st_writer_write_i32(&w, ints, n[i]);
            free(ints);
        } else {
            st_writer_write_f32(&w, src[i], n[i]);
        }
    }
    st_writer_close(&w);
    free(sp);
    free(pert);
    free(d);
    free(src);
    free(n);
}

static int load_equals(const char *dir, const T5Config *cfg, const float *want, int *probe_out) {
    T5Config c;
    hf_resolve_model(dir, &c);
    c.untied_lm_head = hf_probe_untied(dir);
    if (probe_out) *probe_out = c.untied_lm_head;
    ParamLayout lay;
    params_build_layout(&c, &lay);
    float *q = mallocCheck(lay.total * sizeof(float));
    hf_load_weights(dir, &c, &lay, q);
    int ok = memcmp(q, want, lay.total * sizeof(float)) == 0;
    free(q);
    params_free_layout(&lay);
    return ok;
}

typedef struct {
    const char *dir;
    int untied;
} LoadArg;

static void do_load_dir(const void *arg) {
    const LoadArg *a = arg;
    T5Config c;
    hf_resolve_model(a->dir, &c);
    c.untied_lm_head = a->untied >= 0 ? a->untied : hf_probe_untied(a->dir);
    ParamLayout lay;
    params_build_layout(&c, &lay);
    float *q = mallocCheck(lay.total * sizeof(float));
    hf_load_weights(a->dir, &c, &lay, q);
}

static void do_resolve(const void *arg) {
    T5Config c;
    hf_resolve_model((const char *)arg, &c);
}

static void test_hf_variants(void) {
    T5Config cfg = tiny_config(0, 0);  // tied relu
    ParamLayout lay;
    params_build_layout(&cfg, &lay);
    float *p = random_params(&cfg, &lay, 99);
    int probe;
    char *dir;

    dir = tmp_path("v_alias_enc");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.rename_from = "shared.weight", .rename_to = "encoder.embed_tokens.weight",
                             .extra_name = "decoder.embed_tokens.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "shared.weight stored as encoder.embed_tokens.weight (+ decoder alias): loads, tied");
    free(dir);

    dir = tmp_path("v_alias_dec");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.rename_from = "shared.weight", .rename_to = "decoder.embed_tokens.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0, "shared.weight stored as decoder.embed_tokens.weight");
    free(dir);

    dir = tmp_path("v_lm_equal");
    write_variant(dir, &cfg, &lay, p, &(Variant){.extra_name = "lm_head.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "tied checkpoint with an lm_head.weight equal to shared.weight: probe says tied, loads");
    free(dir);

    dir = tmp_path("v_lm_only");
    write_variant(dir, &cfg, &lay, p, &(Variant){.rename_from = "shared.weight", .rename_to = "lm_head.weight"});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "lm_head.weight as the only copy of the embedding: tied, shared.weight read from it");
    free(dir);

    dir = tmp_path("v_stray");
    write_variant(dir, &cfg, &lay, p,
                  &(Variant){.extra_name = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
                             .extra_shape = {8, 3}});
    test_check(load_equals(dir, &cfg, p, &probe) && probe == 0,
               "the dead EncDecAttention.relative_attention_bias of original t5 checkpoints is ignored");
    free(dir);

    // Sharded: split the saved model into two shards + index.
    {
        dir = tmp_path("v_sharded");
        mkdir(dir, 0755);
        char *cp = path_join(dir, "config.json");
        t5_config_save_json(&cfg, cp);
        free(cp);
        int half = lay.count / 2;
        StTensorDesc *d = callocCheck((size_t)lay.count, sizeof *d);
        for (int i = 0; i < lay.count; i++) {
            d[i].name = lay.specs[i].name;
            d[i].dtype = ST_BF16;
            d[i].ndim = lay.specs[i].ndim;
            d[i].shape[0] = lay.specs[i].shape[0];
            d[i].shape[1] = lay.specs[i].shape[1];
        }
        const char *shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
        size_t cap = 65536, len = 0;
        char *index = mallocCheck(cap);
        len += (size_t)snprintf(index + len, cap - len, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (int s = 0; s < 2; s++) {
            int lo = s ? half : 0, hi = s ? lay.count : half;
            char *sp = path_join(dir, shard_names[s]);
            StWriter w;
            st_writer_open(&w, sp, d + lo, hi - lo, "{\"format\":\"pt\"}");
            for (int i = lo; i < hi; i++) {
                st_writer_write_f32(&w, p + lay.specs[i].offset, lay.specs[i].numel);
                len += (size_t)snprintf(index + len, cap - len, "%s\"%s\": \"%s\"", i ? ", " : "", lay.specs[i].name,
                                        shard_names[s]);
            }
            st_writer_close(&w);
            free(sp);
        }
        len += (size_t)snprintf(index + len, cap - len, "}}");
        char *ip = path_join(dir, "model.safetensors.index.json");
        write_text(ip, index);
        float *want = mallocCheck(lay.total * sizeof(float));
        for (size_t i = 0; i < lay.total; i++) want[i] = round_to(ST_BF16, p[i]);
        test_check(load_equals(dir, &cfg, want, &probe) && probe == 0,
                   "sharded checkpoint (index.json + 2 BF16 shards) loads");
        // Index naming a shard that is missing.
        char *bad = strstr(index, "model-00002-of-00002");
        memcpy(bad, "model-00009", 11);
        write_text(ip, index);
        expect_error("index names a missing shard", do_load_dir, &(LoadArg){dir, -1}, "model-00009-of-00002");
        free(want);
        free(ip);
        free(index);
        free(d);
        free(dir);
    }

    // Errors.
    struct {
        const char *what;
        Variant v;
        int untied;  // -1: probe
        const char *needle;
    } errs[] = {
        {"missing tensor", {.drop = "decoder.block.1.layer.0.SelfAttention.q.weight"}, -1,
         "missing tensor \"decoder.block.1.layer.0.SelfAttention.q.weight\" (expected shape [12, 16])"},
        {"missing shared.weight", {.drop = "shared.weight"}, -1, "missing tensor \"shared.weight\" (expected shape [37, 16])"},
        {"shape mismatch", {.reshape = "encoder.block.0.layer.1.DenseReluDense.wi.weight"}, -1,
         "tensor \"encoder.block.0.layer.1.DenseReluDense.wi.weight\": expected shape [24, 16], found [16, 24]"},
        {"unknown tensor", {.extra_name = "model.encoder.layers.0.fc1.weight"}, -1,
         "unexpected tensor \"model.encoder.layers.0.fc1.weight\""},
        {"alias with a wrong shape", {.extra_name = "encoder.embed_tokens.weight", .extra_shape = {38, 16}}, -1,
         "expected shape [37, 16], found [38, 16]"},
        {"integer tensor", {.rename_from = "shared.weight", .rename_to = "x", .extra_name = "shared.weight",
                            .extra_dtype = ST_I64}, -1, "dtype I64"},
        {"untied head but tied layout", {.extra_name = "lm_head.weight", .lm_head_differs = 1}, 0,
         "untied lm_head.weight"},
        {"untied layout, no lm_head", {0}, 1, "missing tensor \"lm_head.weight\""},
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "v_err%zu", i);
        dir = tmp_path(name);
        write_variant(dir, &cfg, &lay, p, &errs[i].v);
        char what[80];
        snprintf(what, sizeof what, "load: %s", errs[i].what);
        expect_error(what, do_load_dir, &(LoadArg){dir, errs[i].untied}, errs[i].needle);
        free(dir);
    }
    // Probe sees an untied head when lm_head.weight differs.
    dir = tmp_path("v_err6");
    test_check(hf_probe_untied(dir) == 1, "hf_probe_untied: an lm_head.weight that differs from shared means untied");
    free(dir);

    // No weights file, .bin only, no config, bad --model.
    dir = tmp_path("v_noweights");
    mkdir(dir, 0755);
    char *cp = path_join(dir, "config.json");
    t5_config_save_json(&cfg, cp);
    expect_error("load: no model.safetensors", do_load_dir, &(LoadArg){dir, 0}, "model.safetensors: cannot open");
    char *bin = path_join(dir, "pytorch_model.bin");
    write_text(bin, "x");
    expect_error("load: only pytorch_model.bin", do_load_dir, &(LoadArg){dir, 0}, "PyTorch .bin");
    unlink(cp);
    expect_error("resolve: directory without config.json", do_resolve, dir, "config.json");
    free(bin);
    free(cp);
    free(dir);
    expect_error("resolve: unknown preset", do_resolve, "t5-tiny",
                 "--model \"t5-tiny\": not a directory with config.json and not a preset (known presets: t5-small");
    T5Config pc;
    test_check(hf_resolve_model("google-t5/t5-base", &pc) == 0 && pc.d_model == 768,
               "hf_resolve_model: a preset name gives its config and 0 (no weights)");
    free(p);
    params_free_layout(&lay);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/t5_test_io_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    test_half_conversions();
    test_safetensors_roundtrip();
    test_safetensors_errors();
    test_presets();
    test_parse_ffn();
    test_config_json();
    test_config_errors();
    test_layout_counts();
    test_layout_order();
    test_init();
    test_hf_roundtrip();
    test_hf_variants();
    rm_rf(g_tmp);
    return test_summary();
}
