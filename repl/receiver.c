/* receiver.c - the receiving end of replication (receiver.h), for parity
 * processes and backups alike.
 *
 * A repl_source is a record log plus three xids: received (newest record
 * held), stable (newest the sender declared stable) and applied.  Receive
 * only checks and buffers; apply walks the log up to the stable xid and
 * hands each record to the role's function, so nothing reaches a replica
 * before it is stable.  Every check that fails writes a reason into the
 * source and makes it refuse everything after.
 *
 * A repl_receiver keeps one peer per source: its current link, a timer that
 * closes the link outside the link's own callbacks, counters and the text of
 * the last REJECT.  Records are acknowledged as soon as they are buffered,
 * with one cumulative ACK for every read batch of the link (all the records
 * one recv() brought), not one per record: a data process needs only the
 * newest xid, and a batch of acks costs the same send() and wakeup as one;
 * the stable xid a record carries, or a STABLE frame, triggers application
 * through the owner's apply hook. */
#include "receiver.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "frame.h"

#define REJECT_MAX (REPL_WHY_MAX + 64)
#define LOG_LINE_MAX 512

/* ==== one sender's stream ==== */

void repl_source_init(struct repl_source *s)
{
    memset(s, 0, sizeof(*s));
    reclog_init(&s->buffer);
}

void repl_source_reset(struct repl_source *s, uint64_t xid)
{
    reclog_destroy(&s->buffer);
    reclog_init(&s->buffer);
    s->received_xid = s->applied_xid = s->stable_xid = xid;
    s->diverged = false;
    s->awaiting_start = false;
    s->start_drop_logged = false;
    s->why[0] = '\0';
}

void repl_source_await_start(struct repl_source *s)
{
    repl_source_reset(s, 0);
    s->awaiting_start = true;
}

void repl_source_destroy(struct repl_source *s)
{
    reclog_destroy(&s->buffer);
    free(s->ops);
    memset(s, 0, sizeof(*s));
}

int repl_source_mark_diverged(struct repl_source *s, uint64_t xid, const char *fmt, ...)
{
    int n = snprintf(s->why, sizeof(s->why), "xid %" PRIu64 ": ", xid);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why + n, sizeof(s->why) - (size_t)n, fmt, ap);
    va_end(ap);
    s->diverged = true;
    return -1;
}

/* ---- receive ---- */

static bool ops_reserve(struct repl_source *s, uint32_t nops)
{
    if (nops <= s->ops_cap && s->ops != NULL)
        return true;
    uint32_t cap = nops > 16 ? nops : 16;
    struct rec_op *ops = realloc(s->ops, (size_t)cap * sizeof(*ops));
    if (ops == NULL)
        return false;
    s->ops = ops;
    s->ops_cap = cap;
    return true;
}

/* Decode into s's scratch ops.  0, -1 if malformed, -2 if out of memory. */
static int record_decode(struct repl_source *s, const uint8_t *rec, size_t len,
                         struct record *r)
{
    uint32_t nops = rec_peek_nops(rec, len);
    if (nops > len)   /* every op takes at least one byte */
        return -1;
    if (!ops_reserve(s, nops))
        return -2;
    return rec_decode(rec, len, r, s->ops, s->ops_cap) == 0 ? 0 : -1;
}

/* Is r the record that comes next?  Marks s diverged if not. */
static bool in_sequence(struct repl_source *s, const struct record *r)
{
    if (r->xid != s->received_xid + 1) {
        repl_source_mark_diverged(s, r->xid, "records %" PRIu64 "..%" PRIu64 " are missing",
                                  s->received_xid + 1, r->xid - 1);
        return false;
    }
    if (r->stable_xid >= r->xid) {
        repl_source_mark_diverged(s, r->xid, "claims stable xid %" PRIu64
                                  ", not below its own", r->stable_xid);
        return false;
    }
    return true;
}

