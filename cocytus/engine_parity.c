/* engine_parity.c - the parity role of a coding group (`--role parity`).
 *
 * A parity process serves no keys.  It listens for links from the K data
 * processes of its group, buffers every record a data process sends and
 * acknowledges it at once, and applies buffered records up to the stable
 * xid that the next record (or a STABLE frame) carries: the piggybacked
 * commit of docs/coding-group.md.  The links, acknowledgements and
 * divergence handling are repl/receiver.c's (shared with primary-backup),
 * applying a record is parity.c's; this file ties them together and adds
 * stats and the `cocytus` admin commands that tools and tests use to
 * inspect the parity region and the backup tables.  A data process whose
 * records disagree with our replica is logged loudly, its link is dropped
 * and its HELLOs are rejected.
 *
 * Recovery (docs/recovery.md): the coordinator's messages prepare a dead
 * data process's stream here (fence it, report the last xid received),
 * truncate it at the stable xid, and may make this process the recovery
 * process that serves the dead process's keys.  It then runs a data engine
 * (engine_data.h) over the backup table, the data process's used pieces
 * (pieceset.h; the engine builds their allocator on a thread while it
 * already serves) and this very region, and client requests go to it;
 * recovery.c rebuilds the region's units from the other processes of the
 * group. */
#include "config.h"

#include <errno.h>
#include <sys/mman.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "alloc.h"
#include "cluster.h"
#include "engine.h"
#include "engine_data.h"
#include "frame.h"
#include "link.h"
#include "parity.h"
#include "pieceset.h"
#include "printable.h"
#include "receiver.h"
#include "rebuild.h"
#include "recovery.h"
#include "recovery_int.h"

#define REGION_READ_MAX (16u << 20)

struct parity_engine {
    struct engine engine;
    struct event_base *base;
    struct engine_config cfg;         /* for the data engine of a takeover */
    struct parity state;
    struct repl_receiver *receiver;   /* the links of the k data processes */
    struct link_listener *listener;
    int group;
    int index;
    int verbose;
    /* Recovery. */
    struct group_view view;           /* as the coordinator last said (or provisional) */
    struct group_view confirmed;      /* as the coordinator last said */
    uint64_t declared[RECOV_MAX_K];   /* newest stable xid each source declared */
    uint64_t hold_at[RECOV_MAX_K];    /* apply no further (unit recovery); UINT64_MAX: none */
    bool prepared[RECOV_MAX_K];       /* stream fenced by a "prepare" */
    /* The recovery process whose stream of a DP the last "prepare" of that
     * DP cut (it was declared dead while serving it): its links are refused
     * though our view may still show it serving (-1: none). */
    int fenced_pp[RECOV_MAX_K];
    /* "prepared" not answered yet: the DP's read lease runs until then
     * (link.h; ctl_prepare).  0: none waits. */
    uint64_t prepare_at[RECOV_MAX_K];
    /* "prepare" taken, the stream not fenced yet: its end may be behind
     * unread records (ctl_prepare).  0: none. */
    uint64_t drain_until[RECOV_MAX_K];
    struct event *prepare_timer;
    struct recovery rec;
    struct engine *serving;           /* the data engine of the DP we serve, or NULL */
    uint64_t serving_gen;             /* counts the times serving was set (metadump walks) */
    int serving_dp;
    /* Being rebuilt from scratch (rebuild.h): which units of each source
     * arrived.  A source's filter stays until its stream is applied past
     * the newest unit it sent. */
    bool rebuilding;
    uint64_t rb_attempt;              /* the coordinator's number for this rebuild */
    bool rb_spoiled;                  /* the attempt cannot end in good parity: wait for the next */
    bool rb_orphans_logged[RECOV_MAX_K];
    struct rb_units rb[RECOV_MAX_K];
    uint64_t rb_max_t[RECOV_MAX_K];
    /* A test's faults (COCYTUS_TEST_TAKEOVER_FAIL, takeover_fault()): the
     * takeover steps still to fail once each, and the data engine's. */
    unsigned test_takeover_fail;
    unsigned test_build_faults;
    /* COCYTUS_TEST_COPY_META_REFUSE: the first rebuild message of
     * metadata is refused as if out of memory (copy_refused.sh). */
    bool test_refuse_meta;
};

static const char NO_KEYS_MSG[] = "parity process: does not serve keys";

/* How long a prepare reads a stream that is still up before it fences it,
 * and how often it looks (ctl_prepare). */
#define PREPARE_DRAIN_MS 50
#define PREPARE_DRAIN_POLL_MS 2

static struct parity_engine *pe_of(struct engine *e)
{
    return e->priv;
}

/* ---- logging ---- */

__attribute__((format(printf, 2, 3)))
static void pe_log(const struct parity_engine *pe, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cocytus-server parity g%d/p%d: %s\n", pe->group, pe->index, msg);
}

/* ---- the receiver's hooks ---- */

static void rebuild_check_done(struct parity_engine *pe);

static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct parity_engine *pe = owner;
    if (stable > pe->declared[index])
        pe->declared[index] = stable;
    uint64_t upto = pe->declared[index] < pe->hold_at[index] ? pe->declared[index]
                                                             : pe->hold_at[index];
    int rc = parity_apply(&pe->state, index, upto);
    rebuild_check_done(pe);   /* the end of a source's metadata may just have applied */
    struct parity_dp *d = &pe->state.dps[index];
    if (d->rb && !pe->rebuilding && d->src.applied_xid >= pe->rb_max_t[index])
        d->rb = NULL;   /* every unit's bytes are older than what is applied now */
    return rc;
}

