/*
 * Unit tests for repl/link.c: acceptor and connector in one process, on one
 * event loop, over 127.0.0.1 (listener on port 0).
 *
 * Besides real link-to-link cases (handshake, rejections, frames both ways,
 * reconnects, closing from inside callbacks), a "raw" plain socket plays
 * one side by hand, byte by byte as docs/wire-format.md describes it: it
 * answers the CHALLENGE with a HELLO it builds itself, then sends corrupt
 * frames or garbage.  Every wait is bounded by a deadline.
 *
 * Links on 127.0.0.1 go over the listener's Unix twin (localtwin.c);
 * the "twin" cases check which way a link went, TCP only under
 * COCYTUS_LINK_TCP_ONLY, and a twin taken by another user being passed by.
 */
#include "repl/frame.h"
#include "repl/link.h"
#include "repl/localtwin.h"
#include "repl/lookup.h"
#include "repl/siphash.h"
#include "unit_loop.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLUSTER "testcluster"
#define GROUP 7
#define SECRET "s3cret"
#define WELCOME_XID 4242

/* ---- running the loop with a deadline ---- */

static bool never(void *arg)
{
    return false;
}

static void run_for(struct event_base *base, int ms)
{
    run_until(base, never, NULL, ms);
}

/* ---- frames with checkable contents ---- */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Size of frame seq in direction dir: mostly small, now and then large. */
static uint32_t frame_size(int dir, uint32_t seq)
{
    uint64_t h = mix64(((uint64_t)dir << 32) | seq);
    if (seq % 97 == 0)
        return 4;
    if (seq % 2500 == 1250)
        return 100000 + (uint32_t)(h % 150000);
    return 4 + (uint32_t)(h % 300);
}

static uint16_t frame_type_for(uint32_t seq)
{
    return (uint16_t)(FT_RECORD + seq % (FT_REPLY - FT_RECORD + 1));
}

static uint8_t frame_byte(uint32_t seq, uint32_t j)
{
    return (uint8_t)(seq * 131 + j * 7 + (j >> 8));
}

static void fill_frame(uint8_t *buf, uint32_t seq, uint32_t len)
{
    buf[0] = (uint8_t)seq;
    buf[1] = (uint8_t)(seq >> 8);
    buf[2] = (uint8_t)(seq >> 16);
    buf[3] = (uint8_t)(seq >> 24);
    for (uint32_t j = 4; j < len; j++)
        buf[j] = frame_byte(seq, j);
}

/* Send frames 0..n-1 of direction dir; odd ones with link_sendv in pieces. */
static void send_frames(struct link *l, int dir, uint32_t n)
{
    uint8_t *buf = malloc(300000);
    for (uint32_t seq = 0; seq < n; seq++) {
        uint32_t len = frame_size(dir, seq);
        fill_frame(buf, seq, len);
        int rc;
        if (seq % 2 == 0) {
            rc = link_send(l, frame_type_for(seq), buf, len);
        } else {
            struct iovec iov[3] = {
                { buf, 4 }, { buf + 4, (len - 4) / 2 }, { buf + 4 + (len - 4) / 2, len - 4 - (len - 4) / 2 }
            };
            rc = link_sendv(l, frame_type_for(seq), iov, 3);
        }
        ck_assert_int_eq(rc, 0);
    }
    free(buf);
}

/* ---- one side's view ---- */

struct side {
    int dir;                /* direction of frames this side receives */
    struct link *link;
    int ups, downs, frames;
    uint64_t up_xid;
    char last_down[256];
    uint32_t next_seq;
    char bad[256];          /* first problem seen in received frames */
    bool close_on_frame;    /* link_close from inside on_frame */
    bool close_on_down;     /* link_close from inside on_down */
    uint8_t last_byte;
    int big;                /* frames over 1 MB seen with the right contents */
    bool peer_closed_at_down;   /* link_peer_closed() in on_down */
    int leases;             /* on_lease calls */
    uint64_t lease_seen;    /* the lease start at the last one */
    bool lease_not_moved;   /* an on_lease that did not move it forward */
};

static void side_up(struct link *l, uint64_t peer_xid, void *ctx)
{
    struct side *s = ctx;
    s->link = l;
    s->ups++;
    s->up_xid = peer_xid;
    s->next_seq = 0;
}

static void side_frame(struct link *l, uint16_t type, const uint8_t *p, uint32_t len, void *ctx)
{
    struct side *s = ctx;
    s->frames++;
    if (s->close_on_frame) {
        link_close(l);
        s->link = NULL;
        /* the payload stays readable until we return (ASan would tell) */
        s->last_byte = len > 0 ? p[len - 1] : 0;
        return;
    }
    if (s->bad[0] != '\0')
        return;
    if (len > (1u << 20)) {
        for (uint32_t j = 0; j < len; j++) {
            if (p[j] != (uint8_t)(j * 13 + 1)) {
                snprintf(s->bad, sizeof(s->bad), "big frame: byte %u differs", j);
                return;
            }
        }
        s->big++;
        s->frames--;
        return;
    }
    uint32_t seq = s->next_seq++;
    if (len != frame_size(s->dir, seq)) {
        snprintf(s->bad, sizeof(s->bad), "frame %u: length %u, expected %u", seq, len,
                 frame_size(s->dir, seq));
        return;
    }
    if (type != frame_type_for(seq)) {
        snprintf(s->bad, sizeof(s->bad), "frame %u: type %u", seq, type);
        return;
    }
    uint32_t got = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24;
    if (got != seq) {
        snprintf(s->bad, sizeof(s->bad), "frame %u carries seq %u", seq, got);
        return;
    }
    for (uint32_t j = 4; j < len; j++) {
        if (p[j] != frame_byte(seq, j)) {
            snprintf(s->bad, sizeof(s->bad), "frame %u: byte %u differs", seq, j);
            return;
        }
    }
}

static void side_down(struct link *l, const char *why, void *ctx)
{
    struct side *s = ctx;
    s->downs++;
    s->peer_closed_at_down = link_peer_closed(l);
    snprintf(s->last_down, sizeof(s->last_down), "%s", why);
    if (s->close_on_down) {
        link_close(l);
        s->link = NULL;
    }
}

static void side_lease(struct link *l, void *ctx)
{
    struct side *s = ctx;
    s->leases++;
    if (link_lease_stamp_ms(l) <= s->lease_seen)
        s->lease_not_moved = true;
    s->lease_seen = link_lease_stamp_ms(l);
}

