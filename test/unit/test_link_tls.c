/*
 * Unit tests for TLS on links (repl/linktls.c, and its use in repl/link.c):
 * an acceptor and a connector in one process, on one event loop, over
 * 127.0.0.1 TCP.  Certificates are made at the start with the openssl tool
 * (a CA; a certificate for 127.0.0.1 and one for 127.0.0.2 that it signed;
 * a self-signed one it did not).
 *
 * A relay in the same loop sits between the two ends in the first case and
 * keeps every byte that went through it, so the test sees what the wire
 * carried: TLS records, and none of the frames' bytes.  The other cases
 * check refusals: a certificate from another CA, one naming another
 * address, a TLS end against a plain one (either way round), and that a
 * link to a peer on this host over its Unix twin goes without TLS.
 */
#include "config.h"

#include "repl/frame.h"
#include "repl/link.h"
#include "repl/linktls.h"
#include "repl/localtwin.h"
#include "unit_loop.h"

#include <arpa/inet.h>
#include <check.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

#define CLUSTER "tlscluster"
#define GROUP 3
#define SECRET "tls-s3cret"
#define FRAMES 2000
#define BIG_FRAME (3u << 20)

static char certdir[256];

static void cert_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", certdir, name);
}

/* A context from certdir's files: cert/key named by stem, CA file ca. */
static struct linktls_ctx *ctx_for(const char *stem, const char *ca)
{
    char cert[512], key[512], cafile[512], err[512];
    snprintf(cert, sizeof(cert), "%s/%s.pem", certdir, stem);
    snprintf(key, sizeof(key), "%s/%s.key", certdir, stem);
    cert_path(cafile, sizeof(cafile), ca);
    struct linktls_ctx *c = linktls_ctx_new(cert, key, cafile, err, sizeof(err));
    ck_assert_msg(c != NULL, "%s", err);
    return c;
}

static bool make_certs(void)
{
    snprintf(certdir, sizeof(certdir), "/tmp/test_link_tls.XXXXXX");
    if (mkdtemp(certdir) == NULL)
        return false;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "cd %s && {"
             " key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out $1; };"
             " key ca.key && openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=link-ca &&"
             " printf 'subjectAltName=IP:127.0.0.1\\n' >node.ext &&"
             " printf 'subjectAltName=IP:127.0.0.2\\n' >other.ext &&"
             " printf 'subjectAltName=DNS:localhost\\n' >named.ext &&"
             " for n in node other named; do"
             "  key $n.key && openssl req -new -key $n.key -out $n.csr -subj /CN=$n &&"
             "  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out $n.pem"
             "   -days 2 -extfile $n.ext || exit 1;"
             " done &&"
             " key rogue.key && openssl req -x509 -new -key rogue.key -out rogue.pem -days 2"
             "  -subj /CN=rogue -addext subjectAltName=IP:127.0.0.1 &&"
             " cp rogue.pem rogue-ca.pem;"
             "} >openssl.log 2>&1",
             certdir);
    return system(cmd) == 0;
}

static void remove_certs(void)
{
    char cmd[512];
    if (certdir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", certdir);
        (void)!system(cmd);
    }
}

/* ---- the two ends ---- */

struct side {
    struct link *link;
    int ups, downs, frames, big;
    bool peer_closed_at_down;   /* link_peer_closed() in on_down */
    bool leave_errors;          /* on_frame leaves an error in OpenSSL's queue */
    uint32_t next;
    char bad[256];
};

static void side_up(struct link *l, uint64_t xid, void *ctx)
{
    struct side *s = ctx;
    s->link = l;
    s->ups++;
}

/* Frame i carries i and then bytes that the relay looks for. */
static void frame_fill(uint8_t *p, uint32_t i, uint32_t len)
{
    memcpy(p, &i, 4);
    for (uint32_t j = 4; j < len; j++)
        p[j] = "PLAINTEXT-MARKER"[j % 16];
}

static void side_frame(struct link *l, uint16_t type, const uint8_t *p, uint32_t len, void *ctx)
{
    struct side *s = ctx;
#ifdef HAVE_OPENSSL
    if (s->leave_errors)
        ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);   /* as a careless library might */
#endif
    if (s->bad[0] != '\0' || type != FT_RECORD)
        return;
    if (len == BIG_FRAME) {
        for (uint32_t j = 4; j < len; j++)
            if (p[j] != (uint8_t)"PLAINTEXT-MARKER"[j % 16]) {
                snprintf(s->bad, sizeof(s->bad), "big frame: byte %u differs", j);
                return;
            }
        s->big++;
        return;
    }
    uint32_t i;
    memcpy(&i, p, 4);
    if (i != s->next || len != 100 + i % 300)
        snprintf(s->bad, sizeof(s->bad), "frame %u: got %u, %u bytes", s->next, i, len);
    s->next++;
    s->frames++;
}

