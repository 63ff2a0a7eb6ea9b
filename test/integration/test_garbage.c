/* test_garbage.c - the server survives garbage.  From a fixed seed, rounds
 * of many concurrent connections send random bytes and random mixes of valid
 * and broken text (classic and meta commands) and binary requests, split at
 * random points, and end by
 * reading everything, half-closing, closing without reading, resetting, or
 * quitting mid-request or mid-reply.  After every round the server must
 * still store and return a fresh value and must still hold, byte for byte,
 * every value stored before the barrage; at the end it must still run.
 * All of it runs twice: against one plain server, and against data process 0
 * of an RS(3,5) coding group, whose parity processes must then still agree
 * with every data process (cocytus-cli verify and decode-check): garbage
 * must not corrupt the erasure code either.
 * GARBAGE_SEED=<n> in the environment picks another seed.  GARBAGE_PORT=<p>
 * aims the barrages at a server someone else started instead (garbage_proxy.sh:
 * cocytus-proxy in front of a cluster), alive while every pid of
 * GARBAGE_PIDS="<pid> ..." runs.  GARBAGE_STORES=0 says that port keeps
 * nothing for its clients (a parity process's, which answers MOVED, or a
 * recovery process's, which keeps only a dead data process's keys): then no
 * values are stored first, and after every round the port must still
 * answer a text and a binary version request instead (garbage_parity.sh). */
#include "harness.h"
#include "cgroup_harness.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SEED 0xC0C7705ull
#define LINE_CAP 1024

#define MAX_CONNS 56              /* the server runs with -c 64 */
#define ROUND_MS 2500             /* a round's connections are all gone by then */
#define STALL_MS 150              /* a sender making no progress this long gives up */
#define QUIET_MS 30               /* a reader stops after this long without data */
#define DRAIN_MAX_MS 600          /* and after this long in any case */
#define MAX_ITEM (1u << 20)       /* -I 1m */
#define BIN_MAX_BODY (MAX_ITEM + 20 + 250 + 1024)   /* bin_max_body(-I) */

#define EXTERNAL_PIDS_MAX 64

/* What the barrage hits: one plain server, data process 0 of a group, or
 * an external server (GARBAGE_PORT). */
static struct {
    bool rs, external;
    bool probe_only;         /* external and GARBAGE_STORES=0 */
    long long conns_before;  /* probe_only: its total_connections at the start */
    harness_server server;   /* plain */
    struct cgroup group;     /* rs */
    pid_t pids[EXTERNAL_PIDS_MAX];   /* external: the processes that must stay up */
    int npids;
    bool up;
    int port;
} target;

static uint64_t base_seed;

/* ---- deterministic randomness ---- */

/* Requests are generated from rng alone, so a seed always yields the same
 * bytes; choices made while sending (timing-dependent) use each
 * connection's own generator. */
static uint64_t rng;

static uint64_t next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rnd(void)
{
    return next(&rng);
}

static uint32_t below(uint32_t n)
{
    return n ? (uint32_t)(rnd() % n) : 0;
}

static bool chance(unsigned percent)
{
    return below(100) < percent;
}

/* ---- byte buffers ---- */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put_str(bytes *b, const char *s)
{
    put(b, s, strlen(s));
}

