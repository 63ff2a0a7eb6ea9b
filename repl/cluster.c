/* cluster.c - the cluster file parser and the process layout it implies.
 *
 * cluster_load() reads the file line by line into a struct cluster, then
 * checks what only the whole file can tell (required directives, node
 * numbering) and either computes the layout (see cluster.h) or checks and
 * orders the explicit proc lines.  Every error names the line it is about,
 * or the directive that is missing. */
#include "config.h"

#include "cluster.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FIELDS 8
#define MAX_PORT 65535
#define REGION_UNIT 4096                    /* regions are whole 4 KB units */
#define DEFAULT_SIZE ((size_t)64 << 20)     /* region and memory: 64m */
#define MIN_MEMORY ((size_t)2 << 20)        /* twice the default 1m item limit */
#define DEFAULT_BASE_PORT 21000

/* A proc line as read, with its line number for later messages. */
struct proc_line {
    struct cluster_proc proc;
    int line;
};

/* Everything the parser carries between lines. */
struct parser {
    struct cluster *c;
    char *err;
    size_t errlen;
    int line;                       /* current line number (0: whole file) */
    int name_line, secret_line, scheme_line, sync_line, routing_line, recovery_line;
    int region_line, memory_line, base_port_line;
    int coordinator_line, coord_state_line, zookeeper_line, second_coordinator_line;
    char coord_state[CLUSTER_PATH_MAX];     /* as written; resolved at the end */
    int link_tls_line, client_tls_line;
    char tls_files[3][CLUSTER_PATH_MAX];    /* link_tls's, as written; resolved at the end */
    char client_tls_files[3][CLUSTER_PATH_MAX];     /* client_tls's, the same */
    int node_line[CLUSTER_MAX_NODES];
    struct proc_line *procs;        /* explicit proc lines */
    int nprocs, cap;
};

static const char *const role_names[] = {
    [ROLE_PLAIN] = "plain", [ROLE_DATA] = "data", [ROLE_PARITY] = "parity",
    [ROLE_PRIMARY] = "primary", [ROLE_BACKUP] = "backup",
};

const char *cluster_role_name(enum cluster_role r)
{
    if ((unsigned)r < sizeof(role_names) / sizeof(role_names[0]))
        return role_names[r];
    return "?";
}

int cluster_role_from_name(const char *name, enum cluster_role *out)
{
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
        if (strcmp(name, role_names[i]) == 0) {
            *out = (enum cluster_role)i;
            return 0;
        }
    }
    return -1;
}

const char *cluster_scheme_name(enum cluster_scheme s)
{
    switch (s) {
    case SCHEME_PLAIN: return "plain";
    case SCHEME_PBR: return "pbr";
    case SCHEME_RS: return "rs";
    }
    return "?";
}

/* Message into p->err, prefixed with the line number when there is one. */
static int fail(struct parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(struct parser *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->line > 0)
        snprintf(p->err, p->errlen, "line %d: %s", p->line, msg);
    else
        snprintf(p->err, p->errlen, "%s", msg);
    return -1;
}

/* Decimal integer in [lo, hi]. */
static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* "65536", "512k", "64m", "1g" -> bytes (a bare number is bytes). */
static bool parse_size(const char *s, size_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return false;
    }
    if (*end != '\0' || v > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)v << shift;
    return true;
}

/* Directives that may appear once: remembers the line, complains the 2nd time. */
static int once(struct parser *p, int *seen_line, const char *directive)
{
    if (*seen_line)
        return fail(p, "'%s' given twice (first on line %d)", directive, *seen_line);
    *seen_line = p->line;
    return 0;
}

static int want_fields(struct parser *p, int argc, int want, const char *usage)
{
    if (argc != want)
        return fail(p, "expected '%s'", usage);
    return 0;
}

static int copy_text(struct parser *p, char *dst, size_t dstlen, const char *src,
                     const char *what)
{
    size_t len = strlen(src);
    if (len >= dstlen)
        return fail(p, "%s is too long (at most %zu characters)", what, dstlen - 1);
    memcpy(dst, src, len + 1);
    return 0;
}

