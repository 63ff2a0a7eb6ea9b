/* libcocytus.c - the Cocytus-KV client library's public calls: connect,
 * the key commands (each one attempt function run by lc_run() with routing
 * and retries until the call's deadline), the multi-get split by owner, and
 * flush_all.  A call built from several requests (gat, a store with
 * cas_out, arith_init, mget) spends one retry budget for all of them.
 *
 * Which commands are sent again after a connection broke or a reply did
 * not come, when the server may have applied them: get, set, replace,
 * delete and touch (the same outcome twice; a delete may then answer
 * NOT_FOUND).  Never add, cas, append, prepend, incr or decr: those return
 * COCYTUS_UNAVAILABLE ("... the request may have been applied"), after
 * waiting for their reply until the call's deadline (lc_core.c).  A
 * failure before anything was sent (no connection) is retried for all. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lc_core.h"
#include "lc_map.h"

#define DEFAULT_TIMEOUT_MS 1000
#define DEFAULT_MAX_ATTEMPTS 100       /* above what a deadline of 2 s allows */
#define DEFAULT_RETRY_DELAY_MS 5
#define DEFAULT_DEADLINE_MS 2000
#define MAX_ATTEMPTS_CAP 1000
#define DEADLINE_CAP_MS 3600000
#define ARITH_INIT_ROUNDS 3        /* incr/add races before giving up */
#define AUTH_FIELD_MAX 255         /* longest user or password (what a -Y file holds) */

/* ---- options and connection ---- */

void cocytus_options_init(cocytus_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->binary = 0;
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    o->max_attempts = DEFAULT_MAX_ATTEMPTS;
    o->retry_delay_ms = DEFAULT_RETRY_DELAY_MS;
    o->route = COCYTUS_ROUTE_MAP;
    o->deadline_ms = DEFAULT_DEADLINE_MS;
}

static void sanitize_options(cocytus_options_t *o)
{
    if (o->timeout_ms <= 0)
        o->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (o->max_attempts <= 0)
        o->max_attempts = 1;
    if (o->max_attempts > MAX_ATTEMPTS_CAP)
        o->max_attempts = MAX_ATTEMPTS_CAP;
    if (o->retry_delay_ms < 0)
        o->retry_delay_ms = 0;
    if (o->deadline_ms <= 0)
        o->deadline_ms = DEFAULT_DEADLINE_MS;
    if (o->deadline_ms > DEADLINE_CAP_MS)
        o->deadline_ms = DEADLINE_CAP_MS;
}

static void copy_err(char *err, size_t errlen, const char *msg)
{
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", msg);
}

/* One credential: 1 to AUTH_FIELD_MAX bytes, no spaces or control
 * characters (what a -Y file can hold, and what the authentication set's
 * "user password" data can carry unambiguously). */
static bool credential_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > AUTH_FIELD_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
            return false;
    return true;
}

/* Binary connections authenticate with libmemcached's SASL, which a
 * libmemcached built without it refuses (MEMCACHED_NOT_SUPPORTED). */
static bool sasl_available(cocytus_t *c)
{
    memcached_st *mc = memcached_create(NULL);

    if (mc == NULL) {
        lc_set_error(c, "out of memory");
        return false;
    }
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
    memcached_return_t rc = memcached_set_sasl_auth_data(mc, c->opt.username, c->opt.password);
    if (rc != MEMCACHED_SUCCESS)
        lc_set_error(c, "binary authentication needs libmemcached's SASL (%s): use the ASCII "
                        "protocol", memcached_strerror(mc, rc));
    memcached_free(mc);
    return rc == MEMCACHED_SUCCESS;
}

/* Checks and copies the options' username and password, and builds the
 * authentication set the map fetches and ASCII connections send first.
 * The binary protocol authenticates with libmemcached's SASL (PLAIN, the
 * only mechanism the servers offer). */
