/* keyload.c - a memcached text-protocol load on a chosen set of keys, with
 * the latency of every request measured on the client.
 *
 * The make-check tests use it to load exactly the keys whose slots some
 * servers own (test/integration/proxy_stall.sh: the keys of a SIGSTOPped
 * server on one side, every other key on the other).  It reads the keys from
 * a file, one a line; only the last word of a line counts, so the output of
 * `cocytus-bench --print-keys` ("<slot> <key>"), filtered, is a key file.
 *
 *   keyload -s HOST:PORT -k FILE [-c CONNS] [-t SECONDS] [-r READ_RATIO]
 *           [-v BYTES] [--rate OPS] [--timeout-ms MS] [--check] [--load]
 *           [--verify] [--seed N] [-q]
 *
 * One thread per connection, blocking requests, one in flight per
 * connection.  Key i belongs to connection i mod C.  Phases, in this order:
 *
 *   --check  every connection gets each of its keys once: a miss is an
 *            error, a value that is not one keyload writes for that key is
 *            wrong (the keys must have been loaded earlier);
 *   --load   every connection sets each of its keys once;
 *   run      for -t seconds (0: no run): gets of any key (uniform) and, with
 *            probability 1 - READ_RATIO, sets of one of the connection's
 *            own keys; closed loop, or paced at --rate requests/s in all
 *            (each connection at its share, staggered; a late connection
 *            sends at once until it is on time again).
 *
 * A value is "<key>#<version>#" followed by filler drawn from a generator
 * seeded by key and version, BYTES long (cut if shorter than its header);
 * versions are unique within one keyload process.  With --verify every get
 * is checked: the value must be exactly what keyload writes for that key at
 * the version its header names (else it is wrong), and a get of one of the
 * connection's own keys must return the connection's last acknowledged set
 * of it, once there was one in this process (else it is wrong: stale).  A
 * miss is an error under --verify and in --check.
 *
 * Latency: CLOCK_MONOTONIC from just before a request is written (under
 * --rate: from the time it was due, so that the requests a connection sends
 * late because an earlier one was slow count their wait: no coordinated
 * omission) until its reply is read whole, or until it failed (a timeout, a
 * closed connection, an ERROR / CLIENT_ERROR / SERVER_ERROR reply).  Every
 * request of a phase is a sample, failed ones included, so a request that
 * hung for 3 s and then failed counts as 3 s; the percentiles (nearest
 * rank) are computed from all samples, sorted.  A request that gets no complete reply within
 * --timeout-ms (default 5000) fails; the connection is then closed and
 * opened again for the next request (failing that, the request fails; the
 * next try waits 10 ms).
 *
 * Output, one line per phase that ran (stdout):
 *   phase=<check|load|run> requests=N seconds=S ops_per_s=R errors=E
 *   wrong=W misses=M p50_us=.. p90_us=.. p99_us=.. p999_us=.. max_us=..
 * and the first failures of each connection on stderr.
 *
 * Exit status: 0 when every phase ran without an error or a wrong value,
 * 1 when some request failed or a value was wrong, 2 on bad arguments, an
 * unreadable key file, or a connection that cannot be opened at the start. */
#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_KEY 250                    /* memcached's key limit */
#define MAX_VALUE (1u << 20)
#define HEADER_MAX (MAX_KEY + 23)      /* key, '#', 20 digits, '#' */
#define LOG_LIMIT 5                    /* failure lines per connection */
#define RECONNECT_PAUSE_NS 10000000ULL /* after a failed reconnect */
#define NS_PER_S 1000000000ULL
#define VERSION_UNKNOWN UINT64_MAX

enum phase { PH_CHECK, PH_LOAD, PH_RUN, NPHASES };
static const char *const PHASE_NAMES[NPHASES] = { "check", "load", "run" };

struct config {
    char host[256];
    char port[16];
    const char *keys_path;
    int conns;
    double seconds;
    double read_ratio;
    uint32_t vsize;
    double rate;
    int timeout_ms;
    int check, load, verify, quiet;
    uint64_t seed;
};

