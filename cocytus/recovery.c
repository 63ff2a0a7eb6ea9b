/* recovery.c - unit recovery on the parity side: the recovery leader that
 * schedules batches of 4 KB units, and the contributor that turns its
 * parity units into residuals (recovery.h has the protocol; the numbers in
 * comments are the paper's five steps).
 *
 * One batch is in flight per group at a time.  All units of a batch share
 * one pattern: the set F of logical data processes whose unit is still
 * parity on their recovery process.  The leader asks every other logical
 * DP's server for the units (step 1), each sends them with its committed
 * xid T to the recovery processes of F (2); each of those holds the
 * sender's stream at T (3a), accumulates coefficient x data (3b) and, once
 * every source is in, sends region - accumulator (4); the leader solves
 * for F (5) and hands out the result.  Requested units go first; idle time
 * walks the region from a cursor.
 *
 * The leader keeps a shadow of every other recovery process's unit map:
 * it decides every unit recovery of the group, so the shadow is exact from
 * the moment that process started serving (its known-zero units included). */
#include "config.h"

#include "recovery.h"
#include "recovery_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "codec.h"
#include "frame.h"
#include "parity.h"

#define BG_BATCH_BYTES (512u << 10)     /* background batch: 512 KB of units */
#define NEED_BATCH_BYTES (256u << 10)   /* requested units per batch */
#define BATCH_TIMEOUT_MS 2000           /* a batch that takes longer is dropped */
#define RETRY_MS 20                     /* after a failed or dropped batch */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

__attribute__((format(printf, 2, 3)))
static void rlog(const struct recovery *rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rc->env.log(rc->env.ctx, msg);
}

static bool unit_map_free_of_data(struct recovery *rc, const struct recov_msg *m);
static void pass_needs_on(struct recovery *rc);

#define DEBUG(rc, ...) do { if ((rc)->debug) rlog(rc, __VA_ARGS__); } while (0)

/* x with a * x = 1 in GF(2^8) (a != 0): by trial, 255 products at most. */
static uint8_t gf_inverse(struct codec *codec, uint8_t a)
{
    for (int x = 1; x < 256; x++) {
        uint8_t prod = 0, xv = (uint8_t)x;
        codec_mul_xor(codec, a, &prod, &xv, 1);
        if (prod == 1)
            return (uint8_t)x;
    }
    return 0;
}

/* ---- unit maps of the group's recovery processes ---- */

/* The unit map of the recovery process pp: ours, or the leader's shadow. */
static struct unit_map *map_of(struct recovery *rc, int pp)
{
    if (pp == rc->self)
        return rc->own_valid ? &rc->own : NULL;
    return rc->shadow_valid[pp] ? &rc->shadow[pp] : NULL;
}

/* The parity index of the leader that started batch id (its top bits).
 * Replies go to that leader, not to whoever leads in our view: a
 * recovery process that has just taken over builds its own view before the
 * coordinator's reaches it, and may take itself for the leader a little
 * while after another one started a batch. */
static int batch_leader(uint64_t id)
{
    return (int)(id >> 48) - 1;
}

/* The data process a BATCH's leader serves, whose link carries our replies
 * to it; -1 if the message names none. */
static int batch_leader_dp(const struct recovery *rc, const struct recov_msg *m)
{
    return m->who < (uint32_t)rc->view.k ? (int)m->who : -1;
}

/* F for unit u: the logical DPs whose unit u is still parity (bit i). */
static uint32_t pattern_of(struct recovery *rc, size_t u)
{
    uint32_t f = 0;
    const struct group_view *v = &rc->view;
    for (int j = 0; j < v->m; j++) {
        if (v->pp_state[j] != GV_PP_SERVING)
            continue;
        struct unit_map *um = map_of(rc, j);
        if (um && !unit_map_has(um, u))
            f |= 1u << v->pp_serves[j];
    }
    return f;
}

/* Known-zero units of logical DP dp: beyond the furthest byte its records
 * ever reached on this parity process. */
static size_t first_zero_unit(const struct recovery *rc, int dp)
{
    uint64_t end = rc->env.p->dps[dp].touched_end;
    return (size_t)((end + RECOV_UNIT - 1) / RECOV_UNIT);
}

static void mark_known_zero(struct unit_map *um, size_t from)
{
    for (size_t u = from; u < um->nunits; u++)
        unit_map_set(um, u);
}

/* ---- contributor (steps 3 and 4) ---- */

static void contrib_clear(struct contrib *c)
{
    c->active = false;
    c->announced = false;
    c->id = 0;
    c->leader_dp = -1;
    c->nsources = 0;
    c->got = 0;
    c->want = 0;
}

static void contrib_reset(struct recovery *rc)
{
    struct contrib *c = &rc->contrib;
    for (int i = 0; i < RECOV_MAX_K; i++)
        if (c->held[i]) {
            c->held[i] = false;
            rc->env.release(rc->env.ctx, i);
        }
    contrib_clear(c);
    contrib_clear(&rc->contrib_ahead);
}

static int contrib_init(struct contrib *c, uint64_t id, const struct recov_range *ranges,
                        int nranges)
{
    uint64_t bytes = recov_ranges_bytes(ranges, nranges);
    if (bytes > c->acc_cap) {
        uint8_t *n = realloc(c->acc, bytes);
        if (!n)
            return -1;
        c->acc = n;
        c->acc_cap = bytes;
    }
    c->active = true;
    c->announced = false;
    c->got = c->want = 0;
    c->id = id;
    c->leader_dp = -1;
    c->nranges = nranges;
    memcpy(c->ranges, ranges, (size_t)nranges * sizeof(*ranges));
    c->bytes = bytes;
    c->started_ms = mono_ms();
    return 0;
}

/* The contribution a message of batch id belongs to, or NULL (a late
 * message of a dropped batch).  A batch id we have not seen yet replaces
 * the current one (the leader moved on, or dropped it), unless it is our
 * own batch ahead. */
static struct contrib *contrib_start(struct recovery *rc, uint64_t id,
                                     const struct recov_range *ranges, int nranges)
{
    struct contrib *c = &rc->contrib, *a = &rc->contrib_ahead;
    if (c->active && c->id == id)
        return c;
    if (a->active && a->id == id)
        return a;
    /* Ids grow per leader (the leader's index is in the top bits): an
     * older one of the same leader is a late message of a dropped batch. */
    if (c->active && (id >> 48) == (c->id >> 48) && id < c->id)
        return NULL;
    if (c->active && rc->ahead.active && rc->ahead.id == id)
        return contrib_init(a, id, ranges, nranges) == 0 ? a : NULL;
    contrib_reset(rc);
    return contrib_init(c, id, ranges, nranges) == 0 ? c : NULL;
}

