/* server.c - the process's server context: listening sockets, accepting
 * connections within the -c limit, the once-a-second clock, signals.
 *
 * One libevent loop runs everything; the engine is created here from the
 * settings and is the only storage the connections see.  With a cluster
 * file the server also holds the slot map (repl/slotmap.h) and checks the
 * slot of every keyed request against it (server_moved). */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "conn_internal.h"
#include "cluster.h"
#include "linktls.h"
#include "coord.h"
#include "dirsync.h"
#include "sendq.h"
#include "listen_bind.h"
#include "server.h"
#include "restart.h"
#include "sasl_auth.h"
#include "slotmap.h"
#include "unixsock.h"

/* Epoch of the map a server builds from the cluster file at start. */
#define INITIAL_EPOCH 1

void settings_defaults(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    s->port = 11211;
    s->listen_addr = NULL;
    s->unix_mask = 0700;
    s->udp_port = 0;
    s->mem_limit = 64u << 20;
    s->max_conns = 1024;
    s->item_size_max = 1u << 20;
    s->evict = true;
    s->cas_enabled = true;
    s->backlog = 1024;
    s->hashpower = 16;
    s->flush_enabled = true;
    s->dump_enabled = true;
    s->watch_enabled = true;
    s->prefix_delimiter = ':';
    s->role = "plain";
    tls_config_defaults(&s->tls);
}

static const char too_many_conns[] = "ERROR Too many open connections\r\n";

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

#define ACCEPT_PAUSE_MS 100     /* out of descriptors: stop accepting this long */
#define FD_RESERVE 64           /* descriptors beyond -c: listeners, links, logs */

/* Out of file descriptors: a pending connection would wake the loop again
 * at once, so stop listening for a while (as memcached does). */
static void pause_accepting(struct server *s, int err)
{
    if (!s->accepting)
        return;
    s->accepting = false;
    s->stats.listen_disabled++;
    for (int i = 0; i < s->nlisten; i++)
        event_del(s->listen_ev[i]);
    if (s->stats.listen_disabled == 1 || s->settings.verbose)
        fprintf(stderr, "cocytus-server: accept: %s; not accepting for %d ms "
                "(listen_disabled_num counts these pauses)\n", strerror(err), ACCEPT_PAUSE_MS);
    struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };
    evtimer_add(s->accept_ev, &tv);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    s->accepting = true;
    for (int i = 0; i < s->nlisten; i++)
        event_add(s->listen_ev[i], NULL);
}

/* Room for -c connections: raise the soft open-files limit up to the hard
 * one if needed, and say so when even that is too low. */
static void fit_fd_limit(const struct server *s)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)s->settings.max_conns + FD_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < want)
        fprintf(stderr, "cocytus-server: the open-files limit (%llu) is below -c %d + %d; "
                "connections beyond it wait (raise ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, s->settings.max_conns, FD_RESERVE);
}

/* Accept every pending connection; over the limit, say so and hang up. */
static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    struct server *s = arg;
    bool tls = false;
    for (int i = 0; i < s->nlisten; i++)
        if (s->listen_fd[i] == lfd)
            tls = s->listen_tls[i];
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                pause_accepting(s, errno);
            else if (errno != EAGAIN && errno != EWOULDBLOCK && s->settings.verbose)
                fprintf(stderr, "accept: %s\n", strerror(errno));
            return;
        }
        if (s->stats.curr_conns >= (uint64_t)s->settings.max_conns) {
            /* (a TLS client could not read the line before its handshake) */
            if (!tls) {
                ssize_t w = write(fd, too_many_conns, sizeof(too_many_conns) - 1);
                (void)w;
            }
            close(fd);
            s->stats.rejected_conns++;
            continue;
        }
        if (!s->listen_unix)
            set_nodelay(fd);
        if (!conn_new(s, fd, tls)) {
            fprintf(stderr, "cocytus-server: out of memory accepting a connection\n");
            close(fd);
            continue;
        }
        if (s->settings.verbose > 1)
            fprintf(stderr, "<%d new connection\n", fd);
    }
}

