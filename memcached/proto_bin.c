/* proto_bin.c - memcached's binary protocol front end.
 *
 * Each call of proto_bin_process() looks at the bytes the connection has
 * buffered and handles one request: bin_parse_request() checks that the
 * whole header and body are there and that the extras, key and value lengths
 * suit the opcode, then one small handler per command family turns the
 * request into an engine call and formats the reply into a response slot.
 *
 * Reads (get*, gat*, stat) run at once through conn_get() and fill their
 * slot immediately; they are held back (CONN_PARSE_BLOCKED) while a write
 * of the same connection is still in flight, so a client sees its own
 * writes.  Mutations go through conn_mutate(): the engine may answer later,
 * so their replies are formatted by a completion function that has only
 * the slot to go on; the slot keeps the opcode and opaque for that.
 *
 * Quiet commands follow memcached's rule: a quiet get says nothing on a
 * miss, a quiet mutation says nothing on success, errors are always sent.
 *
 * Get-and-touch needs both the value and the touch.  It is a read, so it
 * only starts when no write of the connection is in flight: it reads the
 * item first, formats the complete hit reply (header, flags, key, value by
 * reference) into its slot, and then issues the touch with that slot.  The
 * touch completion only has to fix the cas in the already written header;
 * the request's key is never needed after the request buffer is gone.
 *
 * In a cluster, a request with a key (every keyed opcode; not stat) whose
 * slot another process serves is answered with status 0x0007 (not my
 * vbucket) and the body "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>"
 * without reaching the engine; quiet opcodes get it too, as every error. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authfile.h"
#include "proto_bin.h"
#include "sasl_auth.h"
#include "server.h"

/* Room above item_size_max + key + extras so that a value slightly over the
 * limit still reaches the engine, which refuses it with ENG_TOO_LARGE. */
#define BIN_BODY_SLACK 1024

/* Header, extras and key must fit memcached's read buffer (16 KB less a
 * header's room), or it closes the connection. */
#define BIN_HEAD_MAX 16360
/* memcached -S's words for a refused or failed authentication. */
#define SASL_FAILURE "Auth failure."

/* memcached caps the verbosity level at this. */
#define BIN_MAX_VERBOSITY 2

/* ------------------------------------------------------------------ */
/* Request shapes and parsing                                          */
/* ------------------------------------------------------------------ */

enum bin_key_rule {
    BIN_KEY_NONE,       /* must not have a key */
    BIN_KEY_REQUIRED,   /* 1..BIN_KEY_MAX bytes */
    BIN_KEY_OPTIONAL    /* 0..BIN_KEY_MAX bytes */
};

/* What a request with a given opcode must look like. */
struct bin_shape {
    uint8_t extlen;         /* required extras length */
    uint8_t extlen_alt;     /* another accepted length (flush: 0 or 4) */
    enum bin_key_rule key;
    bool value_allowed;
};

static void shape_set(struct bin_shape *s, uint8_t extlen, enum bin_key_rule key,
                      bool value_allowed)
{
    s->extlen = extlen;
    s->extlen_alt = extlen;
    s->key = key;
    s->value_allowed = value_allowed;
}

/* Fill *s for a supported opcode; false for an unknown one. */
static bool bin_shape_of(uint8_t opcode, struct bin_shape *s)
{
    switch (opcode) {
    case BIN_OP_GET:
    case BIN_OP_GETQ:
    case BIN_OP_GETK:
    case BIN_OP_GETKQ:
    case BIN_OP_DELETE:
    case BIN_OP_DELETEQ:
        shape_set(s, 0, BIN_KEY_REQUIRED, false);
        return true;
    case BIN_OP_SET:
    case BIN_OP_SETQ:
    case BIN_OP_ADD:
    case BIN_OP_ADDQ:
    case BIN_OP_REPLACE:
    case BIN_OP_REPLACEQ:
        shape_set(s, BIN_EXTRAS_STORE, BIN_KEY_REQUIRED, true);
        return true;
    case BIN_OP_APPEND:
    case BIN_OP_APPENDQ:
    case BIN_OP_PREPEND:
    case BIN_OP_PREPENDQ:
        shape_set(s, 0, BIN_KEY_REQUIRED, true);
        return true;
    case BIN_OP_INCREMENT:
    case BIN_OP_INCREMENTQ:
    case BIN_OP_DECREMENT:
    case BIN_OP_DECREMENTQ:
        shape_set(s, BIN_EXTRAS_ARITH, BIN_KEY_REQUIRED, false);
        return true;
    case BIN_OP_TOUCH:
    case BIN_OP_GAT:
    case BIN_OP_GATQ:
    case BIN_OP_GATK:
    case BIN_OP_GATKQ:
        shape_set(s, BIN_EXTRAS_TOUCH, BIN_KEY_REQUIRED, false);
        return true;
    case BIN_OP_FLUSH:
    case BIN_OP_FLUSHQ:
        shape_set(s, 0, BIN_KEY_NONE, false);
        s->extlen_alt = BIN_EXTRAS_TOUCH;
        return true;
    case BIN_OP_VERBOSITY:
        shape_set(s, BIN_EXTRAS_TOUCH, BIN_KEY_NONE, false);
        return true;
    case BIN_OP_STAT:
        shape_set(s, 0, BIN_KEY_OPTIONAL, false);
        return true;
    case BIN_OP_QUIT:
    case BIN_OP_QUITQ:
    case BIN_OP_NOOP:
    case BIN_OP_VERSION:
        shape_set(s, 0, BIN_KEY_NONE, false);
        return true;
    default:
        return false;
    }
}

bool bin_opcode_known(uint8_t opcode)
{
    struct bin_shape s;
    return bin_shape_of(opcode, &s);
}

bool bin_opcode_is_quiet(uint8_t opcode)
{
    switch (opcode) {
    case BIN_OP_GETQ:
    case BIN_OP_GETKQ:
    case BIN_OP_SETQ:
    case BIN_OP_ADDQ:
    case BIN_OP_REPLACEQ:
    case BIN_OP_DELETEQ:
    case BIN_OP_INCREMENTQ:
    case BIN_OP_DECREMENTQ:
    case BIN_OP_QUITQ:
    case BIN_OP_FLUSHQ:
    case BIN_OP_APPENDQ:
    case BIN_OP_PREPENDQ:
    case BIN_OP_GATQ:
    case BIN_OP_GATKQ:
        return true;
    default:
        return false;
    }
}

