/* proto_meta_run.c - running memcached's meta commands (mg ms md ma mn me)
 * against the engine.
 *
 * proto_meta.c has parsed the request; here every meta command becomes the
 * engine calls the classic commands use (get_ex, conn_mutate), so meta
 * commands work on every engine that serves keys, through replication and
 * recovery, with MOVED in a cluster (checked by the caller).  The meta
 * commands' item state - stale, recache won, stored through a base64 key -
 * is kept by the engine as marks (engine.h, ENG_MARK_*).
 *
 * mg answers from the value it read and then, like gat, issues the touch (T)
 * and the recache-win mark (W) as mutations; its slot is complete once they
 * are.  ms, md and ma are one mutation each whose outcome may come later
 * (a replicated engine), when the request's bytes are gone: what the reply
 * needs (flags in order, key token, opaque) is kept in the slot's scratch
 * space (struct plan) and the reply is formatted by the completion.
 *
 * Replies follow memcached 1.6.18 (learned by sending it requests; see
 * docs/compat.md): flags are answered in request order, the key of k is
 * followed by " b" when it is shown in base64, Z X W come last in that
 * order, q hides EN (mg) and HD (ms md ma, also ma's VA), errors are always
 * sent. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "arith.h"
#include "proto_meta.h"
#include "proto_meta_run.h"
#include "slabclass.h"
#include "server.h"

#define TOO_LARGE "SERVER_ERROR object too large for cache\r\n"

/* What a completion needs of its request (kept in the slot's scratch). */
struct plan {
    uint8_t cmd;              /* enum meta_cmd */
    uint8_t nflags;
    char flags[META_MAX_FLAGS];
    bool quiet;
    bool base64;              /* the key came in base64: show it so, with " b" */
    bool value;               /* v */
    bool vivify;              /* mg N: a miss created the item */
    bool opaque_error;        /* ma: answer "opaque token too long" */
    uint8_t nkey;             /* key bytes (decoded) after the struct */
    uint8_t nopaque;          /* opaque bytes after the key */
    int64_t ttl_found;        /* t of ma: the item was there */
    int64_t ttl_created;      /* t of ma: N created it; t of mg N */
    char bytes[];             /* key, then opaque */
};

static void plan_save(struct resp *r, const struct meta_req *req, int64_t ttl_found,
                      int64_t ttl_created)
{
    /* (a refused opaque is never shown: not kept) */
    size_t nopaque = req->opaque && !req->opaque_too_long ? req->nopaque : 0;
    struct plan *p = resp_scratch_reserve(r, sizeof(struct plan) + req->nkey + nopaque);
    memset(p, 0, sizeof(*p));
    p->cmd = (uint8_t)req->cmd;
    p->nflags = (uint8_t)req->nflags;
    for (int i = 0; i < req->nflags; i++)
        p->flags[i] = req->flags[i].flag;
    p->quiet = meta_has(req, 'q');
    p->base64 = req->base64;
    p->value = meta_has(req, 'v');
    p->nkey = (uint8_t)req->nkey;
    p->nopaque = (uint8_t)nopaque;
    p->opaque_error = req->opaque_too_long;
    p->ttl_found = ttl_found;
    p->ttl_created = ttl_created;
    memcpy(p->bytes, req->key, req->nkey);
    if (nopaque)
        memcpy(p->bytes + req->nkey, req->opaque, nopaque);
}

/* A copy of the slot's plan (the scratch moves when reply bytes are added). */
static void plan_load(struct resp *r, struct plan *p, char *key, char *opaque)
{
    const struct plan *s = resp_scratch(r);
    *p = *s;
    memcpy(key, s->bytes, s->nkey);
    memcpy(opaque, s->bytes + s->nkey, s->nopaque);
}

/* ---- reply pieces ---- */

/* " k<key>"; in base64 followed by " b" (memcached encodes the decoded
 * key again, it does not echo the token). */
