// comm/comm.c: rank start-up (comm_init, comm_attach_device, comm_finalize): which of the
// three tables of comm/comm.h a rank uses, and the partition arithmetic they share.
#include "comm.h"

#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "comm_mpi.h"
#include "launch.h"
#include "liveness.h"
#include "../common/range.h"

// CPU ranks: one alone needs no transport; several talk over MPI (without mpirun the MPI
// table refuses them with a hint, see comm_mpi.c)
static const CommOps *cpu_ops(const Comm *c) { return c->world == 1 ? &comm_single_ops : &comm_mpi_ops; }

void comm_init(Comm *c) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    c->launcher = "none";
    c->ops = &comm_single_ops;
    if (launch_under_mpirun()) {
        mpiCheck(MPI_Init(NULL, NULL));
        c->mpi = 1;
        c->launcher = "mpirun";
        mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
        mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (!lr || !*lr) lr = getenv("MPI_LOCALRANKID");  // MPICH / Hydra
        c->local_rank = lr && *lr ? atoi(lr) : c->rank;
        if (c->world > 1) {  // the heartbeat (comm/liveness.h): rank 0's host and port travel over MPI
            LaunchRank0 at;
            int ls = c->rank == 0 ? launch_tcp_listen_any(&at) : -1;
            mpiCheck(MPI_Bcast(&at, (int)sizeof at, MPI_BYTE, 0, MPI_COMM_WORLD));
            launch_tcp_watch(&at, ls, c->rank, c->world);
        }
        c->ops = cpu_ops(c);
        return;
    }
    // torchrun-style variables or Slurm: no MPI; GPU ranks meet over TCP + NCCL
    // (comm_attach_device), CPU ranks are refused there
    LaunchEnv e;
    int launched = launch_env_read(&e);
    c->local_rank = e.local_rank;  // one rank alone too: LOCAL_RANK (--local_rank) picks its GPU
    if (launched) {
        c->rank = e.rank;
        c->world = e.world;
        c->local_rank = e.local_rank;
        c->launcher = e.launcher;
    }
    c->ops = cpu_ops(c);
}

void comm_init_dry(Comm *c, int num_gpus) {
    memset(c, 0, sizeof *c);
    c->world = 1;
    c->launcher = "none";
    c->ops = &comm_single_ops;
    if (num_gpus > 0) {  // the ranks --num_gpus would start; this process stands for rank 0
        c->world = num_gpus;
        c->launcher = "num_gpus";
        return;
    }
    if (launch_under_mpirun()) {  // mpirun's own variables, without MPI_Init
        static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK"};
        for (int k = 0; k < 2; k++)
            if (getenv(sizes[k]) && *getenv(sizes[k])) {
                c->world = atoi(getenv(sizes[k]));
                c->rank = getenv(ranks[k]) ? atoi(getenv(ranks[k])) : 0;
                break;
            }
        if (c->world < 1) c->world = 1;
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        if (!lr || !*lr) lr = getenv("MPI_LOCALRANKID");
        c->local_rank = lr && *lr ? atoi(lr) : c->rank;
        c->mpi = 0;  // not started: comm_finalize leaves MPI alone
        c->launcher = "mpirun";
        return;
    }
    LaunchEnv e;
    if (launch_env_read(&e)) {
        c->rank = e.rank;
        c->world = e.world;
        c->launcher = e.launcher;
    }
    c->local_rank = e.local_rank;
}

// CPU ranks exchange host buffers over MPI: several of them need mpirun.
static void check_cpu_ranks(const Comm *c, const char *device, int under_mpi) {
    if (c->world > 1 && !under_mpi)
        t5_fail("%d ranks started by %s with --device %s: CPU ranks exchange data over MPI, so several of them "
                "run only under mpirun; HINT: mpirun -np %d ./train_t5 ..., or --device cuda for GPU ranks",
                c->world, c->launcher, device, c->world);
}

void comm_check_dry(const Comm *c, const char *device) {
    if (strcmp(device, "cuda") != 0) check_cpu_ranks(c, device, !strcmp(c->launcher, "mpirun"));
}

