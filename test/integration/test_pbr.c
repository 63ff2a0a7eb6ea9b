/* test_pbr.c - a primary-backup group under a random workload.
 *
 * For each sync mode (full, semi, async) the test starts a PBR(2) group -
 * one primary and two backups on free loopback ports, 4 MB of item memory -
 * and lets a few concurrent client processes run every storage command
 * against the primary on a shared key space: set/add/replace/append/prepend/
 * cas, delete, incr/decr, touch, get/gets, flush_all, values from one byte
 * to almost 1 MB (so the primary evicts), some expiring after a second.
 * Then, once the short-lived items are dead everywhere, cocytus-cli verify
 * must find every backup equal to the primary; the backups must refuse
 * client writes and (unpromoted) reads, and a promoted backup must serve
 * what the primary serves. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NBACKUPS 2
#define WORKERS 3
#define WORKLOAD_MS 1500
#define WORKLOAD_ROUNDS 3          /* at most, until the primary has evicted */
#define NKEYS 300
#define NCOUNTERS 40
#define MEMORY_MB "4"
#define VALUE_MAX (1000 * 1024)      /* below the 1 MB item limit with header and key */
/* A value read back may be larger: append and prepend grow a value up to
 * the server's 1 MB item limit (header and key included). */
#define READ_VALUE_MAX (1024 * 1024)
#define EXPIRY_WAIT_MS 3000          /* 1-second items are dead on every clock by then */
#define REPLY_TIMEOUT_MS 5000
#define LINE_MAX_LEN 512
#define SAMPLE_KEYS 60

struct group {
    char dir[PATH_MAX];
    char cluster[PATH_MAX + 32];
    harness_server primary;
    harness_server backup[NBACKUPS];
};

/* ---- randomness (xorshift64*, one state per worker) ---- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static uint32_t below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(rnd(s) % n);
}

/* ---- the group ---- */

/* Client ports in the file are placeholders: the harness gives each
 * server its own -p, and the endpoints file tells cocytus-cli. */
/* The secret of the cluster file this test writes ("test-<pid>"). */
static void test_secret(char *buf, size_t cap)
{
    snprintf(buf, cap, "test-%d", (int)getpid());
}

static bool write_cluster(struct group *g, const char *sync)
{
    FILE *f = fopen(g->cluster, "w");
    if (f != NULL)
        fchmod(fileno(f), 0600);   /* it holds the secret */
    if (f == NULL)
        return false;
    /* Picked together: two free ports picked one at a time may be the
     * same one, and a server refuses a port equal to its link port. */
    int ports[2 * (1 + NBACKUPS)];
    if (!harness_pick_ports(ports, 2 * (1 + NBACKUPS))) {
        fclose(f);
        return false;
    }
    char secret[32];
    test_secret(secret, sizeof secret);
    fprintf(f, "cluster pbrtest\nsecret %s\nscheme pbr %d\nsync %s\n"
            "memory " MEMORY_MB "m\nnode 0 127.0.0.1\n", secret, NBACKUPS, sync);
    fprintf(f, "proc 0 primary 0 0 %d %d\n", ports[0], ports[1]);
    for (int i = 0; i < NBACKUPS; i++)
        fprintf(f, "proc 0 backup %d 0 %d %d\n", i, ports[2 + 2 * i], ports[3 + 2 * i]);
    return fclose(f) == 0;
}

static bool write_endpoints(const struct group *g)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/endpoints", g->dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return false;
    fprintf(f, "primary 0 0 0 127.0.0.1:%d %d\n", g->primary.port, (int)g->primary.pid);
    for (int i = 0; i < NBACKUPS; i++)
        fprintf(f, "backup 0 %d 0 127.0.0.1:%d %d\n", i, g->backup[i].port,
                (int)g->backup[i].pid);
    return fclose(f) == 0;
}

static bool start_role(harness_server *srv, const struct group *g, const char *role, int index)
{
    char idx[16];
    snprintf(idx, sizeof idx, "%d", index);
    const char *args[] = { "--role", role, "--cluster", g->cluster, "--group", "0",
                           "--index", idx, "-m", MEMORY_MB, NULL };
    return harness_server_start(srv, args);
}

