/* test_data_commit.c - the data process's side of the piggybacked commit,
 * driven against fake parity processes over real links in one event loop.
 *
 * The fakes record every frame and acknowledge only when the test says so,
 * which lets us check: a write completes only after every parity process
 * acknowledged it (in any order, cumulative acks); it is invisible to reads
 * until then; completions come in xid order; the next record piggybacks the
 * stable xid and, with no next record, an idle STABLE frame carries it; a
 * second write of the same key waits for the first to be stable; an
 * overwrite of the same piece size reuses the old piece. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "cluster.h"
#include "engine.h"
#include "frame.h"
#include "link.h"
#include "record.h"

#define NPARITY 2
#define MAX_SEEN 64

struct fake_parity {
    struct link_listener *ll;
    struct link *link;
    uint64_t record_xids[MAX_SEEN];
    uint64_t record_stables[MAX_SEEN];
    /* Per record: its op types in order (at most 8), the PUT's offset, the
     * delta's range and first bytes. */
    uint8_t record_ops[MAX_SEEN][8];
    int record_nops[MAX_SEEN];
    uint64_t record_put_off[MAX_SEEN];
    uint64_t record_data_off[MAX_SEEN];
    uint32_t record_data_len[MAX_SEEN];
    uint8_t record_delta[MAX_SEEN][16];
    int nrecords;
    uint64_t last_stable_frame;   /* payload of the last FT_STABLE */
    int nstable_frames;
};

struct completion_log {
    int n;
    void *cookies[MAX_SEEN];
    eng_status status[MAX_SEEN];
};

static struct event_base *base;
static struct cluster cl;
static struct cluster_proc procs[2 + NPARITY];
static struct fake_parity fakes[NPARITY];
static struct engine *dp;
static struct completion_log log_;

static const char *const secret = "test-secret";

static void fake_frame(struct link *l, uint16_t type, const uint8_t *p, uint32_t len, void *ctx)
{
    struct fake_parity *f = ctx;
    if (type == FT_RECORD && f->nrecords < MAX_SEEN) {
        struct rec_op ops[64];
        struct record r;
        ck_assert_int_eq(rec_decode(p, len, &r, ops, 64), 0);
        int n = f->nrecords;
        f->record_xids[n] = r.xid;
        f->record_stables[n] = r.stable_xid;
        f->record_nops[n] = (int)r.nops;
        for (uint32_t i = 0; i < r.nops && i < 8; i++) {
            f->record_ops[n][i] = ops[i].type;
            if (ops[i].type == ROP_PUT)
                f->record_put_off[n] = ops[i].off;
        }
        f->record_data_off[n] = r.data_off;
        f->record_data_len[n] = r.data_len;
        memcpy(f->record_delta[n], r.data, r.data_len < 16 ? r.data_len : 16);
        f->nrecords++;
    } else if (type == FT_STABLE && len == 8) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
            v = (v << 8) | p[i];
        f->last_stable_frame = v;
        f->nstable_frames++;
    }
}

static void fake_up(struct link *l, uint64_t xid, void *ctx) { }
static void fake_down(struct link *l, const char *why, void *ctx) { }

static bool fake_accept(void *owner, const struct link_identity *peer, struct link *l,
                        struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                        const char **reason)
{
    struct fake_parity *f = owner;
    f->link = l;
    cb->on_up = fake_up;
    cb->on_frame = fake_frame;
    cb->on_down = fake_down;
    *ctx = f;
    *welcome_xid = 0;
    return true;
}

static void ack(int j, uint64_t xid)
{
    uint8_t buf[8];
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(xid >> (8 * i));
    ck_assert_int_eq(link_send(fakes[j].link, FT_ACK, buf, 8), 0);
}

static void on_done(void *cookie, const struct eng_result *res)
{
    ck_assert_int_lt(log_.n, MAX_SEEN);
    log_.cookies[log_.n] = cookie;
    log_.status[log_.n] = res->status;
    log_.n++;
}

