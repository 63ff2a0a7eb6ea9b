/* test_recovery_batch.c - the unit recovery protocol between two recovery
 * processes of one RS(3,5) group (cocytus/recovery.c), with the links
 * replaced by a queue the test delivers by hand.
 *
 * Data processes 0 and 2 are lost; parity process 0 serves dp 0 and leads,
 * parity process 1 serves dp 2, and dp 1 is a live data process the test
 * plays (it answers FETCH with its units).  Every unit of both lost
 * processes must come back byte for byte.  The cases are the races a real
 * cluster hits only now and then: a recovery process that has just taken
 * over still holds its own provisional view, in which it leads, when the
 * real leader's batch reaches it (its residual must still go to the batch's
 * leader); a residual lost on the way (the leader must time the batch out
 * and retry, not wait forever); units requested while the process took
 * itself for the leader (they must reach the real one when its view says
 * who that is); and a request lost on the way (asked again at the next
 * tick). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "codec.h"
#include "frame.h"
#include "parity.h"
#include "recovery.h"
#include "recovery_int.h"
#include "unit_loop.h"
#include "unit_rng.h"

#define K 3
#define N 5
#define M 2
#define UNITS 160                     /* the region: 160 units of 4 KB (two 512 KB batches) */
#define REGION ((uint64_t)UNITS * RECOV_UNIT)
#define SOURCE_XID 7                  /* dp 1's committed xid, as FETCH answers */

/* Where a frame goes: parity process `pp`, or the process serving logical
 * data process `dp` (dp 1: the test). */
struct msg {
    int to_pp;                        /* -1: to the server of dp */
    int dp;
    int from_pp;
    uint16_t type;
    uint8_t kind;
    uint8_t *bytes;
    size_t len;
    bool done;                        /* delivered (the shuffled order) */
};

struct net {
    struct msg q[4096];
    int head, tail;
    int sent_kind[2][8];              /* per sending pp, per kind */
    int drop_residuals;               /* residuals still to lose */
    int drop_needs;                   /* NEED frames still to lose */
    bool batch_late;                  /* BATCH only once nothing else is queued */
    struct msg held[16];              /* BATCH frames held back */
    int nheld;
    uint64_t need_units_to_pp0;       /* units NEED brought to pp 0 */
    int need_msgs_to_pp0;
    bool need_unit[UNITS];            /* which ones */
    /* Shuffled order: each link stays in order (TCP), links interleave at
     * random; pp j gets the coordinator's view at step view_step[j]. */
    struct rng *shuffle;
    int steps, view_step[M];
};

struct proc {
    int index;
    struct parity p;
    struct recovery rc;
};

static uint8_t data[K][REGION];       /* the three data processes' regions */
static struct event_base *base;
static struct net net;
static struct proc procs[M];

static uint8_t kind_of(const uint8_t *b, size_t len)
{
    return len > 8 ? b[8] : 0;
}

/* A frame from parity process from_pp (-1: from dp 1). */
static void enqueue(int from_pp, int to_pp, int dp, uint16_t type, const struct iovec *iov, int n)
{
    struct net *nt = &net;
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    uint8_t *b = malloc(len);
    ck_assert_ptr_nonnull(b);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        memcpy(b + pos, iov[i].iov_base, iov[i].iov_len);
        pos += iov[i].iov_len;
    }
    uint8_t kind = kind_of(b, len);
    ck_assert_int_lt(nt->tail, (int)(sizeof(nt->q) / sizeof(nt->q[0])));
    nt->q[nt->tail++] = (struct msg){ to_pp, dp, from_pp, type, kind, b, len, false };
    if (from_pp >= 0 && kind < 8)
        nt->sent_kind[from_pp][kind]++;
}

static int env_to_source(void *ctx, int dp, uint16_t type, const struct iovec *iov, int n)
{
    struct proc *pr = ctx;
    enqueue(pr->index, -1, dp, type, iov, n);
    return 0;
}

static int env_to_pp(void *ctx, int pp, uint16_t type, const struct iovec *iov, int n)
{
    struct proc *pr = ctx;
    enqueue(pr->index, pp, -1, type, iov, n);
    return 0;
}

static void env_local_fetch(void *ctx, const struct recov_msg *m)
{
    (void)ctx;
    (void)m;
    ck_abort_msg("no batch of this test has a source served by a parity process");
}

