/* procs.h - the server processes cocytus-cli talks to, read from a cluster
 * directory's endpoints file or derived from a cluster file, and grouped
 * into coding groups. */
#ifndef CLIENT_PROCS_H
#define CLIENT_PROCS_H

#include <stddef.h>

#define PROC_ROLE_MAX 16
#define PROC_HOST_MAX 64

struct proc_info {
    char role[PROC_ROLE_MAX];   /* data, parity, plain, primary, backup */
    int group;
    int index;                  /* within its role in the group */
    int node;
    char host[PROC_HOST_MAX];
    int port;
    long pid;                   /* 0 when unknown (cluster file) */
};

struct tls_dialer;

struct proc_list {
    struct proc_info *v;
    int n, cap;
    char secret[128];           /* the cluster secret ("" when unknown) */
    struct tls_dialer *tls;     /* client_tls: how its client ports are dialled, or NULL */
};

/* DIR/endpoints: lines "<role> <group> <index> <node> <host>:<port> <pid>";
 * other lines (e.g. "proxy <host>:<port>", comments) are skipped.
 * 0, or -1 with a message in err. */
int procs_from_endpoints(const char *dir, struct proc_list *out, char *err, size_t errlen);
/* Every process a cluster file lays out (repl/cluster.h). */
int procs_from_cluster(const char *path, struct proc_list *out, char *err, size_t errlen);
void procs_free(struct proc_list *l);
/* The cluster secret into l->secret, from cluster_file or else
 * DIR/cluster.conf, and with a client_tls line l->tls, which dials its
 * processes' client ports over TLS.  0, -1 with err (l->secret stays ""),
 * or -2 with err when the client_tls files do not load. */
int procs_load_secret(struct proc_list *l, const char *dir, const char *cluster_file,
                      char *err, size_t errlen);

/* Where the coordinator answers: DIR/coordinator ("<host>:<port>", written
 * by scripts/cluster up) when dir is given, else the cluster file's
 * coordinator line.  1 found, 0 the cluster has none, -1 with err. */
int procs_coordinator(const char *dir, const char *cluster_file, char *host, size_t hostcap,
                      int *port, char *err, size_t errlen);

/* The process with this group, role and index, or NULL. */
const struct proc_info *procs_find(const struct proc_list *l, int group,
                                   const char *role, int index);
/* Largest group number plus one (0 for an empty list). */
int procs_ngroups(const struct proc_list *l);
/* Number of processes of a role in a group. */
int procs_count(const struct proc_list *l, int group, const char *role);

#endif
