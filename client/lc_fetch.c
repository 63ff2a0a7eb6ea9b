/* lc_fetch.c - libcocytus internals: one "config get cluster" round trip on
 * a non-blocking socket with poll() timeouts.  Connect, send and reply share
 * one deadline, timeout_ms after the start, so a server that refuses, hangs
 * or answers slowly costs at most timeout_ms. */
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

static bool send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(fd, POLLOUT, deadline))
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
static size_t read_reply(int fd, struct rbuf *b, int64_t deadline, char *err, size_t errlen)
{
    for (;;) {
        size_t n = lc_config_reply_length(b->p ? b->p : "", b->len);
        if (n > 0)
            return n;
        if (b->len >= REPLY_MAX || !rbuf_reserve(b, REPLY_CHUNK)) {
            snprintf(err, errlen, "config reply too large");
            return 0;
        }
        ssize_t r = recv(fd, b->p + b->len, b->cap - b->len, 0);
        if (r > 0) {
            b->len += (size_t)r;
        } else if (r == 0) {
            snprintf(err, errlen, "connection closed during config reply");
            return 0;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            if (!wait_fd(fd, POLLIN, deadline)) {
                snprintf(err, errlen, "timeout waiting for config reply");
                return 0;
            }
        } else {
            snprintf(err, errlen, "recv: %s", strerror(errno));
            return 0;
        }
    }
}

/* Sends the authentication set and reads its one-line answer. */
static bool authenticate(int fd, const struct lc_addr *a, const char *auth, int64_t deadline,
                         char *err, size_t errlen)
{
    char line[128];
    size_t n = 0;

    if (!send_all(fd, auth, strlen(auth), deadline)) {
        snprintf(err, errlen, "send to %s:%d failed", a->host, a->port);
        return false;
    }
    while (n == 0 || line[n - 1] != '\n') {
        if (n == sizeof(line) - 1)
            break;
        ssize_t r = recv(fd, line + n, 1, 0);
        if (r > 0) {
            n++;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (!wait_fd(fd, POLLIN, deadline))
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
static size_t ask_map(int fd, const struct lc_addr *a, struct rbuf *b, int64_t deadline,
                      char *err, size_t errlen)
{
    b->len = 0;
    if (!send_all(fd, request, sizeof(request) - 1, deadline)) {
        snprintf(err, errlen, "send to %s:%d failed", a->host, a->port);
        return 0;
    }
    return read_reply(fd, b, deadline, err, errlen);
}

static bool unauthenticated(const struct rbuf *b, size_t n)
{
    static const char refusal[] = "CLIENT_ERROR unauthenticated";
    return n >= sizeof(refusal) - 1 && memcmp(b->p, refusal, sizeof(refusal) - 1) == 0;
}

enum lc_fetch lc_fetch_map(const struct lc_addr *a, int timeout_ms, const char *auth,
                           struct lc_map **out, char *err, size_t errlen, bool *asked)
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
    size_t n = ask_map(fd, a, &b, deadline, err, errlen);
    /* Credentials go only to a server that asks for them: one without -Y
     * would store the authentication set as an item named by its key,
     * password included, for any client to read. */
    if (n > 0 && auth != NULL && unauthenticated(&b, n)) {
        if (asked != NULL)
            *asked = true;
        if (authenticate(fd, a, auth, deadline, err, errlen))
            n = ask_map(fd, a, &b, deadline, err, errlen);
        else
            n = 0;
    }
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