/* The oldest contribution is done: the one ahead takes its place, and the
 * streams it has data of move their hold forward to its T (records in
 * between are applied: the finished units do not take them any more). */
static void contrib_advance(struct recovery *rc)
{
    struct contrib *c = &rc->contrib, *a = &rc->contrib_ahead;
    for (int i = 0; i < RECOV_MAX_K; i++) {
        if (!c->held[i])
            continue;
        c->held[i] = false;
        if (!(a->active && (a->got & (1u << i))))
            rc->env.release(rc->env.ctx, i);
    }
    contrib_clear(c);
    if (!a->active)
        return;
    struct contrib tmp = *c;
    *c = *a;
    *a = tmp;
    contrib_clear(a);
    for (int i = 0; i < RECOV_MAX_K; i++) {
        if (!(c->got & (1u << i)))
            continue;
        if (rc->env.hold(rc->env.ctx, i, c->t[i]) < 0) {
            rlog(rc, "batch %" PRIu64 ": cannot hold dp %d's stream at xid %" PRIu64
                 "; batch dropped", c->id, i, c->t[i]);
            contrib_reset(rc);
            return;
        }
        c->held[i] = true;
    }
}

static bool same_ranges(const struct contrib *c, const struct recov_range *r, int n)
    __attribute__((unused));
static bool same_ranges(const struct contrib *c, const struct recov_range *r, int n)
{
    return c->nranges == n && memcmp(c->ranges, r, (size_t)n * sizeof(*r)) == 0;
}

/* Every source in and the batch announced: region - accumulator goes to
 * the leader (or to ourselves when we lead). */
static bool finish_in_place(struct recovery *rc, struct contrib *c);
static void leader_shift(struct recovery *rc);
static void install_units(struct recovery *rc, const struct recov_range *r, int n,
                          const uint8_t *bytes);
static void kick(struct recovery *rc, int ms);

/* Step 4 on a contributor that does not lead: region - accumulator, which
 * now depends on the lost data processes only, goes to the leader. */
static void send_residual(struct recovery *rc, struct contrib *c)
{
    uint64_t pos = 0;
    const uint8_t *region = rc->env.p->region;
    for (int i = 0; i < c->nranges; i++) {
        /* Coefficient 1: a plain region XOR, done by the codec's wide loops. */
        codec_mul_xor(rc->env.p->codec, 1, c->acc + pos, region + c->ranges[i].off,
                      c->ranges[i].len);
        pos += c->ranges[i].len;
    }
    int leader = batch_leader(c->id);
    if (leader == rc->self) {
        leader_take_residual(rc, c->id, rc->self, c->acc, c->bytes);
        return;
    }
    struct recov_msg m;
    memset(&m, 0, sizeof(m));
    m.id = c->id;
    m.kind = RK_RESIDUAL;
    m.who = (uint32_t)rc->self;
    m.nranges = c->nranges;
    memcpy(m.ranges, c->ranges, (size_t)c->nranges * sizeof(*c->ranges));
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&m, hdr);
    struct iovec iov[2] = { { hdr, nh }, { c->acc, c->bytes } };
    if (c->leader_dp < 0 || rc->env.to_source(rc->env.ctx, c->leader_dp, FT_REPLY, iov, 2) < 0)
        rlog(rc, "batch %" PRIu64 ": cannot send the residual to the leader (parity %d)",
             c->id, leader);
}

/* Every source in and the batch announced: finish the oldest contribution
 * (in place, or by a residual), then the one ahead if it is complete too.
 * Only then may the held streams go on. */
static void contrib_finish_if_done(struct recovery *rc)
{
    for (;;) {
        struct contrib *c = &rc->contrib;
        if (!c->active || !c->announced || c->got != c->want)
            return;
        if (c->want == 0)
            memset(c->acc, 0, c->bytes);   /* no source: nothing to subtract */
        if (!finish_in_place(rc, c))
            send_residual(rc, c);
        contrib_advance(rc);
    }
}

/* Can batch b be solved in place here: one lost data process, which we
 * serve, and we lead (so its only contributor is us). */
static bool in_place_batch(const struct recovery *rc, const struct lbatch *b)
{
    return rc->view_leader == rc->self && b->active && __builtin_popcount(b->pattern) == 1 &&
           b->want == (1u << rc->self) && rc->own_valid &&
           (b->pattern & (1u << rc->serving));
}

/* The common case: the units are solved right in the region,
 * (parity - accumulator) / a, with no residual or decoded copy, and
 * become data before any held record is applied (a record past the
 * source's T must not touch them any more). */
static bool finish_in_place(struct recovery *rc, struct contrib *c)
{
    struct lbatch *b = &rc->batch;
    if (b->id != c->id || !in_place_batch(rc, b))
        return false;
    struct codec *codec = rc->env.p->codec;
    uint8_t a = codec_coef(codec, rc->self, rc->serving);
    uint8_t *region = rc->env.p->region;
    uint64_t pos = 0;
    for (int i = 0; i < c->nranges; i++) {
        uint8_t *dst = region + c->ranges[i].off;
        size_t len = c->ranges[i].len;
        if (a == 1) {
            codec_mul_xor(codec, 1, dst, c->acc + pos, len);
        } else {
            /* acc ^= region, then region = inv(a) x acc */
            codec_mul_xor(codec, 1, c->acc + pos, dst, len);
            memset(dst, 0, len);
            codec_mul_xor(codec, gf_inverse(codec, a), dst, c->acc + pos, len);
        }
        pos += c->ranges[i].len;
    }
    rc->batches_done++;
    rc->bytes_decoded += b->bytes;
    struct lbatch done = *b;
    /* The batch ahead (if any) is the oldest now. */
    leader_shift(rc);
    install_units(rc, done.ranges, done.nranges, NULL);
    kick(rc, 0);
    return true;
}

