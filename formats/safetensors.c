// formats/safetensors.c: safetensors reader (full header validation, chunked reads with
// dtype conversion) and streaming writer (see safetensors.h).
//
// Validation follows the reference implementation (huggingface/safetensors, Rust
// `Metadata::validate`): header length at most 100 MB and inside the file; the header a
// JSON object; byte ranges sorted, starting at 0, contiguous, each exactly
// numel * itemsize; the ranges together cover the whole data section, no more, no less.
//
// Big-endian hosts are not supported: tensor bytes are little-endian in the file and are
// copied as they are (the 8-byte header length is decoded portably, nothing else is).
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/crc32c.h"
#include "../common/file_open.h"
#include "../common/json_read.h"
#include "../common/half.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "formats/safetensors.c: big-endian hosts are not supported (safetensors data is little-endian)"
#endif

#define ST_MAX_HEADER (100u * 1000u * 1000u)  // the reference implementation's MAX_HEADER_SIZE
#define ST_CHUNK_BYTES (1u << 20)             // conversion buffer: 1 MiB

static const char *const DTYPE_NAMES[] = {"F32", "F16", "BF16", "I64", "I32"};
static const int DTYPE_SIZES[] = {4, 2, 2, 8, 4};

const char *st_dtype_name(StDtype d) { return (unsigned)d < 5 ? DTYPE_NAMES[d] : "?"; }
int st_dtype_size(StDtype d) { return (unsigned)d < 5 ? DTYPE_SIZES[d] : 0; }
static int is_float_dtype(StDtype d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16; }

// ---- fp16 / bf16: common/half.h ------------------------------------------------------

float st_f16_to_f32(uint16_t h) { return half_f16_to_f32(h); }
uint16_t st_f32_to_f16(float f) { return half_f32_to_f16(f); }
float st_bf16_to_f32(uint16_t h) { return half_bf16_to_f32(h); }
uint16_t st_f32_to_bf16(float f) { return half_f32_to_bf16(f); }

// ---- reader ---------------------------------------------------------------------------

static int parse_dtype(const char *s, StDtype *d) {
    for (int i = 0; i < 5; i++)
        if (strcmp(s, DTYPE_NAMES[i]) == 0) {
            *d = (StDtype)i;
            return 1;
        }
    return 0;
}

// Non-negative integer JSON number below 2^53 (exact in a double).
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static void short_text(const cJSON *v, char *out, size_t cap) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(out, cap, "%s", s ? s : "(nothing)");
    if (strlen(out) > 40) memcpy(out + 37, "...", 4);
    free(s);
}

static int cmp_range(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

static void parse_tensor(const char *path, const cJSON *e, StTensor *t) {
    char found[64];
    if (!cJSON_IsObject(e)) {
        short_text(e, found, sizeof found);
        t5_fail("%s: tensor \"%s\": expected an object {dtype, shape, data_offsets}, found %s", path, t->name, found);
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt)) {
        short_text(dt, found, sizeof found);
        t5_fail("%s: tensor \"%s\": \"dtype\" must be a string, found %s", path, t->name, found);
    }
    if (!parse_dtype(dt->valuestring, &t->dtype))
        t5_fail("%s: tensor \"%s\": dtype \"%.16s\" is not supported (supported: F32, F16, BF16, I64, I32)", path,
                t->name, dt->valuestring);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS) {
        short_text(sh, found, sizeof found);
        t5_fail("%s: tensor \"%s\": \"shape\" must be an array of at most %d non-negative integers, found %s", path,
                t->name, ST_MAX_DIMS, found);
    }
    t->ndim = 0;
    t->numel = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (!json_u64(d, &v)) {
            short_text(sh, found, sizeof found);
            t5_fail("%s: tensor \"%s\": \"shape\" must hold non-negative integers, found %s", path, t->name, found);
        }
        t->shape[t->ndim++] = (int64_t)v;
        if (__builtin_mul_overflow(t->numel, v, &t->numel))
            t5_fail("%s: tensor \"%s\": shape is too large (element count overflows)", path, t->name);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(t->numel, (uint64_t)st_dtype_size(t->dtype), &bytes))
        t5_fail("%s: tensor \"%s\": shape is too large (byte count overflows)", path, t->name);
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_u64(cJSON_GetArrayItem(off, 0), &t->begin) ||
        !json_u64(cJSON_GetArrayItem(off, 1), &t->end) || t->end < t->begin) {
        short_text(off, found, sizeof found);
        t5_fail("%s: tensor \"%s\": \"data_offsets\" must be [begin, end] with 0 <= begin <= end, found %s", path,
                t->name, found);
    }
    if (t->end - t->begin != bytes)
        t5_fail("%s: tensor \"%s\": data_offsets [%llu, %llu] span %llu bytes, but a %s tensor of %llu elements needs "
                "%llu",
                path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)(t->end - t->begin), st_dtype_name(t->dtype), (unsigned long long)t->numel,
                (unsigned long long)bytes);
}

