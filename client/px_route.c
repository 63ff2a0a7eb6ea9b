/* px_route.c - cocytus-proxy: where an op goes, and what happens when it
 * cannot get there.
 *
 * Each worker keeps its own copy of the slot map (libcocytus's lc_map: the
 * same hash, parser and epoch rule) and an owner table that starts as the
 * map's and learns from MOVED replies.  An op goes to the owner of its
 * key's slot, or to the endpoint it fans out to (flush_all), or to the
 * server a MOVED named.
 *
 * The rules are libcocytus's (docs/client.md), made asynchronous:
 *  - MOVED: the op goes to the named server at once (after a back-off from
 *    the second redirect on), the slot's owner is updated if the MOVED's
 *    epoch is not older than the map's, and a newer epoch starts a map
 *    fetch.
 *  - A lost connection or a timeout: an op that may have reached the
 *    server is sent again only if it is harmless twice (get, gat, set and
 *    replace without cas, delete, touch, flush); others fail with "the
 *    request may have been applied".  The op waits a back-off in the
 *    worker's retry list while the map is fetched again (the failed server
 *    asked last), and then goes wherever the map says.
 *  - No new try after the deadline (deadline_ms after the request arrived)
 *    or after max_attempts tries: the client gets "gave up after N tries".
 *
 * Order.  A server applies one connection's requests in order, so a
 * client's requests for one slot stay in order as long as they go to one
 * server.  When they would not (an earlier one is in the retry list, or in
 * flight at a server that the map no longer names, and this one would go
 * to the new owner), the later op waits in the retry list, without
 * counting a try, until every earlier op of its client for that slot is
 * answered or in flight at the same server (held_by_earlier).  Otherwise
 * a pipelined "set k; set k" across a map change could be applied in the
 * wrong order, and the client, told STORED twice, keep its first value
 * (test/integration/proxy_order.sh).  Nothing is looked at for a client
 * with one request in flight, nor while routes stay as they were: a new
 * map, a MOVED and an op entering the retry list bump the worker's
 * route_gen, and when it has not moved since the client's oldest request
 * in progress arrived, every earlier op went where this one goes.
 *
 * A silent server.  A stopped process (SIGSTOP, a paused VM) still
 * completes connections, so it is found only by a try's timeout, and the
 * coordinator takes its keys over only after its dead-after period (1.5
 * s): a request sent to it at the stop failed its first try at 1 s, was
 * sent to it again (the map had not changed), and ran out of the 2 s
 * deadline while that second try waited.  So a backend whose last failure
 * was a timeout and that has not answered since is silent
 * (px_backend.c): while one is and something waits for it (a request on
 * its connection, or a slot the map still gives it), the map is fetched
 * every SILENT_FETCH_MS (from the others first); and when a newer map
 * gives the slot of one of a silent backend's ops to another server, the
 * backend is closed at once, as a timeout would, and its ops go the usual
 * way: the harmless-twice ones to the new owner, the others fail with
 * "may have been applied".  Nothing behind that op can be answered before
 * it, and a process that was taken over exits once it runs again without
 * applying anything (its parity processes refuse it).  Any reply clears
 * the flag.
 * test/integration/proxy_hang.sh.  A connection whose oldest request
 * timed out but which holds one that cannot be sent twice is not closed
 * at the timeout: it is held, and its server silent, until a reply, a
 * map that moves one of its slots, or that request's deadline
 * (px_backend.c, be_hold): a server that is only slow (a write waiting
 * for a stopped parity process's ack) answers it.
 * test/integration/rmw_kill.sh.
 *
 * The map fetch is non-blocking too: one short "config get cluster"
 * connection at a time, PX_FETCH_TIMEOUT_MS per server, through the
 * servers libcocytus would ask (lc_refresh_sources), stopping at the first
 * newer map (or two answers with the cached epoch, which drops MOVED
 * hints).  A map older than the cached one is never installed
 * (lc_map_judge).  Nothing waits for a fetch but the ops in the retry
 * list, which are woken when it ends. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "printable.h"
#include "px.h"

#define EXTRA_BACKENDS 64          /* MOVED targets outside the map */
#define FETCH_AGAIN_MS 20          /* between two fetches asked for back to back */
#define FETCH_LOOKUP_WAIT_MS 250   /* a fetch whose sources were still being looked up */
#define SILENT_FETCH_MS 100        /* between two fetches while a server is silent */
#define FETCH_REPLY_MAX (8u << 20)

