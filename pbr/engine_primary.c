/* engine_primary.c - the primary of a primary-backup group (--role primary).
 *
 * Items live in the plain engine's item store (memcached/items.c: same
 * memory accounting, LRU and expiry).  Every mutation becomes one record
 * (repl/record.h) carrying the full new value: PUT(key, flags, absolute
 * exptime, cas, nbytes) with the value as payload, DEL(key) or FLUSH.  The
 * shared sender (repl/sender.c) sends it to the M backups and calls our
 * commit callback in xid order at the point the group's sync mode names:
 * FULL once every backup acknowledged it, SEMI once every link handed it to
 * the kernel, ASYNC at once.  Only then does the record change our store
 * and is the client answered (docs/pbr.md).
 *
 * Outcomes are decided against the committed store.  A key has at most one
 * record in flight (pending.h); a mutation of such a key, one that finds no
 * room yet, and everything behind a flush_all wait in a FIFO write queue
 * that is retried after each commit batch and on a short timer.  Room for a
 * new item is made before it is allocated: items at the LRU tail without a
 * record in flight or a reader are unlinked at once, each with a DEL op in
 * the same record as the PUT that needed the room, so backups drop them in
 * the same order.  Dead items are dropped silently: backups expire by their
 * own clock.
 *
 * The meta commands' marks (stale, recache won, base64 key) and the fetched
 * bit are kept on the primary's items only; records do not carry them, so a
 * promoted backup starts without them (docs/compat.md). */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "cluster.h"
#include "arith.h"
#include "store_rules.h"
#include "engine.h"
#include "hash.h"
#include "items.h"
#include "link.h"
#include "pbr_role.h"
#include "pbr_store.h"
#include "pending.h"
#include "printable.h"
#include "snapshot.h"
#include "record.h"
#include "sender.h"
#include "writeq.h"

/* Backpressure: bytes of records the sender may hold (sent, not yet stable
 * and committed) before new mutations wait in the queue.  FULL and SEMI use
 * the coding group's bound; ASYNC lets the primary run as far ahead of a
 * slow backup as Redis lets a master's replica output buffer grow (its soft
 * limit) - the price of replying first, and what a kill of the primary
 * loses (docs/pbr.md). */
#define PRIMARY_MAX_BACKLOG (2u << 20)
#define PRIMARY_MAX_BACKLOG_ASYNC (64u << 20)
#define PRIMARY_EVICT_TRIES 200         /* LRU items looked at per allocation */
#define PRIMARY_MAX_VICTIMS PRIMARY_EVICT_TRIES
#define PRIMARY_MAX_OPS (PRIMARY_MAX_VICTIMS + 2)
#define PRIMARY_ALLOC_SLACK 4096        /* malloc rounding beyond an item's size */
#define PRIMARY_RETRY_USEC 1000         /* queue retry while something waits */

/* Result of trying a mutation now. */
enum try_result {
    TRY_DONE,      /* final outcome in res (nothing sent, or ASYNC: sent and committed) */
    TRY_SENT,      /* a record carries it; done() is called when it commits */
    TRY_BLOCKED    /* cannot proceed yet; stays in (or goes to) the write queue */
};

/* What committing a record does to our store (copied into its pending entry). */
struct effect {
    enum pending_kind kind;
    struct item *it;              /* PUT */
    uint64_t cas;                 /* PUT, MARK */
    rel_time_t exptime;           /* TOUCH, MARK */
    uint8_t marks;                /* MARK */
};

struct primary {
    struct engine engine;
    struct event_base *base;
    int group, m, verbose;
    enum sender_sync sync;
    struct mc_clock *clock;       /* the shared ones (pbr_role.h) */
    struct item_store *store;     /* committed items; eviction is ours, not the store's */
    bool evict, cas_enabled;
    struct sender tx;
    size_t max_backlog;           /* PRIMARY_MAX_BACKLOG(_ASYNC) */
    struct pending_list pending;  /* records sent, not committed */

    struct writeq queue;          /* mutations waiting to be tried again */
    struct event *retry_ev;

    uint64_t flush_xid;           /* a FLUSH record in flight until committed */
    bool flush_armed;             /* flush_all with a delay */
    rel_time_t flush_at;

    /* the record under construction */
    struct rec_op *ops;
    uint32_t nops;
    char (*victims)[ITEM_KEY_MAX];  /* keys of items evicted for it */
    uint32_t nvictims;

    uint64_t evictions, reclaimed, blocked_waits;

    struct pbr_shared *sh;
    bool confirmed;               /* the coordinator said we are the primary */
    struct snapshot *snap[PBR_MAX_MEMBERS + 1];   /* rebuilding members */
};

static struct primary *pe_of(struct engine *e)
{
    return e->priv;
}

__attribute__((format(printf, 2, 3)))
static void pe_log(const struct primary *pe, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cocytus-server primary g%d: %s\n", pe->group, msg);
}

static const char *sync_name(enum sender_sync s)
{
    return s == SENDER_SYNC_SEMI ? "semi" : s == SENDER_SYNC_ASYNC ? "async" : "full";
}

static uint64_t visible_cas(const struct primary *pe, uint64_t cas)
{
    return pe->cas_enabled ? cas : 0;
}

/* With cas disabled (-C) every comparison passes, as in memcached. */
static bool cas_matches(const struct primary *pe, const struct item *it, uint64_t want)
{
    return store_cas_matches(pe->cas_enabled, it->cas, want);
}

static bool cas_condition_ok(const struct primary *pe, const struct eng_mutation *m,
                             const struct item *it)
{
    return m->cas == 0 || cas_matches(pe, it, m->cas);
}

static bool flush_in_flight(const struct primary *pe)
{
    return pe->flush_xid > pe->tx.committed;
}

