/* cocytus-bench.c - YCSB-style load generator on libcocytus.
 *
 * One thread per connection, each with its own cocytus_t and one request in
 * flight (libcocytus is synchronous), or a batch of --depth requests.  A load phase sets every record once;
 * a run phase mixes gets and sets of records chosen uniformly or by a
 * scrambled zipfian (see ycsb_gen.h), for a duration or an operation count,
 * closed-loop or paced to a target rate.  Every worker counts into its own
 * histograms (latency_hist.h: single-writer atomics, no lock on the request
 * path); a reporter thread reads them at each interval end for the live
 * progress line and the CSV time series, and the summary merges them once
 * the workers are joined.
 *
 * Values are self-describing: "<key>#<version>#" followed by filler bytes
 * drawn from a generator seeded by key and version, so --verify can rebuild
 * the expected value from the header of the one it read.  Options, output
 * lines and exit codes are a contract with the experiment scripts: see
 * docs/bench.md before changing them.
 *
 * --route follow-raw replaces libcocytus by raw_client.h (text protocol over
 * kept sockets, every request to the first seed, MOVED followed each time):
 * the follow baseline without libmemcached's reconnect after each MOVED.
 *
 * --depth D > 1 keeps D requests in flight per connection: the worker still
 * opens its cocytus_t for the slot map, but sends batches of D pipelined
 * text requests over raw sockets routed by that map (raw_pipe.h), and
 * accounts for each reply as it is read, exactly as for one request.
 *
 * --deadline-ms sets libcocytus's retry budget per call (map and follow
 * routes): how long a request is retried through a server failure before it
 * counts as an error.  Errors are always counted and reported, whatever the
 * budget. */
#define _GNU_SOURCE

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "latency_hist.h"
#include "authfile.h"
#include "libcocytus.h"
#include "raw_client.h"
#include "raw_pipe.h"
#include "ycsb_gen.h"

#define MAX_CONNECTIONS 1024
#define MAX_VALUE_SIZE (64u << 20)      /* far above any server's item limit */
#define HEADER_MAX (YCSB_KEY_LEN + 22)  /* key, '#', 20 digits, '#' */
#define LOG_LIMIT 5                     /* failure lines printed per worker */
#define EXIT_VERIFY 1
#define EXIT_USAGE 2
#define NS_PER_S 1000000000ULL