static void ctl_reply(struct parity_engine *pe, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Every source sent everything: we hold parity again. */
static void rebuild_spoil(struct parity_engine *pe, int index, const char *why);

static void rebuild_check_done(struct parity_engine *pe)
{
    if (!pe->rebuilding || pe->rb_spoiled)
        return;
    for (int i = 0; i < pe->state.k; i++)
        if (pe->rb[i].begun && pe->state.dps[i].src.diverged) {
            /* A metadata message that could not be applied after its
             * records (parity.c): this parity would lack those keys. */
            rebuild_spoil(pe, i, pe->state.dps[i].src.why);
            return;
        }
    uint64_t bytes = 0;
    for (int i = 0; i < pe->state.k; i++) {
        if (!rb_units_complete(&pe->rb[i]))
            return;
        bytes += pe->rb[i].bytes;
    }
    pe->rebuilding = false;
    for (int i = 0; i < pe->state.k; i++) {
        uint64_t max_t = 0;
        for (size_t u = 0; u < pe->rb[i].nunits; u++)
            if (pe->rb[i].t[u] > max_t)
                max_t = pe->rb[i].t[u];
        pe->rb_max_t[i] = max_t;
        if (pe->state.dps[i].src.applied_xid >= max_t)
            pe->state.dps[i].rb = NULL;
    }
    pe_log(pe, "rebuilt: parity of %d data processes, %" PRIu64 " unit bytes received", pe->state.k,
           bytes);
    ctl_reply(pe, "rebuilt %d %d", pe->group, pe->index);
}

/* This attempt cannot end in good parity: take nothing more of it and ask
 * the coordinator to start over. */
static void rebuild_spoil(struct parity_engine *pe, int index, const char *why)
{
    pe_log(pe, "rebuild attempt %" PRIu64 " cannot finish: %s from dp %d; the coordinator "
           "is asked to start over", pe->rb_attempt, why, index);
    pe->rb_spoiled = true;
    ctl_reply(pe, "rebuild-failed %d %d %" PRIu64, pe->group, pe->index, pe->rb_attempt);
}

/* A source's BEGIN: only one per source and attempt.  A copy that answers
 * another attempt (its source heard of this one late) is ignored, with what
 * follows it (no BEGIN: ignored in rebuild_message).  A second copy from
 * one source in one attempt cannot be told apart from the first: units
 * that arrived stay (as of the first copy's xids, while the stream restarts
 * at the second's x0), so the attempt is spoiled. */
static void rebuild_begin(struct parity_engine *pe, int index, const uint8_t *payload,
                          uint32_t len)
{
    struct rb_begin b;
    if (rb_decode_begin(payload, len, &b) != 0) {
        rebuild_spoil(pe, index, "a malformed BEGIN");
        return;
    }
    /* 0: a sender that does not number its copies (older than the field). */
    if (b.attempt != 0 && b.attempt != pe->rb_attempt) {
        pe_log(pe, "rebuild BEGIN from dp %d answers attempt %" PRIu64 ", not ours (%" PRIu64
               "); ignored", index, b.attempt, pe->rb_attempt);
        return;
    }
    if (pe->rb[index].begun) {
        /* Units of the first copy stay, as of its xids, while the stream
         * would restart at the second's x0: parity built so is wrong. */
        rebuild_spoil(pe, index, "a second BEGIN");
        return;
    }
    if (parity_rebuild_begin(&pe->state, index, &pe->rb[index], payload, len) != 0) {
        rebuild_spoil(pe, index, "a BEGIN that does not fit this process");
        return;
    }
    pe_log(pe, "rebuild from dp %d begins at xid %" PRIu64, index,
           pe->state.dps[index].src.applied_xid);
}

/* The source sends more of the copy once we took what it sent. */
static void ack_taken(struct parity_engine *pe, int index)
{
    struct rb_msg m = { 0 };
    rb_msg_taken(&m, ROLE_PARITY, (uint32_t)pe->index, pe->rb[index].taken);
    struct iovec iov = { .iov_base = m.buf, .iov_len = m.len };
    if (m.oom || repl_receiver_sendv(pe->receiver, index, FT_REPLY, &iov, 1) != 0)
        pe_log(pe, "cannot acknowledge the rebuild messages of dp %d: its copy stalls until "
               "the link drops", index);
    rb_msg_free(&m);
}

static void rebuild_message(struct parity_engine *pe, int index, const uint8_t *payload,
                            uint32_t len)
{
    char err[192];
    if (!pe->rebuilding) {
        pe_log(pe, "rebuild message from dp %d while not being rebuilt; ignored", index);
        return;
    }
    if (pe->rb_spoiled)
        return;
    if (rb_kind_of(payload, len) == RB_BEGIN) {
        rebuild_begin(pe, index, payload, len);
        return;
    }
    if (!pe->rb[index].begun) {
        /* The rest of an ignored copy: said once per source and attempt. */
        if (!pe->rb_orphans_logged[index])
            pe_log(pe, "rebuild messages from dp %d before its BEGIN (the rest of a copy "
                   "for another attempt); ignored", index);
        pe->rb_orphans_logged[index] = true;
        return;
    }
    uint8_t kind = rb_kind_of(payload, len);
    int rc;
    if (pe->test_refuse_meta && (kind == RB_META || kind == RB_META_DONE)) {
        pe->test_refuse_meta = false;
        snprintf(err, sizeof(err), "test fault: metadata refused as if out of memory");
        rc = -1;
    } else {
        rc = parity_rebuild_message(&pe->state, index, payload, len, err, sizeof(err));
    }
    if (rc != 0) {
        /* Parity built without what this message held would be wrong. */
        rebuild_spoil(pe, index, err);
        return;
    }
    if (kind == RB_META || kind == RB_META_DONE || kind == RB_UNITS)
        ack_taken(pe, index);
    rebuild_check_done(pe);
}

static void hook_message(void *owner, int index, uint16_t type, const uint8_t *payload,
                         uint32_t len)
{
    struct parity_engine *pe = owner;
    if (type == FT_REQUEST && rb_is_rebuild(payload, len))
        rebuild_message(pe, index, payload, len);
    else
        recovery_on_message(&pe->rec, type, payload, len);
}

/* Who a verified peer is: a data process (unless it was replaced), or a
 * parity process that serves a dead data process's keys and sends us that
 * process's stream (docs/recovery.md). */
static int hook_resolve(void *owner, const struct link_identity *id, const char **reason)
{
    struct parity_engine *pe = owner;
    const struct group_view *v = &pe->view;
    if (id->role == LINK_ROLE_DATA) {
        if (id->index >= (uint32_t)pe->state.k) {
            *reason = "no such data process in this coding group";
            return -1;
        }
        if (pe->prepared[id->index] || v->dp_server[id->index] != -1) {
            *reason = "this data process was declared dead and is being recovered; it must "
                      "rejoin empty";
            return -1;
        }
        return (int)id->index;
    }
    if (id->role == LINK_ROLE_PARITY && id->index < (uint32_t)v->m &&
        v->pp_state[id->index] == GV_PP_SERVING) {
        int f = v->pp_serves[id->index];
        if (pe->fenced_pp[f] == (int)id->index) {
            *reason = "this recovery process was declared dead; its stream is fenced";
            return -1;
        }
        repl_receiver_unfence(pe->receiver, f);
        return f;
    }
    *reason = "a parity process takes links from data processes and recovery processes only";
    return -1;
}

static void hook_log(void *owner, const char *line)
{
    pe_log(owner, "%s", line);
}

/* ---- client requests: a parity process serves no keys ---- */

static eng_status parity_get(struct engine *e, const char *key, size_t nkey,
                             struct eng_value *out, struct eng_result *res)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving)
        return pe->serving->ops->get(pe->serving, key, nkey, out, res);
    memset(res, 0, sizeof(*res));
    res->status = ENG_NOT_FOUND;
    return ENG_NOT_FOUND;
}

/* cachedump, metadump: the recovery process's keys; a parity process
 * serving nobody lists none (refused). */
static bool parity_visit_recent(struct engine *e,
                                bool (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    return pe->serving && pe->serving->ops->visit_recent(pe->serving, fn, ctx);
}

/* A walk begun over another data process's keys (or another serving of
 * the same one) does not go on over these: true when cursor walks the
 * current serving's (and, at its start, marks it so). */
static bool walk_owned(const struct parity_engine *pe, struct eng_cursor *cursor)
{
    if (cursor->pos == 0 && cursor->owner == 0)
        cursor->owner = pe->serving_gen;
    return cursor->owner == pe->serving_gen;
}

static enum eng_walk parity_walk(struct engine *e, struct eng_cursor *cursor, size_t budget,
                                 void (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving == NULL || !walk_owned(pe, cursor))
        return ENG_WALK_REFUSED;
    return pe->serving->ops->walk(pe->serving, cursor, budget, fn, ctx);
}

/* The meta commands' read: the recovery process's (a data engine). */
static eng_status parity_get_ex(struct engine *e, const char *key, size_t nkey, unsigned opts,
                                struct eng_value *out, struct eng_result *res)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving && pe->serving->ops->get_ex)
        return pe->serving->ops->get_ex(pe->serving, key, nkey, opts, out, res);
    return parity_get(e, key, nkey, out, res);
}

static void parity_release(struct engine *e, void *handle)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving)
        pe->serving->ops->release(pe->serving, handle);
}

static bool parity_read_wait(struct engine *e, const char *key, size_t nkey, eng_done_fn done,
                             void *cookie)
{
    struct parity_engine *pe = pe_of(e);
    return pe->serving && pe->serving->ops->read_wait(pe->serving, key, nkey, done, cookie);
}

static enum eng_walk parity_slot_keys(struct engine *e, unsigned slot,
                                      struct eng_cursor *cursor, size_t budget,
                                      void (*fn)(void *ctx, const char *key, size_t nkey),
                                      void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving == NULL || !walk_owned(pe, cursor))
        return ENG_WALK_REFUSED;
    return pe->serving->ops->slot_keys(pe->serving, slot, cursor, budget, fn, ctx);
}