/* ---- the record under construction ---- */

static void begin_record(struct primary *pe)
{
    pe->nops = 0;
    pe->nvictims = 0;
}

static struct rec_op *op_push(struct primary *pe, uint8_t type)
{
    struct rec_op *op = &pe->ops[pe->nops++];
    memset(op, 0, sizeof(*op));
    op->type = type;
    return op;
}

static void op_del_key(struct primary *pe, const char *key, size_t nkey)
{
    struct rec_op *op = op_push(pe, ROP_DEL);
    op->key = key;
    op->nkey = (uint8_t)nkey;
}

/* PUT of it's key, flags, exptime and length; the value is the payload. */
static void op_put(struct primary *pe, const struct item *it, rel_time_t exptime, uint64_t cas)
{
    struct rec_op *op = op_push(pe, ROP_PUT);
    op->key = item_key(it);
    op->nkey = it->nkey;
    op->off = 0;
    op->nbytes = it->nbytes;
    op->flags = it->flags;
    op->exptime = pbr_abs_exptime(pe->clock, exptime);
    op->cas = cas;
}

/* Send the record under construction; its pending entry says what commit
 * does here.  In ASYNC mode it is committed before this returns. */
static enum try_result send_record(struct primary *pe, const struct effect *ef, const char *key,
                                   size_t nkey, uint64_t hv, const char *payload, uint32_t len,
                                   eng_done_fn done, void *cookie, const struct eng_result *res)
{
    uint64_t xid = sender_next_xid(&pe->tx);
    struct pending *p = pending_push(&pe->pending, xid, ef->kind, key, nkey, hv);
    if (p == NULL) {
        char shown[ITEM_KEY_MAX + 1];
        pe_log(pe, "out of memory recording xid %" PRIu64 " (key %s) in flight", xid,
               printable_copy(shown, sizeof(shown), key, nkey));
        abort();
    }
    p->it = ef->it;
    p->cas = ef->cas;
    p->exptime = ef->exptime;
    p->marks = ef->marks;
    sender_send(&pe->tx, pe->nops, pe->ops, 0, (const uint8_t *)payload, len, done, cookie, res);
    begin_record(pe);
    return pe->sync == SENDER_SYNC_ASYNC ? TRY_DONE : TRY_SENT;
}

/* Evictions made for a mutation that then sent nothing still reach the
 * backups, in a record of their own. */
static void flush_stray_ops(struct primary *pe)
{
    static const struct effect none = { .kind = PENDING_NONE };
    if (pe->nops > 0)
        send_record(pe, &none, NULL, 0, 0, NULL, 0, NULL, NULL, NULL);
}

static enum try_result finish_now(struct primary *pe, struct eng_result *res, eng_status st)
{
    flush_stray_ops(pe);
    res->status = st;
    return TRY_DONE;
}

/* ---- room for new items ---- */

static bool may_unlink(const struct primary *pe, const struct item *it)
{
    return it->refcount == 0 &&
           pending_find(&pe->pending, item_key(it), it->nkey,
                        hash_key(item_key(it), it->nkey)) == NULL;
}

/* Evicts a live item: its key goes into a DEL op of the record. */
static void evict_item(struct primary *pe, struct item *it)
{
    char *key = pe->victims[pe->nvictims++];
    memcpy(key, item_key(it), it->nkey);
    op_del_key(pe, key, it->nkey);
    pe->evictions++;
    item_unlink(pe->store, it, hash_key(item_key(it), it->nkey));
}

/* Unlinks LRU-tail items without a record in flight or a reader until need
 * more bytes fit the limit: dead ones silently, live ones (when eviction is
 * on) with a DEL op.  True when need fits. */
static bool make_room(struct primary *pe, size_t need)
{
    struct item_store *s = pe->store;
    struct item *it = s->lru_tail;
    int tries = 0;
    while (s->mem_used + need > s->mem_limit) {
        if (it == NULL || tries++ >= PRIMARY_EVICT_TRIES || pe->nvictims >= PRIMARY_MAX_VICTIMS)
            return false;
        struct item *prev = it->prev;
        if (may_unlink(pe, it)) {
            if (item_is_dead(s, it)) {
                pe->reclaimed++;
                item_unlink(s, it, hash_key(item_key(it), it->nkey));
            } else if (pe->evict) {
                evict_item(pe, it);
            }
        }
        it = prev;
    }
    return true;
}

/* A new unlinked item, room made first.  NULL with *st = ENG_TOO_LARGE or
 * ENG_NO_MEMORY. */
static struct item *new_item(struct primary *pe, const char *key, size_t nkey, uint32_t flags,
                             rel_time_t exptime, size_t len, eng_status *st)
{
    size_t total = sizeof(struct item) + nkey + len + 2;
    if (total > pe->store->item_size_max) {
        *st = ENG_TOO_LARGE;
        return NULL;
    }
    make_room(pe, total + total / 64 + PRIMARY_ALLOC_SLACK);
    return item_alloc(pe->store, key, nkey, flags, exptime, len, st);
}

/* No room: wait if records in flight will free some (replaced items) or
 * make keys evictable; otherwise out of memory. */
static enum try_result no_space(struct primary *pe, struct eng_result *res)
{
    bool coming = sender_in_flight(&pe->tx);
    flush_stray_ops(pe);
    if (coming) {
        pe->blocked_waits++;
        return TRY_BLOCKED;
    }
    res->status = ENG_NO_MEMORY;
    return TRY_DONE;
}

static enum try_result alloc_failed(struct primary *pe, eng_status st, struct eng_result *res)
{
    if (st == ENG_NO_MEMORY)
        return no_space(pe, res);
    return finish_now(pe, res, st);
}

