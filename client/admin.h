/* admin.h - cocytus-cli's connection to one server process: the memcached
 * text protocol over a TCP socket (TLS under client_tls), every wait bounded by a timeout,
 * and parsers for the `cocytus ...` admin replies (STAT lists, USED lists,
 * region dumps). */
#ifndef CLIENT_ADMIN_H
#define CLIENT_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADMIN_HOST_MAX 64
#define ADMIN_ERR_MAX 320
#define ADMIN_BUF_SIZE 65536

struct tls_dialer;
struct tls_conn;

struct admin_conn {
    int fd;                      /* -1 when closed */
    struct tls_conn *tls;        /* client_tls: the bytes move through TLS */
    char host[ADMIN_HOST_MAX];
    int port;
    int timeout_ms;              /* bound for every single wait */
    size_t start, len;           /* unread bytes: buf[start .. start+len) */
    char err[ADMIN_ERR_MAX];     /* what went wrong last */
    char buf[ADMIN_BUF_SIZE];
};

/* One "STAT name value" pair. */
struct admin_stat {
    char name[64];
    char value[128];
};

struct admin_stats {
    struct admin_stat *v;
    int n, cap;
};

/* One allocator piece: USED <off> <size>. */
struct admin_range {
    uint64_t off, len;
};

struct admin_ranges {
    struct admin_range *v;
    size_t n, cap;
};

/* Connect with a timeout and, when secret is neither NULL nor "", prove
 * it ("cocytus auth", repl/auth.h): the server accepts `cocytus ...`
 * control commands only on such a connection.  With tls (not NULL) the
 * connection runs TLS, the server's certificate checked against the name
 * or address dialled.  0, or -1 with c->err set (the connection is then
 * closed). */
int admin_open(struct admin_conn *c, const char *host, int port, int timeout_ms,
               const char *secret, struct tls_dialer *tls);
/* The handshake alone, on an open connection.  0, or -1 with c->err. */
int admin_auth(struct admin_conn *c, const char *secret);
void admin_close(struct admin_conn *c);

/* Send one request line; "\r\n" is appended.  0 or -1. */
int admin_send_line(struct admin_conn *c, const char *line);
/* Read one reply line without its "\r\n".  0 or -1. */
int admin_read_line(struct admin_conn *c, char *out, size_t cap);
/* Read exactly n bytes.  0 or -1. */
int admin_read_exact(struct admin_conn *c, void *out, size_t n);

/* Send cmd and collect "STAT name value" lines up to "END".  An ERROR,
 * CLIENT_ERROR or SERVER_ERROR reply gives -1 with the reply in c->err. */
int admin_stats_cmd(struct admin_conn *c, const char *cmd, struct admin_stats *out);
void admin_stats_free(struct admin_stats *s);
/* Value of a stat, or NULL. */
const char *admin_stat_str(const struct admin_stats *s, const char *name);
/* Numeric value (decimal, or hex when the text is 0x-prefixed); false when
 * absent or not a number. */
bool admin_stat_u64(const struct admin_stats *s, const char *name, uint64_t *out);

/* "cocytus used [dp]" (dp < 0: no argument): the pieces, appended to out. */
int admin_used(struct admin_conn *c, int dp, struct admin_ranges *out);
/* "cocytus region off len": len bytes into out. */
int admin_region(struct admin_conn *c, uint64_t off, uint64_t len, uint8_t *out);

/* Range lists: append, sort + merge overlapping/adjacent, free. */
int ranges_add(struct admin_ranges *r, uint64_t off, uint64_t len);
void ranges_normalize(struct admin_ranges *r);
uint64_t ranges_total(const struct admin_ranges *r);
void ranges_free(struct admin_ranges *r);

#endif
