// comm/liveness.h: is every rank still alive? A heartbeat between the ranks, kept apart from
// progress: a rank busy for minutes (rank 0 writing a checkpoint while the others wait at a
// barrier) keeps beating and is never ended; a process that is stopped (SIGSTOP, Ctrl-Z, a
// debugger), hung or gone with its host falls silent and ends the whole job.
//
// Shape: a star around rank 0 over TCP. Rank 0 holds one connection per other rank, every
// other rank one connection to rank 0 (the connections of the rendezvous that carried the
// NCCL id, or made for this under mpirun: comm/launch.h). Only this control plane goes
// there; every tensor still travels over NCCL or MPI (torchrun's store and NCCL's own
// bootstrap are TCP side channels of the same kind). Each rank runs one thread that sends
// a small heartbeat every second and watches what arrives:
//   - a peer silent for T5_HEARTBEAT_TIMEOUT seconds (default 15) -> "rank R of N stopped
//     responding", exit 1;
//   - a peer whose connection closes without a goodbye -> "rank R of N ended unexpectedly",
//     exit 1 (its own output says why);
//   - a goodbye (liveness_stop, from comm_finalize) -> that peer is no longer watched, so
//     ranks may finish at different times.
// Before it exits, the rank that noticed tells its peers "rank R failed" (ranks other than
// 0 watch only rank 0), so every rank names the same rank; a silent peer on the same host
// (same kernel and pid namespace) also gets SIGCONT, so a stopped process wakes, reads
// that message and ends instead of waiting for its launcher's SIGKILL. The launcher then
// sees a rank exit 1 and stops the rest (mpirun, torchrun, deepspeed, --num_gpus).
// A thread that was itself not running for a while (the whole job stopped and resumed)
// gives its peers a fresh window instead of blaming them. One rank: nothing starts.
// docs/LAUNCH.md has the timeline per launcher.
#pragma once

#define LIVENESS_BEAT_S 1.0             // one heartbeat a second each way
#define LIVENESS_DEFAULT_TIMEOUT_S 15.0 // T5_HEARTBEAT_TIMEOUT's default
#define LIVENESS_MIN_TIMEOUT_S 3.0      // three heartbeats: less would end healthy ranks

// T5_HEARTBEAT_TIMEOUT in seconds: unset -> 15; 0 -> never end a rank for silence (a rank
// that ends is still noticed); otherwise >= 3. Anything else is a one-line error.
double liveness_timeout_s(void);

// Start the heartbeat on the rendezvous' connections (see launch.h): rank 0 passes fds[r],
// its connection to rank r, for 1 <= r < world (fds[0] unused); other ranks pass fds[0],
// their connection to rank 0. The thread owns them from now on. world 1: nothing starts.
// At most one heartbeat per process.
void liveness_start(int rank, int world, const int *fds, double timeout_s);
// Say goodbye to the peers (they stop watching this rank), end the thread and close its
// connections. Nothing to do when no heartbeat runs.
void liveness_stop(void);
// The job's hosts (comm/hosts.h), once known: from then on a failure names the failed rank's
// host, and the noticing rank's, when the job spans several ("rank 1 of 4 (host b) ended
// unexpectedly; rank 0 (host a) noticed"). A copy is kept; callable before or after
// liveness_start.
void liveness_name_hosts(const void *host_layout);