static void add_listener(struct server *s, int fd, bool tls)
{
    s->listen_fd[s->nlisten] = fd;
    s->listen_tls[s->nlisten] = tls;
    s->listen_ev[s->nlisten] = event_new(s->base, fd, EV_READ | EV_PERSIST, on_accept, s);
    event_add(s->listen_ev[s->nlisten], NULL);
    s->nlisten++;
}

/* -s: the Unix socket alone, as memcached (no TCP listener). */
static int server_listen_unix(struct server *s)
{
    char err[256];
    if (unixsock_listen(&s->unix_listener, s->settings.unix_path, s->settings.unix_mask,
                        s->settings.backlog, s->settings.user, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: %s\n", err);
        return -1;
    }
    s->listen_unix = true;
    add_listener(s, s->unix_listener.fd, false);
    return 0;
}

/* Every address -l names (listen_bind.h), or all interfaces on -p's port;
 * under -Z, TLS on each but "notls:" entries. */
static int server_listen(struct server *s)
{
    if (s->settings.unix_path)
        return server_listen_unix(s);
    struct listen_bound b;
    char err[1400];     /* room for an entry of -l as long as it may be */
    if (listen_bind(s->settings.listen_addr, s->settings.port, s->settings.backlog, "-Z",
                    s->tls != NULL, &b, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: %s\n", err);
        return -1;
    }
    s->bound_port = b.port;
    for (int i = 0; i < b.n; i++)
        add_listener(s, b.fd[i], s->tls != NULL && !b.notls[i]);
    return 0;
}

#define TRIM_EVERY_SECONDS 5

/* A cluster process dials other processes' client ports (a slot move's
 * copy), which speak TLS too: it trusts ssl_ca_cert and shows its own
 * certificate to a process that requires one. */
static struct tls_dialer *dialer_from_settings(const struct server *s, char *err, size_t errlen)
{
    const struct tls_config *cfg = &s->settings.tls;
    return tls_dialer_new(cfg->ca_cert, cfg->chain_cert, cfg->key, cfg->keyformat, err, errlen);
}

bool server_tls_refresh(struct server *s, char *err, size_t errlen)
{
    if (!tls_server_refresh(s->tls, err, errlen))
        return false;
    if (s->tls_dialer == NULL)
        return true;
    struct tls_dialer *d = dialer_from_settings(s, err, errlen);
    if (d == NULL)
        return false;
    tls_dialer_free(s->tls_dialer);     /* connections under way hold their own reference */
    s->tls_dialer = d;
    return true;
}

/* -o idle_timeout=N: connections without a request for N seconds are
 * closed (their replies still go out first); not one still writing a
 * streamed reply, which is busy rather than idle (its client reads slowly). */
static void close_idle(struct server *s, time_t now)
{
    if (s->settings.idle_timeout <= 0)
        return;
    struct conn *next;
    for (struct conn *c = s->conns; c; c = next) {
        next = c->next;
        /* a connection that proved the cluster secret (a slot move's
         * import connection, cocytus-cli) is the cluster's own: never idle */
        if (!c->close_after_write && !conn_is_admin(c) && !conn_streaming(c) &&
            now - c->last_cmd > s->settings.idle_timeout) {
            s->stats.idle_kicks++;
            c->close_reason = "idle_timeout";
            if (s->settings.verbose)
                fprintf(stderr, "closing connection %d: idle for %ld s\n", c->fd,
                        (long)(now - c->last_cmd));
            conn_close_after_write(c);
            conn_kick(c);
        }
    }
}

/* Sets the server's and the engine's clocks to the wall clock's second,
 * and runs the engine's once-a-second work, when the second has changed.
 * The timer alone is not enough: a process the machine did not schedule
 * for a while handles the requests waiting on its sockets before its
 * overdue timer, in the same loop iteration, and would store TTLs against
 * a second already past (an exptime of 2 could expire at once).  So the
 * timer and every client connection event call this; the engine's work
 * still runs once per second, whichever comes first. */
void server_clock_update(struct server *s)
{
    time_t now = time(NULL);
    if (now == s->clock_second)
        return;
    s->clock_second = now;
    clock_set(&s->clock, now);
    s->engine->ops->tick(s->engine, now);
}

static void on_clock(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    server_clock_update(s);
    close_idle(s, clock_wall(&s->clock));
    /* Bursts (a pipelined load, records in flight) leave freed heap pages
     * behind that malloc keeps; hand them back so RSS reflects what is
     * stored. */
    if (++s->ticks % TRIM_EVERY_SECONDS == 0)
        malloc_trim(0);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    if (s->settings.verbose)
        fprintf(stderr, "signal %d: shutting down\n", (int)sig);
    server_shutdown(s);
}

/* -e: SIGUSR1 stops the server and saves its items for the next start
 * (server_destroy), as memcached's graceful stop does. */
static void on_save_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    (void)sig;
    (void)what;
    fprintf(stderr, "Gracefully stopping\n");
    s->save_memory = true;
    server_shutdown(s);
}

/* -e at start: the file must be ours to write at the stop (made now, and
 * given to the -u user, since memcached maps it before it drops root),
 * then the items a SIGUSR1 stop saved, if any. */
static int restore_memory(struct server *s)
{
    char err[512];
    uint64_t n = 0;
    const char *path = s->settings.memory_file;
    struct stat st;
    /* Never through a symbolic link, and only a file made here is given
     * to the -u user (root must not hand over someone else's file). */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool made = fd >= 0;

    if (fd < 0 && errno == EEXIST)
        fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "cocytus-server: -e: cannot open %s: %s\n", path,
                fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct passwd *pw = s->settings.user && geteuid() == 0 ? getpwnam(s->settings.user) : NULL;
    if (made && pw != NULL && fchown(fd, pw->pw_uid, pw->pw_gid) != 0)
        fprintf(stderr, "cocytus-server: -e: cannot give %s to %s: %s\n", path,
                s->settings.user, strerror(errno));
    close(fd);
    switch (restart_load(engine_plain_store(s->engine), path, &n, err, sizeof(err))) {
    case RESTART_NONE:
        fprintf(stderr, "[restart] no metadata save file, starting with a clean cache\n");
        break;
    case RESTART_REFUSED:
        fprintf(stderr, "[restart] %s; starting with a clean cache\n", err);
        break;
    case RESTART_LOADED:
        fprintf(stderr, "[restart] restored %" PRIu64 " items from %s\n", n, path);
        break;
    }
    return 0;
}

static void save_memory(struct server *s)
{
    char err[512];
    uint64_t n = 0;

    int rc = restart_save(engine_plain_store(s->engine), s->settings.memory_file, &n, err,
                          sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "[restart] not saved: %s\n", err);
        s->save_failed = true;
        return;
    }
    fprintf(stderr, "[restart] saved %" PRIu64 " items to %s\n", n, s->settings.memory_file);
    if (rc > 0)
        fprintf(stderr, "[restart] %s: the next start restores the save, but a power cut "
                "before the directory reaches the disk may lose it\n", err);
}

