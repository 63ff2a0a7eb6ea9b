/* replica.c - the receiving side of a data process's migration back from
 * its recovery process (replica.h).  The links, acknowledgements and the
 * piggybacked commit are repl/receiver.c's, as on a parity process; this
 * file says what a record and a rebuild message mean for a plain copy. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pieceset.h"
#include "cluster.h"
#include "codec.h"
#include "frame.h"
#include "link.h"
#include "rebuild.h"
#include "receiver.h"
#include "replica.h"

struct replica {
    struct replica_hooks hooks;
    int group, dp, from;
    uint8_t *region;
    uint64_t region_size;
    struct repl_source src;
    struct meta_table meta;
    struct pieceset *pieces;     /* the served DP's used pieces (pieceset.h) */
    struct rb_units units;
    uint64_t max_cas, end;
    bool told_complete;
    bool test_refuse_meta;      /* test fault: refuse the next metadata message */
    struct repl_receiver *rx;
    struct link_listener *listener;
    const struct record *cur;   /* the record being applied (filter callback) */
};

__attribute__((format(printf, 2, 3)))
static void rp_log(struct replica *r, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (r->hooks.log)
        r->hooks.log(r->hooks.ctx, line);
}

/* ---- applying records ---- */

/* A copy that lost a metadata message (out of memory applying it) would
 * hand off without those keys: it is spoiled instead.  The stream is
 * marked diverged, so the receiver closes the recovery process's link and
 * refuses it (that process drops us from its ack set: its writes go on),
 * the copy never says complete and the handoff is refused.  The owner
 * tells the coordinator (hooks.spoiled), which abandons the migration and
 * asks again with `replica`, which makes a new replica (replica_spoiled). */
static int spoil(struct replica *r, const char *err)
{
    rp_log(r, "metadata of the copy of dp %d refused: %s; this copy cannot be handed off "
           "and is abandoned", r->dp, err);
    if (!r->src.diverged) {
        repl_source_mark_diverged(&r->src, r->src.received_xid, "metadata of the copy "
                                  "refused: %s", err);
        if (r->hooks.spoiled)
            r->hooks.spoiled(r->hooks.ctx);
    }
    return -1;
}

/* The copy's metadata messages that came right after record `applied`
 * (rebuild.h).  0, or -1 when the copy is spoiled. */
static int meta_catch_up(struct replica *r, uint64_t applied)
{
    char err[192];
    if (rb_meta_catch_up(&r->units, applied, &r->meta, r->pieces, err, sizeof(err)) != 0)
        return spoil(r, err);
    return 0;
}

static void xor_run(void *ctx, uint64_t off, uint64_t len)
{
    struct replica *r = ctx;
    codec_xor(r->region + off, r->cur->data + (off - r->cur->data_off), (size_t)len);
}

static int apply_record(void *ctx, const struct record *rec)
{
    struct replica *r = ctx;
    char err[192];
    if (rec->data_off > r->region_size || rec->data_len > r->region_size - rec->data_off)
        return repl_source_mark_diverged(&r->src, rec->xid, "delta outside the region");
    if (meta_catch_up(r, rec->xid - 1) != 0)
        return -1;
    bool lenient = rb_meta_lenient(&r->units);
    for (uint32_t i = 0; i < rec->nops; i++) {
        if (meta_replay_op(&r->meta, r->pieces, &rec->ops[i], lenient, err, sizeof(err)) != 0)
            return repl_source_mark_diverged(&r->src, rec->xid, "op %" PRIu32 ": %s", i + 1, err);
        if (rec->ops[i].type == ROP_PUT && rec->ops[i].cas > r->max_cas)
            r->max_cas = rec->ops[i].cas;
    }
    if (rec->data_len) {
        r->cur = rec;
        rb_units_filter(&r->units, rec->xid, rec->data_off, rec->data_len, xor_run, r);
        r->cur = NULL;
        if (rec->data_off + rec->data_len > r->end)
            r->end = rec->data_off + rec->data_len;
    }
    return 0;
}

static void check_complete(struct replica *r);

static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct replica *r = owner;
    int rc = repl_source_apply(&r->src, stable, apply_record, r);
    if (rc == 0)
        rc = meta_catch_up(r, r->src.applied_xid);
    check_complete(r);
    return rc;
}

/* ---- rebuild messages ---- */

struct unit_copy {
    struct replica *r;
    const uint8_t *bytes;
    uint64_t off;
};

