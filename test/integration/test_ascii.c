/* Integration tests: every libmemcached command over the ASCII protocol,
 * against a freshly started server (see harness.c). */
#include "harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static harness_server server;   /* one per TCase, started in the runner */
static memcached_st *memc;      /* one per test, created in the test process */

/* ---- fixtures ---- */

static void start_server_with(const char *const *args)
{
    if (!harness_server_start(&server, args))
        server.pid = 0;
}

static void start_default_server(void)
{
    start_server_with(NULL);
}

static void start_server_2m(void)
{
    const char *args[] = { "-I", "2m", "-m", "128", NULL };
    start_server_with(args);
}

static void stop_server(void)
{
    harness_server_stop(&server);
}

static void open_client(void)
{
    harness_assert_server_up(&server);
    memc = harness_client(server.port, false);
    ck_assert_ptr_nonnull(memc);
}

static void close_client(void)
{
    if (memc != NULL)
        memcached_free(memc);
    memc = NULL;
    harness_assert_server_up(&server);
}

/* ---- helpers ---- */

static memcached_return_t set_str(const char *key, const char *value,
                                  time_t exptime, uint32_t flags)
{
    return memcached_set(memc, key, strlen(key), value, strlen(value), exptime, flags);
}

/* Returns the value (malloc'd, caller frees) or NULL; rc and flags out. */
static char *get_str(const char *key, memcached_return_t *rc, uint32_t *flags)
{
    size_t len = 0;
    uint32_t f = 0;
    char *v = memcached_get(memc, key, strlen(key), &len, &f, rc);
    if (flags != NULL)
        *flags = f;
    return v;
}

static void assert_value(const char *key, const char *expected)
{
    memcached_return_t rc;
    char *v = get_str(key, &rc, NULL);
    ck_assert_msg(rc == MEMCACHED_SUCCESS, "get %s: %s", key, memcached_strerror(memc, rc));
    ck_assert_str_eq(v != NULL ? v : "", expected);   /* empty values come back NULL */
    free(v);
}

/* Like assert_value for counters: memcached may space-pad a number that got
 * shorter by incr/decr (the protocol allows it), so trailing blanks are ignored. */
static void assert_number(const char *key, const char *expected)
{
    memcached_return_t rc;
    char *v = get_str(key, &rc, NULL);
    ck_assert_msg(v != NULL, "get %s: %s", key, memcached_strerror(memc, rc));
    size_t n = strlen(v);
    while (n > 0 && v[n - 1] == ' ')
        n--;
    v[n] = '\0';
    ck_assert_str_eq(v, expected);
    free(v);
}

static void assert_missing(const char *key)
{
    memcached_return_t rc;
    char *v = get_str(key, &rc, NULL);
    ck_assert_msg(v == NULL, "key %s unexpectedly present: %s", key, v ? v : "");
    ck_assert_int_eq(rc, MEMCACHED_NOTFOUND);
}

/* CAS unique of key via a gets (mget with CAS support); 0 if missing. */
static uint64_t fetch_cas(const char *key)
{
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    const char *keys[] = { key };
    size_t lens[] = { strlen(key) };
    ck_assert_int_eq(memcached_mget(memc, keys, lens, 1), MEMCACHED_SUCCESS);
    memcached_return_t rc;
    uint64_t cas = 0;
    memcached_result_st *res;
    while ((res = memcached_fetch_result(memc, NULL, &rc)) != NULL) {
        cas = memcached_result_cas(res);
        memcached_result_free(res);
    }
    return cas;
}

/* A statistic of the (single) server as a number; -1 if absent. */
static long long stat_number(const char *name)
{
    memcached_return_t rc;
    memcached_stat_st *st = memcached_stat(memc, NULL, &rc);
    ck_assert_msg(st != NULL && rc == MEMCACHED_SUCCESS, "stat: %s",
                  memcached_strerror(memc, rc));
    char *text = memcached_stat_get_value(memc, st, name, &rc);
    long long n = text ? atoll(text) : -1;
    free(text);
    memcached_stat_free(memc, st);
    return n;
}