bool bin_opcode_is_read(uint8_t opcode)
{
    switch (opcode) {
    case BIN_OP_GET:
    case BIN_OP_GETQ:
    case BIN_OP_GETK:
    case BIN_OP_GETKQ:
    case BIN_OP_GAT:
    case BIN_OP_GATQ:
    case BIN_OP_GATK:
    case BIN_OP_GATKQ:
    case BIN_OP_STAT:
        return true;
    default:
        return false;
    }
}

static void bin_decode_header(const char *buf, struct bin_header *h)
{
    h->magic = (uint8_t)buf[BIN_OFF_MAGIC];
    h->opcode = (uint8_t)buf[BIN_OFF_OPCODE];
    h->keylen = bin_load16(buf + BIN_OFF_KEYLEN);
    h->extlen = (uint8_t)buf[BIN_OFF_EXTLEN];
    h->datatype = (uint8_t)buf[BIN_OFF_DATATYPE];
    h->vbucket = bin_load16(buf + BIN_OFF_STATUS);
    h->bodylen = bin_load32(buf + BIN_OFF_BODYLEN);
    h->opaque = bin_load32(buf + BIN_OFF_OPAQUE);
    h->cas = bin_load64(buf + BIN_OFF_CAS);
}

/* Do the header's lengths fit together and suit the opcode's shape? */
static bool bin_lengths_valid(const struct bin_header *h, const struct bin_shape *s)
{
    if ((uint32_t)h->extlen + h->keylen > h->bodylen)
        return false;
    if (h->extlen != s->extlen && h->extlen != s->extlen_alt)
        return false;

    switch (s->key) {
    case BIN_KEY_NONE:
        if (h->keylen != 0)
            return false;
        break;
    case BIN_KEY_REQUIRED:
        if (h->keylen == 0 || h->keylen > BIN_KEY_MAX)
            return false;
        break;
    case BIN_KEY_OPTIONAL:
        if (h->keylen > BIN_KEY_MAX)
            return false;
        break;
    }

    uint32_t nvalue = h->bodylen - h->extlen - h->keylen;
    return s->value_allowed || nvalue == 0;
}

/* Point the request's parts into buf (which holds the whole request). */
static void bin_split_body(const char *buf, struct bin_request *out)
{
    const struct bin_header *h = &out->hdr;
    const char *body = buf + BIN_HEADER_LEN;

    out->extras = h->extlen ? body : NULL;
    out->nkey = h->keylen;
    out->key = h->keylen ? body + h->extlen : NULL;
    out->nvalue = h->bodylen - h->extlen - h->keylen;
    out->value = out->nvalue ? body + h->extlen + h->keylen : NULL;
}

/* A store of a value memcached would refuse as too large: its item size
 * (engine_too_large) is known from the header and extras, before the value
 * is read. */
static bool bin_store_too_large(const struct bin_request *rq, size_t item_size_max,
                                bool cas_enabled)
{
    switch (rq->hdr.opcode) {
    case BIN_OP_SET: case BIN_OP_SETQ: case BIN_OP_ADD: case BIN_OP_ADDQ:
    case BIN_OP_REPLACE: case BIN_OP_REPLACEQ: case BIN_OP_APPEND: case BIN_OP_APPENDQ:
    case BIN_OP_PREPEND: case BIN_OP_PREPENDQ:
        break;
    default:
        return false;
    }
    uint32_t flags = rq->hdr.extlen == BIN_EXTRAS_STORE ? bin_load32(rq->extras) : 0;
    return engine_too_large(item_size_max, cas_enabled, rq->nkey, rq->nvalue, flags);
}

enum bin_parse_result bin_parse_request(const char *buf, size_t len, size_t max_body,
                                        struct bin_request *out)
{
    memset(out, 0, sizeof(*out));

    if (len >= 1 && (uint8_t)buf[0] != BIN_MAGIC_REQUEST)
        return BIN_PARSE_BAD_MAGIC;
    if (len < BIN_HEADER_LEN)
        return BIN_PARSE_NEED_MORE;

    bin_decode_header(buf, &out->hdr);
    out->total = BIN_HEADER_LEN + (size_t)out->hdr.bodylen;

    if (out->hdr.bodylen > max_body)
        return BIN_PARSE_TOO_LARGE;
    if (len < out->total)
        return BIN_PARSE_NEED_MORE;

    struct bin_shape shape;
    if (!bin_shape_of(out->hdr.opcode, &shape))
        return BIN_PARSE_UNKNOWN;
    if (!bin_lengths_valid(&out->hdr, &shape))
        return BIN_PARSE_EINVAL;

    bin_split_body(buf, out);
    return BIN_PARSE_OK;
}

enum bin_frame_result bin_frame_request(const char *buf, size_t len, size_t item_size_max,
                                        bool cas_enabled, struct bin_request *out)
{
    memset(out, 0, sizeof(*out));

    /* memcached reads a whole header before it looks at the magic. */
    if (len < BIN_HEADER_LEN)
        return BF_NEED_MORE;
    if ((uint8_t)buf[0] != BIN_MAGIC_REQUEST)
        return BF_BAD_MAGIC;

    bin_decode_header(buf, &out->hdr);
    const struct bin_header *h = &out->hdr;
    out->head = BIN_HEADER_LEN + (size_t)h->keylen + h->extlen;
    out->total = BIN_HEADER_LEN + (size_t)h->bodylen;

    struct bin_shape shape;
    bool known = bin_shape_of(h->opcode, &shape);
    bool sasl = h->opcode >= BIN_OP_SASL_LIST && h->opcode <= BIN_OP_SASL_STEP;
    if (sasl) {
        /* Not built in (as in Debian's memcached), but their shapes are
         * checked: list takes nothing, auth and step a key and a value. */
        shape_set(&shape, 0, h->opcode == BIN_OP_SASL_LIST ? BIN_KEY_NONE : BIN_KEY_REQUIRED,
                  h->opcode != BIN_OP_SASL_LIST);
        known = true;
    }
    /* (A key over 250 bytes is read first, then refused as EINVAL.) */
    if (known && h->keylen <= BIN_KEY_MAX && (uint32_t)h->extlen + h->keylen > h->bodylen)
        return BF_BAD_LENGTHS;
    /* memcached reads key and extras into its 16 KB buffer after the
     * header: when they cannot fit it closes the connection. */
    if (out->head > BIN_HEAD_MAX)
        return len >= BIN_HEAD_MAX ? BF_BAD_MAGIC : BF_NEED_MORE;
    /* Key and extras come first; then the opcode and lengths are judged. */
    if (len < out->head)
        return BF_NEED_MORE;
    /* Then for every opcode, unknown ones too (difftest seed 2411 cases
     * 1918, 2278). */
    if ((uint32_t)h->extlen + h->keylen > h->bodylen)
        return BF_BAD_LENGTHS;
    /* memcached 1.6 answers verbosity as an unknown command; but a key
     * over 250 bytes, whatever the opcode, is invalid (seed 2411 case
     * 7267). */
    if (!known || h->opcode == BIN_OP_VERBOSITY)
        return h->keylen > BIN_KEY_MAX ? BF_EINVAL : BF_UNKNOWN;
    /* touch, gat* and stat: memcached reads the header, extras and key
     * only; body bytes beyond them are read as the next request. */
    bool head_only = h->opcode == BIN_OP_TOUCH || h->opcode == BIN_OP_GAT ||
                     h->opcode == BIN_OP_GATQ || h->opcode == BIN_OP_GATK ||
                     h->opcode == BIN_OP_GATKQ || h->opcode == BIN_OP_STAT;
    if (head_only && h->bodylen > (uint32_t)h->extlen + h->keylen) {
        struct bin_header trimmed = *h;
        trimmed.bodylen = (uint32_t)h->extlen + h->keylen;
        if (!bin_lengths_valid(&trimmed, &shape))
            return BF_EINVAL;
        out->hdr.bodylen = trimmed.bodylen;
        out->total = out->head;
        bin_split_body(buf, out);
        return BF_OK;
    }
    if (!bin_lengths_valid(h, &shape))
        return BF_EINVAL;
    /* The caller waits for the value, or refuses it first (too large). */
    if (sasl)
        return BF_UNKNOWN;

    out->extras = h->extlen ? buf + BIN_HEADER_LEN : NULL;
    out->nkey = h->keylen;
    out->key = h->keylen ? buf + BIN_HEADER_LEN + h->extlen : NULL;
    out->nvalue = h->bodylen - h->extlen - h->keylen;
    if (bin_store_too_large(out, item_size_max, cas_enabled))
        return BF_TOO_LARGE;
    if (len < out->total)
        return BF_NEED_MORE;
    bin_split_body(buf, out);
    return BF_OK;
}

