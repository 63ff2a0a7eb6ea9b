/* test_auth.c - unit tests of repl/auth.c: the admin handshake accepts the
 * proof made with the cluster secret for the nonce it issued, once, and
 * nothing else (another secret, another nonce, a replayed answer, a proof
 * made with the link key, malformed hex). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"

/* The server's nonce, as the client sees it: the hex after "AUTH ". */
static void challenge(struct auth_admin *a, char hex[AUTH_NONCE_HEX + 1])
{
    ck_assert_int_eq(auth_admin_challenge(a, hex), 0);
    ck_assert_uint_eq(strlen(hex), AUTH_NONCE_HEX);
}

START_TEST(test_good_proof_accepted)
{
    uint8_t key[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], proof[AUTH_PROOF_HEX + 1];
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, key);
    challenge(&a, nonce);
    ck_assert_int_eq(auth_admin_answer(key, nonce, proof), 0);
    ck_assert(auth_admin_verify(&a, key, proof));
    ck_assert(a.ok);
}
END_TEST

START_TEST(test_reply_line_answers)
{
    uint8_t key[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], reply[64], line[96];
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, key);
    challenge(&a, nonce);
    snprintf(reply, sizeof reply, "AUTH %s", nonce);
    ck_assert_int_eq(auth_admin_reply_line("s3cret", reply, line, sizeof line), 0);
    ck_assert(strncmp(line, "cocytus auth ", 13) == 0);
    ck_assert(auth_admin_verify(&a, key, line + 13));
    ck_assert_int_eq(auth_admin_reply_line("s3cret", "ERROR", line, sizeof line), -1);
    ck_assert_int_eq(auth_admin_reply_line("s3cret", "AUTH 12", line, sizeof line), -1);
}
END_TEST

START_TEST(test_wrong_secret_refused)
{
    uint8_t key[AUTH_KEY_SIZE], other[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], proof[AUTH_PROOF_HEX + 1];
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, key);
    auth_derive_key("s3creT", AUTH_FOR_ADMIN, other);
    challenge(&a, nonce);
    auth_admin_answer(other, nonce, proof);
    ck_assert(!auth_admin_verify(&a, key, proof));
    ck_assert(!a.ok);
}
END_TEST

START_TEST(test_link_key_is_not_the_admin_key)
{
    uint8_t link[AUTH_KEY_SIZE], admin[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], proof[AUTH_PROOF_HEX + 1];
    auth_derive_key("s3cret", AUTH_FOR_LINK, link);
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, admin);
    ck_assert(memcmp(link, admin, AUTH_KEY_SIZE) != 0);
    challenge(&a, nonce);
    auth_admin_answer(link, nonce, proof);
    ck_assert(!auth_admin_verify(&a, admin, proof));
}
END_TEST

START_TEST(test_nonce_used_once)
{
    uint8_t key[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 }, b = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], nonce2[AUTH_NONCE_HEX + 1], proof[AUTH_PROOF_HEX + 1];
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, key);
    /* No nonce asked: nothing is accepted. */
    ck_assert(!auth_admin_verify(&a, key, "0011223344556677"));
    challenge(&a, nonce);
    auth_admin_answer(key, nonce, proof);
    ck_assert(!auth_admin_verify(&a, key, "0011223344556677"));
    /* The failure used the nonce up: its right answer is now too late. */
    ck_assert(!auth_admin_verify(&a, key, proof));
    /* A recorded answer is worthless on another connection's nonce. */
    challenge(&b, nonce2);
    ck_assert(strcmp(nonce, nonce2) != 0);
    ck_assert(!auth_admin_verify(&b, key, proof));
    ck_assert(!b.ok);
}
END_TEST

START_TEST(test_malformed_proof_refused)
{
    uint8_t key[AUTH_KEY_SIZE];
    struct auth_admin a = { 0 };
    char nonce[AUTH_NONCE_HEX + 1], proof[AUTH_PROOF_HEX + 1], longer[40];
    auth_derive_key("s3cret", AUTH_FOR_ADMIN, key);
    const char *bad[] = { "", "00", "zz11223344556677", "001122334455667" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        challenge(&a, nonce);
        ck_assert(!auth_admin_verify(&a, key, bad[i]));
    }
    challenge(&a, nonce);
    auth_admin_answer(key, nonce, proof);
    snprintf(longer, sizeof longer, "%s0", proof);
    ck_assert(!auth_admin_verify(&a, key, longer));
    ck_assert_int_eq(auth_admin_answer(key, "xyz", proof), -1);
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("admin handshake");
    tcase_add_test(tc, test_good_proof_accepted);
    tcase_add_test(tc, test_reply_line_answers);
    tcase_add_test(tc, test_wrong_secret_refused);
    tcase_add_test(tc, test_link_key_is_not_the_admin_key);
    tcase_add_test(tc, test_nonce_used_once);
    tcase_add_test(tc, test_malformed_proof_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(auth_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
