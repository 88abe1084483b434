// trainer/tfrecord.c: TFRecord framing (see tfrecord.h).
#include "tfrecord.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/crc32c.h"

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

size_t tfrecord_frame(const void *data, size_t n, unsigned char *out) {
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, crc32c_mask(crc32c_compute(out, 8)));
    if (n) memcpy(out + 12, data, n);
    put_le32(out + 12 + n, crc32c_mask(crc32c_compute(data, n)));
    return n + 16;
}

void tfrecord_write(FILE *f, const char *path, const void *data, size_t n) {
    unsigned char *rec = mallocCheck(n + 16);
    size_t len = tfrecord_frame(data, n, rec);
    fwriteCheck(rec, 1, len, f, path);
    free(rec);
}
