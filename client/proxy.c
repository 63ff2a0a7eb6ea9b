/* proxy.c - cocytus-proxy: a memcached front end (ASCII and binary
 * protocol, chosen per connection by its first byte) for a Cocytus-KV
 * cluster, so that any memcached client can use one.
 *
 * The main thread fetches the slot map, accepts connections and hands each
 * to a worker thread in turn.  A worker is an event loop that never blocks:
 * it serves its clients' requests by routing them as binary requests over
 * pipelined non-blocking connections to the servers (px_backend.c), by the
 * cached slot map (px_route.c), and answers each client in request order
 * (px_client.c).  One loop iteration reads whatever became readable,
 * starts every complete request and handles every complete reply; then the
 * clients' replies are written and the requests that follow them read,
 * and the flush step writes each connection that has output once.  This file holds
 * the worker loop, its timer, start-up and options; see px.h for the
 * design of the whole. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/listener.h>

#include "lc_fetch.h"
#include "px.h"
#include "sendq.h"

#define DEFAULT_PORT 11211
#define DEFAULT_ITEM_MAX (1u << 20)
#define DEFAULT_CONNECT_WAIT_S 10
#define DEFAULT_THREADS 1
#define MAX_THREADS 64
#define IDLE_TICK_MS 1000
#define TRIM_EVERY_MS 5000

void px_clients_flush_dirty(struct px_worker *w);

/* ---- the worker loop ---- */

static bool worker_busy(const struct px_worker *w)
{
    return w->ninflight > 0 || w->nwaiting > 0 || w->fetch.running || w->fetch.pending ||
           px_meta_busy(w);
}

static void tick_set(struct px_worker *w, bool fast)
{
    int ms = fast ? PX_TICK_MS : IDLE_TICK_MS;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    event_add(w->tick, &tv);
    w->tick_on = fast;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct px_worker *w = arg;
    int64_t now = px_now_ms();

    (void)fd;
    (void)what;
    px_route_tick(w, now);
    px_meta_tick(w, now);
    px_stats_tick(w, now);
    if (now - w->last_idle_scan_ms >= IDLE_TICK_MS) {
        w->last_idle_scan_ms = now;
        px_clients_idle_scan(w, now);
    }
    /* A flood of connections or a huge multi-get leaves freed heap pages
     * behind that malloc keeps; hand them back (docs/security.md has the
     * figures with and without).  One worker does it for all: malloc_trim
     * walks every arena.  Never two at once: in a sanitizer build the
     * first call sets up glibc's unused heap, which is not thread-safe,
     * and two workers trimming together crashed the proxy (SEGV in
     * mtrim, 2 runs in 300 of four threads starting together). */
    if (w->id == 0 && now - w->last_trim_ms >= TRIM_EVERY_MS) {
        w->last_trim_ms = now;
        malloc_trim(0);
    }
}

/* Every dirty connection's output (the servers' too with backends) as one
 * batch, handed to the kernel in one io_uring submission instead of one
 * sendmsg() each (repl/sendq.h); the flush functions then take each
 * connection's result and carry on as after their own send.  Without
 * io_uring they send for themselves, as before. */
static void worker_send_batch(struct px_worker *w, bool backends)
{
    if (!sendq_batched(w->sq))
        return;
    sendq_reset(w->sq);
    if (backends)
        for (struct px_backend *be = w->dirty_be; be; be = be->next_dirty)
            px_backend_queue(be);
    for (struct px_client *c = w->dirty_clients; c; c = c->next_dirty)
        px_client_queue(c);
    sendq_submit(w->sq);
}

/* Before the servers are written, the clients are: each reply lets a
 * closed-loop client send its next request, and the requests that arrive
 * while the replies go out are read (a non-blocking pass of the loop) and
 * joined to the ones waiting for their server, as long as such a pass
 * finds client input (at most PX_DRAIN_ROUNDS).  A write to a server wakes
 * that server, and on loopback the writer pays for the wake-up: at 20
 * one-in-flight clients this halved the server writes per request (0.31 ->
 * 0.15) and took proxy CPU per request from 14.4 to 12.1 us
 * (docs/evaluation/proxy.md, run E).  The extra epoll_wait per round costs
 * less than the server writes it saves. */
