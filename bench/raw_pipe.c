/* raw_pipe.c - batches of pipelined text-protocol requests, routed by the
 * cached slot map of a cocytus_t (see raw_pipe.h for the rules).
 *
 * The idea: each request of a batch is formatted at once into the send
 * buffer of the socket its slot's owner is reached by, and remembers where
 * its bytes are, so that after a MOVED the very same bytes can be sent
 * again elsewhere.  finish() writes each buffer in one go, then walks the
 * sockets in order and, on each, the requests in the order they were
 * added, reading one reply per request. */
#define _GNU_SOURCE

#include "raw_pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_MAX_BYTES 250       /* memcached's key limit */
#define ENDPOINT_TEXT_MAX (RAW_HOST_MAX + 16)

/* One request of the batch. */
struct pipe_op {
    int is_get;
    char key[KEY_MAX_BYTES + 1];
    size_t nkey;
    int conn;                   /* index in main, -1: could not be routed or formatted */
    size_t off, len;            /* its bytes in the send buffer of conn */
    char why[RAW_ERR_MAX];      /* conn == -1: why */
};

/* What one socket sends in this batch, and how it fared. */
struct pipe_out {
    char *buf;
    size_t len, cap;
    int used;                   /* requests of this batch on the socket */
    enum raw_rc failed;         /* RAW_OK, or the failure that closed the socket */
    char why[RAW_ERR_MAX];      /* the failure's reason */
};

struct raw_pipe {
    cocytus_t *map;
    struct raw_client main;     /* the batches' sockets, one per endpoint */
    struct raw_client side;     /* the sockets of requests sent again after a MOVED */
    int *ep_conn;               /* map endpoint -> main index; -1 not resolved yet */
    size_t n_ep;
    struct pipe_out out[RAW_MAX_SERVERS];
    struct pipe_op *ops;
    size_t nops, max_ops;
    uint64_t sent_ns;
    struct raw_pipe_stats stats;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- routing by the cached map ---- */

/* Forgets which socket each map endpoint uses (after the map changed). */
static int reset_routes(struct raw_pipe *p)
{
    size_t n = cocytus_endpoint_count(p->map);
    if (n != p->n_ep) {
        int *nv = realloc(p->ep_conn, (n ? n : 1) * sizeof(*nv));
        if (nv == NULL)
            return -1;
        p->ep_conn = nv;
        p->n_ep = n;
    }
    for (size_t i = 0; i < n; i++)
        p->ep_conn[i] = -1;
    return 0;
}

/* The main socket of map endpoint e; -1 with the reason in why. */
static int endpoint_conn(struct raw_pipe *p, size_t e, char *why, size_t cap)
{
    if (e >= p->n_ep) {
        snprintf(why, cap, "the slot map names endpoint %zu of %zu", e, p->n_ep);
        return -1;
    }
    if (p->ep_conn[e] >= 0)
        return p->ep_conn[e];
    char text[ENDPOINT_TEXT_MAX], host[RAW_HOST_MAX], port[8];
    if (cocytus_endpoint(p->map, e, text, sizeof(text)) != 0
        || raw_parse_endpoint(text, strlen(text), host, port) != 0) {
        snprintf(why, cap, "endpoint %zu of the slot map is not host:port", e);
        return -1;
    }
    int idx = raw_client_endpoint(&p->main, host, port);
    if (idx < 0) {
        snprintf(why, cap, "%s", raw_client_error(&p->main));
        return -1;
    }
    p->ep_conn[e] = idx;
    return idx;
}

/* Whether the cached map gives slot to host:port. */
static int map_routes_to(struct raw_pipe *p, unsigned slot, const char *host, const char *port)
{
    char text[ENDPOINT_TEXT_MAX], h[RAW_HOST_MAX], pt[8];
    size_t e = cocytus_slot_owner(p->map, slot);
    if (cocytus_endpoint(p->map, e, text, sizeof(text)) != 0
        || raw_parse_endpoint(text, strlen(text), h, pt) != 0)
        return 0;
    return strcmp(h, host) == 0 && strcmp(pt, port) == 0;
}

/* After a MOVED from host:port: fetch the map again when ours is older than
 * the MOVED or still sends the slot where it was refused.  The request is
 * followed to the MOVED's endpoint either way; the map is for next batches. */
static void refresh_after_moved(struct raw_pipe *p, const struct raw_reply *rep,
                                const char *host, const char *port)
{
    if (cocytus_epoch(p->map) >= rep->epoch && !map_routes_to(p, rep->slot, host, port))
        return;
    cocytus_refresh(p->map);    /* on failure the old map stays: still a map */
    if (reset_routes(p) != 0)
        p->n_ep = 0;            /* out of memory: requests fail to route, with a reason */
}

/* ---- building the batch ---- */

/* Appends n bytes to o; -1 when out of memory. */
static int out_append(struct pipe_out *o, const char *s, size_t n)
{
    if (o->cap - o->len < n) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap - o->len < n)
            cap *= 2;
        char *nb = realloc(o->buf, cap);
        if (nb == NULL)
            return -1;
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 0;
}

