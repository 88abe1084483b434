// tests/test_torch_bin.c: PyTorch .bin weights and DeepSpeed ZeRO checkpoints read without
// torch (formats/torch_pickle.c, formats/torch_file.c, formats/ds_checkpoint.c,
// cmd/import_deepspeed.c), against the files torch and DeepSpeed wrote themselves
// (tests/fixtures/ds_ckpt, tools/make_ds_checkpoint.py) and the corner cases made without
// torch (tests/fixtures/torch_bin, tests/fixtures/ds_synth: several ranks, padding, frozen
// parameters). Checks:
//  - each .bin directory (zip, legacy, ZIP64, sharded, bf16, f16) loads bitwise equal to its
//    safetensors twin; safetensors wins when both are there;
//  - import-deepspeed equals zero_to_fp32's weights bitwise and DeepSpeed's per-parameter
//    moments bitwise, and its optimizer files load with zero/checkpoint.c's zero_load_optimizer;
//  - every malformed input (truncated, flipped, unknown opcode, missing storage, strided view,
//    wrong shape or name, missing rank) is one error line naming the file.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/check.h"
#include "../common/fileio.h"
#include "../kernels/backend.h"
#include "../model/config.h"
#include "../model/hf_dir.h"
#include "../model/load.h"
#include "../model/params.h"
#include "../formats/safetensors.h"
#include "../formats/torch_file.h"
#include "../cmd/cmd.h"
#include "../zero/checkpoint.h"
#include "../zero/owned.h"
#include "../zero/step.h"
#include "../zero/zero.h"
#include "test.h"
#include "test_fork.h"
#include "test_io_util.h"
#include "test_tmp.h"

#define FIX_DS "tests/fixtures/ds_ckpt"
#define FIX_BIN "tests/fixtures/torch_bin"
#define FIX_SYNTH "tests/fixtures/ds_synth"
#define FIX_RELU "tests/fixtures/relu_tied"

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

// dir's weights as hf_load_weights gives them (the head's tying probed first).
static float *load_dir(const char *dir, ParamLayout *lay) {
    T5Config cfg;
    hf_resolve_model(dir, &cfg);
    cfg.untied_lm_head = hf_probe_untied(dir);
    params_build_layout(&cfg, lay);
    float *p = mallocCheck(lay->total * sizeof(float));
    hf_load_weights(dir, &cfg, lay, p);
    return p;
}

// Elements that differ in their bits after rounding want through `dtype` (F32: none).
static size_t count_diff(const float *got, const float *want, size_t n, StDtype dtype) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float w = dtype == ST_BF16 ? st_bf16_to_f32(st_f32_to_bf16(want[i]))
                  : dtype == ST_F16 ? st_f16_to_f32(st_f32_to_f16(want[i])) : want[i];
        bad += bits(got[i]) != bits(w);
    }
    return bad;
}

static void check_bin_dir(const char *dir, const char *twin, StDtype dtype, const char *want_file) {
    ParamLayout la, lb;
    float *a = load_dir(dir, &la), *b = load_dir(twin, &lb);
    const char *file = hf_weights_file(dir);
    size_t bad = la.total == lb.total ? count_diff(a, b, la.total, dtype) : la.total;
    char msg[512];
    snprintf(msg, sizeof msg, "%s (%s): %zu parameters, %zu differ from %s%s", dir, file ? file : "none", la.total, bad,
             twin, dtype == ST_F32 ? " (bitwise)" : dtype == ST_BF16 ? " rounded to bf16" : " rounded to f16");
    test_check(bad == 0 && la.count == lb.count && file && !strcmp(file, want_file), msg);
    free(a);
    free(b);
    params_free_layout(&la);
    params_free_layout(&lb);
}

// ---- DeepSpeed import --------------------------------------------------------------------

static int run_import(const char *ckpt, const char *out, const char *extra1, const char *extra2) {
    char *argv[8] = {"train_t5", "import-deepspeed", (char *)ckpt, (char *)out, (char *)extra1, (char *)extra2, NULL};
    int argc = 4 + (extra1 != NULL) + (extra2 != NULL);
    fflush(stdout);
    return cmd_run_import_deepspeed(argc, argv);
}

