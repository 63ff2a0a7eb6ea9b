/* node_main.c - cocytus-node, the node launcher: reads the cluster file,
 * forks one cocytus-server for every process the layout places on this node,
 * and supervises them.
 *
 * All children stay in the node's process group, so `kill -- -PGID` stops a
 * whole node.  A child that dies is logged and started again after a
 * back-off (RESTART_FIRST_MS, doubling up to RESTART_MAX_MS; back to the
 * first after RESTART_RESET_MS of good running), like any supervisor: the
 * restarted process comes back empty and the coordinator rebuilds it
 * (docs/recovery.md, "Back to full redundancy").  --no-restart leaves dead
 * children dead.  SIGTERM/SIGINT stop every child (SIGTERM, then SIGKILL
 * after a grace period) and end the node.
 *
 * When the cluster file names a coordinator whose host is this node's
 * address (the first such node), the node also starts and supervises the
 * coordinator (cocytus-server --role coordinator).
 *
 * stdout gets one line per started server process, the format of the
 * endpoints file:
 *   <role> <group> <index> <node> <host>:<port> <pid>
 * The coordinator is not a line there (readers of endpoints expect server
 * processes only); it is logged on stderr. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cluster.h"

#define STOP_GRACE_SECONDS 2
#define RESTART_FIRST_MS 500
#define RESTART_MAX_MS 30000
/* A crash loop dies within moments of each start; a process that ran 10 s
 * was not looping (a kill then, by an operator's drill or the OOM killer,
 * is restarted at the first back-off: under a minute's reset, a coordinator
 * killed every 20 s would come back 16 s late by the fifth time). */
#define RESTART_RESET_MS 10000

struct child {
    const struct cluster_proc *proc;   /* NULL for a coordinator */
    int coord;                  /* which coordinator line (proc NULL) */
    pid_t pid;                  /* 0 once it has died and been reaped */
    uint64_t started_ms;        /* monotonic */
    uint64_t restart_at_ms;     /* dead, to be started then (0: not) */
    uint64_t backoff_ms;
    unsigned restarts;
};

struct node {
    const char *cluster_file;
    int node;
    const char *server;         /* --server, or found next to our executable */
    const char *log_dir;        /* --log-dir: one log file per child */
    char server_buf[PATH_MAX + 64];
    struct cluster cluster;
    struct child *children;
    int nchildren;
    int alive;
    bool no_restart;
    const char *auth_file;      /* --auth-file: -Y for every server process, or NULL */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void usage(FILE *out)
{
    fprintf(out,
        "cocytus-node " PACKAGE_VERSION " - starts and supervises the processes of one node\n"
        "usage: cocytus-node --cluster FILE --node I [--server PATH] [--log-dir DIR]\n"
        "                    [--no-restart] [--auth-file FILE]\n"
        "  --cluster FILE   the cluster file (see docs/operations.md)\n"
        "  --node I         which node of the file this is\n"
        "  --server PATH    the cocytus-server binary (default: next to cocytus-node)\n"
        "  --log-dir DIR    write each process's output to DIR/<role>-<group>-<index>.log\n"
        "                   (default: this program's stderr)\n"
        "  --no-restart     leave a process that died dead (default: start it again\n"
        "                   after a back-off of 0.5 s doubling up to 30 s)\n"
        "  --auth-file FILE start every server process with -Y FILE: its clients\n"
        "                   authenticate as memcached's (docs/security.md)\n");
}

static int parse_node_index(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 0 || v >= CLUSTER_MAX_NODES)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, struct node *n)
{
    static const struct option longopts[] = {
        { "cluster", required_argument, NULL, 'c' },
        { "node", required_argument, NULL, 'n' },
        { "server", required_argument, NULL, 's' },
        { "log-dir", required_argument, NULL, 'l' },
        { "no-restart", no_argument, NULL, 'R' },
        { "auth-file", required_argument, NULL, 'A' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    n->node = -1;
    while ((ch = getopt_long(argc, argv, "c:n:s:l:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': n->cluster_file = optarg; break;
        case 's': n->server = optarg; break;
        case 'l': n->log_dir = optarg; break;
        case 'R': n->no_restart = true; break;
        case 'A': n->auth_file = optarg; break;
        case 'n':
            if (parse_node_index(optarg, &n->node) < 0) {
                fprintf(stderr, "cocytus-node: bad node index '%s'\n", optarg);
                return -1;
            }
            break;
        case 'h': usage(stdout); exit(EXIT_SUCCESS);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc || !n->cluster_file || n->node < 0) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* ../memcached/cocytus-server (build tree) or ./cocytus-server (installed),
 * relative to the directory of our own executable. */
static int find_server(struct node *n)
{
    static const char *const candidates[] = { "../memcached/cocytus-server", "cocytus-server" };
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len < 0) {
        fprintf(stderr, "cocytus-node: cannot read /proc/self/exe (%s); use --server\n",
                strerror(errno));
        return -1;
    }
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        snprintf(n->server_buf, sizeof(n->server_buf), "%s/%s", self, candidates[i]);
        if (access(n->server_buf, X_OK) == 0) {
            n->server = n->server_buf;
            return 0;
        }
    }
    fprintf(stderr, "cocytus-node: no cocytus-server in %s/../memcached or %s; use --server\n",
            self, self);
    return -1;
}

/* "-m" value: whole megabytes when possible, else kilobytes. */
static void format_memory(size_t bytes, char *buf, size_t len)
{
    if (bytes % ((size_t)1 << 20) == 0)
        snprintf(buf, len, "%zu", bytes >> 20);
    else
        snprintf(buf, len, "%zuk", bytes >> 10);
}

static bool role_uses_memory(enum cluster_role r)
{
    return r == ROLE_PLAIN || r == ROLE_PRIMARY || r == ROLE_BACKUP;
}

/* Sends the child's stdout and stderr to its log file, or stdout to our
 * stderr (our stdout carries the endpoint lines only). */
static void redirect_child_output(const struct node *n, const struct cluster_proc *p, int coord)
{
    int fd = STDERR_FILENO;
    if (n->log_dir) {
        char path[PATH_MAX];
        if (p)
            snprintf(path, sizeof(path), "%s/%s-%d-%d.log", n->log_dir,
                     cluster_role_name(p->role), p->group, p->index);
        else if (coord == 0)
            snprintf(path, sizeof(path), "%s/coordinator.log", n->log_dir);
        else
            snprintf(path, sizeof(path), "%s/coordinator-%d.log", n->log_dir, coord);
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "cocytus-node: cannot open %s: %s\n", path, strerror(errno));
            _exit(127);
        }
    }
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }
}