/* Send a PUT of the new item it; it is linked when the record commits. */
static enum try_result put_item(struct primary *pe, struct item *it, uint64_t hv, uint64_t cas,
                                eng_done_fn done, void *cookie, struct eng_result *res)
{
    struct effect ef = { .kind = PENDING_PUT, .it = it, .cas = cas };
    op_put(pe, it, it->exptime, cas);
    res->status = ENG_SUCCESS;
    res->cas = visible_cas(pe, cas);
    return send_record(pe, &ef, item_key(it), it->nkey, hv, item_value(it), it->nbytes, done,
                       cookie, res);
}

/* ---- mutations ---- */

static void compose_value(const struct eng_mutation *m, const struct item *old, char *dst)
{
    if (m->op == ENG_OP_APPEND) {
        memcpy(dst, item_value((struct item *)old), old->nbytes);
        memcpy(dst + old->nbytes, m->data, m->nbytes);
    } else if (m->op == ENG_OP_PREPEND) {
        memcpy(dst, m->data, m->nbytes);
        memcpy(dst + m->nbytes, item_value((struct item *)old), old->nbytes);
    } else if (m->nbytes > 0) {
        memcpy(dst, m->data, m->nbytes);
    }
}

static enum try_result try_store(struct primary *pe, const struct eng_mutation *m, uint64_t hv,
                                 struct item *old, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    eng_status st = store_outcome(m, old != NULL, old ? old->cas : 0, pe->cas_enabled);
    if (st != ENG_SUCCESS)
        return finish_now(pe, res, st);
    bool concat = m->op == ENG_OP_APPEND || m->op == ENG_OP_PREPEND;
    size_t len = m->nbytes + (concat ? old->nbytes : 0);
    uint32_t flags = concat ? old->flags : m->flags;
    rel_time_t exptime = concat ? old->exptime : clock_exptime(pe->clock, m->exptime);
    if (store_is_stale(m, old != NULL, old ? old->cas : 0, pe->cas_enabled))
        exptime = old->exptime;     /* memcached keeps the TTL of a stale set */
    /* (old may be evicted by new_item's room-making unless referenced:
     * everything needed of it is read first) */
    uint8_t marks = store_marks(m, old != NULL, old ? old->cas : 0, old ? item_marks(old) : 0,
                                pe->cas_enabled);
    /* A reader's reference keeps the old value from being evicted meanwhile. */
    if (concat && !item_ref(old)) {
        res->msg = "item busy";
        return finish_now(pe, res, ENG_FAILED);
    }
    struct item *it = new_item(pe, m->key, m->nkey, flags, exptime, len, &st);
    if (it != NULL) {
        compose_value(m, old, item_value(it));
        item_set_marks(it, marks);
    }
    if (concat)
        item_release(pe->store, old);
    if (it == NULL)
        return alloc_failed(pe, st, res);
    return put_item(pe, it, hv, item_next_cas(pe->store), done, cookie, res);
}

static enum try_result try_arith(struct primary *pe, const struct eng_mutation *m, uint64_t hv,
                                 struct item *old, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    uint64_t v;
    uint32_t flags;
    rel_time_t exptime;
    if (old == NULL) {
        if (!m->create)
            return finish_now(pe, res, ENG_NOT_FOUND);
        v = m->initial;
        flags = m->flags;
        exptime = clock_exptime(pe->clock, m->exptime);
    } else {
        /* memcached's order: empty or chunked values, the cas, the number */
        if (arith_rejected_early(old->nkey, old->nbytes, old->flags, pe->cas_enabled))
            return finish_now(pe, res, ENG_NON_NUMERIC);
        if (!cas_condition_ok(pe, m, old))
            return finish_now(pe, res, ENG_EXISTS);
        if (!arith_parse_u64(item_value(old), old->nbytes, &v))
            return finish_now(pe, res, ENG_NON_NUMERIC);
        v = arith_apply(m->op, v, m->delta);
        flags = old->flags;
        exptime = old->exptime;
    }
    /* memcached's rule (arith.h): a result that fits the old length keeps
     * it, padded with spaces, and the item's marks; else the digits alone. */
    size_t n = arith_result_len(v, old ? old->nbytes : 0, old != NULL && old->refcount == 0);
    bool in_place = old != NULL && old->refcount == 0 && n == old->nbytes;
    if (in_place && m->touch)       /* ma T: memcached sets the TTL of an in-place result */
        exptime = clock_exptime(pe->clock, m->exptime);
    /* (read of old before new_item, which may evict it) */
    uint8_t marks = in_place ? (uint8_t)(item_marks(old) |
                                         ((old->iflags & ITEM_FETCHED) ? ENG_MARK_FETCHED : 0))
                             : m->marks;
    eng_status st;
    struct item *it = new_item(pe, m->key, m->nkey, flags, exptime, n, &st);
    if (it == NULL)
        return alloc_failed(pe, st, res);
    arith_write(item_value(it), v, n);
    item_set_marks(it, marks);
    res->value = v;
    res->created = old == NULL;
    return put_item(pe, it, hv, item_next_cas(pe->store), done, cookie, res);
}

static enum try_result try_delete(struct primary *pe, const struct eng_mutation *m, uint64_t hv,
                                  struct item *old, eng_done_fn done, void *cookie,
                                  struct eng_result *res)
{
    if (old == NULL)
        return finish_now(pe, res, ENG_NOT_FOUND);
    if (!cas_condition_ok(pe, m, old))
        return finish_now(pe, res, ENG_EXISTS);
    struct effect ef = { .kind = PENDING_DEL };
    op_del_key(pe, m->key, m->nkey);
    res->status = ENG_SUCCESS;
    return send_record(pe, &ef, m->key, m->nkey, hv, NULL, 0, done, cookie, res);
}