/* Step 3: a source's units at its logical timestamp T. */
static void contrib_on_data(struct recovery *rc, const struct recov_msg *m)
{
    int src = (int)m->who;
    if (src < 0 || src >= rc->view.k || !unit_map_free_of_data(rc, m))
        return;
    struct contrib *c = contrib_start(rc, m->id, m->ranges, m->nranges);
    if (!c || !same_ranges(c, m->ranges, m->nranges))
        return;
    DEBUG(rc, "batch %" PRIx64 ": data of dp %d at xid %" PRIu64 ", %" PRIu64 " bytes", m->id, src,
          m->t, m->nbytes);
    if (c->got & (1u << src))
        return;
    if (c == &rc->contrib) {
        /* 3(a): our copy of this source's stream goes exactly to T and
         * waits there until the residual is taken. */
        if (rc->env.hold(rc->env.ctx, src, m->t) < 0) {
            rlog(rc, "batch %" PRIu64 ": cannot hold dp %d's stream at xid %" PRIu64
                 "; batch dropped", m->id, src, m->t);
            contrib_reset(rc);
            return;
        }
        c->held[src] = true;
    } else {
        /* The batch ahead: the stream is held at the older batch's T; it
         * moves here once that one is done (contrib_advance). */
        c->t[src] = m->t;
    }
    /* 3(b): subtract coefficient x data (GF(2^8) subtraction is XOR); the
     * first source sets the accumulator. */
    uint8_t coef = codec_coef(rc->env.p->codec, rc->self, src);
    if (c->got == 0 && coef == 1) {
        memcpy(c->acc, m->bytes, (size_t)m->nbytes);
    } else {
        if (c->got == 0)
            memset(c->acc, 0, c->bytes);
        codec_mul_xor(rc->env.p->codec, coef, c->acc, m->bytes, (size_t)m->nbytes);
    }
    c->got |= 1u << src;
    contrib_finish_if_done(rc);
}

/* A contributor must hold parity in every unit of the batch.  The leader's
 * shadow of our map can lag (its idea of our known-zero units is taken when
 * the view reaches it, and our own writes may have extended that range
 * since): then we tell it which units are data here, and it asks again. */
static bool contrib_holds_parity(struct recovery *rc, const struct recov_msg *m)
{
    if (!rc->own_valid)
        return true;
    struct recov_msg have;
    memset(&have, 0, sizeof(have));
    have.id = m->id;
    have.kind = RK_HAVE;
    have.who = (uint32_t)rc->self;
    for (int i = 0; i < m->nranges; i++)
        for (uint64_t x = 0; x < m->ranges[i].len; x += RECOV_UNIT) {
            size_t u = (size_t)((m->ranges[i].off + x) / RECOV_UNIT);
            if (!unit_map_has(&rc->own, u) || have.nranges == RECOV_MAX_RANGES)
                continue;
            uint64_t off = (uint64_t)u * RECOV_UNIT;
            struct recov_range *last = have.nranges ? &have.ranges[have.nranges - 1] : NULL;
            if (last && last->off + last->len == off)
                last->len += (uint32_t)unit_map_unit_len(&rc->own, u);
            else
                have.ranges[have.nranges++] = (struct recov_range){
                    off, (uint32_t)unit_map_unit_len(&rc->own, u) };
        }
    if (have.nranges == 0)
        return true;
    DEBUG(rc, "batch %" PRIx64 ": %d ranges are data here already", m->id, have.nranges);
    if (batch_leader(m->id) == rc->self) {
        leader_take_have(rc, &have);
        return false;
    }
    uint8_t hdr[2048];
    size_t nh = recov_encode_header(&have, hdr);
    struct iovec iov[1] = { { hdr, nh } };
    int leader_dp = batch_leader_dp(rc, m);
    if (leader_dp < 0 || rc->env.to_source(rc->env.ctx, leader_dp, FT_REPLY, iov, 1) < 0)
        rlog(rc, "batch %" PRIu64 ": cannot tell the leader which units are data here", m->id);
    return false;
}

static void contrib_on_batch(struct recovery *rc, const struct recov_msg *m)
{
    if (!contrib_holds_parity(rc, m)) {
        if (rc->contrib.active && rc->contrib.id == m->id)
            contrib_reset(rc);
        return;
    }
    DEBUG(rc, "batch %" PRIx64 ": announced, %d sources", m->id, m->nlist);
    struct contrib *c = contrib_start(rc, m->id, m->ranges, m->nranges);
    if (!c || !same_ranges(c, m->ranges, m->nranges))
        return;
    c->announced = true;
    c->leader_dp = batch_leader_dp(rc, m);
    c->want = 0;
    for (int i = 0; i < m->nlist; i++)
        c->want |= 1u << m->list[i];
    contrib_finish_if_done(rc);
}

/* Silent form of the check above, for data messages (the announcement
 * answers the leader). */
static bool unit_map_free_of_data(struct recovery *rc, const struct recov_msg *m)
{
    if (!rc->own_valid)
        return true;
    for (int i = 0; i < m->nranges; i++)
        for (uint64_t x = 0; x < m->ranges[i].len; x += RECOV_UNIT)
            if (unit_map_has(&rc->own, (size_t)((m->ranges[i].off + x) / RECOV_UNIT)))
                return false;
    return true;
}

/* ---- results ---- */

/* Units of ours arrive (decoded by the leader, or by ourselves). */
static void install_units(struct recovery *rc, const struct recov_range *r, int n,
                          const uint8_t *bytes)
{
    if (!rc->own_valid)
        return;
    uint8_t *region = rc->env.p->region;
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t u0 = (size_t)(r[i].off / RECOV_UNIT);
        for (uint64_t b = 0; b < r[i].len; b += RECOV_UNIT) {
            size_t u = u0 + (size_t)(b / RECOV_UNIT);
            uint64_t ul = r[i].len - b < RECOV_UNIT ? r[i].len - b : RECOV_UNIT;
            /* A unit already holding data may have been written since:
             * never overwrite it. */
            if (!unit_map_has(&rc->own, u)) {
                if (bytes)
                    memcpy(region + r[i].off + b, bytes + pos + b, (size_t)ul);
                unit_map_set(&rc->own, u);
                rc->recovered_bytes += ul;
            }
        }
        pos += r[i].len;
    }
    rc->env.arrived(rc->env.ctx);
    if (rc->own.done == rc->own.nunits && !rc->complete_logged) {
        rc->complete_logged = true;
        rc->complete_us = mono_us() - rc->serving_since_us;
        double secs = (double)rc->complete_us / 1e6;
        rlog(rc, "dp %d fully recovered: %zu units, %" PRIu64 " bytes rebuilt in %.3f s",
             rc->serving, rc->own.nunits, rc->recovered_bytes, secs);
    }
}

