/*
 * Unit tests for the replication core's byte formats: CRC-32C (hardware and
 * software paths against published vectors and a bit-at-a-time reference),
 * SipHash-2-4 (published vectors), frame headers, the record encoding,
 * the record log, and how a promoted backup's sender continues a stream
 * (sender_continue: the carried records, the xids it starts from).
 *
 * The record decoder gets every truncation of valid encodings and many
 * random corruptions, each decoded from a heap copy of exactly its length,
 * so under AddressSanitizer any read past the input is caught.  A decode
 * that succeeds must re-encode to the very same bytes.
 */
#include "repl/crc32c.h"
#include "repl/frame.h"
#include "repl/printable.h"
#include "repl/reclog.h"
#include "repl/record.h"
#include "repl/sender.h"
#include "repl/siphash.h"
#include "unit_rng.h"

#include <check.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers (splitmix64, explicit state) ---- */

/* ---- CRC-32C ---- */

/* One bit at a time, straight from the definition. */
static uint32_t crc_reference(const uint8_t *p, size_t len)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int bit = 0; bit < 8; bit++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

START_TEST(test_crc_vectors)
{
    uint8_t buf[32];

    ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c_sw(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c_hw(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c(0, "", 0), 0);

    /* RFC 3720, appendix B.4 */
    memset(buf, 0, sizeof(buf));
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x8A9136AAu);
    ck_assert_uint_eq(crc32c_sw(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof(buf));
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x62A8AB43u);
    ck_assert_uint_eq(crc32c_sw(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    ck_assert_uint_eq(crc32c(0, buf, 32), 0x46DD794Eu);
    ck_assert_uint_eq(crc32c_sw(0, buf, 32), 0x46DD794Eu);
}
END_TEST

START_TEST(test_crc_hw_equals_sw)
{
    struct rng r = { 1 };
    enum { MAX = 9000 };
    uint8_t *buf = malloc(MAX + 16);

    if (!crc32c_hw_available())
        fprintf(stderr, "test_repl: no SSE4.2, crc32c_hw runs the software path\n");
    rng_fill(&r, buf, MAX + 16);
    for (int i = 0; i < 3000; i++) {
        size_t off = rng_below(&r, 16);
        size_t len = rng_below(&r, 8) == 0 ? rng_below(&r, MAX) : rng_below(&r, 80);
        uint32_t seed = rng_below(&r, 2) ? 0 : (uint32_t)rng_next(&r);
        uint32_t sw = crc32c_sw(seed, buf + off, len);
        uint32_t hw = crc32c_hw(seed, buf + off, len);
        if (sw != hw)
            ck_abort_msg("len %zu off %zu: sw %08x hw %08x", len, off, sw, hw);
        if (seed == 0 && len < 2000 && sw != crc_reference(buf + off, len))
            ck_abort_msg("len %zu off %zu: sw %08x differs from the reference", len, off, sw);
        if (crc32c(seed, buf + off, len) != sw)
            ck_abort_msg("len %zu: crc32c differs", len);
    }
    free(buf);
}
END_TEST

/* Buffers long enough for the hardware path's three-stream loop (3 x 8 KB
 * runs, joined by shift tables), around its boundaries. */
START_TEST(test_crc_hw_long)
{
    struct rng r = { 7 };
    enum { MAX = 3 * 3 * 8192 + 100 };
    uint8_t *buf = malloc(MAX + 16);
    rng_fill(&r, buf, MAX + 16);
    static const size_t lens[] = { 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 8192 + 8,
                                   6 * 8192, 6 * 8192 + 77, 9 * 8192 + 100 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
        for (size_t off = 0; off < 16; off += 5) {
            uint32_t seed = off ? (uint32_t)rng_next(&r) : 0;
            uint32_t sw = crc32c_sw(seed, buf + off, lens[i]);
            uint32_t hw = crc32c_hw(seed, buf + off, lens[i]);
            if (sw != hw)
                ck_abort_msg("len %zu off %zu: sw %08x hw %08x", lens[i], off, sw, hw);
        }
    for (int i = 0; i < 50; i++) {
        size_t off = rng_below(&r, 16), len = rng_below(&r, MAX);
        ck_assert_uint_eq(crc32c_hw(0, buf + off, len), crc32c_sw(0, buf + off, len));
    }
    free(buf);
}
END_TEST

START_TEST(test_crc_incremental)
{
    struct rng r = { 2 };
    uint8_t buf[4096];
    rng_fill(&r, buf, sizeof(buf));
    uint32_t whole = crc32c(0, buf, sizeof(buf));
    for (int i = 0; i < 500; i++) {
        size_t a = rng_below(&r, sizeof(buf) + 1);
        size_t b = a + rng_below(&r, sizeof(buf) - a + 1);
        uint32_t c = crc32c(0, buf, a);
        c = crc32c_sw(c, buf + a, b - a);
        c = crc32c_hw(c, buf + b, sizeof(buf) - b);
        ck_assert_uint_eq(c, whole);
    }
}
END_TEST

/* ---- SipHash-2-4 ---- */

START_TEST(test_siphash_vectors)
{
    /* Key 00..0f, message 00..(n-1): from the SipHash paper and its
     * reference vectors. */
    static const struct {
        size_t len;
        uint64_t want;
    } v[] = {
        { 0, 0x726fdb47dd0e0e31ULL },
        { 1, 0x74f839c593dc67fdULL },
        { 2, 0x0d6c8009d9a94f5aULL },
        { 7, 0xab0200f58b01d137ULL },
        { 8, 0x93f5f5799a932462ULL },
        { 9, 0x9e0082df0ba9e4b0ULL },
        { 15, 0xa129ca6149be45e5ULL },
    };
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint64_t got = siphash24(key, msg, v[i].len);
        if (got != v[i].want)
            ck_abort_msg("len %zu: got %016" PRIx64 ", want %016" PRIx64, v[i].len, got,
                         v[i].want);
    }
    key[0] ^= 1;
    ck_assert(siphash24(key, msg, 15) != 0xa129ca6149be45e5ULL);
}
END_TEST

/* ---- frame headers ---- */

START_TEST(test_frame_roundtrip)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    uint8_t payload[100];
    struct frame_header h;

    for (int i = 0; i < 100; i++)
        payload[i] = (uint8_t)(i * 7);
    frame_header_encode(hdr, FT_RECORD, 0x1234, payload, sizeof(payload));
    /* magic "CYKV" on the wire */
    ck_assert(memcmp(hdr, "CYKV", 4) == 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), 0);
    ck_assert_uint_eq(h.magic, FRAME_MAGIC);
    ck_assert_uint_eq(h.type, FT_RECORD);
    ck_assert_uint_eq(h.flags, 0x1234);
    ck_assert_uint_eq(h.length, 100);
    ck_assert_uint_eq(h.crc, crc32c(0, payload, 100));
    ck_assert(frame_payload_ok(&h, payload));
    payload[50] ^= 0x10;
    ck_assert(!frame_payload_ok(&h, payload));

    /* byte layout */
    ck_assert_uint_eq(hdr[4], FT_RECORD);
    ck_assert_uint_eq(hdr[5], 0);
    ck_assert_uint_eq(hdr[6], 0x34);
    ck_assert_uint_eq(hdr[7], 0x12);
    ck_assert_uint_eq(hdr[8], 100);
    ck_assert_uint_eq(hdr[9] | hdr[10] | hdr[11], 0);

    /* empty payload: CRC of nothing is 0 */
    frame_header_encode(hdr, FT_PING, 0, NULL, 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), 0);
    ck_assert_uint_eq(h.length, 0);
    ck_assert_uint_eq(h.crc, 0);
    ck_assert(frame_payload_ok(&h, NULL));

    frame_header_encode_crc(hdr, FT_ACK, 0, 8, 0xdeadbeef);
    ck_assert_int_eq(frame_header_decode(hdr, &h), 0);
    ck_assert_uint_eq(h.crc, 0xdeadbeef);
}
END_TEST

