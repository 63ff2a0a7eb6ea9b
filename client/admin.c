/* admin.c - cocytus-cli's socket client: bounded-time connect, line and
 * byte reads over the memcached text protocol, and the parsers for the
 * `cocytus info|meta|used|region` replies.  Under a cluster file's
 * client_tls line the bytes move through TLS (tls.h): a call is tried
 * first and waits only when TLS says on which event, since TLS may hold
 * decrypted bytes the socket no longer announces. */
#include "admin.h"
#include "auth.h"
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINE_MAX_LEN 1024

static void set_err(struct admin_conn *c, const char *what, const char *detail)
{
    snprintf(c->err, sizeof c->err, "%s:%d: %.80s%s%.120s", c->host, c->port, what,
             detail ? ": " : "", detail ? detail : "");
}

/* ---- connect ---- */

/* Wait until fd is ready for `events`; 1 ready, 0 timeout, -1 error. */
static int wait_fd(int fd, short events, int timeout_ms)
{
    struct pollfd p = { .fd = fd, .events = events };
    for (int tries = 0; tries < 100; tries++) {
        int r = poll(&p, 1, timeout_ms);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return -1;
    }
    return -1;
}

static int connect_addr(const struct addrinfo *ai, int timeout_ms)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, timeout_ms) == 1) {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        r = soerr == 0 ? 0 : -1;
        errno = soerr;
    } else if (r < 0 && errno == EINPROGRESS) {
        errno = ETIMEDOUT;
    }
    if (r < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int admin_open(struct admin_conn *c, const char *host, int port, int timeout_ms,
               const char *secret, struct tls_dialer *tls)
{
    c->fd = -1;
    c->tls = NULL;
    c->start = c->len = 0;
    c->err[0] = '\0';
    c->port = port;
    c->timeout_ms = timeout_ms;
    snprintf(c->host, sizeof c->host, "%s", host);

    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai != 0) {
        set_err(c, "cannot resolve", gai_strerror(gai));
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL && c->fd < 0; ai = ai->ai_next)
        c->fd = connect_addr(ai, timeout_ms);
    if (c->fd < 0)
        set_err(c, "cannot connect", strerror(errno));
    freeaddrinfo(res);
    if (c->fd >= 0 && tls != NULL && (c->tls = tls_conn_dial(tls, c->fd, host)) == NULL) {
        set_err(c, "cannot start TLS", "out of memory");
        admin_close(c);
        return -1;
    }
    if (c->fd >= 0 && secret != NULL && secret[0] != '\0' && admin_auth(c, secret) < 0) {
        admin_close(c);
        return -1;
    }
    return c->fd < 0 ? -1 : 0;
}

int admin_auth(struct admin_conn *c, const char *secret)
{
    char reply[128], line[96];
    if (admin_send_line(c, "cocytus auth") < 0 || admin_read_line(c, reply, sizeof reply) < 0)
        return -1;
    if (auth_admin_reply_line(secret, reply, line, sizeof line) < 0) {
        set_err(c, "no admin authentication offered", reply);
        return -1;
    }
    if (admin_send_line(c, line) < 0 || admin_read_line(c, reply, sizeof reply) < 0)
        return -1;
    if (strcmp(reply, "OK") != 0) {
        set_err(c, "authentication refused (not this cluster's secret?)", reply);
        return -1;
    }
    return 0;
}

void admin_close(struct admin_conn *c)
{
    tls_conn_free(c->tls);
    c->tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->start = c->len = 0;
}

/* ---- raw I/O ---- */

/* Every write is tried before any wait: under TLS the first one runs the
 * handshake and may wait for the server's answer (then on POLLIN). */
static int send_all(struct admin_conn *c, const char *p, size_t n)
{
    for (int tries = 0; n > 0 && tries < 1000; tries++) {
        ssize_t w = c->tls ? tls_write(c->tls, p, n) : send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            set_err(c, "send failed", c->tls ? tls_conn_error(c->tls) : strerror(errno));
            return -1;
        }
        short ev = tls_write_waits_read(c->tls) ? POLLIN : POLLOUT;
        if (wait_fd(c->fd, ev, c->timeout_ms) != 1) {
            set_err(c, "send timed out", NULL);
            return -1;
        }
    }
    if (n > 0) {
        set_err(c, "send keeps failing", NULL);
        return -1;
    }
    return 0;
}

