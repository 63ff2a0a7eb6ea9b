/* libcocytus.h - the Cocytus-KV client library.
 *
 * A client connects from a list of seed servers, fetches the cluster's slot
 * map with "config get cluster" (a server without a cluster is taken as the
 * owner of every slot, so a plain memcached works too), and sends each
 * request straight to the server that owns the key's slot:
 *
 *     slot = one-at-a-time(key) & 16383        (see docs/routing.md)
 *
 * When a server answers MOVED naming a newer map epoch, refuses or drops the
 * connection, or does not answer within timeout_ms, the client fetches the
 * map again and retries, with a short backoff, until the call's deadline
 * (deadline_ms): a killed server whose slots the cluster hands to another
 * process is ridden through once the new map is out.  A request that may
 * have reached the server before its connection failed is sent again only
 * if that is harmless (get, set, replace, delete, touch); add, cas, append,
 * prepend, incr and decr then fail with COCYTUS_UNAVAILABLE and a
 * last_error saying "the request may have been applied"; since they cannot
 * be tried again, they wait for their reply until the deadline rather than
 * timeout_ms, so a server that is only slow does not fail them.  The servers are
 * spoken to through libmemcached, in the ASCII or the binary protocol.
 *
 * A cocytus_t is not thread-safe: use one per thread.  Every call returns
 * within about deadline_ms + timeout_ms (a try started before the deadline
 * runs to its timeout). */
#ifndef LIBCOCYTUS_H
#define LIBCOCYTUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COCYTUS_API __attribute__((visibility("default")))
#else
#define COCYTUS_API
#endif

#define COCYTUS_SLOTS 16384          /* key -> slot: hash & (COCYTUS_SLOTS - 1) */
#define COCYTUS_KEY_MAX 250          /* longest key the servers accept */

typedef struct cocytus cocytus_t;

/* Outcome of a call. */
typedef enum cocytus_rc {
    COCYTUS_OK = 0,
    COCYTUS_NOT_FOUND,     /* no such key (get, delete, touch, incr/decr, cas) */
    COCYTUS_NOT_STORED,    /* add: key exists; replace/append/prepend: key missing */
    COCYTUS_EXISTS,        /* cas: the item changed since the cas was read */
    COCYTUS_TOO_LARGE,     /* the value exceeds the server's item size limit */
    COCYTUS_NON_NUMERIC,   /* incr/decr on a value that is not a number */
    COCYTUS_NO_MEMORY,     /* the server (or this process) is out of memory */
    COCYTUS_INVALID,       /* bad argument: empty or too long key, bad seed list */
    COCYTUS_UNAVAILABLE,   /* no server answered before the deadline, or the
                              connection of a request that may have been
                              applied (add, cas, append, prepend, incr, decr)
                              was lost: see cocytus_last_error() */
    COCYTUS_SERVER_ERROR   /* any other failure; see cocytus_last_error() */
} cocytus_rc;

/* Where requests go. */
typedef enum cocytus_route {
    COCYTUS_ROUTE_MAP = 0,   /* to the slot's owner in the cached map (default) */
    COCYTUS_ROUTE_FOLLOW     /* always to the first seed, following MOVED per request
                                without caching it (the uncached baseline) */
} cocytus_route;

/* Fill with cocytus_options_init() before changing fields: fields may be
 * added at the end (deadline_ms was), so programs built against an older
 * libcocytus.h must be rebuilt. */
typedef struct cocytus_options {
    int binary;              /* 0: ASCII protocol to the servers (default), 1: binary */
    int timeout_ms;          /* connect and per-reply timeout of one try (default 1000;
                                add, cas, append, prepend, incr and decr wait for
                                their reply until deadline_ms instead, if longer);
                                a map fetch inside a call waits at most 200 ms */
    int max_attempts;        /* upper bound on tries per call, the first included
                                (default 100, at most 1000); deadline_ms normally
                                ends the retries first */
    int retry_delay_ms;      /* backoff before the 2nd try; doubles, capped at 50 (default 5) */
    cocytus_route route;     /* default COCYTUS_ROUTE_MAP */
    int deadline_ms;         /* retry budget of one call: no new try starts after it
                                (default 2000; <= 0 means the default) */
    const char *username;    /* with password: the pair presented to servers started
                                with -Y (memcached's auth file), on every connection:
                                the ASCII authentication set, or SASL PLAIN in the
                                binary protocol; 1 to 255 bytes each, no spaces or
                                control characters.  NULL (default): none.  Copied
                                by cocytus_connect_with(). */
    const char *password;
} cocytus_options_t;

