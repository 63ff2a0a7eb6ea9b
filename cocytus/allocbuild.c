/* allocbuild.c - an allocator built from a set of used pieces in a thread
 * of its own (see allocbuild.h).
 *
 * The thread runs pieceset_build() and writes one byte to a pipe; the read
 * end is an event on the caller's loop, whose callback passes the news on.
 * Nothing is shared while the thread runs but the set, which both sides
 * only read; the result is read after pthread_join(), which orders it. */
#include "config.h"

#include "allocbuild.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct alloc_build {
    const struct pieceset *set;
    void (*done)(void *ctx);
    void *ctx;
    int fds[2];               /* the thread writes [1] once; the loop reads [0] */
    struct event *ev;
    pthread_t thread;
    bool running;             /* started and not joined yet */
    /* Written by the thread, read after the join. */
    struct dalloc *result;
    int err;
    uint64_t us;
};

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

struct dalloc *alloc_build_now(const struct pieceset *set, int *err, uint64_t *us)
{
    uint64_t from = now_us();
    struct dalloc *a = pieceset_build(set);
    *err = a ? 0 : errno;
    *us = now_us() - from;
    return a;
}

static void *build_main(void *arg)
{
    struct alloc_build *b = arg;
    b->result = alloc_build_now(b->set, &b->err, &b->us);
    char byte = 1;
    while (write(b->fds[1], &byte, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void on_built(evutil_socket_t fd, short what, void *arg)
{
    struct alloc_build *b = arg;
    char byte;
    (void)what;
    if (read(fd, &byte, 1) != 1)
        return;   /* spurious: the byte is still to come */
    b->done(b->ctx);
}

static void release(struct alloc_build *b)
{
    if (b->ev)
        event_free(b->ev);
    if (b->fds[0] >= 0)
        close(b->fds[0]);
    if (b->fds[1] >= 0)
        close(b->fds[1]);
    free(b);
}

struct alloc_build *alloc_build_start(struct event_base *base, const struct pieceset *set,
                                      void (*done)(void *ctx), void *ctx)
{
    struct alloc_build *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->set = set;
    b->done = done;
    b->ctx = ctx;
    b->fds[0] = b->fds[1] = -1;
    if (pipe2(b->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        int saved = errno;
        release(b);
        errno = saved;
        return NULL;
    }
    b->ev = event_new(base, b->fds[0], EV_READ | EV_PERSIST, on_built, b);
    if (b->ev == NULL || event_add(b->ev, NULL) != 0) {
        release(b);
        errno = ENOMEM;
        return NULL;
    }
    /* The thread takes no signal: they stay the event loop's. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&b->thread, NULL, build_main, b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        release(b);
        errno = rc;
        return NULL;
    }
    b->running = true;
    return b;
}

struct dalloc *alloc_build_finish(struct alloc_build *b, int *err, uint64_t *us)
{
    pthread_join(b->thread, NULL);
    struct dalloc *a = b->result;
    *err = b->err;
    *us = b->us;
    release(b);
    return a;
}

void alloc_build_cancel(struct alloc_build *b)
{
    if (b == NULL)
        return;
    if (b->running) {
        pthread_join(b->thread, NULL);
        dalloc_destroy(b->result);
    }
    release(b);
}
