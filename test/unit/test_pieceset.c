/*
 * Unit tests for the used-piece set of a replica (cocytus/pieceset.c) and
 * the radix sort that turns it into an allocator (cocytus/radix.c).
 *
 * The set stands in for a whole allocator on parity processes, so the main
 * test drives a real allocator (the "data process") with random allocs and
 * frees, feeds every offset it returns to the set, and checks at intervals
 * that the allocator built from the set is the data process's: same digest,
 * same counters, dalloc_check() clean.  The hash table's removal moves
 * entries, so the runs are long enough to grow the table several times and
 * to churn every probe run.  Hand-built cases pin the refusals.
 *
 * The same build on a thread of its own (cocytus/allocbuild.c, a recovery
 * process's allocator while it serves) is checked against the sender too,
 * for an overlap, and for a build abandoned while it runs.
 *
 * PIECESET_BENCH=N in the environment times pieceset_build() for N pieces
 * instead (the failover cost, docs/evaluation/cpu-per-op.md).
 */
#include "cocytus/alloc.h"
#include "cocytus/allocbuild.h"
#include "cocytus/pieceset.h"
#include "cocytus/radix.h"
#include "unit_rng.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REGION ((uint64_t)64 << 20)
#define LIVE_MAX 20000

/* Builds the set into an allocator and compares it with the sender's. */
static void expect_same(const struct pieceset *s, const struct dalloc *sender, long step)
{
    struct dalloc *a = pieceset_build(s);
    if (a == NULL)
        ck_abort_msg("step %ld: the set did not build (errno %d)", step, errno);
    uint64_t digest = 0;
    if (pieceset_digest(s, &digest) != 0 || digest != dalloc_digest(sender))
        ck_abort_msg("step %ld: the set's digest differs from the sender's", step);
    if (dalloc_check(a) != DALLOC_CHECK_OK || dalloc_digest(a) != dalloc_digest(sender) ||
        dalloc_used_bytes(a) != dalloc_used_bytes(sender) ||
        dalloc_used_pieces(a) != dalloc_used_pieces(sender) ||
        pieceset_count(s) != dalloc_used_pieces(sender) ||
        pieceset_used_bytes(s) != dalloc_used_bytes(sender))
        ck_abort_msg("step %ld: the built allocator differs from the sender's", step);
    dalloc_destroy(a);
}

