/* test_proto_bin.c - unit tests of the binary protocol front end.
 *
 * bin_parse_request() is tested on its own: a valid request of every
 * opcode, malformed ones (bad magic, lengths that do not add up or do not
 * suit the opcode, keys too long, bodies not all there), and framing when a
 * request arrives a byte at a time.
 *
 * proto_bin_process() is tested against a fake connection defined here: the
 * conn.h functions the protocol calls are replaced by versions that record
 * the engine calls and collect reply bytes, and a scripted "engine" answers
 * with whatever the test asks for (including answering a mutation later).
 * Nothing of conn.c or the real engine is linked. */
#include "config.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_bin.h"
#include "server.h"

#define MAX_ITEM (1024 * 1024)
#define MAX_BODY (bin_max_body(MAX_ITEM))

/* ------------------------------------------------------------------ */
/* Building requests                                                   */
/* ------------------------------------------------------------------ */

struct req_spec {
    uint8_t magic;
    uint8_t opcode;
    const char *extras;
    size_t nextras;
    const char *key;
    size_t nkey;
    const char *value;
    size_t nvalue;
    uint64_t cas;
    uint32_t opaque;
};

/* Write the request into out (large enough); returns its length. */
static size_t build(char *out, const struct req_spec *s)
{
    uint32_t bodylen = (uint32_t)(s->nextras + s->nkey + s->nvalue);

    memset(out, 0, BIN_HEADER_LEN);
    out[BIN_OFF_MAGIC] = (char)(s->magic ? s->magic : BIN_MAGIC_REQUEST);
    out[BIN_OFF_OPCODE] = (char)s->opcode;
    bin_store16(out + BIN_OFF_KEYLEN, (uint16_t)s->nkey);
    out[BIN_OFF_EXTLEN] = (char)s->nextras;
    bin_store32(out + BIN_OFF_BODYLEN, bodylen);
    bin_store32(out + BIN_OFF_OPAQUE, s->opaque);
    bin_store64(out + BIN_OFF_CAS, s->cas);
    char *p = out + BIN_HEADER_LEN;
    if (s->nextras)
        memcpy(p, s->extras, s->nextras);
    p += s->nextras;
    if (s->nkey)
        memcpy(p, s->key, s->nkey);
    p += s->nkey;
    if (s->nvalue)
        memcpy(p, s->value, s->nvalue);
    return BIN_HEADER_LEN + bodylen;
}

/* Parse a copy of buf[0..len) in a buffer of exactly len bytes, so that a
 * read past the end is caught by sanitizers and valgrind. */
static enum bin_parse_result parse_exact(const char *buf, size_t len, struct bin_request *out,
                                         char **copy)
{
    *copy = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(*copy);
    memcpy(*copy, buf, len);
    return bin_parse_request(*copy, len, MAX_BODY, out);
}

static void store_extras(char *ex, uint32_t flags, uint32_t exptime)
{
    bin_store32(ex, flags);
    bin_store32(ex + 4, exptime);
}

static void arith_extras(char *ex, uint64_t delta, uint64_t initial, uint32_t exptime)
{
    bin_store64(ex, delta);
    bin_store64(ex + 8, initial);
    bin_store32(ex + 16, exptime);
}

/* One valid request of each opcode. */
struct valid_case {
    uint8_t opcode;
    size_t nextras;
    const char *key;
    const char *value;
};

static const struct valid_case valid_cases[] = {
    { BIN_OP_GET, 0, "foo", NULL },
    { BIN_OP_GETQ, 0, "foo", NULL },
    { BIN_OP_GETK, 0, "foo", NULL },
    { BIN_OP_GETKQ, 0, "foo", NULL },
    { BIN_OP_SET, 8, "foo", "value" },
    { BIN_OP_SETQ, 8, "foo", "value" },
    { BIN_OP_ADD, 8, "foo", "value" },
    { BIN_OP_ADDQ, 8, "foo", "value" },
    { BIN_OP_REPLACE, 8, "foo", "value" },
    { BIN_OP_REPLACEQ, 8, "foo", "value" },
    { BIN_OP_SET, 8, "foo", NULL },            /* empty value */
    { BIN_OP_DELETE, 0, "foo", NULL },
    { BIN_OP_DELETEQ, 0, "foo", NULL },
    { BIN_OP_INCREMENT, 20, "n", NULL },
    { BIN_OP_INCREMENTQ, 20, "n", NULL },
    { BIN_OP_DECREMENT, 20, "n", NULL },
    { BIN_OP_DECREMENTQ, 20, "n", NULL },
    { BIN_OP_QUIT, 0, NULL, NULL },
    { BIN_OP_QUITQ, 0, NULL, NULL },
    { BIN_OP_FLUSH, 0, NULL, NULL },
    { BIN_OP_FLUSH, 4, NULL, NULL },
    { BIN_OP_FLUSHQ, 0, NULL, NULL },
    { BIN_OP_FLUSHQ, 4, NULL, NULL },
    { BIN_OP_NOOP, 0, NULL, NULL },
    { BIN_OP_VERSION, 0, NULL, NULL },
    { BIN_OP_APPEND, 0, "foo", "tail" },
    { BIN_OP_APPENDQ, 0, "foo", "tail" },
    { BIN_OP_PREPEND, 0, "foo", "head" },
    { BIN_OP_PREPENDQ, 0, "foo", "head" },
    { BIN_OP_STAT, 0, NULL, NULL },
    { BIN_OP_STAT, 0, "settings", NULL },
    { BIN_OP_VERBOSITY, 4, NULL, NULL },
    { BIN_OP_TOUCH, 4, "foo", NULL },
    { BIN_OP_GAT, 4, "foo", NULL },
    { BIN_OP_GATQ, 4, "foo", NULL },
    { BIN_OP_GATK, 4, "foo", NULL },
    { BIN_OP_GATKQ, 4, "foo", NULL },
};

#define NVALID (sizeof(valid_cases) / sizeof(valid_cases[0]))

static size_t build_valid(char *out, const struct valid_case *vc)
{
    char extras[20];
    for (size_t i = 0; i < sizeof(extras); i++)
        extras[i] = (char)(0x10 + i);
    struct req_spec s = {
        .opcode = vc->opcode,
        .extras = extras, .nextras = vc->nextras,
        .key = vc->key, .nkey = vc->key ? strlen(vc->key) : 0,
        .value = vc->value, .nvalue = vc->value ? strlen(vc->value) : 0,
        .cas = 0x0102030405060708ULL, .opaque = 0xdeadbeef,
    };
    return build(out, &s);
}

/* ------------------------------------------------------------------ */
/* Parser tests                                                        */
/* ------------------------------------------------------------------ */

