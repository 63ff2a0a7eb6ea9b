/* lc_core.c - libcocytus internals: connections, map refresh, MOVED
 * handling and the bounded retry loop around one keyed request. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lc_core.h"
#include "lc_fetch.h"

#define BACKOFF_CAP_MS 200
#define REFRESH_SOURCES_MAX 8      /* servers asked for the map in one refresh */

void lc_set_error(cocytus_t *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

/* Puts prefix before the current error text. */
static void prefix_error(cocytus_t *c, const char *prefix)
{
    char old[LC_ERR_MAX];

    memcpy(old, c->err, sizeof(old));
    lc_set_error(c, "%s: %s", prefix, old);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void lc_backoff(const cocytus_t *c, int attempt)
{
    long ms = c->opt.retry_delay_ms;

    for (int i = 1; i < attempt && ms < BACKOFF_CAP_MS; i++)
        ms *= 2;
    if (ms > BACKOFF_CAP_MS)
        ms = BACKOFF_CAP_MS;
    if (ms > 0)
        sleep_ms((int)ms);
}

/* ---- connections ---- */

void lc_note_error(cocytus_t *c, memcached_st *mc, memcached_return_t rc)
{
    const char *msg = memcached_last_error_message(mc);
    lc_set_error(c, "%s", msg && *msg ? msg : memcached_strerror(mc, rc));
}

static memcached_st *new_handle(const cocytus_t *c, const struct lc_addr *a)
{
    memcached_st *mc = memcached_create(NULL);
    uint64_t ms = (uint64_t)c->opt.timeout_ms;

    if (mc == NULL)
        return NULL;
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, c->opt.binary ? 1 : 0);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, ms);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, ms);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, ms * 1000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, ms * 1000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 0);
    if (memcached_server_add(mc, a->host, (in_port_t)a->port) != MEMCACHED_SUCCESS) {
        memcached_free(mc);
        return NULL;
    }
    return mc;
}

/* A version round trip opens the connection, so that a failure of the
 * request itself can only come from a connection that was working. */
static memcached_return_t prime_handle(memcached_st *mc)
{
    return memcached_version(mc);
}

memcached_st *lc_conn_handle(cocytus_t *c, size_t i, memcached_return_t *rc)
{
    struct lc_conn *cn = &c->conns[i];

    if (cn->mc != NULL)
        return cn->mc;
    cn->mc = new_handle(c, &cn->addr);
    if (cn->mc == NULL) {
        lc_set_error(c, "out of memory");
        *rc = MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        return NULL;
    }
    *rc = prime_handle(cn->mc);
    if (*rc != MEMCACHED_SUCCESS) {
        char where[LC_ADDR_TEXT_MAX];
        lc_addr_format(&cn->addr, where, sizeof(where));
        lc_set_error(c, "%s: %s", where, memcached_last_error_message(cn->mc));
        lc_conn_reset(c, i);
        *rc = MEMCACHED_CONNECTION_FAILURE;
        return NULL;
    }
    return cn->mc;
}

void lc_conn_reset(cocytus_t *c, size_t i)
{
    if (c->conns[i].mc != NULL) {
        memcached_free(c->conns[i].mc);
        c->conns[i].mc = NULL;
    }
}

static size_t conn_find(const cocytus_t *c, const struct lc_addr *a)
{
    for (size_t i = 0; i < c->nconns; i++)
        if (lc_addr_equal(&c->conns[i].addr, a))
            return i;
    return SIZE_MAX;
}

size_t lc_conn_find_or_add(cocytus_t *c, const struct lc_addr *a)
{
    size_t i = conn_find(c, a);

    if (i != SIZE_MAX)
        return i;
    if (c->nconns == c->capconns) {
        /* Full of MOVED targets: reuse the oldest extra slot. */
        i = c->map->n;
        lc_conn_reset(c, i);
    } else {
        i = c->nconns++;
    }
    c->conns[i].addr = *a;
    c->conns[i].mc = NULL;
    return i;
}

size_t lc_route(cocytus_t *c, unsigned slot)
{
    if (c->opt.route == COCYTUS_ROUTE_FOLLOW)
        return lc_conn_find_or_add(c, &c->seeds[0]);
    return c->map->owner[slot];
}

/* ---- maps ---- */

/* The handle already open for a, taken out of the old connection list. */
static memcached_st *take_handle(cocytus_t *c, const struct lc_addr *a)
{
    size_t i = conn_find(c, a);
    memcached_st *mc;

    if (i == SIZE_MAX)
        return NULL;
    mc = c->conns[i].mc;
    c->conns[i].mc = NULL;
    return mc;
}

/* Installs m: connections are rebuilt in m's endpoint order, keeping the
 * open handles of servers that stay. */
