/* link.c - authenticated, framed TCP links on a libevent loop (link.h);
 * between processes on one host, over Unix sockets (localtwin.c).
 *
 * Each link owns one non-blocking socket at a time, a linear input buffer
 * and a linear output buffer:
 *   - reading: recv() into the free tail of the input buffer (as much as the
 *     kernel has, not libevent's 4 KB steps), then every complete frame is
 *     checked (header, CRC) and handed on in place, without copying;
 *   - writing: link_send() appends header and payload to the output buffer
 *     (the payload's only user-space copy) and marks a per-link "flush"
 *     event active; the flush runs after the callbacks already queued in
 *     this loop iteration, so a burst of frames leaves in one send().  Only
 *     when the kernel pushes back is the socket's write event armed.
 * No per-frame allocation: buffers grow by doubling and are reused.
 *
 * With TLS (linktls.h) on a TCP connection, the input buffer holds the
 * plaintext that TLS gave and the output buffer the frames not yet
 * encrypted; the ciphertext for the kernel waits in a third buffer
 * ("wire"), which is what send() and the batched writes take.  The TLS
 * handshake runs first, inside those reads and writes; until it ends,
 * frames stay in the output buffer.
 *
 * Handshake (docs/wire-format.md): acceptor sends CHALLENGE (16 random
 * bytes), connector answers HELLO (identity + SipHash-2-4 proof over nonce
 * and identity under a key derived from the secret), acceptor checks and
 * answers WELCOME or REJECT.  A connector keeps redialing with back-off
 * until link_close().
 *
 * Callbacks and freeing: every libevent callback of a link runs between
 * link_enter() and link_leave().  link_close() and "this accepted link is
 * finished" only mark the link LS_CLOSED (after closing its socket); the
 * memory is freed by the outermost link_leave(), so user callbacks may close
 * any link, including their own, at any point.
 *
 * No global mutable state. */
#include "link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "crc32c.h"
#include "frame.h"
#include "linktls.h"
#include "localtwin.h"
#include "lookup.h"
#include "netaddr.h"
#include "printable.h"
#include "sendq.h"
#include "siphash.h"

#define LINK_RETRY_MIN_MS 20
#define LINK_RETRY_MAX_MS 1000
#define LINK_HANDSHAKE_TIMEOUT_MS 3000     /* connect + CHALLENGE/HELLO/WELCOME */
#define LINK_LISTEN_MAX 8                  /* addresses a listener binds */
#define LINK_REJECT_LINGER_MS 1000         /* time to flush a REJECT */
#define LINK_HANDSHAKE_MAX_PAYLOAD 1024    /* frames before WELCOME are small */
#define LINK_NONCE_SIZE 16
#define LINK_PROOF_SIZE LINK_HELLO_PROOF_SIZE
#define LINK_REJECT_TEXT_MAX 200
#define LINK_HOST_MAX 256
#define LINK_ERROR_MAX 512
#define LINK_BUF_INITIAL (64u * 1024)
#define LINK_BUF_KEEP (1u * 1024 * 1024)   /* an idle buffer above this is released */
#define LINK_READ_MIN (64u * 1024)
#define LINK_READ_BUDGET (4u * 1024 * 1024) /* bytes read per readiness event */
#define LINK_KEEPALIVE_IDLE_S 5
#define LINK_KEEPALIVE_INTVL_S 1
#define LINK_KEEPALIVE_CNT 5
#define LINK_USER_TIMEOUT_MS 10000         /* unacknowledged data: peer is gone */
#define LINK_TLS_SLICE (256u * 1024)       /* frames encrypted per TLS call */

/* HELLO identity part: u8 len, cluster, u32 group, u8 role, u32 index. */
#define HELLO_IDENT_MAX LINK_HELLO_IDENT_MAX


enum link_state {
    LS_IDLE,             /* connector: no socket; the timer redials */
    LS_RESOLVING,        /* connector: its host's name is looked up on a thread */
    LS_CONNECTING,       /* connector: non-blocking connect in progress */
    LS_AWAIT_CHALLENGE,  /* connector: connected, waiting for CHALLENGE */
    LS_AWAIT_WELCOME,    /* connector: HELLO sent */
    LS_AWAIT_HELLO,      /* acceptor: CHALLENGE sent */
    LS_REJECTING,        /* acceptor: REJECT queued; closes once flushed */
    LS_UP,
    LS_CLOSED            /* finished: freed when no callback of ours runs */
};

/* Bytes [start, end) of data[0, cap) are live. */
struct link_buf {
    uint8_t *data;
    size_t cap;
    size_t start;
    size_t end;
};

struct link {
    struct event_base *base;
    struct sendq *sq;          /* batched writes (sendq.h), or NULL: send at once */
    struct sendq_writer wr;    /* listed in sq: written after the loop pass; the
                                  listing holds a depth, so l stays alive */
    unsigned wr_gen;           /* gen of the connection wr's message went on */
    enum link_state state;
    bool is_connector;
    bool user_closed;          /* link_close() was called */
    int depth;                 /* link callbacks on the stack */

    int fd;                    /* -1 without a connection */
    unsigned gen;              /* bumped whenever a connection is torn down */
    struct event *rd_ev;       /* per connection */
    struct event *wr_ev;       /* per connection: connect completion, kernel back-pressure */
    bool wr_armed;
    struct event *flush_ev;    /* per link, no fd: activated to flush output */
    bool flush_queued;
    struct event *timer_ev;    /* per link: redial delay or handshake deadline */
    const char *fail_pending;  /* drop the connection at the next flush (no memory) */

    struct link_buf in;
    struct link_buf out;
    struct linktls_ctx *tls_ctx;      /* TLS on TCP connections, or NULL */
    struct linktls *tls;              /* this connection's, or NULL (none, or a Unix socket) */
    struct link_buf wire;             /* TLS: ciphertext not yet handed to the kernel */
    char tls_why[LINK_ERROR_MAX];     /* TLS: the failure fail_pending points to */
    bool tls_heard;                   /* TLS: bytes arrived on this connection */

    struct link_callbacks cb;
    void *ctx;
    uint8_t key[SIPHASH_KEY_SIZE];
    uint8_t nonce[LINK_NONCE_SIZE];   /* acceptor: the challenge it sent */
    struct link_identity me;          /* connector */
    struct link_identity peer;
    char host[LINK_HOST_MAX];         /* connector: where to dial */
    struct lookup *lookup;            /* connector: its name's lookup (LS_RESOLVING) */
    struct sockaddr_storage dial_sa;  /* connector: the address being dialled */
    socklen_t dial_salen;
    struct sockaddr_storage good_sa;  /* connector: the last address that connected */
    socklen_t good_salen;             /* (0: none) */
    struct sockaddr_storage failed_sa;/* connector: the last one a connect failed at */
    socklen_t failed_salen;           /* (0: none since good) */
    int port;
    char name[LINK_HOST_MAX + 16];    /* "host:port" */
    unsigned backoff_ms;
    char last_error[LINK_ERROR_MAX];
    bool failing;                     /* connector: in a streak of failed attempts */
    unsigned keepalive_ms;            /* up: a PING this often (0: none) */
    uint64_t last_rx_ms;              /* when bytes last arrived, handshakes included
                                       * (link_now_ms) */
    bool heard_ping;                  /* up: the peer sends keepalives (a peer built
                                       * before them is silent when idle) */
    /* Leases (link.h, link_lease_stamp_ms): the latest of our PING clocks
     * the peer answered (0 once we dropped a connection ourselves), and
     * when the peer's latest clocked PING arrived on this connection. */
    uint64_t lease_stamp_ms;
    uint64_t peer_stamp_ms;
    bool peer_closed;                 /* the last connection ended by the peer's close
                                       * or a reset */
    bool peer_fin;                    /* ... by a clean close (an end read) */
    bool local;                       /* the socket is a Unix one (localtwin.c) */

    struct link_listener *listener;   /* acceptor, until accepted */
    struct link *ll_prev;
    struct link *ll_next;
};

