/* test_cgroup.c - integration test of a whole coding group: starts RS(3,5)
 * and RS(2,4) groups of real cocytus-server processes on loopback, runs a
 * seeded random mix of every mutation (set, add, replace, append, prepend,
 * cas, incr, decr, delete, touch, flush_all) and reads with value sizes from
 * 1 B to 1 MB against a reference model, in a region small enough that
 * evictions happen and with exptimes short enough that expiry happens, then
 * requires `cocytus-cli verify` (used ranges and full regions) and
 * `cocytus-cli decode-check` to pass.
 *
 * A second test reads values the client does not take at once while the
 * same keys are overwritten many times: a data process answers a get from
 * its region without copying, and must copy a reply its socket did not take
 * before a later commit can reuse the range (memcached/conn.c).
 *
 * A third stops a parity process to hold a write in flight and checks that
 * a pipelined get of another key is served meanwhile, while gets of the
 * written key, or behind a flush_all, wait, and that the replies queued
 * behind the write are bounded (1024 replies, about 4 MB of values).
 *
 * The model of a key is the set of states it may be in: absent and/or
 * present with one known value.  An eviction on the key's data process (its
 * "evictions" stat moved) or an expiry window that is open makes absent
 * possible; every reply must be consistent with the possible states, and a
 * reply narrows them again. */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "cgroup_harness.h"
#include "harness.h"

#define KEYS_PER_DP 40
#define COUNTERS_PER_DP 6
#define PHASE1_OPS 1000
#define PHASE2_OPS 700
#define MAX_VALUE (1000 * 1000)          /* 1 MB: below the 1 MiB item limit */
#define MAX_APPEND 200
#define EXPIRY_SLACK_MS 1300             /* 1 s clock granularity + scheduling */
#define EXPIRY_PAUSE_MS 2500             /* between the phases: short exptimes pass */
#define MGET_MAX 5
#define CLI_TIMEOUT_MS 30000
#define CLI_OUT_MAX 16384
#define REGION "2m"
#define KEY_HISTORY 8

/* ---- seeded random numbers (xorshift64*) ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return rng_next(s) % n;
}

/* ---- the model ---- */

struct mkey {
    char key[40];
    size_t nkey;
    int dp;
    bool counter;             /* holds decimal numbers only (incr/decr target) */
    bool can_present;         /* may hold `value` */
    bool can_absent;          /* may be missing */
    bool expired;             /* absent because its exptime passed */
    uint8_t *value;
    size_t len;
    uint32_t flags;
    int64_t exp_lo, exp_hi;   /* ms: surely there before lo, surely gone after hi (0: never) */
    char hist[KEY_HISTORY][128];  /* the last events on this key, printed on a failure */
    unsigned nhist;
};

struct counts {
    long ops, hits, misses, stored, not_stored, exists, not_found;
    long eviction_events, expired_misses, ooms, flushes;
};

struct workload {
    struct cgroup *g;
    bool binary;
    uint64_t rng;
    memcached_st *mc[CG_MAX_PROCS];
    raw_conn *stats_conn[CG_MAX_PROCS];
    uint64_t evictions[CG_MAX_PROCS];
    int64_t srv_time[CG_MAX_PROCS];  /* server clocks at the last stats read */
    struct mkey *keys;
    int nkeys;
    uint8_t *buf;             /* scratch for new values */
    struct counts c;
    char failure[4096];       /* first failure; empty while all is well */
    int64_t t_start;          /* ms, for the key histories */
    bool history_added;       /* the failure already shows a key's history */
};

static bool expect(struct workload *w, bool cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first failure; the workload stops at it. */
static bool expect(struct workload *w, bool cond, const char *fmt, ...)
{
    if (cond || w->failure[0] != '\0')
        return cond;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->failure, sizeof w->failure, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof w->failure)
        snprintf(w->failure + n, sizeof w->failure - (size_t)n, " (after %ld ops)", w->c.ops);
    return false;
}

