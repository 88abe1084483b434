// trainer/log_format.c: HF's console formatting (see log_format.h). The Python functions each
// piece follows: float.__repr__ (Objects/floatobject.c, 'r' mode of Python/pystrtod.c),
// round() (floatobject.c double_round), format(v, '.4g'), and transformers 5.17's
// ProgressCallback.on_log, trainer_pt_utils.metrics_format / _secs2timedelta / log_metrics.
#include "log_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

// The shortest decimal digits that read back as v (v finite, > 0): digits[] without a point,
// and the decimal exponent decpt (v = 0.d1d2... x 10^decpt), as dtoa's mode 0. At each length
// the correctly rounded digits come first; when they miss (only next to a power of two, whose
// lower neighbour is closer than its upper one) the neighbour on v's other side is tried.
static void shortest_digits(double v, char *digits, int *decpt) {
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        double got = strtod(buf, NULL);
        char *e = strchr(buf, 'e');
        int exp10 = atoi(e + 1);
        unsigned long long m = 0;
        for (char *c = buf; c < e; c++)
            if (*c != '.') m = m * 10 + (unsigned long long)(*c - '0');
        if (got != v && p < 17) {  // m +- 1 in the last place, on v's other side
            unsigned long long alt = got < v ? m + 1 : m - 1;
            snprintf(buf, sizeof buf, "%llue%d", alt, exp10 - (p - 1));
            if (alt == 0 || strtod(buf, NULL) != v) continue;
            m = alt;
        }
        // digits of m (its length may differ from p after a carry), trailing zeros dropped
        char md[32];
        int len = snprintf(md, sizeof md, "%llu", m);
        *decpt = exp10 - (p - 1) + len;
        while (len > 1 && md[len - 1] == '0') len--;
        md[len] = '\0';
        snprintf(digits, 32, "%s", md);
        return;
    }
}

void pyfloat_repr(double v, char *out, size_t cap) {
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    const char *sign = signbit(v) ? "-" : "";
    if (v == 0) {
        snprintf(out, cap, "%s0.0", sign);
        return;
    }
    char d[32], *o = out;
    int decpt;
    shortest_digits(fabs(v), d, &decpt);
    int nd = (int)strlen(d);
    char body[64];
    size_t b = 0;
    if (decpt <= -4 || decpt > 16) {  // Python's repr uses an exponent outside 1e-4 <= |v| < 1e16
        int exp = decpt - 1;
        b += (size_t)snprintf(body + b, sizeof body - b, "%c%s%s", d[0], nd > 1 ? "." : "", d + 1);
        snprintf(body + b, sizeof body - b, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (decpt <= 0) {  // 0.000ddd
        b += (size_t)snprintf(body, sizeof body, "0.");
        for (int i = 0; i < -decpt; i++) body[b++] = '0';
        snprintf(body + b, sizeof body - b, "%s", d);
    } else if (decpt >= nd) {  // ddd000.0
        b += (size_t)snprintf(body, sizeof body, "%s", d);
        for (int i = 0; i < decpt - nd; i++) body[b++] = '0';
        snprintf(body + b, sizeof body - b, ".0");
    } else {  // dd.ddd
        snprintf(body, sizeof body, "%.*s.%s", decpt, d, d + decpt);
    }
    snprintf(o, cap, "%s%s", sign, body);
}

void pyfloat_format_g4(double v, char *out, size_t cap) {
    if (isnan(v)) snprintf(out, cap, "nan");  // glibc would say "-nan" for a negative one; Python never does
    else snprintf(out, cap, "%.4g", v);       // the same rules as Python's 'g' (exponent when < 1e-4 or >= 1e4)
}

double pyfloat_round(double v, int ndigits) {
    if (!isfinite(v)) return v;
    // the exact decimal value rounded to ndigits places (glibc prints exactly, ties to even),
    // read back: the same two steps as Python's double_round (dtoa mode 3, then strtod)
    char buf[400];
    snprintf(buf, sizeof buf, "%.*f", ndigits, v);
    return strtod(buf, NULL);
}

int log_key_is_int(const char *key) {
    static const char *const ints[] = {"step", "num_input_tokens_seen", "skipped_steps", "train_samples",
                                       "eval_samples", "predict_samples", "test_samples"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i])) return 1;
    return 0;
}

