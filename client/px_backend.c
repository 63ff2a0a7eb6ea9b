/* px_backend.c - cocytus-proxy: one worker's connection to one server.
 *
 * A backend is a persistent non-blocking TCP connection speaking the binary
 * protocol, with requests pipelined: an op is appended to the output
 * buffer and to the in-flight FIFO, and the worker's flush step writes
 * everything queued in one writev per loop iteration.  Replies are read on
 * readiness (persistent read event, one recv() per wake-up into a plain
 * buffer), framed by their 24-byte header, and matched to the FIFO's first
 * op, whose opaque they must carry: the server answers a connection's
 * requests in order.
 *
 * A connection that breaks, sends what is not a reply in order, or leaves
 * its oldest request unanswered for timeout_ms (unless it holds one that
 * cannot be sent twice: be_hold) is closed, and every op on it goes back
 * to the router, which knows which of them may have reached
 * the server (op->start_byte against the bytes written).  The backend then
 * stays down for a back-off that doubles per failure; a request routed to
 * it meanwhile waits instead of paying a connect each time.  A dead or
 * stopped server therefore only delays the ops that are routed to it.
 * Transitions are logged once: down with the reason, and up again when
 * the server answers (not when it accepts: a stopped process's kernel
 * still completes connections).
 *
 * With --backend-tls-* (servers with TLS on their client ports) a new
 * connection shakes hands first (BE_HANDSHAKE), the server's certificate
 * checked against the CA and the name dialled; then its bytes move
 * through TLS, one record per write and without the worker's io_uring
 * batch (the bytes of a TLS write that waited must be offered again). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "bin_wire.h"
#include "px.h"

#define SMALL_COPY 4096        /* ops smaller than this are copied into the output */
#define PX_FIRST_LOOKUP_POLL_MS 1000   /* ops waiting for a name's first lookup retry */

int px_connect_start(struct px_worker *w, const struct lc_addr *a, struct px_at *at,
                     bool in_place)
{
    const struct px_addrs *r = px_resolved_get(w, a, in_place);
    int err = EHOSTUNREACH;

    at->len = 0;
    if (r == NULL && errno == EAGAIN)
        return PX_CONNECT_LOOKING_UP;   /* its first lookup has not answered */
    for (int k = 0; r != NULL && k < r->n; k++) {
        int i = (r->first + k) % r->n;
        int fd = socket(r->sa[i].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (const struct sockaddr *)&r->sa[i], r->salen[i]) == 0 ||
            errno == EINPROGRESS) {
            memcpy(&at->sa, &r->sa[i], r->salen[i]);
            at->len = r->salen[i];
            return fd;
        }
        err = errno;
        close(fd);
    }
    px_resolved_stale(w, a, NULL);  /* it may have moved (a replaced node) */
    errno = err;
    return -1;
}

static void on_be_read(evutil_socket_t fd, short what, void *arg);
static void on_be_write(evutil_socket_t fd, short what, void *arg);

static struct px_backend *px_backend_find(struct px_worker *w, const struct lc_addr *a)
{
    for (struct px_backend *be = w->all_be; be; be = be->next_all)
        if (lc_addr_equal(&be->addr, a))
            return be;
    return NULL;
}

struct px_backend *px_backend_get(struct px_worker *w, const struct lc_addr *a)
{
    struct px_backend *be = px_backend_find(w, a);
    if (be != NULL)
        return be;
    be = calloc(1, sizeof(*be));
    if (be == NULL)
        return NULL;
    be->out = evbuffer_new();
    if (be->out == NULL) {
        free(be);
        return NULL;
    }
    be->w = w;
    be->addr = *a;
    lc_addr_format(a, be->name, sizeof(be->name));
    be->fd = -1;
    be->sq_slot = -1;
    be->state = BE_IDLE;
    be->st = px_stats_for(w->px, be->name);
    be->next_all = w->all_be;
    w->all_be = be;
    return be;
}

static void be_mark_dirty(struct px_backend *be)
{
    if (be->dirty)
        return;
    be->dirty = true;
    be->next_dirty = be->w->dirty_be;
    be->w->dirty_be = be;
}

