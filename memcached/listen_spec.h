/* listen_spec.h - one entry of -l, read as memcached reads it.
 *
 * memcached's -l takes a comma-separated list; each entry names an
 * address and may name its own port and say that it is not TLS:
 *   host | host:port | [v6addr] | [v6addr]:port | v6addr (two colons or
 *   more: no port), each optionally after "notls:".
 * An entry without a port listens on -p's. */
#ifndef MC_LISTEN_SPEC_H
#define MC_LISTEN_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#define LISTEN_HOST_MAX 256

struct listen_spec {
    char host[LISTEN_HOST_MAX];   /* "" for every interface */
    int port;                     /* 0-65535, or -1: -p's */
    bool notls;                   /* "notls:": clients in the clear under -Z */
};

/* 0, or -1 with a reason in err (an unusable port, an unclosed '[', a
 * host too long). */
int listen_spec_parse(const char *entry, struct listen_spec *out, char *err, size_t errlen);

#endif
