/* record.c - the byte encoding of a record (record.h).
 *
 * Fixed-width little-endian fields, no padding, no alignment assumptions:
 *
 *   u64 xid | u64 stable_xid | u32 nops | op * nops | u64 data_off | u32 data_len | data
 *
 * and each op starts with its type byte:
 *
 *   ALLOC  u8 1 | u64 size | u64 off
 *   FREE   u8 2 | u64 off
 *   PUT    u8 3 | u8 nkey | key | u64 off | u32 nbytes | u32 flags | i64 exptime | u64 cas
 *   DEL    u8 4 | u8 nkey | key
 *   FLUSH  u8 5
 *
 * The decoder reads through a cursor that knows how many bytes are left;
 * every read checks that first, so no input (truncated, corrupted or
 * hostile) makes it read outside buf.  Every field is stored in full, so
 * a record that decodes re-encodes to exactly the same bytes.
 * docs/wire-format.md has the same layout with offsets. */
#include "record.h"

#include <string.h>

/* Fixed part: xid, stable_xid, nops before the ops; data_off, data_len after. */
#define REC_HEAD_SIZE 20
#define REC_TAIL_SIZE 12

/* ---- writing ---- */

static uint8_t *put_u8(uint8_t *p, uint8_t v)
{
    *p = v;
    return p + 1;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint8_t *put_bytes(uint8_t *p, const void *src, size_t n)
{
    if (n > 0)
        memcpy(p, src, n);
    return p + n;
}

/* Encoded size of one op; an unknown type is written as its type byte only
 * (and the decoder will refuse it). */
static size_t op_encoded_size(const struct rec_op *op)
{
    switch (op->type) {
    case ROP_ALLOC: return 1 + 8 + 8;
    case ROP_FREE: return 1 + 8;
    case ROP_PUT: return 1 + 1 + (size_t)op->nkey + 8 + 4 + 4 + 8 + 8;
    case ROP_DEL: return 1 + 1 + (size_t)op->nkey;
    default: return 1;
    }
}

static uint8_t *op_encode(const struct rec_op *op, uint8_t *p)
{
    p = put_u8(p, op->type);
    switch (op->type) {
    case ROP_ALLOC:
        p = put_u64(p, op->size);
        p = put_u64(p, op->off);
        break;
    case ROP_FREE:
        p = put_u64(p, op->off);
        break;
    case ROP_PUT:
        p = put_u8(p, op->nkey);
        p = put_bytes(p, op->key, op->nkey);
        p = put_u64(p, op->off);
        p = put_u32(p, op->nbytes);
        p = put_u32(p, op->flags);
        p = put_u64(p, (uint64_t)op->exptime);
        p = put_u64(p, op->cas);
        break;
    case ROP_DEL:
        p = put_u8(p, op->nkey);
        p = put_bytes(p, op->key, op->nkey);
        break;
    default:
        break;
    }
    return p;
}

size_t rec_encoded_size(const struct record *r)
{
    size_t n = REC_HEAD_SIZE + REC_TAIL_SIZE + (size_t)r->data_len;
    for (uint32_t i = 0; i < r->nops; i++)
        n += op_encoded_size(&r->ops[i]);
    return n;
}

void rec_encode(const struct record *r, uint8_t *out)
{
    uint8_t *p = out;
    p = put_u64(p, r->xid);
    p = put_u64(p, r->stable_xid);
    p = put_u32(p, r->nops);
    for (uint32_t i = 0; i < r->nops; i++)
        p = op_encode(&r->ops[i], p);
    p = put_u64(p, r->data_off);
    p = put_u32(p, r->data_len);
    put_bytes(p, r->data, r->data_len);
}

/* ---- reading ---- */

struct cursor {
    const uint8_t *p;
    size_t left;
};

static bool get_u8(struct cursor *c, uint8_t *v)
{
    if (c->left < 1)
        return false;
    *v = c->p[0];
    c->p++;
    c->left--;
    return true;
}

static bool get_u32(struct cursor *c, uint32_t *v)
{
    if (c->left < 4)
        return false;
    uint32_t x = 0;
    for (int i = 3; i >= 0; i--)
        x = (x << 8) | c->p[i];
    *v = x;
    c->p += 4;
    c->left -= 4;
    return true;
}

static bool get_u64(struct cursor *c, uint64_t *v)
{
    if (c->left < 8)
        return false;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | c->p[i];
    *v = x;
    c->p += 8;
    c->left -= 8;
    return true;
}

/* n bytes in place: *v points into the buffer. */
static bool get_bytes(struct cursor *c, size_t n, const uint8_t **v)
{
    if (c->left < n)
        return false;
    *v = c->p;
    c->p += n;
    c->left -= n;
    return true;
}

/* u8 nkey (1..REC_KEY_MAX) and the key bytes. */
static bool get_key(struct cursor *c, struct rec_op *op)
{
    const uint8_t *key;
    if (!get_u8(c, &op->nkey))
        return false;
    if (op->nkey == 0 || op->nkey > REC_KEY_MAX)
        return false;
    if (!get_bytes(c, op->nkey, &key))
        return false;
    op->key = (const char *)key;
    return true;
}

/* Every op takes at least one byte and the tail follows the ops: a cheap
 * bound on nops given the bytes after the count. */
static bool nops_fit(uint32_t nops, size_t left)
{
    return left >= REC_TAIL_SIZE && nops <= left - REC_TAIL_SIZE;
}

static bool op_decode(struct cursor *c, struct rec_op *op)
{
    uint64_t exptime;

    memset(op, 0, sizeof(*op));
    if (!get_u8(c, &op->type))
        return false;
    switch (op->type) {
    case ROP_ALLOC:
        return get_u64(c, &op->size) && get_u64(c, &op->off);
    case ROP_FREE:
        return get_u64(c, &op->off);
    case ROP_PUT:
        if (!get_key(c, op))
            return false;
        if (!get_u64(c, &op->off) || !get_u32(c, &op->nbytes) || !get_u32(c, &op->flags))
            return false;
        if (!get_u64(c, &exptime) || !get_u64(c, &op->cas))
            return false;
        op->exptime = (int64_t)exptime;
        return true;
    case ROP_DEL:
        return get_key(c, op);
    case ROP_FLUSH:
        return true;
    default:
        return false;
    }
}

int rec_decode(const uint8_t *buf, size_t len, struct record *r,
               struct rec_op *ops_buf, uint32_t max_ops)
{
    struct cursor c = { buf, len };
    const uint8_t *data;

    memset(r, 0, sizeof(*r));
    if (!get_u64(&c, &r->xid) || !get_u64(&c, &r->stable_xid) || !get_u32(&c, &r->nops))
        return -1;
    if (r->nops > max_ops)
        return -1;
    if (!nops_fit(r->nops, c.left))
        return -1;
    for (uint32_t i = 0; i < r->nops; i++) {
        if (!op_decode(&c, &ops_buf[i]))
            return -1;
    }
    r->ops = ops_buf;
    if (!get_u64(&c, &r->data_off) || !get_u32(&c, &r->data_len))
        return -1;
    if (r->data_off + r->data_len < r->data_off)   /* wraps around */
        return -1;
    if (!get_bytes(&c, r->data_len, &data))
        return -1;
    r->data = data;
    if (c.left != 0)   /* trailing bytes */
        return -1;
    return 0;
}

uint32_t rec_peek_nops(const uint8_t *buf, size_t len)
{
    struct cursor c = { buf, len };
    uint64_t skip;
    uint32_t nops;

    if (!get_u64(&c, &skip) || !get_u64(&c, &skip) || !get_u32(&c, &nops))
        return 0;
    /* A count that cannot fit in the bytes that follow is malformed: report
     * 0, so callers never size a buffer from a hostile count (rec_decode
     * then refuses the record since nops > max_ops). */
    if (!nops_fit(nops, c.left))
        return 0;
    return nops;
}