static void stop_servers(struct group *g)
{
    harness_server_stop(&g->primary);
    for (int i = 0; i < NBACKUPS; i++)
        harness_server_stop(&g->backup[i]);
    memset(&g->primary, 0, sizeof g->primary);
    memset(g->backup, 0, sizeof g->backup);
}

static void group_stop(struct group *g)
{
    char path[PATH_MAX + 32];
    stop_servers(g);
    snprintf(path, sizeof path, "%s/endpoints", g->dir);
    unlink(path);
    unlink(g->cluster);
    rmdir(g->dir);
}

static bool group_start_once(struct group *g, const char *sync)
{
    if (!write_cluster(g, sync))
        return false;
    for (int i = 0; i < NBACKUPS; i++)
        if (!start_role(&g->backup[i], g, "backup", i))
            return false;
    return start_role(&g->primary, g, "primary", 0) && write_endpoints(g);
}

/* A link port of the cluster file may be taken by another test between
 * picking it and listening on it: the whole group then starts again on new
 * ports. */
static bool group_start(struct group *g, const char *sync)
{
    memset(g, 0, sizeof *g);
    snprintf(g->dir, sizeof g->dir, "%s/test_pbr.XXXXXX",
             getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(g->dir) == NULL)
        return false;
    snprintf(g->cluster, sizeof g->cluster, "%s/cluster.conf", g->dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        if (group_start_once(g, sync))
            return true;
        fprintf(stderr, "test_pbr: the group did not start (attempt %d); new ports\n",
                attempt + 1);
        stop_servers(g);
    }
    return false;
}

/* ---- one request at a time over the text protocol ---- */

static bool read_reply_line(raw_conn *c, char *line)
{
    return raw_read_line(c, line, LINE_MAX_LEN, REPLY_TIMEOUT_MS) > 0;
}

static bool is_one_of(const char *line, const char *const *ok)
{
    for (; *ok != NULL; ok++)
        if (strcmp(line, *ok) == 0)
            return true;
    return false;
}

/* A storage command's reply must be one a memcached could give. */
static bool storage_reply_ok(const char *line)
{
    static const char *const ok[] = { "STORED\r\n", "NOT_STORED\r\n", "EXISTS\r\n",
                                      "NOT_FOUND\r\n", "SERVER_ERROR out of memory storing object\r\n",
                                      NULL };
    return is_one_of(line, ok);
}

/* Reads VALUE lines (data skipped) up to END; the last cas seen goes to *cas.
 * A reply that is there but wrong is described in bad (LINE_MAX_LEN bytes),
 * so that it is never taken for a missing one. */
static bool read_values(raw_conn *c, uint64_t *cas, char *scratch, char *bad)
{
    char line[LINE_MAX_LEN];
    for (;;) {
        if (!read_reply_line(c, line))
            return false;
        if (strcmp(line, "END\r\n") == 0)
            return true;
        char key[256];
        unsigned flags, bytes;
        unsigned long long v = 0;
        int n = sscanf(line, "VALUE %255s %u %u %llu", key, &flags, &bytes, &v);
        if (n < 3 || bytes > READ_VALUE_MAX) {
            snprintf(bad, LINE_MAX_LEN, "unexpected line in a get reply: %.200s", line);
            return false;
        }
        if (!raw_read_exact(c, scratch, (size_t)bytes + 2, REPLY_TIMEOUT_MS))
            return false;
        if (n == 4 && cas != NULL)
            *cas = v;
    }
}

/* ---- the workload ---- */

struct worker {
    raw_conn *c;
    uint64_t seed;
    char *value;      /* VALUE_MAX + 2 bytes: the value being sent */
    char *scratch;    /* READ_VALUE_MAX + 2 bytes: a value being read */
    char bad[LINE_MAX_LEN];
    char last[LINE_MAX_LEN];   /* the request being answered */
};