START_TEST(test_parse_valid_each_opcode)
{
    const struct valid_case *vc = &valid_cases[_i];
    char buf[512];
    size_t n = build_valid(buf, vc);
    struct bin_request rq;
    char *copy;

    ck_assert_int_eq(parse_exact(buf, n, &rq, &copy), BIN_PARSE_OK);
    ck_assert_uint_eq(rq.hdr.magic, BIN_MAGIC_REQUEST);
    ck_assert_uint_eq(rq.hdr.opcode, vc->opcode);
    ck_assert_uint_eq(rq.hdr.opaque, 0xdeadbeef);
    ck_assert(rq.hdr.cas == 0x0102030405060708ULL);
    ck_assert_uint_eq(rq.total, n);
    ck_assert_uint_eq(rq.hdr.extlen, vc->nextras);
    if (vc->nextras) {
        ck_assert_ptr_eq(rq.extras, copy + BIN_HEADER_LEN);
        ck_assert_int_eq(rq.extras[0], 0x10);
    } else {
        ck_assert_ptr_null(rq.extras);
    }
    size_t nkey = vc->key ? strlen(vc->key) : 0;
    ck_assert_uint_eq(rq.nkey, nkey);
    if (nkey) {
        ck_assert_ptr_eq(rq.key, copy + BIN_HEADER_LEN + vc->nextras);
        ck_assert(memcmp(rq.key, vc->key, nkey) == 0);
    } else {
        ck_assert_ptr_null(rq.key);
    }
    size_t nvalue = vc->value ? strlen(vc->value) : 0;
    ck_assert_uint_eq(rq.nvalue, nvalue);
    if (nvalue)
        ck_assert(memcmp(rq.value, vc->value, nvalue) == 0);
    else
        ck_assert_ptr_null(rq.value);
    ck_assert(bin_opcode_known(vc->opcode));
    free(copy);
}
END_TEST

START_TEST(test_parse_bad_magic)
{
    char buf[64];
    struct req_spec s = { .magic = BIN_MAGIC_RESPONSE, .opcode = BIN_OP_NOOP };
    size_t n = build(buf, &s);
    struct bin_request rq;
    char *copy;

    ck_assert_int_eq(parse_exact(buf, n, &rq, &copy), BIN_PARSE_BAD_MAGIC);
    free(copy);
    /* detected from the first byte on */
    ck_assert_int_eq(parse_exact(buf, 1, &rq, &copy), BIN_PARSE_BAD_MAGIC);
    free(copy);
    ck_assert_int_eq(parse_exact("get foo\r\n", 9, &rq, &copy), BIN_PARSE_BAD_MAGIC);
    free(copy);
    /* nothing at all is simply incomplete */
    ck_assert_int_eq(bin_parse_request("", 0, MAX_BODY, &rq), BIN_PARSE_NEED_MORE);
}
END_TEST

/* Parse a request whose header says extlen/keylen/bodylen as given, with a
 * body of bodylen bytes present. */
static enum bin_parse_result parse_lengths(uint8_t opcode, uint8_t extlen, uint16_t keylen,
                                           uint32_t bodylen)
{
    size_t n = BIN_HEADER_LEN + bodylen;
    char *buf = calloc(1, n);
    struct bin_request rq;
    ck_assert_ptr_nonnull(buf);
    buf[BIN_OFF_MAGIC] = (char)BIN_MAGIC_REQUEST;
    buf[BIN_OFF_OPCODE] = (char)opcode;
    bin_store16(buf + BIN_OFF_KEYLEN, keylen);
    buf[BIN_OFF_EXTLEN] = (char)extlen;
    bin_store32(buf + BIN_OFF_BODYLEN, bodylen);
    memset(buf + BIN_HEADER_LEN, 'k', bodylen);
    enum bin_parse_result res = bin_parse_request(buf, n, MAX_BODY, &rq);
    if (res != BIN_PARSE_NEED_MORE && res != BIN_PARSE_BAD_MAGIC)
        ck_assert_uint_eq(rq.total, n);
    free(buf);
    return res;
}

START_TEST(test_parse_length_inconsistencies)
{
    /* extras + key longer than the body */
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, 10, 5), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 8, 3, 10), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 8, 0, 4), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 8, 3, 11), BIN_PARSE_OK);
    /* wrong extras length for the opcode */
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 4, 3, 7), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 4, 3, 7), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 0, 3, 3), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_INCREMENT, 8, 3, 11), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_TOUCH, 0, 3, 3), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_GAT, 8, 3, 11), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_FLUSH, 8, 0, 8), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_VERBOSITY, 0, 0, 0), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_APPEND, 8, 3, 12), BIN_PARSE_EINVAL);
    /* a value where none is allowed */
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, 3, 4), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_DELETE, 0, 3, 4), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_NOOP, 0, 0, 1), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_INCREMENT, 20, 1, 22), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_STAT, 0, 0, 3), BIN_PARSE_EINVAL);
    /* a key where none is allowed, none where one is required */
    ck_assert_int_eq(parse_lengths(BIN_OP_NOOP, 0, 1, 1), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_VERSION, 0, 2, 2), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_QUIT, 0, 2, 2), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_FLUSH, 4, 2, 6), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, 0, 0), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 8, 0, 13), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_DELETE, 0, 0, 0), BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_APPEND, 0, 0, 5), BIN_PARSE_EINVAL);
}
END_TEST

START_TEST(test_parse_key_lengths)
{
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, 1, 1), BIN_PARSE_OK);
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, BIN_KEY_MAX, BIN_KEY_MAX), BIN_PARSE_OK);
    ck_assert_int_eq(parse_lengths(BIN_OP_GET, 0, BIN_KEY_MAX + 1, BIN_KEY_MAX + 1),
                     BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_SET, 8, BIN_KEY_MAX + 1, BIN_KEY_MAX + 9 + 5),
                     BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_STAT, 0, BIN_KEY_MAX, BIN_KEY_MAX), BIN_PARSE_OK);
    ck_assert_int_eq(parse_lengths(BIN_OP_STAT, 0, BIN_KEY_MAX + 1, BIN_KEY_MAX + 1),
                     BIN_PARSE_EINVAL);
    ck_assert_int_eq(parse_lengths(BIN_OP_STAT, 0, 60000, 60000), BIN_PARSE_EINVAL);
}
END_TEST

START_TEST(test_parse_body_shorter_than_declared)
{
    char buf[64];
    struct req_spec s = { .opcode = BIN_OP_SET, .extras = "\0\0\0\0\0\0\0\0", .nextras = 8,
                          .key = "key", .nkey = 3, .value = "value", .nvalue = 5 };
    size_t n = build(buf, &s);
    struct bin_request rq;
    char *copy;

    ck_assert_int_eq(parse_exact(buf, n - 1, &rq, &copy), BIN_PARSE_NEED_MORE);
    ck_assert_uint_eq(rq.total, n);   /* known once the header is in */
    free(copy);
    ck_assert_int_eq(parse_exact(buf, BIN_HEADER_LEN, &rq, &copy), BIN_PARSE_NEED_MORE);
    ck_assert_uint_eq(rq.total, n);
    free(copy);
    ck_assert_int_eq(parse_exact(buf, BIN_HEADER_LEN - 1, &rq, &copy), BIN_PARSE_NEED_MORE);
    free(copy);
}
END_TEST

