/* fuzz_frame.c - libFuzzer target for the frames of the links between
 * processes (docs/wire-format.md): the frame header check of repl/frame.c
 * and, for every frame it accepts, the real decoder of its type:
 *
 *   CHALLENGE, WELCOME, ACK, STABLE   the length rules of link.c, sender.c
 *                                     and receiver.c (nothing else to decode)
 *   HELLO     link_hello_decode()
 *   RECORD    rec_peek_nops() + rec_decode() as a receiver calls them, then
 *             the ops replayed on a replica table and used pieces
 *             (meta_replay_op(), what a parity process does)
 *   REQUEST, REPLY   recov_decode() (recovery), the rebuild decoders
 *             (rb_decode_begin(), rb_apply_meta() on a fresh table and
 *             used pieces, rb_decode_units() + rb_units_arrive()), and for a
 *             REQUEST the pbr copy ('B', 'C' = rec_decode(), 'E')
 *   CONTROL   the control-message parsers (control_checks.h)
 *
 * Each input is used twice:
 *   1. as the bytes a link receives: frames are cut off the front with
 *      frame_header_decode() until one is refused (the link drops) or
 *      incomplete (it waits);
 *   2. as a list of (u8 type, u16 length, bytes) that the target turns into
 *      frames with the real encoder and a correct CRC, then reads as in 1;
 *      so the decoders get arbitrary payloads without the fuzzer having to
 *      get lengths and CRCs right.
 * A payload goes to its decoder whether or not its CRC matches: CRC-32C is
 * no defence against a hostile peer, who can compute it.
 *
 * Besides "no crash, no sanitizer report": the header decodes exactly
 * (little-endian) and re-encodes to the same 16 bytes; a frame is accepted
 * iff magic, type (1..11) and length (<= FRAME_MAX_PAYLOAD) are right;
 * frame_payload_ok() agrees with a bitwise CRC-32C; everything a decoder
 * accepts lies inside the payload and re-encodes to the same bytes (HELLO
 * identity, records, recovery headers, BEGIN, META through rb_send_meta());
 * the used pieces make a consistent allocator (dalloc_check()) unless two
 * overlap, whatever ops or pieces arrive; and refusals say why.  Every decoder gets an exact-size heap copy,
 * so ASan sees any read past the end.
 *
 * With FUZZ_SEED_DIR set in the environment, the target first writes valid
 * frames of every type there, made by the real encoders, one small file per
 * frame in both forms ("stream_*" and "tlv_*") and one stream of them all:
 * scripts/fuzz points it at the corpus.  Build and run with scripts/fuzz. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_frame"
#include "control_checks.h"

#include "alloc.h"
#include "pieceset.h"
#include "crc32c.h"
#include "frame.h"
#include "link.h"
#include "meta.h"
#include "rebuild.h"
#include "record.h"
#include "recovery.h"
#include "siphash.h"

#define REPLICA_REGION (1u << 20)      /* region of the replica table and allocator */
#define PBR_CHUNK_MAX_OPS 4096         /* pbr/engine_backup.c's CHUNK_MAX_OPS */

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Bitwise CRC-32C (reflected 0x82F63B78): the reference for frame_payload_ok. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return c ^ 0xffffffffu;
}

/* ---- HELLO ---- */

static void check_hello(const uint8_t *p, size_t len)
{
    struct link_identity id, before;
    memset(&id, 0xa5, sizeof(id));
    before = id;
    bool ok = link_hello_decode(p, len, &id);
    size_t clen = len ? p[0] : 0;
    bool want = len >= 1 && clen >= 1 && clen <= LINK_NAME_MAX - 1 &&
                len == clen + 10 + LINK_HELLO_PROOF_SIZE && memchr(p + 1, '\0', clen) == NULL;
    CHECK(ok == want);
    if (!ok) {
        CHECK(memcmp(&id, &before, sizeof(id)) == 0);
        return;
    }
    CHECK(strlen(id.cluster) == clen && memcmp(id.cluster, p + 1, clen) == 0);
    CHECK(id.group == le(p + 1 + clen, 4) && id.role == p[1 + clen + 4] &&
          id.index == le(p + 1 + clen + 5, 4));
    uint8_t ident[LINK_HELLO_IDENT_MAX];
    size_t n = link_hello_encode_identity(&id, ident);
    CHECK(n == len - LINK_HELLO_PROOF_SIZE && memcmp(ident, p, n) == 0);
}

