/* radix.c - stable LSD radix sort by a 64-bit key (see radix.h).
 *
 * Each pass counts the records per 11-bit digit, turns the counts into
 * start positions and moves every record to its digit's next slot in a
 * scratch array; the two arrays swap roles, and the records end in base. */
#include "radix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DIGIT_BITS 11
#define DIGITS (1u << DIGIT_BITS)

static unsigned digit_of(uint64_t key, unsigned shift)
{
    return (unsigned)(key >> shift) & (DIGITS - 1);
}

/* One pass: src's records into dst, stably by the digit at shift. */
static void radix_pass(const unsigned char *src, unsigned char *dst, size_t n, size_t size,
                       uint64_t (*key)(const void *), unsigned shift)
{
    size_t start[DIGITS + 1] = { 0 };
    for (size_t i = 0; i < n; i++)
        start[digit_of(key(src + i * size), shift) + 1]++;
    for (unsigned d = 1; d <= DIGITS; d++)
        start[d] += start[d - 1];
    for (size_t i = 0; i < n; i++) {
        const unsigned char *rec = src + i * size;
        memcpy(dst + start[digit_of(key(rec), shift)]++ * size, rec, size);
    }
}

int radix_sort(void *base, size_t n, size_t size, uint64_t (*key)(const void *))
{
    if (n < 2)
        return 0;
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++)
        bits |= key((unsigned char *)base + i * size);
    if (bits == 0)
        return 0;
    unsigned char *tmp = malloc(n * size);
    if (tmp == NULL)
        return -ENOMEM;
    unsigned char *src = base, *dst = tmp;
    for (unsigned shift = 0; shift < 64 && (bits >> shift) != 0; shift += DIGIT_BITS) {
        radix_pass(src, dst, n, size, key, shift);
        unsigned char *t = src;
        src = dst;
        dst = t;
    }
    if (src != base)
        memcpy(base, src, n * size);
    free(tmp);
    return 0;
}
