/* writeq.h - the write queue of a replicating engine (a data process or a
 * primary): mutations that cannot proceed yet (their key has a record in
 * flight, space or backlog is not free yet, a flush is in progress) wait here
 * in arrival order, with copies of their key and value, and are retried
 * oldest first whenever the engine's situation changes. */
#ifndef REPL_WRITEQ_H
#define REPL_WRITEQ_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"

struct writeq_entry {
    struct writeq_entry *next;
    struct eng_mutation m;    /* key and data point into buf */
    eng_done_fn done;         /* NULL for the engine's own mutations */
    void *cookie;
    char buf[];
};

struct writeq {
    struct writeq_entry *head, *tail;
    size_t len;
};

static inline bool writeq_empty(const struct writeq *q)
{
    return q->head == NULL;
}

/* Append a copy of m; false when out of memory. */
bool writeq_push(struct writeq *q, const struct eng_mutation *m, eng_done_fn done, void *cookie);

/* What retrying an entry came to. */
enum writeq_retry {
    WQ_WAIT,      /* still cannot proceed: it stays at the head, draining stops */
    WQ_ANSWER,    /* finished now: answer it with *res */
    WQ_SENT       /* a record carries it: the engine answers when it commits */
};

/* Try entry e again (the entry is still queued; do not answer it here). */
typedef enum writeq_retry (*writeq_retry_fn)(void *ctx, const struct writeq_entry *e,
                                             struct eng_result *res);

/* Retry entries oldest first until one must wait.  True if the queue is
 * empty afterwards. */
bool writeq_drain(struct writeq *q, writeq_retry_fn retry, void *ctx);

/* Answer every entry with res and empty the queue. */
void writeq_fail_all(struct writeq *q, const struct eng_result *res);

/* Free every entry without answering (engine shutdown). */
void writeq_destroy(struct writeq *q);

#endif