START_TEST(test_parse_too_large)
{
    char hdr[BIN_HEADER_LEN];
    struct bin_request rq;
    struct req_spec s = { .opcode = BIN_OP_SET, .opaque = 77 };

    build(hdr, &s);
    bin_store32(hdr + BIN_OFF_BODYLEN, (uint32_t)MAX_BODY + 1);
    hdr[BIN_OFF_EXTLEN] = 8;
    bin_store16(hdr + BIN_OFF_KEYLEN, 3);
    /* refused from the header alone, without waiting for the body */
    ck_assert_int_eq(bin_parse_request(hdr, sizeof(hdr), MAX_BODY, &rq), BIN_PARSE_TOO_LARGE);
    ck_assert_uint_eq(rq.hdr.opcode, BIN_OP_SET);
    ck_assert_uint_eq(rq.hdr.opaque, 77);
    ck_assert_uint_eq(rq.total, BIN_HEADER_LEN + MAX_BODY + 1);

    bin_store32(hdr + BIN_OFF_BODYLEN, 0xffffffffu);
    ck_assert_int_eq(bin_parse_request(hdr, sizeof(hdr), MAX_BODY, &rq), BIN_PARSE_TOO_LARGE);
    ck_assert_uint_eq(rq.total, BIN_HEADER_LEN + (size_t)0xffffffffu);

    /* exactly the limit is still accepted (needs the body first) */
    bin_store32(hdr + BIN_OFF_BODYLEN, (uint32_t)MAX_BODY);
    ck_assert_int_eq(bin_parse_request(hdr, sizeof(hdr), MAX_BODY, &rq), BIN_PARSE_NEED_MORE);
}
END_TEST

START_TEST(test_parse_unknown_opcodes)
{
    const uint8_t unknown[] = { 0x1f, 0x20, 0x21, 0x22, 0x25, 0x30, 0x3d, 0x80, 0xff };
    for (size_t i = 0; i < sizeof(unknown); i++) {
        ck_assert(!bin_opcode_known(unknown[i]));
        ck_assert_int_eq(parse_lengths(unknown[i], 0, 0, 0), BIN_PARSE_UNKNOWN);
        /* unknown wins over odd lengths: the whole request is skipped */
        ck_assert_int_eq(parse_lengths(unknown[i], 7, 3, 2), BIN_PARSE_UNKNOWN);
    }
}
END_TEST

START_TEST(test_parse_byte_at_a_time)
{
    const struct valid_case *vc = &valid_cases[_i];
    char buf[512];
    size_t n = build_valid(buf, vc);
    struct bin_request whole, part;
    char *copy, *pcopy;

    ck_assert_int_eq(parse_exact(buf, n, &whole, &copy), BIN_PARSE_OK);
    for (size_t len = 0; len < n; len++) {
        ck_assert_int_eq(parse_exact(buf, len, &part, &pcopy), BIN_PARSE_NEED_MORE);
        free(pcopy);
    }
    /* followed by the start of the next request: same result, same size */
    char two[1024];
    memcpy(two, buf, n);
    memcpy(two + n, buf, n);
    for (size_t extra = 0; extra <= n; extra++) {
        ck_assert_int_eq(parse_exact(two, n + extra, &part, &pcopy), BIN_PARSE_OK);
        ck_assert_uint_eq(part.total, n);
        ck_assert(memcmp(&part.hdr, &whole.hdr, sizeof(part.hdr)) == 0);
        ck_assert_uint_eq(part.nkey, whole.nkey);
        ck_assert_uint_eq(part.nvalue, whole.nvalue);
        ck_assert_int_eq(part.extras ? (int)(part.extras - pcopy) : -1,
                         whole.extras ? (int)(whole.extras - copy) : -1);
        ck_assert_int_eq(part.key ? (int)(part.key - pcopy) : -1,
                         whole.key ? (int)(whole.key - copy) : -1);
        ck_assert_int_eq(part.value ? (int)(part.value - pcopy) : -1,
                         whole.value ? (int)(whole.value - copy) : -1);
        free(pcopy);
    }
    free(copy);
}
END_TEST

START_TEST(test_opcode_classes)
{
    ck_assert(bin_opcode_is_quiet(BIN_OP_GETQ));
    ck_assert(bin_opcode_is_quiet(BIN_OP_GETKQ));
    ck_assert(bin_opcode_is_quiet(BIN_OP_SETQ));
    ck_assert(bin_opcode_is_quiet(BIN_OP_INCREMENTQ));
    ck_assert(bin_opcode_is_quiet(BIN_OP_QUITQ));
    ck_assert(bin_opcode_is_quiet(BIN_OP_GATKQ));
    ck_assert(!bin_opcode_is_quiet(BIN_OP_GET));
    ck_assert(!bin_opcode_is_quiet(BIN_OP_TOUCH));
    ck_assert(!bin_opcode_is_quiet(BIN_OP_NOOP));
    ck_assert(bin_opcode_is_read(BIN_OP_GET));
    ck_assert(bin_opcode_is_read(BIN_OP_GETKQ));
    ck_assert(bin_opcode_is_read(BIN_OP_GAT));
    ck_assert(bin_opcode_is_read(BIN_OP_STAT));
    ck_assert(!bin_opcode_is_read(BIN_OP_SET));
    ck_assert(!bin_opcode_is_read(BIN_OP_TOUCH));
    ck_assert(!bin_opcode_is_read(BIN_OP_NOOP));
}
END_TEST

START_TEST(test_status_mapping)
{
    ck_assert_uint_eq(bin_status_from_engine(ENG_SUCCESS, BIN_OP_SET), 0x0000);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_FOUND, BIN_OP_GET), 0x0001);
    ck_assert_uint_eq(bin_status_from_engine(ENG_EXISTS, BIN_OP_SET), 0x0002);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_STORED, BIN_OP_ADD), 0x0002);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_STORED, BIN_OP_ADDQ), 0x0002);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_STORED, BIN_OP_REPLACE), 0x0001);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_STORED, BIN_OP_APPEND), 0x0005);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NOT_STORED, BIN_OP_PREPENDQ), 0x0005);
    ck_assert_uint_eq(bin_status_from_engine(ENG_TOO_LARGE, BIN_OP_SET), 0x0003);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NON_NUMERIC, BIN_OP_INCREMENT), 0x0006);
    ck_assert_uint_eq(bin_status_from_engine(ENG_MOVED, BIN_OP_GET), 0x0007);
    ck_assert_uint_eq(bin_status_from_engine(ENG_NO_MEMORY, BIN_OP_SET), 0x0082);
    ck_assert_uint_eq(bin_status_from_engine(ENG_FAILED, BIN_OP_SET), 0x0084);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A fake connection and a scripted engine                             */
