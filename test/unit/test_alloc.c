/*
 * Unit tests for the deterministic allocator (cocytus/alloc.c).
 *
 * Besides hand-built cases, long random alloc/free/reserve sequences run
 * side by side on the allocator and on a deliberately simple reference model
 * (a sorted array of pieces searched linearly).  Every returned offset and
 * error must match the model, and the full piece lists, counters and
 * dalloc_check() are compared at short intervals.
 *
 * Run with DALLOC_BENCH=1 in the environment for a small timing run instead.
 */
#include "cocytus/alloc.h"
#include "unit_rng.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- random numbers (splitmix64, explicit state) ------------------------- */

/* ---- cheap assertions ----------------------------------------------------
 * Check's ck_assert_* record a checkpoint on every success, which costs a
 * system call; the long random runs use these instead and only call into
 * Check on failure. */

static void expect_u64(uint64_t got, uint64_t want, const char *what,
                       long step)
{
    if (got != want)
        ck_abort_msg("step %ld: %s is %" PRIu64 ", expected %" PRIu64, step,
                     what, got, want);
}

static void expect_int(int got, int want, const char *what, long step)
{
    if (got != want)
        ck_abort_msg("step %ld: %s is %d, expected %d", step, what, got, want);
}

static void expect_true(bool cond, const char *what, long step)
{
    if (!cond)
        ck_abort_msg("step %ld: expected %s", step, what);
}

/* ---- reference model ----------------------------------------------------- */

struct mpiece {
    uint64_t off;
    uint64_t size;
    bool used;
};

struct model {
    uint64_t region_size;
    struct mpiece *v;   /* sorted by offset, tiles the region */
    size_t n;
    size_t cap;
};

static void model_init(struct model *m, uint64_t region_size)
{
    m->region_size = region_size;
    m->cap = 64;
    m->n = 1;
    m->v = malloc(m->cap * sizeof(*m->v));
    ck_assert_ptr_nonnull(m->v);
    m->v[0].off = 0;
    m->v[0].size = region_size;
    m->v[0].used = false;
}

static void model_destroy(struct model *m)
{
    free(m->v);
    m->v = NULL;
}

static void model_insert_at(struct model *m, size_t i, struct mpiece p)
{
    if (m->n == m->cap) {
        m->cap *= 2;
        m->v = realloc(m->v, m->cap * sizeof(*m->v));
        ck_assert_ptr_nonnull(m->v);
    }
    memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
    m->v[i] = p;
    m->n++;
}

static void model_remove_at(struct model *m, size_t i)
{
    memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
    m->n--;
}

/* Rounds like the allocator should: up to 16, at least 16. */
static uint64_t model_round(uint64_t size)
{
    if (size == 0)
        return 16;
    return (size + 15) / 16 * 16;
}

/* Marks [off, off+size) used inside free piece i, splitting it. */
static void model_carve(struct model *m, size_t i, uint64_t off, uint64_t size)
{
    struct mpiece p = m->v[i];

    if (off > p.off) {
        struct mpiece left = { p.off, off - p.off, false };
        model_insert_at(m, i, left);
        i++;
    }
    m->v[i].off = off;
    m->v[i].size = size;
    m->v[i].used = true;
    if (off + size < p.off + p.size) {
        struct mpiece right = { off + size, p.off + p.size - (off + size),
                                false };
        model_insert_at(m, i + 1, right);
    }
}

static int model_alloc(struct model *m, uint64_t size, uint64_t *off)
{
    uint64_t need = model_round(size);
    size_t best = m->n;
    size_t i;

    for (i = 0; i < m->n; i++) {
        if (m->v[i].used || m->v[i].size < need)
            continue;
        if (best == m->n || m->v[i].size < m->v[best].size)
            best = i;
    }
    if (best == m->n)
        return -ENOSPC;
    *off = m->v[best].off;
    model_carve(m, best, m->v[best].off, need);
    return 0;
}

static int model_free(struct model *m, uint64_t off, uint64_t *size)
{
    size_t i;

    for (i = 0; i < m->n; i++) {
        if (m->v[i].off == off)
            break;
    }
    if (i == m->n || !m->v[i].used)
        return -ENOENT;
    *size = m->v[i].size;
    m->v[i].used = false;
    if (i + 1 < m->n && !m->v[i + 1].used) {
        m->v[i].size += m->v[i + 1].size;
        model_remove_at(m, i + 1);
    }
    if (i > 0 && !m->v[i - 1].used) {
        m->v[i - 1].size += m->v[i].size;
        model_remove_at(m, i);
    }
    return 0;
}

static int model_reserve(struct model *m, uint64_t off, uint64_t size)
{
    uint64_t need = model_round(size);
    size_t i;

    if (off % 16 != 0 || off >= m->region_size ||
        need > m->region_size - off)
        return -EINVAL;
    for (i = 0; i < m->n; i++) {
        if (off < m->v[i].off + m->v[i].size)
            break;
    }
    if (m->v[i].used || off + need > m->v[i].off + m->v[i].size)
        return -ENOSPC;
    model_carve(m, i, off, need);
    return 0;
}

/* A random free piece of the model, or -1 if there is none. */
static long model_random_free_piece(const struct model *m, struct rng *r)
{
    size_t start = rng_below(r, m->n);
    size_t k;

    for (k = 0; k < m->n; k++) {
        size_t i = (start + k) % m->n;
        if (!m->v[i].used)
            return (long)i;
    }
    return -1;
}