static void put_key(struct resp *r, const char *key, size_t nkey, bool b64)
{
    resp_add(r, " k", 2);
    if (b64) {
        char enc[((META_KEY_MAX + 2) / 3) * 4];
        resp_add(r, enc, meta_base64_encode(key, nkey, enc));
        resp_add(r, " b", 2);
    } else {
        resp_add(r, key, nkey);
    }
}

static void put_opaque(struct resp *r, const char *o, size_t n)
{
    resp_add(r, " O", 2);
    resp_add(r, o, n);
}

static void put_num(struct resp *r, char flag, long long v)
{
    resp_printf(r, " %c%lld", flag, v);
}

static void put_unum(struct resp *r, char flag, unsigned long long v)
{
    resp_printf(r, " %c%llu", flag, v);
}

static void line_end(struct resp *r)
{
    resp_add(r, "\r\n", 2);
}

/* Failure lines shared with the classic commands. */
static void put_failure(struct resp *r, const struct eng_result *res)
{
    switch (res->status) {
    case ENG_TOO_LARGE:
        resp_str(r, TOO_LARGE);
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
    default:
        resp_str(r, "SERVER_ERROR unexpected engine result\r\n");
        break;
    }
}

static void reply_line(struct conn *c, const char *line)
{
    struct resp *r = conn_resp_new(c);
    resp_str(r, line);
    resp_done(r);
}

/* ---- mg ---- */

/* The flags of an mg answer from an item (found, or just created by N). */
struct hit {
    const char *key;
    size_t nkey;
    bool binkey;
    uint64_t cas;
    uint32_t flags;
    bool fetched;
    uint32_t idle;
    uint32_t nbytes;
    long long ttl;
};

static void put_hit_flags(struct resp *r, const struct plan *p, const char *opaque,
                          const struct hit *h)
{
    for (int i = 0; i < p->nflags; i++) {
        switch (p->flags[i]) {
        case 'c': put_unum(r, 'c', h->cas); break;
        case 'f': put_unum(r, 'f', h->flags); break;
        case 'h': resp_add(r, h->fetched ? " h1" : " h0", 3); break;
        case 'k': put_key(r, h->key, h->nkey, h->binkey); break;
        case 'l': put_unum(r, 'l', h->idle); break;
        case 'O': put_opaque(r, opaque, p->nopaque); break;
        case 's': put_unum(r, 's', h->nbytes); break;
        case 't': put_num(r, 't', h->ttl); break;
        default: break;
        }
    }
}

/* k and O of a miss, as the request sent them. */
static void put_miss_flags(struct resp *r, const struct plan *p, const char *key,
                           const char *opaque)
{
    for (int i = 0; i < p->nflags; i++) {
        if (p->flags[i] == 'k')
            put_key(r, key, p->nkey, p->base64);
        else if (p->flags[i] == 'O')
            put_opaque(r, opaque, p->nopaque);
    }
}

/* The value slot of an mg completes once its touch and mark have. */
static void mg_part_complete(struct resp *t, const struct eng_result *res)
{
    (void)res;
    struct resp *vr = (struct resp *)(uintptr_t)t->arg;
    if (--vr->arg == 0)
        resp_done(vr);
}

static void mg_issue(struct conn *c, struct resp *vr, const struct eng_mutation *m)
{
    struct resp *t = conn_resp_new(c);
    t->noreply = true;
    t->arg = (uint64_t)(uintptr_t)vr;
    vr->arg++;
    conn_mutate(c, t, m, mg_part_complete);
}

