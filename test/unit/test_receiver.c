/* test_receiver.c - unit tests for repl/receiver.c (Check framework): the
 * receiving end of replication that parity processes and backups share.
 *
 * The tests play a sender: they encode records with rec_encode and feed
 * them to a repl_source, which applies them into a toy backup (a list of
 * the xids and values it stored), so nothing of cocytus is involved.  They
 * check in-order receipt, duplicates, every way a stream diverges, that
 * nothing is applied beyond the stable xid, truncation, and that a failing
 * apply function stops application.  A second group runs a repl_receiver
 * on a real link over 127.0.0.1: ACKs, STABLE frames, refusal of a
 * diverged sender and of senders of the wrong role or index. */
#include "receiver.h"

#include <check.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "link.h"
#include "unit_loop.h"

#define MAX_STORED 64
#define VALUE_MAX 32

/* ---- building records ---- */

struct built {
    uint8_t *enc;
    size_t len;
};

/* Record xid carrying stable, one PUT op and the value "v<xid>". */
static struct built build(uint64_t xid, uint64_t stable)
{
    static const char key[] = "key";
    char value[VALUE_MAX];
    int n = snprintf(value, sizeof(value), "v%llu", (unsigned long long)xid);
    struct rec_op op = { .type = ROP_PUT, .key = key, .nkey = 3, .nbytes = (uint32_t)n };
    struct record r = { .xid = xid, .stable_xid = stable, .nops = 1, .ops = &op,
                        .data_len = (uint32_t)n, .data = (const uint8_t *)value };
    struct built b;
    b.len = rec_encoded_size(&r);
    b.enc = malloc(b.len);
    ck_assert_ptr_nonnull(b.enc);
    rec_encode(&r, b.enc);
    return b;
}

static enum repl_rx receive(struct repl_source *s, uint64_t xid, uint64_t stable,
                            uint64_t *got_stable)
{
    struct built b = build(xid, stable);
    enum repl_rx rx = repl_source_receive(s, b.enc, b.len, got_stable);
    free(b.enc);
    return rx;
}

/* Receive xids from..to, each declaring stable, all expected BUFFERED. */
static void receive_run(struct repl_source *s, uint64_t from, uint64_t to, uint64_t stable)
{
    uint64_t got;
    for (uint64_t x = from; x <= to; x++)
        ck_assert_int_eq(receive(s, x, stable, &got), REPL_RX_BUFFERED);
}

/* ---- a toy backup: what apply stored ---- */

struct store {
    int count;
    uint64_t xids[MAX_STORED];
    char values[MAX_STORED][VALUE_MAX];
    uint64_t fail_at;          /* refuse this xid (0: never) */
    bool fail_with_reason;     /* and say why through the source */
    struct repl_source *src;
};

static int store_apply(void *ctx, const struct record *r)
{
    struct store *st = ctx;
    if (r->xid == st->fail_at) {
        if (st->fail_with_reason)
            return repl_source_mark_diverged(st->src, r->xid, "no room for the value");
        return -1;
    }
    ck_assert_int_lt(st->count, MAX_STORED);
    ck_assert_uint_lt(r->data_len, VALUE_MAX);
    st->xids[st->count] = r->xid;
    memcpy(st->values[st->count], r->data, r->data_len);
    st->values[st->count][r->data_len] = '\0';
    st->count++;
    return 0;
}

static void store_init(struct store *st, struct repl_source *src)
{
    memset(st, 0, sizeof(*st));
    st->src = src;
}

static bool why_has(const struct repl_source *s, const char *text)
{
    return strstr(s->why, text) != NULL;
}

/* ---- receiving ---- */

