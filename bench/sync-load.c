/* sync-load.c - closed-loop set load generator (bench helper for
 * bench/pbr-sync.sh).
 *
 * Opens C connections to one memcached-compatible server and keeps exactly
 * one ASCII `set` in flight on each: as soon as a connection reads STORED it
 * sends the next set.  Keys are drawn uniformly at random from a fixed key
 * space "key:%08d" padded with '.' to the key length (the same keys as
 * bench/mc-load.c writes, so mc-load can preload them); values have a fixed
 * size.  Runs for a bounded time, then prints one line of results: sets
 * completed, ops/s, and latency (mean, p50, p99, max) measured from the
 * first byte sent to the reply read, in microseconds.
 *
 * Single thread, epoll, non-blocking sockets.  Latencies go into a
 * log-linear histogram (32 sub-buckets per power of two: about 3% precision).
 *
 * Build: cc -O2 -o sync-load sync-load.c
 * Usage: sync-load [-s host] -p port [-c conns] [-z value_size] [-n keys]
 *                  [-k key_len] [-d seconds] [-r seed]
 * Output: sync-load: conns C size Z keys N secs S ops O ops_s X avg_us A
 *         p50_us P p99_us Q max_us M errors E
 * Exit status: 0 when every reply was STORED, 1 on any error (connect
 * failure, bad reply, closed connection), 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEY 250
#define MAX_CONNS 4096
#define HDR_MAX (MAX_KEY + 64)
#define REPLY_MAX 512
#define SUB_BITS 5                          /* 32 sub-buckets per octave */
#define SUBS (1 << SUB_BITS)
#define OCTAVES 40
#define NBUCKETS (OCTAVES * SUBS)
#define DRAIN_NS 2000000000LL               /* wait for replies after the end */

struct conn {
    int fd;
    char hdr[HDR_MAX];
    size_t hdr_len;
    size_t sent;                            /* bytes of the request written */
    char reply[REPLY_MAX];
    size_t reply_len;
    int64_t t_start;                        /* ns: request's first write */
    bool busy;                              /* a request is in flight */
    bool want_out;                          /* registered for EPOLLOUT */
};

static const char *value;
static size_t value_size;
static long nkeys = 100000;
static size_t key_len = 12;
static uint64_t rng_state;

static uint64_t hist[NBUCKETS];
static uint64_t ops, errors;
static double lat_sum_us;
static uint64_t lat_max_ns;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* xorshift64*: cheap and good enough to pick keys. */
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* Histogram bucket of a latency in ns (resolution 1/32 of its octave). */
static int bucket_of(uint64_t ns)
{
    if (ns < SUBS)
        return (int)ns;
    int e = 63 - __builtin_clzll(ns);       /* ns in [2^e, 2^(e+1)) */
    int sub = (int)((ns >> (e - SUB_BITS)) & (SUBS - 1));
    int b = (e - SUB_BITS + 1) * SUBS + sub;
    return b < NBUCKETS ? b : NBUCKETS - 1;
}

/* Upper edge (ns) of bucket b. */
static double bucket_top(int b)
{
    if (b < SUBS)
        return b + 1;
    int e = b / SUBS + SUB_BITS - 1;
    int sub = b % SUBS;
    return (double)(((uint64_t)SUBS + (uint64_t)sub + 1) << (e - SUB_BITS));
}

static double percentile_us(double q)
{
    uint64_t want = (uint64_t)(q * (double)ops), acc = 0;
    if (want == 0)
        want = 1;
    for (int b = 0; b < NBUCKETS; b++) {
        acc += hist[b];
        if (acc >= want)
            return bucket_top(b) / 1000.0;
    }
    return 0;
}

/* Builds the next request header on c (a random key). */
static void next_request(struct conn *c)
{
    char key[MAX_KEY + 1];
    long k = (long)(rnd() % (uint64_t)nkeys);
    int n = snprintf(key, sizeof(key), "key:%08ld", k);
    size_t len = (size_t)n;
    while (len < key_len)
        key[len++] = '.';
    key[len] = '\0';
    n = snprintf(c->hdr, sizeof(c->hdr), "set %s 0 0 %zu\r\n", key, value_size);
    c->hdr_len = (size_t)n;
    c->sent = 0;
    c->reply_len = 0;
    c->busy = true;
}