static eng_status parity_mutate(struct engine *e, const struct eng_mutation *m,
                                struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->serving)
        return pe->serving->ops->mutate(pe->serving, m, res, done, cookie);
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = NO_KEYS_MSG;
    return ENG_FAILED;
}

/* ---- stats ---- */

static uint64_t total_items(const struct parity *p)
{
    uint64_t n = 0;
    for (int i = 0; i < p->k; i++)
        n += p->dps[i].meta.count;
    return n;
}

static uint64_t total_buffered(const struct parity *p)
{
    uint64_t n = 0;
    for (int i = 0; i < p->k; i++)
        n += p->dps[i].src.buffer.count;
    return n;
}

static void stats_peer(const struct parity_engine *pe, int dp, eng_stat_fn emit, void *ctx)
{
    struct repl_peer_stats st;
    char name[48];
    repl_receiver_peer_stats(pe->receiver, dp, &st);
    snprintf(name, sizeof(name), "dp%d_link", dp);
    emit(ctx, name, "%s", st.link_up ? "up" : "down");
    snprintf(name, sizeof(name), "dp%d_records", dp);
    emit(ctx, name, "%" PRIu64, st.records);
    snprintf(name, sizeof(name), "dp%d_duplicates", dp);
    emit(ctx, name, "%" PRIu64, st.duplicates);
    snprintf(name, sizeof(name), "dp%d_acks", dp);
    emit(ctx, name, "%" PRIu64, st.acks);
}

static void stats_general(struct parity_engine *pe, eng_stat_fn emit, void *ctx)
{
    const struct parity *p = &pe->state;
    emit(ctx, "group", "%d", pe->group);
    emit(ctx, "index", "%d", pe->index);
    emit(ctx, "curr_items", "0");
    emit(ctx, "backup_items", "%" PRIu64, total_items(p));
    emit(ctx, "buffered_records", "%" PRIu64, total_buffered(p));
    emit(ctx, "region_size", "%" PRIu64, p->region_size);
    emit(ctx, "region_touched", "%" PRIu64, p->touched_end);
    for (int i = 0; i < p->k; i++) {
        const struct parity_dp *d = &p->dps[i];
        char name[48];
        snprintf(name, sizeof(name), "dp%d_applied_xid", i);
        emit(ctx, name, "%" PRIu64, d->src.applied_xid);
        snprintf(name, sizeof(name), "dp%d_received_xid", i);
        emit(ctx, name, "%" PRIu64, d->src.received_xid);
        snprintf(name, sizeof(name), "dp%d_buffered", i);
        emit(ctx, name, "%zu", d->src.buffer.count);
        snprintf(name, sizeof(name), "dp%d_delta_bytes", i);
        emit(ctx, name, "%" PRIu64, d->delta_bytes);
        snprintf(name, sizeof(name), "dp%d_diverged", i);
        emit(ctx, name, "%d", d->src.diverged ? 1 : 0);
        stats_peer(pe, i, emit, ctx);
    }
}

static void stats_recovery(struct parity_engine *pe, eng_stat_fn emit, void *ctx)
{
    size_t done, total;
    uint64_t bytes;
    recovery_progress(&pe->rec, &done, &total, &bytes);
    emit(ctx, "recovery_serving_dp", "%d", pe->serving_dp);
    emit(ctx, "recovery_units_done", "%zu", done);
    emit(ctx, "recovery_units_total", "%zu", total);
    emit(ctx, "recovery_bytes", "%" PRIu64, bytes);
    emit(ctx, "recovery_leader", "%d", pe->rec.view_leader == pe->index ? 1 : 0);
    emit(ctx, "recovery_batches", "%" PRIu64, pe->rec.batches_done);
    emit(ctx, "recovery_batches_dropped", "%" PRIu64, pe->rec.batches_dropped);
    emit(ctx, "recovery_units_requested", "%" PRIu64, pe->rec.units_requested);
    emit(ctx, "recovery_bytes_decoded", "%" PRIu64, pe->rec.bytes_decoded);
}

static bool parity_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    if (group[0] == '\0') {
        if (pe->serving) {
            /* The keys we serve come first: clients read curr_items etc. */
            pe->serving->ops->stats(pe->serving, group, emit, ctx);
            stats_recovery(pe, emit, ctx);
            return true;
        }
        stats_general(pe, emit, ctx);
        return true;
    }
    if (pe->serving && strcmp(group, "settings") != 0)
        return pe->serving->ops->stats(pe->serving, group, emit, ctx);
    /* No items, slabs or sizes on a parity process; settings are the server's. */
    return strcmp(group, "items") == 0 || strcmp(group, "slabs") == 0 ||
           strcmp(group, "sizes") == 0 || strcmp(group, "settings") == 0;
}

static void parity_stats_reset(struct engine *e)
{
    struct parity_engine *pe = pe_of(e);
    repl_receiver_stats_reset(pe->receiver);
    if (pe->serving)
        pe->serving->ops->stats_reset(pe->serving);
}

static void parity_tick(struct engine *e, time_t now)
{
    struct parity_engine *pe = pe_of(e);
    recovery_tick(&pe->rec);
    if (pe->serving)
        pe->serving->ops->tick(pe->serving, now);
}

/* ---- admin: cocytus info | region | meta | used ---- */

struct reply {
    eng_write_fn write;
    void *ctx;
};

__attribute__((format(printf, 2, 3)))
static void reply_printf(const struct reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vreply(r->write, r->ctx, fmt, ap);
    va_end(ap);
}

static void reply_str(const struct reply *r, const char *s)
{
    r->write(r->ctx, s, strlen(s));
}

static bool client_error(const struct reply *r, const char *reason)
{
    reply_printf(r, "CLIENT_ERROR %s\r\n", reason);
    return true;
}

