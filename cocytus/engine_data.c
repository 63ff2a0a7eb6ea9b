/* engine_data.c - the data process of a coding group (--role data).
 *
 * Keys and metadata live in a heap table (meta.c); value bytes live in one
 * mmap-ed region managed by the deterministic allocator.  Every mutation
 * becomes one record (repl/record.h): allocator ops, table ops and the delta
 * of the new value against the bytes currently in its newly allocated range.
 * The record goes to every parity process of the group; once all of them
 * have acknowledged it (and everything before it) it is stable, and only
 * then is the value XORed into the region, the table entry switched and the
 * client answered (docs/coding-group.md, "piggybacked commit").
 *
 * Two rules let records pipeline without corrupting deltas: space released
 * by a record is returned to the allocator only after that record is stable
 * (deferred frees), and a key has at most one record in flight.  Mutations
 * that must wait (key in flight, no usable space yet, flush in progress) sit
 * in a FIFO write queue that is drained whenever the stable xid advances.
 * Sending, acknowledgements, the stable xid and commit order are the shared
 * replication sender's (repl/sender.c); this file decides what a record
 * says and what committing it means here.
 *
 * The meta commands' item marks (stale, recache won, base64 key) and the
 * fetched bit live in the entry's iflags on this process only (they are
 * not in records, so parity processes and a recovery process do not have
 * them: docs/compat.md).  A write's marks are known when it is sent and
 * take effect when it commits: they wait in a short list keyed by the
 * write's cas (mark_note). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>
#include <sys/mman.h>

#include <event2/event.h>

#include "alloc.h"
#include "allocbuild.h"
#include "arith.h"
#include "store_rules.h"
#include "clock.h"
#include "cluster.h"
#include "codec.h"
#include "engine.h"
#include "frame.h"
#include "link.h"
#include "meta.h"
#include "pieceset.h"
#include "printable.h"
#include "read_waiters.h"
#include "reclog.h"
#include "record.h"
#include "engine_data.h"
#include "rebuild.h"
#include "recovery.h"
#include "replica.h"
#include "sender.h"
#include "slotmap.h"
#include "writeq.h"

#define DP_EVICT_TRIES 200
#define DP_SWEEP_BUDGET 2000
#define DP_SWEEP_MAX_DELS 256
#define DP_ADMIN_REGION_MAX (16u << 20)
/* Backpressure: records in flight (sent, not yet stable) may hold at most
 * this many bytes; further mutations wait in the write queue.  Bounds the
 * memory a slow parity process can make us hold, and the heap churn. */
#define DP_MAX_INFLIGHT_BYTES (2u << 20)

enum meta_bits {
    DP_NEW = 0x20                 /* placeholder of a key created by a record in flight */
};

/* Result of trying a mutation now. */
enum try_result {
    TRY_DONE,      /* final outcome in res, nothing sent */
    TRY_SENT,      /* a record carries it; the outcome is reported at commit */
    TRY_BLOCKED    /* cannot proceed yet; retry after the stable xid advances */
};

/* One copy of our state being sent to another process (rebuild.h). */
struct rb_out {
    bool active;                  /* asked for, not finished */
    bool ready;                   /* our allocator (and units) are there: it waits for quiet */
    bool added;                   /* in the sender's ack set */
    bool joined;                  /* its link is up and BEGIN went */
    bool meta_done;               /* the whole metadata went (META_DONE) */
    enum cluster_role role;
    int index;
    uint64_t x0, next_off, end, units;
    uint64_t added_at_ms, joined_at_ms;
    struct rb_meta_walk walk;     /* the metadata, sent while writes go on */
    uint64_t unit_msgs;           /* UNITS messages sent */
    uint64_t taken;               /* META, META_DONE and UNITS messages the peer took */
    uint64_t attempt;             /* the coordinator's rebuild attempt; 0: a migration */
};

#define DP_MAX_REBUILDS 8
#define DP_REBUILD_JOIN_MS 3000       /* the new peer's link must come up by then */
/* Messages of a copy (META, UNITS: up to 64 KB each) sent and not yet
 * taken by the peer (RB_TAKEN): a record sent meanwhile waits behind at
 * most these at the peer, a few ms of its work, rather than behind every
 * byte the kernel's socket buffers hold. */
#define DP_REBUILD_WINDOW 4
#define DP_BUILD_RETRY_MS 200         /* a failed allocator build is tried again then */

struct deferred_free {
    uint64_t off;
    uint64_t size;
    uint64_t tag;                 /* xid of the record that released the space */
};

struct data_engine {
    struct engine base;
    struct event_base *evbase;
    struct sendq *sq;          /* the loop's batched writes, for dp->tx's links */
    const struct cluster *cluster;
    int group, index, k, m;
    int verbose;

    size_t region_size;
    uint8_t *region;
    struct dalloc *alloc;
    struct meta_table meta;
    size_t placeholders;          /* DP_NEW entries in the table */
    struct mc_clock clock;
    size_t item_size_max;
    bool evict;
    uint64_t headroom;            /* keep this much space free or on its way */

    uint64_t cas_counter;
    struct sender tx;             /* records, acks, stable xid, commit order */

    struct writeq queue;          /* mutations waiting to be tried again */

    /* A recovery process serving a dead DP (engine_data_recovery_new): the
     * region and its unit map are the parity engine's; units not rebuilt
     * yet must be asked for before their bytes are read or overwritten. */
    bool recovering;
    bool region_borrowed;
    int serving_pp;               /* own parity index (recovery process), else -1 */
    struct data_unit_hooks units;
    struct read_waiters waiters;  /* reads waiting for units, or for a lease */
    uint64_t unit_waits;          /* mutations and reads that waited for units */
    /* Reads are served only within a lease from every parity process of
     * the ack set (link.h, lease_held): one cut off or hung past it must
     * not answer from a table that a recovery process has taken over. */
    bool has_coordinator;         /* else nobody takes over: no lease needed */
    bool lease_waiting;           /* a read in waiters waits for one */
    uint64_t lease_waits;         /* reads that waited for one */
    /* A recovery process's allocator is built from the dead DP's pieces,
     * and a returning data process's from the pieces of its copy, on a
     * thread (allocbuild.h) while it serves: until then alloc is NULL, the
     * pieces are here, and writes that need space wait; a failed build is
     * tried again after a while (build_timer). */
    struct pieceset *pieces;
    struct alloc_build *building;
    struct event *build_timer;
    uint64_t alloc_waits;         /* tries of mutations that waited for the allocator */
    bool alloc_broken;            /* it cannot be built: the pieces overlap */
    /* Test faults (data_recovery_config.test_faults): the first build
     * fails as if out of memory, and is tried again 4 s later; or every
     * build finds pieces that overlap. */
    bool test_build_fail;
    bool test_build_overlap;

    struct deferred_free *df;     /* FIFO: df[df_head .. df_len) */
    size_t df_head, df_len, df_cap;
    uint64_t deferred_bytes;

    bool flush_inflight;
    uint64_t flush_xid;
    time_t flush_at;              /* a delayed flush_all takes effect then (0: none) */

    size_t sweep_cursor;

    /* record under construction */
    struct rec_op *ops;
    uint32_t nops, ops_cap;
    /* Scratch for the value being written and its delta: reused so the
     * per-write buffers do not interleave with long-lived metadata on the
     * heap (which would keep freed pages from being returned). */
    uint8_t *value_buf, *delta_buf;
    size_t value_cap, delta_cap;

    /* Copies of our state being sent (rebuild.h): writes wait from the
     * request until the new peer is in the ack set and has the metadata. */
    struct rb_out rb[DP_MAX_REBUILDS];
    struct event *rb_timer;
    uint64_t touched_end;         /* furthest region byte a record ever wrote */
    /* A test's fault (COCYTUS_TEST_REBUILD_BEGIN_TWICE): the first copy to
     * a parity process sends its BEGIN twice, which the parity process
     * must refuse with rebuild-failed (test/integration/rebuild_failed.sh). */
    bool test_begin_twice;
    /* A test's fault (COCYTUS_TEST_HANDOFF_FAIL): the first handoff fails
     * where taking the table and pieces from the replica could, as if
     * out of memory; the coordinator asks again. */
    bool test_take_fail;
    /* COCYTUS_TEST_COPY_META_REFUSE: the first copy this process takes
     * from a recovery process refuses its first metadata message, as if
     * out of memory; the copy is abandoned and taken again
     * (test/integration/copy_refused.sh). */
    bool test_refuse_meta;
    /* COCYTUS_TEST_COPIED_DELAY_MS: a replacement data process says
     * `copied` this late (test/integration/migration_abort.sh stops the
     * coordinator between the copy's end and the handoff, a window that
     * is otherwise a few milliseconds). */
    int test_copied_delay_ms;
    struct event *copied_timer;
    /* A handoff: writes wait; quiet() once nothing is in flight. */
    bool hold_writes;
    bool handed;                  /* quiet at the handoff: reads wait too */
    /* Started, and no parity process has told us yet whether the group
     * holds records beyond ours (we restarted without our state): reads
     * wait, as they do once we know we did, and so do writes. */
    bool unsure;
    uint64_t table_gen;           /* bumped when meta is replaced (metadump walks) */
    uint64_t admitted;            /* the coordinator's number of the last admission taken */
    void (*quiet)(void *ctx, uint64_t xid);
    void *quiet_ctx;
    /* A replacement data process taking its copy (replica.h); requests wait
     * until it serves. */
    struct replica *replica;
    struct group_view view;
    bool have_view;
    int (*ctl_send)(void *arg, const char *text);
    void *ctl_arg;

    struct mark_note *notes;      /* marks of writes in flight (meta commands) */
    size_t nnotes, notes_cap;

    /* counters */
    uint64_t evictions, expired_removed, total_items, blocked_waits;
    uint64_t in_place_writes;     /* overwrites that reused the old value's piece */
    char msg[256];
};

/* The marks a write in flight gives its entry when it commits. */
struct mark_note {
    uint64_t cas;
    uint8_t marks;                /* ENG_MARK_* (ENG_MARK_FETCHED: counts as read) */
};

static struct data_engine *dp_of(struct engine *e)
{
    return (struct data_engine *)e;
}

/* ---- units (recovery process only) ---- */

/* Are the bytes [off, off+len) of the region data we can read or take a
 * delta against?  Always, on an ordinary data process.  Otherwise the
 * missing units are asked for and the caller waits. */
static bool units_ready(struct data_engine *dp, uint64_t off, uint64_t len)
{
    if (!dp->recovering || dp->units.ready(dp->units.ctx, off, len))
        return true;
    dp->units.need(dp->units.ctx, off, len);
    dp->unit_waits++;
    return false;
}