/* Asserts that the allocator holds exactly the model's pieces. */
static void assert_same_as_model(const struct dalloc *a, const struct model *m,
                                 long step)
{
    struct dalloc_iter it;
    uint64_t off, size, used_bytes = 0, used_pieces = 0, largest = 0;
    bool used;
    size_t i = 0;
    int rc;

    dalloc_iter_init(a, &it);
    while (dalloc_iter_next(&it, &off, &size, &used)) {
        expect_true(i < m->n, "no extra pieces", step);
        expect_u64(off, m->v[i].off, "offset", step);
        expect_u64(size, m->v[i].size, "size", step);
        expect_int(used, m->v[i].used, "used", step);
        if (used) {
            used_bytes += size;
            used_pieces++;
        } else if (size > largest) {
            largest = size;
        }
        i++;
    }
    expect_u64(i, m->n, "piece count", step);
    expect_u64(dalloc_used_bytes(a), used_bytes, "used bytes", step);
    expect_u64(dalloc_free_bytes(a), m->region_size - used_bytes, "free bytes",
               step);
    expect_u64(dalloc_used_pieces(a), used_pieces, "used pieces", step);
    expect_u64(dalloc_free_pieces(a), m->n - used_pieces, "free pieces", step);
    expect_u64(dalloc_largest_free(a), largest, "largest free", step);
    rc = dalloc_check(a);
    if (rc != DALLOC_CHECK_OK)
        ck_abort_msg("step %ld: dalloc_check: %s", step, dalloc_check_str(rc));
}

/* ---- live offsets (what can be freed) ------------------------------------ */

struct live {
    uint64_t *off;
    size_t n;
    size_t cap;
};

static void live_add(struct live *l, uint64_t off)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->off = realloc(l->off, l->cap * sizeof(*l->off));
        ck_assert_ptr_nonnull(l->off);
    }
    l->off[l->n++] = off;
}

/* Removes and returns a random element; l must not be empty. */
static uint64_t live_take_random(struct live *l, struct rng *r)
{
    size_t i = rng_below(r, l->n);
    uint64_t off = l->off[i];

    l->off[i] = l->off[--l->n];
    return off;
}

static void live_destroy(struct live *l)
{
    free(l->off);
    memset(l, 0, sizeof(*l));
}

/* ---- random workload ----------------------------------------------------- */

enum size_mix { MIX_SMALL, MIX_MIXED, MIX_EDGES };

static uint64_t random_size(struct rng *r, enum size_mix mix,
                            uint64_t region_size)
{
    uint64_t roll = rng_below(r, 1000);

    if (roll == 0)
        return region_size + 1 + rng_below(r, 100);   /* never fits */
    if (roll == 1)
        return 0;
    switch (mix) {
    case MIX_SMALL:
        return 1 + rng_below(r, 256);
    case MIX_MIXED:
        if (roll < 800)
            return 1 + rng_below(r, 512);
        return 1 + rng_below(r, 16384);
    case MIX_EDGES:
    default:
        return 16 * (1 + rng_below(r, 40)) + rng_below(r, 3) - 1;
    }
}

/* Share of operations that allocate, in percent: a slow wave, so the region
 * goes through nearly-empty and nearly-full stretches. */
static uint64_t alloc_percent(long step)
{
    static const uint64_t wave[4] = { 70, 50, 30, 50 };

    return wave[(step / 4000) % 4];
}

/* Runs `ops` random operations on a fresh allocator and a model together.
 * Every op result is compared at once; the whole state every `every` ops. */
static void run_random(uint64_t seed, uint64_t region_size, enum size_mix mix,
                       long ops, long every)
{
    struct rng r = { seed };
    struct dalloc *a = dalloc_new(region_size);
    struct model m;
    struct live l = { NULL, 0, 0 };
    long step;

    ck_assert_ptr_nonnull(a);
    model_init(&m, region_size);
    for (step = 0; step < ops; step++) {
        uint64_t roll = rng_below(&r, 100);
        uint64_t off = 0, moff = 0, fsize = 0, msize = 0;
        int rc, mrc;

        if (roll < 2) {
            /* Most likely a bad free: a random offset, aligned half the
             * time, possibly inside a piece, on a free one or past the end. */
            uint64_t bad = rng_below(&r, region_size + 64);
            if (rng_below(&r, 2) == 0)
                bad = bad / 16 * 16;
            mrc = model_free(&m, bad, &msize);
            if (mrc == 0) {
                /* It happened to be live: free for real and forget it. */
                size_t i;
                rc = dalloc_free(a, bad, &fsize);
                expect_int(rc, 0, "result", step);
                expect_u64(fsize, msize, "freed size", step);
                for (i = 0; i < l.n && l.off[i] != bad; i++)
                    ;
                expect_true(i < l.n, "live offset found", step);
                l.off[i] = l.off[--l.n];
            } else {
                expect_int(dalloc_free(a, bad, &fsize), -ENOENT, "bad free",
                           step);
            }
        } else if (roll < 4) {
            /* Reserve part of a free piece, or a random (likely bad) range. */
            long i = model_random_free_piece(&m, &r);
            uint64_t roff, rsize;
            if (i >= 0 && rng_below(&r, 2) == 0) {
                roff = m.v[i].off + 16 * rng_below(&r, m.v[i].size / 16);
                rsize = 1 + rng_below(&r, m.v[i].off + m.v[i].size - roff);
            } else {
                roff = rng_below(&r, region_size + 32);
                rsize = rng_below(&r, 2048);
            }
            mrc = model_reserve(&m, roff, rsize);
            rc = dalloc_reserve(a, roff, rsize);
            expect_int(rc, mrc, "result", step);
            if (rc == 0)
                live_add(&l, roff);
        } else if (l.n == 0 || roll < alloc_percent(step)) {
            uint64_t size = random_size(&r, mix, region_size);
            mrc = model_alloc(&m, size, &moff);
            rc = dalloc_alloc(a, size, &off);
            expect_int(rc, mrc, "result", step);
            if (rc == 0) {
                expect_u64(off, moff, "offset", step);
                expect_u64(dalloc_size_of(a, off), model_round(size),
                           "size_of(new)", step);
                live_add(&l, off);
            }
        } else {
            uint64_t victim = live_take_random(&l, &r);
            expect_int(model_free(&m, victim, &msize), 0, "model free", step);
            expect_int(dalloc_free(a, victim, &fsize), 0, "free", step);
            expect_u64(fsize, msize, "freed size", step);
            expect_u64(dalloc_size_of(a, victim), 0, "size_of(freed)", step);
        }
        if (step % every == 0)
            assert_same_as_model(a, &m, step);
    }
    assert_same_as_model(a, &m, step);

    /* Free everything in random order: back to one free piece. */
    while (l.n > 0) {
        uint64_t victim = live_take_random(&l, &r);
        uint64_t fsize, msize;
        expect_int(dalloc_free(a, victim, &fsize), 0, "free", step);
        expect_int(model_free(&m, victim, &msize), 0, "model free", step);
        expect_u64(fsize, msize, "freed size", step);
    }
    assert_same_as_model(a, &m, step);
    expect_u64(dalloc_free_pieces(a), 1, "free pieces", step);
    expect_u64(dalloc_largest_free(a), region_size, "largest free", step);

    live_destroy(&l);
    model_destroy(&m);
    dalloc_destroy(a);
}