static int dir_cluster(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "cluster <name>") < 0 || once(p, &p->name_line, "cluster") < 0)
        return -1;
    return copy_text(p, p->c->name, sizeof(p->c->name), argv[1], "the cluster name");
}

static int dir_secret(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "secret <text>") < 0 || once(p, &p->secret_line, "secret") < 0)
        return -1;
    return copy_text(p, p->c->secret, sizeof(p->c->secret), argv[1], "the secret");
}

static int scheme_rs(struct parser *p, int argc, char **argv)
{
    int k, n;
    if (want_fields(p, argc, 4, "scheme rs <K> <N>") < 0)
        return -1;
    if (!parse_int(argv[2], 1, 255, &k))
        return fail(p, "bad K '%s' in scheme rs (a number from 1 to 254)", argv[2]);
    if (!parse_int(argv[3], 1, 100000, &n))
        return fail(p, "bad N '%s' in scheme rs (a number from 2 to 255)", argv[3]);
    if (n > 255)
        return fail(p, "scheme rs %d %d: N may be at most 255", k, n);
    if (k >= n)
        return fail(p, "scheme rs %d %d: K must be smaller than N (at least one parity process)", k, n);
    p->c->scheme = SCHEME_RS;
    p->c->k = k;
    p->c->n = n;
    return 0;
}

static int scheme_pbr(struct parser *p, int argc, char **argv)
{
    int m;
    if (want_fields(p, argc, 3, "scheme pbr <M>") < 0)
        return -1;
    if (!parse_int(argv[2], 1, 254, &m))
        return fail(p, "bad M '%s' in scheme pbr (backups per primary, 1 to 254)", argv[2]);
    p->c->scheme = SCHEME_PBR;
    p->c->k = 1;
    p->c->n = 1 + m;
    return 0;
}

static int dir_scheme(struct parser *p, int argc, char **argv)
{
    if (argc < 2)
        return fail(p, "expected 'scheme rs <K> <N>', 'scheme pbr <M>' or 'scheme plain'");
    if (once(p, &p->scheme_line, "scheme") < 0)
        return -1;
    if (strcmp(argv[1], "rs") == 0)
        return scheme_rs(p, argc, argv);
    if (strcmp(argv[1], "pbr") == 0)
        return scheme_pbr(p, argc, argv);
    if (strcmp(argv[1], "plain") == 0) {
        if (want_fields(p, argc, 2, "scheme plain") < 0)
            return -1;
        p->c->scheme = SCHEME_PLAIN;
        p->c->k = p->c->n = 1;
        return 0;
    }
    return fail(p, "unknown scheme '%s' (rs, pbr or plain)", argv[1]);
}

static int dir_sync(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "sync full|semi|async") < 0 || once(p, &p->sync_line, "sync") < 0)
        return -1;
    if (strcmp(argv[1], "full") == 0)
        p->c->sync = SYNC_FULL;
    else if (strcmp(argv[1], "semi") == 0)
        p->c->sync = SYNC_SEMI;
    else if (strcmp(argv[1], "async") == 0)
        p->c->sync = SYNC_ASYNC;
    else
        return fail(p, "unknown sync mode '%s' (full, semi or async)", argv[1]);
    return 0;
}

static int dir_recovery(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "recovery online|blocked") < 0 ||
        once(p, &p->recovery_line, "recovery") < 0)
        return -1;
    if (strcmp(argv[1], "online") == 0)
        p->c->recovery_blocked = false;
    else if (strcmp(argv[1], "blocked") == 0)
        p->c->recovery_blocked = true;
    else
        return fail(p, "recovery must be online or blocked, not '%s'", argv[1]);
    return 0;
}

static int dir_routing(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "routing on|off") < 0 || once(p, &p->routing_line, "routing") < 0)
        return -1;
    if (strcmp(argv[1], "on") == 0)
        p->c->routing = true;
    else if (strcmp(argv[1], "off") == 0)
        p->c->routing = false;
    else
        return fail(p, "routing must be on or off, not '%s'", argv[1]);
    return 0;
}

