/* test_proto_text.c - unit tests of the ASCII protocol parser (text_parse):
 * every command's valid forms, memcached's error replies for malformed
 * input, and framing when input arrives a byte at a time. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_meta.h"
#include "proto_text.h"

#define MAX_ITEM (1024 * 1024)

static enum text_parse_result parse(const char *s, struct text_req *req)
{
    return text_parse(s, strlen(s), MAX_ITEM, req);
}

START_TEST(test_get_single_and_multi)
{
    struct text_req req;
    ck_assert_int_eq(parse("get foo\r\n", &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_GET);
    ck_assert_uint_eq(req.total, 9);
    ck_assert_uint_eq(req.nkey, 3);
    ck_assert(memcmp(req.key, "foo", 3) == 0);

    const char *line = "gets a  bb ccc\r\n";
    ck_assert_int_eq(parse(line, &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_GETS);
    const char *p = req.keys, *end = req.keys + req.nkeys_len, *k;
    size_t nk;
    const char *want[] = { "a", "bb", "ccc" };
    int i = 0;
    while (text_next_key(&p, end, &k, &nk)) {
        ck_assert_int_lt(i, 3);
        ck_assert_uint_eq(nk, strlen(want[i]));
        ck_assert(memcmp(k, want[i], nk) == 0);
        i++;
    }
    ck_assert_int_eq(i, 3);
}
END_TEST

START_TEST(test_get_without_cr)
{
    struct text_req req;
    ck_assert_int_eq(parse("get foo\n", &req), TP_OK);
    ck_assert_uint_eq(req.nkey, 3);
    ck_assert_uint_eq(req.total, 8);
}
END_TEST

START_TEST(test_gat)
{
    struct text_req req;
    ck_assert_int_eq(parse("gat 100 k1 k2\r\n", &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_GAT);
    ck_assert_int_eq(req.exptime, 100);
    ck_assert_uint_eq(req.nkey, 2);
    ck_assert_int_eq(parse("gats -1 k\r\n", &req), TP_OK);
    ck_assert_int_eq(req.exptime, -1);
    ck_assert_int_eq(parse("gat abc k\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR invalid exptime argument");
    /* memcached answers a gat without keys with END alone */
    ck_assert_int_eq(parse("gat 10\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.nkey, 0);
}
END_TEST

START_TEST(test_set_with_data)
{
    struct text_req req;
    const char *s = "set k 42 100 5\r\nhello\r\n";
    ck_assert_int_eq(parse(s, &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_SET);
    ck_assert_uint_eq(req.flags, 42);
    ck_assert_int_eq(req.exptime, 100);
    ck_assert_int_eq(req.vlen, 5);
    ck_assert(memcmp(req.data, "hello", 5) == 0);
    ck_assert_uint_eq(req.total, strlen(s));
    ck_assert(!req.noreply);

    ck_assert_int_eq(parse("set k 4294967295 0 0 noreply\r\n\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.flags, 4294967295u);
    ck_assert(req.noreply);
    ck_assert_int_eq(req.vlen, 0);
}
END_TEST

START_TEST(test_cas_command)
{
    struct text_req req;
    ck_assert_int_eq(parse("cas k 0 0 1 12345\r\nx\r\n", &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_CAS);
    ck_assert_uint_eq(req.cas, 12345);
    ck_assert_int_eq(parse("cas k 0 0 1\r\nx\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "ERROR");
    ck_assert_int_eq(parse("cas k 0 0 1 nope\r\nx\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad command line format");
}
END_TEST

START_TEST(test_storage_errors)
{
    struct text_req req;
    ck_assert_int_eq(parse("set k 0 0 abc\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad command line format");
    ck_assert_int_eq(parse("set k -1 0 1\r\nx\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad command line format");
    /* memcached reads flags with strtoul and keeps 32 bits: 2^32 is 0 */
    ck_assert_int_eq(parse("set k 4294967296 0 1\r\nx\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.flags, 0);
    ck_assert_int_eq(parse("set k 0 0 -1\r\n", &req), TP_ERROR);
    ck_assert_int_eq(parse("set k 0 0\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "ERROR");
    /* data block not terminated by CRLF where the length says */
    ck_assert_int_eq(parse("set k 0 0 3\r\nabcd\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad data chunk");
    ck_assert_uint_eq(req.total, strlen("set k 0 0 3\r\nabcd\r"));
}
END_TEST

START_TEST(test_too_large_swallows)
{
    struct text_req req;
    char line[64];
    snprintf(line, sizeof(line), "set k 0 0 %d\r\n", MAX_ITEM + 1);
    ck_assert_int_eq(parse(line, &req), TP_ERROR);
    ck_assert_str_eq(req.error, "SERVER_ERROR object too large for cache");
    ck_assert_uint_eq(req.total, strlen(line));
    ck_assert_uint_eq(req.swallow, (size_t)MAX_ITEM + 3);
}
END_TEST

START_TEST(test_key_lengths)
{
    struct text_req req;
    char buf[600];
    char key[252];
    memset(key, 'k', 250);
    key[250] = '\0';
    snprintf(buf, sizeof(buf), "get %s\r\n", key);
    ck_assert_int_eq(parse(buf, &req), TP_OK);
    ck_assert_uint_eq(req.nkey, 250);
    key[250] = 'k';
    key[251] = '\0';
    snprintf(buf, sizeof(buf), "get a %s\r\n", key);
    ck_assert_int_eq(parse(buf, &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad command line format");
    snprintf(buf, sizeof(buf), "set %s 0 0 1\r\nx\r\n", key);
    ck_assert_int_eq(parse(buf, &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR bad command line format");
    ck_assert_uint_eq(req.swallow, 0);     /* memcached reads the block as a command */
    snprintf(buf, sizeof(buf), "delete %s\r\n", key);
    ck_assert_int_eq(parse(buf, &req), TP_ERROR);
}
END_TEST

START_TEST(test_delete_forms)
{
    struct text_req req;
    ck_assert_int_eq(parse("delete k\r\n", &req), TP_OK);
    ck_assert(!req.noreply);
    ck_assert_int_eq(parse("delete k 0\r\n", &req), TP_OK);
    ck_assert_int_eq(parse("delete k noreply\r\n", &req), TP_OK);
    ck_assert(req.noreply);
    ck_assert_int_eq(parse("delete k 0 noreply\r\n", &req), TP_OK);
    ck_assert(req.noreply);
    ck_assert_int_eq(parse("delete k 5\r\n", &req), TP_ERROR);
    ck_assert(strncmp(req.error, "CLIENT_ERROR bad command line format.", 37) == 0);
}
END_TEST

START_TEST(test_arith_touch_flush)
{
    struct text_req req;
    ck_assert_int_eq(parse("incr k 18446744073709551615\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.delta, UINT64_MAX);
    ck_assert_int_eq(parse("decr k 1 noreply\r\n", &req), TP_OK);
    ck_assert(req.noreply);
    ck_assert_int_eq(parse("incr k 18446744073709551616\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR invalid numeric delta argument");
    ck_assert_int_eq(parse("incr k -1\r\n", &req), TP_ERROR);
    ck_assert_int_eq(parse("touch k 10\r\n", &req), TP_OK);
    ck_assert_int_eq(req.exptime, 10);
    ck_assert_int_eq(parse("touch k x\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "CLIENT_ERROR invalid exptime argument");
    ck_assert_int_eq(parse("flush_all\r\n", &req), TP_OK);
    ck_assert_int_eq(req.exptime, 0);
    ck_assert_int_eq(parse("flush_all 10 noreply\r\n", &req), TP_OK);
    ck_assert_int_eq(req.exptime, 10);
    ck_assert(req.noreply);
    ck_assert_int_eq(parse("flush_all noreply\r\n", &req), TP_OK);
    ck_assert(req.noreply);
    ck_assert_int_eq(parse("flush_all abc\r\n", &req), TP_ERROR);
}
END_TEST

START_TEST(test_misc_commands)
{
    struct text_req req;
    ck_assert_int_eq(parse("version\r\n", &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_VERSION);
    ck_assert_int_eq(parse("verbosity 1\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.delta, 1);
    ck_assert_int_eq(parse("verbosity\r\n", &req), TP_ERROR);
    ck_assert_int_eq(parse("stats\r\n", &req), TP_OK);
    ck_assert_ptr_null(req.arg);
    ck_assert_int_eq(parse("stats items\r\n", &req), TP_OK);
    ck_assert_uint_eq(req.narg, 5);
    ck_assert_int_eq(parse("quit\r\n", &req), TP_OK);
    ck_assert_int_eq(req.cmd, TC_QUIT);
    ck_assert_int_eq(parse("bogus\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "ERROR");
    ck_assert_int_eq(parse("\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "ERROR");
    ck_assert_int_eq(parse("get\r\n", &req), TP_ERROR);
    ck_assert_str_eq(req.error, "ERROR");
}
END_TEST

START_TEST(test_long_lines)
{
    struct text_req req;
    size_t n = 5000;
    char *buf = malloc(n);
    memset(buf, 'x', n);
    ck_assert_int_eq(text_parse(buf, n, MAX_ITEM, &req), TP_CLOSE);
    /* a long multi-get line is not a violation */
    memcpy(buf, "get ", 4);
    ck_assert_int_eq(text_parse(buf, n, MAX_ITEM, &req), TP_NEED_MORE);
    free(buf);
}
END_TEST

/* Every prefix of a pipelined request stream is "need more" (or a complete
 * earlier request) and parsing request by request yields the same sequence
 * as parsing the whole buffer. */
START_TEST(test_byte_at_a_time)
{
    const char *stream =
        "set a 1 0 3\r\nabc\r\n"
        "get a b\r\n"
        "append a 0 0 2 noreply\r\nde\r\n"
        "incr n 5\r\n"
        "cas a 0 0 1 99\r\nz\r\n"
        "bogus line\r\n"
        "delete a\r\n"
        "set big 0 0 10\r\n0123456789\r\n";
    size_t len = strlen(stream);
    enum text_cmd expected[] = { TC_SET, TC_GET, TC_APPEND, TC_INCR, TC_CAS, TC_NONE,
                                 TC_DELETE, TC_SET };
    size_t nexp = sizeof(expected) / sizeof(expected[0]);

    /* Feed bytes one at a time into a growing window. */
    size_t start = 0, avail = 0, seen = 0;
    while (start < len) {
        struct text_req req;
        enum text_parse_result r = text_parse(stream + start, avail, MAX_ITEM, &req);
        if (r == TP_NEED_MORE) {
            ck_assert_uint_lt(start + avail, len);
            avail++;
            continue;
        }
        ck_assert(r == TP_OK || r == TP_ERROR);
        ck_assert_uint_lt(seen, nexp);
        ck_assert_int_eq(req.cmd, expected[seen]);
        /* the request completed exactly when its last byte arrived */
        ck_assert_uint_eq(req.total, avail);
        seen++;
        start += req.total;
        avail = 0;
    }
    ck_assert_uint_eq(seen, nexp);
}
END_TEST

/* The meta commands' base64 keys, decoded as memcached decodes them. */
static void assert_b64(const char *in, const char *want)
{
    char out[256];
    long n = meta_base64_decode(in, strlen(in), out);
    if (!want) {
        ck_assert_msg(n < 0, "\"%s\" decoded", in);
        return;
    }
    ck_assert_msg(n == (long)strlen(want) && memcmp(out, want, (size_t)n) == 0,
                  "\"%s\" decoded to %ld bytes", in, n);
}

START_TEST(test_meta_base64)
{
    assert_b64("Zm9v", "foo");
    assert_b64("Zm8=", "fo");
    assert_b64("Zg==", "f");
    assert_b64("Zg==Zm9v", "f");          /* a padded group ends the key */
    assert_b64("Zm_9v", "foo");           /* others are skipped (seed 3011 case 1755) */
    assert_b64("Z!m-9.v", "foo");
    assert_b64("Zm_9", NULL);             /* three of the alphabet */
    assert_b64("x===", NULL);             /* three pads */
    assert_b64("!!!!", NULL);
    assert_b64("", NULL);
}
END_TEST

static Suite *text_suite(void)
{
    Suite *s = suite_create("proto_text");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_get_single_and_multi);
    tcase_add_test(tc, test_get_without_cr);
    tcase_add_test(tc, test_gat);
    tcase_add_test(tc, test_set_with_data);
    tcase_add_test(tc, test_cas_command);
    tcase_add_test(tc, test_storage_errors);
    tcase_add_test(tc, test_too_large_swallows);
    tcase_add_test(tc, test_key_lengths);
    tcase_add_test(tc, test_delete_forms);
    tcase_add_test(tc, test_arith_touch_flush);
    tcase_add_test(tc, test_misc_commands);
    tcase_add_test(tc, test_long_lines);
    tcase_add_test(tc, test_byte_at_a_time);
    tcase_add_test(tc, test_meta_base64);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(text_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
