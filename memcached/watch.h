/* watch.h - memcached's log streams: the "watch" command.
 *
 * A client that sends "watch [stream...]" gets OK and from then on one
 * line per event of the streams it chose, as memcached 1.6 writes them:
 *
 *   fetchers    every item lookup (a get's, and the one a set, delete,
 *               touch or incr makes first): type=item_get
 *   mutations   every store (set, add, replace, append, prepend, cas,
 *               and the meta set): type=item_store
 *   evictions   items evicted to make room: type=eviction
 *   connevents  clients connecting and closing: type=conn_new, conn_close
 *
 * "watch" alone means fetchers.  proxyreqs, proxyevents, proxyuser,
 * sysevents and rawcmds are accepted and log nothing here, as in a
 * memcached without its proxy.  Keys are URI-encoded (urikey.h), so a
 * line never holds a space or a newline of a key.
 *
 * The server is one event loop, so events are logged where they happen
 * and a watcher's lines join its connection's output at once (written
 * after the loop pass).  A watcher that reads too slowly loses lines
 * rather than holding memory without bound: they are counted, and it gets
 * "skipped=N" before its next line, as memcached's watchers do. */
#ifndef MC_WATCH_H
#define MC_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum watch_stream {
    WATCH_FETCHERS = 1u << 0,
    WATCH_MUTATIONS = 1u << 1,
    WATCH_EVICTIONS = 1u << 2,
    WATCH_CONNEVENTS = 1u << 3,
    WATCH_SILENT = 1u << 4,   /* accepted streams that have nothing to log here */
};

/* Queue one line on a watcher's connection.  False when the connection
 * holds too much unsent output: the line is not taken (skipped). */
typedef bool (*watch_send_fn)(void *conn, const char *line, size_t n);

struct watcher;

/* memcached's limit of watchers at once. */
#define WATCH_MAX_WATCHERS 20

/* Counters are memcached's "stats" log_* lines. */
struct watch_hub {
    struct watcher *list;
    unsigned streams;         /* every watcher's streams together: is anyone watching? */
    unsigned delivering;      /* lines being offered: removals wait (watch_remove) */
    bool removed;             /* ...and some did */
    watch_send_fn send;
    uint64_t gid;             /* the last event id given */
    uint64_t watchers;        /* log_watchers */
    uint64_t written;         /* log_worker_written: events logged */
    uint64_t sent;            /* log_watcher_sent: lines queued on watchers */
    uint64_t skipped;         /* log_watcher_skipped */
};

void watch_init(struct watch_hub *h, watch_send_fn send);
/* Forget every watcher (their connections are closed by their owner). */
void watch_destroy(struct watch_hub *h);

/* The words after "watch" (n bytes at args, NULL for none): the streams
 * asked for in *streams.  -1 for an unknown word (memcached: ERROR). */
int watch_parse(const char *args, size_t n, unsigned *streams);
enum watch_add_result { WATCH_ADDED, WATCH_TOO_MANY, WATCH_NO_MEMORY };
/* conn watches streams from now on, unless WATCH_MAX_WATCHERS do
 * (memcached: "WATCHER_TOO_MANY log watcher limit reached"). */
enum watch_add_result watch_add(struct watch_hub *h, void *conn, unsigned streams);
/* conn closed: it watches nothing any more (no-op if it never did).  Safe
 * from inside a send (a write that failed closes the connection). */
void watch_remove(struct watch_hub *h, void *conn);

static inline bool watch_wants(const struct watch_hub *h, unsigned stream)
{
    return (h->streams & stream) != 0;
}

/* The events.  cfd is the client's socket, as memcached logs it; size the
 * value's bytes; clsid memcached's slab class of the item (slabclass.h). */
void watch_item_get(struct watch_hub *h, const char *key, size_t nkey, bool found,
                    unsigned clsid, uint32_t size, int cfd);
/* status: "stored", "not_stored", "exists", "not_found"; cmd: "set",
 * "add", ...; ttl: seconds the item has left, 0 for none (memcached's
 * unsigned arithmetic: an item already expired wraps). */
void watch_item_store(struct watch_hub *h, const char *key, size_t nkey, const char *status,
                      const char *cmd, uint32_t ttl, unsigned clsid, uint32_t size, int cfd);
/* ttl: seconds left, -1 for none; idle: seconds since the last access. */
void watch_eviction(struct watch_hub *h, const char *key, size_t nkey, bool fetched,
                    int64_t ttl, uint32_t idle, unsigned clsid, uint32_t size);
/* rip/rport: the peer ("unix", 0 on a Unix socket); transport "tcp" or
 * "local"; reason (closes only): "normal", "error", "idle_timeout",
 * "shutdown". */
void watch_conn_event(struct watch_hub *h, bool opened, const char *rip, int rport,
                      const char *transport, const char *reason, int cfd);

#endif