size_t bin_max_body(size_t item_size_max)
{
    return item_size_max + BIN_EXTRAS_ARITH + BIN_KEY_MAX + BIN_BODY_SLACK;
}

/* ------------------------------------------------------------------ */
/* Status codes and reply formatting                                   */
/* ------------------------------------------------------------------ */

uint16_t bin_status_from_engine(eng_status status, uint8_t opcode)
{
    switch (status) {
    case ENG_SUCCESS:
        return BIN_STATUS_OK;
    case ENG_NOT_STORED:
        if (opcode == BIN_OP_ADD || opcode == BIN_OP_ADDQ)
            return BIN_STATUS_KEY_EEXISTS;
        if (opcode == BIN_OP_REPLACE || opcode == BIN_OP_REPLACEQ)
            return BIN_STATUS_KEY_ENOENT;
        return BIN_STATUS_NOT_STORED;
    case ENG_EXISTS:
        return BIN_STATUS_KEY_EEXISTS;
    case ENG_NOT_FOUND:
        return BIN_STATUS_KEY_ENOENT;
    case ENG_TOO_LARGE:
        return BIN_STATUS_E2BIG;
    case ENG_NO_MEMORY:
        return BIN_STATUS_ENOMEM;
    case ENG_NON_NUMERIC:
        return BIN_STATUS_DELTA_BADVAL;
    case ENG_MOVED:
        return BIN_STATUS_NOT_MY_VBUCKET;
    case ENG_FAILED:
    case ENG_PENDING:
    default:
        return BIN_STATUS_INTERNAL_ERROR;
    }
}

/* The error text memcached sends with a status. */
static const char *bin_status_text(uint16_t status)
{
    switch (status) {
    case BIN_STATUS_KEY_ENOENT:      return "Not found";
    case BIN_STATUS_KEY_EEXISTS:     return "Data exists for key.";
    case BIN_STATUS_E2BIG:           return "Too large.";
    case BIN_STATUS_EINVAL:          return "Invalid arguments";
    case BIN_STATUS_NOT_STORED:      return "Not stored.";
    case BIN_STATUS_DELTA_BADVAL:    return "Non-numeric server-side value for incr or decr";
    case BIN_STATUS_NOT_MY_VBUCKET:  return "Not my vbucket";
    case BIN_STATUS_UNKNOWN_COMMAND: return "Unknown command";
    case BIN_STATUS_ENOMEM:          return "Out of memory";
    case BIN_STATUS_INTERNAL_ERROR:  return "Internal error";
    default:                         return "";
    }
}

/* A new slot remembering what its (possibly later) reply needs. */
static struct resp *bin_resp_new(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = conn_resp_new(c);
    r->cmd = rq->hdr.opcode;
    r->opcode = rq->hdr.opcode;
    r->opaque = rq->hdr.opaque;
    r->noreply = false;
    return r;
}

static void bin_add_header(struct resp *r, uint16_t status, uint8_t extlen,
                           uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    char h[BIN_HEADER_LEN];

    h[BIN_OFF_MAGIC] = (char)BIN_MAGIC_RESPONSE;
    h[BIN_OFF_OPCODE] = (char)r->opcode;
    bin_store16(h + BIN_OFF_KEYLEN, keylen);
    h[BIN_OFF_EXTLEN] = (char)extlen;
    h[BIN_OFF_DATATYPE] = BIN_DATATYPE_RAW;
    bin_store16(h + BIN_OFF_STATUS, status);
    bin_store32(h + BIN_OFF_BODYLEN, bodylen);
    bin_store32(h + BIN_OFF_OPAQUE, r->opaque);
    bin_store64(h + BIN_OFF_CAS, cas);
    resp_add(r, h, sizeof(h));
}

/* A success reply with no body. */
static void bin_add_ok(struct resp *r, uint64_t cas)
{
    bin_add_header(r, BIN_STATUS_OK, 0, 0, 0, cas);
}

/* An error reply: status, cas 0, the message as body. */
static void bin_add_error_raw(struct resp *r, uint16_t status, const char *msg)
{
    size_t n = strlen(msg);
    bin_add_header(r, status, 0, 0, (uint32_t)n, 0);
    if (n > 0)
        resp_add(r, msg, n);
}

/* memcached writes an error reply at once (unless it then drops a body:
 * bin_add_error_raw). */
static void bin_add_error(struct resp *r, uint16_t status, const char *msg)
{
    bin_add_error_raw(r, status, msg);
    conn_flush_through(r);
}

/* A reply whose body is n bytes that may hold NULs (a SASL challenge),
 * written at once as an error reply is. */
