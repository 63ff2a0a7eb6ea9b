/* test_parity_apply.c - unit tests for cocytus/parity.c (Check framework):
 * how a parity process buffers and applies a data process's records.
 *
 * No sockets: the tests play the data processes, encode records with
 * rec_encode and hand them to parity_receive / parity_apply the way the
 * receiver (repl/receiver.c) does for engine_parity.c with RECORD and
 * STABLE frames.  They check the piggybacked commit (nothing applied before
 * it is stable), duplicates, truncation for recovery, that parity and
 * backup tables built from random records equal what a reference model of
 * the data processes says, and that a replica disagreement stops that data
 * process for good. */
#include "parity.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "pieceset.h"
#include "codec.h"
#include "unit_rng.h"

#define SMALL_REGION 4096
#define MAX_OPS 8

/* ---- building records ---- */

struct rec_builder {
    struct record rec;
    struct rec_op ops[MAX_OPS];
    uint8_t *enc;
    size_t len;
};

static void rb_start(struct rec_builder *b, uint64_t xid, uint64_t stable)
{
    memset(b, 0, sizeof(*b));
    b->rec.xid = xid;
    b->rec.stable_xid = stable;
    b->rec.ops = b->ops;
}

static void rb_op(struct rec_builder *b, struct rec_op op)
{
    ck_assert_uint_lt(b->rec.nops, MAX_OPS);
    b->ops[b->rec.nops++] = op;
}

static void rb_delta(struct rec_builder *b, uint64_t off, const uint8_t *delta, uint32_t len)
{
    b->rec.data_off = off;
    b->rec.data_len = len;
    b->rec.data = delta;
}

static void rb_encode(struct rec_builder *b)
{
    b->len = rec_encoded_size(&b->rec);
    b->enc = malloc(b->len);
    ck_assert_ptr_nonnull(b->enc);
    rec_encode(&b->rec, b->enc);
}

static void rb_free(struct rec_builder *b)
{
    free(b->enc);
    b->enc = NULL;
}

static struct rec_op op_alloc(uint64_t size, uint64_t off)
{
    return (struct rec_op){ .type = ROP_ALLOC, .size = size, .off = off };
}

static struct rec_op op_free(uint64_t off)
{
    return (struct rec_op){ .type = ROP_FREE, .off = off };
}

static struct rec_op op_put(const char *key, uint64_t off, uint32_t nbytes, uint64_t cas)
{
    return (struct rec_op){ .type = ROP_PUT, .key = key, .nkey = (uint8_t)strlen(key),
                            .off = off, .nbytes = nbytes, .flags = 0, .cas = cas };
}

static struct rec_op op_del(const char *key)
{
    return (struct rec_op){ .type = ROP_DEL, .key = key, .nkey = (uint8_t)strlen(key) };
}

/* A record that stores a fresh key of 16 bytes at the next 16-byte slot:
 * record xid allocates slot xid-1 (nothing is ever freed). */
static void rb_simple(struct rec_builder *b, uint64_t xid, uint64_t stable, uint8_t fill)
{
    static char keys[64][16];
    static uint8_t deltas[64][16];
    ck_assert_uint_lt(xid, 64);
    snprintf(keys[xid], sizeof(keys[xid]), "k%llu", (unsigned long long)xid);
    memset(deltas[xid], fill, 16);
    uint64_t off = (xid - 1) * 16;
    rb_start(b, xid, stable);
    rb_op(b, op_alloc(16, off));
    rb_op(b, op_put(keys[xid], off, 16, xid));
    rb_delta(b, off, deltas[xid], 16);
    rb_encode(b);
}

static enum repl_rx receive_simple(struct parity *p, int dp, uint64_t xid, uint64_t stable,
                                     uint64_t *got_stable)
{
    struct rec_builder b;
    rb_simple(&b, xid, stable, (uint8_t)(xid * 7 + 1));
    enum repl_rx rx = parity_receive(p, dp, b.enc, b.len, got_stable);
    rb_free(&b);
    return rx;
}

static void parity_setup(struct parity *p, int k, int n, int j, uint64_t region)
{
    char err[256];
    ck_assert_msg(parity_init(p, k, n, j, region, 4, err, sizeof(err)) == 0, "%s", err);
}

static bool region_is_zero(const struct parity *p)
{
    for (uint64_t i = 0; i < p->region_size; i++)
        if (p->region[i] != 0)
            return false;
    return true;
}

/* ---- the piggybacked commit ---- */

