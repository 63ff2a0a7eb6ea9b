/* test_items.c - items, LRU order, eviction at the memory limit, -M,
 * too-large items, references and the expiry sweep. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hash.h"
#include "items.h"

#define STARTED ((time_t)1700000000)

struct fixture {
    struct mc_clock clock;
    struct item_store s;
};

static void setup_store(struct fixture *f, size_t mem_limit, size_t item_max, bool evict)
{
    struct engine_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.mem_limit = mem_limit;
    cfg.item_size_max = item_max;
    cfg.evict = evict;
    cfg.cas_enabled = true;
    cfg.hashpower = 8;
    cfg.started = STARTED;
    clock_init(&f->clock, STARTED);
    ck_assert_int_eq(item_store_init(&f->s, &cfg, &f->clock), 0);
}

static void teardown_store(struct fixture *f)
{
    item_store_destroy(&f->s);
    ck_assert_uint_eq(f->s.mem_used, 0);
}

static int key_of(char *buf, unsigned n)
{
    return snprintf(buf, 32, "item-%u", n);
}

/* Stores key n with a value of nbytes 'x' bytes; returns the status. */
static eng_status put(struct fixture *f, unsigned n, size_t nbytes, rel_time_t exptime)
{
    char key[32];
    size_t nkey = (size_t)key_of(key, n);
    eng_status st;
    struct item *it = item_alloc(&f->s, key, nkey, 0, exptime, nbytes, &st);
    if (it == NULL)
        return st;
    memset(item_value(it), 'x', nbytes);
    uint64_t hv = hash_key(key, nkey);
    enum item_miss why;
    struct item *old = item_lookup(&f->s, key, nkey, hv, &why);
    if (old != NULL)
        item_replace(&f->s, old, it, hv);
    else
        item_link(&f->s, it, hv);
    return ENG_SUCCESS;
}

static struct item *find(struct fixture *f, unsigned n)
{
    char key[32];
    size_t nkey = (size_t)key_of(key, n);
    enum item_miss why;
    return item_lookup(&f->s, key, nkey, hash_key(key, nkey), &why);
}

static bool key_is(const struct item *it, unsigned n)
{
    char key[32];
    size_t nkey = (size_t)key_of(key, n);
    return it != NULL && it->nkey == nkey && memcmp(item_key(it), key, nkey) == 0;
}

START_TEST(test_layout)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    ck_assert_uint_le(sizeof(struct item), 48);
    ck_assert_int_eq(put(&f, 7, 5, 0), ENG_SUCCESS);
    struct item *it = find(&f, 7);
    ck_assert_ptr_nonnull(it);
    ck_assert_uint_eq(it->nbytes, 5);
    ck_assert_int_eq(item_value(it)[5], '\r');
    ck_assert_int_eq(item_value(it)[6], '\n');
    ck_assert_uint_eq(f.s.curr_items, 1);
    ck_assert_uint_eq(f.s.bytes, item_total(it));
    ck_assert_uint_ge(f.s.mem_used, item_total(it));
    teardown_store(&f);
}
END_TEST

START_TEST(test_lru_order)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    for (unsigned i = 1; i <= 3; i++)
        ck_assert_int_eq(put(&f, i, 10, 0), ENG_SUCCESS);
    ck_assert(key_is(f.s.lru_head, 3));
    ck_assert(key_is(f.s.lru_tail, 1));

    item_bump(&f.s, find(&f, 1));           /* read: to the head */
    ck_assert(key_is(f.s.lru_head, 1));
    ck_assert(key_is(f.s.lru_tail, 2));
    ck_assert(key_is(f.s.lru_head->next, 3));
    ck_assert(key_is(f.s.lru_tail->prev, 3));

    ck_assert_int_eq(put(&f, 2, 10, 0), ENG_SUCCESS);   /* store: to the head */
    ck_assert(key_is(f.s.lru_head, 2));
    ck_assert(key_is(f.s.lru_tail, 3));
    ck_assert_uint_eq(f.s.curr_items, 3);
    teardown_store(&f);
}
END_TEST

