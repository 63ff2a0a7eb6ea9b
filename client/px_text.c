/* px_text.c - cocytus-proxy: memcached's ASCII protocol in front, binary
 * requests behind.
 *
 * A request is parsed with the server's own pure parser (text_parse()) and
 * becomes binary ops: one per key for get/gets/gat/gats (each key goes to
 * its own slot's owner; the reply joins them in key order), one for a
 * keyed mutation, one per map endpoint for flush_all and `stats` (the
 * servers' totals, px_stats.c).  The servers always
 * get the non-quiet binary form, so every op has exactly one reply to
 * match; noreply only suppresses what the client sees.  The binary reply
 * status is turned back into memcached's ASCII line for the command
 * (NOT_STORED for add on an existing key, EXISTS for a cas mismatch, ...).
 *
 * Binary to the servers because every key a memcached client may send is
 * counted bytes there, and replies are framed by their header alone. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin_wire.h"
#include "px.h"

#define PX_FAIL 0xffff

/* ---- requests ---- */

/* A client exptime as a binary one (uint32).  Negative means "already
 * expired": an absolute time in 1970, just past the 30-day relative range,
 * which every memcached-rule server treats as in the past. */
static uint32_t wire_exptime(int64_t exptime)
{
    if (exptime < 0)
        return 60 * 60 * 24 * 30 + 1;
    if (exptime > (int64_t)UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)exptime;
}

static bool is_retrieval(int cmd)
{
    return cmd == TC_GET || cmd == TC_GETS || cmd == TC_GAT || cmd == TC_GATS;
}

static void local_line(struct px_req *rq, const char *line)
{
    struct evbuffer *out = px_req_sink(rq);
    if (out == NULL)
        return;
    evbuffer_add(out, line, strlen(line));
    evbuffer_add(out, "\r\n", 2);
}

/* A request whose op could not be created: answer at once. */
static void out_of_memory(struct px_req *rq)
{
    snprintf(rq->err, sizeof(rq->err), "out of memory");
}

static size_t count_keys(const struct text_req *t)
{
    const char *p = t->keys, *end = t->keys + t->nkeys_len, *key;
    size_t nkey, n = 0;

    while (text_next_key(&p, end, &key, &nkey))
        n++;
    return n;
}

static void start_retrieval(struct px_client *c, struct px_req *rq, const struct text_req *t)
{
    const char *p = t->keys, *end = t->keys + t->nkeys_len, *key;
    size_t nkey;
    bool gat = t->cmd == TC_GAT || t->cmd == TC_GATS;
    char ext[4];

    bin_store32(ext, wire_exptime(t->exptime));
    while (text_next_key(&p, end, &key, &nkey)) {
        struct px_op *op = gat ? px_op_new(rq, BIN_OP_GAT, ext, 4, key, nkey, NULL, 0, 0)
                               : px_op_new(rq, BIN_OP_GET, NULL, 0, key, nkey, NULL, 0, 0);
        if (op == NULL) {
            out_of_memory(rq);
            break;
        }
        op->retry_lost = true;
        /* memcached counts a gat as a touch only (hits: px_stats_outcome) */
        px_count(gat ? &c->w->st.cmd_touch : &c->w->st.cmd_get, 1);
    }
}

static uint8_t store_opcode(int cmd)
{
    switch (cmd) {
    case TC_ADD:     return BIN_OP_ADD;
    case TC_REPLACE: return BIN_OP_REPLACE;
    case TC_APPEND:  return BIN_OP_APPEND;
    case TC_PREPEND: return BIN_OP_PREPEND;
    default:         return BIN_OP_SET;   /* set, cas */
    }
}

