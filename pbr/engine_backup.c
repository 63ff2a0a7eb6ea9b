/* engine_backup.c - a backup of a primary-backup group (--role backup).
 *
 * A backup keeps a complete copy of its primary's items in its own item
 * store (memcached/items.c).  It listens for the primary's link; the shared
 * receiver (repl/receiver.c) checks and buffers every record, acknowledges
 * it at once and calls us to apply buffered records in xid order up to the
 * stable xid the next record (or a STABLE frame) carries, exactly as a
 * parity process does.  Applying a record replays its ops: PUT stores the
 * value the payload carries with the primary's flags, exptime and cas, DEL
 * unlinks, FLUSH drops everything.  The store never evicts (the primary
 * decides evictions and sends them as DELs) and has the primary's memory
 * plus a margin; a record that still does not fit marks the primary
 * diverged, loudly, rather than leaving a copy that silently differs.
 *
 * A backup serves no writes, and reads only after `cocytus promote`, which
 * also applies every record received (what a failover would do; the rest
 * of failover comes with recovery). */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cluster.h"
#include "engine.h"
#include "hash.h"
#include "items.h"
#include "link.h"
#include "pbr_store.h"
#include "receiver.h"
#include "record.h"

/* Room beyond the primary's memory: items dead here but already dropped by
 * the primary (clocks tick apart), and an old and a new copy of one item
 * while it is replaced. */
#define BACKUP_MARGIN_DIVISOR 4

struct backup {
    struct engine engine;
    struct event_base *base;
    int group, index, verbose;
    bool cas_enabled;
    struct mc_clock clock;
    struct item_store store;
    struct repl_source src;           /* the primary's records */
    struct repl_receiver *receiver;
    struct link_listener *listener;
    bool promoted;
    uint64_t records_applied;
    uint64_t reclaim_passes;          /* full sweeps forced by a PUT that did not fit */
};

static const char NO_WRITES_MSG[] = "backup: writes go to the primary";
static const char NO_READS_MSG[] = "backup: not promoted; reads go to the primary";

static struct backup *be_of(struct engine *e)
{
    return e->priv;
}

__attribute__((format(printf, 2, 3)))
static void be_log(const struct backup *be, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cocytus-server backup g%d/b%d: %s\n", be->group, be->index, msg);
}

/* ---- applying records ---- */

/* A new item for op, reclaiming every dead item once if it does not fit. */
static struct item *alloc_for_put(struct backup *be, const struct rec_op *op, eng_status *st)
{
    rel_time_t exptime = clock_exptime(&be->clock, op->exptime);
    struct item *it = item_alloc(&be->store, op->key, op->nkey, op->flags, exptime, op->nbytes,
                                 st);
    if (it != NULL || *st != ENG_NO_MEMORY)
        return it;
    be->reclaim_passes++;
    pbr_reclaim_dead(&be->store);
    return item_alloc(&be->store, op->key, op->nkey, op->flags, exptime, op->nbytes, st);
}

static int apply_put(struct backup *be, const struct record *r, const struct rec_op *op)
{
    if (op->off > r->data_len || op->nbytes > r->data_len - op->off)
        return repl_source_mark_diverged(&be->src, r->xid, "PUT of key %.*s: value [%" PRIu64
                                         ", +%" PRIu32 ") outside the %" PRIu32 "-byte payload",
                                         (int)op->nkey, op->key, op->off, op->nbytes,
                                         r->data_len);
    eng_status st;
    struct item *it = alloc_for_put(be, op, &st);
    if (it == NULL)
        return repl_source_mark_diverged(&be->src, r->xid, "PUT of key %.*s (%" PRIu32
                                         " bytes) does not fit: %s (memory used %zu of %zu)",
                                         (int)op->nkey, op->key, op->nbytes,
                                         st == ENG_TOO_LARGE ? "too large" : "out of memory",
                                         be->store.mem_used, be->store.mem_limit);
    memcpy(item_value(it), r->data + op->off, op->nbytes);
    uint64_t hv = hash_key(op->key, op->nkey);
    struct item *old = assoc_find(&be->store.table, op->key, op->nkey, hv);
    if (old != NULL)
        item_replace(&be->store, old, it, hv);
    else
        item_link(&be->store, it, hv);
    it->cas = op->cas;
    return 0;
}

