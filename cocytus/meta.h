/* meta.h - the metadata table of a coding group: key -> where its value
 * lives in a region (offset, length) plus flags, exptime and cas.
 *
 * A data process keeps one for its own keys; a parity process keeps one per
 * data process of its group as the backup that recovery uses.  Entries reuse
 * the core's item header and hash table (memcached/items.h, assoc.h): an
 * entry is a struct item whose data holds the key followed by the 8-byte
 * region offset instead of the value, nbytes is the value length, exptime is
 * an absolute unix time (0 = never) and iflags carries META_* bits.
 * Replaying a record's operations (meta_replay_op) is the one definition of
 * what an op means, shared by every replica. */
#ifndef COCYTUS_META_H
#define COCYTUS_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "assoc.h"
#include "items.h"
#include "record.h"

struct pieceset;

enum meta_flag {
    META_PENDING = 0x10   /* data process: a record for this key is in flight */
};

struct meta_table {
    struct assoc table;
    struct item *lru_head;    /* most recently stored or read */
    struct item *lru_tail;
    size_t count;
    size_t heap_bytes;        /* malloc_usable_size of all entries */
    uint64_t value_bytes;     /* sum of nbytes */
};

int meta_init(struct meta_table *t, unsigned hashpower);
void meta_destroy(struct meta_table *t);

static inline uint64_t meta_off(const struct item *e)
{
    uint64_t off;
    memcpy(&off, e->data + e->nkey, sizeof(off));
    return off;
}

struct item *meta_find(struct meta_table *t, const char *key, size_t nkey);
/* Insert or overwrite the key's entry (an overwrite keeps the entry's
 * META_* bits) and move it to the LRU head.  NULL when out of memory. */
struct item *meta_put(struct meta_table *t, const char *key, size_t nkey, uint64_t off,
                      uint32_t nbytes, uint32_t flags, int64_t exptime, uint64_t cas);
/* Remove and free the entry; false if absent. */
bool meta_del(struct meta_table *t, const char *key, size_t nkey);
void meta_clear(struct meta_table *t);
void meta_bump(struct meta_table *t, struct item *e);

/* Order-independent digest of every entry's (key, off, nbytes, flags,
 * exptime, cas): equal tables have equal digests whatever their history. */
uint64_t meta_digest(const struct meta_table *t);
/* Visit every entry (no changes during the visit). */
void meta_iterate(struct meta_table *t, assoc_visit_fn visit, void *ctx);

/* Apply one record op to a replica table and the replica's used pieces
 * (pieceset.h).  Returns 0, or -1 with a message in err when the replica
 * disagrees with the sender (ALLOC of a piece outside the region, where one
 * already starts, or past the region's bytes; FREE of an offset where none
 * starts; PUT of a value not at the start of a piece of its rounded size;
 * DEL of a missing key): the caller must stop applying that sender's
 * records.  `lenient` while a rebuild's metadata is still arriving
 * (rebuild.h): the replica may not hold yet what an op refers to, so a FREE
 * or DEL of what it does not hold is skipped, an ALLOC where a piece starts
 * replaces that piece, and a PUT's piece is not checked. */
int meta_replay_op(struct meta_table *t, struct pieceset *ps, const struct rec_op *op,
                   bool lenient, char *err, size_t errlen);

#endif