enum repl_rx repl_source_receive(struct repl_source *s, const uint8_t *rec, size_t len,
                                 uint64_t *stable)
{
    struct record r;
    *stable = 0;
    if (s->diverged)
        return REPL_RX_REFUSED;
    int rc = record_decode(s, rec, len, &r);
    if (rc == -2)
        return REPL_RX_FAILED;
    if (rc != 0) {
        repl_source_mark_diverged(s, s->received_xid + 1, "malformed record of %zu bytes", len);
        return REPL_RX_REFUSED;
    }
    if (r.xid <= s->received_xid)
        return REPL_RX_DUPLICATE;
    if (!in_sequence(s, &r))
        return REPL_RX_REFUSED;
    if (reclog_push(&s->buffer, r.xid, rec, len) != 0)
        return REPL_RX_FAILED;
    s->received_xid = r.xid;
    *stable = r.stable_xid;
    return REPL_RX_BUFFERED;
}

/* ---- apply ---- */

struct apply_walk {
    struct repl_source *s;
    repl_apply_fn fn;
    void *ctx;
};

static int apply_one(void *arg, const struct record *r)
{
    struct apply_walk *w = arg;
    struct repl_source *s = w->s;
    if (r->xid != s->applied_xid + 1)
        return repl_source_mark_diverged(s, r->xid, "applied out of order after %" PRIu64,
                                         s->applied_xid);
    if (w->fn(w->ctx, r) != 0) {
        if (!s->diverged)
            repl_source_mark_diverged(s, r->xid, "could not be applied");
        return -1;
    }
    s->applied_xid = r->xid;
    return 0;
}

int repl_source_apply(struct repl_source *s, uint64_t stable, repl_apply_fn fn, void *ctx)
{
    if (s->diverged)
        return -1;
    if (stable > s->received_xid)
        return repl_source_mark_diverged(s, stable, "declared stable but only %" PRIu64
                                         " was received", s->received_xid);
    if (stable > s->stable_xid)
        s->stable_xid = stable;
    if (stable <= s->applied_xid)
        return 0;
    struct apply_walk w = { .s = s, .fn = fn, .ctx = ctx };
    if (reclog_apply(&s->buffer, stable, apply_one, &w) == 0)
        return 0;
    if (!s->diverged)   /* apply_one diverges on its own failures: this one is reclog's */
        repl_source_mark_diverged(s, s->applied_xid + 1, "buffered record could not be decoded");
    return -1;
}

int repl_source_truncate_after(struct repl_source *s, uint64_t xid)
{
    if (xid < s->applied_xid)
        return -1;
    reclog_truncate_after(&s->buffer, xid);
    if (s->received_xid > xid)
        s->received_xid = xid;
    if (s->stable_xid > xid)
        s->stable_xid = xid;
    return 0;
}

/* ==== sources on links ==== */

/* The link side of one source. */
struct peer {
    struct repl_receiver *rx;
    int index;
    struct repl_source *src;
    struct link *link;            /* current link, NULL when down */
    struct event *close_ev;       /* drops the link outside its callbacks */
    bool divergence_logged;
    bool fenced;                  /* refused: closed and rejected (recovery) */
    char fence_why[REJECT_MAX];
    uint64_t records;
    uint64_t duplicates;
    uint64_t before_start;        /* frames dropped awaiting the stream's start */
    uint64_t acks;                /* ACK frames sent */
    bool ack_due;                 /* records taken in this read batch: ACK at its end */
    bool lost;                    /* its link dropped by itself and is not back
                                   * (not: never up, closed by us) */
    uint64_t lost_at_ms;          /* since when nothing came on it, link_now_ms() */
    struct link_identity lost_peer;   /* who was on that link */
    char reject[REJECT_MAX];      /* the last REJECT reason, kept for link.c */
    /* When the sender's latest clock arrived on a connection that we
     * closed or that went silent: a lease it may hold from us runs from
     * before then (repl_receiver_lease_end). */
    uint64_t stamp_kept_ms;
    uint64_t welcomed_xid;        /* the WELCOME's xid on the current link */
};

struct repl_receiver {
    struct repl_receiver_config cfg;
    struct peer *peers;           /* cfg.nsources of them */
};