static void apply_del(struct backup *be, const struct rec_op *op)
{
    uint64_t hv = hash_key(op->key, op->nkey);
    struct item *it = assoc_find(&be->store.table, op->key, op->nkey, hv);
    if (it != NULL)
        item_unlink(&be->store, it, hv);
}

/* The receiver's repl_apply_fn: one stable record, in xid order. */
static int apply_record(void *ctx, const struct record *r)
{
    struct backup *be = ctx;
    for (uint32_t i = 0; i < r->nops; i++) {
        const struct rec_op *op = &r->ops[i];
        switch (op->type) {
        case ROP_PUT:
            if (apply_put(be, r, op) != 0)
                return -1;
            break;
        case ROP_DEL:
            apply_del(be, op);
            break;
        case ROP_FLUSH:
            pbr_unlink_all(&be->store);
            break;
        default:
            return repl_source_mark_diverged(&be->src, r->xid,
                                             "op type %u has no meaning for a backup",
                                             (unsigned)op->type);
        }
    }
    be->records_applied++;
    return 0;
}

/* ---- the receiver's hooks ---- */

static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct backup *be = owner;
    return repl_source_apply(&be->src, stable, apply_record, be);
}

static void hook_log(void *owner, const char *line)
{
    be_log(owner, "%s", line);
}

/* ---- client requests ---- */

static eng_status backup_get(struct engine *e, const char *key, size_t nkey,
                             struct eng_value *out, struct eng_result *res)
{
    struct backup *be = be_of(e);
    if (be->promoted)
        return pbr_get(&be->store, be->cas_enabled, key, nkey, out, res);
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = NO_READS_MSG;
    return ENG_FAILED;
}

static void backup_release(struct engine *e, void *handle)
{
    pbr_release(&be_of(e)->store, handle);
}

static eng_status backup_mutate(struct engine *e, const struct eng_mutation *m,
                                struct eng_result *res, eng_done_fn done, void *cookie)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = NO_WRITES_MSG;
    return ENG_FAILED;
}

/* ---- stats ---- */

static void stats_xids(const struct backup *be, eng_stat_fn emit, void *ctx)
{
    struct repl_peer_stats ps;
    repl_receiver_peer_stats(be->receiver, 0, &ps);
    emit(ctx, "applied_xid", "%" PRIu64, be->src.applied_xid);
    emit(ctx, "received_xid", "%" PRIu64, be->src.received_xid);
    emit(ctx, "stable_xid", "%" PRIu64, be->src.stable_xid);
    emit(ctx, "buffered_records", "%zu", be->src.buffer.count);
    emit(ctx, "primary_link", "%s", ps.link_up ? "up" : "down");
    emit(ctx, "primary_records", "%" PRIu64, ps.records);
    emit(ctx, "diverged", "%d", be->src.diverged ? 1 : 0);
    emit(ctx, "promoted", "%d", be->promoted ? 1 : 0);
}

static bool backup_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct backup *be = be_of(e);
    if (strcmp(group, "settings") == 0) {
        emit(ctx, "pbr_group", "%d", be->group);
        emit(ctx, "backup_index", "%d", be->index);
        return true;
    }
    if (strcmp(group, "items") == 0 || strcmp(group, "slabs") == 0 ||
        strcmp(group, "sizes") == 0)
        return true;
    if (group[0] != '\0')
        return false;
    pbr_store_stats(&be->store, emit, ctx);
    stats_xids(be, emit, ctx);
    return true;
}

static void backup_stats_reset(struct engine *e)
{
    struct backup *be = be_of(e);
    memset(&be->store.stats, 0, sizeof(be->store.stats));
    repl_receiver_stats_reset(be->receiver);
}

