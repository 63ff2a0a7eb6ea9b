/* sender.c - the sending side of replication (see sender.h).
 *
 * Records live in one xid-ordered log from the moment they are sent until
 * they are both stable (every peer acknowledged: a reconnecting peer may
 * still need them) and committed (taken effect locally).  Acks are
 * cumulative per peer, since a link delivers in order; the stable xid is
 * their minimum.  Committing walks the log from the last committed xid,
 * decoding each record for the owner's commit callback, then answers the
 * completions of those records in xid order. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "crc32c.h"
#include "frame.h"
#include "sender.h"

/* Idle time before a lone STABLE frame.  A STABLE frame costs every peer a
 * wakeup for no new record, so it should only go when writes really stop:
 * with 1 ms, a data process at 95% gets (a record every ~1-3 ms) sent one
 * after a fifth of its records.  Until it arrives peers merely apply later
 * (recovery applies up to the stable xid it settles on anyway). */
#define SENDER_STABLE_IDLE_USEC 10000

struct sender_completion {
    struct sender_completion *next;
    uint64_t xid;
    eng_done_fn done;
    void *cookie;
    struct eng_result res;
};

static void sender_log(const struct sender *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sender_log(const struct sender *s, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", s->who);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int sender_live_peers(const struct sender *s);
static void on_alone_timer(evutil_socket_t fd, short what, void *arg);

static void put_u64le(uint8_t out[8], uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void fatal_oom(const struct sender *s, const char *what, uint64_t xid)
{
    sender_log(s, "out of memory %s (xid %" PRIu64 ")", what, xid);
    abort();
}

/* One frame to every live peer; its CRC is computed once for all links. */
static void send_all(struct sender *s, uint16_t type, const void *p, uint32_t len)
{
    uint32_t crc = crc32c(0, p, len);
    for (int j = 0; j < s->npeers; j++) {
        if (!s->peers[j].dropped && s->peers[j].link && link_is_up(s->peers[j].link))
            link_send_crc(s->peers[j].link, type, p, len, crc);
    }
}

static void send_stable(struct sender *s, struct link *only)
{
    uint8_t buf[8];
    put_u64le(buf, s->stable);
    if (only) {
        /* One link (just up): the others may still wait for this xid. */
        link_send(only, FT_STABLE, buf, sizeof(buf));
        return;
    }
    send_all(s, FT_STABLE, buf, sizeof(buf));
    s->stable_dirty = false;
    s->stable_frames++;
}

static void on_stable_timer(evutil_socket_t fd, short what, void *arg)
{
    struct sender *s = arg;
    if (s->stable_dirty)
        send_stable(s, NULL);
}

static void arm_stable_timer(struct sender *s)
{
    struct timeval tv = { 0, SENDER_STABLE_IDLE_USEC };
    s->stable_dirty = true;
    event_add(s->stable_timer, &tv);
}

/* ---- commit ---- */

struct commit_walk {
    struct sender *s;
    uint64_t upto;
};

static void commit_one(void *ctx, const struct reclog_entry *e)
{
    struct commit_walk *w = ctx;
    struct sender *s = w->s;
    if (e->xid > w->upto)
        return;
    uint32_t nops = rec_peek_nops(e->bytes, e->len);
    if (nops > s->ops_cap) {
        struct rec_op *n = realloc(s->ops, nops * sizeof(*n));
        if (!n)
            fatal_oom(s, "decoding a record to commit", e->xid);
        s->ops = n;
        s->ops_cap = nops;
    }
    struct record r;
    if (rec_decode(e->bytes, e->len, &r, s->ops, s->ops_cap) < 0) {
        sender_log(s, "BUG: cannot decode our own record xid %" PRIu64, e->xid);
        abort();
    }
    s->cb->commit(s->ctx, &r);
}

/* Answer the completions of records <= upto, oldest first.  The list is
 * detached first: a completion may start new sends. */
static void run_completions(struct sender *s, uint64_t upto)
{
    struct sender_completion *done = s->comp_head, *last = NULL;
    for (struct sender_completion *c = s->comp_head; c && c->xid <= upto; c = c->next)
        last = c;
    if (!last)
        return;
    s->comp_head = last->next;
    if (!s->comp_head)
        s->comp_tail = NULL;
    last->next = NULL;
    while (done) {
        struct sender_completion *next = done->next;
        if (done->done)
            done->done(done->cookie, &done->res);
        free(done);
        done = next;
    }
}

static void drop_finished(struct sender *s)
{
    uint64_t keep_above = s->stable < s->committed ? s->stable : s->committed;
    reclog_drop_upto(&s->log, keep_above);
}

/* Take effect locally up to xid, answer those clients, let the owner retry. */
static void commit_upto(struct sender *s, uint64_t upto)
{
    if (upto > s->xid)
        upto = s->xid;
    if (upto <= s->committed)
        return;
    struct commit_walk w = { s, upto };
    reclog_visit_after(&s->log, s->committed, commit_one, &w);
    s->committed = upto;
    drop_finished(s);
    run_completions(s, upto);
    if (s->cb->after_commit)
        s->cb->after_commit(s->ctx);
}

static uint64_t min_over_peers(const struct sender *s, bool written)
{
    uint64_t m = UINT64_MAX;
    for (int j = 0; j < s->npeers; j++) {
        if (s->peers[j].dropped || s->peers[j].rebuilding)
            continue;
        uint64_t v = written ? s->peers[j].written : s->peers[j].acked;
        if (v < m)
            m = v;
    }
    return m > s->xid ? s->xid : m;
}

static void advance_stable(struct sender *s)
{
    uint64_t st = min_over_peers(s, false);
    if (st > s->stable) {
        s->stable = st;
        arm_stable_timer(s);
        if (s->sync == SENDER_SYNC_FULL)
            commit_upto(s, st);
        else if (s->sync == SENDER_SYNC_SEMI)
            commit_upto(s, min_over_peers(s, true));   /* no peer left: everything */
        drop_finished(s);
    }
}

/* With no peer left in the ack set a record is stable as soon as it is
 * sent; commit it from the loop (never inside the owner's call).  The same
 * when the ack set changes without an ack: a stream continued with records
 * above its stable xid (a promoted backup) and no peer yet, or a rebuilt
 * peer back in the set; without it the stable xid waited for the next
 * write (a group idle after a failover stayed "not quiescent"). */
static void recheck_stable_soon(struct sender *s)
{
    static const struct timeval now = { 0, 0 };
    evtimer_add(s->alone_timer, &now);
}

static void on_alone_timer(evutil_socket_t fd, short what, void *arg)
{
    advance_stable(arg);
}

/* ---- peers ---- */

static void fail_all(struct sender *s)
{
    sender_fail_waiting(s, "process restarted without its state");
    if (s->cb->refused)
        s->cb->refused(s->ctx);
}

struct resend_ctx {
    struct sender_peer *peer;
};

static void resend_one(void *ctx, const struct reclog_entry *e)
{
    struct resend_ctx *rc = ctx;
    link_send(rc->peer->link, FT_RECORD, e->bytes, e->len);
}

static void peer_up(struct link *l, uint64_t peer_xid, void *ctx)
{
    struct sender_peer *p = ctx;
    struct sender *s = p->s;
    p->lost = false;
    if (s->verbose)
        sender_log(s, "link to peer %d up (it holds xid %" PRIu64 ")", p->index, peer_xid);
    if (p->rebuilding) {
        if (s->verbose)
            sender_log(s, "rebuilding peer %d up at xid %" PRIu64 " (it holds %" PRIu64 ")",
                       p->index, s->xid, peer_xid);
        p->acked = p->written = s->xid;
        if (s->cb->rebuilding_up)
            s->cb->rebuilding_up(s->ctx, p->index, peer_xid);
        return;
    }
    if (peer_xid > s->xid) {
        /* We lost our state but the group remembers later records: new
         * records would reuse xids the peers take for duplicates. */
        if (!s->refusing)
            sender_log(s, "peer %d holds xid %" PRIu64 " beyond our last (%" PRIu64 "): this "
                       "process restarted without its state; refusing writes until it is "
                       "recovered", p->index, peer_xid, s->xid);
        s->refusing = true;
        fail_all(s);
        return;
    }
    bool joining = p->joining;
    if (joining) {
        /* A rebuild: the peer holds nothing yet; the owner sends the state
         * up to p->acked, then the records after it follow. */
        if (s->cb->joined)
            s->cb->joined(s->ctx, p->role, p->index);
        if (p->dropped || !p->link)
            return;
        peer_xid = p->acked;
    } else if (peer_xid < s->stable) {
        sender_log(s, "peer %d restarted without state (holds xid %" PRIu64 ", stable %" PRIu64
                   "): it needs a rebuild", p->index, peer_xid, s->stable);
    }
    if (peer_xid > p->acked)
        p->acked = peer_xid;
    struct resend_ctx rc = { p };
    reclog_visit_after(&s->log, peer_xid, resend_one, &rc);
    /* Tell it how far it may apply without waiting for the next record. */
    send_stable(s, l);
    advance_stable(s);
    /* A peer being rebuilt holds nothing yet: it tells nothing of ours. */
    if (s->cb->peer_up && !s->refusing && !joining)
        s->cb->peer_up(s->ctx, p->index);
}

static void peer_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len,
                       void *ctx)
{
    struct sender_peer *p = ctx;
    struct sender *s = p->s;
    if ((type == FT_REQUEST || type == FT_REPLY) && s->cb->message) {
        s->cb->message(s->ctx, p->index, type, payload, len);
        return;
    }
    if (type == FT_PING)
        return;     /* the link's keepalive: it is the arrival that counts */
    if (type != FT_ACK || len < 8) {
        if (s->verbose)
            sender_log(s, "ignoring frame type %u from peer %d", type, p->index);
        return;
    }
    uint64_t xid = get_u64le(payload);
    if (xid > s->xid) {
        sender_log(s, "peer %d acknowledged xid %" PRIu64 " beyond the last sent (%" PRIu64 ")",
                   p->index, xid, s->xid);
        return;
    }
    if (xid > p->acked) {
        p->acked = xid;
        if (!p->rebuilding)
            advance_stable(s);
    }
}

/* The owner hears of a lease that may be held again from the loop, after
 * the link or sender call that renewed it. */
static void lease_may_hold(struct sender *s)
{
    if (s->lease_ev != NULL)
        event_active(s->lease_ev, 0, 0);
}

static void on_lease_ev(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sender *s = arg;
    s->cb->lease(s->ctx);
}

/* Whose answers make the read lease (sender_lease_held): a peer of the
 * sender's peer role in the ack set. */
static bool lease_counts(const struct sender_peer *p)
{
    return !p->dropped && !p->joining && !p->rebuilding && p->role == p->s->peer_role;
}

/* A PONG from p: only a peer whose lease counts can make one held. */
static void peer_lease(struct link *l, void *ctx)
{
    struct sender_peer *p = ctx;
    (void)l;
    if (lease_counts(p))
        lease_may_hold(p->s);
}

/* SEMI: everything queued on this link so far reached the kernel. */
static void peer_drained(struct link *l, void *ctx)
{
    struct sender_peer *p = ctx;
    struct sender *s = p->s;
    if (s->sync != SENDER_SYNC_SEMI || p->written >= s->xid)
        return;
    p->written = s->xid;
    if (p->rebuilding)
        return;
    commit_upto(s, min_over_peers(s, true));
}

static void peer_down(struct link *l, const char *why, void *ctx)
{
    struct sender_peer *p = ctx;
    struct sender *s = p->s;
    sender_log(s, "link to %s %d down: %s", cluster_role_name(p->role), p->index, why);
    p->lost = true;
    if (!p->joining || p->dropped)
        return;
    /* A rebuild cannot continue on a new link: what was sent is lost. */
    enum cluster_role role = p->role;
    int index = p->index;
    sender_drop_peer_role(s, role, index);
    if (s->cb->join_failed)
        s->cb->join_failed(s->ctx, role, index, why);
}

/* ---- public ---- */

/* The link to peer p at host:link_port, its output going through the
 * sender's batched writes (sender_config.sq); NULL if it cannot start. */
static struct link *connect_peer(struct sender *s, struct sender_peer *p, const char *host,
                                 int link_port)
{
    static const struct link_callbacks link_cb = {
        .on_up = peer_up, .on_frame = peer_frame, .on_down = peer_down,
        .on_drained = peer_drained, .on_lease = peer_lease,
    };
    struct link *l = link_connect(s->base, host, link_port, &s->me, s->cluster->secret,
                                  &link_cb, p);
    if (l) {
        link_set_sendq(l, s->sq);
        link_set_tls(l, s->cluster->link_tls);
        link_set_keepalive(l, LINK_PING_MS);
    }
    return l;
}

int sender_init(struct sender *s, const struct sender_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    int npeers = cfg->npeers;
    memset(s, 0, sizeof(*s));
    s->base = cfg->base;
    s->cb = cfg->cb;
    s->ctx = cfg->ctx;
    s->sync = cfg->sync;
    s->npeers = npeers;
    s->cluster = c;
    s->group = cfg->group;
    s->peer_role = cfg->peer_role;
    s->verbose = cfg->verbose;
    s->sq = cfg->sq;
    snprintf(s->who, sizeof(s->who), "%s", cfg->who);
    reclog_init(&s->log);
    /* No peer at all is allowed: a recovery process whose group has no
     * other parity process left replicates to nobody (no redundancy). */
    if (npeers < 0 || npeers > SENDER_MAX_PEERS) {
        sender_log(s, "%d peers: must be 0..%d", npeers, SENDER_MAX_PEERS);
        return -1;
    }
    s->stable_timer = evtimer_new(cfg->base, on_stable_timer, s);
    s->alone_timer = evtimer_new(cfg->base, on_alone_timer, s);
    if (!s->stable_timer || !s->alone_timer)
        return -1;
    if (cfg->cb->lease != NULL && !(s->lease_ev = event_new(cfg->base, -1, 0, on_lease_ev, s)))
        return -1;
    struct link_identity me;
    memset(&me, 0, sizeof(me));
    snprintf(me.cluster, sizeof(me.cluster), "%s", c->name);
    me.group = (uint32_t)cfg->group;
    me.role = (uint8_t)cfg->my_role;
    me.index = (uint32_t)cfg->my_index;
    s->me = me;
    for (int j = 0; j < npeers; j++) {
        int index = cfg->peers ? cfg->peers[j] : j;
        const struct cluster_proc *pp = cluster_find(c, cfg->group, cfg->peer_role, index);
        if (!pp) {
            sender_log(s, "the cluster file has no %s %d in group %d",
                       cluster_role_name(cfg->peer_role), index, cfg->group);
            return -1;
        }
        s->peers[j].s = s;
        s->peers[j].index = index;
        s->peers[j].role = cfg->peer_role;
        s->peers[j].link = connect_peer(s, &s->peers[j], pp->host, pp->link_port);
        if (!s->peers[j].link) {
            sender_log(s, "cannot start a link to %s %d at %s:%d",
                       cluster_role_name(cfg->peer_role), index, pp->host, pp->link_port);
            return -1;
        }
    }
    return 0;
}

void sender_destroy(struct sender *s)
{
    for (int j = 0; j < s->npeers; j++)
        if (s->peers[j].link)
            link_close(s->peers[j].link);
    if (s->stable_timer)
        event_free(s->stable_timer);
    if (s->alone_timer)
        event_free(s->alone_timer);
    if (s->lease_ev)
        event_free(s->lease_ev);
    while (s->comp_head) {
        struct sender_completion *c = s->comp_head;
        s->comp_head = c->next;
        free(c);
    }
    reclog_destroy(&s->log);
    free(s->enc);
    free(s->ops);
    memset(s, 0, sizeof(*s));
}

static void push_completion(struct sender *s, uint64_t xid, eng_done_fn done, void *cookie,
                            const struct eng_result *res)
{
    struct sender_completion *c = malloc(sizeof(*c));
    if (!c)
        fatal_oom(s, "queueing a completion", xid);
    c->next = NULL;
    c->xid = xid;
    c->done = done;
    c->cookie = cookie;
    if (res)
        c->res = *res;
    else
        memset(&c->res, 0, sizeof(c->res));
    if (s->comp_tail)
        s->comp_tail->next = c;
    else
        s->comp_head = c;
    s->comp_tail = c;
}

uint64_t sender_send(struct sender *s, uint32_t nops, const struct rec_op *ops,
                     uint64_t data_off, const uint8_t *data, uint32_t len,
                     eng_done_fn done, void *cookie, const struct eng_result *res)
{
    struct record r = {
        .xid = ++s->xid,
        .stable_xid = s->stable,
        .nops = nops,
        .ops = (struct rec_op *)ops,
        .data_off = data_off,
        .data_len = len,
        .data = data,
    };
    size_t size = rec_encoded_size(&r);
    if (size > s->enc_cap) {
        uint8_t *n = realloc(s->enc, size);
        if (!n)
            fatal_oom(s, "encoding a record", r.xid);
        s->enc = n;
        s->enc_cap = size;
    }
    rec_encode(&r, s->enc);
    if (reclog_push(&s->log, r.xid, s->enc, size) < 0)
        fatal_oom(s, "logging a record", r.xid);
    send_all(s, FT_RECORD, s->enc, (uint32_t)size);
    s->stable_dirty = false;
    s->records_sent++;
    if (s->sync == SENDER_SYNC_ASYNC) {
        /* Reply first, replicate after: it takes effect now. */
        s->cb->commit(s->ctx, &r);
        s->committed = r.xid;
        drop_finished(s);
        return r.xid;
    }
    push_completion(s, r.xid, done, cookie, res);
    if (sender_live_peers(s) == 0)
        recheck_stable_soon(s);
    return r.xid;
}

void sender_start_at(struct sender *s, uint64_t xid)
{
    s->xid = s->stable = s->committed = xid;
    for (int j = 0; j < s->npeers; j++)
        s->peers[j].acked = s->peers[j].written = xid;
}

static struct sender_peer *peer_of(struct sender *s, enum cluster_role role, int index)
{
    for (int j = 0; j < s->npeers; j++)
        if (s->peers[j].index == index && s->peers[j].role == role)
            return &s->peers[j];
    return NULL;
}

static struct sender_peer *peer_by_index(struct sender *s, int index)
{
    return peer_of(s, s->peer_role, index);
}

bool sender_has_peer(const struct sender *s, int index)
{
    struct sender_peer *p = peer_by_index((struct sender *)s, index);
    return p && !p->dropped;
}

/* The read lease this process holds from its whole ack set (link.h): the
 * oldest of the latest clocks each peer of the sender's peer role answered
 * (0 if one never answered or we dropped its link), or UINT64_MAX with no
 * such peer (nobody could take our keys over). */
static uint64_t lease_stamp_ms(const struct sender *s)
{
    uint64_t least = UINT64_MAX;
    for (int j = 0; j < s->npeers; j++) {
        const struct sender_peer *p = &s->peers[j];
        if (!lease_counts(p))
            continue;
        uint64_t stamp = p->link ? link_lease_stamp_ms(p->link) : 0;
        if (stamp < least)
            least = stamp;
    }
    return least;
}

bool sender_lease_held(const struct sender *s)
{
    uint64_t stamp = lease_stamp_ms(s);
    return stamp == UINT64_MAX || (stamp && link_now_ms() < stamp + LINK_READ_LEASE_MS);
}

int sender_live_peers(const struct sender *s)
{
    int n = 0;
    for (int j = 0; j < s->npeers; j++)
        n += !s->peers[j].dropped && !s->peers[j].rebuilding;
    return n;
}

struct carry_walk {
    struct sender *s;
    uint64_t from;
    int rc;
};

static void carry_one(void *ctx, const struct reclog_entry *e)
{
    struct carry_walk *w = ctx;
    if (w->rc == 0 && e->xid > w->from && e->xid > w->s->log.last_xid)
        w->rc = reclog_push(&w->s->log, e->xid, e->bytes, e->len);
}

int sender_continue(struct sender *s, uint64_t from, const struct reclog *carry)
{
    sender_start_at(s, from);
    struct carry_walk w = { s, from, 0 };
    reclog_visit_after(carry, from, carry_one, &w);
    if (w.rc != 0)
        return -1;
    uint64_t last = s->log.last_xid > from ? s->log.last_xid : from;
    s->xid = s->committed = last;
    if (last > s->stable)
        recheck_stable_soon(s);
    return 0;
}

static struct sender_peer *peer_slot_for(struct sender *s, int index)
{
    for (int j = 0; j < s->npeers; j++)
        if (s->peers[j].index == index && s->peers[j].role == s->peer_role)
            return s->peers[j].dropped ? &s->peers[j] : NULL;
    if (s->npeers >= SENDER_MAX_PEERS)
        return NULL;
    return &s->peers[s->npeers++];
}

int sender_add_peer_at(struct sender *s, int index, const char *host, int link_port,
                       bool rebuilding)
{
    struct sender_peer *p = peer_slot_for(s, index);
    if (!p)
        return -1;
    memset(p, 0, sizeof(*p));
    p->s = s;
    p->index = index;
    p->role = s->peer_role;
    p->rebuilding = rebuilding;
    p->acked = p->written = rebuilding ? s->xid : s->stable;
    p->link = connect_peer(s, p, host, link_port);
    if (!p->link) {
        p->dropped = true;
        sender_log(s, "cannot start a link to peer %d at %s:%d", index, host, link_port);
        return -1;
    }
    if (rebuilding)
        sender_log(s, "peer %d at %s:%d joins at xid %" PRIu64 " (out of the ack set until it "
                   "is rebuilt)", index, host, link_port, s->xid);
    return 0;
}

void sender_peer_complete(struct sender *s, int index)
{
    struct sender_peer *p = peer_by_index(s, index);
    if (!p || p->dropped || !p->rebuilding)
        return;
    p->rebuilding = false;
    /* A SEMI peer counts as written up to what its link has drained. */
    if (p->link && link_output_pending(p->link) == 0)
        p->written = s->xid;
    sender_log(s, "peer %d is complete: back in the ack set (%d of %d peers)", index,
               sender_live_peers(s), s->npeers);
    recheck_stable_soon(s);
}

bool sender_peer_rebuilding(const struct sender *s, int index)
{
    struct sender_peer *p = peer_by_index((struct sender *)s, index);
    return p && !p->dropped && p->rebuilding;
}

void sender_drop_peer(struct sender *s, int index)
{
    sender_drop_peer_role(s, s->peer_role, index);
}

void sender_drop_peer_role(struct sender *s, enum cluster_role role, int index)
{
    struct sender_peer *p = peer_of(s, role, index);
    if (!p || p->dropped)
        return;
    p->dropped = true;
    p->lost = false;
    if (p->link) {
        link_close(p->link);
        p->link = NULL;
    }
    sender_log(s, "peer %d declared dead: left out of the ack set (%d of %d peers remain)",
               index, sender_live_peers(s), s->npeers);
    if (s->sync == SENDER_SYNC_SEMI)
        commit_upto(s, min_over_peers(s, true));
    advance_stable(s);
    lease_may_hold(s);   /* its lease no longer counts */
}

int sender_add_peer(struct sender *s, enum cluster_role role, int index)
{
    struct sender_peer *p = peer_of(s, role, index);
    if (p && !p->dropped)
        return -1;
    if (!p) {
        if (s->npeers >= SENDER_MAX_PEERS)
            return -1;
        p = &s->peers[s->npeers++];
        memset(p, 0, sizeof(*p));
        p->s = s;
        p->index = index;
        p->role = role;
    }
    const struct cluster_proc *pp = s->cluster ? cluster_find(s->cluster, s->group, role, index)
                                               : NULL;
    if (!pp)
        return -1;
    p->dropped = false;
    p->joining = true;
    p->acked = p->written = s->xid;
    p->link = connect_peer(s, p, pp->host, pp->link_port);
    if (!p->link) {
        p->dropped = true;
        return -1;
    }
    sender_log(s, "%s %d joins the ack set at xid %" PRIu64 " (%d of %d peers live)",
               cluster_role_name(role), index, s->xid, sender_live_peers(s), s->npeers);
    return 0;
}

void sender_peer_settled(struct sender *s, enum cluster_role role, int index)
{
    struct sender_peer *p = peer_of(s, role, index);
    if (p)
        p->joining = false;
}

bool sender_peer_up(const struct sender *s, int index)
{
    struct sender_peer *p = peer_by_index((struct sender *)s, index);
    return p && !p->dropped && p->link && link_is_up(p->link);
}

int sender_lost_peers(const struct sender *s, struct eng_lost_peer *out, int max)
{
    uint64_t now = link_now_ms();
    int n = 0;
    for (int j = 0; j < s->npeers && n < max; j++) {
        const struct sender_peer *p = &s->peers[j];
        if (p->dropped)
            continue;
        uint64_t down = 0;
        bool up = false;
        if (p->link && link_is_up(p->link)) {
            /* Up, but silent past several keepalives: gone without closing
             * its socket (a crashed host), cut off, or paused. */
            uint64_t silent = link_silent_ms(p->link, now);
            if (silent >= LINK_SILENT_MS)
                down = silent;
            up = true;
        } else if (p->lost && p->link) {
            /* Silent since it last sent anything: before the drop (a link
             * that timed out was silent long before), or an answer to a
             * redial (one that refuses us answers every redial, so it
             * never looks silent long). */
            uint64_t heard = link_last_heard_ms(p->link);
            if (heard != 0 && now > heard)
                down = now - heard;
        }
        if (down == 0)
            continue;
        out[n++] = (struct eng_lost_peer){ .role = (int)p->role, .index = p->index,
                                           .down_ms = down, .link_up = up };
    }
    return n;
}

size_t sender_peer_queued(const struct sender *s, int index)
{
    struct sender_peer *p = peer_by_index((struct sender *)s, index);
    return p && p->link ? link_output_pending(p->link) : 0;
}

void sender_fail_waiting(struct sender *s, const char *msg)
{
    struct eng_result res = { .status = ENG_FAILED, .msg = msg };
    struct sender_completion *c = s->comp_head;
    s->comp_head = s->comp_tail = NULL;
    while (c) {
        struct sender_completion *next = c->next;
        if (c->done)
            c->done(c->cookie, &res);
        free(c);
        c = next;
    }
}

int sender_sendv_to(struct sender *s, int index, uint16_t type, const struct iovec *iov,
                    int iovcnt)
{
    return sender_sendv_to_role(s, s->peer_role, index, type, iov, iovcnt);
}

int sender_sendv_to_role(struct sender *s, enum cluster_role role, int index, uint16_t type,
                         const struct iovec *iov, int iovcnt)
{
    struct sender_peer *p = peer_of(s, role, index);
    if (!p || p->dropped || !p->link || !link_is_up(p->link))
        return -1;
    return link_sendv(p->link, type, iov, iovcnt);
}

void sender_info(const struct sender *s, eng_write_fn write, void *ctx)
{
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "STAT xid %" PRIu64 "\r\nSTAT stable_xid %" PRIu64 "\r\nSTAT committed_xid %"
                     PRIu64 "\r\nSTAT records_sent %" PRIu64 "\r\nSTAT stable_frames %" PRIu64
                     "\r\n", s->xid, s->stable, s->committed, s->records_sent, s->stable_frames);
    write(ctx, line, (size_t)n);
    for (int j = 0; j < s->npeers; j++) {
        const struct sender_peer *p = &s->peers[j];
        n = snprintf(line, sizeof(line), "STAT peer%d_acked %" PRIu64 "\r\nSTAT peer%d_link %s%s\r\n",
                     p->index, p->acked, p->index,
                     p->dropped ? "dead" : p->link && link_is_up(p->link) ? "up" : "down",
                     !p->dropped && p->rebuilding ? " rebuilding" : "");
        write(ctx, line, (size_t)n);
    }
}

