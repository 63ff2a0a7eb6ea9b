/* lc_core.h - libcocytus internals: the client object, its connections
 * (one libmemcached handle per server), map refresh, and the retry loop
 * that runs one keyed request against the slot's owner. */
#ifndef LC_CORE_H
#define LC_CORE_H

#include <stdbool.h>
#include <stddef.h>

#include <libmemcached/memcached.h>

#include "lc_map.h"

#define LC_ERR_MAX 256
#define LC_EXTRA_CONNS 64          /* MOVED targets outside the map, at most */

/* A server and its libmemcached handle (created and primed on first use). */
struct lc_conn {
    struct lc_addr addr;
    memcached_st *mc;
};

struct cocytus {
    cocytus_options_t opt;
    struct lc_addr *seeds;
    size_t nseeds;
    struct lc_map *map;            /* never NULL after connect */
    struct lc_conn *conns;         /* conns[i] serves map->ep[i] for i < map->n;
                                      MOVED targets outside the map follow */
    size_t nconns, capconns;
    cocytus_stats_t stats;
    char err[LC_ERR_MAX];
};

/* How one attempt ended. */
enum lc_outcome {
    LC_FINAL,        /* a real answer (success or an error to report) */
    LC_MOVED,        /* MOVED with a parsed target */
    LC_LOST,         /* the connection failed after the request may have been sent */
    LC_SUSPECT       /* an error whose text libmemcached dropped (binary protocol,
                        some ASCII calls): it may have been a MOVED */
};

/* One attempt of a request on one server's handle. */
typedef memcached_return_t (*lc_attempt_fn)(memcached_st *mc, void *arg);

struct lc_request {
    const char *key;
    size_t nkey;
    bool retry_lost;       /* safe to send again after LC_LOST (get, set, delete, touch) */
    lc_attempt_fn fn;
    void *arg;
};

LC_HIDDEN void lc_set_error(cocytus_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keeps libmemcached's text for a failed call on mc in c->err. */
LC_HIDDEN void lc_note_error(cocytus_t *c, memcached_st *mc, memcached_return_t rc);

/* Sleeps before retry number attempt (1, 2, ...): retry_delay_ms doubling, capped. */
LC_HIDDEN void lc_backoff(const cocytus_t *c, int attempt);

/* The handle of conns[i], created and connected if needed; NULL (with the
 * failure in *rc) if the server cannot be reached. */
LC_HIDDEN memcached_st *lc_conn_handle(cocytus_t *c, size_t i, memcached_return_t *rc);
LC_HIDDEN void lc_conn_reset(cocytus_t *c, size_t i);
LC_HIDDEN size_t lc_conn_find_or_add(cocytus_t *c, const struct lc_addr *a);

/* Index of the connection a new request for slot goes to. */
LC_HIDDEN size_t lc_route(cocytus_t *c, unsigned slot);

/* Fetches the map from prefer (may be NULL), the seeds, then the map's own
 * endpoints; installs the first one at least as new as both min_epoch and
 * the cached map.  False if none was found. */
LC_HIDDEN bool lc_refresh(cocytus_t *c, const struct lc_addr *prefer, uint64_t min_epoch);

/* What an attempt's return code means; fills *mv for LC_MOVED. */
LC_HIDDEN enum lc_outcome lc_classify(cocytus_t *c, memcached_st *mc, memcached_return_t rc,
                                      struct lc_moved *mv);

/* Handles a MOVED for slot: refreshes if the epoch is newer, caches the hint
 * (map routing only) and returns the connection to try next. */
LC_HIDDEN size_t lc_follow_moved(cocytus_t *c, unsigned slot, const struct lc_moved *mv);

/* Runs a keyed request with routing and bounded retries.  Returns the
 * libmemcached code of the final answer, or MEMCACHED_CONNECTION_FAILURE
 * when the retries ran out or a request that may have been applied lost
 * its connection.
 * On failure codes c->err holds the server's or libmemcached's text. */
LC_HIDDEN memcached_return_t lc_run(cocytus_t *c, const struct lc_request *rq);

/* Maps a final libmemcached code (and c->err's text) to the library's. */
LC_HIDDEN cocytus_rc lc_rc(const cocytus_t *c, memcached_return_t rc);

#endif
