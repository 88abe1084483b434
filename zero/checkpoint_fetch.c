// zero/checkpoint_fetch.c: node-local checkpoint storage at resume: each host holds the
// shards its own ranks wrote; zero_checkpoint_fetch_missing (checkpoint.h) sends every host
// the shards it lacks, checked against the index (zero/checkpoint_index.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/check.h"
#include "../common/crc32c.h"
#include "../common/fileio.h"
#include "checkpoint.h"
#include "checkpoint_index.h"

// ---- node-local storage: completing each host's copy at resume -------------------------------
#define FETCH_CHUNK_BYTES ((size_t)4 << 20)  // a shard travels between hosts 4 MiB at a time

// The same verdict on every rank (each computed it from the same gathered table): rank 0 says
// it in one line, the others exit quietly.
static void agreed_failure(const Comm *c, const char *msg) { comm_fail_agreed(c, msg); }

// Shard s streamed from rank `from` to the lowest rank of every host in `to` (to[h] = 1: host h
// lacks it), which writes it atomically and checks its size and CRC-32C against the index.
static void fetch_shard(const Comm *c, const ShardIndex *x, int s, int from, const unsigned char *to) {
    const ShardInfo *sh = &x->shards[s];
    char *path = path_join(x->tagdir, sh->file);
    const HostLayout *h = &c->hosts;
    const int receiver = to[h->host_of[c->rank]] && comm_is_host_leader(c);
    FILE *in = c->rank == from ? fopenCheck(path, "rb") : NULL;
    AtomicFile af;
    FILE *out = receiver ? atomic_open(&af, path) : NULL;
    unsigned char *buf = mallocCheck(FETCH_CHUNK_BYTES);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < sh->bytes;) {
        size_t k = sh->bytes - done < FETCH_CHUNK_BYTES ? (size_t)(sh->bytes - done) : FETCH_CHUNK_BYTES;
        if (in) freadCheck(buf, 1, k, in, path);
        comm_broadcast_bytes_host(c, from, buf, k);  // the one collective: rank `from`'s bytes to every rank
        if (out) {
            fwriteCheck(buf, 1, k, out, af.tmp_path);
            crc = crc32c_update(crc, buf, k);
        }
        done += k;
    }
    if (in) fcloseCheck(in, path);
    if (out) {
        if (crc != sh->crc)
            t5_fail("%s: the copy sent from rank %d has CRC-32C 0x%08x, the index (%s) records 0x%08x: the source "
                    "file on that host is damaged; %s", path, from, crc, x->index_path, sh->crc, HINT_EARLIER);
        atomic_commit(&af);
        zero_ckpt_shard_identity_open(x, s);  // the bytes the index recorded; and the shard it lists (checked on its host too)
    }
    freeCheck(buf);
    free(path);
}

// The last two components of a tag directory ("checkpoint-10/global_step10"): each host has its
// own path to it, so messages name the checkpoint's part.
static const char *tag_shown(const char *tagdir) {
    const char *end = tagdir + strlen(tagdir), *p = end;
    for (int slashes = 0; p > tagdir; p--)
        if (p[-1] == '/' && p < end && ++slashes == 2) break;
    return p;
}