static bool setup_credentials(cocytus_t *c)
{
    const char *user = c->opt.username, *pass = c->opt.password;

    c->opt.username = NULL;
    c->opt.password = NULL;
    if (user == NULL && pass == NULL)
        return true;
    if (user == NULL || pass == NULL || !credential_ok(user) || !credential_ok(pass)) {
        lc_set_error(c, "username and password go together, each 1 to %d bytes without "
                        "spaces or control characters", AUTH_FIELD_MAX);
        return false;
    }
    size_t nset = strlen(user) + strlen(pass) + 48;
    c->auth_user = strdup(user);
    c->auth_pass = strdup(pass);
    c->auth_set = malloc(nset);
    if (c->auth_user == NULL || c->auth_pass == NULL || c->auth_set == NULL) {
        lc_set_error(c, "out of memory");
        return false;
    }
    snprintf(c->auth_set, nset, "set auth 0 0 %zu\r\n%s %s\r\n", strlen(user) + 1 + strlen(pass),
             user, pass);
    c->opt.username = c->auth_user;
    c->opt.password = c->auth_pass;
    return !c->opt.binary || sasl_available(c);
}

cocytus_t *cocytus_connect(const char *seeds, char *err, size_t errlen)
{
    return cocytus_connect_with(seeds, NULL, err, errlen);
}

cocytus_t *cocytus_connect_with(const char *seeds, const cocytus_options_t *o,
                                char *err, size_t errlen)
{
    cocytus_t *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        copy_err(err, errlen, "out of memory");
        return NULL;
    }
    if (o != NULL)
        c->opt = *o;
    else
        cocytus_options_init(&c->opt);
    sanitize_options(&c->opt);
    if (!setup_credentials(c)) {
        copy_err(err, errlen, c->err);
        cocytus_close(c);
        return NULL;
    }
    c->nseeds = lc_seeds_parse(seeds, &c->seeds, c->err, sizeof(c->err));
    if (c->nseeds == 0 || !lc_refresh(c, NULL, NULL, 0)) {
        copy_err(err, errlen, c->err[0] ? c->err : "no seed answered");
        cocytus_close(c);
        return NULL;
    }
    c->err[0] = '\0';
    return c;
}

void cocytus_close(cocytus_t *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nconns; i++)
        lc_conn_reset(c, i);
    free(c->conns);
    lc_map_free(c->map);
    free(c->seeds);
    free(c->auth_user);
    free(c->auth_pass);
    free(c->auth_set);
    free(c);
}

/* Keys: 1..250 bytes, and in ASCII no spaces or control characters.  The
 * servers, like memcached, take control characters in text keys, but
 * libmemcached 1.1's ASCII reply parser does not: a VALUE line whose key
 * holds one comes back as an empty value (or a timeout in a multi-get).
 * The binary protocol carries any key bytes; cocytus-proxy uses it. */
static bool key_ok(cocytus_t *c, const char *key, size_t nkey)
{
    if (key == NULL || nkey == 0 || nkey > COCYTUS_KEY_MAX) {
        lc_set_error(c, "key must be 1 to %d bytes", COCYTUS_KEY_MAX);
        return false;
    }
    if (c->opt.binary)
        return true;
    for (size_t i = 0; i < nkey; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch <= ' ' || ch == 0x7f) {
            lc_set_error(c, "key contains a space or control character (use the binary protocol)");
            return false;
        }
    }
    return true;
}

static memcached_return_t run_keyed(cocytus_t *c, const char *key, size_t nkey, bool retry_lost,
                                    lc_attempt_fn fn, void *arg)
{
    struct lc_request rq = { key, nkey, retry_lost, fn, arg };
    return lc_run(c, &rq);
}

/* ---- results ---- */

void cocytus_item_free(cocytus_item_t *it)
{
    if (it == NULL)
        return;
    free(it->value);
    memset(it, 0, sizeof(*it));
}

static bool item_from_result(const memcached_result_st *r, cocytus_item_t *out)
{
    size_t n = memcached_result_length(r);
    char *v = malloc(n + 1);

    if (v == NULL)
        return false;
    if (n > 0)
        memcpy(v, memcached_result_value(r), n);
    v[n] = '\0';
    out->value = v;
    out->nvalue = n;
    out->flags = memcached_result_flags(r);
    out->cas = memcached_result_cas(r);
    return true;
}

/* Called for every value a multi-get returns; false stops on out-of-memory. */
typedef bool (*result_fn)(void *ctx, const memcached_result_st *r);

