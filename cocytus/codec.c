/*
 * codec.c - Reed-Solomon codec for a coding group (see codec.h).
 *
 * The coding matrix comes from jerasure; all matrix algebra (the decoding
 * matrix for erased data blocks) is done by jerasure too.  Everything that
 * touches bulk bytes goes through one primitive, mul_xor (dst ^= c * src),
 * which each backend implements: gf-complete's multiply_region here, ISA-L
 * in codec_isal.c.  Encode, delta update and decode are written once on top
 * of that primitive, so both backends compute exactly the same thing.
 *
 * gf-complete's region multiply requires src and dst to have the same
 * address modulo 16 (it asserts otherwise), and writes past the end of a
 * region shorter than the distance to dst's next 16-byte boundary.  So the
 * bytes before that boundary are done through a 256 x 256 product table,
 * and a misaligned source is copied in chunks into an aligned stack buffer.
 * Short regions use the product table directly with either backend.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "codec.h"

#include <gf_complete.h>
#include <jerasure.h>
#include <jerasure/reed_sol.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define GF_WORD_BITS 8
#define GF_ALIGNMENT 16
/* Bytes copied per step when src is misaligned for gf-complete. */
#define MISALIGNED_CHUNK 4096
/*
 * Below this length a byte-wise product table beats both libraries:
 * gf-complete's per-call setup, and ISA-L's scalar fallback under 32 bytes.
 */
#define SHORT_REGION 32
/* Upper bound on bytes passed to one library call (they take an int). */
#define MAX_CALL_BYTES ((size_t)1 << 30)
/* Encode works on slices of this size so the parity stays in cache. */
#define ENCODE_SLICE 65536

struct codec {
    int k;
    int m;
    enum codec_backend backend;
    int *jerasure_matrix;   /* M x K, as returned by jerasure */
    uint8_t *matrix;        /* the same coefficients as bytes */
    gf_t gf;                /* GF(2^8), polynomial 0x11d */
    uint8_t product[256][256];  /* product[a][b] = a * b, for short regions */
#ifdef HAVE_ISAL
    struct codec_isal *isal;
#endif
};

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/*
 * out = a ^ b.  Plain XOR is the coefficient-1 case of every update and
 * the whole of a data process's delta and write-back, so it gets its own
 * loop: 32 bytes per step in vector registers (gcc -O2 does not vectorise
 * a byte loop of unknown length), then 8, then single bytes.  Loads and
 * stores go through memcpy, so any alignment is fine and the compiler
 * emits unaligned vector moves; out may be a or b (not otherwise overlap).
 */
typedef uint8_t xor_vec __attribute__((vector_size(16)));

static void xor_bytes(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t len)
{
    size_t x = 0;

    for (; x + 32 <= len; x += 32) {
        xor_vec a0, a1, b0, b1;
        memcpy(&a0, a + x, 16);
        memcpy(&a1, a + x + 16, 16);
        memcpy(&b0, b + x, 16);
        memcpy(&b1, b + x + 16, 16);
        a0 ^= b0;
        a1 ^= b1;
        memcpy(out + x, &a0, 16);
        memcpy(out + x + 16, &a1, 16);
    }
    for (; x + 8 <= len; x += 8) {
        uint64_t u, v;
        memcpy(&u, a + x, 8);
        memcpy(&v, b + x, 8);
        u ^= v;
        memcpy(out + x, &u, 8);
    }
    for (; x < len; x++)
        out[x] = a[x] ^ b[x];
}

void codec_xor(uint8_t *dst, const uint8_t *src, size_t len)
{
    xor_bytes(dst, dst, src, len);
}

void codec_xor_pair(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t len)
{
    xor_bytes(out, a, b, len);
}

/*
 * dst ^= coef * src through gf-complete; dst must be 16-byte aligned and
 * src congruent to it modulo 16.  gf-complete wants non-const pointers but
 * does not write through src or modify the gf_t during a region multiply.
 */