static void put_fmt(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(bytes *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_byte(bytes *b, uint8_t c)
{
    put(b, &c, 1);
}

static void put_fill(bytes *b, uint8_t c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_byte(b, c);
}

enum noise { NOISE_ANY, NOISE_PRINTABLE, NOISE_TEXTY };

static void put_noise(bytes *b, size_t n, enum noise kind)
{
    static const char texty[] = "abcdefghijklmnopqrstuvwxyz0123456789 \r\n-_:";
    for (size_t i = 0; i < n; i++) {
        if (kind == NOISE_ANY)
            put_byte(b, (uint8_t)rnd());
        else if (kind == NOISE_PRINTABLE)
            put_byte(b, (uint8_t)(33 + below(94)));
        else
            put_byte(b, (uint8_t)texty[below(sizeof texty - 1)]);
    }
}

static void put_be(bytes *b, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        put_byte(b, (uint8_t)(v >> (8 * i)));
}

/* ---- the values that must survive ---- */

typedef struct sentinel {
    char key[300];
    uint32_t flags;
    bytes value;
} sentinel;

enum { S_SMALL, S_BINARY, S_BIG, S_LONGKEY, S_COUNTER, N_SENTINELS };
static sentinel sentinels[N_SENTINELS];
static bool sentinels_stored;

static void make_sentinels(void)
{
    uint64_t saved = rng;
    rng = 0x5e471ee1ull;
    static const struct { const char *key; uint32_t flags; size_t len; } spec[N_SENTINELS] = {
        [S_SMALL] = { "sentinel:small", 1, 14 },
        [S_BINARY] = { "sentinel:binary", 0xdeadbeef, 3000 },
        [S_BIG] = { "sentinel:big", 7, 200000 },
        [S_LONGKEY] = { NULL, 0, 100 },
        [S_COUNTER] = { "sentinel:counter", 0, 0 },
    };
    for (int i = 0; i < N_SENTINELS; i++) {
        sentinel *s = &sentinels[i];
        s->flags = spec[i].flags;
        s->value.len = 0;
        if (spec[i].key) {
            snprintf(s->key, sizeof s->key, "%s", spec[i].key);
        } else {
            memset(s->key, 'S', 250);
            memcpy(s->key, "sentinel:", 9);
            s->key[250] = '\0';
        }
        if (i == S_COUNTER)
            put_str(&s->value, "42");
        else
            put_noise(&s->value, spec[i].len, i == S_SMALL ? NOISE_PRINTABLE : NOISE_ANY);
    }
    rng = saved;
}

/* ---- connections ---- */

static bool open_fresh(raw_conn *c)
{
    /* Closed garbage connections may still count against -c for a moment. */
    for (int attempt = 0; attempt < 50; attempt++) {
        if (raw_open(c, target.port))
            return true;
        harness_sleep_ms(20);
    }
    return false;
}

/* The reply line of the last text_store that failed, for the message. */
static char store_reply[LINE_CAP];

static bool text_store(raw_conn *c, const char *key, uint32_t flags, const bytes *v)
{
    char head[LINE_CAP];
    snprintf(head, sizeof head, "set %s %u 0 %zu\r\n", key, flags, v->len);
    snprintf(store_reply, sizeof store_reply, "(could not send)");
    int64_t start = harness_now_ms();
    if (!raw_send_str(c, head) || !raw_send(c, v->p, v->len) || !raw_send_str(c, "\r\n"))
        return false;
    if (raw_read_line(c, store_reply, sizeof store_reply, HARNESS_IO_TIMEOUT_MS) <= 0) {
        snprintf(store_reply, sizeof store_reply, "(no reply in %d ms)", HARNESS_IO_TIMEOUT_MS);
        return false;
    }
    int64_t took = harness_now_ms() - start;
    if (took > 1000)
        fprintf(stderr, "garbage: a set of %s was answered after %lld ms\n", key, (long long)took);
    return strcmp(store_reply, "STORED\r\n") == 0;
}

static void bin_store_req(bytes *b, const char *key, uint32_t flags, const bytes *v)
{
    size_t nkey = strlen(key);
    put_byte(b, 0x80);
    put_byte(b, 0x01);                      /* set */
    put_be(b, nkey, 2);
    put_byte(b, 8);
    put_byte(b, 0);
    put_be(b, 0, 2);
    put_be(b, 8 + nkey + v->len, 4);
    put_be(b, 0x51, 4);
    put_be(b, 0, 8);
    put_be(b, flags, 4);
    put_be(b, 0, 4);
    put(b, key, nkey);
    put(b, v->p, v->len);
}

static bool bin_store(raw_conn *c, const char *key, uint32_t flags, const bytes *v)
{
    bytes req = { 0 };
    bin_store_req(&req, key, flags, v);
    bool ok = raw_send(c, req.p, req.len);
    free(req.p);
    bin_response res;
    return ok && raw_bin_read(c, &res, HARNESS_IO_TIMEOUT_MS) && res.magic == BIN_RES_MAGIC &&
           res.status == 0 && res.opaque == 0x51;
}

/* The plain server runs with -m 8 -I 1m -c 64 (MAX_CONNS stays under the
 * limit); the group's data processes have room for far more than the
 * bounded key pool and take memcached's 1 MB item limit too. */
static bool target_start(void)
{
    if (target.external) {
        target.up = target.port > 0;
        return target.up;
    }
    if (target.rs) {
        target.up = cgroup_start(&target.group, 3, 5, "16m");
        target.port = target.up ? cgroup_data_port(&target.group, 0) : 0;
        return target.up;
    }
    const char *args[] = { "-m", "8", "-I", "1m", "-c", "64", NULL };
    target.up = harness_server_start(&target.server, args);
    if (!target.up)
        target.server.pid = 0;
    target.port = target.server.port;
    return target.up;
}

static void target_stop(void)
{
    if (target.external)
        ;                       /* its owner stops it */
    else if (target.rs && target.up)
        cgroup_stop(&target.group);
    else if (!target.rs)
        harness_server_stop(&target.server);
    target.up = false;
}

/* Every process of the target still runs. */
static bool target_alive(void)
{
    if (!target.up)
        return false;
    if (target.external) {
        for (int i = 0; i < target.npids; i++) {
            if (!harness_pid_running(target.pids[i])) {
                fprintf(stderr, "garbage: process %d of the target is gone\n", (int)target.pids[i]);
                return false;
            }
        }
        return true;
    }
    return target.rs ? cgroup_alive(&target.group) : harness_server_alive(&target.server);
}

/* GARBAGE_PORT, GARBAGE_PIDS and GARBAGE_STORES; false (and the reason)
 * when malformed. */
static bool read_external_target(const char *port, const char *pids, const char *stores)
{
    char *end;
    long p = strtol(port, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) {
        fprintf(stderr, "garbage: GARBAGE_PORT=%s is not a port\n", port);
        return false;
    }
    target.external = true;
    target.port = (int)p;
    if (stores && *stores && strcmp(stores, "0") != 0 && strcmp(stores, "1") != 0) {
        fprintf(stderr, "garbage: GARBAGE_STORES=%s: want 0 or 1\n", stores);
        return false;
    }
    target.probe_only = stores && strcmp(stores, "0") == 0;
    for (const char *q = pids ? pids : ""; *q;) {
        long pid = strtol(q, &end, 10);
        if (end == q || pid <= 0 || target.npids == EXTERNAL_PIDS_MAX) {
            fprintf(stderr, "garbage: GARBAGE_PIDS=%s: want up to %d pids\n", pids,
                    EXTERNAL_PIDS_MAX);
            return false;
        }
        target.pids[target.npids++] = (pid_t)pid;
        q = end;
        while (*q == ' ' || *q == ',')
            q++;
    }
    return true;
}

/* The value of one "STAT name value" line of a stats reply, or -1. */
static long long stat_value(const char *reply, const char *name)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "STAT %s ", name);
    const char *p = strstr(reply, pattern);
    return p ? strtoll(p + strlen(pattern), NULL, 10) : -1;
}

/* The target's stats reply in reply (NUL-terminated), on a fresh
 * connection; false if none came. */
static bool read_stats(char *reply, size_t cap)
{
    raw_conn *c = calloc(1, sizeof *c);
    bool ok = c != NULL && open_fresh(c) && raw_send_str(c, "stats\r\n") &&
              raw_read_until(c, "END\r\n", reply, cap, HARNESS_IO_TIMEOUT_MS) > 0;
    if (c != NULL)
        raw_close(c);
    free(c);
    return ok;
}

/* Unchecked fixture (runs in the runner process): start, then store. */
static void start_and_store(void)
{
    const char *env = getenv("GARBAGE_SEED");
    base_seed = env && *env ? strtoull(env, NULL, 0) : DEFAULT_SEED;
    make_sentinels();
    sentinels_stored = false;
    if (!target_start())
        return;
    if (target.probe_only) {
        /* nothing to keep; count the connections from here (an earlier
         * run may have aimed at the same port) */
        static char reply[16384];
        sentinels_stored = read_stats(reply, sizeof reply);
        target.conns_before = stat_value(reply, "total_connections");
        return;
    }
    /* A connection speaks the protocol of its first byte: one per protocol. */
    raw_conn *c = calloc(1, sizeof *c);
    bool ok = c != NULL;
    for (int i = 0; i < N_SENTINELS && ok; i++) {
        const sentinel *s = &sentinels[i];
        ok = raw_open(c, target.port);
        if (ok)
            ok = i == S_BINARY ? bin_store(c, s->key, s->flags, &s->value)
                               : text_store(c, s->key, s->flags, &s->value);
        raw_close(c);
    }
    free(c);
    sentinels_stored = ok;
}

static void start_plain(void)
{
    target.rs = false;
    start_and_store();
}

static void start_group(void)
{
    target.rs = true;
    start_and_store();
}

static void start_external(void)
{
    start_and_store();
}

static void require_server(void)
{
    ck_assert_msg(target.up, target.external ? "no target"
                             : target.rs   ? "the RS(3,5) group did not start"
                                           : "the server did not start");
    ck_assert_msg(target_alive(), "the server is not running");
    ck_assert_msg(sentinels_stored, "could not store the values the barrage must not touch");
}