struct link_listener {
    struct event_base *base;
    struct sendq *sq;                 /* given to the links it accepts */
    struct linktls_ctx *tls_ctx;      /* likewise: TLS on their TCP connections */
    struct evconnlistener *evl[2 * LINK_LISTEN_MAX];   /* one per address of its name,
                                                        * and its twin (localtwin.h) */
    int nevl;
    char cluster[LINK_NAME_MAX];
    size_t cluster_len;
    uint32_t group;
    uint8_t key[SIPHASH_KEY_SIZE];
    link_accept_fn accept;
    void *owner;
    struct link *pending;             /* links still in the handshake */
    int port;
};

static void link_fail(struct link *l, const char *why);
static void dial(struct link *l);
static void connect_failed_at_address(struct link *l);
static void connected_at_address(struct link *l);

/* ---- small helpers ---- */

static void store_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static struct timeval ms_to_timeval(unsigned ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    return tv;
}

uint64_t link_now_ms(void)
{
    struct timespec ts;
    /* BOOTTIME, not MONOTONIC: it goes on while the host is suspended, so a
     * read lease (link.h) taken before a suspend has run out after it. */
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A NUL-terminated name of 1..LINK_NAME_MAX-1 bytes. */
static bool name_ok(const char *s)
{
    size_t n = strnlen(s, LINK_NAME_MAX);
    return n > 0 && n < LINK_NAME_MAX;
}

static void log_line(const struct link *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void log_line(const struct link *l, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "link %s: %s\n", l->name, msg);
}

/* Record a failure.  Acceptor side: always logged.  Connector: logged unless
 * it repeats the previous failure of the same streak of attempts, so a
 * peer that stays down does not fill the log. */
static void note_error(struct link *l, const char *msg)
{
    bool repeat = l->is_connector && l->failing && strcmp(l->last_error, msg) == 0;
    if (!repeat)
        log_line(l, "%s", msg);
    snprintf(l->last_error, sizeof(l->last_error), "%s", msg);
    if (l->is_connector)
        l->failing = true;
}

static void derive_key(const char *secret, uint8_t key[SIPHASH_KEY_SIZE])
{
    auth_derive_key(secret, AUTH_FOR_LINK, key);
}

/* The proof: SipHash-2-4 under key of nonce || identity bytes. */
static void compute_proof(const uint8_t key[SIPHASH_KEY_SIZE], const uint8_t *nonce,
                          const uint8_t *ident, size_t ident_len, uint8_t proof[LINK_PROOF_SIZE])
{
    uint8_t msg[LINK_NONCE_SIZE + HELLO_IDENT_MAX];
    memcpy(msg, nonce, LINK_NONCE_SIZE);
    memcpy(msg + LINK_NONCE_SIZE, ident, ident_len);
    auth_proof(key, msg, LINK_NONCE_SIZE + ident_len, proof);
}

static int fill_random(uint8_t *buf, size_t n)
{
    return auth_random(buf, n);
}

static bool is_unix_socket(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    return getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0 && ss.ss_family == AF_UNIX;
}

/* A TCP socket's: low latency and prompt detection of a dead peer.
 * Failures only cost performance, so they are ignored.  (A twin has none
 * to set: a dead peer's end closes with it.) */
static void set_socket_options(int fd)
{
    int one = 1;
    int idle = LINK_KEEPALIVE_IDLE_S, intvl = LINK_KEEPALIVE_INTVL_S, cnt = LINK_KEEPALIVE_CNT;
    unsigned user_timeout = LINK_USER_TIMEOUT_MS;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

static void format_host_port(char *out, size_t outlen, const char *host, int port)
{
    if (strchr(host, ':') != NULL)
        snprintf(out, outlen, "[%s]:%d", host, port);
    else
        snprintf(out, outlen, "%s:%d", host, port);
}

static void format_sockaddr(char *out, size_t outlen, const struct sockaddr *sa)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    format_host_port(out, outlen, host, port);
}

/* ---- buffers ---- */

static size_t buf_len(const struct link_buf *b)
{
    return b->end - b->start;
}

static void buf_free(struct link_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* Make room for n more bytes after end.  Live bytes move to the front only
 * when the gap before them is at least as large as they are (so moving is
 * paid for by earlier consumption); otherwise the buffer doubles. */
static int buf_make_room(struct link_buf *b, size_t n)
{
    size_t live = buf_len(b);
    if (live == 0)
        b->start = b->end = 0;
    if (b->cap - b->end >= n)
        return 0;
    if (b->start > 0 && b->start >= live && b->cap - live >= n) {
        memmove(b->data, b->data + b->start, live);
        b->start = 0;
        b->end = live;
        return 0;
    }
    size_t cap = b->cap > 0 ? b->cap : LINK_BUF_INITIAL;
    while (cap - b->end < n) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    uint8_t *data = realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Forget the contents; keep the memory unless it is large.  Never called
 * while a payload in b may still be in use by a callback. */
static void buf_release_if_idle(struct link_buf *b)
{
    if (buf_len(b) != 0)
        return;
    b->start = b->end = 0;
    if (b->cap > LINK_BUF_KEEP)
        buf_free(b);
}

/* ---- life cycle ---- */

static void listener_unlist(struct link *l)
{
    struct link_listener *ll = l->listener;
    if (ll == NULL)
        return;
    if (l->ll_prev != NULL)
        l->ll_prev->ll_next = l->ll_next;
    else
        ll->pending = l->ll_next;
    if (l->ll_next != NULL)
        l->ll_next->ll_prev = l->ll_prev;
    l->ll_prev = l->ll_next = NULL;
    l->listener = NULL;
}

static void listener_enlist(struct link_listener *ll, struct link *l)
{
    l->listener = ll;
    l->ll_prev = NULL;
    l->ll_next = ll->pending;
    if (ll->pending != NULL)
        ll->pending->ll_prev = l;
    ll->pending = l;
}

/* TLS: move the ciphertext TLS holds to the wire buffer.  0, or -1 (why
 * in tls_why). */
static int tls_take_output(struct link *l)
{
    size_t pending = linktls_output(l->tls);
    if (pending == 0)
        return 0;
    if (buf_make_room(&l->wire, pending) < 0) {
        snprintf(l->tls_why, sizeof(l->tls_why), "out of memory for TLS output");
        return -1;
    }
    l->wire.end += linktls_take_output(l->tls, l->wire.data + l->wire.end, pending);
    return 0;
}

/* TLS: what TLS has to say as this end closes, handed to the kernel
 * without waiting: the close notice, or the alert that tells the peer why
 * its handshake failed.  Only when nothing else waits before it (a notice
 * behind half-sent ciphertext would read as garbage; the peer then sees
 * an end without a notice, which it does not take as a clean close). */
static void tls_goodbye(struct link *l)
{
    if (buf_len(&l->wire) != 0)
        return;
    linktls_close_notify(l->tls);
    if (tls_take_output(l) == 0 && buf_len(&l->wire) > 0)
        (void)send(l->fd, l->wire.data + l->wire.start, buf_len(&l->wire),
                   MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Close the socket and forget buffered bytes.  Buffer memory stays: a
 * callback running further up the stack may still look at a payload. */
static void close_socket(struct link *l)
{
    if (l->tls != NULL && l->fd >= 0)
        tls_goodbye(l);
    lookup_cancel(l->lookup);
    l->lookup = NULL;
    if (l->rd_ev != NULL)
        event_free(l->rd_ev);
    if (l->wr_ev != NULL)
        event_free(l->wr_ev);
    l->rd_ev = l->wr_ev = NULL;
    l->wr_armed = false;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->in.start = l->in.end = 0;
    l->out.start = l->out.end = 0;
    l->wire.start = l->wire.end = 0;
    linktls_free(l->tls);
    l->tls = NULL;
    l->tls_heard = false;
    l->fail_pending = NULL;
    evtimer_del(l->timer_ev);
    l->gen++;
}

static void link_destroy(struct link *l)
{
    close_socket(l);
    listener_unlist(l);
    event_free(l->timer_ev);
    event_free(l->flush_ev);
    buf_free(&l->in);
    buf_free(&l->out);
    buf_free(&l->wire);
    free(l);
}

static void link_enter(struct link *l)
{
    l->depth++;
}

/* After this returns, l may be gone: callers return at once. */
static void link_leave(struct link *l)
{
    l->depth--;
    if (l->depth == 0 && l->state == LS_CLOSED)
        link_destroy(l);
}

/* Mark finished; freed now or by the outermost link_leave(). */
static void link_finish(struct link *l)
{
    close_socket(l);
    listener_unlist(l);
    l->state = LS_CLOSED;
    if (l->depth == 0)
        link_destroy(l);
}

static void arm_timer(struct link *l, unsigned ms)
{
    struct timeval tv = ms_to_timeval(ms);
    evtimer_add(l->timer_ev, &tv);
}

void link_set_keepalive(struct link *l, unsigned ms)
{
    l->keepalive_ms = ms;
    if (l->state == LS_UP && ms)
        arm_timer(l, ms);
}

void link_timer_at(struct event *ev, uint64_t deadline_ms)
{
    uint64_t now = link_now_ms();
    uint64_t ms = deadline_ms > now ? deadline_ms - now : 0;
    struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
    evtimer_add(ev, &tv);
}

uint64_t link_lease_stamp_ms(const struct link *l)
{
    return l->lease_stamp_ms;
}

uint64_t link_peer_stamp_ms(const struct link *l)
{
    return l->peer_stamp_ms;
}

bool link_peer_closed(const struct link *l)
{
    if (l->peer_closed)
        return true;
    /* Under TLS only the peer's close notice counts, read as it comes
     * (above): an end or a reset alone may be forged on the path. */
    if (l->fd < 0 || l->state != LS_UP || l->tls != NULL)
        return false;
    /* Closed by the peer but not read yet (the owner is about to close it
     * itself: a fence in the same loop iteration as the peer's death).
     * Unread bytes before the end hide it: then it counts as open. */
    char c;
    ssize_t n = recv(l->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

uint64_t link_silent_ms(const struct link *l, uint64_t now_ms)
{
    if (l->state != LS_UP || !l->heard_ping || now_ms <= l->last_rx_ms)
        return 0;
    return now_ms - l->last_rx_ms;
}

uint64_t link_last_heard_ms(const struct link *l)
{
    return l->last_rx_ms;
}

static void schedule_redial(struct link *l)
{
    l->state = LS_IDLE;
    arm_timer(l, l->backoff_ms);
    l->backoff_ms *= 2;
    if (l->backoff_ms > LINK_RETRY_MAX_MS)
        l->backoff_ms = LINK_RETRY_MAX_MS;
}

/* A connector's attempt failed before the link was up. */
static void attempt_failed(struct link *l, const char *why)
{
    connect_failed_at_address(l);   /* the next attempt dials the name's next address */
    note_error(l, why);
    close_socket(l);
    schedule_redial(l);
}

/* The connection is unusable: log, tear down, tell the owner if it had been
 * up, then redial (connector) or finish (acceptor). */
static void link_fail(struct link *l, const char *why)
{
    bool was_up = l->state == LS_UP;
    char reason[LINK_ERROR_MAX];

    snprintf(reason, sizeof(reason), "%s", why);   /* why may point into l */
    if (!was_up && l->is_connector) {
        attempt_failed(l, reason);
        return;
    }
    /* Our own end dropped: whatever the peer answered on it no longer
     * counts (the peer, seeing our close, stops waiting out what it
     * granted: link_peer_closed). */
    if (!l->peer_fin)
        l->lease_stamp_ms = 0;   /* a reset may come from the path, not the peer */
    if (was_up)
        log_line(l, "down: %s", reason);
    else
        log_line(l, "dropped during the handshake: %s", reason);
    snprintf(l->last_error, sizeof(l->last_error), "%s", reason);
    close_socket(l);
    listener_unlist(l);
    if (was_up && l->cb.on_down != NULL) {
        l->state = l->is_connector ? LS_IDLE : LS_CLOSED;
        l->cb.on_down(l, reason, l->ctx);
        if (l->user_closed)
            return;
    }
    if (l->is_connector) {
        l->backoff_ms = LINK_RETRY_MIN_MS;
        schedule_redial(l);
    } else {
        link_finish(l);
    }
}

/* ---- output ---- */

static void schedule_flush(struct link *l)
{
    if (l->flush_queued || l->wr_armed)
        return;
    l->flush_queued = true;
    event_active(l->flush_ev, EV_WRITE, 0);
}

/* Append one frame (header + payload pieces) to the output buffer; the
 * payload's CRC is computed here unless the caller gives it (have_crc).
 * 0, or -1 if too large or out of memory (nothing appended). */
static int queue_frame_crc(struct link *l, uint16_t type, const struct iovec *iov, int iovcnt,
                           bool have_crc, uint32_t crc)
{
    size_t total = 0;

    if (!have_crc)
        crc = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > FRAME_MAX_PAYLOAD - total)
            return -1;
        total += iov[i].iov_len;
        if (!have_crc)
            crc = crc32c(crc, iov[i].iov_base, iov[i].iov_len);
    }
    if (buf_make_room(&l->out, FRAME_HEADER_SIZE + total) < 0)
        return -1;
    uint8_t *p = l->out.data + l->out.end;
    frame_header_encode_crc(p, type, 0, (uint32_t)total, crc);
    p += FRAME_HEADER_SIZE;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0)
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    l->out.end += FRAME_HEADER_SIZE + total;
    schedule_flush(l);
    return 0;
}

static int queue_frame_iov(struct link *l, uint16_t type, const struct iovec *iov, int iovcnt)
{
    return queue_frame_crc(l, type, iov, iovcnt, false, 0);
}

static int queue_frame(struct link *l, uint16_t type, const void *payload, size_t len)
{
    struct iovec iov = { .iov_base = (void *)payload, .iov_len = len };
    return queue_frame_iov(l, type, &iov, 1);
}

static void arm_write(struct link *l)
{
    if (!l->wr_armed) {
        event_add(l->wr_ev, NULL);
        l->wr_armed = true;
    }
}

static void disarm_write(struct link *l)
{
    if (l->wr_armed) {
        event_del(l->wr_ev);
        l->wr_armed = false;
    }
}

static void read_input(struct link *l);

/* A write failed (err).  Over a Unix socket (localtwin.c) EPIPE means the
 * peer closed, and what it sent before may still wait to be read: a
 * "migrate" the coordinator sent just before it was killed, to a process
 * stopped at the time.  Over TCP a write after the peer's close succeeds
 * and the reader gets those bytes, then the end; so over a Unix socket
 * this reads first, and the end found there (a clean close, or the reset
 * the kernel keeps for the read) takes the link down, as it would have
 * over TCP; the write's error does only if the link is still up.  Over
 * TCP nothing changes: a reset found by a write must not read as a clean
 * close, which keeps a lease (link.h). */
static void write_failed(struct link *l, int err)
{
    unsigned gen = l->gen;
    if (l->local && err == EPIPE) {
        read_input(l);
        if (l->gen != gen)
            return;     /* the socket is gone: taken down by what was read */
    }
    char why[128];
    l->peer_closed = l->tls == NULL && (err == ECONNRESET || err == EPIPE);
    snprintf(why, sizeof(why), "write: %s", err != 0 ? strerror(err) : "no progress");
    link_fail(l, why);
}

/* What the kernel takes next: the ciphertext with TLS, else the frames. */
static struct link_buf *wire_buf(struct link *l)
{
    return l->tls != NULL ? &l->wire : &l->out;
}

/* TLS: encrypt the queued frames (all of them, unless the handshake is
 * still under way) and move the ciphertext, handshake messages included,
 * to the wire buffer, a slice at a time so that TLS's own buffer never
 * holds more than a slice (it keeps its memory; ours is released when
 * idle).  0, or -1 with the reason in tls_why. */
static int tls_seal(struct link *l)
{
    for (;;) {
        size_t len = buf_len(&l->out);
        if (len > LINK_TLS_SLICE)
            len = LINK_TLS_SLICE;
        const uint8_t *p = len > 0 ? l->out.data + l->out.start : NULL;
        ssize_t n = linktls_write(l->tls, p, len, l->tls_why, sizeof(l->tls_why));
        if (n < 0 || tls_take_output(l) < 0)
            return -1;
        l->out.start += (size_t)n;
        if (n == 0 || buf_len(&l->out) == 0)
            return 0;
    }
}

/* Hand the output buffer to the kernel. */
static void flush_output(struct link *l)
{
    if (l->tls != NULL && tls_seal(l) < 0) {
        link_fail(l, l->tls_why);
        return;
    }
    struct link_buf *b = wire_buf(l);
    while (b->start < b->end) {
        ssize_t n = send(l->fd, b->data + b->start, b->end - b->start, MSG_NOSIGNAL);
        if (n > 0) {
            b->start += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            arm_write(l);
            return;
        }
        write_failed(l, n < 0 ? errno : 0);
        return;
    }
    buf_release_if_idle(b);
    disarm_write(l);
    if (buf_len(&l->out) > 0)
        return;         /* TLS: the frames wait for the handshake to end */
    buf_release_if_idle(&l->out);
    if (l->state == LS_REJECTING)
        link_finish(l);
    else if (l->state == LS_UP && l->cb.on_drained != NULL)
        l->cb.on_drained(l, l->ctx);
}

/* ---- the handshake ---- */

/* HELLO identity bytes; returns their length. */
size_t link_hello_encode_identity(const struct link_identity *me, uint8_t *out)
{
    size_t clen = strnlen(me->cluster, LINK_NAME_MAX - 1);
    uint8_t *p = out;
    *p++ = (uint8_t)clen;
    memcpy(p, me->cluster, clen);
    p += clen;
    store_u32le(p, me->group);
    p += 4;
    *p++ = me->role;
    store_u32le(p, me->index);
    p += 4;
    return (size_t)(p - out);
}

/* Parse a HELLO payload; the proof is its last LINK_PROOF_SIZE bytes. */
bool link_hello_decode(const uint8_t *p, size_t len, struct link_identity *id)
{
    if (len < 1)
        return false;
    size_t clen = p[0];
    if (clen == 0 || clen > LINK_NAME_MAX - 1)
        return false;
    if (len != 1 + clen + 4 + 1 + 4 + LINK_PROOF_SIZE)
        return false;
    if (memchr(p + 1, '\0', clen) != NULL)
        return false;
    memset(id, 0, sizeof(*id));
    memcpy(id->cluster, p + 1, clen);
    id->group = load_u32le(p + 1 + clen);
    id->role = p[1 + clen + 4];
    id->index = load_u32le(p + 1 + clen + 5);
    return true;
}

static void send_reject(struct link *l, const char *why)
{
    /* The name is the unauthenticated peer's: a newline or an escape in it
     * must not forge log lines or reach a terminal.  The owner's reason
     * may quote peer bytes too (a replica's "diverged" text names a key). */
    char name[LINK_NAME_MAX], reason[LINK_REJECT_TEXT_MAX + 1];
    printable_copy(name, sizeof(name), l->peer.cluster, strlen(l->peer.cluster));
    size_t n = strlen(printable_copy(reason, sizeof(reason), why, strlen(why)));
    log_line(l, "rejecting %s (group %u role %u index %u): %s", name,
             (unsigned)l->peer.group, (unsigned)l->peer.role, (unsigned)l->peer.index, reason);
    snprintf(l->last_error, sizeof(l->last_error), "rejected: %s", reason);
    if (queue_frame(l, FT_REJECT, reason, n) < 0) {
        link_finish(l);
        return;
    }
    l->state = LS_REJECTING;
    event_del(l->rd_ev);
    arm_timer(l, LINK_REJECT_LINGER_MS);
}

/* Connector: CHALLENGE arrived, answer HELLO. */
static void handle_challenge(struct link *l, const uint8_t *payload, uint32_t len)
{
    uint8_t hello[HELLO_IDENT_MAX + LINK_PROOF_SIZE];

    if (len != LINK_NONCE_SIZE) {
        link_fail(l, "malformed CHALLENGE");
        return;
    }
    size_t n = link_hello_encode_identity(&l->me, hello);
    compute_proof(l->key, payload, hello, n, hello + n);
    if (queue_frame(l, FT_HELLO, hello, n + LINK_PROOF_SIZE) < 0) {
        link_fail(l, "out of memory");
        return;
    }
    l->state = LS_AWAIT_WELCOME;
}

static void handle_reject(struct link *l, const uint8_t *payload, uint32_t len)
{
    char text[LINK_REJECT_TEXT_MAX + 1];
    char why[LINK_ERROR_MAX];
    printable_copy(text, sizeof(text), payload, len);
    snprintf(why, sizeof(why), "rejected by the peer: %s", text);
    link_fail(l, why);
}

/* The handshake is done: from now on silence is measured, and kept short
 * by PINGs if the owner asked for them. */
static void became_up(struct link *l)
{
    if (l->is_connector)
        connected_at_address(l);
    l->state = LS_UP;
    l->last_rx_ms = link_now_ms();
    l->heard_ping = false;
    l->peer_closed = l->peer_fin = false;
    l->peer_stamp_ms = 0;
    if (l->keepalive_ms)
        arm_timer(l, 0);   /* the first PING at once: a lease is an answer away */
    if (l->tls != NULL) {
        char what[128];
        linktls_describe(l->tls, what, sizeof(what));
        log_line(l, "up over TLS: %s", what);
    }
}

/* Connector: WELCOME arrived, the link is up. */
static void handle_welcome(struct link *l, const uint8_t *payload, uint32_t len)
{
    if (len != 8) {
        link_fail(l, "malformed WELCOME");
        return;
    }
    uint64_t xid = load_u64le(payload);
    evtimer_del(l->timer_ev);
    if (l->failing)
        log_line(l, "up");
    l->failing = false;
    l->backoff_ms = LINK_RETRY_MIN_MS;
    became_up(l);
    if (l->cb.on_up != NULL)
        l->cb.on_up(l, xid, l->ctx);
}

/* Acceptor: check HELLO, ask the owner, answer WELCOME or REJECT. */
static void handle_hello(struct link *l, const uint8_t *payload, uint32_t len)
{
    struct link_listener *ll = l->listener;
    uint8_t proof[LINK_PROOF_SIZE];
    char why[LINK_ERROR_MAX];

    if (!link_hello_decode(payload, len, &l->peer)) {
        send_reject(l, "malformed HELLO");
        return;
    }
    size_t clen = strlen(l->peer.cluster);
    if (clen != ll->cluster_len || memcmp(l->peer.cluster, ll->cluster, clen) != 0) {
        snprintf(why, sizeof(why), "wrong cluster name (this is cluster %s)", ll->cluster);
        send_reject(l, why);
        return;
    }
    if (ll->group != LINK_GROUP_ANY && l->peer.group != ll->group) {
        snprintf(why, sizeof(why), "wrong group %u (this is group %u)",
                 (unsigned)l->peer.group, (unsigned)ll->group);
        send_reject(l, why);
        return;
    }
    compute_proof(ll->key, l->nonce, payload, len - LINK_PROOF_SIZE, proof);
    if (!auth_equal(proof, payload + len - LINK_PROOF_SIZE, LINK_PROOF_SIZE)) {
        send_reject(l, "bad proof (wrong secret?)");
        return;
    }

    struct link_callbacks cb;
    void *ctx = NULL;
    uint64_t welcome_xid = 0;
    const char *reason = NULL;
    memset(&cb, 0, sizeof(cb));
    bool take = ll->accept(ll->owner, &l->peer, l, &cb, &ctx, &welcome_xid, &reason);
    if (l->state == LS_CLOSED)     /* closed from inside accept */
        return;
    if (!take) {
        send_reject(l, reason != NULL ? reason : "refused by the acceptor");
        return;
    }
    uint8_t xid_bytes[8];
    store_u64le(xid_bytes, welcome_xid);
    if (queue_frame(l, FT_WELCOME, xid_bytes, sizeof(xid_bytes)) < 0) {
        /* The owner took l already: it must forget it before it is freed. */
        if (cb.on_down != NULL)
            cb.on_down(l, "out of memory for WELCOME", ctx);
        link_fail(l, "out of memory");
        return;
    }
    listener_unlist(l);
    evtimer_del(l->timer_ev);
    l->cb = cb;
    l->ctx = ctx;
    became_up(l);
    if (l->cb.on_up != NULL)
        l->cb.on_up(l, welcome_xid, l->ctx);
}

/* ---- input ---- */

static void handshake_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len)
{
    char why[LINK_ERROR_MAX];
    bool expected = false;

    if (l->is_connector && type == FT_REJECT) {
        handle_reject(l, payload, len);
        return;
    }
    if (l->state == LS_AWAIT_CHALLENGE && type == FT_CHALLENGE)
        expected = true;
    else if (l->state == LS_AWAIT_WELCOME && type == FT_WELCOME)
        expected = true;
    else if (l->state == LS_AWAIT_HELLO && type == FT_HELLO)
        expected = true;
    if (!expected) {
        snprintf(why, sizeof(why), "unexpected %s frame during the handshake",
                 frame_type_name(type));
        link_fail(l, why);
        return;
    }
    if (type == FT_CHALLENGE)
        handle_challenge(l, payload, len);
    else if (type == FT_WELCOME)
        handle_welcome(l, payload, len);
    else
        handle_hello(l, payload, len);
}

static void dispatch_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len)
{
    char why[LINK_ERROR_MAX];

    if (l->state != LS_UP) {
        handshake_frame(l, type, payload, len);
        return;
    }
    if (type < FT_RECORD) {
        snprintf(why, sizeof(why), "unexpected %s frame after the handshake",
                 frame_type_name(type));
        link_fail(l, why);
        return;
    }
    if (type == FT_PING) {
        l->heard_ping = true;
        if (len == 8) {
            /* Answered at once: the peer's lease runs from when it sent
             * this clock, and our grant from when it arrived here. */
            l->peer_stamp_ms = link_now_ms();
            (void)link_send(l, FT_PONG, payload, len);   /* out of memory drops the link */
        }
    }
    if (type == FT_PONG) {
        uint64_t stamp = len == 8 ? load_u64le(payload) : 0;
        if (stamp > l->lease_stamp_ms && stamp <= link_now_ms()) {
            l->lease_stamp_ms = stamp;
            if (l->cb.on_lease != NULL)
                l->cb.on_lease(l, l->ctx);
        }
        return;
    }
    if (l->cb.on_frame != NULL)
        l->cb.on_frame(l, type, payload, len, l->ctx);
}

static void describe_bad_header(const struct frame_header *h, char *why, size_t len)
{
    if ((h->magic & 0xffff) == 0x0316)      /* 16 03: a TLS handshake record */
        snprintf(why, len, "the peer speaks TLS and this end does not "
                 "(link_tls in one cluster file only?)");
    else if (h->magic != FRAME_MAGIC)
        snprintf(why, len, "bad frame: magic 0x%08x", (unsigned)h->magic);
    else if (h->length > FRAME_MAX_PAYLOAD)
        snprintf(why, len, "bad frame: length %u over the limit", (unsigned)h->length);
    else
        snprintf(why, len, "bad frame: unknown type %u", (unsigned)h->type);
}

/* Handle every complete frame in the input buffer.  false if the
 * connection went away (or the link was closed) meanwhile. */
static bool parse_frames(struct link *l)
{
    unsigned gen = l->gen;
    char why[LINK_ERROR_MAX];

    while (buf_len(&l->in) >= FRAME_HEADER_SIZE) {
        const uint8_t *p = l->in.data + l->in.start;
        struct frame_header h;
        if (frame_header_decode(p, &h) < 0) {
            describe_bad_header(&h, why, sizeof(why));
            link_fail(l, why);
            return false;
        }
        if (l->state != LS_UP && h.length > LINK_HANDSHAKE_MAX_PAYLOAD) {
            snprintf(why, sizeof(why), "bad frame: %u-byte %s frame during the handshake",
                     (unsigned)h.length, frame_type_name(h.type));
            link_fail(l, why);
            return false;
        }
        if (buf_len(&l->in) - FRAME_HEADER_SIZE < h.length)
            break;
        if (!frame_payload_ok(&h, p + FRAME_HEADER_SIZE)) {
            snprintf(why, sizeof(why), "bad frame: CRC mismatch on a %u-byte %s frame",
                     (unsigned)h.length, frame_type_name(h.type));
            link_fail(l, why);
            return false;
        }
        l->in.start += FRAME_HEADER_SIZE + h.length;
        dispatch_frame(l, h.type, p + FRAME_HEADER_SIZE, h.length);
        if (l->gen != gen || l->state == LS_CLOSED || l->state == LS_REJECTING)
            return false;
    }
    return true;
}

/* Free space wanted before the next recv(): at least LINK_READ_MIN, and
 * all of the frame being received, so it ends up contiguous. */
static size_t input_room_wanted(const struct link *l)
{
    size_t have = buf_len(&l->in);
    size_t want = LINK_READ_MIN;
    struct frame_header h;

    if (have >= FRAME_HEADER_SIZE &&
        frame_header_decode(l->in.data + l->in.start, &h) == 0) {
        size_t rest = FRAME_HEADER_SIZE + (size_t)h.length - have;
        if (rest > want)
            want = rest;
    }
    return want;
}

/* One recv() into buf: the number of bytes (> 0), 0 when the socket has
 * no more for now, or -1 when the connection ended or failed (link_fail
 * has run).  Without TLS the peer's end or reset is its close
 * (peer_closed); under TLS only its close notice is (tls_open), since
 * anyone on the path could forge an end, and a killed process's end
 * carries none. */
static ssize_t recv_some(struct link *l, void *buf, size_t room)
{
    char why[LINK_ERROR_MAX];
    for (;;) {
        ssize_t n = recv(l->fd, buf, room, 0);
        if (n > 0) {
            l->last_rx_ms = link_now_ms();
            return n;
        }
        if (n == 0) {
            if (l->tls != NULL) {
                link_fail(l, "connection closed by the peer without a TLS close notice");
            } else {
                l->peer_closed = l->peer_fin = true;
                link_fail(l, "connection closed by the peer");
            }
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        l->peer_closed = l->tls == NULL && errno == ECONNRESET;
        snprintf(why, sizeof(why), "read: %s", strerror(errno));
        link_fail(l, why);
        return -1;
    }
}

/* TLS: decrypt what was fed into the input buffer and handle its frames.
 * false if the connection went away (or the link was closed) meanwhile. */
static bool tls_open(struct link *l)
{
    unsigned gen = l->gen;
    for (;;) {
        if (buf_make_room(&l->in, input_room_wanted(l)) < 0) {
            link_fail(l, "out of memory for input");
            return false;
        }
        ssize_t n = linktls_read(l->tls, l->in.data + l->in.end, l->in.cap - l->in.end,
                                 l->tls_why, sizeof(l->tls_why));
        if (n == 0)
            return true;
        if (n == -2) {
            l->peer_closed = l->peer_fin = true;    /* its close notice: a clean close */
            link_fail(l, "connection closed by the peer");
            return false;
        }
        if (n < 0) {
            link_fail(l, l->tls_why);    /* close_socket sends TLS's alert */
            return false;
        }
        l->in.end += (size_t)n;
        if (!parse_frames(l) || l->gen != gen)
            return false;
    }
}

/* read_input over TLS: ciphertext from the socket into TLS, plaintext
 * frames out of it.  What TLS wants sent (its handshake, frames that
 * waited for it) goes with the next flush. */
static void read_input_tls(struct link *l)
{
    unsigned gen = l->gen;
    size_t budget = LINK_READ_BUDGET;
    uint8_t cipher[16384];

    for (;;) {
        ssize_t n = recv_some(l, cipher, sizeof(cipher));
        if (n < 0)
            return;
        if (n == 0)
            break;
        if (!l->tls_heard && n >= 4 && load_u32le(cipher) == FRAME_MAGIC) {
            link_fail(l, "the peer speaks no TLS and this end does "
                      "(link_tls in one cluster file only?)");
            return;
        }
        l->tls_heard = true;
        if (linktls_feed(l->tls, cipher, (size_t)n) < 0) {
            link_fail(l, "out of memory for TLS input");
            return;
        }
        if (!tls_open(l) || l->gen != gen)
            return;
        if ((size_t)n < sizeof(cipher) || (size_t)n >= budget)
            break;
        budget -= (size_t)n;
    }
    if (linktls_output(l->tls) > 0 ||
        (buf_len(&l->out) > 0 && linktls_established(l->tls)))
        schedule_flush(l);
    buf_release_if_idle(&l->in);
    if (l->state == LS_UP && l->cb.on_read_end != NULL)
        l->cb.on_read_end(l, l->ctx);
}

static void read_input(struct link *l)
{
    unsigned gen = l->gen;
    size_t budget = LINK_READ_BUDGET;

    if (l->tls != NULL) {
        read_input_tls(l);
        return;
    }
    for (;;) {
        if (buf_make_room(&l->in, input_room_wanted(l)) < 0) {
            link_fail(l, "out of memory for input");
            return;
        }
        size_t room = l->in.cap - l->in.end;
        /* A large frame is read to its last byte and no further: the
         * buffer is then empty once it is handled, and the next frame is
         * read to its start instead of being moved there (a memmove of up
         * to a frame per frame for recovery batches). */
        size_t wanted = input_room_wanted(l);
        if (wanted > LINK_READ_MIN && wanted < room)
            room = wanted;
        ssize_t n = recv_some(l, l->in.data + l->in.end, room);
        if (n < 0)
            return;
        if (n == 0)
            break;
        l->in.end += (size_t)n;
        if (!parse_frames(l) || l->gen != gen)
            return;
        if ((size_t)n < room || (size_t)n >= budget)
            break;
        budget -= (size_t)n;
    }
    buf_release_if_idle(&l->in);
    if (l->state == LS_UP && l->cb.on_read_end != NULL)
        l->cb.on_read_end(l, l->ctx);
}

/* ---- libevent callbacks ---- */

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct link *l = arg;
    link_enter(l);
    if (l->fd >= 0 && l->state != LS_CLOSED)
        read_input(l);
    link_leave(l);
}

/* Connector: connected; the acceptor speaks first (CHALLENGE), after
 * the TLS handshake this end opens. */
static void await_challenge(struct link *l)
{
    event_add(l->rd_ev, NULL);
    l->state = LS_AWAIT_CHALLENGE;
    if (l->tls != NULL)
        schedule_flush(l);          /* the TLS handshake's first message */
}

static void finish_connect(struct link *l)
{
    int err = 0;
    socklen_t errlen = sizeof(err);
    char why[LINK_ERROR_MAX];

    if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) < 0)
        err = errno;
    if (err != 0) {
        snprintf(why, sizeof(why), "connect: %s", strerror(err));
        attempt_failed(l, why);
        return;
    }
    disarm_write(l);
    await_challenge(l);
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct link *l = arg;
    link_enter(l);
    if (l->state == LS_CONNECTING)
        finish_connect(l);
    else if (l->fd >= 0 && l->state != LS_CLOSED)
        flush_output(l);
    link_leave(l);
}

