/*
 * Deterministic allocator for a Cocytus value region.
 *
 * The allocator hands out byte ranges ("pieces") of a region of fixed size R.
 * It never touches the region: it only returns offsets, and all of its
 * bookkeeping lives in ordinary heap memory.  Its results depend only on the
 * sequence of calls made on it, never on pointer values, so two instances
 * given the same calls return the same offsets (the design's deterministic
 * allocator, design.md section 4).
 *
 * Stronger still: the whole state is a function of the set of used pieces
 * alone (free pieces are always the maximal gaps between them), so an instance
 * rebuilt with dalloc_reserve() or dalloc_from_used() from another's used
 * pieces has the same pieces (and digest) and returns the same offsets from
 * then on; its trees may be shaped differently.  That is why a parity
 * process keeps only a data process's used pieces (pieceset.h) and builds
 * an allocator from them when it must serve in the data process's place.
 *
 * Rules:
 *   - 16-byte granularity: sizes are rounded up to a multiple of 16 and every
 *     offset is a multiple of 16.  A request of 0 bytes takes one 16-byte unit.
 *   - dalloc_alloc is best fit: the smallest free piece that is large enough,
 *     the lowest offset among equal sizes; the piece is split and the rest
 *     stays free.
 *   - dalloc_free merges the freed piece with free neighbours on both sides.
 *   - alloc, free, reserve and size_of are O(log n) in the number of pieces.
 *
 * Functions returning int return 0 on success or a negative errno value:
 *   -EINVAL  bad argument (size too large to round, misaligned offset, ...)
 *   -ENOSPC  no free piece is large enough (alloc) or the range is not free
 *            (reserve)
 *   -ENOENT  free/size_of of an offset that is not the start of a used piece
 *   -ENOMEM  the allocator could not grow its own metadata (or already
 *            holds 2^32 - 1 pieces); state unchanged
 * A failed call never changes the state.
 *
 * Not thread safe: one instance belongs to one thread (one event loop).
 */
#ifndef COCYTUS_ALLOC_H
#define COCYTUS_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Allocation unit in bytes: piece sizes and offsets are multiples of it. */
#define DALLOC_GRAIN 16

struct dalloc;

/* Largest region an allocator can manage: 2^44 bytes (16 TiB). */
#define DALLOC_MAX_REGION ((uint64_t)1 << 44)

/* Creates an allocator for a region of region_size bytes, all free.
 * region_size must be a positive multiple of DALLOC_GRAIN and at most
 * DALLOC_MAX_REGION.  Returns NULL (errno EINVAL or ENOMEM) on failure. */
struct dalloc *dalloc_new(uint64_t region_size);

/* Releases all metadata.  NULL is accepted. */
void dalloc_destroy(struct dalloc *a);

/* Frees every piece: the region becomes one free piece again. */
void dalloc_reset(struct dalloc *a);

/* Size that a request of `size` bytes occupies (rounded up to the grain,
 * at least one grain).  Returns 0 if the rounding would overflow. */
uint64_t dalloc_round_size(uint64_t size);

/* The piece a value of nbytes bytes lives in: round(max(nbytes, 1)).  A
 * data process allocates exactly this for every value and keeps it for an
 * overwrite of the same size; its parity processes check every PUT
 * against it, so both sides use this one definition. */
uint64_t dalloc_value_piece(uint64_t nbytes);

/* Allocates a piece of at least `size` bytes, best fit.  On success stores
 * its offset in *off and returns 0.  Errors: -EINVAL, -ENOSPC, -ENOMEM. */
int dalloc_alloc(struct dalloc *a, uint64_t size, uint64_t *off);

/* Frees the used piece that starts at `off`; stores its (rounded) size in
 * *freed_size if freed_size is not NULL.  Errors: -ENOENT. */
int dalloc_free(struct dalloc *a, uint64_t off, uint64_t *freed_size);

/* Marks [off, off + round(size)) used.  The range must lie inside one free
 * piece.  Used to rebuild an allocator from a list of used pieces (e.g. when
 * a new process receives metadata during migration).
 * Errors: -EINVAL (misaligned or outside the region), -ENOSPC (overlaps a
 * used piece), -ENOMEM. */
int dalloc_reserve(struct dalloc *a, uint64_t off, uint64_t size);

/* A used piece, in bytes. */
struct dalloc_span {
    uint64_t off;
    uint64_t size;
};