static void be_close_socket(struct px_backend *be)
{
    if (be->rev) {
        event_free(be->rev);
        be->rev = NULL;
    }
    if (be->wev) {
        event_free(be->wev);
        be->wev = NULL;
    }
    tls_conn_free(be->tls);
    be->tls = NULL;
    if (be->fd >= 0)
        close(be->fd);
    be->fd = -1;
    evbuffer_drain(be->out, evbuffer_get_length(be->out));
    be->in.off = be->in.len = 0;
}

/* This flush step's batched message: what went is drained from out and
 * counted as written, and so is a message that may or may not have gone
 * (px_batched_result), since its ops may have been applied.  As
 * px_send_buffer returns: bytes sent, or -1 with errno. */
static ssize_t be_take_batch(struct px_backend *be)
{
    ssize_t n = px_batched_result(be->w->sq, &be->sq_slot, be->out, &be->written_bytes);
    if (n > 0)
        be->written_bytes += (uint64_t)n;
    return n;
}

/* Close be's connection and hand every op on it back.  failure: the
 * connection failed (logged, counted, the name looked up again, a back-off
 * before the next connect, a map fetch); else it is only given up (its
 * name moved) and the next connect may come at once. */
static void be_drop(struct px_backend *be, const char *why, bool timed_out, bool failure)
{
    struct px_worker *w = be->w;
    char msg[200];

    snprintf(msg, sizeof(msg), "%.80s: %.110s", be->name, why);
    if (failure && !be->was_down) {
        fprintf(stderr, "cocytus-proxy: worker %d: backend %s down: %s\n", w->id, be->name, why);
        be->was_down = true;
    }
    if (failure) {
        __atomic_store_n(&be->st->down, 1, __ATOMIC_RELAXED);
        px_count(&be->st->errors, 1);
        px_count(timed_out ? &w->st.timeouts : &w->st.conn_failures, 1);
    }
    be->silent = failure && timed_out;
    be->hold_until_ms = 0;
    /* A message of this flush step's batch went out or not: count it
     * first, since which ops may have been applied depends on it. */
    if (be->sq_slot >= 0)
        be_take_batch(be);
    uint64_t written = be->written_bytes;
    be_close_socket(be);
    /* Its address is to blame only if it never answered there. */
    if (failure)
        px_resolved_stale(w, &be->addr, be->state == BE_UP ? NULL : &be->at);
    be->state = BE_DOWN;
    if (failure)
        be->fails++;
    be->retry_at_ms = px_now_ms() + (failure ? px_backoff_ms(be->fails) : 0);
    struct px_op *op = be->head;
    be->head = be->tail = NULL;
    __atomic_fetch_sub(&be->st->inflight, (int64_t)be->ninflight, __ATOMIC_RELAXED);
    w->ninflight -= be->ninflight;
    be->ninflight = 0;
    be->queued_bytes = be->written_bytes = 0;
    if (failure)
        px_route_refresh(w, NULL, &be->addr, 0);
    while (op) {
        struct px_op *next = op->next;
        bool lost = op->start_byte < written;
        op->next = NULL;
        op->be = NULL;
        op->state = OP_NEW;
        px_route_failed(w, op, lost, msg);
        op = next;
    }
}

static void be_fail(struct px_backend *be, const char *why, bool timed_out)
{
    be_drop(be, why, timed_out, true);
}

/* An idle connection closed: the next op connects anew. */
static void be_go_idle(struct px_backend *be)
{
    be_close_socket(be);
    be->state = BE_IDLE;
    be->queued_bytes = be->written_bytes = 0;
}

static void be_up(struct px_backend *be)
{
    be->state = BE_UP;
    be_mark_dirty(be);
}

/* Writes one request of the SASL exchange.  The socket is new and its
 * send buffer empty, so a few hundred bytes go whole or not at all. */
static bool be_send_auth(struct px_backend *be, const char *req, size_t n)
{
    if (n == 0) {
        be_fail(be, "cannot build the SASL request", false);
        return false;
    }
    ssize_t w = be->tls ? tls_write(be->tls, req, n) : send(be->fd, req, n, MSG_NOSIGNAL);
    if (w != (ssize_t)n) {
        char why[240];
        snprintf(why, sizeof(why), "write: %s",
                 w >= 0 ? "short write" : be->tls ? tls_conn_error(be->tls) : strerror(errno));
        be_fail(be, why, false);
        return false;
    }
    return true;
}