START_TEST(test_mirrors_allocator)
{
    struct rng rng = { 20261203 };
    struct dalloc *sender = dalloc_new(REGION);
    struct pieceset *s = pieceset_new(REGION);
    uint64_t *live = malloc(LIVE_MAX * sizeof(*live));
    size_t nlive = 0;
    ck_assert_ptr_nonnull(sender);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(live);

    for (long step = 0; step < 200000; step++) {
        /* Grow to LIVE_MAX pieces in the first half, then churn and shrink. */
        bool grow = step < 100000 ? rng_below(&rng, 4) != 0 : rng_below(&rng, 5) < 2;
        if ((grow && nlive < LIVE_MAX) || nlive == 0) {
            uint64_t size = 1 + rng_below(&rng, rng_below(&rng, 8) == 0 ? 20000 : 1500), off;
            if (dalloc_alloc(sender, size, &off) != 0)
                continue;
            if (pieceset_add(s, off, size) != 0)
                ck_abort_msg("step %ld: add of %" PRIu64 " at %" PRIu64 " refused", step, size,
                             off);
            live[nlive++] = off;
        } else {
            size_t i = rng_below(&rng, nlive);
            uint64_t want, got;
            ck_assert_int_eq(dalloc_free(sender, live[i], &want), 0);
            if (pieceset_remove(s, live[i], &got) != 0 || got != want)
                ck_abort_msg("step %ld: remove at %" PRIu64 " failed", step, live[i]);
            live[i] = live[--nlive];
        }
        if (step % 20000 == 0)
            expect_same(s, sender, step);
    }
    expect_same(s, sender, -1);

    /* The sorted listing is the allocator's used pieces in address order. */
    struct dalloc_span *all;
    size_t n;
    ck_assert_int_eq(pieceset_sorted(s, &all, &n), 0);
    ck_assert_uint_eq(n, dalloc_used_pieces(sender));
    struct dalloc_iter it;
    uint64_t off, size;
    dalloc_iter_init(sender, &it);
    for (size_t i = 0; i < n; i++) {
        ck_assert(dalloc_iter_next_used(&it, &off, &size));
        ck_assert_uint_eq(all[i].off, off);
        ck_assert_uint_eq(all[i].size, size);
    }
    ck_assert(!dalloc_iter_next_used(&it, &off, &size));
    free(all);

    /* Emptied piece by piece, then reset: both leave nothing. */
    while (nlive > 0)
        ck_assert_int_eq(pieceset_remove(s, live[--nlive], NULL), 0);
    ck_assert_uint_eq(pieceset_count(s), 0);
    ck_assert_uint_eq(pieceset_used_bytes(s), 0);
    ck_assert_int_eq(pieceset_add(s, 0, 16), 0);
    pieceset_reset(s);
    ck_assert_uint_eq(pieceset_count(s), 0);
    ck_assert_int_eq(pieceset_remove(s, 0, NULL), -ENOENT);
    ck_assert_int_eq(pieceset_sorted(s, &all, &n), 0);
    ck_assert_ptr_null(all);
    ck_assert_uint_eq(n, 0);
    /* Empty, and one piece over the whole region: the digests of a fresh
     * allocator and of a full one. */
    struct dalloc *fresh = dalloc_new(REGION);
    uint64_t digest, whole;
    ck_assert_int_eq(pieceset_digest(s, &digest), 0);
    ck_assert_uint_eq(digest, dalloc_digest(fresh));
    ck_assert_int_eq(dalloc_alloc(fresh, REGION, &off), 0);
    ck_assert_int_eq(pieceset_add(s, off, REGION), 0);
    ck_assert_int_eq(pieceset_digest(s, &whole), 0);
    ck_assert_uint_eq(whole, dalloc_digest(fresh));
    ck_assert_uint_ne(whole, digest);
    pieceset_reset(s);
    dalloc_destroy(fresh);

    free(live);
    pieceset_destroy(s);
    dalloc_destroy(sender);
}
END_TEST

/* ---- the build on a thread (allocbuild.h) ---- */

struct build_wait {
    struct event_base *base;
    int done;
};

static void on_done(void *ctx)
{
    struct build_wait *w = ctx;
    w->done++;
    event_base_loopbreak(w->base);
}

/* Starts a build of s and runs the loop until it reports (10 s at most). */
static struct dalloc *build_on_thread(const struct pieceset *s, int *err)
{
    struct build_wait w = { event_base_new(), 0 };
    ck_assert_ptr_nonnull(w.base);
    struct alloc_build *b = alloc_build_start(w.base, s, on_done, &w);
    ck_assert_ptr_nonnull(b);
    struct timeval limit = { 10, 0 };
    event_base_loopexit(w.base, &limit);
    event_base_dispatch(w.base);
    ck_assert_int_eq(w.done, 1);
    uint64_t us;
    struct dalloc *a = alloc_build_finish(b, err, &us);
    event_base_free(w.base);
    return a;
}