static bool install_map(cocytus_t *c, struct lc_map *m)
{
    size_t cap = m->n + LC_EXTRA_CONNS;
    struct lc_conn *conns = calloc(cap, sizeof(*conns));

    if (conns == NULL)
        return false;
    for (size_t i = 0; i < m->n; i++) {
        conns[i].addr = m->ep[i];
        conns[i].mc = take_handle(c, &m->ep[i]);
    }
    for (size_t i = 0; i < c->nconns; i++)
        lc_conn_reset(c, i);
    free(c->conns);
    lc_map_free(c->map);
    c->conns = conns;
    c->nconns = m->n;
    c->capconns = cap;
    c->map = m;
    c->stats.refreshes++;
    return true;
}

/* Whether a fetched map may replace the cached one. */
static bool acceptable(const cocytus_t *c, const struct lc_map *m, enum lc_fetch kind,
                       uint64_t min_epoch)
{
    if (c->map == NULL)
        return true;
    if (kind == LC_FETCH_NO_CLUSTER)
        return c->map->epoch == 0 && min_epoch == 0;
    return m->epoch >= min_epoch && m->epoch >= c->map->epoch;
}

/* Asks one server; true if its map was installed. */
static bool refresh_from(cocytus_t *c, const struct lc_addr *a, uint64_t min_epoch)
{
    struct lc_map *m = NULL;
    char err[LC_ERR_MAX];
    enum lc_fetch kind = lc_fetch_map(a, c->opt.timeout_ms, &m, err, sizeof(err));

    if (kind == LC_FETCH_FAILED) {
        lc_set_error(c, "%s", err);
        return false;
    }
    if (!acceptable(c, m, kind, min_epoch) || !install_map(c, m)) {
        lc_map_free(m);
        return false;
    }
    return true;
}

/* The servers a refresh asks, in order, without repeats. */
static size_t refresh_sources(const cocytus_t *c, const struct lc_addr *prefer,
                              struct lc_addr *out, size_t cap)
{
    size_t n = 0;
    size_t nmap = c->map ? c->map->n : 0;

    for (size_t k = 0; k < 1 + c->nseeds + nmap && n < cap; k++) {
        const struct lc_addr *a;
        if (k == 0)
            a = prefer;
        else if (k <= c->nseeds)
            a = &c->seeds[k - 1];
        else
            a = &c->map->ep[k - 1 - c->nseeds];
        if (a == NULL)
            continue;
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = lc_addr_equal(&out[j], a);
        if (!seen)
            out[n++] = *a;
    }
    return n;
}

bool lc_refresh(cocytus_t *c, const struct lc_addr *prefer, uint64_t min_epoch)
{
    struct lc_addr src[REFRESH_SOURCES_MAX];
    size_t n = refresh_sources(c, prefer, src, REFRESH_SOURCES_MAX);

    for (size_t i = 0; i < n; i++)
        if (refresh_from(c, &src[i], min_epoch))
            return true;
    return false;
}

/* ---- outcomes ---- */

static bool is_connection_error(memcached_return_t rc)
{
    switch (rc) {
    case MEMCACHED_CONNECTION_FAILURE:
    case MEMCACHED_CONNECTION_SOCKET_CREATE_FAILURE:
    case MEMCACHED_HOST_LOOKUP_FAILURE:
    case MEMCACHED_SERVER_MARKED_DEAD:
    case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
    case MEMCACHED_NO_SERVERS:
    case MEMCACHED_TIMEOUT:
    case MEMCACHED_WRITE_FAILURE:
    case MEMCACHED_READ_FAILURE:
    case MEMCACHED_ERRNO:
    case MEMCACHED_PARTIAL_READ:
    case MEMCACHED_IN_PROGRESS:
    case MEMCACHED_UNKNOWN_READ_FAILURE:
    case MEMCACHED_PROTOCOL_ERROR:
        return true;
    default:
        return false;
    }
}

enum lc_outcome lc_classify(cocytus_t *c, memcached_st *mc, memcached_return_t rc,
                            struct lc_moved *mv)
{
    if (rc == MEMCACHED_SERVER_ERROR) {
        /* Some calls (touch) replace the server's text with their own. */
        lc_note_error(c, mc, rc);
        return lc_moved_parse(c->err, mv) ? LC_MOVED : LC_SUSPECT;
    }
    if (rc == MEMCACHED_UNKNOWN_READ_FAILURE && c->opt.binary) {
        lc_note_error(c, mc, rc);
        return LC_SUSPECT;
    }
    if (is_connection_error(rc)) {
        lc_note_error(c, mc, rc);
        return LC_LOST;
    }
    if (memcached_failed(rc))
        lc_note_error(c, mc, rc);
    return LC_FINAL;
}