/* Strict unsigned decimal. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (*s == '\0')
        return false;
    uint64_t v = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static void info_dp(const struct reply *r, const struct parity_dp *d)
{
    int i = d->index;
    const struct repl_source *s = &d->src;
    reply_printf(r, "STAT dp%d_applied_xid %" PRIu64 "\r\n", i, s->applied_xid);
    reply_printf(r, "STAT dp%d_received_xid %" PRIu64 "\r\n", i, s->received_xid);
    reply_printf(r, "STAT dp%d_stable_xid %" PRIu64 "\r\n", i, s->stable_xid);
    reply_printf(r, "STAT dp%d_buffered %zu\r\n", i, s->buffer.count);
    reply_printf(r, "STAT dp%d_buffered_bytes %zu\r\n", i, s->buffer.bytes);
    reply_printf(r, "STAT dp%d_items %zu\r\n", i, d->meta.count);
    reply_printf(r, "STAT dp%d_region_used %" PRIu64 "\r\n", i, pieceset_used_bytes(d->pieces));
    reply_printf(r, "STAT dp%d_diverged %d\r\n", i, s->diverged ? 1 : 0);
}

static bool admin_info(struct parity_engine *pe, const struct reply *r)
{
    const struct parity *p = &pe->state;
    reply_str(r, "STAT role parity\r\n");
    reply_printf(r, "STAT group %d\r\n", pe->group);
    reply_printf(r, "STAT index %d\r\n", pe->index);
    reply_printf(r, "STAT k %d\r\n", p->k);
    reply_printf(r, "STAT m %d\r\n", p->m);
    reply_printf(r, "STAT region_size %" PRIu64 "\r\n", p->region_size);
    reply_printf(r, "STAT region_touched %" PRIu64 "\r\n", p->touched_end);
    reply_printf(r, "STAT items %" PRIu64 "\r\n", total_items(p));
    for (int i = 0; i < p->k; i++)
        info_dp(r, &p->dps[i]);
    reply_printf(r, "STAT meta_bytes %zu\r\n", parity_meta_bytes(p));
    reply_printf(r, "STAT rss %" PRIu64 "\r\n", engine_process_rss());
    char view[256];
    group_view_format(&pe->view, view, sizeof(view));
    reply_printf(r, "STAT group_view %s\r\n", view);
    if (pe->serving) {
        size_t done, total;
        uint64_t bytes;
        recovery_progress(&pe->rec, &done, &total, &bytes);
        reply_printf(r, "STAT serving_dp %d\r\n", pe->serving_dp);
        reply_printf(r, "STAT serving_xid %" PRIu64 "\r\n", engine_data_committed(pe->serving));
        reply_printf(r, "STAT serving_items %zu\r\n", engine_data_items(pe->serving));
        reply_printf(r, "STAT recovery_units_done %zu\r\n", done);
        reply_printf(r, "STAT recovery_units_total %zu\r\n", total);
        reply_printf(r, "STAT recovery_bytes %" PRIu64 "\r\n", bytes);
        reply_printf(r, "STAT recovery_usec %" PRIu64 "\r\n", recovery_elapsed_us(&pe->rec));
        reply_printf(r, "STAT recovery_rebuild_usec %" PRIu64 "\r\n", recovery_rebuild_us(&pe->rec));
        reply_printf(r, "STAT recovery_units_requested %" PRIu64 "\r\n", pe->rec.units_requested);
        reply_printf(r, "STAT recovery_batches %" PRIu64 "\r\n", pe->rec.batches_done);
    }
    reply_str(r, "END\r\n");
    return true;
}

static bool admin_region(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    uint64_t off, len;
    if (argc != 3 || !parse_u64(argv[1], &off) || !parse_u64(argv[2], &len))
        return client_error(r, "usage: cocytus region <off> <len>");
    if (len > REGION_READ_MAX)
        return client_error(r, "region read larger than 16777216 bytes");
    if (off > pe->state.region_size || len > pe->state.region_size - off)
        return client_error(r, "range outside the region");
    reply_printf(r, "VALUE region 0 %" PRIu64 "\r\n", len);
    r->write(r->ctx, pe->state.region + off, (size_t)len);
    reply_str(r, "\r\nEND\r\n");
    return true;
}

/* The DP a meta/used command names, or NULL after a CLIENT_ERROR. */
static const struct parity_dp *admin_dp(struct parity_engine *pe, int argc, char **argv,
                                        const struct reply *r, const char *usage)
{
    uint64_t dp;
    if (argc != 2 || !parse_u64(argv[1], &dp)) {
        client_error(r, usage);
        return NULL;
    }
    if (dp >= (uint64_t)pe->state.k) {
        client_error(r, "no such data process in this coding group");
        return NULL;
    }
    return &pe->state.dps[dp];
}

/* The DP we serve keeps its table in its data engine now. */
static bool served_admin(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    uint64_t dp;
    if (!pe->serving || argc != 2 || !parse_u64(argv[1], &dp) || (int64_t)dp != pe->serving_dp)
        return false;
    char *words[1] = { argv[0] };
    return pe->serving->ops->admin(pe->serving, 1, words, r->write, r->ctx);
}

static bool admin_meta(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    if (served_admin(pe, argc, argv, r))
        return true;
    const struct parity_dp *d = admin_dp(pe, argc, argv, r, "usage: cocytus meta <dp>");
    if (d == NULL)
        return true;
    reply_printf(r, "STAT count %zu\r\n", d->meta.count);
    reply_printf(r, "STAT digest %016" PRIx64 "\r\n", meta_digest(&d->meta));
    /* The digest of the data process's allocator (alloc.h), computed from
     * the pieces without building one; the check tool compares both. */
    char alloc_digest[PIECESET_DIGEST_TEXT];
    pieceset_digest_text(d->pieces, alloc_digest);
    reply_printf(r, "STAT alloc_digest %s\r\n", alloc_digest);
    reply_printf(r, "STAT used_bytes %" PRIu64 "\r\n", pieceset_used_bytes(d->pieces));
    reply_printf(r, "STAT applied_xid %" PRIu64 "\r\n", d->src.applied_xid);
    reply_str(r, "END\r\n");
    return true;
}

static bool admin_used(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    if (served_admin(pe, argc, argv, r))
        return true;
    const struct parity_dp *d = admin_dp(pe, argc, argv, r, "usage: cocytus used <dp>");
    if (d == NULL)
        return true;
    struct dalloc_span *all;
    size_t n;
    if (pieceset_sorted(d->pieces, &all, &n) != 0) {
        reply_str(r, "SERVER_ERROR out of memory\r\n");
        return true;
    }
    for (size_t i = 0; i < n; i++)
        reply_printf(r, "USED %" PRIu64 " %" PRIu64 "\r\n", all[i].off, all[i].size);
    free(all);
    reply_str(r, "END\r\n");
    return true;
}

static bool parity_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    struct reply r = { .write = write, .ctx = ctx };
    if (argc < 1)
        return false;
    if (strcmp(argv[0], "info") == 0)
        return argc == 1 ? admin_info(pe, &r) : client_error(&r, "usage: cocytus info");
    if (strcmp(argv[0], "dpinfo") == 0) {
        /* The data engine of the DP we serve: its xids, items, queue. */
        if (!pe->serving)
            return client_error(&r, "this parity process serves no data process");
        char *words[1] = { "info" };
        return pe->serving->ops->admin(pe->serving, 1, words, write, ctx);
    }
    if (strcmp(argv[0], "region") == 0)
        return admin_region(pe, argc, argv, &r);
    if (strcmp(argv[0], "meta") == 0)
        return admin_meta(pe, argc, argv, &r);
    if (strcmp(argv[0], "used") == 0)
        return admin_used(pe, argc, argv, &r);
    return false;
}

/* ---- lifetime ---- */

static void parity_destroy_engine(struct engine *e)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->prepare_timer)
        event_free(pe->prepare_timer);
    if (pe->serving)
        pe->serving->ops->destroy(pe->serving);
    if (pe->listener != NULL)
        link_listener_free(pe->listener);
    repl_receiver_free(pe->receiver);
    recovery_destroy(&pe->rec);
    pe->state.data_units = NULL;
    for (int i = 0; i < RECOV_MAX_K; i++)
        rb_units_destroy(&pe->rb[i]);
    parity_destroy(&pe->state);
    free(pe);
}

static void parity_control(struct engine *e, const char *text, size_t len);
static size_t parity_heartbeat_extra(struct engine *e, char *buf, size_t len);
static int parity_lost_peers(struct engine *e, struct eng_lost_peer *out, int max);

/* A recovery process that handed its data process's keys back holds the
 * requests that came before the handoff (engine_data_hold).  Once the view
 * says the data process serves itself again and a new map sends its slots
 * there, they are answered MOVED at once (reads go through routing again),
 * rather than when we start over: a coordinator round trip later, after
 * we emptied ourselves. */
static void parity_map_changed(struct engine *e)
{
    struct parity_engine *pe = pe_of(e);
    if (!pe->serving || pe->serving_dp < 0 || pe->confirmed.dp_server[pe->serving_dp] != -1 ||
        !engine_data_handed(pe->serving))
        return;
    const struct cluster_proc *dpp = cluster_find(pe->cfg.cluster, pe->group, ROLE_DATA,
                                                  pe->serving_dp);
    if (!dpp)
        return;
    pe_log(pe, "dp %d serves itself again: what we held for it goes there", pe->serving_dp);
    engine_data_release(pe->serving, dpp->host, dpp->port);
}

