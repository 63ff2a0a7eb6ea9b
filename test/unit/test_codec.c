/*
 * test_codec.c - unit tests for cocytus/codec.c (Check framework).
 *
 * Every result is compared with a slow reference computed here from first
 * principles: GF(2^8) multiplication by shift-and-add modulo 0x11d, applied
 * byte by byte with the coefficients the codec reports.  The tests cover
 * full encodes, every erasure pattern of up to M blocks, random delta
 * updates, every src/dst misalignment, every coefficient, and (when ISA-L is
 * compiled in) byte-identical output from the two backends.
 */
#include "codec.h"
#include "unit_rng.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GF_POLY 0x11d
#define ALIGN_SLACK 16
#define GUARD_BYTE 0xa5
#define MAX_SMALL_LEN 100   /* every length up to this, every misalignment */

struct rs_config {
    int k;
    int n;
};

static const struct rs_config configs[] = {
    { 3, 5 }, { 4, 5 }, { 2, 5 }, { 10, 12 },
};
#define N_CONFIGS ((int)(sizeof(configs) / sizeof(configs[0])))

static const enum codec_backend backends[] = {
    CODEC_BACKEND_JERASURE, CODEC_BACKEND_ISAL,
};
#define N_BACKENDS ((int)(sizeof(backends) / sizeof(backends[0])))

static uint8_t gf_mul_ref(uint8_t a, uint8_t b)
{
    unsigned product = 0;
    unsigned x = a;

    while (b != 0) {
        if (b & 1)
            product ^= x;
        b >>= 1;
        x <<= 1;
        if (x & 0x100)
            x ^= GF_POLY;
    }
    return (uint8_t)product;
}

/* dst ^= coef * src, byte by byte. */
static void mul_xor_ref(uint8_t coef, uint8_t *dst, const uint8_t *src,
                        size_t len)
{
    uint8_t row[256];

    /* Multiplication distributes over XOR: build row[v] from its bits. */
    row[0] = 0;
    for (int v = 1; v < 256; v++) {
        int low_bit = v & -v;
        row[v] = low_bit == v ? gf_mul_ref(coef, (uint8_t)v)
                              : (uint8_t)(row[low_bit] ^ row[v ^ low_bit]);
    }
    for (size_t x = 0; x < len; x++)
        dst[x] ^= row[src[x]];
}

static void encode_ref(const struct codec *codec, uint8_t *const *data,
                       uint8_t *const *parity, size_t len)
{
    for (int j = 0; j < codec_m(codec); j++) {
        memset(parity[j], 0, len);
        for (int i = 0; i < codec_k(codec); i++)
            mul_xor_ref(codec_coef(codec, j, i), parity[j], data[i], len);
    }
}

/*
 * A set of N blocks of len bytes.  Block b starts b % 16 bytes past a
 * 16-byte boundary so that blocks are misaligned relative to each other.
 */
struct blocks {
    int k;
    int m;
    size_t len;
    uint8_t *raw[CODEC_MAX_BLOCKS];
    uint8_t *data[CODEC_MAX_BLOCKS];
    uint8_t *parity[CODEC_MAX_BLOCKS];
};

/*
 * Allocate len bytes starting shift bytes past a 16-byte boundary, followed
 * by tail spare bytes.  With tail 0 the block ends exactly at the end of the
 * allocation, so AddressSanitizer sees any overrun.
 */
static uint8_t *alloc_shifted(size_t len, int shift, size_t tail,
                              uint8_t **raw)
{
    void *p = NULL;
    size_t size = (size_t)shift + len + tail;

    ck_assert_int_eq(posix_memalign(&p, ALIGN_SLACK, size > 0 ? size : 1), 0);
    *raw = p;
    return *raw + shift;
}

static void blocks_init(struct blocks *b, int k, int m, size_t len)
{
    b->k = k;
    b->m = m;
    b->len = len;
    for (int id = 0; id < k + m; id++) {
        uint8_t *p = alloc_shifted(len, id % ALIGN_SLACK, 0, &b->raw[id]);
        if (id < k)
            b->data[id] = p;
        else
            b->parity[id - k] = p;
    }
}

static void blocks_free(struct blocks *b)
{
    for (int id = 0; id < b->k + b->m; id++)
        free(b->raw[id]);
}

static uint8_t *block_of(struct blocks *b, int id)
{
    return id < b->k ? b->data[id] : b->parity[id - b->k];
}

