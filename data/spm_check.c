// data/spm_check.c: a spiece.model checked before libsentencepiece reads it (see
// spm_check.h). The field numbers are sentencepiece_model.proto's; the trie layout is
// darts-clone's (third_party/darts_clone/darts.h) as Normalizer::NormalizePrefix walks it.
#include "spm_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_SGROUP = 3, WIRE_EGROUP = 4, WIRE_I32 = 5 };
// sentencepiece_model.proto
enum { MODEL_PIECES = 1, MODEL_TRAINER_SPEC = 2, MODEL_NORMALIZER_SPEC = 3, MODEL_SELF_TEST = 4,
       MODEL_DENORMALIZER_SPEC = 5 };
enum { PIECE_PIECE = 1, PIECE_SCORE = 2, PIECE_TYPE = 3 };
enum { PIECE_TYPE_NORMAL = 1, PIECE_TYPE_BYTE = 6 };  // NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE
enum { TRAINER_MODEL_TYPE = 3 };
enum { MODEL_TYPE_UNIGRAM = 1, MODEL_TYPE_CHAR = 4 };  // UNIGRAM, BPE, WORD, CHAR
enum { NORMALIZER_CHARSMAP = 2 };
// Normalizer::kMaxTrieResultsSize: NormalizePrefix's result array on the stack; it reads
// as many entries as the trie matched, so a key with more matches reads past it.
enum { TRIE_MAX_MATCHES = 32 };
// The biggest rules sentencepiece ships (nmt_nfkc_cf) make a trie of about 180 KB; the check
// below takes about five times the trie's bytes of memory, so a bound keeps a damaged size
// from asking for gigabytes (16 MiB: 0.2 s for a trie whose every unit is reachable).
#define TRIE_MAX_BYTES (16u << 20)

typedef struct {
    const unsigned char *p, *end, *file;  // file: the model's first byte (for offsets)
    char *why;
    size_t cap;
} Pb;

typedef struct {
    uint32_t num;
    int wire;
    uint64_t v;                 // WIRE_VARINT
    const unsigned char *data;  // WIRE_LEN, WIRE_I32, WIRE_I64
    size_t len;
    size_t at;                  // byte offset of the field's key in the file
} PbField;

__attribute__((format(printf, 2, 3))) static int say(Pb *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, r->cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int pb_varint(Pb *r, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end) return 0;
        unsigned char c = *r->p++;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 1;
        }
    }
    return 0;
}

// The next field of the message r walks (what names it): 1, 0 at its end, -1 (why set).
static int pb_next(Pb *r, PbField *f, const char *what) {
    if (r->p >= r->end) return 0;
    memset(f, 0, sizeof *f);
    f->at = (size_t)(r->p - r->file);
    uint64_t key, len;
    if (!pb_varint(r, &key))
        return say(r, "%s: a field key at byte %zu is cut off or longer than 10 bytes (truncated file?)", what, f->at);
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return say(r, "%s: field number %llu at byte %zu is outside protobuf's 1..2^29-1", what,
                   (unsigned long long)(key >> 3), f->at);
    size_t left;
    switch (f->wire) {
    case WIRE_VARINT:
        if (!pb_varint(r, &f->v))
            return say(r, "%s: field %u at byte %zu: its varint is cut off or longer than 10 bytes (truncated file?)",
                       what, f->num, f->at);
        return 1;
    case WIRE_I64:
    case WIRE_I32:
        f->len = f->wire == WIRE_I64 ? 8 : 4;
        break;
    case WIRE_LEN:
        if (!pb_varint(r, &len))
            return say(r, "%s: field %u at byte %zu: its length is cut off or longer than 10 bytes (truncated file?)",
                       what, f->num, f->at);
        left = (size_t)(r->end - r->p);
        if (len > left)
            return say(r, "%s: field %u at byte %zu says %llu bytes but its message has %zu left (truncated file?)", what,
                       f->num, f->at, (unsigned long long)len, left);
        f->len = (size_t)len;
        break;
    default:  // groups are proto1's; sentencepiece never writes one
        return say(r, "%s: field %u at byte %zu has wire type %d, which a sentencepiece model never holds", what, f->num,
                   f->at, f->wire);
    }
    left = (size_t)(r->end - r->p);
    if (f->len > left)
        return say(r, "%s: field %u at byte %zu needs %zu bytes but its message has %zu left (truncated file?)", what,
                   f->num, f->at, f->len, left);
    f->data = r->p;
    r->p += f->len;
    return 1;
}