static void be_connected(struct px_backend *be)
{
    event_add(be->rev, NULL);
    if (!be->w->px->has_server_auth) {
        be_up(be);
        return;
    }
    /* --server-auth: ask which mechanisms the server offers before any
     * op, so that the pair goes only to a server that asks for it */
    char req[BIN_HEADER_LEN];
    be->state = BE_AUTH;
    be->auth_step = BE_AUTH_LIST;
    be_send_auth(be, req, px_auth_sasl_list_request(req, sizeof(req)));
}

/* One reply of the SASL exchange (opaque 0).  False if the connection
 * failed. */
static bool be_auth_reply(struct px_backend *be, const char *h, size_t total)
{
    uint16_t st = bin_load16(h + BIN_OFF_STATUS);
    char why[100];

    if (bin_load32(h + BIN_OFF_OPAQUE) != 0) {
        be_fail(be, "reply to nothing", false);
        return false;
    }
    if (be->auth_step == BE_AUTH_LIST) {
        size_t skip = (size_t)(unsigned char)h[BIN_OFF_EXTLEN] + bin_load16(h + BIN_OFF_KEYLEN);
        if (skip > total - BIN_HEADER_LEN) {
            be_fail(be, "a malformed SASL reply", false);
            return false;
        }
        const char *v = h + BIN_HEADER_LEN + skip;
        size_t nv = total - BIN_HEADER_LEN - skip;
        if (st == BIN_STATUS_UNKNOWN_COMMAND) {
            be_up(be);                  /* no -Y: it does not ask */
            return true;
        }
        if (st == BIN_STATUS_OK && nv >= 5 && memmem(v, nv, "PLAIN", 5) != NULL) {
            char req[BIN_HEADER_LEN + 5 + 2 * AUTHFILE_FIELD_MAX + 3];
            be->auth_step = BE_AUTH_PLAIN;
            return be_send_auth(be, req, px_auth_sasl_request(be->w->px, req, sizeof(req)));
        }
        snprintf(why, sizeof(why), "the server offers no SASL PLAIN (status 0x%02x)", st);
        be_fail(be, why, false);
        return false;
    }
    if (st != BIN_STATUS_OK) {
        snprintf(why, sizeof(why), "the server refused our credentials (status 0x%02x)", st);
        be_fail(be, why, false);
        return false;
    }
    be_up(be);
    return true;
}

/* One step of the TLS handshake; be_connected once it is done. */
static void be_tls_step(struct px_backend *be)
{
    short want = 0;
    char why[240];
    int r = px_tls_handshake(be->tls, &want, why, sizeof(why));
    if (r < 0)
        be_fail(be, why, false);
    else if (r > 0)
        be_connected(be);
    else if (want == EV_WRITE)
        event_add(be->wev, NULL);     /* rev, persistent, is added already */
}

/* The TCP connection is made: TLS first if the servers speak it. */
static void be_tcp_up(struct px_backend *be)
{
    struct tls_dialer *d = be->w->px->dialer;
    if (d == NULL) {
        be_connected(be);
        return;
    }
    be->tls = tls_conn_dial(d, be->fd, be->addr.host);
    if (be->tls == NULL) {
        be_fail(be, "TLS: out of memory", false);
        return;
    }
    be->state = BE_HANDSHAKE;
    event_add(be->rev, NULL);
    be_tls_step(be);
}

static bool be_connect(struct px_backend *be)
{
    int fd = px_connect_start(be->w, &be->addr, &be->at, false);

    if (fd == PX_CONNECT_LOOKING_UP) {
        /* Its name is looked up for the first time, on a thread: a name
         * server that does not answer would have held every client of
         * this worker for seconds.  The ops wait; the answer wakes them
         * (px_backend_name_moved), and this poll is the backstop. */
        be->state = BE_DOWN;
        be->retry_at_ms = px_now_ms() + PX_FIRST_LOOKUP_POLL_MS;
        return false;
    }
    if (fd < 0) {
        char why[120];
        snprintf(why, sizeof(why), "connect: %s", strerror(errno));
        be_fail(be, why, false);
        return false;
    }
    be->fd = fd;
    be->rev = event_new(be->w->base, fd, EV_READ | EV_PERSIST, on_be_read, be);
    be->wev = event_new(be->w->base, fd, EV_WRITE, on_be_write, be);
    if (be->rev == NULL || be->wev == NULL) {
        be_fail(be, "out of memory", false);
        return false;
    }
    be->state = BE_CONNECTING;
    be->in.off = be->in.len = 0;
    be->connect_started_ms = px_now_ms();
    event_add(be->wev, NULL);
    return true;
}