static const struct engine_ops parity_ops = {
    .name = "parity",
    .get = parity_get,
    .get_ex = parity_get_ex,
    .release = parity_release,
    .mutate = parity_mutate,
    .stats = parity_stats,
    .stats_reset = parity_stats_reset,
    .tick = parity_tick,
    .destroy = parity_destroy_engine,
    .admin = parity_admin,
    .slot_keys = parity_slot_keys,
    .visit_recent = parity_visit_recent,
    .walk = parity_walk,
    .read_wait = parity_read_wait,
    .control = parity_control,
    .heartbeat_extra = parity_heartbeat_extra,
    .lost_peers = parity_lost_peers,
    .map_changed = parity_map_changed,
};

/* ---- recovery: what recovery.c needs from us ---- */

static int env_to_source(void *ctx, int dp, uint16_t type, const struct iovec *iov, int n)
{
    struct parity_engine *pe = ctx;
    return repl_receiver_sendv(pe->receiver, dp, type, iov, n);
}

static int env_to_pp(void *ctx, int pp, uint16_t type, const struct iovec *iov, int n)
{
    struct parity_engine *pe = ctx;
    return pe->serving ? engine_data_sendv_to(pe->serving, pp, type, iov, n) : -1;
}

static void env_local_fetch(void *ctx, const struct recov_msg *m)
{
    struct parity_engine *pe = ctx;
    if (pe->serving)
        engine_data_fetch(pe->serving, m);
}

static int env_hold(void *ctx, int dp, uint64_t xid)
{
    struct parity_engine *pe = ctx;
    const struct repl_source *src = &pe->state.dps[dp].src;
    if (xid > src->received_xid || xid < src->applied_xid)
        return -1;
    if (parity_apply(&pe->state, dp, xid) != 0)
        return -1;
    pe->hold_at[dp] = xid;
    return 0;
}

static void env_release(void *ctx, int dp)
{
    struct parity_engine *pe = ctx;
    pe->hold_at[dp] = UINT64_MAX;
    if (parity_apply(&pe->state, dp, pe->declared[dp]) != 0)
        pe_log(pe, "dp %d: %s", dp, pe->state.dps[dp].src.why);
}

static void env_arrived(void *ctx)
{
    struct parity_engine *pe = ctx;
    if (pe->serving)
        engine_data_units_arrived(pe->serving);
}

static void env_zero(void *ctx, uint64_t off, uint64_t len)
{
    struct parity_engine *pe = ctx;
    uint8_t *p = pe->state.region + off;
    if (madvise(p, (size_t)len, MADV_DONTNEED) != 0)
        memset(p, 0, (size_t)len);
}

static void env_log(void *ctx, const char *line)
{
    pe_log(ctx, "recovery: %s", line);
}

/* The data engine of a takeover asks for units and hands over the
 * recovery traffic that reaches it on its links. */
static bool units_ready(void *ctx, uint64_t off, uint64_t len)
{
    return recovery_units_ready(ctx, off, len);
}

static void units_need(void *ctx, uint64_t off, uint64_t len)
{
    recovery_need(ctx, off, len);
}

static bool units_complete(void *ctx)
{
    struct recovery *rc = ctx;
    return rc->own_valid && rc->own.done == rc->own.nunits;
}

static void units_message(void *ctx, int peer, uint16_t type, const uint8_t *payload,
                          uint32_t len)
{
    recovery_on_message(ctx, type, payload, len);
}

static int recovery_start(struct parity_engine *pe)
{
    struct recovery_env env = {
        .ctx = pe,
        .base = pe->base,
        .p = &pe->state,
        .to_source = env_to_source,
        .to_pp = env_to_pp,
        .local_fetch = env_local_fetch,
        .hold = env_hold,
        .release = env_release,
        .arrived = env_arrived,
        .zero = env_zero,
        .log = env_log,
    };
    return recovery_init(&pe->rec, &env, pe->index, pe->state.k, pe->state.m);
}

/* ---- recovery: the coordinator's messages ---- */

static void ctl_reply(struct parity_engine *pe, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (!pe->cfg.ctl_send || pe->cfg.ctl_send(pe->cfg.ctl_arg, text) < 0)
        pe_log(pe, "cannot answer the coordinator (%s): its link is down", text);
}

/* "prepare <g> <dp>": the DP is dead.  Take nothing more of it and say how
 * far its stream reached here (paper 4.1.1: the minimum over the group's
 * parity processes is the stable xid). */
static void answer_prepared(struct parity_engine *pe, int dp)
{
    const struct repl_source *src = &pe->state.dps[dp].src;
    pe->prepare_at[dp] = 0;
    ctl_reply(pe, "prepared %d %d %" PRIu64, pe->group, dp, src->received_xid);
}

/* Whatever streams dp to us now is what was declared dead: the data
 * process, or the recovery process that served it (a second takeover of
 * dp).  Control links keep their order, so a prepare resent before this
 * takeover's truncate finds the stream fenced already; one after it is
 * another takeover.  Then the answer, at once or once the read lease we
 * may have given ran out (prepare_at). */
static void fence_for_prepare(struct parity_engine *pe, int dp, bool gone)
{
    const struct repl_source *src = &pe->state.dps[dp].src;
    pe->drain_until[dp] = 0;
    if (!repl_receiver_fenced(pe->receiver, dp)) {
        int server = pe->view.dp_server[dp];
        if (server >= 0 && server < pe->state.m && server != pe->index)
            pe->fenced_pp[dp] = server;
        repl_receiver_fence(pe->receiver, dp, server >= 0 ? "this recovery process was "
                            "declared dead" : "this data process was declared dead");
    }
    uint64_t now = link_now_ms();
    uint64_t lease_end = gone ? 0 : repl_receiver_lease_end(pe->receiver, dp, LINK_LEASE_GRANT_MS);
    pe_log(pe, "prepare dp %d: fenced; received xid %" PRIu64 ", applied %" PRIu64 "%s", dp,
           src->received_xid, src->applied_xid,
           gone ? "; what streamed it is gone (no read lease to wait for)" :
           lease_end > now ? "; answering once its read lease ran out" : "");
    if (lease_end <= now) {
        answer_prepared(pe, dp);
        return;
    }
    pe->prepare_at[dp] = lease_end;
    pe_log(pe, "dp %d may serve reads for %" PRIu64 " ms more", dp, lease_end - now);
}

/* The prepares that wait: for the stream's end to be read, or for a read
 * lease to run out. */
static void on_prepare_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct parity_engine *pe = arg;
    uint64_t now = link_now_ms(), next = 0;
    for (int i = 0; i < pe->state.k; i++) {
        if (pe->drain_until[i] &&
            (now >= pe->drain_until[i] || !repl_receiver_link_up(pe->receiver, i)))
            fence_for_prepare(pe, i, false);
        if (pe->drain_until[i]) {
            if (!next || now + PREPARE_DRAIN_POLL_MS < next)
                next = now + PREPARE_DRAIN_POLL_MS;
        } else if (pe->prepare_at[i] && now >= pe->prepare_at[i]) {
            answer_prepared(pe, i);
        } else if (pe->prepare_at[i] && (!next || pe->prepare_at[i] < next)) {
            next = pe->prepare_at[i];
        }
    }
    if (next)
        link_timer_at(pe->prepare_timer, next);
}

/* A data process serves reads only within a lease from each of its parity
 * processes (link.h).  One fenced while its lease from us may still run
 * (it talked to us until now: cut off from the coordinator only) might
 * still answer a read from a client with the old map: the takeover,
 * which waits for our answer, must not let another process write its
 * keys before that lease ran out.  A process that died ended its link,
 * and that ends its lease; but under load its last records may still be
 * unread before that end, so a stream that is still up is read for up to
 * PREPARE_DRAIN_MS first (what it adds meanwhile is in our answer).
 * `gone`: the coordinator knows that process ended (it came back with a
 * new pid), so whatever streams dp now is its empty successor, which
 * serves no reads once we welcomed it above xid 0 (it learned from that
 * that it lost its state): fence and answer at once.  One we welcomed at
 * 0 (a stream never written) may serve, and its lease is waited out as
 * usual.  Records of the dead one still unread here were acknowledged by
 * nobody's reply, since we did not acknowledge them. */