/* Mostly small values, sometimes large, rarely close to 1 MB. */
static size_t value_size(uint64_t *s)
{
    uint32_t r = below(s, 100);
    if (r < 65)
        return 1 + below(s, 100);
    if (r < 88)
        return 100 + below(s, 10000);
    if (r < 97)
        return 10000 + below(s, 100000);
    return 100000 + below(s, VALUE_MAX - 100000);
}

static long exptime_of(uint64_t *s)
{
    uint32_t r = below(s, 10);
    return r == 0 ? 1 : r == 1 ? 3600 : 0;
}

static void fill_value(struct worker *w, size_t n)
{
    uint64_t x = rnd(&w->seed);
    for (size_t i = 0; i < n; i++)
        w->value[i] = (char)('a' + (x >> ((i % 8) * 5)) % 26 + (char)(i % 3));
    memcpy(w->value + n, "\r\n", 2);
}

static bool send_storage(struct worker *w, const char *cmd, const char *key, long exptime,
                         size_t n, const char *cas)
{
    char head[LINE_MAX_LEN], line[LINE_MAX_LEN];
    fill_value(w, n);
    snprintf(w->last, sizeof w->last, "%s %s (%zu bytes)", cmd, key, n);
    snprintf(head, sizeof head, "%s %s %u %ld %zu%s%s\r\n", cmd, key, below(&w->seed, 1000),
             exptime, n, cas != NULL ? " " : "", cas != NULL ? cas : "");
    if (!raw_send_str(w->c, head) || !raw_send(w->c, w->value, n + 2) ||
        !read_reply_line(w->c, line))
        return false;
    if (!storage_reply_ok(line))
        snprintf(w->bad, sizeof w->bad, "%s %s (%zu bytes): %.200s", cmd, key, n, line);
    return w->bad[0] == '\0';
}

static bool simple_command(struct worker *w, const char *req, const char *const *ok)
{
    char line[LINE_MAX_LEN];
    snprintf(w->last, sizeof w->last, "%.*s", (int)strcspn(req, "\r\n"), req);
    if (!raw_send_str(w->c, req) || !read_reply_line(w->c, line))
        return false;
    bool digits = line[0] >= '0' && line[0] <= '9';
    if (!digits && !is_one_of(line, ok))
        snprintf(w->bad, sizeof w->bad, "%.100s: %.200s", req, line);
    return w->bad[0] == '\0';
}

static bool do_cas(struct worker *w, const char *key)
{
    char req[LINE_MAX_LEN], cas[32];
    uint64_t v = 0;
    snprintf(w->last, sizeof w->last, "gets %s", key);
    snprintf(req, sizeof req, "gets %s\r\n", key);
    if (!raw_send_str(w->c, req) || !read_values(w->c, &v, w->scratch, w->bad))
        return false;
    snprintf(cas, sizeof cas, "%" PRIu64, v != 0 && below(&w->seed, 4) != 0 ? v : v + 1);
    return send_storage(w, "cas", key, 0, 1 + below(&w->seed, 2000), cas);
}

static bool do_get(struct worker *w, const char *key)
{
    char req[LINE_MAX_LEN];
    snprintf(w->last, sizeof w->last, "get %s", key);
    snprintf(req, sizeof req, "get %s\r\n", key);
    return raw_send_str(w->c, req) && read_values(w->c, NULL, w->scratch, w->bad);
}