/* libmemcached ends a fetch that met an error (a MOVED, a lost connection)
 * as if the keys were missing, keeping the error only as the handle's last
 * one; memcached_mget() clears that at the start of each multi-get, so any
 * error there belongs to this one. */
static memcached_return_t fetch_error(const memcached_st *mc)
{
    memcached_return_t err = memcached_last_error(mc);
    return memcached_failed(err) ? err : MEMCACHED_SUCCESS;
}

/* Reads the values of an issued multi-get to its end. */
static memcached_return_t fetch_all(memcached_st *mc, result_fn fn, void *ctx)
{
    memcached_result_st store;
    memcached_return_t rc = MEMCACHED_SUCCESS;
    bool oom = false;

    if (memcached_result_create(mc, &store) == NULL)
        return MEMCACHED_MEMORY_ALLOCATION_FAILURE;
    for (;;) {
        memcached_result_st *r = memcached_fetch_result(mc, &store, &rc);
        if (r == NULL)
            break;
        if (!oom && !fn(ctx, r))
            oom = true;
    }
    memcached_result_free(&store);
    if (rc == MEMCACHED_END || rc == MEMCACHED_NOTFOUND || rc == MEMCACHED_SUCCESS)
        rc = oom ? MEMCACHED_MEMORY_ALLOCATION_FAILURE : fetch_error(mc);
    return rc;
}

/* ---- get ---- */

struct get_arg {
    const char *key;
    size_t nkey;
    cocytus_item_t *out;
    bool found;
};

static bool keep_single(void *ctx, const memcached_result_st *r)
{
    struct get_arg *g = ctx;

    if (g->found)
        return true;
    g->found = item_from_result(r, g->out);
    return g->found;
}

static memcached_return_t attempt_get(memcached_st *mc, void *arg)
{
    struct get_arg *g = arg;
    const char *keys[1] = { g->key };
    size_t lens[1] = { g->nkey };

    cocytus_item_free(g->out);
    g->found = false;
    memcached_return_t rc = memcached_mget(mc, keys, lens, 1);
    if (memcached_failed(rc))
        return rc;
    rc = fetch_all(mc, keep_single, g);
    if (g->found)
        return MEMCACHED_SUCCESS;      /* the value came before any error */
    return rc == MEMCACHED_SUCCESS ? MEMCACHED_NOTFOUND : rc;
}

cocytus_rc cocytus_get(cocytus_t *c, const char *key, size_t nkey, cocytus_item_t *out)
{
    struct get_arg g = { key, nkey, out, false };

    memset(out, 0, sizeof(*out));
    if (!key_ok(c, key, nkey))
        return COCYTUS_INVALID;
    memcached_return_t rc = run_keyed(c, key, nkey, true, attempt_get, &g);
    cocytus_rc r = lc_rc(c, rc);
    if (r != COCYTUS_OK)
        cocytus_item_free(out);
    return r;
}

/* ---- storage ---- */

struct store_arg {
    cocytus_store_op op;
    const char *key;
    size_t nkey;
    const char *value;
    size_t nvalue;
    uint32_t flags;
    time_t exptime;
    uint64_t cas;
};

/* libmemcached's ASCII cas line holds at most 19 digits of cas (it fails a
 * longer one with an allocation error).  No item's cas is that large, so
 * such a cas can only mismatch: the answer is "exists" if the key does. */
#define ASCII_CAS_MAX 9999999999999999999ULL

static memcached_return_t cas_beyond_ascii(memcached_st *mc, const struct store_arg *s)
{
    cocytus_item_t it = { 0 };
    struct get_arg g = { s->key, s->nkey, &it, false };
    memcached_return_t rc = attempt_get(mc, &g);

    cocytus_item_free(&it);
    return rc == MEMCACHED_SUCCESS ? MEMCACHED_DATA_EXISTS : rc;
}