static const char fetch_request[] = "config get cluster\r\n";

/* ---- the map ---- */

static bool install_map(struct px_worker *w, struct lc_map *m)
{
    size_t cap = m->n + EXTRA_BACKENDS;
    struct px_backend **be = calloc(cap, sizeof(*be));

    if (be == NULL)
        return false;
    for (size_t i = 0; i < m->n; i++) {
        be[i] = px_backend_get(w, &m->ep[i]);
        if (be[i] == NULL) {
            free(be);
            return false;
        }
    }
    bool changed = w->map == NULL || w->map->epoch != m->epoch;
    w->route_gen++;
    free(w->be);
    w->be = be;
    w->nbe = m->n;
    w->capbe = cap;
    memcpy(w->owner, m->owner, sizeof(w->owner));
    lc_map_free(w->map);
    w->map = m;
    px_count(&w->st.refreshes, 1);
    if (changed && w->id == 0)
        fprintf(stderr, "cocytus-proxy: map epoch %" PRIu64 ", %zu endpoint(s)\n", m->epoch,
                m->n);
    return true;
}

bool px_route_init(struct px_worker *w, const struct lc_map *first)
{
    struct lc_map *m = lc_map_dup(first);

    w->fetch.fd = -1;
    if (m == NULL || !install_map(w, m)) {
        lc_map_free(m);
        return false;
    }
    w->st.refreshes = 0;
    return true;
}

static void fetch_close(struct px_fetch *f);

void px_route_free(struct px_worker *w)
{
    struct px_fetch *f = &w->fetch;

    fetch_close(f);
    px_rbuf_free(&f->in);
    while (w->waiting) {
        struct px_op *op = w->waiting;
        w->waiting = op->next;
        if (op->req == NULL)
            px_op_free(op);
        else
            op->state = OP_DONE;
    }
    free(w->be);
    lc_map_free(w->map);
}

/* be's index in the routing table, added as an extra if it is not there. */
static size_t be_index(struct px_worker *w, struct px_backend *be)
{
    for (size_t i = 0; i < w->nbe; i++)
        if (w->be[i] == be)
            return i;
    if (w->nbe < w->capbe) {
        w->be[w->nbe] = be;
        return w->nbe++;
    }
    w->be[w->capbe - 1] = be;      /* full: the last extra is reused */
    return w->capbe - 1;
}

/* ---- the retry list ---- */

int64_t px_backoff_ms(int n)
{
    int64_t ms = PX_BACKOFF_MIN_MS;
    for (int i = 1; i < n && ms < PX_BACKOFF_MAX_MS; i++)
        ms *= 2;
    return ms < PX_BACKOFF_MAX_MS ? ms : PX_BACKOFF_MAX_MS;
}

/* Puts op in the retry list until at_ms.  bump: news for the order check
 * (an op entering the list); an op put back, or held again, is not. */
static void queue_op(struct px_worker *w, struct px_op *op, int64_t at_ms, bool bump)
{
    if (bump)
        w->route_gen++;
    op->state = OP_WAITING;
    op->retry_at_ms = at_ms;
    op->next = NULL;
    if (w->waiting_tail)
        w->waiting_tail->next = op;
    else
        w->waiting = op;
    w->waiting_tail = op;
    w->nwaiting++;
}

static void wait_op(struct px_worker *w, struct px_op *op, int64_t at_ms)
{
    queue_op(w, op, at_ms, true);
}

void px_route_forget(struct px_worker *w, struct px_op *op)
{
    struct px_op *prev = NULL;

    for (struct px_op *o = w->waiting; o; prev = o, o = o->next) {
        if (o != op)
            continue;
        if (prev)
            prev->next = o->next;
        else
            w->waiting = o->next;
        if (w->waiting_tail == o)
            w->waiting_tail = prev;
        w->nwaiting--;
        return;
    }
}

static bool may_retry(const struct px_worker *w, const struct px_op *op)
{
    return op->tries < w->px->opt.max_attempts && px_now_ms() < op->deadline_ms;
}

static void give_up(struct px_worker *w, struct px_op *op)
{
    char msg[200];
    int64_t spent = px_now_ms() - (op->deadline_ms - w->px->opt.deadline_ms);

    snprintf(msg, sizeof(msg), "gave up after %d tries in %" PRId64 " ms: %s", op->tries, spent,
             op->why[0] ? op->why : "no server");
    px_op_fail(w, op, msg);
}

/* ---- sending ---- */

