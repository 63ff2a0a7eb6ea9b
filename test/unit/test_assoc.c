/* test_assoc.c - the hash table: many keys across several incremental
 * doublings, deletes while a migration is under way, iteration and scans. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assoc.h"
#include "hash.h"
#include "items.h"

/* Bare items: just enough for the table (key, chain pointer). */
static struct item *make_item(unsigned n)
{
    char key[32];
    int nkey = snprintf(key, sizeof(key), "key:%u", n);
    struct item *it = calloc(1, sizeof(struct item) + (size_t)nkey + 2);
    ck_assert_ptr_nonnull(it);
    it->nkey = (uint8_t)nkey;
    memcpy(it->data, key, (size_t)nkey);
    it->flags = n;
    return it;
}

static uint64_t item_hash(const struct item *it)
{
    return hash_key(item_key(it), it->nkey);
}

static struct item *find_n(struct assoc *a, unsigned n)
{
    char key[32];
    int nkey = snprintf(key, sizeof(key), "key:%u", n);
    return assoc_find(a, key, (size_t)nkey, hash_key(key, (size_t)nkey));
}

static struct item **make_items(unsigned count)
{
    struct item **items = calloc(count, sizeof(*items));
    ck_assert_ptr_nonnull(items);
    for (unsigned i = 0; i < count; i++)
        items[i] = make_item(i);
    return items;
}

static void free_items(struct item **items, unsigned count)
{
    for (unsigned i = 0; i < count; i++)
        free(items[i]);
    free(items);
}

START_TEST(test_hash_basics)
{
    ck_assert_uint_eq(hash_key("abc", 3), hash_key("abc", 3));
    ck_assert_uint_ne(hash_key("abc", 3), hash_key("abd", 3));
    ck_assert_uint_ne(hash_key("abc", 3), hash_key("abc", 2));
    /* Low bits spread: 4096 sequential keys over 256 buckets. */
    unsigned counts[256] = { 0 };
    for (unsigned i = 0; i < 4096; i++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "k%u", i);
        counts[hash_key(key, (size_t)n) & 255]++;
    }
    for (unsigned b = 0; b < 256; b++)
        ck_assert_uint_lt(counts[b], 48);
}
END_TEST

START_TEST(test_insert_find_across_resizes)
{
    enum { N = 100000 };
    struct assoc a;
    ck_assert_int_eq(assoc_init(&a, 4), 0);
    ck_assert_uint_eq(assoc_power(&a), 4);
    struct item **items = make_items(N);

    unsigned saw_expanding = 0;
    for (unsigned i = 0; i < N; i++) {
        assoc_insert(&a, items[i], item_hash(items[i]));
        if (assoc_expanding(&a))
            saw_expanding++;
        /* Everything inserted so far stays findable mid-migration. */
        if (i % 997 == 0) {
            for (unsigned j = 0; j <= i; j += 101)
                ck_assert_ptr_eq(find_n(&a, j), items[j]);
        }
    }
    ck_assert_uint_gt(saw_expanding, 0);
    ck_assert_uint_eq(a.count, N);
    /* 100000 items at <= 1.5 per bucket needs at least 2^17 buckets. */
    while (assoc_expanding(&a))
        assoc_migrate(&a, 1000);
    ck_assert_uint_ge(assoc_power(&a), 17);
    ck_assert_uint_eq(assoc_bytes(&a), ((size_t)1 << assoc_power(&a)) * sizeof(void *));

    for (unsigned i = 0; i < N; i++)
        ck_assert_ptr_eq(find_n(&a, i), items[i]);
    ck_assert_ptr_null(find_n(&a, N + 1));

    for (unsigned i = 0; i < N; i += 2)
        ck_assert(assoc_delete(&a, items[i], item_hash(items[i])));
    ck_assert(!assoc_delete(&a, items[0], item_hash(items[0])));
    for (unsigned i = 0; i < N; i++) {
        if (i % 2 == 0)
            ck_assert_ptr_null(find_n(&a, i));
        else
            ck_assert_ptr_eq(find_n(&a, i), items[i]);
    }
    ck_assert_uint_eq(a.count, N / 2);
    assoc_destroy(&a);
    free_items(items, N);
}
END_TEST