bool px_backend_send(struct px_backend *be, struct px_op *op)
{
    if (be->state == BE_DOWN) {
        if (px_now_ms() < be->retry_at_ms)
            return false;
        be->state = BE_IDLE;
    }
    if (be->state == BE_IDLE && !be_connect(be))
        return false;
    bin_store32(op->wire + BIN_OFF_OPAQUE, ++be->next_opaque);
    if ((unsigned char)op->wire[BIN_OFF_OPCODE] == BIN_OP_STAT)
        px_stats_forget(op);            /* a try lost midway: its lines are counted anew */
    if (op->nwire < SMALL_COPY)
        evbuffer_add(be->out, op->wire, op->nwire);
    else
        evbuffer_add_reference(be->out, op->wire, op->nwire, NULL, NULL);
    op->start_byte = be->queued_bytes;
    be->queued_bytes += op->nwire;
    op->be = be;
    op->state = OP_INFLIGHT;
    op->next = NULL;
    op->sent_us = px_now_us();
    if (be->tail)
        be->tail->next = op;
    else
        be->head = op;
    be->tail = op;
    be->ninflight++;
    be->w->ninflight++;
    px_count(&be->st->requests, 1);
    __atomic_fetch_add(&be->st->inflight, 1, __ATOMIC_RELAXED);
    if (be->state == BE_UP)
        be_mark_dirty(be);
    return true;
}

/* Its output as one message of the worker's next batch. */
void px_backend_queue(struct px_backend *be)
{
    if (be->state == BE_UP && be->tls == NULL && be->sq_slot < 0 &&
        evbuffer_get_length(be->out) > 0)
        be->sq_slot = px_queue_buffer(be->w->sq, be->out, be->fd);
}

void px_backend_flush(struct px_backend *be)
{
    be->dirty = false;
    if (be->state != BE_UP)
        return;
    if (be->sq_slot >= 0 && be_take_batch(be) < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        char why[120];
        snprintf(why, sizeof(why), "write: %s", strerror(errno));
        be_fail(be, why, false);
        return;
    }
    for (int i = 0; i < 8 && evbuffer_get_length(be->out) > 0; i++) {
        ssize_t n = be->tls ? px_send_buffer_tls(be->out, be->tls, PX_TLS_RECORD)
                            : px_send_buffer(be->out, be->fd);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char why[240];
            snprintf(why, sizeof(why), "write: %s",
                     be->tls ? tls_conn_error(be->tls) : strerror(errno));
            be_fail(be, why, false);
            return;
        }
        if (n == 0)
            break;
        be->written_bytes += (uint64_t)n;
    }
    /* (A TLS write that waits for input goes on after the next read:
     * on_be_read marks be dirty; a write event would fire at once, again.) */
    if (evbuffer_get_length(be->out) > 0 && !tls_write_waits_read(be->tls))
        event_add(be->wev, NULL);
}