/* The filler alphabet: 64 printable characters, 6 random bits each. */
static const char FILLER_CHARS[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

enum distribution { DIST_UNIFORM, DIST_ZIPFIAN };
enum phase { PHASE_LOAD, PHASE_RUN };
/* map, follow: libcocytus's two routes; follow-raw: raw_client.h. */
enum route { ROUTE_MAP, ROUTE_FOLLOW, ROUTE_FOLLOW_RAW };

#define RAW_TIMEOUT_MS 1000     /* as libcocytus's per-try timeout */

struct value_spec {
    int zipf;            /* 0: every value is min bytes */
    uint32_t min, max;
};

struct config {
    const char *servers;
    enum route route;
    int binary;
    uint64_t records;
    int load, run;
    double read_ratio;
    enum distribution dist;
    struct value_spec vsize;
    const char *vsize_text;
    int connections;
    unsigned depth;                /* requests in flight per connection (raw_pipe.h when > 1) */
    double duration_s;
    uint64_t operations;      /* 0: run for duration_s */
    double rate;              /* total ops/s, 0: closed loop */
    unsigned interval_ms;
    const char *csv_path;
    const char *json_path;
    int verify;
    int verify_latest;             /* sets only to own records; reads of them must be the last write */
    int misses_ok;                 /* --misses-ok: with --verify, a miss is no error (evictions) */
    uint64_t seed;
    int quiet;
    int print_keys;                /* --print-keys: list "<slot> <key>" and exit */
    const char *only_server;       /* --only-server: records whose slot it serves, or NULL */
    int deadline_ms;               /* libcocytus deadline_ms; 0: the library's default */
    const char *auth_path;         /* --auth-file, or NULL */
    struct auth_pair auth;         /* its first user:password pair */
    char auth_data[2 * AUTHFILE_FIELD_MAX + 2];   /* "user password" for raw connections */
    size_t nauth;
};

/* Counters of one operation type in one worker (single writer). */
struct op_stats {
    _Atomic uint64_t ops;          /* issued, failed ones included */
    _Atomic uint64_t errors;       /* failed; with --verify also misses */
    _Atomic uint64_t misses;
    _Atomic uint64_t wrong;
    struct latency_hist lat;       /* answered requests only */
};

struct bench;
struct batch_op;

struct worker {
    int id;
    struct bench *b;
    cocytus_t *client;             /* map, follow */
    struct raw_client *raw;        /* follow-raw */
    struct raw_pipe *pipe;         /* --depth > 1: batches routed by client's map */
    struct batch_op *batch;        /* the batch being built or read, depth entries */
    unsigned nbatch;
    struct ycsb_rng rng;
    char *value;                   /* the value being written */
    char *expect;                  /* the value a read should have returned */
    uint64_t seq;                  /* sets issued in the run phase */
    uint64_t *latest;              /* --verify-latest: last acknowledged version of each
                                    * own record (index rec / C), VERSION_UNKNOWN if not known */
    int logged;
    pthread_t thread;
    struct op_stats load, get, set;
};

struct bench {
    struct config cfg;
    struct ycsb_zipf key_zipf;
    struct ycsb_zipf size_zipf;
    uint64_t *rec_ids;             /* --only-server: record i is YCSB record rec_ids[i] */
    struct worker **workers;
    int nworkers;
    enum phase phase;
    uint64_t start_ns;             /* of the phase in progress */
    uint64_t deadline_ns;          /* 0: none (load, or -o) */
    FILE *csv;
};

/* Totals of one operation type over every worker. */
struct op_total {
    uint64_t ops, errors, misses, wrong;
    struct latency_counts lat;
};

struct phase_result {
    int ran;
    double seconds;
};

/* ---- small helpers ---- */

/* The YCSB id of record rec: rec itself, or with --only-server the id of
 * the rec-th YCSB record that server owns. */
static uint64_t record_id(const struct bench *b, uint64_t rec)
{
    return b->rec_ids != NULL ? b->rec_ids[rec] : rec;
}

/* The key of record rec. */
static size_t record_key(const struct bench *b, uint64_t rec, char *key)
{
    return ycsb_key_name(record_id(b, rec), key);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void sleep_until_ns(uint64_t t)
{
    struct timespec ts = { (time_t)(t / NS_PER_S), (long)(t % NS_PER_S) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void bump(_Atomic uint64_t *v)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static uint64_t load_counter(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

/* ---- values ---- */

/* Bytes of the value of record rec at version v (deterministic, so a
 * reader can check the length from the version in the header). */
static uint32_t value_size(const struct bench *b, uint64_t rec, uint64_t version)
{
    const struct value_spec *vs = &b->cfg.vsize;
    if (!vs->zipf)
        return vs->min;
    /* by the key's YCSB id, so --only-server's records keep their sizes */
    uint64_t h = ycsb_mix64(ycsb_fnv64(record_id(b, rec)) ^ ycsb_mix64(version + 1));
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
    return vs->min + (uint32_t)ycsb_zipf_at(&b->size_zipf, u);
}

/* Writes the header "<key>#<version>#" into buf; returns its length. */
static size_t write_header(char *buf, const char *key, size_t nkey, uint64_t version)
{
    char digits[21];
    int nd = 0;
    do {
        digits[nd++] = (char)('0' + version % 10);
        version /= 10;
    } while (version != 0);
    memcpy(buf, key, nkey);
    size_t n = nkey;
    buf[n++] = '#';
    while (nd > 0)
        buf[n++] = digits[--nd];
    buf[n++] = '#';
    return n;
}

/* Fills buf[0..size) with the value of key at version: the header, then
 * filler from a generator seeded by key and version, cut at size. */
static void make_value(char *buf, size_t size, const char *key, size_t nkey, uint64_t version)
{
    char header[HEADER_MAX];
    size_t nh = write_header(header, key, nkey, version);
    size_t n = nh < size ? nh : size;
    memcpy(buf, header, n);
    uint64_t state = ycsb_fnv64_bytes(key, nkey) ^ ycsb_mix64(version);
    while (n < size) {
        state += 0x9e3779b97f4a7c15ULL;
        uint64_t r = ycsb_mix64(state);
        for (int i = 0; i < 10 && n < size; i++) {
            buf[n++] = FILLER_CHARS[r & 63];
            r >>= 6;
        }
    }
}

#define VERSION_UNKNOWN UINT64_MAX

/* Checks a value read for record rec (key): 0 when it is exactly what the
 * bench writes for that key at the version its header names, -1 if not.
 * A value shorter than its header (tiny sizes) is checked on the bytes it
 * has: the key, '#', digits. */
static int check_value(struct worker *w, uint64_t rec, const char *key, size_t nkey,
                       const char *val, size_t nval, uint64_t *version_out)
{
    size_t i = 0;
    *version_out = VERSION_UNKNOWN;
    for (; i < nkey; i++) {
        if (i == nval)
            return 0;
        if (val[i] != key[i])
            return -1;
    }
    if (i == nval)
        return 0;
    if (val[i++] != '#')
        return -1;
    uint64_t version = 0;
    size_t digits = 0;
    for (; i < nval && val[i] != '#'; i++, digits++) {
        if (val[i] < '0' || val[i] > '9' || digits == 20)
            return -1;
        uint64_t d = (uint64_t)(val[i] - '0');
        if (version > (UINT64_MAX - d) / 10)
            return -1;
        version = version * 10 + d;
    }
    if (i == nval)
        return 0;               /* cut inside the header: nothing more to compare */
    if (digits == 0)
        return -1;
    *version_out = version;
    uint32_t want = value_size(w->b, rec, version);
    if (nval != want)
        return -1;
    make_value(w->expect, want, key, nkey, version);
    return memcmp(w->expect, val, nval) == 0 ? 0 : -1;
}

/* ---- failures ---- */

/* Prints up to LOG_LIMIT failures per worker, then one notice. */
static void log_failure(struct worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void log_failure(struct worker *w, const char *fmt, ...)
{
    if (w->logged > LOG_LIMIT)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (w->logged++ < LOG_LIMIT)
        fprintf(stderr, "cocytus-bench: connection %d: %s\n", w->id, line);
    else
        fprintf(stderr, "cocytus-bench: connection %d: more failures, not shown\n", w->id);
}

/* The first bytes of a value, unprintable ones as '.', for a log line. */
static void value_excerpt(const char *val, size_t nval, char *out, size_t cap)
{
    size_t n = nval < cap - 1 ? nval : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)val[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '.';
    }
    out[n] = '\0';
}

/* ---- requests ---- */

/* What a request came to, whichever client sent it. */
enum outcome { OUT_OK, OUT_MISS, OUT_FAILED };

/* Why the worker's last request failed: "<reason>: <detail>". */
static void failure_text(struct worker *w, cocytus_rc rc, enum raw_rc rrc, char *out, size_t cap)
{
    if (w->raw != NULL)
        snprintf(out, cap, "%s: %s", raw_strerror(rrc), raw_client_error(w->raw));
    else
        snprintf(out, cap, "%s: %s", cocytus_strerror(rc), cocytus_last_error(w->client));
}

/* set through the worker's client; on failure the reason goes into why. */
static enum outcome client_set(struct worker *w, const char *key, size_t nkey, const char *val,
                               size_t nval, char *why, size_t cap)
{
    if (w->raw != NULL) {
        enum raw_rc rrc = raw_set(w->raw, key, nkey, val, nval);
        if (rrc == RAW_OK)
            return OUT_OK;
        failure_text(w, COCYTUS_OK, rrc, why, cap);
        return OUT_FAILED;
    }
    cocytus_rc rc = cocytus_set(w->client, key, nkey, val, nval, 0, 0);
    if (rc == COCYTUS_OK)
        return OUT_OK;
    failure_text(w, rc, RAW_OK, why, cap);
    return OUT_FAILED;
}

/* get through the worker's client: on OUT_OK *val and *nval hold the value
 * (it->value for libcocytus, to be freed with cocytus_item_free(); inside
 * the raw client otherwise, valid until its next request). */
static enum outcome client_get(struct worker *w, const char *key, size_t nkey,
                               cocytus_item_t *it, const char **val, size_t *nval, char *why,
                               size_t cap)
{
    it->value = NULL;
    if (w->raw != NULL) {
        enum raw_rc rrc = raw_get(w->raw, key, nkey, val, nval);
        if (rrc == RAW_OK || rrc == RAW_MISS)
            return rrc == RAW_OK ? OUT_OK : OUT_MISS;
        failure_text(w, COCYTUS_OK, rrc, why, cap);
        return OUT_FAILED;
    }
    cocytus_rc rc = cocytus_get(w->client, key, nkey, it);
    if (rc == COCYTUS_OK) {
        *val = it->value;
        *nval = it->nvalue;
        return OUT_OK;
    }
    if (rc == COCYTUS_NOT_FOUND)
        return OUT_MISS;
    failure_text(w, rc, RAW_OK, why, cap);
    return OUT_FAILED;
}

/* --verify-latest: whether this worker is the only writer of record rec. */
static bool owns_record(const struct worker *w, uint64_t rec)
{
    return w->latest != NULL && rec % (uint64_t)w->b->nworkers == (uint64_t)w->id;
}

/* --verify-latest: the worker's own record nearest to rec (the records
 * i, i + C, i + 2C, ... belong to worker i). */
static uint64_t own_record(const struct worker *w, uint64_t rec)
{
    uint64_t c = (uint64_t)w->b->nworkers;
    uint64_t r = rec - rec % c + (uint64_t)w->id;
    if (r >= w->b->cfg.records)
        r = r >= c ? r - c : (uint64_t)w->id;
    return r;
}

/* Accounts a finished set of record rec at version: its latency (lat_ns,
 * answered requests only), --verify-latest's memory, a failure. */
static void finish_set(struct worker *w, struct op_stats *st, uint64_t rec, uint64_t version,
                       const char *key, uint32_t size, enum outcome oc, const char *why,
                       uint64_t lat_ns)
{
    bump(&st->ops);
    if (owns_record(w, rec))     /* a failed set may or may not have been applied */
        w->latest[rec / (uint64_t)w->b->nworkers] = oc == OUT_OK ? version : VERSION_UNKNOWN;
    if (oc == OUT_OK) {
        lh_record(&st->lat, lat_ns);
        return;
    }
    bump(&st->errors);
    log_failure(w, "set %s (%" PRIu32 " bytes): %s", key, size, why);
}

/* Sets record rec to its value at version; t0 is when the request was due
 * (its start, or its slot in the schedule under --rate). */
static void do_set(struct worker *w, struct op_stats *st, uint64_t rec, uint64_t version,
                   uint64_t t0)
{
    char key[YCSB_KEY_LEN + 1];
    size_t nkey = record_key(w->b, rec, key);
    uint32_t size = value_size(w->b, rec, version);
    make_value(w->value, size, key, nkey, version);
    if (t0 == 0)
        t0 = now_ns();
    char why[320];
    enum outcome oc = client_set(w, key, nkey, w->value, size, why, sizeof(why));
    finish_set(w, st, rec, version, key, size, oc, why, now_ns() - t0);
}

/* Accounts a finished get of record rec: latency, miss, failure, and with
 * --verify the value's check (val[0..nval) on OUT_OK). */
static void finish_get(struct worker *w, uint64_t rec, const char *key, size_t nkey,
                       enum outcome oc, const char *val, size_t nval, const char *why,
                       uint64_t lat_ns)
{
    struct op_stats *st = &w->get;
    bump(&st->ops);
    if (oc != OUT_FAILED)
        lh_record(&st->lat, lat_ns);
    if (oc == OUT_MISS) {
        bump(&st->misses);
        if (w->b->cfg.verify && !w->b->cfg.misses_ok) {
            bump(&st->errors);
            log_failure(w, "get %s: miss on a loaded key", key);
        }
        return;
    }
    if (oc == OUT_FAILED) {
        bump(&st->errors);
        log_failure(w, "get %s: %s", key, why);
        return;
    }
    uint64_t version = VERSION_UNKNOWN;
    uint64_t *last = owns_record(w, rec) ? &w->latest[rec / (uint64_t)w->b->nworkers] : NULL;
    if (w->b->cfg.verify && check_value(w, rec, key, nkey, val, nval, &version) != 0) {
        char excerpt[48];
        value_excerpt(val, nval, excerpt, sizeof(excerpt));
        bump(&st->wrong);
        log_failure(w, "get %s: wrong value (%zu bytes): '%s'", key, nval, excerpt);
    } else if (last != NULL && version != VERSION_UNKNOWN && *last != VERSION_UNKNOWN
               && version != *last) {
        bump(&st->wrong);
        log_failure(w, "get %s: stale value: version %" PRIu64 ", last written %" PRIu64, key,
                    version, *last);
    }
}

static void do_get(struct worker *w, uint64_t rec, uint64_t t0)
{
    char key[YCSB_KEY_LEN + 1];
    size_t nkey = record_key(w->b, rec, key);
    cocytus_item_t it;
    const char *val = NULL;
    size_t nval = 0;
    char why[320];
    if (t0 == 0)
        t0 = now_ns();
    enum outcome oc = client_get(w, key, nkey, &it, &val, &nval, why, sizeof(why));
    finish_get(w, rec, key, nkey, oc, val, nval, why, now_ns() - t0);
    if (it.value != NULL)
        cocytus_item_free(&it);
}

/* The record of the next request. */
static uint64_t choose_record(struct worker *w)
{
    const struct bench *b = w->b;
    if (b->cfg.dist == DIST_UNIFORM)
        return ycsb_rng_below(&w->rng, b->cfg.records);
    return ycsb_zipf_scrambled_at(&b->key_zipf, ycsb_rng_unit(&w->rng), b->cfg.records);
}

/* ---- batches (--depth D > 1, raw_pipe.h) ---- */

/* What a request of a batch was, to account for it when its reply is read. */
struct batch_op {
    int is_get;
    uint64_t rec, version;
    struct op_stats *st;           /* a set's: load or set */
    uint32_t size;                 /* a set's value bytes */
    char key[YCSB_KEY_LEN + 1];
    size_t nkey;
};

/* Adds "get rec" to the worker's batch. */
static void batch_get(struct worker *w, uint64_t rec)
{
    struct batch_op *op = &w->batch[w->nbatch++];
    op->is_get = 1;
    op->rec = rec;
    op->nkey = record_key(w->b, rec, op->key);
    raw_pipe_add_get(w->pipe, op->key, op->nkey);
}

/* Adds "set rec to its value at version" to the worker's batch (the pipe
 * copies the value, so w->value serves the next one). */
static void batch_set(struct worker *w, struct op_stats *st, uint64_t rec, uint64_t version)
{
    struct batch_op *op = &w->batch[w->nbatch++];
    op->is_get = 0;
    op->rec = rec;
    op->version = version;
    op->st = st;
    op->nkey = record_key(w->b, rec, op->key);
    op->size = value_size(w->b, rec, version);
    make_value(w->value, op->size, op->key, op->nkey, version);
    raw_pipe_add_set(w->pipe, op->key, op->nkey, w->value, op->size);
}

/* raw_pipe's report of request i: the same accounting as one request at a
 * time, with the latency counted from when the batch was sent. */
static void batch_done(void *ctx, size_t i, enum raw_rc rc, const char *val, size_t nval,
                       const char *why)
{
    struct worker *w = ctx;
    const struct batch_op *op = &w->batch[i];
    uint64_t lat = now_ns() - raw_pipe_sent_ns(w->pipe);
    enum outcome oc = rc == RAW_OK ? OUT_OK : rc == RAW_MISS ? OUT_MISS : OUT_FAILED;
    char text[320];
    snprintf(text, sizeof(text), "%s: %s", raw_strerror(rc), why);
    if (op->is_get)
        finish_get(w, op->rec, op->key, op->nkey, oc, val, nval, text, lat);
    else
        finish_set(w, op->st, op->rec, op->version, op->key, op->size, oc, text, lat);
}

/* Sends the worker's batch, accounts for every reply, empties it. */
static void batch_run(struct worker *w)
{
    raw_pipe_finish(w->pipe, batch_done, w);     /* leaves the pipe's batch empty */
    w->nbatch = 0;
}

/* ---- workers ---- */

/* The load phase in batches of --depth sets. */
static void load_batches(struct worker *w)
{
    const struct bench *b = w->b;
    uint64_t rec = (uint64_t)w->id;
    while (rec < b->cfg.records) {
        for (; rec < b->cfg.records && w->nbatch < b->cfg.depth; rec += (uint64_t)b->nworkers)
            batch_set(w, &w->load, rec, 0);
        batch_run(w);
    }
}

static void *load_main(void *arg)
{
    struct worker *w = arg;
    const struct bench *b = w->b;
    if (w->pipe != NULL) {
        load_batches(w);
        return NULL;
    }
    /* Worker i loads records i, i + C, i + 2C, ...: disjoint, all covered. */
    for (uint64_t rec = (uint64_t)w->id; rec < b->cfg.records; rec += (uint64_t)b->nworkers)
        do_set(w, &w->load, rec, 0, 0);
    return NULL;
}

/* This worker's share of -o operations. */
static uint64_t op_share(const struct bench *b, int id)
{
    uint64_t n = b->cfg.operations, c = (uint64_t)b->nworkers;
    return n / c + ((uint64_t)id < n % c ? 1 : 0);
}

/* Versions unique over workers: 1 + seq * C + id (0 is the load's). */
static uint64_t next_version(struct worker *w)
{
    return 1 + w->seq++ * (uint64_t)w->b->nworkers + (uint64_t)w->id;
}

/* The run phase in batches of --depth requests (closed loop): the next
 * batch is drawn once every reply of the last one is in. */
static void run_batches(struct worker *w, uint64_t budget)
{
    const struct bench *b = w->b;
    uint64_t done = 0;
    while (done < budget) {
        if (b->deadline_ns && now_ns() >= b->deadline_ns)
            break;
        while (w->nbatch < b->cfg.depth && done + w->nbatch < budget) {
            uint64_t rec = choose_record(w);
            if (ycsb_rng_unit(&w->rng) < b->cfg.read_ratio) {
                batch_get(w, rec);
            } else {
                uint64_t version = next_version(w);
                batch_set(w, &w->set, w->latest != NULL ? own_record(w, rec) : rec, version);
            }
        }
        done += w->nbatch;
        batch_run(w);
    }
}

static void *run_main(void *arg)
{
    struct worker *w = arg;
    const struct bench *b = w->b;
    uint64_t budget = b->cfg.operations ? op_share(b, w->id) : UINT64_MAX;
    if (w->pipe != NULL) {
        run_batches(w, budget);
        return NULL;
    }
    uint64_t period = 0, due = b->start_ns;
    if (b->cfg.rate > 0) {
        /* Linux lets a sleep overrun by 50 us by default; a paced worker
         * counts its wake-up delay as latency, so ask for 1 ns. */
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        period = (uint64_t)(1e9 * b->nworkers / b->cfg.rate);
        /* Staggered so that the workers' requests do not all leave at once. */
        due += period * (uint64_t)w->id / (uint64_t)b->nworkers;
    }
    for (uint64_t done = 0; done < budget; done++) {
        uint64_t t0 = 0;
        if (period > 0) {
            /* Open loop: the i-th request is due at start + i * period,
             * and its latency counts from then (queueing included). */
            due += period;
            if (b->deadline_ns && due >= b->deadline_ns)
                break;
            if (now_ns() < due)
                sleep_until_ns(due);
            t0 = due;
        } else if (b->deadline_ns && now_ns() >= b->deadline_ns) {
            break;
        }
        uint64_t rec = choose_record(w);
        if (ycsb_rng_unit(&w->rng) < b->cfg.read_ratio) {
            do_get(w, rec, t0);
        } else {
            uint64_t version = next_version(w);
            if (w->latest != NULL)
                rec = own_record(w, rec);
            do_set(w, &w->set, rec, version, t0);
        }
    }
    return NULL;
}

/* ---- the reporter thread ---- */

struct reporter {
    struct bench *b;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    uint64_t last_ns;
    uint64_t prev_errors;
    struct latency_counts *prev;   /* per worker: [2i] get or load, [2i + 1] set */
    struct latency_counts cur, iv_a, iv_b;
};

static struct op_stats *first_op(struct worker *w, enum phase p)
{
    return p == PHASE_LOAD ? &w->load : &w->get;
}

static uint64_t phase_errors(struct bench *b)
{
    uint64_t e = 0;
    for (int i = 0; i < b->nworkers; i++) {
        struct worker *w = b->workers[i];
        if (b->phase == PHASE_LOAD) {
            e += load_counter(&w->load.errors);
        } else {
            e += load_counter(&w->get.errors) + load_counter(&w->set.errors);
        }
    }
    return e;
}

/* Counts of the interval since the last report: iv_a (get or load), iv_b (set). */
static void collect_interval(struct reporter *r)
{
    struct bench *b = r->b;
    lh_counts_clear(&r->iv_a);
    lh_counts_clear(&r->iv_b);
    for (int i = 0; i < b->nworkers; i++) {
        struct worker *w = b->workers[i];
        lh_read(&first_op(w, b->phase)->lat, &r->cur);
        lh_counts_add_delta(&r->iv_a, &r->cur, &r->prev[2 * i]);
        r->prev[2 * i] = r->cur;
        if (b->phase == PHASE_RUN) {
            lh_read(&w->set.lat, &r->cur);
            lh_counts_add_delta(&r->iv_b, &r->cur, &r->prev[2 * i + 1]);
            r->prev[2 * i + 1] = r->cur;
        }
    }
}

/* One interval: progress line and CSV row.  final: the partial last one. */
static void report_interval(struct reporter *r, uint64_t now, int final)
{
    struct bench *b = r->b;
    collect_interval(r);
    uint64_t errors = phase_errors(b);
    uint64_t iv_errors = errors - r->prev_errors;
    r->prev_errors = errors;
    uint64_t ops = r->iv_a.count + r->iv_b.count;
    double secs = (double)(now - r->last_ns) / 1e9;
    double t = (double)(now - b->start_ns) / 1e9;
    r->last_ns = now;
    /* A last sliver shorter than 1/20 interval (the requests still in
     * flight at the deadline) would give a meaningless rate: its requests
     * are counted in the summary only. */
    if (final && (ops + iv_errors == 0 || secs * 1000.0 < b->cfg.interval_ms / 20.0))
        return;
    double rate = secs > 0 ? (double)ops / secs : 0;
    if (b->phase == PHASE_LOAD) {
        if (!b->cfg.quiet)
            fprintf(stderr, "load %6.1fs %10.0f sets/s  p50 %8.1f us  p99 %8.1f us  errors %" PRIu64
                            "  depth %u\n",
                    t, rate, lh_percentile_us(&r->iv_a, 0.5), lh_percentile_us(&r->iv_a, 0.99),
                    iv_errors, b->cfg.depth);
        return;
    }
    double gp50 = lh_percentile_us(&r->iv_a, 0.5), gp99 = lh_percentile_us(&r->iv_a, 0.99);
    double sp50 = lh_percentile_us(&r->iv_b, 0.5), sp99 = lh_percentile_us(&r->iv_b, 0.99);
    if (!b->cfg.quiet)
        fprintf(stderr, "run  %6.1fs %10.0f ops/s  get p50 %8.1f p99 %8.1f us  set p50 %8.1f p99 %8.1f us  errors %" PRIu64 "  depth %u\n",
                t, rate, gp50, gp99, sp50, sp99, iv_errors, b->cfg.depth);
    if (b->csv != NULL) {
        fprintf(b->csv, "%.3f,%" PRIu64 ",%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 "\n", t, ops, rate,
                gp50, gp99, sp50, sp99, iv_errors);
        fflush(b->csv);
    }
}

static void *reporter_main(void *arg)
{
    struct reporter *r = arg;
    uint64_t step = (uint64_t)r->b->cfg.interval_ms * 1000000ULL;
    uint64_t next = r->b->start_ns + step;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec ts = { (time_t)(next / NS_PER_S), (long)(next % NS_PER_S) };
        int rc = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->done)
            break;
        if (rc == ETIMEDOUT || now_ns() >= next) {
            pthread_mutex_unlock(&r->mu);
            report_interval(r, now_ns(), 0);
            pthread_mutex_lock(&r->mu);
            /* Ticks missed while this thread was not scheduled are skipped,
             * not caught up in a burst of near-empty rows. */
            uint64_t now = now_ns();
            while (next <= now)
                next += step;
        }
    }
    pthread_mutex_unlock(&r->mu);
    report_interval(r, now_ns(), 1);
    return NULL;
}

static struct reporter *reporter_start(struct bench *b)
{
    struct reporter *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->prev = calloc((size_t)b->nworkers * 2, sizeof(*r->prev));
    if (r->prev == NULL) {
        free(r);
        return NULL;
    }
    r->b = b;
    r->last_ns = b->start_ns;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);
    if (pthread_create(&r->thread, NULL, reporter_main, r) != 0) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r->prev);
        free(r);
        return NULL;
    }
    return r;
}

