/* px_meta.c - cocytus-proxy: memcached's meta commands (mg ms md ma me mn).
 *
 * Design.  The binary protocol the proxy speaks to the servers cannot
 * carry what the meta commands answer (TTL left, last access, hit-before,
 * the stale/win/recache state), so a meta command is not translated: it is
 * forwarded as the client sent it, over a text connection of its own to
 * the server that owns the key's slot (one per worker and server, opened
 * on first use).  The key is the decoded one for routing (a base64 key,
 * flag b, is routed by its bytes, as the servers and libcocytus do); the
 * request is checked first with the server's own pure parser
 * (proto_meta.c), so malformed input is answered here exactly as a server
 * would and the servers only ever see complete requests.
 *
 * Each forwarded request is followed by an "mn": the server answers it
 * after the request's own reply, so the bytes before "MN" are that reply,
 * whatever the request's quiet mode (q) left out.  Quiet replies and their
 * order are therefore the server's own, and the client's requests keep
 * their order through the client's request FIFO (px_client.c), meta and
 * classic alike; the client's own mn is answered by the proxy in that
 * order.  A MOVED reply (the map changed) asks for a new map and sends the
 * request again to the server the MOVED names (it was not applied), up to
 * PX_META_MOVES times.
 *
 * Failures follow the classic path's rules (px_route.c).  A connection
 * whose oldest request has waited timeout_ms for its reply (a stopped or
 * hung server), or that did not connect in timeout_ms, is closed like a
 * lost one (unless it holds a request that cannot be sent twice and has
 * time left: mconn_hold), and its server is then silent as a classic backend is
 * (px_route.c, "A silent server"): one still open to it is closed as soon
 * as a newer map gives the slot of its oldest request to another server
 * (px_meta_leave_silent).  The requests in flight on a lost connection that are harmless
 * twice (mg without N or R, ms in set or replace mode without C, md
 * without C, me) wait a back-off while the map is fetched again and go
 * to their slot's owner then, until the request's deadline or
 * max_attempts tries; the others fail with a SERVER_ERROR saying they may
 * have been applied.  So a dead or stopped server holds only the meta
 * commands routed to it, and those for at most the deadline.
 *
 * Order.  A client's meta and classic requests travel on different server
 * connections, so one could overtake the other (an mg right after a set
 * would miss it).  A request therefore waits, in the worker's list of
 * deferred launches, while an earlier request of its client of the other
 * kind is unanswered, or an earlier one of its client still waits there
 * (launches keep the client's order); it is launched from a worker event
 * once that is no longer so.  Other clients' requests never wait behind
 * it: one client's request held by a stopped server holds only that
 * client.  Meta after meta keeps its order on
 * one server's connection; when the map changes under a pipelining client
 * (an earlier meta command for the same slot still queued at the old
 * owner, or waiting to be sent again, and this one would go elsewhere),
 * the later one waits in the retry list until every earlier one for its
 * slot is answered or queued on the connection it would take
 * (held_by_earlier), as classic requests do (px_route.c, "Order").  A
 * worker with no meta command in flight adds nothing to the classic path.
 *
 * The client side of a request is an ordinary px_req with one px_op (kept
 * in flight, so a client that goes away only detaches it, px_client.c);
 * the op's wire bytes are unused.
 *
 * `lru_crawler metadump` (memcached-tool's keys and dump) and `stats
 * cachedump` (libmemcached's memcdump) ride the same machinery: the proxy
 * stores nothing, so the request goes to every server of its map, one
 * px_op and mop each, pinned to that server (not routed by a key; a try
 * after a lost connection or an ERROR goes to whoever owns that server's
 * first slot now, follow_home), each on a text connection of its own
 * (dumps), closed after its reply, and written once the exchange of
 * --server-auth (mconn_auth) is over.  The listing streams (dump_stream):
 * the op whose earlier ops are all done reads its server and hands its
 * key lines to the client as they arrive; the others are not read (their
 * servers wait, their socket buffers full) until their turn, and the
 * streaming one stops reading while its client has PX_OUT_HIGH unsent, so
 * that a listing of millions of keys costs the proxy a few buffers, not
 * the listing.  A connection gets its own because a listing that waits
 * for its client must not hold up another's.  A server writes its dump a
 * piece per event-loop pass, behind its other work, so a dumps
 * connection that is read is timed out after dump_timeout_ms without a
 * byte, longer than -t (one that waits for its client is not).  The END
 * of each server is dropped, and one END ends the listing
 * (px_text_finish).  A server that fails, refuses or does not answer in
 * time adds one "SERVER_ERROR metadump of <server> failed: ..." line,
 * kept in its op's frag until its turn (memcached-tool
 * skips lines that are not key= lines and reads until END, which must
 * come; memcdump stops at it and says the dump failed).  A metadump is a
 * kind of its own for ordering (launch_waits): it waits for its client's
 * earlier requests of the other kinds and for its earlier listings (one
 * set of listing connections per client), and their later ones wait for
 * it, so a set before it is in the dump and a delete after it is not
 * applied before it. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "bin_wire.h"
#include "proto_meta.h"
#include "printable.h"
#include "px.h"

#define PX_META_MOVES 3
#define PX_TEXT_META (-2)           /* px_req.text_cmd of a meta command */
#define PX_DUMP_TIMEOUT_TIMES 5     /* a dump's timeout: this many -t (at least -D) */
#define SENTINEL "mn\r\n"
#define SENTINEL_REPLY "MN"

/* What a meta command's reply counts, as memcached counts it: the
 * command and the flags that change the counters. */
struct mop_counting {
    enum meta_cmd cmd;
    bool touch;                     /* T */
    bool vivify;                    /* N */
    bool cas;                       /* C */
    bool decr;                      /* ma in decrement mode */
};

/* One meta command in flight to a server. */
struct px_mop {
    struct px_mop *next;
    struct px_worker *w;
    struct px_op *op;               /* the client's side (op->req NULL: client gone) */
    struct px_mconn *conn;          /* queued on this connection, else NULL */
    int moves;                      /* MOVED replies followed */
    int tries;                      /* connections it was sent on */
    bool retry_lost;                /* harmless twice: may go again after a loss */
    bool held;                      /* waited behind an earlier one (counted once) */
    bool parked;                    /* in the retry list only for the order rule */
    bool has_to;                    /* a MOVED named where it goes next: to */
    bool pinned;                    /* a metadump's: always to `to` */
    bool has_home;                  /* pinned, and op->slot is one of its server's slots
                                       when the dump began (follow_home) */
    struct lc_addr to;
    struct mop_counting counting;   /* what its reply counts (count_reply) */
    int64_t sent_ms;                /* queued on its current connection */
    int64_t retry_at_ms;            /* waiting: launched again at */
    size_t nwire;
    char wire[];                    /* the request as the client sent it */
};

/* --server-auth on a text connection.  The pair goes only to a server
 * that asks for it (one without -Y would store the ASCII set as the item
 * "auth", password included): a meta no-op goes first, answered MN
 * without -Y and CLIENT_ERROR unauthenticated with it, in which case the
 * authentication set follows.  The connection's requests wait in out
 * until the exchange is over. */
enum mconn_auth { MA_NONE, MA_PROBE, MA_SET };

