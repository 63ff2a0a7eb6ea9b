/* test_clock.c - memcached's exptime rules as implemented by clock.c. */
#include <check.h>
#include <stdlib.h>

#include "clock.h"

#define STARTED ((time_t)1700000000)

START_TEST(test_init_and_set)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    ck_assert_uint_eq(c.now, CLOCK_START);
    ck_assert_int_eq(clock_wall(&c), STARTED);

    clock_set(&c, STARTED - 100);       /* going back before the epoch: ignored */
    ck_assert_uint_eq(c.now, CLOCK_START);
    clock_set(&c, STARTED + 10);
    ck_assert_uint_eq(c.now, CLOCK_START + 10);
    ck_assert_int_eq(clock_wall(&c), STARTED + 10);
}
END_TEST

START_TEST(test_zero_is_never)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    ck_assert_uint_eq(clock_exptime(&c, 0), 0);
    clock_set(&c, STARTED + 1000000);
    ck_assert_int_eq(clock_expired(&c, 0), 0);
}
END_TEST

START_TEST(test_negative_is_past)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    ck_assert_uint_eq(clock_exptime(&c, -1), 1);
    ck_assert_uint_eq(clock_exptime(&c, INT64_MIN), 1);
    ck_assert_int_eq(clock_expired(&c, clock_exptime(&c, -1)), 1);
}
END_TEST

START_TEST(test_relative)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    clock_set(&c, STARTED + 8);                 /* now = START + 8 */
    rel_time_t t = clock_exptime(&c, 5);
    ck_assert_uint_eq(t, CLOCK_START + 13);
    ck_assert_int_eq(clock_expired(&c, t), 0);
    clock_set(&c, STARTED + 12);                /* now = START + 12 */
    ck_assert_int_eq(clock_expired(&c, t), 0);
    clock_set(&c, STARTED + 13);                /* now = START + 13 */
    ck_assert_int_eq(clock_expired(&c, t), 1);

    /* Exactly 30 days is still relative. */
    ck_assert_uint_eq(clock_exptime(&c, CLOCK_MAX_RELATIVE_EXPTIME),
                      c.now + CLOCK_MAX_RELATIVE_EXPTIME);
}
END_TEST

START_TEST(test_absolute)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    clock_set(&c, STARTED + 10);                /* now = START + 10 */
    rel_time_t t = clock_exptime(&c, (int64_t)STARTED + 100);
    ck_assert_uint_eq(t, CLOCK_START + 100);
    clock_set(&c, STARTED + 99);
    ck_assert_int_eq(clock_expired(&c, t), 0);
    clock_set(&c, STARTED + 100);
    ck_assert_int_eq(clock_expired(&c, t), 1);

    /* Absolute times not after now are already past. */
    ck_assert_uint_eq(clock_exptime(&c, (int64_t)STARTED + 100), 1);
    ck_assert_uint_eq(clock_exptime(&c, (int64_t)STARTED - 5), 1);
    ck_assert_uint_eq(clock_exptime(&c, CLOCK_MAX_RELATIVE_EXPTIME + 1), 1);
}
END_TEST

START_TEST(test_saturates)
{
    struct mc_clock c;
    clock_init(&c, STARTED);
    ck_assert_uint_eq(clock_exptime(&c, INT64_MAX), UINT32_MAX);
}
END_TEST

static Suite *clock_suite(void)
{
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("exptime");
    tcase_add_test(tc, test_init_and_set);
    tcase_add_test(tc, test_zero_is_never);
    tcase_add_test(tc, test_negative_is_past);
    tcase_add_test(tc, test_relative);
    tcase_add_test(tc, test_absolute);
    tcase_add_test(tc, test_saturates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(clock_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
