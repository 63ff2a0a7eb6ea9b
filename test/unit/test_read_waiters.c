/* test_read_waiters.c - the list of reads an engine holds back: reserved
 * room is never given up, a woken read may wait again, and a wake from
 * inside a woken read loses nothing. */
#include <check.h>
#include <stdlib.h>

#include "read_waiters.h"

struct counter {
    struct read_waiters *q;
    int calls;
    bool wait_again;        /* the woken read waits once more */
    bool wake_inside;       /* the woken read wakes the list itself */
};

static void woken(void *cookie, const struct eng_result *res)
{
    struct counter *c = cookie;
    ck_assert_int_eq(res->status, ENG_SUCCESS);
    c->calls++;
    if (c->wait_again) {
        c->wait_again = false;
        ck_assert(read_waiters_add(c->q, woken, c));
    }
    if (c->wake_inside) {
        c->wake_inside = false;
        read_waiters_wake(c->q);
    }
}

/* Reserved for n: n reads wait in it, and the two arrays take turns, so
 * that the room stays after any number of wakes. */
START_TEST(test_reserve_kept)
{
    struct read_waiters q = { 0 };
    ck_assert_int_eq(read_waiters_reserve(&q, 8), 0);
    struct read_waiter *a = q.w, *b = q.spare;
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    struct counter c[8];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 8; i++) {
            c[i] = (struct counter){ .q = &q };
            ck_assert(read_waiters_add(&q, woken, &c[i]));
        }
        ck_assert_uint_eq(q.cap, 8);   /* no growth */
        read_waiters_wake(&q);
        for (int i = 0; i < 8; i++)
            ck_assert_int_eq(c[i].calls, 1);
        ck_assert_uint_eq(q.n, 0);
        ck_assert(q.w == (round % 2 == 0 ? b : a));
        ck_assert(q.spare == (round % 2 == 0 ? a : b));
        ck_assert_uint_eq(q.cap, 8);
        ck_assert_uint_eq(q.spare_cap, 8);
    }
    read_waiters_free(&q);
}
END_TEST

/* An engine's reserve: one per connection, up to the cap. */
START_TEST(test_reserve_conns)
{
    struct read_waiters q = { 0 };
    ck_assert_int_eq(read_waiters_reserve_conns(&q, 0), 0);
    ck_assert_ptr_null(q.w);
    ck_assert_int_eq(read_waiters_reserve_conns(&q, 1024), 0);
    ck_assert_uint_eq(q.cap, 1024);
    ck_assert_uint_eq(q.spare_cap, 1024);
    read_waiters_free(&q);
    ck_assert_int_eq(read_waiters_reserve_conns(&q, 1 << 20), 0);
    ck_assert_uint_eq(q.cap, READ_WAITERS_RESERVE_MAX);
    read_waiters_free(&q);
}
END_TEST

/* A woken read that must wait again is kept for the next wake. */
START_TEST(test_wait_again)
{
    struct read_waiters q = { 0 };
    ck_assert_int_eq(read_waiters_reserve(&q, 2), 0);
    struct counter c = { .q = &q, .wait_again = true };
    ck_assert(read_waiters_add(&q, woken, &c));
    read_waiters_wake(&q);
    ck_assert_int_eq(c.calls, 1);
    ck_assert_uint_eq(q.n, 1);
    read_waiters_wake(&q);
    ck_assert_int_eq(c.calls, 2);
    ck_assert_uint_eq(q.n, 0);
    read_waiters_free(&q);
}
END_TEST

/* A wake from inside a woken read (the read waited again first): every
 * read is called once per wake it was in, nothing leaks (ASan), and a
 * spare is still there afterwards. */
START_TEST(test_wake_inside)
{
    struct read_waiters q = { 0 };
    ck_assert_int_eq(read_waiters_reserve(&q, 4), 0);
    struct counter first = { .q = &q, .wait_again = true, .wake_inside = true };
    struct counter second = { .q = &q };
    ck_assert(read_waiters_add(&q, woken, &first));
    ck_assert(read_waiters_add(&q, woken, &second));
    read_waiters_wake(&q);
    ck_assert_int_eq(first.calls, 2);    /* woken, waited again, woken inside */
    ck_assert_int_eq(second.calls, 1);
    ck_assert_uint_eq(q.n, 0);
    ck_assert_ptr_nonnull(q.spare);
    struct counter third = { .q = &q };
    ck_assert(read_waiters_add(&q, woken, &third));
    read_waiters_wake(&q);
    ck_assert_int_eq(third.calls, 1);
    read_waiters_free(&q);
}
END_TEST

/* Without a reserve the list grows as reads come (and a wake frees
 * nothing it may need again). */
START_TEST(test_grows)
{
    struct read_waiters q = { 0 };
    struct counter c[40];
    for (int i = 0; i < 40; i++) {
        c[i] = (struct counter){ .q = &q };
        ck_assert(read_waiters_add(&q, woken, &c[i]));
    }
    ck_assert_uint_ge(q.cap, 40);
    read_waiters_wake(&q);
    for (int i = 0; i < 40; i++)
        ck_assert_int_eq(c[i].calls, 1);
    read_waiters_free(&q);
    ck_assert_ptr_null(q.w);
    ck_assert_ptr_null(q.spare);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("read_waiters");
    TCase *tc = tcase_create("read_waiters");
    tcase_add_test(tc, test_reserve_kept);
    tcase_add_test(tc, test_reserve_conns);
    tcase_add_test(tc, test_wait_again);
    tcase_add_test(tc, test_wake_inside);
    tcase_add_test(tc, test_grows);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
