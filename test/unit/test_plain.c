/* test_plain.c - the plain engine through its engine_ops: every mutation's
 * memcached semantics, cas, incr/decr arithmetic, exptime rules, flush,
 * the background sweep, eviction and stats. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

#define STARTED ((time_t)1700000000)
#define MB ((size_t)1 << 20)

/* ---- helpers ---- */

static struct engine *new_engine_with(size_t mem, size_t item_max, bool evict, bool cas)
{
    struct engine_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.mem_limit = mem;
    cfg.item_size_max = item_max;
    cfg.evict = evict;
    cfg.cas_enabled = cas;
    cfg.hashpower = 4;
    cfg.started = STARTED;
    struct engine *e = engine_plain_new(&cfg);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->ops->name, "plain");
    return e;
}

static struct engine *new_engine(void)
{
    return new_engine_with(64 * MB, MB, true, true);
}

static void tick_at(struct engine *e, time_t offset)
{
    e->ops->tick(e, STARTED + offset);
}

static eng_status run(struct engine *e, struct eng_mutation *m, struct eng_result *res)
{
    struct eng_result local;
    if (res == NULL)
        res = &local;
    eng_status st = e->ops->mutate(e, m, res, NULL, NULL);
    ck_assert_int_ne(st, ENG_PENDING);
    ck_assert_int_eq(res->status, st);
    return st;
}

static eng_status store(struct engine *e, eng_op op, const char *key, const char *val,
                        uint32_t flags, int64_t exptime, uint64_t cas,
                        struct eng_result *res)
{
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = op;
    m.key = key;
    m.nkey = strlen(key);
    m.data = val;
    m.nbytes = strlen(val);
    m.flags = flags;
    m.exptime = exptime;
    m.cas = cas;
    return run(e, &m, res);
}

static eng_status set(struct engine *e, const char *key, const char *val)
{
    return store(e, ENG_OP_SET, key, val, 0, 0, 0, NULL);
}

static eng_status simple(struct engine *e, eng_op op, const char *key, int64_t exptime,
                         uint64_t cas)
{
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = op;
    m.key = key;
    m.nkey = strlen(key);
    m.exptime = exptime;
    m.cas = cas;
    return run(e, &m, NULL);
}

static eng_status arith(struct engine *e, eng_op op, const char *key, uint64_t delta,
                        uint64_t *value)
{
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = op;
    m.key = key;
    m.nkey = strlen(key);
    m.delta = delta;
    struct eng_result res;
    eng_status st = run(e, &m, &res);
    if (value != NULL)
        *value = res.value;
    return st;
}

static eng_status flush(struct engine *e, int64_t delay)
{
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_FLUSH;
    m.exptime = delay;
    return run(e, &m, NULL);
}

struct got {
    char value[2048];
    uint32_t flags;
    uint64_t cas;
};

/* get + copy + release; checks the CRLF terminator and the key view. */
static eng_status get(struct engine *e, const char *key, struct got *g)
{
    struct eng_value v;
    struct eng_result res;
    eng_status st = e->ops->get(e, key, strlen(key), &v, &res);
    ck_assert_int_eq(res.status, st);
    if (st != ENG_SUCCESS)
        return st;
    ck_assert_uint_eq(v.nkey, strlen(key));
    ck_assert(memcmp(v.key, key, v.nkey) == 0);
    ck_assert_int_eq(v.data[v.nbytes], '\r');
    ck_assert_int_eq(v.data[v.nbytes + 1], '\n');
    if (g != NULL) {
        ck_assert_uint_lt(v.nbytes, sizeof(g->value));
        memcpy(g->value, v.data, v.nbytes);
        g->value[v.nbytes] = '\0';
        g->flags = v.flags;
        g->cas = v.cas;
    }
    e->ops->release(e, v.handle);
    return st;
}

static void assert_value(struct engine *e, const char *key, const char *want)
{
    struct got g;
    ck_assert_int_eq(get(e, key, &g), ENG_SUCCESS);
    ck_assert_str_eq(g.value, want);
}

static void assert_missing(struct engine *e, const char *key)
{
    ck_assert_int_eq(get(e, key, NULL), ENG_NOT_FOUND);
}

/* Stats collected into a small table. */
struct stat_table {
    unsigned n;
    char name[64][48];
    char value[64][48];
};

