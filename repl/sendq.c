/* sendq.c - batched socket writes (sendq.h): many sockets' messages in one
 * io_uring submission, or one sendmsg() each where io_uring is not there.
 *
 * The ring is created by sendq_start, which must therefore run in the
 * thread that submits: it is set up for a single issuer with deferred task work
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
/* Submissions or waits interrupted (EINTR) or refused for the moment
 * (EAGAIN, EBUSY) in a row before the ring is given up. */
#define SUBMIT_TRIES 16

struct sendq {
    bool want_uring;
    struct sendq_writer *writers;   /* listed for the next sendq_flush */
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

struct sendq *sendq_new(bool use_uring)
{
    struct sendq *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->want_uring = use_uring;
    q->why_not = "not started";
    return q;
}

/* COCYTUS_NO_IO_URING=1 in the environment turns batching off for every
 * process a supervisor starts, without touching their command lines. */
static bool env_says_off(void)
{
    const char *v = getenv("COCYTUS_NO_IO_URING");
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

bool sendq_start(struct sendq *q, const char **why_not)
{
    if (q->ring_state == 0 && q->want_uring && env_says_off()) {
        q->ring_state = -1;
        q->why_not = "turned off by COCYTUS_NO_IO_URING";
    }
    if (q->ring_state == 0) {
#ifdef HAVE_LIBURING
        if (q->want_uring) {
            q->why_not = NULL;
            ring_start(q);
        } else {
            q->ring_state = -1;
            q->why_not = "turned off";
        }
#else
        q->ring_state = -1;
        q->why_not = q->want_uring ? "built without liburing" : "turned off";
#endif
    }
    if (why_not != NULL)
        *why_not = q->why_not;
    return q->ring_state == 1;
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
    return q != NULL && q->ring_state == 1;
}

int sendq_add(struct sendq *q, int fd, const struct iovec *iov, int iovcnt, int flags)
{
    if (q->n == SENDQ_MAX_MSGS || iovcnt < 0 || iovcnt > SENDQ_MSG_MAX_IOV ||
        (size_t)iovcnt > SENDQ_MAX_IOV - q->niov)
        return -1;
    size_t i = q->n++;
    struct iovec *v = q->iov + q->niov;
    if (v != iov)                   /* sendq_flush's writers fill the arena in place */
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

size_t sendq_msg_bytes(const struct sendq *q, int slot)
{
    size_t n = 0;
    if (slot < 0 || (size_t)slot >= q->n)
        return 0;
    for (size_t i = 0; i < q->msg[slot].msg_iovlen; i++)
        n += q->msg[slot].msg_iov[i].iov_len;
    return n;
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
    for (int tries = 0; *taken < q->n && tries < SUBMIT_TRIES; tries++) {
        int rc = io_uring_submit_and_wait(&q->ring, (unsigned)(q->n - *taken));
        q->calls++;
        if (rc > 0)
            *taken += (size_t)rc;
        else if (rc == 0 || (rc != -EINTR && rc != -EAGAIN && rc != -EBUSY))
            break;
        got = ring_reap(q, got);
    }
    for (int tries = 0; got < *taken; tries++) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&q->ring, &cqe);
        q->calls++;
        if (rc < 0 && ((rc != -EINTR && rc != -EAGAIN) || tries >= SUBMIT_TRIES)) {
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

/* ---- writers ---- */

void sendq_writer_init(struct sendq_writer *wr, sendq_prepare_fn prepare, sendq_sent_fn sent,
                       sendq_complete_fn complete)
{
    memset(wr, 0, sizeof(*wr));
    wr->prepare = prepare;
    wr->sent = sent;
    wr->complete = complete;
    wr->slot = -1;
}

bool sendq_want(struct sendq *q, struct sendq_writer *wr)
{
    if (!sendq_batched(q))
        return false;
    if (!wr->listed) {
        wr->listed = true;
        wr->next = q->writers;
        q->writers = wr;
    }
    return true;
}

void sendq_flush(struct sendq *q)
{
    struct sendq_writer *list = q->writers;
    q->writers = NULL;
    if (list == NULL)
        return;
    sendq_reset(q);
    for (struct sendq_writer *wr = list; wr; wr = wr->next) {
        wr->slot = -1;
        int fd = -1;
        size_t room = SENDQ_MAX_IOV - q->niov;
        int max = room > SENDQ_MSG_MAX_IOV ? SENDQ_MSG_MAX_IOV : (int)room;
        int n = max > 0 && q->n < SENDQ_MAX_MSGS ? wr->prepare(wr, &fd, q->iov + q->niov, max)
                                                 : 0;
        if (n > 0)
            wr->slot = sendq_add(q, fd, q->iov + q->niov, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    sendq_submit(q);
    for (struct sendq_writer *wr = list; wr; wr = wr->next)
        if (wr->slot >= 0 && q->res[wr->slot] > 0)
            wr->sent(wr, (size_t)q->res[wr->slot]);
    while (list) {
        struct sendq_writer *wr = list;
        list = wr->next;
        wr->next = NULL;
        wr->listed = false;
        int slot = wr->slot;
        wr->slot = -1;
        wr->complete(wr, slot >= 0, slot >= 0 ? q->res[slot] : 0);
    }
}
