/* test_sendq.c - batched socket writes (repl/sendq.c) on real sockets, with
 * io_uring where this kernel allows it and with one sendmsg() each: the
 * same bytes arrive in the same order, results are per message, a full
 * socket answers -EAGAIN, and writers see every "sent" before any
 * "complete" (a completion may write another writer of the same batch). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "sendq.h"

/* Loop index 0: io_uring if it can be had; 1: turned off. */
static struct sendq *start_queue(int mode)
{
    struct sendq *q = sendq_new(mode == 0);
    ck_assert_ptr_nonnull(q);
    const char *why = NULL;
    bool batched = sendq_start(q, &why);
    if (mode == 1)
        ck_assert(!batched);
    else if (!batched)
        fprintf(stderr, "test_sendq: io_uring unavailable here (%s): both modes test sendmsg\n",
                why);
    return q;
}

static void pair(int sv[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
}

static size_t drain(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n <= 0)
            return got;
        got += (size_t)n;
    }
}

START_TEST(test_messages_arrive_in_order)
{
    struct sendq *q = start_queue(_i);
    enum { N = 20 };
    int sv[N][2];
    char msg[N][64];
    for (int i = 0; i < N; i++) {
        pair(sv[i]);
        snprintf(msg[i], sizeof(msg[i]), "message %d ", i);
    }
    for (int round = 0; round < 3; round++) {
        sendq_reset(q);
        int slot[N];
        for (int i = 0; i < N; i++) {
            struct iovec iov[2] = { { msg[i], strlen(msg[i]) }, { "tail\n", 5 } };
            slot[i] = sendq_add(q, sv[i][0], iov, 2, MSG_NOSIGNAL | MSG_DONTWAIT);
            ck_assert_int_eq(slot[i], i);
        }
        ck_assert_uint_eq(sendq_count(q), N);
        sendq_submit(q);
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(sendq_result(q, slot[i]), (ssize_t)(strlen(msg[i]) + 5));
            ck_assert_uint_eq(sendq_msg_bytes(q, slot[i]), strlen(msg[i]) + 5);
        }
    }
    for (int i = 0; i < N; i++) {
        char want[256], got[256];
        want[0] = '\0';
        for (int r = 0; r < 3; r++) {
            strcat(want, msg[i]);
            strcat(want, "tail\n");
        }
        size_t n = drain(sv[i][1], got, sizeof(got));
        ck_assert_uint_eq(n, strlen(want));
        ck_assert(memcmp(got, want, n) == 0);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    /* N messages in each of 3 batches; with io_uring that took a handful
     * of system calls, without it one each. */
    ck_assert_uint_eq(sendq_msgs(q), 3 * N);
    if (sendq_batched(q))
        ck_assert_uint_lt(sendq_calls(q), 3 * N);
    else
        ck_assert_uint_eq(sendq_calls(q), 3 * N);
    sendq_free(q);
}
END_TEST

