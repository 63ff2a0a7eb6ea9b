/* pbr_store.c - item store helpers shared by the primary and the backup
 * (see pbr_store.h). */
#include "pbr_store.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "assoc.h"
#include "hash.h"

#define FULL_SCAN_BUDGET ((size_t)1 << 62)

int64_t pbr_abs_exptime(const struct mc_clock *clock, rel_time_t rel)
{
    return rel == 0 ? 0 : (int64_t)clock->epoch + (int64_t)rel;
}

eng_status pbr_get(struct item_store *s, bool cas_enabled, const char *key, size_t nkey,
                   struct eng_value *out, struct eng_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_NOT_FOUND;
    if (nkey == 0 || nkey > ITEM_KEY_MAX)
        return ENG_NOT_FOUND;
    enum item_miss why = ITEM_MISS_ABSENT;
    struct item *it = item_lookup(s, key, nkey, hash_key(key, nkey), &why);
    if (it == NULL) {
        if (why == ITEM_MISS_EXPIRED)
            s->stats.get_expired++;
        else if (why == ITEM_MISS_FLUSHED)
            s->stats.get_flushed++;
        return ENG_NOT_FOUND;
    }
    if (!item_ref(it))
        return ENG_NOT_FOUND;   /* 65535 readers already: a miss */
    it->iflags |= ITEM_FETCHED;
    item_bump(s, it);
    out->key = item_key(it);
    out->nkey = it->nkey;
    out->data = item_value(it);
    out->nbytes = it->nbytes;
    out->flags = it->flags;
    out->cas = cas_enabled ? it->cas : 0;
    out->handle = it;
    res->status = ENG_SUCCESS;
    res->cas = out->cas;
    return ENG_SUCCESS;
}

void pbr_release(struct item_store *s, void *handle)
{
    item_release(s, handle);
}

/* ---- whole-store walks ---- */

static void unlink_visitor(void *ctx, struct item *it)
{
    item_unlink(ctx, it, hash_key(item_key(it), it->nkey));
}

void pbr_unlink_all(struct item_store *s)
{
    assoc_iterate(&s->table, unlink_visitor, s);
}

struct reclaim_walk {
    struct item_store *s;
    size_t removed;
};

static void reclaim_visitor(void *ctx, struct item *it)
{
    struct reclaim_walk *w = ctx;
    if (item_is_dead(w->s, it)) {
        item_unlink(w->s, it, hash_key(item_key(it), it->nkey));
        w->removed++;
    }
}

size_t pbr_reclaim_dead(struct item_store *s)
{
    struct reclaim_walk w = { s, 0 };
    size_t cursor = 0;
    assoc_scan(&s->table, &cursor, FULL_SCAN_BUDGET, reclaim_visitor, &w);
    return w.removed;
}

/* ---- digest ---- */

struct digest_walk {
    const struct item_store *s;
    const struct mc_clock *clock;
    struct pbr_digest *d;
};

static void put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* splitmix64's finalizer: spreads one item's hash before it is summed. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t item_hash(const struct mc_clock *clock, struct item *it)
{
    uint8_t buf[1 + ITEM_KEY_MAX + 4 + 8 + 8 + 8 + 4];
    size_t n = 0;
    buf[n++] = it->nkey;
    memcpy(buf + n, item_key(it), it->nkey);
    n += it->nkey;
    put_u32le(buf + n, it->flags);
    n += 4;
    put_u64le(buf + n, (uint64_t)pbr_abs_exptime(clock, it->exptime));
    n += 8;
    put_u64le(buf + n, it->cas);
    n += 8;
    put_u64le(buf + n, hash_key(item_value(it), it->nbytes));
    n += 8;
    put_u32le(buf + n, it->nbytes);
    n += 4;
    return mix64(hash_key(buf, n));
}

static void digest_visitor(void *ctx, struct item *it)
{
    struct digest_walk *w = ctx;
    if (item_is_dead(w->s, it))
        return;
    w->d->count++;
    w->d->value_bytes += it->nbytes;
    w->d->digest += item_hash(w->clock, it);
}

void pbr_digest_store(struct item_store *s, const struct mc_clock *clock,
                      struct pbr_digest *out)
{
    memset(out, 0, sizeof(*out));
    struct digest_walk w = { s, clock, out };
    assoc_iterate(&s->table, digest_visitor, &w);
}

/* ---- stats, memory ---- */

void pbr_store_stats(const struct item_store *s, eng_stat_fn emit, void *ctx)
{
    emit(ctx, "curr_items", "%" PRIu64, s->curr_items);
    emit(ctx, "total_items", "%" PRIu64, s->stats.total_items);
    emit(ctx, "bytes", "%" PRIu64, s->bytes);
    emit(ctx, "limit_maxbytes", "%zu", s->mem_limit);
    emit(ctx, "mem_used", "%zu", s->mem_used);
    emit(ctx, "reclaimed", "%" PRIu64, s->stats.reclaimed);
    emit(ctx, "expired_unfetched", "%" PRIu64, s->stats.expired_unfetched);
    emit(ctx, "hash_power_level", "%u", assoc_power(&s->table));
    emit(ctx, "hash_bytes", "%zu", assoc_bytes(&s->table));
    emit(ctx, "get_expired", "%" PRIu64, s->stats.get_expired);
    emit(ctx, "get_flushed", "%" PRIu64, s->stats.get_flushed);
}

size_t pbr_store_meta_bytes(const struct item_store *s)
{
    return assoc_bytes(&s->table) + (size_t)s->curr_items * sizeof(struct item);
}

/* ---- admin replies ---- */

void pbr_reply_printf(const struct pbr_reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vreply(r->write, r->ctx, fmt, ap);
    va_end(ap);
}

void pbr_reply_meta(const struct pbr_reply *r, const struct pbr_digest *d)
{
    pbr_reply_printf(r, "STAT count %" PRIu64 "\r\n", d->count);
    pbr_reply_printf(r, "STAT digest %016" PRIx64 "\r\n", d->digest);
    pbr_reply_printf(r, "STAT value_bytes %" PRIu64 "\r\n", d->value_bytes);
    pbr_reply_printf(r, "END\r\n");
}