START_TEST(test_frame_bad_headers)
{
    uint8_t hdr[FRAME_HEADER_SIZE];
    struct frame_header h;

    frame_header_encode(hdr, FT_ACK, 0, "12345678", 8);
    hdr[0] ^= 1;
    ck_assert_int_eq(frame_header_decode(hdr, &h), -1);

    for (unsigned t = 0; t < 20; t++) {
        frame_header_encode_crc(hdr, (uint16_t)t, 0, 0, 0);
        int want = (t >= FT_CHALLENGE && t <= FT_LAST) ? 0 : -1;
        ck_assert_int_eq(frame_header_decode(hdr, &h), want);
        ck_assert_str_ne(frame_type_name((uint16_t)t), "");
    }
    frame_header_encode_crc(hdr, 0xffff, 0, 0, 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), -1);

    frame_header_encode_crc(hdr, FT_RECORD, 0, FRAME_MAX_PAYLOAD, 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), 0);
    frame_header_encode_crc(hdr, FT_RECORD, 0, FRAME_MAX_PAYLOAD + 1, 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), -1);
    frame_header_encode_crc(hdr, FT_RECORD, 0, 0xffffffffu, 0);
    ck_assert_int_eq(frame_header_decode(hdr, &h), -1);
}
END_TEST

/* ---- records ---- */

