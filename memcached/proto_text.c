/* proto_text.c - memcached's ASCII protocol.
 *
 * Two halves: text_parse() frames one request (a line, plus a data block for
 * storage commands) and validates it into a struct text_req without side
 * effects, so it can be tested on any byte sequence; the handlers below turn
 * a parsed request into engine calls and reply lines.  Replies and error
 * strings are memcached's, so existing clients and tests see no difference.
 *
 * In a cluster (the server holds a slot map) two things are added:
 * `config get cluster` answers the map, and a keyed request whose slot
 * another process serves gets SERVER_ERROR MOVED without reaching the
 * engine (a multi-get: for the first such key, with no values).  Without a
 * map, `config` stays the unknown command it is in memcached (ERROR). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arith.h"
#include "cluster.h"
#include "linktls.h"
#include "mcnum.h"
#include "migrate.h"
#include "printable.h"
#include "proto_meta.h"
#include "proto_meta_run.h"
#include "proto_text.h"
#include "server.h"
#include "slabclass.h"
#include "urikey.h"
#include "watch.h"

/* ---- parsing ---- */

struct tokens {
    const char *s[TEXT_MAX_TOKENS];
    size_t n[TEXT_MAX_TOKENS];
    int count;
    bool more;          /* the line has more tokens than were stored */
    const char *rest;   /* where the token after the last stored one starts */
};

static bool is_space(char ch)
{
    return ch == ' ';
}

/* Split [p, end) on spaces, ignoring empty tokens, keeping at most max. */
static void tokenize(const char *p, const char *end, int max, struct tokens *t)
{
    t->count = 0;
    t->more = false;
    t->rest = end;
    while (p < end) {
        while (p < end && is_space(*p))
            p++;
        if (p == end)
            break;
        if (t->count == max) {
            t->more = true;
            t->rest = p;
            return;
        }
        const char *start = p;
        while (p < end && !is_space(*p))
            p++;
        t->s[t->count] = start;
        t->n[t->count] = (size_t)(p - start);
        t->count++;
    }
}

static bool tok_is(const struct tokens *t, int i, const char *word)
{
    size_t n = strlen(word);
    return i < t->count && t->n[i] == n && memcmp(t->s[i], word, n) == 0;
}

/* Numbers are read as memcached reads them (mcnum.h): client flags with
 * strtoul and kept as 32 bits, exptimes and lengths with strtol and kept
 * as a 32-bit int (so 4294967296 is 0 and 2147483648 is negative), cas
 * values and deltas with strtoull. */
static bool parse_u32(const char *s, size_t n, uint32_t *out)
{
    uint64_t v;
    if (!mcnum_u64(s, n, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_i32(const char *s, size_t n, int64_t *out)
{
    int64_t v;
    if (!mcnum_i64(s, n, &v))
        return false;
    *out = (int32_t)(uint32_t)(uint64_t)v;
    return true;
}

static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    return mcnum_u64(s, n, out);
}

static enum text_parse_result parse_error(struct text_req *req, const char *msg)
{
    req->error = msg;
    return TP_ERROR;
}

static const char *const bad_format = "CLIENT_ERROR bad command line format";

struct command_name {
    const char *word;
    enum text_cmd cmd;
};

static const struct command_name command_names[] = {
    { "get", TC_GET }, { "gets", TC_GETS }, { "gat", TC_GAT }, { "gats", TC_GATS },
    { "set", TC_SET }, { "add", TC_ADD }, { "replace", TC_REPLACE },
    { "append", TC_APPEND }, { "prepend", TC_PREPEND }, { "cas", TC_CAS },
    { "delete", TC_DELETE }, { "incr", TC_INCR }, { "decr", TC_DECR },
    { "touch", TC_TOUCH }, { "flush_all", TC_FLUSH_ALL }, { "version", TC_VERSION },
    { "verbosity", TC_VERBOSITY }, { "stats", TC_STATS }, { "quit", TC_QUIT },
    { "shutdown", TC_SHUTDOWN }, { "cocytus", TC_ADMIN },
    { "cache_memlimit", TC_CACHE_MEMLIMIT }, { "watch", TC_WATCH },
    { "lru_crawler", TC_LRU_CRAWLER }, { "refresh_certs", TC_REFRESH_CERTS },
};

static bool word_is(const char *s, size_t n, const char *w, size_t wn)
{
    return n == wn && memcmp(s, w, n) == 0;
}

/* The hot commands first: this runs for every request. */
static enum text_cmd lookup_command(const char *s, size_t n)
{
    if (word_is(s, n, "get", 3))
        return TC_GET;
    if (word_is(s, n, "set", 3))
        return TC_SET;
    for (size_t i = 0; i < sizeof(command_names) / sizeof(command_names[0]); i++) {
        const char *w = command_names[i].word;
        if (w[0] == s[0] && word_is(s, n, w, strlen(w)))
            return command_names[i].cmd;
    }
    return TC_NONE;
}

static bool is_retrieval(enum text_cmd cmd)
{
    return cmd == TC_GET || cmd == TC_GETS || cmd == TC_GAT || cmd == TC_GATS;
}

/* A line too long to be anything but a multi-get may still be one: memcached
 * keeps reading a line that starts with "get " or "gets " (after at most 100
 * spaces). */
static bool starts_with_retrieval(const char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && buf[i] == ' ')
        i++;
    if (i > 100)
        return false;
    return (len - i >= 4 && memcmp(buf + i, "get ", 4) == 0) ||
           (len - i >= 5 && memcmp(buf + i, "gets ", 5) == 0);
}

bool text_next_key(const char **p, const char *end, const char **key, size_t *nkey)
{
    const char *s = *p;
    while (s < end && is_space(*s))
        s++;
    if (s == end)
        return false;
    const char *start = s;
    while (s < end && !is_space(*s))
        s++;
    *key = start;
    *nkey = (size_t)(s - start);
    *p = s;
    return true;
}

static enum text_parse_result parse_retrieval(struct text_req *req, const struct tokens *t,
                                              const char *end)
{
    int first_key = 1;
    if (req->cmd == TC_GAT || req->cmd == TC_GATS) {
        if (t->count < 2)
            return parse_error(req, "ERROR");
        if (!parse_i32(t->s[1], t->n[1], &req->exptime))
            return parse_error(req, "CLIENT_ERROR invalid exptime argument");
        first_key = 2;
        if (t->count == 2) {            /* memcached answers an empty END */
            req->keys = end;
            req->nkeys_len = 0;
            return TP_OK;
        }
    }
    if (t->count <= first_key)
        return parse_error(req, "ERROR");
    req->keys = t->s[first_key];
    req->nkeys_len = (size_t)(end - req->keys);
    const char *p = req->keys, *key;
    size_t nkey;
    while (text_next_key(&p, end, &key, &nkey)) {
        if (nkey > TEXT_KEY_MAX)
            return parse_error(req, bad_format);
    }
    req->key = t->s[first_key];
    req->nkey = t->n[first_key];
    return TP_OK;
}

static enum text_parse_result parse_storage(struct text_req *req, const struct tokens *t,
                                            const char *buf, size_t len, size_t max_item)
{
    int want = req->cmd == TC_CAS ? 6 : 5;
    if (t->more || t->count < want || t->count > want + 1)
        return parse_error(req, "ERROR");
    /* memcached's noreply: the last token, whatever the count (an error
     * of the line is then not answered either). */
    req->noreply = tok_is(t, t->count - 1, "noreply");
    req->key = t->s[1];
    req->nkey = t->n[1];
    bool ok = parse_u32(t->s[2], t->n[2], &req->flags) &&
              parse_i32(t->s[3], t->n[3], &req->exptime) &&
              parse_i32(t->s[4], t->n[4], &req->vlen) && req->vlen >= 0 &&
              req->vlen <= INT32_MAX - 2;
    if (ok && req->cmd == TC_CAS)
        ok = parse_u64(t->s[5], t->n[5], &req->cas);
    if (!ok)
        return parse_error(req, bad_format);
    if (req->nkey > TEXT_KEY_MAX)   /* memcached then reads the data block as a command */
        return parse_error(req, bad_format);
    if ((size_t)req->vlen > max_item) {
        req->swallow = (size_t)req->vlen + 2;
        return parse_error(req, "SERVER_ERROR object too large for cache");
    }
    size_t line = req->total;
    size_t need = line + (size_t)req->vlen + 2;
    if (len < need)
        return TP_NEED_MORE;
    req->data = buf + line;
    req->total = need;
    if (buf[need - 2] != '\r' || buf[need - 1] != '\n')
        return parse_error(req, TEXT_BAD_DATA_CHUNK);
    return TP_OK;
}

static enum text_parse_result parse_delete(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count < 2 || t->count > 4)
        return parse_error(req, "ERROR");
    req->key = t->s[1];
    req->nkey = t->n[1];
    if (t->count > 2) {
        /* Only the legacy "0" hold time and noreply are allowed. */
        bool zero = tok_is(t, 2, "0");
        req->noreply = tok_is(t, t->count - 1, "noreply");
        bool ok = (t->count == 3 && (zero || req->noreply)) ||
                  (t->count == 4 && zero && req->noreply);
        if (!ok)
            return parse_error(req, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
    }
    if (req->nkey > TEXT_KEY_MAX)
        return parse_error(req, bad_format);
    return TP_OK;
}

static enum text_parse_result parse_arith(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count < 3 || t->count > 4)
        return parse_error(req, "ERROR");
    req->noreply = tok_is(t, t->count - 1, "noreply");
    req->key = t->s[1];
    req->nkey = t->n[1];
    if (req->nkey > TEXT_KEY_MAX)
        return parse_error(req, bad_format);
    if (!parse_u64(t->s[2], t->n[2], &req->delta))
        return parse_error(req, "CLIENT_ERROR invalid numeric delta argument");
    return TP_OK;
}