static void bin_add_body(struct resp *r, uint16_t status, const char *body, size_t n)
{
    bin_add_header(r, status, 0, 0, (uint32_t)n, 0);
    if (n > 0)
        resp_add(r, body, n);
    conn_flush_through(r);
}

/* The error reply for an engine outcome; moved/failed carry the engine's text. */
static void bin_add_engine_error(struct resp *r, const struct eng_result *res)
{
    uint16_t status = bin_status_from_engine(res->status, r->opcode);
    const char *msg = bin_status_text(status);

    if ((res->status == ENG_MOVED || res->status == ENG_FAILED) && res->msg != NULL)
        msg = res->msg;
    bin_add_error(r, status, msg);
}

/* A hit: flags extras, the key when asked for, the value by reference. */
static void bin_add_value(struct resp *r, const char *key, size_t nkey, bool with_key,
                          const struct eng_value *v)
{
    uint16_t keylen = with_key ? (uint16_t)nkey : 0;
    uint32_t bodylen = BIN_EXTRAS_GET + keylen + v->nbytes;
    char flags[BIN_EXTRAS_GET];

    bin_add_header(r, BIN_STATUS_OK, BIN_EXTRAS_GET, keylen, bodylen, v->cas);
    bin_store32(flags, v->flags);
    resp_add(r, flags, sizeof(flags));
    if (keylen > 0)
        resp_add(r, key, keylen);
    resp_add_value(r, v, v->nbytes);
}

/* A miss: getk/gatk return the key as the body, the others "Not found". */
static void bin_add_miss(struct resp *r, const char *key, size_t nkey, bool with_key)
{
    if (!with_key) {
        bin_add_error(r, BIN_STATUS_KEY_ENOENT, bin_status_text(BIN_STATUS_KEY_ENOENT));
        return;
    }
    /* (Not written at once: memcached sends this one as a response.) */
    bin_add_header(r, BIN_STATUS_KEY_ENOENT, 0, (uint16_t)nkey, (uint32_t)nkey, 0);
    resp_add(r, key, nkey);
}

/* A whole reply that is just a status (for requests refused before dispatch). */
static void bin_reply_status(struct conn *c, const struct bin_request *rq, uint16_t status)
{
    struct resp *r = bin_resp_new(c, rq);
    bin_add_error(r, status, bin_status_text(status));
    resp_done(r);
}

/* The same before dropping bytes: memcached writes it only afterwards. */
static void bin_reply_status_swallow(struct conn *c, const struct bin_request *rq,
                                     uint16_t status, size_t swallow)
{
    struct resp *r = bin_resp_new(c, rq);
    if (swallow > 0)
        bin_add_error_raw(r, status, bin_status_text(status));
    else
        bin_add_error(r, status, bin_status_text(status));
    resp_done(r);
}

/* ------------------------------------------------------------------ */
/* Reads: get, gat, stat                                               */
/* ------------------------------------------------------------------ */

static void bin_get(struct conn *c, const struct bin_request *rq)
{
    uint8_t op = rq->hdr.opcode;
    bool with_key = op == BIN_OP_GETK || op == BIN_OP_GETKQ;
    struct eng_value v;
    struct eng_result res;

    memset(&res, 0, sizeof(res));
    eng_status st = conn_get(c, rq->key, rq->nkey, &v, &res);
    if (st == ENG_NOT_FOUND && bin_opcode_is_quiet(op))
        return;

    struct resp *r = bin_resp_new(c, rq);
    if (st == ENG_SUCCESS) {
        bin_add_value(r, rq->key, rq->nkey, with_key, &v);
    } else if (st == ENG_NOT_FOUND) {
        bin_add_miss(r, rq->key, rq->nkey, with_key);
    } else {
        res.status = st;
        bin_add_engine_error(r, &res);
    }
    resp_done(r);
}

/* The touch of a gat completed: the hit reply is already in the slot, with
 * its header first; only the cas may have changed.  Should the touch fail
 * after the read succeeded (only possible for a remote engine failure), the
 * value read is still returned. */
static void bin_gat_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status == ENG_SUCCESS && res->cas != 0 && r->buflen >= BIN_HEADER_LEN)
        bin_store64(r->buf + BIN_OFF_CAS, res->cas);
}

/* A gat miss never reaches the engine's touch; count it as a touch miss. */
static void bin_count_touch_miss(struct conn *c)
{
    struct server *s = conn_server(c);
    s->stats.cmd_touch++;
    s->stats.touch_misses++;
}

static void bin_gat(struct conn *c, const struct bin_request *rq)
{
    uint8_t op = rq->hdr.opcode;
    bool with_key = op == BIN_OP_GATK || op == BIN_OP_GATKQ;
    struct eng_value v;
    struct eng_result res;

    memset(&res, 0, sizeof(res));
    /* counted as a touch (by the touch, or below), not a get: memcached's */
    eng_status st = conn_lookup(c, rq->key, rq->nkey, &v, &res);
    if (st == ENG_NOT_FOUND) {
        bin_count_touch_miss(c);
        if (bin_opcode_is_quiet(op))
            return;
    }

    struct resp *r = bin_resp_new(c, rq);
    if (st != ENG_SUCCESS) {
        if (st == ENG_NOT_FOUND) {
            bin_add_miss(r, rq->key, rq->nkey, with_key);
        } else {
            res.status = st;
            bin_add_engine_error(r, &res);
        }
        resp_done(r);
        return;
    }

    bin_add_value(r, rq->key, rq->nkey, with_key, &v);

    struct eng_mutation m;
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_TOUCH;
    m.key = rq->key;
    m.nkey = rq->nkey;
    m.exptime = bin_load32(rq->extras);
    conn_mutate(c, r, &m, bin_gat_complete);
}

/* Context of one stat reply: every stat becomes a response in slot r. */
struct bin_stat_ctx {
    struct resp *r;
};

static void bin_add_stat(struct resp *r, const char *name, size_t nname,
                         const char *value, size_t nvalue)
{
    bin_add_header(r, BIN_STATUS_OK, 0, (uint16_t)nname, (uint32_t)(nname + nvalue), 0);
    resp_add(r, name, nname);
    resp_add(r, value, nvalue);
}

static void bin_stat_emit(void *ctx, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bin_stat_emit(void *ctx, const char *name, const char *fmt, ...)
{
    struct bin_stat_ctx *sc = ctx;
    char small[256];
    char *big = NULL;
    const char *value = small;
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(small)) {
        big = malloc((size_t)n + 1);
        if (big == NULL)
            return;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        value = big;
    }
    size_t nname = strlen(name);
    bin_add_stat(sc->r, name, nname, value, (size_t)n);
    free(big);
}