/* A text connection to one server. */
struct px_mconn {
    struct px_mconn *next;
    struct px_worker *w;
    struct lc_addr addr;
    char name[LC_ADDR_TEXT_MAX];
    int fd;
    struct px_at at;                /* the address fd is to */
    bool connected;                 /* and, under TLS, the handshake done */
    struct tls_conn *tls;           /* --backend-tls-*: its bytes move through TLS */
    int64_t connect_started_ms;
    bool broken;                    /* a send failed: the read event ends it */
    enum mconn_auth auth;           /* --server-auth: the exchange under way, before
                                       out is written */
    char greet[600];                /* its request: mn, then the authentication set */
    size_t greet_len, greet_off;
    bool dumps;                     /* carries one listing op (dump_stream) */
    bool paused;                    /* dumps: not read until its client catches up */
    bool refused;                   /* the server refused our credentials */
    size_t scanned;                 /* in: bytes looked through for the MN line */
    int64_t last_rx_ms;             /* bytes last arrived (a long reply is progress) */
    struct px_backend *be;          /* the worker's backend for addr: whether the
                                       server is silent (px_route.c) */
    int64_t hold_until_ms;          /* not 0: past the timeout, kept open until then
                                       for a request that cannot be sent twice
                                       (mconn_hold) */
    struct event *rev, *wev;
    struct evbuffer *out;
    struct px_rbuf in;
    struct px_mop *head, *tail;     /* sent or queued, in order */
};

/* A launch that waits for earlier requests of the other kind. */
struct px_defer {
    struct px_defer *next;
    struct px_mop *mop;             /* a meta command, or */
    struct px_op *op;               /* one op of a classic request */
};

struct px_meta {
    struct px_mconn *conns;
    size_t inflight;                /* meta commands forwarded, not answered */
    struct px_mop *whead, *wtail;   /* waiting to be sent again, in order */
    struct px_defer *dhead, *dtail;
    struct event *kick;             /* launches what no longer waits */
    unsigned pass;                  /* kicks run, to mark clients found waiting */
    bool auth_logged;               /* a refusal of our credentials was logged */
    bool tls_logged;                /* a failed TLS handshake was logged */
};

/* ---- the client's side ---- */

static void local_reply(struct px_req *rq, const char *text, size_t n)
{
    struct evbuffer *out = px_req_sink(rq);
    if (out != NULL && n > 0)
        evbuffer_add(out, text, n);
}

/* A request finished: launches that waited for it may go (on_kick, from
 * the event loop, not from inside the reply path). */
void px_meta_kick(struct px_worker *w)
{
    if (w->meta != NULL && w->meta->dhead != NULL)
        event_active(w->meta->kick, EV_TIMEOUT, 0);
}

/* A server's metadump or cachedump reply: its lines are kept for the
 * client's reply, without the END; anything else (ERROR from a process
 * that serves no keys, the proxy's SERVER_ERROR for a lost server) becomes
 * one SERVER_ERROR line naming the server. */
static void dump_keep(struct px_worker *w, struct px_op *op, const char *server,
                      const char *what, const char *reply, size_t n)
{
    static const char end[] = "END\r\n";
    size_t nend = sizeof(end) - 1;
    if (op->frag == NULL)
        op->frag = evbuffer_new();
    if (op->frag == NULL) {
        px_count(&w->st.errors, 1);
        return;
    }
    if (n >= nend && memcmp(reply + n - nend, end, nend) == 0 &&
        (n == nend || reply[n - nend - 1] == '\n')) {
        if (evbuffer_add(op->frag, reply, n - nend) < 0)
            px_count(&w->st.errors, 1);
        return;
    }
    /* its last line (a listing that stopped in the middle ends with what
     * stopped it), printable, without a SERVER_ERROR of its own */
    size_t start = n;
    while (start > 0 && (reply[start - 1] == '\n' || reply[start - 1] == '\r'))
        start--;
    while (start > 0 && reply[start - 1] != '\n')
        start--;
    reply += start;
    n -= start;
    char why[161];
    size_t i = n > 13 && memcmp(reply, "SERVER_ERROR ", 13) == 0 ? 13 : 0, len = 0;
    while (i + len < n && reply[i + len] != '\r' && reply[i + len] != '\n')
        len++;
    printable_copy(why, sizeof(why), reply + i, len);
    px_count(&w->st.errors, 1);
    fprintf(stderr, "cocytus-proxy: %s of %s failed: %s\n", what, server, why);
    evbuffer_add_printf(op->frag, "SERVER_ERROR %s of %s failed: %s\r\n", what, server, why);
}

static void mconn_resume(struct px_mconn *m);
static int dump_timeout_ms(const struct px_worker *w);

/* Whether a listing's op streams: every op before it in map order is
 * done, so its lines may go to the client as they arrive (a client that
 * has gone takes nothing: its lines are read and dropped). */
static bool dump_streaming(const struct px_op *op)
{
    const struct px_req *rq = op->req;
    if (rq == NULL)
        return true;
    for (unsigned i = 0; i < rq->nops && rq->ops[i] != op; i++)
        if (rq->ops[i] != NULL && rq->ops[i]->state != OP_DONE)
            return false;
    return true;
}

/* Whether the client's side of a listing holds PX_OUT_HIGH bytes or more
 * unsent (its output, or its request's reply while earlier requests are
 * not answered): its server is then not read until it drains. */
static bool dump_sink_full(struct px_req *rq, size_t high)
{
    struct evbuffer *out = rq ? px_req_sink(rq) : NULL;
    return out != NULL && evbuffer_get_length(out) >= high;
}

/* A listing's op made progress or got its turn: its retry budget counts
 * from now, since it lasts as long as its client takes to read. */
static void dump_fresh_deadline(struct px_op *op, const struct px_worker *w)
{
    int64_t fresh = px_now_ms() + dump_timeout_ms(w);
    if (op->deadline_ms < fresh)
        op->deadline_ms = fresh;
}

/* Whether a listing's op is out of time: only one whose turn has come
 * (one that waits for it is bounded by its tries alone). */
static bool dump_out_of_time(const struct px_mop *mop, int64_t now_ms)
{
    return now_ms >= mop->op->deadline_ms && dump_streaming(mop->op);
}

/* An op's kept lines (error lines) to the client, a cachedump's up to its
 * limit. */
static void dump_move_frag(struct px_req *rq, struct px_op *op, struct evbuffer *out)
{
    if (rq->dump_limit == 0) {
        evbuffer_add_buffer(out, op->frag);
        return;
    }
    while (evbuffer_get_length(op->frag) > 0) {
        struct evbuffer_ptr nl = evbuffer_search(op->frag, "\n", 1, NULL);
        size_t len = nl.pos < 0 ? evbuffer_get_length(op->frag) : (size_t)nl.pos + 1;
        if (rq->dump_sent < rq->dump_limit)
            evbuffer_remove_buffer(op->frag, out, len);
        else
            evbuffer_drain(op->frag, len);
        rq->dump_sent++;
    }
}

/* A listing's op is done: the lines kept by the ops done after it (error
 * lines of servers that failed meanwhile) go out in map order, and the
 * first op not done starts streaming: its connection is read again. */
static void dump_advance(struct px_req *rq)
{
    struct evbuffer *out = px_req_sink(rq);
    for (unsigned i = 0; i < rq->nops; i++) {
        struct px_op *op = rq->ops[i];
        if (op == NULL)
            continue;
        if (op->frag != NULL && out != NULL && evbuffer_get_length(op->frag) > 0) {
            dump_move_frag(rq, op, out);
            px_client_mark_dirty(rq->c);
        }
        if (op->state != OP_DONE) {
            /* its budget counts from its turn if it waited for a retry,
             * from the resume if its server waited for it; not if its
             * server has said nothing since it was asked (stopped) */
            struct px_mop *mop = op->mop;
            if (mop != NULL && mop->conn == NULL)
                dump_fresh_deadline(op, rq->c->w);
            else if (mop != NULL && mop->conn->paused)
                mconn_resume(mop->conn);
            return;
        }
    }
}

