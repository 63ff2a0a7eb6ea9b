/* test_slotmap.c - the slot map (repl/slotmap.c): the key -> slot hash
 * pinned by test vectors and against libhashkit, placement of slots over a
 * cluster's serving processes, what adding a group moves, and the
 * `config get cluster` text: exact form, round trip, malformed input. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libhashkit-1.0/hashkit.h>

#include "slotmap.h"

static char err[512];

/* ---- helpers ---- */

/* A cluster of `nodes` nodes (10.0.0.1, 10.0.0.2, ...) with this scheme line. */
static void load_cluster(int nodes, const char *scheme, struct cluster *c)
{
    char path[] = "/tmp/test_slotmap.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "cluster t\nsecret s\nscheme %s\nbase_port 30000\n", scheme);
    for (int i = 0; i < nodes; i++)
        fprintf(f, "node %d 10.0.0.%d\n", i, i + 1);
    fclose(f);
    int rc = cluster_load(path, c, err, sizeof(err));
    unlink(path);
    ck_assert_msg(rc == 0, "cluster_load: %s", err);
}

static void build_map(int nodes, const char *scheme, struct slotmap *m)
{
    struct cluster c;
    load_cluster(nodes, scheme, &c);
    int rc = slotmap_build(m, &c, 1, err, sizeof(err));
    ck_assert_msg(rc == 0, "slotmap_build: %s", err);
    cluster_free(&c);
}

static void set_endpoint(struct slotmap_endpoint *e, const char *host, int port)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->host, sizeof(e->host), "%s", host);
    e->port = port;
    e->group = -1;
    e->index = -1;
}

/* Two endpoints, slots 0-8191 on the first, the rest on the second. */
static void two_endpoint_map(struct slotmap *m)
{
    memset(m, 0, sizeof(*m));
    m->epoch = 7;
    m->nendpoints = 2;
    m->endpoints = calloc(2, sizeof(*m->endpoints));
    ck_assert_ptr_nonnull(m->endpoints);
    set_endpoint(&m->endpoints[0], "cache-a.example", 11211);
    set_endpoint(&m->endpoints[1], "10.0.0.2", 11212);
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        m->slot[s] = s < 8192 ? 0 : 1;
}

static void assert_same_map(const struct slotmap *a, const struct slotmap *b)
{
    ck_assert_uint_eq(a->epoch, b->epoch);
    ck_assert_int_eq(a->nendpoints, b->nendpoints);
    for (int i = 0; i < a->nendpoints; i++) {
        ck_assert_str_eq(a->endpoints[i].host, b->endpoints[i].host);
        ck_assert_int_eq(a->endpoints[i].port, b->endpoints[i].port);
    }
    ck_assert_mem_eq(a->slot, b->slot, sizeof(a->slot));
}

static int decode_text(const char *text, struct slotmap *m)
{
    err[0] = '\0';
    return slotmap_decode(m, text, strlen(text), err, sizeof(err));
}

/* ---- key -> slot ---- */

struct vector {
    const char *key;
    uint32_t hash;
};

/* Values of libhashkit's hashkit_one_at_a_time (x86, signed char). */
static const struct vector vectors[] = {
    { "", 0u },
    { "a", 3392050242u },
    { "foo", 596015325u },
    { "key", 3917505287u },
    { "hello world", 1045060183u },
    { "user:1000", 3043211087u },
    { "\xc3\xa9t\xc3\xa9", 2144029493u },
    { "\xff\x80\x7f", 3725600580u },
    { "0123456789abcdefghijklmnopqrstuvwxyz", 4238473396u },
};

START_TEST(test_hash_vectors)
{
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        const struct vector *v = &vectors[i];
        size_t n = strlen(v->key);
        ck_assert_uint_eq(slotmap_hash(v->key, n), v->hash);
        ck_assert_uint_eq(slotmap_slot(v->key, n), v->hash & 16383);
    }
    ck_assert_uint_eq(slotmap_slot("foo", 3), 14557);
}
END_TEST