static char *make_value(size_t len, char fill)
{
    char *v = malloc(len + 1);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < len; i++)
        v[i] = (char)(fill + (char)(i % 23));
    v[len] = '\0';
    return v;
}

static void assert_roundtrip_size(const char *key, size_t len)
{
    char *v = make_value(len, 'a');
    memcached_return_t rc = memcached_set(memc, key, strlen(key), v, len, 0, 7);
    ck_assert_msg(rc == MEMCACHED_SUCCESS, "set %zu bytes: %s", len,
                  memcached_strerror(memc, rc));
    size_t got_len = 0;
    uint32_t flags = 0;
    char *got = memcached_get(memc, key, strlen(key), &got_len, &flags, &rc);
    ck_assert_msg(got != NULL, "get %zu bytes: %s", len, memcached_strerror(memc, rc));
    ck_assert_uint_eq(got_len, len);
    ck_assert_int_eq(memcmp(got, v, len), 0);
    ck_assert_uint_eq(flags, 7);
    free(got);
    free(v);
}

/* Sends one raw ASCII line to the server and returns the first reply line. */
static void raw_exchange(const char *request, char *reply, size_t cap)
{
    raw_conn c;
    ck_assert(raw_open(&c, server.port));
    ck_assert_int_gt(raw_command(&c, request, reply, cap), 0);
    raw_close(&c);
}

/* ---- storage commands ---- */

