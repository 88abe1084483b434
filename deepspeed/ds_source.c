// deepspeed/ds_source.c: --deepspeed as a path, JSON text, or base64 of JSON text (ds_source.h).
#include "ds_source.h"

#include <string.h>
#include <sys/stat.h>

#include "../common/check.h"

// 0..63 for a base64 digit of either alphabet ('+' '/' standard, '-' '_' urlsafe), -1 otherwise
static int base64_digit(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

char *ds_source_base64_decode(const char *s, size_t *len) {
    size_t n = strlen(s);
    while (n && s[n - 1] == '=') n--;  // padding: at most two, and only where it belongs
    size_t pad = strlen(s) - n;
    if (n == 0 || n % 4 == 1 || pad > 2 || (pad && (n + pad) % 4 != 0)) return NULL;
    char *out = mallocCheck(n / 4 * 3 + 3);
    size_t k = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int d = base64_digit((unsigned char)s[i]);
        if (d < 0) {
            freeCheck(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[k] = '\0';
    *len = k;
    return out;
}

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return s;
}

const char *ds_source_resolve(const char *arg, char **text) {
    *text = NULL;
    struct stat st;
    if (stat(arg, &st) == 0) return arg;  // an existing path wins, whatever it holds (os.path.exists)
    if (*skip_space(arg) == '{') {
        size_t n = strlen(arg) + 1;
        *text = memcpy(mallocCheck(n), arg, n);
        return DS_SOURCE_JSON_LABEL;
    }
    size_t len = 0;
    char *decoded = ds_source_base64_decode(arg, &len);
    // only an object is a config; a NUL inside is not text (the JSON reader would stop there)
    if (decoded && *skip_space(decoded) == '{' && strlen(decoded) == len) {
        *text = decoded;
        return DS_SOURCE_BASE64_LABEL;
    }
    freeCheck(decoded);
    return arg;
}
