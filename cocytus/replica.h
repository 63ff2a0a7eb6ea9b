/* replica.h - a replacement data process taking its data back from the
 * recovery process that served it (paper 4.2, data process recovery).
 *
 * The restarted data process listens on its link port; the recovery
 * process joins it to the served stream and sends it the state with the
 * rebuild messages (rebuild.h).  The replica keeps the metadata table, the
 * used pieces of the allocator and the region exactly as the recovery
 * process has them: ops are replayed like on a parity process, deltas are XORed as they are
 * (coefficient 1) into the units that arrived, and units are copied.  When
 * everything arrived, the owner is told; at the handoff the coordinator
 * names the last xid, the replica applies up to it, and the data engine
 * takes the table, an allocator built from the pieces, and the region and
 * continues the stream. */
#ifndef COCYTUS_REPLICA_H
#define COCYTUS_REPLICA_H

#include <stdbool.h>
#include <stdint.h>

#include "meta.h"

struct event_base;
struct cluster;
struct pieceset;
struct replica;

struct replica_hooks {
    void *ctx;
    void (*complete)(void *ctx);            /* every unit arrived */
    void (*log)(void *ctx, const char *line);
    void (*spoiled)(void *ctx);             /* optional: replica_spoiled became true */
};

/* Listen on data process dp's link port for parity process `from` (the
 * recovery process).  The region (region_size bytes, zero) is written in
 * place.  NULL after a log line. */
struct replica *replica_new(struct event_base *base, const struct cluster *c, int group, int dp,
                            int from, uint8_t *region, uint64_t region_size, unsigned hashpower,
                            const struct replica_hooks *hooks);
void replica_free(struct replica *r);
bool replica_complete(const struct replica *r);
/* The copy lost a metadata message (out of memory applying it) and cannot
 * be handed off: the owner makes a new replica when asked again. */
bool replica_spoiled(const struct replica *r);
/* Test fault: refuse the next metadata message as if out of memory. */
void replica_test_refuse_meta(struct replica *r);
int replica_from(const struct replica *r);
/* Units arrived of the total, and the bytes of units and metadata taken
 * (the heartbeat's `mig`: either moving is progress). */
void replica_progress(const struct replica *r, uint64_t *done, uint64_t *total, uint64_t *bytes);
/* Apply every record up to xid.  0, or -1 (not all received, or diverged). */
int replica_settle(struct replica *r, uint64_t xid);
/* Move the table and the used pieces out (the caller builds its
 * allocator from them, pieceset.h; the replica keeps an empty table and no
 * pieces, and is only freed after this).  *max_cas: the largest cas it
 * saw; *end: furthest byte written.  0, or -1 with nothing moved when out
 * of memory. */
int replica_take(struct replica *r, struct meta_table *meta, struct pieceset **pieces,
                 uint64_t *max_cas, uint64_t *end);

#endif
