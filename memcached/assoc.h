/* assoc.h - the hash table that maps keys to items.
 *
 * Separate chaining through each item's h_next pointer, 2^power buckets,
 * bucket = hash & (2^power - 1).  When the table holds more than 1.5 items
 * per bucket it doubles, incrementally: a new table is allocated and old
 * buckets are moved a few at a time on each insert, lookup and background
 * step.  While that runs, old buckets below `migrate_next` are already empty
 * (their items live in the new table), so a key's home is the old bucket if
 * that bucket has not been moved yet, else the new one. */
#ifndef MC_ASSOC_H
#define MC_ASSOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct item;

struct assoc {
    struct item **buckets;   /* current (new, during expansion) table */
    unsigned power;
    struct item **old;       /* table being drained, NULL when not expanding */
    unsigned old_power;
    size_t migrate_next;     /* next old bucket to move */
    size_t count;            /* items in both tables */
    size_t grow_at;          /* start expanding when count exceeds this */
};

/* Called for each item by a scan; may delete that item (and nothing else). */
typedef void (*assoc_visit_fn)(void *ctx, struct item *it);

/* Returns 0, or -1 when the table cannot be allocated. */
int assoc_init(struct assoc *a, unsigned power);
void assoc_destroy(struct assoc *a);
/* Empties the table without visiting its items (the caller frees them):
 * the buckets are zeroed, the size is kept. */
void assoc_clear(struct assoc *a);

struct item *assoc_find(struct assoc *a, const char *key, size_t nkey, uint64_t hv);
/* The key must not already be present. */
void assoc_insert(struct assoc *a, struct item *it, uint64_t hv);
/* Removes this very item; false if it was not in the table. */
bool assoc_delete(struct assoc *a, struct item *it, uint64_t hv);

/* Moves up to nbuckets old buckets into the new table (no-op unless expanding). */
void assoc_migrate(struct assoc *a, size_t nbuckets);

/* Visits items from bucket *cursor on, until about `budget` units are spent
 * (one per bucket and one per item; a started chain is always finished) or
 * the last bucket is done, in which case *cursor goes back to 0.
 * Returns the units spent. */
size_t assoc_scan(struct assoc *a, size_t *cursor, size_t budget,
                  assoc_visit_fn visit, void *ctx);
/* A walk that survives the table growing between its steps (lru_crawler
 * metadump, a piece per event-loop pass): visits the items of the buckets
 * from *cursor on (0 starts a walk) until about `budget` units are spent
 * (one per bucket and one per item).  Every item that is in the table for
 * the whole walk is visited exactly once, whatever is inserted, deleted or
 * migrated between calls; an item inserted or deleted meanwhile may or may
 * not be.  Returns true when the walk is complete (*cursor is 0 again). */
bool assoc_walk(struct assoc *a, uint64_t *cursor, size_t budget, assoc_visit_fn visit,
                void *ctx);
/* Visits every item exactly once (no migration happens meanwhile). */
void assoc_iterate(struct assoc *a, assoc_visit_fn visit, void *ctx);

unsigned assoc_power(const struct assoc *a);
size_t assoc_bytes(const struct assoc *a);
bool assoc_expanding(const struct assoc *a);

#endif