/* ------------------------------------------------------------------ */

#define MAX_SLOTS 32

struct conn {
    struct server srv;
    struct resp *slots[MAX_SLOTS];
    int nslots;
    unsigned inflight;
    bool close_after_write;
    size_t swallow;
    bool stats_reset;

    /* what the next get returns */
    eng_status get_status;
    const char *get_data;
    uint32_t get_flags;
    uint64_t get_cas;
    const char *get_msg;
    int ngets;
    int npeeks;
    int nrefs;               /* values sent by reference */
    void *last_handle;

    /* what the next mutation returns; pending: completes on finish_pending() */
    struct eng_result mut_result;
    bool mut_pending;
    struct resp *pending_r;
    resp_complete_fn pending_fn;
    int nmutations;
    struct eng_mutation last_m;
    char last_key[300];
    char last_data[300];

    struct engine engine;    /* only release() is called on it */
    int nflush_points;       /* conn_flush_point/_through calls */
    bool held;               /* conn_hold_output was called */
    bool discarding;         /* conn_close_discard was called */
};

struct resp *conn_resp_new(struct conn *c)
{
    ck_assert_int_lt(c->nslots, MAX_SLOTS);
    struct resp *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->c = c;
    r->bufcap = 1 << 16;
    r->buf = malloc(r->bufcap);
    ck_assert_ptr_nonnull(r->buf);
    c->slots[c->nslots++] = r;
    return r;
}

void resp_add(struct resp *r, const void *p, size_t n)
{
    ck_assert_uint_le(r->buflen + n, r->bufcap);
    memcpy(r->buf + r->buflen, p, n);
    r->buflen += (uint32_t)n;
}

/* The fake copies referenced bytes too, so a test sees the whole reply. */
void resp_add_ref(struct resp *r, const char *p, size_t n, void *handle)
{
    resp_add(r, p, n);
    r->c->nrefs++;
    r->c->last_handle = handle;
}

void resp_add_value(struct resp *r, const struct eng_value *v, size_t n)
{
    resp_add_ref(r, v->data, n, v->handle);
}

void resp_done(struct resp *r)
{
    r->done = true;
}

void conn_mutate(struct conn *c, struct resp *r, const struct eng_mutation *m,
                 resp_complete_fn complete)
{
    c->nmutations++;
    c->last_m = *m;
    ck_assert_uint_lt(m->nkey, sizeof(c->last_key));
    ck_assert_uint_lt(m->nbytes, sizeof(c->last_data));
    if (m->nkey)
        memcpy(c->last_key, m->key, m->nkey);
    c->last_key[m->nkey] = '\0';
    if (m->nbytes)
        memcpy(c->last_data, m->data, m->nbytes);
    c->last_data[m->nbytes] = '\0';
    /* the borrowed pointers must not be used after this call */
    c->last_m.key = NULL;
    c->last_m.data = NULL;

    if (c->mut_pending) {
        r->pending = true;
        c->inflight++;
        c->pending_r = r;
        c->pending_fn = complete;
        return;
    }
    complete(r, &c->mut_result);
    r->done = true;
}

static void finish_pending(struct conn *c)
{
    ck_assert_ptr_nonnull(c->pending_r);
    c->inflight--;
    c->pending_r->pending = false;
    c->pending_fn(c->pending_r, &c->mut_result);
    c->pending_r->done = true;
    c->pending_r = NULL;
}

eng_status conn_get(struct conn *c, const char *key, size_t nkey,
                    struct eng_value *out, struct eng_result *res)
{
    c->ngets++;
    res->status = c->get_status;
    res->msg = c->get_msg;
    if (c->get_status == ENG_SUCCESS) {
        out->key = key;
        out->nkey = nkey;
        out->data = c->get_data;
        out->nbytes = (uint32_t)strlen(c->get_data);
        out->flags = c->get_flags;
        out->cas = c->get_cas;
        out->handle = (void *)c->get_data;
    }
    return c->get_status;
}

/* The counting is conn.c's, not the fake's: an uncounted write is a write
 * here, and a lookup a get. */
void conn_mutate_uncounted(struct conn *c, struct resp *r, const struct eng_mutation *m,
                           resp_complete_fn complete)
{
    conn_mutate(c, r, m, complete);
}

eng_status conn_lookup(struct conn *c, const char *key, size_t nkey,
                       struct eng_value *out, struct eng_result *res)
{
    return conn_get(c, key, nkey, out, res);
}

/* The fake has no marks or access times: get_ex answers as get does; a
 * peek (touch reading the flags it returns) is counted apart. */
eng_status conn_get_ex(struct conn *c, const char *key, size_t nkey, unsigned opts,
                       struct eng_value *out, struct eng_result *res)
{
    out->marks = 0;
    out->fetched = false;
    out->idle = 0;
    out->exptime = 0;
    eng_status st = conn_get(c, key, nkey, out, res);
    if (opts & ENG_GET_PEEK) {
        c->ngets--;
        c->npeeks++;
    }
    return st;
}

static void fake_release(struct engine *e, void *handle)
{
    (void)e;
    (void)handle;
}

static const struct engine_ops fake_engine_ops = { .release = fake_release };

struct engine *conn_engine(const struct conn *c)
{
    return (struct engine *)&c->engine;
}

void conn_flush_point(struct conn *c)
{
    c->nflush_points++;
}

void conn_write_final(struct conn *c)
{
    (void)c;        /* the fake connection writes nothing */
}

void conn_flush_through(struct resp *r)
{
    r->c->nflush_points++;
}

void conn_hold_output(struct conn *c)
{
    c->held = true;
}

void conn_close_discard(struct conn *c)
{
    c->discarding = true;
    c->close_after_write = true;
}

void conn_close_now(struct conn *c)
{
    c->close_after_write = true;
}

bool conn_authenticated(const struct conn *c)
{
    (void)c;
    return true;
}

void conn_set_authenticated(struct conn *c)
{
    (void)c;
}

void conn_clear_authenticated(struct conn *c)
{
    (void)c;
}

/* -S is not exercised here (sasl.sh runs it on a real server). */
struct mcsasl *conn_sasl(struct conn *c)
{
    (void)c;
    return NULL;
}

bool conn_writes_inflight(const struct conn *c)
{
    return c->inflight > 0;
}

bool conn_key_writes_inflight(const struct conn *c, const char *key, size_t nkey)
{
    (void)key;
    (void)nkey;
    return c->inflight > 0;
}

/* The plain engine never makes a read wait (only a recovery process does). */
bool conn_read_waits(struct conn *c, const char *key, size_t nkey)
{
    (void)c;
    (void)key;
    (void)nkey;
    return false;
}

struct server *conn_server(const struct conn *c)
{
    return (struct server *)&c->srv;
}

void conn_close_after_write(struct conn *c)
{
    c->close_after_write = true;
}

void conn_swallow(struct conn *c, size_t n)
{
    c->swallow += n;
}