static memcached_return_t attempt_store(memcached_st *mc, void *arg)
{
    const struct store_arg *s = arg;

    if (s->op == COCYTUS_CAS && s->cas > ASCII_CAS_MAX &&
        !memcached_behavior_get(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL))
        return cas_beyond_ascii(mc, s);

    switch (s->op) {
    case COCYTUS_SET:
        return memcached_set(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags);
    case COCYTUS_ADD:
        return memcached_add(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags);
    case COCYTUS_REPLACE:
        return memcached_replace(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags);
    case COCYTUS_APPEND:
        return memcached_append(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags);
    case COCYTUS_PREPEND:
        return memcached_prepend(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags);
    case COCYTUS_CAS:
        return memcached_cas(mc, s->key, s->nkey, s->value, s->nvalue, s->exptime, s->flags,
                             s->cas);
    }
    return MEMCACHED_INVALID_ARGUMENTS;
}

/* The same outcome whichever protocol reported it: add on an existing key
 * and replace/append/prepend on a missing one are "not stored". */
static cocytus_rc store_rc(const cocytus_t *c, cocytus_store_op op, memcached_return_t rc)
{
    cocytus_rc r = lc_rc(c, rc);

    if (op == COCYTUS_ADD && r == COCYTUS_EXISTS)
        return COCYTUS_NOT_STORED;
    if ((op == COCYTUS_REPLACE || op == COCYTUS_APPEND || op == COCYTUS_PREPEND) &&
        r == COCYTUS_NOT_FOUND)
        return COCYTUS_NOT_STORED;
    return r;
}

/* set and replace can be sent twice with the outcome of once; add, cas,
 * append and prepend cannot. */
static bool store_retry_lost(cocytus_store_op op)
{
    return op == COCYTUS_SET || op == COCYTUS_REPLACE;
}

static uint64_t read_back_cas(cocytus_t *c, const char *key, size_t nkey)
{
    cocytus_item_t it;
    uint64_t cas = 0;

    if (cocytus_get(c, key, nkey, &it) == COCYTUS_OK)
        cas = it.cas;
    cocytus_item_free(&it);
    return cas;
}

cocytus_rc cocytus_store(cocytus_t *c, cocytus_store_op op, const char *key, size_t nkey,
                         const char *value, size_t nvalue, uint32_t flags, int64_t exptime,
                         uint64_t cas, uint64_t *cas_out)
{
    struct store_arg s = { op, key, nkey, value ? value : "", nvalue, flags,
                           (time_t)exptime, cas };

    if (cas_out != NULL)
        *cas_out = 0;
    if (!key_ok(c, key, nkey) || op > COCYTUS_CAS)
        return COCYTUS_INVALID;
    bool began = lc_call_begin(c);
    memcached_return_t rc = run_keyed(c, key, nkey, store_retry_lost(op), attempt_store, &s);
    cocytus_rc r = store_rc(c, op, rc);
    if (r == COCYTUS_OK && cas_out != NULL)
        *cas_out = read_back_cas(c, key, nkey);
    lc_call_end(c, began);
    return r;
}

cocytus_rc cocytus_set(cocytus_t *c, const char *key, size_t nkey, const char *value,
                       size_t nvalue, uint32_t flags, int64_t exptime)
{
    return cocytus_store(c, COCYTUS_SET, key, nkey, value, nvalue, flags, exptime, 0, NULL);
}

cocytus_rc cocytus_add(cocytus_t *c, const char *key, size_t nkey, const char *value,
                       size_t nvalue, uint32_t flags, int64_t exptime)
{
    return cocytus_store(c, COCYTUS_ADD, key, nkey, value, nvalue, flags, exptime, 0, NULL);
}

cocytus_rc cocytus_replace(cocytus_t *c, const char *key, size_t nkey, const char *value,
                           size_t nvalue, uint32_t flags, int64_t exptime)
{
    return cocytus_store(c, COCYTUS_REPLACE, key, nkey, value, nvalue, flags, exptime, 0, NULL);
}

cocytus_rc cocytus_append(cocytus_t *c, const char *key, size_t nkey, const char *value,
                          size_t nvalue)
{
    return cocytus_store(c, COCYTUS_APPEND, key, nkey, value, nvalue, 0, 0, 0, NULL);
}

cocytus_rc cocytus_prepend(cocytus_t *c, const char *key, size_t nkey, const char *value,
                           size_t nvalue)
{
    return cocytus_store(c, COCYTUS_PREPEND, key, nkey, value, nvalue, 0, 0, 0, NULL);
}