static void blocks_copy(struct blocks *dst, struct blocks *src)
{
    for (int id = 0; id < src->k + src->m; id++)
        memcpy(block_of(dst, id), block_of(src, id), src->len);
}

static void assert_blocks_equal(struct blocks *a, struct blocks *b)
{
    for (int id = 0; id < a->k + a->m; id++)
        ck_assert_msg(memcmp(block_of(a, id), block_of(b, id), a->len) == 0,
                      "block %d differs", id);
}

static struct codec *new_codec_or_skip(int k, int n, enum codec_backend be)
{
    if (!codec_backend_available(be))
        return NULL;
    struct codec *codec = codec_new(k, n, be);
    ck_assert_ptr_nonnull(codec);
    ck_assert_int_eq(codec_backend(codec), be);
    return codec;
}

/* Loop index -> (config, backend). */
static void loop_params(int index, const struct rs_config **cfg,
                        enum codec_backend *be)
{
    *cfg = &configs[index % N_CONFIGS];
    *be = backends[index / N_CONFIGS];
}

/* ---- matrix and arguments ---------------------------------------------- */

START_TEST(test_matrix_shape)
{
    const struct rs_config *cfg;
    enum codec_backend be;
    loop_params(_i, &cfg, &be);
    struct codec *codec = new_codec_or_skip(cfg->k, cfg->n, be);
    if (codec == NULL)
        return;
    ck_assert_int_eq(codec_k(codec), cfg->k);
    ck_assert_int_eq(codec_m(codec), cfg->n - cfg->k);
    ck_assert_int_eq(codec_n(codec), cfg->n);
    for (int i = 0; i < cfg->k; i++)
        ck_assert_int_eq(codec_coef(codec, 0, i), 1);
    for (int j = 0; j < codec_m(codec); j++)
        ck_assert_int_eq(codec_coef(codec, j, 0), 1);
    codec_free(codec);
}
END_TEST

START_TEST(test_bad_arguments)
{
    ck_assert_ptr_null(codec_new(0, 2, CODEC_BACKEND_JERASURE));
    ck_assert_ptr_null(codec_new(3, 3, CODEC_BACKEND_JERASURE));
    ck_assert_ptr_null(codec_new(4, 3, CODEC_BACKEND_JERASURE));
    ck_assert_ptr_null(codec_new(200, 300, CODEC_BACKEND_JERASURE));
    if (!codec_backend_available(CODEC_BACKEND_ISAL))
        ck_assert_ptr_null(codec_new(3, 5, CODEC_BACKEND_ISAL));

    struct codec *codec = codec_new(3, 5, CODEC_BACKEND_JERASURE);
    uint8_t buf[5][8] = { { 0 } };
    uint8_t *data[3] = { buf[0], buf[1], buf[2] };
    uint8_t *parity[2] = { buf[3], buf[4] };
    int three[3] = { 0, 1, 2 };
    int bad_id[1] = { 5 };
    int negative[1] = { -1 };
    int duplicate[4] = { 1, 1, 4, 4 };
    ck_assert_int_eq(codec_decode(codec, three, 3, data, parity, 8), -1);
    ck_assert_int_eq(codec_decode(codec, bad_id, 1, data, parity, 8), -1);
    ck_assert_int_eq(codec_decode(codec, negative, 1, data, parity, 8), -1);
    ck_assert_int_eq(codec_decode(codec, duplicate, 4, data, parity, 8), 0);
    ck_assert_int_eq(codec_decode(codec, NULL, 0, data, parity, 8), 0);
    codec_free(codec);
    codec_free(NULL);
}
END_TEST

START_TEST(test_backend_names)
{
    enum codec_backend be;
    struct codec *codec = codec_new(4, 5, CODEC_BACKEND_DEFAULT);

    ck_assert_ptr_nonnull(codec);
    if (codec_backend_available(CODEC_BACKEND_ISAL))
        ck_assert_str_eq(codec_backend_name(codec), "isa-l");
    else
        ck_assert_str_eq(codec_backend_name(codec), "jerasure");
    codec_free(codec);

    ck_assert_int_eq(codec_backend_from_string("jerasure", &be), 0);
    ck_assert_int_eq(be, CODEC_BACKEND_JERASURE);
    ck_assert_int_eq(codec_backend_from_string("ISAL", &be), 0);
    ck_assert_int_eq(be, CODEC_BACKEND_ISAL);
    ck_assert_int_eq(codec_backend_from_string("isa-l", &be), 0);
    ck_assert_int_eq(be, CODEC_BACKEND_ISAL);
    ck_assert_int_eq(codec_backend_from_string("default", &be), 0);
    ck_assert_int_eq(be, CODEC_BACKEND_DEFAULT);
    ck_assert_int_eq(codec_backend_from_string("zfec", &be), -1);
    ck_assert_str_eq(codec_backend_to_string(CODEC_BACKEND_JERASURE),
                     "jerasure");
}
END_TEST

