/* delay-relay.c - a TCP relay that holds every byte going from a client to
 * its server for a fixed delay before passing it on; bytes coming back pass
 * at once.  It stands in for `tc netem delay` on kernels built without the
 * netem qdisc (bench/eval/client-location.sh): a request then reaches the
 * server D later, exactly like a one-way netem delay on the client's link.
 *
 * The relay adds a user-space hop of its own (two more reads and writes per
 * request, on the same cores as everything else), so the experiment also
 * runs it with delay 0 and reads the delay's effect against that case.
 *
 * One thread, one epoll loop.  Every chunk read from a client is appended
 * to one global FIFO with its due time (arrival + D); since D is constant
 * the FIFO is ordered by due time, and one timerfd armed for its head is
 * all the scheduling there is.
 *
 * usage: delay-relay --delay-us D LISTEN_IP:PORT=TARGET_IP:PORT [...]
 * Prints "ready" on stdout once every listener is bound; runs until killed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTENERS 16
#define READ_SIZE 65536

enum ref_kind { REF_LISTENER, REF_CLIENT, REF_SERVER, REF_TIMER };

/* What an epoll event points at. */
struct ref {
    enum ref_kind kind;
    struct pair *pair;          /* REF_CLIENT, REF_SERVER */
    struct listener *listener;  /* REF_LISTENER */
    int out_armed;              /* EPOLLOUT requested (bytes waiting) */
};

struct buf {
    char *data;
    size_t len, cap;
};

struct listener {
    int fd;
    struct sockaddr_in target;
    struct ref ref;
};

/* One relayed connection: the client's socket and ours to the server. */
struct pair {
    int cfd, sfd;
    struct buf to_client;       /* written when the client socket has room */
    struct buf to_server;       /* due bytes the server socket had no room for */
    int closed;
    int queued;                 /* chunks in the delay FIFO that name this pair */
    struct ref cref, sref;
};

struct chunk {
    struct chunk *next;
    struct pair *pair;
    uint64_t due_ns;
    size_t len;
    char data[];
};

/* The relay's whole state. */
struct relay {
    int epfd, tfd;
    uint64_t delay_ns;
    struct chunk *head, *tail;
    struct ref tref;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int buf_append(struct buf *b, const char *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void buf_consume(struct buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* Parses "a.b.c.d:port" into addr; returns 0 or -1. */
static int parse_addr(const char *s, struct sockaddr_in *addr)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    int port = atoi(colon + 1);
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &addr->sin_addr) != 1)
        return -1;
    addr->sin_port = htons((uint16_t)port);
    return 0;
}

static int watch(struct relay *r, int fd, uint32_t events, struct ref *ref, int op)
{
    struct epoll_event ev = { .events = events, .data.ptr = ref };
    return epoll_ctl(r->epfd, op, fd, &ev);
}

static void pair_free_if_done(struct pair *p)
{
    if (p->closed && p->queued == 0) {
        free(p->to_client.data);
        free(p->to_server.data);
        free(p);
    }
}

static void pair_close(struct relay *r, struct pair *p)
{
    if (p->closed)
        return;
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, p->cfd, NULL);
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, p->sfd, NULL);
    close(p->cfd);
    close(p->sfd);
    p->closed = 1;
}

/* Writes what the buffer holds to fd; asks for EPOLLOUT while bytes remain.
 * Returns -1 when the connection broke. */
static int flush_buf(struct relay *r, int fd, struct buf *b, struct ref *ref)
{
    while (b->len > 0) {
        ssize_t n = write(fd, b->data, b->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (ref->out_armed)
                return 0;
            ref->out_armed = 1;
            return watch(r, fd, EPOLLIN | EPOLLOUT, ref, EPOLL_CTL_MOD);
        }
        if (n <= 0)
            return -1;
        buf_consume(b, (size_t)n);
    }
    if (!ref->out_armed)
        return 0;
    ref->out_armed = 0;
    return watch(r, fd, EPOLLIN, ref, EPOLL_CTL_MOD);
}

/* Sends bytes to fd now, or queues them behind bytes still waiting. */
static int send_now(struct relay *r, int fd, struct buf *b, struct ref *ref, const char *p, size_t n)
{
    if (buf_append(b, p, n) < 0)
        return -1;
    return flush_buf(r, fd, b, ref);
}