START_TEST(test_errors_are_per_message)
{
    struct sendq *q = start_queue(_i);
    int good[2], full[2], closed[2];
    pair(good);
    pair(full);
    pair(closed);
    /* Fill one socket until it refuses. */
    char block[4096];
    memset(block, 'x', sizeof(block));
    while (write(full[0], block, sizeof(block)) > 0)
        ;
    close(closed[1]);               /* the peer is gone: EPIPE, no SIGPIPE */
    struct iovec iov = { "abc", 3 };
    int a = sendq_add(q, good[0], &iov, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    int b = sendq_add(q, full[0], &iov, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    int c = sendq_add(q, closed[0], &iov, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    int d = sendq_add(q, 1 << 20, &iov, 1, MSG_NOSIGNAL | MSG_DONTWAIT);   /* no such fd */
    sendq_submit(q);
    ck_assert_int_eq(sendq_result(q, a), 3);
    ck_assert(sendq_result(q, b) == -EAGAIN || sendq_result(q, b) == -EWOULDBLOCK);
    ck_assert_int_eq(sendq_result(q, c), -EPIPE);
    ck_assert_int_eq(sendq_result(q, d), -EBADF);
    char got[8];
    ck_assert_uint_eq(drain(good[1], got, sizeof(got)), 3);
    sendq_free(q);
}
END_TEST

START_TEST(test_batch_limits)
{
    struct sendq *q = start_queue(_i);
    struct iovec iov = { "z", 1 };
    for (int i = 0; i < SENDQ_MAX_MSGS; i++)
        ck_assert_int_eq(sendq_add(q, 0, &iov, 1, MSG_DONTWAIT), i);
    ck_assert_int_eq(sendq_add(q, 0, &iov, 1, MSG_DONTWAIT), -1);
    sendq_reset(q);
    static struct iovec many[SENDQ_MAX_IOV + 1];
    for (int i = 0; i <= SENDQ_MAX_IOV; i++)
        many[i] = iov;
    /* One message holds at most what sendmsg() takes; the batch's arena
     * holds SENDQ_MAX_IOV entries over all messages. */
    ck_assert_int_eq(sendq_add(q, 0, many, SENDQ_MSG_MAX_IOV + 1, MSG_DONTWAIT), -1);
    int full = 0;
    for (int used = 0; used + SENDQ_MSG_MAX_IOV <= SENDQ_MAX_IOV; used += SENDQ_MSG_MAX_IOV)
        ck_assert_int_eq(sendq_add(q, 0, many, SENDQ_MSG_MAX_IOV, MSG_DONTWAIT), full++);
    ck_assert_int_eq(full, SENDQ_MAX_IOV / SENDQ_MSG_MAX_IOV);
    ck_assert_int_eq(sendq_add(q, 0, many, 1, MSG_DONTWAIT), -1);
    sendq_free(q);
}
END_TEST

/* ---- writers ---- */

struct fake {
    struct sendq_writer wr;
    int fd;
    char out[64];
    size_t start, end;
    int prepared, sents, completes;
    bool had;
    ssize_t res;
    struct fake *other;             /* its complete writes this one directly */
    size_t other_start_seen;
};

static struct fake *fake_of(struct sendq_writer *wr)
{
    return (struct fake *)wr;
}

static int fake_prepare(struct sendq_writer *wr, int *fd, struct iovec *iov, int max)
{
    struct fake *f = fake_of(wr);
    f->prepared++;
    if (f->start == f->end || max < 1)
        return 0;
    iov[0].iov_base = f->out + f->start;
    iov[0].iov_len = f->end - f->start;
    *fd = f->fd;
    return 1;
}

static void fake_sent(struct sendq_writer *wr, size_t n)
{
    struct fake *f = fake_of(wr);
    f->sents++;
    f->start += n;
}

static struct fake fakes[4];

static void fake_complete(struct sendq_writer *wr, bool had, ssize_t res)
{
    struct fake *f = fake_of(wr);
    f->completes++;
    f->had = had;
    f->res = res;
    if (f->other != NULL)
        f->other_start_seen = f->other->start;
}

START_TEST(test_writers)
{
    struct sendq *q = start_queue(_i);
    int sv[4][2];
    memset(fakes, 0, sizeof(fakes));
    for (int i = 0; i < 4; i++) {
        pair(sv[i]);
        sendq_writer_init(&fakes[i].wr, fake_prepare, fake_sent, fake_complete);
        fakes[i].fd = sv[i][0];
        fakes[i].end = (size_t)snprintf(fakes[i].out, sizeof(fakes[i].out), "writer %d", i);
    }
    fakes[3].start = fakes[3].end;  /* nothing to send */
    /* Every writer's complete looks at another's buffer: it must already
     * have moved past what the batch sent, whichever completes first. */
    for (int i = 0; i < 4; i++)
        fakes[i].other = &fakes[(i + 1) % 3];
    bool listed = true;
    for (int i = 0; i < 4; i++) {
        listed = listed && sendq_want(q, &fakes[i].wr);
        listed = listed && sendq_want(q, &fakes[i].wr);      /* twice is once */
    }
    if (!sendq_batched(q)) {
        ck_assert(!listed);          /* the caller writes for itself */
        sendq_free(q);
        return;
    }
    ck_assert(listed);
    sendq_flush(q);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(fakes[i].prepared, 1);
        ck_assert_int_eq(fakes[i].sents, 1);
        ck_assert_int_eq(fakes[i].completes, 1);
        ck_assert(fakes[i].had);
        ck_assert_int_eq(fakes[i].res, (ssize_t)fakes[i].end);
        ck_assert_uint_eq(fakes[i].start, fakes[i].end);
        ck_assert_uint_eq(fakes[i].other_start_seen, fakes[i].other->end);
        ck_assert(!fakes[i].wr.listed);
        char got[64];
        ck_assert_uint_eq(drain(sv[i][1], got, sizeof(got)), fakes[i].end);
    }
    ck_assert_int_eq(fakes[3].sents, 0);
    ck_assert_int_eq(fakes[3].completes, 1);
    ck_assert(!fakes[3].had);
    /* A second flush with nobody listed does nothing. */
    sendq_flush(q);
    ck_assert_int_eq(fakes[0].completes, 1);
    sendq_free(q);
}
END_TEST

START_TEST(test_env_turns_it_off)
{
    setenv("COCYTUS_NO_IO_URING", "1", 1);
    struct sendq *q = sendq_new(true);
    const char *why = NULL;
    ck_assert(!sendq_start(q, &why));
    ck_assert_ptr_nonnull(why);
    ck_assert(strstr(why, "COCYTUS_NO_IO_URING") != NULL);
    sendq_free(q);
    setenv("COCYTUS_NO_IO_URING", "0", 1);      /* "0" is not off */
    q = sendq_new(true);
    why = NULL;
    bool on = sendq_start(q, &why);
    ck_assert(on || strstr(why, "COCYTUS_NO_IO_URING") == NULL);
    sendq_free(q);
    unsetenv("COCYTUS_NO_IO_URING");
}
END_TEST

static Suite *sendq_suite(void)
{
    Suite *s = suite_create("sendq");
    TCase *tc = tcase_create("batches");
    tcase_add_loop_test(tc, test_messages_arrive_in_order, 0, 2);
    tcase_add_loop_test(tc, test_errors_are_per_message, 0, 2);
    tcase_add_loop_test(tc, test_batch_limits, 0, 2);
    tcase_add_loop_test(tc, test_writers, 0, 2);
    tcase_add_test(tc, test_env_turns_it_off);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sendq_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