bool server_stats(struct server *s, const char *group, eng_stat_fn emit, void *ctx)
{
    if (strcmp(group, "") == 0) {
        emit(ctx, "pid", "%d", 42);
        emit(ctx, "version", "%s", "1.2.3");
        return true;
    }
    if (strcmp(group, "settings") == 0) {
        char big[600];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        emit(ctx, "long", "%s", big);
        return true;
    }
    return false;
}

/* The fake keeps no per-prefix stats: the dump has one fixed line. */
void prefix_stats_dump(struct server *s, eng_write_fn write, void *ctx)
{
    (void)s;
    write(ctx, "PREFIX a get 1 hit 1 set 0 del 0\r\n", 34);
}

void server_stats_reset(struct server *s)
{
    struct conn *c = (struct conn *)s;   /* srv is the first member */
    c->stats_reset = true;
}

static struct conn *fake_conn(void)
{
    struct conn *c = calloc(1, sizeof(*c));
    ck_assert_ptr_nonnull(c);
    c->srv.settings.item_size_max = MAX_ITEM;
    c->srv.settings.flush_enabled = true;
    c->srv.settings.cas_enabled = true;
    c->engine.ops = &fake_engine_ops;
    c->get_status = ENG_NOT_FOUND;
    c->mut_result.status = ENG_SUCCESS;
    c->mut_result.cas = 1234;
    return c;
}

static void free_conn(struct conn *c)
{
    for (int i = 0; i < c->nslots; i++) {
        free(c->slots[i]->buf);
        free(c->slots[i]);
    }
    free(c);
}

/* Feed one request; expect it consumed whole. */
static void feed(struct conn *c, const struct req_spec *s)
{
    char buf[1024];
    size_t n = build(buf, s);
    size_t consumed = 99;
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_OK);
    ck_assert_uint_eq(consumed, n);
}

/* A response read back from slot bytes. */
struct reply {
    uint8_t magic, opcode, extlen, datatype;
    uint16_t keylen, status;
    uint32_t bodylen, opaque;
    uint64_t cas;
    const char *extras, *key, *value;
    size_t nvalue;
};

/* Decode the reply at *pos in slot r and advance *pos. */
static void read_reply(const struct resp *r, size_t *pos, struct reply *out)
{
    const char *p = r->buf + *pos;
    ck_assert_uint_ge(r->buflen - *pos, BIN_HEADER_LEN);
    out->magic = (uint8_t)p[0];
    out->opcode = (uint8_t)p[1];
    out->keylen = bin_load16(p + 2);
    out->extlen = (uint8_t)p[4];
    out->datatype = (uint8_t)p[5];
    out->status = bin_load16(p + 6);
    out->bodylen = bin_load32(p + 8);
    out->opaque = bin_load32(p + 12);
    out->cas = bin_load64(p + 16);
    ck_assert_uint_ge(r->buflen - *pos, BIN_HEADER_LEN + out->bodylen);
    out->extras = p + BIN_HEADER_LEN;
    out->key = out->extras + out->extlen;
    out->value = out->key + out->keylen;
    out->nvalue = out->bodylen - out->extlen - out->keylen;
    ck_assert_uint_eq(out->magic, BIN_MAGIC_RESPONSE);
    ck_assert_uint_eq(out->datatype, 0);
    *pos += BIN_HEADER_LEN + out->bodylen;
}

/* The single reply of slot i, which must hold exactly one. */
static void only_reply(const struct conn *c, int i, struct reply *out)
{
    size_t pos = 0;
    ck_assert_int_lt(i, c->nslots);
    ck_assert(c->slots[i]->done);
    read_reply(c->slots[i], &pos, out);
    ck_assert_uint_eq(pos, c->slots[i]->buflen);
}

static void assert_value(const struct reply *rp, const char *want)
{
    ck_assert_uint_eq(rp->nvalue, strlen(want));
    ck_assert(memcmp(rp->value, want, rp->nvalue) == 0);
}

/* ------------------------------------------------------------------ */
/* Front end tests                                                     */
/* ------------------------------------------------------------------ */

START_TEST(test_process_need_more_and_close)
{
    struct conn *c = fake_conn();
    char buf[64];
    struct req_spec s = { .opcode = BIN_OP_NOOP };
    size_t n = build(buf, &s), consumed;

    for (size_t len = 0; len < n; len++)
        ck_assert_int_eq(proto_bin_process(c, buf, len, &consumed), CONN_PARSE_NEED_MORE);
    ck_assert_int_eq(c->nslots, 0);
    buf[0] = (char)0x81;
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_CLOSE);
    ck_assert_int_eq(c->nslots, 0);
    ck_assert(c->discarding);       /* replies not yet written are dropped */
    free_conn(c);
}
END_TEST

START_TEST(test_process_set_family)
{
    struct conn *c = fake_conn();
    char ex[8];
    struct reply rp;

    store_extras(ex, 0xcafe, 100);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3, .value = "hello", .nvalue = 5,
                                .opaque = 9 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_SET);
    ck_assert_str_eq(c->last_key, "key");
    ck_assert_str_eq(c->last_data, "hello");
    ck_assert_uint_eq(c->last_m.flags, 0xcafe);
    ck_assert_int_eq(c->last_m.exptime, 100);
    ck_assert(c->last_m.cas == 0);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_SET);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.opaque, 9);
    ck_assert(rp.cas == 1234);
    ck_assert_uint_eq(rp.bodylen, 0);

    /* set with a cas is a cas operation */
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3, .cas = 55 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_CAS);
    ck_assert(c->last_m.cas == 55);
    ck_assert_uint_eq(c->last_m.nbytes, 0);
    /* replace too, and add (memcached makes any store with a cas a cas) */
    feed(c, &(struct req_spec){ .opcode = BIN_OP_REPLACE, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3, .cas = 55 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_CAS);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_REPLACE, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_REPLACE);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_ADD, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3, .cas = 55 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_CAS);
    ck_assert(c->last_m.cas == 55);
    /* without cas (-C) memcached ignores a request's cas (difftest seed
     * 14014 case 4825) */
    c->srv.settings.cas_enabled = false;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "key", .nkey = 3, .cas = 55 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_SET);
    ck_assert(c->last_m.cas == 0);
    c->srv.settings.cas_enabled = true;
    /* append/prepend keep the cas check */
    feed(c, &(struct req_spec){ .opcode = BIN_OP_APPEND, .key = "key", .nkey = 3,
                                .value = "more", .nvalue = 4, .cas = 7 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_APPEND);
    ck_assert(c->last_m.cas == 7);
    ck_assert_str_eq(c->last_data, "more");
    feed(c, &(struct req_spec){ .opcode = BIN_OP_PREPENDQ, .key = "key", .nkey = 3,
                                .value = "less", .nvalue = 4 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_PREPEND);
    ck_assert_int_eq(c->nslots, 8);
    ck_assert_uint_eq(c->slots[7]->buflen, 0);   /* quiet success */
    ck_assert(c->slots[7]->done);
    free_conn(c);
}
END_TEST

START_TEST(test_process_store_errors)
{
    struct conn *c = fake_conn();
    char ex[8];
    struct reply rp;

    store_extras(ex, 0, 0);
    c->mut_result.status = ENG_NOT_STORED;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_ADDQ, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1, .opaque = 3 });
    only_reply(c, 0, &rp);   /* quiet, but errors are sent */
    ck_assert_uint_eq(rp.opcode, BIN_OP_ADDQ);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_EEXISTS);
    ck_assert(rp.cas == 0);
    ck_assert_uint_eq(rp.extlen, 0);
    ck_assert_uint_eq(rp.keylen, 0);
    assert_value(&rp, "Data exists for key.");

    feed(c, &(struct req_spec){ .opcode = BIN_OP_REPLACE, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1 });
    only_reply(c, 1, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);
    assert_value(&rp, "Not found");

    feed(c, &(struct req_spec){ .opcode = BIN_OP_APPEND, .key = "k", .nkey = 1,
                                .value = "v", .nvalue = 1 });
    only_reply(c, 2, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_NOT_STORED);

    c->mut_result.status = ENG_MOVED;
    c->mut_result.msg = "17 3 10.0.0.2:11211";
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SETQ, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1 });
    only_reply(c, 3, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_NOT_MY_VBUCKET);
    assert_value(&rp, "17 3 10.0.0.2:11211");

    c->mut_result.status = ENG_FAILED;
    c->mut_result.msg = "backup unreachable";
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1 });
    only_reply(c, 4, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_INTERNAL_ERROR);
    assert_value(&rp, "backup unreachable");

    c->mut_result.status = ENG_NO_MEMORY;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1 });
    only_reply(c, 5, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_ENOMEM);

    c->mut_result.status = ENG_TOO_LARGE;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_SET, .extras = ex, .nextras = 8,
                                .key = "k", .nkey = 1 });
    only_reply(c, 6, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_E2BIG);
    free_conn(c);
}
END_TEST