static bool may_write(const struct link *l)
{
    return l->fd >= 0 && l->state != LS_CONNECTING && l->state != LS_CLOSED && !l->wr_armed;
}

/* With a sendq (the server batches a loop pass's writes) the flush lists
 * the link instead of sending: its output then goes after the pass, in one
 * submission with the other links' and the clients' (link_wr_prepare). */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct link *l = arg;
    link_enter(l);
    l->flush_queued = false;
    if (l->fail_pending != NULL) {
        link_fail(l, l->fail_pending);
    } else if (may_write(l) && !l->wr.listed) {
        if (sendq_want(l->sq, &l->wr))
            return;                 /* the listing keeps our depth */
        flush_output(l);
    }
    link_leave(l);
}

static struct link *link_of_writer(struct sendq_writer *wr)
{
    return (struct link *)((char *)wr - offsetof(struct link, wr));
}

static int link_wr_prepare(struct sendq_writer *wr, int *fd, struct iovec *iov, int max)
{
    struct link *l = link_of_writer(wr);
    if (max < 1 || l->fail_pending != NULL || !may_write(l))
        return 0;
    if (l->tls != NULL && tls_seal(l) < 0) {
        l->fail_pending = l->tls_why;   /* complete drops the connection */
        return 0;
    }
    struct link_buf *b = wire_buf(l);
    if (b->start >= b->end)
        return 0;
    iov[0].iov_base = b->data + b->start;
    iov[0].iov_len = b->end - b->start;
    *fd = l->fd;
    l->wr_gen = l->gen;
    return 1;
}

