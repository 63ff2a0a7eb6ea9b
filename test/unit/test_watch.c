/* test_watch.c - memcached's log streams (memcached/watch.c): the words
 * watch takes, the lines of each stream, key encoding (urikey.c), and what a watcher
 * that will not take more lines gets ("skipped=N" before its next one). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "slabclass.h"
#include "urikey.h"
#include "watch.h"

/* A fake connection: collects lines until it holds `room` bytes. */
struct sink {
    char buf[8192];
    size_t len;
    size_t room;
    int lines;
};

static bool sink_send(void *conn, const char *line, size_t n)
{
    struct sink *s = conn;
    if (s->len + n > s->room || s->len + n >= sizeof(s->buf))
        return false;
    memcpy(s->buf + s->len, line, n);
    s->len += n;
    s->buf[s->len] = '\0';
    s->lines++;
    return true;
}

/* The line after "ts=<sec>.<usec> " (gid on). */
static const char *after_ts(const char *line)
{
    ck_assert(strncmp(line, "ts=", 3) == 0);
    const char *sp = strchr(line, ' ');
    ck_assert_ptr_nonnull(sp);
    return sp + 1;
}

START_TEST(test_parse)
{
    unsigned st = 0;
    ck_assert_int_eq(watch_parse(NULL, 0, &st), 0);
    ck_assert_uint_eq(st, WATCH_FETCHERS);        /* watch alone: fetchers */
    const char *a = "mutations evictions";
    ck_assert_int_eq(watch_parse(a, strlen(a), &st), 0);
    ck_assert_uint_eq(st, WATCH_MUTATIONS | WATCH_EVICTIONS);
    a = "  connevents   fetchers ";
    ck_assert_int_eq(watch_parse(a, strlen(a), &st), 0);
    ck_assert_uint_eq(st, WATCH_CONNEVENTS | WATCH_FETCHERS);
    a = "proxyreqs proxyevents proxyuser sysevents rawcmds";
    ck_assert_int_eq(watch_parse(a, strlen(a), &st), 0);
    ck_assert_uint_eq(st, WATCH_SILENT);
    const char *bad[] = { "bogus", "FETCHERS", "fetchers bogus", "deletions", "fetcher",
                          "fetchersx" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(watch_parse(bad[i], strlen(bad[i]), &st) == -1, "%s", bad[i]);
    /* a prefix of the buffer only: the rest is not read */
    a = "fetchersXYZ";
    ck_assert_int_eq(watch_parse(a, 8, &st), 0);
    ck_assert_uint_eq(st, WATCH_FETCHERS);
}
END_TEST

START_TEST(test_uri_encode)
{
    char out[64];
    size_t n = uri_key_encode(out, "aZ09-._~", 8);
    ck_assert_int_eq((int)n, 8);
    ck_assert(memcmp(out, "aZ09-._~", 8) == 0);
    n = uri_key_encode(out, "a b#%\n\xff\x00", 8);
    out[n] = '\0';
    ck_assert_str_eq(out, "a%20b%23%25%0A%FF%00");
}
END_TEST

/* The classes memcached 1.6.18 (-I 1m) logged for these items. */
START_TEST(test_slab_class)
{
    ck_assert_uint_eq(mc_slab_class(mc_item_size(1, 3, 5, true), 1u << 20), 1);
    ck_assert_uint_eq(mc_slab_class(mc_item_size(3, 2000, 0, true), 1u << 20), 15);
    ck_assert_uint_eq(mc_slab_class(mc_item_size(2, 50000, 0, true), 1u << 20), 29);
    ck_assert_uint_eq(mc_slab_class(96, 1u << 20), 1);
    ck_assert_uint_eq(mc_slab_class(97, 1u << 20), 2);
    ck_assert_uint_eq(mc_slab_class(2u << 20, 1u << 20), 39);   /* chunked: the largest */
}
END_TEST

START_TEST(test_lines)
{
    struct watch_hub h;
    struct sink all = { .room = sizeof(all.buf) }, gets = { .room = sizeof(gets.buf) };
    watch_init(&h, sink_send);
    ck_assert(!watch_wants(&h, WATCH_FETCHERS));
    ck_assert_int_eq(watch_add(&h, &all, WATCH_FETCHERS | WATCH_MUTATIONS | WATCH_EVICTIONS |
                                          WATCH_CONNEVENTS), 0);
    ck_assert_int_eq(watch_add(&h, &gets, WATCH_FETCHERS), 0);
    ck_assert(watch_wants(&h, WATCH_CONNEVENTS));
    ck_assert_uint_eq(h.watchers, 2);
    /* each watcher takes an event id, as memcached's */
    watch_item_get(&h, "k 1", 3, true, 1, 42, 7);
    ck_assert_str_eq(after_ts(all.buf),
                     "gid=3 type=item_get key=k%201 status=found clsid=1 cfd=7 size=42\n");
    ck_assert_str_eq(all.buf, gets.buf);
    all.len = gets.len = 0;
    watch_item_get(&h, "m", 1, false, 3, 42, 7);
    ck_assert_str_eq(after_ts(all.buf),
                     "gid=4 type=item_get key=m status=not_found clsid=0 cfd=7 size=0\n");
    all.len = gets.len = 0;
    gets.buf[0] = '\0';
    watch_item_store(&h, "k", 1, "stored", "append", 4294967234u, 2, 9, 8);
    ck_assert_str_eq(after_ts(all.buf), "gid=5 type=item_store key=k status=stored cmd=append "
                                        "ttl=4294967234 clsid=2 cfd=8 size=9\n");
    ck_assert_int_eq((int)gets.len, 0);           /* not its stream */
    all.len = 0;
    watch_eviction(&h, "e", 1, false, -1, 12, 29, 100);
    ck_assert_str_eq(after_ts(all.buf),
                     "gid=6 type=eviction key=e fetch=no ttl=-1 la=12 clsid=29 size=100\n");
    all.len = 0;
    watch_conn_event(&h, true, "127.0.0.1", 5000, "tcp", "normal", 9);
    ck_assert_str_eq(after_ts(all.buf),
                     "gid=7 type=conn_new rip=127.0.0.1 rport=5000 transport=tcp cfd=9\n");
    all.len = 0;
    watch_conn_event(&h, false, "unix", 0, "local", "error", 9);
    ck_assert_str_eq(after_ts(all.buf), "gid=8 type=conn_close rip=unix rport=0 "
                                        "transport=local reason=error cfd=9\n");
    /* a 250-byte key of bytes that all need encoding fits */
    char key[250];
    memset(key, '#', sizeof(key));
    all.len = 0;
    watch_item_get(&h, key, sizeof(key), false, 0, 0, 1);
    ck_assert_ptr_nonnull(strstr(all.buf, " status=not_found"));
    ck_assert_int_eq((int)(strstr(all.buf, " status=") - strstr(all.buf, "key=")), 4 + 750);
    ck_assert_uint_eq(h.written, 7);
    watch_remove(&h, &gets);
    ck_assert_uint_eq(h.watchers, 1);
    ck_assert(watch_wants(&h, WATCH_FETCHERS));   /* all still wants it */
    watch_remove(&h, &all);
    ck_assert(!watch_wants(&h, WATCH_FETCHERS));
    watch_remove(&h, &all);                         /* twice: no-op */
    watch_destroy(&h);
}
END_TEST

/* A connection whose send closes it (a write that failed): the hub must
 * not touch the watcher afterwards, and the others still get the line. */
static struct watch_hub *closing_hub;
static bool closing_send(void *conn, const char *line, size_t n)
{
    (void)line;
    (void)n;
    watch_remove(closing_hub, conn);
    return true;
}

static bool route_send(void *conn, const char *line, size_t n)
{
    struct sink *s = conn;
    if (s->room == 0)
        return closing_send(conn, line, n);
    return sink_send(conn, line, n);
}

START_TEST(test_remove_while_delivering)
{
    struct watch_hub h;
    struct sink first = { .room = sizeof(first.buf) }, dying = { .room = 0 },
                last = { .room = sizeof(last.buf) };
    watch_init(&h, route_send);
    closing_hub = &h;
    ck_assert_int_eq(watch_add(&h, &first, WATCH_FETCHERS), WATCH_ADDED);
    ck_assert_int_eq(watch_add(&h, &dying, WATCH_FETCHERS), WATCH_ADDED);
    ck_assert_int_eq(watch_add(&h, &last, WATCH_FETCHERS), WATCH_ADDED);
    watch_item_get(&h, "k", 1, false, 0, 0, 3);    /* run under ASan in CI */
    ck_assert_int_eq(first.lines, 1);
    ck_assert_int_eq(last.lines, 1);
    ck_assert_uint_eq(h.watchers, 2);
    watch_item_get(&h, "k", 1, false, 0, 0, 3);
    ck_assert_int_eq(first.lines, 2);
    ck_assert_int_eq(last.lines, 2);
    watch_destroy(&h);
}
END_TEST

START_TEST(test_limit)
{
    struct watch_hub h;
    struct sink s[WATCH_MAX_WATCHERS + 1];
    watch_init(&h, sink_send);
    for (int i = 0; i < WATCH_MAX_WATCHERS; i++)
        ck_assert_int_eq(watch_add(&h, &s[i], WATCH_FETCHERS), WATCH_ADDED);
    ck_assert_int_eq(watch_add(&h, &s[WATCH_MAX_WATCHERS], WATCH_FETCHERS), WATCH_TOO_MANY);
    watch_remove(&h, &s[3]);
    ck_assert_int_eq(watch_add(&h, &s[WATCH_MAX_WATCHERS], WATCH_FETCHERS), WATCH_ADDED);
    watch_destroy(&h);
}
END_TEST

START_TEST(test_skipped)
{
    struct watch_hub h;
    struct sink slow = { .room = 200 };
    watch_init(&h, sink_send);
    ck_assert_int_eq(watch_add(&h, &slow, WATCH_FETCHERS), 0);
    for (int i = 0; i < 10; i++)
        watch_item_get(&h, "key", 3, false, 0, 0, 5);
    int taken = slow.lines;
    ck_assert_int_gt(taken, 0);
    ck_assert_int_lt(taken, 10);
    ck_assert_uint_eq(h.skipped, (uint64_t)(10 - taken));
    ck_assert_uint_eq(h.sent, (uint64_t)taken);
    /* room again: the note first, then the line */
    slow.len = 0;
    slow.lines = 0;
    watch_item_get(&h, "next", 4, true, 1, 1, 5);
    char want[32];
    snprintf(want, sizeof(want), "skipped=%d\n", 10 - taken);
    ck_assert(strncmp(slow.buf, want, strlen(want)) == 0);
    ck_assert_ptr_nonnull(strstr(slow.buf + strlen(want), "key=next status=found"));
    ck_assert_int_eq(slow.lines, 1);          /* note and line in one piece */
    ck_assert_uint_eq(h.sent, (uint64_t)taken + 1);
    /* no room even for the note: the line is skipped too, counted once */
    slow.room = 0;
    watch_item_get(&h, "x", 1, true, 1, 1, 5);
    ck_assert_uint_eq(h.skipped, (uint64_t)(10 - taken) + 1);
    watch_destroy(&h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("watch");
    TCase *tc = tcase_create("watch");
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_uri_encode);
    tcase_add_test(tc, test_slab_class);
    tcase_add_test(tc, test_lines);
    tcase_add_test(tc, test_skipped);
    tcase_add_test(tc, test_remove_while_delivering);
    tcase_add_test(tc, test_limit);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
