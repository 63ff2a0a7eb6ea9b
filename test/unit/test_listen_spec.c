/* test_listen_spec.c - -l entries as memcached reads them
 * (memcached/listen_spec.c): ports, brackets, bare IPv6, notls:. */
#include <check.h>
#include <string.h>

#include "listen_spec.h"

static struct listen_spec parse_ok(const char *entry)
{
    struct listen_spec ls;
    char err[128] = "";
    ck_assert_msg(listen_spec_parse(entry, &ls, err, sizeof(err)) == 0, "%s: %s", entry, err);
    return ls;
}

static void parse_bad(const char *entry, const char *why)
{
    struct listen_spec ls;
    char err[128] = "";
    ck_assert_int_eq(listen_spec_parse(entry, &ls, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, why) != NULL, "%s: '%s' lacks '%s'", entry, err, why);
}

START_TEST(test_hosts_and_ports)
{
    struct listen_spec ls = parse_ok("127.0.0.1");
    ck_assert_str_eq(ls.host, "127.0.0.1");
    ck_assert_int_eq(ls.port, -1);
    ck_assert(!ls.notls);
    ls = parse_ok("127.0.0.1:11212");
    ck_assert_str_eq(ls.host, "127.0.0.1");
    ck_assert_int_eq(ls.port, 11212);
    ls = parse_ok("localhost:0");
    ck_assert_str_eq(ls.host, "localhost");
    ck_assert_int_eq(ls.port, 0);
    ls = parse_ok(":11213");                  /* every interface, its own port */
    ck_assert_str_eq(ls.host, "");
    ck_assert_int_eq(ls.port, 11213);
}
END_TEST

START_TEST(test_ipv6)
{
    struct listen_spec ls = parse_ok("::1");          /* two colons: no port */
    ck_assert_str_eq(ls.host, "::1");
    ck_assert_int_eq(ls.port, -1);
    ls = parse_ok("fe80::1:2:3");
    ck_assert_str_eq(ls.host, "fe80::1:2:3");
    ck_assert_int_eq(ls.port, -1);
    ls = parse_ok("[::1]:11214");
    ck_assert_str_eq(ls.host, "::1");
    ck_assert_int_eq(ls.port, 11214);
    ls = parse_ok("[::1]");
    ck_assert_str_eq(ls.host, "::1");
    ck_assert_int_eq(ls.port, -1);
}
END_TEST

START_TEST(test_notls)
{
    struct listen_spec ls = parse_ok("notls:127.0.0.1:11215");
    ck_assert(ls.notls);
    ck_assert_str_eq(ls.host, "127.0.0.1");
    ck_assert_int_eq(ls.port, 11215);
    ls = parse_ok("notls:[::1]:11216");
    ck_assert(ls.notls);
    ck_assert_str_eq(ls.host, "::1");
    ls = parse_ok("notls:10.0.0.1");
    ck_assert(ls.notls);
    ck_assert_int_eq(ls.port, -1);
    ls = parse_ok("NOTLS:1");                 /* memcached's prefix is lower case */
    ck_assert(!ls.notls);
    ck_assert_str_eq(ls.host, "NOTLS");
    ck_assert_int_eq(ls.port, 1);
}
END_TEST

START_TEST(test_refused)
{
    parse_bad("127.0.0.1:", "invalid port number \"\"");
    parse_bad("127.0.0.1:abc", "invalid port number \"abc\"");
    parse_bad("127.0.0.1:65536", "invalid port number");
    parse_bad("127.0.0.1:-1", "invalid port number");
    parse_bad("127.0.0.1: 80", "invalid port number");
    parse_bad("127.0.0.1:80x", "invalid port number");
    parse_bad("[::1", "no ']'");
    parse_bad("[::1]x", "unexpected");
    parse_bad("[::1]:", "invalid port number");
    char longhost[400];
    memset(longhost, 'a', sizeof(longhost) - 1);
    longhost[sizeof(longhost) - 1] = '\0';
    parse_bad(longhost, "too long");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("listen_spec");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_hosts_and_ports);
    tcase_add_test(tc, test_ipv6);
    tcase_add_test(tc, test_notls);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