static struct px_backend *route_target(struct px_worker *w, const struct px_op *op)
{
    if (op->target)
        return op->target;
    if (op->fanout >= 0)
        return (size_t)op->fanout < w->map->n ? w->be[op->fanout] : NULL;
    return w->be[w->owner[op->slot]];
}

/* True if an earlier op of op's client for the same slot is waiting, or in
 * flight at a server other than be: sent now, op could overtake it.  Ops
 * in flight without a backend are meta commands or launches px_meta.c
 * deferred, which keep their order with classic requests there. */
static bool held_by_earlier(const struct px_op *op, const struct px_backend *be)
{
    const struct px_req *rq = op->req;

    if (op->fanout >= 0)
        return false;
    for (const struct px_req *e = rq->c->head; e != NULL && e != rq; e = e->next) {
        if (e->done)
            continue;
        for (unsigned i = 0; i < e->nops; i++) {
            const struct px_op *o = e->ops[i];
            if (o == NULL || o->slot != op->slot || o->fanout >= 0)
                continue;
            if (o->state == OP_WAITING || o->state == OP_NEW)
                return true;
            if (o->state == OP_INFLIGHT && o->be != NULL && o->be != be)
                return true;
        }
    }
    return false;
}

void px_route_op(struct px_worker *w, struct px_op *op)
{
    if (op->req == NULL) {
        px_op_free(op);
        return;
    }
    struct px_backend *be = route_target(w, op);
    if (be == NULL) {
        snprintf(op->why, sizeof(op->why), "no server for this request");
        give_up(w, op);
        return;
    }
    const struct px_req *oldest = op->req->c->head;
    if (oldest != op->req && oldest->route_gen != w->route_gen && held_by_earlier(op, be)) {
        bool first = !op->held;
        if (first) {
            op->held = true;
            px_count(&w->st.order_waits, 1);
        }
        if (op->why[0] == '\0')
            snprintf(op->why, sizeof(op->why), "an earlier request for its slot was not done");
        queue_op(w, op, px_now_ms(), first);
        return;
    }
    op->target = NULL;
    if (!px_backend_send(be, op)) {
        if (op->why[0] == '\0')
            snprintf(op->why, sizeof(op->why), "%.100s is down", be->name);
        if (op->tries > 0 || px_now_ms() < op->deadline_ms)
            wait_op(w, op, be->retry_at_ms);
        else
            give_up(w, op);
        return;
    }
    if (op->uncounted)
        ;                       /* the proxy's own (a stats poll): no client's request */
    else if (op->tries == 0)
        px_count(&w->st.routed, 1);
    else
        px_count(&w->st.retries, 1);
    op->tries++;
}

void px_route_failed(struct px_worker *w, struct px_op *op, bool lost, const char *why)
{
    if (op->req == NULL) {
        px_op_free(op);
        return;
    }
    snprintf(op->why, sizeof(op->why), "%.119s", why);
    if (lost && !op->retry_lost) {
        char msg[200];
        snprintf(msg, sizeof(msg), "%s; the request may have been applied", why);
        px_op_fail(w, op, msg);
        return;
    }
    if (!may_retry(w, op)) {
        give_up(w, op);
        return;
    }
    wait_op(w, op, px_now_ms() + px_backoff_ms(op->tries));
}

void px_route_moved(struct px_worker *w, struct px_op *op, struct px_backend *from,
                    const char *text, size_t n)
{
    char buf[LC_ADDR_TEXT_MAX + 80];
    struct lc_moved mv;

    if (op->req == NULL) {
        px_op_free(op);
        return;
    }
    px_count(&w->st.redirects, 1);
    w->route_gen++;
    if (n >= sizeof(buf))
        n = sizeof(buf) - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    snprintf(op->why, sizeof(op->why), "%.119s", buf);
    if (!may_retry(w, op)) {
        give_up(w, op);
        return;
    }
    if (!lc_moved_parse(buf, &mv)) {
        /* not my slot without a target: the map that refused is newest */
        px_route_refresh(w, &from->addr, NULL, 0);
        wait_op(w, op, px_now_ms() + px_backoff_ms(op->tries));
        return;
    }
    if (mv.epoch > w->map->epoch)
        px_route_refresh(w, &mv.to, NULL, mv.epoch);
    struct px_backend *be = px_backend_get(w, &mv.to);
    if (be != NULL) {
        size_t idx = be_index(w, be);
        if (mv.epoch >= w->map->epoch && mv.slot == op->slot)
            w->owner[op->slot] = (uint16_t)idx;
        op->target = be;
    }
    if (op->tries > 1)
        wait_op(w, op, px_now_ms() + px_backoff_ms(op->tries - 1));
    else
        px_route_op(w, op);
}