/* A touch replicates as a PUT of the same value and cas with the new
 * exptime; here it only changes the exptime when it commits. */
static enum try_result try_touch(struct primary *pe, const struct eng_mutation *m, uint64_t hv,
                                 struct item *old, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    if (old == NULL)
        return finish_now(pe, res, ENG_NOT_FOUND);
    if (!cas_condition_ok(pe, m, old))
        return finish_now(pe, res, ENG_EXISTS);
    struct effect ef = { .kind = PENDING_TOUCH,
                         .exptime = clock_exptime(pe->clock, m->exptime) };
    op_put(pe, old, ef.exptime, old->cas);
    res->status = ENG_SUCCESS;
    res->cas = visible_cas(pe, old->cas);
    return send_record(pe, &ef, m->key, m->nkey, hv, item_value(old), old->nbytes, done,
                       cookie, res);
}

/* ENG_OP_MARK (md I, mg's recache win).  Marks alone change at once (they
 * are not replicated); a new cas or TTL replicates as a PUT of the same
 * value, and the marks come with its commit. */
static enum try_result try_mark(struct primary *pe, const struct eng_mutation *m, uint64_t hv,
                                struct item *old, eng_done_fn done, void *cookie,
                                struct eng_result *res)
{
    if (old == NULL)
        return finish_now(pe, res, ENG_NOT_FOUND);
    if (!cas_condition_ok(pe, m, old))
        return finish_now(pe, res, ENG_EXISTS);
    uint8_t marks = (uint8_t)((item_marks(old) | m->marks) & ~m->marks_clear);
    if (!m->new_cas && !m->touch) {
        item_set_marks(old, marks);
        res->cas = visible_cas(pe, old->cas);
        return finish_now(pe, res, ENG_SUCCESS);
    }
    struct effect ef = {
        .kind = PENDING_MARK, .marks = marks,
        .cas = m->new_cas ? item_next_cas(pe->store) : old->cas,
        .exptime = m->touch ? clock_exptime(pe->clock, m->exptime) : old->exptime,
    };
    op_put(pe, old, ef.exptime, ef.cas);
    res->status = ENG_SUCCESS;
    res->cas = visible_cas(pe, ef.cas);
    return send_record(pe, &ef, m->key, m->nkey, hv, item_value(old), old->nbytes, done,
                       cookie, res);
}

/* flush_all: a barrier.  It waits for an empty pipeline and holds every
 * later mutation until it commits.  With a delay it is armed for tick(). */
static enum try_result try_flush(struct primary *pe, const struct eng_mutation *m,
                                 eng_done_fn done, void *cookie, struct eng_result *res)
{
    if (m->exptime > 0) {
        rel_time_t at = clock_exptime(pe->clock, m->exptime);
        if (at > pe->clock->now) {
            pe->flush_armed = true;
            pe->flush_at = at;
            return finish_now(pe, res, ENG_SUCCESS);
        }
    }
    if (sender_in_flight(&pe->tx))
        return TRY_BLOCKED;
    pe->flush_armed = false;
    struct effect ef = { .kind = PENDING_FLUSH };
    op_push(pe, ROP_FLUSH);
    pe->flush_xid = sender_next_xid(&pe->tx);
    res->status = ENG_SUCCESS;
    return send_record(pe, &ef, NULL, 0, 0, NULL, 0, done, cookie, res);
}

static enum try_result try_keyed(struct primary *pe, const struct eng_mutation *m,
                                 eng_done_fn done, void *cookie, struct eng_result *res)
{
    uint64_t hv = hash_key(m->key, m->nkey);
    if (pending_find(&pe->pending, m->key, m->nkey, hv) != NULL)
        return TRY_BLOCKED;
    enum item_miss why;
    struct item *old = item_lookup(pe->store, m->key, m->nkey, hv, &why);
    switch (m->op) {
    case ENG_OP_SET: case ENG_OP_ADD: case ENG_OP_REPLACE:
    case ENG_OP_APPEND: case ENG_OP_PREPEND: case ENG_OP_CAS:
        return try_store(pe, m, hv, old, done, cookie, res);
    case ENG_OP_INCR: case ENG_OP_DECR:
        return try_arith(pe, m, hv, old, done, cookie, res);
    case ENG_OP_DELETE:
        return try_delete(pe, m, hv, old, done, cookie, res);
    case ENG_OP_TOUCH:
        return try_touch(pe, m, hv, old, done, cookie, res);
    case ENG_OP_MARK:
        return try_mark(pe, m, hv, old, done, cookie, res);
    default:
        res->msg = "unsupported operation";
        return finish_now(pe, res, ENG_FAILED);
    }
}

static bool too_large(const struct primary *pe, const struct eng_mutation *m)
{
    bool stores = m->op == ENG_OP_SET || m->op == ENG_OP_ADD || m->op == ENG_OP_REPLACE ||
                  m->op == ENG_OP_APPEND || m->op == ENG_OP_PREPEND || m->op == ENG_OP_CAS;
    return stores && sizeof(struct item) + m->nkey + m->nbytes + 2 > pe->store->item_size_max;
}