/* What went, before anything else runs (sendq.h, step 2). */
static void link_wr_sent(struct sendq_writer *wr, size_t n)
{
    struct link *l = link_of_writer(wr);
    wire_buf(l)->start += n;
}

/* The outcome, taken as flush_output takes a send()'s, unless the
 * connection it was for is gone by now (closed or torn down by an earlier
 * writer's completion); then flush_output writes whatever is left and
 * tells the owner it drained. */
static void link_wr_complete(struct sendq_writer *wr, bool had, ssize_t res)
{
    struct link *l = link_of_writer(wr);
    if (had && res < 0 && res != -EAGAIN && res != -EWOULDBLOCK && l->state != LS_CLOSED &&
        l->gen == l->wr_gen)
        write_failed(l, (int)-res);
    if (l->fail_pending != NULL && l->state != LS_CLOSED)
        link_fail(l, l->fail_pending);
    else if (may_write(l))
        flush_output(l);
    link_leave(l);
}

void link_set_sendq(struct link *l, struct sendq *q)
{
    l->sq = q;
}

void link_listener_set_sendq(struct link_listener *ll, struct sendq *q)
{
    ll->sq = q;
}

void link_set_tls(struct link *l, struct linktls_ctx *ctx)
{
    l->tls_ctx = ctx;
}

