/*
 * Stable LSD radix sort of fixed-size records by a 64-bit key.
 *
 * Where a replica's set of pieces becomes an allocator (pieceset.h,
 * alloc.h's dalloc_from_used) two sorts sit on the failover path: the
 * pieces by offset and the free gaps by size.  Their keys are grain counts
 * (16-byte units) of at most 40 bits, and the region's size bounds them
 * further, so a radix
 * sort does it in a few linear passes (11 bits each, only as many as the
 * largest key needs) where qsort costs n log n comparisons through a
 * function pointer.  Stable: records with equal keys keep their order,
 * which lets a sort by size keep an address-ordered input in (size, offset)
 * order.
 */
#ifndef COCYTUS_RADIX_H
#define COCYTUS_RADIX_H

#include <stddef.h>
#include <stdint.h>

/* Sorts n records of `size` bytes at base by key(record), ascending.
 * Returns 0, or -ENOMEM (base unchanged) when its scratch copy cannot be
 * had. */
int radix_sort(void *base, size_t n, size_t size, uint64_t (*key)(const void *));

#endif