static void ctl_prepare(struct parity_engine *pe, int dp, bool gone)
{
    pe->prepared[dp] = true;
    if (pe->drain_until[dp] || pe->prepare_at[dp])
        return;   /* a resent prepare: the answer is on its way */
    if (gone && repl_receiver_welcomed_xid(pe->receiver, dp) == 0) {
        pe_log(pe, "prepare dp %d: gone, but its successor was welcomed at xid 0 and may "
               "serve: waiting for its lease as usual", dp);
        gone = false;
    }
    if (gone) {
        fence_for_prepare(pe, dp, true);
        return;
    }
    /* A stream silent for a while (a hung process) has nothing left to
     * read: no wait. */
    if (!repl_receiver_fenced(pe->receiver, dp) && repl_receiver_link_up(pe->receiver, dp) &&
        !repl_receiver_link_quiet(pe->receiver, dp) && pe->prepare_timer) {
        uint64_t now = link_now_ms();
        pe->drain_until[dp] = now + PREPARE_DRAIN_MS;
        link_timer_at(pe->prepare_timer, now + PREPARE_DRAIN_POLL_MS);
        return;
    }
    fence_for_prepare(pe, dp, false);
    if (pe->prepare_at[dp])
        on_prepare_timer(-1, 0, pe);
}

/* Records of dp up to stable are applied, the rest dropped: they never
 * reached every parity process, so no client saw them acknowledged. */
static int settle_stream(struct parity_engine *pe, int dp, uint64_t stable)
{
    struct repl_source *src = &pe->state.dps[dp].src;
    if (stable > src->received_xid || stable < src->applied_xid) {
        pe_log(pe, "dp %d: stable xid %" PRIu64 " outside what we hold (applied %" PRIu64
               ", received %" PRIu64 ")", dp, stable, src->applied_xid, src->received_xid);
        return -1;
    }
    size_t dropped = src->buffer.count;
    if (parity_apply(&pe->state, dp, stable) != 0 ||
        parity_truncate_after(&pe->state, dp, stable) != 0) {
        pe_log(pe, "dp %d: cannot settle at xid %" PRIu64 ": %s", dp, stable, src->why);
        return -1;
    }
    pe->declared[dp] = stable;
    pe->hold_at[dp] = UINT64_MAX;
    dropped -= src->buffer.count;
    pe_log(pe, "dp %d settled at stable xid %" PRIu64 " (%zu buffered records applied or "
           "dropped)", dp, stable, dropped);
    return 0;
}

/* "truncate <g> <dp> <stable> <pp>": settle dp's stream; pp serves it now. */
static void ctl_truncate(struct parity_engine *pe, int dp, uint64_t stable, int pp)
{
    if (settle_stream(pe, dp, stable) != 0)
        return;
    if (pe->fenced_pp[dp] == pp)
        pe->fenced_pp[dp] = -1;   /* it serves dp again, by a new takeover */
    pe->view.dp_server[dp] = pp;
    pe->view.pp_state[pp] = GV_PP_SERVING;
    pe->view.pp_serves[pp] = dp;
    ctl_reply(pe, "truncated %d %d", pe->group, dp);
}

/* The steps of a takeover that can fail, for takeover_fault().  (Building
 * the allocator is the data engine's, after the takeover: its faults,
 * DR_FAULT_*, are passed on to every data engine made here.) */
enum {
    TK_STEP_ENGINE = 1u << 0,   /* the data engine */
    TK_STEP_UNITS = 1u << 1,    /* recovery's unit map */
};

/* COCYTUS_TEST_TAKEOVER_FAIL, a list naming any of engine, units (steps
 * here), build, overlap (the data engine's: *build_faults). */
static unsigned takeover_faults_from_env(unsigned *build_faults)
{
    const char *v = getenv("COCYTUS_TEST_TAKEOVER_FAIL");
    unsigned steps = 0;
    *build_faults = 0;
    if (v == NULL)
        return 0;
    if (strstr(v, "engine"))
        steps |= TK_STEP_ENGINE;
    if (strstr(v, "units"))
        steps |= TK_STEP_UNITS;
    if (strstr(v, "build"))
        *build_faults |= DR_FAULT_BUILD_ONCE;
    if (strstr(v, "overlap"))
        *build_faults |= DR_FAULT_OVERLAP;
    return steps;
}

/* A test's fault (COCYTUS_TEST_TAKEOVER_FAIL=engine,units, either or
 * both): each named step fails once, as if out of memory, so that a test
 * can see a refused takeover leave this process the parity process it was
 * and the coordinator's next attempt succeed (test/integration/
 * takeover_failed.sh).  Out of memory cannot be caused any other way. */
static bool takeover_fault(struct parity_engine *pe, unsigned step, const char *name)
{
    if (!(pe->test_takeover_fail & step))
        return false;
    pe->test_takeover_fail &= ~step;
    pe_log(pe, "test fault: this takeover fails at its %s step", name);
    errno = ENOMEM;
    return true;
}

/* "takeover <g> <dp> <stable>": we serve dp from now on.  Every step that
 * can fail comes before the first that changes this process (recovery_serve
 * zeroing units): a refused takeover leaves it the parity process it was,
 * and the coordinator sends the step again a second later. */
static void ctl_takeover(struct parity_engine *pe, int dp, uint64_t stable)
{
    if (pe->rebuilding) {
        pe_log(pe, "takeover of dp %d refused: our parity is being rebuilt", dp);
        return;
    }
    if (pe->serving) {
        if (pe->serving_dp == dp)
            ctl_reply(pe, "serving %d %d", pe->group, dp);
        else
            pe_log(pe, "takeover of dp %d refused: already serving dp %d", dp, pe->serving_dp);
        return;
    }
    if (settle_stream(pe, dp, stable) != 0)
        return;
    struct parity_dp *d = &pe->state.dps[dp];
    int peers[RECOV_MAX_M], npeers = 0;
    for (int j = 0; j < pe->state.m; j++)
        if (j != pe->index && pe->view.pp_state[j] != GV_PP_DEAD)
            peers[npeers++] = j;
    struct data_recovery_config rc = {
        .dp = dp,
        .self_pp = pe->index,
        .meta = &d->meta,
        .pieces = &d->pieces,
        .region = pe->state.region,
        .peers = peers,
        .npeers = npeers,
        .start_xid = stable,
        .cas_start = d->max_cas + 1,
        .touched_end = d->touched_end,
        .units = { .ctx = &pe->rec, .ready = units_ready, .need = units_need,
                   .complete = units_complete, .message = units_message },
        .test_faults = pe->test_build_faults,
    };
    struct engine_config cfg = pe->cfg;
    cfg.index = dp;
    /* The data engine is made before recovery_serve() zeroes units that
     * hold other processes' parity: from there on there is no way back to
     * being this group's parity process. */
    struct engine *serving = takeover_fault(pe, TK_STEP_ENGINE, "data engine") ? NULL :
                             engine_data_recovery_new(&cfg, &rc);
    if (!serving) {
        pe_log(pe, "takeover of dp %d refused: out of memory for its data engine", dp);
        return;
    }
    if (takeover_fault(pe, TK_STEP_UNITS, "unit map") || recovery_serve(&pe->rec, dp) != 0) {
        serving->ops->destroy(serving);
        pe_log(pe, "takeover of dp %d refused: out of memory for its unit map", dp);
        return;
    }
    /* Nothing below can fail. */
    engine_data_recovery_take(serving, &rc);
    pe->state.data_units = &pe->rec.own;
    pe->serving = serving;
    pe->serving_gen++;
    pe->serving_dp = dp;
    pe->view.dp_server[dp] = pe->index;
    pe->view.pp_state[pe->index] = GV_PP_SERVING;
    pe->view.pp_serves[pe->index] = dp;
    pe_log(pe, "now the recovery process of dp %d: %zu keys, xid %" PRIu64 ", replicating to "
           "%d parity process(es); its allocator is being built", dp,
           engine_data_items(pe->serving), stable, npeers);
    /* Start rebuilding now, without waiting for the coordinator's next view:
     * the last confirmed view plus ourselves (a data process that another
     * takeover is still busy with stays "x" there, so no batch involves it
     * until the coordinator confirms who serves it). */
    struct group_view v = pe->confirmed;
    v.dp_server[dp] = pe->index;
    v.pp_state[pe->index] = GV_PP_SERVING;
    v.pp_serves[pe->index] = dp;
    recovery_set_view(&pe->rec, &v);
    ctl_reply(pe, "serving %d %d", pe->group, dp);
}

