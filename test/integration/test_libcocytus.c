/* test_libcocytus.c - the libcocytus client library and cocytus-proxy.
 *
 * The parts:
 *  - parsers: the key -> slot hash (against libhashkit and the server's
 *    slotmap), the "config get cluster" reply (also as the server's encoder
 *    writes it), MOVED texts and seed lists;
 *  - a plain cocytus-server without a cluster (its one process owns every
 *    slot), every command in the ASCII and the binary protocol;
 *  - a fake two-endpoint cluster run in a child process: it answers
 *    "config get cluster", serves the keys of its own slots from a store
 *    both endpoints share, answers MOVED for the others, and takes control
 *    commands ("fake move/down/up/reset/stats") that change its map the way
 *    a slot move or a failover would ("fake down EP MS": the endpoint dies
 *    now, its slots go to the other one MS later, as when the cluster
 *    publishes a new map some time after a kill).  It speaks ASCII and,
 *    for cocytus-proxy, which talks binary to its servers, binary (turned
 *    into the same text requests).  The library must route
 *    by the map, follow MOVED with a refresh, survive an endpoint going
 *    down, and cocytus-proxy in front of it must hide all of that from a
 *    plain libmemcached client;
 *  - credentials: a cocytus-server started with -Y, reached with the
 *    options' username and password (ASCII set, binary SASL PLAIN);
 *  - failures, against a small scripted server (the "stub", a child
 *    process) that serves a chosen map, can switch to another map after a
 *    delay, and swallows every other request by closing the connection
 *    (counting them; binary requests too): a map that moves a dead server's slots to a live
 *    cocytus-server is picked up within the deadline, an older map is never
 *    taken, a mutation that may have been applied is reported and never sent
 *    twice (also through cocytus-proxy), and retries stop at the deadline
 *    against dead and hung servers. */
#define _GNU_SOURCE     /* strcasestr */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "libcocytus.h"
#include "lc_map.h"
#include "bin_wire.h"
#include "proto_text.h"
#include "slotmap.h"

#define NKEYS 400
#define FAKE_EPS 2
#define FAKE_CLIENTS 64
#define FAKE_BUF_MAX (4u << 20)
#define REPLY_TIMEOUT_MS 3000

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static int key_text(char *buf, size_t cap, const char *prefix, int i)
{
    return snprintf(buf, cap, "%s:%d", prefix, i);
}

/* fork() for a helper process of a test (a fake server, a stub, a
 * proxy): the child gets SIGKILL when its parent dies, and exits with
 * gone_status at once if the parent is already gone.  Buffered output is
 * flushed first, so that the child does not write it again.  Returns
 * fork()'s value. */
static pid_t fork_tied(int gone_status)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(gone_status);
    }
    return pid;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static cocytus_t *connect_opts(const char *seeds, bool binary, cocytus_route route)
{
    cocytus_options_t o;
    char err[256];

    cocytus_options_init(&o);
    o.binary = binary;
    o.route = route;
    cocytus_t *c = cocytus_connect_with(seeds, &o, err, sizeof(err));
    ck_assert_msg(c != NULL, "connect %s: %s", seeds, err);
    return c;
}

static void set_keys(cocytus_t *c, const char *prefix, int n)
{
    char k[64];
    for (int i = 0; i < n; i++) {
        int nk = key_text(k, sizeof(k), prefix, i);
        cocytus_rc r = cocytus_set(c, k, (size_t)nk, k, (size_t)nk, (uint32_t)i, 0);
        ck_assert_msg(r == COCYTUS_OK, "set %s: %s (%s)", k, cocytus_strerror(r),
                      cocytus_last_error(c));
    }
}

static void check_keys(cocytus_t *c, const char *prefix, int n)
{
    char k[64];
    for (int i = 0; i < n; i++) {
        int nk = key_text(k, sizeof(k), prefix, i);
        cocytus_item_t it;
        cocytus_rc r = cocytus_get(c, k, (size_t)nk, &it);
        ck_assert_msg(r == COCYTUS_OK, "get %s: %s (%s)", k, cocytus_strerror(r),
                      cocytus_last_error(c));
        ck_assert_str_eq(it.value, k);
        ck_assert_uint_eq(it.flags, (uint32_t)i);
        cocytus_item_free(&it);
    }
}

/* ------------------------------------------------------------------ */
/* Parsers                                                             */
/* ------------------------------------------------------------------ */

START_TEST(test_hash_matches_libhashkit_and_server)
{
    char key[COCYTUS_KEY_MAX];
    uint64_t s = 88172645463325252ULL;

    for (int i = 0; i < 2000; i++) {
        size_t n = (size_t)(i % COCYTUS_KEY_MAX) + 1;
        for (size_t j = 0; j < n; j++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            key[j] = (char)(s & 0xff);        /* every byte value, >= 0x80 too */
        }
        uint32_t want = memcached_generate_hash_value(key, n, MEMCACHED_HASH_DEFAULT);
        ck_assert_uint_eq(lc_one_at_a_time(key, n), want);
        ck_assert_uint_eq(cocytus_key_slot(key, n), want & (COCYTUS_SLOTS - 1));
        ck_assert_uint_eq(cocytus_key_slot(key, n), slotmap_slot(key, n));
    }
    /* Pinned vectors (docs/routing.md). */
    ck_assert_uint_eq(cocytus_key_slot("fruit:1", 7), 14919);
    ck_assert_uint_eq(cocytus_key_slot("fruit:2", 7), 2272);
    ck_assert_uint_eq(cocytus_key_slot("key:2", 5), 13833);
}
END_TEST

static const char two_ep_reply_fmt[] =
    "CONFIG cluster 0 %zu\r\n%s\r\nEND\r\n";

/* A whole reply around body. */
static size_t make_reply(char *out, size_t cap, const char *body)
{
    return (size_t)snprintf(out, cap, two_ep_reply_fmt, strlen(body), body);
}

START_TEST(test_config_parse_map)
{
    char reply[512], err[128];
    struct lc_map *m = NULL;
    size_t n = make_reply(reply, sizeof(reply),
                          "7\nh0|10.0.0.1|7000 h1||7001\n0-99:1 100-16382:0 16383:1\n");

    ck_assert_uint_eq(lc_config_reply_length(reply, n), n);
    for (size_t k = 0; k < n; k++)
        ck_assert_uint_eq(lc_config_reply_length(reply, k), 0);
    ck_assert_int_eq(lc_config_parse(reply, n, &m, err, sizeof(err)), LC_CONFIG_MAP);
    ck_assert_uint_eq(m->epoch, 7);
    ck_assert_uint_eq(m->n, 2);
    ck_assert_str_eq(m->ep[0].host, "10.0.0.1");   /* the ip when given */
    ck_assert_int_eq(m->ep[0].port, 7000);
    ck_assert_str_eq(m->ep[1].host, "h1");         /* else the host name */
    ck_assert_uint_eq(m->owner[0], 1);
    ck_assert_uint_eq(m->owner[99], 1);
    ck_assert_uint_eq(m->owner[100], 0);
    ck_assert_uint_eq(m->owner[16382], 0);
    ck_assert_uint_eq(m->owner[16383], 1);
    lc_map_free(m);

    /* One endpoint and no ranges (ElastiCache's shape): it owns everything. */
    n = make_reply(reply, sizeof(reply), "3\nh|127.0.0.1|11211\n");
    ck_assert_int_eq(lc_config_parse(reply, n, &m, err, sizeof(err)), LC_CONFIG_MAP);
    ck_assert_uint_eq(m->owner[16383], 0);
    lc_map_free(m);

    ck_assert_int_eq(lc_config_parse("ERROR\r\n", 7, &m, err, sizeof(err)), LC_CONFIG_NO_CLUSTER);
    ck_assert_uint_eq(lc_config_reply_length("ERROR\r\n", 7), 7);
}
END_TEST

START_TEST(test_config_parse_rejects)
{
    static const char *const bodies[] = {
        "x\nh|h|1\n0-16383:0\n",                     /* bad epoch */
        "1\nh|h|1 g|g|2\n",                           /* two endpoints, no ranges */
        "1\nh|h|1\n0-100:0 102-16383:0\n",            /* gap */
        "1\nh|h|1\n0-100:0 100-16383:0\n",            /* overlap */
        "1\nh|h|1\n0-16383:1\n",                      /* no such endpoint */
        "1\nh|h|1\n0-16382:0\n",                      /* short */
        "1\nh|h|0\n0-16383:0\n",                      /* port 0 */
        "1\nhh1\n0-16383:0\n",                        /* not host|ip|port */
        "1\n",                                        /* no endpoints */
    };
    char reply[512], err[128];
    struct lc_map *m = NULL;

    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        size_t n = make_reply(reply, sizeof(reply), bodies[i]);
        err[0] = '\0';
        ck_assert_msg(lc_config_parse(reply, n, &m, err, sizeof(err)) == LC_CONFIG_BAD,
                      "accepted body %zu", i);
        ck_assert_ptr_null(m);
        ck_assert_msg(err[0] != '\0', "no message for body %zu", i);
    }
    ck_assert_int_eq(lc_config_parse("SERVER_ERROR x\r\n", 16, &m, err, sizeof(err)),
                     LC_CONFIG_BAD);
}
END_TEST

/* The server's own encoder (repl/slotmap.c) and our parser agree. */
START_TEST(test_config_parse_server_encoding)
{
    struct slotmap_endpoint eps[3];
    struct slotmap sm;
    struct lc_map *m = NULL;
    char err[128];
    size_t len;

    memset(eps, 0, sizeof(eps));
    memset(&sm, 0, sizeof(sm));
    for (int i = 0; i < 3; i++) {
        snprintf(eps[i].host, sizeof(eps[i].host), "127.0.0.%d", i + 1);
        eps[i].port = 9000 + i;
        eps[i].group = -1;
        eps[i].index = -1;
    }
    sm.epoch = 42;
    sm.nendpoints = 3;
    sm.endpoints = eps;
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        sm.slot[s] = (uint16_t)((s / 1000) % 3);
    char *reply = slotmap_config_reply(&sm, &len);
    ck_assert_ptr_nonnull(reply);
    ck_assert_uint_eq(lc_config_reply_length(reply, len), len);
    ck_assert_int_eq(lc_config_parse(reply, len, &m, err, sizeof(err)), LC_CONFIG_MAP);
    ck_assert_uint_eq(m->epoch, 42);
    ck_assert_uint_eq(m->n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(m->ep[i].host, eps[i].host);
        ck_assert_int_eq(m->ep[i].port, eps[i].port);
    }
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        ck_assert_uint_eq(m->owner[s], sm.slot[s]);
    lc_map_free(m);
    free(reply);
}
END_TEST

