/* items.c - item allocation, linking, the LRU, eviction and the expiry
 * sweep (see items.h).
 *
 * The LRU is one doubly linked list: link and read put an item at the head,
 * eviction takes from the tail.  Room for a new item is made after malloc
 * has told us its real (usable) size: unreferenced dead items near the tail
 * are reclaimed first-come, live ones are evicted if eviction is enabled,
 * and referenced ones are stepped over, at most EVICT_SEARCH_DEPTH of them. */
#include "items.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "slotmap.h"

#define DEFAULT_HASHPOWER 16
#define EVICT_SEARCH_DEPTH 50
#define SWEEP_BUDGET_PER_TICK 10000
#define MIGRATE_BUCKETS_PER_TICK 16384

int item_store_init(struct item_store *s, const struct engine_config *cfg,
                    const struct mc_clock *clock)
{
    memset(s, 0, sizeof(*s));
    unsigned power = cfg->hashpower ? cfg->hashpower : DEFAULT_HASHPOWER;
    if (assoc_init(&s->table, power) != 0)
        return -1;
    s->clock = clock;
    s->mem_limit = cfg->mem_limit;
    s->item_size_max = cfg->item_size_max;
    s->evict = cfg->evict;
    s->cas_enabled = cfg->cas_enabled;
    s->evicted = cfg->evicted;
    s->evicted_arg = cfg->evicted_arg;
    s->sweep_budget = SWEEP_BUDGET_PER_TICK;
    s->marks[0].cas = 0;
    s->marks[0].time = clock->now;
    s->nmarks = 1;
    return 0;
}

static void free_item(struct item_store *s, struct item *it)
{
    s->mem_used -= malloc_usable_size(it);
    free(it);
}

static void free_visitor(void *ctx, struct item *it)
{
    free_item(ctx, it);
}

void item_store_destroy(struct item_store *s)
{
    assoc_iterate(&s->table, free_visitor, s);
    assoc_destroy(&s->table);
    s->lru_head = NULL;
    s->lru_tail = NULL;
}

/* ---- LRU list ---- */

static void lru_push_head(struct item_store *s, struct item *it)
{
    it->prev = NULL;
    it->next = s->lru_head;
    if (s->lru_head != NULL)
        s->lru_head->prev = it;
    else
        s->lru_tail = it;
    s->lru_head = it;
}

static void lru_push_tail(struct item_store *s, struct item *it)
{
    it->next = NULL;
    it->prev = s->lru_tail;
    if (s->lru_tail != NULL)
        s->lru_tail->next = it;
    else
        s->lru_head = it;
    s->lru_tail = it;
}

static void lru_remove(struct item_store *s, struct item *it)
{
    if (it->prev != NULL)
        it->prev->next = it->next;
    else
        s->lru_head = it->next;
    if (it->next != NULL)
        it->next->prev = it->prev;
    else
        s->lru_tail = it->prev;
    it->prev = NULL;
    it->next = NULL;
}

void item_bump(struct item_store *s, struct item *it)
{
    if (s->lru_head == it)
        return;
    lru_remove(s, it);
    lru_push_head(s, it);
}

/* ---- link / unlink ---- */

uint64_t item_next_cas(struct item_store *s)
{
    ++s->cas_counter;
    if (s->oldest_live != 0 && s->clock->now <= s->oldest_live)
        s->live_cut = s->cas_counter;       /* stored by the flush time */
    return s->cas_counter;
}

/* Into the table, at one end of the LRU, and counted. */
static void link_at(struct item_store *s, struct item *it, uint64_t hv, bool at_tail)
{
    it->iflags |= ITEM_LINKED;
    assoc_insert(&s->table, it, hv);
    if (at_tail)
        lru_push_tail(s, it);
    else
        lru_push_head(s, it);
    s->curr_items++;
    s->bytes += item_total(it);
    s->stats.total_items++;
}

void item_link(struct item_store *s, struct item *it, uint64_t hv)
{
    it->cas = item_next_cas(s);
    link_at(s, it, hv, false);
}