static int dir_region(struct parser *p, int argc, char **argv)
{
    size_t v;
    if (want_fields(p, argc, 2, "region <size>") < 0 || once(p, &p->region_line, "region") < 0)
        return -1;
    if (!parse_size(argv[1], &v) || v == 0)
        return fail(p, "bad region size '%s' (e.g. 64m, 512k, 1g)", argv[1]);
    if (v % REGION_UNIT)
        return fail(p, "region size %s is not a multiple of 4k", argv[1]);
    p->c->region_size = v;
    return 0;
}

static int dir_memory(struct parser *p, int argc, char **argv)
{
    size_t v;
    if (want_fields(p, argc, 2, "memory <size>") < 0 || once(p, &p->memory_line, "memory") < 0)
        return -1;
    if (!parse_size(argv[1], &v))
        return fail(p, "bad memory size '%s' (e.g. 64m, 1g)", argv[1]);
    if (v < MIN_MEMORY)
        return fail(p, "memory %s is too small (at least 2m)", argv[1]);
    p->c->memory = v;
    return 0;
}

static int dir_base_port(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "base_port <port>") < 0 || once(p, &p->base_port_line, "base_port") < 0)
        return -1;
    if (!parse_int(argv[1], 1, MAX_PORT, &p->c->base_port))
        return fail(p, "bad base_port '%s' (1 to 65535)", argv[1]);
    return 0;
}

static int dir_node(struct parser *p, int argc, char **argv)
{
    int idx;
    if (want_fields(p, argc, 3, "node <index> <host>") < 0)
        return -1;
    if (!parse_int(argv[1], 0, CLUSTER_MAX_NODES - 1, &idx))
        return fail(p, "bad node index '%s' (0 to %d)", argv[1], CLUSTER_MAX_NODES - 1);
    if (p->node_line[idx])
        return fail(p, "node %d given twice (first on line %d)", idx, p->node_line[idx]);
    p->node_line[idx] = p->line;
    return copy_text(p, p->c->hosts[idx], sizeof(p->c->hosts[idx]), argv[2], "the host");
}

static int grow_procs(struct parser *p)
{
    if (p->nprocs < p->cap)
        return 0;
    int cap = p->cap ? 2 * p->cap : 16;
    struct proc_line *np = realloc(p->procs, (size_t)cap * sizeof(*np));
    if (!np)
        return fail(p, "out of memory");
    p->procs = np;
    p->cap = cap;
    return 0;
}

static int dir_proc(struct parser *p, int argc, char **argv)
{
    struct cluster_proc q;
    memset(&q, 0, sizeof(q));
    if (want_fields(p, argc, 7, "proc <group> <role> <index> <node> <port> <link_port>") < 0)
        return -1;
    if (!parse_int(argv[1], 0, 1 << 20, &q.group))
        return fail(p, "bad group '%s'", argv[1]);
    if (cluster_role_from_name(argv[2], &q.role) < 0)
        return fail(p, "unknown role '%s' (plain, data, parity, primary or backup)", argv[2]);
    if (!parse_int(argv[3], 0, 254, &q.index))
        return fail(p, "bad index '%s'", argv[3]);
    if (!parse_int(argv[4], 0, CLUSTER_MAX_NODES - 1, &q.node))
        return fail(p, "bad node '%s' (0 to %d)", argv[4], CLUSTER_MAX_NODES - 1);
    if (!parse_int(argv[5], 1, MAX_PORT, &q.port))
        return fail(p, "bad port '%s' (1 to 65535)", argv[5]);
    if (!parse_int(argv[6], 1, MAX_PORT, &q.link_port))
        return fail(p, "bad link port '%s' (1 to 65535)", argv[6]);
    if (q.port == q.link_port)
        return fail(p, "port and link port are both %d", q.port);
    if (grow_procs(p) < 0)
        return -1;
    p->procs[p->nprocs].proc = q;
    p->procs[p->nprocs].line = p->line;
    p->nprocs++;
    return 0;
}

/* coordinator zookeeper <host:port,...[/chroot]> */
static int dir_coordinator_zookeeper(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 3, "coordinator zookeeper <host:port,...[/chroot]>") < 0 ||
        once(p, &p->zookeeper_line, "coordinator zookeeper") < 0)
        return -1;
    p->c->has_zookeeper = true;
    return copy_text(p, p->c->zk_connect, sizeof(p->c->zk_connect), argv[2],
                     "the ZooKeeper connect string");
}