static int env_hold(void *ctx, int dp, uint64_t xid)
{
    (void)ctx;
    (void)dp;
    return xid == SOURCE_XID ? 0 : -1;
}

static void env_release(void *ctx, int dp)
{
    (void)ctx;
    (void)dp;
}

static void env_arrived(void *ctx)
{
    (void)ctx;
}

static void env_zero(void *ctx, uint64_t off, uint64_t len)
{
    struct proc *pr = ctx;
    memset(pr->p.region + off, 0, (size_t)len);
}

static void env_log(void *ctx, const char *line)
{
    struct proc *pr = ctx;
    fprintf(stderr, "pp%d: %s\n", pr->index, line);
}

/* dp 1 answers a FETCH: its units at SOURCE_XID to every contributor. */
static void dp1_fetch(const uint8_t *payload, size_t len)
{
    struct recov_msg m, out;
    ck_assert_int_eq(recov_decode(payload, len, &m), 0);
    ck_assert_int_eq(m.kind, RK_FETCH);
    memset(&out, 0, sizeof(out));
    out.id = m.id;
    out.kind = RK_DATA;
    out.who = 1;
    out.t = SOURCE_XID;
    out.nranges = m.nranges;
    memcpy(out.ranges, m.ranges, (size_t)m.nranges * sizeof(*m.ranges));
    uint8_t hdr[1024];
    size_t nh = recov_encode_header(&out, hdr);
    struct iovec iov[1 + RECOV_MAX_RANGES];
    iov[0] = (struct iovec){ hdr, nh };
    for (int i = 0; i < m.nranges; i++)
        iov[1 + i] = (struct iovec){ data[1] + m.ranges[i].off, m.ranges[i].len };
    for (int c = 0; c < m.nlist; c++)
        enqueue(-1, m.list[c], -1, FT_REPLY, iov, 1 + m.nranges);
}

/* Which parity process serves logical dp (the truth, whatever a process's
 * view says): dp 0 -> pp 0, dp 2 -> pp 1, dp 1 -> the test. */
static int server_of(int dp)
{
    return dp == 0 ? 0 : dp == 2 ? 1 : -1;
}

static void deliver(struct msg *q)
{
    int to = q->to_pp >= 0 ? q->to_pp : server_of(q->dp);
    if (q->kind == RK_RESIDUAL && net.drop_residuals > 0) {
        net.drop_residuals--;
        return;
    }
    if (q->kind == RK_BATCH && net.batch_late && q->from_pp >= 0) {
        /* Overtaken by the source's data (another link): kept for later. */
        ck_assert_int_lt(net.nheld, 16);
        net.held[net.nheld++] = *q;
        q->bytes = NULL;
        q->from_pp = -2;
        return;
    }
    if (to < 0) {
        dp1_fetch(q->bytes, q->len);
        return;
    }
    if (q->kind == RK_NEED && net.drop_needs > 0) {
        net.drop_needs--;
        return;
    }
    if (q->kind == RK_NEED && to == 0) {
        struct recov_msg m;
        ck_assert_int_eq(recov_decode(q->bytes, q->len, &m), 0);
        net.need_msgs_to_pp0++;
        for (int i = 0; i < m.nranges; i++)
            for (uint64_t x = 0; x < m.ranges[i].len; x += RECOV_UNIT) {
                uint64_t u = (m.ranges[i].off + x) / RECOV_UNIT;
                ck_assert_uint_lt(u, UNITS);
                ck_assert_msg(!net.need_unit[u], "unit %llu requested twice",
                              (unsigned long long)u);
                net.need_unit[u] = true;
                net.need_units_to_pp0++;
            }
    }
    recovery_on_message(&procs[to].rc, q->type, q->bytes, (uint32_t)q->len);
}

static void set_view(int pp, const char *text);

/* The link a frame travels on: (sender, receiver), -1 for dp 1. */
static int link_of(const struct msg *q)
{
    int to = q->to_pp >= 0 ? q->to_pp : server_of(q->dp);
    return (q->from_pp + 1) * 3 + (to + 1);
}