/* Text gathered for the binary "detail dump" stat. */
struct bin_dump {
    char *p;
    size_t n, cap;
};

static void bin_dump_write(void *ctx, const void *p, size_t n)
{
    struct bin_dump *d = ctx;
    if (d->n + n > d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        while (cap < d->n + n)
            cap *= 2;
        char *np = realloc(d->p, cap);
        if (!np)
            return;
        d->p = np;
        d->cap = cap;
    }
    memcpy(d->p + d->n, p, n);
    d->n += n;
}

static void bin_stat(struct conn *c, const struct bin_request *rq)
{
    struct server *s = conn_server(c);
    struct resp *r = bin_resp_new(c, rq);
    char group[BIN_KEY_MAX + 1];

    if (rq->nkey > 0 && memchr(rq->key, '\0', rq->nkey) != NULL) {
        bin_add_error(r, BIN_STATUS_KEY_ENOENT, bin_status_text(BIN_STATUS_KEY_ENOENT));
        resp_done(r);
        return;
    }
    if (rq->nkey > 0)
        memcpy(group, rq->key, rq->nkey);
    group[rq->nkey] = '\0';

    if (strcmp(group, "reset") == 0) {
        server_stats_reset(s);
        bin_add_ok(r, 0);
        resp_done(r);
        return;
    }
    /* stats detail: on and off answer the terminator alone; dump answers
     * one stat "detailed" holding the text dump, as memcached does. */
    if (strcmp(group, "detail on") == 0 || strcmp(group, "detail off") == 0) {
        s->settings.detail_enabled = group[8] == 'n';
        bin_add_ok(r, 0);
        resp_done(r);
        return;
    }
    if (strcmp(group, "detail dump") == 0) {
        struct bin_dump dump = { NULL, 0, 0 };
        prefix_stats_dump(s, bin_dump_write, &dump);
        bin_add_stat(r, "detailed", 8, dump.p ? dump.p : "", dump.n);
        free(dump.p);
        bin_add_ok(r, 0);
        resp_done(r);
        return;
    }
    if (strcmp(group, "sizes") == 0 && !s->settings.sizes_enabled) {
        bin_add_stat(r, "sizes_status", 12, "disabled", 8);
        bin_add_ok(r, 0);
        resp_done(r);
        return;
    }
    if (strcmp(group, "extstore") == 0) {
        bin_add_ok(r, 0);
        resp_done(r);
        return;
    }

    struct bin_stat_ctx sc = { .r = r };
    if (server_stats(s, group, bin_stat_emit, &sc))
        bin_add_ok(r, 0);   /* the terminator: empty key, empty value */
    else
        bin_add_error(r, BIN_STATUS_KEY_ENOENT, bin_status_text(BIN_STATUS_KEY_ENOENT));
    resp_done(r);
}

/* ------------------------------------------------------------------ */
/* Mutations                                                           */
/* ------------------------------------------------------------------ */

/* set/add/replace/append/prepend (and the cas form of set/replace). */
static void bin_store_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status != ENG_SUCCESS)
        bin_add_engine_error(r, res);
    else if (!bin_opcode_is_quiet(r->opcode))
        bin_add_ok(r, res->cas);
}

static eng_op bin_store_op(uint8_t opcode, uint64_t cas)
{
    switch (opcode) {
    case BIN_OP_ADD:
    case BIN_OP_ADDQ:
        return cas != 0 ? ENG_OP_CAS : ENG_OP_ADD;   /* memcached: a cas makes it a cas */
    case BIN_OP_REPLACE:
    case BIN_OP_REPLACEQ:
        return cas != 0 ? ENG_OP_CAS : ENG_OP_REPLACE;
    case BIN_OP_APPEND:
    case BIN_OP_APPENDQ:
        return ENG_OP_APPEND;
    case BIN_OP_PREPEND:
    case BIN_OP_PREPENDQ:
        return ENG_OP_PREPEND;
    default:
        return cas != 0 ? ENG_OP_CAS : ENG_OP_SET;
    }
}

static void bin_store(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    struct eng_mutation m;

    r->noreply = bin_opcode_is_quiet(rq->hdr.opcode);
    memset(&m, 0, sizeof(m));
    /* Without cas (-C) memcached never sees a request's cas: a store
     * with one is a plain store (difftest seed 14014 case 4825). */
    uint64_t cas = conn_server(c)->settings.cas_enabled ? rq->hdr.cas : 0;
    m.op = bin_store_op(rq->hdr.opcode, cas);
    m.key = rq->key;
    m.nkey = rq->nkey;
    m.data = rq->value;
    m.nbytes = rq->nvalue;
    if (rq->hdr.extlen == BIN_EXTRAS_STORE) {   /* set/add/replace */
        m.flags = bin_load32(rq->extras);
        m.exptime = bin_load32(rq->extras + 4);
    }
    m.cas = cas;
    if (m.data == NULL)
        m.data = "";
    conn_mutate(c, r, &m, bin_store_complete);
}

static void bin_delete_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status != ENG_SUCCESS)
        bin_add_engine_error(r, res);
    else if (!bin_opcode_is_quiet(r->opcode))
        bin_add_ok(r, 0);
}

static void bin_delete(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    struct eng_mutation m;

    r->noreply = bin_opcode_is_quiet(rq->hdr.opcode);
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_DELETE;
    m.key = rq->key;
    m.nkey = rq->nkey;
    m.cas = rq->hdr.cas;
    conn_mutate(c, r, &m, bin_delete_complete);
}

/* incr/decr: the reply body is the new value, 8 bytes big-endian. */
static void bin_arith_complete(struct resp *r, const struct eng_result *res)
{
    char value[8];

    if (res->status != ENG_SUCCESS) {
        bin_add_engine_error(r, res);
        return;
    }
    if (bin_opcode_is_quiet(r->opcode))
        return;
    bin_add_header(r, BIN_STATUS_OK, 0, 0, sizeof(value), res->cas);
    bin_store64(value, res->value);
    resp_add(r, value, sizeof(value));
}

static void bin_arith(struct conn *c, const struct bin_request *rq)
{
    conn_write_final(c);
    uint8_t op = rq->hdr.opcode;
    struct resp *r = bin_resp_new(c, rq);
    struct eng_mutation m;
    uint32_t exptime = bin_load32(rq->extras + 16);

    r->noreply = bin_opcode_is_quiet(op);
    memset(&m, 0, sizeof(m));
    m.op = (op == BIN_OP_INCREMENT || op == BIN_OP_INCREMENTQ) ? ENG_OP_INCR : ENG_OP_DECR;
    m.key = rq->key;
    m.nkey = rq->nkey;
    m.delta = bin_load64(rq->extras);
    m.initial = bin_load64(rq->extras + 8);
    m.create = exptime != BIN_ARITH_NO_CREATE;
    m.exptime = m.create ? exptime : 0;
    m.cas = rq->hdr.cas;
    conn_mutate(c, r, &m, bin_arith_complete);
}

