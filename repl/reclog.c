/* reclog.c - an xid-ordered FIFO of encoded records (reclog.h).
 *
 * A singly linked list with head and tail pointers: pushes append at the
 * tail with strictly increasing xids, so the list is sorted and every
 * operation walks from the head only as far as it needs.  Each entry is one
 * malloc holding the link, the xid and the encoded bytes.  reclog_apply
 * decodes an entry into an ops array on the stack when it fits
 * (APPLY_STACK_OPS) and into a heap array otherwise. */
#include "reclog.h"

#include <stdlib.h>
#include <string.h>

#define APPLY_STACK_OPS 32

void reclog_init(struct reclog *l)
{
    memset(l, 0, sizeof(*l));
}

static void entry_free(struct reclog *l, struct reclog_entry *e)
{
    l->count--;
    l->bytes -= e->len;
    free(e);
}

/* Remove the head entry and free it. */
static void pop_head(struct reclog *l)
{
    struct reclog_entry *e = l->head;
    l->head = e->next;
    if (l->head == NULL)
        l->tail = NULL;
    entry_free(l, e);
}

void reclog_destroy(struct reclog *l)
{
    while (l->head != NULL)
        pop_head(l);
    reclog_init(l);
}

int reclog_push(struct reclog *l, uint64_t xid, const uint8_t *enc, size_t len)
{
    if (xid <= l->last_xid || len > UINT32_MAX)
        return -1;
    struct reclog_entry *e = malloc(sizeof(*e) + len);
    if (e == NULL)
        return -1;
    e->next = NULL;
    e->xid = xid;
    e->len = (uint32_t)len;
    if (len > 0)
        memcpy(e->bytes, enc, len);
    if (l->tail != NULL)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
    l->last_xid = xid;
    l->count++;
    l->bytes += len;
    return 0;
}

/* Decode e and call fn on it.  The ops array lives on the stack for small
 * records, on the heap for large ones.  -1 if e does not decode (or the
 * heap array cannot be had), else fn's result. */
static int apply_entry(const struct reclog_entry *e, reclog_apply_fn fn, void *ctx)
{
    struct rec_op stack_ops[APPLY_STACK_OPS];
    struct rec_op *ops = stack_ops;
    struct record r;
    uint32_t nops = rec_peek_nops(e->bytes, e->len);
    int rc;

    if (nops > APPLY_STACK_OPS) {
        ops = malloc((size_t)nops * sizeof(*ops));
        if (ops == NULL)
            return -1;
    }
    if (rec_decode(e->bytes, e->len, &r, ops, nops) < 0)
        rc = -1;
    else
        rc = fn(ctx, &r);
    if (ops != stack_ops)
        free(ops);
    return rc;
}

int reclog_apply(struct reclog *l, uint64_t upto, reclog_apply_fn fn, void *ctx)
{
    while (l->head != NULL && l->head->xid <= upto) {
        int rc = apply_entry(l->head, fn, ctx);
        if (rc != 0)
            return rc;
        pop_head(l);
    }
    return 0;
}

void reclog_drop_upto(struct reclog *l, uint64_t upto)
{
    while (l->head != NULL && l->head->xid <= upto)
        pop_head(l);
}

void reclog_truncate_after(struct reclog *l, uint64_t x)
{
    struct reclog_entry *keep = NULL;   /* last entry with xid <= x */
    struct reclog_entry *e = l->head;

    while (e != NULL && e->xid <= x) {
        keep = e;
        e = e->next;
    }
    while (e != NULL) {
        struct reclog_entry *next = e->next;
        entry_free(l, e);
        e = next;
    }
    if (keep != NULL)
        keep->next = NULL;
    else
        l->head = NULL;
    l->tail = keep;
    if (l->last_xid > x)
        l->last_xid = x;
}

void reclog_visit_after(const struct reclog *l, uint64_t after, reclog_visit_fn fn, void *ctx)
{
    for (const struct reclog_entry *e = l->head; e != NULL; e = e->next) {
        if (e->xid > after)
            fn(ctx, e);
    }
}
