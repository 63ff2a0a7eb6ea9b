/* fuzz_bin.c - libFuzzer target for bin_parse_request(), the pure
 * binary-protocol request splitter.  Each input is parsed as a connection's
 * buffered bytes and checked against proto_bin.h: the header is decoded
 * faithfully, total is 24 + body length and never more than the input for a
 * complete answer, the parts tile the body inside the buffer, every prefix
 * of a complete request is incomplete, more bytes never change a complete
 * answer, and the input splits into the same requests however it is read.
 * Every parse gets an exact-size heap copy so ASan sees any read past the
 * end.  Build and run with scripts/fuzz. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_bin.h"
#include "fuzz_util.h"

#define FULL_PREFIX_SWEEP 512   /* inputs up to this long: parse every prefix */
#define SAMPLED_PREFIXES 24     /* longer inputs: this many extra prefixes */

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz_bin: invariant failed: %s (%s:%d)\n", #cond,   \
                    __FILE__, __LINE__);                                         \
            abort();                                                             \
        }                                                                        \
    } while (0)

struct outcome {
    enum bin_parse_result r;
    size_t total;
    struct bin_header hdr;
};

static bool complete(enum bin_parse_result r)
{
    return r == BIN_PARSE_OK || r == BIN_PARSE_EINVAL || r == BIN_PARSE_UNKNOWN;
}