static enum try_result try_mutation(struct primary *pe, const struct eng_mutation *m,
                                    eng_done_fn done, void *cookie, struct eng_result *res)
{
    memset(res, 0, sizeof(*res));
    begin_record(pe);
    if (pe->tx.refusing) {
        res->msg = "primary restarted without its state; writes refused until recovery";
        return finish_now(pe, res, ENG_FAILED);
    }
    if (!pe->confirmed || flush_in_flight(pe) || sender_backlog(&pe->tx) > pe->max_backlog)
        return TRY_BLOCKED;
    if (m->op == ENG_OP_FLUSH)
        return try_flush(pe, m, done, cookie, res);
    if (m->nkey == 0 || m->nkey > ITEM_KEY_MAX) {
        res->msg = "bad key length";
        return finish_now(pe, res, ENG_FAILED);
    }
    if (too_large(pe, m))
        return finish_now(pe, res, ENG_TOO_LARGE);
    return try_keyed(pe, m, done, cookie, res);
}

/* ---- the write queue ---- */

/* A timer already set stays as it is: adding it again would push it back,
 * and writes queued faster than once per PRIMARY_RETRY_USEC would then
 * never be retried (ASYNC has no commit batch to retry them after). */
static void arm_retry(struct primary *pe)
{
    struct timeval tv = { 0, PRIMARY_RETRY_USEC };
    if (!writeq_empty(&pe->queue) && !evtimer_pending(pe->retry_ev, NULL))
        event_add(pe->retry_ev, &tv);
}

static bool enqueue(struct primary *pe, const struct eng_mutation *m, eng_done_fn done,
                    void *cookie)
{
    if (!writeq_push(&pe->queue, m, done, cookie))
        return false;
    arm_retry(pe);
    return true;
}

static enum writeq_retry retry_queued(void *ctx, const struct writeq_entry *e,
                                      struct eng_result *res)
{
    switch (try_mutation(ctx, &e->m, e->done, e->cookie, res)) {
    case TRY_BLOCKED:
        return WQ_WAIT;
    case TRY_DONE:
        return WQ_ANSWER;
    default:
        return WQ_SENT;
    }
}

/* Retry queued mutations in order until one still has to wait. */
static void drain_queue(struct primary *pe)
{
    if (!writeq_drain(&pe->queue, retry_queued, pe))
        arm_retry(pe);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    drain_queue(arg);
}

/* ---- commit ---- */

static void commit_put(struct primary *pe, struct pending *p)
{
    struct item_store *s = pe->store;
    struct item *old = assoc_find(&s->table, p->key, p->nkey, p->hv);
    if (old != NULL)
        item_replace(s, old, p->it, p->hv);
    else
        item_link(s, p->it, p->hv);
    p->it->cas = p->cas;
    p->it = NULL;
}

static void commit_del(struct primary *pe, const struct pending *p)
{
    struct item *it = assoc_find(&pe->store->table, p->key, p->nkey, p->hv);
    if (it != NULL)
        item_unlink(pe->store, it, p->hv);
}

static void commit_touch(struct primary *pe, const struct pending *p)
{
    struct item *it = assoc_find(&pe->store->table, p->key, p->nkey, p->hv);
    if (it == NULL)
        return;
    it->exptime = p->exptime;
    it->iflags |= ITEM_FETCHED;     /* memcached counts a touch as a read */
    item_bump(pe->store, it);
}

static void commit_mark(struct primary *pe, const struct pending *p)
{
    struct item *it = assoc_find(&pe->store->table, p->key, p->nkey, p->hv);
    if (it == NULL)
        return;
    it->cas = p->cas;
    it->exptime = p->exptime;
    item_set_marks(it, p->marks);
}

/* The sender's commit callback: record r takes effect in our store. */
static void primary_commit(void *ctx, const struct record *r)
{
    struct primary *pe = ctx;
    struct pending *p = pending_pop(&pe->pending);
    if (p == NULL || p->xid != r->xid) {
        pe_log(pe, "BUG: committing xid %" PRIu64 " but the oldest record in flight is %" PRIu64,
               r->xid, p != NULL ? p->xid : 0);
        abort();
    }
    switch (p->kind) {
    case PENDING_PUT:
        commit_put(pe, p);
        break;
    case PENDING_DEL:
        commit_del(pe, p);
        break;
    case PENDING_TOUCH:
        commit_touch(pe, p);
        break;
    case PENDING_MARK:
        commit_mark(pe, p);
        break;
    case PENDING_FLUSH:
        pbr_unlink_all(pe->store);
        break;
    case PENDING_NONE:
        break;
    }
    free(p);
}

static void primary_after_commit(void *ctx)
{
    drain_queue(ctx);
}

/* Writes waiting in the queue can never commit any more. */
static void primary_refused(void *ctx)
{
    struct primary *pe = ctx;
    struct eng_result res = { .status = ENG_FAILED,
                              .msg = "primary restarted without its state" };
    writeq_fail_all(&pe->queue, &res);
}

static void primary_joining_up(void *ctx, int member, uint64_t peer_xid);

static void primary_lease(void *ctx)
{
    struct primary *pe = ctx;
    if (pe->sh->lease)
        pe->sh->lease(pe->sh->lease_arg);
}

static const struct sender_callbacks primary_sender_callbacks = {
    .commit = primary_commit,
    .after_commit = primary_after_commit,
    .refused = primary_refused,
    .rebuilding_up = primary_joining_up,
    .lease = primary_lease,
};

/* ---- engine operations ---- */

static eng_status primary_get(struct engine *e, const char *key, size_t nkey,
                              struct eng_value *out, struct eng_result *res)
{
    struct primary *pe = pe_of(e);
    eng_status st = pbr_get(pe->store, pe->cas_enabled, key, nkey, out, res);
    if (st == ENG_SUCCESS) {
        const struct item *it = out->handle;
        out->exptime = pbr_abs_exptime(pe->clock, it->exptime);
    }
    return st;
}

/* The meta commands' read: marks, fetched and the seconds since the item
 * was written as they were; a peek leaves LRU and fetched alone. */
