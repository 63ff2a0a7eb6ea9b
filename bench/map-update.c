/*
 * map-update.c - microbenchmark: what a client pays to take a new routing
 * table in which one slot moved, against rebuilding a ketama continuum.
 *
 * A Cocytus-KV client routes by a slot map (16384 slots -> endpoint).  When
 * one slot moves it can either take the whole new map or patch one entry;
 * a client of plain consistent hashing (libmemcached's ketama, the NAL
 * paper's eq. (1)) has to rebuild its continuum for any change.  For each
 * server count this program times, in nanoseconds per update:
 *
 *   repl_decode     slotmap_parse_config_reply() of a whole `config get
 *                   cluster` reply (repl/slotmap.c, the server's codec) into
 *                   a fresh map, which then replaces the current one
 *   lc_decode       the same with libcocytus' own parser (lc_config_parse,
 *                   client/lc_map.c): what the library really runs on refresh
 *   one_slot        parse "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>"
 *                   (lc_moved_parse), find the endpoint, owner[slot] = it
 *   ketama_rebuild  libmemcached recomputing its ketama continuum over the
 *                   servers it has (memcached_behavior_set_distribution ->
 *                   run_distribution -> update_continuum)
 *   ketama_push     a new server list: memcached_servers_reset() and
 *                   memcached_server_push() of a list in which one server
 *                   differs (push ends in the same continuum rebuild)
 *   ketama_weighted_rebuild  as ketama_rebuild with weighted ketama (MD5,
 *                   160 points per server), the weights NAL changes
 *
 * Every update alternates between two tables A and B (one slot, or one
 * server, apart), so each one really changes the routing.  Fast updates are
 * timed in batches long enough for the clock to be exact; the median (and
 * 10th/90th percentile) over many batches is reported.  No network I/O.
 *
 * Usage: map-update [--servers 3,5,10,50,100] [--samples N] [--csv FILE]
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libmemcached/memcached.h>

#include "slotmap.h"
#include "lc_map.h"

#define MAX_SERVER_COUNTS 16
#define DEFAULT_SAMPLES 301
#define MAX_SAMPLES 100001
#define BATCH_TARGET_NS 50000.0   /* each timed batch runs at least this long */
#define MAX_BATCH 1000000
#define BASE_PORT 21000
#define MOVED_SLOT 4242           /* the slot that moves between map A and B */
#define CHECK_KEYS 20000          /* keys used to check that ketama moved keys */

static const int default_counts[] = { 3, 5, 10, 50, 100 };

struct options {
    int counts[MAX_SERVER_COUNTS];
    int ncounts;
    int samples;
    const char *csv;
};

/* One measured method at one server count. */
struct result {
    const char *method;
    int servers;
    double median_ns, p10_ns, p90_ns;
    long batch;
    int samples;
};

/* What a timed update works on; each method uses its own fields. */
struct bench_state {
    int servers;
    long flip;                        /* alternates A/B */
    /* the `config get cluster` replies of map A and map B */
    char *reply[2];
    size_t reply_len[2];
    struct slotmap *repl_cur;         /* current map for repl_decode */
    struct lc_map *lc_cur;            /* current map for lc_decode and one_slot */
    char moved_text[2][128];          /* MOVED of MOVED_SLOT to A's / B's owner */
    memcached_st *memc;               /* ketama client */
    memcached_server_list_st list[2]; /* server lists A and B for ketama_push */
    int failures;
};

typedef int (*update_fn)(struct bench_state *st);

