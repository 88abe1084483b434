// tests/test_multihost.c: jobs over several hosts, on one machine (run from the repository root).
//   - where a rank runs: the launcher variables of a two-node job as torchrun, the deepspeed
//     launcher, srun and mpirun set them for a rank on the second node (comm/launch.c): its
//     rank, its GPU (the node-local rank) and the ranks of its host; Slurm's
//     SLURM_TASKS_PER_NODE read per node;
//   - the host layout from the ranks' records (comm/hosts.c): hosts numbered by their lowest
//     rank, the ranks of each, T5_HOST_NAME checked;
//   - then ./train_t5 on CPU ranks under one mpirun with two app contexts standing for two hosts
//     (T5_HOST_NAME=a / b, each with its own --output_dir: its node-local disk; MPI is the CPU
//     ranks' only transport, so two separate launcher invocations are a GPU-only setup, run by
//     the two-GPU machine's script):
//       * the offload check per host: two ranks on one host need twice one rank's host memory,
//         one rank on each of two hosts fits where two on one do not;
//       * node-local checkpoints (DeepSpeed's checkpoint.use_node_local_storage, HF's
//         --save_on_each_node): each host holds its rank's shard, the index, latest and
//         trainer_state.json (the same bytes on both), only rank 0's host model.safetensors;
//         resumed at the same layout: the final weights bit for bit the uninterrupted run's;
//         resumed at another layout (host a 2 ranks, host b 1): each host is sent the shard it
//         lacks, said per host and file, and the losses follow the uninterrupted run's; a shard
//         no host holds: one error naming it; the hosts at different checkpoints: one error;
//         the hosts at the same step of two runs (zero_index.json's save_id): one error, nothing sent;
//       * a rank on the other host stopped or killed mid-run: the job ends naming the rank and
//         its host.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/check.h"
#include "../comm/hosts.h"
#include "../comm/launch.h"
#include "test.h"
#include "test_files.h"
#include "test_fork.h"
#include "test_tmp.h"

static char tmp[64];

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

// ---- launcher variables -------------------------------------------------------------------------

static const char *const LAUNCH_VARS[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "CROSS_RANK",
                                          "CROSS_SIZE", "LOCAL_SIZE", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
                                          "SLURM_NODEID", "SLURM_TASKS_PER_NODE", "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE", "T5_LAUNCHER", NULL};

// The environment a launcher gives one rank: "NAME=value" words, NULL-terminated.
static void set_env(const char *const *vars) {
    for (const char *const *v = LAUNCH_VARS; *v; v++) unsetenv(*v);
    for (const char *const *v = vars; *v; v++) {
        char name[64];
        const char *eq = strchr(*v, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - *v), *v);
        setenv(name, eq + 1, 1);
    }
}

static void expect_rank(const char *launcher, const char *const *vars, int rank, int world, int local, int on_host) {
    set_env(vars);
    LaunchEnv e;
    int launched = launch_env_read(&e);
    int here = launch_ranks_on_host(launched ? e.launcher : "none", launched ? e.world : 1);
    char what[300];
    snprintf(what, sizeof what, "%s, a rank on the second node: rank %d of %d, GPU %d, %d rank(s) on its host (got %d "
             "of %d, GPU %d, %d)", launcher, rank, world, local, on_host, e.rank, e.world, e.local_rank, here);
    test_check(launched && e.rank == rank && e.world == world && e.local_rank == local && here == on_host, what);
}

