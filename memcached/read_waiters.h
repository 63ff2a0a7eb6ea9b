/* read_waiters.h - the reads an engine holds back (engine_ops.read_wait)
 * until it can serve them.
 *
 * An engine that cannot answer a read yet (units not rebuilt, a store that
 * may not be the group's) keeps the connection's done callback here and
 * calls read_waiters_wake when that changes: every waiting connection
 * parses its read again, and may wait again.  One list, in the order the
 * reads came. */
#ifndef READ_WAITERS_H
#define READ_WAITERS_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

struct read_waiter {
    eng_done_fn done;
    void *cookie;
};

struct read_waiters {
    struct read_waiter *w;
    size_t n, cap;
    struct read_waiter *spare;    /* the next wake's empty list */
    size_t spare_cap;
};

/* Room for n waiting reads without allocating.  0, or -1 when out of
 * memory. */
int read_waiters_reserve(struct read_waiters *q, size_t n);
/* What an engine reserves: one read per connection the server allows
 * (engine_config.max_conns; a connection has at most one read waiting), so
 * that a read never has to be served because memory ran out; at most
 * READ_WAITERS_RESERVE_MAX (32 bytes each: -c 1048576 would otherwise take
 * 32 MB), beyond which the list grows as reads wait. */
#define READ_WAITERS_RESERVE_MAX 16384
int read_waiters_reserve_conns(struct read_waiters *q, int max_conns);
/* Adds one; false when out of memory (the read cannot wait): only beyond
 * what was reserved. */
bool read_waiters_add(struct read_waiters *q, eng_done_fn done, void *cookie);
/* Calls every waiter once, detached first: a woken read may register anew
 * (in the other list, so the reserve holds). */
void read_waiters_wake(struct read_waiters *q);
/* Frees the list without calling anyone (the server is going away). */
void read_waiters_free(struct read_waiters *q);

#endif