/* Stops the reporter after its last (partial) interval.  NULL is allowed. */
static void reporter_stop(struct reporter *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->prev);
    free(r);
}

/* ---- phases ---- */

/* Runs one phase on every worker; returns -1 if a thread could not start. */
static int run_phase(struct bench *b, enum phase p, struct phase_result *out)
{
    b->phase = p;
    b->start_ns = now_ns();
    b->deadline_ns = 0;
    if (p == PHASE_RUN && b->cfg.operations == 0)
        b->deadline_ns = b->start_ns + (uint64_t)(b->cfg.duration_s * 1e9);
    struct reporter *r = reporter_start(b);
    if (r == NULL)
        fprintf(stderr, "cocytus-bench: no reporter thread: no progress lines or CSV rows\n");
    int started = 0, rc = 0;
    for (; started < b->nworkers; started++) {
        struct worker *w = b->workers[started];
        if (pthread_create(&w->thread, NULL, p == PHASE_LOAD ? load_main : run_main, w) != 0) {
            fprintf(stderr, "cocytus-bench: cannot start thread %d: %s\n", started, strerror(errno));
            rc = -1;
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(b->workers[i]->thread, NULL);
    out->ran = 1;
    out->seconds = (double)(now_ns() - b->start_ns) / 1e9;
    reporter_stop(r);
    return rc;
}

/* ---- totals and output ---- */

static void add_op(struct op_total *t, struct op_stats *st)
{
    struct latency_counts c;
    t->ops += load_counter(&st->ops);
    t->errors += load_counter(&st->errors);
    t->misses += load_counter(&st->misses);
    t->wrong += load_counter(&st->wrong);
    lh_read(&st->lat, &c);
    lh_counts_add(&t->lat, &c);
}

static double per_s(uint64_t ops, double secs)
{
    return secs > 0 ? (double)ops / secs : 0;
}

static void print_op_line(FILE *f, const char *name, const struct op_total *t, int is_get)
{
    fprintf(f, "op=%s count=%" PRIu64 " p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f errors=%" PRIu64,
            name, t->ops, lh_percentile_us(&t->lat, 0.5), lh_percentile_us(&t->lat, 0.9),
            lh_percentile_us(&t->lat, 0.99), lh_percentile_us(&t->lat, 0.999), t->errors);
    if (is_get)
        fprintf(f, " misses=%" PRIu64 " wrong=%" PRIu64, t->misses, t->wrong);
    fputc('\n', f);
}

static void json_op(FILE *f, const char *name, const struct op_total *t, int is_get)
{
    fprintf(f, "  \"%s\": {\"count\": %" PRIu64 ", \"p50_us\": %.1f, \"p90_us\": %.1f, "
               "\"p99_us\": %.1f, \"p999_us\": %.1f, \"mean_us\": %.1f, \"max_us\": %.1f, "
               "\"errors\": %" PRIu64,
            name, t->ops, lh_percentile_us(&t->lat, 0.5), lh_percentile_us(&t->lat, 0.9),
            lh_percentile_us(&t->lat, 0.99), lh_percentile_us(&t->lat, 0.999), lh_mean_us(&t->lat),
            (double)t->lat.max_ns / 1000.0, t->errors);
    if (is_get)
        fprintf(f, ", \"misses\": %" PRIu64 ", \"wrong\": %" PRIu64, t->misses, t->wrong);
    fprintf(f, "},\n");
}

/* A JSON string of s (escapes quotes, backslashes and control bytes). */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

struct summary {
    struct phase_result load, run;
    struct op_total load_set, get, set;
    cocytus_stats_t lib;
    uint64_t total_errors, total_wrong;
};

static void print_summary(FILE *f, const struct summary *s)
{
    fprintf(f, "phase=load ops=%" PRIu64 " seconds=%.3f ops_per_s=%.1f errors=%" PRIu64 "\n",
            s->load_set.ops, s->load.seconds, per_s(s->load_set.ops, s->load.seconds),
            s->load_set.errors);
    uint64_t run_ops = s->get.ops + s->set.ops;
    fprintf(f, "phase=run ops=%" PRIu64 " seconds=%.3f ops_per_s=%.1f\n", run_ops, s->run.seconds,
            per_s(run_ops, s->run.seconds));
    print_op_line(f, "get", &s->get, 1);
    print_op_line(f, "set", &s->set, 0);
    fprintf(f, "redirects=%" PRIu64 " refreshes=%" PRIu64 " retries=%" PRIu64 "\n",
            s->lib.redirects, s->lib.refreshes, s->lib.retries);
    fprintf(f, "total_errors=%" PRIu64 " total_wrong=%" PRIu64 "\n", s->total_errors, s->total_wrong);
}

static const char *route_name(enum route r)
{
    switch (r) {
    case ROUTE_FOLLOW: return "follow";
    case ROUTE_FOLLOW_RAW: return "follow-raw";
    case ROUTE_MAP: break;
    }
    return "map";
}

static int write_json(const char *path, const struct config *cfg, const struct summary *s)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "cocytus-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"config\": {\"servers\": ");
    json_string(f, cfg->servers);
    fprintf(f, ", \"route\": \"%s\", \"protocol\": \"%s\", \"records\": %" PRIu64
               ", \"load\": %s, \"run\": %s, \"read_ratio\": %g, \"distribution\": \"%s\", "
               "\"value_size\": ",
            route_name(cfg->route), cfg->binary ? "binary" : "ascii", cfg->records,
            cfg->load ? "true" : "false", cfg->run ? "true" : "false", cfg->read_ratio,
            cfg->dist == DIST_ZIPFIAN ? "zipfian" : "uniform");
    json_string(f, cfg->vsize_text);
    fprintf(f, ", \"connections\": %d, \"depth\": %u, \"duration_s\": %g, \"operations\": %" PRIu64
               ", \"rate\": %g, \"interval_ms\": %u, \"verify\": %s, \"seed\": %" PRIu64 "},\n",
            cfg->connections, cfg->depth, cfg->duration_s, cfg->operations, cfg->rate, cfg->interval_ms,
            cfg->verify ? "true" : "false", cfg->seed);
    if (cfg->only_server != NULL) {
        fprintf(f, "  \"only_server\": ");
        json_string(f, cfg->only_server);
        fprintf(f, ",\n");
    }
    fprintf(f, "  \"load\": {\"ran\": %s, \"ops\": %" PRIu64 ", \"seconds\": %.3f, "
               "\"ops_per_s\": %.1f, \"errors\": %" PRIu64 ", \"p50_us\": %.1f, \"p99_us\": %.1f},\n",
            s->load.ran ? "true" : "false", s->load_set.ops, s->load.seconds,
            per_s(s->load_set.ops, s->load.seconds), s->load_set.errors,
            lh_percentile_us(&s->load_set.lat, 0.5), lh_percentile_us(&s->load_set.lat, 0.99));
    uint64_t run_ops = s->get.ops + s->set.ops;
    fprintf(f, "  \"run\": {\"ran\": %s, \"ops\": %" PRIu64 ", \"seconds\": %.3f, \"ops_per_s\": %.1f},\n",
            s->run.ran ? "true" : "false", run_ops, s->run.seconds, per_s(run_ops, s->run.seconds));
    json_op(f, "get", &s->get, 1);
    json_op(f, "set", &s->set, 0);
    fprintf(f, "  \"redirects\": %" PRIu64 ", \"refreshes\": %" PRIu64 ", \"retries\": %" PRIu64
               ", \"conn_failures\": %" PRIu64 ",\n",
            s->lib.redirects, s->lib.refreshes, s->lib.retries, s->lib.conn_failures);
    fprintf(f, "  \"total_errors\": %" PRIu64 ", \"total_wrong\": %" PRIu64 "\n}\n", s->total_errors,
            s->total_wrong);
    if (fclose(f) != 0) {
        fprintf(stderr, "cocytus-bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The client's counters: libcocytus's, or the raw client's in the same
 * names (it fetches no map, so no refreshes). */
static void worker_stats(struct worker *w, cocytus_stats_t *st)
{
    if (w->pipe != NULL) {
        /* The map's fetches are libcocytus's; the requests went by the pipe. */
        struct raw_pipe_stats ps;
        cocytus_get_stats(w->client, st);
        raw_pipe_get_stats(w->pipe, &ps);
        st->requests = ps.requests;
        st->redirects = ps.redirects;
        st->retries = ps.retries;
        st->conn_failures = ps.conn_failures;
        return;
    }
    if (w->raw == NULL) {
        cocytus_get_stats(w->client, st);
        return;
    }
    memset(st, 0, sizeof(*st));
    st->requests = w->raw->stats.requests;
    st->redirects = w->raw->stats.redirects;
    st->retries = w->raw->stats.retries;
    st->conn_failures = w->raw->stats.conn_failures;
}

static void summarize(struct bench *b, struct summary *s)
{
    for (int i = 0; i < b->nworkers; i++) {
        struct worker *w = b->workers[i];
        add_op(&s->load_set, &w->load);
        add_op(&s->get, &w->get);
        add_op(&s->set, &w->set);
        cocytus_stats_t st;
        worker_stats(w, &st);
        s->lib.requests += st.requests;
        s->lib.redirects += st.redirects;
        s->lib.refreshes += st.refreshes;
        s->lib.retries += st.retries;
        s->lib.conn_failures += st.conn_failures;
    }
    s->total_errors = s->load_set.errors + s->get.errors + s->set.errors;
    s->total_wrong = s->get.wrong;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: cocytus-bench [options]\n"
        "  -s, --servers LIST     seeds host:port,host:port (default 127.0.0.1:11211);\n"
        "                         with --route follow-raw a /path is a Unix socket (-s)\n"
        "      --route map|follow|follow-raw\n"
        "                         cached slot map (default); follow MOVED per request\n"
        "                         (libcocytus), or the same over kept raw text sockets\n"
        "      --binary           binary protocol (default ASCII)\n"
        "      --auth-file FILE   present FILE's first user:password pair (memcached's -Y\n"
        "                         file) to the servers that ask for it (every route, depth)\n"
        "      --deadline-ms MS   libcocytus retry budget per request, 1..3600000 (default:\n"
        "                         the library's, 2000); a request still failing then\n"
        "                         counts as an error (map and follow routes)\n"
        "  -n, --records N        records in the key space (default 10000)\n"
        "      --load | --no-load set every record first (default: load)\n"
        "      --run | --no-run   run phase (default: run)\n"
        "  -r, --read-ratio R     fraction of gets in the run phase, 0..1 (default 0.95)\n"
        "  -d, --distribution D   uniform | zipfian (default zipfian, theta 0.99, scrambled)\n"
        "  -v, --value-size V     bytes, or zipf:MIN:MAX (default 1024)\n"
        "  -c, --connections C    connections, one thread each (default 4)\n"
        "      --depth D          requests in flight per connection, 1..256 (default 1);\n"
        "                         D > 1: batches of D pipelined text requests, routed by\n"
        "                         the cached slot map (not with --rate, follow, --binary)\n"
        "  -t, --duration S       run phase seconds (default 10)\n"
        "  -o, --operations N     run phase operations instead of a duration\n"
        "      --rate OPS         total target ops/s, open loop (default 0: closed loop)\n"
        "  -i, --interval-ms MS   time-series interval (default 1000)\n"
        "      --csv FILE         per-interval time series\n"
        "      --json FILE        summary as JSON\n"
        "      --verify           check every value read; a miss is an error\n"
        "      --verify-latest    --verify, and each connection writes only its own\n"
        "                         records, whose reads must return its last write\n"
        "      --misses-ok        with --verify: a miss is no error (a cache at capacity\n"
        "                         evicts), a wrong or stale value still is\n"
        "      --seed N           random seed (default 1)\n"
        "  -q, --quiet            no progress lines on stderr\n"
        "      --print-keys       print \"<slot> <key>\" for every record and exit (to\n"
        "                         pick slots to move in tests and drills)\n"
        "      --only-server H:P  the records are the first N keys whose slot the\n"
        "                         map gives to H:P (one process's load, same shape)\n"
        "Exit: 0 run completed, 1 --verify found errors or wrong values,\n"
        "      2 bad arguments or no server reachable.  See docs/bench.md.\n");
}

static int bad_arg(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "cocytus-bench: bad %s '%s': %s\n", opt, val, want);
    return -1;
}

/* A decimal integer in [lo, hi]. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (s[0] < '0' || s[0] > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A finite decimal number in [lo, hi]. */
static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "1024" or "zip:MIN:MAX" -> vs. */
static int parse_value_size(const char *s, struct value_spec *vs)
{
    uint64_t a, b;
    if (strncmp(s, "zipf:", 5) != 0) {
        if (parse_u64(s, 1, MAX_VALUE_SIZE, &a) != 0)
            return -1;
        vs->zipf = 0;
        vs->min = vs->max = (uint32_t)a;
        return 0;
    }
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", s + 5);
    char *colon = strchr(buf, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    if (parse_u64(buf, 1, MAX_VALUE_SIZE, &a) != 0 || parse_u64(colon + 1, 1, MAX_VALUE_SIZE, &b) != 0
        || a > b)
        return -1;
    vs->zipf = a < b;
    vs->min = (uint32_t)a;
    vs->max = (uint32_t)b;
    return 0;
}

enum long_only {
    OPT_ROUTE = 256, OPT_BINARY, OPT_LOAD, OPT_NO_LOAD, OPT_RUN, OPT_NO_RUN, OPT_RATE,
    OPT_CSV, OPT_JSON, OPT_VERIFY, OPT_VERIFY_LATEST, OPT_MISSES_OK, OPT_SEED, OPT_HELP, OPT_PRINT_KEYS,
    OPT_DEPTH, OPT_DEADLINE, OPT_AUTH_FILE, OPT_ONLY_SERVER
};

static const struct option LONG_OPTIONS[] = {
    { "servers", required_argument, NULL, 's' },
    { "route", required_argument, NULL, OPT_ROUTE },
    { "binary", no_argument, NULL, OPT_BINARY },
    { "deadline-ms", required_argument, NULL, OPT_DEADLINE },
    { "auth-file", required_argument, NULL, OPT_AUTH_FILE },
    { "records", required_argument, NULL, 'n' },
    { "load", no_argument, NULL, OPT_LOAD },
    { "no-load", no_argument, NULL, OPT_NO_LOAD },
    { "run", no_argument, NULL, OPT_RUN },
    { "no-run", no_argument, NULL, OPT_NO_RUN },
    { "read-ratio", required_argument, NULL, 'r' },
    { "distribution", required_argument, NULL, 'd' },
    { "value-size", required_argument, NULL, 'v' },
    { "connections", required_argument, NULL, 'c' },
    { "depth", required_argument, NULL, OPT_DEPTH },
    { "duration", required_argument, NULL, 't' },
    { "operations", required_argument, NULL, 'o' },
    { "rate", required_argument, NULL, OPT_RATE },
    { "interval-ms", required_argument, NULL, 'i' },
    { "csv", required_argument, NULL, OPT_CSV },
    { "json", required_argument, NULL, OPT_JSON },
    { "verify", no_argument, NULL, OPT_VERIFY },
    { "verify-latest", no_argument, NULL, OPT_VERIFY_LATEST },
    { "misses-ok", no_argument, NULL, OPT_MISSES_OK },
    { "seed", required_argument, NULL, OPT_SEED },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, OPT_HELP },
    { "print-keys", no_argument, NULL, OPT_PRINT_KEYS },
    { "only-server", required_argument, NULL, OPT_ONLY_SERVER },
    { NULL, 0, NULL, 0 }
};

static void config_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    c->servers = "127.0.0.1:11211";
    c->records = 10000;
    c->load = 1;
    c->run = 1;
    c->read_ratio = 0.95;
    c->dist = DIST_ZIPFIAN;
    c->vsize.min = c->vsize.max = 1024;
    c->vsize_text = "1024";
    c->connections = 4;
    c->depth = 1;
    c->duration_s = 10;
    c->interval_ms = 1000;
    c->seed = 1;
}