cocytus_rc cocytus_cas(cocytus_t *c, const char *key, size_t nkey, const char *value,
                       size_t nvalue, uint32_t flags, int64_t exptime, uint64_t cas)
{
    return cocytus_store(c, COCYTUS_CAS, key, nkey, value, nvalue, flags, exptime, cas, NULL);
}

/* ---- delete, touch, gat ---- */

struct key_arg {
    const char *key;
    size_t nkey;
    time_t exptime;
};

static memcached_return_t attempt_delete(memcached_st *mc, void *arg)
{
    const struct key_arg *k = arg;
    return memcached_delete(mc, k->key, k->nkey, 0);
}

static memcached_return_t attempt_touch(memcached_st *mc, void *arg)
{
    const struct key_arg *k = arg;
    return memcached_touch(mc, k->key, k->nkey, k->exptime);
}

cocytus_rc cocytus_delete(cocytus_t *c, const char *key, size_t nkey)
{
    struct key_arg k = { key, nkey, 0 };

    if (!key_ok(c, key, nkey))
        return COCYTUS_INVALID;
    return lc_rc(c, run_keyed(c, key, nkey, true, attempt_delete, &k));
}

cocytus_rc cocytus_touch(cocytus_t *c, const char *key, size_t nkey, int64_t exptime)
{
    struct key_arg k = { key, nkey, (time_t)exptime };

    if (!key_ok(c, key, nkey))
        return COCYTUS_INVALID;
    return lc_rc(c, run_keyed(c, key, nkey, true, attempt_touch, &k));
}

cocytus_rc cocytus_gat(cocytus_t *c, const char *key, size_t nkey, int64_t exptime,
                       cocytus_item_t *out)
{
    memset(out, 0, sizeof(*out));
    bool began = lc_call_begin(c);
    cocytus_rc r = cocytus_touch(c, key, nkey, exptime);
    if (r == COCYTUS_OK)
        r = cocytus_get(c, key, nkey, out);
    lc_call_end(c, began);
    return r;
}

/* ---- incr, decr ---- */

struct arith_arg {
    bool decr;
    const char *key;
    size_t nkey;
    uint64_t delta;
    uint64_t value;
};

static memcached_return_t attempt_arith(memcached_st *mc, void *arg)
{
    struct arith_arg *a = arg;

    if (a->decr)
        return memcached_decrement_by_key(mc, a->key, a->nkey, a->key, a->nkey, a->delta,
                                          &a->value);
    return memcached_increment_by_key(mc, a->key, a->nkey, a->key, a->nkey, a->delta,
                                      &a->value);
}

static cocytus_rc arith(cocytus_t *c, bool decr, const char *key, size_t nkey, uint64_t delta,
                        uint64_t *value)
{
    struct arith_arg a = { decr, key, nkey, delta, 0 };

    if (!key_ok(c, key, nkey))
        return COCYTUS_INVALID;
    cocytus_rc r = lc_rc(c, run_keyed(c, key, nkey, false, attempt_arith, &a));
    if (r == COCYTUS_OK && value != NULL)
        *value = a.value;
    return r;
}

cocytus_rc cocytus_incr(cocytus_t *c, const char *key, size_t nkey, uint64_t delta,
                        uint64_t *value)
{
    return arith(c, false, key, nkey, delta, value);
}

cocytus_rc cocytus_decr(cocytus_t *c, const char *key, size_t nkey, uint64_t delta,
                        uint64_t *value)
{
    return arith(c, true, key, nkey, delta, value);
}

cocytus_rc cocytus_arith_init(cocytus_t *c, int decr, const char *key, size_t nkey,
                              uint64_t delta, uint64_t initial, int64_t exptime,
                              uint64_t *value)
{
    char text[24];
    int n = snprintf(text, sizeof(text), "%" PRIu64, initial);
    cocytus_rc r = COCYTUS_NOT_FOUND;
    bool began = lc_call_begin(c);

    for (int round = 0; round < ARITH_INIT_ROUNDS; round++) {
        r = arith(c, decr != 0, key, nkey, delta, value);
        if (r != COCYTUS_NOT_FOUND)
            break;
        r = cocytus_add(c, key, nkey, text, (size_t)n, 0, exptime);
        if (r == COCYTUS_OK && value != NULL)
            *value = initial;
        if (r != COCYTUS_NOT_STORED)
            break;
    }
    lc_call_end(c, began);
    return r;
}

