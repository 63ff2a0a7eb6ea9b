/* listen_bind.c - a -l list to listening sockets (listen_bind.h).
 *
 * Each entry is resolved with getaddrinfo (AI_PASSIVE, so no host means
 * every interface) and every address it gives is bound.  IPv6 sockets are
 * IPv6-only, so "::" and "0.0.0.0" on one port do not collide.  A host
 * without IPv6 still serves IPv4 when no host was named. */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "listen_bind.h"
#include "listen_spec.h"
#include "netaddr.h"

bool listen_list_add(const char **list, const char *arg)
{
    if (*list == NULL) {
        *list = arg;
        return true;
    }
    size_t n = strlen(arg), have = strlen(*list);
    for (const char *p = *list; p != NULL; p = strchr(p, ',')) {
        if (*p == ',')
            p++;
        if (strncmp(p, arg, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    }
    char *joined = malloc(have + n + 2);
    if (joined == NULL)
        return false;
    snprintf(joined, have + n + 2, "%s,%s", *list, arg);
    *list = joined;
    return true;
}

static int listen_one(const struct addrinfo *ai, int backlog)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* Every address of one entry (spec) onto b.  *any_port: the port entries
 * without their own use (-p's, or once -p 0 got one, that one). */
static int bind_entry(const struct listen_spec *spec, int *any_port, bool *portless,
                      int backlog, struct listen_bound *b, char *err, size_t errlen)
{
    const char *host = spec->host[0] ? spec->host : NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", spec->port >= 0 ? spec->port : *any_port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve listen address %s: %s", host ? host : "*",
                 gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (b->n == LISTEN_BIND_MAX) {
            snprintf(err, errlen, "-l names more than %d sockets to listen on", LISTEN_BIND_MAX);
            freeaddrinfo(res);
            return -1;
        }
        int fd = listen_one(ai, backlog);
        if (fd < 0) {
            if (host == NULL && ai->ai_family == AF_INET6)
                continue;
            snprintf(err, errlen, "failed to listen on %s port %s: %s",
                     host ? host : "*", port, strerror(errno));
            freeaddrinfo(res);
            return -1;
        }
        int got = netaddr_local_port(fd);
        if (spec->port < 0) {
            if (*any_port == 0)
                *any_port = got;
            b->port = *any_port;
            *portless = true;
        } else if (!*portless && b->port <= 0) {
            b->port = got;
        }
        b->fd[b->n] = fd;
        b->notls[b->n] = spec->notls;
        b->n++;
    }
    freeaddrinfo(res);
    return 0;
}

int listen_bind(const char *list, int port, int backlog, const char *tls_option, bool tls_on,
                struct listen_bound *out, char *err, size_t errlen)
{
    char entries[1024];
    memset(out, 0, sizeof(*out));
    if (list && strlen(list) >= sizeof(entries)) {
        snprintf(err, errlen, "-l is too long");
        return -1;
    }
    snprintf(entries, sizeof(entries), "%s", list ? list : "");
    char *save = NULL;
    char *entry = list ? strtok_r(entries, ",", &save) : NULL;
    int any_port = port;
    bool portless = false;
    do {
        struct listen_spec spec = { .host = "", .port = -1 };
        char why[1100];
        if (entry && listen_spec_parse(entry, &spec, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "-l %s: %s", entry, why);
            goto fail;
        }
        if (spec.notls && !tls_on) {
            snprintf(err, errlen, "-l %s: 'notls' is valid only with %s (TLS)", entry, tls_option);
            goto fail;
        }
        if (bind_entry(&spec, &any_port, &portless, backlog, out, err, errlen) < 0)
            goto fail;
        entry = list ? strtok_r(NULL, ",", &save) : NULL;
    } while (entry);
    if (out->n == 0) {
        snprintf(err, errlen, "no address to listen on");
        goto fail;
    }
    return 0;
fail:
    listen_bind_close(out);
    return -1;
}

void listen_bind_close(struct listen_bound *b)
{
    for (int i = 0; i < b->n; i++)
        close(b->fd[i]);
    b->n = 0;
}