static struct px_op *start_store(struct px_client *c, struct px_req *rq,
                                 const struct text_req *t)
{
    uint8_t opcode = store_opcode(t->cmd);
    char ext[8];
    bool with_extras = opcode == BIN_OP_SET || opcode == BIN_OP_ADD || opcode == BIN_OP_REPLACE;

    bin_store32(ext, t->flags);
    bin_store32(ext + 4, wire_exptime(t->exptime));
    px_count(&c->w->st.cmd_set, 1);
    /* A binary CAS of 0 means "no CAS", but a text cas with unique 0 must
     * match nothing (memcached: EXISTS, or NOT_FOUND): it goes as the one
     * unique no item ever gets, never as a plain set. */
    uint64_t cas = 0;
    if (t->cmd == TC_CAS)
        cas = t->cas != 0 ? t->cas : UINT64_MAX;
    struct px_op *op = px_op_new(rq, opcode, ext, with_extras ? 8 : 0, t->key, t->nkey,
                                 t->data, (size_t)t->vlen, cas);
    if (op)
        op->retry_lost = t->cmd == TC_SET || t->cmd == TC_REPLACE;
    return op;
}

static struct px_op *start_keyed(struct px_client *c, struct px_req *rq,
                                 const struct text_req *t)
{
    char ext[20];
    struct px_op *op = NULL;

    switch (t->cmd) {
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
        return start_store(c, rq, t);
    case TC_DELETE:
        px_count(&c->w->st.cmd_delete, 1);
        op = px_op_new(rq, BIN_OP_DELETE, NULL, 0, t->key, t->nkey, NULL, 0, 0);
        if (op)
            op->retry_lost = true;
        return op;
    case TC_INCR: case TC_DECR:
        px_count(&c->w->st.cmd_incr_decr, 1);
        bin_store64(ext, t->delta);
        bin_store64(ext + 8, 0);
        bin_store32(ext + 16, BIN_ARITH_NO_CREATE);
        return px_op_new(rq, t->cmd == TC_INCR ? BIN_OP_INCREMENT : BIN_OP_DECREMENT, ext, 20,
                         t->key, t->nkey, NULL, 0, 0);
    case TC_TOUCH:
        px_count(&c->w->st.cmd_touch, 1);
        bin_store32(ext, wire_exptime(t->exptime));
        op = px_op_new(rq, BIN_OP_TOUCH, ext, 4, t->key, t->nkey, NULL, 0, 0);
        if (op)
            op->retry_lost = true;
        return op;
    default:
        return NULL;
    }
}

static void start_flush(struct px_client *c, struct px_req *rq, const struct text_req *t)
{
    struct px_worker *w = c->w;
    char ext[4];

    px_count(&w->st.cmd_flush, 1);
    bin_store32(ext, wire_exptime(t->exptime));
    for (size_t i = 0; i < w->map->n; i++) {
        struct px_op *op = px_op_new(rq, BIN_OP_FLUSH, ext, t->exptime ? 4 : 0, NULL, 0, NULL,
                                     0, 0);
        if (op == NULL) {
            out_of_memory(rq);
            break;
        }
        op->fanout = (int)i;
        op->retry_lost = true;
    }
}

static void text_stat_line(void *ctx, const char *name, const char *value)
{
    evbuffer_add_printf(ctx, "STAT %s %s\r\n", name, value);
}

static void local_stats(struct px_req *rq, const struct text_req *t)
{
    enum px_stats_group g = px_stats_group_of(t->arg, t->arg != NULL ? t->narg : 0);
    struct evbuffer *out;

    if (g == PX_STATS_UNKNOWN) {
        local_line(rq, "ERROR");
        return;
    }
    if (g == PX_STATS_RESET) {
        px_stats_reset(rq->c->w->px);
        local_line(rq, "RESET");
        return;
    }
    out = px_req_sink(rq);
    if (out == NULL)
        return;
    px_stats_emit(rq->c->w, g, NULL, text_stat_line, out);
    evbuffer_add(out, "END\r\n", 5);
}

/* A general `stats`, which waits for the servers' totals (px_stats.c). */
static bool wants_totals(const struct px_client *c, const struct text_req *t)
{
    return t->cmd == TC_STATS && px_stats_wants_totals(c->w, t->arg, t->arg != NULL ? t->narg : 0);
}

/* Sends wire (a listing request) to every server (px_meta.c); with no
 * server, the listing is empty. */
