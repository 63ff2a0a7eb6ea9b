/*
 * The used pieces of a data process's allocator, as its parity processes
 * keep them: a set of (offset, size) keyed by offset.
 *
 * A parity process (and a recovery process's replica) used to replay every
 * ALLOC and FREE of its data process on a whole allocator (alloc.h), which
 * cost it about a third of its CPU: two AVL trees per piece, walked on every
 * overwrite.  It does not need them.  The data process chooses every offset
 * and the record carries it, and an allocator's state is a function of its
 * set of used pieces alone (alloc.h), so a replica only has to remember that
 * set.  An add and a remove are O(1) here.  When an allocator is needed (the
 * replica starts serving, a rebuild sends the pieces, a diagnostic asks for
 * the digest), pieceset_build() makes one from the set, identical to the data
 * process's.
 *
 * What the replica no longer checks at once: that a new piece does not
 * overlap an existing one that starts elsewhere (a piece starting at the same
 * offset is refused, and so is one that would make the pieces hold more
 * bytes than the region).  pieceset_build() refuses such a set.
 *
 * Offsets and sizes are bytes, multiples of DALLOC_GRAIN; sizes are rounded
 * as dalloc_round_size() does.  Not thread safe.
 */
#ifndef COCYTUS_PIECESET_H
#define COCYTUS_PIECESET_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

struct pieceset;

/* A set for a region of region_size bytes (a positive multiple of
 * DALLOC_GRAIN, at most DALLOC_MAX_REGION), empty.  NULL (errno EINVAL or
 * ENOMEM) on failure. */
struct pieceset *pieceset_new(uint64_t region_size);
void pieceset_destroy(struct pieceset *s);   /* NULL is accepted */
void pieceset_reset(struct pieceset *s);     /* empties it */

/* Adds the piece [off, off + round(size)).  Errors: -EINVAL (misaligned, a
 * size that does not round, or outside the region), -EEXIST (a piece already
 * starts at off), -ENOSPC (the pieces would hold more bytes than the
 * region: some overlap), -ENOMEM.  A failed call changes nothing. */
int pieceset_add(struct pieceset *s, uint64_t off, uint64_t size);

/* pieceset_add(), replacing a piece that starts at off (what a rebuild's
 * metadata says a piece is now, rebuild.h).  Errors as pieceset_add()'s
 * but -EEXIST. */
int pieceset_put(struct pieceset *s, uint64_t off, uint64_t size);

/* Removes the piece starting at off and stores its size in *size (if not
 * NULL).  Errors: -ENOENT. */
int pieceset_remove(struct pieceset *s, uint64_t off, uint64_t *size);

/* Size of the piece starting at off, or 0 if none does. */
uint64_t pieceset_size_of(const struct pieceset *s, uint64_t off);

uint64_t pieceset_region_size(const struct pieceset *s);
uint64_t pieceset_used_bytes(const struct pieceset *s);
uint64_t pieceset_count(const struct pieceset *s);
/* Heap bytes of the set's table. */
size_t pieceset_meta_bytes(const struct pieceset *s);

/* The pieces in address order, in a malloc'd array (*out, *n; *out is NULL
 * when the set is empty).  Returns 0 or -ENOMEM.  A radix sort: this is on
 * the failover path (pieceset_build). */
int pieceset_sorted(const struct pieceset *s, struct dalloc_span **out, size_t *n);

/* An allocator for the set's region whose used pieces are exactly the set's
 * (dalloc_from_used()).  NULL with errno ENOSPC if two pieces overlap,
 * ENOMEM if out of memory. */
struct dalloc *pieceset_build(const struct pieceset *s);

/* The digest (dalloc_digest()) of the allocator pieceset_build() would
 * make, without making it: a sort of the pieces and one walk.  0, or
 * -ENOSPC (two pieces overlap) or -ENOMEM. */
int pieceset_digest(const struct pieceset *s, uint64_t *digest);
/* The same as `cocytus meta` reports it: 16 hex digits, or "overlap" or
 * "nomem" when there is no digest; buf holds PIECESET_DIGEST_TEXT bytes. */
#define PIECESET_DIGEST_TEXT 17
void pieceset_digest_text(const struct pieceset *s, char *buf);
/* Why pieceset_build() failed, from its errno, for a log line. */
const char *pieceset_build_failure(int err);

#endif