__attribute__((format(printf, 2, 3)))
static void rx_log(const struct repl_receiver *rx, const char *fmt, ...)
{
    char line[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    rx->cfg.hooks.log(rx->cfg.owner, line);
}

static const char *peer_name(const struct peer *pr)
{
    return pr->link != NULL ? link_peer_name(pr->link) : "-";
}

/* ---- link life ---- */

/* The link of pr goes: what its sender may still hold from us is kept,
 * unless the sender closed it (its lease ended with it, link.h). */
static void keep_stamp(struct peer *pr, struct link *l)
{
    if (link_peer_closed(l))
        pr->stamp_kept_ms = 0;
    else if (link_peer_stamp_ms(l) > pr->stamp_kept_ms)
        pr->stamp_kept_ms = link_peer_stamp_ms(l);
}

static void close_now(evutil_socket_t fd, short what, void *arg)
{
    struct peer *pr = arg;
    if (pr->link == NULL)
        return;
    rx_log(pr->rx, "%s %d: closing the link to %s", pr->rx->cfg.tag, pr->index,
           peer_name(pr));
    keep_stamp(pr, pr->link);
    link_close(pr->link);
    pr->link = NULL;
}

/* link_close may not run inside the link's own callback: defer it. */
static void schedule_close(struct peer *pr)
{
    static const struct timeval now = { 0, 0 };
    evtimer_add(pr->close_ev, &now);
}

static void report_divergence(struct peer *pr)
{
    const struct repl_source *s = pr->src;
    if (!pr->divergence_logged) {
        rx_log(pr->rx, "DIVERGED: %s %d (peer %s) %s; applied xid %" PRIu64
               ", received xid %" PRIu64 "; refusing its records from now on",
               pr->rx->cfg.tag, pr->index, peer_name(pr), s->why, s->applied_xid,
               s->received_xid);
        pr->divergence_logged = true;
    }
    schedule_close(pr);
}

/* ---- frames ---- */

static void send_ack(struct peer *pr, uint64_t xid)
{
    uint8_t buf[8];
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(xid >> (8 * i));
    if (link_send(pr->link, FT_ACK, buf, sizeof(buf)) != 0) {
        if (pr->rx->cfg.verbose)
            rx_log(pr->rx, "%s %d: ack %" PRIu64 " not sent: link down", pr->rx->cfg.tag,
                   pr->index, xid);
        return;
    }
    pr->acks++;
}

static void apply_upto(struct peer *pr, uint64_t stable)
{
    const struct repl_receiver *rx = pr->rx;
    if (rx->cfg.hooks.apply(rx->cfg.owner, pr->index, stable) != 0)
        report_divergence(pr);
}

static void on_record(struct peer *pr, const uint8_t *payload, uint32_t len)
{
    uint64_t stable = 0;
    pr->records++;
    switch (repl_source_receive(pr->src, payload, len, &stable)) {
    case REPL_RX_BUFFERED:
        pr->ack_due = true;
        apply_upto(pr, stable);
        break;
    case REPL_RX_DUPLICATE:
        pr->duplicates++;
        pr->ack_due = true;
        break;
    case REPL_RX_REFUSED:
        report_divergence(pr);
        break;
    case REPL_RX_FAILED:
        rx_log(pr->rx, "%s %d (peer %s): out of memory buffering a record after xid %"
               PRIu64 "; dropping the link", pr->rx->cfg.tag, pr->index, peer_name(pr),
               pr->src->received_xid);
        schedule_close(pr);
        break;
    }
}

static bool read_u64(const uint8_t *p, uint32_t len, uint64_t *out)
{
    if (len != 8)
        return false;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    *out = v;
    return true;
}

static void on_stable(struct peer *pr, const uint8_t *payload, uint32_t len)
{
    uint64_t stable;
    if (!read_u64(payload, len, &stable)) {
        rx_log(pr->rx, "%s %d (peer %s): STABLE frame of %" PRIu32
               " bytes; dropping the link", pr->rx->cfg.tag, pr->index, peer_name(pr), len);
        schedule_close(pr);
        return;
    }
    apply_upto(pr, stable);
}

/* Emptied (repl_source_await_start): a RECORD or STABLE frame of the old
 * stream is dropped until the new one starts.  True if this one was. */
static bool dropped_before_start(struct peer *pr)
{
    if (!pr->src->awaiting_start)
        return false;
    pr->before_start++;
    if (!pr->src->start_drop_logged || pr->rx->cfg.verbose)
        rx_log(pr->rx, "%s %d (peer %s): frames of its old stream dropped until its new one "
               "starts", pr->rx->cfg.tag, pr->index, peer_name(pr));
    pr->src->start_drop_logged = true;
    return true;
}

static void on_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len,
                     void *ctx)
{
    struct peer *pr = ctx;
    if (l != pr->link || pr->src->diverged || pr->fenced)
        return;
    switch (type) {
    case FT_REQUEST:
    case FT_REPLY:
        if (pr->rx->cfg.hooks.message)
            pr->rx->cfg.hooks.message(pr->rx->cfg.owner, pr->index, type, payload, len);
        break;
    case FT_RECORD:
        if (!dropped_before_start(pr))
            on_record(pr, payload, len);
        break;
    case FT_STABLE:
        if (!dropped_before_start(pr))
            on_stable(pr, payload, len);
        break;
    case FT_PING:
        break;
    default:
        if (pr->rx->cfg.verbose)
            rx_log(pr->rx, "%s %d (peer %s): ignoring frame type %u", pr->rx->cfg.tag,
                   pr->index, peer_name(pr), (unsigned)type);
        break;
    }
}

