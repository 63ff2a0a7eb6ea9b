/* listen_bind.h - every TCP socket a -l list names, bound and listening.
 *
 * memcached's -l is a list: entries separated by commas, -l given again
 * adds to it, each entry read as listen_spec.h says.  A host name may
 * stand for several addresses, and no -l at all means every interface
 * (IPv4 and, where the host has it, IPv6), so one list becomes any number
 * of sockets.  The server and cocytus-proxy both listen this way; each
 * then watches the sockets with its own loop. */
#ifndef MC_LISTEN_BIND_H
#define MC_LISTEN_BIND_H

#include <stdbool.h>
#include <stddef.h>

#define LISTEN_BIND_MAX 32

struct listen_bound {
    int fd[LISTEN_BIND_MAX];
    bool notls[LISTEN_BIND_MAX];  /* its entry said "notls:" */
    int n;
    int port;   /* what stats settings calls tcpport: -p's as bound, or
                 * with only entries that name their ports, the first */
};

/* *list plus arg, comma separated, as a repeated -l adds to memcached's
 * list; an entry already listed is not added twice.  *list is either
 * argv's or malloc'd here, and lives as long as the process.  false when
 * out of memory. */
bool listen_list_add(const char **list, const char *arg);

/* Binds and listens on every address list names (NULL: every interface)
 * with backlog.  port is -p's, for entries without their own; with 0 the
 * first such entry gets any free port and the rest share it.  tls_option
 * names the caller's TLS option ("-Z") and tls_on says whether it was
 * given: "notls:" entries are refused without it.  0, or -1 with the
 * reason in err and nothing left open. */
int listen_bind(const char *list, int port, int backlog, const char *tls_option, bool tls_on,
                struct listen_bound *out, char *err, size_t errlen);

/* Closes every socket of b. */
void listen_bind_close(struct listen_bound *b);

#endif