START_TEST(test_random_small)
{
    run_random(1, 64 * 1024, MIX_SMALL, 60000, 4);
}
END_TEST

START_TEST(test_random_mixed)
{
    run_random(2, 512 * 1024, MIX_MIXED, 60000, 4);
}
END_TEST

START_TEST(test_random_edges)
{
    run_random(3, 32 * 1024, MIX_EDGES, 60000, 4);
}
END_TEST

START_TEST(test_random_tiny_region)
{
    /* A region of a few pieces: exhaustion and merging all the time. */
    run_random(4, 512, MIX_EDGES, 30000, 1);
}
END_TEST

/* ---- hand-built cases ---------------------------------------------------- */

START_TEST(test_new_bad_sizes)
{
    ck_assert_ptr_null(dalloc_new(0));
    ck_assert_ptr_null(dalloc_new(8));
    ck_assert_ptr_null(dalloc_new(1000));
    dalloc_destroy(NULL);
}
END_TEST

START_TEST(test_basic)
{
    struct dalloc *a = dalloc_new(1024);
    uint64_t off, size;

    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_region_size(a), 1024);
    ck_assert_uint_eq(dalloc_free_bytes(a), 1024);
    ck_assert_uint_eq(dalloc_used_bytes(a), 0);
    ck_assert_uint_eq(dalloc_free_pieces(a), 1);
    ck_assert_uint_eq(dalloc_used_pieces(a), 0);
    ck_assert_uint_eq(dalloc_largest_free(a), 1024);
    ck_assert_uint_gt(dalloc_meta_bytes(a), 0);

    ck_assert_int_eq(dalloc_alloc(a, 1, &off), 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(dalloc_size_of(a, 0), 16);
    ck_assert_int_eq(dalloc_alloc(a, 100, &off), 0);
    ck_assert_uint_eq(off, 16);
    ck_assert_uint_eq(dalloc_size_of(a, 16), 112);
    ck_assert_int_eq(dalloc_alloc(a, 0, &off), 0);
    ck_assert_uint_eq(off, 128);
    ck_assert_uint_eq(dalloc_size_of(a, 128), 16);
    ck_assert_uint_eq(dalloc_used_bytes(a), 144);
    ck_assert_uint_eq(dalloc_largest_free(a), 1024 - 144);

    ck_assert_int_eq(dalloc_free(a, 16, &size), 0);
    ck_assert_uint_eq(size, 112);
    ck_assert_uint_eq(dalloc_free_pieces(a), 2);
    ck_assert_int_eq(dalloc_free(a, 0, &size), 0);   /* merges right */
    ck_assert_uint_eq(size, 16);
    ck_assert_uint_eq(dalloc_free_pieces(a), 2);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_int_eq(dalloc_free(a, 128, NULL), 0);  /* merges both sides */
    ck_assert_uint_eq(dalloc_free_pieces(a), 1);
    ck_assert_uint_eq(dalloc_used_pieces(a), 0);
    ck_assert_uint_eq(dalloc_largest_free(a), 1024);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_round_size)
{
    ck_assert_uint_eq(dalloc_round_size(0), 16);
    ck_assert_uint_eq(dalloc_round_size(1), 16);
    ck_assert_uint_eq(dalloc_round_size(16), 16);
    ck_assert_uint_eq(dalloc_round_size(17), 32);
    ck_assert_uint_eq(dalloc_round_size(UINT64_MAX - 15), UINT64_MAX - 15);
    ck_assert_uint_eq(dalloc_round_size(UINT64_MAX - 14), 0);
    ck_assert_uint_eq(dalloc_round_size(UINT64_MAX), 0);
}
END_TEST

