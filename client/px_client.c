/* px_client.c - cocytus-proxy: client connections and the requests they
 * have in progress.
 *
 * A client socket is read on readiness with one recv() into a plain buffer
 * (no FIONREAD, no re-arming: the read event is persistent), and every
 * complete request in it is started at once: its ops go to their backends'
 * output.  Requests wait in the client's FIFO; the reply of the first one
 * goes straight into the client's output, a later one's into its own buffer
 * until everything before it has answered, so replies keep request order
 * however the servers' answers interleave.  Output is written by the
 * worker's flush step after the loop iteration (one write for all the
 * replies an iteration produced); only a partial write arms the write
 * event.  A client with too much in progress (PX_MAX_PIPELINE requests,
 * PX_OUT_HIGH bytes of requests kept for resending, or PX_OUT_HIGH bytes of
 * replies unsent) is not read until it drains, which bounds the memory one
 * connection can hold (a request is always started once it is complete).
 *
 * Closing a client frees its requests; an op still in a backend's FIFO is
 * only detached (op->req = NULL) and freed when its reply comes, since the
 * FIFO must still match that reply.
 *
 * With --tls-cert a client's bytes go through TLS (memcached/tls.h): a
 * read returns one record's bytes, what TLS holds beyond it re-arms the
 * read event, and output is written a record at a time by the flush step,
 * not in the worker's io_uring batch. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "bin_wire.h"
#include "px.h"
#include "sendq.h"

/* ---- clock ---- */

int64_t px_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t px_now_ms(void)
{
    return px_now_us() / 1000;
}

/* ---- buffers ---- */

bool px_rbuf_reserve(struct px_rbuf *b, size_t room)
{
    if (b->off > 0 && (b->len == 0 || b->cap - b->off - b->len < room)) {
        memmove(b->data, b->data + b->off, b->len);
        b->off = 0;
    }
    if (b->cap - b->off - b->len >= room)
        return true;
    size_t cap = b->cap ? b->cap : PX_READ_CHUNK;
    while (cap - b->len < room)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return false;
    b->data = p;
    b->cap = cap;
    return true;
}

void px_rbuf_consume(struct px_rbuf *b, size_t n)
{
    b->off += n;
    b->len -= n;
    if (b->len == 0)
        b->off = 0;
}

bool px_line_is(const char *p, const char *nl, const char *text)
{
    size_t n = strlen(text);
    return (size_t)(nl - p) == n + 1 && memcmp(p, text, n) == 0 && p[n] == '\r';
}

void px_rbuf_free(struct px_rbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* The front of out (up to PX_SEND_IOV chains) as an iovec; its length. */
static int buffer_iov(struct evbuffer *out, struct iovec *iov)
{
    struct evbuffer_iovec vec[PX_SEND_IOV];
    int n = evbuffer_peek(out, -1, NULL, vec, PX_SEND_IOV);

    if (n > PX_SEND_IOV)
        n = PX_SEND_IOV;
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = vec[i].iov_base;
        iov[i].iov_len = vec[i].iov_len;
    }
    return n;
}

int px_queue_buffer(struct sendq *q, struct evbuffer *out, int fd)
{
    struct iovec iov[PX_SEND_IOV];
    int n = buffer_iov(out, iov);

    return n > 0 ? sendq_add(q, fd, iov, n, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
}

ssize_t px_batched_result(struct sendq *q, int *slot, struct evbuffer *out, uint64_t *maybe)
{
    ssize_t n = sendq_result(q, *slot);
    size_t len = sendq_msg_bytes(q, *slot);

    *slot = -1;
    if (n == -EIO) {
        evbuffer_drain(out, len);
        if (maybe != NULL)
            *maybe += len;
    }
    if (n < 0) {
        errno = (int)-n;
        return -1;
    }
    if (n > 0)
        evbuffer_drain(out, (size_t)n);
    return n;
}

ssize_t px_send_buffer(struct evbuffer *out, int fd)
{
    struct iovec iov[PX_SEND_IOV];
    int n = buffer_iov(out, iov);
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t w;
    do
        w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w > 0)
        evbuffer_drain(out, (size_t)w);
    return w;
}

