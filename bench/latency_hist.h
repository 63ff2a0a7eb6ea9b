/* latency_hist.h - log-bucketed latency histograms for cocytus-bench.
 *
 * Latencies are counted in nanoseconds into log-linear buckets: exact below
 * 64 ns, then 32 buckets per power of two (each bucket 1/32 of its octave
 * wide, so a percentile read from a bucket's middle is within 1.6%).
 *
 * A live histogram (struct latency_hist) has one writer, the worker thread
 * that owns it, and any number of readers: its counters are atomics that
 * the writer bumps with a relaxed load and store (no locked instruction,
 * since nobody else writes them) and a reader copies into a plain
 * struct latency_counts.  Counts only grow, so a reporter gets the counts
 * of an interval as the difference of two copies, without ever resetting
 * the live histogram. */
#ifndef LATENCY_HIST_H
#define LATENCY_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define LH_SUB_BITS 5
#define LH_SUBS (1 << LH_SUB_BITS)
#define LH_MAX_BITS 40                          /* 2^40 ns, 18 min: longer is clamped */
#define LH_BUCKETS ((LH_MAX_BITS - LH_SUB_BITS + 1) * LH_SUBS)

struct latency_hist {
    _Atomic uint64_t bucket[LH_BUCKETS];
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t max_ns;
};

struct latency_counts {
    uint64_t bucket[LH_BUCKETS];
    uint64_t count;
    uint64_t sum_ns;
    uint64_t max_ns;
};

/* Zeroes a live histogram (before its writer starts). */
void lh_init(struct latency_hist *h);

/* Counts one latency; only the owning thread may call it. */
void lh_record(struct latency_hist *h, uint64_t ns);

/* Copies a live histogram (any thread). */
void lh_read(const struct latency_hist *h, struct latency_counts *out);

/* Zeroes counts. */
void lh_counts_clear(struct latency_counts *c);

/* acc += cur - prev (the part of cur counted since prev was read; for a
 * maximum, cur's when anything was counted since prev). */
void lh_counts_add_delta(struct latency_counts *acc, const struct latency_counts *cur,
                         const struct latency_counts *prev);

/* acc += c. */
void lh_counts_add(struct latency_counts *acc, const struct latency_counts *c);

/* The p-quantile (p in [0, 1]) in microseconds: the middle of the bucket
 * that holds the ceil(p * count)-th smallest latency; 0 when empty. */
double lh_percentile_us(const struct latency_counts *c, double p);

/* Mean latency in microseconds; 0 when empty. */
double lh_mean_us(const struct latency_counts *c);

/* Bucket index of a latency (exposed for tests). */
int lh_bucket_of(uint64_t ns);

/* Lowest latency (ns) counted in bucket b. */
uint64_t lh_bucket_low(int b);

#endif
