/* rebuild.h - copying a data process's state to a new replica while the
 * data process keeps writing (paper 4.2, "data migration").
 *
 * Two kinds of replica are rebuilt this way:
 *   - a parity process that restarted empty, or a recovery process going
 *     back to parity: every logical data process of the group sends it its
 *     state, and it accumulates coef * data into its parity region;
 *   - a replacement data process: the recovery process that serves the dead
 *     one sends it the served state, and it keeps the data as is (coef 1).
 *
 * The source joins the replica to its record stream at a quiet point x0
 * (nothing in flight: its table, allocator and region are exactly the
 * effect of records 1..x0) and, on the new link, before any record above
 * x0, sends BEGIN and the metadata (allocator pieces and table entries as
 * of x0).  The replica replays later records' ops on that table and
 * allocator exactly as a parity process always does.
 *
 * Region bytes follow unit by unit (UNITS messages), each tagged with the
 * source's committed xid t at the moment it was read: the region then holds
 * exactly the effect of records up to t.  The replica applies a record's
 * delta to a unit only if the unit has arrived and the record's xid is above
 * the unit's t; otherwise the unit's bytes include (or will include) that
 * record.  This holds whatever the order of units, records and stable-xid
 * notices on the link, so the source needs no "miss bits" that must be
 * sent before a record (the paper's rule): the xid tags give the same
 * guarantee.  Units at or beyond the source's end (no byte ever written)
 * are zero at x0 and count as arrived with t = x0.  END closes it.
 *
 * Messages travel as FT_REQUEST frames on the source's link; their payload
 * starts like recovery messages (u64 id = 0, u8 kind) with kinds of their
 * own; the rest is little-endian (docs/wire-format.md section 7). */
#ifndef COCYTUS_REBUILD_H
#define COCYTUS_REBUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta.h"

struct dalloc;
struct pieceset;

enum rb_kind {
    RB_BEGIN = 32,     /* source, x0, end, max cas */
    RB_META = 33,      /* pieces and entries */
    RB_UNITS = 34,     /* t, offset, bytes (whole units) */
    RB_END = 35        /* units sent */
};

/* Payload bytes a META message is filled up to. */
#define RB_META_CHUNK (60u * 1024u)
/* Bytes of region per UNITS message. */
#define RB_UNITS_CHUNK (16u * 4096u)

bool rb_is_rebuild(const uint8_t *payload, size_t len);
uint8_t rb_kind_of(const uint8_t *payload, size_t len);

/* ---- the receiving side ---- */

/* Which units of one source's region arrived, and as of which xid. */
struct rb_units {
    size_t nunits;
    uint64_t *t;             /* UINT64_MAX: not arrived */
    size_t arrived;
    bool begun, ended;
    uint64_t base;           /* x0 */
    uint64_t bytes;          /* unit bytes received */
};

int rb_units_init(struct rb_units *u, uint64_t region_size);
void rb_units_destroy(struct rb_units *u);
/* BEGIN: units from `end` on are zero as of x0. */
void rb_units_begin(struct rb_units *u, uint64_t x0, uint64_t end);
static inline bool rb_units_complete(const struct rb_units *u)
{
    return u->begun && u->ended && u->arrived == u->nunits;
}

/* For every run of [off, off+len) whose delta must be applied for a record
 * with this xid, call fn(ctx, run_off, run_len). */
void rb_units_filter(const struct rb_units *u, uint64_t xid, uint64_t off, uint64_t len,
                     void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx);

struct rb_begin {
    uint32_t source;
    uint64_t x0, end, max_cas;
    uint64_t attempt;        /* the coordinator's rebuild attempt; 0: a migration's copy */
};

int rb_decode_begin(const uint8_t *p, size_t len, struct rb_begin *b);
/* META: add every piece to ps and put every entry in t.  0, or -1 with a
 * message in err (malformed, or a piece outside the region or where one
 * already starts; an overlap that starts elsewhere shows when the set is
 * built into an allocator, pieceset.h). */
int rb_apply_meta(const uint8_t *p, size_t len, struct meta_table *t, struct pieceset *ps,
                  char *err, size_t errlen);
/* UNITS: *t, *off and the bytes; 0 or -1 when malformed (not whole units,
 * beyond region_size). */
int rb_decode_units(const uint8_t *p, size_t len, uint64_t region_size, uint64_t *t,
                    uint64_t *off, const uint8_t **bytes, uint32_t *nbytes);
/* Mark the units of a UNITS message arrived as of t (units already there
 * are left alone: the caller must not add their bytes twice).  Calls
 * fn(ctx, off, len) for every run that is new. */
void rb_units_arrive(struct rb_units *u, uint64_t t, uint64_t off, uint64_t len,
                     void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx);

/* ---- the sending side ---- */

/* Builds the messages into a growing buffer; the caller sends each
 * message (rb_msg_bytes) as one REQUEST frame. */
struct rb_msg {
    uint8_t *buf;
    size_t len, cap;
    uint32_t count;          /* META: records in it */
    bool oom;
};

void rb_msg_free(struct rb_msg *m);
void rb_msg_begin(struct rb_msg *m, const struct rb_begin *b);
void rb_msg_meta_start(struct rb_msg *m);
void rb_msg_meta_piece(struct rb_msg *m, uint64_t off, uint64_t size);
void rb_msg_meta_entry(struct rb_msg *m, const struct item *e);
/* Patch the count into a META message; false if it holds nothing. */
bool rb_msg_meta_finish(struct rb_msg *m);
void rb_msg_units(struct rb_msg *m, uint64_t t, uint64_t off, const uint8_t *bytes,
                  uint32_t len);
void rb_msg_end(struct rb_msg *m, uint64_t units);

/* Send the whole metadata of (t, a) as META messages through send(ctx,
 * bytes, len).  0, or -1 (out of memory, or send failed). */
int rb_send_meta(struct meta_table *t, const struct dalloc *a,
                 int (*send)(void *ctx, const uint8_t *p, size_t len), void *ctx);

#endif