static void start_dump(struct px_client *c, struct px_req *rq, const char *wire, size_t nwire)
{
    if (c->w->map->n == 0)
        local_line(rq, "END");
    else if (!px_meta_dump(c, rq, wire, nwire))
        out_of_memory(rq);
}

/* A metadump goes to every server; the argument is judged here, so a bad
 * class is refused once, as one server would. */
static void start_metadump(struct px_client *c, struct px_req *rq, const struct text_req *t)
{
    static const char head[] = "lru_crawler metadump ";
    size_t nwhat, nhead = sizeof(head) - 1;
    const char *what = text_metadump_arg(t, &nwhat);
    if (what == NULL) {
        local_line(rq, "ERROR");
        return;
    }
    if (text_metadump_classes(what, nwhat) == 0) {
        local_line(rq, "BADCLASS invalid class id");
        return;
    }
    char *wire = malloc(nhead + nwhat + 2);
    if (wire == NULL) {
        out_of_memory(rq);
        return;
    }
    memcpy(wire, head, nhead);
    memcpy(wire + nhead, what, nwhat);
    memcpy(wire + nhead + nwhat, "\r\n", 2);
    start_dump(c, rq, wire, nhead + nwhat + 2);
    free(wire);
}

/* `stats cachedump ...`: true for it (whatever its arguments). */
static bool is_cachedump(const struct text_req *t)
{
    const char *p = t->arg, *end = p ? p + t->narg : NULL, *w = NULL;
    size_t n = 0;
    return t->cmd == TC_STATS && p && text_next_key(&p, end, &w, &n) && n == 9 &&
           memcmp(w, "cachedump", 9) == 0;
}

/* stats cachedump <class> <limit>: the class's items of every server,
 * at most limit lines in all (0: all); the arguments are judged by the
 * servers' own code, once. */
static void start_cachedump(struct px_client *c, struct px_req *rq, const struct text_req *t)
{
    char line[TEXT_STATS_LINE];
    char *argv[TEXT_STATS_WORDS];
    int argc = text_stats_words(t, line, sizeof(line), argv, TEXT_STATS_WORDS);
    uint32_t cls, limit;
    const char *err = argc < 0 ? "ERROR" : text_cachedump_args(argc, argv, &cls, &limit);
    if (err != NULL) {
        local_line(rq, err);
    } else if (cls == 0) {
        local_line(rq, "END");
    } else {
        char wire[64];
        int nwire = snprintf(wire, sizeof(wire), "stats cachedump %u %u\r\n", cls, limit);
        rq->dump_limit = limit;
        start_dump(c, rq, wire, (size_t)nwire);
    }
}

/* Answers a request the proxy serves itself. */
static void local_request(struct px_req *rq, const struct text_req *t)
{
    switch (t->cmd) {
    case TC_VERSION:
        local_line(rq, "VERSION " PX_VERSION);
        break;
    case TC_VERBOSITY:
        if (!t->noreply)
            local_line(rq, "OK");
        break;
    case TC_STATS:
        local_stats(rq, t);
        break;
    case TC_QUIT:
        rq->close_after = true;
        break;
    case TC_SHUTDOWN:
        local_line(rq, "ERROR: shutdown not enabled");
        break;
    case TC_REFRESH_CERTS: {
        struct tls_server *tls = rq->c->w->px->tls;
        char err[512];
        if (tls == NULL)
            local_line(rq, "Error TLS not enabled");
        else if (!tls_server_refresh(tls, err, sizeof(err)))
            local_line(rq, err);
        else
            local_line(rq, "OK");
        break;
    }
    default:
        local_line(rq, "ERROR");
        break;
    }
}

