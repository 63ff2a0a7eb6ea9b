/* px_stats.c - cocytus-proxy: counters, per-server latency, and `stats`.
 *
 * Every worker counts into its own struct px_counters, and into one shared
 * struct px_be_stats per server address (found by name when a worker first
 * meets the server), all with relaxed atomics, so `stats` on any connection
 * can sum them without stopping anyone: the figures are a close snapshot,
 * as memcached's are.  Latency is a histogram of 4 buckets per power of two
 * microseconds (a quantile is off by at most a quarter of its power of
 * two), from the moment an op is queued to its server until its reply is
 * read.
 *
 * The cache's own figures (curr_items, bytes, limit_maxbytes, evictions)
 * are the servers': a general `stats` sends a STAT to every server of the
 * map, as flush_all is sent, and waits at most PX_STATS_WAIT_MS for them
 * (px_stats_tick answers without the late ones).
 * A monitoring agent polling the proxy then sees the whole cluster's items
 * and memory, not a cache that never stores anything; `cluster_servers`
 * and `cluster_servers_answered` say how many the sums cover. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "bin_wire.h"
#include "px.h"

void px_count(uint64_t *counter, uint64_t n)
{
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

struct px_be_stats *px_stats_for(struct proxy *px, const char *name)
{
    struct px_be_stats *st = &px->spare_stats;

    pthread_mutex_lock(&px->stats_lock);
    for (size_t i = 0; i < px->nbstats; i++) {
        if (strcmp(px->bstats[i]->name, name) == 0) {
            st = px->bstats[i];
            goto out;
        }
    }
    if (px->nbstats < PX_MAX_BACKEND_STATS) {
        struct px_be_stats *n = calloc(1, sizeof(*n));
        if (n != NULL) {
            snprintf(n->name, sizeof(n->name), "%s", name);
            px->bstats[px->nbstats++] = n;
            st = n;
        }
    }
out:
    pthread_mutex_unlock(&px->stats_lock);
    return st;
}

/* Bucket of a latency: exact below 4 us, then 4 per power of two. */
static unsigned lat_bucket(uint64_t us)
{
    if (us < 4)
        return (unsigned)us;
    unsigned p = 63u - (unsigned)__builtin_clzll(us);
    unsigned b = 4 * p + (unsigned)((us >> (p - 2)) & 3) - 4;
    return b < PX_LAT_BUCKETS ? b : PX_LAT_BUCKETS - 1;
}

/* The smallest latency of bucket b. */
static uint64_t lat_lower(unsigned b)
{
    if (b < 4)
        return b;
    unsigned p = b / 4 + 1, sub = b % 4;
    return (uint64_t)(4 + sub) << (p - 2);
}

void px_stats_latency(struct px_be_stats *st, int64_t us)
{
    px_count(&st->lat[lat_bucket(us < 0 ? 0 : (uint64_t)us)], 1);
}

/* The q-quantile (0..1) of a histogram: its bucket's upper bound, in us. */
static uint64_t lat_quantile(const uint64_t *h, uint64_t total, double q)
{
    uint64_t want = (uint64_t)(q * (double)total + 0.5), seen = 0;

    if (total == 0)
        return 0;
    if (want == 0)
        want = 1;
    for (unsigned b = 0; b < PX_LAT_BUCKETS; b++) {
        seen += h[b];
        if (seen >= want)
            return b + 1 < PX_LAT_BUCKETS ? lat_lower(b + 1) - 1 : lat_lower(b);
    }
    return lat_lower(PX_LAT_BUCKETS - 1);
}

static void emit_u64(px_stat_fn emit, void *ctx, const char *name, uint64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    emit(ctx, name, text);
}

_Static_assert(sizeof(struct px_counters) == PX_NCOUNTERS * sizeof(uint64_t),
               "struct px_counters: PX_NCOUNTERS must count its uint64_t fields");

static void sum_counters(const struct proxy *px, struct px_counters *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < px->nworkers; i++)
        for (size_t f = 0; f < PX_NCOUNTERS; f++)
            t->all[f] += get(&px->workers[i].st.all[f]);
}