static char key_store[8][REC_KEY_MAX];
static uint8_t data_store[4096];

/* A record using every op type, keys of length 1 and 250. */
static struct record sample_record(struct rec_op *ops, uint32_t data_len)
{
    struct record r;
    memset(&r, 0, sizeof(r));
    memset(ops, 0, 6 * sizeof(*ops));
    memset(key_store[0], 'a', REC_KEY_MAX);
    memset(key_store[1], 'b', 1);
    for (size_t i = 0; i < sizeof(data_store); i++)
        data_store[i] = (uint8_t)(i * 31 + 7);

    ops[0].type = ROP_FREE;
    ops[0].off = 0x0102030405060708ULL;
    ops[1].type = ROP_ALLOC;
    ops[1].size = 4096;
    ops[1].off = 1u << 20;
    ops[2].type = ROP_PUT;
    ops[2].nkey = REC_KEY_MAX;
    ops[2].key = key_store[0];
    ops[2].off = 1u << 20;
    ops[2].nbytes = 4000;
    ops[2].flags = 0xfeedf00d;
    ops[2].exptime = -5;
    ops[2].cas = UINT64_MAX;
    ops[3].type = ROP_DEL;
    ops[3].nkey = 1;
    ops[3].key = key_store[1];
    ops[4].type = ROP_FLUSH;
    ops[5].type = ROP_PUT;
    ops[5].nkey = 1;
    ops[5].key = key_store[1];
    ops[5].exptime = 1700000000;

    r.xid = 0x1122334455667788ULL;
    r.stable_xid = 42;
    r.nops = 6;
    r.ops = ops;
    r.data_off = 1u << 20;
    r.data_len = data_len;
    r.data = data_len ? data_store : NULL;
    return r;
}

static uint8_t *encode_copy(const struct record *r, size_t *len)
{
    *len = rec_encoded_size(r);
    uint8_t *buf = malloc(*len);
    rec_encode(r, buf);
    return buf;
}

static void assert_ops_equal(const struct rec_op *a, const struct rec_op *b)
{
    ck_assert_uint_eq(a->type, b->type);
    ck_assert_uint_eq(a->nkey, b->nkey);
    if (a->nkey > 0)
        ck_assert(memcmp(a->key, b->key, a->nkey) == 0);
    ck_assert_uint_eq(a->off, b->off);
    ck_assert_uint_eq(a->size, b->size);
    ck_assert_uint_eq(a->nbytes, b->nbytes);
    ck_assert_uint_eq(a->flags, b->flags);
    ck_assert_int_eq(a->exptime, b->exptime);
    ck_assert_uint_eq(a->cas, b->cas);
}