START_TEST(test_hash_matches_libhashkit)
{
    unsigned seed = 12345;
    char key[300];
    for (int i = 0; i < 100000; i++) {
        size_t n = (size_t)(rand_r(&seed) % 251);
        for (size_t j = 0; j < n; j++)
            key[j] = (char)(rand_r(&seed) & 0xff);
        ck_assert_uint_eq(slotmap_hash(key, n), libhashkit_one_at_a_time(key, n));
    }
    hashkit_st hk;
    ck_assert_ptr_nonnull(hashkit_create(&hk));
    ck_assert_uint_eq(hashkit_digest(&hk, "user:1000", 9), slotmap_hash("user:1000", 9));
    hashkit_free(&hk);
}
END_TEST

/* ---- placement ---- */

START_TEST(test_build_serving_processes)
{
    struct slotmap m;
    build_map(5, "rs 3 5", &m);
    ck_assert_int_eq(m.nendpoints, 15);   /* 5 groups x 3 data processes */
    for (int i = 0; i < m.nendpoints; i++) {
        const struct slotmap_endpoint *e = &m.endpoints[i];
        ck_assert_int_eq(e->role, ROLE_DATA);
        ck_assert_int_eq(e->group, i / 3);
        ck_assert_int_eq(e->index, i % 3);
        /* group g's process p is on node g+p, port base + 2 * (5g + p) */
        char host[32];
        snprintf(host, sizeof(host), "10.0.0.%d", (e->group + e->index) % 5 + 1);
        ck_assert_str_eq(e->host, host);
        ck_assert_int_eq(e->port, 30000 + 2 * (5 * e->group + e->index));
    }
    ck_assert_int_eq(slotmap_find(&m, "10.0.0.2", 30002), 1);
    ck_assert_int_eq(slotmap_find(&m, "10.0.0.2", 30004), -1);
    slotmap_free(&m);

    build_map(3, "pbr 2", &m);
    ck_assert_int_eq(m.nendpoints, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(m.endpoints[i].role, ROLE_PRIMARY);
    slotmap_free(&m);

    build_map(1, "rs 3 5", &m);   /* fewer nodes than a group: one group */
    ck_assert_int_eq(m.nendpoints, 3);
    slotmap_free(&m);
}
END_TEST

START_TEST(test_placement_covers_and_balances)
{
    static const char *schemes[] = { "plain", "rs 3 5", "pbr 1" };
    for (size_t k = 0; k < 3; k++) {
        struct slotmap m, again;
        build_map(5, schemes[k], &m);
        unsigned count[64] = { 0 };
        for (unsigned s = 0; s < SLOTMAP_SLOTS; s++) {
            ck_assert_int_lt(m.slot[s], m.nendpoints);
            count[m.slot[s]]++;
        }
        double fair = (double)SLOTMAP_SLOTS / m.nendpoints;
        for (int e = 0; e < m.nendpoints; e++)
            ck_assert_msg(count[e] > 0.75 * fair && count[e] < 1.25 * fair,
                          "%s: endpoint %d has %u slots (fair %.0f)", schemes[k], e,
                          count[e], fair);
        build_map(5, schemes[k], &again);
        ck_assert_mem_eq(m.slot, again.slot, sizeof(m.slot));
        slotmap_free(&m);
        slotmap_free(&again);
    }
}
END_TEST

/* 5 groups -> 6 groups: about 1/6 of the slots move, all to the new group. */
static void check_add_group(const char *scheme)
{
    struct slotmap five, six;
    build_map(5, scheme, &five);
    build_map(6, scheme, &six);
    unsigned moved = slotmap_moved(&five, &six);
    double share = (double)moved / SLOTMAP_SLOTS;
    ck_assert_msg(share > 0.10 && share < 0.25, "%s: %.3f of the slots moved", scheme, share);
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        if (!slotmap_endpoint_same(slotmap_owner(&five, s), slotmap_owner(&six, s)))
            ck_assert_int_eq(slotmap_owner(&six, s)->group, 5);
    ck_assert_uint_eq(slotmap_moved(&five, &five), 0);
    slotmap_free(&five);
    slotmap_free(&six);
}

START_TEST(test_adding_a_group_moves_a_sixth)
{
    check_add_group("plain");
    check_add_group("rs 3 5");
    check_add_group("pbr 2");
}
END_TEST

START_TEST(test_moved_text)
{
    struct slotmap m;
    two_endpoint_map(&m);
    char buf[SLOTMAP_MOVED_MAX];
    size_t n = slotmap_moved_text(&m, 9000, buf, sizeof(buf));
    ck_assert_str_eq(buf, "9000 7 10.0.0.2:11212");
    ck_assert_uint_eq(n, strlen(buf));
    slotmap_moved_text(&m, 0, buf, sizeof(buf));
    ck_assert_str_eq(buf, "0 7 cache-a.example:11211");
    slotmap_free(&m);
}
END_TEST

/* ---- text form ---- */

static const char two_endpoint_text[] =
    "7\n"
    "cache-a.example||11211 10.0.0.2|10.0.0.2|11212\n"
    "0-8191:0 8192-16383:1\n";

START_TEST(test_encode_exact)
{
    struct slotmap m;
    two_endpoint_map(&m);
    size_t len;
    char *body = slotmap_encode(&m, &len);
    ck_assert_ptr_nonnull(body);
    ck_assert_str_eq(body, two_endpoint_text);
    ck_assert_uint_eq(len, strlen(two_endpoint_text));
    free(body);

    char *reply = slotmap_config_reply(&m, &len);
    ck_assert_ptr_nonnull(reply);
    char want[256];
    snprintf(want, sizeof(want), "CONFIG cluster 0 %zu\r\n%s\r\nEND\r\n",
             strlen(two_endpoint_text), two_endpoint_text);
    ck_assert_str_eq(reply, want);
    ck_assert_uint_eq(len, strlen(want));
    free(reply);
    slotmap_free(&m);
}
END_TEST

START_TEST(test_decode_exact)
{
    struct slotmap m;
    ck_assert_msg(decode_text(two_endpoint_text, &m) == 0, "decode: %s", err);
    struct slotmap want;
    two_endpoint_map(&want);
    assert_same_map(&m, &want);
    ck_assert_int_eq(m.endpoints[0].group, -1);
    ck_assert_int_eq(m.endpoints[0].index, -1);
    slotmap_free(&m);
    slotmap_free(&want);

    /* A host given only as ip; one range; adjacent ranges of one endpoint. */
    ck_assert_msg(decode_text("0\n|127.0.0.1|1\n0-16383:0\n", &m) == 0, "decode: %s", err);
    ck_assert_str_eq(m.endpoints[0].host, "127.0.0.1");
    ck_assert_int_eq(m.endpoints[0].port, 1);
    slotmap_free(&m);
    ck_assert_msg(decode_text("18446744073709551615\nh||65535\n0-0:0 1-16383:0\n", &m) == 0,
                  "decode: %s", err);
    ck_assert_uint_eq(m.epoch, UINT64_MAX);
    slotmap_free(&m);
}
END_TEST

START_TEST(test_round_trip)
{
    static const char *schemes[] = { "plain", "rs 3 5", "pbr 2" };
    for (size_t k = 0; k < 3; k++) {
        struct slotmap m, back;
        build_map(k == 1 ? 7 : 4, schemes[k], &m);
        m.epoch = 123456789012345ull;
        size_t len;
        char *body = slotmap_encode(&m, &len);
        ck_assert_ptr_nonnull(body);
        ck_assert_msg(slotmap_decode(&back, body, len, err, sizeof(err)) == 0, "%s", err);
        assert_same_map(&m, &back);
        slotmap_free(&back);
        free(body);

        char *reply = slotmap_config_reply(&m, &len);
        ck_assert_ptr_nonnull(reply);
        size_t used = 0;
        /* every proper prefix asks for more */
        for (size_t cut = 0; cut < len; cut += 1 + cut / 8)
            ck_assert_int_eq(slotmap_parse_config_reply(&back, reply, cut, &used, err,
                                                        sizeof(err)), 1);
        ck_assert_msg(slotmap_parse_config_reply(&back, reply, len, &used, err,
                                                 sizeof(err)) == 0, "%s", err);
        ck_assert_uint_eq(used, len);
        assert_same_map(&m, &back);
        slotmap_free(&back);
        free(reply);
        slotmap_free(&m);
    }
}
END_TEST

static const char *const malformed[] = {
    "",                                            /* nothing */
    "7\n",                                         /* lines 2, 3 missing */
    "7\nh||1\n",                                   /* line 3 missing */
    "7\nh||1\n0-16383:0",                          /* line 3 not terminated */
    "7\nh||1\n0-16383:0\nextra\n",                 /* a fourth line */
    "x\nh||1\n0-16383:0\n",                        /* epoch not a number */
    "-1\nh||1\n0-16383:0\n",
    "18446744073709551616\nh||1\n0-16383:0\n",     /* epoch beyond 64 bits */
    "\nh||1\n0-16383:0\n",                         /* empty epoch */
    "7\n\n0-16383:0\n",                            /* no endpoint */
    "7\nh|1\n0-16383:0\n",                         /* one bar */
    "7\nh|||1\n0-16383:0\n",                       /* three bars */
    "7\nh||0\n0-16383:0\n",                        /* port 0 */
    "7\nh||65536\n0-16383:0\n",                    /* port too big */
    "7\nh||\n0-16383:0\n",                         /* no port */
    "7\n||1\n0-16383:0\n",                         /* no host nor ip */
    "7\nh||1  g||2\n0-16383:0\n",                  /* double space */
    "7\nh||1 \n0-16383:0\n",                       /* trailing space */
    "7\nh||1\n\n",                                 /* no range */
    "7\nh||1\n0-100:0\n",                          /* slots not covered */
    "7\nh||1\n0-100:0 102-16383:0\n",              /* gap */
    "7\nh||1\n0-100:0 100-16383:0\n",              /* overlap */
    "7\nh||1\n1-16383:0\n",                        /* does not start at 0 */
    "7\nh||1\n0-16384:0\n",                        /* beyond the last slot */
    "7\nh||1\n0-16383:0 16384-16384:0\n",          /* range after the end */
    "7\nh||1\n0-16383:1\n",                        /* no endpoint 1 */
    "7\nh||1\n0-16383\n",                          /* no index */
    "7\nh||1\n0:0\n",                              /* no dash */
    "7\nh||1\n10-5:0 \n",                          /* reversed */
    "7\nh||1\n0-16383:0 \n",                       /* trailing space */
    "7\nh||1\n0-16383:-0\n",                       /* sign */
    "7\nh||1\n0-16383:0x\n",                       /* junk */
};

START_TEST(test_malformed_rejected)
{
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
        struct slotmap m;
        int rc = decode_text(malformed[i], &m);
        ck_assert_msg(rc == -1, "accepted malformed map %zu: '%s'", i, malformed[i]);
        ck_assert_msg(err[0] != '\0', "no message for malformed map %zu", i);
        ck_assert_ptr_null(m.endpoints);
    }
    /* A host longer than the limit. */
    char text[512];
    snprintf(text, sizeof(text), "7\n%0*d||1\n0-16383:0\n", SLOTMAP_HOST_MAX, 0);
    struct slotmap m;
    ck_assert_int_eq(decode_text(text, &m), -1);
}
END_TEST