/* The server's reply (or the proxy's error line) goes to the client. */
static void mop_finish(struct px_mop *mop, const char *reply, size_t n)
{
    struct px_op *op = mop->op;
    struct px_worker *w = mop->w;
    char server[LC_ADDR_TEXT_MAX] = "";
    const char *what = "";
    if (mop->pinned) {
        lc_addr_format(&mop->to, server, sizeof(server));
        what = mop->nwire > 12 && memcmp(mop->wire, "lru_crawler ", 12) == 0 ? "metadump"
                                                                               : "cachedump";
    }
    op->mop = NULL;
    free(mop);
    w->meta->inflight--;
    px_meta_kick(w);
    if (op->req == NULL) {
        px_op_free(op);
        return;
    }
    struct px_req *rq = op->req;
    op->state = OP_DONE;
    if (rq->text_cmd == PX_TEXT_DUMP) {
        dump_keep(w, op, server, what, reply, n);
        dump_advance(rq);
    } else {
        local_reply(rq, reply, n);
    }
    px_req_finish(rq);
}

static void mop_fail(struct px_mop *mop, const char *why)
{
    char line[LC_ADDR_TEXT_MAX + 160];
    int n = snprintf(line, sizeof(line), "SERVER_ERROR %s\r\n", why);
    px_count(&mop->w->st.errors, 1);
    mop_finish(mop, line, n > 0 && (size_t)n < sizeof(line) ? (size_t)n : 0);
}

/* ---- connections ---- */

static void mconn_free(struct px_mconn *m)
{
    if (m->rev)
        event_free(m->rev);
    if (m->wev)
        event_free(m->wev);
    tls_conn_free(m->tls);
    if (m->fd >= 0)
        close(m->fd);
    if (m->out)
        evbuffer_free(m->out);
    px_rbuf_free(&m->in);
    free(m);
}

/* Queues mop for a new launch at at_ms; bump says whether this is news
 * for the order check (px_route.c, "Order"): a mop put back, or held
 * again, changes nothing the check relies on. */
static void wait_push(struct px_meta *pm, struct px_mop *mop, int64_t at_ms, bool bump)
{
    if (bump)
        mop->w->route_gen++;
    mop->conn = NULL;
    mop->retry_at_ms = at_ms;
    mop->next = NULL;
    if (pm->wtail)
        pm->wtail->next = mop;
    else
        pm->whead = mop;
    pm->wtail = mop;
}

/* A request whose connection was lost: sent again later if that is
 * harmless and there is time left, else failed. */
static void mop_lost(struct px_mop *mop, const char *why, bool retry, bool sent)
{
    struct px_worker *w = mop->w;
    char line[LC_ADDR_TEXT_MAX + 128];    /* fits mop_fail's with its prefix */

    if (mop->op->req == NULL) {
        mop_finish(mop, NULL, 0);
        return;
    }
    if (!sent && !retry) {
        mop_fail(mop, why);             /* never written: nothing was applied */
        return;
    }
    if (sent && (!retry || !mop->retry_lost)) {
        snprintf(line, sizeof(line), "%s; the request may have been applied", why);
        mop_fail(mop, line);
        return;
    }
    int64_t now = px_now_ms();
    if (mop->tries >= w->px->opt.max_attempts ||
        (mop->pinned ? dump_out_of_time(mop, now) : now >= mop->op->deadline_ms)) {
        int64_t spent = now - (mop->op->deadline_ms -
                               (mop->pinned ? dump_timeout_ms(w) : w->px->opt.deadline_ms));
        snprintf(line, sizeof(line), "gave up after %d tries in %lld ms: %s", mop->tries,
                 (long long)spent, why);
        mop_fail(mop, line);
        return;
    }
    wait_push(w->meta, mop, now + px_backoff_ms(mop->tries), true);
}

