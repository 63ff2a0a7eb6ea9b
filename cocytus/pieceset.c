/*
 * The used pieces of a data process's allocator, kept by its parity
 * processes (see pieceset.h).
 *
 * An open-addressing hash table with linear probing, keyed by the piece's
 * offset in grains.  A slot is 12 bytes: offset + 1 (0 marks an empty slot)
 * and size, both in grains and 48 bits wide, which holds the largest region
 * (2^40 grains).  The table doubles when it is three quarters full, so it
 * costs 16-32 bytes per piece, about what an allocator node did (24 bytes
 * plus spares).  Removal shifts the following entries of the probe run back
 * instead of leaving tombstones, so lookups never slow down with churn.
 */
#include "pieceset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix.h"

#define MIN_BITS 6u
#define MIN_SLOTS (1u << MIN_BITS)

struct slot {
    uint32_t key_lo;       /* offset in grains + 1, bits 0..31; 0: empty */
    uint32_t size_lo;      /* size in grains, bits 0..31 */
    uint16_t key_hi;       /* bits 32..47 */
    uint16_t size_hi;
};

_Static_assert(sizeof(struct slot) == 12, "a slot should take 12 bytes");

struct pieceset {
    uint64_t region_size;
    uint64_t used_bytes;
    uint64_t count;
    uint64_t mask;         /* slots - 1; the slot count is a power of two */
    unsigned bits;         /* log2(slots) */
    struct slot *slots;
};

static uint64_t slot_key(const struct slot *t)
{
    return (uint64_t)t->key_hi << 32 | t->key_lo;
}

static uint64_t slot_size(const struct slot *t)
{
    return (uint64_t)t->size_hi << 32 | t->size_lo;
}

static void slot_set(struct slot *t, uint64_t key, uint64_t size)
{
    t->key_lo = (uint32_t)key;
    t->key_hi = (uint16_t)(key >> 32);
    t->size_lo = (uint32_t)size;
    t->size_hi = (uint16_t)(size >> 32);
}

/* Fibonacci hashing: offsets are dense multiples, the multiply spreads them. */
static uint64_t home_of(const struct pieceset *s, uint64_t key)
{
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - s->bits);
}

static int table_alloc(struct pieceset *s, unsigned bits)
{
    struct slot *slots = calloc((size_t)1 << bits, sizeof(*slots));
    if (slots == NULL)
        return -ENOMEM;
    s->slots = slots;
    s->bits = bits;
    s->mask = ((uint64_t)1 << bits) - 1;
    return 0;
}

/* The slot holding key, or the empty slot where it would go. */
static struct slot *probe(const struct pieceset *s, uint64_t key)
{
    uint64_t i = home_of(s, key);
    for (;;) {
        struct slot *t = &s->slots[i];
        uint64_t k = slot_key(t);
        if (k == key || k == 0)
            return t;
        i = (i + 1) & s->mask;
    }
}

static int grow(struct pieceset *s)
{
    struct pieceset bigger = *s;
    if (table_alloc(&bigger, s->bits + 1) != 0)
        return -ENOMEM;
    for (uint64_t i = 0; i <= s->mask; i++) {
        uint64_t key = slot_key(&s->slots[i]);
        if (key != 0)
            slot_set(probe(&bigger, key), key, slot_size(&s->slots[i]));
    }
    free(s->slots);
    *s = bigger;
    return 0;
}

struct pieceset *pieceset_new(uint64_t region_size)
{
    if (region_size == 0 || region_size % DALLOC_GRAIN != 0 || region_size > DALLOC_MAX_REGION) {
        errno = EINVAL;
        return NULL;
    }
    struct pieceset *s = calloc(1, sizeof(*s));
    if (s == NULL || table_alloc(s, MIN_BITS) != 0) {
        free(s);
        errno = ENOMEM;
        return NULL;
    }
    s->region_size = region_size;
    return s;
}

void pieceset_destroy(struct pieceset *s)
{
    if (s == NULL)
        return;
    free(s->slots);
    free(s);
}

void pieceset_reset(struct pieceset *s)
{
    /* Back to the smallest table when it can be had; else keep the big one. */
    struct slot *small = calloc(MIN_SLOTS, sizeof(*small));
    if (small != NULL) {
        free(s->slots);
        s->slots = small;
        s->bits = MIN_BITS;
        s->mask = MIN_SLOTS - 1;
    } else {
        memset(s->slots, 0, (s->mask + 1) * sizeof(*s->slots));
    }
    s->count = 0;
    s->used_bytes = 0;
}