static void gf_mul_xor_congruent(const struct codec *codec, uint8_t coef,
                                 uint8_t *dst, const uint8_t *src, size_t len)
{
    gf_t *gf = (gf_t *)&codec->gf;

    while (len > 0) {
        size_t n = min_size(len, MAX_CALL_BYTES);
        gf->multiply_region.w32(gf, (void *)src, dst, coef, (int)n, 1);
        dst += n;
        src += n;
        len -= n;
    }
}

/* dst ^= coef * src one byte at a time, with the product table. */
static void table_mul_xor(const struct codec *codec, uint8_t coef,
                          uint8_t *dst, const uint8_t *src, size_t len)
{
    const uint8_t *row = codec->product[coef];

    for (size_t x = 0; x < len; x++)
        dst[x] ^= row[src[x]];
}

/* dst ^= coef * src with dst 16-byte aligned and src at any address. */
static void gf_mul_xor_via_scratch(const struct codec *codec, uint8_t coef,
                                   uint8_t *dst, const uint8_t *src,
                                   size_t len)
{
    uint8_t scratch[MISALIGNED_CHUNK] __attribute__((aligned(GF_ALIGNMENT)));

    while (len > 0) {
        size_t n = min_size(len, MISALIGNED_CHUNK);
        memcpy(scratch, src, n);
        gf_mul_xor_congruent(codec, coef, dst, scratch, n);
        dst += n;
        src += n;
        len -= n;
    }
}

/*
 * gf-complete needs src and dst congruent modulo 16, and it also
 * mishandles a region that ends before dst's first 16-byte boundary (it
 * touches bytes up to that boundary).  So: the bytes before dst's boundary
 * go through the product table, then gf-complete gets an aligned dst with
 * src either aligned too or copied into an aligned scratch buffer.
 */
static void jerasure_mul_xor(const struct codec *codec, uint8_t coef,
                             uint8_t *dst, const uint8_t *src, size_t len)
{
    size_t misalign = (uintptr_t)dst % GF_ALIGNMENT;
    size_t head = misalign == 0 ? 0 : GF_ALIGNMENT - misalign;

    head = min_size(head, len);
    table_mul_xor(codec, coef, dst, src, head);
    dst += head;
    src += head;
    len -= head;
    if (len == 0)
        return;
    if ((uintptr_t)src % GF_ALIGNMENT == 0)
        gf_mul_xor_congruent(codec, coef, dst, src, len);
    else
        gf_mul_xor_via_scratch(codec, coef, dst, src, len);
}

void codec_mul_xor(const struct codec *codec, uint8_t coef, uint8_t *dst,
                   const uint8_t *src, size_t len)
{
    if (coef == 0 || len == 0)
        return;
    if (coef == 1) {
        codec_xor(dst, src, len);
        return;
    }
    if (len < SHORT_REGION) {
        table_mul_xor(codec, coef, dst, src, len);
        return;
    }
#ifdef HAVE_ISAL
    if (codec->backend == CODEC_BACKEND_ISAL) {
        codec_isal_mul_xor(codec->isal, coef, dst, src, len);
        return;
    }
#endif
    jerasure_mul_xor(codec, coef, dst, src, len);
}

int codec_backend_available(enum codec_backend backend)
{
    switch (backend) {
    case CODEC_BACKEND_DEFAULT:
    case CODEC_BACKEND_JERASURE:
        return 1;
    case CODEC_BACKEND_ISAL:
#ifdef HAVE_ISAL
        return 1;
#else
        return 0;
#endif
    }
    return 0;
}

static enum codec_backend resolve_backend(enum codec_backend backend)
{
    if (backend != CODEC_BACKEND_DEFAULT)
        return backend;
#ifdef HAVE_ISAL
    return CODEC_BACKEND_ISAL;
#else
    return CODEC_BACKEND_JERASURE;
#endif
}

const char *codec_backend_to_string(enum codec_backend backend)
{
    switch (backend) {
    case CODEC_BACKEND_DEFAULT:
        return "default";
    case CODEC_BACKEND_JERASURE:
        return "jerasure";
    case CODEC_BACKEND_ISAL:
        return "isa-l";
    }
    return "unknown";
}