static enum text_parse_result parse_touch(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count < 3 || t->count > 4)
        return parse_error(req, "ERROR");
    req->noreply = tok_is(t, t->count - 1, "noreply");
    req->key = t->s[1];
    req->nkey = t->n[1];
    if (req->nkey > TEXT_KEY_MAX)
        return parse_error(req, bad_format);
    if (!parse_i32(t->s[2], t->n[2], &req->exptime))
        return parse_error(req, "CLIENT_ERROR invalid exptime argument");
    return TP_OK;
}

/* flush_all [delay] [noreply]: a token after the delay is ignored; the
 * delay is read even when it is "noreply" followed by something else.
 * (The server refuses flush_all under -F before it looks at the delay.) */
static enum text_parse_result parse_flush_all(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count > 3)
        return parse_error(req, "ERROR");
    req->noreply = tok_is(t, t->count - 1, "noreply");
    if (t->count > (req->noreply ? 2 : 1) && !parse_i32(t->s[1], t->n[1], &req->exptime))
        return parse_error(req, "CLIENT_ERROR invalid exptime argument");
    return TP_OK;
}

static enum text_parse_result parse_verbosity(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count < 2 || t->count > 3)
        return parse_error(req, "ERROR");
    req->noreply = tok_is(t, t->count - 1, "noreply");
    if (!parse_u64(t->s[1], t->n[1], &req->delta))
        return parse_error(req, bad_format);
    return TP_OK;
}

/* cache_memlimit <megabytes> [noreply]: one token after the number is
 * ignored; a number strtoul does not take is an unknown command. */
static enum text_parse_result parse_cache_memlimit(struct text_req *req, const struct tokens *t)
{
    if (t->more || t->count < 2 || t->count > 3)
        return parse_error(req, "ERROR");
    req->noreply = tok_is(t, t->count - 1, "noreply");
    if (!parse_u64(t->s[1], t->n[1], &req->delta))
        return parse_error(req, "ERROR");
    return TP_OK;
}

static enum text_parse_result parse_line(struct text_req *req, const char *buf, size_t len,
                                         const char *end, size_t max_item)
{
    struct tokens t;
    tokenize(buf, end, TEXT_MAX_TOKENS, &t);
    if (t.count == 0)
        return parse_error(req, "ERROR");
    req->cmd = lookup_command(t.s[0], t.n[0]);
    switch (req->cmd) {
    case TC_GET: case TC_GETS: case TC_GAT: case TC_GATS:
        return parse_retrieval(req, &t, end);
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
        return parse_storage(req, &t, buf, len, max_item);
    case TC_DELETE:
        return parse_delete(req, &t);
    case TC_INCR: case TC_DECR:
        return parse_arith(req, &t);
    case TC_TOUCH:
        return parse_touch(req, &t);
    case TC_FLUSH_ALL:
        return parse_flush_all(req, &t);
    case TC_VERBOSITY:
        return parse_verbosity(req, &t);
    case TC_CACHE_MEMLIMIT:
        return parse_cache_memlimit(req, &t);
    case TC_WATCH:
    case TC_LRU_CRAWLER:
        if (t.count > 1) {
            req->arg = t.s[1];
            req->narg = (size_t)(end - t.s[1]);
        }
        return TP_OK;
    case TC_VERSION:
        /* memcached ignores anything after "version"; memcapable relies on it. */
        return TP_OK;
    case TC_QUIT:
        return TP_OK;           /* memcached ignores anything after "quit" */
    case TC_REFRESH_CERTS:
        return TP_OK;           /* ...and after "refresh_certs" */
    case TC_SHUTDOWN:
        return t.count <= 2 ? TP_OK : parse_error(req, "ERROR");
    case TC_ADMIN:
        if (t.count < 2)
            return parse_error(req, "ERROR");
        /* The words after the command are kept as for stats. */
        __attribute__((fallthrough));
    case TC_STATS:
        if (t.count > 1) {
            req->arg = t.s[1];
            req->narg = (size_t)(end - t.s[1]);
            while (req->narg > 0 && req->arg[req->narg - 1] == ' ')
                req->narg--;
        }
        return TP_OK;
    case TC_NONE:
        break;
    }
    return parse_error(req, "ERROR");
}

enum text_parse_result text_parse(const char *buf, size_t len, size_t max_item,
                                  struct text_req *req)
{
    memset(req, 0, sizeof(*req));
    const char *nl = memchr(buf, '\n', len);
    if (!nl) {
        if (len > TEXT_LINE_MAX &&
            (len > TEXT_GET_LINE_MAX || !starts_with_retrieval(buf, len)))
            return TP_CLOSE;
        return TP_NEED_MORE;
    }
    size_t line = (size_t)(nl - buf) + 1;
    /* memcached reads 16 KB at a time: a longer line is never whole in its
     * buffer, and it closes as for any line over 2048 bytes without a
     * newline, unless it is a get or gets. */
    if (line > TEXT_GET_LINE_MAX + 2 ||
        (line > TEXT_READ_CHUNK && !starts_with_retrieval(buf, len)))
        return TP_CLOSE;
    const char *end = nl;
    if (end > buf && end[-1] == '\r')
        end--;
    /* memcached reads the line as a C string: a NUL ends it. */
    const char *nul = memchr(buf, '\0', (size_t)(end - buf));
    if (nul)
        end = nul;
    req->total = line;
    return parse_line(req, buf, len, end, max_item);
}

/* ---- replies ---- */

static const char *const too_large = "SERVER_ERROR object too large for cache\r\n";

