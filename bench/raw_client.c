/* raw_client.c - memcached text protocol over kept sockets, following MOVED.
 *
 * The idea: a request is a short list of byte ranges (iovecs) that can be
 * sent again unchanged to another endpoint, so following a MOVED is a loop
 * over endpoints around one send-and-read exchange.  Each endpoint has one
 * blocking socket (send/receive timeouts, TCP_NODELAY) and one read buffer;
 * a reply is read line by line from the buffer, and a value is read as one
 * block of the announced length, so the value handed back is a pointer into
 * the buffer (valid until the next call).  See raw_client.h for the rules.
 * The same connections and reply parser are also offered one call at a
 * time (the connection layer at the end) to raw_pipe.c, which sends many
 * requests before it reads their replies. */
#define _GNU_SOURCE

#include "raw_client.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <unistd.h>

#define BUF_INITIAL (16u << 10)
#define LINE_MAX_BYTES 2048           /* a reply line longer than this is broken */
#define VALUE_MAX_BYTES (128u << 20)  /* above any value a server stores */
#define KEY_MAX_BYTES 250             /* memcached's key limit */
#define DEFAULT_PORT "11211"

enum req_kind { REQ_GET, REQ_SET };

/* One request, ready to be sent (again) to any endpoint. */
struct request {
    enum req_kind kind;
    const char *key;
    size_t nkey;
    struct iovec iov[3];
    int niov;
};


static void set_error(struct raw_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct raw_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

const char *raw_client_error(const struct raw_client *c)
{
    return c->err;
}

const char *raw_strerror(enum raw_rc rc)
{
    switch (rc) {
    case RAW_OK: return "ok";
    case RAW_MISS: return "miss";
    case RAW_NOT_STORED: return "not stored";
    case RAW_SERVER_ERROR: return "server error";
    case RAW_IO: return "io error";
    case RAW_PROTOCOL: return "protocol error";
    case RAW_REDIRECTS: return "too many redirects";
    case RAW_LIMIT: return "limit exceeded";
    }
    return "unknown";
}

/* ---- endpoints ---- */

/* Copies s[0..n) into out (cap bytes) as a string; -1 if it does not fit. */
static int copy_part(char *out, size_t cap, const char *s, size_t n)
{
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* A port: 1 to 65535, digits only. */
static int valid_port(const char *p)
{
    unsigned long v = 0;
    if (*p == '\0')
        return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return 0;
    }
    return v >= 1;
}

/* "host:port", "[v6]:port" or "host" (port 11211) in s[0..n) -> host, port. */
static int parse_endpoint(const char *s, size_t n, char *host, char *port)
{
    const char *end = s + n, *colon = NULL;
    if (n > 0 && s[0] == '/') {
        /* a Unix socket (a server started with -s): the path, no port */
        if (n >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return -1;
        port[0] = '\0';
        return copy_part(host, RAW_HOST_MAX, s, n);
    }
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL || copy_part(host, RAW_HOST_MAX, s + 1, (size_t)(close - s - 1)) != 0)
            return -1;
        if (close + 1 == end)
            return copy_part(port, 8, DEFAULT_PORT, strlen(DEFAULT_PORT));
        if (close[1] != ':')
            return -1;
        colon = close + 1;
    } else {
        for (const char *p = s; p < end; p++) {
            if (*p == ':') {
                if (colon != NULL)
                    return -1;    /* a bare IPv6 address needs brackets */
                colon = p;
            }
        }
        size_t nhost = colon ? (size_t)(colon - s) : n;
        if (copy_part(host, RAW_HOST_MAX, s, nhost) != 0)
            return -1;
        if (colon == NULL)
            return copy_part(port, 8, DEFAULT_PORT, strlen(DEFAULT_PORT));
    }
    if (copy_part(port, 8, colon + 1, (size_t)(end - colon - 1)) != 0 || !valid_port(port))
        return -1;
    return 0;
}

/* ---- connections ---- */

static void conn_init(struct raw_conn *k, const char *host, const char *port)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->host, sizeof(k->host), "%s", host);
    snprintf(k->port, sizeof(k->port), "%s", port);
    k->fd = -1;
}

/* Closes k's socket and forgets what was buffered (the stream is lost). */
static void conn_drop(struct raw_conn *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
    k->start = k->end = 0;
}