/* A key the text protocol can carry; why says what is wrong. */
static int valid_key(const char *key, size_t nkey, char *why, size_t cap)
{
    if (nkey == 0 || nkey > KEY_MAX_BYTES) {
        snprintf(why, cap, "key of %zu bytes: want 1 to %d", nkey, KEY_MAX_BYTES);
        return 0;
    }
    for (size_t i = 0; i < nkey; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch <= ' ' || ch == 0x7f) {
            snprintf(why, cap, "key with a space or control byte at %zu", i);
            return 0;
        }
    }
    return 1;
}

/* Routes and formats one request; its index, or -1 when the batch is full. */
static int add_request(struct raw_pipe *p, int is_get, const char *key, size_t nkey,
                       const char *val, size_t nval)
{
    if (p->nops == p->max_ops)
        return -1;
    struct pipe_op *op = &p->ops[p->nops];
    int i = (int)p->nops++;
    p->stats.requests++;
    op->is_get = is_get;
    op->conn = -1;
    op->why[0] = '\0';
    op->nkey = 0;
    if (!valid_key(key, nkey, op->why, sizeof(op->why)))
        return i;
    memcpy(op->key, key, nkey);
    op->key[nkey] = '\0';
    op->nkey = nkey;
    size_t e = cocytus_slot_owner(p->map, cocytus_key_slot(key, nkey));
    int c = endpoint_conn(p, e, op->why, sizeof(op->why));
    if (c < 0)
        return i;
    struct pipe_out *o = &p->out[c];
    char head[KEY_MAX_BYTES + 48];
    int nh = is_get ? snprintf(head, sizeof(head), "get %s\r\n", op->key)
                    : snprintf(head, sizeof(head), "set %s 0 0 %zu\r\n", op->key, nval);
    size_t start = o->len;
    if (out_append(o, head, (size_t)nh) != 0
        || (!is_get && (out_append(o, val, nval) != 0 || out_append(o, "\r\n", 2) != 0))) {
        o->len = start;
        snprintf(op->why, sizeof(op->why), "out of memory for a %zu-byte request", nval);
        return i;
    }
    op->conn = c;
    op->off = start;
    op->len = o->len - start;
    o->used++;
    return i;
}

/* ---- finishing the batch ---- */

/* Sends each used socket's requests; a socket that fails is closed and its
 * requests will fail with the reason. */
static void send_batch(struct raw_pipe *p)
{
    p->sent_ns = now_ns();
    for (int c = 0; c < p->main.nconns; c++) {
        struct pipe_out *o = &p->out[c];
        if (o->used == 0)
            continue;
        enum raw_rc rc = raw_conn_ready(&p->main, c);
        if (rc == RAW_OK)
            rc = raw_conn_send(&p->main, c, o->buf, o->len);
        if (rc != RAW_OK) {
            o->failed = rc;
            snprintf(o->why, sizeof(o->why), "%s", raw_client_error(&p->main));
            raw_conn_fail(&p->main, c);
        }
    }
}

/* Sends op's bytes again to host:port (a MOVED's endpoint) and reads the
 * reply, following further MOVED replies up to RAW_PIPE_MAX_TRIES sends. */
static void follow_moved(struct raw_pipe *p, size_t i, struct raw_reply rep,
                         raw_pipe_done_fn done, void *ctx)
{
    const struct pipe_op *op = &p->ops[i];
    const char *bytes = p->out[op->conn].buf + op->off;
    char why[RAW_ERR_MAX + KEY_MAX_BYTES + RAW_HOST_MAX + 64];
    /* Who answered MOVED: first the batch's socket, then each new owner. */
    char from_host[RAW_HOST_MAX], from_port[8];
    snprintf(from_host, sizeof(from_host), "%s", p->main.conns[op->conn].host);
    snprintf(from_port, sizeof(from_port), "%s", p->main.conns[op->conn].port);
    for (int tries = 0;; tries++) {
        p->stats.redirects++;
        refresh_after_moved(p, &rep, from_host, from_port);
        if (tries == RAW_PIPE_MAX_TRIES) {
            snprintf(why, sizeof(why), "%s %s: still MOVED after %d redirects (last to %s:%s)",
                     op->is_get ? "get" : "set", op->key, RAW_PIPE_MAX_TRIES, rep.host, rep.port);
            done(ctx, i, RAW_REDIRECTS, NULL, 0, why);
            return;
        }
        snprintf(from_host, sizeof(from_host), "%s", rep.host);
        snprintf(from_port, sizeof(from_port), "%s", rep.port);
        int k = raw_client_endpoint(&p->side, rep.host, rep.port);
        if (k < 0) {
            done(ctx, i, RAW_LIMIT, NULL, 0, raw_client_error(&p->side));
            return;
        }
        p->stats.retries++;
        enum raw_rc rc = raw_conn_ready(&p->side, k);
        if (rc == RAW_OK)
            rc = raw_conn_send(&p->side, k, bytes, op->len);
        if (rc == RAW_OK)
            rc = raw_conn_read(&p->side, k, op->is_get, op->key, op->nkey, &rep);
        if (rc == RAW_OK && rep.moved)
            continue;
        if (rc == RAW_OK || rc == RAW_MISS || rc == RAW_NOT_STORED) {
            done(ctx, i, rc, rep.val, rep.nval, raw_client_error(&p->side));
            return;
        }
        snprintf(why, sizeof(why), "after MOVED: %s", raw_client_error(&p->side));
        raw_conn_fail(&p->side, k);
        done(ctx, i, rc, NULL, 0, why);
        return;
    }
}