static eng_status primary_get_ex(struct engine *e, const char *key, size_t nkey, unsigned opts,
                                 struct eng_value *out, struct eng_result *res)
{
    struct primary *pe = pe_of(e);
    memset(res, 0, sizeof(*res));
    res->status = ENG_NOT_FOUND;
    if (nkey == 0 || nkey > ITEM_KEY_MAX)
        return ENG_NOT_FOUND;
    enum item_miss why = ITEM_MISS_ABSENT;
    struct item *it = item_lookup(pe->store, key, nkey, hash_key(key, nkey), &why);
    if (it == NULL || !item_ref(it))
        return ENG_NOT_FOUND;
    out->marks = item_marks(it);
    out->fetched = (it->iflags & ITEM_FETCHED) != 0;
    out->idle = item_write_age(pe->store, it);
    if (!(opts & ENG_GET_PEEK)) {
        it->iflags |= ITEM_FETCHED;
        item_bump(pe->store, it);
    }
    out->key = item_key(it);
    out->nkey = it->nkey;
    out->data = item_value(it);
    out->nbytes = it->nbytes;
    out->flags = it->flags;
    out->cas = visible_cas(pe, it->cas);
    out->handle = it;
    out->exptime = pbr_abs_exptime(pe->clock, it->exptime);
    res->status = ENG_SUCCESS;
    res->cas = out->cas;
    return ENG_SUCCESS;
}

/* Keys of one slot (slot migration): live items of the committed store. */
static enum eng_walk primary_slot_keys(struct engine *e, unsigned slot,
                                       struct eng_cursor *cursor, size_t budget,
                                       void (*fn)(void *ctx, const char *key, size_t nkey),
                                       void *ctx)
{
    return items_slot_keys(pe_of(e)->store, slot, cursor, budget, fn, ctx);
}

static void primary_release(struct engine *e, void *handle)
{
    pbr_release(pe_of(e)->store, handle);
}

static eng_status primary_mutate(struct engine *e, const struct eng_mutation *m,
                                 struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct primary *pe = pe_of(e);
    enum try_result tr = TRY_BLOCKED;
    if (writeq_empty(&pe->queue))
        tr = try_mutation(pe, m, done, cookie, res);
    if (tr == TRY_DONE)
        return res->status;
    if (tr == TRY_BLOCKED && !enqueue(pe, m, done, cookie)) {
        memset(res, 0, sizeof(*res));
        res->status = ENG_NO_MEMORY;
        return ENG_NO_MEMORY;
    }
    return ENG_PENDING;
}

static bool primary_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct primary *pe = pe_of(e);
    if (strcmp(group, "settings") == 0) {
        emit(ctx, "scheme", "pbr:%d", pe->m);
        emit(ctx, "sync", "%s", sync_name(pe->sync));
        emit(ctx, "pbr_group", "%d", pe->group);
        return true;
    }
    if (strcmp(group, "items") == 0 || strcmp(group, "slabs") == 0 ||
        strcmp(group, "sizes") == 0)
        return true;
    if (group[0] != '\0')
        return false;
    pbr_store_stats(pe->store, emit, ctx);
    emit(ctx, "evictions", "%" PRIu64, pe->evictions);
    emit(ctx, "xid", "%" PRIu64, pe->tx.xid);
    emit(ctx, "stable_xid", "%" PRIu64, pe->tx.stable);
    emit(ctx, "committed_xid", "%" PRIu64, pe->tx.committed);
    emit(ctx, "records_sent", "%" PRIu64, pe->tx.records_sent);
    emit(ctx, "write_queue", "%zu", pe->queue.len);
    emit(ctx, "blocked_waits", "%" PRIu64, pe->blocked_waits);
    return true;
}

static void primary_stats_reset(struct engine *e)
{
    struct primary *pe = pe_of(e);
    memset(&pe->store->stats, 0, sizeof(pe->store->stats));
    pe->evictions = 0;
    pe->reclaimed = 0;
    pe->blocked_waits = 0;
}

/* A delayed flush_all that is due goes through the write queue like any
 * client's. */
static void fire_delayed_flush(struct primary *pe)
{
    struct eng_mutation m = { .op = ENG_OP_FLUSH };
    struct eng_result res;
    pe->flush_armed = false;
    if (!writeq_empty(&pe->queue) || try_mutation(pe, &m, NULL, NULL, &res) == TRY_BLOCKED)
        enqueue(pe, &m, NULL, NULL);
}

static void primary_tick(struct engine *e, time_t now)
{
    struct primary *pe = pe_of(e);
    clock_set(pe->clock, now);
    if (pe->flush_armed && pe->clock->now >= pe->flush_at)
        fire_delayed_flush(pe);
    item_store_tick(pe->store);
}

/* ---- admin: cocytus info | meta ---- */

static size_t primary_meta_bytes(const struct primary *pe)
{
    return pbr_store_meta_bytes(pe->store) + pending_bytes(&pe->pending) +
           sender_backlog(&pe->tx);
}

static void admin_info(struct primary *pe, const struct pbr_reply *r)
{
    const struct item_store *s = pe->store;
    pbr_reply_printf(r, "STAT role primary\r\nSTAT group %d\r\nSTAT index 0\r\n", pe->group);
    pbr_reply_printf(r, "STAT m %d\r\nSTAT sync %s\r\n", pe->m, sync_name(pe->sync));
    sender_info(&pe->tx, r->write, r->ctx);
    pbr_reply_printf(r, "STAT items %" PRIu64 "\r\n", s->curr_items);
    pbr_reply_printf(r, "STAT region_used %" PRIu64 "\r\n", s->bytes);
    pbr_reply_printf(r, "STAT mem_used %zu\r\nSTAT mem_limit %zu\r\n", s->mem_used,
                     s->mem_limit);
    pbr_reply_printf(r, "STAT meta_bytes %zu\r\n", primary_meta_bytes(pe));
    pbr_reply_printf(r, "STAT rss %" PRIu64 "\r\n", engine_process_rss());
    pbr_reply_printf(r, "STAT in_flight %zu\r\nSTAT write_queue %zu\r\n", pe->pending.count,
                     pe->queue.len);
    pbr_reply_printf(r, "STAT evictions %" PRIu64 "\r\nSTAT reclaimed %" PRIu64 "\r\n",
                     pe->evictions, pe->reclaimed);
    pbr_reply_printf(r, "END\r\n");
}