START_TEST(test_record_roundtrip)
{
    struct rec_op ops[6], dec_ops[8];
    struct record r = sample_record(ops, 1000), d;
    size_t len;
    uint8_t *buf = encode_copy(&r, &len);

    /* 20 head + FREE 9 + ALLOC 17 + PUT 34+250 + DEL 3 + FLUSH 1 + PUT 35
     * + 12 tail + 1000 data */
    ck_assert_uint_eq(len, 20 + 9 + 17 + 284 + 3 + 1 + 35 + 12 + 1000);
    ck_assert_uint_eq(rec_peek_nops(buf, len), 6);
    ck_assert_int_eq(rec_decode(buf, len, &d, dec_ops, 8), 0);
    ck_assert_uint_eq(d.xid, r.xid);
    ck_assert_uint_eq(d.stable_xid, 42);
    ck_assert_uint_eq(d.nops, 6);
    ck_assert_ptr_eq(d.ops, dec_ops);
    for (int i = 0; i < 6; i++)
        assert_ops_equal(&d.ops[i], &ops[i]);
    /* keys and data point into the buffer */
    ck_assert(d.ops[2].key >= (const char *)buf && d.ops[2].key < (const char *)buf + len);
    ck_assert_uint_eq(d.data_off, r.data_off);
    ck_assert_uint_eq(d.data_len, 1000);
    ck_assert(d.data >= buf && d.data + 1000 == buf + len);
    ck_assert(memcmp(d.data, data_store, 1000) == 0);

    /* exactly enough room for the ops, and one too few */
    ck_assert_int_eq(rec_decode(buf, len, &d, dec_ops, 6), 0);
    ck_assert_int_eq(rec_decode(buf, len, &d, dec_ops, 5), -1);

    /* little-endian head */
    ck_assert_uint_eq(buf[0], 0x88);
    ck_assert_uint_eq(buf[7], 0x11);
    ck_assert_uint_eq(buf[8], 42);
    ck_assert_uint_eq(buf[16], 6);
    ck_assert_uint_eq(buf[20], ROP_FREE);
    free(buf);
}
END_TEST

START_TEST(test_record_empty)
{
    struct record r, d;
    struct rec_op dummy;
    uint8_t buf[32];

    memset(&r, 0, sizeof(r));
    r.xid = 7;
    ck_assert_uint_eq(rec_encoded_size(&r), 32);
    rec_encode(&r, buf);
    ck_assert_uint_eq(rec_peek_nops(buf, 32), 0);
    ck_assert_int_eq(rec_decode(buf, 32, &d, &dummy, 0), 0);
    ck_assert_uint_eq(d.xid, 7);
    ck_assert_uint_eq(d.nops, 0);
    ck_assert_uint_eq(d.data_len, 0);
    ck_assert_ptr_nonnull(d.data);   /* points at the end of buf, never NULL */

    /* trailing byte */
    uint8_t longer[33];
    memcpy(longer, buf, 32);
    longer[32] = 0;
    ck_assert_int_eq(rec_decode(longer, 33, &d, &dummy, 0), -1);
    /* too short */
    ck_assert_uint_eq(rec_peek_nops(buf, 19), 0);
    ck_assert_int_eq(rec_decode(buf, 31, &d, &dummy, 0), -1);
    ck_assert_int_eq(rec_decode(buf, 0, &d, &dummy, 0), -1);
}
END_TEST

/* Encode a record with one op built by the caller and return whether it
 * decodes. */
static int decode_single_op(const struct rec_op *op)
{
    struct record r, d;
    struct rec_op out[1];
    memset(&r, 0, sizeof(r));
    r.nops = 1;
    r.ops = (struct rec_op *)op;
    size_t len;
    uint8_t *buf = encode_copy(&r, &len);
    int rc = rec_decode(buf, len, &d, out, 1);
    free(buf);
    return rc;
}

START_TEST(test_record_bad_fields)
{
    struct rec_op op;
    char key[256];
    memset(key, 'k', sizeof(key));

    memset(&op, 0, sizeof(op));
    op.type = ROP_PUT;
    op.key = key;
    op.nkey = 0;
    ck_assert_int_eq(decode_single_op(&op), -1);
    op.nkey = 251;
    ck_assert_int_eq(decode_single_op(&op), -1);
    op.nkey = 250;
    ck_assert_int_eq(decode_single_op(&op), 0);
    op.type = ROP_DEL;
    op.nkey = 0;
    ck_assert_int_eq(decode_single_op(&op), -1);
    op.nkey = 255;
    ck_assert_int_eq(decode_single_op(&op), -1);
    op.nkey = 1;
    ck_assert_int_eq(decode_single_op(&op), 0);
    for (unsigned t = 0; t < 256; t++) {
        if (t >= ROP_ALLOC && t <= ROP_FLUSH)
            continue;
        memset(&op, 0, sizeof(op));
        op.type = (uint8_t)t;
        ck_assert_int_eq(decode_single_op(&op), -1);
    }

    /* data_off + data_len wrapping around */
    struct record r, d;
    struct rec_op none;
    uint8_t data[4] = { 1, 2, 3, 4 };
    memset(&r, 0, sizeof(r));
    r.data_off = UINT64_MAX - 2;
    r.data_len = 4;
    r.data = data;
    uint8_t buf[64];
    rec_encode(&r, buf);
    ck_assert_int_eq(rec_decode(buf, rec_encoded_size(&r), &d, &none, 0), -1);
    r.data_off = UINT64_MAX - 4;
    rec_encode(&r, buf);
    ck_assert_int_eq(rec_decode(buf, rec_encoded_size(&r), &d, &none, 0), 0);

    /* a huge op count is refused without being believed */
    memset(&r, 0, sizeof(r));
    rec_encode(&r, buf);
    buf[16] = buf[17] = buf[18] = buf[19] = 0xff;
    ck_assert_uint_eq(rec_peek_nops(buf, 32), 0);
    ck_assert_int_eq(rec_decode(buf, 32, &d, &none, 0), -1);
}
END_TEST