int admin_send_line(struct admin_conn *c, const char *line)
{
    if (c->fd < 0) {
        set_err(c, "not connected", NULL);
        return -1;
    }
    if (send_all(c, line, strlen(line)) < 0)
        return -1;
    return send_all(c, "\r\n", 2);
}

/* Receive into p (up to cap bytes) once; bytes received, or -1.  The
 * read is tried before any wait: TLS may hold bytes the socket no longer
 * announces, and may have to write before it reads (then on POLLOUT). */
static ssize_t recv_some(struct admin_conn *c, void *p, size_t cap)
{
    for (int tries = 0; tries < 1000; tries++) {
        ssize_t r = c->tls ? tls_read(c->tls, p, cap) : recv(c->fd, p, cap, 0);
        if (r > 0)
            return r;
        if (r == 0) {
            set_err(c, "connection closed by the server", NULL);
            return -1;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            set_err(c, "recv failed", c->tls ? tls_conn_error(c->tls) : strerror(errno));
            return -1;
        }
        short ev = tls_read_waits_write(c->tls) ? POLLOUT : POLLIN;
        int ready = wait_fd(c->fd, ev, c->timeout_ms);
        if (ready == 0) {
            set_err(c, "no reply (timed out)", NULL);
            return -1;
        }
        if (ready < 0) {
            set_err(c, "poll failed", strerror(errno));
            return -1;
        }
    }
    set_err(c, "recv keeps failing", NULL);
    return -1;
}

/* Make sure at least one unread byte is buffered. */
static int fill(struct admin_conn *c)
{
    if (c->len > 0)
        return 0;
    c->start = 0;
    ssize_t r = recv_some(c, c->buf, sizeof c->buf);
    if (r < 0)
        return -1;
    c->len = (size_t)r;
    return 0;
}

int admin_read_line(struct admin_conn *c, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t guard = 0; guard < LINE_MAX_LEN * 4; guard++) {
        if (fill(c) < 0)
            return -1;
        char ch = c->buf[c->start++];
        c->len--;
        if (ch == '\n') {
            if (n > 0 && out[n - 1] == '\r')
                n--;
            out[n] = '\0';
            return 0;
        }
        if (n + 1 < cap)
            out[n++] = ch;
    }
    set_err(c, "reply line too long", NULL);
    return -1;
}