/* In the child: becomes cocytus-server for process p (NULL: the
 * coordinator). */
static void exec_server(const struct node *n, const struct cluster_proc *p, int coord,
                        const sigset_t *orig_mask)
{
    char group[16], index[16], memory[32], cport[16];
    const char *argv[20];
    int argc = 0;
    argv[argc++] = n->server;
    argv[argc++] = "--role";
    argv[argc++] = p ? cluster_role_name(p->role) : "coordinator";
    argv[argc++] = "--cluster";
    argv[argc++] = n->cluster_file;
    if (p) {
        snprintf(group, sizeof(group), "%d", p->group);
        snprintf(index, sizeof(index), "%d", p->index);
        argv[argc++] = "--group";
        argv[argc++] = group;
        argv[argc++] = "--index";
        argv[argc++] = index;
    } else {
        /* Which coordinator line this one is: its address and port. */
        snprintf(cport, sizeof(cport), "%d", n->cluster.coords[coord].port);
        argv[argc++] = "-l";
        argv[argc++] = n->cluster.coords[coord].host;
        argv[argc++] = "-p";
        argv[argc++] = cport;
    }
    argv[argc++] = "-U";
    argv[argc++] = "0";
    if (p && role_uses_memory(p->role)) {
        format_memory(n->cluster.memory, memory, sizeof(memory));
        argv[argc++] = "-m";
        argv[argc++] = memory;
    }
    if (p && n->auth_file) {
        argv[argc++] = "-Y";
        argv[argc++] = n->auth_file;
    }
    if (geteuid() == 0) {
        argv[argc++] = "-u";
        argv[argc++] = "root";
    }
    argv[argc] = NULL;

    redirect_child_output(n, p, coord);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execv(n->server, (char *const *)argv);
    fprintf(stderr, "cocytus-node: cannot run %s: %s\n", n->server, strerror(errno));
    _exit(127);
}

static void print_child(const struct node *n, const struct child *c)
{
    const struct cluster_proc *p = c->proc;
    if (!p) {
        const struct cluster_coord *k = &n->cluster.coords[c->coord];
        fprintf(stderr, "cocytus-node %d: coordinator %s:%d (control links on port %d) pid %ld\n",
                n->node, k->host, k->port, k->link_port, (long)c->pid);
        return;
    }
    printf("%s %d %d %d %s:%d %ld\n", cluster_role_name(p->role), p->group, p->index,
           p->node, p->host, p->port, (long)c->pid);
    fflush(stdout);
}