static void trace(struct workload *w, struct mkey *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Notes an event in k's history: time since the start, the operation
 * count, what happened.  A failure prints the key's history, so a failure
 * that depends on timing can be explained from the test log alone. */
static void trace(struct workload *w, struct mkey *k, const char *fmt, ...)
{
    char *line = k->hist[k->nhist++ % KEY_HISTORY];
    int n = snprintf(line, sizeof k->hist[0], "%6" PRId64 " ms op %ld: ", harness_now_ms() - w->t_start,
                     w->c.ops);
    if (n < 0 || (size_t)n >= sizeof k->hist[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof k->hist[0] - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Appends k's history (oldest first) to the recorded failure. */
static void add_history(struct workload *w, const struct mkey *k)
{
    w->history_added = true;
    size_t used = strlen(w->failure);
    unsigned first = k->nhist > KEY_HISTORY ? k->nhist - KEY_HISTORY : 0;
    int n = snprintf(w->failure + used, sizeof w->failure - used, "\nhistory of %s (now %" PRId64
                     " ms; present %d absent %d, expiry window [%" PRId64 ", %" PRId64 "]):",
                     k->key, harness_now_ms() - w->t_start, k->can_present, k->can_absent,
                     k->exp_lo ? k->exp_lo - w->t_start : 0, k->exp_hi ? k->exp_hi - w->t_start : 0);
    for (unsigned i = first; i < k->nhist && n >= 0; i++) {
        used = strlen(w->failure);
        n = snprintf(w->failure + used, sizeof w->failure - used, "\n  %s",
                     k->hist[i % KEY_HISTORY]);
    }
}

static void set_absent(struct mkey *k)
{
    k->can_present = false;
    k->can_absent = true;
    k->len = 0;
    k->exp_lo = k->exp_hi = 0;
}

static void set_expiry(struct mkey *k, int exptime, int64_t t0, int64_t t1)
{
    k->exp_lo = exptime ? t0 + exptime * 1000 - EXPIRY_SLACK_MS : 0;
    k->exp_hi = exptime ? t1 + exptime * 1000 + EXPIRY_SLACK_MS : 0;
}

static void set_present(struct mkey *k, const uint8_t *v, size_t len, uint32_t flags)
{
    free(k->value);
    k->value = malloc(len ? len : 1);
    memcpy(k->value, v, len);
    k->len = len;
    k->flags = flags;
    k->can_present = true;
    k->can_absent = false;
    k->expired = false;
}

/* Advances the expiry knowledge of k to now. */
static void age(struct mkey *k)
{
    if (!k->can_present || k->exp_hi == 0)
        return;
    int64_t t = harness_now_ms();
    if (t > k->exp_hi) {
        set_absent(k);
        k->expired = true;
    } else if (t >= k->exp_lo) {
        k->can_absent = true;
    }
}

/* Digits, then only the spaces an in-place incr/decr pads with. */
static bool is_numeric(const uint8_t *v, size_t len, uint64_t *out)
{
    uint64_t x = 0;
    size_t digits = 0;
    while (digits < len && v[digits] >= '0' && v[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 20)
        return false;
    for (size_t i = digits; i < len; i++)
        if (v[i] != ' ')
            return false;
    for (size_t i = 0; i < digits; i++)
        x = x * 10 + (uint64_t)(v[i] - '0');
    *out = x;
    return true;
}

/* ---- values ---- */

static size_t random_size(struct workload *w)
{
    uint64_t r = rng_below(&w->rng, 100);
    if (r < 55)
        return 1 + rng_below(&w->rng, 64);
    if (r < 80)
        return 65 + rng_below(&w->rng, 4096 - 64);
    if (r < 91)
        return 4097 + rng_below(&w->rng, 65536 - 4096);
    return 65537 + rng_below(&w->rng, MAX_VALUE - 65536);
}

/* A new value for k in w->buf; returns its length. */
static size_t make_value(struct workload *w, const struct mkey *k)
{
    if (k->counter) {
        uint64_t r = rng_below(&w->rng, 10);
        uint64_t v = r == 0 ? UINT64_MAX - rng_below(&w->rng, 1000) : rng_below(&w->rng, 100000);
        return (size_t)sprintf((char *)w->buf, "%" PRIu64, v);
    }
    size_t len = random_size(w);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t r = rng_next(&w->rng);
        memcpy(w->buf + i, &r, len - i < 8 ? len - i : 8);
    }
    return len;
}

static int random_exptime(struct workload *w)
{
    uint64_t r = rng_below(&w->rng, 100);
    return r < 15 ? 1 : r < 25 ? 2 : 0;
}

/* ---- evictions ---- */

struct srv_stats {
    uint64_t evictions, expired_removed;
    int64_t time;             /* the server's clock (unix seconds) */
};

static bool stat_value(struct workload *w, int dp, const char *reply, const char *name,
                       uint64_t *out)
{
    char want[64];
    snprintf(want, sizeof want, "STAT %s ", name);
    const char *p = strstr(reply, want);
    if (!expect(w, p != NULL, "data %d: stats lacks %s", dp, name))
        return false;
    *out = strtoull(p + strlen(want), NULL, 10);
    return true;
}

static bool read_stats(struct workload *w, int dp, struct srv_stats *st)
{
    static char reply[RAW_BUF_SIZE];
    raw_conn *c = w->stats_conn[dp];
    uint64_t t = 0;
    if (!raw_send_str(c, "stats\r\n") ||
        raw_read_until(c, "END\r\n", reply, sizeof reply, HARNESS_IO_TIMEOUT_MS) < 0)
        return expect(w, false, "data %d: no reply to stats", dp);
    if (!stat_value(w, dp, reply, "evictions", &st->evictions) ||
        !stat_value(w, dp, reply, "expired_removed", &st->expired_removed) ||
        !stat_value(w, dp, reply, "time", &t))
        return false;
    st->time = (int64_t)t;
    return true;
}

static bool read_evictions(struct workload *w, int dp, uint64_t *out)
{
    struct srv_stats st;
    if (!read_stats(w, dp, &st))
        return false;
    *out = st.evictions;
    w->srv_time[dp] = st.time;
    return true;
}

/* Called right after each mutation's reply, before the reply is checked:
 * if it evicted, every key of dp may be gone (the mutated key too: its
 * own old value can be the LRU tail). */
static void note_evictions(struct workload *w, int dp)
{
    uint64_t ev;
    if (!read_evictions(w, dp, &ev) || ev == w->evictions[dp])
        return;
    w->evictions[dp] = ev;
    w->c.eviction_events++;
    for (int i = 0; i < w->nkeys; i++)
        if (w->keys[i].dp == dp && w->keys[i].can_present) {
            w->keys[i].can_absent = true;
            trace(w, &w->keys[i], "evictions on data %d now %" PRIu64, dp, ev);
        }
}

/* ---- checking replies ---- */

static bool check_hit(struct workload *w, struct mkey *k, const char *v, size_t len,
                      uint32_t flags, const char *op)
{
    w->c.hits++;
    if (!expect(w, k->can_present, "%s %s: hit (%zu bytes) on a key that must be absent%s",
                op, k->key, len, k->expired ? " (expired)" : "") ||
        !expect(w, len == k->len && memcmp(v, k->value, len) == 0,
                "%s %s: value differs (%zu bytes, want %zu)", op, k->key, len, k->len) ||
        !expect(w, flags == k->flags, "%s %s: flags %u, want %u", op, k->key, flags, k->flags)) {
        add_history(w, k);
        return false;
    }
    k->can_absent = false;
    trace(w, k, "%s: hit, %zu bytes", op, len);
    return true;
}

static bool check_miss(struct workload *w, struct mkey *k, const char *op)
{
    w->c.misses++;
    if (k->expired)
        w->c.expired_misses++;
    if (!expect(w, k->can_absent, "%s %s: miss on a key that must hold %zu bytes", op,
                k->key, k->len)) {
        struct srv_stats st;
        if (read_stats(w, k->dp, &st)) {
            size_t used = strlen(w->failure);
            snprintf(w->failure + used, sizeof w->failure - used,
                     "\nserver now: time %" PRId64 " (wall %ld) evictions %" PRIu64
                     " expired_removed %" PRIu64, st.time, (long)time(NULL), st.evictions,
                     st.expired_removed);
        }
        add_history(w, k);
        return false;
    }
    bool expired = k->expired;
    set_absent(k);
    k->expired = expired;
    trace(w, k, "%s: miss%s", op, expired ? " (expired)" : "");
    return true;
}

/* An out-of-memory reply: the old value may or may not be left. */
static bool is_oom(memcached_return_t rc)
{
    return rc == MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE ||
           rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE;
}

static void note_oom(struct workload *w, struct mkey *k, const char *op)
{
    w->c.ooms++;
    k->can_absent = true;
    trace(w, k, "%s: out of memory", op);
}

static bool unexpected(struct workload *w, struct mkey *k, const char *op, memcached_return_t rc)
{
    return expect(w, false, "%s %s: unexpected reply: %s (%s)", op, k->key,
                  memcached_strerror(w->mc[k->dp], rc), memcached_last_error_message(w->mc[k->dp]));
}

/* ---- operations ---- */

static bool op_get(struct workload *w, struct mkey *k)
{
    size_t len = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    char *v = memcached_get(w->mc[k->dp], k->key, k->nkey, &len, &flags, &rc);
    bool ok;
    if (rc == MEMCACHED_SUCCESS)
        ok = check_hit(w, k, v ? v : "", len, flags, "get");
    else if (rc == MEMCACHED_NOTFOUND)
        ok = check_miss(w, k, "get");
    else
        ok = unexpected(w, k, "get", rc);
    free(v);
    return ok;
}

/* Multi-get of up to MGET_MAX keys of k's data process. */
static bool op_mget(struct workload *w, struct mkey *first)
{
    struct mkey *ks[MGET_MAX];
    const char *names[MGET_MAX];
    size_t lens[MGET_MAX];
    bool seen[MGET_MAX] = { false };
    int n = 0;
    for (int tries = 0; tries < 50 && n < MGET_MAX; tries++) {
        struct mkey *k = &w->keys[rng_below(&w->rng, (uint64_t)w->nkeys)];
        bool dup = false;
        for (int i = 0; i < n; i++)
            dup = dup || ks[i] == k;
        if (k->dp != first->dp || dup)
            continue;
        age(k);
        ks[n] = k;
        names[n] = k->key;
        lens[n] = k->nkey;
        n++;
    }
    memcached_st *mc = w->mc[first->dp];
    memcached_return_t rc = memcached_mget(mc, names, lens, (size_t)n);
    if (rc != MEMCACHED_SUCCESS)
        return unexpected(w, first, "mget", rc);
    memcached_result_st *res;
    bool ok = true;
    for (int guard = 0; guard <= n && (res = memcached_fetch_result(mc, NULL, &rc)) != NULL; guard++) {
        const char *key = memcached_result_key_value(res);
        size_t kl = memcached_result_key_length(res);
        int i = 0;
        while (i < n && !(lens[i] == kl && memcmp(names[i], key, kl) == 0))
            i++;
        if (ok && expect(w, i < n && !seen[i], "mget: unexpected or repeated key %.*s", (int)kl, key)) {
            seen[i] = true;
            ok = check_hit(w, ks[i], memcached_result_value(res), memcached_result_length(res),
                           memcached_result_flags(res), "mget");
        } else {
            ok = false;
        }
        memcached_result_free(res);
    }
    for (int i = 0; i < n && ok; i++)
        if (!seen[i])
            ok = check_miss(w, ks[i], "mget");
    return ok;
}

enum store_kind { ST_SET, ST_ADD, ST_REPLACE };

static bool op_store(struct workload *w, struct mkey *k, enum store_kind kind)
{
    static const char *const names[] = { "set", "add", "replace" };
    size_t len = make_value(w, k);
    uint32_t flags = (uint32_t)rng_below(&w->rng, 65536);
    int exptime = random_exptime(w);
    memcached_st *mc = w->mc[k->dp];
    int64_t t0 = harness_now_ms();
    memcached_return_t rc =
        kind == ST_SET ? memcached_set(mc, k->key, k->nkey, (char *)w->buf, len, exptime, flags)
        : kind == ST_ADD ? memcached_add(mc, k->key, k->nkey, (char *)w->buf, len, exptime, flags)
        : memcached_replace(mc, k->key, k->nkey, (char *)w->buf, len, exptime, flags);
    int64_t t1 = harness_now_ms();
    note_evictions(w, k->dp);
    const char *op = names[kind];
    if (rc == MEMCACHED_SUCCESS) {
        w->c.stored++;
        if (!expect(w, kind == ST_SET || (kind == ST_ADD ? k->can_absent : k->can_present),
                    "%s %s: stored, but the key must be %s", op, k->key,
                    kind == ST_ADD ? "present" : "absent"))
            return false;
        set_present(k, w->buf, len, flags);
        set_expiry(k, exptime, t0, t1);
        trace(w, k, "%s: stored %zu bytes, exptime %d, reply after %" PRId64 " ms, srv %" PRId64
              " wall %ld", op, len, exptime, t1 - t0, w->srv_time[k->dp], (long)time(NULL));
        return true;
    }
    /* The binary protocol says "exists" for add and "not found" for replace. */
    if ((kind == ST_ADD && (rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_DATA_EXISTS)) ||
        (kind == ST_REPLACE && (rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_NOTFOUND))) {
        w->c.not_stored++;
        if (kind == ST_ADD) {
            if (!expect(w, k->can_present, "add %s: not stored, but the key must be absent", k->key))
                return false;
            k->can_absent = false;
            trace(w, k, "add: not stored");
            return true;
        }
        return check_miss(w, k, "replace");
    }
    if (is_oom(rc)) {
        note_oom(w, k, op);
        return true;
    }
    return unexpected(w, k, op, rc);
}

static bool op_concat(struct workload *w, struct mkey *k, bool append)
{
    const char *op = append ? "append" : "prepend";
    if (k->counter || k->len + MAX_APPEND > MAX_VALUE)
        return op_get(w, k);
    size_t n = 1 + rng_below(&w->rng, MAX_APPEND);
    for (size_t i = 0; i < n; i++)
        w->buf[i] = (uint8_t)('a' + rng_below(&w->rng, 26));
    memcached_st *mc = w->mc[k->dp];
    memcached_return_t rc = append
        ? memcached_append(mc, k->key, k->nkey, (char *)w->buf, n, 0, 0)
        : memcached_prepend(mc, k->key, k->nkey, (char *)w->buf, n, 0, 0);
    note_evictions(w, k->dp);
    if (rc == MEMCACHED_SUCCESS) {
        w->c.stored++;
        if (!expect(w, k->can_present, "%s %s: stored, but the key must be absent", op, k->key))
            return false;
        uint8_t *v = malloc(k->len + n);
        memcpy(append ? v : v + n, k->value, k->len);
        memcpy(append ? v + k->len : v, w->buf, n);
        free(k->value);
        k->value = v;
        k->len += n;
        k->can_absent = false;
        trace(w, k, "%s: stored %zu more bytes", op, n);
        return true;
    }
    if (rc == MEMCACHED_NOTSTORED || rc == MEMCACHED_NOTFOUND) {
        w->c.not_stored++;
        return check_miss(w, k, op);
    }
    if (is_oom(rc)) {
        note_oom(w, k, op);
        return true;
    }
    return unexpected(w, k, op, rc);
}

/* gets: the cas of k, or 0 on a miss (checked against the model). */
static bool fetch_cas(struct workload *w, struct mkey *k, uint64_t *cas)
{
    memcached_st *mc = w->mc[k->dp];
    const char *names[1] = { k->key };
    size_t lens[1] = { k->nkey };
    memcached_return_t rc = memcached_mget(mc, names, lens, 1);
    if (rc != MEMCACHED_SUCCESS)
        return unexpected(w, k, "gets", rc);
    memcached_result_st *res;
    bool ok = true, hit = false;
    *cas = 0;
    for (int guard = 0; guard < 2 && (res = memcached_fetch_result(mc, NULL, &rc)) != NULL; guard++) {
        if (!hit)
            ok = check_hit(w, k, memcached_result_value(res), memcached_result_length(res),
                           memcached_result_flags(res), "gets");
        *cas = memcached_result_cas(res);
        hit = true;
        memcached_result_free(res);
    }
    if (!hit)
        ok = check_miss(w, k, "gets");
    return ok && expect(w, !hit || *cas != 0, "gets %s: cas 0", k->key);
}

static bool op_cas(struct workload *w, struct mkey *k)
{
    uint64_t cas = 0;
    if (!fetch_cas(w, k, &cas))
        return false;
    bool right = cas != 0 && rng_below(&w->rng, 3) != 0;
    uint64_t send = right ? cas : (cas ? cas + 1 + rng_below(&w->rng, 1000) : 1 + rng_below(&w->rng, 1000));
    size_t len = make_value(w, k);
    uint32_t flags = (uint32_t)rng_below(&w->rng, 65536);
    age(k);
    memcached_return_t rc = memcached_cas(w->mc[k->dp], k->key, k->nkey, (char *)w->buf, len,
                                          0, flags, send);
    note_evictions(w, k->dp);
    if (rc == MEMCACHED_SUCCESS) {
        w->c.stored++;
        if (!expect(w, right && k->can_present, "cas %s: stored with a %s cas", k->key,
                    right ? "current (but the key must be absent)" : "wrong"))
            return false;
        set_present(k, w->buf, len, flags);
        k->exp_lo = k->exp_hi = 0;
        trace(w, k, "cas: stored %zu bytes", len);
        return true;
    }
    if (rc == MEMCACHED_DATA_EXISTS) {
        w->c.exists++;
        if (!expect(w, !right && k->can_present, "cas %s: EXISTS with the %s cas", k->key,
                    right ? "current" : "wrong cas, but the key must be absent; the"))
            return false;
        k->can_absent = false;
        trace(w, k, "cas: exists");
        return true;
    }
    if (rc == MEMCACHED_NOTFOUND) {
        w->c.not_found++;
        return check_miss(w, k, "cas");
    }
    if (is_oom(rc)) {
        note_oom(w, k, "cas");
        return true;
    }
    return unexpected(w, k, "cas", rc);
}

static bool op_arith(struct workload *w, struct mkey *k, bool incr)
{
    const char *op = incr ? "incr" : "decr";
    uint64_t old = 0, got = 0;
    if (!k->counter || (k->can_present && !is_numeric(k->value, k->len, &old)))
        return op_get(w, k);
    /* libmemcached's incr/decr take a 32-bit delta; values near 2^64 still wrap. */
    uint64_t delta = rng_below(&w->rng, 4) == 0 ? rng_below(&w->rng, UINT32_MAX) + 1
                                                : 1 + rng_below(&w->rng, 1000);
    memcached_st *mc = w->mc[k->dp];
    memcached_return_t rc = incr ? memcached_increment(mc, k->key, k->nkey, delta, &got)
                                 : memcached_decrement(mc, k->key, k->nkey, delta, &got);
    note_evictions(w, k->dp);
    if (rc == MEMCACHED_SUCCESS) {
        uint64_t want = incr ? old + delta : (delta > old ? 0 : old - delta);
        if (!expect(w, k->can_present, "%s %s: done, but the key must be absent", op, k->key) ||
            !expect(w, got == want, "%s %s by %" PRIu64 ": %" PRIu64 ", want %" PRIu64, op,
                    k->key, delta, got, want))
            return false;
        /* memcached's in-place rule: a result not longer than the old
         * value keeps its length, padded with spaces */
        char text[64];
        int n = sprintf(text, "%" PRIu64, got);
        while ((size_t)n < k->len && (size_t)n < sizeof(text) - 1)
            text[n++] = ' ';
        uint32_t flags = k->flags;
        int64_t lo = k->exp_lo, hi = k->exp_hi;
        set_present(k, (const uint8_t *)text, (size_t)n, flags);
        k->exp_lo = lo;
        k->exp_hi = hi;
        trace(w, k, "%s: %" PRIu64, op, got);
        return true;
    }
    if (rc == MEMCACHED_NOTFOUND) {
        w->c.not_found++;
        return check_miss(w, k, op);
    }
    if (is_oom(rc)) {
        note_oom(w, k, op);
        return true;
    }
    return unexpected(w, k, op, rc);
}

static bool op_delete(struct workload *w, struct mkey *k)
{
    memcached_return_t rc = memcached_delete(w->mc[k->dp], k->key, k->nkey, 0);
    note_evictions(w, k->dp);
    if (rc == MEMCACHED_SUCCESS) {
        if (!expect(w, k->can_present, "delete %s: deleted, but the key must be absent", k->key))
            return false;
        set_absent(k);
        trace(w, k, "delete: deleted");
        return true;
    }
    if (rc == MEMCACHED_NOTFOUND) {
        w->c.not_found++;
        return check_miss(w, k, "delete");
    }
    return unexpected(w, k, "delete", rc);
}

static bool op_touch(struct workload *w, struct mkey *k)
{
    int exptime = random_exptime(w);
    int64_t t0 = harness_now_ms();
    memcached_return_t rc = memcached_touch(w->mc[k->dp], k->key, k->nkey, exptime);
    int64_t t1 = harness_now_ms();
    note_evictions(w, k->dp);
    if (rc == MEMCACHED_SUCCESS) {
        if (!expect(w, k->can_present, "touch %s: touched, but the key must be absent", k->key))
            return false;
        k->can_absent = false;
        set_expiry(k, exptime, t0, t1);
        trace(w, k, "touch: exptime %d, reply after %" PRId64 " ms", exptime, t1 - t0);
        return true;
    }
    if (rc == MEMCACHED_NOTFOUND) {
        w->c.not_found++;
        return check_miss(w, k, "touch");
    }
    return unexpected(w, k, "touch", rc);
}

static bool op_flush(struct workload *w, int dp)
{
    memcached_return_t rc = memcached_flush(w->mc[dp], 0);
    if (!expect(w, rc == MEMCACHED_SUCCESS, "flush_all on data %d: %s", dp,
                memcached_strerror(w->mc[dp], rc)))
        return false;
    w->c.flushes++;
    for (int i = 0; i < w->nkeys; i++)
        if (w->keys[i].dp == dp) {
            set_absent(&w->keys[i]);
            trace(w, &w->keys[i], "flush_all");
        }
    return true;
}

/* One random operation on a random key. */
static bool random_op(struct workload *w)
{
    struct mkey *k = &w->keys[rng_below(&w->rng, (uint64_t)w->nkeys)];
    uint64_t r = rng_below(&w->rng, 100);
    bool ok;
    age(k);
    w->c.ops++;
    if (r < 22) {
        ok = op_get(w, k);
    } else if (r < 27) {
        ok = op_mget(w, k);
    } else if (r < 47) {
        ok = op_store(w, k, ST_SET);
    } else if (r < 52) {
        ok = op_store(w, k, ST_ADD);
    } else if (r < 57) {
        ok = op_store(w, k, ST_REPLACE);
    } else if (r < 61) {
        ok = op_concat(w, k, true);
    } else if (r < 65) {
        ok = op_concat(w, k, false);
    } else if (r < 72) {
        ok = op_cas(w, k);
    } else if (r < 79) {
        ok = op_arith(w, k, true);
    } else if (r < 84) {
        ok = op_arith(w, k, false);
    } else if (r < 92) {
        ok = op_delete(w, k);
    } else {
        ok = op_touch(w, k);
    }
    if (!ok && !w->history_added)
        add_history(w, k);
    return ok;
}

/* Reads every key once (checks the model, narrows it). */
static bool read_all(struct workload *w)
{
    for (int i = 0; i < w->nkeys; i++) {
        age(&w->keys[i]);
        if (!op_get(w, &w->keys[i]))
            return false;
    }
    return true;
}

/* ---- setup ---- */

static void init_keys(struct workload *w)
{
    int per_dp = KEYS_PER_DP + COUNTERS_PER_DP;
    w->nkeys = per_dp * w->g->k;
    w->keys = calloc((size_t)w->nkeys, sizeof *w->keys);
    for (int i = 0; i < w->nkeys; i++) {
        struct mkey *k = &w->keys[i];
        k->dp = i % w->g->k;
        k->counter = (i / w->g->k) < COUNTERS_PER_DP;
        k->nkey = (size_t)snprintf(k->key, sizeof k->key, "cg:%s:%d", k->counter ? "n" : "v", i);
        set_absent(k);
    }
}

static bool connect_all(struct workload *w)
{
    for (int i = 0; i < w->g->k; i++) {
        w->mc[i] = harness_client(cgroup_data_port(w->g, i), w->binary);
        memcached_behavior_set(w->mc[i], MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
        w->stats_conn[i] = malloc(sizeof(raw_conn));
        if (!expect(w, w->stats_conn[i] != NULL && raw_open(w->stats_conn[i], cgroup_data_port(w->g, i)),
                    "cannot connect to data %d", i))
            return false;
        if (!read_evictions(w, i, &w->evictions[i]))
            return false;
    }
    return true;
}

static void workload_free(struct workload *w)
{
    for (int i = 0; i < CG_MAX_PROCS; i++) {
        if (w->mc[i] != NULL)
            memcached_free(w->mc[i]);
        if (w->stats_conn[i] != NULL) {
            raw_close(w->stats_conn[i]);
            free(w->stats_conn[i]);
        }
    }
    for (int i = 0; i < w->nkeys; i++)
        free(w->keys[i].value);
    free(w->keys);
    free(w->buf);
}

static bool run_phase(struct workload *w, int ops, int flush_at)
{
    for (int i = 0; i < ops; i++) {
        if (i == flush_at && !op_flush(w, (int)rng_below(&w->rng, (uint64_t)w->g->k)))
            return false;
        if (!random_op(w))
            return false;
        if (i % 100 == 0 && !expect(w, cgroup_alive(w->g), "a server process died"))
            return false;
    }
    return true;
}

/* The whole workload; false with w->failure set on the first problem. */
static bool run_workload(struct workload *w)
{
    if (!connect_all(w))
        return false;
    if (!run_phase(w, PHASE1_OPS, PHASE1_OPS / 2))
        return false;
    harness_sleep_ms(EXPIRY_PAUSE_MS);
    if (!read_all(w) || !run_phase(w, PHASE2_OPS, -1) || !read_all(w))
        return false;
    return expect(w, cgroup_alive(w->g), "a server process died");
}

/* ---- cocytus-cli ---- */

static bool cli_passes(struct workload *w, const char *const *args, const char *want)
{
    static char out[CLI_OUT_MAX];
    int rc = cgroup_cli(w->g, args, out, sizeof out, CLI_TIMEOUT_MS);
    printf("$ cocytus-cli %s%s\n%s", args[0], args[1] ? " ..." : "", out);
    return expect(w, rc == 0 && strstr(out, want) != NULL,
                  "cocytus-cli %s%s%s exited %d:\n%s", args[0], args[1] ? " " : "",
                  args[1] ? args[1] : "", rc, out);
}

/* The checks must notice a wrong group: with the two first parity
 * processes trading places in the endpoints file (their parity rows
 * differ), verify and decode-check have to fail with exit status 1. */
static bool cli_fails(struct workload *w, const char *const *args, int swap_a, int swap_b)
{
    static char out[CLI_OUT_MAX];
    if (!expect(w, cgroup_write_endpoints(w->g, swap_a, swap_b), "cannot write endpoints"))
        return false;
    int rc = cgroup_cli(w->g, args, out, sizeof out, CLI_TIMEOUT_MS);
    cgroup_write_endpoints(w->g, -1, -1);
    printf("$ cocytus-cli %s (procs %d and %d swapped)\n%s", args[0], swap_a, swap_b, out);
    return expect(w, rc == 1 && strstr(out, "group 0: FAILED") != NULL,
                  "cocytus-cli %s with procs %d and %d swapped exited %d:\n%s", args[0],
                  swap_a, swap_b, rc, out);
}

static bool run_cli_checks(struct workload *w)
{
    static const char *const verify[] = { "verify", NULL };
    static const char *const verify_full[] = { "verify", "--full", NULL };
    static const char *const decode[] = { "decode-check", NULL };
    static const char *const mem[] = { "mem", NULL };
    int first_parity = w->g->k;
    return cli_passes(w, verify, "group 0: OK") && cli_passes(w, verify_full, "group 0: OK") &&
           cli_passes(w, decode, "group 0: OK") && cli_passes(w, mem, "total all") &&
           cli_fails(w, verify, first_parity, first_parity + 1) &&
           cli_fails(w, decode, first_parity, first_parity + 1);
}

static void print_counts(const struct workload *w, int k, int n)
{
    const struct counts *c = &w->c;
    printf("RS(%d,%d) %s: %ld ops, %ld hits, %ld misses (%ld after expiry), %ld stored, "
           "%ld not stored, %ld exists, %ld not found, %ld eviction events, %ld out of memory, "
           "%ld flushes\n", k, n, w->binary ? "binary" : "ascii", c->ops, c->hits, c->misses,
           c->expired_misses, c->stored, c->not_stored, c->exists, c->not_found,
           c->eviction_events, c->ooms, c->flushes);
}

static void run_group_test(int k, int n, bool binary, uint64_t seed)
{
    struct cgroup g;
    ck_assert_msg(cgroup_start(&g, k, n, REGION), "RS(%d,%d) group did not start", k, n);
    struct workload w;
    memset(&w, 0, sizeof w);
    w.g = &g;
    w.binary = binary;
    w.rng = seed;
    w.buf = malloc(MAX_VALUE + MAX_APPEND);
    w.t_start = harness_now_ms();
    init_keys(&w);

    int64_t t0 = harness_now_ms();
    bool ok = run_workload(&w);
    print_counts(&w, k, n);
    printf("RS(%d,%d): workload %.1f s\n", k, n, (double)(harness_now_ms() - t0) / 1000.0);
    if (ok) {
        expect(&w, w.c.eviction_events > 0, "no eviction happened (region too large?)");
        expect(&w, w.c.expired_misses > 0, "no expired key was read");
        ok = w.failure[0] == '\0' && run_cli_checks(&w);
    }
    fflush(stdout);
    char failure[sizeof w.failure];
    memcpy(failure, w.failure, sizeof failure);
    workload_free(&w);
    cgroup_stop(&g);
    ck_assert_msg(ok && failure[0] == '\0', "RS(%d,%d): %s", k, n, failure);
}

START_TEST(test_rs_3_5_ascii)
{
    run_group_test(3, 5, false, 0x5eed0305c0c1ULL);
}
END_TEST

START_TEST(test_rs_2_4_binary)
{
    run_group_test(2, 4, true, 0x5eed0204b1a7ULL);
}
END_TEST

/* ---- a reader that does not read ---- */

#define SLOW_KEYS 8
#define SLOW_VALUE 100000
#define SLOW_GETS_PER_KEY 20
#define SLOW_OVERWRITES 30

static bool slow_set(raw_conn *w, const char *key, char fill, char *buf)
{
    char line[128];
    int n = snprintf(line, sizeof line, "set %s 0 0 %d\r\n", key, SLOW_VALUE);
    memset(buf, fill, SLOW_VALUE);
    memcpy(buf + SLOW_VALUE, "\r\n", 2);
    return raw_send(w, line, (size_t)n) && raw_send(w, buf, SLOW_VALUE + 2) &&
           raw_read_line(w, line, sizeof line, 5000) > 0 && strcmp(line, "STORED\r\n") == 0;
}

/* One reply of "get key": a single VALUE whose bytes are all one letter
 * (a value the key had), then END.  Returns the letter, or 0. */
static char slow_reply(raw_conn *r, char *buf)
{
    char line[128];
    unsigned flags, len;
    if (raw_read_line(r, line, sizeof line, 10000) <= 0 ||
        sscanf(line, "VALUE %*s %u %u", &flags, &len) != 2 || len != SLOW_VALUE ||
        !raw_read_exact(r, buf, SLOW_VALUE + 2, 10000) ||
        raw_read_line(r, line, sizeof line, 10000) <= 0 || strcmp(line, "END\r\n") != 0)
        return 0;
    for (size_t i = 1; i < SLOW_VALUE; i++)
        if (buf[i] != buf[0])
            return 0;
    return buf[0];
}

START_TEST(test_slow_reader_whole_values)
{
    struct cgroup g;
    ck_assert_msg(cgroup_start(&g, 3, 5, "8m"), "RS(3,5) group did not start");
    char *buf = malloc(SLOW_VALUE + 2);
    raw_conn *w = malloc(sizeof *w), *r = malloc(sizeof *r);
    ck_assert(buf && w && r);
    int port = cgroup_data_port(&g, 0);
    ck_assert(raw_open(w, port) && raw_open(r, port));
    char keys[SLOW_KEYS][32];
    for (int i = 0; i < SLOW_KEYS; i++) {
        snprintf(keys[i], sizeof keys[i], "slow:%d", i);
        ck_assert_msg(slow_set(w, keys[i], 'a', buf), "set %s", keys[i]);
    }
    /* 16 MB of replies: more than the socket buffers hold, so the server
     * keeps most of them queued while the keys are overwritten. */
    for (int n = 0; n < SLOW_GETS_PER_KEY; n++)
        for (int i = 0; i < SLOW_KEYS; i++) {
            char req[48];
            int len = snprintf(req, sizeof req, "get %s\r\n", keys[i]);
            ck_assert(raw_send(r, req, (size_t)len));
        }
    harness_sleep_ms(300);
    /* Every overwrite frees the range of the value before last once it
     * commits, and the next one of the same size is allocated there. */
    for (int n = 0; n < SLOW_OVERWRITES; n++)
        for (int i = 0; i < SLOW_KEYS; i++)
            ck_assert_msg(slow_set(w, keys[i], n % 2 ? 'c' : 'b', buf), "overwrite %s", keys[i]);
    for (int n = 0; n < SLOW_GETS_PER_KEY * SLOW_KEYS; n++) {
        char c = slow_reply(r, buf);
        ck_assert_msg(c == 'a' || c == 'b' || c == 'c',
                      "reply %d is not one whole value the key had", n);
    }
    raw_close(r);
    raw_close(w);
    free(r);
    free(w);
    free(buf);
    ck_assert(cgroup_alive(&g));
    cgroup_stop(&g);
}
END_TEST

/* ---- reads do not wait for writes of other keys ---- */

/* cmd_get of the data process on port, or -1. */
static long data_cmd_get(int port)
{
    raw_conn c;
    char out[8192];
    long v = -1;
    if (!raw_open(&c, port))
        return -1;
    if (raw_send_str(&c, "stats\r\n") && raw_read_until(&c, "END\r\n", out, sizeof out, 5000) > 0) {
        const char *p = strstr(out, "STAT cmd_get ");
        if (p)
            v = strtol(p + 13, NULL, 10);
    }
    raw_close(&c);
    return v;
}

/* Replies expected on w, in order, each line or value checked. */
static void expect_lines(raw_conn *w, const char *const *want)
{
    char line[256];
    for (int i = 0; want[i]; i++) {
        ck_assert_msg(raw_read_line(w, line, sizeof line, 5000) > 0, "no reply %d (%s)", i, want[i]);
        ck_assert_msg(strcmp(line, want[i]) == 0, "reply %d: %s, want %s", i, line, want[i]);
    }
}

/* Sends n bytes of requests on w (a connection to the data process on
 * port) while the parity process is stopped, so that a write among them
 * stays in flight for ms; checks that no reply leaves meanwhile.  Returns
 * how many gets the data process ran in that time. */
static long gets_while_held(pid_t parity, raw_conn *w, int port, const char *req, size_t n, int ms)
{
    char out[64];
    long before = data_cmd_get(port);
    ck_assert(before >= 0);
    ck_assert(kill(parity, SIGSTOP) == 0);
    ck_assert(raw_send(w, req, n));
    harness_sleep_ms(ms);
    long during = data_cmd_get(port);
    ck_assert_msg(raw_read_quiet(w, out, sizeof out, 100) == 0,
                  "a reply left before the write in flight completed");
    ck_assert(kill(parity, SIGCONT) == 0);
    ck_assert(during >= before);
    return during - before;
}

/* With a parity process stopped, a write stays in flight.  A get of
 * another key pipelined behind it on the same connection runs at once
 * (cmd_get moves) and its reply waits its turn; a get of the written key,
 * or any get behind a flush_all, waits until the write committed (a
 * connection reads its own writes). */
START_TEST(test_reads_pass_pending_writes)
{
    struct cgroup g;
    ck_assert_msg(cgroup_start(&g, 3, 5, "8m"), "RS(3,5) group did not start");
    int port = cgroup_data_port(&g, 0);
    pid_t parity = g.procs[g.k].pid;
    raw_conn w;
    char line[256];
    ck_assert(raw_open(&w, port));
    ck_assert(raw_command(&w, "set pk:b 0 0 3\r\nold\r\n", line, sizeof line) > 0);
    ck_assert_str_eq(line, "STORED\r\n");
    long before = data_cmd_get(port);
    static const char pipelined[] = "set pk:a 0 0 3\r\nnew\r\nget pk:b\r\nget pk:a\r\n";
    long ran = gets_while_held(parity, &w, port, pipelined, sizeof pipelined - 1, 300);
    static const char *const first[] = { "STORED\r\n", "VALUE pk:b 0 3\r\n", "old\r\n", "END\r\n",
                                         "VALUE pk:a 0 3\r\n", "new\r\n", "END\r\n", NULL };
    expect_lines(&w, first);
    ck_assert_msg(ran == 1,
                  "while the set was in flight cmd_get went up by %ld: want the get of the "
                  "other key served (+1) and the get of the written key waiting", ran);
    ck_assert_int_eq(data_cmd_get(port), before + 2);

    /* The same with meta commands. */
    static const char meta_req[] = "ms pk:a 3\r\nms2\r\nmg pk:b v\r\nmg pk:a v\r\n";
    ran = gets_while_held(parity, &w, port, meta_req, sizeof meta_req - 1, 300);
    static const char *const meta[] = { "HD\r\n", "VA 3\r\n", "old\r\n", "VA 3\r\n", "ms2\r\n",
                                        NULL };
    expect_lines(&w, meta);
    ck_assert_msg(ran == 1, "meta: cmd_get went up by %ld while ms was in flight", ran);

    /* A get ready ahead of a write of the same batch waits for the
     * write's reply (conn_holds_ready), but not longer than the hold's
     * bound, 5 ms (HOLD_READY_MAX_MS in memcached/conn.c): behind a write
     * that waits for a failure to be handled it goes on its own, and the
     * set's reply when the set commits.  Another connection's get is
     * answered at once meanwhile. */
    static const char get_first[] = "get pk:b\r\nset pk:a 0 0 3\r\nnw4\r\n";
    long gets_before = data_cmd_get(port);
    ck_assert(kill(parity, SIGSTOP) == 0);
    int64_t sent = harness_now_ms();
    ck_assert(raw_send(&w, get_first, sizeof get_first - 1));
    expect_lines(&w, (const char *const[]){ "VALUE pk:b 0 3\r\n", "old\r\n", "END\r\n", NULL });
    int64_t answered = harness_now_ms() - sent;
    ck_assert_int_eq(data_cmd_get(port), gets_before + 1);
    /* The bound runs from when the data process parsed both requests (one
     * send, one read), so the reply cannot leave earlier; whole
     * milliseconds lose up to one. */
    ck_assert_msg(answered >= 4, "the get's reply left after %" PRId64 " ms: it did not wait "
                  "for the set pipelined behind it", answered);
    raw_conn o;
    ck_assert(raw_open(&o, port));
    ck_assert(raw_send_str(&o, "get pk:b\r\n"));
    expect_lines(&o, (const char *const[]){ "VALUE pk:b 0 3\r\n", "old\r\n", "END\r\n", NULL });
    raw_close(&o);
    ck_assert_msg(raw_read_quiet(&w, line, sizeof line, 100) == 0,
                  "the set's reply left while a parity process was stopped");
    ck_assert(kill(parity, SIGCONT) == 0);
    expect_lines(&w, (const char *const[]){ "STORED\r\n", NULL });

    /* A binary touch answers with the item's flags: it reads, and waits for
     * the connection's set of the same key in flight. */
    raw_conn b;
    ck_assert(raw_open(&b, port));
    const uint8_t set_extras[8] = { 0, 0, 0, 7, 0, 0, 0, 0 };   /* flags 7, exptime 0 */
    const uint8_t touch_extras[4] = { 0, 0, 0, 0 };
    bin_request set = { .opcode = 0x01, .extras = set_extras, .extlen = 8, .key = "pk:t",
                        .keylen = 4, .value = "tv", .valuelen = 2, .opaque = 1 };
    bin_request touch = { .opcode = 0x1c, .extras = touch_extras, .extlen = 4, .key = "pk:t",
                          .keylen = 4, .opaque = 2 };
    ck_assert(kill(parity, SIGSTOP) == 0);
    ck_assert(raw_bin_send(&b, &set) && raw_bin_send(&b, &touch));
    harness_sleep_ms(300);
    ck_assert(kill(parity, SIGCONT) == 0);
    bin_response res;
    ck_assert(raw_bin_read(&b, &res, 5000) && res.opaque == 1 && res.status == 0);
    ck_assert(raw_bin_read(&b, &res, 5000) && res.opaque == 2);
    ck_assert_msg(res.status == 0 && res.extlen == 4 && (uint8_t)res.body[3] == 7,
                  "binary touch behind its key's set: status %u, extras %u, flags byte %u",
                  res.status, res.extlen, (uint8_t)res.body[3]);
    raw_close(&b);

    /* Bounded: behind a write in flight, reads of other keys queue up to
     * 1024 replies or 4 MB of values; then the connection is not parsed
     * further (nor read) until the write completed. */
    enum { MANY_GETS = 3000, BIG = 200000, BIG_GETS = 60 };
    char *many = malloc(MANY_GETS * 10 + 64), *big = malloc(BIG + 64);
    ck_assert(many && big);
    size_t n = (size_t)sprintf(many, "set pk:a 0 0 3\r\nnw3\r\n");
    for (int i = 0; i < MANY_GETS; i++)
        n += (size_t)sprintf(many + n, "get pk:b\r\n");
    ran = gets_while_held(parity, &w, port, many, n, 500);
    expect_lines(&w, (const char *const[]){ "STORED\r\n", NULL });
    for (int i = 0; i < MANY_GETS; i++)
        expect_lines(&w, (const char *const[]){ "VALUE pk:b 0 3\r\n", "old\r\n", "END\r\n", NULL });
    ck_assert_msg(ran > 0 && ran <= 1024,
                  "behind a write in flight %ld gets ran: want at most 1023 queued", ran);

    memset(big, 'v', BIG);
    n = (size_t)sprintf(line, "set pk:big 0 0 %d\r\n", BIG);
    ck_assert(raw_send(&w, line, n) && raw_send(&w, big, BIG) && raw_send_str(&w, "\r\n"));
    expect_lines(&w, (const char *const[]){ "STORED\r\n", NULL });
    n = (size_t)sprintf(many, "set pk:a 0 0 3\r\nnw4\r\n");
    for (int i = 0; i < BIG_GETS; i++)
        n += (size_t)sprintf(many + n, "get pk:big\r\n");
    ran = gets_while_held(parity, &w, port, many, n, 500);
    expect_lines(&w, (const char *const[]){ "STORED\r\n", NULL });
    char want[64];
    snprintf(want, sizeof want, "VALUE pk:big 0 %d\r\n", BIG);
    for (int i = 0; i < BIG_GETS; i++) {
        expect_lines(&w, (const char *const[]){ want, NULL });
        ck_assert(raw_read_exact(&w, big, BIG + 2, 5000));
        ck_assert_msg(big[0] == 'v' && big[BIG - 1] == 'v' && big[BIG] == '\r', "value %d", i);
        expect_lines(&w, (const char *const[]){ "END\r\n", NULL });
    }
    ck_assert_msg(ran > 0 && ran <= 4 * 1048576 / BIG + 2,
                  "behind a write in flight %ld gets of %d B ran: want about 4 MB", ran, BIG);
    free(many);
    free(big);

    /* flush_all has no key: every read behind it waits. */
    static const char flush_req[] = "flush_all\r\nget pk:b\r\n";
    ran = gets_while_held(parity, &w, port, flush_req, sizeof flush_req - 1, 300);
    static const char *const second[] = { "OK\r\n", "END\r\n", NULL };
    expect_lines(&w, second);
    ck_assert_msg(ran == 0, "%ld gets behind a flush_all in flight ran", ran);
    raw_close(&w);
    ck_assert(cgroup_alive(&g));
    cgroup_stop(&g);
}
END_TEST

static Suite *cgroup_suite(void)
{
    Suite *s = suite_create("cgroup");
    TCase *tc = tcase_create("workload");
    tcase_set_timeout(tc, 50);
    tcase_add_test(tc, test_rs_3_5_ascii);
    tcase_add_test(tc, test_rs_2_4_binary);
    tcase_add_test(tc, test_slow_reader_whole_values);
    tcase_add_test(tc, test_reads_pass_pending_writes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cgroup_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