static void collect(void *ctx, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void collect(void *ctx, const char *name, const char *fmt, ...)
{
    struct stat_table *t = ctx;
    ck_assert_uint_lt(t->n, 64);
    snprintf(t->name[t->n], sizeof(t->name[0]), "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->value[t->n], sizeof(t->value[0]), fmt, ap);
    va_end(ap);
    t->n++;
}

static void stats_of(struct engine *e, const char *group, struct stat_table *t)
{
    t->n = 0;
    ck_assert(e->ops->stats(e, group, collect, t));
}

/* Value of a stat as a number; -1 when absent. */
static long long stat(struct engine *e, const char *group, const char *name)
{
    struct stat_table t;
    stats_of(e, group, &t);
    for (unsigned i = 0; i < t.n; i++)
        if (strcmp(t.name[i], name) == 0)
            return atoll(t.value[i]);
    return -1;
}

/* ---- basic stores ---- */

START_TEST(test_set_get_delete)
{
    struct engine *e = new_engine();
    struct eng_result res;
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "hello", 42, 0, 0, &res), ENG_SUCCESS);
    ck_assert_uint_ne(res.cas, 0);
    struct got g;
    ck_assert_int_eq(get(e, "k", &g), ENG_SUCCESS);
    ck_assert_str_eq(g.value, "hello");
    ck_assert_uint_eq(g.flags, 42);
    ck_assert_uint_eq(g.cas, res.cas);

    ck_assert_int_eq(set(e, "k", "world!"), ENG_SUCCESS);
    assert_value(e, "k", "world!");
    ck_assert_int_eq(set(e, "empty", ""), ENG_SUCCESS);
    assert_value(e, "empty", "");

    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, 0), ENG_SUCCESS);
    assert_missing(e, "k");
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, 0), ENG_NOT_FOUND);
    assert_missing(e, "never");

    /* 32-bit flags and a 250-byte key. */
    char key[251];
    memset(key, 'a', 250);
    key[250] = '\0';
    ck_assert_int_eq(store(e, ENG_OP_SET, key, "v", UINT32_MAX, 0, 0, NULL), ENG_SUCCESS);
    ck_assert_int_eq(get(e, key, &g), ENG_SUCCESS);
    ck_assert_uint_eq(g.flags, UINT32_MAX);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_bad_keys)
{
    struct engine *e = new_engine();
    char key[252];
    memset(key, 'a', 251);
    key[251] = '\0';
    ck_assert_int_eq(set(e, key, "v"), ENG_FAILED);
    ck_assert_int_eq(get(e, key, NULL), ENG_NOT_FOUND);
    ck_assert_int_eq(set(e, "", "v"), ENG_FAILED);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_add_replace)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "k", "a", 0, 0, 0, NULL), ENG_NOT_STORED);
    assert_missing(e, "k");
    ck_assert_int_eq(store(e, ENG_OP_ADD, "k", "a", 0, 0, 0, NULL), ENG_SUCCESS);
    ck_assert_int_eq(store(e, ENG_OP_ADD, "k", "b", 0, 0, 0, NULL), ENG_NOT_STORED);
    assert_value(e, "k", "a");
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "k", "c", 7, 0, 0, NULL), ENG_SUCCESS);
    struct got g;
    get(e, "k", &g);
    ck_assert_str_eq(g.value, "c");
    ck_assert_uint_eq(g.flags, 7);

    /* add succeeds over an expired item. */
    ck_assert_int_eq(store(e, ENG_OP_SET, "x", "old", 0, 5, 0, NULL), ENG_SUCCESS);
    tick_at(e, 10);
    ck_assert_int_eq(store(e, ENG_OP_ADD, "x", "new", 0, 0, 0, NULL), ENG_SUCCESS);
    assert_value(e, "x", "new");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_append_prepend)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", "x", 0, 0, 0, NULL), ENG_NOT_STORED);
    ck_assert_int_eq(store(e, ENG_OP_PREPEND, "k", "x", 0, 0, 0, NULL), ENG_NOT_STORED);
    assert_missing(e, "k");

    struct eng_result r1, r2, r3;
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "mid", 99, 100, 0, &r1), ENG_SUCCESS);
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", "_end", 1, 0, 0, &r2), ENG_SUCCESS);
    ck_assert_int_eq(store(e, ENG_OP_PREPEND, "k", "start_", 2, 0, 0, &r3), ENG_SUCCESS);
    ck_assert_uint_gt(r2.cas, r1.cas);
    ck_assert_uint_gt(r3.cas, r2.cas);
    struct got g;
    get(e, "k", &g);
    ck_assert_str_eq(g.value, "start_mid_end");
    ck_assert_uint_eq(g.flags, 99);         /* old flags kept */
    ck_assert_uint_eq(g.cas, r3.cas);
    /* old exptime kept: 100 s after the set */
    tick_at(e, 99);
    assert_value(e, "k", "start_mid_end");
    tick_at(e, 100);
    assert_missing(e, "k");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_append_too_large)
{
    struct engine *e = new_engine_with(MB, 1024, true, true);
    char big[901];
    memset(big, 'b', 900);
    big[900] = '\0';
    ck_assert_int_eq(set(e, "k", big), ENG_SUCCESS);
    /* memcached answers NOT_STORED when the joined item is too large */
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", big, 0, 0, 0, NULL), ENG_NOT_STORED);
    ck_assert_int_eq(get(e, "k", NULL), ENG_SUCCESS);
    char huge[1100];
    memset(huge, 'h', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    ck_assert_int_eq(set(e, "h", huge), ENG_TOO_LARGE);
    e->ops->destroy(e);
}
END_TEST

/* ---- cas ---- */

START_TEST(test_cas_unique_increasing)
{
    struct engine *e = new_engine();
    uint64_t last = 0;
    for (int i = 0; i < 1000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i % 10);
        struct eng_result res;
        ck_assert_int_eq(store(e, ENG_OP_SET, key, "v", 0, 0, 0, &res), ENG_SUCCESS);
        ck_assert_uint_gt(res.cas, last);
        last = res.cas;
    }
    uint64_t seen[10];
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        struct got g;
        get(e, key, &g);
        seen[i] = g.cas;
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(seen[j], seen[i]);
    }
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_cas_op)
{
    struct engine *e = new_engine();
    struct eng_result res;
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "v", 0, 0, 1, NULL), ENG_NOT_FOUND);
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "v1", 0, 0, 0, &res), ENG_SUCCESS);
    uint64_t c1 = res.cas;
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "v2", 0, 0, c1 + 1, NULL), ENG_EXISTS);
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "v2", 0, 0, 0, NULL), ENG_EXISTS);
    assert_value(e, "k", "v1");
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "v2", 3, 0, c1, &res), ENG_SUCCESS);
    ck_assert_uint_gt(res.cas, c1);
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "v3", 0, 0, c1, NULL), ENG_EXISTS);
    struct got g;
    get(e, "k", &g);
    ck_assert_str_eq(g.value, "v2");
    ck_assert_uint_eq(g.flags, 3);
    ck_assert_uint_eq(g.cas, res.cas);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_cas_condition_on_other_ops)
{
    struct engine *e = new_engine();
    struct eng_result res;
    /* absent */
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "1", 0, 0, 5, NULL), ENG_NOT_FOUND);
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "k", "1", 0, 0, 5, NULL), ENG_NOT_FOUND);
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, 5), ENG_NOT_FOUND);
    ck_assert_int_eq(simple(e, ENG_OP_TOUCH, "k", 0, 5), ENG_NOT_FOUND);

    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "1", 0, 0, 0, &res), ENG_SUCCESS);
    uint64_t c = res.cas;
    /* mismatch */
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "2", 0, 0, c + 7, NULL), ENG_EXISTS);
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "k", "2", 0, 0, c + 7, NULL), ENG_EXISTS);
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", "2", 0, 0, c + 7, NULL), ENG_EXISTS);
    ck_assert_int_eq(store(e, ENG_OP_PREPEND, "k", "2", 0, 0, c + 7, NULL), ENG_EXISTS);
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, c + 7), ENG_EXISTS);
    ck_assert_int_eq(simple(e, ENG_OP_TOUCH, "k", 0, c + 7), ENG_EXISTS);
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_INCR;
    m.key = "k";
    m.nkey = 1;
    m.delta = 1;
    m.cas = c + 7;
    ck_assert_int_eq(run(e, &m, NULL), ENG_EXISTS);
    m.op = ENG_OP_DECR;
    ck_assert_int_eq(run(e, &m, NULL), ENG_EXISTS);
    assert_value(e, "k", "1");

    /* match: each op applies and yields a new cas (touch keeps it) */
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "2", 0, 0, c, &res), ENG_SUCCESS);
    c = res.cas;
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "k", "3", 0, 0, c, &res), ENG_SUCCESS);
    c = res.cas;
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", "4", 0, 0, c, &res), ENG_SUCCESS);
    c = res.cas;
    ck_assert_int_eq(store(e, ENG_OP_PREPEND, "k", "5", 0, 0, c, &res), ENG_SUCCESS);
    c = res.cas;
    assert_value(e, "k", "534");
    m.op = ENG_OP_INCR;
    m.cas = c;
    ck_assert_int_eq(run(e, &m, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.value, 535);
    c = res.cas;
    struct eng_mutation t;
    memset(&t, 0, sizeof(t));
    t.op = ENG_OP_TOUCH;
    t.key = "k";
    t.nkey = 1;
    t.cas = c;
    ck_assert_int_eq(run(e, &t, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.cas, c);
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, c), ENG_SUCCESS);
    assert_missing(e, "k");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_cas_disabled)
{
    struct engine *e = new_engine_with(64 * MB, MB, true, false);
    struct eng_result res;
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "1", 0, 0, 0, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.cas, 0);
    struct got g;
    get(e, "k", &g);
    ck_assert_uint_eq(g.cas, 0);
    /* as memcached -C: items have no cas, so no cas matches (difftest
     * seed 14014 case 4829) */
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "2", 0, 0, 12345, NULL), ENG_EXISTS);
    ck_assert_int_eq(store(e, ENG_OP_CAS, "k", "2", 0, 0, 0, NULL), ENG_EXISTS);
    assert_value(e, "k", "1");
    ck_assert_int_eq(store(e, ENG_OP_CAS, "nope", "2", 0, 0, 1, NULL), ENG_NOT_FOUND);
    /* ... but an append or prepend ignores its cas there (difftest seed
     * 1124 case 1720: ms MA C<n> under -C answers HD) */
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "k", "a", 0, 0, 777, NULL), ENG_SUCCESS);
    ck_assert_int_eq(store(e, ENG_OP_PREPEND, "k", "p", 0, 0, 1, NULL), ENG_SUCCESS);
    assert_value(e, "k", "p1a");
    ck_assert_int_eq(store(e, ENG_OP_APPEND, "nope", "a", 0, 0, 1, NULL), ENG_NOT_STORED);
    /* flush still works without visible cas */
    ck_assert_int_eq(flush(e, 0), ENG_SUCCESS);
    assert_missing(e, "k");
    e->ops->destroy(e);
}
END_TEST

