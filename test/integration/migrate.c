/* migrate.c - make-check test of slot migration on real processes.
 *
 * For each scheme (plain with 3 processes, rs 3 5 with two coding groups,
 * pbr 1 with two primary-backup groups) it writes a cluster file with free
 * loopback ports, starts every cocytus-server, loads 2000 keys (300 of them,
 * with big values, in one slot of the first serving process), and then
 * moves that slot to another group and back, four times, with "cocytus
 * migrate", while client threads (one cocytus_t each, libcocytus) set, get
 * and delete their own keys of the moving slot and others.  It checks: no
 * call returned an error, every get returned the last value the thread
 * wrote (each thread models its own keys), every move ended ok and some
 * writes were forwarded, the last source answers MOVED for the slot, a
 * fresh client reads every key's last value, the last source's engine no
 * longer holds the slot's keys (curr_items), and a stale copy planted at
 * the destination before the first move does not survive the import.  For
 * rs it also runs `cocytus-cli verify`.  With plain it then moves another
 * slot to a killed process: the move fails cleanly and the source keeps
 * serving that slot at its old epoch.
 *
 * Every loop is bounded in time and count; every process started is killed
 * at exit (also on a fatal signal). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "libcocytus.h"

#define MAX_PROCS 16
#define NKEYS 2000
#ifndef NSLOT_KEYS
#define NSLOT_KEYS 300          /* of NKEYS, in the moving slot */
#endif
#define NTHREADS 3
#define LOAD_MS 1500            /* client threads run about this long */
#define NMOVES 4                /* the slot goes back and forth */
#define THREAD_MAX_OPS 200000
#define THREAD_MAX_MS 20000
#define MOVE_TIMEOUT_MS 15000
#define READY_TIMEOUT_MS 10000
#define VALUE_MAX 64

static int failures;

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
            failures++; \
        } \
    } while (0)

/* ---- processes ---- */

struct proc {
    int group;
    const char *role;
    int index;
    int port, link_port;
    pid_t pid;
    char log[300];
};

struct cluster {
    char dir[128];
    char conf[200];
    int nprocs;
    struct proc p[MAX_PROCS];
};

static void add_proc(struct cluster *c, int group, const char *role, int index)
{
    struct proc *p = &c->p[c->nprocs++];
    p->group = group;
    p->role = role;
    p->index = index;
}

static bool serving(const struct proc *p)
{
    return strcmp(p->role, "plain") == 0 || strcmp(p->role, "data") == 0 ||
           strcmp(p->role, "primary") == 0;
}

/* The secret of the cluster file this test writes ("mg-<pid>"). */
static void test_secret(char *buf, size_t cap)
{
    snprintf(buf, cap, "mg-%d", (int)getpid());
}

static bool write_conf(struct cluster *c, const char *scheme)
{
    FILE *f = fopen(c->conf, "w");
    if (f != NULL)
        fchmod(fileno(f), 0600);   /* it holds the secret */
    if (!f)
        return false;
    char secret[32];
    test_secret(secret, sizeof secret);
    fprintf(f, "# written by test/integration/migrate.c\ncluster mgtest\nsecret %s\n"
            "scheme %s\nregion 32m\nmemory 64m\nnode 0 127.0.0.1\n", secret, scheme);
    for (int i = 0; i < c->nprocs; i++) {
        const struct proc *p = &c->p[i];
        fprintf(f, "proc %d %s %d 0 %d %d\n", p->group, p->role, p->index, p->port,
                p->link_port);
    }
    return fclose(f) == 0;
}

static pid_t spawn(struct cluster *c, struct proc *p)
{
    snprintf(p->log, sizeof p->log, "%s/%s-%d-%d.log", c->dir, p->role, p->group, p->index);
    unlink(p->log);     /* the log is appended to: start it empty */
    return harness_spawn_role(c->conf, p->role, p->group, p->index, p->log);
}

