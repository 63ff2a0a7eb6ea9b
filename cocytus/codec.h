/*
 * codec.h - Reed-Solomon coding for a Cocytus coding group.
 *
 * A coding group has K data processes (DPs) and M = N - K parity processes
 * (PPs).  Parity is defined byte by byte over GF(2^8), polynomial 0x11d:
 *
 *     P_j[x] = sum over i of a(j,i) * D_i[x]
 *
 * where a is the M x K Vandermonde coding matrix that jerasure builds with
 * reed_sol_vandermonde_coding_matrix(K, M, 8); its first row (and first
 * column) is all ones.  Because the code is linear, a write that changes D_i
 * by delta = new XOR old changes P_j by a(j,i) * delta, which is what
 * codec_delta_apply() computes.
 *
 * Two backends perform the region arithmetic: jerasure/gf-complete (always
 * built) and ISA-L (built when HAVE_ISAL is defined).  Both use the same
 * field and the same coefficients, so they produce byte-identical parity and
 * may be mixed freely inside one group.
 *
 * Buffers may have any alignment; src and dst may differ in alignment.
 * A codec is immutable after codec_new(); all functions taking a
 * const struct codec * may be called from several threads at once.
 * jerasure initialises a global field on first use, so the very first
 * codec_new() in a process should not race with another one.
 */
#ifndef COCYTUS_CODEC_H
#define COCYTUS_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum codec_backend {
    CODEC_BACKEND_DEFAULT = 0,  /* ISA-L when compiled in, else jerasure */
    CODEC_BACKEND_JERASURE,
    CODEC_BACKEND_ISAL
};

/* Largest supported N (K + M).  GF(2^8) Vandermonde allows up to 256. */
#define CODEC_MAX_BLOCKS 256

struct codec;

/*
 * Create a codec for RS(K, N): K data blocks, N - K parity blocks, w = 8.
 * Requires 1 <= K < N <= CODEC_MAX_BLOCKS.  Returns NULL on bad arguments,
 * when the requested backend is not compiled in, or when out of memory.
 */
struct codec *codec_new(int k, int n, enum codec_backend backend);
void codec_free(struct codec *codec);

int codec_k(const struct codec *codec);
int codec_m(const struct codec *codec);
int codec_n(const struct codec *codec);

/* a(j,i): coefficient of data block i in parity block j. */
uint8_t codec_coef(const struct codec *codec, int parity_index,
                   int data_index);

/* Backend actually in use: never CODEC_BACKEND_DEFAULT. */
enum codec_backend codec_backend(const struct codec *codec);
/* "jerasure" or "isa-l". */
const char *codec_backend_name(const struct codec *codec);
const char *codec_backend_to_string(enum codec_backend backend);
/* Parses "jerasure", "isa-l"/"isal", "default"; returns -1 if unknown. */
int codec_backend_from_string(const char *name, enum codec_backend *out);
/* 1 if the backend can be used in this build. */
int codec_backend_available(enum codec_backend backend);

/* dst ^= src (the coefficient 1), vectorised; any alignment. */
void codec_xor(uint8_t *dst, const uint8_t *src, size_t len);
/* out = a ^ b, e.g. a delta = new value ^ the bytes it replaces.  out may
 * be a or b but must not overlap them otherwise. */
void codec_xor_pair(uint8_t *out, const uint8_t *a, const uint8_t *b, size_t len);

/* dst ^= coef * src over GF(2^8), for any coefficient. */
void codec_mul_xor(const struct codec *codec, uint8_t coef, uint8_t *dst,
                   const uint8_t *src, size_t len);

/*
 * The parity update for a write to data block data_index:
 * parity ^= a(parity_index, data_index) * delta.
 */
void codec_delta_apply(const struct codec *codec, int parity_index,
                       int data_index, uint8_t *parity, const uint8_t *delta,
                       size_t len);

/*
 * Full encode: parity[j] = sum_i a(j,i) * data[i] for all j < M.
 * data has K pointers (contents are only read), parity has M pointers.
 */
void codec_encode(const struct codec *codec, uint8_t *const *data,
                  uint8_t *const *parity, size_t len);

/*
 * Rebuild erased blocks in place.  Block ids: 0..K-1 are data[0..K-1],
 * K..N-1 are parity[0..M-1].  erasures lists n_erasures ids (duplicates
 * allowed); every other block must hold valid content.  The buffers of the
 * erased blocks are overwritten with the reconstructed bytes.
 * Returns 0 on success, -1 if an id is out of range or more than M distinct
 * blocks are erased.
 */
int codec_decode(const struct codec *codec, const int *erasures,
                 int n_erasures, uint8_t *const *data, uint8_t *const *parity,
                 size_t len);

/*
 * Internal: the ISA-L backend (codec_isal.c), used only by codec.c and
 * defined only when the library is built with HAVE_ISAL.  matrix is the
 * M x K coding matrix in row-major order.
 */
struct codec_isal;
struct codec_isal *codec_isal_new(int k, int m, const uint8_t *matrix);
void codec_isal_free(struct codec_isal *isal);
void codec_isal_mul_xor(const struct codec_isal *isal, uint8_t coef,
                        uint8_t *dst, const uint8_t *src, size_t len);
void codec_isal_encode(const struct codec_isal *isal, uint8_t *const *data,
                       uint8_t *const *parity, size_t len);

#endif /* COCYTUS_CODEC_H */
