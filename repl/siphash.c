/* siphash.c - SipHash-2-4, implemented from the description in "SipHash: a
 * fast short-input PRF" (Aumasson, Bernstein, 2012).
 *
 * State: four 64-bit words initialized from the key and four constants.  The
 * message is read as little-endian 64-bit words; the last word holds the
 * remaining 0..7 bytes and, in its top byte, the message length mod 256.
 * Each word m is absorbed as v3 ^= m, two SipRounds, v0 ^= m.  Finalization:
 * v2 ^= 0xff, four SipRounds, output v0 ^ v1 ^ v2 ^ v3. */
#include "siphash.h"

struct sip_state {
    uint64_t v0, v1, v2, v3;
};

static uint64_t rotl64(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void sip_round(struct sip_state *s)
{
    s->v0 += s->v1;
    s->v1 = rotl64(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = rotl64(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = rotl64(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = rotl64(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = rotl64(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = rotl64(s->v2, 32);
}

static void sip_absorb(struct sip_state *s, uint64_t m)
{
    s->v3 ^= m;
    sip_round(s);
    sip_round(s);
    s->v0 ^= m;
}

uint64_t siphash24(const uint8_t key[SIPHASH_KEY_SIZE], const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t k0 = load_u64le(key);
    uint64_t k1 = load_u64le(key + 8);
    struct sip_state s = {
        .v0 = k0 ^ 0x736f6d6570736575ULL,   /* "somepseu" */
        .v1 = k1 ^ 0x646f72616e646f6dULL,   /* "dorandom" */
        .v2 = k0 ^ 0x6c7967656e657261ULL,   /* "lygenera" */
        .v3 = k1 ^ 0x7465646279746573ULL,   /* "tedbytes" */
    };
    size_t left = len;

    while (left >= 8) {
        sip_absorb(&s, load_u64le(p));
        p += 8;
        left -= 8;
    }
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < left; i++)
        last |= (uint64_t)p[i] << (8 * i);
    sip_absorb(&s, last);

    s.v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}