// Python's d[key] = v: a key already there keeps its place.
static void dict_set(cJSON *d, const char *key, double v) {
    if (cJSON_GetObjectItemCaseSensitive(d, key)) cJSON_ReplaceItemInObjectCaseSensitive(d, key, cJSON_CreateNumber(v));
    else cJSON_AddNumberToObject(d, key, v);
}

void log_record_add_hf_keys(cJSON *logs, const double *epoch, const double *tokens) {
    if (epoch) dict_set(logs, "epoch", *epoch);
    if (tokens) dict_set(logs, "num_input_tokens_seen", *tokens);
}

// A Python int's str() of a whole double.
static void pyint_str(double v, char *out, size_t cap) { snprintf(out, cap, "%.0f", v); }

char *log_format_line(const cJSON *logs) {
    size_t cap = 256, len = 0;
    char *s = mallocCheck(cap);
    len += (size_t)snprintf(s, cap, "{");
    const cJSON *it;
    int first = 1;
    cJSON_ArrayForEach(it, logs) {
        if (!strcmp(it->string, "total_flos") || !cJSON_IsNumber(it)) continue;  // on_log pops total_flos
        char val[64];
        int is_int = log_key_is_int(it->string);
        if (is_int) pyint_str(it->valuedouble, val, sizeof val);
        else pyfloat_format_g4(it->valuedouble, val, sizeof val);
        // str(dict): 'key': 'value' for the formatted floats (now strings), 'key': value for ints
        size_t need = strlen(it->string) + strlen(val) + 16;
        if (len + need >= cap) {
            cap = 2 * (len + need);
            s = reallocCheck(s, cap);
        }
        len += (size_t)snprintf(s + len, cap - len, "%s'%s': %s%s%s", first ? "" : ", ", it->string, is_int ? "" : "'",
                                val, is_int ? "" : "'");
        first = 0;
    }
    s = reallocCheck(s, len + 2);
    snprintf(s + len, 2, "}");
    return s;
}

// _secs2timedelta: str(timedelta(seconds=int(secs))) + "." + the hundredths, truncated.
static void format_runtime(double secs, char *out, size_t cap) {  // cap >= 128
    long whole = (long)secs;  // int(): toward zero
    int cs = (int)(fabs(secs - (double)whole) * 100);
    long days = whole >= 0 ? whole / 86400 : -((-whole + 86399) / 86400);  // timedelta normalizes to days >= -N
    long rest = whole - days * 86400;
    char day[32] = "";
    if (days) snprintf(day, sizeof day, "%ld day%s, ", days, labs(days) == 1 ? "" : "s");
    snprintf(out, cap, "%s%ld:%02ld:%02ld.%02d", day, rest / 3600, (rest / 60) % 60, rest % 60, cs);
}

// metrics_format's value for one key, as str() gives it.
static void metric_value(const cJSON *it, char *out, size_t cap) {
    double v = it->valuedouble;
    if (strstr(it->string, "_runtime")) format_runtime(v, out, cap);
    else if (!strcmp(it->string, "total_flos")) snprintf(out, cap, "%.0fGF", floor(trunc(v) / 1073741824.0));  // int(v) >> 30
    else if (log_key_is_int(it->string)) pyint_str(v, out, cap);
    else pyfloat_repr(pyfloat_round(v, 4), out, cap);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void log_format_metrics(FILE *out, const char *split, const cJSON *metrics) {
    int n = cJSON_GetArraySize(metrics), kw = 0, vw = 0, k = 0;
    const char **keys = callocCheck((size_t)(n ? n : 1), sizeof *keys);
    char(*vals)[128] = callocCheck((size_t)(n ? n : 1), sizeof *vals);
    const cJSON *it;
    cJSON_ArrayForEach(it, metrics) keys[k++] = it->string;
    qsort(keys, (size_t)n, sizeof *keys, cmp_str);  // sorted(metrics_formatted.keys()): code-point order
    for (k = 0; k < n; k++) {
        metric_value(cJSON_GetObjectItemCaseSensitive(metrics, keys[k]), vals[k], sizeof vals[k]);
        if ((int)strlen(keys[k]) > kw) kw = (int)strlen(keys[k]);
        if ((int)strlen(vals[k]) > vw) vw = (int)strlen(vals[k]);
    }
    fprintf(out, "***** %s metrics *****\n", split);
    for (k = 0; k < n; k++) fprintf(out, "  %-*s = %*s\n", kw, keys[k], vw, vals[k]);
    free(keys);
    free(vals);
}