static const struct link_callbacks side_callbacks = { .on_up = side_up, .on_frame = side_frame,
                                                      .on_down = side_down,
                                                      .on_lease = side_lease };

/* ---- fixture: a listener, its accepted link, a connector ---- */

struct fixture {
    struct event_base *base;
    struct link_listener *ll;
    int port;
    int accepts;
    bool refuse;                /* accept returns false */
    struct link_identity last_peer;
    struct side acc;            /* the accepted link */
    struct side con;            /* the connector */
    struct link *conn;
    const char *host;           /* where the listener is, and the connector dials */
    int want_frames;            /* for acc_has_frames */
};

static bool accept_cb(void *owner, const struct link_identity *peer, struct link *l,
                      struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                      const char **reason)
{
    struct fixture *f = owner;
    f->accepts++;
    f->last_peer = *peer;
    if (f->refuse) {
        *reason = "no room for you";
        return false;
    }
    *cb = side_callbacks;
    *ctx = &f->acc;
    *welcome_xid = WELCOME_XID;
    f->acc.link = l;
    return true;
}

static void fixture_init_at(struct fixture *f, const char *host)
{
    memset(f, 0, sizeof(*f));
    f->host = host;
    f->base = event_base_new();
    ck_assert_ptr_nonnull(f->base);
    f->ll = link_listen(f->base, host, 0, CLUSTER, GROUP, SECRET, accept_cb, f);
    ck_assert_ptr_nonnull(f->ll);
    f->port = link_listener_port(f->ll);
    ck_assert_int_gt(f->port, 0);
    f->acc.dir = 0;   /* receives what the connector sends */
    f->con.dir = 1;
}

static void fixture_init(struct fixture *f)
{
    fixture_init_at(f, "127.0.0.1");
}

static struct link_identity identity(const char *cluster, uint32_t group)
{
    struct link_identity me;
    memset(&me, 0, sizeof(me));
    snprintf(me.cluster, sizeof(me.cluster), "%s", cluster);
    me.group = group;
    me.role = LINK_ROLE_DATA;
    me.index = 3;
    return me;
}

static void fixture_connect(struct fixture *f, const char *cluster, uint32_t group,
                            const char *secret)
{
    struct link_identity me = identity(cluster, group);
    f->conn = link_connect(f->base, f->host, f->port, &me, secret, &side_callbacks, &f->con);
    ck_assert_ptr_nonnull(f->conn);
    f->con.link = f->conn;
}

static void fixture_destroy(struct fixture *f)
{
    if (f->conn != NULL)
        link_close(f->conn);
    if (f->acc.link != NULL)
        link_close(f->acc.link);
    if (f->ll != NULL)
        link_listener_free(f->ll);
    run_for(f->base, 5);
    event_base_free(f->base);
}

static bool both_up(void *arg)
{
    struct fixture *f = arg;
    return f->acc.ups > 0 && f->con.ups > 0;
}

static bool acc_down(void *arg)
{
    struct fixture *f = arg;
    return f->acc.downs > 0;
}

static bool acc_has_frames(void *arg)
{
    struct fixture *f = arg;
    return f->acc.frames >= f->want_frames || f->acc.bad[0] != '\0';
}

static bool con_down(void *arg)
{
    struct fixture *f = arg;
    return f->con.downs > 0;
}

/* ---- link to link ---- */

START_TEST(test_handshake_ok)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(!link_is_up(f.conn));
    ck_assert_int_eq(link_send(f.conn, FT_PING, NULL, 0), -1);   /* not up yet */
    ck_assert(run_until(f.base, both_up, &f, 2000));
    ck_assert_int_eq(f.accepts, 1);
    ck_assert_uint_eq(f.con.up_xid, WELCOME_XID);
    ck_assert_uint_eq(f.acc.up_xid, WELCOME_XID);
    ck_assert(link_is_up(f.conn));
    ck_assert(link_is_up(f.acc.link));
    ck_assert_str_eq(f.last_peer.cluster, CLUSTER);
    ck_assert_uint_eq(f.last_peer.group, GROUP);
    ck_assert_uint_eq(f.last_peer.role, LINK_ROLE_DATA);
    ck_assert_uint_eq(f.last_peer.index, 3);
    const struct link_identity *p = link_peer(f.acc.link);
    ck_assert_uint_eq(p->index, 3);
    ck_assert_str_eq(link_peer(f.conn)->cluster, CLUSTER);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", f.port);
    ck_assert_str_eq(link_peer_name(f.conn), want);
    char local[64];
    snprintf(local, sizeof(local), "local pid %ld", (long)getpid());
    ck_assert_str_eq(link_peer_name(f.acc.link), local);   /* over the twin */
    /* handshake frame types and out-of-range types are refused */
    ck_assert_int_eq(link_send(f.conn, FT_HELLO, "x", 1), -1);
    ck_assert_int_eq(link_send(f.conn, FT_LAST + 1, "x", 1), -1);
    ck_assert_int_eq(link_send(f.conn, FT_PING, NULL, 0), 0);
    fixture_destroy(&f);
}
END_TEST

/* A link with a keepalive keeps its peer hearing from it; once one has
 * arrived, a peer that stops sending is measured silent (link_silent_ms:
 * how coord_lost.c learns of a crashed host, which closes no socket).  A
 * peer that never sent one (built without keepalives) is not judged. */
START_TEST(test_keepalive_silence)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert_uint_eq(link_silent_ms(f.conn, link_now_ms()), 0);   /* not up: 0 */
    ck_assert(run_until(f.base, both_up, &f, 2000));
    link_set_keepalive(f.conn, 50);         /* the connector pings, the acceptor not */
    run_for(f.base, 700);
    uint64_t now = link_now_ms();
    ck_assert_msg(link_silent_ms(f.acc.link, now) < 400, "acceptor heard nothing for %llu ms",
                  (unsigned long long)link_silent_ms(f.acc.link, now));
    ck_assert_uint_eq(link_silent_ms(f.conn, now), 0);   /* no PING from it yet: not judged */
    ck_assert_uint_gt(link_last_heard_ms(f.conn), 0);
    link_set_keepalive(f.conn, 0);          /* the connector falls silent */
    run_for(f.base, 700);
    now = link_now_ms();
    ck_assert_msg(link_silent_ms(f.acc.link, now) >= 550, "acceptor: silent only %llu ms",
                  (unsigned long long)link_silent_ms(f.acc.link, now));
    link_set_keepalive(f.conn, 50);
    run_for(f.base, 300);
    ck_assert(link_silent_ms(f.acc.link, link_now_ms()) < 250);
    fixture_destroy(&f);
}
END_TEST