ssize_t px_send_buffer_tls(struct evbuffer *out, struct tls_conn *tls, size_t cap)
{
    size_t len = evbuffer_get_length(out);
    size_t n = len < cap ? len : cap;
    unsigned char *p = evbuffer_pullup(out, (ssize_t)n);
    if (p == NULL) {
        errno = ENOMEM;
        return -1;
    }
    ssize_t w = tls_write(tls, p, n);
    if (w > 0)
        evbuffer_drain(out, (size_t)w);
    return w;
}

int px_tls_handshake(struct tls_conn *tc, short *want, char *why, size_t whylen)
{
    switch (tls_handshake(tc)) {
    case TLS_HS_DONE:
        return 1;
    case TLS_HS_WANTS_READ:
        *want = EV_READ;
        return 0;
    case TLS_HS_WANTS_WRITE:
        *want = EV_WRITE;
        return 0;
    default:
        snprintf(why, whylen, "%s", tls_conn_error(tc));
        return -1;
    }
}

ssize_t px_rbuf_read(struct px_rbuf *b, int fd, struct tls_conn *tls)
{
    if (!px_rbuf_reserve(b, PX_READ_CHUNK / 2)) {
        errno = ENOMEM;
        return -1;
    }
    char *tail = b->data + b->off + b->len;
    size_t room = b->cap - b->off - b->len;
    ssize_t n;
    if (tls != NULL)
        n = tls_read(tls, tail, room);    /* what it read ahead stays pending */
    else {
        do
            n = recv(fd, tail, room, 0);
        while (n < 0 && errno == EINTR);
    }
    if (n > 0)
        b->len += (size_t)n;
    return n;
}

/* ---- requests and ops ---- */

struct px_req *px_req_new(struct px_client *c, enum px_proto proto, unsigned nops)
{
    struct px_req *rq = calloc(1, sizeof(*rq));

    if (rq == NULL)
        return NULL;
    if (nops > 1) {
        rq->ops = calloc(nops, sizeof(*rq->ops));
        if (rq->ops == NULL) {
            free(rq);
            return NULL;
        }
    } else {
        rq->ops = rq->one;
    }
    rq->c = c;
    rq->proto = proto;
    rq->route_gen = c->w->route_gen;
    rq->pending = 1;            /* held until the request is launched */
    if (c->tail)
        c->tail->next = rq;
    else
        c->head = rq;
    c->tail = rq;
    c->nreqs++;
    return rq;
}

struct px_op *px_op_new(struct px_req *rq, uint8_t opcode, const char *extras, uint8_t extlen,
                        const char *key, size_t nkey, const char *value, size_t nvalue,
                        uint64_t cas)
{
    size_t body = extlen + nkey + nvalue;
    struct px_op *op = malloc(sizeof(*op) + BIN_HEADER_LEN + body);

    if (op == NULL)
        return NULL;
    memset(op, 0, sizeof(*op));
    char *h = op->wire;
    memset(h, 0, BIN_HEADER_LEN);
    h[BIN_OFF_MAGIC] = (char)BIN_MAGIC_REQUEST;
    h[BIN_OFF_OPCODE] = (char)opcode;
    bin_store16(h + BIN_OFF_KEYLEN, (uint16_t)nkey);
    h[BIN_OFF_EXTLEN] = (char)extlen;
    bin_store32(h + BIN_OFF_BODYLEN, (uint32_t)body);
    bin_store64(h + BIN_OFF_CAS, cas);
    char *p = h + BIN_HEADER_LEN;
    if (extlen)
        memcpy(p, extras, extlen);
    if (nkey)
        memcpy(p + extlen, key, nkey);
    if (nvalue)
        memcpy(p + extlen + nkey, value, nvalue);
    op->nwire = BIN_HEADER_LEN + body;
    op->req = rq;
    op->state = OP_NEW;
    op->fanout = -1;
    op->slot = nkey ? lc_key_slot(key, nkey) : 0;
    op->deadline_ms = px_now_ms() + rq->c->w->px->opt.deadline_ms;
    op->index = rq->nops;
    rq->c->held_bytes += op->nwire;
    rq->ops[rq->nops++] = op;
    rq->pending++;
    return op;
}