START_TEST(test_moved_and_seeds)
{
    struct lc_moved mv;
    struct lc_addr *seeds = NULL;
    char err[128];

    ck_assert(lc_moved_parse("MOVED 12 3 127.0.0.1:5000", &mv));
    ck_assert_uint_eq(mv.slot, 12);
    ck_assert_uint_eq(mv.epoch, 3);
    ck_assert_str_eq(mv.to.host, "127.0.0.1");
    ck_assert_int_eq(mv.to.port, 5000);
    /* As libmemcached reports a SERVER_ERROR line. */
    ck_assert(lc_moved_parse("(0x55) SERVER ERROR, MOVED 16383 99 h.example:7,  host: x:1 -> a.cc:1",
                             &mv));
    ck_assert_uint_eq(mv.slot, 16383);
    ck_assert_str_eq(mv.to.host, "h.example");
    ck_assert_int_eq(mv.to.port, 7);
    ck_assert(lc_moved_parse("MOVED 1 2 [::1]:11211", &mv));
    ck_assert_str_eq(mv.to.host, "::1");
    ck_assert(!lc_moved_parse("MOVED 16384 1 h:1", &mv));
    ck_assert(!lc_moved_parse("MOVED 1 h:1", &mv));
    ck_assert(!lc_moved_parse("SERVER_ERROR out of memory", &mv));

    ck_assert_uint_eq(lc_seeds_parse(" a:1, b ,[::1]:3", &seeds, err, sizeof(err)), 3);
    ck_assert_str_eq(seeds[0].host, "a");
    ck_assert_int_eq(seeds[1].port, 11211);
    ck_assert_str_eq(seeds[2].host, "::1");
    free(seeds);
    ck_assert_uint_eq(lc_seeds_parse("a:0", &seeds, err, sizeof(err)), 0);
    ck_assert_uint_eq(lc_seeds_parse("a:x", &seeds, err, sizeof(err)), 0);
    ck_assert_uint_eq(lc_seeds_parse(" , ", &seeds, err, sizeof(err)), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A plain server                                                      */
/* ------------------------------------------------------------------ */

static harness_server plain;
static char plain_seed[64];

static void start_plain(void)
{
    if (harness_server_start(&plain, NULL))
        snprintf(plain_seed, sizeof(plain_seed), "127.0.0.1:%d", plain.port);
}

static void stop_plain(void)
{
    harness_server_stop(&plain);
}

static cocytus_t *plain_client(bool binary)
{
    harness_assert_server_up(&plain);
    cocytus_t *c = connect_opts(plain_seed, binary, COCYTUS_ROUTE_MAP);
    ck_assert_uint_eq(cocytus_epoch(c), 0);
    ck_assert_uint_eq(cocytus_endpoint_count(c), 1);
    ck_assert_int_eq(cocytus_flush_all(c, 0), COCYTUS_OK);
    return c;
}

static void check_value(cocytus_t *c, const char *key, const char *want)
{
    cocytus_item_t it;
    cocytus_rc r = cocytus_get(c, key, strlen(key), &it);
    ck_assert_msg(r == COCYTUS_OK, "get %s: %s", key, cocytus_strerror(r));
    ck_assert_str_eq(it.value, want);
    cocytus_item_free(&it);
}

START_TEST(test_plain_commands)
{
    bool binary = _i == 1;
    cocytus_t *c = plain_client(binary);
    cocytus_item_t it;
    uint64_t v = 0, cas = 0;

    ck_assert_int_eq(cocytus_get(c, "k", 1, &it), COCYTUS_NOT_FOUND);
    ck_assert_ptr_null(it.value);
    ck_assert_int_eq(cocytus_set(c, "k", 1, "v1", 2, 7, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_get(c, "k", 1, &it), COCYTUS_OK);
    ck_assert_str_eq(it.value, "v1");
    ck_assert_uint_eq(it.nvalue, 2);
    ck_assert_uint_eq(it.flags, 7);
    ck_assert_uint_ne(it.cas, 0);
    cas = it.cas;
    cocytus_item_free(&it);

    ck_assert_int_eq(cocytus_add(c, "k", 1, "x", 1, 0, 0), COCYTUS_NOT_STORED);
    ck_assert_int_eq(cocytus_add(c, "k2", 2, "a", 1, 0, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_replace(c, "nope", 4, "x", 1, 0, 0), COCYTUS_NOT_STORED);
    ck_assert_int_eq(cocytus_append(c, "nope", 4, "x", 1), COCYTUS_NOT_STORED);
    ck_assert_int_eq(cocytus_prepend(c, "nope", 4, "x", 1), COCYTUS_NOT_STORED);
    ck_assert_int_eq(cocytus_append(c, "k2", 2, "b", 1), COCYTUS_OK);
    ck_assert_int_eq(cocytus_prepend(c, "k2", 2, "_", 1), COCYTUS_OK);
    check_value(c, "k2", "_ab");

    ck_assert_int_eq(cocytus_cas(c, "k", 1, "v2", 2, 0, 0, cas + 1000), COCYTUS_EXISTS);
    ck_assert_int_eq(cocytus_cas(c, "k", 1, "v2", 2, 0, 0, UINT64_MAX), COCYTUS_EXISTS);
    ck_assert_int_eq(cocytus_cas(c, "k", 1, "v2", 2, 0, 0, cas), COCYTUS_OK);
    ck_assert_int_eq(cocytus_cas(c, "gone", 4, "v", 1, 0, 0, cas), COCYTUS_NOT_FOUND);
    ck_assert_int_eq(cocytus_replace(c, "k", 1, "v3", 2, 0, 0), COCYTUS_OK);
    check_value(c, "k", "v3");

    /* cas_out: the cas a following cas must use. */
    ck_assert_int_eq(cocytus_store(c, COCYTUS_SET, "k", 1, "v4", 2, 0, 0, 0, &cas), COCYTUS_OK);
    ck_assert_uint_ne(cas, 0);
    ck_assert_int_eq(cocytus_store(c, COCYTUS_CAS, "k", 1, "v5", 2, 0, 0, cas, &cas), COCYTUS_OK);
    ck_assert_int_eq(cocytus_cas(c, "k", 1, "v6", 2, 0, 0, cas), COCYTUS_OK);

    ck_assert_int_eq(cocytus_incr(c, "n", 1, 1, &v), COCYTUS_NOT_FOUND);
    ck_assert_int_eq(cocytus_set(c, "n", 1, "10", 2, 0, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_incr(c, "n", 1, 5, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 15);
    ck_assert_int_eq(cocytus_decr(c, "n", 1, 100, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(cocytus_incr(c, "n", 1, 1ULL << 40, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 1ULL << 40);
    ck_assert_int_eq(cocytus_arith_init(c, 0, "m", 1, 1, 42, 0, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 42);
    ck_assert_int_eq(cocytus_arith_init(c, 0, "m", 1, 1, 42, 0, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 43);
    ck_assert_int_eq(cocytus_arith_init(c, 1, "m2", 2, 1, 9, 0, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 9);
    cocytus_rc r = cocytus_incr(c, "k", 1, 1, &v);
    if (!binary)   /* the binary protocol's error text is lost in libmemcached */
        ck_assert_int_eq(r, COCYTUS_NON_NUMERIC);
    else
        ck_assert_int_ne(r, COCYTUS_OK);

    ck_assert_int_eq(cocytus_touch(c, "k", 1, 100), COCYTUS_OK);
    ck_assert_int_eq(cocytus_touch(c, "gone", 4, 100), COCYTUS_NOT_FOUND);
    ck_assert_int_eq(cocytus_gat(c, "k", 1, 200, &it), COCYTUS_OK);
    ck_assert_str_eq(it.value, "v6");
    cocytus_item_free(&it);
    ck_assert_int_eq(cocytus_gat(c, "gone", 4, 200, &it), COCYTUS_NOT_FOUND);

    ck_assert_int_eq(cocytus_delete(c, "k", 1), COCYTUS_OK);
    ck_assert_int_eq(cocytus_delete(c, "k", 1), COCYTUS_NOT_FOUND);

    /* Values with every byte, and an empty one. */
    char bin[300];
    for (int i = 0; i < 300; i++)
        bin[i] = (char)i;
    ck_assert_int_eq(cocytus_set(c, "b", 1, bin, sizeof(bin), 0, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_get(c, "b", 1, &it), COCYTUS_OK);
    ck_assert_uint_eq(it.nvalue, sizeof(bin));
    ck_assert(memcmp(it.value, bin, sizeof(bin)) == 0);
    cocytus_item_free(&it);
    ck_assert_int_eq(cocytus_set(c, "e", 1, "", 0, 0, 0), COCYTUS_OK);
    check_value(c, "e", "");

    cocytus_stats_t st;
    cocytus_get_stats(c, &st);
    ck_assert_uint_eq(st.redirects, 0);
    ck_assert_uint_eq(st.conn_failures, 0);
    cocytus_close(c);
}
END_TEST

START_TEST(test_plain_limits)
{
    bool binary = _i == 1;
    cocytus_t *c = plain_client(binary);
    char key[COCYTUS_KEY_MAX + 2];
    size_t big = 2u << 20;
    char *value = malloc(big);
    cocytus_item_t it;

    memset(key, 'k', sizeof(key));
    ck_assert_int_eq(cocytus_set(c, key, COCYTUS_KEY_MAX, "v", 1, 0, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_set(c, key, COCYTUS_KEY_MAX + 1, "v", 1, 0, 0), COCYTUS_INVALID);
    ck_assert_int_eq(cocytus_get(c, key, 0, &it), COCYTUS_INVALID);
    if (!binary)
        ck_assert_int_eq(cocytus_set(c, "a b", 3, "v", 1, 0, 0), COCYTUS_INVALID);
    ck_assert_ptr_nonnull(value);
    memset(value, 'x', big);
    ck_assert_int_eq(cocytus_set(c, "big", 3, value, big, 0, 0), COCYTUS_TOO_LARGE);
    ck_assert_int_eq(cocytus_set(c, "ok", 2, value, 500000, 0, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_get(c, "ok", 2, &it), COCYTUS_OK);
    ck_assert_uint_eq(it.nvalue, 500000);
    cocytus_item_free(&it);
    free(value);
    cocytus_close(c);
}
END_TEST

struct mget_seen {
    int count;
    int bad;
    bool seen[NKEYS];
};

static void note_item(void *ctx, const char *key, size_t nkey, const cocytus_item_t *it)
{
    struct mget_seen *s = ctx;
    int i = -1;

    s->count++;
    if (sscanf(key, "%*[^:]:%d", &i) != 1 || i < 0 || i >= NKEYS || s->seen[i] ||
        it->nvalue != nkey || memcmp(it->value, key, nkey) != 0)
        s->bad++;
    else
        s->seen[i] = true;
}

/* mget of NKEYS keys of which the odd ones exist. */
static void mget_half(cocytus_t *c, const char *prefix)
{
    static char names[NKEYS][64];
    const char *keys[NKEYS];
    size_t lens[NKEYS];
    struct mget_seen s;

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < NKEYS; i++) {
        lens[i] = (size_t)key_text(names[i], sizeof(names[i]), prefix, i);
        keys[i] = names[i];
        if (i % 2 == 1)
            ck_assert_int_eq(cocytus_set(c, keys[i], lens[i], keys[i], lens[i], 0, 0), COCYTUS_OK);
    }
    cocytus_rc r = cocytus_mget(c, keys, lens, NKEYS, note_item, &s);
    ck_assert_msg(r == COCYTUS_OK, "mget: %s (%s)", cocytus_strerror(r), cocytus_last_error(c));
    ck_assert_int_eq(s.bad, 0);
    ck_assert_int_eq(s.count, NKEYS / 2);
    for (int i = 0; i < NKEYS; i++)
        ck_assert(s.seen[i] == (i % 2 == 1));
}

START_TEST(test_plain_mget)
{
    cocytus_t *c = plain_client(_i == 1);
    mget_half(c, "mg");
    cocytus_close(c);
}
END_TEST

START_TEST(test_connect_failures)
{
    char err[256];
    int port;

    /* A port nobody listens on: bind one, read its number, close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);
    ck_assert(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
    port = ntohs(a.sin_port);
    close(fd);

    char seeds[160];
    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", port);
    err[0] = '\0';
    ck_assert_ptr_null(cocytus_connect(seeds, err, sizeof(err)));
    ck_assert_msg(strstr(err, "connect") != NULL, "message: %s", err);
    ck_assert_ptr_null(cocytus_connect("", err, sizeof(err)));
    ck_assert_ptr_null(cocytus_connect("h:notaport", err, sizeof(err)));
    ck_assert_ptr_null(cocytus_connect(NULL, NULL, 0));

    /* A dead seed first, a live one after it. */
    harness_assert_server_up(&plain);
    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d,%s", port, plain_seed);
    cocytus_t *c = cocytus_connect(seeds, err, sizeof(err));
    ck_assert_msg(c != NULL, "connect %s: %s", seeds, err);
    ck_assert_int_eq(cocytus_set(c, "x", 1, "y", 1, 0, 0), COCYTUS_OK);
    cocytus_close(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The fake cluster (runs in a child process)                          */
/* ------------------------------------------------------------------ */

struct fake_item {
    struct fake_item *next;
    char key[COCYTUS_KEY_MAX];
    size_t nkey;
    char *value;
    size_t nvalue;
    uint32_t flags;
    uint64_t cas;
};

struct fake_client {
    int fd;                 /* -1: free */
    int ep;
    char *buf;
    size_t len, cap;
};

/* A growing reply buffer. */
struct fake_out {
    char *p;
    size_t len, cap;
};

struct fake {
    int lfd[FAKE_EPS];
    int port[FAKE_EPS];
    bool down[FAKE_EPS];
    uint64_t epoch;
    uint8_t owner[COCYTUS_SLOTS];
    struct fake_item *items[COCYTUS_SLOTS];   /* per slot */
    uint64_t next_cas;
    unsigned long served[FAKE_EPS], moved[FAKE_EPS], flushes[FAKE_EPS];
    struct fake_client cl[FAKE_CLIENTS];
    int control;            /* parent's pipe: EOF means exit */
    int failover_ep;        /* "fake down EP MS": its slots move at failover_at; -1: none */
    int64_t failover_at;
};

static void out_add(struct fake_out *o, const void *p, size_t n)
{
    if (n == 0)
        return;             /* p may be NULL then (an empty part of a binary reply) */
    if (o->cap - o->len < n) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap - o->len < n)
            cap *= 2;
        o->p = realloc(o->p, cap);
        if (o->p == NULL)
            _exit(3);
        o->cap = cap;
    }
    memcpy(o->p + o->len, p, n);
    o->len += n;
}

static void out_printf(struct fake_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void out_printf(struct fake_out *o, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    out_add(o, line, (size_t)n);
}

static void fake_initial_map(struct fake *f)
{
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++)
        f->owner[s] = s < COCYTUS_SLOTS / 2 ? 0 : 1;
    f->epoch = 1;
}

static void fake_clear(struct fake *f)
{
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++) {
        while (f->items[s]) {
            struct fake_item *it = f->items[s];
            f->items[s] = it->next;
            free(it->value);
            free(it);
        }
    }
}

static struct fake_item **fake_find(struct fake *f, const char *key, size_t nkey)
{
    struct fake_item **pp = &f->items[lc_key_slot(key, nkey)];
    while (*pp && !((*pp)->nkey == nkey && memcmp((*pp)->key, key, nkey) == 0))
        pp = &(*pp)->next;
    return pp;
}

static void fake_config(struct fake *f, struct fake_out *o)
{
    char body[4096];
    size_t n = (size_t)snprintf(body, sizeof(body), "%" PRIu64 "\n127.0.0.1|127.0.0.1|%d "
                                "127.0.0.1|127.0.0.1|%d\n", f->epoch, f->port[0], f->port[1]);
    unsigned first = 0;
    for (unsigned s = 1; s <= COCYTUS_SLOTS; s++) {
        if (s == COCYTUS_SLOTS || f->owner[s] != f->owner[first]) {
            n += (size_t)snprintf(body + n, sizeof(body) - n, "%s%u-%u:%u",
                                  first ? " " : "", first, s - 1, f->owner[first]);
            first = s;
        }
    }
    n += (size_t)snprintf(body + n, sizeof(body) - n, "\n");
    out_printf(o, "CONFIG cluster 0 %zu\r\n", n);
    out_add(o, body, n);
    out_printf(o, "\r\nEND\r\n");
}

/* MOVED for the first key of rq this endpoint does not serve. */
static bool fake_moved(struct fake *f, int ep, const struct text_req *rq, struct fake_out *o)
{
    const char *p = rq->keys, *end = rq->keys + rq->nkeys_len, *key = rq->key;
    size_t nkey = rq->nkey;
    bool multi = rq->keys != NULL;

    do {
        if (multi && !text_next_key(&p, end, &key, &nkey))
            return false;
        unsigned slot = lc_key_slot(key, nkey);
        int to = f->owner[slot];
        if (to != ep) {
            f->moved[ep]++;
            if (!rq->noreply)
                out_printf(o, "SERVER_ERROR MOVED %u %" PRIu64 " 127.0.0.1:%d\r\n", slot,
                           f->epoch, f->port[to]);
            return true;
        }
    } while (multi);
    return false;
}

static void fake_get(struct fake *f, const struct text_req *rq, struct fake_out *o)
{
    const char *p = rq->keys, *end = rq->keys + rq->nkeys_len, *key;
    size_t nkey;

    while (text_next_key(&p, end, &key, &nkey)) {
        struct fake_item *it = *fake_find(f, key, nkey);
        if (it == NULL)
            continue;
        if (rq->cmd == TC_GETS)
            out_printf(o, "VALUE %.*s %" PRIu32 " %zu %" PRIu64 "\r\n", (int)nkey, key,
                       it->flags, it->nvalue, it->cas);
        else
            out_printf(o, "VALUE %.*s %" PRIu32 " %zu\r\n", (int)nkey, key, it->flags,
                       it->nvalue);
        out_add(o, it->value, it->nvalue);
        out_add(o, "\r\n", 2);
    }
    out_printf(o, "END\r\n");
}

static void fake_put(struct fake *f, struct fake_item **pp, const struct text_req *rq,
                     const char *data, size_t n)
{
    struct fake_item *it = *pp;
    if (it == NULL) {
        it = calloc(1, sizeof(*it));
        memcpy(it->key, rq->key, rq->nkey);
        it->nkey = rq->nkey;
        it->next = NULL;
        *pp = it;
    }
    char *v = malloc(n + 1);
    memcpy(v, data, n);
    v[n] = '\0';           /* fake_arith reads the value with strtoull */
    free(it->value);
    it->value = v;
    it->nvalue = n;
    it->cas = ++f->next_cas;
}

static const char *fake_store(struct fake *f, const struct text_req *rq)
{
    struct fake_item **pp = fake_find(f, rq->key, rq->nkey);
    struct fake_item *it = *pp;
    size_t n = (size_t)rq->vlen;

    switch (rq->cmd) {
    case TC_ADD:
        if (it)
            return "NOT_STORED";
        break;
    case TC_REPLACE:
        if (!it)
            return "NOT_STORED";
        break;
    case TC_CAS:
        if (!it)
            return "NOT_FOUND";
        if (it->cas != rq->cas)
            return "EXISTS";
        break;
    case TC_APPEND:
    case TC_PREPEND: {
        if (!it)
            return "NOT_STORED";
        char *joined = malloc(it->nvalue + n);
        const char *a = rq->cmd == TC_APPEND ? it->value : rq->data;
        const char *b = rq->cmd == TC_APPEND ? rq->data : it->value;
        size_t na = rq->cmd == TC_APPEND ? it->nvalue : n;
        memcpy(joined, a, na);
        memcpy(joined + na, b, it->nvalue + n - na);
        uint32_t flags = it->flags;
        fake_put(f, pp, rq, joined, it->nvalue + n);
        (*pp)->flags = flags;
        free(joined);
        return "STORED";
    }
    default:
        break;
    }
    fake_put(f, pp, rq, rq->data, n);
    (*pp)->flags = rq->flags;
    return "STORED";
}

static void fake_arith(struct fake *f, const struct text_req *rq, struct fake_out *o)
{
    struct fake_item **pp = fake_find(f, rq->key, rq->nkey);
    char text[24];

    if (*pp == NULL) {
        out_printf(o, "NOT_FOUND\r\n");
        return;
    }
    uint64_t v = strtoull((*pp)->value, NULL, 10);
    v = rq->cmd == TC_INCR ? v + rq->delta : (v > rq->delta ? v - rq->delta : 0);
    int n = snprintf(text, sizeof(text), "%" PRIu64, v);
    fake_put(f, pp, rq, text, (size_t)n);
    out_printf(o, "%s\r\n", text);
}

static void fake_flush(struct fake *f, int ep)
{
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++) {
        if (f->owner[s] != ep)
            continue;
        while (f->items[s]) {
            struct fake_item *it = f->items[s];
            f->items[s] = it->next;
            free(it->value);
            free(it);
        }
    }
    f->flushes[ep]++;
}

static void fake_dispatch(struct fake *f, int ep, const struct text_req *rq, struct fake_out *o)
{
    bool keyed = rq->cmd != TC_FLUSH_ALL && rq->cmd != TC_VERSION && rq->cmd != TC_NONE &&
                 rq->cmd != TC_STATS && rq->cmd != TC_VERBOSITY && rq->cmd != TC_QUIT;

    if (keyed) {
        if (fake_moved(f, ep, rq, o))
            return;
        f->served[ep]++;
    }
    struct fake_out sink = { NULL, 0, 0 };
    struct fake_out *w = rq->noreply ? &sink : o;
    struct fake_item **pp;
    switch (rq->cmd) {
    case TC_GET: case TC_GETS:
        fake_get(f, rq, w);
        break;
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
        out_printf(w, "%s\r\n", fake_store(f, rq));
        break;
    case TC_DELETE:
        pp = fake_find(f, rq->key, rq->nkey);
        if (*pp) {
            struct fake_item *it = *pp;
            *pp = it->next;
            free(it->value);
            free(it);
            out_printf(w, "DELETED\r\n");
        } else {
            out_printf(w, "NOT_FOUND\r\n");
        }
        break;
    case TC_INCR: case TC_DECR:
        fake_arith(f, rq, w);
        break;
    case TC_TOUCH:
        out_printf(w, "%s\r\n", *fake_find(f, rq->key, rq->nkey) ? "TOUCHED" : "NOT_FOUND");
        break;
    case TC_FLUSH_ALL:
        fake_flush(f, ep);
        out_printf(w, "OK\r\n");
        break;
    case TC_VERSION:
        out_printf(w, "VERSION 1.6.18-fake\r\n");
        break;
    default:
        out_printf(w, "ERROR\r\n");
        break;
    }
    free(sink.p);
}

static void fake_close_client(struct fake_client *cl)
{
    close(cl->fd);
    cl->fd = -1;
    free(cl->buf);
    cl->buf = NULL;
    cl->len = cl->cap = 0;
}

/* The failover: ep's slots go to the other endpoint in a new epoch. */
static void fake_take_over(struct fake *f, int ep)
{
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++)
        if (f->owner[s] == ep)
            f->owner[s] = (uint8_t)(1 - ep);
    f->epoch++;
}

/* Marks ep dead (its connections reset, new ones closed at once) and
 * moves its slots now (delay_ms 0) or delay_ms later.  The reset (RST, as
 * when a killed process had unread input) makes a client's next send on
 * such a connection fail. */
static void fake_set_down(struct fake *f, int ep, bool down, int delay_ms)
{
    f->down[ep] = down;
    if (!down)
        return;
    for (int i = 0; i < FAKE_CLIENTS; i++) {
        if (f->cl[i].fd >= 0 && f->cl[i].ep == ep) {
            struct linger abort_close = { 1, 0 };
            setsockopt(f->cl[i].fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
            fake_close_client(&f->cl[i]);
        }
    }
    if (delay_ms > 0) {
        f->failover_ep = ep;
        f->failover_at = mono_ms() + delay_ms;
    } else {
        fake_take_over(f, ep);
    }
}

/* Runs a delayed failover that is due; returns the ms until the pending
 * one (or fallback if none). */
static int fake_failover_due(struct fake *f, int fallback)
{
    if (f->failover_ep < 0)
        return fallback;
    int64_t left = f->failover_at - mono_ms();
    if (left > 0)
        return left < fallback ? (int)left : fallback;
    fake_take_over(f, f->failover_ep);
    f->failover_ep = -1;
    return fallback;
}

/* "fake move FIRST LAST EP", "fake down EP [DELAY_MS]", "fake up EP",
 * "fake reset", "fake stats". */
static void fake_control(struct fake *f, const char *line, struct fake_out *o)
{
    unsigned first, last;
    int ep, delay = 0;

    if (sscanf(line, "fake move %u %u %d", &first, &last, &ep) == 3 && first <= last &&
        last < COCYTUS_SLOTS && ep >= 0 && ep < FAKE_EPS) {
        for (unsigned s = first; s <= last; s++)
            f->owner[s] = (uint8_t)ep;
        f->epoch++;
    } else if (sscanf(line, "fake down %d %d", &ep, &delay) >= 1 && ep >= 0 && ep < FAKE_EPS &&
               delay >= 0 && delay <= 60000) {
        fake_set_down(f, ep, true, delay);
    } else if (sscanf(line, "fake up %d", &ep) == 1 && ep >= 0 && ep < FAKE_EPS) {
        fake_set_down(f, ep, false, 0);
    } else if (strncmp(line, "fake reset", 10) == 0) {
        fake_clear(f);
        fake_initial_map(f);
        f->failover_ep = -1;
        memset(f->served, 0, sizeof(f->served));
        memset(f->moved, 0, sizeof(f->moved));
        memset(f->flushes, 0, sizeof(f->flushes));
        f->down[0] = f->down[1] = false;
    } else if (strncmp(line, "fake stats", 10) == 0) {
        out_printf(o, "FAKE %" PRIu64 " %lu %lu %lu %lu %lu %lu\r\n", f->epoch, f->served[0],
                   f->served[1], f->moved[0], f->moved[1], f->flushes[0], f->flushes[1]);
        return;
    } else {
        out_printf(o, "CLIENT_ERROR bad fake command\r\n");
        return;
    }
    out_printf(o, "OK\r\n");
}

static bool starts_with_line(const char *buf, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len >= n && memcmp(buf, word, n) == 0;
}

/* ---- the fake's binary protocol (cocytus-proxy speaks binary to servers) ----
 * A binary request is turned into the text_req the ASCII path serves, and
 * the ASCII reply into a binary response: enough for the commands the
 * proxy forwards (get, getk, set, add, replace, append, prepend, cas,
 * delete, incr, decr without create, touch, flush, version, noop). */

/* A binary request split into its parts (harness.h has its own
 * bin_request for the client side, so the server's parser is not used). */
struct fake_bin {
    struct { uint8_t opcode; uint8_t extlen; uint32_t opaque; uint64_t cas; } hdr;
    const char *extras, *key, *value;
    size_t nkey, nvalue, total;
};

/* Splits the request at buf: false if incomplete. */
static bool fake_bin_split(const char *buf, size_t len, struct fake_bin *b)
{
    if (len < BIN_HEADER_LEN)
        return false;
    size_t body = bin_load32(buf + BIN_OFF_BODYLEN);
    if (len < BIN_HEADER_LEN + body)
        return false;
    b->hdr.opcode = (uint8_t)buf[BIN_OFF_OPCODE];
    b->hdr.extlen = (uint8_t)buf[BIN_OFF_EXTLEN];
    b->hdr.opaque = bin_load32(buf + BIN_OFF_OPAQUE);
    b->hdr.cas = bin_load64(buf + BIN_OFF_CAS);
    b->nkey = bin_load16(buf + BIN_OFF_KEYLEN);
    b->extras = buf + BIN_HEADER_LEN;
    b->key = b->extras + b->hdr.extlen;
    b->value = b->key + b->nkey;
    b->nvalue = body - b->hdr.extlen - b->nkey;
    b->total = BIN_HEADER_LEN + body;
    return true;
}

static void bin_out(struct fake_out *o, const struct fake_bin *b, uint16_t status,
                    uint64_t cas, const char *extras, uint8_t extlen, const char *key,
                    size_t nkey, const char *value, size_t nvalue)
{
    char h[BIN_HEADER_LEN];
    memset(h, 0, sizeof(h));
    h[BIN_OFF_MAGIC] = (char)BIN_MAGIC_RESPONSE;
    h[BIN_OFF_OPCODE] = (char)b->hdr.opcode;
    bin_store16(h + BIN_OFF_KEYLEN, (uint16_t)nkey);
    h[BIN_OFF_EXTLEN] = (char)extlen;
    bin_store16(h + BIN_OFF_STATUS, status);
    bin_store32(h + BIN_OFF_BODYLEN, (uint32_t)(extlen + nkey + nvalue));
    bin_store32(h + BIN_OFF_OPAQUE, b->hdr.opaque);
    bin_store64(h + BIN_OFF_CAS, cas);
    out_add(o, h, sizeof(h));
    out_add(o, extras, extlen);
    out_add(o, key, nkey);
    out_add(o, value, nvalue);
}

/* The text request a binary one stands for; false if the fake lacks it. */
static bool bin_as_text(const struct fake_bin *b, struct text_req *t)
{
    memset(t, 0, sizeof(*t));
    t->key = b->key;
    t->nkey = b->nkey;
    switch (b->hdr.opcode) {
    case BIN_OP_GET: case BIN_OP_GETK:
        t->cmd = TC_GETS;
        t->keys = b->key;
        t->nkeys_len = b->nkey;
        return true;
    case BIN_OP_SET: case BIN_OP_ADD: case BIN_OP_REPLACE:
        t->cmd = b->hdr.cas ? TC_CAS : b->hdr.opcode == BIN_OP_ADD ? TC_ADD
               : b->hdr.opcode == BIN_OP_REPLACE ? TC_REPLACE : TC_SET;
        t->flags = bin_load32(b->extras);
        t->cas = b->hdr.cas;
        t->data = b->value;
        t->vlen = (int64_t)b->nvalue;
        return true;
    case BIN_OP_APPEND: case BIN_OP_PREPEND:
        t->cmd = b->hdr.opcode == BIN_OP_APPEND ? TC_APPEND : TC_PREPEND;
        t->data = b->value;
        t->vlen = (int64_t)b->nvalue;
        return true;
    case BIN_OP_DELETE:
        t->cmd = TC_DELETE;
        return true;
    case BIN_OP_INCREMENT: case BIN_OP_DECREMENT:
        t->cmd = b->hdr.opcode == BIN_OP_INCREMENT ? TC_INCR : TC_DECR;
        t->delta = bin_load64(b->extras);
        return true;
    case BIN_OP_TOUCH:
        t->cmd = TC_TOUCH;
        return true;
    case BIN_OP_FLUSH:
        t->cmd = TC_FLUSH_ALL;
        return true;
    case BIN_OP_VERSION:
        t->cmd = TC_VERSION;
        return true;
    default:
        return false;
    }
}

/* The binary response for the ASCII reply text[0..n) to request b. */
static void bin_from_text(struct fake *f, const struct fake_bin *b, const char *text,
                          size_t n, struct fake_out *o)
{
    char extras[4];
    char num[24];
    char *end;

    if (strncmp(text, "SERVER_ERROR MOVED ", 19) == 0) {
        bin_out(o, b, BIN_STATUS_NOT_MY_VBUCKET, 0, NULL, 0, NULL, 0, text, n - 2);
        return;
    }
    if (strncmp(text, "VALUE ", 6) == 0) {
        struct fake_item *it = *fake_find(f, b->key, b->nkey);
        bin_store32(extras, it->flags);
        bool k = b->hdr.opcode == BIN_OP_GETK;
        bin_out(o, b, 0, it->cas, extras, 4, k ? b->key : NULL, k ? b->nkey : 0, it->value,
                it->nvalue);
        return;
    }
    if (strncmp(text, "END\r\n", 5) == 0 || strncmp(text, "NOT_FOUND\r\n", 11) == 0) {
        bin_out(o, b, BIN_STATUS_KEY_ENOENT, 0, NULL, 0, NULL, 0, "Not found", 9);
        return;
    }
    if (strncmp(text, "NOT_STORED\r\n", 12) == 0) {
        bin_out(o, b, BIN_STATUS_NOT_STORED, 0, NULL, 0, NULL, 0, "Not stored.", 11);
        return;
    }
    if (strncmp(text, "EXISTS\r\n", 8) == 0) {
        bin_out(o, b, BIN_STATUS_KEY_EEXISTS, 0, NULL, 0, NULL, 0, "Data exists for key.", 20);
        return;
    }
    if (strncmp(text, "VERSION ", 8) == 0) {
        bin_out(o, b, 0, 0, NULL, 0, NULL, 0, text + 8, n - 10);
        return;
    }
    if (n > 2 && text[0] >= '0' && text[0] <= '9') {
        uint64_t v = strtoull(text, &end, 10);
        bin_store64(num, v);
        struct fake_item *it = *fake_find(f, b->key, b->nkey);
        bin_out(o, b, 0, it ? it->cas : 0, NULL, 0, NULL, 0, num, 8);
        return;
    }
    if (strncmp(text, "STORED", 6) == 0 || strncmp(text, "DELETED", 7) == 0 ||
        strncmp(text, "TOUCHED", 7) == 0 || strncmp(text, "OK", 2) == 0) {
        struct fake_item *it = b->nkey ? *fake_find(f, b->key, b->nkey) : NULL;
        bin_out(o, b, 0, it ? it->cas : 0, NULL, 0, NULL, 0, NULL, 0);
        return;
    }
    bin_out(o, b, BIN_STATUS_INTERNAL_ERROR, 0, NULL, 0, NULL, 0, text, n >= 2 ? n - 2 : n);
}

/* One binary request at buf: bytes consumed, 0 if incomplete. */
static size_t fake_serve_binary(struct fake *f, struct fake_client *cl, const char *buf,
                                size_t len, struct fake_out *o)
{
    struct fake_bin b;
    struct text_req t;

    if (!fake_bin_split(buf, len, &b))
        return 0;
    if (b.hdr.opcode == BIN_OP_NOOP) {
        bin_out(o, &b, 0, 0, NULL, 0, NULL, 0, NULL, 0);
        return b.total;
    }
    if (!bin_as_text(&b, &t)) {
        bin_out(o, &b, BIN_STATUS_UNKNOWN_COMMAND, 0, NULL, 0, NULL, 0, "Unknown command", 15);
        return b.total;
    }
    struct fake_out text = { NULL, 0, 0 };
    fake_dispatch(f, cl->ep, &t, &text);
    bin_from_text(f, &b, text.p ? text.p : "", text.len, o);
    free(text.p);
    return b.total;
}

/* Serves every complete request of one client; false to close it. */
static bool fake_serve(struct fake *f, struct fake_client *cl, struct fake_out *o)
{
    size_t off = 0;
    bool keep = true;

    while (keep && off < cl->len) {
        const char *buf = cl->buf + off;
        size_t len = cl->len - off;
        if ((unsigned char)buf[0] == BIN_MAGIC_REQUEST) {
            size_t used = fake_serve_binary(f, cl, buf, len, o);
            if (used == 0)
                break;
            off += used;
            continue;
        }
        const char *nl = memchr(buf, '\n', len);
        if (nl == NULL)
            break;
        size_t line = (size_t)(nl - buf) + 1;
        if (starts_with_line(buf, len, "config get cluster")) {
            fake_config(f, o);
            off += line;
            continue;
        }
        if (starts_with_line(buf, len, "fake ")) {
            char text[128];
            snprintf(text, sizeof(text), "%.*s", (int)(line < 127 ? line : 127), buf);
            fake_control(f, text, o);
            off += line;
            keep = !f->down[cl->ep];
            continue;
        }
        struct text_req rq;
        enum text_parse_result pr = text_parse(buf, len, FAKE_BUF_MAX, &rq);
        if (pr == TP_NEED_MORE)
            break;
        if (pr == TP_CLOSE)
            return false;
        off += rq.total;
        if (pr == TP_ERROR) {
            out_printf(o, "%s\r\n", rq.error);
            continue;
        }
        if (rq.cmd == TC_QUIT)
            return false;
        fake_dispatch(f, cl->ep, &rq, o);
    }
    memmove(cl->buf, cl->buf + off, cl->len - off);
    cl->len -= off;
    return keep;
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void fake_read(struct fake *f, struct fake_client *cl)
{
    if (cl->cap - cl->len < 65536) {
        cl->cap = cl->cap ? cl->cap * 2 : 131072;
        cl->buf = realloc(cl->buf, cl->cap);
        if (cl->buf == NULL)
            _exit(3);
    }
    ssize_t r = recv(cl->fd, cl->buf + cl->len, cl->cap - cl->len, 0);
    if (r <= 0 || cl->len + (size_t)r > FAKE_BUF_MAX) {
        fake_close_client(cl);
        return;
    }
    cl->len += (size_t)r;
    struct fake_out o = { NULL, 0, 0 };
    bool keep = fake_serve(f, cl, &o);
    if (cl->fd >= 0 && o.len > 0 && !write_all(cl->fd, o.p, o.len))
        keep = false;
    free(o.p);
    if (!keep && cl->fd >= 0)
        fake_close_client(cl);
}

static void fake_accept(struct fake *f, int ep)
{
    int fd = accept(f->lfd[ep], NULL, NULL);
    if (fd < 0)
        return;
    if (f->down[ep]) {
        close(fd);                 /* a dead process: the connection goes nowhere */
        return;
    }
    for (int i = 0; i < FAKE_CLIENTS; i++) {
        if (f->cl[i].fd < 0) {
            f->cl[i].fd = fd;
            f->cl[i].ep = ep;
            return;
        }
    }
    close(fd);
}

static void fake_loop(struct fake *f)
{
    struct pollfd p[FAKE_EPS + 1 + FAKE_CLIENTS];
    int who[FAKE_EPS + 1 + FAKE_CLIENTS];

    for (;;) {
        int n = 0;
        p[n] = (struct pollfd){ .fd = f->control, .events = POLLIN };
        who[n++] = -1;
        for (int e = 0; e < FAKE_EPS; e++) {
            p[n] = (struct pollfd){ .fd = f->lfd[e], .events = POLLIN };
            who[n++] = -2 - e;
        }
        for (int i = 0; i < FAKE_CLIENTS; i++) {
            if (f->cl[i].fd >= 0) {
                p[n] = (struct pollfd){ .fd = f->cl[i].fd, .events = POLLIN };
                who[n++] = i;
            }
        }
        if (poll(p, (nfds_t)n, fake_failover_due(f, 1000)) < 0 && errno != EINTR)
            _exit(2);
        fake_failover_due(f, 1000);
        for (int k = 0; k < n; k++) {
            if (p[k].revents == 0)
                continue;
            if (who[k] == -1)
                _exit(0);                      /* the test process is gone */
            if (who[k] <= -2)
                fake_accept(f, -2 - who[k]);
            else if (f->cl[who[k]].fd == p[k].fd)
                fake_read(f, &f->cl[who[k]]);
        }
    }
}

/* Parent side. */
struct fake_handle {
    pid_t pid;
    int port[FAKE_EPS];
    int control;            /* write end of the pipe the child watches */
    char seed[64];
};

static struct fake_handle fake;

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof(a);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void start_fake(void)
{
    int lfd[FAKE_EPS], pipefd[2];

    for (int e = 0; e < FAKE_EPS; e++)
        lfd[e] = listen_loopback(&fake.port[e]);
    if (lfd[0] < 0 || lfd[1] < 0 || pipe(pipefd) != 0)
        return;
    pid_t pid = fork_tied(1);
    if (pid == 0) {
        close(pipefd[1]);
        struct fake *f = calloc(1, sizeof(*f));
        if (f == NULL)
            _exit(3);
        for (int e = 0; e < FAKE_EPS; e++) {
            f->lfd[e] = lfd[e];
            f->port[e] = fake.port[e];
        }
        for (int i = 0; i < FAKE_CLIENTS; i++)
            f->cl[i].fd = -1;
        f->control = pipefd[0];
        f->failover_ep = -1;
        fake_initial_map(f);
        signal(SIGPIPE, SIG_IGN);
        fake_loop(f);
        _exit(0);
    }
    close(pipefd[0]);
    for (int e = 0; e < FAKE_EPS; e++)
        close(lfd[e]);
    fake.pid = pid;
    fake.control = pipefd[1];
    snprintf(fake.seed, sizeof(fake.seed), "127.0.0.1:%d", fake.port[0]);
}

static void stop_fake(void)
{
    if (fake.pid <= 0)
        return;
    close(fake.control);
    kill(fake.pid, SIGTERM);
    waitpid(fake.pid, NULL, 0);
    fake.pid = 0;
}

/* Sends a control line to endpoint ep; returns the reply line. */
static void fake_cmd(int ep, const char *cmd, char *reply, size_t cap)
{
    raw_conn *rc = malloc(sizeof(*rc));
    char line[512];

    ck_assert_ptr_nonnull(rc);
    ck_assert_msg(fake.pid > 0, "the fake cluster did not start");
    ck_assert(raw_open(rc, fake.port[ep]));
    snprintf(line, sizeof(line), "%s\r\n", cmd);
    ck_assert(raw_send_str(rc, line));
    ck_assert_int_gt(raw_read_line(rc, reply, cap, REPLY_TIMEOUT_MS), 0);
    raw_close(rc);
    free(rc);
}

static void fake_ok(int ep, const char *cmd)
{
    char reply[256];
    fake_cmd(ep, cmd, reply, sizeof(reply));
    ck_assert_msg(strcmp(reply, "OK\r\n") == 0, "%s -> %s", cmd, reply);
}

struct fake_stats {
    uint64_t epoch;
    unsigned long served[FAKE_EPS], moved[FAKE_EPS], flushes[FAKE_EPS];
};

static struct fake_stats fake_get_stats(int ep)
{
    char reply[256];
    struct fake_stats s;

    fake_cmd(ep, "fake stats", reply, sizeof(reply));
    ck_assert_int_eq(sscanf(reply, "FAKE %" SCNu64 " %lu %lu %lu %lu %lu %lu", &s.epoch,
                            &s.served[0], &s.served[1], &s.moved[0], &s.moved[1],
                            &s.flushes[0], &s.flushes[1]), 7);
    return s;
}

static void reset_fake(void)
{
    fake_ok(0, "fake reset");
}

/* ------------------------------------------------------------------ */
/* Library against the fake cluster                                    */
/* ------------------------------------------------------------------ */

START_TEST(test_fake_routes_by_map)
{
    cocytus_t *c = connect_opts(fake.seed, false, COCYTUS_ROUTE_MAP);
    char ep[64];

    ck_assert_uint_eq(cocytus_epoch(c), 1);
    ck_assert_uint_eq(cocytus_endpoint_count(c), 2);
    ck_assert_int_eq(cocytus_endpoint(c, 1, ep, sizeof(ep)), 0);
    ck_assert_int_eq(atoi(strchr(ep, ':') + 1), fake.port[1]);
    ck_assert_int_eq(cocytus_endpoint(c, 2, ep, sizeof(ep)), -1);
    ck_assert_uint_eq(cocytus_slot_owner(c, 0), 0);
    ck_assert_uint_eq(cocytus_slot_owner(c, 16383), 1);

    set_keys(c, "r", NKEYS);
    check_keys(c, "r", NKEYS);
    mget_half(c, "rm");
    struct fake_stats s = fake_get_stats(0);
    ck_assert_uint_eq(s.moved[0] + s.moved[1], 0);
    ck_assert_uint_gt(s.served[0], NKEYS / 4);
    ck_assert_uint_gt(s.served[1], NKEYS / 4);

    ck_assert_int_eq(cocytus_flush_all(c, 0), COCYTUS_OK);
    s = fake_get_stats(1);
    ck_assert_uint_eq(s.flushes[0], 1);
    ck_assert_uint_eq(s.flushes[1], 1);

    cocytus_stats_t st;
    cocytus_get_stats(c, &st);
    ck_assert_uint_eq(st.redirects, 0);
    ck_assert_uint_eq(st.refreshes, 1);
    cocytus_close(c);
}
END_TEST

/* A slot range changes owner: the first request for it gets MOVED with a
 * newer epoch, the client takes the whole new map, nothing fails. */
START_TEST(test_fake_moved_refreshes_map)
{
    bool binary = false;
    cocytus_t *c = connect_opts(fake.seed, binary, COCYTUS_ROUTE_MAP);
    cocytus_stats_t st;

    set_keys(c, "m", NKEYS);
    fake_ok(0, "fake move 0 8191 1");          /* epoch 2: ep1 serves everything */
    check_keys(c, "m", NKEYS);
    cocytus_get_stats(c, &st);
    ck_assert_uint_eq(cocytus_epoch(c), 2);
    ck_assert_uint_eq(st.redirects, 1);        /* one MOVED, then the new map */
    ck_assert_uint_eq(st.refreshes, 2);
    ck_assert_uint_eq(cocytus_slot_owner(c, 0), 1);

    fake_ok(1, "fake move 4000 12000 0");      /* epoch 3 */
    mget_half(c, "mh");
    ck_assert_uint_eq(cocytus_epoch(c), 3);
    set_keys(c, "m2", NKEYS);
    check_keys(c, "m2", NKEYS);
    cocytus_get_stats(c, &st);
    ck_assert_uint_le(st.redirects, 3);
    struct fake_stats s = fake_get_stats(0);
    ck_assert_uint_le(s.moved[0] + s.moved[1], 3);
    cocytus_close(c);
}
END_TEST

/* Every key command meets a MOVED once and still succeeds. */
START_TEST(test_fake_moved_every_command)
{
    cocytus_t *c = connect_opts(fake.seed, false, COCYTUS_ROUTE_MAP);
    const char *key = "cmd:key";
    size_t nk = strlen(key);
    unsigned slot = cocytus_key_slot(key, nk);
    char move[64];
    uint64_t v;
    cocytus_item_t it;
    int to = 1 - (int)cocytus_slot_owner(c, slot);

#define MOVE_SLOT()                                                          \
    do {                                                                     \
        snprintf(move, sizeof(move), "fake move %u %u %d", slot, slot, to); \
        fake_ok(0, move);                                                    \
        to = 1 - to;                                                         \
    } while (0)

    MOVE_SLOT();
    ck_assert_int_eq(cocytus_set(c, key, nk, "5", 1, 0, 0), COCYTUS_OK);
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_add(c, key, nk, "5", 1, 0, 0), COCYTUS_NOT_STORED);
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_incr(c, key, nk, 2, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 7);
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_append(c, key, nk, "0", 1), COCYTUS_OK);
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_get(c, key, nk, &it), COCYTUS_OK);
    ck_assert_str_eq(it.value, "70");
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_cas(c, key, nk, "x", 1, 0, 0, it.cas), COCYTUS_OK);
    cocytus_item_free(&it);
    MOVE_SLOT();
    cocytus_rc tr = cocytus_touch(c, key, nk, 0);
    ck_assert_msg(tr == COCYTUS_OK, "touch: %s", cocytus_last_error(c));
    MOVE_SLOT();
    ck_assert_int_eq(cocytus_delete(c, key, nk), COCYTUS_OK);
#undef MOVE_SLOT

    cocytus_stats_t st;
    cocytus_get_stats(c, &st);
    ck_assert_uint_eq(st.redirects, 8);
    ck_assert_uint_eq(cocytus_epoch(c), 9);
    cocytus_close(c);
}
END_TEST

/* An endpoint dies and its slots move to the other: requests to it fail
 * to connect, the client fetches the map again and carries on. */
START_TEST(test_fake_endpoint_down)
{
    cocytus_t *c = connect_opts(fake.seed, false, COCYTUS_ROUTE_MAP);
    cocytus_stats_t st;

    set_keys(c, "d", NKEYS);
    fake_ok(0, "fake down 1");                 /* epoch 2: ep0 serves everything */
    check_keys(c, "d", NKEYS);
    set_keys(c, "d2", NKEYS);
    cocytus_get_stats(c, &st);
    ck_assert_uint_ge(st.conn_failures, 1);
    ck_assert_uint_eq(cocytus_epoch(c), 2);
    ck_assert_uint_eq(cocytus_slot_owner(c, 16383), 0);
    /* flush_all skips the endpoint that serves no slot any more. */
    ck_assert_int_eq(cocytus_flush_all(c, 0), COCYTUS_OK);
    struct fake_stats s = fake_get_stats(0);
    ck_assert_uint_eq(s.flushes[0], 1);
    cocytus_close(c);
}
END_TEST

/* The uncached baseline: everything goes to the seed and follows MOVED. */
START_TEST(test_fake_follow_mode)
{
    cocytus_t *c = connect_opts(fake.seed, false, COCYTUS_ROUTE_FOLLOW);
    cocytus_stats_t st;

    set_keys(c, "f", NKEYS);
    check_keys(c, "f", NKEYS);
    mget_half(c, "fm");
    cocytus_get_stats(c, &st);
    ck_assert_uint_gt(st.redirects, NKEYS / 2);
    ck_assert_uint_eq(st.refreshes, 1);
    cocytus_close(c);
}
END_TEST

/* An endpoint is killed (its connections close, new ones are dropped) and
 * the cluster hands its slots to the other one only 600 ms later: longer
 * than the old fixed budget of 8 tries.  Reads and writes of its keys wait
 * for the new map within the deadline and succeed; nothing fails. */
START_TEST(test_fake_endpoint_killed)
{
    cocytus_t *c = connect_opts(fake.seed, false, COCYTUS_ROUTE_MAP);
    cocytus_stats_t st;

    set_keys(c, "kl", NKEYS);                  /* connections to both endpoints */
    fake_ok(0, "fake down 1 600");
    int64_t t0 = mono_ms();
    check_keys(c, "kl", NKEYS);
    int64_t took = mono_ms() - t0;
    ck_assert_msg(took >= 500 && took < 2000, "reads took %" PRId64 " ms", took);
    ck_assert_uint_eq(cocytus_epoch(c), 2);
    set_keys(c, "kl2", NKEYS);
    check_keys(c, "kl2", NKEYS);
    cocytus_get_stats(c, &st);
    ck_assert_uint_ge(st.conn_failures, 1);
    ck_assert_uint_gt(st.retries, 8);
    cocytus_close(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* cocytus-proxy in front of the fake cluster                          */
/* ------------------------------------------------------------------ */

static char proxy_path[PATH_MAX + 64];

static const char *find_proxy(void)
{
    char server[PATH_MAX];
    const char *env = getenv("COCYTUS_PROXY");

    if (env != NULL && env[0] != '\0')
        return env;
    snprintf(server, sizeof(server), "%s", harness_server_path());
    snprintf(proxy_path, sizeof(proxy_path), "%s/../client/cocytus-proxy", dirname(server));
    return proxy_path;
}

/* Starts cocytus-proxy on a free port with seeds and extra options (up to
 * 4, NULL-terminated; may be NULL). */
static pid_t start_proxy_with(int *port, const char *seeds, const char *const *extra)
{
    char port_text[16];
    int fd = listen_loopback(port);   /* a free port: take its number, then let go */
    const char *argv[16];
    int n = 0;

    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(port_text, sizeof(port_text), "%d", *port);
    const char *path = find_proxy();
    argv[n++] = path;
    argv[n++] = "-p";
    argv[n++] = port_text;
    argv[n++] = "-l";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--seeds";
    argv[n++] = seeds;
    argv[n++] = "-W";
    argv[n++] = "0";
    for (int i = 0; extra != NULL && extra[i] != NULL && i < 4; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork_tied(127);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execv(path, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        raw_conn *rc = malloc(sizeof(*rc));
        bool up = raw_open(rc, *port);
        if (up)
            raw_close(rc);
        free(rc);
        if (up)
            return pid;
        ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "cocytus-proxy (%s) exited", path);
        harness_sleep_ms(50);
    }
    ck_abort_msg("cocytus-proxy did not start");
    return -1;
}

static pid_t start_proxy(int *port)
{
    return start_proxy_with(port, fake.seed, NULL);
}

static void stop_proxy(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        harness_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Moves a block of 3000 slots, alternately to each endpoint while both live. */
static void move_some_slots(int n, bool ep1_down)
{
    char move[64];
    unsigned first = (unsigned)(n * 3000) % COCYTUS_SLOTS;
    unsigned last = first + 2999 > COCYTUS_SLOTS - 1 ? COCYTUS_SLOTS - 1 : first + 2999;

    snprintf(move, sizeof(move), "fake move %u %u %d", first, last, ep1_down ? 0 : n % 2);
    fake_ok(0, move);
}

/* A plain libmemcached client, ASCII and binary, through the proxy while
 * slots move and an endpoint dies: it sees no error. */
START_TEST(test_proxy_hides_moves)
{
    bool binary = _i == 1;
    int port;
    pid_t pid = start_proxy(&port);
    memcached_st *mc = harness_client(port, binary);
    char k[64];
    int nmoves = 0;

    bool down = false;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < NKEYS; i++) {
            int nk = key_text(k, sizeof(k), "p", i);
            memcached_return_t rc = memcached_set(mc, k, (size_t)nk, k, (size_t)nk, 0, 0);
            ck_assert_msg(rc == MEMCACHED_SUCCESS, "set %s: %s", k, memcached_strerror(mc, rc));
            if (i % 100 == 50)
                move_some_slots(nmoves++, down);
        }
        if (round == 2) {
            fake_ok(0, "fake down 1 300");     /* the new map comes 300 ms later */
            down = true;
        }
        for (int i = 0; i < NKEYS; i++) {
            int nk = key_text(k, sizeof(k), "p", i);
            size_t n = 0;
            uint32_t flags;
            memcached_return_t rc;
            char *v = memcached_get(mc, k, (size_t)nk, &n, &flags, &rc);
            ck_assert_msg(rc == MEMCACHED_SUCCESS && v != NULL && n == (size_t)nk &&
                          memcmp(v, k, n) == 0, "get %s: %s", k, memcached_strerror(mc, rc));
            free(v);
        }
    }
    struct fake_stats s = fake_get_stats(0);
    ck_assert_uint_gt(s.moved[0] + s.moved[1], 0);   /* the proxy did meet MOVED */
    memcached_free(mc);
    stop_proxy(pid);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The stub: scripted maps and a black hole (runs in a child process)  */
/* ------------------------------------------------------------------ */

#define STUB_MAPS 4
#define STUB_BODY_MAX 256
#define STUB_CLIENTS 32
#define STUB_LINE_MAX 1024

/* Parent side. */
struct stub {
    pid_t pid;
    int port;
    int control;            /* write end of the pipe the child watches */
    char seed[64];
    char maps[STUB_MAPS][STUB_BODY_MAX];   /* "config get cluster" bodies */
    int nmaps;
};

/* Child side. */
struct stub_state {
    const struct stub *conf;
    int cur;                /* map served now */
    int next;               /* map to serve from switch_at; -1: none */
    int64_t switch_at;
    unsigned long swallowed;
    int fd[STUB_CLIENTS];
    size_t len[STUB_CLIENTS];
    char buf[STUB_CLIENTS][STUB_LINE_MAX];
};

/* A body naming one endpoint that owns every slot. */
static void stub_map(struct stub *st, int i, uint64_t epoch, int port)
{
    snprintf(st->maps[i], sizeof(st->maps[i]), "%" PRIu64 "\n127.0.0.1|127.0.0.1|%d\n", epoch,
             port);
    if (st->nmaps <= i)
        st->nmaps = i + 1;
}

static void stub_send(int fd, const char *p, size_t n)
{
    write_all(fd, p, n);
}

static void stub_close(struct stub_state *s, int i)
{
    close(s->fd[i]);
    s->fd[i] = -1;
    s->len[i] = 0;
}

/* Answers the complete lines of client i: "config get cluster", "version",
 * "stub after MS K" (serve map K from MS ms on), "stub count"; any other
 * request is counted and its connection closed unanswered. */
static void stub_serve(struct stub_state *s, int i)
{
    char out[STUB_BODY_MAX + 128];

    for (;;) {
        if (s->len[i] > 0 && (unsigned char)s->buf[i][0] == BIN_MAGIC_REQUEST) {
            if (s->len[i] < BIN_HEADER_LEN ||
                s->len[i] < BIN_HEADER_LEN + bin_load32(s->buf[i] + BIN_OFF_BODYLEN))
                return;
            s->swallowed++;            /* a binary request: swallowed the same way */
            stub_close(s, i);
            return;
        }
        char *nl = memchr(s->buf[i], '\n', s->len[i]);
        if (nl == NULL) {
            if (s->len[i] == sizeof(s->buf[i]))
                stub_close(s, i);
            return;
        }
        size_t line = (size_t)(nl - s->buf[i]) + 1;
        char text[STUB_LINE_MAX];
        int ms, k, n = 0;
        snprintf(text, sizeof(text), "%.*s", (int)line, s->buf[i]);
        if (strncmp(text, "config get cluster", 18) == 0) {
            const char *body = s->conf->maps[s->cur];
            n = snprintf(out, sizeof(out), "CONFIG cluster 0 %zu\r\n%s\r\nEND\r\n", strlen(body),
                         body);
        } else if (strncmp(text, "version", 7) == 0) {
            n = snprintf(out, sizeof(out), "VERSION 1.6.18-stub\r\n");
        } else if (sscanf(text, "stub after %d %d", &ms, &k) == 2 && ms >= 0 && k >= 0 &&
                   k < s->conf->nmaps) {
            s->next = k;
            s->switch_at = mono_ms() + ms;
            n = snprintf(out, sizeof(out), "OK\r\n");
        } else if (strncmp(text, "stub count", 10) == 0) {
            n = snprintf(out, sizeof(out), "COUNT %lu\r\n", s->swallowed);
        } else {
            s->swallowed++;            /* the request may have been applied: no answer */
            stub_close(s, i);
            return;
        }
        stub_send(s->fd[i], out, (size_t)n);
        memmove(s->buf[i], s->buf[i] + line, s->len[i] - line);
        s->len[i] -= line;
    }
}

/* Switches the map if due; returns the poll timeout until the switch. */
static int stub_switch_due(struct stub_state *s)
{
    if (s->next < 0)
        return 1000;
    int64_t left = s->switch_at - mono_ms();
    if (left > 0)
        return left < 1000 ? (int)left : 1000;
    s->cur = s->next;
    s->next = -1;
    return 1000;
}

static void stub_loop(struct stub_state *s, int lfd, int control)
{
    struct pollfd p[2 + STUB_CLIENTS];
    int who[2 + STUB_CLIENTS];

    for (;;) {
        int n = 0;
        p[n] = (struct pollfd){ .fd = control, .events = POLLIN };
        who[n++] = -1;
        p[n] = (struct pollfd){ .fd = lfd, .events = POLLIN };
        who[n++] = -2;
        for (int i = 0; i < STUB_CLIENTS; i++) {
            if (s->fd[i] >= 0) {
                p[n] = (struct pollfd){ .fd = s->fd[i], .events = POLLIN };
                who[n++] = i;
            }
        }
        if (poll(p, (nfds_t)n, stub_switch_due(s)) < 0 && errno != EINTR)
            _exit(2);
        stub_switch_due(s);
        for (int k = 0; k < n; k++) {
            if (p[k].revents == 0)
                continue;
            if (who[k] == -1)
                _exit(0);                      /* the test process is gone */
            if (who[k] == -2) {
                int fd = accept(lfd, NULL, NULL);
                int i = 0;
                while (fd >= 0 && i < STUB_CLIENTS && s->fd[i] >= 0)
                    i++;
                if (fd >= 0 && i < STUB_CLIENTS)
                    s->fd[i] = fd;
                else if (fd >= 0)
                    close(fd);
                continue;
            }
            int i = who[k];
            if (s->fd[i] != p[k].fd)
                continue;
            ssize_t r = recv(s->fd[i], s->buf[i] + s->len[i], sizeof(s->buf[i]) - s->len[i], 0);
            if (r <= 0) {
                stub_close(s, i);
                continue;
            }
            s->len[i] += (size_t)r;
            stub_serve(s, i);
        }
    }
}

/* Starts the stub serving map 0.  The port is chosen before the maps are
 * written (stub_listen), so a map may name the stub itself. */
static int stub_listen(struct stub *st)
{
    memset(st, 0, sizeof(*st));
    int fd = listen_loopback(&st->port);
    ck_assert_int_ge(fd, 0);
    snprintf(st->seed, sizeof(st->seed), "127.0.0.1:%d", st->port);
    return fd;
}

static void stub_start(struct stub *st, int lfd)
{
    int pipefd[2];

    ck_assert_int_gt(st->nmaps, 0);
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork_tied(1);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(pipefd[1]);
        signal(SIGPIPE, SIG_IGN);
        struct stub_state *s = calloc(1, sizeof(*s));
        if (s == NULL)
            _exit(3);
        s->conf = st;
        s->next = -1;
        for (int i = 0; i < STUB_CLIENTS; i++)
            s->fd[i] = -1;
        stub_loop(s, lfd, pipefd[0]);
        _exit(0);
    }
    close(pipefd[0]);
    close(lfd);
    st->pid = pid;
    st->control = pipefd[1];
}

static void stub_stop(struct stub *st)
{
    if (st->pid <= 0)
        return;
    close(st->control);
    kill(st->pid, SIGKILL);
    waitpid(st->pid, NULL, 0);
    st->pid = 0;
}

/* Sends one control line to the stub; returns the reply line in reply. */
static void stub_cmd(const struct stub *st, const char *cmd, char *reply, size_t cap)
{
    raw_conn *rc = malloc(sizeof(*rc));
    char line[128];

    ck_assert_ptr_nonnull(rc);
    ck_assert(raw_open(rc, st->port));
    snprintf(line, sizeof(line), "%s\r\n", cmd);
    ck_assert(raw_send_str(rc, line));
    ck_assert_int_gt(raw_read_line(rc, reply, cap, REPLY_TIMEOUT_MS), 0);
    raw_close(rc);
    free(rc);
}

static unsigned long stub_swallowed(const struct stub *st)
{
    char reply[64];
    unsigned long n = 0;

    stub_cmd(st, "stub count", reply, sizeof(reply));
    ck_assert_int_eq(sscanf(reply, "COUNT %lu", &n), 1);
    return n;
}

/* A loopback port nothing listens on: bound, read, closed. */
static int dead_port(void)
{
    int port = -1;
    int fd = listen_loopback(&port);
    ck_assert_int_ge(fd, 0);
    close(fd);
    return port;
}

static cocytus_t *connect_budget(const char *seeds, bool binary, int timeout_ms, int deadline_ms)
{
    cocytus_options_t o;
    char err[256];

    cocytus_options_init(&o);
    ck_assert_int_eq(o.deadline_ms, 2000);
    ck_assert_int_ge(o.max_attempts, 50);
    o.binary = binary;
    if (timeout_ms > 0)
        o.timeout_ms = timeout_ms;
    if (deadline_ms > 0)
        o.deadline_ms = deadline_ms;
    cocytus_t *c = cocytus_connect_with(seeds, &o, err, sizeof(err));
    ck_assert_msg(c != NULL, "connect %s: %s", seeds, err);
    return c;
}

/* The map names a dead server; 300 ms later the cluster publishes a map
 * that gives its slots to a live cocytus-server.  A set and a get made
 * meanwhile wait for it and succeed within the default deadline.  Then the
 * stub serves an older epoch: it is never taken. */
START_TEST(test_failover_map_replaced)
{
    bool binary = _i == 1;
    struct stub st;
    char reply[64];

    harness_assert_server_up(&plain);
    int lfd = stub_listen(&st);
    int dead = dead_port();
    stub_map(&st, 0, 5, dead);
    stub_map(&st, 1, 6, plain.port);
    stub_map(&st, 2, 4, dead);
    stub_start(&st, lfd);
    cocytus_t *c = connect_budget(st.seed, binary, 0, 0);
    ck_assert_uint_eq(cocytus_epoch(c), 5);

    stub_cmd(&st, "stub after 300 1", reply, sizeof(reply));
    int64_t t0 = mono_ms();
    cocytus_rc r = cocytus_set(c, "fo:k", 4, "v1", 2, 3, 0);
    int64_t took = mono_ms() - t0;
    ck_assert_msg(r == COCYTUS_OK, "set: %s (%s)", cocytus_strerror(r), cocytus_last_error(c));
    ck_assert_msg(took >= 250 && took < 2000, "set took %" PRId64 " ms", took);
    ck_assert_uint_eq(cocytus_epoch(c), 6);
    check_value(c, "fo:k", "v1");
    cocytus_stats_t stt;
    cocytus_get_stats(c, &stt);
    ck_assert_uint_ge(stt.conn_failures, 1);
    ck_assert_uint_ge(stt.retries, 1);

    /* A get that starts on the dead server too (a fresh client at epoch 5). */
    stub_cmd(&st, "stub after 0 0", reply, sizeof(reply));
    cocytus_t *c2 = connect_budget(st.seed, binary, 0, 0);
    ck_assert_uint_eq(cocytus_epoch(c2), 5);
    stub_cmd(&st, "stub after 300 1", reply, sizeof(reply));
    t0 = mono_ms();
    cocytus_item_t it;
    r = cocytus_get(c2, "fo:k", 4, &it);
    took = mono_ms() - t0;
    ck_assert_msg(r == COCYTUS_OK, "get: %s (%s)", cocytus_strerror(r), cocytus_last_error(c2));
    ck_assert_str_eq(it.value, "v1");
    ck_assert_uint_eq(it.flags, 3);
    cocytus_item_free(&it);
    ck_assert_msg(took >= 250 && took < 2000, "get took %" PRId64 " ms", took);
    cocytus_close(c2);

    /* An older epoch is refused, by a refresh and by the retries alike. */
    stub_cmd(&st, "stub after 0 2", reply, sizeof(reply));
    ck_assert_int_eq(cocytus_refresh(c), COCYTUS_UNAVAILABLE);
    ck_assert_msg(strstr(cocytus_last_error(c), "older") != NULL, "refresh: %s",
                  cocytus_last_error(c));
    ck_assert_uint_eq(cocytus_epoch(c), 6);
    ck_assert_int_eq(cocytus_set(c, "fo:k", 4, "v2", 2, 0, 0), COCYTUS_OK);
    check_value(c, "fo:k", "v2");
    ck_assert_uint_eq(cocytus_epoch(c), 6);
    cocytus_close(c);
    stub_stop(&st);
}
END_TEST

/* A server that reads a request and closes without answering: whether it
 * was applied is unknown.  add, cas, append, prepend, incr and decr are
 * reported (COCYTUS_UNAVAILABLE, "may have been applied") after exactly one
 * send; get, set, replace, delete and touch are sent again until the
 * deadline. */
START_TEST(test_lost_request_not_retried)
{
    struct stub st;
    int lfd = stub_listen(&st);
    uint64_t v;
    cocytus_item_t it;

    stub_map(&st, 0, 3, st.port);              /* the stub serves every slot */
    stub_start(&st, lfd);
    cocytus_t *c = connect_budget(st.seed, false, 0, 300);

    for (int op = 0; op < 6; op++) {
        unsigned long before = stub_swallowed(&st);
        cocytus_rc r;
        switch (op) {
        case 0:  r = cocytus_incr(c, "n", 1, 1, &v); break;
        case 1:  r = cocytus_decr(c, "n", 1, 1, &v); break;
        case 2:  r = cocytus_add(c, "n", 1, "1", 1, 0, 0); break;
        case 3:  r = cocytus_append(c, "n", 1, "1", 1); break;
        case 4:  r = cocytus_prepend(c, "n", 1, "1", 1); break;
        default: r = cocytus_cas(c, "n", 1, "1", 1, 0, 0, 12345); break;
        }
        ck_assert_msg(r == COCYTUS_UNAVAILABLE, "op %d: %s (%s)", op, cocytus_strerror(r),
                      cocytus_last_error(c));
        ck_assert_msg(strstr(cocytus_last_error(c), "may have been applied") != NULL,
                      "op %d: %s", op, cocytus_last_error(c));
        ck_assert_msg(stub_swallowed(&st) - before == 1, "op %d sent %lu times", op,
                      stub_swallowed(&st) - before);
    }
    /* arith_init is incr then add: the lost incr ends it. */
    unsigned long before = stub_swallowed(&st);
    ck_assert_int_eq(cocytus_arith_init(c, 0, "n", 1, 1, 5, 0, &v), COCYTUS_UNAVAILABLE);
    ck_assert_uint_eq(stub_swallowed(&st) - before, 1);

    for (int op = 0; op < 5; op++) {
        before = stub_swallowed(&st);
        int64_t t0 = mono_ms();
        cocytus_rc r;
        switch (op) {
        case 0:  r = cocytus_get(c, "n", 1, &it); break;
        case 1:  r = cocytus_set(c, "n", 1, "1", 1, 0, 0); break;
        case 2:  r = cocytus_replace(c, "n", 1, "1", 1, 0, 0); break;
        case 3:  r = cocytus_delete(c, "n", 1); break;
        default: r = cocytus_touch(c, "n", 1, 10); break;
        }
        int64_t took = mono_ms() - t0;
        ck_assert_msg(r == COCYTUS_UNAVAILABLE, "op %d: %s (%s)", op, cocytus_strerror(r),
                      cocytus_last_error(c));
        ck_assert_msg(strstr(cocytus_last_error(c), "gave up") != NULL, "op %d: %s", op,
                      cocytus_last_error(c));
        unsigned long sent = stub_swallowed(&st) - before;
        ck_assert_msg(sent >= 3, "op %d sent only %lu times", op, sent);
        ck_assert_msg(took >= 250 && took < 1000, "op %d took %" PRId64 " ms", op, took);
    }
    cocytus_close(c);
    stub_stop(&st);
}
END_TEST

/* Retries stop at the deadline.  Every server dead (the seed and the map's
 * endpoint refuse): a call returns after about deadline_ms, having tried
 * many times; a connection that failed before anything was sent is retried
 * for every command, incr included.  A hung server (it accepts, never
 * answers): a call returns within about deadline_ms + timeout_ms. */
START_TEST(test_deadline_dead_cluster)
{
    struct stub st;
    int lfd = stub_listen(&st);
    uint64_t v;
    cocytus_item_t it;
    cocytus_stats_t stt;

    stub_map(&st, 0, 7, dead_port());
    stub_start(&st, lfd);
    cocytus_t *c = connect_budget(st.seed, false, 1000, 400);
    stub_stop(&st);                            /* now nothing answers */

    for (int op = 0; op < 4; op++) {
        int64_t t0 = mono_ms();
        cocytus_rc r;
        const char *keys[3] = { "a", "b", "c" };
        size_t lens[3] = { 1, 1, 1 };
        struct mget_seen seen;
        memset(&seen, 0, sizeof(seen));
        switch (op) {
        case 0:  r = cocytus_set(c, "k", 1, "v", 1, 0, 0); break;
        case 1:  r = cocytus_get(c, "k", 1, &it); break;
        case 2:  r = cocytus_incr(c, "k", 1, 1, &v); break;
        default: r = cocytus_mget(c, keys, lens, 3, note_item, &seen); break;
        }
        int64_t took = mono_ms() - t0;
        ck_assert_msg(r == COCYTUS_UNAVAILABLE, "op %d: %s (%s)", op, cocytus_strerror(r),
                      cocytus_last_error(c));
        ck_assert_msg(strstr(cocytus_last_error(c), "gave up") != NULL, "op %d: %s", op,
                      cocytus_last_error(c));
        ck_assert_msg(took >= 350 && took <= 700, "op %d took %" PRId64 " ms", op, took);
    }
    cocytus_get_stats(c, &stt);
    ck_assert_uint_ge(stt.retries, 4 * 5);
    cocytus_close(c);

    /* A hung server: timeout 200 ms, deadline 500 ms. */
    int hung;
    int hfd = listen_loopback(&hung);          /* never accepted: connects, no answers */
    ck_assert_int_ge(hfd, 0);
    lfd = stub_listen(&st);
    stub_map(&st, 0, 7, hung);
    stub_start(&st, lfd);
    c = connect_budget(st.seed, false, 200, 500);
    for (int op = 0; op < 2; op++) {
        int64_t t0 = mono_ms();
        cocytus_rc r = op == 0 ? cocytus_get(c, "k", 1, &it) : cocytus_set(c, "k", 1, "v", 1, 0, 0);
        int64_t took = mono_ms() - t0;
        ck_assert_msg(r == COCYTUS_UNAVAILABLE, "hung op %d: %s (%s)", op, cocytus_strerror(r),
                      cocytus_last_error(c));
        ck_assert_msg(took >= 450 && took <= 500 + 200 + 250, "hung op %d took %" PRId64 " ms",
                      op, took);
    }
    cocytus_close(c);
    stub_stop(&st);
    close(hfd);
}
END_TEST

/* Sends SIGCONT to pid after ms, from a child process; returns the child. */
static pid_t resume_later(pid_t pid, int ms)
{
    fflush(NULL);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        harness_sleep_ms(ms);
        kill(pid, SIGCONT);
        _exit(0);
    }
    return child;
}

/* Waits until n reads back as want; n may only be old or want meanwhile. */
static void await_counter(cocytus_t *c, const char *old, const char *want)
{
    char text[24];
    cocytus_item_t it;

    snprintf(text, sizeof(text), "?");
    for (int i = 0; i < 40 && strcmp(text, want) != 0; i++) {
        if (i > 0)
            harness_sleep_ms(25);
        ck_assert_int_eq(cocytus_get(c, "n", 1, &it), COCYTUS_OK);
        snprintf(text, sizeof(text), "%s", it.value);
        cocytus_item_free(&it);
        ck_assert_msg(strcmp(text, old) == 0 || strcmp(text, want) == 0, "n is %s", text);
    }
    ck_assert_str_eq(text, want);
}

/* A real cocytus-server stopped with SIGSTOP (timeout 200 ms, deadline 500
 * ms): a get costs about deadline_ms + timeout_ms and fails.  An incr sent
 * on an open connection is never sent twice; it waits for its reply past
 * timeout_ms, up to the deadline: a server resumed after 300 ms answers it
 * (a slow server is not a failure), one stopped past the deadline gets it
 * reported as "may have been applied", and on resuming applies it once. */
START_TEST(test_deadline_stopped_server)
{
    harness_server srv;
    char seed[64];
    cocytus_item_t it;
    uint64_t v = 0;

    ck_assert(harness_server_start(&srv, NULL));
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", srv.port);
    cocytus_t *c = connect_budget(seed, false, 200, 500);
    ck_assert_int_eq(cocytus_set(c, "n", 1, "10", 2, 0, 0), COCYTUS_OK);

    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    int64_t t0 = mono_ms();
    cocytus_rc r = cocytus_get(c, "n", 1, &it);
    int64_t took = mono_ms() - t0;
    ck_assert_msg(r == COCYTUS_UNAVAILABLE, "get: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert_msg(took >= 450 && took <= 500 + 200 + 250, "get took %" PRId64 " ms", took);

    /* A connection opened while the server runs, then an incr on it while
     * the server is stopped for 300 ms: answered, once. */
    ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
    ck_assert_int_eq(cocytus_get(c, "n", 1, &it), COCYTUS_OK);
    ck_assert_str_eq(it.value, "10");
    cocytus_item_free(&it);
    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    pid_t resumer = resume_later(srv.pid, 300);
    t0 = mono_ms();
    r = cocytus_incr(c, "n", 1, 1, &v);
    took = mono_ms() - t0;
    ck_assert_int_eq(waitpid(resumer, NULL, 0), resumer);
    ck_assert_msg(r == COCYTUS_OK, "incr over a 300 ms stop: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert_uint_eq(v, 11);
    ck_assert_msg(took >= 250 && took < 500, "incr took %" PRId64 " ms", took);
    await_counter(c, "11", "11");

    /* Stopped past the deadline: reported, not sent again. */
    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    t0 = mono_ms();
    r = cocytus_incr(c, "n", 1, 1, &v);
    took = mono_ms() - t0;
    ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
    ck_assert_msg(r == COCYTUS_UNAVAILABLE, "incr: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert_msg(strstr(cocytus_last_error(c), "may have been applied") != NULL, "incr: %s",
                  cocytus_last_error(c));
    ck_assert_msg(took >= 450 && took <= 500 + 250, "incr took %" PRId64 " ms", took);

    /* The resumed server applies the buffered incr once. */
    await_counter(c, "11", "12");
    cocytus_close(c);
    harness_server_stop(&srv);
}
END_TEST

/* An incr waits on a stopped server past the deadline and is reported;
 * meanwhile the cluster gave the server's slots to another one.  The
 * failed call fetched the map before returning, so the next call goes to
 * the new owner at once, not first to the stopped server for a timeout
 * (nor, had it resumed, to a process that reads the request and exits,
 * as one declared dead does). */
START_TEST(test_lost_mutation_refreshes_map)
{
    harness_server srv;
    struct stub st;
    char reply[64];
    cocytus_item_t it;
    uint64_t v;

    harness_assert_server_up(&plain);
    ck_assert(harness_server_start(&srv, NULL));
    int lfd = stub_listen(&st);
    stub_map(&st, 0, 5, srv.port);
    stub_map(&st, 1, 6, plain.port);
    stub_start(&st, lfd);
    cocytus_t *c = connect_budget(st.seed, false, 300, 600);
    ck_assert_int_eq(cocytus_set(c, "lm", 2, "1", 1, 0, 0), COCYTUS_OK);

    ck_assert_int_eq(kill(srv.pid, SIGSTOP), 0);
    stub_cmd(&st, "stub after 200 1", reply, sizeof(reply));
    cocytus_rc r = cocytus_incr(c, "lm", 2, 1, &v);
    ck_assert_msg(r == COCYTUS_UNAVAILABLE, "incr: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert_msg(strstr(cocytus_last_error(c), "may have been applied") != NULL, "incr: %s",
                  cocytus_last_error(c));
    ck_assert_uint_eq(cocytus_epoch(c), 6);

    int64_t t0 = mono_ms();
    ck_assert_int_eq(cocytus_set(c, "lm", 2, "7", 1, 0, 0), COCYTUS_OK);
    int64_t took = mono_ms() - t0;
    ck_assert_msg(took < 250, "the set after the failed incr took %" PRId64 " ms", took);
    ck_assert_int_eq(cocytus_get(c, "lm", 2, &it), COCYTUS_OK);
    ck_assert_str_eq(it.value, "7");
    cocytus_item_free(&it);
    cocytus_close(c);
    ck_assert_int_eq(kill(srv.pid, SIGCONT), 0);
    harness_server_stop(&srv);
    stub_stop(&st);
}
END_TEST

/* cocytus-proxy in front of the black hole: a lost incr is answered with
 * an error (SERVER_ERROR in ASCII, status 0x0084 in binary) after one send,
 * and the client's connection stays usable. */
START_TEST(test_proxy_reports_lost_mutation)
{
    struct stub st;
    int lfd = stub_listen(&st);
    int port;
    char line[512];

    stub_map(&st, 0, 3, st.port);
    stub_start(&st, lfd);
    const char *extra[] = { "--deadline-ms", "300", "-T", "1", NULL };
    pid_t pid = start_proxy_with(&port, st.seed, extra);
    raw_conn *rc = malloc(sizeof(*rc));
    ck_assert_ptr_nonnull(rc);
    ck_assert(raw_open(rc, port));

    unsigned long before = stub_swallowed(&st);
    ck_assert_int_gt(raw_command(rc, "incr n 1\r\n", line, sizeof(line)), 0);
    ck_assert_msg(strncmp(line, "SERVER_ERROR ", 13) == 0 &&
                  strstr(line, "may have been applied") != NULL, "incr: %s", line);
    ck_assert_uint_eq(stub_swallowed(&st) - before, 1);
    ck_assert_int_gt(raw_command(rc, "version\r\n", line, sizeof(line)), 0);
    ck_assert_msg(strncmp(line, "VERSION ", 8) == 0, "version: %s", line);

    /* A get is retried until the deadline, then answered with an error. */
    before = stub_swallowed(&st);
    ck_assert_int_gt(raw_command(rc, "get n\r\n", line, sizeof(line)), 0);
    ck_assert_msg(strncmp(line, "SERVER_ERROR ", 13) == 0, "get: %s", line);
    ck_assert_uint_ge(stub_swallowed(&st) - before, 2);

    /* Binary incr (no create), on a binary connection: status 0x0084 with
     * the library's text. */
    raw_close(rc);
    ck_assert(raw_open(rc, port));
    char extras[20];
    memset(extras, 0, sizeof(extras));
    extras[7] = 1;                             /* delta 1 */
    memset(extras + 16, 0xff, 4);              /* expiry 0xffffffff: do not create */
    bin_request req = { .opcode = 0x05, .extras = extras, .extlen = 20, .key = "n",
                        .keylen = 1, .opaque = 77 };
    bin_response res;
    before = stub_swallowed(&st);
    ck_assert(raw_bin_send(rc, &req));
    ck_assert(raw_bin_read(rc, &res, REPLY_TIMEOUT_MS));
    ck_assert_uint_eq(res.magic, BIN_RES_MAGIC);
    ck_assert_uint_eq(res.status, 0x0084);
    ck_assert_uint_eq(res.opaque, 77);
    ck_assert_msg(strstr(res.body, "may have been applied") != NULL, "binary incr: %s",
                  res.body);
    ck_assert_uint_eq(stub_swallowed(&st) - before, 1);
    req = (bin_request){ .opcode = 0x0b, .opaque = 78 };   /* version */
    ck_assert(raw_bin_send(rc, &req));
    ck_assert(raw_bin_read(rc, &res, REPLY_TIMEOUT_MS));
    ck_assert_uint_eq(res.status, 0);
    ck_assert_uint_eq(res.opaque, 78);

    raw_close(rc);
    free(rc);
    stop_proxy(pid);
    stub_stop(&st);
}
END_TEST

/* ---- credentials: a server started with -Y ---- */

static harness_server authsrv, opensrv;     /* with -Y; without */
static char authfile_path[64];

static void start_auth_server(void)
{
    snprintf(authfile_path, sizeof(authfile_path), "/tmp/lc-auth-XXXXXX");
    int fd = mkstemp(authfile_path);
    ck_assert_int_ge(fd, 0);
    const char *pairs = "alice:s3cr:et\nbob:hunter2\n";
    ck_assert_int_eq(write(fd, pairs, strlen(pairs)), (ssize_t)strlen(pairs));
    close(fd);
    const char *args[] = { "-Y", authfile_path, NULL };
    ck_assert(harness_server_start(&authsrv, args));
    ck_assert(harness_server_start(&opensrv, NULL));
}

static void stop_auth_server(void)
{
    harness_server_stop(&authsrv);
    harness_server_stop(&opensrv);
    unlink(authfile_path);
}

static cocytus_t *connect_to_as(int port, bool binary, const char *user, const char *pass,
                                char *err, size_t errlen)
{
    cocytus_options_t o;
    char seed[64];

    cocytus_options_init(&o);
    ck_assert_ptr_null(o.username);
    ck_assert_ptr_null(o.password);
    o.binary = binary;
    o.timeout_ms = 500;
    o.deadline_ms = 600;
    o.username = user;
    o.password = pass;
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", port);
    return cocytus_connect_with(seed, &o, err, errlen);
}

static cocytus_t *connect_as(bool binary, const char *user, const char *pass, char *err,
                             size_t errlen)
{
    return connect_to_as(authsrv.port, binary, user, pass, err, errlen);
}

/* A -Y server: the library authenticates the map fetch (ASCII set) and
 * every connection (the ASCII set, or SASL PLAIN in binary); every command
 * kind then works.  No credentials, a wrong password or a half pair fail
 * at connect with a text that says so. */
START_TEST(test_auth_credentials)
{
    bool binary = _i == 1;
    char err[256], user[16], pass[16];
    cocytus_item_t it;
    uint64_t v = 0;

    harness_assert_server_up(&authsrv);
    ck_assert_ptr_null(connect_as(binary, NULL, NULL, err, sizeof(err)));
    ck_assert_msg(strstr(err, "unauthenticated") != NULL, "no credentials: %s", err);
    ck_assert_ptr_null(connect_as(binary, "alice", "wrong", err, sizeof(err)));
    ck_assert_msg(strstr(err, "refused the credentials") != NULL &&
                  strstr(err, "authentication failure") != NULL, "wrong password: %s", err);
    ck_assert_ptr_null(connect_as(binary, "alice", NULL, err, sizeof(err)));
    ck_assert_msg(strstr(err, "go together") != NULL, "half a pair: %s", err);
    ck_assert_ptr_null(connect_as(binary, "al ice", "x", err, sizeof(err)));
    ck_assert_msg(strstr(err, "spaces") != NULL, "a space: %s", err);

    /* The options' strings are copied: the caller's may change. */
    snprintf(user, sizeof(user), "alice");
    snprintf(pass, sizeof(pass), "s3cr:et");
    cocytus_t *c = connect_as(binary, user, pass, err, sizeof(err));
    ck_assert_msg(c != NULL, "alice: %s", err);
    memset(user, 'x', sizeof(user) - 1);
    memset(pass, 'x', sizeof(pass) - 1);
    ck_assert_int_eq(cocytus_set(c, "au:1", 4, "7", 1, 5, 0), COCYTUS_OK);
    check_value(c, "au:1", "7");
    ck_assert_int_eq(cocytus_incr(c, "au:1", 4, 3, &v), COCYTUS_OK);
    ck_assert_uint_eq(v, 10);
    ck_assert_int_eq(cocytus_append(c, "au:1", 4, "x", 1), COCYTUS_OK);
    check_value(c, "au:1", "10x");
    ck_assert_int_eq(cocytus_touch(c, "au:1", 4, 100), COCYTUS_OK);
    ck_assert_int_eq(cocytus_add(c, "au:2", 4, "au:2", 4, 0, 0), COCYTUS_OK);
    const char *keys[2] = { "au:2", "au:3" };
    size_t lens[2] = { 4, 4 };
    struct mget_seen seen;
    memset(&seen, 0, sizeof(seen));
    ck_assert_int_eq(cocytus_mget(c, keys, lens, 2, note_item, &seen), COCYTUS_OK);
    ck_assert_int_eq(seen.count, 1);
    ck_assert_int_eq(seen.bad, 0);
    ck_assert_int_eq(cocytus_delete(c, "au:1", 4), COCYTUS_OK);
    ck_assert_int_eq(cocytus_get(c, "au:1", 4, &it), COCYTUS_NOT_FOUND);
    ck_assert_int_eq(cocytus_refresh(c), COCYTUS_OK);
    ck_assert_int_eq(cocytus_flush_all(c, 0), COCYTUS_OK);
    ck_assert_int_eq(cocytus_get(c, "au:2", 4, &it), COCYTUS_NOT_FOUND);

    /* The other pair of the file works too, on its own connections. */
    cocytus_t *c2 = connect_as(binary, "bob", "hunter2", err, sizeof(err));
    ck_assert_msg(c2 != NULL, "bob: %s", err);
    ck_assert_int_eq(cocytus_set(c2, "au:4", 4, "b", 1, 0, 0), COCYTUS_OK);
    cocytus_close(c2);
    check_value(c, "au:4", "b");
    cocytus_close(c);
}
END_TEST

/* Credentials go only to a server that asks for them: a server without
 * -Y serves a client that has them, and never sees them (in ASCII the
 * authentication set would be stored as the item "auth", password and
 * all; in binary the SASL exchange is unknown to it). */
START_TEST(test_auth_not_sent_unasked)
{
    bool binary = _i == 1;
    char err[256];
    cocytus_item_t it;

    harness_assert_server_up(&opensrv);
    cocytus_t *c = connect_to_as(opensrv.port, binary, "alice", "s3cr:et", err, sizeof(err));
    ck_assert_msg(c != NULL, "connect: %s", err);
    ck_assert_int_eq(cocytus_set(c, "op:1", 4, "v", 1, 0, 0), COCYTUS_OK);
    check_value(c, "op:1", "v");
    cocytus_rc r = cocytus_get(c, "auth", 4, &it);
    ck_assert_msg(r == COCYTUS_NOT_FOUND, "the server stored 'auth': %s",
                  r == COCYTUS_OK ? it.value : cocytus_strerror(r));
    cocytus_close(c);
}
END_TEST

/* A wrong pair for the server a key lives on, when the map came from a
 * server that did not ask (the stub): the connection's authentication
 * fails (the ASCII set, or SASL PLAIN in binary), the call reports it. */
START_TEST(test_auth_refused_on_connection)
{
    bool binary = _i == 1;
    struct stub st;
    char err[256];

    harness_assert_server_up(&authsrv);
    int lfd = stub_listen(&st);
    stub_map(&st, 0, 5, authsrv.port);
    stub_start(&st, lfd);
    cocytus_options_t o;
    cocytus_options_init(&o);
    o.binary = binary;
    o.timeout_ms = 300;
    o.deadline_ms = 400;
    o.username = "alice";
    o.password = "wrong";
    cocytus_t *c = cocytus_connect_with(st.seed, &o, err, sizeof(err));
    ck_assert_msg(c != NULL, "connect through the stub: %s", err);
    cocytus_rc r = cocytus_set(c, "rf:1", 4, "v", 1, 0, 0);
    ck_assert_msg(r == COCYTUS_UNAVAILABLE, "set: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert_msg(strcasestr(cocytus_last_error(c), "auth") != NULL, "set: %s",
                  cocytus_last_error(c));
    cocytus_close(c);
    stub_stop(&st);
}
END_TEST

/* A scripted -Y server (a child process, one client at a time): a
 * connection must authenticate with the ASCII set of "alice s3cr:et"
 * before anything else, as a -Y server wants; "version" and "config get
 * cluster" (a map naming the server itself) are answered once it has.
 * The first get ("get" or "gets") is answered with a MOVED to the server
 * itself, after which libmemcached closes its socket and, on the retry,
 * connects again by itself; later gets of "ra:1" find it (its value its
 * name).  The first data set it is sent is answered "CLIENT_ERROR
 * unauthenticated" on an authenticated connection: what the library sees
 * when libmemcached
 * has connected again by itself (a socket it closed, say after a timed-out
 * read) and sent the request on a connection new to the server.  Replies
 * "AUTHS <n> REFUSED <m>" to "count" (m: the gets and sets it refused),
 * which needs no authentication.  Each connection is served by a child
 * of its own; the counts are shared (mmap). */
struct reauth_counts {
    int auths;
    int refused;             /* gets and sets answered "unauthenticated" */
    bool refused_once;
    bool moved_once;
};

static void reauth_serve_conn(int fd, int port, struct reauth_counts *k)
{
    bool authed = false;
    char buf[4096];
    size_t len = 0;
    for (;;) {
        char *nl = memchr(buf, '\n', len);
        if (nl == NULL) {
            ssize_t r = len < sizeof(buf) ? recv(fd, buf + len, sizeof(buf) - len, 0) : 0;
            if (r <= 0)
                break;
            len += (size_t)r;
            continue;
        }
        size_t line = (size_t)(nl - buf) + 1, need = line;
        char key[64], out[256];
        int n = 0, bytes = 0;
        if (sscanf(buf, "set %63s %*u %*d %d", key, &bytes) == 2 && bytes >= 0 &&
            bytes < 1024) {
            need = line + (size_t)bytes + 2;
            if (len < need) {
                ssize_t r = recv(fd, buf + len, sizeof(buf) - len, 0);
                if (r <= 0)
                    break;
                len += (size_t)r;
                continue;
            }
            if (!authed && bytes == 13 && memcmp(buf + line, "alice s3cr:et", 13) == 0) {
                authed = true;
                __atomic_add_fetch(&k->auths, 1, __ATOMIC_SEQ_CST);
                n = snprintf(out, sizeof(out), "STORED\r\n");
            } else if (!authed || !k->refused_once) {
                k->refused_once = k->refused_once || authed;
                __atomic_add_fetch(&k->refused, 1, __ATOMIC_SEQ_CST);
                n = snprintf(out, sizeof(out), "CLIENT_ERROR unauthenticated\r\n");
            } else {
                n = snprintf(out, sizeof(out), "STORED\r\n");
            }
        } else if (strncmp(buf, "count", 5) == 0) {
            n = snprintf(out, sizeof(out), "AUTHS %d REFUSED %d\r\n",
                         __atomic_load_n(&k->auths, __ATOMIC_SEQ_CST),
                         __atomic_load_n(&k->refused, __ATOMIC_SEQ_CST));
        } else if (!authed) {
            if (strncmp(buf, "get", 3) == 0)
                __atomic_add_fetch(&k->refused, 1, __ATOMIC_SEQ_CST);
            n = snprintf(out, sizeof(out), "CLIENT_ERROR unauthenticated\r\n");
        } else if (strncmp(buf, "get ", 4) == 0 || strncmp(buf, "gets ", 5) == 0) {
            bool cas = buf[3] == 's';
            const char *keys = buf + (cas ? 5 : 4);
            if (!k->moved_once) {
                k->moved_once = true;
                n = snprintf(out, sizeof(out), "SERVER_ERROR MOVED 0 1 127.0.0.1:%d\r\n", port);
            } else if (strncmp(keys, "ra:1\r\n", 6) == 0) {
                n = snprintf(out, sizeof(out), "VALUE ra:1 0 4%s\r\nra:1\r\nEND\r\n",
                             cas ? " 7" : "");
            } else {
                n = snprintf(out, sizeof(out), "END\r\n");
            }
        } else if (strncmp(buf, "version", 7) == 0) {
            n = snprintf(out, sizeof(out), "VERSION 1.6.18-reauth\r\n");
        } else if (strncmp(buf, "config get cluster", 18) == 0) {
            char body[96];
            snprintf(body, sizeof(body), "1\n127.0.0.1|127.0.0.1|%d\n", port);
            n = snprintf(out, sizeof(out), "CONFIG cluster 0 %zu\r\n%s\r\nEND\r\n",
                         strlen(body), body);
        } else {
            n = snprintf(out, sizeof(out), "ERROR\r\n");
        }
        write_all(fd, out, (size_t)n);
        memmove(buf, buf + need, len - need);
        len -= need;
    }
    close(fd);
}

static void reauth_serve(int lfd, int port, struct reauth_counts *k)
{
    signal(SIGCHLD, SIG_IGN);          /* no zombies */
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            _exit(2);
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            reauth_serve_conn(fd, port, k);
            _exit(0);
        }
        close(fd);
    }
}

/* The library opens a handle to a -Y server with the authentication set.
 * A request refused "CLIENT_ERROR unauthenticated" later (libmemcached
 * connected again by itself) was reported as the call's failure, and every
 * later request on that handle failed the same way: a load through a
 * node's kill once saw 11,000 such errors (auth_cluster.sh).  Nothing of a
 * refused request ran, so the library opens the handle again, with the
 * credentials, and sends the request again. */
START_TEST(test_auth_after_reconnect)
{
    int port = 0;
    int lfd = listen_loopback(&port);
    ck_assert_int_ge(lfd, 0);
    struct reauth_counts *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(k != MAP_FAILED);
    memset(k, 0, sizeof(*k));
    pid_t pid = fork_tied(1);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        reauth_serve(lfd, port, k);
        _exit(0);
    }
    close(lfd);
    char err[256];
    cocytus_t *c = connect_to_as(port, false, "alice", "s3cr:et", err, sizeof(err));
    ck_assert_msg(c != NULL, "alice: %s", err);
    /* A MOVED to a get: libmemcached closes its socket, and would send
     * the get again on a connection it makes by itself, which the server
     * refuses (what happened in the CI run); the library opens the handle
     * again, authenticated, before it follows the MOVED. */
    cocytus_item_t it;
    cocytus_rc r = cocytus_get(c, "ra:1", 4, &it);
    ck_assert_msg(r == COCYTUS_OK, "a get after a MOVED: %s (%s)", cocytus_strerror(r),
                  cocytus_last_error(c));
    ck_assert(it.nvalue == 4 && memcmp(it.value, "ra:1", 4) == 0);
    cocytus_item_free(&it);
    r = cocytus_set(c, "ra:1", 4, "v1", 2, 0, 0);
    ck_assert_msg(r == COCYTUS_OK, "a set refused as unauthenticated on a handle that had "
                  "authenticated: %s (%s)", cocytus_strerror(r), cocytus_last_error(c));
    ck_assert_int_eq(cocytus_set(c, "ra:2", 4, "v2", 2, 0, 0), COCYTUS_OK);
    cocytus_close(c);

    /* The map fetch's connection, the handle, and the handle opened again
     * after the MOVED and after the refused set; the set the server
     * refuses once on purpose is the only request refused. */
    raw_conn *rc = malloc(sizeof(*rc));
    char line[64];
    ck_assert_ptr_nonnull(rc);
    ck_assert(raw_open(rc, port));
    ck_assert(raw_send_str(rc, "count\r\n"));
    ck_assert_int_gt(raw_read_line(rc, line, sizeof(line), REPLY_TIMEOUT_MS), 0);
    raw_close(rc);
    free(rc);
    ck_assert_msg(strcmp(line, "AUTHS 4 REFUSED 1\r\n") == 0, "authentications: %s", line);
    kill(pid, SIGKILL);                 /* its connections' children die with it */
    waitpid(pid, NULL, 0);
    munmap(k, sizeof(*k));
}
END_TEST

/* ------------------------------------------------------------------ */
/* Suites                                                              */
/* ------------------------------------------------------------------ */

static Suite *libcocytus_suite(void)
{
    Suite *s = suite_create("libcocytus");

    TCase *tc = tcase_create("parsers");
    tcase_add_test(tc, test_hash_matches_libhashkit_and_server);
    tcase_add_test(tc, test_config_parse_map);
    tcase_add_test(tc, test_config_parse_rejects);
    tcase_add_test(tc, test_config_parse_server_encoding);
    tcase_add_test(tc, test_moved_and_seeds);
    suite_add_tcase(s, tc);

    tc = tcase_create("plain");
    tcase_add_unchecked_fixture(tc, start_plain, stop_plain);
    tcase_add_loop_test(tc, test_plain_commands, 0, 2);
    tcase_add_loop_test(tc, test_plain_limits, 0, 2);
    tcase_add_loop_test(tc, test_plain_mget, 0, 2);
    tcase_add_test(tc, test_connect_failures);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake-cluster");
    tcase_add_unchecked_fixture(tc, start_fake, stop_fake);
    tcase_add_checked_fixture(tc, reset_fake, NULL);
    tcase_add_test(tc, test_fake_routes_by_map);
    tcase_add_test(tc, test_fake_moved_refreshes_map);
    tcase_add_test(tc, test_fake_moved_every_command);
    tcase_add_test(tc, test_fake_endpoint_down);
    tcase_add_test(tc, test_fake_endpoint_killed);
    tcase_add_test(tc, test_fake_follow_mode);
    tcase_add_loop_test(tc, test_proxy_hides_moves, 0, 2);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("auth");
    tcase_add_unchecked_fixture(tc, start_auth_server, stop_auth_server);
    tcase_add_loop_test(tc, test_auth_credentials, 0, 2);
    tcase_add_loop_test(tc, test_auth_not_sent_unasked, 0, 2);
    tcase_add_loop_test(tc, test_auth_refused_on_connection, 0, 2);
    tcase_add_test(tc, test_auth_after_reconnect);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("failures");
    tcase_add_unchecked_fixture(tc, start_plain, stop_plain);
    tcase_add_loop_test(tc, test_failover_map_replaced, 0, 2);
    tcase_add_test(tc, test_lost_request_not_retried);
    tcase_add_test(tc, test_deadline_dead_cluster);
    tcase_add_test(tc, test_deadline_stopped_server);
    tcase_add_test(tc, test_lost_mutation_refreshes_map);
    tcase_add_test(tc, test_proxy_reports_lost_mutation);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(libcocytus_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