/* An item read from the cluster.  value is malloc'ed and NUL-terminated
 * (the NUL is not counted in nvalue); release it with cocytus_item_free(). */
typedef struct cocytus_item {
    char *value;
    size_t nvalue;
    uint32_t flags;
    uint64_t cas;
} cocytus_item_t;

/* Counters, for tests and experiments. */
typedef struct cocytus_stats {
    uint64_t requests;       /* key requests made by the caller (an mget counts its keys) */
    uint64_t redirects;      /* MOVED replies received */
    uint64_t refreshes;      /* slot maps fetched (the first one included) */
    uint64_t retries;        /* requests sent again after a failure or MOVED */
    uint64_t conn_failures;  /* requests that found their server unreachable */
} cocytus_stats_t;

/* The storage commands, for cocytus_store(). */
typedef enum cocytus_store_op {
    COCYTUS_SET = 0,
    COCYTUS_ADD,
    COCYTUS_REPLACE,
    COCYTUS_APPEND,
    COCYTUS_PREPEND,
    COCYTUS_CAS
} cocytus_store_op;

/* Called by cocytus_mget() once per key found, in no particular order.
 * The item (and its value) is valid only during the call. */
typedef void (*cocytus_item_cb)(void *ctx, const char *key, size_t nkey,
                                const cocytus_item_t *item);

/* ---- connection ---- */

/* Fills o with the defaults. */
COCYTUS_API void cocytus_options_init(cocytus_options_t *o);

/* Connects: seeds is "host:port,host:port,..." ("[v6addr]:port" for IPv6;
 * the port defaults to 11211).  Fetches the slot map from the first seed
 * that answers.  Returns NULL with a message in err (if err != NULL) on
 * failure. */
COCYTUS_API cocytus_t *cocytus_connect(const char *seeds, char *err, size_t errlen);
COCYTUS_API cocytus_t *cocytus_connect_with(const char *seeds, const cocytus_options_t *o,
                                            char *err, size_t errlen);

/* Closes every connection and frees the client.  NULL is allowed. */
COCYTUS_API void cocytus_close(cocytus_t *c);

/* ---- reads ---- */

/* Reads one item (with its cas). */
COCYTUS_API cocytus_rc cocytus_get(cocytus_t *c, const char *key, size_t nkey,
                                   cocytus_item_t *out);

/* Touches and reads one item (two requests: touch, then get). */
COCYTUS_API cocytus_rc cocytus_gat(cocytus_t *c, const char *key, size_t nkey,
                                   int64_t exptime, cocytus_item_t *out);

/* Reads many items: the keys are split by owner, one multi-get per server.
 * cb is called for every key found.  Keys that cannot be read after the
 * retries make the call return an error (cb has then seen the others). */
COCYTUS_API cocytus_rc cocytus_mget(cocytus_t *c, const char *const *keys, const size_t *nkeys,
                                    size_t n, cocytus_item_cb cb, void *ctx);

COCYTUS_API void cocytus_item_free(cocytus_item_t *it);

/* ---- writes ---- */

/* One storage command.  cas is used by COCYTUS_CAS only.  When cas_out is
 * not NULL and the command succeeded, the item is read back for its new cas
 * (one more request; 0 if the item changed or vanished meanwhile). */
COCYTUS_API cocytus_rc cocytus_store(cocytus_t *c, cocytus_store_op op,
                                     const char *key, size_t nkey,
                                     const char *value, size_t nvalue,
                                     uint32_t flags, int64_t exptime,
                                     uint64_t cas, uint64_t *cas_out);