/* ---- incr / decr ---- */

START_TEST(test_incr_decr)
{
    struct engine *e = new_engine();
    uint64_t v;
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "n", 1, &v), ENG_NOT_FOUND);
    ck_assert_int_eq(arith(e, ENG_OP_DECR, "n", 1, &v), ENG_NOT_FOUND);

    ck_assert_int_eq(store(e, ENG_OP_SET, "n", "99", 5, 0, 0, NULL), ENG_SUCCESS);
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_INCR;
    m.key = "n";
    m.nkey = 1;
    m.delta = 1;
    struct eng_result res;
    struct got g;
    get(e, "n", &g);
    uint64_t before = g.cas;
    ck_assert_int_eq(run(e, &m, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.value, 100);
    ck_assert_uint_gt(res.cas, before);
    get(e, "n", &g);
    ck_assert_str_eq(g.value, "100");       /* grows */
    ck_assert_uint_eq(g.flags, 5);
    ck_assert_uint_eq(g.cas, res.cas);

    ck_assert_int_eq(arith(e, ENG_OP_DECR, "n", 1, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 99);
    assert_value(e, "n", "99 ");            /* shrinks in place, padded: memcached's */
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "n", 1, &v), ENG_SUCCESS);   /* same length: in place */
    assert_value(e, "n", "100");
    ck_assert_int_eq(arith(e, ENG_OP_DECR, "n", 1000, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 0);                /* floors at 0 */
    assert_value(e, "n", "0  ");

    ck_assert_int_eq(set(e, "w", "18446744073709551615"), ENG_SUCCESS);
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "w", 1, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 0);                /* wraps modulo 2^64 */
    assert_value(e, "w", "0                   ");
    ck_assert_int_eq(set(e, "w", "18446744073709551610"), ENG_SUCCESS);
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "w", 10, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 4);
    assert_value(e, "w", "4                   ");
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "w", UINT64_MAX, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 3);
    ck_assert_int_eq(set(e, "z", "0"), ENG_SUCCESS);
    ck_assert_int_eq(arith(e, ENG_OP_DECR, "z", 1, &v), ENG_SUCCESS);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(set(e, "lead", "007"), ENG_SUCCESS);
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "lead", 1, &v), ENG_SUCCESS);
    assert_value(e, "lead", "8  ");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_incr_non_numeric)
{
    struct engine *e = new_engine();
    const char *bad[] = {
        "abc", "", "12a", "-1", "1.5",
        "18446744073709551616",         /* 2^64: does not fit */
        "99999999999999999999",         /* 20 digits, too big */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(set(e, "k", bad[i]), ENG_SUCCESS);
        ck_assert_int_eq(arith(e, ENG_OP_INCR, "k", 1, NULL), ENG_NON_NUMERIC);
        ck_assert_int_eq(arith(e, ENG_OP_DECR, "k", 1, NULL), ENG_NON_NUMERIC);
        assert_value(e, "k", bad[i]);
    }
    /* memcached reads the value with strtoull: blanks around it, a plus
     * sign and leading zeros are accepted (the result keeps the length,
     * padded with spaces). */
    const char *good[] = { "00000000000000000001", "000000000000000000001", " 1", "1 ", "+1" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ck_assert_int_eq(set(e, "k", good[i]), ENG_SUCCESS);
        uint64_t v;
        ck_assert_int_eq(arith(e, ENG_OP_INCR, "k", 1, &v), ENG_SUCCESS);
        ck_assert_uint_eq(v, 2);
    }
    assert_value(e, "k", "2 ");
    e->ops->destroy(e);
}
END_TEST