size_t px_text_request(struct px_client *c, const char *buf, size_t len)
{
    struct text_req t;
    struct px_req *rq;
    bool meta;

    size_t used = px_meta_request(c, buf, len, &meta);      /* px_meta.c */
    if (meta)
        return used;
    switch (text_parse(buf, len, c->w->px->opt.item_max, &t)) {
    case TP_NEED_MORE:
        return 0;
    case TP_CLOSE:
        /* A line that can never be valid: say so, then hang up (as the
         * server does); the rest of the input is dropped. */
        rq = px_req_new(c, PX_PROTO_TEXT, 0);
        if (rq == NULL)
            return SIZE_MAX;
        rq->text_cmd = TC_NONE;
        local_line(rq, "CLIENT_ERROR line too long");
        rq->close_after = true;
        px_req_finish(rq);
        return len;
    case TP_ERROR:
        rq = px_req_new(c, PX_PROTO_TEXT, 1);
        if (rq == NULL)
            return SIZE_MAX;
        rq->text_cmd = TC_NONE;
        if (!t.noreply)
            local_line(rq, t.error);
        c->swallow = t.swallow;
        /* A set refused as too large also drops the key's value, as
         * memcached does (px_meta.c) */
        if (t.cmd == TC_SET && t.swallow > 0 && t.nkey > 0)
            px_meta_drop_key(c, rq, t.key, t.nkey);
        px_req_finish(rq);
        return t.total;
    case TP_OK:
        break;
    }
    bool dump = t.cmd == TC_LRU_CRAWLER || is_cachedump(&t);
    size_t nops = is_retrieval(t.cmd) ? count_keys(&t)
                : t.cmd == TC_FLUSH_ALL || dump || wants_totals(c, &t) ? c->w->map->n : 1;
    rq = px_req_new(c, PX_PROTO_TEXT, (unsigned)nops);
    if (rq == NULL)
        return SIZE_MAX;
    rq->text_cmd = t.cmd;
    rq->noreply = t.noreply;
    if (dump) {
        /* its ops travel on the text connections, launched (or deferred)
         * by px_meta.c; not routed here */
        rq->text_cmd = PX_TEXT_DUMP;
        if (t.cmd == TC_LRU_CRAWLER)
            start_metadump(c, rq, &t);
        else
            start_cachedump(c, rq, &t);
        px_req_finish(rq);
        return t.total;
    }
    if (is_retrieval(t.cmd)) {
        start_retrieval(c, rq, &t);
    } else if (t.cmd == TC_FLUSH_ALL) {
        start_flush(c, rq, &t);
    } else if (wants_totals(c, &t)) {
        if (!px_stats_fan_out(rq))
            out_of_memory(rq);
    } else if (t.cmd == TC_SET || t.cmd == TC_ADD || t.cmd == TC_REPLACE ||
               t.cmd == TC_APPEND || t.cmd == TC_PREPEND || t.cmd == TC_CAS ||
               t.cmd == TC_DELETE || t.cmd == TC_INCR || t.cmd == TC_DECR ||
               t.cmd == TC_TOUCH) {
        if (start_keyed(c, rq, &t) == NULL)
            out_of_memory(rq);
    } else {
        local_request(rq, &t);
    }
    if (!px_meta_defer_classic(c->w, rq))      /* px_meta.c: order behind meta commands */
        for (unsigned i = 0; i < rq->nops; i++)
            px_route_op(c->w, rq->ops[i]);
    px_req_finish(rq);          /* the launch hold */
    return t.total;
}

/* ---- replies ---- */

void px_text_failure(struct px_req *rq, struct evbuffer *out, const char *why)
{
    if (out == NULL || rq->noreply)
        return;
    if (strncmp(why, "SERVER_ERROR ", 13) == 0 || strncmp(why, "CLIENT_ERROR ", 13) == 0)
        evbuffer_add_printf(out, "%s\r\n", why);
    else
        evbuffer_add_printf(out, "SERVER_ERROR %s\r\n", why);
}

/* The ASCII line for a binary error status of this command. */
static const char *status_line(int cmd, uint16_t status)
{
    switch (status) {
    case BIN_STATUS_KEY_ENOENT:
        return cmd == TC_REPLACE ? "NOT_STORED" : "NOT_FOUND";
    case BIN_STATUS_KEY_EEXISTS:
        return cmd == TC_CAS ? "EXISTS" : "NOT_STORED";
    case BIN_STATUS_NOT_STORED:
        return "NOT_STORED";
    case BIN_STATUS_E2BIG:
        return "SERVER_ERROR object too large for cache";
    case BIN_STATUS_ENOMEM:
        return "SERVER_ERROR out of memory storing object";
    case BIN_STATUS_DELTA_BADVAL:
        return "CLIENT_ERROR cannot increment or decrement non-numeric value";
    case BIN_STATUS_EINVAL:
        return "CLIENT_ERROR bad command line format";
    default:
        return NULL;
    }
}