/* Samples and counters of one phase in one connection. */
struct phase_stats {
    uint64_t *lat_ns;
    size_t n, cap;
    uint64_t errors, wrong, misses;
};

struct conn {
    int id;
    int fd;                        /* -1: not connected */
    char *rbuf;                    /* replies: [rpos, rlen) not consumed yet */
    size_t rlen, rpos, rcap;
    char *wbuf;                    /* the request being written */
    char *expect;                  /* the value a get should have returned */
    uint64_t rng;
    uint64_t seq;                  /* sets issued, for versions */
    uint64_t *latest;              /* own key j (key id + j * C): last acked version */
    size_t nown;
    int logged;
    pthread_t thread;
    struct phase_stats ph[NPHASES];
};

static struct config cfg;
static char **keys;
static size_t *key_len;
static size_t nkeys;
static struct addrinfo *server_addr;
static uint64_t run_start_ns, run_end_ns;

static const char FILLER[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* ---- small helpers ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = { (time_t)(t / NS_PER_S), (long)(t % NS_PER_S) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ULL;
    return mix64(*s);
}

/* A uniform double in [0, 1). */
static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t fnv64(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void log_failure(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_failure(struct conn *c, const char *fmt, ...)
{
    if (cfg.quiet || c->logged > LOG_LIMIT)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (c->logged++ < LOG_LIMIT)
        fprintf(stderr, "keyload: connection %d: %s\n", c->id, line);
    else
        fprintf(stderr, "keyload: connection %d: more failures, not shown\n", c->id);
}

static int add_sample(struct phase_stats *ps, uint64_t ns)
{
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 4096;
        uint64_t *v = realloc(ps->lat_ns, cap * sizeof *v);
        if (v == NULL)
            return -1;
        ps->lat_ns = v;
        ps->cap = cap;
    }
    ps->lat_ns[ps->n++] = ns;
    return 0;
}

/* ---- values ---- */

/* Writes the value of key k at version into buf (cfg.vsize bytes). */
static void make_value(char *buf, size_t k, uint64_t version)
{
    char header[HEADER_MAX];
    size_t nh = (size_t)snprintf(header, sizeof header, "%.*s#%" PRIu64 "#", (int)key_len[k],
                                 keys[k], version);
    size_t n = nh < cfg.vsize ? nh : cfg.vsize;
    memcpy(buf, header, n);
    uint64_t state = fnv64(keys[k], key_len[k]) ^ mix64(version);
    while (n < cfg.vsize) {
        uint64_t r = rng_next(&state);
        for (int i = 0; i < 10 && n < cfg.vsize; i++, r >>= 6)
            buf[n++] = FILLER[r & 63];
    }
}

/* 0 if val is what keyload writes for key k at the version its header
 * names (*version set, VERSION_UNKNOWN if the value is too short to hold
 * all of it), -1 if not. */
static int check_value(struct conn *c, size_t k, const char *val, size_t nval, uint64_t *version)
{
    *version = VERSION_UNKNOWN;
    if (nval != cfg.vsize)
        return -1;
    size_t nk = key_len[k], i;
    for (i = 0; i < nk && i < nval; i++)
        if (val[i] != keys[k][i])
            return -1;
    if (i == nval)
        return 0;
    if (val[i++] != '#')
        return -1;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < nval && val[i] != '#'; i++, digits++) {
        if (val[i] < '0' || val[i] > '9' || digits == 19)
            return -1;
        v = v * 10 + (uint64_t)(val[i] - '0');
    }
    if (i == nval)
        return 0;              /* cut inside the header */
    if (digits == 0)
        return -1;
    *version = v;
    make_value(c->expect, k, v);
    return memcmp(c->expect, val, nval) == 0 ? 0 : -1;
}

/* ---- the connection ---- */

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->rlen = c->rpos = 0;
}

