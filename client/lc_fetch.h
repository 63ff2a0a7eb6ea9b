/* lc_fetch.h - libcocytus internals: fetch the slot map from one server
 * with "config get cluster" over a short-lived TCP connection, within a
 * deadline. */
#ifndef LC_FETCH_H
#define LC_FETCH_H

#include <sys/types.h>

#include "lc_map.h"

enum lc_fetch {
    LC_FETCH_MAP,          /* *out is the server's cluster map */
    LC_FETCH_NO_CLUSTER,   /* the server has no cluster: *out makes it own every slot */
    LC_FETCH_FAILED        /* unreachable, timed out or a bad reply; err says which */
};

/* How a fetch's bytes move when not by the socket's own calls: open
 * takes over the connected socket fd to host (NULL when out of memory);
 * send and recv answer as send() and recv() do and, with -1 and EAGAIN,
 * set *want to the poll event to wait for (POLLIN or POLLOUT: TLS may
 * need to read before it writes); error says why the last call failed;
 * close ends it (the socket is closed by the fetch). */
struct lc_transport {
    void *(*open)(void *arg, int fd, const char *host);
    ssize_t (*send)(void *conn, const void *p, size_t n, short *want);
    ssize_t (*recv)(void *conn, void *p, size_t n, short *want);
    const char *(*error)(void *conn);
    void (*close)(void *conn);
    void *arg;
};

/* Connects to a, asks for the map and parses it, all within timeout_ms.
 * auth (NULL: none) is the whole ASCII authentication set ("set k 0 0
 * n\r\nuser pass\r\n") for a server that wants authentication (-Y): when
 * the request is answered CLIENT_ERROR unauthenticated, auth is sent, must
 * be answered STORED, and the request is sent again.  A server that does
 * not ask never sees the credentials.  *asked (if not NULL) says whether
 * the server asked. */
LC_HIDDEN enum lc_fetch lc_fetch_map(const struct lc_addr *a, int timeout_ms, const char *auth,
                                     const struct lc_transport *tr, struct lc_map **out,
                                     char *err, size_t errlen, bool *asked);

#endif
