/* px.h - cocytus-proxy internals: the types its files share.
 *
 * The proxy is a set of worker threads, each a libevent loop that owns
 * everything it touches: its client connections, one non-blocking
 * connection to every server it routes to (a "backend"), its copy of the
 * slot map and a map fetch in progress.  Nothing is shared between workers
 * but the counters in struct proxy.
 *
 * A client request (px_req) becomes one or more backend operations
 * (px_op): one binary-protocol request each, routed by its key's slot.  An
 * op is queued on its backend's output and in-flight FIFO; the server
 * answers one connection's requests in order, so the first op of the FIFO
 * owns the next reply (its opaque is checked).  Output is written once per
 * loop iteration for every connection that has some (the worker's dirty
 * list), so the requests of many clients to one server share one writev,
 * and the replies a client got in one iteration share one write.  A client
 * keeps its requests in a FIFO too, and a reply goes out only when every
 * earlier request of that client has answered.
 *
 * An op that meets MOVED, a lost connection or a timeout is routed again
 * (px_route.c) under libcocytus's rules: a request that may have been
 * applied is sent again only if it is harmless twice, no new try starts
 * after the deadline, and the map is fetched again without blocking
 * anything else. */
#ifndef COCYTUS_PX_H
#define COCYTUS_PX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "lc_map.h"
#include "authfile.h"
#include "listen_bind.h"
#include "proto_text.h"
#include "tls.h"
#include "unixsock.h"

#define PX_VERSION "1.6.18-cocytus-proxy-" PACKAGE_VERSION
#define PX_LAT_BUCKETS 96           /* latency histogram: 4 buckets per power of 2 us */
#define PX_MAX_BACKEND_STATS 1024   /* distinct server addresses counted */
#define PX_MAX_PIPELINE 1024        /* requests of one client in progress before it is
                                       no longer read */
#define PX_OUT_HIGH (4u << 20)      /* ...or unsent output above this */
#define PX_READ_CHUNK 16384
#define PX_SEND_IOV 64
#define PX_FETCH_TIMEOUT_MS 200     /* one server's map fetch */
#define PX_FETCH_MAX_SOURCES 8      /* servers asked in one refresh */
#define PX_BACKOFF_MIN_MS 5
#define PX_BACKOFF_MAX_MS 200
#define PX_TICK_MS 5
#define PX_DRAIN_ROUNDS 4          /* client flush + read passes before the servers
                                       are written (proxy.c) */

/* ---- counters, shared by the workers ---- */

/* One server's counters, summed over the workers (relaxed atomics). */
struct px_be_stats {
    char name[LC_ADDR_TEXT_MAX];
    uint64_t requests;              /* ops sent (each try counts) */
    uint64_t errors;                /* connection failures, timeouts, error replies
                                       the proxy did not expect (not misses) */
    int64_t inflight;
    uint64_t down;                  /* 1 while a worker last saw it down */
    uint64_t lat[PX_LAT_BUCKETS];   /* send to reply, per op */
};

/* One worker's counters, by name and as one array (px_stats.c sums and
 * resets them in a loop): every field is a uint64_t, and PX_NCOUNTERS is
 * their number (a static assertion in px_stats.c holds the two together).
 * curr_conns is a gauge, the rest counters. */
#define PX_NCOUNTERS 35

struct px_counters {
    union {
        struct {
            uint64_t curr_conns, total_conns, rejected_conns, idle_closed;
            uint64_t cmd_get, get_hits, get_misses;
            uint64_t cmd_set, cmd_delete, cmd_incr_decr, cmd_touch, cmd_flush;
            /* outcomes of the servers' replies, under memcached's names */
            uint64_t delete_hits, delete_misses, incr_hits, incr_misses, decr_hits,
                decr_misses;
            uint64_t cas_hits, cas_misses, cas_badval, touch_hits, touch_misses;
            uint64_t bytes_read, bytes_written;     /* client side */
            uint64_t errors;
            uint64_t routed, redirects, refreshes, retries, conn_failures, timeouts;
            uint64_t order_waits;   /* ops held behind an earlier one of their slot */
            uint64_t auth_cmds, auth_errors;
        };
        uint64_t all[PX_NCOUNTERS];
    };
};

