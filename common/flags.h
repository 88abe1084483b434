// common/flags.h: table-driven command-line flags with HF Trainer spelling
// (--name value, --name=value; booleans as --name or --name true|false).
// Unknown flags are one error naming every one of them, each with the closest known
// name; a value that does not parse is an error naming the flag and the expected type.
// A number (FLAG_FLOAT) must be finite and within fp32's range: inf, nan and 1e300 are
// errors (FLAG_INT: within int).
#pragma once

typedef enum { FLAG_STRING = 0, FLAG_INT, FLAG_FLOAT, FLAG_BOOL } FlagType;

typedef struct {
    const char *name;   // without the leading "--"
    FlagType type;
    void *dst;          // const char ** / int * / double * / int * (bool); NULL: the value is
                        // checked for its type but not stored (a flag the caller judges by
                        // its given text: accepted with a notice, or refused)
    const char *help;
} FlagSpec;

// Parse argv[start..argc) against specs; exits with a one-line error on bad input.
void flags_parse(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command);
// The same, and given[k] (n entries) = the value text of specs[k] as given on the command
// line (a boolean as "true" or "false", a bare boolean flag as "true"), NULL when not given.
void flags_parse_given(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command,
                       const char **given);
// For commands that take paths as well as flags (plot, export, import-deepspeed): the words
// of argv[start..argc) that are neither a flag nor a flag's value (a flag of specs other than
// a boolean takes the next word unless it is written --name=value) go to words[] (argc
// entries), in order; the rest is parsed as flags_parse does. Returns the count of words.
int flags_parse_words(int argc, char **argv, int start, const FlagSpec *specs, int n, const char *command,
                      const char **words);
// Print "  --name  help" lines.
void flags_print_help(const FlagSpec *specs, int n);
// Closest name to `word` among `names` (edit distance), or NULL if none is close.
const char *flags_closest(const char *word, const char *const *names, int n);
