/* proxy.c - cocytus-proxy: a memcached front end (ASCII and binary
 * protocol, chosen per connection by its first byte) that routes every
 * request through libcocytus, so any memcached client can use a Cocytus-KV
 * cluster.
 *
 * Worker threads, as memcached has: the main thread accepts connections and
 * hands each to a worker in turn; a worker runs its own libevent loop with
 * its own libcocytus client (a client is not thread-safe) and serves its
 * connections' requests one at a time with blocking library calls, so a
 * slow request (a retry while a slot moves) holds up only that worker's
 * connections.  Requests are parsed with the server's own pure parsers
 * (text_parse(), bin_parse_request()); replies keep request order.  A
 * connection whose unsent output passes OUT_HIGH stops being read until it
 * drains.  Counters are per worker, updated with relaxed atomics so that
 * `stats` on any connection can sum them.
 *
 * Every worker's client gets the same options (--timeout, --attempts,
 * --deadline-ms), so a request rides through a server failure as the
 * library does: retried until the deadline while the cluster hands the
 * dead server's slots to another process.  A failure the library reports
 * (a non-idempotent command whose connection was lost, the deadline
 * passed) is answered as "SERVER_ERROR <why>" in ASCII, or with status
 * 0x0084 (internal error) and the text in binary; the client's connection
 * stays open. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "bin_wire.h"
#include "libcocytus.h"
#include "proto_bin.h"
#include "proto_text.h"

#define PROXY_VERSION "1.6.18-cocytus-proxy-" PACKAGE_VERSION
#define DEFAULT_PORT 11211
#define DEFAULT_ITEM_MAX (1u << 20)
#define DEFAULT_CONNECT_WAIT_S 10
#define DEFAULT_THREADS 4
#define MAX_THREADS 64
#define OUT_HIGH (4u << 20)           /* stop reading a connection above this much output */
#define ERR_TEXT_MAX 200

struct proxy_stats {
    uint64_t curr_conns, total_conns;
    uint64_t cmd_get, get_hits, get_misses;
    uint64_t cmd_set, cmd_delete, cmd_incr_decr, cmd_touch, cmd_flush;
    uint64_t errors;
};

/* The library's counters of a worker's client, copied after every batch of
 * requests so that other threads can read them. */
struct lib_snapshot {
    uint64_t requests, redirects, refreshes, retries, conn_failures;
};

struct worker;

struct proxy {
    struct event_base *base;            /* the accepting thread's loop */
    struct evconnlistener *listener;
    struct worker *workers;
    int nworkers;
    int next_worker;                    /* round-robin hand-off */
    size_t item_max;
    time_t started;
    int verbose;
};

/* One serving thread: its loop, its client, its connections' counters. */
struct worker {
    struct proxy *px;
    int id;
    struct event_base *base;
    cocytus_t *client;
    int notify[2];                      /* main -> worker: accepted fds, -1 = stop */
    struct event *notify_ev;
    pthread_t thread;
    bool started;
    struct proxy_stats st;
    struct lib_snapshot lib;
};

enum proto { PROTO_UNKNOWN, PROTO_TEXT, PROTO_BINARY };

struct pconn {
    struct worker *w;
    struct bufferevent *bev;
    enum proto proto;
    size_t swallow;       /* input bytes still to discard (refused data blocks) */
    bool closing;         /* close once the output is written */
};

/* What handling one request asks of the connection. */
enum step { STEP_NEED_MORE, STEP_OK, STEP_CLOSE };

struct options {
    const char *addr;
    int port;
    const char *seeds;
    cocytus_options_t lib;
    size_t item_max;
    int wait_s;
    int verbose;
    int threads;
};

/* ------------------------------------------------------------------ */
/* Shared helpers                                                      */
/* ------------------------------------------------------------------ */

