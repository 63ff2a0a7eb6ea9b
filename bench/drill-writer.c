/* drill-writer.c - the writer and the checker of the kill drill
 * (scripts/drill, docs/pbr.md).
 *
 *   drill-writer write -p PORT -o FILE [-h HOST] [-c CONNS] [-d DEPTH]
 *                      [-z SIZE] [-t SECONDS] [-n MAX_SETS] [-w GRACE_MS]
 *   drill-writer check -p PORT -i FILE [-h HOST]
 *
 * write: CONNS connections each keep up to DEPTH text-protocol sets in
 * flight, every set a new key "d<conn>-<seq>" whose SIZE-byte value is a
 * function of the key.  Every set the server acknowledged with STORED is
 * appended to FILE as "<key> <size>" (so FILE maps each acknowledged key
 * to its value).  It stops sending after SECONDS or MAX_SETS sets, waits
 * up to GRACE_MS more for outstanding replies (-w, default 2000), and stops
 * early when every connection has failed (the server was killed); it
 * prints to stderr what it sent and what was acknowledged.
 *
 * check: reads every key of FILE from the server (multi-get, 100 keys per
 * request) and prints "acknowledged N, found F, lost L": found means the
 * value is exactly the one written; a missing key or a different value is
 * lost (the different ones are also counted as "wrong").  After a batch
 * that gets no whole reply (5 s), the rest of FILE is counted, not read
 * back: lost too, and stderr says so.  Exit status 0 when nothing is lost,
 * 1 when something is (or FILE has a line that is not "<key> <size>"), 2
 * on usage or I/O errors. */
#define _GNU_SOURCE

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#define MAX_CONNS 256
#define MAX_DEPTH 256
#define MAX_SIZE (512 * 1024)
#define KEY_MAX 64
#define IN_CAP (64 * 1024)
#define CHECK_BATCH 100
#define IO_TIMEOUT_MS 5000

struct opts {
    const char *host;
    int port;
    const char *file;
    int conns, depth;
    size_t size;
    double seconds;
    long max_sets;
    int grace_ms;
};

struct wconn {
    int fd;                     /* -1 once failed or done */
    int id;
    long next_seq;
    long inflight[MAX_DEPTH];   /* seqs sent, oldest first (ring) */
    int head, count;
    char *out;                  /* bytes to send */
    size_t out_len, out_off, out_cap;
    char in[IN_CAP];
    size_t in_len;
};

struct tally {
    long sent, acked, errors;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- keys and values ---- */

static int make_key(char *buf, int conn, long seq)
{
    return snprintf(buf, KEY_MAX, "d%d-%ld", conn, seq);
}

/* The value of a key: printable bytes from an FNV-1a seed of the key. */
static void make_value(const char *key, size_t size, char *out)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = key; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    for (size_t i = 0; i < size; i++) {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        out[i] = (char)('A' + h % 58);
    }
}

/* ---- sockets ---- */

