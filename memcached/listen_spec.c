/* listen_spec.c - one entry of -l (listen_spec.h).
 *
 * The rule for colons is memcached's: brackets delimit an IPv6 address
 * that has a port after them; otherwise one colon separates a host from
 * its port, and two or more make the whole entry an IPv6 address, whose
 * port is -p's. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "listen_spec.h"

#define NOTLS_PREFIX "notls:"

static int set_host(struct listen_spec *out, const char *host, size_t len, char *err,
                    size_t errlen)
{
    if (len >= sizeof(out->host)) {
        snprintf(err, errlen, "listen address too long");
        return -1;
    }
    memcpy(out->host, host, len);
    out->host[len] = '\0';
    return 0;
}

/* A decimal port, 0-65535, nothing else. */
static int set_port(struct listen_spec *out, const char *port, char *err, size_t errlen)
{
    char *end;
    long v = strtol(port, &end, 10);
    if (*port < '0' || *port > '9' || *end != '\0' || v > 65535) {
        snprintf(err, errlen, "invalid port number \"%s\"", port);
        return -1;
    }
    out->port = (int)v;
    return 0;
}

int listen_spec_parse(const char *entry, struct listen_spec *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->port = -1;
    if (strncmp(entry, NOTLS_PREFIX, strlen(NOTLS_PREFIX)) == 0) {
        out->notls = true;
        entry += strlen(NOTLS_PREFIX);
    }
    if (entry[0] == '[') {
        const char *close = strchr(entry, ']');
        if (close == NULL) {
            snprintf(err, errlen, "no ']' after the IPv6 address in \"%s\"", entry);
            return -1;
        }
        if (set_host(out, entry + 1, (size_t)(close - entry - 1), err, errlen) < 0)
            return -1;
        if (close[1] == '\0')
            return 0;
        if (close[1] != ':') {
            snprintf(err, errlen, "unexpected \"%s\" after the IPv6 address", close + 1);
            return -1;
        }
        return set_port(out, close + 2, err, errlen);
    }
    const char *colon = strchr(entry, ':');
    if (colon == NULL || strchr(colon + 1, ':') != NULL)
        return set_host(out, entry, strlen(entry), err, errlen);
    if (set_host(out, entry, (size_t)(colon - entry), err, errlen) < 0)
        return -1;
    return set_port(out, colon + 1, err, errlen);
}