static void on_be_write(evutil_socket_t fd, short what, void *arg)
{
    struct px_backend *be = arg;

    (void)fd;
    (void)what;
    if (be->state == BE_CONNECTING) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (getsockopt(be->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            soerr = errno;
        if (soerr != 0) {
            char why[120];
            snprintf(why, sizeof(why), "connect: %s", strerror(soerr));
            be_fail(be, why, false);
            return;
        }
        be_tcp_up(be);
        return;
    }
    if (be->state == BE_HANDSHAKE) {
        be_tls_step(be);
        return;
    }
    if (tls_read_waits_write(be->tls))
        on_be_read(be->fd, EV_READ, be);   /* the read TLS held until it could write */
    be_mark_dirty(be);
}

/* The server answered: it is up (a stopped process's kernel still accepts
 * connections, so a connect alone does not say so). */
static void be_answered(struct px_backend *be)
{
    be->fails = 0;
    be->silent = false;
    be->hold_until_ms = 0;
    if (be->was_down) {
        fprintf(stderr, "cocytus-proxy: worker %d: backend %s up\n", be->w->id, be->name);
        be->was_down = false;
    }
    __atomic_store_n(&be->st->down, 0, __ATOMIC_RELAXED);
}

/* A packet of a STAT's reply that carries a statistic (not the last). */
static bool is_stat_line(const struct px_op *op, const char *h, size_t total)
{
    size_t ext = (unsigned char)h[BIN_OFF_EXTLEN], nkey = bin_load16(h + BIN_OFF_KEYLEN);
    return (unsigned char)op->wire[BIN_OFF_OPCODE] == BIN_OP_STAT &&
           bin_load16(h + BIN_OFF_STATUS) == BIN_STATUS_OK && nkey > 0 &&
           BIN_HEADER_LEN + ext + nkey <= total;
}

/* Handles every complete reply buffered.  False if the connection failed. */
static bool be_replies(struct px_backend *be)
{
    struct px_worker *w = be->w;
    struct px_rbuf *in = &be->in;

    while (in->len >= BIN_HEADER_LEN) {
        const char *h = in->data + in->off;
        size_t total = BIN_HEADER_LEN + bin_load32(h + BIN_OFF_BODYLEN);
        if ((unsigned char)h[BIN_OFF_MAGIC] != BIN_MAGIC_RESPONSE) {
            be_fail(be, "not a binary reply", false);
            return false;
        }
        if (in->len < total) {
            if (!px_rbuf_reserve(in, total - in->len)) {
                be_fail(be, "out of memory", false);
                return false;
            }
            break;
        }
        if (be->state == BE_AUTH) {
            if (!be_auth_reply(be, h, total))
                return false;
            px_rbuf_consume(in, total);
            continue;
        }
        struct px_op *op = be->head;
        if (op == NULL || bin_load32(h + BIN_OFF_OPAQUE) != bin_load32(op->wire + BIN_OFF_OPAQUE)) {
            be_fail(be, op ? "reply out of order" : "reply to nothing", false);
            return false;
        }
        if (be->was_down || be->fails || be->silent || be->hold_until_ms)
            be_answered(be);
        if (is_stat_line(op, h, total)) {
            /* one statistic: a STAT's reply ends with the packet without a key */
            size_t ext = (unsigned char)h[BIN_OFF_EXTLEN], nkey = bin_load16(h + BIN_OFF_KEYLEN);
            const char *name = h + BIN_HEADER_LEN + ext;
            px_stats_collect(op, name, nkey, name + nkey, total - BIN_HEADER_LEN - ext - nkey);
            px_rbuf_consume(in, total);
            continue;
        }
        be->head = op->next;
        if (be->head == NULL)
            be->tail = NULL;
        be->ninflight--;
        w->ninflight--;
        op->next = NULL;
        op->be = NULL;
        __atomic_fetch_sub(&be->st->inflight, 1, __ATOMIC_RELAXED);
        px_stats_latency(be->st, px_now_us() - op->sent_us);
        uint16_t status = bin_load16(h + BIN_OFF_STATUS);
        const char *body = h + BIN_HEADER_LEN;
        size_t nbody = total - BIN_HEADER_LEN;
        if (status == BIN_STATUS_NOT_MY_VBUCKET) {
            op->state = OP_NEW;
            px_route_moved(w, op, be, body, nbody);
        } else {
            px_op_reply(w, op, h, body, nbody);
        }
        px_rbuf_consume(in, total);
    }
    return true;
}

static void on_be_read(evutil_socket_t fd, short what, void *arg)
{
    struct px_backend *be = arg;

    (void)fd;
    (void)what;
    if (be->state == BE_HANDSHAKE) {
        be_tls_step(be);
        return;
    }
    /* Under TLS, bytes it read ahead wake nobody: read them too. */
    do {
        ssize_t n = px_rbuf_read(&be->in, be->fd, be->tls);
        if (n == 0) {
            be_fail(be, "connection closed", false);
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                char why[240];
                snprintf(why, sizeof(why), "read: %s",
                         be->tls ? tls_conn_error(be->tls) : strerror(errno));
                be_fail(be, why, false);
            } else if (tls_read_waits_write(be->tls)) {
                event_add(be->wev, NULL);
            }
            return;
        }
        if (!be_replies(be))
            return;
    } while (be->tls != NULL && tls_pending(be->tls) > 0);
    if (tls_write_waits_read(be->tls))
        be_mark_dirty(be);          /* the write that waited for input goes on */
}

