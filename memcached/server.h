/* server.h - the one server context of a process: settings, listeners,
 * connections, counters and the engine.  Nothing else in a process holds
 * mutable state. */
#ifndef MC_SERVER_H
#define MC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "listen_bind.h"
#include "unixsock.h"
#include "tls.h"
#include "authfile.h"
#include "clock.h"
#include "engine.h"
#include "auth.h"
#include "slotmap.h"
#include "watch.h"

#define SERVER_MAX_LISTEN LISTEN_BIND_MAX
#define MC_VERSION_STRING "1.6.18-cocytus-" PACKAGE_VERSION

struct event_base;
struct event;
struct conn;
struct coord_client;
struct prefix_stats;
struct sendq;


struct settings {
    int port;                 /* -p */
    bool port_given;          /* -p was on the command line */
    const char *listen_addr;  /* -l, every one given, comma separated (NULL: all interfaces) */
    const char *unix_path;    /* -s: listen on this Unix socket instead of TCP */
    int unix_mask;            /* -a: the socket file's permissions (0700) */
    bool tls_enabled;         /* -Z: clients speak TLS */
    struct tls_config tls;    /* -o ssl_*: its certificate, key and rules */
    int udp_port;             /* -U; only 0 (off) is supported */
    size_t mem_limit;         /* -m, bytes */
    int max_conns;            /* -c */
    size_t item_size_max;     /* -I */
    bool evict;               /* !-M */
    bool cas_enabled;         /* !-C */
    int verbose;              /* -v count */
    bool daemonize;           /* -d */
    const char *pid_file;     /* -P */
    const char *user;         /* -u */
    bool shutdown_enabled;    /* -A */
    int backlog;              /* -b */
    unsigned hashpower;       /* -o hashpower=N */
    size_t max_line;          /* longest request line accepted without a newline */
    bool flush_enabled;       /* !-F */
    bool dump_enabled;        /* !-X: stats cachedump, lru_crawler metadump */
    bool watch_enabled;       /* !-W: the watch command (watch.h) */
    bool lock_memory;         /* -k: mlockall at start */
    const char *memory_file;  /* -e: a restartable cache (restart.h; plain role) */
    const char *auth_file;    /* -Y: ASCII authentication (user:pass lines) */
    bool sasl_enabled;        /* -S: binary only, SASL first (sasl_auth.h; plain role) */
    const char *protocol;     /* -B: ascii, binary or auto (checked against -S only) */
    int idle_timeout;         /* -o idle_timeout=N: close connections idle N seconds */
    char prefix_delimiter;    /* -D: stats detail's key prefix delimiter (':') */
    bool detail_enabled;      /* stats detail on|off (-D turns it on) */
    bool sizes_enabled;       /* stats sizes_enable|sizes_disable (-o track_sizes) */
    const char *role;         /* --role (plain by default) */
    bool no_uring;            /* --no-io-uring: no batched writes (sendq.h) */
    const char *cluster_file; /* --cluster: replicated roles */
    int group;                /* --group */
    int index;                /* --index: within the role in the group */
};

/* Counters kept by the protocol layer, common to every engine. */
struct server_stats {
    uint64_t curr_conns, total_conns, rejected_conns, conn_structs;
    uint64_t idle_kicks;      /* connections closed by the idle timeout */
    uint64_t listen_disabled; /* pauses of accepting: out of descriptors */
    uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch;
    uint64_t get_hits, get_misses;
    uint64_t delete_hits, delete_misses;
    uint64_t incr_hits, incr_misses, decr_hits, decr_misses;
    uint64_t cas_hits, cas_misses, cas_badval;
    uint64_t touch_hits, touch_misses;
    uint64_t bytes_read, bytes_written;
    uint64_t auth_cmds, auth_errors;
    uint64_t meta_cmds;
    uint64_t store_too_large, store_no_memory;
    /* Slot migration (migrate.c): moves finished here as the source, keys
     * copied, client writes forwarded; set/delete taken on import
     * connections as the destination. */
    uint64_t migrate_moves, migrate_keys_sent, migrate_forwards, import_keys;
};