/* Lays out pieces of the given sizes back to back, then frees those with
 * keep[i] == false, leaving holes.  Offsets go to offs[]. */
static struct dalloc *make_holes(uint64_t region, const uint64_t *sizes,
                                 const bool *keep, size_t n, uint64_t *offs)
{
    struct dalloc *a = dalloc_new(region);
    size_t i;

    ck_assert_ptr_nonnull(a);
    for (i = 0; i < n; i++)
        ck_assert_int_eq(dalloc_alloc(a, sizes[i], &offs[i]), 0);
    for (i = 0; i < n; i++) {
        if (!keep[i])
            ck_assert_int_eq(dalloc_free(a, offs[i], NULL), 0);
    }
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    return a;
}

START_TEST(test_best_fit)
{
    /* holes (after the frees): 64 @0, 32 @80, 48 @128, 32 @192, 96 @240,
     * then the tail 1024-352 = 672 @352. */
    const uint64_t sizes[] = { 64, 16, 32, 16, 48, 16, 32, 16, 96, 16 };
    const bool keep[] = { false, true, false, true, false, true, false, true,
                          false, true };
    uint64_t offs[10], off;
    struct dalloc *a = make_holes(1024, sizes, keep, 10, offs);

    ck_assert_uint_eq(offs[2], 80);
    ck_assert_uint_eq(offs[6], 192);
    ck_assert_uint_eq(dalloc_free_pieces(a), 6);

    ck_assert_int_eq(dalloc_alloc(a, 20, &off), 0);  /* 32: lowest offset */
    ck_assert_uint_eq(off, 80);
    ck_assert_int_eq(dalloc_alloc(a, 32, &off), 0);  /* the other 32 */
    ck_assert_uint_eq(off, 192);
    ck_assert_int_eq(dalloc_alloc(a, 17, &off), 0);  /* 48 beats 64, 96 */
    ck_assert_uint_eq(off, 128);
    ck_assert_int_eq(dalloc_alloc(a, 16, &off), 0);  /* 16 left of the 48 */
    ck_assert_uint_eq(off, 160);
    ck_assert_int_eq(dalloc_alloc(a, 65, &off), 0);  /* 96 beats 672 */
    ck_assert_uint_eq(off, 240);
    ck_assert_int_eq(dalloc_alloc(a, 1, &off), 0);   /* 16 left of the 96 */
    ck_assert_uint_eq(off, 320);
    ck_assert_int_eq(dalloc_alloc(a, 100, &off), 0); /* only the tail */
    ck_assert_uint_eq(off, 352);
    ck_assert_int_eq(dalloc_alloc(a, 64, &off), 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_exhaustion)
{
    const uint64_t region = 4096;
    struct dalloc *a = dalloc_new(region);
    struct dalloc *fresh = dalloc_new(region);
    uint64_t offs[4096 / 16], off;
    struct rng r = { 99 };
    size_t n = 0, i;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(fresh);
    ck_assert_int_eq(dalloc_alloc(a, region + 1, &off), -ENOSPC);
    ck_assert_int_eq(dalloc_alloc(a, UINT64_MAX, &off), -EINVAL);
    while (dalloc_alloc(a, 16, &off) == 0) {
        ck_assert_uint_eq(off, n * 16);
        offs[n++] = off;
    }
    ck_assert_uint_eq(n, region / 16);
    ck_assert_uint_eq(dalloc_free_bytes(a), 0);
    ck_assert_uint_eq(dalloc_free_pieces(a), 0);
    ck_assert_uint_eq(dalloc_largest_free(a), 0);
    ck_assert_int_eq(dalloc_alloc(a, 0, &off), -ENOSPC);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);

    /* Shuffle, free all: back to one piece, same state as a fresh one. */
    for (i = n - 1; i > 0; i--) {
        size_t j = rng_below(&r, i + 1);
        uint64_t t = offs[i];
        offs[i] = offs[j];
        offs[j] = t;
    }
    for (i = 0; i < n; i++) {
        ck_assert_int_eq(dalloc_free(a, offs[i], NULL), 0);
        if (i % 16 == 0)
            ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    }
    ck_assert_uint_eq(dalloc_free_pieces(a), 1);
    ck_assert_uint_eq(dalloc_used_pieces(a), 0);
    ck_assert_uint_eq(dalloc_largest_free(a), region);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(fresh));
    ck_assert_int_eq(dalloc_alloc(a, region, &off), 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
    dalloc_destroy(fresh);
}
END_TEST

