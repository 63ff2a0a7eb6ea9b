/* items.h - items, the LRU and memory accounting.
 *
 * An item is a single malloc block: a 48-byte header, the key, the value and
 * "\r\n".  Linked items are in the hash table and on one LRU list (most
 * recently stored or read at the head).  Memory is counted as the usable size
 * malloc actually gave us; when a new item would go over the limit, items are
 * evicted from the LRU tail.  Items that are handed out to readers carry a
 * reference count; an item removed from the table while referenced stays
 * allocated until its last reference is released.
 *
 * There is no per-item time stamp.  Flushing is done by cas: every store gets
 * a fresh number from an increasing counter, and a flush makes every item
 * whose cas is at most the counter's value at that moment dead.  The age of
 * the LRU tail (a statistic) is estimated from a short log of (cas counter,
 * time) marks taken once a second. */
#ifndef MC_ITEMS_H
#define MC_ITEMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "assoc.h"
#include "clock.h"
#include "engine.h"

#define ITEM_KEY_MAX 250

enum item_flag {
    ITEM_LINKED = 1,    /* in the hash table and on the LRU */
    ITEM_FETCHED = 2,   /* read at least once since stored */
    /* The meta commands' marks (ENG_MARK_*), also used by the coding
     * group's metadata entries (cocytus/meta.h), whose other bits are
     * 0x10 and 0x20. */
    ITEM_STALE = 4,
    ITEM_WON = 8,
    ITEM_BINKEY = 0x40
};

#define ITEM_MARK_BITS (ITEM_STALE | ITEM_WON | ITEM_BINKEY)

struct item {
    struct item *h_next;    /* hash chain */
    struct item *prev;      /* LRU, towards the head (newer) */
    struct item *next;      /* LRU, towards the tail (older) */
    uint64_t cas;
    rel_time_t exptime;     /* 0: never */
    uint32_t flags;         /* client flags */
    uint32_t nbytes;        /* value length, without the trailing "\r\n" */
    uint16_t refcount;      /* references held by readers and callers */
    uint8_t nkey;
    uint8_t iflags;         /* enum item_flag bits */
    char data[];            /* key, value, "\r\n" */
};

/* Counters that stats_reset clears. */
struct item_counters {
    uint64_t total_items;
    uint64_t evictions;
    uint64_t evicted_unfetched;
    uint64_t expired_unfetched;
    uint64_t reclaimed;
    uint64_t outofmemory;
    uint64_t get_expired;
    uint64_t get_flushed;
};

struct age_mark {
    uint64_t cas;           /* all cas values <= this were issued by `time` */
    rel_time_t time;
};

#define ITEM_AGE_MARKS 256

struct item_store {
    struct assoc table;
    struct item *lru_head;
    struct item *lru_tail;
    const struct mc_clock *clock;

    uint64_t cas_counter;   /* last cas handed out */
    /* flush_all, as memcached keeps it: one flush time (0: none) that
     * applies once reached, to items stored by then (their cas up to
     * live_cut, the last cas handed out while the clock was not past it)
     * and, with cas, to items older than oldest_cas.  A new flush time
     * replaces the old one, so a future one revives what the old one hid
     * until it is reached, as in memcached. */
    rel_time_t oldest_live;
    uint64_t oldest_cas;    /* 0: none */
    uint64_t live_cut;

    size_t mem_limit;
    size_t mem_used;        /* malloc_usable_size of every live allocation */
    size_t item_size_max;
    bool evict;
    bool cas_enabled;       /* -C: memcached's item size limit is 8 bytes larger */

    uint64_t curr_items;
    uint64_t bytes;         /* sum of item_total() of linked items */
    struct item_counters stats;

    size_t sweep_cursor;
    size_t sweep_budget;    /* buckets + items examined per tick */

    struct age_mark marks[ITEM_AGE_MARKS];
    unsigned nmarks;

    /* engine_config.evicted, told of each eviction (NULL: nobody). */
    void (*evicted)(void *arg, const struct eng_value *v);
    void *evicted_arg;
};

static inline const char *item_key(const struct item *it)
{
    return it->data;
}

static inline char *item_value(struct item *it)
{
    return it->data + it->nkey;
}

/* Size the item was allocated with: header, key, value and "\r\n". */
static inline size_t item_total(const struct item *it)
{
    return sizeof(struct item) + it->nkey + (size_t)it->nbytes + 2;
}

/* The item's marks as ENG_MARK_* bits, and setting them. */
static inline uint8_t item_marks(const struct item *it)
{
    return (uint8_t)(((it->iflags & ITEM_STALE) ? ENG_MARK_STALE : 0) |
                     ((it->iflags & ITEM_WON) ? ENG_MARK_WON : 0) |
                     ((it->iflags & ITEM_BINKEY) ? ENG_MARK_BINKEY : 0));
}

static inline void item_set_marks(struct item *it, uint8_t marks)
{
    if (marks & ENG_MARK_FETCHED)
        it->iflags |= ITEM_FETCHED;
    it->iflags = (uint8_t)((it->iflags & ~ITEM_MARK_BITS) |
                           ((marks & ENG_MARK_STALE) ? ITEM_STALE : 0) |
                           ((marks & ENG_MARK_WON) ? ITEM_WON : 0) |
                           ((marks & ENG_MARK_BINKEY) ? ITEM_BINKEY : 0));
}

