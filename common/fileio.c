// common/fileio.c: atomic files, directories, copies, JSON saving (see fileio.h).
#include "fileio.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "crc32c.h"
#include "file_open.h"

// ---- what an error exit removes ---------------------------------------------------------
// Every error ends in exit(1) (common/check.h); the atexit handler removes the temp files
// and unfinished directories registered here, so a failed write (ENOSPC, EFBIG) leaves
// the old file or nothing, never a half-written one.

typedef struct {
    char *path;
    int tree;  // 1: a directory, removed with what it holds
} Pending;
static Pending *g_pending;
static int g_npending, g_cap_pending, g_handler;

static void remove_pending(void) {
    for (int i = g_npending - 1; i >= 0; i--) {
        if (g_pending[i].tree) remove_tree(g_pending[i].path);
        else unlink(g_pending[i].path);
        free(g_pending[i].path);
    }
    g_npending = 0;
}

static void pending_add(const char *path, int tree) {
    if (!g_handler) {
        atexit(remove_pending);
        g_handler = 1;
    }
    if (g_npending == g_cap_pending) {
        g_cap_pending = g_cap_pending ? 2 * g_cap_pending : 8;
        g_pending = reallocCheck(g_pending, (size_t)g_cap_pending * sizeof *g_pending);
    }
    size_t n = strlen(path) + 1;
    g_pending[g_npending].path = mallocCheck(n);
    memcpy(g_pending[g_npending].path, path, n);
    g_pending[g_npending++].tree = tree;
}

void fileio_remove_at_exit(const char *dir) { pending_add(dir, 1); }

void fileio_keep(const char *path) {
    for (int i = g_npending - 1; i >= 0; i--)
        if (!strcmp(g_pending[i].path, path)) {
            free(g_pending[i].path);
            g_pending[i] = g_pending[--g_npending];
            return;
        }
}

static int remove_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;  // go on: remove what can be removed
}

void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

// The rename would replace a FIFO, socket or device node at path (as root: /dev/null itself):
// refused. A symlink is replaced, as ever.
void atomic_check_target(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode))
        t5_fail("%s: is %s, where train_t5 writes a file; HINT: move it out of the way, or write elsewhere", path,
                file_kind_name(st.st_mode));
}

FILE *atomic_open(AtomicFile *af, const char *path) {
    size_t n = strlen(path);
    af->path = mallocCheck(n + 1);
    memcpy(af->path, path, n + 1);
    af->tmp_path = mallocCheck(n + 5);
    snprintf(af->tmp_path, n + 5, "%s.tmp", path);
    if (path_is_dir(af->tmp_path) || path_is_dir(path))
        t5_fail("%s: is a directory, where train_t5 writes a file; HINT: move it out of the way",
                path_is_dir(path) ? path : af->tmp_path);
    atomic_check_target(path);
    af->f = fopenCheck(af->tmp_path, "wb");  // a FIFO at the temp path: refused there, never waited on
    pending_add(af->tmp_path, 0);
    return af->f;
}

void atomic_commit(AtomicFile *af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "writing '%s' failed: %s", af->tmp_path, strerror(errno));
        t5_die(__FILE__, __LINE__, msg, "free disk space (df), check the file-size limit (ulimit -f) and "
               "permissions, then run again; the unfinished file was removed");
    }
    fcloseCheck(af->f, af->tmp_path);
    if (rename(af->tmp_path, af->path) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "renaming '%s' to '%s' failed: %s", af->tmp_path, af->path, strerror(errno));
        t5_die(__FILE__, __LINE__, msg, "check permissions of the output directory");
    }
    fileio_keep(af->tmp_path);
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

int path_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
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

int file_crc32c(const char *path, size_t chunk_bytes, uint32_t *crc, uint64_t *bytes) {
    FILE *f = file_open_regular(path, "rb", NULL);
    if (!f) return 0;
    unsigned char *buf = mallocCheck(chunk_bytes ? chunk_bytes : 1);
    uint32_t c = 0;
    uint64_t total = 0;
    for (;;) {
        size_t got = fread(buf, 1, chunk_bytes ? chunk_bytes : 1, f);
        c = crc32c_update(c, buf, got);
        total += got;
        if (got < (chunk_bytes ? chunk_bytes : 1)) break;
    }
    if (ferror(f)) t5_fail("%s: read error while checksumming (%s); HINT: check the disk, then resume from an earlier "
                           "checkpoint", path, strerror(errno));
    fclose(f);
    freeCheck(buf);
    *crc = c;
    *bytes = total;
    return 1;
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

typedef struct {
    const char *key;  // the source's key (it outlives the copy's construction)
    cJSON *value;     // the sorted copy of its value
} KeyedItem;

static int cmp_keyed(const void *a, const void *b) {
    return strcmp(((const KeyedItem *)a)->key, ((const KeyedItem *)b)->key);  // code-point order, as Python
}

cJSON *json_sorted_copy(const cJSON *item) {
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) return cJSON_Duplicate(item, 1);
    int n = cJSON_GetArraySize(item), k = 0;
    KeyedItem *kids = callocCheck((size_t)(n ? n : 1), sizeof *kids);
    const cJSON *it;
    cJSON_ArrayForEach(it, item) kids[k++] = (KeyedItem){it->string, json_sorted_copy(it)};
    int obj = cJSON_IsObject(item);
    if (obj) qsort(kids, (size_t)n, sizeof *kids, cmp_keyed);
    cJSON *out = obj ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!out) t5_die(__FILE__, __LINE__, "cJSON allocation failed (out of memory)", NULL);
    for (int i = 0; i < n; i++) {
        if (obj) cJSON_AddItemToObject(out, kids[i].key, kids[i].value);  // replaces the copy's own key
        else cJSON_AddItemToArray(out, kids[i].value);
    }
    free(kids);
    return out;
}