/* ---- the map fetch ---- */

static void fetch_next(struct px_worker *w);

static void fetch_close(struct px_fetch *f)
{
    if (f->ev) {
        event_free(f->ev);
        f->ev = NULL;
    }
    tls_conn_free(f->tls);
    f->tls = NULL;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

/* Every waiting op is tried again now: the map may have changed. */
void px_route_wake_waiting(struct px_worker *w)
{
    int64_t now = px_now_ms();
    for (struct px_op *op = w->waiting; op; op = op->next)
        if (op->retry_at_ms > now)
            op->retry_at_ms = now;
}

static void fetch_done(struct px_worker *w)
{
    struct px_fetch *f = &w->fetch;

    fetch_close(f);
    f->running = false;
    px_route_wake_waiting(w);
    if (f->again) {
        f->again = false;
        f->pending = true;
        f->again_at_ms = px_now_ms() + FETCH_AGAIN_MS;
    }
}

static void fetch_source_failed(struct px_worker *w)
{
    fetch_close(&w->fetch);
    w->fetch.cur++;
    fetch_next(w);
}

/* The current source did not answer (connect, send or read failed, or no
 * reply in time): its name is looked up again before the next connect,
 * in case it moved.  One that answered wrong is not. */
static void fetch_source_unreachable(struct px_worker *w)
{
    px_resolved_stale(w, &w->fetch.src[w->fetch.cur], &w->fetch.at);
    fetch_source_failed(w);
}

/* A complete reply from the current source. */
static void fetch_answer(struct px_worker *w, size_t n)
{
    struct px_fetch *f = &w->fetch;
    struct lc_map *m = NULL;
    char err[160];
    enum lc_config kind = lc_config_to_map(f->in.data + f->in.off, n, &f->src[f->cur], &m, err,
                                           sizeof(err));

    if (kind == LC_CONFIG_BAD) {
        fetch_source_failed(w);
        return;
    }
    switch (lc_map_judge(w->map, m, kind == LC_CONFIG_NO_CLUSTER, f->min_epoch)) {
    case LC_MAP_NEWER:
        bool installed = install_map(w, m);
        if (!installed)
            lc_map_free(m);
        fetch_done(w);
        if (installed)
            px_backend_drop_unowned(w);
        px_backend_leave_silent(w);
        px_meta_leave_silent(w);
        return;
    case LC_MAP_SAME:
        if (++f->same >= 2 || f->cur + 1 >= f->nsrc) {
            if (!install_map(w, m))        /* drops the MOVED hints */
                lc_map_free(m);
            fetch_done(w);
            return;
        }
        break;
    case LC_MAP_REFUSED:
        break;
    }
    lc_map_free(m);
    fetch_source_failed(w);
}

static void on_fetch(evutil_socket_t fd, short what, void *arg);

/* The fetch's socket events from now on (persistent); false if they
 * cannot be set. */
static bool fetch_wait(struct px_worker *w, short events)
{
    struct px_fetch *f = &w->fetch;

    if (f->ev != NULL) {
        event_del(f->ev);
        event_assign(f->ev, w->base, f->fd, events | EV_PERSIST, on_fetch, w);
    } else {
        f->ev = event_new(w->base, f->fd, events | EV_PERSIST, on_fetch, w);
    }
    return f->ev != NULL && event_add(f->ev, NULL) == 0;
}

/* Sends the request from f->req on; false if the event cannot be set. */
static bool fetch_send(struct px_worker *w, size_t len)
{
    struct px_fetch *f = &w->fetch;

    f->req_pos = f->req;
    f->req_left = len;
    return fetch_wait(w, EV_READ | EV_WRITE);
}

/* Under --backend-tls-*: one step of the handshake, which comes before
 * the request; once it is done, the events the request waits for. */
static void fetch_tls_step(struct px_worker *w)
{
    struct px_fetch *f = &w->fetch;
    short want = 0;
    char why[240];
    int r = px_tls_handshake(f->tls, &want, why, sizeof(why));
    if (r < 0) {
        if (w->id == 0 && !f->tls_logged)
            fprintf(stderr, "cocytus-proxy: map fetch from %s:%d: %s\n", f->src[f->cur].host,
                    f->src[f->cur].port, why);
        f->tls_logged = true;       /* once: every fetch would say it again */
        fetch_source_unreachable(w);
        return;
    }
    if (r == 0) {
        if (!fetch_wait(w, want))
            fetch_source_unreachable(w);
        return;
    }
    f->tls_up = true;
    if (!fetch_wait(w, EV_READ | EV_WRITE))
        fetch_source_unreachable(w);
}

/* A server with -Y answered the fetch "CLIENT_ERROR unauthenticated":
 * with --server-auth, the authentication set goes, then the fetch again
 * (the credentials go only to a server that asks for them).  True if the
 * reply was that and is handled. */
static bool fetch_asked(struct px_worker *w)
{
    struct px_fetch *f = &w->fetch;
    const char *p = f->in.data + f->in.off;
    const char *nl = f->in.len > 0 ? memchr(p, '\n', f->in.len) : NULL;

    if (!w->px->has_server_auth || f->auth_sent || nl == NULL ||
        !px_line_is(p, nl, "CLIENT_ERROR unauthenticated"))
        return false;
    px_rbuf_consume(&f->in, (size_t)(nl - p) + 1);
    size_t nauth = px_auth_ascii_request(w->px, f->req, sizeof(f->req) - sizeof(fetch_request));
    if (nauth == 0) {
        fetch_source_failed(w);
        return true;
    }
    memcpy(f->req + nauth, fetch_request, sizeof(fetch_request));
    f->auth_sent = true;
    f->auth_reply = true;
    if (!fetch_send(w, nauth + sizeof(fetch_request) - 1))
        fetch_source_unreachable(w);
    return true;
}

static void on_fetch(evutil_socket_t fd, short what, void *arg)
{
    struct px_worker *w = arg;
    struct px_fetch *f = &w->fetch;

    if (f->tls != NULL && !f->tls_up) {
        fetch_tls_step(w);
        return;
    }
    if ((what & EV_WRITE) && f->req_left > 0) {
        ssize_t n = f->tls ? tls_write(f->tls, f->req_pos, f->req_left)
                           : send(fd, f->req_pos, f->req_left, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            fetch_source_unreachable(w);
            return;
        }
        if (n > 0) {
            f->req_pos += n;
            f->req_left -= (size_t)n;
        }
        if (f->req_left == 0) {
            event_del(f->ev);
            event_assign(f->ev, w->base, f->fd, EV_READ | EV_PERSIST, on_fetch, w);
            event_add(f->ev, NULL);
        }
        return;
    }
    /* EV_WRITE after the request: TLS's read waited for the socket to
     * take bytes (a key update), and now it may read on. */
    if (!(what & EV_READ) && !(what & EV_WRITE && f->read_on_write))
        return;
    if (f->read_on_write) {
        f->read_on_write = false;
        if (!fetch_wait(w, EV_READ)) {
            fetch_source_unreachable(w);
            return;
        }
    }
    ssize_t n = px_rbuf_read(&f->in, f->fd, f->tls);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        fetch_source_unreachable(w);
        return;
    }
    if (n < 0 && tls_read_waits_write(f->tls)) {
        f->read_on_write = true;
        if (!fetch_wait(w, EV_WRITE))
            fetch_source_unreachable(w);
        return;
    }
    if (tls_pending(f->tls) > 0)
        event_active(f->ev, EV_READ, 0);    /* TLS read ahead: the socket will not say */
    if (fetch_asked(w))
        return;
    if (f->auth_reply) {
        /* the answer to our authentication set, before the map's */
        const char *p = f->in.data + f->in.off;
        const char *nl = memchr(p, '\n', f->in.len);
        if (nl == NULL)
            return;
        if (!px_line_is(p, nl, "STORED")) {
            char shown[81];
            if (w->id == 0 && !f->auth_logged)
                fprintf(stderr, "cocytus-proxy: %s:%d refused the proxy's credentials (%s)\n",
                        f->src[f->cur].host, f->src[f->cur].port,
                        printable_copy(shown, sizeof(shown), p,
                                       (size_t)(nl - p) - (nl > p && nl[-1] == '\r')));
            f->auth_logged = true;      /* once: every fetch would say it again */
            fetch_source_failed(w);
            return;
        }
        px_rbuf_consume(&f->in, (size_t)(nl - p) + 1);
        f->auth_reply = false;
    }
    size_t len = lc_config_reply_length(f->in.data + f->in.off, f->in.len);
    if (len > 0)
        fetch_answer(w, len);
    else if (f->in.len > FETCH_REPLY_MAX)
        fetch_source_failed(w);
}

