/* snapshot.h - a primary's copy of its committed items to a joining
 * backup, in chunks on the replication link (snapshot.c explains why the
 * copy and the record stream converge). */
#ifndef PBR_SNAPSHOT_H
#define PBR_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "items.h"
#include "sender.h"

struct snapshot_source {
    struct item_store *store;
    const struct mc_clock *clock;
    struct sender *tx;
    /* Does this item's key have a record in flight? */
    bool (*busy)(void *ctx, const struct item *it);
    /* The last chunk and the end frame are queued: the member is complete. */
    void (*complete)(void *ctx, int member);
    void *ctx;
    const char *who;                 /* log prefix */
};

struct event_base;
struct snapshot;

/* Send the begin frame to member (a joining peer of src->tx whose link is
 * up) at the sender's current xid and start streaming.  NULL when out of
 * memory or the link is down. */
struct snapshot *snapshot_start(const struct snapshot_source *src, struct event_base *base,
                                int member);
void snapshot_free(struct snapshot *sn);
void snapshot_progress(const struct snapshot *sn, uint64_t *done, uint64_t *total,
                       uint64_t *bytes);
bool snapshot_finished(const struct snapshot *sn);

#endif
