/* lc_fetch.c - libcocytus internals: one "config get cluster" round trip on
 * a non-blocking socket with poll() timeouts.  Connect, send and reply share
 * one deadline, timeout_ms after the start, so a server that refuses, hangs
 * or answers slowly costs at most timeout_ms.  The bytes move by the
 * socket's own calls, or through a transport the caller gives (TLS, for
 * cocytus-proxy's --backend-tls-*), which says which way it waits. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lc_fetch.h"

#define REPLY_MAX (8u << 20)     /* a full map is well under 1 MB */
#define REPLY_CHUNK 65536

static const char request[] = "config get cluster\r\n";

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline; false on timeout or error. */
static bool wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return true;
        if (r == 0 || errno != EINTR)
            return false;
    }
}

static int connect_one(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline)) {
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
            return fd;
        errno = soerr;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/* Tries each address of a until one accepts.  Returns the fd or -1. */
static int connect_addr(const struct lc_addr *a, int64_t deadline, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    char port[16];

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", a->port);
    int gai = getaddrinfo(a->host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "%s: %s", a->host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    errno = ETIMEDOUT;
    for (const struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = connect_one(ai, deadline);
    if (fd < 0)
        snprintf(err, errlen, "connect %s:%d: %s", a->host, a->port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

/* One connection: its socket, and the transport's object if there is one. */
struct fconn {
    int fd;
    const struct lc_transport *tr;
    void *t;
};

/* As send() and recv(); on EAGAIN, *want is the event to wait for. */
static ssize_t conn_send(struct fconn *c, const void *p, size_t n, short *want)
{
    *want = POLLOUT;
    return c->t ? c->tr->send(c->t, p, n, want) : send(c->fd, p, n, MSG_NOSIGNAL);
}

static ssize_t conn_recv(struct fconn *c, void *p, size_t n, short *want)
{
    *want = POLLIN;
    return c->t ? c->tr->recv(c->t, p, n, want) : recv(c->fd, p, n, 0);
}

/* Why the last call failed: the transport's word, or errno's. */
static const char *conn_error(const struct fconn *c)
{
    return c->t ? c->tr->error(c->t) : strerror(errno);
}

static bool send_all(struct fconn *c, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        short want;
        ssize_t w = conn_send(c, p, n, &want);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(c->fd, want, deadline))
                return false;
        } else {
            return false;
        }
    }
    return true;
}

/* A growing receive buffer. */
struct rbuf {
    char *p;
    size_t len, cap;
};

static bool rbuf_reserve(struct rbuf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return true;
    size_t cap = b->cap ? b->cap * 2 : REPLY_CHUNK;
    while (cap - b->len < more)
        cap *= 2;
    if (cap > REPLY_MAX + REPLY_CHUNK)
        return false;
    char *np = realloc(b->p, cap);
    if (np == NULL)
        return false;
    b->p = np;
    b->cap = cap;
    return true;
}

/* Reads until a complete reply is buffered.  Returns its length or 0. */
static size_t read_reply(struct fconn *c, struct rbuf *b, int64_t deadline, char *err,
                         size_t errlen)
{
    for (;;) {
        size_t n = lc_config_reply_length(b->p ? b->p : "", b->len);
        if (n > 0)
            return n;
        if (b->len >= REPLY_MAX || !rbuf_reserve(b, REPLY_CHUNK)) {
            snprintf(err, errlen, "config reply too large");
            return 0;
        }
        short want;
        ssize_t r = conn_recv(c, b->p + b->len, b->cap - b->len, &want);
        if (r > 0) {
            b->len += (size_t)r;
        } else if (r == 0) {
            snprintf(err, errlen, "connection closed during config reply");
            return 0;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            if (!wait_fd(c->fd, want, deadline)) {
                snprintf(err, errlen, "timeout waiting for config reply");
                return 0;
            }
        } else {
            snprintf(err, errlen, "recv: %s", conn_error(c));
            return 0;
        }
    }
}

/* Sends the authentication set and reads its one-line answer. */
static bool authenticate(struct fconn *c, const struct lc_addr *a, const char *auth,
                         int64_t deadline, char *err, size_t errlen)
{
    char line[128];
    size_t n = 0;

    if (!send_all(c, auth, strlen(auth), deadline)) {
        snprintf(err, errlen, "send to %s:%d failed: %s", a->host, a->port, conn_error(c));
        return false;
    }
    while (n == 0 || line[n - 1] != '\n') {
        if (n == sizeof(line) - 1)
            break;
        short want;
        ssize_t r = conn_recv(c, line + n, 1, &want);
        if (r > 0) {
            n++;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (!wait_fd(c->fd, want, deadline))
                break;
        } else {
            break;
        }
    }
    line[n] = '\0';
    if (strcmp(line, "STORED\r\n") == 0)
        return true;
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(err, errlen, "%s:%d refused the credentials: %s", a->host, a->port,
             n ? line : "no answer");
    return false;
}

/* Sends the map request and buffers one complete reply in b (emptied
 * first).  Returns its length, or 0 with err set. */
static size_t ask_map(struct fconn *c, const struct lc_addr *a, struct rbuf *b,
                      int64_t deadline, char *err, size_t errlen)
{
    b->len = 0;
    if (!send_all(c, request, sizeof(request) - 1, deadline)) {
        snprintf(err, errlen, "send to %s:%d failed: %s", a->host, a->port,
                 errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : conn_error(c));
        return 0;
    }
    return read_reply(c, b, deadline, err, errlen);
}

static bool unauthenticated(const struct rbuf *b, size_t n)
{
    static const char refusal[] = "CLIENT_ERROR unauthenticated";
    return n >= sizeof(refusal) - 1 && memcmp(b->p, refusal, sizeof(refusal) - 1) == 0;
}

enum lc_fetch lc_fetch_map(const struct lc_addr *a, int timeout_ms, const char *auth,
                           const struct lc_transport *tr, struct lc_map **out, char *err,
                           size_t errlen, bool *asked)
{
    struct rbuf b = { NULL, 0, 0 };
    enum lc_fetch result = LC_FETCH_FAILED;

    *out = NULL;
    if (asked != NULL)
        *asked = false;
    int64_t deadline = now_ms() + timeout_ms;
    int fd = connect_addr(a, deadline, err, errlen);
    if (fd < 0)
        return LC_FETCH_FAILED;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct fconn c = { fd, tr, NULL };
    if (tr != NULL && (c.t = tr->open(tr->arg, fd, a->host)) == NULL) {
        snprintf(err, errlen, "out of memory for TLS to %s:%d", a->host, a->port);
        close(fd);
        return LC_FETCH_FAILED;
    }
    size_t n = ask_map(&c, a, &b, deadline, err, errlen);
    /* Credentials go only to a server that asks for them: one without -Y
     * would store the authentication set as an item named by its key,
     * password included, for any client to read. */
    if (n > 0 && auth != NULL && unauthenticated(&b, n)) {
        if (asked != NULL)
            *asked = true;
        if (authenticate(&c, a, auth, deadline, err, errlen))
            n = ask_map(&c, a, &b, deadline, err, errlen);
        else
            n = 0;
    }
    if (c.t != NULL)
        tr->close(c.t);
    close(fd);
    if (n > 0) {
        switch (lc_config_to_map(b.p, n, a, out, err, errlen)) {
        case LC_CONFIG_MAP:
            result = LC_FETCH_MAP;
            break;
        case LC_CONFIG_NO_CLUSTER:
            result = LC_FETCH_NO_CLUSTER;
            break;
        case LC_CONFIG_BAD:
            break;
        }
    }
    free(b.p);
    return result;
}
