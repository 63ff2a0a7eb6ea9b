/* pending.h - a primary's records in flight: one entry per record sent and
 * not yet committed, in xid order, plus an index by key so a mutation can
 * see that its key already has a record in flight (one record per key in
 * flight, docs/coding-group.md) and wait.
 *
 * An entry says what committing its record means on the primary's own
 * store: link a new item (PUT), unlink a key (DEL), change an exptime
 * (TOUCH), give an item a new cas, exptime and meta marks (MARK: md I),
 * drop everything (FLUSH) or nothing (a record carrying only evictions,
 * which the primary applied when it made them). */
#ifndef PBR_PENDING_H
#define PBR_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "items.h"

enum pending_kind {
    PENDING_NONE = 0,
    PENDING_PUT,
    PENDING_DEL,
    PENDING_TOUCH,
    PENDING_MARK,
    PENDING_FLUSH
};

struct pending {
    struct pending *next;        /* FIFO, oldest first */
    struct pending *h_next;      /* index chain */
    uint64_t xid;
    uint64_t hv;                 /* hash_key of the key */
    enum pending_kind kind;
    struct item *it;             /* PUT: the new item, allocated, not linked */
    uint64_t cas;                /* PUT, MARK: the cas the record carries */
    rel_time_t exptime;          /* TOUCH, MARK: the new exptime */
    uint8_t marks;               /* MARK: the item's marks (ENG_MARK_*) */
    uint8_t nkey;                /* 0: no key (NONE, FLUSH), not indexed */
    char key[ITEM_KEY_MAX];
};

struct pending_list {
    struct pending *head, *tail;
    struct pending **buckets;
    size_t nbuckets;             /* a power of two */
    size_t count;
};

/* 0, or -1 when out of memory. */
int pending_init(struct pending_list *l);
/* Frees every entry; PUT items are discarded from s. */
void pending_destroy(struct pending_list *l, struct item_store *s);

/* A new entry at the tail (indexed when nkey > 0), other fields zero;
 * NULL when out of memory. */
struct pending *pending_push(struct pending_list *l, uint64_t xid, enum pending_kind kind,
                             const char *key, size_t nkey, uint64_t hv);
/* The entry in flight for this key, or NULL. */
struct pending *pending_find(const struct pending_list *l, const char *key, size_t nkey,
                             uint64_t hv);
/* Removes the oldest entry and returns it (the caller frees it); NULL when
 * empty. */
struct pending *pending_pop(struct pending_list *l);

/* Heap bytes of the index and the entries. */
size_t pending_bytes(const struct pending_list *l);

#endif
