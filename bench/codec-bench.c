/*
 * codec-bench.c - microbenchmark of the parity delta update.
 *
 * A parity process applies every write as parity[x..] ^= a(j,i) * delta.
 * This program times codec_delta_apply() for several value sizes on each
 * available backend: the parity region is larger than the caches and each
 * update lands at a random 16-byte-aligned offset, as values do in a real
 * region.  The delta buffer is either 16-byte aligned or 3 bytes off, the
 * second case exercising the misaligned-source path.  Each measurement is
 * repeated in rounds; the best and the median round are reported, in
 * nanoseconds per update and GB/s of delta bytes (from the best round).
 * By default two regions are measured: 1 MiB (cache-resident: the cost of
 * the arithmetic) and 64 MiB (random offsets miss the caches, as in a real
 * parity region).
 *
 * Usage: codec-bench [rounds] [region_MiB]
 */
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_K 3
#define BENCH_N 5
#define BENCH_PARITY 1      /* a(1,1) is a general coefficient, not 1 */
#define BENCH_DATA 1
#define N_OFFSETS 65536
#define BYTES_PER_ROUND ((size_t)64 << 20)
#define MIN_UPDATES_PER_ROUND 50000
#define MAX_ROUNDS 99
#define MISALIGN_SHIFT 3

static const size_t value_sizes[] = { 64, 256, 1024, 4096, 16384 };
#define N_SIZES (sizeof(value_sizes) / sizeof(value_sizes[0]))

struct bench {
    uint8_t *region;
    size_t region_bytes;
    size_t *offsets;        /* N_OFFSETS random aligned offsets */
    uint8_t *delta_raw;
    int rounds;
};

struct result {
    double best_ns;         /* per update, fastest round */
    double median_ns;
    double gb_per_s;        /* from the fastest round */
};

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static void fill_random(uint8_t *buf, size_t len, uint64_t *state)
{
    for (size_t x = 0; x < len; x++)
        buf[x] = (uint8_t)xorshift(state);
}

/* Offsets in [0, region - size], rounded down to 16 bytes. */
static void pick_offsets(struct bench *b, size_t size, uint64_t *state)
{
    size_t span = b->region_bytes - size + 1;

    for (size_t x = 0; x < N_OFFSETS; x++)
        b->offsets[x] = (size_t)(xorshift(state) % span) & ~(size_t)15;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return (x > y) - (x < y);
}

static size_t updates_per_round(size_t size)
{
    size_t n = BYTES_PER_ROUND / size;

    return n < MIN_UPDATES_PER_ROUND ? MIN_UPDATES_PER_ROUND : n;
}

/* Time one round; returns nanoseconds per update. */
static double time_round(const struct codec *codec, struct bench *b,
                         const uint8_t *delta, size_t size)
{
    size_t updates = updates_per_round(size);
    double start = now_ns();

    for (size_t u = 0; u < updates; u++) {
        uint8_t *parity = b->region + b->offsets[u % N_OFFSETS];
        codec_delta_apply(codec, BENCH_PARITY, BENCH_DATA, parity, delta,
                          size);
    }
    return (now_ns() - start) / (double)updates;
}

static struct result measure(const struct codec *codec, struct bench *b,
                             size_t size, size_t shift)
{
    double per_round[MAX_ROUNDS];
    const uint8_t *delta = b->delta_raw + shift;
    struct result r;

    time_round(codec, b, delta, size);      /* warm-up */
    for (int x = 0; x < b->rounds; x++)
        per_round[x] = time_round(codec, b, delta, size);
    qsort(per_round, (size_t)b->rounds, sizeof(double), compare_doubles);
    r.best_ns = per_round[0];
    r.median_ns = per_round[b->rounds / 2];
    r.gb_per_s = (double)size / r.best_ns;
    return r;
}

static void bench_backend(enum codec_backend backend, struct bench *b,
                          uint64_t *state)
{
    struct codec *codec = codec_new(BENCH_K, BENCH_N, backend);

    if (codec == NULL) {
        fprintf(stderr, "codec_new failed for %s\n",
                codec_backend_to_string(backend));
        return;
    }
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t size = value_sizes[s];
        pick_offsets(b, size, state);
        struct result aligned = measure(codec, b, size, 0);
        struct result shifted = measure(codec, b, size, MISALIGN_SHIFT);
        printf("%-9s %6zu %8.1f %8.1f %7.2f %9.1f %7.2f\n",
               codec_backend_name(codec), size, aligned.best_ns,
               aligned.median_ns, aligned.gb_per_s, shifted.best_ns,
               shifted.gb_per_s);
    }
    codec_free(codec);
}

static int parse_args(int argc, char **argv, int *rounds, size_t *region_mib)
{
    if (argc > 1)
        *rounds = atoi(argv[1]);
    if (argc > 2)
        *region_mib = (size_t)atol(argv[2]);
    if (*rounds < 1 || *rounds > MAX_ROUNDS || (argc > 2 && *region_mib < 1)) {
        fprintf(stderr, "usage: %s [rounds 1..%d] [region_MiB]\n", argv[0],
                MAX_ROUNDS);
        return -1;
    }
    return 0;
}

static int bench_region(size_t region_mib, int rounds, uint64_t *state)
{
    const enum codec_backend backends[] = { CODEC_BACKEND_JERASURE,
                                            CODEC_BACKEND_ISAL };
    size_t max_size = value_sizes[N_SIZES - 1];
    struct bench b;

    b.rounds = rounds;
    b.region_bytes = region_mib << 20;
    b.region = aligned_alloc(64, b.region_bytes);
    b.offsets = malloc(sizeof(size_t) * N_OFFSETS);
    b.delta_raw = aligned_alloc(64, max_size + 64);
    if (b.region == NULL || b.offsets == NULL || b.delta_raw == NULL) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    fill_random(b.region, b.region_bytes, state);
    fill_random(b.delta_raw, max_size + 64, state);

    printf("\nRS(%d,%d), coefficient a(%d,%d), region %zu MiB, %d rounds\n",
           BENCH_K, BENCH_N, BENCH_PARITY, BENCH_DATA, region_mib, rounds);
    printf("%-9s %6s %8s %8s %7s %9s %7s\n", "backend", "bytes", "best ns",
           "med ns", "GB/s", "src+3 ns", "GB/s");
    for (size_t x = 0; x < sizeof(backends) / sizeof(backends[0]); x++) {
        if (codec_backend_available(backends[x]))
            bench_backend(backends[x], &b, state);
    }
    free(b.region);
    free(b.offsets);
    free(b.delta_raw);
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = 7;
    size_t region_mib = 0;
    uint64_t state = 0x9e3779b97f4a7c15ULL;

    if (parse_args(argc, argv, &rounds, &region_mib) != 0)
        return EXIT_FAILURE;
    if (region_mib > 0)
        return bench_region(region_mib, rounds, &state) == 0 ? EXIT_SUCCESS
                                                             : EXIT_FAILURE;
    if (bench_region(1, rounds, &state) != 0 ||
        bench_region(64, rounds, &state) != 0)
        return EXIT_FAILURE;
    return EXIT_SUCCESS;
}