/* Takes m out of the worker's list (before it is freed). */
static void mconn_unlink(struct px_mconn *m)
{
    for (struct px_mconn **pp = &m->w->meta->conns; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
}

/* The connection is gone: its requests are sent again or fail (retry
 * false: they all fail), the next one reconnects.  Before it connected,
 * or during --server-auth's exchange, none of them was written: even one
 * that cannot be sent twice goes again. */
static void mconn_lost(struct px_mconn *m, const char *what, bool retry)
{
    struct px_worker *w = m->w;
    mconn_unlink(m);
    if (retry)      /* the connection failed: it may have moved (a replaced node) */
        px_resolved_stale(w, &m->addr, m->connected ? NULL : &m->at);
    char why[LC_ADDR_TEXT_MAX + 64];
    snprintf(why, sizeof(why), "%s %.*s", what, (int)sizeof(m->name), m->name);
    if (retry && m->head != NULL)
        px_route_refresh(w, NULL, &m->addr, 0);   /* the map may have moved on */
    struct px_mop *mop = m->head;
    bool refused = m->refused;
    bool sent = m->connected && m->auth == MA_NONE;
    m->head = m->tail = NULL;
    /* none may point at m once it is freed: failing one can start the
     * client's next requests, whose order check reads the others' conn */
    for (struct px_mop *o = mop; o; o = o->next)
        o->conn = NULL;
    mconn_free(m);
    while (mop) {
        struct px_mop *next = mop->next;
        mop->next = NULL;
        if (refused)
            mop_fail(mop, why);     /* nothing was applied; trying again is refused again */
        else
            mop_lost(mop, why, retry, sent);
        mop = next;
    }
}

static void on_mconn_event(evutil_socket_t fd, short what, void *arg);

static struct px_mconn *mconn_open(struct px_worker *w, const struct lc_addr *a, bool dumps)
{
    struct px_mconn *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->w = w;
    m->addr = *a;
    m->dumps = dumps;
    m->be = px_backend_get(w, a);
    lc_addr_format(a, m->name, sizeof(m->name));
    m->fd = px_connect_start(w, a, &m->at, true);
    m->connect_started_ms = px_now_ms();
    m->last_rx_ms = m->connect_started_ms;
    m->out = evbuffer_new();
    if (m->be == NULL || m->fd < 0 || m->out == NULL) {
        mconn_free(m);
        return NULL;
    }
    m->rev = event_new(w->base, m->fd, EV_READ | EV_PERSIST, on_mconn_event, m);
    m->wev = event_new(w->base, m->fd, EV_WRITE, on_mconn_event, m);
    if (m->rev == NULL || m->wev == NULL || event_add(m->rev, NULL) < 0 ||
        event_add(m->wev, NULL) < 0) {
        mconn_free(m);
        return NULL;
    }
    if (w->px->has_server_auth) {
        m->greet_len = sizeof(SENTINEL) - 1;
        memcpy(m->greet, SENTINEL, m->greet_len);
        m->auth = MA_PROBE;
    }
    m->next = w->meta->conns;
    w->meta->conns = m;
    return m;
}

/* A listing's op gets a connection of its own (closed after its reply):
 * one that waits for its client must not hold up another listing. */
static struct px_mconn *mconn_get(struct px_worker *w, const struct lc_addr *a, bool dumps)
{
    for (struct px_mconn *m = w->meta->conns; m && !dumps; m = m->next)
        if (!m->dumps && lc_addr_equal(&m->addr, a))
            return m;
    return mconn_open(w, a, dumps);
}

static void mconn_send_now(struct px_mconn *m);

/* Writes mop, the oldest request of a dumps connection, which carries one
 * metadump at a time.  (Out of memory it stays unwritten and the
 * connection times out: px_meta_tick.) */
static void mconn_write(struct px_mconn *m, struct px_mop *mop)
{
    mop->sent_ms = px_now_ms();
    if (evbuffer_add(m->out, mop->wire, mop->nwire) == 0 &&
        evbuffer_add(m->out, SENTINEL, sizeof(SENTINEL) - 1) == 0)
        mconn_send_now(m);
}

/* Bytes of the reply at the front of p[0..n) through the sentinel's MN
 * line (a VA line's data block skipped whole); 0 if not all there.
 * *body is set to the length before the MN line.  *scanned is where the
 * look resumes: the whole lines (and data blocks) already passed, so a
 * long reply arriving in pieces (a metadump) is looked through once. */
static size_t reply_end(const char *p, size_t n, size_t *body, size_t *scanned)
{
    size_t pos = *scanned;
    for (;;) {
        *scanned = pos;
        const char *eol = memchr(p + pos, '\n', n - pos);
        if (eol == NULL)
            return 0;
        size_t next = (size_t)(eol - p) + 1;
        size_t nline = next - pos;
        if (nline == 4 && memcmp(p + pos, SENTINEL_REPLY "\r\n", 4) == 0) {
            *body = pos;
            *scanned = 0;
            return next;
        }
        if (nline > 3 && memcmp(p + pos, "VA ", 3) == 0) {
            unsigned long long len = strtoull(p + pos + 3, NULL, 10);
            if (len > n || next + len + 2 > n)
                return 0;
            next += (size_t)len + 2;
        }
        pos = next;
    }
}

/* "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>" as the whole reply:
 * the epoch and address.  False for any other reply. */
static bool parse_moved(const char *p, size_t n, uint64_t *epoch, struct lc_addr *to)
{
    static const char prefix[] = "SERVER_ERROR MOVED ";
    size_t np = sizeof(prefix) - 1;
    if (n < np + 2 || memcmp(p, prefix, np) != 0 || memchr(p, '\n', n) != p + n - 1)
        return false;
    char text[LC_ADDR_TEXT_MAX + 48];
    size_t len = n - np - 2;
    if (len >= sizeof(text))
        return false;
    memcpy(text, p + np, len);
    text[len] = '\0';
    char *end;
    strtoul(text, &end, 10);                    /* the slot */
    if (*end != ' ')
        return false;
    unsigned long long ep = strtoull(end + 1, &end, 10);
    if (*end != ' ')
        return false;
    *epoch = ep;
    return lc_addr_parse(end + 1, strlen(end + 1), to);
}

static void mop_send(struct px_worker *w, struct px_mop *mop, const struct lc_addr *to);
static bool is_meta(const struct px_req *rq);

/* True if an earlier meta command of mop's client for the same slot is
 * not queued on the connection to `to` (waiting, deferred, or at another
 * server): sent there now, mop could overtake it.  Nothing is looked at
 * while no route changed since the client's oldest request in progress
 * arrived (px_route.c, "Order"). */
static bool held_by_earlier(const struct px_mop *mop, const struct lc_addr *to)
{
    const struct px_req *rq = mop->op->req;
    const struct px_req *oldest = rq->c->head;

    if (oldest == rq || oldest->route_gen == mop->w->route_gen)
        return false;
    for (const struct px_req *e = oldest; e != NULL && e != rq; e = e->next) {
        if (e->done || !is_meta(e) || e->nops == 0)
            continue;
        const struct px_op *o = e->ops[0];
        if (o->mop == NULL || o->slot != mop->op->slot)
            continue;
        if (o->mop->conn == NULL || !lc_addr_equal(&o->mop->conn->addr, to))
            return true;
    }
    return false;
}

/* mop waits in the retry list (no try counted) for an earlier one. */
static void hold(struct px_worker *w, struct px_mop *mop)
{
    bool first = !mop->held;
    if (first) {
        mop->held = true;
        px_count(&w->st.order_waits, 1);
    }
    mop->parked = true;
    wait_push(w->meta, mop, px_now_ms(), first);
}

/* The counters a server's reply to a meta command moves, by memcached
 * 1.6.18's rules (docs/compat.md; the servers count the same way):
 * reply is the bytes before the MN, empty when quiet mode (q) hid it.
 * mg: a hit (VA, HD; an N that created the item answers so too) is a get
 * hit, or with T a touch hit, a miss a get miss (q hides misses).  md: HD
 * a delete hit, NF and EX (a wrong C) misses (q hides HD).  ma: HD or VA a
 * hit, NF a miss; with N a success is not counted, since the reply does
 * not say whether it created the key (memcached counts a creation as
 * neither).  ms with C: HD a cas hit, EX bad value, NF a miss.  Error
 * lines (an opaque token too long, a server error) count nothing. */
static void count_reply(struct px_worker *w, const struct mop_counting *k, const char *reply,
                        size_t n)
{
    struct px_counters *st = &w->st;
    bool hidden = n == 0;
    bool hit = hidden || (n >= 2 && (memcmp(reply, "HD", 2) == 0 ||
                                     memcmp(reply, "VA", 2) == 0));
    bool miss = n >= 2 && (memcmp(reply, "EN", 2) == 0 || memcmp(reply, "NF", 2) == 0);
    bool exists = n >= 2 && memcmp(reply, "EX", 2) == 0;

    switch (k->cmd) {
    case MC_GET:
        if (hidden) {                       /* q hides a miss */
            hit = false;
            miss = true;
        }
        if (hit && k->touch) {
            px_count(&st->cmd_touch, 1);
            px_count(&st->touch_hits, 1);
        } else if (hit || miss) {
            px_count(&st->cmd_get, 1);
            px_count(hit ? &st->get_hits : &st->get_misses, 1);
        }
        break;
    case MC_DELETE:
        if (hit || miss || exists)
            px_count(hit ? &st->delete_hits : &st->delete_misses, 1);
        break;
    case MC_ARITH:
        if (hit && k->vivify && !hidden)    /* q shows a creation: hidden is a hit */
            break;
        if (hit)
            px_count(k->decr ? &st->decr_hits : &st->incr_hits, 1);
        else if (miss)
            px_count(k->decr ? &st->decr_misses : &st->incr_misses, 1);
        break;
    case MC_SET:
        if (k->cas && (hit || miss || exists))
            px_count(hit ? &st->cas_hits : miss ? &st->cas_misses : &st->cas_badval, 1);
        break;
    default:
        break;
    }
}

/* Does a listing end refused: ERROR as its last line? */
static bool ends_refused(const char *p, size_t n)
{
    static const char refused[] = "ERROR\r\n";
    size_t nr = sizeof(refused) - 1;
    return n >= nr && memcmp(p + n - nr, refused, nr) == 0 && (n == nr || p[n - nr - 1] == '\n');
}

/* The reply of the oldest request on m: MOVED is followed, anything else
 * goes to the client. */
static void mconn_reply(struct px_mconn *m, const char *p, size_t n)
{
    struct px_mop *mop = m->head;
    m->head = mop->next;
    if (m->head == NULL)
        m->tail = NULL;
    mop->next = NULL;
    mop->conn = NULL;
    if (mop->pinned && mop->op->req != NULL && px_now_ms() < mop->op->deadline_ms &&
        ends_refused(p, n)) {
        /* a process that serves no keys now (restarted and joining, a
         * parity process no longer serving), at the start of its listing
         * or in the middle of it (the lines before are dropped): the map
         * has moved on, and the next try follows its slots (follow_home).
         * (The server's refusal of a metadump behind unwritten replies
         * cannot come: a dumps connection writes one only after the
         * previous reply.) */
        px_route_refresh(m->w, NULL, &m->addr, 0);
        wait_push(m->w->meta, mop, px_now_ms() + px_backoff_ms(mop->tries), true);
        return;
    }
    uint64_t epoch;
    struct lc_addr to;
    if (mop->op->req != NULL && !mop->pinned && mop->moves < PX_META_MOVES &&
        parse_moved(p, n, &epoch, &to)) {
        struct px_worker *w = m->w;
        mop->moves++;
        px_count(&w->st.redirects, 1);
        w->route_gen++;
        px_route_refresh(w, &to, NULL, epoch);
        if (held_by_earlier(mop, &to)) {
            mop->to = to;
            mop->has_to = true;
            hold(w, mop);
            return;
        }
        mop_send(w, mop, &to);
        return;
    }
    count_reply(m->w, &mop->counting, p, n);
    mop_finish(mop, p, n);
}

/* Ends the authentication exchange: the requests waiting go. */
static void mconn_auth_done(struct px_mconn *m)
{
    m->auth = MA_NONE;
    if (m->dumps && m->head != NULL)
        mconn_write(m, m->head);
    else
        mconn_send_now(m);
}

/* An answer of the authentication exchange, first on the connection:
 * true once the exchange is over (MN: the server does not ask; STORED:
 * it took our credentials), false while it is incomplete or goes on, or
 * when it failed (the connection is then closed and its requests fail;
 * after a refusal, sending them again would be refused again). */
static bool mconn_auth_reply(struct px_mconn *m)
{
    const char *p = m->in.data + m->in.off;
    const char *nl = memchr(p, '\n', m->in.len);
    if (nl == NULL)
        return false;
    if (m->auth == MA_PROBE) {
        if (px_line_is(p, nl, SENTINEL_REPLY)) {
            px_rbuf_consume(&m->in, (size_t)(nl - p) + 1);
            mconn_auth_done(m);
            return true;
        }
        if (!px_line_is(p, nl, "CLIENT_ERROR unauthenticated")) {
            mconn_lost(m, "unexpected answer to a meta no-op from", false);
            return false;
        }
        px_rbuf_consume(&m->in, (size_t)(nl - p) + 1);
        m->greet_len = px_auth_ascii_request(m->w->px, m->greet, sizeof(m->greet));
        m->greet_off = 0;
        m->auth = MA_SET;
        if (m->greet_len == 0) {
            mconn_lost(m, "cannot build the authentication set for", false);
            return false;
        }
        mconn_send_now(m);
        return false;
    }
    if (!px_line_is(p, nl, "STORED")) {
        char shown[81];
        size_t n = 0;
        while (p + n < nl && p[n] != '\r')
            n++;
        printable_copy(shown, sizeof(shown), p, n);
        if (!m->w->meta->auth_logged)       /* once: every connection would say it again */
            fprintf(stderr, "cocytus-proxy: %s refused the proxy's credentials on a meta "
                    "connection (%s)\n", m->name, shown);
        m->w->meta->auth_logged = true;
        m->refused = true;
        mconn_lost(m, "the proxy's credentials were refused by", false);
        return false;
    }
    px_rbuf_consume(&m->in, (size_t)(nl - p) + 1);
    mconn_auth_done(m);
    return true;
}

/* A line of a listing: key=... (metadump) or ITEM ... (cachedump). */
static bool listing_line(const char *p, size_t n)
{
    return (n > 4 && memcmp(p, "key=", 4) == 0) || (n > 5 && memcmp(p, "ITEM ", 5) == 0);
}

/* The whole listing lines at the front of m->in go to the client (a
 * cachedump's up to its limit), so that the proxy holds a few buffers of a
 * listing, not all of it; the first other line (END, an error) is the
 * end of the reply, left to reply_end. */
static void dump_stream(struct px_mconn *m)
{
    struct px_req *rq = m->head->op->req;
    struct evbuffer *out = rq ? px_req_sink(rq) : NULL;
    const char *p = m->in.data + m->in.off;
    size_t n = m->in.len, pos = 0, from = 0;

    for (;;) {
        const char *nl = memchr(p + pos, '\n', n - pos);
        if (nl == NULL || !listing_line(p + pos, (size_t)(nl - p) + 1 - pos))
            break;
        pos = (size_t)(nl - p) + 1;
        if (rq != NULL && rq->dump_limit != 0) {
            /* a cachedump: line by line, up to the limit */
            if (out != NULL && rq->dump_sent < rq->dump_limit)
                evbuffer_add(out, p + from, pos - from);
            rq->dump_sent++;
            from = pos;
        }
    }
    if (pos == 0)
        return;
    if (out != NULL && pos > from)
        evbuffer_add(out, p + from, pos - from);
    if (rq != NULL) {
        px_client_mark_dirty(rq->c);    /* its output is written at the end of the pass */
        dump_fresh_deadline(m->head->op, m->w);
    }
    px_rbuf_consume(&m->in, pos);
    m->scanned = 0;
}

/* Whether a listing's connection may be read now (dump_stream). */
static bool dump_may_read(struct px_mconn *m)
{
    struct px_op *op = m->head->op;
    return op->req == NULL || (dump_streaming(op) && !dump_sink_full(op->req, PX_OUT_HIGH));
}

static void mconn_pause(struct px_mconn *m)
{
    event_del(m->rev);
    m->paused = true;
}

/* Read again (from the event loop: what is buffered is handled there). */
static void mconn_resume(struct px_mconn *m)
{
    m->paused = false;
    m->last_rx_ms = px_now_ms();        /* the time it waited was its client's */
    if (m->head != NULL)
        dump_fresh_deadline(m->head->op, m->w);
    event_add(m->rev, NULL);
    event_active(m->rev, EV_READ, 0);
}

static void mconn_read(struct px_mconn *m)
{
    bool listing = m->dumps && m->head != NULL && m->auth == MA_NONE;
    if (listing && !dump_may_read(m)) {
        mconn_pause(m);
        return;
    }
    ssize_t got = px_rbuf_read(&m->in, m->fd, m->tls);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        mconn_lost(m, got == 0 ? "connection closed by" : "lost connection to", true);
        return;
    }
    if (got < 0 && tls_read_waits_write(m->tls))
        event_add(m->wev, NULL);        /* on_mconn_event reads on from there */
    /* Under TLS: bytes it read ahead wake nobody (read again from the
     * loop), and a write that waited for this read can go now. */
    if (tls_pending(m->tls) > 0 && !m->paused)
        event_active(m->rev, EV_READ, 0);
    if (tls_write_waits_read(m->tls))
        event_add(m->wev, NULL);
    if (got > 0) {
        m->last_rx_ms = px_now_ms();
        m->hold_until_ms = 0;
        if (!m->dumps)
            m->be->silent = false;
    }
    if (m->auth != MA_NONE && !mconn_auth_reply(m))
        return;
    if (m->dumps && m->head != NULL && m->auth == MA_NONE)
        dump_stream(m);
    for (;;) {
        size_t body = 0;
        size_t end = m->head ? reply_end(m->in.data + m->in.off, m->in.len, &body, &m->scanned)
                             : 0;
        if (end == 0)
            break;
        /* the reply is copied out before the buffer moves */
        mconn_reply(m, m->in.data + m->in.off, body);
        px_rbuf_consume(&m->in, end);
    }
    if (m->head == NULL && m->in.len > 0) {
        mconn_lost(m, "unexpected bytes from", false);
    } else if (m->dumps && m->head == NULL) {
        mconn_unlink(m);                /* its listing op is answered */
        mconn_free(m);
    }
}