/* ---- leader (steps 1 and 5) ---- */

static void leader_schedule(struct recovery *rc);
static void leader_start(struct recovery *rc, struct lbatch *b);
static bool view_settled(const struct recovery *rc);

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    leader_schedule(arg);
}

static void kick(struct recovery *rc, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    evtimer_add(rc->kick, &tv);
}

static void batch_drop(struct recovery *rc, const char *why)
{
    struct lbatch *b = &rc->batch;
    if (!b->active)
        return;
    rlog(rc, "batch %" PRIu64 " dropped: %s", b->id, why);
    b->active = false;
    rc->ahead.active = false;    /* it rides on the oldest one's holds */
    rc->batches_dropped++;
    kick(rc, RETRY_MS);
}

/* Step 5: solve for the units of the lost DPs in pattern F. */
static int decode_batch(struct recovery *rc, struct lbatch *b)
{
    struct codec *codec = rc->env.p->codec;
    int k = rc->view.k, m = rc->view.m;
    int nf = 0, fs[RECOV_MAX_K];
    for (int i = 0; i < k; i++)
        if (b->pattern & (1u << i))
            fs[nf++] = i;
    if (nf == 1) {
        /* One unknown: D_f = Q / a(r, f). */
        int r = rc->view.dp_server[fs[0]];
        uint8_t inv = gf_inverse(codec, codec_coef(codec, r, fs[0]));
        memset(b->out[fs[0]], 0, b->bytes);
        codec_mul_xor(codec, inv, b->out[fs[0]], b->residual[r], b->bytes);
        return 0;
    }
    /* Several: the residuals are parity of a stripe whose other data are
     * zero; the codec's decoder does the rest. */
    uint8_t *data[RECOV_MAX_K], *parity[RECOV_MAX_M];
    int erasures[RECOV_MAX_K + RECOV_MAX_M], ne = 0;
    memset(rc->zero, 0, b->bytes);
    for (int i = 0; i < k; i++)
        data[i] = (b->pattern & (1u << i)) ? b->out[i] : rc->zero;
    for (int i = 0; i < nf; i++)
        erasures[ne++] = fs[i];
    for (int j = 0; j < m; j++) {
        bool contributor = rc->view.pp_state[j] == GV_PP_SERVING &&
                           (b->pattern & (1u << rc->view.pp_serves[j]));
        if (contributor) {
            parity[j] = b->residual[j];
        } else {
            parity[j] = rc->scratch[j];
            erasures[ne++] = k + j;
        }
    }
    return codec_decode(codec, erasures, ne, data, parity, b->bytes);
}

static void send_decoded(struct recovery *rc, struct lbatch *b, int f)
{
    int r = rc->view.dp_server[f];
    if (r == rc->self) {
        install_units(rc, b->ranges, b->nranges, b->out[f]);
        return;
    }
    struct recov_msg m;
    memset(&m, 0, sizeof(m));
    m.id = b->id;
    m.kind = RK_DECODED;
    m.who = (uint32_t)f;
    m.nranges = b->nranges;
    memcpy(m.ranges, b->ranges, (size_t)b->nranges * sizeof(*b->ranges));
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&m, hdr);
    struct iovec iov[2] = { { hdr, nh }, { b->out[f], b->bytes } };
    if (rc->env.to_pp(rc->env.ctx, r, FT_REQUEST, iov, 2) < 0) {
        rlog(rc, "batch %" PRIu64 ": cannot send dp %d's units to parity %d", b->id, f, r);
        return;
    }
    /* The shadow follows what we handed out. */
    struct unit_map *um = map_of(rc, r);
    for (int i = 0; um && i < b->nranges; i++)
        for (uint64_t x = 0; x < b->ranges[i].len; x += RECOV_UNIT)
            unit_map_set(um, (size_t)((b->ranges[i].off + x) / RECOV_UNIT));
}

void leader_take_residual(struct recovery *rc, uint64_t id, int pp, const uint8_t *bytes,
                          uint64_t n)
{
    struct lbatch *b = &rc->batch;
    DEBUG(rc, "batch %" PRIx64 ": residual of pp %d (%" PRIu64 " bytes)", id, pp, n);
    if (!b->active || b->id != id || pp < 0 || pp >= rc->view.m || n != b->bytes ||
        !(b->want & (1u << pp)) || (b->got & (1u << pp)))
        return;
    memcpy(b->residual[pp], bytes, (size_t)n);
    b->got |= 1u << pp;
    if (b->got != b->want)
        return;
    if (decode_batch(rc, b) != 0) {
        batch_drop(rc, "decoding failed");
        return;
    }
    struct lbatch done = *b;
    leader_shift(rc);
    rc->batches_done++;
    rc->bytes_decoded += done.bytes;
    for (int f = 0; f < rc->view.k; f++)
        if (done.pattern & (1u << f))
            send_decoded(rc, &done, f);
    uint64_t us = mono_us() - done.started_us;
    if (us > rc->batch_us_max)
        rc->batch_us_max = us;
    /* Leave the loop a turn before the next batch: client requests first. */
    kick(rc, 0);
}

/* A contributor holds data in some units we took for parity there. */
void leader_take_have(struct recovery *rc, const struct recov_msg *m)
{
    int pp = (int)m->who;
    struct unit_map *um = pp >= 0 && pp < rc->view.m ? map_of(rc, pp) : NULL;
    if (!um)
        return;
    for (int i = 0; i < m->nranges; i++)
        for (uint64_t x = 0; x < m->ranges[i].len; x += RECOV_UNIT)
            unit_map_set(um, (size_t)((m->ranges[i].off + x) / RECOV_UNIT));
    if ((rc->batch.active && rc->batch.id == m->id) || (rc->ahead.active && rc->ahead.id == m->id))
        batch_drop(rc, "a contributor holds data in some of its units");
}

