/* assoc.c - chained hash table with incremental doubling (see assoc.h).
 *
 * Growth never stops the world: assoc_insert allocates the doubled table
 * once the load passes 1.5, and from then on every insert, lookup and
 * background step moves a few old buckets (each item rehashed from its key)
 * until the old table is empty and freed.  Lookups go to whichever table
 * currently owns the key's bucket. */
#include "assoc.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "items.h"

#define ASSOC_MIN_POWER 4
#define ASSOC_MAX_POWER 32
#define MIGRATE_ON_INSERT 2
#define MIGRATE_ON_FIND 1

static size_t table_size(unsigned power)
{
    return (size_t)1 << power;
}

static size_t table_mask(unsigned power)
{
    return table_size(power) - 1;
}

/* Grow once count exceeds 1.5 items per bucket. */
static size_t grow_threshold(unsigned power)
{
    size_t n = table_size(power);
    return n + n / 2;
}

int assoc_init(struct assoc *a, unsigned power)
{
    if (power < ASSOC_MIN_POWER)
        power = ASSOC_MIN_POWER;
    if (power > ASSOC_MAX_POWER)
        power = ASSOC_MAX_POWER;
    memset(a, 0, sizeof(*a));
    a->buckets = calloc(table_size(power), sizeof(struct item *));
    if (a->buckets == NULL)
        return -1;
    a->power = power;
    a->grow_at = grow_threshold(power);
    return 0;
}

void assoc_clear(struct assoc *a)
{
    free(a->old);
    a->old = NULL;
    a->old_power = 0;
    a->migrate_next = 0;
    if (a->buckets != NULL)
        memset(a->buckets, 0, table_size(a->power) * sizeof(struct item *));
    a->count = 0;
}

void assoc_destroy(struct assoc *a)
{
    free(a->buckets);
    free(a->old);
    memset(a, 0, sizeof(*a));
}

/* The chain head that owns hash value hv right now. */
static struct item **home_bucket(struct assoc *a, uint64_t hv)
{
    if (a->old != NULL) {
        size_t ob = hv & table_mask(a->old_power);
        if (ob >= a->migrate_next)
            return &a->old[ob];
    }
    return &a->buckets[hv & table_mask(a->power)];
}

static void finish_expansion(struct assoc *a)
{
    free(a->old);
    a->old = NULL;
    a->old_power = 0;
    a->migrate_next = 0;
}

static void move_bucket(struct assoc *a, size_t ob)
{
    struct item *it = a->old[ob];
    size_t mask = table_mask(a->power);

    while (it != NULL) {
        struct item *next = it->h_next;
        size_t nb = hash_key(item_key(it), it->nkey) & mask;
        it->h_next = a->buckets[nb];
        a->buckets[nb] = it;
        it = next;
    }
    a->old[ob] = NULL;
}

void assoc_migrate(struct assoc *a, size_t nbuckets)
{
    if (a->old == NULL)
        return;
    size_t old_n = table_size(a->old_power);
    while (nbuckets > 0 && a->migrate_next < old_n) {
        move_bucket(a, a->migrate_next);
        a->migrate_next++;
        nbuckets--;
    }
    if (a->migrate_next >= old_n)
        finish_expansion(a);
}

static void start_expansion(struct assoc *a)
{
    if (a->power >= ASSOC_MAX_POWER)
        return;
    struct item **bigger = calloc(table_size(a->power + 1), sizeof(struct item *));
    if (bigger == NULL) {
        /* Try again after another half table's worth of inserts. */
        a->grow_at = a->count + table_size(a->power) / 2;
        return;
    }
    a->old = a->buckets;
    a->old_power = a->power;
    a->migrate_next = 0;
    a->buckets = bigger;
    a->power++;
    a->grow_at = grow_threshold(a->power);
}

struct item *assoc_find(struct assoc *a, const char *key, size_t nkey, uint64_t hv)
{
    if (a->old != NULL)
        assoc_migrate(a, MIGRATE_ON_FIND);

    struct item *it = *home_bucket(a, hv);
    while (it != NULL) {
        if (it->nkey == nkey && memcmp(item_key(it), key, nkey) == 0)
            return it;
        it = it->h_next;
    }
    return NULL;
}

void assoc_insert(struct assoc *a, struct item *it, uint64_t hv)
{
    if (a->old != NULL)
        assoc_migrate(a, MIGRATE_ON_INSERT);
    else if (a->count >= a->grow_at)
        start_expansion(a);

    struct item **head = home_bucket(a, hv);
    it->h_next = *head;
    *head = it;
    a->count++;
}