/* mg N on a miss: the item was created (or someone else's was there). */
static void vivify_complete(struct resp *r, const struct eng_result *res)
{
    struct plan p;
    char key[META_KEY_MAX], opaque[META_OPAQUE_MAX + 1];
    plan_load(r, &p, key, opaque);
    if (res->status != ENG_SUCCESS) {
        if (res->status != ENG_NOT_STORED) {
            put_failure(r, res);
            return;
        }
        if (p.opaque_error) {
            resp_str(r, "CLIENT_ERROR opaque token too long\r\n");
            return;
        }
        if (!p.quiet) {
            resp_add(r, "EN", 2);
            put_miss_flags(r, &p, key, opaque);
            line_end(r);
        }
        return;
    }
    if (p.opaque_error) {
        resp_str(r, "CLIENT_ERROR opaque token too long\r\n");
        return;
    }
    struct hit h = {
        .key = key, .nkey = p.nkey, .binkey = false, .cas = res->cas, .ttl = p.ttl_created,
    };
    resp_add(r, p.value ? "VA 0" : "HD", p.value ? 4 : 2);
    put_hit_flags(r, &p, opaque, &h);
    resp_add(r, " W\r\n", 4);
    if (p.value)
        line_end(r);
}

/* memcached applies mg's T and N (and judges R) in request order while
 * it writes the reply: t shows the TTL at its own place in the flags (so
 * "N30 t T0" shows 30 and leaves no TTL), and R compares with the TTL as
 * it is then. */
struct mg_walk {
    long long t_shown;        /* what t shows */
    bool r_win;               /* R won the recache */
    bool set;                 /* T (or N on a created item) set the TTL... */
    int64_t exptime;          /* ...to this client exptime (the last one) */
};

static void mg_walk(struct server *s, const struct meta_req *req, rel_time_t start,
                    bool created, bool token_sent, struct mg_walk *w)
{
    rel_time_t cur = start;
    memset(w, 0, sizeof(*w));
    w->t_shown = -1;
    /* an mg stops at an O too long (proto_meta.h: opaque_too_long) */
    int nflags = req->nflags;
    for (int i = 0; req->cmd == MC_GET && req->opaque_too_long && i < req->nflags; i++) {
        if (req->flags[i].flag == 'O') {
            nflags = i;
            break;
        }
    }
    for (int i = 0; i < nflags; i++) {
        switch (req->flags[i].flag) {
        case 'T':
            cur = clock_exptime(&s->clock, req->ttl);
            w->set = true;
            w->exptime = req->ttl;
            break;
        case 'N':
            if (created) {
                cur = clock_exptime(&s->clock, req->vivify_ttl);
                w->set = true;
                w->exptime = req->vivify_ttl;
            }
            break;
        case 'R':
            if (!created && !token_sent && cur != 0 &&
                cur < clock_exptime(&s->clock, req->recache_ttl))
                w->r_win = true;
            break;
        case 't':
            w->t_shown = cur == 0 ? -1 : (long long)(uint32_t)(cur - s->clock.now);
            break;
        default:
            break;
        }
    }
}

static void mg_vivify(struct conn *c, const struct meta_req *req)
{
    struct server *s = conn_server(c);
    struct mg_walk w;
    mg_walk(s, req, 0, true, false, &w);
    struct resp *r = conn_resp_new(c);
    plan_save(r, req, 0, w.t_shown);
    struct eng_mutation m = {
        .op = ENG_OP_ADD, .key = req->key, .nkey = req->nkey, .data = "", .nbytes = 0,
        .exptime = w.set ? w.exptime : 0,
        /* (memcached does not mark the key of an item mg creates binary) */
        .marks = req->opaque_too_long ? 0 :      /* nothing after the O: no win, no fetch */
                 (uint8_t)(ENG_MARK_WON | (meta_has(req, 'u') ? 0 : ENG_MARK_FETCHED)),
    };
    conn_mutate_uncounted(c, r, &m, vivify_complete);   /* counted as mg's hit */
}

/* How memcached 1.6.18 counts an mg (measured, stats_check.py): a hit,
 * or a miss that N turns into a new item, is a get hit, or with T a touch
 * hit; any other miss a get miss.  Behind an opaque token too long, a hit
 * counts nothing and a miss a get miss, unless N. */