struct px_options {
    const char *addr;               /* -l, every one given, comma separated (NULL: 127.0.0.1) */
    int port;
    const char *seeds;
    size_t item_max;
    int timeout_ms;                 /* one try */
    int deadline_ms;                /* all tries of a request */
    int max_attempts;
    int wait_s;
    int threads;
    int verbose;
    int idle_timeout_s;             /* 0: never */
    int max_conns;                  /* 0: no limit */
    const char *auth_file;          /* -Y: clients must authenticate */
    const char *server_auth_file;   /* --server-auth: our pair for the servers */
    bool no_uring;                  /* --no-io-uring: one sendmsg() per connection */
    const char *unix_path;          /* --unix-socket: listen there instead of TCP */
    int unix_mask;                  /* --unix-mask: its permissions (0700) */
    bool tls;                       /* --tls-cert given: clients speak TLS */
    struct tls_config tls_cfg;      /* --tls-cert, --tls-key, --tls-ca, --tls-min-version */
    bool backend_tls;               /* --backend-tls-*: servers are dialled with TLS */
    const char *backend_tls_cert, *backend_tls_key, *backend_tls_ca;
};

struct px_worker;

/* One listening socket and what its clients speak: TLS under --tls-cert,
 * except on an "notls:" entry of -l. */
struct px_listener {
    struct proxy *px;
    struct evconnlistener *l;
    bool tls;
};

struct proxy {
    struct px_options opt;
    struct event_base *base;        /* the accepting thread's loop */
    struct px_listener listeners[LISTEN_BIND_MAX];  /* -l's sockets, or --unix-socket's */
    int nlisteners;
    struct unixsock unix_listener;  /* --unix-socket: it, its lock, its file */
    struct event *accept_resume;    /* re-enables the listeners after EMFILE */
    uint64_t accept_pauses;         /* times accepting paused: out of descriptors */
    struct px_worker *workers;
    int nworkers;
    int next_worker;
    int64_t started;
    struct lc_addr *seeds;
    size_t nseeds;
    struct lc_map *first_map;       /* fetched at start, copied by every worker */
    pthread_mutex_t stats_lock;     /* adding backend stats entries */
    struct px_be_stats *bstats[PX_MAX_BACKEND_STATS];
    size_t nbstats;
    struct px_be_stats spare_stats; /* counts for addresses beyond the table */
    struct authfile auth;           /* -Y pairs (n == 0: no client auth) */
    struct auth_pair server_auth;   /* presented to the servers */
    bool has_server_auth;
    struct tls_server *tls;         /* --tls-cert: shared by the workers (tls.h) */
    struct tls_dialer *dialer;      /* --backend-tls-*: dials the servers (shared) */
};

/* ---- buffers ---- */

/* Bytes read and not yet consumed: data[off .. off + len). */
struct px_rbuf {
    char *data;
    size_t off, len, cap;
};

bool px_rbuf_reserve(struct px_rbuf *b, size_t room);
void px_rbuf_consume(struct px_rbuf *b, size_t n);
void px_rbuf_free(struct px_rbuf *b);
/* Whether the line from p to nl (its '\n') is text and CRLF. */
bool px_line_is(const char *p, const char *nl, const char *text);
/* One sendmsg() of the front of out (up to PX_SEND_IOV chains), drained by
 * what was sent: a socket call, not writev's trip through the VFS.  Bytes
 * sent, or -1 with errno (EAGAIN included). */
ssize_t px_send_buffer(struct evbuffer *out, int fd);
/* The same front of out as one message of the worker's batch
 * (repl/sendq.h); its slot, or -1 when the batch is full. */
struct sendq;
int px_queue_buffer(struct sendq *q, struct evbuffer *out, int fd);
/* The batched message's result (*slot, which becomes -1), as
 * px_send_buffer returns it: bytes sent (drained from out) or -1 with
 * errno.  With EIO the bytes may or may not have gone (sendq.h): they are
 * drained as if sent and, when maybe is given, counted there, so that a
 * backend knows its ops in them may have been applied. */