void px_op_free(struct px_op *op)
{
    if (op->frag)
        evbuffer_free(op->frag);
    free(op->stat_values);
    free(op);
}

static void req_free(struct px_req *rq)
{
    px_stats_unlist(rq->c->w, rq);
    for (unsigned i = 0; i < rq->nops; i++) {
        struct px_op *op = rq->ops[i];
        if (op == NULL)
            continue;           /* a late STAT, detached (px_stats.c) */
        rq->c->held_bytes -= op->nwire;
        switch (op->state) {
        case OP_INFLIGHT:
            op->req = NULL;         /* freed when its reply or failure comes */
            break;
        case OP_WAITING:
            px_route_forget(rq->c->w, op);
            px_op_free(op);
            break;
        default:
            px_op_free(op);
            break;
        }
    }
    if (rq->ops != rq->one)
        free(rq->ops);
    if (rq->reply)
        evbuffer_free(rq->reply);
    free(rq);
}

struct evbuffer *px_req_sink(struct px_req *rq)
{
    if (rq->c->head == rq)
        return rq->c->out;
    if (rq->reply == NULL)
        rq->reply = evbuffer_new();
    return rq->reply;       /* NULL only out of memory: the reply is dropped */
}

static void client_resume_check(struct px_client *c);

/* Moves the replies of the finished requests at the front to the output. */
static void client_advance(struct px_client *c)
{
    while (c->head && c->head->done) {
        struct px_req *rq = c->head;
        c->head = rq->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->nreqs--;
        if (rq->reply)
            evbuffer_add_buffer(c->out, rq->reply);
        if (rq->close_after)
            c->closing = true;
        req_free(rq);
        /* the new head writes straight to the output from now on; what it
         * buffered meanwhile goes first */
        if (c->head && c->head->reply && !c->head->done) {
            evbuffer_add_buffer(c->out, c->head->reply);
        }
    }
    px_client_mark_dirty(c);
    client_resume_check(c);
}

void px_req_finish(struct px_req *rq)
{
    if (--rq->pending > 0)
        return;
    px_stats_unlist(rq->c->w, rq);
    if (rq->proto == PX_PROTO_TEXT)
        px_text_finish(rq);
    else
        px_bin_finish(rq);
    rq->done = true;
    if (rq->c->head == rq)
        client_advance(rq->c);
}

void px_op_reply(struct px_worker *w, struct px_op *op, const char *hdr, const char *body,
                 size_t nbody)
{
    struct px_req *rq = op->req;
    uint16_t status = bin_load16(hdr + BIN_OFF_STATUS);

    if (!op->uncounted)
        px_stats_outcome(w, op->wire, status);
    if (rq == NULL) {
        px_op_free(op);
        return;
    }
    op->state = OP_DONE;
    op->status = status;
    if (rq->silent)
        ;
    else if (rq->proto == PX_PROTO_TEXT)
        px_text_reply(op, status, hdr, body, nbody);
    else
        px_bin_reply(op, status, hdr, body, nbody);
    px_req_finish(rq);
}