START_TEST(test_in_order)
{
    struct repl_source s;
    uint64_t stable = 99;
    repl_source_init(&s);
    ck_assert_int_eq(receive(&s, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_uint_eq(stable, 0);
    ck_assert_int_eq(receive(&s, 2, 1, &stable), REPL_RX_BUFFERED);
    ck_assert_uint_eq(stable, 1);
    ck_assert_int_eq(receive(&s, 3, 1, &stable), REPL_RX_BUFFERED);
    ck_assert_uint_eq(s.received_xid, 3);
    ck_assert_uint_eq(s.applied_xid, 0);
    ck_assert_uint_eq(s.stable_xid, 0);      /* receive does not apply or commit */
    ck_assert_uint_eq(s.buffer.count, 3);
    ck_assert(!s.diverged);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_duplicates)
{
    struct repl_source s;
    struct store st;
    uint64_t stable;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 3, 0);
    ck_assert_int_eq(receive(&s, 3, 2, &stable), REPL_RX_DUPLICATE);
    ck_assert_uint_eq(stable, 0);
    ck_assert_int_eq(receive(&s, 1, 0, &stable), REPL_RX_DUPLICATE);
    ck_assert_uint_eq(s.received_xid, 3);
    ck_assert_uint_eq(s.buffer.count, 3);
    ck_assert_int_eq(repl_source_apply(&s, 2, store_apply, &st), 0);
    ck_assert_int_eq(receive(&s, 2, 1, &stable), REPL_RX_DUPLICATE);   /* already applied */
    ck_assert_int_eq(st.count, 2);
    ck_assert(!s.diverged);
    repl_source_destroy(&s);
}
END_TEST

/* ---- divergence ---- */

START_TEST(test_gap_diverges)
{
    struct repl_source s;
    struct store st;
    uint64_t stable;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 2, 0);
    ck_assert_int_eq(receive(&s, 5, 0, &stable), REPL_RX_REFUSED);
    ck_assert(s.diverged);
    ck_assert(why_has(&s, "xid 5: records 3..4 are missing"));
    ck_assert_uint_eq(s.received_xid, 2);
    /* Nothing more is taken or applied, not even the missing record. */
    ck_assert_int_eq(receive(&s, 3, 0, &stable), REPL_RX_REFUSED);
    ck_assert_int_eq(receive(&s, 1, 0, &stable), REPL_RX_REFUSED);
    ck_assert_int_eq(repl_source_apply(&s, 2, store_apply, &st), -1);
    ck_assert_int_eq(st.count, 0);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_stable_not_below_own_diverges)
{
    struct repl_source s;
    uint64_t stable;
    repl_source_init(&s);
    ck_assert_int_eq(receive(&s, 1, 1, &stable), REPL_RX_REFUSED);
    ck_assert(why_has(&s, "claims stable xid 1, not below its own"));
    ck_assert_uint_eq(s.buffer.count, 0);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_malformed_diverges)
{
    struct repl_source s;
    uint64_t stable;
    struct built b = build(1, 0);
    repl_source_init(&s);
    ck_assert_int_eq(repl_source_receive(&s, b.enc, b.len - 1, &stable), REPL_RX_REFUSED);
    ck_assert(why_has(&s, "xid 1: malformed record"));
    ck_assert_int_eq(repl_source_receive(&s, b.enc, b.len, &stable), REPL_RX_REFUSED);
    free(b.enc);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_stable_beyond_received_diverges)
{
    struct repl_source s;
    struct store st;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 2, 0);
    ck_assert_int_eq(repl_source_apply(&s, 3, store_apply, &st), -1);
    ck_assert(s.diverged);
    ck_assert(why_has(&s, "xid 3: declared stable but only 2 was received"));
    ck_assert_int_eq(st.count, 0);
    ck_assert_uint_eq(s.applied_xid, 0);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_mark_diverged)
{
    struct repl_source s;
    uint64_t stable;
    repl_source_init(&s);
    ck_assert_int_eq(repl_source_mark_diverged(&s, 7, "checksum %s", "mismatch"), -1);
    ck_assert_str_eq(s.why, "xid 7: checksum mismatch");
    ck_assert_int_eq(receive(&s, 1, 0, &stable), REPL_RX_REFUSED);
    repl_source_destroy(&s);
}
END_TEST

/* ---- applying ---- */

