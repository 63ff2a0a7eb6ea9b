/* snapshot.c - a primary copies its items to a joining backup while it
 * serves (docs/pbr.md, "Rebuilding a backup").
 *
 * The idea: the backup joins the primary's sender at xid x0 and from then
 * on gets every record after x0, which it applies as soon as it arrives.
 * Beside that stream, on the same link and so in order with the records,
 * the primary sends its committed items in chunks, walking its hash table
 * with a cursor.  A chunk never holds an item whose key has a record in
 * flight: that record (xid > x0, already sent or still to come) brings the
 * key's newer state.  Every other key's committed state is the outcome of
 * the last record about it, which the backup either applied already (it
 * came before the chunk on the link) or never gets (xid <= x0), so the
 * chunk's copy is right and overwrites.  Deletes, evictions and flushes
 * after x0 arrive as records; items dead here are not sent; keys stored
 * after the cursor passed their bucket arrive as records.  Chunks start
 * only once everything up to x0 has committed, so no key with a record at
 * or below x0 is still in flight.  A table that starts to grow is finished
 * growing first and walked again from the start (its buckets moved).
 *
 * Frames (FT_REQUEST, first byte the kind):
 *   'B' u64 x0 u64 total   begin: the backup empties itself, holds x0
 *   'C' <record>           chunk: an encoded record (xid 0) of PUT ops
 *   'E' u64 items          end: the backup is complete */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "frame.h"
#include "hash.h"
#include "pbr_store.h"
#include "snapshot.h"

#define SNAPSHOT_SCAN_BUDGET 256         /* buckets + items per scan call */
#define SNAPSHOT_STEP_UNITS 65536        /* buckets + items per step at most */
#define SNAPSHOT_STEP_ITEMS 2048
#define SNAPSHOT_CHUNK_BYTES (256u << 10)
#define SNAPSHOT_MAX_QUEUED (4u << 20)   /* link output before we wait */
#define SNAPSHOT_MAX_OPS 4096

struct snapshot {
    struct snapshot_source src;
    struct event_base *base;
    struct event *timer;
    int member;
    uint64_t x0;
    size_t cursor;
    unsigned power;                      /* table power the cursor belongs to */
    bool scanned_once;
    uint64_t total, done, bytes;
    bool finished;
    /* one step's items, then encoded */
    struct item **batch;
    size_t nbatch, cap_batch;
    struct rec_op *ops;
    uint8_t *enc;
    size_t enc_cap;
};

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int send_frame(struct snapshot *sn, uint8_t kind, const void *body, size_t len)
{
    struct iovec iov[2] = {
        { .iov_base = &kind, .iov_len = 1 },
        { .iov_base = (void *)body, .iov_len = len },
    };
    return sender_sendv_to(sn->src.tx, sn->member, FT_REQUEST, iov, 2);
}

static void arm(struct snapshot *sn, long usec)
{
    struct timeval tv = { 0, usec };
    evtimer_add(sn->timer, &tv);
}

/* ---- one step ---- */

struct collect {
    struct snapshot *sn;
    bool oom;
};

static void collect_item(void *ctx, struct item *it)
{
    struct collect *c = ctx;
    struct snapshot *sn = c->sn;
    if (item_is_dead(sn->src.store, it) || sn->src.busy(sn->src.ctx, it))
        return;
    if (sn->nbatch == sn->cap_batch) {
        size_t cap = sn->cap_batch ? sn->cap_batch * 2 : 128;
        struct item **b = realloc(sn->batch, cap * sizeof(*b));
        if (!b) {
            c->oom = true;
            return;
        }
        sn->batch = b;
        sn->cap_batch = cap;
    }
    sn->batch[sn->nbatch++] = it;
}

/* Encode batch[from..to) as one chunk and send it.  0, or -1. */
static int send_chunk(struct snapshot *sn, size_t from, size_t to, uint32_t value_bytes)
{
    uint8_t *data = NULL;
    uint32_t off = 0;
    if (value_bytes > 0 && !(data = malloc(value_bytes)))
        return -1;
    for (size_t i = from; i < to; i++) {
        struct item *it = sn->batch[i];
        struct rec_op *op = &sn->ops[i - from];
        memset(op, 0, sizeof(*op));
        op->type = ROP_PUT;
        op->key = item_key(it);
        op->nkey = it->nkey;
        op->off = off;
        op->nbytes = it->nbytes;
        op->flags = it->flags;
        op->exptime = pbr_abs_exptime(sn->src.clock, it->exptime);
        op->cas = it->cas;
        memcpy(data + off, item_value(it), it->nbytes);
        off += it->nbytes;
        sn->bytes += it->nbytes;
    }
    struct record r = { .xid = 0, .nops = (uint32_t)(to - from), .ops = sn->ops,
                        .data_len = off, .data = data };
    size_t size = rec_encoded_size(&r);
    int rc = -1;
    if (size > sn->enc_cap) {
        uint8_t *n = realloc(sn->enc, size);
        if (n) {
            sn->enc = n;
            sn->enc_cap = size;
        }
    }
    if (size <= sn->enc_cap) {
        rec_encode(&r, sn->enc);
        rc = send_frame(sn, 'C', sn->enc, size);
    }
    free(data);
    if (rc == 0)
        sn->done += to - from;
    return rc;
}