/* ---- encode and decode -------------------------------------------------- */

START_TEST(test_encode_matches_reference)
{
    const struct rs_config *cfg;
    enum codec_backend be;
    loop_params(_i, &cfg, &be);
    struct codec *codec = new_codec_or_skip(cfg->k, cfg->n, be);
    if (codec == NULL)
        return;
    struct rng rng = { 0x1234567ULL + (uint64_t)_i };
    const size_t lens[] = { 0, 1, 15, 31, 33, 64, 1000, 70001 };

    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        struct blocks got, want;
        blocks_init(&got, cfg->k, cfg->n - cfg->k, lens[l]);
        blocks_init(&want, cfg->k, cfg->n - cfg->k, lens[l]);
        for (int i = 0; i < cfg->k; i++)
            rng_fill(&rng, got.data[i], lens[l]);
        blocks_copy(&want, &got);
        codec_encode(codec, got.data, got.parity, lens[l]);
        encode_ref(codec, want.data, want.parity, lens[l]);
        assert_blocks_equal(&got, &want);
        blocks_free(&got);
        blocks_free(&want);
    }
    codec_free(codec);
}
END_TEST

/* Decode one erasure pattern (bitmask over block ids) and compare. */
static void check_pattern(struct codec *codec, struct blocks *orig,
                          struct blocks *work, unsigned mask, struct rng *rng)
{
    int erasures[CODEC_MAX_BLOCKS];
    int count = 0;

    blocks_copy(work, orig);
    for (int id = 0; id < orig->k + orig->m; id++) {
        if (mask & (1u << id)) {
            erasures[count++] = id;
            rng_fill(rng, block_of(work, id), orig->len);
        }
    }
    ck_assert_int_eq(codec_decode(codec, erasures, count, work->data,
                                  work->parity, orig->len), 0);
    assert_blocks_equal(work, orig);
}

START_TEST(test_decode_every_pattern)
{
    const struct rs_config *cfg;
    enum codec_backend be;
    loop_params(_i, &cfg, &be);
    struct codec *codec = new_codec_or_skip(cfg->k, cfg->n, be);
    if (codec == NULL)
        return;
    struct rng rng = { 0xdecade5ULL + (uint64_t)_i };
    int m = cfg->n - cfg->k;
    const size_t lens[] = { 1, 37, 4099 };

    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        struct blocks orig, work;
        int patterns = 0;
        blocks_init(&orig, cfg->k, m, lens[l]);
        blocks_init(&work, cfg->k, m, lens[l]);
        for (int i = 0; i < cfg->k; i++)
            rng_fill(&rng, orig.data[i], lens[l]);
        codec_encode(codec, orig.data, orig.parity, lens[l]);
        for (unsigned mask = 1; mask < (1u << cfg->n); mask++) {
            if (__builtin_popcount(mask) > m)
                continue;
            check_pattern(codec, &orig, &work, mask, &rng);
            patterns++;
        }
        ck_assert_int_gt(patterns, 0);
        blocks_free(&orig);
        blocks_free(&work);
    }
    codec_free(codec);
}
END_TEST

/* ---- delta updates ------------------------------------------------------ */

/* One random write into data block i, applied to all parity via deltas. */
static void random_write(struct codec *codec, struct blocks *b,
                         struct rng *rng)
{
    int i = (int)rng_below(rng, (size_t)b->k);
    size_t len = 1 + rng_below(rng, b->len < 5000 ? b->len : 5000);
    size_t offset = rng_below(rng, b->len - len + 1);
    int shift = (int)rng_below(rng, ALIGN_SLACK);
    uint8_t *raw;
    uint8_t *delta = alloc_shifted(len, shift, 0, &raw);

    rng_fill(rng, delta, len);          /* the new value */
    for (size_t x = 0; x < len; x++) {
        uint8_t old = b->data[i][offset + x];
        b->data[i][offset + x] = delta[x];
        delta[x] ^= old;                /* delta = new XOR old */
    }
    for (int j = 0; j < b->m; j++)
        codec_delta_apply(codec, j, i, b->parity[j] + offset, delta, len);
    free(raw);
}