void px_req_note_error(struct px_req *rq, const char *text, size_t n)
{
    if (rq->err[0] != '\0')
        return;
    if (n >= sizeof(rq->err))
        n = sizeof(rq->err) - 1;
    memcpy(rq->err, text, n);
    rq->err[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (rq->err[i] == '\r' || rq->err[i] == '\n')
            rq->err[i] = ' ';
}

void px_op_fail(struct px_worker *w, struct px_op *op, const char *why)
{
    struct px_req *rq = op->req;

    if (rq == NULL) {
        px_op_free(op);
        return;
    }
    if (!op->uncounted)
        px_count(&w->st.errors, 1);
    op->state = OP_DONE;
    op->status = 0xffff;
    if (rq->err[0] == '\0')
        snprintf(rq->err, sizeof(rq->err), "%s", why);
    if (rq->silent)
        ;
    else if (rq->proto == PX_PROTO_TEXT)
        px_text_reply(op, op->status, NULL, why, strlen(why));
    else
        px_bin_reply(op, op->status, NULL, why, strlen(why));
    px_req_finish(rq);
}

/* ---- connections ---- */

void px_client_mark_dirty(struct px_client *c)
{
    if (c->dirty)
        return;
    c->dirty = true;
    c->next_dirty = c->w->dirty_clients;
    c->w->dirty_clients = c;
}

/* Closes the socket now; the memory goes in the flush step. */
static void client_close(struct px_client *c)
{
    if (c->dead)
        return;
    c->dead = true;
    c->sq_slot = -1;
    event_del(c->rev);
    event_del(c->wev);
    tls_conn_free(c->tls);
    c->tls = NULL;
    close(c->fd);
    c->fd = -1;
    while (c->head) {
        struct px_req *rq = c->head;
        c->head = rq->next;
        req_free(rq);
    }
    c->tail = NULL;
    c->nreqs = 0;
    struct px_worker *w = c->w;
    /* Its launches deferred for order (px_meta.c, "Order") are detached
     * now and may go: nothing else would say so, since a detached op's
     * reply finishes no request. */
    px_meta_kick(w);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    w->nclients--;
    __atomic_fetch_sub(&w->st.curr_conns, 1, __ATOMIC_RELAXED);
    px_client_mark_dirty(c);
}

static void client_free(struct px_client *c)
{
    event_free(c->rev);
    event_free(c->wev);
    evbuffer_free(c->out);
    px_rbuf_free(&c->in);
    free(c);
}

static bool too_busy(const struct px_client *c)
{
    return c->nreqs >= PX_MAX_PIPELINE || c->held_bytes > PX_OUT_HIGH ||
           evbuffer_get_length(c->out) > PX_OUT_HIGH;
}

static void client_set_reading(struct px_client *c, bool on)
{
    if (on == c->reading || c->dead)
        return;
    c->reading = on;
    if (on)
        event_add(c->rev, NULL);
    else
        event_del(c->rev);
    if (on && tls_pending(c->tls) > 0)
        event_active(c->rev, EV_READ, 0);      /* decrypted before reading paused */
}

/* Starts every complete request in in, while the client is not too busy. */
static void client_parse_from(struct px_client *c, struct px_rbuf *in)
{
    /* A request finishing inside the loop must not start another parse of
     * the same buffer (client_advance -> client_resume_check). */
    if (c->parsing)
        return;
    c->parsing = true;
    while (!c->closing && !c->dead && in->len > 0) {
        if (c->swallow > 0) {
            size_t n = in->len < c->swallow ? in->len : c->swallow;
            px_rbuf_consume(in, n);
            c->swallow -= n;
            continue;
        }
        if (too_busy(c))
            break;
        const char *buf = in->data + in->off;
        if (c->proto == PX_PROTO_UNKNOWN)
            c->proto = (unsigned char)buf[0] == BIN_MAGIC_REQUEST ? PX_PROTO_BINARY
                                                                  : PX_PROTO_TEXT;
        size_t used = c->w->px->auth.n > 0 && !c->authed ? px_auth_request(c, buf, in->len)
                    : c->proto == PX_PROTO_TEXT ? px_text_request(c, buf, in->len)
                                                : px_bin_request(c, buf, in->len);
        if (used == 0)
            break;
        if (used == SIZE_MAX) {
            c->closing = true;
            px_client_mark_dirty(c);
            break;
        }
        px_rbuf_consume(in, used);
        /* A quit: nothing after it is started (memcached closes there),
         * while the replies of the requests before it are still written.
         * Its own finish sets closing too, but only once it reaches the
         * head, and by then later requests would have run. */
        if (c->tail != NULL && c->tail->close_after)
            c->closing = true;
    }
    c->parsing = false;
    client_set_reading(c, !c->closing && !too_busy(c));
}

static void client_parse(struct px_client *c)
{
    client_parse_from(c, &c->in);
    if (c->in.len == 0 && c->in.data != NULL)
        px_rbuf_free(&c->in);       /* an idle client holds no buffer */
}

/* After requests finished or output drained: read again if it was stopped. */
static void client_resume_check(struct px_client *c)
{
    if (!c->reading && !c->closing && !c->dead && !too_busy(c)) {
        client_parse(c);        /* buffered requests first */
    }
}

/* Keeps what is left of the worker's scratch buffer (a partial request, or
 * requests not started while the client was too busy) in the client's own. */
static bool keep_leftover(struct px_client *c, struct px_rbuf *scratch)
{
    bool ok = true;

    if (scratch->len > 0 && !c->dead) {
        ok = px_rbuf_reserve(&c->in, scratch->len);
        if (ok) {
            memcpy(c->in.data + c->in.off + c->in.len, scratch->data + scratch->off,
                   scratch->len);
            c->in.len += scratch->len;
        }
    }
    scratch->off = scratch->len = 0;
    return ok;
}

/* A client is read into the worker's scratch buffer when it has nothing
 * buffered (nearly always: a whole request arrives in one segment), so
 * that thousands of idle clients hold no read buffer; only a partial
 * request is copied into the client's own. */
static void on_client_read(evutil_socket_t fd, short what, void *arg)
{
    struct px_client *c = arg;
    struct px_worker *w = c->w;
    bool scratch = c->in.len == 0 && !w->scratch_busy;
    struct px_rbuf *in = scratch ? &w->scratch : &c->in;

    (void)fd;
    (void)what;
    if (tls_write_waits_read(c->tls))
        px_client_mark_dirty(c);            /* the flush step tries the write again */
    ssize_t n = px_rbuf_read(in, c->fd, c->tls);
    if (tls_read_waits_write(c->tls)) {
        /* TLS must write before it reads on: wait for the socket to take
         * bytes, not for more input (which would fire at once, again) */
        event_del(c->rev);
        event_add(c->wev, NULL);
    }
    if (n >= 0)
        w->client_reads++;
    if (n > 0)
        px_count(&w->st.bytes_read, (uint64_t)n);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        if (scratch)
            in->off = in->len = 0;
        client_close(c);
        return;
    }
    if (n > 0)
        c->last_active_ms = px_now_ms();
    if (n > 0 || n == 0) {
        if (scratch) {
            w->scratch_busy = true;
            client_parse_from(c, in);
            w->scratch_busy = false;
            if (!keep_leftover(c, in)) {
                client_close(c);
                return;
            }
        } else {
            client_parse(c);
        }
    }
    if (n == 0) {
        /* the client is done sending: answer what it asked, then close */
        c->closing = true;
        client_set_reading(c, false);
        px_client_mark_dirty(c);
    } else if (!c->dead && c->reading && tls_pending(c->tls) > 0) {
        event_active(c->rev, EV_READ, 0);   /* the socket will not say so */
    }
}