/* ---- time ---------------------------------------------------------------- */

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return sorted[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* ---- the slot maps -------------------------------------------------------- */

/* Map A: n plain endpoints 127.0.0.1:BASE_PORT+2i placed by consistent
 * hashing at epoch 10; map B: A with MOVED_SLOT given to the next endpoint,
 * epoch 11. */
static int build_maps(int n, struct slotmap *a, struct slotmap *b)
{
    memset(a, 0, sizeof(*a));
    memset(b, 0, sizeof(*b));
    a->endpoints = calloc((size_t)n, sizeof(*a->endpoints));
    b->endpoints = calloc((size_t)n, sizeof(*b->endpoints));
    if (a->endpoints == NULL || b->endpoints == NULL)
        return -1;
    a->nendpoints = b->nendpoints = n;
    for (int i = 0; i < n; i++) {
        struct slotmap_endpoint *e = &a->endpoints[i];
        snprintf(e->host, sizeof(e->host), "127.0.0.1");
        e->port = BASE_PORT + 2 * i;
        e->group = i;
        e->role = ROLE_PLAIN;
        e->index = 0;
    }
    slotmap_place(a);
    a->epoch = 10;
    memcpy(b->endpoints, a->endpoints, (size_t)n * sizeof(*a->endpoints));
    memcpy(b->slot, a->slot, sizeof(a->slot));
    b->epoch = 11;
    b->slot[MOVED_SLOT] = (uint16_t)((a->slot[MOVED_SLOT] + 1) % n);
    return 0;
}

/* The replies of A and B, and the MOVED texts for MOVED_SLOT. */
static int prepare_maps(struct bench_state *st)
{
    struct slotmap a, b;
    const struct slotmap *m[2] = { &a, &b };
    int rc = -1;

    if (build_maps(st->servers, &a, &b) != 0)
        goto out;
    for (int k = 0; k < 2; k++) {
        const struct slotmap_endpoint *e = slotmap_owner(m[k], MOVED_SLOT);
        st->reply[k] = slotmap_config_reply(m[k], &st->reply_len[k]);
        if (st->reply[k] == NULL)
            goto out;
        snprintf(st->moved_text[k], sizeof(st->moved_text[k]),
                 "SERVER_ERROR MOVED %u %llu %s:%d", MOVED_SLOT,
                 (unsigned long long)m[k]->epoch, e->host, e->port);
    }
    rc = 0;
out:
    slotmap_free(&a);
    slotmap_free(&b);
    return rc;
}

/* (a) the server codec: parse the whole reply into a new map, swap it in. */
static int update_repl_decode(struct bench_state *st)
{
    int k = (int)(st->flip++ & 1);
    struct slotmap *fresh = malloc(sizeof(*fresh));
    char err[160];
    size_t used = 0;

    if (fresh == NULL)
        return -1;
    if (slotmap_parse_config_reply(fresh, st->reply[k], st->reply_len[k], &used,
                                   err, sizeof(err)) != 0) {
        fprintf(stderr, "map-update: repl decode of map %c (%d servers) failed: %s\n",
                'A' + k, st->servers, err);
        free(fresh);
        return -1;
    }
    if (st->repl_cur != NULL) {
        slotmap_free(st->repl_cur);
        free(st->repl_cur);
    }
    st->repl_cur = fresh;
    return 0;
}

/* (a') libcocytus' parser: parse the whole reply, swap it in. */
static int update_lc_decode(struct bench_state *st)
{
    int k = (int)(st->flip++ & 1);
    struct lc_map *fresh = NULL;
    char err[160];

    if (lc_config_parse(st->reply[k], st->reply_len[k], &fresh, err, sizeof(err))
        != LC_CONFIG_MAP) {
        fprintf(stderr, "map-update: libcocytus decode of map %c (%d servers) failed: %s\n",
                'A' + k, st->servers, err);
        lc_map_free(fresh);
        return -1;
    }
    lc_map_free(st->lc_cur);
    st->lc_cur = fresh;
    return 0;
}

/* (b) one slot: parse the MOVED, find its endpoint, patch the owner.  The
 * epoch check mirrors libcocytus (a hint never goes back); both texts carry
 * an epoch the map accepts because the map's epoch is left alone here. */
static int update_one_slot(struct bench_state *st)
{
    int k = (int)(st->flip++ & 1);
    struct lc_moved mv;
    struct lc_map *m = st->lc_cur;

    if (!lc_moved_parse(st->moved_text[k], &mv) || mv.slot >= COCYTUS_SLOTS)
        return -1;
    if (mv.epoch < m->epoch)
        return -1;
    for (size_t i = 0; i < m->n; i++) {
        if (lc_addr_equal(&m->ep[i], &mv.to)) {
            m->owner[mv.slot] = (uint16_t)i;
            return 0;
        }
    }
    return -1;
}

/* ---- ketama ----------------------------------------------------------------- */

/* Server list A: n servers 127.0.0.1:BASE_PORT+2i (weight w); list B: the
 * same with the last server replaced by a new port. */
static memcached_server_list_st ketama_list(int n, int variant, uint32_t weight)
{
    memcached_server_list_st list = NULL;
    memcached_return_t rc;

    for (int i = 0; i < n; i++) {
        in_port_t port = (in_port_t)(BASE_PORT + 2 * i);
        if (variant == 1 && i == n - 1)
            port = (in_port_t)(BASE_PORT + 2 * n + 1);
        list = memcached_server_list_append_with_weight(list, "127.0.0.1", port, weight, &rc);
        if (list == NULL || memcached_failed(rc))
            return NULL;
    }
    return list;
}

/* A client with ketama over list A.  weighted: MEMCACHED_DISTRIBUTION_
 * CONSISTENT_WEIGHTED with MD5 (libketama), else CONSISTENT_KETAMA with an
 * MD5 point hash. */
static memcached_st *ketama_client(memcached_server_list_st list, int weighted)
{
    memcached_st *memc = memcached_create(NULL);

    if (memc == NULL)
        return NULL;
    if (memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_HASH, MEMCACHED_HASH_MD5)
            != MEMCACHED_SUCCESS
        || memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                                  weighted ? MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED
                                           : MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA)
            != MEMCACHED_SUCCESS
        || memcached_server_push(memc, list) != MEMCACHED_SUCCESS) {
        memcached_free(memc);
        return NULL;
    }
    return memc;
}

