/* slabclass.h - memcached's item sizes and slab classes.
 *
 * Items here live in malloc'd memory or a region, not in slabs, but
 * memcached's replies and log lines name an item's size and class (me,
 * lru_crawler metadump, stats cachedump, watch), and its item size limit
 * decides which stores are refused.  These are memcached 1.6's rules, so
 * that the same items get the same numbers. */
#ifndef MC_SLABCLASS_H
#define MC_SLABCLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* memcached's size of an item: header 48, cas 8 (unless -C), the key and
 * its NUL, the value and CRLF, and 4 for nonzero client flags. */
static inline size_t mc_item_size(size_t nkey, size_t nbytes, uint32_t flags, bool cas_enabled)
{
    return 48 + (cas_enabled ? 8 : 0) + nkey + 1 + nbytes + 2 + (flags ? 4 : 0);
}

/* memcached's slab class of an item of size bytes under -I item_size_max
 * (1 MB: 39 classes from 96 bytes, factor 1.25, up to 512 KB; larger
 * items are chunked and reported in the largest class). */
unsigned mc_slab_class(size_t size, size_t item_size_max);

#endif
