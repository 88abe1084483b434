// data/spm_shim.cc: the C API of data/spm.h over libsentencepiece's C++
// SentencePieceProcessor. The only C++ file of the project; everything it exports is
// extern "C". The model file is read once: its bytes feed both the hash (dataset cache
// keys) and LoadFromSerializedProto.
#include <sentencepiece_processor.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "../common/check.h"
#include "../common/file_open.h"
#include "spm.h"
}

// HF's T5 tokenizers add 100 <extra_id_N> sentinels after the pieces, and T5 checkpoints
// pad the embedding to a multiple of 128 (32000 + 100 -> 32128). Ids in [pieces, vocab)
// can come out of a model and are dropped by decode; ids outside [0, vocab) are a bug.
static const int kExtraIds = 100;

struct Spm {
    sentencepiece::SentencePieceProcessor proc;
    std::string path;
    uint64_t hash;   // FNV-1a 64 of the model file's bytes
    int pieces;      // GetPieceSize(): 32000 for T5
    int vocab;       // pieces + extra ids, rounded up to a multiple of 128
};

static uint64_t fnv1a64(const void *data, size_t n) {
    const unsigned char *p = static_cast<const unsigned char *>(data);
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

// sentencepiece status messages may span lines; the error must stay one line.
static std::string one_line(std::string s) {
    for (char &c : s)
        if (c == '\n' || c == '\r') c = ' ';
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

static bool read_file(const char *path, std::string *out, int *err) {
    FILE *f = file_open_regular(path, "rb", "the tokenizer model, --tokenizer_name");  // a FIFO or device: one line, never a wait
    if (!f) {
        *err = errno;
        return false;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    bool ok = !ferror(f);
    *err = ok ? 0 : errno;
    fclose(f);
    return ok;
}

extern "C" Spm *spm_load(const char *path) {
    std::string bytes;
    int err = 0;
    if (!read_file(path, &bytes, &err))
        t5_fail("cannot read sentencepiece model '%s': %s (pass the spiece.model of a T5 checkpoint)", path,
                strerror(err));
    if (bytes.empty()) t5_fail("sentencepiece model '%s' is empty", path);
    Spm *spm = new Spm();
    sentencepiece::util::Status st = spm->proc.LoadFromSerializedProto(bytes);
    if (!st.ok())
        t5_fail("'%s' is not a sentencepiece model (pass the spiece.model of a T5 checkpoint; sentencepiece says: %s)",
                path, one_line(st.ToString()).c_str());
    spm->path = path;
    spm->hash = fnv1a64(bytes.data(), bytes.size());
    spm->pieces = spm->proc.GetPieceSize();
    // tokenize.c appends </s> as id 1 and collation pads with 0: the T5 layout.
    if (spm->proc.pad_id() != 0 || spm->proc.eos_id() != 1 || spm->proc.unk_id() != 2)
        t5_fail("sentencepiece model '%s' has pad/eos/unk ids %d/%d/%d, expected T5's 0/1/2", path,
                spm->proc.pad_id(), spm->proc.eos_id(), spm->proc.unk_id());
    spm->vocab = (spm->pieces + kExtraIds + 127) / 128 * 128;
    return spm;
}

extern "C" void spm_free(Spm *spm) { delete spm; }

extern "C" int spm_piece_count(const Spm *spm) { return spm->pieces; }

extern "C" uint64_t spm_model_hash(const Spm *spm) { return spm->hash; }

extern "C" int spm_encode(const Spm *spm, const char *text, size_t len, int32_t **ids, size_t *cap) {
    std::vector<int> out;
    sentencepiece::util::Status st = spm->proc.Encode(absl::string_view(text, len), &out);
    if (!st.ok())
        t5_fail("sentencepiece ('%s') cannot encode a %zu-byte text: %s", spm->path.c_str(), len,
                one_line(st.ToString()).c_str());
    size_t n = out.size();
    if (n > (size_t)INT_MAX - 1) t5_fail("text of %zu bytes gives too many tokens (%zu)", len, n);
    // One spare slot so that tokenize_t5 can append </s> without a second realloc.
    if (*cap < n + 1) {
        size_t want = *cap * 2 > n + 1 ? *cap * 2 : n + 1;
        if (want < 64) want = 64;
        int32_t *p = static_cast<int32_t *>(realloc(*ids, want * sizeof(int32_t)));
        if (!p) t5_die(__FILE__, __LINE__, "out of memory growing the token buffer", "free some memory");
        *ids = p;
        *cap = want;
    }
    for (size_t i = 0; i < n; i++) (*ids)[i] = out[i];
    return (int)n;
}

extern "C" char *spm_decode(const Spm *spm, const int32_t *ids, int n) {
    std::vector<int> keep;
    keep.reserve(n > 0 ? n : 0);
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= spm->vocab)
            t5_fail("cannot decode token id %d (position %d): outside the vocabulary [0, %d) of '%s'", id, i,
                    spm->vocab, spm->path.c_str());
        // HF decode(skip_special_tokens=True): pad, </s>, <unk> and the sentinels go.
        if (id <= 2 || id >= spm->pieces) continue;
        keep.push_back(id);
    }
    std::string text;
    sentencepiece::util::Status st = spm->proc.Decode(keep, &text);
    if (!st.ok())
        t5_fail("sentencepiece ('%s') cannot decode %d ids: %s", spm->path.c_str(), n,
                one_line(st.ToString()).c_str());
    char *s = static_cast<char *>(mallocCheck(text.size() + 1));
    memcpy(s, text.data(), text.size());
    s[text.size()] = '\0';
    return s;
}
