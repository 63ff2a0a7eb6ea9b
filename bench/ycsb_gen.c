/* ycsb_gen.c - random numbers, zipfian ranks and key names for cocytus-bench.
 *
 * The zipfian generator is Gray et al.'s: with zeta(n) = sum_{i=1..n} i^-theta,
 * a uniform u maps to rank 0 when u * zeta(n) < 1, to rank 1 when it is below
 * 1 + 0.5^theta, and otherwise to n * (eta * u - eta + 1)^alpha, with
 * alpha = 1 / (1 - theta) and eta = (1 - (2/n)^(1-theta)) / (1 - zeta(2)/zeta(n)).
 * YCSB scrambles the rank with an FNV hash so that hot records are not
 * neighbours: it draws the rank over 10^10 items (with a precomputed zeta,
 * which ycsb_zeta() reproduces to 1e-10) and hashes it modulo the record
 * count.  We do the same. */
#include "ycsb_gen.h"

#include <math.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define KEY_BITS 40                      /* 2^40 > 10^12: room for cycle walking */
#define KEY_MASK ((1ULL << KEY_BITS) - 1)

void ycsb_rng_seed(struct ycsb_rng *r, uint64_t seed, uint64_t stream)
{
    r->state = ycsb_mix64(seed ^ ycsb_mix64(stream + 0x9e3779b97f4a7c15ULL));
}

uint64_t ycsb_rng_next(struct ycsb_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return ycsb_mix64(r->state);
}

double ycsb_rng_unit(struct ycsb_rng *r)
{
    /* 53 random bits: every double in [0, 1) with that spacing. */
    return (double)(ycsb_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t ycsb_rng_below(struct ycsb_rng *r, uint64_t n)
{
    /* Multiply-shift: bias below 2^-64 * n, which is nothing here. */
    return (uint64_t)(((unsigned __int128)ycsb_rng_next(r) * n) >> 64);
}

uint64_t ycsb_mix64(uint64_t v)
{
    v ^= v >> 30;
    v *= 0xbf58476d1ce4e5b9ULL;
    v ^= v >> 27;
    v *= 0x94d049bb133111ebULL;
    v ^= v >> 31;
    return v;
}

uint64_t ycsb_fnv64(uint64_t v)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= FNV_PRIME;
        v >>= 8;
    }
    return h;
}

uint64_t ycsb_fnv64_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Terms summed one by one up to EXACT_TERMS; beyond, the first EM_FROM - 1
 * terms plus Euler-Maclaurin for f(x) = x^-theta over [EM_FROM, n] (the
 * next correction term is below 1e-15 there). */
#define EXACT_TERMS 100000ULL
#define EM_FROM 1000ULL

double ycsb_zeta(uint64_t n, double theta)
{
    double sum = 0;
    if (n <= EXACT_TERMS) {
        for (uint64_t i = 1; i <= n; i++)
            sum += pow((double)i, -theta);
        return sum;
    }
    for (uint64_t i = 1; i < EM_FROM; i++)
        sum += pow((double)i, -theta);
    double a = (double)EM_FROM, b = (double)n, t = theta;
    double integral = (pow(b, 1 - t) - pow(a, 1 - t)) / (1 - t);
    double ends = (pow(a, -t) + pow(b, -t)) / 2;
    /* (f'(b) - f'(a)) / 12 with f'(x) = -t x^(-t-1) */
    double first = (-t * pow(b, -t - 1) + t * pow(a, -t - 1)) / 12;
    /* (f'''(b) - f'''(a)) / 720 with f'''(x) = -t(t+1)(t+2) x^(-t-3) */
    double k3 = t * (t + 1) * (t + 2);
    double third = (-k3 * pow(b, -t - 3) + k3 * pow(a, -t - 3)) / 720;
    return sum + integral + ends + first - third;
}

int ycsb_zipf_init(struct ycsb_zipf *z, uint64_t items, double theta)
{
    if (items == 0 || !(theta > 0 && theta < 1))
        return -1;
    z->items = items;
    z->theta = theta;
    z->alpha = 1.0 / (1.0 - theta);
    z->zetan = ycsb_zeta(items, theta);
    z->half_pow_theta = pow(0.5, theta);
    /* With 1 or 2 items the first two cases below cover every u: eta,
     * whose formula divides by zero for n = 2, is never used. */
    if (items > 2) {
        double zeta2 = ycsb_zeta(2, theta);
        z->eta = (1.0 - pow(2.0 / (double)items, 1.0 - theta)) / (1.0 - zeta2 / z->zetan);
    } else {
        z->eta = 0;
    }
    return 0;
}

uint64_t ycsb_zipf_at(const struct ycsb_zipf *z, double u)
{
    double uz = u * z->zetan;
    if (uz < 1.0 || z->items == 1)
        return 0;
    if (uz < 1.0 + z->half_pow_theta)
        return 1;
    double r = (double)z->items * pow(z->eta * u - z->eta + 1.0, z->alpha);
    /* Rounding can reach items at u close to 1. */
    if (!(r >= 0))
        return 0;
    uint64_t rank = (uint64_t)r;
    return rank < z->items ? rank : z->items - 1;
}

uint64_t ycsb_zipf_scrambled_at(const struct ycsb_zipf *z, double u, uint64_t records)
{
    return ycsb_fnv64(ycsb_zipf_at(z, u)) % records;
}

/* A permutation of [0, 2^40): odd multiplications and right xor-shifts are
 * each invertible modulo 2^40. */
static uint64_t permute40(uint64_t x)
{
    x = (x + 0x5851f42d4cULL) & KEY_MASK;    /* so that 0 does not stay 0 */
    x = (x * 0x9e3779b97fULL) & KEY_MASK;
    x ^= x >> 21;
    x = (x * 0xd6e8feb865ULL) & KEY_MASK;
    x ^= x >> 19;
    x = (x * 0xa0761d6479ULL) & KEY_MASK;
    x ^= x >> 23;
    return x;
}

uint64_t ycsb_key_number(uint64_t record)
{
    /* Cycle walking: applying a permutation of a larger set until the value
     * lands back in [0, 10^12) is a permutation of [0, 10^12). */
    uint64_t x = record % YCSB_KEY_SPACE;
    do {
        x = permute40(x);
    } while (x >= YCSB_KEY_SPACE);
    return x;
}

size_t ycsb_key_name(uint64_t record, char *buf)
{
    uint64_t n = ycsb_key_number(record);
    buf[0] = 'u';
    buf[1] = 's';
    buf[2] = 'e';
    buf[3] = 'r';
    for (int i = YCSB_KEY_LEN - 1; i >= 4; i--) {
        buf[i] = (char)('0' + n % 10);
        n /= 10;
    }
    buf[YCSB_KEY_LEN] = '\0';
    return YCSB_KEY_LEN;
}