/* Which server each of CHECK_KEYS keys goes to, into out[]. */
static void ketama_owners(memcached_st *memc, uint32_t *out)
{
    char key[32];
    for (int i = 0; i < CHECK_KEYS; i++) {
        int len = snprintf(key, sizeof(key), "user%012d", i * 7919);
        out[i] = memcached_generate_hash(memc, key, (size_t)len);
    }
}

/* Checks that a server-list change really rebuilds the continuum: after
 * pushing list B (one server replaced) some keys, about 1/n of them, go to
 * another server; after pushing A again they all come back.  Returns the
 * share of keys moved, or -1. */
static double ketama_check(struct bench_state *st)
{
    uint32_t *before = malloc(CHECK_KEYS * sizeof(*before));
    uint32_t *after = malloc(CHECK_KEYS * sizeof(*after));
    int moved = 0, back = 1;

    if (before == NULL || after == NULL) {
        free(before);
        free(after);
        return -1;
    }
    ketama_owners(st->memc, before);
    memcached_servers_reset(st->memc);
    if (memcached_server_push(st->memc, st->list[1]) != MEMCACHED_SUCCESS)
        back = 0;
    ketama_owners(st->memc, after);
    for (int i = 0; i < CHECK_KEYS; i++)
        moved += before[i] != after[i];
    memcached_servers_reset(st->memc);
    if (memcached_server_push(st->memc, st->list[0]) != MEMCACHED_SUCCESS)
        back = 0;
    ketama_owners(st->memc, after);
    for (int i = 0; i < CHECK_KEYS; i++)
        back &= before[i] == after[i];
    free(before);
    free(after);
    return back ? (double)moved / CHECK_KEYS : -1;
}

/* (c) rebuild the continuum over the current servers. */
static int update_ketama_rebuild(struct bench_state *st)
{
    st->flip++;
    return memcached_behavior_set_distribution(st->memc, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA)
                   == MEMCACHED_SUCCESS ? 0 : -1;
}

static int update_ketama_weighted_rebuild(struct bench_state *st)
{
    st->flip++;
    return memcached_behavior_set_distribution(st->memc, MEMCACHED_DISTRIBUTION_CONSISTENT_WEIGHTED)
                   == MEMCACHED_SUCCESS ? 0 : -1;
}

/* (c') take a new server list (one server differs). */
static int update_ketama_push(struct bench_state *st)
{
    int k = (int)(st->flip++ & 1);
    memcached_servers_reset(st->memc);
    return memcached_server_push(st->memc, st->list[k ^ 1]) == MEMCACHED_SUCCESS ? 0 : -1;
}

/* ---- measuring ---------------------------------------------------------------- */

/* Runs fn `count` times; the elapsed ns, or -1 when an update failed. */
static double run_batch(update_fn fn, struct bench_state *st, long count)
{
    double t0 = now_ns();
    for (long i = 0; i < count; i++) {
        if (fn(st) != 0) {
            st->failures++;
            return -1;
        }
    }
    return now_ns() - t0;
}