ssize_t px_batched_result(struct sendq *q, int *slot, struct evbuffer *out, uint64_t *maybe);
/* One TLS record of the front of out (at most cap bytes), drained by what
 * went; as px_send_buffer returns.  A write that waited is made again
 * with the same first bytes and no fewer of them (out only grows until a
 * write succeeds), as TLS requires. */
#define PX_TLS_RECORD 16384
ssize_t px_send_buffer_tls(struct evbuffer *out, struct tls_conn *tls, size_t cap);
/* One step of the TLS handshake of a connection the proxy dialled to a
 * server (--backend-tls-*): 1 done, 0 waiting for *want (EV_READ or
 * EV_WRITE), -1 failed with the reason in why (a refused certificate
 * names its reason). */
int px_tls_handshake(struct tls_conn *tc, short *want, char *why, size_t whylen);
/* One recv() into b, or one tls_read when tls is given.  >0 bytes read, 0
 * at EOF, -1 with errno (EAGAIN too). */
ssize_t px_rbuf_read(struct px_rbuf *b, int fd, struct tls_conn *tls);

/* ---- requests ---- */

enum px_proto { PX_PROTO_UNKNOWN, PX_PROTO_TEXT, PX_PROTO_BINARY };

struct px_client;
struct px_backend;
struct px_req;
struct px_mop;

enum px_op_state {
    OP_NEW,
    OP_INFLIGHT,      /* in a backend's FIFO */
    OP_WAITING,       /* in the worker's retry list */
    OP_DONE
};

/* One binary request to one server, kept encoded so it can be sent again. */
struct px_op {
    struct px_req *req;             /* NULL once the client has gone */
    unsigned index;                 /* position in req->ops */
    enum px_op_state state;
    struct px_op *next;             /* backend FIFO or retry list */
    struct px_backend *be;          /* while in flight */
    uint64_t start_byte;            /* be's output offset of the first byte */
    unsigned slot;
    int fanout;                     /* -1: keyed; else the endpoint index (flush) */
    bool retry_lost;                /* harmless to apply twice */
    bool uncounted;                 /* the proxy's own (a refused set's drop): not in stats */
    int tries;
    bool held;                      /* waited behind an earlier op (counted once) */
    int64_t deadline_ms;            /* no new try after this (monotonic ms) */
    int64_t sent_us;                /* monotonic us of the last send */
    int64_t retry_at_ms;            /* OP_WAITING: not before this */
    struct px_backend *target;      /* the next try goes here (a MOVED's target) */
    struct px_mop *mop;             /* a meta command's, while it is not answered */
    char why[120];                  /* why the last try failed */
    /* the outcome, for requests of several ops (multi-get, flush) */
    uint16_t status;
    struct evbuffer *frag;
    uint64_t *stat_values;          /* a STAT op: what its server said (px_stats.c) */
    size_t nwire;
    char wire[];                    /* header, extras, key, value */
};

/* What the client asked, enough to format its reply. */
struct px_req {
    struct px_client *c;
    struct px_req *next;
    enum px_proto proto;
    bool done;
    bool noreply;                   /* text noreply */
    bool close_after;
    bool silent;                    /* the proxy's own request: its ops' replies unshown */
    int text_cmd;                   /* enum text_cmd */
    uint8_t bin_opcode;             /* the client's opcode (quiet ones included) */
    uint32_t bin_opaque;
    uint64_t hits;
    unsigned nops, pending;
    unsigned ndeferred;             /* its launches waiting in px_meta.c's deferred list */
    uint64_t route_gen;             /* the worker's route_gen when it arrived */
    struct px_op **ops;
    struct px_op *one[1];           /* ops storage for single-op requests */
    struct evbuffer *reply;         /* the reply while earlier requests wait */
    char err[160];                  /* set when an op failed inside the proxy */
    /* a general `stats`: answered by stats_due_ms whoever did not answer
     * (px_stats_tick detaches their ops: rq->ops[i] becomes NULL) */
    struct px_req *stats_next;
    int64_t stats_due_ms;
    bool stats_listed;
    uint64_t dump_limit;            /* a cachedump's: at most this many lines (0: all) */
    uint64_t dump_sent;             /* listing lines streamed to the client so far */
};