struct server {
    struct settings settings;
    struct server_stats stats;
    struct mc_clock clock;
    time_t started;
    struct event_base *base;
    struct engine *engine;
    struct cluster *cluster;  /* loaded from settings.cluster_file, or NULL */
    uint8_t admin_key[AUTH_KEY_SIZE]; /* "cocytus auth" key, from the cluster secret */
    bool admin_key_set;       /* false without a cluster: no admin command at all */
    struct slotmap *slotmap;  /* with a cluster: the slot map, else NULL */
    int slot_self;            /* own endpoint index in slotmap, -1 if none */
    bool routes;              /* keys of other processes' slots get MOVED */
    /* Promoted (engine_config.promoted) while the map named another member
     * of our group: that member's process, and its endpoint index in the
     * map held now (-1 if none): its slots are served here until a map
     * names someone else for the group.  NULL: not promoted. */
    const struct cluster_proc *promoted_for;
    int promoted_owner;
    char *config_reply;       /* `config get cluster` reply of slotmap */
    size_t config_reply_len;
    char moved[SLOTMAP_MOVED_MAX]; /* text of the last MOVED */
    struct event *listen_ev[SERVER_MAX_LISTEN];
    int listen_fd[SERVER_MAX_LISTEN];
    bool listen_tls[SERVER_MAX_LISTEN]; /* -Z, and not a "notls:" entry of -l */
    int nlisten;
    bool listen_unix;         /* -s: the one listener is a Unix socket */
    struct unixsock unix_listener; /* ... it, its lock and its file (unixsock.h) */
    struct tls_server *tls;   /* -Z: every accepted client shakes hands (tls.h) */
    struct tls_dialer *tls_dialer; /* -Z in a cluster: dials its processes' client ports */
    bool sasl_ready;          /* -S: Cyrus SASL initialised (sasl_auth.h) */
    bool save_memory;         /* -e: SIGUSR1 asked for the items to be saved at exit */
    bool save_failed;         /* -e: that save failed (the exit status says so) */
    struct event *sigusr1_ev; /* -e: SIGUSR1 saves and stops, as memcached's */
    char *tls_gather;         /* -Z: replies gathered for one TLS record */
    struct event *clock_ev;
    struct event *accept_ev;  /* resumes accepting after running out of descriptors */
    struct event *sigterm_ev, *sigint_ev;
    int bound_port;           /* actual port (when -p 0 asks for any) */
    struct conn *conns;       /* all open connections */
    struct conn *closed;      /* closed ones the engine still holds (conn_release) */
    struct conn *flush_queue; /* replies completed by the engine, written once
                                 the current event's work is done (conn.c) */
    struct event *flush_ev;
    struct sendq *sq;         /* deferred writes of a loop pass, batched (sendq.h);
                                 started by server_run */
    bool accepting;
    unsigned long ticks;      /* clock ticks since start */
    time_t clock_second;      /* the wall second the clocks were last set to */
    bool shutting_down;
    struct migration *migration; /* slot moves (migrate.c), NULL until the first */
    uint64_t imports_begun[SLOTMAP_SLOTS / 64]; /* one bit per slot: this process took an
                                           "import begin <slot>" (migrate.c), so a
                                           commit of that slot may be taken here */
    struct prefix_stats *prefixes; /* stats detail: per key prefix counts (stats.c) */
    struct authfile auth;     /* -Y pairs */
    struct coord_client *coord; /* control link to the coordinator (coord_client.c), or NULL */
    struct watch_hub watch;   /* "watch" clients and their streams (watch.h) */
};

void settings_defaults(struct settings *s);
int server_init(struct server *s, const struct settings *settings, struct event_base *base);
/* Called once the process is what it will run as (user switched,
 * daemonized, pid file written), before server_run: -e's checks that need
 * that user, and the restored save is used up.  0, or -1 (a reason said). */
int server_started(struct server *s);
int server_run(struct server *s);
void server_clock_update(struct server *s);
void server_shutdown(struct server *s);
void server_destroy(struct server *s);

/* Stats of a group: "" (general), "settings", "items", "slabs", "sizes",
 * "conns".  Returns false for an unknown group. */
bool server_stats(struct server *s, const char *group, eng_stat_fn emit, void *ctx);
void server_stats_reset(struct server *s);

/* stats detail (stats.c): count a get (and whether it hit), a store or a
 * delete of key under its prefix when detail is on; the dump's lines
 * ("PREFIX <p> get <n> hit <n> set <n> del <n>\r\n" ... "END\r\n") are
 * written through write(ctx, ...). */
void prefix_stats_get(struct server *s, const char *key, size_t nkey, bool hit);
void prefix_stats_set(struct server *s, const char *key, size_t nkey);
void prefix_stats_delete(struct server *s, const char *key, size_t nkey);
void prefix_stats_dump(struct server *s, eng_write_fn write, void *ctx);
void prefix_stats_free(struct server *s);

/* memcached's slab class of an item under this server's -I and -C
 * (slabclass.h): the class the watch lines name. */
unsigned server_item_class(const struct server *s, size_t nkey, size_t nbytes, uint32_t flags);

/* -Y: loads the auth file into s (0, or -1 with a message). */
int server_load_auth(struct server *s, const char *path);
/* Does user/pass match an entry? */
bool server_auth_check(const struct server *s, const char *user, size_t nuser,
                       const char *pass, size_t npass);
/* cache_memlimit: sets the memory limit (bytes); false if the engine
 * cannot change it. */
bool server_set_mem_limit(struct server *s, size_t bytes);

/* The integration tests' fault files (COCYTUS_TEST_MUTE_DIR): out gets
 * DIR/<kind>-<role>-<group>-<index> for this process.  False when the
 * variable is not set. */
bool server_test_fault_path(const struct server *s, const char *kind, char *out, size_t len);

/* Install slot map m (the server takes it; NULL removes the map): finds the
 * process's own endpoint, turns the slot check on when it serves slots, and
 * prepares the `config get cluster` reply.  0, or -1 when out of memory
 * (the map is then installed without a reply). */
int server_set_slotmap(struct server *s, struct slotmap *m);

/* The slot check of a keyed request: NULL when the server does not route
 * or serves the key's slot itself; otherwise "<slot> <epoch> <host>:<port>"
 * naming the process that serves it (valid until the next call).  Inline:
 * it runs for every key, and the protocol objects need no more of the
 * server than its fields. */
static inline const char *server_moved(struct server *s, const char *key, size_t nkey)
{
    if (!s->routes)
        return NULL;
    unsigned slot = slotmap_slot(key, nkey);
    int owner = s->slotmap->slot[slot];
    if (owner == s->slot_self || owner == s->promoted_owner)
        return NULL;
    slotmap_moved_text(s->slotmap, slot, s->moved, sizeof(s->moved));
    return s->moved;
}

/* refresh_certs under -Z: the client port's TLS files read again, then in
 * a cluster the dialler's (a slot move's copy).  False with err when one
 * does not load: it keeps its old files (the port's may be renewed
 * already when the dialler's fail). */
bool server_tls_refresh(struct server *s, char *err, size_t errlen);

#endif