static bool one_op(struct worker *w, bool may_flush)
{
    static const char *const del_ok[] = { "DELETED\r\n", "NOT_FOUND\r\n", NULL };
    static const char *const arith_ok[] = { "NOT_FOUND\r\n",
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n", NULL };
    static const char *const touch_ok[] = { "TOUCHED\r\n", "NOT_FOUND\r\n", NULL };
    static const char *const flush_ok[] = { "OK\r\n", NULL };
    char key[32], req[LINE_MAX_LEN];
    uint32_t r = below(&w->seed, 1000);
    bool counter = r >= 700 && r < 800;
    snprintf(key, sizeof key, counter ? "n%u" : "k%u", below(&w->seed, counter ? NCOUNTERS : NKEYS));
    if (r < 300)
        return send_storage(w, "set", key, exptime_of(&w->seed), value_size(&w->seed), NULL);
    if (r < 380)
        return send_storage(w, "add", key, exptime_of(&w->seed), value_size(&w->seed), NULL);
    if (r < 440)
        return send_storage(w, "replace", key, exptime_of(&w->seed), value_size(&w->seed), NULL);
    if (r < 490)
        return send_storage(w, r & 1 ? "append" : "prepend", key, 0, 1 + below(&w->seed, 200), NULL);
    if (r < 550)
        return do_cas(w, key);
    if (r < 620) {
        snprintf(req, sizeof req, "delete %s\r\n", key);
        return simple_command(w, req, del_ok);
    }
    if (r < 700) {
        snprintf(req, sizeof req, "touch %s %ld\r\n", key, exptime_of(&w->seed));
        return simple_command(w, req, touch_ok);
    }
    if (r < 720) {
        snprintf(req, sizeof req, "set %s 0 %ld 1\r\n%u\r\n", key, exptime_of(&w->seed),
                 below(&w->seed, 10));
        static const char *const set_ok[] = { "STORED\r\n", NULL };
        return simple_command(w, req, set_ok);
    }
    if (r < 800) {
        snprintf(req, sizeof req, "%s %s %u\r\n", r & 1 ? "incr" : "decr", key,
                 below(&w->seed, 1000));
        return simple_command(w, req, arith_ok);
    }
    if (r == 999 && may_flush)
        return simple_command(w, "flush_all\r\n", flush_ok);
    return do_get(w, key);
}

/* Why a reply did not come: the server closed or reset the connection, or
 * it is still open and silent (a lost reply), or a reply stopped midway. */
static const char *why_no_reply(raw_conn *c)
{
    char byte;
    if (c->len > 0)
        return "a reply stopped midway";
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return "the server closed the connection";
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return "no reply in time, connection still open";
    return n < 0 ? strerror(errno) : "bytes came after the deadline";
}

/* A worker process: runs the workload, exits 0 when every reply was right. */
static void worker_main(int port, int id)
{
    struct worker w = { .seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1) ^ (uint64_t)getpid() };
    w.c = malloc(sizeof *w.c);
    w.value = malloc(VALUE_MAX + 2);
    w.scratch = malloc(READ_VALUE_MAX + 2);
    if (w.c == NULL || w.value == NULL || w.scratch == NULL || !raw_open(w.c, port))
        _exit(2);
    int64_t end = harness_now_ms() + WORKLOAD_MS;
    long ops = 0;
    while (harness_now_ms() < end) {
        if (!one_op(&w, id == 0)) {
            if (w.bad[0] != '\0')
                fprintf(stderr, "worker %d after %ld ops: %s\n", id, ops, w.bad);
            else
                fprintf(stderr, "worker %d after %ld ops: %s: %s\n", id, ops, w.last,
                        why_no_reply(w.c));
            _exit(1);
        }
        ops++;
    }
    raw_close(w.c);
    _exit(0);
}

/* Runs the workers; the number of the first that failed, or -1. */
static int run_workload(int port)
{
    pid_t pids[WORKERS];
    int failed = -1;
    for (int i = 0; i < WORKERS; i++) {
        fflush(NULL);
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0)
            worker_main(port, i);
    }
    for (int i = 0; i < WORKERS; i++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
        if (failed < 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            failed = i;
    }
    return failed;
}

/* ---- checks ---- */

static void cli_path(char *out, size_t cap)
{
    char server[PATH_MAX];
    snprintf(server, sizeof server, "%s", harness_server_path());
    snprintf(out, cap, "%s/../client/cocytus-cli", dirname(server));
}