START_TEST(test_delete_during_migration)
{
    enum { N = 20000 };
    struct assoc a;
    ck_assert_int_eq(assoc_init(&a, 4), 0);
    struct item **items = make_items(N);

    unsigned inserted = 0;
    unsigned rounds = 0;
    /* Several times over: fill until an expansion starts, then delete every
     * third live key while it runs, checking the rest each time. */
    while (inserted < N && rounds < 6) {
        while (inserted < N && !assoc_expanding(&a)) {
            assoc_insert(&a, items[inserted], item_hash(items[inserted]));
            inserted++;
        }
        if (!assoc_expanding(&a))
            break;
        rounds++;
        /* A few more inserts move some old buckets: really mid-migration. */
        for (unsigned k = 0; k < 4 && inserted < N; k++, inserted++)
            assoc_insert(&a, items[inserted], item_hash(items[inserted]));
        ck_assert_uint_gt(a.migrate_next, 0);
        for (unsigned i = 0; i < inserted; i += 3) {
            if (items[i]->flags == UINT32_MAX)
                continue;
            ck_assert(assoc_delete(&a, items[i], item_hash(items[i])));
            items[i]->flags = UINT32_MAX;       /* mark deleted */
        }
        ck_assert(assoc_expanding(&a));
        for (unsigned i = 0; i < inserted; i++) {
            if (items[i]->flags == UINT32_MAX)
                ck_assert_ptr_null(find_n(&a, i));
            else
                ck_assert_ptr_eq(find_n(&a, i), items[i]);
        }
    }
    ck_assert_uint_ge(rounds, 3);
    assoc_destroy(&a);
    free_items(items, N);
}
END_TEST

struct seen {
    unsigned char *count;
    unsigned total;
    struct assoc *a;
    bool delete_odd;
};

static void count_visit(void *ctx, struct item *it)
{
    struct seen *s = ctx;
    unsigned n = (unsigned)atoi(item_key(it) + 4);
    s->count[n]++;
    s->total++;
    if (s->delete_odd && n % 2 == 1)
        ck_assert(assoc_delete(s->a, it, item_hash(it)));
}

START_TEST(test_iterate_once_each)
{
    enum { N = 5000 };
    struct assoc a;
    ck_assert_int_eq(assoc_init(&a, 4), 0);
    struct item **items = make_items(N);
    unsigned i = 0;
    /* Stop while an expansion is in progress: both tables hold items. */
    while (i < N && !(assoc_expanding(&a) && a.count > 2000)) {
        assoc_insert(&a, items[i], item_hash(items[i]));
        i++;
    }
    ck_assert(assoc_expanding(&a));
    unsigned linked = i;

    struct seen s = { calloc(N, 1), 0, &a, false };
    assoc_iterate(&a, count_visit, &s);
    ck_assert_uint_eq(s.total, linked);
    for (unsigned j = 0; j < linked; j++)
        ck_assert_uint_eq(s.count[j], 1);

    /* A visitor may delete the item it visits. */
    memset(s.count, 0, N);
    s.total = 0;
    s.delete_odd = true;
    assoc_iterate(&a, count_visit, &s);
    ck_assert_uint_eq(s.total, linked);
    ck_assert_uint_eq(a.count, (linked + 1) / 2);
    for (unsigned j = 0; j < linked; j++) {
        if (j % 2)
            ck_assert_ptr_null(find_n(&a, j));
        else
            ck_assert_ptr_eq(find_n(&a, j), items[j]);
    }
    free(s.count);
    assoc_destroy(&a);
    free_items(items, N);
}
END_TEST