static void test_launchers(void) {
    // torchrun --nnodes 2 --nproc_per_node 2 --node_rank 1 --rdzv_endpoint h0:29500 (its agent's variables)
    const char *torchrun[] = {"WORLD_SIZE=4", "RANK=3", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
                              "MASTER_ADDR=h0", "MASTER_PORT=29500", "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    expect_rank("torchrun --nnodes 2", torchrun, 3, 4, 1, 2);
    // deepspeed --hostfile (pdsh/ssh runner -> deepspeed.launcher.launch on each node: launch.py's variables)
    const char *deepspeed[] = {"WORLD_SIZE=4", "RANK=2", "LOCAL_RANK=0", "CROSS_RANK=1", "CROSS_SIZE=2",
                               "LOCAL_SIZE=2", "MASTER_ADDR=h0", "MASTER_PORT=29500", NULL};
    expect_rank("deepspeed --hostfile", deepspeed, 2, 4, 0, 2);
    // srun -N 2 --ntasks-per-node 2 (MASTER_ADDR/PORT exported by the batch script)
    const char *srun[] = {"SLURM_NTASKS=4", "SLURM_PROCID=3", "SLURM_LOCALID=1", "SLURM_NODEID=1",
                          "SLURM_TASKS_PER_NODE=2(x2)", "MASTER_ADDR=h0", "MASTER_PORT=29500", NULL};
    expect_rank("srun over 2 nodes", srun, 3, 4, 1, 2);
    const char *srun_uneven[] = {"SLURM_NTASKS=4", "SLURM_PROCID=3", "SLURM_LOCALID=0", "SLURM_NODEID=1",
                                 "SLURM_TASKS_PER_NODE=3,1", "MASTER_ADDR=h0", "MASTER_PORT=29500", NULL};
    expect_rank("srun, 3 tasks then 1", srun_uneven, 3, 4, 0, 1);
    test_check(launch_slurm_tasks_on_node("2(x3),1", 0) == 2 && launch_slurm_tasks_on_node("2(x3),1", 2) == 2 &&
                   launch_slurm_tasks_on_node("2(x3),1", 3) == 1 && launch_slurm_tasks_on_node("2(x3),1", 4) == 0 &&
                   launch_slurm_tasks_on_node("4", 0) == 4 && launch_slurm_tasks_on_node("2(x", 0) == 0 &&
                   launch_slurm_tasks_on_node("", 0) == 0 && launch_slurm_tasks_on_node("x", 0) == 0,
               "SLURM_TASKS_PER_NODE per node: 2(x3),1 -> 2 2 2 1, then none; malformed specs -> 0");
    // mpirun -H a:2,b:2: MPI gives the rank; Open MPI's local size counts this host's ranks
    const char *mpirun[] = {"OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    set_env(mpirun);
    test_check(launch_under_mpirun() && launch_ranks_on_host("mpirun", 4) == 2,
               "mpirun -H a:2,b:2: under mpirun, 2 ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE)");
    const char *none[] = {NULL};
    set_env(none);
}

// ---- the host layout ----------------------------------------------------------------------------

static HostRecord rec(const char *name) {
    HostRecord r = {{0}, 0};
    snprintf(r.name, sizeof r.name, "%s", name);
    for (const char *p = name; *p; p++) r.key = r.key * 131 + (unsigned char)*p;
    return r;
}

static void bad_host_name(const void *arg) {
    setenv("T5_HOST_NAME", (const char *)arg, 1);
    (void)hosts_this_record();
}

static void test_layout(void) {
    HostRecord blocks[4] = {rec("a"), rec("a"), rec("b"), rec("b")}, mixed[4] = {rec("a"), rec("b"), rec("a"), rec("c")};
    HostLayout h;
    hosts_build(&h, blocks, 4);
    test_check(h.n_hosts == 2 && h.first_rank[0] == 0 && h.first_rank[1] == 2 && h.ranks_on[0] == 2 &&
                   h.ranks_on[1] == 2 && h.host_of[3] == 1 && !strcmp(h.names[1], "b"),
               "ranks a a b b: 2 hosts, lowest ranks 0 and 2, 2 ranks each");
    char buf[64];
    test_check(!strcmp(hosts_rank_words(&h, 3, buf, sizeof buf), "rank 3 (host b)"), "rank 3 named with its host b");
    hosts_free(&h);
    hosts_build(&h, mixed, 4);
    test_check(h.n_hosts == 3 && h.host_of[2] == 0 && h.first_rank[1] == 1 && h.first_rank[2] == 3 &&
                   h.ranks_on[0] == 2 && h.ranks_on[2] == 1,
               "ranks a b a c: 3 hosts numbered by their lowest rank, host a runs ranks 0 and 2");
    hosts_free(&h);
    hosts_build(&h, blocks, 2);
    test_check(h.n_hosts == 1 && !strcmp(hosts_rank_words(&h, 1, buf, sizeof buf), "rank 1"),
               "one host: ranks are named without a host");
    hosts_free(&h);
    setenv("T5_HOST_NAME", "node-7", 1);
    HostRecord me = hosts_this_record(), again = hosts_this_record();
    test_check(!strcmp(me.name, "node-7") && me.key == again.key && me.key != 0, "T5_HOST_NAME names this host");
    unsetenv("T5_HOST_NAME");
    HostRecord real = hosts_this_record();
    test_check(real.name[0] && real.key != me.key, "without T5_HOST_NAME: the host name (with the boot id in the key)");
    test_expect_error("T5_HOST_NAME with a space", bad_host_name, "two words", "T5_HOST_NAME=\"two words\"", NULL);
}

// ---- ./train_t5 on two emulated hosts -------------------------------------------------------------

static int run_sh(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int log_has(const char *log, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.log", tmp, log);
    char *t = test_slurp(path);
    int has = t && strstr(t, needle) != NULL;
    free(t);
    return has;
}

static int log_count(const char *log, const char *needle) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.log", tmp, log);
    char *t = test_slurp(path);
    int n = 0;
    for (const char *p = t; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    free(t);
    return n;
}

#define TRAIN_ARGS                                                                                                   \
    "--device cpu --model tests/fixtures/trainer_model --tokenizer_name data/sample/spiece.model "                   \
    "--data_dir tests/fixtures/trainer_data --task translation_en_to_ro --max_source_length 24 "                     \
    "--max_target_length 20 --max_steps 6 --save_steps 3 --logging_steps 1 --sampler sequential --dropout_rate 0 " \
    "--learning_rate 3e-3 --do_train"

// One job: per host (a, b) `ranks[h]` ranks, host h writing into tmp/<out>_<h>; extra flags last.
// Returns the exit code; the output goes to tmp/<log>.log.
static int job(const char *log, const char *out, const int ranks[2], const char *extra, const char *env) {
    char cmd[4096];
    int k = snprintf(cmd, sizeof cmd, "cd . && env %s timeout 120 mpirun --allow-run-as-root --oversubscribe", env);
    for (int h = 0; h < 2; h++)
        if (ranks[h] > 0)
            k += snprintf(cmd + k, sizeof cmd - (size_t)k, "%s -np %d -x T5_HOST_NAME=%c ./train_t5 " TRAIN_ARGS
                          " --cache_dir %s/cache --output_dir %s/%s_%c %s", h && ranks[0] ? " :" : "", ranks[h],
                          'a' + h, tmp, tmp, out, 'a' + h, extra);
    snprintf(cmd + k, sizeof cmd - (size_t)k, " > %s/%s.log 2>&1", tmp, log);
    return run_sh(cmd);
}

static int file_there(const char *out, char host, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s_%c/%s", tmp, out, host, rel);
    return access(p, F_OK) == 0;
}

static int same_file(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s %s/%s %s/%s", tmp, a, tmp, b);
    return run_sh(cmd) == 0;
}

// Copy a host's checkpoint into a fresh output directory of another run (its node-local disk).
static void seed_dir(const char *from, const char *to, const char *ckpt) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s && mkdir -p %s/%s && cp -r %s/%s/%s %s/%s/", tmp, to, tmp, to, tmp, from,
             ckpt, tmp, to);
    if (run_sh(cmd) != 0) t5_fail("cannot copy %s", from);
}

// The per-step losses of a run's trainer_state.json (n at most cap).
static int losses(const char *out_dir, double *l, int cap) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/trainer_state.json", tmp, out_dir);
    cJSON *st = test_load_json(path, "");
    int n = 0;
    const cJSON *h = cJSON_GetObjectItem(st, "log_history"), *e;
    cJSON_ArrayForEach(e, h) if (cJSON_HasObjectItem(e, "loss") && n < cap) l[n++] = test_json_num(e, "loss");
    cJSON_Delete(st);
    return n;
}

