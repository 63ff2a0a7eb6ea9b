/* px_bin.c - cocytus-proxy: memcached's binary protocol in front.
 *
 * A binary request is checked with the server's own parser
 * (bin_parse_request()) and forwarded almost as it came: the quiet opcodes
 * go to the server in their non-quiet form (so every op gets exactly one
 * reply to match), and the opaque is the proxy's.  The server's reply goes
 * back with the client's opcode and opaque put back; the quiet rules are
 * applied here (a quiet get says nothing on a miss, a quiet mutation
 * nothing on success, errors always).  flush goes to every endpoint of the
 * map and is answered once; stat, version, noop and quit are answered by
 * the proxy, and verbosity as an unknown command, as memcached 1.6 and our
 * servers answer it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin_wire.h"
#include "proto_bin.h"
#include "px.h"

#define PX_FAIL 0xffff

static uint8_t loud_opcode(uint8_t op)
{
    switch (op) {
    case BIN_OP_GETQ:       return BIN_OP_GET;
    case BIN_OP_GETKQ:      return BIN_OP_GETK;
    case BIN_OP_GATQ:       return BIN_OP_GAT;
    case BIN_OP_GATKQ:      return BIN_OP_GATK;
    case BIN_OP_SETQ:       return BIN_OP_SET;
    case BIN_OP_ADDQ:       return BIN_OP_ADD;
    case BIN_OP_REPLACEQ:   return BIN_OP_REPLACE;
    case BIN_OP_DELETEQ:    return BIN_OP_DELETE;
    case BIN_OP_INCREMENTQ: return BIN_OP_INCREMENT;
    case BIN_OP_DECREMENTQ: return BIN_OP_DECREMENT;
    case BIN_OP_APPENDQ:    return BIN_OP_APPEND;
    case BIN_OP_PREPENDQ:   return BIN_OP_PREPEND;
    case BIN_OP_FLUSHQ:     return BIN_OP_FLUSH;
    default:                return op;
    }
}

static bool is_get(uint8_t loud)
{
    return loud == BIN_OP_GET || loud == BIN_OP_GETK || loud == BIN_OP_GAT || loud == BIN_OP_GATK;
}

/* ---- replies the proxy writes itself ---- */

static void put_header(struct evbuffer *out, const struct px_req *rq, uint16_t status,
                       uint8_t extlen, uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    char h[BIN_HEADER_LEN];

    memset(h, 0, sizeof(h));
    h[BIN_OFF_MAGIC] = (char)BIN_MAGIC_RESPONSE;
    h[BIN_OFF_OPCODE] = (char)rq->bin_opcode;
    bin_store16(h + BIN_OFF_KEYLEN, keylen);
    h[BIN_OFF_EXTLEN] = (char)extlen;
    bin_store16(h + BIN_OFF_STATUS, status);
    bin_store32(h + BIN_OFF_BODYLEN, bodylen);
    bin_store32(h + BIN_OFF_OPAQUE, rq->bin_opaque);
    bin_store64(h + BIN_OFF_CAS, cas);
    evbuffer_add(out, h, sizeof(h));
}

static const char *status_text(uint16_t status)
{
    switch (status) {
    case BIN_STATUS_KEY_ENOENT:      return "Not found";
    case BIN_STATUS_E2BIG:           return "Too large.";
    case BIN_STATUS_EINVAL:          return "Invalid arguments";
    case BIN_STATUS_UNKNOWN_COMMAND: return "Unknown command";
    case BIN_STATUS_ENOMEM:          return "Out of memory";
    default:                         return "Internal error";
    }
}

static void put_status(struct px_req *rq, uint16_t status, const char *text)
{
    struct evbuffer *out = px_req_sink(rq);
    size_t n = strlen(text);

    if (out == NULL)
        return;
    put_header(out, rq, status, 0, 0, (uint32_t)n, 0);
    evbuffer_add(out, text, n);
}

void px_bin_failure(struct px_req *rq, struct evbuffer *out, const char *why)
{
    size_t n = strlen(why);

    if (out == NULL)
        return;
    put_header(out, rq, BIN_STATUS_INTERNAL_ERROR, 0, 0, (uint32_t)n, 0);
    evbuffer_add(out, why, n);
}