/* How many updates make one batch of about BATCH_TARGET_NS. */
static long calibrate(update_fn fn, struct bench_state *st)
{
    long count = 1;
    for (;;) {
        double ns = run_batch(fn, st, count);
        if (ns < 0)
            return -1;
        if (ns >= BATCH_TARGET_NS || count >= MAX_BATCH)
            return count;
        count *= 2;
    }
}

static int measure(const char *method, update_fn fn, struct bench_state *st, int samples,
                   struct result *out)
{
    double *per = malloc((size_t)samples * sizeof(*per));
    long batch;

    if (per == NULL)
        return -1;
    batch = calibrate(fn, st);
    if (batch < 0) {
        free(per);
        return -1;
    }
    for (int s = 0; s < samples; s++) {
        double ns = run_batch(fn, st, batch);
        if (ns < 0) {
            free(per);
            return -1;
        }
        per[s] = ns / (double)batch;
    }
    qsort(per, (size_t)samples, sizeof(*per), cmp_double);
    out->method = method;
    out->servers = st->servers;
    out->median_ns = percentile(per, samples, 0.5);
    out->p10_ns = percentile(per, samples, 0.1);
    out->p90_ns = percentile(per, samples, 0.9);
    out->batch = batch;
    out->samples = samples;
    free(per);
    return 0;
}

static void print_result(const struct result *r, FILE *csv)
{
    printf("method=%s servers=%d median_ns=%.1f p10_ns=%.1f p90_ns=%.1f batch=%ld samples=%d\n",
           r->method, r->servers, r->median_ns, r->p10_ns, r->p90_ns, r->batch, r->samples);
    if (csv != NULL)
        fprintf(csv, "%s,%d,%.1f,%.1f,%.1f,%ld,%d\n", r->method, r->servers, r->median_ns,
                r->p10_ns, r->p90_ns, r->batch, r->samples);
    fflush(stdout);
}

/* ---- one server count ---------------------------------------------------------- */

static void state_release(struct bench_state *st)
{
    for (int k = 0; k < 2; k++) {
        free(st->reply[k]);
        if (st->list[k] != NULL)
            memcached_server_list_free(st->list[k]);
    }
    if (st->repl_cur != NULL) {
        slotmap_free(st->repl_cur);
        free(st->repl_cur);
    }
    lc_map_free(st->lc_cur);
    if (st->memc != NULL)
        memcached_free(st->memc);
    memset(st, 0, sizeof(*st));
}

/* The slot-map methods (a), (a'), (b). */
static int bench_slotmap(int n, const struct options *o, FILE *csv)
{
    struct bench_state st = { .servers = n };
    struct result r;
    char err[160];
    int rc = -1;

    if (prepare_maps(&st) != 0) {
        fprintf(stderr, "map-update: cannot build the maps for %d servers\n", n);
        goto out;
    }
    printf("# %d servers: config reply %zu bytes\n", n, st.reply_len[0]);
    if (measure("repl_decode", update_repl_decode, &st, o->samples, &r) != 0)
        goto out;
    print_result(&r, csv);
    if (measure("lc_decode", update_lc_decode, &st, o->samples, &r) != 0)
        goto out;
    print_result(&r, csv);
    /* one_slot patches the map lc_decode left behind (map A or B, epoch
     * 10 or 11): make its epoch 10 so both MOVED texts are accepted */
    lc_map_free(st.lc_cur);
    st.lc_cur = NULL;
    if (lc_config_parse(st.reply[0], st.reply_len[0], &st.lc_cur, err, sizeof(err))
        != LC_CONFIG_MAP) {
        fprintf(stderr, "map-update: cannot decode map A: %s\n", err);
        goto out;
    }
    if (measure("one_slot", update_one_slot, &st, o->samples, &r) != 0)
        goto out;
    print_result(&r, csv);
    rc = 0;
out:
    if (st.failures)
        fprintf(stderr, "map-update: an update failed at %d servers\n", n);
    state_release(&st);
    return rc;
}