static int dir_coordinator(struct parser *p, int argc, char **argv)
{
    struct cluster *c = p->c;
    if (argc >= 2 && strcmp(argv[1], "zookeeper") == 0)
        return dir_coordinator_zookeeper(p, argc, argv);
    if (want_fields(p, argc, 4, "coordinator <host> <port> <link_port>") < 0)
        return -1;
    if (c->ncoords == CLUSTER_MAX_COORDS)
        return fail(p, "more than %d coordinator lines", CLUSTER_MAX_COORDS);
    struct cluster_coord *k = &c->coords[c->ncoords];
    if (copy_text(p, k->host, sizeof(k->host), argv[1], "the coordinator host") < 0)
        return -1;
    if (!parse_int(argv[2], 1, MAX_PORT, &k->port))
        return fail(p, "bad coordinator port '%s' (1 to 65535)", argv[2]);
    if (!parse_int(argv[3], 1, MAX_PORT, &k->link_port))
        return fail(p, "bad coordinator link port '%s' (1 to 65535)", argv[3]);
    if (k->port == k->link_port)
        return fail(p, "coordinator port and link port are both %d", k->port);
    for (int i = 0; i < c->ncoords; i++)
        if (strcmp(c->coords[i].host, k->host) == 0 &&
            (c->coords[i].port == k->port || c->coords[i].link_port == k->link_port ||
             c->coords[i].port == k->link_port || c->coords[i].link_port == k->port))
            return fail(p, "coordinator ports %d/%d on %s clash with another coordinator line",
                        k->port, k->link_port, k->host);
    if (c->ncoords++ == 0) {
        p->coordinator_line = p->line;
        snprintf(c->coord_host, sizeof(c->coord_host), "%s", k->host);
        c->coord_port = k->port;
        c->coord_link_port = k->link_port;
    } else {
        p->second_coordinator_line = p->line;
    }
    c->has_coordinator = true;
    return 0;
}

static int dir_coord_state(struct parser *p, int argc, char **argv)
{
    if (want_fields(p, argc, 2, "coord_state <path>") < 0 ||
        once(p, &p->coord_state_line, "coord_state") < 0)
        return -1;
    return copy_text(p, p->coord_state, sizeof(p->coord_state), argv[1],
                     "the coordinator state path");
}

/* "<name> <cert> <key> <ca>" into files, once. */
static int tls_files_line(struct parser *p, int argc, char **argv, const char *name,
                          int *line, char files[3][CLUSTER_PATH_MAX])
{
    char usage[80], what[48];
    snprintf(usage, sizeof(usage), "%s <cert-file> <key-file> <ca-file>", name);
    snprintf(what, sizeof(what), "a %s file name", name);
    if (want_fields(p, argc, 4, usage) < 0 || once(p, line, name) < 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (copy_text(p, files[i], CLUSTER_PATH_MAX, argv[1 + i], what) < 0)
            return -1;
    return 0;
}

static int dir_link_tls(struct parser *p, int argc, char **argv)
{
    if (tls_files_line(p, argc, argv, "link_tls", &p->link_tls_line, p->tls_files) < 0)
        return -1;
    p->c->has_link_tls = true;
    return 0;
}

static int dir_client_tls(struct parser *p, int argc, char **argv)
{
    if (tls_files_line(p, argc, argv, "client_tls", &p->client_tls_line,
                       p->client_tls_files) < 0)
        return -1;
    p->c->has_client_tls = true;
    return 0;
}

/* Splits line into whitespace-separated fields; a field starting with '#'
 * begins a comment.  Returns the number of fields, or -1 if too many. */
static int split_fields(char *line, char **argv)
{
    int argc = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
        if (t[0] == '#')
            break;
        if (argc == MAX_FIELDS)
            return -1;
        argv[argc++] = t;
    }
    return argc;
}

