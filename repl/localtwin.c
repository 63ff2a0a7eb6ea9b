/* localtwin.c - links between processes on one host go over Unix sockets.
 *
 * Why: a write costs a coding group a record to each parity process and an
 * acknowledgement back from each, and on one host every one of those is a
 * loopback TCP segment: the sender runs the receiver's whole TCP/IP input
 * path.  A Unix stream socket skips it.  Measured on the development VM
 * (docs/evaluation/cpu-per-op.md, "Links on one host over Unix sockets"):
 * a message costs about 17 instead of 21 CPU-us between two CPUs (5 instead
 * of 8 on one), and RS(3,5)'s server CPU per operation falls by about a
 * tenth where there are writes, PBR(2)'s by up to a fifth.
 *
 * How: a link listener bound to a loopback address A:P (or to 0.0.0.0:P)
 * binds an abstract Unix socket beside it, its twin, named
 * "@cocytus-link/A:P" ("@cocytus-link/ *:P" for the wildcard, no space).  A
 * connector about to dial a loopback address tries the twin first and
 * dials TCP when no twin answers.  Everything above the socket (the
 * handshake, frames, keepalives, leases) is the same on both.
 *
 * Why it reaches the same process the address would: abstract names, like
 * loopback addresses, belong to a network namespace, and only the process
 * that holds A:P binds A:P's twin (a port that cannot be bound is never
 * twinned).  But abstract names have no owner or permissions: another
 * local program could take a name first, and a link's handshake proves the
 * connector to the acceptor, not the other way round.  So a connector uses
 * a twin only when its listener runs under the connector's own user
 * (SO_PEERCRED); a process of that user could do anything to ours anyway.
 * Otherwise it dials TCP, whose port the real listener holds.  (So a
 * process that listened as root and then switched user is dialled over
 * TCP: SO_PEERCRED gives the user at listen().)
 *
 * What TCP gave that a twin does not: keepalives and TCP_USER_TIMEOUT,
 * which find a host that is gone.  Both ends of a twin are on one host: a
 * process that dies closes its end at once, and a stopped one is found as
 * on TCP, by the links' PINGs and the coordinator.  One difference link.c
 * handles: a write to a peer that has closed fails at once (EPIPE) where
 * TCP takes it, so a failed write reads what the peer sent first
 * (write_failed).
 *
 * No global mutable state. */
#include "config.h"

#include "localtwin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TWIN_PREFIX "cocytus-link/"

bool localtwin_enabled(void)
{
    const char *v = getenv(LOCALTWIN_ENV_TCP_ONLY);
    return v == NULL || v[0] == '\0' || strcmp(v, "0") == 0;
}

/* An abstract name: a leading NUL, then the text, no terminator counted. */
static bool make_name(struct sockaddr_un *un, socklen_t *len, const char *host, int port)
{
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    int n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, TWIN_PREFIX "%s:%d", host,
                     port);
    if (n <= 0 || (size_t)n >= sizeof(un->sun_path) - 1)
        return false;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return true;
}

static bool is_loopback4(const struct sockaddr *sa)
{
    if (sa->sa_family != AF_INET)
        return false;
    uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
    return (a >> 24) == 127;
}

static bool is_any4(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET &&
           ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
}

static bool specific_name(const struct sockaddr *sa, int port, struct sockaddr_un *un,
                          socklen_t *len)
{
    char host[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host, sizeof(host)) ==
        NULL)
        return false;
    return make_name(un, len, host, port);
}

bool localtwin_listen_name(const struct sockaddr *sa, int port, struct sockaddr_un *un,
                           socklen_t *len)
{
    if (port <= 0 || port > 65535)
        return false;
    if (is_any4(sa))
        return make_name(un, len, "*", port);
    if (is_loopback4(sa))
        return specific_name(sa, port, un, len);
    return false;
}

bool localtwin_peer_cred(int fd, struct ucred *cred)
{
    socklen_t len = sizeof(*cred);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len) == 0 && len == sizeof(*cred);
}

/* The twin's listener runs under our user (see the top of the file). */
bool localtwin_peer_is_me(int fd)
{
    struct ucred cred;
    return localtwin_peer_cred(fd, &cred) && cred.uid == geteuid();
}

/* One name: connected (and ours) or -1.  A Unix connect completes at once
 * or fails at once (EAGAIN: the listener's backlog is full; TCP, then). */
static int connect_name(const struct sockaddr_un *un, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)un, len) < 0 || !localtwin_peer_is_me(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

int localtwin_connect(const struct sockaddr *sa, int port)
{
    struct sockaddr_un un;
    socklen_t len;
    if (port <= 0 || port > 65535 || !is_loopback4(sa))
        return -1;
    if (specific_name(sa, port, &un, &len)) {
        int fd = connect_name(&un, len);
        if (fd >= 0)
            return fd;
    }
    if (!make_name(&un, &len, "*", port))
        return -1;
    return connect_name(&un, len);
}

void localtwin_peer_name(int fd, char *out, size_t outlen)
{
    struct ucred cred;
    if (localtwin_peer_cred(fd, &cred))
        snprintf(out, outlen, "local pid %ld", (long)cred.pid);
    else
        snprintf(out, outlen, "local");
}