START_TEST(test_evict_at_limit)
{
    struct fixture f;
    const size_t limit = 100 * 1100;
    setup_store(&f, limit, 1 << 20, true);
    ck_assert_int_eq(put(&f, 0, 1000, 0), ENG_SUCCESS);
    for (unsigned i = 1; i < 1000; i++) {
        ck_assert_int_eq(put(&f, i, 1000, 0), ENG_SUCCESS);
        ck_assert_uint_le(f.s.mem_used, limit);
        item_bump(&f.s, find(&f, 0));       /* keep item 0 hot */
    }
    ck_assert_uint_gt(f.s.stats.evictions, 800);
    ck_assert_uint_eq(f.s.stats.evicted_unfetched, f.s.stats.evictions);
    ck_assert_uint_eq(f.s.curr_items + f.s.stats.evictions, 1000);
    ck_assert_ptr_nonnull(find(&f, 0));
    ck_assert_ptr_nonnull(find(&f, 999));
    ck_assert_ptr_null(find(&f, 1));
    /* Survivors are exactly the newest ones (plus the hot one). */
    unsigned oldest = 1000 - (unsigned)f.s.curr_items + 1;
    ck_assert_ptr_null(find(&f, oldest - 1));
    ck_assert_ptr_nonnull(find(&f, oldest));
    teardown_store(&f);
}
END_TEST

START_TEST(test_no_evict_out_of_memory)
{
    struct fixture f;
    const size_t limit = 20 * 1100;
    setup_store(&f, limit, 1 << 20, false);
    unsigned stored = 0;
    eng_status st = ENG_SUCCESS;
    while (st == ENG_SUCCESS && stored < 100) {
        st = put(&f, stored, 1000, 0);
        if (st == ENG_SUCCESS)
            stored++;
    }
    ck_assert_int_eq(st, ENG_NO_MEMORY);
    ck_assert_uint_ge(stored, 15);
    ck_assert_uint_eq(f.s.stats.evictions, 0);
    ck_assert_uint_eq(f.s.stats.outofmemory, 1);
    ck_assert_uint_le(f.s.mem_used, limit);
    for (unsigned i = 0; i < stored; i++)
        ck_assert_ptr_nonnull(find(&f, i));

    /* Dead items are reclaimed even without eviction. */
    item_flush_at(&f.s, f.s.clock->now, true);     /* flush_all now, with cas */
    ck_assert_int_eq(put(&f, 500, 1000, 0), ENG_SUCCESS);
    ck_assert_uint_eq(f.s.stats.reclaimed, 1);
    ck_assert_uint_eq(f.s.stats.expired_unfetched, 1);
    ck_assert_uint_eq(f.s.stats.evictions, 0);
    teardown_store(&f);
}
END_TEST

START_TEST(test_too_large)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1024, true);
    char key[32];
    size_t nkey = (size_t)key_of(key, 1);
    /* The tighter of our header's size and memcached's limit (its 56-byte
     * header with cas, the key and a NUL, the value and CRLF). */
    size_t by_header = 1024 - sizeof(struct item) - nkey - 2;
    size_t by_memcached = 1024 - 56 - nkey - 1 - 2;
    size_t fits = by_header < by_memcached ? by_header : by_memcached;
    ck_assert_int_eq(put(&f, 1, fits, 0), ENG_SUCCESS);
    ck_assert_int_eq(put(&f, 1, fits + 1, 0), ENG_TOO_LARGE);
    ck_assert_uint_eq(f.s.curr_items, 1);
    ck_assert_uint_eq(find(&f, 1)->nbytes, fits);
    teardown_store(&f);
}
END_TEST

START_TEST(test_item_bigger_than_memory)
{
    struct fixture f;
    setup_store(&f, 4096, 1 << 20, true);
    ck_assert_int_eq(put(&f, 1, 100, 0), ENG_SUCCESS);
    ck_assert_int_eq(put(&f, 2, 8000, 0), ENG_NO_MEMORY);
    ck_assert_uint_eq(f.s.stats.outofmemory, 1);
    teardown_store(&f);
}
END_TEST