static void backup_tick(struct engine *e, time_t now)
{
    struct backup *be = be_of(e);
    clock_set(&be->clock, now);
    item_store_tick(&be->store);
}

/* ---- admin: cocytus info | meta | promote ---- */

static size_t backup_meta_bytes(const struct backup *be)
{
    return pbr_store_meta_bytes(&be->store) + be->src.buffer.bytes;
}

static void admin_info(struct backup *be, const struct pbr_reply *r)
{
    const struct item_store *s = &be->store;
    const struct repl_source *src = &be->src;
    struct repl_peer_stats ps;
    repl_receiver_peer_stats(be->receiver, 0, &ps);
    pbr_reply_printf(r, "STAT role backup\r\nSTAT group %d\r\nSTAT index %d\r\n", be->group,
                     be->index);
    pbr_reply_printf(r, "STAT applied_xid %" PRIu64 "\r\nSTAT received_xid %" PRIu64
                     "\r\nSTAT stable_xid %" PRIu64 "\r\n", src->applied_xid,
                     src->received_xid, src->stable_xid);
    pbr_reply_printf(r, "STAT buffered %zu\r\nSTAT buffered_bytes %zu\r\n", src->buffer.count,
                     src->buffer.bytes);
    pbr_reply_printf(r, "STAT primary_link %s\r\nSTAT diverged %d\r\nSTAT promoted %d\r\n",
                     ps.link_up ? "up" : "down", src->diverged ? 1 : 0, be->promoted ? 1 : 0);
    pbr_reply_printf(r, "STAT items %" PRIu64 "\r\n", s->curr_items);
    pbr_reply_printf(r, "STAT region_used %" PRIu64 "\r\n", s->bytes);
    pbr_reply_printf(r, "STAT mem_used %zu\r\nSTAT mem_limit %zu\r\n", s->mem_used,
                     s->mem_limit);
    pbr_reply_printf(r, "STAT meta_bytes %zu\r\n", backup_meta_bytes(be));
    pbr_reply_printf(r, "STAT rss %" PRIu64 "\r\n", engine_process_rss());
    pbr_reply_printf(r, "STAT reclaim_passes %" PRIu64 "\r\n", be->reclaim_passes);
    pbr_reply_printf(r, "END\r\n");
}

/* Apply everything received (the primary is gone or being replaced) and
 * serve reads from now on. */
static void admin_promote(struct backup *be, const struct pbr_reply *r)
{
    const struct repl_source *src = &be->src;
    if (!src->diverged)
        repl_source_apply(&be->src, src->received_xid, apply_record, be);
    if (!be->promoted)
        be_log(be, "promoted: serving reads at applied xid %" PRIu64 " (received %" PRIu64
               ", declared stable %" PRIu64 ")%s", src->applied_xid, src->received_xid,
               src->stable_xid, src->diverged ? "; the primary's stream DIVERGED" : "");
    be->promoted = true;
    pbr_reply_printf(r, "STAT promoted 1\r\nSTAT applied_xid %" PRIu64 "\r\nSTAT diverged %d\r\n"
                     "END\r\n", src->applied_xid, src->diverged ? 1 : 0);
}

static bool backup_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct backup *be = be_of(e);
    struct pbr_reply r = { .write = write, .ctx = ctx };
    if (argc < 1)
        return false;
    if (strcmp(argv[0], "info") == 0) {
        admin_info(be, &r);
        return true;
    }
    if (strcmp(argv[0], "meta") == 0) {
        struct pbr_digest d;
        pbr_digest_store(&be->store, &be->clock, &d);
        pbr_reply_meta(&r, &d);
        return true;
    }
    if (strcmp(argv[0], "promote") == 0) {
        admin_promote(be, &r);
        return true;
    }
    return false;
}

/* ---- lifetime ---- */