/* Reads the reply of request i on socket c and reports it. */
static void read_one(struct raw_pipe *p, int c, size_t i, raw_pipe_done_fn done, void *ctx)
{
    struct pipe_op *op = &p->ops[i];
    struct pipe_out *o = &p->out[c];
    char why[RAW_ERR_MAX + 32];
    if (o->failed != RAW_OK) {
        snprintf(why, sizeof(why), "not answered: %s", o->why);
        done(ctx, i, o->failed, NULL, 0, why);
        return;
    }
    struct raw_reply rep;
    enum raw_rc rc = raw_conn_read(&p->main, c, op->is_get, op->key, op->nkey, &rep);
    if (rc == RAW_OK && rep.moved) {
        follow_moved(p, i, rep, done, ctx);
        return;
    }
    if (rc == RAW_OK || rc == RAW_MISS || rc == RAW_NOT_STORED) {
        done(ctx, i, rc, rep.val, rep.nval, raw_client_error(&p->main));
        return;
    }
    /* The stream may be out of step: what follows on it is lost. */
    o->failed = rc;
    snprintf(o->why, sizeof(o->why), "%s", raw_client_error(&p->main));
    raw_conn_fail(&p->main, c);
    done(ctx, i, rc, NULL, 0, o->why);
}

void raw_pipe_finish(struct raw_pipe *p, raw_pipe_done_fn done, void *ctx)
{
    send_batch(p);
    for (int c = 0; c < p->main.nconns; c++) {
        if (p->out[c].used == 0)
            continue;
        for (size_t i = 0; i < p->nops; i++) {
            if (p->ops[i].conn == c)
                read_one(p, c, i, done, ctx);
        }
    }
    for (size_t i = 0; i < p->nops; i++) {
        if (p->ops[i].conn < 0)
            done(ctx, i, RAW_LIMIT, NULL, 0, p->ops[i].why);
    }
    raw_pipe_begin(p);
}

/* ---- the rest of the interface ---- */

void raw_pipe_begin(struct raw_pipe *p)
{
    p->nops = 0;
    for (int c = 0; c < RAW_MAX_SERVERS; c++) {
        p->out[c].len = 0;
        p->out[c].used = 0;
        p->out[c].failed = RAW_OK;
        p->out[c].why[0] = '\0';
    }
}

int raw_pipe_add_get(struct raw_pipe *p, const char *key, size_t nkey)
{
    return add_request(p, 1, key, nkey, NULL, 0);
}

int raw_pipe_add_set(struct raw_pipe *p, const char *key, size_t nkey, const char *val,
                     size_t nval)
{
    return add_request(p, 0, key, nkey, val, nval);
}

uint64_t raw_pipe_sent_ns(const struct raw_pipe *p)
{
    return p->sent_ns;
}

void raw_pipe_get_stats(const struct raw_pipe *p, struct raw_pipe_stats *out)
{
    *out = p->stats;
    out->connects = p->main.stats.connects + p->side.stats.connects;
    out->conn_failures = p->main.stats.conn_failures + p->side.stats.conn_failures;
}

struct raw_pipe *raw_pipe_new(cocytus_t *map, int timeout_ms, size_t max_depth, const char *auth,
                              size_t nauth)
{
    if (max_depth == 0 || max_depth > RAW_PIPE_MAX_DEPTH)
        return NULL;
    struct raw_pipe *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->map = map;
    raw_client_init(&p->main, timeout_ms);
    raw_client_init(&p->side, timeout_ms);
    raw_client_set_auth(&p->main, auth, nauth);     /* auth outlives p */
    raw_client_set_auth(&p->side, auth, nauth);
    p->ops = calloc(max_depth, sizeof(*p->ops));
    if (p->ops == NULL || reset_routes(p) != 0) {
        raw_pipe_free(p);
        return NULL;
    }
    p->max_ops = max_depth;
    raw_pipe_begin(p);
    return p;
}

void raw_pipe_free(struct raw_pipe *p)
{
    if (p == NULL)
        return;
    raw_client_close(&p->main);
    raw_client_close(&p->side);
    for (int c = 0; c < RAW_MAX_SERVERS; c++)
        free(p->out[c].buf);
    free(p->ops);
    free(p->ep_conn);
    free(p);
}