/* Leases: each end answers the other's clocked PINGs with PONGs. */
START_TEST(test_lease)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert_uint_eq(link_lease_stamp_ms(f.conn), 0);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    link_set_keepalive(f.conn, 50);
    link_set_keepalive(f.acc.link, 50);
    run_for(f.base, 300);
    uint64_t now = link_now_ms();
    uint64_t lease = link_lease_stamp_ms(f.conn), heard = link_peer_stamp_ms(f.acc.link);
    ck_assert_msg(lease > 0 && lease <= now && now - lease < 200,
                  "connector's lease starts %llu ms ago", (unsigned long long)(now - lease));
    ck_assert_msg(heard >= lease && heard <= now, "acceptor heard a clock at %llu, lease %llu",
                  (unsigned long long)heard, (unsigned long long)lease);
    ck_assert_uint_gt(link_lease_stamp_ms(f.acc.link), 0);   /* both ways */
    /* Each PONG that moved the lease forward was told (on_lease): 300 ms
     * of PINGs every 50 ms, about six. */
    ck_assert_msg(f.con.leases >= 3, "on_lease called %d times", f.con.leases);
    ck_assert(!f.con.lease_not_moved && !f.acc.lease_not_moved);
    ck_assert_uint_eq(f.con.lease_seen, link_lease_stamp_ms(f.conn));
    ck_assert(!link_peer_closed(f.acc.link));
    /* Nothing left in flight (a PING or PONG unread before the end hides
     * it, by design: link_peer_closed): the keepalives stop, and what they
     * sent is read. */
    link_set_keepalive(f.conn, 0);
    link_set_keepalive(f.acc.link, 0);
    run_for(f.base, 100);
    /* The connector's process closes: seen by the acceptor before it read
     * the end (its owner may close the link first), and in on_down. */
    link_close(f.conn);
    f.conn = NULL;
    usleep(50 * 1000);
    ck_assert(link_peer_closed(f.acc.link));
    ck_assert(run_until(f.base, acc_down, &f, 2000));
    ck_assert(f.acc.peer_closed_at_down);
    f.acc.link = NULL;   /* freed after on_down */
    fixture_destroy(&f);
}
END_TEST

/* A connection the peer closed keeps the lease it gave (the peer waits it
 * out); the acceptor, closing its end itself, is not "closed by the peer". */
START_TEST(test_lease_kept_on_peer_close)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    link_set_keepalive(f.conn, 50);
    run_for(f.base, 200);
    uint64_t lease = link_lease_stamp_ms(f.conn);
    ck_assert_uint_gt(lease, 0);
    ck_assert(!link_peer_closed(f.acc.link));
    /* A PING unread when the acceptor closes would make its kernel answer
     * with a reset, which ends the lease (on purpose: a reset may come from
     * the path).  So none is in flight at the close. */
    link_set_keepalive(f.conn, 0);
    run_for(f.base, 100);
    link_close(f.acc.link);
    f.acc.link = NULL;
    ck_assert(run_until(f.base, con_down, &f, 2000));
    ck_assert(f.con.peer_closed_at_down);
    ck_assert_uint_ge(link_lease_stamp_ms(f.conn), lease);   /* not zeroed */
    fixture_destroy(&f);
}
END_TEST

struct reject_case {
    const char *cluster;
    uint32_t group;
    const char *secret;
    bool refuse;
    const char *want_error;
};

struct error_wait {
    struct fixture *f;
    const char *want;
    int min_accepts;
};

static bool con_error_seen(void *arg)
{
    struct error_wait *w = arg;
    return strstr(link_last_error(w->f->conn), w->want) != NULL &&
           w->f->accepts >= w->min_accepts;
}

static void check_rejected(const struct reject_case *c)
{
    struct fixture f;
    fixture_init(&f);
    f.refuse = c->refuse;
    fixture_connect(&f, c->cluster, c->group, c->secret);
    struct error_wait w = { &f, c->want_error, c->refuse ? 2 : 0 };
    run_until(f.base, con_error_seen, &w, 3000);
    run_for(f.base, 50);
    ck_assert_int_eq(f.con.ups, 0);
    ck_assert_int_eq(f.acc.ups, 0);
    ck_assert(!link_is_up(f.conn));
    const char *err = link_last_error(f.conn);
    if (strstr(err, c->want_error) == NULL || strstr(err, "rejected") == NULL)
        ck_abort_msg("connector error \"%s\" lacks \"%s\"", err, c->want_error);
    if (c->refuse)
        ck_assert_int_ge(f.accepts, 2);   /* it redialed */
    else
        ck_assert_int_eq(f.accepts, 0);   /* never got past the checks */
    fixture_destroy(&f);
}

START_TEST(test_wrong_secret)
{
    struct reject_case c = { CLUSTER, GROUP, "not the secret", false, "proof" };
    check_rejected(&c);
}
END_TEST

START_TEST(test_wrong_cluster)
{
    struct reject_case c = { "othercluster", GROUP, SECRET, false, "cluster" };
    check_rejected(&c);
}
END_TEST

START_TEST(test_wrong_group)
{
    struct reject_case c = { CLUSTER, GROUP + 1, SECRET, false, "group" };
    check_rejected(&c);
}
END_TEST

START_TEST(test_owner_refuses)
{
    struct reject_case c = { CLUSTER, GROUP, SECRET, true, "no room for you" };
    check_rejected(&c);
}
END_TEST

static bool all_frames_in(void *arg)
{
    struct fixture *f = arg;
    return (f->acc.frames >= 10000 && f->con.frames >= 10000) || f->acc.bad[0] != '\0' ||
           f->con.bad[0] != '\0';
}

static void acc_up_send(struct link *l, uint64_t xid, void *ctx)
{
    side_up(l, xid, ctx);
    send_frames(l, 1, 10000);
}