/* Writes what the socket takes.  A failed send is left to the read event
 * (the socket then reports the error or the end), so that a connection is
 * only ever freed from its own event callback. */
static void mconn_send_now(struct px_mconn *m)
{
    if (!m->connected || m->broken)
        return;
    if (m->auth != MA_NONE) {
        /* only the exchange's request until it is over */
        while (m->greet_off < m->greet_len) {
            ssize_t n = m->tls ? tls_write(m->tls, m->greet + m->greet_off,
                                           m->greet_len - m->greet_off)
                               : send(m->fd, m->greet + m->greet_off, m->greet_len - m->greet_off,
                                      MSG_NOSIGNAL);
            if (n < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                    m->broken = true;
                break;
            }
            m->greet_off += (size_t)n;
        }
        if (!m->broken && m->greet_off < m->greet_len && !tls_write_waits_read(m->tls))
            event_add(m->wev, NULL);
        return;
    }
    while (evbuffer_get_length(m->out) > 0) {
        ssize_t w = m->tls ? px_send_buffer_tls(m->out, m->tls, PX_TLS_RECORD)
                           : px_send_buffer(m->out, m->fd);
        if (w < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                m->broken = true;
            break;
        }
    }
    /* (A TLS write that waits for input goes on after the next read,
     * which arms the write event: mconn_read.) */
    if (!m->broken && evbuffer_get_length(m->out) > 0 && !tls_write_waits_read(m->tls))
        event_add(m->wev, NULL);
}