/* The oldest op on be that reached the server and cannot be sent twice
 * (incr, append, cas, add...) for a client still waiting, or NULL. */
static const struct px_op *oldest_unrepeatable(const struct px_backend *be)
{
    for (const struct px_op *op = be->head; op; op = op->next)
        if (op->req != NULL && !op->retry_lost && op->fanout < 0 &&
            op->start_byte < be->written_bytes)
            return op;
    return NULL;
}

/* be's oldest request is unanswered after timeout_ms.  Closing the
 * connection lets the ops that are harmless twice go again, but turns one
 * that is not into an error ("may have been applied") though its server
 * may only be slow: a parity process of its group stopped or dead, whose
 * acks every write waits for until the coordinator drops it (1.5 s and
 * more; longer while no coordinator leads).  So the connection is held
 * open until the oldest such op's deadline, fixed when the hold begins
 * (later requests do not extend it), and the map is polled meanwhile as
 * for a silent server (px_route.c): a reply ends the hold (be_answered;
 * if the next request is overdue too, a new one may begin), a map that
 * gives one of its slots to another server closes the connection
 * (px_backend_leave_silent), and so does the end of the hold.  The ops
 * behind it wait too, as they would behind any slow reply.  True while be
 * is held. */
static bool be_hold(struct px_backend *be, int64_t now_ms, int timeout)
{
    if (be->hold_until_ms == 0) {
        const struct px_op *op = oldest_unrepeatable(be);
        if (op == NULL || now_ms >= op->deadline_ms)
            return false;
        be->hold_until_ms = op->deadline_ms;
        fprintf(stderr, "cocytus-proxy: worker %d: backend %s: no reply in %d ms; waiting, "
                "since a request in flight cannot be sent twice (slot %u), for at most %lld ms "
                "more\n", be->w->id, be->name, timeout, op->slot,
                (long long)(op->deadline_ms - now_ms));
    }
    return now_ms < be->hold_until_ms;
}

void px_backend_check_timeouts(struct px_worker *w, int64_t now_ms)
{
    int timeout = w->px->opt.timeout_ms;
    int64_t now_us = now_ms * 1000;

    for (struct px_backend *be = w->all_be; be; be = be->next_all) {
        char why[80];
        if ((be->state == BE_CONNECTING || be->state == BE_HANDSHAKE || be->state == BE_AUTH) &&
            now_ms - be->connect_started_ms > timeout) {
            snprintf(why, sizeof(why), "%s: no answer in %d ms",
                     be->state == BE_AUTH        ? "SASL"
                     : be->state == BE_HANDSHAKE ? "TLS handshake"
                                                 : "connect",
                     timeout);
            be_fail(be, why, true);
        } else if (be->state == BE_UP && be->head &&
                   now_us - be->head->sent_us > (int64_t)timeout * 1000 &&
                   !be_hold(be, now_ms, timeout)) {
            snprintf(why, sizeof(why), "no reply in %lld ms",
                     (long long)((now_us - be->head->sent_us) / 1000));
            be_fail(be, why, true);
        }
    }
}

/* Whether the map gives be at least one slot. */
static bool owns_a_slot(const struct px_worker *w, const struct px_backend *be)
{
    for (size_t s = 0; s < COCYTUS_SLOTS; s++)
        if (w->be[w->owner[s]] == be)
            return true;
    return false;
}