START_TEST(test_frames_both_ways)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    /* acceptor -> connector: sent right away on the acceptor's side too */
    send_frames(f.acc.link, 1, 10000);
    send_frames(f.conn, 0, 10000);
    ck_assert(link_output_pending(f.conn) > 0);
    ck_assert(run_until(f.base, all_frames_in, &f, 8000));
    ck_assert_msg(f.acc.bad[0] == '\0', "acceptor: %s", f.acc.bad);
    ck_assert_msg(f.con.bad[0] == '\0', "connector: %s", f.con.bad);
    ck_assert_int_eq(f.acc.frames, 10000);
    ck_assert_int_eq(f.con.frames, 10000);
    ck_assert_uint_eq(link_output_pending(f.conn), 0);
    ck_assert_uint_eq(link_output_pending(f.acc.link), 0);
    ck_assert_int_eq(f.acc.downs + f.con.downs, 0);
    fixture_destroy(&f);
}
END_TEST

/* Frames queued in on_up (acceptor side, right behind WELCOME) arrive. */
static bool con_got_all(void *arg)
{
    struct fixture *f = arg;
    return f->con.frames >= 10000 || f->con.bad[0] != '\0';
}

static bool accept_and_send(void *owner, const struct link_identity *peer, struct link *l,
                            struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                            const char **reason)
{
    static const struct link_callbacks sending = { .on_up = acc_up_send, .on_frame = side_frame,
                                                   .on_down = side_down };
    bool ok = accept_cb(owner, peer, l, cb, ctx, welcome_xid, reason);
    *cb = sending;
    return ok;
}

START_TEST(test_frames_from_on_up)
{
    struct fixture f;
    memset(&f, 0, sizeof(f));
    f.base = event_base_new();
    f.ll = link_listen(f.base, "127.0.0.1", 0, CLUSTER, GROUP, SECRET, accept_and_send, &f);
    ck_assert_ptr_nonnull(f.ll);
    f.port = link_listener_port(f.ll);
    f.host = "127.0.0.1";
    f.con.dir = 1;
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, con_got_all, &f, 8000));
    ck_assert_msg(f.con.bad[0] == '\0', "connector: %s", f.con.bad);
    fixture_destroy(&f);
}
END_TEST

/* Frames larger than the buffers' initial and retained sizes, between small
 * ones, both ways. */
START_TEST(test_big_frames)
{
    struct fixture f;
    const uint32_t big = 5u << 20;
    uint8_t *buf = malloc(big);
    for (uint32_t j = 0; j < big; j++)
        buf[j] = (uint8_t)(j * 13 + 1);

    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    for (int round = 0; round < 2; round++) {
        send_frames(f.conn, 0, 50);
        ck_assert_int_eq(link_send(f.conn, FT_RECORD, buf, big - (uint32_t)round), 0);
        ck_assert_int_eq(link_send(f.acc.link, FT_REPLY, buf, big), 0);
        f.want_frames = 50;
        ck_assert(run_until(f.base, acc_has_frames, &f, 5000));
        f.acc.frames = 0;
        f.acc.next_seq = 0;
    }
    for (double end = now_ms() + 5000; (f.acc.big < 2 || f.con.big < 2) && now_ms() < end;)
        run_for(f.base, 5);
    ck_assert_msg(f.acc.bad[0] == '\0', "acceptor: %s", f.acc.bad);
    ck_assert_msg(f.con.bad[0] == '\0', "connector: %s", f.con.bad);
    ck_assert_int_eq(f.acc.big, 2);
    ck_assert_int_eq(f.con.big, 2);
    /* over the limit: refused, the link stays up */
    ck_assert_int_eq(link_send(f.conn, FT_RECORD, buf, FRAME_MAX_PAYLOAD + 1), -1);
    ck_assert(link_is_up(f.conn));
    free(buf);
    fixture_destroy(&f);
}
END_TEST

static bool con_up_twice(void *arg)
{
    struct fixture *f = arg;
    return f->con.ups >= 2 && f->acc.ups >= 2;
}

static bool con_up_thrice(void *arg)
{
    struct fixture *f = arg;
    return f->con.ups >= 3 && f->acc.ups >= 3;
}

START_TEST(test_reconnect)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));

    /* the acceptor closes its side: the connector sees down, redials */
    link_close(f.acc.link);
    f.acc.link = NULL;
    ck_assert(run_until(f.base, con_up_twice, &f, 2000));
    ck_assert_int_eq(f.con.downs, 1);
    ck_assert_int_eq(f.accepts, 2);
    ck_assert_uint_eq(f.con.up_xid, WELCOME_XID);

    /* the acceptor closes its link from inside on_frame */
    f.acc.close_on_frame = true;
    ck_assert_int_eq(link_send(f.conn, FT_PING, "bye", 3), 0);
    ck_assert_int_eq(link_send(f.conn, FT_PING, "more", 4), 0);   /* arrives after close */
    ck_assert(run_until(f.base, con_up_thrice, &f, 2000));
    ck_assert_int_eq(f.con.downs, 2);
    f.acc.close_on_frame = false;

    /* frames flow on the new connection */
    f.acc.frames = 0;
    send_frames(f.conn, 0, 100);
    f.want_frames = 100;
    ck_assert(run_until(f.base, acc_has_frames, &f, 2000));
    run_for(f.base, 10);
    ck_assert_int_eq(f.acc.frames, 100);
    ck_assert_msg(f.acc.bad[0] == '\0', "%s", f.acc.bad);
    fixture_destroy(&f);
}
END_TEST

START_TEST(test_close_in_on_down)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    f.con.close_on_down = true;
    link_close(f.acc.link);
    f.acc.link = NULL;
    ck_assert(run_until(f.base, con_down, &f, 2000));
    f.conn = NULL;   /* closed inside on_down */
    run_for(f.base, 200);
    ck_assert_int_eq(f.accepts, 1);   /* no redial */
    fixture_destroy(&f);
}
END_TEST

START_TEST(test_acceptor_down_on_peer_close)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    link_close(f.conn);
    f.conn = NULL;
    ck_assert(run_until(f.base, acc_down, &f, 2000));
    ck_assert_int_eq(f.acc.downs, 1);
    ck_assert_msg(strstr(f.acc.last_down, "closed") != NULL, "why: %s", f.acc.last_down);
    f.acc.link = NULL;   /* freed after on_down */
    fixture_destroy(&f);
}
END_TEST