/* ---- back to full redundancy (rebuild.h) ---- */

/* Start over as an empty parity process that the group's data processes
 * rebuild.  A recovery process whose data process took its keys back
 * answers what it still holds with MOVED and drops its data engine. */
static void become_empty(struct parity_engine *pe)
{
    if (pe->serving) {
        /* Detached first: the requests it answers or wakes come back to us
         * (and get MOVED), not to it. */
        struct engine *data = pe->serving;
        const struct cluster_proc *dpp = cluster_find(pe->cfg.cluster, pe->group, ROLE_DATA,
                                                      pe->serving_dp);
        pe->serving = NULL;
        pe->serving_dp = -1;
        pe->state.data_units = NULL;
        if (dpp)
            engine_data_release(data, dpp->host, dpp->port);
        data->ops->destroy(data);
    }
    recovery_destroy(&pe->rec);
    if (recovery_start(pe) != 0) {
        pe_log(pe, "out of memory restarting recovery state");
        abort();
    }
    parity_reset(&pe->state);
    for (int i = 0; i < pe->state.k; i++) {
        pe->declared[i] = 0;
        pe->hold_at[i] = UINT64_MAX;
        if (pe->prepared[i]) {
            pe->prepared[i] = false;
            pe->prepare_at[i] = 0;
            pe->drain_until[i] = 0;
            pe->fenced_pp[i] = -1;
            repl_receiver_unfence(pe->receiver, i);
        }
        rb_units_destroy(&pe->rb[i]);
        if (rb_units_init(&pe->rb[i], pe->state.region_size) != 0) {
            pe_log(pe, "out of memory for the rebuild's unit table");
            abort();
        }
        pe->rb_max_t[i] = 0;
    }
}

/* "rebuild <g> <j> <attempt>": j is us: start over and be rebuilt (once
 * per attempt: the coordinator resends unanswered messages); otherwise the
 * data process we serve sends its state to j. */
static void ctl_rebuild(struct parity_engine *pe, int j, uint64_t attempt)
{
    if (j != pe->index) {
        if (pe->serving)
            engine_data_rebuild(pe->serving, ROLE_PARITY, j, attempt);
        return;
    }
    if (!pe->rebuilding || attempt != pe->rb_attempt) {
        pe->rb_attempt = attempt;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        become_empty(pe);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pe_log(pe, "starting over empty (in %.1f ms): the group's data processes rebuild our "
               "parity (attempt %" PRIu64 ")", (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e6, attempt);
        pe->rebuilding = true;
        pe->rb_spoiled = false;
        memset(pe->rb_orphans_logged, 0, sizeof(pe->rb_orphans_logged));
    }
    ctl_reply(pe, "rebuild-ready %d %d", pe->group, pe->index);
}

/* "copy <g> <f>": the data process we serve is back; send it our state. */
static void ctl_copy(struct parity_engine *pe, int dp)
{
    if (!pe->serving || pe->serving_dp != dp) {
        pe_log(pe, "copy of dp %d asked, but we do not serve it; ignored", dp);
        return;
    }
    engine_data_rebuild(pe->serving, ROLE_DATA, dp, 0);
}

static void handoff_quiet(void *ctx, uint64_t xid)
{
    struct parity_engine *pe = ctx;
    pe_log(pe, "dp %d handed off at xid %" PRIu64 ": writes held until the map moves",
           pe->serving_dp, xid);
    ctl_reply(pe, "handed %d %d %" PRIu64, pe->group, pe->serving_dp, xid);
}

/* "handoff <g> <f>": hold writes; once nothing is in flight say at which
 * xid the data process takes over. */
static void ctl_handoff(struct parity_engine *pe, int dp)
{
    if (!pe->serving || pe->serving_dp != dp)
        return;
    engine_data_hold(pe->serving, handoff_quiet, pe);
}

/* "abandon <g> <f>": the group lost more than it tolerates and the units
 * of f we still miss can never be rebuilt.  First the keys whose values lie
 * there are deleted through records (reads of them wait meanwhile, as for
 * any missing unit); once none is left and those records applied, the
 * units become zero data and f's recovery is complete.  The coordinator
 * sends this again each second until our progress says so. */
static void ctl_abandon(struct parity_engine *pe, int dp)
{
    if (!pe->serving || pe->serving_dp != dp || pe->rec.abandoned)
        return;
    uint64_t xid;
    if (engine_data_drop_unready(pe->serving, &xid) > 0 ||
        engine_data_committed(pe->serving) < xid)
        return;
    recovery_abandon(&pe->rec);
}

/* A control message we do not act on, quoted (at most 80 bytes) in the log. */
static void log_ignored(struct parity_engine *pe, const char *what, const char *text, size_t len)
{
    char shown[81];
    pe_log(pe, "%s '%s'; ignored", what, printable_copy(shown, sizeof(shown), text, len));
}

static void ctl_group(struct parity_engine *pe, const char *text, size_t len)
{
    struct group_view v;
    if (group_view_parse(&v, pe->state.k, pe->state.m, text, len) < 0) {
        log_ignored(pe, "malformed group view", text, len);
        return;
    }
    if (v.version < pe->confirmed.version)
        return;
    pe->view = v;
    pe->confirmed = v;
    /* A data process back at its place (its replacement took over): its
     * links are welcome again. */
    for (int i = 0; i < pe->state.k; i++) {
        if (v.dp_server[i] == -1 && pe->prepared[i]) {
            pe->prepared[i] = false;
            pe->prepare_at[i] = 0;
            pe->drain_until[i] = 0;
            pe->fenced_pp[i] = -1;
            repl_receiver_unfence(pe->receiver, i);
        }
    }
    if (pe->serving)
        engine_data_set_view(pe->serving, &v);
    recovery_set_view(&pe->rec, &v);
}

/* Split "<verb> <g> <a> [<b> [<c>]]" into numbers; the view's text is the
 * rest after "<g> ". */
static int ctl_numbers(const char *text, size_t len, uint64_t *num, int max, size_t *rest)
{
    size_t i = 0;
    while (i < len && text[i] != ' ')
        i++;
    int n = 0;
    while (i < len && n < max) {
        i++;   /* the space */
        if (i >= len || text[i] < '0' || text[i] > '9')
            return -1;
        uint64_t v = 0;
        while (i < len && text[i] >= '0' && text[i] <= '9') {
            v = v * 10 + (uint64_t)(text[i] - '0');
            i++;
        }
        if (i < len && text[i] != ' ')
            return -1;
        num[n++] = v;
    }
    *rest = i < len ? i + 1 : len;
    return n;
}

static void parity_control(struct engine *e, const char *text, size_t len)
{
    struct parity_engine *pe = pe_of(e);
    uint64_t num[4];
    size_t rest;
    int k = pe->state.k, m = pe->state.m;
    if (len > 6 && memcmp(text, "group ", 6) == 0) {
        if (ctl_numbers(text, len, num, 1, &rest) == 1 && num[0] == (uint64_t)pe->group)
            ctl_group(pe, text + rest, len - rest);
        return;
    }
    /* "prepare <g> <dp> gone": the one word after numbers. */
    bool gone = len > 13 && memcmp(text, "prepare ", 8) == 0 &&
                memcmp(text + len - 5, " gone", 5) == 0;
    if (gone)
        len -= 5;
    int n = ctl_numbers(text, len, num, 4, &rest);
    if (n < 2 || num[0] != (uint64_t)pe->group ||
        (num[1] >= (uint64_t)k && memcmp(text, "rebuild ", 8) != 0)) {
        log_ignored(pe, "unexpected control message", text, len);
        return;
    }
    if (len > 8 && memcmp(text, "rebuild ", 8) == 0 && n == 3 && num[1] < (uint64_t)m) {
        ctl_rebuild(pe, (int)num[1], num[2]);
        return;
    }
    int dp = (int)num[1];
    if (len > 5 && memcmp(text, "copy ", 5) == 0 && n == 2)
        ctl_copy(pe, dp);
    else if (len > 8 && memcmp(text, "handoff ", 8) == 0 && n == 2)
        ctl_handoff(pe, dp);
    else if (len > 7 && memcmp(text, "resume ", 7) == 0 && n == 2 && pe->serving &&
             pe->serving_dp == dp)
        engine_data_resume(pe->serving);
    else if (len > 8 && memcmp(text, "prepare ", 8) == 0 && n == 2)
        ctl_prepare(pe, dp, gone);
    else if (len > 9 && memcmp(text, "truncate ", 9) == 0 && n == 4 && num[3] < (uint64_t)m)
        ctl_truncate(pe, dp, num[2], (int)num[3]);
    else if (len > 9 && memcmp(text, "takeover ", 9) == 0 && n == 3)
        ctl_takeover(pe, dp, num[2]);
    else if (len > 8 && memcmp(text, "abandon ", 8) == 0 && n == 2)
        ctl_abandon(pe, dp);
    else
        log_ignored(pe, "unexpected control message", text, len);
}

static size_t parity_heartbeat_extra(struct engine *e, char *buf, size_t len)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->rebuilding) {
        uint64_t done = 0, total = 0, bytes = 0;
        for (int i = 0; i < pe->state.k; i++) {
            done += pe->rb[i].arrived;
            total += pe->rb[i].nunits;
            /* The metadata counts: no unit arrives while it goes, and the
             * coordinator starts over a copy that shows no progress. */
            bytes += pe->rb[i].bytes + pe->rb[i].meta_bytes;
        }
        int n = snprintf(buf, len, "reb %" PRIu64 " %" PRIu64 " %" PRIu64, done, total, bytes);
        return n > 0 && (size_t)n < len ? (size_t)n : 0;
    }
    if (!pe->serving)
        return 0;
    size_t done, total;
    uint64_t bytes;
    recovery_progress(&pe->rec, &done, &total, &bytes);
    int n = snprintf(buf, len, "rec %d %zu %zu %" PRIu64, pe->serving_dp, done, total, bytes);
    return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