static void test_offload_per_host(void) {
    char cfg[256], extra[512], what[300];
    snprintf(cfg, sizeof cfg, "%s/offload.json", tmp);
    FILE *f = fopen(cfg, "w");
    fputs("{\"train_micro_batch_size_per_gpu\": \"auto\", \"zero_optimization\": {\"stage\": 2, "
          "\"offload_optimizer\": {\"device\": \"cpu\"}}}\n", f);
    fclose(f);
    // the tiny model's offloaded state per rank is a few MB: 1.2x one rank's fits one rank a host only
    snprintf(extra, sizeof extra, "--per_device_train_batch_size 6 --max_steps 1 --save_strategy no --deepspeed %s", cfg);
    const int one_host[2] = {2, 0}, two_hosts[2] = {1, 1};
    const char *env = "T5_TEST_HOST_AVAILABLE=4000000";  // bytes: between 1x and 2x the state of a rank
    int rc1 = job("offload_one_host", "offload1", one_host, extra, env);
    int rc2 = job("offload_two_hosts", "offload2", two_hosts, extra, env);
    snprintf(what, sizeof what, "offload check per host: 2 ranks on one host refused (exit %d, naming \"x 2 ranks on "
             "this host\"), 1 rank on each of 2 hosts trains (exit %d)", rc1, rc2);
    test_check(rc1 != 0 && log_has("offload_one_host", "x 2 ranks on this host") && rc2 == 0 &&
                   !log_has("offload_two_hosts", "of host memory"),
               what);
}