static int parse_line(struct parser *p, char *line)
{
    static const struct {
        const char *name;
        int (*fn)(struct parser *, int, char **);
    } directives[] = {
        { "cluster", dir_cluster }, { "secret", dir_secret }, { "scheme", dir_scheme },
        { "sync", dir_sync }, { "region", dir_region }, { "memory", dir_memory },
        { "node", dir_node }, { "base_port", dir_base_port }, { "proc", dir_proc },
        { "routing", dir_routing }, { "coordinator", dir_coordinator },
        { "recovery", dir_recovery },
        { "coord_state", dir_coord_state }, { "link_tls", dir_link_tls },
        { "client_tls", dir_client_tls },
    };
    char *argv[MAX_FIELDS];
    int argc = split_fields(line, argv);
    if (argc < 0)
        return fail(p, "too many fields");
    if (argc == 0)
        return 0;
    for (size_t i = 0; i < sizeof(directives) / sizeof(directives[0]); i++)
        if (strcmp(argv[0], directives[i].name) == 0)
            return directives[i].fn(p, argc, argv);
    return fail(p, "unknown directive '%s'", argv[0]);
}

static int parse_file(struct parser *p, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(p, "cannot open %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) != -1) {
        p->line++;
        rc = parse_line(p, line);
    }
    if (rc == 0 && ferror(f))
        rc = fail(p, "read error on %s", path);
    free(line);
    fclose(f);
    p->line = 0;
    return rc;
}

static int check_required(struct parser *p)
{
    if (!p->name_line)
        return fail(p, "no 'cluster <name>' line");
    if (!p->secret_line)
        return fail(p, "no 'secret <text>' line");
    if (!p->scheme_line)
        return fail(p, "no 'scheme' line (rs <K> <N>, pbr <M> or plain)");
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (p->node_line[i])
            return 0;
    return fail(p, "no 'node <index> <host>' line");
}

/* Nodes must be numbered 0..n-1 without gaps. */
static int check_nodes(struct parser *p)
{
    int last = -1;
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (p->node_line[i])
            last = i;
    for (int i = 0; i < last; i++)
        if (!p->node_line[i])
            return fail(p, "node %d is missing (nodes are numbered 0 to %d without gaps; "
                        "node %d is on line %d)", i, last, last, p->node_line[last]);
    p->c->nnodes = last + 1;
    return 0;
}

/* Role and index of process p (0..n-1) within a group, in layout order. */
static void role_at(const struct cluster *c, int pos, enum cluster_role *role, int *index)
{
    *role = ROLE_PLAIN;
    *index = 0;
    switch (c->scheme) {
    case SCHEME_PLAIN:
        return;
    case SCHEME_PBR:
        *role = pos == 0 ? ROLE_PRIMARY : ROLE_BACKUP;
        *index = pos == 0 ? 0 : pos - 1;
        return;
    case SCHEME_RS:
        *role = pos < c->k ? ROLE_DATA : ROLE_PARITY;
        *index = pos < c->k ? pos : pos - c->k;
        return;
    }
}

/* Inverse of role_at: the position in the group, or -1 if the role does not
 * belong to the scheme or the index is out of range. */
static int position_of(const struct cluster *c, enum cluster_role role, int index)
{
    int first, count;
    switch (role) {
    case ROLE_PLAIN: first = 0; count = c->scheme == SCHEME_PLAIN ? 1 : 0; break;
    case ROLE_PRIMARY: first = 0; count = c->scheme == SCHEME_PBR ? 1 : 0; break;
    case ROLE_BACKUP: first = 1; count = c->scheme == SCHEME_PBR ? c->n - 1 : 0; break;
    case ROLE_DATA: first = 0; count = c->scheme == SCHEME_RS ? c->k : 0; break;
    case ROLE_PARITY: first = c->k; count = c->scheme == SCHEME_RS ? c->n - c->k : 0; break;
    default: return -1;
    }
    if (index < 0 || index >= count)
        return -1;
    return first + index;
}

static int alloc_procs(struct parser *p, int nprocs)
{
    p->c->procs = calloc((size_t)nprocs, sizeof(*p->c->procs));
    if (!p->c->procs)
        return fail(p, "out of memory");
    p->c->nprocs = nprocs;
    return 0;
}