int admin_read_exact(struct admin_conn *c, void *out, size_t n)
{
    uint8_t *p = out;
    size_t have = c->len < n ? c->len : n;
    memcpy(p, c->buf + c->start, have);
    c->start += have;
    c->len -= have;
    size_t got = have;
    while (got < n) {
        ssize_t r = recv_some(c, p + got, n - got);
        if (r < 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* ---- replies ---- */

static bool is_error_reply(const char *line)
{
    return strcmp(line, "ERROR") == 0 || strncmp(line, "CLIENT_ERROR", 12) == 0 ||
           strncmp(line, "SERVER_ERROR", 12) == 0;
}

static int stats_push(struct admin_stats *s, const char *name, const char *value)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 32;
        struct admin_stat *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    snprintf(s->v[s->n].name, sizeof s->v[s->n].name, "%s", name);
    snprintf(s->v[s->n].value, sizeof s->v[s->n].value, "%s", value);
    s->n++;
    return 0;
}

#define MAX_REPLY_LINES 100000

int admin_stats_cmd(struct admin_conn *c, const char *cmd, struct admin_stats *out)
{
    char line[LINE_MAX_LEN];
    out->n = 0;
    if (admin_send_line(c, cmd) < 0)
        return -1;
    for (int i = 0; i < MAX_REPLY_LINES; i++) {
        if (admin_read_line(c, line, sizeof line) < 0)
            return -1;
        if (strcmp(line, "END") == 0)
            return 0;
        if (is_error_reply(line)) {
            set_err(c, cmd, line);
            return -1;
        }
        char name[64], value[128];
        value[0] = '\0';
        if (sscanf(line, "STAT %63s %127[^\r\n]", name, value) < 1) {
            set_err(c, "unexpected reply line", line);
            return -1;
        }
        if (stats_push(out, name, value) < 0) {
            set_err(c, "out of memory", NULL);
            return -1;
        }
    }
    set_err(c, "reply without END", cmd);
    return -1;
}

void admin_stats_free(struct admin_stats *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

const char *admin_stat_str(const struct admin_stats *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            return s->v[i].value;
    return NULL;
}

bool admin_stat_u64(const struct admin_stats *s, const char *name, uint64_t *out)
{
    const char *v = admin_stat_str(s, name);
    if (v == NULL || v[0] == '\0' || v[0] == '-')
        return false;
    char *end;
    errno = 0;
    bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
    unsigned long long x = strtoull(v, &end, hex ? 16 : 10);
    if (errno != 0 || end == v || (*end != '\0' && *end != ' '))
        return false;
    *out = (uint64_t)x;
    return true;
}

int admin_used(struct admin_conn *c, int dp, struct admin_ranges *out)
{
    char cmd[64], line[LINE_MAX_LEN];
    if (dp >= 0)
        snprintf(cmd, sizeof cmd, "cocytus used %d", dp);
    else
        snprintf(cmd, sizeof cmd, "cocytus used");
    if (admin_send_line(c, cmd) < 0)
        return -1;
    /* A region of R bytes has at most R/16 pieces; this bound is generous. */
    for (long i = 0; i < 100000000L; i++) {
        if (admin_read_line(c, line, sizeof line) < 0)
            return -1;
        if (strcmp(line, "END") == 0)
            return 0;
        if (is_error_reply(line)) {
            set_err(c, cmd, line);
            return -1;
        }
        uint64_t off, len;
        if (sscanf(line, "USED %" SCNu64 " %" SCNu64, &off, &len) != 2) {
            set_err(c, "unexpected reply line", line);
            return -1;
        }
        if (ranges_add(out, off, len) < 0) {
            set_err(c, "out of memory", NULL);
            return -1;
        }
    }
    set_err(c, "reply without END", cmd);
    return -1;
}

int admin_region(struct admin_conn *c, uint64_t off, uint64_t len, uint8_t *out)
{
    char cmd[96], line[LINE_MAX_LEN];
    snprintf(cmd, sizeof cmd, "cocytus region %" PRIu64 " %" PRIu64, off, len);
    if (admin_send_line(c, cmd) < 0 || admin_read_line(c, line, sizeof line) < 0)
        return -1;
    uint64_t got;
    unsigned flags;
    if (sscanf(line, "VALUE region %u %" SCNu64, &flags, &got) != 2) {
        set_err(c, cmd, line);
        return -1;
    }
    if (got != len) {
        snprintf(line, sizeof line, "asked for %" PRIu64 " bytes, got %" PRIu64, len, got);
        set_err(c, cmd, line);
        return -1;
    }
    if (admin_read_exact(c, out, len) < 0 || admin_read_line(c, line, sizeof line) < 0)
        return -1;
    /* The data block ends with CRLF (an empty line here), then END. */
    if (line[0] == '\0' && admin_read_line(c, line, sizeof line) < 0)
        return -1;
    if (strcmp(line, "END") != 0) {
        set_err(c, "region reply does not end with END", line);
        return -1;
    }
    return 0;
}

/* ---- range lists ---- */

int ranges_add(struct admin_ranges *r, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        struct admin_range *v = realloc(r->v, cap * sizeof *v);
        if (v == NULL)
            return -1;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n].off = off;
    r->v[r->n].len = len;
    r->n++;
    return 0;
}

static int range_cmp(const void *a, const void *b)
{
    const struct admin_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

void ranges_normalize(struct admin_ranges *r)
{
    if (r->n == 0)
        return;
    qsort(r->v, r->n, sizeof r->v[0], range_cmp);
    size_t w = 0;
    for (size_t i = 1; i < r->n; i++) {
        uint64_t end = r->v[w].off + r->v[w].len;
        if (r->v[i].off <= end) {
            uint64_t e2 = r->v[i].off + r->v[i].len;
            if (e2 > end)
                r->v[w].len = e2 - r->v[w].off;
        } else {
            r->v[++w] = r->v[i];
        }
    }
    r->n = w + 1;
}

uint64_t ranges_total(const struct admin_ranges *r)
{
    uint64_t t = 0;
    for (size_t i = 0; i < r->n; i++)
        t += r->v[i].len;
    return t;
}

void ranges_free(struct admin_ranges *r)
{
    free(r->v);
    r->v = NULL;
    r->n = r->cap = 0;
}