int server_started(struct server *s)
{
    const char *path = s->settings.memory_file;
    if (path == NULL)
        return 0;
    /* The save at the stop makes path.meta beside the file, as whoever
     * the server now runs as: found out now, not at the stop. */
    char dir[4096];
    if (dirsync_parent(path, dir, sizeof(dir)) < 0 || access(dir, W_OK) != 0 ||
        access(path, W_OK) != 0) {
        fprintf(stderr, "cocytus-server: -e: %s and its directory must be writable by the "
                "server's user (the save at SIGUSR1 writes them): %s\n", path, strerror(errno));
        return -1;
    }
    /* Started: the save is used up, so a crash from now on starts clean. */
    restart_consume(path);
    return 0;
}

/* The engines' way to the coordinator (recovery answers). */
static int server_ctl_send(void *arg, const char *text)
{
    struct server *s = arg;
    return s->coord ? coord_client_send(s->coord, text) : -1;
}

static void server_engine_promoted(void *arg, bool yes);

unsigned server_item_class(const struct server *s, size_t nkey, size_t nbytes, uint32_t flags)
{
    const struct settings *st = &s->settings;
    return mc_slab_class(mc_item_size(nkey, nbytes, flags, st->cas_enabled), st->item_size_max);
}

/* engine_config.evicted: "watch evictions" sees it, with the seconds it
 * had left (-1: no expiry) and its slab class, as memcached logs them. */
