/* reclog.h - an xid-ordered log of encoded records.
 *
 * The same structure serves both ends of a link: a data process (or primary)
 * keeps every record it sent until it is stable, to resend after a
 * reconnect; a parity process (or backup) keeps every record it received
 * until the piggybacked stable xid says it may be applied.  Records are
 * stored as encoded bytes (one malloc each) in a FIFO. */
#ifndef REPL_RECLOG_H
#define REPL_RECLOG_H

#include <stddef.h>
#include <stdint.h>

#include "record.h"

struct reclog_entry {
    struct reclog_entry *next;
    uint64_t xid;
    uint32_t len;
    uint8_t bytes[];
};

struct reclog {
    struct reclog_entry *head, *tail;
    uint64_t last_xid;   /* xid of the newest record ever pushed (0: none);
                          * reclog_truncate_after(x) lowers it to x */
    size_t count;
    size_t bytes;
};

void reclog_init(struct reclog *l);
void reclog_destroy(struct reclog *l);
/* Append a copy of enc; xid must be greater than last_xid.  0 or -1. */
int reclog_push(struct reclog *l, uint64_t xid, const uint8_t *enc, size_t len);
/* Decode and pass every record with xid <= upto to fn, oldest first, removing
 * each after fn returns 0.  Stops at the first nonzero return (the record
 * stays) and returns it.  A stored record that does not decode also stops
 * the walk: it stays and reclog_apply returns -1.  fn must not modify the
 * log; r and its pointers are valid during the call only. */
typedef int (*reclog_apply_fn)(void *ctx, const struct record *r);
int reclog_apply(struct reclog *l, uint64_t upto, reclog_apply_fn fn, void *ctx);
/* Remove records with xid <= upto without applying them. */
void reclog_drop_upto(struct reclog *l, uint64_t upto);
/* Remove records with xid > x (recovery: discard what was not stable); the
 * next push may reuse xids above x. */
void reclog_truncate_after(struct reclog *l, uint64_t x);
/* Visit records with xid > after, oldest first (resend after reconnect). */
typedef void (*reclog_visit_fn)(void *ctx, const struct reclog_entry *e);
void reclog_visit_after(const struct reclog *l, uint64_t after, reclog_visit_fn fn, void *ctx);

#endif