/* Decode from an exact-size heap copy (ASan sees any overread); on success
 * the record must re-encode to the same bytes.  Returns the decode result. */
static int decode_checked(const uint8_t *src, size_t len)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    struct rec_op ops[16];
    struct record d;
    if (len > 0)
        memcpy(copy, src, len);
    uint32_t n = rec_peek_nops(copy, len);
    int rc = rec_decode(copy, len, &d, ops, 16);
    if (rc == 0) {
        if (n != d.nops)
            ck_abort_msg("rec_peek_nops says %u, decode found %u", n, d.nops);
        size_t elen = rec_encoded_size(&d);
        if (elen != len)
            ck_abort_msg("decoded record re-encodes to %zu bytes, input was %zu", elen, len);
        uint8_t *again = malloc(elen > 0 ? elen : 1);
        rec_encode(&d, again);
        if (memcmp(again, copy, len) != 0)
            ck_abort_msg("decoded record re-encodes differently (len %zu)", len);
        free(again);
    }
    free(copy);
    return rc;
}

START_TEST(test_record_truncations)
{
    struct rec_op ops[6];
    uint32_t sizes[] = { 0, 1, 17 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        struct record r = sample_record(ops, sizes[s]);
        for (uint32_t nops = 0; nops <= 6; nops++) {
            r.nops = nops;
            size_t len;
            uint8_t *buf = encode_copy(&r, &len);
            ck_assert_int_eq(decode_checked(buf, len), 0);
            for (size_t cut = 0; cut < len; cut++) {
                if (decode_checked(buf, cut) == 0)
                    ck_abort_msg("a %zu-byte prefix of a %zu-byte record decoded", cut, len);
            }
            free(buf);
        }
    }
}
END_TEST

START_TEST(test_record_corruptions)
{
    struct rng rg = { 3 };
    struct rec_op ops[6];
    struct record r = sample_record(ops, 40);
    size_t len;
    uint8_t *orig = encode_copy(&r, &len);
    uint8_t *buf = malloc(len + 64);
    long decoded = 0;

    for (int iter = 0; iter < 200000; iter++) {
        size_t n = len;
        memcpy(buf, orig, len);
        int kind = (int)rng_below(&rg, 4);
        int flips = 1 + (int)rng_below(&rg, 4);
        for (int f = 0; f < flips; f++) {
            size_t pos = rng_below(&rg, n);
            if (kind == 0)
                buf[pos] ^= (uint8_t)(1u << rng_below(&rg, 8));
            else if (kind == 1)
                buf[pos] = (uint8_t)rng_next(&rg);
            else if (kind == 2)
                buf[pos] = (uint8_t)(rng_below(&rg, 2) ? 0xff : rng_below(&rg, 8));
        }
        if (kind == 3) {
            /* cut or extend at random, then scribble once */
            n = rng_below(&rg, len + 64);
            if (n > len)
                rng_fill(&rg, buf + len, n - len);
            if (n > 0)
                buf[rng_below(&rg, n)] = (uint8_t)rng_next(&rg);
        }
        if (decode_checked(buf, n) == 0)
            decoded++;
    }
    /* byte flips inside keys, data and most numbers still decode */
    ck_assert(decoded > 1000);

    /* pure noise */
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = rng_below(&rg, len + 64);
        rng_fill(&rg, buf, n);
        if (n >= 20 && rng_below(&rg, 2)) {
            /* small op count, so the op parser gets exercised */
            buf[16] = (uint8_t)rng_below(&rg, 8);
            buf[17] = buf[18] = buf[19] = 0;
        }
        decode_checked(buf, n);
    }
    free(buf);
    free(orig);
}
END_TEST