static void count_mg(struct conn *c, const struct meta_req *req, eng_status st)
{
    struct server *s = conn_server(c);
    bool vivify = meta_has(req, 'N');
    if (req->opaque_too_long) {
        if (st == ENG_NOT_FOUND && !vivify)
            conn_count_get(c, st);
        return;
    }
    bool hit = st == ENG_SUCCESS || (st == ENG_NOT_FOUND && vivify);
    if (hit && meta_has(req, 'T')) {
        s->stats.cmd_touch++;
        s->stats.touch_hits++;
        return;
    }
    conn_count_get(c, hit ? ENG_SUCCESS : st);
}

static void handle_mg(struct conn *c, const struct meta_req *req)
{
    struct server *s = conn_server(c);
    struct eng_value v;
    struct eng_result res;
    /* memcached counts the fetch at the lookup, except when a flag needs
     * the item locked (N T R l h): then after the flags, so not when an O
     * too long stops them (difftest seed 8484 case 5046) */
    bool late_fetch = meta_has(req, 'N') || meta_has(req, 'T') || meta_has(req, 'R') ||
                      meta_has(req, 'l') || meta_has(req, 'h');
    unsigned opts = meta_has(req, 'u') || (req->opaque_too_long && late_fetch)
                        ? ENG_GET_PEEK : 0;
    eng_status st = conn_lookup_ex(c, req->key, req->nkey, opts, &v, &res);
    count_mg(c, req, st);
    if (st == ENG_NOT_FOUND && meta_has(req, 'N')) {
        mg_vivify(c, req);
        return;
    }
    struct resp *r = conn_resp_new(c);
    plan_save(r, req, 0, 0);
    struct plan p;
    char key[META_KEY_MAX], opaque[META_OPAQUE_MAX + 1];
    plan_load(r, &p, key, opaque);
    if (st == ENG_NOT_FOUND) {
        if (p.opaque_error) {
            resp_str(r, "CLIENT_ERROR opaque token too long\r\n");
        } else if (!p.quiet) {
            resp_add(r, "EN", 2);
            put_miss_flags(r, &p, key, opaque);
            line_end(r);
        }
        resp_done(r);
        return;
    }
    if (st != ENG_SUCCESS) {
        put_failure(r, &res);
        resp_done(r);
        return;
    }

    bool stale = v.marks & ENG_MARK_STALE;
    bool token_sent = v.marks & ENG_MARK_WON;
    rel_time_t start = v.exptime == 0 ? 0 : (rel_time_t)(v.exptime - s->clock.epoch);
    struct mg_walk w;
    mg_walk(s, req, start, false, token_sent, &w);
    if (p.opaque_error) {
        /* only the TTL of a T before the O is set: no win (the fetch: above) */
        if (v.handle)
            conn_engine(c)->ops->release(conn_engine(c), v.handle);
        resp_str(r, "CLIENT_ERROR opaque token too long\r\n");
        r->arg = 1;
        if (w.set) {
            struct eng_mutation m = { .op = ENG_OP_MARK, .key = req->key, .nkey = req->nkey,
                                      .touch = true, .exptime = w.exptime };
            mg_issue(c, r, &m);
        }
        if (--r->arg == 0)
            resp_done(r);
        return;
    }
    bool win = w.r_win || (stale && !token_sent);
    bool z = token_sent;
    struct hit h = {
        .key = v.key, .nkey = v.nkey, .binkey = v.marks & ENG_MARK_BINKEY, .cas = v.cas,
        .flags = v.flags, .fetched = v.fetched, .idle = v.idle, .nbytes = v.nbytes,
        .ttl = w.t_shown,
    };
    if (p.value)
        resp_printf(r, "VA %u", (unsigned)v.nbytes);
    else
        resp_add(r, "HD", 2);
    put_hit_flags(r, &p, opaque, &h);
    if (z)
        resp_add(r, " Z", 2);
    if (stale)
        resp_add(r, " X", 2);
    if (win)
        resp_add(r, " W", 2);
    line_end(r);
    /* The item stays referenced until the reply is written, as memcached
     * holds it (an incr behind it then makes a new item).  A bare value
     * (a data process's region) has no CRLF after it; a transient one has
     * no reference to hold and is copied if it must wait (conn.c). */
    if (p.value && v.bare) {
        resp_add_value(r, &v, v.nbytes);
        line_end(r);
    } else if (p.value) {
        resp_add_value(r, &v, (size_t)v.nbytes + 2);
    } else if (v.handle) {
        resp_add_ref(r, v.data, 0, v.handle);
    }

    r->arg = 1;   /* guard until the mutations are issued */
    if (win) {
        struct eng_mutation m = { .op = ENG_OP_MARK, .key = req->key, .nkey = req->nkey,
                                  .marks = ENG_MARK_WON };
        mg_issue(c, r, &m);
    }
    if (w.set) {
        /* the TTL alone: unlike touch, mg's T does not count as a fetch
         * (mg u T leaves an item unfetched; seed 20261124 case 3142) */
        struct eng_mutation m = { .op = ENG_OP_MARK, .key = req->key, .nkey = req->nkey,
                                  .touch = true, .exptime = w.exptime };
        mg_issue(c, r, &m);
    }
    if (--r->arg == 0)
        resp_done(r);
}