START_TEST(test_build_on_thread)
{
    struct rng rng = { 20261204 };
    struct dalloc *sender = dalloc_new(REGION);
    struct pieceset *s = pieceset_new(REGION);
    ck_assert_ptr_nonnull(sender);
    ck_assert_ptr_nonnull(s);
    int err = -1;

    /* Empty: a fresh allocator. */
    struct dalloc *a = build_on_thread(s, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(err, 0);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(sender));
    dalloc_destroy(a);

    /* Some thousands of pieces with gaps: the sender's allocator. */
    for (int i = 0; i < 30000; i++) {
        uint64_t size = 1 + rng_below(&rng, 3000), off;
        ck_assert_int_eq(dalloc_alloc(sender, size, &off), 0);
        ck_assert_int_eq(pieceset_add(s, off, size), 0);
        if (rng_below(&rng, 3) == 0) {
            ck_assert_int_eq(dalloc_free(sender, off, NULL), 0);
            ck_assert_int_eq(pieceset_remove(s, off, NULL), 0);
        }
    }
    a = build_on_thread(s, &err);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(sender));
    dalloc_destroy(a);

    /* Abandoned while it may still run, then started again and finished. */
    struct event_base *base = event_base_new();
    struct build_wait w = { base, 0 };
    alloc_build_cancel(alloc_build_start(base, s, on_done, &w));
    alloc_build_cancel(NULL);
    event_base_free(base);
    ck_assert_int_eq(w.done, 0);

    /* Two pieces that overlap from different starts: no allocator. */
    pieceset_reset(s);
    ck_assert_int_eq(pieceset_add(s, 0, 64), 0);
    ck_assert_int_eq(pieceset_add(s, 32, 64), 0);
    a = build_on_thread(s, &err);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(err, ENOSPC);

    pieceset_destroy(s);
    dalloc_destroy(sender);
}
END_TEST

START_TEST(test_refusals)
{
    struct pieceset *s = pieceset_new(4096);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(pieceset_add(s, 8, 16), -EINVAL);        /* misaligned */
    ck_assert_int_eq(pieceset_add(s, 4096, 16), -EINVAL);     /* at the end */
    ck_assert_int_eq(pieceset_add(s, 4080, 17), -EINVAL);     /* rounds past it */
    ck_assert_int_eq(pieceset_add(s, 0, UINT64_MAX), -EINVAL);
    ck_assert_int_eq(pieceset_add(s, 4080, 16), 0);
    ck_assert_int_eq(pieceset_add(s, 0, 0), 0);               /* one grain */
    ck_assert_int_eq(pieceset_add(s, 0, 100), -EEXIST);
    ck_assert_uint_eq(pieceset_used_bytes(s), 32);
    /* pieceset_put replaces the piece that starts there, and adds one. */
    ck_assert_int_eq(pieceset_put(s, 0, 100), 0);
    ck_assert_uint_eq(pieceset_size_of(s, 0), 112);
    ck_assert_int_eq(pieceset_put(s, 0, 1), 0);
    ck_assert_uint_eq(pieceset_size_of(s, 0), 16);
    ck_assert_int_eq(pieceset_put(s, 8, 16), -EINVAL);
    ck_assert_uint_eq(pieceset_used_bytes(s), 32);
    uint64_t size = 0;
    ck_assert_int_eq(pieceset_remove(s, 16, &size), -ENOENT);
    ck_assert_int_eq(pieceset_remove(s, 7, &size), -ENOENT);
    ck_assert_int_eq(pieceset_remove(s, 4080, &size), 0);
    ck_assert_uint_eq(size, 16);
    ck_assert_int_eq(pieceset_remove(s, 4080, &size), -ENOENT);

    /* Pieces holding more bytes than the region: refused (some overlap). */
    ck_assert_int_eq(pieceset_add(s, 16, 4080), 0);          /* the rest of it */
    ck_assert_int_eq(pieceset_add(s, 32, 16), -ENOSPC);
    ck_assert_int_eq(pieceset_remove(s, 16, NULL), 0);
    ck_assert_uint_eq(pieceset_count(s), 1);

    /* Overlapping pieces that start apart are taken, but make no allocator. */
    ck_assert_int_eq(pieceset_add(s, 16, 64), 0);
    ck_assert_int_eq(pieceset_add(s, 48, 16), 0);
    errno = 0;
    ck_assert_ptr_null(pieceset_build(s));
    ck_assert_int_eq(errno, ENOSPC);
    uint64_t digest;
    ck_assert_int_eq(pieceset_digest(s, &digest), -ENOSPC);
    ck_assert_int_eq(pieceset_remove(s, 48, NULL), 0);
    struct dalloc *a = pieceset_build(s);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(pieceset_digest(s, &digest), 0);
    ck_assert_uint_eq(digest, dalloc_digest(a));
    ck_assert_uint_eq(dalloc_used_bytes(a), 16 + 64);
    ck_assert_uint_eq(dalloc_size_of(a, 16), 64);
    dalloc_destroy(a);
    pieceset_destroy(s);

    errno = 0;
    ck_assert_ptr_null(pieceset_new(0));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(pieceset_new(100));
    ck_assert_ptr_null(pieceset_new(DALLOC_MAX_REGION + DALLOC_GRAIN));
    pieceset_destroy(NULL);
}
END_TEST