/* ---- the record log ---- */

static size_t push_record(struct reclog *log, uint64_t xid, uint32_t nops, uint32_t data_len)
{
    struct rec_op ops[64];
    struct record r;
    memset(&r, 0, sizeof(r));
    memset(ops, 0, sizeof(ops));
    for (uint32_t i = 0; i < nops; i++) {
        ops[i].type = ROP_FREE;
        ops[i].off = xid * 1000 + i;
    }
    r.xid = xid;
    r.stable_xid = xid - 1;
    r.nops = nops;
    r.ops = ops;
    r.data_len = data_len;
    r.data = data_store;
    size_t len;
    uint8_t *buf = encode_copy(&r, &len);
    ck_assert_int_eq(reclog_push(log, xid, buf, len), 0);
    free(buf);
    return len;
}

struct apply_seen {
    uint64_t xids[64];
    int n;
    uint64_t fail_at;   /* return 5 for this xid */
};

static int apply_cb(void *ctx, const struct record *r)
{
    struct apply_seen *s = ctx;
    if (r->xid == s->fail_at)
        return 5;
    for (uint32_t i = 0; i < r->nops; i++) {
        ck_assert_uint_eq(r->ops[i].type, ROP_FREE);
        ck_assert_uint_eq(r->ops[i].off, r->xid * 1000 + i);
    }
    s->xids[s->n++] = r->xid;
    return 0;
}