/* The end of a read batch: one cumulative ACK for every record in it
 * (also when a later record of the batch diverged the source: the ones
 * before it are held, and the sender may be waiting for them). */
static void on_read_end(struct link *l, void *ctx)
{
    struct peer *pr = ctx;
    if (l != pr->link || !pr->ack_due)
        return;
    pr->ack_due = false;
    send_ack(pr, pr->src->received_xid);
}

static void on_up(struct link *l, uint64_t peer_xid, void *ctx)
{
    struct peer *pr = ctx;
    rx_log(pr->rx, "%s %d: link up from %s, holding xid %" PRIu64 " (applied %" PRIu64 ")",
           pr->rx->cfg.tag, pr->index, link_peer_name(l), pr->src->received_xid,
           pr->src->applied_xid);
}

static void on_down(struct link *l, const char *why, void *ctx)
{
    struct peer *pr = ctx;
    if (l != pr->link)
        return;
    rx_log(pr->rx, "%s %d: link from %s down: %s", pr->rx->cfg.tag, pr->index,
           link_peer_name(l), why);
    keep_stamp(pr, l);
    pr->link = NULL;
    pr->ack_due = false;
    evtimer_del(pr->close_ev);
    /* Closed because the source diverged is our doing: the sender may be
     * alive, redialing into a refusal.  What is lost is the process that
     * sent, as its link named it: a recovery process carrying a dead data
     * process's stream is a parity process, a promoted backup a backup. */
    if (!pr->fenced && !pr->src->diverged) {
        pr->lost = true;
        pr->lost_peer = *link_peer(l);
        /* A link that timed out was silent long before it dropped. */
        uint64_t heard = link_last_heard_ms(l);
        pr->lost_at_ms = heard ? heard : link_now_ms();
    }
}

static const struct link_callbacks peer_callbacks = {
    .on_up = on_up,
    .on_frame = on_frame,
    .on_down = on_down,
    .on_read_end = on_read_end,
};

/* ---- accepting senders ---- */

/* Fill the REJECT reason (kept in pr until the next HELLO); returns false. */
__attribute__((format(printf, 3, 4)))
static bool reject(struct peer *pr, const char **reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pr->reject, sizeof(pr->reject), fmt, ap);
    va_end(ap);
    *reason = pr->reject;
    return false;
}

