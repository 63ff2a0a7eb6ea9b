/* latency_hist.c - log-linear latency histograms (see latency_hist.h).
 *
 * Bucket layout: values below 2 * LH_SUBS have a bucket each; a value with
 * its highest set bit at position m >= LH_SUB_BITS + 1 keeps its top
 * LH_SUB_BITS + 1 bits, so bucket = (m - LH_SUB_BITS + 1) * LH_SUBS +
 * (v >> (m - LH_SUB_BITS)) - LH_SUBS, which continues the exact range
 * without a gap. */
#include "latency_hist.h"

#include <string.h>

#define MAX_NS ((1ULL << LH_MAX_BITS) - 1)

/* The one writer of h: plain increments through relaxed atomics. */
static void bump(_Atomic uint64_t *v, uint64_t by)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

int lh_bucket_of(uint64_t ns)
{
    if (ns > MAX_NS)
        ns = MAX_NS;
    if (ns < 2 * LH_SUBS)
        return (int)ns;
    int m = 63 - __builtin_clzll(ns);
    int shift = m - LH_SUB_BITS;
    return (shift + 1) * LH_SUBS + (int)(ns >> shift) - LH_SUBS;
}

uint64_t lh_bucket_low(int b)
{
    if (b < 2 * LH_SUBS)
        return (uint64_t)b;
    int shift = b / LH_SUBS - 1;
    uint64_t top = (uint64_t)(LH_SUBS + b % LH_SUBS);
    return top << shift;
}

void lh_init(struct latency_hist *h)
{
    for (int b = 0; b < LH_BUCKETS; b++)
        atomic_init(&h->bucket[b], 0);
    atomic_init(&h->count, 0);
    atomic_init(&h->sum_ns, 0);
    atomic_init(&h->max_ns, 0);
}

void lh_record(struct latency_hist *h, uint64_t ns)
{
    bump(&h->bucket[lh_bucket_of(ns)], 1);
    bump(&h->sum_ns, ns);
    if (ns > atomic_load_explicit(&h->max_ns, memory_order_relaxed))
        atomic_store_explicit(&h->max_ns, ns, memory_order_relaxed);
    /* The count last, with release: a reader that sees it sees the bucket. */
    atomic_store_explicit(&h->count, atomic_load_explicit(&h->count, memory_order_relaxed) + 1,
                          memory_order_release);
}

void lh_read(const struct latency_hist *h, struct latency_counts *out)
{
    /* Acquire on count first: the buckets hold at least that many. */
    out->count = atomic_load_explicit(&h->count, memory_order_acquire);
    uint64_t sum = 0;
    for (int b = 0; b < LH_BUCKETS; b++) {
        out->bucket[b] = atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
        sum += out->bucket[b];
    }
    /* A latency recorded while we copied is in the buckets but not in the
     * count: count what the buckets hold, so percentiles add up. */
    out->count = sum;
    out->sum_ns = atomic_load_explicit(&h->sum_ns, memory_order_relaxed);
    out->max_ns = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
}

void lh_counts_clear(struct latency_counts *c)
{
    memset(c, 0, sizeof(*c));
}

void lh_counts_add_delta(struct latency_counts *acc, const struct latency_counts *cur,
                         const struct latency_counts *prev)
{
    for (int b = 0; b < LH_BUCKETS; b++)
        acc->bucket[b] += cur->bucket[b] - prev->bucket[b];
    acc->count += cur->count - prev->count;
    acc->sum_ns += cur->sum_ns - prev->sum_ns;
    if (cur->count != prev->count && cur->max_ns > acc->max_ns)
        acc->max_ns = cur->max_ns;
}

void lh_counts_add(struct latency_counts *acc, const struct latency_counts *c)
{
    for (int b = 0; b < LH_BUCKETS; b++)
        acc->bucket[b] += c->bucket[b];
    acc->count += c->count;
    acc->sum_ns += c->sum_ns;
    if (c->max_ns > acc->max_ns)
        acc->max_ns = c->max_ns;
}

double lh_percentile_us(const struct latency_counts *c, double p)
{
    if (c->count == 0)
        return 0;
    if (p < 0)
        p = 0;
    if (p > 1)
        p = 1;
    uint64_t rank = (uint64_t)(p * (double)c->count);
    if ((double)rank < p * (double)c->count)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (int b = 0; b < LH_BUCKETS; b++) {
        seen += c->bucket[b];
        if (seen >= rank) {
            uint64_t low = lh_bucket_low(b);
            uint64_t high = b + 1 < LH_BUCKETS ? lh_bucket_low(b + 1) : low + 1;
            return ((double)low + (double)(high - 1)) / 2.0 / 1000.0;
        }
    }
    return (double)c->max_ns / 1000.0;
}

double lh_mean_us(const struct latency_counts *c)
{
    if (c->count == 0)
        return 0;
    return (double)c->sum_ns / (double)c->count / 1000.0;
}
