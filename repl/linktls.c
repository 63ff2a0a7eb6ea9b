/* linktls.c - TLS for links, over OpenSSL memory BIOs (linktls.h).
 *
 * Each connection's SSL object reads from one memory BIO (the ciphertext
 * fed to it) and writes into another (the ciphertext to send), so OpenSSL
 * never touches the socket: the link reads and writes as it does without
 * TLS, and its batched writes (sendq.c) carry ciphertext instead of
 * frames.  An empty input BIO says "retry", not "end", so SSL_read reports
 * "wants more" until the socket gives more.  Sessions are not resumed and
 * no tickets are sent: links live long and redial rarely.
 *
 * OpenSSL reports through a per-thread queue of errors, and SSL_get_error
 * calls any call fatal while that queue holds something, even an error
 * left by another library on this thread: the queue is emptied before
 * every call whose outcome is asked. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linktls.h"

#define CLUSTER_FILE_WHAT 1200      /* "link TLS key <path> ..." */

#ifdef HAVE_OPENSSL

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct linktls_ctx {
    SSL_CTX *ctx;
};

struct linktls {
    SSL *ssl;
    BIO *in;    /* ciphertext from the socket (the SSL object reads it) */
    BIO *out;   /* ciphertext for the socket (the SSL object writes it) */
};

/* The first OpenSSL error queued (the cause; later ones say where it
 * surfaced), in words; the queue is emptied. */
static void openssl_reason(char *out, size_t outlen, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "no detail";
    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    snprintf(out, outlen, "%s: %s", what, buf);
}

/* An SSL_CTX from the files, or NULL with the reason in err. */
static SSL_CTX *make_ssl_ctx(const char *cert, const char *key, const char *ca, char *err,
                             size_t errlen)
{
    char what[CLUSTER_FILE_WHAT];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL) {
        openssl_reason(err, errlen, "cannot make a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        snprintf(what, sizeof(what), "link TLS certificate %s", cert);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        snprintf(what, sizeof(what), "link TLS key %s", key);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(what, sizeof(what), "link TLS key %s does not match the certificate", key);
        goto fail;
    }
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        snprintf(what, sizeof(what), "link TLS CA %s", ca);
        goto fail;
    }
    /* Both ends prove themselves: the acceptor asks for the connector's
     * certificate and refuses a connection without one. */
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return ctx;
fail:
    openssl_reason(err, errlen, what);
    SSL_CTX_free(ctx);
    return NULL;
}