struct stat_sink {
    struct evbuffer *out;
    const struct px_req *rq;
};

static void stat_packet(void *ctx, const char *name, const char *value)
{
    struct stat_sink *s = ctx;
    size_t nname = strlen(name), nvalue = strlen(value);

    put_header(s->out, s->rq, BIN_STATUS_OK, 0, (uint16_t)nname, (uint32_t)(nname + nvalue), 0);
    evbuffer_add(s->out, name, nname);
    evbuffer_add(s->out, value, nvalue);
}

static void local_stat(struct px_req *rq, const struct bin_request *b)
{
    struct evbuffer *out = px_req_sink(rq);
    enum px_stats_group g = px_stats_group_of(b->key, b->nkey);
    struct stat_sink s = { out, rq };

    if (out == NULL)
        return;
    if (g == PX_STATS_UNKNOWN) {
        put_status(rq, BIN_STATUS_KEY_ENOENT, status_text(BIN_STATUS_KEY_ENOENT));
        return;
    }
    if (g == PX_STATS_RESET)
        px_stats_reset(rq->c->w->px);
    else
        px_stats_emit(rq->c->w, g, NULL, stat_packet, &s);
    put_header(out, rq, BIN_STATUS_OK, 0, 0, 0, 0);
}

/* A general STAT (no key), which waits for the servers' totals. */
static bool wants_totals(const struct px_client *c, const struct bin_request *b)
{
    return loud_opcode(b->hdr.opcode) == BIN_OP_STAT &&
           px_stats_wants_totals(c->w, b->key, b->nkey);
}

static void local_request(struct px_req *rq, const struct bin_request *b)
{
    struct evbuffer *out = px_req_sink(rq);

    if (out == NULL)
        return;
    switch (b->hdr.opcode) {
    case BIN_OP_STAT:
        local_stat(rq, b);
        break;
    case BIN_OP_VERSION:
        put_status(rq, BIN_STATUS_OK, PX_VERSION);
        break;
    case BIN_OP_NOOP:
        put_header(out, rq, BIN_STATUS_OK, 0, 0, 0, 0);
        break;
    case BIN_OP_QUIT:
        put_header(out, rq, BIN_STATUS_OK, 0, 0, 0, 0);
        rq->close_after = true;
        break;
    case BIN_OP_QUITQ:
        rq->close_after = true;
        break;
    default:
        put_status(rq, BIN_STATUS_UNKNOWN_COMMAND, status_text(BIN_STATUS_UNKNOWN_COMMAND));
        break;
    }
}

/* ---- requests ---- */

static void count_command(struct px_worker *w, uint8_t loud)
{
    switch (loud) {
    case BIN_OP_GAT: case BIN_OP_GATK:
        /* memcached counts a gat as a touch only (hits: px_stats_outcome) */
        px_count(&w->st.cmd_touch, 1);
        break;
    case BIN_OP_GET: case BIN_OP_GETK:
        px_count(&w->st.cmd_get, 1);
        break;
    case BIN_OP_DELETE:
        px_count(&w->st.cmd_delete, 1);
        break;
    case BIN_OP_INCREMENT: case BIN_OP_DECREMENT:
        px_count(&w->st.cmd_incr_decr, 1);
        break;
    case BIN_OP_TOUCH:
        px_count(&w->st.cmd_touch, 1);
        break;
    case BIN_OP_FLUSH:
        px_count(&w->st.cmd_flush, 1);
        break;
    default:
        px_count(&w->st.cmd_set, 1);
        break;
    }
}

/* Whether a try of this request may be sent again after its connection was
 * lost (it may have been applied): gets, touch, delete, set and replace
 * without a cas. */
static bool harmless_twice(uint8_t loud, uint64_t cas)
{
    switch (loud) {
    case BIN_OP_GET: case BIN_OP_GETK: case BIN_OP_GAT: case BIN_OP_GATK:
    case BIN_OP_TOUCH: case BIN_OP_DELETE: case BIN_OP_FLUSH:
        return true;
    case BIN_OP_SET: case BIN_OP_REPLACE:
        return cas == 0;
    default:
        return false;
    }
}