static void on_mconn_event(evutil_socket_t fd, short what, void *arg)
{
    struct px_mconn *m = arg;
    (void)fd;
    if ((what & EV_WRITE) && !m->connected && m->tls == NULL) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(m->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
            mconn_lost(m, "cannot connect to", true);
            return;
        }
        struct tls_dialer *d = m->w->px->dialer;
        if (d == NULL)
            m->connected = true;
        else if ((m->tls = tls_conn_dial(d, m->fd, m->addr.host)) == NULL) {
            mconn_lost(m, "out of memory for TLS to", true);
            return;
        }
    }
    if (m->tls != NULL && !m->connected) {
        /* the TLS handshake first; nothing is sent before it is done */
        short want = 0;
        char why[240];
        int r = px_tls_handshake(m->tls, &want, why, sizeof(why));
        if (r < 0) {
            if (!m->w->meta->tls_logged)    /* once: every connection would say it again */
                fprintf(stderr, "cocytus-proxy: worker %d: meta connection to %s: %s\n",
                        m->w->id, m->name, why);
            m->w->meta->tls_logged = true;
            mconn_lost(m, "TLS handshake failed with", true);
            return;
        }
        if (r == 0) {
            if (want == EV_WRITE)
                event_add(m->wev, NULL);
            return;
        }
        m->connected = true;
        mconn_send_now(m);
        return;
    }
    if ((what & EV_WRITE) && tls_read_waits_write(m->tls)) {
        mconn_read(m);      /* the read TLS held until it could write */
        return;
    }
    if (what & EV_WRITE) {
        mconn_send_now(m);
        return;
    }
    if (what & EV_READ)
        mconn_read(m);
}

/* Queue mop on the connection to `to`. */
static void mop_send(struct px_worker *w, struct px_mop *mop, const struct lc_addr *to)
{
    struct px_mconn *m = mconn_get(w, to, mop->pinned);
    mop->tries++;
    if (m == NULL) {
        char name[LC_ADDR_TEXT_MAX], why[LC_ADDR_TEXT_MAX + 32];
        lc_addr_format(to, name, sizeof(name));
        snprintf(why, sizeof(why), "cannot connect to %s", name);
        mop_lost(mop, why, true, false);
        return;
    }
    mop->sent_ms = px_now_ms();         /* a dump's again when it is written */
    if (!m->dumps) {
        if (evbuffer_add(m->out, mop->wire, mop->nwire) < 0 ||
            evbuffer_add(m->out, SENTINEL, sizeof(SENTINEL) - 1) < 0) {
            mop_fail(mop, "out of memory");
            return;
        }
    }
    if (m->tail)
        m->tail->next = mop;
    else
        m->head = mop;
    m->tail = mop;
    mop->conn = m;
    if (!m->dumps)
        mconn_send_now(m);
    else if (m->head == mop && m->auth == MA_NONE)
        mconn_write(m, mop);
}

/* ---- requests ---- */

static void count_command(struct px_worker *w, enum meta_cmd cmd)
{
    switch (cmd) {
    case MC_GET: break;     /* a get or a touch, by its reply (count_reply) */
    case MC_SET: px_count(&w->st.cmd_set, 1); break;
    case MC_DELETE: px_count(&w->st.cmd_delete, 1); break;
    case MC_ARITH: px_count(&w->st.cmd_incr_decr, 1); break;
    default: break;
    }
}

/* A listing sent again (its server failed): if its server's slots have
 * another owner since (a recovery process took a dead data process's, a
 * backup was promoted), it goes there, so a dump during a failover still
 * lists every key.  When that owner is already asked by another op of the
 * same listing, this one is done with nothing to add (returns false). */
static bool follow_home(struct px_worker *w, struct px_mop *mop)
{
    if (!mop->has_home || mop->op->req == NULL)
        return true;
    struct px_backend *be = w->be[w->owner[mop->op->slot]];
    if (be == NULL || lc_addr_equal(&be->addr, &mop->to))
        return true;
    struct px_req *rq = mop->op->req;
    for (unsigned i = 0; i < rq->nops; i++) {
        if (rq->ops[i] != mop->op && rq->ops[i]->target == be) {
            mop_finish(mop, "END\r\n", 5);
            return false;
        }
    }
    mop->to = be->addr;
    mop->op->target = be;
    return true;
}

/* Sends mop to its slot's owner now. */
static void mop_launch(struct px_worker *w, struct px_mop *mop)
{
    if (mop->op->req == NULL) {
        mop_finish(mop, NULL, 0);     /* its client is gone */
        return;
    }
    const struct lc_addr *to;
    if (mop->pinned && mop->tries > 0 && !follow_home(w, mop))
        return;
    if (mop->has_to) {
        to = &mop->to;
    } else {
        struct px_backend *be = w->be[w->owner[mop->op->slot]];
        if (be == NULL) {
            mop_fail(mop, "no server for this request");
            return;
        }
        to = &be->addr;
    }
    if (!mop->pinned && held_by_earlier(mop, to)) {
        hold(w, mop);
        return;
    }
    if (mop->tries == 0)
        px_count(&w->st.routed, 1);
    mop->has_to = mop->pinned;
    mop_send(w, mop, to);
}

/* ---- time ---- */

/* Harmless twice (px_route.c's rule for the classic commands): a lookup
 * that creates nothing and hands out no win token, a plain set or replace,
 * a delete, a debug line. */
static bool retry_safe(const struct meta_req *req)
{
    switch (req->cmd) {
    case MC_GET:
        return !meta_has(req, 'N') && !meta_has(req, 'R');
    case MC_SET:
        return !meta_has(req, 'C') &&
               (req->mode == 0 || req->mode == META_MODE_SET || req->mode == META_MODE_REPLACE);
    case MC_DELETE:
        return !meta_has(req, 'C');
    case MC_DEBUG:
        return true;
    default:
        return false;
    }
}

/* A server's dump comes a piece per event-loop pass, behind its other
 * work: wait longer between bytes than -t. */
static int dump_timeout_ms(const struct px_worker *w)
{
    int t = PX_DUMP_TIMEOUT_TIMES * w->px->opt.timeout_ms;
    return t > w->px->opt.deadline_ms ? t : w->px->opt.deadline_ms;
}

bool px_meta_busy(const struct px_worker *w)
{
    return w->meta != NULL && w->meta->inflight > 0;
}

bool px_meta_waits_on(const struct px_worker *w, const struct lc_addr *a)
{
    if (w->meta == NULL)
        return false;
    for (const struct px_mconn *m = w->meta->conns; m; m = m->next)
        if (!m->dumps && m->head != NULL && lc_addr_equal(&m->addr, a))
            return true;
    return false;
}

/* The first request on m whose slot the map now gives to a server other
 * than m's, or NULL. */
static const struct px_mop *first_moved(const struct px_worker *w, const struct px_mconn *m)
{
    for (const struct px_mop *mop = m->head; mop; mop = mop->next) {
        if (mop->pinned)
            continue;
        const struct px_backend *owner = w->be[w->owner[mop->op->slot]];
        if (owner != NULL && !lc_addr_equal(&owner->addr, &m->addr))
            return mop;
    }
    return NULL;
}

void px_meta_leave_silent(struct px_worker *w)
{
    struct px_meta *pm = w->meta;
    if (pm == NULL)
        return;
    struct px_mconn *next;
    for (struct px_mconn *m = pm->conns; m; m = next) {
        next = m->next;
        if (m->dumps || m->head == NULL)
            continue;
        const struct px_mop *moved =
            m->be->silent || m->hold_until_ms ? first_moved(w, m) : NULL;
        if (moved == NULL)
            continue;
        fprintf(stderr, "cocytus-proxy: worker %d: meta connection to %s: silent, and the map "
                "gives slot %u to another server: its requests go to the new owners\n", w->id,
                m->name, moved->op->slot);
        px_count(&w->st.timeouts, 1);
        mconn_lost(m, "silent, and the map gave its slots to another server:", true);
    }
}