void item_link_restored(struct item_store *s, struct item *it, uint64_t hv, uint64_t cas)
{
    it->cas = cas;
    if (cas > s->cas_counter)
        s->cas_counter = cas;
    link_at(s, it, hv, true);
}

void item_unlink(struct item_store *s, struct item *it, uint64_t hv)
{
    assoc_delete(&s->table, it, hv);
    lru_remove(s, it);
    it->iflags &= (uint8_t)~ITEM_LINKED;
    s->curr_items--;
    s->bytes -= item_total(it);
    if (it->refcount == 0)
        free_item(s, it);
}

void item_replace(struct item_store *s, struct item *old_it, struct item *new_it,
                  uint64_t hv)
{
    item_unlink(s, old_it, hv);
    item_link(s, new_it, hv);
}

/* Unlink without a hash value at hand (eviction, sweep). */
static void unlink_rehash(struct item_store *s, struct item *it)
{
    item_unlink(s, it, hash_key(item_key(it), it->nkey));
}

static bool was_fetched(const struct item *it)
{
    return (it->iflags & ITEM_FETCHED) != 0;
}

/* Removes a dead item found by the allocator or the sweep. */
static void remove_dead(struct item_store *s, struct item *it)
{
    if (!was_fetched(it))
        s->stats.expired_unfetched++;
    unlink_rehash(s, it);
}

static struct eng_value listed_value(const struct item_store *s, struct item *it,
                                     bool cas_enabled);

static void evict(struct item_store *s, struct item *it)
{
    s->stats.evictions++;
    if (!was_fetched(it))
        s->stats.evicted_unfetched++;
    if (s->evicted) {
        struct eng_value v = listed_value(s, it, s->cas_enabled);
        s->evicted(s->evicted_arg, &v);
    }
    unlink_rehash(s, it);
}

/* ---- references ---- */

bool item_ref(struct item *it)
{
    if (it->refcount == UINT16_MAX)
        return false;
    it->refcount++;
    return true;
}

void item_release(struct item_store *s, struct item *it)
{
    it->refcount--;
    if (it->refcount == 0 && !item_is_linked(it))
        free_item(s, it);
}

/* ---- allocation ---- */

/* Frees memory from the LRU tail until `need` more bytes fit the limit. */
static bool make_room(struct item_store *s, size_t need)
{
    struct item *it = s->lru_tail;
    int stepped_over = 0;

    while (s->mem_used + need > s->mem_limit) {
        if (it == NULL || stepped_over >= EVICT_SEARCH_DEPTH)
            return false;
        struct item *prev = it->prev;
        if (it->refcount > 0) {
            stepped_over++;
        } else if (item_is_dead(s, it)) {
            s->stats.reclaimed++;
            remove_dead(s, it);
        } else if (s->evict) {
            evict(s, it);
        } else {
            stepped_over++;
        }
        it = prev;
    }
    return true;
}

struct item *item_alloc(struct item_store *s, const char *key, size_t nkey,
                        uint32_t flags, rel_time_t exptime, size_t nbytes,
                        eng_status *st)
{
    if (nkey == 0 || nkey > ITEM_KEY_MAX) {
        *st = ENG_FAILED;
        return NULL;
    }
    if (nbytes > UINT32_MAX) {
        *st = ENG_TOO_LARGE;
        return NULL;
    }
    size_t total = sizeof(struct item) + nkey + nbytes + 2;
    if (total > s->item_size_max ||
        engine_too_large(s->item_size_max, s->cas_enabled, nkey, nbytes, flags)) {
        *st = ENG_TOO_LARGE;
        return NULL;
    }

    struct item *it = malloc(total);
    if (it == NULL) {
        s->stats.outofmemory++;
        *st = ENG_NO_MEMORY;
        return NULL;
    }
    size_t usable = malloc_usable_size(it);
    if (s->mem_used + usable > s->mem_limit && !make_room(s, usable)) {
        free(it);
        s->stats.outofmemory++;
        *st = ENG_NO_MEMORY;
        return NULL;
    }
    s->mem_used += usable;

    it->h_next = NULL;
    it->prev = NULL;
    it->next = NULL;
    it->cas = 0;
    it->exptime = exptime;
    it->flags = flags;
    it->nbytes = (uint32_t)nbytes;
    it->refcount = 0;
    it->nkey = (uint8_t)nkey;
    it->iflags = 0;
    memcpy(it->data, key, nkey);
    it->data[nkey + nbytes] = '\r';
    it->data[nkey + nbytes + 1] = '\n';
    *st = ENG_SUCCESS;
    return it;
}