START_TEST(test_bad_free)
{
    struct dalloc *a = dalloc_new(1024);
    uint64_t x, y, size = 12345, digest;

    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_free(a, 0, &size), -ENOENT);  /* all free */
    ck_assert_uint_eq(size, 12345);
    ck_assert_int_eq(dalloc_alloc(a, 64, &x), 0);
    ck_assert_int_eq(dalloc_alloc(a, 64, &y), 0);
    digest = dalloc_digest(a);
    ck_assert_int_eq(dalloc_free(a, x + 8, NULL), -ENOENT);   /* unaligned */
    ck_assert_int_eq(dalloc_free(a, x + 16, NULL), -ENOENT);  /* inside */
    ck_assert_int_eq(dalloc_free(a, 128, NULL), -ENOENT);     /* free space */
    ck_assert_int_eq(dalloc_free(a, 1024, NULL), -ENOENT);    /* past end */
    ck_assert_int_eq(dalloc_free(a, UINT64_MAX, NULL), -ENOENT);
    ck_assert_uint_eq(dalloc_size_of(a, x + 16), 0);
    ck_assert_uint_eq(dalloc_digest(a), digest);
    ck_assert_int_eq(dalloc_free(a, x, NULL), 0);
    ck_assert_int_eq(dalloc_free(a, x, NULL), -ENOENT);       /* double */
    ck_assert_int_eq(dalloc_free(a, y, NULL), 0);
    ck_assert_int_eq(dalloc_free(a, y, NULL), -ENOENT);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_free_pieces(a), 1);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_reserve)
{
    struct dalloc *a = dalloc_new(1024);
    uint64_t off, digest;

    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_reserve(a, 512, 100), 0);        /* middle */
    ck_assert_uint_eq(dalloc_size_of(a, 512), 112);
    ck_assert_uint_eq(dalloc_free_pieces(a), 2);
    ck_assert_int_eq(dalloc_reserve(a, 0, 16), 0);           /* at start */
    ck_assert_int_eq(dalloc_reserve(a, 1008, 16), 0);        /* at end */
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    digest = dalloc_digest(a);
    ck_assert_int_eq(dalloc_reserve(a, 8, 16), -EINVAL);     /* unaligned */
    ck_assert_int_eq(dalloc_reserve(a, 1024, 16), -EINVAL);  /* outside */
    ck_assert_int_eq(dalloc_reserve(a, 1008, 32), -EINVAL);  /* runs past */
    ck_assert_int_eq(dalloc_reserve(a, 16, UINT64_MAX), -EINVAL);
    ck_assert_int_eq(dalloc_reserve(a, 0, 16), -ENOSPC);     /* used */
    ck_assert_int_eq(dalloc_reserve(a, 528, 16), -ENOSPC);   /* inside used */
    ck_assert_int_eq(dalloc_reserve(a, 480, 48), -ENOSPC);   /* overlaps */
    ck_assert_int_eq(dalloc_reserve(a, 992, 32), -ENOSPC);   /* overlaps end */
    ck_assert_uint_eq(dalloc_digest(a), digest);
    ck_assert_int_eq(dalloc_reserve(a, 480, 32), 0);         /* exact gap end */
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    /* Best fit now: free [16,480) = 464, [624,1008) = 384. */
    ck_assert_int_eq(dalloc_alloc(a, 300, &off), 0);
    ck_assert_uint_eq(off, 624);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_reset)
{
    struct dalloc *a = dalloc_new(4096);
    struct dalloc *fresh = dalloc_new(4096);
    uint64_t off;
    int i;

    for (i = 0; i < 100; i++)
        dalloc_alloc(a, 8 + i, &off);
    dalloc_reset(a);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(fresh));
    ck_assert_uint_eq(dalloc_used_bytes(a), 0);
    ck_assert_int_eq(dalloc_alloc(a, 10, &off), 0);
    ck_assert_uint_eq(off, 0);
    dalloc_destroy(a);
    dalloc_destroy(fresh);
}
END_TEST

START_TEST(test_iter_used)
{
    struct dalloc *a = dalloc_new(1024);
    struct dalloc_iter it;
    uint64_t x, y, z, off, size;

    dalloc_iter_init(a, &it);
    ck_assert(!dalloc_iter_next_used(&it, &off, &size));
    ck_assert_int_eq(dalloc_alloc(a, 10, &x), 0);
    ck_assert_int_eq(dalloc_alloc(a, 40, &y), 0);
    ck_assert_int_eq(dalloc_alloc(a, 70, &z), 0);
    ck_assert_int_eq(dalloc_free(a, y, NULL), 0);
    dalloc_iter_init(a, &it);
    ck_assert(dalloc_iter_next_used(&it, &off, &size));
    ck_assert_uint_eq(off, x);
    ck_assert_uint_eq(size, 16);
    ck_assert(dalloc_iter_next_used(&it, &off, &size));
    ck_assert_uint_eq(off, z);
    ck_assert_uint_eq(size, 80);
    ck_assert(!dalloc_iter_next_used(&it, &off, &size));
    dalloc_destroy(a);
}
END_TEST

/* dalloc_iter_seek(off) starts at the first used piece at or after off:
 * checked against a walk from the start, at every offset of a region with
 * used and free pieces, and on an empty allocator. */