/* Connects, waiting at most until deadline; 0 or -1 (why in err). */
static int conn_open(struct conn *c, uint64_t deadline, char *err, size_t cap)
{
    int fd = socket(server_addr->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, cap, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, server_addr->ai_addr, server_addr->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            snprintf(err, cap, "connect: %s", strerror(errno));
            close(fd);
            return -1;
        }
        struct pollfd p = { fd, POLLOUT, 0 };
        uint64_t now = now_ns();
        int ms = now < deadline ? (int)((deadline - now + 999999) / 1000000) : 0;
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0
            || soerr != 0) {
            snprintf(err, cap, "connect: %s", soerr ? strerror(soerr) : "timed out");
            close(fd);
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->rlen = c->rpos = 0;
    return 0;
}

/* Waits until fd is ready for events or deadline: 0, or -1 on timeout. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd p = { fd, events, 0 };
        int rc = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

static int send_all(struct conn *c, const char *p, size_t n, uint64_t deadline, char *err,
                    size_t cap)
{
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(c->fd, POLLOUT, deadline) == 0)
                continue;
            snprintf(err, cap, "send: no progress in %d ms", cfg.timeout_ms);
            return -1;
        }
        snprintf(err, cap, "send: %s", w < 0 ? strerror(errno) : "nothing sent");
        return -1;
    }
    return 0;
}

/* Reads more reply bytes into rbuf: 0, or -1 (why in err). */
static int fill(struct conn *c, uint64_t deadline, char *err, size_t cap)
{
    if (c->rpos > 0 && c->rpos == c->rlen)
        c->rpos = c->rlen = 0;
    if (c->rlen == c->rcap) {
        if (c->rpos > 0) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        } else {
            size_t ncap = c->rcap * 2;
            char *nb = realloc(c->rbuf, ncap);
            if (nb == NULL) {
                snprintf(err, cap, "out of memory");
                return -1;
            }
            c->rbuf = nb;
            c->rcap = ncap;
        }
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
        if (r > 0) {
            c->rlen += (size_t)r;
            return 0;
        }
        if (r == 0) {
            snprintf(err, cap, "the server closed the connection");
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(err, cap, "recv: %s", strerror(errno));
            return -1;
        }
        if (wait_fd(c->fd, POLLIN, deadline) != 0) {
            snprintf(err, cap, "no reply in %d ms", cfg.timeout_ms);
            return -1;
        }
    }
}

/* The next reply line (without \r\n) in *line, *n bytes: 0 or -1. */
static int read_line(struct conn *c, const char **line, size_t *n, uint64_t deadline, char *err,
                     size_t cap)
{
    for (;;) {
        char *nl = memchr(c->rbuf + c->rpos, '\n', c->rlen - c->rpos);
        if (nl != NULL) {
            size_t end = (size_t)(nl - c->rbuf);
            if (end == c->rpos || c->rbuf[end - 1] != '\r') {
                snprintf(err, cap, "a reply line not ended by \\r\\n");
                return -1;
            }
            *line = c->rbuf + c->rpos;
            *n = end - 1 - c->rpos;
            c->rpos = end + 1;
            return 0;
        }
        if (c->rlen - c->rpos > 4096) {
            snprintf(err, cap, "a reply line longer than 4096 bytes");
            return -1;
        }
        if (fill(c, deadline, err, cap) != 0)
            return -1;
    }
}

/* Whether a reply line is an error reply (the stream stays in step). */
static bool error_line(const char *line, size_t n)
{
    return (n >= 5 && memcmp(line, "ERROR", 5) == 0)
        || (n >= 12 && memcmp(line, "CLIENT_ERROR", 12) == 0)
        || (n >= 12 && memcmp(line, "SERVER_ERROR", 12) == 0);
}

enum outcome { OUT_OK, OUT_MISS, OUT_FAILED };

/* One request: sends wbuf[0..n), reads one reply.  For a get, *val and
 * *nval point into rbuf on OUT_OK.  A broken stream (I/O failure, timeout,
 * a reply out of protocol) closes the connection. */
