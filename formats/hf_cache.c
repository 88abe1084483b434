// formats/hf_cache.c: a model name looked up in the Hugging Face hub cache (see hf_cache.h).
#include "hf_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/check.h"
#include "../common/fileio.h"

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// The hub cache root, as huggingface_hub picks it (constants.py: HF_HUB_CACHE, HF_HOME).
static char *cache_root(void) {
    const char *hub = getenv("HF_HUB_CACHE");
    if (hub && *hub) return path_join(hub, "");
    const char *home = getenv("HF_HOME");
    if (home && *home) return path_join(home, "hub");
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return path_join(xdg, "huggingface/hub");
    const char *user = getenv("HOME");
    if (user && *user) return path_join(user, ".cache/huggingface/hub");
    return NULL;
}

// repo/snapshots/<the commit refs/main names>, when it holds config.json; NULL otherwise.
static char *snapshot_of(const char *repo) {
    char *ref_path = path_join(repo, "refs/main");
    size_t len = 0;
    char *ref = is_regular_file(ref_path) ? read_text_file(ref_path, &len) : NULL;
    free(ref_path);
    if (!ref) return NULL;
    while (len > 0 && (ref[len - 1] == '\n' || ref[len - 1] == '\r' || ref[len - 1] == ' ')) ref[--len] = 0;
    char *snaps = path_join(repo, "snapshots");
    char *snap = strchr(ref, '/') || !*ref ? NULL : path_join(snaps, ref);  // a commit hash, not a path
    free(snaps);
    free(ref);
    if (!snap) return NULL;
    char *cfg = path_join(snap, "config.json");
    int ok = is_regular_file(cfg);
    free(cfg);
    if (ok) return snap;
    free(snap);
    return NULL;
}

char *hf_cache_find(const char *name) {
    if (!name || !*name || path_exists(name) || name[0] == '.' || name[0] == '/') return NULL;
    if (strstr(name, "..") || strchr(name, '/') != strrchr(name, '/')) return NULL;  // org/name at most
    char *root = cache_root();
    if (!root) return NULL;
    // the folder names to try: the name as given (org/name -> models--org--name), and the
    // legacy names' home on the hub (t5-large lives at google-t5/t5-large)
    char folder[2][512];
    const char *slash = strchr(name, '/');
    if (slash)
        snprintf(folder[0], sizeof folder[0], "models--%.*s--%s", (int)(slash - name), name, slash + 1);
    else
        snprintf(folder[0], sizeof folder[0], "models--%s", name);
    snprintf(folder[1], sizeof folder[1], "models--google-t5--%s", name);
    char *found = NULL;
    for (int i = 0; i < (slash ? 1 : 2) && !found; i++) {
        char *repo = path_join(root, folder[i]);
        found = snapshot_of(repo);
        free(repo);
    }
    free(root);
    return found;
}