START_TEST(test_iter_seek)
{
    struct dalloc *a = dalloc_new(64 * DALLOC_GRAIN);
    struct dalloc_iter it;
    uint64_t off, size, offs[64], sizes[64];
    int n = 0;

    dalloc_iter_seek(a, &it, 0);
    ck_assert(!dalloc_iter_next_used(&it, &off, &size));
    for (int i = 0; i < 20; i++) {
        uint64_t o;
        ck_assert_int_eq(dalloc_alloc(a, (uint64_t)(1 + i % 3) * DALLOC_GRAIN, &o), 0);
    }
    /* Free every third piece: used pieces with free gaps between. */
    dalloc_iter_init(a, &it);
    uint64_t all[20];
    int m = 0;
    while (dalloc_iter_next_used(&it, &off, &size))
        all[m++] = off;
    for (int i = 0; i < m; i += 3)
        ck_assert_int_eq(dalloc_free(a, all[i], NULL), 0);
    dalloc_iter_init(a, &it);
    while (dalloc_iter_next_used(&it, &off, &size)) {
        offs[n] = off;
        sizes[n++] = size;
    }
    for (uint64_t at = 0; at <= 64 * DALLOC_GRAIN; at += DALLOC_GRAIN / 4) {
        int first = 0;
        while (first < n && offs[first] < at)
            first++;
        dalloc_iter_seek(a, &it, at);
        for (int i = first; i < n; i++) {
            ck_assert(dalloc_iter_next_used(&it, &off, &size));
            ck_assert_uint_eq(off, offs[i]);
            ck_assert_uint_eq(size, sizes[i]);
        }
        ck_assert(!dalloc_iter_next_used(&it, &off, &size));
    }
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_huge_region)
{
    /* Offsets and sizes beyond 32 bits; the region itself never exists. */
    const uint64_t region = 1ULL << 44;
    struct dalloc *a = dalloc_new(region);
    uint64_t x, y, off;

    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(dalloc_alloc(a, 5ULL << 40, &x), 0);
    ck_assert_int_eq(dalloc_alloc(a, 3ULL << 40, &y), 0);
    ck_assert_uint_eq(y, 5ULL << 40);
    ck_assert_int_eq(dalloc_free(a, x, NULL), 0);
    ck_assert_int_eq(dalloc_alloc(a, (7ULL << 40) + 1, &off), 0);
    ck_assert_uint_eq(off, 8ULL << 40);
    ck_assert_int_eq(dalloc_alloc(a, 5ULL << 40, &off), 0);
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(dalloc_alloc(a, region, &off), -ENOSPC);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_region_limit)
{
    /* Offsets and sizes are kept in 40-bit grain counts: 16 TiB at most. */
    const uint64_t region = DALLOC_MAX_REGION;
    struct dalloc *a;
    uint64_t off, size;

    errno = 0;
    ck_assert_ptr_null(dalloc_new(region + DALLOC_GRAIN));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(dalloc_new(UINT64_MAX - 15));
    a = dalloc_new(region);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(dalloc_largest_free(a), region);
    ck_assert_int_eq(dalloc_reserve(a, region - 16, 16), 0);  /* last grain */
    ck_assert_uint_eq(dalloc_size_of(a, region - 16), 16);
    ck_assert_int_eq(dalloc_alloc(a, region - 32, &off), 0);  /* 2^40 - 2 */
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(dalloc_size_of(a, 0), region - 32);
    ck_assert_uint_eq(dalloc_free_bytes(a), 16);
    ck_assert_int_eq(dalloc_alloc(a, 16, &off), 0);
    ck_assert_uint_eq(off, region - 32);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_int_eq(dalloc_free(a, 0, &size), 0);
    ck_assert_uint_eq(size, region - 32);
    ck_assert_int_eq(dalloc_free(a, region - 16, &size), 0);
    ck_assert_int_eq(dalloc_free(a, region - 32, &size), 0);
    ck_assert_uint_eq(dalloc_largest_free(a), region);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_meta_per_piece)
{
    /* 24-byte nodes, one per piece, in chunks: the reported metadata,
     * spare capacity included, stays close to 24 bytes a piece. */
    const uint64_t n = 100000;
    struct dalloc *a = dalloc_new(64ULL << 20);
    uint64_t *offs = malloc(n * sizeof(*offs));
    uint64_t i, meta;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(offs);
    ck_assert_uint_le(dalloc_meta_bytes(a), 16 * 1024);
    for (i = 0; i < n; i++)
        ck_assert_int_eq(dalloc_alloc(a, 16 + 16 * (i % 4), &offs[i]), 0);
    meta = dalloc_meta_bytes(a);
    ck_assert_uint_le(meta, n * 25);
    /* Freeing every other piece leaves as many pieces, half of them free:
     * no new metadata. */
    for (i = 0; i < n; i += 2)
        ck_assert_int_eq(dalloc_free(a, offs[i], NULL), 0);
    ck_assert_uint_eq(dalloc_used_pieces(a) + dalloc_free_pieces(a), n + 1);
    ck_assert_uint_eq(dalloc_meta_bytes(a), meta);
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    free(offs);
    dalloc_reset(a);
    ck_assert_uint_le(dalloc_meta_bytes(a), n * 25);   /* kept for reuse */
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    dalloc_destroy(a);
}
END_TEST

/* ---- determinism --------------------------------------------------------- */

/* Applies one random operation to each of the n allocators and asserts that
 * they all agree.  Frees pick from `l`, the shared list of live offsets. */
static void same_step(struct dalloc **v, size_t n, struct live *l,
                      struct rng *r, long step)
{
    uint64_t off0 = 0, size0 = 0;
    int rc0 = 0;
    size_t i;

    if (l->n == 0 || rng_below(r, 100) < alloc_percent(step)) {
        uint64_t size = random_size(r, MIX_MIXED, dalloc_region_size(v[0]));
        for (i = 0; i < n; i++) {
            uint64_t off = 0;
            int rc = dalloc_alloc(v[i], size, &off);
            if (i == 0) {
                rc0 = rc;
                off0 = off;
            }
            expect_int(rc, rc0, "result", step);
            if (rc == 0)
                expect_u64(off, off0, "offset", step);
        }
        if (rc0 == 0)
            live_add(l, off0);
    } else {
        uint64_t victim = live_take_random(l, r);
        for (i = 0; i < n; i++) {
            uint64_t size = 0;
            expect_int(dalloc_free(v[i], victim, &size), 0, "free", step);
            if (i == 0)
                size0 = size;
            expect_u64(size, size0, "size", step);
        }
    }
}

