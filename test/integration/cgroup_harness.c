/* cgroup_harness.c - starts and stops one coding group of cocytus-server
 * processes for integration tests (cluster file with explicit free ports,
 * fork/exec, readiness probe, guaranteed cleanup) and runs cocytus-cli on
 * it with a time limit. */
#define _GNU_SOURCE
#include "cgroup_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define START_ATTEMPTS 3
#define READY_TIMEOUT_MS 8000
#define STOP_GRACE_MS 3000
#define LOG_TAIL_LINES 25

/* ---- ports and files ---- */

static bool write_conf(const struct cgroup *g)
{
    FILE *f = fopen(g->conf, "w");
    if (f != NULL)
        fchmod(fileno(f), 0600);   /* it holds the secret */
    if (f == NULL)
        return false;
    fprintf(f, "# written by test/integration/cgroup_harness.c\n");
    /* The test drives each data process directly: no slot routing. */
    fprintf(f, "cluster cgtest\nsecret cgtest-%d\nscheme rs %d %d\nrouting off\n", (int)getpid(),
            g->k, g->n);
    fprintf(f, "node 0 127.0.0.1\n");
    for (int i = 0; i < g->nprocs; i++) {
        const struct cg_proc *p = &g->procs[i];
        fprintf(f, "proc 0 %s %d 0 %d %d\n", p->role, p->index, p->port, p->link_port);
    }
    return fclose(f) == 0;
}

static bool write_region(const struct cgroup *g, const char *region)
{
    FILE *f = fopen(g->conf, "a");
    if (f == NULL)
        return false;
    fprintf(f, "region %s\n", region);
    return fclose(f) == 0;
}

bool cgroup_write_endpoints(const struct cgroup *g, int swap_a, int swap_b)
{
    char path[CG_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/endpoints", g->dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return false;
    for (int i = 0; i < g->nprocs; i++) {
        const struct cg_proc *p = &g->procs[i];
        int at = i == swap_a ? swap_b : i == swap_b ? swap_a : i;
        const struct cg_proc *q = at >= 0 && at < g->nprocs ? &g->procs[at] : p;
        fprintf(f, "%s 0 %d 0 127.0.0.1:%d %d\n", p->role, p->index, q->port, (int)q->pid);
    }
    return fclose(f) == 0;
}

static void print_log_tail(const char *path)
{
    static char lines[LOG_TAIL_LINES][400];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    int count = 0;
    while (count < 1000000 && fgets(lines[count % LOG_TAIL_LINES], sizeof lines[0], f) != NULL)
        count++;
    fclose(f);
    fprintf(stderr, "---- %s (last %d lines) ----\n", path,
            count < LOG_TAIL_LINES ? count : LOG_TAIL_LINES);
    for (int i = count > LOG_TAIL_LINES ? count - LOG_TAIL_LINES : 0; i < count; i++)
        fprintf(stderr, "  %s", lines[i % LOG_TAIL_LINES]);
}

static void print_logs(const struct cgroup *g)
{
    for (int i = 0; i < g->nprocs; i++)
        print_log_tail(g->procs[i].log);
}

/* ---- processes ---- */

static bool start_proc(const struct cgroup *g, struct cg_proc *p)
{
    p->pid = harness_spawn_role(g->conf, p->role, 0, p->index, p->log);
    if (p->pid < 0) {
        p->pid = 0;
        return false;
    }
    return true;
}

static bool proc_exited(struct cg_proc *p)
{
    if (p->pid <= 0)
        return true;
    int status;
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    /* Asked from a forked Check test, which is not the parent: /proc
     * answers there (a live child of ours never gives ECHILD). */
    if (r < 0 && errno == ECHILD && harness_pid_running(p->pid))
        return false;
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        harness_forget_pid(p->pid);
        p->pid = 0;
        return true;
    }
    return false;
}