/* m's oldest request is unanswered after the timeout.  As a classic
 * backend is (px_backend.c, be_hold): while the oldest request on m that
 * cannot be sent twice (ma, ms in append mode or with C, ...) has time
 * left, m is held open until its deadline, fixed when the hold begins, and
 * the map is polled (px_meta_held), so that a slow server (a write waiting
 * for a stopped parity process's ack) answers it instead of the client
 * getting "may have been applied"; a reply ends the hold, a map that moves
 * one of m's slots closes m (px_meta_leave_silent), the hold's end too.
 * True while m is held. */
static bool mconn_hold(struct px_mconn *m, int64_t now_ms, int timeout)
{
    if (!m->connected || m->auth != MA_NONE)
        return false;                   /* nothing of its requests was written */
    if (m->hold_until_ms == 0) {
        const struct px_mop *mop = m->head;
        while (mop && (mop->op->req == NULL || mop->retry_lost))
            mop = mop->next;
        if (mop == NULL || now_ms >= mop->op->deadline_ms)
            return false;
        m->hold_until_ms = mop->op->deadline_ms;
        fprintf(stderr, "cocytus-proxy: worker %d: meta connection to %s: no reply in %d ms; "
                "waiting, since a request in flight cannot be sent twice (slot %u), for at "
                "most %lld ms more\n", m->w->id, m->name, timeout, mop->op->slot,
                (long long)(mop->op->deadline_ms - now_ms));
    }
    return now_ms < m->hold_until_ms;
}

const struct px_backend *px_meta_held(const struct px_worker *w)
{
    if (w->meta == NULL)
        return NULL;
    for (const struct px_mconn *m = w->meta->conns; m; m = m->next)
        if (m->hold_until_ms && m->head != NULL)
            return m->be;
    return NULL;
}

/* Closes connections that stopped answering (their requests go again or
 * fail, mconn_lost) and launches the waiting requests whose back-off is
 * over. */
void px_meta_tick(struct px_worker *w, int64_t now_ms)
{
    struct px_meta *pm = w->meta;
    if (pm == NULL)
        return;
    char what[64];
    struct px_mconn *next;
    for (struct px_mconn *m = pm->conns; m; m = next) {
        next = m->next;
        int timeout = m->dumps ? dump_timeout_ms(w) : w->px->opt.timeout_ms;
        if (m->dumps && m->head != NULL && m->head->op->req == NULL) {
            /* its client has gone: the rest of the listing is not wanted */
            mconn_lost(m, "the client went away; listing of", false);
            continue;
        }
        if (m->paused) {
            /* waits for its client, not for its server */
            if (dump_streaming(m->head->op) && !dump_sink_full(m->head->op->req, PX_OUT_HIGH / 2))
                mconn_resume(m);
            continue;
        }
        if (!m->connected && now_ms - m->connect_started_ms > w->px->opt.timeout_ms) {
            snprintf(what, sizeof(what), "connect: no answer in %d ms from",
                     w->px->opt.timeout_ms);
            if (!m->dumps)
                m->be->silent = true;
            mconn_lost(m, what, true);
        } else if (m->head != NULL && now_ms - m->head->sent_ms > timeout &&
                   now_ms - m->last_rx_ms > timeout &&
                   (m->dumps || m->broken || !mconn_hold(m, now_ms, timeout))) {
            snprintf(what, sizeof(what), "no reply in %lld ms from",
                     (long long)(now_ms - m->head->sent_ms));
            px_count(&w->st.timeouts, 1);
            if (!m->dumps)
                m->be->silent = true;
            mconn_lost(m, what, true);
        }
    }
    struct px_mop *mop = pm->whead;
    pm->whead = pm->wtail = NULL;
    while (mop) {
        struct px_mop *after = mop->next;
        if (mop->op->req != NULL && now_ms >= mop->op->deadline_ms && mop->parked) {
            mop->next = NULL;
            char line[200];
            snprintf(line, sizeof(line),
                     "gave up after %d tries: an earlier request for its slot was not done",
                     mop->tries);
            mop_fail(mop, line);
        } else if (mop->op->req != NULL && mop->pinned && dump_out_of_time(mop, now_ms)) {
            /* a listing's server failed, and its back-off outlasted the
             * listing's time (classic ops: px_route.c's give_up) */
            mop->next = NULL;
            char line[200];
            snprintf(line, sizeof(line), "gave up after %d tries in %d ms", mop->tries,
                     dump_timeout_ms(w));
            mop_fail(mop, line);
        } else if (mop->retry_at_ms <= now_ms) {
            mop->next = NULL;
            if (!mop->parked)
                px_count(&w->st.retries, 1);
            mop->parked = false;
            mop_launch(w, mop);
        } else {
            wait_push(pm, mop, mop->retry_at_ms, false);
        }
        mop = after;
    }
}

/* ---- order between meta and classic requests ---- */

static bool is_meta(const struct px_req *rq)
{
    return rq->text_cmd == PX_TEXT_META;
}

/* The kinds of request that travel on different server connections:
 * classic ones (binary backends), meta commands, metadumps. */
enum px_kind { KIND_CLASSIC, KIND_META, KIND_DUMP };

static enum px_kind kind_of(const struct px_req *rq)
{
    if (is_meta(rq))
        return KIND_META;
    return rq->text_cmd == PX_TEXT_DUMP ? KIND_DUMP : KIND_CLASSIC;
}

/* Must rq's launch wait?  While an earlier request of its client of the
 * other kind is unanswered, or an earlier one of its client is still
 * deferred; a listing also while an earlier listing is unanswered, since
 * each takes a connection to every server (a client that pipelines
 * listings holds one set at a time). */
static bool launch_waits(const struct px_req *rq)
{
    enum px_kind kind = kind_of(rq);
    for (const struct px_req *e = rq->c->head; e != NULL && e != rq; e = e->next) {
        if (e->ndeferred > 0)
            return true;
        if (!e->done && e->pending > 0 && (kind_of(e) != kind || kind == KIND_DUMP))
            return true;
    }
    return false;
}

static bool defer_push(struct px_meta *pm, struct px_mop *mop, struct px_op *op)
{
    struct px_defer *d = malloc(sizeof(*d));
    if (d == NULL)
        return false;
    d->next = NULL;
    d->mop = mop;
    d->op = op;
    if (pm->dtail)
        pm->dtail->next = d;
    else
        pm->dhead = d;
    pm->dtail = d;
    (mop ? mop->op->req : op->req)->ndeferred++;
    return true;
}

static struct px_req *defer_req(const struct px_defer *d)
{
    return d->mop ? d->mop->op->req : d->op->req;
}

/* Launches, in order, every deferred request that no longer waits (a
 * closed client's ones included: nothing waits for them).  Once one entry
 * of a client waits, so do its later ones (they come after it in the
 * client's order): the client is marked for this pass and not looked at
 * again, so a pass costs one launch_waits per waiting client. */
static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct px_worker *w = arg;
    struct px_meta *pm = w->meta;
    (void)fd;
    (void)what;
    unsigned pass = ++pm->pass;
    struct px_defer *d = pm->dhead, *prev = NULL;
    while (d) {
        struct px_defer *next = d->next;
        struct px_req *rq = defer_req(d);
        if (rq != NULL && (rq->c->kick_pass == pass || launch_waits(rq))) {
            rq->c->kick_pass = pass;
            prev = d;
            d = next;
            continue;
        }
        if (prev)
            prev->next = next;
        else
            pm->dhead = next;
        if (pm->dtail == d)
            pm->dtail = prev;
        if (rq != NULL)
            rq->ndeferred--;
        if (d->mop) {
            mop_launch(w, d->mop);
        } else {
            d->op->state = OP_NEW;
            px_route_op(w, d->op);      /* frees it if its client is gone */
        }
        free(d);
        d = next;
    }
}