/* Closes k after a failure, counted. */
static void conn_fail(struct raw_client *c, struct raw_conn *k)
{
    if (k->fd >= 0)
        c->stats.conn_failures++;
    conn_drop(k);
}

/* connect() bounded by the timeout: non-blocking connect, poll, then the
 * socket goes back to blocking.  Returns 0 or an errno value. */
static int connect_bounded(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return errno;
    if (connect(fd, sa, len) != 0) {
        if (errno != EINPROGRESS)
            return errno;
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        int n;
        do {
            n = poll(&pfd, 1, timeout_ms);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
            return errno;
        if (n == 0)
            return ETIMEDOUT;
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            return errno;
        if (soerr != 0)
            return soerr;
    }
    if (fcntl(fd, F_SETFL, flags) < 0)
        return errno;
    return 0;
}

/* Socket options of a kept connection: no Nagle delay (TCP), bounded waits. */
static int tune_socket(int fd, bool tcp, int timeout_ms)
{
    int one = 1;
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    if ((tcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0
        || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
        return errno;
    return 0;
}

static enum raw_rc read_line(struct raw_client *c, struct raw_conn *k, char **line, size_t *len);
static enum raw_rc send_all(struct raw_client *c, struct raw_conn *k, struct iovec *iov, int n);

/* A new connection, with credentials to give: `version` first; a server
 * with -Y answers CLIENT_ERROR unauthenticated and gets the
 * authentication set (so that a server without -Y, which would store it
 * as the item "auth", never sees the password). */
static enum raw_rc conn_prove(struct raw_client *c, struct raw_conn *k)
{
    char head[32];
    char *line;
    size_t len;
    struct iovec iov[3] = { { (void *)"version\r\n", 9 } };
    enum raw_rc rc = send_all(c, k, iov, 1);
    if (rc == RAW_OK)
        rc = read_line(c, k, &line, &len);
    if (rc != RAW_OK)
        return rc;
    if (len >= 8 && memcmp(line, "VERSION ", 8) == 0)
        return RAW_OK;
    if (len != 28 || memcmp(line, "CLIENT_ERROR unauthenticated", 28) != 0) {
        set_error(c, "%s:%s answered version with '%.80s'", k->host, k->port, line);
        return RAW_PROTOCOL;
    }
    int n = snprintf(head, sizeof(head), "set auth 0 0 %zu\r\n", c->nauth);
    iov[0] = (struct iovec){ head, (size_t)n };
    iov[1] = (struct iovec){ (void *)c->auth, c->nauth };
    iov[2] = (struct iovec){ (void *)"\r\n", 2 };
    rc = send_all(c, k, iov, 3);
    if (rc == RAW_OK)
        rc = read_line(c, k, &line, &len);
    if (rc != RAW_OK)
        return rc;
    if (len != 6 || memcmp(line, "STORED", 6) != 0) {
        set_error(c, "%s:%s refused the credentials: %.80s", k->host, k->port, line);
        return RAW_PROTOCOL;
    }
    return RAW_OK;
}

/* A connection that is up: kept, and the credentials proved if asked. */
static enum raw_rc conn_up(struct raw_client *c, struct raw_conn *k, int fd)
{
    k->fd = fd;
    k->start = k->end = 0;
    c->stats.connects++;
    enum raw_rc rc = c->auth != NULL ? conn_prove(c, k) : RAW_OK;
    if (rc != RAW_OK)
        conn_drop(k);
    return rc;
}

/* k names a Unix socket's path (host "/...", no port). */
static enum raw_rc conn_open_unix(struct raw_client *c, struct raw_conn *k)
{
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    size_t n = strlen(k->host);
    if (n >= sizeof(sun.sun_path)) {
        set_error(c, "Unix socket path too long: %.60s...", k->host);
        return RAW_IO;
    }
    memcpy(sun.sun_path, k->host, n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int err = fd < 0 ? errno : connect_bounded(fd, (struct sockaddr *)&sun, sizeof(sun),
                                               c->timeout_ms);
    if (err == 0)
        err = tune_socket(fd, false, c->timeout_ms);
    if (err == 0)
        return conn_up(c, k, fd);
    if (fd >= 0)
        close(fd);
    set_error(c, "connect %s: %s", k->host, strerror(err));
    return RAW_IO;
}

/* Connects k (every address its host resolves to, in order), and proves
 * the credentials if the server asks (conn_prove). */
static enum raw_rc conn_open(struct raw_client *c, struct raw_conn *k)
{
    if (k->host[0] == '/')
        return conn_open_unix(c, k);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(k->host, k->port, &hints, &res);
    if (gai != 0) {
        set_error(c, "resolve %s:%s: %s", k->host, k->port, gai_strerror(gai));
        return RAW_IO;
    }
    int err = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        err = connect_bounded(fd, ai->ai_addr, ai->ai_addrlen, c->timeout_ms);
        if (err == 0)
            err = tune_socket(fd, true, c->timeout_ms);
        if (err == 0) {
            freeaddrinfo(res);
            return conn_up(c, k, fd);
        }
        close(fd);
    }
    freeaddrinfo(res);
    set_error(c, "connect %s:%s: %s", k->host, k->port, strerror(err ? err : ECONNREFUSED));
    return RAW_IO;
}

/* The index of the connection to host:port, added (not connected) when new;
 * -1 when the client already knows RAW_MAX_SERVERS endpoints. */
static int conn_find_or_add(struct raw_client *c, const char *host, const char *port)
{
    for (int i = 0; i < c->nconns; i++) {
        if (strcmp(c->conns[i].host, host) == 0 && strcmp(c->conns[i].port, port) == 0)
            return i;
    }
    if (c->nconns == RAW_MAX_SERVERS)
        return -1;
    conn_init(&c->conns[c->nconns], host, port);
    return c->nconns++;
}

/* ---- sending ---- */

/* Sends every byte of iov[0..n) (the array is consumed). */
static enum raw_rc send_all(struct raw_client *c, struct raw_conn *k, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(k->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            set_error(c, "send to %s:%s: %s", k->host, k->port,
                      (e == EAGAIN || e == EWOULDBLOCK) ? "timed out" : strerror(e));
            return RAW_IO;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return RAW_OK;
}

/* ---- receiving ---- */

/* Makes room for at least want more bytes after end: compacts, then grows. */
static enum raw_rc make_room(struct raw_client *c, struct raw_conn *k, size_t want)
{
    if (k->start > 0 && k->cap - k->end < want) {
        memmove(k->buf, k->buf + k->start, k->end - k->start);
        k->end -= k->start;
        k->start = 0;
    }
    if (k->cap - k->end >= want)
        return RAW_OK;
    size_t cap = k->cap ? k->cap : BUF_INITIAL;
    while (cap - k->end < want)
        cap *= 2;
    char *nb = realloc(k->buf, cap);
    if (nb == NULL) {
        set_error(c, "out of memory for a %zu-byte reply from %s:%s", cap, k->host, k->port);
        return RAW_LIMIT;
    }
    k->buf = nb;
    k->cap = cap;
    return RAW_OK;
}

/* Receives into k's buffer (room for want bytes, at least 4096).  With
 * wait, blocks (up to the socket's timeout) for at least one byte; without,
 * takes only what has already arrived, and RAW_OK also when nothing has. */
static enum raw_rc receive(struct raw_client *c, struct raw_conn *k, size_t want, bool wait)
{
    enum raw_rc rc = make_room(c, k, want > 4096 ? want : 4096);
    if (rc != RAW_OK)
        return rc;
    for (;;) {
        ssize_t r = recv(k->fd, k->buf + k->end, k->cap - k->end, wait ? 0 : MSG_DONTWAIT);
        if (r > 0) {
            k->end += (size_t)r;
            return RAW_OK;
        }
        if (r == 0) {
            set_error(c, "%s:%s closed the connection", k->host, k->port);
            return RAW_IO;
        }
        if (errno == EINTR)
            continue;
        int e = errno;
        bool nothing = e == EAGAIN || e == EWOULDBLOCK;
        if (nothing && !wait)
            return RAW_OK;
        set_error(c, "receive from %s:%s: %s", k->host, k->port,
                  nothing ? "timed out" : strerror(e));
        return RAW_IO;
    }
}

/* Receives what the socket has (at least one byte, or a failure). */
static enum raw_rc fill(struct raw_client *c, struct raw_conn *k, size_t want)
{
    return receive(c, k, want, true);
}

/* The next reply line, without its "\r\n", NUL-terminated in the buffer. */
static enum raw_rc read_line(struct raw_client *c, struct raw_conn *k, char **line, size_t *len)
{
    size_t scanned = 0;
    for (;;) {
        char *base = k->buf + k->start;
        size_t have = k->end - k->start;
        for (size_t i = scanned; i + 1 < have; i++) {
            if (base[i] == '\r' && base[i + 1] == '\n') {
                base[i] = '\0';
                *line = base;
                *len = i;
                k->start += i + 2;
                return RAW_OK;
            }
        }
        if (have > LINE_MAX_BYTES) {
            set_error(c, "%s:%s sent a reply line over %d bytes", k->host, k->port, LINE_MAX_BYTES);
            return RAW_PROTOCOL;
        }
        scanned = have > 0 ? have - 1 : 0;
        enum raw_rc rc = fill(c, k, 0);
        if (rc != RAW_OK)
            return rc;
    }
}

/* Waits until n bytes are buffered after start. */
static enum raw_rc need_bytes(struct raw_client *c, struct raw_conn *k, size_t n)
{
    while (k->end - k->start < n) {
        enum raw_rc rc = fill(c, k, n - (k->end - k->start));
        if (rc != RAW_OK)
            return rc;
    }
    return RAW_OK;
}

/* ---- reply parsing ---- */

/* A decimal number made of digits only, at most max; -1 if not. */
static int parse_decimal(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Splits line into at most max space-separated tokens; returns the count,
 * or -1 when there are more, or empty ones (two spaces in a row). */
static int split_tokens(const char *line, size_t len, const char **tok, size_t *tlen, int max)
{
    int n = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && line[j] != ' ')
            j++;
        if (j == i || n == max)
            return -1;
        tok[n] = line + i;
        tlen[n] = j - i;
        n++;
        i = j + 1;
        if (j < len && i == len)
            return -1;    /* a trailing space */
    }
    return n;
}

/* "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>" -> out->host/port. */
static int parse_moved(const char *line, size_t len, struct raw_reply *out)
{
    static const char prefix[] = "SERVER_ERROR MOVED ";
    size_t np = sizeof(prefix) - 1;
    if (len < np || memcmp(line, prefix, np) != 0)
        return -1;
    const char *tok[3];
    size_t tlen[3];
    uint64_t slot, epoch;
    if (split_tokens(line + np, len - np, tok, tlen, 3) != 3
        || parse_decimal(tok[0], tlen[0], UINT32_MAX, &slot) != 0
        || parse_decimal(tok[1], tlen[1], UINT64_MAX, &epoch) != 0
        || parse_endpoint(tok[2], tlen[2], out->host, out->port) != 0)
        return -1;
    out->slot = (unsigned)slot;
    out->epoch = epoch;
    /* The port is not optional in a MOVED. */
    if (memchr(tok[2], ':', tlen[2]) == NULL || tok[2][tlen[2] - 1] == ']')
        return -1;
    return 0;
}

static int starts_with(const char *line, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len >= n && memcmp(line, word, n) == 0 && (len == n || line[n] == ' ');
}

/* An error reply other than MOVED: the server's line goes into err. */
static int is_error_line(const char *line, size_t len)
{
    return starts_with(line, len, "ERROR") || starts_with(line, len, "CLIENT_ERROR")
           || starts_with(line, len, "SERVER_ERROR");
}

/* The rest of a get's reply after "VALUE ...": the data block, "\r\n", "END\r\n". */
static enum raw_rc read_value(struct raw_client *c, struct raw_conn *k, const struct request *req,
                              const char *line, size_t len, struct raw_reply *out)
{
    const char *tok[5];
    size_t tlen[5];
    uint64_t flags, bytes;
    if (split_tokens(line, len, tok, tlen, 5) != 4 || tlen[1] != req->nkey
        || memcmp(tok[1], req->key, req->nkey) != 0
        || parse_decimal(tok[2], tlen[2], UINT32_MAX, &flags) != 0
        || parse_decimal(tok[3], tlen[3], UINT64_MAX, &bytes) != 0) {
        set_error(c, "get %.*s: bad VALUE line from %s:%s: '%.80s'", (int)req->nkey, req->key,
                  k->host, k->port, line);
        return RAW_PROTOCOL;
    }
    if (bytes > VALUE_MAX_BYTES) {
        set_error(c, "get %.*s: %s:%s announces %llu bytes", (int)req->nkey, req->key, k->host,
                  k->port, (unsigned long long)bytes);
        return RAW_LIMIT;
    }
    /* Data, "\r\n" and "END\r\n" in one wait, so that the value stays
     * where it is in the buffer once it is handed out. */
    enum raw_rc rc = need_bytes(c, k, (size_t)bytes + 7);
    if (rc != RAW_OK)
        return rc;
    const char *data = k->buf + k->start;
    if (memcmp(data + bytes, "\r\nEND\r\n", 7) != 0) {
        set_error(c, "get %.*s: %s:%s: the %llu-byte value is not followed by \\r\\nEND\\r\\n",
                  (int)req->nkey, req->key, k->host, k->port, (unsigned long long)bytes);
        return RAW_PROTOCOL;
    }
    k->start += (size_t)bytes + 7;
    out->val = data;
    out->nval = (size_t)bytes;
    return RAW_OK;
}

/* Reads and classifies the reply to req on k. */
static enum raw_rc read_reply(struct raw_client *c, struct raw_conn *k, const struct request *req,
                              struct raw_reply *out)
{
    char *line;
    size_t len;
    enum raw_rc rc = read_line(c, k, &line, &len);
    if (rc != RAW_OK)
        return rc;
    const char *op = req->kind == REQ_GET ? "get" : "set";
    if (starts_with(line, len, "SERVER_ERROR") && len >= 18 && memcmp(line + 13, "MOVED", 5) == 0) {
        if (parse_moved(line, len, out) != 0) {
            set_error(c, "%s %.*s: bad MOVED from %s:%s: '%.80s'", op, (int)req->nkey, req->key,
                      k->host, k->port, line);
            return RAW_PROTOCOL;
        }
        out->moved = 1;
        return RAW_OK;
    }
    if (req->kind == REQ_GET && len == 3 && memcmp(line, "END", 3) == 0)
        return RAW_MISS;
    if (req->kind == REQ_GET && starts_with(line, len, "VALUE"))
        return read_value(c, k, req, line, len, out);
    if (req->kind == REQ_SET && len == 6 && memcmp(line, "STORED", 6) == 0)
        return RAW_OK;
    if (req->kind == REQ_SET && len == 10 && memcmp(line, "NOT_STORED", 10) == 0) {
        set_error(c, "set %.*s: NOT_STORED from %s:%s", (int)req->nkey, req->key, k->host, k->port);
        return RAW_NOT_STORED;
    }
    if (is_error_line(line, len)) {
        set_error(c, "%s %.*s: %s:%s answered '%.120s'", op, (int)req->nkey, req->key, k->host,
                  k->port, line);
        return RAW_SERVER_ERROR;
    }
    set_error(c, "%s %.*s: unexpected reply from %s:%s: '%.80s'", op, (int)req->nkey, req->key,
              k->host, k->port, line);
    return RAW_PROTOCOL;
}

/* ---- one exchange, and the redirect loop ---- */

/* Sends req to connection idx and reads its reply.  The connection is closed
 * on anything that may leave the stream out of step (a failure, a protocol
 * violation, an error reply); it stays open after a result or a MOVED. */
static enum raw_rc exchange(struct raw_client *c, int idx, const struct request *req,
                            struct raw_reply *out)
{
    struct raw_conn *k = &c->conns[idx];
    memset(out, 0, sizeof(*out));
    if (k->fd < 0) {
        enum raw_rc rc = conn_open(c, k);
        if (rc != RAW_OK)
            return rc;
    }
    struct iovec iov[3];
    memcpy(iov, req->iov, sizeof(iov));
    /* Bytes left from an earlier reply mean the stream is out of step. */
    if (k->start != k->end) {
        set_error(c, "%s:%s sent %zu bytes nobody asked for", k->host, k->port, k->end - k->start);
        conn_fail(c, k);
        return RAW_PROTOCOL;
    }
    enum raw_rc rc = send_all(c, k, iov, req->niov);
    if (rc == RAW_OK)
        rc = read_reply(c, k, req, out);
    if (rc == RAW_IO || rc == RAW_PROTOCOL || rc == RAW_SERVER_ERROR || rc == RAW_LIMIT)
        conn_fail(c, k);
    return rc;
}

/* Sends req to the first seed and follows up to RAW_MAX_HOPS MOVED replies;
 * an I/O failure on one endpoint is tried once more on a new connection. */
static enum raw_rc run_request(struct raw_client *c, const struct request *req,
                               struct raw_reply *out)
{
    c->err[0] = '\0';
    c->stats.requests++;
    int idx = 0;
    for (int hop = 0;; hop++) {
        enum raw_rc rc = exchange(c, idx, req, out);
        if (rc == RAW_IO) {
            c->stats.retries++;
            rc = exchange(c, idx, req, out);
        }
        if (rc != RAW_OK || !out->moved) {
            if (rc == RAW_OK || rc == RAW_MISS)
                c->err[0] = '\0';
            return rc;
        }
        if (hop == RAW_MAX_HOPS) {
            set_error(c, "%s %.*s: still MOVED after %d redirects (last to %s:%s)",
                      req->kind == REQ_GET ? "get" : "set", (int)req->nkey, req->key,
                      RAW_MAX_HOPS, out->host, out->port);
            return RAW_REDIRECTS;
        }
        idx = conn_find_or_add(c, out->host, out->port);
        if (idx < 0) {
            set_error(c, "MOVED to %s:%s: already %d endpoints", out->host, out->port,
                      RAW_MAX_SERVERS);
            return RAW_LIMIT;
        }
        c->stats.redirects++;
    }
}

/* A key the text protocol can carry: 1-250 bytes, no space or control byte. */
static int valid_key(struct raw_client *c, const char *key, size_t nkey)
{
    if (nkey == 0 || nkey > KEY_MAX_BYTES) {
        set_error(c, "key of %zu bytes: want 1 to %d", nkey, KEY_MAX_BYTES);
        return 0;
    }
    for (size_t i = 0; i < nkey; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch <= ' ' || ch == 0x7f) {
            set_error(c, "key with a space or control byte at %zu", i);
            return 0;
        }
    }
    return 1;
}

enum raw_rc raw_get(struct raw_client *c, const char *key, size_t nkey, const char **val,
                    size_t *nval)
{
    if (!valid_key(c, key, nkey))
        return RAW_LIMIT;
    struct request req = { .kind = REQ_GET, .key = key, .nkey = nkey, .niov = 3 };
    req.iov[0] = (struct iovec){ (void *)"get ", 4 };
    req.iov[1] = (struct iovec){ (void *)key, nkey };
    req.iov[2] = (struct iovec){ (void *)"\r\n", 2 };
    struct raw_reply rep;
    enum raw_rc rc = run_request(c, &req, &rep);
    if (rc == RAW_OK) {
        *val = rep.val;
        *nval = rep.nval;
    }
    return rc;
}

enum raw_rc raw_set(struct raw_client *c, const char *key, size_t nkey, const char *val,
                    size_t nval)
{
    if (!valid_key(c, key, nkey))
        return RAW_LIMIT;
    /* "set <key> 0 0 <bytes>\r\n", then the data and "\r\n". */
    char head[KEY_MAX_BYTES + 40];
    int nh = snprintf(head, sizeof(head), "set %.*s 0 0 %zu\r\n", (int)nkey, key, nval);
    struct request req = { .kind = REQ_SET, .key = key, .nkey = nkey, .niov = 3 };
    req.iov[0] = (struct iovec){ head, (size_t)nh };
    req.iov[1] = (struct iovec){ (void *)val, nval };
    req.iov[2] = (struct iovec){ (void *)"\r\n", 2 };
    struct raw_reply rep;
    return run_request(c, &req, &rep);
}

/* ---- the connection layer (raw_pipe.c) ---- */

void raw_client_init(struct raw_client *c, int timeout_ms)
{
    memset(c, 0, sizeof(*c));
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
}

void raw_client_set_auth(struct raw_client *c, const char *auth, size_t nauth)
{
    c->auth = nauth > 0 ? auth : NULL;
    c->nauth = nauth;
}

int raw_parse_endpoint(const char *s, size_t n, char *host, char *port)
{
    return parse_endpoint(s, n, host, port);
}

int raw_client_endpoint(struct raw_client *c, const char *host, const char *port)
{
    int idx = conn_find_or_add(c, host, port);
    if (idx < 0)
        set_error(c, "%s:%s: already %d endpoints", host, port, RAW_MAX_SERVERS);
    return idx;
}

enum raw_rc raw_conn_ready(struct raw_client *c, int idx)
{
    struct raw_conn *k = &c->conns[idx];
    if (k->fd >= 0 && k->start != k->end) {
        /* Not expected (every request's reply is read); start afresh. */
        conn_fail(c, k);
    }
    if (k->fd >= 0)
        return RAW_OK;
    return conn_open(c, k);
}

/* Reads what has arrived on k without waiting; RAW_OK also when nothing has. */
static enum raw_rc drain_ready(struct raw_client *c, struct raw_conn *k)
{
    return receive(c, k, 0, false);
}

/* Waits up to the timeout until k can take more bytes, reading replies
 * that arrive meanwhile. */
static enum raw_rc wait_writable(struct raw_client *c, struct raw_conn *k)
{
    struct pollfd pfd = { .fd = k->fd, .events = POLLIN | POLLOUT };
    int n;
    do {
        n = poll(&pfd, 1, c->timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        set_error(c, "send to %s:%s: poll: %s", k->host, k->port, strerror(errno));
        return RAW_IO;
    }
    if (n == 0) {
        set_error(c, "send to %s:%s: timed out", k->host, k->port);
        return RAW_IO;
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR))
        return drain_ready(c, k);
    return RAW_OK;
}

enum raw_rc raw_conn_send(struct raw_client *c, int idx, const char *buf, size_t n)
{
    struct raw_conn *k = &c->conns[idx];
    while (n > 0) {
        ssize_t w = send(k->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            set_error(c, "send to %s:%s: %s", k->host, k->port, strerror(errno));
            return RAW_IO;
        }
        enum raw_rc rc = wait_writable(c, k);
        if (rc != RAW_OK)
            return rc;
    }
    return RAW_OK;
}

enum raw_rc raw_conn_read(struct raw_client *c, int idx, int is_get, const char *key,
                          size_t nkey, struct raw_reply *out)
{
    struct request req = { .kind = is_get ? REQ_GET : REQ_SET, .key = key, .nkey = nkey };
    memset(out, 0, sizeof(*out));
    c->err[0] = '\0';
    struct raw_conn *k = &c->conns[idx];
    if (k->fd < 0) {
        set_error(c, "%s:%s is not connected", k->host, k->port);
        return RAW_IO;
    }
    return read_reply(c, k, &req, out);
}

void raw_conn_fail(struct raw_client *c, int idx)
{
    conn_fail(c, &c->conns[idx]);
}

/* ---- open and close ---- */

int raw_client_open(struct raw_client *c, const char *seeds, int timeout_ms, const char *auth,
                    size_t nauth, char *err, size_t errcap)
{
    raw_client_init(c, timeout_ms);
    raw_client_set_auth(c, auth, nauth);
    const char *comma = strchr(seeds, ',');
    size_t n = comma ? (size_t)(comma - seeds) : strlen(seeds);
    char host[RAW_HOST_MAX], port[8];
    if (parse_endpoint(seeds, n, host, port) != 0) {
        snprintf(err, errcap, "bad server '%.*s': want host:port, [v6]:port or /unix/socket/path", (int)n, seeds);
        return -1;
    }
    conn_init(&c->conns[0], host, port);
    c->nconns = 1;
    if (conn_open(c, &c->conns[0]) != RAW_OK) {
        snprintf(err, errcap, "%s", c->err);
        raw_client_close(c);
        return -1;
    }
    c->err[0] = '\0';
    return 0;
}

void raw_client_close(struct raw_client *c)
{
    for (int i = 0; i < c->nconns; i++) {
        conn_drop(&c->conns[i]);
        free(c->conns[i].buf);
        c->conns[i].buf = NULL;
        c->conns[i].cap = 0;
    }
    c->nconns = 0;
}