static void dp_log(struct data_engine *dp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dp_log(struct data_engine *dp, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "data g%d/%d: ", dp->group, dp->index);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static time_t dp_now(const struct data_engine *dp)
{
    return clock_wall(&dp->clock);
}

/* Client exptime -> absolute unix time (0 = never), memcached's rules. */
static int64_t dp_abs_exptime(const struct data_engine *dp, int64_t exptime)
{
    rel_time_t rel = clock_exptime(&dp->clock, exptime);
    return rel == 0 ? 0 : (int64_t)dp->clock.epoch + rel;
}

static bool entry_expired(const struct data_engine *dp, const struct item *e)
{
    return e->exptime != 0 && (time_t)e->exptime <= dp_now(dp);
}

/* Visible to readers: committed, not a placeholder, not expired. */
static bool entry_visible(const struct data_engine *dp, const struct item *e)
{
    return e && !(e->iflags & DP_NEW) && !entry_expired(dp, e);
}

static bool entry_busy(const struct item *e)
{
    return e && (e->iflags & META_PENDING);
}

/* ---- meta marks ---- */

/* An entry's marks with its fetched bit, as a write that keeps them notes them. */
static uint8_t entry_marks(const struct item *e)
{
    return (uint8_t)(item_marks(e) | ((e->iflags & ITEM_FETCHED) ? ENG_MARK_FETCHED : 0));
}

/* Remember the marks of the write with this cas (nothing to remember for
 * none).  False when out of memory: the write then commits without them. */
static bool note_marks(struct data_engine *dp, uint64_t cas, uint8_t marks)
{
    if (marks == 0)
        return true;
    if (dp->nnotes == dp->notes_cap) {
        size_t cap = dp->notes_cap ? dp->notes_cap * 2 : 16;
        struct mark_note *n = realloc(dp->notes, cap * sizeof(*n));
        if (!n)
            return false;
        dp->notes = n;
        dp->notes_cap = cap;
    }
    dp->notes[dp->nnotes++] = (struct mark_note){ .cas = cas, .marks = marks };
    return true;
}

/* The marks noted for the write with this cas (removed), 0 if none. */
static uint8_t take_marks(struct data_engine *dp, uint64_t cas)
{
    for (size_t i = 0; i < dp->nnotes; i++) {
        if (dp->notes[i].cas != cas)
            continue;
        uint8_t marks = dp->notes[i].marks;
        dp->notes[i] = dp->notes[--dp->nnotes];
        return marks;
    }
    return 0;
}

/* A committed write replaced the entry's item: the new item's marks. */
static void entry_take_marks(struct data_engine *dp, struct item *e)
{
    e->iflags &= (uint8_t)~(ITEM_FETCHED | ITEM_MARK_BITS);
    item_set_marks(e, take_marks(dp, e->cas));
}

/* ---- the record under construction ---- */

static struct rec_op *op_push(struct data_engine *dp, uint8_t type)
{
    if (dp->nops == dp->ops_cap) {
        uint32_t ncap = dp->ops_cap ? dp->ops_cap * 2 : 16;
        struct rec_op *n = realloc(dp->ops, ncap * sizeof(*n));
        if (!n) {
            dp_log(dp, "out of memory building a record");
            abort();
        }
        dp->ops = n;
        dp->ops_cap = ncap;
    }
    struct rec_op *op = &dp->ops[dp->nops++];
    memset(op, 0, sizeof(*op));
    op->type = type;
    return op;
}

static uint64_t next_xid(const struct data_engine *dp)
{
    return sender_next_xid(&dp->tx);
}

static bool df_push(struct data_engine *dp, uint64_t off, uint64_t size, uint64_t tag)
{
    if (dp->df_len == dp->df_cap) {
        if (dp->df_head > 0) {
            memmove(dp->df, dp->df + dp->df_head, (dp->df_len - dp->df_head) * sizeof(*dp->df));
            dp->df_len -= dp->df_head;
            dp->df_head = 0;
        }
        if (dp->df_len == dp->df_cap) {
            size_t ncap = dp->df_cap ? dp->df_cap * 2 : 64;
            struct deferred_free *n = realloc(dp->df, ncap * sizeof(*n));
            if (!n)
                return false;
            dp->df = n;
            dp->df_cap = ncap;
        }
    }
    dp->df[dp->df_len++] = (struct deferred_free){ off, size, tag };
    dp->deferred_bytes += size;
    return true;
}

/* Release space whose releasing record is committed (stable, and written
 * here): the allocator frees it now and the record under construction tells
 * the parity processes. */
static void emit_usable_frees(struct data_engine *dp)
{
    if (dp->alloc == NULL)
        return;   /* allocator still being built: the frees wait for it */
    while (dp->df_head < dp->df_len && dp->df[dp->df_head].tag <= dp->tx.committed) {
        struct deferred_free *f = &dp->df[dp->df_head++];
        uint64_t freed = 0;
        if (dalloc_free(dp->alloc, f->off, &freed) < 0 || freed != f->size) {
            dp_log(dp, "BUG: deferred free of offset %" PRIu64 " (%" PRIu64 " bytes) rejected "
                   "by the allocator or of another size (%" PRIu64 ")", f->off, f->size, freed);
            abort();
        }
        dp->deferred_bytes -= f->size;
        struct rec_op *op = op_push(dp, ROP_FREE);
        op->off = f->off;
    }
    if (dp->df_head == dp->df_len)
        dp->df_head = dp->df_len = 0;
}

static void begin_record(struct data_engine *dp)
{
    dp->nops = 0;
    emit_usable_frees(dp);
}

/* The piece holding an entry's value is always dalloc_value_piece(nbytes):
 * write_value allocates max(nbytes, 1) bytes, and an overwrite in place
 * keeps a piece only for a value of the same rounded size (every parity
 * process checks this on each PUT, meta_replay_op).  So its size is known
 * without asking the allocator; the one lookup is dalloc_free's, which
 * checks the size (emit_usable_frees). */
static uint64_t entry_piece_size(const struct item *e)
{
    return dalloc_value_piece(e->nbytes);
}

/* Give an entry's space back once this record is stable. */
static void defer_entry_space(struct data_engine *dp, const struct item *e)
{
    uint64_t off = meta_off(e);
    if (!df_push(dp, off, entry_piece_size(e), next_xid(dp))) {
        dp_log(dp, "out of memory deferring the free of offset %" PRIu64, off);
        abort();
    }
}

static void op_del(struct data_engine *dp, struct item *e)
{
    struct rec_op *op = op_push(dp, ROP_DEL);
    op->key = item_key(e);
    op->nkey = e->nkey;
    e->iflags |= META_PENDING;
    defer_entry_space(dp, e);
}

/* Send the record under construction.  done may be NULL (internal records:
 * evictions, expiry, frees). */
static uint64_t finish_record(struct data_engine *dp, uint64_t data_off, const uint8_t *delta,
                              uint32_t data_len, eng_done_fn done, void *cookie,
                              const struct eng_result *res)
{
    uint64_t xid = sender_send(&dp->tx, dp->nops, dp->ops, data_off, delta, data_len, done,
                               cookie, res);
    if (data_len && data_off + data_len > dp->touched_end)
        dp->touched_end = data_off + data_len;
    dp->nops = 0;
    return xid;
}

/* Frees emitted by begin_record must reach the parity processes even when
 * the mutation itself ends up not sending anything. */
static void flush_stray_ops(struct data_engine *dp)
{
    if (dp->nops > 0)
        finish_record(dp, 0, NULL, 0, NULL, NULL, NULL);
}

/* ---- space ---- */

static bool in_flight(const struct data_engine *dp)
{
    return sender_in_flight(&dp->tx);
}

/* Evict LRU entries (no record in flight) until free plus deferred space
 * reaches want and at least at_least bytes were evicted (free space can be
 * too fragmented for an allocation that fits in total).  Their DELs go into
 * the record under construction. */
static void evict_until(struct data_engine *dp, uint64_t want, uint64_t at_least)
{
    struct item *e = dp->meta.lru_tail;
    int tries = 0;
    uint64_t evicted = 0;
    while (e && tries++ < DP_EVICT_TRIES &&
           (dalloc_free_bytes(dp->alloc) + dp->deferred_bytes < want || evicted < at_least)) {
        struct item *prev = e->prev;
        if (!(e->iflags & (META_PENDING | DP_NEW))) {
            if (entry_expired(dp, e))
                dp->expired_removed++;
            else
                dp->evictions++;
            evicted += e->nbytes ? e->nbytes : 1;
            op_del(dp, e);
        }
        e = prev;
    }
}

/* Allocate size bytes for a new value.  On failure the caller decides
 * between waiting (space is on its way) and failing. */
static int allocate(struct data_engine *dp, uint64_t size, uint64_t *off)
{
    if (dalloc_alloc(dp->alloc, size, off) == 0)
        return 0;
    if (dp->evict)
        evict_until(dp, size + dp->headroom, size);
    return -1;
}

static enum try_result no_space(struct data_engine *dp, struct eng_result *res)
{
    /* Space released by records in flight becomes usable once they are
     * stable; so does what this call just evicted. */
    bool coming = dp->deferred_bytes > 0 || in_flight(dp) || dp->nops > 0;
    flush_stray_ops(dp);
    if (coming) {
        dp->blocked_waits++;
        return TRY_BLOCKED;
    }
    res->status = ENG_NO_MEMORY;
    return TRY_DONE;
}

/* No allocator yet (a recovery process, or a data process that just took
 * its keys back): a write that needs space (or a flush) waits until it is
 * built, or fails if it cannot be. */
static enum try_result wait_for_alloc(struct data_engine *dp, struct eng_result *res)
{
    flush_stray_ops(dp);
    if (dp->alloc_broken) {
        res->status = ENG_FAILED;
        res->msg = dp->recovering ? "recovery process cannot allocate: its copy of the data "
                                    "process's pieces is inconsistent (see its log)"
                                  : "data process cannot allocate: the pieces it took back "
                                    "from its recovery process are inconsistent (see its log)";
        return TRY_DONE;
    }
    dp->alloc_waits++;
    return TRY_BLOCKED;
}

/* ---- building new values ---- */

static uint8_t *scratch(uint8_t **buf, size_t *cap, size_t need)
{
    if (need == 0)
        need = 1;
    if (need > *cap) {
        uint8_t *n = realloc(*buf, need);
        if (!n)
            return NULL;
        *buf = n;
        *cap = need;
    }
    return *buf;
}

/* The bytes a store writes: the client's data as it is (no copy: only the
 * delta is taken from it), or old+data / data+old built in scratch. */
static const uint8_t *compose_value(struct data_engine *dp, const struct eng_mutation *m,
                                    const struct item *old, size_t *len)
{
    if (m->op != ENG_OP_APPEND && m->op != ENG_OP_PREPEND) {
        *len = m->nbytes;
        return m->nbytes ? (const uint8_t *)m->data : (const uint8_t *)"";
    }
    size_t oldlen = old->nbytes;
    *len = oldlen + m->nbytes;
    uint8_t *v = scratch(&dp->value_buf, &dp->value_cap, *len);
    if (!v)
        return NULL;
    const uint8_t *oldbytes = dp->region + meta_off(old);
    if (m->op == ENG_OP_APPEND) {
        memcpy(v, oldbytes, oldlen);
        if (m->nbytes)
            memcpy(v + oldlen, m->data, m->nbytes);
    } else {
        if (m->nbytes)
            memcpy(v, m->data, m->nbytes);
        memcpy(v + m->nbytes, oldbytes, oldlen);
    }
    return v;
}

/* An overwrite whose value takes a piece of the same size as the old one
 * reuses that piece: no ALLOC, no deferred FREE, and nothing for the
 * allocator here or for the parity processes' sets of pieces to do.  The
 * delta is taken against the old value's bytes, which stay in the region
 * (and readers keep seeing them) until the record commits and XORs the
 * delta in; one record per key in flight means no other record can change
 * those bytes meanwhile.  Not for an entry that already has a record in
 * flight (its bytes are not final). */
static bool overwrite_in_place(const struct item *old, size_t len)
{
    return old && !(old->iflags & (META_PENDING | DP_NEW)) &&
           entry_piece_size(old) == dalloc_value_piece(len);
}

/* The delta of value against the range's current bytes at off. */
static const uint8_t *value_delta(struct data_engine *dp, uint64_t off, const uint8_t *value,
                                  size_t len)
{
    uint8_t *delta = scratch(&dp->delta_buf, &dp->delta_cap, len);
    if (!delta) {
        dp_log(dp, "out of memory building a delta");
        abort();
    }
    codec_xor_pair(delta, value, dp->region + off, len);
    return delta;
}

static void push_put(struct data_engine *dp, const char *key, size_t nkey, uint64_t off,
                     size_t len, uint32_t flags, int64_t exptime, uint64_t cas)
{
    struct rec_op *op = op_push(dp, ROP_PUT);
    op->key = key;
    op->nkey = (uint8_t)nkey;
    op->off = off;
    op->nbytes = (uint32_t)len;
    op->flags = flags;
    op->exptime = exptime;
    op->cas = cas;
}

static void send_value(struct data_engine *dp, uint64_t off, const uint8_t *delta, size_t len,
                       uint64_t cas, eng_done_fn done, void *cookie, struct eng_result *res)
{
    res->status = ENG_SUCCESS;
    res->cas = cas;
    finish_record(dp, off, delta, (uint32_t)len, done, cookie, res);
}

/* Write value into a fresh range (or the old one's, overwrite_in_place)
 * and send the record.  old (may be NULL) is the entry being replaced; a
 * fresh range defers its space. */
static enum try_result write_value(struct data_engine *dp, const char *key, size_t nkey,
                                   struct item *old, const uint8_t *value, size_t len,
                                   uint32_t flags, int64_t exptime, uint64_t cas,
                                   eng_done_fn done, void *cookie, struct eng_result *res)
{
    uint64_t size = len ? len : 1;
    uint64_t off;
    if (size > dp->region_size) {
        flush_stray_ops(dp);
        res->status = ENG_TOO_LARGE;
        return TRY_DONE;
    }
    uint64_t value_out = res->value;     /* an arith's result, kept for the completion */
    bool created = res->created;
    if (overwrite_in_place(old, len)) {
        off = meta_off(old);
        if (!units_ready(dp, off, len)) {   /* a recovery process's range not rebuilt yet */
            flush_stray_ops(dp);
            return TRY_BLOCKED;
        }
        old->iflags |= META_PENDING;
        dp->in_place_writes++;
        const uint8_t *delta = value_delta(dp, off, value, len);
        push_put(dp, key, nkey, off, len, flags, exptime, cas);
        send_value(dp, off, delta, len, cas, done, cookie, res);
        return TRY_SENT;
    }
    /* A recovery process whose allocator is still being built: the write
     * waits for it at the head of the write queue. */
    if (dp->alloc == NULL)
        return wait_for_alloc(dp, res);
    /* The key's own entry must not be evicted to make room for its new
     * value (its space is released below, once). */
    bool old_was_busy = old && (old->iflags & META_PENDING);
    if (old)
        old->iflags |= META_PENDING;
    int got = allocate(dp, size, &off);
    if (old && !old_was_busy)
        old->iflags &= (uint8_t)~META_PENDING;
    if (got < 0)
        return no_space(dp, res);
    if (!units_ready(dp, off, len)) {
        /* The delta needs the range's current bytes, which a recovery
         * process has not rebuilt yet.  Undo the allocation: the
         * allocator's state is a function of its used pieces, so freeing
         * restores it exactly and the parity processes never hear of it.
         * The write waits at the head of the FIFO write queue, so no later
         * write can allocate first: the order of allocations stays the
         * same on every replica (the role of the paper's pre-allocation). */
        dalloc_free(dp->alloc, off, NULL);
        flush_stray_ops(dp);
        return TRY_BLOCKED;
    }
    res->value = value_out;
    res->created = created;
    struct rec_op *op = op_push(dp, ROP_ALLOC);
    op->size = size;
    op->off = off;
    const uint8_t *delta = value_delta(dp, off, value, len);
    push_put(dp, key, nkey, off, len, flags, exptime, cas);
    if (old) {
        defer_entry_space(dp, old);
        old->iflags |= META_PENDING;
    } else {
        struct item *ph = meta_put(&dp->meta, key, nkey, off, (uint32_t)len, flags, exptime, cas);
        if (!ph) {
            dp_log(dp, "out of memory adding a key");
            abort();
        }
        ph->iflags |= META_PENDING | DP_NEW;
        dp->placeholders++;
    }
    if (dp->evict && dalloc_free_bytes(dp->alloc) + dp->deferred_bytes < dp->headroom)
        evict_until(dp, dp->headroom, 0);
    send_value(dp, off, delta, len, cas, done, cookie, res);
    return TRY_SENT;
}

/* ---- mutations ---- */

static bool too_large(const struct data_engine *dp, size_t nkey, size_t nbytes)
{
    return sizeof(struct item) + nkey + nbytes + 2 > dp->item_size_max;
}

static enum try_result try_store(struct data_engine *dp, const struct eng_mutation *m,
                                 struct item *e, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    bool visible = entry_visible(dp, e);
    res->status = store_outcome(m, visible, visible ? e->cas : 0, true);
    if (res->status != ENG_SUCCESS)
        return TRY_DONE;

    size_t len;
    if ((m->op == ENG_OP_APPEND || m->op == ENG_OP_PREPEND) &&
        !units_ready(dp, meta_off(e), e->nbytes))
        return TRY_BLOCKED;
    const uint8_t *value = compose_value(dp, m, e, &len);
    if (!value) {
        res->status = ENG_NO_MEMORY;
        return TRY_DONE;
    }
    if (too_large(dp, m->nkey, len)) {
        res->status = ENG_TOO_LARGE;
        return TRY_DONE;
    }
    bool keep_meta = m->op == ENG_OP_APPEND || m->op == ENG_OP_PREPEND;
    uint32_t flags = keep_meta ? e->flags : m->flags;
    int64_t exptime = keep_meta ? (int64_t)e->exptime : dp_abs_exptime(dp, m->exptime);
    uint8_t marks = store_marks(m, visible, visible ? e->cas : 0, visible ? item_marks(e) : 0, true);
    if (store_is_stale(m, visible, visible ? e->cas : 0, true))
        exptime = (int64_t)e->exptime;  /* memcached keeps the TTL of a stale set */
    uint64_t cas = ++dp->cas_counter;
    begin_record(dp);
    enum try_result tr = write_value(dp, m->key, m->nkey, e, value, len, flags, exptime,
                                     cas, done, cookie, res);
    if (tr == TRY_SENT)
        note_marks(dp, cas, marks);
    return tr;
}

static enum try_result try_arith(struct data_engine *dp, const struct eng_mutation *m,
                                 struct item *e, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    uint64_t value;
    uint32_t flags = 0;
    int64_t exptime = 0;
    if (!entry_visible(dp, e)) {
        if (!m->create) {
            res->status = ENG_NOT_FOUND;
            return TRY_DONE;
        }
        value = m->initial;
        flags = m->flags;
        exptime = dp_abs_exptime(dp, m->exptime);
        res->created = true;
    } else {
        res->created = false;
        /* memcached's order: empty or chunked values, the cas, the number */
        if (arith_rejected_early(e->nkey, e->nbytes, e->flags, true)) {
            res->status = ENG_NON_NUMERIC;
            return TRY_DONE;
        }
        if (m->cas && e->cas != m->cas) {
            res->status = ENG_EXISTS;
            return TRY_DONE;
        }
        if (!units_ready(dp, meta_off(e), e->nbytes))
            return TRY_BLOCKED;
        if (!arith_parse_u64((const char *)dp->region + meta_off(e), e->nbytes, &value)) {
            res->status = ENG_NON_NUMERIC;
            return TRY_DONE;
        }
        value = arith_apply(m->op, value, m->delta);
        flags = e->flags;
        exptime = e->exptime;
    }
    /* memcached's rule (arith.h): a result that fits the old length keeps
     * it, padded with spaces, and the item's marks; else the digits alone
     * (nobody holds a data process's entry, so "in place" always may).
     * The old length can be anything up to the item limit ("5" and 500 KB
     * of spaces is a number), so the result is built in the scratch
     * buffer, not in a buffer of ARITH_DIGITS_MAX. */
    bool visible = entry_visible(dp, e);
    size_t n = arith_result_len(value, visible ? e->nbytes : 0, visible);
    uint8_t *digits = scratch(&dp->value_buf, &dp->value_cap, n);
    if (!digits) {
        res->status = ENG_NO_MEMORY;
        return TRY_DONE;
    }
    arith_write((char *)digits, value, n);
    bool in_place = visible && n == e->nbytes;
    uint8_t marks = in_place ? entry_marks(e) : m->marks;
    if (in_place && m->touch)       /* ma T: memcached sets the TTL of an in-place result */
        exptime = dp_abs_exptime(dp, m->exptime);
    uint64_t cas = ++dp->cas_counter;
    begin_record(dp);
    res->value = value;
    /* An expired entry still owns its space: it is replaced like a live one. */
    enum try_result tr = write_value(dp, m->key, m->nkey, e, digits, n,
                                     flags, exptime, cas, done, cookie, res);
    if (tr == TRY_SENT)
        note_marks(dp, cas, marks);
    return tr;
}

static enum try_result try_delete(struct data_engine *dp, const struct eng_mutation *m,
                                  struct item *e, eng_done_fn done, void *cookie,
                                  struct eng_result *res)
{
    if (!entry_visible(dp, e)) {
        res->status = ENG_NOT_FOUND;
        return TRY_DONE;
    }
    if (m->cas && e->cas != m->cas) {
        res->status = ENG_EXISTS;
        return TRY_DONE;
    }
    begin_record(dp);
    op_del(dp, e);
    res->status = ENG_SUCCESS;
    finish_record(dp, 0, NULL, 0, done, cookie, res);
    return TRY_SENT;
}

static enum try_result try_touch(struct data_engine *dp, const struct eng_mutation *m,
                                 struct item *e, eng_done_fn done, void *cookie,
                                 struct eng_result *res)
{
    if (!entry_visible(dp, e)) {
        res->status = ENG_NOT_FOUND;
        return TRY_DONE;
    }
    begin_record(dp);
    struct rec_op *op = op_push(dp, ROP_PUT);
    op->key = item_key(e);
    op->nkey = e->nkey;
    op->off = meta_off(e);
    op->nbytes = e->nbytes;
    op->flags = e->flags;
    op->exptime = dp_abs_exptime(dp, m->exptime);
    op->cas = e->cas;
    e->iflags |= META_PENDING | ITEM_FETCHED;   /* memcached counts a touch as a read */
    res->status = ENG_SUCCESS;
    res->cas = e->cas;
    finish_record(dp, 0, NULL, 0, done, cookie, res);
    return TRY_SENT;
}

/* ENG_OP_MARK (md I, mg's recache win).  Marks alone change at once and
 * locally; a new cas or TTL is a record (a PUT of the same value, as a
 * touch is) and the marks come with its commit. */
static enum try_result try_mark(struct data_engine *dp, const struct eng_mutation *m,
                                struct item *e, eng_done_fn done, void *cookie,
                                struct eng_result *res)
{
    if (!entry_visible(dp, e)) {
        res->status = ENG_NOT_FOUND;
        return TRY_DONE;
    }
    if (m->cas && e->cas != m->cas) {
        res->status = ENG_EXISTS;
        return TRY_DONE;
    }
    uint8_t marks = (uint8_t)((item_marks(e) | m->marks) & ~m->marks_clear);
    res->status = ENG_SUCCESS;
    if (!m->new_cas && !m->touch) {
        item_set_marks(e, marks);
        res->cas = e->cas;
        return TRY_DONE;
    }
    uint64_t cas = m->new_cas ? ++dp->cas_counter : e->cas;
    begin_record(dp);
    struct rec_op *op = op_push(dp, ROP_PUT);
    op->key = item_key(e);
    op->nkey = e->nkey;
    op->off = meta_off(e);
    op->nbytes = e->nbytes;
    op->flags = e->flags;
    op->exptime = m->touch ? dp_abs_exptime(dp, m->exptime) : (int64_t)e->exptime;
    op->cas = cas;
    if (m->new_cas)
        note_marks(dp, cas, (uint8_t)(marks | ((e->iflags & ITEM_FETCHED) ? ENG_MARK_FETCHED : 0)));
    else
        item_set_marks(e, marks);
    e->iflags |= META_PENDING;
    res->cas = cas;
    finish_record(dp, 0, NULL, 0, done, cookie, res);
    return TRY_SENT;
}

/* flush_all: a barrier.  It waits for an empty pipeline, resets the
 * allocator at once (later records may reuse all space: their writes land
 * after the flush commits) and holds every other mutation until it commits. */
static enum try_result try_flush(struct data_engine *dp, const struct eng_mutation *m,
                                 eng_done_fn done, void *cookie, struct eng_result *res)
{
    if (m->exptime > 0) {
        dp->flush_at = dp_now(dp) + m->exptime;
        res->status = ENG_SUCCESS;
        return TRY_DONE;
    }
    if (in_flight(dp))
        return TRY_BLOCKED;
    if (dp->alloc == NULL)   /* not built yet */
        return wait_for_alloc(dp, res);
    dp->flush_at = 0;
    dp->nops = 0;
    dalloc_reset(dp->alloc);
    dp->df_head = dp->df_len = 0;
    dp->deferred_bytes = 0;
    op_push(dp, ROP_FLUSH);
    dp->flush_inflight = true;
    res->status = ENG_SUCCESS;
    dp->flush_xid = finish_record(dp, 0, NULL, 0, done, cookie, res);
    return TRY_SENT;
}

/* A copy of our state is starting: the new peer joins the stream at a
 * point where nothing is in flight (rebuild.h), so writes wait from the
 * moment the copy can start (our allocator built, a recovery process's
 * units rebuilt) until that point; they go on once it has joined, while
 * the metadata and the region follow.  While the copy waits for our
 * allocator or units, writes go on too (they held every write of a
 * recovery process for the 0.1-0.3 s of its allocator's build). */
static bool rebuild_blocks_writes(const struct data_engine *dp)
{
    for (int i = 0; i < DP_MAX_REBUILDS; i++)
        if (dp->rb[i].active && dp->rb[i].ready && !dp->rb[i].added)
            return true;
    return false;
}

static enum try_result try_mutation(struct data_engine *dp, const struct eng_mutation *m,
                                    eng_done_fn done, void *cookie, struct eng_result *res)
{
    memset(res, 0, sizeof(*res));
    if (dp->replica || dp->hold_writes || rebuild_blocks_writes(dp))
        return TRY_BLOCKED;
    if (dp->tx.refusing) {
        res->status = ENG_FAILED;
        res->msg = "data process restarted without its state; writes refused until recovery";
        return TRY_DONE;
    }
    /* Started, and no parity process has said yet whether the group holds
     * records beyond ours: a write now would take xid 1 (or the next of
     * ours) again, which the parity processes would take for a duplicate
     * and acknowledge without applying.  It waits to know (dp_peer_up, or
     * refused with every waiting write: dp_refused). */
    if (dp->unsure)
        return TRY_BLOCKED;
    if (dp->flush_inflight || sender_backlog(&dp->tx) > DP_MAX_INFLIGHT_BYTES)
        return TRY_BLOCKED;
    /* "recovery blocked": no write until the whole region is rebuilt. */
    if (dp->recovering && dp->cluster->recovery_blocked && !dp->units.complete(dp->units.ctx)) {
        dp->unit_waits++;
        return TRY_BLOCKED;
    }
    if (m->op == ENG_OP_FLUSH)
        return try_flush(dp, m, done, cookie, res);
    if (m->nkey == 0 || m->nkey > ITEM_KEY_MAX) {
        res->status = ENG_FAILED;
        res->msg = "bad key length";
        return TRY_DONE;
    }
    struct item *e = meta_find(&dp->meta, m->key, m->nkey);
    if (entry_busy(e))
        return TRY_BLOCKED;
    switch (m->op) {
    case ENG_OP_SET: case ENG_OP_ADD: case ENG_OP_REPLACE:
    case ENG_OP_APPEND: case ENG_OP_PREPEND: case ENG_OP_CAS:
        if (too_large(dp, m->nkey, m->nbytes)) {
            res->status = ENG_TOO_LARGE;
            return TRY_DONE;
        }
        return try_store(dp, m, e, done, cookie, res);
    case ENG_OP_INCR: case ENG_OP_DECR:
        return try_arith(dp, m, e, done, cookie, res);
    case ENG_OP_DELETE:
        return try_delete(dp, m, e, done, cookie, res);
    case ENG_OP_TOUCH:
        return try_touch(dp, m, e, done, cookie, res);
    case ENG_OP_MARK:
        return try_mark(dp, m, e, done, cookie, res);
    default:
        res->status = ENG_FAILED;
        res->msg = "unsupported operation";
        return TRY_DONE;
    }
}

/* ---- the write queue ---- */

static bool enqueue(struct data_engine *dp, const struct eng_mutation *m, eng_done_fn done,
                    void *cookie)
{
    return writeq_push(&dp->queue, m, done, cookie);
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
static void drain_queue(struct data_engine *dp)
{
    writeq_drain(&dp->queue, retry_queued, dp);
}

/* ---- commit ---- */

/* A stable record takes effect here: its delta is XORed into the region
 * (giving the new value, since the range held exactly the bytes the delta
 * was computed against) and its table ops are applied.  Allocator ops were
 * applied when the record was built. */
static void apply_committed(void *ctx, const struct record *r)
{
    struct data_engine *dp = ctx;
    codec_xor(dp->region + r->data_off, r->data, r->data_len);
    for (uint32_t i = 0; i < r->nops; i++) {
        const struct rec_op *op = &r->ops[i];
        struct item *e;
        switch (op->type) {
        case ROP_PUT: {
            e = meta_find(&dp->meta, op->key, op->nkey);
            /* a new item (not a touch or a mark of the same one) */
            bool replaced = !e || (e->iflags & DP_NEW) || e->cas != op->cas;
            if (e && (e->iflags & DP_NEW)) {
                dp->placeholders--;
                dp->total_items++;
            } else if (e && e->cas != op->cas) {
                dp->total_items++;
            }
            e = meta_put(&dp->meta, op->key, op->nkey, op->off, op->nbytes, op->flags,
                         op->exptime, op->cas);
            if (!e) {
                dp_log(dp, "out of memory committing xid %" PRIu64, r->xid);
                abort();
            }
            e->iflags &= (uint8_t)~(META_PENDING | DP_NEW);
            if (replaced)
                entry_take_marks(dp, e);
            break;
        }
        case ROP_DEL:
            meta_del(&dp->meta, op->key, op->nkey);
            break;
        case ROP_FLUSH:
            meta_clear(&dp->meta);
            dp->placeholders = 0;
            break;
        default:
            break;
        }
    }
}

/* Writes waiting in the queue can never commit any more. */
static void dp_refused(void *ctx)
{
    struct data_engine *dp = ctx;
    struct eng_result res = { .status = ENG_FAILED,
                              .msg = "data process restarted without its state" };
    writeq_fail_all(&dp->queue, &res);
}

/* A parity process holds no record beyond ours: our table is the group's,
 * and the reads and writes that waited to know it go on. */
static void dp_peer_up(void *ctx, int index)
{
    struct data_engine *dp = ctx;
    (void)index;
    if (!dp->unsure)
        return;
    dp->unsure = false;
    read_waiters_wake(&dp->waiters);
    drain_queue(dp);
}

static void rebuild_step(struct data_engine *dp);

static void dp_after_commit(void *ctx)
{
    struct data_engine *dp = ctx;
    if (dp->flush_inflight && dp->flush_xid <= dp->tx.committed)
        dp->flush_inflight = false;
    drain_queue(dp);
    if (dp->hold_writes || rebuild_blocks_writes(dp))
        rebuild_step(dp);
}

static void rb_joined(void *ctx, enum cluster_role role, int index);
static void rb_join_failed(void *ctx, enum cluster_role role, int index, const char *why);
static void copy_taken(struct data_engine *dp, const uint8_t *p, uint32_t len);
static void start_alloc_build(struct data_engine *dp);
static void stop_alloc_build(struct data_engine *dp);
static void on_build_retry(evutil_socket_t fd, short what, void *arg);

static void dp_message(void *ctx, int peer, uint16_t type, const uint8_t *payload,
                       uint32_t len);
static void dp_lease(void *ctx);

static const struct sender_callbacks dp_sender_callbacks = {
    .commit = apply_committed,
    .after_commit = dp_after_commit,
    .refused = dp_refused,
    .message = dp_message,
    .joined = rb_joined,
    .join_failed = rb_join_failed,
    .peer_up = dp_peer_up,
    .lease = dp_lease,
};

/* A data (or recovery) process replicates to parity processes, fully
 * synchronously, through the loop's batched writes; the caller names the
 * identity and the peers. */
static struct sender_config dp_sender_config(struct data_engine *dp, const struct cluster *c,
                                             enum link_role my_role, int my_index,
                                             const char *who)
{
    return (struct sender_config){
        .base = dp->evbase, .cluster = c, .group = dp->group,
        .my_role = my_role, .my_index = my_index, .peer_role = ROLE_PARITY,
        .sync = SENDER_SYNC_FULL, .cb = &dp_sender_callbacks, .ctx = dp,
        .who = who, .verbose = dp->verbose, .sq = dp->sq,
    };
}

/* ---- engine operations ---- */

static eng_status dp_lookup(struct data_engine *dp, const char *key, size_t nkey,
                            unsigned opts, struct eng_value *out)
{
    struct item *e = meta_find(&dp->meta, key, nkey);
    if (!entry_visible(dp, e))
        return ENG_NOT_FOUND;
    /* For the meta commands: marks and fetched as they were; no access
     * times here, so idle stays 0 (docs/compat.md). */
    out->marks = item_marks(e);
    out->fetched = (e->iflags & ITEM_FETCHED) != 0;
    out->idle = 0;
    if (!(opts & ENG_GET_PEEK)) {
        e->iflags |= ITEM_FETCHED;
        meta_bump(&dp->meta, e);
    }
    /* Straight from the region, as memcached answers from its item.  The
     * range changes only when a later record that reuses it commits,
     * which needs its FREE sent after this entry was replaced and then
     * acknowledgements: never before the caller returns to the event
     * loop, which is all a transient value promises (engine.h). */
    out->key = item_key(e);
    out->nkey = e->nkey;
    out->data = (const char *)dp->region + meta_off(e);
    out->nbytes = e->nbytes;
    out->flags = e->flags;
    out->cas = e->cas;
    out->handle = NULL;
    out->exptime = (int64_t)e->exptime;
    out->bare = true;
    out->transient = true;
    return ENG_SUCCESS;
}

static eng_status dp_get(struct engine *eng, const char *key, size_t nkey,
                         struct eng_value *out, struct eng_result *res)
{
    (void)res;
    return dp_lookup(dp_of(eng), key, nkey, 0, out);
}

static eng_status dp_get_ex(struct engine *eng, const char *key, size_t nkey, unsigned opts,
                            struct eng_value *out, struct eng_result *res)
{
    (void)res;
    return dp_lookup(dp_of(eng), key, nkey, opts, out);
}

/* Without a coordinator nobody takes our keys over: no lease is needed
 * (and none would end a wait for a parity process that died). */
static bool lease_held(const struct data_engine *dp)
{
    return !dp->has_coordinator || sender_lease_held(&dp->tx);
}

/* The sender's word that the lease may be held again (a PONG, a parity
 * process dropped from the ack set).  PINGs go every 250 ms on every link,
 * so a waiting read never waits for a lease longer than the peers take to
 * answer one (test/integration/lease_wait.sh). */
static void dp_lease(void *ctx)
{
    struct data_engine *dp = ctx;
    if (dp->lease_waiting && lease_held(dp)) {
        dp->lease_waiting = false;
        read_waiters_wake(&dp->waiters);   /* reads waiting for units wait again */
    }
}

/* A read that must wait for a lease (link.h).  Only beyond the reserve
 * (more waiting reads than connections allowed) can memory run out: then
 * it cannot wait, and is answered. */
static bool wait_for_lease(struct data_engine *dp, eng_done_fn done, void *cookie)
{
    if (!read_waiters_add(&dp->waiters, done, cookie))
        return false;
    dp->lease_waiting = true;
    dp->lease_waits++;
    return true;
}

/* A recovery process cannot read a value whose units are not rebuilt: the
 * read waits (the connection re-parses it once the units arrived). */
static bool dp_read_wait(struct engine *eng, const char *key, size_t nkey, eng_done_fn done,
                         void *cookie)
{
    struct data_engine *dp = dp_of(eng);
    /* A replacement that does not serve yet, a recovery process that
     * handed its keys over (reads must not see its frozen state once the
     * replacement takes writes), and a process that restarted without its
     * state (its empty table would answer misses for keys the group holds,
     * e.g. while no coordinator leads to take it over, and until a parity
     * process has told which it is): everything waits until the map moves. */
    bool all_wait = dp->replica || dp->handed || dp->tx.refusing || dp->unsure;
    if (!all_wait && !lease_held(dp))
        return wait_for_lease(dp, done, cookie);
    if (!dp->recovering && !all_wait)
        return false;
    struct item *e = all_wait ? NULL : meta_find(&dp->meta, key, nkey);
    if (!all_wait && (!entry_visible(dp, e) || units_ready(dp, meta_off(e), e->nbytes)))
        return false;
    /* Out of memory (beyond the reserve), it cannot wait: the read is
     * served as a miss below. */
    return read_waiters_add(&dp->waiters, done, cookie);
}

/* A new slot map: reads waiting for a key that moved away are answered
 * MOVED when parsed again (conn_read_waits). */
static void dp_map_changed(struct engine *eng)
{
    read_waiters_wake(&dp_of(eng)->waiters);
}

void engine_data_units_arrived(struct engine *eng)
{
    struct data_engine *dp = dp_of(eng);
    read_waiters_wake(&dp->waiters);
    drain_queue(dp);
}

void engine_data_set_view(struct engine *eng, const struct group_view *v)
{
    struct data_engine *dp = dp_of(eng);
    if (dp->have_view && v->version < dp->view.version)
        return;
    dp->view = *v;
    dp->have_view = true;
    for (int j = 0; j < v->m; j++)
        if (v->pp_state[j] == GV_PP_DEAD && sender_has_peer(&dp->tx, j))
            sender_drop_peer(&dp->tx, j);
    /* Restarted without state: reads wait for a map in which another
     * process serves our keys; it comes just before such a view. */
    if (dp->tx.refusing)
        read_waiters_wake(&dp->waiters);
}

static void ctl_replica(struct data_engine *dp, int from);
static void ctl_serve(struct data_engine *dp, uint64_t xid);
static void ctl_admit(struct data_engine *dp, bool keep, uint64_t attempt);

/* "rebuild <g> <pp>", "replica <g> <dp> <pp>", "serve <g> <dp> <xid>",
 * "admit <g> <dp> <keep> <attempt>". */
static bool dp_control_rebuild(struct data_engine *dp, const char *text, size_t len)
{
    char buf[128], verb[16];
    unsigned long long a, b, c = 0, d = 0;
    if (len >= sizeof(buf))
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    int n = sscanf(buf, "%15s %llu %llu %llu %llu", verb, &a, &b, &c, &d);
    if (n < 3 || a != (unsigned long long)dp->group)
        return false;
    if (strcmp(verb, "rebuild") == 0 && b < (unsigned long long)dp->m) {
        engine_data_rebuild(&dp->base, ROLE_PARITY, (int)b, n >= 4 ? c : 0);
        return true;
    }
    if (b == (unsigned long long)dp->index && n == 5 && c <= 1 && strcmp(verb, "admit") == 0) {
        ctl_admit(dp, c == 1, d);
        return true;
    }
    if (b != (unsigned long long)dp->index || n != 4)
        return false;
    if (strcmp(verb, "replica") == 0 && c < (unsigned long long)dp->m) {
        ctl_replica(dp, (int)c);
        return true;
    }
    if (strcmp(verb, "serve") == 0) {
        ctl_serve(dp, c);
        return true;
    }
    return false;
}

/* "group <g> <view>" from the coordinator (it learns which parity processes
 * are dead), and the messages of a rebuild. */
static void dp_control(struct engine *eng, const char *text, size_t len)
{
    struct data_engine *dp = dp_of(eng);
    if (dp_control_rebuild(dp, text, len))
        return;
    char prefix[32];
    int n = snprintf(prefix, sizeof(prefix), "group %d ", dp->group);
    struct group_view v;
    if (n <= 0 || len <= (size_t)n || memcmp(text, prefix, (size_t)n) != 0 ||
        group_view_parse(&v, dp->k, dp->m, text + n, len - (size_t)n) < 0) {
        char shown[81];
        dp_log(dp, "unexpected control message '%s'; ignored",
               printable_copy(shown, sizeof(shown), text, len));
        return;
    }
    engine_data_set_view(eng, &v);
}

uint64_t engine_data_committed(struct engine *eng)
{
    return dp_of(eng)->tx.committed;
}

int engine_data_sendv_to(struct engine *eng, int pp, uint16_t type, const struct iovec *iov,
                         int n)
{
    return sender_sendv_to(&dp_of(eng)->tx, pp, type, iov, n);
}

size_t engine_data_items(struct engine *eng)
{
    struct data_engine *dp = dp_of(eng);
    return dp->meta.count - dp->placeholders;
}

/* ---- data source of unit recovery (docs/recovery.md) ---- */

struct unready_walk {
    struct data_engine *dp;
    struct item **found;
    size_t n, cap;
    bool oom;
};

static void unready_visit(void *ctx, struct item *e)
{
    struct unready_walk *w = ctx;
    /* The hook itself: units_ready() would also ask for the units. */
    if (w->oom || (e->iflags & (META_PENDING | DP_NEW)) || e->nbytes == 0 ||
        w->dp->units.ready(w->dp->units.ctx, meta_off(e), e->nbytes))
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        struct item **f = realloc(w->found, cap * sizeof(*f));
        if (!f) {
            w->oom = true;
            return;
        }
        w->found = f;
        w->cap = cap;
    }
    w->found[w->n++] = e;
}

size_t engine_data_drop_unready(struct engine *eng, uint64_t *xid)
{
    struct data_engine *dp = dp_of(eng);
    struct unready_walk w = { .dp = dp };
    *xid = dp->tx.xid;
    if (!dp->recovering)
        return 0;
    /* Not while a flush, a handoff or a copy of our state is under way
     * (as expiry waits for them): not finished, asked again. */
    if (dp->flush_inflight || dp->hold_writes || rebuild_blocks_writes(dp))
        return 1;
    meta_iterate(&dp->meta, unready_visit, &w);
    /* Deleted in records of DP_SWEEP_MAX_DELS, as expiry deletes. */
    for (size_t i = 0; i < w.n; i += DP_SWEEP_MAX_DELS) {
        begin_record(dp);
        for (size_t j = i; j < w.n && j < i + DP_SWEEP_MAX_DELS; j++)
            op_del(dp, w.found[j]);
        *xid = finish_record(dp, 0, NULL, 0, NULL, NULL, NULL);
    }
    if (w.n > 0)
        dp_log(dp, "%zu keys whose values lay in units that cannot be rebuilt are deleted "
               "(up to xid %" PRIu64 ")", w.n, *xid);
    free(w.found);
    return w.n + (w.oom ? 1 : 0);   /* out of memory: not finished, try again */
}

void engine_data_fetch(struct engine *eng, const struct recov_msg *m)
{
    struct data_engine *dp = dp_of(eng);
    struct recov_msg out;
    memset(&out, 0, sizeof(out));
    out.id = m->id;
    out.kind = RK_DATA;
    out.who = (uint32_t)dp->index;
    /* The region holds exactly the records up to the committed xid, and
     * every record sent before this message travels ahead of it. */
    out.t = dp->tx.committed;
    out.nranges = m->nranges;
    for (int i = 0; i < m->nranges; i++) {
        out.ranges[i] = m->ranges[i];
        if (out.ranges[i].off > dp->region_size ||
            out.ranges[i].len > dp->region_size - out.ranges[i].off) {
            dp_log(dp, "unit fetch %" PRIu64 ": range %" PRIu64 "+%" PRIu32
                   " outside the region; ignored", m->id, m->ranges[i].off, m->ranges[i].len);
            return;
        }
    }
    uint8_t hdr[1024];
    if (recov_header_max() > sizeof(hdr))
        abort();
    size_t nh = recov_encode_header(&out, hdr);
    struct iovec iov[1 + RECOV_MAX_RANGES];
    iov[0].iov_base = hdr;
    iov[0].iov_len = nh;
    for (int i = 0; i < out.nranges; i++) {
        iov[1 + i].iov_base = dp->region + out.ranges[i].off;
        iov[1 + i].iov_len = out.ranges[i].len;
    }
    for (int c = 0; c < m->nlist; c++) {
        if (sender_sendv_to(&dp->tx, m->list[c], FT_REPLY, iov, 1 + out.nranges) < 0 &&
            dp->verbose)
            dp_log(dp, "unit fetch %" PRIu64 ": link to parity %d down", m->id, m->list[c]);
    }
}

static void dp_message(void *ctx, int peer, uint16_t type, const uint8_t *payload,
                       uint32_t len)
{
    struct data_engine *dp = ctx;
    struct recov_msg m;
    if (type == FT_REPLY && rb_kind_of(payload, len) == RB_TAKEN) {
        copy_taken(dp, payload, len);
        return;
    }
    if (type == FT_REQUEST && recov_decode(payload, len, &m) == 0 && m.kind == RK_FETCH) {
        engine_data_fetch(&dp->base, &m);
        return;
    }
    if (dp->units.message)
        dp->units.message(dp->units.ctx, peer, type, payload, len);
    else if (dp->verbose)
        dp_log(dp, "ignoring a recovery message of %" PRIu32 " bytes from parity %d", len, peer);
}

/* Keys of one slot (slot migration): committed, visible entries only. */
struct slot_walk {
    struct data_engine *dp;
    unsigned slot;
    void (*fn)(void *ctx, const char *key, size_t nkey);
    void *ctx;
};

static void slot_visit(void *ctx, struct item *e)
{
    struct slot_walk *w = ctx;
    if (!entry_visible(w->dp, e) || slotmap_slot(item_key(e), e->nkey) != w->slot)
        return;
    w->fn(w->ctx, item_key(e), e->nkey);
}

/* A walk goes on over the table it began on only (a copy taken meanwhile
 * replaced it): true when cursor walks the current one. */
static bool walk_on_table(const struct data_engine *dp, struct eng_cursor *cursor)
{
    if (cursor->pos == 0 && cursor->table == 0)
        cursor->table = dp->table_gen;
    return cursor->table == dp->table_gen;
}

static enum eng_walk dp_slot_keys(struct engine *eng, unsigned slot, struct eng_cursor *cursor,
                                  size_t budget,
                                  void (*fn)(void *ctx, const char *key, size_t nkey), void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    if (!walk_on_table(dp, cursor))
        return ENG_WALK_REFUSED;
    struct slot_walk w = { dp, slot, fn, ctx };
    return assoc_walk(&dp->meta.table, &cursor->pos, budget, slot_visit, &w) ? ENG_WALK_DONE
                                                                             : ENG_WALK_MORE;
}

/* stats cachedump, lru_crawler metadump: the visible entries, most recently
 * stored or read first.  Only metadata is shown (data is NULL: a value may
 * lie in a unit a recovery process has not rebuilt).  No access times here,
 * so idle is 0 (docs/compat.md).  A process that serves nobody's keys now
 * (a replacement taking its copy, or one restarted without its state)
 * lists nothing: refused. */
static bool dp_lists_keys(const struct data_engine *dp)
{
    return !(dp->replica || dp->handed || dp->tx.refusing || dp->unsure);
}

static struct eng_value listed_entry(const struct item *e)
{
    struct eng_value v = {
        .key = item_key(e), .nkey = e->nkey, .data = NULL, .nbytes = e->nbytes,
        .flags = e->flags, .cas = e->cas, .exptime = (int64_t)e->exptime,
        .fetched = (e->iflags & ITEM_FETCHED) != 0, .idle = 0, .bare = true,
    };
    return v;
}

static bool dp_visit_recent(struct engine *eng, bool (*fn)(void *ctx, const struct eng_value *v),
                            void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    if (!dp_lists_keys(dp))
        return false;
    for (struct item *e = dp->meta.lru_head; e; e = e->next) {
        if (!entry_visible(dp, e))
            continue;
        struct eng_value v = listed_entry(e);
        if (!fn(ctx, &v))
            break;
    }
    return true;
}

struct listing_walk {
    const struct data_engine *dp;
    void (*fn)(void *ctx, const struct eng_value *v);
    void *ctx;
};

static void listing_visit(void *ctx, struct item *e)
{
    struct listing_walk *w = ctx;
    if (!entry_visible(w->dp, e))
        return;
    struct eng_value v = listed_entry(e);
    w->fn(w->ctx, &v);
}

/* lru_crawler metadump, a piece at a time: the same entries in hash order.
 * A table only grows (a flush or a forgotten state empties it in place),
 * so the walk's promise holds across whatever happens between pieces; a
 * process that stops serving keys meanwhile ends it refused, and so does
 * one whose table was replaced (a handoff takes the replica's) while no
 * piece was asked for. */
static enum eng_walk dp_walk(struct engine *eng, struct eng_cursor *cursor, size_t budget,
                             void (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    if (!dp_lists_keys(dp) || !walk_on_table(dp, cursor))
        return ENG_WALK_REFUSED;
    struct listing_walk w = { dp, fn, ctx };
    return assoc_walk(&dp->meta.table, &cursor->pos, budget, listing_visit, &w) ? ENG_WALK_DONE
                                                                                : ENG_WALK_MORE;
}

/* Values are transient views of the region (dp_get): nothing to release. */
static void dp_release(struct engine *eng, void *handle)
{
    (void)eng;
    (void)handle;
}

static eng_status dp_mutate(struct engine *eng, const struct eng_mutation *m,
                            struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct data_engine *dp = dp_of(eng);
    if (!writeq_empty(&dp->queue)) {
        if (!enqueue(dp, m, done, cookie)) {
            res->status = ENG_NO_MEMORY;
            return ENG_NO_MEMORY;
        }
        return ENG_PENDING;
    }
    enum try_result tr = try_mutation(dp, m, done, cookie, res);
    if (tr == TRY_DONE)
        return res->status;
    if (tr == TRY_BLOCKED && !enqueue(dp, m, done, cookie)) {
        res->status = ENG_NO_MEMORY;
        return ENG_NO_MEMORY;
    }
    return ENG_PENDING;
}

/* Bytes in used pieces: the allocator's, or the pieces' while it is being
 * built. */
static uint64_t used_bytes(const struct data_engine *dp)
{
    return dp->alloc ? dalloc_used_bytes(dp->alloc) : pieceset_used_bytes(dp->pieces);
}

static size_t dp_meta_bytes(const struct data_engine *dp)
{
    size_t space = dp->alloc ? dalloc_meta_bytes(dp->alloc) : pieceset_meta_bytes(dp->pieces);
    return dp->meta.heap_bytes + assoc_bytes(&dp->meta.table) + space +
           sender_backlog(&dp->tx) + dp->df_cap * sizeof(*dp->df);
}

static bool dp_stats(struct engine *eng, const char *group, eng_stat_fn emit, void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    if (strcmp(group, "settings") == 0) {
        emit(ctx, "region_size", "%zu", dp->region_size);
        emit(ctx, "coding_group", "%d", dp->group);
        emit(ctx, "scheme", "rs:%d:%d", dp->k, dp->k + dp->m);   /* no spaces: one value */
        return true;
    }
    /* Values live in a region, not slab classes: no per-class lists (an
     * error would break monitoring tools that ask for them). */
    if (strcmp(group, "items") == 0 || strcmp(group, "slabs") == 0 ||
        strcmp(group, "sizes") == 0)
        return true;
    if (group[0] != '\0')
        return false;
    emit(ctx, "curr_items", "%zu", dp->meta.count - dp->placeholders);
    emit(ctx, "total_items", "%" PRIu64, dp->total_items);
    emit(ctx, "bytes", "%" PRIu64, used_bytes(dp));
    emit(ctx, "limit_maxbytes", "%zu", dp->region_size);
    emit(ctx, "evictions", "%" PRIu64, dp->evictions);
    emit(ctx, "expired_removed", "%" PRIu64, dp->expired_removed);
    emit(ctx, "xid", "%" PRIu64, dp->tx.xid);
    emit(ctx, "stable_xid", "%" PRIu64, dp->tx.stable);
    emit(ctx, "records_sent", "%" PRIu64, dp->tx.records_sent);
    emit(ctx, "write_queue", "%zu", dp->queue.len);
    emit(ctx, "blocked_waits", "%" PRIu64, dp->blocked_waits);
    emit(ctx, "in_place_writes", "%" PRIu64, dp->in_place_writes);
    if (dp->recovering)
        emit(ctx, "unit_waits", "%" PRIu64, dp->unit_waits);
    emit(ctx, "lease_waits", "%" PRIu64, dp->lease_waits);
    return true;
}

static void dp_stats_reset(struct engine *eng)
{
    struct data_engine *dp = dp_of(eng);
    dp->evictions = 0;
    dp->in_place_writes = 0;
    dp->expired_removed = 0;
    dp->total_items = 0;
    dp->blocked_waits = 0;
    dp->lease_waits = 0;
}

struct sweep_ctx {
    struct data_engine *dp;
    struct item *found[DP_SWEEP_MAX_DELS];
    int n;
};

static void sweep_visit(void *ctx, struct item *e)
{
    struct sweep_ctx *sc = ctx;
    if (sc->n < DP_SWEEP_MAX_DELS && !(e->iflags & (META_PENDING | DP_NEW)) &&
        entry_expired(sc->dp, e))
        sc->found[sc->n++] = e;
}

/* Expired entries leave the table through a record like any other change
 * (one record per sweep step, carrying every DEL found). */
static void sweep_expired(struct data_engine *dp)
{
    if (dp->flush_inflight || !writeq_empty(&dp->queue) || dp->hold_writes || dp->replica ||
        rebuild_blocks_writes(dp))
        return;
    struct sweep_ctx sc = { .dp = dp, .n = 0 };
    assoc_scan(&dp->meta.table, &dp->sweep_cursor, DP_SWEEP_BUDGET, sweep_visit, &sc);
    if (sc.n == 0)
        return;
    begin_record(dp);
    for (int i = 0; i < sc.n; i++) {
        op_del(dp, sc.found[i]);
        dp->expired_removed++;
    }
    finish_record(dp, 0, NULL, 0, NULL, NULL, NULL);
}

static void dp_tick(struct engine *eng, time_t now)
{
    struct data_engine *dp = dp_of(eng);
    clock_set(&dp->clock, now);
    assoc_migrate(&dp->meta.table, 64);
    if (dp->flush_at && now >= dp->flush_at) {
        struct eng_mutation m = { .op = ENG_OP_FLUSH };
        struct eng_result res;
        dp->flush_at = 0;
        if (!writeq_empty(&dp->queue) || try_mutation(dp, &m, NULL, NULL, &res) == TRY_BLOCKED)
            enqueue(dp, &m, NULL, NULL);
    }
    sweep_expired(dp);
}

/* ---- sending a copy of our state (rebuild.h) ---- */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Nothing in flight and no released space still to be announced: the
 * table, allocator and region are exactly the effect of records 1..xid. */
static bool make_quiet(struct data_engine *dp)
{
    if (in_flight(dp))
        return false;
    if (dp->df_head < dp->df_len && dp->alloc == NULL)
        return false;   /* frees that cannot be announced before the allocator is built */
    if (dp->df_head < dp->df_len) {
        emit_usable_frees(dp);
        flush_stray_ops(dp);
        return !in_flight(dp) && dp->nops == 0;
    }
    return dp->nops == 0;
}

static int send_rb(struct data_engine *dp, const struct rb_out *o, const uint8_t *p, size_t len)
{
    struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
    return sender_sendv_to_role(&dp->tx, o->role, o->index, FT_REQUEST, &iov, 1);
}

static void rebuild_fail(struct data_engine *dp, struct rb_out *o, const char *why)
{
    dp_log(dp, "copy of our state to %s %d abandoned: %s", cluster_role_name(o->role), o->index,
           why);
    if (o->added)
        sender_drop_peer_role(&dp->tx, o->role, o->index);
    o->active = false;
}

/* META, META_DONE and UNITS messages sent (RB_TAKEN counts the same). */
static uint64_t copy_sent(const struct rb_out *o)
{
    return o->walk.messages + o->unit_msgs;
}

static bool copy_window_open(const struct rb_out *o)
{
    return copy_sent(o) - o->taken < DP_REBUILD_WINDOW;
}

static void rebuild_pump(struct data_engine *dp, struct rb_out *o)
{
    struct rb_msg m = { 0 };
    uint64_t budget = 16 * RB_UNITS_CHUNK;
    while (o->next_off < o->end && budget > 0 && copy_window_open(o)) {
        uint64_t n = o->end - o->next_off < RB_UNITS_CHUNK ? o->end - o->next_off : RB_UNITS_CHUNK;
        rb_msg_units(&m, dp->tx.committed, o->next_off, dp->region + o->next_off, (uint32_t)n);
        if (m.oom || send_rb(dp, o, m.buf, m.len) != 0) {
            rb_msg_free(&m);
            rebuild_fail(dp, o, m.oom ? "out of memory" : "its link is down");
            return;
        }
        o->next_off += n;
        o->unit_msgs++;
        o->units += (n + RECOV_UNIT - 1) / RECOV_UNIT;
        budget = budget > n ? budget - n : 0;
    }
    if (o->next_off >= o->end) {
        rb_msg_end(&m, o->units);
        if (m.oom || send_rb(dp, o, m.buf, m.len) != 0) {
            rb_msg_free(&m);
            rebuild_fail(dp, o, "its link is down");
            return;
        }
        sender_peer_settled(&dp->tx, o->role, o->index);
        o->active = false;
        dp_log(dp, "copy of our state to %s %d sent: %" PRIu64 " units after xid %" PRIu64,
               cluster_role_name(o->role), o->index, o->units, o->x0);
    }
    rb_msg_free(&m);
}

/* An entry with a record op in flight (or not yet in a record): its
 * record carries what it becomes, so the walk leaves it out. */
static bool entry_in_flight(void *ctx, const struct item *e)
{
    (void)ctx;
    return (e->iflags & (META_PENDING | DP_NEW)) != 0;
}

static int send_meta_cb(void *ctx, const uint8_t *p, size_t len)
{
    struct rb_out **args = ctx;
    struct data_engine *dp = (struct data_engine *)args[0];
    return send_rb(dp, args[1], p, len);
}

/* The next META messages of the walk (rebuild.h), one RB_META_CHUNK each,
 * as far as the window allows: the records of the writes that go on
 * meanwhile queue behind them at the peer. */
static void rebuild_pump_meta(struct data_engine *dp, struct rb_out *o, uint64_t now)
{
    /* A flush takes effect on our table when it commits: until then the
     * table still holds what the FLUSH record, sent already, dropped. */
    if (dp->flush_inflight)
        return;
    /* Every change the walk can see must be in a record sent before the
     * message that shows it. */
    flush_stray_ops(dp);
    void *args[2] = { dp, o };
    while (copy_window_open(o)) {
        int rc = rb_meta_walk_step(&o->walk, &dp->meta, dp->alloc, RB_META_CHUNK,
                                   entry_in_flight, dp, send_meta_cb, args);
        if (rc < 0) {
            rebuild_fail(dp, o, "cannot send its metadata");
            return;
        }
        if (rc == 1) {
            o->meta_done = true;
            dp_log(dp, "metadata of the copy to %s %d sent by xid %" PRIu64 ": %" PRIu64
                   " pieces and %" PRIu64 " entries in %" PRIu64 " messages, %" PRIu64
                   " ms; %" PRIu64 " records committed meanwhile", cluster_role_name(o->role),
                   o->index, dp->tx.xid, o->walk.pieces, o->walk.entries, o->walk.messages,
                   now - o->joined_at_ms, dp->tx.committed - o->x0);
            return;
        }
    }
}

/* The next step of the copies in *delay_ms or ms, whichever is sooner. */
static void step_within(int *delay_ms, int ms)
{
    if (*delay_ms == 0 || ms < *delay_ms)
        *delay_ms = ms;
}

/* A copy that sent what it may goes on when its peer takes some
 * (copy_taken); this is only a safety net, not a poll. */
#define DP_REBUILD_TAKEN_WAIT_MS 250

static void rebuild_step(struct data_engine *dp)
{
    uint64_t now = mono_ms();
    int delay_ms = 0;
    for (int i = 0; i < DP_MAX_REBUILDS; i++) {
        struct rb_out *o = &dp->rb[i];
        if (!o->active)
            continue;
        if (!o->added) {
            /* A recovery process sends data only once every unit is
             * rebuilt; any copy waits for our allocator (the copy carries
             * its pieces). */
            if (dp->alloc_broken) {
                rebuild_fail(dp, o, "our allocator cannot be built (its pieces overlap)");
                continue;
            }
            if (!dp->alloc || (dp->recovering && !dp->units.complete(dp->units.ctx))) {
                step_within(&delay_ms, 20);
                continue;
            }
            o->ready = true;   /* writes wait for the quiet point from now on */
            if (!make_quiet(dp))
                continue;   /* after_commit calls again */
            if (sender_add_peer(&dp->tx, o->role, o->index) != 0) {
                rebuild_fail(dp, o, "it cannot join the ack set");
                continue;
            }
            o->added = true;
            o->x0 = dp->tx.xid;
            o->added_at_ms = now;
            step_within(&delay_ms, 20);
        } else if (!o->joined) {
            if (now - o->added_at_ms > DP_REBUILD_JOIN_MS)
                rebuild_fail(dp, o, "its link did not come up");
            else
                step_within(&delay_ms, 20);
        } else if (!o->meta_done) {
            rebuild_pump_meta(dp, o, now);
        } else {
            rebuild_pump(dp, o);
        }
        if (o->active && o->joined)
            step_within(&delay_ms, copy_window_open(o) ? 1 : DP_REBUILD_TAKEN_WAIT_MS);
    }
    if (dp->hold_writes && dp->quiet && !rebuild_blocks_writes(dp) && make_quiet(dp)) {
        void (*quiet)(void *, uint64_t) = dp->quiet;
        dp->quiet = NULL;
        dp->handed = true;
        quiet(dp->quiet_ctx, dp->tx.xid);
    }
    if (delay_ms) {
        struct timeval tv = { 0, delay_ms * 1000 };
        evtimer_add(dp->rb_timer, &tv);
    }
    if (!rebuild_blocks_writes(dp) && !dp->hold_writes)
        drain_queue(dp);
}

static void on_rb_timer(evutil_socket_t fd, short what, void *arg)
{
    rebuild_step(arg);
}

static struct rb_out *rb_find(struct data_engine *dp, enum cluster_role role, int index)
{
    for (int i = 0; i < DP_MAX_REBUILDS; i++)
        if (dp->rb[i].active && dp->rb[i].role == role && dp->rb[i].index == index)
            return &dp->rb[i];
    return NULL;
}

/* The peer took more of the copy: more may go. */
static void copy_taken(struct data_engine *dp, const uint8_t *p, uint32_t len)
{
    uint8_t role;
    uint32_t index;
    uint64_t taken;
    if (rb_decode_taken(p, len, &role, &index, &taken) != 0 ||
        (role != ROLE_DATA && role != ROLE_PARITY) || index > INT32_MAX) {
        dp_log(dp, "malformed acknowledgement of a copy's messages; ignored");
        return;
    }
    struct rb_out *o = rb_find(dp, (enum cluster_role)role, (int)index);
    if (!o || !o->joined || taken <= o->taken)
        return;
    o->taken = taken < copy_sent(o) ? taken : copy_sent(o);
    struct timeval tv = { 0, 0 };
    evtimer_add(dp->rb_timer, &tv);   /* from the loop, not inside the link */
}

/* The new peer's link is up: BEGIN goes out before any record after x0
 * (the sender resends those right after this); the metadata follows from
 * the loop (rebuild_pump_meta). */
static void rb_joined(void *ctx, enum cluster_role role, int index)
{
    struct data_engine *dp = ctx;
    struct rb_out *o = rb_find(dp, role, index);
    if (!o || !o->added || o->joined)
        return;
    /* Units beyond what was ever written by now are zero at x0: records
     * after x0 that write there reach the peer (rebuild.h). */
    uint64_t end = (dp->touched_end + RECOV_UNIT - 1) / RECOV_UNIT * RECOV_UNIT;
    o->end = end < dp->region_size ? end : dp->region_size;
    o->next_off = 0;
    struct rb_begin b = { .source = (uint32_t)dp->index, .x0 = o->x0, .end = o->end,
                          .max_cas = dp->cas_counter, .attempt = o->attempt };
    struct rb_msg m = { 0 };
    rb_msg_begin(&m, &b);
    int rc = m.oom ? -1 : send_rb(dp, o, m.buf, m.len);
    if (rc == 0 && dp->test_begin_twice && role == ROLE_PARITY) {
        dp->test_begin_twice = false;
        dp_log(dp, "test fault: the BEGIN of this copy to parity %d goes twice", index);
        rc = send_rb(dp, o, m.buf, m.len);
    }
    rb_msg_free(&m);
    if (rc != 0) {
        rebuild_fail(dp, o, "cannot send its BEGIN");
        return;
    }
    o->joined = true;
    o->joined_at_ms = mono_ms();
    memset(&o->walk, 0, sizeof(o->walk));
    o->unit_msgs = o->taken = 0;
    dp_log(dp, "copy of our state to %s %d begins at xid %" PRIu64 " (%" PRIu64 " records "
           "since): %zu keys and %" PRIu64 " region bytes follow while writes go on",
           cluster_role_name(role), index, o->x0, dp->tx.xid - o->x0, dp->meta.count, o->end);
    struct timeval tv = { 0, 0 };
    evtimer_add(dp->rb_timer, &tv);   /* the metadata goes from the loop, not inside the link */
}

static void rb_join_failed(void *ctx, enum cluster_role role, int index, const char *why)
{
    struct data_engine *dp = ctx;
    struct rb_out *o = rb_find(dp, role, index);
    if (!o)
        return;
    o->added = false;   /* the sender dropped it already */
    rebuild_fail(dp, o, why);
    struct timeval tv = { 0, 0 };
    evtimer_add(dp->rb_timer, &tv);
}

/* What is left of a copy to (role, index) goes: one under way fails, and a
 * peer it made settled leaves the ack set. */
static void drop_copy(struct data_engine *dp, enum cluster_role role, int index, const char *why)
{
    struct rb_out *o = rb_find(dp, role, index);
    if (o)
        rebuild_fail(dp, o, why);
    sender_drop_peer_role(&dp->tx, role, index);
}

int engine_data_rebuild(struct engine *eng, enum cluster_role role, int index, uint64_t attempt)
{
    struct data_engine *dp = dp_of(eng);
    /* The coordinator asks once per attempt (a migration's `copy`, a
     * rebuild's `rebuild` to its sources), and the peer starts every
     * attempt empty.  So a request for the same rebuild attempt, or for a
     * copy that has not joined its peer yet, is the same copy; otherwise
     * what is left of an earlier attempt goes first: a copy under way, or a
     * settled peer (a data process whose `resume` never came: lost on a
     * dropped control link, or a coordinator restarted mid-copy; a parity
     * process whose rebuild started over before we heard that it was
     * dead), which the new copy could not join the ack set beside, and
     * whose stream the emptied peer cannot use. */
    struct rb_out *old = rb_find(dp, role, index);
    if (old && ((attempt != 0 && old->attempt == attempt) || !old->added)) {
        old->attempt = attempt;
        return 0;
    }
    drop_copy(dp, role, index, "a new attempt was asked for");
    for (int i = 0; i < DP_MAX_REBUILDS; i++) {
        struct rb_out *o = &dp->rb[i];
        if (o->active)
            continue;
        memset(o, 0, sizeof(*o));
        o->active = true;
        o->role = role;
        o->index = index;
        o->attempt = attempt;
        dp_log(dp, "copy of our state to %s %d requested", cluster_role_name(role), index);
        rebuild_step(dp);
        return 0;
    }
    return -1;
}

void engine_data_hold(struct engine *eng, void (*quiet)(void *ctx, uint64_t xid), void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    dp->hold_writes = true;
    dp->quiet = quiet;
    dp->quiet_ctx = ctx;
    rebuild_step(dp);
}

void engine_data_resume(struct engine *eng)
{
    struct data_engine *dp = dp_of(eng);
    /* The data process we were copying to is not taking over (it died, or
     * the migration made no progress): out of the ack set, or every write
     * waits for acks it will never send once its link is gone (a copy
     * that ended made it a settled peer, which a lost link does not drop).
     * The next attempt copies to it afresh. */
    dp->hold_writes = false;     /* first: the drop commits, and a held */
    dp->handed = false;          /* write's commit must not say "handed" */
    dp->quiet = NULL;
    drop_copy(dp, ROLE_DATA, dp->index, "the migration was abandoned");
    engine_data_units_arrived(eng);
    rebuild_step(dp);
}

struct moved_ctx {
    struct data_engine *dp;
    const char *host;
    int port;
};

static enum writeq_retry answer_moved(void *ctx, const struct writeq_entry *e,
                                      struct eng_result *res)
{
    struct moved_ctx *mc = ctx;
    memset(res, 0, sizeof(*res));
    res->status = ENG_MOVED;
    snprintf(mc->dp->msg, sizeof(mc->dp->msg), "%u 0 %s:%d",
             slotmap_slot(e->m.key, e->m.nkey), mc->host, mc->port);
    res->msg = mc->dp->msg;
    return WQ_ANSWER;
}

bool engine_data_handed(const struct engine *eng)
{
    return dp_of((struct engine *)eng)->handed;
}

void engine_data_release(struct engine *eng, const char *host, int port)
{
    struct data_engine *dp = dp_of(eng);
    struct moved_ctx mc = { dp, host, port };
    writeq_drain(&dp->queue, answer_moved, &mc);
    read_waiters_wake(&dp->waiters);   /* parsed again, routing sends them on */
}

/* ---- a replacement data process taking its copy (replica.h) ---- */

static void dp_ctl(struct data_engine *dp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dp_ctl(struct data_engine *dp, const char *fmt, ...)
{
    char text[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!dp->ctl_send || dp->ctl_send(dp->ctl_arg, text) < 0)
        dp_log(dp, "cannot tell the coordinator '%s': its link is down", text);
}

static void say_copied(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct data_engine *dp = arg;
    dp_ctl(dp, "copied %d %d", dp->group, dp->index);
}

static void replica_done(void *ctx)
{
    struct data_engine *dp = ctx;
    if (dp->copied_timer) {
        int ms = dp->test_copied_delay_ms;
        dp_log(dp, "test fault: the copy is complete; saying so in %d ms", ms);
        struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
        evtimer_add(dp->copied_timer, &tv);
        return;
    }
    say_copied(-1, 0, dp);
}

static void replica_log(void *ctx, const char *line)
{
    dp_log(ctx, "%s", line);
}

/* The copy cannot be handed off: the coordinator starts the migration over
 * now rather than once its progress has stopped for a while. */
static void replica_spoiled_now(void *ctx)
{
    struct data_engine *dp = ctx;
    dp_ctl(dp, "copy-failed %d %d", dp->group, dp->index);
}

static void ctl_replica(struct data_engine *dp, int from)
{
    if (dp->replica && replica_from(dp->replica) == from && !replica_spoiled(dp->replica)) {
        if (replica_complete(dp->replica))
            replica_done(dp);
        return;
    }
    if (dp->replica && replica_spoiled(dp->replica))
        dp_log(dp, "a new copy from parity process %d replaces the one abandoned", from);
    replica_free(dp->replica);
    dp->replica = NULL;
    if (!dp->tx.refusing && dp->tx.xid > 0) {
        /* Declared dead while it still ran (hung, cut off): its state is
         * older than the group's and must not come back.  Its supervisor
         * starts it again empty. */
        dp_log(dp, "declared dead while still running (xid %" PRIu64 "); exiting so that it "
               "restarts empty and takes its keys back", dp->tx.xid);
        exit(EXIT_FAILURE);
    }
    struct replica_hooks h = { .ctx = dp, .complete = replica_done, .log = replica_log,
                               .spoiled = replica_spoiled_now };
    dp->replica = replica_new(dp->evbase, dp->cluster, dp->group, dp->index, from, dp->region,
                              dp->region_size, 0, &h);
    if (!dp->replica) {
        dp_log(dp, "cannot start taking the copy from parity process %d", from);
    } else if (dp->test_refuse_meta) {
        dp->test_refuse_meta = false;
        dp_log(dp, "test fault: this copy's first metadata message is refused");
        replica_test_refuse_meta(dp->replica);
    }
}

/* A new stream from xid on, to the parity processes the view says hold
 * parity (all of them before any view): the old one's peers and its
 * refusal are forgotten.  Returns how many peers it has. */
static int restart_stream(struct data_engine *dp, uint64_t xid, const char *why)
{
    int peers[SENDER_MAX_PEERS], npeers = 0;
    for (int j = 0; j < dp->m; j++)
        if (!dp->have_view || dp->view.pp_state[j] == GV_PP_PARITY)
            peers[npeers++] = j;
    /* Writes waiting on the old stream are answered, not forgotten. */
    sender_fail_waiting(&dp->tx, "the data process's stream was restarted");
    sender_destroy(&dp->tx);
    char who[64];
    snprintf(who, sizeof(who), "data g%d/%d", dp->group, dp->index);
    struct sender_config sc = dp_sender_config(dp, dp->cluster, LINK_ROLE_DATA, dp->index, who);
    sc.peers = peers;
    sc.npeers = npeers;
    if (sender_init(&dp->tx, &sc) < 0) {
        dp_log(dp, "cannot start replicating after %s", why);
        abort();
    }
    sender_start_at(&dp->tx, xid);
    dp->unsure = false;
    return npeers;
}

/* Back to an empty table, allocator and region, as a fresh process has
 * them: whatever writes the refused stream had begun leave no trace that
 * a rebuilt parity process would not have. */
static void forget_state(struct data_engine *dp)
{
    meta_clear(&dp->meta);
    stop_alloc_build(dp);
    dalloc_reset(dp->alloc);
    if (madvise(dp->region, dp->region_size, MADV_DONTNEED) != 0)
        memset(dp->region, 0, dp->region_size);
    dp->df_head = dp->df_len = 0;
    dp->deferred_bytes = 0;
    dp->placeholders = 0;
    dp->nnotes = 0;
    dp->touched_end = 0;
    dp->flush_inflight = false;
    dp->flush_at = 0;
    /* The stream they joined ends here (restart_stream). */
    memset(dp->rb, 0, sizeof(dp->rb));
}

/* "admit <g> <f>": the group lost our keys (more failures than it
 * tolerates) and nobody served them since: we serve them again from what
 * we hold.  Restarted, that is nothing: the table is empty and a new
 * stream starts (the parity processes that knew the old one are rebuilt
 * before they hold parity again).  Only cut off (declared dead while we
 * ran), it is every key we had, which no other process changed meanwhile:
 * the stream goes on.  Answered like a handoff's serve. */
static void ctl_admit(struct data_engine *dp, bool keep, uint64_t attempt)
{
    if (dp->recovering)
        return;
    if (attempt != dp->admitted) {
        /* Once per admission: a resent word must not empty what the
         * admitted process stored since. */
        dp->admitted = attempt;
        bool has_state = !dp->tx.refusing && !dp->replica && (dp->tx.xid > 0 || dp->meta.count > 0);
        if (dp->replica) {
            /* A copy from a recovery process that is gone with the group's data. */
            replica_free(dp->replica);
            dp->replica = NULL;
        }
        if (keep && has_state) {
            dp_log(dp, "the group lost our keys while we were cut off and nobody served them "
                   "since: serving again with our %zu keys at xid %" PRIu64, dp->meta.count,
                   dp->tx.xid);
            dp->unsure = false;
        } else {
            dp_log(dp, "the group lost our keys; serving them again, empty, from xid 0%s",
                   has_state ? " (what we held is older than what was served since)" : "");
            forget_state(dp);
            restart_stream(dp, 0, "admission");
        }
    }
    dp_ctl(dp, "serving-dp %d %d", dp->group, dp->index);
    read_waiters_wake(&dp->waiters);
    drain_queue(dp);
}

/* The handoff: the recovery process holds its writes at xid; we apply up
 * to it, take the table, allocator and region, and continue the stream. */
static void ctl_serve(struct data_engine *dp, uint64_t xid)
{
    if (!dp->replica) {
        if (!dp->tx.refusing && dp->tx.xid >= xid)
            dp_ctl(dp, "serving-dp %d %d", dp->group, dp->index);
        return;
    }
    if (!replica_complete(dp->replica) || replica_settle(dp->replica, xid) != 0)
        return;   /* the coordinator asks again */
    uint64_t max_cas, end;
    struct meta_table meta;
    struct pieceset *pieces;
    if (dp->test_take_fail) {
        dp->test_take_fail = false;
        dp_log(dp, "test fault: this handoff fails at taking the table, as if out of memory");
        return;
    }
    if (replica_take(dp->replica, &meta, &pieces, &max_cas, &end) != 0)
        return;   /* logged, nothing taken; the coordinator asks again */
    meta_destroy(&dp->meta);
    /* The allocator is built from the pieces on a thread while we serve
     * (a million pieces take about 0.1 s, and the recovery process holds
     * its writes until the map moves to us): writes that need space wait
     * for it, reads and writes in place do not. */
    stop_alloc_build(dp);   /* none should be under way; if one were, it goes */
    dalloc_destroy(dp->alloc);
    dp->alloc = NULL;
    pieceset_destroy(dp->pieces);
    dp->meta = meta;
    dp->pieces = pieces;
    dp->table_gen++;
    replica_free(dp->replica);
    dp->replica = NULL;
    int npeers = restart_stream(dp, xid, "the handoff");
    if (max_cas + 1 > dp->cas_counter)
        dp->cas_counter = max_cas + 1;
    dp->touched_end = end;
    dp->total_items = dp->meta.count;
    dp->placeholders = 0;
    dp_log(dp, "serving again from xid %" PRIu64 ": %zu keys, replicating to %d parity "
           "process(es); the allocator is being built from %" PRIu64 " pieces", xid,
           dp->meta.count, npeers, pieceset_count(dp->pieces));
    start_alloc_build(dp);
    dp_ctl(dp, "serving-dp %d %d", dp->group, dp->index);
    engine_data_units_arrived(&dp->base);
}

/* The heartbeat's word for the coordinator: a copy's progress ("mig"), or
 * "nostate": this process restarted without its state (a parity process's
 * WELCOME said the group holds more) and takes no copy.  A coordinator that
 * never saw the old process die (it started after, or had not heard from
 * it yet) learns from that that its keys must be taken over. */
static size_t dp_heartbeat_extra(struct engine *eng, char *buf, size_t len)
{
    struct data_engine *dp = dp_of(eng);
    if (!dp->replica) {
        if (dp->recovering || !dp->tx.refusing)
            return 0;
        int n = snprintf(buf, len, "nostate %d", dp->index);
        return n > 0 && (size_t)n < len ? (size_t)n : 0;
    }
    uint64_t done, total, bytes;
    replica_progress(dp->replica, &done, &total, &bytes);
    int n = snprintf(buf, len, "mig %d %" PRIu64 " %" PRIu64 " %" PRIu64, dp->index, done, total,
                     bytes);
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

static int dp_lost_peers(struct engine *eng, struct eng_lost_peer *out, int max)
{
    return sender_lost_peers(&dp_of(eng)->tx, out, max);
}

/* ---- admin commands (docs/coding-group.md) ---- */

static bool parse_u64_arg(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return false;
    *out = v;
    return true;
}

static void admin_info(struct data_engine *dp, eng_write_fn write, void *ctx)
{
    engine_reply(write, ctx, "STAT role %s\r\nSTAT group %d\r\nSTAT index %d\r\n",
                 dp->recovering ? "recovery" : "data", dp->group, dp->index);
    engine_reply(write, ctx, "STAT k %d\r\nSTAT m %d\r\nSTAT region_size %zu\r\n", dp->k, dp->m, dp->region_size);
    sender_info(&dp->tx, write, ctx);
    engine_reply(write, ctx, "STAT items %zu\r\n", dp->meta.count - dp->placeholders);
    engine_reply(write, ctx, "STAT region_used %" PRIu64 "\r\n", used_bytes(dp));
    engine_reply(write, ctx, "STAT value_bytes %" PRIu64 "\r\n", dp->meta.value_bytes);
    engine_reply(write, ctx, "STAT meta_bytes %zu\r\nSTAT rss %" PRIu64 "\r\n", dp_meta_bytes(dp),
                 engine_process_rss());
    engine_reply(write, ctx, "STAT write_queue %zu\r\nSTAT deferred_frees %zu\r\n", dp->queue.len, dp->df_len - dp->df_head);
    write(ctx, "END\r\n", 5);
}

static bool admin_region(struct data_engine *dp, int argc, char **argv, eng_write_fn write, void *ctx)
{
    uint64_t off, len;
    if (argc != 3 || !parse_u64_arg(argv[1], &off) || !parse_u64_arg(argv[2], &len)) {
        engine_reply(write, ctx, "CLIENT_ERROR usage: cocytus region <off> <len>\r\n");
        return true;
    }
    if (len > DP_ADMIN_REGION_MAX || off > dp->region_size || len > dp->region_size - off) {
        engine_reply(write, ctx, "CLIENT_ERROR range outside the region or longer than %u\r\n",
                     DP_ADMIN_REGION_MAX);
        return true;
    }
    engine_reply(write, ctx, "VALUE region 0 %" PRIu64 "\r\n", len);
    write(ctx, dp->region + off, (size_t)len);
    write(ctx, "\r\nEND\r\n", 7);
    return true;
}

static void admin_meta(struct data_engine *dp, eng_write_fn write, void *ctx)
{
    engine_reply(write, ctx, "STAT count %zu\r\n", dp->meta.count);
    engine_reply(write, ctx, "STAT digest %016" PRIx64 "\r\n", meta_digest(&dp->meta));
    char digest[PIECESET_DIGEST_TEXT];
    if (dp->alloc)
        snprintf(digest, sizeof(digest), "%016" PRIx64, dalloc_digest(dp->alloc));
    else
        pieceset_digest_text(dp->pieces, digest);
    engine_reply(write, ctx, "STAT alloc_digest %s\r\n", digest);
    engine_reply(write, ctx, "STAT used_bytes %" PRIu64 "\r\n", used_bytes(dp));
    write(ctx, "END\r\n", 5);
}

static void admin_used(struct data_engine *dp, eng_write_fn write, void *ctx)
{
    struct dalloc_iter it;
    uint64_t off, size;
    if (dp->alloc == NULL) {   /* being built: the pieces it is built from */
        struct dalloc_span *all;
        size_t n;
        if (pieceset_sorted(dp->pieces, &all, &n) != 0) {
            engine_reply(write, ctx, "SERVER_ERROR out of memory\r\n");
            return;
        }
        for (size_t i = 0; i < n; i++)
            engine_reply(write, ctx, "USED %" PRIu64 " %" PRIu64 "\r\n", all[i].off,
                         all[i].size);
        free(all);
        write(ctx, "END\r\n", 5);
        return;
    }
    dalloc_iter_init(dp->alloc, &it);
    while (dalloc_iter_next_used(&it, &off, &size))
        engine_reply(write, ctx, "USED %" PRIu64 " %" PRIu64 "\r\n", off, size);
    write(ctx, "END\r\n", 5);
}

static bool dp_admin(struct engine *eng, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct data_engine *dp = dp_of(eng);
    if (strcmp(argv[0], "info") == 0) {
        admin_info(dp, write, ctx);
        return true;
    }
    if (strcmp(argv[0], "region") == 0)
        return admin_region(dp, argc, argv, write, ctx);
    if (strcmp(argv[0], "meta") == 0) {
        admin_meta(dp, write, ctx);
        return true;
    }
    if (strcmp(argv[0], "used") == 0) {
        admin_used(dp, write, ctx);
        return true;
    }
    return false;
}

/* ---- lifecycle ---- */

static void dp_destroy(struct engine *eng)
{
    struct data_engine *dp = dp_of(eng);
    if (dp->rb_timer)
        event_free(dp->rb_timer);
    alloc_build_cancel(dp->building);
    if (dp->build_timer)
        event_free(dp->build_timer);
    if (dp->copied_timer)
        event_free(dp->copied_timer);
    pieceset_destroy(dp->pieces);
    replica_free(dp->replica);
    sender_destroy(&dp->tx);
    writeq_destroy(&dp->queue);
    meta_destroy(&dp->meta);
    if (dp->alloc)
        dalloc_destroy(dp->alloc);
    if (dp->region && dp->region != MAP_FAILED && !dp->region_borrowed)
        munmap(dp->region, dp->region_size);
    read_waiters_free(&dp->waiters);
    free(dp->df);
    free(dp->ops);
    free(dp->notes);
    free(dp->value_buf);
    free(dp->delta_buf);
    free(dp);
}

static const struct engine_ops data_ops = {
    .name = "data",
    .get = dp_get,
    .get_ex = dp_get_ex,
    .release = dp_release,
    .mutate = dp_mutate,
    .stats = dp_stats,
    .stats_reset = dp_stats_reset,
    .tick = dp_tick,
    .destroy = dp_destroy,
    .admin = dp_admin,
    .slot_keys = dp_slot_keys,
    .visit_recent = dp_visit_recent,
    .walk = dp_walk,
    .read_wait = dp_read_wait,
    .map_changed = dp_map_changed,
    .control = dp_control,
    .heartbeat_extra = dp_heartbeat_extra,
    .lost_peers = dp_lost_peers,
};

/* The fields every data engine sets from its configuration. */
static struct data_engine *dp_alloc(const struct engine_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    struct data_engine *dp = calloc(1, sizeof(*dp));
    if (!dp)
        return NULL;
    dp->base.ops = &data_ops;
    dp->base.priv = dp;
    dp->table_gen = 1;
    dp->evbase = cfg->base;
    dp->sq = cfg->sq;
    dp->cluster = c;
    dp->group = cfg->group;
    dp->index = cfg->index;
    dp->serving_pp = -1;
    dp->k = c->k;
    dp->m = c->n - c->k;
    dp->verbose = cfg->verbose;
    dp->region_size = c->region_size;
    dp->item_size_max = cfg->item_size_max;
    dp->evict = cfg->evict;
    dp->headroom = dp->region_size / 16;
    dp->ctl_send = cfg->ctl_send;
    dp->ctl_arg = cfg->ctl_arg;
    dp->has_coordinator = c->has_coordinator;
    dp->rb_timer = evtimer_new(cfg->base, on_rb_timer, dp);
    dp->build_timer = evtimer_new(cfg->base, on_build_retry, dp);
    /* Reads wait for units and leases without allocating (a read served
     * because memory ran out could be stale). */
    if (!dp->rb_timer || !dp->build_timer ||
        read_waiters_reserve_conns(&dp->waiters, cfg->max_conns) != 0) {
        if (dp->rb_timer)
            event_free(dp->rb_timer);
        if (dp->build_timer)
            event_free(dp->build_timer);
        read_waiters_free(&dp->waiters);
        free(dp);
        return NULL;
    }
    dp->test_begin_twice = getenv("COCYTUS_TEST_REBUILD_BEGIN_TWICE") != NULL;
    dp->test_take_fail = getenv("COCYTUS_TEST_HANDOFF_FAIL") != NULL;
    dp->test_refuse_meta = getenv("COCYTUS_TEST_COPY_META_REFUSE") != NULL;
    const char *delay = getenv("COCYTUS_TEST_COPIED_DELAY_MS");
    dp->test_copied_delay_ms = delay ? atoi(delay) : 0;
    if (dp->test_copied_delay_ms > 0)
        dp->copied_timer = evtimer_new(cfg->base, say_copied, dp);
    clock_init(&dp->clock, cfg->started);
    clock_set(&dp->clock, time(NULL));
    return dp;
}

/* ---- an allocator built while the process serves ---- */

static void on_build_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_alloc_build(arg);
}

static void install_alloc(struct data_engine *dp, struct dalloc *a, uint64_t us, bool threaded)
{
    dp_log(dp, "allocator built from %" PRIu64 " pieces in %.1f ms%s: writes that need space "
           "go on (%" PRIu64 " tries of one waited for it)", pieceset_count(dp->pieces),
           (double)us / 1000.0, threaded ? " on its own thread" : "", dp->alloc_waits);
    dp->alloc = a;
    pieceset_destroy(dp->pieces);
    dp->pieces = NULL;
    drain_queue(dp);
}

static void build_failed(struct data_engine *dp, int err, int retry_ms)
{
    if (err == ENOSPC) {
        /* The pieces cannot be what any allocator holds: the stream this
         * process kept of the dead one is inconsistent.  Reads and writes
         * in place go on; a write that needs space, a flush and a copy of
         * our state fail. */
        dp_log(dp, "CANNOT BUILD the allocator: %s among the %" PRIu64 " pieces %s; writes "
               "that need space fail from now on (cocytus-cli verify shows alloc_digest "
               "overlap)", pieceset_build_failure(err), pieceset_count(dp->pieces),
               dp->recovering ? "of the dead data process" : "taken back from the recovery "
                                                             "process");
        dp->alloc_broken = true;
        drain_queue(dp);   /* what waited for it is answered */
        return;
    }
    dp_log(dp, "cannot build the allocator from %" PRIu64 " pieces (%s): trying again in %d ms",
           pieceset_count(dp->pieces), pieceset_build_failure(err), retry_ms);
    struct timeval tv = { retry_ms / 1000, (retry_ms % 1000) * 1000 };
    if (evtimer_add(dp->build_timer, &tv) != 0)
        dp_log(dp, "cannot arm the timer to build the allocator again: writes that need space "
               "wait until this process is replaced");
}

static void alloc_built(void *ctx)
{
    struct data_engine *dp = ctx;
    int err;
    uint64_t us;
    struct dalloc *a = alloc_build_finish(dp->building, &err, &us);
    dp->building = NULL;
    if (a != NULL)
        install_alloc(dp, a, us, true);
    else
        build_failed(dp, err, DP_BUILD_RETRY_MS);
}

/* The state is dropped (forget_state): a build under way or waiting to
 * be tried again ends, and the process has an allocator again, empty. */
static void stop_alloc_build(struct data_engine *dp)
{
    if (dp->alloc != NULL)
        return;
    alloc_build_cancel(dp->building);
    dp->building = NULL;
    event_del(dp->build_timer);
    dp->alloc = dalloc_new(dp->region_size);
    if (!dp->alloc) {
        dp_log(dp, "out of memory for an empty allocator");
        abort();
    }
    pieceset_destroy(dp->pieces);
    dp->pieces = NULL;
    dp->alloc_broken = false;
}

/* On a thread (allocbuild.h); when none can be started, here and now. */
static void start_alloc_build(struct data_engine *dp)
{
    if (dp->test_build_fail) {
        dp->test_build_fail = false;
        /* Tried again later than a real failure would be, so that a test
         * sees writes wait for it. */
        dp_log(dp, "test fault: this allocator build fails, as if out of memory");
        build_failed(dp, ENOMEM, 4000);
        return;
    }
    if (dp->test_build_overlap) {
        dp_log(dp, "test fault: this allocator build finds pieces that overlap");
        build_failed(dp, ENOSPC, 0);
        return;
    }
    dp->building = alloc_build_start(dp->evbase, dp->pieces, alloc_built, dp);
    if (dp->building != NULL)
        return;
    dp_log(dp, "no thread to build the allocator on (%s): building it here", strerror(errno));
    int err;
    uint64_t us;
    struct dalloc *a = alloc_build_now(dp->pieces, &err, &us);
    if (a != NULL)
        install_alloc(dp, a, us, false);
    else
        build_failed(dp, err, DP_BUILD_RETRY_MS);
}

struct engine *engine_data_recovery_new(const struct engine_config *cfg,
                                        const struct data_recovery_config *rc)
{
    struct data_engine *dp = dp_alloc(cfg);
    if (!dp)
        return NULL;
    dp->index = rc->dp;
    dp->serving_pp = rc->self_pp;
    dp->recovering = true;
    dp->region_borrowed = true;
    dp->region = rc->region;
    dp->units = rc->units;
    dp->test_build_fail = (rc->test_faults & DR_FAULT_BUILD_ONCE) != 0;
    dp->test_build_overlap = (rc->test_faults & DR_FAULT_OVERLAP) != 0;
    /* The empty table and set the caller gets in exchange for its own at
     * engine_data_recovery_take(), made now because they can fail. */
    dp->pieces = pieceset_new(dp->region_size);
    if (!dp->pieces || meta_init(&dp->meta, 0) < 0) {
        dp_destroy(&dp->base);
        return NULL;
    }
    char who[64];
    snprintf(who, sizeof(who), "recovery g%d/dp%d@pp%d", dp->group, dp->index, rc->self_pp);
    struct sender_config sc = dp_sender_config(dp, cfg->cluster, LINK_ROLE_PARITY, rc->self_pp,
                                               who);
    sc.peers = rc->peers;
    sc.npeers = rc->npeers;
    if (sender_init(&dp->tx, &sc) < 0) {
        dp_destroy(&dp->base);
        return NULL;
    }
    return &dp->base;
}

void engine_data_recovery_take(struct engine *e, const struct data_recovery_config *rc)
{
    struct data_engine *dp = dp_of(e);
    /* The backup table as it is (entries, LRU, counters) and the pieces;
     * the caller keeps the empty ones made at _new. */
    struct meta_table empty = dp->meta;
    dp->meta = *rc->meta;
    *rc->meta = empty;
    struct pieceset *no_pieces = dp->pieces;
    dp->pieces = *rc->pieces;
    *rc->pieces = no_pieces;
    dp->cas_counter = rc->cas_start;
    dp->touched_end = rc->touched_end;
    dp->total_items = dp->meta.count;
    sender_start_at(&dp->tx, rc->start_xid);
    start_alloc_build(dp);
}

struct engine *engine_data_new(const struct engine_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    if (!c || c->scheme != SCHEME_RS) {
        fprintf(stderr, "cocytus-server: the data role needs an rs cluster file\n");
        return NULL;
    }
    if (cfg->index < 0 || cfg->index >= c->k || c->n - c->k > SENDER_MAX_PEERS) {
        fprintf(stderr, "cocytus-server: data index %d outside RS(%d,%d)\n", cfg->index, c->k, c->n);
        return NULL;
    }
    struct data_engine *dp = dp_alloc(cfg);
    if (!dp)
        return NULL;
    dp->region = mmap(NULL, dp->region_size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    dp->alloc = dalloc_new(dp->region_size);
    if (dp->region == MAP_FAILED || !dp->alloc || meta_init(&dp->meta, cfg->hashpower) < 0) {
        fprintf(stderr, "cocytus-server: cannot set up a %zu-byte data region\n", dp->region_size);
        dp_destroy(&dp->base);
        return NULL;
    }
    char who[64];
    snprintf(who, sizeof(who), "data g%d/%d", dp->group, dp->index);
    struct sender_config sc = dp_sender_config(dp, c, LINK_ROLE_DATA, dp->index, who);
    sc.npeers = dp->m;
    if (sender_init(&dp->tx, &sc) < 0) {
        dp_destroy(&dp->base);
        return NULL;
    }
    dp->unsure = true;
    return &dp->base;
}