/* --auth-file: the first pair of memcached's -Y file, read as the servers
 * read it (the pair cocytus-proxy's --server-auth presents too). */
static int read_auth_file(struct config *c, const char *path)
{
    struct authfile af;
    char err[300];

    if (authfile_load(&af, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-bench: --auth-file: %s\n", err);
        return -1;
    }
    c->auth = af.pairs[0];
    c->auth_path = path;
    int n = snprintf(c->auth_data, sizeof(c->auth_data), "%s %s", c->auth.user, c->auth.pass);
    c->nauth = n > 0 && (size_t)n < sizeof(c->auth_data) ? (size_t)n : 0;
    authfile_free(&af);
    return 0;
}

/* One option; -1 (message printed) when its value is bad. */
static int apply_option(struct config *c, int opt, const char *arg)
{
    uint64_t u;
    switch (opt) {
    case 's':
        if (arg[0] == '\0')
            return bad_arg("--servers", arg, "want host:port[,host:port...]");
        c->servers = arg;
        return 0;
    case OPT_ROUTE:
        if (strcmp(arg, "map") == 0)
            c->route = ROUTE_MAP;
        else if (strcmp(arg, "follow") == 0)
            c->route = ROUTE_FOLLOW;
        else if (strcmp(arg, "follow-raw") == 0)
            c->route = ROUTE_FOLLOW_RAW;
        else
            return bad_arg("--route", arg, "want map, follow or follow-raw");
        return 0;
    case OPT_BINARY:
        c->binary = 1;
        return 0;
    case OPT_AUTH_FILE:
        return read_auth_file(c, arg);
    case OPT_DEADLINE:
        if (parse_u64(arg, 1, 3600000, &u) != 0)
            return bad_arg("--deadline-ms", arg, "want milliseconds from 1 to 3600000");
        c->deadline_ms = (int)u;
        return 0;
    case 'n':
        if (parse_u64(arg, 1, YCSB_MAX_RECORDS, &c->records) != 0)
            return bad_arg("--records", arg, "want an integer from 1 to 10000000000");
        return 0;
    case OPT_LOAD:
    case OPT_NO_LOAD:
        c->load = opt == OPT_LOAD;
        return 0;
    case OPT_RUN:
    case OPT_NO_RUN:
        c->run = opt == OPT_RUN;
        return 0;
    case 'r':
        if (parse_double(arg, 0, 1, &c->read_ratio) != 0)
            return bad_arg("--read-ratio", arg, "want a number from 0 to 1");
        return 0;
    case 'd':
        if (strcmp(arg, "uniform") == 0)
            c->dist = DIST_UNIFORM;
        else if (strcmp(arg, "zipfian") == 0)
            c->dist = DIST_ZIPFIAN;
        else
            return bad_arg("--distribution", arg, "want uniform or zipfian");
        return 0;
    case 'v':
        if (parse_value_size(arg, &c->vsize) != 0)
            return bad_arg("--value-size", arg,
                           "want bytes (1 to 67108864) or zipf:MIN:MAX with 1 <= MIN <= MAX");
        c->vsize_text = arg;
        return 0;
    case 'c':
        if (parse_u64(arg, 1, MAX_CONNECTIONS, &u) != 0)
            return bad_arg("--connections", arg, "want an integer from 1 to 1024");
        c->connections = (int)u;
        return 0;
    case OPT_DEPTH:
        if (parse_u64(arg, 1, RAW_PIPE_MAX_DEPTH, &u) != 0)
            return bad_arg("--depth", arg, "want an integer from 1 to 256");
        c->depth = (unsigned)u;
        return 0;
    case 't':
        if (parse_double(arg, 0.001, 1e6, &c->duration_s) != 0)
            return bad_arg("--duration", arg, "want seconds, from 0.001 to 1000000");
        return 0;
    case 'o':
        if (parse_u64(arg, 1, UINT64_MAX / 2, &c->operations) != 0)
            return bad_arg("--operations", arg, "want a positive integer");
        return 0;
    case OPT_RATE:
        if (parse_double(arg, 0, 1e9, &c->rate) != 0)
            return bad_arg("--rate", arg, "want ops/s from 0 (closed loop) to 1000000000");
        return 0;
    case 'i':
        if (parse_u64(arg, 10, 3600000, &u) != 0)
            return bad_arg("--interval-ms", arg, "want milliseconds from 10 to 3600000");
        c->interval_ms = (unsigned)u;
        return 0;
    case OPT_CSV:
        c->csv_path = arg;
        return 0;
    case OPT_JSON:
        c->json_path = arg;
        return 0;
    case OPT_VERIFY:
        c->verify = 1;
        return 0;
    case OPT_VERIFY_LATEST:
        c->verify = 1;
        c->verify_latest = 1;
        return 0;
    case OPT_MISSES_OK:
        c->misses_ok = 1;
        return 0;
    case OPT_SEED:
        if (parse_u64(arg, 0, UINT64_MAX, &c->seed) != 0)
            return bad_arg("--seed", arg, "want a non-negative integer");
        return 0;
    case 'q':
        c->quiet = 1;
        return 0;
    case OPT_PRINT_KEYS:
        c->print_keys = 1;
        return 0;
    case OPT_ONLY_SERVER:
        c->only_server = arg;
        return 0;
    default:
        return -1;
    }
}

/* --depth D > 1 pipelines raw text requests routed by the cached map, in
 * closed-loop batches: it combines with none of the options that need
 * another route, another protocol or one request at a time. */
static int check_depth(const struct config *c)
{
    if (c->depth <= 1)
        return 0;
    const char *clash = NULL;
    if (c->rate > 0)
        clash = "--rate (open-loop pacing is per request)";
    else if (c->route != ROUTE_MAP)
        clash = c->route == ROUTE_FOLLOW ? "--route follow" : "--route follow-raw";
    else if (c->binary)
        clash = "--binary (pipelined requests are text)";
    if (clash == NULL)
        return 0;
    fprintf(stderr, "cocytus-bench: --depth %u cannot be combined with %s: use --depth 1\n",
            c->depth, clash);
    return -1;
}

/* Returns 0, 1 for --help, -1 on a bad argument (message printed). */
static int parse_args(int argc, char **argv, struct config *c)
{
    config_defaults(c);
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":s:n:r:d:v:c:t:o:i:q", LONG_OPTIONS, NULL)) != -1) {
        if (opt == OPT_HELP)
            return 1;
        if (opt == '?') {
            if (optopt != 0)
                fprintf(stderr, "cocytus-bench: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "cocytus-bench: unknown option '%s'\n", argv[optind - 1]);
            return -1;
        }
        if (opt == ':') {
            fprintf(stderr, "cocytus-bench: option '%s' needs a value\n", argv[optind - 1]);
            return -1;
        }
        if (apply_option(c, opt, optarg) != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "cocytus-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!c->load && !c->run) {
        fprintf(stderr, "cocytus-bench: --no-load and --no-run: nothing to do\n");
        return -1;
    }
    if (c->route == ROUTE_FOLLOW_RAW && c->binary) {
        fprintf(stderr, "cocytus-bench: --route follow-raw speaks the text protocol: drop --binary\n");
        return -1;
    }
    return check_depth(c);
}

/* ---- setup ---- */

static void free_workers(struct bench *b)
{
    for (int i = 0; i < b->nworkers; i++) {
        struct worker *w = b->workers[i];
        raw_pipe_free(w->pipe);     /* before the cocytus_t whose map it borrows */
        free(w->batch);
        if (w->client != NULL)
            cocytus_close(w->client);
        if (w->raw != NULL) {
            raw_client_close(w->raw);
            free(w->raw);
        }
        free(w->value);
        free(w->expect);
        free(w->latest);
        free(w);
    }
    free(b->workers);
    b->workers = NULL;
    b->nworkers = 0;
}

static void init_op_stats(struct op_stats *st)
{
    atomic_init(&st->ops, 0);
    atomic_init(&st->errors, 0);
    atomic_init(&st->misses, 0);
    atomic_init(&st->wrong, 0);
    lh_init(&st->lat);
}

/* --verify-latest: the versions of the worker's own records: 0 (the load's)
 * when this run loads them, unknown until its first write otherwise. */
static int init_latest(struct worker *w)
{
    uint64_t n = w->b->cfg.records / (uint64_t)w->b->cfg.connections + 1;
    w->latest = malloc(n * sizeof(*w->latest));
    if (w->latest == NULL)
        return -1;
    for (uint64_t i = 0; i < n; i++)
        w->latest[i] = w->b->cfg.load ? 0 : VERSION_UNKNOWN;
    return 0;
}

/* follow-raw: the worker's raw client, connected to the first seed. */
static int connect_raw(struct worker *w, const char *servers, char *err, size_t cap)
{
    w->raw = malloc(sizeof(*w->raw));
    if (w->raw == NULL) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    const struct config *cfg = &w->b->cfg;
    if (raw_client_open(w->raw, servers, RAW_TIMEOUT_MS, cfg->auth_data, cfg->nauth, err,
                        cap) != 0) {
        free(w->raw);
        w->raw = NULL;
        return -1;
    }
    return 0;
}

/* --depth > 1: the worker's pipe, routed by its client's slot map. */
static int make_pipe(struct worker *w)
{
    unsigned depth = w->b->cfg.depth;
    w->batch = calloc(depth, sizeof(*w->batch));
    /* A pipelined request is sent once: through a proxy, which retries by
     * itself while a dead server's slots are taken over, the deadline is
     * how long its reply may take. */
    int timeout_ms = w->b->cfg.deadline_ms > 0 ? w->b->cfg.deadline_ms : RAW_TIMEOUT_MS;
    const struct config *cfg = &w->b->cfg;
    w->pipe = raw_pipe_new(w->client, timeout_ms, depth, cfg->auth_data, cfg->nauth);
    return w->batch != NULL && w->pipe != NULL ? 0 : -1;
}

/* libcocytus's options for the configured route, protocol, deadline and
 * credentials. */
static void client_options(const struct config *cfg, cocytus_options_t *o)
{
    cocytus_options_init(o);
    o->binary = cfg->binary;
    o->route = cfg->route == ROUTE_FOLLOW ? COCYTUS_ROUTE_FOLLOW : COCYTUS_ROUTE_MAP;
    if (cfg->deadline_ms > 0)
        o->deadline_ms = cfg->deadline_ms;
    if (cfg->auth_path != NULL) {
        o->username = cfg->auth.user;
        o->password = cfg->auth.pass;
    }
}

/* --only-server: record i becomes the i-th YCSB record whose slot the
 * servers' map gives to that server, so one process gets the whole load
 * with the key space and distribution of the others (a per-process cost
 * without the fan-out over a group's processes).  -1 (message printed) if
 * the server is not in the map or owns too few slots. */
static int select_records(struct bench *b)
{
    const struct config *cfg = &b->cfg;
    cocytus_options_t o;
    client_options(cfg, &o);
    char err[320] = "";
    cocytus_t *c = cocytus_connect_with(cfg->servers, &o, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "cocytus-bench: cannot reach a server of '%s': %s\n", cfg->servers, err);
        return -1;
    }
    size_t mine = SIZE_MAX;
    char ep[128], eps[512] = "";
    for (size_t i = 0; i < cocytus_endpoint_count(c); i++) {
        if (cocytus_endpoint(c, i, ep, sizeof(ep)) != 0)
            continue;
        if (strcmp(ep, cfg->only_server) == 0)
            mine = i;
        size_t used = strlen(eps);
        snprintf(eps + used, sizeof(eps) - used, "%s%s", used ? " " : "", ep);
    }
    bool owned[COCYTUS_SLOTS];
    unsigned nowned = 0;
    for (unsigned s = 0; s < COCYTUS_SLOTS; s++) {
        owned[s] = mine != SIZE_MAX && cocytus_slot_owner(c, s) == mine;
        nowned += owned[s];
    }
    cocytus_close(c);
    if (mine == SIZE_MAX) {
        fprintf(stderr, "cocytus-bench: --only-server %s is not in the servers' map (%s)\n",
                cfg->only_server, eps);
        return -1;
    }
    if (nowned == 0) {
        fprintf(stderr, "cocytus-bench: --only-server %s owns no slot\n", cfg->only_server);
        return -1;
    }
    b->rec_ids = malloc(cfg->records * sizeof(*b->rec_ids));
    if (b->rec_ids == NULL) {
        fprintf(stderr, "cocytus-bench: out of memory for --only-server\n");
        return -1;
    }
    /* About records * COCYTUS_SLOTS / nowned keys hold enough; four times
     * that bounds the search when the hash is unkind. */
    char key[YCSB_KEY_LEN + 1];
    uint64_t n = 0;
    uint64_t scan = cfg->records * 4 * (COCYTUS_SLOTS / nowned) + 1000;
    if (scan > YCSB_MAX_RECORDS)
        scan = YCSB_MAX_RECORDS;
    for (uint64_t rec = 0; n < cfg->records && rec < scan; rec++) {
        size_t nkey = ycsb_key_name(rec, key);
        if (owned[cocytus_key_slot(key, nkey)])
            b->rec_ids[n++] = rec;
    }
    if (n < cfg->records) {
        fprintf(stderr, "cocytus-bench: %s owns %" PRIu64 " of the first %" PRIu64
                        " keys, fewer than %" PRIu64 " records\n",
                cfg->only_server, n, scan, cfg->records);
        return -1;
    }
    return 0;
}