static void print_log(const struct proc *p)
{
    FILE *f = fopen(p->log, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s ----\n", p->log);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n++ < 40)
        fputs(line, stderr);
    fclose(f);
}

static void stop_proc(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    int64_t end = harness_now_ms() + 3000;
    while (harness_now_ms() < end && waitpid(p->pid, NULL, WNOHANG) == 0)
        harness_sleep_ms(10);
    if (waitpid(p->pid, NULL, WNOHANG) == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    harness_forget_pid(p->pid);
    p->pid = 0;
}

static void kill_proc(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    harness_forget_pid(p->pid);
    p->pid = 0;
}

static void cluster_stop(struct cluster *c)
{
    for (int i = 0; i < c->nprocs; i++)
        stop_proc(&c->p[i]);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", c->dir);
}

static bool answers_version(int port)
{
    raw_conn *rc = malloc(sizeof *rc);
    char line[256];
    bool ok = rc && raw_open(rc, port) &&
              raw_command(rc, "version\r\n", line, sizeof line) > 0 &&
              strncmp(line, "VERSION", 7) == 0;
    if (rc && rc->fd >= 0)
        raw_close(rc);
    free(rc);
    return ok;
}

static bool cluster_start(struct cluster *c, const char *scheme)
{
    snprintf(c->dir, sizeof c->dir, "%s/migrate.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(c->dir))
        return false;
    snprintf(c->conf, sizeof c->conf, "%s/cluster.conf", c->dir);
    int ports[MAX_PROCS * 2];
    if (!harness_pick_ports(ports, 2 * c->nprocs))
        return false;
    for (int i = 0; i < c->nprocs; i++) {
        c->p[i].port = ports[2 * i];
        c->p[i].link_port = ports[2 * i + 1];
    }
    if (!write_conf(c, scheme))
        return false;
    for (int i = 0; i < c->nprocs; i++) {
        c->p[i].pid = spawn(c, &c->p[i]);
        if (c->p[i].pid <= 0)
            return false;
    }
    int64_t end = harness_now_ms() + READY_TIMEOUT_MS;
    for (int i = 0; i < c->nprocs; i++) {
        while (!answers_version(c->p[i].port)) {
            if (harness_now_ms() > end || waitpid(c->p[i].pid, NULL, WNOHANG) != 0) {
                fprintf(stderr, "process %s %d/%d did not come up\n", c->p[i].role,
                        c->p[i].group, c->p[i].index);
                print_log(&c->p[i]);
                return false;
            }
            harness_sleep_ms(20);
        }
    }
    return true;
}

/* ---- raw admin helpers ---- */

/* One request, the reply up to `until` (or one line when until is NULL).
 * A control command ("cocytus ...") goes on a connection that proved the
 * cluster secret first. */
static bool admin(int port, const char *req, const char *until, char *out, size_t cap)
{
    raw_conn *rc = malloc(sizeof *rc);
    bool ok = false;
    char secret[32];
    test_secret(secret, sizeof secret);
    out[0] = '\0';
    if (rc && raw_open(rc, port) &&
        (strncmp(req, "cocytus ", 8) != 0 || raw_auth(rc, secret))) {
        if (until)
            ok = raw_send_str(rc, req) && raw_read_until(rc, until, out, cap, 3000) > 0;
        else
            ok = raw_command(rc, req, out, cap) > 0;
        raw_close(rc);
    }
    free(rc);
    return ok;
}

static uint64_t epoch_of(int port)
{
    static char buf[RAW_BUF_SIZE];
    if (!admin(port, "config get cluster\r\n", "END\r\n", buf, sizeof buf))
        return 0;
    const char *nl = strstr(buf, "\r\n");
    return nl ? strtoull(nl + 2, NULL, 10) : 0;
}

static long stat_of(int port, const char *name)
{
    char buf[16384];
    if (!admin(port, "stats\r\n", "END\r\n", buf, sizeof buf))
        return -1;
    char pat[80];
    snprintf(pat, sizeof pat, "STAT %s ", name);
    const char *at = strstr(buf, pat);
    return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

/* Starts the move and waits for its outcome: "ok", "failed ...", or "". */
static void move_slot(int src_port, unsigned slot, int dst_port, uint64_t epoch, char *outcome,
                      size_t cap)
{
    char req[160], line[512], buf[2048];
    snprintf(req, sizeof req, "cocytus migrate %u 127.0.0.1:%d %" PRIu64 "\r\n", slot, dst_port,
             epoch);
    outcome[0] = '\0';
    if (!admin(src_port, req, NULL, line, sizeof line) || strncmp(line, "OK", 2) != 0) {
        snprintf(outcome, cap, "refused: %s", line);
        return;
    }
    char want[64];
    snprintf(want, sizeof want, "LAST %u ", slot);
    int64_t end = harness_now_ms() + MOVE_TIMEOUT_MS;
    while (harness_now_ms() < end) {
        if (admin(src_port, "cocytus migrate status\r\n", "END\r\n", buf, sizeof buf)) {
            const char *last = strstr(buf, want);
            if (last && !strstr(buf, "MIGRATE ")) {
                const char *st = strstr(last, " ok ") ? "ok" : strstr(last, " failed ");
                if (st) {
                    const char *eol = strstr(last, "\r\n");
                    snprintf(outcome, cap, "%.*s", (int)(eol ? eol - last : 200), last);
                    return;
                }
            }
        }
        harness_sleep_ms(20);
    }
    snprintf(outcome, cap, "timed out: %.200s", buf);
}

/* ---- keys and client threads ---- */

struct model_key {
    char key[32];
    bool moving;            /* in the moving slot */
    bool present;
    bool big;               /* still holds its initial value (BIG_VALUE bytes) */
    char value[VALUE_MAX];
};

/* The initial value of a key of the moving slot: big, so that copying the
 * slot takes a while and many writes land during the copy. */
#ifndef BIG_VALUE
#define BIG_VALUE 8000
#endif

static char *big_value(const char *key)
{
    char *v = malloc(BIG_VALUE + 1);
    if (!v)
        abort();
    int n = snprintf(v, BIG_VALUE + 1, "init-%s-", key);
    for (int i = n; i < BIG_VALUE; i++)
        v[i] = (char)('a' + (i * 7 + n) % 26);
    v[BIG_VALUE] = '\0';
    return v;
}

/* Does value equal what the model says the key holds? */
static bool model_matches(const struct model_key *k, const char *value)
{
    if (!k->big)
        return strcmp(value, k->value) == 0;
    char *want = big_value(k->key);
    bool same = strcmp(value, want) == 0;
    free(want);
    return same;
}

struct worker {
    int id;
    const char *seeds;
    struct model_key *keys; /* NKEYS; the worker uses those with i % NTHREADS == id */
    volatile int *stop;
    long ops, errors, moving_ops;
    char first_error[256];
};

static void worker_error(struct worker *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void worker_error(struct worker *w, const char *fmt, ...)
{
    if (w->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->first_error, sizeof w->first_error, fmt, ap);
        va_end(ap);
    }
}

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    char err[200];
    cocytus_t *c = cocytus_connect(w->seeds, err, sizeof err);
    if (!c) {
        worker_error(w, "connect: %s", err);
        return NULL;
    }
    unsigned seed = (unsigned)(w->id * 7919 + 1);
    int64_t end = harness_now_ms() + THREAD_MAX_MS;
    long seq = 0;
    while (!*w->stop && w->ops < THREAD_MAX_OPS && harness_now_ms() < end) {
        /* Half of the operations on the moving slot. */
        bool moving = rand_r(&seed) % 2 == 0;
        int i;
        do {
            i = (int)(rand_r(&seed) % (NKEYS / NTHREADS)) * NTHREADS + w->id;
        } while (i >= NKEYS || (w->keys[i].moving != moving && rand_r(&seed) % 8 != 0));
        struct model_key *k = &w->keys[i];
        size_t nkey = strlen(k->key);
        int what = (int)(rand_r(&seed) % 100);
        cocytus_rc rc;
        w->ops++;
        w->moving_ops += k->moving;
        if (what < 45) {
            char v[VALUE_MAX];
            snprintf(v, sizeof v, "w%d-%ld-%s", w->id, ++seq, k->key);
            rc = cocytus_set(c, k->key, nkey, v, strlen(v), 7, 0);
            if (rc != COCYTUS_OK) {
                worker_error(w, "set %s: %s (%s)", k->key, cocytus_strerror(rc),
                             cocytus_last_error(c));
                continue;
            }
            k->present = true;
            k->big = false;
            snprintf(k->value, sizeof k->value, "%s", v);
        } else if (what < 60) {
            rc = cocytus_delete(c, k->key, nkey);
            if (rc != COCYTUS_OK && !(rc == COCYTUS_NOT_FOUND && !k->present)) {
                worker_error(w, "delete %s: %s (%s), model %s", k->key, cocytus_strerror(rc),
                             cocytus_last_error(c), k->present ? "present" : "absent");
                continue;
            }
            k->present = false;
            k->big = false;
        } else {
            cocytus_item_t it;
            rc = cocytus_get(c, k->key, nkey, &it);
            if (rc == COCYTUS_OK) {
                if (!k->present || !model_matches(k, it.value) || it.flags != 7)
                    worker_error(w, "get %s: '%.80s' flags %u, model %s '%s'", k->key,
                                 it.value, it.flags, k->present ? "present" : "absent",
                                 k->big ? "(initial)" : k->value);
                cocytus_item_free(&it);
            } else if (rc == COCYTUS_NOT_FOUND) {
                if (k->present)
                    worker_error(w, "get %s: not found, model '%s'", k->key, k->value);
            } else {
                worker_error(w, "get %s: %s (%s)", k->key, cocytus_strerror(rc),
                             cocytus_last_error(c));
            }
        }
    }
    cocytus_close(c);
    return NULL;
}

/* NSLOT_KEYS keys "m:<n>" of the moving slot first, then keys "o:<n>" of
 * any other slot. */
static void make_keys(struct model_key *keys, unsigned slot)
{
    int n = 0;
    for (unsigned long i = 0; n < NSLOT_KEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "m:%lu", i);
        if (cocytus_key_slot(key, strlen(key)) == slot) {
            snprintf(keys[n].key, sizeof keys[n].key, "%s", key);
            keys[n++].moving = true;
        }
    }
    for (unsigned long i = 0; n < NKEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "o:%lu", i);
        if (cocytus_key_slot(key, strlen(key)) != slot) {
            snprintf(keys[n].key, sizeof keys[n].key, "%s", key);
            keys[n++].moving = false;
        }
    }
    /* Key i belongs to thread i % NTHREADS: each gets a third of both kinds. */
}

static int endpoint_proc(const struct cluster *c, cocytus_t *cl, size_t ep)
{
    char addr[128];
    if (cocytus_endpoint(cl, ep, addr, sizeof addr) < 0)
        return -1;
    const char *colon = strrchr(addr, ':');
    int port = colon ? atoi(colon + 1) : -1;
    for (int i = 0; i < c->nprocs; i++)
        if (c->p[i].port == port)
            return i;
    return -1;
}

static int run_cli_verify(const struct cluster *c)
{
    const char *cli = getenv("COCYTUS_CLI");
    char path[PATH_MAX];
    if (!cli) {
        char server[PATH_MAX];
        snprintf(server, sizeof server, "%s", harness_server_path());
        snprintf(path, sizeof path, "%s/../client/cocytus-cli", dirname(server));
        cli = path;
    }
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "timeout 20 '%s' --cluster '%s' verify > '%s/verify.out' 2>&1",
             cli, c->conf, c->dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s/verify.out' >&2", c->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "(no verify output)\n");
    }
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* A second move, of another of the source's slots, to a killed process. */
static void dead_destination(struct cluster *c, cocytus_t *cl, int src, int dead,
                             struct model_key *keys)
{
    struct model_key *k = NULL;
    for (int i = 0; i < NKEYS && !k; i++) {
        unsigned s = cocytus_key_slot(keys[i].key, strlen(keys[i].key));
        if (!keys[i].moving && keys[i].present &&
            endpoint_proc(c, cl, cocytus_slot_owner(cl, s)) == src)
            k = &keys[i];
    }
    CHECK(k != NULL, "no key of the source left to test a failed move with");
    if (!k)
        return;
    unsigned slot = cocytus_key_slot(k->key, strlen(k->key));
    kill_proc(&c->p[dead]);
    uint64_t before = epoch_of(c->p[src].port);
    char outcome[600];
    move_slot(c->p[src].port, slot, c->p[dead].port, before + 1, outcome, sizeof outcome);
    CHECK(strstr(outcome, " failed ") != NULL || strncmp(outcome, "refused", 7) == 0,
          "move to a dead process: %s", outcome);
    CHECK(epoch_of(c->p[src].port) == before, "the source's epoch changed after a failed move");
    char req[80], line[512];
    snprintf(req, sizeof req, "get %s\r\n", k->key);
    admin(c->p[src].port, req, NULL, line, sizeof line);
    CHECK(strncmp(line, "VALUE ", 6) == 0, "source after a failed move: get %s: %s", k->key, line);
    printf("  move to a dead process: %s\n", outcome);
}

/* A slot holding a key with a NUL byte (possible only in the binary
 * protocol) cannot go through the text import: the move must fail and the
 * source keep the slot and the key, rather than send it as another key. */
static void nul_key_refused(struct cluster *c, cocytus_t *cl, int src, int dst)
{
    char key[16];
    size_t nkey = 0;
    unsigned slot = 0;
    for (int i = 0; i < 100000; i++) {
        nkey = (size_t)snprintf(key, sizeof key, "nul%c%d", '\0', i);
        slot = cocytus_key_slot(key, nkey);
        if (endpoint_proc(c, cl, cocytus_slot_owner(cl, slot)) == src)
            break;
    }
    memcached_st *mc = harness_client(c->p[src].port, true);
    memcached_return_t rc = memcached_set(mc, key, nkey, "zero", 4, 0, 0);
    CHECK(rc == MEMCACHED_SUCCESS, "binary set of a key with a NUL: %s", memcached_strerror(mc, rc));
    uint64_t before = epoch_of(c->p[src].port);
    uint64_t e2 = epoch_of(c->p[dst].port);
    char outcome[600];
    move_slot(c->p[src].port, slot, c->p[dst].port, (before > e2 ? before : e2) + 1, outcome,
              sizeof outcome);
    CHECK(strstr(outcome, " failed ") != NULL && strstr(outcome, "NUL") != NULL,
          "move of a slot holding a NUL key: %s", outcome);
    CHECK(epoch_of(c->p[src].port) == before, "the source's epoch changed after a refused move");
    size_t nvalue = 0;
    uint32_t flags;
    char *v = memcached_get(mc, key, nkey, &nvalue, &flags, &rc);
    CHECK(v != NULL && nvalue == 4 && memcmp(v, "zero", 4) == 0,
          "the NUL key at the source after the refused move: %s", memcached_strerror(mc, rc));
    free(v);
    memcached_free(mc);
    printf("  slot with a NUL key: %s\n", outcome);
}

static void run_scheme(const char *name, const char *scheme, struct cluster *c, bool verify)
{
    int64_t t0 = harness_now_ms();
    printf("%s (%s): %d processes\n", name, scheme, c->nprocs);
    fflush(stdout);
    if (!cluster_start(c, scheme)) {
        CHECK(false, "%s: cluster did not start", name);
        cluster_stop(c);
        return;
    }
    char seeds[64], err[256];
    int first = -1;
    for (int i = 0; i < c->nprocs && first < 0; i++)
        if (serving(&c->p[i]))
            first = i;
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d", c->p[first].port);
    cocytus_t *cl = cocytus_connect(seeds, err, sizeof err);
    CHECK(cl != NULL, "%s: connect: %s", name, err);
    if (!cl) {
        cluster_stop(c);
        return;
    }
    /* The moving slot: the slot of "move-me" if the first serving process
     * owns it, else the first slot it owns. */
    unsigned slot = cocytus_key_slot("move-me", 7);
    while (endpoint_proc(c, cl, cocytus_slot_owner(cl, slot)) != first)
        slot = (slot + 1) % COCYTUS_SLOTS;
    int dst = -1;
    for (int i = 0; i < c->nprocs && dst < 0; i++)
        if (serving(&c->p[i]) && c->p[i].group != c->p[first].group)
            dst = i;
    struct model_key *keys = calloc(NKEYS, sizeof *keys);
    make_keys(keys, slot);

    /* Load, waiting for replicated groups to accept writes. */
    int64_t end = harness_now_ms() + READY_TIMEOUT_MS;
    int loaded = 0;
    for (int i = 0; i < NKEYS && harness_now_ms() < end; ) {
        snprintf(keys[i].value, sizeof keys[i].value, "init-%s", keys[i].key);
        char *big = keys[i].moving ? big_value(keys[i].key) : NULL;
        const char *v = big ? big : keys[i].value;
        cocytus_rc rc = cocytus_set(cl, keys[i].key, strlen(keys[i].key), v, strlen(v), 7, 0);
        free(big);
        if (rc == COCYTUS_OK) {
            keys[i].present = true;
            keys[i].big = keys[i].moving;
            loaded++;
            i++;
        } else if (loaded > 0) {
            CHECK(false, "%s: load %s: %s (%s)", name, keys[i].key, cocytus_strerror(rc),
                  cocytus_last_error(cl));
            i++;
        } else {
            harness_sleep_ms(50);   /* the group is still connecting */
        }
    }
    CHECK(loaded == NKEYS, "%s: loaded %d of %d keys", name, loaded, NKEYS);
    long src_items_before = stat_of(c->p[first].port, "curr_items");

    /* A copy an abandoned import left at the destination: the next import
     * of the slot must drop it (else a key deleted meanwhile comes back). */
    char stale[32];
    for (unsigned long i = 0;; i++) {
        snprintf(stale, sizeof stale, "s:%lu", i);
        if (cocytus_key_slot(stale, strlen(stale)) == slot)
            break;
    }
    char plant[160], planted[600];
    snprintf(plant, sizeof plant, "cocytus import begin\r\nset %s 7 0 5\r\nstale\r\n", stale);
    CHECK(admin(c->p[dst].port, plant, "STORED\r\n", planted, sizeof planted),
          "%s: planting a stale copy: %s", name, planted);

    volatile int stop = 0;
    struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        w[t] = (struct worker){ .id = t, .seeds = seeds, .keys = keys, .stop = &stop };
        pthread_create(&th[t], NULL, worker_run, &w[t]);
    }
    /* Move the slot back and forth, under load all the time. */
    char outcome[600] = "";
    uint64_t new_epoch = 0;
    int64_t move_ms = 0;
    int src = first;
    for (int m = 0; m < NMOVES; m++) {
        harness_sleep_ms(LOAD_MS / (NMOVES + 1));
        uint64_t e1 = epoch_of(c->p[src].port), e2 = epoch_of(c->p[dst].port);
        CHECK(e1 > 0 && e2 > 0, "%s: no epoch from the processes", name);
        new_epoch = (e1 > e2 ? e1 : e2) + 1;
        int64_t tm = harness_now_ms();
        move_slot(c->p[src].port, slot, c->p[dst].port, new_epoch, outcome, sizeof outcome);
        move_ms += harness_now_ms() - tm;
        CHECK(strstr(outcome, " ok ") != NULL, "%s: move %d of slot %u: %s", name, m + 1, slot,
              outcome);
        printf("  move %d: slot %u %s:%d -> %s:%d: %s\n", m + 1, slot, c->p[src].role,
               c->p[src].port, c->p[dst].role, c->p[dst].port, outcome);
        if (m == 0) {
            char get[64], got[256];
            snprintf(get, sizeof get, "get %s\r\n", stale);
            admin(c->p[dst].port, get, NULL, got, sizeof got);
            CHECK(strcmp(got, "END\r\n") == 0, "%s: the stale copy of %s survived the import: %s",
                  name, stale, got);
        }
        if (m + 1 < NMOVES) {
            int t = src;
            src = dst;
            dst = t;
        }
    }
    harness_sleep_ms(LOAD_MS / (NMOVES + 1));
    stop = 1;
    long ops = 0, moving_ops = 0, errors = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        ops += w[t].ops;
        moving_ops += w[t].moving_ops;
        errors += w[t].errors;
        CHECK(w[t].errors == 0, "%s: thread %d: %ld errors, first: %s", name, t, w[t].errors,
              w[t].first_error);
    }

    /* The source answers MOVED for the slot, naming the destination. */
    char req[80], line[512], want[128];
    snprintf(req, sizeof req, "get %s\r\n", keys[0].key);
    admin(c->p[src].port, req, NULL, line, sizeof line);
    snprintf(want, sizeof want, "SERVER_ERROR MOVED %u %" PRIu64 " 127.0.0.1:%d", slot,
             new_epoch, c->p[dst].port);
    CHECK(strncmp(line, want, strlen(want)) == 0, "%s: source after the move: %s", name, line);

    /* A fresh client reads every key's last value. */
    cocytus_t *fresh = cocytus_connect(seeds, err, sizeof err);
    int wrong = 0, live = 0, live_src = 0;
    for (int i = 0; fresh && i < NKEYS; i++) {
        struct model_key *k = &keys[i];
        cocytus_item_t it;
        cocytus_rc rc = cocytus_get(fresh, k->key, strlen(k->key), &it);
        bool ok = k->present ? rc == COCYTUS_OK && model_matches(k, it.value)
                             : rc == COCYTUS_NOT_FOUND;
        if (rc == COCYTUS_OK)
            cocytus_item_free(&it);
        if (!ok && wrong++ < 3)
            CHECK(false, "%s: after the move, %s: %s, model %s '%s'", name, k->key,
                  cocytus_strerror(rc), k->present ? "present" : "absent",
                  k->big ? "(initial)" : k->value);
        if (k->present) {
            live++;
            unsigned s = cocytus_key_slot(k->key, strlen(k->key));
            live_src += endpoint_proc(c, fresh, cocytus_slot_owner(fresh, s)) == src;
        }
    }
    CHECK(fresh && wrong == 0, "%s: %d keys wrong after the move", name, wrong);
    cocytus_item_t st;
    cocytus_rc strc = fresh ? cocytus_get(fresh, stale, strlen(stale), &st) : COCYTUS_OK;
    if (strc == COCYTUS_OK && fresh)
        cocytus_item_free(&st);
    CHECK(strc == COCYTUS_NOT_FOUND, "%s: the stale copy of %s survived the import: %s", name,
          stale, cocytus_strerror(strc));
    /* The source's engine holds only its own slots' keys now. */
    long src_items = stat_of(c->p[src].port, "curr_items");
    CHECK(src_items == live_src, "%s: source holds %ld items, %d expected", name, src_items,
          live_src);
    long dst_import = stat_of(c->p[dst].port, "import_keys");
    /* The two processes the slot went between: after an even number of
     * moves the last destination is the first source again. */
    int other = src == first ? dst : src;
    long fwd = stat_of(c->p[first].port, "migrate_forwards") +
               stat_of(c->p[other].port, "migrate_forwards");
    CHECK(fwd > 0, "%s: no write was forwarded during %d moves", name, NMOVES);
    CHECK(stat_of(c->p[first].port, "migrate_moves") == (NMOVES + 1) / 2 &&
          stat_of(c->p[other].port, "migrate_moves") == NMOVES / 2, "%s: migrate_moves", name);
    if (verify)
        CHECK(run_cli_verify(c) == 0, "%s: cocytus-cli verify after the move", name);
    printf("  %d moves in %" PRId64 " ms; %ld client ops (%ld on the slot), %ld errors; "
           "first source's items %ld before, last source's %ld after; import_keys %ld at "
           "the last destination, %ld writes forwarded\n", NMOVES, move_ms, ops, moving_ops,
           errors, src_items_before, src_items, dst_import, fwd);

    if (strcmp(name, "plain") == 0) {
        int dead = -1;
        for (int i = 0; i < c->nprocs; i++)
            if (i != src && i != dst && serving(&c->p[i]))
                dead = i;
        nul_key_refused(c, fresh ? fresh : cl, dst, src);
        if (dead >= 0)
            dead_destination(c, fresh ? fresh : cl, dst, dead, keys);
    }
    cocytus_close(fresh);
    cocytus_close(cl);
    free(keys);
    if (failures)
        for (int i = 0; i < c->nprocs; i++)
            if (c->p[i].pid > 0 || i == first || i == dst)
                print_log(&c->p[i]);
    cluster_stop(c);
    printf("  %s: %" PRId64 " ms\n", name, harness_now_ms() - t0);
    fflush(stdout);
}

int main(void)
{
    harness_install_cleanup();
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct cluster c;
    memset(&c, 0, sizeof c);
    for (int g = 0; g < 3; g++)
        add_proc(&c, g, "plain", 0);
    run_scheme("plain", "plain", &c, false);

    memset(&c, 0, sizeof c);
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < 3; i++)
            add_proc(&c, g, "data", i);
        for (int i = 0; i < 2; i++)
            add_proc(&c, g, "parity", i);
    }
    run_scheme("rs", "rs 3 5", &c, true);

    memset(&c, 0, sizeof c);
    for (int g = 0; g < 2; g++) {
        add_proc(&c, g, "primary", 0);
        add_proc(&c, g, "backup", 0);
    }
    run_scheme("pbr", "pbr 1", &c, false);

    if (failures) {
        printf("FAIL: %d check(s) failed\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