static void copy_run(void *ctx, uint64_t off, uint64_t len)
{
    struct unit_copy *c = ctx;
    memcpy(c->r->region + off, c->bytes + (off - c->off), len);
}

static void check_complete(struct replica *r)
{
    if (r->told_complete || r->src.diverged || !rb_units_complete(&r->units))
        return;
    r->told_complete = true;
    rp_log(r, "copy of dp %d complete: %" PRIu64 " unit bytes, %zu keys, stream at xid %" PRIu64,
           r->dp, r->units.bytes, r->meta.count, r->src.received_xid);
    if (r->hooks.complete)
        r->hooks.complete(r->hooks.ctx);
}

static void on_begin(struct replica *r, const uint8_t *p, uint32_t len)
{
    struct rb_begin b;
    if (rb_decode_begin(p, len, &b) != 0 || b.source != (uint32_t)r->dp) {
        rp_log(r, "malformed or foreign rebuild BEGIN; ignored");
        return;
    }
    meta_clear(&r->meta);
    pieceset_reset(r->pieces);
    /* Zero without touching a page (the region is our own anonymous
     * mapping, and an untouched page reads as zero): a memset of 256 MB
     * took half a second, while the source's writes waited for our acks. */
    if (madvise(r->region, r->region_size, MADV_DONTNEED) != 0)
        memset(r->region, 0, r->region_size);
    uint64_t size = r->region_size;
    rb_units_destroy(&r->units);
    if (rb_units_init(&r->units, size) != 0) {
        rp_log(r, "out of memory starting the copy");
        return;
    }
    rb_units_begin(&r->units, b.x0, b.end);
    repl_source_reset(&r->src, b.x0);
    r->max_cas = b.max_cas;
    r->end = b.end;
    r->told_complete = false;
    rp_log(r, "copy of dp %d begins at xid %" PRIu64 " (%" PRIu64 " region bytes to take)",
           r->dp, b.x0, b.end);
}

/* The source sends more of the copy once we took what it sent. */
static void ack_taken(struct replica *r, int index)
{
    struct rb_msg m = { 0 };
    rb_msg_taken(&m, ROLE_DATA, (uint32_t)r->dp, r->units.taken);
    struct iovec iov = { .iov_base = m.buf, .iov_len = m.len };
    if (m.oom || repl_receiver_sendv(r->rx, index, FT_REPLY, &iov, 1) != 0)
        rp_log(r, "cannot acknowledge the copy's messages: the copy stalls until the link "
               "drops");
    rb_msg_free(&m);
}

static void hook_message(void *owner, int index, uint16_t type, const uint8_t *p, uint32_t len)
{
    struct replica *r = owner;
    char err[192];
    switch (rb_kind_of(p, len)) {
    case RB_BEGIN:
        on_begin(r, p, len);
        break;
    case RB_META:
    case RB_META_DONE:
        if (!r->units.begun) {
            rp_log(r, "metadata of the copy before its BEGIN; ignored");
            break;
        }
        if (r->test_refuse_meta) {
            r->test_refuse_meta = false;
            spoil(r, "test fault: refused as if out of memory");
        } else if (rb_meta_arrive(&r->units, r->src.received_xid, r->src.applied_xid, p, len,
                                  &r->meta, r->pieces, err, sizeof(err)) != 0) {
            spoil(r, err);
        }
        if (r->src.diverged) {
            repl_receiver_diverged(r->rx, index);
            break;
        }
        ack_taken(r, index);
        check_complete(r);
        break;
    case RB_UNITS: {
        uint64_t t, off;
        const uint8_t *bytes;
        uint32_t n;
        if (!r->units.begun ||
            rb_decode_units(p, len, r->region_size, &t, &off, &bytes, &n) != 0) {
            rp_log(r, "malformed units message; ignored");
            break;
        }
        struct unit_copy c = { r, bytes, off };
        rb_units_arrive(&r->units, t, off, n, copy_run, &c);
        ack_taken(r, index);
        check_complete(r);
        break;
    }
    case RB_END:
        r->units.ended = r->units.begun;
        check_complete(r);
        break;
    default:
        rp_log(r, "unexpected message on the copy link; ignored");
    }
}

static int hook_resolve(void *owner, const struct link_identity *id, const char **reason)
{
    struct replica *r = owner;
    if (id->role == LINK_ROLE_PARITY && (int)id->index == r->from)
        return 0;
    *reason = "this data process takes its copy from its recovery process only";
    return -1;
}