COCYTUS_API cocytus_rc cocytus_set(cocytus_t *c, const char *key, size_t nkey,
                                   const char *value, size_t nvalue,
                                   uint32_t flags, int64_t exptime);
COCYTUS_API cocytus_rc cocytus_add(cocytus_t *c, const char *key, size_t nkey,
                                   const char *value, size_t nvalue,
                                   uint32_t flags, int64_t exptime);
COCYTUS_API cocytus_rc cocytus_replace(cocytus_t *c, const char *key, size_t nkey,
                                       const char *value, size_t nvalue,
                                       uint32_t flags, int64_t exptime);
COCYTUS_API cocytus_rc cocytus_append(cocytus_t *c, const char *key, size_t nkey,
                                      const char *value, size_t nvalue);
COCYTUS_API cocytus_rc cocytus_prepend(cocytus_t *c, const char *key, size_t nkey,
                                       const char *value, size_t nvalue);
COCYTUS_API cocytus_rc cocytus_cas(cocytus_t *c, const char *key, size_t nkey,
                                   const char *value, size_t nvalue,
                                   uint32_t flags, int64_t exptime, uint64_t cas);

COCYTUS_API cocytus_rc cocytus_delete(cocytus_t *c, const char *key, size_t nkey);
COCYTUS_API cocytus_rc cocytus_touch(cocytus_t *c, const char *key, size_t nkey,
                                     int64_t exptime);

/* incr/decr by delta; *value (may be NULL) receives the new value.  decr
 * stops at 0. */
COCYTUS_API cocytus_rc cocytus_incr(cocytus_t *c, const char *key, size_t nkey,
                                    uint64_t delta, uint64_t *value);
COCYTUS_API cocytus_rc cocytus_decr(cocytus_t *c, const char *key, size_t nkey,
                                    uint64_t delta, uint64_t *value);

/* incr (decr != 0: decr) that creates a missing key with value initial
 * (and exptime) instead of failing, as the binary protocol's incr does. */
COCYTUS_API cocytus_rc cocytus_arith_init(cocytus_t *c, int decr, const char *key, size_t nkey,
                                          uint64_t delta, uint64_t initial, int64_t exptime,
                                          uint64_t *value);

/* flush_all on every server that owns slots in the map (delay in seconds,
 * 0: now).  Every one is tried; the first failure is returned. */
COCYTUS_API cocytus_rc cocytus_flush_all(cocytus_t *c, int64_t delay);

/* ---- map and diagnostics ---- */

/* Fetches the slot map again now (a map older than the cached one is never
 * taken).  COCYTUS_UNAVAILABLE if no server gave a map at least as new. */
COCYTUS_API cocytus_rc cocytus_refresh(cocytus_t *c);

/* The slot of a key. */
COCYTUS_API unsigned cocytus_key_slot(const char *key, size_t nkey);

/* Epoch of the cached map (0 for a server without a cluster). */
COCYTUS_API uint64_t cocytus_epoch(const cocytus_t *c);

/* Number of endpoints in the cached map. */
COCYTUS_API size_t cocytus_endpoint_count(const cocytus_t *c);

/* Writes "host:port" of endpoint i of the cached map into buf; -1 if there
 * is no such endpoint. */
COCYTUS_API int cocytus_endpoint(const cocytus_t *c, size_t i, char *buf, size_t cap);

/* Index of the endpoint that owns slot in the cached map. */
COCYTUS_API size_t cocytus_slot_owner(const cocytus_t *c, unsigned slot);

COCYTUS_API void cocytus_get_stats(const cocytus_t *c, cocytus_stats_t *out);

/* Text of the last failure on this client ("" if none). */
COCYTUS_API const char *cocytus_last_error(const cocytus_t *c);

COCYTUS_API const char *cocytus_strerror(cocytus_rc rc);

#ifdef __cplusplus
}
#endif

#endif
