// data/spm_shim.cc: the C API of data/spm.h over libsentencepiece's C++
// SentencePieceProcessor. The only C++ file of the project; everything it exports is
// extern "C". The model file is read once: its bytes feed the hash (dataset cache keys),
// the check of what the library trusts unchecked (data/spm_check.c: a damaged normalizer
// trie crashes it) and LoadFromSerializedProto. No C++ exception leaves this file: every
// entry point catches them all (std::bad_alloc under `ulimit -v`, darts-clone's) and
// reports one line through t5_fail, as C callers expect.
#include <sentencepiece_processor.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "../common/check.h"
#include "../common/file_open.h"
#include "spm.h"
#include "spm_check.h"
}

// libsentencepiece's own log threshold (0 INFO .. 3 FATAL; 0.1.9x and 0.2 export it, only
// 0.2's header declares it). A failed self-test logs its samples at INFO and WARNING before
// Load returns the status this file reports in one line: those lines are kept off stderr.
namespace sentencepiece {
namespace logging {
void SetMinLogLevel(int v);
}  // namespace logging
}  // namespace sentencepiece
static const int kSpmLogErrorsOnly = 2;

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

// The whole model file, opened without blocking on a FIFO (common/file_open.h refuses
// anything but a regular file in one line, before any read).
static void read_model(const char *path, std::string *out) {
    // a FIFO, device, socket or directory: one line saying what it is (common/file_open.h)
    int fd = file_open_regular_fd(path, O_RDONLY, 0, "the tokenizer model, --tokenizer_name");
    if (fd < 0)
        t5_fail("%s: cannot read the sentencepiece model: %s; HINT: pass the spiece.model of a T5 checkpoint", path,
                strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) t5_fail("%s: cannot stat the sentencepiece model: %s", path, strerror(errno));
    // protobuf parses at most INT_MAX bytes; spiece.model files are a few MB
    if (st.st_size > INT_MAX)
        t5_fail("%s: %lld bytes, more than a sentencepiece model can be (2 GiB); HINT: pass the spiece.model of a T5 "
                "checkpoint", path, (long long)st.st_size);
    out->reserve((size_t)st.st_size);
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) t5_fail("%s: read error: %s", path, strerror(errno));
        if (n == 0) break;
        out->append(buf, (size_t)n);
        if (out->size() > (size_t)INT_MAX) t5_fail("%s: grew past 2 GiB while being read", path);
    }
    close(fd);
}

// Runs body; any C++ exception out of it (libsentencepiece, protobuf, darts-clone, the
// standard library) becomes one error line naming the model and what was being done.
template <typename F>
static auto shim_guard(const char *path, const char *doing, F body) -> decltype(body()) {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        struct rlimit rl;
        char limit[96] = "";
        if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(limit, sizeof limit, "; the address-space limit, ulimit -v, is %llu KiB",
                     (unsigned long long)(rl.rlim_cur / 1024));
        t5_fail("%s: out of memory %s (std::bad_alloc%s); HINT: raise the memory limit or free memory, then run again",
                path, doing, limit);
    } catch (const std::exception &e) {
        t5_fail("%s: sentencepiece failed %s: %s; HINT: check that the file is the spiece.model of a T5 checkpoint",
                path, doing, one_line(e.what()).c_str());
    } catch (...) {
        t5_fail("%s: sentencepiece failed %s (an unknown C++ exception); HINT: check that the file is the spiece.model "
                "of a T5 checkpoint", path, doing);
    }
}

static Spm *load_model(const char *path) {
    std::string bytes;
    read_model(path, &bytes);
    if (bytes.empty())
        t5_fail("%s: an empty file, not a sentencepiece model; HINT: pass the spiece.model of a T5 checkpoint", path);
    char why[512];
    if (spm_check_model(reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size(), why, sizeof why) != 0)
        t5_fail("%s: not a usable sentencepiece model: %s; HINT: the file is damaged: use the spiece.model of the "
                "original checkpoint (download it again)", path, why);
    Spm *spm = new Spm();
    sentencepiece::logging::SetMinLogLevel(kSpmLogErrorsOnly);
    sentencepiece::util::Status st = spm->proc.LoadFromSerializedProto(bytes);
    if (!st.ok()) {
        std::string said = one_line(st.ToString());
        if (said.find("Self-test") != std::string::npos)  // its "See LOG(INFO)" points at lines kept off stderr
            said = "its self_test_data samples do not encode to the pieces the file says they should";
        t5_fail("%s: not a sentencepiece model (sentencepiece says: %s); HINT: pass the spiece.model of a T5 checkpoint",
                path, said.c_str());
    }
    spm->path = path;
    spm->hash = fnv1a64(bytes.data(), bytes.size());
    spm->pieces = spm->proc.GetPieceSize();
    // tokenize.c appends </s> as id 1 and collation pads with 0: the T5 layout.
    if (spm->proc.pad_id() != 0 || spm->proc.eos_id() != 1 || spm->proc.unk_id() != 2)
        t5_fail("%s: the sentencepiece model has pad/eos/unk ids %d/%d/%d, expected T5's 0/1/2; HINT: pass the "
                "spiece.model of a T5 checkpoint", path, spm->proc.pad_id(), spm->proc.eos_id(), spm->proc.unk_id());
    spm->vocab = (spm->pieces + kExtraIds + 127) / 128 * 128;
    return spm;
}

extern "C" Spm *spm_load(const char *path) {
    return shim_guard(path, "loading the sentencepiece model", [&] { return load_model(path); });
}

extern "C" void spm_free(Spm *spm) {
    if (spm) shim_guard(spm->path.c_str(), "freeing the sentencepiece model", [&] { delete spm; });
}

extern "C" int spm_piece_count(const Spm *spm) { return spm->pieces; }

extern "C" uint64_t spm_model_hash(const Spm *spm) { return spm->hash; }

static int encode_text(const Spm *spm, const char *text, size_t len, int32_t **ids, size_t *cap) {
    std::vector<int> out;
    sentencepiece::util::Status st = spm->proc.Encode(absl::string_view(text, len), &out);
    if (!st.ok())
        t5_fail("%s: sentencepiece cannot encode a %zu-byte text: %s", spm->path.c_str(), len,
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

extern "C" int spm_encode(const Spm *spm, const char *text, size_t len, int32_t **ids, size_t *cap) {
    return shim_guard(spm->path.c_str(), "encoding a text", [&] { return encode_text(spm, text, len, ids, cap); });
}

static char *decode_ids(const Spm *spm, const int32_t *ids, int n) {
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

extern "C" char *spm_decode(const Spm *spm, const int32_t *ids, int n) {
    return shim_guard(spm->path.c_str(), "decoding token ids", [&] { return decode_ids(spm, ids, n); });
}
