/* test_meta.c - unit tests for cocytus/meta.c (Check framework).
 *
 * The metadata table is what a parity process keeps as the backup of each
 * data process, so besides the table operations these tests pin the two
 * things replicas are compared by: the digest (independent of history, but
 * sensitive to every field) and meta_replay_op, which must accept exactly
 * the op sequence a directly driven allocator produces and reject, with a
 * message, any op the replica disagrees with. */
#include "meta.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "pieceset.h"
#include "unit_rng.h"

#define REGION (1u << 20)

static void key_name(char *buf, size_t len, int n)
{
    snprintf(buf, len, "key:%d", n);
}

static void table_setup(struct meta_table *t)
{
    ck_assert_int_eq(meta_init(t, 4), 0);
}

/* ---- table operations ---- */

START_TEST(test_put_find)
{
    struct meta_table t;
    table_setup(&t);
    struct item *e = meta_put(&t, "alpha", 5, 4096, 100, 7, 1700000000, 42);
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_eq(meta_find(&t, "alpha", 5), e);
    ck_assert_ptr_null(meta_find(&t, "alph", 4));
    ck_assert_ptr_null(meta_find(&t, "beta", 4));
    ck_assert_uint_eq(meta_off(e), 4096);
    ck_assert_uint_eq(e->nbytes, 100);
    ck_assert_uint_eq(e->flags, 7);
    ck_assert_uint_eq(e->exptime, 1700000000);
    ck_assert_uint_eq(e->cas, 42);
    ck_assert_int_eq(e->nkey, 5);
    ck_assert_int_eq(memcmp(item_key(e), "alpha", 5), 0);
    ck_assert_uint_eq(t.count, 1);
    ck_assert_uint_eq(t.value_bytes, 100);
    ck_assert_uint_gt(t.heap_bytes, sizeof(struct item));
    meta_destroy(&t);
}
END_TEST

START_TEST(test_overwrite_in_place)
{
    struct meta_table t;
    table_setup(&t);
    struct item *e = meta_put(&t, "k", 1, 0, 10, 0, 0, 1);
    size_t heap = t.heap_bytes;
    e->iflags |= META_PENDING;
    struct item *again = meta_put(&t, "k", 1, 64, 20, 3, 5, 2);
    ck_assert_ptr_eq(again, e);
    ck_assert_uint_eq(t.count, 1);
    ck_assert_uint_eq(t.value_bytes, 20);
    ck_assert_uint_eq(t.heap_bytes, heap);
    ck_assert_uint_eq(meta_off(e), 64);
    ck_assert_uint_eq(e->nbytes, 20);
    ck_assert_uint_eq(e->flags, 3);
    ck_assert_uint_eq(e->exptime, 5);
    ck_assert_uint_eq(e->cas, 2);
    ck_assert(e->iflags & META_PENDING);
    meta_destroy(&t);
}
END_TEST

START_TEST(test_delete)
{
    struct meta_table t;
    table_setup(&t);
    meta_put(&t, "a", 1, 0, 10, 0, 0, 1);
    meta_put(&t, "b", 1, 16, 12, 0, 0, 2);
    ck_assert(meta_del(&t, "a", 1));
    ck_assert(!meta_del(&t, "a", 1));
    ck_assert(!meta_del(&t, "zz", 2));
    ck_assert_ptr_null(meta_find(&t, "a", 1));
    ck_assert_ptr_nonnull(meta_find(&t, "b", 1));
    ck_assert_uint_eq(t.count, 1);
    ck_assert_uint_eq(t.value_bytes, 12);
    ck_assert(meta_del(&t, "b", 1));
    ck_assert_uint_eq(t.count, 0);
    ck_assert_uint_eq(t.value_bytes, 0);
    ck_assert_uint_eq(t.heap_bytes, 0);
    ck_assert_ptr_null(t.lru_head);
    ck_assert_ptr_null(t.lru_tail);
    meta_destroy(&t);
}
END_TEST

START_TEST(test_lru_order)
{
    struct meta_table t;
    table_setup(&t);
    struct item *a = meta_put(&t, "a", 1, 0, 1, 0, 0, 1);
    struct item *b = meta_put(&t, "b", 1, 16, 1, 0, 0, 2);
    struct item *c = meta_put(&t, "c", 1, 32, 1, 0, 0, 3);
    ck_assert_ptr_eq(t.lru_head, c);
    ck_assert_ptr_eq(t.lru_tail, a);
    meta_put(&t, "a", 1, 48, 1, 0, 0, 4);
    ck_assert_ptr_eq(t.lru_head, a);
    ck_assert_ptr_eq(t.lru_tail, b);
    meta_bump(&t, b);
    ck_assert_ptr_eq(t.lru_head, b);
    ck_assert_ptr_eq(t.lru_tail, c);
    meta_del(&t, "c", 1);
    ck_assert_ptr_eq(t.lru_tail, a);
    ck_assert_ptr_null(a->next);
    meta_destroy(&t);
}
END_TEST