static int dial(const char *host, int port)
{
    char portstr[16];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    snprintf(portstr, sizeof portstr, "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0)
        return -1;
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* ---- write ---- */

static bool out_reserve(struct wconn *c, size_t more)
{
    if (c->out_len + more <= c->out_cap)
        return true;
    size_t cap = (c->out_len + more) * 2;
    char *n = realloc(c->out, cap);
    if (n == NULL)
        return false;
    c->out = n;
    c->out_cap = cap;
    return true;
}

/* Queue one more set on c. */
static bool queue_set(struct wconn *c, const struct opts *o, char *value, struct tally *t)
{
    char key[KEY_MAX], head[KEY_MAX + 64];
    long seq = c->next_seq++;
    make_key(key, c->id, seq);
    make_value(key, o->size, value);
    int n = snprintf(head, sizeof head, "set %s 0 0 %zu\r\n", key, o->size);
    if (!out_reserve(c, (size_t)n + o->size + 2))
        return false;
    memcpy(c->out + c->out_len, head, (size_t)n);
    memcpy(c->out + c->out_len + n, value, o->size);
    memcpy(c->out + c->out_len + n + o->size, "\r\n", 2);
    c->out_len += (size_t)n + o->size + 2;
    c->inflight[(c->head + c->count) % MAX_DEPTH] = seq;
    c->count++;
    t->sent++;
    return true;
}

static void close_conn(struct wconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static bool flush_out(struct wconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n <= 0)
            return false;
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    return true;
}

/* One reply line for the oldest set in flight. */
static void take_reply(struct wconn *c, const char *line, size_t len, FILE *log,
                       const struct opts *o, struct tally *t)
{
    if (c->count == 0)
        return;
    long seq = c->inflight[c->head];
    c->head = (c->head + 1) % MAX_DEPTH;
    c->count--;
    if (len == 8 && memcmp(line, "STORED\r\n", 8) == 0) {
        char key[KEY_MAX];
        make_key(key, c->id, seq);
        fprintf(log, "%s %zu\n", key, o->size);
        t->acked++;
    } else {
        t->errors++;
    }
}

static bool read_replies(struct wconn *c, FILE *log, const struct opts *o, struct tally *t)
{
    ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return true;
    if (n <= 0)
        return false;
    c->in_len += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i + 1 < c->in_len; i++) {
        if (c->in[i] == '\r' && c->in[i + 1] == '\n') {
            take_reply(c, c->in + start, i + 2 - start, log, o, t);
            start = i + 2;
            i++;
        }
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
    return c->in_len < IN_CAP;
}

static int live_conns(const struct wconn *cs, int n)
{
    int live = 0;
    for (int i = 0; i < n; i++)
        live += cs[i].fd >= 0;
    return live;
}

static void refill(struct wconn *c, const struct opts *o, char *value, struct tally *t,
                   bool may_send)
{
    while (may_send && c->count < o->depth && (o->max_sets <= 0 || t->sent < o->max_sets))
        if (!queue_set(c, o, value, t))
            break;
}

static void poll_round(struct wconn *cs, const struct opts *o, FILE *log, struct tally *t)
{
    struct pollfd pfd[MAX_CONNS];
    for (int i = 0; i < o->conns; i++) {
        pfd[i].fd = cs[i].fd;
        pfd[i].events = POLLIN | (cs[i].out_off < cs[i].out_len ? POLLOUT : 0);
        pfd[i].revents = 0;
    }
    if (poll(pfd, (nfds_t)o->conns, 100) <= 0)
        return;
    for (int i = 0; i < o->conns; i++) {
        if (cs[i].fd < 0 || pfd[i].revents == 0)
            continue;
        bool ok = true;
        if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
            ok = read_replies(&cs[i], log, o, t);
        if (ok && (pfd[i].revents & POLLOUT))
            ok = flush_out(&cs[i]);
        if (!ok)
            close_conn(&cs[i]);
    }
}

static int cmd_write(const struct opts *o)
{
    FILE *log = fopen(o->file, "w");
    struct wconn *cs = calloc((size_t)o->conns, sizeof *cs);
    char *value = malloc(o->size + 1);
    struct tally t = { 0 };
    if (log == NULL || cs == NULL || value == NULL) {
        fprintf(stderr, "drill-writer: cannot open %s or out of memory\n", o->file);
        return 2;
    }
    for (int i = 0; i < o->conns; i++) {
        cs[i].id = i;
        cs[i].fd = dial(o->host, o->port);
        if (cs[i].fd < 0) {
            fprintf(stderr, "drill-writer: cannot connect to %s:%d\n", o->host, o->port);
            return 2;
        }
    }
    double end = now_s() + o->seconds;
    double give_up = end + o->grace_ms / 1000.0;
    while (live_conns(cs, o->conns) > 0 && now_s() < give_up) {
        bool sending = now_s() < end;
        for (int i = 0; i < o->conns; i++) {
            if (cs[i].fd < 0)
                continue;
            refill(&cs[i], o, value, &t, sending);
            if (!flush_out(&cs[i]))
                close_conn(&cs[i]);
            else if (!sending && cs[i].count == 0)
                close_conn(&cs[i]);
        }
        poll_round(cs, o, log, &t);
        fflush(log);
    }
    fclose(log);
    fprintf(stderr, "drill-writer: sent %ld sets, acknowledged %ld, errors %ld\n", t.sent,
            t.acked, t.errors);
    for (int i = 0; i < o->conns; i++)
        free(cs[i].out);
    free(cs);
    free(value);
    return 0;
}

/* ---- check ---- */

struct checker {
    int fd;
    char *buf;                 /* reply bytes */
    size_t len, cap;
    char *want;                /* expected value scratch */
    long acked, found, wrong;
    char error[160];           /* an error line that ended a reply, or "" */
};

static bool recv_more(struct checker *k)
{
    if (k->len + 1 >= k->cap) {
        size_t cap = k->cap * 2;
        char *n = realloc(k->buf, cap);
        if (n == NULL)
            return false;
        k->buf = n;
        k->cap = cap;
    }
    struct pollfd pfd = { .fd = k->fd, .events = POLLIN };
    if (poll(&pfd, 1, IO_TIMEOUT_MS) <= 0)
        return false;
    ssize_t n = recv(k->fd, k->buf + k->len, k->cap - k->len - 1, 0);
    if (n <= 0)
        return false;
    k->len += (size_t)n;
    k->buf[k->len] = '\0';    /* sscanf never reads past the reply */
    return true;
}

/* An error line among the reply's lines (after whole VALUE blocks) goes
 * to k->error: the server (the proxy) ended the reply there. */
static bool error_reply(struct checker *k)
{
    size_t off = 0;
    while (off < k->len) {
        unsigned flags;
        size_t bytes;
        char *eol = memmem(k->buf + off, k->len - off, "\r\n", 2);
        if (eol == NULL)
            return false;
        const char *line = k->buf + off;
        if (strncmp(line, "SERVER_ERROR", 12) == 0 || strncmp(line, "CLIENT_ERROR", 12) == 0 ||
            strncmp(line, "ERROR", 5) == 0) {
            snprintf(k->error, sizeof(k->error), "%.*s", (int)(eol - line), line);
            return true;
        }
        if (sscanf(line, "VALUE %*s %u %zu", &flags, &bytes) != 2)
            return false;
        off = (size_t)(eol - k->buf) + 2 + bytes + 2;
    }
    return false;
}

/* Reads a whole multi-get reply (up to END) into k->buf.  False if none
 * came in time, or an error line ended it (k->error). */
static bool read_get_reply(struct checker *k)
{
    k->len = 0;
    k->error[0] = '\0';
    for (;;) {
        if (k->len >= 5 && memcmp(k->buf + k->len - 5, "END\r\n", 5) == 0) {
            /* END must start a line, not end a value: walk the reply to be sure. */
            size_t off = 0;
            while (off < k->len) {
                if (k->len - off == 5 && memcmp(k->buf + off, "END\r\n", 5) == 0)
                    return true;
                unsigned flags;
                size_t bytes;
                char *eol = memmem(k->buf + off, k->len - off, "\r\n", 2);
                if (eol == NULL || sscanf(k->buf + off, "VALUE %*s %u %zu", &flags, &bytes) != 2)
                    break;
                off = (size_t)(eol - k->buf) + 2 + bytes + 2;
            }
        }
        if (error_reply(k))
            return false;
        if (!recv_more(k))
            return false;
    }
}

/* Marks each key of the batch found if the reply holds its exact value. */
static void score_batch(struct checker *k, char keys[][KEY_MAX], const size_t *sizes, int n)
{
    size_t off = 0;
    while (off < k->len && memcmp(k->buf + off, "END\r\n", 5) != 0) {
        char key[KEY_MAX];
        unsigned flags;
        size_t bytes;
        char *eol = memmem(k->buf + off, k->len - off, "\r\n", 2);
        if (eol == NULL || sscanf(k->buf + off, "VALUE %63s %u %zu", key, &flags, &bytes) != 3)
            return;
        const char *data = eol + 2;
        for (int i = 0; i < n; i++) {
            if (strcmp(keys[i], key) != 0)
                continue;
            make_value(key, sizes[i], k->want);
            if (bytes == sizes[i] && memcmp(data, k->want, bytes) == 0)
                k->found++;
            else
                k->wrong++;
            break;
        }
        off = (size_t)(data - k->buf) + bytes + 2;
    }
}

static bool check_batch(struct checker *k, char keys[][KEY_MAX], const size_t *sizes, int n)
{
    char *req = malloc((size_t)n * (KEY_MAX + 1) + 8);
    if (req == NULL)
        return false;
    size_t len = (size_t)sprintf(req, "get");
    for (int i = 0; i < n; i++)
        len += (size_t)sprintf(req + len, " %s", keys[i]);
    len += (size_t)sprintf(req + len, "\r\n");
    bool ok = send(k->fd, req, len, MSG_NOSIGNAL) == (ssize_t)len && read_get_reply(k);
    free(req);
    if (ok)
        score_batch(k, keys, sizes, n);
    return ok;
}

static int cmd_check(const struct opts *o)
{
    FILE *in = fopen(o->file, "r");
    struct checker k = { .fd = dial(o->host, o->port), .cap = 1 << 20 };
    k.buf = malloc(k.cap);
    k.want = malloc(MAX_SIZE + 1);
    char (*keys)[KEY_MAX] = malloc(CHECK_BATCH * sizeof *keys);
    size_t sizes[CHECK_BATCH];
    int n = 0;
    if (in == NULL || k.fd < 0 || k.buf == NULL || k.want == NULL || keys == NULL) {
        fprintf(stderr, "drill-writer: cannot read %s or reach %s:%d\n", o->file, o->host, o->port);
        return 2;
    }
    /* A batch that gets no whole reply stops the reading back, not the
     * count: every key after it is lost too, and the line says why. */
    bool reading = true;
    long read_back = 0;
    int got;
    while ((got = fscanf(in, "%63s %zu", keys[n], &sizes[n])) == 2) {
        if (sizes[n] > MAX_SIZE)
            continue;
        k.acked++;
        if (++n == CHECK_BATCH) {
            if (reading && !(reading = check_batch(&k, keys, sizes, n)))
                fprintf(stderr, "drill-writer: no whole reply to a get of %d keys after %ld were "
                        "read back (%s); the rest count as lost\n", n, read_back,
                        k.error[0] ? k.error : "nothing more in 5 s");
            read_back += reading ? n : 0;
            n = 0;
        }
    }
    if (got != EOF || ferror(in))
        fprintf(stderr, "drill-writer: %s: line %ld is not \"<key> <size>\"; the keys after it "
                "were not read\n", o->file, k.acked + 1);
    if (n > 0 && reading && !check_batch(&k, keys, sizes, n))
        fprintf(stderr, "drill-writer: no whole reply to a get of the last %d keys (%s)\n", n,
                k.error[0] ? k.error : "nothing more in 5 s");
    fclose(in);
    close(k.fd);
    long lost = k.acked - k.found;
    printf("acknowledged %ld, found %ld, lost %ld", k.acked, k.found, lost);
    if (k.wrong > 0)
        printf(" (%ld with a different value)", k.wrong);
    printf("\n");
    if (got != EOF)
        lost++;     /* a file not read to its end is no pass */
    free(k.buf);
    free(k.want);
    free(keys);
    return lost == 0 ? 0 : 1;
}

/* ---- main ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: drill-writer write -p PORT -o FILE [-h HOST] [-c CONNS] [-d DEPTH]\n"
            "                          [-z SIZE] [-t SECONDS] [-n MAX_SETS] [-w GRACE_MS]\n"
            "       drill-writer check -p PORT -i FILE [-h HOST]\n");
}

static bool parse_opts(int argc, char **argv, struct opts *o)
{
    int ch;
    *o = (struct opts){ .host = "127.0.0.1", .conns = 20, .depth = 8, .size = 100,
                        .seconds = 4, .max_sets = 0, .grace_ms = 2000 };
    while ((ch = getopt(argc, argv, "h:p:o:i:c:d:z:t:n:w:")) != -1) {
        switch (ch) {
        case 'h': o->host = optarg; break;
        case 'p': o->port = atoi(optarg); break;
        case 'o': case 'i': o->file = optarg; break;
        case 'c': o->conns = atoi(optarg); break;
        case 'd': o->depth = atoi(optarg); break;
        case 'z': o->size = (size_t)atol(optarg); break;
        case 't': o->seconds = atof(optarg); break;
        case 'n': o->max_sets = atol(optarg); break;
        case 'w': o->grace_ms = atoi(optarg); break;
        default: return false;
        }
    }
    return o->port > 0 && o->file != NULL && o->conns >= 1 && o->conns <= MAX_CONNS &&
           o->depth >= 1 && o->depth < MAX_DEPTH && o->size >= 1 && o->size <= MAX_SIZE;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    if (!parse_opts(argc - 1, argv + 1, &o)) {
        usage();
        return 2;
    }
    if (strcmp(cmd, "write") == 0)
        return cmd_write(&o);
    if (strcmp(cmd, "check") == 0)
        return cmd_check(&o);
    usage();
    return 2;
}
