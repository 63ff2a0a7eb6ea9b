/* slotmap.h - the slot map: key -> slot hash, slot -> serving endpoint.
 *
 * Keys hash to SLOTMAP_SLOTS slots with Bob Jenkins' one-at-a-time hash
 * (libhashkit's default, so libmemcached's virtual buckets agree).  A map
 * has an epoch, the serving endpoints (host, port, group, role) and, for
 * every slot, the index of its endpoint.  The initial map of a cluster
 * spreads the slots over its serving processes (data processes of coding
 * groups, primaries, plain processes) by consistent hashing with virtual
 * points, so adding a group moves about 1/groups of the slots.
 *
 * The text form is the body of the `config get cluster` reply; see
 * docs/routing.md for the exact format. */
#ifndef REPL_SLOTMAP_H
#define REPL_SLOTMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster.h"

#define SLOTMAP_SLOTS 16384u
#define SLOTMAP_VNODES 160          /* virtual points per serving process */
#define SLOTMAP_MAX_ENDPOINTS 65535 /* endpoint indexes are 16 bits */
#define SLOTMAP_HOST_MAX CLUSTER_HOST_MAX
/* Longest "<slot> <epoch> <host>:<port>" text, with its NUL. */
#define SLOTMAP_MOVED_MAX (6 + 21 + SLOTMAP_HOST_MAX + 7)

/* A serving process.  Maps decoded from text know host and port only:
 * group and index are then -1 and role is ROLE_PLAIN. */
struct slotmap_endpoint {
    char host[SLOTMAP_HOST_MAX];
    int port;
    int group;
    enum cluster_role role;
    int index;                      /* within its role in the group */
};

struct slotmap {
    uint64_t epoch;
    int nendpoints;
    struct slotmap_endpoint *endpoints;
    uint16_t slot[SLOTMAP_SLOTS];   /* slot -> endpoint index */
};

/* One-at-a-time hash of the key, bit for bit libhashkit's
 * hashkit_one_at_a_time() on a platform with signed char (x86). */
uint32_t slotmap_hash(const char *key, size_t nkey);

/* The key's slot: slotmap_hash(key) & (SLOTMAP_SLOTS - 1). */
static inline unsigned slotmap_slot(const char *key, size_t nkey)
{
    return slotmap_hash(key, nkey) & (SLOTMAP_SLOTS - 1);
}

/* Fill *m (contents overwritten) with the initial map of cluster c at the
 * given epoch.  0, or -1 with a message in err. */
int slotmap_build(struct slotmap *m, const struct cluster *c, uint64_t epoch,
                  char *err, size_t errlen);

/* Give every slot of *m to an endpoint by consistent hashing over
 * m->endpoints (group and index name each endpoint's points; endpoints
 * of unknown group are named by host:port). */
void slotmap_place(struct slotmap *m);

/* Release what *m holds (not m itself). */
void slotmap_free(struct slotmap *m);

/* The endpoint serving slot (slot < SLOTMAP_SLOTS). */
const struct slotmap_endpoint *slotmap_owner(const struct slotmap *m, unsigned slot);

/* Index of the endpoint with this host and port, or -1. */
int slotmap_find(const struct slotmap *m, const char *host, int port);

/* Same process in two maps: same group and index when both are known,
 * else same host and port. */
bool slotmap_endpoint_same(const struct slotmap_endpoint *a, const struct slotmap_endpoint *b);

/* How many slots have a different serving process in a than in b. */
unsigned slotmap_moved(const struct slotmap *a, const struct slotmap *b);

/* "<slot> <epoch> <host>:<port>" for slot into buf (SLOTMAP_MOVED_MAX
 * bytes are enough).  Returns the length. */
size_t slotmap_moved_text(const struct slotmap *m, unsigned slot, char *buf, size_t buflen);

/* The `config get cluster` body (three '\n'-terminated lines: epoch,
 * endpoints, slot ranges), malloc'd and NUL-terminated; *len is its length
 * without the NUL.  NULL when out of memory. */
char *slotmap_encode(const struct slotmap *m, size_t *len);

/* Parse a body made by slotmap_encode into *m (contents overwritten).
 * 0, or -1 with a message in err (*m is then empty). */
int slotmap_decode(struct slotmap *m, const char *body, size_t len, char *err, size_t errlen);

/* The whole reply: "CONFIG cluster 0 <bytes>\r\n" <body> "\r\nEND\r\n",
 * malloc'd and NUL-terminated, *len without the NUL. */
char *slotmap_config_reply(const struct slotmap *m, size_t *len);

/* Parse a whole reply.  *used is set to the bytes it takes (when it is
 * complete).  Returns 0 on success, 1 when more bytes are needed, -1 (with
 * err) when it is not a valid reply. */
int slotmap_parse_config_reply(struct slotmap *m, const char *text, size_t len, size_t *used,
                               char *err, size_t errlen);

#endif