/* Reply lines shared by every command for the engine's failure outcomes. */
static void reply_failure(struct resp *r, const struct eng_result *res)
{
    switch (res->status) {
    case ENG_TOO_LARGE:
        resp_str(r, too_large);
        break;
    case ENG_NO_MEMORY:
        resp_str(r, "SERVER_ERROR out of memory storing object\r\n");
        break;
    case ENG_NON_NUMERIC:
        resp_str(r, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
        break;
    case ENG_MOVED:
        resp_printf(r, "SERVER_ERROR MOVED %s\r\n", res->msg ? res->msg : "");
        break;
    case ENG_FAILED:
        resp_printf(r, "SERVER_ERROR %s\r\n", res->msg ? res->msg : "failure");
        break;
    case ENG_NOT_FOUND:
        resp_str(r, "NOT_FOUND\r\n");
        break;
    case ENG_EXISTS:
        resp_str(r, "EXISTS\r\n");
        break;
    case ENG_NOT_STORED:
        resp_str(r, "NOT_STORED\r\n");
        break;
    default:
        resp_str(r, "SERVER_ERROR unexpected engine result\r\n");
        break;
    }
}

/* A mutation's reply: its success line, or the shared failure lines. */
static void reply_outcome(struct resp *r, const struct eng_result *res, const char *ok)
{
    if (r->noreply)
        return;
    if (res->status == ENG_SUCCESS)
        resp_str(r, ok);
    else
        reply_failure(r, res);
}

static void store_complete(struct resp *r, const struct eng_result *res)
{
    if (res->status == ENG_TOO_LARGE)
        conn_server(r->c)->stats.store_too_large++;
    else if (res->status == ENG_NO_MEMORY)
        conn_server(r->c)->stats.store_no_memory++;
    reply_outcome(r, res, "STORED\r\n");
}

static void delete_complete(struct resp *r, const struct eng_result *res)
{
    reply_outcome(r, res, "DELETED\r\n");
}

static void touch_complete(struct resp *r, const struct eng_result *res)
{
    reply_outcome(r, res, "TOUCHED\r\n");
}

static void flush_complete(struct resp *r, const struct eng_result *res)
{
    reply_outcome(r, res, "OK\r\n");
}

static void arith_complete(struct resp *r, const struct eng_result *res)
{
    if (r->noreply)
        return;
    if (res->status == ENG_SUCCESS)
        resp_printf(r, "%llu\r\n", (unsigned long long)res->value);
    else
        reply_failure(r, res);
}

/* "VALUE <key> <flags> <bytes>[ <cas>]\r\n" then the value and its CRLF,
 * sent from engine memory. */
static void reply_value(struct resp *r, const struct eng_value *v, bool with_cas)
{
    char line[TEXT_KEY_MAX + 80];
    size_t n = 0;
    memcpy(line, "VALUE ", 6);
    n = 6;
    memcpy(line + n, v->key, v->nkey);
    n += v->nkey;
    line[n++] = ' ';
    n += arith_format_u64(line + n, v->flags);
    line[n++] = ' ';
    n += arith_format_u64(line + n, v->nbytes);
    if (with_cas) {
        line[n++] = ' ';
        n += arith_format_u64(line + n, v->cas);
    }
    line[n++] = '\r';
    line[n++] = '\n';
    resp_add(r, line, n);
    if (v->bare) {
        resp_add_value(r, v, v->nbytes);
        resp_add(r, "\r\n", 2);
    } else {
        resp_add_value(r, v, (size_t)v->nbytes + 2);
    }
}

/* ---- handlers ---- */

static void reply_line(struct conn *c, const char *line, bool noreply);

static void handle_get(struct conn *c, const struct text_req *req)
{
    struct resp *r = conn_resp_new(c);
    bool with_cas = req->cmd == TC_GETS;
    const char *p = req->keys, *end = req->keys + req->nkeys_len, *key;
    size_t nkey;
    while (text_next_key(&p, end, &key, &nkey)) {
        struct eng_value v;
        struct eng_result res;
        eng_status st = conn_get(c, key, nkey, &v, &res);
        prefix_stats_get(conn_server(c), key, nkey, st == ENG_SUCCESS);
        if (st == ENG_SUCCESS) {
            reply_value(r, &v, with_cas);
        } else if (st != ENG_NOT_FOUND) {
            reply_failure(r, &res);
            resp_done(r);
            return;
        }
    }
    resp_add(r, "END\r\n", 5);
    resp_done(r);
}

/* The value slot of a gat completes once every touch it issued has. */
static void quiet_complete(struct resp *r, const struct eng_result *res)
{
    (void)r;
    (void)res;
}

/* A retrieval whose key list holds a key too long: memcached has served
 * the keys before it when it meets that one (and then drops the replies):
 * a gat has touched them, a get fetched them (difftest seed 77 case 858). */
static void serve_keys_before_bad(struct conn *c, const struct text_req *req)
{
    const char *p = req->keys, *end = req->keys + req->nkeys_len, *key;
    size_t nkey;
    bool gat = req->cmd == TC_GAT || req->cmd == TC_GATS;
    while (req->keys && text_next_key(&p, end, &key, &nkey) && nkey <= TEXT_KEY_MAX) {
        struct eng_value v;
        struct eng_result res;
        /* a gat counts as a touch (its touch below, or the miss here) */
        eng_status st = gat ? conn_lookup(c, key, nkey, &v, &res)
                            : conn_get(c, key, nkey, &v, &res);
        if (gat && st == ENG_NOT_FOUND) {
            conn_server(c)->stats.cmd_touch++;
            conn_server(c)->stats.touch_misses++;
        }
        if (st != ENG_SUCCESS)
            continue;
        if (v.handle)
            conn_engine(c)->ops->release(conn_engine(c), v.handle);
        if (!gat)
            continue;
        struct eng_mutation m = { .op = ENG_OP_TOUCH, .key = key, .nkey = nkey,
                                  .exptime = req->exptime };
        struct resp *t = conn_resp_new(c);
        t->noreply = true;
        conn_mutate(c, t, &m, quiet_complete);
    }
}

static void gat_touch_complete(struct resp *t, const struct eng_result *res)
{
    struct resp *vr = (struct resp *)(uintptr_t)t->arg;
    if (--vr->arg == 0)
        resp_done(vr);
}

/* gat/gats: read each value, then touch it; the reply leaves once the
 * touches are complete, so it never promises an exptime not yet applied. */
static void handle_gat(struct conn *c, const struct text_req *req)
{
    struct resp *r = conn_resp_new(c);
    bool with_cas = req->cmd == TC_GATS;
    r->arg = 1;   /* guard until the loop is over */
    const char *p = req->keys, *end = req->keys + req->nkeys_len, *key;
    size_t nkey;
    bool failed = false;
    while (!failed && text_next_key(&p, end, &key, &nkey)) {
        struct eng_value v;
        struct eng_result res;
        /* counted as a touch (by the touch, or below), not a get: memcached's */
        eng_status st = conn_lookup(c, key, nkey, &v, &res);
        prefix_stats_get(conn_server(c), key, nkey, st == ENG_SUCCESS);
        if (st == ENG_NOT_FOUND) {
            /* memcached counts a gat miss as a touch miss. */
            conn_server(c)->stats.cmd_touch++;
            conn_server(c)->stats.touch_misses++;
            continue;
        }
        if (st != ENG_SUCCESS) {
            reply_failure(r, &res);
            failed = true;
            break;
        }
        reply_value(r, &v, with_cas);
        struct eng_mutation m = { .op = ENG_OP_TOUCH, .key = key, .nkey = nkey,
                                  .exptime = req->exptime };
        struct resp *t = conn_resp_new(c);
        t->noreply = true;
        t->arg = (uint64_t)(uintptr_t)r;
        r->arg++;
        conn_mutate(c, t, &m, gat_touch_complete);
    }
    if (!failed)
        resp_add(r, "END\r\n", 5);
    if (--r->arg == 0)
        resp_done(r);
}

/* A set refused as too large also drops the key's current value, as
 * memcached does (the other stores leave it); noreply hides the error line
 * here, as in memcached (difftest seed 20261124 case 4523). */
static void store_too_large(struct conn *c, const struct text_req *req)
{
    conn_server(c)->stats.store_too_large++;
    if (req->cmd == TC_SET)
        meta_run_drop_key(c, req->key, req->nkey);
    reply_line(c, "SERVER_ERROR object too large for cache", req->noreply);
}

static void handle_store(struct conn *c, const struct text_req *req)
{
    static const eng_op ops[] = {
        [TC_SET] = ENG_OP_SET, [TC_ADD] = ENG_OP_ADD, [TC_REPLACE] = ENG_OP_REPLACE,
        [TC_APPEND] = ENG_OP_APPEND, [TC_PREPEND] = ENG_OP_PREPEND, [TC_CAS] = ENG_OP_CAS,
    };
    struct server *s = conn_server(c);
    prefix_stats_set(s, req->key, req->nkey);
    if (engine_too_large(s->settings.item_size_max, s->settings.cas_enabled, req->nkey,
                         (size_t)req->vlen, req->flags)) {
        store_too_large(c, req);
        return;
    }
    struct eng_mutation m = {
        .op = ops[req->cmd], .key = req->key, .nkey = req->nkey,
        .data = req->data, .nbytes = (size_t)req->vlen,
        .flags = req->flags, .exptime = req->exptime, .cas = req->cas,
    };
    struct resp *r = conn_resp_new(c);
    r->noreply = req->noreply;
    if (conn_is_import(c))
        s->stats.import_keys++;
    conn_mutate(c, r, &m, store_complete);
}

static void handle_delete(struct conn *c, const struct text_req *req)
{
    prefix_stats_delete(conn_server(c), req->key, req->nkey);
    struct eng_mutation m = { .op = ENG_OP_DELETE, .key = req->key, .nkey = req->nkey };
    struct resp *r = conn_resp_new(c);
    r->noreply = req->noreply;
    if (conn_is_import(c))
        conn_server(c)->stats.import_keys++;
    conn_mutate(c, r, &m, delete_complete);
}

static void handle_arith(struct conn *c, const struct text_req *req)
{
    conn_write_final(c);
    struct eng_mutation m = {
        .op = req->cmd == TC_INCR ? ENG_OP_INCR : ENG_OP_DECR,
        .key = req->key, .nkey = req->nkey, .delta = req->delta,
    };
    struct resp *r = conn_resp_new(c);
    r->noreply = req->noreply;
    conn_mutate(c, r, &m, arith_complete);
}

static void handle_touch(struct conn *c, const struct text_req *req)
{
    struct eng_mutation m = { .op = ENG_OP_TOUCH, .key = req->key, .nkey = req->nkey,
                              .exptime = req->exptime };
    struct resp *r = conn_resp_new(c);
    r->noreply = req->noreply;
    conn_mutate(c, r, &m, touch_complete);
}

static void handle_flush_all(struct conn *c, const struct text_req *req)
{
    if (!conn_server(c)->settings.flush_enabled) {
        conn_server(c)->stats.cmd_flush++;     /* memcached counts a refused one */
        reply_line(c, "CLIENT_ERROR flush_all not allowed", req->noreply);
        return;
    }
    struct eng_mutation m = { .op = ENG_OP_FLUSH, .exptime = req->exptime };
    struct resp *r = conn_resp_new(c);
    r->noreply = req->noreply;
    conn_mutate(c, r, &m, flush_complete);
}

static void stat_line(void *ctx, const char *name, const char *fmt, ...)
{
    struct resp *r = ctx;
    char value[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    resp_printf(r, "STAT %s %s\r\n", name, value);
}

/* For stats groups that are commands to the engine, which say nothing. */
static void stat_ignored(void *ctx, const char *name, const char *fmt, ...)
{
    (void)ctx;
    (void)name;
    (void)fmt;
}

static void resp_write(void *ctx, const void *p, size_t n)
{
    resp_add(ctx, p, n);
}

/* stats cachedump <class> <limit>: the class's items, newest first. */
struct cachedump {
    struct resp *r;
    unsigned cls;
    unsigned long long limit;
    unsigned long long n;
    size_t bytes;
    size_t item_size_max;
    bool cas_enabled;
};

#define CACHEDUMP_MAX_BYTES (2u << 20)   /* memcached's cap on the reply */

static bool cachedump_item(void *ctx, const struct eng_value *v)
{
    struct cachedump *d = ctx;
    size_t size = mc_item_size(v->nkey, v->nbytes, v->flags, d->cas_enabled);
    if (mc_slab_class(size, d->item_size_max) != d->cls)
        return true;
    char line[TEXT_KEY_MAX + 64];
    int n = snprintf(line, sizeof(line), " [%u b; %lld s]\r\n", (unsigned)v->nbytes,
                     (long long)v->exptime);
    if (d->bytes + 5 + v->nkey + (size_t)n > CACHEDUMP_MAX_BYTES)
        return false;
    resp_add(d->r, "ITEM ", 5);
    resp_add(d->r, v->key, v->nkey);
    resp_add(d->r, line, (size_t)n);
    d->bytes += 5 + v->nkey + (size_t)n;
    return d->limit == 0 || ++d->n < d->limit;
}

const char *text_cachedump_args(int argc, char **argv, uint32_t *cls, uint32_t *limit)
{
    uint64_t c, l;
    if (argc < 3)
        return "CLIENT_ERROR bad command line";
    if (!parse_u64(argv[1], strlen(argv[1]), &c) || !parse_u64(argv[2], strlen(argv[2]), &l))
        return "CLIENT_ERROR bad command line format";
    if ((uint32_t)c >= 64)
        return "CLIENT_ERROR Illegal slab id";
    *cls = (uint32_t)c;
    *limit = (uint32_t)l;
    return NULL;
}

static void stats_cachedump(struct conn *c, struct resp *r, int argc, char **argv)
{
    struct server *s = conn_server(c);
    uint32_t cls, limit;
    if (!s->settings.dump_enabled) {               /* -X, checked first as memcached */
        resp_str(r, "CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    }
    const char *err = text_cachedump_args(argc, argv, &cls, &limit);
    if (err != NULL) {
        resp_str(r, err);
        resp_str(r, "\r\n");
        return;
    }
    struct engine *e = conn_engine(c);
    struct cachedump d = { r, cls, limit, 0, 0, s->settings.item_size_max,
                           s->settings.cas_enabled };
    if (d.cls > 0 && e->ops->visit_recent)
        e->ops->visit_recent(e, cachedump_item, &d);
    resp_str(r, "END\r\n");
}

int text_stats_words(const struct text_req *req, char *line, size_t cap, char **argv, int max)
{
    int argc = 0;
    if (req->arg == NULL)
        return 0;
    if (req->narg >= cap)
        return -1;
    memcpy(line, req->arg, req->narg);
    line[req->narg] = '\0';
    char *save = NULL;
    for (char *w = strtok_r(line, " ", &save); w && argc < max; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    return argc;
}

/* stats [group [args]]: memcached's groups and answers. */
static void handle_stats(struct conn *c, const struct text_req *req)
{
    struct server *s = conn_server(c);
    struct resp *r = conn_resp_new(c);
    char line[TEXT_STATS_LINE];
    char *argv[TEXT_STATS_WORDS];
    int argc = text_stats_words(req, line, sizeof(line), argv, TEXT_STATS_WORDS);
    if (argc < 0) {
        resp_str(r, "ERROR\r\n");
        resp_done(r);
        return;
    }
    const char *group = argc > 0 ? argv[0] : "";
    if (strcmp(group, "reset") == 0) {
        server_stats_reset(s);
        resp_str(r, "RESET\r\n");
    } else if (strcmp(group, "detail") == 0) {
        const char *what = argc > 1 ? argv[1] : "";
        if (strcmp(what, "on") == 0 || strcmp(what, "off") == 0) {
            s->settings.detail_enabled = what[1] == 'n';
            resp_str(r, "OK\r\n");
        } else if (strcmp(what, "dump") == 0) {
            prefix_stats_dump(s, resp_write, r);
        } else {
            resp_str(r, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
        }
    } else if (strcmp(group, "cachedump") == 0) {
        stats_cachedump(c, r, argc, argv);
    } else if (strcmp(group, "conns") == 0) {
        conn_stats_conns(c, r);
    } else if (strcmp(group, "sizes_enable") == 0 && !s->settings.cas_enabled) {
        /* memcached's size histogram needs cas (difftest seed 1066 case 661) */
        resp_str(r, "STAT sizes_status error\r\nSTAT sizes_error cas_support_disabled\r\n");
    } else if (strcmp(group, "sizes_enable") == 0 || strcmp(group, "sizes_disable") == 0) {
        bool on = group[6] == 'e';
        if (on && !s->settings.sizes_enabled)
            server_stats(s, "sizes_enable", stat_ignored, NULL);   /* counting starts now */
        s->settings.sizes_enabled = on;
        resp_str(r, s->settings.sizes_enabled ? "STAT sizes_status enabled\r\n"
                                              : "STAT sizes_status disabled\r\n");
    } else if (strcmp(group, "sizes") == 0 && !s->settings.sizes_enabled) {
        resp_str(r, "STAT sizes_status disabled\r\nEND\r\n");
    } else if (strcmp(group, "extstore") == 0) {
        resp_str(r, "END\r\n");
    } else if (server_stats(s, group, stat_line, r)) {
        resp_str(r, "END\r\n");
    } else {
        /* Drop anything a failed group emitted before saying so. */
        r->buflen = r->scratch;
        r->nsegs = 0;
        resp_str(r, "ERROR\r\n");
    }
    resp_done(r);
}

/* lru_crawler metadump all|hash|<class>[,<class>...]: one line per live
 * item, as memcached's crawler writes them (memcached-tool's keys and dump
 * read it).  Where memcached's crawler walks the LRUs in a thread of its
 * own, this walks the hash table a piece per event-loop pass (engine
 * walk, conn_stream): the loop keeps serving, and only about one piece of
 * the listing is in memory at a time, however large the cache.  An item
 * present for the whole dump is listed once; one stored or deleted
 * meanwhile may or may not be.  A process that stops serving keys in the
 * middle ends the listing with ERROR instead of END, as it refuses one at
 * the start.  The crawler's other subcommands are not served (ERROR). */
#define METADUMP_PIECE 2048     /* hash buckets + items per piece */

struct metadump {
    struct conn_stream st;      /* first: the stream is the dump */
    struct resp *r;             /* the piece being written */
    struct eng_cursor cursor;
    uint64_t classes;           /* bit c: class c wanted */
    time_t now;
    size_t item_size_max;
    bool cas_enabled;
};

static void metadump_item(void *ctx, const struct eng_value *v)
{
    struct metadump *d = ctx;
    size_t size = mc_item_size(v->nkey, v->nbytes, v->flags, d->cas_enabled);
    unsigned cls = mc_slab_class(size, d->item_size_max);
    if (cls >= 64 || !(d->classes & ((uint64_t)1 << cls)))
        return;
    char enc[3 * 250 + 4] = "key=";
    resp_add(d->r, enc, 4 + uri_key_encode(enc + 4, v->key, v->nkey < 250 ? v->nkey : 250));
    char line[160];
    int n = snprintf(line, sizeof(line), " exp=%lld la=%lld cas=%llu fetch=%s cls=%u size=%zu\n",
                     v->exptime == 0 ? -1LL : (long long)v->exptime,
                     (long long)d->now - (long long)v->idle, (unsigned long long)v->cas,
                     v->fetched ? "yes" : "no", cls, size);
    resp_add(d->r, line, (size_t)n);
}

/* One piece of the listing into r; true after the last (END or ERROR). */
static bool metadump_step(struct conn_stream *st, struct resp *r)
{
    struct metadump *d = (struct metadump *)st;
    struct engine *e = conn_engine(r->c);
    d->r = r;
    d->now = clock_wall(&conn_server(r->c)->clock);
    enum eng_walk how = e != NULL && e->ops->walk != NULL
                            ? e->ops->walk(e, &d->cursor, METADUMP_PIECE, metadump_item, d)
                            : ENG_WALK_REFUSED;
    switch (how) {
    case ENG_WALK_MORE:
        return false;
    case ENG_WALK_DONE:
        resp_str(r, "END\r\n");
        return true;
    case ENG_WALK_REFUSED:
    default:
        /* It serves no keys now: refused as at the start (a client
         * through cocytus-proxy asks whoever serves them now). */
        resp_str(r, "ERROR\r\n");
        return true;
    }
}

static void metadump_done(struct conn_stream *st)
{
    free(st);
}

const char *text_metadump_arg(const struct text_req *req, size_t *n)
{
    const char *p = req->arg, *end = p ? p + req->narg : NULL, *sub = NULL, *what = NULL;
    size_t nsub = 0;
    *n = 0;
    if (p && text_next_key(&p, end, &sub, &nsub))
        text_next_key(&p, end, &what, n);
    if (nsub != 8 || memcmp(sub, "metadump", 8) != 0 || *n == 0)
        return NULL;
    return what;
}

uint64_t text_metadump_classes(const char *arg, size_t n)
{
    if ((n == 3 && memcmp(arg, "all", 3) == 0) || (n == 4 && memcmp(arg, "hash", 4) == 0))
        return ~(uint64_t)1;
    uint64_t mask = 0;
    size_t i = 0;
    while (i < n) {
        unsigned id = 0;
        size_t start = i;
        while (i < n && arg[i] >= '0' && arg[i] <= '9' && i - start < 3)
            id = id * 10 + (unsigned)(arg[i++] - '0');
        if (i == start || id == 0 || id >= 64 || (i < n && arg[i] != ','))
            return 0;
        mask |= (uint64_t)1 << id;
        if (i < n)
            i++;
    }
    return mask;
}

static void handle_lru_crawler(struct conn *c, const struct text_req *req)
{
    struct server *s = conn_server(c);
    struct engine *e = conn_engine(c);
    size_t nwhat;
    const char *what = text_metadump_arg(req, &nwhat);
    if (what == NULL || !e->ops->walk) {
        reply_line(c, "ERROR", false);
        return;
    }
    if (!s->settings.dump_enabled) {
        reply_line(c, "ERROR metadump not allowed", false);
        return;
    }
    if (conn_has_unflushed(c)) {
        reply_line(c, "ERROR cannot pipeline other commands before metadump", false);
        return;
    }
    uint64_t classes = text_metadump_classes(what, nwhat);
    if (classes == 0) {
        reply_line(c, "BADCLASS invalid class id", false);
        return;
    }
    struct metadump *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        reply_line(c, "SERVER_ERROR out of memory", false);
        return;
    }
    d->st.step = metadump_step;
    d->st.done = metadump_done;
    d->classes = classes;
    d->item_size_max = s->settings.item_size_max;
    d->cas_enabled = s->settings.cas_enabled;
    struct resp *r = conn_resp_new(c);
    if (metadump_step(&d->st, r))
        metadump_done(&d->st);
    else
        conn_stream(c, &d->st);
    resp_done(r);
    conn_flush_point(c);
}

/* refresh_certs: the certificate, key and CAs read again, as memcached
 * does after a certificate was renewed; on failure the old ones stay.  In
 * a cluster's process, also the files of the cluster file's link_tls line
 * (the links' TLS); the first error is the reply. */
static void handle_refresh_certs(struct conn *c)
{
    struct server *s = conn_server(c);
    char err[1536], line[1600];
    const struct cluster *cl = s->cluster;
    bool links = cl != NULL && cl->link_tls != NULL;
    if (s->tls == NULL && !links) {
        reply_line(c, "Error TLS not enabled", false);
        return;
    }
    if (s->tls != NULL && !server_tls_refresh(s, err, sizeof(err))) {
        reply_line(c, err, false);
        return;
    }
    if (links && linktls_ctx_reload(cl->link_tls, cl->tls_cert, cl->tls_key, cl->tls_ca, err,
                                    sizeof(err)) < 0) {
        snprintf(line, sizeof(line), "Error loading %s", err);
        reply_line(c, line, false);
        return;
    }
    reply_line(c, "OK", false);
}

/* watch [stream...]: from its OK on, the connection carries the log
 * lines of the streams asked for (watch.h) and reads no more commands. */
static void handle_watch(struct conn *c, const struct text_req *req)
{
    struct server *s = conn_server(c);
    if (!s->settings.watch_enabled) {     /* -W, before anything else */
        reply_line(c, "CLIENT_ERROR watch commands not allowed", false);
        return;
    }
    if (conn_has_unflushed(c)) {
        reply_line(c, "ERROR cannot pipeline other commands before watch", false);
        return;
    }
    unsigned streams;
    if (watch_parse(req->arg, req->arg ? req->narg : 0, &streams) < 0) {
        reply_line(c, "ERROR", false);
        return;
    }
    switch (watch_add(&s->watch, c, streams)) {
    case WATCH_ADDED:
        break;
    case WATCH_TOO_MANY:
        reply_line(c, "WATCHER_TOO_MANY log watcher limit reached", false);
        return;
    case WATCH_NO_MEMORY:
        reply_line(c, "SERVER_ERROR out of memory", false);
        return;
    }
    reply_line(c, "OK", false);
    conn_watch_begin(c);
}

/* cache_memlimit <megabytes>: memcached's answers and bounds. */
static void handle_cache_memlimit(struct conn *c, const struct text_req *req)
{
    struct server *s = conn_server(c);
    uint32_t mb = (uint32_t)req->delta;
    const char *reply;
    if (mb < 8)
        reply = "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m";
    else if (mb > 1000000000)
        reply = "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes";
    else if (!server_set_mem_limit(s, (size_t)mb << 20))
        reply = "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust";
    else
        reply = "OK";
    reply_line(c, reply, req->noreply);
}

static void admin_write(void *ctx, const void *p, size_t n)
{
    resp_add(ctx, p, n);
}

#define ADMIN_MAX_WORDS 16
#define ADMIN_REFUSED "CLIENT_ERROR cocytus commands need authentication (cocytus auth)\r\n"

/* "cocytus auth" asks for a nonce; "cocytus auth <proof>" answers it
 * (repl/auth.h).  A good proof makes the connection admin. */
static void handle_admin_auth(struct conn *c, int argc, char **argv, struct resp *r)
{
    struct server *s = conn_server(c);
    struct auth_admin *a = conn_admin_auth(c);
    char peer[96], hex[AUTH_NONCE_HEX + 1];
    if (argc == 1) {
        if (auth_admin_challenge(a, hex) < 0)
            resp_str(r, "SERVER_ERROR no random bytes for a nonce\r\n");
        else
            resp_printf(r, "AUTH %s\r\n", hex);
        return;
    }
    if (argc == 2 && auth_admin_verify(a, s->admin_key, argv[1])) {
        if (s->settings.verbose)
            fprintf(stderr, "admin connection from %s authenticated\n",
                    conn_peer_name(c, peer, sizeof(peer)));
        resp_str(r, "OK\r\n");
        return;
    }
    if (conn_first_refusal(c))
        fprintf(stderr, "cocytus-server: admin authentication from %s failed "
                "(wrong cluster secret, or no nonce asked first)\n",
                conn_peer_name(c, peer, sizeof(peer)));
    resp_str(r, "CLIENT_ERROR authentication failed\r\n");
}

/* A control command on a connection that did not prove the secret. */
static void refuse_admin(struct conn *c, const char *word, struct resp *r)
{
    char peer[96], shown[41];
    if (conn_first_refusal(c))
        fprintf(stderr, "cocytus-server: refused 'cocytus %s' from %s: not authenticated\n",
                printable_copy(shown, sizeof(shown), word, strlen(word)),
                conn_peer_name(c, peer, sizeof(peer)));
    resp_str(r, ADMIN_REFUSED);
}

/* "cocytus <words>": handed to the engine, which writes the whole reply,
 * once the connection proved the cluster secret (docs/security.md). */
static void handle_admin(struct conn *c, const struct text_req *req)
{
    struct engine *e = conn_engine(c);
    struct resp *r = conn_resp_new(c);
    char line[1024];
    char *argv[ADMIN_MAX_WORDS];
    int argc = 0;
    if (req->narg < sizeof(line)) {
        memcpy(line, req->arg, req->narg);
        line[req->narg] = '\0';
        char *save = NULL;
        for (char *w = strtok_r(line, " ", &save); w && argc < ADMIN_MAX_WORDS;
             w = strtok_r(NULL, " ", &save))
            argv[argc++] = w;
    }
    /* Without a cluster there is no secret and no cluster state: the words
     * go to the engine as before, which answers ERROR like memcached to
     * what it does not know. */
    bool secret = conn_server(c)->admin_key_set;
    if (secret && argc > 0 && strcmp(argv[0], "auth") == 0) {
        handle_admin_auth(c, argc, argv, r);
        resp_done(r);
        return;
    }
    if (secret && argc > 0 && !conn_is_admin(c)) {
        refuse_admin(c, argv[0], r);
        resp_done(r);
        return;
    }
    /* Slot migration's words are the server's, whatever the engine. */
    if (argc > 0 && migrate_admin(conn_server(c), c, argc, argv, admin_write, r)) {
        resp_done(r);
        return;
    }
    if (argc == 0 || !e->ops->admin || !e->ops->admin(e, argc, argv, admin_write, r)) {
        r->buflen = 0;
        r->nsegs = 0;
        resp_str(r, "ERROR\r\n");
    }
    resp_done(r);
}

static void reply_line(struct conn *c, const char *line, bool noreply)
{
    struct resp *r = conn_resp_new(c);
    if (!noreply) {
        resp_str(r, line);
        resp_add(r, "\r\n", 2);
    }
    resp_done(r);
}

/* ---- cluster: config get cluster, MOVED ---- */

/* Is the request line buf[0..total) exactly "config get cluster"? */
static bool is_config_get_cluster(const char *buf, size_t total)
{
    const char *end = buf + total;
    if (end > buf && end[-1] == '\n')
        end--;
    if (end > buf && end[-1] == '\r')
        end--;
    struct tokens t;
    tokenize(buf, end, TEXT_MAX_TOKENS, &t);
    return t.count == 3 && !t.more && tok_is(&t, 0, "config") && tok_is(&t, 1, "get") &&
           tok_is(&t, 2, "cluster");
}

static void handle_config_cluster(struct conn *c)
{
    struct server *s = conn_server(c);
    struct resp *r = conn_resp_new(c);
    if (s->config_reply)
        resp_add(r, s->config_reply, s->config_reply_len);
    else
        resp_str(r, "SERVER_ERROR out of memory\r\n");
    resp_done(r);
}

static bool is_keyed(enum text_cmd cmd)
{
    switch (cmd) {
    case TC_GET: case TC_GETS: case TC_GAT: case TC_GATS:
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
    case TC_DELETE: case TC_INCR: case TC_DECR: case TC_TOUCH:
        return true;
    default:
        return false;
    }
}

/* MOVED text of the request's first key served elsewhere, or NULL. */
static const char *request_moved(struct server *s, const struct text_req *req)
{
    if (!is_retrieval(req->cmd))
        return server_moved(s, req->key, req->nkey);
    const char *p = req->keys, *end = req->keys + req->nkeys_len, *key;
    size_t nkey;
    while (text_next_key(&p, end, &key, &nkey)) {
        const char *moved = server_moved(s, key, nkey);
        if (moved)
            return moved;
    }
    return NULL;
}

/* Routing: answer MOVED (nothing under noreply) instead of running a keyed
 * request for a slot this process does not serve.  True if it did. */
static bool reply_if_moved(struct conn *c, const struct text_req *req)
{
    struct server *s = conn_server(c);
    if (!s->routes || !is_keyed(req->cmd))
        return false;
    /* The source of a slot move sends the slot's items before (and just
     * after) this process takes the slot. */
    if (conn_is_import(c))
        return false;
    const char *moved = request_moved(s, req);
    if (!moved)
        return false;
    struct resp *r = conn_resp_new(c);
    if (!req->noreply)
        resp_printf(r, "SERVER_ERROR MOVED %s\r\n", moved);
    resp_done(r);
    return true;
}

/* A key of the request that this connection's writes in flight may still
 * change (the read must see them), or whose value the engine cannot serve
 * yet.  Reads of other keys run at once: their replies queue behind the
 * pending writes' in order, and a pipelining client's gets do not drain
 * its pipeline at every set. */
static bool retrieval_waits(struct conn *c, const struct text_req *req)
{
    const char *p = req->keys, *end = req->keys + req->nkeys_len, *key;
    size_t nkey;
    while (text_next_key(&p, end, &key, &nkey))
        if (conn_key_writes_inflight(c, key, nkey))
            return true;
    /* Only then the engine: a read wait it grants registers the
     * connection, which is only right when nothing else holds it. */
    p = req->keys;
    while (text_next_key(&p, end, &key, &nkey))
        if (conn_read_waits(c, key, nkey))
            return true;
    return false;
}

/* Commands that read every key (stats, admin) wait for all of this
 * connection's writes in flight. */
static bool needs_own_writes(enum text_cmd cmd)
{
    return cmd == TC_STATS || cmd == TC_ADMIN;
}

/* Does the line start with a meta command (mg ms md ma mn me and a
 * separator)? */
static bool looks_meta(const char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && buf[i] == ' ')
        i++;
    if (i + 2 >= len || buf[i] != 'm')
        return false;
    char sep = buf[i + 2];
    return (sep == ' ' || sep == '\r' || sep == '\n') && meta_is_command(buf + i, 2);
}

/* A meta command: parse, route, run.  CONN_PARSE_OK with *consumed 0 means
 * it was not one after all. */
static enum conn_parse process_meta(struct conn *c, const char *buf, size_t len,
                                    size_t *consumed, bool *handled)
{
    struct server *s = conn_server(c);
    struct meta_req req;
    *handled = true;
    switch (meta_parse(buf, len, s->settings.item_size_max, &req)) {
    case MP_NOT_META:
        *handled = false;
        return CONN_PARSE_OK;
    case MP_NEED_MORE:
        if (memchr(buf, '\n', len))
            conn_hold_output(c);      /* the line is there: waiting for its data */
        return CONN_PARSE_NEED_MORE;
    case MP_CLOSE:
        if (!memchr(buf, '\n', len) && conn_input_may_grow(c, len))
            return CONN_PARSE_NEED_MORE;
        conn_close_discard(c);
        return CONN_PARSE_CLOSE;
    case MP_ERROR:
        *consumed = req.total;
        if (strcmp(req.error, TEXT_BAD_DATA_CHUNK) == 0)
            s->stats.cmd_set++;       /* memcached counts it before it checks the CRLF */
        if (req.too_large) {
            meta_run_too_large(c, req.key, req.nkey);
        } else {
            struct resp *r = conn_resp_new(c);
            resp_str(r, req.error);
            resp_add(r, "\r\n", 2);
            resp_done(r);
        }
        conn_swallow(c, req.swallow);
        return CONN_PARSE_OK;
    case MP_OK:
        break;
    }
    /* ma with t or N peeks at the item first: like a read, it waits for
     * this connection's writes in flight of its key (a replicated engine). */
    bool peeks = req.cmd == MC_ARITH && (meta_has(&req, 't') || meta_has(&req, 'N'));
    bool read = req.cmd == MC_GET || req.cmd == MC_DEBUG;
    if ((read || peeks) && conn_key_writes_inflight(c, req.key, req.nkey))
        return CONN_PARSE_BLOCKED;
    if (read && conn_read_waits(c, req.key, req.nkey))
        return CONN_PARSE_BLOCKED;
    *consumed = req.total;
    if (req.cmd != MC_NOOP && s->routes && !conn_is_import(c)) {
        const char *moved = server_moved(s, req.key, req.nkey);
        if (moved) {
            struct resp *r = conn_resp_new(c);
            resp_printf(r, "SERVER_ERROR MOVED %s\r\n", moved);
            resp_done(r);
            return CONN_PARSE_OK;
        }
    }
    meta_run(c, &req);
    if (req.cmd == MC_NOOP)
        conn_flush_point(c);
    return CONN_PARSE_OK;
}

/* memcached closes the connection on an unknown command whose last token
 * starts with "HTTP/" (an HTTP request sent to it), without a reply.  Its
 * tokenizer keeps at most 23 tokens and makes the rest of the line the
 * 24th.  It only gets that far with a command word of two bytes or more
 * that does not start with one of the letters its dispatch branches on
 * (g s a c i d t, and m with two bytes): those answer ERROR (difftest
 * seed 4242 case 61: "T /index.html HTTP/1.1"). */
static bool looks_http(const char *buf, size_t total)
{
    const char *end = buf + total;
    if (end > buf && end[-1] == '\n')
        end--;
    if (end > buf && end[-1] == '\r')
        end--;
    const char *p = buf, *last = NULL, *first = NULL;
    size_t nfirst = 0;
    int n = 0;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        if (p == end)
            break;
        last = p;
        if (++n == 24)
            break;
        while (p < end && *p != ' ')
            p++;
        if (n == 1) {
            first = last;
            nfirst = (size_t)(p - last);
        }
    }
    if (!first || nfirst < 2 || (*first && strchr("gsacidt", *first)) ||
        (*first == 'm' && nfirst == 2))
        return false;
    return last && end - last >= 5 && memcmp(last, "HTTP/", 5) == 0;
}

/* -Y: until a connection authenticates, only "set <key> <flags> <exptime>
 * <bytes>" with "user password" as its data is taken (key, flags and
 * exptime are ignored; the reply is STORED even with noreply); anything
 * else is answered "CLIENT_ERROR unauthenticated" and the rest of the
 * input received with it is dropped, as memcached does. */
static enum conn_parse process_auth(struct conn *c, const char *buf, size_t len,
                                    size_t *consumed)
{
    struct server *s = conn_server(c);
    const char *nl = memchr(buf, '\n', len);
    if (!nl) {
        if (len > TEXT_LINE_MAX) {
            conn_close_discard(c);
            return CONN_PARSE_CLOSE;
        }
        return CONN_PARSE_NEED_MORE;
    }
    size_t line = (size_t)(nl - buf) + 1;
    const char *end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
    struct tokens t;
    tokenize(buf, end, TEXT_MAX_TOKENS, &t);
    int64_t vlen;
    if (tok_is(&t, 0, "set") && t.count >= 5 && parse_i32(t.s[4], t.n[4], &vlen) &&
        vlen >= 0 && vlen <= INT32_MAX - 2) {
        size_t need = line + (size_t)vlen + 2;
        if (len < need) {
            conn_hold_output(c);
            return CONN_PARSE_NEED_MORE;
        }
        const char *user, *pass;
        size_t nuser, npass;
        s->stats.auth_cmds++;
        if (authfile_split_ascii(buf + line, (size_t)vlen, &user, &nuser, &pass, &npass)) {
            if (server_auth_check(s, user, nuser, pass, npass)) {
                conn_set_authenticated(c);
                reply_line(c, "STORED", false);
                *consumed = need;
                return CONN_PARSE_OK;
            }
            s->stats.auth_errors++;
            reply_line(c, "CLIENT_ERROR authentication failure", false);
            *consumed = len;
            return CONN_PARSE_OK;
        }
        s->stats.auth_errors++;
    }
    reply_line(c, "CLIENT_ERROR unauthenticated", false);
    *consumed = len;
    return CONN_PARSE_OK;
}

enum conn_parse proto_text_process(struct conn *c, const char *buf, size_t len,
                                   size_t *consumed)
{
    struct server *s = conn_server(c);
    struct text_req req;
    *consumed = 0;
    /* -Y: a cluster's own connections (cocytus-cli, a slot move's import)
     * prove the cluster secret instead: "cocytus auth" goes through, and
     * a connection that proved it is authenticated. */
    if (s->settings.auth_file && !conn_authenticated(c) && !conn_is_admin(c) &&
        !(len >= 12 && memcmp(buf, "cocytus auth", 12) == 0))
        return process_auth(c, buf, len, consumed);
    if (looks_meta(buf, len)) {
        bool handled;
        *consumed = 0;
        enum conn_parse mp = process_meta(c, buf, len, consumed, &handled);
        if (handled)
            return mp;
    }
    enum text_parse_result pr = text_parse(buf, len, s->settings.item_size_max, &req);
    *consumed = 0;
    switch (pr) {
    case TP_NEED_MORE:
        if (memchr(buf, '\n', len))
            conn_hold_output(c);      /* the line is there: waiting for its data */
        return CONN_PARSE_NEED_MORE;
    case TP_CLOSE:
        if (!memchr(buf, '\n', len) && conn_input_may_grow(c, len))
            return CONN_PARSE_NEED_MORE;
        if (s->settings.verbose)
            fprintf(stderr, "closing connection: request line too long\n");
        conn_close_discard(c);
        return CONN_PARSE_CLOSE;
    case TP_ERROR:
        *consumed = req.total;
        if (strcmp(req.error, TEXT_BAD_DATA_CHUNK) == 0)
            s->stats.cmd_set++;       /* memcached counts it before it checks the CRLF */
        if (req.cmd == TC_FLUSH_ALL && req.error[0] == 'C')
            s->stats.cmd_flush++;     /* ... and a flush_all before its delay or -F */
        if (req.cmd == TC_NONE && s->slotmap && is_config_get_cluster(buf, req.total)) {
            handle_config_cluster(c);
            return CONN_PARSE_OK;
        }
        if (is_retrieval(req.cmd) && req.error == bad_format) {
            /* the keys before the bad one are served: they wait as in a
             * well-formed retrieval */
            if (retrieval_waits(c, &req)) {
                *consumed = 0;
                return CONN_PARSE_BLOCKED;
            }
            conn_discard_unflushed(c);   /* memcached drops what it had not written */
            serve_keys_before_bad(c, &req);
        }
        if (req.cmd == TC_FLUSH_ALL && !s->settings.flush_enabled && req.error[0] == 'C') {
            reply_line(c, "CLIENT_ERROR flush_all not allowed", req.noreply);
            return CONN_PARSE_OK;
        }
        if (req.swallow && req.key && strncmp(req.error, "SERVER_ERROR", 12) == 0) {
            /* A value over -I: refused before its data is read. */
            if (!reply_if_moved(c, &req))
                store_too_large(c, &req);
            conn_swallow(c, req.swallow);
            return CONN_PARSE_OK;
        }
        if (req.cmd == TC_NONE && looks_http(buf, req.total)) {
            if (s->settings.verbose)
                fprintf(stderr, "closing connection: an HTTP request\n");
            conn_close_discard(c);
            return CONN_PARSE_CLOSE;
        }
        reply_line(c, req.error, req.noreply);
        conn_swallow(c, req.swallow);
        return CONN_PARSE_OK;
    case TP_OK:
        break;
    }
    if (needs_own_writes(req.cmd) && conn_writes_inflight(c))
        return CONN_PARSE_BLOCKED;
    if (is_retrieval(req.cmd) && retrieval_waits(c, &req))
        return CONN_PARSE_BLOCKED;
    *consumed = req.total;
    if (reply_if_moved(c, &req)) {
        /* a retrieval's reply is written at once, MOVED too: a later
         * error that drops unwritten replies must not take the redirect */
        if (is_retrieval(req.cmd))
            conn_flush_point(c);
        return CONN_PARSE_OK;
    }
    switch (req.cmd) {
    case TC_GET: case TC_GETS:
        handle_get(c, &req);
        conn_flush_point(c);
        break;
    case TC_GAT: case TC_GATS:
        handle_gat(c, &req);
        conn_flush_point(c);
        break;
    case TC_SET: case TC_ADD: case TC_REPLACE: case TC_APPEND: case TC_PREPEND: case TC_CAS:
        handle_store(c, &req);
        break;
    case TC_DELETE:
        handle_delete(c, &req);
        break;
    case TC_INCR: case TC_DECR:
        handle_arith(c, &req);
        break;
    case TC_TOUCH:
        handle_touch(c, &req);
        break;
    case TC_FLUSH_ALL:
        handle_flush_all(c, &req);
        break;
    case TC_STATS:
        handle_stats(c, &req);
        break;
    case TC_ADMIN:
        handle_admin(c, &req);
        break;
    case TC_VERSION:
        reply_line(c, "VERSION " MC_VERSION_STRING, false);
        break;
    case TC_VERBOSITY:
        s->settings.verbose = req.delta > INT32_MAX ? INT32_MAX : (int)req.delta;
        reply_line(c, "OK", req.noreply);
        break;
    case TC_CACHE_MEMLIMIT:
        handle_cache_memlimit(c, &req);
        break;
    case TC_WATCH:
        handle_watch(c, &req);
        break;
    case TC_LRU_CRAWLER:
        handle_lru_crawler(c, &req);
        break;
    case TC_REFRESH_CERTS:
        handle_refresh_certs(c);
        break;
    case TC_QUIT:
        return CONN_PARSE_CLOSE;
    case TC_SHUTDOWN:
        if (!s->settings.shutdown_enabled) {
            reply_line(c, "ERROR: shutdown not enabled", false);
            break;
        }
        conn_request_shutdown(c);
        return CONN_PARSE_CLOSE;
    case TC_NONE:
        reply_line(c, "ERROR", false);
        break;
    }
    return CONN_PARSE_OK;
}