int pieceset_add(struct pieceset *s, uint64_t off, uint64_t size)
{
    uint64_t rounded = dalloc_round_size(size);
    if (rounded == 0 || off % DALLOC_GRAIN != 0 || off >= s->region_size ||
        rounded > s->region_size - off)
        return -EINVAL;
    uint64_t key = off / DALLOC_GRAIN + 1;
    struct slot *t = probe(s, key);
    if (slot_key(t) == key)
        return -EEXIST;
    /* Pieces that do not overlap fit in the region: a cheap part of the
     * overlap check that only pieceset_build() can do in full. */
    if (rounded > s->region_size - s->used_bytes)
        return -ENOSPC;
    if ((s->count + 1) * 4 > (s->mask + 1) * 3) {
        if (grow(s) != 0)
            return -ENOMEM;
        t = probe(s, key);
    }
    slot_set(t, key, rounded / DALLOC_GRAIN);
    s->count++;
    s->used_bytes += rounded;
    return 0;
}

/* Empties slot i and moves back every later entry of its probe run that
 * may live closer to its home, so that no probe run has a hole. */
static void remove_at(struct pieceset *s, uint64_t i)
{
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        uint64_t key = slot_key(&s->slots[j]);
        if (key == 0)
            break;
        uint64_t home = home_of(s, key);
        /* The entry at j may move to i unless its home lies cyclically in
         * (i, j]: then i comes before its home and it must stay. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    memset(&s->slots[i], 0, sizeof(s->slots[i]));
}

int pieceset_put(struct pieceset *s, uint64_t off, uint64_t size)
{
    int rc = pieceset_add(s, off, size);
    if (rc == -EEXIST && pieceset_remove(s, off, NULL) == 0)
        rc = pieceset_add(s, off, size);
    return rc;
}

int pieceset_remove(struct pieceset *s, uint64_t off, uint64_t *size)
{
    if (off % DALLOC_GRAIN != 0)
        return -ENOENT;
    uint64_t key = off / DALLOC_GRAIN + 1;
    struct slot *t = probe(s, key);
    if (slot_key(t) != key)
        return -ENOENT;
    uint64_t bytes = slot_size(t) * DALLOC_GRAIN;
    remove_at(s, (uint64_t)(t - s->slots));
    s->count--;
    s->used_bytes -= bytes;
    if (size != NULL)
        *size = bytes;
    return 0;
}

uint64_t pieceset_size_of(const struct pieceset *s, uint64_t off)
{
    if (off % DALLOC_GRAIN != 0 || off >= s->region_size)
        return 0;
    const struct slot *t = probe(s, off / DALLOC_GRAIN + 1);
    return slot_key(t) != 0 ? slot_size(t) * DALLOC_GRAIN : 0;
}

uint64_t pieceset_region_size(const struct pieceset *s)
{
    return s->region_size;
}

uint64_t pieceset_used_bytes(const struct pieceset *s)
{
    return s->used_bytes;
}

uint64_t pieceset_count(const struct pieceset *s)
{
    return s->count;
}

size_t pieceset_meta_bytes(const struct pieceset *s)
{
    return sizeof(*s) + (s->mask + 1) * sizeof(*s->slots);
}

/* In grains: 4 bits fewer to sort than bytes. */
static uint64_t span_offset(const void *rec)
{
    return ((const struct dalloc_span *)rec)->off / DALLOC_GRAIN;
}

int pieceset_sorted(const struct pieceset *s, struct dalloc_span **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (s->count == 0)
        return 0;
    struct dalloc_span *all = malloc(s->count * sizeof(*all));
    if (all == NULL)
        return -ENOMEM;
    size_t got = 0;
    for (uint64_t i = 0; i <= s->mask; i++) {
        const struct slot *t = &s->slots[i];
        uint64_t key = slot_key(t);
        if (key != 0)
            all[got++] = (struct dalloc_span){ (key - 1) * DALLOC_GRAIN,
                                               slot_size(t) * DALLOC_GRAIN };
    }
    if (radix_sort(all, got, sizeof(*all), span_offset) != 0) {
        free(all);
        return -ENOMEM;
    }
    *out = all;
    *n = got;
    return 0;
}

const char *pieceset_build_failure(int err)
{
    return err == ENOSPC ? "two of them overlap" : "out of memory";
}

int pieceset_digest(const struct pieceset *s, uint64_t *digest)
{
    struct dalloc_span *all;
    size_t n;
    if (pieceset_sorted(s, &all, &n) != 0)
        return -ENOMEM;
    int rc = dalloc_digest_of_used(s->region_size, all, n, digest);
    free(all);
    return rc;
}

void pieceset_digest_text(const struct pieceset *s, char *buf)
{
    uint64_t digest;
    int rc = pieceset_digest(s, &digest);
    if (rc == 0)
        snprintf(buf, PIECESET_DIGEST_TEXT, "%016" PRIx64, digest);
    else
        snprintf(buf, PIECESET_DIGEST_TEXT, "%s", rc == -ENOSPC ? "overlap" : "nomem");
}

struct dalloc *pieceset_build(const struct pieceset *s)
{
    struct dalloc_span *all;
    size_t n;
    if (pieceset_sorted(s, &all, &n) != 0) {
        errno = ENOMEM;
        return NULL;
    }
    struct dalloc *a = dalloc_from_used(s->region_size, all, n);
    int saved = errno;
    free(all);
    errno = saved;
    return a;
}