/* ---- RECORD ---- */

/* Replays the ops on a replica table and used pieces, stopping at the
 * first refusal as the engines do; the pieces make a consistent allocator
 * unless two of them overlap. */
static void check_pieces(const struct pieceset *ps)
{
    CHECK(pieceset_used_bytes(ps) <= REPLICA_REGION);
    errno = 0;
    struct dalloc *a = pieceset_build(ps);
    if (a == NULL) {
        CHECK(errno == ENOSPC);
        return;
    }
    CHECK(dalloc_check(a) == 0);
    CHECK(dalloc_used_bytes(a) == pieceset_used_bytes(ps));
    CHECK(dalloc_used_pieces(a) == pieceset_count(ps));
    dalloc_destroy(a);
}

static void replay_record(const struct record *r)
{
    struct meta_table t;
    struct pieceset *ps = pieceset_new(REPLICA_REGION);
    CHECK(ps != NULL && meta_init(&t, 4) == 0);
    char err[256];
    for (uint32_t i = 0; i < r->nops; i++) {
        err[0] = '\0';
        if (meta_replay_op(&t, ps, &r->ops[i], false, err, sizeof(err)) != 0) {
            CHECK(err[0] != '\0');
            break;
        }
    }
    check_pieces(ps);
    meta_destroy(&t);
    pieceset_destroy(ps);
}

/* A record rec_decode() accepted from p[0..len). */
static void check_record_fields(const struct record *r, const uint8_t *p, size_t len,
                                const struct rec_op *ops)
{
    CHECK(r->ops == ops || r->nops == 0);
    CHECK(r->nops <= len);
    for (uint32_t i = 0; i < r->nops; i++) {
        const struct rec_op *op = &r->ops[i];
        CHECK(op->type >= ROP_ALLOC && op->type <= ROP_FLUSH);
        if (op->type == ROP_PUT || op->type == ROP_DEL) {
            CHECK(op->nkey >= 1 && op->nkey <= REC_KEY_MAX);
            CHECK((const uint8_t *)op->key > p &&
                  (const uint8_t *)op->key + op->nkey <= p + len);
        }
    }
    CHECK(r->data_off + r->data_len >= r->data_off);
    CHECK(r->data >= p && r->data + r->data_len == p + len);
    /* Every field at full width: it re-encodes to the same bytes. */
    CHECK(rec_encoded_size(r) == len);
    uint8_t *again = malloc(len ? len : 1);
    CHECK(again != NULL);
    rec_encode(r, again);
    CHECK(memcmp(again, p, len) == 0);
    free(again);
}

/* As repl/receiver.c decodes a RECORD payload: peek the count, make room
 * for it, decode. */
static void check_record(const uint8_t *p, size_t len)
{
    uint32_t nops = rec_peek_nops(p, len);
    CHECK(nops <= len);
    uint32_t cap = nops > 16 ? nops : 16;
    struct rec_op *ops = calloc(cap, sizeof(*ops));
    CHECK(ops != NULL);
    struct record r;
    int rc = rec_decode(p, len, &r, ops, cap);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        CHECK(r.nops == nops);
        check_record_fields(&r, p, len, ops);
        /* The caller's room is respected: exactly enough works, one less not. */
        struct record r2;
        CHECK(rec_decode(p, len, &r2, ops, nops) == 0 && r2.nops == nops);
        if (nops > 0)
            CHECK(rec_decode(p, len, &r2, ops, nops - 1) == -1);
        replay_record(&r);
    }
    free(ops);
}