START_TEST(test_ref_keeps_deleted_item)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    ck_assert_int_eq(put(&f, 1, 100, 0), ENG_SUCCESS);
    struct item *it = find(&f, 1);
    ck_assert(item_ref(it));
    size_t used = f.s.mem_used;

    char key[32];
    size_t nkey = (size_t)key_of(key, 1);
    item_unlink(&f.s, it, hash_key(key, nkey));
    ck_assert_uint_eq(f.s.curr_items, 0);
    ck_assert_uint_eq(f.s.bytes, 0);
    ck_assert_uint_eq(f.s.mem_used, used);          /* still allocated */
    ck_assert_ptr_null(find(&f, 1));
    ck_assert_int_eq(item_value(it)[0], 'x');       /* still readable */
    item_release(&f.s, it);
    ck_assert_uint_eq(f.s.mem_used, 0);
    teardown_store(&f);
}
END_TEST

START_TEST(test_ref_keeps_replaced_item)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    ck_assert_int_eq(put(&f, 1, 100, 0), ENG_SUCCESS);
    struct item *old = find(&f, 1);
    ck_assert(item_ref(old));
    ck_assert_int_eq(put(&f, 1, 200, 0), ENG_SUCCESS);
    ck_assert_ptr_ne(find(&f, 1), old);
    ck_assert(!item_is_linked(old));
    ck_assert_uint_eq(old->nbytes, 100);
    size_t used = f.s.mem_used;
    item_release(&f.s, old);
    ck_assert_uint_lt(f.s.mem_used, used);
    teardown_store(&f);
}
END_TEST

START_TEST(test_eviction_skips_referenced)
{
    struct fixture f;
    const size_t limit = 50 * 1100;
    setup_store(&f, limit, 1 << 20, true);
    ck_assert_int_eq(put(&f, 0, 1000, 0), ENG_SUCCESS);
    struct item *held = find(&f, 0);
    ck_assert(item_ref(held));                      /* a reader holds the LRU tail */
    for (unsigned i = 1; i < 500; i++)
        ck_assert_int_eq(put(&f, i, 1000, 0), ENG_SUCCESS);
    ck_assert_uint_gt(f.s.stats.evictions, 300);
    ck_assert(item_is_linked(held));
    ck_assert_ptr_eq(find(&f, 0), held);
    ck_assert_uint_le(f.s.mem_used, limit);
    item_release(&f.s, held);
    ck_assert(item_is_linked(held));                /* releasing does not unlink */
    teardown_store(&f);
}
END_TEST

START_TEST(test_all_referenced_no_memory)
{
    struct fixture f;
    const size_t limit = 10 * 1100;
    setup_store(&f, limit, 1 << 20, true);
    struct item *held[16];
    unsigned n = 0;
    while (n < 16 && put(&f, n, 1000, 0) == ENG_SUCCESS && f.s.stats.evictions == 0) {
        held[n] = find(&f, n);
        ck_assert(item_ref(held[n]));
        n++;
    }
    /* Everything is referenced: nothing can be evicted. */
    ck_assert_int_eq(put(&f, 100, 1000, 0), ENG_NO_MEMORY);
    for (unsigned i = 0; i < n; i++)
        item_release(&f.s, held[i]);
    ck_assert_int_eq(put(&f, 100, 1000, 0), ENG_SUCCESS);
    teardown_store(&f);
}
END_TEST

START_TEST(test_lazy_expiry_and_sweep)
{
    struct fixture f;
    setup_store(&f, 1 << 22, 1 << 20, true);
    for (unsigned i = 0; i < 1000; i++)
        ck_assert_int_eq(put(&f, i, 10, clock_exptime(&f.clock, i < 500 ? 5 : 0)), ENG_SUCCESS);
    ck_assert_uint_eq(f.s.curr_items, 1000);

    clock_set(&f.clock, STARTED + 10);
    enum item_miss why = ITEM_MISS_ABSENT;
    char key[32];
    size_t nkey = (size_t)key_of(key, 3);
    ck_assert_ptr_null(item_lookup(&f.s, key, nkey, hash_key(key, nkey), &why));
    ck_assert_int_eq(why, ITEM_MISS_EXPIRED);
    ck_assert_uint_eq(f.s.curr_items, 999);

    size_t removed = 0;
    for (int t = 0; t < 100 && f.s.curr_items > 500; t++)
        removed += item_store_tick(&f.s);
    ck_assert_uint_eq(removed, 499);
    ck_assert_uint_eq(f.s.curr_items, 500);
    ck_assert_uint_eq(f.s.stats.expired_unfetched, 499);
    for (unsigned i = 500; i < 1000; i++)
        ck_assert_ptr_nonnull(find(&f, i));
    teardown_store(&f);
}
END_TEST