/* Connects every worker's client; -1 (message printed) on failure. */
static int make_workers(struct bench *b)
{
    const struct config *cfg = &b->cfg;
    cocytus_options_t o;
    client_options(cfg, &o);
    size_t vbuf = cfg->vsize.max > HEADER_MAX ? cfg->vsize.max : HEADER_MAX;
    b->workers = calloc((size_t)cfg->connections, sizeof(*b->workers));
    if (b->workers == NULL) {
        fprintf(stderr, "cocytus-bench: out of memory\n");
        return -1;
    }
    for (int i = 0; i < cfg->connections; i++) {
        struct worker *w = aligned_alloc(64, (sizeof(*w) + 63) / 64 * 64);
        if (w == NULL) {
            fprintf(stderr, "cocytus-bench: out of memory\n");
            return -1;
        }
        memset(w, 0, sizeof(*w));
        b->workers[b->nworkers++] = w;
        w->id = i;
        w->b = b;
        init_op_stats(&w->load);
        init_op_stats(&w->get);
        init_op_stats(&w->set);
        ycsb_rng_seed(&w->rng, cfg->seed, (uint64_t)i);
        w->value = malloc(vbuf);
        w->expect = malloc(vbuf);
        if (w->value == NULL || w->expect == NULL) {
            fprintf(stderr, "cocytus-bench: out of memory for %zu-byte values\n", vbuf);
            return -1;
        }
        if (cfg->verify_latest && init_latest(w) != 0) {
            fprintf(stderr, "cocytus-bench: out of memory for --verify-latest\n");
            return -1;
        }
        char err[320] = "";
        if (cfg->route == ROUTE_FOLLOW_RAW) {
            if (connect_raw(w, cfg->servers, err, sizeof(err)) != 0) {
                fprintf(stderr, "cocytus-bench: connection %d: cannot reach a server of '%s': %s\n",
                        i, cfg->servers, err);
                return -1;
            }
            continue;
        }
        w->client = cocytus_connect_with(cfg->servers, &o, err, sizeof(err));
        if (w->client == NULL) {
            fprintf(stderr, "cocytus-bench: connection %d: cannot reach a server of '%s': %s\n", i,
                    cfg->servers, err);
            return -1;
        }
        if (cfg->depth > 1 && make_pipe(w) != 0) {
            fprintf(stderr, "cocytus-bench: out of memory for --depth %u\n", cfg->depth);
            return -1;
        }
    }
    return 0;
}

