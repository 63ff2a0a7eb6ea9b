/* read_waiters.c - the reads an engine holds back until it can serve them
 * (read_waiters.h).
 *
 * Two arrays take turns: a wake detaches the one holding the waiters and
 * puts the other, empty, in its place, so that the reads it wakes may wait
 * again; the detached one is the next spare.  With both reserved for every
 * connection the server allows, no wait ever allocates. */
#include "config.h"

#include <stdlib.h>

#include "read_waiters.h"

static int grow(struct read_waiter **w, size_t *cap, size_t want)
{
    if (*cap >= want)
        return 0;
    struct read_waiter *n = realloc(*w, want * sizeof(*n));
    if (!n)
        return -1;
    *w = n;
    *cap = want;
    return 0;
}

int read_waiters_reserve(struct read_waiters *q, size_t n)
{
    if (n == 0)
        return 0;
    return grow(&q->w, &q->cap, n) == 0 && grow(&q->spare, &q->spare_cap, n) == 0 ? 0 : -1;
}

int read_waiters_reserve_conns(struct read_waiters *q, int max_conns)
{
    if (max_conns <= 0)
        return 0;
    return read_waiters_reserve(q, max_conns < READ_WAITERS_RESERVE_MAX ? (size_t)max_conns
                                                                        : READ_WAITERS_RESERVE_MAX);
}

bool read_waiters_add(struct read_waiters *q, eng_done_fn done, void *cookie)
{
    if (q->n == q->cap && grow(&q->w, &q->cap, q->cap ? q->cap * 2 : 16) != 0)
        return false;
    q->w[q->n++] = (struct read_waiter){ done, cookie };
    return true;
}

void read_waiters_wake(struct read_waiters *q)
{
    size_t n = q->n, cap = q->cap;
    struct read_waiter *w = q->w;
    q->w = q->spare;
    q->cap = q->spare_cap;
    q->n = 0;
    q->spare = NULL;
    q->spare_cap = 0;
    struct eng_result res = { .status = ENG_SUCCESS };
    for (size_t i = 0; i < n; i++)
        w[i].done(w[i].cookie, &res);
    /* A wake from inside a woken read took the spare already: keep one. */
    if (q->spare == NULL) {
        q->spare = w;
        q->spare_cap = cap;
    } else {
        free(w);
    }
}

void read_waiters_free(struct read_waiters *q)
{
    free(q->w);
    free(q->spare);
    *q = (struct read_waiters){ 0 };
}