/* A touched item's reply carries its flags as extras, as memcached's does
 * (read before the touch; r->arg holds them). */
static void bin_touch_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status != ENG_SUCCESS) {
        bin_add_engine_error(r, res);
        return;
    }
    char flags[BIN_EXTRAS_GET];
    bin_add_header(r, BIN_STATUS_OK, BIN_EXTRAS_GET, 0, BIN_EXTRAS_GET, res->cas);
    bin_store32(flags, (uint32_t)r->arg);
    resp_add(r, flags, sizeof(flags));
}

static void bin_touch(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    struct eng_mutation m;
    struct eng_value v;
    struct eng_result res;

    if (conn_get_ex(c, rq->key, rq->nkey, ENG_GET_PEEK, &v, &res) == ENG_SUCCESS) {
        r->arg = v.flags;
        if (v.handle)
            conn_engine(c)->ops->release(conn_engine(c), v.handle);
    }
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_TOUCH;
    m.key = rq->key;
    m.nkey = rq->nkey;
    m.exptime = bin_load32(rq->extras);
    conn_mutate(c, r, &m, bin_touch_complete);
}

static void bin_flush_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status != ENG_SUCCESS)
        bin_add_engine_error(r, res);
    else if (!bin_opcode_is_quiet(r->opcode))
        bin_add_ok(r, 0);
}

static void bin_flush(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    struct eng_mutation m;

    if (!conn_server(c)->settings.flush_enabled) {   /* -F: memcached's answer */
        bin_add_error(r, BIN_STATUS_AUTH_ERROR, "Auth failure.");
        resp_done(r);
        return;
    }

    r->noreply = bin_opcode_is_quiet(rq->hdr.opcode);
    memset(&m, 0, sizeof(m));
    m.op = ENG_OP_FLUSH;
    if (rq->hdr.extlen == BIN_EXTRAS_TOUCH)
        m.exptime = bin_load32(rq->extras);
    conn_mutate(c, r, &m, bin_flush_complete);
}

/* ------------------------------------------------------------------ */
/* Connection-level commands                                           */
/* ------------------------------------------------------------------ */

static void bin_noop(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    bin_add_ok(r, 0);
    resp_done(r);
}

static void bin_version(struct conn *c, const struct bin_request *rq)
{
    struct resp *r = bin_resp_new(c, rq);
    const char *version = MC_VERSION_STRING;
    size_t n = strlen(version);

    bin_add_header(r, BIN_STATUS_OK, 0, 0, (uint32_t)n, 0);
    resp_add(r, version, n);
    resp_done(r);
}

static void bin_verbosity(struct conn *c, const struct bin_request *rq)
{
    struct server *s = conn_server(c);
    uint32_t level = bin_load32(rq->extras);

    s->settings.verbose = level > BIN_MAX_VERBOSITY ? BIN_MAX_VERBOSITY : (int)level;
    bin_noop(c, rq);
}

static void bin_quit(struct conn *c, const struct bin_request *rq)
{
    if (rq->hdr.opcode == BIN_OP_QUIT)
        bin_noop(c, rq);
    conn_close_after_write(c);
}

/* ------------------------------------------------------------------ */
/* Entry point                                                         */
/* ------------------------------------------------------------------ */

static void bin_dispatch(struct conn *c, const struct bin_request *rq)
{
    switch (rq->hdr.opcode) {
    case BIN_OP_GET:
    case BIN_OP_GETQ:
    case BIN_OP_GETK:
    case BIN_OP_GETKQ:
        bin_get(c, rq);
        break;
    case BIN_OP_GAT:
    case BIN_OP_GATQ:
    case BIN_OP_GATK:
    case BIN_OP_GATKQ:
        bin_gat(c, rq);
        break;
    case BIN_OP_STAT:
        bin_stat(c, rq);
        break;
    case BIN_OP_SET:
    case BIN_OP_SETQ:
    case BIN_OP_ADD:
    case BIN_OP_ADDQ:
    case BIN_OP_REPLACE:
    case BIN_OP_REPLACEQ:
    case BIN_OP_APPEND:
    case BIN_OP_APPENDQ:
    case BIN_OP_PREPEND:
    case BIN_OP_PREPENDQ:
        bin_store(c, rq);
        break;
    case BIN_OP_DELETE:
    case BIN_OP_DELETEQ:
        bin_delete(c, rq);
        break;
    case BIN_OP_INCREMENT:
    case BIN_OP_INCREMENTQ:
    case BIN_OP_DECREMENT:
    case BIN_OP_DECREMENTQ:
        bin_arith(c, rq);
        break;
    case BIN_OP_TOUCH:
        bin_touch(c, rq);
        break;
    case BIN_OP_FLUSH:
    case BIN_OP_FLUSHQ:
        bin_flush(c, rq);
        break;
    case BIN_OP_NOOP:
        bin_noop(c, rq);
        break;
    case BIN_OP_VERSION:
        bin_version(c, rq);
        break;
    case BIN_OP_VERBOSITY:
        bin_verbosity(c, rq);
        break;
    case BIN_OP_QUIT:
    case BIN_OP_QUITQ:
        bin_quit(c, rq);
        break;
    default:   /* bin_parse_request only accepts the opcodes above */
        bin_reply_status(c, rq, BIN_STATUS_UNKNOWN_COMMAND);
        break;
    }
}

static void bin_silent_complete(struct resp *r, const struct eng_result *res)
{
    (void)r;
    (void)res;
}

/* A store too large for memcached's item size limit: E2BIG (written once
 * the value has been dropped); a set also drops the key's current value, as
 * memcached does, so nobody reads stale data. */
static void bin_reject_too_large(struct conn *c, const struct bin_request *rq)
{
    uint8_t op = rq->hdr.opcode;
    if ((op == BIN_OP_SET || op == BIN_OP_SETQ) && !server_moved(conn_server(c), rq->key, rq->nkey)) {
        struct eng_mutation m;
        memset(&m, 0, sizeof(m));
        m.op = ENG_OP_DELETE;
        m.key = rq->key;
        m.nkey = rq->nkey;
        struct resp *d = bin_resp_new(c, rq);
        d->noreply = true;
        conn_mutate_uncounted(c, d, &m, bin_silent_complete);   /* memcached's: not counted */
    }
    bin_reply_status_swallow(c, rq, BIN_STATUS_E2BIG, rq->nvalue);
}

