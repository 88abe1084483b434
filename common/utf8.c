// common/utf8.c: strict UTF-8 validation (see utf8.h).
#include "utf8.h"

int utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        // Length and the allowed range of the second byte (Table 3-7); the range
        // excludes overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) n = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            goto bad;  // 80..C1 (continuation or overlong 2-byte lead), F5..FF
        }
        if (len - i < n) goto bad;
        if (p[i + 1] < lo || p[i + 1] > hi) goto bad;
        for (size_t k = 2; k < n; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) goto bad;
        i += n;
    }
    return 1;
bad:
    if (bad_offset) *bad_offset = i;
    return 0;
}