START_TEST(test_scan_covers_all)
{
    enum { N = 3000 };
    struct assoc a;
    ck_assert_int_eq(assoc_init(&a, 8), 0);
    struct item **items = make_items(N);
    for (unsigned i = 0; i < N; i++)
        assoc_insert(&a, items[i], item_hash(items[i]));
    while (assoc_expanding(&a))
        assoc_migrate(&a, 100);

    struct seen s = { calloc(N, 1), 0, &a, false };
    size_t cursor = 0;
    /* Small slices until the cursor wraps: one lap. */
    size_t positions = (size_t)1 << assoc_power(&a);
    size_t spent = 0;
    do {
        spent += assoc_scan(&a, &cursor, 100, count_visit, &s);
    } while (cursor != 0);
    ck_assert_uint_eq(spent, positions + N);
    ck_assert_uint_eq(s.total, N);
    for (unsigned j = 0; j < N; j++)
        ck_assert_uint_eq(s.count[j], 1);

    /* One call never goes past the end, whatever the budget. */
    s.total = 0;
    ck_assert_uint_eq(assoc_scan(&a, &cursor, (size_t)-1, count_visit, &s), positions + N);
    ck_assert_uint_eq(cursor, 0);
    ck_assert_uint_eq(s.total, N);
    free(s.count);
    assoc_destroy(&a);
    free_items(items, N);
}
END_TEST

/* A walk in small steps while the table doubles several times between
 * them (inserts, lookups that migrate, deletes): every item present all
 * along is visited exactly once, none twice. */
START_TEST(test_walk_survives_growth)
{
    enum { FIRST = 300, N = 40000 };
    struct assoc a;
    ck_assert_int_eq(assoc_init(&a, 4), 0);
    struct item **items = make_items(N);
    for (unsigned i = 0; i < FIRST; i++)
        assoc_insert(&a, items[i], item_hash(items[i]));
    unsigned power0 = assoc_power(&a);
    struct seen s = { calloc(N, 1), 0, &a, false };
    uint64_t cursor = 0;
    unsigned next = FIRST, steps = 0, deleted = 0, expanding_steps = 0;
    bool done = false;
    while (!done) {
        done = assoc_walk(&a, &cursor, 7, count_visit, &s);
        steps++;
        expanding_steps += assoc_expanding(&a);
        /* Between steps: more items (the table grows), lookups (they
         * migrate buckets), and a delete of a late item. */
        unsigned added = 0;
        for (; added < 60 && next < N; added++, next++)
            assoc_insert(&a, items[next], item_hash(items[next]));
        ck_assert_ptr_nonnull(find_n(&a, steps % FIRST));
        if (added == 60 && steps % 3 == 0) {
            ck_assert(assoc_delete(&a, items[next - 5], item_hash(items[next - 5])));
            deleted++;
        }
    }
    ck_assert_uint_ge(assoc_power(&a), power0 + 3);
    ck_assert_uint_gt(expanding_steps, 0);
    for (unsigned j = 0; j < FIRST; j++)
        ck_assert_msg(s.count[j] == 1, "key:%u seen %u times", j, s.count[j]);
    for (unsigned j = FIRST; j < N; j++)
        ck_assert_msg(s.count[j] <= 1, "key:%u seen %u times", j, s.count[j]);

    /* A walk over a quiet table, in any step size, is every item once. */
    for (size_t budget = 1; budget <= 1u << 20; budget *= 32) {
        memset(s.count, 0, N);
        s.total = 0;
        cursor = 0;
        while (!assoc_walk(&a, &cursor, budget, count_visit, &s))
            ;
        ck_assert_uint_eq(s.total, a.count);
        for (unsigned j = 0; j < N; j++)
            ck_assert_uint_le(s.count[j], 1);
    }
    free(s.count);
    assoc_destroy(&a);
    free_items(items, N);
}
END_TEST

static Suite *assoc_suite(void)
{
    Suite *s = suite_create("assoc");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hash_basics);
    tcase_add_test(tc, test_insert_find_across_resizes);
    tcase_add_test(tc, test_delete_during_migration);
    tcase_add_test(tc, test_iterate_once_each);
    tcase_add_test(tc, test_scan_covers_all);
    tcase_add_test(tc, test_walk_survives_growth);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(assoc_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