/* Starts asking the sources from f->cur on; ends the fetch if none is left. */
static void fetch_next(struct px_worker *w)
{
    struct px_fetch *f = &w->fetch;

    for (; f->cur < f->nsrc; f->cur++) {
        /* A name not looked up yet (a server a MOVED names, asked first)
         * is not looked up here: a name server that does not answer would
         * hold the worker.  Its lookup starts, and the others are asked. */
        int fd = px_connect_start(w, &f->src[f->cur], &f->at, false);
        if (fd == PX_CONNECT_LOOKING_UP)
            f->skipped_lookup = true;
        if (fd < 0)
            continue;
        f->fd = fd;
        f->in.off = f->in.len = 0;
        memcpy(f->req, fetch_request, sizeof(fetch_request));
        f->auth_reply = false;
        f->auth_sent = false;
        f->tls_up = false;
        f->read_on_write = false;
        if (w->px->dialer != NULL &&
            (f->tls = tls_conn_dial(w->px->dialer, fd, f->src[f->cur].host)) == NULL) {
            fetch_close(f);
            continue;
        }
        if (!fetch_send(w, sizeof(fetch_request) - 1)) {
            px_resolved_stale(w, &f->src[f->cur], &f->at);
            fetch_close(f);
            continue;
        }
        f->cur_deadline_ms = px_now_ms() + PX_FETCH_TIMEOUT_MS;
        return;
    }
    fetch_done(w);
    if (f->skipped_lookup && !f->pending) {
        /* no source answered, and some were being looked up: again soon */
        f->pending = true;
        f->again_at_ms = px_now_ms() + FETCH_LOOKUP_WAIT_MS;
    }
}