/* px_req.text_cmd of a metadump or cachedump sent to every server
 * (px_meta.c): their lines joined behind one END (px_text_finish). */
#define PX_TEXT_DUMP (-3)

/* ---- connections ---- */

/* BE_AUTH: connected, --server-auth's SASL exchange under way; ops queue
 * in out and are written once it is BE_UP. */
enum px_be_state { BE_IDLE, BE_CONNECTING, BE_HANDSHAKE, BE_AUTH, BE_UP, BE_DOWN };
enum px_be_auth { BE_AUTH_LIST, BE_AUTH_PLAIN };

/* The address a connection was made to (len 0: none yet). */
struct px_at {
    struct sockaddr_storage sa;
    socklen_t len;
};

struct px_backend {
    struct px_worker *w;
    struct lc_addr addr;
    char name[LC_ADDR_TEXT_MAX];
    int fd;
    struct event *rev, *wev;
    enum px_be_state state;
    bool was_down;                  /* logged as down, not yet as up again */
    bool silent;                    /* its last failure was a timeout, and it has not
                                       answered since (a stopped process, a cut link) */
    int64_t hold_until_ms;          /* not 0: past the timeout, kept open until then for
                                       a request that cannot be sent twice (be_hold) */
    int64_t retry_at_ms;            /* BE_DOWN: no connection before this */
    int64_t connect_started_ms;
    struct px_at at;                /* the address fd is to */
    int fails;                      /* connection failures in a row */
    struct evbuffer *out;
    uint64_t queued_bytes, written_bytes;
    struct px_rbuf in;
    struct px_op *head, *tail;      /* in-flight FIFO */
    size_t ninflight;
    uint32_t next_opaque;
    enum px_be_auth auth_step;      /* BE_AUTH: whose answer is awaited */
    bool dirty;
    int sq_slot;                    /* its message in the worker's batch, or -1 */
    struct tls_conn *tls;           /* --backend-tls-*: its bytes move through TLS */
    struct px_backend *next_dirty;
    struct px_backend *next_all;
    struct px_be_stats *st;
};

struct px_client {
    struct px_worker *w;
    int fd;
    struct event *rev, *wev;
    enum px_proto proto;
    struct px_rbuf in;
    struct evbuffer *out;
    size_t swallow;                 /* refused data bytes still to drop */
    bool reading;                   /* rev added */
    bool parsing;                   /* inside client_parse: no nested parse */
    bool closing;                   /* close once out is written */
    bool dead;                      /* closed: freed by the flush step */
    bool authed;                    /* -Y: authenticated */
    bool dirty;
    int sq_slot;                    /* its message in the worker's batch, or -1 */
    struct px_client *next_dirty;
    struct px_client *prev, *next;  /* the worker's clients */
    struct px_req *head, *tail;
    unsigned nreqs;
    unsigned kick_pass;             /* px_meta.c: the kick pass that found it waiting */
    size_t held_bytes;              /* request bytes its ops keep for resending */
    int64_t last_active_ms;
    struct tls_conn *tls;           /* --tls-cert: its bytes move through TLS */
};

/* ---- a map fetch in progress ---- */