static int prepare_generators(struct bench *b)
{
    /* Keys: YCSB's scrambled zipfian, ranks over 10^10 items hashed onto
     * the records (ycsb_gen.h). */
    if (b->cfg.dist == DIST_ZIPFIAN
        && ycsb_zipf_init(&b->key_zipf, YCSB_SCRAMBLE_ITEMS, YCSB_ZIPF_THETA) != 0) {
        fprintf(stderr, "cocytus-bench: cannot make the zipfian key generator\n");
        return -1;
    }
    if (b->cfg.vsize.zipf
        && ycsb_zipf_init(&b->size_zipf, (uint64_t)(b->cfg.vsize.max - b->cfg.vsize.min) + 1,
                          YCSB_ZIPF_THETA) != 0) {
        fprintf(stderr, "cocytus-bench: cannot make a zipfian over value sizes %s\n",
                b->cfg.vsize_text);
        return -1;
    }
    return 0;
}

/* --print-keys: the key of every record with its slot, one per line. */
static int print_keys(const struct bench *b)
{
    char key[YCSB_KEY_LEN + 1];
    for (uint64_t rec = 0; rec < b->cfg.records; rec++) {
        size_t nkey = record_key(b, rec, key);
        printf("%u %.*s\n", cocytus_key_slot(key, nkey), (int)nkey, key);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof(b));
    int pa = parse_args(argc, argv, &b.cfg);
    if (pa == 1) {
        usage(stdout);
        return 0;
    }
    if (pa != 0) {
        fprintf(stderr, "usage: cocytus-bench [options]; cocytus-bench --help lists them\n");
        return EXIT_USAGE;
    }
    if (b.cfg.only_server != NULL && select_records(&b) != 0) {
        free(b.rec_ids);
        return EXIT_USAGE;
    }
    if (b.cfg.print_keys) {
        int rc = print_keys(&b);
        free(b.rec_ids);
        return rc;
    }
    /* A server that closes on us must give an error, not kill the bench. */
    signal(SIGPIPE, SIG_IGN);
    if (prepare_generators(&b) != 0) {
        free(b.rec_ids);
        return EXIT_USAGE;
    }
    if (b.cfg.csv_path != NULL && b.cfg.run) {
        b.csv = fopen(b.cfg.csv_path, "w");
        if (b.csv == NULL) {
            fprintf(stderr, "cocytus-bench: cannot write %s: %s\n", b.cfg.csv_path, strerror(errno));
            free(b.rec_ids);
            return EXIT_USAGE;
        }
        fprintf(b.csv, "t_s,ops,ops_per_s,get_p50_us,get_p99_us,set_p50_us,set_p99_us,errors\n");
    }
    if (make_workers(&b) != 0) {
        free_workers(&b);
        free(b.rec_ids);
        if (b.csv != NULL)
            fclose(b.csv);
        return EXIT_USAGE;
    }
    struct summary s;
    memset(&s, 0, sizeof(s));
    int failed = 0;
    if (b.cfg.load)
        failed |= run_phase(&b, PHASE_LOAD, &s.load) != 0;
    if (b.cfg.run && !failed)
        failed |= run_phase(&b, PHASE_RUN, &s.run) != 0;
    summarize(&b, &s);
    print_summary(stdout, &s);
    fflush(stdout);
    if (b.csv != NULL && fclose(b.csv) != 0)
        fprintf(stderr, "cocytus-bench: cannot write %s: %s\n", b.cfg.csv_path, strerror(errno));
    if (b.cfg.json_path != NULL)
        write_json(b.cfg.json_path, &b.cfg, &s);
    free_workers(&b);
    free(b.rec_ids);
    if (failed)
        return EXIT_VERIFY;
    if (b.cfg.verify && (s.total_errors != 0 || s.total_wrong != 0))
        return EXIT_VERIFY;
    return 0;
}