static void fetch_start(struct px_worker *w, const struct lc_addr *prefer,
                        const struct lc_addr *avoid, uint64_t min_epoch)
{
    struct px_fetch *f = &w->fetch;

    f->running = true;
    f->started_ms = px_now_ms();
    f->pending = false;
    f->again = false;
    f->has_prefer = false;
    f->min_epoch = min_epoch;
    f->same = 0;
    f->skipped_lookup = false;
    f->cur = 0;
    f->nsrc = lc_refresh_sources(prefer, avoid, w->px->seeds, w->px->nseeds, w->map, f->src,
                                 PX_FETCH_MAX_SOURCES);
    fetch_next(w);
}

void px_route_refresh(struct px_worker *w, const struct lc_addr *prefer,
                      const struct lc_addr *avoid, uint64_t min_epoch)
{
    struct px_fetch *f = &w->fetch;

    if (f->running || f->pending) {
        /* one more fetch after this one, with what is asked now */
        if (f->running)
            f->again = true;
        if (min_epoch > f->min_epoch)
            f->min_epoch = min_epoch;
        if (prefer) {
            f->prefer = *prefer;
            f->has_prefer = true;
        }
        return;
    }
    fetch_start(w, prefer, avoid, min_epoch);
}

/* ---- time ---- */

void px_route_tick(struct px_worker *w, int64_t now_ms)
{
    struct px_fetch *f = &w->fetch;

    px_backend_check_timeouts(w, now_ms);
    if (f->running && now_ms > f->cur_deadline_ms)
        fetch_source_unreachable(w);
    if (!f->running && f->pending && now_ms >= f->again_at_ms) {
        struct lc_addr prefer = f->prefer;
        fetch_start(w, f->has_prefer ? &prefer : NULL, NULL, f->min_epoch);
    }
    const struct px_backend *silent;
    if (!f->running && !f->pending && now_ms - f->started_ms >= SILENT_FETCH_MS &&
        (silent = px_backend_silent_busy(w)) != NULL) {
        struct lc_addr avoid = silent->addr;
        fetch_start(w, NULL, &avoid, 0);
    }
    /* the ops due now; those that wait again go to a new list */
    struct px_op *list = w->waiting;
    w->waiting = w->waiting_tail = NULL;
    w->nwaiting = 0;
    while (list) {
        struct px_op *op = list;
        list = op->next;
        op->next = NULL;
        if (op->req == NULL) {
            px_op_free(op);
        } else if (now_ms >= op->deadline_ms) {
            give_up(w, op);
        } else if (now_ms >= op->retry_at_ms) {
            op->state = OP_NEW;
            px_route_op(w, op);
        } else {
            queue_op(w, op, op->retry_at_ms, false);
        }
    }
}