START_TEST(test_process_get_family)
{
    struct conn *c = fake_conn();
    struct reply rp;

    c->get_status = ENG_SUCCESS;
    c->get_data = "hello";
    c->get_flags = 0xabcd;
    c->get_cas = 99;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GET, .key = "key", .nkey = 3, .opaque = 5 });
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.opaque, 5);
    ck_assert_uint_eq(rp.extlen, 4);
    ck_assert_uint_eq(bin_load32(rp.extras), 0xabcd);
    ck_assert_uint_eq(rp.keylen, 0);
    ck_assert(rp.cas == 99);
    assert_value(&rp, "hello");
    ck_assert_int_eq(c->nrefs, 1);
    ck_assert_ptr_eq(c->last_handle, c->get_data);

    feed(c, &(struct req_spec){ .opcode = BIN_OP_GETKQ, .key = "key", .nkey = 3 });
    only_reply(c, 1, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_GETKQ);
    ck_assert_uint_eq(rp.keylen, 3);
    ck_assert(memcmp(rp.key, "key", 3) == 0);
    assert_value(&rp, "hello");

    /* misses */
    c->get_status = ENG_NOT_FOUND;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GET, .key = "key", .nkey = 3 });
    only_reply(c, 2, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);
    ck_assert_uint_eq(rp.extlen, 0);
    ck_assert(rp.cas == 0);
    assert_value(&rp, "Not found");
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GETK, .key = "key", .nkey = 3 });
    only_reply(c, 3, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);
    ck_assert_uint_eq(rp.keylen, 3);
    ck_assert_uint_eq(rp.nvalue, 0);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GETQ, .key = "key", .nkey = 3 });
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GETKQ, .key = "key", .nkey = 3 });
    ck_assert_int_eq(c->nslots, 4);   /* quiet misses say nothing */

    c->get_status = ENG_MOVED;
    c->get_msg = "5 1 h:1";
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GETQ, .key = "key", .nkey = 3 });
    only_reply(c, 4, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_NOT_MY_VBUCKET);
    assert_value(&rp, "5 1 h:1");
    ck_assert_int_eq(c->nmutations, 0);
    free_conn(c);
}
END_TEST

START_TEST(test_process_reads_wait_for_writes)
{
    struct conn *c = fake_conn();
    char buf[64];
    size_t consumed = 99;
    size_t n = build(buf, &(struct req_spec){ .opcode = BIN_OP_GET, .key = "k", .nkey = 1 });

    c->inflight = 1;
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_BLOCKED);
    ck_assert_uint_eq(consumed, 0);
    n = build(buf, &(struct req_spec){ .opcode = BIN_OP_STAT });
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_BLOCKED);
    n = build(buf, &(struct req_spec){ .opcode = BIN_OP_GATK, .extras = "\0\0\0\0",
                                       .nextras = 4, .key = "k", .nkey = 1 });
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_BLOCKED);
    ck_assert_int_eq(c->nslots, 0);
    ck_assert_int_eq(c->ngets, 0);
    /* writes and noop pipeline */
    feed(c, &(struct req_spec){ .opcode = BIN_OP_DELETE, .key = "k", .nkey = 1 });
    feed(c, &(struct req_spec){ .opcode = BIN_OP_NOOP });
    ck_assert_int_eq(c->nslots, 2);
    free_conn(c);
}
END_TEST

START_TEST(test_process_delete_arith)
{
    struct conn *c = fake_conn();
    char ex[20];
    struct reply rp;

    feed(c, &(struct req_spec){ .opcode = BIN_OP_DELETE, .key = "k", .nkey = 1, .cas = 8 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_DELETE);
    ck_assert(c->last_m.cas == 8);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert(rp.cas == 0);

    c->mut_result.value = 0x1122334455667788ULL;
    arith_extras(ex, 5, 10, 60);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_INCREMENT, .extras = ex, .nextras = 20,
                                .key = "n", .nkey = 1 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_INCR);
    ck_assert(c->last_m.delta == 5);
    ck_assert(c->last_m.initial == 10);
    ck_assert(c->last_m.create);
    ck_assert_int_eq(c->last_m.exptime, 60);
    only_reply(c, 1, &rp);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.bodylen, 8);
    ck_assert(bin_load64(rp.value) == 0x1122334455667788ULL);
    ck_assert(rp.cas == 1234);

    arith_extras(ex, 1, 0, BIN_ARITH_NO_CREATE);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_DECREMENTQ, .extras = ex, .nextras = 20,
                                .key = "n", .nkey = 1 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_DECR);
    ck_assert(!c->last_m.create);
    ck_assert_uint_eq(c->slots[2]->buflen, 0);

    c->mut_result.status = ENG_NON_NUMERIC;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_INCREMENTQ, .extras = ex, .nextras = 20,
                                .key = "n", .nkey = 1 });
    only_reply(c, 3, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_DELTA_BADVAL);
    c->mut_result.status = ENG_NOT_FOUND;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_DELETEQ, .key = "k", .nkey = 1 });
    only_reply(c, 4, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);
    free_conn(c);
}
END_TEST