/* ---- multi-get ---- */

/* One server's share of a multi-get. */
struct mget_group {
    cocytus_t *c;
    const char *const *keys;
    const size_t *nkeys;
    size_t *idx;          /* indexes of this group's keys */
    size_t n;
    size_t cursor;        /* where the next returned key is looked for first */
    bool *done;
    cocytus_item_cb cb;
    void *ctx;
};

/* The first key of the group not yet answered that equals key. */
static size_t group_match(struct mget_group *g, const char *key, size_t nkey)
{
    for (size_t k = 0; k < g->n; k++) {
        size_t j = (g->cursor + k) % g->n;
        size_t i = g->idx[j];
        if (!g->done[i] && g->nkeys[i] == nkey && memcmp(g->keys[i], key, nkey) == 0) {
            g->cursor = (j + 1) % g->n;
            return i;
        }
    }
    return SIZE_MAX;
}

static bool deliver(void *ctx, const memcached_result_st *r)
{
    struct mget_group *g = ctx;
    const char *key = memcached_result_key_value(r);
    size_t nkey = memcached_result_key_length(r);
    size_t i = group_match(g, key, nkey);
    cocytus_item_t it;

    if (i == SIZE_MAX)
        return true;
    g->done[i] = true;
    it.value = (char *)memcached_result_value(r);
    it.nvalue = memcached_result_length(r);
    it.flags = memcached_result_flags(r);
    it.cas = memcached_result_cas(r);
    g->cb(g->ctx, g->keys[i], g->nkeys[i], &it);
    return true;
}

static memcached_return_t mget_group_attempt(memcached_st *mc, struct mget_group *g)
{
    const char **keys = malloc(g->n * sizeof(*keys));
    size_t *lens = malloc(g->n * sizeof(*lens));
    memcached_return_t rc = MEMCACHED_MEMORY_ALLOCATION_FAILURE;

    if (keys != NULL && lens != NULL) {
        for (size_t j = 0; j < g->n; j++) {
            keys[j] = g->keys[g->idx[j]];
            lens[j] = g->nkeys[g->idx[j]];
        }
        g->cursor = 0;
        rc = memcached_mget(mc, keys, lens, g->n);
        if (!memcached_failed(rc))
            rc = fetch_all(mc, deliver, g);
    }
    free(keys);
    free(lens);
    if (rc == MEMCACHED_SUCCESS)
        for (size_t j = 0; j < g->n; j++)
            g->done[g->idx[j]] = true;     /* the rest are misses */
    return rc;
}

/* State of one cocytus_mget call. */
struct mget_call {
    cocytus_t *c;
    const char *const *keys;
    const size_t *nkeys;
    size_t n;
    bool *done;
    size_t *target;       /* connection per key for this round */
    size_t *order;        /* pending keys sorted by target */
    cocytus_item_cb cb;
    void *ctx;
    cocytus_rc final;     /* first error that is an answer, not a retry reason */
};

/* Sorts the pending keys by their connection (insertion into buckets). */
static size_t order_pending(struct mget_call *m)
{
    size_t np = 0;

    for (size_t i = 0; i < m->n; i++) {
        if (m->done[i])
            continue;
        m->target[i] = lc_route(m->c, lc_key_slot(m->keys[i], m->nkeys[i]));
        size_t j = np++;
        while (j > 0 && m->target[m->order[j - 1]] > m->target[i]) {
            m->order[j] = m->order[j - 1];
            j--;
        }
        m->order[j] = i;
    }
    return np;
}

/* What a group's multi-get left to do. */
enum group_next {
    GROUP_DONE,           /* answered (values, misses, or an error to report) */
    GROUP_AGAIN,          /* MOVED (the map was already updated), or refused as an
                             unauthenticated connection: route again */
    GROUP_REFRESH,        /* server failed: fetch the map, then route again */
    GROUP_HUNG            /* server timed out: wait for a new map (up to
                             timeout_ms) before trying it again */
};

