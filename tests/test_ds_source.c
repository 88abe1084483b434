// tests/test_ds_source.c: --deepspeed as a path, JSON text or base64 of it (deepspeed/ds_source.h):
// the decoder against Python's base64 (both alphabets), the order accelerate's HfDeepSpeedConfig
// takes (an existing path first), the labels the loader's messages use, and that two ranks given
// different JSON texts do not pass the start-up comparison as one run.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../deepspeed/ds_config.h"
#include "../deepspeed/ds_source.h"
#include "../trainer/args.h"
#include "test.h"
#include "test_fork.h"

static void check_decode(const char *in, const char *want) {
    size_t len = 0;
    char *got = ds_source_base64_decode(in, &len);
    char what[200];
    snprintf(what, sizeof what, "base64 \"%s\" -> %s%s%s", in, want ? "\"" : "", want ? want : "not base64",
             want ? "\"" : "");
    test_check(want ? got && len == strlen(want) && !memcmp(got, want, len) : got == NULL, what);
    free(got);
}

static void load_bad_json(const void *arg) {
    DsConfig c;
    ds_config_load_text(&c, DS_SOURCE_JSON_LABEL, (const char *)arg);
}

static void load_missing(const void *arg) {
    char *text = NULL;
    const char *label = ds_source_resolve((const char *)arg, &text);
    DsConfig c;
    if (text) ds_config_load_text(&c, label, text);
    else ds_config_load(&c, label);
}

int main(void) {
    // python3 -c "import base64; print(base64.urlsafe_b64encode(b'...'))" gave these
    check_decode("eyJhIjogMX0=", "{\"a\": 1}");
    check_decode("eyJhIjogMX0", "{\"a\": 1}");           // padding left out: still read
    check_decode("Pj4-Pz8_", ">>>\x3f\x3f\x3f");        // urlsafe alphabet ('-' '_')
    check_decode("Pj4+Pz8/", ">>>\x3f\x3f\x3f");        // standard alphabet ('+' '/')
    check_decode("ds_config.json", NULL);                 // '.' is no base64 digit: a path
    check_decode("abcde", NULL);                          // 5 digits cannot end a quantum
    check_decode("eyJhIjogMX0===", NULL);                 // three pads
    check_decode("", NULL);

    // resolution order
    char dir[] = "/tmp/t5_test_ds_source_XXXXXX";
    if (!mkdtemp(dir)) return 2;
    if (chdir(dir) != 0) return 2;
    char *text = NULL;
    const char *label = ds_source_resolve("{\"zero_optimization\": {\"stage\": 2}}", &text);
    test_check(!strcmp(label, DS_SOURCE_JSON_LABEL) && text && strstr(text, "\"stage\": 2"), "JSON text: label, text");
    DsConfig c;
    ds_config_load_text(&c, label, text);
    test_check((int)c.zero.stage == 2 && !strcmp(c.file, DS_SOURCE_JSON_LABEL), "JSON text loads: stage 2, named by its label");
    free(text);
    label = ds_source_resolve("  \n{\"zero_optimization\": {\"stage\": 1}}", &text);
    test_check(!strcmp(label, DS_SOURCE_JSON_LABEL) && text, "JSON text after whitespace");
    free(text);
    label = ds_source_resolve("eyJ6ZXJvX29wdGltaXphdGlvbiI6IHsic3RhZ2UiOiAzfX0=", &text);  // {"zero_optimization": {"stage": 3}}
    test_check(!strcmp(label, DS_SOURCE_BASE64_LABEL) && text, "base64: label, decoded text");
    ds_config_load_text(&c, label, text);
    test_check((int)c.zero.stage == 3, "base64 loads: stage 3");
    free(text);
    label = ds_source_resolve("WzEsIDJd", &text);  // base64 of [1, 2]: not an object, so a (missing) path
    test_check(!strcmp(label, "WzEsIDJd") && !text, "base64 of a JSON array: taken as a path");
    label = ds_source_resolve("eyJhIjogIngAeSJ9", &text);  // {"a": "x\0y"}: a NUL inside
    test_check(!text, "base64 with a NUL byte inside: not text");
    // an existing file wins even when its name would decode (os.path.exists first)
    FILE *f = fopen("eyJhIjogMX0", "w");
    fputs("{\"zero_optimization\": {\"stage\": 1}}", f);
    fclose(f);
    label = ds_source_resolve("eyJhIjogMX0", &text);
    test_check(!strcmp(label, "eyJhIjogMX0") && !text, "an existing file named like base64 is the file");
    ds_config_load(&c, label);
    test_check((int)c.zero.stage == 1, "and its contents load");
    unlink("eyJhIjogMX0");

    // errors name the source
    test_expect_error("JSON text with a syntax error", load_bad_json, "{\"zero_optimization\": {\"stage\": 2,}}",
                      "--deepspeed (JSON text): invalid JSON at line 1", NULL);
    test_expect_error("JSON text with an unknown key", load_bad_json, "{\"zero_optimizaton\": {}}",
                      "--deepspeed (JSON text): unknown key \"zero_optimizaton\"", NULL);
    test_expect_error("JSON text with a duplicate key", load_bad_json, "{\"fp16\": {}, \"fp16\": {}}",
                      "--deepspeed (JSON text)", "fp16");
    test_expect_error("neither a file, JSON nor base64", load_missing, "no_such_config.json",
                      "no_such_config.json: cannot open the DeepSpeed config", "JSON");

    // two ranks with different JSON texts: different fingerprints (the label is the same)
    TrainArgs a = {0}, b = {0};
    a.deepspeed = b.deepspeed = DS_SOURCE_JSON_LABEL;
    a.deepspeed_text = "{\"zero_optimization\": {\"stage\": 2}}";
    b.deepspeed_text = "{\"zero_optimization\": {\"stage\": 3}}";
    char *fa = train_args_fingerprint(&a), *fb = train_args_fingerprint(&b);
    test_check(strcmp(fa, fb) != 0, "ranks given different --deepspeed JSON texts differ in their fingerprint");
    free(fa);
    free(fb);
    rmdir(dir);
    return test_summary();
}
