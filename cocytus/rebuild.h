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
 * (nothing in flight) and, on the new link, before any record above x0,
 * sends BEGIN.  Writes go on from x0: every later record reaches the
 * replica, which replays its ops on its table and pieces exactly as a
 * parity process always does.
 *
 * The metadata (used pieces and table entries) follows in META messages
 * while the source keeps writing: it walks its allocator by offset and its
 * table by hash bucket, a few messages per event-loop pass, so a table of
 * millions of keys never holds writes (before 2026-12, writes waited until
 * the whole table was on the link).  A META message says what each of its
 * pieces and entries is after the records the source sent before it, which
 * are exactly the records the replica received before it on the same link;
 * the replica applies it right after applying those records (it keeps the
 * message until then: rb_meta_arrive, rb_meta_catch_up), and a piece or
 * entry in it replaces the replica's.  Records after it replay on top.  Why
 * that ends in the source's state: for a piece or key, the replica's final
 * value is the effect of the last record op on it after x0, if there is
 * one, else the value a META message carried, which is the x0 value since
 * nothing changed it.  Until META_DONE (the walk is over) the replica is
 * lenient about ops on things it has not been sent yet: a FREE or DEL of
 * what it does not hold is skipped, an ALLOC where a piece starts replaces
 * it, a PUT's piece is not checked (meta_replay_op's lenient mode).  The
 * source leaves out entries with a record op in flight (their record
 * carries their state) and walks no entry while a flush is in flight.
 *
 * Region bytes follow unit by unit (UNITS messages), each tagged with the
 * source's committed xid t at the moment it was read: the region then holds
 * exactly the effect of records up to t.  The replica applies a record's
 * delta to a unit only if the unit has arrived and the record's xid is above
 * the unit's t; otherwise the unit's bytes include (or will include) that
 * record.  This holds whatever the order of units, records and stable-xid
 * notices on the link, so the source needs no "miss bits" that must be
 * sent before a record (the paper's rule): the xid tags give the same
 * guarantee.  Units at or beyond the source's end (no byte written by the
 * time the replica's link came up) are zero at x0 and count as arrived with
 * t = x0.  END closes it.
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
    RB_END = 35,       /* units sent */
    RB_META_DONE = 36, /* every piece and entry was sent */
    RB_TAKEN = 37      /* replica -> source (FT_REPLY): messages taken */
};

/* Payload bytes a META message is filled up to. */
#define RB_META_CHUNK (60u * 1024u)
/* Bytes of region per UNITS message. */
#define RB_UNITS_CHUNK (16u * 4096u)

bool rb_is_rebuild(const uint8_t *payload, size_t len);
uint8_t rb_kind_of(const uint8_t *payload, size_t len);

/* ---- the receiving side ---- */

/* A META or META_DONE message kept until the records before it are
 * applied. */
struct rb_held {
    struct rb_held *next;
    uint64_t after;          /* the last record received before it */
    size_t len;
    uint8_t bytes[];
};

/* What one source's copy has delivered: which units of its region arrived,
 * and as of which xid; the metadata messages not applied yet. */
struct rb_units {
    size_t nunits;
    uint64_t *t;             /* UINT64_MAX: not arrived */
    size_t arrived;
    bool begun, ended;
    bool meta_done;          /* META_DONE applied: replay is strict again */
    uint64_t base;           /* x0 */
    uint64_t bytes;          /* unit bytes received */
    uint64_t taken;          /* META, META_DONE and UNITS messages arrived */
    uint64_t meta_bytes;     /* bytes of the META and META_DONE messages arrived */
    struct rb_held *held, *held_tail;
    size_t held_bytes;
};

int rb_units_init(struct rb_units *u, uint64_t region_size);
void rb_units_destroy(struct rb_units *u);
/* BEGIN: units from `end` on are zero as of x0. */
void rb_units_begin(struct rb_units *u, uint64_t x0, uint64_t end);
static inline bool rb_units_complete(const struct rb_units *u)
{
    return u->begun && u->ended && u->meta_done && u->arrived == u->nunits;
}