START_TEST(test_listener_freed)
{
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    link_listener_free(f.ll);
    f.ll = NULL;
    /* the accepted link lives on */
    send_frames(f.conn, 0, 10);
    f.want_frames = 10;
    ck_assert(run_until(f.base, acc_has_frames, &f, 2000));
    ck_assert_msg(f.acc.bad[0] == '\0', "%s", f.acc.bad);
    /* connector against a closed port: keeps trying, no crash */
    link_close(f.acc.link);
    f.acc.link = NULL;
    struct error_wait w = { &f, "refused", 0 };
    run_until(f.base, con_error_seen, &w, 3000);
    ck_assert_int_eq(f.con.downs, 1);
    ck_assert(!link_is_up(f.conn));
    ck_assert(strstr(link_last_error(f.conn), "refused") != NULL);
    fixture_destroy(&f);
}
END_TEST

/* ---- a plain socket playing one side ---- */

struct raw {
    int fd;
    uint8_t buf[4096];
    size_t len;
    bool eof;
};

static void set_nonblocking(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void raw_connect(struct raw *r, int port)
{
    struct sockaddr_in sa;
    memset(r, 0, sizeof(*r));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(r->fd, 0);
    ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    set_nonblocking(r->fd);
}

static void raw_pump(struct raw *r)
{
    while (!r->eof && r->len < sizeof(r->buf)) {
        ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, 0);
        if (n > 0)
            r->len += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            r->eof = true;   /* closed or reset */
        else
            break;
    }
}

/* Take one complete frame off the front, if there is one. */
static bool raw_take_frame(struct raw *r, struct frame_header *h, uint8_t *payload)
{
    if (r->len < FRAME_HEADER_SIZE)
        return false;
    ck_assert_int_eq(frame_header_decode(r->buf, h), 0);
    if (r->len < FRAME_HEADER_SIZE + h->length)
        return false;
    memcpy(payload, r->buf + FRAME_HEADER_SIZE, h->length);
    ck_assert(frame_payload_ok(h, payload));
    memmove(r->buf, r->buf + FRAME_HEADER_SIZE + h->length,
            r->len - FRAME_HEADER_SIZE - h->length);
    r->len -= FRAME_HEADER_SIZE + h->length;
    return true;
}

static bool raw_has_frame(void *arg)
{
    struct raw *r = arg;
    raw_pump(r);
    if (r->len < FRAME_HEADER_SIZE)
        return r->eof;
    struct frame_header h;
    return frame_header_decode(r->buf, &h) < 0 || r->len >= FRAME_HEADER_SIZE + h.length;
}

static bool raw_closed(void *arg)
{
    struct raw *r = arg;
    raw_pump(r);
    r->len = 0;   /* ignore anything else */
    return r->eof;
}

