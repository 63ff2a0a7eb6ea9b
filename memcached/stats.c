/* stats.c - the "stats" command's content: the server's own counters and
 * settings, followed by whatever the engine reports for the same group.
 * Names follow memcached's so monitoring tools keep working. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "conn_internal.h"
#include "server.h"

/* The engine's general stats, kept to be placed where memcached has them. */
#define ENGINE_STATS_MAX 64

struct engine_stats {
    int n;
    char name[ENGINE_STATS_MAX][48];
    char value[ENGINE_STATS_MAX][64];
    bool used[ENGINE_STATS_MAX];
};

static void collect_engine_stat(void *ctx, const char *name, const char *fmt, ...)
{
    struct engine_stats *es = ctx;
    if (es->n == ENGINE_STATS_MAX)
        return;
    snprintf(es->name[es->n], sizeof(es->name[0]), "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(es->value[es->n], sizeof(es->value[0]), fmt, ap);
    va_end(ap);
    es->used[es->n] = false;
    es->n++;
}

/* The engine's value of name, or "0" (a counter of memcached's that cannot
 * move here, docs/compat.md). */
static const char *engine_stat(struct engine_stats *es, const char *name)
{
    for (int i = 0; i < es->n; i++) {
        if (strcmp(es->name[i], name) == 0) {
            es->used[i] = true;
            return es->value[i];
        }
    }
    return "0";
}

static void emit_u64(eng_stat_fn emit, void *ctx, const char *name, uint64_t v)
{
    emit(ctx, name, "%llu", (unsigned long long)v);
}

/* Sizes of what the connections hold (memcached's read_buf_* and
 * response_obj_* gauges, from our connection buffers and reply slots). */
static void conn_gauges(const struct server *s, uint64_t *bufs, uint64_t *buf_bytes,
                        uint64_t *resps)
{
    *bufs = *buf_bytes = *resps = 0;
    for (const struct conn *c = s->conns; c; c = c->next) {
        (*bufs)++;
        *buf_bytes += c->rcap;
        for (const struct resp *r = c->head; r; r = r->next)
            (*resps)++;
    }
}

/* memcached 1.6.18's general stats, names and order; ours follow. */
static void general_stats(struct server *s, eng_stat_fn emit, void *ctx)
{
    const struct server_stats *st = &s->stats;
    struct engine *e = s->engine;
    static struct engine_stats es;
    es.n = 0;
    e->ops->stats(e, "", collect_engine_stat, &es);

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    time_t now = clock_wall(&s->clock);  /* memcached's "time" is its clock */
    uint64_t bufs, buf_bytes, resps;
    conn_gauges(s, &bufs, &buf_bytes, &resps);
    emit(ctx, "pid", "%ld", (long)getpid());
    emit(ctx, "uptime", "%ld", (long)(now - s->started));
    emit(ctx, "time", "%ld", (long)now);
    emit(ctx, "version", "%s", MC_VERSION_STRING);
    emit(ctx, "libevent", "%s", event_get_version());
    emit(ctx, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    emit(ctx, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    emit(ctx, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    emit(ctx, "max_connections", "%d", s->settings.max_conns);
    emit_u64(emit, ctx, "curr_connections", st->curr_conns);
    emit_u64(emit, ctx, "total_connections", st->total_conns);
    emit_u64(emit, ctx, "rejected_connections", st->rejected_conns);
    emit_u64(emit, ctx, "connection_structures", st->curr_conns);
    emit_u64(emit, ctx, "response_obj_oom", 0);
    emit_u64(emit, ctx, "response_obj_count", resps);
    emit_u64(emit, ctx, "response_obj_bytes", resps * sizeof(struct resp));
    emit_u64(emit, ctx, "read_buf_count", bufs);
    emit_u64(emit, ctx, "read_buf_bytes", buf_bytes);
    emit_u64(emit, ctx, "read_buf_bytes_free", 0);
    emit_u64(emit, ctx, "read_buf_oom", 0);
    emit_u64(emit, ctx, "reserved_fds", (uint64_t)s->nlisten);
    emit_u64(emit, ctx, "cmd_get", st->cmd_get);
    emit_u64(emit, ctx, "cmd_set", st->cmd_set);
    emit_u64(emit, ctx, "cmd_flush", st->cmd_flush);
    emit_u64(emit, ctx, "cmd_touch", st->cmd_touch);
    emit_u64(emit, ctx, "cmd_meta", st->meta_cmds);
    emit_u64(emit, ctx, "get_hits", st->get_hits);
    emit_u64(emit, ctx, "get_misses", st->get_misses);
    emit(ctx, "get_expired", "%s", engine_stat(&es, "get_expired"));
    emit(ctx, "get_flushed", "%s", engine_stat(&es, "get_flushed"));
    emit_u64(emit, ctx, "delete_misses", st->delete_misses);
    emit_u64(emit, ctx, "delete_hits", st->delete_hits);
    emit_u64(emit, ctx, "incr_misses", st->incr_misses);
    emit_u64(emit, ctx, "incr_hits", st->incr_hits);
    emit_u64(emit, ctx, "decr_misses", st->decr_misses);
    emit_u64(emit, ctx, "decr_hits", st->decr_hits);
    emit_u64(emit, ctx, "cas_misses", st->cas_misses);
    emit_u64(emit, ctx, "cas_hits", st->cas_hits);
    emit_u64(emit, ctx, "cas_badval", st->cas_badval);
    emit_u64(emit, ctx, "touch_hits", st->touch_hits);
    emit_u64(emit, ctx, "touch_misses", st->touch_misses);
    emit_u64(emit, ctx, "store_too_large", st->store_too_large);
    emit_u64(emit, ctx, "store_no_memory", st->store_no_memory);
    emit_u64(emit, ctx, "auth_cmds", st->auth_cmds);
    emit_u64(emit, ctx, "auth_errors", st->auth_errors);
    if (s->tls) {
        if (s->settings.tls.session_cache)
            emit_u64(emit, ctx, "ssl_new_sessions", tls_server_new_sessions(s->tls));
        emit_u64(emit, ctx, "ssl_handshake_errors", tls_server_handshake_errors(s->tls));
        emit_u64(emit, ctx, "time_since_server_cert_refresh",
                 (uint64_t)(time(NULL) - tls_server_last_refresh(s->tls)));
    }
    emit_u64(emit, ctx, "bytes_read", st->bytes_read);
    emit_u64(emit, ctx, "bytes_written", st->bytes_written);
    emit(ctx, "limit_maxbytes", "%s", engine_stat(&es, "limit_maxbytes"));
    emit(ctx, "accepting_conns", "%d", s->accepting ? 1 : 0);
    emit_u64(emit, ctx, "listen_disabled_num", st->listen_disabled);
    emit_u64(emit, ctx, "time_in_listen_disabled_us", 0);
    emit(ctx, "threads", "%d", 1);
    emit_u64(emit, ctx, "conn_yields", 0);
    emit(ctx, "hash_power_level", "%s", engine_stat(&es, "hash_power_level"));
    emit(ctx, "hash_bytes", "%s", engine_stat(&es, "hash_bytes"));
    emit(ctx, "hash_is_expanding", "%s", engine_stat(&es, "hash_is_expanding"));
    static const char *const slab_zero[] = {
        "slab_reassign_rescues", "slab_reassign_chunk_rescues", "slab_reassign_evictions_nomem",
        "slab_reassign_inline_reclaim", "slab_reassign_busy_items", "slab_reassign_busy_deletes",
        "slab_reassign_running", "slabs_moved", "lru_crawler_running", "lru_crawler_starts",
        "lru_maintainer_juggles",
    };
    for (size_t i = 0; i < sizeof(slab_zero) / sizeof(slab_zero[0]); i++)
        emit_u64(emit, ctx, slab_zero[i], 0);
    emit(ctx, "malloc_fails", "%s", engine_stat(&es, "malloc_fails"));
    /* watch (watch.h): events are logged where they happen, never dropped
     * before a watcher sees them (log_worker_dropped) */
    emit_u64(emit, ctx, "log_worker_dropped", 0);
    emit_u64(emit, ctx, "log_worker_written", s->watch.written);
    emit_u64(emit, ctx, "log_watcher_skipped", s->watch.skipped);
    emit_u64(emit, ctx, "log_watcher_sent", s->watch.sent);
    emit_u64(emit, ctx, "log_watchers", s->watch.watchers);
    emit_u64(emit, ctx, "unexpected_napi_ids", 0);
    emit_u64(emit, ctx, "round_robin_fallback", 0);
    emit(ctx, "bytes", "%s", engine_stat(&es, "bytes"));
    emit(ctx, "curr_items", "%s", engine_stat(&es, "curr_items"));
    emit(ctx, "total_items", "%s", engine_stat(&es, "total_items"));
    emit(ctx, "slab_global_page_pool", "%s", engine_stat(&es, "slab_global_page_pool"));
    emit(ctx, "expired_unfetched", "%s", engine_stat(&es, "expired_unfetched"));
    emit(ctx, "evicted_unfetched", "%s", engine_stat(&es, "evicted_unfetched"));
    emit(ctx, "evicted_active", "%s", engine_stat(&es, "evicted_active"));
    emit(ctx, "evictions", "%s", engine_stat(&es, "evictions"));
    emit(ctx, "reclaimed", "%s", engine_stat(&es, "reclaimed"));
    static const char *const lru_zero[] = {
        "crawler_reclaimed", "crawler_items_checked", "lrutail_reflocked", "moves_to_cold",
        "moves_to_warm", "moves_within_lru", "direct_reclaims", "lru_bumps_dropped",
    };
    for (size_t i = 0; i < sizeof(lru_zero) / sizeof(lru_zero[0]); i++)
        emit(ctx, lru_zero[i], "%s", engine_stat(&es, lru_zero[i]));
    /* Ours: the engine's other counters, then the server's. */
    for (int i = 0; i < es.n; i++)
        if (!es.used[i])
            emit(ctx, es.name[i], "%s", es.value[i]);
    emit(ctx, "role", "%s", s->settings.role);
    if (s->slotmap)     /* cocytus-proxy's `stats` finds a newer map by it */
        emit_u64(emit, ctx, "cluster_epoch", s->slotmap->epoch);
    emit_u64(emit, ctx, "idle_kicks", st->idle_kicks);     /* memcached 1.6.18 has none */
    emit_u64(emit, ctx, "migrate_moves", st->migrate_moves);
    emit_u64(emit, ctx, "migrate_keys_sent", st->migrate_keys_sent);
    emit_u64(emit, ctx, "migrate_forwards", st->migrate_forwards);
    emit_u64(emit, ctx, "import_keys", st->import_keys);
}

/* memcached's settings that mean something here, in its order; ours follow. */
static void settings_stats(struct server *s, eng_stat_fn emit, void *ctx)
{
    const struct settings *st = &s->settings;
    emit(ctx, "maxbytes", "%zu", st->mem_limit);
    emit(ctx, "maxconns", "%d", st->max_conns);
    emit(ctx, "tcpport", "%d", s->listen_unix ? st->port : s->bound_port);
    emit(ctx, "udpport", "%d", st->udp_port);
    emit(ctx, "inter", "%s", st->listen_addr ? st->listen_addr : "NULL");
    emit(ctx, "verbosity", "%d", st->verbose);
    emit(ctx, "oldest", "%d", 0);
    emit(ctx, "evictions", "%s", st->evict ? "on" : "off");
    emit(ctx, "domain_socket", "%s", st->unix_path ? st->unix_path : "NULL");
    emit(ctx, "umask", "%o", (unsigned)st->unix_mask);
    emit(ctx, "shutdown_command", "%s", st->shutdown_enabled ? "yes" : "no");
    emit(ctx, "num_threads", "%d", 1);
    emit(ctx, "stat_key_prefix", "%c", st->prefix_delimiter);
    emit(ctx, "detail_enabled", "%s", st->detail_enabled ? "yes" : "no");
    emit(ctx, "cas_enabled", "%s", st->cas_enabled ? "yes" : "no");
    emit(ctx, "tcp_backlog", "%d", st->backlog);
    emit(ctx, "binding_protocol", "%s",
         st->sasl_enabled ? "binary" : st->auth_file ? "ascii" : "auto-negotiate");
    emit(ctx, "auth_enabled_sasl", "%s", st->sasl_enabled ? "yes" : "no");
    emit(ctx, "auth_enabled_ascii", "%s", st->auth_file ? "yes" : "no");
    emit(ctx, "item_size_max", "%zu", st->item_size_max);
    emit(ctx, "maxconns_fast", "%s", "yes");
    emit(ctx, "hashpower_init", "%u", st->hashpower);
    emit(ctx, "flush_enabled", "%s", st->flush_enabled ? "yes" : "no");
    emit(ctx, "dump_enabled", "%s", st->dump_enabled ? "yes" : "no");
    emit(ctx, "idle_timeout", "%d", st->idle_timeout);
    emit(ctx, "track_sizes", "%s", st->sizes_enabled ? "yes" : "no");
    emit(ctx, "ssl_enabled", "%s", st->tls_enabled ? "yes" : "no");
    emit(ctx, "ssl_chain_cert", "%s", st->tls.chain_cert ? st->tls.chain_cert : "(null)");
    emit(ctx, "ssl_key", "%s", st->tls.key ? st->tls.key : "(null)");
    emit(ctx, "ssl_verify_mode", "%d", st->tls.verify_mode);
    emit(ctx, "ssl_keyformat", "%d", st->tls.keyformat);
    emit(ctx, "ssl_ciphers", "%s", st->tls.ciphers ? st->tls.ciphers : "NULL");
    emit(ctx, "ssl_ca_cert", "%s", st->tls.ca_cert ? st->tls.ca_cert : "NULL");
    emit(ctx, "ssl_wbuf_size", "%zu", st->tls.wbuf_size);
    emit(ctx, "ssl_session_cache", "%s", st->tls.session_cache ? "yes" : "no");
    emit(ctx, "ssl_kernel_tls", "%s", "no");
    emit(ctx, "ssl_min_version", "%s", tls_min_version_name(st->tls.min_version));
    emit(ctx, "memory_file", "%s", st->memory_file ? st->memory_file : "(null)");
    emit(ctx, "role", "%s", st->role);
}

/* ---- stats detail: counts per key prefix ---- */

struct prefix_entry {
    char *prefix;
    size_t len;
    uint64_t gets, hits, sets, dels;
    struct prefix_entry *next;      /* in order of first use */
    struct prefix_entry *hnext;     /* hash chain */
};

#define PREFIX_BUCKETS 1024

struct prefix_stats {
    struct prefix_entry *bucket[PREFIX_BUCKETS];
    struct prefix_entry *first, *last;
};

static struct prefix_entry *prefix_find(struct server *s, const char *key, size_t nkey)
{
    if (!s->settings.detail_enabled)
        return NULL;
    const char *d = memchr(key, s->settings.prefix_delimiter, nkey);
    if (!d)
        return NULL;            /* memcached counts only keys with a prefix */
    size_t len = (size_t)(d - key);
    if (!s->prefixes && !(s->prefixes = calloc(1, sizeof(*s->prefixes))))
        return NULL;
    struct prefix_stats *ps = s->prefixes;
    unsigned h = 5381;
    for (size_t i = 0; i < len; i++)
        h = h * 33 + (unsigned char)key[i];
    h %= PREFIX_BUCKETS;
    for (struct prefix_entry *p = ps->bucket[h]; p; p = p->hnext)
        if (p->len == len && memcmp(p->prefix, key, len) == 0)
            return p;
    struct prefix_entry *p = calloc(1, sizeof(*p));
    if (!p || !(p->prefix = malloc(len + 1))) {
        free(p);
        return NULL;
    }
    memcpy(p->prefix, key, len);
    p->prefix[len] = '\0';
    p->len = len;
    if (ps->last)
        ps->last->next = p;
    else
        ps->first = p;
    ps->last = p;
    p->hnext = ps->bucket[h];
    ps->bucket[h] = p;
    return p;
}

void prefix_stats_get(struct server *s, const char *key, size_t nkey, bool hit)
{
    struct prefix_entry *p = prefix_find(s, key, nkey);
    if (p) {
        p->gets++;
        p->hits += hit;
    }
}

void prefix_stats_set(struct server *s, const char *key, size_t nkey)
{
    struct prefix_entry *p = prefix_find(s, key, nkey);
    if (p)
        p->sets++;
}

void prefix_stats_delete(struct server *s, const char *key, size_t nkey)
{
    struct prefix_entry *p = prefix_find(s, key, nkey);
    if (p)
        p->dels++;
}

void prefix_stats_dump(struct server *s, eng_write_fn write, void *ctx)
{
    if (s->prefixes) {
        for (struct prefix_entry *p = s->prefixes->first; p; p = p->next) {
            char line[128];
            int n = snprintf(line, sizeof(line), " get %llu hit %llu set %llu del %llu\r\n",
                             (unsigned long long)p->gets, (unsigned long long)p->hits,
                             (unsigned long long)p->sets, (unsigned long long)p->dels);
            write(ctx, "PREFIX ", 7);
            write(ctx, p->prefix, p->len);
            write(ctx, line, (size_t)n);
        }
    }
    write(ctx, "END\r\n", 5);
}

void prefix_stats_free(struct server *s)
{
    if (!s->prefixes)
        return;
    struct prefix_entry *p = s->prefixes->first;
    while (p) {
        struct prefix_entry *next = p->next;
        free(p->prefix);
        free(p);
        p = next;
    }
    free(s->prefixes);
    s->prefixes = NULL;
}

void engine_vreply(eng_write_fn write, void *ctx, const char *fmt, va_list ap)
{
    char line[512];
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    if (n > 0)
        write(ctx, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

void engine_reply(eng_write_fn write, void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vreply(write, ctx, fmt, ap);
    va_end(ap);
}

uint64_t engine_process_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

bool server_stats(struct server *s, const char *group, eng_stat_fn emit, void *ctx)
{
    struct engine *e = s->engine;
    if (group[0] == '\0') {
        general_stats(s, emit, ctx);
        return true;
    }
    if (strcmp(group, "settings") == 0) {
        settings_stats(s, emit, ctx);
        e->ops->stats(e, "settings", emit, ctx);
        return true;
    }
    return e->ops->stats(e, group, emit, ctx);
}

void server_stats_reset(struct server *s)
{
    prefix_stats_free(s);
    struct server_stats *st = &s->stats;
    /* Connection gauges are current state, not counters. */
    uint64_t curr = st->curr_conns;
    memset(st, 0, sizeof(*st));
    st->curr_conns = curr;
    s->engine->ops->stats_reset(s->engine);
}