/* Routing: a keyed request for a slot this process does not serve gets
 * not-my-vbucket with the MOVED text.  True if it did. */
static bool bin_reply_if_moved(struct conn *c, const struct bin_request *rq)
{
    struct server *s = conn_server(c);
    if (!s->routes || rq->nkey == 0 || rq->hdr.opcode == BIN_OP_STAT)
        return false;
    const char *moved = server_moved(s, rq->key, rq->nkey);
    if (!moved)
        return false;
    char body[sizeof("SERVER_ERROR MOVED ") + SLOTMAP_MOVED_MAX];
    snprintf(body, sizeof(body), "SERVER_ERROR MOVED %s", moved);
    struct resp *r = bin_resp_new(c, rq);
    bin_add_error(r, BIN_STATUS_NOT_MY_VBUCKET, body);
    resp_done(r);
    return true;
}

/* -Y in the binary protocol: SASL with the PLAIN mechanism against the
 * same credentials as the ASCII authentication (memcached's -Y answers
 * binary requests as ASCII; cluster clients such as cocytus-proxy speak
 * binary, so here they authenticate with SASL PLAIN).  List answers
 * "PLAIN"; auth with key PLAIN checks "[authzid]\0user\0password"; step
 * (no multi-step mechanism here) fails. */
static void bin_sasl(struct conn *c, const struct bin_request *rq)
{
    struct server *s = conn_server(c);
    struct resp *r = bin_resp_new(c, rq);
    const char *user, *pass;
    size_t nuser, npass;

    if (rq->hdr.opcode == BIN_OP_SASL_LIST) {
        bin_add_error(r, BIN_STATUS_OK, "PLAIN");
    } else if (rq->hdr.opcode == BIN_OP_SASL_AUTH && rq->nkey == 5 &&
               memcmp(rq->key, "PLAIN", 5) == 0 &&
               authfile_split_plain(rq->nvalue ? rq->value : "", rq->nvalue, &user, &nuser,
                                    &pass, &npass) &&
               authfile_check(&s->auth, user, nuser, pass, npass)) {
        s->stats.auth_cmds++;
        conn_set_authenticated(c);
        bin_add_error(r, BIN_STATUS_OK, "Authenticated");
    } else {
        s->stats.auth_cmds++;
        s->stats.auth_errors++;
        bin_add_error(r, BIN_STATUS_AUTH_ERROR, "Auth failure");
    }
    resp_done(r);
}

/* A SASL auth or step refused before its value is read, as memcached -S
 * refuses it: a mechanism name over 32 bytes is invalid (-S), and a
 * mechanism and value that would not fit one item chunk are "Out of
 * memory" (-S and -Y, so that nobody unauthenticated makes the server
 * buffer a body of any length).  Neither drops what the connection had
 * proved, as in memcached.  BIN_STATUS_OK when the value is to be read. */
static uint16_t bin_sasl_refusal(const struct server *s, const struct bin_request *rq)
{
    if (rq->hdr.opcode == BIN_OP_SASL_LIST)
        return BIN_STATUS_OK;
    if (s->settings.sasl_enabled && rq->hdr.keylen > MCSASL_MECH_MAX)
        return BIN_STATUS_EINVAL;
    if (engine_needs_chunks(s->settings.cas_enabled, rq->hdr.keylen, rq->total - rq->head, 0))
        return BIN_STATUS_ENOMEM;
    return BIN_STATUS_OK;
}

/* -S (memcached's SASL, through Cyrus: sasl_auth.h).  Every SASL command
 * first drops what the connection had proved, as memcached's does; auth
 * starts an exchange, step continues it, and the library's answer becomes
 * "Authenticated", a challenge (status 0x21) or "Auth failure.". */
static void bin_sasl_cyrus(struct conn *c, const struct bin_request *rq)
{
    struct server *s = conn_server(c);
    struct mcsasl *m = conn_sasl(c);
    const char *out = "";
    size_t nout = 0;
    enum mcsasl_outcome res = MCSASL_FAIL;

    conn_clear_authenticated(c);
    if (rq->hdr.opcode == BIN_OP_SASL_LIST) {
        if (m != NULL && mcsasl_mechs(m, &out, &nout)) {
            struct resp *r = bin_resp_new(c, rq);
            bin_add_body(r, BIN_STATUS_OK, out, nout);
            resp_done(r);
        } else {
            bin_reply_status(c, rq, BIN_STATUS_AUTH_ERROR);
        }
        return;
    }
    if (m != NULL && rq->hdr.opcode == BIN_OP_SASL_AUTH)
        res = mcsasl_start(m, rq->key, rq->nkey, rq->value, rq->nvalue, &out, &nout);
    else if (m != NULL)
        res = mcsasl_step(m, rq->value, rq->nvalue, &out, &nout);
    /* memcached counts an auth or step that ended the exchange (success
     * or failure) in auth_cmds, not one that asked for more; failures in
     * auth_errors. */
    if (res != MCSASL_CONTINUE)
        s->stats.auth_cmds++;
    struct resp *r = bin_resp_new(c, rq);
    switch (res) {
    case MCSASL_OK:
        conn_set_authenticated(c);
        bin_add_body(r, BIN_STATUS_OK, "Authenticated", strlen("Authenticated"));
        break;
    case MCSASL_CONTINUE:
        bin_add_body(r, BIN_STATUS_AUTH_CONTINUE, out, nout);
        break;
    case MCSASL_FAIL:
        s->stats.auth_errors++;
        bin_add_body(r, BIN_STATUS_AUTH_ERROR, SASL_FAILURE, strlen(SASL_FAILURE));
        break;
    }
    resp_done(r);
}

/* -S: until a connection authenticated, memcached answers anything but
 * the SASL commands and version with "Auth failure." and closes it, once
 * the request's extras and key arrived and before the rest of its lengths
 * are judged (an unknown opcode, bad extras or a value over the limit
 * alike).
 * CONN_PARSE_OK when the request may go on to be framed. */