static void stat_add(uint64_t *counter, uint64_t n)
{
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static uint64_t stat_read(const uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* The library's last error as one safe line (no CR/LF), for replies. */
static void error_text(const struct worker *w, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", cocytus_last_error(w->client));
    for (char *p = buf; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
}

/* ------------------------------------------------------------------ */
/* ASCII protocol                                                      */
/* ------------------------------------------------------------------ */

static void text_line(struct evbuffer *out, const char *line, bool noreply)
{
    if (noreply)
        return;
    evbuffer_add(out, line, strlen(line));
    evbuffer_add(out, "\r\n", 2);
}

/* The reply line for a failure the command has no own word for. */
static void text_failure(struct pconn *pc, struct evbuffer *out, cocytus_rc r, bool noreply)
{
    char msg[ERR_TEXT_MAX];

    stat_add(&pc->w->st.errors, 1);
    if (noreply)
        return;
    switch (r) {
    case COCYTUS_NOT_FOUND:
        text_line(out, "NOT_FOUND", false);
        return;
    case COCYTUS_NOT_STORED:
        text_line(out, "NOT_STORED", false);
        return;
    case COCYTUS_EXISTS:
        text_line(out, "EXISTS", false);
        return;
    case COCYTUS_TOO_LARGE:
        text_line(out, "SERVER_ERROR object too large for cache", false);
        return;
    case COCYTUS_NO_MEMORY:
        text_line(out, "SERVER_ERROR out of memory storing object", false);
        return;
    case COCYTUS_NON_NUMERIC:
        text_line(out, "CLIENT_ERROR cannot increment or decrement non-numeric value", false);
        return;
    case COCYTUS_INVALID:
        text_line(out, "CLIENT_ERROR bad command line format", false);
        return;
    default:
        error_text(pc->w, msg, sizeof(msg));
        evbuffer_add_printf(out, "SERVER_ERROR %s: %s\r\n", cocytus_strerror(r), msg);
        return;
    }
}

static void text_value(struct evbuffer *out, const char *key, size_t nkey,
                       const cocytus_item_t *it, bool with_cas)
{
    if (with_cas)
        evbuffer_add_printf(out, "VALUE %.*s %" PRIu32 " %zu %" PRIu64 "\r\n", (int)nkey, key,
                            it->flags, it->nvalue, it->cas);
    else
        evbuffer_add_printf(out, "VALUE %.*s %" PRIu32 " %zu\r\n", (int)nkey, key, it->flags,
                            it->nvalue);
    evbuffer_add(out, it->value, it->nvalue);
    evbuffer_add(out, "\r\n", 2);
}

struct value_sink {
    struct evbuffer *out;
    bool with_cas;
    uint64_t hits;
};

static void sink_value(void *ctx, const char *key, size_t nkey, const cocytus_item_t *it)
{
    struct value_sink *s = ctx;
    text_value(s->out, key, nkey, it, s->with_cas);
    s->hits++;
}

static size_t count_keys(const struct text_req *rq)
{
    const char *p = rq->keys, *end = rq->keys + rq->nkeys_len, *key;
    size_t nkey, n = 0;

    while (text_next_key(&p, end, &key, &nkey))
        n++;
    return n;
}

/* get/gets of several keys: one multi-get per owner. */
static cocytus_rc text_mget(struct pconn *pc, const struct text_req *rq, struct value_sink *s,
                            size_t n)
{
    const char **keys = malloc(n * sizeof(*keys));
    size_t *lens = malloc(n * sizeof(*lens));
    cocytus_rc r = COCYTUS_NO_MEMORY;

    if (keys != NULL && lens != NULL) {
        const char *p = rq->keys, *end = rq->keys + rq->nkeys_len;
        for (size_t i = 0; i < n; i++)
            text_next_key(&p, end, &keys[i], &lens[i]);
        r = cocytus_mget(pc->w->client, keys, lens, n, sink_value, s);
    }
    free(keys);
    free(lens);
    return r;
}

static void text_get(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    struct value_sink s = { out, rq->cmd == TC_GETS, 0 };
    size_t n = count_keys(rq);
    cocytus_rc r;

    if (n == 1) {
        cocytus_item_t it;
        r = cocytus_get(pc->w->client, rq->key, rq->nkey, &it);
        if (r == COCYTUS_OK)
            sink_value(&s, rq->key, rq->nkey, &it);
        cocytus_item_free(&it);
        if (r == COCYTUS_NOT_FOUND)
            r = COCYTUS_OK;
    } else {
        r = text_mget(pc, rq, &s, n);
    }
    stat_add(&pc->w->st.cmd_get, n);
    stat_add(&pc->w->st.get_hits, s.hits);
    stat_add(&pc->w->st.get_misses, n - s.hits);
    if (r == COCYTUS_OK)
        text_line(out, "END", false);
    else
        text_failure(pc, out, r, false);
}

static void text_gat(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    const char *p = rq->keys, *end = rq->keys + rq->nkeys_len, *key;
    size_t nkey;

    while (text_next_key(&p, end, &key, &nkey)) {
        cocytus_item_t it;
        cocytus_rc r = cocytus_gat(pc->w->client, key, nkey, rq->exptime, &it);
        stat_add(&pc->w->st.cmd_get, 1);
        stat_add(&pc->w->st.cmd_touch, 1);
        if (r == COCYTUS_OK) {
            text_value(out, key, nkey, &it, rq->cmd == TC_GATS);
            stat_add(&pc->w->st.get_hits, 1);
        } else {
            stat_add(&pc->w->st.get_misses, 1);
        }
        cocytus_item_free(&it);
        if (r != COCYTUS_OK && r != COCYTUS_NOT_FOUND) {
            text_failure(pc, out, r, false);
            return;
        }
    }
    text_line(out, "END", false);
}

static cocytus_store_op text_store_op(enum text_cmd cmd)
{
    switch (cmd) {
    case TC_ADD:     return COCYTUS_ADD;
    case TC_REPLACE: return COCYTUS_REPLACE;
    case TC_APPEND:  return COCYTUS_APPEND;
    case TC_PREPEND: return COCYTUS_PREPEND;
    case TC_CAS:     return COCYTUS_CAS;
    default:         return COCYTUS_SET;
    }
}

static void text_store(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_store(pc->w->client, text_store_op(rq->cmd), rq->key, rq->nkey,
                                 rq->data, (size_t)rq->vlen, rq->flags, rq->exptime, rq->cas,
                                 NULL);
    stat_add(&pc->w->st.cmd_set, 1);
    if (r == COCYTUS_OK)
        text_line(out, "STORED", rq->noreply);
    else
        text_failure(pc, out, r, rq->noreply);
}

static void text_delete(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_delete(pc->w->client, rq->key, rq->nkey);

    stat_add(&pc->w->st.cmd_delete, 1);
    if (r == COCYTUS_OK)
        text_line(out, "DELETED", rq->noreply);
    else
        text_failure(pc, out, r, rq->noreply);
}

static void text_arith(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    uint64_t value = 0;
    cocytus_rc r = rq->cmd == TC_INCR
        ? cocytus_incr(pc->w->client, rq->key, rq->nkey, rq->delta, &value)
        : cocytus_decr(pc->w->client, rq->key, rq->nkey, rq->delta, &value);

    stat_add(&pc->w->st.cmd_incr_decr, 1);
    if (r != COCYTUS_OK)
        text_failure(pc, out, r, rq->noreply);
    else if (!rq->noreply)
        evbuffer_add_printf(out, "%" PRIu64 "\r\n", value);
}

static void text_touch(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_touch(pc->w->client, rq->key, rq->nkey, rq->exptime);

    stat_add(&pc->w->st.cmd_touch, 1);
    if (r == COCYTUS_OK)
        text_line(out, "TOUCHED", rq->noreply);
    else
        text_failure(pc, out, r, rq->noreply);
}

static void text_flush(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_flush_all(pc->w->client, rq->exptime);

    stat_add(&pc->w->st.cmd_flush, 1);
    if (r == COCYTUS_OK)
        text_line(out, "OK", rq->noreply);
    else
        text_failure(pc, out, r, rq->noreply);
}

/* Calls emit(ctx, name, value) for every statistic the proxy reports. */
typedef void (*stat_fn)(void *ctx, const char *name, const char *value);

static void emit_u64(stat_fn emit, void *ctx, const char *name, uint64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    emit(ctx, name, text);
}

/* Sums the counters of every worker (they keep changing meanwhile: the sum is
 * a close snapshot, as memcached's stats are). */
static void sum_stats(const struct proxy *px, struct proxy_stats *st, struct lib_snapshot *lib)
{
    memset(st, 0, sizeof(*st));
    memset(lib, 0, sizeof(*lib));
    for (int i = 0; i < px->nworkers; i++) {
        const struct worker *w = &px->workers[i];
        st->curr_conns += stat_read(&w->st.curr_conns);
        st->total_conns += stat_read(&w->st.total_conns);
        st->cmd_get += stat_read(&w->st.cmd_get);
        st->get_hits += stat_read(&w->st.get_hits);
        st->get_misses += stat_read(&w->st.get_misses);
        st->cmd_set += stat_read(&w->st.cmd_set);
        st->cmd_delete += stat_read(&w->st.cmd_delete);
        st->cmd_incr_decr += stat_read(&w->st.cmd_incr_decr);
        st->cmd_touch += stat_read(&w->st.cmd_touch);
        st->cmd_flush += stat_read(&w->st.cmd_flush);
        st->errors += stat_read(&w->st.errors);
        lib->requests += stat_read(&w->lib.requests);
        lib->redirects += stat_read(&w->lib.redirects);
        lib->refreshes += stat_read(&w->lib.refreshes);
        lib->retries += stat_read(&w->lib.retries);
        lib->conn_failures += stat_read(&w->lib.conn_failures);
    }
}

/* Publishes the worker's library counters for sum_stats(). */
static void snapshot_lib(struct worker *w)
{
    cocytus_stats_t ls;

    cocytus_get_stats(w->client, &ls);
    __atomic_store_n(&w->lib.requests, ls.requests, __ATOMIC_RELAXED);
    __atomic_store_n(&w->lib.redirects, ls.redirects, __ATOMIC_RELAXED);
    __atomic_store_n(&w->lib.refreshes, ls.refreshes, __ATOMIC_RELAXED);
    __atomic_store_n(&w->lib.retries, ls.retries, __ATOMIC_RELAXED);
    __atomic_store_n(&w->lib.conn_failures, ls.conn_failures, __ATOMIC_RELAXED);
}

/* The statistics, as seen from worker w (the map is w's client's). */
static void proxy_stats(struct worker *w, stat_fn emit, void *ctx)
{
    const struct proxy *px = w->px;
    struct proxy_stats st;
    struct lib_snapshot lib;
    time_t now = time(NULL);

    snapshot_lib(w);
    sum_stats(px, &st, &lib);
    emit_u64(emit, ctx, "pid", (uint64_t)getpid());
    emit_u64(emit, ctx, "uptime", (uint64_t)(now - px->started));
    emit_u64(emit, ctx, "time", (uint64_t)now);
    emit(ctx, "version", PROXY_VERSION);
    emit_u64(emit, ctx, "threads", (uint64_t)px->nworkers);
    emit_u64(emit, ctx, "curr_connections", st.curr_conns);
    emit_u64(emit, ctx, "total_connections", st.total_conns);
    emit_u64(emit, ctx, "cmd_get", st.cmd_get);
    emit_u64(emit, ctx, "get_hits", st.get_hits);
    emit_u64(emit, ctx, "get_misses", st.get_misses);
    emit_u64(emit, ctx, "cmd_set", st.cmd_set);
    emit_u64(emit, ctx, "cmd_delete", st.cmd_delete);
    emit_u64(emit, ctx, "cmd_incr_decr", st.cmd_incr_decr);
    emit_u64(emit, ctx, "cmd_touch", st.cmd_touch);
    emit_u64(emit, ctx, "cmd_flush", st.cmd_flush);
    emit_u64(emit, ctx, "errors", st.errors);
    emit_u64(emit, ctx, "cluster_epoch", cocytus_epoch(w->client));
    emit_u64(emit, ctx, "cluster_endpoints", cocytus_endpoint_count(w->client));
    emit_u64(emit, ctx, "routed_requests", lib.requests);
    emit_u64(emit, ctx, "moved_redirects", lib.redirects);
    emit_u64(emit, ctx, "map_refreshes", lib.refreshes);
    emit_u64(emit, ctx, "retries", lib.retries);
    emit_u64(emit, ctx, "backend_conn_failures", lib.conn_failures);
}

static void text_stat_line(void *ctx, const char *name, const char *value)
{
    evbuffer_add_printf(ctx, "STAT %s %s\r\n", name, value);
}

static void text_stats(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    if (rq->arg != NULL && rq->narg > 0) {
        text_line(out, "ERROR", false);     /* no stats groups behind a proxy */
        return;
    }
    proxy_stats(pc->w, text_stat_line, out);
    text_line(out, "END", false);
}

static enum step text_dispatch(struct pconn *pc, const struct text_req *rq, struct evbuffer *out)
{
    switch (rq->cmd) {
    case TC_GET: case TC_GETS:
        text_get(pc, rq, out);
        break;
    case TC_GAT: case TC_GATS:
        text_gat(pc, rq, out);
        break;
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
        text_store(pc, rq, out);
        break;
    case TC_DELETE:
        text_delete(pc, rq, out);
        break;
    case TC_INCR: case TC_DECR:
        text_arith(pc, rq, out);
        break;
    case TC_TOUCH:
        text_touch(pc, rq, out);
        break;
    case TC_FLUSH_ALL:
        text_flush(pc, rq, out);
        break;
    case TC_VERSION:
        text_line(out, "VERSION " PROXY_VERSION, false);
        break;
    case TC_VERBOSITY:
        text_line(out, "OK", rq->noreply);
        break;
    case TC_STATS:
        text_stats(pc, rq, out);
        break;
    case TC_QUIT:
        return STEP_CLOSE;
    case TC_SHUTDOWN:
        text_line(out, "ERROR: shutdown not enabled", false);
        break;
    case TC_ADMIN:
    case TC_NONE:
        text_line(out, "ERROR", false);
        break;
    }
    return STEP_OK;
}

static enum step text_step(struct pconn *pc, const char *buf, size_t len, struct evbuffer *out,
                           size_t *used)
{
    struct text_req rq;

    switch (text_parse(buf, len, pc->w->px->item_max, &rq)) {
    case TP_NEED_MORE:
        return STEP_NEED_MORE;
    case TP_CLOSE:
        return STEP_CLOSE;
    case TP_ERROR:
        text_line(out, rq.error, rq.noreply);
        *used = rq.total;
        pc->swallow = rq.swallow;
        return STEP_OK;
    case TP_OK:
        break;
    }
    *used = rq.total;
    return text_dispatch(pc, &rq, out);
}

/* ------------------------------------------------------------------ */
/* Binary protocol                                                     */
/* ------------------------------------------------------------------ */

static void bin_header(struct evbuffer *out, const struct bin_request *rq, uint16_t status,
                       uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    char h[BIN_HEADER_LEN];

    h[BIN_OFF_MAGIC] = (char)BIN_MAGIC_RESPONSE;
    h[BIN_OFF_OPCODE] = (char)rq->hdr.opcode;
    bin_store16(h + BIN_OFF_KEYLEN, keylen);
    h[BIN_OFF_EXTLEN] = (char)extlen;
    h[BIN_OFF_DATATYPE] = BIN_DATATYPE_RAW;
    bin_store16(h + BIN_OFF_STATUS, status);
    bin_store32(h + BIN_OFF_BODYLEN, bodylen);
    bin_store32(h + BIN_OFF_OPAQUE, rq->hdr.opaque);
    bin_store64(h + BIN_OFF_CAS, cas);
    evbuffer_add(out, h, sizeof(h));
}

static void bin_ok(struct evbuffer *out, const struct bin_request *rq, uint64_t cas)
{
    bin_header(out, rq, BIN_STATUS_OK, 0, 0, 0, cas);
}

static const char *bin_status_message(uint16_t status)
{
    switch (status) {
    case BIN_STATUS_KEY_ENOENT:      return "Not found";
    case BIN_STATUS_KEY_EEXISTS:     return "Data exists for key.";
    case BIN_STATUS_E2BIG:           return "Too large.";
    case BIN_STATUS_EINVAL:          return "Invalid arguments";
    case BIN_STATUS_NOT_STORED:      return "Not stored.";
    case BIN_STATUS_DELTA_BADVAL:    return "Non-numeric server-side value for incr or decr";
    case BIN_STATUS_UNKNOWN_COMMAND: return "Unknown command";
    case BIN_STATUS_ENOMEM:          return "Out of memory";
    default:                         return "Internal error";
    }
}

static void bin_error(struct evbuffer *out, const struct bin_request *rq, uint16_t status,
                      const char *msg)
{
    size_t n = strlen(msg);
    bin_header(out, rq, status, 0, 0, (uint32_t)n, 0);
    evbuffer_add(out, msg, n);
}

static void bin_status(struct evbuffer *out, const struct bin_request *rq, uint16_t status)
{
    bin_error(out, rq, status, bin_status_message(status));
}

static bool is_quiet(const struct bin_request *rq)
{
    return bin_opcode_is_quiet(rq->hdr.opcode);
}

/* The engine outcome a library result stands for, so the server's own
 * status rules (bin_status_from_engine) answer binary clients. */
static eng_status engine_status_of(cocytus_rc r)
{
    switch (r) {
    case COCYTUS_OK:
        return ENG_SUCCESS;
    case COCYTUS_NOT_FOUND:
        return ENG_NOT_FOUND;
    case COCYTUS_NOT_STORED:
        return ENG_NOT_STORED;
    case COCYTUS_EXISTS:
        return ENG_EXISTS;
    case COCYTUS_TOO_LARGE:
        return ENG_TOO_LARGE;
    case COCYTUS_NON_NUMERIC:
        return ENG_NON_NUMERIC;
    case COCYTUS_NO_MEMORY:
        return ENG_NO_MEMORY;
    default:
        return ENG_FAILED;
    }
}

/* The status for a library outcome of a request with this opcode. */
static uint16_t bin_status_for(cocytus_rc r, uint8_t opcode)
{
    if (r == COCYTUS_INVALID)
        return BIN_STATUS_EINVAL;
    return bin_status_from_engine(engine_status_of(r), opcode);
}

/* An error reply for a library outcome; internal errors carry the text. */
static void bin_failure(struct pconn *pc, struct evbuffer *out, const struct bin_request *rq,
                        cocytus_rc r)
{
    uint16_t status = bin_status_for(r, rq->hdr.opcode);
    char msg[ERR_TEXT_MAX];

    stat_add(&pc->w->st.errors, 1);
    if (status != BIN_STATUS_INTERNAL_ERROR) {
        bin_status(out, rq, status);
        return;
    }
    error_text(pc->w, msg, sizeof(msg));
    bin_error(out, rq, status, msg);
}

/* The item's current cas, for replies that must carry one. */
static uint64_t current_cas(struct pconn *pc, const struct bin_request *rq)
{
    cocytus_item_t it;
    uint64_t cas = 0;

    if (cocytus_get(pc->w->client, rq->key, rq->nkey, &it) == COCYTUS_OK)
        cas = it.cas;
    cocytus_item_free(&it);
    return cas;
}

static void bin_value(struct evbuffer *out, const struct bin_request *rq, bool with_key,
                      const cocytus_item_t *it)
{
    uint16_t keylen = with_key ? (uint16_t)rq->nkey : 0;
    char flags[BIN_EXTRAS_GET];

    bin_header(out, rq, BIN_STATUS_OK, BIN_EXTRAS_GET, keylen,
               (uint32_t)(BIN_EXTRAS_GET + keylen + it->nvalue), it->cas);
    bin_store32(flags, it->flags);
    evbuffer_add(out, flags, sizeof(flags));
    evbuffer_add(out, rq->key, keylen);
    evbuffer_add(out, it->value, it->nvalue);
}

static void bin_miss(struct evbuffer *out, const struct bin_request *rq, bool with_key)
{
    if (!with_key) {
        bin_status(out, rq, BIN_STATUS_KEY_ENOENT);
        return;
    }
    bin_header(out, rq, BIN_STATUS_KEY_ENOENT, 0, (uint16_t)rq->nkey, (uint32_t)rq->nkey, 0);
    evbuffer_add(out, rq->key, rq->nkey);
}

/* get, getq, getk, getkq, gat, gatq, gatk, gatkq. */
static void bin_get(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    uint8_t op = rq->hdr.opcode;
    bool with_key = op == BIN_OP_GETK || op == BIN_OP_GETKQ ||
                    op == BIN_OP_GATK || op == BIN_OP_GATKQ;
    bool gat = op == BIN_OP_GAT || op == BIN_OP_GATQ || op == BIN_OP_GATK || op == BIN_OP_GATKQ;
    cocytus_item_t it;
    cocytus_rc r;

    if (gat)
        r = cocytus_gat(pc->w->client, rq->key, rq->nkey, bin_load32(rq->extras), &it);
    else
        r = cocytus_get(pc->w->client, rq->key, rq->nkey, &it);
    stat_add(&pc->w->st.cmd_get, 1);
    if (r == COCYTUS_OK) {
        stat_add(&pc->w->st.get_hits, 1);
        bin_value(out, rq, with_key, &it);
    } else if (r == COCYTUS_NOT_FOUND) {
        stat_add(&pc->w->st.get_misses, 1);
        if (!is_quiet(rq))
            bin_miss(out, rq, with_key);
    } else {
        bin_failure(pc, out, rq, r);
    }
    cocytus_item_free(&it);
}

/* A set/replace carrying a cas is a cas; add ignores it (as memcached does). */
static cocytus_store_op bin_store_op(const struct bin_request *rq)
{
    switch (rq->hdr.opcode) {
    case BIN_OP_ADD: case BIN_OP_ADDQ:
        return COCYTUS_ADD;
    case BIN_OP_REPLACE: case BIN_OP_REPLACEQ:
        return rq->hdr.cas != 0 ? COCYTUS_CAS : COCYTUS_REPLACE;
    case BIN_OP_APPEND: case BIN_OP_APPENDQ:
        return COCYTUS_APPEND;
    case BIN_OP_PREPEND: case BIN_OP_PREPENDQ:
        return COCYTUS_PREPEND;
    default:
        return rq->hdr.cas != 0 ? COCYTUS_CAS : COCYTUS_SET;
    }
}

static void bin_store(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    uint32_t flags = 0, exptime = 0;
    uint64_t cas = 0;
    bool quiet = is_quiet(rq);

    if (rq->hdr.extlen == BIN_EXTRAS_STORE) {
        flags = bin_load32(rq->extras);
        exptime = bin_load32(rq->extras + 4);
    }
    cocytus_rc r = cocytus_store(pc->w->client, bin_store_op(rq), rq->key, rq->nkey,
                                 rq->value, rq->nvalue, flags, (int32_t)exptime, rq->hdr.cas,
                                 quiet ? NULL : &cas);
    stat_add(&pc->w->st.cmd_set, 1);
    if (r != COCYTUS_OK)
        bin_failure(pc, out, rq, r);
    else if (!quiet)
        bin_ok(out, rq, cas);
}

static void bin_delete(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_delete(pc->w->client, rq->key, rq->nkey);

    stat_add(&pc->w->st.cmd_delete, 1);
    if (r != COCYTUS_OK)
        bin_failure(pc, out, rq, r);
    else if (!is_quiet(rq))
        bin_ok(out, rq, 0);
}

static void bin_arith(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    uint8_t op = rq->hdr.opcode;
    int decr = op == BIN_OP_DECREMENT || op == BIN_OP_DECREMENTQ;
    uint64_t delta = bin_load64(rq->extras);
    uint64_t initial = bin_load64(rq->extras + 8);
    uint32_t exptime = bin_load32(rq->extras + 16);
    uint64_t value = 0;
    cocytus_rc r;

    if (exptime == BIN_ARITH_NO_CREATE)
        r = decr ? cocytus_decr(pc->w->client, rq->key, rq->nkey, delta, &value)
                 : cocytus_incr(pc->w->client, rq->key, rq->nkey, delta, &value);
    else
        r = cocytus_arith_init(pc->w->client, decr, rq->key, rq->nkey, delta, initial,
                               (int32_t)exptime, &value);
    stat_add(&pc->w->st.cmd_incr_decr, 1);
    if (r != COCYTUS_OK) {
        bin_failure(pc, out, rq, r);
        return;
    }
    if (is_quiet(rq))
        return;
    char body[8];
    bin_store64(body, value);
    bin_header(out, rq, BIN_STATUS_OK, 0, 0, sizeof(body), current_cas(pc, rq));
    evbuffer_add(out, body, sizeof(body));
}

static void bin_touch(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    cocytus_rc r = cocytus_touch(pc->w->client, rq->key, rq->nkey,
                                 (int32_t)bin_load32(rq->extras));

    stat_add(&pc->w->st.cmd_touch, 1);
    if (r != COCYTUS_OK)
        bin_failure(pc, out, rq, r);
    else
        bin_ok(out, rq, 0);
}

static void bin_flush(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    int64_t delay = rq->hdr.extlen == BIN_EXTRAS_TOUCH ? (int32_t)bin_load32(rq->extras) : 0;
    cocytus_rc r = cocytus_flush_all(pc->w->client, delay);

    stat_add(&pc->w->st.cmd_flush, 1);
    if (r != COCYTUS_OK)
        bin_failure(pc, out, rq, r);
    else if (!is_quiet(rq))
        bin_ok(out, rq, 0);
}

struct bin_stat_sink {
    struct evbuffer *out;
    const struct bin_request *rq;
};

static void bin_stat_packet(void *ctx, const char *name, const char *value)
{
    struct bin_stat_sink *s = ctx;
    size_t nname = strlen(name), nvalue = strlen(value);

    bin_header(s->out, s->rq, BIN_STATUS_OK, 0, (uint16_t)nname, (uint32_t)(nname + nvalue), 0);
    evbuffer_add(s->out, name, nname);
    evbuffer_add(s->out, value, nvalue);
}

static void bin_stat(struct pconn *pc, const struct bin_request *rq, struct evbuffer *out)
{
    struct bin_stat_sink s = { out, rq };

    if (rq->nkey > 0) {
        bin_status(out, rq, BIN_STATUS_KEY_ENOENT);   /* no stats groups behind a proxy */
        return;
    }
    proxy_stats(pc->w, bin_stat_packet, &s);
    bin_ok(out, rq, 0);
}

static void bin_version(struct evbuffer *out, const struct bin_request *rq)
{
    size_t n = strlen(PROXY_VERSION);
    bin_header(out, rq, BIN_STATUS_OK, 0, 0, (uint32_t)n, 0);
    evbuffer_add(out, PROXY_VERSION, n);
}

static enum step bin_dispatch(struct pconn *pc, const struct bin_request *rq,
                              struct evbuffer *out)
{
    switch (rq->hdr.opcode) {
    case BIN_OP_GET: case BIN_OP_GETQ: case BIN_OP_GETK: case BIN_OP_GETKQ:
    case BIN_OP_GAT: case BIN_OP_GATQ: case BIN_OP_GATK: case BIN_OP_GATKQ:
        bin_get(pc, rq, out);
        break;
    case BIN_OP_SET: case BIN_OP_SETQ: case BIN_OP_ADD: case BIN_OP_ADDQ:
    case BIN_OP_REPLACE: case BIN_OP_REPLACEQ: case BIN_OP_APPEND: case BIN_OP_APPENDQ:
    case BIN_OP_PREPEND: case BIN_OP_PREPENDQ:
        bin_store(pc, rq, out);
        break;
    case BIN_OP_DELETE: case BIN_OP_DELETEQ:
        bin_delete(pc, rq, out);
        break;
    case BIN_OP_INCREMENT: case BIN_OP_INCREMENTQ:
    case BIN_OP_DECREMENT: case BIN_OP_DECREMENTQ:
        bin_arith(pc, rq, out);
        break;
    case BIN_OP_TOUCH:
        bin_touch(pc, rq, out);
        break;
    case BIN_OP_FLUSH: case BIN_OP_FLUSHQ:
        bin_flush(pc, rq, out);
        break;
    case BIN_OP_STAT:
        bin_stat(pc, rq, out);
        break;
    case BIN_OP_VERSION:
        bin_version(out, rq);
        break;
    case BIN_OP_NOOP:
    case BIN_OP_VERBOSITY:
        bin_ok(out, rq, 0);
        break;
    case BIN_OP_QUIT:
        bin_ok(out, rq, 0);
        return STEP_CLOSE;
    case BIN_OP_QUITQ:
        return STEP_CLOSE;
    default:
        bin_status(out, rq, BIN_STATUS_UNKNOWN_COMMAND);
        break;
    }
    return STEP_OK;
}

static enum step bin_step(struct pconn *pc, const char *buf, size_t len, struct evbuffer *out,
                          size_t *used)
{
    struct bin_request rq;

    switch (bin_parse_request(buf, len, bin_max_body(pc->w->px->item_max), &rq)) {
    case BIN_PARSE_NEED_MORE:
        return STEP_NEED_MORE;
    case BIN_PARSE_BAD_MAGIC:
        return STEP_CLOSE;
    case BIN_PARSE_TOO_LARGE:
        bin_status(out, &rq, BIN_STATUS_E2BIG);
        *used = len < rq.total ? len : rq.total;
        pc->swallow = rq.total - *used;
        return STEP_OK;
    case BIN_PARSE_EINVAL:
        bin_status(out, &rq, BIN_STATUS_EINVAL);
        *used = rq.total;
        return STEP_OK;
    case BIN_PARSE_UNKNOWN:
        bin_status(out, &rq, BIN_STATUS_UNKNOWN_COMMAND);
        *used = rq.total;
        return STEP_OK;
    case BIN_PARSE_OK:
        break;
    }
    *used = rq.total;
    return bin_dispatch(pc, &rq, out);
}

/* ------------------------------------------------------------------ */
/* Connections                                                         */
/* ------------------------------------------------------------------ */

static void pconn_free(struct pconn *pc)
{
    __atomic_fetch_sub(&pc->w->st.curr_conns, 1, __ATOMIC_RELAXED);
    bufferevent_free(pc->bev);
    free(pc);
}

/* Drops refused input still to be discarded; false if more must arrive. */
static bool drain_swallow(struct pconn *pc, struct evbuffer *in)
{
    size_t n = evbuffer_get_length(in);

    if (pc->swallow == 0)
        return true;
    if (n > pc->swallow)
        n = pc->swallow;
    evbuffer_drain(in, n);
    pc->swallow -= n;
    return pc->swallow == 0;
}

/* Serves every complete request buffered, while the output is not too large. */
static void process_input(struct pconn *pc)
{
    struct evbuffer *in = bufferevent_get_input(pc->bev);
    struct evbuffer *out = bufferevent_get_output(pc->bev);

    while (!pc->closing && drain_swallow(pc, in)) {
        size_t len = evbuffer_get_length(in);
        if (len == 0)
            break;
        if (evbuffer_get_length(out) > OUT_HIGH) {
            bufferevent_disable(pc->bev, EV_READ);    /* on_write resumes */
            break;
        }
        const char *buf = (const char *)evbuffer_pullup(in, -1);
        if (pc->proto == PROTO_UNKNOWN)
            pc->proto = (unsigned char)buf[0] == BIN_MAGIC_REQUEST ? PROTO_BINARY : PROTO_TEXT;
        size_t used = 0;
        enum step st = pc->proto == PROTO_TEXT ? text_step(pc, buf, len, out, &used)
                                               : bin_step(pc, buf, len, out, &used);
        if (st == STEP_NEED_MORE)
            break;
        evbuffer_drain(in, used);
        if (st == STEP_CLOSE)
            pc->closing = true;
    }
    snapshot_lib(pc->w);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct pconn *pc = arg;

    process_input(pc);
    if (pc->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        pconn_free(pc);
}

/* The output drained: close if asked to, else serve what waited for room. */
static void on_write(struct bufferevent *bev, void *arg)
{
    struct pconn *pc = arg;

    if (!pc->closing) {
        bufferevent_enable(bev, EV_READ);
        process_input(pc);
    }
    if (pc->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        pconn_free(pc);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct pconn *pc = arg;

    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        pconn_free(pc);
}

/* A worker takes over an accepted socket. */
static void worker_adopt(struct worker *w, evutil_socket_t fd)
{
    struct pconn *pc = calloc(1, sizeof(*pc));
    int one = 1;

    if (pc == NULL) {
        evutil_closesocket(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    evutil_make_socket_nonblocking(fd);
    pc->w = w;
    pc->bev = bufferevent_socket_new(w->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (pc->bev == NULL) {
        evutil_closesocket(fd);
        free(pc);
        return;
    }
    stat_add(&w->st.curr_conns, 1);
    stat_add(&w->st.total_conns, 1);
    bufferevent_setcb(pc->bev, on_read, on_write, on_event, pc);
    bufferevent_enable(pc->bev, EV_READ | EV_WRITE);
}

/* The worker's notify pipe: accepted sockets, or -1 to stop. */
static void on_notify(evutil_socket_t pfd, short what, void *arg)
{
    struct worker *w = arg;
    int fds[64];

    (void)what;
    ssize_t n = read(pfd, fds, sizeof(fds));
    if (n <= 0)
        return;
    for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++) {
        if (fds[i] < 0)
            event_base_loopexit(w->base, NULL);
        else
            worker_adopt(w, fds[i]);
    }
}

/* Hands fd (or -1: stop) to worker w.  A pipe write of one int is atomic. */
static bool worker_notify(struct worker *w, int fd)
{
    ssize_t n;

    do
        n = write(w->notify[1], &fd, sizeof(fd));
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(fd);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct proxy *px = arg;
    struct worker *w = &px->workers[px->next_worker];

    (void)l;
    (void)sa;
    (void)salen;
    px->next_worker = (px->next_worker + 1) % px->nworkers;
    if (!worker_notify(w, fd)) {
        fprintf(stderr, "cocytus-proxy: cannot hand a connection to worker %d: %s\n", w->id,
                strerror(errno));
        evutil_closesocket(fd);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    event_base_dispatch(w->base);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Start-up                                                            */
/* ------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cocytus-proxy --seeds HOST:PORT[,HOST:PORT...] [options]\n"
            "  -s, --seeds LIST      cluster servers to fetch the slot map from (required)\n"
            "  -p, --port PORT       port to listen on (default %d)\n"
            "  -l, --listen ADDR     address to listen on (default 127.0.0.1)\n"
            "  -B, --binary-backend  speak the binary protocol to the servers (the default)\n"
            "  -A, --ascii-backend   speak the ASCII protocol to the servers instead (keys\n"
            "                        with control characters are then refused)\n"
            "  -t, --timeout MS      per-try server timeout (default 1000)\n"
            "  -D, --deadline-ms MS  retry a request this long (server failures, slot\n"
            "                        moves) before answering an error (default 2000)\n"
            "  -r, --attempts N      at most this many tries per request (default 100)\n"
            "  -I, --max-item BYTES  largest value accepted (default %u)\n"
            "  -W, --wait SECONDS    keep trying the seeds this long at start (default %d)\n"
            "  -T, --threads N       worker threads, each with its own cluster client (default %d)\n"
            "  -v, --verbose         log connections and map changes\n"
            "  -h, --help\n",
            DEFAULT_PORT, DEFAULT_ITEM_MAX, DEFAULT_CONNECT_WAIT_S, DEFAULT_THREADS);
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Returns 0 to run, 1 on a usage error, 2 after --help. */
static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        { "seeds", required_argument, NULL, 's' },
        { "port", required_argument, NULL, 'p' },
        { "listen", required_argument, NULL, 'l' },
        { "binary-backend", no_argument, NULL, 'B' },
        { "ascii-backend", no_argument, NULL, 'A' },
        { "timeout", required_argument, NULL, 't' },
        { "attempts", required_argument, NULL, 'r' },
        { "deadline-ms", required_argument, NULL, 'D' },
        { "max-item", required_argument, NULL, 'I' },
        { "wait", required_argument, NULL, 'W' },
        { "threads", required_argument, NULL, 'T' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int ch;
    long v;

    while ((ch = getopt_long(argc, argv, "s:p:l:BAt:D:r:I:W:T:vh", longopts, NULL)) != -1) {
        switch (ch) {
        case 's': o->seeds = optarg; break;
        case 'l': o->addr = optarg; break;
        case 'B': o->lib.binary = 1; break;
        case 'A': o->lib.binary = 0; break;
        case 'v': o->verbose++; break;
        case 'h': usage(stdout); return 2;
        case 'p':
            if (!parse_int(optarg, 1, 65535, &v))
                return 1;
            o->port = (int)v;
            break;
        case 't':
            if (!parse_int(optarg, 1, 600000, &v))
                return 1;
            o->lib.timeout_ms = (int)v;
            break;
        case 'D':
            if (!parse_int(optarg, 1, 3600000, &v))
                return 1;
            o->lib.deadline_ms = (int)v;
            break;
        case 'r':
            if (!parse_int(optarg, 1, 1000, &v))
                return 1;
            o->lib.max_attempts = (int)v;
            break;
        case 'I':
            if (!parse_int(optarg, 1024, 1L << 30, &v))
                return 1;
            o->item_max = (size_t)v;
            break;
        case 'W':
            if (!parse_int(optarg, 0, 3600, &v))
                return 1;
            o->wait_s = (int)v;
            break;
        case 'T':
            if (!parse_int(optarg, 1, MAX_THREADS, &v))
                return 1;
            o->threads = (int)v;
            break;
        default:
            return 1;
        }
    }
    return o->seeds != NULL && optind == argc ? 0 : 1;
}

/* Connects to the cluster, retrying once a second for up to wait_s seconds. */
static cocytus_t *connect_cluster(const struct options *o)
{
    char err[256] = "";

    for (int i = 0;; i++) {
        cocytus_t *c = cocytus_connect_with(o->seeds, &o->lib, err, sizeof(err));
        if (c != NULL || i >= o->wait_s) {
            if (c == NULL)
                fprintf(stderr, "cocytus-proxy: cannot reach %s: %s\n", o->seeds, err);
            return c;
        }
        sleep(1);
    }
}

static bool listen_on(struct proxy *px, const char *addr, int port)
{
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char spec[300];

    snprintf(spec, sizeof(spec), strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
    memset(&ss, 0, sizeof(ss));
    if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)&ss, &sslen) != 0) {
        fprintf(stderr, "cocytus-proxy: bad listen address %s\n", spec);
        return false;
    }
    px->listener = evconnlistener_new_bind(px->base, on_accept, px,
                                           LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE, 1024,
                                           (struct sockaddr *)&ss, sslen);
    if (px->listener == NULL) {
        fprintf(stderr, "cocytus-proxy: cannot listen on %s: %s\n", spec, strerror(errno));
        return false;
    }
    return true;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

static void log_map(const struct proxy *px)
{
    char ep[300];
    const cocytus_t *c = px->workers[0].client;
    size_t n = cocytus_endpoint_count(c);

    fprintf(stderr, "cocytus-proxy: map epoch %" PRIu64 ", %zu endpoint(s)\n",
            cocytus_epoch(c), n);
    for (size_t i = 0; i < n && px->verbose; i++)
        if (cocytus_endpoint(c, i, ep, sizeof(ep)) == 0)
            fprintf(stderr, "  %zu %s\n", i, ep);
}

/* Creates worker i: its client (the first one waits for the cluster up to
 * wait_s; the others find it up), loop and notify pipe. */
static bool worker_init(struct proxy *px, int i, const struct options *o)
{
    struct worker *w = &px->workers[i];
    struct options once = *o;

    w->px = px;
    w->id = i;
    w->notify[0] = w->notify[1] = -1;
    if (i > 0)
        once.wait_s = 0;
    w->client = connect_cluster(&once);
    if (w->client == NULL)
        return false;
    w->base = event_base_new();
    if (w->base == NULL || pipe(w->notify) < 0) {
        fprintf(stderr, "cocytus-proxy: cannot set up worker %d: %s\n", i, strerror(errno));
        return false;
    }
    w->notify_ev = event_new(w->base, w->notify[0], EV_READ | EV_PERSIST, on_notify, w);
    return w->notify_ev != NULL && event_add(w->notify_ev, NULL) == 0;
}

static void worker_free(struct worker *w)
{
    if (w->notify_ev)
        event_free(w->notify_ev);
    if (w->base)
        event_base_free(w->base);
    if (w->notify[0] >= 0)
        close(w->notify[0]);
    if (w->notify[1] >= 0)
        close(w->notify[1]);
    cocytus_close(w->client);
}

/* Starts the worker threads; false (with those started stopped) on failure. */
static bool workers_start(struct proxy *px)
{
    for (int i = 0; i < px->nworkers; i++) {
        int rc = pthread_create(&px->workers[i].thread, NULL, worker_main, &px->workers[i]);
        if (rc != 0) {
            fprintf(stderr, "cocytus-proxy: cannot start worker %d: %s\n", i, strerror(rc));
            return false;
        }
        px->workers[i].started = true;
    }
    return true;
}

/* Tells every running worker to stop and waits for it.  Connections still
 * open are dropped with the worker's loop. */
static void workers_stop(struct proxy *px)
{
    for (int i = 0; i < px->nworkers; i++)
        if (px->workers[i].started)
            worker_notify(&px->workers[i], -1);
    for (int i = 0; i < px->nworkers; i++)
        if (px->workers[i].started) {
            pthread_join(px->workers[i].thread, NULL);
            px->workers[i].started = false;
        }
}

static int run(struct proxy *px, const struct options *o)
{
    struct event *sigint, *sigterm;

    if (!listen_on(px, o->addr, o->port))
        return 1;
    sigint = evsignal_new(px->base, SIGINT, on_signal, px->base);
    sigterm = evsignal_new(px->base, SIGTERM, on_signal, px->base);
    if (sigint == NULL || sigterm == NULL)
        return 1;
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    log_map(px);
    fprintf(stderr, "cocytus-proxy: listening on %s:%d with %d worker thread(s)\n", o->addr,
            o->port, px->nworkers);
    if (workers_start(px))
        event_base_dispatch(px->base);
    workers_stop(px);
    event_free(sigint);
    event_free(sigterm);
    evconnlistener_free(px->listener);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = { "127.0.0.1", DEFAULT_PORT, NULL, { 0 }, DEFAULT_ITEM_MAX,
                         DEFAULT_CONNECT_WAIT_S, 0, DEFAULT_THREADS };
    struct proxy px;
    int rc = 1;

    cocytus_options_init(&o.lib);
    /* Binary to the servers by default: it carries every key a memcached
     * client may send (libmemcached's ASCII reply parser mangles keys with
     * control characters). */
    o.lib.binary = 1;
    rc = parse_args(argc, argv, &o);
    if (rc != 0) {
        if (rc == 1)
            usage(stderr);
        return rc == 2 ? 0 : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    memset(&px, 0, sizeof(px));
    px.item_max = o.item_max;
    px.verbose = o.verbose;
    px.started = time(NULL);
    px.workers = calloc((size_t)o.threads, sizeof(*px.workers));
    if (px.workers == NULL)
        return 1;
    rc = 0;
    for (int i = 0; i < o.threads && rc == 0; i++) {
        px.nworkers = i + 1;
        if (!worker_init(&px, i, &o))
            rc = 1;
    }
    if (rc == 0) {
        px.base = event_base_new();
        rc = px.base ? run(&px, &o) : 1;
    }
    if (px.base)
        event_base_free(px.base);
    for (int i = 0; i < px.nworkers; i++)
        worker_free(&px.workers[i]);
    free(px.workers);
    return rc;
}
