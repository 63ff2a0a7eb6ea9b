/* cluster.h - the cluster file: which processes exist, where they run and
 * which group and role each has.
 *
 * One file describes the whole cluster; every process and tool reads the
 * same file.  Format (one directive per line, '#' comments):
 *
 *   cluster   demo                  name, checked in every link handshake
 *   secret    <text>                shared secret of the link handshake
 *   scheme    rs 3 5 | pbr 2 | plain
 *   sync      full | semi | async   (pbr only; default full)
 *   routing   on | off              on (default): a process serves only the
 *                                   slots the slot map gives it (MOVED for
 *                                   others); off: it serves any key it gets
 *                                   (a single group driven directly, tests)
 *   recovery  online | blocked      online (default): a recovery process serves
 *                                   every request at once, rebuilding the units
 *                                   it needs first; blocked: writes to its keys
 *                                   wait until every unit is rebuilt (the
 *                                   paper's baseline of Fig. 8; reads are served)
 *   region    64m                   value region per data/parity process
 *   memory    64m                   item memory of plain/primary/backup processes
 *   node      0 127.0.0.1           node index and the address its processes use
 *   base_port 21000                 first port; ports are assigned in layout order
 *   proc      <group> <role> <index> <node> <port> <link_port>   (optional, explicit)
 *   coordinator <host> <port> <link_port>   (optional) the coordinator process:
 *                                   memcached-protocol port and control-link port
 *   coordinator <host> <port> <link_port>   may repeat (at most
 *                                   CLUSTER_MAX_COORDS) with a ZooKeeper line:
 *                                   one line per coordinator process
 *   coordinator zookeeper <host:port,...[/chroot]>   (optional) keep the
 *                                   coordinator's state in ZooKeeper and elect
 *                                   a leader among the coordinator processes
 *   coord_state <path>              (optional) the coordinator's state file; a
 *                                   relative path is taken from the cluster
 *                                   file's directory (default coordinator.state
 *                                   there)
 *   link_tls <cert> <key> <ca>      (optional) links between processes over
 *                                   TCP run TLS (linktls.h; not those over a
 *                                   Unix socket on one host): this
 *                                   host's certificate and key, and the CA
 *                                   that signed every host's; relative paths
 *                                   as for coord_state
 *   client_tls <cert> <key> <ca>    (optional) every process's client port
 *                                   speaks TLS (as -Z with ssl_chain_cert,
 *                                   ssl_key, ssl_ca_cert and ssl_verify_mode
 *                                   2: clients show a certificate the CA
 *                                   signed), and the cluster's own clients
 *                                   (cocytus-cli, a slot move's copy) dial
 *                                   with these files; paths as for link_tls
 *
 * Without proc lines the layout is computed: with n nodes and N processes
 * per group there are max(1, n >= N ? n : 1) groups; process p (data first,
 * then parity/backup) of group g runs on node (g + p) mod n; ports are
 * base_port + 2*q and base_port + 2*q + 1 for the q-th process of the
 * layout. */
#ifndef REPL_CLUSTER_H
#define REPL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_NAME_MAX 64
#define CLUSTER_SECRET_MAX 128
#define CLUSTER_HOST_MAX 64
#define CLUSTER_MAX_NODES 64
#define CLUSTER_PATH_MAX 1024
#define CLUSTER_MAX_COORDS 4

enum cluster_scheme { SCHEME_PLAIN = 0, SCHEME_PBR = 1, SCHEME_RS = 2 };
enum cluster_role { ROLE_PLAIN = 0, ROLE_DATA = 1, ROLE_PARITY = 2, ROLE_PRIMARY = 3, ROLE_BACKUP = 4 };
enum cluster_sync { SYNC_FULL = 0, SYNC_SEMI = 1, SYNC_ASYNC = 2 };

struct cluster_proc {
    int group;
    enum cluster_role role;
    int index;          /* within its role in the group */
    int node;
    char host[CLUSTER_HOST_MAX];
    int port;           /* client (memcached protocol) port */
    int link_port;      /* parity/backup: where data processes/primaries connect */
};

struct cluster {
    char name[CLUSTER_NAME_MAX];
    char secret[CLUSTER_SECRET_MAX];
    enum cluster_scheme scheme;
    enum cluster_sync sync;
    bool routing;       /* enforce the slot map (directive "routing") */
    bool recovery_blocked; /* directive "recovery blocked" */
    int k, n;           /* rs: K data + (n-k) parity; pbr: k=1, n=1+M; plain: 1,1 */
    size_t region_size;
    size_t memory;
    int nnodes;
    char hosts[CLUSTER_MAX_NODES][CLUSTER_HOST_MAX];
    int base_port;
    int ngroups;
    struct cluster_proc *procs;
    int nprocs;
    /* The coordinator (directive "coordinator"), when there is one. */
    bool has_coordinator;
    char coord_host[CLUSTER_HOST_MAX];
    int coord_port;                 /* memcached text protocol (admin words) */
    int coord_link_port;            /* control links from every server process */
    char coord_state[CLUSTER_PATH_MAX]; /* state file, resolved against the file's directory */
    /* Every coordinator process (coord_* above is the first); more than one
     * only with a ZooKeeper backend, which elects the leader among them. */
    int ncoords;
    struct cluster_coord {
        char host[CLUSTER_HOST_MAX];
        int port, link_port;
    } coords[CLUSTER_MAX_COORDS];
    bool has_zookeeper;             /* "coordinator zookeeper <connect>" */
    char zk_connect[CLUSTER_PATH_MAX];
    bool has_link_tls;              /* "link_tls <cert> <key> <ca>" */
    char tls_cert[CLUSTER_PATH_MAX], tls_key[CLUSTER_PATH_MAX], tls_ca[CLUSTER_PATH_MAX];
    bool has_client_tls;            /* "client_tls <cert> <key> <ca>" */
    char client_tls_cert[CLUSTER_PATH_MAX], client_tls_key[CLUSTER_PATH_MAX],
        client_tls_ca[CLUSTER_PATH_MAX];
    /* The TLS context the links use: made from the files and freed by the
     * process that opens links (server.c), NULL elsewhere or without
     * link_tls.  cluster_load and cluster_free leave it alone, so tools
     * that only read the file need no OpenSSL. */
    struct linktls_ctx *link_tls;
};

/* Parse path.  0, or -1 with a clear message (line number and what is
 * wrong) in err. */
int cluster_load(const char *path, struct cluster *c, char *err, size_t errlen);
void cluster_free(struct cluster *c);

/* The cluster file holds the secret that authenticates every link, so a
 * process refuses to start from one that others may read or change, as ssh
 * refuses such a private key: 0 if path is a regular file with no group or
 * other permission bits, else -1 with the reason and the fix in err. */
int cluster_check_private(const char *path, char *err, size_t errlen);
const struct cluster_proc *cluster_find(const struct cluster *c, int group,
                                        enum cluster_role role, int index);
const char *cluster_role_name(enum cluster_role r);
int cluster_role_from_name(const char *name, enum cluster_role *out);
/* Node index of the coordinator: the first node whose host is the
 * coordinator's host, or -1 (no coordinator, or on no node's host). */
int cluster_coordinator_node(const struct cluster *c);
/* Node index that runs coordinator i (coords[i]): the first node on its host
 * not taken by an earlier coordinator line, else the first on its host; -1
 * if on no node's host. */
int cluster_coordinator_node_of(const struct cluster *c, int i);
/* "plain", "pbr", "rs". */
const char *cluster_scheme_name(enum cluster_scheme s);

#endif