static void side_down(struct link *l, const char *why, void *ctx)
{
    struct side *s = ctx;
    s->downs++;
    s->peer_closed_at_down = link_peer_closed(l);
    s->link = NULL;
}

static const struct link_callbacks callbacks = { .on_up = side_up, .on_frame = side_frame,
                                                 .on_down = side_down };

static void send_frames(struct link *l)
{
    uint8_t buf[400];
    for (uint32_t i = 0; i < FRAMES; i++) {
        uint32_t len = 100 + i % 300;
        frame_fill(buf, i, len);
        ck_assert_int_eq(link_send(l, FT_RECORD, buf, len), 0);
    }
    uint8_t *big = malloc(BIG_FRAME);
    ck_assert_ptr_nonnull(big);
    frame_fill(big, 0, BIG_FRAME);
    ck_assert_int_eq(link_send(l, FT_RECORD, big, BIG_FRAME), 0);
    free(big);
}

struct fixture {
    struct event_base *base;
    struct link_listener *ll;
    int port;
    int accepts;
    struct side acc, con;
    struct link *conn;
};

static bool accept_cb(void *owner, const struct link_identity *peer, struct link *l,
                      struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                      const char **reason)
{
    struct fixture *f = owner;
    f->accepts++;
    *cb = callbacks;
    *ctx = &f->acc;
    *welcome_xid = 1;
    f->acc.link = l;
    return true;
}

static void fixture_listen(struct fixture *f, struct linktls_ctx *tls)
{
    memset(f, 0, sizeof(*f));
    f->base = event_base_new();
    ck_assert_ptr_nonnull(f->base);
    f->ll = link_listen(f->base, "127.0.0.1", 0, CLUSTER, GROUP, SECRET, accept_cb, f);
    ck_assert_ptr_nonnull(f->ll);
    link_listener_set_tls(f->ll, tls);
    f->port = link_listener_port(f->ll);
}

static void fixture_connect_to(struct fixture *f, const char *host, int port,
                               struct linktls_ctx *tls)
{
    struct link_identity me;
    memset(&me, 0, sizeof(me));
    snprintf(me.cluster, sizeof(me.cluster), "%s", CLUSTER);
    me.group = GROUP;
    me.role = LINK_ROLE_DATA;
    f->conn = link_connect(f->base, host, port, &me, SECRET, &callbacks, &f->con);
    ck_assert_ptr_nonnull(f->conn);
    link_set_tls(f->conn, tls);
}

static void fixture_connect(struct fixture *f, int port, struct linktls_ctx *tls)
{
    fixture_connect_to(f, "127.0.0.1", port, tls);
}

static void fixture_destroy(struct fixture *f)
{
    if (f->conn != NULL)
        link_close(f->conn);
    if (f->acc.link != NULL)
        link_close(f->acc.link);
    link_listener_free(f->ll);
    struct timeval tv = { 0, 5000 };
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
    event_base_free(f->base);
}

static bool both_up(void *arg)
{
    struct fixture *f = arg;
    return f->acc.ups > 0 && f->con.ups > 0;
}

static bool all_in(void *arg)
{
    struct fixture *f = arg;
    return (f->acc.frames == FRAMES && f->con.frames == FRAMES && f->acc.big && f->con.big) ||
           f->acc.bad[0] != '\0' || f->con.bad[0] != '\0';
}

/* ---- the relay: one connection through, every byte kept ---- */

struct relay {
    struct event_base *base;
    struct evconnlistener *evl;
    int port, to_port;
    struct bufferevent *a, *b;  /* a: from the connector; b: to the listener */
    struct evbuffer *seen;      /* both directions, as they passed */
};

static void relay_read(struct bufferevent *from, void *arg)
{
    struct relay *r = arg;
    struct bufferevent *to = from == r->a ? r->b : r->a;
    struct evbuffer *in = bufferevent_get_input(from);
    size_t n = evbuffer_get_length(in);
    if (evbuffer_get_length(r->seen) < (8u << 20)) {
        uint8_t *copy = malloc(n);
        ck_assert_ptr_nonnull(copy);
        evbuffer_copyout(in, copy, n);
        evbuffer_add(r->seen, copy, n);
        free(copy);
    }
    bufferevent_write_buffer(to, in);
}

