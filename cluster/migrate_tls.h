/* migrate_tls.h - a slot move's import connection over TLS (client_tls or
 * -Z in a cluster): libevent's OpenSSL bufferevent, so that migrate.c
 * reads and writes it as it does a plain one. */
#ifndef CLUSTER_MIGRATE_TLS_H
#define CLUSTER_MIGRATE_TLS_H

#include <stddef.h>

struct bufferevent;
struct event_base;
struct tls_dialer;

/* A bufferevent in TLS connect state to host (whose certificate must name
 * it), not yet connected (bufferevent_socket_connect next), closing its
 * socket when freed.  NULL when out of memory or built without TLS. */
struct bufferevent *migrate_tls_dial(struct tls_dialer *d, struct event_base *base,
                                     const char *host, int options);
/* After a BEV_EVENT_ERROR: what TLS said (a refused certificate names its
 * reason), or "" when it said nothing. */
void migrate_tls_error(struct bufferevent *bev, char *out, size_t outlen);

#endif