/* difftest seed 14014 cases 2037, 5824: memcached calls an empty or a
 * chunked value non-numeric before it compares the cas (binary incr, ma
 * C); other values after. */
START_TEST(test_incr_empty_before_cas)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(set(e, "k", ""), ENG_SUCCESS);
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_INCR;
    m.key = "k";
    m.nkey = 1;
    m.delta = 1;
    m.cas = 999999;
    ck_assert_int_eq(run(e, &m, NULL), ENG_NON_NUMERIC);
    /* a value memcached stores in chunks (over 512 KB): also before the
     * cas (case 5824) */
    size_t big = 600 * 1024;
    char *v = malloc(big + 1);
    ck_assert_ptr_nonnull(v);
    memset(v, 'z', big);
    v[big] = '\0';
    ck_assert_int_eq(set(e, "k", v), ENG_SUCCESS);
    ck_assert_int_eq(run(e, &m, NULL), ENG_NON_NUMERIC);
    free(v);
    /* any other value: the cas first (seed 20261124 cases 644, 680) */
    ck_assert_int_eq(set(e, "k", "abc"), ENG_SUCCESS);
    ck_assert_int_eq(run(e, &m, NULL), ENG_EXISTS);
    ck_assert_int_eq(set(e, "k", "5"), ENG_SUCCESS);
    ck_assert_int_eq(run(e, &m, NULL), ENG_EXISTS);
    e->ops->destroy(e);
}
END_TEST

