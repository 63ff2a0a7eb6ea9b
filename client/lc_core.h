/* lc_core.h - libcocytus internals: the client object, its connections
 * (one libmemcached handle per server), map refresh, and the retry loop
 * that runs one keyed request against the slot's owner.
 *
 * Retries are bounded by a deadline: each public call opens a budget of
 * deadline_ms (lc_call_begin; a call made by another call, such as gat's
 * touch and get, shares its budget), and no new try starts once it is
 * spent or max_attempts tries were made.  A try already under way runs to
 * its own timeout, so a call returns within about deadline_ms + timeout_ms. */
#ifndef LC_CORE_H
#define LC_CORE_H

#include <stdbool.h>
#include <stddef.h>

#include <libmemcached/memcached.h>

#include "lc_map.h"

#define LC_ERR_MAX 256
#define LC_EXTRA_CONNS 64          /* MOVED targets outside the map, at most */
#define LC_BACKOFF_CAP_MS 50       /* longest wait between two tries */
#define LC_RETRY_FETCH_MS 200      /* per-server map fetch timeout inside a call */

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
    int64_t call_end;              /* monotonic ms at which the running call stops
                                      retrying; 0 between calls */
    char err[LC_ERR_MAX];
    char *auth_user, *auth_pass;   /* copies of the options' credentials, or NULL */
    char *auth_set;                /* the ASCII authentication set ("set auth 0 0 n\r\n
                                      user pass\r\n"), or NULL: no credentials */
};

/* How one attempt ended. */
enum lc_outcome {
    LC_FINAL,        /* a real answer (success or an error to report) */
    LC_MOVED,        /* MOVED with a parsed target */
    LC_LOST,         /* the connection failed after the request may have been sent */
    LC_SUSPECT,      /* an error whose text libmemcached dropped (binary protocol,
                        some ASCII calls): it may have been a MOVED */
    LC_REAUTH        /* ASCII with credentials: refused "CLIENT_ERROR unauthenticated",
                        nothing applied; libmemcached opened the connection again
                        without the authentication set: open the handle again */
};

/* One attempt of a request on one server's handle. */
typedef memcached_return_t (*lc_attempt_fn)(memcached_st *mc, void *arg);

struct lc_request {
    const char *key;
    size_t nkey;
    bool retry_lost;       /* safe to send again after LC_LOST, when the request may
                              have been applied: get, set, replace, delete, touch */
    lc_attempt_fn fn;
    void *arg;
};

LC_HIDDEN void lc_set_error(cocytus_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Keeps libmemcached's text for a failed call on mc in c->err. */
LC_HIDDEN void lc_note_error(cocytus_t *c, memcached_st *mc, memcached_return_t rc);

/* Monotonic clock, milliseconds. */
LC_HIDDEN int64_t lc_now_ms(void);

/* Opens the retry budget of a public call (deadline_ms from now).  False if
 * a budget is already open: the inner call shares it.  lc_call_end(c, began)
 * closes it only if this call opened it. */
LC_HIDDEN bool lc_call_begin(cocytus_t *c);
LC_HIDDEN void lc_call_end(cocytus_t *c, bool began);

/* Whether another try may start after tries tries: under max_attempts and
 * before the call's deadline. */
LC_HIDDEN bool lc_may_retry(const cocytus_t *c, int tries);

/* Sleeps before retry number retry (1, 2, ...): retry_delay_ms doubling,
 * capped at LC_BACKOFF_CAP_MS, and never past the call's deadline. */
LC_HIDDEN void lc_backoff(const cocytus_t *c, int retry);

/* The handle of conns[i], created and connected if needed; NULL (with the
 * failure in *rc: MEMCACHED_TIMEOUT if the server did not answer in time,
 * else MEMCACHED_CONNECTION_FAILURE) if the server cannot be reached.
 * Nothing of a request has been sent then. */
LC_HIDDEN memcached_st *lc_conn_handle(cocytus_t *c, size_t i, memcached_return_t *rc);
LC_HIDDEN void lc_conn_reset(cocytus_t *c, size_t i);
LC_HIDDEN size_t lc_conn_find_or_add(cocytus_t *c, const struct lc_addr *a);

/* Index of the connection a new request for slot goes to. */
LC_HIDDEN size_t lc_route(cocytus_t *c, unsigned slot);

/* Fetches the map from prefer (may be NULL), the seeds, then the map's own
 * endpoints, with avoid (may be NULL: the server that just failed) asked
 * last.  Installs the first map newer than the cached one (and at least
 * min_epoch); if the servers only have the cached epoch, installs one of
 * those (this drops MOVED hints).  A map older than the cached one is never
 * installed.  Inside a call each server gets min(timeout_ms,
 * LC_RETRY_FETCH_MS), and no server is asked once the deadline has passed
 * (but the first).  False if nothing was installed; c->err then says why. */
LC_HIDDEN bool lc_refresh(cocytus_t *c, const struct lc_addr *prefer,
                          const struct lc_addr *avoid, uint64_t min_epoch);

/* lc_refresh for a retry: c->err keeps the failure being retried. */
LC_HIDDEN bool lc_refresh_for_retry(cocytus_t *c, const struct lc_addr *prefer,
                                    const struct lc_addr *avoid, uint64_t min_epoch);

/* After a timeout: fetches the map repeatedly, with the backoff between,
 * until it is newer than the cached one, ms have passed or the budget is
 * spent.  True if a newer map was installed. */
LC_HIDDEN bool lc_await_new_map(cocytus_t *c, int ms, int retry);

/* The code an attempt really ended with: memcached_mget() reports a send
 * that failed (a connection reset by a killed server) as
 * MEMCACHED_SOME_ERRORS or MEMCACHED_FAILURE, keeping the cause as the
 * handle's last error; that cause is returned (a connection failure if
 * there is none).  Other codes are returned as they are. */
LC_HIDDEN memcached_return_t lc_attempt_rc(const memcached_st *mc, memcached_return_t rc);

/* What an attempt's return code means; fills *mv for LC_MOVED. */
LC_HIDDEN enum lc_outcome lc_classify(cocytus_t *c, memcached_st *mc, memcached_return_t rc,
                                      struct lc_moved *mv);

/* Handles a MOVED for slot, answered on connection from: opens that
 * connection's handle again if libmemcached closed its socket (with ASCII
 * credentials), refreshes if the epoch is newer, caches the hint (map
 * routing only) and returns the connection to try next. */
LC_HIDDEN size_t lc_follow_moved(cocytus_t *c, size_t from, unsigned slot,
                                 const struct lc_moved *mv);

/* Runs a keyed request with routing and retries until the deadline.
 * Returns the libmemcached code of the final answer, or
 * MEMCACHED_CONNECTION_FAILURE when the budget ran out or a request that
 * may have been applied (retry_lost false) lost its connection or timed
 * out.  On failure codes c->err holds the server's or libmemcached's text. */
LC_HIDDEN memcached_return_t lc_run(cocytus_t *c, const struct lc_request *rq);

/* Maps a final libmemcached code (and c->err's text) to the library's. */
LC_HIDDEN cocytus_rc lc_rc(const cocytus_t *c, memcached_return_t rc);

#endif