/* ---- checks after each round ---- */

static void expect_text_value(raw_conn *c, const char *key, uint32_t flags, const bytes *v,
                              const char *when)
{
    char line[LINE_CAP], want[LINE_CAP];
    snprintf(want, sizeof want, "get %s\r\n", key);
    ck_assert_msg(raw_send_str(c, want), "%s: cannot send get", when);
    int n = raw_read_line(c, line, sizeof line, HARNESS_IO_TIMEOUT_MS);
    snprintf(want, sizeof want, "VALUE %s %u %zu\r\n", key, flags, v->len);
    ck_assert_msg(n > 0 && strcmp(line, want) == 0, "%s: get %.40s: got \"%.80s\", wanted \"%.80s\"",
                  when, key, line, want);
    uint8_t *got = malloc(v->len + 2);
    ck_assert_ptr_nonnull(got);
    ck_assert_msg(raw_read_exact(c, got, v->len + 2, HARNESS_IO_TIMEOUT_MS),
                  "%s: value of %.40s cut short", when, key);
    ck_assert_msg(memcmp(got, v->p, v->len) == 0 && got[v->len] == '\r' && got[v->len + 1] == '\n',
                  "%s: value of %.40s changed", when, key);
    free(got);
    n = raw_read_line(c, line, sizeof line, HARNESS_IO_TIMEOUT_MS);
    ck_assert_msg(n > 0 && strcmp(line, "END\r\n") == 0, "%s: no END after %.40s", when, key);
}

static void expect_bin_value(raw_conn *c, const char *key, uint32_t flags, const bytes *v,
                             const char *when)
{
    size_t nkey = strlen(key);
    bytes req = { 0 };
    put_byte(&req, 0x80);
    put_byte(&req, 0x00);                   /* get */
    put_be(&req, nkey, 2);
    put_be(&req, 0, 4);
    put_be(&req, nkey, 4);
    put_be(&req, 0x77, 4);
    put_be(&req, 0, 8);
    put(&req, key, nkey);
    ck_assert_msg(raw_send(c, req.p, req.len), "%s: cannot send binary get", when);
    free(req.p);
    bin_response res;
    ck_assert_msg(raw_bin_read(c, &res, HARNESS_IO_TIMEOUT_MS), "%s: no binary get reply", when);
    ck_assert_msg(res.status == 0 && res.opaque == 0x77 && res.extlen == 4,
                  "%s: binary get %.40s: status %u", when, key, res.status);
    ck_assert_msg(res.bodylen == 4 + v->len && v->len <= BIN_BODY_MAX - 4,
                  "%s: binary get %.40s: %u body bytes", when, key, res.bodylen);
    const uint8_t *body = (const uint8_t *)res.body;
    uint32_t got_flags = (uint32_t)body[0] << 24 | (uint32_t)body[1] << 16 |
                         (uint32_t)body[2] << 8 | body[3];
    ck_assert_msg(got_flags == flags && memcmp(body + 4, v->p, v->len) == 0,
                  "%s: binary value of %.40s changed", when, key);
}

/* A port that keeps nothing for its clients still answers a text and a
 * binary version request, each on a new connection. */
static void check_answers(const char *when)
{
    raw_conn *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    ck_assert_msg(open_fresh(c), "%s: no new connection accepted", when);
    char line[LINE_CAP];
    ck_assert_msg(raw_send_str(c, "version\r\n"), "%s: cannot send version", when);
    int n = raw_read_line(c, line, sizeof line, HARNESS_IO_TIMEOUT_MS);
    ck_assert_msg(n > 0 && strncmp(line, "VERSION ", 8) == 0, "%s: version: got \"%.80s\"",
                  when, n > 0 ? line : "(nothing)");
    raw_close(c);

    ck_assert_msg(open_fresh(c), "%s: no new connection accepted", when);
    bytes req = { 0 };
    put_byte(&req, 0x80);
    put_byte(&req, 0x0b);                   /* version */
    put_fill(&req, 0, 4);
    put_be(&req, 0, 2);
    put_be(&req, 0, 4);
    put_be(&req, 0x0b0b, 4);
    put_be(&req, 0, 8);
    ck_assert_msg(raw_send(c, req.p, req.len), "%s: cannot send binary version", when);
    free(req.p);
    bin_response res;
    ck_assert_msg(raw_bin_read(c, &res, HARNESS_IO_TIMEOUT_MS), "%s: no binary version reply",
                  when);
    ck_assert_msg(res.status == 0 && res.opaque == 0x0b0b && res.bodylen > 0,
                  "%s: binary version: status %u, %u body bytes", when, res.status, res.bodylen);
    raw_close(c);
    free(c);
}

/* The server answers, stores something new, and lost nothing stored. */
static void check_server(const char *when)
{
    ck_assert_msg(target_alive(), "%s: a server died", when);
    if (target.probe_only) {
        check_answers(when);
        return;
    }
    raw_conn *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    ck_assert_msg(open_fresh(c), "%s: no new connection accepted", when);

    bytes fresh = { 0 };
    put_noise(&fresh, 1 + below(3000), NOISE_ANY);
    char key[64];
    snprintf(key, sizeof key, "fresh:%llu", (unsigned long long)rnd());
    uint32_t flags = (uint32_t)rnd();
    ck_assert_msg(text_store(c, key, flags, &fresh), "%s: set of a fresh key failed: %.200s",
                  when, store_reply);
    expect_text_value(c, key, flags, &fresh, when);
    for (int i = 0; i < N_SENTINELS; i++)
        expect_text_value(c, sentinels[i].key, sentinels[i].flags, &sentinels[i].value, when);
    raw_close(c);

    /* The binary protocol too, on a connection of its own. */
    ck_assert_msg(open_fresh(c), "%s: no new connection accepted", when);
    snprintf(key, sizeof key, "fresh:bin:%llu", (unsigned long long)rnd());
    fresh.len = 0;
    put_noise(&fresh, below(2000), NOISE_ANY);
    ck_assert_msg(bin_store(c, key, flags, &fresh), "%s: binary set of a fresh key failed", when);
    expect_bin_value(c, key, flags, &fresh, when);
    expect_bin_value(c, sentinels[S_BINARY].key, sentinels[S_BINARY].flags,
                     &sentinels[S_BINARY].value, when);
    expect_bin_value(c, sentinels[S_SMALL].key, sentinels[S_SMALL].flags,
                     &sentinels[S_SMALL].value, when);
    raw_close(c);
    free(c);
    free(fresh.p);
}

/* ---- keys and numbers ---- */

#define POOL_SHORT 64
#define POOL_LONG 8
#define POOL_WEIRD 16