static int run_verify(const struct group *g)
{
    char cli[PATH_MAX + 64], cmd[2 * PATH_MAX + 128];
    cli_path(cli, sizeof cli);
    snprintf(cmd, sizeof cmd, "'%s' --dir '%s' --quiet-wait 10000 verify", cli, g->dir);
    fflush(NULL);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Opens c to the server, authenticated, and asks for `cocytus info`: its
 * STAT lines follow, up to END. */
static bool info_start(raw_conn *c, int port)
{
    char secret[32];
    test_secret(secret, sizeof secret);
    return raw_open(c, port) && raw_auth(c, secret) && raw_send_str(c, "cocytus info\r\n");
}

/* One numeric STAT of `cocytus info`, or -1. */
static long long info_stat(int port, const char *name)
{
    raw_conn *c = malloc(sizeof *c);
    char line[LINE_MAX_LEN], want[96];
    long long v = -1;
    snprintf(want, sizeof want, "STAT %s ", name);
    if (c != NULL && info_start(c, port)) {
        while (read_reply_line(c, line) && strcmp(line, "END\r\n") != 0)
            if (strncmp(line, want, strlen(want)) == 0)
                v = atoll(line + strlen(want));
        raw_close(c);
    }
    free(c);
    return v;
}

/* What a failed workload leaves to look at: each server's state as it
 * tells it (xids, write queue, links) and the end of its log. */
static void print_server_state(const harness_server *srv, const char *label)
{
    raw_conn *c = malloc(sizeof *c);
    char line[LINE_MAX_LEN];
    fprintf(stderr, "%s (port %d, pid %d):\n", label, srv->port, (int)srv->pid);
    if (c != NULL && info_start(c, srv->port)) {
        while (read_reply_line(c, line) && strcmp(line, "END\r\n") != 0)
            fprintf(stderr, "  %s: %s", label, line);
        raw_close(c);
    }
    free(c);
    harness_server_print_log(srv, label);
}

static void print_group_state(const struct group *g)
{
    char label[32];
    print_server_state(&g->primary, "primary");
    for (int i = 0; i < NBACKUPS; i++) {
        snprintf(label, sizeof label, "backup %d", i);
        print_server_state(&g->backup[i], label);
    }
}

static void expect_reply(int port, const char *req, const char *prefix)
{
    raw_conn *c = malloc(sizeof *c);
    char line[LINE_MAX_LEN];
    char secret[32];
    test_secret(secret, sizeof secret);
    ck_assert(c != NULL && raw_open(c, port));
    if (strncmp(req, "cocytus ", 8) == 0)
        ck_assert(raw_auth(c, secret));
    ck_assert(raw_send_str(c, req) && read_reply_line(c, line));
    ck_assert_msg(strncmp(line, prefix, strlen(prefix)) == 0, "%s-> %s (wanted %s)", req, line,
                  prefix);
    raw_close(c);
    free(c);
}

/* The whole reply of `get key` (values may be large). */
static size_t get_reply(raw_conn *c, const char *key, char *out, size_t cap)
{
    char req[64], line[LINE_MAX_LEN];
    size_t n = 0;
    snprintf(req, sizeof req, "get %s\r\n", key);
    ck_assert(raw_send_str(c, req));
    for (;;) {
        ck_assert(read_reply_line(c, line));
        size_t len = strlen(line);
        ck_assert(n + len < cap);
        memcpy(out + n, line, len);
        n += len;
        if (strcmp(line, "END\r\n") == 0)
            return n;
        unsigned flags, bytes;
        ck_assert_msg(sscanf(line, "VALUE %*s %u %u", &flags, &bytes) == 2, "%s", line);
        ck_assert(n + bytes + 2 < cap && raw_read_exact(c, out + n, bytes + 2, REPLY_TIMEOUT_MS));
        n += bytes + 2;
    }
}

/* A promoted backup answers reads exactly as the primary does. */
static void compare_reads(int primary_port, int backup_port)
{
    size_t cap = 2 * VALUE_MAX;
    char *a = malloc(cap), *b = malloc(cap);
    raw_conn *pc = malloc(sizeof *pc), *bc = malloc(sizeof *bc);
    ck_assert(a && b && pc && bc && raw_open(pc, primary_port) && raw_open(bc, backup_port));
    for (int i = 0; i < SAMPLE_KEYS; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i * (NKEYS / SAMPLE_KEYS));
        size_t na = get_reply(pc, key, a, cap), nb = get_reply(bc, key, b, cap);
        ck_assert_msg(na == nb && memcmp(a, b, na) == 0, "get %s differs on the backup", key);
    }
    raw_close(pc);
    raw_close(bc);
    free(pc);
    free(bc);
    free(a);
    free(b);
}

