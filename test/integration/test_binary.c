/* Integration tests: every libmemcached command over the binary protocol
 * (MEMCACHED_BEHAVIOR_BINARY_PROTOCOL), plus a few raw binary packets,
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
    memc = harness_client(server.port, true);
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

/* ---- storage commands ---- */

START_TEST(test_set_get)
{
    ck_assert_int_eq(set_str("b:set", "hello", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:set", "hello");
    ck_assert_int_eq(set_str("b:set", "world", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:set", "world");
    ck_assert_int_eq(set_str("b:empty", "", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:empty", "");
}
END_TEST

START_TEST(test_get_missing)
{
    assert_missing("b:never-set");
}
END_TEST

START_TEST(test_add)
{
    ck_assert_int_eq(memcached_add(memc, "b:add", 5, "one", 3, 0, 0), MEMCACHED_SUCCESS);
    /* binary status 0x0002 (key exists) */
    ck_assert_int_eq(memcached_add(memc, "b:add", 5, "two", 3, 0, 0), MEMCACHED_DATA_EXISTS);
    assert_value("b:add", "one");
}
END_TEST

START_TEST(test_replace)
{
    /* binary status 0x0001 (not found) */
    ck_assert_int_eq(memcached_replace(memc, "b:repl", 6, "x", 1, 0, 0), MEMCACHED_NOTFOUND);
    assert_missing("b:repl");
    ck_assert_int_eq(set_str("b:repl", "old", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_replace(memc, "b:repl", 6, "new", 3, 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:repl", "new");
}
END_TEST

START_TEST(test_append_prepend)
{
    ck_assert_int_eq(memcached_append(memc, "b:ap", 4, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    ck_assert_int_eq(memcached_prepend(memc, "b:ap", 4, "x", 1, 0, 0), MEMCACHED_NOTSTORED);
    assert_missing("b:ap");
    ck_assert_int_eq(set_str("b:ap", "mid", 0, 42), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_append(memc, "b:ap", 4, "end", 3, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_prepend(memc, "b:ap", 4, "start", 5, 0, 0), MEMCACHED_SUCCESS);
    memcached_return_t rc;
    uint32_t flags = 0;
    char *v = get_str("b:ap", &rc, &flags);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(v, "startmidend");
    ck_assert_uint_eq(flags, 42);   /* append/prepend keep the original flags */
    free(v);
}
END_TEST

START_TEST(test_cas)
{
    ck_assert_int_eq(set_str("b:cas", "v1", 0, 0), MEMCACHED_SUCCESS);
    uint64_t cas1 = fetch_cas("b:cas");
    ck_assert_uint_ne(cas1, 0);
    ck_assert_int_eq(memcached_cas(memc, "b:cas", 5, "v2", 2, 0, 0, cas1), MEMCACHED_SUCCESS);
    assert_value("b:cas", "v2");
    uint64_t cas2 = fetch_cas("b:cas");
    ck_assert_uint_ne(cas2, cas1);
    ck_assert_int_eq(memcached_cas(memc, "b:cas", 5, "v3", 2, 0, 0, cas1),
                     MEMCACHED_DATA_EXISTS);
    assert_value("b:cas", "v2");
    ck_assert_int_eq(memcached_cas(memc, "b:cas-missing", 13, "v", 1, 0, 0, cas2),
                     MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_cas_unique_per_change)
{
    uint64_t seen[8];
    for (int i = 0; i < 8; i++) {
        char value[16];
        snprintf(value, sizeof value, "v%d", i);
        ck_assert_int_eq(set_str(i % 2 ? "b:casu1" : "b:casu2", value, 0, 0),
                         MEMCACHED_SUCCESS);
        seen[i] = fetch_cas(i % 2 ? "b:casu1" : "b:casu2");
        ck_assert_uint_ne(seen[i], 0);
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(seen[i], seen[j]);
    }
    /* incr and append are changes too */
    ck_assert_int_eq(set_str("b:casu3", "1", 0, 0), MEMCACHED_SUCCESS);
    uint64_t before = fetch_cas("b:casu3");
    uint64_t value = 0;
    ck_assert_int_eq(memcached_increment(memc, "b:casu3", 7, 1, &value), MEMCACHED_SUCCESS);
    uint64_t after_incr = fetch_cas("b:casu3");
    ck_assert_uint_ne(after_incr, before);
    ck_assert_int_eq(memcached_append(memc, "b:casu3", 7, "0", 1, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_uint_ne(fetch_cas("b:casu3"), after_incr);
}
END_TEST

START_TEST(test_flags_roundtrip)
{
    const uint32_t samples[] = { 0, 1, 0x80000000u, 0xffffffffu, 0x12345678u };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        ck_assert_int_eq(set_str("b:flags", "f", 0, samples[i]), MEMCACHED_SUCCESS);
        memcached_return_t rc;
        uint32_t flags = 0;
        char *v = get_str("b:flags", &rc, &flags);
        ck_assert_ptr_nonnull(v);
        ck_assert_uint_eq(flags, samples[i]);
        free(v);
    }
}
END_TEST

/* ---- retrieval ---- */

static void key_name(char *out, size_t cap, int i)
{
    snprintf(out, cap, "b:mget:%03d", i);
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

START_TEST(test_mget_execute)
{
    const char *keys[] = { "b:mx1", "b:mx2", "b:mx-missing" };
    size_t lens[] = { 5, 5, 12 };
    ck_assert_int_eq(set_str("b:mx1", "1", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:mx2", "2", 0, 0), MEMCACHED_SUCCESS);
    int hits = 0;
    memcached_execute_fn callbacks[] = { count_result };
    ck_assert_int_eq(memcached_mget_execute(memc, keys, lens, 3, callbacks, &hits, 1),
                     MEMCACHED_SUCCESS);
    memcached_return_t rc = memcached_fetch_execute(memc, callbacks, &hits, 1);
    ck_assert(rc == MEMCACHED_SUCCESS || rc == MEMCACHED_END);
    ck_assert_int_eq(hits, 2);
}
END_TEST

START_TEST(test_exist)
{
    ck_assert_int_eq(set_str("b:exist", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_exist(memc, "b:exist", 7), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_exist(memc, "b:exist-not", 11), MEMCACHED_NOTFOUND);
}
END_TEST

/* ---- delete, arithmetic ---- */

START_TEST(test_delete)
{
    ck_assert_int_eq(set_str("b:del", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_delete(memc, "b:del", 5, 0), MEMCACHED_SUCCESS);
    assert_missing("b:del");
    ck_assert_int_eq(memcached_delete(memc, "b:del", 5, 0), MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_incr_decr)
{
    uint64_t v = 99;
    ck_assert_int_eq(set_str("b:num", "10", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_increment(memc, "b:num", 5, 5, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 15);
    ck_assert_int_eq(memcached_decrement(memc, "b:num", 5, 3, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 12);
    assert_number("b:num", "12");
    ck_assert_int_eq(memcached_decrement(memc, "b:num", 5, 100, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 0);   /* decr floors at 0 */
    assert_number("b:num", "0");
    ck_assert_int_eq(memcached_increment(memc, "b:num-missing", 13, 1, &v),
                     MEMCACHED_NOTFOUND);
    ck_assert_int_eq(memcached_decrement(memc, "b:num-missing", 13, 1, &v),
                     MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_incr_wraps_64bit)
{
    uint64_t v = 99;
    ck_assert_int_eq(set_str("b:wrap", "18446744073709551615", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_increment(memc, "b:wrap", 6, 1, &v), MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 0);
    assert_number("b:wrap", "0");
}
END_TEST

START_TEST(test_incr_non_numeric)
{
    uint64_t v = 0;
    ck_assert_int_eq(set_str("b:nan", "abc", 0, 0), MEMCACHED_SUCCESS);
    /* status 0x0006, which libmemcached has no name for; see test_raw_incr_non_numeric */
    ck_assert_int_ne(memcached_increment(memc, "b:nan", 5, 1, &v), MEMCACHED_SUCCESS);
    ck_assert_int_ne(memcached_decrement(memc, "b:nan", 5, 1, &v), MEMCACHED_SUCCESS);
    assert_value("b:nan", "abc");   /* untouched, connection still usable */
}
END_TEST

START_TEST(test_incr_with_initial)
{
    uint64_t v = 0;
    memcached_delete(memc, "b:init", 6, 0);
    ck_assert_int_eq(memcached_increment_with_initial(memc, "b:init", 6, 3, 40, 0, &v),
                     MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 40);   /* missing: created with the initial value */
    assert_number("b:init", "40");
    ck_assert_int_eq(memcached_increment_with_initial(memc, "b:init", 6, 3, 40, 0, &v),
                     MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 43);
    ck_assert_int_eq(memcached_decrement_with_initial(memc, "b:init", 6, 50, 7, 0, &v),
                     MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 0);
    memcached_delete(memc, "b:dinit", 7, 0);
    ck_assert_int_eq(memcached_decrement_with_initial(memc, "b:dinit", 7, 1, 7, 0, &v),
                     MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 7);
    ck_assert_int_eq(memcached_decrement_with_initial(memc, "b:dinit", 7, 1, 7, 0, &v),
                     MEMCACHED_SUCCESS);
    ck_assert_uint_eq(v, 6);
}
END_TEST

/* ---- raw binary packets ---- */

enum {
    OP_GET = 0x00,
    OP_SET = 0x01,
    OP_INCREMENT = 0x05,
    OP_NOOP = 0x0a,
};

static void open_raw(raw_conn *c)
{
    ck_assert(raw_open(c, server.port));
}

static bin_response *bin_call(raw_conn *c, const bin_request *req)
{
    static bin_response res;
    ck_assert(raw_bin_send(c, req));
    ck_assert_msg(raw_bin_read(c, &res, HARNESS_IO_TIMEOUT_MS), "no binary response");
    ck_assert_uint_eq(res.magic, BIN_RES_MAGIC);
    ck_assert_uint_eq(res.opcode, req->opcode);
    ck_assert_uint_eq(res.opaque, req->opaque);
    return &res;
}

static void bin_set(raw_conn *c, const char *key, const char *value, uint32_t flags)
{
    unsigned char extras[8] = { (unsigned char)(flags >> 24), (unsigned char)(flags >> 16),
                                (unsigned char)(flags >> 8), (unsigned char)flags, 0, 0, 0, 0 };
    bin_request req = { .opcode = OP_SET, .extras = extras, .extlen = 8,
                        .key = key, .keylen = (uint16_t)strlen(key),
                        .value = value, .valuelen = (uint32_t)strlen(value), .opaque = 11 };
    ck_assert_uint_eq(bin_call(c, &req)->status, 0);
}

START_TEST(test_raw_get)
{
    raw_conn c;
    open_raw(&c);
    bin_set(&c, "b:raw", "payload", 0xdeadbeef);
    bin_request get = { .opcode = OP_GET, .key = "b:raw", .keylen = 5, .opaque = 0x01020304 };
    bin_response *res = bin_call(&c, &get);
    ck_assert_uint_eq(res->status, 0);
    ck_assert_uint_eq(res->extlen, 4);
    ck_assert_uint_eq(res->keylen, 0);
    ck_assert_uint_eq(res->bodylen, 4 + 7);
    ck_assert_uint_ne(res->cas, 0);
    ck_assert_int_eq(memcmp(res->body, "\xde\xad\xbe\xef" "payload", 11), 0);

    bin_request miss = { .opcode = OP_GET, .key = "b:raw-miss", .keylen = 10, .opaque = 5 };
    res = bin_call(&c, &miss);
    ck_assert_uint_eq(res->status, 0x0001);   /* key not found */
    ck_assert_uint_eq(res->extlen, 0);

    bin_request noop = { .opcode = OP_NOOP, .opaque = 6 };
    ck_assert_uint_eq(bin_call(&c, &noop)->status, 0);
    raw_close(&c);
}
END_TEST

START_TEST(test_raw_incr_non_numeric)
{
    raw_conn c;
    open_raw(&c);
    bin_set(&c, "b:raw-nan", "abc", 0);
    unsigned char extras[20] = { 0 };
    extras[7] = 1;                                  /* delta 1 */
    memset(extras + 16, 0xff, 4);                   /* no auto-create */
    bin_request incr = { .opcode = OP_INCREMENT, .extras = extras, .extlen = 20,
                         .key = "b:raw-nan", .keylen = 9, .opaque = 7 };
    ck_assert_uint_eq(bin_call(&c, &incr)->status, 0x0006);   /* non-numeric value */

    bin_request missing = incr;
    missing.key = "b:raw-nokey";
    missing.keylen = 11;
    ck_assert_uint_eq(bin_call(&c, &missing)->status, 0x0001);
    raw_close(&c);
}
END_TEST

START_TEST(test_raw_key_too_long)
{
    raw_conn c;
    open_raw(&c);
    char key[251];
    memset(key, 'x', sizeof key);
    unsigned char extras[8] = { 0 };
    bin_request set = { .opcode = OP_SET, .extras = extras, .extlen = 8,
                        .key = key, .keylen = 251, .value = "v", .valuelen = 1, .opaque = 9 };
    bin_response *res = bin_call(&c, &set);
    ck_assert_uint_ne(res->status, 0);
    raw_close(&c);
    /* and the server is still fine */
    assert_missing("b:after-long-key");
}
END_TEST

/* ---- touch, flush, expiry ---- */

START_TEST(test_touch)
{
    ck_assert_int_eq(set_str("b:touch", "t", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "b:touch", 7, 100), MEMCACHED_SUCCESS);
    assert_value("b:touch", "t");
    ck_assert_int_eq(memcached_touch(memc, "b:touch-missing", 15, 100), MEMCACHED_NOTFOUND);
}
END_TEST

START_TEST(test_flush)
{
    ck_assert_int_eq(set_str("b:fl1", "1", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:fl2", "2", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_flush(memc, 0), MEMCACHED_SUCCESS);
    assert_missing("b:fl1");
    assert_missing("b:fl2");
    ck_assert_int_eq(set_str("b:fl1", "again", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:fl1", "again");
}
END_TEST

START_TEST(test_expiry)
{
    time_t now = time(NULL);
    ck_assert_int_eq(set_str("b:exp1", "x", 1, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:exp-touched", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "b:exp-touched", 13, 1), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:exp-kept", "x", 1, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_touch(memc, "b:exp-kept", 10, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:exp-past", "x", now - 1000, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:exp-future", "x", now + 3600, 0), MEMCACHED_SUCCESS);
    assert_value("b:exp1", "x");
    assert_missing("b:exp-past");
    assert_value("b:exp-future", "x");
    harness_sleep_ms(2200);
    assert_missing("b:exp1");
    assert_missing("b:exp-touched");
    assert_value("b:exp-kept", "x");
    assert_value("b:exp-future", "x");
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
    ck_assert_int_eq(set_str("b:verb", "still", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:verb", "still");
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

    memcached_delete(memc, "b:stat", 6, 0);
    items0 = stat_number("curr_items");
    ck_assert_int_eq(set_str("b:stat", "x", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:stat", "x");
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
        ck_assert_int_eq(set_str("b:nr", value, 0, 0), MEMCACHED_SUCCESS);
    }
    ck_assert_int_eq(memcached_append(memc, "b:nr", 4, "+", 1, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_add(memc, "b:nr", 4, "no", 2, 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(set_str("b:nr-del", "x", 0, 0), MEMCACHED_SUCCESS);
    ck_assert_int_eq(memcached_delete(memc, "b:nr-del", 8, 0), MEMCACHED_SUCCESS);
    assert_value("b:nr", "v19+");
    assert_missing("b:nr-del");
}
END_TEST

/* ---- sizes ---- */

START_TEST(test_value_sizes)
{
    assert_roundtrip_size("b:1k", 1024);
    assert_roundtrip_size("b:100k", 100 * 1024);
    assert_roundtrip_size("b:almost1m", 1024 * 1024 - 512);
}
END_TEST

START_TEST(test_value_too_large)
{
    size_t len = 1024 * 1024 + 1;
    char *v = make_value(len, 'b');
    memcached_return_t rc = memcached_set(memc, "b:huge", 6, v, len, 0, 0);
    ck_assert_msg(rc == MEMCACHED_E2BIG, "oversized set gave %s", memcached_strerror(memc, rc));
    free(v);
    assert_missing("b:huge");
    ck_assert_int_eq(set_str("b:after-huge", "ok", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:after-huge", "ok");
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
    /* libmemcached refuses 251 bytes before sending; see test_raw_key_too_long. */
    ck_assert_int_eq(memcached_set(memc, key, 251, "x", 1, 0, 0), MEMCACHED_BAD_KEY_PROVIDED);
}
END_TEST

/* Runs in the "-I 2m" test case. */
START_TEST(test_item_size_2m)
{
    assert_roundtrip_size("b:1.5m", 1536 * 1024);
    size_t len = 2 * 1024 * 1024 + 1;
    char *v = make_value(len, 'c');
    ck_assert_int_eq(memcached_set(memc, "b:2m+", 5, v, len, 0, 0), MEMCACHED_E2BIG);
    free(v);
    ck_assert_int_eq(set_str("b:after", "ok", 0, 0), MEMCACHED_SUCCESS);
    assert_value("b:after", "ok");
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

static Suite *binary_suite(void)
{
    Suite *s = suite_create("binary");
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
    tcase_add_test(core, test_mget_execute);
    tcase_add_test(core, test_exist);
    tcase_add_test(core, test_delete);
    tcase_add_test(core, test_incr_decr);
    tcase_add_test(core, test_incr_wraps_64bit);
    tcase_add_test(core, test_incr_non_numeric);
    tcase_add_test(core, test_incr_with_initial);
    tcase_add_test(core, test_raw_get);
    tcase_add_test(core, test_raw_incr_non_numeric);
    tcase_add_test(core, test_raw_key_too_long);
    tcase_add_test(core, test_touch);
    tcase_add_test(core, test_version);
    tcase_add_test(core, test_verbosity);
    tcase_add_test(core, test_stats);
    tcase_add_test(core, test_noreply);
    tcase_add_test(core, test_value_sizes);
    tcase_add_test(core, test_value_too_large);
    tcase_add_test(core, test_key_lengths);
    tcase_add_test(core, test_expiry);
    tcase_add_test(core, test_flush);
    suite_add_tcase(s, core);

    TCase *big = new_case("item_size_2m", start_server_2m, 10);
    tcase_add_test(big, test_item_size_2m);
    suite_add_tcase(s, big);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(binary_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