START_TEST(test_flush_by_cas)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    ck_assert_int_eq(put(&f, 1, 10, 0), ENG_SUCCESS);
    ck_assert_int_eq(put(&f, 2, 10, 0), ENG_SUCCESS);
    uint64_t cas2 = find(&f, 2)->cas;
    item_flush_at(&f.s, f.s.clock->now, true);     /* flush_all now, with cas */
    ck_assert_int_eq(put(&f, 3, 10, 0), ENG_SUCCESS);
    ck_assert_uint_eq(find(&f, 3)->cas, cas2 + 2);  /* the flush took one id, as memcached's */
    enum item_miss why = ITEM_MISS_ABSENT;
    char key[32];
    size_t nkey = (size_t)key_of(key, 1);
    ck_assert_ptr_null(item_lookup(&f.s, key, nkey, hash_key(key, nkey), &why));
    ck_assert_int_eq(why, ITEM_MISS_FLUSHED);
    ck_assert_ptr_nonnull(find(&f, 3));
    item_store_tick(&f.s);
    ck_assert_uint_eq(f.s.curr_items, 1);
    teardown_store(&f);
}
END_TEST

START_TEST(test_tail_age)
{
    struct fixture f;
    setup_store(&f, 1 << 20, 1 << 20, true);
    ck_assert_uint_eq(item_tail_age(&f.s), 0);
    ck_assert_int_eq(put(&f, 1, 10, 0), ENG_SUCCESS);
    for (int t = 1; t <= 30; t++) {
        clock_set(&f.clock, STARTED + t);
        item_store_tick(&f.s);
        if (t == 10)
            ck_assert_int_eq(put(&f, 2, 10, 0), ENG_SUCCESS);
    }
    ck_assert_uint_eq(item_tail_age(&f.s), 30);
    item_bump(&f.s, find(&f, 1));           /* item 2 is the tail now */
    ck_assert_uint_eq(item_tail_age(&f.s), 20);

    /* Many busy seconds: the mark log thins but stays sane. */
    for (int t = 31; t <= 2000; t++) {
        ck_assert_int_eq(put(&f, 100 + (unsigned)t, 10, 0), ENG_SUCCESS);
        clock_set(&f.clock, STARTED + t);
        item_store_tick(&f.s);
    }
    ck_assert_uint_le(f.s.nmarks, ITEM_AGE_MARKS);
    /* True age 1990; the estimate may only err towards older, and little. */
    rel_time_t age = item_tail_age(&f.s);
    ck_assert_uint_ge(age, 1990);
    ck_assert_uint_le(age, 2000);
    /* Recent history stays exact: make a fresh item the tail. */
    for (unsigned i = 0; i < 3000; i++)
        if (i != 1998 + 100 && find(&f, i) != NULL)
            item_bump(&f.s, find(&f, i));
    ck_assert(key_is(f.s.lru_tail, 1998 + 100));
    ck_assert_uint_le(item_tail_age(&f.s), 3);
    teardown_store(&f);
}
END_TEST

static Suite *items_suite(void)
{
    Suite *s = suite_create("items");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_lru_order);
    tcase_add_test(tc, test_evict_at_limit);
    tcase_add_test(tc, test_no_evict_out_of_memory);
    tcase_add_test(tc, test_too_large);
    tcase_add_test(tc, test_item_bigger_than_memory);
    tcase_add_test(tc, test_ref_keeps_deleted_item);
    tcase_add_test(tc, test_ref_keeps_replaced_item);
    tcase_add_test(tc, test_eviction_skips_referenced);
    tcase_add_test(tc, test_all_referenced_no_memory);
    tcase_add_test(tc, test_lazy_expiry_and_sweep);
    tcase_add_test(tc, test_flush_by_cas);
    tcase_add_test(tc, test_tail_age);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(items_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