/* Shuffled order: the oldest frame of a link chosen at random. */
static void deliver_one_shuffled(void)
{
    int pending = 0;
    for (int i = net.head; i < net.tail; i++)
        pending += !net.q[i].done;
    int pick = (int)rng_below(net.shuffle, (uint64_t)pending), j = net.head;
    for (;; j++)
        if (!net.q[j].done && pick-- == 0)
            break;
    int k = net.head;
    while (net.q[k].done || link_of(&net.q[k]) != link_of(&net.q[j]))
        k++;
    struct msg *q = &net.q[k];
    q->done = true;
    deliver(q);
    free(q->bytes);
    q->bytes = NULL;
    while (net.head < net.tail && net.q[net.head].done)
        net.head++;
    net.steps++;
    for (int pp = 0; pp < M; pp++)
        if (net.steps == net.view_step[pp])
            set_view(pp, "4 p0,-,p1 s0,s2");
}

/* Deliver what is queued (and what that sends) and run due timers, until
 * pred holds or ms pass. */
static bool pump_until(bool (*pred)(void), int ms)
{
    double deadline = now_ms() + ms;
    while (!pred() && now_ms() < deadline) {
        while (net.shuffle && net.head < net.tail)
            deliver_one_shuffled();
        /* Nothing in flight: a view still to come comes now. */
        for (int pp = 0; net.shuffle && net.head == net.tail && pp < M; pp++)
            if (net.view_step[pp] > net.steps) {
                net.view_step[pp] = net.steps;
                set_view(pp, "4 p0,-,p1 s0,s2");
            }
        if (net.shuffle && net.head < net.tail)
            continue;
        while (net.head < net.tail) {
            struct msg *q = &net.q[net.head++];
            deliver(q);
            free(q->bytes);
            q->bytes = NULL;
        }
        /* Compact the queue once it has drained; then what was held back. */
        net.head = net.tail = 0;
        for (int i = 0; i < net.nheld; i++) {
            struct msg *h = &net.held[i];
            h->from_pp = -1;   /* delivered as it is now */
            net.q[net.tail++] = *h;
        }
        net.nheld = 0;
        if (net.head < net.tail)
            continue;
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (net.head == net.tail && !pred()) {
            struct timeval tv = { 0, 2000 };
            event_base_loopexit(base, &tv);
            event_base_loop(base, 0);
        }
    }
    return pred();
}

static bool both_recovered(void)
{
    return procs[0].rc.own.done == UNITS && procs[1].rc.own.done == UNITS;
}

static void setup_group(void)
{
    struct rng r = { 12345 };
    memset(&net, 0, sizeof(net));
    base = event_base_new();
    ck_assert_ptr_nonnull(base);
    for (int i = 0; i < K; i++)
        rng_fill(&r, data[i], REGION);
    for (int j = 0; j < M; j++) {
        struct proc *pr = &procs[j];
        char err[256];
        pr->index = j;
        ck_assert_msg(parity_init(&pr->p, K, N, j, REGION, 4, err, sizeof(err)) == 0, "%s", err);
        /* Parity j of the three regions, and records that reached all of it. */
        for (int i = 0; i < K; i++) {
            codec_mul_xor(pr->p.codec, codec_coef(pr->p.codec, j, i), pr->p.region, data[i],
                          REGION);
            pr->p.dps[i].touched_end = REGION;
        }
        struct recovery_env env = {
            .ctx = pr, .base = base, .p = &pr->p,
            .to_source = env_to_source, .to_pp = env_to_pp, .local_fetch = env_local_fetch,
            .hold = env_hold, .release = env_release, .arrived = env_arrived,
            .zero = env_zero, .log = env_log,
        };
        ck_assert_int_eq(recovery_init(&pr->rc, &env, j, K, M), 0);
    }
}

static void teardown_group(void)
{
    for (int j = 0; j < M; j++) {
        recovery_destroy(&procs[j].rc);
        parity_destroy(&procs[j].p);
    }
    for (int i = net.head; i < net.tail; i++)
        free(net.q[i].bytes);
    for (int i = 0; i < net.nheld; i++)
        free(net.held[i].bytes);
    event_base_free(base);
}

static void set_view(int pp, const char *text)
{
    struct group_view v;
    ck_assert_int_eq(group_view_parse(&v, K, M, text, strlen(text)), 0);
    recovery_set_view(&procs[pp].rc, &v);
}

static void check_regions(void)
{
    ck_assert_msg(memcmp(procs[0].p.region, data[0], REGION) == 0,
                  "pp 0's region is not dp 0's data");
    ck_assert_msg(memcmp(procs[1].p.region, data[2], REGION) == 0,
                  "pp 1's region is not dp 2's data");
}

/* Both take over; pp 1 still has only its own view (it leads there, with
 * dp 0 unserved) while pp 0, with the coordinator's view, leads the batch.
 * pp 1's residual must reach pp 0 all the same.  Run 1: every BATCH reaches
 * pp 1 after dp 1's data (a contribution that starts from the data). */