static void stop_procs(struct cgroup *g)
{
    for (int i = 0; i < g->nprocs; i++)
        if (g->procs[i].pid > 0)
            kill(g->procs[i].pid, SIGTERM);
    int64_t deadline = harness_now_ms() + STOP_GRACE_MS;
    for (int i = 0; i < g->nprocs; i++) {
        struct cg_proc *p = &g->procs[i];
        while (!proc_exited(p) && harness_now_ms() < deadline)
            harness_sleep_ms(10);
        if (p->pid > 0) {
            fprintf(stderr, "cgroup: %s %d ignored SIGTERM, killing it\n", p->role, p->index);
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
            harness_forget_pid(p->pid);
            p->pid = 0;
        }
    }
}

/* ---- readiness ---- */

static bool port_accepts(int port)
{
    raw_conn *c = malloc(sizeof *c);
    bool ok = c != NULL && raw_open(c, port);
    if (ok)
        raw_close(c);
    free(c);
    return ok;
}

/* A set and delete on data process p commit (its links to every parity
 * process are up). */
static bool probe_write(int port)
{
    raw_conn *c = malloc(sizeof *c);
    char line[256];
    bool ok = c != NULL && raw_open(c, port) &&
              raw_command(c, "set cg:probe 0 0 1\r\nx\r\n", line, sizeof line) > 0 &&
              strcmp(line, "STORED\r\n") == 0 &&
              raw_command(c, "delete cg:probe\r\n", line, sizeof line) > 0 &&
              strcmp(line, "DELETED\r\n") == 0;
    if (c != NULL && c->fd >= 0)
        raw_close(c);
    free(c);
    return ok;
}

/* Waits until every process accepts and every data process commits. */
static bool wait_ready(struct cgroup *g)
{
    int64_t deadline = harness_now_ms() + READY_TIMEOUT_MS;
    for (int i = 0; i < g->nprocs; i++) {
        struct cg_proc *p = &g->procs[i];
        bool up = false;
        while (!up && harness_now_ms() < deadline && !proc_exited(p)) {
            up = port_accepts(p->port);
            if (!up)
                harness_sleep_ms(20);
        }
        if (!up) {
            fprintf(stderr, "cgroup: %s %d did not come up on port %d\n", p->role, p->index, p->port);
            return false;
        }
    }
    for (int i = 0; i < g->k; i++) {
        bool ok = false;
        while (!ok && harness_now_ms() < deadline && cgroup_alive(g)) {
            ok = probe_write(g->procs[i].port);
            if (!ok)
                harness_sleep_ms(50);
        }
        if (!ok) {
            fprintf(stderr, "cgroup: data %d does not commit writes\n", i);
            return false;
        }
    }
    return true;
}

/* ---- the group ---- */

static void layout(struct cgroup *g, const int *ports)
{
    g->nprocs = g->n;
    for (int i = 0; i < g->n; i++) {
        struct cg_proc *p = &g->procs[i];
        memset(p, 0, sizeof *p);
        p->role = i < g->k ? "data" : "parity";
        p->index = i < g->k ? i : i - g->k;
        p->port = ports[2 * i];
        p->link_port = ports[2 * i + 1];
        snprintf(p->log, sizeof p->log, "%s/%s-%d.log", g->dir, p->role, p->index);
        unlink(p->log);
    }
}

static bool start_once(struct cgroup *g, const char *region)
{
    int ports[CG_MAX_PROCS * 2];
    if (!harness_pick_ports(ports, 2 * g->n))
        return false;
    layout(g, ports);
    if (!write_conf(g) || !write_region(g, region))
        return false;
    /* Parity processes first: data processes dial them. */
    for (int i = g->n - 1; i >= 0; i--)
        if (!start_proc(g, &g->procs[i]))
            return false;
    if (!wait_ready(g) || !cgroup_write_endpoints(g, -1, -1)) {
        print_logs(g);
        stop_procs(g);
        return false;
    }
    return true;
}