void item_discard(struct item_store *s, struct item *it)
{
    free_item(s, it);
}

/* ---- lookup ---- */

struct item *item_lookup(struct item_store *s, const char *key, size_t nkey,
                         uint64_t hv, enum item_miss *why)
{
    struct item *it = assoc_find(&s->table, key, nkey, hv);
    if (it == NULL) {
        *why = ITEM_MISS_ABSENT;
        return NULL;
    }
    if (item_flushed(s, it)) {
        *why = ITEM_MISS_FLUSHED;
        item_unlink(s, it, hv);
        return NULL;
    }
    if (clock_expired(s->clock, it->exptime)) {
        *why = ITEM_MISS_EXPIRED;
        item_unlink(s, it, hv);
        return NULL;
    }
    return it;
}

void item_flush_at(struct item_store *s, rel_time_t new_oldest, bool by_cas)
{
    rel_time_t now = s->clock->now;
    if (by_cas) {
        s->oldest_live = new_oldest - 1;    /* 0 (none) for memcached's "1" */
        /* memcached takes a cas id for an immediate flush (not for a
         * delayed one), so the next item's cas is two above the last
         * one's: clients that predict cas values see the same numbers
         * (difftest seed 2711 case 2401). */
        if (s->oldest_live <= now)
            s->oldest_cas = ++s->cas_counter;
    } else {
        s->oldest_live = new_oldest;
    }
    /* Items stored by the flush time: all so far when it is now or later
     * (and those to come until then, item_next_cas); a past one is taken
     * as covering every item (we keep no store times; with cas the
     * oldest_cas rule decides anyway), except memcached's "1", an
     * absolute time before the process started: before anything was
     * stored, so it covers nothing (difftest seed 1066 case 616, -C). */
    s->live_cut = !by_cas && new_oldest <= 1 ? 0 : s->cas_counter;
}

/* ---- background work ---- */

struct sweep_ctx {
    struct item_store *s;
    size_t removed;
};

static void sweep_visitor(void *ctx, struct item *it)
{
    struct sweep_ctx *sc = ctx;
    if (item_is_dead(sc->s, it)) {
        remove_dead(sc->s, it);
        sc->removed++;
    }
}

size_t item_sweep(struct item_store *s, size_t budget)
{
    struct sweep_ctx sc = { s, 0 };
    assoc_scan(&s->table, &s->sweep_cursor, budget, sweep_visitor, &sc);
    return sc.removed;
}

/* Halves the resolution of the older half of the marks, keeping the older
 * mark of each pair, so recent history stays exact and old history coarse. */
static void thin_age_marks(struct item_store *s)
{
    unsigned half = s->nmarks / 2;
    unsigned kept = 0;
    for (unsigned i = 0; i < half; i += 2)
        s->marks[kept++] = s->marks[i];
    for (unsigned i = half; i < s->nmarks; i++)
        s->marks[kept++] = s->marks[i];
    s->nmarks = kept;
}

/* A mark (c, t) says: items with cas > c were stored at time t or later. */
static void add_age_mark(struct item_store *s)
{
    struct age_mark *last = &s->marks[s->nmarks - 1];
    if (last->cas == s->cas_counter) {
        last->time = s->clock->now;
        return;
    }
    if (s->nmarks == ITEM_AGE_MARKS)
        thin_age_marks(s);
    s->marks[s->nmarks].cas = s->cas_counter;
    s->marks[s->nmarks].time = s->clock->now;
    s->nmarks++;
}

