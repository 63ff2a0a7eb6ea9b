/* unit_rng.h - the seeded pseudo-random generator of the unit tests.
 *
 * splitmix64: one 64-bit word of state, any seed (zero included) gives a
 * full-period sequence, and a test that fails can be replayed from its
 * seed.  Header-only so each test program stays one file plus its code
 * under test. */
#ifndef UNIT_RNG_H
#define UNIT_RNG_H

#include <stddef.h>
#include <stdint.h>

struct rng {
    uint64_t state;
};

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (the slight modulo bias does not matter here). */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    return rng_next(r) % n;
}

static inline void rng_fill(struct rng *r, uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)rng_next(r);
}

#endif