size_t lc_follow_moved(cocytus_t *c, unsigned slot, const struct lc_moved *mv)
{
    c->stats.redirects++;
    if (c->opt.route == COCYTUS_ROUTE_FOLLOW)
        return lc_conn_find_or_add(c, &mv->to);
    if (mv->epoch > c->map->epoch)
        lc_refresh(c, &mv->to, mv->epoch);
    size_t to = lc_conn_find_or_add(c, &mv->to);
    if (mv->epoch >= c->map->epoch && slot == mv->slot)
        c->map->owner[slot] = (uint16_t)to;
    return to;
}

/* ---- the retry loop ---- */

/* After a failure that is not MOVED: refresh and pick the new route. */
static size_t reroute_after_failure(cocytus_t *c, unsigned slot, int attempt)
{
    lc_backoff(c, attempt);
    lc_refresh(c, NULL, 0);
    return lc_route(c, slot);
}

/* An error whose text libmemcached dropped may be a MOVED: go to the slot's
 * owner in the map (fetched again if it names the server that failed; that
 * server is asked first, since it knows the map by which it refused: while
 * a slot moves, the source holds the new map before anyone else).  False if
 * the map still names that server: then it was a real error. */
static bool follow_map_owner(cocytus_t *c, unsigned slot, size_t *target)
{
    struct lc_addr failed = c->conns[*target].addr;

    if (lc_addr_equal(&c->conns[c->map->owner[slot]].addr, &failed))
        lc_refresh(c, &failed, 0);
    *target = c->map->owner[slot];
    return !lc_addr_equal(&c->conns[*target].addr, &failed);
}

memcached_return_t lc_run(cocytus_t *c, const struct lc_request *rq)
{
    unsigned slot = lc_key_slot(rq->key, rq->nkey);
    size_t target = lc_route(c, slot);
    memcached_return_t rc = MEMCACHED_CONNECTION_FAILURE;
    struct lc_moved mv;

    c->stats.requests++;
    for (int attempt = 0; attempt < c->opt.max_attempts; attempt++) {
        if (attempt > 0)
            c->stats.retries++;
        memcached_st *mc = lc_conn_handle(c, target, &rc);
        if (mc == NULL) {
            if (rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE)
                return rc;
            c->stats.conn_failures++;
            target = reroute_after_failure(c, slot, attempt + 1);
            continue;
        }
        rc = rq->fn(mc, rq->arg);
        switch (lc_classify(c, mc, rc, &mv)) {
        case LC_FINAL:
            return rc;
        case LC_MOVED:
            target = lc_follow_moved(c, slot, &mv);
            if (attempt > 0)
                lc_backoff(c, attempt);
            break;
        case LC_LOST:
            c->stats.conn_failures++;
            lc_conn_reset(c, target);
            if (!rq->retry_lost) {
                prefix_error(c, "connection lost, the request may have been applied");
                return MEMCACHED_CONNECTION_FAILURE;
            }
            target = reroute_after_failure(c, slot, attempt + 1);
            break;
        case LC_SUSPECT:
            lc_conn_reset(c, target);
            if (!follow_map_owner(c, slot, &target))
                return rc;
            c->stats.redirects++;
            break;
        }
    }
    prefix_error(c, "gave up after all attempts");
    return is_connection_error(rc) ? MEMCACHED_CONNECTION_FAILURE : rc;
}

/* ---- result codes ---- */

cocytus_rc lc_rc(const cocytus_t *c, memcached_return_t rc)
{
    switch (rc) {
    case MEMCACHED_SUCCESS:
    case MEMCACHED_STORED:
    case MEMCACHED_DELETED:
    case MEMCACHED_END:
    case MEMCACHED_BUFFERED:
        return COCYTUS_OK;
    case MEMCACHED_NOTFOUND:
        return COCYTUS_NOT_FOUND;
    case MEMCACHED_NOTSTORED:
        return COCYTUS_NOT_STORED;
    case MEMCACHED_DATA_EXISTS:
        return COCYTUS_EXISTS;
    case MEMCACHED_E2BIG:
        return COCYTUS_TOO_LARGE;
    case MEMCACHED_MEMORY_ALLOCATION_FAILURE:
    case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
        return COCYTUS_NO_MEMORY;
    case MEMCACHED_BAD_KEY_PROVIDED:
    case MEMCACHED_KEY_TOO_BIG:
        return COCYTUS_INVALID;
    case MEMCACHED_CLIENT_ERROR:
        return strstr(c->err, "non-numeric") ? COCYTUS_NON_NUMERIC : COCYTUS_SERVER_ERROR;
    default:
        return is_connection_error(rc) ? COCYTUS_UNAVAILABLE : COCYTUS_SERVER_ERROR;
    }
}