static bool same_outcome(const struct outcome *a, const struct outcome *b)
{
    if (a->r != b->r)
        return false;
    if (a->r == BIN_PARSE_NEED_MORE || a->r == BIN_PARSE_BAD_MAGIC)
        return true;
    return a->total == b->total && memcmp(&a->hdr, &b->hdr, sizeof(a->hdr)) == 0;
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Opcodes whose request must carry a key (get*, set*, delete*, arith*, touch, gat*). */
static bool key_required(uint8_t op)
{
    switch (op) {
    case 0x00: case 0x01: case 0x02: case 0x03: case 0x04: case 0x05: case 0x06:
    case 0x09: case 0x0c: case 0x0d: case 0x0e: case 0x0f:
    case 0x11: case 0x12: case 0x13: case 0x14: case 0x15: case 0x16:
    case 0x19: case 0x1a: case 0x1c: case 0x1d: case 0x1e: case 0x23: case 0x24:
        return true;
    default:
        return false;
    }
}

/* Checks one parse of buf[0..len) on its own terms. */
static void check_parse(const char *buf, size_t len, size_t max_body,
                        enum bin_parse_result r, const struct bin_request *q)
{
    const uint8_t *u = (const uint8_t *)buf;
    if (len == 0) {
        CHECK(r == BIN_PARSE_NEED_MORE);
        return;
    }
    if (u[0] != BIN_MAGIC_REQUEST) {
        CHECK(r == BIN_PARSE_BAD_MAGIC);
        return;
    }
    CHECK(r != BIN_PARSE_BAD_MAGIC);
    if (len < BIN_HEADER_LEN) {
        CHECK(r == BIN_PARSE_NEED_MORE);
        return;
    }

    /* The header is in: it must be decoded exactly, and total follows. */
    const struct bin_header *h = &q->hdr;
    CHECK(h->magic == u[0] && h->opcode == u[1]);
    CHECK(h->keylen == be(u + 2, 2) && h->extlen == u[4] && h->datatype == u[5]);
    CHECK(h->vbucket == be(u + 6, 2) && h->bodylen == be(u + 8, 4));
    CHECK(h->opaque == be(u + 12, 4) && h->cas == be(u + 16, 8));
    CHECK(q->total == BIN_HEADER_LEN + (size_t)h->bodylen);

    if (h->bodylen > max_body) {
        CHECK(r == BIN_PARSE_TOO_LARGE);
        return;
    }
    if (len < q->total) {
        CHECK(r == BIN_PARSE_NEED_MORE);
        return;
    }
    CHECK(complete(r));
    if (r == BIN_PARSE_UNKNOWN) {
        CHECK(!bin_opcode_known(h->opcode));
        return;
    }
    CHECK(bin_opcode_known(h->opcode));
    if (r == BIN_PARSE_EINVAL)
        return;

    /* OK: extras, key and value tile the body, inside the buffer. */
    const char *body = buf + BIN_HEADER_LEN;
    CHECK((size_t)h->extlen + q->nkey + q->nvalue == h->bodylen);
    CHECK(q->nkey == h->keylen && q->nkey <= BIN_KEY_MAX);
    CHECK(h->extlen ? q->extras == body : q->extras == NULL);
    CHECK(q->nkey ? q->key == body + h->extlen : q->key == NULL);
    CHECK(q->nvalue ? q->value == body + h->extlen + q->nkey : q->value == NULL);
    if (q->nvalue)
        CHECK(q->value + q->nvalue == buf + q->total);
    if (key_required(h->opcode))
        CHECK(q->nkey >= 1);
}

static struct outcome parse_copy(const uint8_t *data, size_t len, size_t max_body)
{
    char *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    if (len)
        memcpy(buf, data, len);
    struct bin_request q;
    enum bin_parse_result r = bin_parse_request(buf, len, max_body, &q);
    check_parse(buf, len, max_body, r, &q);
    struct outcome o = { r, q.total, q.hdr };
    free(buf);
    return o;
}

static void check_prefix(const uint8_t *data, size_t p, size_t max_body,
                         const struct outcome *full)
{
    struct outcome o = parse_copy(data, p, max_body);
    if (full->r == BIN_PARSE_BAD_MAGIC) {
        CHECK(o.r == (p == 0 ? BIN_PARSE_NEED_MORE : BIN_PARSE_BAD_MAGIC));
    } else if (full->r == BIN_PARSE_TOO_LARGE) {
        /* Refused as soon as the header is in, without waiting for the body. */
        CHECK(p < BIN_HEADER_LEN ? o.r == BIN_PARSE_NEED_MORE : same_outcome(&o, full));
    } else if (complete(full->r) && p >= full->total) {
        CHECK(same_outcome(&o, full));
    } else {
        CHECK(o.r == BIN_PARSE_NEED_MORE);
    }
}

/* Feeds data as a connection would, received in chunks (chunking 0: one
 * read; 1: byte by byte; 2: random sizes), consuming each complete request
 * and swallowing the rest of an oversized one as proto_bin does.  Stops at
 * a bad magic.  Returns the number of outcomes recorded in ev. */
static size_t run_stream(const uint8_t *data, size_t len, size_t max_body, uint64_t seed,
                         int chunking, struct outcome *ev, size_t cap)
{
    size_t pos = 0, recv = 0, n = 0;
    uint64_t swallow = 0;
    while (recv < len) {
        size_t chunk = chunking == 0 ? len
                     : chunking == 1 ? 1
                     : 1 + mix(&seed) % (mix(&seed) % 2 ? 5 : 300);
        recv = chunk >= len - recv ? len : recv + chunk;
        for (;;) {
            if (swallow > 0) {
                size_t skip = recv - pos < swallow ? recv - pos : (size_t)swallow;
                pos += skip;
                swallow -= skip;
                if (swallow > 0)
                    break;
                continue;
            }
            if (pos == recv)
                break;
            struct outcome o = parse_copy(data + pos, recv - pos, max_body);
            if (o.r == BIN_PARSE_NEED_MORE)
                break;
            CHECK(n < cap);
            ev[n++] = o;
            if (o.r == BIN_PARSE_BAD_MAGIC)
                return n;
            if (o.r == BIN_PARSE_TOO_LARGE) {
                CHECK(o.total > BIN_HEADER_LEN + max_body);
                size_t have = recv - pos < o.total ? recv - pos : o.total;
                pos += have;
                swallow = o.total - have;
                continue;
            }
            CHECK(o.total >= BIN_HEADER_LEN && o.total <= recv - pos);
            pos += o.total;
        }
    }
    return n;
}

static void check_splits(const uint8_t *data, size_t len, size_t max_body, int chunking)
{
    size_t cap = len + 1;
    struct outcome *one = calloc(cap, sizeof(*one));
    struct outcome *split = calloc(cap, sizeof(*split));
    CHECK(one != NULL && split != NULL);
    size_t n1 = run_stream(data, len, max_body, 0, 0, one, cap);
    size_t n2 = run_stream(data, len, max_body, hash_input(data, len), chunking, split, cap);
    CHECK(n1 == n2);
    for (size_t i = 0; i < n1; i++)
        CHECK(same_outcome(&one[i], &split[i]));
    free(one);
    free(split);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const size_t limits[] = { bin_max_body(1u << 20), bin_max_body(0), len % 97 };
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
        size_t max_body = limits[l];
        struct outcome full = parse_copy(data, len, max_body);
        if (len <= FULL_PREFIX_SWEEP) {
            for (size_t p = 0; p < len; p++)
                check_prefix(data, p, max_body, &full);
        } else {
            uint64_t seed = hash_input(data, len);
            for (int i = 0; i < SAMPLED_PREFIXES; i++)
                check_prefix(data, mix(&seed) % len, max_body, &full);
            check_prefix(data, BIN_HEADER_LEN - 1, max_body, &full);
            check_prefix(data, BIN_HEADER_LEN, max_body, &full);
            if (complete(full.r)) {
                check_prefix(data, full.total - 1, max_body, &full);
                check_prefix(data, full.total, max_body, &full);
            }
        }
        check_splits(data, len, max_body, 2);
        if (len <= FULL_PREFIX_SWEEP && l == 0)
            check_splits(data, len, max_body, 1);
    }
    return 0;
}