static void arm_timer(struct relay *r)
{
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (r->head) {
        its.it_value.tv_sec = (time_t)(r->head->due_ns / 1000000000u);
        its.it_value.tv_nsec = (long)(r->head->due_ns % 1000000000u);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static int enqueue(struct relay *r, struct pair *p, const char *data, size_t n)
{
    struct chunk *c = malloc(sizeof(*c) + n);
    if (!c)
        return -1;
    c->next = NULL;
    c->pair = p;
    c->due_ns = now_ns() + r->delay_ns;
    c->len = n;
    memcpy(c->data, data, n);
    p->queued++;
    if (r->tail)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
    if (r->head == c)
        arm_timer(r);
    return 0;
}

/* The timer fired: pass on every chunk that is due. */
static void release_due(struct relay *r)
{
    uint64_t expirations, now = now_ns();
    if (read(r->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        perror("delay-relay: timerfd read");
    while (r->head && r->head->due_ns <= now) {
        struct chunk *c = r->head;
        struct pair *p = c->pair;
        r->head = c->next;
        if (!r->head)
            r->tail = NULL;
        p->queued--;
        if (!p->closed && send_now(r, p->sfd, &p->to_server, &p->sref, c->data, c->len) < 0)
            pair_close(r, p);
        free(c);
        pair_free_if_done(p);
    }
    arm_timer(r);
}

static int set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int set_options(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return -1;
    return 0;
}

static void accept_client(struct relay *r, struct listener *l)
{
    int cfd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK);
    if (cfd < 0)
        return;
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&l->target, sizeof(l->target)) < 0) {
        fprintf(stderr, "delay-relay: connect to %s:%d failed: %s\n", inet_ntoa(l->target.sin_addr),
                ntohs(l->target.sin_port), strerror(errno));
        if (sfd >= 0)
            close(sfd);
        close(cfd);
        return;
    }
    struct pair *p = calloc(1, sizeof(*p));
    if (!p || set_options(cfd) < 0 || set_options(sfd) < 0) {
        free(p);
        close(cfd);
        close(sfd);
        return;
    }
    if (set_nonblock(sfd) < 0) {
        free(p);
        close(cfd);
        close(sfd);
        return;
    }
    p->cfd = cfd;
    p->sfd = sfd;
    p->cref = (struct ref){ .kind = REF_CLIENT, .pair = p };
    p->sref = (struct ref){ .kind = REF_SERVER, .pair = p };
    if (watch(r, cfd, EPOLLIN, &p->cref, EPOLL_CTL_ADD) < 0 || watch(r, sfd, EPOLLIN, &p->sref, EPOLL_CTL_ADD) < 0) {
        pair_close(r, p);
        pair_free_if_done(p);
    }
}

/* Data or room on one side of a pair. */
static void pair_event(struct relay *r, struct ref *ref, uint32_t events)
{
    struct pair *p = ref->pair;
    int from_client = ref->kind == REF_CLIENT;
    int fd = from_client ? p->cfd : p->sfd;
    char data[READ_SIZE];
    if (events & EPOLLOUT) {
        struct buf *b = from_client ? &p->to_client : &p->to_server;
        if (flush_buf(r, fd, b, ref) < 0) {
            pair_close(r, p);
            pair_free_if_done(p);
            return;
        }
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    ssize_t n = read(fd, data, sizeof(data));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    int rc;
    if (n <= 0)
        rc = -1;
    else if (from_client && r->delay_ns > 0)
        rc = enqueue(r, p, data, (size_t)n);
    else if (from_client)
        rc = send_now(r, p->sfd, &p->to_server, &p->sref, data, (size_t)n);
    else
        rc = send_now(r, p->cfd, &p->to_client, &p->cref, data, (size_t)n);
    if (rc < 0) {
        pair_close(r, p);
        pair_free_if_done(p);
    }
}

static int open_listener(struct relay *r, struct listener *l, const char *spec)
{
    char listen_part[80];
    const char *eq = strchr(spec, '=');
    struct sockaddr_in addr;
    if (!eq || (size_t)(eq - spec) >= sizeof(listen_part))
        return -1;
    memcpy(listen_part, spec, (size_t)(eq - spec));
    listen_part[eq - spec] = '\0';
    if (parse_addr(listen_part, &addr) < 0 || parse_addr(eq + 1, &l->target) < 0)
        return -1;
    int one = 1;
    l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0
        || bind(l->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(l->fd, 1024) < 0) {
        fprintf(stderr, "delay-relay: cannot listen on %s: %s\n", listen_part, strerror(errno));
        return -1;
    }
    l->ref = (struct ref){ .kind = REF_LISTENER, .listener = l };
    return watch(r, l->fd, EPOLLIN, &l->ref, EPOLL_CTL_ADD);
}

static void usage(void)
{
    fprintf(stderr, "usage: delay-relay --delay-us D LISTEN_IP:PORT=TARGET_IP:PORT [...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct listener listeners[MAX_LISTENERS];
    struct relay r;
    int nlisteners = 0;
    memset(&r, 0, sizeof(r));
    if (argc < 4 || strcmp(argv[1], "--delay-us") != 0)
        usage();
    char *end;
    long us = strtol(argv[2], &end, 10);
    if (*end != '\0' || us < 0 || us > 10000000)
        usage();
    r.delay_ns = (uint64_t)us * 1000u;
    r.epfd = epoll_create1(0);
    r.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (r.epfd < 0 || r.tfd < 0) {
        perror("delay-relay: epoll/timerfd");
        return 1;
    }
    r.tref = (struct ref){ .kind = REF_TIMER };
    if (watch(&r, r.tfd, EPOLLIN, &r.tref, EPOLL_CTL_ADD) < 0)
        return 1;
    for (int i = 3; i < argc; i++) {
        if (nlisteners == MAX_LISTENERS || open_listener(&r, &listeners[nlisteners], argv[i]) < 0) {
            fprintf(stderr, "delay-relay: bad or unusable mapping '%s'\n", argv[i]);
            return 2;
        }
        nlisteners++;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(r.epfd, evs, 64, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            perror("delay-relay: epoll_wait");
            return 1;
        }
        /* Pairs closed in this batch are freed only after it, so a later
         * event of the batch never points at freed memory: closing defers
         * the free to pair_free_if_done, which we hold off by counting the
         * batch as one more queued reference. */
        for (int i = 0; i < n; i++) {
            struct ref *ref = evs[i].data.ptr;
            if (ref->pair)
                ref->pair->queued++;
        }
        for (int i = 0; i < n; i++) {
            struct ref *ref = evs[i].data.ptr;
            switch (ref->kind) {
            case REF_LISTENER: accept_client(&r, ref->listener); break;
            case REF_TIMER: release_due(&r); break;
            default:
                if (!ref->pair->closed)
                    pair_event(&r, ref, evs[i].events);
                break;
            }
        }
        for (int i = 0; i < n; i++) {
            struct ref *ref = evs[i].data.ptr;
            if (ref->pair) {
                struct pair *p = ref->pair;
                p->queued--;
                pair_free_if_done(p);
            }
        }
    }
}