START_TEST(test_apply_up_to_stable)
{
    struct repl_source s;
    struct store st;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 5, 0);
    ck_assert_int_eq(repl_source_apply(&s, 0, store_apply, &st), 0);
    ck_assert_int_eq(st.count, 0);
    ck_assert_int_eq(repl_source_apply(&s, 3, store_apply, &st), 0);
    ck_assert_int_eq(st.count, 3);
    for (int i = 0; i < 3; i++) {
        char want[VALUE_MAX];
        snprintf(want, sizeof(want), "v%d", i + 1);
        ck_assert_uint_eq(st.xids[i], (uint64_t)i + 1);
        ck_assert_str_eq(st.values[i], want);
    }
    ck_assert_uint_eq(s.applied_xid, 3);
    ck_assert_uint_eq(s.stable_xid, 3);
    ck_assert_uint_eq(s.buffer.count, 2);
    /* An older stable xid changes nothing and does not lower stable_xid. */
    ck_assert_int_eq(repl_source_apply(&s, 1, store_apply, &st), 0);
    ck_assert_int_eq(st.count, 3);
    ck_assert_uint_eq(s.stable_xid, 3);
    ck_assert_int_eq(repl_source_apply(&s, 5, store_apply, &st), 0);
    ck_assert_int_eq(st.count, 5);
    ck_assert_uint_eq(s.applied_xid, 5);
    ck_assert_uint_eq(s.buffer.count, 0);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_apply_failure_with_reason_stops)
{
    struct repl_source s;
    struct store st;
    repl_source_init(&s);
    store_init(&st, &s);
    st.fail_at = 3;
    st.fail_with_reason = true;
    receive_run(&s, 1, 5, 0);
    ck_assert_int_eq(repl_source_apply(&s, 5, store_apply, &st), -1);
    ck_assert_int_eq(st.count, 2);
    ck_assert_uint_eq(s.applied_xid, 2);
    ck_assert_uint_eq(s.buffer.count, 3);    /* the failed record stays */
    ck_assert_str_eq(s.why, "xid 3: no room for the value");
    st.fail_at = 0;
    ck_assert_int_eq(repl_source_apply(&s, 5, store_apply, &st), -1);
    ck_assert_int_eq(st.count, 2);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_apply_failure_without_reason_stops)
{
    struct repl_source s;
    struct store st;
    repl_source_init(&s);
    store_init(&st, &s);
    st.fail_at = 1;
    receive_run(&s, 1, 2, 0);
    ck_assert_int_eq(repl_source_apply(&s, 2, store_apply, &st), -1);
    ck_assert_int_eq(st.count, 0);
    ck_assert(s.diverged);
    ck_assert_str_eq(s.why, "xid 1: could not be applied");
    repl_source_destroy(&s);
}
END_TEST

/* ---- truncation ---- */

START_TEST(test_truncate_after)
{
    struct repl_source s;
    struct store st;
    uint64_t stable;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 5, 0);
    ck_assert_int_eq(repl_source_apply(&s, 2, store_apply, &st), 0);
    ck_assert_int_eq(repl_source_truncate_after(&s, 3), 0);
    ck_assert_uint_eq(s.received_xid, 3);
    ck_assert_uint_eq(s.buffer.count, 1);
    ck_assert_int_eq(repl_source_truncate_after(&s, 1), -1);   /* 2 is applied */
    ck_assert_uint_eq(s.received_xid, 3);
    ck_assert_uint_eq(s.buffer.count, 1);
    /* xid 4 again, now with other contents, and the stream goes on. */
    ck_assert_int_eq(receive(&s, 4, 3, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(repl_source_apply(&s, stable, store_apply, &st), 0);
    ck_assert_uint_eq(s.applied_xid, 3);
    ck_assert_int_eq(repl_source_apply(&s, 4, store_apply, &st), 0);
    ck_assert_int_eq(st.count, 4);
    ck_assert(!s.diverged);
    repl_source_destroy(&s);
}
END_TEST

START_TEST(test_truncate_lowers_stable)
{
    struct repl_source s;
    struct store st;
    repl_source_init(&s);
    store_init(&st, &s);
    receive_run(&s, 1, 4, 0);
    ck_assert_int_eq(repl_source_apply(&s, 1, store_apply, &st), 0);
    s.stable_xid = 4;   /* as if declared stable and not yet applied */
    ck_assert_int_eq(repl_source_truncate_after(&s, 2), 0);
    ck_assert_uint_eq(s.stable_xid, 2);
    repl_source_destroy(&s);
}
END_TEST

/* ==== a receiver on a real link ==== */

#define CLUSTER "rxcluster"
#define GROUP 3
#define SECRET "rxsecret"
#define NSOURCES 2

/* The receiving process: sources, their stores, the receiver, a listener. */
struct rx_side {
    struct event_base *base;
    struct repl_source src[NSOURCES];
    struct store store[NSOURCES];
    struct repl_receiver *rx;
    struct link_listener *ll;
    bool logged_divergence;    /* a "DIVERGED: primary 0" line was logged */
};

/* The sending process: one connector. */
struct tx_side {
    struct link *link;
    int ups;
    int downs;
    uint64_t last_ack;
    int acks;
};

struct fixture {
    struct rx_side r;
    struct tx_side t;
};

static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct rx_side *r = owner;
    return repl_source_apply(&r->src[index], stable, store_apply, &r->store[index]);
}

