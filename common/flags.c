// common/flags.c: command-line flag parsing (see flags.h).
#include "flags.h"

#include <errno.h>
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
    return d <= (len < 6 ? 2 : len / 3);
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

static int is_bool_word(const char *s) {
    return !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False") ||
           !strcmp(s, "1") || !strcmp(s, "0");
}

static void parse_value(const FlagSpec *f, const char *v, const char *command) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FLAG_STRING: *(const char **)f->dst = v; break;
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end || x < -2147483647L || x > 2147483647L)
            t5_fail("%s: --%s expects an integer, found \"%s\"", command, f->name, v);
        *(int *)f->dst = (int)x;
        break;
    }
    case FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (errno || !*v || *end) t5_fail("%s: --%s expects a number, found \"%s\"", command, f->name, v);
        *(double *)f->dst = x;
        break;
    }
    case FLAG_BOOL:
        if (!is_bool_word(v)) t5_fail("%s: --%s expects true or false, found \"%s\"", command, f->name, v);
        *(int *)f->dst = !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1");
        break;
    }
}

void flags_parse(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command) {
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
        const FlagSpec *f = NULL;
        for (int k = 0; k < n; k++)
            if (!strcmp(specs[k].name, name)) f = &specs[k];
        if (!f) {
            const char *names[256];
            int m = n < 256 ? n : 256;
            for (int k = 0; k < m; k++) names[k] = specs[k].name;
            char near[256];
            flags_suggest(name, names, m, near, sizeof near);
            if (near[0]) t5_fail("%s: unknown flag --%s (did you mean %s?)", command, name, near);
            t5_fail("%s: unknown flag --%s (see %s --help)", command, name, command);
        }
        if (f->type == FLAG_BOOL && !eq) {
            if (i + 1 < argc && is_bool_word(argv[i + 1])) parse_value(f, argv[++i], command);
            else *(int *)f->dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) t5_fail("%s: --%s needs a value", command, name);
        parse_value(f, v, command);
    }
}

void flags_print_help(const FlagSpec *specs, int n) {
    for (int k = 0; k < n; k++) printf("  --%-28s %s\n", specs[k].name, specs[k].help);
}