static void raw_send(struct raw *r, const void *p, size_t n)
{
    ck_assert_int_eq(send(r->fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void raw_send_frame(struct raw *r, uint16_t type, const void *payload, uint32_t len,
                           bool bad_crc)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_header_encode(hdr, type, 0, payload, len);
    if (bad_crc)
        hdr[12] ^= 0x01;
    raw_send(r, hdr, sizeof(hdr));
    if (len > 0)
        raw_send(r, payload, len);
}

static void store32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The HELLO as docs/wire-format.md specifies it, built independently of
 * link.c.  Returns its length. */
static size_t build_hello(uint8_t *out, const uint8_t nonce[16], const char *cluster,
                          uint32_t group, const char *secret)
{
    static const uint8_t kdf0[16] = { 'c', 'o', 'c', 'y', 't', 'u', 's', '-',
                                      'k', 'v', '-', 'k', 'e', 'y', '-', '0' };
    static const uint8_t kdf1[16] = { 'c', 'o', 'c', 'y', 't', 'u', 's', '-',
                                      'k', 'v', '-', 'k', 'e', 'y', '-', '1' };
    uint8_t key[16], msg[128];
    uint64_t k0 = siphash24(kdf0, secret, strlen(secret));
    uint64_t k1 = siphash24(kdf1, secret, strlen(secret));
    for (int i = 0; i < 8; i++) {
        key[i] = (uint8_t)(k0 >> (8 * i));
        key[8 + i] = (uint8_t)(k1 >> (8 * i));
    }
    size_t clen = strlen(cluster), n = 0;
    out[n++] = (uint8_t)clen;
    memcpy(out + n, cluster, clen);
    n += clen;
    store32(out + n, group);
    n += 4;
    out[n++] = LINK_ROLE_PARITY;
    store32(out + n, 1);
    n += 4;
    memcpy(msg, nonce, 16);
    memcpy(msg + 16, out, n);
    uint64_t proof = siphash24(key, msg, 16 + n);
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)(proof >> (8 * i));
    return n;
}

/* Raw client, connected: receive CHALLENGE, return its nonce. */
static void raw_take_challenge(struct fixture *f, struct raw *r, uint8_t nonce[16])
{
    struct frame_header h;
    ck_assert(run_until(f->base, raw_has_frame, r, 2000));
    ck_assert(raw_take_frame(r, &h, nonce));
    ck_assert_uint_eq(h.type, FT_CHALLENGE);
    ck_assert_uint_eq(h.length, 16);
}

/* Raw client: connect over TCP, receive CHALLENGE, return its nonce. */
static void raw_get_challenge(struct fixture *f, struct raw *r, uint8_t nonce[16])
{
    raw_connect(r, f->port);
    raw_take_challenge(f, r, nonce);
}

/* A peer that sent a frame and closed, before this side read it, while
 * this side writes: the write fails first (over a Unix socket it fails at
 * once, where TCP takes it), and the frame must still be delivered before
 * the link goes down.  A coordinator's last "migrate"
 * to a stopped process was lost that way. */
START_TEST(test_frame_before_close_read_after_failed_write)
{
    struct fixture f;
    struct raw r;
    uint8_t nonce[16], hello[128], payload[4096];
    struct frame_header h;

    fixture_init(&f);
    memset(&r, 0, sizeof(r));
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r.fd = localtwin_connect((struct sockaddr *)&sa, f.port);
    ck_assert_int_ge(r.fd, 0);
    raw_take_challenge(&f, &r, nonce);
    size_t n = build_hello(hello, nonce, CLUSTER, GROUP, SECRET);
    raw_send_frame(&r, FT_HELLO, hello, (uint32_t)n, false);
    ck_assert(run_until(f.base, raw_has_frame, &r, 2000));
    ck_assert(raw_take_frame(&r, &h, payload));
    ck_assert_uint_eq(h.type, FT_WELCOME);
    ck_assert_ptr_nonnull(f.acc.link);
    ck_assert(link_is_up(f.acc.link));

    uint32_t len = frame_size(0, 0);
    fill_frame(payload, 0, len);
    raw_send_frame(&r, frame_type_for(0), payload, len, false);
    close(r.fd);
    fill_frame(payload, 0, 4);
    ck_assert_int_eq(link_send(f.acc.link, FT_RECORD, payload, 4), 0);  /* flushed first */
    ck_assert(run_until(f.base, acc_down, &f, 2000));
    ck_assert_str_eq(f.acc.bad, "");
    ck_assert_msg(f.acc.frames == 1, "%d frames delivered; down: %s", f.acc.frames,
                  f.acc.last_down);
    f.acc.link = NULL;   /* an accepted link is finished when it goes down */
    fixture_destroy(&f);
}
END_TEST

START_TEST(test_raw_bad_crc_after_handshake)
{
    struct fixture f;
    struct raw r;
    uint8_t nonce[16], hello[128], payload[4096];
    struct frame_header h;

    fixture_init(&f);
    raw_get_challenge(&f, &r, nonce);
    size_t n = build_hello(hello, nonce, CLUSTER, GROUP, SECRET);
    raw_send_frame(&r, FT_HELLO, hello, (uint32_t)n, false);
    ck_assert(run_until(f.base, raw_has_frame, &r, 2000));
    ck_assert(raw_take_frame(&r, &h, payload));
    ck_assert_uint_eq(h.type, FT_WELCOME);
    ck_assert_uint_eq(h.length, 8);
    ck_assert_uint_eq(payload[0] | payload[1] << 8, WELCOME_XID);
    ck_assert_int_eq(f.accepts, 1);
    ck_assert_uint_eq(f.last_peer.role, LINK_ROLE_PARITY);
    ck_assert_uint_eq(f.last_peer.index, 1);
    ck_assert_int_eq(f.acc.ups, 1);

    /* one good frame, then one with a bad CRC */
    uint8_t frame[8];
    fill_frame(frame, 0, 4);
    ck_assert_uint_eq(frame_size(0, 0), 4);
    raw_send_frame(&r, FT_RECORD, frame, 4, false);
    raw_send_frame(&r, FT_RECORD, "corrupted!", 10, true);
    ck_assert(run_until(f.base, acc_down, &f, 2000));
    ck_assert_int_eq(f.acc.frames, 1);
    ck_assert_msg(strstr(f.acc.last_down, "CRC") != NULL, "why: %s", f.acc.last_down);
    f.acc.link = NULL;
    ck_assert(run_until(f.base, raw_closed, &r, 2000));
    close(r.fd);
    fixture_destroy(&f);
}
END_TEST

START_TEST(test_raw_garbage_instead_of_hello)
{
    struct fixture f;
    struct raw r;
    uint8_t nonce[16];
    fixture_init(&f);
    raw_get_challenge(&f, &r, nonce);
    const char *junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(&r, junk, strlen(junk));
    ck_assert(run_until(f.base, raw_closed, &r, 2000));
    ck_assert_int_eq(f.accepts, 0);
    close(r.fd);

    /* a data frame before the handshake */
    raw_get_challenge(&f, &r, nonce);
    raw_send_frame(&r, FT_RECORD, "early", 5, false);
    ck_assert(run_until(f.base, raw_closed, &r, 2000));
    close(r.fd);

    /* an oversized frame during the handshake */
    raw_get_challenge(&f, &r, nonce);
    uint8_t hdr[FRAME_HEADER_SIZE];
    frame_header_encode_crc(hdr, FT_HELLO, 0, 1u << 20, 0);
    raw_send(&r, hdr, sizeof(hdr));
    ck_assert(run_until(f.base, raw_closed, &r, 2000));
    close(r.fd);

    /* HELLO with a bad proof gets a REJECT, then the close */
    struct frame_header h;
    uint8_t hello[128], payload[4096];
    raw_get_challenge(&f, &r, nonce);
    size_t n = build_hello(hello, nonce, CLUSTER, GROUP, "bad secret");
    raw_send_frame(&r, FT_HELLO, hello, (uint32_t)n, false);
    ck_assert(run_until(f.base, raw_has_frame, &r, 2000));
    ck_assert(raw_take_frame(&r, &h, payload));
    ck_assert_uint_eq(h.type, FT_REJECT);
    payload[h.length] = '\0';
    ck_assert_msg(strstr((char *)payload, "proof") != NULL, "%s", payload);
    ck_assert(run_until(f.base, raw_closed, &r, 2000));
    close(r.fd);

    /* the listener still works afterwards */
    ck_assert_int_eq(f.accepts, 0);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    fixture_destroy(&f);
}
END_TEST

/* A fake acceptor that answers with garbage: the connector drops the
 * connection, logs the reason and redials. */
struct fake_server {
    int lfd;
    int accepted;
};

static bool fake_accepts_twice(void *arg)
{
    struct fake_server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd >= 0) {
        s->accepted++;
        const char *junk = "this is not a frame header at all";
        (void)send(fd, junk, strlen(junk), MSG_NOSIGNAL);
        close(fd);
    }
    return s->accepted >= 2;
}

START_TEST(test_connector_bad_frame)
{
    struct event_base *base = event_base_new();
    struct fake_server s = { -1, 0 };
    struct sockaddr_in sa;
    socklen_t salen = sizeof(sa);
    struct side con;

    memset(&sa, 0, sizeof(sa));
    memset(&con, 0, sizeof(con));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s.lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(s.lfd, 8), 0);
    ck_assert_int_eq(getsockname(s.lfd, (struct sockaddr *)&sa, &salen), 0);
    set_nonblocking(s.lfd);

    struct link_identity me = identity(CLUSTER, GROUP);
    struct link *l = link_connect(base, "127.0.0.1", ntohs(sa.sin_port), &me, SECRET,
                                  &side_callbacks, &con);
    ck_assert_ptr_nonnull(l);
    ck_assert(run_until(base, fake_accepts_twice, &s, 3000));
    run_for(base, 20);
    ck_assert_int_eq(con.ups, 0);
    ck_assert_msg(strstr(link_last_error(l), "magic") != NULL, "error: %s",
                  link_last_error(l));
    link_close(l);
    close(s.lfd);
    run_for(base, 5);
    event_base_free(base);
}
END_TEST