struct px_fetch {
    bool running;
    bool again;                     /* asked for while running */
    bool pending;                   /* another fetch starts at again_at_ms */
    int64_t again_at_ms;
    int64_t started_ms;             /* when the last fetch began */
    int fd;
    struct px_at at;                /* the address fd is to */
    struct event *ev;
    struct px_rbuf in;
    struct tls_conn *tls;           /* --backend-tls-*: its bytes move through TLS */
    bool tls_up;                    /* its handshake is done */
    bool read_on_write;             /* its read waits for the socket to take bytes */
    bool tls_logged;                /* a TLS failure was logged */
    char req[600];                  /* [auth set] config get cluster */
    const char *req_pos;            /* unsent part of the request */
    size_t req_left;
    bool auth_reply;                /* STORED of the auth set still to come */
    bool auth_sent;                 /* the server asked, the set was sent */
    bool auth_logged;               /* a refusal of our credentials was logged */
    struct lc_addr src[PX_FETCH_MAX_SOURCES];
    size_t nsrc, cur;
    int same;                       /* answers with the cached epoch */
    bool skipped_lookup;            /* a source was passed over: its name's first
                                     * lookup had not answered */
    int64_t cur_deadline_ms;
    uint64_t min_epoch;
    struct lc_addr prefer, avoid;
    bool has_prefer, has_avoid;
};

/* ---- a worker ---- */

struct px_worker {
    struct proxy *px;
    int id;
    struct event_base *base;
    pthread_t thread;
    bool started, stop;
    int notify[2];
    struct event *notify_ev;
    struct event *tick;
    bool tick_on;
    /* routing */
    struct lc_map *map;
    uint16_t owner[COCYTUS_SLOTS];  /* map->owner plus MOVED hints; index into be */
    struct px_backend **be;         /* be[i] serves map->ep[i] for i < map->n;
                                       MOVED targets outside the map follow */
    size_t nbe, capbe;
    struct px_backend *all_be;
    struct px_fetch fetch;
    struct px_op *waiting, *waiting_tail;   /* ops waiting to be tried again */
    uint64_t route_gen;             /* bumped by whatever may send a slot's next op
                                       elsewhere than its last (px_route.c, "Order") */
    size_t nwaiting;
    size_t ninflight;
    /* connections */
    struct px_client *clients;
    size_t nclients;
    struct px_client *dirty_clients;
    struct px_backend *dirty_be;
    struct sendq *sq;               /* the flush step's batched writes (proxy.c) */
    struct px_resolved *resolved;   /* names' addresses (px_resolve.c) */
    int64_t last_idle_scan_ms;
    int64_t last_trim_ms;           /* last malloc_trim (proxy.c) */
    struct px_rbuf scratch;         /* clients with nothing buffered are read here */
    bool scratch_busy;
    uint64_t client_reads;          /* recv() calls on clients, to tell whether a
                                       pass of the loop found client input */
    struct px_counters st;
    char ebuf[256];
    struct px_meta *meta;           /* meta commands' connections (px_meta.c) */
    struct px_req *stats_reqs;      /* general `stats` waiting for servers (px_stats.c) */
};

/* ---- clock ---- */
int64_t px_now_ms(void);
int64_t px_now_us(void);

/* ---- counters (px_stats.c) ---- */
void px_count(uint64_t *counter, uint64_t n);
struct px_be_stats *px_stats_for(struct proxy *px, const char *name);
void px_stats_latency(struct px_be_stats *st, int64_t us);
typedef void (*px_stat_fn)(void *ctx, const char *name, const char *value);
/* What `stats <group>` asks the proxy (text argument or binary key). */
enum px_stats_group {
    PX_STATS_GENERAL,               /* `stats`: the proxy's, then every server's */
    PX_STATS_BACKENDS,              /* only the servers' */
    PX_STATS_SETTINGS,
    PX_STATS_ITEMS,                 /* the proxy stores nothing: empty lists */
    PX_STATS_SLABS,
    PX_STATS_SIZES,
    PX_STATS_RESET,
    PX_STATS_UNKNOWN
};
enum px_stats_group px_stats_group_of(const char *arg, size_t n);
/* The cache's figures, summed over the servers of the map: `stats` sends
 * every one of them a STAT (px_stats_fan_out) and adds up what answered
 * within PX_STATS_WAIT_MS. */