/* Make l pr's link, closing the one it replaces. */
static void take_link(struct peer *pr, struct link *l)
{
    if (pr->link != NULL) {
        keep_stamp(pr, pr->link);
        rx_log(pr->rx, "%s %d: new link from %s replaces the one from %s", pr->rx->cfg.tag,
               pr->index, link_peer_name(l), peer_name(pr));
        evtimer_del(pr->close_ev);
        link_close(pr->link);
    }
    pr->link = l;
    pr->lost = false;
}

bool repl_receiver_accept(void *owner, const struct link_identity *id, struct link *l,
                          struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                          const char **reason)
{
    struct repl_receiver *rx = owner;
    int index;
    if (rx->cfg.hooks.resolve) {
        index = rx->cfg.hooks.resolve(rx->cfg.owner, id, reason);
        if (index < 0 || index >= rx->cfg.nsources)
            return false;
    } else {
        if (id->role != rx->cfg.sender_role) {
            *reason = rx->cfg.wrong_role;
            return false;
        }
        if (id->index >= (uint32_t)rx->cfg.nsources) {
            *reason = rx->cfg.no_such;
            return false;
        }
        index = (int)id->index;
    }
    struct peer *pr = &rx->peers[index];
    if (pr->fenced) {
        *reason = pr->fence_why;
        return false;
    }
    if (pr->src->diverged)   /* link.c logs the rejection with this reason */
        return reject(pr, reason, "%s %d diverged at %s", rx->cfg.noun, pr->index,
                      pr->src->why);
    take_link(pr, l);
    link_set_keepalive(l, LINK_PING_MS);
    *cb = peer_callbacks;
    *ctx = pr;
    *welcome_xid = pr->src->received_xid;
    pr->welcomed_xid = *welcome_xid;
    return true;
}

/* ---- lifetime and stats ---- */

static int peers_init(struct repl_receiver *rx, const struct repl_receiver_config *cfg)
{
    rx->peers = calloc((size_t)rx->cfg.nsources, sizeof(*rx->peers));
    if (rx->peers == NULL)
        return -1;
    for (int i = 0; i < rx->cfg.nsources; i++) {
        struct peer *pr = &rx->peers[i];
        pr->rx = rx;
        pr->index = i;
        pr->src = cfg->sources[i];
        pr->close_ev = evtimer_new(rx->cfg.base, close_now, pr);
        if (pr->close_ev == NULL)
            return -1;
    }
    return 0;
}

struct repl_receiver *repl_receiver_new(const struct repl_receiver_config *cfg)
{
    struct repl_receiver *rx = calloc(1, sizeof(*rx));
    if (rx == NULL)
        return NULL;
    rx->cfg = *cfg;
    rx->cfg.sources = NULL;   /* each peer keeps its own pointer */
    if (peers_init(rx, cfg) != 0) {
        repl_receiver_free(rx);
        return NULL;
    }
    return rx;
}

void repl_receiver_free(struct repl_receiver *rx)
{
    if (rx == NULL)
        return;
    for (int i = 0; rx->peers != NULL && i < rx->cfg.nsources; i++) {
        struct peer *pr = &rx->peers[i];
        if (pr->link != NULL)
            link_close(pr->link);
        if (pr->close_ev != NULL)
            event_free(pr->close_ev);
    }
    free(rx->peers);
    free(rx);
}

void repl_receiver_peer_stats(const struct repl_receiver *rx, int index,
                              struct repl_peer_stats *out)
{
    const struct peer *pr = &rx->peers[index];
    out->link_up = pr->link != NULL && link_is_up(pr->link);
    out->records = pr->records;
    out->duplicates = pr->duplicates;
    out->before_start = pr->before_start;
    out->acks = pr->acks;
}

void repl_receiver_fence(struct repl_receiver *rx, int index, const char *reason)
{
    struct peer *pr = &rx->peers[index];
    pr->fenced = true;
    pr->lost = false;
    snprintf(pr->fence_why, sizeof(pr->fence_why), "%s", reason);
    if (pr->link != NULL) {
        evtimer_del(pr->close_ev);
        keep_stamp(pr, pr->link);
        link_close(pr->link);
        pr->link = NULL;
    }
}