void link_listener_set_tls(struct link_listener *ll, struct linktls_ctx *ctx)
{
    ll->tls_ctx = ctx;
}

bool link_is_tls(const struct link *l)
{
    return l->tls != NULL;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct link *l = arg;
    link_enter(l);
    switch (l->state) {
    case LS_IDLE:
        dial(l);
        break;
    case LS_RESOLVING:
        /* No timer runs while the name is looked up: the resolver's own
         * timeouts bound the wait (on_resolved ends it). */
        break;
    case LS_CONNECTING:
        attempt_failed(l, "connect: timed out");
        break;
    case LS_AWAIT_CHALLENGE:
    case LS_AWAIT_WELCOME:
    case LS_AWAIT_HELLO:
        if (l->tls != NULL && !l->tls_heard)
            link_fail(l, "handshake timed out: nothing arrived (a peer without TLS? "
                      "link_tls in one cluster file only?)");
        else
            link_fail(l, "handshake timed out");
        break;
    case LS_REJECTING:
        link_finish(l);
        break;
    case LS_UP:
        if (l->keepalive_ms) {
            uint8_t stamp[8];
            store_u64le(stamp, link_now_ms());
            (void)link_send(l, FT_PING, stamp, sizeof(stamp));   /* out of memory drops the link */
            arm_timer(l, l->keepalive_ms);
        }
        break;
    default:
        break;
    }
    link_leave(l);
}