/* No proc lines: groups interleaved over the nodes, ports in layout order. */
static int compute_layout(struct parser *p)
{
    struct cluster *c = p->c;
    if (c->scheme == SCHEME_PLAIN)
        c->ngroups = c->nnodes;
    else
        c->ngroups = c->nnodes >= c->n ? c->nnodes : 1;
    int nprocs = c->ngroups * c->n;
    long last_port = (long)c->base_port + 2L * nprocs - 1;
    if (last_port > MAX_PORT)
        return fail(p, "%d process(es) need ports %d to %ld, beyond 65535 (choose a lower base_port)",
                    nprocs, c->base_port, last_port);
    if (alloc_procs(p, nprocs) < 0)
        return -1;
    int q = 0;
    for (int g = 0; g < c->ngroups; g++) {
        for (int pos = 0; pos < c->n; pos++, q++) {
            struct cluster_proc *pr = &c->procs[q];
            pr->group = g;
            role_at(c, pos, &pr->role, &pr->index);
            pr->node = (g + pos) % c->nnodes;
            memcpy(pr->host, c->hosts[pr->node], sizeof(pr->host));
            pr->port = c->base_port + 2 * q;
            pr->link_port = c->base_port + 2 * q + 1;
        }
    }
    return 0;
}

static int explicit_proc_key(const struct cluster *c, const struct cluster_proc *q)
{
    return q->group * c->n + position_of(c, q->role, q->index);
}

/* Each proc line: a role of the scheme, an index in range, a declared node. */
static int check_proc_lines(struct parser *p, int *max_group)
{
    const struct cluster *c = p->c;
    *max_group = 0;
    for (int i = 0; i < p->nprocs; i++) {
        const struct cluster_proc *q = &p->procs[i].proc;
        p->line = p->procs[i].line;
        if (position_of(c, q->role, q->index) < 0)
            return fail(p, "no %s process %d in scheme %s %d/%d", cluster_role_name(q->role),
                        q->index, cluster_scheme_name(c->scheme), c->k, c->n);
        if (q->node >= c->nnodes)
            return fail(p, "proc on node %d, but only %d node%s declared", q->node,
                        c->nnodes, c->nnodes == 1 ? " is" : "s are");
        if (q->group > *max_group)
            *max_group = q->group;
    }
    p->line = 0;
    return 0;
}

/* Every group 0..max_group has each of its n processes exactly once. */
static int check_groups_complete(struct parser *p, int ngroups)
{
    const struct cluster *c = p->c;
    int *line_of = calloc((size_t)ngroups * (size_t)c->n, sizeof(int));
    if (!line_of)
        return fail(p, "out of memory");
    int rc = 0;
    for (int i = 0; i < p->nprocs && rc == 0; i++) {
        int key = explicit_proc_key(c, &p->procs[i].proc);
        if (line_of[key]) {
            p->line = p->procs[i].line;
            rc = fail(p, "%s process %d of group %d given twice (first on line %d)",
                      cluster_role_name(p->procs[i].proc.role), p->procs[i].proc.index,
                      p->procs[i].proc.group, line_of[key]);
        }
        line_of[key] = p->procs[i].line;
    }
    p->line = 0;
    for (int key = 0; key < ngroups * c->n && rc == 0; key++) {
        if (!line_of[key]) {
            enum cluster_role role;
            int index;
            role_at(c, key % c->n, &role, &index);
            rc = fail(p, "group %d has no %s process %d (proc lines must describe "
                      "groups 0 to %d completely)", key / c->n, cluster_role_name(role),
                      index, ngroups - 1);
        }
    }
    free(line_of);
    return rc;
}

/* No two ports (client or link) on the same host are equal. */
static int check_port_clash(struct parser *p)
{
    for (int i = 0; i < p->nprocs; i++) {
        const struct cluster_proc *a = &p->procs[i].proc;
        for (int j = 0; j < i; j++) {
            const struct cluster_proc *b = &p->procs[j].proc;
            if (strcmp(p->c->hosts[a->node], p->c->hosts[b->node]) != 0)
                continue;
            int clash = 0;
            if (a->port == b->port || a->port == b->link_port)
                clash = a->port;
            else if (a->link_port == b->port || a->link_port == b->link_port)
                clash = a->link_port;
            if (clash) {
                p->line = p->procs[i].line;
                return fail(p, "port %d on %s is already used on line %d", clash,
                            p->c->hosts[a->node], p->procs[j].line);
            }
        }
    }
    return 0;
}