static void hook_log(void *owner, const char *line)
{
    struct rx_side *r = owner;
    if (strstr(line, "DIVERGED: primary 0 ") != NULL)
        r->logged_divergence = true;
}

static void rx_start(struct rx_side *r)
{
    struct repl_source *sources[NSOURCES];
    r->base = event_base_new();
    ck_assert_ptr_nonnull(r->base);
    for (int i = 0; i < NSOURCES; i++) {
        repl_source_init(&r->src[i]);
        store_init(&r->store[i], &r->src[i]);
        sources[i] = &r->src[i];
    }
    struct repl_receiver_config cfg = {
        .base = r->base,
        .sender_role = LINK_ROLE_PRIMARY,
        .nsources = NSOURCES,
        .sources = sources,
        .tag = "primary",
        .noun = "primary",
        .wrong_role = "a backup takes links from primaries only",
        .no_such = "no such primary",
        .hooks = { .apply = hook_apply, .log = hook_log },
        .owner = r,
    };
    r->rx = repl_receiver_new(&cfg);
    ck_assert_ptr_nonnull(r->rx);
    r->ll = link_listen(r->base, "127.0.0.1", 0, CLUSTER, GROUP, SECRET,
                        repl_receiver_accept, r->rx);
    ck_assert_ptr_nonnull(r->ll);
}

static void tx_up(struct link *l, uint64_t peer_xid, void *ctx)
{
    struct tx_side *t = ctx;
    t->ups++;
}

static void tx_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len,
                     void *ctx)
{
    struct tx_side *t = ctx;
    if (type != FT_ACK || len != 8)
        return;
    uint64_t xid = 0;
    for (int i = 7; i >= 0; i--)
        xid = (xid << 8) | payload[i];
    t->last_ack = xid;
    t->acks++;
}

static void tx_down(struct link *l, const char *why, void *ctx)
{
    struct tx_side *t = ctx;
    t->downs++;
}

static const struct link_callbacks tx_callbacks = {
    .on_up = tx_up,
    .on_frame = tx_frame,
    .on_down = tx_down,
};

static void tx_connect(struct fixture *f, uint8_t role, uint32_t index)
{
    struct link_identity me;
    memset(&me, 0, sizeof(me));
    snprintf(me.cluster, sizeof(me.cluster), "%s", CLUSTER);
    me.group = GROUP;
    me.role = role;
    me.index = index;
    f->t.link = link_connect(f->r.base, "127.0.0.1", link_listener_port(f->r.ll), &me, SECRET,
                             &tx_callbacks, &f->t);
    ck_assert_ptr_nonnull(f->t.link);
}

static void fixture_start(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    rx_start(&f->r);
}

static void fixture_stop(struct fixture *f)
{
    if (f->t.link != NULL)
        link_close(f->t.link);
    link_listener_free(f->r.ll);
    repl_receiver_free(f->r.rx);
    for (int i = 0; i < NSOURCES; i++)
        repl_source_destroy(&f->r.src[i]);
    event_base_free(f->r.base);
}

static void send_record(struct fixture *f, uint64_t xid, uint64_t stable)
{
    struct built b = build(xid, stable);
    ck_assert_int_eq(link_send(f->t.link, FT_RECORD, b.enc, (uint32_t)b.len), 0);
    free(b.enc);
}