const struct px_backend *px_backend_silent_busy(const struct px_worker *w)
{
    if (w->ninflight == 0 && w->nwaiting == 0 && !px_meta_busy(w))
        return NULL;
    /* Only while something waits for it: a request on its connection or a
     * meta connection's, or a slot the map still gives it (requests for
     * which wait or will come).  A server taken over is asked no more. */
    for (const struct px_backend *be = w->all_be; be; be = be->next_all)
        if ((be->silent || be->hold_until_ms) &&
            (be->head != NULL || px_meta_waits_on(w, &be->addr) || owns_a_slot(w, be)))
            return be;
    return px_meta_held(w);
}

/* Whether the map now gives op's slot to a server other than be: a keyed
 * op only (a flush's or a stats poll's goes to its server whatever the
 * map says). */
static bool slot_moved_from(const struct px_worker *w, const struct px_op *op,
                            const struct px_backend *be)
{
    return op->fanout < 0 && op->mop == NULL && w->be[w->owner[op->slot]] != be;
}

/* The first op in be's queue whose slot the map now gives to another
 * server, or NULL. */
static const struct px_op *first_moved(const struct px_worker *w, const struct px_backend *be)
{
    for (const struct px_op *op = be->head; op; op = op->next)
        if (slot_moved_from(w, op, be))
            return op;
    return NULL;
}

void px_backend_leave_silent(struct px_worker *w)
{
    for (struct px_backend *be = w->all_be; be; be = be->next_all) {
        const struct px_op *moved =
            be->silent || be->hold_until_ms ? first_moved(w, be) : NULL;
        if (moved == NULL)
            continue;
        /* It answers in order, so nothing behind an op whose server may
         * never answer is answered either: taken over, a silent process
         * exits once it runs again, without applying anything
         * (docs/recovery.md).  Its other ops come back to it once it
         * answers again, or go where the next map says. */
        fprintf(stderr, "cocytus-proxy: worker %d: backend %s: silent, and the map gives slot %u "
                "to another server: its %zu request(s) in flight go to the new owners\n",
                w->id, be->name, moved->slot, be->ninflight);
        be_fail(be, "silent, and the map gave its slots to another server", true);
    }
}

void px_backend_name_moved(struct px_worker *w, const struct lc_addr *a,
                           const struct px_addrs *addrs)
{
    int64_t now = px_now_ms();
    for (struct px_backend *be = w->all_be; be; be = be->next_all) {
        if (!lc_addr_equal(&be->addr, a))
            continue;
        bool gone = be->fd >= 0 && be->at.len > 0 && !px_addrs_have(addrs, &be->at);
        if (gone && (be->state == BE_CONNECTING || be->state == BE_HANDSHAKE ||
                     be->state == BE_AUTH)) {
            /* nothing of its requests was answered: all go again */
            be_drop(be, "its name now resolves to another address", false, false);
        } else if (gone && be->state == BE_UP && be->head == NULL && be->sq_slot < 0) {
            be_go_idle(be);
        }
        /* One with requests in flight keeps them: they are answered or
         * time out (a name that only changed its set of addresses may
         * still be served there). */
        if (be->state == BE_DOWN && be->retry_at_ms > now)
            be->retry_at_ms = now;      /* the new address at once */
    }
    px_route_wake_waiting(w);           /* and the requests waiting for it */
}

void px_backend_drop_unowned(struct px_worker *w)
{
    for (struct px_backend *be = w->all_be; be; be = be->next_all) {
        if (be->state != BE_UP || be->head != NULL || be->sq_slot >= 0 || be->hold_until_ms ||
            owns_a_slot(w, be))
            continue;
        /* Idle, and taken over: its process died or stopped, and if its
         * host is gone this connection would only time out when the
         * server is back (on a spare, under the same name).  The next
         * request connects anew, after looking the name up again. */
        be_go_idle(be);
        px_resolved_stale(w, &be->addr, NULL);
    }
}

void px_backend_close_all(struct px_worker *w)
{
    while (w->all_be) {
        struct px_backend *be = w->all_be;
        w->all_be = be->next_all;
        be_close_socket(be);
        for (struct px_op *op = be->head, *next; op; op = next) {
            next = op->next;
            if (op->req == NULL)
                px_op_free(op);
            else
                op->state = OP_DONE;     /* freed with its request */
        }
        evbuffer_free(be->out);
        px_rbuf_free(&be->in);
        free(be);
    }
}