/* Fork ch's process. */
static int fork_child(struct node *n, struct child *ch, const sigset_t *orig_mask)
{
    fflush(NULL);
    ch->pid = fork();
    if (ch->pid < 0) {
        ch->pid = 0;
        fprintf(stderr, "cocytus-node: fork: %s\n", strerror(errno));
        return -1;
    }
    if (ch->pid == 0)
        exec_server(n, ch->proc, ch->coord, orig_mask);
    ch->started_ms = mono_ms();
    ch->restart_at_ms = 0;
    n->alive++;
    print_child(n, ch);
    return 0;
}

/* Fork one child for process p (NULL: coordinator line coord). */
static int start_child(struct node *n, const struct cluster_proc *p, int coord,
                       const sigset_t *orig_mask)
{
    struct child *ch = &n->children[n->nchildren];
    ch->proc = p;
    ch->coord = coord;
    ch->backoff_ms = RESTART_FIRST_MS;
    if (fork_child(n, ch, orig_mask) < 0)
        return -1;
    n->nchildren++;
    return 0;
}

static int start_children(struct node *n, const sigset_t *orig_mask)
{
    const struct cluster *c = &n->cluster;
    /* More slots for coordinators. */
    n->children = calloc((size_t)c->nprocs + CLUSTER_MAX_COORDS, sizeof(*n->children));
    if (!n->children) {
        fprintf(stderr, "cocytus-node: out of memory\n");
        return -1;
    }
    /* The coordinator first: the servers' control links find it sooner. */
    for (int k = 0; k < c->ncoords; k++)
        if (cluster_coordinator_node_of(c, k) == n->node && start_child(n, NULL, k, orig_mask) < 0)
            return -1;
    for (int i = 0; i < c->nprocs; i++) {
        if (c->procs[i].node != n->node)
            continue;
        if (start_child(n, &c->procs[i], 0, orig_mask) < 0)
            return -1;
    }
    return 0;
}

static struct child *child_by_pid(struct node *n, pid_t pid)
{
    for (int i = 0; i < n->nchildren; i++)
        if (n->children[i].pid == pid)
            return &n->children[i];
    return NULL;
}

static void log_death(const struct node *n, const struct child *c, int status)
{
    const struct cluster_proc *p = c->proc;
    char how[64];
    char what[CLUSTER_HOST_MAX + 64];
    if (p)
        snprintf(what, sizeof(what), "%s %d %d (pid %ld, %s:%d)", cluster_role_name(p->role),
                 p->group, p->index, (long)c->pid, p->host, p->port);
    else
        snprintf(what, sizeof(what), "coordinator (pid %ld, %s:%d)", (long)c->pid,
                 n->cluster.coords[c->coord].host, n->cluster.coords[c->coord].port);
    if (WIFEXITED(status))
        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof(how), "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof(how), "ended (wait status %d)", status);
    if (n->no_restart)
        fprintf(stderr, "cocytus-node %d: %s %s; not restarted\n", n->node, what, how);
    else
        fprintf(stderr, "cocytus-node %d: %s %s; starting it again in %llu ms\n", n->node, what,
                how, (unsigned long long)c->backoff_ms);
}

/* A child died: when to start it again. */
static void schedule_restart(struct node *n, struct child *c)
{
    if (n->no_restart)
        return;
    uint64_t now = mono_ms();
    if (now - c->started_ms > RESTART_RESET_MS)
        c->backoff_ms = RESTART_FIRST_MS;
    c->restart_at_ms = now + c->backoff_ms;
    c->backoff_ms = c->backoff_ms * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : c->backoff_ms * 2;
}

/* Start the children whose back-off ended; the time to the next one, in
 * ms (-1: none pending). */
static long restart_due(struct node *n, const sigset_t *orig_mask)
{
    uint64_t now = mono_ms();
    long next = -1;
    for (int i = 0; i < n->nchildren; i++) {
        struct child *c = &n->children[i];
        if (c->pid != 0 || c->restart_at_ms == 0)
            continue;
        if (c->restart_at_ms <= now) {
            c->restarts++;
            fprintf(stderr, "cocytus-node %d: starting %s %d %d again (restart %u)\n", n->node,
                    c->proc ? cluster_role_name(c->proc->role) : "coordinator",
                    c->proc ? c->proc->group : 0, c->proc ? c->proc->index : 0, c->restarts);
            if (fork_child(n, c, orig_mask) < 0)
                schedule_restart(n, c);
            else
                continue;
        }
        long left = (long)(c->restart_at_ms - now);
        if (next < 0 || left < next)
            next = left;
    }
    return next;
}