static void relay_accept(struct evconnlistener *evl, evutil_socket_t fd, struct sockaddr *sa,
                         int salen, void *arg)
{
    struct relay *r = arg;
    ck_assert_ptr_null(r->a);
    r->a = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE);
    r->b = bufferevent_socket_new(r->base, -1, BEV_OPT_CLOSE_ON_FREE);
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)r->to_port) };
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bufferevent_socket_connect(r->b, (struct sockaddr *)&to, sizeof(to)), 0);
    bufferevent_setcb(r->a, relay_read, NULL, NULL, r);
    bufferevent_setcb(r->b, relay_read, NULL, NULL, r);
    bufferevent_enable(r->a, EV_READ | EV_WRITE);
    bufferevent_enable(r->b, EV_READ | EV_WRITE);
}

static void relay_start(struct relay *r, struct event_base *base, int to_port)
{
    memset(r, 0, sizeof(*r));
    r->base = base;
    r->to_port = to_port;
    r->seen = evbuffer_new();
    struct sockaddr_in at = { .sin_family = AF_INET };
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->evl = evconnlistener_new_bind(base, relay_accept, r, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                     8, (struct sockaddr *)&at, sizeof(at));
    ck_assert_ptr_nonnull(r->evl);
    struct sockaddr_in got;
    socklen_t len = sizeof(got);
    getsockname(evconnlistener_get_fd(r->evl), (struct sockaddr *)&got, &len);
    r->port = ntohs(got.sin_port);
}

static void relay_stop(struct relay *r)
{
    if (r->a != NULL)
        bufferevent_free(r->a);
    if (r->b != NULL)
        bufferevent_free(r->b);
    evconnlistener_free(r->evl);
    evbuffer_free(r->seen);
}

/* ---- cases ---- */

/* Frames both ways, small and one of 3 MB, arrive whole; the wire carried
 * TLS records only, not one copy of the frames' text, nor the secret's
 * handshake in the clear. */
START_TEST(test_tls_frames_and_wire)
{
    struct linktls_ctx *tls = ctx_for("node", "ca.pem");
    struct fixture f;
    struct relay r;
    fixture_listen(&f, tls);
    relay_start(&r, f.base, f.port);
    fixture_connect(&f, r.port, tls);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    ck_assert(link_is_tls(f.conn));
    ck_assert(link_is_tls(f.acc.link));
    send_frames(f.conn);
    send_frames(f.acc.link);
    ck_assert(run_until(f.base, all_in, &f, 20000));
    ck_assert_msg(f.acc.bad[0] == '\0', "acceptor: %s", f.acc.bad);
    ck_assert_msg(f.con.bad[0] == '\0', "connector: %s", f.con.bad);
    ck_assert_int_eq(f.acc.downs + f.con.downs, 0);
    ck_assert_uint_eq(link_output_pending(f.conn), 0);

    size_t n = evbuffer_get_length(r.seen);
    ck_assert_uint_gt(n, 2u * FRAMES * 100);
    const uint8_t *wire = evbuffer_pullup(r.seen, -1);
    ck_assert_uint_eq(wire[0], 0x16);      /* a TLS handshake record first */
    ck_assert_uint_eq(wire[1], 0x03);
    ck_assert_ptr_null(memmem(wire, n, "PLAINTEXT-MARKER", 16));
    ck_assert_ptr_null(memmem(wire, n, CLUSTER, strlen(CLUSTER)));
    relay_stop(&r);
    fixture_destroy(&f);
    linktls_ctx_free(tls);
}
END_TEST

static bool con_failed(void *arg)
{
    struct fixture *f = arg;
    return link_last_error(f->conn)[0] != '\0';
}

/* Connector and acceptor with these contexts never come up; the
 * connector's error names want (and the acceptor never sees a HELLO). */
static void check_refused(struct linktls_ctx *acc, struct linktls_ctx *con, const char *want)
{
    struct fixture f;
    fixture_listen(&f, acc);
    fixture_connect(&f, f.port, con);
    ck_assert(run_until(f.base, con_failed, &f, 5000));
    run_until(f.base, both_up, &f, 300);
    ck_assert_int_eq(f.con.ups, 0);
    ck_assert_int_eq(f.acc.ups, 0);
    ck_assert_int_eq(f.accepts, 0);
    ck_assert_msg(strstr(link_last_error(f.conn), want) != NULL, "error \"%s\", wanted \"%s\"",
                  link_last_error(f.conn), want);
    fixture_destroy(&f);
}

/* The acceptor's certificate is not from the connector's CA. */
START_TEST(test_tls_unknown_ca)
{
    struct linktls_ctx *rogue = ctx_for("rogue", "rogue-ca.pem");
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    check_refused(rogue, node, "certificate");
    linktls_ctx_free(rogue);
    linktls_ctx_free(node);
}
END_TEST