static void worker_drain_clients(struct px_worker *w)
{
    for (int round = 0; round < PX_DRAIN_ROUNDS && w->dirty_clients; round++) {
        uint64_t before = w->client_reads;
        worker_send_batch(w, false);
        px_clients_flush_dirty(w);
        event_base_loop(w->base, EVLOOP_NONBLOCK);
        if (w->client_reads == before)
            break;
    }
}

/* Writes every connection with output, until nothing new is queued. */
static void worker_flush(struct px_worker *w)
{
    for (int round = 0; round < 4 && (w->dirty_be || w->dirty_clients); round++) {
        worker_send_batch(w, true);
        while (w->dirty_be) {
            struct px_backend *be = w->dirty_be;
            w->dirty_be = be->next_dirty;
            be->next_dirty = NULL;
            px_backend_flush(be);
        }
        px_clients_flush_dirty(w);
    }
}

static void *worker_main(void *arg)
{
    struct px_worker *w = arg;
    const char *why_not = NULL;

    /* The batch's ring belongs to the thread that submits: made here. */
    w->sq = sendq_new(!w->px->opt.no_uring);
    if (w->sq == NULL) {
        fprintf(stderr, "cocytus-proxy: worker %d: out of memory\n", w->id);
        exit(1);
    }
    bool batched = sendq_start(w->sq, &why_not);
    if (w->id == 0) {
        if (batched)
            fprintf(stderr, "cocytus-proxy: writes of one loop pass batched with io_uring\n");
        else
            fprintf(stderr, "cocytus-proxy: one sendmsg() per connection (io_uring: %s)\n",
                    why_not);
    }

    while (!w->stop) {
        event_base_loop(w->base, EVLOOP_ONCE);
        worker_drain_clients(w);
        worker_flush(w);
        bool busy = worker_busy(w);
        if (busy != w->tick_on)
            tick_set(w, busy);
    }
    return NULL;
}

/* What the notify pipe carries: an accepted socket and whether its client
 * speaks TLS, or fd -1 to stop. */
struct handoff {
    int fd;
    int tls;
};

static void on_notify(evutil_socket_t pfd, short what, void *arg)
{
    struct px_worker *w = arg;
    struct handoff h[64];

    (void)what;
    ssize_t n = read(pfd, h, sizeof(h));
    for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(h[0]); i++) {
        if (h[i].fd < 0) {
            w->stop = true;
            event_base_loopbreak(w->base);
        } else {
            px_client_adopt(w, h[i].fd, h[i].tls != 0);
        }
    }
}

/* Hands fd (or -1: stop) to worker w, its client speaking TLS or not.  A
 * pipe write this small is atomic. */
static bool worker_notify(struct px_worker *w, int fd, bool tls)
{
    struct handoff h = { .fd = fd, .tls = tls };
    ssize_t n;

    do
        n = write(w->notify[1], &h, sizeof(h));
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(h);
}

static bool worker_init(struct proxy *px, int i)
{
    struct px_worker *w = &px->workers[i];

    w->px = px;
    w->id = i;
    w->notify[0] = w->notify[1] = -1;
    w->fetch.fd = -1;
    w->base = event_base_new();
    if (w->base == NULL || pipe(w->notify) < 0) {
        fprintf(stderr, "cocytus-proxy: cannot set up worker %d: %s\n", i, strerror(errno));
        return false;
    }
    w->notify_ev = event_new(w->base, w->notify[0], EV_READ | EV_PERSIST, on_notify, w);
    w->tick = event_new(w->base, -1, EV_PERSIST, on_tick, w);
    if (w->notify_ev == NULL || w->tick == NULL || event_add(w->notify_ev, NULL) != 0)
        return false;
    tick_set(w, false);
    w->last_idle_scan_ms = px_now_ms();
    return px_route_init(w, px->first_map);
}

static void worker_free(struct px_worker *w)
{
    if (w->base) {
        px_clients_close_all(w);
        px_route_free(w);
        px_backend_close_all(w);
        px_meta_close_all(w);
    }
    px_resolved_free(w);
    px_rbuf_free(&w->scratch);
    sendq_free(w->sq);
    w->sq = NULL;
    if (w->notify_ev)
        event_free(w->notify_ev);
    if (w->tick)
        event_free(w->tick);
    if (w->base)
        event_base_free(w->base);
    if (w->notify[0] >= 0)
        close(w->notify[0]);
    if (w->notify[1] >= 0)
        close(w->notify[1]);
}