// The imported model equals zero_to_fp32's state dict: each tensor of ours bitwise, each of
// its names ours or an alias equal to shared.weight.
static void check_weights(const char *what, const char *out, const char *oracle_path) {
    char *mp = path_join(out, "model.safetensors");
    StFile got, want;
    st_open(&got, mp);
    st_open(&want, oracle_path);
    size_t bad = 0, n = 0;
    int names_ok = 1;
    const StTensor *shared = st_find(&got, "shared.weight");
    for (int i = 0; i < want.count; i++) {
        const StTensor *w = &want.tensors[i], *g = st_find(&got, w->name);
        if (!g) g = shared;  // an alias (lm_head / embed_tokens of a tied model)
        if (!g || g->numel != w->numel) {
            names_ok = 0;
            continue;
        }
        float *x = mallocCheck(w->numel * sizeof(float)), *y = mallocCheck(w->numel * sizeof(float));
        st_read_f32(&got, g, x);
        st_read_f32(&want, w, y);
        bad += count_diff(x, y, w->numel, ST_F32);
        n += w->numel;
        free(x);
        free(y);
    }
    for (int i = 0; i < got.count; i++) names_ok &= st_find(&want, got.tensors[i].name) != NULL;
    char msg[512];
    snprintf(msg, sizeof msg, "%s: model.safetensors = zero_to_fp32's %d tensors (%zu elements), %zu differ in bits",
             what, want.count, n, bad);
    test_check(names_ok && bad == 0 && n > 0, msg);
    st_close(&got);
    st_close(&want);
    free(mp);
}

// The moments through zero/checkpoint.c's loader (the resume path) equal DeepSpeed's per
// parameter ("NAME.exp_avg"); a parameter without any (frozen) has zeros.
static void check_moments(const char *what, const char *out, const char *oracle_path, int want_step) {
    T5Model m;
    float *host = NULL;
    ModelLoadOptions opt = {.host_weights = &host};
    model_load(&m, out, backend_cpu(), opt);
    AdamWConfig oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    ZeroState z;
    ZeroOptions zo = zero_options_stage(0);
    zero_init(&z, &m, zero_comm_single(), &zo, &oc, host);
    LossScaler scaler = loss_scaler_static(1.0);
    char *ts = path_join(out, "trainer_state.json");
    char *text = read_text_file(ts, NULL);
    cJSON *st = text ? cJSON_Parse(text) : NULL;
    int global_step = st ? (int)cJSON_GetObjectItemCaseSensitive(st, "global_step")->valuedouble : -1;
    zero_load_optimizer(&z, &scaler, out, global_step);
    size_t total = m.lay.total;
    float *mv[2] = {mallocCheck(total * sizeof(float)), mallocCheck(total * sizeof(float))};
    zero_owned_f32_to_host(&z.own.m, m.be, 0, total, mv[0]);
    zero_owned_f32_to_host(&z.own.v, m.be, 0, total, mv[1]);
    StFile want;
    st_open(&want, oracle_path);
    size_t bad = 0, zeros = 0;
    int found = 0;
    for (int i = 0; i < m.lay.count; i++) {
        const ParamSpec *s = &m.lay.specs[i];
        for (int k = 0; k < 2; k++) {
            char name[160];
            snprintf(name, sizeof name, "%s.%s", s->name, k ? "exp_avg_sq" : "exp_avg");
            const StTensor *t = st_find(&want, name);
            float *y = callocCheck(s->numel, sizeof(float));
            if (t && t->numel == s->numel) {
                st_read_f32(&want, t, y);
                found++;
            } else {
                zeros += s->numel;
            }
            bad += count_diff(mv[k] + s->offset, y, s->numel, ST_F32) + (t && t->numel != s->numel);
            free(y);
        }
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s: moments via zero_load_optimizer = DeepSpeed's (%d tensors, %zu frozen zeros), %zu "
             "differ in bits; step %d (want %d), global_step %d", what, found, zeros, bad, z.opt.step, want_step,
             global_step);
    test_check(bad == 0 && found == want.count && z.opt.step == want_step && global_step == want_step, msg);
    st_close(&want);
    free(mv[0]);
    free(mv[1]);
    cJSON_Delete(st);
    free(text);
    free(ts);
    zero_free(&z);
    t5_free(&m);
}

