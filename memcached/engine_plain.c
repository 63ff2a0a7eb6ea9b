/* engine_plain.c - the plain engine: an ordinary memcached cache.
 *
 * Every operation completes synchronously on the item store (items.c).
 * A store allocates the new item first (allocation may evict), then looks up
 * the current one and decides; operations that build on the current item
 * (append, prepend, incr, decr) hold a reference to it across the allocation
 * so eviction cannot take it away.  The engine keeps its own clock, advanced
 * by tick(); flush_all with a delay is armed here and fired from tick() when
 * its time comes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "arith.h"
#include "store_rules.h"
#include "engine.h"
#include "hash.h"
#include "items.h"

struct plain {
    struct engine engine;
    struct mc_clock clock;
    struct item_store store;
    bool cas_enabled;
    uint64_t sizes_from_cas;    /* stats sizes counts items with a cas this high */
};


static struct plain *plain_of(struct engine *e)
{
    return e->priv;
}

static bool key_ok(size_t nkey)
{
    return nkey >= 1 && nkey <= ITEM_KEY_MAX;
}

/* The cas clients see: always 0 when cas is disabled (-C). */
static uint64_t visible_cas(const struct plain *p, const struct item *it)
{
    return p->cas_enabled ? it->cas : 0;
}

/* With cas disabled every comparison passes, as in memcached -C. */
static bool cas_matches(const struct plain *p, const struct item *it, uint64_t want)
{
    return store_cas_matches(p->cas_enabled, it->cas, want);
}

/* Ops other than CAS compare only when the request carries a cas. */
static bool cas_condition_ok(const struct plain *p, const struct eng_mutation *m,
                             const struct item *it)
{
    return m->cas == 0 || cas_matches(p, it, m->cas);
}

static void result_clear(struct eng_result *res)
{
    res->status = ENG_SUCCESS;
    res->cas = 0;
    res->value = 0;
    res->msg = NULL;
}

/* ---- get / release ---- */

static void count_miss(struct plain *p, enum item_miss why)
{
    if (why == ITEM_MISS_EXPIRED)
        p->store.stats.get_expired++;
    else if (why == ITEM_MISS_FLUSHED)
        p->store.stats.get_flushed++;
}

/* A read: the item, referenced for the caller; with ENG_GET_PEEK its LRU
 * position and fetched bit stay as they are. */
static eng_status plain_lookup(struct plain *p, const char *key, size_t nkey, unsigned opts,
                               struct eng_value *out, struct eng_result *res)
{
    result_clear(res);
    res->status = ENG_NOT_FOUND;
    if (!key_ok(nkey))
        return ENG_NOT_FOUND;

    enum item_miss why = ITEM_MISS_ABSENT;
    struct item *it = item_lookup(&p->store, key, nkey, hash_key(key, nkey), &why);
    if (it == NULL) {
        count_miss(p, why);
        return ENG_NOT_FOUND;
    }
    if (!item_ref(it))
        return ENG_NOT_FOUND;   /* 65535 readers already: treat as a miss */

    out->marks = item_marks(it);
    out->fetched = (it->iflags & ITEM_FETCHED) != 0;
    out->idle = item_write_age(&p->store, it);
    if (!(opts & ENG_GET_PEEK)) {
        it->iflags |= ITEM_FETCHED;
        item_bump(&p->store, it);
    }

    out->key = item_key(it);
    out->nkey = it->nkey;
    out->data = item_value(it);
    out->nbytes = it->nbytes;
    out->flags = it->flags;
    out->cas = visible_cas(p, it);
    out->handle = it;
    out->exptime = it->exptime == 0 ? 0 : (int64_t)p->clock.epoch + (int64_t)it->exptime;
    res->status = ENG_SUCCESS;
    res->cas = out->cas;
    return ENG_SUCCESS;
}

static eng_status plain_get(struct engine *e, const char *key, size_t nkey,
                            struct eng_value *out, struct eng_result *res)
{
    return plain_lookup(plain_of(e), key, nkey, 0, out, res);
}

static eng_status plain_get_ex(struct engine *e, const char *key, size_t nkey, unsigned opts,
                               struct eng_value *out, struct eng_result *res)
{
    return plain_lookup(plain_of(e), key, nkey, opts, out, res);
}

static void plain_release(struct engine *e, void *handle)
{
    item_release(&plain_of(e)->store, handle);
}

/* ---- set / add / replace / cas ---- */