static bool workers_start(struct proxy *px)
{
    for (int i = 0; i < px->nworkers; i++) {
        int rc = pthread_create(&px->workers[i].thread, NULL, worker_main, &px->workers[i]);
        if (rc != 0) {
            fprintf(stderr, "cocytus-proxy: cannot start worker %d: %s\n", i, strerror(rc));
            return false;
        }
        px->workers[i].started = true;
    }
    return true;
}

static void workers_stop(struct proxy *px)
{
    for (int i = 0; i < px->nworkers; i++)
        if (px->workers[i].started)
            worker_notify(&px->workers[i], -1, false);
    for (int i = 0; i < px->nworkers; i++)
        if (px->workers[i].started) {
            pthread_join(px->workers[i].thread, NULL);
            px->workers[i].started = false;
        }
}

/* ---- accepting ---- */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    struct px_listener *pl = arg;
    struct proxy *px = pl->px;
    struct px_worker *w = &px->workers[px->next_worker];

    (void)l;
    (void)sa;
    (void)salen;
    px->next_worker = (px->next_worker + 1) % px->nworkers;
    if (!worker_notify(w, fd, pl->tls)) {
        fprintf(stderr, "cocytus-proxy: cannot hand a connection to worker %d: %s\n", w->id,
                strerror(errno));
        evutil_closesocket(fd);
    }
}

#define ACCEPT_PAUSE_MS 100

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct proxy *px = arg;

    (void)fd;
    (void)what;
    for (int i = 0; i < px->nlisteners; i++)
        evconnlistener_enable(px->listeners[i].l);
}

/* accept() failed.  Out of descriptors, the pending connection would wake
 * the listener again at once (and libevent would log each time): stop
 * accepting for a while instead, as the server does. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct proxy *px = ((struct px_listener *)arg)->px;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

    if (err != EMFILE && err != ENFILE) {
        fprintf(stderr, "cocytus-proxy: accept: %s\n", evutil_socket_error_to_string(err));
        return;
    }
    (void)l;
    for (int i = 0; i < px->nlisteners; i++)
        evconnlistener_disable(px->listeners[i].l);
    evtimer_add(px->accept_resume, &tv);
    if (px->accept_pauses++ == 0 || px->opt.verbose)
        fprintf(stderr, "cocytus-proxy: accept: %s; not accepting for %d ms (raise ulimit -n "
                "or lower -c)\n", evutil_socket_error_to_string(err), ACCEPT_PAUSE_MS);
}

/* Watches fd (listening already) for clients that speak TLS or not.  A TCP
 * socket is closed with its listener; the Unix socket by unixsock_close. */
static bool add_listener(struct proxy *px, int fd, bool tls)
{
    struct px_listener *pl = &px->listeners[px->nlisteners];
    unsigned flags = px->opt.unix_path ? 0 : LEV_OPT_CLOSE_ON_FREE;

    pl->px = px;
    pl->tls = tls;
    pl->l = evconnlistener_new(px->base, on_accept, pl, flags, 0, fd);
    if (pl->l == NULL)
        return false;
    evconnlistener_set_error_cb(pl->l, on_accept_error);
    px->nlisteners++;
    return true;
}

/* --unix-socket: clients of this host on a Unix socket (as memcached's -s,
 * memcached/unixsock.h), no TCP listener; the socket is the listener's
 * until unixsock_close. */