/* Give l the connected (or connecting) socket fd and its events.  NULL,
 * or what went wrong. */
static const char *attach_socket(struct link *l, int fd)
{
    l->fd = fd;
    l->local = is_unix_socket(fd);
    /* TLS over TCP only: a Unix socket (a peer on this host) never leaves
     * the machine. */
    if (l->tls_ctx != NULL && !l->local) {
        l->tls = linktls_new(l->tls_ctx, l->is_connector, l->host);
        if (l->tls == NULL)
            return "cannot start TLS (out of memory, or a host name TLS cannot check)";
    }
    l->rd_ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_readable, l);
    l->wr_ev = event_new(l->base, fd, EV_WRITE | EV_PERSIST, on_writable, l);
    if (l->rd_ev == NULL || l->wr_ev == NULL)
        return "out of memory";
    return NULL;
}

/* ---- connector ---- */

static const struct addrinfo *find_address(const struct addrinfo *list,
                                           const struct sockaddr_storage *sa, socklen_t len)
{
    for (const struct addrinfo *ai = list; ai != NULL && len > 0; ai = ai->ai_next)
        if (ai->ai_addrlen == len && memcmp(ai->ai_addr, sa, len) == 0)
            return ai;
    return NULL;
}

/* Which of the addresses in list this attempt dials.  A name may have
 * several (a host on two networks, a stale record beside the new one), and
 * the first the resolver gives need not be one the peer listens on: after
 * a connect failed at an address, the one after it in the list (wrapping
 * round); else the last that connected, if the name still has it; else the
 * first.  By address, not by position: a resolver may give them in
 * another order at every lookup. */
