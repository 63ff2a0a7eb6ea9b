/* lc_core.c - libcocytus internals: connections, map refresh, MOVED
 * handling and the retry loop around one keyed request, bounded by the
 * call's deadline.
 *
 * After a failure that is not a MOVED (the server refused, closed, or did
 * not answer in time) the client fetches the map, asking the failed server
 * last.  If the slot has a new owner it goes there at once; otherwise it
 * waits the backoff (a few ms, doubling up to LC_BACKOFF_CAP_MS, so that a
 * map the cluster publishes is seen soon) and tries the same server again.
 * After a timeout it does not try the same server again for timeout_ms (a
 * hung process would cost a whole timeout per try) but keeps fetching the
 * map meanwhile.  A request that may have reached the server is sent again
 * only if doing so twice is harmless (lc_request.retry_lost); one that is
 * not waits for its reply until the call's deadline, and its failure
 * fetches the map before it is reported. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lc_core.h"
#include "lc_fetch.h"

#define REFRESH_SOURCES_MAX 8      /* servers asked for the map in one refresh */
#define REFRESH_SAME_MAX 2         /* answers with the cached epoch that end a refresh */
#define FETCH_MIN_MS 20            /* shortest map fetch timeout near the deadline */

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

/* ---- time and budget ---- */

int64_t lc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

bool lc_call_begin(cocytus_t *c)
{
    if (c->call_end != 0)
        return false;
    c->call_end = lc_now_ms() + c->opt.deadline_ms;
    return true;
}

void lc_call_end(cocytus_t *c, bool began)
{
    if (began)
        c->call_end = 0;
}

/* Milliseconds left in the call's budget (INT64_MAX outside a call). */
static int64_t budget_left(const cocytus_t *c)
{
    return c->call_end == 0 ? INT64_MAX : c->call_end - lc_now_ms();
}

bool lc_may_retry(const cocytus_t *c, int tries)
{
    return tries < c->opt.max_attempts && budget_left(c) > 0;
}

static int64_t backoff_ms(const cocytus_t *c, int retry)
{
    int64_t ms = c->opt.retry_delay_ms;

    for (int i = 1; i < retry && ms < LC_BACKOFF_CAP_MS; i++)
        ms *= 2;
    return ms > LC_BACKOFF_CAP_MS ? LC_BACKOFF_CAP_MS : ms;
}

/* Sleeps ms, but not past the call's deadline. */
static void sleep_in_budget(const cocytus_t *c, int64_t ms)
{
    int64_t left = budget_left(c);

    if (ms > left)
        ms = left;
    if (ms > 0)
        sleep_ms(ms);
}

void lc_backoff(const cocytus_t *c, int retry)
{
    sleep_in_budget(c, backoff_ms(c, retry));
}

/* ---- connections ---- */

void lc_note_error(cocytus_t *c, memcached_st *mc, memcached_return_t rc)
{
    const char *msg = memcached_last_error_message(mc);
    lc_set_error(c, "%s", msg && *msg ? msg : memcached_strerror(mc, rc));
}

/* A handle for a, not connected yet; with sasl it authenticates with the
 * options' pair (SASL PLAIN) as it connects (connect checked that this
 * libmemcached can).  NULL with c->err set: out of memory. */
static memcached_st *new_handle(cocytus_t *c, const struct lc_addr *a, bool sasl)
{
    memcached_st *mc = memcached_create(NULL);
    uint64_t ms = (uint64_t)c->opt.timeout_ms;

    if (mc == NULL) {
        lc_set_error(c, "out of memory");
        return NULL;
    }
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, c->opt.binary ? 1 : 0);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, ms);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, ms);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, ms * 1000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, ms * 1000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 0);
    memcached_return_t rc = memcached_server_add(mc, a->host, (in_port_t)a->port);
    if (rc == MEMCACHED_SUCCESS && sasl)
        rc = memcached_set_sasl_auth_data(mc, c->opt.username, c->opt.password);
    if (rc != MEMCACHED_SUCCESS) {
        lc_set_error(c, "out of memory (%s)", memcached_strerror(mc, rc));
        memcached_free(mc);
        return NULL;
    }
    return mc;
}

memcached_return_t lc_attempt_rc(const memcached_st *mc, memcached_return_t rc)
{
    if (rc != MEMCACHED_SOME_ERRORS && rc != MEMCACHED_FAILURE)
        return rc;
    memcached_return_t last = memcached_last_error(mc);
    if (memcached_failed(last) && last != MEMCACHED_SOME_ERRORS && last != MEMCACHED_FAILURE)
        return last;
    return MEMCACHED_CONNECTION_FAILURE;
}

