// trainer/output_dir.c: --output_dir before the run writes into it (see output_dir.h):
// checked, locked against a second run, created late, and cleaned up after an error.
#include "output_dir.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/file_open.h"
#include "../common/fileio.h"
#include "../common/json_read.h"
#include "run.h"

#define LOCK_NAME ".train_t5.lock"

// The files a run writes into --output_dir itself (the checkpoint-N directories aside).
static const char *const OUTPUT_FILES[] = {"config.json", "model.safetensors", "spiece.model", "trainer_state.json",
                                           "train_results.json", "eval_results.json", "predict_results.json",
                                           "all_results.json", "generated_predictions.txt", LOCK_NAME};

static char *g_created;     // --output_dir, when this run created it
static char *g_lock_path;   // the lock file this run holds
static int g_lock_fd = -1;

// At exit: the lock file goes (the lock itself goes with the process), then a directory
// this run created and left empty.
static void output_dir_at_exit(void) {
    if (g_lock_path) unlink(g_lock_path);
    if (g_created) rmdir(g_created);  // only an empty one is removed
}

static void register_at_exit(void) {
    static int done;
    if (!done) atexit(output_dir_at_exit);
    done = 1;
}

// The nearest directory of `path` that exists (path itself, or an ancestor).
static char *existing_ancestor(const char *path) {
    size_t n = strlen(path);
    char *p = mallocCheck(n + 2);
    memcpy(p, path, n + 1);
    while (!path_exists(p)) {
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == '\0') {  // "a/b/" -> "a/b"
            *slash = '\0';
            slash = strrchr(p, '/');
        }
        if (!slash) {
            snprintf(p, n + 2, ".");
            break;
        }
        if (slash == p) {
            p[1] = '\0';  // "/"
            break;
        }
        *slash = '\0';
    }
    return p;
}

// One flock'ed file in the directory: a second run on the same --output_dir is refused,
// naming the first one's pid. The lock goes with the process however it ends; the file is
// unlinked at exit, so a run that takes it checks it still holds the file at that path.
void output_dir_lock_as(const char *dir, const char *what) {
    if (g_lock_fd >= 0) return;
    char *path = path_join(dir, LOCK_NAME);
    for (;;) {
        int fd = file_open_regular_fd(path, O_RDWR | O_CREAT, 0644, "the run's lock file");  // not a FIFO
        if (fd < 0)
            t5_fail("%s %s: cannot create %s (%s); HINT: it must be a writable directory", what, dir, path,
                    strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            char who[128] = "";
            ssize_t k = read(fd, who, sizeof who - 1);
            who[k > 0 ? k : 0] = '\0';
            who[strcspn(who, "\n")] = '\0';
            if (err == EWOULDBLOCK)
                t5_fail("%s %s is in use by another train_t5 run (%s; it holds %s); HINT: wait for it to end, "
                        "or give this command another directory", what, dir, who[0] ? who : "its pid is not written yet",
                        path);
            t5_fail("%s %s: cannot lock %s (%s)", what, dir, path, strerror(err));
        }
        struct stat held, now;
        if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
            g_lock_fd = fd;
            break;
        }
        close(fd);  // the file was unlinked by the run that held it: take the new one
    }
    char host[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    char text[160];
    int len = snprintf(text, sizeof text, "pid %d on host %s\n", (int)getpid(), host);
    if (ftruncate(g_lock_fd, 0) != 0 || pwrite(g_lock_fd, text, (size_t)len, 0) != len)
        t5_fail("%s %s: cannot write %s (%s); HINT: free disk space", what, dir, path, strerror(errno));
    g_lock_path = path;
    register_at_exit();
}

static void output_dir_lock(const char *dir) { output_dir_lock_as(dir, "--output_dir"); }

// Anything in dir besides the lock file (a stale one of a run that was killed)?
static int has_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        found = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK_NAME);
    closedir(d);
    return found;
}