static bool primary_admin(struct engine *e, int argc, char **argv, eng_write_fn write,
                          void *ctx)
{
    struct primary *pe = pe_of(e);
    struct pbr_reply r = { .write = write, .ctx = ctx };
    if (argc < 1)
        return false;
    if (strcmp(argv[0], "info") == 0) {
        admin_info(pe, &r);
        return true;
    }
    if (strcmp(argv[0], "meta") == 0) {
        struct pbr_digest d;
        pbr_digest_store(pe->store, pe->clock, &d);
        pbr_reply_meta(&r, &d);
        return true;
    }
    return false;
}

/* ---- rebuilding backups (snapshot.c) and the coordinator's words ---- */

static bool key_in_flight(void *ctx, const struct item *it)
{
    struct primary *pe = ctx;
    return pending_find(&pe->pending, item_key(it), it->nkey,
                        hash_key(item_key(it), it->nkey)) != NULL;
}

static void snapshot_complete(void *ctx, int member)
{
    struct primary *pe = ctx;
    sender_peer_complete(&pe->tx, member);
}

static void stop_snapshot(struct primary *pe, int member)
{
    if (member >= 0 && member <= PBR_MAX_MEMBERS && pe->snap[member]) {
        snapshot_free(pe->snap[member]);
        pe->snap[member] = NULL;
    }
}

/* The sender's joining_up: a rebuilding member's link is up; copy
 * everything to it from the current xid (again, after a link drop). */
static void primary_joining_up(void *ctx, int member, uint64_t peer_xid)
{
    struct primary *pe = ctx;
    if (member < 0 || member > PBR_MAX_MEMBERS)
        return;
    stop_snapshot(pe, member);
    struct snapshot_source src = {
        .store = pe->store, .clock = pe->clock, .tx = &pe->tx, .busy = key_in_flight,
        .complete = snapshot_complete, .ctx = pe, .who = pe->tx.who,
    };
    pe->snap[member] = snapshot_start(&src, pe->base, member);
    if (!pe->snap[member])
        pe_log(pe, "cannot start the snapshot for member %d (held xid %" PRIu64 ")", member,
               peer_xid);
}

bool pbr_primary_reads_ready(struct engine *e)
{
    const struct primary *pe = pe_of(e);
    return pe->confirmed && !pe->tx.refusing;
}

bool pbr_primary_lease_held(struct engine *e)
{
    return sender_lease_held(&pe_of(e)->tx);
}

/* pbr drop <g> <member> | pbr rebuild <g> <member> | pbr confirm <g> */
bool pbr_primary_control(struct engine *e, int argc, char **argv)
{
    struct primary *pe = pe_of(e);
    int member = argc >= 4 ? atoi(argv[3]) : -1;
    if (argc == 3 && strcmp(argv[1], "confirm") == 0) {
        if (!pe->confirmed)
            pe_log(pe, "the coordinator confirms this process as the group's primary");
        pe->confirmed = true;
        arm_retry(pe);
        return true;
    }
    if (argc == 4 && strcmp(argv[1], "drop") == 0) {
        stop_snapshot(pe, member);
        sender_drop_peer(&pe->tx, member);
        return true;
    }
    if (argc == 4 && strcmp(argv[1], "rebuild") == 0) {
        const struct cluster_proc *p = pbr_member_proc(pe->sh->cfg.cluster, pe->group, pe->m,
                                                       member);
        if (!p || member == pe->sh->member || sender_has_peer(&pe->tx, member))
            return true;   /* already on its way, or nonsense: the next check tells */
        stop_snapshot(pe, member);
        if (sender_add_peer_at(&pe->tx, member, p->host, p->link_port, true) == 0)
            pe_log(pe, "rebuilding member %d (%s:%d) from xid %" PRIu64, member, p->host,
                   p->port, pe->tx.xid);
        return true;
    }
    return false;
}

int pbr_primary_lost_peers(struct engine *e, struct eng_lost_peer *out, int max)
{
    struct primary *pe = pe_of(e);
    int n = sender_lost_peers(&pe->tx, out, max), kept = 0;
    for (int i = 0; i < n; i++) {      /* a peer's index is its member number */
        const struct cluster_proc *p = pbr_member_proc(pe->sh->cfg.cluster, pe->group, pe->m,
                                                       out[i].index);
        if (p)
            out[kept++] = (struct eng_lost_peer){ .role = (int)p->role, .index = p->index,
                                                  .down_ms = out[i].down_ms };
    }
    return kept;
}