/* Its output as one message of the worker's next batch. */
void px_client_queue(struct px_client *c)
{
    if (!c->dead && !c->tls && c->sq_slot < 0 && evbuffer_get_length(c->out) > 0)
        c->sq_slot = px_queue_buffer(c->w->sq, c->out, c->fd);
}

void px_client_flush(struct px_client *c)
{
    uint64_t *written = &c->w->st.bytes_written;

    if (c->sq_slot >= 0) {
        ssize_t n = px_batched_result(c->w->sq, &c->sq_slot, c->out, NULL);
        if (n > 0)
            px_count(written, (uint64_t)n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            client_close(c);
            return;
        }
    }
    /* (a TLS record is at most 16 KB: more of them, up to 1 MB a step, so
     * one client does not hold the worker long) */
    int tries = c->tls ? 64 : 8;
    for (int i = 0; i < tries && evbuffer_get_length(c->out) > 0; i++) {
        ssize_t n = c->tls ? px_send_buffer_tls(c->out, c->tls, c->w->px->opt.tls_cfg.wbuf_size)
                             : px_send_buffer(c->out, c->fd);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            client_close(c);
            return;
        }
        if (n == 0)
            break;
        px_count(written, (uint64_t)n);
    }
    if (evbuffer_get_length(c->out) > 0) {
        if (tls_write_waits_read(c->tls)) {
            /* writable already: the client's next bytes let it go on */
            c->reading = true;
            event_add(c->rev, NULL);
        } else {
            event_add(c->wev, NULL);
        }
        return;
    }
    if (c->closing && c->head == NULL) {
        client_close(c);
        return;
    }
    client_resume_check(c);
}