static const struct addrinfo *pick_address(const struct link *l, const struct addrinfo *list)
{
    const struct addrinfo *ai = find_address(list, &l->failed_sa, l->failed_salen);
    if (ai != NULL)
        return ai->ai_next != NULL ? ai->ai_next : list;
    ai = find_address(list, &l->good_sa, l->good_salen);
    return ai != NULL ? ai : list;
}

/* An attempt failed before its link came up (socket, connect, or the
 * handshake: a stale record may lead to a host that accepts but is not
 * the peer): the next attempt dials the name's next address.  Nothing if
 * no address was dialled (the lookup failed). */
static void connect_failed_at_address(struct link *l)
{
    if (l->dial_salen == 0)
        return;
    l->failed_sa = l->dial_sa;
    l->failed_salen = l->dial_salen;
}

/* The link came up: that address is the one to dial again. */
static void connected_at_address(struct link *l)
{
    if (l->dial_salen == 0)
        return;
    l->good_sa = l->dial_sa;
    l->good_salen = l->dial_salen;
    l->failed_salen = 0;
}

/* Connect to one of list's addresses (rc: its lookup's answer; list freed
 * here). */
static void dial_address(struct link *l, int rc, struct addrinfo *list)
{
    char why[LINK_ERROR_MAX];

    if (rc != 0) {
        snprintf(why, sizeof(why), "cannot resolve %s: %s", l->host, gai_strerror(rc));
        attempt_failed(l, why);
        return;
    }
    const struct addrinfo *ai = pick_address(l, list);
    l->dial_salen = 0;
    if (ai->ai_addrlen <= sizeof(l->dial_sa)) {
        memcpy(&l->dial_sa, ai->ai_addr, ai->ai_addrlen);
        l->dial_salen = ai->ai_addrlen;
    }
    /* A peer on this host: its twin if it has one (connected at once). */
    int fd = localtwin_enabled() ? localtwin_connect(ai->ai_addr, l->port) : -1;
    if (fd >= 0) {
        rc = 0;
    } else {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(why, sizeof(why), "socket: %s", strerror(errno));
            freeaddrinfo(list);
            attempt_failed(l, why);
            return;
        }
        set_socket_options(fd);
        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    }
    int err = errno;
    freeaddrinfo(list);
    const char *cannot = attach_socket(l, fd);
    if (cannot != NULL) {
        attempt_failed(l, cannot);
        return;
    }
    buf_release_if_idle(&l->in);
    buf_release_if_idle(&l->out);
    arm_timer(l, LINK_HANDSHAKE_TIMEOUT_MS);
    if (rc == 0) {
        await_challenge(l);
        return;
    }
    if (err != EINPROGRESS) {
        snprintf(why, sizeof(why), "connect: %s", strerror(err));
        attempt_failed(l, why);
        return;
    }
    l->state = LS_CONNECTING;
    arm_write(l);
}

static void on_resolved(int rc, struct addrinfo *ai, void *arg)
{
    struct link *l = arg;
    link_enter(l);
    l->lookup = NULL;
    if (l->state == LS_RESOLVING)
        dial_address(l, rc, ai);
    else if (ai != NULL)
        freeaddrinfo(ai);
    link_leave(l);
}

/* Start one connection attempt (state LS_IDLE).  A host name is looked
 * up on a thread (lookup.h): a peer whose name does not resolve while its
 * host is replaced must not hold up this process's loop at every redial. */
static void dial(struct link *l)
{
    struct addrinfo *ai = NULL;
    l->dial_salen = 0;      /* no address dialled yet */
    int rc = lookup_numeric(l->host, l->port, false, &ai);

    if (rc == EAI_NONAME) {
        l->lookup = lookup_start(l->base, l->host, l->port, on_resolved, l);
        if (l->lookup != NULL) {
            l->state = LS_RESOLVING;
            return;
        }
        rc = lookup_now(l->host, l->port, false, &ai);     /* no thread: here, then */
    }
    dial_address(l, rc, ai);
}

static struct link *link_alloc(struct event_base *base)
{
    struct link *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->base = base;
    l->fd = -1;
    sendq_writer_init(&l->wr, link_wr_prepare, link_wr_sent, link_wr_complete);
    l->backoff_ms = LINK_RETRY_MIN_MS;
    l->timer_ev = evtimer_new(base, on_timer, l);
    l->flush_ev = event_new(base, -1, 0, on_flush, l);
    if (l->timer_ev == NULL || l->flush_ev == NULL) {
        if (l->timer_ev != NULL)
            event_free(l->timer_ev);
        if (l->flush_ev != NULL)
            event_free(l->flush_ev);
        free(l);
        return NULL;
    }
    return l;
}

struct link *link_connect(struct event_base *base, const char *host, int port,
                          const struct link_identity *me, const char *secret,
                          const struct link_callbacks *cb, void *ctx)
{
    if (host == NULL || strlen(host) >= LINK_HOST_MAX || port <= 0 || port > 65535)
        return NULL;
    if (!name_ok(me->cluster))
        return NULL;
    struct link *l = link_alloc(base);
    if (l == NULL)
        return NULL;
    l->is_connector = true;
    l->me = *me;
    l->peer.group = me->group;
    memcpy(l->peer.cluster, me->cluster, sizeof(l->peer.cluster));
    snprintf(l->host, sizeof(l->host), "%s", host);
    l->port = port;
    format_host_port(l->name, sizeof(l->name), host, port);
    derive_key(secret, l->key);
    if (cb != NULL)
        l->cb = *cb;
    l->ctx = ctx;
    l->state = LS_IDLE;
    arm_timer(l, 0);   /* first dial from the loop, never from here */
    return l;
}

/* ---- acceptor ---- */

static void on_accept(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct link_listener *ll = arg;
    struct link *l = link_alloc(ll->base);
    if (l == NULL) {
        fprintf(stderr, "link listener port %d: out of memory accepting a peer\n", ll->port);
        close(fd);
        return;
    }
    l->sq = ll->sq;
    l->tls_ctx = ll->tls_ctx;
    if (sa->sa_family == AF_UNIX) {
        localtwin_peer_name(fd, l->name, sizeof(l->name));
    } else {
        set_socket_options(fd);
        format_sockaddr(l->name, sizeof(l->name), sa);
    }
    listener_enlist(ll, l);
    l->state = LS_AWAIT_HELLO;
    /* A twin takes no certificate: with TLS asked for, only a process of
     * our own user may use it (one that could read our key anyway). */
    if (sa->sa_family == AF_UNIX && l->tls_ctx != NULL && !localtwin_peer_is_me(fd)) {
        log_line(l, "refused: a local connection from another user, and links want TLS");
        link_finish(l);   /* closes fd */
        return;
    }
    const char *cannot = attach_socket(l, fd);
    if (cannot == NULL && (fill_random(l->nonce, sizeof(l->nonce)) < 0 ||
                           queue_frame(l, FT_CHALLENGE, l->nonce, sizeof(l->nonce)) < 0))
        cannot = strerror(errno);
    if (cannot != NULL) {
        log_line(l, "cannot start the handshake: %s", cannot);
        link_finish(l);   /* closes fd */
        return;
    }
    event_add(l->rd_ev, NULL);
    arm_timer(l, LINK_HANDSHAKE_TIMEOUT_MS);
}