static void server_evicted(void *arg, const struct eng_value *v)
{
    struct server *s = arg;
    if (!watch_wants(&s->watch, WATCH_EVICTIONS))
        return;
    int64_t ttl = v->exptime == 0 ? -1 : v->exptime - (int64_t)clock_wall(&s->clock);
    watch_eviction(&s->watch, v->key, v->nkey, v->fetched, ttl, v->idle,
                   server_item_class(s, v->nkey, v->nbytes, v->flags), v->nbytes);
}

static struct engine *engine_for_role(struct server *s, struct event_base *base)
{
    const struct settings *st = &s->settings;
    struct engine_config cfg = {
        .mem_limit = st->mem_limit,
        .item_size_max = st->item_size_max,
        .evict = st->evict,
        .cas_enabled = st->cas_enabled,
        .hashpower = st->hashpower,
        .started = s->started,
        .verbose = st->verbose,
        .base = base,
        .cluster = s->cluster,
        .group = st->group,
        .index = st->index,
        .ctl_send = server_ctl_send,
        .ctl_arg = s,
        .promoted = server_engine_promoted,
        .sq = s->sq,
        .max_conns = st->max_conns,
        .evicted = server_evicted,
        .evicted_arg = s,
    };
    if (strcmp(st->role, "plain") == 0)
        return engine_plain_new(&cfg);
    if (!s->cluster) {
        fprintf(stderr, "cocytus-server: role '%s' needs --cluster FILE\n", st->role);
        return NULL;
    }
    if (strcmp(st->role, "data") == 0)
        return engine_data_new(&cfg);
    if (strcmp(st->role, "parity") == 0)
        return engine_parity_new(&cfg);
    if (strcmp(st->role, "primary") == 0)
        return engine_primary_new(&cfg);
    if (strcmp(st->role, "backup") == 0)
        return engine_backup_new(&cfg);
    if (strcmp(st->role, COORD_ROLE) == 0)
        return coord_engine_new(s);
    fprintf(stderr, "cocytus-server: unknown role '%s'\n", st->role);
    return NULL;
}

/* Replicated roles take their port and address from the cluster file unless
 * the command line names them. */