START_TEST(test_nothing_applied_before_stable)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 2, 4, 1, SMALL_REGION);
    ck_assert_int_eq(receive_simple(&p, 0, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_uint_eq(stable, 0);
    ck_assert_int_eq(parity_apply(&p, 0, stable), 0);
    ck_assert_uint_eq(p.dps[0].src.received_xid, 1);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 0);
    ck_assert_uint_eq(p.dps[0].src.buffer.count, 1);
    ck_assert_uint_eq(p.dps[0].meta.count, 0);
    ck_assert(region_is_zero(&p));

    /* Record 2 piggybacks stable 1: record 1 is applied, 2 stays. */
    ck_assert_int_eq(receive_simple(&p, 0, 2, 1, &stable), REPL_RX_BUFFERED);
    ck_assert_uint_eq(stable, 1);
    ck_assert_int_eq(parity_apply(&p, 0, stable), 0);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 1);
    ck_assert_uint_eq(p.dps[0].src.buffer.count, 1);
    ck_assert_uint_eq(p.dps[0].meta.count, 1);
    ck_assert(!region_is_zero(&p));

    /* A STABLE frame for 2 (the idle flush). */
    ck_assert_int_eq(parity_apply(&p, 0, 2), 0);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 2);
    ck_assert_uint_eq(p.dps[0].src.buffer.count, 0);
    ck_assert_uint_eq(p.dps[0].meta.count, 2);
    /* The other DP is untouched. */
    ck_assert_uint_eq(p.dps[1].src.received_xid, 0);
    ck_assert_uint_eq(p.dps[1].meta.count, 0);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_above_stable_stays_buffered)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 2, 3, 0, SMALL_REGION);
    for (uint64_t x = 1; x <= 5; x++)
        ck_assert_int_eq(receive_simple(&p, 1, x, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 1, 3), 0);
    ck_assert_uint_eq(p.dps[1].src.applied_xid, 3);
    ck_assert_uint_eq(p.dps[1].src.received_xid, 5);
    ck_assert_uint_eq(p.dps[1].src.buffer.count, 2);
    ck_assert_uint_eq(p.dps[1].meta.count, 3);
    /* An older stable xid (a resent record) changes nothing. */
    ck_assert_int_eq(parity_apply(&p, 1, 2), 0);
    ck_assert_uint_eq(p.dps[1].src.applied_xid, 3);
    ck_assert_uint_eq(p.dps[1].src.stable_xid, 3);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_duplicates_ignored)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    ck_assert_int_eq(receive_simple(&p, 0, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(receive_simple(&p, 0, 2, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(receive_simple(&p, 0, 2, 0, &stable), REPL_RX_DUPLICATE);
    ck_assert_int_eq(receive_simple(&p, 0, 1, 0, &stable), REPL_RX_DUPLICATE);
    ck_assert_uint_eq(p.dps[0].src.received_xid, 2);
    ck_assert_uint_eq(p.dps[0].src.buffer.count, 2);
    ck_assert_int_eq(parity_apply(&p, 0, 2), 0);
    /* After applying, a resent record is still a duplicate. */
    ck_assert_int_eq(receive_simple(&p, 0, 2, 1, &stable), REPL_RX_DUPLICATE);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 2);
    ck_assert_uint_eq(p.dps[0].meta.count, 2);
    ck_assert(!p.dps[0].src.diverged);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_gap_diverges)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    ck_assert_int_eq(receive_simple(&p, 0, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(receive_simple(&p, 0, 3, 0, &stable), REPL_RX_REFUSED);
    ck_assert(p.dps[0].src.diverged);
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "missing"));
    ck_assert_int_eq(receive_simple(&p, 0, 2, 0, &stable), REPL_RX_REFUSED);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_stable_beyond_received_diverges)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    ck_assert_int_eq(receive_simple(&p, 0, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 0, 2), -1);
    ck_assert(p.dps[0].src.diverged);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 0);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_malformed_record_refused)
{
    struct parity p;
    uint64_t stable;
    struct rec_builder b;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    rb_simple(&b, 1, 0, 1);
    ck_assert_int_eq(parity_receive(&p, 0, b.enc, b.len - 1, &stable), REPL_RX_REFUSED);
    ck_assert(p.dps[0].src.diverged);
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "malformed"));
    rb_free(&b);
    parity_destroy(&p);
}
END_TEST

/* Recovery preparation: records above the group's stable xid are dropped
 * and the data process's later records take their xids. */