static bool listen_unix(struct proxy *px)
{
    char err[256];

    if (unixsock_listen(&px->unix_listener, px->opt.unix_path, px->opt.unix_mask, 1024, NULL,
                        err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-proxy: %s\n", err);
        return false;
    }
    if (!add_listener(px, px->unix_listener.fd, false)) {
        fprintf(stderr, "cocytus-proxy: cannot accept on %s\n", px->opt.unix_path);
        return false;   /* run() frees the socket */
    }
    return true;
}

/* -l as memcached reads it (listen_bind.h): a list of 127.0.0.1,
 * 127.0.0.1:11211, [::1]:11211, ::1, a host name, each optionally after
 * "notls:" (in the clear under --tls-cert); -l given again adds to it.  An
 * entry without a port listens on -p's, and the port stats settings shows
 * is that one, or with only entries that name theirs, the first. */
static bool listen_on(struct proxy *px)
{
    struct listen_bound b;
    char err[1400];     /* room for an entry of -l as long as it may be */

    px->accept_resume = evtimer_new(px->base, on_accept_resume, px);
    if (px->accept_resume == NULL)
        return false;
    if (px->opt.unix_path)
        return listen_unix(px);
    if (listen_bind(px->opt.addr, px->opt.port, 1024, "--tls-cert", px->tls != NULL, &b, err,
                    sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-proxy: %s\n", err);
        return false;
    }
    px->opt.port = b.port;
    for (int i = 0; i < b.n; i++) {
        if (!add_listener(px, b.fd[i], px->tls != NULL && !b.notls[i])) {
            fprintf(stderr, "cocytus-proxy: cannot accept on -l %s\n", px->opt.addr);
            for (int j = i; j < b.n; j++)
                close(b.fd[j]);
            return false;
        }
    }
    return true;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

/* ---- start-up ---- */

/* The first map's fetch under --backend-tls-*: TLS over its socket
 * (lc_fetch.h's transport), with the server's certificate checked. */
static void *fetch_tls_open(void *dialer, int fd, const char *host)
{
    return tls_conn_dial(dialer, fd, host);
}

static ssize_t fetch_tls_send(void *tc, const void *p, size_t n, short *want)
{
    ssize_t r = tls_write(tc, p, n);
    if (r < 0 && tls_write_waits_read(tc))
        *want = POLLIN;
    return r;
}

static ssize_t fetch_tls_recv(void *tc, void *p, size_t n, short *want)
{
    ssize_t r = tls_read(tc, p, n);
    if (r < 0 && tls_read_waits_write(tc))
        *want = POLLOUT;
    return r;
}

static const char *fetch_tls_error(void *tc)
{
    return tls_conn_error(tc);
}

static void fetch_tls_close(void *tc)
{
    tls_conn_free(tc);
}

/* The first map: from the first seed that answers, retried once a second
 * for up to wait_s seconds. */
static struct lc_map *first_map(const struct proxy *px)
{
    char err[256] = "no seed";
    const struct lc_transport tls = { fetch_tls_open, fetch_tls_send, fetch_tls_recv,
                                      fetch_tls_error, fetch_tls_close, px->dialer };

    for (int round = 0;; round++) {
        for (size_t i = 0; i < px->nseeds; i++) {
            struct lc_map *m = NULL;
            char auth[600];
            bool as = px->has_server_auth && px_auth_ascii_request(px, auth, sizeof(auth)) > 0;
            bool asked = false;
            if (lc_fetch_map(&px->seeds[i], px->opt.timeout_ms, as ? auth : NULL,
                             px->dialer ? &tls : NULL, &m, err, sizeof(err),
                             &asked) == LC_FETCH_FAILED)
                continue;
            if (as && !asked)
                /* not an error: the pair goes only to servers that ask
                 * for it; but a cluster meant to need it may not */
                fprintf(stderr, "cocytus-proxy: --server-auth: %s:%d does not ask for "
                                "credentials (it runs without -Y); they are sent only to "
                                "servers that ask\n",
                        px->seeds[i].host, px->seeds[i].port);
            return m;
        }
        if (round >= px->opt.wait_s) {
            fprintf(stderr, "cocytus-proxy: cannot reach %s: %s\n", px->opt.seeds, err);
            return NULL;
        }
        sleep(1);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cocytus-proxy --seeds HOST:PORT[,HOST:PORT...] [options]\n"
            "  -s, --seeds LIST      cluster servers to fetch the slot map from (required)\n"
            "  -p, --port PORT       port to listen on (default %d)\n"
            "  -l, --listen LIST     addresses to listen on, as memcached's -l: comma separated,\n"
            "                        each ADDR or ADDR:PORT, notls: before it to take clients\n"
            "                        in the clear under --tls-cert (default 127.0.0.1)\n"
            "      --unix-socket PATH  listen on a Unix socket instead of TCP\n"
            "      --unix-mask PERMS   the Unix socket's permissions, octal (default 0700)\n"
            "      --tls-cert FILE   clients connect with TLS; the certificate chain (PEM)\n"
            "      --tls-key FILE    its private key (default: in the --tls-cert file)\n"
            "      --tls-ca FILE     require client certificates signed by these CAs\n"
            "      --tls-min-version tlsv1.2|tlsv1.3  oldest TLS accepted (default tlsv1.2)\n"
            "      --backend-tls-ca FILE  servers speak TLS on their client ports (a cluster\n"
            "                        file's client_tls line): their certificates are checked\n"
            "                        against these CAs (default: the system's)\n"
            "      --backend-tls-cert FILE, --backend-tls-key FILE  the certificate (and key,\n"
            "                        default: in the cert file) shown to the servers\n"
            "  -t, --timeout MS      a server that leaves a request unanswered this long is\n"
            "                        taken as failed (default 1000)\n"
            "  -D, --deadline-ms MS  retry a request this long (server failures, slot\n"
            "                        moves) before answering an error (default 2000)\n"
            "  -r, --attempts N      at most this many tries per request (default 100)\n"
            "  -I, --max-item BYTES  largest value accepted (default %u)\n"
            "  -W, --wait SECONDS    keep trying the seeds this long at start (default %d)\n"
            "  -T, --threads N       worker threads (default %d)\n"
            "  -c, --max-conns N     refuse clients beyond N open connections (default: no limit)\n"
            "  -i, --idle-timeout S  close a client idle for S seconds (default: never)\n"
            "  -Y, --auth-file FILE  clients must authenticate (user:password lines, as\n"
            "                        memcached -Y): ASCII auth set, or binary SASL PLAIN\n"
            "      --server-auth FILE  user:password (first line) the proxy presents to\n"
            "                        servers that run with -Y (default: none)\n"
            "  -B, --binary-backend  accepted for compatibility: servers are always spoken\n"
            "                        to in the binary protocol\n"
            "      --no-io-uring     write each connection with its own sendmsg() instead of\n"
            "                        batching a loop pass's writes in one io_uring submission\n"
            "  -v, --verbose         log the map's endpoints and idle closes\n"
            "  -h, --help\n",
            DEFAULT_PORT, DEFAULT_ITEM_MAX, DEFAULT_CONNECT_WAIT_S, DEFAULT_THREADS);
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

enum { OPT_UNIX_SOCKET = 1000, OPT_UNIX_MASK, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_CA,
       OPT_TLS_MIN_VERSION, OPT_BACKEND_TLS_CERT, OPT_BACKEND_TLS_KEY, OPT_BACKEND_TLS_CA };

/* Returns 0 to run, 1 on a usage error, 2 after --help. */
static int parse_args(int argc, char **argv, struct px_options *o)
{
    static const struct option longopts[] = {
        { "seeds", required_argument, NULL, 's' },
        { "port", required_argument, NULL, 'p' },
        { "listen", required_argument, NULL, 'l' },
        { "binary-backend", no_argument, NULL, 'B' },
        { "ascii-backend", no_argument, NULL, 'A' },
        { "timeout", required_argument, NULL, 't' },
        { "attempts", required_argument, NULL, 'r' },
        { "deadline-ms", required_argument, NULL, 'D' },
        { "max-item", required_argument, NULL, 'I' },
        { "wait", required_argument, NULL, 'W' },
        { "threads", required_argument, NULL, 'T' },
        { "max-conns", required_argument, NULL, 'c' },
        { "idle-timeout", required_argument, NULL, 'i' },
        { "auth-file", required_argument, NULL, 'Y' },
        { "server-auth", required_argument, NULL, 'S' },
        { "no-io-uring", no_argument, NULL, 'U' },
        { "unix-socket", required_argument, NULL, OPT_UNIX_SOCKET },
        { "unix-mask", required_argument, NULL, OPT_UNIX_MASK },
        { "tls-cert", required_argument, NULL, OPT_TLS_CERT },
        { "tls-key", required_argument, NULL, OPT_TLS_KEY },
        { "tls-ca", required_argument, NULL, OPT_TLS_CA },
        { "tls-min-version", required_argument, NULL, OPT_TLS_MIN_VERSION },
        { "backend-tls-cert", required_argument, NULL, OPT_BACKEND_TLS_CERT },
        { "backend-tls-key", required_argument, NULL, OPT_BACKEND_TLS_KEY },
        { "backend-tls-ca", required_argument, NULL, OPT_BACKEND_TLS_CA },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int ch;
    long v;

    while ((ch = getopt_long(argc, argv, "s:p:l:BAt:D:r:I:W:T:c:i:Y:vh", longopts, NULL)) != -1) {
        switch (ch) {
        case 's': o->seeds = optarg; break;
        case 'Y': o->auth_file = optarg; break;
        case 'S': o->server_auth_file = optarg; break;
        case 'U': o->no_uring = true; break;
        case 'l':
            if (!listen_list_add(&o->addr, optarg))
                return 1;
            break;
        case OPT_UNIX_SOCKET: o->unix_path = optarg; break;
        case OPT_TLS_CERT: o->tls = true; o->tls_cfg.chain_cert = optarg; break;
        case OPT_TLS_KEY: o->tls_cfg.key = optarg; break;
        case OPT_TLS_CA:
            o->tls_cfg.ca_cert = optarg;
            o->tls_cfg.verify_mode = 2;     /* a CA file is given to require its clients */
            break;
        case OPT_BACKEND_TLS_CERT: o->backend_tls = true; o->backend_tls_cert = optarg; break;
        case OPT_BACKEND_TLS_KEY: o->backend_tls = true; o->backend_tls_key = optarg; break;
        case OPT_BACKEND_TLS_CA: o->backend_tls = true; o->backend_tls_ca = optarg; break;
        case OPT_TLS_MIN_VERSION:
            o->tls_cfg.min_version = tls_min_version_parse(optarg);
            if (o->tls_cfg.min_version < 2) {
                fprintf(stderr, "cocytus-proxy: invalid value '%s' for --tls-min-version "
                                "(tlsv1.2 or tlsv1.3)\n", optarg);
                return 1;
            }
            break;
        case OPT_UNIX_MASK:
            if (!unixsock_parse_mask(optarg, &o->unix_mask)) {
                fprintf(stderr, "cocytus-proxy: invalid value '%s' for --unix-mask "
                                "(octal, 0 to 0777)\n", optarg);
                return 1;
            }
            break;
        case 'B': break;
        case 'A':
            fprintf(stderr, "cocytus-proxy: --ascii-backend is no longer supported; "
                            "the servers are spoken to in binary\n");
            break;
        case 'v': o->verbose++; break;
        case 'h': usage(stdout); return 2;
        case 'p':
            if (!parse_int(optarg, 1, 65535, &v))
                return 1;
            o->port = (int)v;
            break;
        case 't':
            if (!parse_int(optarg, 1, 600000, &v))
                return 1;
            o->timeout_ms = (int)v;
            break;
        case 'D':
            if (!parse_int(optarg, 1, 3600000, &v))
                return 1;
            o->deadline_ms = (int)v;
            break;
        case 'r':
            if (!parse_int(optarg, 1, 1000, &v))
                return 1;
            o->max_attempts = (int)v;
            break;
        case 'I':
            if (!parse_int(optarg, 1024, 1L << 30, &v))
                return 1;
            o->item_max = (size_t)v;
            break;
        case 'W':
            if (!parse_int(optarg, 0, 3600, &v))
                return 1;
            o->wait_s = (int)v;
            break;
        case 'T':
            if (!parse_int(optarg, 1, MAX_THREADS, &v))
                return 1;
            o->threads = (int)v;
            break;
        case 'c':
            if (!parse_int(optarg, 1, 10000000, &v))
                return 1;
            o->max_conns = (int)v;
            break;
        case 'i':
            if (!parse_int(optarg, 1, 86400 * 365, &v))
                return 1;
            o->idle_timeout_s = (int)v;
            break;
        default:
            return 1;
        }
    }
    if (o->addr == NULL)
        o->addr = "127.0.0.1";     /* not memcached's every interface: a proxy is opened on purpose */
    return o->seeds != NULL && optind == argc ? 0 : 1;
}

static void log_start(const struct proxy *px)
{
    char ep[LC_ADDR_TEXT_MAX];

    for (size_t i = 0; i < px->first_map->n && px->opt.verbose; i++) {
        lc_addr_format(&px->first_map->ep[i], ep, sizeof(ep));
        fprintf(stderr, "  %zu %s\n", i, ep);
    }
    if (px->opt.unix_path)
        fprintf(stderr, "cocytus-proxy: listening on Unix socket %s with %d worker thread(s)\n",
                px->opt.unix_path, px->nworkers);
    else
        fprintf(stderr, "cocytus-proxy: listening on %s (port %d) with %d worker thread(s)\n",
                px->opt.addr, px->opt.port, px->nworkers);
}

static int run(struct proxy *px)
{
    struct event *sigint = NULL, *sigterm = NULL;
    char err[256];
    int rc = 1;

    if (!listen_on(px))
        goto out;
    sigint = evsignal_new(px->base, SIGINT, on_signal, px->base);
    sigterm = evsignal_new(px->base, SIGTERM, on_signal, px->base);
    if (sigint == NULL || sigterm == NULL)
        goto out;
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    log_start(px);
    if (workers_start(px))
        event_base_dispatch(px->base);
    workers_stop(px);
    rc = 0;
out:
    /* Also after a failed start: a --unix-socket made before it is removed. */
    if (sigint)
        event_free(sigint);
    if (sigterm)
        event_free(sigterm);
    for (int i = 0; i < px->nlisteners; i++)
        evconnlistener_free(px->listeners[i].l);
    if (px->accept_resume)
        event_free(px->accept_resume);
    if (px->opt.unix_path &&
        unixsock_close(&px->unix_listener, px->opt.unix_path, err, sizeof(err)) < 0)
        fprintf(stderr, "cocytus-proxy: %s\n", err);
    return rc;
}

static int setup_and_run(struct proxy *px)
{
    char err[256];

    px->nseeds = lc_seeds_parse(px->opt.seeds, &px->seeds, err, sizeof(err));
    if (px->nseeds == 0) {
        fprintf(stderr, "cocytus-proxy: --seeds: %s\n", err);
        return 1;
    }
    if (!px_auth_setup(px, px->opt.auth_file, px->opt.server_auth_file))
        return 1;
    if ((px->opt.tls_cfg.key || px->opt.tls_cfg.ca_cert || px->opt.tls_cfg.min_version != 2) &&
        !px->opt.tls) {
        fprintf(stderr, "cocytus-proxy: --tls-key, --tls-ca and --tls-min-version need "
                        "--tls-cert\n");
        return 1;
    }
    if (px->opt.tls && px->opt.unix_path) {
        fprintf(stderr, "cocytus-proxy: --tls-cert is for TCP clients, not --unix-socket\n");
        return 1;
    }
    if (px->opt.tls) {
        px->tls = tls_server_new(&px->opt.tls_cfg, err, sizeof(err));
        if (px->tls == NULL) {
            fprintf(stderr, "cocytus-proxy: %s\n", err);
            return 1;
        }
    }
    if (px->opt.backend_tls_key && !px->opt.backend_tls_cert) {
        fprintf(stderr, "cocytus-proxy: --backend-tls-key needs --backend-tls-cert\n");
        return 1;
    }
    if (px->opt.backend_tls) {
        px->dialer = tls_dialer_new(px->opt.backend_tls_ca, px->opt.backend_tls_cert,
                                    px->opt.backend_tls_key, TLS_KEYFORMAT_PEM, err,
                                    sizeof(err));
        if (px->dialer == NULL) {
            fprintf(stderr, "cocytus-proxy: %s\n", err);
            return 1;
        }
    }
    px->first_map = first_map(px);
    if (px->first_map == NULL)
        return 1;
    px->workers = calloc((size_t)px->opt.threads, sizeof(*px->workers));
    if (px->workers == NULL)
        return 1;
    for (int i = 0; i < px->opt.threads; i++) {
        px->nworkers = i + 1;
        if (!worker_init(px, i))
            return 1;
    }
    px->base = event_base_new();
    return px->base ? run(px) : 1;
}

int main(int argc, char **argv)
{
    struct proxy px;
    int rc;

    memset(&px, 0, sizeof(px));
    px.opt.port = DEFAULT_PORT;
    px.opt.item_max = DEFAULT_ITEM_MAX;
    px.opt.timeout_ms = 1000;
    px.opt.deadline_ms = 2000;
    px.opt.max_attempts = 100;
    px.opt.wait_s = DEFAULT_CONNECT_WAIT_S;
    px.opt.threads = DEFAULT_THREADS;
    px.opt.unix_mask = 0700;
    tls_config_defaults(&px.opt.tls_cfg);
    px.unix_listener.fd = px.unix_listener.lock_fd = -1;
    rc = parse_args(argc, argv, &px.opt);
    if (rc != 0) {
        if (rc == 1)
            usage(stderr);
        return rc == 2 ? 0 : 1;
    }
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&px.stats_lock, NULL);
    px.started = px_now_ms();
    rc = setup_and_run(&px);
    if (px.base)
        event_base_free(px.base);
    for (int i = 0; i < px.nworkers; i++)
        worker_free(&px.workers[i]);
    free(px.workers);
    free(px.seeds);
    lc_map_free(px.first_map);
    authfile_free(&px.auth);
    tls_server_free(px.tls);
    tls_dialer_free(px.dialer);
    for (size_t i = 0; i < px.nbstats; i++)
        free(px.bstats[i]);
    pthread_mutex_destroy(&px.stats_lock);
    return rc;
}