/* Run the loop for about ms milliseconds. */
static void run_for(int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

/* Run until cond() holds or ~2 s pass. */
static bool run_until(bool (*cond)(void))
{
    for (int i = 0; i < 400 && !cond(); i++)
        run_for(5);
    return cond();
}

static bool links_up(void)
{
    for (int j = 0; j < NPARITY; j++)
        if (!fakes[j].link || !link_is_up(fakes[j].link))
            return false;
    return true;
}

static int want_records;
static bool records_arrived(void)
{
    for (int j = 0; j < NPARITY; j++)
        if (fakes[j].nrecords < want_records)
            return false;
    return true;
}

static int want_done;
static bool completions_arrived(void)
{
    return log_.n >= want_done;
}

/* A STABLE frame carrying xid 1 (a link that comes up first gets one with
 * the stable xid of that moment, 0). */
static bool stable_frames_arrived(void)
{
    for (int j = 0; j < NPARITY; j++)
        if (fakes[j].nstable_frames == 0 || fakes[j].last_stable_frame != 1)
            return false;
    return true;
}

static void setup(void)
{
    base = event_base_new();
    memset(&cl, 0, sizeof(cl));
    memset(fakes, 0, sizeof(fakes));
    memset(&log_, 0, sizeof(log_));
    snprintf(cl.name, sizeof(cl.name), "unit");
    snprintf(cl.secret, sizeof(cl.secret), "%s", secret);
    cl.scheme = SCHEME_RS;
    cl.k = 2;
    cl.n = 2 + NPARITY;
    cl.region_size = 1 << 20;
    cl.nnodes = 1;
    snprintf(cl.hosts[0], sizeof(cl.hosts[0]), "127.0.0.1");
    cl.ngroups = 1;
    cl.procs = procs;
    cl.nprocs = 2 + NPARITY;
    for (int i = 0; i < 2; i++)
        procs[i] = (struct cluster_proc){ .group = 0, .role = ROLE_DATA, .index = i,
                                          .host = "127.0.0.1", .port = 1, .link_port = 2 };
    for (int j = 0; j < NPARITY; j++) {
        fakes[j].ll = link_listen(base, "127.0.0.1", 0, "unit", 0, secret, fake_accept, &fakes[j]);
        ck_assert_ptr_nonnull(fakes[j].ll);
        procs[2 + j] = (struct cluster_proc){ .group = 0, .role = ROLE_PARITY, .index = j,
                                              .host = "127.0.0.1", .port = 3,
                                              .link_port = link_listener_port(fakes[j].ll) };
    }
    struct engine_config cfg = {
        .mem_limit = 64 << 20, .item_size_max = 1 << 20, .evict = true, .cas_enabled = true,
        .hashpower = 12, .started = time(NULL), .base = base,
        .cluster = &cl, .group = 0, .index = 0,
    };
    dp = engine_data_new(&cfg);
    ck_assert_ptr_nonnull(dp);
    ck_assert(run_until(links_up));
}

static void teardown(void)
{
    dp->ops->destroy(dp);
    for (int j = 0; j < NPARITY; j++) {
        if (fakes[j].link)
            link_close(fakes[j].link);
        link_listener_free(fakes[j].ll);
    }
    run_for(1);
    event_base_free(base);
}

static eng_status set_key(const char *key, const char *value, void *cookie)
{
    struct eng_mutation m = { .op = ENG_OP_SET, .key = key, .nkey = strlen(key),
                              .data = value, .nbytes = strlen(value) };
    struct eng_result res;
    return dp->ops->mutate(dp, &m, &res, on_done, cookie);
}

static bool readable(const char *key, const char *value)
{
    struct eng_value v;
    struct eng_result res;
    if (dp->ops->get(dp, key, strlen(key), &v, &res) != ENG_SUCCESS)
        return false;
    bool same = v.nbytes == strlen(value) && memcmp(v.data, value, v.nbytes) == 0;
    dp->ops->release(dp, v.handle);
    return same;
}

START_TEST(test_commit_needs_every_ack)
{
    int cookie;
    ck_assert_int_eq(set_key("k1", "v1", &cookie), ENG_PENDING);
    want_records = 1;
    ck_assert(run_until(records_arrived));
    ck_assert_uint_eq(fakes[0].record_xids[0], 1);
    ck_assert_uint_eq(fakes[1].record_xids[0], 1);

    ack(1, 1);
    run_for(30);
    ck_assert_int_eq(log_.n, 0);           /* one parity process is not enough */
    ck_assert(!readable("k1", "v1"));      /* not visible before it is stable */

    ack(0, 1);
    want_done = 1;
    ck_assert(run_until(completions_arrived));
    ck_assert_ptr_eq(log_.cookies[0], &cookie);
    ck_assert_int_eq(log_.status[0], ENG_SUCCESS);
    ck_assert(readable("k1", "v1"));
}
END_TEST

START_TEST(test_idle_stable_frame)
{
    int cookie;
    ck_assert_int_eq(set_key("k1", "v1", &cookie), ENG_PENDING);
    want_records = 1;
    ck_assert(run_until(records_arrived));
    ack(0, 1);
    ack(1, 1);
    ck_assert(run_until(stable_frames_arrived));
    for (int j = 0; j < NPARITY; j++)
        ck_assert_uint_eq(fakes[j].last_stable_frame, 1);
}
END_TEST

START_TEST(test_out_of_order_cumulative_acks)
{
    int c2, c3;
    ck_assert_int_eq(set_key("k2", "two", &c2), ENG_PENDING);
    ck_assert_int_eq(set_key("k3", "three", &c3), ENG_PENDING);
    want_records = 2;
    ck_assert(run_until(records_arrived));

    ack(0, 2);            /* parity 0 acknowledges both at once */
    ack(1, 1);            /* parity 1 only the first */
    want_done = 1;
    ck_assert(run_until(completions_arrived));
    run_for(20);
    ck_assert_int_eq(log_.n, 1);
    ck_assert_ptr_eq(log_.cookies[0], &c2);
    ck_assert(readable("k2", "two"));
    ck_assert(!readable("k3", "three"));

    ack(1, 2);
    want_done = 2;
    ck_assert(run_until(completions_arrived));
    ck_assert_ptr_eq(log_.cookies[1], &c3);
    ck_assert(readable("k3", "three"));

    /* The next record piggybacks the stable xid. */
    int c4;
    ck_assert_int_eq(set_key("k4", "four", &c4), ENG_PENDING);
    want_records = 3;
    ck_assert(run_until(records_arrived));
    ck_assert_uint_eq(fakes[0].record_xids[2], 3);
    ck_assert_uint_eq(fakes[0].record_stables[2], 2);
}
END_TEST

START_TEST(test_same_key_waits)
{
    int c1, c2;
    ck_assert_int_eq(set_key("k", "first", &c1), ENG_PENDING);
    ck_assert_int_eq(set_key("k", "second", &c2), ENG_PENDING);
    want_records = 1;
    ck_assert(run_until(records_arrived));
    run_for(30);
    /* The second write of k is held until the first is stable. */
    ck_assert_int_eq(fakes[0].nrecords, 1);
    ack(0, 1);
    ack(1, 1);
    want_records = 2;
    ck_assert(run_until(records_arrived));
    ck_assert_int_eq(log_.n, 1);
    ck_assert(readable("k", "first"));
    ack(0, 2);
    ack(1, 2);
    want_done = 2;
    ck_assert(run_until(completions_arrived));
    ck_assert_ptr_eq(log_.cookies[0], &c1);
    ck_assert_ptr_eq(log_.cookies[1], &c2);
    ck_assert(readable("k", "second"));
}
END_TEST

/* Acknowledge xid on every parity process and wait for n completions. */
static void commit_through(uint64_t xid, int n)
{
    want_records = (int)xid;
    ck_assert(run_until(records_arrived));
    for (int j = 0; j < NPARITY; j++)
        ack(j, xid);
    want_done = n;
    ck_assert(run_until(completions_arrived));
}

/* A new value of the same piece size overwrites the old one's piece: the
 * record is the PUT alone, at the old offset, with the delta against the
 * old bytes; readers see the old value until it commits.  Another size
 * takes a fresh piece, and the old one's FREE follows once that is stable. */
START_TEST(test_overwrite_in_place)
{
    int c1, c2, c3, c4;
    ck_assert_int_eq(set_key("k", "aaaa", &c1), ENG_PENDING);
    commit_through(1, 1);
    ck_assert_int_eq(fakes[0].record_nops[0], 2);
    ck_assert_int_eq(fakes[0].record_ops[0][0], ROP_ALLOC);
    ck_assert_int_eq(fakes[0].record_ops[0][1], ROP_PUT);
    uint64_t off = fakes[0].record_put_off[0];

    ck_assert_int_eq(set_key("k", "bbbbbbbbbbbbbbbb", &c2), ENG_PENDING);   /* 16 bytes */
    want_records = 2;
    ck_assert(run_until(records_arrived));
    for (int j = 0; j < NPARITY; j++) {
        ck_assert_int_eq(fakes[j].record_nops[1], 1);
        ck_assert_int_eq(fakes[j].record_ops[1][0], ROP_PUT);
        ck_assert_uint_eq(fakes[j].record_put_off[1], off);
        ck_assert_uint_eq(fakes[j].record_data_off[1], off);
        ck_assert_uint_eq(fakes[j].record_data_len[1], 16);
        for (int i = 0; i < 16; i++)
            ck_assert_uint_eq(fakes[j].record_delta[1][i], (uint8_t)('b' ^ (i < 4 ? 'a' : 0)));
    }
    ck_assert(readable("k", "aaaa"));       /* the old value until it commits */
    commit_through(2, 2);
    ck_assert(readable("k", "bbbbbbbbbbbbbbbb"));

    /* 17 bytes need 32: a fresh piece; the 16-byte one is freed after. */
    ck_assert_int_eq(set_key("k", "ccccccccccccccccc", &c3), ENG_PENDING);
    commit_through(3, 3);
    ck_assert_int_eq(fakes[0].record_ops[2][0], ROP_ALLOC);
    ck_assert_uint_ne(fakes[0].record_put_off[2], off);
    ck_assert(readable("k", "ccccccccccccccccc"));
    ck_assert_int_eq(set_key("other", "x", &c4), ENG_PENDING);
    commit_through(4, 4);
    ck_assert_int_eq(fakes[0].record_ops[3][0], ROP_FREE);
}
END_TEST

static Suite *commit_suite(void)
{
    Suite *s = suite_create("data_commit");
    TCase *tc = tcase_create("commit");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_commit_needs_every_ack);
    tcase_add_test(tc, test_idle_stable_frame);
    tcase_add_test(tc, test_out_of_order_cumulative_acks);
    tcase_add_test(tc, test_same_key_waits);
    tcase_add_test(tc, test_overwrite_in_place);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(commit_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