struct linktls_ctx *linktls_ctx_new(const char *cert, const char *key, const char *ca,
                                    char *err, size_t errlen)
{
    struct linktls_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->ctx = make_ssl_ctx(cert, key, ca, err, errlen);
    if (c->ctx == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

/* Connections made before keep the context they started with (each SSL
 * object holds a reference to it), so the old one is only let go here. */
int linktls_ctx_reload(struct linktls_ctx *c, const char *cert, const char *key,
                       const char *ca, char *err, size_t errlen)
{
    SSL_CTX *fresh = make_ssl_ctx(cert, key, ca, err, errlen);
    if (fresh == NULL)
        return -1;
    SSL_CTX_free(c->ctx);
    c->ctx = fresh;
    return 0;
}

void linktls_ctx_free(struct linktls_ctx *c)
{
    if (c == NULL)
        return;
    SSL_CTX_free(c->ctx);
    free(c);
}

/* The connector checks the name it dialled against the certificate: an
 * address against its IP entries, a name against its DNS entries. */
bool linktls_expect_host(SSL *ssl, const char *host)
{
    unsigned char addr[16];
    if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    return SSL_set1_host(ssl, host) == 1 && SSL_set_tlsext_host_name(ssl, host) == 1;
}

struct linktls *linktls_new(struct linktls_ctx *c, bool connector, const char *host)
{
    struct linktls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(c->ctx);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->in == NULL || t->out == NULL) {
        BIO_free(t->in);
        BIO_free(t->out);
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return NULL;
    }
    BIO_set_mem_eof_return(t->in, -1);      /* empty: "retry", not the end */
    SSL_set_bio(t->ssl, t->in, t->out);     /* the SSL object owns (and frees) both now */
    if (connector) {
        SSL_set_connect_state(t->ssl);
        if (host != NULL && host[0] != '\0' && !linktls_expect_host(t->ssl, host)) {
            linktls_free(t);
            ERR_clear_error();
            return NULL;
        }
    } else {
        SSL_set_accept_state(t->ssl);
    }
    return t;
}

void linktls_free(struct linktls *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    free(t);
}

/* OpenSSL's lengths are ints: at most 1 GB per call. */
static int int_len(size_t n)
{
    return n > (1u << 30) ? 1 << 30 : (int)n;
}

int linktls_feed(struct linktls *t, const void *p, size_t n)
{
    while (n > 0) {
        int part = int_len(n);
        int w = BIO_write(t->in, p, part);
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* What failed, for the log: a certificate check names its reason. */
void linktls_describe_failure(SSL *ssl, char *why, size_t whylen)
{
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        ERR_clear_error();
        snprintf(why, whylen, "TLS: peer certificate refused: %s",
                 X509_verify_cert_error_string(v));
    } else {
        openssl_reason(why, whylen, "TLS");
    }
}

/* What an SSL_read, SSL_write or SSL_do_handshake that returned r
 * (called with the error queue empty) amounts to: r itself when it did
 * something, 0 when it waits for the peer, -2 for the peer's close notice
 * (zero_return_ends: a read), else -1 with the reason in why. */
static int outcome(struct linktls *t, int r, bool zero_return_ends, char *why, size_t whylen)
{
    if (r > 0)
        return r;
    int err = SSL_get_error(t->ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
        return 0;
    if (err == SSL_ERROR_ZERO_RETURN && zero_return_ends)
        return -2;
    linktls_describe_failure(t->ssl, why, whylen);
    return -1;
}

ssize_t linktls_read(struct linktls *t, void *out, size_t room, char *why, size_t whylen)
{
    if (room == 0)
        return 0;
    ERR_clear_error();
    return outcome(t, SSL_read(t->ssl, out, int_len(room)), true, why, whylen);
}

ssize_t linktls_write(struct linktls *t, const void *p, size_t n, char *why, size_t whylen)
{
    if (!SSL_is_init_finished(t->ssl)) {
        ERR_clear_error();
        int r = outcome(t, SSL_do_handshake(t->ssl), false, why, whylen);
        if (r <= 0)
            return r;
    }
    if (n == 0)
        return 0;
    ERR_clear_error();
    return outcome(t, SSL_write(t->ssl, p, int_len(n)), false, why, whylen);
}

size_t linktls_output(const struct linktls *t)
{
    return BIO_ctrl_pending(t->out);
}

size_t linktls_take_output(struct linktls *t, void *out, size_t room)
{
    size_t got = 0;
    while (got < room) {
        int r = BIO_read(t->out, (char *)out + got, int_len(room - got));
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

bool linktls_established(const struct linktls *t)
{
    return SSL_is_init_finished(t->ssl);
}

void linktls_close_notify(struct linktls *t)
{
    if (!SSL_is_init_finished(t->ssl))
        return;
    ERR_clear_error();
    (void)SSL_shutdown(t->ssl);     /* after a fatal error it declines: nothing to say */
    ERR_clear_error();
}

void linktls_describe(const struct linktls *t, char *out, size_t outlen)
{
    const SSL_CIPHER *cipher = SSL_get_current_cipher(t->ssl);
    snprintf(out, outlen, "%s %s", SSL_get_version(t->ssl),
             cipher != NULL ? SSL_CIPHER_get_name(cipher) : "(no cipher)");
}

#else /* !HAVE_OPENSSL */

struct linktls_ctx *linktls_ctx_new(const char *cert, const char *key, const char *ca,
                                    char *err, size_t errlen)
{
    (void)cert, (void)key, (void)ca;
    snprintf(err, errlen, "link TLS asked for, but this build has no OpenSSL "
             "(apt-get install libssl-dev, then configure again)");
    return NULL;
}

void linktls_ctx_free(struct linktls_ctx *ctx)
{
    (void)ctx;
}

int linktls_ctx_reload(struct linktls_ctx *c, const char *cert, const char *key,
                       const char *ca, char *err, size_t errlen)
{
    (void)c, (void)cert, (void)key, (void)ca;
    snprintf(err, errlen, "link TLS: not in this build");
    return -1;
}

struct linktls *linktls_new(struct linktls_ctx *ctx, bool connector, const char *host)
{
    (void)ctx, (void)connector, (void)host;
    return NULL;
}

void linktls_free(struct linktls *t)
{
    (void)t;
}

int linktls_feed(struct linktls *t, const void *p, size_t n)
{
    (void)t, (void)p, (void)n;
    return -1;
}

ssize_t linktls_read(struct linktls *t, void *out, size_t room, char *why, size_t whylen)
{
    (void)t, (void)out, (void)room;
    snprintf(why, whylen, "TLS: not in this build");
    return -1;
}

ssize_t linktls_write(struct linktls *t, const void *p, size_t n, char *why, size_t whylen)
{
    (void)t, (void)p, (void)n;
    snprintf(why, whylen, "TLS: not in this build");
    return -1;
}

size_t linktls_output(const struct linktls *t)
{
    (void)t;
    return 0;
}

size_t linktls_take_output(struct linktls *t, void *out, size_t room)
{
    (void)t, (void)out, (void)room;
    return 0;
}

bool linktls_established(const struct linktls *t)
{
    (void)t;
    return false;
}

void linktls_close_notify(struct linktls *t)
{
    (void)t;
}

void linktls_describe(const struct linktls *t, char *out, size_t outlen)
{
    (void)t;
    snprintf(out, outlen, "no TLS");
}

#endif