static int grow_batch_buffers(struct recovery *rc, uint64_t bytes)
{
    if (bytes <= rc->bufcap)
        return 0;
    int k = rc->view.k, m = rc->view.m;
    for (int i = 0; i < k; i++) {
        uint8_t *n = realloc(rc->batch.out[i], bytes);
        if (!n)
            return -1;
        rc->batch.out[i] = n;
    }
    for (int j = 0; j < m; j++) {
        uint8_t *n = realloc(rc->batch.residual[j], bytes);
        uint8_t *s = n ? realloc(rc->scratch[j], bytes) : NULL;
        if (n)
            rc->batch.residual[j] = n;
        if (!s)
            return -1;
        rc->scratch[j] = s;
    }
    uint8_t *z = realloc(rc->zero, bytes);
    if (!z)
        return -1;
    rc->zero = z;
    rc->bufcap = bytes;
    return 0;
}

/* Extend the batch with units of one pattern.  Returns false when full. */
static bool batch_add(struct lbatch *b, size_t u, uint64_t len, uint64_t max_bytes)
{
    if (b->bytes + len > max_bytes)
        return false;
    uint64_t off = (uint64_t)u * RECOV_UNIT;
    if (b->nranges > 0) {
        struct recov_range *last = &b->ranges[b->nranges - 1];
        if (last->off + last->len == off) {
            last->len += (uint32_t)len;
            b->bytes += len;
            return true;
        }
        /* Already in the batch (a need listed twice)? */
        for (int i = 0; i < b->nranges; i++)
            if (off >= b->ranges[i].off && off < b->ranges[i].off + b->ranges[i].len)
                return true;
    }
    if (b->nranges == RECOV_MAX_RANGES)
        return false;
    b->ranges[b->nranges++] = (struct recov_range){ off, (uint32_t)len };
    b->bytes += len;
    return true;
}

/* Requested units first: the pattern of the oldest need, then every other
 * needed unit with the same pattern. */
/* Is unit u in one of b's ranges (b: a batch in flight, or NULL)? */
static bool unit_in_batch(const struct lbatch *b, size_t u)
{
    if (!b || !b->active)
        return false;
    uint64_t off = (uint64_t)u * RECOV_UNIT;
    for (int i = 0; i < b->nranges; i++)
        if (off >= b->ranges[i].off && off < b->ranges[i].off + b->ranges[i].len)
            return true;
    return false;
}

/* Requested units first: the pattern of the oldest need, then every other
 * needed unit with the same pattern.  Units of the batch in flight
 * (exclude) wait; with only != 0 just that pattern is taken. */
static bool build_from_needs(struct recovery *rc, struct lbatch *b, const struct lbatch *exclude,
                             uint32_t only)
{
    struct unit_map *any = rc->own_valid ? &rc->own : NULL;
    size_t keep = 0;
    for (size_t i = 0; i < rc->nneeds; i++) {
        size_t u = rc->needs[i];
        uint32_t f = any && u < any->nunits ? pattern_of(rc, u) : 0;
        if (f == 0)
            continue;           /* done meanwhile: drop it */
        if (unit_in_batch(exclude, u) || (only && f != only)) {
            rc->needs[keep++] = u;
            continue;
        }
        if (b->pattern == 0)
            b->pattern = f;
        if (f != b->pattern ||
            !batch_add(b, u, unit_map_unit_len(any, u), NEED_BATCH_BYTES))
            rc->needs[keep++] = u;   /* a later batch */
    }
    rc->nneeds = keep;
    return b->pattern != 0;
}

/* The first unit >= from that some recovery process still lacks and that
 * is not in exclude, or nunits. */
static size_t next_missing_any(struct recovery *rc, size_t from, const struct lbatch *exclude)
{
    size_t n = rc->own.nunits;
    for (;;) {
        size_t next = n;
        for (int j = 0; j < rc->view.m; j++) {
            struct unit_map *mj = rc->view.pp_state[j] == GV_PP_SERVING ? map_of(rc, j) : NULL;
            if (mj) {
                size_t x = unit_map_next_missing(mj, from);
                if (x < next)
                    next = x;
            }
        }
        if (next >= n || !unit_in_batch(exclude, next))
            return next;
        from = next + 1;
    }
}

/* Idle time: consecutive units from the cursor that share a pattern (only
 * that pattern when only != 0; never units of exclude). */
static bool build_background(struct recovery *rc, struct lbatch *b, const struct lbatch *exclude,
                             uint32_t only)
{
    struct unit_map *um = rc->own_valid ? &rc->own : NULL;
    if (!um)
        return false;
    size_t n = um->nunits;
    for (int pass = 0; pass < 2 && b->pattern == 0; pass++) {
        size_t u = rc->cursor;
        size_t next = next_missing_any(rc, u, exclude);
        if (next >= n) {
            rc->cursor = 0;   /* wrap once: earlier units may have been skipped */
            if (u == 0)
                return false;
            continue;
        }
        uint32_t f = pattern_of(rc, next);
        if (only && f != only)
            return false;
        b->pattern = f;
        for (u = next; u < n && pattern_of(rc, u) == b->pattern && !unit_in_batch(exclude, u);
             u++)
            if (!batch_add(b, u, unit_map_unit_len(um, u), BG_BATCH_BYTES))
                break;
        rc->cursor = u;
    }
    return b->pattern != 0;
}

/* A message about batch b: its id and ranges, and a list of indexes. */
static void batch_msg(const struct lbatch *b, uint8_t kind, const uint8_t *list, int n,
                      struct recov_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->id = b->id;
    m->kind = kind;
    m->nlist = n;
    memcpy(m->list, list, (size_t)n);
    m->nranges = b->nranges;
    memcpy(m->ranges, b->ranges, (size_t)b->nranges * sizeof(*b->ranges));
}

/* Step 1 for one source: our own data engine, or the server of dp i. */
static int fetch_from(struct recovery *rc, struct lbatch *b, int i, const uint8_t *contrib,
                      int ncontrib)
{
    struct recov_msg m;
    batch_msg(b, RK_FETCH, contrib, ncontrib, &m);
    if (rc->view.dp_server[i] == rc->self) {
        rc->env.local_fetch(rc->env.ctx, &m);
        return 0;
    }
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&m, hdr);
    struct iovec iov[1] = { { hdr, nh } };
    return rc->env.to_source(rc->env.ctx, i, FT_REQUEST, iov, 1);
}

static int announce_to(struct recovery *rc, struct lbatch *b, int pp, const uint8_t *sources,
                       int nsources)
{
    struct recov_msg m;
    batch_msg(b, RK_BATCH, sources, nsources, &m);
    m.who = (uint32_t)rc->serving;   /* where the contributor replies */
    if (pp == rc->self) {
        contrib_on_batch(rc, &m);
        return 0;
    }
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&m, hdr);
    struct iovec iov[1] = { { hdr, nh } };
    return rc->env.to_pp(rc->env.ctx, pp, FT_REQUEST, iov, 1);
}