bool assoc_delete(struct assoc *a, struct item *it, uint64_t hv)
{
    struct item **link = home_bucket(a, hv);
    while (*link != NULL) {
        if (*link == it) {
            *link = it->h_next;
            it->h_next = NULL;
            a->count--;
            return true;
        }
        link = &(*link)->h_next;
    }
    return false;
}

/* Visits one chain; returns the number of items visited. */
static size_t visit_chain(struct item *it, assoc_visit_fn visit, void *ctx)
{
    size_t n = 0;
    while (it != NULL) {
        struct item *next = it->h_next;   /* visit may delete it */
        visit(ctx, it);
        it = next;
        n++;
    }
    return n;
}

/* Scan positions: [0, new size) are buckets of the current table, then
 * [new size, new size + old size) buckets of the old one while expanding. */
static size_t scan_positions(const struct assoc *a)
{
    size_t n = table_size(a->power);
    if (a->old != NULL)
        n += table_size(a->old_power);
    return n;
}

static struct item *scan_chain(const struct assoc *a, size_t pos)
{
    size_t n = table_size(a->power);
    if (pos < n)
        return a->buckets[pos];
    return a->old[pos - n];
}

size_t assoc_scan(struct assoc *a, size_t *cursor, size_t budget,
                  assoc_visit_fn visit, void *ctx)
{
    size_t spent = 0;
    size_t end = scan_positions(a);
    size_t pos = *cursor < end ? *cursor : end;

    while (pos < end && spent < budget) {
        spent += 1 + visit_chain(scan_chain(a, pos), visit, ctx);
        pos++;
    }
    *cursor = pos >= end ? 0 : pos;
    return spent;
}

/* v with its bits reversed (bit 0 <-> bit 63). */
static uint64_t reverse_bits(uint64_t v)
{
    v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
    v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
    v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) | ((v & 0x0f0f0f0f0f0f0f0full) << 4);
    v = ((v >> 8) & 0x00ff00ff00ff00ffull) | ((v & 0x00ff00ff00ff00ffull) << 8);
    v = ((v >> 16) & 0x0000ffff0000ffffull) | ((v & 0x0000ffff0000ffffull) << 16);
    return (v >> 32) | (v << 32);
}

/* The walk's next bucket: the bits under mask counted up from their top
 * bit down.  Counting this way, the buckets already walked in a table of
 * 2^p are, in the doubled table, exactly the buckets their items move to
 * (the same low p bits, either top bit), and both come before the cursor:
 * growth neither repeats nor skips a bucket.  0 when every bucket is done. */
static uint64_t walk_next(uint64_t v, uint64_t mask)
{
    v |= ~mask;
    return reverse_bits(reverse_bits(v) + 1);
}

bool assoc_walk(struct assoc *a, uint64_t *cursor, size_t budget, assoc_visit_fn visit,
                void *ctx)
{
    uint64_t v = *cursor;
    size_t spent = 0;
    do {
        if (a->old == NULL) {
            uint64_t m = table_mask(a->power);
            spent += 1 + visit_chain(a->buckets[v & m], visit, ctx);
            v = walk_next(v, m);
            continue;
        }
        /* Expanding: old bucket b (empty once moved) and the new buckets
         * its items go to (low bits b) in one step, so an item moved
         * between two steps is seen in exactly one of them. */
        uint64_t small = table_mask(a->old_power), big = table_mask(a->power);
        spent += 1 + visit_chain(a->old[v & small], visit, ctx);
        do {
            spent += 1 + visit_chain(a->buckets[v & big], visit, ctx);
            v = walk_next(v, big);
        } while ((v & (small ^ big)) != 0);
    } while (v != 0 && spent < budget);
    *cursor = v;
    return v == 0;
}

void assoc_iterate(struct assoc *a, assoc_visit_fn visit, void *ctx)
{
    size_t end = scan_positions(a);
    for (size_t pos = 0; pos < end; pos++)
        visit_chain(scan_chain(a, pos), visit, ctx);
}

unsigned assoc_power(const struct assoc *a)
{
    return a->power;
}

size_t assoc_bytes(const struct assoc *a)
{
    size_t n = table_size(a->power);
    if (a->old != NULL)
        n += table_size(a->old_power);
    return n * sizeof(struct item *);
}

bool assoc_expanding(const struct assoc *a)
{
    return a->old != NULL;
}