START_TEST(test_determinism)
{
    const uint64_t region = 1024 * 1024;
    struct rng r = { 7 }, noise = { 8 };
    struct dalloc *a, *b, *twins[2];
    struct live l = { NULL, 0, 0 };
    void *junk[512] = { NULL };
    long step;
    int i;

    a = dalloc_new(region);
    /* Disturb the heap so b's metadata lands at unrelated addresses. */
    for (i = 0; i < 512; i++)
        junk[i] = malloc(1 + rng_below(&noise, 4000));
    b = dalloc_new(region);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    twins[0] = a;
    twins[1] = b;
    for (step = 0; step < 30000; step++) {
        same_step(twins, 2, &l, &r, step);
        if (step % 97 == 0) {
            int k = (int)rng_below(&noise, 512);
            free(junk[k]);
            junk[k] = malloc(1 + rng_below(&noise, 4000));
        }
        if (step % 1000 == 0)
            ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(b));
    }
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(b));
    ck_assert_int_eq(dalloc_check(a), DALLOC_CHECK_OK);
    ck_assert_int_eq(dalloc_check(b), DALLOC_CHECK_OK);
    for (i = 0; i < 512; i++)
        free(junk[i]);
    live_destroy(&l);
    dalloc_destroy(a);
    dalloc_destroy(b);
}
END_TEST

START_TEST(test_rebuild_by_reserve)
{
    /* A replica rebuilt from the used pieces (in any order) has the same
     * digest and keeps returning the same offsets. */
    const uint64_t region = 256 * 1024;
    struct rng r = { 11 };
    struct dalloc *a = dalloc_new(region);
    struct dalloc *c = dalloc_new(region);
    struct live l = { NULL, 0, 0 };
    struct dalloc_iter it;
    uint64_t *offs, *sizes, off, size;
    size_t n = 0, i;
    struct dalloc *pair[2];
    long step;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(c);
    for (step = 0; step < 6000; step++)
        same_step(&a, 1, &l, &r, step);
    offs = malloc(dalloc_used_pieces(a) * sizeof(*offs) + 1);
    sizes = malloc(dalloc_used_pieces(a) * sizeof(*sizes) + 1);
    ck_assert_ptr_nonnull(offs);
    ck_assert_ptr_nonnull(sizes);
    dalloc_iter_init(a, &it);
    while (dalloc_iter_next_used(&it, &off, &size)) {
        offs[n] = off;
        sizes[n] = size;
        n++;
    }
    ck_assert_uint_eq(n, dalloc_used_pieces(a));
    ck_assert_uint_gt(n, 10);
    for (i = n; i-- > 0;) {                       /* reverse order */
        ck_assert_int_eq(dalloc_reserve(c, offs[i], sizes[i]), 0);
    }
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(c));
    pair[0] = a;
    pair[1] = c;
    for (step = 0; step < 6000; step++)
        same_step(pair, 2, &l, &r, step);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(c));
    free(offs);
    free(sizes);
    live_destroy(&l);
    dalloc_destroy(a);
    dalloc_destroy(c);
}
END_TEST

START_TEST(test_from_used)
{
    /* Built in one pass from the sorted used pieces, an allocator equals
     * the one they came from (digest, counters, dalloc_check) and keeps
     * returning the same offsets; refusals for bad lists. */
    const uint64_t region = 256 * 1024;
    struct rng r = { 12 };
    struct dalloc *a = dalloc_new(region);
    struct live l = { NULL, 0, 0 };
    struct dalloc_iter it;
    struct dalloc_span *spans;
    struct dalloc *pair[2], *c;
    uint64_t off, size;
    size_t n = 0;
    long step;

    ck_assert_ptr_nonnull(a);
    for (step = 0; step < 6000; step++)
        same_step(&a, 1, &l, &r, step);
    spans = malloc((dalloc_used_pieces(a) + 1) * sizeof(*spans));
    ck_assert_ptr_nonnull(spans);
    dalloc_iter_init(a, &it);
    while (dalloc_iter_next_used(&it, &off, &size))
        spans[n++] = (struct dalloc_span){ off, size };
    ck_assert_uint_gt(n, 10);
    c = dalloc_from_used(region, spans, n);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(c));
    ck_assert_uint_eq(dalloc_used_bytes(a), dalloc_used_bytes(c));
    ck_assert_uint_eq(dalloc_free_pieces(a), dalloc_free_pieces(c));
    ck_assert_uint_eq(dalloc_largest_free(a), dalloc_largest_free(c));
    pair[0] = a;
    pair[1] = c;
    for (step = 0; step < 6000; step++)
        same_step(pair, 2, &l, &r, step);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(c));
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    dalloc_destroy(c);

    /* Out of order, overlapping, misaligned, outside: refused. */
    if (n >= 2) {
        struct dalloc_span t = spans[0];
        spans[0] = spans[1];
        spans[1] = t;
        errno = 0;
        ck_assert_ptr_null(dalloc_from_used(region, spans, n));
        ck_assert_int_eq(errno, ENOSPC);
    }
    struct dalloc_span overlap[] = { { 0, 64 }, { 48, 16 } };
    struct dalloc_span odd[] = { { 8, 16 } };
    struct dalloc_span outside[] = { { region - 16, 32 } };
    errno = 0;
    ck_assert_ptr_null(dalloc_from_used(region, overlap, 2));
    ck_assert_int_eq(errno, ENOSPC);
    ck_assert_ptr_null(dalloc_from_used(region, odd, 1));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(dalloc_from_used(region, outside, 1));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(dalloc_from_used(100, NULL, 0));
    ck_assert_int_eq(errno, EINVAL);

    /* No pieces; the whole region one piece; pieces touching both ends. */
    c = dalloc_from_used(region, NULL, 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    struct dalloc *fresh = dalloc_new(region);
    ck_assert_uint_eq(dalloc_digest(c), dalloc_digest(fresh));
    dalloc_destroy(fresh);
    dalloc_destroy(c);
    struct dalloc_span whole[] = { { 0, region } };
    c = dalloc_from_used(region, whole, 1);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_free_pieces(c), 0);
    ck_assert_int_eq(dalloc_alloc(c, 16, &off), -ENOSPC);
    ck_assert_int_eq(dalloc_free(c, 0, &size), 0);
    ck_assert_uint_eq(size, region);
    dalloc_destroy(c);
    struct dalloc_span ends[] = { { 0, 16 }, { 4096, 100 }, { region - 32, 32 } };
    c = dalloc_from_used(region, ends, 3);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(dalloc_check(c), DALLOC_CHECK_OK);
    ck_assert_uint_eq(dalloc_used_pieces(c), 3);
    ck_assert_uint_eq(dalloc_free_pieces(c), 2);
    ck_assert_uint_eq(dalloc_size_of(c, 4096), 112);
    dalloc_destroy(c);

    free(spans);
    live_destroy(&l);
    dalloc_destroy(a);
}
END_TEST