/* Can a batch run: a settled view in which every logical DP has a server. */
static bool view_settled(const struct recovery *rc)
{
    for (int i = 0; i < rc->view.k; i++)
        if (rc->view.dp_server[i] == -2)
            return false;
    return rc->own_valid && rc->view_leader == rc->self;
}

static void leader_start(struct recovery *rc, struct lbatch *b)
{
    uint8_t sources[RECOV_MAX_K], contrib[RECOV_MAX_M];
    int ns = 0, nc = 0;
    b->want = 0;
    for (int i = 0; i < rc->view.k; i++) {
        if (b->pattern & (1u << i)) {
            int r = rc->view.dp_server[i];
            contrib[nc++] = (uint8_t)r;
            b->want |= 1u << r;
        } else {
            sources[ns++] = (uint8_t)i;
        }
    }
    b->active = true;
    b->got = 0;
    b->id = ((uint64_t)(rc->self + 1) << 48) | ++rc->next_id;
    b->started_us = mono_us();
    b->started_ms = mono_ms();
    if (!rc->first_batch_us)
        rc->first_batch_us = b->started_us;
    DEBUG(rc, "batch %" PRIx64 ": pattern %x, %d ranges, %" PRIu64 " bytes, %d sources, %d "
          "contributors", b->id, b->pattern, b->nranges, b->bytes, ns, nc);
    /* Contributors learn the batch first (a source's data may still
     * overtake the announcement on another link: they take either order). */
    for (int c = 0; c < nc; c++)
        if (announce_to(rc, b, contrib[c], sources, ns) < 0) {
            batch_drop(rc, "a contributor's link is down");
            return;
        }
    for (int s = 0; s < ns && b->active; s++)
        if (fetch_from(rc, b, sources[s], contrib, nc) < 0) {
            batch_drop(rc, "a data source's link is down");
            return;
        }
}

/* The leader's batches in flight: the oldest is done, the one ahead (if
 * any) becomes the oldest. */
static void leader_shift(struct recovery *rc)
{
    struct lbatch *b = &rc->batch, *a = &rc->ahead;
    b->active = false;
    if (!a->active)
        return;
    b->active = true;
    b->id = a->id;
    b->pattern = a->pattern;
    b->nranges = a->nranges;
    memcpy(b->ranges, a->ranges, (size_t)a->nranges * sizeof(*a->ranges));
    b->bytes = a->bytes;
    b->want = a->want;
    b->got = a->got;
    b->started_us = a->started_us;
    b->started_ms = a->started_ms;
    a->active = false;
}

/* Pipelining: while the oldest batch's sources send, ask for the next
 * units too, when both batches are solved in place here. */
static void start_ahead(struct recovery *rc)
{
    struct lbatch *a = &rc->ahead;
    uint32_t only = 1u << rc->serving;
    a->nranges = 0;
    a->bytes = 0;
    a->pattern = 0;
    if (!build_from_needs(rc, a, &rc->batch, only) &&
        !build_background(rc, a, &rc->batch, only))
        return;
    leader_start(rc, a);
    if (a->active && !in_place_batch(rc, a)) {
        batch_drop(rc, "the batch ahead is not solved here");
    }
}

static void leader_schedule(struct recovery *rc)
{
    struct lbatch *b = &rc->batch;
    if (rc->abandoned)
        return;
    if (b->active) {
        if (mono_ms() - b->started_ms > BATCH_TIMEOUT_MS) {
            batch_drop(rc, "timed out");
            return;
        }
        if (!rc->ahead.active && view_settled(rc) && in_place_batch(rc, b))
            start_ahead(rc);
        kick(rc, 100);   /* watch it */
        return;
    }
    if (!view_settled(rc))
        return;
    b->nranges = 0;
    b->bytes = 0;
    b->pattern = 0;
    if (!build_from_needs(rc, b, NULL, 0) && !build_background(rc, b, NULL, 0))
        return;   /* nothing left to recover */
    if (grow_batch_buffers(rc, b->bytes) < 0) {
        rlog(rc, "out of memory for a %" PRIu64 "-byte batch", b->bytes);
        kick(rc, 100);
        return;
    }
    leader_start(rc, b);
    if (b->active && !rc->ahead.active && in_place_batch(rc, b))
        start_ahead(rc);
    /* Watch the batch from now on, whatever happens to its messages: a
     * residual that never comes must time it out, not stall the group.
     * (A kick already set, such as one from a batch solved at once, comes
     * sooner and watches it too.) */
    if (b->active && !evtimer_pending(rc->kick, NULL))
        kick(rc, 100);
}

/* ---- public ---- */

int recovery_init(struct recovery *rc, const struct recovery_env *env, int self, int k, int m)
{
    memset(rc, 0, sizeof(*rc));
    rc->env = *env;
    rc->self = self;
    rc->serving = -1;
    rc->view_leader = -1;
    group_view_init(&rc->view, k, m);
    rc->debug = getenv("COCYTUS_RECOVERY_DEBUG") != NULL;
    rc->kick = evtimer_new(env->base, on_kick, rc);
    return rc->kick ? 0 : -1;
}

void recovery_destroy(struct recovery *rc)
{
    if (rc->kick)
        event_free(rc->kick);
    for (int i = 0; i < RECOV_MAX_K; i++)
        free(rc->batch.out[i]);
    for (int j = 0; j < RECOV_MAX_M; j++) {
        free(rc->batch.residual[j]);
        free(rc->scratch[j]);
        if (rc->shadow_valid[j])
            unit_map_destroy(&rc->shadow[j]);
    }
    free(rc->zero);
    free(rc->contrib.acc);
    free(rc->contrib_ahead.acc);
    free(rc->needs);
    if (rc->own_valid)
        unit_map_destroy(&rc->own);
    memset(rc, 0, sizeof(*rc));
}