/* ---- ms, md, ma ---- */

/* The cas a C token compares with: the engines read 0 as "no compare", and
 * C0 must compare (and fail: no item has cas 0 while cas is enabled).
 * Without cas (-C) memcached's items have cas 0, which C0 matches
 * (difftest seed 14014 case 4983). */
static uint64_t compare_cas(struct conn *c, const struct meta_req *req)
{
    if (!meta_has(req, 'C'))
        return 0;
    if (req->cas == 0)
        return conn_server(c)->settings.cas_enabled ? UINT64_MAX : 0;
    return req->cas;
}

/* The status code of a mutation's outcome, or NULL for a failure line. */
static const char *code_of(eng_status st)
{
    switch (st) {
    case ENG_SUCCESS: return "HD";
    case ENG_NOT_STORED: return "NS";
    case ENG_EXISTS: return "EX";
    case ENG_NOT_FOUND: return "NF";
    default: return NULL;
    }
}

/* ms md ma: the outcome with k, O (all), c (ms: 0 on failure; ma on
 * success), t (ma on success) in request order. */
static void mutation_complete(struct resp *r, const struct eng_result *res)
{
    struct plan p;
    char key[META_KEY_MAX], opaque[META_OPAQUE_MAX + 1];
    plan_load(r, &p, key, opaque);
    const char *code = code_of(res->status);
    if (!code) {
        put_failure(r, res);
        return;
    }
    if (p.opaque_error) {
        resp_str(r, "CLIENT_ERROR opaque token too long\r\n");
        return;
    }
    bool ok = res->status == ENG_SUCCESS;
    /* q hides success, but memcached reports an item ma N created. */
    if (ok && p.quiet && !(p.cmd == MC_ARITH && p.vivify))
        return;
    bool va = ok && p.cmd == MC_ARITH && p.value;
    char digits[ARITH_DIGITS_MAX];
    size_t nd = va ? arith_format_u64(digits, res->value) : 0;
    if (va)
        resp_printf(r, "VA %zu", nd);
    else
        resp_str(r, code);
    for (int i = 0; i < p.nflags; i++) {
        switch (p.flags[i]) {
        case 'k':
            put_key(r, key, p.nkey, p.base64);
            break;
        case 'O':
            put_opaque(r, opaque, p.nopaque);
            break;
        case 'c':
            if (p.cmd == MC_SET)
                put_unum(r, 'c', ok ? res->cas : 0);
            else if (p.cmd == MC_ARITH && ok)
                put_unum(r, 'c', res->cas);
            break;
        case 't':
            if (p.cmd == MC_ARITH && ok)
                put_num(r, 't', p.vivify ? p.ttl_created : p.ttl_found);
            break;
        default:
            break;
        }
    }
    line_end(r);
    if (va) {
        resp_add(r, digits, nd);
        line_end(r);
    }
}

