/* conn.c - client connections: buffered input, ordered replies, async completion.
 *
 * Input is read into one growable buffer; the connection's protocol consumes
 * whole requests from its front.  Every request appends a response slot to a
 * queue; slots are written out in order with one writev once the batch of
 * input is parsed (every earlier slot complete), so pipelined requests cost
 * one system call and an engine may finish a mutation later without the
 * protocol code knowing.  Replies ready ahead of a mutation of the same
 * batch still in flight leave with its reply, not before it, unless that
 * takes more than a few milliseconds.  Engine memory (values) is
 * referenced, not copied, and released once written.  A connection whose
 * peer does not read its replies stops being read until the backlog
 * drains. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netdb.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/event.h>

#include "conn.h"
#include "conn_internal.h"
#include "hash.h"
#include "proto_bin.h"
#include "proto_text.h"
#include "server.h"
#include "tls.h"
#include "sasl_auth.h"
#include "unixsock.h"
#include "watch.h"

#define RBUF_INITIAL 4096
#define OUT_BACKLOG_MAX (4u << 20)   /* stop reading above this many unsent bytes */
#define IOV_BATCH 128
#define RESP_FREELIST_MAX 64
/* A client pipelining faster than the engine completes (replicated writes
 * wait for acknowledgements) is not parsed further beyond this many
 * mutations in flight, and resumes at half of it: memory stays bounded
 * instead of queueing every request the client sends. */
#define CONN_MAX_INFLIGHT 128
/* Reads of other keys run while writes are in flight and their replies
 * queue behind the pending slots (a data process copies their values);
 * beyond this many slots, or OUT_BACKLOG_MAX bytes of such values, the
 * connection is not parsed further until its writes completed. */
#define CONN_MAX_QUEUED 1024
/* memcached's read buffer: it parses out of at most this much input. */
#define READ_CHUNK 16384
/* Flush points (a get's reply, say) passed in one batch of input before
 * the replies are written anyway (conn_process). */
#define FLUSH_DEFER_MAX 32
/* Replies ready ahead of a write in flight wait for it (conn_holds_ready)
 * at most this long, then go on their own: a write that waits for a
 * failure to be handled (a parity process stopped: a second or more) must
 * not hold the reads of other keys with it.  An acknowledgement normally
 * comes well within it. */
#define HOLD_READY_MAX_MS 5

static void conn_event(evutil_socket_t fd, short what, void *arg);
static void conn_process(struct conn *c);
static void conn_hold_disarm(struct conn *c);
static void conn_flush(struct conn *c);
static size_t conn_backlog(const struct conn *c);
static size_t conn_build_iov(struct conn *c, struct iovec *iov, int max);
static void conn_consume_output(struct conn *c, size_t n);
static void conn_destroy(struct conn *c);
static bool conn_release(struct conn *c);
static void conn_set_events(struct conn *c, short want);

/* ---- response slots ---- */

static struct resp *resp_alloc(struct conn *c)
{
    struct resp *r = c->free_resps;
    if (r) {
        c->free_resps = r->next;
        c->nfree_resps--;
    } else {
        r = malloc(sizeof(*r));
        if (!r)
            return NULL;
    }
    r->next = NULL;
    r->c = c;
    r->done = false;
    r->pending = false;
    r->marked = false;
    r->buf = r->ibuf;
    r->buflen = 0;
    r->bufcap = sizeof(r->ibuf);
    r->segs = r->isegs;
    r->nsegs = 0;
    r->segcap = sizeof(r->isegs) / sizeof(r->isegs[0]);
    r->cmd = 0;
    r->noreply = false;
    r->opcode = 0;
    r->opaque = 0;
    r->arg = 0;
    r->scratch = 0;
    r->dropped = false;
    r->wkey = 0;
    r->wall = false;
    r->meta_delete = false;
    r->complete = NULL;
    r->watch = NULL;
    return r;
}

/* Let go of what the slot's segments hold: our copies of transient values
 * are freed, engine references released, transient bytes uncounted. */
static void resp_release_segs(struct conn *c, struct resp *r)
{
    struct engine *e = c->srv->engine;
    for (uint32_t i = 0; i < r->nsegs; i++) {
        struct out_seg *sg = &r->segs[i];
        if (sg->transient || sg->copied)
            c->held_bytes -= sg->len;
        if (sg->copied)
            free(sg->handle);          /* a copy of ours, not engine memory */
        else if (sg->ref && sg->handle && e)   /* no engine: shut down, its memory gone */
            e->ops->release(e, sg->handle);
    }
    r->nsegs = 0;
}

/* Drop the slot's engine references and recycle it. */
static void resp_recycle(struct conn *c, struct resp *r)
{
    if (c->watch_open == r)
        c->watch_open = NULL;
    resp_release_segs(c, r);
    free(r->watch);
    r->watch = NULL;
    if (r->buf != r->ibuf)
        free(r->buf);
    if (r->segs != r->isegs)
        free(r->segs);
    if (c->nfree_resps < RESP_FREELIST_MAX) {
        r->next = c->free_resps;
        c->free_resps = r;
        c->nfree_resps++;
    } else {
        free(r);
    }
}

/* Out of memory while building a reply is not recoverable for this
 * connection; abort() would lose the whole cache, so we fail loudly instead. */
static void oom_exit(void)
{
    fprintf(stderr, "cocytus-server: out of memory building a reply\n");
    exit(EXIT_FAILURE);
}

static struct out_seg *resp_new_seg(struct resp *r)
{
    if (r->nsegs == r->segcap) {
        uint32_t ncap = r->segcap * 2;
        struct out_seg *n;
        if (r->segs == r->isegs) {
            n = malloc(ncap * sizeof(*n));
            if (n)
                memcpy(n, r->isegs, r->nsegs * sizeof(*n));
        } else {
            n = realloc(r->segs, ncap * sizeof(*n));
        }
        if (!n)
            oom_exit();
        r->segs = n;
        r->segcap = ncap;
    }
    return &r->segs[r->nsegs++];
}

static void resp_reserve(struct resp *r, size_t extra)
{
    if ((size_t)r->buflen + extra <= r->bufcap)
        return;
    size_t ncap = r->bufcap * 2;
    while (ncap < (size_t)r->buflen + extra)
        ncap *= 2;
    char *n;
    if (r->buf == r->ibuf) {
        n = malloc(ncap);
        if (n)
            memcpy(n, r->ibuf, r->buflen);
    } else {
        n = realloc(r->buf, ncap);
    }
    if (!n)
        oom_exit();
    r->buf = n;
    r->bufcap = (uint32_t)ncap;
}

/* Record that buf[off..off+n) belongs to the reply, extending the last
 * segment when it is contiguous own bytes. */
static void resp_note_bytes(struct resp *r, uint32_t off, uint32_t n)
{
    if (r->nsegs > 0) {
        struct out_seg *last = &r->segs[r->nsegs - 1];
        if (!last->ref && last->off + last->len == off) {
            last->len += n;
            return;
        }
    }
    struct out_seg *s = resp_new_seg(r);
    s->ref = NULL;
    s->off = off;
    s->len = n;
    s->handle = NULL;
    s->transient = s->copied = false;
}

void resp_add(struct resp *r, const void *p, size_t n)
{
    if (n == 0)
        return;
    resp_reserve(r, n);
    memcpy(r->buf + r->buflen, p, n);
    resp_note_bytes(r, r->buflen, (uint32_t)n);
    r->buflen += (uint32_t)n;
}

void resp_str(struct resp *r, const char *s)
{
    resp_add(r, s, strlen(s));
}