void zero_checkpoint_fetch_missing(const char *dir, const Comm *c) {
    ShardIndex x;
    zero_ckpt_index_read(&x, dir);  // this host's latest and index (each host's leader wrote its copy)
    const HostLayout *h = &c->hosts;
    if (h->n_hosts < 1)
        t5_die(__FILE__, __LINE__, "zero_checkpoint_fetch_missing before the hosts are known",
               "a bug in the caller: call it after comm_attach_device");
    char msg[1024];
    // the same checkpoint on every host: its step, the world it was saved from, and the save
    // itself (two runs' checkpoints of one step and world size differ in their save_id only)
    typedef struct {
        long long step, world;
        char save_id[SAVE_ID_HEX + 1];
    } Which;
    Which mine, *all = mallocCheck((size_t)c->world * sizeof mine);
    memset(&mine, 0, sizeof mine);  // padding too: the bytes travel
    mine.step = x.global_step;
    mine.world = x.world;
    memcpy(mine.save_id, x.save_id, sizeof mine.save_id);
    comm_allgather_bytes_host(c, &mine, sizeof mine, all);
    for (int r = 1; r < c->world; r++) {
        const Which *w0 = &all[0], *w = &all[r];
        if (w->step == w0->step && w->world == w0->world && !memcmp(w->save_id, w0->save_id, sizeof w->save_id))
            continue;
        char a[96], b[96];
        if (w->step != w0->step || w->world != w0->world)
            snprintf(msg, sizeof msg, "%s (node-local storage): %s has global_step%lld of a %lld-rank run, %s has "
                     "global_step%lld of a %lld-rank run: every host must resume the same checkpoint; HINT: pass "
                     "--resume_from_checkpoint OUTPUT_DIR/checkpoint-N with an N every host holds", dir,
                     comm_rank_words(c, 0, a, sizeof a), w0->step, w0->world, comm_rank_words(c, r, b, sizeof b),
                     w->step, w->world);
        else
            snprintf(msg, sizeof msg, "%s/%s (node-local storage): %s has the global_step%lld of save %s, %s that of "
                     "save %s: the hosts hold checkpoints of different saves (another run's, or an earlier one's); "
                     "HINT: give every host its copy of the one checkpoint to resume", x.tagdir, ZERO_CKPT_INDEX,
                     comm_rank_words(c, 0, a, sizeof a), w0->step, w0->save_id[0] ? w0->save_id : "(none: version 1)",
                     comm_rank_words(c, r, b, sizeof b), w->save_id[0] ? w->save_id : "(none: version 1)");
        agreed_failure(c, msg);
    }
    free(all);
    // which shards each rank's host holds at their recorded size
    const int n = x.n_shards;
    unsigned char *here = callocCheck((size_t)n, 1), *table = mallocCheck((size_t)c->world * (size_t)n);
    for (int s = 0; s < n; s++) {
        char *path = path_join(x.tagdir, x.shards[s].file);
        struct stat sb;
        here[s] = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == x.shards[s].bytes;
        free(path);
    }
    comm_allgather_bytes_host(c, here, (size_t)n, table);
    // the lowest rank holding each shard; a shard on no host ends the resume before anything is
    // copied (every rank decides from the same table, so no rank is still copying when another exits)
    int *from = mallocCheck((size_t)n * sizeof *from);
    for (int s = 0; s < n; s++) {
        from[s] = -1;
        for (int r = 0; r < c->world && from[s] < 0; r++)
            if (table[(size_t)r * n + s]) from[s] = r;
        if (from[s] < 0) {
            snprintf(msg, sizeof msg, "%s/%s: no host of this run has it (node-local storage keeps a shard on the "
                     "host whose rank wrote it; %d host%s looked); HINT: copy it from the host where the saving run's "
                     "rank %d ran into that directory on any host of this run, or resume from an earlier checkpoint-N",
                     x.tagdir, x.shards[s].file, h->n_hosts, h->n_hosts > 1 ? "s" : "", s);
            agreed_failure(c, msg);
        }
    }
    unsigned char *to = mallocCheck((size_t)h->n_hosts);
    for (int s = 0; s < n; s++) {
        int lacking = 0;
        for (int k = 0; k < h->n_hosts; k++) lacking += (to[k] = !table[(size_t)h->first_rank[k] * n + s]);
        if (!lacking) continue;
        if (c->rank == 0)
            for (int k = 0; k < h->n_hosts; k++)
                if (to[k])
                    printf("resume (node-local storage): host %s lacks %s/%s (%.1f MB); rank %d (host %s) sends it "
                           "over the communicator\n", h->names[k], tag_shown(x.tagdir), x.shards[s].file,
                           x.shards[s].bytes / 1e6, from[s], h->names[h->host_of[from[s]]]);
        fflush(stdout);
        fetch_shard(c, &x, s, from[s], to);
    }
    comm_barrier(c);  // every host's copy is whole before any rank reads it
    freeCheck(from);
    free(to);
    free(here);
    free(table);
    zero_ckpt_index_free(&x);
}