static void backup_destroy(struct engine *e)
{
    struct backup *be = be_of(e);
    if (be->listener != NULL)
        link_listener_free(be->listener);
    repl_receiver_free(be->receiver);
    repl_source_destroy(&be->src);
    if (be->store.table.buckets != NULL)
        item_store_destroy(&be->store);
    free(be);
}

static const struct engine_ops backup_ops = {
    .name = "backup",
    .get = backup_get,
    .release = backup_release,
    .mutate = backup_mutate,
    .stats = backup_stats,
    .stats_reset = backup_stats_reset,
    .tick = backup_tick,
    .destroy = backup_destroy,
    .admin = backup_admin,
};

/* The cluster's view of this process, or NULL after a message. */
static const struct cluster_proc *own_proc(const struct engine_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    if (c == NULL || c->scheme != SCHEME_PBR) {
        fprintf(stderr, "cocytus-server: the backup role needs a cluster file with scheme pbr\n");
        return NULL;
    }
    const struct cluster_proc *me = cluster_find(c, cfg->group, ROLE_BACKUP, cfg->index);
    if (me == NULL)
        fprintf(stderr, "cocytus-server: the cluster has no backup %d in group %d\n",
                cfg->index, cfg->group);
    return me;
}

static int store_start(struct backup *be, const struct engine_config *cfg)
{
    struct engine_config store_cfg = *cfg;
    store_cfg.evict = false;
    store_cfg.mem_limit = cfg->mem_limit + cfg->mem_limit / BACKUP_MARGIN_DIVISOR +
                          2 * cfg->item_size_max;
    clock_init(&be->clock, cfg->started);
    clock_set(&be->clock, time(NULL));
    return item_store_init(&be->store, &store_cfg, &be->clock);
}

static int receiver_start(struct backup *be)
{
    struct repl_source *sources[1] = { &be->src };
    struct repl_receiver_config cfg = {
        .base = be->base,
        .sender_role = LINK_ROLE_PRIMARY,
        .nsources = 1,
        .sources = sources,
        .tag = "primary",
        .noun = "primary",
        .wrong_role = "a backup takes a link from its primary only",
        .no_such = "a group has one primary, index 0",
        .verbose = be->verbose != 0,
        .hooks = { .apply = hook_apply, .log = hook_log },
        .owner = be,
    };
    be->receiver = repl_receiver_new(&cfg);
    return be->receiver != NULL ? 0 : -1;
}

static int listener_start(struct backup *be, const struct cluster *c,
                          const struct cluster_proc *me)
{
    be->listener = link_listen(be->base, me->host, me->link_port, c->name, (uint32_t)be->group,
                               c->secret, repl_receiver_accept, be->receiver);
    if (be->listener == NULL) {
        be_log(be, "cannot listen for the primary on %s:%d", me->host, me->link_port);
        return -1;
    }
    be_log(be, "PBR(%d), memory %zu bytes (the primary's plus a margin), waiting for the "
           "primary on %s:%d", c->n - 1, be->store.mem_limit, me->host,
           link_listener_port(be->listener));
    return 0;
}

struct engine *engine_backup_new(const struct engine_config *cfg)
{
    const struct cluster_proc *me = own_proc(cfg);
    if (me == NULL)
        return NULL;
    struct backup *be = calloc(1, sizeof(*be));
    if (be == NULL)
        return NULL;
    be->engine.ops = &backup_ops;
    be->engine.priv = be;
    be->base = cfg->base;
    be->group = cfg->group;
    be->index = cfg->index;
    be->verbose = cfg->verbose;
    be->cas_enabled = cfg->cas_enabled;
    repl_source_init(&be->src);
    if (store_start(be, cfg) != 0 || receiver_start(be) != 0) {
        be_log(be, "out of memory setting up the store");
        backup_destroy(&be->engine);
        return NULL;
    }
    if (listener_start(be, cfg->cluster, me) != 0) {
        backup_destroy(&be->engine);
        return NULL;
    }
    return &be->engine;
}