#define PX_STATS_WAIT_MS 250
enum px_total {
    PX_TOTAL_LIMIT_MAXBYTES, PX_TOTAL_BYTES, PX_TOTAL_CURR_ITEMS, PX_TOTAL_TOTAL_ITEMS,
    PX_TOTAL_EXPIRED_UNFETCHED, PX_TOTAL_EVICTED_UNFETCHED, PX_TOTAL_EVICTIONS,
    PX_TOTAL_RECLAIMED, PX_TOTALS
};
struct px_totals {
    uint64_t v[PX_TOTALS];
    unsigned asked, answered;       /* servers sent a STAT, and those that answered it */
    uint64_t newest_epoch;          /* the newest map a server answered with */
};
/* Whether a `stats` of this group (text argument or binary key) asks the
 * servers for their totals: the general one, once the worker has a map. */
bool px_stats_wants_totals(const struct px_worker *w, const char *arg, size_t n);
/* One STAT op per map endpoint on rq.  False if one could not be made. */
bool px_stats_fan_out(struct px_req *rq);
/* A statistic of a STAT op's reply (one packet of several), kept if summed. */
void px_stats_collect(struct px_op *op, const char *name, size_t nname, const char *value,
                      size_t nvalue);
/* A STAT op sent again: what an earlier try collected is dropped. */
void px_stats_forget(struct px_op *op);
/* Answers the general `stats` whose time is up; and takes a finished or
 * freed one off the worker's list. */
void px_stats_tick(struct px_worker *w, int64_t now_ms);
void px_stats_unlist(struct px_worker *w, struct px_req *rq);
/* The sums over rq's STAT ops that answered; a newer map one of them holds
 * is fetched. */
void px_stats_totals(struct px_worker *w, const struct px_req *rq, struct px_totals *t);
/* The statistics of one group (not RESET or UNKNOWN), without the end line;
 * with t, the general group has the servers' totals. */
void px_stats_emit(struct px_worker *w, enum px_stats_group g, const struct px_totals *t,
                   px_stat_fn emit, void *ctx);
/* `stats reset`: every counter but the gauges back to 0. */
void px_stats_reset(struct proxy *px);
/* Counts a server's final reply to op (its request's opcode, cas and the
 * status) as memcached counts hits, misses and bad cas values. */
void px_stats_outcome(struct px_worker *w, const char *request_wire, uint16_t status);

/* ---- backends (px_backend.c) ---- */
struct px_backend *px_backend_get(struct px_worker *w, const struct lc_addr *a);
/* Queues op on be (connecting if needed).  False if be is down and may not
 * be tried before be->retry_at_ms: the caller waits. */
bool px_backend_send(struct px_backend *be, struct px_op *op);
void px_backend_flush(struct px_backend *be);
void px_backend_queue(struct px_backend *be);
void px_backend_check_timeouts(struct px_worker *w, int64_t now_ms);
/* After a newer map: a silent backend with an op whose slot the map gave
 * to another server is closed now, as if it had timed out (px_route.c,
 * "A silent server"). */
void px_backend_leave_silent(struct px_worker *w);
/* A silent or held backend (or one a held meta connection goes to), while
 * ops or meta commands are in progress; else NULL. */
const struct px_backend *px_backend_silent_busy(const struct px_worker *w);
void px_backend_close_all(struct px_worker *w);
/* A non-blocking connect to a, started; -1 with errno (the name is then
 * marked stale).  A numeric host never blocks; a host name is looked up
 * once per worker and remembered (px_resolve.c).  in_place: a name not
 * seen before is looked up here (it blocks); else on a thread, and until
 * a lookup of it answers this returns PX_CONNECT_LOOKING_UP (the caller
 * waits: the answer calls px_backend_name_moved). */
#define PX_CONNECT_LOOKING_UP (-2)
int px_connect_start(struct px_worker *w, const struct lc_addr *a, struct px_at *at,
                     bool in_place);