START_TEST(test_residual_goes_to_the_batch_leader)
{
    setup_group();
    net.batch_late = _i == 1;
    ck_assert_int_eq(recovery_serve(&procs[0].rc, 0), 0);
    ck_assert_int_eq(recovery_serve(&procs[1].rc, 2), 0);
    set_view(1, "2 x,-,p1 p,s2");
    ck_assert_int_eq(procs[1].rc.view_leader, 1);
    set_view(0, "4 p0,-,p1 s0,s2");
    ck_assert_int_eq(procs[0].rc.view_leader, 0);
    bool done = pump_until(both_recovered, 1500);
    ck_assert_msg(net.sent_kind[1][RK_RESIDUAL] > 0, "pp 1 sent no residual");
    ck_assert_msg(done, "not recovered: pp 0 %zu, pp 1 %zu of %d units", procs[0].rc.own.done,
                  procs[1].rc.own.done, UNITS);
    check_regions();
    ck_assert_uint_eq(procs[0].rc.batches_dropped, 0);
    teardown_group();
}
END_TEST

/* A residual lost on the way: the leader drops the batch when it times out
 * (2 s) and the next one rebuilds the units. */
START_TEST(test_lost_residual_times_out)
{
    setup_group();
    ck_assert_int_eq(recovery_serve(&procs[0].rc, 0), 0);
    ck_assert_int_eq(recovery_serve(&procs[1].rc, 2), 0);
    set_view(1, "4 p0,-,p1 s0,s2");
    net.drop_residuals = 1;
    set_view(0, "4 p0,-,p1 s0,s2");
    bool done = pump_until(both_recovered, 5000);
    ck_assert_msg(done, "not recovered: pp 0 %zu, pp 1 %zu of %d units", procs[0].rc.own.done,
                  procs[1].rc.own.done, UNITS);
    ck_assert_int_eq(net.drop_residuals, 0);
    ck_assert_uint_eq(procs[0].rc.batches_dropped, 1);
    check_regions();
    teardown_group();
}
END_TEST

/* Units requested at pp 1 while it took itself for the leader reach pp 0
 * once pp 1's view says pp 0 leads: each exactly once, in as many NEED
 * frames as their ranges take (64 ranges a frame), and pp 1's queue is
 * empty after. */
#define NEED_SINGLES 70               /* units 0, 2, ..., 138: a range each */

static bool needs_arrived(void)
{
    return net.need_units_to_pp0 >= NEED_SINGLES + 3;
}

START_TEST(test_needs_follow_the_leader)
{
    setup_group();
    ck_assert_int_eq(recovery_serve(&procs[0].rc, 0), 0);
    ck_assert_int_eq(recovery_serve(&procs[1].rc, 2), 0);
    set_view(1, "2 x,-,p1 p,s2");
    /* Gets of single units, one of them twice, and one get over 3 units
     * (150-152), while nothing can be rebuilt. */
    for (int i = 0; i < NEED_SINGLES; i++)
        recovery_need(&procs[1].rc, (uint64_t)(2 * i) * RECOV_UNIT + 10, 100);
    recovery_need(&procs[1].rc, 4 * RECOV_UNIT, RECOV_UNIT);
    recovery_need(&procs[1].rc, 150 * RECOV_UNIT + 100, 2 * RECOV_UNIT);
    /* Beyond the region: nothing. */
    recovery_need(&procs[1].rc, REGION, RECOV_UNIT);
    ck_assert_int_eq(net.tail, 0);
    set_view(0, "4 p0,-,p1 s0,s2");
    set_view(1, "4 p0,-,p1 s0,s2");
    ck_assert_uint_eq(procs[1].rc.nneeds, 0);
    ck_assert_msg(pump_until(needs_arrived, 1000), "%llu requested units reached pp 0",
                  (unsigned long long)net.need_units_to_pp0);
    ck_assert_uint_eq(net.need_units_to_pp0, NEED_SINGLES + 3);
    ck_assert_int_eq(net.need_msgs_to_pp0, 2);
    for (int u = 0; u < UNITS; u++) {
        bool want = (u < 2 * NEED_SINGLES && u % 2 == 0) || (u >= 150 && u <= 152);
        ck_assert_msg(net.need_unit[u] == want, "unit %d %s", u,
                      want ? "not passed on" : "passed on unasked");
    }
    ck_assert_msg(pump_until(both_recovered, 1500), "not recovered");
    check_regions();
    teardown_group();
}
END_TEST