static bool is_forwarded(uint8_t loud)
{
    switch (loud) {
    case BIN_OP_GET: case BIN_OP_GETK: case BIN_OP_GAT: case BIN_OP_GATK:
    case BIN_OP_SET: case BIN_OP_ADD: case BIN_OP_REPLACE: case BIN_OP_APPEND:
    case BIN_OP_PREPEND: case BIN_OP_DELETE: case BIN_OP_INCREMENT: case BIN_OP_DECREMENT:
    case BIN_OP_TOUCH: case BIN_OP_FLUSH:
        return true;
    default:
        return false;
    }
}

static void start_forwarded(struct px_client *c, struct px_req *rq, const struct bin_request *b,
                            uint8_t loud)
{
    struct px_worker *w = c->w;
    size_t n = loud == BIN_OP_FLUSH ? w->map->n : 1;

    count_command(w, loud);
    for (size_t i = 0; i < n; i++) {
        struct px_op *op = px_op_new(rq, loud, b->extras, b->hdr.extlen, b->key, b->nkey,
                                     b->value, b->nvalue, b->hdr.cas);
        if (op == NULL) {
            snprintf(rq->err, sizeof(rq->err), "out of memory");
            return;
        }
        op->retry_lost = harmless_twice(loud, b->hdr.cas);
        if (loud == BIN_OP_FLUSH)
            op->fanout = (int)i;
    }
}

/* A refused request: its status now, and its data skipped. */
static size_t refuse(struct px_client *c, const struct bin_request *b, uint16_t status,
                     size_t len)
{
    struct px_req *rq = px_req_new(c, PX_PROTO_BINARY, 0);
    size_t used = len < b->total ? len : b->total;

    if (rq == NULL)
        return SIZE_MAX;
    rq->bin_opcode = b->hdr.opcode;
    rq->bin_opaque = b->hdr.opaque;
    put_status(rq, status, status_text(status));
    px_req_finish(rq);
    c->swallow = b->total - used;
    return used;
}

/* A store too large: E2BIG.  A set also drops the key's current value
 * first, as memcached does (nobody then reads what the client meant to
 * replace); the drop is a request of its own that shows nothing, ahead of
 * the refusal, so the E2BIG leaves once the drop is done.  The key is
 * waited for (it follows the header and extras). */
static size_t refuse_too_large(struct px_client *c, const char *buf, size_t len,
                               const struct bin_request *b)
{
    uint8_t op = b->hdr.opcode;
    size_t head = BIN_HEADER_LEN + (size_t)b->hdr.extlen + b->hdr.keylen;

    if ((op == BIN_OP_SET || op == BIN_OP_SETQ) && b->hdr.extlen == BIN_EXTRAS_STORE &&
        b->hdr.keylen > 0 && b->hdr.keylen <= BIN_KEY_MAX &&
        head <= BIN_HEADER_LEN + b->hdr.bodylen) {
        if (len < head)
            return 0;
        struct px_req *drop = px_req_new(c, PX_PROTO_BINARY, 1);
        if (drop == NULL)
            return SIZE_MAX;
        drop->silent = true;
        drop->bin_opcode = op;
        drop->bin_opaque = b->hdr.opaque;
        px_meta_drop_key(c, drop, buf + BIN_HEADER_LEN + b->hdr.extlen, b->hdr.keylen);
        px_req_finish(drop);
    }
    return refuse(c, b, BIN_STATUS_E2BIG, len);
}