static const struct cluster *sort_cluster;     /* qsort has no context argument */

static int compare_proc_lines(const void *x, const void *y)
{
    int kx = explicit_proc_key(sort_cluster, &((const struct proc_line *)x)->proc);
    int ky = explicit_proc_key(sort_cluster, &((const struct proc_line *)y)->proc);
    return (kx > ky) - (kx < ky);
}

/* proc lines: checked, then stored in layout order with their hosts. */
static int use_explicit_procs(struct parser *p)
{
    struct cluster *c = p->c;
    int max_group;
    if (check_proc_lines(p, &max_group) < 0 || check_groups_complete(p, max_group + 1) < 0 ||
        check_port_clash(p) < 0)
        return -1;
    sort_cluster = c;
    qsort(p->procs, (size_t)p->nprocs, sizeof(*p->procs), compare_proc_lines);
    if (alloc_procs(p, p->nprocs) < 0)
        return -1;
    c->ngroups = max_group + 1;
    for (int i = 0; i < p->nprocs; i++) {
        c->procs[i] = p->procs[i].proc;
        memcpy(c->procs[i].host, c->hosts[c->procs[i].node], sizeof(c->procs[i].host));
    }
    return 0;
}

/* The coordinator's ports must not clash with a process on the same host. */
static int check_coordinator_ports(struct parser *p)
{
    const struct cluster *c = p->c;
    for (int k = 0; k < c->ncoords; k++) {
        const struct cluster_coord *co = &c->coords[k];
        for (int i = 0; i < c->nprocs; i++) {
            const struct cluster_proc *q = &c->procs[i];
            if (strcmp(q->host, co->host) != 0)
                continue;
            int clash = 0;
            if (co->port == q->port || co->port == q->link_port)
                clash = co->port;
            else if (co->link_port == q->port || co->link_port == q->link_port)
                clash = co->link_port;
            if (clash) {
                p->line = k == 0 ? p->coordinator_line : p->second_coordinator_line;
                return fail(p, "coordinator port %d on %s is already used by %s process %d of group %d",
                            clash, co->host, cluster_role_name(q->role), q->index, q->group);
            }
        }
    }
    return 0;
}

/* A file the cluster file names: as given when absolute, else relative to
 * the directory of the cluster file (path). */
static int resolve_path(struct parser *p, const char *path, const char *name, char *out,
                        size_t cap, const char *what)
{
    int n;
    const char *slash = strrchr(path, '/');
    if (name[0] == '/' || slash == NULL)
        n = snprintf(out, cap, "%s", name);
    else
        n = snprintf(out, cap, "%.*s/%s", (int)(slash - path), path, name);
    if (n < 0 || (size_t)n >= cap)
        return fail(p, "%s is too long (at most %zu characters)", what, cap - 1);
    return 0;
}

/* The state file (default "coordinator.state" beside the cluster file). */
static int resolve_coord_state(struct parser *p, const char *path)
{
    const char *name = p->coord_state_line ? p->coord_state : "coordinator.state";
    return resolve_path(p, path, name, p->c->coord_state, sizeof(p->c->coord_state),
                        "the coordinator state path");
}

/* The files of a TLS line (line: where it was, 0 for none), resolved
 * against the cluster file's directory. */
static int resolve_tls_files(struct parser *p, const char *path, int line,
                             char files[3][CLUSTER_PATH_MAX], char *out[3], const char *what)
{
    if (!line)
        return 0;
    p->line = line;
    for (int i = 0; i < 3; i++)
        if (resolve_path(p, path, files[i], out[i], CLUSTER_PATH_MAX, what) < 0)
            return -1;
    p->line = 0;
    return 0;
}