/* Found by test/fuzz/fuzz_control: a host holding a NUL byte was accepted
 * and cut short at the NUL ("o" here; "" for a name starting with NUL), so
 * the map no longer encoded to what was decoded.  Control bytes in a host
 * are refused too (they would end up in MOVED lines). */
START_TEST(test_host_with_control_bytes_rejected)
{
    static const char fuzz_input[] =
        "7\n127.0.0.1|127.0&0.1|11211 o\0\0\0\0\0\0\0&mple||11311\n"
        "0-4999:0 5000-11999:1 12000-16383:0\n";
    struct slotmap m;
    ck_assert_int_eq(slotmap_decode(&m, fuzz_input, sizeof(fuzz_input) - 1, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "control byte"));
    ck_assert_ptr_null(m.endpoints);
    static const struct {
        const char *p;
        size_t n;
    } hosts[] = { { "\0h||1", 5 }, { "|\0|1", 4 }, { "h\0||1", 5 }, { "a\tb||1", 6 },
                  { "a\rb||1", 6 }, { "a\x7f||1", 5 }, { "\x1b||1", 4 } };
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        char text[64];
        int n = snprintf(text, sizeof(text), "7\n");
        memcpy(text + n, hosts[i].p, hosts[i].n);
        n += (int)hosts[i].n;
        n += snprintf(text + n, sizeof(text) - (size_t)n, "\n0-16383:0\n");
        ck_assert_msg(slotmap_decode(&m, text, (size_t)n, err, sizeof(err)) == -1,
                      "accepted host %zu", i);
        ck_assert_msg(strstr(err, "control byte") != NULL, "host %zu: %s", i, err);
    }
    /* The ip field is not looked at when a host is given, and printable
     * names (IPv6 too) still decode. */
    ck_assert_msg(decode_text("7\nh|\t|1 [::1]|::1|2\n0-9:0 10-16383:1\n", &m) == 0, "%s", err);
    ck_assert_str_eq(m.endpoints[0].host, "h");
    ck_assert_str_eq(m.endpoints[1].host, "[::1]");
    slotmap_free(&m);
}
END_TEST

