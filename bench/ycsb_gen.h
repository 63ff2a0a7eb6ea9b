/* ycsb_gen.h - the random choices of cocytus-bench, YCSB style: a seeded
 * random number generator, the zipfian generator of Gray et al. ("Quickly
 * generating billion-record synthetic databases", SIGMOD 1994) in the form
 * YCSB's ZipfianGenerator describes, its "scrambled" variant (the zipfian
 * rank hashed with FNV-1a over its 8 bytes, so that the popular records
 * are spread over the key space instead of being records 0, 1, 2...), and
 * the record -> key name mapping ("user" + 12 digits of a bijective
 * scramble of the record number).
 *
 * As in YCSB's ScrambledZipfianGenerator, the scrambled rank is drawn over
 * YCSB_SCRAMBLE_ITEMS = 10^10 items whatever the record count, then hashed
 * modulo the record count: the hottest record gets 1/zeta(10^10) = 3.8% of
 * the requests, and every record gets some.
 *
 * Everything here is pure: a generator is read-only once initialised and
 * may be shared by threads; each thread owns its own ycsb_rng. */
#ifndef YCSB_GEN_H
#define YCSB_GEN_H

#include <stddef.h>
#include <stdint.h>

#define YCSB_ZIPF_THETA 0.99          /* YCSB's ZIPFIAN_CONSTANT */
#define YCSB_KEY_LEN 16               /* "user" + 12 digits */
#define YCSB_KEY_SPACE 1000000000000ULL  /* 10^12 key numbers */
#define YCSB_MAX_RECORDS 10000000000ULL  /* 10^10 */
#define YCSB_SCRAMBLE_ITEMS 10000000000ULL /* YCSB's ITEM_COUNT */

/* splitmix64 stream: small, fast, good enough to pick keys. */
struct ycsb_rng {
    uint64_t state;
};

/* Seeds a stream; different stream numbers give unrelated sequences. */
void ycsb_rng_seed(struct ycsb_rng *r, uint64_t seed, uint64_t stream);
uint64_t ycsb_rng_next(struct ycsb_rng *r);
/* Uniform in [0, 1). */
double ycsb_rng_unit(struct ycsb_rng *r);
/* Uniform in [0, n); n > 0. */
uint64_t ycsb_rng_below(struct ycsb_rng *r, uint64_t n);

/* Zipfian over the ranks 0..items-1: rank 0 is the most popular, rank i
 * has probability proportional to 1 / (i + 1)^theta. */
struct ycsb_zipf {
    uint64_t items;
    double theta;
    double alpha;          /* 1 / (1 - theta) */
    double zetan;          /* zeta(items, theta) = sum 1/i^theta, i = 1..items */
    double eta;
    double half_pow_theta; /* 0.5^theta: the rank-1 threshold */
};

/* Prepares a generator (zeta is summed for up to 10^5 items, beyond that
 * completed with the Euler-Maclaurin formula: microseconds for any count).
 * Returns 0, or -1 when items is 0 or theta is not in (0, 1). */
int ycsb_zipf_init(struct ycsb_zipf *z, uint64_t items, double theta);

/* The rank drawn for the uniform number u in [0, 1) (Gray et al.'s
 * inversion: deterministic in u, so a hash can stand in for u). */
uint64_t ycsb_zipf_at(const struct ycsb_zipf *z, double u);

/* A scrambled-zipfian record in [0, records): fnv64(rank) mod records, the
 * rank drawn from z (YCSB: a generator over YCSB_SCRAMBLE_ITEMS). */
uint64_t ycsb_zipf_scrambled_at(const struct ycsb_zipf *z, double u, uint64_t records);

/* zeta(n, theta) = sum_{i=1..n} i^-theta. */
double ycsb_zeta(uint64_t n, double theta);

/* FNV-1a (64 bit) over the 8 little-endian bytes of v. */
uint64_t ycsb_fnv64(uint64_t v);

/* FNV-1a (64 bit) over n bytes. */
uint64_t ycsb_fnv64_bytes(const void *p, size_t n);

/* A 64-bit mix of v (splitmix64's finaliser); deterministic. */
uint64_t ycsb_mix64(uint64_t v);

/* The key number of a record: a bijection of [0, 10^12) onto itself, so
 * distinct records (record < YCSB_KEY_SPACE) never share a key. */
uint64_t ycsb_key_number(uint64_t record);

/* Writes the key of a record, "user%012llu" of its key number, into buf
 * (at least YCSB_KEY_LEN + 1 bytes, NUL-terminated); returns YCSB_KEY_LEN. */
size_t ycsb_key_name(uint64_t record, char *buf);

#endif