static uint8_t weird_keys[POOL_WEIRD][20];
static size_t weird_len[POOL_WEIRD];

/* A bounded pool of keys, so the barrage cannot fill memory with new keys
 * and evict what must survive; none collides with a sentinel. */
static void make_weird_keys(void)
{
    for (int i = 0; i < POOL_WEIRD; i++) {
        weird_len[i] = 1 + below(19);
        for (size_t j = 0; j < weird_len[i]; j++) {
            uint8_t ch;
            do
                ch = (uint8_t)rnd();
            while (ch == ' ' || ch == '\n' || ch == 's');
            weird_keys[i][j] = ch;
        }
    }
}

/* A key for a text command: mostly valid, sometimes empty or too long. */
static void put_text_key(bytes *b)
{
    uint32_t r = below(100);
    if (r < 60) {
        put_fmt(b, "g:%u", below(POOL_SHORT));
    } else if (r < 72) {
        size_t start = b->len;
        put_fmt(b, "g:L%u:", below(POOL_LONG));
        put_fill(b, 'k', 250 - (b->len - start));
    } else if (r < 84) {
        int i = (int)below(POOL_WEIRD);
        put(b, weird_keys[i], weird_len[i]);
    } else if (r < 93) {
        /* nothing: the key is missing */
    } else if (r < 98) {
        put_fill(b, 'x', 251);
    } else {
        put_fill(b, 'y', 10000);   /* closes the connection unless in a get */
    }
}

static const char *const odd_numbers[] = {
    "0", "-1", "-0", "+5", "007", "1e3", "0x10", "abc", "", "2147483647", "2147483648",
    "-2147483648", "-2147483649", "4294967295", "4294967296", "18446744073709551615",
    "18446744073709551616", "99999999999999999999999999999", "-18446744073709551615",
    "1048576", "1048577", "\xff\xfe", "1 2",
};

static void put_text_number(bytes *b)
{
    if (chance(85))
        put_fmt(b, "%u", below(chance(50) ? 10 : 100000));
    else
        put_str(b, odd_numbers[below(sizeof odd_numbers / sizeof odd_numbers[0])]);
}

static void put_line_end(bytes *b)
{
    uint32_t r = below(100);
    put_str(b, r < 85 ? "\r\n" : r < 91 ? "\n" : r < 94 ? "\r\r\n" : r < 97 ? "\n\r" : "");
}

static void put_noreply(bytes *b)
{
    if (chance(20))
        put_str(b, chance(90) ? " noreply" : " noreplyy");
}

/* ---- text requests ---- */

/* A storage command's data block (classic or ms): vlen random bytes, then
 * mostly the right terminator, sometimes a wrong or missing one. */
static void put_data_block(bytes *b, size_t vlen)
{
    put_noise(b, vlen, chance(50) ? NOISE_ANY : NOISE_TEXTY);
    uint32_t r = below(100);
    put_str(b, r < 88 ? "\r\n" : r < 93 ? "\n" : r < 97 ? "xx" : "");
}

static void put_text_storage(bytes *b)
{
    static const char *const cmds[] = { "set", "add", "replace", "append", "prepend", "cas" };
    const char *cmd = cmds[below(6)];
    size_t vlen = chance(80) ? below(chance(50) ? 16 : 2000) : 0;
    put_fmt(b, "%s ", cmd);
    put_text_key(b);
    put_str(b, " ");
    put_text_number(b);
    put_str(b, " ");
    put_text_number(b);
    put_str(b, " ");
    uint32_t r = below(100);
    if (r < 80)
        put_fmt(b, "%zu", vlen);
    else if (r < 88)
        put_fmt(b, "%zu", vlen + 1);
    else if (r < 95 && vlen > 0)
        put_fmt(b, "%zu", vlen - 1);
    else if (r < 97)
        put_fmt(b, "%u", chance(50) ? MAX_ITEM + 1 : 2147483647u);   /* swallowed */
    else
        put_text_number(b);
    if (strcmp(cmd, "cas") == 0 || chance(3)) {
        put_str(b, " ");
        put_text_number(b);
    }
    put_noreply(b);
    put_line_end(b);
    put_data_block(b, vlen);
}

static void put_text_retrieval(bytes *b)
{
    static const char *const cmds[] = { "get", "gets", "gat", "gats" };
    int which = (int)below(4);
    put_str(b, cmds[which]);
    if (which >= 2) {
        put_str(b, " ");
        put_text_number(b);
    }
    uint32_t nkeys = chance(90) ? 1 + below(5) : below(400);
    for (uint32_t i = 0; i < nkeys; i++) {
        put_str(b, chance(95) ? " " : "   ");
        put_text_key(b);
    }
    put_line_end(b);
}

static void put_text_other(bytes *b)
{
    static const char *const stats_args[] = {
        "", " items", " slabs", " settings", " sizes", " conns", " detail dump",
        " cachedump 1 1", " bogus", " items items items items items items items items items",
    };
    switch (below(12)) {
    case 0: case 1:
        put_str(b, "delete ");
        put_text_key(b);
        if (chance(20))
            put_str(b, chance(50) ? " 0" : " 5");
        put_noreply(b);
        break;
    case 2: case 3:
        put_str(b, chance(50) ? "incr " : "decr ");
        put_text_key(b);
        put_str(b, " ");
        put_text_number(b);
        put_noreply(b);
        break;
    case 4:
        put_str(b, "touch ");
        put_text_key(b);
        put_str(b, " ");
        put_text_number(b);
        put_noreply(b);
        break;
    case 5:
        put_str(b, "stats");
        put_str(b, stats_args[below(sizeof stats_args / sizeof stats_args[0])]);
        break;
    case 6:
        if (chance(60)) {
            put_str(b, chance(50) ? "version" : "version extra words");
            break;
        }
        /* memcached-tool's keys and dump; the proxy sends it to every server */
        put_str(b, "lru_crawler ");
        put_str(b, (const char *[]){ "metadump all", "metadump hash", "metadump 1,2,63",
                                      "metadump 64", "metadump", "metadump all extra",
                                      "crawl all", "metadump 1,,2" }[below(8)]);
        break;
    case 7:
        put_str(b, "verbosity ");
        put_text_number(b);
        put_noreply(b);
        break;
    case 8:
        put_str(b, chance(50) ? "shutdown" : "cocytus status now");
        break;
    case 9:
        /* Not commands: unknown words, empty and blank lines, a bare noreply. */
        put_str(b, (const char *[]){ "GET g:1", "sett", "", "    ", "noreply", "getss k",
                                      "flush_al", "\t", "quitt" }[below(9)]);
        break;
    case 10:
        if (chance(30)) {
            /* An overlong line: unless it is a get, the server may close. */
            put_str(b, chance(50) ? "set " : "get ");
            put_noise(b, 2049 + below(3000), NOISE_PRINTABLE);
            break;
        }
        /* fall through */
    default:
        if (chance(15))
            put_str(b, "quit");
        else
            put_noise(b, below(40), NOISE_TEXTY);
        break;
    }
    put_line_end(b);
}