START_TEST(test_config_reply_malformed)
{
    static const char *const bad[] = {
        "ERROR\r\n",
        "CONFIG cluster 0 x\r\n",
        "CONFIG cluster 0 \r\n",
        "CONFIG cluster 0 17\n7\nh||1\n0-16383:0\n\r\nEND\r\n",    /* no \r */
        "CONFIG cluster 0 17\r\n7\nh||1\n0-16383:0\n\r\nEND!\r\n", /* bad trailer */
        "CONFIG cluster 0 16\r\n7\nh||1\n0-16383:0\n\r\nEND\r\n",  /* count off by one */
        "CONFIG cluster 0 17\r\n7\nh||1\n0-16383:9\n\r\nEND\r\n",  /* bad body */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct slotmap m;
        size_t used;
        int rc = slotmap_parse_config_reply(&m, bad[i], strlen(bad[i]), &used, err, sizeof(err));
        ck_assert_msg(rc == -1, "accepted bad reply %zu (rc %d)", i, rc);
    }
    struct slotmap m;
    size_t used;
    const char *good = "CONFIG cluster 0 17\r\n7\nh||1\n0-16383:0\n\r\nEND\r\nVERSION";
    ck_assert_int_eq(slotmap_parse_config_reply(&m, good, strlen(good), &used, err, sizeof(err)), 0);
    ck_assert_uint_eq(used, strlen(good) - strlen("VERSION"));
    slotmap_free(&m);
}
END_TEST

static Suite *slotmap_suite(void)
{
    Suite *s = suite_create("slotmap");
    TCase *hash = tcase_create("hash");
    tcase_add_test(hash, test_hash_vectors);
    tcase_add_test(hash, test_hash_matches_libhashkit);
    suite_add_tcase(s, hash);
    TCase *place = tcase_create("placement");
    tcase_add_test(place, test_build_serving_processes);
    tcase_add_test(place, test_placement_covers_and_balances);
    tcase_add_test(place, test_adding_a_group_moves_a_sixth);
    tcase_add_test(place, test_moved_text);
    suite_add_tcase(s, place);
    TCase *text = tcase_create("text");
    tcase_add_test(text, test_encode_exact);
    tcase_add_test(text, test_decode_exact);
    tcase_add_test(text, test_round_trip);
    tcase_add_test(text, test_malformed_rejected);
    tcase_add_test(text, test_host_with_control_bytes_rejected);
    tcase_add_test(text, test_config_reply_malformed);
    suite_add_tcase(s, text);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(slotmap_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
