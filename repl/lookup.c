/* lookup.c - host names looked up off the event loop (lookup.h).
 *
 * One detached thread per lookup: lookups are rare (a dial of a peer
 * named by a host name, a proxy's stale name), so a thread costs nothing
 * that matters, and a thread stuck on a silent resolver holds up nobody.
 * The thread's answer reaches the loop through a pipe that the loop
 * watches; libevent needs no thread support for that.  The loop side and
 * the thread share the struct lookup, freed by whichever of them leaves
 * it last (refs): a cancelled lookup's thread may outlive its caller. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "lookup.h"

#define LOOKUP_HOST_MAX 256

struct lookup {
    pthread_mutex_t mu;
    int refs;                   /* the loop side (until done or cancelled) + the thread */
    bool cancelled;
    int fds[2];                 /* the thread writes a byte when the answer is in */
    struct event *ev;           /* the loop's read event on fds[0] */
    char host[LOOKUP_HOST_MAX];
    int port;
    int rc;                     /* the answer */
    struct addrinfo *res;
    lookup_fn fn;
    void *ctx;
};

static int resolve(const char *host, int port, int flags, struct addrinfo **res)
{
    struct addrinfo hints;
    char portstr[16];

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | flags;
    snprintf(portstr, sizeof(portstr), "%d", port);
    *res = NULL;
    return getaddrinfo(host, portstr, &hints, res);
}

int lookup_numeric(const char *host, int port, bool passive, struct addrinfo **res)
{
    return resolve(host, port, AI_NUMERICHOST | (passive ? AI_PASSIVE : 0), res);
}

int lookup_now(const char *host, int port, bool passive, struct addrinfo **res)
{
    return resolve(host, port, passive ? AI_PASSIVE : 0, res);
}

/* Drops one reference; the last frees everything. */
static void lookup_free(struct lookup *lk)
{
    if (lk->res != NULL)
        freeaddrinfo(lk->res);
    close(lk->fds[0]);
    close(lk->fds[1]);
    pthread_mutex_destroy(&lk->mu);
    free(lk);
}

static void lookup_unref(struct lookup *lk)
{
    pthread_mutex_lock(&lk->mu);
    bool last = --lk->refs == 0;
    pthread_mutex_unlock(&lk->mu);
    if (last)
        lookup_free(lk);
}

static void *lookup_thread(void *arg)
{
    struct lookup *lk = arg;
    struct addrinfo *res = NULL;
    int rc = lookup_now(lk->host, lk->port, false, &res);

    pthread_mutex_lock(&lk->mu);
    lk->rc = rc;
    lk->res = res;
    if (!lk->cancelled) {
        /* The pipe is empty (one byte per lookup): this cannot block. */
        ssize_t n;
        do
            n = write(lk->fds[1], "", 1);
        while (n < 0 && errno == EINTR);
        if (n != 1)
            fprintf(stderr, "lookup of %s: cannot wake the event loop: %s\n", lk->host,
                    strerror(errno));
    }
    pthread_mutex_unlock(&lk->mu);
    lookup_unref(lk);
    return NULL;
}

static void on_answer(evutil_socket_t fd, short what, void *arg)
{
    struct lookup *lk = arg;
    char byte;

    (void)what;
    if (read(fd, &byte, 1) != 1)
        return;                 /* spurious: the answer is not in yet */
    event_free(lk->ev);
    lk->ev = NULL;
    pthread_mutex_lock(&lk->mu);
    int rc = lk->rc;
    struct addrinfo *res = lk->res;
    lk->res = NULL;
    lookup_fn fn = lk->fn;
    void *ctx = lk->ctx;
    pthread_mutex_unlock(&lk->mu);
    lookup_unref(lk);           /* the thread has written: it is done with lk */
    fn(rc, res, ctx);
}

struct lookup *lookup_start(struct event_base *base, const char *host, int port, lookup_fn fn,
                            void *ctx)
{
    if (strlen(host) >= LOOKUP_HOST_MAX) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    struct lookup *lk = calloc(1, sizeof(*lk));
    if (lk == NULL)
        return NULL;
    if (pipe2(lk->fds, O_NONBLOCK | O_CLOEXEC) < 0) {
        free(lk);
        return NULL;
    }
    pthread_mutex_init(&lk->mu, NULL);
    lk->refs = 2;
    snprintf(lk->host, sizeof(lk->host), "%s", host);
    lk->port = port;
    lk->fn = fn;
    lk->ctx = ctx;
    lk->ev = event_new(base, lk->fds[0], EV_READ | EV_PERSIST, on_answer, lk);
    pthread_attr_t attr;
    pthread_t t;
    int rc = -1;
    if (lk->ev != NULL && event_add(lk->ev, NULL) == 0 && pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The thread takes no signal: they stay the event loop's. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&t, &attr, lookup_thread, lk);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        if (lk->ev != NULL)
            event_free(lk->ev);
        lookup_free(lk);
        errno = rc > 0 ? rc : ENOMEM;
        return NULL;
    }
    return lk;
}

void lookup_cancel(struct lookup *lk)
{
    if (lk == NULL)
        return;
    if (lk->ev != NULL)
        event_free(lk->ev);
    lk->ev = NULL;
    pthread_mutex_lock(&lk->mu);
    lk->cancelled = true;
    pthread_mutex_unlock(&lk->mu);
    lookup_unref(lk);
}