static void handle_ms(struct conn *c, const struct meta_req *req)
{
    struct server *s = conn_server(c);
    uint32_t flags = meta_has(req, 'F') ? req->client_flags : 0;
    if (engine_too_large(s->settings.item_size_max, s->settings.cas_enabled, req->nkey,
                         (size_t)req->vlen, flags)) {
        meta_run_too_large(c, req->key, req->nkey);
        return;
    }
    struct eng_mutation m = {
        .key = req->key, .nkey = req->nkey, .data = req->data, .nbytes = (size_t)req->vlen,
        .flags = flags, .exptime = meta_has(req, 'T') ? req->ttl : 0,
        .marks = req->base64 ? ENG_MARK_BINKEY : 0,
    };
    bool has_cas = meta_has(req, 'C');
    switch (req->mode ? req->mode : META_MODE_SET) {
    case META_MODE_ADD:
        m.op = ENG_OP_ADD;
        break;
    case META_MODE_APPEND:        /* memcached: C0 does not compare here */
        m.op = ENG_OP_APPEND;
        m.cas = req->cas;
        break;
    case META_MODE_PREPEND:
        m.op = ENG_OP_PREPEND;
        m.cas = req->cas;
        break;
    case META_MODE_REPLACE:
        /* memcached: a replace with a C is a cas (I included; difftest
         * seed 4242 case 1295), and a cas under -C never matches */
        if (has_cas) {
            m.op = ENG_OP_CAS;
            m.cas = req->cas;
            m.cas_stale = meta_has(req, 'I');
        } else {
            m.op = ENG_OP_REPLACE;
        }
        break;
    default:
        m.op = has_cas ? ENG_OP_CAS : ENG_OP_SET;
        m.cas = req->cas;           /* CAS always compares, 0 too */
        m.cas_stale = has_cas && meta_has(req, 'I');
        break;
    }
    struct resp *r = conn_resp_new(c);
    plan_save(r, req, 0, 0);
    conn_mutate(c, r, &m, mutation_complete);
}

static void handle_md(struct conn *c, const struct meta_req *req)
{
    struct eng_mutation m = { .key = req->key, .nkey = req->nkey, .cas = compare_cas(c, req) };
    if (meta_has(req, 'I')) {
        m.op = ENG_OP_MARK;
        m.marks = ENG_MARK_STALE;
        m.marks_clear = ENG_MARK_WON;
        m.new_cas = true;
        m.touch = meta_has(req, 'T');
        m.exptime = req->ttl;
    } else {
        m.op = ENG_OP_DELETE;
    }
    struct resp *r = conn_resp_new(c);
    plan_save(r, req, 0, 0);
    r->meta_delete = true;    /* memcached: a wrong C is a delete miss (binary: nothing) */
    conn_mutate(c, r, &m, mutation_complete);
}

static void handle_ma(struct conn *c, const struct meta_req *req)
{
    conn_write_final(c);
    struct server *s = conn_server(c);
    /* t shows the TTL at its place among the flags, T and N applied in
     * order before it (as for mg): from the item found, or from nothing
     * (no TTL) for an item N creates. */
    struct mg_walk found, created;
    rel_time_t start = 0;
    bool vivify = meta_has(req, 'N');
    if (meta_has(req, 't') || vivify) {
        struct eng_value v;
        struct eng_result res;
        if (conn_get_ex(c, req->key, req->nkey, ENG_GET_PEEK, &v, &res) == ENG_SUCCESS) {
            start = v.exptime == 0 ? 0 : (rel_time_t)(v.exptime - s->clock.epoch);
            if (v.handle)
                conn_engine(c)->ops->release(conn_engine(c), v.handle);
            vivify = false;
        }
    }
    mg_walk(s, req, start, false, true, &found);
    mg_walk(s, req, 0, true, true, &created);
    struct eng_mutation m = {
        .op = req->mode == META_MODE_DECR ? ENG_OP_DECR : ENG_OP_INCR,
        .key = req->key, .nkey = req->nkey, .delta = req->delta,
        .cas = req->cas,            /* ma reads C0 as no compare */
        .create = meta_has(req, 'N'), .initial = req->initial,
        /* an item N creates takes the TTL of the last of T and N in the
         * request (memcached creates it without one and then applies the
         * flags in order: "T-1 N60" lives 60 s; difftest seed 2411 case
         * 6824); a found one T's.  (Created by another client between the
         * peek and this ma, a found item would take the created TTL.) */
        .exptime = vivify ? (created.set ? created.exptime : 0)
                          : (meta_has(req, 'T') ? req->ttl : req->vivify_ttl),
        .touch = meta_has(req, 'T'),
        /* (memcached's ma does not mark the key of an item it makes binary) */
    };
    struct resp *r = conn_resp_new(c);
    plan_save(r, req, found.t_shown, created.t_shown);
    ((struct plan *)resp_scratch(r))->vivify = vivify;
    conn_mutate(c, r, &m, mutation_complete);
}