static void send_stable(struct fixture *f, uint64_t stable)
{
    uint8_t buf[8];
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(stable >> (8 * i));
    ck_assert_int_eq(link_send(f->t.link, FT_STABLE, buf, sizeof(buf)), 0);
}

static bool tx_is_up(void *arg)
{
    struct fixture *f = arg;
    return f->t.ups > 0 && link_is_up(f->t.link);
}

struct ack_wait {
    struct fixture *f;
    uint64_t xid;
};

static bool acked(void *arg)
{
    struct ack_wait *w = arg;
    return w->f->t.last_ack >= w->xid;
}

static bool source1_applied_3(void *arg)
{
    struct fixture *f = arg;
    return f->r.src[1].applied_xid >= 3;
}

static bool tx_went_down(void *arg)
{
    struct fixture *f = arg;
    return f->t.downs > 0;
}

struct error_wait {
    struct fixture *f;
    const char *want;
};

static bool tx_error_has(void *arg)
{
    struct error_wait *w = arg;
    return strstr(link_last_error(w->f->t.link), w->want) != NULL;
}

START_TEST(test_link_acks_and_applies)
{
    struct fixture f;
    fixture_start(&f);
    ck_assert_uint_eq(repl_receiver_welcomed_xid(f.r.rx, 1), UINT64_MAX);   /* no link */
    tx_connect(&f, LINK_ROLE_PRIMARY, 1);
    ck_assert(run_until(f.r.base, tx_is_up, &f, 3000));
    send_record(&f, 1, 0);
    send_record(&f, 2, 1);
    send_record(&f, 3, 2);
    send_record(&f, 3, 2);   /* a duplicate is acked again */
    struct ack_wait w = { &f, 3 };
    ck_assert(run_until(f.r.base, acked, &w, 3000));
    ck_assert_uint_eq(f.r.src[1].received_xid, 3);
    /* What the WELCOME said, not what arrived since (engine_parity.c's
     * "prepare ... gone" asks whether the sender learned it lost a state). */
    ck_assert_uint_eq(repl_receiver_welcomed_xid(f.r.rx, 1), 0);
    ck_assert_uint_eq(f.r.src[1].applied_xid, 2);   /* piggybacked stable xid */
    ck_assert_int_eq(f.r.store[0].count, 0);
    send_stable(&f, 3);
    ck_assert(run_until(f.r.base, source1_applied_3, &f, 3000));
    ck_assert_int_eq(f.r.store[1].count, 3);
    struct repl_peer_stats ps;
    repl_receiver_peer_stats(f.r.rx, 1, &ps);
    ck_assert(ps.link_up);
    ck_assert_uint_eq(ps.records, 4);
    ck_assert_uint_eq(ps.duplicates, 1);
    /* The four records left in one send(), so they arrive in one read
     * batch (loopback does not split 200 bytes), which is one cumulative
     * ACK; the tx side saw exactly what the receiver counted. */
    ck_assert_uint_eq(ps.acks, f.t.acks);
    ck_assert_uint_lt(ps.acks, ps.records);
    repl_receiver_stats_reset(f.r.rx);
    repl_receiver_peer_stats(f.r.rx, 1, &ps);
    ck_assert_uint_eq(ps.records, 0);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_link_diverged_sender_refused)
{
    struct fixture f;
    fixture_start(&f);
    tx_connect(&f, LINK_ROLE_PRIMARY, 0);
    ck_assert(run_until(f.r.base, tx_is_up, &f, 3000));
    send_record(&f, 1, 0);
    send_record(&f, 3, 0);   /* 2 is missing */
    ck_assert(run_until(f.r.base, tx_went_down, &f, 3000));
    ck_assert(f.r.src[0].diverged);
    ck_assert(f.r.logged_divergence);
    ck_assert_uint_eq(f.t.last_ack, 1);
    /* The connector redials and is turned away with the reason. */
    struct error_wait w = { &f, "primary 0 diverged at xid 3: records 2..2 are missing" };
    ck_assert(run_until(f.r.base, tx_error_has, &w, 5000));
    fixture_stop(&f);
}
END_TEST

struct drop_wait {
    struct fixture *f;
    uint64_t frames;
};