static void check_import(const char *name, const char *root, int steps) {
    char ckpt[256], z2f[256], mom[256];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", root);
    snprintf(z2f, sizeof z2f, "%s/zero_to_fp32.safetensors", root);
    snprintf(mom, sizeof mom, "%s/moments.safetensors", root);
    char *out = tmp_path(name);
    rm_rf(out);
    int rc = run_import(ckpt, out, NULL, NULL);
    char msg[256];
    snprintf(msg, sizeof msg, "import-deepspeed %s: exit %d", root, rc);
    test_check(rc == 0, msg);
    check_weights(root, out, z2f);
    if (path_is_file(mom)) check_moments(root, out, mom, steps);
    free(out);
}

// ---- malformed inputs ----------------------------------------------------------------------

static void copy_file(const char *src, const char *dst) {
    size_t n;
    char *data = read_text_file(src, &n);  // binary-safe: the length is kept
    if (!data) t5_die(__FILE__, __LINE__, "test: cannot read a fixture", src);
    FILE *f = fopenCheck(dst, "wb");
    fwriteCheck(data, 1, n, f, dst);
    fcloseCheck(f, dst);
    free(data);
}

static size_t file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (size_t)sb.st_size : 0;
}

// A model directory: config.json of cfg_dir, pytorch_model.bin a copy of bin.
static char *bin_dir(const char *name, const char *cfg_dir, const char *bin) {
    char *d = tmp_path(name);
    rm_rf(d);
    mkdir_p(d);
    char *c = path_join(cfg_dir, "config.json"), *dc = path_join(d, "config.json"), *db = path_join(d, "pytorch_model.bin");
    copy_file(c, dc);
    copy_file(bin, db);
    free(c);
    free(dc);
    free(db);
    return d;
}

static void patch_byte(const char *path, size_t at, unsigned char v) {
    FILE *f = fopenCheck(path, "r+b");
    if (fseek(f, (long)at, SEEK_SET) != 0) t5_die(__FILE__, __LINE__, "test: seek", path);
    fputc(v, f);
    fcloseCheck(f, path);
}

// Offset of the first occurrence of needle (n bytes) in the file at or after `from`.
static size_t find_bytes(const char *path, const void *needle, size_t n, size_t from) {
    size_t len;
    char *data = read_text_file(path, &len);
    size_t at = (size_t)-1;
    for (size_t i = from; data && i + n <= len && at == (size_t)-1; i++)
        if (!memcmp(data + i, needle, n)) at = i;
    free(data);
    return at;
}

static void do_load(const void *arg) {
    ParamLayout lay;
    free(load_dir(arg, &lay));
}
static void do_bin_open(const void *arg) {
    StFile st;
    torch_bin_open(&st, arg);
}
typedef struct {
    const char *ckpt, *out, *e1, *e2;
} ImportArg;
static void do_import(const void *arg) {
    const ImportArg *a = arg;
    run_import(a->ckpt, a->out, a->e1, a->e2);
}