static int resolve_link_tls(struct parser *p, const char *path)
{
    char *links[3] = { p->c->tls_cert, p->c->tls_key, p->c->tls_ca };
    char *clients[3] = { p->c->client_tls_cert, p->c->client_tls_key, p->c->client_tls_ca };
    if (resolve_tls_files(p, path, p->link_tls_line, p->tls_files, links,
                          "a link_tls file's path") < 0)
        return -1;
    return resolve_tls_files(p, path, p->client_tls_line, p->client_tls_files, clients,
                             "a client_tls file's path");
}

static int finish_coordinator(struct parser *p, const char *path)
{
    if (p->zookeeper_line && !p->c->has_coordinator) {
        p->line = p->zookeeper_line;
        return fail(p, "'coordinator zookeeper' needs 'coordinator <host> <port> <link_port>' "
                    "lines for the coordinator processes");
    }
    if (p->c->ncoords > 1 && !p->c->has_zookeeper) {
        p->line = p->second_coordinator_line;
        return fail(p, "'coordinator' given twice (first on line %d); a second coordinator "
                    "needs 'coordinator zookeeper <host:port,...>' (only ZooKeeper decides which "
                    "one leads)", p->coordinator_line);
    }
    if (!p->c->has_coordinator) {
        if (p->coord_state_line) {
            p->line = p->coord_state_line;
            return fail(p, "'coord_state' without a 'coordinator' line");
        }
        return 0;
    }
    if (check_coordinator_ports(p) < 0)
        return -1;
    return resolve_coord_state(p, path);
}

int cluster_coordinator_node(const struct cluster *c)
{
    if (!c->has_coordinator)
        return -1;
    for (int i = 0; i < c->nnodes; i++)
        if (strcmp(c->hosts[i], c->coord_host) == 0)
            return i;
    return -1;
}

int cluster_coordinator_node_of(const struct cluster *c, int i)
{
    if (i < 0 || i >= c->ncoords)
        return -1;
    int first = -1;
    for (int n = 0; n < c->nnodes; n++) {
        if (strcmp(c->hosts[n], c->coords[i].host) != 0)
            continue;
        if (first < 0)
            first = n;
        bool taken = false;
        for (int j = 0; j < i; j++)
            if (cluster_coordinator_node_of(c, j) == n)
                taken = true;
        if (!taken)
            return n;
    }
    return first;
}

static void set_defaults(struct cluster *c)
{
    memset(c, 0, sizeof(*c));
    c->sync = SYNC_FULL;
    c->routing = true;
    c->region_size = DEFAULT_SIZE;
    c->memory = DEFAULT_SIZE;
    c->base_port = DEFAULT_BASE_PORT;
}

int cluster_load(const char *path, struct cluster *c, char *err, size_t errlen)
{
    struct parser p;
    memset(&p, 0, sizeof(p));
    p.c = c;
    p.err = err;
    p.errlen = errlen;
    set_defaults(c);
    int rc = parse_file(&p, path);
    if (rc == 0)
        rc = check_required(&p);
    if (rc == 0)
        rc = check_nodes(&p);
    if (rc == 0)
        rc = p.nprocs ? use_explicit_procs(&p) : compute_layout(&p);
    if (rc == 0)
        rc = finish_coordinator(&p, path);
    if (rc == 0)
        rc = resolve_link_tls(&p, path);
    free(p.procs);
    if (rc < 0)
        cluster_free(c);
    return rc;
}

int cluster_check_private(const char *path, char *err, size_t errlen)
{
    struct stat st;

    if (stat(path, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        return -1;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(err, errlen,
                 "%s holds the cluster secret but its mode is %04o (others may read it); "
                 "run: chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
        return -1;
    }
    return 0;
}

void cluster_free(struct cluster *c)
{
    free(c->procs);
    c->procs = NULL;
    c->nprocs = 0;
}

const struct cluster_proc *cluster_find(const struct cluster *c, int group,
                                        enum cluster_role role, int index)
{
    for (int i = 0; i < c->nprocs; i++) {
        const struct cluster_proc *q = &c->procs[i];
        if (q->group == group && q->role == role && q->index == index)
            return q;
    }
    return NULL;
}