bool cgroup_start(struct cgroup *g, int k, int n, const char *region)
{
    harness_install_cleanup();
    memset(g, 0, sizeof *g);
    if (k < 1 || n <= k || n > CG_MAX_PROCS)
        return false;
    g->k = k;
    g->n = n;
    snprintf(g->dir, sizeof g->dir, "/tmp/cocytus-cgroup-XXXXXX");
    if (mkdtemp(g->dir) == NULL) {
        fprintf(stderr, "cgroup: mkdtemp: %s\n", strerror(errno));
        return false;
    }
    snprintf(g->conf, sizeof g->conf, "%s/cluster.conf", g->dir);
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        if (start_once(g, region))
            return true;
        stop_procs(g);
        fprintf(stderr, "cgroup: RS(%d,%d) start attempt %d failed\n", k, n, attempt + 1);
    }
    return false;
}

static void remove_dir(struct cgroup *g)
{
    char path[CG_PATH_MAX + 16];
    for (int i = 0; i < g->nprocs; i++)
        unlink(g->procs[i].log);
    snprintf(path, sizeof path, "%s/endpoints", g->dir);
    unlink(path);
    unlink(g->conf);
    rmdir(g->dir);
}

void cgroup_stop(struct cgroup *g)
{
    if (g->dir[0] == '\0')
        return;
    stop_procs(g);
    remove_dir(g);
    g->dir[0] = '\0';
}

bool cgroup_alive(struct cgroup *g)
{
    for (int i = 0; i < g->nprocs; i++) {
        struct cg_proc *p = &g->procs[i];
        if (p->pid > 0 && proc_exited(p)) {
            fprintf(stderr, "cgroup: %s %d (port %d) died\n", p->role, p->index, p->port);
            print_log_tail(p->log);
            return false;
        }
        if (p->pid <= 0)
            return false;
    }
    return true;
}

int cgroup_data_port(const struct cgroup *g, int i)
{
    return g->procs[i].port;
}

/* ---- cocytus-cli ---- */

const char *cgroup_cli_path(void)
{
    static char path[PATH_MAX + 64];
    const char *env = getenv("COCYTUS_CLI");
    if (env != NULL && env[0] != '\0')
        return env;
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s", harness_server_path());
    char *server_dir = dirname(base);               /* .../memcached */
    snprintf(path, sizeof path, "%s/../client/cocytus-cli", server_dir);
    if (access(path, X_OK) == 0)
        return path;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    snprintf(path, sizeof path, "%s/../../client/cocytus-cli", dirname(exe));
    return path;
}

/* Reads from fd until EOF or the deadline; returns false on timeout. */
static bool collect_output(int fd, char *out, size_t cap, int64_t deadline)
{
    size_t len = 0;
    out[0] = '\0';
    for (;;) {
        int64_t left = deadline - harness_now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        char buf[4096];
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return true;
        size_t take = (size_t)r < cap - 1 - len ? (size_t)r : cap - 1 - len;
        memcpy(out + len, buf, take);
        len += take;
        out[len] = '\0';
    }
}

int cgroup_cli(const struct cgroup *g, const char *const *args, char *out, size_t cap,
               int timeout_ms)
{
    const char *argv[24];
    int n = 0;
    argv[n++] = cgroup_cli_path();
    argv[n++] = "--dir";
    argv[n++] = g->dir;
    for (int i = 0; args[i] != NULL && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;

    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = harness_spawn(argv, NULL, pipefd[1]);
    close(pipefd[1]);
    if (pid < 0) {
        close(pipefd[0]);
        return -1;
    }
    harness_track_pid(pid);
    bool finished = collect_output(pipefd[0], out, cap, harness_now_ms() + timeout_ms);
    close(pipefd[0]);
    if (!finished)
        kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    harness_forget_pid(pid);
    if (!finished) {
        fprintf(stderr, "cgroup: %s timed out after %d ms\n", argv[0], timeout_ms);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