/* ---- servers' names (px_resolve.c) ---- */
#define PX_ADDRS_MAX 4
struct px_addrs {
    struct sockaddr_storage sa[PX_ADDRS_MAX];
    socklen_t salen[PX_ADDRS_MAX];
    int n;
    int first;      /* tried first: the last that connected, or the one after
                     * the address a connection failed on */
};
/* The addresses to connect to a at (none while its name never resolved;
 * NULL out of memory, or EAGAIN while a's first lookup, started on a
 * thread because in_place is false, has not answered).  A stale name is
 * looked up again on a thread while these addresses serve. */
const struct px_addrs *px_resolved_get(struct px_worker *w, const struct lc_addr *a,
                                       bool in_place);
/* A connection to a failed: its name is looked up again before a later
 * connect, at most once a second, less often while lookups fail fast (a
 * replaced node's new address).  failed: the address it was made to
 * (px_connect_start's), if it never got an answer there; the next connect
 * then tries the name's next address first.  NULL: the address is not to
 * blame (a connection that worked, then broke). */
void px_resolved_stale(struct px_worker *w, const struct lc_addr *a, const struct px_at *failed);
/* Whether at is one of addrs. */
bool px_addrs_have(const struct px_addrs *addrs, const struct px_at *at);
void px_resolved_free(struct px_worker *w);

/* a's name now resolves to another set of addresses, addrs (px_resolve.c):
 * connections being made, or idle, at an address no longer in it are
 * dropped, and a backend waiting to reconnect, and the requests waiting
 * for one, are tried now. */
void px_backend_name_moved(struct px_worker *w, const struct lc_addr *a,
                           const struct px_addrs *addrs);
/* After a newer map: an idle connection to a server that serves no slot
 * any more (taken over: its host may be gone) is closed. */
void px_backend_drop_unowned(struct px_worker *w);
/* Every request waiting for a retry is tried now (px_route.c). */
void px_route_wake_waiting(struct px_worker *w);

/* ---- authentication (px_auth.c) ---- */
/* Loads -Y and --server-auth (either may be NULL).  False after a message. */
bool px_auth_setup(struct proxy *px, const char *client_file, const char *server_file);
/* A request of a client that has not authenticated yet: bytes used, 0 for
 * more, SIZE_MAX to close. */
size_t px_auth_request(struct px_client *c, const char *buf, size_t len);
/* The proxy's own pair as a binary SASL PLAIN request (opaque 0) or as the
 * ASCII authentication set; length, 0 if it does not fit. */
size_t px_auth_sasl_list_request(char *buf, size_t cap);
size_t px_auth_sasl_request(const struct proxy *px, char *buf, size_t cap);
size_t px_auth_ascii_request(const struct proxy *px, char *buf, size_t cap);

/* ---- routing (px_route.c) ---- */
bool px_route_init(struct px_worker *w, const struct lc_map *first);
void px_route_free(struct px_worker *w);
/* Sends a new op to the owner of its slot (or endpoint op->fanout). */
void px_route_op(struct px_worker *w, struct px_op *op);
/* A reply for op that is MOVED: redirect it. */
void px_route_moved(struct px_worker *w, struct px_op *op, struct px_backend *from,
                    const char *text, size_t n);
/* op's connection failed (lost: the request may have been applied). */
void px_route_failed(struct px_worker *w, struct px_op *op, bool lost, const char *why);
void px_route_tick(struct px_worker *w, int64_t now_ms);
/* Back-off before the n-th try again: PX_BACKOFF_MIN_MS doubling up to
 * PX_BACKOFF_MAX_MS (ops, meta commands, a failed server's reconnect). */
int64_t px_backoff_ms(int n);
void px_route_refresh(struct px_worker *w, const struct lc_addr *prefer,
                      const struct lc_addr *avoid, uint64_t min_epoch);
/* Takes op out of the retry list (its client went away). */
void px_route_forget(struct px_worker *w, struct px_op *op);

/* ---- requests (px_client.c) ---- */
struct px_op *px_op_new(struct px_req *rq, uint8_t opcode, const char *extras, uint8_t extlen,
                        const char *key, size_t nkey, const char *value, size_t nvalue,
                        uint64_t cas);
struct px_req *px_req_new(struct px_client *c, enum px_proto proto, unsigned nops);
/* Where the reply of rq goes now: the client's output if every earlier
 * request has answered, else rq's own buffer. */