static enum outcome roundtrip(struct conn *c, size_t n, bool is_get, size_t k, const char **val,
                              size_t *nval, char *err, size_t cap)
{
    uint64_t deadline = now_ns() + (uint64_t)cfg.timeout_ms * 1000000ULL;
    if (c->fd < 0 && conn_open(c, deadline, err, cap) != 0)
        return OUT_FAILED;
    const char *line;
    size_t ln;
    if (send_all(c, c->wbuf, n, deadline, err, cap) != 0
        || read_line(c, &line, &ln, deadline, err, cap) != 0)
        goto broken;
    if (error_line(line, ln)) {
        snprintf(err, cap, "%.*s", (int)(ln < 300 ? ln : 300), line);
        return OUT_FAILED;
    }
    if (!is_get) {
        if (ln == 6 && memcmp(line, "STORED", 6) == 0)
            return OUT_OK;
        snprintf(err, cap, "set answered '%.*s'", (int)(ln < 300 ? ln : 300), line);
        goto broken;
    }
    if (ln == 3 && memcmp(line, "END", 3) == 0)
        return OUT_MISS;
    /* VALUE <key> <flags> <bytes> */
    char head[MAX_KEY + 64];
    if (ln >= sizeof head) {
        snprintf(err, cap, "a reply line too long for a VALUE line");
        goto broken;
    }
    memcpy(head, line, ln);
    head[ln] = '\0';
    char rkey[MAX_KEY + 1];
    unsigned flags;
    unsigned long bytes;
    int used = 0;
    if (sscanf(head, "VALUE %250s %u %lu%n", rkey, &flags, &bytes, &used) != 3
        || (size_t)used != ln || bytes > MAX_VALUE) {
        snprintf(err, cap, "get answered '%s'", head);
        goto broken;
    }
    if (strlen(rkey) != key_len[k] || memcmp(rkey, keys[k], key_len[k]) != 0) {
        snprintf(err, cap, "get %.*s answered the key %s", (int)key_len[k], keys[k], rkey);
        goto broken;
    }
    while (c->rlen - c->rpos < bytes + 7)     /* data, \r\n, END\r\n */
        if (fill(c, deadline, err, cap) != 0)
            goto broken;
    const char *data = c->rbuf + c->rpos;
    if (memcmp(data + bytes, "\r\nEND\r\n", 7) != 0) {
        snprintf(err, cap, "get: the value is not followed by \\r\\nEND\\r\\n");
        goto broken;
    }
    c->rpos += bytes + 7;
    *val = data;
    *nval = bytes;
    return OUT_OK;
broken:
    conn_close(c);
    return OUT_FAILED;
}

/* ---- requests ---- */

static bool own_key(const struct conn *c, size_t k)
{
    return k % (size_t)cfg.conns == (size_t)c->id;
}

/* One get of key k in phase ph, accounted for; its latency counts from t0
 * (0: now). */
static void do_get(struct conn *c, enum phase ph, size_t k, uint64_t t0)
{
    struct phase_stats *ps = &c->ph[ph];
    int n = snprintf(c->wbuf, HEADER_MAX + 16, "get %.*s\r\n", (int)key_len[k], keys[k]);
    const char *val = NULL;
    size_t nval = 0;
    char err[400];
    if (t0 == 0)
        t0 = now_ns();
    enum outcome oc = roundtrip(c, (size_t)n, true, k, &val, &nval, err, sizeof err);
    if (add_sample(ps, now_ns() - t0) != 0) {
        fprintf(stderr, "keyload: out of memory for samples\n");
        exit(2);
    }
    if (oc == OUT_FAILED) {
        ps->errors++;
        log_failure(c, "get %.*s: %s", (int)key_len[k], keys[k], err);
        return;
    }
    if (oc == OUT_MISS) {
        ps->misses++;
        if (cfg.verify || ph == PH_CHECK) {
            ps->errors++;
            log_failure(c, "get %.*s: miss", (int)key_len[k], keys[k]);
        }
        return;
    }
    if (!cfg.verify && ph != PH_CHECK)
        return;
    uint64_t version;
    if (check_value(c, k, val, nval, &version) != 0) {
        ps->wrong++;
        log_failure(c, "get %.*s: wrong value (%zu bytes): '%.40s'", (int)key_len[k], keys[k],
                    nval, val);
        return;
    }
    if (own_key(c, k) && version != VERSION_UNKNOWN) {
        uint64_t last = c->latest[k / (size_t)cfg.conns];
        if (last != VERSION_UNKNOWN && last != version) {
            ps->wrong++;
            log_failure(c, "get %.*s: stale value: version %" PRIu64 ", last written %" PRIu64,
                        (int)key_len[k], keys[k], version, last);
        }
    }
}