/* ---- REQUEST / REPLY: recovery ---- */

static void check_recovery(const uint8_t *p, size_t len)
{
    struct recov_msg m;
    if (recov_decode(p, len, &m) != 0)
        return;
    CHECK(m.kind >= RK_FETCH && m.kind <= RK_HAVE);
    CHECK(m.nlist >= 0 && m.nlist <= (int)sizeof(m.list));
    CHECK(m.nranges >= 0 && m.nranges <= RECOV_MAX_RANGES);
    for (int i = 0; i < m.nranges; i++) {
        CHECK(m.ranges[i].len > 0 && m.ranges[i].off % RECOV_UNIT == 0);
        CHECK(m.ranges[i].off + m.ranges[i].len > m.ranges[i].off);
    }
    CHECK(m.bytes >= p && m.bytes + m.nbytes == p + len);
    bool has_bytes = m.kind == RK_DATA || m.kind == RK_RESIDUAL || m.kind == RK_DECODED;
    CHECK(m.nbytes == (has_bytes ? recov_ranges_bytes(m.ranges, m.nranges) : 0));
    uint8_t *hdr = malloc(recov_header_max());
    CHECK(hdr != NULL);
    size_t n = recov_encode_header(&m, hdr);
    CHECK(n <= recov_header_max() && n + m.nbytes == len && memcmp(hdr, p, n) == 0);
    free(hdr);
}

/* ---- REQUEST: rebuild ---- */

struct meta_copy {
    struct meta_table *t;
    struct pieceset *ps;
    int messages;
};

/* rb_send_meta's send: apply the message to a second table. */
static int apply_copy(void *ctx, const uint8_t *p, size_t len)
{
    struct meta_copy *c = ctx;
    char err[192];
    if (rb_kind_of(p, len) == RB_META_DONE)
        return 0;   /* the end of the walk: nothing to apply */
    uint8_t *exact = fuzz_copy(p, len);
    int rc = rb_apply_meta(exact, len, c->t, c->ps, err, sizeof(err));
    free(exact);
    CHECK(rc == 0);
    c->messages++;
    return 0;
}