/* difftest seed 14014 case 4820: without cas (-C) memcached's flush_all
 * compares store times, so what is stored in the same second is dead too. */
START_TEST(test_flush_without_cas)
{
    struct engine *e = new_engine_with(MB, MB, true, false);
    tick_at(e, 10);
    ck_assert_int_eq(set(e, "a", "1"), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 0), ENG_SUCCESS);
    assert_missing(e, "a");
    ck_assert_int_eq(set(e, "b", "2"), ENG_SUCCESS);
    assert_missing(e, "b");                 /* same second as the flush */
    tick_at(e, 11);
    ck_assert_int_eq(set(e, "c", "3"), ENG_SUCCESS);
    assert_value(e, "c", "3");
    /* an absolute time before the process started (memcached's "1")
     * covers nothing stored since (difftest seed 1066 case 616) */
    tick_at(e, 12);
    ck_assert_int_eq(flush(e, 2592001), ENG_SUCCESS);
    assert_value(e, "c", "3");
    e->ops->destroy(e);
}
END_TEST

/* memcached keeps one flush time: a later flush_all with a future time
 * replaces it and revives what the earlier one hid until then (difftest
 * seed 14014 case 12049, seed 20261124 case 1736). */
START_TEST(test_flush_future_revives)
{
    struct engine *e = new_engine();
    tick_at(e, 10);
    ck_assert_int_eq(set(e, "a", "1"), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 0), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 7200), ENG_SUCCESS);
    assert_value(e, "a", "1");
    tick_at(e, 10 + 7199);
    assert_missing(e, "a");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_incr_create)
{
    struct engine *e = new_engine();
    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_INCR;
    m.key = "c";
    m.nkey = 1;
    m.delta = 5;
    m.create = true;
    m.initial = 12345678901234ULL;
    m.exptime = 10;
    struct eng_result res;
    ck_assert_int_eq(run(e, &m, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.value, 12345678901234ULL);
    ck_assert_uint_ne(res.cas, 0);
    assert_value(e, "c", "12345678901234");
    ck_assert_int_eq(run(e, &m, &res), ENG_SUCCESS);     /* now exists: incremented */
    ck_assert_uint_eq(res.value, 12345678901239ULL);
    tick_at(e, 10);
    assert_missing(e, "c");                              /* created with exptime */

    m.op = ENG_OP_DECR;
    m.key = "d";
    m.initial = 0;
    m.exptime = 0;
    ck_assert_int_eq(run(e, &m, &res), ENG_SUCCESS);
    ck_assert_uint_eq(res.value, 0);
    assert_value(e, "d", "0");
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_incr_while_read)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(set(e, "n", "10"), ENG_SUCCESS);
    struct eng_value v;
    struct eng_result res;
    ck_assert_int_eq(e->ops->get(e, "n", 1, &v, &res), ENG_SUCCESS);
    uint64_t nv;
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "n", 1, &nv), ENG_SUCCESS);
    ck_assert_uint_eq(nv, 11);
    /* The reader's view is unchanged. */
    ck_assert(memcmp(v.data, "10\r\n", 4) == 0);
    assert_value(e, "n", "11");
    e->ops->release(e, v.handle);
    ck_assert_int_eq(arith(e, ENG_OP_INCR, "n", 1, &nv), ENG_SUCCESS);
    assert_value(e, "n", "12");
    e->ops->destroy(e);
}
END_TEST

/* ---- touch ---- */

START_TEST(test_touch)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(simple(e, ENG_OP_TOUCH, "k", 10, 0), ENG_NOT_FOUND);
    struct eng_result res;
    ck_assert_int_eq(store(e, ENG_OP_SET, "k", "v", 0, 5, 0, &res), ENG_SUCCESS);
    uint64_t c = res.cas;
    tick_at(e, 3);
    ck_assert_int_eq(simple(e, ENG_OP_TOUCH, "k", 10, 0), ENG_SUCCESS);
    tick_at(e, 12);
    struct got g;
    ck_assert_int_eq(get(e, "k", &g), ENG_SUCCESS);
    ck_assert_uint_eq(g.cas, c);            /* cas unchanged */
    tick_at(e, 13);
    assert_missing(e, "k");

    ck_assert_int_eq(set(e, "p", "v"), ENG_SUCCESS);
    ck_assert_int_eq(simple(e, ENG_OP_TOUCH, "p", -1, 0), ENG_SUCCESS);
    assert_missing(e, "p");
    e->ops->destroy(e);
}
END_TEST

