// comm/launch.h: how ranks are started without mpirun, and how GPU ranks meet.
//   torchrun / deepspeed style  WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   Slurm (srun, no mpirun)     SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID + MASTER_ADDR/PORT
//   --num_gpus N                this binary re-executes itself N times on this host with the
//                               torchrun-style variables set, and T5_LAUNCHER=num_gpus so
//                               they report that launcher (launch_spawn_ranks)
// Rank 0 then sends the NCCL unique id to the others over one TCP rendezvous at
// MASTER_ADDR:MASTER_PORT (launch_tcp_broadcast_watched); those connections stay open and
// carry the heartbeat that ends the job when a rank dies or freezes (comm/liveness.h).
// Under mpirun, MPI starts the ranks and carries the id (comm/comm.c, comm/comm_nccl.cu);
// only the heartbeat's connections are made here, to a port rank 0 announces over MPI
// (launch_tcp_listen_any, launch_tcp_watch). docs/LAUNCH.md: every launcher, step by step.
// Pure C (sockets, fork/exec): built and tested without CUDA (tests/test_launch.c).
#pragma once
#include <stddef.h>

#define LAUNCH_TCP_TIMEOUT_S 120.0  // how long ranks wait for each other at the rendezvous
#define LAUNCH_GRACE_S 10.0         // --num_gpus: SIGTERM -> SIGKILL delay when a rank fails

typedef struct {
    int rank, world, local_rank;
    const char *launcher;  // "torchrun", "slurm", "num_gpus"
} LaunchEnv;

// 1: an mpirun-style launcher started this process (OMPI_COMM_WORLD_SIZE / PMI_SIZE).
int launch_under_mpirun(void);
// Reads the torchrun-style variables (WORLD_SIZE set) or Slurm's (SLURM_NTASKS > 1 with
// SLURM_PROCID) into *e and returns 1; 0 when neither is present (one rank, whose GPU is
// still LOCAL_RANK when set: e->local_rank). Checks them
// (and, for more than one rank, MASTER_ADDR/MASTER_PORT) with a one-line error naming the
// variable.
int launch_env_read(LaunchEnv *e);
// MASTER_ADDR and the rendezvous port: MASTER_PORT, or MASTER_PORT + 1 under torchrun,
// whose agent already serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True).
// A one-line error naming the missing or malformed variable, with the hint for this launcher.
void launch_master_addr(const char *launcher, const char **addr, int *port);

// Rank 0 sends blob (n bytes) to every other rank: it listens on `port`, the others connect
// to addr:port (retrying until timeout_s) and receive it. world 1: nothing. Every failure
// (nobody listening, a rank missing, a WORLD_SIZE mismatch) is an error naming the address.
void launch_tcp_broadcast(const char *addr, int port, int rank, int world, void *blob, size_t n, double timeout_s);
// launch_tcp_broadcast whose connections then carry the heartbeat (liveness_start, with
// T5_HEARTBEAT_TIMEOUT) until liveness_stop: GPU ranks without MPI (comm_nccl_init).
void launch_tcp_broadcast_watched(const char *addr, int port, int rank, int world, void *blob, size_t n,
                                  double timeout_s);
// A TCP port that was free a moment ago (bind to port 0).
int launch_free_port(void);

// Under mpirun: where the others reach rank 0. MPI broadcasts this struct as bytes.
typedef struct {
    char host[256];  // rank 0's host name (NUL-terminated)
    int port;        // the port it listens on
} LaunchRank0;
// Rank 0: listen on a free port; fills *at and returns the listening socket.
int launch_tcp_listen_any(LaunchRank0 *at);
// Every rank, once *at has reached it: rank 0 accepts the others on listen_fd, the others
// connect (to 127.0.0.1 on rank 0's host, else to MASTER_ADDR when set, else to its host
// name), and the heartbeat starts on those connections. world 1: nothing.
void launch_tcp_watch(const LaunchRank0 *at, int listen_fd, int rank, int world);

// --local_rank N / --local-rank=N on the command line (the deepspeed launcher and
// torch.distributed.launch pass it; -1: not given). It must equal LOCAL_RANK when that is
// set (a one-line error naming both); when LOCAL_RANK is not set, it is set to N, so
// comm_init reads the GPU index from one place.
void launch_use_local_rank_flag(int local_rank);
// How many ranks of the job run on this host, as the launcher says (before the ranks have
// exchanged their hosts, comm/hosts.h: a dry run): LOCAL_WORLD_SIZE (torchrun), LOCAL_SIZE
// (the deepspeed launcher), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), this node's entry of
// SLURM_TASKS_PER_NODE (srun, node SLURM_NODEID); without any, world when the launcher starts
// every rank here ("none", "num_gpus"), else 1.
int launch_ranks_on_host(const char *launcher, int world);
// Slurm's SLURM_TASKS_PER_NODE ("2(x3),1": three nodes of 2 tasks, then one of 1): the tasks
// of node `node` (0-based); 0 when the spec is malformed or has no such node.
int launch_slurm_tasks_on_node(const char *spec, int node);

// --num_gpus n: start n ranks of this binary (/proc/self/exe, argv without --num_gpus)
// with RANK=LOCAL_RANK=i, WORLD_SIZE=n, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port, and
// wait. When one fails (non-zero exit or a signal) the others get SIGTERM (with SIGCONT, so
// a stopped one acts on it), then SIGKILL after grace_s; every child is reaped and the
// parent names the rank. Returns the exit code for main: 0 when
// every rank succeeded.
int launch_spawn(int n, int argc, char **argv, double grace_s);
static inline int launch_spawn_ranks(int n, int argc, char **argv) { return launch_spawn(n, argc, argv, LAUNCH_GRACE_S); }
