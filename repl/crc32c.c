/* crc32c.c - CRC-32C (Castagnoli polynomial, reflected form 0x82F63B78).
 *
 * Two implementations compute the same function:
 *   - hardware: the SSE4.2 crc32 instruction, 8 bytes per step, used when the
 *     CPU reports SSE4.2 at run time (__builtin_cpu_supports).  A large
 *     buffer is cut into runs of three 8 KB streams whose CRCs are computed
 *     side by side (the instruction's latency is three times its issue
 *     rate, so one chain leaves the unit two thirds idle) and joined:
 *     the CRC register is linear, so crc(A B) is crc(A) moved over |B| zero
 *     bytes, XOR crc(B) from zero, and "moved over 8 KB of zeros" is a
 *     fixed 32x32 bit matrix, applied as four byte-indexed tables;
 *   - software: "slicing by 8" over eight 256-entry tables, so one loop step
 *     also consumes 8 bytes.
 * The tables are built once, on first use of the software path, under
 * pthread_once; after that they are only read (a lazily initialized,
 * const-after-init static).  Both paths use the usual convention: the CRC
 * register is inverted on entry and on exit, so crc32c(0, ...) starts a new
 * CRC and crc32c(c, ...) continues the CRC c over more bytes. */
#include "crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define CRC32C_HAVE_X86 1
#endif

#define CRC32C_POLY 0x82F63B78u

/* crc_tables[0] is the classic byte-at-a-time table; crc_tables[k][b] is the
 * CRC of byte b followed by k zero bytes. */
static uint32_t crc_tables[8][256];
static pthread_once_t crc_tables_once = PTHREAD_ONCE_INIT;

static void crc_tables_build(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_tables[0][b] = c;
    }
    for (int k = 1; k < 8; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t prev = crc_tables[k - 1][b];
            crc_tables[k][b] = (prev >> 8) ^ crc_tables[0][prev & 0xff];
        }
    }
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The software path on the inverted register c. */
static uint32_t crc_sw_update(uint32_t c, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint32_t lo = load_u32le(p) ^ c;
        uint32_t hi = load_u32le(p + 4);
        c = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^
            crc_tables[5][(lo >> 16) & 0xff] ^ crc_tables[4][lo >> 24] ^
            crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff] ^
            crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = (c >> 8) ^ crc_tables[0][(c ^ *p) & 0xff];
        p++;
        len--;
    }
    return c;
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_tables_once, crc_tables_build);
    return ~crc_sw_update(~crc, buf, len);
}

#ifdef CRC32C_HAVE_X86

__attribute__((target("sse4.2")))
static uint32_t crc_hw_serial(uint32_t c, const uint8_t *p, size_t len)
{
    /* Byte steps until p is 8-byte aligned, then 8-byte steps. */
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = _mm_crc32_u8(c, *p);
        p++;
        len--;
    }
#ifdef __x86_64__
    uint64_t c64 = c;
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = _mm_crc32_u64(c64, word);
        p += 8;
        len -= 8;
    }
    c = (uint32_t)c64;
#endif
    while (len >= 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        c = _mm_crc32_u32(c, word);
        p += 4;
        len -= 4;
    }
    while (len > 0) {
        c = _mm_crc32_u8(c, *p);
        p++;
        len--;
    }
    return c;
}

#define CRC_STREAM 8192        /* bytes per stream of the three-way loop */

/* shift_tables[k][b]: the register b << 8k moved over CRC_STREAM zero bytes. */
static uint32_t shift_tables[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static void shift_tables_build(void)
{
    static const uint8_t zeros[CRC_STREAM];
    uint32_t basis[32];
    for (int i = 0; i < 32; i++)
        basis[i] = crc_hw_serial(1u << i, zeros, CRC_STREAM);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int j = 0; j < 8; j++)
                if ((b >> j) & 1)
                    v ^= basis[8 * k + j];
            shift_tables[k][b] = v;
        }
}

static uint32_t shift_stream(uint32_t c)
{
    return shift_tables[0][c & 0xff] ^ shift_tables[1][(c >> 8) & 0xff] ^
           shift_tables[2][(c >> 16) & 0xff] ^ shift_tables[3][c >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw_update(uint32_t c, const uint8_t *p, size_t len)
{
#ifdef __x86_64__
    if (len >= 3 * CRC_STREAM) {
        pthread_once(&shift_once, shift_tables_build);
        while (len >= 3 * CRC_STREAM) {
            uint64_t c0 = c, c1 = 0, c2 = 0;
            for (size_t i = 0; i < CRC_STREAM; i += 8) {
                uint64_t w0, w1, w2;
                memcpy(&w0, p + i, 8);
                memcpy(&w1, p + CRC_STREAM + i, 8);
                memcpy(&w2, p + 2 * CRC_STREAM + i, 8);
                c0 = _mm_crc32_u64(c0, w0);
                c1 = _mm_crc32_u64(c1, w1);
                c2 = _mm_crc32_u64(c2, w2);
            }
            c = shift_stream(shift_stream((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * CRC_STREAM;
            len -= 3 * CRC_STREAM;
        }
    }
#endif
    return crc_hw_serial(c, p, len);
}

bool crc32c_hw_available(void)
{
    return __builtin_cpu_supports("sse4.2");
}

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    if (!crc32c_hw_available())
        return crc32c_sw(crc, buf, len);
    return ~crc_hw_update(~crc, buf, len);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (crc32c_hw_available())
        return ~crc_hw_update(~crc, buf, len);
    return crc32c_sw(crc, buf, len);
}

#else /* no x86: software only */

bool crc32c_hw_available(void)
{
    return false;
}

uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    return crc32c_sw(crc, buf, len);
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    return crc32c_sw(crc, buf, len);
}

#endif
