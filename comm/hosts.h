// comm/hosts.h: which ranks share a host. A job over several hosts (torchrun --nnodes, deepspeed
// --hostfile, srun over nodes, mpirun -H a:2,b:2) has things that belong to a host, not a rank:
// its memory and NVMe disk (the offload checks count this host's ranks), its node-local
// checkpoint directory (the host's first rank writes the host's copy of the small files:
// trainer/checkpoint.c), and the messages that say where a rank ran (a rank lost on another
// host is named with that host: comm/liveness.c).
//
// Every rank names its host -- T5_HOST_NAME when set (a container's or a test's name for it),
// else the host name -- and tells hosts apart by that name plus the kernel's boot id (two
// machines that answer to the same name still differ; T5_HOST_NAME alone decides when set, so
// two launcher invocations on one machine can stand for two hosts). The records are exchanged
// once, when the ranks' transport is up (comm_attach_device): from then on every rank knows
// the whole layout. Hosts are numbered in the order of their lowest rank.
#pragma once
#include <stdint.h>

#define HOST_NAME_CHARS 64

typedef struct {
    char name[HOST_NAME_CHARS];  // as printed (NUL-terminated)
    uint64_t key;                // equal keys: the same host
} HostRecord;

typedef struct {
    int world, n_hosts;  // n_hosts 0: not gathered yet
    int *host_of;        // (world) the host index of each rank
    int *first_rank;     // (n_hosts) the lowest rank on each host
    int *ranks_on;       // (n_hosts) how many ranks each host runs
    char (*names)[HOST_NAME_CHARS];  // (n_hosts)
} HostLayout;

// This process's record: T5_HOST_NAME (checked: 1-63 printable characters without spaces) or
// gethostname(); the key from the name and /proc/sys/kernel/random/boot_id.
HostRecord hosts_this_record(void);
// The layout from every rank's record, in rank order (recs[world]). Pure: tested on the CPU.
void hosts_build(HostLayout *h, const HostRecord *recs, int world);
void hosts_free(HostLayout *h);
// "rank 3 (host b)" -- with the host only when the layout is known and has several hosts.
const char *hosts_rank_words(const HostLayout *h, int rank, char *buf, int n);
