/* read_waiters.c - the reads an engine holds back until it can serve them
 * (read_waiters.h). */
#include "config.h"

#include <stdlib.h>

#include "read_waiters.h"

bool read_waiters_add(struct read_waiters *q, eng_done_fn done, void *cookie)
{
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 16;
        struct read_waiter *n = realloc(q->w, ncap * sizeof(*n));
        if (!n)
            return false;
        q->w = n;
        q->cap = ncap;
    }
    q->w[q->n++] = (struct read_waiter){ done, cookie };
    return true;
}

void read_waiters_wake(struct read_waiters *q)
{
    size_t n = q->n;
    struct read_waiter *w = q->w;
    *q = (struct read_waiters){ NULL, 0, 0 };
    struct eng_result res = { .status = ENG_SUCCESS };
    for (size_t i = 0; i < n; i++)
        w[i].done(w[i].cookie, &res);
    free(w);
}

void read_waiters_free(struct read_waiters *q)
{
    free(q->w);
    *q = (struct read_waiters){ NULL, 0, 0 };
}