/* The batch as chunks of at most SNAPSHOT_CHUNK_BYTES (or one item). */
static int send_batch(struct snapshot *sn)
{
    size_t start = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < sn->nbatch; i++) {
        uint32_t n = sn->batch[i]->nbytes;
        if (i > start && (bytes + n > SNAPSHOT_CHUNK_BYTES || i - start >= SNAPSHOT_MAX_OPS)) {
            if (send_chunk(sn, start, i, (uint32_t)bytes) < 0)
                return -1;
            start = i;
            bytes = 0;
        }
        bytes += n;
    }
    if (sn->nbatch > start && send_chunk(sn, start, sn->nbatch, (uint32_t)bytes) < 0)
        return -1;
    sn->nbatch = 0;
    return 0;
}

/* A growing table moves items between buckets: finish growing, and walk
 * again from the start if the cursor belongs to the old size. */
static void settle_table(struct snapshot *sn)
{
    struct assoc *a = &sn->src.store->table;
    if (assoc_expanding(a))
        assoc_migrate(a, (size_t)1 << 40);
    if (assoc_power(a) != sn->power) {
        if (sn->scanned_once)
            fprintf(stderr, "%s: the table grew during the snapshot for member %d; walking it "
                "again from the start\n", sn->src.who, sn->member);
        sn->power = assoc_power(a);
        sn->cursor = 0;
        sn->scanned_once = false;
    }
}

static void finish(struct snapshot *sn)
{
    uint8_t body[8];
    put_u64le(body, sn->done);
    if (send_frame(sn, 'E', body, sizeof(body)) < 0)
        return;   /* link down: the sender's joining_up restarts us */
    sn->finished = true;
    fprintf(stderr, "%s: snapshot for member %d done: %" PRIu64 " items, %" PRIu64
            " value bytes after x0 %" PRIu64 "\n", sn->src.who, sn->member, sn->done,
            sn->bytes, sn->x0);
    sn->src.complete(sn->src.ctx, sn->member);
}

static void step(evutil_socket_t fd, short what, void *arg)
{
    struct snapshot *sn = arg;
    if (sn->finished)
        return;
    if (!sender_peer_up(sn->src.tx, sn->member))
        return;   /* the next joining_up starts a new snapshot */
    if (sn->src.tx->committed < sn->x0 ||
        sender_peer_queued(sn->src.tx, sn->member) > SNAPSHOT_MAX_QUEUED) {
        arm(sn, 1000);
        return;
    }
    settle_table(sn);
    if (sn->scanned_once && sn->cursor == 0) {
        finish(sn);
        return;
    }
    struct collect c = { sn, false };
    size_t spent = 0, value_bytes = 0;
    size_t cursor0 = sn->cursor;
    bool scanned0 = sn->scanned_once;
    do {
        size_t before = sn->nbatch;
        spent += assoc_scan(&sn->src.store->table, &sn->cursor, SNAPSHOT_SCAN_BUDGET,
                            collect_item, &c);
        for (size_t i = before; i < sn->nbatch; i++)
            value_bytes += sn->batch[i]->nbytes;
        sn->scanned_once = true;
    } while (sn->cursor != 0 && !c.oom && spent < SNAPSHOT_STEP_UNITS &&
             sn->nbatch < SNAPSHOT_STEP_ITEMS && value_bytes < SNAPSHOT_CHUNK_BYTES);
    if (c.oom || send_batch(sn) < 0) {
        sn->nbatch = 0;
        if (!sender_peer_up(sn->src.tx, sn->member)) {
            fprintf(stderr, "%s: snapshot for member %d stopped (link down); it starts again "
                    "when the link comes back\n", sn->src.who, sn->member);
            return;
        }
        /* Out of memory with the link up: nothing else would wake us.
         * This step's buckets are walked again later (items of them that
         * went out already go again: a chunk's copy of a key with no
         * record in flight is right whenever it is taken). */
        fprintf(stderr, "%s: snapshot for member %d: out of memory; this step again in "
                "100 ms\n", sn->src.who, sn->member);
        sn->cursor = cursor0;
        sn->scanned_once = scanned0;
        arm(sn, 100000);
        return;
    }
    arm(sn, 0);   /* the next step after the loop's other work */
}

/* ---- public ---- */

struct snapshot *snapshot_start(const struct snapshot_source *src, struct event_base *base,
                                int member)
{
    struct snapshot *sn = calloc(1, sizeof(*sn));
    if (!sn)
        return NULL;
    sn->src = *src;
    sn->base = base;
    sn->member = member;
    sn->x0 = src->tx->xid;
    sn->total = src->store->curr_items;
    sn->power = assoc_power(&src->store->table);
    sn->ops = calloc(SNAPSHOT_MAX_OPS, sizeof(*sn->ops));
    sn->timer = evtimer_new(base, step, sn);
    uint8_t body[16];
    put_u64le(body, sn->x0);
    put_u64le(body + 8, sn->total);
    if (!sn->ops || !sn->timer || send_frame(sn, 'B', body, sizeof(body)) < 0) {
        snapshot_free(sn);
        return NULL;
    }
    fprintf(stderr, "%s: snapshot for member %d begins at xid %" PRIu64 " (%" PRIu64
            " items)\n", src->who, member, sn->x0, sn->total);
    arm(sn, 0);
    return sn;
}

void snapshot_free(struct snapshot *sn)
{
    if (!sn)
        return;
    if (sn->timer)
        event_free(sn->timer);
    free(sn->batch);
    free(sn->ops);
    free(sn->enc);
    free(sn);
}

void snapshot_progress(const struct snapshot *sn, uint64_t *done, uint64_t *total,
                       uint64_t *bytes)
{
    *done = sn->done;
    *total = sn->total > sn->done ? sn->total : sn->done;
    *bytes = sn->bytes;
}

bool snapshot_finished(const struct snapshot *sn)
{
    return sn->finished;
}