static void test_bad_bins(void) {
    test_expect_error("strided view", do_bin_open, FIX_BIN "/bad/noncontig.bin", "noncontig.bin: tensor",
                      "is a non-contiguous view (size [18, 16], stride [1, 18])");
    test_expect_error("pickle protocol 4", do_bin_open, FIX_BIN "/bad/protocol4.bin", "protocol4.bin: pickle",
                      "opcode FRAME (0x95) at byte 2");
    test_expect_error("missing storage", do_bin_open, FIX_BIN "/bad/missing_storage.bin", "missing_storage.bin",
                      "storage \"1\" named by archive/data.pkl is missing");
    test_expect_error("not a state dict", do_bin_open, FIX_BIN "/bad/not_a_dict.bin", "not_a_dict.bin",
                      "not a state dict");
    test_expect_error("compressed entries", do_bin_open, FIX_BIN "/bad/compressed.bin", "compressed.bin",
                      "is compressed");
    test_expect_error("safetensors as .bin", do_bin_open, FIX_RELU "/model.safetensors", "model.safetensors",
                      "neither a torch zip file nor a legacy torch pickle");

    // the real torch files, damaged
    const char *zip = FIX_DS "/hf_bin_zip/pytorch_model.bin", *legacy = FIX_DS "/hf_bin_legacy/pytorch_model.bin";
    char *d = bin_dir("bin_trunc_zip", FIX_DS "/hf_bin_zip", zip);
    char *p = path_join(d, "pytorch_model.bin");
    if (truncate(p, (off_t)(file_size(zip) / 2)) != 0) t5_die(__FILE__, __LINE__, "test: truncate", p);
    test_expect_error("zip truncated", do_load, d, "pytorch_model.bin", "end-of-central-directory");
    free(p);
    free(d);
    d = bin_dir("bin_flip_zip", FIX_DS "/hf_bin_zip", zip);
    p = path_join(d, "pytorch_model.bin");
    size_t at = find_bytes(p, "_rebuild_tensor_v2", 18, 0);  // inside data.pkl
    patch_byte(p, at, 'X');
    test_expect_error("zip data.pkl flipped", do_load, d, "pytorch_model.bin", "fails its CRC-32 check");
    free(p);
    free(d);
    d = bin_dir("bin_trunc_legacy", FIX_DS "/hf_bin_legacy", legacy);
    p = path_join(d, "pytorch_model.bin");
    if (truncate(p, (off_t)(file_size(legacy) - 100)) != 0) t5_die(__FILE__, __LINE__, "test: truncate", p);
    test_expect_error("legacy storages truncated", do_load, d, "pytorch_model.bin", "runs past the end of the file");
    if (truncate(p, 200) != 0) t5_die(__FILE__, __LINE__, "test: truncate", p);
    test_expect_error("legacy pickle truncated", do_load, d, "pytorch_model.bin", "truncated");
    free(p);
    free(d);
    // an unknown opcode in the legacy main pickle: the byte after its PROTO (the 3rd pickle
    // after the magic number and the protocol version starts with \x80\x02 too)
    d = bin_dir("bin_op_legacy", FIX_DS "/hf_bin_legacy", legacy);
    p = path_join(d, "pytorch_model.bin");
    size_t sys_info = find_bytes(p, "\x80\x02", 2, 16), main_pkl = find_bytes(p, "\x80\x02", 2, sys_info + 2);
    patch_byte(p, main_pkl + 2, 0x93);  // STACK_GLOBAL (protocol 4)
    test_expect_error("legacy unknown opcode", do_load, d, "pickle (main): opcode STACK_GLOBAL (0x93) at byte 2",
                      "not supported");
    free(p);
    free(d);

    // a .bin of another architecture: a shape and a name that are not the config's
    d = bin_dir("bin_shape", FIX_DS "/hf_bin_zip", FIX_BIN "/zip/pytorch_model.bin");
    test_expect_error("bin wrong shape", do_load, d, "pytorch_model.bin: tensor", "expected shape");
    free(d);
    T5Config cfg;
    hf_resolve_model(FIX_RELU, &cfg);
    cfg.num_decoder_layers = 2;  // the file has decoder.block.2
    d = bin_dir("bin_name", FIX_RELU, FIX_BIN "/zip/pytorch_model.bin");
    char *cp = path_join(d, "config.json");
    t5_config_save_json(&cfg, cp);
    test_expect_error("bin unexpected name", do_load, d, "pytorch_model.bin: unexpected tensor \"decoder.block.2",
                      NULL);
    free(cp);
    free(d);
}

// A copy of a synthetic checkpoint folder to damage.
static char *ckpt_copy(const char *name, const char *src) {
    char *d = tmp_path(name);
    rm_rf(d);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, d);
    if (system(cmd) != 0) t5_die(__FILE__, __LINE__, "test: cp -r failed", cmd);
    return d;
}

