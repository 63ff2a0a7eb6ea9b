/* bin_wire.h - the memcached binary protocol on the wire.
 *
 * Every request and every response starts with the same 24-byte header; the
 * body that follows is extras, then key, then value, in that order, and the
 * header says how long each of the first two is and how long the whole body
 * is.  All integers are big-endian.  This file only names the fields, the
 * opcodes and the status codes, and gives helpers to read and write
 * big-endian integers; what the server does with them is in proto_bin.c.
 *
 * Header layout (offset, size):
 *    0 1  magic      0x80 request, 0x81 response
 *    1 1  opcode
 *    2 2  key length
 *    4 1  extras length
 *    5 1  data type  (0: raw bytes)
 *    6 2  vbucket id in a request, status in a response
 *    8 4  total body length (extras + key + value)
 *   12 4  opaque     copied from request to response unchanged
 *   16 8  cas */
#ifndef MC_BIN_WIRE_H
#define MC_BIN_WIRE_H

#include <stdint.h>

#define BIN_HEADER_LEN 24

#define BIN_MAGIC_REQUEST  0x80
#define BIN_MAGIC_RESPONSE 0x81

#define BIN_OFF_MAGIC    0
#define BIN_OFF_OPCODE   1
#define BIN_OFF_KEYLEN   2
#define BIN_OFF_EXTLEN   4
#define BIN_OFF_DATATYPE 5
#define BIN_OFF_STATUS   6   /* vbucket id in requests */
#define BIN_OFF_BODYLEN  8
#define BIN_OFF_OPAQUE   12
#define BIN_OFF_CAS      16

#define BIN_DATATYPE_RAW 0x00

/* Longest key memcached accepts. */
#define BIN_KEY_MAX 250

/* Extras lengths of the requests that carry extras. */
#define BIN_EXTRAS_STORE   8   /* flags(4) exptime(4) */
#define BIN_EXTRAS_ARITH  20   /* delta(8) initial(8) exptime(4) */
#define BIN_EXTRAS_TOUCH   4   /* exptime(4); also gat*, flush (optional), verbosity */
#define BIN_EXTRAS_GET     4   /* flags(4) in a get/gat hit response */

/* incr/decr exptime meaning "fail with not-found instead of creating". */
#define BIN_ARITH_NO_CREATE 0xffffffffu

enum bin_opcode {
    BIN_OP_GET        = 0x00,
    BIN_OP_SET        = 0x01,
    BIN_OP_ADD        = 0x02,
    BIN_OP_REPLACE    = 0x03,
    BIN_OP_DELETE     = 0x04,
    BIN_OP_INCREMENT  = 0x05,
    BIN_OP_DECREMENT  = 0x06,
    BIN_OP_QUIT       = 0x07,
    BIN_OP_FLUSH      = 0x08,
    BIN_OP_GETQ       = 0x09,
    BIN_OP_NOOP       = 0x0a,
    BIN_OP_VERSION    = 0x0b,
    BIN_OP_GETK       = 0x0c,
    BIN_OP_GETKQ      = 0x0d,
    BIN_OP_APPEND     = 0x0e,
    BIN_OP_PREPEND    = 0x0f,
    BIN_OP_STAT       = 0x10,
    BIN_OP_SETQ       = 0x11,
    BIN_OP_ADDQ       = 0x12,
    BIN_OP_REPLACEQ   = 0x13,
    BIN_OP_DELETEQ    = 0x14,
    BIN_OP_INCREMENTQ = 0x15,
    BIN_OP_DECREMENTQ = 0x16,
    BIN_OP_QUITQ      = 0x17,
    BIN_OP_FLUSHQ     = 0x18,
    BIN_OP_APPENDQ    = 0x19,
    BIN_OP_PREPENDQ   = 0x1a,
    BIN_OP_VERBOSITY  = 0x1b,
    BIN_OP_TOUCH      = 0x1c,
    BIN_OP_GAT        = 0x1d,
    BIN_OP_GATQ       = 0x1e,
    BIN_OP_GATK       = 0x23,
    BIN_OP_GATKQ      = 0x24,
    BIN_OP_SASL_LIST  = 0x20,   /* SASL: Cyrus under -S, PLAIN under -Y, else unknown */
    BIN_OP_SASL_AUTH  = 0x21,
    BIN_OP_SASL_STEP  = 0x22
};

enum bin_status {
    BIN_STATUS_OK              = 0x0000,
    BIN_STATUS_KEY_ENOENT      = 0x0001,
    BIN_STATUS_KEY_EEXISTS     = 0x0002,
    BIN_STATUS_E2BIG           = 0x0003,
    BIN_STATUS_EINVAL          = 0x0004,
    BIN_STATUS_NOT_STORED      = 0x0005,
    BIN_STATUS_DELTA_BADVAL    = 0x0006,
    BIN_STATUS_NOT_MY_VBUCKET  = 0x0007,
    BIN_STATUS_AUTH_ERROR      = 0x0020,   /* also flush under -F, as memcached */
    BIN_STATUS_AUTH_CONTINUE   = 0x0021,   /* -S: a SASL challenge follows */
    BIN_STATUS_UNKNOWN_COMMAND = 0x0081,
    BIN_STATUS_ENOMEM          = 0x0082,
    BIN_STATUS_INTERNAL_ERROR  = 0x0084
};

/* Big-endian loads and stores on unaligned bytes. */
static inline uint16_t bin_load16(const char *p)
{
    const unsigned char *b = (const unsigned char *)p;
    return (uint16_t)((b[0] << 8) | b[1]);
}

static inline uint32_t bin_load32(const char *p)
{
    const unsigned char *b = (const unsigned char *)p;
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) |
           ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

static inline uint64_t bin_load64(const char *p)
{
    return ((uint64_t)bin_load32(p) << 32) | bin_load32(p + 4);
}

static inline void bin_store16(char *p, uint16_t v)
{
    unsigned char *b = (unsigned char *)p;
    b[0] = (unsigned char)(v >> 8);
    b[1] = (unsigned char)v;
}

static inline void bin_store32(char *p, uint32_t v)
{
    unsigned char *b = (unsigned char *)p;
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

static inline void bin_store64(char *p, uint64_t v)
{
    bin_store32(p, (uint32_t)(v >> 32));
    bin_store32(p + 4, (uint32_t)v);
}

#endif