uint64_t repl_receiver_lease_end(const struct repl_receiver *rx, int index, unsigned lease_ms)
{
    const struct peer *pr = &rx->peers[index];
    uint64_t stamp = pr->stamp_kept_ms;
    if (pr->link != NULL && link_peer_stamp_ms(pr->link) > stamp)
        stamp = link_peer_stamp_ms(pr->link);
    return stamp ? stamp + lease_ms : 0;
}

void repl_receiver_diverged(struct repl_receiver *rx, int index)
{
    struct peer *pr = &rx->peers[index];
    if (pr->src->diverged)
        report_divergence(pr);
}

void repl_receiver_unfence(struct repl_receiver *rx, int index)
{
    rx->peers[index].fenced = false;
}

bool repl_receiver_fenced(const struct repl_receiver *rx, int index)
{
    return rx->peers[index].fenced;
}

int repl_receiver_sendv(struct repl_receiver *rx, int index, uint16_t type,
                        const struct iovec *iov, int iovcnt)
{
    struct peer *pr = &rx->peers[index];
    if (pr->link == NULL || pr->fenced || !link_is_up(pr->link))
        return -1;
    return link_sendv(pr->link, type, iov, iovcnt);
}

uint64_t repl_receiver_welcomed_xid(const struct repl_receiver *rx, int index)
{
    const struct peer *pr = &rx->peers[index];
    return pr->link != NULL ? pr->welcomed_xid : UINT64_MAX;
}

bool repl_receiver_link_up(const struct repl_receiver *rx, int index)
{
    const struct peer *pr = &rx->peers[index];
    return pr->link != NULL && !pr->fenced && link_is_up(pr->link);
}

bool repl_receiver_link_quiet(const struct repl_receiver *rx, int index)
{
    return repl_receiver_link_up(rx, index) &&
           repl_receiver_silent_ms(rx, index) >= 2 * LINK_PING_MS;
}

uint64_t repl_receiver_silent_ms(const struct repl_receiver *rx, int index)
{
    const struct peer *pr = &rx->peers[index];
    return pr->link != NULL ? link_silent_ms(pr->link, link_now_ms()) : 0;
}

/* The cluster role of a link role (the same processes, other numbers). */
static int cluster_role_of_link(uint8_t role)
{
    switch (role) {
    case LINK_ROLE_DATA: return ROLE_DATA;
    case LINK_ROLE_PARITY: return ROLE_PARITY;
    case LINK_ROLE_PRIMARY: return ROLE_PRIMARY;
    case LINK_ROLE_BACKUP: return ROLE_BACKUP;
    default: return -1;
    }
}

int repl_receiver_lost_peers(const struct repl_receiver *rx, struct eng_lost_peer *out, int max)
{
    uint64_t now = link_now_ms();
    int n = 0;
    for (int i = 0; i < rx->cfg.nsources && n < max; i++) {
        const struct peer *pr = &rx->peers[i];
        const struct link_identity *who = NULL;
        uint64_t down = 0;
        bool up = false;
        if (pr->link != NULL) {
            /* Up, but silent past several keepalives: its host crashed or
             * is cut off, and closed no socket, or it is paused. */
            uint64_t silent = link_silent_ms(pr->link, now);
            if (silent >= LINK_SILENT_MS && !pr->fenced) {
                who = link_peer(pr->link);
                down = silent;
                up = true;
            }
        } else if (pr->lost && now > pr->lost_at_ms) {
            who = &pr->lost_peer;
            down = now - pr->lost_at_ms;
        }
        int role = who ? cluster_role_of_link(who->role) : -1;
        if (role < 0)
            continue;
        out[n++] = (struct eng_lost_peer){ .role = role, .index = (int)who->index,
                                           .down_ms = down, .link_up = up };
    }
    return n;
}

void repl_receiver_stats_reset(struct repl_receiver *rx)
{
    for (int i = 0; i < rx->cfg.nsources; i++)
        rx->peers[i].records = rx->peers[i].duplicates = rx->peers[i].acks = 0;
}