static enum conn_parse bin_sasl_gate(struct conn *c, const char *buf, size_t len,
                                     size_t *consumed)
{
    struct bin_request rq;

    if (len < BIN_HEADER_LEN || (uint8_t)buf[0] != BIN_MAGIC_REQUEST)
        return CONN_PARSE_OK;
    memset(&rq, 0, sizeof(rq));
    bin_decode_header(buf, &rq.hdr);
    uint8_t op = rq.hdr.opcode;
    if ((op >= BIN_OP_SASL_LIST && op <= BIN_OP_SASL_STEP) || op == BIN_OP_VERSION)
        return CONN_PARSE_OK;
    size_t head = BIN_HEADER_LEN + (size_t)rq.hdr.keylen + rq.hdr.extlen;
    if (head > BIN_HEAD_MAX)
        return CONN_PARSE_OK;
    if (len < head)
        return CONN_PARSE_NEED_MORE;
    /* Key and extras longer than the body: "Unknown command" and closed,
     * by the framing, once they arrived (memcached -S waits for them
     * too). */
    if ((uint32_t)rq.hdr.extlen + rq.hdr.keylen > rq.hdr.bodylen)
        return CONN_PARSE_OK;
    struct resp *r = bin_resp_new(c, &rq);
    bin_add_body(r, BIN_STATUS_AUTH_ERROR, SASL_FAILURE, strlen(SASL_FAILURE));
    resp_done(r);
    *consumed = len;
    return CONN_PARSE_CLOSE;
}

enum conn_parse proto_bin_process(struct conn *c, const char *buf, size_t len,
                                  size_t *consumed)
{
    struct server *s = conn_server(c);
    struct bin_request rq;

    *consumed = 0;
    if (s->settings.sasl_enabled && !conn_authenticated(c)) {
        enum conn_parse gate = bin_sasl_gate(c, buf, len, consumed);
        if (gate != CONN_PARSE_OK)
            return gate;
    }
    switch (bin_frame_request(buf, len, s->settings.item_size_max, s->settings.cas_enabled,
                              &rq)) {
    case BF_NEED_MORE:
        /* Waiting for a value memcached writes nothing until it is
         * complete (waiting for a header or a key it does). */
        if (rq.head > 0 && len >= rq.head)
            conn_hold_output(c);
        return CONN_PARSE_NEED_MORE;
    case BF_BAD_MAGIC:
        /* A key and extras that cannot fit memcached's read buffer: it
         * reads on (writing what it owes first) before it gives up, so
         * earlier replies leave (difftest seed 6262 case 2599). */
        if (len >= BIN_HEADER_LEN && (uint8_t)buf[0] == BIN_MAGIC_REQUEST)
            conn_close_now(c);
        else
            conn_close_discard(c);
        return CONN_PARSE_CLOSE;
    case BF_BAD_LENGTHS:
        /* memcached answers "unknown command" and closes. */
        bin_reply_status(c, &rq, BIN_STATUS_UNKNOWN_COMMAND);
        *consumed = len;
        return CONN_PARSE_CLOSE;
    case BF_EINVAL:
        /* memcached closes the connection after the reply. */
        bin_reply_status(c, &rq, BIN_STATUS_EINVAL);
        *consumed = len;
        return CONN_PARSE_CLOSE;
    case BF_UNKNOWN:
        if (rq.hdr.opcode >= BIN_OP_SASL_LIST && rq.hdr.opcode <= BIN_OP_SASL_STEP &&
            (s->settings.auth_file || s->settings.sasl_enabled)) {
            uint16_t refuse = bin_sasl_refusal(s, &rq);
            if (refuse != BIN_STATUS_OK) {
                bin_reply_status_swallow(c, &rq, refuse, rq.total - rq.head);
                *consumed = len < rq.total ? len : rq.total;
                conn_swallow(c, rq.total - *consumed);
                return CONN_PARSE_OK;
            }
            if (len < rq.total) {
                conn_hold_output(c);
                return CONN_PARSE_NEED_MORE;
            }
            bin_split_body(buf, &rq);
            if (s->settings.sasl_enabled)
                bin_sasl_cyrus(c, &rq);
            else
                bin_sasl(c, &rq);
            *consumed = rq.total;
            return CONN_PARSE_OK;
        }
        if (rq.hdr.opcode >= BIN_OP_SASL_LIST && rq.hdr.opcode <= BIN_OP_SASL_STEP) {
            /* The SASL commands (not built in, as in Debian's memcached)
             * are unknown, their body read and dropped; memcached reads
             * the key, then drops the value (its reply then waits as for
             * any dropped value: difftest seed 2411 case 1662). */
            bin_reply_status_swallow(c, &rq, BIN_STATUS_UNKNOWN_COMMAND,
                                     rq.hdr.bodylen - rq.hdr.keylen - rq.hdr.extlen);
            *consumed = len < rq.total ? len : rq.total;
            conn_swallow(c, rq.total - *consumed);
            return CONN_PARSE_OK;
        }
        /* memcached drops bodylen more bytes after the key and extras. */
        bin_reply_status_swallow(c, &rq, BIN_STATUS_UNKNOWN_COMMAND, rq.hdr.bodylen);
        *consumed = rq.head;
        conn_swallow(c, rq.hdr.bodylen);
        return CONN_PARSE_OK;
    case BF_TOO_LARGE:
        bin_reject_too_large(c, &rq);
        *consumed = rq.head;
        conn_swallow(c, rq.nvalue);
        return CONN_PARSE_OK;
    case BF_OK:
        break;
    }

    if (s->settings.auth_file && !conn_authenticated(c)) {
        /* -Y: nothing but SASL before a client authenticated */
        struct resp *r = bin_resp_new(c, &rq);
        bin_add_error(r, BIN_STATUS_AUTH_ERROR, "Auth failure");
        resp_done(r);
        s->stats.auth_errors++;
        *consumed = rq.total;
        return CONN_PARSE_OK;
    }
    /* A read waits for this connection's writes in flight of its key (a
     * touch too: its reply carries the item's flags); stats for all of
     * them, and a stats group name is not a key the engine could wait
     * for. */
    bool stat = rq.hdr.opcode == BIN_OP_STAT;
    bool peeks = bin_opcode_is_read(rq.hdr.opcode) || rq.hdr.opcode == BIN_OP_TOUCH;
    if (stat ? conn_writes_inflight(c) : peeks && conn_key_writes_inflight(c, rq.key, rq.nkey))
        return CONN_PARSE_BLOCKED;
    if (!stat && bin_opcode_is_read(rq.hdr.opcode) && rq.nkey > 0 &&
        conn_read_waits(c, rq.key, rq.nkey))
        return CONN_PARSE_BLOCKED;

    if (!bin_reply_if_moved(c, &rq))
        bin_dispatch(c, &rq);
    *consumed = rq.total;
    if (rq.hdr.opcode == BIN_OP_NOOP)
        conn_flush_point(c);
    return CONN_PARSE_OK;
}
