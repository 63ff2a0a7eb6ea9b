/* fuzz_util.h - what both parser fuzz targets use to cut one input into
 * reads the way a connection would: a hash of the input seeds a small
 * deterministic generator for the split points, so a crash replays from
 * the input file alone. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64 step. */
static inline uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* FNV-1a of the input: the generator's seed. */
static inline uint64_t hash_input(const uint8_t *data, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

#endif