static void test_node_local(void) {
    char cfg[256], nl[512], what[400];
    snprintf(cfg, sizeof cfg, "%s/node_local.json", tmp);
    FILE *f = fopen(cfg, "w");
    fputs("{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\", "
          "\"zero_optimization\": {\"stage\": 2}, \"checkpoint\": {\"use_node_local_storage\": true}}\n", f);
    fclose(f);
    snprintf(nl, sizeof nl, "--per_device_train_batch_size 6 --deepspeed %s", cfg);
    const int two[2] = {1, 1};
    int rc = job("nl_save", "ref", two, nl, "T5_HEARTBEAT_TIMEOUT=15");
    test_check(rc == 0, "node-local storage, 2 hosts x 1 rank, 6 steps, checkpoints at 3 and 6: exit 0");
    const char *ck = "checkpoint-3/global_step3/";
    int layout = file_there("ref", 'a', "checkpoint-3/model.safetensors") &&
                 !file_there("ref", 'b', "checkpoint-3/model.safetensors") &&
                 file_there("ref", 'a', "checkpoint-3/global_step3/rank_00000.safetensors") &&
                 !file_there("ref", 'a', "checkpoint-3/global_step3/rank_00001.safetensors") &&
                 file_there("ref", 'b', "checkpoint-3/global_step3/rank_00001.safetensors") &&
                 !file_there("ref", 'b', "checkpoint-3/global_step3/rank_00000.safetensors") &&
                 file_there("ref", 'b', "checkpoint-3/latest") && file_there("ref", 'b', "checkpoint-3/config.json");
    test_check(layout, "each host holds its rank's shard, latest and config.json; model.safetensors only on rank 0's host");
    char a[256], b[256];
    snprintf(a, sizeof a, "ref_a/%szero_index.json", ck);
    snprintf(b, sizeof b, "ref_b/%szero_index.json", ck);
    int same_index = same_file(a, b);
    test_check(same_index && same_file("ref_a/checkpoint-3/trainer_state.json", "ref_b/checkpoint-3/trainer_state.json"),
               "the index and trainer_state.json: the same bytes on both hosts (rank 0's)");

    // resume at the same layout: each host from its own copy of checkpoint-3
    seed_dir("ref_a", "same_a", "checkpoint-3");
    seed_dir("ref_b", "same_b", "checkpoint-3");
    rc = job("nl_same", "same", two, nl, "T5_HEARTBEAT_TIMEOUT=15");
    snprintf(what, sizeof what, "resumed at the same layout (exit %d): each host is sent the shard it lacks (2 lines), "
             "the final weights bit for bit the uninterrupted run's", rc);
    test_check(rc == 0 && log_count("nl_same", "lacks checkpoint-3/global_step3/rank_0000") == 2 &&
                   log_has("nl_same", "host b lacks checkpoint-3/global_step3/rank_00000.safetensors") &&
                   same_file("ref_a/model.safetensors", "same_a/model.safetensors"),
               what);

    // another layout: host a runs ranks 0 and 1, host b rank 2 (same global batch: 3 x 4)
    seed_dir("ref_a", "other_a", "checkpoint-3");
    seed_dir("ref_b", "other_b", "checkpoint-3");
    const int three[2] = {2, 1};
    snprintf(nl, sizeof nl, "--per_device_train_batch_size 4 --deepspeed %s", cfg);
    rc = job("nl_other", "other", three, nl, "T5_HEARTBEAT_TIMEOUT=15");
    double l0[16], l1[16];
    int n0 = losses("ref_a", l0, 16), n1 = losses("other_a", l1, 16);
    double worst = n0 == n1 && n0 == 6 ? 0 : INFINITY;
    for (int s = 0; s < n0 && s < n1; s++) worst = fmax(worst, fabs(l1[s] - l0[s]) / fabs(l0[s]));
    snprintf(what, sizeof what, "resumed at another layout (host a 2 ranks, host b 1; exit %d): the shards each host "
             "lacked were sent, the 6 logged losses follow the uninterrupted run's (worst rel %.2e <= 1e-5)", rc,
             worst);
    test_check(rc == 0 && log_has("nl_other", "host a lacks checkpoint-3/global_step3/rank_00001.safetensors") &&
                   worst <= 1e-5,
               what);
    test_check(file_there("other", 'b', "checkpoint-6/global_step6/rank_00002.safetensors") &&
                   !file_there("other", 'a', "checkpoint-6/global_step6/rank_00002.safetensors") &&
                   file_there("other", 'a', "checkpoint-6/global_step6/rank_00001.safetensors"),
               "the resumed run's own checkpoint: host a holds ranks 0-1's shards, host b rank 2's");

    // a shard on no host: one error naming it
    seed_dir("ref_a", "lost_a", "checkpoint-3");
    seed_dir("ref_b", "lost_b", "checkpoint-3");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm %s/lost_b/checkpoint-3/global_step3/rank_00001.safetensors", tmp);
    run_sh(cmd);
    snprintf(nl, sizeof nl, "--per_device_train_batch_size 6 --deepspeed %s", cfg);
    rc = job("nl_lost", "lost", two, nl, "T5_HEARTBEAT_TIMEOUT=15");
    snprintf(what, sizeof what, "a shard no host holds: exit %d, one error naming it (\"rank_00001.safetensors: no "
             "host of this run has it\")", rc);
    test_check(rc != 0 && log_count("nl_lost", "error: ") == 1 && log_has("nl_lost", "rank_00001.safetensors: no host of this run has it"),
               what);

    // the hosts at different checkpoints (host b's copy of checkpoint-3 missing: it resumes nothing, a
    // different run): refused in one line naming both
    seed_dir("ref_a", "split_a", "checkpoint-3");
    seed_dir("ref_b", "split_b", "checkpoint-6");
    rc = job("nl_split", "split", two, nl, "T5_HEARTBEAT_TIMEOUT=15");
    snprintf(what, sizeof what, "the hosts hold different checkpoints (3 on host a, 6 on host b): exit %d, one error "
             "naming both", rc);
    test_check(rc != 0 && log_count("nl_split", "error: ") == 1 && log_has("nl_split", "(host b) has global_step6"),
               what);

    // the hosts hold the same step of two runs (host b's copy of checkpoint-3 from another run of the
    // same world size): each host would send the other its shard, mixing two runs' halves; refused
    // in one line naming both saves (zero_index.json's save_id)
    char nl2[600];
    snprintf(nl2, sizeof nl2, "%s --weight_decay 0.1", nl);
    rc = job("nl_save2", "ref2", two, nl2, "T5_HEARTBEAT_TIMEOUT=15");
    seed_dir("ref_a", "mix_a", "checkpoint-3");
    seed_dir("ref2_b", "mix_b", "checkpoint-3");
    int rc2 = job("nl_mix", "mix", two, nl, "T5_HEARTBEAT_TIMEOUT=15");
    snprintf(what, sizeof what, "the hosts hold checkpoint-3 of two runs (host b's from another run): exit %d, one error "
             "naming both saves, nothing sent", rc2);
    test_check(rc == 0 && rc2 != 0 && log_count("nl_mix", "error: ") == 1 &&
                   log_has("nl_mix", "the hosts hold checkpoints of different saves") && !log_has("nl_mix", " lacks "),
               what);
}