START_TEST(test_truncate_after)
{
    struct parity p;
    uint64_t stable;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    for (uint64_t x = 1; x <= 5; x++)
        ck_assert_int_eq(receive_simple(&p, 0, x, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 0, 2), 0);
    ck_assert_int_eq(parity_truncate_after(&p, 0, 3), 0);
    ck_assert_uint_eq(p.dps[0].src.received_xid, 3);
    ck_assert_uint_eq(p.dps[0].src.buffer.count, 1);
    ck_assert_int_eq(parity_truncate_after(&p, 0, 1), -1);   /* 2 is applied */
    ck_assert_uint_eq(p.dps[0].src.received_xid, 3);
    ck_assert_int_eq(receive_simple(&p, 0, 4, 3, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 0, stable), 0);
    ck_assert_int_eq(parity_apply(&p, 0, 4), 0);
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 4);
    ck_assert_uint_eq(p.dps[0].meta.count, 4);
    ck_assert(!p.dps[0].src.diverged);
    parity_destroy(&p);
}
END_TEST

/* ---- divergence ---- */

START_TEST(test_divergent_alloc_stops_dp)
{
    struct parity p;
    uint64_t stable;
    struct rec_builder b;
    static const uint8_t delta[16] = { 1, 2, 3 };
    parity_setup(&p, 2, 4, 1, SMALL_REGION);

    rb_start(&b, 1, 0);
    rb_op(&b, op_alloc(16, 16));
    rb_op(&b, op_alloc(32, 16));   /* a piece already starts at 16 */
    rb_op(&b, op_put("x", 16, 16, 1));
    rb_delta(&b, 16, delta, 16);
    rb_encode(&b);
    ck_assert_int_eq(parity_receive(&p, 0, b.enc, b.len, &stable), REPL_RX_BUFFERED);
    rb_free(&b);
    ck_assert_int_eq(parity_apply(&p, 0, 1), -1);
    ck_assert(p.dps[0].src.diverged);
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "op 2 of 3: ALLOC size 32 at 16: a piece already starts there"));
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "xid 1"));
    ck_assert_uint_eq(p.dps[0].src.applied_xid, 0);
    ck_assert_uint_eq(p.dps[0].meta.count, 0);
    ck_assert(region_is_zero(&p));

    /* Nothing more from DP 0; DP 1 goes on. */
    ck_assert_int_eq(receive_simple(&p, 0, 2, 1, &stable), REPL_RX_REFUSED);
    ck_assert_int_eq(parity_apply(&p, 0, 1), -1);
    ck_assert_int_eq(receive_simple(&p, 1, 1, 0, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 1, 1), 0);
    ck_assert_uint_eq(p.dps[1].src.applied_xid, 1);
    parity_destroy(&p);
}
END_TEST

START_TEST(test_delta_outside_region_diverges)
{
    struct parity p;
    uint64_t stable;
    struct rec_builder b;
    static const uint8_t delta[32] = { 9 };
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    rb_start(&b, 1, 0);
    rb_delta(&b, SMALL_REGION - 16, delta, 32);
    rb_encode(&b);
    ck_assert_int_eq(parity_receive(&p, 0, b.enc, b.len, &stable), REPL_RX_BUFFERED);
    rb_free(&b);
    ck_assert_int_eq(parity_apply(&p, 0, 1), -1);
    ck_assert(p.dps[0].src.diverged);
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "outside the region"));
    ck_assert(region_is_zero(&p));
    parity_destroy(&p);
}
END_TEST

START_TEST(test_delete_of_missing_key_diverges)
{
    struct parity p;
    uint64_t stable;
    struct rec_builder b;
    parity_setup(&p, 1, 2, 0, SMALL_REGION);
    rb_start(&b, 1, 0);
    rb_op(&b, op_del("nobody"));
    rb_encode(&b);
    ck_assert_int_eq(parity_receive(&p, 0, b.enc, b.len, &stable), REPL_RX_BUFFERED);
    rb_free(&b);
    ck_assert_int_eq(parity_apply(&p, 0, 1), -1);
    ck_assert_ptr_nonnull(strstr(p.dps[0].src.why, "DEL key nobody"));
    parity_destroy(&p);
}
END_TEST

/* ---- random records against a reference model ---- */

#define MODEL_REGION (64u << 10)
#define MODEL_KEYS 40
#define MODEL_K 3
#define MODEL_N 5
#define MODEL_STEPS 3000
#define MODEL_VALUE_MAX 700

/* A data process as the reference sees it: its region bytes, a table and
 * allocator driven directly, and the records it sent. */