int recovery_serve(struct recovery *rc, int dp)
{
    struct unit_map *um = &rc->own;
    if (unit_map_init(um, rc->env.p->region_size) < 0)
        return -1;
    size_t zero_from = first_zero_unit(rc, dp);
    /* Those units hold parity of the other DPs now; as data of dp they are
     * zero.  Dropping the pages zeroes them without touching them. */
    if (zero_from < um->nunits)
        rc->env.zero(rc->env.ctx, (uint64_t)zero_from * RECOV_UNIT,
                     um->region_size - (uint64_t)zero_from * RECOV_UNIT);
    mark_known_zero(um, zero_from);
    rc->own_valid = true;
    rc->serving = dp;
    rc->serving_since_us = mono_us();
    rc->first_batch_us = 0;
    rc->cursor = 0;
    rlog(rc, "serving dp %d: %zu of %zu units to rebuild (%zu known zero)", dp,
         zero_from < um->nunits ? zero_from : um->nunits, um->nunits, um->done);
    return 0;
}

/* Same servers and parity states (versions aside)? */
static bool same_layout(const struct group_view *a, const struct group_view *b)
{
    if (a->k != b->k || a->m != b->m)
        return false;
    for (int i = 0; i < a->k; i++)
        if (a->dp_server[i] != b->dp_server[i])
            return false;
    for (int j = 0; j < a->m; j++)
        if (a->pp_state[j] != b->pp_state[j] || a->pp_serves[j] != b->pp_serves[j])
            return false;
    return true;
}

void recovery_set_view(struct recovery *rc, const struct group_view *v)
{
    int old_leader = rc->view_leader;
    /* Every place served again (the lost ones admitted): our given-up units
     * are data like any other from now on (parity is rebuilt from them), so
     * we take part in the group's recovery again, as a finished one. */
    bool place_lost = false;
    for (int i = 0; i < v->k; i++)
        if (v->dp_server[i] == -2)
            place_lost = true;
    if (rc->abandoned && !place_lost) {
        rc->abandoned = false;
        rlog(rc, "every place of the group is served again: taking part in its recovery again");
    }
    bool changed = !same_layout(&rc->view, v);
    rc->view = *v;
    rc->view_leader = group_view_leader(v);
    /* Shadows for recovery processes the leader has not seen serve yet,
     * and none for those that stopped. */
    for (int j = 0; j < v->m; j++) {
        bool serving = v->pp_state[j] == GV_PP_SERVING && j != rc->self;
        if (serving && !rc->shadow_valid[j] && unit_map_init(&rc->shadow[j],
                                                             rc->env.p->region_size) == 0) {
            rc->shadow_valid[j] = true;
            mark_known_zero(&rc->shadow[j], first_zero_unit(rc, v->pp_serves[j]));
        } else if (!serving && rc->shadow_valid[j]) {
            unit_map_destroy(&rc->shadow[j]);
            rc->shadow_valid[j] = false;
        }
    }
    /* A batch of an older view may wait for a process that is gone.  (A
     * contribution stays: the leader may have started its batch under this
     * very view before the view reached us; a dead one is replaced by the
     * next batch or released by recovery_tick.) */
    if (rc->batch.active && changed)
        batch_drop(rc, "the group view changed");
    /* Nobody serves a lost DP any more (its data process took its keys
     * back): no leader can finish a contribution, so its holds go now. */
    if (rc->contrib.active && rc->view_leader < 0) {
        rlog(rc, "batch %" PRIu64 " has no leader any more; released", rc->contrib.id);
        contrib_reset(rc);
    }
    if (rc->view_leader == rc->self && old_leader != rc->self)
        rlog(rc, "recovery leader of the group (view %" PRIu64 ")", v->version);
    if (rc->view_leader >= 0 && rc->view_leader != rc->self && old_leader != rc->view_leader)
        pass_needs_on(rc);
    kick(rc, 0);
}

bool recovery_units_ready(struct recovery *rc, uint64_t off, uint64_t len)
{
    return !rc->own_valid || unit_map_covers(&rc->own, off, len);
}

/* Queue unit u for a batch of its own, once.  1 added, 0 already queued,
 * -1 out of memory. */
static int needs_add(struct recovery *rc, size_t u)
{
    for (size_t i = 0; i < rc->nneeds; i++)
        if (rc->needs[i] == u)
            return 0;
    if (rc->nneeds == rc->needs_cap) {
        size_t ncap = rc->needs_cap ? rc->needs_cap * 2 : 64;
        size_t *n = realloc(rc->needs, ncap * sizeof(*n));
        if (!n)
            return -1;
        rc->needs = n;
        rc->needs_cap = ncap;
    }
    rc->needs[rc->nneeds++] = u;
    return 1;
}

/* RK_NEED with ranges r to the leader of our view, if there is one. */
static void send_need(struct recovery *rc, const struct recov_range *r, int n)
{
    if (rc->view_leader < 0 || rc->view_leader == rc->self)
        return;
    struct recov_msg m;
    memset(&m, 0, sizeof(m));
    m.kind = RK_NEED;
    m.nranges = n;
    memcpy(m.ranges, r, (size_t)n * sizeof(*r));
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&m, hdr);
    struct iovec iov[1] = { { hdr, nh } };
    rc->env.to_pp(rc->env.ctx, rc->view_leader, FT_REQUEST, iov, 1);
}

/* The units queued here as NEED frames to the leader of our view (ranges
 * of adjacent units, RECOV_MAX_RANGES a frame); how many units. */
static size_t send_needs(struct recovery *rc)
{
    struct recov_range r[RECOV_MAX_RANGES];
    int n = 0;
    size_t sent = 0;
    uint64_t region = rc->env.p->region_size;
    for (size_t i = 0; i < rc->nneeds; i++) {
        uint64_t off = (uint64_t)rc->needs[i] * RECOV_UNIT;
        if (off >= region)
            continue;
        uint32_t len = (uint32_t)(region - off < RECOV_UNIT ? region - off : RECOV_UNIT);
        if (n > 0 && r[n - 1].off + r[n - 1].len == off &&
            r[n - 1].len <= UINT32_MAX - RECOV_UNIT) {
            r[n - 1].len += len;
        } else {
            if (n == RECOV_MAX_RANGES) {
                send_need(rc, r, n);
                n = 0;
            }
            r[n++] = (struct recov_range){ off, len };
        }
        sent++;
    }
    if (n > 0)
        send_need(rc, r, n);
    return sent;
}

/* Another process leads now: the units queued here go to it, and the
 * queue empties (only a leader works from it).  Requests we queued as the
 * leader (ours, or passed on to us), or while no one led, would otherwise
 * wait for its background walk.  Some may be done already (units of other
 * processes cannot be told from here): the new leader drops those. */