/* Writes as much of c's request as the socket takes.  0: ok (maybe
 * partial), -1: error. */
static int push(struct conn *c)
{
    size_t total = c->hdr_len + value_size + 2;
    while (c->sent < total) {
        const char *base[3] = { c->hdr, value, "\r\n" };
        size_t len[3] = { c->hdr_len, value_size, 2 };
        struct iovec iov[3];
        int n = 0;
        size_t skip = c->sent;
        for (int i = 0; i < 3; i++) {
            if (skip >= len[i]) {
                skip -= len[i];
                continue;
            }
            iov[n].iov_base = (char *)base[i] + skip;
            iov[n++].iov_len = len[i] - skip;
            skip = 0;
        }
        ssize_t w = writev(c->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->sent += (size_t)w;
    }
    return 0;
}

static int set_out(int ep, struct conn *c, bool want)
{
    if (c->want_out == want)
        return 0;
    struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
    c->want_out = want;
    return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Sends a new request on c; returns -1 on error. */
static int start_request(int ep, struct conn *c)
{
    next_request(c);
    c->t_start = now_ns();
    if (push(c) < 0)
        return -1;
    return set_out(ep, c, c->sent < c->hdr_len + value_size + 2);
}

/* Reads c's reply.  1: a full reply line arrived (counted), 0: not yet,
 * -1: error or closed. */
static int pull(struct conn *c, bool counting)
{
    for (;;) {
        ssize_t r = read(c->fd, c->reply + c->reply_len, REPLY_MAX - 1 - c->reply_len);
        if (r == 0)
            return -1;
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return -1;
        }
        c->reply_len += (size_t)r;
        c->reply[c->reply_len] = '\0';
        char *eol = strstr(c->reply, "\r\n");
        if (eol == NULL) {
            if (c->reply_len >= REPLY_MAX - 1)
                return -1;
            continue;
        }
        if (eol + 2 != c->reply + c->reply_len) {
            fprintf(stderr, "sync-load: unexpected bytes after a reply\n");
            return -1;
        }
        if (strcmp(c->reply, "STORED\r\n") != 0) {
            if (errors < 5)
                fprintf(stderr, "sync-load: reply %.*s\n", (int)(eol - c->reply), c->reply);
            errors++;
        } else if (counting) {
            uint64_t ns = (uint64_t)(now_ns() - c->t_start);
            hist[bucket_of(ns)]++;
            ops++;
            lat_sum_us += (double)ns / 1000.0;
            if (ns > lat_max_ns)
                lat_max_ns = ns;
        }
        c->busy = false;
        return 1;
    }
}

static int connect_to(const char *host, int port)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *a;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (a = res; a != NULL; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* Waits (<= 2 s) until a non-blocking connect on fd completed. */
static int connected(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLOUT }, out;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        if (ep >= 0)
            close(ep);
        return -1;
    }
    int n = epoll_wait(ep, &out, 1, 2000);
    close(ep);
    int err = 0;
    socklen_t len = sizeof(err);
    if (n != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0)
        return -1;
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-s host] -p port [-c conns] [-z value_size] [-n keys]\n"
            "          [-k key_len] [-d seconds] [-r seed]\n", prog);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1";
    int port = 0, nconns = 50, opt;
    long vsize = 100, klen = 12;
    double secs = 5;
    uint64_t seed = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);

    while ((opt = getopt(argc, argv, "s:p:c:z:n:k:d:r:h")) != -1) {
        switch (opt) {
        case 's': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'z': vsize = atol(optarg); break;
        case 'n': nkeys = atol(optarg); break;
        case 'k': klen = atol(optarg); break;
        case 'd': secs = atof(optarg); break;
        case 'r': seed = strtoull(optarg, NULL, 10); break;
        default: usage(argv[0]); return 2;
        }
    }
    if (port <= 0 || port > 65535 || nconns < 1 || nconns > MAX_CONNS || vsize < 1 ||
        vsize > 1024 * 1024 || nkeys < 1 || nkeys > 99999999 || klen < 12 ||
        klen > MAX_KEY || !(secs > 0 && secs <= 3600)) {
        usage(argv[0]);
        return 2;
    }
    key_len = (size_t)klen;
    value_size = (size_t)vsize;
    rng_state = seed ? seed : 88172645463325252ULL;

    char *v = malloc(value_size);
    struct conn *conns = calloc((size_t)nconns, sizeof(*conns));
    if (v == NULL || conns == NULL) {
        fprintf(stderr, "sync-load: out of memory\n");
        return 1;
    }
    for (size_t j = 0; j < value_size; j++)
        v[j] = (char)('a' + j % 26);
    value = v;

    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        perror("sync-load: epoll_create1");
        return 1;
    }
    for (int i = 0; i < nconns; i++) {
        struct conn *c = &conns[i];
        c->fd = connect_to(host, port);
        if (c->fd < 0 || connected(c->fd) < 0) {
            fprintf(stderr, "sync-load: cannot connect to %s:%d (connection %d)\n", host, port, i);
            return 1;
        }
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
            perror("sync-load: epoll_ctl");
            return 1;
        }
    }

    int64_t t0 = now_ns(), t_end = t0 + (int64_t)(secs * 1e9), t_stop = t_end;
    for (int i = 0; i < nconns; i++)
        if (start_request(ep, &conns[i]) < 0) {
            fprintf(stderr, "sync-load: write failed\n");
            return 1;
        }

    struct epoll_event evs[64];
    int in_flight = nconns;
    bool failed = false, running = true;
    while (in_flight > 0) {
        int64_t now = now_ns();
        if (running && now >= t_end) {
            running = false;
            t_stop = now;
        }
        if (!running && now >= t_stop + DRAIN_NS)
            break;                          /* replies still owed: give up */
        int64_t wait_ns = (running ? t_end : t_stop + DRAIN_NS) - now;
        int timeout_ms = (int)(wait_ns / 1000000) + 1;
        int n = epoll_wait(ep, evs, 64, timeout_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("sync-load: epoll_wait");
            failed = true;
            break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c->busy)
                continue;
            if (evs[i].events & EPOLLOUT) {
                if (push(c) < 0 ||
                    set_out(ep, c, c->sent < c->hdr_len + value_size + 2) < 0) {
                    fprintf(stderr, "sync-load: write failed\n");
                    failed = true;
                    goto out;
                }
            }
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                int r = pull(c, running);
                if (r < 0) {
                    fprintf(stderr, "sync-load: connection %d closed or broken\n",
                            (int)(c - conns));
                    failed = true;
                    goto out;
                }
                if (r == 1) {
                    if (running && now_ns() < t_end) {
                        if (start_request(ep, c) < 0) {
                            fprintf(stderr, "sync-load: write failed\n");
                            failed = true;
                            goto out;
                        }
                    } else {
                        in_flight--;
                    }
                }
            }
        }
    }
out:;
    double elapsed = (double)((running ? now_ns() : t_stop) - t0) / 1e9;
    printf("sync-load: conns %d size %zu keys %ld secs %.2f ops %llu ops_s %.0f avg_us %.1f "
           "p50_us %.1f p99_us %.1f max_us %.1f errors %llu\n",
           nconns, value_size, nkeys, elapsed, (unsigned long long)ops,
           elapsed > 0 ? (double)ops / elapsed : 0.0, ops ? lat_sum_us / (double)ops : 0.0,
           percentile_us(0.50), percentile_us(0.99), (double)lat_max_ns / 1000.0,
           (unsigned long long)errors);
    for (int i = 0; i < nconns; i++)
        close(conns[i].fd);
    close(ep);
    free(conns);
    free(v);
    return (failed || errors > 0 || in_flight > 0) ? 1 : 0;
}