static eng_status do_store(struct plain *p, const struct eng_mutation *m,
                           struct eng_result *res)
{
    struct item_store *s = &p->store;
    eng_status st;
    rel_time_t exptime = clock_exptime(&p->clock, m->exptime);
    struct item *it = item_alloc(s, m->key, m->nkey, m->flags, exptime, m->nbytes, &st);
    if (it == NULL)
        return st;
    memcpy(item_value(it), m->data, m->nbytes);

    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *old = item_lookup(s, m->key, m->nkey, hv, &why);
    if (old == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    st = store_outcome(m, old != NULL, old ? old->cas : 0, p->cas_enabled);
    if (st != ENG_SUCCESS) {
        item_discard(s, it);
        return st;
    }
    item_set_marks(it, store_marks(m, old != NULL, old ? old->cas : 0, old ? item_marks(old) : 0,
                                   p->cas_enabled));
    if (store_is_stale(m, old != NULL, old ? old->cas : 0, p->cas_enabled))
        it->exptime = old->exptime;     /* memcached keeps the TTL of a stale set */
    if (old != NULL)
        item_replace(s, old, it, hv);
    else
        item_link(s, it, hv);
    res->cas = visible_cas(p, it);
    return ENG_SUCCESS;
}

/* Puts new_it where old_it (referenced by the caller) was, then drops that
 * reference. */
static void swap_in(struct item_store *s, struct item *old_it, struct item *new_it,
                    uint64_t hv)
{
    if (item_is_linked(old_it))
        item_replace(s, old_it, new_it, hv);
    else
        item_link(s, new_it, hv);
    item_release(s, old_it);
}

/* ---- append / prepend ---- */

static eng_status do_concat(struct plain *p, const struct eng_mutation *m,
                            struct eng_result *res)
{
    struct item_store *s = &p->store;
    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *old = item_lookup(s, m->key, m->nkey, hv, &why);
    if (old == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    eng_status rule = store_outcome(m, old != NULL, old ? old->cas : 0, p->cas_enabled);
    if (rule != ENG_SUCCESS)
        return rule;
    if (!item_ref(old)) {
        res->msg = "item busy";
        return ENG_FAILED;
    }

    eng_status st;
    struct item *it = item_alloc(s, m->key, m->nkey, old->flags, old->exptime,
                                 (size_t)old->nbytes + m->nbytes, &st);
    if (it == NULL) {
        /* memcached answers NOT_STORED when the joined item cannot be made. */
        item_release(s, old);
        return st == ENG_TOO_LARGE || st == ENG_NO_MEMORY ? ENG_NOT_STORED : st;
    }
    char *dst = item_value(it);
    if (m->op == ENG_OP_APPEND) {
        memcpy(dst, item_value(old), old->nbytes);
        memcpy(dst + old->nbytes, m->data, m->nbytes);
    } else {
        memcpy(dst, m->data, m->nbytes);
        memcpy(dst + m->nbytes, item_value(old), old->nbytes);
    }
    item_set_marks(it, store_marks(m, true, old->cas, item_marks(old), p->cas_enabled));
    swap_in(s, old, it, hv);
    res->cas = visible_cas(p, it);
    return ENG_SUCCESS;
}

/* ---- incr / decr ---- */

static eng_status arith_create(struct plain *p, const struct eng_mutation *m,
                               uint64_t hv, struct eng_result *res)
{
    char buf[ARITH_DIGITS_MAX];
    size_t len = arith_format_u64(buf, m->initial);
    eng_status st;
    struct item *it = item_alloc(&p->store, m->key, m->nkey, m->flags,
                                 clock_exptime(&p->clock, m->exptime), len, &st);
    if (it == NULL)
        return st;
    memcpy(item_value(it), buf, len);
    item_set_marks(it, m->marks);
    item_link(&p->store, it, hv);
    res->value = m->initial;
    res->cas = visible_cas(p, it);
    res->created = true;
    return ENG_SUCCESS;
}

/* memcached's rule (arith.h): a result that fits the stored value's length
 * is written in place, padded with spaces, when nobody holds the item (its
 * marks stay); otherwise a new item holds the number alone. */
static eng_status do_arith(struct plain *p, const struct eng_mutation *m,
                           struct eng_result *res)
{
    struct item_store *s = &p->store;
    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *old = item_lookup(s, m->key, m->nkey, hv, &why);
    if (old == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    if (old == NULL)
        return m->create ? arith_create(p, m, hv, res) : ENG_NOT_FOUND;
    /* memcached's order (difftest seed 14014 cases 2037, 5824): empty or
     * chunked values, then the cas, then the number */
    if (arith_rejected_early(old->nkey, old->nbytes, old->flags, p->cas_enabled))
        return ENG_NON_NUMERIC;
    if (!cas_condition_ok(p, m, old))
        return ENG_EXISTS;
    uint64_t v;
    if (!arith_parse_u64(item_value(old), old->nbytes, &v))
        return ENG_NON_NUMERIC;
    v = arith_apply(m->op, v, m->delta);
    res->value = v;

    /* ma T: memcached sets the TTL only of an item it changes in place
     * (a new item keeps the old one's) */
    size_t len = arith_result_len(v, old->nbytes, old->refcount == 0);
    if (len == old->nbytes && old->refcount == 0) {
        arith_write(item_value(old), v, len);
        if (m->touch)
            old->exptime = clock_exptime(&p->clock, m->exptime);
        old->cas = item_next_cas(s);
        item_bump(s, old);
        res->cas = visible_cas(p, old);
        return ENG_SUCCESS;
    }

    if (!item_ref(old)) {
        res->msg = "item busy";
        return ENG_FAILED;
    }
    eng_status st;
    struct item *it = item_alloc(s, m->key, m->nkey, old->flags, old->exptime, len, &st);
    if (it == NULL) {
        item_release(s, old);
        return st;
    }
    arith_write(item_value(it), v, len);
    item_set_marks(it, m->marks);
    swap_in(s, old, it, hv);
    res->cas = visible_cas(p, it);
    return ENG_SUCCESS;
}

/* ---- delete / touch / flush ---- */

static eng_status do_delete(struct plain *p, const struct eng_mutation *m)
{
    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *it = item_lookup(&p->store, m->key, m->nkey, hv, &why);
    if (it == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    if (it == NULL)
        return ENG_NOT_FOUND;
    if (!cas_condition_ok(p, m, it))
        return ENG_EXISTS;
    item_unlink(&p->store, it, hv);
    return ENG_SUCCESS;
}

static eng_status do_touch(struct plain *p, const struct eng_mutation *m,
                           struct eng_result *res)
{
    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *it = item_lookup(&p->store, m->key, m->nkey, hv, &why);
    if (it == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    if (it == NULL)
        return ENG_NOT_FOUND;
    if (!cas_condition_ok(p, m, it))
        return ENG_EXISTS;
    it->exptime = clock_exptime(&p->clock, m->exptime);
    it->iflags |= ITEM_FETCHED;     /* memcached counts a touch as a read */
    item_bump(&p->store, it);
    res->cas = visible_cas(p, it);
    return ENG_SUCCESS;
}

/* md I (stale, new cas, maybe a TTL) and mg's recache win (a mark only). */
static eng_status do_mark(struct plain *p, const struct eng_mutation *m,
                          struct eng_result *res)
{
    uint64_t hv = hash_key(m->key, m->nkey);
    enum item_miss why;
    struct item *it = item_lookup(&p->store, m->key, m->nkey, hv, &why);
    if (it == NULL)
        count_miss(p, why);      /* memcached counts a write's lookup too */
    if (it == NULL)
        return ENG_NOT_FOUND;
    if (!cas_condition_ok(p, m, it))
        return ENG_EXISTS;
    item_change_marks(it, m->marks, m->marks_clear);
    if (m->new_cas)
        it->cas = item_next_cas(&p->store);
    if (m->touch)
        it->exptime = clock_exptime(&p->clock, m->exptime);
    res->cas = visible_cas(p, it);
    return ENG_SUCCESS;
}

/* The second memcached's realtime() gives flush_all's argument (the
 * current one without a delay or with one of 0 or less; an absolute time
 * before the process started is 1). */
static rel_time_t flush_time(const struct plain *p, int64_t exptime)
{
    if (exptime <= 0)
        return p->clock.now;
    int64_t rel;
    if (exptime > CLOCK_MAX_RELATIVE_EXPTIME) {
        if (exptime <= (int64_t)p->clock.epoch)
            return 1;
        rel = exptime - (int64_t)p->clock.epoch;
    } else {
        rel = (int64_t)p->clock.now + exptime;
    }
    return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
}

/* memcached's flush_all sets one flush time, judged lazily (items.h): with
 * cas a second before the request's time, items older than the flush dead
 * at once; without cas (-C) by store time, so what is stored in the rest
 * of that second is dead too (difftest seed 14014 case 4820); a later
 * flush_all replaces the time, and one in the future revives what the
 * earlier one hid until it is reached (cases 12049, and 1736 of seed
 * 20261124). */
static eng_status do_flush(struct plain *p, const struct eng_mutation *m)
{
    item_flush_at(&p->store, flush_time(p, m->exptime), p->cas_enabled);
    return ENG_SUCCESS;
}

static eng_status dispatch(struct plain *p, const struct eng_mutation *m,
                           struct eng_result *res)
{
    if (m->op == ENG_OP_FLUSH)
        return do_flush(p, m);
    if (!key_ok(m->nkey)) {
        res->msg = "bad key length";
        return ENG_FAILED;
    }
    switch (m->op) {
    case ENG_OP_SET:
    case ENG_OP_ADD:
    case ENG_OP_REPLACE:
    case ENG_OP_CAS:
        return do_store(p, m, res);
    case ENG_OP_APPEND:
    case ENG_OP_PREPEND:
        return do_concat(p, m, res);
    case ENG_OP_DELETE:
        return do_delete(p, m);
    case ENG_OP_INCR:
    case ENG_OP_DECR:
        return do_arith(p, m, res);
    case ENG_OP_TOUCH:
        return do_touch(p, m, res);
    case ENG_OP_MARK:
        return do_mark(p, m, res);
    default:
        res->msg = "unknown operation";
        return ENG_FAILED;
    }
}

static eng_status plain_mutate(struct engine *e, const struct eng_mutation *m,
                               struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct plain *p = plain_of(e);
    result_clear(res);
    eng_status st = dispatch(p, m, res);
    res->status = st;
    if (st != ENG_SUCCESS) {
        res->cas = 0;
        res->value = 0;
    }
    return st;
}

/* ---- stats ---- */

static void stats_general(struct plain *p, eng_stat_fn emit, void *ctx)
{
    const struct item_store *s = &p->store;
    emit(ctx, "curr_items", "%" PRIu64, s->curr_items);
    emit(ctx, "total_items", "%" PRIu64, s->stats.total_items);
    emit(ctx, "bytes", "%" PRIu64, s->bytes);
    emit(ctx, "evictions", "%" PRIu64, s->stats.evictions);
    emit(ctx, "expired_unfetched", "%" PRIu64, s->stats.expired_unfetched);
    emit(ctx, "evicted_unfetched", "%" PRIu64, s->stats.evicted_unfetched);
    emit(ctx, "reclaimed", "%" PRIu64, s->stats.reclaimed);
    emit(ctx, "limit_maxbytes", "%zu", s->mem_limit);
    emit(ctx, "hash_power_level", "%u", assoc_power(&s->table));
    emit(ctx, "hash_bytes", "%zu", assoc_bytes(&s->table));
    emit(ctx, "hash_is_expanding", "%d", assoc_expanding(&s->table) ? 1 : 0);
    emit(ctx, "get_expired", "%" PRIu64, s->stats.get_expired);
    emit(ctx, "get_flushed", "%" PRIu64, s->stats.get_flushed);
}

static void stats_items(struct plain *p, eng_stat_fn emit, void *ctx)
{
    const struct item_store *s = &p->store;
    if (s->curr_items == 0)
        return;
    emit(ctx, "items:1:number", "%" PRIu64, s->curr_items);
    emit(ctx, "items:1:age", "%u", (unsigned)item_tail_age(s));
    emit(ctx, "items:1:evicted", "%" PRIu64, s->stats.evictions);
    emit(ctx, "items:1:expired_unfetched", "%" PRIu64, s->stats.expired_unfetched);
    emit(ctx, "items:1:evicted_unfetched", "%" PRIu64, s->stats.evicted_unfetched);
    emit(ctx, "items:1:outofmemory", "%" PRIu64, s->stats.outofmemory);
    emit(ctx, "items:1:reclaimed", "%" PRIu64, s->stats.reclaimed);
}

static void stats_slabs(struct plain *p, eng_stat_fn emit, void *ctx)
{
    const struct item_store *s = &p->store;
    emit(ctx, "1:used_chunks", "%" PRIu64, s->curr_items);
    emit(ctx, "1:mem_requested", "%" PRIu64, s->bytes);
    emit(ctx, "active_slabs", "%d", 1);
    emit(ctx, "total_malloced", "%zu", s->mem_used);
}

struct size_list {
    const struct item_store *s;
    uint32_t *buckets;      /* size class (multiple of 32) of each live item */
    size_t n, cap;
    uint64_t from_cas;
};

static void collect_size(void *ctx, struct item *it)
{
    struct size_list *l = ctx;
    if (l->n == l->cap || item_is_dead(l->s, it) || it->cas < l->from_cas)
        return;
    size_t total = item_total(it);
    l->buckets[l->n++] = (uint32_t)((total + 31) / 32 * 32);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* "<size> <count>" for 32-byte size classes, built by walking every item. */
static void stats_sizes(struct plain *p, eng_stat_fn emit, void *ctx)
{
    struct size_list l = { &p->store, NULL, 0, p->store.curr_items, p->sizes_from_cas };
    if (l.cap == 0)
        return;
    l.buckets = malloc(l.cap * sizeof(uint32_t));
    if (l.buckets == NULL)
        return;
    assoc_iterate(&p->store.table, collect_size, &l);
    qsort(l.buckets, l.n, sizeof(uint32_t), cmp_u32);

    size_t i = 0;
    while (i < l.n) {
        size_t j = i;
        while (j < l.n && l.buckets[j] == l.buckets[i])
            j++;
        char name[16];
        snprintf(name, sizeof(name), "%u", (unsigned)l.buckets[i]);
        emit(ctx, name, "%zu", j - i);
        i = j;
    }
    free(l.buckets);
}

static bool plain_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct plain *p = plain_of(e);
    if (strcmp(group, "") == 0)
        stats_general(p, emit, ctx);
    else if (strcmp(group, "items") == 0)
        stats_items(p, emit, ctx);
    else if (strcmp(group, "slabs") == 0)
        stats_slabs(p, emit, ctx);
    else if (strcmp(group, "sizes") == 0)
        stats_sizes(p, emit, ctx);
    else if (strcmp(group, "sizes_enable") == 0)
        /* memcached's histogram counts the items stored once it is on,
         * told apart by a cas id it takes (so the next item's cas is two
         * up); -o track_sizes counts everything. */
        p->sizes_from_cas = item_next_cas(&p->store);
    else
        return false;
    return true;
}

static void plain_stats_reset(struct engine *e)
{
    memset(&plain_of(e)->store.stats, 0, sizeof(struct item_counters));
}

/* ---- cache_memlimit, stats cachedump ---- */

static bool plain_set_mem_limit(struct engine *e, size_t bytes)
{
    plain_of(e)->store.mem_limit = bytes;
    return true;
}

static bool plain_visit_recent(struct engine *e, bool (*fn)(void *ctx, const struct eng_value *v),
                               void *ctx)
{
    struct plain *p = plain_of(e);
    item_store_visit_recent(&p->store, p->cas_enabled, fn, ctx);
    return true;
}

static enum eng_walk plain_walk(struct engine *e, struct eng_cursor *cursor, size_t budget,
                                void (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct plain *p = plain_of(e);
    return item_store_walk(&p->store, p->cas_enabled, cursor, budget, fn, ctx);
}

/* ---- keys of one slot (slot migration) ---- */

static enum eng_walk plain_slot_keys(struct engine *e, unsigned slot, struct eng_cursor *cursor,
                                     size_t budget,
                                     void (*fn)(void *ctx, const char *key, size_t nkey),
                                     void *ctx)
{
    return items_slot_keys(&plain_of(e)->store, slot, cursor, budget, fn, ctx);
}

/* ---- clock, lifetime ---- */

static void plain_tick(struct engine *e, time_t now)
{
    struct plain *p = plain_of(e);
    clock_set(&p->clock, now);
    item_store_tick(&p->store);
}

static void plain_destroy(struct engine *e)
{
    struct plain *p = plain_of(e);
    item_store_destroy(&p->store);
    free(p);
}

static const struct engine_ops plain_ops = {
    .name = "plain",
    .get = plain_get,
    .release = plain_release,
    .mutate = plain_mutate,
    .stats = plain_stats,
    .stats_reset = plain_stats_reset,
    .tick = plain_tick,
    .destroy = plain_destroy,
    .slot_keys = plain_slot_keys,
    .get_ex = plain_get_ex,
    .set_mem_limit = plain_set_mem_limit,
    .visit_recent = plain_visit_recent,
    .walk = plain_walk,
};

struct item_store *engine_plain_store(struct engine *e)
{
    return &plain_of(e)->store;
}

struct engine *engine_plain_new(const struct engine_config *cfg)
{
    struct plain *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    clock_init(&p->clock, cfg->started);
    if (item_store_init(&p->store, cfg, &p->clock) != 0) {
        free(p);
        return NULL;
    }
    p->cas_enabled = cfg->cas_enabled;
    p->engine.ops = &plain_ops;
    p->engine.priv = p;
    return &p->engine;
}