size_t px_bin_request(struct px_client *c, const char *buf, size_t len)
{
    struct bin_request b;

    switch (bin_parse_request(buf, len, bin_max_body(c->w->px->opt.item_max), &b)) {
    case BIN_PARSE_NEED_MORE:
        return 0;
    case BIN_PARSE_BAD_MAGIC:
        return SIZE_MAX;
    case BIN_PARSE_TOO_LARGE:
        return refuse_too_large(c, buf, len, &b);
    case BIN_PARSE_EINVAL:
        return refuse(c, &b, BIN_STATUS_EINVAL, len);
    case BIN_PARSE_UNKNOWN:
        return refuse(c, &b, BIN_STATUS_UNKNOWN_COMMAND, len);
    case BIN_PARSE_OK:
        break;
    }
    uint8_t loud = loud_opcode(b.hdr.opcode);
    bool forwarded = is_forwarded(loud);
    bool totals = wants_totals(c, &b);
    unsigned nops = totals ? (unsigned)c->w->map->n
                  : !forwarded ? 0 : loud == BIN_OP_FLUSH ? (unsigned)c->w->map->n : 1;
    struct px_req *rq = px_req_new(c, PX_PROTO_BINARY, nops);

    if (rq == NULL)
        return SIZE_MAX;
    rq->bin_opcode = b.hdr.opcode;
    rq->bin_opaque = b.hdr.opaque;
    if (totals) {
        if (!px_stats_fan_out(rq))
            snprintf(rq->err, sizeof(rq->err), "out of memory");
    } else if (forwarded) {
        start_forwarded(c, rq, &b, loud);
    } else {
        local_request(rq, &b);
    }
    for (unsigned i = 0; i < rq->nops; i++)
        px_route_op(c->w, rq->ops[i]);
    px_req_finish(rq);
    return b.total;
}

/* ---- replies ---- */

void px_bin_reply(struct px_op *op, uint16_t status, const char *hdr, const char *body,
                  size_t nbody)
{
    struct px_req *rq = op->req;
    struct px_worker *w = rq->c->w;
    uint8_t loud = loud_opcode(rq->bin_opcode);
    bool quiet = bin_opcode_is_quiet(rq->bin_opcode);

    if (loud == BIN_OP_FLUSH) {
        if (status != BIN_STATUS_OK)
            px_req_note_error(rq, body, nbody);
        return;
    }
    if (loud == BIN_OP_STAT)
        return;                 /* summed at the end (px_bin_finish) */
    struct evbuffer *out = px_req_sink(rq);
    if (out == NULL)
        return;
    if (status == PX_FAIL) {
        px_bin_failure(rq, out, body);
        return;
    }
    if (is_get(loud)) {
        if (loud == BIN_OP_GET || loud == BIN_OP_GETK)
            px_count(status == BIN_STATUS_OK ? &w->st.get_hits : &w->st.get_misses, 1);
        if (status == BIN_STATUS_KEY_ENOENT && quiet)
            return;
    } else if (status == BIN_STATUS_OK && quiet) {
        return;
    }
    if (status != BIN_STATUS_OK && status != BIN_STATUS_KEY_ENOENT &&
        status != BIN_STATUS_KEY_EEXISTS && status != BIN_STATUS_NOT_STORED)
        px_count(&w->st.errors, 1);
    char h[BIN_HEADER_LEN];
    memcpy(h, hdr, sizeof(h));
    h[BIN_OFF_OPCODE] = (char)rq->bin_opcode;
    bin_store32(h + BIN_OFF_OPAQUE, rq->bin_opaque);
    evbuffer_add(out, h, sizeof(h));
    evbuffer_add(out, body, nbody);
}

void px_bin_finish(struct px_req *rq)
{
    uint8_t loud = loud_opcode(rq->bin_opcode);

    if (loud == BIN_OP_FLUSH && rq->nops > 0) {
        struct evbuffer *out = px_req_sink(rq);
        if (out == NULL)
            return;
        if (rq->err[0])
            px_bin_failure(rq, out, rq->err);
        else if (!bin_opcode_is_quiet(rq->bin_opcode))
            put_header(out, rq, BIN_STATUS_OK, 0, 0, 0, 0);
        return;
    }
    if (loud == BIN_OP_STAT && rq->nops > 0) {
        /* the servers that did not answer in time are left out of the sums */
        struct evbuffer *out = px_req_sink(rq);
        struct stat_sink s = { out, rq };
        struct px_totals tot;
        if (out == NULL)
            return;
        px_stats_totals(rq->c->w, rq, &tot);
        px_stats_emit(rq->c->w, PX_STATS_GENERAL, &tot, stat_packet, &s);
        put_header(out, rq, BIN_STATUS_OK, 0, 0, 0, 0);
        return;
    }
    if (rq->nops == 0 && rq->err[0])
        px_bin_failure(rq, px_req_sink(rq), rq->err);
}
