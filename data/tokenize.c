// data/tokenize.c: T5 tokenization of one text (see tokenize.h).
#include "tokenize.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

int tokenize_t5(const Spm *spm, const char *prefix, const char *text, size_t len, int32_t **ids, size_t *cap) {
    size_t plen = prefix ? strlen(prefix) : 0;
    int n;
    if (plen == 0) {
        n = spm_encode(spm, text, len, ids, cap);
    } else {
        char *joined = mallocCheck(plen + len + 1);
        memcpy(joined, prefix, plen);
        memcpy(joined + plen, text, len);
        n = spm_encode(spm, joined, plen + len, ids, cap);
        free(joined);
    }
    // spm_encode leaves one spare slot; keep the check in case that ever changes.
    if ((size_t)n + 1 > *cap) {
        size_t want = (size_t)n + 1;
        int32_t *p = realloc(*ids, want * sizeof **ids);
        if (!p) t5_die(__FILE__, __LINE__, "out of memory growing the token buffer", "free some memory");
        *ids = p;
        *cap = want;
    }
    (*ids)[n] = T5_EOS_ID;
    return n + 1;
}