/* An append may grow a value past what the workload ever sets (VALUE_MAX),
 * up to the item limit; the workload's reads must take such a value (once
 * they took it for a lost reply). */
static void grown_value_reads(int port)
{
    raw_conn *c = malloc(sizeof *c);
    char *value = malloc(VALUE_MAX + 2), *scratch = malloc(READ_VALUE_MAX + 2);
    char head[LINE_MAX_LEN], line[LINE_MAX_LEN], bad[LINE_MAX_LEN] = "";
    ck_assert(c && value && scratch && raw_open(c, port));
    memset(value, 'g', VALUE_MAX + 2);
    memcpy(value + VALUE_MAX - 1, "\r\n", 2);
    snprintf(head, sizeof head, "set grown 0 0 %d\r\n", VALUE_MAX - 1);
    ck_assert(raw_send_str(c, head) && raw_send(c, value, VALUE_MAX + 1) &&
              read_reply_line(c, line));
    ck_assert_msg(strcmp(line, "STORED\r\n") == 0, "set of %d bytes: %s", VALUE_MAX - 1, line);
    memcpy(value + 200, "\r\n", 2);
    ck_assert(raw_send_str(c, "append grown 0 0 200\r\n") && raw_send(c, value, 202) &&
              read_reply_line(c, line));
    ck_assert_msg(strcmp(line, "STORED\r\n") == 0, "append of 200 bytes: %s", line);
    uint64_t cas = 0;
    ck_assert(raw_send_str(c, "gets grown\r\n"));
    ck_assert_msg(read_values(c, &cas, scratch, bad) && cas != 0,
                  "gets of a value grown to %d bytes: %s", VALUE_MAX - 1 + 200,
                  bad[0] != '\0' ? bad : "no reply");
    raw_close(c);
    free(c);
    free(value);
    free(scratch);
}

static void run_mode(const char *sync)
{
    struct group g;
    ck_assert_msg(group_start(&g, sync), "PBR(2) group with sync %s did not start", sync);
    grown_value_reads(g.primary.port);
    /* The workload is bounded in time; a machine slow enough that one
     * round does not fill the primary's memory gets more rounds. */
    long long evictions = 0;
    for (int round = 0; round < WORKLOAD_ROUNDS && evictions <= 0; round++) {
        int failed = run_workload(g.primary.port);
        if (failed >= 0) {
            print_group_state(&g);
            ck_abort_msg("worker %d failed (sync %s, round %d)", failed, sync, round);
        }
        evictions = info_stat(g.primary.port, "evictions");
    }
    harness_sleep_ms(EXPIRY_WAIT_MS);
    int rc = run_verify(&g);
    ck_assert_msg(rc == 0, "cocytus-cli verify exited %d (sync %s)", rc, sync);
    ck_assert_msg(evictions > 0, "the workload caused no eviction in %d rounds (sync %s)",
                  WORKLOAD_ROUNDS, sync);
    ck_assert(harness_server_alive(&g.primary));
    expect_reply(g.backup[0].port, "set x 0 0 1\r\nx\r\n", "SERVER_ERROR backup");
    expect_reply(g.backup[0].port, "get k1\r\n", "SERVER_ERROR backup");
    expect_reply(g.backup[1].port, "cocytus promote\r\n", "STAT promoted 1");
    compare_reads(g.primary.port, g.backup[1].port);
    group_stop(&g);
}

START_TEST(test_pbr_full)
{
    run_mode("full");
}
END_TEST

START_TEST(test_pbr_semi)
{
    run_mode("semi");
}
END_TEST

START_TEST(test_pbr_async)
{
    run_mode("async");
}
END_TEST

static Suite *pbr_suite(void)
{
    Suite *s = suite_create("pbr");
    TCase *tc = tcase_create("workload");
    tcase_set_timeout(tc, 25);
    tcase_add_test(tc, test_pbr_full);
    tcase_add_test(tc, test_pbr_semi);
    tcase_add_test(tc, test_pbr_async);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(pbr_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