// pid of the train_t5 process of rank `rank` whose command line holds `tag`, or 0.
static pid_t find_rank(const char *tag, int rank) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    pid_t found = 0;
    char want[64];
    snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
    while (d && (e = readdir(d)) && !found) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[16384];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < k; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[k] = '\0';
        if (!strstr(buf, "train_t5") || !strstr(buf, tag) || strstr(buf, "mpirun") || strstr(buf, "timeout")) continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        f = fopen(path, "r");
        if (!f) continue;
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        for (size_t i = 0; i < k; i += strlen(buf + i) + 1)
            if (!strcmp(buf + i, want)) found = pid;
    }
    if (d) closedir(d);
    return found;
}

// Rank 1, on host b, gets `sig` mid-run: the job ends, naming the rank and its host.
static void test_lost_remote_rank(int sig) {
    char tag[32], cmd[2048], what[400];
    snprintf(tag, sizeof tag, "lost_%s", sig == SIGSTOP ? "stop" : "kill");
    snprintf(cmd, sizeof cmd,
             "exec env T5_HEARTBEAT_TIMEOUT=5 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 -x "
             "T5_HOST_NAME=a ./train_t5 " TRAIN_ARGS " --max_steps 100000 --save_strategy no "
             "--per_device_train_batch_size 6 --cache_dir %s/cache --output_dir %s/%s_a : -np 1 -x T5_HOST_NAME=b "
             "./train_t5 " TRAIN_ARGS " --max_steps 100000 --save_strategy no --per_device_train_batch_size 6 "
             "--cache_dir %s/cache --output_dir %s/%s_b > %s/%s.log 2>&1",
             tmp, tmp, tag, tmp, tmp, tag, tmp, tag);
    fflush(stdout);
    pid_t jobpid = fork();
    if (jobpid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    double t0 = now_seconds();
    while (!log_has(tag, "Running training") && now_seconds() - t0 < 90) sleep_s(0.2);
    sleep_s(1.0);
    pid_t victim = find_rank(tag, 1);
    if (!test_check(victim > 0, "the rank on host b found mid-run")) {
        kill(jobpid, SIGKILL);
        waitpid(jobpid, NULL, 0);
        return;
    }
    double ts = now_seconds();
    kill(victim, sig);
    int st = 0, rc = -1;
    while (now_seconds() - ts < 60)
        if (waitpid(jobpid, &st, WNOHANG) == jobpid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
            break;
        } else sleep_s(0.05);
    if (rc < 0) {
        kill(jobpid, SIGKILL);
        waitpid(jobpid, NULL, 0);
    }
    const char *needle = sig == SIGSTOP ? "rank 1 of 2 (host b) stopped responding" : "rank 1 of 2 (host b) ended unexpectedly";
    // a killed rank: mpirun may end the job before the heartbeat speaks, with its own line naming it
    int named = log_has(tag, needle) && log_has(tag, "rank 0 (host a)");
    int mpi_named = sig == SIGKILL && log_has(tag, "rank 1 with PID");
    snprintf(what, sizeof what, "rank 1 on host b %s mid-run: the job ends after %.1f s, exit %d, named as \"%s\" "
             "(noticed by rank 0 (host a))%s", sig == SIGSTOP ? "stopped" : "killed", now_seconds() - ts, rc, needle,
             mpi_named && !named ? " -- here by mpirun's own line" : "");
    test_check(rc > 0 && (named || mpi_named), what);
}

int main(void) {
    if (access("./train_t5", X_OK) != 0) t5_fail("./train_t5 not built; run make first");
    test_launchers();
    test_layout();
    snprintf(tmp, sizeof tmp, "/tmp/t5_test_multihost.XXXXXX");
    if (!mkdtemp(tmp)) t5_fail("mkdtemp failed");
    test_offload_per_host();
    test_node_local();
    test_lost_remote_rank(SIGSTOP);
    test_lost_remote_rank(SIGKILL);
    if (!test_failed_count) rm_rf(tmp);
    else printf("logs kept in %s\n", tmp);
    return test_summary();
}