static int server_load_cluster(struct server *s)
{
    struct settings *st = &s->settings;
    if (!st->cluster_file)
        return 0;
    char err[512];
    if (cluster_check_private(st->cluster_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: %s\n", err);
        return -1;
    }
    s->cluster = calloc(1, sizeof(*s->cluster));
    if (!s->cluster || cluster_load(st->cluster_file, s->cluster, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: %s: %s\n", st->cluster_file, s->cluster ? err : "out of memory");
        return -1;
    }
    auth_derive_key(s->cluster->secret, AUTH_FOR_ADMIN, s->admin_key);
    s->admin_key_set = true;
    if (s->cluster->has_link_tls) {
        s->cluster->link_tls = linktls_ctx_new(s->cluster->tls_cert, s->cluster->tls_key,
                                               s->cluster->tls_ca, err, sizeof(err));
        if (s->cluster->link_tls == NULL) {
            fprintf(stderr, "cocytus-server: %s: %s\n", st->cluster_file, err);
            return -1;
        }
    }
    if (strcmp(st->role, COORD_ROLE) == 0)
        return coord_settings(s->cluster, st);
    enum cluster_role role;
    if (cluster_role_from_name(st->role, &role) < 0) {
        fprintf(stderr, "cocytus-server: unknown role '%s'\n", st->role);
        return -1;
    }
    const struct cluster_proc *p = cluster_find(s->cluster, st->group, role, st->index);
    if (!p) {
        fprintf(stderr, "cocytus-server: %s has no %s process %d in group %d\n",
                st->cluster_file, st->role, st->index, st->group);
        return -1;
    }
    if (!st->port_given)
        st->port = p->port;
    if (!st->listen_addr)
        st->listen_addr = p->host;
    return 0;
}

/* This process's own entry in the cluster file. */
static const struct cluster_proc *server_own_proc(const struct server *s)
{
    enum cluster_role role;
    if (!s->cluster || cluster_role_from_name(s->settings.role, &role) < 0)
        return NULL;
    return cluster_find(s->cluster, s->settings.group, role, s->settings.index);
}

static void server_drop_slotmap(struct server *s)
{
    if (s->slotmap) {
        slotmap_free(s->slotmap);
        free(s->slotmap);
    }
    free(s->config_reply);
    s->slotmap = NULL;
    s->config_reply = NULL;
    s->config_reply_len = 0;
    s->slot_self = -1;
    s->promoted_owner = -1;
    s->routes = false;
}

/* Whether keys of slots this process does not serve get MOVED.
 *
 * A serving process that is no longer in the map (a data process whose
 * keys another process took over while it was dead) serves no slot: every
 * key gets MOVED to its owner, never an answer from its empty table.  So
 * does a parity process: it may have served a dead data process's keys,
 * and a client with an old map must be sent on.  So does a backup once the
 * map is newer than the cluster file's (a coordinator published a change,
 * e.g. a failover): it may be the primary an old map names, and a rejoined
 * member must send such a client on, not refuse it.  Under the file's own
 * map a backup keeps its refusals (and serves every key once promoted by
 * hand, docs/pbr.md). */
static void server_compute_routes(struct server *s)
{
    const struct slotmap *m = s->slotmap;
    const struct cluster_proc *p = server_own_proc(s);
    if (!m || !s->cluster || !s->cluster->routing) {
        s->routes = false;
        return;
    }
    bool serving_role = p && (p->role == ROLE_DATA || p->role == ROLE_PRIMARY ||
                              p->role == ROLE_PLAIN || p->role == ROLE_PARITY ||
                              (p->role == ROLE_BACKUP && m->epoch > INITIAL_EPOCH));
    s->routes = s->slot_self >= 0 || serving_role;
}

/* The member of our group the map m names (its endpoint index in *at), or
 * NULL: every process of the group but this one, looked up by address. */
static const struct cluster_proc *group_endpoint(const struct server *s,
                                                 const struct slotmap *m, int *at)
{
    const struct cluster_proc *self = server_own_proc(s);
    for (int i = 0; self && i < s->cluster->nprocs; i++) {
        const struct cluster_proc *p = &s->cluster->procs[i];
        if (p == self || p->group != self->group)
            continue;
        int e = slotmap_find(m, p->host, p->port);
        if (e >= 0) {
            *at = e;
            return p;
        }
    }
    return NULL;
}

/* A promoted process keeps serving the slots of the member it replaced
 * while the map it holds still names that member (its own new map is on
 * its way, or another group's change came first); a map that names itself
 * or another member for the group ends it. */
static void server_follow_promotion(struct server *s)
{
    s->promoted_owner = -1;
    if (!s->promoted_for || !s->slotmap)
        return;
    int at = -1;
    const struct cluster_proc *named = group_endpoint(s, s->slotmap, &at);
    if (s->slot_self >= 0 || named != s->promoted_for) {
        s->promoted_for = NULL;
        return;
    }
    s->promoted_owner = at;
}

bool server_test_fault_path(const struct server *s, const char *kind, char *out, size_t len)
{
    const char *dir = getenv("COCYTUS_TEST_MUTE_DIR");
    if (!dir)
        return false;
    snprintf(out, len, "%s/%s-%s-%d-%d", dir, kind, s->settings.role, s->settings.group,
             s->settings.index);
    return true;
}

int server_set_slotmap(struct server *s, struct slotmap *m)
{
    server_drop_slotmap(s);
    if (!m)
        return 0;
    s->slotmap = m;
    const struct cluster_proc *p = server_own_proc(s);
    s->slot_self = p ? slotmap_find(m, p->host, p->port) : -1;
    server_compute_routes(s);
    server_follow_promotion(s);
    s->config_reply = slotmap_config_reply(m, &s->config_reply_len);
    if (s->engine && s->engine->ops->map_changed)
        s->engine->ops->map_changed(s->engine);
    return s->config_reply ? 0 : -1;
}

/* The engine was promoted, or no longer is (engine_config.promoted). */
static void server_engine_promoted(void *arg, bool yes)
{
    struct server *s = arg;
    int at = -1;
    s->promoted_for = yes && s->slotmap && s->cluster ? group_endpoint(s, s->slotmap, &at) : NULL;
    server_follow_promotion(s);
}

/* With a cluster file: the initial slot map over its serving processes. */
static int server_load_slotmap(struct server *s)
{
    if (!s->cluster)
        return 0;
    char err[256];
    struct slotmap *m = calloc(1, sizeof(*m));
    if (!m || slotmap_build(m, s->cluster, INITIAL_EPOCH, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: slot map of %s: %s\n", s->settings.cluster_file,
                m ? err : "out of memory");
        free(m);
        return -1;
    }
    if (server_set_slotmap(s, m) < 0) {
        fprintf(stderr, "cocytus-server: out of memory encoding the slot map\n");
        return -1;
    }
    if (s->settings.verbose)
        fprintf(stderr, "slot map epoch %d: %d serving processes, this one is %d%s\n",
                INITIAL_EPOCH, m->nendpoints, s->slot_self, s->routes ? "" : " (no slot check)");
    return 0;
}

int server_init(struct server *s, const struct settings *settings, struct event_base *base)
{
    memset(s, 0, sizeof(*s));
    s->settings = *settings;
    s->base = base;
    s->started = time(NULL);
    clock_init(&s->clock, s->started);
    s->accepting = true;
    s->slot_self = -1;
    s->promoted_owner = -1;
    watch_init(&s->watch, conn_watch_send);
    signal(SIGPIPE, SIG_IGN);
    s->sq = sendq_new(!settings->no_uring);
    if (s->sq == NULL)
        return -1;
    if (server_load_cluster(s) < 0 || server_load_slotmap(s) < 0)
        return -1;
    if (settings->auth_file && server_load_auth(s, settings->auth_file) < 0)
        return -1;
    /* A cluster file's client_tls line is -Z for every process of the
     * cluster (an explicit -Z with its -o ssl_* takes precedence). */
    if (!s->settings.tls_enabled && s->cluster != NULL && s->cluster->has_client_tls) {
        s->settings.tls_enabled = true;
        s->settings.tls.chain_cert = s->cluster->client_tls_cert;
        s->settings.tls.key = s->cluster->client_tls_key;
        s->settings.tls.ca_cert = s->cluster->client_tls_ca;
        s->settings.tls.verify_mode = 2;
        settings = &s->settings;
    }
    /* The key is read before -u drops root, as memcached reads it. */
    if (settings->tls_enabled) {
        char err[512];
        s->tls = tls_server_new(&settings->tls, err, sizeof(err));
        if (s->tls == NULL) {
            fprintf(stderr, "cocytus-server: %s\n", err);
            return -1;
        }
        if (s->cluster != NULL) {
            s->tls_dialer = dialer_from_settings(s, err, sizeof(err));
            if (s->tls_dialer == NULL) {
                fprintf(stderr, "cocytus-server: %s\n", err);
                return -1;
            }
        }
    }
    /* Before -u drops root too: the configuration and plugins are read
     * here (the password store is opened at each authentication). */
    if (settings->sasl_enabled) {
        char err[512];
        if (mcsasl_init(settings->verbose > 0, err, sizeof(err)) < 0) {
            fprintf(stderr, "cocytus-server: %s\n", err);
            return -1;
        }
        s->sasl_ready = true;
    }
    s->engine = engine_for_role(s, base);
    if (!s->engine)
        return -1;
    if (settings->memory_file && restore_memory(s) < 0)
        return -1;
    fit_fd_limit(s);
    if (server_listen(s) < 0)
        return -1;
    s->accept_ev = evtimer_new(base, on_accept_resume, s);
    if (!s->accept_ev)
        return -1;
    /* Every other process of a cluster with a coordinator reports to it. */
    if (s->cluster && s->cluster->has_coordinator && strcmp(settings->role, COORD_ROLE) != 0)
        s->coord = coord_client_start(s);
    struct timeval one_second = { 1, 0 };
    s->clock_ev = event_new(base, -1, EV_PERSIST, on_clock, s);
    event_add(s->clock_ev, &one_second);
    s->sigterm_ev = evsignal_new(base, SIGTERM, on_signal, s);
    s->sigint_ev = evsignal_new(base, SIGINT, on_signal, s);
    event_add(s->sigterm_ev, NULL);
    event_add(s->sigint_ev, NULL);
    if (settings->memory_file) {
        s->sigusr1_ev = evsignal_new(base, SIGUSR1, on_save_signal, s);
        event_add(s->sigusr1_ev, NULL);
    }
    return 0;
}

/* The loop: one pass of libevent (every ready event and everything they
 * activate, the deferred flushes included), then the pass's deferred
 * writes in one batch (sendq.h).  Without batching, libevent's own loop. */
int server_run(struct server *s)
{
    const char *why_not = NULL;
    bool batched = sendq_start(s->sq, &why_not);
    if (s->settings.verbose)
        fprintf(stderr, "cocytus-server: %s%s\n",
                batched ? "deferred writes of a loop pass batched with io_uring"
                        : "one system call per write; io_uring: ",
                batched ? "" : why_not);
    if (!batched)
        return event_base_dispatch(s->base);
    for (;;) {
        int rc = event_base_loop(s->base, EVLOOP_ONCE);
        sendq_flush(s->sq);
        if (rc != 0 || event_base_got_exit(s->base) || event_base_got_break(s->base))
            return rc < 0 ? -1 : 0;
    }
}

void server_shutdown(struct server *s)
{
    s->shutting_down = true;
    event_base_loopexit(s->base, NULL);
}

int server_load_auth(struct server *s, const char *path)
{
    char err[300];
    if (authfile_load(&s->auth, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-server: %s\n", err);
        return -1;
    }
    return 0;
}

bool server_auth_check(const struct server *s, const char *user, size_t nuser,
                       const char *pass, size_t npass)
{
    return authfile_check(&s->auth, user, nuser, pass, npass);
}

bool server_set_mem_limit(struct server *s, size_t bytes)
{
    struct engine *e = s->engine;
    if (!e->ops->set_mem_limit || !e->ops->set_mem_limit(e, bytes))
        return false;
    s->settings.mem_limit = bytes;
    return true;
}

void server_destroy(struct server *s)
{
    authfile_free(&s->auth);
    prefix_stats_free(s);
    conn_close_all(s);
    watch_destroy(&s->watch);
    coord_client_stop(s->coord);
    s->coord = NULL;
    for (int i = 0; i < s->nlisten; i++) {
        event_free(s->listen_ev[i]);
        if (!s->listen_unix)
            close(s->listen_fd[i]);
    }
    /* A clean stop leaves no socket file (if it is still ours). */
    char err[256];
    if (s->listen_unix &&
        unixsock_close(&s->unix_listener, s->settings.unix_path, err, sizeof(err)) < 0)
        fprintf(stderr, "cocytus-server: %s\n", err);
    /* While the signal events still stand: a SIGTERM right after the
     * SIGUSR1 (a service manager's stop) must not kill the save. */
    if (s->save_memory && s->engine)
        save_memory(s);
    if (s->clock_ev)
        event_free(s->clock_ev);
    if (s->accept_ev)
        event_free(s->accept_ev);
    if (s->sigterm_ev)
        event_free(s->sigterm_ev);
    if (s->sigint_ev)
        event_free(s->sigint_ev);
    if (s->sigusr1_ev)
        event_free(s->sigusr1_ev);
    if (s->engine)
        s->engine->ops->destroy(s->engine);
    s->engine = NULL;
    conn_free_closed(s);
    server_drop_slotmap(s);
    if (s->cluster) {
        linktls_ctx_free(s->cluster->link_tls);
        cluster_free(s->cluster);
        free(s->cluster);
        s->cluster = NULL;
    }
    sendq_free(s->sq);
    s->sq = NULL;
    tls_server_free(s->tls);
    s->tls = NULL;
    tls_dialer_free(s->tls_dialer);
    s->tls_dialer = NULL;
    free(s->tls_gather);
    s->tls_gather = NULL;
    if (s->sasl_ready)
        mcsasl_shutdown();
    s->sasl_ready = false;
}