/* ---- expiry ---- */

START_TEST(test_exptime_rules)
{
    struct engine *e = new_engine();
    /* never */
    ck_assert_int_eq(store(e, ENG_OP_SET, "never", "v", 0, 0, 0, NULL), ENG_SUCCESS);
    /* relative */
    ck_assert_int_eq(store(e, ENG_OP_SET, "rel", "v", 0, 5, 0, NULL), ENG_SUCCESS);
    /* absolute, > 30 days */
    ck_assert_int_eq(store(e, ENG_OP_SET, "abs", "v", 0, (int64_t)STARTED + 100, 0, NULL),
                     ENG_SUCCESS);
    /* absolute in the past and negative: stored, but gone */
    ck_assert_int_eq(store(e, ENG_OP_SET, "past", "v", 0, (int64_t)STARTED - 10, 0, NULL),
                     ENG_SUCCESS);
    ck_assert_int_eq(store(e, ENG_OP_SET, "neg", "v", 0, -1, 0, NULL), ENG_SUCCESS);
    assert_missing(e, "past");
    assert_missing(e, "neg");
    ck_assert_int_eq(store(e, ENG_OP_ADD, "neg", "again", 0, 0, 0, NULL), ENG_SUCCESS);
    assert_value(e, "neg", "again");
    ck_assert_int_eq(store(e, ENG_OP_SET, "neg", "x", 0, -1, 0, NULL), ENG_SUCCESS);
    assert_missing(e, "neg");                /* negative set removes what was there */

    tick_at(e, 4);
    assert_value(e, "rel", "v");
    tick_at(e, 5);
    assert_missing(e, "rel");
    tick_at(e, 99);
    assert_value(e, "abs", "v");
    tick_at(e, 100);
    assert_missing(e, "abs");
    tick_at(e, 1000000);
    assert_value(e, "never", "v");
    ck_assert_int_ge(stat(e, "", "get_expired"), 2);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_sweep_without_get)
{
    struct engine *e = new_engine();
    for (int i = 0; i < 3000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(store(e, ENG_OP_SET, key, "v", 0, i % 3 == 0 ? 0 : 5, 0, NULL),
                         ENG_SUCCESS);
    }
    ck_assert_int_eq(stat(e, "", "curr_items"), 3000);
    long long bytes = stat(e, "", "bytes");
    for (int t = 10; t < 30; t++)
        tick_at(e, t);
    ck_assert_int_eq(stat(e, "", "curr_items"), 1000);
    ck_assert_int_eq(stat(e, "", "expired_unfetched"), 2000);
    ck_assert_int_eq(stat(e, "", "get_expired"), 0);
    ck_assert_int_lt(stat(e, "", "bytes"), bytes);
    e->ops->destroy(e);
}
END_TEST

/* ---- flush ---- */

START_TEST(test_flush_now)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(set(e, "a", "1"), ENG_SUCCESS);
    ck_assert_int_eq(set(e, "b", "2"), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 0), ENG_SUCCESS);
    assert_missing(e, "a");
    ck_assert_int_eq(store(e, ENG_OP_REPLACE, "b", "x", 0, 0, 0, NULL), ENG_NOT_STORED);
    ck_assert_int_eq(set(e, "c", "3"), ENG_SUCCESS);
    assert_value(e, "c", "3");
    /* the get of a and the replace of b: memcached counts every lookup */
    ck_assert_int_eq(stat(e, "", "get_flushed"), 2);
    /* a second flush kills c too, only c */
    ck_assert_int_eq(flush(e, -5), ENG_SUCCESS);
    assert_missing(e, "c");
    ck_assert_int_eq(set(e, "d", "4"), ENG_SUCCESS);
    assert_value(e, "d", "4");
    tick_at(e, 1);
    ck_assert_int_eq(stat(e, "", "curr_items"), 1);     /* swept */
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_flush_delayed)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(set(e, "a", "1"), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 10), ENG_SUCCESS);
    assert_value(e, "a", "1");
    tick_at(e, 5);
    ck_assert_int_eq(set(e, "b", "2"), ENG_SUCCESS);   /* stored before the flush fires */
    assert_value(e, "a", "1");
    assert_value(e, "b", "2");
    tick_at(e, 8);
    assert_value(e, "a", "1");
    tick_at(e, 9);          /* memcached's flush time is the exptime less a second */
    assert_missing(e, "a");
    assert_missing(e, "b");
    tick_at(e, 10);
    ck_assert_int_eq(set(e, "c", "3"), ENG_SUCCESS);
    tick_at(e, 100);
    assert_value(e, "c", "3");                          /* fires only once */

    /* absolute delay, and a later flush replacing an armed one */
    ck_assert_int_eq(flush(e, (int64_t)STARTED + 200), ENG_SUCCESS);
    ck_assert_int_eq(flush(e, 50), ENG_SUCCESS);        /* now fires at 150 */
    tick_at(e, 148);
    assert_value(e, "c", "3");
    tick_at(e, 149);
    assert_missing(e, "c");
    tick_at(e, 150);
    ck_assert_int_eq(set(e, "d", "4"), ENG_SUCCESS);
    tick_at(e, 250);
    assert_value(e, "d", "4");
    e->ops->destroy(e);
}
END_TEST

