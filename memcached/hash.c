/* hash.c - MurmurHash64A over key bytes (see hash.h).
 *
 * Each 8-byte little-endian word is multiplied by a large odd constant,
 * folded with a right shift, multiplied again and merged into the running
 * state; the 1..7 trailing bytes are merged as one partial word; a final
 * shift-multiply-shift spreads every input bit over the whole result. */
#include "hash.h"

#include <string.h>

static const uint64_t MURMUR_MUL = 0xc6a4a7935bd1e995ULL;
static const int MURMUR_SHIFT = 47;
static const uint64_t MURMUR_SEED = 0x8445d61a4e774912ULL;

static uint64_t load_word(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static uint64_t load_tail(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

uint64_t hash_key(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = MURMUR_SEED ^ (len * MURMUR_MUL);
    size_t words = len / 8;

    for (size_t i = 0; i < words; i++) {
        uint64_t k = load_word(p + 8 * i);
        k *= MURMUR_MUL;
        k ^= k >> MURMUR_SHIFT;
        k *= MURMUR_MUL;
        h ^= k;
        h *= MURMUR_MUL;
    }

    size_t rest = len & 7;
    if (rest) {
        h ^= load_tail(p + 8 * words, rest);
        h *= MURMUR_MUL;
    }

    h ^= h >> MURMUR_SHIFT;
    h *= MURMUR_MUL;
    h ^= h >> MURMUR_SHIFT;
    return h;
}