// The tensor entries of the parsed header (all but "__metadata__") into st->tensors.
static void st_read_entries(StFile *st, const char *path, const cJSON *root) {
    int count = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            const cJSON *m;
            if (!cJSON_IsObject(e)) t5_fail("%s: \"__metadata__\" must be an object of strings", path);
            cJSON_ArrayForEach(m, e) if (!cJSON_IsString(m))
                t5_fail("%s: \"__metadata__\" key \"%s\" must be a string", path, m->string);
            cJSON_Delete(st->metadata);  // kept for st_metadata (a second "__metadata__": the last, as Python's json)
            st->metadata = cJSON_Duplicate(e, 1);
            continue;
        }
        count++;
    }
    st->tensors = callocCheck((size_t)count, sizeof *st->tensors);
    int k = 0;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        StTensor *t = &st->tensors[k++];
        t->name = strdup(e->string);
        if (!t->name) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
        st->count = k;
        parse_tensor(path, e, t);
    }

}

// Names unique; ranges sorted, from 0, contiguous, covering the data section (data_size
// bytes) exactly.
static void st_check_ranges(const StFile *st, const char *path, uint64_t data_size) {
    int count = st->count;
    StTensor **order = callocCheck((size_t)count, sizeof *order);
    for (int i = 0; i < count; i++) order[i] = (StTensor *)&st->tensors[i];
    qsort(order, (size_t)count, sizeof *order, cmp_name);
    for (int i = 1; i < count; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            t5_fail("%s: tensor \"%s\" appears twice in the header", path, order[i]->name);
    qsort(order, (size_t)count, sizeof *order, cmp_range);
    uint64_t expect = 0;
    for (int i = 0; i < count; i++) {
        const StTensor *t = order[i];
        if (t->begin != expect)
            t5_fail("%s: tensor \"%s\": data_offsets [%llu, %llu] %s the previous tensor's end (%llu): ranges must "
                    "be contiguous and non-overlapping",
                    path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    t->begin < expect ? "overlap" : "leave a gap after", (unsigned long long)expect);
        expect = t->end;
    }
    if (expect != data_size)
        t5_fail("%s: the header describes %llu bytes of tensor data but the file holds %llu: %s", path,
                (unsigned long long)expect, (unsigned long long)data_size,
                expect > data_size ? "file truncated" : "trailing bytes after the last tensor");
    freeCheck(order);
}

void st_open(StFile *st, const char *path) {
    memset(st, 0, sizeof *st);
    FILE *f = file_open_regular(path, "rb", NULL);  // a FIFO or device: one line, never a wait
    if (!f) t5_fail("%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) t5_fail("%s: cannot stat (%s)", path, strerror(errno));
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8)
        t5_fail("%s: file is %llu bytes, too short for a safetensors file (8-byte header length, then a JSON header)",
                path, (unsigned long long)fsize);
    unsigned char lenbuf[8];
    if (fread(lenbuf, 1, 8, f) != 8) t5_fail("%s: cannot read the header length (%s)", path, strerror(errno));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lenbuf[i];
    if (n > ST_MAX_HEADER)
        t5_fail("%s: header length %llu is above the 100 MB limit: not a safetensors file", path,
                (unsigned long long)n);
    if (n > fsize - 8)
        t5_fail("%s: header length %llu runs past the end of the file (%llu bytes): truncated or not a safetensors file",
                path, (unsigned long long)n, (unsigned long long)fsize);
    if (n < 2) t5_fail("%s: header length %llu is too small for a JSON object", path, (unsigned long long)n);
    char *hdr = mallocCheck(n + 1);
    if (fread(hdr, 1, n, f) != n) t5_fail("%s: cannot read the %llu-byte header", path, (unsigned long long)n);
    hdr[n] = '\0';
    if (memchr(hdr, '\0', n)) t5_fail("%s: header contains a NUL byte: not a safetensors file", path);
    // the Rust library refuses a duplicate key (serde), and a name holding \u0000 would load as
    // its prefix here: both refused (common/json_read.h)
    size_t at = n;
    cJSON *root = json_read_parse(hdr, n, path, JSON_DUP_REFUSE, &at);
    if (!root) {
        t5_fail("%s: header is not valid JSON (error at byte %zu of the %llu-byte header)", path, at,
                (unsigned long long)n);
    }
    if (!cJSON_IsObject(root)) t5_fail("%s: header is JSON but not an object: not a safetensors file", path);
    st_read_entries(st, path, root);
    st_check_ranges(st, path, fsize - 8 - n);
    cJSON_Delete(root);
    freeCheck(hdr);
    st->path = strdup(path);
    if (!st->path) t5_die(__FILE__, __LINE__, "out of host memory", NULL);
    st->f = f;
    st->data_start = 8 + n;
}

void st_close(StFile *st) {
    if (st->f) fclose(st->f);
    for (int i = 0; i < st->count; i++) free(st->tensors[i].name);
    freeCheck(st->tensors);
    free(st->path);
    cJSON_Delete(st->metadata);
    memset(st, 0, sizeof *st);
}

const StTensor *st_find(const StFile *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char *st_metadata(const StFile *st, const char *key) {
    const cJSON *v = st->metadata ? cJSON_GetObjectItemCaseSensitive(st->metadata, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void seek_tensor(const StFile *st, const StTensor *t) {
    if (fseeko(st->f, (off_t)(st->data_start + t->begin), SEEK_SET) != 0)
        t5_fail("%s: cannot seek to tensor \"%s\" (%s)", st->path, t->name, strerror(errno));
}

static void read_bytes(const StFile *st, const StTensor *t, void *dst, size_t bytes) {
    if (fread(dst, 1, bytes, st->f) != bytes)
        t5_fail("%s: short read in tensor \"%s\" (%s): the file changed or is truncated", st->path, t->name,
                ferror(st->f) ? strerror(errno) : "end of file");
}

// A 4-byte tensor stored as it is wanted (F32 -> float, I32 -> int32): chunked copy.
static void read_raw32(const StFile *st, const StTensor *t, void *dst) {
    char *out = dst;
    for (uint64_t i = 0; i < t->numel;) {
        uint64_t n = t->numel - i < ST_CHUNK_BYTES / 4 ? t->numel - i : ST_CHUNK_BYTES / 4;
        read_bytes(st, t, out + i * 4, (size_t)n * 4);
        i += n;
    }
}

void st_read_f32(const StFile *st, const StTensor *t, float *dst) { st_read_f32_range(st, t, 0, t->numel, dst); }

void st_read_f32_range(const StFile *st, const StTensor *t, uint64_t first, uint64_t count, float *dst) {
    if (!is_float_dtype(t->dtype))
        t5_fail("%s: tensor \"%s\" has dtype %s, expected a float tensor (F32, F16 or BF16)", st->path, t->name,
                st_dtype_name(t->dtype));
    if (first > t->numel || count > t->numel - first)
        t5_fail("%s: tensor \"%s\": elements [%llu, %llu) asked for, it has %llu; HINT: the checkpoint's index and "
                "its files disagree: resume from an earlier checkpoint", st->path, t->name, (unsigned long long)first,
                (unsigned long long)(first + count), (unsigned long long)t->numel);
    uint64_t isz = (uint64_t)st_dtype_size(t->dtype);
    if (fseeko(st->f, (off_t)(st->data_start + t->begin + first * isz), SEEK_SET) != 0)
        t5_fail("%s: cannot seek in tensor \"%s\" (%s)", st->path, t->name, strerror(errno));
    if (t->dtype == ST_F32) {  // the bytes are the floats: read in place, in chunks
        for (uint64_t i = 0; i < count;) {
            uint64_t n = count - i < ST_CHUNK_BYTES / 4 ? count - i : ST_CHUNK_BYTES / 4;
            read_bytes(st, t, dst + i, (size_t)n * 4);
            i += n;
        }
        return;
    }
    uint64_t per = ST_CHUNK_BYTES / 2;
    uint16_t *buf = mallocCheck((size_t)(count < per ? count : per) * 2);
    for (uint64_t i = 0; i < count;) {
        uint64_t n = count - i < per ? count - i : per;
        read_bytes(st, t, buf, (size_t)n * 2);
        if (t->dtype == ST_F16)
            for (uint64_t j = 0; j < n; j++) dst[i + j] = st_f16_to_f32(buf[j]);
        else
            for (uint64_t j = 0; j < n; j++) dst[i + j] = st_bf16_to_f32(buf[j]);
        i += n;
    }
    freeCheck(buf);
}

void st_read_i32(const StFile *st, const StTensor *t, int32_t *dst) {
    if (t->dtype != ST_I32 && t->dtype != ST_I64)
        t5_fail("%s: tensor \"%s\" has dtype %s, expected an integer tensor (I64 or I32)", st->path, t->name,
                st_dtype_name(t->dtype));
    seek_tensor(st, t);
    if (t->dtype == ST_I32) {
        read_raw32(st, t, dst);
        return;
    }
    int64_t *buf = mallocCheck(ST_CHUNK_BYTES);
    for (uint64_t i = 0; i < t->numel;) {
        uint64_t n = t->numel - i < ST_CHUNK_BYTES / 8 ? t->numel - i : ST_CHUNK_BYTES / 8;
        read_bytes(st, t, buf, (size_t)n * 8);
        for (uint64_t j = 0; j < n; j++) {
            if (buf[j] < INT32_MIN || buf[j] > INT32_MAX)
                t5_fail("%s: tensor \"%s\": element %llu is %lld, outside the int32 range", st->path, t->name,
                        (unsigned long long)(i + j), (long long)buf[j]);
            dst[i + j] = (int32_t)buf[j];
        }
        i += n;
    }
    freeCheck(buf);
}

// ---- writer ---------------------------------------------------------------------------

static uint64_t desc_numel(const StTensorDesc *d) {
    uint64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= (uint64_t)d->shape[i];
    return n;
}
static uint64_t desc_bytes(const StTensorDesc *d) { return desc_numel(d) * (uint64_t)st_dtype_size(d->dtype); }

// Growable text buffer for the header.
typedef struct {
    char *s;
    size_t len, cap;
} Text;

static void text_put(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_put(Text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) t5_die(__FILE__, __LINE__, "formatting the safetensors header failed", NULL);
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->len + (size_t)n + 8) cap *= 2;
        char *g = realloc(t->s, cap);
        if (!g) t5_die(__FILE__, __LINE__, "out of host memory for the safetensors header", NULL);
        t->s = g;
        t->cap = cap;
    }
}

static void text_put_json_string(Text *t, const char *s) {
    text_put(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') text_put(t, "\\%c", c);
        else if (c < 0x20) text_put(t, "\\u%04x", c);
        else text_put(t, "%c", c);
    }
    text_put(t, "\"");
}

// Every byte of the file goes through here (the checksum, when kept, sees them in order).
static void writer_put(StWriter *w, const void *p, size_t size, size_t n) {
    fwriteCheck(p, size, n, w->f, w->file.tmp_path);
    if (w->checksum) w->crc32c = crc32c_update(w->crc32c, p, size * n);
    w->bytes += size * n;
}

static void writer_open(StWriter *w, const char *path, const StTensorDesc *descs, int count, const char *metadata_json,
                        int checksum) {
    memset(w, 0, sizeof *w);
    w->checksum = checksum;
    Text h = {0};
    text_put(&h, "{");
    int first = 1;
    if (metadata_json) {
        cJSON *m = json_read_parse(metadata_json, strlen(metadata_json), path, JSON_DUP_REFUSE, NULL);
        int ok = cJSON_IsObject(m);
        const cJSON *v;
        if (ok) cJSON_ArrayForEach(v, m) ok &= cJSON_IsString(v);
        if (!ok) t5_die(__FILE__, __LINE__, "st_writer_open: metadata must be a JSON object of strings", metadata_json);
        char *ms = cJSON_PrintUnformatted(m);
        text_put(&h, "\"__metadata__\":%s", ms);
        free(ms);
        cJSON_Delete(m);
        first = 0;
    }
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const StTensorDesc *d = &descs[i];
        if ((unsigned)d->dtype >= 5 || d->ndim < 0 || d->ndim > ST_MAX_DIMS || !d->name ||
            strcmp(d->name, "__metadata__") == 0)
            t5_die(__FILE__, __LINE__, "st_writer_open: bad tensor description", d->name);
        for (int j = 0; j < i; j++)
            if (strcmp(descs[j].name, d->name) == 0)
                t5_die(__FILE__, __LINE__, "st_writer_open: duplicate tensor name", d->name);
        if (!first) text_put(&h, ",");
        first = 0;
        text_put_json_string(&h, d->name);
        text_put(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(d->dtype));
        for (int j = 0; j < d->ndim; j++) {
            if (d->shape[j] < 0) t5_die(__FILE__, __LINE__, "st_writer_open: negative dimension", d->name);
            text_put(&h, "%s%lld", j ? "," : "", (long long)d->shape[j]);
        }
        uint64_t bytes = desc_bytes(d);
        text_put(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    text_put(&h, "}");
    while (h.len % 8) text_put(&h, " ");  // pad with spaces to 8 bytes, as the reference writer does

    w->f = atomic_open(&w->file, path);
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    writer_put(w, lenbuf, 1, 8);
    writer_put(w, h.s, 1, h.len);
    free(h.s);
    w->descs = descs;
    w->count = count;
    w->next = 0;
    w->written = 0;
}

void st_writer_open(StWriter *w, const char *path, const StTensorDesc *descs, int count, const char *metadata_json) {
    writer_open(w, path, descs, count, metadata_json, 0);
}

void st_writer_open_checksummed(StWriter *w, const char *path, const StTensorDesc *descs, int count,
                                const char *metadata_json) {
    writer_open(w, path, descs, count, metadata_json, 1);
}

// Skip past complete tensors (including empty ones) to the one being written.
static void writer_advance(StWriter *w) {
    while (w->next < w->count && w->written == desc_bytes(&w->descs[w->next])) {
        w->next++;
        w->written = 0;
    }
}

// Append n values (fp32 or int32) to the stream of tensors, converting to each dtype.
static void writer_write(StWriter *w, const void *src, uint64_t n, int src_is_float) {
    unsigned char *buf = NULL;
    uint64_t done = 0;
    while (done < n) {
        writer_advance(w);
        if (w->next >= w->count)
            t5_die(__FILE__, __LINE__, "st_writer: more values written than the tensors hold", w->file.path);
        const StTensorDesc *d = &w->descs[w->next];
        if (is_float_dtype(d->dtype) != src_is_float)
            t5_die(__FILE__, __LINE__,
                   src_is_float ? "st_writer_write_f32 on an integer tensor" : "st_writer_write_i32 on a float tensor",
                   d->name);
        int isz = st_dtype_size(d->dtype);
        uint64_t left = (desc_bytes(d) - w->written) / (uint64_t)isz, take = n - done < left ? n - done : left;
        if (d->dtype == ST_F32 || d->dtype == ST_I32) {  // same bytes as the source
            writer_put(w, (const char *)src + done * 4, 4, (size_t)take);
        } else {
            if (!buf) buf = mallocCheck(ST_CHUNK_BYTES);
            uint64_t per = ST_CHUNK_BYTES / (uint64_t)isz;
            for (uint64_t i = 0; i < take; i += per) {
                uint64_t m = take - i < per ? take - i : per;
                if (d->dtype == ST_I64) {
                    const int32_t *s = (const int32_t *)src + done + i;
                    for (uint64_t j = 0; j < m; j++) ((int64_t *)buf)[j] = s[j];
                } else {
                    const float *s = (const float *)src + done + i;
                    uint16_t *o = (uint16_t *)buf;
                    if (d->dtype == ST_F16)
                        for (uint64_t j = 0; j < m; j++) o[j] = st_f32_to_f16(s[j]);
                    else
                        for (uint64_t j = 0; j < m; j++) o[j] = st_f32_to_bf16(s[j]);
                }
                writer_put(w, buf, (size_t)isz, (size_t)m);
            }
        }
        w->written += take * (uint64_t)isz;
        done += take;
    }
    freeCheck(buf);
    writer_advance(w);
}

void st_writer_write_f32(StWriter *w, const float *src, uint64_t n) { writer_write(w, src, n, 1); }
void st_writer_write_i32(StWriter *w, const int32_t *src, uint64_t n) { writer_write(w, src, n, 0); }

void st_writer_close(StWriter *w) {
    writer_advance(w);
    if (w->next < w->count) {
        char msg[256];
        snprintf(msg, sizeof msg, "st_writer_close: tensor \"%.96s\" has %llu of %llu bytes written",
                 w->descs[w->next].name, (unsigned long long)w->written,
                 (unsigned long long)desc_bytes(&w->descs[w->next]));
        t5_die(__FILE__, __LINE__, msg, "every tensor must be written in full before closing");
    }
    atomic_commit(&w->file);
    memset(w, 0, sizeof *w);
}
