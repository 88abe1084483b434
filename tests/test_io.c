// tests/test_io.c: fp16/bf16 rounding and safetensors write/read (and its validation
// errors), without a GPU. Presets, config.json and the parameter layout are in
// tests/test_config.c; Hugging Face model directories in tests/test_hf_dir.c.
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
#include "../formats/safetensors.h"
#include "test.h"
#include "test_io_util.h"


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

// Every 16-bit pattern through f32 and back.
static void test_half_identity(void) {
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

}

// f32 -> f16 rounding: ties, overflow, subnormals, NaN.
static void test_f16_cases(void) {
    char msg[128];
    int bad;
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
}

// f32 -> bf16 rounding: ties, overflow, subnormals, NaN.
static void test_bf16_cases(void) {
    char msg[128];
    int bad;
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
}

// Random bit patterns against independent references.
static void test_half_random(void) {
    char msg[128];
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


static void test_half_conversions(void) {
    test_half_identity();
    test_f16_cases();
    test_bf16_cases();
    test_half_random();
}

// ---- safetensors ----------------------------------------------------------------------------

// Raw layout of the file written by test_safetensors_roundtrip (data: bytes of tensor data):
// 8-byte little-endian length, header padded with spaces to 8 bytes.
static void check_raw_layout(const char *path, uint64_t data) {
    size_t flen;
    char *raw = read_text_file(path, &flen);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)raw[i];
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
}

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

    check_raw_layout(path, 12 * 4 + 12 * 2 + 6 * 2 + 4 * 8 + 4 * 4 + 4 + 0 + (uint64_t)BIG * 2 + 2);

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


int main(void) {
    if (!io_tmp_begin("test_io")) return 2;
    test_half_conversions();
    test_safetensors_roundtrip();
    test_safetensors_errors();
    rm_rf(g_tmp);
    return test_summary();
}