static void check_meta(const uint8_t *p, size_t len)
{
    struct meta_table t;
    struct pieceset *ps = pieceset_new(REPLICA_REGION);
    CHECK(ps != NULL && meta_init(&t, 4) == 0);
    char err[192];
    err[0] = '\0';
    int rc = rb_apply_meta(p, len, &t, ps, err, sizeof(err));
    check_pieces(ps);
    struct dalloc *a = rc == 0 ? pieceset_build(ps) : NULL;
    if (rc != 0) {
        CHECK(rc == -1 && err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        /* Nothing ran out of memory here: a refusal names the real reason. */
        CHECK(strcmp(err, "out of memory") != 0);
    } else {
        CHECK(len >= 13 && p[8] == RB_META);
        CHECK(t.count <= le(p + 9, 4));
        /* Every entry lies inside the region, as a PUT's replay requires. */
        struct item *e;
        for (e = t.lru_head; e; e = e->next)
            CHECK(meta_off(e) <= REPLICA_REGION && e->nbytes <= REPLICA_REGION - meta_off(e));
    }
    if (a != NULL) {
        /* Sent again by the source's encoder, it builds the same state
         * (when the pieces made an allocator: no two overlap). */
        struct meta_table t2;
        struct meta_copy c = { &t2, pieceset_new(REPLICA_REGION), 0 };
        CHECK(c.ps != NULL && meta_init(&t2, 4) == 0);
        CHECK(rb_send_meta(&t, a, apply_copy, &c) == 0);
        CHECK(meta_digest(&t) == meta_digest(&t2) && t.count == t2.count);
        struct dalloc *a2 = pieceset_build(c.ps);
        CHECK(a2 != NULL && dalloc_digest(a) == dalloc_digest(a2));
        dalloc_destroy(a2);
        meta_destroy(&t2);
        pieceset_destroy(c.ps);
    }
    dalloc_destroy(a);
    meta_destroy(&t);
    pieceset_destroy(ps);
}

struct arrive_sum {
    uint64_t off, end, bytes;
};

static void count_run(void *ctx, uint64_t off, uint64_t len)
{
    struct arrive_sum *s = ctx;
    CHECK(len > 0 && off >= s->off && off + len <= s->end);
    s->bytes += len;
}

static void check_units(const uint8_t *p, size_t len, uint64_t region)
{
    uint64_t t, off;
    const uint8_t *bytes;
    uint32_t n;
    if (rb_decode_units(p, len, region, &t, &off, &bytes, &n) != 0)
        return;
    CHECK(len >= 25 && p[8] == RB_UNITS);
    CHECK(t == le(p + 9, 8) && off == le(p + 17, 8));
    CHECK(bytes == p + 25 && n == len - 25);
    CHECK(off % RECOV_UNIT == 0 && off <= region && n <= region - off);
    CHECK(n % RECOV_UNIT == 0 || off + n == region);
    if (region > 16 * REPLICA_REGION)
        return;
    /* Into a fresh unit tracker: every unit is new. */
    struct rb_units u;
    CHECK(rb_units_init(&u, region) == 0);
    struct arrive_sum s = { off, off + n, 0 };
    rb_units_arrive(&u, t, off, n, count_run, &s);
    CHECK(s.bytes == n && u.bytes == n);
    CHECK(u.arrived == (n + RECOV_UNIT - 1) / RECOV_UNIT && u.arrived <= u.nunits);
    rb_units_destroy(&u);
}

static void check_rebuild(const uint8_t *p, size_t len)
{
    uint8_t kind = rb_kind_of(p, len);
    CHECK(kind == (len >= 9 ? p[8] : 0));
    CHECK(rb_is_rebuild(p, len) == (kind >= RB_BEGIN && kind <= RB_TAKEN));
    switch (kind) {
    case RB_BEGIN: {
        struct rb_begin b;
        int rc = rb_decode_begin(p, len, &b);
        CHECK((rc == 0) == (len == 37 || len == 45));
        if (rc == 0) {
            CHECK(len == 45 || b.attempt == 0);
            struct rb_msg m = { 0 };
            rb_msg_begin(&m, &b);
            /* The encoder writes id 0 and leaves out an attempt of 0; the
             * rest is the same bytes. */
            size_t want = b.attempt ? 45 : 37;
            CHECK(!m.oom && m.len == want && memcmp(m.buf + 8, p + 8, want - 8) == 0);
            rb_msg_free(&m);
        }
        break;
    }
    case RB_META:
        check_meta(p, len);
        break;
    case RB_TAKEN: {
        uint8_t role;
        uint32_t index;
        uint64_t taken;
        if (rb_decode_taken(p, len, &role, &index, &taken) == 0) {
            struct rb_msg m = { 0 };
            rb_msg_taken(&m, role, index, taken);
            CHECK(len == 22 && !m.oom && m.len == len && memcmp(m.buf + 8, p + 8, len - 8) == 0);
            rb_msg_free(&m);
        } else {
            CHECK(len != 22);
        }
        break;
    }
    case RB_UNITS:
        check_units(p, len, REPLICA_REGION);
        check_units(p, len, 5 * RECOV_UNIT + 123);
        check_units(p, len, UINT64_MAX);
        break;
    default:
        /* END: receivers take it whatever its length. */
        break;
    }
}

/* ---- REQUEST: the pbr copy ---- */

static struct rec_op *chunk_ops;

static void check_snapshot(const uint8_t *p, size_t len)
{
    if (len < 1 || p[0] != 'C')
        return;   /* 'B' must be 16 bytes after the kind, 'E' any: length checks only */
    struct record r;
    if (rec_decode(p + 1, len - 1, &r, chunk_ops, PBR_CHUNK_MAX_OPS) == 0)
        check_record_fields(&r, p + 1, len - 1, chunk_ops);
}

/* ---- frames ---- */

static void check_payload(uint16_t type, const uint8_t *p, uint32_t len)
{
    switch (type) {
    case FT_HELLO:
        check_hello(p, len);
        break;
    case FT_RECORD:
        check_record(p, len);
        break;
    case FT_REQUEST:
        check_snapshot(p, len);
        check_rebuild(p, len);
        check_recovery(p, len);
        break;
    case FT_REPLY:
        check_recovery(p, len);
        break;
    case FT_CONTROL:
        check_control(p, len);
        break;
    default:
        /* CHALLENGE (16 bytes), WELCOME and STABLE (8), ACK (8 or more),
         * REJECT (text shown sanitized), PING: only lengths are checked
         * by the receivers, and nothing to decode. */
        break;
    }
}

/* One header, from an exact-size copy.  Returns frame_header_decode's answer. */
static int check_header(const uint8_t *data, struct frame_header *h)
{
    uint8_t *hdr = fuzz_copy(data, FRAME_HEADER_SIZE);
    int rc = frame_header_decode(hdr, h);
    CHECK(h->magic == le(hdr, 4) && h->type == le(hdr + 4, 2) && h->flags == le(hdr + 6, 2) &&
          h->length == le(hdr + 8, 4) && h->crc == le(hdr + 12, 4));
    bool sane = h->magic == FRAME_MAGIC && h->type >= FT_CHALLENGE && h->type <= FT_LAST &&
                h->length <= FRAME_MAX_PAYLOAD;
    CHECK(rc == (sane ? 0 : -1));
    if (rc == 0) {
        uint8_t again[FRAME_HEADER_SIZE];
        frame_header_encode_crc(again, h->type, h->flags, h->length, h->crc);
        CHECK(memcmp(again, hdr, FRAME_HEADER_SIZE) == 0);
        CHECK(strcmp(frame_type_name(h->type), "?") != 0);
    }
    free(hdr);
    return rc;
}

/* Reads data as a link does; returns the number of whole frames taken. */
static size_t read_stream(const uint8_t *data, size_t len)
{
    size_t pos = 0, frames = 0;
    while (len - pos >= FRAME_HEADER_SIZE) {
        struct frame_header h;
        if (check_header(data + pos, &h) < 0)
            break;                                   /* the link drops */
        if (len - pos - FRAME_HEADER_SIZE < h.length)
            break;                                   /* it waits for the rest */
        CHECK(h.length <= FRAME_MAX_PAYLOAD && h.length <= len - pos - FRAME_HEADER_SIZE);
        uint8_t *payload = fuzz_copy(data + pos + FRAME_HEADER_SIZE, h.length);
        CHECK(frame_payload_ok(&h, payload) == (ref_crc32c(payload, h.length) == h.crc));
        check_payload(h.type, payload, h.length);
        free(payload);
        pos += FRAME_HEADER_SIZE + h.length;
        frames++;
    }
    return frames;
}

/* Encodes one frame (header with a correct CRC, payload) at out. */
static size_t put_frame(uint8_t *out, uint16_t type, const uint8_t *payload, uint32_t len)
{
    frame_header_encode(out, type, 0, payload, len);
    if (len)
        memcpy(out + FRAME_HEADER_SIZE, payload, len);
    return FRAME_HEADER_SIZE + len;
}

/* The input as (u8 type, u16 length, bytes) pieces, framed by the encoder. */
static void read_built(const uint8_t *data, size_t len)
{
    uint8_t *stream = malloc(len / 3 * FRAME_HEADER_SIZE + len + FRAME_HEADER_SIZE);
    CHECK(stream != NULL);
    size_t pos = 0, out = 0, frames = 0;
    while (len - pos >= 3) {
        uint16_t type = (uint16_t)(FT_CHALLENGE + data[pos] % FT_LAST);
        size_t n = (size_t)le(data + pos + 1, 2);
        pos += 3;
        if (n > len - pos)
            n = len - pos;
        out += put_frame(stream + out, type, data + pos, (uint32_t)n);
        pos += n;
        frames++;
    }
    uint8_t *exact = fuzz_copy(stream, out);
    free(stream);
    CHECK(read_stream(exact, out) == frames);
    free(exact);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    read_stream(data, len);
    read_built(data, len);
    return 0;
}

/* ---- seeds: valid frames from the real encoders ---- */

struct seeds {
    const char *dir;
    int count;
    uint8_t *all;           /* every seed frame, back to back */
    size_t all_len, all_cap;
};

static void write_file(const char *dir, const char *name, const uint8_t *p, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, FUZZ_NAME ": cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* One frame as a stream file and as a (type, length, bytes) file. */
static void seed(struct seeds *s, uint16_t type, const void *payload, size_t len)
{
    CHECK(len <= 0xffff);
    uint8_t *buf = malloc(FRAME_HEADER_SIZE + len + 3);
    CHECK(buf != NULL);
    char name[64];
    size_t n = put_frame(buf, type, payload, (uint32_t)len);
    snprintf(name, sizeof(name), "stream_%03d_%s", s->count, frame_type_name(type));
    write_file(s->dir, name, buf, n);
    if (s->all_len + n > s->all_cap) {
        s->all_cap = (s->all_len + n) * 2;
        s->all = realloc(s->all, s->all_cap);
        CHECK(s->all != NULL);
    }
    memcpy(s->all + s->all_len, buf, n);
    s->all_len += n;
    buf[0] = (uint8_t)(type - FT_CHALLENGE);
    put_le(buf + 1, len, 2);
    if (len)
        memcpy(buf + 3, payload, len);
    snprintf(name, sizeof(name), "tlv_%03d_%s", s->count, frame_type_name(type));
    write_file(s->dir, name, buf, len + 3);
    free(buf);
    s->count++;
}

static void seed_u64(struct seeds *s, uint16_t type, uint64_t v)
{
    uint8_t b[8];
    put_le(b, v, 8);
    seed(s, type, b, 8);
}

static void seed_control(void *ctx, const char *text, size_t len)
{
    seed(ctx, FT_CONTROL, text, len);
}

static void seed_handshake(struct seeds *s)
{
    uint8_t nonce[16];
    for (int i = 0; i < 16; i++)
        nonce[i] = (uint8_t)(0x31 * i + 7);
    seed(s, FT_CHALLENGE, nonce, sizeof(nonce));
    /* HELLO with the proof of docs/wire-format.md section 3 for secret "s3cret". */
    struct link_identity me;
    memset(&me, 0, sizeof(me));
    snprintf(me.cluster, sizeof(me.cluster), "demo");
    me.group = 2;
    me.role = LINK_ROLE_DATA;
    me.index = 1;
    uint8_t hello[LINK_HELLO_IDENT_MAX + LINK_HELLO_PROOF_SIZE], key[16];
    uint8_t msg[16 + LINK_HELLO_IDENT_MAX];
    size_t n = link_hello_encode_identity(&me, hello);
    put_le(key, siphash24((const uint8_t *)"cocytus-kv-key-0", "s3cret", 6), 8);
    put_le(key + 8, siphash24((const uint8_t *)"cocytus-kv-key-1", "s3cret", 6), 8);
    memcpy(msg, nonce, 16);
    memcpy(msg + 16, hello, n);
    put_le(hello + n, siphash24(key, msg, 16 + n), 8);
    seed(s, FT_HELLO, hello, n + LINK_HELLO_PROOF_SIZE);
    seed_u64(s, FT_WELCOME, 41);
    static const char reject[] = "bad proof (wrong secret?)";
    seed(s, FT_REJECT, reject, sizeof(reject) - 1);
    seed_u64(s, FT_ACK, 42);
    seed_u64(s, FT_STABLE, 40);
    seed(s, FT_PING, "", 0);
    seed_u64(s, FT_PING, 123456);
    seed_u64(s, FT_PONG, 123456);
}

static void seed_record(struct seeds *s, uint16_t type, const char *prefix,
                        const struct record *r)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    size_t n = rec_encoded_size(r);
    uint8_t *buf = malloc(plen + n);
    CHECK(buf != NULL);
    if (plen)
        memcpy(buf, prefix, plen);
    rec_encode(r, buf + plen);
    seed(s, type, buf, plen + n);
    free(buf);
}

static void seed_records(struct seeds *s)
{
    /* The example of docs/wire-format.md section 2: set foo, 5 bytes. */
    struct rec_op set[2];
    memset(set, 0, sizeof(set));
    set[0].type = ROP_ALLOC;
    set[0].size = 5;
    set[0].off = 4096;
    set[1].type = ROP_PUT;
    set[1].key = "foo";
    set[1].nkey = 3;
    set[1].off = 4096;
    set[1].nbytes = 5;
    set[1].cas = 42;
    struct record r = { .xid = 10, .stable_xid = 9, .nops = 2, .ops = set, .data_off = 4096,
                        .data_len = 5, .data = (const uint8_t *)"hello" };
    seed_record(s, FT_RECORD, NULL, &r);
    /* Every op type. */
    struct rec_op all[5];
    memset(all, 0, sizeof(all));
    all[0].type = ROP_FREE;
    all[0].off = 4096;
    all[1].type = ROP_DEL;
    all[1].key = "foo";
    all[1].nkey = 3;
    all[2].type = ROP_FLUSH;
    all[3].type = ROP_ALLOC;
    all[3].size = 100;
    all[3].off = 0;
    all[4].type = ROP_PUT;
    all[4].key = "bar";
    all[4].nkey = 3;
    all[4].off = 0;
    all[4].nbytes = 100;
    all[4].flags = 7;
    all[4].exptime = 1700000000;
    all[4].cas = 43;
    struct record r2 = { .xid = 11, .stable_xid = 10, .nops = 5, .ops = all, .data_off = 0,
                         .data_len = 4, .data = (const uint8_t *)"\x01\x02\x03\x04" };
    seed_record(s, FT_RECORD, NULL, &r2);
    struct record empty = { .xid = 12, .stable_xid = 11 };
    seed_record(s, FT_RECORD, NULL, &empty);
    /* The pbr copy: begin, a chunk of PUTs, end. */
    uint8_t b[17] = { 'B' };
    put_le(b + 1, 500, 8);
    put_le(b + 9, 2, 8);
    seed(s, FT_REQUEST, b, sizeof(b));
    struct record chunk = { .nops = 1, .ops = &all[4], .data_len = 0 };
    seed_record(s, FT_REQUEST, "C", &chunk);
    uint8_t e[9] = { 'E' };
    put_le(e + 1, 2, 8);
    seed(s, FT_REQUEST, e, sizeof(e));
}

static void seed_recovery_msg(struct seeds *s, uint16_t type, const struct recov_msg *m)
{
    uint8_t *buf = malloc(recov_header_max() + 2 * RECOV_UNIT);
    CHECK(buf != NULL);
    size_t n = recov_encode_header(m, buf);
    uint64_t bytes = m->kind == RK_DATA || m->kind == RK_RESIDUAL || m->kind == RK_DECODED
                         ? recov_ranges_bytes(m->ranges, m->nranges) : 0;
    for (uint64_t i = 0; i < bytes; i++)
        buf[n + i] = (uint8_t)(i * 7);
    seed(s, type, buf, n + bytes);
    free(buf);
}

static void seed_recovery(struct seeds *s)
{
    struct recov_msg m;
    memset(&m, 0, sizeof(m));
    m.id = ((uint64_t)1 << 48) | 5;
    m.nranges = 2;
    m.ranges[0].off = 0;
    m.ranges[0].len = 16;
    m.ranges[1].off = 8192;
    m.ranges[1].len = 100;
    m.kind = RK_FETCH;
    m.nlist = 2;
    m.list[0] = 0;
    m.list[1] = 1;
    seed_recovery_msg(s, FT_REQUEST, &m);
    m.kind = RK_DATA;
    m.who = 2;
    m.t = 77;
    m.nlist = 0;
    seed_recovery_msg(s, FT_REPLY, &m);
    m.kind = RK_BATCH;
    m.who = 0;
    m.t = 0;
    m.nlist = 1;
    seed_recovery_msg(s, FT_REQUEST, &m);
    m.kind = RK_RESIDUAL;
    m.who = 1;
    m.nlist = 0;
    seed_recovery_msg(s, FT_REPLY, &m);
    m.kind = RK_DECODED;
    m.who = 2;
    seed_recovery_msg(s, FT_REQUEST, &m);
    m.kind = RK_NEED;
    m.id = 0;
    m.who = 0;
    seed_recovery_msg(s, FT_REQUEST, &m);
    m.kind = RK_HAVE;
    m.who = 1;
    seed_recovery_msg(s, FT_REPLY, &m);
}

static int seed_meta_message(void *ctx, const uint8_t *p, size_t len)
{
    seed(ctx, FT_REQUEST, p, len);
    return 0;
}

static void seed_rebuild(struct seeds *s)
{
    struct rb_msg m = { 0 };
    struct rb_begin b = { .source = 1, .x0 = 300, .end = 3 * RECOV_UNIT, .max_cas = 99 };
    rb_msg_begin(&m, &b);
    seed(s, FT_REQUEST, m.buf, m.len);
    /* META from a small table and allocator, through the source's encoder. */
    struct meta_table t;
    struct dalloc *a = dalloc_new(REPLICA_REGION);
    CHECK(a != NULL && meta_init(&t, 4) == 0);
    uint64_t off1, off2;
    CHECK(dalloc_alloc(a, 100, &off1) == 0 && dalloc_alloc(a, 5000, &off2) == 0);
    CHECK(meta_put(&t, "alpha", 5, off1, 100, 0, 0, 1) != NULL);
    CHECK(meta_put(&t, "beta", 4, off2, 5000, 3, 1700000000, 2) != NULL);
    CHECK(rb_send_meta(&t, a, seed_meta_message, s) == 0);
    meta_destroy(&t);
    dalloc_destroy(a);
    uint8_t unit[RECOV_UNIT];
    for (size_t i = 0; i < sizeof(unit); i++)
        unit[i] = (uint8_t)(i ^ (i >> 8));
    rb_msg_units(&m, 290, RECOV_UNIT, unit, sizeof(unit));
    seed(s, FT_REQUEST, m.buf, m.len);
    rb_msg_units(&m, 291, 5 * RECOV_UNIT, unit, 123);   /* the short last unit */
    seed(s, FT_REQUEST, m.buf, m.len);
    rb_msg_end(&m, 3);
    seed(s, FT_REQUEST, m.buf, m.len);
    rb_msg_free(&m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    chunk_ops = calloc(PBR_CHUNK_MAX_OPS, sizeof(*chunk_ops));
    CHECK(chunk_ops != NULL);
    CHECK(ref_crc32c((const uint8_t *)"123456789", 9) == 0xe3069283u);
    struct seeds s = { getenv("FUZZ_SEED_DIR"), 0, NULL, 0, 0 };
    if (!s.dir || !*s.dir)
        return 0;
    seed_handshake(&s);
    seed_records(&s);
    seed_recovery(&s);
    seed_rebuild(&s);
    seed_control_messages(seed_control, &s);
    write_file(s.dir, "stream_all", s.all, s.all_len);
    free(s.all);
    fprintf(stderr, FUZZ_NAME ": %d seed frames written to %s\n", s.count, s.dir);
    return 0;
}