START_TEST(test_delta_updates)
{
    const struct rs_config *cfg;
    enum codec_backend be;
    loop_params(_i, &cfg, &be);
    struct codec *codec = new_codec_or_skip(cfg->k, cfg->n, be);
    if (codec == NULL)
        return;
    struct rng rng = { 0xfeedf00dULL + (uint64_t)_i };
    int m = cfg->n - cfg->k;
    const size_t region = 20000;
    struct blocks live, fresh;

    blocks_init(&live, cfg->k, m, region);
    blocks_init(&fresh, cfg->k, m, region);
    for (int i = 0; i < cfg->k; i++)
        rng_fill(&rng, live.data[i], region);
    codec_encode(codec, live.data, live.parity, region);
    for (int w = 0; w < 300; w++)
        random_write(codec, &live, &rng);
    blocks_copy(&fresh, &live);
    encode_ref(codec, fresh.data, fresh.parity, region);
    assert_blocks_equal(&live, &fresh);
    blocks_free(&live);
    blocks_free(&fresh);
    codec_free(codec);
}
END_TEST

/* ---- misalignment and coefficients ------------------------------------- */

/* Buffers for checking codec_mul_xor at given offsets, reused per length. */
struct mul_xor_buffers {
    uint8_t *src_raw;
    uint8_t *dst_raw;
    uint8_t *want;
    uint8_t *src;
    uint8_t *dst;
    int dst_shift;
    size_t total;       /* bytes of dst_raw and want compared */
};

static void mul_xor_buffers_init(struct mul_xor_buffers *m, int src_shift,
                                 int dst_shift, size_t max_len)
{
    m->src = alloc_shifted(max_len, src_shift, 0, &m->src_raw);
    m->dst = alloc_shifted(max_len, dst_shift, ALIGN_SLACK, &m->dst_raw);
    m->dst_shift = dst_shift;
    m->total = (size_t)dst_shift + max_len + ALIGN_SLACK;
    m->want = malloc(m->total);
    ck_assert_ptr_nonnull(m->want);
}

static void mul_xor_buffers_free(struct mul_xor_buffers *m)
{
    free(m->src_raw);
    free(m->dst_raw);
    free(m->want);
}

/*
 * codec_mul_xor on len bytes against the reference; every other byte of the
 * destination buffer (filled with a guard pattern) must stay untouched.
 */
static void check_mul_xor_len(struct codec *codec, uint8_t coef,
                              struct mul_xor_buffers *m, size_t len,
                              struct rng *rng)
{
    memset(m->dst_raw, GUARD_BYTE, m->total);
    rng_fill(rng, m->src, len);
    rng_fill(rng, m->dst, len);
    memcpy(m->want, m->dst_raw, m->total);
    mul_xor_ref(coef, m->want + m->dst_shift, m->src, len);
    codec_mul_xor(codec, coef, m->dst, m->src, len);
    ck_assert_msg(memcmp(m->want, m->dst_raw, m->total) == 0,
                  "coef %u src+%d dst+%d len %zu", coef,
                  (int)((uintptr_t)m->src % ALIGN_SLACK), m->dst_shift, len);
}

/* Every length from min_len to max_len at the given src/dst offsets. */
static void check_mul_xor(struct codec *codec, uint8_t coef, int src_shift,
                          int dst_shift, size_t min_len, size_t max_len,
                          struct rng *rng)
{
    struct mul_xor_buffers m;

    mul_xor_buffers_init(&m, src_shift, dst_shift, max_len);
    for (size_t len = min_len; len <= max_len; len++)
        check_mul_xor_len(codec, coef, &m, len, rng);
    mul_xor_buffers_free(&m);
}

START_TEST(test_misalignment)
{
    enum codec_backend be = backends[_i];
    struct codec *codec = new_codec_or_skip(4, 6, be);
    if (codec == NULL)
        return;
    struct rng rng = { 0xa11a11ULL + (uint64_t)_i };
    const uint8_t coefs[] = { 1, 2, 0x8e, 0xff, codec_coef(codec, 1, 3) };
    const size_t large[] = { 4096, 4096 + 13, 20000 + 5 };

    for (size_t c = 0; c < sizeof(coefs); c++) {
        for (int s = 0; s < ALIGN_SLACK; s++) {
            for (int d = 0; d < ALIGN_SLACK; d++)
                check_mul_xor(codec, coefs[c], s, d, 0, MAX_SMALL_LEN, &rng);
        }
    }
    for (size_t l = 0; l < sizeof(large) / sizeof(large[0]); l++) {
        for (int s = 0; s < ALIGN_SLACK; s++) {
            for (int d = 0; d < ALIGN_SLACK; d++)
                check_mul_xor(codec, 0x53, s, d, large[l], large[l], &rng);
        }
    }
    codec_free(codec);
}
END_TEST