static void on_client_write(evutil_socket_t fd, short what, void *arg)
{
    struct px_client *c = arg;

    (void)fd;
    (void)what;
    if (tls_read_waits_write(c->tls) && !c->dead) {
        if (c->reading)
            event_add(c->rev, NULL);
        on_client_read(fd, EV_READ, c);
    }
    if (!c->dead)
        px_client_mark_dirty(c);
}

void px_client_adopt(struct px_worker *w, int fd, bool tls)
{
    struct px_client *c;
    int one = 1;

    if (w->px->opt.max_conns > 0) {
        uint64_t total = 0;
        for (int i = 0; i < w->px->nworkers; i++)
            total += __atomic_load_n(&w->px->workers[i].st.curr_conns, __ATOMIC_RELAXED);
        if (total >= (uint64_t)w->px->opt.max_conns) {
            static const char msg[] = "ERROR Too many open connections\r\n";
            /* (a TLS client could not read it before its handshake) */
            ssize_t ignored = tls ? 0 : write(fd, msg, sizeof(msg) - 1);
            (void)ignored;
            close(fd);
            px_count(&w->st.rejected_conns, 1);
            return;
        }
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    evutil_make_socket_nonblocking(fd);
    c->w = w;
    c->fd = fd;
    c->sq_slot = -1;
    c->out = evbuffer_new();
    c->rev = event_new(w->base, fd, EV_READ | EV_PERSIST, on_client_read, c);
    c->wev = event_new(w->base, fd, EV_WRITE, on_client_write, c);
    if (tls)
        c->tls = tls_conn_new(w->px->tls, fd);
    if (c->out == NULL || c->rev == NULL || c->wev == NULL || (tls && c->tls == NULL)) {
        if (c->out)
            evbuffer_free(c->out);
        if (c->rev)
            event_free(c->rev);
        if (c->wev)
            event_free(c->wev);
        tls_conn_free(c->tls);
        close(fd);
        free(c);
        return;
    }
    c->last_active_ms = px_now_ms();
    c->next = w->clients;
    if (w->clients)
        w->clients->prev = c;
    w->clients = c;
    w->nclients++;
    px_count(&w->st.curr_conns, 1);
    px_count(&w->st.total_conns, 1);
    client_set_reading(c, true);
}

/* Flush step: writes every dirty client's output, frees closed ones. */
void px_clients_flush_dirty(struct px_worker *w);
void px_clients_flush_dirty(struct px_worker *w)
{
    while (w->dirty_clients) {
        struct px_client *c = w->dirty_clients;
        w->dirty_clients = c->next_dirty;
        c->dirty = false;
        c->next_dirty = NULL;
        if (!c->dead)
            px_client_flush(c);
        if (c->dead && !c->dirty)
            client_free(c);
    }
}

void px_clients_idle_scan(struct px_worker *w, int64_t now_ms)
{
    int idle = w->px->opt.idle_timeout_s;

    if (idle <= 0)
        return;
    for (struct px_client *c = w->clients, *next; c; c = next) {
        next = c->next;
        if (c->head == NULL && now_ms - c->last_active_ms > (int64_t)idle * 1000) {
            px_count(&w->st.idle_closed, 1);
            if (w->px->opt.verbose)
                fprintf(stderr, "cocytus-proxy: closing a client idle for %d s\n", idle);
            client_close(c);
        }
    }
}

void px_clients_close_all(struct px_worker *w)
{
    while (w->clients)
        client_close(w->clients);
    px_clients_flush_dirty(w);
}