/* ---- me ---- */

static void handle_me(struct conn *c, const struct meta_req *req)
{
    struct server *s = conn_server(c);
    struct eng_value v;
    struct eng_result res;
    struct resp *r = conn_resp_new(c);
    eng_status st = conn_get_ex(c, req->key, req->nkey, ENG_GET_PEEK, &v, &res);
    if (st == ENG_NOT_FOUND) {
        resp_str(r, "EN\r\n");
    } else if (st != ENG_SUCCESS) {
        put_failure(r, &res);
    } else {
        size_t size = mc_item_size(v.nkey, v.nbytes, v.flags, s->settings.cas_enabled);
        resp_add(r, "ME ", 3);
        if (v.marks & ENG_MARK_BINKEY) {
            char enc[((META_KEY_MAX + 2) / 3) * 4];
            resp_add(r, enc, meta_base64_encode(v.key, v.nkey, enc));
        } else {
            resp_add(r, v.key, v.nkey);
        }
        resp_printf(r, " exp=%lld la=%u cas=%llu fetch=%s cls=%u size=%zu\r\n",
                    /* memcached prints the time since expiry: minus the TTL */
                    v.exptime == 0 ? -1LL : (long long)(clock_wall(&s->clock) - v.exptime),
                    (unsigned)v.idle, (unsigned long long)v.cas, v.fetched ? "yes" : "no",
                    mc_slab_class(size, s->settings.item_size_max), size);
        if (v.handle)
            conn_engine(c)->ops->release(conn_engine(c), v.handle);
    }
    resp_done(r);
}

/* ---- entry points ---- */

static void silent_complete(struct resp *r, const struct eng_result *res)
{
    (void)r;
    (void)res;
}

void meta_run_drop_key(struct conn *c, const char *key, size_t nkey)
{
    /* memcached drops the key's current value, so nobody reads stale data. */
    struct eng_mutation m = { .op = ENG_OP_DELETE, .key = key, .nkey = nkey };
    struct resp *d = conn_resp_new(c);
    d->noreply = true;
    conn_mutate_uncounted(c, d, &m, silent_complete);
}

void meta_run_too_large(struct conn *c, const char *key, size_t nkey)
{
    meta_run_drop_key(c, key, nkey);
    reply_line(c, TOO_LARGE);
}

void meta_run(struct conn *c, const struct meta_req *req)
{
    conn_server(c)->stats.meta_cmds++;
    switch (req->cmd) {
    case MC_GET:
        handle_mg(c, req);
        break;
    case MC_SET:
        handle_ms(c, req);
        break;
    case MC_DELETE:
        handle_md(c, req);
        break;
    case MC_ARITH:
        handle_ma(c, req);
        break;
    case MC_DEBUG:
        handle_me(c, req);
        break;
    case MC_NOOP:
        reply_line(c, "MN\r\n");
        break;
    default:
        reply_line(c, "ERROR\r\n");
        break;
    }
}