/* One set of own key k in phase ph, accounted for; its latency counts from
 * t0 (0: now). */
static void do_set(struct conn *c, enum phase ph, size_t k, uint64_t t0)
{
    struct phase_stats *ps = &c->ph[ph];
    uint64_t version = 1 + c->seq++ * (uint64_t)cfg.conns + (uint64_t)c->id;
    int n = snprintf(c->wbuf, HEADER_MAX + 40, "set %.*s 0 0 %" PRIu32 "\r\n", (int)key_len[k],
                     keys[k], cfg.vsize);
    make_value(c->wbuf + n, k, version);
    memcpy(c->wbuf + n + cfg.vsize, "\r\n", 2);
    char err[400];
    if (t0 == 0)
        t0 = now_ns();
    enum outcome oc = roundtrip(c, (size_t)n + cfg.vsize + 2, false, k, NULL, NULL, err,
                                sizeof err);
    if (add_sample(ps, now_ns() - t0) != 0) {
        fprintf(stderr, "keyload: out of memory for samples\n");
        exit(2);
    }
    /* a failed set may or may not have been applied */
    c->latest[k / (size_t)cfg.conns] = oc == OUT_OK ? version : VERSION_UNKNOWN;
    if (oc != OUT_OK) {
        ps->errors++;
        log_failure(c, "set %.*s: %s", (int)key_len[k], keys[k], err);
    }
}

/* A closed connection is opened again by the next request; after a failed
 * open, wait a little so that a dead server is not hammered. */
static void pause_if_down(const struct conn *c)
{
    if (c->fd < 0)
        sleep_until(now_ns() + RECONNECT_PAUSE_NS);
}

/* ---- phases ---- */

static pthread_barrier_t phase_barrier;