struct evbuffer *px_req_sink(struct px_req *rq);
/* rq is complete (its reply written to px_req_sink): advance the client. */
void px_req_finish(struct px_req *rq);
/* A reply (header and body, status already checked for MOVED) for op. */
void px_op_reply(struct px_worker *w, struct px_op *op, const char *hdr, const char *body,
                 size_t nbody);
/* Keeps the first error of a request of several ops (one line, no CR/LF)
 * for its final reply. */
void px_req_note_error(struct px_req *rq, const char *text, size_t n);
/* op failed inside the proxy (gave up, lost): answer the client. */
void px_op_fail(struct px_worker *w, struct px_op *op, const char *why);
void px_op_free(struct px_op *op);
void px_client_adopt(struct px_worker *w, int fd, bool tls);
void px_client_flush(struct px_client *c);
void px_client_queue(struct px_client *c);
void px_client_mark_dirty(struct px_client *c);
void px_clients_idle_scan(struct px_worker *w, int64_t now_ms);
void px_clients_close_all(struct px_worker *w);

/* ---- meta commands (px_meta.c) ---- */
struct px_meta;
/* A meta command at the front of c's input: *handled, and the bytes
 * consumed (0: more must arrive; SIZE_MAX: close).  Not a meta command:
 * *handled false. */
size_t px_meta_request(struct px_client *c, const char *buf, size_t len, bool *handled);
bool px_meta_init(struct px_worker *w);
void px_meta_close_all(struct px_worker *w);
/* Meta commands in flight or waiting (the worker ticks fast then). */
bool px_meta_busy(const struct px_worker *w);
/* Timeouts and retries of the meta commands. */
void px_meta_tick(struct px_worker *w, int64_t now_ms);
/* The backend of a held meta connection (mconn_hold), or NULL. */
const struct px_backend *px_meta_held(const struct px_worker *w);
/* After a newer map: px_backend_leave_silent for meta connections. */
void px_meta_leave_silent(struct px_worker *w);
/* Whether a meta connection to a has a request in flight. */
bool px_meta_waits_on(const struct px_worker *w, const struct lc_addr *a);
/* A classic request about to be launched: true if it must wait behind an
 * earlier meta command of its client (px_meta.c launches it later). */
bool px_meta_defer_classic(struct px_worker *w, struct px_req *rq);
/* A request finished: deferred launches may go. */
void px_meta_kick(struct px_worker *w);
/* rq (a refused too-large set or ms) also deletes key on its server,
 * silently: memcached drops the old value. */
void px_meta_drop_key(struct px_client *c, struct px_req *rq, const char *key, size_t nkey);
/* A listing request (wire: `lru_crawler metadump ...` or `stats cachedump
 * ...` with its CRLF, already checked) to every server of the worker's
 * map, on rq (text_cmd PX_TEXT_DUMP): each server's lines, without its
 * END, land in its op's frag.  False out of memory (rq->err unset). */
bool px_meta_dump(struct px_client *c, struct px_req *rq, const char *wire, size_t nwire);

/* ---- protocols (px_text.c, px_bin.c) ---- */
/* Parse and start one request from c's input.  Returns bytes consumed,
 * 0 if more must arrive, SIZE_MAX to close the connection. */
size_t px_text_request(struct px_client *c, const char *buf, size_t len);
size_t px_bin_request(struct px_client *c, const char *buf, size_t len);
/* The reply of a completed op, in the client's protocol. */
void px_text_reply(struct px_op *op, uint16_t status, const char *hdr, const char *body,
                   size_t nbody);
void px_bin_reply(struct px_op *op, uint16_t status, const char *hdr, const char *body,
                  size_t nbody);
void px_text_finish(struct px_req *rq);
void px_bin_finish(struct px_req *rq);
void px_text_failure(struct px_req *rq, struct evbuffer *out, const char *why);
void px_bin_failure(struct px_req *rq, struct evbuffer *out, const char *why);

#endif
