/* raw_client.h - a minimal memcached text-protocol client that follows MOVED
 * over kept connections: the fair "follow" baseline of cocytus-bench.
 *
 * Why it exists.  cocytus-bench --route follow goes through libcocytus and
 * so libmemcached, which closes its connection after every SERVER_ERROR
 * reply; a MOVED is "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>", so
 * each redirect there also pays a new TCP connection.  A Redis cluster
 * client keeps its connections.  This client does what such a client does
 * and nothing more: it sends every request to one fixed server (the first
 * seed), and on MOVED resends the same request to the named endpoint over
 * a connection it keeps open for the rest of the run.  Nothing is cached:
 * the next request starts at the first seed again.
 *
 * One raw_client belongs to one thread.  Sockets are blocking with a send
 * and receive timeout and TCP_NODELAY; a connection is closed only on a
 * real failure (I/O error, timeout, a reply that breaks the protocol, an
 * error reply other than MOVED), and the request is then sent once more on
 * a new connection.  Replies are parsed strictly: "VALUE <key> <flags>
 * <bytes>", exactly <bytes> data bytes and "\r\n", then "END"; "STORED";
 * anything else is an error with the server's line in the message. */
#ifndef COCYTUS_BENCH_RAW_CLIENT_H
#define COCYTUS_BENCH_RAW_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#define RAW_MAX_SERVERS 64      /* endpoints one client may meet */
#define RAW_MAX_HOPS 4          /* MOVED replies followed per request */
#define RAW_HOST_MAX 256
#define RAW_ERR_MAX 256

enum raw_rc {
    RAW_OK = 0,
    RAW_MISS,          /* get: END without a VALUE */
    RAW_NOT_STORED,    /* set: NOT_STORED */
    RAW_SERVER_ERROR,  /* an ERROR, CLIENT_ERROR or SERVER_ERROR other than MOVED */
    RAW_IO,            /* connect, send or receive failed or timed out */
    RAW_PROTOCOL,      /* a reply that is not what the protocol allows */
    RAW_REDIRECTS,     /* more than RAW_MAX_HOPS MOVED replies */
    RAW_LIMIT          /* too many endpoints, or a value too big to hold */
};

/* One kept connection to one endpoint, with its read buffer. */
struct raw_conn {
    char host[RAW_HOST_MAX];      /* as named, without brackets */
    char port[8];
    int fd;                       /* -1: not connected */
    char *buf;                    /* received bytes [start, end) */
    size_t cap, start, end;
};

struct raw_stats {
    uint64_t requests;            /* get and set calls */
    uint64_t redirects;           /* MOVED replies followed */
    uint64_t retries;             /* requests sent again after a failure */
    uint64_t connects;            /* connections opened, the first included */
    uint64_t conn_failures;       /* connections closed on a failure */
};

struct raw_client {
    struct raw_conn conns[RAW_MAX_SERVERS];   /* [0] is the first seed */
    int nconns;
    int timeout_ms;
    const char *auth;             /* "user password" for servers that ask (-Y), or NULL;
                                     borrowed: it outlives c */
    size_t nauth;
    struct raw_stats stats;
    char err[RAW_ERR_MAX];        /* why the last call failed */
};

/* Prepares c for the first server of the seed list "host:port,..." ("[v6]:port"
 * too; a missing port is 11211) and connects to it.  Returns 0, or -1 with
 * the reason in err (c is then already closed). */
int raw_client_open(struct raw_client *c, const char *seeds, int timeout_ms, const char *auth,
                    size_t nauth, char *err, size_t errcap);

/* Credentials ("user password", memcached's ASCII authentication data)
 * for servers that ask for them: every connection opened from now on
 * first sends `version`, and when it is answered CLIENT_ERROR
 * unauthenticated, the authentication set.  nauth 0: none (no probe). */
void raw_client_set_auth(struct raw_client *c, const char *auth, size_t nauth);

/* Closes every connection and frees the buffers. */
void raw_client_close(struct raw_client *c);

/* get key: RAW_OK with *val and *nval pointing at the value inside c (valid until
 * the next call on c), RAW_MISS, or a failure (raw_client_error()). */
enum raw_rc raw_get(struct raw_client *c, const char *key, size_t nkey, const char **val,
                    size_t *nval);

/* set key to val (flags 0, no expiry): RAW_OK when STORED. */
enum raw_rc raw_set(struct raw_client *c, const char *key, size_t nkey, const char *val,
                    size_t nval);

/* What went wrong in the last failed call (empty after a success). */
const char *raw_client_error(const struct raw_client *c);

/* A short name of rc ("ok", "miss", "io error", ...). */
const char *raw_strerror(enum raw_rc rc);

/* ---- the connection layer, for raw_pipe.c ----
 *
 * raw_pipe.c (cocytus-bench --depth) sends many requests on one connection
 * before it reads their replies.  It uses a raw_client as a set of kept
 * connections, one per endpoint, and these calls on one of them (idx). */

/* One reply, as read_reply classifies it. */
struct raw_reply {
    int moved;                    /* MOVED: slot, epoch and the new owner host/port */
    unsigned slot;
    uint64_t epoch;
    char host[RAW_HOST_MAX];
    char port[8];
    const char *val;              /* get hit: the value, inside the connection's buffer */
    size_t nval;
};

/* An empty client (no endpoint, nothing connected). */
void raw_client_init(struct raw_client *c, int timeout_ms);

/* "host:port" or "[v6]:port" (or "host", port 11211) in s[0..n) -> host
 * (RAW_HOST_MAX bytes), port (8 bytes); -1 if malformed. */
int raw_parse_endpoint(const char *s, size_t n, char *host, char *port);

/* Index of the connection to host:port, added unconnected when new; -1
 * (with the reason in the client's error) when RAW_MAX_SERVERS are known. */
int raw_client_endpoint(struct raw_client *c, const char *host, const char *port);

/* Connects idx if it is not.  A connection holding bytes nobody asked for
 * is out of step: it is closed (a failure) and connected again. */
enum raw_rc raw_conn_ready(struct raw_client *c, int idx);

/* Sends buf[0..n) on idx.  While the socket is full, replies already due are
 * read into the connection's buffer, so a long pipeline cannot deadlock with
 * a server blocked on writing to us. */
enum raw_rc raw_conn_send(struct raw_client *c, int idx, const char *buf, size_t n);

/* Reads the next reply on idx, to a get (is_get) or a set of key: RAW_OK
 * (out->moved for a MOVED; out->val for a hit, valid until the next call on
 * idx), RAW_MISS, RAW_NOT_STORED, or a failure.  Nothing is closed here. */
enum raw_rc raw_conn_read(struct raw_client *c, int idx, int is_get, const char *key,
                          size_t nkey, struct raw_reply *out);

/* Closes idx after a failure (counted in conn_failures if it was open). */
void raw_conn_fail(struct raw_client *c, int idx);

#endif