/* The end of a phase: every connection is done, then all go on. */
static void phase_end(void)
{
    pthread_barrier_wait(&phase_barrier);
    pthread_barrier_wait(&phase_barrier);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    size_t C = (size_t)cfg.conns;
    if (cfg.check) {
        for (size_t k = (size_t)c->id; k < nkeys; k += C) {
            do_get(c, PH_CHECK, k, 0);
            pause_if_down(c);
        }
        phase_end();
    }
    if (cfg.load) {
        for (size_t k = (size_t)c->id; k < nkeys; k += C) {
            do_set(c, PH_LOAD, k, 0);
            pause_if_down(c);
        }
        phase_end();
    }
    phase_end();                   /* the main thread sets the run's times meanwhile */
    if (cfg.seconds <= 0)
        return NULL;
    uint64_t period = cfg.rate > 0 ? (uint64_t)(1e9 * cfg.conns / cfg.rate) : 0;
    uint64_t due = run_start_ns + period * (uint64_t)c->id / (uint64_t)cfg.conns;
    for (;;) {
        uint64_t t0 = 0;
        if (period > 0) {
            due += period;
            if (due >= run_end_ns)
                break;
            if (now_ns() < due)
                sleep_until(due);
            t0 = due;          /* waiting behind a slow request counts */
        } else if (now_ns() >= run_end_ns) {
            break;
        }
        if (rng_unit(&c->rng) >= cfg.read_ratio && c->nown > 0) {
            size_t j = (size_t)(rng_next(&c->rng) % c->nown);
            do_set(c, PH_RUN, (size_t)c->id + j * C, t0);
        } else {
            do_get(c, PH_RUN, (size_t)(rng_next(&c->rng) % nkeys), t0);
        }
        pause_if_down(c);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile p (0 < p <= 1) of n sorted samples, in us. */
static double percentile_us(const uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p * (double)n);
    if (rank < 1)
        rank = 1;
    return (double)v[rank - 1] / 1000.0;
}

/* Merges the connections' samples of phase ph and prints its line;
 * returns errors + wrong. */
static uint64_t report(struct conn *conns, enum phase ph, double seconds)
{
    size_t n = 0;
    uint64_t errors = 0, wrong = 0, misses = 0;
    for (int i = 0; i < cfg.conns; i++) {
        n += conns[i].ph[ph].n;
        errors += conns[i].ph[ph].errors;
        wrong += conns[i].ph[ph].wrong;
        misses += conns[i].ph[ph].misses;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof *all);
    if (all == NULL) {
        fprintf(stderr, "keyload: out of memory\n");
        exit(2);
    }
    size_t at = 0;
    for (int i = 0; i < cfg.conns; i++) {
        memcpy(all + at, conns[i].ph[ph].lat_ns, conns[i].ph[ph].n * sizeof *all);
        at += conns[i].ph[ph].n;
    }
    qsort(all, n, sizeof *all, cmp_u64);
    printf("phase=%s requests=%zu seconds=%.3f ops_per_s=%.1f errors=%" PRIu64 " wrong=%" PRIu64
           " misses=%" PRIu64 " p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f\n",
           PHASE_NAMES[ph], n, seconds, seconds > 0 ? (double)n / seconds : 0, errors, wrong,
           misses, percentile_us(all, n, 0.5), percentile_us(all, n, 0.9),
           percentile_us(all, n, 0.99), percentile_us(all, n, 0.999),
           n ? (double)all[n - 1] / 1000.0 : 0);
    free(all);
    return errors + wrong;
}

/* ---- setup ---- */

static int read_keys(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "keyload: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t lcap = 0, cap = 0, lineno = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '
                           || line[len - 1] == '\t'))
            line[--len] = '\0';
        if (len == 0 || line[0] == '#')
            continue;
        char *word = line + len;
        while (word > line && word[-1] != ' ' && word[-1] != '\t')
            word--;
        size_t n = (size_t)(line + len - word);
        bool bad = n > MAX_KEY;
        for (size_t i = 0; i < n && !bad; i++)
            bad = (unsigned char)word[i] <= 0x20 || word[i] == 0x7f;
        if (bad) {
            fprintf(stderr, "keyload: %s:%zu: not a memcached text key\n", path, lineno);
            fclose(f);
            free(line);
            return -1;
        }
        if (nkeys == cap) {
            cap = cap ? cap * 2 : 1024;
            char **nk = realloc(keys, cap * sizeof *nk);
            size_t *nl = realloc(key_len, cap * sizeof *nl);
            if (nk != NULL)
                keys = nk;
            if (nl != NULL)
                key_len = nl;
            if (nk == NULL || nl == NULL) {
                fprintf(stderr, "keyload: out of memory\n");
                fclose(f);
                free(line);
                return -1;
            }
        }
        keys[nkeys] = strndup(word, n);
        key_len[nkeys] = n;
        if (keys[nkeys++] == NULL) {
            fprintf(stderr, "keyload: out of memory\n");
            fclose(f);
            free(line);
            return -1;
        }
    }
    free(line);
    fclose(f);
    if (nkeys == 0) {
        fprintf(stderr, "keyload: no key in %s\n", path);
        return -1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: keyload -s HOST:PORT -k FILE [options]\n"
        "  -s HOST:PORT        the memcached server (or proxy) to load\n"
        "  -k FILE             keys, one a line (the last word of each line)\n"
        "  -c CONNS            connections, one thread each (default 8, at most 256)\n"
        "  -t SECONDS          run phase length (default 5; 0: no run)\n"
        "  -r RATIO            fraction of gets in the run (default 0.9)\n"
        "  -v BYTES            value size (default 100)\n"
        "  --rate OPS          run paced at OPS requests/s in all (default 0: closed loop)\n"
        "  --timeout-ms MS     a request without a whole reply by then fails (default 5000)\n"
        "  --check             first get every key once: misses and wrong values are errors\n"
        "  --load              then set every key once\n"
        "  --verify            check every value read (content; own keys: the last write)\n"
        "  --seed N            random seed (default 1)\n"
        "  -q                  no failure lines on stderr\n");
}