// Every rank's host record, exchanged over the transport just set up; the heartbeat names them.
static void hosts_gather(Comm *c) {
    HostRecord mine = hosts_this_record(), *all = mallocCheck((size_t)c->world * sizeof mine);
    comm_allgather_bytes_host(c, &mine, sizeof mine, all);
    hosts_free(&c->hosts);
    hosts_build(&c->hosts, all, c->world);
    free(all);
    liveness_name_hosts(&c->hosts);
}

void comm_attach_device(Comm *c, const char *device) {
    if (strcmp(device, "cuda") != 0) {  // CPU ranks: MPI carries host buffers
        check_cpu_ranks(c, device, c->mpi);
    } else {
        comm_nccl_attach(c);  // this rank's GPU, then the communicator (fails in a build without CUDA)
        c->ops = comm_nccl_ops();
    }
    hosts_gather(c);
}

void comm_allgather_bytes_host(const Comm *c, const void *mine, size_t n, void *all) {
    if (c->world == 1) {
        memcpy(all, mine, n);
        return;
    }
    size_t words = (n + 7) / 8;  // each rank's slot, in 8-byte words
    long long *buf = callocCheck((size_t)c->world * words, sizeof(long long));
    memcpy(buf + (size_t)c->rank * words, mine, n);
    comm_allreduce_sum_i64(c, buf, (size_t)c->world * words);
    for (int r = 0; r < c->world; r++) memcpy((char *)all + (size_t)r * n, buf + (size_t)r * words, n);
    free(buf);
}

void comm_broadcast_bytes_host(const Comm *c, int root, void *buf, size_t n) {
    if (c->world == 1 || n == 0) return;
    size_t words = (n + 7) / 8;
    long long *w = callocCheck(words, sizeof(long long));
    if (c->rank == root) memcpy(w, buf, n);
    comm_allreduce_sum_i64(c, w, words);
    if (c->rank != root) memcpy(buf, w, n);
    free(w);
}

int comm_ranks_on_my_host(const Comm *c) {
    if (c->hosts.n_hosts > 0) return c->hosts.ranks_on[c->hosts.host_of[c->rank]];
    return launch_ranks_on_host(c->launcher, c->world);
}

int comm_is_host_leader(const Comm *c) {
    if (c->hosts.n_hosts > 0) return c->hosts.first_rank[c->hosts.host_of[c->rank]] == c->rank;
    return c->rank == 0;
}

const char *comm_rank_words(const Comm *c, int rank, char *buf, int n) {
    return hosts_rank_words(&c->hosts, rank, buf, n);
}

void comm_finalize(Comm *c) {
    hosts_free(&c->hosts);
    c->ops->finalize(c);
    c->ops = cpu_ops(c);
    if (c->mpi) MPI_Finalize();
    c->mpi = 0;
    liveness_stop();  // last: the peers stop watching this rank, which has finished
}

static void fail_from(const Comm *c, int speaker, const char *msg) __attribute__((noreturn));
static void fail_from(const Comm *c, int speaker, const char *msg) {
    if (c->rank == speaker) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", msg);
        fflush(stderr);
    }
    if (c->world > 1) comm_barrier(c);
    liveness_stop();
    exit(1);
}

void comm_fail_agreed(const Comm *c, const char *msg) { fail_from(c, 0, msg); }

void comm_agree_or_fail(const Comm *c, const char *msg) {
    const int found = msg && *msg;
    if (c->world == 1) {
        if (found) fail_from(c, 0, msg);
        return;
    }
    double *who = callocCheck((size_t)c->world, sizeof(double));  // 1 at each rank that found something
    who[c->rank] = found;
    comm_allreduce_sum_f64(c, who, c->world);
    int speaker = -1;
    for (int r = 0; r < c->world && speaker < 0; r++)
        if (who[r] > 0) speaker = r;
    free(who);
    if (speaker >= 0) fail_from(c, speaker, msg);
}

Range comm_piece_of(const Comm *c, int r, size_t lo, size_t hi, size_t n_total) {
    Range p = range_split_ceil(n_total, c->world, r);
    size_t b = p.begin > lo ? p.begin : lo, e = p.end < hi ? p.end : hi;
    if (b > e) b = e;
    if (b < lo) b = e = lo;
    Range out = {b - lo, e - lo};
    return out;
}