static int pb_want(Pb *r, const PbField *f, int wire, const char *what) {
    static const char *const names[6] = {"varint", "64-bit", "length-delimited", "group", "group end", "32-bit"};
    if (f->wire == wire) return 0;
    return say(r, "%s at byte %zu: wire type %s, expected %s", what, f->at, names[f->wire], names[wire]);
}

static Pb pb_sub(const Pb *r, const PbField *f) {
    Pb s = *r;
    s.p = f->data;
    s.end = f->data + f->len;
    return s;
}

static uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// ---- ModelProto.pieces, trainer_spec --------------------------------------------------------

static int check_piece(Pb *r, const PbField *pf, long index) {
    char what[64];
    snprintf(what, sizeof what, "pieces[%ld]", index);
    Pb s = pb_sub(r, pf);
    PbField f;
    int k, has_piece = 0;
    while ((k = pb_next(&s, &f, what)) > 0) {
        if (f.num == PIECE_PIECE) {
            if (pb_want(&s, &f, WIRE_LEN, what) < 0) return -1;
            if (f.len == 0) return say(r, "%s (byte %zu): an empty piece string", what, pf->at);
            const unsigned char *nul = memchr(f.data, 0, f.len);
            if (nul)
                return say(r, "%s (byte %zu): the piece string holds a NUL byte at offset %zu", what, pf->at,
                           (size_t)(nul - f.data));
            has_piece = 1;
        } else if (f.num == PIECE_SCORE) {
            if (pb_want(&s, &f, WIRE_I32, what) < 0) return -1;
            uint32_t bits = get_le32(f.data);
            float score;
            memcpy(&score, &bits, sizeof score);
            if (!isfinite(score))
                return say(r, "%s (byte %zu): score %g is not a finite number", what, pf->at, (double)score);
        } else if (f.num == PIECE_TYPE) {
            if (pb_want(&s, &f, WIRE_VARINT, what) < 0) return -1;
            if (f.v < PIECE_TYPE_NORMAL || f.v > PIECE_TYPE_BYTE)
                return say(r, "%s (byte %zu): type %llu, expected 1..6 (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, "
                           "BYTE)", what, pf->at, (unsigned long long)f.v);
        }
    }
    if (k < 0) return -1;
    if (!has_piece) return say(r, "%s (byte %zu): no piece string", what, pf->at);
    return 0;
}

static int check_trainer_spec(Pb *r, const PbField *tf) {
    Pb s = pb_sub(r, tf);
    PbField f;
    int k;
    while ((k = pb_next(&s, &f, "trainer_spec")) > 0) {
        if (f.num != TRAINER_MODEL_TYPE) continue;
        if (pb_want(&s, &f, WIRE_VARINT, "trainer_spec.model_type") < 0) return -1;
        // ModelFactory::Create returns no model for another value, which Load then uses
        if (f.v < MODEL_TYPE_UNIGRAM || f.v > MODEL_TYPE_CHAR)
            return say(r, "trainer_spec.model_type (byte %zu): %llu, expected 1..4 (UNIGRAM, BPE, WORD, CHAR)", f.at,
                       (unsigned long long)f.v);
    }
    return k;
}

// ---- precompiled_charsmap: the double-array trie --------------------------------------------

// A unit (darts.h DoubleArrayUnit): bit 8 has_leaf; label = bit 31 and the low byte (a leaf
// unit has bit 31 set, so no key byte matches it); offset = bits 10..31, shifted left by 8
// when bit 9 is set; value (of a leaf unit) = the low 31 bits.
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xffu); }
static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }

// The walk's state is a base: commonPrefixSearch keeps node_pos = the matched unit's index
// ^ its offset, and the next byte c leads to the unit base ^ c if that unit's label is c.
// So the units a base leads to are those v of its 256-unit block with v ^ label(v) == base:
// bucketing every unit by v ^ label(v) once lets the walk visit each reachable base once and
// each unit once (a hostile trie where many units share a base costs no more).
typedef struct {
    uint32_t base;
    uint32_t next;  // index into the base's bucket
    uint32_t best;  // most matches along a key from this base, so far
    uint32_t leaf;  // 1 if the unit that led here has a leaf (a match on the way in)
} TrieFrame;

// From the root (unit 0, its base 0 ^ offset): every reachable base has its whole 256-unit
// block inside the trie (the library reads base ^ c for any byte c of the input); a matched
// unit with has_leaf has its replacement's offset in the unit at its own base, inside the
// strings region and NUL-terminated there; no base is reached again along a key (a cycle:
// a key of any length keeps matching); at most TRIE_MAX_MATCHES matches along any key.
static int check_trie(Pb *r, const char *what, const uint32_t *units, uint32_t n, const unsigned char *strs,
                      size_t strs_len) {
    if (n == 0) return say(r, "%s: an empty trie (no root unit)", what);
    uint32_t root = unit_offset(units[0]);  // 0 ^ offset
    if ((root | 0xffu) >= n)
        return say(r, "%s: the root's children [%u, %u] lie outside the trie's %u units", what, root & ~0xffu,
                   root | 0xffu, n);
    // bucket[start[b] .. start[b + 1]): the units a byte can reach from base b
    uint32_t *start = callocCheck((size_t)n + 1, sizeof *start);
    uint32_t *bucket = mallocCheck((size_t)n * sizeof *bucket);
    for (uint32_t v = 0; v < n; v++) {
        uint32_t label = unit_label(units[v]);
        if (label <= 0xff && (v ^ label) < n) start[(v ^ label) + 1]++;
    }
    for (uint32_t b = 0; b < n; b++) start[b + 1] += start[b];
    uint32_t *fill = mallocCheck((size_t)n * sizeof *fill);
    memcpy(fill, start, (size_t)n * sizeof *fill);
    for (uint32_t v = 0; v < n; v++) {
        uint32_t label = unit_label(units[v]);
        if (label <= 0xff && (v ^ label) < n) bucket[fill[v ^ label]++] = v;
    }
    free(fill);
    unsigned char *state = callocCheck(n, 1);  // per base: 0 unseen, 1 on the key being walked, 2 done
    uint32_t *matches = mallocCheck((size_t)n * sizeof *matches);
    size_t cap = 64, top = 0;
    TrieFrame *st = mallocCheck(cap * sizeof *st);
    int rc = 0;
    st[top++] = (TrieFrame){root, start[root], 0, 0};
    state[root] = 1;
    while (top > 0 && rc == 0) {
        TrieFrame *fr = &st[top - 1];
        if (fr->next == start[fr->base + 1]) {  // every unit from this base seen: pop
            state[fr->base] = 2;
            matches[fr->base] = fr->best;
            uint32_t got = fr->best + fr->leaf;
            top--;
            if (top > 0 && got > st[top - 1].best) st[top - 1].best = got;
            continue;
        }
        uint32_t v = bucket[fr->next++];
        uint32_t u = units[v];
        uint32_t vbase = v ^ unit_offset(u);
        if ((vbase | 0xffu) >= n) {
            rc = say(r, "%s: trie unit %u: its children [%u, %u] lie outside the trie's %u units", what, v,
                     vbase & ~0xffu, vbase | 0xffu, n);
            break;
        }
        uint32_t leaf = (uint32_t)unit_has_leaf(u);
        if (leaf) {
            uint32_t off = units[vbase] & 0x7fffffffu;
            if (off >= strs_len) {
                rc = say(r, "%s: trie unit %u: replacement string at offset %u, outside the %zu-byte strings region",
                         what, v, off, strs_len);
                break;
            }
            if (!memchr(strs + off, 0, strs_len - off)) {
                rc = say(r, "%s: trie unit %u: the replacement string at offset %u has no NUL before the blob's end",
                         what, v, off);
                break;
            }
        }
        if (state[vbase] == 1) {
            rc = say(r, "%s: trie unit %u leads back to a state already on the key (a cycle)", what, v);
            break;
        }
        if (state[vbase] == 2) {
            if (matches[vbase] + leaf > fr->best) fr->best = matches[vbase] + leaf;
        } else {
            if (top == cap) {
                cap *= 2;
                st = reallocCheck(st, cap * sizeof *st);
            }
            state[vbase] = 1;
            st[top++] = (TrieFrame){vbase, start[vbase], 0, leaf};
        }
    }
    if (rc == 0 && matches[root] > TRIE_MAX_MATCHES)
        rc = say(r, "%s: a key matches %u rules, more than the %d sentencepiece keeps", what, matches[root],
                 TRIE_MAX_MATCHES);
    free(state);
    free(matches);
    free(st);
    free(start);
    free(bucket);
    return rc;
}

