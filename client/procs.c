/* procs.c - loading cocytus-cli's process list from DIR/endpoints (written
 * by scripts/cluster up) or from a cluster file (repl/cluster.c).  With
 * several coordinators (ZooKeeper backend) only the leader listens: the
 * coordinator is the first of them that takes a connection. */
#include "procs.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "cluster.h"
#include "tls.h"

#define ENDPOINT_LINE_MAX 512
#define ENDPOINT_LINES_MAX 100000

static int procs_push(struct proc_list *l, const struct proc_info *p)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        struct proc_info *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *p;
    return 0;
}

static bool known_role(const char *role)
{
    static const char *const roles[] = { "data", "parity", "plain", "primary", "backup" };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(role, roles[i]) == 0)
            return true;
    return false;
}

/* Split "host:port" (the last colon separates; "[v6]:port" allowed). */
static bool split_hostport(const char *s, char *host, size_t hostcap, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return false;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    if (hl + 1 > hostcap)
        return false;
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
        return false;
    *port = (int)p;
    return true;
}

/* Parse one endpoints line: 1 taken, 0 skipped, -1 malformed. */
static int parse_endpoint(const char *line, struct proc_info *p)
{
    char role[32], addr[128];
    long pid = 0;
    memset(p, 0, sizeof *p);
    int n = sscanf(line, "%31s %d %d %d %127s %ld", role, &p->group, &p->index,
                   &p->node, addr, &pid);
    if (n < 1 || role[0] == '#' || !known_role(role))
        return 0;
    if (n < 5 || p->group < 0 || p->index < 0)
        return -1;
    snprintf(p->role, sizeof p->role, "%.15s", role);
    if (!split_hostport(addr, p->host, sizeof p->host, &p->port))
        return -1;
    p->pid = n == 6 ? pid : 0;
    return 1;
}

int procs_from_endpoints(const char *dir, struct proc_list *out, char *err, size_t errlen)
{
    char path[4096], line[ENDPOINT_LINE_MAX];
    snprintf(path, sizeof path, "%s/endpoints", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s (is the cluster up? try --dir or --cluster)", path);
        return -1;
    }
    int rc = 0, lineno = 0;
    while (rc == 0 && lineno < ENDPOINT_LINES_MAX && fgets(line, sizeof line, f) != NULL) {
        struct proc_info p;
        lineno++;
        int r = parse_endpoint(line, &p);
        if (r < 0) {
            snprintf(err, errlen, "%s:%d: malformed line (want <role> <group> <index> "
                     "<node> <host>:<port> <pid>)", path, lineno);
            rc = -1;
        } else if (r > 0 && procs_push(out, &p) < 0) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    fclose(f);
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s lists no server processes", path);
        rc = -1;
    }
    return rc;
}

int procs_from_cluster(const char *path, struct proc_list *out, char *err, size_t errlen)
{
    struct cluster c;
    memset(&c, 0, sizeof c);
    if (cluster_load(path, &c, err, errlen) < 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < c.nprocs && rc == 0; i++) {
        const struct cluster_proc *cp = &c.procs[i];
        struct proc_info p;
        memset(&p, 0, sizeof p);
        snprintf(p.role, sizeof p.role, "%s", cluster_role_name(cp->role));
        p.group = cp->group;
        p.index = cp->index;
        p.node = cp->node;
        snprintf(p.host, sizeof p.host, "%s", cp->host);
        p.port = cp->port;
        if (procs_push(out, &p) < 0) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    cluster_free(&c);
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s describes no processes", path);
        rc = -1;
    }
    return rc;
}