/* Replay of the source's records is lenient until the metadata is all
 * applied (see the top of this file). */
static inline bool rb_meta_lenient(const struct rb_units *u)
{
    return u != NULL && u->begun && !u->meta_done;
}

/* A META or META_DONE message arrived right after record `after`, with
 * every record up to `applied` applied: it is applied to (t, ps) now if
 * applied >= after, else kept for rb_meta_catch_up.  0, or -1 with a
 * message in err (malformed, out of memory). */
int rb_meta_arrive(struct rb_units *u, uint64_t after, uint64_t applied, const uint8_t *p,
                   size_t len, struct meta_table *t, struct pieceset *ps, char *err,
                   size_t errlen);
/* Records up to `applied` are applied: apply the kept messages that came
 * after them, in order.  Call before applying record applied + 1 and after
 * every apply pass.  0, or -1 with a message in err. */
int rb_meta_catch_up(struct rb_units *u, uint64_t applied, struct meta_table *t,
                     struct pieceset *ps, char *err, size_t errlen);

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
/* META: add every piece to ps (replacing one that starts at the same
 * offset) and put every entry in t (replacing the key's).  0, or -1 with a
 * message in err (malformed, or a piece outside the region; an overlap
 * shows when the set is built into an allocator, pieceset.h). */
int rb_apply_meta(const uint8_t *p, size_t len, struct meta_table *t, struct pieceset *ps,
                  char *err, size_t errlen);
/* UNITS: *t, *off and the bytes; 0 or -1 when malformed (not whole units,
 * beyond region_size). */
int rb_decode_units(const uint8_t *p, size_t len, uint64_t region_size, uint64_t *t,
                    uint64_t *off, const uint8_t **bytes, uint32_t *nbytes);
/* Mark the units of a UNITS message arrived as of t (units already there
 * are left alone: the caller must not add their bytes twice), and count
 * the message taken.  Calls fn(ctx, off, len) for every run that is new. */
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
void rb_msg_meta_done(struct rb_msg *m, uint64_t pieces, uint64_t entries);
/* The replica's acknowledgement of the META, META_DONE and UNITS messages
 * it took so far: the source keeps only a few unacknowledged, so that the
 * records of the writes that go on meanwhile never queue behind much of
 * the copy.  role is the replica's (enum cluster_role's value), index its
 * index in it. */
void rb_msg_taken(struct rb_msg *m, uint8_t role, uint32_t index, uint64_t taken);
int rb_decode_taken(const uint8_t *p, size_t len, uint8_t *role, uint32_t *index,
                    uint64_t *taken);

typedef int (*rb_send_fn)(void *ctx, const uint8_t *p, size_t len);
/* Which entries a walk leaves out (their record carries them). */
typedef bool (*rb_skip_fn)(void *ctx, const struct item *e);

/* The metadata of a table and an allocator that change between steps:
 * pieces by offset (dalloc_iter_seek), then entries by bucket
 * (assoc_walk), then META_DONE.  Zero it to start. */
struct rb_meta_walk {
    size_t chunk;            /* bytes a message is filled up to; 0: RB_META_CHUNK */
    int phase;               /* 0 pieces, 1 entries, 2 done */
    uint64_t piece_next;     /* the next piece starts at or after this */
    uint64_t entry_cursor;   /* assoc_walk's */
    uint64_t pieces, entries, messages;
};

/* Send META messages of about `bytes` bytes in all (at least one message)
 * through send(ctx, ...); the last step sends META_DONE.  skip (may be
 * NULL) leaves entries out.  1 when META_DONE went, 0 when there is more,
 * -1 when out of memory or a send failed. */
int rb_meta_walk_step(struct rb_meta_walk *w, struct meta_table *t, const struct dalloc *a,
                      size_t bytes, rb_skip_fn skip, void *skip_ctx, rb_send_fn send,
                      void *ctx);
/* The whole walk at once (a table and allocator that do not change). */
int rb_send_meta(struct meta_table *t, const struct dalloc *a, rb_send_fn send, void *ctx);

#endif