START_TEST(test_set_get)
{
    ck_assert_int_eq(set_str("a:set", "hello", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:set", "hello");
    ck_assert_int_eq(set_str("a:set", "world", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:set", "world");
    ck_assert_int_eq(set_str("a:empty", "", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:empty", "");
}
END_TEST

START_TEST(test_get_missing)
{
    assert_missing("a:never-set");
}
END_TEST

START_TEST(test_add)
{
    ck_assert_int_eq(memcached_add(memc, "a:add", 5, "one", 3, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_add(memc, "a:add", 5, "two", 3, 0, 0), MEMCACHED_NOTSTORED);
    assert_value("a:add", "one");
}
END_TEST

START_TEST(test_replace)
{
    ck_assert_int_eq(memcached_replace(memc, "a:repl", 6, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    assert_missing("a:repl");
    ck_assert_int_eq(set_str("a:repl", "old", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_replace(memc, "a:repl", 6, "new", 3, 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:repl", "new");
}
END_TEST

START_TEST(test_append_prepend)
{
    ck_assert_int_eq(memcached_append(memc, "a:ap", 4, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    ck_assert_int_eq(memcached_prepend(memc, "a:ap", 4, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    assert_missing("a:ap");
    ck_assert_int_eq(set_str("a:ap", "mid", 0, 42), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_append(memc, "a:ap", 4, "end", 3, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_prepend(memc, "a:ap", 4, "start", 5, 0, 0), MEMCACHED_SUCCESS);
    memcached_return_t rc;
    uint32_t flags = 0;
    char *v = get_str("a:ap", &rc, &flags);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(v, "startmidend");
    ck_assert_uint_eq(flags, 42);   /* append/prepend keep the original flags */
    free(v);
}
END_TEST

START_TEST(test_cas)
{
    ck_assert_int_eq(set_str("a:cas", "v1", 0, 0), MEMCACHED_SUCCESS);
    uint64_t cas1 = fetch_cas("a:cas");
    ck_assert_uint_ne(cas1, 0);
    ck_assert_int_eq(memcached_cas(memc, "a:cas", 5, "v2", 2, 0, 0, cas1), MEMCACHED_SUCCESS);
    assert_value("a:cas", "v2");
    uint64_t cas2 = fetch_cas("a:cas");
    ck_assert_uint_ne(cas2, cas1);
    ck_assert_int_eq(memcached_cas(memc, "a:cas", 5, "v3", 2, 0, 0, cas1),
                     MEMCACHED_DATA_EXISTS);
    assert_value("a:cas", "v2");
    ck_assert_int_eq(memcached_cas(memc, "a:cas-missing", 13, "v", 1, 0, 0, cas2),
                     MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_cas_unique_per_change)
{
    uint64_t seen[8];
    for (int i = 0; i < 8; i++) {
        char value[16];
        snprintf(value, sizeof value, "v%d", i);
        ck_assert_int_eq(set_str(i % 2 ? "a:casu1" : "a:casu2", value, 0, 0),
                         MEMCACHED_SUCCESS);
        seen[i] = fetch_cas(i % 2 ? "a:casu1" : "a:casu2");
        ck_assert_uint_ne(seen[i], 0);
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(seen[i], seen[j]);
    }
    /* incr and append are changes too */
    ck_assert_int_eq(set_str("a:casu3", "1", 0, 0), MEMCACHED_SUCCESS);
    uint64_t before = fetch_cas("a:casu3");
    uint64_t value = 0;
    ck_assert_int_eq(memcached_increment(memc, "a:casu3", 7, 1, &value), MEMCACHED_SUCCESS);
    uint64_t after_incr = fetch_cas("a:casu3");
    ck_assert_uint_ne(after_incr, before);
    ck_assert_int_eq(memcached_append(memc, "a:casu3", 7, "0", 1, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_uint_ne(fetch_cas("a:casu3"), after_incr);
}
END_TEST

START_TEST(test_flags_roundtrip)
{
    const uint32_t samples[] = { 0, 1, 0x80000000u, 0xffffffffu, 0x12345678u };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        ck_assert_int_eq(set_str("a:flags", "f", 0, samples[i]), MEMCACHED_SUCCESS);
        memcached_return_t rc;
        uint32_t flags = 0;
        char *v = get_str("a:flags", &rc, &flags);
        ck_assert_ptr_nonnull(v);
        ck_assert_uint_eq(flags, samples[i]);
        free(v);
    }
}
END_TEST

/* ---- retrieval ---- */

static void key_name(char *out, size_t cap, int i)
{
    snprintf(out, cap, "a:mget:%03d", i);
}

START_TEST(test_mget_100)
{
    char names[100][32];
    const char *keys[100];
    size_t lens[100];
    for (int i = 0; i < 100; i++) {
        key_name(names[i], sizeof names[i], i);
        keys[i] = names[i];
        lens[i] = strlen(names[i]);
        memcached_delete(memc, keys[i], lens[i], 0);
        if (i % 3 != 0)
            ck_assert_int_eq(set_str(keys[i], names[i] + 7, 0, (uint32_t)i), MEMCACHED_SUCCESS);
    }
    ck_assert_int_eq(memcached_mget(memc, keys, lens, 100), MEMCACHED_SUCCESS);
    bool found[100] = { false };
    int count = 0;
    memcached_return_t rc;
    memcached_result_st *res;
    while ((res = memcached_fetch_result(memc, NULL, &rc)) != NULL) {
        char key[64];
        size_t klen = memcached_result_key_length(res);
        ck_assert_uint_lt(klen, sizeof key);
        memcpy(key, memcached_result_key_value(res), klen);
        key[klen] = '\0';
        int i = atoi(key + 7);
        ck_assert_int_ne(i % 3, 0);
        ck_assert(!found[i]);
        found[i] = true;
        ck_assert_uint_eq(memcached_result_length(res), 3);
        ck_assert_int_eq(memcmp(memcached_result_value(res), key + 7, 3), 0);
        ck_assert_uint_eq(memcached_result_flags(res), (uint32_t)i);
        memcached_result_free(res);
        count++;
    }
    ck_assert_int_eq(count, 66);
}
END_TEST

static memcached_return_t count_result(const memcached_st *ptr, memcached_result_st *res,
                                       void *context)
{
    (void)ptr;
    (void)res;
    (*(int *)context)++;
    return MEMCACHED_SUCCESS;
}

START_TEST(test_fetch_execute)
{
    const char *keys[] = { "a:mx1", "a:mx2", "a:mx-missing" };
    size_t lens[] = { 5, 5, 12 };
    ck_assert_int_eq(set_str("a:mx1", "1", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:mx2", "2", 0, 0), MEMCACHED_SUCCESS);
    int hits = 0;
    memcached_execute_fn callbacks[] = { count_result };
    /* memcached_mget_execute is binary-only in libmemcached; mget + fetch_execute. */
    ck_assert_int_eq(memcached_mget(memc, keys, lens, 3), MEMCACHED_SUCCESS);
    memcached_return_t rc = memcached_fetch_execute(memc, callbacks, &hits, 1);
    ck_assert(rc == MEMCACHED_SUCCESS || rc == MEMCACHED_END);
    ck_assert_int_eq(hits, 2);
}
END_TEST

START_TEST(test_exist)
{
    ck_assert_int_eq(set_str("a:exist", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_exist(memc, "a:exist", 7), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_exist(memc, "a:exist-not", 11), MEMCACHED_NOTFOUND);
}
END_TEST

/* ---- delete, arithmetic ---- */

START_TEST(test_delete)
{
    ck_assert_int_eq(set_str("a:del", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_delete(memc, "a:del", 5, 0), MEMCACHED_SUCCESS);
    assert_missing("a:del");
    ck_assert_int_eq(memcached_delete(memc, "a:del", 5, 0), MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_incr_decr)
{
    uint64_t v = 99;
    ck_assert_int_eq(set_str("a:num", "10", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_increment(memc, "a:num", 5, 5, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 15);
    ck_assert_int_eq(memcached_decrement(memc, "a:num", 5, 3, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 12);
    assert_number("a:num", "12");
    ck_assert_int_eq(memcached_decrement(memc, "a:num", 5, 100, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 0);   /* decr floors at 0 */
    assert_number("a:num", "0");
    ck_assert_int_eq(memcached_increment(memc, "a:num-missing", 13, 1, &v),
                     MEMCACHED_NOTFOUND);
    ck_assert_int_eq(memcached_decrement(memc, "a:num-missing", 13, 1, &v),
                     MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_incr_wraps_64bit)
{
    uint64_t v = 99;
    ck_assert_int_eq(set_str("a:wrap", "18446744073709551615", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_increment(memc, "a:wrap", 6, 1, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 0);
    assert_number("a:wrap", "0");
}
END_TEST

START_TEST(test_incr_non_numeric)
{
    uint64_t v = 0;
    ck_assert_int_eq(set_str("a:nan", "abc", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_increment(memc, "a:nan", 5, 1, &v), MEMCACHED_CLIENT_ERROR);
    ck_assert_int_eq(memcached_decrement(memc, "a:nan", 5, 1, &v), MEMCACHED_CLIENT_ERROR);
    assert_value("a:nan", "abc");   /* untouched, connection still usable */
}
END_TEST

/* ---- touch, flush, expiry ---- */

START_TEST(test_touch)
{
    ck_assert_int_eq(set_str("a:touch", "t", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "a:touch", 7, 100), MEMCACHED_SUCCESS);
    assert_value("a:touch", "t");
    ck_assert_int_eq(memcached_touch(memc, "a:touch-missing", 15, 100), MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_flush)
{
    ck_assert_int_eq(set_str("a:fl1", "1", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:fl2", "2", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_flush(memc, 0), MEMCACHED_SUCCESS);
    assert_missing("a:fl1");
    assert_missing("a:fl2");
    ck_assert_int_eq(set_str("a:fl1", "again", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:fl1", "again");
}
END_TEST

START_TEST(test_flush_delayed)
{
    char reply[256];
    ck_assert_int_eq(set_str("a:fld", "x", 0, 0), MEMCACHED_SUCCESS);
    raw_exchange("flush_all 2\r\n", reply, sizeof reply);
    ck_assert_str_eq(reply, "OK\r\n");
    assert_value("a:fld", "x");
    harness_sleep_ms(3100);
    assert_missing("a:fld");
    ck_assert_int_eq(set_str("a:fld", "y", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:fld", "y");
}
END_TEST

START_TEST(test_expiry)
{
    time_t now = time(NULL);
    ck_assert_int_eq(set_str("a:exp1", "x", 1, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:exp-touched", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "a:exp-touched", 13, 1), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:exp-kept", "x", 1, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "a:exp-kept", 10, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:exp-past", "x", now - 1000, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:exp-future", "x", now + 3600, 0), MEMCACHED_SUCCESS);
    assert_value("a:exp1", "x");
    assert_missing("a:exp-past");
    assert_value("a:exp-future", "x");
    harness_sleep_ms(2200);
    assert_missing("a:exp1");
    assert_missing("a:exp-touched");
    assert_value("a:exp-kept", "x");
    assert_value("a:exp-future", "x");
}
END_TEST

START_TEST(test_negative_exptime)
{
    /* libmemcached prints time_t as unsigned, so send this one raw. */
    char reply[256];
    raw_exchange("set a:neg 0 -1 1\r\nx\r\n", reply, sizeof reply);
    ck_assert_str_eq(reply, "STORED\r\n");
    assert_missing("a:neg");
}
END_TEST

/* ---- server commands ---- */

START_TEST(test_version)
{
    ck_assert_int_eq(memcached_version(memc), MEMCACHED_SUCCESS);
    const memcached_instance_st *inst = memcached_server_instance_by_position(memc, 0);
    ck_assert_ptr_nonnull(inst);
    ck_assert_uint_ne(memcached_server_major_version(inst), UINT8_MAX);
}
END_TEST

START_TEST(test_verbosity)
{
    ck_assert_int_eq(memcached_verbosity(memc, 1), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_verbosity(memc, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:verb", "still", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:verb", "still");
}
END_TEST

START_TEST(test_stats)
{
    long long items0 = stat_number("curr_items");
    long long gets0 = stat_number("cmd_get");
    long long sets0 = stat_number("cmd_set");
    ck_assert_int_ge(items0, 0);
    ck_assert_int_ge(gets0, 0);
    ck_assert_int_ge(sets0, 0);
    ck_assert_int_gt(stat_number("pid"), 0);
    ck_assert_int_ge(stat_number("uptime"), 0);
    ck_assert_int_ge(stat_number("get_hits"), 0);
    ck_assert_int_ge(stat_number("get_misses"), 0);
    ck_assert_int_ge(stat_number("total_items"), 0);
    ck_assert_int_ge(stat_number("curr_connections"), 1);

    memcached_delete(memc, "a:stat", 6, 0);
    items0 = stat_number("curr_items");
    ck_assert_int_eq(set_str("a:stat", "x", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:stat", "x");
    ck_assert_int_eq(stat_number("curr_items"), items0 + 1);
    ck_assert_int_gt(stat_number("cmd_get"), gets0);
    ck_assert_int_gt(stat_number("cmd_set"), sets0);
}
END_TEST

START_TEST(test_noreply)
{
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    for (int i = 0; i < 20; i++) {
        char value[16];
        snprintf(value, sizeof value, "v%d", i);
        ck_assert_int_eq(set_str("a:nr", value, 0, 0), MEMCACHED_SUCCESS);
    }
    ck_assert_int_eq(memcached_append(memc, "a:nr", 4, "+", 1, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_add(memc, "a:nr", 4, "no", 2, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("a:nr-del", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_delete(memc, "a:nr-del", 8, 0), MEMCACHED_SUCCESS);
    assert_value("a:nr", "v19+");
    assert_missing("a:nr-del");
}
END_TEST

/* ---- sizes ---- */

START_TEST(test_value_sizes)
{
    assert_roundtrip_size("a:1k", 1024);
    assert_roundtrip_size("a:100k", 100 * 1024);
    assert_roundtrip_size("a:almost1m", 1024 * 1024 - 512);
}
END_TEST

START_TEST(test_value_too_large)
{
    size_t len = 1024 * 1024 + 1;
    char *v = make_value(len, 'b');
    memcached_return_t rc = memcached_set(memc, "a:huge", 6, v, len, 0, 0);
    ck_assert_msg(rc == MEMCACHED_E2BIG, "oversized set gave %s", memcached_strerror(memc, rc));
    free(v);
    assert_missing("a:huge");
    ck_assert_int_eq(set_str("a:after-huge", "ok", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:after-huge", "ok");
}
END_TEST

START_TEST(test_key_lengths)
{
    char key[252];
    memset(key, 'k', sizeof key);
    key[251] = '\0';
    ck_assert_int_eq(memcached_set(memc, key, 250, "250", 3, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_set(memc, "k", 1, "one", 3, 0, 0), MEMCACHED_SUCCESS);
    assert_value("k", "one");
    key[250] = '\0';
    assert_value(key, "250");
    /* libmemcached refuses 251 bytes before sending (ASCII key limit). */
    ck_assert_int_eq(memcached_set(memc, key, 251, "x", 1, 0, 0), MEMCACHED_BAD_KEY_PROVIDED);
}
END_TEST

/* Runs in the "-I 2m" test case. */
START_TEST(test_item_size_2m)
{
    assert_roundtrip_size("a:1.5m", 1536 * 1024);
    size_t len = 2 * 1024 * 1024 + 1;
    char *v = make_value(len, 'c');
    ck_assert_int_eq(memcached_set(memc, "a:2m+", 5, v, len, 0, 0), MEMCACHED_E2BIG);
    free(v);
    ck_assert_int_eq(set_str("a:after", "ok", 0, 0), MEMCACHED_SUCCESS);
    assert_value("a:after", "ok");
}
END_TEST

/* ---- suite ---- */

static TCase *new_case(const char *name, void (*start)(void), double timeout)
{
    TCase *tc = tcase_create(name);
    tcase_add_unchecked_fixture(tc, start, stop_server);
    tcase_add_checked_fixture(tc, open_client, close_client);
    tcase_set_timeout(tc, timeout);
    return tc;
}

static Suite *ascii_suite(void)
{
    Suite *s = suite_create("ascii");
    TCase *core = new_case("core", start_default_server, 10);
    tcase_add_test(core, test_set_get);
    tcase_add_test(core, test_get_missing);
    tcase_add_test(core, test_add);
    tcase_add_test(core, test_replace);
    tcase_add_test(core, test_append_prepend);
    tcase_add_test(core, test_cas);
    tcase_add_test(core, test_cas_unique_per_change);
    tcase_add_test(core, test_flags_roundtrip);
    tcase_add_test(core, test_mget_100);
    tcase_add_test(core, test_fetch_execute);
    tcase_add_test(core, test_exist);
    tcase_add_test(core, test_delete);
    tcase_add_test(core, test_incr_decr);
    tcase_add_test(core, test_incr_wraps_64bit);
    tcase_add_test(core, test_incr_non_numeric);
    tcase_add_test(core, test_touch);
    tcase_add_test(core, test_version);
    tcase_add_test(core, test_verbosity);
    tcase_add_test(core, test_stats);
    tcase_add_test(core, test_noreply);
    tcase_add_test(core, test_value_sizes);
    tcase_add_test(core, test_value_too_large);
    tcase_add_test(core, test_key_lengths);
    tcase_add_test(core, test_negative_exptime);
    tcase_add_test(core, test_expiry);
    tcase_add_test(core, test_flush);
    tcase_add_test(core, test_flush_delayed);
    suite_add_tcase(s, core);

    TCase *big = new_case("item_size_2m", start_server_2m, 10);
    tcase_add_test(big, test_item_size_2m);
    suite_add_tcase(s, big);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ascii_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
