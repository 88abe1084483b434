// common/fileio.c: atomic files, directories, copies, JSON saving (see fileio.h).
#include "fileio.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

FILE *atomic_open(AtomicFile *af, const char *path) {
    size_t n = strlen(path);
    af->path = mallocCheck(n + 1);
    memcpy(af->path, path, n + 1);
    af->tmp_path = mallocCheck(n + 5);
    snprintf(af->tmp_path, n + 5, "%s.tmp", path);
    af->f = fopenCheck(af->tmp_path, "wb");
    return af->f;
}

void atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "writing '%s' failed: %s", af->tmp_path, strerror(errno));
        t5_die(__FILE__, __LINE__, msg, "check free disk space and permissions");
    }
    fcloseCheck(af->f, af->tmp_path);
    if (rename(af->tmp_path, af->path) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "renaming '%s' to '%s' failed: %s", af->tmp_path, af->path, strerror(errno));
        t5_die(__FILE__, __LINE__, msg, "check permissions of the output directory");
    }
    free(af->path);
    free(af->tmp_path);
    af->f = NULL;
}

void mkdir_p(const char *dir) {
    size_t n = strlen(dir);
    char *p = mallocCheck(n + 1);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            t5_fail("cannot create directory '%s': %s", p, strerror(errno));
        p[i] = c;
    }
    if (!path_is_dir(dir)) t5_fail("'%s' exists and is not a directory", dir);
    free(p);
}

int path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int dir_is_nonempty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            found = 1;
            break;
        }
    closedir(d);
    return found;
}

void file_copy_atomic(const char *src, const char *dst) {
    FILE *in = fopenCheck(src, "rb");
    AtomicFile af;
    FILE *out = atomic_open(&af, dst);
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0) fwriteCheck(buf, 1, got, out, af.tmp_path);
    if (ferror(in)) t5_fail("reading '%s' failed: %s", src, strerror(errno));
    fclose(in);
    atomic_commit(&af);
}

void json_save_atomic(const cJSON *root, const char *path) {
    char *text = cJSON_Print(root);
    if (!text) t5_die(__FILE__, __LINE__, "cJSON_Print failed (out of memory)", NULL);
    // cJSON indents with tabs and puts a tab after ':'; HF writes indent=2 and ": ".
    // A tab inside a string is escaped by cJSON, so every raw tab is layout.
    size_t n = strlen(text), k = 0;
    char *out = mallocCheck(2 * n + 2);
    for (size_t i = 0; i < n; i++) {
        if (text[i] != '\t') out[k++] = text[i];
        else if (i > 0 && text[i - 1] == ':') out[k++] = ' ';
        else out[k++] = ' ', out[k++] = ' ';
    }
    out[k++] = '\n';
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    fwriteCheck(out, 1, k, f, af.tmp_path);
    free(out);
    atomic_commit(&af);
    cJSON_free(text);
}
