/* record.h - one replicated update ("record"): xid, piggybacked stable xid,
 * metadata operations and one byte payload, with its wire encoding.
 *
 * A data process turns every mutation into one record; a primary (pbr/)
 * does the same with the full value as payload.  Encoding is little-endian
 * and self-delimiting so a receiver can validate every length before use. */
#ifndef REPL_RECORD_H
#define REPL_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REC_KEY_MAX 250

enum rec_op_type {
    ROP_ALLOC = 1,   /* size -> off: the sender's allocator returned off */
    ROP_FREE = 2,    /* off */
    ROP_PUT = 3,     /* key -> off, nbytes, flags, exptime, cas (insert or overwrite) */
    ROP_DEL = 4,     /* key */
    ROP_FLUSH = 5    /* drop every entry and reset the allocator */
};

struct rec_op {
    uint8_t type;
    uint8_t nkey;
    const char *key;     /* PUT, DEL: points into the decoded buffer or the caller's memory */
    uint64_t off;        /* ALLOC (result), FREE, PUT */
    uint64_t size;       /* ALLOC: requested bytes */
    uint32_t nbytes;     /* PUT: value length */
    uint32_t flags;      /* PUT */
    int64_t exptime;     /* PUT: absolute unix time, 0 = never */
    uint64_t cas;        /* PUT */
};

struct record {
    uint64_t xid;
    uint64_t stable_xid;     /* sender's latest stable xid when sent */
    uint32_t nops;
    struct rec_op *ops;
    uint64_t data_off;       /* payload: region offset of the delta (cocytus) */
    uint32_t data_len;
    const uint8_t *data;     /* delta (cocytus) or full value (pbr) */
};

/* Bytes rec_encode() will write. */
size_t rec_encoded_size(const struct record *r);
/* Encode into out (rec_encoded_size bytes). */
void rec_encode(const struct record *r, uint8_t *out);
/* Decode buf[0..len).  ops are written to ops_buf (room for max_ops); key
 * and data pointers point into buf.  Returns 0, or -1 if malformed (any
 * length out of range, unknown op type, trailing bytes). */
int rec_decode(const uint8_t *buf, size_t len, struct record *r,
               struct rec_op *ops_buf, uint32_t max_ops);
/* How many ops the encoded record at buf says it has (0 if too short). */
uint32_t rec_peek_nops(const uint8_t *buf, size_t len);

#endif