static void pass_needs_on(struct recovery *rc)
{
    size_t sent = send_needs(rc);
    rc->nneeds = 0;
    if (sent > 0)
        rlog(rc, "%zu requested unit(s) passed on to the new leader, parity %d", sent,
             rc->view_leader);
}

/* Not leading: what recovery_need queued since the last pass-on is ours,
 * each asked of the leader once already.  A NEED lost with a dropped link
 * would leave its reads waiting for the leader's background walk, so the
 * units still missing here are asked again (recovery_tick, once a second;
 * the leader queues a unit once, and drops it once rebuilt). */
static void resend_needs(struct recovery *rc)
{
    if (rc->view_leader < 0 || rc->view_leader == rc->self || !rc->own_valid)
        return;
    size_t keep = 0;
    for (size_t i = 0; i < rc->nneeds; i++)
        if (rc->needs[i] < rc->own.nunits && !unit_map_has(&rc->own, rc->needs[i]))
            rc->needs[keep++] = rc->needs[i];
    rc->nneeds = keep;
    size_t sent = send_needs(rc);
    if (sent > 0 && rc->debug)
        rlog(rc, "%zu requested unit(s) still missing: asked of parity %d again", sent,
             rc->view_leader);
}

void recovery_need(struct recovery *rc, uint64_t off, uint64_t len)
{
    if (!rc->own_valid || len == 0 || off >= rc->own.region_size)
        return;
    if (len > rc->own.region_size - off)
        len = rc->own.region_size - off;
    size_t first = (size_t)(off / RECOV_UNIT), last = (size_t)((off + len - 1) / RECOV_UNIT);
    for (size_t u = first; u <= last && u < rc->own.nunits; u++) {
        if (unit_map_has(&rc->own, u))
            continue;
        int added = needs_add(rc, u);
        if (added < 0)
            return;
        rc->units_requested += (uint64_t)added;
    }
    if (rc->view_leader == rc->self) {
        if (!rc->batch.active)
            kick(rc, 0);
        return;
    }
    /* Not the leader: pass the request on (our link to it). */
    struct recov_range r = { (uint64_t)first * RECOV_UNIT, 0 };
    uint64_t end = (uint64_t)(last + 1) * RECOV_UNIT;
    if (end > rc->own.region_size)
        end = rc->own.region_size;
    r.len = (uint32_t)(end - r.off);
    send_need(rc, &r, 1);
}

void recovery_abandon(struct recovery *rc)
{
    /* Nothing missing (a resent word after the units were given up, or a
     * recovery that finished meanwhile): nothing to give up. */
    if (!rc->own_valid || rc->abandoned || rc->own.done == rc->own.nunits)
        return;
    size_t missing = 0;
    for (size_t u = unit_map_next_missing(&rc->own, 0); u < rc->own.nunits;
         u = unit_map_next_missing(&rc->own, u + 1)) {
        rc->env.zero(rc->env.ctx, (uint64_t)u * RECOV_UNIT, unit_map_unit_len(&rc->own, u));
        unit_map_set(&rc->own, u);
        missing++;
    }
    rc->abandoned = true;
    batch_drop(rc, "recovery abandoned");
    rc->ahead.active = false;
    contrib_reset(rc);
    rc->nneeds = 0;
    rlog(rc, "dp %d: %zu units that cannot be rebuilt are given up (zero); this process takes "
         "no further part in the group's recovery", rc->serving, missing);
    rc->env.arrived(rc->env.ctx);
}

void recovery_on_message(struct recovery *rc, uint16_t type, const uint8_t *payload,
                         uint32_t len)
{
    struct recov_msg m;
    if (rc->abandoned)
        return;
    if (recov_decode(payload, len, &m) < 0) {
        rlog(rc, "malformed recovery message of %" PRIu32 " bytes; ignored", len);
        return;
    }
    switch (m.kind) {
    case RK_DATA:
        contrib_on_data(rc, &m);
        break;
    case RK_BATCH:
        contrib_on_batch(rc, &m);
        break;
    case RK_RESIDUAL:
        leader_take_residual(rc, m.id, (int)m.who, m.bytes, m.nbytes);
        break;
    case RK_HAVE:
        if (batch_leader(m.id) == rc->self)
            leader_take_have(rc, &m);
        break;
    case RK_DECODED:
        if ((int)m.who == rc->serving)
            install_units(rc, m.ranges, m.nranges, m.bytes);
        break;
    case RK_NEED:
        /* The units of another recovery process: queue them by unit; the
         * pattern decides what a batch rebuilds.  Also with no leader in
         * our view yet (we may be about to lead: the sender's view is
         * ahead of ours); a process that then leads passes them on. */
        if (rc->view_leader == rc->self || rc->view_leader < 0) {
            for (int i = 0; i < m.nranges; i++)
                for (uint64_t x = 0; x < m.ranges[i].len; x += RECOV_UNIT)
                    if (needs_add(rc, (size_t)((m.ranges[i].off + x) / RECOV_UNIT)) < 0)
                        return;
            if (rc->view_leader == rc->self && !rc->batch.active)
                kick(rc, 0);
        }
        break;
    default:
        break;
    }
}

void recovery_tick(struct recovery *rc)
{
    if (rc->contrib.active && mono_ms() - rc->contrib.started_ms > BATCH_TIMEOUT_MS) {
        rlog(rc, "batch %" PRIu64 " never completed here; released", rc->contrib.id);
        contrib_reset(rc);
    }
    resend_needs(rc);
}

uint64_t recovery_rebuild_us(const struct recovery *rc)
{
    if (!rc->own_valid || !rc->first_batch_us)
        return 0;
    uint64_t end = rc->complete_logged ? rc->serving_since_us + rc->complete_us : mono_us();
    return end > rc->first_batch_us ? end - rc->first_batch_us : 0;
}

uint64_t recovery_elapsed_us(const struct recovery *rc)
{
    if (!rc->own_valid)
        return 0;
    return rc->complete_logged ? rc->complete_us : mono_us() - rc->serving_since_us;
}

void recovery_progress(const struct recovery *rc, size_t *done, size_t *total,
                       uint64_t *bytes)
{
    *done = rc->own_valid ? rc->own.done : 0;
    *total = rc->own_valid ? rc->own.nunits : 0;
    *bytes = rc->recovered_bytes;
}