struct model_dp {
    uint8_t *region;
    struct dalloc *alloc;
    struct meta_table meta;
    bool live[MODEL_KEYS];
    uint64_t off[MODEL_KEYS];
    uint64_t xid;            /* last xid sent */
    uint64_t stable;         /* last stable xid announced */
};

struct model {
    struct model_dp dps[MODEL_K];
    struct parity pp[MODEL_N - MODEL_K];
    char keys[MODEL_KEYS][16];
    struct rng rng;
};

static void model_init(struct model *m)
{
    memset(m, 0, sizeof(*m));
    m->rng.state = 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < MODEL_KEYS; i++)
        snprintf(m->keys[i], sizeof(m->keys[i]), "key-%d", i);
    for (int i = 0; i < MODEL_K; i++) {
        struct model_dp *d = &m->dps[i];
        d->region = calloc(1, MODEL_REGION);
        d->alloc = dalloc_new(MODEL_REGION);
        ck_assert_ptr_nonnull(d->region);
        ck_assert_ptr_nonnull(d->alloc);
        ck_assert_int_eq(meta_init(&d->meta, 4), 0);
    }
    for (int j = 0; j < MODEL_N - MODEL_K; j++)
        parity_setup(&m->pp[j], MODEL_K, MODEL_N, j, MODEL_REGION);
}

static void model_destroy(struct model *m)
{
    for (int i = 0; i < MODEL_K; i++) {
        free(m->dps[i].region);
        dalloc_destroy(m->dps[i].alloc);
        meta_destroy(&m->dps[i].meta);
    }
    for (int j = 0; j < MODEL_N - MODEL_K; j++)
        parity_destroy(&m->pp[j]);
}

/* Hand the record to every parity process and apply up to its stable xid. */
static void model_send(struct model *m, int dp, struct rec_builder *b)
{
    rb_encode(b);
    for (int j = 0; j < MODEL_N - MODEL_K; j++) {
        uint64_t stable;
        ck_assert_int_eq(parity_receive(&m->pp[j], dp, b->enc, b->len, &stable),
                         REPL_RX_BUFFERED);
        ck_assert_msg(parity_apply(&m->pp[j], dp, stable) == 0, "%s",
                      m->pp[j].dps[dp].src.why);
    }
    rb_free(b);
}

/* Takes the next xid; the stable xid the record carries lags a random
 * distance behind it (always below it: a record is not stable when sent). */
static uint64_t model_next_xid(struct model *m, struct model_dp *d)
{
    uint64_t lag = 1 + rng_below(&m->rng, 4);
    d->xid++;
    uint64_t s = d->xid > lag ? d->xid - lag : 0;
    if (s > d->stable)
        d->stable = s;
    return d->xid;
}

static void model_set(struct model *m, int dp, int key)
{
    struct model_dp *d = &m->dps[dp];
    uint32_t len = (uint32_t)rng_below(&m->rng, MODEL_VALUE_MAX);
    uint64_t off;
    const char *k = m->keys[key];
    /* Same piece size as the live value: overwritten in place, as the
     * data engine does (a PUT at the old offset, no ALLOC or FREE). */
    struct item *old = d->live[key] ? meta_find(&d->meta, k, strlen(k)) : NULL;
    bool in_place = old && dalloc_round_size(old->nbytes ? old->nbytes : 1) ==
                               dalloc_round_size(len ? len : 1);
    if (in_place)
        off = d->off[key];
    else if (dalloc_alloc(d->alloc, len, &off) != 0)
        return;
    uint8_t value[MODEL_VALUE_MAX], delta[MODEL_VALUE_MAX];
    for (uint32_t n = 0; n < len; n++) {
        value[n] = (uint8_t)rng_next(&m->rng);
        delta[n] = value[n] ^ d->region[off + n];
    }
    memcpy(d->region + off, value, len);
    uint64_t xid = model_next_xid(m, d);
    meta_put(&d->meta, k, strlen(k), off, len, 0, 0, xid);

    struct rec_builder b;
    rb_start(&b, xid, d->stable);
    if (!in_place)
        rb_op(&b, op_alloc(len, off));
    rb_op(&b, op_put(k, off, len, xid));
    if (d->live[key] && !in_place) {
        dalloc_free(d->alloc, d->off[key], NULL);
        rb_op(&b, op_free(d->off[key]));
    }
    rb_delta(&b, off, delta, len);
    d->live[key] = true;
    d->off[key] = off;
    model_send(m, dp, &b);
}