// What the run will write over must be something it can write over: the files it writes
// (not a directory of that name), and every checkpoint-N directory (a writable directory).
static void check_obstacles(const char *dir) {
    for (size_t i = 0; i < sizeof OUTPUT_FILES / sizeof OUTPUT_FILES[0]; i++) {
        char *p = path_join(dir, OUTPUT_FILES[i]);
        struct stat st;
        if (stat(p, &st) == 0 && !S_ISREG(st.st_mode))
            t5_fail("--output_dir %s: %s is %s, where the run writes a file; HINT: move it away", dir, p,
                    file_kind_name(st.st_mode));
        free(p);
    }
    DIR *d = opendir(dir);
    if (!d) t5_fail("--output_dir %s: cannot list it (%s)", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;  // checkpoint-N, the names trainer_save_checkpoint writes
        if (sscanf(e->d_name, "checkpoint-%d", &step) != 1) continue;
        char *p = path_join(dir, e->d_name);
        if (!path_is_dir(p))
            t5_fail("--output_dir %s: %s is not a directory, where the run may write a checkpoint; HINT: move it away",
                    dir, p);
        if (access(p, W_OK | X_OK) != 0)
            t5_fail("--output_dir %s: %s is not writable (%s); HINT: fix its permissions or move it away", dir, p,
                    strerror(errno));
        free(p);
    }
    closedir(d);
}

cJSON *output_dir_check(const TrainArgs *a, int node_local) {
    trainer_check_resume_dir(a, node_local);  // the checkpoint must be whole before anything is written
    const char *dir = a->output_dir;
    if (path_exists(dir) && !path_is_dir(dir))
        t5_fail("--output_dir %s exists and is not a directory; HINT: give a directory (it is created if missing)", dir);
    // writable now, not at the first save hours later (access() says EROFS even to root)
    char *anc = existing_ancestor(dir);
    if (!path_is_dir(anc))  // "afile/sub": access() would say "Permission denied" of a plain file
        t5_fail("--output_dir %s: %s is %s, not a directory, so nothing can be made under it; HINT: give an "
                "--output_dir whose parents are directories", dir, anc,
                path_is_file(anc) ? "a file" : "not a regular file");
    if (access(anc, W_OK | X_OK) != 0)
        t5_fail("--output_dir %s: cannot write in %s (%s); HINT: give an --output_dir on a writable file system", dir,
                anc, strerror(errno));
    free(anc);
    cJSON *results = NULL;
    if (path_is_dir(dir)) {
        if (!a->explain) output_dir_lock(dir);  // first: a busy directory is said as such
        // resuming continues in a non-empty output_dir, as HF's scripts allow
        if (a->do_train && has_entries(dir) && !a->overwrite_output_dir && !a->resume_from_checkpoint)
            t5_fail("--output_dir %s already exists and is not empty; use --overwrite_output_dir to write over it, or "
                    "--resume_from_checkpoint %s/checkpoint-N to continue", dir, dir);
        check_obstacles(dir);
        // HF's save_metrics merges into the all_results.json already there
        char *p = path_join(dir, "all_results.json");
        if (path_exists(p)) {
            size_t len = 0;
            char *text = read_text_file(p, &len);
            if (!text) t5_fail("%s: cannot read it (%s)", p, strerror(errno));
            results = json_read_parse(text, len, p, JSON_DUP_LAST, NULL);  // as HF's json.load reads it
            free(text);
            if (!cJSON_IsObject(results))
                t5_fail("%s: not a JSON object; the run merges its metrics into it, as HF does; HINT: fix or remove it",
                        p);
        }
        free(p);
    }
    return results;
}

void output_dir_clear_checkpoints(const TrainArgs *a, int keep_step) {
    if (!a->do_train || !a->overwrite_output_dir || a->resume_from_checkpoint || !path_is_dir(a->output_dir)) return;
    DIR *d = opendir(a->output_dir);
    if (!d) t5_fail("--output_dir %s: cannot list it (%s)", a->output_dir, strerror(errno));
    char removed[1024] = "";
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int step, used = 0;  // checkpoint-N and a half-written checkpoint-N.tmp
        if (sscanf(e->d_name, "checkpoint-%d%n", &step, &used) != 1) continue;
        if (e->d_name[used] && strcmp(e->d_name + used, ".tmp") != 0) continue;
        if (!e->d_name[used] && step == keep_step) continue;  // this run's own
        char *p = path_join(a->output_dir, e->d_name);
        remove_tree(p);
        free(p);
        if (strlen(removed) + strlen(e->d_name) + 3 < sizeof removed)
            snprintf(removed + strlen(removed), sizeof removed - strlen(removed), "%s%s", n ? ", " : "", e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        printf("--overwrite_output_dir: removed the earlier run's %s from %s (their steps would pass for this "
               "run's at --save_total_limit and at a later resume)\n", removed, a->output_dir);
}

void output_dir_create(const TrainArgs *a) {
    if (!path_exists(a->output_dir)) {
        g_created = path_join("", a->output_dir);
        register_at_exit();
    }
    mkdir_p(a->output_dir);
    output_dir_lock(a->output_dir);
}