static enum group_next run_group(struct mget_call *m, size_t *idx, size_t n)
{
    cocytus_t *c = m->c;
    size_t t = m->target[idx[0]];
    struct mget_group g = { c, m->keys, m->nkeys, idx, n, 0, m->done, m->cb, m->ctx };
    memcached_return_t rc;
    struct lc_moved mv;

    memcached_st *mc = lc_conn_handle(c, t, &rc);
    if (mc == NULL) {
        if (rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE)
            return GROUP_DONE;
        c->stats.conn_failures++;
        return rc == MEMCACHED_TIMEOUT ? GROUP_HUNG : GROUP_REFRESH;
    }
    rc = lc_attempt_rc(mc, mget_group_attempt(mc, &g));
    switch (lc_classify(c, mc, rc, &mv)) {
    case LC_FINAL:
        if (memcached_failed(rc)) {
            if (m->final == COCYTUS_OK)
                m->final = lc_rc(c, rc);
            for (size_t j = 0; j < n; j++)
                m->done[idx[j]] = true;
        }
        return GROUP_DONE;
    case LC_MOVED:
        lc_follow_moved(c, t, mv.slot, &mv);
        return GROUP_AGAIN;
    case LC_LOST:
        c->stats.conn_failures++;
        lc_conn_reset(c, t);
        return rc == MEMCACHED_TIMEOUT ? GROUP_HUNG : GROUP_REFRESH;
    case LC_SUSPECT:
        lc_conn_reset(c, t);
        return GROUP_REFRESH;
    case LC_REAUTH:
        lc_conn_reset(c, t);      /* refused before it ran: again, authenticated */
        return GROUP_AGAIN;
    }
    return GROUP_REFRESH;
}

/* One round: every pending key's owner gets one multi-get.  Returns the
 * most demanding follow-up any group needs. */
static enum group_next mget_round(struct mget_call *m, size_t np)
{
    enum group_next next = GROUP_DONE;
    size_t start = 0;

    for (size_t j = 1; j <= np; j++) {
        if (j == np || m->target[m->order[j]] != m->target[m->order[start]]) {
            enum group_next g = run_group(m, m->order + start, j - start);
            if (g > next)
                next = g;
            start = j;
        }
    }
    return next;
}

static cocytus_rc mget_follow(cocytus_t *c, const char *const *keys, const size_t *nkeys,
                              size_t n, cocytus_item_cb cb, void *ctx)
{
    cocytus_rc first = COCYTUS_OK;

    for (size_t i = 0; i < n; i++) {
        cocytus_item_t it;
        cocytus_rc r = cocytus_get(c, keys[i], nkeys[i], &it);
        if (r == COCYTUS_OK)
            cb(ctx, keys[i], nkeys[i], &it);
        else if (r != COCYTUS_NOT_FOUND && first == COCYTUS_OK)
            first = r;
        cocytus_item_free(&it);
    }
    return first;
}

static bool mget_alloc(struct mget_call *m)
{
    m->done = calloc(m->n, sizeof(*m->done));
    m->target = calloc(m->n, sizeof(*m->target));
    m->order = calloc(m->n, sizeof(*m->order));
    return m->done && m->target && m->order;
}

static void mget_free(struct mget_call *m)
{
    free(m->done);
    free(m->target);
    free(m->order);
}