START_TEST(test_exptime_clamped)
{
    struct meta_table t;
    table_setup(&t);
    struct item *e = meta_put(&t, "past", 4, 0, 1, 0, -5, 1);
    ck_assert_uint_eq(e->exptime, 1);
    e = meta_put(&t, "far", 3, 0, 1, 0, (int64_t)1 << 40, 1);
    ck_assert_uint_eq(e->exptime, UINT32_MAX);
    ck_assert_ptr_null(meta_put(&t, "", 0, 0, 1, 0, 0, 1));
    meta_destroy(&t);
}
END_TEST

static void count_visit(void *ctx, struct item *it)
{
    (*(size_t *)ctx)++;
}

START_TEST(test_many_and_clear)
{
    struct meta_table t;
    table_setup(&t);
    char key[32];
    for (int i = 0; i < 20000; i++) {
        key_name(key, sizeof(key), i);
        ck_assert_ptr_nonnull(meta_put(&t, key, strlen(key), (uint64_t)i * 16, 1, 0, 0, i));
    }
    ck_assert_uint_eq(t.count, 20000);
    for (int i = 0; i < 20000; i++) {
        key_name(key, sizeof(key), i);
        struct item *e = meta_find(&t, key, strlen(key));
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(meta_off(e), (uint64_t)i * 16);
    }
    size_t seen = 0;
    meta_iterate(&t, count_visit, &seen);
    ck_assert_uint_eq(seen, 20000);
    meta_clear(&t);
    ck_assert_uint_eq(t.count, 0);
    ck_assert_uint_eq(t.heap_bytes, 0);
    ck_assert_uint_eq(t.value_bytes, 0);
    ck_assert_ptr_null(t.lru_head);
    key_name(key, sizeof(key), 7);
    ck_assert_ptr_null(meta_find(&t, key, strlen(key)));
    ck_assert_ptr_nonnull(meta_put(&t, key, strlen(key), 0, 1, 0, 0, 1));
    ck_assert_uint_eq(t.count, 1);
    meta_destroy(&t);
}
END_TEST

/* ---- digest ---- */

static void fill(struct meta_table *t, int n, bool reverse)
{
    char key[32];
    for (int j = 0; j < n; j++) {
        int i = reverse ? n - 1 - j : j;
        key_name(key, sizeof(key), i);
        meta_put(t, key, strlen(key), (uint64_t)i * 32, (uint32_t)i, (uint32_t)i * 3,
                 i % 2 ? 1700000000 + i : 0, (uint64_t)i + 1000);
    }
}

START_TEST(test_digest_order_independent)
{
    struct meta_table a, b, empty;
    table_setup(&a);
    table_setup(&b);
    table_setup(&empty);
    fill(&a, 500, false);
    /* b gets a different history: reverse order, extra keys deleted, an
     * entry overwritten twice. */
    meta_put(&b, "extra", 5, 0, 1, 0, 0, 1);
    meta_put(&b, "key:3", 5, 9999, 1, 0, 0, 1);
    fill(&b, 500, true);
    meta_del(&b, "extra", 5);
    ck_assert_uint_eq(meta_digest(&a), meta_digest(&b));
    ck_assert_uint_ne(meta_digest(&a), meta_digest(&empty));
    meta_clear(&a);
    ck_assert_uint_eq(meta_digest(&a), meta_digest(&empty));
    meta_destroy(&a);
    meta_destroy(&b);
    meta_destroy(&empty);
}
END_TEST