/* "pbr p <xid> <member>=<f|d|r:done:total:bytes>..." */
size_t pbr_primary_heartbeat(struct engine *e, char *buf, size_t len)
{
    struct primary *pe = pe_of(e);
    int n = snprintf(buf, len, "pbr p %" PRIu64, pe->tx.xid);
    for (int k = 0; k <= pe->m && n > 0 && (size_t)n < len; k++) {
        if (k == pe->sh->member)
            continue;
        if (sender_peer_rebuilding(&pe->tx, k)) {
            uint64_t done = 0, total = 0, bytes = 0;
            if (pe->snap[k])
                snapshot_progress(pe->snap[k], &done, &total, &bytes);
            n += snprintf(buf + n, len - (size_t)n, " %d=r:%" PRIu64 ":%" PRIu64 ":%" PRIu64,
                          k, done, total, bytes);
        } else {
            n += snprintf(buf + n, len - (size_t)n, " %d=%c", k,
                          sender_has_peer(&pe->tx, k) ? 'f' : 'd');
        }
    }
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

/* ---- lifetime ---- */

static void primary_destroy(struct engine *e)
{
    struct primary *pe = pe_of(e);
    static const char gone[] = "this process is no longer the group's primary";
    struct eng_result res = { .status = ENG_FAILED, .msg = gone };
    for (int k = 0; k <= PBR_MAX_MEMBERS; k++)
        stop_snapshot(pe, k);
    sender_fail_waiting(&pe->tx, gone);
    writeq_fail_all(&pe->queue, &res);
    sender_destroy(&pe->tx);
    writeq_destroy(&pe->queue);
    if (pe->pending.buckets != NULL)
        pending_destroy(&pe->pending, pe->store);
    if (pe->retry_ev != NULL)
        event_free(pe->retry_ev);
    free(pe->ops);
    free(pe->victims);
    free(pe);
}

static const struct engine_ops primary_ops = {
    .name = "primary",
    .get = primary_get,
    .get_ex = primary_get_ex,
    .release = primary_release,
    .mutate = primary_mutate,
    .stats = primary_stats,
    .stats_reset = primary_stats_reset,
    .tick = primary_tick,
    .destroy = primary_destroy,
    .admin = primary_admin,
    .slot_keys = primary_slot_keys,
};

static enum sender_sync sender_sync_of(enum cluster_sync s)
{
    switch (s) {
    case SYNC_SEMI: return SENDER_SYNC_SEMI;
    case SYNC_ASYNC: return SENDER_SYNC_ASYNC;
    default: return SENDER_SYNC_FULL;
    }
}

/* Queue timer and record scratch.  0, or -1 when out of memory. */
static int primary_setup(struct primary *pe)
{
    if (pending_init(&pe->pending) != 0)
        return -1;
    pe->retry_ev = evtimer_new(pe->base, on_retry, pe);
    pe->ops = calloc(PRIMARY_MAX_OPS, sizeof(*pe->ops));
    pe->victims = calloc(PRIMARY_MAX_VICTIMS, sizeof(*pe->victims));
    return pe->retry_ev != NULL && pe->ops != NULL && pe->victims != NULL ? 0 : -1;
}

/* Links to the peers, as this member; the stream continues after p->from. */
static int sender_start(struct primary *pe, const struct primary_params *p)
{
    const struct cluster *c = pe->sh->cfg.cluster;
    uint8_t role;
    uint32_t index;
    char who[64];
    snprintf(who, sizeof(who), "primary g%d", pe->group);
    pbr_member_identity(pe->m, pe->sh->member, &role, &index);
    /* No peer yet: the backups are added below, each at its own xid. */
    const struct sender_config sc = {
        .base = pe->base, .cluster = c, .group = pe->group,
        .my_role = (enum link_role)role, .my_index = (int)index, .peer_role = ROLE_BACKUP,
        .sync = pe->sync, .cb = &primary_sender_callbacks, .ctx = pe,
        .who = who, .verbose = pe->verbose, .sq = pe->sh->cfg.sq,
    };
    if (sender_init(&pe->tx, &sc) < 0)
        return -1;
    if (p->from > 0 && sender_continue(&pe->tx, p->from, p->carry) < 0)
        return -1;
    for (int j = 0; j < p->npeers; j++) {
        const struct cluster_proc *pp = pbr_member_proc(c, pe->group, pe->m, p->peers[j]);
        if (!pp || sender_add_peer_at(&pe->tx, p->peers[j], pp->host, pp->link_port, false) < 0)
            return -1;
    }
    return 0;
}

struct engine *pbr_primary_create(const struct primary_params *p)
{
    struct pbr_shared *sh = p->sh;
    const struct cluster *c = sh->cfg.cluster;
    struct primary *pe = calloc(1, sizeof(*pe));
    if (pe == NULL)
        return NULL;
    pe->engine.ops = &primary_ops;
    pe->engine.priv = pe;
    pe->sh = sh;
    pe->store = &sh->store;
    pe->clock = &sh->clock;
    pe->base = sh->cfg.base;
    pe->group = sh->cfg.group;
    pe->m = sh->m;
    pe->verbose = sh->cfg.verbose;
    pe->sync = sender_sync_of(c->sync);
    pe->max_backlog = pe->sync == SENDER_SYNC_ASYNC ? PRIMARY_MAX_BACKLOG_ASYNC
                                                    : PRIMARY_MAX_BACKLOG;
    pe->evict = sh->cfg.evict;
    pe->cas_enabled = sh->cfg.cas_enabled;
    pe->confirmed = p->confirmed;
    pe->store->mem_limit = sh->cfg.mem_limit;
    if (primary_setup(pe) != 0 || sender_start(pe, p) != 0) {
        pe_log(pe, "cannot set up the primary (out of memory, or no links)");
        primary_destroy(&pe->engine);
        return NULL;
    }
    pe_log(pe, "member %d is the primary: PBR(%d), sync %s, memory %zu bytes, %d items, "
           "stream continues after xid %" PRIu64 "%s", sh->member, pe->m, sync_name(pe->sync),
           pe->store->mem_limit, (int)pe->store->curr_items, pe->tx.xid,
           pe->confirmed ? "" : "; writes wait for the coordinator's confirmation");
    return &pe->engine;
}