static void test_bad_imports(void) {
    const char *src = FIX_SYNTH "/zero2_ws2/checkpoint";
    char *out = tmp_path("imp_bad_out");
    rm_rf(out);
    char *d = ckpt_copy("imp_missing_rank", src);
    char *p = path_join(d, "global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
    unlink(p);
    test_expect_error("ds: a rank missing", do_import, &(ImportArg){.ckpt = d, .out = out}, "expected 2 *_optim_states.pt files",
                      "found 1");
    free(p);
    free(d);
    d = ckpt_copy("imp_trunc", src);
    p = path_join(d, "global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
    if (truncate(p, 1000) != 0) t5_die(__FILE__, __LINE__, "test: truncate", p);
    test_expect_error("ds: optim file truncated", do_import, &(ImportArg){.ckpt = d, .out = out},
                      "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", "end-of-central-directory");
    free(p);
    free(d);
    d = ckpt_copy("imp_nolatest", src);
    p = path_join(d, "latest");
    unlink(p);
    test_expect_error("ds: no latest", do_import, &(ImportArg){.ckpt = d, .out = out}, "latest: cannot read it", "--tag");
    test_check(run_import(d, out, "--tag", "global_step3") == 0 && path_is_dir(out),
               "ds: --tag global_step3 without latest imports");
    rm_rf(out);
    free(p);
    free(d);
    d = ckpt_copy("imp_mp1", src);
    p = path_join(d, "global_step3/mp_rank_01_model_states.pt");
    copy_file(FIX_BIN "/zip/pytorch_model.bin", p);
    test_expect_error("ds: model-parallel rank 1", do_import, &(ImportArg){.ckpt = d, .out = out}, "mp_rank_01_model_states.pt",
                      "tensor- or pipeline-parallel checkpoints are not supported");
    free(p);
    free(d);
    d = ckpt_copy("imp_nocfg", src);
    p = path_join(d, "config.json");
    unlink(p);
    test_expect_error("ds: no config, no --model", do_import, &(ImportArg){.ckpt = d, .out = out}, "has no config.json", "--model");
    test_expect_error("ds: wrong --model", do_import, &(ImportArg){.ckpt = d, .out = out, .e1 = "--model", .e2 = "t5-small"}, "global_step3",
                      "expected shape");
    free(p);
    free(d);
    mkdir_p(out);
    char *busy = path_join(out, "x");
    FILE *f = fopenCheck(busy, "w");
    fcloseCheck(f, busy);
    test_expect_error("ds: OUT not empty", do_import, &(ImportArg){.ckpt = src, .out = out}, "is a directory that is not empty", NULL);
    rm_rf(out);
    free(busy);
    free(out);
}

int main(void) {
    if (!io_tmp_begin("torch_bin")) return 2;
    // .bin directories against their twins
    check_bin_dir(FIX_DS "/hf_bin_zip", FIX_DS "/hf_safetensors", ST_F32, "pytorch_model.bin");
    check_bin_dir(FIX_DS "/hf_bin_legacy", FIX_DS "/hf_safetensors", ST_F32, "pytorch_model.bin");
    check_bin_dir(FIX_DS "/hf_bin_sharded", FIX_DS "/hf_safetensors", ST_F32, "pytorch_model.bin.index.json");
    check_bin_dir(FIX_BIN "/zip", FIX_RELU, ST_F32, "pytorch_model.bin");
    check_bin_dir(FIX_BIN "/legacy", FIX_RELU, ST_F32, "pytorch_model.bin");
    check_bin_dir(FIX_BIN "/zip64", FIX_RELU, ST_F32, "pytorch_model.bin");
    check_bin_dir(FIX_BIN "/sharded", FIX_RELU, ST_F32, "pytorch_model.bin.index.json");
    check_bin_dir(FIX_BIN "/bf16", FIX_RELU, ST_BF16, "pytorch_model.bin");
    check_bin_dir(FIX_BIN "/f16", FIX_RELU, ST_F16, "pytorch_model.bin");
    check_bin_dir(FIX_BIN "/both", FIX_RELU, ST_F32, "model.safetensors");  // its .bin holds zeros

    // DeepSpeed: one rank as DeepSpeed wrote it, several ranks made by the synthetic tool
    check_import("imp_zero2", FIX_DS "/zero2", 2);
    check_import("imp_zero3", FIX_DS "/zero3", 2);
    check_import("imp_zero2_ws2", FIX_SYNTH "/zero2_ws2", 3);
    check_import("imp_zero3_ws3", FIX_SYNTH "/zero3_ws3", 3);
    check_import("imp_zero2_ws3_elastic", FIX_SYNTH "/zero2_ws3_elastic", 3);

    test_bad_bins();
    test_bad_imports();
    rm_rf(g_tmp);
    return test_summary();
}