/* Each change to one field of one entry must change the digest. */
START_TEST(test_digest_sees_every_field)
{
    struct meta_table t;
    table_setup(&t);
    fill(&t, 50, false);
    uint64_t base = meta_digest(&t);
    struct item *e = meta_find(&t, "key:7", 5);
    ck_assert_ptr_nonnull(e);
    uint64_t off = meta_off(e);
    uint32_t nbytes = e->nbytes, flags = e->flags;
    int64_t exptime = e->exptime;
    uint64_t cas = e->cas;

    meta_put(&t, "key:7", 5, off + 16, nbytes, flags, exptime, cas);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_put(&t, "key:7", 5, off, nbytes + 1, flags, exptime, cas);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_put(&t, "key:7", 5, off, nbytes, flags ^ 1, exptime, cas);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_put(&t, "key:7", 5, off, nbytes, flags, exptime + 1, cas);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_put(&t, "key:7", 5, off, nbytes, flags, exptime, cas + 1);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_put(&t, "key:7", 5, off, nbytes, flags, exptime, cas);
    ck_assert_uint_eq(meta_digest(&t), base);

    /* Same fields under another key. */
    meta_del(&t, "key:7", 5);
    meta_put(&t, "key:X", 5, off, nbytes, flags, exptime, cas);
    ck_assert_uint_ne(meta_digest(&t), base);
    meta_destroy(&t);
}
END_TEST

/* ---- replay ---- */

struct replica {
    struct meta_table meta;
    struct pieceset *pieces;
    char err[256];
};

static void replica_setup(struct replica *r)
{
    table_setup(&r->meta);
    r->pieces = pieceset_new(REGION);
    ck_assert_ptr_nonnull(r->pieces);
    r->err[0] = '\0';
}

static void replica_teardown(struct replica *r)
{
    meta_destroy(&r->meta);
    pieceset_destroy(r->pieces);
}

/* The digest of the allocator the replica's pieces make (they must make
 * one: no two overlap). */
static uint64_t replica_alloc_digest(const struct replica *r)
{
    struct dalloc *a = pieceset_build(r->pieces);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    uint64_t digest = dalloc_digest(a);
    dalloc_destroy(a);
    return digest;
}

static int replay(struct replica *r, const struct rec_op *op)
{
    return meta_replay_op(&r->meta, r->pieces, op, false, r->err, sizeof(r->err));
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
                            .off = off, .nbytes = nbytes, .flags = 5,
                            .exptime = 1800000000, .cas = cas };
}

static struct rec_op op_del(const char *key)
{
    return (struct rec_op){ .type = ROP_DEL, .key = key, .nkey = (uint8_t)strlen(key) };
}

/* A sender drives its own allocator and table directly and describes every
 * step as ops; the replica, replaying them, must end up identical. */
START_TEST(test_replay_mirrors_sender)
{
    struct dalloc *sender = dalloc_new(REGION);
    struct meta_table sender_meta;
    struct replica r;
    struct rng rng = { 0x9e3779b97f4a7c15ULL };
    uint64_t offs[64] = { 0 };
    bool live[64] = { false };
    char key[32];
    table_setup(&sender_meta);
    replica_setup(&r);

    for (int step = 0; step < 5000; step++) {
        int slot = (int)rng_below(&rng, 64);
        key_name(key, sizeof(key), slot);
        if (!live[slot] || rng_below(&rng, 3) != 0) {
            uint64_t size = rng_below(&rng, 2000), off;
            if (dalloc_alloc(sender, size, &off) != 0)
                continue;
            struct rec_op alloc = op_alloc(size, off);
            ck_assert_msg(replay(&r, &alloc) == 0, "step %d: %s", step, r.err);
            meta_put(&sender_meta, key, strlen(key), off, (uint32_t)size, 5, 1800000000, step);
            struct rec_op put = op_put(key, off, (uint32_t)size, (uint64_t)step);
            ck_assert_msg(replay(&r, &put) == 0, "step %d: %s", step, r.err);
            if (live[slot]) {
                ck_assert_int_eq(dalloc_free(sender, offs[slot], NULL), 0);
                struct rec_op fr = op_free(offs[slot]);
                ck_assert_msg(replay(&r, &fr) == 0, "step %d: %s", step, r.err);
            }
            offs[slot] = off;
            live[slot] = true;
        } else {
            meta_del(&sender_meta, key, strlen(key));
            struct rec_op del = op_del(key);
            ck_assert_msg(replay(&r, &del) == 0, "step %d: %s", step, r.err);
            ck_assert_int_eq(dalloc_free(sender, offs[slot], NULL), 0);
            struct rec_op fr = op_free(offs[slot]);
            ck_assert_msg(replay(&r, &fr) == 0, "step %d: %s", step, r.err);
            live[slot] = false;
        }
    }
    ck_assert_uint_eq(replica_alloc_digest(&r), dalloc_digest(sender));
    ck_assert_uint_eq(pieceset_used_bytes(r.pieces), dalloc_used_bytes(sender));
    ck_assert_uint_eq(meta_digest(&r.meta), meta_digest(&sender_meta));
    ck_assert_uint_eq(r.meta.count, sender_meta.count);

    struct rec_op flush = { .type = ROP_FLUSH };
    ck_assert_int_eq(replay(&r, &flush), 0);
    ck_assert_uint_eq(r.meta.count, 0);
    ck_assert_uint_eq(pieceset_used_bytes(r.pieces), 0);
    ck_assert_uint_eq(pieceset_count(r.pieces), 0);

    replica_teardown(&r);
    meta_destroy(&sender_meta);
    dalloc_destroy(sender);
}
END_TEST