/* The connector's certificate is not from the acceptor's CA: the acceptor
 * refuses it, and its alert tells the connector why. */
START_TEST(test_tls_unknown_client)
{
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    struct linktls_ctx *rogue = ctx_for("rogue", "ca.pem");     /* trusts the CA, is not from it */
    check_refused(node, rogue, "TLS");
    linktls_ctx_free(rogue);
    linktls_ctx_free(node);
}
END_TEST

/* The acceptor's certificate is the CA's, but for 127.0.0.2. */
START_TEST(test_tls_wrong_address)
{
    struct linktls_ctx *other = ctx_for("other", "ca.pem");
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    check_refused(other, node, "certificate");
    linktls_ctx_free(other);
    linktls_ctx_free(node);
}
END_TEST

/* A connector that dials a name checks it against the certificate's DNS
 * names: "localhost" goes through with a certificate for DNS:localhost,
 * not with one that names only 127.0.0.1. */
START_TEST(test_tls_dns_name)
{
    struct linktls_ctx *named = ctx_for("named", "ca.pem");
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    struct fixture f;
    fixture_listen(&f, named);
    fixture_connect_to(&f, "localhost", f.port, node);
    ck_assert(run_until(f.base, both_up, &f, 8000));
    ck_assert(link_is_tls(f.conn));
    fixture_destroy(&f);

    fixture_listen(&f, node);
    fixture_connect_to(&f, "localhost", f.port, named);
    ck_assert(run_until(f.base, con_failed, &f, 8000));
    run_until(f.base, both_up, &f, 300);
    ck_assert_int_eq(f.con.ups + f.acc.ups, 0);
    ck_assert_msg(strstr(link_last_error(f.conn), "hostname mismatch") != NULL, "%s",
                  link_last_error(f.conn));
    fixture_destroy(&f);
    linktls_ctx_free(named);
    linktls_ctx_free(node);
}
END_TEST

/* A TLS connector against a plain acceptor, and a plain connector
 * against a TLS acceptor: neither comes up. */
START_TEST(test_tls_against_plain)
{
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    check_refused(NULL, node, "speaks no TLS");
    struct fixture f;
    fixture_listen(&f, node);
    fixture_connect(&f, f.port, NULL);
    run_until(f.base, both_up, &f, 1500);
    ck_assert_int_eq(f.con.ups + f.acc.ups + f.accepts, 0);
    fixture_destroy(&f);
    linktls_ctx_free(node);
}
END_TEST

/* A peer on this host over the listener's Unix twin: no TLS, frames flow. */
START_TEST(test_tls_not_over_twin)
{
    unsetenv(LOCALTWIN_ENV_TCP_ONLY);
    struct linktls_ctx *node = ctx_for("node", "ca.pem");
    struct fixture f;
    fixture_listen(&f, node);
    fixture_connect(&f, f.port, node);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    ck_assert(!link_is_tls(f.conn));
    send_frames(f.conn);
    fixture_destroy(&f);
    linktls_ctx_free(node);
    setenv(LOCALTWIN_ENV_TCP_ONLY, "1", 1);
}
END_TEST

/* A reloaded context serves the connections made after it: the acceptor
 * reloads a certificate its CA did not sign and is refused, a key that
 * does not load leaves that context as it was, and its own files again let
 * the connector in. */
START_TEST(test_tls_reload)
{
    char cert[512], key[512], ca[512], err[1024];
    struct linktls_ctx *acc = ctx_for("node", "ca.pem");
    struct linktls_ctx *con = ctx_for("node", "ca.pem");
    cert_path(cert, sizeof(cert), "rogue.pem");
    cert_path(key, sizeof(key), "rogue.key");
    cert_path(ca, sizeof(ca), "ca.pem");
    ck_assert_int_eq(linktls_ctx_reload(acc, cert, key, ca, err, sizeof(err)), 0);
    check_refused(acc, con, "certificate");
    ck_assert_int_eq(linktls_ctx_reload(acc, cert, "/nonexistent.key", ca, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "/nonexistent.key") != NULL, "%s", err);
    check_refused(acc, con, "certificate");        /* still the rogue one */
    cert_path(cert, sizeof(cert), "node.pem");
    cert_path(key, sizeof(key), "node.key");
    ck_assert_int_eq(linktls_ctx_reload(acc, cert, key, ca, err, sizeof(err)), 0);
    struct fixture f;
    fixture_listen(&f, acc);
    fixture_connect(&f, f.port, con);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    ck_assert(link_is_tls(f.conn));
    fixture_destroy(&f);
    linktls_ctx_free(acc);
    linktls_ctx_free(con);
}
END_TEST