/* A status with no line of its own: the server's text, as SERVER_ERROR. */
static void text_error_body(struct px_req *rq, struct evbuffer *out, const char *body,
                            size_t nbody)
{
    char msg[200];
    size_t n = nbody < sizeof(msg) - 1 ? nbody : sizeof(msg) - 1;

    memcpy(msg, body, n);
    msg[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (msg[i] == '\r' || msg[i] == '\n')
            msg[i] = ' ';
    px_text_failure(rq, out, n ? msg : "server error");
}

static void text_value(struct evbuffer *out, const struct px_op *op, bool with_cas,
                       const char *hdr, const char *body, size_t nbody)
{
    uint8_t extlen = (uint8_t)hdr[BIN_OFF_EXTLEN];
    uint16_t keylen = bin_load16(hdr + BIN_OFF_KEYLEN);
    const char *key = op->wire + BIN_HEADER_LEN + (uint8_t)op->wire[BIN_OFF_EXTLEN];
    size_t nkey = bin_load16(op->wire + BIN_OFF_KEYLEN);
    uint32_t flags = extlen >= 4 && nbody >= 4 ? bin_load32(body) : 0;
    size_t skip = (size_t)extlen + keylen;
    size_t nvalue = nbody > skip ? nbody - skip : 0;
    char line[TEXT_KEY_MAX + 80];
    int n;

    if (with_cas)
        n = snprintf(line, sizeof(line), " %" PRIu32 " %zu %" PRIu64 "\r\n", flags, nvalue,
                     bin_load64(hdr + BIN_OFF_CAS));
    else
        n = snprintf(line, sizeof(line), " %" PRIu32 " %zu\r\n", flags, nvalue);
    evbuffer_add(out, "VALUE ", 6);
    evbuffer_add(out, key, nkey);
    evbuffer_add(out, line, (size_t)n);
    evbuffer_add(out, body + skip, nvalue);
    evbuffer_add(out, "\r\n", 2);
}

void px_text_reply(struct px_op *op, uint16_t status, const char *hdr, const char *body,
                   size_t nbody)
{
    struct px_req *rq = op->req;
    struct px_worker *w = rq->c->w;
    int cmd = rq->text_cmd;

    if (is_retrieval(cmd)) {
        bool touch = cmd == TC_GAT || cmd == TC_GATS;
        if (status == BIN_STATUS_OK) {
            rq->hits++;
            if (!touch)
                px_count(&w->st.get_hits, 1);
            struct evbuffer *out;
            if (rq->nops == 1) {
                out = px_req_sink(rq);
            } else {
                if (op->frag == NULL)
                    op->frag = evbuffer_new();
                out = op->frag;
            }
            if (out)
                text_value(out, op, cmd == TC_GETS || cmd == TC_GATS, hdr, body, nbody);
        } else if (status == BIN_STATUS_KEY_ENOENT) {
            if (!touch)
                px_count(&w->st.get_misses, 1);
        } else if (status != PX_FAIL) {
            /* kept for the end of the reply: values so far, then the error */
            const char *line = status_line(cmd, status);
            px_req_note_error(rq, line ? line : body, line ? strlen(line) : nbody);
            px_count(&w->st.errors, 1);
        }
        return;
    }
    if (cmd == TC_FLUSH_ALL) {
        if (status != BIN_STATUS_OK)
            px_req_note_error(rq, body, nbody);
        return;
    }
    if (cmd == TC_STATS)
        return;                 /* summed at the end (px_text_finish) */
    struct evbuffer *out = px_req_sink(rq);
    if (out == NULL)
        return;
    if (status == PX_FAIL) {
        px_text_failure(rq, out, body);
        return;
    }
    if (status != BIN_STATUS_OK) {
        const char *line = status_line(cmd, status);
        if (line == NULL || status == BIN_STATUS_EINVAL || status == BIN_STATUS_E2BIG ||
            status == BIN_STATUS_ENOMEM)
            px_count(&w->st.errors, 1);
        if (rq->noreply)
            return;
        if (line)
            evbuffer_add_printf(out, "%s\r\n", line);
        else
            text_error_body(rq, out, body, nbody);
        return;
    }
    if (rq->noreply)
        return;
    switch (cmd) {
    case TC_DELETE:
        evbuffer_add(out, "DELETED\r\n", 9);
        break;
    case TC_TOUCH:
        evbuffer_add(out, "TOUCHED\r\n", 9);
        break;
    case TC_INCR: case TC_DECR:
        evbuffer_add_printf(out, "%" PRIu64 "\r\n",
                            nbody >= 8 ? bin_load64(body + nbody - 8) : 0);
        break;
    default:
        evbuffer_add(out, "STORED\r\n", 8);
        break;
    }
}

/* The end of a reply of several ops: the values in key order, then END (or
 * the first error); flush_all's OK. */
void px_text_finish(struct px_req *rq)
{
    int cmd = rq->text_cmd;

    px_meta_kick(rq->c->w);     /* px_meta.c: a launch may wait for this one */

    if (is_retrieval(cmd)) {
        struct evbuffer *out = px_req_sink(rq);
        if (out == NULL)
            return;
        for (unsigned i = 0; rq->nops > 1 && i < rq->nops; i++)
            if (rq->ops[i]->frag)
                evbuffer_add_buffer(out, rq->ops[i]->frag);
        if (rq->err[0])
            px_text_failure(rq, out, rq->err);
        else
            evbuffer_add(out, "END\r\n", 5);
        return;
    }
    if (cmd == TC_FLUSH_ALL && !rq->noreply) {
        struct evbuffer *out = px_req_sink(rq);
        if (out == NULL)
            return;
        if (rq->err[0])
            px_text_failure(rq, out, rq->err);
        else
            evbuffer_add(out, "OK\r\n", 4);
        return;
    }
    if (cmd == PX_TEXT_DUMP && rq->nops > 0) {
        /* every server's lines, in map order (a cachedump's up to its
         * limit), then one END */
        struct evbuffer *out = px_req_sink(rq);
        if (out == NULL)
            return;
        uint64_t left = rq->dump_limit > rq->dump_sent ? rq->dump_limit - rq->dump_sent : 0;
        for (unsigned i = 0; i < rq->nops; i++) {
            struct evbuffer *frag = rq->ops[i]->frag;
            if (frag == NULL)
                continue;
            if (rq->dump_limit == 0) {
                evbuffer_add_buffer(out, frag);
                continue;
            }
            size_t len = evbuffer_get_length(frag), take = 0;
            const char *p = left > 0 ? (const char *)evbuffer_pullup(frag, -1) : NULL;
            while (p != NULL && left > 0 && take < len) {
                const char *nl = memchr(p + take, '\n', len - take);
                take = nl ? (size_t)(nl - p) + 1 : len;
                left--;
            }
            evbuffer_remove_buffer(frag, out, take);
        }
        if (rq->err[0])
            px_text_failure(rq, out, rq->err);
        else
            evbuffer_add(out, "END\r\n", 5);
        return;
    }
    if (cmd == TC_STATS && rq->nops > 0) {
        /* the servers that did not answer in time are left out of the sums */
        struct evbuffer *out = px_req_sink(rq);
        struct px_totals tot;
        if (out == NULL)
            return;
        px_stats_totals(rq->c->w, rq, &tot);
        px_stats_emit(rq->c->w, PX_STATS_GENERAL, &tot, text_stat_line, out);
        evbuffer_add(out, "END\r\n", 5);
        return;
    }
    if (rq->nops == 0 && rq->err[0] && cmd != TC_NONE)
        px_text_failure(rq, px_req_sink(rq), rq->err);
}
