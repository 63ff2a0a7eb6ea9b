/* frame.h - the framed binary protocol between processes of a group.
 *
 * Every message is a 16-byte header followed by a payload:
 *   u32 magic 'CYKV' | u16 type | u16 flags | u32 payload length | u32 CRC32C(payload)
 * all little-endian.  A receiver checks magic, type, length bound and CRC
 * before looking at the payload; any mismatch drops the link.
 * docs/wire-format.md describes every message. */
#ifndef REPL_FRAME_H
#define REPL_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAME_MAGIC 0x564b5943u      /* "CYKV" little-endian */
#define FRAME_HEADER_SIZE 16
#define FRAME_MAX_PAYLOAD (64u << 20)

enum frame_type {
    FT_CHALLENGE = 1,  /* acceptor -> connector: u8 nonce[16] */
    FT_HELLO = 2,      /* connector -> acceptor: identity + proof, see link.h */
    FT_WELCOME = 3,    /* acceptor -> connector: u64 last xid the acceptor holds from this sender */
    FT_REJECT = 4,     /* acceptor -> connector: reason text; the link closes */
    FT_RECORD = 5,     /* sender -> replica: an encoded record (record.h) */
    FT_ACK = 6,        /* replica -> sender: u64 xid, cumulative */
    FT_STABLE = 7,     /* sender -> replica: u64 stable xid (idle flush) */
    FT_PING = 8,       /* either way: keepalive; u64 the sender's clock (ms), or empty */
    FT_REQUEST = 9,    /* either way: u64 request id + opaque body (recovery, later) */
    FT_REPLY = 10,     /* either way: u64 request id + opaque body */
    FT_CONTROL = 11,   /* server <-> coordinator: one text message (docs/wire-format.md) */
    FT_PONG = 12       /* either way: answers a PING that carried a clock, with it */
};

/* The highest frame type; links carry FT_RECORD..FT_LAST after the handshake. */
#define FT_LAST FT_PONG

struct frame_header {
    uint32_t magic;
    uint16_t type;
    uint16_t flags;
    uint32_t length;
    uint32_t crc;
};

void frame_header_encode(uint8_t out[FRAME_HEADER_SIZE], uint16_t type, uint16_t flags,
                         const void *payload, uint32_t length);
/* The same with the payload's CRC32C already computed (payload in pieces). */
void frame_header_encode_crc(uint8_t out[FRAME_HEADER_SIZE], uint16_t type, uint16_t flags,
                             uint32_t length, uint32_t crc);
/* 0 when the header is sane (magic, known type, length <= max);
 * -1 otherwise. */
int frame_header_decode(const uint8_t in[FRAME_HEADER_SIZE], struct frame_header *h);
bool frame_payload_ok(const struct frame_header *h, const void *payload);
/* "RECORD", "ACK", ... for logs; "?" for an unknown type. */
const char *frame_type_name(uint16_t type);

#endif