START_TEST(test_bad_arguments)
{
    struct event_base *base = event_base_new();
    struct link_identity me = identity("", GROUP);
    ck_assert_ptr_null(link_connect(base, "127.0.0.1", 1, &me, SECRET, &side_callbacks, NULL));
    me = identity(CLUSTER, GROUP);
    ck_assert_ptr_null(link_connect(base, "127.0.0.1", 0, &me, SECRET, &side_callbacks, NULL));
    ck_assert_ptr_null(link_listen(base, "127.0.0.1", 0, "", GROUP, SECRET, accept_cb, NULL));
    ck_assert_ptr_null(link_listen(base, "not an address", 0, CLUSTER, GROUP, SECRET,
                                   accept_cb, NULL));
    link_close(NULL);
    link_listener_free(NULL);
    event_base_free(base);
}
END_TEST

/* ---- host names: looked up on a thread, answered on the loop ---- */

/* A peer named by a host name: the link looks it up off the loop
 * (LS_RESOLVING) and comes up as with an address. */
START_TEST(test_handshake_by_name)
{
    struct fixture f;
    fixture_init_at(&f, "localhost");
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 3000));
    ck_assert(link_is_up(f.conn));
    fixture_destroy(&f);
}
END_TEST

/* A connector closed while its name is looked up: the lookup is dropped,
 * and its thread's answer later touches nothing freed (ASan build). */
START_TEST(test_close_while_resolving)
{
    struct fixture f;
    fixture_init_at(&f, "localhost");
    for (int i = 0; i < 20; i++) {
        fixture_connect(&f, CLUSTER, GROUP, SECRET);
        run_for(f.base, i % 4);     /* the first dial is from the loop */
        link_close(f.conn);
        f.conn = NULL;
    }
    run_for(f.base, 300);
    /* Each accepted link ended when its connector closed, and freed itself. */
    f.acc.link = NULL;
    fixture_destroy(&f);
}
END_TEST

struct answer {
    int calls, rc;
    bool got_res;
};

static void on_answer(int rc, struct addrinfo *res, void *ctx)
{
    struct answer *a = ctx;
    a->calls++;
    a->rc = rc;
    a->got_res = res != NULL;
    if (res != NULL)
        freeaddrinfo(res);
}

static bool answered(void *arg)
{
    return ((struct answer *)arg)->calls > 0;
}

START_TEST(test_lookup)
{
    struct addrinfo *res = NULL;
    ck_assert_int_eq(lookup_numeric("127.0.0.1", 11211, false, &res), 0);
    ck_assert_ptr_nonnull(res);
    freeaddrinfo(res);
    res = NULL;
    ck_assert_int_eq(lookup_numeric("localhost", 11211, false, &res), EAI_NONAME);

    struct event_base *base = event_base_new();
    struct answer a = { 0 }, never_called = { 0 };
    struct lookup *lk = lookup_start(base, "localhost", 11211, on_answer, &a);
    ck_assert_ptr_nonnull(lk);
    struct lookup *gone = lookup_start(base, "localhost", 11211, on_answer, &never_called);
    ck_assert_ptr_nonnull(gone);
    lookup_cancel(gone);
    ck_assert(run_until(base, answered, &a, 3000));
    run_for(base, 100);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(a.rc, 0);
    ck_assert(a.got_res);
    ck_assert_int_eq(never_called.calls, 0);
    event_base_free(base);
}
END_TEST

/* ---- a name with several addresses ----
 *
 * These need a host name that resolves to two loopback addresses, which
 * only a private /etc/hosts gives: test/integration/multi_address.sh runs
 * this case ("addresses") in a mount namespace of its own with such a file
 * and names the host in TEST_LINK_MULTI_NAME; without it the case is not
 * run at all. */

static const char *multi_name(char first[], char second[], size_t len)
{
    const char *name = getenv("TEST_LINK_MULTI_NAME");
    ck_assert_ptr_nonnull(name);
    struct addrinfo *res = NULL;
    ck_assert_int_eq(lookup_now(name, 0, false, &res), 0);
    int n = 0;
    for (struct addrinfo *ai = res; ai != NULL && n < 2; ai = ai->ai_next) {
        char *out = n == 0 ? first : second;
        ck_assert_int_eq(getnameinfo(ai->ai_addr, ai->ai_addrlen, out, (socklen_t)len, NULL, 0,
                                     NI_NUMERICHOST), 0);
        if (n == 0 || strcmp(first, second) != 0)
            n++;
    }
    freeaddrinfo(res);
    ck_assert_msg(n == 2, "%s resolves to one address only", name);
    return name;
}

/* Listening on a name binds every address it has: a peer whose resolver
 * puts the other one first (a host on two networks) still connects. */
START_TEST(test_listen_every_address)
{
    char first[64], second[64];
    const char *name = multi_name(first, second, sizeof(first));
    for (int i = 0; i < 2; i++) {
        struct fixture f;
        fixture_init_at(&f, name);
        f.host = i == 0 ? first : second;
        fixture_connect(&f, CLUSTER, GROUP, SECRET);
        ck_assert_msg(run_until(f.base, both_up, &f, 3000), "no link to %s's address %s",
                      name, f.host);
        fixture_destroy(&f);
    }
}
END_TEST

/* Dialling a name whose first address refuses: a later attempt dials the
 * next address, and connects. */
START_TEST(test_dial_next_address)
{
    char first[64], second[64];
    const char *name = multi_name(first, second, sizeof(first));
    struct fixture f;
    fixture_init_at(&f, second);    /* nothing listens on the first */
    f.host = name;
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert_msg(run_until(f.base, both_up, &f, 5000), "no link to %s (%s refuses, %s listens)",
                  name, first, second);
    fixture_destroy(&f);
}
END_TEST

/* ---- local twins (localtwin.c) ---- */