START_TEST(test_process_touch_and_gat)
{
    struct conn *c = fake_conn();
    char ex[4];
    struct reply rp;

    bin_store32(ex, 300);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_TOUCH, .extras = ex, .nextras = 4,
                                .key = "k", .nkey = 1 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_TOUCH);
    ck_assert_int_eq(c->last_m.exptime, 300);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.status, 0);

    /* gat: read, then touch; the reply waits for the touch and takes its cas */
    c->get_status = ENG_SUCCESS;
    c->get_data = "val";
    c->get_flags = 7;
    c->get_cas = 10;
    c->mut_pending = true;
    c->mut_result.cas = 11;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GATK, .extras = ex, .nextras = 4,
                                .key = "k", .nkey = 1, .opaque = 4 });
    ck_assert_int_eq(c->ngets, 1);
    ck_assert_int_eq(c->last_m.op, ENG_OP_TOUCH);
    ck_assert_str_eq(c->last_key, "k");
    ck_assert(!c->slots[1]->done);
    finish_pending(c);
    only_reply(c, 1, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_GATK);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.opaque, 4);
    ck_assert(rp.cas == 11);
    ck_assert_uint_eq(bin_load32(rp.extras), 7);
    ck_assert_uint_eq(rp.keylen, 1);
    assert_value(&rp, "val");

    c->mut_pending = false;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GATQ, .extras = ex, .nextras = 4,
                                .key = "k", .nkey = 1 });
    only_reply(c, 2, &rp);   /* a quiet hit is sent */
    ck_assert_uint_eq(rp.keylen, 0);
    assert_value(&rp, "val");

    /* misses: no touch issued; quiet ones silent; gatk returns the key */
    int nmut = c->nmutations;
    c->get_status = ENG_NOT_FOUND;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GATKQ, .extras = ex, .nextras = 4,
                                .key = "k", .nkey = 1 });
    ck_assert_int_eq(c->nslots, 3);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GAT, .extras = ex, .nextras = 4,
                                .key = "k", .nkey = 1 });
    only_reply(c, 3, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);
    assert_value(&rp, "Not found");
    feed(c, &(struct req_spec){ .opcode = BIN_OP_GATK, .extras = ex, .nextras = 4,
                                .key = "kk", .nkey = 2 });
    only_reply(c, 4, &rp);
    ck_assert_uint_eq(rp.keylen, 2);
    ck_assert_int_eq(c->nmutations, nmut);
    ck_assert(c->srv.stats.touch_misses == 3);
    free_conn(c);
}
END_TEST

START_TEST(test_process_stat)
{
    struct conn *c = fake_conn();
    struct reply rp;
    size_t pos = 0;

    feed(c, &(struct req_spec){ .opcode = BIN_OP_STAT, .opaque = 6 });
    ck_assert(c->slots[0]->done);
    read_reply(c->slots[0], &pos, &rp);
    ck_assert_uint_eq(rp.keylen, 3);
    ck_assert(memcmp(rp.key, "pid", 3) == 0);
    assert_value(&rp, "42");
    ck_assert_uint_eq(rp.opaque, 6);
    read_reply(c->slots[0], &pos, &rp);
    ck_assert(memcmp(rp.key, "version", 7) == 0);
    assert_value(&rp, "1.2.3");
    read_reply(c->slots[0], &pos, &rp);   /* terminator */
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.bodylen, 0);
    ck_assert_uint_eq(pos, c->slots[0]->buflen);

    pos = 0;
    feed(c, &(struct req_spec){ .opcode = BIN_OP_STAT, .key = "settings", .nkey = 8 });
    read_reply(c->slots[1], &pos, &rp);
    ck_assert_uint_eq(rp.nvalue, 599);     /* longer than the formatting buffer */
    read_reply(c->slots[1], &pos, &rp);
    ck_assert_uint_eq(rp.bodylen, 0);

    feed(c, &(struct req_spec){ .opcode = BIN_OP_STAT, .key = "bogus", .nkey = 5 });
    only_reply(c, 2, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_KEY_ENOENT);

    feed(c, &(struct req_spec){ .opcode = BIN_OP_STAT, .key = "reset", .nkey = 5 });
    only_reply(c, 3, &rp);
    ck_assert_uint_eq(rp.status, 0);
    ck_assert_uint_eq(rp.bodylen, 0);
    ck_assert(c->stats_reset);
    free_conn(c);
}
END_TEST

START_TEST(test_process_misc_commands)
{
    struct conn *c = fake_conn();
    struct reply rp;
    char ex[4];

    feed(c, &(struct req_spec){ .opcode = BIN_OP_NOOP, .opaque = 1 });
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_NOOP);
    ck_assert_uint_eq(rp.bodylen, 0);

    feed(c, &(struct req_spec){ .opcode = BIN_OP_VERSION });
    only_reply(c, 1, &rp);
    assert_value(&rp, MC_VERSION_STRING);

    bin_store32(ex, 1);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_VERBOSITY, .extras = ex, .nextras = 4 });
    only_reply(c, 2, &rp);
    ck_assert_uint_eq(rp.status, 0x81);     /* memcached 1.6: an unknown command */
    ck_assert_int_eq(c->srv.settings.verbose, 0);

    bin_store32(ex, 30);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_FLUSH, .extras = ex, .nextras = 4 });
    ck_assert_int_eq(c->last_m.op, ENG_OP_FLUSH);
    ck_assert_int_eq(c->last_m.exptime, 30);
    only_reply(c, 3, &rp);
    ck_assert(rp.cas == 0);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_FLUSHQ });
    ck_assert_int_eq(c->last_m.exptime, 0);
    ck_assert_uint_eq(c->slots[4]->buflen, 0);

    ck_assert(!c->close_after_write);
    feed(c, &(struct req_spec){ .opcode = BIN_OP_QUIT });
    only_reply(c, 5, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_QUIT);
    ck_assert(c->close_after_write);
    free_conn(c);

    c = fake_conn();
    feed(c, &(struct req_spec){ .opcode = BIN_OP_QUITQ });
    ck_assert_int_eq(c->nslots, 0);
    ck_assert(c->close_after_write);
    free_conn(c);
}
END_TEST