/* The replica takes the sender's offsets; a second piece starting where one
 * already starts is refused at once, and one that overlaps from elsewhere
 * is caught when the pieces are made into an allocator. */
START_TEST(test_replay_alloc_taken_offset)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op first = op_alloc(100, 0);
    ck_assert_int_eq(replay(&r, &first), 0);
    uint64_t before = replica_alloc_digest(&r);
    struct rec_op again = op_alloc(16, 0);
    ck_assert_int_eq(replay(&r, &again), -1);
    ck_assert_str_eq(r.err, "ALLOC size 16 at 0: a piece already starts there on the replica");
    ck_assert_uint_eq(replica_alloc_digest(&r), before);   /* left as it was */
    ck_assert_uint_eq(pieceset_used_bytes(r.pieces), 112);

    struct rec_op overlap = op_alloc(32, 96);   /* inside [0, 112) */
    ck_assert_int_eq(replay(&r, &overlap), 0);
    errno = 0;
    ck_assert_ptr_null(pieceset_build(r.pieces));
    ck_assert_int_eq(errno, ENOSPC);
    replica_teardown(&r);
}
END_TEST

START_TEST(test_replay_alloc_no_space)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op huge = op_alloc((uint64_t)REGION + 16, 0);
    ck_assert_int_eq(replay(&r, &huge), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "ALLOC size"));
    ck_assert_ptr_nonnull(strstr(r.err, "outside the region"));
    struct rec_op tail = op_alloc(32, REGION - 16);
    ck_assert_int_eq(replay(&r, &tail), -1);
    struct rec_op odd = op_alloc(16, 8);
    ck_assert_int_eq(replay(&r, &odd), -1);
    ck_assert_str_eq(r.err, "ALLOC size 16 at 8: replica failed (outside the region or misaligned)");
    ck_assert_uint_eq(pieceset_count(r.pieces), 0);
    /* The whole region taken, one more piece is more than it holds. */
    struct rec_op all = op_alloc(REGION, 0);
    ck_assert_int_eq(replay(&r, &all), 0);
    struct rec_op more = op_alloc(16, 16);
    ck_assert_int_eq(replay(&r, &more), -1);
    ck_assert_str_eq(r.err,
                     "ALLOC size 16 at 16: replica failed (its pieces would hold more than the region)");
    ck_assert_uint_eq(pieceset_count(r.pieces), 1);
    replica_teardown(&r);
}
END_TEST

START_TEST(test_replay_bad_free)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op a = op_alloc(64, 0);
    ck_assert_int_eq(replay(&r, &a), 0);
    struct rec_op bad = op_free(16);
    ck_assert_int_eq(replay(&r, &bad), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "FREE off 16"));
    struct rec_op good = op_free(0);
    ck_assert_int_eq(replay(&r, &good), 0);
    ck_assert_int_eq(replay(&r, &good), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "FREE off 0"));
    replica_teardown(&r);
}
END_TEST

START_TEST(test_replay_missing_del)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op del = op_del("ghost");
    ck_assert_int_eq(replay(&r, &del), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "DEL key ghost"));
    struct rec_op put = op_put("ghost", 0, 10, 1);
    struct rec_op alloc = op_alloc(10, 0);
    ck_assert_int_eq(replay(&r, &alloc), 0);
    ck_assert_int_eq(replay(&r, &put), 0);
    ck_assert_int_eq(replay(&r, &del), 0);
    ck_assert_uint_eq(r.meta.count, 0);
    replica_teardown(&r);
}
END_TEST

/* A PUT names the start of a piece of its value's rounded size: an
 * overwrite in place (same piece, no ALLOC), a touch; anything else is a
 * replica that disagrees. */