/* Reaps every child that has ended; logs each. */
static void reap_children(struct node *n, bool quiet)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        struct child *c = child_by_pid(n, pid);
        if (!c)
            continue;
        if (!quiet)
            log_death(n, c, status);
        c->pid = 0;
        n->alive--;
        if (!quiet)
            schedule_restart(n, c);
    }
}

static void signal_children(const struct node *n, int sig)
{
    for (int i = 0; i < n->nchildren; i++)
        if (n->children[i].pid > 0)
            kill(n->children[i].pid, sig);
}

/* SIGTERM to every child; SIGKILL to those still there after the grace. */
static void stop_children(struct node *n, const sigset_t *wait_set)
{
    signal_children(n, SIGTERM);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += STOP_GRACE_SECONDS;
    while (n->alive > 0) {
        reap_children(n, true);
        if (n->alive == 0)
            break;
        struct timespec now, left;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ns = (deadline.tv_sec - now.tv_sec) * 1000000000L + (deadline.tv_nsec - now.tv_nsec);
        if (ns <= 0)
            break;
        left.tv_sec = ns / 1000000000L;
        left.tv_nsec = ns % 1000000000L;
        sigtimedwait(wait_set, NULL, &left);
    }
    if (n->alive > 0) {
        fprintf(stderr, "cocytus-node %d: %d process(es) ignored SIGTERM; sending SIGKILL\n",
                n->node, n->alive);
        signal_children(n, SIGKILL);
        for (int i = 0; i < n->nchildren; i++) {
            if (n->children[i].pid > 0) {
                waitpid(n->children[i].pid, NULL, 0);
                n->children[i].pid = 0;
                n->alive--;
            }
        }
    }
}

/* Waits for signals: logs deaths, stops on SIGTERM/SIGINT.  Returns the
 * exit status of the node. */
static int supervise(struct node *n, const sigset_t *wait_set, const sigset_t *orig_mask)
{
    for (;;) {
        long next = restart_due(n, orig_mask);
        if (n->alive == 0 && next < 0)
            break;
        int sig;
        if (next >= 0) {
            struct timespec ts = { next / 1000, (next % 1000) * 1000000L };
            sig = sigtimedwait(wait_set, NULL, &ts);
        } else {
            sig = sigwaitinfo(wait_set, NULL);
        }
        if (sig < 0)
            continue;
        if (sig == SIGCHLD) {
            reap_children(n, false);
        } else if (sig == SIGTERM || sig == SIGINT) {
            fprintf(stderr, "cocytus-node %d: %s, stopping %d process(es)\n", n->node,
                    strsignal(sig), n->alive);
            stop_children(n, wait_set);
            return EXIT_SUCCESS;
        }
    }
    fprintf(stderr, "cocytus-node %d: no processes left, exiting\n", n->node);
    return EXIT_FAILURE;
}

static int load_cluster(struct node *n)
{
    char err[512];
    if (cluster_check_private(n->cluster_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-node: %s\n", err);
        return -1;
    }
    if (cluster_load(n->cluster_file, &n->cluster, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-node: %s: %s\n", n->cluster_file, err);
        return -1;
    }
    if (n->node >= n->cluster.nnodes) {
        fprintf(stderr, "cocytus-node: %s has %d node(s); there is no node %d\n",
                n->cluster_file, n->cluster.nnodes, n->node);
        cluster_free(&n->cluster);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct node n;
    if (parse_args(argc, argv, &n) < 0)
        return EXIT_FAILURE;
    if (load_cluster(&n) < 0)
        return EXIT_FAILURE;
    if (!n.server && find_server(&n) < 0) {
        cluster_free(&n.cluster);
        return EXIT_FAILURE;
    }
    /* Lead our own process group (already so when started by setsid). */
    if (getpgrp() != getpid() && setpgid(0, 0) < 0)
        fprintf(stderr, "cocytus-node: setpgid: %s\n", strerror(errno));

    signal(SIGPIPE, SIG_IGN);       /* a closed stdout must not kill the node */
    sigset_t wait_set, orig_mask;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGCHLD);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGINT);
    sigprocmask(SIG_BLOCK, &wait_set, &orig_mask);

    int rc = EXIT_FAILURE;
    if (start_children(&n, &orig_mask) < 0)
        stop_children(&n, &wait_set);
    else if (n.nchildren == 0)
        fprintf(stderr, "cocytus-node: %s places no process on node %d\n", n.cluster_file, n.node);
    else {
        fprintf(stderr, "cocytus-node %d: started %d process(es) of %s\n", n.node, n.nchildren,
                n.cluster_file);
        rc = supervise(&n, &wait_set, &orig_mask);
    }
    cluster_free(&n.cluster);
    free(n.children);
    return rc;
}