START_TEST(test_process_invalid_and_unknown)
{
    struct conn *c = fake_conn();
    struct reply rp;

    /* get with extras: EINVAL, then memcached closes the connection */
    char buf[64];
    size_t consumed;
    size_t n = build(buf, &(struct req_spec){ .opcode = BIN_OP_GET, .extras = "abcd",
                                              .nextras = 4, .key = "k", .nkey = 1, .opaque = 2 });
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_CLOSE);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_GET);
    ck_assert_uint_eq(rp.status, BIN_STATUS_EINVAL);
    ck_assert_uint_eq(rp.opaque, 2);
    ck_assert_int_eq(c->ngets, 0);
    free_conn(c);

    /* SASL auth (not built in): unknown command, the body dropped */
    c = fake_conn();

    feed(c, &(struct req_spec){ .opcode = 0x21, .key = "PLAIN", .nkey = 5,
                                .value = "x", .nvalue = 1 });
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.opcode, 0x21);
    ck_assert_uint_eq(rp.status, BIN_STATUS_UNKNOWN_COMMAND);
    assert_value(&rp, "Unknown command");
    free_conn(c);

    /* an unknown opcode whose extras do not fit its body: memcached reads
     * the extras, answers unknown command and closes (difftest seed 2411
     * case 1918) */
    c = fake_conn();
    memset(buf, 0, sizeof(buf));
    n = build(buf, &(struct req_spec){ .opcode = 0xfe, .opaque = 9 });
    buf[BIN_OFF_EXTLEN] = 8;
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_NEED_MORE);
    ck_assert_int_eq(c->nslots, 0);
    ck_assert_int_eq(proto_bin_process(c, buf, n + 8, &consumed), CONN_PARSE_CLOSE);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.opcode, 0xfe);
    ck_assert_uint_eq(rp.status, BIN_STATUS_UNKNOWN_COMMAND);
    free_conn(c);

    /* an unknown opcode with a key over 250 bytes: read, then invalid
     * and closed, as for any opcode (seed 2411 case 7267) */
    c = fake_conn();
    char big[BIN_HEADER_LEN + 300];
    char key300[300];
    memset(key300, 'k', sizeof(key300));
    n = build(big, &(struct req_spec){ .opcode = 0xfe, .key = key300, .nkey = 300 });
    ck_assert_int_eq(proto_bin_process(c, big, n - 1, &consumed), CONN_PARSE_NEED_MORE);
    ck_assert_int_eq(proto_bin_process(c, big, n, &consumed), CONN_PARSE_CLOSE);
    only_reply(c, 0, &rp);
    ck_assert_uint_eq(rp.status, BIN_STATUS_EINVAL);
    free_conn(c);
}
END_TEST

START_TEST(test_process_too_large_swallows)
{
    struct conn *c = fake_conn();
    struct reply rp;
    char buf[64];
    size_t consumed;
    size_t n = build(buf, &(struct req_spec){ .opcode = BIN_OP_SETQ, .extras = "12345678",
                                              .nextras = 8, .key = "big", .nkey = 3,
                                              .value = "0123456789", .nvalue = 10 });
    uint32_t bodylen = (uint32_t)MAX_BODY + 100;

    bin_store32(buf + BIN_OFF_BODYLEN, bodylen);
    size_t head = BIN_HEADER_LEN + 8 + 3;
    /* header, extras and key buffered, part of the value: memcached reads
     * extras and key, then drops the value */
    ck_assert_int_eq(proto_bin_process(c, buf, n, &consumed), CONN_PARSE_OK);
    ck_assert_uint_eq(consumed, head);
    ck_assert_uint_eq(c->swallow, BIN_HEADER_LEN + bodylen - head);
    /* a set also deletes the key's current value, quietly, first */
    ck_assert_int_eq(c->nmutations, 1);
    ck_assert_int_eq(c->last_m.op, ENG_OP_DELETE);
    ck_assert_str_eq(c->last_key, "big");
    ck_assert_uint_eq(c->slots[0]->buflen, 0);
    only_reply(c, 1, &rp);
    ck_assert_uint_eq(rp.opcode, BIN_OP_SETQ);   /* sent although quiet */
    ck_assert_uint_eq(rp.status, BIN_STATUS_E2BIG);

    /* only the header buffered: the key is read before judging */
    c->swallow = 0;
    ck_assert_int_eq(proto_bin_process(c, buf, BIN_HEADER_LEN, &consumed), CONN_PARSE_NEED_MORE);
    ck_assert_uint_eq(consumed, 0);
    ck_assert_uint_eq(c->swallow, 0);
    free_conn(c);
}
END_TEST

START_TEST(test_process_pipeline)
{
    /* several requests in one buffer are handled one per call */
    struct conn *c = fake_conn();
    char buf[512];
    size_t n = 0, consumed, off = 0;
    int calls = 0;

    c->get_status = ENG_SUCCESS;
    c->get_data = "v";
    n += build(buf + n, &(struct req_spec){ .opcode = BIN_OP_GETKQ, .key = "a", .nkey = 1 });
    n += build(buf + n, &(struct req_spec){ .opcode = BIN_OP_GETKQ, .key = "bb", .nkey = 2 });
    n += build(buf + n, &(struct req_spec){ .opcode = BIN_OP_NOOP });
    while (off < n) {
        ck_assert_int_eq(proto_bin_process(c, buf + off, n - off, &consumed), CONN_PARSE_OK);
        off += consumed;
        calls++;
    }
    ck_assert_uint_eq(off, n);
    ck_assert_int_eq(calls, 3);
    ck_assert_int_eq(c->nslots, 3);
    ck_assert_int_eq(proto_bin_process(c, buf, 0, &consumed), CONN_PARSE_NEED_MORE);
    free_conn(c);
}
END_TEST

static Suite *bin_suite(void)
{
    Suite *s = suite_create("proto_bin");

    TCase *tp = tcase_create("parse");
    tcase_add_loop_test(tp, test_parse_valid_each_opcode, 0, (int)NVALID);
    tcase_add_test(tp, test_parse_bad_magic);
    tcase_add_test(tp, test_parse_length_inconsistencies);
    tcase_add_test(tp, test_parse_key_lengths);
    tcase_add_test(tp, test_parse_body_shorter_than_declared);
    tcase_add_test(tp, test_parse_too_large);
    tcase_add_test(tp, test_parse_unknown_opcodes);
    tcase_add_loop_test(tp, test_parse_byte_at_a_time, 0, (int)NVALID);
    tcase_add_test(tp, test_opcode_classes);
    tcase_add_test(tp, test_status_mapping);
    suite_add_tcase(s, tp);

    TCase *tc = tcase_create("process");
    tcase_add_test(tc, test_process_need_more_and_close);
    tcase_add_test(tc, test_process_set_family);
    tcase_add_test(tc, test_process_store_errors);
    tcase_add_test(tc, test_process_get_family);
    tcase_add_test(tc, test_process_reads_wait_for_writes);
    tcase_add_test(tc, test_process_delete_arith);
    tcase_add_test(tc, test_process_touch_and_gat);
    tcase_add_test(tc, test_process_stat);
    tcase_add_test(tc, test_process_misc_commands);
    tcase_add_test(tc, test_process_invalid_and_unknown);
    tcase_add_test(tc, test_process_too_large_swallows);
    tcase_add_test(tc, test_process_pipeline);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bin_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