int procs_load_secret(struct proc_list *l, const char *dir, const char *cluster_file,
                      char *err, size_t errlen)
{
    char path[4096];
    if (cluster_file != NULL)
        snprintf(path, sizeof path, "%s", cluster_file);
    else
        snprintf(path, sizeof path, "%s/cluster.conf", dir);
    struct cluster c;
    memset(&c, 0, sizeof c);
    if (cluster_load(path, &c, err, errlen) < 0)
        return -1;
    snprintf(l->secret, sizeof l->secret, "%s", c.secret);
    int rc = 0;
    if (c.has_client_tls) {
        char why[400];
        l->tls = tls_dialer_new(c.client_tls_ca, c.client_tls_cert, c.client_tls_key,
                                TLS_KEYFORMAT_PEM, why, sizeof why);
        if (l->tls == NULL) {
            snprintf(err, errlen, "client_tls of %s: %s", path, why);
            rc = -2;
        }
    }
    cluster_free(&c);
    return rc;
}

static bool listening(const char *host, int port);

/* DIR/coordinators (scripts/cluster up --zookeeper): the first that listens. */
static int leader_from_dir(const char *dir, char *host, size_t hostcap, int *port)
{
    char path[4096], line[ENDPOINT_LINE_MAX];
    snprintf(path, sizeof path, "%s/coordinators", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (split_hostport(line, host, hostcap, port) && listening(host, *port))
            found = 1;
    }
    fclose(f);
    return found;
}

static int coordinator_from_dir(const char *dir, char *host, size_t hostcap, int *port,
                                char *err, size_t errlen)
{
    char path[4096], line[ENDPOINT_LINE_MAX];
    if (leader_from_dir(dir, host, hostcap, port))
        return 1;
    snprintf(path, sizeof path, "%s/coordinator", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (!got || !split_hostport(line, host, hostcap, port)) {
        snprintf(err, errlen, "%s does not hold <host>:<port>", path);
        return -1;
    }
    return 1;
}

#define PROBE_MS 500

/* Does something take a TCP connection on host:port within PROBE_MS? */
static bool listening(const char *host, int port)
{
    char service[16];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &ai) != 0)
        return false;
    bool ok = false;
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd >= 0 && fcntl(fd, F_SETFL, O_NONBLOCK) == 0) {
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc == 0) {
            ok = true;
        } else {
            struct pollfd pfd = { .fd = fd, .events = POLLOUT };
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            ok = poll(&pfd, 1, PROBE_MS) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
        }
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return ok;
}

static int coordinator_from_cluster(const char *path, char *host, size_t hostcap, int *port,
                                    char *err, size_t errlen)
{
    struct cluster c;
    memset(&c, 0, sizeof c);
    if (cluster_load(path, &c, err, errlen) < 0)
        return -1;
    int rc = 0;
    if (c.has_coordinator) {
        int pick = 0;
        for (int i = 0; c.ncoords > 1 && i < c.ncoords; i++)
            if (listening(c.coords[i].host, c.coords[i].port)) {
                pick = i;
                break;
            }
        snprintf(host, hostcap, "%s", c.coords[pick].host);
        *port = c.coords[pick].port;
        rc = 1;
    }
    cluster_free(&c);
    return rc;
}

int procs_coordinator(const char *dir, const char *cluster_file, char *host, size_t hostcap,
                      int *port, char *err, size_t errlen)
{
    if (cluster_file != NULL)
        return coordinator_from_cluster(cluster_file, host, hostcap, port, err, errlen);
    return coordinator_from_dir(dir, host, hostcap, port, err, errlen);
}

void procs_free(struct proc_list *l)
{
    tls_dialer_free(l->tls);
    l->tls = NULL;
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

const struct proc_info *procs_find(const struct proc_list *l, int group,
                                   const char *role, int index)
{
    for (int i = 0; i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        if (p->group == group && p->index == index && strcmp(p->role, role) == 0)
            return p;
    }
    return NULL;
}

int procs_ngroups(const struct proc_list *l)
{
    int g = 0;
    for (int i = 0; i < l->n; i++)
        if (l->v[i].group + 1 > g)
            g = l->v[i].group + 1;
    return g;
}

int procs_count(const struct proc_list *l, int group, const char *role)
{
    int n = 0;
    for (int i = 0; i < l->n; i++)
        if (l->v[i].group == group && strcmp(l->v[i].role, role) == 0)
            n++;
    return n;
}