/* Creates an allocator for a region of region_size bytes whose used pieces
 * are exactly spans[0..n) (sizes rounded as dalloc_round_size() does),
 * which must be sorted by offset: the same state as dalloc_reserve() of
 * each, built in one pass (O(n) plus a sort of the free gaps) instead of
 * n tree updates.  Used where a replica's set of pieces becomes an
 * allocator (pieceset.h).  NULL with errno EINVAL (bad region, a span
 * misaligned or outside it), ENOSPC (two spans overlap or are out of
 * order) or ENOMEM. */
struct dalloc *dalloc_from_used(uint64_t region_size, const struct dalloc_span *spans,
                                size_t n);

/* Size of the used piece starting at `off`, or 0 if there is none. */
uint64_t dalloc_size_of(const struct dalloc *a, uint64_t off);

/* Accounting. */
uint64_t dalloc_region_size(const struct dalloc *a);
uint64_t dalloc_used_bytes(const struct dalloc *a);
uint64_t dalloc_free_bytes(const struct dalloc *a);
uint64_t dalloc_used_pieces(const struct dalloc *a);
uint64_t dalloc_free_pieces(const struct dalloc *a);
/* Size of the largest free piece (0 when the region is full): any request
 * of at most this many bytes (after rounding) will succeed. */
uint64_t dalloc_largest_free(const struct dalloc *a);
/* Heap bytes held by the allocator's metadata, counting every node it has
 * allocated (24 bytes each, one per piece, plus spares), not only those in
 * use. */
size_t dalloc_meta_bytes(const struct dalloc *a);

/* 64-bit FNV-1a digest of the region size and the address-ordered list of
 * all pieces (offset, size, used), encoded little endian.  Two instances
 * with the same state have the same digest on every platform.  O(n). */
uint64_t dalloc_digest(const struct dalloc *a);

/* The digest dalloc_digest() gives the allocator dalloc_from_used() would
 * build from these spans, without building it (O(n), no memory).  0, or
 * -EINVAL / -ENOSPC for the spans dalloc_from_used() refuses. */
int dalloc_digest_of_used(uint64_t region_size, const struct dalloc_span *spans, size_t n,
                          uint64_t *digest);

/* Validates every invariant: pieces tile [0, R) exactly in address order,
 * list links valid, no two adjacent free pieces, both AVL trees ordered and
 * balanced with correct heights, each piece in exactly the tree matching its
 * state, counters right (spare nodes included).  (Sizes and offsets are kept
 * in grains, so DALLOC_CHECK_ALIGNMENT can no longer occur.)
 * Returns DALLOC_CHECK_OK (0) or the first violation found.  O(n log n). */
enum dalloc_check_result {
    DALLOC_CHECK_OK = 0,
    DALLOC_CHECK_LIST_LINKS,     /* bad link in the address list */
    DALLOC_CHECK_TILING,         /* gap, overlap, or not ending at R */
    DALLOC_CHECK_ALIGNMENT,      /* offset or size not a grain multiple, or 0 */
    DALLOC_CHECK_UNMERGED,       /* two adjacent free pieces */
    DALLOC_CHECK_TREE_ORDER,     /* in-order keys not strictly increasing */
    DALLOC_CHECK_TREE_BALANCE,   /* wrong height or balance factor beyond 1 */
    DALLOC_CHECK_TREE_MEMBERSHIP,/* piece in the wrong tree or not found */
    DALLOC_CHECK_COUNTERS,       /* byte or piece counters disagree */
};
int dalloc_check(const struct dalloc *a);
/* Human-readable text for a dalloc_check() result. */
const char *dalloc_check_str(int result);

/* Walks pieces in address order.  The allocator must not be modified while
 * an iterator is in use.
 *
 *   struct dalloc_iter it;
 *   dalloc_iter_init(a, &it);
 *   while (dalloc_iter_next_used(&it, &off, &size)) ...
 */
struct dalloc_iter {
    /* Private. */
    const struct dalloc *a;
    uint32_t next;               /* node of the next piece, 0 at the end */
};
void dalloc_iter_init(const struct dalloc *a, struct dalloc_iter *it);
/* Start at the first used piece that starts at or after byte off (a walk
 * in steps, with the allocator changing between them, seeks again where
 * the last step stopped: O(log n)). */
void dalloc_iter_seek(const struct dalloc *a, struct dalloc_iter *it, uint64_t off);
/* Next piece, free or used; returns false at the end.  `used` may be NULL. */
bool dalloc_iter_next(struct dalloc_iter *it, uint64_t *off, uint64_t *size,
                      bool *used);
/* Next used piece; returns false at the end. */
bool dalloc_iter_next_used(struct dalloc_iter *it, uint64_t *off,
                           uint64_t *size);

#endif /* COCYTUS_ALLOC_H */
