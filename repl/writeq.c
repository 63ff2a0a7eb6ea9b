/* writeq.c - the write queue of a replicating engine (see writeq.h). */
#include <stdlib.h>
#include <string.h>

#include "writeq.h"

bool writeq_push(struct writeq *q, const struct eng_mutation *m, eng_done_fn done, void *cookie)
{
    struct writeq_entry *e = malloc(sizeof(*e) + m->nkey + m->nbytes);
    if (!e)
        return false;
    e->next = NULL;
    e->m = *m;
    e->done = done;
    e->cookie = cookie;
    if (m->nkey)
        memcpy(e->buf, m->key, m->nkey);
    if (m->nbytes)
        memcpy(e->buf + m->nkey, m->data, m->nbytes);
    e->m.key = e->buf;
    e->m.data = e->buf + m->nkey;
    if (q->tail)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
    q->len++;
    return true;
}

/* Unlink the head; the caller frees it.  Done before answering, since an
 * answer may queue new mutations. */
static struct writeq_entry *pop_head(struct writeq *q)
{
    struct writeq_entry *e = q->head;
    q->head = e->next;
    if (!q->head)
        q->tail = NULL;
    q->len--;
    return e;
}

bool writeq_drain(struct writeq *q, writeq_retry_fn retry, void *ctx)
{
    while (q->head) {
        struct eng_result res;
        enum writeq_retry r = retry(ctx, q->head, &res);
        if (r == WQ_WAIT)
            return false;
        struct writeq_entry *e = pop_head(q);
        if (r == WQ_ANSWER && e->done)
            e->done(e->cookie, &res);
        free(e);
    }
    return true;
}

void writeq_fail_all(struct writeq *q, const struct eng_result *res)
{
    struct writeq_entry *e = q->head;
    q->head = q->tail = NULL;
    q->len = 0;
    while (e) {
        struct writeq_entry *next = e->next;
        if (e->done)
            e->done(e->cookie, res);
        free(e);
        e = next;
    }
}

void writeq_destroy(struct writeq *q)
{
    struct writeq_entry *e = q->head;
    while (e) {
        struct writeq_entry *next = e->next;
        free(e);
        e = next;
    }
    q->head = q->tail = NULL;
    q->len = 0;
}
