/* cgroup_harness.h - integration-test harness for one coding group: writes
 * a cluster file with free loopback ports, starts its data and parity
 * cocytus-server processes, waits until the group commits writes, stops
 * everything (also at exit or on a fatal signal), and runs cocytus-cli on
 * it. */
#ifndef COCYTUS_TEST_CGROUP_HARNESS_H
#define COCYTUS_TEST_CGROUP_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CG_MAX_PROCS 16
#define CG_PATH_MAX 256
#define CG_DIR_MAX 128

struct cg_proc {
    const char *role;        /* "data" or "parity" */
    int index;
    int port;                /* client port */
    int link_port;
    pid_t pid;               /* 0 when not running */
    char log[CG_PATH_MAX];
};

struct cgroup {
    int k, n;
    char dir[CG_DIR_MAX];    /* private temporary directory */
    char conf[CG_PATH_MAX];  /* dir/cluster.conf */
    int nprocs;              /* data processes first, then parity */
    struct cg_proc procs[CG_MAX_PROCS];
};

/* Starts RS(k, n) with the given region size ("4m") on loopback.  Returns
 * false (with the reason and the logs on stderr) if the group did not come
 * up and commit a probe write within a few seconds. */
bool cgroup_start(struct cgroup *g, int k, int n, const char *region);
/* SIGTERM, then SIGKILL after a grace period; removes the directory. */
void cgroup_stop(struct cgroup *g);
/* True while every process runs; otherwise prints which one died and its
 * log tail (once). */
bool cgroup_alive(struct cgroup *g);
/* Client port of data process i. */
int cgroup_data_port(const struct cgroup *g, int i);

/* Writes DIR/endpoints (as scripts/cluster does) for cocytus-cli --dir.
 * Processes swap_a and swap_b (indexes into procs, -1: none) trade
 * addresses: a deliberately wrong file, to see that the checks notice. */
bool cgroup_write_endpoints(const struct cgroup *g, int swap_a, int swap_b);

/* Path of cocytus-cli: $COCYTUS_CLI, else next to the server build
 * ($COCYTUS_SERVER/../../client/cocytus-cli), else relative to the test. */
const char *cgroup_cli_path(void);
/* Runs `cocytus-cli --dir <g->dir> <args...>` (args NULL-terminated) with a
 * time limit; its output goes to out (NUL-terminated, truncated to cap).
 * Returns its exit status, or -1 if it could not run or timed out. */
int cgroup_cli(const struct cgroup *g, const char *const *args, char *out, size_t cap,
               int timeout_ms);

#endif