/* Probe runs that wrap from the table's last slot to its first: removal
 * shifts entries back across the end.  White box: the offsets are chosen
 * with pieceset.c's hash (Fibonacci hashing of offset/16 + 1 into the
 * initial 64 slots), so that several share the last slot as their home. */
static uint64_t home64(uint64_t off)
{
    return ((off / DALLOC_GRAIN + 1) * 0x9E3779B97F4A7C15ull) >> 58;
}

START_TEST(test_wrapping_probe_runs)
{
    struct pieceset *s = pieceset_new((uint64_t)1 << 30);
    ck_assert_ptr_nonnull(s);
    uint64_t last[4], first[2];
    int nlast = 0, nfirst = 0;
    for (uint64_t off = 0; nlast < 4 || nfirst < 2; off += DALLOC_GRAIN) {
        uint64_t h = home64(off);
        if (h == 63 && nlast < 4)
            last[nlast++] = off;
        else if (h == 0 && nfirst < 2)
            first[nfirst++] = off;
    }
    /* Slots 63, 0, 1, 2 hold the last-homed ones, then the first-homed. */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pieceset_add(s, last[i], 16), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pieceset_add(s, first[i], 32), 0);
    /* Remove from the middle of the wrapped run, one at a time; every other
     * piece must still be found each time. */
    static const int order[] = { 1, 0, 3, 2 };
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(pieceset_remove(s, last[order[k]], NULL), 0);
        for (int i = 0; i < 4; i++) {
            bool gone = false;
            for (int j = 0; j <= k; j++)
                gone = gone || order[j] == i;
            ck_assert_uint_eq(pieceset_size_of(s, last[i]), gone ? 0 : 16);
        }
        for (int i = 0; i < 2; i++)
            ck_assert_uint_eq(pieceset_size_of(s, first[i]), 32);
    }
    ck_assert_uint_eq(pieceset_count(s), 2);
    pieceset_destroy(s);
}
END_TEST

/* The radix sort under the build: sorted and stable, for keys of every
 * width up to 64 bits (records carry their input position). */
struct keyed {
    uint64_t key;
    uint32_t seq;
};

static uint64_t keyed_key(const void *rec)
{
    return ((const struct keyed *)rec)->key;
}

static int keyed_cmp(const void *x, const void *y)
{
    const struct keyed *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

START_TEST(test_radix_sort)
{
    struct rng rng = { 7 };
    static const unsigned widths[] = { 0, 3, 11, 12, 22, 40, 64 };
    size_t n = 5000;
    struct keyed *v = malloc(n * sizeof(*v)), *want = malloc(n * sizeof(*want));
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(want);
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
        for (size_t i = 0; i < n; i++) {
            uint64_t k = widths[w] == 64 ? rng_next(&rng)
                         : rng_next(&rng) & (((uint64_t)1 << widths[w]) - 1);
            if (i % 7 == 3)
                k = v[i - 1].key;          /* duplicates, to see stability */
            v[i] = (struct keyed){ k, (uint32_t)i };
        }
        memcpy(want, v, n * sizeof(*v));
        qsort(want, n, sizeof(*want), keyed_cmp);
        ck_assert_int_eq(radix_sort(v, n, sizeof(*v), keyed_key), 0);
        for (size_t i = 0; i < n; i++)
            if (v[i].key != want[i].key || v[i].seq != want[i].seq)
                ck_abort_msg("width %u: record %zu differs", widths[w], i);
    }
    ck_assert_int_eq(radix_sort(v, 0, sizeof(*v), keyed_key), 0);
    ck_assert_int_eq(radix_sort(v, 1, sizeof(*v), keyed_key), 0);
    free(v);
    free(want);
}
END_TEST

