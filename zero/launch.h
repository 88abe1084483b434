// zero/launch.h: how ranks are started without mpirun, and how GPU ranks meet.
//   torchrun / deepspeed style  WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   Slurm (srun, no mpirun)     SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID + MASTER_ADDR/PORT
//   --num_gpus N                this binary re-executes itself N times on this host with the
//                               torchrun-style variables set, and T5_LAUNCHER=num_gpus so
//                               they report that launcher (launch_spawn_ranks)
// Rank 0 then sends the NCCL unique id to the others over one TCP rendezvous at
// MASTER_ADDR:MASTER_PORT (launch_tcp_broadcast). mpirun needs none of this: MPI starts
// the ranks and carries the id (zero/comm.c, zero/comm_nccl.cu).
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
// SLURM_PROCID) into *e and returns 1; 0 when neither is present (one rank). Checks them
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
// A TCP port that was free a moment ago (bind to port 0).
int launch_free_port(void);

// --num_gpus n: start n ranks of this binary (/proc/self/exe, argv without --num_gpus)
// with RANK=LOCAL_RANK=i, WORLD_SIZE=n, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port, and
// wait. When one fails (non-zero exit or a signal) the others get SIGTERM, then SIGKILL
// after grace_s, and the parent names the rank. Returns the exit code for main: 0 when
// every rank succeeded.
int launch_spawn(int n, int argc, char **argv, double grace_s);
static inline int launch_spawn_ranks(int n, int argc, char **argv) { return launch_spawn(n, argc, argv, LAUNCH_GRACE_S); }