cocytus_rc cocytus_mget(cocytus_t *c, const char *const *keys, const size_t *nkeys, size_t n,
                        cocytus_item_cb cb, void *ctx)
{
    struct mget_call m = { c, keys, nkeys, n, NULL, NULL, NULL, cb, ctx, COCYTUS_OK };
    cocytus_rc r = COCYTUS_UNAVAILABLE;

    for (size_t i = 0; i < n; i++)
        if (!key_ok(c, keys[i], nkeys[i]))
            return COCYTUS_INVALID;
    if (n == 0)
        return COCYTUS_OK;
    bool began = lc_call_begin(c);
    if (c->opt.route == COCYTUS_ROUTE_FOLLOW) {
        r = mget_follow(c, keys, nkeys, n, cb, ctx);
        lc_call_end(c, began);
        return r;
    }
    if (!mget_alloc(&m)) {
        mget_free(&m);
        lc_call_end(c, began);
        return COCYTUS_NO_MEMORY;
    }
    c->stats.requests += n;
    int64_t start = lc_now_ms();
    enum group_next next = GROUP_DONE;
    for (int attempt = 0;; attempt++) {
        size_t np = order_pending(&m);
        if (np == 0) {
            r = m.final;
            break;
        }
        if (attempt > 0 && !lc_may_retry(c, attempt)) {
            char last[LC_ERR_MAX];
            memcpy(last, c->err, sizeof(last));
            lc_set_error(c, "multi-get gave up after %d tries in %" PRId64 " ms: %s", attempt,
                         lc_now_ms() - start, last);
            break;
        }
        if (attempt > 0) {
            c->stats.retries++;
            if (next == GROUP_HUNG)
                lc_await_new_map(c, c->opt.timeout_ms, attempt);
            else if (next == GROUP_REFRESH)
                lc_refresh_for_retry(c, NULL, NULL, 0);
            lc_backoff(c, attempt);
            np = order_pending(&m);
        }
        next = mget_round(&m, np);
    }
    mget_free(&m);
    lc_call_end(c, began);
    return r;
}

/* ---- flush_all ---- */

/* Whether endpoint i owns at least one slot of the map. */
static bool serves_slots(const struct lc_map *m, size_t i)
{
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++)
        if (m->owner[s] == i)
            return true;
    return false;
}

cocytus_rc cocytus_flush_all(cocytus_t *c, int64_t delay)
{
    cocytus_rc first = COCYTUS_OK;

    for (size_t i = 0; i < c->map->n; i++) {
        memcached_return_t rc;
        if (!serves_slots(c->map, i))
            continue;
        memcached_st *mc = lc_conn_handle(c, i, &rc);
        if (mc != NULL) {
            rc = memcached_flush(mc, (time_t)delay);
            if (memcached_failed(rc)) {
                lc_note_error(c, mc, rc);
                lc_conn_reset(c, i);
            }
        }
        cocytus_rc r = lc_rc(c, rc);
        if (r != COCYTUS_OK && first == COCYTUS_OK)
            first = r;
    }
    return first;
}

/* ---- map and diagnostics ---- */

cocytus_rc cocytus_refresh(cocytus_t *c)
{
    return lc_refresh(c, NULL, NULL, 0) ? COCYTUS_OK : COCYTUS_UNAVAILABLE;
}

unsigned cocytus_key_slot(const char *key, size_t nkey)
{
    return lc_key_slot(key, nkey);
}

uint64_t cocytus_epoch(const cocytus_t *c)
{
    return c->map->epoch;
}

size_t cocytus_endpoint_count(const cocytus_t *c)
{
    return c->map->n;
}

int cocytus_endpoint(const cocytus_t *c, size_t i, char *buf, size_t cap)
{
    if (i >= c->map->n)
        return -1;
    lc_addr_format(&c->map->ep[i], buf, cap);
    return 0;
}

size_t cocytus_slot_owner(const cocytus_t *c, unsigned slot)
{
    return c->map->owner[slot & (COCYTUS_SLOTS - 1)];
}

void cocytus_get_stats(const cocytus_t *c, cocytus_stats_t *out)
{
    *out = c->stats;
}

const char *cocytus_last_error(const cocytus_t *c)
{
    return c->err;
}

const char *cocytus_strerror(cocytus_rc rc)
{
    switch (rc) {
    case COCYTUS_OK:           return "ok";
    case COCYTUS_NOT_FOUND:    return "not found";
    case COCYTUS_NOT_STORED:   return "not stored";
    case COCYTUS_EXISTS:       return "exists (cas mismatch)";
    case COCYTUS_TOO_LARGE:    return "value too large";
    case COCYTUS_NON_NUMERIC:  return "value is not a number";
    case COCYTUS_NO_MEMORY:    return "out of memory";
    case COCYTUS_INVALID:      return "invalid argument";
    case COCYTUS_UNAVAILABLE:  return "server unavailable";
    case COCYTUS_SERVER_ERROR: return "server error";
    }
    return "unknown error";
}