/* Which names a listener's address twins to: loopback and the wildcard. */
START_TEST(test_twin_names)
{
    struct sockaddr_in in = { .sin_family = AF_INET };
    struct sockaddr_un un;
    socklen_t len;
    in.sin_addr.s_addr = htonl(0x7f000005);
    ck_assert(localtwin_listen_name((struct sockaddr *)&in, 4100, &un, &len));
    ck_assert_int_eq(un.sun_path[0], '\0');
    ck_assert_int_eq(len - offsetof(struct sockaddr_un, sun_path), 1 + strlen("cocytus-link/127.0.0.5:4100"));
    ck_assert(memcmp(un.sun_path + 1, "cocytus-link/127.0.0.5:4100", 27) == 0);
    in.sin_addr.s_addr = htonl(INADDR_ANY);
    ck_assert(localtwin_listen_name((struct sockaddr *)&in, 80, &un, &len));
    ck_assert(memcmp(un.sun_path + 1, "cocytus-link/*:80", 17) == 0);
    in.sin_addr.s_addr = htonl(0x0a000001);   /* 10.0.0.1: another host's, maybe */
    ck_assert(!localtwin_listen_name((struct sockaddr *)&in, 80, &un, &len));
    ck_assert_int_eq(localtwin_connect((struct sockaddr *)&in, 80), -1);
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    ck_assert(!localtwin_listen_name((struct sockaddr *)&in6, 80, &un, &len));
    in.sin_addr.s_addr = htonl(0x7f000001);
    ck_assert(!localtwin_listen_name((struct sockaddr *)&in, 0, &un, &len));
}
END_TEST

/* A link to a wildcard listener, dialled at 127.0.0.1, goes over the
 * wildcard's twin.  (The other cases' frames all go over twins.) */
START_TEST(test_twin_wildcard)
{
    struct fixture f;
    fixture_init_at(&f, "0.0.0.0");
    f.host = "127.0.0.1";
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    ck_assert(strncmp(link_peer_name(f.acc.link), "local pid ", 10) == 0);
    fixture_destroy(&f);
}
END_TEST

/* COCYTUS_LINK_TCP_ONLY: no twin bound, none dialled. */
START_TEST(test_twin_tcp_only)
{
    setenv(LOCALTWIN_ENV_TCP_ONLY, "1", 1);
    ck_assert(!localtwin_enabled());
    struct fixture f;
    fixture_init(&f);
    fixture_connect(&f, CLUSTER, GROUP, SECRET);
    ck_assert(run_until(f.base, both_up, &f, 2000));
    ck_assert(strncmp(link_peer_name(f.acc.link), "127.0.0.1:", 10) == 0);
    fixture_destroy(&f);
    unsetenv(LOCALTWIN_ENV_TCP_ONLY);
    ck_assert(localtwin_enabled());
}
END_TEST

/* Another user's program holds the twin's name first (abstract names have
 * no owner): the connector must pass it by and dial TCP, where the real
 * listener is.  Without the check it would wait on the squatter for a
 * CHALLENGE that never comes.  Needs root, to be another user. */
START_TEST(test_twin_taken_by_another_user)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_twin_taken_by_another_user: skipped (not root)\n");
        return;
    }
    setenv(LOCALTWIN_ENV_TCP_ONLY, "1", 1);
    struct fixture f;
    fixture_init(&f);          /* TCP only: the name stays free for the squatter */
    unsetenv(LOCALTWIN_ENV_TCP_ONLY);
    struct sockaddr_in in = { .sin_family = AF_INET };
    in.sin_addr.s_addr = htonl(0x7f000001);
    struct sockaddr_un un;
    socklen_t len;
    ck_assert(localtwin_listen_name((struct sockaddr *)&in, f.port, &un, &len));
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char ok = 0;
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (setgid(65534) == 0 && setuid(65534) == 0 && fd >= 0 &&
            bind(fd, (struct sockaddr *)&un, len) == 0 && listen(fd, 8) == 0)
            ok = 1;
        (void)!write(ready[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    bool up = false;
    if (read(ready[0], &ok, 1) == 1 && ok == 1) {
        fixture_connect(&f, CLUSTER, GROUP, SECRET);
        up = run_until(f.base, both_up, &f, 2000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    ck_assert_msg(ok == 1, "the squatter could not take the name");
    ck_assert_msg(up, "no link: the connector took another user's twin");
    ck_assert(strncmp(link_peer_name(f.acc.link), "127.0.0.1:", 10) == 0);
    fixture_destroy(&f);
}
END_TEST

static Suite *link_suite(void)
{
    Suite *s = suite_create("link");
    TCase *tc = tcase_create("link");
    TCase *raw = tcase_create("raw");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_handshake_ok);
    tcase_add_test(tc, test_lease);
    tcase_add_test(tc, test_lease_kept_on_peer_close);
    tcase_add_test(tc, test_keepalive_silence);
    tcase_add_test(tc, test_wrong_secret);
    tcase_add_test(tc, test_wrong_cluster);
    tcase_add_test(tc, test_wrong_group);
    tcase_add_test(tc, test_owner_refuses);
    tcase_add_test(tc, test_frames_both_ways);
    tcase_add_test(tc, test_frames_from_on_up);
    tcase_add_test(tc, test_big_frames);
    tcase_add_test(tc, test_reconnect);
    tcase_add_test(tc, test_close_in_on_down);
    tcase_add_test(tc, test_acceptor_down_on_peer_close);
    tcase_add_test(tc, test_listener_freed);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_handshake_by_name);
    tcase_add_test(tc, test_close_while_resolving);
    tcase_add_test(tc, test_lookup);
    tcase_add_test(tc, test_twin_names);
    tcase_add_test(tc, test_twin_wildcard);
    tcase_add_test(tc, test_twin_tcp_only);
    tcase_add_test(tc, test_twin_taken_by_another_user);
    suite_add_tcase(s, tc);

    tcase_set_timeout(raw, 30);
    tcase_add_test(raw, test_raw_bad_crc_after_handshake);
    tcase_add_test(raw, test_raw_garbage_instead_of_hello);
    tcase_add_test(raw, test_connector_bad_frame);
    tcase_add_test(raw, test_frame_before_close_read_after_failed_write);
    suite_add_tcase(s, raw);

    /* Only where a name with two addresses was made for them. */
    if (getenv("TEST_LINK_MULTI_NAME") != NULL) {
        TCase *addresses = tcase_create("addresses");
        tcase_set_timeout(addresses, 30);
        tcase_add_test(addresses, test_listen_every_address);
        tcase_add_test(addresses, test_dial_next_address);
        suite_add_tcase(s, addresses);
    }
    return s;
}

int main(void)
{
    unsetenv(LOCALTWIN_ENV_TCP_ONLY);   /* the cases say which way their links go */
    SRunner *sr = srunner_create(link_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