int codec_backend_from_string(const char *name, enum codec_backend *out)
{
    if (strcasecmp(name, "default") == 0)
        *out = CODEC_BACKEND_DEFAULT;
    else if (strcasecmp(name, "jerasure") == 0)
        *out = CODEC_BACKEND_JERASURE;
    else if (strcasecmp(name, "isa-l") == 0 || strcasecmp(name, "isal") == 0)
        *out = CODEC_BACKEND_ISAL;
    else
        return -1;
    return 0;
}

/* product[a][b] = a * b, computed once with gf-complete. */
static void init_product_table(struct codec *codec)
{
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++)
            codec->product[a][b] =
                (uint8_t)codec->gf.multiply.w32(&codec->gf, (uint32_t)a,
                                                (uint32_t)b);
}

/* Copy jerasure's int matrix into bytes, checking every entry fits. */
static uint8_t *matrix_to_bytes(const int *jmatrix, int entries)
{
    uint8_t *bytes = malloc((size_t)entries);

    if (bytes == NULL)
        return NULL;
    for (int x = 0; x < entries; x++) {
        if (jmatrix[x] < 0 || jmatrix[x] > 255) {
            free(bytes);
            return NULL;
        }
        bytes[x] = (uint8_t)jmatrix[x];
    }
    return bytes;
}

static int init_backend(struct codec *codec)
{
#ifdef HAVE_ISAL
    if (codec->backend == CODEC_BACKEND_ISAL) {
        codec->isal = codec_isal_new(codec->k, codec->m, codec->matrix);
        return codec->isal == NULL ? -1 : 0;
    }
#endif
    return codec->backend == CODEC_BACKEND_JERASURE ? 0 : -1;
}

struct codec *codec_new(int k, int n, enum codec_backend backend)
{
    struct codec *codec;

    if (k < 1 || n <= k || n > CODEC_MAX_BLOCKS)
        return NULL;
    if (!codec_backend_available(backend))
        return NULL;
    codec = calloc(1, sizeof(*codec));
    if (codec == NULL)
        return NULL;
    codec->k = k;
    codec->m = n - k;
    codec->backend = resolve_backend(backend);
    if (!gf_init_easy(&codec->gf, GF_WORD_BITS)) {
        free(codec);
        return NULL;
    }
    init_product_table(codec);
    codec->jerasure_matrix =
        reed_sol_vandermonde_coding_matrix(k, codec->m, GF_WORD_BITS);
    if (codec->jerasure_matrix != NULL)
        codec->matrix = matrix_to_bytes(codec->jerasure_matrix, k * codec->m);
    if (codec->matrix == NULL || init_backend(codec) != 0) {
        codec_free(codec);
        return NULL;
    }
    return codec;
}

void codec_free(struct codec *codec)
{
    if (codec == NULL)
        return;
#ifdef HAVE_ISAL
    codec_isal_free(codec->isal);
#endif
    free(codec->matrix);
    free(codec->jerasure_matrix);
    gf_free(&codec->gf, 0);
    free(codec);
}

int codec_k(const struct codec *codec)
{
    return codec->k;
}

int codec_m(const struct codec *codec)
{
    return codec->m;
}

int codec_n(const struct codec *codec)
{
    return codec->k + codec->m;
}

uint8_t codec_coef(const struct codec *codec, int parity_index,
                   int data_index)
{
    return codec->matrix[parity_index * codec->k + data_index];
}

enum codec_backend codec_backend(const struct codec *codec)
{
    return codec->backend;
}

const char *codec_backend_name(const struct codec *codec)
{
    return codec_backend_to_string(codec->backend);
}

void codec_delta_apply(const struct codec *codec, int parity_index,
                       int data_index, uint8_t *parity, const uint8_t *delta,
                       size_t len)
{
    uint8_t coef = codec_coef(codec, parity_index, data_index);

    codec_mul_xor(codec, coef, parity, delta, len);
}

/* parity[j] = sum_i a(j,i) * data[i] for the bytes [offset, offset+len). */
static void encode_slice(const struct codec *codec, uint8_t *const *data,
                         uint8_t *const *parity, size_t offset, size_t len)
{
    for (int j = 0; j < codec->m; j++) {
        memset(parity[j] + offset, 0, len);
        for (int i = 0; i < codec->k; i++)
            codec_mul_xor(codec, codec_coef(codec, j, i), parity[j] + offset,
                          data[i] + offset, len);
    }
}