/* The senders whose links dropped (data processes, or a recovery process
 * carrying one's stream): the coordinator's evidence that one it has not
 * heard from since it started is dead. */
static int parity_lost_peers(struct engine *e, struct eng_lost_peer *out, int max)
{
    struct parity_engine *pe = pe_of(e);
    return pe->receiver ? repl_receiver_lost_peers(pe->receiver, out, max) : 0;
}

static int receiver_start(struct parity_engine *pe)
{
    int k = pe->state.k;
    struct repl_source **sources = calloc((size_t)k, sizeof(*sources));
    if (sources == NULL)
        return -1;
    for (int i = 0; i < k; i++)
        sources[i] = &pe->state.dps[i].src;
    struct repl_receiver_config cfg = {
        .base = pe->base,
        .sender_role = LINK_ROLE_DATA,
        .nsources = k,
        .sources = sources,
        .tag = "dp",
        .noun = "data process",
        .wrong_role = "a parity process takes links from data processes only",
        .no_such = "no such data process in this coding group",
        .verbose = pe->verbose != 0,
        .hooks = { .apply = hook_apply, .log = hook_log, .message = hook_message,
                   .resolve = hook_resolve },
        .owner = pe,
    };
    pe->receiver = repl_receiver_new(&cfg);
    free(sources);
    return pe->receiver != NULL ? 0 : -1;
}

/* The cluster's view of this process, or NULL after a message. */
static const struct cluster_proc *own_proc(const struct engine_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    if (c == NULL || c->scheme != SCHEME_RS) {
        fprintf(stderr, "cocytus-server: the parity role needs a cluster file with scheme rs\n");
        return NULL;
    }
    const struct cluster_proc *me = cluster_find(c, cfg->group, ROLE_PARITY, cfg->index);
    if (me == NULL)
        fprintf(stderr, "cocytus-server: the cluster has no parity process %d in group %d\n",
                cfg->index, cfg->group);
    return me;
}

static int start_listener(struct parity_engine *pe, const struct cluster *c,
                          const struct cluster_proc *me)
{
    pe->listener = link_listen(pe->base, me->host, me->link_port, c->name,
                               (uint32_t)pe->group, c->secret, repl_receiver_accept,
                               pe->receiver);
    if (pe->listener == NULL) {
        pe_log(pe, "cannot listen for data processes on %s:%d", me->host, me->link_port);
        return -1;
    }
    link_listener_set_sendq(pe->listener, pe->cfg.sq);
    link_listener_set_tls(pe->listener, c->link_tls);
    pe_log(pe, "RS(%d,%d), region %" PRIu64 " bytes, waiting for data processes on %s:%d",
           c->k, c->n, pe->state.region_size, me->host, link_listener_port(pe->listener));
    return 0;
}

struct engine *engine_parity_new(const struct engine_config *cfg)
{
    const struct cluster_proc *me = own_proc(cfg);
    if (me == NULL)
        return NULL;
    const struct cluster *c = cfg->cluster;
    struct parity_engine *pe = calloc(1, sizeof(*pe));
    if (pe == NULL)
        return NULL;
    pe->base = cfg->base;
    pe->cfg = *cfg;
    pe->group = cfg->group;
    pe->index = cfg->index;
    pe->verbose = cfg->verbose;
    pe->engine.ops = &parity_ops;
    pe->engine.priv = pe;
    pe->serving_dp = -1;
    pe->test_takeover_fail = takeover_faults_from_env(&pe->test_build_faults);
    pe->test_refuse_meta = getenv("COCYTUS_TEST_COPY_META_REFUSE") != NULL;
    if (c->k > RECOV_MAX_K || c->n - c->k > RECOV_MAX_M) {
        pe_log(pe, "RS(%d,%d) is larger than recovery supports (%d data, %d parity)", c->k, c->n,
               RECOV_MAX_K, RECOV_MAX_M);
        free(pe);
        return NULL;
    }
    group_view_init(&pe->view, c->k, c->n - c->k);
    pe->confirmed = pe->view;
    for (int i = 0; i < RECOV_MAX_K; i++) {
        pe->hold_at[i] = UINT64_MAX;
        pe->fenced_pp[i] = -1;
    }
    char err[256];
    if (parity_init(&pe->state, c->k, c->n, cfg->index, c->region_size, cfg->hashpower,
                    err, sizeof(err)) != 0) {
        pe_log(pe, "%s", err);
        free(pe);
        return NULL;
    }
    pe->prepare_timer = evtimer_new(cfg->base, on_prepare_timer, pe);
    if (!pe->prepare_timer || recovery_start(pe) != 0 || receiver_start(pe) != 0 ||
        start_listener(pe, c, me) != 0) {
        parity_destroy_engine(&pe->engine);
        return NULL;
    }
    return &pe->engine;
}