/* The largest region: offsets and sizes near 2^40 grains keep their high
 * bits through the 48-bit slot fields. */
START_TEST(test_largest_region)
{
    struct pieceset *s = pieceset_new(DALLOC_MAX_REGION);
    ck_assert_ptr_nonnull(s);
    uint64_t top = DALLOC_MAX_REGION - 4096;
    ck_assert_int_eq(pieceset_add(s, top, 4096), 0);
    ck_assert_int_eq(pieceset_add(s, 0, top), 0);
    struct dalloc_span *all;
    size_t n;
    ck_assert_int_eq(pieceset_sorted(s, &all, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(all[0].off, 0);
    ck_assert_uint_eq(all[0].size, top);
    ck_assert_uint_eq(all[1].off, top);
    ck_assert_uint_eq(all[1].size, 4096);
    free(all);
    ck_assert_uint_eq(pieceset_used_bytes(s), DALLOC_MAX_REGION);
    struct dalloc *a = pieceset_build(s);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_size_of(a, top), 4096);
    ck_assert_uint_eq(dalloc_free_pieces(a), 0);
    dalloc_destroy(a);
    uint64_t size;
    ck_assert_int_eq(pieceset_remove(s, top, &size), 0);
    ck_assert_uint_eq(size, 4096);
    pieceset_destroy(s);
}
END_TEST

/* PIECESET_BENCH=N: the time to build an allocator from N pieces, which a
 * parity process spends when it starts serving a failed data process.  The
 * pieces come from a real allocator: N allocations of 100-2000 bytes, then
 * every third freed (gaps between them, as after churn). */
static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run_bench(long n)
{
    struct rng rng = { 1 };
    uint64_t region = dalloc_round_size((uint64_t)n * 2048);
    struct dalloc *sender = dalloc_new(region);
    struct pieceset *s = pieceset_new(region);
    uint64_t *offs = malloc((size_t)n * sizeof(*offs));
    if (sender == NULL || s == NULL || offs == NULL)
        return 1;
    for (long i = 0; i < n; i++) {
        uint64_t size = 100 + rng_below(&rng, 1900);
        if (dalloc_alloc(sender, size, &offs[i]) != 0 || pieceset_add(s, offs[i], size) != 0)
            return 1;
    }
    for (long i = 0; i < n; i += 3)
        if (dalloc_free(sender, offs[i], NULL) != 0 || pieceset_remove(s, offs[i], NULL) != 0)
            return 1;
    double best = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = seconds_now();
        struct dalloc *a = pieceset_build(s);
        double t = seconds_now() - t0;
        if (a == NULL || dalloc_digest(a) != dalloc_digest(sender))
            return 1;
        dalloc_destroy(a);
        if (round == 0 || t < best)
            best = t;
    }
    printf("pieceset_build: %" PRIu64 " pieces (%" PRIu64 " free gaps): %.1f ms (best of 5), "
           "%.0f ns per piece; set %zu bytes, allocator %zu bytes\n",
           pieceset_count(s), dalloc_free_pieces(sender), best * 1e3,
           best * 1e9 / (double)pieceset_count(s), pieceset_meta_bytes(s),
           dalloc_meta_bytes(sender));
    free(offs);
    pieceset_destroy(s);
    dalloc_destroy(sender);
    return 0;
}

int main(void)
{
    const char *bench = getenv("PIECESET_BENCH");
    if (bench != NULL)
        return run_bench(atol(bench) > 0 ? atol(bench) : 30000);
    Suite *suite = suite_create("pieceset");
    TCase *tc = tcase_create("pieceset");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mirrors_allocator);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_largest_region);
    tcase_add_test(tc, test_radix_sort);
    tcase_add_test(tc, test_wrapping_probe_runs);
    tcase_add_test(tc, test_build_on_thread);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