/* A version round trip opens the connection, so that a failure of the
 * request itself can only come from a connection that was working.
 * memcached_version() reports any failure as MEMCACHED_SOME_ERRORS; the
 * handle's last error says which (MEMCACHED_TIMEOUT for a hung server). */
static memcached_return_t prime(memcached_st *mc)
{
    return lc_attempt_rc(mc, memcached_version(mc));
}

/* ASCII with credentials: the version was refused "CLIENT_ERROR
 * unauthenticated" (a -Y server); sends the authentication set, then the
 * version again. */
static memcached_return_t prime_ascii_auth(cocytus_t *c, memcached_st *mc)
{
    /* the data of the map fetches' set: "user pass" between its two CRLFs */
    const char *data = strchr(c->auth_set, '\n') + 1;
    memcached_return_t rc = memcached_set(mc, "auth", 4, data, strlen(data) - 2, 0, 0);
    if (rc != MEMCACHED_SUCCESS)
        return rc;
    return prime(mc);
}

static bool refused_unauthenticated(const memcached_st *mc)
{
    const char *msg = memcached_last_error_message(mc);
    return memcached_last_error(mc) == MEMCACHED_CLIENT_ERROR && msg != NULL &&
           strstr(msg, "unauthenticated") != NULL;
}

/* A request on a handle that authenticated when it opened, refused by a
 * -Y server as from a connection that has not: "unauthenticated", or,
 * for a set whose data has a space, "authentication failure" (the server
 * took it for an authentication attempt).  Either way nothing ran. */
static bool refused_as_new_connection(const memcached_st *mc)
{
    const char *msg = memcached_last_error_message(mc);
    return refused_unauthenticated(mc) ||
           (memcached_last_error(mc) == MEMCACHED_CLIENT_ERROR && msg != NULL &&
            strstr(msg, "authentication failure") != NULL);
}

/* Opens connection i's handle.  Credentials go only to a server that asks
 * for them: in ASCII one without -Y would store the authentication set as
 * an item named "auth", password included, for any client to read.  So an
 * ASCII handle sends them once the version is refused as unauthenticated;
 * a binary one authenticates with SASL as it connects, and if the server
 * does not know SASL (no -Y: libmemcached reads its answer to the
 * mechanism list as UNKNOWN_READ_FAILURE) a handle without is opened.
 * MEMCACHED_SUCCESS, or a failure with the handle closed and c->err set. */
static memcached_return_t open_handle(cocytus_t *c, struct lc_conn *cn)
{
    bool creds = c->auth_set != NULL;

    cn->mc = new_handle(c, &cn->addr, creds && c->opt.binary);
    if (cn->mc == NULL)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    memcached_return_t rc = prime(cn->mc);
    if (rc != MEMCACHED_SUCCESS && creds && !c->opt.binary && refused_unauthenticated(cn->mc))
        rc = prime_ascii_auth(c, cn->mc);
    if (rc == MEMCACHED_UNKNOWN_READ_FAILURE && creds && c->opt.binary) {
        memcached_free(cn->mc);
        cn->mc = new_handle(c, &cn->addr, false);
        if (cn->mc == NULL)
            return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
        rc = prime(cn->mc);
    }
    if (rc != MEMCACHED_SUCCESS) {
        char where[LC_ADDR_TEXT_MAX];
        lc_addr_format(&cn->addr, where, sizeof(where));
        lc_set_error(c, "%s: %s", where, memcached_last_error_message(cn->mc));
        memcached_free(cn->mc);
        cn->mc = NULL;
    }
    return rc;
}