static bool dropped_before_start(void *arg)
{
    struct drop_wait *w = arg;
    struct repl_peer_stats ps;
    repl_receiver_peer_stats(w->f->r.rx, 0, &ps);
    return ps.before_start >= w->frames;
}

/* A receiver emptied to be rebuilt (repl_source_await_start) drops what the
 * old stream still sends, rather than taking it for a gap and refusing the
 * sender for good; the new stream's start (repl_source_reset) takes
 * records again. */
START_TEST(test_link_awaiting_start_drops_old_stream)
{
    struct fixture f;
    fixture_start(&f);
    tx_connect(&f, LINK_ROLE_PRIMARY, 0);
    ck_assert(run_until(f.r.base, tx_is_up, &f, 3000));
    send_record(&f, 1, 0);
    send_record(&f, 2, 1);
    struct ack_wait w = { &f, 2 };
    ck_assert(run_until(f.r.base, acked, &w, 3000));
    repl_source_await_start(&f.r.src[0]);
    send_record(&f, 3, 2);
    send_stable(&f, 3);
    struct drop_wait d = { &f, 2 };
    ck_assert(run_until(f.r.base, dropped_before_start, &d, 3000));
    ck_assert(!f.r.src[0].diverged);
    ck_assert_uint_eq(f.r.src[0].received_xid, 0);
    ck_assert_uint_eq(f.t.last_ack, 2);
    ck_assert_int_eq(f.t.downs, 0);
    /* The new stream starts after xid 10. */
    repl_source_reset(&f.r.src[0], 10);
    send_record(&f, 11, 10);
    struct ack_wait w2 = { &f, 11 };
    ck_assert(run_until(f.r.base, acked, &w2, 3000));
    ck_assert(!f.r.src[0].diverged);
    ck_assert_uint_eq(f.r.src[0].received_xid, 11);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_link_wrong_role_refused)
{
    struct fixture f;
    fixture_start(&f);
    tx_connect(&f, LINK_ROLE_DATA, 0);
    struct error_wait w = { &f, "a backup takes links from primaries only" };
    ck_assert(run_until(f.r.base, tx_error_has, &w, 3000));
    ck_assert_int_eq(f.t.ups, 0);
    fixture_stop(&f);
}
END_TEST

START_TEST(test_link_unknown_index_refused)
{
    struct fixture f;
    fixture_start(&f);
    tx_connect(&f, LINK_ROLE_PRIMARY, NSOURCES);
    struct error_wait w = { &f, "no such primary" };
    ck_assert(run_until(f.r.base, tx_error_has, &w, 3000));
    ck_assert_int_eq(f.t.ups, 0);
    fixture_stop(&f);
}
END_TEST

static Suite *receiver_suite(void)
{
    Suite *s = suite_create("receiver");
    TCase *rx = tcase_create("receive");
    TCase *div = tcase_create("divergence");
    TCase *apply = tcase_create("apply");
    TCase *links = tcase_create("links");

    tcase_add_test(rx, test_in_order);
    tcase_add_test(rx, test_duplicates);
    tcase_add_test(div, test_gap_diverges);
    tcase_add_test(div, test_stable_not_below_own_diverges);
    tcase_add_test(div, test_malformed_diverges);
    tcase_add_test(div, test_stable_beyond_received_diverges);
    tcase_add_test(div, test_mark_diverged);
    tcase_add_test(apply, test_apply_up_to_stable);
    tcase_add_test(apply, test_apply_failure_with_reason_stops);
    tcase_add_test(apply, test_apply_failure_without_reason_stops);
    tcase_add_test(apply, test_truncate_after);
    tcase_add_test(apply, test_truncate_lowers_stable);
    tcase_add_test(links, test_link_acks_and_applies);
    tcase_add_test(links, test_link_diverged_sender_refused);
    tcase_add_test(links, test_link_awaiting_start_drops_old_stream);
    tcase_add_test(links, test_link_wrong_role_refused);
    tcase_add_test(links, test_link_unknown_index_refused);
    tcase_set_timeout(links, 30);
    suite_add_tcase(s, rx);
    suite_add_tcase(s, div);
    suite_add_tcase(s, apply);
    suite_add_tcase(s, links);
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(receiver_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