static void on_accept_error(struct evconnlistener *evl, void *arg)
{
    struct link_listener *ll = arg;
    fprintf(stderr, "link listener port %d: accept: %s\n", ll->port, strerror(errno));
}

/* Binds the twin of the address just bound (localtwin.h), if it has one.
 * Without it peers on this host dial TCP, so a failure is only a line. */
static void listen_twin(struct link_listener *ll, const struct sockaddr *sa)
{
    struct sockaddr_un un;
    socklen_t len;
    if (!localtwin_enabled() || !localtwin_listen_name(sa, ll->port, &un, &len))
        return;
    const unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
    struct evconnlistener *evl = evconnlistener_new_bind(ll->base, on_accept, ll, flags, -1,
                                                         (struct sockaddr *)&un, (int)len);
    if (evl == NULL) {
        fprintf(stderr, "link: no local twin @%.*s for port %d (%s): peers on this host "
                "dial TCP\n", (int)(len - offsetof(struct sockaddr_un, sun_path) - 1),
                un.sun_path + 1, ll->port, strerror(errno));
        return;
    }
    evconnlistener_set_error_cb(evl, on_accept_error);
    ll->evl[ll->nevl++] = evl;
}

/* Listens on ai too.  Every address of the listen name is bound, as
 * memcached's -l does: a host with two networks may be known by both, and
 * a peer dials whichever its own resolver puts first.  With port 0 the
 * others share the port the first one got.  An address that cannot be
 * bound (another host's, or a family this host lacks) is skipped, with a
 * line when a name was given (host), and its errno kept in *err. */
static bool listen_one(struct link_listener *ll, const struct addrinfo *ai, const char *host,
                       int *err)
{
    const unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
    struct sockaddr_storage sa;
    char where[INET6_ADDRSTRLEN] = "?";

    if (ai->ai_addrlen > sizeof(sa))
        return false;
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    if (ll->nevl > 0 && sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)ll->port);
    else if (ll->nevl > 0 && sa.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)ll->port);
    struct evconnlistener *evl = evconnlistener_new_bind(ll->base, on_accept, ll, flags, -1,
                                                         (struct sockaddr *)&sa,
                                                         (int)ai->ai_addrlen);
    if (evl == NULL) {
        *err = errno;
        if (host != NULL) {
            getnameinfo((struct sockaddr *)&sa, ai->ai_addrlen, where, sizeof(where), NULL, 0,
                        NI_NUMERICHOST);
            fprintf(stderr, "link: cannot listen on %s (%s) port %d: %s\n", host, where,
                    ll->nevl > 0 ? ll->port : ntohs(((struct sockaddr_in *)&sa)->sin_port),
                    strerror(*err));
        }
        return false;
    }
    evconnlistener_set_error_cb(evl, on_accept_error);
    if (ll->nevl == 0)
        ll->port = netaddr_local_port(evconnlistener_get_fd(evl));
    ll->evl[ll->nevl++] = evl;
    listen_twin(ll, (struct sockaddr *)&sa);
    return true;
}

struct link_listener *link_listen(struct event_base *base, const char *host, int port,
                                  const char *cluster, uint32_t group, const char *secret,
                                  link_accept_fn accept, void *owner)
{
    struct addrinfo *res = NULL;

    if (cluster == NULL || !name_ok(cluster) || accept == NULL || port < 0 || port > 65535)
        return NULL;
    struct link_listener *ll = calloc(1, sizeof(*ll));
    if (ll == NULL)
        return NULL;
    ll->base = base;
    snprintf(ll->cluster, sizeof(ll->cluster), "%s", cluster);
    ll->cluster_len = strlen(ll->cluster);
    ll->group = group;
    derive_key(secret, ll->key);
    ll->accept = accept;
    ll->owner = owner;

    const char *h = (host != NULL && host[0] != '\0') ? host : NULL;
    int rc = lookup_now(h, port, true, &res);
    if (rc != 0) {
        fprintf(stderr, "link: cannot resolve listen address %s: %s\n", h ? h : "*",
                gai_strerror(rc));
        free(ll);
        return NULL;
    }
    int err = 0;
    int addresses = 0;
    for (struct addrinfo *ai = res; ai != NULL && addresses < LINK_LISTEN_MAX; ai = ai->ai_next)
        addresses += listen_one(ll, ai, h, &err);
    freeaddrinfo(res);
    if (ll->nevl == 0) {
        fprintf(stderr, "link: cannot listen on %s port %d: %s\n", h ? h : "*", port,
                strerror(err));
        free(ll);
        return NULL;
    }
    return ll;
}

int link_listener_port(const struct link_listener *ll)
{
    return ll->port;
}

void link_listener_free(struct link_listener *ll)
{
    if (ll == NULL)
        return;
    for (int i = 0; i < ll->nevl; i++)
        evconnlistener_free(ll->evl[i]);
    while (ll->pending != NULL)
        link_finish(ll->pending);   /* unlists it */
    free(ll);
}

/* ---- the public operations ---- */

static int send_frame(struct link *l, uint16_t type, const struct iovec *iov, int iovcnt,
                      bool have_crc, uint32_t crc)
{
    if (l->state != LS_UP || l->fail_pending != NULL)
        return -1;
    if (type < FT_RECORD || type > FT_LAST || iovcnt < 0 || (iovcnt > 0 && iov == NULL))
        return -1;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > FRAME_MAX_PAYLOAD - total) {
            log_line(l, "refusing to send a %s frame over %u bytes", frame_type_name(type),
                     (unsigned)FRAME_MAX_PAYLOAD);
            return -1;
        }
        total += iov[i].iov_len;
    }
    if (queue_frame_crc(l, type, iov, iovcnt, have_crc, crc) < 0) {
        /* Out of memory: the frame is lost and later ones must not overtake
         * it, so the connection goes down (from the loop, not inside this
         * call: the caller may be iterating over its links). */
        l->fail_pending = "out of memory queuing a frame";
        if (!l->flush_queued) {
            l->flush_queued = true;
            event_active(l->flush_ev, EV_WRITE, 0);
        }
        return -1;
    }
    return 0;
}

int link_sendv(struct link *l, uint16_t type, const struct iovec *iov, int iovcnt)
{
    return send_frame(l, type, iov, iovcnt, false, 0);
}

int link_send(struct link *l, uint16_t type, const void *payload, uint32_t len)
{
    struct iovec iov = { .iov_base = (void *)payload, .iov_len = len };
    return send_frame(l, type, &iov, 1, false, 0);
}

int link_send_crc(struct link *l, uint16_t type, const void *payload, uint32_t len,
                  uint32_t crc)
{
    struct iovec iov = { .iov_base = (void *)payload, .iov_len = len };
    return send_frame(l, type, &iov, 1, true, crc);
}

bool link_is_up(const struct link *l)
{
    return l->state == LS_UP && l->fail_pending == NULL;
}

size_t link_output_pending(const struct link *l)
{
    return buf_len(&l->out) + buf_len(&l->wire);    /* wire: TLS only */
}

const struct link_identity *link_peer(const struct link *l)
{
    return &l->peer;
}

const char *link_peer_name(const struct link *l)
{
    return l->name;
}

const char *link_last_error(const struct link *l)
{
    return l->last_error;
}

void link_close(struct link *l)
{
    if (l == NULL || l->user_closed)
        return;
    l->user_closed = true;
    memset(&l->cb, 0, sizeof(l->cb));
    link_finish(l);
}