static int bad(const char *opt, const char *val)
{
    fprintf(stderr, "keyload: bad %s '%s'\n", opt, val);
    return -1;
}

static int parse_args(int argc, char **argv)
{
    enum { O_RATE = 256, O_TIMEOUT, O_CHECK, O_LOAD, O_VERIFY, O_SEED, O_HELP };
    static const struct option opts[] = {
        { "rate", required_argument, NULL, O_RATE },
        { "timeout-ms", required_argument, NULL, O_TIMEOUT },
        { "check", no_argument, NULL, O_CHECK },
        { "load", no_argument, NULL, O_LOAD },
        { "verify", no_argument, NULL, O_VERIFY },
        { "seed", required_argument, NULL, O_SEED },
        { "help", no_argument, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    cfg.conns = 8;
    cfg.seconds = 5;
    cfg.read_ratio = 0.9;
    cfg.vsize = 100;
    cfg.timeout_ms = 5000;
    cfg.seed = 1;
    const char *server = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "s:k:c:t:r:v:q", opts, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (opt) {
        case 's':
            server = optarg;
            break;
        case 'k':
            cfg.keys_path = optarg;
            break;
        case 'c': {
            long v = strtol(optarg, &end, 10);
            if (errno || *end || v < 1 || v > MAX_CONNS)
                return bad("-c", optarg);
            cfg.conns = (int)v;
            break;
        }
        case 't':
            cfg.seconds = strtod(optarg, &end);
            if (errno || *end || !(cfg.seconds >= 0 && cfg.seconds <= 3600))
                return bad("-t", optarg);
            break;
        case 'r':
            cfg.read_ratio = strtod(optarg, &end);
            if (errno || *end || !(cfg.read_ratio >= 0 && cfg.read_ratio <= 1))
                return bad("-r", optarg);
            break;
        case 'v': {
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || *end || v < 1 || v > MAX_VALUE)
                return bad("-v", optarg);
            cfg.vsize = (uint32_t)v;
            break;
        }
        case O_RATE:
            cfg.rate = strtod(optarg, &end);
            if (errno || *end || !(cfg.rate >= 0 && cfg.rate <= 1e7))
                return bad("--rate", optarg);
            break;
        case O_TIMEOUT: {
            long v = strtol(optarg, &end, 10);
            if (errno || *end || v < 1 || v > 600000)
                return bad("--timeout-ms", optarg);
            cfg.timeout_ms = (int)v;
            break;
        }
        case O_CHECK:
            cfg.check = 1;
            break;
        case O_LOAD:
            cfg.load = 1;
            break;
        case O_VERIFY:
            cfg.verify = 1;
            break;
        case O_SEED:
            cfg.seed = strtoull(optarg, &end, 10);
            if (errno || *end)
                return bad("--seed", optarg);
            break;
        case 'q':
            cfg.quiet = 1;
            break;
        case O_HELP:
            usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "keyload: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (server == NULL || cfg.keys_path == NULL) {
        fprintf(stderr, "keyload: -s and -k are required\n");
        return -1;
    }
    const char *colon = strrchr(server, ':');
    if (colon == NULL || colon == server || (size_t)(colon - server) >= sizeof cfg.host
        || strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof cfg.port)
        return bad("-s", server);
    memcpy(cfg.host, server, (size_t)(colon - server));
    cfg.host[colon - server] = '\0';
    strcpy(cfg.port, colon + 1);
    return 0;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (read_keys(cfg.keys_path) != 0)
        return 2;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    int gai = getaddrinfo(cfg.host, cfg.port, &hints, &server_addr);
    if (gai != 0) {
        fprintf(stderr, "keyload: %s:%s: %s\n", cfg.host, cfg.port, gai_strerror(gai));
        return 2;
    }
    struct conn *conns = calloc((size_t)cfg.conns, sizeof *conns);
    if (conns == NULL)
        return 2;
    for (int i = 0; i < cfg.conns; i++) {
        struct conn *c = &conns[i];
        c->id = i;
        c->fd = -1;
        c->rcap = 64 * 1024;
        c->rbuf = malloc(c->rcap);
        c->wbuf = malloc(HEADER_MAX + 64 + cfg.vsize);
        c->expect = malloc(cfg.vsize);
        c->rng = mix64(cfg.seed) ^ mix64((uint64_t)i + 1);
        c->nown = nkeys > (size_t)i ? (nkeys - (size_t)i + (size_t)cfg.conns - 1) / (size_t)cfg.conns
                                    : 0;
        c->latest = malloc((c->nown ? c->nown : 1) * sizeof *c->latest);
        if (c->rbuf == NULL || c->wbuf == NULL || c->expect == NULL || c->latest == NULL) {
            fprintf(stderr, "keyload: out of memory\n");
            return 2;
        }
        for (size_t j = 0; j < c->nown; j++)
            c->latest[j] = VERSION_UNKNOWN;
        char err[300];
        if (conn_open(c, now_ns() + (uint64_t)cfg.timeout_ms * 1000000ULL, err, sizeof err) != 0) {
            fprintf(stderr, "keyload: connection %d: cannot reach %s:%s: %s\n", i, cfg.host,
                    cfg.port, err);
            return 2;
        }
    }
    /* Phases end together: at each boundary every worker and this thread
     * meet twice (done; go on), so this thread can time the phase in between. */
    pthread_barrier_init(&phase_barrier, NULL, (unsigned)cfg.conns + 1);
    uint64_t t = now_ns();
    for (int i = 0; i < cfg.conns; i++)
        if (pthread_create(&conns[i].thread, NULL, conn_main, &conns[i]) != 0) {
            fprintf(stderr, "keyload: cannot start a thread\n");
            return 2;
        }
    double secs[NPHASES] = { 0, 0, 0 };
    if (cfg.check) {
        pthread_barrier_wait(&phase_barrier);
        secs[PH_CHECK] = (double)(now_ns() - t) / 1e9;
        t = now_ns();
        pthread_barrier_wait(&phase_barrier);
    }
    if (cfg.load) {
        pthread_barrier_wait(&phase_barrier);
        secs[PH_LOAD] = (double)(now_ns() - t) / 1e9;
        pthread_barrier_wait(&phase_barrier);
    }
    pthread_barrier_wait(&phase_barrier);         /* every worker waits for the times */
    run_start_ns = now_ns();
    run_end_ns = run_start_ns + (uint64_t)(cfg.seconds * 1e9);
    pthread_barrier_wait(&phase_barrier);
    for (int i = 0; i < cfg.conns; i++)
        pthread_join(conns[i].thread, NULL);
    secs[PH_RUN] = (double)(now_ns() - run_start_ns) / 1e9;
    uint64_t bad_total = 0;
    if (cfg.check)
        bad_total += report(conns, PH_CHECK, secs[PH_CHECK]);
    if (cfg.load)
        bad_total += report(conns, PH_LOAD, secs[PH_LOAD]);
    if (cfg.seconds > 0)
        bad_total += report(conns, PH_RUN, secs[PH_RUN]);
    fflush(stdout);
    for (int i = 0; i < cfg.conns; i++) {
        conn_close(&conns[i]);
        for (int p = 0; p < NPHASES; p++)
            free(conns[i].ph[p].lat_ns);
        free(conns[i].rbuf);
        free(conns[i].wbuf);
        free(conns[i].expect);
        free(conns[i].latest);
    }
    free(conns);
    for (size_t k = 0; k < nkeys; k++)
        free(keys[k]);
    free(keys);
    free(key_len);
    freeaddrinfo(server_addr);
    return bad_total != 0 ? 1 : 0;
}
