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
 * also applies every record received.  Failover (docs/pbr.md): the
 * coordinator fences the dead primary's stream here ("pbr fence"), tells
 * the backup which member leads from now on ("pbr follow": only that
 * member's link is taken), and engine_pbr.c turns the chosen backup into a
 * primary with pbr_backup_handover().  A backup that lost its state waits
 * for a snapshot (snapshot.c): while it is rebuilt it applies records as
 * they arrive, so that each chunk lands after every record sent before
 * it; the end frame makes it complete. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "cluster.h"
#include "engine.h"
#include "hash.h"
#include "items.h"
#include "link.h"
#include "pbr_role.h"
#include "pbr_store.h"
#include "printable.h"
#include "receiver.h"
#include "frame.h"
#include "record.h"

/* Room beyond the primary's memory: items dead here but already dropped by
 * the primary (clocks tick apart), and an old and a new copy of one item
 * while it is replaced. */
#define BACKUP_MARGIN_DIVISOR 4
#define FENCE_POLL_USEC 5000
#define FENCE_WAIT_POLLS 100       /* 500 ms for the old primary's link to end */
#define CHUNK_MAX_OPS 4096

struct backup {
    struct engine engine;
    struct event_base *base;
    int group, index, verbose;
    bool cas_enabled;
    struct mc_clock *clock;           /* the shared ones (pbr_role.h) */
    struct item_store *store;
    struct pbr_shared *sh;
    int leader;                       /* member whose link we take */
    bool complete;                    /* holds the leader's items (not rebuilding) */
    bool rebuilding;                  /* between a snapshot's begin and end */
    uint64_t reb_done, reb_total;
    uint64_t max_cas;                 /* highest cas applied: a promoted backup goes on above */
    struct event *fence_ev;
    int fence_polls;
    uint64_t fence_answer_at;   /* fenced; "fenced" answered then (the old primary's read
                                 * lease, repl/link.h), link_now_ms(); 0: none waits */
    struct rec_op *chunk_ops;
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
    rel_time_t exptime = clock_exptime(be->clock, op->exptime);
    struct item *it = item_alloc(be->store, op->key, op->nkey, op->flags, exptime, op->nbytes,
                                 st);
    if (it != NULL || *st != ENG_NO_MEMORY)
        return it;
    be->reclaim_passes++;
    pbr_reclaim_dead(be->store);
    return item_alloc(be->store, op->key, op->nkey, op->flags, exptime, op->nbytes, st);
}

static int apply_put(struct backup *be, const struct record *r, const struct rec_op *op)
{
    /* a client chose the key: logged, it must stay on its line */
    char key[ITEM_KEY_MAX + 1];
    if (op->off > r->data_len || op->nbytes > r->data_len - op->off)
        return repl_source_mark_diverged(&be->src, r->xid, "PUT of key %s: value [%" PRIu64
                                         ", +%" PRIu32 ") outside the %" PRIu32 "-byte payload",
                                         printable_copy(key, sizeof(key), op->key, op->nkey),
                                         op->off, op->nbytes, r->data_len);
    eng_status st;
    struct item *it = alloc_for_put(be, op, &st);
    if (it == NULL)
        return repl_source_mark_diverged(&be->src, r->xid, "PUT of key %s (%" PRIu32
                                         " bytes) does not fit: %s (memory used %zu of %zu)",
                                         printable_copy(key, sizeof(key), op->key, op->nkey),
                                         op->nbytes,
                                         st == ENG_TOO_LARGE ? "too large" : "out of memory",
                                         be->store->mem_used, be->store->mem_limit);
    memcpy(item_value(it), r->data + op->off, op->nbytes);
    uint64_t hv = hash_key(op->key, op->nkey);
    struct item *old = assoc_find(&be->store->table, op->key, op->nkey, hv);
    if (old != NULL)
        item_replace(be->store, old, it, hv);
    else
        item_link(be->store, it, hv);
    it->cas = op->cas;
    if (op->cas > be->max_cas)
        be->max_cas = op->cas;
    return 0;
}

static void apply_del(struct backup *be, const struct rec_op *op)
{
    uint64_t hv = hash_key(op->key, op->nkey);
    struct item *it = assoc_find(&be->store->table, op->key, op->nkey, hv);
    if (it != NULL)
        item_unlink(be->store, it, hv);
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
            pbr_unlink_all(be->store);
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

/* While rebuilt, records are applied as they arrive (a chunk must find
 * every record sent before it applied); otherwise up to the stable xid. */
static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct backup *be = owner;
    if (be->rebuilding)
        stable = be->src.received_xid;
    return repl_source_apply(&be->src, stable, apply_record, be);
}

/* Which source a link is: only the member we follow. */
static int hook_resolve(void *owner, const struct link_identity *id, const char **reason)
{
    struct backup *be = owner;
    int member = pbr_member_of_identity(be->sh->m, id->role, id->index);
    if (member == be->leader)
        return 0;
    *reason = "not the member this backup follows (the group's primary changed)";
    return -1;
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* 'B' x0 total: forget everything, hold x0, apply what follows at once. */
static void snapshot_begin(struct backup *be, const uint8_t *p, uint32_t len)
{
    if (len != 16) {
        be_log(be, "snapshot begin frame of %u bytes; ignored", (unsigned)len);
        return;
    }
    uint64_t x0 = get_u64le(p);
    pbr_unlink_all(be->store);
    reclog_destroy(&be->src.buffer);
    reclog_init(&be->src.buffer);
    be->src.received_xid = be->src.applied_xid = be->src.stable_xid = x0;
    be->src.buffer.last_xid = x0;
    be->rebuilding = true;
    be->complete = false;
    be->reb_done = 0;
    be->reb_total = get_u64le(p + 8);
    be_log(be, "rebuild from member %d begins at xid %" PRIu64 " (%" PRIu64 " items)",
           be->leader, x0, be->reb_total);
}

/* 'C' <record of PUT ops>: items as the primary holds them. */
static void snapshot_chunk(struct backup *be, const uint8_t *p, uint32_t len)
{
    struct record r;
    if (!be->rebuilding || rec_decode(p, len, &r, be->chunk_ops, CHUNK_MAX_OPS) != 0) {
        be_log(be, "snapshot chunk of %u bytes %s; the stream is marked diverged",
               (unsigned)len, be->rebuilding ? "does not decode" : "outside a rebuild");
        repl_source_mark_diverged(&be->src, be->src.received_xid, "bad snapshot chunk");
        return;
    }
    for (uint32_t i = 0; i < r.nops; i++) {
        if (r.ops[i].type != ROP_PUT || apply_put(be, &r, &r.ops[i]) != 0) {
            be_log(be, "snapshot item %u of a chunk cannot be stored: %s", (unsigned)i,
                   be->src.diverged ? be->src.why : "not a PUT");
            be->rebuilding = false;
            return;
        }
    }
    be->reb_done += r.nops;
}

static void snapshot_end(struct backup *be, const uint8_t *p, uint32_t len)
{
    if (!be->rebuilding || be->src.diverged)
        return;
    be->rebuilding = false;
    be->complete = true;
    be_log(be, "rebuilt from member %d: %" PRIu64 " items copied, %" PRIu64
           " items held, at xid %" PRIu64 "; complete", be->leader,
           len == 8 ? get_u64le(p) : be->reb_done, be->store->curr_items,
           be->src.applied_xid);
}

static void hook_message(void *owner, int index, uint16_t type, const uint8_t *payload,
                         uint32_t len)
{
    struct backup *be = owner;
    if (type != FT_REQUEST || len < 1)
        return;
    switch (payload[0]) {
    case 'B':
        snapshot_begin(be, payload + 1, len - 1);
        break;
    case 'C':
        snapshot_chunk(be, payload + 1, len - 1);
        break;
    case 'E':
        snapshot_end(be, payload + 1, len - 1);
        break;
    default:
        be_log(be, "unknown request kind %u from member %d; ignored", payload[0], be->leader);
    }
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
        return pbr_get(be->store, be->cas_enabled, key, nkey, out, res);
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = NO_READS_MSG;
    return ENG_FAILED;
}

static void backup_release(struct engine *e, void *handle)
{
    pbr_release(be_of(e)->store, handle);
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
    emit(ctx, "primary_acks", "%" PRIu64, ps.acks);
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
    pbr_store_stats(be->store, emit, ctx);
    stats_xids(be, emit, ctx);
    return true;
}

static void backup_stats_reset(struct engine *e)
{
    struct backup *be = be_of(e);
    memset(&be->store->stats, 0, sizeof(be->store->stats));
    repl_receiver_stats_reset(be->receiver);
}

static void backup_tick(struct engine *e, time_t now)
{
    struct backup *be = be_of(e);
    clock_set(be->clock, now);
    item_store_tick(be->store);
}

/* ---- admin: cocytus info | meta | promote ---- */

static size_t backup_meta_bytes(const struct backup *be)
{
    return pbr_store_meta_bytes(be->store) + be->src.buffer.bytes;
}

static void admin_info(struct backup *be, const struct pbr_reply *r)
{
    const struct item_store *s = be->store;
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
        pbr_digest_store(be->store, be->clock, &d);
        pbr_reply_meta(&r, &d);
        return true;
    }
    if (strcmp(argv[0], "promote") == 0) {
        admin_promote(be, &r);
        return true;
    }
    return false;
}

/* ---- the coordinator's words ---- */

static void answer(struct backup *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void answer(struct backup *be, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!be->sh->cfg.ctl_send || be->sh->cfg.ctl_send(be->sh->cfg.ctl_arg, text) < 0)
        be_log(be, "cannot answer the coordinator ('%s'): control link down", text);
}

static void answer_fenced(struct backup *be)
{
    be->fence_answer_at = 0;
    answer(be, "pbrok fenced %d %d %" PRIu64 " %d", be->group, be->sh->member,
           be->src.received_xid, be->complete && !be->src.diverged ? 1 : 0);
}

/* A primary serves reads only within a lease from each backup of its ack
 * set (repl/link.h).  One fenced while its lease from us may still run (it
 * talked to us until now: cut off from the coordinator only) could still
 * answer a read from a client with the old map: the failover, which waits
 * for our answer, must not promote anyone before that lease ran out.  A
 * primary that is gone (restarted: gone) holds none. */
static void fence_now(struct backup *be, bool gone)
{
    repl_receiver_fence(be->receiver, 0, "fenced: this member's primary was declared dead");
    uint64_t now = link_now_ms();
    uint64_t lease_end = gone ? 0 : repl_receiver_lease_end(be->receiver, 0, LINK_LEASE_GRANT_MS);
    be_log(be, "stream of member %d fenced at received xid %" PRIu64 " (applied %" PRIu64
           ")%s%s", be->leader, be->src.received_xid, be->src.applied_xid,
           be->complete ? "" : "; this backup is not complete",
           lease_end > now ? "; answering once its read lease ran out" : "");
    if (lease_end <= now) {
        answer_fenced(be);
        return;
    }
    be_log(be, "member %d may serve reads for %" PRIu64 " ms more", be->leader, lease_end - now);
    be->fence_answer_at = lease_end;
    link_timer_at(be->fence_ev, lease_end);
}

/* Wait until the dead primary's link has ended, so that every byte its
 * kernel still sent is read (semi sync answers once records are in that
 * kernel), but not forever: a hung primary's link stays up.  In full sync
 * a link up but silent for two PING periods (a stopped or hung primary)
 * is fenced at once, as a parity process fences such a data process's
 * stream: every record a client was answered for was acknowledged by
 * every backup of the ack set, this one included, so whatever is still
 * unread or on its way was answered to nobody.  Not in semi sync, where
 * an answered record may still be unread here or resent by the primary's
 * kernel after a lost packet, and the wait is what reads it (nor in
 * async, which keeps the wait too). */
static void on_fence_poll(evutil_socket_t fd, short what, void *arg)
{
    struct backup *be = arg;
    if (be->fence_answer_at) {
        if (link_now_ms() >= be->fence_answer_at)
            answer_fenced(be);
        else
            link_timer_at(be->fence_ev, be->fence_answer_at);
        return;
    }
    bool full = be->sh->cfg.cluster != NULL && be->sh->cfg.cluster->sync == SYNC_FULL;
    if (full && repl_receiver_link_quiet(be->receiver, 0)) {
        be_log(be, "the link from member %d is up but has carried nothing for %" PRIu64
               " ms: nothing is left to read", be->leader,
               repl_receiver_silent_ms(be->receiver, 0));
        fence_now(be, false);
        return;
    }
    if (repl_receiver_link_up(be->receiver, 0) && ++be->fence_polls < FENCE_WAIT_POLLS) {
        struct timeval tv = { 0, FENCE_POLL_USEC };
        evtimer_add(be->fence_ev, &tv);
        return;
    }
    fence_now(be, false);
}

/* pbr fence <g> [gone] | pbr follow <g> <leader> */
bool pbr_backup_control(struct engine *e, int argc, char **argv)
{
    struct backup *be = be_of(e);
    bool gone = argc == 4 && strcmp(argv[1], "fence") == 0 && strcmp(argv[3], "gone") == 0;
    if ((argc == 3 && strcmp(argv[1], "fence") == 0) || gone) {
        /* gone: the primary restarted, so the link up now, if any, is the
         * newcomer's: nothing of the old process is left to read. */
        if (be->fence_answer_at && !gone) {
            /* A resent fence: the answer is on its way. */
        } else if (repl_receiver_fenced(be->receiver, 0) || gone) {
            evtimer_del(be->fence_ev);
            be->fence_answer_at = 0;
            fence_now(be, gone);
        } else if (!evtimer_pending(be->fence_ev, NULL)) {
            be->fence_polls = 0;
            on_fence_poll(-1, 0, be);
        }
        return true;
    }
    if (argc == 4 && strcmp(argv[1], "follow") == 0) {
        int leader = atoi(argv[3]);
        if (leader != be->leader || repl_receiver_fenced(be->receiver, 0))
            be_log(be, "following member %d from xid %" PRIu64, leader, be->src.received_xid);
        be->leader = leader;
        evtimer_del(be->fence_ev);
        be->fence_answer_at = 0;
        repl_receiver_unfence(be->receiver, 0);
        answer(be, "pbrok following %d %d", be->group, be->sh->member);
        return true;
    }
    return false;
}

/* "pbr b <leader> <received> <complete> <diverged>" */
int pbr_backup_lost_peers(struct engine *e, struct eng_lost_peer *out, int max)
{
    struct backup *be = be_of(e);
    return be->receiver ? repl_receiver_lost_peers(be->receiver, out, max) : 0;
}

size_t pbr_backup_heartbeat(struct engine *e, char *buf, size_t len)
{
    struct backup *be = be_of(e);
    int n = snprintf(buf, len, "pbr b %d %" PRIu64 " %d %d", be->leader, be->src.received_xid,
                     be->complete ? 1 : 0, be->src.diverged ? 1 : 0);
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

struct carry_copy {
    struct reclog *to;
    int rc;
};

static void copy_entry(void *ctx, const struct reclog_entry *en)
{
    struct carry_copy *c = ctx;
    if (c->rc == 0)
        c->rc = reclog_push(c->to, en->xid, en->bytes, en->len);
}

int pbr_backup_handover(struct engine *e, struct reclog *carry, uint64_t *from, uint64_t *last)
{
    struct backup *be = be_of(e);
    struct repl_source *src = &be->src;
    if (src->diverged || !be->complete)
        return -1;
    *from = src->applied_xid;
    struct carry_copy c = { carry, 0 };
    reclog_visit_after(&src->buffer, src->applied_xid, copy_entry, &c);
    if (c.rc != 0 || repl_source_apply(src, src->received_xid, apply_record, be) != 0)
        return -1;
    *last = src->applied_xid;
    /* New cas values go on above every cas the old primary handed out. */
    if (be->store->cas_counter < be->max_cas)
        be->store->cas_counter = be->max_cas;
    return 0;
}

bool pbr_backup_complete(struct engine *e)
{
    struct backup *be = be_of(e);
    return be->complete && !be->src.diverged;
}

bool pbr_backup_diverged(struct engine *e)
{
    return be_of(e)->src.diverged;
}

int pbr_backup_following(struct engine *e)
{
    return be_of(e)->leader;
}

bool pbr_backup_promoted(struct engine *e)
{
    return be_of(e)->promoted;
}

/* ---- lifetime ---- */

static void backup_destroy(struct engine *e)
{
    struct backup *be = be_of(e);
    if (be->listener != NULL)
        link_listener_free(be->listener);
    repl_receiver_free(be->receiver);
    repl_source_destroy(&be->src);
    if (be->fence_ev != NULL)
        event_free(be->fence_ev);
    free(be->chunk_ops);
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
        .hooks = { .apply = hook_apply, .log = hook_log, .message = hook_message,
                   .resolve = hook_resolve },
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
    link_listener_set_sendq(be->listener, be->sh->cfg.sq);
    link_listener_set_tls(be->listener, c->link_tls);
    be_log(be, "member %d is a backup of PBR(%d)%s, memory %zu bytes (the primary's plus a "
           "margin), waiting for member %d on %s:%d", be->sh->member, c->n - 1,
           be->complete ? "" : " waiting to be rebuilt", be->store->mem_limit, be->leader,
           me->host, link_listener_port(be->listener));
    return 0;
}

struct engine *pbr_backup_create(const struct backup_params *p)
{
    struct pbr_shared *sh = p->sh;
    const struct engine_config *cfg = &sh->cfg;
    const struct cluster_proc *me = pbr_member_proc(cfg->cluster, cfg->group, sh->m, sh->member);
    struct backup *be = calloc(1, sizeof(*be));
    if (be == NULL || me == NULL) {
        free(be);
        return NULL;
    }
    be->engine.ops = &backup_ops;
    be->engine.priv = be;
    be->base = cfg->base;
    be->group = cfg->group;
    be->index = sh->member;
    be->verbose = cfg->verbose;
    be->cas_enabled = cfg->cas_enabled;
    be->sh = sh;
    be->store = &sh->store;
    be->clock = &sh->clock;
    be->leader = p->leader;
    be->complete = p->complete;
    be->store->mem_limit = cfg->mem_limit + cfg->mem_limit / BACKUP_MARGIN_DIVISOR +
                           2 * cfg->item_size_max;
    repl_source_init(&be->src);
    be->fence_ev = evtimer_new(be->base, on_fence_poll, be);
    be->chunk_ops = calloc(CHUNK_MAX_OPS, sizeof(*be->chunk_ops));
    if (!be->fence_ev || !be->chunk_ops || receiver_start(be) != 0) {
        be_log(be, "out of memory setting up the backup");
        backup_destroy(&be->engine);
        return NULL;
    }
    if (listener_start(be, cfg->cluster, me) != 0) {
        backup_destroy(&be->engine);
        return NULL;
    }
    return &be->engine;
}