void resp_printf(struct resp *r, const char *fmt, ...)
{
    va_list ap;
    size_t room = r->bufcap - r->buflen;
    va_start(ap, fmt);
    int n = vsnprintf(r->buf + r->buflen, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= room) {
        resp_reserve(r, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(r->buf + r->buflen, r->bufcap - r->buflen, fmt, ap);
        va_end(ap);
    }
    resp_note_bytes(r, r->buflen, (uint32_t)n);
    r->buflen += (uint32_t)n;
}

void resp_add_ref(struct resp *r, const char *p, size_t n, void *handle)
{
    struct out_seg *s = resp_new_seg(r);
    s->ref = p;
    s->off = 0;
    s->len = (uint32_t)n;
    s->handle = handle;
    s->transient = s->copied = false;
}

void resp_add_value(struct resp *r, const struct eng_value *v, size_t n)
{
    if (!v->transient) {
        resp_add_ref(r, v->data, n, v->handle);
        return;
    }
    resp_add_ref(r, v->data, n, NULL);
    r->segs[r->nsegs - 1].transient = true;
    r->c->transient++;
    r->c->held_bytes += n;
}

void resp_done(struct resp *r)
{
    r->done = true;
}

void *resp_scratch_reserve(struct resp *r, size_t n)
{
    resp_reserve(r, n);
    r->scratch = (uint32_t)n;
    r->buflen += (uint32_t)n;
    return r->buf;
}

void *resp_scratch(struct resp *r)
{
    return r->scratch ? r->buf : NULL;
}

struct resp *conn_resp_new(struct conn *c)
{
    struct resp *r = resp_alloc(c);
    if (!r)
        oom_exit();
    r->seq = c->next_seq++;
    c->nresps++;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    return r;
}

/* ---- engine calls with generic counting ---- */

static void count_mutation(struct server_stats *st, eng_op op, eng_status s,
                           bool meta_delete)
{
    switch (op) {
    case ENG_OP_CAS:
        if (s == ENG_SUCCESS)
            st->cas_hits++;
        else if (s == ENG_EXISTS)
            st->cas_badval++;
        else if (s == ENG_NOT_FOUND)
            st->cas_misses++;
        break;
    case ENG_OP_DELETE:
        if (s == ENG_SUCCESS)
            st->delete_hits++;
        else if (s == ENG_NOT_FOUND || (s == ENG_EXISTS && meta_delete))
            st->delete_misses++;
        break;
    case ENG_OP_MARK:       /* md I: no hit counted, misses as a delete's */
        if (meta_delete && (s == ENG_NOT_FOUND || s == ENG_EXISTS))
            st->delete_misses++;
        break;
    case ENG_OP_INCR:
        if (s == ENG_SUCCESS)
            st->incr_hits++;
        else if (s == ENG_NOT_FOUND)
            st->incr_misses++;
        break;
    case ENG_OP_DECR:
        if (s == ENG_SUCCESS)
            st->decr_hits++;
        else if (s == ENG_NOT_FOUND)
            st->decr_misses++;
        break;
    case ENG_OP_TOUCH:
        if (s == ENG_SUCCESS)
            st->touch_hits++;
        else if (s == ENG_NOT_FOUND)
            st->touch_misses++;
        break;
    default:
        break;
    }
}

static void count_request(struct server_stats *st, eng_op op)
{
    switch (op) {
    case ENG_OP_SET: case ENG_OP_ADD: case ENG_OP_REPLACE:
    case ENG_OP_APPEND: case ENG_OP_PREPEND: case ENG_OP_CAS:
        st->cmd_set++;
        break;
    case ENG_OP_TOUCH:
        st->cmd_touch++;
        break;
    case ENG_OP_FLUSH:
        st->cmd_flush++;
        break;
    default:
        break;
    }
}

static void watch_log_store(struct conn *c, struct resp *r, const struct eng_result *res);

static void mutation_finish(struct resp *r, const struct eng_result *res)
{
    struct conn *c = r->c;
    if (r->watch)
        watch_log_store(c, r, res);
    /* an incr/decr that created its key: neither hit nor miss (memcached) */
    if (r->mop >= 0 && !res->created)
        count_mutation(&c->srv->stats, (eng_op)r->mop, res->status, r->meta_delete);
    /* A dropped reply still completes: its request took effect (memcached
     * ran it before the error that drops its reply), and a part of a
     * request (an mg's touch) completes the slot its reply waits in, which
     * would otherwise never be done and stall every later reply.  What the
     * completion wrote goes nowhere. */
    if (r->complete && !c->closing) {
        r->complete(r, res);
        if (r->dropped)
            resp_release_segs(c, r);
    }
    r->done = true;
}

/* ---- flushing after a batch of completions ----
 *
 * One acknowledgement from the parity processes or a backup completes every
 * write it covers at once, often several of one pipelining connection (a
 * proxy's, say).  Writing each reply as it completes costs one writev per
 * request; instead a completed connection is queued and a one-shot event,
 * activated behind the callback that is running, writes each queued
 * connection once, with every reply that completed meanwhile. */

/* When the server batches its writes (sendq.h, server_run), this flush
 * does not write: it lists the connection in the batch, which asks for the
 * replies after the loop pass (conn_wr_prepare) and writes them in one
 * submission with the pass's other deferred writes (the replication
 * links').  Such a connection has no transient bytes (a completion that
 * queued any flushed at once), so its replies stay valid until then. */
static void flush_queued(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    struct conn *list = s->flush_queue;
    (void)fd;
    (void)what;
    s->flush_queue = NULL;
    while (list) {
        struct conn *c = list;
        list = c->flush_next;
        c->flush_queued = false;
        c->flush_next = NULL;
        if (!c->closing && (c->transient > 0 || c->tls || !sendq_want(s->sq, &c->wr)))
            conn_flush(c);
        conn_release(c);
    }
}

static struct conn *conn_of_writer(struct sendq_writer *wr)
{
    return (struct conn *)((char *)wr - offsetof(struct conn, wr));
}

/* The batch asks for the connection's message: its completed replies. */
static int conn_wr_prepare(struct sendq_writer *wr, int *fd, struct iovec *iov, int max)
{
    struct conn *c = conn_of_writer(wr);
    if (c->closing || c->out_blocked)
        return 0;
    conn_consume_output(c, 0);
    if (conn_build_iov(c, iov, max < IOV_BATCH ? max : IOV_BATCH) == 0)
        return 0;
    *fd = c->fd;
    return c->niov;
}

/* ...tells what went, before anything else runs: the queue moves past it
 * (another writer's completion may flush this connection)... */
static void conn_wr_sent(struct sendq_writer *wr, size_t n)
{
    struct conn *c = conn_of_writer(wr);
    c->srv->stats.bytes_written += (uint64_t)n;
    conn_consume_output(c, n);
}

/* ...and then its outcome: an error closes as a writev's would; conn_flush
 * writes whatever is left and sets the connection's events. */
static void conn_wr_complete(struct sendq_writer *wr, bool had, ssize_t res)
{
    struct conn *c = conn_of_writer(wr);
    if (!c->closing && had && res < 0 && res != -EAGAIN && res != -EWOULDBLOCK) {
        c->close_reason = "error";
        conn_close(c);
    }
    if (!c->closing)
        conn_flush(c);
    conn_release(c);
}

/* Queue c to be written once the current event's work is done; false
 * when the queue's event cannot be made (out of memory). */
static bool conn_flush_queue(struct conn *c)
{
    struct server *s = c->srv;
    if (c->flush_queued || c->closing)
        return true;
    if (s->flush_ev == NULL)
        s->flush_ev = event_new(s->base, -1, 0, flush_queued, s);
    if (s->flush_ev == NULL)
        return false;
    c->flush_queued = true;
    c->flush_next = s->flush_queue;
    s->flush_queue = c;
    event_active(s->flush_ev, EV_TIMEOUT, 0);
    return true;
}

static void conn_flush_later(struct conn *c)
{
    if (!conn_flush_queue(c))
        conn_flush(c);
}

/* The engine's asynchronous completion. */
static void mutation_done(void *cookie, const struct eng_result *res)
{
    struct resp *r = cookie;
    struct conn *c = r->c;
    r->pending = false;
    c->inflight--;
    c->mutations_pending--;
    mutation_finish(r, res);
    if (conn_release(c))
        return;
    bool parsed = false;
    if (c->inflight == 0 && c->blocked) {
        c->blocked = false;
        conn_process(c);
        parsed = true;
    } else if (c->throttled && c->inflight <= CONN_MAX_INFLIGHT / 2) {
        c->throttled = false;
        conn_process(c);
        parsed = true;
    }
    /* New input may have queued transient bytes, which must be written or
     * copied before control returns to the loop: flush now.  A bare
     * completion waits for the others of the same acknowledgement. */
    if (parsed || c->transient > 0)
        conn_flush(c);
    else
        conn_flush_later(c);
    conn_release(c);
}

/* The engine can serve the read a connection waits for: counted like a
 * mutation in flight, so the connection stays blocked (and alive) until
 * then. */
static void read_ready(void *cookie, const struct eng_result *res)
{
    struct conn *c = cookie;
    (void)res;
    c->inflight--;
    if (conn_release(c))
        return;
    if (c->inflight == 0 && c->blocked) {
        c->blocked = false;
        conn_process(c);
    }
    conn_flush(c);
    conn_release(c);
}

bool conn_read_waits(struct conn *c, const char *key, size_t nkey)
{
    struct engine *e = c->srv->engine;
    if (!e->ops->read_wait)
        return false;
    /* A key served elsewhere now is answered MOVED by routing, whatever
     * this engine would have waited for (a lease, say). */
    if (!conn_is_import(c) && server_moved(c->srv, key, nkey))
        return false;
    if (!e->ops->read_wait(e, key, nkey, read_ready, c))
        return false;
    c->inflight++;
    return true;
}

/* One lookup through the engine's get_ex (ex) or get, counting nothing
 * and logging nothing. */
static eng_status read_item_quiet(struct conn *c, const char *key, size_t nkey, bool ex,
                                  unsigned opts, struct eng_value *out, struct eng_result *res)
{
    struct engine *e = c->srv->engine;
    res->status = ENG_SUCCESS;
    res->msg = NULL;
    memset(out, 0, sizeof(*out));
    eng_status st = ex && e->ops->get_ex ? e->ops->get_ex(e, key, nkey, opts, out, res)
                                         : e->ops->get(e, key, nkey, out, res);
    res->status = st;
    return st;
}

/* "watch fetchers": a lookup's line; the request's mutation of the same
 * key, if any, then logs no second one (watch_lookup_before). */
static void watch_log_get(struct conn *c, const char *key, size_t nkey, eng_status st,
                          const struct eng_value *v)
{
    if (st != ENG_SUCCESS && st != ENG_NOT_FOUND)
        return;               /* MOVED, or a failure: no lookup happened here */
    bool found = st == ENG_SUCCESS;
    watch_item_get(&c->srv->watch, key, nkey, found,
                   found ? server_item_class(c->srv, nkey, v->nbytes, v->flags) : 0,
                   found ? v->nbytes : 0, c->fd);
    c->looked = true;
    c->looked_hash = hash_key(key, nkey);
}

static eng_status read_item(struct conn *c, const char *key, size_t nkey, bool ex,
                            unsigned opts, struct eng_value *out, struct eng_result *res)
{
    eng_status st = read_item_quiet(c, key, nkey, ex, opts, out, res);
    if (watch_wants(&c->srv->watch, WATCH_FETCHERS))
        watch_log_get(c, key, nkey, st, out);
    return st;
}

/* A lookup for a watch line only: no count, no line, the item's place
 * and fetched bit left alone (ENG_GET_PEEK).  The handle is released at
 * once: the caller keeps v's numbers, not its bytes.  ENG_FAILED on an
 * engine without get_ex, whose get would move the item. */
static eng_status watch_peek(struct conn *c, const char *key, size_t nkey, struct eng_value *v)
{
    struct engine *e = c->srv->engine;
    if (!e || !e->ops->get_ex)
        return ENG_FAILED;
    struct eng_result res;
    eng_status st = read_item_quiet(c, key, nkey, true, ENG_GET_PEEK, v, &res);
    if (st == ENG_SUCCESS && v->handle)
        e->ops->release(e, v->handle);
    return st;
}

/* memcached's stores, deletes, touches and arithmetic look their key up
 * first, and "watch fetchers" shows that lookup: here it is a peek made
 * for the watcher, unless the request already looked the key up (a gat's
 * touch, an mg's). */
static void watch_lookup_before(struct conn *c, const struct eng_mutation *m)
{
    if (m->op == ENG_OP_FLUSH || m->op == ENG_OP_MARK)
        return;
    if (c->looked && c->looked_hash == hash_key(m->key, m->nkey))
        return;
    struct eng_value v;
    eng_status st = watch_peek(c, m->key, m->nkey, &v);
    watch_log_get(c, m->key, m->nkey, st, &v);    /* nothing for ENG_FAILED */
}

/* What a store's line needs once the engine has answered (a replicated
 * store answers later, after the request's bytes are gone). */
struct watch_store {
    eng_op op;
    uint32_t ttl;
    uint32_t size;
    uint32_t flags;
    int cfd;
    size_t nkey;
    char key[];
};

static void watch_note_store(struct conn *c, struct resp *r, const struct eng_mutation *m)
{
    if (m->op > ENG_OP_CAS)
        return;               /* only stores: SET..CAS */
    struct watch_store *w = malloc(sizeof(*w) + m->nkey);
    if (!w)
        return;               /* a line lost, nothing else */
    w->op = m->op;
    /* memcached's unsigned seconds left: an item already expired wraps */
    w->ttl = m->exptime == 0 ? 0
                             : (uint32_t)(clock_exptime(&c->srv->clock, m->exptime) -
                                          c->srv->clock.now);
    w->size = (uint32_t)m->nbytes;
    w->flags = m->flags;
    w->cfd = c->fd;
    w->nkey = m->nkey;
    memcpy(w->key, m->key, m->nkey);
    r->watch = w;
}

static void watch_log_store(struct conn *c, struct resp *r, const struct eng_result *res)
{
    static const char *const cmds[] = {
        [ENG_OP_SET] = "set", [ENG_OP_ADD] = "add", [ENG_OP_REPLACE] = "replace",
        [ENG_OP_APPEND] = "append", [ENG_OP_PREPEND] = "prepend", [ENG_OP_CAS] = "cas",
    };
    struct watch_store *w = r->watch;
    r->watch = NULL;
    const char *status = NULL;
    switch (res->status) {
    case ENG_SUCCESS: status = "stored"; break;
    case ENG_NOT_STORED: status = "not_stored"; break;
    case ENG_EXISTS: status = "exists"; break;
    case ENG_NOT_FOUND: status = "not_found"; break;
    default: break;           /* refused before any store (too large, moved...) */
    }
    uint32_t size = w->size, flags = w->flags;
    if (!status || !watch_wants(&c->srv->watch, WATCH_MUTATIONS)) {
        free(w);
        return;
    }
    struct eng_value v;
    /* an append's line gives the new item's size: the joined value */
    if (res->status == ENG_SUCCESS && (w->op == ENG_OP_APPEND || w->op == ENG_OP_PREPEND) &&
        watch_peek(c, w->key, w->nkey, &v) == ENG_SUCCESS) {
        size = v.nbytes;
        flags = v.flags;
    }
    watch_item_store(&c->srv->watch, w->key, w->nkey, status, cmds[w->op], w->ttl,
                     server_item_class(c->srv, w->nkey, size, flags), size, w->cfd);
    free(w);
}

static void mutate(struct conn *c, struct resp *r, const struct eng_mutation *m,
                   resp_complete_fn complete, bool counted)
{
    struct engine *e = c->srv->engine;
    struct eng_result res = { .status = ENG_SUCCESS };
    r->complete = complete;
    r->mop = counted ? (int)m->op : -1;
    if (counted)
        count_request(&c->srv->stats, m->op);
    if (counted && watch_wants(&c->srv->watch, WATCH_FETCHERS))
        watch_lookup_before(c, m);
    c->looked = false;
    if (counted && watch_wants(&c->srv->watch, WATCH_MUTATIONS))
        watch_note_store(c, r, m);
    eng_status st = e->ops->mutate(e, m, &res, mutation_done, r);
    if (st == ENG_PENDING) {
        r->pending = true;
        r->wall = m->nkey == 0;
        r->wkey = m->nkey ? hash_key(m->key, m->nkey) : 0;
        c->inflight++;
        c->mutations_pending++;
        return;
    }
    res.status = st;
    mutation_finish(r, &res);
}

void conn_mutate(struct conn *c, struct resp *r, const struct eng_mutation *m,
                 resp_complete_fn complete)
{
    mutate(c, r, m, complete, true);
}

void conn_mutate_uncounted(struct conn *c, struct resp *r, const struct eng_mutation *m,
                           resp_complete_fn complete)
{
    mutate(c, r, m, complete, false);
}

eng_status conn_lookup(struct conn *c, const char *key, size_t nkey,
                       struct eng_value *out, struct eng_result *res)
{
    return read_item(c, key, nkey, false, 0, out, res);
}

eng_status conn_lookup_ex(struct conn *c, const char *key, size_t nkey, unsigned opts,
                          struct eng_value *out, struct eng_result *res)
{
    return read_item(c, key, nkey, true, opts, out, res);
}

void conn_count_get(struct conn *c, eng_status st)
{
    c->srv->stats.cmd_get++;
    if (st == ENG_SUCCESS)
        c->srv->stats.get_hits++;
    else if (st == ENG_NOT_FOUND)
        c->srv->stats.get_misses++;
}

eng_status conn_get(struct conn *c, const char *key, size_t nkey,
                    struct eng_value *out, struct eng_result *res)
{
    eng_status st = read_item(c, key, nkey, false, 0, out, res);
    conn_count_get(c, st);
    return st;
}

eng_status conn_get_ex(struct conn *c, const char *key, size_t nkey, unsigned opts,
                       struct eng_value *out, struct eng_result *res)
{
    eng_status st = read_item(c, key, nkey, true, opts, out, res);
    if (!(opts & ENG_GET_PEEK))
        conn_count_get(c, st);
    return st;
}

bool conn_writes_inflight(const struct conn *c)
{
    return c->inflight > 0;
}

/* A scan of the queued slots: at most CONN_MAX_QUEUED (conn_process stops
 * parsing beyond it while writes are in flight), a handful for a
 * pipelining client.  A hash collision only makes a read wait. */
bool conn_key_writes_inflight(const struct conn *c, const char *key, size_t nkey)
{
    if (c->inflight == 0)
        return false;
    uint64_t h = hash_key(key, nkey);
    for (const struct resp *r = c->head; r; r = r->next)
        if (r->pending && (r->wall || r->wkey == h))
            return true;
    return false;
}

struct engine *conn_engine(const struct conn *c)
{
    return c->srv->engine;
}

struct server *conn_server(const struct conn *c)
{
    return c->srv;
}

void conn_close_after_write(struct conn *c)
{
    c->close_after_write = true;
}

void conn_close_now(struct conn *c)
{
    /* Replies to earlier requests still leave first, as a client expects. */
    c->close_after_write = true;
}

void conn_request_shutdown(struct conn *c)
{
    server_shutdown(c->srv);
}

void conn_swallow(struct conn *c, size_t n)
{
    c->swallow += n;
}

void conn_flush_point(struct conn *c)
{
    c->flush_seq = c->next_seq;
    c->flush_now = true;
}

void conn_write_final(struct conn *c)
{
    if (c->deferred_flushes == 0 || c->closing)
        return;
    bool holding = c->holding;
    c->holding = true;            /* only the slots before flush_seq */
    conn_flush(c);
    c->holding = holding;
}

void conn_flush_through(struct resp *r)
{
    struct conn *c = r->c;
    if (c->flush_seq < r->seq + 1)
        c->flush_seq = r->seq + 1;
    c->flush_now = true;
}

void conn_hold_output(struct conn *c)
{
    c->hold_request = true;
}

void conn_close_discard(struct conn *c)
{
    c->close_reason = "error";
    c->discard = true;
    c->holding = true;
    c->close_after_write = true;
}

bool conn_input_may_grow(const struct conn *c, size_t len)
{
    return c->read_more && len == c->rend - c->rstart && len < c->win_left;
}

bool conn_has_unflushed(const struct conn *c)
{
    return c->tail && c->tail->seq >= c->flush_seq && !(c->tail == c->head && (c->head_seg || c->head_off));
}

void conn_discard_unflushed(struct conn *c)
{
    for (struct resp *r = c->head; r; r = r->next) {
        if (r->seq < c->flush_seq || (r == c->head && (c->head_seg || c->head_off)))
            continue;
        r->dropped = true;
        resp_release_segs(c, r);
    }
}

void conn_stream(struct conn *c, struct conn_stream *st)
{
    c->stream = st;
}

bool conn_streaming(const struct conn *c)
{
    return c->stream != NULL || c->watching;
}

/* Is a streamed reply ready for its next piece: the socket took all that
 * could be written, and less than CONN_STREAM_LOW is queued (replies not
 * writable yet, a write's ahead of the dump, count too)? */
static bool conn_stream_wants(const struct conn *c)
{
    return c->stream != NULL && !c->closing && !c->out_blocked &&
           conn_backlog(c) < CONN_STREAM_LOW;
}

/* The next piece of a streamed reply, when it is ready for one; then
 * writes it. */
static void conn_stream_step(struct conn *c)
{
    if (!conn_stream_wants(c))
        return;
    struct conn_stream *st = c->stream;
    struct resp *r = conn_resp_new(c);
    if (st->step(st, r)) {
        c->stream = NULL;
        st->done(st);
    }
    resp_done(r);
    c->flush_seq = c->next_seq;
    c->last_cmd = c->srv->clock.epoch + (time_t)c->srv->clock.now;
    conn_flush(c);
}

/* May slot r be written now? */
static bool resp_writable(const struct conn *c, const struct resp *r)
{
    return r->done && (!c->holding || r->seq < c->flush_seq);
}

/* ---- slot migration ---- */

struct auth_admin *conn_admin_auth(struct conn *c)
{
    return &c->admin;
}

bool conn_is_admin(const struct conn *c)
{
    return c->admin.ok;
}

const char *conn_peer_name(const struct conn *c, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (conn_server(c)->listen_unix)
        return unixsock_peer(c->fd, buf, cap);
    if (getpeername(c->fd, (struct sockaddr *)&ss, &len) < 0 ||
        getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    snprintf(buf, cap, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
    return buf;
}

/* ---- watch (watch.h) ---- */

/* The peer as memcached's connection events name it, kept from the
 * accept on: once a peer resets, the socket has no address to ask. */
static void conn_note_peer(struct conn *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    snprintf(c->peer_ip, sizeof(c->peer_ip), c->srv->listen_unix ? "unix" : "unknown");
    c->peer_port = 0;
    if (c->srv->listen_unix || getpeername(c->fd, (struct sockaddr *)&ss, &len) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, c->peer_ip, sizeof(c->peer_ip));
        c->peer_port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, c->peer_ip, sizeof(c->peer_ip));
        c->peer_port = ntohs(a->sin6_port);
    }
}

static void watch_conn_log(struct conn *c, bool opened)
{
    watch_conn_event(&c->srv->watch, opened, c->peer_ip, c->peer_port,
                     c->srv->listen_unix ? "local" : "tcp",
                     c->close_reason ? c->close_reason : "normal", c->fd);
}

void conn_watch_begin(struct conn *c)
{
    c->watching = true;       /* conn_process drops what follows */
}

/* A watcher keeps at most this much unsent; beyond it lines are skipped
 * (memcached's watcher buffer is 256 KB). */
#define WATCH_BACKLOG_MAX (256u << 10)

bool conn_watch_send(void *conn, const char *line, size_t n)
{
    struct conn *c = conn;
    if (c->closing)
        return true;          /* gone: nothing to count */
    if (c->watch_queued + n > WATCH_BACKLOG_MAX)
        return false;
    /* Lines join one slot until a write takes it: a slot per line would
     * cost more than the line. */
    struct resp *r = c->watch_open;
    if (r == NULL || r != c->tail) {
        r = conn_resp_new(c);
        resp_done(r);
        c->watch_open = r;
    }
    resp_add(r, line, n);
    c->watch_queued += n;
    c->flush_seq = c->next_seq;
    /* Never written from here: the hub is walking its watchers (a failed
     * write would close this one under it).  After the loop pass, or once
     * the socket is writable if the queue cannot be used. */
    if (!conn_flush_queue(c))
        conn_set_events(c, (short)(c->ev_flags | EV_WRITE));
    return true;
}

bool conn_first_refusal(struct conn *c)
{
    bool first = !c->refusal_logged;
    c->refusal_logged = true;
    return first;
}

void conn_set_import(struct conn *c)
{
    c->import = true;
}

bool conn_is_import(const struct conn *c)
{
    return c->import;
}

size_t conn_mark_inflight(struct server *s)
{
    size_t n = 0;
    for (struct conn *c = s->conns; c; c = c->next) {
        for (struct resp *r = c->head; r; r = r->next) {
            if (r->pending) {
                r->marked = true;
                n++;
            }
        }
    }
    return n;
}

size_t conn_marked_inflight(const struct server *s)
{
    size_t n = 0;
    for (const struct conn *c = s->conns; c; c = c->next)
        for (const struct resp *r = c->head; r; r = r->next)
            n += r->pending && r->marked;
    return n;
}

/* ---- lifecycle ---- */

/* The server's lists of connections (open, closed): doubly linked through
 * c->prev and c->next, a connection on one of them at a time. */
static void conn_list_push(struct conn **head, struct conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void conn_list_remove(struct conn **head, struct conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

struct conn *conn_new(struct server *s, int fd, bool tls)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->srv = s;
    c->fd = fd;
    sendq_writer_init(&c->wr, conn_wr_prepare, conn_wr_sent, conn_wr_complete);
    c->rcap = RBUF_INITIAL;
    c->rbuf = malloc(c->rcap);
    c->ev = event_new(s->base, fd, EV_READ | EV_PERSIST, conn_event, c);
    if (tls)
        c->tls = tls_conn_new(s->tls, fd);
    if (!c->rbuf || !c->ev || (tls && !c->tls)) {
        free(c->rbuf);
        if (c->ev)
            event_free(c->ev);
        tls_conn_free(c->tls);
        free(c);
        return NULL;
    }
    event_add(c->ev, NULL);
    c->ev_flags = EV_READ;
    conn_list_push(&s->conns, c);
    s->stats.curr_conns++;
    s->stats.total_conns++;
    c->last_cmd = time(NULL);
    c->win_left = READ_CHUNK;
    conn_note_peer(c);
    if (watch_wants(&s->watch, WATCH_CONNEVENTS))
        watch_conn_log(c, true);
    return c;
}

/* Free what remains once the socket is closed and no engine callback can
 * still refer to the connection. */
static void conn_destroy(struct conn *c)
{
    conn_list_remove(&c->srv->closed, c);
    struct resp *r = c->head;
    while (r) {
        struct resp *next = r->next;
        resp_recycle(c, r);
        r = next;
    }
    r = c->free_resps;
    while (r) {
        struct resp *next = r->next;
        free(r);
        r = next;
    }
    free(c->rbuf);
    free(c->tls_held);
    free(c);
}

void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    struct server *s = c->srv;
    c->closing = true;
    if (c->watching) {
        watch_remove(&s->watch, c);
        if (!c->close_reason)
            c->close_reason = "error";    /* memcached's words for a watcher's end */
    }
    if (watch_wants(&s->watch, WATCH_CONNEVENTS))
        watch_conn_log(c, false);
    if (c->stream) {
        struct conn_stream *st = c->stream;
        c->stream = NULL;
        st->done(st);
    }
    event_free(c->ev);
    c->ev = NULL;
    if (c->hold_ev)
        event_free(c->hold_ev);   /* deletes a pending bound too */
    c->hold_ev = NULL;
    tls_conn_free(c->tls);
    c->tls = NULL;
    mcsasl_free(c->sasl);
    c->sasl = NULL;
    close(c->fd);
    c->fd = -1;
    conn_list_remove(&s->conns, c);
    /* held on the closed list until released, so that shutdown can free
     * what an engine never completed (conn_free_closed) */
    conn_list_push(&s->closed, c);
    s->stats.curr_conns--;
    if (s->settings.verbose > 1)
        fprintf(stderr, "connection closed\n");
    /* The memory is freed by the outermost caller (conn_event, an engine
     * completion, or conn_close_all) via conn_release, never here: callers
     * up the stack still hold c. */
}

/* Free a closed connection once nothing can refer to it any more. */
static bool conn_release(struct conn *c)
{
    if (!c->closing)
        return false;
    if (c->inflight == 0 && !c->flush_queued && !c->wr.listed)
        conn_destroy(c);
    return true;
}

/* Watch for what the connection needs: readable unless paused, writable
 * while output is blocked. */
static void conn_set_events(struct conn *c, short want)
{
    if (c->closing || want == c->ev_flags)
        return;
    event_del(c->ev);
    event_assign(c->ev, c->srv->base, c->fd, want | EV_PERSIST, conn_event, c);
    if (want)
        event_add(c->ev, NULL);
    c->ev_flags = want;
}

/* ---- output ---- */

static size_t conn_build_iov(struct conn *c, struct iovec *iov, int max)
{
    /* A slot a write points into must not grow (its buffer may move):
     * later log lines start a new one. */
    c->watch_open = NULL;
    int n = 0;
    size_t total = 0;
    uint32_t seg = c->head_seg;
    uint32_t off = c->head_off;
    for (struct resp *r = c->head; r && resp_writable(c, r) && n < max; r = r->next) {
        for (; seg < r->nsegs && n < max; seg++) {
            struct out_seg *s = &r->segs[seg];
            const char *base = s->ref ? s->ref : r->buf + s->off;
            iov[n].iov_base = (void *)(base + off);
            iov[n].iov_len = s->len - off;
            total += s->len - off;
            n++;
            off = 0;
        }
        seg = 0;
    }
    c->niov = n;
    return total;
}

/* Advance the head of the queue past n written bytes, recycling finished slots. */
static void conn_consume_output(struct conn *c, size_t n)
{
    if (c->watching)
        c->watch_queued -= n < c->watch_queued ? n : c->watch_queued;
    while (c->head && resp_writable(c, c->head)) {
        struct resp *r = c->head;
        while (c->head_seg < r->nsegs) {
            struct out_seg *s = &r->segs[c->head_seg];
            size_t left = s->len - c->head_off;
            if (n < left) {
                c->head_off += (uint32_t)n;
                return;
            }
            n -= left;
            c->head_seg++;
            c->head_off = 0;
        }
        c->head = r->next;
        if (!c->head)
            c->tail = NULL;
        c->head_seg = 0;
        c->head_off = 0;
        c->nresps--;
        resp_recycle(c, r);
    }
}

static size_t conn_backlog(const struct conn *c)
{
    size_t total = 0;
    for (const struct resp *r = c->head; r; r = r->next)
        for (uint32_t i = 0; i < r->nsegs; i++)
            total += r->segs[i].len;
    return total;
}

/* Transient engine bytes (eng_value.transient) still queued when the
 * socket pushed back, or behind a slot that is not complete: copy them
 * now, before the event loop runs anything that may change them.  The
 * common case writes them at once and copies nothing; replies held for a
 * write in flight (conn_holds_ready) are copied. */
static void conn_keep_transient(struct conn *c)
{
    for (struct resp *r = c->head; r; r = r->next) {
        for (uint32_t i = r == c->head ? c->head_seg : 0; i < r->nsegs; i++) {
            struct out_seg *s = &r->segs[i];
            if (!s->transient)
                continue;
            char *copy = malloc(s->len ? s->len : 1);
            if (!copy)
                oom_exit();
            memcpy(copy, s->ref, s->len);
            s->ref = copy;
            s->handle = copy;
            s->transient = false;
            s->copied = true;
        }
    }
    c->transient = 0;
}

/* One TLS record of the first bytes of iov (want in all): at most
 * ssl_wbuf_size, gathered into the server's buffer unless the first piece
 * holds them.  Returns how many bytes leave the reply queue, or -1.  A
 * record the socket did not take whole is TLS's from then on: it must be
 * given exactly these bytes again, so they are copied (tls_held) and leave
 * the queue as if written, whatever happens to the queue meanwhile;
 * *waits says the socket pushed back. */
static ssize_t conn_tls_write(struct conn *c, const struct iovec *iov, size_t want,
                              bool *waits)
{
    struct server *s = c->srv;
    size_t cap = s->settings.tls.wbuf_size;
    size_t n = want < cap ? want : cap;
    const char *p = iov[0].iov_base;
    *waits = false;
    if (iov[0].iov_len < n) {
        if (s->tls_gather == NULL && (s->tls_gather = malloc(cap)) == NULL) {
            errno = ENOMEM;
            return -1;
        }
        size_t off = 0;
        for (int i = 0; i < c->niov && off < n; i++) {
            size_t take = iov[i].iov_len < n - off ? iov[i].iov_len : n - off;
            memcpy(s->tls_gather + off, iov[i].iov_base, take);
            off += take;
        }
        p = s->tls_gather;
    }
    ssize_t w = tls_write(c->tls, p, n);
    if (w >= 0 || errno != EAGAIN)
        return w;
    *waits = true;
    if ((c->tls_held = malloc(n)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(c->tls_held, p, n);
    c->tls_held_len = n;
    return (ssize_t)n;
}

/* The held record again: 1 once TLS wrote it, 0 while the socket still
 * pushes back, -1 on an error. */
static int conn_tls_retry(struct conn *c)
{
    ssize_t w = tls_write(c->tls, c->tls_held, c->tls_held_len);
    if (w < 0 && errno == EAGAIN)
        return 0;
    if (w < 0)
        return -1;
    c->srv->stats.bytes_written += c->tls_held_len;
    free(c->tls_held);
    c->tls_held = NULL;
    c->tls_held_len = 0;
    return 1;
}

/* Write as much of the completed head of the queue as the socket takes
 * (nothing when hold: conn_holds_ready), keep what stays queued valid and
 * set the connection's events.  Every path that queues a read's reply ends
 * here before returning to the event loop, which is what makes transient
 * values safe. */
static void conn_write_out(struct conn *c, bool hold)
{
    struct iovec iov[IOV_BATCH];
    if (!hold) {
        c->deferred_flushes = 0;   /* held: conn_write_final still has them to write */
        conn_hold_disarm(c);
    }
    while (!c->closing && !hold) {
        if (c->tls_held != NULL) {
            int r = conn_tls_retry(c);
            if (r < 0) {
                c->close_reason = "error";
                conn_close(c);
                return;
            }
            if (r == 0) {
                c->out_blocked = true;
                break;
            }
            c->out_blocked = false;
        }
        /* Drop empty completed slots (noreply) without a syscall. */
        conn_consume_output(c, 0);
        size_t want = conn_build_iov(c, iov, IOV_BATCH);
        if (want == 0)
            break;
        if (c->tls) {
            bool waits;
            ssize_t w = conn_tls_write(c, iov, want, &waits);
            if (w < 0) {
                c->close_reason = "error";
                conn_close(c);
                return;
            }
            if (!waits)
                c->srv->stats.bytes_written += (uint64_t)w;
            conn_consume_output(c, (size_t)w);
            c->out_blocked = waits;
            if (waits)
                break;
            continue;
        }
        ssize_t w = writev(c->fd, iov, c->niov);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->out_blocked = true;
                break;
            }
            c->close_reason = "error";
            conn_close(c);
            return;
        }
        c->srv->stats.bytes_written += (uint64_t)w;
        conn_consume_output(c, (size_t)w);
        if ((size_t)w < want) {
            c->out_blocked = true;
            break;
        }
        c->out_blocked = false;
    }
    if (c->closing)
        return;
    if (c->transient > 0) {
        if (c->head)
            conn_keep_transient(c);
        c->transient = 0;
    }
    if (!c->head && c->tls_held == NULL)
        c->out_blocked = false;
    /* Closing after a protocol violation waits only for the replies before
     * the last flush point; the rest is dropped. */
    /* (A streamed reply is never drained before its last piece.) */
    bool drained = c->stream == NULL && c->tls_held == NULL &&
                   (c->discard ? !c->head || c->head->seq >= c->flush_seq
                               : !c->head && c->inflight == 0);
    if (c->close_after_write && drained) {
        conn_close(c);
        return;
    }
    short want = 0;
    /* A streamed reply ready for its next piece makes it on the next pass
     * (the socket is writable: at once).  One waiting behind a reply that
     * is not written yet (a write in flight) is not: that reply's
     * completion flushes and comes back here. */
    bool write_waits_read = tls_write_waits_read(c->tls);
    bool read_waits_write = tls_read_waits_write(c->tls);
    if ((c->out_blocked && !write_waits_read) || conn_stream_wants(c) || read_waits_write)
        want |= EV_WRITE;
    c->paused = c->out_blocked && conn_backlog(c) > OUT_BACKLOG_MAX;
    if (!c->paused && !c->close_after_write && !c->blocked && !c->throttled && !c->stream)
        want |= EV_READ;
    if (write_waits_read)
        want |= EV_READ;          /* the write goes on once TLS read what it waits for */
    if (read_waits_write)
        want &= ~EV_READ;         /* ...and a read once the socket takes bytes: no spinning */
    conn_set_events(c, want);
    /* Input TLS already decrypted is not the socket's to announce. */
    if ((want & EV_READ) && tls_pending(c->tls) > 0)
        event_active(c->ev, EV_READ, 0);
}

static void conn_flush(struct conn *c)
{
    conn_write_out(c, false);
}

/* Replies that were ready right after a batch of input was parsed, ahead
 * of a write of the same batch still in flight (a pipelined get before a
 * set, its key another), wait to leave with that write's reply: its
 * acknowledgement's completion writes them all in the loop pass's one
 * submission (flush_queued).  Written at once they would cost a second
 * write per batch, and a second wake-up of the client, which the writer
 * pays in the kernel; a client that sends more as replies come would also
 * split its next requests in two smaller batches.  The client asked for
 * both replies in one go and gets the write's reply no later.
 * Not while the connection closes, drops input, is inside a data block,
 * its socket pushes back or it runs TLS (those paths write as before),
 * nor behind a read the engine holds back (a lease, a unit not rebuilt
 * yet), which may take long: only behind a mutation, and for at most
 * HOLD_READY_MAX_MS (conn_hold_arm). */
static bool conn_holds_ready(const struct conn *c)
{
    return c->mutations_pending > 0 && !c->closing && !c->close_after_write && !c->discard &&
           !c->holding && !c->out_blocked && c->stream == NULL && c->tls_held == NULL &&
           c->tls == NULL && conn_backlog(c) <= OUT_BACKLOG_MAX;
}

/* The hold's bound ran out before the write completed: what is ready
 * goes now. */
static void conn_hold_expired(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    (void)fd;
    (void)what;
    if (!c->closing)
        conn_flush(c);
    conn_release(c);
}

/* Is the hold's bound running? */
static bool conn_hold_armed(const struct conn *c)
{
    return c->hold_ev != NULL && evtimer_pending(c->hold_ev, NULL);
}

/* Start the hold's bound (HOLD_READY_MAX_MS) if a reply is ready to wait
 * and the bound is not already running: it counts from the first reply
 * held.  Without memory for the timer, nothing is held. */
static void conn_hold_arm(struct conn *c)
{
    if (conn_hold_armed(c) || c->closing || c->head == NULL || !resp_writable(c, c->head))
        return;
    if (c->hold_ev == NULL)
        c->hold_ev = evtimer_new(c->srv->base, conn_hold_expired, c);
    struct timeval tv = { 0, HOLD_READY_MAX_MS * 1000 };
    if (c->hold_ev == NULL || evtimer_add(c->hold_ev, &tv) != 0)
        conn_flush(c);
}

/* Any write ends the hold. */
static void conn_hold_disarm(struct conn *c)
{
    if (conn_hold_armed(c))
        evtimer_del(c->hold_ev);
}

/* ---- input ---- */

/* Make room for more input: move unread bytes to the front, grow if full. */
static bool conn_make_room(struct conn *c)
{
    if (c->rstart > 0) {
        size_t n = c->rend - c->rstart;
        memmove(c->rbuf, c->rbuf + c->rstart, n);
        c->rstart = 0;
        c->rend = n;
    }
    if (c->rend < c->rcap)
        return true;
    size_t ncap = c->rcap * 2;
    char *n = realloc(c->rbuf, ncap);
    if (!n)
        return false;
    c->rbuf = n;
    c->rcap = ncap;
    return true;
}

static void conn_choose_protocol(struct conn *c)
{
    /* memcached with -Y speaks only ASCII; here -Y also takes binary
     * clients, which authenticate with SASL PLAIN (proto_bin.c).  -S is
     * binary only: ASCII bytes are a bad magic byte, as in memcached. */
    if ((unsigned char)c->rbuf[c->rstart] == 0x80 || c->srv->settings.sasl_enabled)
        c->process = proto_bin_process;
    else
        c->process = proto_text_process;
}

/* read() into the free tail of the input buffer, or TLS's read. */
static ssize_t conn_recv(struct conn *c, size_t room)
{
    if (c->tls == NULL)
        return read(c->fd, c->rbuf + c->rend, room);
    return tls_read(c->tls, c->rbuf + c->rend, room);
}

/* One more read while memcached's buffer would still be filling (read_more):
 * true if bytes came. */
static bool conn_read_some(struct conn *c)
{
    c->read_more = false;
    if (c->rend == c->rcap && !conn_make_room(c))
        return false;
    size_t room = c->rcap - c->rend;
    ssize_t n = conn_recv(c, room);
    if (n <= 0)
        return false;               /* drained, the end or an error: conn_read sees it */
    c->srv->stats.bytes_read += (uint64_t)n;
    c->rend += (size_t)n;
    c->read_more = (size_t)n == room;
    return true;
}

/* A flush point (memcached writes here: after a get, a noop, ...) makes
 * the replies before it final: flush_seq, which decides what a later
 * protocol error drops, is already set.  When they are written is ours to
 * choose: memcached writes each get's reply with its own sendmsg, one
 * system call per request of a pipelining client; we write once the batch
 * of input is parsed (every caller of conn_process flushes before it
 * returns to the event loop, which keeps transient values valid, engine.h),
 * or every FLUSH_DEFER_MAX flush points, so a long pipeline of gets still
 * streams.  Closing or holding connections write at once, as before. */
static bool flush_point_writes_now(struct conn *c)
{
    return c->holding || c->discard || c->close_after_write ||
           ++c->deferred_flushes >= FLUSH_DEFER_MAX;
}

/* Run the protocol over buffered input until it needs more bytes, blocks
 * behind a write in flight, or asks to close. */
/* memcached parses out of a 16 KB read buffer: a line it finds whole, a
 * line it finds too long, and where it writes its replies (whenever it
 * must read more in the middle of a line) depend on where that buffer
 * ends.  We show the protocol the same window of input: at most 16 KB
 * from where memcached's buffer would start, which is after the last
 * read at a line boundary, after a data block read straight into its
 * item, after dropped data; a line longer than the window (a long
 * multi-get) makes it grow, as memcached's buffer does. */
static void conn_process(struct conn *c)
{
    while (!c->closing && !c->close_after_write && !c->blocked && !c->stream) {
        if (c->inflight >= CONN_MAX_INFLIGHT ||
            (c->inflight > 0 && (c->nresps >= CONN_MAX_QUEUED || c->held_bytes > OUT_BACKLOG_MAX))) {
            c->throttled = true;
            break;
        }
        size_t avail = c->rend - c->rstart;
        if (c->swallow > 0) {
            /* Beyond its buffer memcached drops data read straight from
             * the socket, then has no input left and writes. */
            bool direct = c->in_data || c->swallow > c->win_left;
            size_t n = avail < c->swallow ? avail : c->swallow;
            c->rstart += n;
            c->swallow -= n;
            c->win_left = n < c->win_left ? c->win_left - n : 0;
            if (c->swallow > 0) {
                c->holding = true;    /* memcached writes nothing while it drops data */
                c->in_data = direct;
                break;
            }
            if (direct) {
                c->in_data = false;
                c->holding = false;
                c->win_left = READ_CHUNK;
                conn_flush_point(c);
                c->flush_now = false;
                conn_flush(c);
            }
            continue;
        }
        if (avail == 0) {
            /* Our input ended inside memcached's buffer but the socket
             * has more: memcached would have read it in the same read and
             * parsed on without writing.  Read first (conn_read). */
            if (c->read_more && c->win_left > 0 && !c->in_data && conn_read_some(c))
                continue;
            if (!c->discard) {
                c->holding = false;   /* out of requests: everything may go */
                c->flush_seq = c->next_seq;
            }
            if (!c->in_data)
                c->win_left = READ_CHUNK;     /* the next read fills an empty buffer */
            break;
        }
        if (c->watching) {
            c->rstart = c->rend;      /* a watcher's input is dropped, as memcached's */
            c->holding = false;
            c->flush_seq = c->next_seq;
            break;
        }
        if (!c->process)
            conn_choose_protocol(c);
        c->looked = false;            /* a new request: it has looked nothing up */
        size_t used = 0;
        size_t view = c->in_data || avail < c->win_left ? avail : c->win_left;
        c->hold_request = false;
        bool waited = c->in_data;
        enum conn_parse pr = c->process(c, c->rbuf + c->rstart, view, &used);
        c->rstart += used;
        c->win_left = used < c->win_left ? c->win_left - used : 0;
        if (used > 0)
            c->last_cmd = c->srv->clock.epoch + (time_t)c->srv->clock.now;
        if (waited && used > 0) {
            /* memcached reads the rest of a data block straight into the
             * item: it then has no input left, writes what it has and
             * reads a new buffer. */
            c->in_data = false;
            c->holding = false;
            c->win_left = READ_CHUNK;
            c->read_more = true;      /* ...with a read of its own, after this one */
            conn_flush_point(c);
        }
        if (c->flush_now) {
            c->flush_now = false;
            if (flush_point_writes_now(c))
                conn_flush(c);
        }
        if (pr == CONN_PARSE_OK)
            continue;
        if (pr == CONN_PARSE_NEED_MORE && c->hold_request && !waited && c->read_more &&
            view == avail && view < c->win_left && conn_read_some(c))
            continue;                 /* memcached's buffer would hold more of it */
        if (pr == CONN_PARSE_NEED_MORE && c->hold_request) {
            c->in_data = true;        /* the rest of the block is read directly */
            if (view < avail)
                continue;
            if (!c->discard)
                c->holding = true;
            break;
        }
        if (pr == CONN_PARSE_NEED_MORE) {
            /* (the line may just not be read yet, as above) */
            if (c->read_more && view == avail && view < c->win_left && conn_read_some(c))
                continue;
            /* Within a line memcached writes all it has and reads on; a
             * partial line over 2048 bytes (a long multi-get, or the
             * protocol would have closed) moves it to a growing buffer
             * into which it reads all there is before parsing on. */
            if (!c->discard) {
                c->holding = false;
                c->flush_seq = c->next_seq;
            }
            c->win_left = view > TEXT_LINE_MAX ? SIZE_MAX / 2 : READ_CHUNK;
            if (view < avail) {
                conn_flush(c);
                continue;
            }
            break;
        }
        if (!c->discard)
            c->holding = false;
        if (pr == CONN_PARSE_BLOCKED)
            c->blocked = true;
        else if (pr == CONN_PARSE_CLOSE)
            c->close_after_write = true;
        break;
    }
    if (c->rstart == c->rend)
        c->rstart = c->rend = 0;
}

/* The peer closed its side.  memcached has written what it could before
 * it read the end (unless it was inside a data block) and closes. */
static void conn_eof(struct conn *c)
{
    if (!c->holding)
        c->flush_seq = c->next_seq;
    c->discard = true;
    c->holding = true;
    c->close_after_write = true;
}

static void conn_read(struct conn *c)
{
    size_t unparsed = 0;
    /* In a long multi-get memcached reads all there is before it parses. */
    bool big = c->win_left > READ_CHUNK;
    for (int round = 0; (round < 8 || big) && !c->closing; round++) {
        if (c->swallow > 0 && c->rstart == c->rend)
            c->rstart = c->rend = 0;
        if (c->rend == c->rcap && !conn_make_room(c)) {
            c->close_reason = "error";
            conn_close(c);
            return;
        }
        size_t room = c->rcap - c->rend;
        ssize_t n = conn_recv(c, room);
        c->read_more = n > 0 && (size_t)n == room;
        if (n == 0) {
            conn_process(c);
            conn_eof(c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* drained: also what was left waiting for more input (read_more) */
                conn_process(c);
                return;
            }
            c->close_reason = "error";
            conn_close(c);
            return;
        }
        c->srv->stats.bytes_read += (uint64_t)n;
        c->rend += (size_t)n;
        unparsed += (size_t)n;
        if (c->rend == c->rcap && (big || unparsed < READ_CHUNK))
            continue;
        unparsed = 0;
        conn_process(c);
        big = c->win_left > READ_CHUNK;
        if (c->closing || c->close_after_write || c->blocked || c->throttled || c->stream)
            return;
        /* A short read means the socket is drained (TLS: unless it read
         * ahead more than one record, which it says). */
        if (c->rend < c->rcap && tls_pending(c->tls) == 0)
            return;
    }
    if (unparsed)
        conn_process(c);
}

static void conn_event(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    server_clock_update(c->srv);  /* requests see the current second */
    if ((what & EV_WRITE) && tls_read_waits_write(c->tls) && !c->closing && !c->paused)
        conn_read(c);             /* a TLS read waited for the socket to take bytes */
    if ((what & EV_WRITE) && !c->closing) {
        conn_flush(c);
        conn_stream_step(c);
        if (!c->closing && !c->paused && !c->blocked && !c->throttled)
            conn_process(c);
    }
    if ((what & EV_READ) && !c->closing && !c->paused)
        conn_read(c);
    if (!c->closing) {
        bool hold = conn_holds_ready(c);
        conn_write_out(c, hold);
        if (hold)
            conn_hold_arm(c);
    }
    conn_release(c);
}

bool conn_authenticated(const struct conn *c)
{
    return c->authenticated;
}

void conn_set_authenticated(struct conn *c)
{
    c->authenticated = true;
}

void conn_clear_authenticated(struct conn *c)
{
    c->authenticated = false;
}

struct mcsasl *conn_sasl(struct conn *c)
{
    if (c->sasl == NULL)
        c->sasl = mcsasl_new();
    return c->sasl;
}

void conn_kick(struct conn *c)
{
    conn_flush(c);
    conn_release(c);
}

/* stats conns: listening sockets, then connections, by descriptor. */
static void put_sockaddr(struct resp *r, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        resp_printf(r, "tcp:%s:%d", host, port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
        port = ntohs(in->sin6_port);
        resp_printf(r, "tcp6:[%s]:%d", host, port);
    } else if (ss->ss_family == AF_UNIX) {
        /* a listener's or its connection's local name; a client's is
         * usually unnamed */
        const struct sockaddr_un *un = (const struct sockaddr_un *)ss;
        resp_printf(r, "unix:%.*s", (int)strnlen(un->sun_path, sizeof(un->sun_path)),
                    un->sun_path);
    } else {
        resp_str(r, "unknown");
    }
}

void conn_stats_conns(struct conn *c, struct resp *r)
{
    struct server *s = conn_server(c);
    time_t now = clock_wall(&s->clock);
    int maxfd = 0;
    for (int i = 0; i < s->nlisten; i++)
        if (s->listen_fd[i] > maxfd)
            maxfd = s->listen_fd[i];
    for (struct conn *x = s->conns; x; x = x->next)
        if (x->fd > maxfd)
            maxfd = x->fd;
    for (int fd = 0; fd <= maxfd; fd++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        memset(&ss, 0, sizeof(ss));
        for (int i = 0; i < s->nlisten; i++) {
            if (s->listen_fd[i] != fd || getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
                continue;
            resp_printf(r, "STAT %d:addr ", fd);
            put_sockaddr(r, &ss);
            resp_printf(r, "\r\nSTAT %d:state conn_listening\r\nSTAT %d:secs_since_last_cmd %ld\r\n",
                        fd, fd, (long)(now - s->started));
        }
        for (struct conn *x = s->conns; x; x = x->next) {
            if (x->fd != fd)
                continue;
            resp_printf(r, "STAT %d:addr ", fd);
            len = sizeof(ss);
            memset(&ss, 0, sizeof(ss));     /* an unnamed Unix peer fills no path */
            if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
                put_sockaddr(r, &ss);
            resp_printf(r, "\r\nSTAT %d:listen_addr ", fd);
            len = sizeof(ss);
            memset(&ss, 0, sizeof(ss));
            if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
                put_sockaddr(r, &ss);
            const char *state = x == c ? "conn_parse_cmd"
                              : x->watching ? "conn_watch"
                              : x->swallow ? "conn_swallow"
                              : x->holding ? "conn_nread"
                              : x->out_blocked ? "conn_mwrite"
                              : x->close_after_write ? "conn_closing" : "conn_waiting";
            resp_printf(r, "\r\nSTAT %d:state %s\r\nSTAT %d:secs_since_last_cmd %ld\r\n", fd,
                        state, fd, (long)(now - x->last_cmd));
        }
    }
    resp_str(r, "END\r\n");
}

/* Close every connection (server shutdown). */
void conn_close_all(struct server *s)
{
    while (s->conns) {
        struct conn *c = s->conns;
        /* Replies held for a write still in flight (conn_holds_ready)
         * are final: they go if the socket takes them. */
        if (c->mutations_pending > 0 && c->tls == NULL && !c->closing)
            conn_flush(c);
        c->close_reason = "shutdown";
        conn_close(c);
        conn_release(c);
    }
    flush_queued(-1, 0, s);      /* releases what the queue held */
    if (s->flush_ev) {
        event_free(s->flush_ev);
        s->flush_ev = NULL;
    }
}

/* At shutdown, once the engine is gone and calls nothing back: frees the closed
 * connections still waiting for it (a read parked on units a recovery
 * never rebuilt, a write whose acknowledgements never came).  Their
 * completions are dropped with the engine, so nothing refers to them. */
void conn_free_closed(struct server *s)
{
    struct conn *c = s->closed;
    while (c) {
        struct conn *next = c->next;
        if (!c->flush_queued && !c->wr.listed) {
            c->inflight = 0;
            c->mutations_pending = 0;
            conn_destroy(c);
        }
        c = next;
    }
}