/* ---- meta requests (mg ms md ma mn me) ---- */

/* A pool key in standard base64, for the b flag (the decoded key stays in
 * the bounded pool). */
static void put_base64_pool_key(bytes *b)
{
    static const char digits[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char key[16];
    int n = snprintf(key, sizeof key, "g:%u", below(POOL_SHORT));
    for (int i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)(uint8_t)key[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(uint8_t)key[i + 1] << 8;
        if (i + 2 < n)
            v |= (uint8_t)key[i + 2];
        put_byte(b, (uint8_t)digits[(v >> 18) & 63]);
        put_byte(b, (uint8_t)digits[(v >> 12) & 63]);
        put_byte(b, i + 1 < n ? (uint8_t)digits[(v >> 6) & 63] : '=');
        put_byte(b, i + 2 < n ? (uint8_t)digits[v & 63] : '=');
    }
}

/* One flag of a meta request: a known one with a fitting token, a known one
 * with a wrong token, or a character no command takes. */
static void put_meta_flag(bytes *b)
{
    static const char numeric[] = "TNRCEFJD";   /* flags that carry a number */
    static const char bare[] = "bcfhklqstvIx";  /* flags without a token */
    static const char *const modes[] = { "S", "E", "A", "P", "R", "I", "D", "+", "-", "",
                                         "Z", "SS" };
    put_str(b, chance(95) ? " " : "  ");
    uint32_t r = below(100);
    if (r < 40) {
        put_byte(b, (uint8_t)numeric[below(sizeof numeric - 1)]);
        put_text_number(b);
    } else if (r < 70) {
        put_byte(b, (uint8_t)bare[below(sizeof bare - 1)]);
        if (chance(5))
            put_text_number(b);       /* a token where none belongs */
    } else if (r < 80) {
        put_fmt(b, "M%s", modes[below(sizeof modes / sizeof modes[0])]);
    } else if (r < 90) {
        put_byte(b, 'O');
        put_fill(b, 'o', chance(80) ? below(8) : 32 + below(64));   /* over 31: too long */
    } else {
        put_byte(b, (uint8_t)"!9zZ{~"[below(6)]);
    }
}

static void put_meta_request(bytes *b)
{
    static const char *const cmds[] = { "mg", "ms", "md", "ma", "mn", "me", "mz", "m" };
    const char *cmd = cmds[chance(90) ? below(6) : 6 + below(2)];
    bool set = strcmp(cmd, "ms") == 0;
    size_t vlen = chance(80) ? below(chance(50) ? 16 : 2000) : 0;
    put_str(b, cmd);
    if (strcmp(cmd, "mn") != 0 || chance(10)) {
        put_str(b, " ");
        uint32_t r = below(100);
        if (r < 80) {
            put_text_key(b);
        } else if (r < 92) {
            put_base64_pool_key(b);
            put_str(b, " b");
        } else {
            /* not base64 (or an unknown key) with b */
            put_str(b, (const char *[]){ "!!!!", "abc", "Zm9v", "====", "Zg=" }[below(5)]);
            put_str(b, " b");
        }
    }
    if (set) {
        put_str(b, " ");
        uint32_t r = below(100);
        if (r < 85)
            put_fmt(b, "%zu", vlen);
        else if (r < 92)
            put_fmt(b, "%zu", vlen + 1);
        else if (r < 96)
            put_fmt(b, "%u", MAX_ITEM + 1);   /* refused, its data dropped */
        else
            put_text_number(b);
    }
    uint32_t nflags = chance(90) ? below(6) : below(25);   /* over 17: too many tokens */
    for (uint32_t i = 0; i < nflags; i++)
        put_meta_flag(b);
    put_line_end(b);
    if (set) {
        put_data_block(b, vlen);
    }
}

/* Damage a request now and then: flip, insert NUL, drop or cut bytes. */
static void mutate(bytes *b, size_t start)
{
    size_t n = b->len - start;
    if (n == 0 || !chance(12))
        return;
    size_t at = start + below((uint32_t)n);
    switch (below(4)) {
    case 0:
        b->p[at] ^= (uint8_t)(1u << below(8));
        break;
    case 1:
        b->p[at] = '\0';
        break;
    case 2:
        memmove(b->p + at, b->p + at + 1, b->len - at - 1);
        b->len--;
        break;
    default:
        b->len = at;
        break;
    }
}

static void put_text_request(bytes *b)
{
    size_t start = b->len;
    uint32_t r = below(100);
    if (r < 32)
        put_text_storage(b);
    else if (r < 52)
        put_text_retrieval(b);
    else if (r < 75)
        put_meta_request(b);
    else
        put_text_other(b);
    mutate(b, start);
}

/* ---- binary requests ---- */

enum { KEY_NONE, KEY_NEEDED, KEY_MAYBE };

static const struct bin_op {
    uint8_t op, extlen, key;
    bool value;
} bin_ops[] = {
    { 0x00, 0, KEY_NEEDED, false }, { 0x09, 0, KEY_NEEDED, false },   /* get, getq */
    { 0x0c, 0, KEY_NEEDED, false }, { 0x0d, 0, KEY_NEEDED, false },   /* getk, getkq */
    { 0x01, 8, KEY_NEEDED, true }, { 0x11, 8, KEY_NEEDED, true },     /* set, setq */
    { 0x02, 8, KEY_NEEDED, true }, { 0x12, 8, KEY_NEEDED, true },     /* add, addq */
    { 0x03, 8, KEY_NEEDED, true }, { 0x13, 8, KEY_NEEDED, true },     /* replace(q) */
    { 0x04, 0, KEY_NEEDED, false }, { 0x14, 0, KEY_NEEDED, false },   /* delete(q) */
    { 0x05, 20, KEY_NEEDED, false }, { 0x15, 20, KEY_NEEDED, false }, /* incr(q) */
    { 0x06, 20, KEY_NEEDED, false }, { 0x16, 20, KEY_NEEDED, false }, /* decr(q) */
    { 0x0e, 0, KEY_NEEDED, true }, { 0x19, 0, KEY_NEEDED, true },     /* append(q) */
    { 0x0f, 0, KEY_NEEDED, true }, { 0x1a, 0, KEY_NEEDED, true },     /* prepend(q) */
    { 0x1c, 4, KEY_NEEDED, false }, { 0x1d, 4, KEY_NEEDED, false },   /* touch, gat */
    { 0x1e, 4, KEY_NEEDED, false }, { 0x23, 4, KEY_NEEDED, false },   /* gatq, gatk */
    { 0x24, 4, KEY_NEEDED, false }, { 0x10, 0, KEY_MAYBE, false },    /* gatkq, stat */
    { 0x0a, 0, KEY_NONE, false }, { 0x0b, 0, KEY_NONE, false },       /* noop, version */
    { 0x1b, 4, KEY_NONE, false },                                     /* verbosity */
};

static const uint64_t odd_u64[] = {
    0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
    0x7fffffffffffffffull, 0x8000000000000000ull, 0xffffffffffffffffull,
};

static uint64_t odd_number(void)
{
    return chance(50) ? below(1000) : odd_u64[below(sizeof odd_u64 / sizeof odd_u64[0])];
}

static void put_bin_key(bytes *key, uint8_t rule)
{
    uint32_t r = below(100);
    if (rule == KEY_NONE && r < 85)
        return;
    if (r < 55) {
        put_fmt(key, "g:%u", below(POOL_SHORT));
    } else if (r < 65) {
        put_fmt(key, "g:L%u:", below(POOL_LONG));
        put_fill(key, 'k', 250 - key->len);
    } else if (r < 80) {
        int i = (int)below(POOL_WEIRD);
        put(key, weird_keys[i], weird_len[i]);
    } else if (r < 88) {
        /* empty */
    } else if (r < 96) {
        put_fill(key, 'x', 251);
    } else {
        put_fill(key, 'y', 10000);
    }
}

static void put_bin_request(bytes *b)
{
    size_t start = b->len;
    const struct bin_op *op = &bin_ops[below(sizeof bin_ops / sizeof bin_ops[0])];
    uint8_t opcode = op->op;
    if (chance(6)) {
        /* Any opcode but flush (it would wipe what must survive) and quit. */
        do
            opcode = (uint8_t)rnd();
        while (opcode == 0x08 || opcode == 0x18 || opcode == 0x07 || opcode == 0x17);
    } else if (chance(1)) {
        opcode = chance(50) ? 0x07 : 0x17;     /* quit */
    }

    bytes extras = { 0 }, key = { 0 }, value = { 0 };
    if (op->extlen == 8) {
        put_be(&extras, rnd(), 4);
        put_be(&extras, odd_number(), 4);
    } else if (op->extlen == 20) {
        put_be(&extras, odd_number(), 8);
        put_be(&extras, odd_number(), 8);
        put_be(&extras, chance(20) ? 0xffffffff : odd_number(), 4);
    } else if (op->extlen == 4) {
        put_be(&extras, odd_number(), 4);
    }
    if (chance(8)) {
        extras.len = 0;
        put_noise(&extras, below(chance(80) ? 24 : 256), NOISE_ANY);
    }
    put_bin_key(&key, op->key);
    if (op->value || chance(5))
        put_noise(&value, chance(80) ? below(chance(50) ? 16 : 2000) : 0, NOISE_ANY);

    uint8_t extlen = (uint8_t)extras.len;
    uint16_t keylen = (uint16_t)key.len;
    uint64_t body = (uint64_t)extlen + keylen + value.len;
    uint32_t r = below(100);
    uint32_t bodylen = (uint32_t)body;
    if (r < 4)
        bodylen = 0xffffffff;
    else if (r < 8)
        bodylen = BIN_MAX_BODY + 1;
    else if (r < 11 && body > 0)
        bodylen = (uint32_t)body - 1;
    else if (r < 14)
        bodylen = (uint32_t)body + 1 + below(50);
    else if (r < 16)
        bodylen = (uint32_t)rnd();

    put_byte(b, chance(2) ? (uint8_t)rnd() : 0x80);
    put_byte(b, opcode);
    put_be(b, chance(3) ? (uint16_t)rnd() : keylen, 2);
    put_byte(b, extlen);
    put_byte(b, chance(5) ? (uint8_t)rnd() : 0);
    put_be(b, chance(10) ? (uint16_t)rnd() : 0, 2);
    put_be(b, bodylen, 4);
    put_be(b, rnd(), 4);
    put_be(b, chance(20) ? rnd() : 0, 8);
    put(b, extras.p, extras.len);
    put(b, key.p, key.len);
    put(b, value.p, value.len);
    free(extras.p);
    free(key.p);
    free(value.p);
    if (chance(5))
        b->len = start + below((uint32_t)(b->len - start));   /* truncated */
}

/* ---- what a connection sends ---- */

enum mode { M_NOISE, M_TEXT, M_BINARY, M_MIXED, M_BIG_REPLY, M_HUGE_LINE, N_MODES };

static void build_payload(bytes *b, enum mode mode, size_t budget)
{
    switch (mode) {
    case M_NOISE: {
        uint32_t r = below(4);
        if (r == 0)
            put_byte(b, 0x80);    /* random headers for the binary parser */
        put_noise(b, budget, r == 1 ? NOISE_TEXTY : r == 2 ? NOISE_PRINTABLE : NOISE_ANY);
        return;
    }
    case M_TEXT:
        while (b->len < budget)
            put_text_request(b);
        return;
    case M_BINARY:
        while (b->len < budget)
            put_bin_request(b);
        return;
    case M_MIXED:
        while (b->len < budget) {
            uint32_t r = below(10);
            if (r < 4)
                put_text_request(b);
            else if (r < 8)
                put_bin_request(b);
            else
                put_noise(b, below(64), r == 8 ? NOISE_ANY : NOISE_TEXTY);
        }
        return;
    case M_BIG_REPLY: {
        /* Ask for far more reply than anyone will read. */
        const char *key = sentinels[S_BIG].key;
        int n = 5 + (int)below(40);
        if (chance(50)) {
            for (int i = 0; i < n; i++)
                put_fmt(b, chance(80) ? "get %s\r\n" : "gets %s %s\r\n", key, key);
        } else {
            size_t nkey = strlen(key);
            for (int i = 0; i < n; i++) {
                put_byte(b, 0x80);
                put_byte(b, chance(50) ? 0x00 : 0x0c);     /* get, getk */
                put_be(b, nkey, 2);
                put_be(b, 0, 4);
                put_be(b, nkey, 4);
                put_be(b, (uint64_t)i, 4);
                put_be(b, 0, 8);
                put(b, key, nkey);
            }
        }
        return;
    }
    case M_HUGE_LINE: {
        /* A multi-get line near the 1 MB limit: with its newline just under
         * the limit, or none before it is passed (the server closes). */
        bool over = chance(50);
        size_t line_len = over ? (1u << 20) + 64 + below(4096) : (1u << 20) - 4096 - below(65536);
        put_str(b, "get");
        while (b->len < line_len) {
            if (chance(2))
                put_fmt(b, " g:%u", below(POOL_SHORT));
            else
                put_fmt(b, " miss:%u", below(1000000));
        }
        if (!over)
            put_str(b, "\r\n");
        return;
    }
    default:
        return;
    }
}

/* ---- a round: many connections at once ---- */

enum end_style {
    E_READ_ALL,     /* read until quiet, then close */
    E_HALF_CLOSE,   /* shutdown(SHUT_WR), read until EOF */
    E_CLOSE,        /* close without reading */
    E_RESET,        /* close with SO_LINGER 0: a reset */
    E_READ_SOME,    /* read a little of the reply, then close or reset */
    N_STYLES
};

enum gstate { G_SENDING, G_DRAINING, G_DONE };

typedef struct gconn {
    int fd;
    bytes out;
    size_t sent, cut;         /* cut: stop sending here (mid-request if < out.len) */
    int chunking;             /* 0 all at once, 1 byte-wise start, 2 small, 3 large */
    enum end_style style;
    enum gstate state;
    size_t received, read_limit;
    int64_t last_progress, drain_until, drain_end;
    uint64_t rs;              /* this connection's generator for send-time choices */
} gconn;

static uint32_t conn_below(gconn *g, uint32_t n)
{
    return (uint32_t)(next(&g->rs) % n);
}

typedef struct tally {
    int conns, rounds, closed_by_server, abandoned;
    uint64_t sent, received;
} tally;

static void finish(gconn *g, bool reset)
{
    if (g->state == G_DONE)
        return;
    if (reset) {
        struct linger lg = { 1, 0 };
        setsockopt(g->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(g->fd);
    g->fd = -1;
    g->state = G_DONE;
    free(g->out.p);
    g->out.p = NULL;
}

static bool reads_replies(const gconn *g)
{
    return g->style == E_READ_ALL || g->style == E_HALF_CLOSE || g->style == E_READ_SOME;
}

/* Reads what is there; false when the peer closed or reset. */
static bool drain(gconn *g, tally *t)
{
    char sink[16384];
    for (;;) {
        ssize_t n = recv(g->fd, sink, sizeof sink, 0);
        if (n > 0) {
            g->received += (size_t)n;
            t->received += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        return false;
    }
}

static void sent_all(gconn *g, int64_t now)
{
    switch (g->style) {
    case E_HALF_CLOSE:
        shutdown(g->fd, SHUT_WR);
        /* fall through */
    case E_READ_ALL:
    case E_READ_SOME:
        g->state = G_DRAINING;
        g->drain_until = now + QUIET_MS;
        g->drain_end = now + DRAIN_MAX_MS;
        break;
    case E_CLOSE:
        finish(g, false);
        break;
    default:
        finish(g, true);
        break;
    }
}

static void send_some(gconn *g, tally *t, int64_t now)
{
    size_t left = g->cut - g->sent;
    size_t n = left;
    if (g->chunking == 1 && g->sent < 256)
        n = 1;
    else if (g->chunking == 2)
        n = 1 + conn_below(g, 16);
    else if (g->chunking == 3)
        n = 1 + conn_below(g, 4096);
    if (n > left)
        n = left;
    ssize_t w = send(g->fd, g->out.p + g->sent, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        g->sent += (size_t)w;
        t->sent += (uint64_t)w;
        g->last_progress = now;
        if (g->sent == g->cut) {
            if (g->cut < g->out.len) {
                t->abandoned++;
                finish(g, conn_below(g, 2));   /* gone mid-request */
            } else {
                sent_all(g, now);
            }
        }
        return;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    t->closed_by_server++;
    finish(g, false);
}

/* One round: nconns connections, each with a mode picked from modes; with
 * huge_line, the first one sends a near-1 MB multi-get line instead. */
static void run_round(const enum mode *modes, int nmodes, int nconns, size_t budget,
                      bool huge_line, tally *t)
{
    gconn *g = calloc((size_t)nconns, sizeof *g);
    struct pollfd *pfd = calloc((size_t)nconns, sizeof *pfd);
    ck_assert(g != NULL && pfd != NULL);
    int64_t start = harness_now_ms();
    for (int i = 0; i < nconns; i++) {
        raw_conn rc;
        ck_assert_msg(raw_open(&rc, target.port), "cannot connect to the server");
        g[i].fd = rc.fd;
        fcntl(g[i].fd, F_SETFL, fcntl(g[i].fd, F_GETFL) | O_NONBLOCK);
        enum mode mode = i == 0 && huge_line ? M_HUGE_LINE : modes[below((uint32_t)nmodes)];
        size_t want = 16 + below((uint32_t)(chance(10) ? budget * 8 : budget));
        build_payload(&g[i].out, mode, want);
        g[i].cut = chance(15) && g[i].out.len > 1 ? below((uint32_t)g[i].out.len) : g[i].out.len;
        g[i].chunking = (int)below(4);
        g[i].style = mode == M_BIG_REPLY ? (chance(50) ? E_CLOSE : chance(50) ? E_RESET : E_READ_SOME)
                                        : (enum end_style)below(N_STYLES);
        g[i].read_limit = below(200000);
        g[i].state = G_SENDING;
        g[i].rs = rnd();
        g[i].last_progress = start;
        if (g[i].cut == 0) {
            t->abandoned++;
            finish(&g[i], chance(50));
        }
    }
    t->conns += nconns;
    t->rounds++;

    for (;;) {
        int64_t now = harness_now_ms();
        int active = 0;
        for (int i = 0; i < nconns; i++) {
            pfd[i].fd = g[i].state == G_DONE ? -1 : g[i].fd;
            pfd[i].events = 0;
            pfd[i].revents = 0;
            if (g[i].state == G_SENDING)
                pfd[i].events |= POLLOUT;
            if (g[i].state == G_DRAINING || (g[i].state == G_SENDING && reads_replies(&g[i])))
                pfd[i].events |= POLLIN;
            active += g[i].state != G_DONE;
        }
        if (active == 0 || now - start > ROUND_MS)
            break;
        poll(pfd, (nfds_t)nconns, 5);
        now = harness_now_ms();
        for (int i = 0; i < nconns; i++) {
            gconn *c = &g[i];
            if (c->state == G_DONE)
                continue;
            if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && (pfd[i].events & POLLIN)) {
                size_t before = c->received;
                if (!drain(c, t)) {
                    t->closed_by_server++;
                    finish(c, false);
                    continue;
                }
                if (c->received > before && c->state == G_DRAINING)
                    c->drain_until = now + QUIET_MS;
                if (c->style == E_READ_SOME && c->received >= c->read_limit) {
                    finish(c, conn_below(c, 2));    /* gone mid-reply */
                    continue;
                }
            }
            if (c->state == G_SENDING) {
                if (pfd[i].revents & POLLOUT)
                    send_some(c, t, now);
                else if (now - c->last_progress > STALL_MS)
                    finish(c, conn_below(c, 2));    /* the server stopped reading us */
            } else if (c->state == G_DRAINING &&
                       (now > c->drain_until || now > c->drain_end)) {
                finish(c, false);
            }
        }
    }
    for (int i = 0; i < nconns; i++)
        finish(&g[i], conn_below(&g[i], 2));
    free(g);
    free(pfd);
}

static void barrage(const char *name, const enum mode *modes, int nmodes, int rounds,
                    int nconns, size_t budget, bool huge_lines)
{
    rng = base_seed ^ (uint64_t)strlen(name) * 0x100000001b3ull ^ (uint64_t)name[0] << 40;
    make_weird_keys();
    tally t = { 0 };
    int64_t start = harness_now_ms();
    for (int r = 0; r < rounds; r++) {
        run_round(modes, nmodes, nconns, budget, huge_lines, &t);
        char when[96];
        snprintf(when, sizeof when, "%s round %d (seed %#llx)", name, r,
                 (unsigned long long)base_seed);
        check_server(when);
    }
    fprintf(stderr, "garbage %s: %d rounds, %d connections, %llu bytes sent, %llu received, "
                    "%d closed by the server, %d abandoned mid-request, %lld ms\n",
            name, t.rounds, t.conns, (unsigned long long)t.sent, (unsigned long long)t.received,
            t.closed_by_server, t.abandoned, (long long)(harness_now_ms() - start));
}

/* ---- tests ---- */

START_TEST(test_random_bytes)
{
    const enum mode modes[] = { M_NOISE };
    barrage("noise", modes, 1, 8, 24, 4096, false);
}
END_TEST

START_TEST(test_text_mix)
{
    const enum mode modes[] = { M_TEXT };
    barrage("text", modes, 1, 10, 32, 8192, false);
}
END_TEST

START_TEST(test_binary_mix)
{
    const enum mode modes[] = { M_BINARY };
    barrage("binary", modes, 1, 10, 32, 8192, false);
}
END_TEST

START_TEST(test_everything_at_once)
{
    const enum mode modes[] = {
        M_NOISE, M_TEXT, M_TEXT, M_BINARY, M_BINARY, M_MIXED, M_MIXED, M_MIXED, M_BIG_REPLY,
    };
    barrage("mixed", modes, sizeof modes / sizeof modes[0], 10, MAX_CONNS, 4096, true);
}
END_TEST

START_TEST(test_abandoned_replies)
{
    const enum mode modes[] = { M_BIG_REPLY };
    barrage("big-reply", modes, 1, 8, 32, 0, false);
}
END_TEST

START_TEST(test_server_still_running)
{
    rng = base_seed;
    check_server("after every barrage");

    /* The barrage must have reached the commands, not just the parser. */
    static char reply[16384];
    ck_assert_msg(read_stats(reply, sizeof reply), "no stats reply");
    const char *names[] = { "cmd_get", "get_hits", "cmd_set", "cmd_meta", "total_connections",
                            "curr_connections", "curr_items", "evictions" };
    fprintf(stderr, "garbage: server stats:");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        fprintf(stderr, " %s=%lld", names[i], stat_value(reply, names[i]));
    fprintf(stderr, "\n");
    if (target.probe_only) {
        /* it stores nothing, so count the connections it served */
        long long conns = stat_value(reply, "total_connections") - target.conns_before;
        fprintf(stderr, "garbage: %lld connections reached the server\n", conns);
        ck_assert_msg(target.conns_before >= 0 && conns >= 1000,
                      "too few connections reached the server (%lld)", conns);
        ck_assert_msg(target_alive(), "the server is gone");
        return;
    }
    ck_assert_msg(stat_value(reply, "cmd_set") >= 100 && stat_value(reply, "get_hits") >= 100,
                  "the barrage stored or fetched too little to mean anything");
    /* (cocytus-proxy counts no meta commands of its own) */
    long long meta = stat_value(reply, "cmd_meta");
    ck_assert_msg(meta < 0 ? target.external : meta >= 100,
                  "the barrage ran too few meta commands (cmd_meta %lld)", meta);
    ck_assert_msg(target_alive(), "the server is gone");
}
END_TEST

/* The group's parity processes still hold exactly what its data processes
 * hold: the metadata replicas and the parity of every used range (verify),
 * and every data process's region decodes from the others (decode-check). */
START_TEST(test_group_still_consistent)
{
    ck_assert_msg(cgroup_write_endpoints(&target.group, -1, -1), "cannot write endpoints");
    static const char *const checks[][2] = { { "verify", NULL }, { "decode-check", NULL } };
    static char out[16384];
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        int rc = cgroup_cli(&target.group, checks[i], out, sizeof out, 25000);
        fprintf(stderr, "garbage: $ cocytus-cli %s\n%s", checks[i][0], out);
        ck_assert_msg(rc == 0 && strstr(out, "group 0: OK") != NULL,
                      "cocytus-cli %s after the barrage exited %d:\n%s", checks[i][0], rc, out);
    }
    ck_assert_msg(target_alive(), "a server is gone");
}
END_TEST

static Suite *garbage_suite(bool rs)
{
    const char *name = target.external ? "garbage at GARBAGE_PORT"
                       : rs            ? "garbage at an RS(3,5) data process"
                                       : "garbage at a plain server";
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(target.external ? "external" : rs ? "rs" : "plain");
    tcase_add_unchecked_fixture(tc, target.external ? start_external
                                    : rs            ? start_group
                                                    : start_plain,
                                target_stop);
    tcase_add_checked_fixture(tc, require_server, NULL);
    tcase_set_timeout(tc, target.external || rs ? 60 : 30);   /* a group (and a proxy): slower */
    tcase_add_test(tc, test_random_bytes);
    tcase_add_test(tc, test_text_mix);
    tcase_add_test(tc, test_binary_mix);
    tcase_add_test(tc, test_everything_at_once);
    tcase_add_test(tc, test_abandoned_replies);
    tcase_add_test(tc, test_server_still_running);
    if (rs)
        tcase_add_test(tc, test_group_still_consistent);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *port = getenv("GARBAGE_PORT");
    if (port && *port && !read_external_target(port, getenv("GARBAGE_PIDS"),
                                                      getenv("GARBAGE_STORES")))
        return EXIT_FAILURE;
    SRunner *sr = srunner_create(garbage_suite(false));
    if (!target.external)
        srunner_add_suite(sr, garbage_suite(true));
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
