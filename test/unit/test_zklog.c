/* test_zklog.c - the ZooKeeper client's log, rate-limited by source
 * location: one line per location per window, the next one shown says
 * how many were left out, other locations and unknown lines print at once,
 * and the stream cuts what the client writes into lines whatever the
 * pieces. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "coord_zklog.h"

#define REFUSED "2026-12-05 03:41:41,678:22175(0x7f6df672a6c0):ZOO_ERROR@check_events@2985: " \
                "Socket 127.0.0.1:27199 zk retcode=-4, errno=111(Connection refused)"
#define DELAYING "2026-12-05 03:41:41,679:22175(0x7f6df672a6c0):ZOO_WARN@zookeeper_interest@2561: " \
                 "Delaying connection after exhaustively trying all servers"

START_TEST(test_one_per_window)
{
    struct zklog_limit lim;
    unsigned dropped = 99;
    memset(&lim, 0, sizeof(lim));
    ck_assert(zklog_admit(&lim, REFUSED, 1000, &dropped));
    ck_assert_uint_eq(dropped, 0);
    for (int i = 1; i <= 10; i++)
        ck_assert(!zklog_admit(&lim, REFUSED, 1000 + 33u * i, &dropped));
    /* another location is not held back by the first */
    ck_assert(zklog_admit(&lim, DELAYING, 1400, &dropped));
    ck_assert_uint_eq(dropped, 0);
    ck_assert(!zklog_admit(&lim, REFUSED, 1000 + ZKLOG_WINDOW_MS - 1, &dropped));
    ck_assert(zklog_admit(&lim, REFUSED, 1000 + ZKLOG_WINDOW_MS, &dropped));
    ck_assert_uint_eq(dropped, 11);
    ck_assert(!zklog_admit(&lim, REFUSED, 1001 + ZKLOG_WINDOW_MS, &dropped));
}
END_TEST

START_TEST(test_unknown_lines_print)
{
    struct zklog_limit lim;
    unsigned dropped;
    memset(&lim, 0, sizeof(lim));
    for (int i = 0; i < 5; i++) {
        ck_assert(zklog_admit(&lim, "not a client line", 10, &dropped));
        ck_assert(zklog_admit(&lim, "", 10, &dropped));
    }
}
END_TEST

START_TEST(test_many_locations)
{
    struct zklog_limit lim;
    unsigned dropped;
    char line[200];
    memset(&lim, 0, sizeof(lim));
    /* more locations than slots within one window: none is left out */
    for (int i = 0; i < ZKLOG_KEYS + 4; i++) {
        snprintf(line, sizeof(line), "t:1(0x1):ZOO_ERROR@f%d@%d: x", i, i);
        ck_assert(zklog_admit(&lim, line, 5, &dropped));
    }
    /* the first ZKLOG_KEYS are held, the later ones found no slot */
    ck_assert(!zklog_admit(&lim, "t:1(0x1):ZOO_ERROR@f0@0: x", 6, &dropped));
    snprintf(line, sizeof(line), "t:1(0x1):ZOO_ERROR@f%d@%d: x", ZKLOG_KEYS, ZKLOG_KEYS);
    ck_assert(zklog_admit(&lim, line, 6, &dropped));
    /* past the window a slot is reused */
    ck_assert(zklog_admit(&lim, line, 5 + ZKLOG_WINDOW_MS, &dropped));
    ck_assert(!zklog_admit(&lim, line, 6 + ZKLOG_WINDOW_MS, &dropped));
}
END_TEST

START_TEST(test_stream)
{
    char *out = NULL;
    size_t outlen = 0;
    FILE *sink = open_memstream(&out, &outlen);
    ck_assert_ptr_nonnull(sink);
    struct zklog *zl = zklog_open(sink);
    ck_assert_ptr_nonnull(zl);
    FILE *f = zklog_stream(zl);
    /* as the client writes: fprintf of a line, then fflush */
    for (int i = 0; i < 50; i++) {
        fprintf(f, "%s\n", REFUSED);
        fflush(f);
        fprintf(f, "%s\n", DELAYING);
        fflush(f);
    }
    /* a line in pieces, and two in one write */
    fputs("plain ", f);
    fflush(f);
    fputs("line\nsecond plain line\n", f);
    fflush(f);
    zklog_close(zl);
    fclose(sink);
    ck_assert_ptr_nonnull(strstr(out, REFUSED "\n" DELAYING "\nplain line\nsecond plain line\n"));
    ck_assert_ptr_nonnull(strstr(out, "49 more lines from ZOO_ERROR@check_events@2985"));
    ck_assert_ptr_nonnull(strstr(out, "49 more lines from ZOO_WARN@zookeeper_interest@2561"));
    int lines = 0;
    for (const char *p = out; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    ck_assert_int_eq(lines, 6);
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("zklog");
    TCase *tc = tcase_create("zklog");
    tcase_add_test(tc, test_one_per_window);
    tcase_add_test(tc, test_unknown_lines_print);
    tcase_add_test(tc, test_many_locations);
    tcase_add_test(tc, test_stream);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