static void hook_log(void *owner, const char *line)
{
    rp_log(owner, "%s", line);
}

/* ---- public ---- */

struct replica *replica_new(struct event_base *base, const struct cluster *c, int group, int dp,
                            int from, uint8_t *region, uint64_t region_size, unsigned hashpower,
                            const struct replica_hooks *hooks)
{
    const struct cluster_proc *me = cluster_find(c, group, ROLE_DATA, dp);
    struct replica *r = calloc(1, sizeof(*r));
    if (!r || !me)
        goto fail_early;
    r->hooks = *hooks;
    r->group = group;
    r->dp = dp;
    r->from = from;
    r->region = region;
    r->region_size = region_size;
    repl_source_init(&r->src);
    r->pieces = pieceset_new(region_size);
    if (!r->pieces || meta_init(&r->meta, hashpower) < 0 ||
        rb_units_init(&r->units, region_size) != 0)
        goto fail;
    struct repl_source *sources[1] = { &r->src };
    struct repl_receiver_config cfg = {
        .base = base,
        .sender_role = LINK_ROLE_PARITY,
        .nsources = 1,
        .sources = sources,
        .tag = "recovery process",
        .noun = "recovery process",
        .wrong_role = "a replacement data process takes its copy from its recovery process",
        .no_such = "no such recovery process",
        .hooks = { .apply = hook_apply, .log = hook_log, .message = hook_message,
                   .resolve = hook_resolve },
        .owner = r,
    };
    r->rx = repl_receiver_new(&cfg);
    if (!r->rx)
        goto fail;
    r->listener = link_listen(base, me->host, me->link_port, c->name, (uint32_t)group,
                              c->secret, repl_receiver_accept, r->rx);
    if (!r->listener) {
        rp_log(r, "cannot listen on %s:%d for the copy", me->host, me->link_port);
        goto fail;
    }
    link_listener_set_tls(r->listener, c->link_tls);
    rp_log(r, "waiting on %s:%d for the copy of dp %d from parity process %d", me->host,
           me->link_port, dp, from);
    return r;
fail:
    replica_free(r);
    return NULL;
fail_early:
    free(r);
    return NULL;
}

void replica_free(struct replica *r)
{
    if (!r)
        return;
    if (r->listener)
        link_listener_free(r->listener);
    if (r->rx)
        repl_receiver_free(r->rx);
    repl_source_destroy(&r->src);
    meta_destroy(&r->meta);
    pieceset_destroy(r->pieces);
    rb_units_destroy(&r->units);
    free(r);
}

int replica_from(const struct replica *r)
{
    return r->from;
}

bool replica_complete(const struct replica *r)
{
    return !r->src.diverged && rb_units_complete(&r->units);
}

bool replica_spoiled(const struct replica *r)
{
    return r->src.diverged;
}

void replica_test_refuse_meta(struct replica *r)
{
    r->test_refuse_meta = true;
}

void replica_progress(const struct replica *r, uint64_t *done, uint64_t *total, uint64_t *bytes)
{
    *done = r->units.arrived;
    *total = r->units.nunits;
    *bytes = r->units.bytes + r->units.meta_bytes;   /* progress while the metadata goes too */
}

int replica_settle(struct replica *r, uint64_t xid)
{
    if (r->src.received_xid < xid || r->src.diverged) {
        rp_log(r, "cannot settle at xid %" PRIu64 ": received %" PRIu64 "%s", xid,
               r->src.received_xid, r->src.diverged ? " (diverged)" : "");
        return -1;
    }
    if (repl_source_apply(&r->src, xid, apply_record, r) != 0)
        return -1;
    return repl_source_truncate_after(&r->src, xid);
}

int replica_take(struct replica *r, struct meta_table *meta, struct pieceset **pieces,
                 uint64_t *max_cas, uint64_t *end)
{
    struct meta_table empty;   /* what the replica keeps: made before anything moves */
    if (meta_init(&empty, 0) < 0) {
        rp_log(r, "out of memory taking the table of dp %d", r->dp);
        return -1;
    }
    *meta = r->meta;
    r->meta = empty;
    *pieces = r->pieces;
    r->pieces = NULL;
    *max_cas = r->max_cas;
    *end = r->end;
    return 0;
}