/* Deliver what is queued now, in order, without running any timer. */
static void deliver_queued(void)
{
    while (net.head < net.tail) {
        struct msg *q = &net.q[net.head++];
        deliver(q);
        free(q->bytes);
        q->bytes = NULL;
    }
}

/* A NEED lost on the way (its link dropped): pp 1, which does not lead,
 * asks again at its next tick, for the units it still misses, and for
 * nothing once they are here. */
START_TEST(test_lost_need_is_asked_again)
{
    setup_group();
    ck_assert_int_eq(recovery_serve(&procs[0].rc, 0), 0);
    ck_assert_int_eq(recovery_serve(&procs[1].rc, 2), 0);
    set_view(0, "4 p0,-,p1 s0,s2");
    set_view(1, "4 p0,-,p1 s0,s2");
    net.drop_needs = 1;
    recovery_need(&procs[1].rc, 100 * RECOV_UNIT + 5, RECOV_UNIT);   /* units 100 and 101 */
    ck_assert_int_eq(net.tail - net.head, 1);
    deliver_queued();
    ck_assert_int_eq(net.drop_needs, 0);
    ck_assert_int_eq(net.need_msgs_to_pp0, 0);
    recovery_tick(&procs[1].rc);
    deliver_queued();
    ck_assert_int_eq(net.need_msgs_to_pp0, 1);
    ck_assert_uint_eq(net.need_units_to_pp0, 2);
    ck_assert(net.need_unit[100] && net.need_unit[101]);
    ck_assert_msg(pump_until(both_recovered, 1500), "not recovered");
    recovery_tick(&procs[1].rc);
    ck_assert_uint_eq(procs[1].rc.nneeds, 0);
    ck_assert_int_eq(net.tail, net.head);
    check_regions();
    teardown_group();
}
END_TEST

/* Many orders: links interleave at random (each in order), and each
 * recovery process starts on its provisional view and gets the
 * coordinator's at a random step, before, during or after the first
 * batches (until pp 0 has it, nobody can rebuild: dp 2 is "x" there).
 * Every order must rebuild both regions exactly, with no batch dropped. */
START_TEST(test_shuffled_orders)
{
    for (int seed = 1; seed <= 60; seed++) {
        struct rng r = { (uint64_t)seed * 7919 };
        setup_group();
        net.shuffle = &r;
        net.view_step[0] = (int)rng_below(&r, 3);
        net.view_step[1] = (int)rng_below(&r, 40);
        ck_assert_int_eq(recovery_serve(&procs[0].rc, 0), 0);
        ck_assert_int_eq(recovery_serve(&procs[1].rc, 2), 0);
        set_view(0, "2 p0,-,x s0,p");
        set_view(1, "2 x,-,p1 p,s2");
        if (rng_below(&r, 2))
            recovery_need(&procs[1].rc, rng_below(&r, UNITS) * RECOV_UNIT, RECOV_UNIT);
        if (rng_below(&r, 2))
            recovery_need(&procs[0].rc, rng_below(&r, UNITS) * RECOV_UNIT, RECOV_UNIT);
        for (int j = 0; j < M; j++)
            if (net.view_step[j] == 0)
                set_view(j, "4 p0,-,p1 s0,s2");
        bool done = pump_until(both_recovered, 1500);
        ck_assert_msg(done, "seed %d: not recovered: pp 0 %zu, pp 1 %zu of %d units (views at "
                      "steps %d and %d of %d)", seed, procs[0].rc.own.done, procs[1].rc.own.done,
                      UNITS, net.view_step[0], net.view_step[1], net.steps);
        check_regions();
        ck_assert_msg(procs[0].rc.batches_dropped == 0, "seed %d: %llu batch(es) dropped", seed,
                      (unsigned long long)procs[0].rc.batches_dropped);
        teardown_group();
    }
}
END_TEST

static Suite *recovery_batch_suite(void)
{
    Suite *s = suite_create("recovery_batch");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_residual_goes_to_the_batch_leader, 0, 2);
    tcase_add_test(tc, test_lost_residual_times_out);
    tcase_add_test(tc, test_needs_follow_the_leader);
    tcase_add_test(tc, test_lost_need_is_asked_again);
    tcase_add_test(tc, test_shuffled_orders);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(recovery_batch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