/* ---- memory ---- */

START_TEST(test_evictions)
{
    struct engine *e = new_engine_with(MB, MB, true, true);
    char val[1025];
    memset(val, 'v', 1024);
    val[1024] = '\0';
    for (int i = 0; i < 3000; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(set(e, key, val), ENG_SUCCESS);
    }
    long long items = stat(e, "", "curr_items");
    ck_assert_int_gt(stat(e, "", "evictions"), 1000);
    ck_assert_int_eq(items + stat(e, "", "evictions"), 3000);
    ck_assert_int_le(stat(e, "slabs", "total_malloced"), (long long)MB);
    ck_assert_int_eq(stat(e, "", "limit_maxbytes"), (long long)MB);
    assert_value(e, "k2999", val);
    assert_missing(e, "k0");
    ck_assert_int_eq(stat(e, "items", "items:1:evicted"), stat(e, "", "evictions"));
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_out_of_memory)
{
    struct engine *e = new_engine_with(MB, MB, false, true);
    char val[1025];
    memset(val, 'v', 1024);
    val[1024] = '\0';
    eng_status st = ENG_SUCCESS;
    int i;
    for (i = 0; i < 3000 && st == ENG_SUCCESS; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        st = set(e, key, val);
    }
    ck_assert_int_eq(st, ENG_NO_MEMORY);
    ck_assert_int_eq(stat(e, "", "evictions"), 0);
    ck_assert_int_eq(stat(e, "items", "items:1:outofmemory"), 1);
    assert_value(e, "k0", val);
    /* deleting makes room again */
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k0", 0, 0), ENG_SUCCESS);
    ck_assert_int_eq(set(e, "new", val), ENG_SUCCESS);
    e->ops->destroy(e);
}
END_TEST

/* ---- stats ---- */

