// common/flags.c: command-line flag parsing (see flags.h).
#include "flags.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static int close_enough(const char *word, int d) {
    int len = (int)strlen(word);
    return d <= (len <= 4 ? 1 : len < 6 ? 2 : len / 3);  // a 3-letter word 2 edits away shares one letter
}

const char *flags_closest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int bestd = 1 << 30;
    for (int i = 0; i < n; i++) {
        int dd = edit_distance(word, names[i]);
        if (dd < bestd) {
            bestd = dd;
            best = names[i];
        }
    }
    return close_enough(word, bestd) ? best : NULL;
}

// "--a", or "--a or --b" when several names are equally close; "" when none is close.
static void flags_suggest(const char *word, const char *const *names, int n, char *out, size_t cap) {
    int bestd = 1 << 30;
    for (int i = 0; i < n; i++) {
        int dd = edit_distance(word, names[i]);
        if (dd < bestd) bestd = dd;
    }
    out[0] = '\0';
    if (!close_enough(word, bestd)) return;
    size_t k = 0;
    for (int i = 0; i < n && k < cap; i++)
        if (edit_distance(word, names[i]) == bestd)
            k += (size_t)snprintf(out + k, cap - k, "%s--%s", k ? " or " : "", names[i]);
}

static int is_true_word(const char *s) { return !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "1"); }

static int is_bool_word(const char *s) {
    return !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False") ||
           !strcmp(s, "1") || !strcmp(s, "0");
}

static void parse_value(const FlagSpec *f, const char *v, const char *command) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FLAG_STRING:
        if (f->dst) *(const char **)f->dst = v;
        break;
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end || x < -2147483647L || x > 2147483647L)
            t5_fail("%s: --%s expects an integer, found \"%s\"", command, f->name, v);
        if (f->dst) *(int *)f->dst = (int)x;
        break;
    }
    case FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (errno || !*v || *end) t5_fail("%s: --%s expects a number, found \"%s\"", command, f->name, v);
        // every number flag means a finite value that an fp32 holds (rates, ratios, counts of
        // steps): inf, nan and 1e300 would become inf/nan weights or a wrapped step count
        if (!isfinite(x) || fabs(x) > FLT_MAX)
            t5_fail("%s: --%s expects a finite number (at most %.1e in magnitude), found \"%s\"", command, f->name,
                    FLT_MAX, v);
        if (f->dst) *(double *)f->dst = x;
        break;
    }
    case FLAG_BOOL:
        if (!is_bool_word(v)) t5_fail("%s: --%s expects true or false, found \"%s\"", command, f->name, v);
        if (f->dst) *(int *)f->dst = is_true_word(v);
        break;
    }
}

// Unknown flags are collected and reported together: one run shows every misspelling.
typedef struct {
    char text[2048];
    int count, suggested;
} Unknown;

static void unknown_add(Unknown *u, const char *name, const FlagSpec *specs, int n) {
    const char *names[512];
    int m = n < 512 ? n : 512;
    for (int k = 0; k < m; k++) names[k] = specs[k].name;
    char near[256];
    flags_suggest(name, names, m, near, sizeof near);
    size_t len = strlen(u->text);
    if (len + 1 >= sizeof u->text) return;
    if (near[0]) {
        snprintf(u->text + len, sizeof u->text - len, "%s--%s (did you mean %s?)", u->count ? ", " : "", name, near);
        u->suggested = 1;
    } else {
        snprintf(u->text + len, sizeof u->text - len, "%s--%s", u->count ? ", " : "", name);
    }
    u->count++;
}

void flags_parse_given(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command,
                       const char **given) {
    Unknown unknown = {{0}, 0, 0};
    if (given)
        for (int k = 0; k < n; k++) given[k] = NULL;
    for (int i = start; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0)
            t5_fail("%s: unexpected argument \"%s\" (flags start with --; see %s --help)", command, arg, command);
        char name[128];
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name) t5_fail("%s: flag \"%s\" is too long", command, arg);
        memcpy(name, arg + 2, len);
        name[len] = '\0';
        int fk = -1;
        for (int k = 0; k < n; k++)
            if (!strcmp(specs[k].name, name)) fk = k;
        if (fk < 0) {
            unknown_add(&unknown, name, specs, n);
            // its value, if it has one, is not a flag either (every argument here is a flag)
            if (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++;
            continue;
        }
        const FlagSpec *f = &specs[fk];
        const char *v;
        if (f->type == FLAG_BOOL && !eq) {
            v = i + 1 < argc && is_bool_word(argv[i + 1]) ? argv[++i] : "true";
        } else {
            v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) t5_fail("%s: --%s needs a value", command, name);
        }
        parse_value(f, v, command);
        if (given) given[fk] = f->type == FLAG_BOOL ? (is_true_word(v) ? "true" : "false") : v;
    }
    if (unknown.count == 1 && !unknown.suggested)
        t5_fail("%s: unknown flag %s (see %s --help)", command, unknown.text, command);
    if (unknown.count == 1) t5_fail("%s: unknown flag %s", command, unknown.text);
    if (unknown.count > 1) t5_fail("%s: unknown flags %s (see %s --help)", command, unknown.text, command);
}

void flags_parse(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command) {
    flags_parse_given(argc, argv, start, specs, n, command, NULL);
}

int flags_parse_words(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command,
                      const char **words) {
    char **fargv = mallocCheck(sizeof(char *) * (size_t)(argc + 1));
    int nw = 0, fn = 0;
    for (int i = 0; i < start; i++) fargv[fn++] = argv[i];
    for (int i = start; i < argc; i++) {
        if (argv[i][0] != '-') {
            words[nw++] = argv[i];
            continue;
        }
        fargv[fn++] = argv[i];
        int takes_value = 0;
        if (!strchr(argv[i], '=') && !strncmp(argv[i], "--", 2))
            for (int k = 0; k < n; k++)
                if (!strcmp(specs[k].name, argv[i] + 2)) takes_value = specs[k].type != FLAG_BOOL;
        if (takes_value && i + 1 < argc) fargv[fn++] = argv[++i];
    }
    fargv[fn] = NULL;
    flags_parse(fn, fargv, start, specs, n, command);
    free(fargv);
    return nw;
}

void flags_print_help(const FlagSpec *specs, int n) {
    for (int k = 0; k < n; k++) printf("  --%-28s %s\n", specs[k].name, specs[k].help);
}