static void emit_rusage(px_stat_fn emit, void *ctx)
{
    struct rusage ru;
    char text[32];

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return;
    snprintf(text, sizeof(text), "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    emit(ctx, "rusage_user", text);
    snprintf(text, sizeof(text), "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    emit(ctx, "rusage_system", text);
}

/* The connection limit: -c, or without it the descriptors the process may
 * open (0 would make a dashboard's used/limit ratio infinite). */
static uint64_t max_connections(const struct proxy *px)
{
    struct rlimit rl;

    if (px->opt.max_conns > 0)
        return (uint64_t)px->opt.max_conns;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return (uint64_t)rl.rlim_cur;
    return 0;
}

/* ---- the servers' totals ---- */

static const char *const total_names[PX_TOTALS] = {
    [PX_TOTAL_LIMIT_MAXBYTES] = "limit_maxbytes",
    [PX_TOTAL_BYTES] = "bytes",
    [PX_TOTAL_CURR_ITEMS] = "curr_items",
    [PX_TOTAL_TOTAL_ITEMS] = "total_items",
    [PX_TOTAL_EXPIRED_UNFETCHED] = "expired_unfetched",
    [PX_TOTAL_EVICTED_UNFETCHED] = "evicted_unfetched",
    [PX_TOTAL_EVICTIONS] = "evictions",
    [PX_TOTAL_RECLAIMED] = "reclaimed",
};

static int total_index(const char *name, size_t n)
{
    for (int i = 0; i < PX_TOTALS; i++)
        if (strlen(total_names[i]) == n && memcmp(total_names[i], name, n) == 0)
            return i;
    return -1;
}

bool px_stats_wants_totals(const struct px_worker *w, const char *arg, size_t n)
{
    return w->map->n > 0 && px_stats_group_of(arg, n) == PX_STATS_GENERAL;
}

bool px_stats_fan_out(struct px_req *rq)
{
    struct px_worker *w = rq->c->w;
    int64_t wait_until = px_now_ms() + PX_STATS_WAIT_MS;

    rq->stats_due_ms = wait_until;
    rq->stats_next = w->stats_reqs;
    rq->stats_listed = true;
    w->stats_reqs = rq;
    for (size_t i = 0; i < w->map->n; i++) {
        struct px_op *op = px_op_new(rq, BIN_OP_STAT, NULL, 0, NULL, 0, NULL, 0, 0);
        if (op == NULL)
            return false;
        op->fanout = (int)i;
        /* not sent again once it may have reached its server: a map
         * changed meanwhile could count a server twice */
        op->retry_lost = false;
        op->uncounted = true;           /* the proxy's own: no client's command */
        if (op->deadline_ms > wait_until)
            op->deadline_ms = wait_until;
    }
    return true;
}

/* op->stat_values: the PX_TOTALS summed figures, then the server's map
 * epoch (kept as the newest, not summed). */
#define STAT_EPOCH PX_TOTALS

/* Kept in op->stat_values; a value that is not a number is not kept. */
void px_stats_collect(struct px_op *op, const char *name, size_t nname, const char *value,
                      size_t nvalue)
{
    static const char epoch_name[] = "cluster_epoch";
    int i = total_index(name, nname);
    if (i < 0 && nname == sizeof(epoch_name) - 1 && memcmp(name, epoch_name, nname) == 0)
        i = STAT_EPOCH;
    if (i < 0 || nvalue == 0 || nvalue > 20)
        return;
    uint64_t v = 0;
    for (size_t k = 0; k < nvalue; k++) {
        uint64_t d = (uint64_t)(value[k] - '0');
        if (value[k] < '0' || value[k] > '9' || v > (UINT64_MAX - d) / 10)
            return;
        v = v * 10 + d;
    }
    if (op->stat_values == NULL &&
        (op->stat_values = calloc(STAT_EPOCH + 1, sizeof(*op->stat_values))) == NULL)
        return;
    op->stat_values[i] = v;
}

void px_stats_forget(struct px_op *op)
{
    if (op->stat_values != NULL)
        memset(op->stat_values, 0, (STAT_EPOCH + 1) * sizeof(*op->stat_values));
}

void px_stats_unlist(struct px_worker *w, struct px_req *rq)
{
    if (!rq->stats_listed)
        return;
    for (struct px_req **p = &w->stats_reqs; *p != NULL; p = &(*p)->stats_next)
        if (*p == rq) {
            *p = rq->stats_next;
            break;
        }
    rq->stats_listed = false;
    rq->stats_next = NULL;
}

/* The ops of rq that have not answered leave it: one in flight (at a
 * server, or deferred behind meta commands) is freed when its reply or
 * failure comes (req NULL), one waiting to be tried again now. */
static void stats_give_up_late(struct px_worker *w, struct px_req *rq)
{
    unsigned late = 0;

    for (unsigned i = 0; i < rq->nops; i++) {
        struct px_op *op = rq->ops[i];
        if (op == NULL || op->state == OP_DONE)
            continue;
        rq->c->held_bytes -= op->nwire;
        rq->ops[i] = NULL;
        if (op->state == OP_WAITING) {
            px_route_forget(w, op);
            px_op_free(op);
        } else {
            op->req = NULL;
        }
        late++;
    }
    if (late == 0)
        return;
    rq->pending -= late - 1;
    px_req_finish(rq);          /* every op is answered or gone: the reply */
}

void px_stats_tick(struct px_worker *w, int64_t now_ms)
{
    struct px_req *rq = w->stats_reqs;

    while (rq != NULL) {
        struct px_req *next = rq->stats_next;
        if (now_ms >= rq->stats_due_ms) {
            px_stats_unlist(w, rq);
            stats_give_up_late(w, rq);
        }
        rq = next;
    }
}

void px_stats_totals(struct px_worker *w, const struct px_req *rq, struct px_totals *t)
{
    memset(t, 0, sizeof(*t));
    for (unsigned k = 0; k < rq->nops; k++) {
        const struct px_op *op = rq->ops[k];
        t->asked++;
        if (op == NULL || op->status != BIN_STATUS_OK || op->state != OP_DONE)
            continue;
        t->answered++;
        if (op->stat_values == NULL)
            continue;
        for (int i = 0; i < PX_TOTALS; i++)
            t->v[i] += op->stat_values[i];
        if (op->stat_values[STAT_EPOCH] > t->newest_epoch)
            t->newest_epoch = op->stat_values[STAT_EPOCH];
    }
    /* A server holds a newer map: these sums followed the old one (a
     * process that served a slot may serve none now).  The next `stats`
     * sums over the new one. */
    if (t->newest_epoch > w->map->epoch)
        px_route_refresh(w, NULL, NULL, t->newest_epoch);
}

static void emit_total(const struct px_totals *t, enum px_total i, px_stat_fn emit, void *ctx)
{
    if (t != NULL)
        emit_u64(emit, ctx, total_names[i], t->v[i]);
}

/* memcached's general statistics that a proxy has, under their names and
 * in their order, then the proxy's own.  With tot, the cache's figures
 * (limit_maxbytes, bytes, curr_items, ...) are the sums over the servers
 * that answered; without, they are left out. */
static void emit_general(struct px_worker *w, const struct px_totals *tot, px_stat_fn emit,
                         void *ctx)
{
    const struct proxy *px = w->px;
    struct px_counters t;
    time_t now = time(NULL);

    sum_counters(px, &t);
    emit_u64(emit, ctx, "pid", (uint64_t)getpid());
    emit_u64(emit, ctx, "uptime", (uint64_t)((px_now_ms() - px->started) / 1000));
    emit_u64(emit, ctx, "time", (uint64_t)now);
    emit(ctx, "version", PX_VERSION);
    emit_u64(emit, ctx, "pointer_size", 8 * sizeof(void *));
    emit_rusage(emit, ctx);
    emit_u64(emit, ctx, "max_connections", max_connections(px));
    emit_u64(emit, ctx, "threads", (uint64_t)px->nworkers);
    emit_u64(emit, ctx, "curr_connections", t.curr_conns);
    emit_u64(emit, ctx, "total_connections", t.total_conns);
    emit_u64(emit, ctx, "rejected_connections", t.rejected_conns);
    emit_u64(emit, ctx, "idle_kicks", t.idle_closed);
    emit_u64(emit, ctx, "cmd_get", t.cmd_get);
    emit_u64(emit, ctx, "get_hits", t.get_hits);
    emit_u64(emit, ctx, "get_misses", t.get_misses);
    emit_u64(emit, ctx, "cmd_set", t.cmd_set);
    emit_u64(emit, ctx, "cmd_delete", t.cmd_delete);
    emit_u64(emit, ctx, "cmd_incr_decr", t.cmd_incr_decr);
    emit_u64(emit, ctx, "cmd_touch", t.cmd_touch);
    emit_u64(emit, ctx, "cmd_flush", t.cmd_flush);
    emit_u64(emit, ctx, "delete_misses", t.delete_misses);
    emit_u64(emit, ctx, "delete_hits", t.delete_hits);
    emit_u64(emit, ctx, "incr_misses", t.incr_misses);
    emit_u64(emit, ctx, "incr_hits", t.incr_hits);
    emit_u64(emit, ctx, "decr_misses", t.decr_misses);
    emit_u64(emit, ctx, "decr_hits", t.decr_hits);
    emit_u64(emit, ctx, "cas_misses", t.cas_misses);
    emit_u64(emit, ctx, "cas_hits", t.cas_hits);
    emit_u64(emit, ctx, "cas_badval", t.cas_badval);
    emit_u64(emit, ctx, "touch_hits", t.touch_hits);
    emit_u64(emit, ctx, "touch_misses", t.touch_misses);
    emit_u64(emit, ctx, "bytes_read", t.bytes_read);
    emit_u64(emit, ctx, "bytes_written", t.bytes_written);
    emit_total(tot, PX_TOTAL_LIMIT_MAXBYTES, emit, ctx);
    emit_u64(emit, ctx, "accepting_conns", 1);
    emit_u64(emit, ctx, "errors", t.errors);
    emit_u64(emit, ctx, "auth_cmds", t.auth_cmds);
    emit_u64(emit, ctx, "auth_errors", t.auth_errors);
    if (w->px->tls) {
        emit_u64(emit, ctx, "ssl_handshake_errors", tls_server_handshake_errors(w->px->tls));
        emit_u64(emit, ctx, "time_since_server_cert_refresh",
                 (uint64_t)(time(NULL) - tls_server_last_refresh(w->px->tls)));
    }
    for (int i = PX_TOTAL_BYTES; i < PX_TOTALS; i++)
        emit_total(tot, (enum px_total)i, emit, ctx);
    emit_u64(emit, ctx, "cluster_epoch", w->map->epoch);
    if (tot != NULL) {
        emit_u64(emit, ctx, "cluster_servers", tot->asked);
        emit_u64(emit, ctx, "cluster_servers_answered", tot->answered);
    }
    emit_u64(emit, ctx, "cluster_endpoints", w->map->n);
    emit_u64(emit, ctx, "routed_requests", t.routed);
    emit_u64(emit, ctx, "moved_redirects", t.redirects);
    emit_u64(emit, ctx, "map_refreshes", t.refreshes);
    emit_u64(emit, ctx, "retries", t.retries);
    emit_u64(emit, ctx, "order_waits", t.order_waits);
    emit_u64(emit, ctx, "backend_conn_failures", t.conn_failures);
    emit_u64(emit, ctx, "backend_timeouts", t.timeouts);
}

/* `stats settings`: memcached's names for what the proxy has, then its
 * own.  A value never holds a space (clients split lines on spaces). */
static void emit_settings(const struct proxy *px, px_stat_fn emit, void *ctx)
{
    const struct px_options *o = &px->opt;
    bool auth = px->auth.n > 0;

    emit_u64(emit, ctx, "maxconns", max_connections(px));
    emit_u64(emit, ctx, "tcpport", (uint64_t)o->port);
    emit_u64(emit, ctx, "udpport", 0);
    emit(ctx, "inter", o->addr != NULL && strpbrk(o->addr, " \t\r\n") == NULL ? o->addr : "NULL");
    emit(ctx, "domain_socket", o->unix_path != NULL && strpbrk(o->unix_path, " \t\r\n") == NULL
                                   ? o->unix_path : "NULL");
    char mask[8];
    snprintf(mask, sizeof(mask), "%o", (unsigned)o->unix_mask);
    emit(ctx, "umask", mask);
    emit_u64(emit, ctx, "verbosity", (uint64_t)o->verbose);
    emit_u64(emit, ctx, "num_threads", (uint64_t)px->nworkers);
    emit(ctx, "cas_enabled", "yes");
    emit(ctx, "binding_protocol", "auto-negotiate");
    emit(ctx, "auth_enabled_sasl", auth ? "yes" : "no");
    emit(ctx, "auth_enabled_ascii", auth ? "yes" : "no");
    emit_u64(emit, ctx, "item_size_max", o->item_max);
    emit(ctx, "flush_enabled", "yes");
    emit_u64(emit, ctx, "idle_timeout", (uint64_t)o->idle_timeout_s);
    emit(ctx, "proxy", "yes");
    emit_u64(emit, ctx, "server_timeout_ms", (uint64_t)o->timeout_ms);
    emit_u64(emit, ctx, "request_deadline_ms", (uint64_t)o->deadline_ms);
    emit_u64(emit, ctx, "max_attempts", (uint64_t)o->max_attempts);
    emit_u64(emit, ctx, "seeds", px->nseeds);
    emit(ctx, "server_auth", px->has_server_auth ? "yes" : "no");
    emit(ctx, "io_uring", o->no_uring ? "no" : "yes");
    emit(ctx, "ssl_enabled", o->tls ? "yes" : "no");
    if (o->tls) {
        char n[16];
        snprintf(n, sizeof(n), "%d", o->tls_cfg.verify_mode);
        emit(ctx, "ssl_verify_mode", n);
        emit(ctx, "ssl_min_version", tls_min_version_name(o->tls_cfg.min_version));
    }
}

/* "backend:<host:port>:<what>" lines for every server any worker met. */
static void emit_backends(struct proxy *px, px_stat_fn emit, void *ctx)
{
    size_t n;

    pthread_mutex_lock(&px->stats_lock);
    n = px->nbstats;
    pthread_mutex_unlock(&px->stats_lock);
    for (size_t i = 0; i < n; i++) {
        const struct px_be_stats *st = px->bstats[i];
        uint64_t h[PX_LAT_BUCKETS], total = 0;
        char name[LC_ADDR_TEXT_MAX + 40];
        for (unsigned b = 0; b < PX_LAT_BUCKETS; b++) {
            h[b] = get(&st->lat[b]);
            total += h[b];
        }
        int64_t inflight = __atomic_load_n(&st->inflight, __ATOMIC_RELAXED);
        snprintf(name, sizeof(name), "backend:%s:state", st->name);
        emit(ctx, name, get(&st->down) ? "down" : "up");
        snprintf(name, sizeof(name), "backend:%s:requests", st->name);
        emit_u64(emit, ctx, name, get(&st->requests));
        snprintf(name, sizeof(name), "backend:%s:errors", st->name);
        emit_u64(emit, ctx, name, get(&st->errors));
        snprintf(name, sizeof(name), "backend:%s:in_flight", st->name);
        emit_u64(emit, ctx, name, inflight > 0 ? (uint64_t)inflight : 0);
        snprintf(name, sizeof(name), "backend:%s:latency_p50_us", st->name);
        emit_u64(emit, ctx, name, lat_quantile(h, total, 0.50));
        snprintf(name, sizeof(name), "backend:%s:latency_p99_us", st->name);
        emit_u64(emit, ctx, name, lat_quantile(h, total, 0.99));
        snprintf(name, sizeof(name), "backend:%s:latency_max_us", st->name);
        unsigned top = 0;
        for (unsigned b = 0; b < PX_LAT_BUCKETS; b++)
            if (h[b])
                top = b;
        emit_u64(emit, ctx, name, total ? (top + 1 < PX_LAT_BUCKETS ? lat_lower(top + 1) - 1
                                                                    : lat_lower(top))
                                        : 0);
    }
}

enum px_stats_group px_stats_group_of(const char *arg, size_t n)
{
    static const struct {
        const char *name;
        enum px_stats_group g;
    } groups[] = {
        { "backends", PX_STATS_BACKENDS }, { "settings", PX_STATS_SETTINGS },
        { "items", PX_STATS_ITEMS },       { "slabs", PX_STATS_SLABS },
        { "sizes", PX_STATS_SIZES },       { "reset", PX_STATS_RESET },
    };

    if (arg == NULL || n == 0)
        return PX_STATS_GENERAL;
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (strlen(groups[i].name) == n && memcmp(groups[i].name, arg, n) == 0)
            return groups[i].g;
    return PX_STATS_UNKNOWN;
}

void px_stats_emit(struct px_worker *w, enum px_stats_group g, const struct px_totals *t,
                   px_stat_fn emit, void *ctx)
{
    switch (g) {
    case PX_STATS_GENERAL:
        emit_general(w, t, emit, ctx);
        emit_backends(w->px, emit, ctx);
        break;
    case PX_STATS_BACKENDS:
        emit_backends(w->px, emit, ctx);
        break;
    case PX_STATS_SETTINGS:
        emit_settings(w->px, emit, ctx);
        break;
    case PX_STATS_SLABS:
        /* what memcached says before it stores anything */
        emit(ctx, "active_slabs", "0");
        emit(ctx, "total_malloced", "0");
        break;
    case PX_STATS_SIZES:
        emit(ctx, "sizes_status", "disabled");
        break;
    case PX_STATS_ITEMS:
    case PX_STATS_RESET:
    case PX_STATS_UNKNOWN:
        break;
    }
}

static void zero(uint64_t *counter)
{
    __atomic_store_n(counter, 0, __ATOMIC_RELAXED);
}

void px_stats_reset(struct proxy *px)
{
    /* Workers keep counting meanwhile: an increment racing the store is
     * lost or kept, as in memcached's reset under load. */
    for (int i = 0; i < px->nworkers; i++) {
        struct px_counters *c = &px->workers[i].st;
        for (size_t f = 0; f < PX_NCOUNTERS; f++)
            if (&c->all[f] != &c->curr_conns)
                zero(&c->all[f]);
    }
    pthread_mutex_lock(&px->stats_lock);
    size_t n = px->nbstats;
    pthread_mutex_unlock(&px->stats_lock);
    for (size_t i = 0; i < n; i++) {
        struct px_be_stats *st = px->bstats[i];
        zero(&st->requests);
        zero(&st->errors);
        for (unsigned b = 0; b < PX_LAT_BUCKETS; b++)
            zero(&st->lat[b]);
    }
}

/* A binary incr/decr whose expiration is not 0xffffffff creates a missing
 * key.  memcached counts no hit when it does, and the reply does not say
 * which happened: such a success is not counted at all. */
static bool arith_may_create(const char *wire)
{
    if ((uint8_t)wire[BIN_OFF_EXTLEN] < BIN_EXTRAS_ARITH)
        return false;
    return bin_load32(wire + BIN_HEADER_LEN + 16) != 0xffffffffu;
}

void px_stats_outcome(struct px_worker *w, const char *request_wire, uint16_t status)
{
    struct px_counters *st = &w->st;
    bool hit = status == BIN_STATUS_OK, miss = status == BIN_STATUS_KEY_ENOENT;

    if (!hit && !miss && status != BIN_STATUS_KEY_EEXISTS)
        return;
    /* an op carries the loud opcode (px_bin.c, px_text.c build them so) */
    switch ((uint8_t)request_wire[BIN_OFF_OPCODE]) {
    case BIN_OP_DELETE:
        if (hit || miss)
            px_count(hit ? &st->delete_hits : &st->delete_misses, 1);
        break;
    case BIN_OP_INCREMENT:
        if (hit ? !arith_may_create(request_wire) : miss)
            px_count(hit ? &st->incr_hits : &st->incr_misses, 1);
        break;
    case BIN_OP_DECREMENT:
        if (hit ? !arith_may_create(request_wire) : miss)
            px_count(hit ? &st->decr_hits : &st->decr_misses, 1);
        break;
    case BIN_OP_TOUCH:
    case BIN_OP_GAT:
    case BIN_OP_GATK:
        if (hit || miss)
            px_count(hit ? &st->touch_hits : &st->touch_misses, 1);
        break;
    case BIN_OP_SET:
    case BIN_OP_ADD:
    case BIN_OP_REPLACE:
        /* a store with a cas value is memcached's cas command */
        if (bin_load64(request_wire + BIN_OFF_CAS) == 0)
            break;
        px_count(hit ? &st->cas_hits : miss ? &st->cas_misses : &st->cas_badval, 1);
        break;
    default:
        break;
    }
}