/* An error another library left in OpenSSL's queue on this thread (here:
 * every frame callback leaves one) must not read as a TLS failure: frames
 * go on flowing both ways. */
START_TEST(test_tls_stale_error_queue)
{
    struct linktls_ctx *tls = ctx_for("node", "ca.pem");
    struct fixture f;
    fixture_listen(&f, tls);
    fixture_connect(&f, f.port, tls);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    f.acc.leave_errors = f.con.leave_errors = true;
    ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
    send_frames(f.conn);
    send_frames(f.acc.link);
    ck_assert(run_until(f.base, all_in, &f, 20000));
    ck_assert_msg(f.acc.bad[0] == '\0' && f.con.bad[0] == '\0', "%s%s", f.acc.bad, f.con.bad);
    ck_assert_int_eq(f.acc.downs + f.con.downs, 0);
    fixture_destroy(&f);
    linktls_ctx_free(tls);
}
END_TEST

static bool acc_down(void *arg)
{
    struct fixture *f = arg;
    return f->acc.downs > 0;
}

/* A close that TLS vouches for (the peer's close notice) counts as the
 * peer's close; an end without one (a FIN anyone on the path could
 * forge; here the relay's) does not, so a lease granted is waited out. */
START_TEST(test_tls_close_notice)
{
    struct linktls_ctx *tls = ctx_for("node", "ca.pem");
    struct fixture f;
    fixture_listen(&f, tls);
    fixture_connect(&f, f.port, tls);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    link_close(f.conn);
    f.conn = NULL;
    ck_assert(run_until(f.base, acc_down, &f, 5000));
    ck_assert(f.acc.peer_closed_at_down);
    fixture_destroy(&f);

    struct relay r;
    fixture_listen(&f, tls);
    relay_start(&r, f.base, f.port);
    fixture_connect(&f, r.port, tls);
    ck_assert(run_until(f.base, both_up, &f, 5000));
    bufferevent_free(r.b);      /* the acceptor's side of the relay ends: a bare FIN */
    r.b = NULL;
    ck_assert(run_until(f.base, acc_down, &f, 5000));
    ck_assert(!f.acc.peer_closed_at_down);
    relay_stop(&r);
    fixture_destroy(&f);
    linktls_ctx_free(tls);
}
END_TEST

/* Files that do not load are refused with their names. */
START_TEST(test_tls_bad_files)
{
    char err[512], cert[512], key[512], ca[512];
    cert_path(cert, sizeof(cert), "node.pem");
    cert_path(key, sizeof(key), "other.key");
    cert_path(ca, sizeof(ca), "ca.pem");
    ck_assert_ptr_null(linktls_ctx_new(cert, key, ca, err, sizeof(err)));
    ck_assert_msg(strstr(err, "other.key") != NULL && strstr(err, "mismatch") != NULL, "%s", err);
    ck_assert_ptr_null(linktls_ctx_new("/nonexistent.pem", key, ca, err, sizeof(err)));
    ck_assert_msg(strstr(err, "/nonexistent.pem") != NULL, "%s", err);
    cert_path(key, sizeof(key), "node.key");
    ck_assert_ptr_null(linktls_ctx_new(cert, key, "/nonexistent-ca.pem", err, sizeof(err)));
    ck_assert_msg(strstr(err, "/nonexistent-ca.pem") != NULL, "%s", err);
}
END_TEST

int main(void)
{
#ifndef HAVE_OPENSSL
    printf("test_link_tls: skipped (built without OpenSSL)\n");
    return 77;
#else
    if (!make_certs()) {
        printf("test_link_tls: skipped (the openssl tool could not make certificates)\n");
        remove_certs();
        return 77;
    }
    setenv(LOCALTWIN_ENV_TCP_ONLY, "1", 1);     /* TCP, where TLS runs, unless a case says */
    Suite *s = suite_create("link_tls");
    TCase *tc = tcase_create("link_tls");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_tls_frames_and_wire);
    tcase_add_test(tc, test_tls_unknown_ca);
    tcase_add_test(tc, test_tls_unknown_client);
    tcase_add_test(tc, test_tls_wrong_address);
    tcase_add_test(tc, test_tls_dns_name);
    tcase_add_test(tc, test_tls_against_plain);
    tcase_add_test(tc, test_tls_not_over_twin);
    tcase_add_test(tc, test_tls_bad_files);
    tcase_add_test(tc, test_tls_reload);
    tcase_add_test(tc, test_tls_stale_error_queue);
    tcase_add_test(tc, test_tls_close_notice);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_certs();
    return failed == 0 ? 0 : 1;
#endif
}