static void model_delete(struct model *m, int dp, int key)
{
    struct model_dp *d = &m->dps[dp];
    const char *k = m->keys[key];
    meta_del(&d->meta, k, strlen(k));
    dalloc_free(d->alloc, d->off[key], NULL);
    d->live[key] = false;
    struct rec_builder b;
    uint64_t xid = model_next_xid(m, d);
    rb_start(&b, xid, d->stable);
    rb_op(&b, op_del(k));
    rb_op(&b, op_free(d->off[key]));
    model_send(m, dp, &b);
}

static void model_flush(struct model *m, int dp)
{
    struct model_dp *d = &m->dps[dp];
    meta_clear(&d->meta);
    dalloc_reset(d->alloc);
    memset(d->live, 0, sizeof(d->live));
    struct rec_builder b;
    uint64_t xid = model_next_xid(m, d);
    rb_start(&b, xid, d->stable);
    rb_op(&b, (struct rec_op){ .type = ROP_FLUSH });
    model_send(m, dp, &b);
}

static void model_step(struct model *m)
{
    int dp = (int)rng_below(&m->rng, MODEL_K);
    int key = (int)rng_below(&m->rng, MODEL_KEYS);
    uint64_t what = rng_below(&m->rng, 200);
    if (what == 0)
        model_flush(m, dp);
    else if (what < 50 && m->dps[dp].live[key])
        model_delete(m, dp, key);
    else
        model_set(m, dp, key);
}

static void model_check(struct model *m)
{
    uint8_t *data[MODEL_K], *want[MODEL_N - MODEL_K];
    for (int i = 0; i < MODEL_K; i++)
        data[i] = m->dps[i].region;
    for (int j = 0; j < MODEL_N - MODEL_K; j++) {
        want[j] = malloc(MODEL_REGION);
        ck_assert_ptr_nonnull(want[j]);
    }
    codec_encode(m->pp[0].codec, data, want, MODEL_REGION);
    for (int j = 0; j < MODEL_N - MODEL_K; j++) {
        struct parity *p = &m->pp[j];
        ck_assert_msg(memcmp(p->region, want[j], MODEL_REGION) == 0,
                      "parity %d differs from the encoded model", j);
        for (int i = 0; i < MODEL_K; i++) {
            struct parity_dp *pd = &p->dps[i];
            ck_assert_uint_eq(pd->src.applied_xid, m->dps[i].xid);
            ck_assert_uint_eq(pd->src.buffer.count, 0);
            ck_assert_uint_eq(meta_digest(&pd->meta), meta_digest(&m->dps[i].meta));
            ck_assert_uint_eq(pd->meta.count, m->dps[i].meta.count);
            struct dalloc *a = pieceset_build(pd->pieces);
            ck_assert_ptr_nonnull(a);
            ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(m->dps[i].alloc));
            dalloc_destroy(a);
        }
        free(want[j]);
    }
}

START_TEST(test_random_records_match_model)
{
    struct model *m = malloc(sizeof(*m));
    ck_assert_ptr_nonnull(m);
    model_init(m);
    for (int step = 0; step < MODEL_STEPS; step++)
        model_step(m);
    /* Not all applied yet: each DP announces its last xid as stable. */
    for (int i = 0; i < MODEL_K; i++)
        for (int j = 0; j < MODEL_N - MODEL_K; j++)
            ck_assert_int_eq(parity_apply(&m->pp[j], i, m->dps[i].xid), 0);
    model_check(m);
    model_destroy(m);
    free(m);
}
END_TEST

static Suite *parity_suite(void)
{
    Suite *s = suite_create("parity_apply");
    TCase *commit = tcase_create("commit");
    TCase *diverge = tcase_create("divergence");
    TCase *model = tcase_create("model");

    tcase_add_test(commit, test_nothing_applied_before_stable);
    tcase_add_test(commit, test_above_stable_stays_buffered);
    tcase_add_test(commit, test_duplicates_ignored);
    tcase_add_test(commit, test_truncate_after);
    tcase_add_test(diverge, test_gap_diverges);
    tcase_add_test(diverge, test_stable_beyond_received_diverges);
    tcase_add_test(diverge, test_malformed_record_refused);
    tcase_add_test(diverge, test_divergent_alloc_stops_dp);
    tcase_add_test(diverge, test_delta_outside_region_diverges);
    tcase_add_test(diverge, test_delete_of_missing_key_diverges);
    tcase_add_test(model, test_random_records_match_model);
    tcase_set_timeout(model, 60);
    suite_add_tcase(s, commit);
    suite_add_tcase(s, diverge);
    suite_add_tcase(s, model);
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(parity_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