/* The ketama methods (c), (c'), weighted (c). */
static int bench_ketama(int n, const struct options *o, FILE *csv)
{
    struct bench_state st = { .servers = n };
    struct result r;
    double share;
    int rc = -1;

    st.list[0] = ketama_list(n, 0, 1);
    st.list[1] = ketama_list(n, 1, 1);
    if (st.list[0] == NULL || st.list[1] == NULL
        || (st.memc = ketama_client(st.list[0], 0)) == NULL) {
        fprintf(stderr, "map-update: cannot set up a ketama client with %d servers\n", n);
        goto out;
    }
    share = ketama_check(&st);
    if (share < 0) {
        fprintf(stderr, "map-update: ketama check failed at %d servers (keys did not come back)\n", n);
        goto out;
    }
    printf("# %d servers: ketama, replacing one server moved %.1f%% of %d keys (1/n = %.1f%%)\n",
           n, 100.0 * share, CHECK_KEYS, 100.0 / n);
    if (measure("ketama_rebuild", update_ketama_rebuild, &st, o->samples, &r) != 0)
        goto out;
    print_result(&r, csv);
    if (measure("ketama_push", update_ketama_push, &st, o->samples, &r) != 0)
        goto out;
    print_result(&r, csv);
    memcached_free(st.memc);
    st.memc = ketama_client(st.list[0], 1);
    if (st.memc == NULL) {
        fprintf(stderr, "map-update: cannot set up a weighted ketama client with %d servers\n", n);
        goto out;
    }
    if (measure("ketama_weighted_rebuild", update_ketama_weighted_rebuild, &st, o->samples, &r)
        != 0)
        goto out;
    print_result(&r, csv);
    rc = 0;
out:
    if (st.failures)
        fprintf(stderr, "map-update: a ketama update failed at %d servers\n", n);
    state_release(&st);
    return rc;
}

/* ---- command line ----------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: map-update [--servers 3,5,10,50,100] [--samples N] [--csv FILE]\n");
}

static int parse_counts(const char *s, struct options *o)
{
    char *copy = strdup(s), *save = NULL, *tok;
    int ok = copy != NULL;

    o->ncounts = 0;
    for (tok = ok ? strtok_r(copy, ",", &save) : NULL; tok != NULL && ok;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        long v;
        errno = 0;
        v = strtol(tok, &end, 10);
        if (errno != 0 || *end != '\0' || v < 1 || v > 4096 || o->ncounts >= MAX_SERVER_COUNTS)
            ok = 0;
        else
            o->counts[o->ncounts++] = (int)v;
    }
    free(copy);
    return ok && o->ncounts > 0 ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    o->ncounts = (int)(sizeof(default_counts) / sizeof(default_counts[0]));
    memcpy(o->counts, default_counts, sizeof(default_counts));
    o->samples = DEFAULT_SAMPLES;
    o->csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "map-update: %s needs a value (or is unknown)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--servers") == 0) {
            if (parse_counts(v, o) != 0) {
                fprintf(stderr, "map-update: bad --servers '%s' (1..4096, comma-separated)\n", v);
                return -1;
            }
        } else if (strcmp(a, "--samples") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end != '\0' || n < 5 || n > MAX_SAMPLES) {
                fprintf(stderr, "map-update: bad --samples '%s' (5..%d)\n", v, MAX_SAMPLES);
                return -1;
            }
            o->samples = (int)n;
        } else if (strcmp(a, "--csv") == 0) {
            o->csv = v;
        } else {
            fprintf(stderr, "map-update: unknown option %s\n", a);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    FILE *csv = NULL;
    int rc = 0;

    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    if (o.csv != NULL) {
        csv = fopen(o.csv, "w");
        if (csv == NULL) {
            fprintf(stderr, "map-update: cannot write %s: %s\n", o.csv, strerror(errno));
            return 2;
        }
        fprintf(csv, "method,servers,median_ns,p10_ns,p90_ns,batch,samples\n");
    }
    printf("# map-update: ns per update, median of %d batches of >= %.0f us each; "
           "libmemcached %s\n", o.samples, BATCH_TARGET_NS / 1000, memcached_lib_version());
    for (int i = 0; i < o.ncounts && rc == 0; i++) {
        if (bench_slotmap(o.counts[i], &o, csv) != 0 || bench_ketama(o.counts[i], &o, csv) != 0)
            rc = 1;
    }
    if (csv != NULL && fclose(csv) != 0) {
        fprintf(stderr, "map-update: writing %s failed\n", o.csv);
        rc = 1;
    }
    return rc;
}