START_TEST(test_replay_put_needs_its_piece)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op a = op_alloc(20, 64);                 /* a 32-byte piece */
    ck_assert_int_eq(replay(&r, &a), 0);
    struct rec_op put = op_put("k", 64, 20, 1);
    ck_assert_int_eq(replay(&r, &put), 0);
    struct rec_op again = op_put("k", 64, 32, 2);       /* in place, 32 bytes */
    ck_assert_int_eq(replay(&r, &again), 0);
    struct rec_op bigger = op_put("k", 64, 33, 3);      /* needs 48 */
    ck_assert_int_eq(replay(&r, &bigger), -1);
    ck_assert_str_eq(r.err, "PUT key k: no piece of 48 bytes starts at 64 on the replica");
    struct rec_op smaller = op_put("k", 64, 16, 4);     /* needs 16 */
    ck_assert_int_eq(replay(&r, &smaller), -1);
    struct rec_op inside = op_put("k", 80, 8, 5);       /* inside the piece */
    ck_assert_int_eq(replay(&r, &inside), -1);
    struct rec_op nowhere = op_put("j", 0, 0, 6);       /* no piece at all */
    ck_assert_int_eq(replay(&r, &nowhere), -1);
    struct item *e = meta_find(&r.meta, "k", 1);
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->nbytes, 32);                   /* the last accepted PUT */
    ck_assert_uint_eq(r.meta.count, 1);
    replica_teardown(&r);
}
END_TEST

START_TEST(test_replay_put_outside_region)
{
    struct replica r;
    replica_setup(&r);
    struct rec_op put = op_put("k", REGION - 8, 16, 1);
    ck_assert_int_eq(replay(&r, &put), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "outside the region"));
    ck_assert_uint_eq(r.meta.count, 0);
    struct rec_op bad = { .type = 99 };
    ck_assert_int_eq(replay(&r, &bad), -1);
    ck_assert_ptr_nonnull(strstr(r.err, "unknown op type 99"));
    replica_teardown(&r);
}
END_TEST

/* A dropped table of many entries (freed on a thread, meta.c): empty at
 * once, usable again at once, and a table destroyed the same way leaves
 * nothing behind (ASan's leak check, in the sanitizer build). */
START_TEST(test_clear_large)
{
    struct meta_table t;
    char key[32];
    ck_assert_int_eq(meta_init(&t, 4), 0);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20000; i++) {
            key_name(key, sizeof(key), i);
            ck_assert_ptr_nonnull(meta_put(&t, key, strlen(key), (uint64_t)i * 16, 10, 0, 0,
                                           (uint64_t)i + 1));
        }
        ck_assert_uint_eq(t.count, 20000);
        meta_clear(&t);
        ck_assert_uint_eq(t.count, 0);
        ck_assert_uint_eq(t.heap_bytes, 0);
        ck_assert_uint_eq(t.value_bytes, 0);
        ck_assert_ptr_null(t.lru_head);
        ck_assert_uint_eq(meta_digest(&t), 0);
        key_name(key, sizeof(key), 7);
        ck_assert_ptr_null(meta_find(&t, key, strlen(key)));
    }
    for (int i = 0; i < 20000; i++) {
        key_name(key, sizeof(key), i);
        ck_assert_ptr_nonnull(meta_put(&t, key, strlen(key), 0, 10, 0, 0, 1));
    }
    key_name(key, sizeof(key), 19999);
    ck_assert_ptr_nonnull(meta_find(&t, key, strlen(key)));
    meta_destroy(&t);
    ck_assert_uint_eq(t.count, 0);
}
END_TEST

static Suite *meta_suite(void)
{
    Suite *s = suite_create("meta");
    TCase *table = tcase_create("table");
    TCase *digest = tcase_create("digest");
    TCase *replay_tc = tcase_create("replay");

    tcase_add_test(table, test_put_find);
    tcase_add_test(table, test_clear_large);
    tcase_add_test(table, test_overwrite_in_place);
    tcase_add_test(table, test_delete);
    tcase_add_test(table, test_lru_order);
    tcase_add_test(table, test_exptime_clamped);
    tcase_add_test(table, test_many_and_clear);
    tcase_add_test(digest, test_digest_order_independent);
    tcase_add_test(digest, test_digest_sees_every_field);
    tcase_add_test(replay_tc, test_replay_mirrors_sender);
    tcase_add_test(replay_tc, test_replay_alloc_taken_offset);
    tcase_add_test(replay_tc, test_replay_alloc_no_space);
    tcase_add_test(replay_tc, test_replay_bad_free);
    tcase_add_test(replay_tc, test_replay_missing_del);
    tcase_add_test(replay_tc, test_replay_put_needs_its_piece);
    tcase_add_test(replay_tc, test_replay_put_outside_region);
    suite_add_tcase(s, table);
    suite_add_tcase(s, digest);
    suite_add_tcase(s, replay_tc);
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(meta_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