// <trie bytes: u32 little-endian><trie units><NUL-terminated replacement strings>
// (Normalizer::DecodePrecompiledCharsMap).
static int check_charsmap(Pb *r, const char *spec, const PbField *f) {
    char what[96];
    snprintf(what, sizeof what, "%s.precompiled_charsmap (byte %zu, %zu bytes)", spec, f->at, f->len);
    if (f->len == 0) return 0;  // no rules: the library builds no trie
    if (f->len <= 4) return say(r, "%s: shorter than its 4-byte trie size", what);
    uint32_t trie = get_le32(f->data);
    size_t body = f->len - 4;
    if (trie > body) return say(r, "%s: the trie size says %u bytes but %zu follow it", what, trie, body);
    if (trie % 4) return say(r, "%s: trie size %u is not a multiple of the 4-byte units", what, trie);
    if (trie > TRIE_MAX_BYTES)
        return say(r, "%s: a trie of %u bytes, more than %u (sentencepiece's rules take under 1 MB)", what, trie,
                   TRIE_MAX_BYTES);
    uint32_t n = trie / 4;
    uint32_t *units = mallocCheck(n ? (size_t)n * sizeof *units : 1);
    for (uint32_t i = 0; i < n; i++) units[i] = get_le32(f->data + 4 + 4 * (size_t)i);
    int rc = check_trie(r, what, units, n, f->data + 4 + trie, body - trie);
    free(units);
    return rc;
}

static int check_normalizer_spec(Pb *r, const PbField *nf, const char *spec) {
    Pb s = pb_sub(r, nf);
    PbField f;
    int k;
    while ((k = pb_next(&s, &f, spec)) > 0) {
        if (f.num != NORMALIZER_CHARSMAP) continue;
        char what[64];
        snprintf(what, sizeof what, "%s.precompiled_charsmap", spec);
        if (pb_want(&s, &f, WIRE_LEN, what) < 0 || check_charsmap(&s, spec, &f) < 0) return -1;
    }
    return k;
}

int spm_check_model(const unsigned char *bytes, size_t n, char *why, size_t cap) {
    Pb r = {bytes, bytes + n, bytes, why, cap};
    if (cap) why[0] = '\0';
    PbField f;
    long pieces = 0;
    int k;
    while ((k = pb_next(&r, &f, "ModelProto")) > 0) {
        int rc = 0;
        switch (f.num) {
        case MODEL_PIECES:
            rc = pb_want(&r, &f, WIRE_LEN, "a piece");
            if (rc == 0) rc = check_piece(&r, &f, pieces++);
            break;
        case MODEL_TRAINER_SPEC:
            rc = pb_want(&r, &f, WIRE_LEN, "trainer_spec");
            if (rc == 0) rc = check_trainer_spec(&r, &f);
            break;
        case MODEL_NORMALIZER_SPEC:
        case MODEL_DENORMALIZER_SPEC: {
            const char *spec = f.num == MODEL_NORMALIZER_SPEC ? "normalizer_spec" : "denormalizer_spec";
            rc = pb_want(&r, &f, WIRE_LEN, spec);
            if (rc == 0) rc = check_normalizer_spec(&r, &f, spec);
            break;
        }
        case MODEL_SELF_TEST:  // its samples are encoded by the library once the rest is checked
            rc = pb_want(&r, &f, WIRE_LEN, "self_test_data");
            break;
        default:
            break;  // other fields (extensions, newer ones) the library skips too
        }
        if (rc < 0) return -1;
    }
    return k < 0 ? -1 : 0;
}