/* ENG_OP_MARK's change: set, then clear. */
static inline void item_change_marks(struct item *it, uint8_t set, uint8_t clear)
{
    item_set_marks(it, (uint8_t)((item_marks(it) | set) & ~clear));
}

static inline bool item_is_linked(const struct item *it)
{
    return (it->iflags & ITEM_LINKED) != 0;
}

/* Returns 0, or -1 when the hash table cannot be allocated. */
int item_store_init(struct item_store *s, const struct engine_config *cfg,
                    const struct mc_clock *clock);
/* Frees every item, referenced or not. */
void item_store_destroy(struct item_store *s);

/* Hidden by a flush_all (see struct item_store). */
static inline bool item_flushed(const struct item_store *s, const struct item *it)
{
    if (s->oldest_live == 0 || s->oldest_live > s->clock->now)
        return false;
    return it->cas <= s->live_cut || (s->oldest_cas != 0 && it->cas < s->oldest_cas);
}

/* Expired by time or killed by a flush. */
static inline bool item_is_dead(const struct item_store *s, const struct item *it)
{
    return item_flushed(s, it) || clock_expired(s->clock, it->exptime);
}

/* A new unlinked item with refcount 0, its "\r\n" already in place and the
 * value left for the caller to fill.  NULL with *st = ENG_TOO_LARGE or
 * ENG_NO_MEMORY.  May evict items (never referenced ones). */
struct item *item_alloc(struct item_store *s, const char *key, size_t nkey,
                        uint32_t flags, rel_time_t exptime, size_t nbytes,
                        eng_status *st);
/* Frees an item from item_alloc that was never linked. */
void item_discard(struct item_store *s, struct item *it);

/* Why item_lookup found nothing. */
enum item_miss {
    ITEM_MISS_ABSENT,
    ITEM_MISS_EXPIRED,
    ITEM_MISS_FLUSHED
};

/* The live item with this key, or NULL.  A dead item found on the way is
 * unlinked (lazy expiry).  No reference is taken and the LRU is untouched. */
struct item *item_lookup(struct item_store *s, const char *key, size_t nkey,
                         uint64_t hv, enum item_miss *why);

/* Gives `it` a fresh cas, puts it in the table and at the LRU head. */
void item_link(struct item_store *s, struct item *it, uint64_t hv);
/* A restored item (restart.h): links `it` with the cas it had, at the LRU
 * tail (items come most recently used first), and keeps the cas counter
 * above it. */
void item_link_restored(struct item_store *s, struct item *it, uint64_t hv, uint64_t cas);
/* Removes a linked item; frees it unless referenced. */
void item_unlink(struct item_store *s, struct item *it, uint64_t hv);
/* Unlinks old_it and links new_it (same key) in its place. */
void item_replace(struct item_store *s, struct item *old_it, struct item *new_it,
                  uint64_t hv);

/* Moves a linked item to the LRU head. */
void item_bump(struct item_store *s, struct item *it);
/* A fresh cas number (for in-place updates). */
uint64_t item_next_cas(struct item_store *s);

/* References.  item_ref returns false when the count is saturated. */
bool item_ref(struct item *it);
void item_release(struct item_store *s, struct item *it);

/* flush_all as memcached 1.6 sets it: new_oldest is the relative second
 * its realtime() gives the request (the current second without a delay);
 * by_cas as with cas enabled (memcached's flush time is then a second
 * earlier and existing items are judged by their cas). */
void item_flush_at(struct item_store *s, rel_time_t new_oldest, bool by_cas);

/* Once-a-second background work: hash table migration, a slice of the
 * expiry sweep and an age mark.  Returns the number of items swept. */
size_t item_store_tick(struct item_store *s);
/* Runs the sweep over at most `budget` buckets + items. */
size_t item_sweep(struct item_store *s, size_t budget);

/* Seconds since the LRU tail item was stored (0 when empty). */
rel_time_t item_tail_age(const struct item_store *s);
/* Seconds since the item was last written (stored, or given a new cas):
 * estimated from the age marks, as items carry no time stamp. */
rel_time_t item_write_age(const struct item_store *s, const struct item *it);

/* Calls fn for every live item, most recently used first, until it
 * returns false (stats cachedump, lru_crawler metadump): key, value,
 * flags, cas (0 unless cas_enabled), absolute exptime, fetched and the
 * seconds since it was written. */
void item_store_visit_recent(struct item_store *s, bool cas_enabled,
                             bool (*fn)(void *ctx, const struct eng_value *v), void *ctx);
/* The same for the items of the next buckets of a walk (assoc_walk), in
 * hash order: ENG_WALK_DONE when the walk is complete, else MORE. */
enum eng_walk item_store_walk(struct item_store *s, bool cas_enabled, struct eng_cursor *cursor,
                              size_t budget, void (*fn)(void *ctx, const struct eng_value *v),
                              void *ctx);

/* Calls fn for the key of every live item whose slot is `slot` (slot
 * migration: the keys to move) in the next buckets of a walk (assoc_walk),
 * in hash order: ENG_WALK_DONE when the walk is complete, else MORE. */
enum eng_walk items_slot_keys(struct item_store *s, unsigned slot, struct eng_cursor *cursor,
                              size_t budget,
                              void (*fn)(void *ctx, const char *key, size_t nkey), void *ctx);

#endif