size_t item_store_tick(struct item_store *s)
{
    assoc_migrate(&s->table, MIGRATE_BUCKETS_PER_TICK);
    size_t removed = item_sweep(s, s->sweep_budget);
    add_age_mark(s);
    return removed;
}

/* Time at or after which the item with this cas was stored. */
static rel_time_t stored_since(const struct item_store *s, uint64_t cas)
{
    unsigned lo = 0, hi = s->nmarks;   /* find the last mark with mark.cas < cas */
    while (hi - lo > 1) {
        unsigned mid = lo + (hi - lo) / 2;
        if (s->marks[mid].cas < cas)
            lo = mid;
        else
            hi = mid;
    }
    return s->marks[lo].time;
}

rel_time_t item_write_age(const struct item_store *s, const struct item *it)
{
    rel_time_t since = stored_since(s, it->cas);
    return s->clock->now > since ? s->clock->now - since : 0;
}

rel_time_t item_tail_age(const struct item_store *s)
{
    return s->lru_tail == NULL ? 0 : item_write_age(s, s->lru_tail);
}

/* ---- every live item, newest first ---- */

/* What a listing shows of a live item. */
static struct eng_value listed_value(const struct item_store *s, struct item *it,
                                     bool cas_enabled)
{
    struct eng_value v = {
        .key = item_key(it), .nkey = it->nkey, .data = item_value(it),
        .nbytes = it->nbytes, .flags = it->flags, .cas = cas_enabled ? it->cas : 0,
        .exptime = it->exptime == 0 ? 0 : (int64_t)s->clock->epoch + (int64_t)it->exptime,
        .fetched = (it->iflags & ITEM_FETCHED) != 0,
        .idle = item_write_age(s, it),
    };
    return v;
}

void item_store_visit_recent(struct item_store *s, bool cas_enabled,
                             bool (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    for (struct item *it = s->lru_head; it; it = it->next) {
        if (item_is_dead(s, it))
            continue;
        struct eng_value v = listed_value(s, it, cas_enabled);
        if (!fn(ctx, &v))
            break;
    }
}

struct listing_walk {
    const struct item_store *s;
    bool cas_enabled;
    void (*fn)(void *ctx, const struct eng_value *v);
    void *ctx;
};

static void listing_visit(void *ctx, struct item *it)
{
    struct listing_walk *w = ctx;
    if (item_is_dead(w->s, it))
        return;
    struct eng_value v = listed_value(w->s, it, w->cas_enabled);
    w->fn(w->ctx, &v);
}

enum eng_walk item_store_walk(struct item_store *s, bool cas_enabled, struct eng_cursor *cursor,
                              size_t budget, void (*fn)(void *ctx, const struct eng_value *v),
                              void *ctx)
{
    struct listing_walk w = { s, cas_enabled, fn, ctx };
    return assoc_walk(&s->table, &cursor->pos, budget, listing_visit, &w) ? ENG_WALK_DONE
                                                                          : ENG_WALK_MORE;
}

/* ---- keys of one slot ---- */

struct slot_walk {
    const struct item_store *s;
    unsigned slot;
    void (*fn)(void *ctx, const char *key, size_t nkey);
    void *ctx;
};

static void slot_visit(void *ctx, struct item *it)
{
    struct slot_walk *w = ctx;
    if (item_is_dead(w->s, it) || slotmap_slot(item_key(it), it->nkey) != w->slot)
        return;
    w->fn(w->ctx, item_key(it), it->nkey);
}

enum eng_walk items_slot_keys(struct item_store *s, unsigned slot, struct eng_cursor *cursor,
                              size_t budget,
                              void (*fn)(void *ctx, const char *key, size_t nkey), void *ctx)
{
    struct slot_walk w = { s, slot, fn, ctx };
    return assoc_walk(&s->table, &cursor->pos, budget, slot_visit, &w) ? ENG_WALK_DONE
                                                                       : ENG_WALK_MORE;
}
