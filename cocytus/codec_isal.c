/*
 * codec_isal.c - ISA-L backend for the codec (compiled with HAVE_ISAL).
 *
 * ISA-L works in GF(2^8) with polynomial 0x11d, the same field as
 * gf-complete's default for w = 8, and multiplies by plain field elements,
 * so jerasure's coefficients can be used unchanged: ec_init_tables() expands
 * each coefficient into the 32-byte nibble tables ISA-L's SIMD kernels use.
 *
 * Two sets of tables are kept: one per possible coefficient (256 x 32 bytes)
 * for single-source multiply-accumulate (delta updates, decoding), and the
 * expanded M x K coding matrix for full encodes with ec_encode_data().
 * ISA-L's kernels accept any alignment and fall back to scalar code for
 * short lengths, so no special cases are needed here.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef HAVE_ISAL

#include "codec.h"

#include <isa-l/erasure_code.h>

#include <stdlib.h>

#define ISAL_TABLE_BYTES 32
#define MAX_CALL_BYTES ((size_t)1 << 30)

struct codec_isal {
    int k;
    int m;
    unsigned char coef_tables[256][ISAL_TABLE_BYTES];
    unsigned char *encode_tables;   /* ISAL_TABLE_BYTES * K * M */
};

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void init_coef_tables(struct codec_isal *isal)
{
    for (int c = 0; c < 256; c++) {
        unsigned char coef = (unsigned char)c;
        ec_init_tables(1, 1, &coef, isal->coef_tables[c]);
    }
}

struct codec_isal *codec_isal_new(int k, int m, const uint8_t *matrix)
{
    struct codec_isal *isal = calloc(1, sizeof(*isal));
    size_t table_bytes = (size_t)ISAL_TABLE_BYTES * (size_t)k * (size_t)m;

    if (isal == NULL)
        return NULL;
    isal->k = k;
    isal->m = m;
    isal->encode_tables = malloc(table_bytes);
    if (isal->encode_tables == NULL) {
        free(isal);
        return NULL;
    }
    /* ISA-L reads the matrix only; its prototype lacks const. */
    ec_init_tables(k, m, (unsigned char *)matrix, isal->encode_tables);
    init_coef_tables(isal);
    return isal;
}

void codec_isal_free(struct codec_isal *isal)
{
    if (isal == NULL)
        return;
    free(isal->encode_tables);
    free(isal);
}

void codec_isal_mul_xor(const struct codec_isal *isal, uint8_t coef,
                        uint8_t *dst, const uint8_t *src, size_t len)
{
    unsigned char *table = (unsigned char *)isal->coef_tables[coef];

    while (len > 0) {
        size_t n = min_size(len, MAX_CALL_BYTES);
        /* One source (k = 1, index 0) into one output (rows = 1). */
        ec_encode_data_update((int)n, 1, 1, 0, table, (unsigned char *)src,
                              &dst);
        dst += n;
        src += n;
        len -= n;
    }
}

void codec_isal_encode(const struct codec_isal *isal, uint8_t *const *data,
                       uint8_t *const *parity, size_t len)
{
    unsigned char *in[CODEC_MAX_BLOCKS];
    unsigned char *out[CODEC_MAX_BLOCKS];
    size_t offset = 0;

    while (offset < len) {
        size_t n = min_size(len - offset, MAX_CALL_BYTES);
        for (int i = 0; i < isal->k; i++)
            in[i] = data[i] + offset;
        for (int j = 0; j < isal->m; j++)
            out[j] = parity[j] + offset;
        ec_encode_data((int)n, isal->k, isal->m, isal->encode_tables, in, out);
        offset += n;
    }
}

#endif /* HAVE_ISAL */
