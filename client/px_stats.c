/* px_stats.c - cocytus-proxy: counters, per-server latency, and `stats`.
 *
 * Every worker counts into its own struct px_counters, and into one shared
 * struct px_be_stats per server address (found by name when a worker first
 * meets the server), all with relaxed atomics, so `stats` on any connection
 * can sum them without stopping anyone: the figures are a close snapshot,
 * as memcached's are.  Latency is a histogram of 4 buckets per power of two
 * microseconds (a quantile is off by at most a quarter of its power of
 * two), from the moment an op is queued to its server until its reply is
 * read. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static void sum_counters(const struct proxy *px, struct px_counters *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < px->nworkers; i++) {
        const struct px_counters *s = &px->workers[i].st;
        t->curr_conns += get(&s->curr_conns);
        t->total_conns += get(&s->total_conns);
        t->rejected_conns += get(&s->rejected_conns);
        t->idle_closed += get(&s->idle_closed);
        t->cmd_get += get(&s->cmd_get);
        t->get_hits += get(&s->get_hits);
        t->get_misses += get(&s->get_misses);
        t->cmd_set += get(&s->cmd_set);
        t->cmd_delete += get(&s->cmd_delete);
        t->cmd_incr_decr += get(&s->cmd_incr_decr);
        t->cmd_touch += get(&s->cmd_touch);
        t->cmd_flush += get(&s->cmd_flush);
        t->errors += get(&s->errors);
        t->routed += get(&s->routed);
        t->redirects += get(&s->redirects);
        t->refreshes += get(&s->refreshes);
        t->retries += get(&s->retries);
        t->order_waits += get(&s->order_waits);
        t->conn_failures += get(&s->conn_failures);
        t->timeouts += get(&s->timeouts);
        t->auth_cmds += get(&s->auth_cmds);
        t->auth_errors += get(&s->auth_errors);
    }
}

static void emit_general(struct px_worker *w, px_stat_fn emit, void *ctx)
{
    const struct proxy *px = w->px;
    struct px_counters t;
    time_t now = time(NULL);

    sum_counters(px, &t);
    emit_u64(emit, ctx, "pid", (uint64_t)getpid());
    emit_u64(emit, ctx, "uptime", (uint64_t)((px_now_ms() - px->started) / 1000));
    emit_u64(emit, ctx, "time", (uint64_t)now);
    emit(ctx, "version", PX_VERSION);
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
    emit_u64(emit, ctx, "errors", t.errors);
    emit_u64(emit, ctx, "auth_cmds", t.auth_cmds);
    emit_u64(emit, ctx, "auth_errors", t.auth_errors);
    emit_u64(emit, ctx, "cluster_epoch", w->map->epoch);
    emit_u64(emit, ctx, "cluster_endpoints", w->map->n);
    emit_u64(emit, ctx, "routed_requests", t.routed);
    emit_u64(emit, ctx, "moved_redirects", t.redirects);
    emit_u64(emit, ctx, "map_refreshes", t.refreshes);
    emit_u64(emit, ctx, "retries", t.retries);
    emit_u64(emit, ctx, "order_waits", t.order_waits);
    emit_u64(emit, ctx, "backend_conn_failures", t.conn_failures);
    emit_u64(emit, ctx, "backend_timeouts", t.timeouts);
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

void px_stats_emit(struct px_worker *w, bool general, bool backends, px_stat_fn emit, void *ctx)
{
    if (general)
        emit_general(w, emit, ctx);
    if (backends)
        emit_backends(w->px, emit, ctx);
}