START_TEST(test_stats_groups)
{
    struct engine *e = new_engine();
    struct stat_table t;
    const char *general[] = {
        "curr_items", "total_items", "bytes", "evictions", "expired_unfetched",
        "evicted_unfetched", "reclaimed", "limit_maxbytes", "hash_power_level",
        "hash_bytes", "hash_is_expanding", "get_expired", "get_flushed",
    };
    for (size_t i = 0; i < sizeof(general) / sizeof(general[0]); i++)
        ck_assert_int_ge(stat(e, "", general[i]), 0);
    ck_assert_int_eq(stat(e, "", "hash_power_level"), 4);
    stats_of(e, "items", &t);
    ck_assert_uint_eq(t.n, 0);              /* nothing stored yet */
    ck_assert(!e->ops->stats(e, "bogus", collect, &t));

    ck_assert_int_eq(set(e, "a", "12345"), ENG_SUCCESS);          /* 48+1+5+2 = 56 */
    ck_assert_int_eq(set(e, "b", "12345"), ENG_SUCCESS);
    ck_assert_int_eq(set(e, "c", "1234567890123"), ENG_SUCCESS);  /* 64 */
    ck_assert_int_eq(set(e, "d", "12345678901234"), ENG_SUCCESS); /* 65 */
    ck_assert_int_eq(stat(e, "", "curr_items"), 4);
    ck_assert_int_eq(stat(e, "", "total_items"), 4);
    ck_assert_int_eq(stat(e, "", "bytes"), 56 + 56 + 64 + 65);
    ck_assert_int_eq(stat(e, "items", "items:1:number"), 4);
    ck_assert_int_eq(stat(e, "items", "items:1:age"), 0);
    ck_assert_int_ge(stat(e, "items", "items:1:evicted_unfetched"), 0);
    ck_assert_int_ge(stat(e, "items", "items:1:expired_unfetched"), 0);
    ck_assert_int_ge(stat(e, "items", "items:1:reclaimed"), 0);
    ck_assert_int_eq(stat(e, "slabs", "1:used_chunks"), 4);
    ck_assert_int_eq(stat(e, "slabs", "1:mem_requested"), 56 + 56 + 64 + 65);
    ck_assert_int_eq(stat(e, "slabs", "active_slabs"), 1);
    ck_assert_int_ge(stat(e, "slabs", "total_malloced"), 56 + 56 + 64 + 65);
    ck_assert_int_eq(stat(e, "sizes", "64"), 3);
    ck_assert_int_eq(stat(e, "sizes", "96"), 1);
    stats_of(e, "sizes", &t);
    ck_assert_uint_eq(t.n, 2);

    /* stats sizes_enable: from then on only items stored after it count,
     * as in memcached, and it takes a cas id */
    ck_assert(e->ops->stats(e, "sizes_enable", collect, &t));
    ck_assert_int_eq(set(e, "a", "1234567890123"), ENG_SUCCESS);  /* 64 again */
    stats_of(e, "sizes", &t);
    ck_assert_uint_eq(t.n, 1);
    ck_assert_int_eq(stat(e, "sizes", "64"), 1);

    tick_at(e, 7);
    tick_at(e, 8);
    ck_assert_int_eq(stat(e, "items", "items:1:age"), 8);

    /* many keys: the table grows */
    for (int i = 0; i < 200; i++) {
        char key[16];
        snprintf(key, sizeof(key), "g%d", i);
        ck_assert_int_eq(set(e, key, "v"), ENG_SUCCESS);
    }
    ck_assert_int_gt(stat(e, "", "hash_power_level"), 4);
    ck_assert_int_ge(stat(e, "", "hash_bytes"), 8 << 7);

    e->ops->stats_reset(e);
    ck_assert_int_eq(stat(e, "", "total_items"), 0);
    ck_assert_int_eq(stat(e, "", "curr_items"), 204);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_many_keys_through_resizes)
{
    struct engine *e = new_engine_with(256 * MB, MB, true, true);
    for (int i = 0; i < 50000; i++) {
        char key[24], val[24];
        snprintf(key, sizeof(key), "key:%d", i);
        snprintf(val, sizeof(val), "%d", i * 7);
        ck_assert_int_eq(set(e, key, val), ENG_SUCCESS);
        if (i % 5000 == 0)
            tick_at(e, i / 5000);
    }
    for (int i = 0; i < 50000; i += 3) {
        char key[24];
        snprintf(key, sizeof(key), "key:%d", i);
        ck_assert_int_eq(simple(e, ENG_OP_DELETE, key, 0, 0), ENG_SUCCESS);
    }
    for (int i = 0; i < 50000; i++) {
        char key[24], val[24];
        snprintf(key, sizeof(key), "key:%d", i);
        snprintf(val, sizeof(val), "%d", i * 7);
        if (i % 3 == 0)
            assert_missing(e, key);
        else
            assert_value(e, key, val);
    }
    ck_assert_int_ge(stat(e, "", "hash_power_level"), 15);
    e->ops->destroy(e);
}
END_TEST

START_TEST(test_release_after_delete)
{
    struct engine *e = new_engine();
    ck_assert_int_eq(set(e, "k", "value"), ENG_SUCCESS);
    struct eng_value v;
    struct eng_result res;
    ck_assert_int_eq(e->ops->get(e, "k", 1, &v, &res), ENG_SUCCESS);
    ck_assert_int_eq(simple(e, ENG_OP_DELETE, "k", 0, 0), ENG_SUCCESS);
    ck_assert_int_eq(set(e, "k", "other"), ENG_SUCCESS);
    ck_assert(memcmp(v.data, "value\r\n", 7) == 0);
    e->ops->release(e, v.handle);
    assert_value(e, "k", "other");
    e->ops->destroy(e);
}
END_TEST

static Suite *plain_suite(void)
{
    Suite *s = suite_create("plain");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_set_get_delete);
    tcase_add_test(tc, test_bad_keys);
    tcase_add_test(tc, test_add_replace);
    tcase_add_test(tc, test_append_prepend);
    tcase_add_test(tc, test_append_too_large);
    tcase_add_test(tc, test_cas_unique_increasing);
    tcase_add_test(tc, test_cas_op);
    tcase_add_test(tc, test_cas_condition_on_other_ops);
    tcase_add_test(tc, test_cas_disabled);
    tcase_add_test(tc, test_incr_decr);
    tcase_add_test(tc, test_incr_non_numeric);
    tcase_add_test(tc, test_incr_empty_before_cas);
    tcase_add_test(tc, test_flush_without_cas);
    tcase_add_test(tc, test_flush_future_revives);
    tcase_add_test(tc, test_incr_create);
    tcase_add_test(tc, test_incr_while_read);
    tcase_add_test(tc, test_touch);
    tcase_add_test(tc, test_exptime_rules);
    tcase_add_test(tc, test_sweep_without_get);
    tcase_add_test(tc, test_flush_now);
    tcase_add_test(tc, test_flush_delayed);
    tcase_add_test(tc, test_evictions);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_stats_groups);
    tcase_add_test(tc, test_many_keys_through_resizes);
    tcase_add_test(tc, test_release_after_delete);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(plain_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
