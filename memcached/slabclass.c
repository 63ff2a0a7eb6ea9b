/* slabclass.c - memcached's slab classes (slabclass.h): chunk sizes from
 * 96 bytes, each 1.25 times the last rounded up to 8, while they stay
 * under four fifths of the largest chunk. */
#include "slabclass.h"

unsigned mc_slab_class(size_t size, size_t item_size_max)
{
    size_t chunk_max = item_size_max < (512u << 10) ? item_size_max : (512u << 10);
    size_t chunk = 96;
    unsigned cls = 1;
    while (chunk <= chunk_max * 4 / 5) {
        if (size <= chunk)
            return cls;
        size_t next = chunk * 5 / 4;
        chunk = (next + 7) & ~(size_t)7;
        cls++;
    }
    return cls;
}
