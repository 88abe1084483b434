// tests/test_log_format.c: train_t5's console lines against the ones transformers 5.17 printed
// for the same metrics (tests/fixtures/hf_log_lines.json, made by
// tools/make_log_format_fixture.py with HF's own Trainer.log, ProgressCallback/PrinterCallback
// and log_metrics):
//   records   each record HF's Trainer.log got: our log_record_add_hf_keys + log_format_line give
//             the same printed line, byte for byte, and the same log_history entry (keys in
//             HF's order, every value exactly)
//   metrics   each metrics dict: log_format_metrics prints HF's "***** split metrics *****" block
//   repr      Python's float repr / round / .4g on values around the switches (exponent at 1e-4
//             and 1e16, ties), checked against the figures Python gives
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../trainer/log_format.h"
#include "test.h"
#include "test_files.h"

#define FIXTURE "tests/fixtures/hf_log_lines.json"

// The fixture writes nan/inf as {"float": "nan"} (JSON has neither): numbers back.
static cJSON *decode(const cJSON *v) {
    if (cJSON_IsObject(v)) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "float");
        if (f && cJSON_IsString(f) && cJSON_GetArraySize(v) == 1)
            return cJSON_CreateNumber(strtod(f->valuestring, NULL));  // "nan", "inf", "-inf"
        cJSON *o = cJSON_CreateObject();
        const cJSON *it;
        cJSON_ArrayForEach(it, v) cJSON_AddItemToObject(o, it->string, decode(it));
        return o;
    }
    return cJSON_Duplicate(v, 1);
}

static int same_number(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

// Same keys in the same order, the same values.
static int same_entry(const cJSON *got, const cJSON *want) {
    const cJSON *g = got ? got->child : NULL, *w = want ? want->child : NULL;
    for (; g && w; g = g->next, w = w->next)
        if (strcmp(g->string, w->string) != 0 || !same_number(g->valuedouble, w->valuedouble)) return 0;
    return !g && !w;
}

static void check_records(const cJSON *recs) {
    int i = 0;
    const cJSON *rec;
    cJSON_ArrayForEach(rec, recs) {
        i++;
        cJSON *logs = decode(cJSON_GetObjectItemCaseSensitive(rec, "logs"));
        cJSON *want_hist = decode(cJSON_GetObjectItemCaseSensitive(rec, "history"));
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(rec, "epoch");
        const cJSON *tok = cJSON_GetObjectItemCaseSensitive(rec, "num_input_tokens_seen");
        double epoch = ep->valuedouble, tokens = cJSON_IsNumber(tok) ? tok->valuedouble : 0;
        log_record_add_hf_keys(logs, cJSON_IsNumber(ep) ? &epoch : NULL, cJSON_IsNumber(tok) ? &tokens : NULL);
        char *line = log_format_line(logs);
        const char *want = cJSON_GetObjectItemCaseSensitive(rec, "line")->valuestring;
        char buf[1200];
        if (!strcmp(line, want)) snprintf(buf, sizeof buf, "record %d line as HF's: %s", i, line);
        else snprintf(buf, sizeof buf, "record %d line\n         got  %s\n         want %s", i, line, want);
        test_check(!strcmp(line, want), buf);
        cJSON_AddNumberToObject(logs, "step", cJSON_GetObjectItemCaseSensitive(rec, "step")->valuedouble);
        snprintf(buf, sizeof buf, "record %d: log_history entry in HF's key order, every value exact", i);
        test_check(same_entry(logs, want_hist), buf);
        free(line);
        cJSON_Delete(logs);
        cJSON_Delete(want_hist);
    }
}

static void check_metrics(const cJSON *cases) {
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        i++;
        cJSON *met = decode(cJSON_GetObjectItemCaseSensitive(c, "metrics"));
        const char *split = cJSON_GetObjectItemCaseSensitive(c, "split")->valuestring;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) t5_fail("open_memstream failed");
        log_format_metrics(f, split, met);
        fclose(f);
        // HF's lines, joined
        size_t cap = 1, n = 0;
        const cJSON *l;
        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "lines")) cap += strlen(l->valuestring) + 1;
        char *want = mallocCheck(cap);
        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(c, "lines")) n += (size_t)sprintf(want + n, "%s\n", l->valuestring);
        want[n] = '\0';
        char buf[4096];
        snprintf(buf, sizeof buf, "metrics block %d (%s), line for line%s%s%s%s", i, split,
                 strcmp(text, want) ? "\n--- got\n" : "", strcmp(text, want) ? text : "",
                 strcmp(text, want) ? "--- want\n" : "", strcmp(text, want) ? want : "");
        test_check(!strcmp(text, want), buf);
        free(text);
        free(want);
        cJSON_Delete(met);
    }
}

// Python 3.11's answers, typed in from the interpreter: repr(v), f"{v:.4g}", repr(round(v, 4)).
static void check_python_floats(void) {
    struct { double v; const char *repr, *g4, *round4; } t[] = {
        {0.1, "0.1", "0.1", "0.1"},
        {1e-05, "1e-05", "1e-05", "0.0"},
        {0.0001, "0.0001", "0.0001", "0.0001"},
        {1e16, "1e+16", "1e+16", "1e+16"},
        {1e15, "1000000000000000.0", "1e+15", "1000000000000000.0"},
        {31.0, "31.0", "31", "31.0"},
        {2.675, "2.675", "2.675", "2.675"},
        {0.00015, "0.00015", "0.00015", "0.0001"},  // a little below the tie in binary
        {0.00025, "0.00025", "0.00025", "0.0003"},  // a little above it
        {0.12345, "0.12345", "0.1235", "0.1235"},
        {1.00005, "1.00005", "1", "1.0001"},
        {8.61085325331505, "8.61085325331505", "8.611", "8.6109"},
        {5e-324, "5e-324", "4.941e-324", "0.0"},
        {1.7976931348623157e308, "1.7976931348623157e+308", "1.798e+308", "1.7976931348623157e+308"},
        {-0.0, "-0.0", "-0", "-0.0"},
        {-2.5e-07, "-2.5e-07", "-2.5e-07", "-0.0"},
        {123456.789, "123456.789", "1.235e+05", "123456.789"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char r[64], g[64], r4[64], buf[400];
        pyfloat_repr(t[i].v, r, sizeof r);
        pyfloat_format_g4(t[i].v, g, sizeof g);
        pyfloat_repr(pyfloat_round(t[i].v, 4), r4, sizeof r4);
        snprintf(buf, sizeof buf, "python floats %-26s repr %s, .4g %s, round(v, 4) %s", t[i].repr, r, g, r4);
        test_check(!strcmp(r, t[i].repr) && !strcmp(g, t[i].g4) && !strcmp(r4, t[i].round4), buf);
    }
}

int main(void) {
    cJSON *fx = test_load_json(FIXTURE, " (python3 tools/make_log_format_fixture.py --out " FIXTURE ")");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(fx, "transformers");
    char buf[128];
    snprintf(buf, sizeof buf, "fixture made by transformers %s (want 5.17.0)", cJSON_IsString(ver) ? ver->valuestring : "?");
    test_check(cJSON_IsString(ver) && !strcmp(ver->valuestring, "5.17.0"), buf);
    check_records(cJSON_GetObjectItemCaseSensitive(fx, "records"));
    check_metrics(cJSON_GetObjectItemCaseSensitive(fx, "metrics"));
    check_python_floats();
    cJSON_Delete(fx);
    return test_summary();
}