void codec_encode(const struct codec *codec, uint8_t *const *data,
                  uint8_t *const *parity, size_t len)
{
#ifdef HAVE_ISAL
    if (codec->backend == CODEC_BACKEND_ISAL) {
        codec_isal_encode(codec->isal, data, parity, len);
        return;
    }
#endif
    for (size_t offset = 0; offset < len; offset += ENCODE_SLICE)
        encode_slice(codec, data, parity, offset,
                     min_size(len - offset, ENCODE_SLICE));
}

/* Block id (0..N-1) to its buffer. */
static uint8_t *block_buffer(const struct codec *codec, int id,
                             uint8_t *const *data, uint8_t *const *parity)
{
    return id < codec->k ? data[id] : parity[id - codec->k];
}

/*
 * Fill erased[] (N flags) from the erasure list.  Returns the number of
 * distinct erased blocks, or -1 for an id out of range.
 */
static int mark_erased(const struct codec *codec, const int *erasures,
                       int n_erasures, int *erased)
{
    int n = codec_n(codec);
    int count = 0;

    memset(erased, 0, sizeof(int) * (size_t)n);
    for (int x = 0; x < n_erasures; x++) {
        if (erasures[x] < 0 || erasures[x] >= n)
            return -1;
        if (!erased[erasures[x]]) {
            erased[erasures[x]] = 1;
            count++;
        }
    }
    return count;
}

/*
 * Rebuild every erased data block from K surviving blocks.  jerasure picks
 * the survivors (survivor_ids) and inverts the matching K x K submatrix:
 * row i of the result times the survivors gives data block i.
 */
static int rebuild_data(const struct codec *codec, int *erased,
                        uint8_t *const *data, uint8_t *const *parity,
                        size_t len)
{
    int k = codec->k;
    int *inverse = malloc(sizeof(int) * (size_t)k * (size_t)k);
    int *survivor_ids = malloc(sizeof(int) * (size_t)k);
    int rc = -1;

    if (inverse == NULL || survivor_ids == NULL)
        goto out;
    if (jerasure_make_decoding_matrix(k, codec->m, GF_WORD_BITS,
                                      codec->jerasure_matrix, erased, inverse,
                                      survivor_ids) != 0)
        goto out;
    for (int i = 0; i < k; i++) {
        if (!erased[i])
            continue;
        memset(data[i], 0, len);
        for (int t = 0; t < k; t++) {
            const uint8_t *src =
                block_buffer(codec, survivor_ids[t], data, parity);
            codec_mul_xor(codec, (uint8_t)inverse[i * k + t], data[i], src,
                          len);
        }
    }
    rc = 0;
out:
    free(inverse);
    free(survivor_ids);
    return rc;
}

/* Recompute erased parity blocks; all data blocks must be valid by now. */
static void rebuild_parity(const struct codec *codec, const int *erased,
                           uint8_t *const *data, uint8_t *const *parity,
                           size_t len)
{
    for (int j = 0; j < codec->m; j++) {
        if (!erased[codec->k + j])
            continue;
        memset(parity[j], 0, len);
        for (int i = 0; i < codec->k; i++)
            codec_mul_xor(codec, codec_coef(codec, j, i), parity[j], data[i],
                          len);
    }
}

static int has_erased_data(const struct codec *codec, const int *erased)
{
    for (int i = 0; i < codec->k; i++)
        if (erased[i])
            return 1;
    return 0;
}

int codec_decode(const struct codec *codec, const int *erasures,
                 int n_erasures, uint8_t *const *data, uint8_t *const *parity,
                 size_t len)
{
    int erased[CODEC_MAX_BLOCKS];
    int count = mark_erased(codec, erasures, n_erasures, erased);

    if (count < 0 || count > codec->m)
        return -1;
    if (count == 0 || len == 0)
        return 0;
    if (has_erased_data(codec, erased) &&
        rebuild_data(codec, erased, data, parity, len) != 0)
        return -1;
    rebuild_parity(codec, erased, data, parity, len);
    return 0;
}
