/* test_authfile.c - the -Y credentials file and the two forms a client
 * presents a pair in (memcached/authfile.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "authfile.h"

/* Writes text to a new temporary file; its path in path. */
static void write_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/test_authfile.XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (int)strlen(text));
    close(fd);
}

static int load_text(struct authfile *af, const char *text, char *err, size_t errlen)
{
    char path[64];
    write_file(path, sizeof(path), text);
    int rc = authfile_load(af, path, err, errlen);
    unlink(path);
    return rc;
}

START_TEST(test_load_and_check)
{
    struct authfile af;
    char err[200];
    ck_assert_int_eq(load_text(&af, "alice:secret1\n\nbob:pw2\r\n", err, sizeof(err)), 0);
    ck_assert_uint_eq(af.n, 2);
    ck_assert(authfile_check(&af, "alice", 5, "secret1", 7));
    ck_assert(authfile_check(&af, "bob", 3, "pw2", 3));
    ck_assert(!authfile_check(&af, "bob", 3, "secret1", 7));       /* another user's password */
    ck_assert(!authfile_check(&af, "alice", 5, "secret", 6));      /* a prefix */
    ck_assert(!authfile_check(&af, "alice", 5, "secret12", 8));    /* longer */
    ck_assert(!authfile_check(&af, "alic", 4, "secret1", 7));
    ck_assert(!authfile_check(&af, "", 0, "", 0));
    authfile_free(&af);
}
END_TEST

START_TEST(test_bad_files)
{
    struct authfile af;
    char err[200];
    ck_assert_int_eq(load_text(&af, "alice\n", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, ":1: not user:password"));
    ck_assert_int_eq(load_text(&af, "a:b\n:nouser\n", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, ":2:"));
    ck_assert_int_eq(load_text(&af, "a:\n", err, sizeof(err)), -1);
    ck_assert_int_eq(load_text(&af, "a b:c\n", err, sizeof(err)), -1);   /* a space in the user */
    ck_assert_int_eq(load_text(&af, "\n\n", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "no user:password"));
    ck_assert_int_eq(authfile_load(&af, "/nonexistent/auth", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

START_TEST(test_ascii_form)
{
    const char *u, *p;
    size_t nu, np;
    ck_assert(authfile_split_ascii("alice secret1", 13, &u, &nu, &p, &np));
    ck_assert_uint_eq(nu, 5);
    ck_assert_int_eq(memcmp(u, "alice", 5), 0);
    ck_assert_uint_eq(np, 7);
    ck_assert(authfile_split_ascii("  a   b ", 8, &u, &nu, &p, &np));
    ck_assert(!authfile_split_ascii("alice", 5, &u, &nu, &p, &np));
    ck_assert(!authfile_split_ascii("a b c", 5, &u, &nu, &p, &np));
    ck_assert(!authfile_split_ascii("a\tb", 3, &u, &nu, &p, &np));
    ck_assert(!authfile_split_ascii("", 0, &u, &nu, &p, &np));
}
END_TEST

START_TEST(test_plain_form)
{
    const char *u, *p;
    size_t nu, np;
    ck_assert(authfile_split_plain("\0bob\0pw2", 8, &u, &nu, &p, &np));
    ck_assert_uint_eq(nu, 3);
    ck_assert_uint_eq(np, 3);
    ck_assert_int_eq(memcmp(p, "pw2", 3), 0);
    ck_assert(authfile_split_plain("zid\0bob\0pw2", 11, &u, &nu, &p, &np));   /* authzid ignored */
    ck_assert_int_eq(memcmp(u, "bob", 3), 0);
    ck_assert(!authfile_split_plain("bob\0pw2", 7, &u, &nu, &p, &np));       /* one NUL */
    ck_assert(!authfile_split_plain("\0\0pw2", 5, &u, &nu, &p, &np));        /* no user */
    ck_assert(!authfile_split_plain("\0b\0p\0q", 7, &u, &nu, &p, &np));      /* NUL in password */
    ck_assert(!authfile_split_plain("", 0, &u, &nu, &p, &np));

    struct auth_pair pair;
    memset(&pair, 0, sizeof(pair));
    strcpy(pair.user, "proxy");
    strcpy(pair.pass, "Px-9f3a");
    char buf[64];
    size_t n = authfile_plain_message(&pair, buf, sizeof(buf));
    ck_assert_uint_eq(n, 14);
    ck_assert(authfile_split_plain(buf, n, &u, &nu, &p, &np));
    ck_assert_uint_eq(nu, 5);
    ck_assert_int_eq(memcmp(p, "Px-9f3a", 7), 0);
    ck_assert_uint_eq(authfile_plain_message(&pair, buf, 10), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("authfile");
    TCase *tc = tcase_create("authfile");
    tcase_add_test(tc, test_load_and_check);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_ascii_form);
    tcase_add_test(tc, test_plain_form);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
