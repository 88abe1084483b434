// data/batch_file.c: read a batch from a safetensors file (see batch_file.h).
#include "batch_file.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../formats/safetensors.h"

static int *read_ints(StFile *st, const char *name, int required, int64_t *rows, int64_t *cols) {
    const StTensor *t = st_find(st, name);
    if (!t) {
        if (required) t5_fail("%s: missing tensor \"%s\" (a batch file needs input_ids, attention_mask, labels)", st->path, name);
        return NULL;
    }
    if (t->ndim != 2 || (t->dtype != ST_I64 && t->dtype != ST_I32))
        t5_fail("%s: tensor \"%s\": expected a 2-D I64 or I32 tensor, found %d-D %s", st->path, name, t->ndim,
                st_dtype_name(t->dtype));
    *rows = t->shape[0];
    *cols = t->shape[1];
    int *v = mallocCheck(t->numel * sizeof(int));
    st_read_i32(st, t, v);
    return v;
}

static void check_range(const char *path, const char *name, const int *v, long n, int vocab_size, int allow_ignore) {
    for (long i = 0; i < n; i++)
        if ((v[i] < 0 || v[i] >= vocab_size) && !(allow_ignore && v[i] == -100))
            t5_fail("%s: tensor \"%s\" element %ld is %d, outside the model's vocabulary [0, %d)%s", path, name, i,
                    v[i], vocab_size, allow_ignore ? " and not -100" : "");
}

void batch_file_load(BatchFile *bf, const char *path, int vocab_size, int decoder_start_id, int pad_id) {
    memset(bf, 0, sizeof *bf);
    StFile st;
    st_open(&st, path);
    int64_t B, S, B2, S2, B3, T, B4 = 0, T4 = 0;
    bf->input_ids = read_ints(&st, "input_ids", 1, &B, &S);
    bf->attention_mask = read_ints(&st, "attention_mask", 1, &B2, &S2);
    bf->labels = read_ints(&st, "labels", 1, &B3, &T);
    bf->decoder_input_ids = read_ints(&st, "decoder_input_ids", 0, &B4, &T4);
    if (B2 != B || S2 != S) t5_fail("%s: attention_mask is [%lld, %lld], input_ids is [%lld, %lld]", path, (long long)B2, (long long)S2, (long long)B, (long long)S);
    if (B3 != B) t5_fail("%s: labels has %lld rows, input_ids has %lld", path, (long long)B3, (long long)B);
    if (bf->decoder_input_ids && (B4 != B || T4 != T))
        t5_fail("%s: decoder_input_ids is [%lld, %lld], labels is [%lld, %lld]", path, (long long)B4, (long long)T4, (long long)B, (long long)T);
    if (!bf->decoder_input_ids) {
        bf->decoder_input_ids = mallocCheck((size_t)(B * T) * sizeof(int));
        t5_shift_right(bf->labels, bf->decoder_input_ids, (int)B, (int)T, decoder_start_id, pad_id);
    }
    st_close(&st);
    check_range(path, "input_ids", bf->input_ids, (long)(B * S), vocab_size, 0);
    check_range(path, "labels", bf->labels, (long)(B * T), vocab_size, 1);
    long counted = 0;  // the loss averages over the label tokens: with none it is 0/0
    for (long i = 0; i < (long)(B * T); i++) counted += bf->labels[i] != -100;
    if (counted == 0)
        t5_fail("%s: tensor \"labels\": every one of its %lld entries is -100 (ignored), so the loss has no token to "
                "average over; HINT: a batch needs at least one label token (the target's ids, </s> = 1 last)", path,
                (long long)(B * T));
    check_range(path, "decoder_input_ids", bf->decoder_input_ids, (long)(B * T), vocab_size, 0);
    for (long i = 0; i < (long)(B * S); i++)
        if (bf->attention_mask[i] != 0 && bf->attention_mask[i] != 1)
            t5_fail("%s: tensor \"attention_mask\" element %ld is %d; expected 0 or 1", path, i, bf->attention_mask[i]);
    bf->batch = (T5Batch){.B = (int)B, .S = (int)S, .T = (int)T, .input_ids = bf->input_ids,
                          .attention_mask = bf->attention_mask, .decoder_input_ids = bf->decoder_input_ids,
                          .labels = bf->labels};
}

void batch_file_free(BatchFile *bf) {
    free(bf->input_ids);
    free(bf->attention_mask);
    free(bf->labels);
    free(bf->decoder_input_ids);
    memset(bf, 0, sizeof *bf);
}