START_TEST(test_digest_differs)
{
    struct dalloc *a = dalloc_new(1024);
    struct dalloc *b = dalloc_new(1024);
    struct dalloc *c = dalloc_new(2048);
    uint64_t off;

    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(b));
    ck_assert_uint_ne(dalloc_digest(a), dalloc_digest(c));
    dalloc_alloc(a, 16, &off);
    dalloc_alloc(b, 32, &off);
    ck_assert_uint_ne(dalloc_digest(a), dalloc_digest(b));
    /* Same piece boundaries, only the used flags differ:
     * a = [0,16) used, [16,32) free;  b = [0,16) free, [16,32) used. */
    dalloc_reset(a);
    dalloc_reset(b);
    ck_assert_int_eq(dalloc_reserve(a, 0, 16), 0);
    ck_assert_int_eq(dalloc_reserve(a, 32, 992), 0);
    ck_assert_int_eq(dalloc_reserve(b, 16, 16), 0);
    ck_assert_int_eq(dalloc_reserve(b, 32, 992), 0);
    ck_assert_uint_ne(dalloc_digest(a), dalloc_digest(b));
    dalloc_destroy(a);
    dalloc_destroy(b);
    dalloc_destroy(c);
}
END_TEST

/* ---- optional benchmark -------------------------------------------------- */

static double seconds_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Steady state of about 200k live values of 1..8 KB in an 1 GB region. */
static void run_bench(void)
{
    const uint64_t region = 1ULL << 30;
    const long ops = 2000000;
    struct rng r = { 42 };
    struct dalloc *a = dalloc_new(region);
    uint64_t *live = malloc(200000 * sizeof(*live));
    size_t n = 0;
    double t0, t1;
    long i;

    for (n = 0; n < 200000; n++) {
        if (dalloc_alloc(a, 1 + rng_below(&r, 8192), &live[n]) != 0)
            break;
    }
    t0 = seconds_now();
    for (i = 0; i < ops / 2; i++) {
        size_t k = rng_below(&r, n);
        dalloc_free(a, live[k], NULL);
        if (dalloc_alloc(a, 1 + rng_below(&r, 8192), &live[k]) != 0)
            live[k] = UINT64_MAX;
    }
    t1 = seconds_now();
    printf("dalloc bench: %zu live pieces, %lu free pieces, %ld ops, "
           "%.1f ns/op, meta %zu bytes, check %s\n",
           n, (unsigned long)dalloc_free_pieces(a), ops,
           (t1 - t0) * 1e9 / ops, dalloc_meta_bytes(a),
           dalloc_check_str(dalloc_check(a)));
    free(live);
    dalloc_destroy(a);
}

/* ---- runner -------------------------------------------------------------- */

static Suite *alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *basic = tcase_create("basic");
    TCase *random = tcase_create("random");
    TCase *determinism = tcase_create("determinism");

    tcase_add_test(basic, test_new_bad_sizes);
    tcase_add_test(basic, test_basic);
    tcase_add_test(basic, test_round_size);
    tcase_add_test(basic, test_best_fit);
    tcase_add_test(basic, test_exhaustion);
    tcase_add_test(basic, test_bad_free);
    tcase_add_test(basic, test_reserve);
    tcase_add_test(basic, test_reset);
    tcase_add_test(basic, test_iter_used);
    tcase_add_test(basic, test_iter_seek);
    tcase_add_test(basic, test_huge_region);
    tcase_add_test(basic, test_region_limit);
    tcase_add_test(basic, test_meta_per_piece);
    tcase_add_test(basic, test_digest_differs);
    suite_add_tcase(s, basic);

    tcase_set_timeout(random, 60);
    tcase_add_test(random, test_random_small);
    tcase_add_test(random, test_random_mixed);
    tcase_add_test(random, test_random_edges);
    tcase_add_test(random, test_random_tiny_region);
    suite_add_tcase(s, random);

    tcase_set_timeout(determinism, 60);
    tcase_add_test(determinism, test_determinism);
    tcase_add_test(determinism, test_rebuild_by_reserve);
    tcase_add_test(determinism, test_from_used);
    suite_add_tcase(s, determinism);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    if (getenv("DALLOC_BENCH") != NULL) {
        run_bench();
        return 0;
    }
    sr = srunner_create(alloc_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