START_TEST(test_reclog_basic)
{
    struct reclog log;
    struct apply_seen seen;
    size_t total = 0;

    reclog_init(&log);
    ck_assert_uint_eq(log.last_xid, 0);
    for (uint64_t x = 1; x <= 10; x++)
        total += push_record(&log, x, (uint32_t)x, (uint32_t)(x * 10));
    ck_assert_uint_eq(log.count, 10);
    ck_assert_uint_eq(log.bytes, total);
    ck_assert_uint_eq(log.last_xid, 10);

    /* xids must increase */
    uint8_t dummy[32] = { 0 };
    ck_assert_int_eq(reclog_push(&log, 10, dummy, 32), -1);
    ck_assert_int_eq(reclog_push(&log, 3, dummy, 32), -1);
    ck_assert_uint_eq(log.count, 10);

    memset(&seen, 0, sizeof(seen));
    ck_assert_int_eq(reclog_apply(&log, 4, apply_cb, &seen), 0);
    ck_assert_int_eq(seen.n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(seen.xids[i], (uint64_t)i + 1);
    ck_assert_uint_eq(log.count, 6);
    ck_assert_uint_eq(log.head->xid, 5);

    /* a failing fn stops the walk, its record stays */
    memset(&seen, 0, sizeof(seen));
    seen.fail_at = 7;
    ck_assert_int_eq(reclog_apply(&log, 100, apply_cb, &seen), 5);
    ck_assert_int_eq(seen.n, 2);
    ck_assert_uint_eq(log.head->xid, 7);
    ck_assert_uint_eq(log.count, 4);

    reclog_drop_upto(&log, 8);
    ck_assert_uint_eq(log.head->xid, 9);
    ck_assert_uint_eq(log.count, 2);

    reclog_drop_upto(&log, 100);
    ck_assert_ptr_null(log.head);
    ck_assert_ptr_null(log.tail);
    ck_assert_uint_eq(log.count, 0);
    ck_assert_uint_eq(log.bytes, 0);
    ck_assert_uint_eq(log.last_xid, 10);
    /* the log stays usable after emptying */
    push_record(&log, 11, 1, 0);
    ck_assert_ptr_eq(log.head, log.tail);
    reclog_destroy(&log);
    ck_assert_uint_eq(log.count, 0);
}
END_TEST

struct visit_seen {
    uint64_t xids[64];
    int n;
};

static void visit_cb(void *ctx, const struct reclog_entry *e)
{
    struct visit_seen *s = ctx;
    s->xids[s->n++] = e->xid;
}

START_TEST(test_reclog_truncate_visit)
{
    struct reclog log;
    struct visit_seen vs;
    size_t bytes_upto5 = 0;

    reclog_init(&log);
    for (uint64_t x = 1; x <= 10; x++) {
        size_t n = push_record(&log, x * 2, 1, 5);   /* xids 2, 4, ..., 20 */
        if (x * 2 <= 11)
            bytes_upto5 += n;
    }

    memset(&vs, 0, sizeof(vs));
    reclog_visit_after(&log, 15, visit_cb, &vs);
    ck_assert_int_eq(vs.n, 3);
    ck_assert_uint_eq(vs.xids[0], 16);
    ck_assert_uint_eq(vs.xids[2], 20);
    memset(&vs, 0, sizeof(vs));
    reclog_visit_after(&log, 0, visit_cb, &vs);
    ck_assert_int_eq(vs.n, 10);

    reclog_truncate_after(&log, 11);
    ck_assert_uint_eq(log.count, 5);
    ck_assert_uint_eq(log.bytes, bytes_upto5);
    ck_assert_uint_eq(log.tail->xid, 10);
    ck_assert_ptr_null(log.tail->next);
    ck_assert_uint_eq(log.last_xid, 11);
    /* xids above the cut may be pushed again */
    push_record(&log, 12, 0, 0);
    ck_assert_uint_eq(log.tail->xid, 12);
    ck_assert_uint_eq(log.count, 6);

    reclog_truncate_after(&log, 0);
    ck_assert_ptr_null(log.head);
    ck_assert_ptr_null(log.tail);
    ck_assert_uint_eq(log.count, 0);
    ck_assert_uint_eq(log.bytes, 0);
    ck_assert_uint_eq(log.last_xid, 0);
    reclog_destroy(&log);
}
END_TEST

START_TEST(test_reclog_many_ops_and_bad_entry)
{
    struct reclog log;
    struct apply_seen seen;

    reclog_init(&log);
    push_record(&log, 1, 64, 100);   /* more ops than the stack array */
    push_record(&log, 2, 0, 0);
    uint8_t junk[40];
    memset(junk, 0xee, sizeof(junk));
    ck_assert_int_eq(reclog_push(&log, 3, junk, sizeof(junk)), 0);
    push_record(&log, 4, 1, 1);

    memset(&seen, 0, sizeof(seen));
    ck_assert_int_eq(reclog_apply(&log, 10, apply_cb, &seen), -1);
    ck_assert_int_eq(seen.n, 2);
    ck_assert_uint_eq(log.head->xid, 3);   /* the bad entry stays */
    reclog_drop_upto(&log, 3);
    ck_assert_int_eq(reclog_apply(&log, 10, apply_cb, &seen), 0);
    ck_assert_int_eq(seen.n, 3);
    ck_assert_uint_eq(seen.xids[2], 4);
    reclog_destroy(&log);
}
END_TEST

/* ---- a promoted backup's sender ---- */

static void count_commit(void *ctx, const struct record *r)
{
    (*(int *)ctx)++;
}

/* Records 5..9 received; 6 applied before the promotion: the sender keeps
 * 7..9 for peers that hold less, goes on at xid 10, never commits the
 * carried ones again, and is stable at 6 until peers acknowledge; with no
 * peer at all, stable at 9 once the loop runs, not at the next write (a
 * group idle after a failover stayed "not quiescent"). */
START_TEST(test_sender_continue_carry)
{
    struct event_base *base = event_base_new();
    struct cluster c;
    memset(&c, 0, sizeof(c));
    snprintf(c.name, sizeof(c.name), "unit");
    snprintf(c.secret, sizeof(c.secret), "secret");
    int commits = 0;
    static const struct sender_callbacks cb = { .commit = count_commit };
    struct sender s;
    const struct sender_config sc = {
        .base = base, .cluster = &c, .group = 0, .my_role = LINK_ROLE_BACKUP, .my_index = 1,
        .peer_role = ROLE_BACKUP, .npeers = 0, .sync = SENDER_SYNC_FULL, .cb = &cb,
        .ctx = &commits, .who = "unit",
    };
    ck_assert_int_eq(sender_init(&s, &sc), 0);
    struct reclog carry;
    reclog_init(&carry);
    for (uint64_t xid = 5; xid <= 9; xid++)
        push_record(&carry, xid, 1, 10);
    ck_assert_int_eq(sender_continue(&s, 6, &carry), 0);
    ck_assert_uint_eq(s.xid, 9);
    ck_assert_uint_eq(s.committed, 9);
    ck_assert_uint_eq(s.stable, 6);
    ck_assert_uint_eq(s.log.count, 3);
    ck_assert_uint_eq(s.log.head->xid, 7);
    ck_assert_uint_eq(sender_next_xid(&s), 10);
    ck_assert(!sender_in_flight(&s));
    /* Nothing in the carry above from: the stream goes on at from. */
    struct sender s2;
    ck_assert_int_eq(sender_init(&s2, &sc), 0);
    ck_assert_int_eq(sender_continue(&s2, 9, &carry), 0);
    ck_assert_uint_eq(s2.xid, 9);
    ck_assert_uint_eq(s2.log.count, 0);
    ck_assert_int_eq(commits, 0);
    ck_assert_int_eq(sender_live_peers(&s), 0);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ck_assert_uint_eq(s.stable, 9);
    ck_assert_int_eq(commits, 0);      /* committed already: not again */
    sender_destroy(&s2);
    sender_destroy(&s);
    reclog_destroy(&carry);
    event_base_free(base);
}
END_TEST

/* ---- peer bytes for logs ---- */

START_TEST(test_printable_copy)
{
    char out[16];
    /* printable ASCII passes; a newline, CR, escape, DEL, NUL and high bytes
     * do not, so no quoted text can start a log line of its own */
    const char in[] = "a b~\nFORGED\r\x1b[2J\x7f\x00\xff";
    ck_assert_str_eq(printable_copy(out, sizeof(out), in, sizeof(in) - 1), "a b~?FORGED??[2");
    ck_assert_str_eq(printable_copy(out, sizeof(out), "\x1b[2J\x7f\x00\xff", 7), "?[2J???");
    /* cut to the buffer, always terminated */
    ck_assert_str_eq(printable_copy(out, 4, "abcdef", 6), "abc");
    ck_assert_str_eq(printable_copy(out, 1, "abcdef", 6), "");
    ck_assert_str_eq(printable_copy(out, sizeof(out), "", 0), "");
    /* every byte value: printable ones kept, the rest '?' */
    for (int c = 0; c < 256; c++) {
        unsigned char b = (unsigned char)c;
        printable_copy(out, sizeof(out), &b, 1);
        ck_assert_int_eq(strlen(out), 1);
        ck_assert_int_eq(out[0], c >= 0x20 && c <= 0x7e ? c : '?');
    }
}
END_TEST

static Suite *repl_suite(void)
{
    Suite *s = suite_create("repl");
    TCase *crc = tcase_create("crc32c");
    TCase *sip = tcase_create("siphash");
    TCase *frame = tcase_create("frame");
    TCase *rec = tcase_create("record");
    TCase *log = tcase_create("reclog");

    tcase_add_test(crc, test_crc_vectors);
    tcase_add_test(crc, test_crc_hw_equals_sw);
    tcase_add_test(crc, test_crc_hw_long);
    tcase_add_test(crc, test_crc_incremental);
    suite_add_tcase(s, crc);

    tcase_add_test(sip, test_siphash_vectors);
    suite_add_tcase(s, sip);

    TCase *text = tcase_create("printable");
    tcase_add_test(text, test_printable_copy);
    suite_add_tcase(s, text);

    tcase_add_test(frame, test_frame_roundtrip);
    tcase_add_test(frame, test_frame_bad_headers);
    suite_add_tcase(s, frame);

    tcase_set_timeout(rec, 120);
    tcase_add_test(rec, test_record_roundtrip);
    tcase_add_test(rec, test_record_empty);
    tcase_add_test(rec, test_record_bad_fields);
    tcase_add_test(rec, test_record_truncations);
    tcase_add_test(rec, test_record_corruptions);
    suite_add_tcase(s, rec);

    tcase_add_test(log, test_reclog_basic);
    tcase_add_test(log, test_reclog_truncate_visit);
    tcase_add_test(log, test_reclog_many_ops_and_bad_entry);
    suite_add_tcase(s, log);

    TCase *snd = tcase_create("sender");
    tcase_add_test(snd, test_sender_continue_carry);
    suite_add_tcase(s, snd);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(repl_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