bool px_meta_defer_classic(struct px_worker *w, struct px_req *rq)
{
    struct px_meta *pm = w->meta;
    if (pm == NULL || (pm->inflight == 0 && pm->dhead == NULL))
        return false;
    if (!launch_waits(rq))
        return false;
    for (unsigned i = 0; i < rq->nops; i++) {
        /* "in flight" while deferred: a closing client detaches it */
        rq->ops[i]->state = OP_INFLIGHT;
        if (!defer_push(pm, NULL, rq->ops[i])) {
            rq->ops[i]->state = OP_NEW;
            px_route_op(w, rq->ops[i]);
        }
    }
    return true;
}

/* A parsed keyed meta command: forwarded to its slot's owner, once no
 * earlier classic request of the client is unanswered. */
static void forward(struct px_client *c, struct px_req *rq, const struct meta_req *req,
                    const char *buf)
{
    struct px_worker *w = c->w;
    struct px_op *op = px_op_new(rq, 0, NULL, 0, req->key, req->nkey, NULL, 0, 0);
    struct px_mop *mop = op ? calloc(1, sizeof(*mop) + req->total) : NULL;
    if (mop == NULL) {
        if (op) {
            op->state = OP_DONE;
            rq->pending--;
        }
        local_reply(rq, "SERVER_ERROR out of memory\r\n", 28);
        return;
    }
    op->state = OP_INFLIGHT;        /* a closing client detaches it (px_client.c) */
    mop->next = NULL;
    mop->w = w;
    mop->op = op;
    op->mop = mop;
    mop->conn = NULL;
    mop->held = mop->parked = mop->has_to = mop->pinned = false;
    mop->moves = 0;
    mop->tries = 0;
    mop->retry_lost = retry_safe(req);
    mop->counting = (struct mop_counting){
        .cmd = req->cmd, .touch = meta_has(req, 'T'), .vivify = meta_has(req, 'N'),
        .cas = meta_has(req, 'C'), .decr = req->mode == 'D' || req->mode == 'd',
    };
    mop->nwire = req->total;
    memcpy(mop->wire, buf, req->total);
    w->meta->inflight++;
    count_command(w, req->cmd);
    if (launch_waits(rq) && defer_push(w->meta, mop, NULL))
        return;
    mop_launch(w, mop);
}

/* One metadump mop to map endpoint i, or NULL out of memory. */
static struct px_mop *dump_mop(struct px_req *rq, size_t i, const char *wire, size_t nwire)
{
    struct px_worker *w = rq->c->w;
    struct px_op *op = px_op_new(rq, 0, NULL, 0, NULL, 0, NULL, 0, 0);
    struct px_mop *mop = op ? calloc(1, sizeof(*mop) + nwire) : NULL;
    if (mop == NULL) {
        if (op) {
            op->state = OP_DONE;
            rq->pending--;
        }
        return NULL;
    }
    op->fanout = (int)i;
    op->state = OP_INFLIGHT;        /* a closing client detaches it (px_client.c) */
    op->target = w->be[i];          /* a listing's op: the server it asks (follow_home) */
    for (unsigned slot = 0; slot < COCYTUS_SLOTS; slot++) {
        if (w->map->owner[slot] == i) {
            op->slot = slot;
            mop->has_home = true;
            break;
        }
    }
    mop->w = w;
    mop->op = op;
    op->mop = mop;
    mop->pinned = mop->has_to = true;
    mop->to = w->map->ep[i];
    mop->retry_lost = true;         /* a read */
    mop->counting.cmd = MC_NOOP;    /* counts nothing */
    mop->nwire = nwire;
    memcpy(mop->wire, wire, nwire);
    op->deadline_ms = px_now_ms() + dump_timeout_ms(w);
    w->meta->inflight++;
    return mop;
}

bool px_meta_dump(struct px_client *c, struct px_req *rq, const char *wire, size_t nwire)
{
    struct px_worker *w = c->w;
    if (w->meta == NULL && !px_meta_init(w))
        return false;
    for (size_t i = 0; i < w->map->n; i++) {
        struct px_mop *mop = dump_mop(rq, i, wire, nwire);
        if (mop == NULL)
            return false;
        if (!(launch_waits(rq) && defer_push(w->meta, mop, NULL)))
            mop_launch(w, mop);
    }
    return true;
}

void px_meta_drop_key(struct px_client *c, struct px_req *rq, const char *key, size_t nkey)
{
    struct px_op *op = px_op_new(rq, BIN_OP_DELETE, NULL, 0, key, nkey, NULL, 0, 0);
    if (op == NULL)
        return;
    rq->noreply = true;             /* the delete's outcome is not shown */
    op->retry_lost = true;
    op->uncounted = true;           /* memcached counts no delete for it */
    if (!px_meta_defer_classic(c->w, rq))
        px_route_op(c->w, op);
}

size_t px_meta_request(struct px_client *c, const char *buf, size_t len, bool *handled)
{
    struct meta_req req;
    struct px_req *rq;

    *handled = false;
    if (len < 2 || buf[0] != 'm')
        return 0;
    if (c->w->meta == NULL && !px_meta_init(c->w))
        return 0;
    *handled = true;
    switch (meta_parse(buf, len, c->w->px->opt.item_max, &req)) {
    case MP_NOT_META:
        *handled = false;
        return 0;
    case MP_NEED_MORE:
        return 0;
    case MP_CLOSE:
        return SIZE_MAX;
    case MP_ERROR:
        rq = px_req_new(c, PX_PROTO_TEXT, 1);
        if (rq == NULL)
            return SIZE_MAX;
        rq->text_cmd = TC_NONE;
        if (req.too_large) {
            local_reply(rq, "SERVER_ERROR object too large for cache\r\n", 41);
            px_meta_drop_key(c, rq, req.key, req.nkey);
        } else {
            local_reply(rq, req.error, strlen(req.error));
            local_reply(rq, "\r\n", 2);
        }
        c->swallow = req.swallow;
        px_req_finish(rq);
        return req.total;
    case MP_OK:
        break;
    }
    rq = px_req_new(c, PX_PROTO_TEXT, 1);
    if (rq == NULL)
        return SIZE_MAX;
    rq->text_cmd = req.cmd == MC_NOOP ? TC_NONE : PX_TEXT_META;
    if (req.cmd == MC_NOOP)
        local_reply(rq, "MN\r\n", 4);
    else
        forward(c, rq, &req, buf);
    px_req_finish(rq);              /* the launch hold */
    return req.total;
}

bool px_meta_init(struct px_worker *w)
{
    w->meta = calloc(1, sizeof(*w->meta));
    if (w->meta == NULL)
        return false;
    w->meta->kick = event_new(w->base, -1, 0, on_kick, w);
    if (w->meta->kick == NULL) {
        free(w->meta);
        w->meta = NULL;
        return false;
    }
    return true;
}

void px_meta_close_all(struct px_worker *w)
{
    if (w->meta == NULL)
        return;
    struct px_meta *pm = w->meta;
    while (pm->conns)
        mconn_lost(pm->conns, "proxy stopping, connection to", false);
    while (pm->whead) {
        struct px_mop *mop = pm->whead;
        pm->whead = mop->next;
        mop_fail(mop, "proxy stopping");
    }
    while (pm->dhead) {
        struct px_defer *d = pm->dhead;
        pm->dhead = d->next;
        if (d->mop)
            mop_fail(d->mop, "proxy stopping");
        else if (d->op->req == NULL)
            px_op_free(d->op);
        free(d);
    }
    event_free(pm->kick);
    free(w->meta);
    w->meta = NULL;
}