memcached_st *lc_conn_handle(cocytus_t *c, size_t i, memcached_return_t *rc)
{
    struct lc_conn *cn = &c->conns[i];

    if (cn->mc != NULL)
        return cn->mc;
    *rc = open_handle(c, cn);
    if (*rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE)
        return NULL;
    if (*rc != MEMCACHED_SUCCESS) {
        *rc = *rc == MEMCACHED_TIMEOUT ? MEMCACHED_TIMEOUT : MEMCACHED_CONNECTION_FAILURE;
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

/* libmemcached closes its socket after some errors (a SERVER_ERROR such
 * as a MOVED in reply to a get) and connects again by itself on the
 * handle's next request: a connection a -Y server has not authenticated,
 * which refuses that request (LC_REAUTH, one round trip lost).  With ASCII
 * credentials the handle is opened again here instead, authenticated. */
static void conn_drop_if_closed(cocytus_t *c, size_t i)
{
    memcached_st *mc = c->conns[i].mc;

    if (mc == NULL || c->auth_set == NULL || c->opt.binary)
        return;
    const memcached_instance_st *in = memcached_server_instance_by_position(mc, 0);
    if (in != NULL && memcached_server_srcport(in) == 0)
        lc_conn_reset(c, i);
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

/* The map fetch timeout: timeout_ms between calls (connect, cocytus_refresh);
 * inside a call at most LC_RETRY_FETCH_MS, and no longer than the budget
 * left (but FETCH_MIN_MS), so that a dead or hung server is passed over
 * quickly. */
static int fetch_timeout(const cocytus_t *c)
{
    int64_t ms = c->opt.timeout_ms;
    int64_t left = budget_left(c);

    if (c->call_end == 0)
        return (int)ms;
    if (ms > LC_RETRY_FETCH_MS)
        ms = LC_RETRY_FETCH_MS;
    if (ms > left)
        ms = left;
    return ms < FETCH_MIN_MS ? FETCH_MIN_MS : (int)ms;
}

/* Asks one server; *out gets its map unless it is LC_MAP_REFUSED (or the
 * fetch failed: then LC_MAP_REFUSED too, with the reason in c->err, and
 * *answered false). */
static enum lc_judged fetch_from(cocytus_t *c, const struct lc_addr *a, uint64_t min_epoch,
                              struct lc_map **out, bool *answered)
{
    struct lc_map *m = NULL;
    char err[LC_ERR_MAX];
    enum lc_fetch kind = lc_fetch_map(a, fetch_timeout(c), c->auth_set, NULL, &m, err, sizeof(err),
                                      NULL);

    *out = NULL;
    *answered = kind != LC_FETCH_FAILED;
    if (kind == LC_FETCH_FAILED) {
        lc_set_error(c, "%s", err);
        return LC_MAP_REFUSED;
    }
    enum lc_judged j = lc_map_judge(c->map, m, kind == LC_FETCH_NO_CLUSTER, min_epoch);
    if (j == LC_MAP_REFUSED) {
        char where[LC_ADDR_TEXT_MAX];
        uint64_t want = c->map->epoch > min_epoch ? c->map->epoch : min_epoch;
        lc_addr_format(a, where, sizeof(where));
        if (kind == LC_FETCH_NO_CLUSTER)
            lc_set_error(c, "%s has no cluster map (epoch 0), older than %" PRIu64, where, want);
        else
            lc_set_error(c, "%s has map epoch %" PRIu64 ", older than %" PRIu64, where, m->epoch,
                         want);
        lc_map_free(m);
        return LC_MAP_REFUSED;
    }
    *out = m;
    return j;
}

bool lc_refresh(cocytus_t *c, const struct lc_addr *prefer, const struct lc_addr *avoid,
                uint64_t min_epoch)
{
    struct lc_addr src[REFRESH_SOURCES_MAX];
    size_t n = lc_refresh_sources(prefer, avoid, c->seeds, c->nseeds, c->map, src,
                                  REFRESH_SOURCES_MAX);
    struct lc_map *same = NULL;
    int nsame = 0;
    bool any_answer = false;

    for (size_t i = 0; i < n && nsame < REFRESH_SAME_MAX; i++) {
        struct lc_map *m;
        bool answered;
        if (i > 0 && budget_left(c) <= 0)
            break;
        /* The server that just failed is asked only if no other answered. */
        if (avoid != NULL && any_answer && lc_addr_equal(&src[i], avoid))
            break;
        enum lc_judged j = fetch_from(c, &src[i], min_epoch, &m, &answered);
        any_answer = any_answer || answered;
        switch (j) {
        case LC_MAP_NEWER:
            lc_map_free(same);
            if (install_map(c, m))
                return true;
            lc_map_free(m);
            lc_set_error(c, "out of memory");
            return false;
        case LC_MAP_SAME:
            nsame++;
            if (same == NULL)
                same = m;
            else
                lc_map_free(m);
            break;
        case LC_MAP_REFUSED:
            break;
        }
    }
    if (same == NULL)
        return false;
    if (install_map(c, same))
        return true;
    lc_map_free(same);
    return false;
}

/* The text of the failure being retried stays in c->err (a later "gave
 * up" reports it, not a map fetch's). */
bool lc_refresh_for_retry(cocytus_t *c, const struct lc_addr *prefer,
                          const struct lc_addr *avoid, uint64_t min_epoch)
{
    char saved[LC_ERR_MAX];

    memcpy(saved, c->err, sizeof(saved));
    bool ok = lc_refresh(c, prefer, avoid, min_epoch);
    memcpy(c->err, saved, sizeof(saved));
    return ok;
}

bool lc_await_new_map(cocytus_t *c, int ms, int retry)
{
    int64_t until = lc_now_ms() + ms;
    uint64_t epoch = c->map->epoch;

    for (;; retry++) {
        lc_refresh_for_retry(c, NULL, NULL, 0);
        if (c->map->epoch > epoch)
            return true;
        int64_t wait = backoff_ms(c, retry);
        sleep_in_budget(c, wait > 0 ? wait : 1);
        if (lc_now_ms() >= until || budget_left(c) <= 0)
            return false;
    }
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
    /* A handle is authenticated when it is opened (open_handle), but
     * libmemcached reconnects a socket it closed by itself on the next
     * request, and that connection is new to the server. */
    if (rc == MEMCACHED_CLIENT_ERROR && c->auth_set != NULL && !c->opt.binary &&
        refused_as_new_connection(mc))
        return LC_REAUTH;
    return LC_FINAL;
}

size_t lc_follow_moved(cocytus_t *c, size_t from, unsigned slot, const struct lc_moved *mv)
{
    conn_drop_if_closed(c, from);     /* before a refresh may change the connections */
    c->stats.redirects++;
    if (c->opt.route == COCYTUS_ROUTE_FOLLOW)
        return lc_conn_find_or_add(c, &mv->to);
    if (mv->epoch > c->map->epoch)
        lc_refresh_for_retry(c, &mv->to, NULL, mv->epoch);
    size_t to = lc_conn_find_or_add(c, &mv->to);
    if (mv->epoch >= c->map->epoch && slot == mv->slot)
        c->map->owner[slot] = (uint16_t)to;
    return to;
}

/* ---- the retry loop ---- */

/* After a failure that is not MOVED (nothing answered, or the connection
 * broke), with budget left: the connection to try next.  The map is
 * fetched (the failed server asked last); a new owner is tried at once.
 * Else the same server is tried again after the backoff, or, after a
 * timeout, once timeout_ms have passed, fetching the map meanwhile in case
 * the cluster moves the slot away from a hung process. */
static size_t reroute_after_failure(cocytus_t *c, unsigned slot, size_t failed_i, int tries,
                                    bool timed_out)
{
    struct lc_addr failed = c->conns[failed_i].addr;
    int64_t again_at = lc_now_ms() + (timed_out ? c->opt.timeout_ms : 0);

    for (int retry = tries;; retry++) {
        lc_refresh_for_retry(c, NULL, &failed, 0);
        size_t next = lc_route(c, slot);
        if (!lc_addr_equal(&c->conns[next].addr, &failed))
            return next;
        int64_t ms = backoff_ms(c, retry);
        sleep_in_budget(c, ms > 0 ? ms : 1);
        if (lc_now_ms() >= again_at || budget_left(c) <= 0)
            return lc_route(c, slot);
    }
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
        lc_refresh_for_retry(c, &failed, NULL, 0);
    *target = c->map->owner[slot];
    return !lc_addr_equal(&c->conns[*target].addr, &failed);
}

/* The reply wait of one try.  A request that cannot be sent twice waits
 * for its reply until the call's deadline (at least timeout_ms), not only
 * timeout_ms: its server may just be slow (a write waits for every parity
 * process's ack, and a stopped parity process holds its group's writes
 * until the coordinator drops it, about 1.5 s), and giving up early turns
 * a slow reply into "may have been applied" that nothing can retry.  Other
 * requests keep timeout_ms: their retry after a timeout is harmless. */
static uint64_t reply_wait_ms(const cocytus_t *c, const struct lc_request *rq)
{
    int64_t left = budget_left(c);

    if (rq->retry_lost || left <= c->opt.timeout_ms)
        return (uint64_t)c->opt.timeout_ms;
    return left > c->opt.deadline_ms ? (uint64_t)c->opt.deadline_ms : (uint64_t)left;
}

/* One try of rq on mc, with its reply wait; the handle's default wait
 * (timeout_ms) is put back after it. */
static memcached_return_t attempt(cocytus_t *c, memcached_st *mc, const struct lc_request *rq)
{
    uint64_t wait = reply_wait_ms(c, rq);

    if (wait == (uint64_t)c->opt.timeout_ms)
        return lc_attempt_rc(mc, rq->fn(mc, rq->arg));
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, wait);
    memcached_return_t rc = lc_attempt_rc(mc, rq->fn(mc, rq->arg));
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, (uint64_t)c->opt.timeout_ms);
    return rc;
}

/* After a request that cannot be sent twice was lost: fetches the map (the
 * failed server asked last) so that the next call does not find that
 * server by a map the cluster may have replaced meanwhile (a stopped
 * process taken over, which on resuming reads requests and exits without
 * an answer).  Its reply wait ran to the deadline, so the fetch gets a
 * budget of its own, one fetch timeout. */
static void refresh_after_loss(cocytus_t *c, const struct lc_addr *where)
{
    struct lc_addr failed = *where;
    int64_t call_end = c->call_end;

    if (budget_left(c) < LC_RETRY_FETCH_MS)
        c->call_end = lc_now_ms() + LC_RETRY_FETCH_MS;
    lc_refresh_for_retry(c, NULL, &failed, 0);
    c->call_end = call_end;
}

static memcached_return_t run_request(cocytus_t *c, const struct lc_request *rq)
{
    unsigned slot = lc_key_slot(rq->key, rq->nkey);
    size_t target = lc_route(c, slot);
    memcached_return_t rc = MEMCACHED_CONNECTION_FAILURE;
    struct lc_moved mv;
    int64_t start = lc_now_ms();
    int tries = 0;

    c->stats.requests++;
    for (;;) {
        if (tries > 0)
            c->stats.retries++;
        tries++;
        memcached_st *mc = lc_conn_handle(c, target, &rc);
        if (mc == NULL) {
            if (rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE)
                return rc;
            /* Nothing of the request was sent: any command may try again. */
            c->stats.conn_failures++;
            if (!lc_may_retry(c, tries))
                goto give_up;
            target = reroute_after_failure(c, slot, target, tries, rc == MEMCACHED_TIMEOUT);
            continue;
        }
        rc = attempt(c, mc, rq);
        switch (lc_classify(c, mc, rc, &mv)) {
        case LC_FINAL:
            return rc;
        case LC_MOVED:
            if (!lc_may_retry(c, tries))
                goto give_up;
            target = lc_follow_moved(c, target, slot, &mv);
            if (tries > 1)
                lc_backoff(c, tries - 1);
            break;
        case LC_LOST:
            c->stats.conn_failures++;
            lc_conn_reset(c, target);
            if (!rq->retry_lost) {
                refresh_after_loss(c, &c->conns[target].addr);
                prefix_error(c, rc == MEMCACHED_TIMEOUT
                                    ? "no reply in time, the request may have been applied"
                                    : "connection lost, the request may have been applied");
                return MEMCACHED_CONNECTION_FAILURE;
            }
            if (!lc_may_retry(c, tries))
                goto give_up;
            target = reroute_after_failure(c, slot, target, tries, rc == MEMCACHED_TIMEOUT);
            break;
        case LC_REAUTH:
            /* Refused before it ran: any command may go again, at once. */
            lc_conn_reset(c, target);
            if (!lc_may_retry(c, tries))
                goto give_up;
            break;
        case LC_SUSPECT:
            lc_conn_reset(c, target);
            if (lc_may_retry(c, tries) && follow_map_owner(c, slot, &target)) {
                c->stats.redirects++;
                break;
            }
            /* The map still names this server: it may just have died
             * mid-request.  A request that is harmless twice waits for the
             * map like after a lost connection; others report it. */
            if (!rq->retry_lost)
                return rc;
            if (!lc_may_retry(c, tries))
                goto give_up;
            target = reroute_after_failure(c, slot, target, tries, false);
            break;
        }
    }
give_up:;
    char why[96];
    snprintf(why, sizeof(why), "gave up after %d tries in %" PRId64 " ms", tries,
             lc_now_ms() - start);
    prefix_error(c, why);
    return is_connection_error(rc) ? MEMCACHED_CONNECTION_FAILURE : rc;
}

memcached_return_t lc_run(cocytus_t *c, const struct lc_request *rq)
{
    bool began = lc_call_begin(c);
    memcached_return_t rc = run_request(c, rq);

    lc_call_end(c, began);
    return rc;
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
