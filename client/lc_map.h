/* lc_map.h - libcocytus internals: the key -> slot hash, server addresses,
 * the slot map and the parsing of "config get cluster" and MOVED replies.
 * Everything here is pure (no I/O) so the tests can drive it directly. */
#ifndef LC_MAP_H
#define LC_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "libcocytus.h"

#define LC_HOST_MAX 256          /* host names up to 255 bytes */
#define LC_ADDR_TEXT_MAX (LC_HOST_MAX + 16)
#define LC_DEFAULT_PORT 11211
#define LC_MAX_ENDPOINTS 4096    /* endpoints accepted in one map */

#define LC_HIDDEN __attribute__((visibility("hidden")))

/* A server to connect to. */
struct lc_addr {
    char host[LC_HOST_MAX];
    int port;
};

/* The slot map: which endpoint serves each slot. */
struct lc_map {
    uint64_t epoch;
    size_t n;                      /* endpoints */
    struct lc_addr *ep;
    uint16_t owner[COCYTUS_SLOTS]; /* endpoint index per slot */
};

/* A decoded "MOVED <slot> <epoch> <host>:<port>". */
struct lc_moved {
    unsigned slot;
    uint64_t epoch;
    struct lc_addr to;
};

/* Outcome of parsing a "config get cluster" reply. */
enum lc_config {
    LC_CONFIG_MAP,          /* a cluster map */
    LC_CONFIG_NO_CLUSTER,   /* the server answered ERROR: it has no cluster */
    LC_CONFIG_BAD           /* anything else */
};

/* Bob Jenkins' one-at-a-time hash, byte for byte as libhashkit computes it
 * (a byte >= 0x80 is sign-extended, as libhashkit does where char is signed). */
LC_HIDDEN uint32_t lc_one_at_a_time(const char *key, size_t nkey);
LC_HIDDEN unsigned lc_key_slot(const char *key, size_t nkey);

/* "host:port", "host" (default port) or "[v6addr]:port".  False if malformed. */
LC_HIDDEN bool lc_addr_parse(const char *s, size_t n, struct lc_addr *out);
LC_HIDDEN void lc_addr_format(const struct lc_addr *a, char *buf, size_t cap);
LC_HIDDEN bool lc_addr_equal(const struct lc_addr *a, const struct lc_addr *b);

/* Splits a comma-separated seed list.  Returns the number of seeds stored in
 * a malloc'ed array at *out, or 0 (with a message) if the list is empty or
 * malformed. */
LC_HIDDEN size_t lc_seeds_parse(const char *seeds, struct lc_addr **out, char *err, size_t errlen);

/* A map of epoch 0 in which one server owns every slot. */
LC_HIDDEN struct lc_map *lc_map_single(const struct lc_addr *a);
LC_HIDDEN void lc_map_free(struct lc_map *m);

/* Length of the complete reply at the front of buf (the "ERROR" line, an
 * error line, or CONFIG ... END), 0 if more bytes are needed. */
LC_HIDDEN size_t lc_config_reply_length(const char *buf, size_t len);

/* Parses a complete reply to "config get cluster".  For LC_CONFIG_MAP *out
 * receives the map; for LC_CONFIG_BAD err says why. */
LC_HIDDEN enum lc_config lc_config_parse(const char *buf, size_t len, struct lc_map **out,
                                         char *err, size_t errlen);

/* What a fetched map is to the cached one (cur, NULL before the first). */
enum lc_judged {
    LC_MAP_REFUSED,     /* older than the cached map or than min_epoch */
    LC_MAP_SAME,        /* the cached epoch */
    LC_MAP_NEWER        /* newer than the cached map (or the first map) */
};

/* Judges map m fetched from a server; no_cluster: the server has no
 * cluster (m makes it own every slot).  A map older than cur is never
 * taken: libcocytus and cocytus-proxy install only what this accepts. */
LC_HIDDEN enum lc_judged lc_map_judge(const struct lc_map *cur, const struct lc_map *m,
                                      bool no_cluster, uint64_t min_epoch);

/* The servers a map refresh asks, in order, without repeats: prefer (may be
 * NULL), the seeds, cur's endpoints (cur may be NULL); avoid (may be NULL)
 * is moved to the end, asked only if no other server answered.  Returns
 * how many were written to out (at most cap). */
LC_HIDDEN size_t lc_refresh_sources(const struct lc_addr *prefer, const struct lc_addr *avoid,
                                    const struct lc_addr *seeds, size_t nseeds,
                                    const struct lc_map *cur, struct lc_addr *out, size_t cap);

/* A copy of m (NULL if out of memory). */
LC_HIDDEN struct lc_map *lc_map_dup(const struct lc_map *m);

/* Parses a complete config reply from server a into a map: for
 * LC_CONFIG_NO_CLUSTER *out makes a own every slot. */
LC_HIDDEN enum lc_config lc_config_to_map(const char *buf, size_t len,
                                          const struct lc_addr *a, struct lc_map **out,
                                          char *err, size_t errlen);

/* Finds "MOVED <slot> <epoch> <host>:<port>" anywhere in text. */
LC_HIDDEN bool lc_moved_parse(const char *text, struct lc_moved *out);

#endif