START_TEST(test_every_coefficient)
{
    enum codec_backend be = backends[_i];
    struct codec *codec = new_codec_or_skip(2, 3, be);
    if (codec == NULL)
        return;
    struct rng rng = { 0xc0efULL + (uint64_t)_i };

    for (int c = 0; c < 256; c++) {
        check_mul_xor(codec, (uint8_t)c, c % 16, c / 16, 20, 20, &rng);
        check_mul_xor(codec, (uint8_t)c, c % 16, c / 16, 300, 300, &rng);
    }
    codec_free(codec);
}
END_TEST

/* ---- the two backends agree --------------------------------------------- */

START_TEST(test_backends_agree)
{
    if (!codec_backend_available(CODEC_BACKEND_ISAL))
        return;
    const struct rs_config *cfg = &configs[_i];
    int m = cfg->n - cfg->k;
    struct codec *jer = codec_new(cfg->k, cfg->n, CODEC_BACKEND_JERASURE);
    struct codec *isal = codec_new(cfg->k, cfg->n, CODEC_BACKEND_ISAL);
    struct rng rng = { 0xb0b0ULL + (uint64_t)_i };
    const size_t len = 10007;
    struct blocks a, b;

    ck_assert_ptr_nonnull(jer);
    ck_assert_ptr_nonnull(isal);
    for (int j = 0; j < m; j++)
        for (int i = 0; i < cfg->k; i++)
            ck_assert_int_eq(codec_coef(jer, j, i), codec_coef(isal, j, i));

    blocks_init(&a, cfg->k, m, len);
    blocks_init(&b, cfg->k, m, len);
    for (int i = 0; i < cfg->k; i++)
        rng_fill(&rng, a.data[i], len);
    blocks_copy(&b, &a);
    codec_encode(jer, a.data, a.parity, len);
    codec_encode(isal, b.data, b.parity, len);
    assert_blocks_equal(&a, &b);

    /* The same random deltas through each backend. */
    struct rng rng_a = rng, rng_b = rng;
    for (int w = 0; w < 100; w++) {
        random_write(jer, &a, &rng_a);
        random_write(isal, &b, &rng_b);
    }
    assert_blocks_equal(&a, &b);

    /* Parity from one backend decodes with the other. */
    int erasures[2] = { 0, cfg->k - 1 };
    int count = m >= 2 && cfg->k > 1 ? 2 : 1;
    struct blocks orig;
    blocks_init(&orig, cfg->k, m, len);
    blocks_copy(&orig, &a);
    for (int e = 0; e < count; e++)
        memset(b.data[erasures[e]], 0, len);
    ck_assert_int_eq(codec_decode(jer, erasures, count, b.data, b.parity, len),
                     0);
    assert_blocks_equal(&b, &orig);
    blocks_free(&orig);
    blocks_free(&a);
    blocks_free(&b);
    codec_free(jer);
    codec_free(isal);
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *basic = tcase_create("basic");
    TCase *coding = tcase_create("coding");
    TCase *regions = tcase_create("regions");
    int loops = N_CONFIGS * N_BACKENDS;

    tcase_add_loop_test(basic, test_matrix_shape, 0, loops);
    tcase_add_test(basic, test_bad_arguments);
    tcase_add_test(basic, test_backend_names);
    suite_add_tcase(s, basic);

    tcase_set_timeout(coding, 60);
    tcase_add_loop_test(coding, test_encode_matches_reference, 0, loops);
    tcase_add_loop_test(coding, test_decode_every_pattern, 0, loops);
    tcase_add_loop_test(coding, test_delta_updates, 0, loops);
    tcase_add_loop_test(coding, test_backends_agree, 0, N_CONFIGS);
    suite_add_tcase(s, coding);

    tcase_set_timeout(regions, 60);
    tcase_add_loop_test(regions, test_misalignment, 0, N_BACKENDS);
    tcase_add_loop_test(regions, test_every_coefficient, 0, N_BACKENDS);
    suite_add_tcase(s, regions);
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(codec_suite());
    int failed;

    srunner_run_all(runner, CK_NORMAL);
    failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
