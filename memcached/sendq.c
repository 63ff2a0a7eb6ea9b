/* sendq.c - batched socket writes (sendq.h): many sockets' messages in one
 * io_uring submission, or one sendmsg() each where io_uring is not there.
 *
 * The ring is created by sendq_new, which must therefore run in the thread
 * that submits: it is set up for a single issuer with deferred task work
 * (the cheapest mode, kernel 6.1), which binds it to that thread.  Older kernels refuse
 * those flags and get a plain ring; a kernel or sandbox without io_uring
 * makes the queue fall back to sendmsg() for good.  A send on a socket is
 * issued inline by io_uring when it does not have to wait, and with
 * MSG_DONTWAIT it never waits, so every completion is there when the
 * submission returns. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "sendq.h"

/* A message's result before its completion is read (a send never fails
 * with EINPROGRESS on a connected socket). */
#define RES_PENDING (-EINPROGRESS)

struct sendq {
    bool want_uring;
    int ring_state;                 /* 0 not tried, 1 up, -1 unusable */
    const char *why_not;
#ifdef HAVE_LIBURING
    struct io_uring ring;
#endif
    size_t n, niov;
    int fd[SENDQ_MAX_MSGS];
    int flags[SENDQ_MAX_MSGS];
    struct msghdr msg[SENDQ_MAX_MSGS];
    ssize_t res[SENDQ_MAX_MSGS];
    struct iovec iov[SENDQ_MAX_IOV];
    unsigned long long msgs, calls;
};

#ifdef HAVE_LIBURING
static void ring_start(struct sendq *q)
{
    static const unsigned tries[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_COOP_TASKRUN,
        0,
    };
    int rc = -ENOSYS;
    for (size_t t = 0; t < sizeof(tries) / sizeof(tries[0]); t++) {
        rc = io_uring_queue_init(SENDQ_MAX_MSGS, &q->ring, tries[t]);
        if (rc == 0) {
            q->ring_state = 1;
            return;
        }
        if (rc != -EINVAL)
            break;
    }
    q->ring_state = -1;
    q->why_not = rc == -ENOSYS ? "io_uring not in this kernel"
                 : rc == -EPERM || rc == -EACCES ? "io_uring not permitted here"
                                                 : "io_uring could not be set up";
}
#endif

struct sendq *sendq_new(bool use_uring, const char **why_not)
{
    struct sendq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->want_uring = use_uring;
#ifdef HAVE_LIBURING
    q->why_not = use_uring ? NULL : "turned off";
#else
    q->why_not = "built without liburing";
    q->ring_state = -1;
#endif
    if (!use_uring)
        q->ring_state = -1;
#ifdef HAVE_LIBURING
    if (q->ring_state == 0)
        ring_start(q);
#endif
    if (why_not != NULL)
        *why_not = q->why_not;
    return q;
}

void sendq_free(struct sendq *q)
{
    if (q == NULL)
        return;
#ifdef HAVE_LIBURING
    if (q->ring_state == 1)
        io_uring_queue_exit(&q->ring);
#endif
    free(q);
}

bool sendq_batched(const struct sendq *q)
{
    return q->ring_state >= 0;
}

int sendq_add(struct sendq *q, int fd, const struct iovec *iov, int iovcnt, int flags)
{
    if (q->n == SENDQ_MAX_MSGS || iovcnt < 0 || (size_t)iovcnt > SENDQ_MAX_IOV - q->niov)
        return -1;
    size_t i = q->n++;
    struct iovec *v = q->iov + q->niov;
    memcpy(v, iov, (size_t)iovcnt * sizeof(*iov));
    q->niov += (size_t)iovcnt;
    memset(&q->msg[i], 0, sizeof(q->msg[i]));
    q->msg[i].msg_iov = v;
    q->msg[i].msg_iovlen = (size_t)iovcnt;
    q->fd[i] = fd;
    q->flags[i] = flags;
    q->res[i] = RES_PENDING;
    return (int)i;
}

size_t sendq_count(const struct sendq *q)
{
    return q->n;
}

ssize_t sendq_result(const struct sendq *q, int slot)
{
    if (slot < 0 || (size_t)slot >= q->n)
        return -EINVAL;
    return q->res[slot];
}

void sendq_reset(struct sendq *q)
{
    q->n = 0;
    q->niov = 0;
}

unsigned long long sendq_msgs(const struct sendq *q)
{
    return q->msgs;
}

unsigned long long sendq_calls(const struct sendq *q)
{
    return q->calls;
}

static void send_one(struct sendq *q, size_t i)
{
    ssize_t n;
    do
        n = sendmsg(q->fd[i], &q->msg[i], q->flags[i]);
    while (n < 0 && errno == EINTR);
    q->res[i] = n < 0 ? -errno : n;
    q->calls++;
}

#ifdef HAVE_LIBURING

/* Takes every completion there is; returns how many are in so far. */
static size_t ring_reap(struct sendq *q, size_t got)
{
    struct io_uring_cqe *cqe;
    while (got < q->n && io_uring_peek_cqe(&q->ring, &cqe) == 0) {
        uint64_t i = cqe->user_data;
        if (i < q->n)
            q->res[i] = cqe->res;
        io_uring_cqe_seen(&q->ring, cqe);
        got++;
    }
    return got;
}

/* False if the ring failed before taking every message (*taken says how
 * many it took): the caller gives the ring up and sends the rest by
 * sendmsg().  A message the kernel took whose completion cannot be read
 * is reported as -EIO: its bytes may or may not have gone, so the caller
 * must drop that connection rather than send them again. */
static bool ring_submit(struct sendq *q, size_t *taken)
{
    for (size_t i = 0; i < q->n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
        if (sqe == NULL)                /* cannot happen: the ring holds a full batch */
            return false;
        io_uring_prep_sendmsg(sqe, q->fd[i], &q->msg[i], (unsigned)q->flags[i]);
        sqe->user_data = i;
    }
    size_t got = 0;
    *taken = 0;
    while (*taken < q->n) {
        int rc = io_uring_submit_and_wait(&q->ring, (unsigned)(q->n - *taken));
        q->calls++;
        if (rc > 0)
            *taken += (size_t)rc;
        else if (rc == 0 || (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY))
            break;
        got = ring_reap(q, got);
    }
    while (got < *taken) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&q->ring, &cqe);
        q->calls++;
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
            for (size_t i = 0; i < *taken; i++)
                if (q->res[i] == RES_PENDING)
                    q->res[i] = -EIO;
            return false;
        }
        got = ring_reap(q, got);
    }
    return *taken == q->n;
}
#endif

void sendq_submit(struct sendq *q)
{
    if (q->n == 0)
        return;
    q->msgs += q->n;
#ifdef HAVE_LIBURING
    if (q->ring_state == 1 && q->n > 1) {
        size_t taken = 0;
        if (ring_submit(q, &taken))
            return;
        /* The kernel refused the ring after all (a seccomp filter on
         * io_uring_enter, say): what it did not take goes one by one, and
         * so does everything from now on. */
        io_uring_queue_exit(&q->ring);
        q->ring_state = -1;
        q->why_not = "io_uring failed";
        for (size_t i = taken; i < q->n; i++)
            send_one(q, i);
        return;
    }
#endif
    for (size_t i = 0; i < q->n; i++)
        send_one(q, i);
}
