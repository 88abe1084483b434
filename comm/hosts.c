// comm/hosts.c: a rank's host record and the layout of ranks over hosts (hosts.h).
#include "hosts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/t5_env.h"

// FNV-1a, 64 bits.
static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

HostRecord hosts_this_record(void) {
    HostRecord r;
    memset(&r, 0, sizeof r);
    uint64_t key = 0xcbf29ce484222325ull;
    const char *given = t5_env_get(T5_ENV_HOST_NAME);
    if (given && *given) {
        size_t n = strlen(given);
        int ok = n < HOST_NAME_CHARS;
        for (size_t i = 0; ok && i < n; i++) ok = given[i] > ' ' && given[i] < 127;
        if (!ok)
            t5_fail("T5_HOST_NAME=\"%.80s\": expected 1-%d printable characters without spaces (the name this rank "
                    "gives its host)", given, HOST_NAME_CHARS - 1);
        memcpy(r.name, given, n);
        r.key = fnv(key, given, n);  // the given name alone decides: two invocations on one machine may differ
        return r;
    }
    if (gethostname(r.name, sizeof r.name - 1) != 0)
        t5_die(__FILE__, __LINE__, strerror(errno), "gethostname failed: set T5_HOST_NAME to name this host");
    key = fnv(key, r.name, strlen(r.name));
    char boot[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, boot, sizeof boot - 1);
        close(fd);
        if (k > 0) key = fnv(key, boot, (size_t)k);
    }
    r.key = key ? key : 1;
    return r;
}

void hosts_build(HostLayout *h, const HostRecord *recs, int world) {
    memset(h, 0, sizeof *h);
    h->world = world;
    h->host_of = mallocCheck((size_t)world * sizeof(int));
    h->first_rank = mallocCheck((size_t)world * sizeof(int));
    h->ranks_on = callocCheck((size_t)world, sizeof(int));
    h->names = callocCheck((size_t)world, HOST_NAME_CHARS);
    for (int r = 0; r < world; r++) {
        int k = 0;
        while (k < h->n_hosts && recs[h->first_rank[k]].key != recs[r].key) k++;
        if (k == h->n_hosts) {  // a host not seen before: r is its lowest rank
            h->first_rank[k] = r;
            memcpy(h->names[k], recs[r].name, HOST_NAME_CHARS);
            h->names[k][HOST_NAME_CHARS - 1] = '\0';
            h->n_hosts++;
        }
        h->host_of[r] = k;
        h->ranks_on[k]++;
    }
}

void hosts_free(HostLayout *h) {
    free(h->host_of);
    free(h->first_rank);
    free(h->ranks_on);
    free(h->names);
    memset(h, 0, sizeof *h);
}

const char *hosts_rank_words(const HostLayout *h, int rank, char *buf, int n) {
    if (h && h->n_hosts > 1 && rank >= 0 && rank < h->world)
        snprintf(buf, (size_t)n, "rank %d (host %s)", rank, h->names[h->host_of[rank]]);
    else snprintf(buf, (size_t)n, "rank %d", rank);
    return buf;
}
