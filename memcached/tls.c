/* tls.c - TLS on a server's client port (tls.h), over OpenSSL, and on
 * the connections the cluster's own clients dial to those ports.
 *
 * One SSL_CTX holds the certificate, key and verification rules; every
 * accepted connection gets an SSL object on its socket, in accept state,
 * so the handshake happens inside its first reads without a state of our
 * own.  refresh_certs builds a whole new SSL_CTX from the files and swaps
 * it in only if every file loaded: a bad file never leaves the server
 * half-configured, and open connections keep the context they started
 * with (OpenSSL counts its references).  Sessions resume as memcached's
 * do: from tickets (the context's own keys, so a refresh ends the old
 * ones), and with ssl_session_cache also from a cache by session id.
 * Reads are read ahead: one recv() takes what the socket has (a request's
 * record whole, header and body, or several), so TLS may hold bytes the
 * socket no longer announces; tls_pending says so, and the callers read
 * on or re-arm their event.  cocytus-proxy's worker threads share one
 * tls_server: the context is swapped and taken under a mutex, the counts
 * are atomic.
 *
 * The dialling side (a tls_dialer: cocytus-proxy's backends, cocytus-cli,
 * a slot move's copy) uses the same connection object in connect state:
 * it checks the server's certificate against its CA file and that the
 * certificate names the host it dialled, and shows its own certificate
 * to a server that asks (ssl_verify_mode 2). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"

void tls_config_defaults(struct tls_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->keyformat = 1;
    cfg->min_version = 2;
    cfg->wbuf_size = 16384;
}

static const char *const version_names[] = { "tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3" };

int tls_min_version_parse(const char *name)
{
    for (int v = 0; v <= TLS_MIN_VERSION_MAX; v++)
        if (strcmp(name, version_names[v]) == 0)
            return v;
    return -1;
}

const char *tls_min_version_name(int v)
{
    return v >= 0 && v <= TLS_MIN_VERSION_MAX ? version_names[v] : "unknown";
}

#ifdef HAVE_OPENSSL

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "linktls.h"

struct tls_server {
    struct tls_config cfg;
    pthread_mutex_t lock;       /* ctx and last_refresh */
    SSL_CTX *ctx;
    uint64_t handshake_errors;  /* atomic */
    uint64_t new_sessions;      /* atomic */
    time_t last_refresh;
};

struct tls_dialer {
    SSL_CTX *ctx;
};

struct tls_conn {
    struct tls_server *srv;     /* NULL on the dialling side */
    SSL *ssl;
    bool read_waits_write;      /* the last read: EAGAIN until the socket takes bytes */
    bool write_waits_read;      /* the last write: EAGAIN until the peer sends bytes */
    bool starved;               /* the last read or handshake step wanted more from the
                                   socket, which it had drained: what TLS holds is no
                                   whole record (tls_pending 0 until a read succeeds) */
    bool failed;                /* a fatal error: no close_notify */
    char why[200];              /* what failed, for the log */
};

bool tls_built_in(void)
{
    return true;
}

/* The oldest error OpenSSL queued, after what we were doing. */
static void say_error(char *err, size_t errlen, const char *what, const char *file)
{
    unsigned long e = ERR_get_error();
    char why[256] = "unknown error";
    if (e != 0)
        ERR_error_string_n(e, why, sizeof(why));
    else if (errno != 0)
        snprintf(why, sizeof(why), "%s", strerror(errno));
    if (file)
        snprintf(err, errlen, "%s %s : %s", what, file, why);
    else
        snprintf(err, errlen, "%s: %s", what, why);
    ERR_clear_error();
}

static const int min_versions[] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION, TLS1_3_VERSION };

static int verify_flags(int mode)
{
    switch (mode) {
    case 1: return SSL_VERIFY_PEER;
    case 2: return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    case 3: return SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
    default: return SSL_VERIFY_NONE;
    }
}

/* OpenSSL made a session (the cache keeps its own reference). */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct tls_server *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    (void)sess;
    if (t != NULL)
        __atomic_fetch_add(&t->new_sessions, 1, __ATOMIC_RELAXED);
    return 0;
}

/* This end's certificate chain and its key (NULL: in the chain's file,
 * keyformat as ssl_keyformat) into ctx; false with err set. */
static bool use_own_pair(SSL_CTX *ctx, const char *chain, const char *key, int keyformat,
                         char *err, size_t errlen)
{
    const char *k = key ? key : chain;
    if (SSL_CTX_use_certificate_chain_file(ctx, chain) != 1) {
        say_error(err, errlen, "Error loading the certificate chain:", chain);
        return false;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, k, keyformat) != 1) {
        say_error(err, errlen, "Error loading the private key:", k);
        return false;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        say_error(err, errlen, "Error: the private key does not match the certificate:", k);
        return false;
    }
    return true;
}

/* A context for t from the files cfg names, or NULL with err set. */
static SSL_CTX *context_from(struct tls_server *t, const struct tls_config *cfg, char *err,
                             size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        say_error(err, errlen, "cannot create a TLS context", NULL);
        return NULL;
    }
    if (!use_own_pair(ctx, cfg->chain_cert, cfg->key, cfg->keyformat, err, errlen))
        goto fail;
    if (cfg->ca_cert) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->ca_cert, NULL) != 1) {
            say_error(err, errlen, "Error loading the CA certificate:", cfg->ca_cert);
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->ca_cert);
        if (names == NULL) {
            say_error(err, errlen, "Error reading CA names from", cfg->ca_cert);
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
    }
    if (cfg->ciphers && SSL_CTX_set_cipher_list(ctx, cfg->ciphers) != 1) {
        say_error(err, errlen, "Error setting the cipher list", cfg->ciphers);
        goto fail;
    }
    SSL_CTX_set_min_proto_version(ctx, min_versions[cfg->min_version]);
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_verify(ctx, verify_flags(cfg->verify_mode), NULL);
    /* A write that waited is retried from a copy of its bytes (another
     * address); an idle connection gives its buffers back. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    /* Resumption by ticket always, as memcached -Z; by session id from a
     * server-side cache with ssl_session_cache.  The context id is needed
     * for either when client certificates are verified: without it
     * OpenSSL refuses a client that offers a session. */
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"cocytus", 7);
    SSL_CTX_set_app_data(ctx, t);
    if (cfg->session_cache) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    long opts = SSL_OP_NO_RENEGOTIATION;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A client that hangs up without a close_notify is just gone, as a
     * memcached client that closes its socket is. */
    opts |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
    SSL_CTX_set_options(ctx, opts);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

struct tls_server *tls_server_new(const struct tls_config *cfg, char *err, size_t errlen)
{
    if (cfg->chain_cert == NULL) {
        snprintf(err, errlen, "TLS (-Z) needs a certificate: -o ssl_chain_cert=FILE");
        return NULL;
    }
    struct tls_server *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    t->ctx = context_from(t, cfg, err, errlen);
    if (t->ctx == NULL) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->last_refresh = time(NULL);
    return t;
}

void tls_server_free(struct tls_server *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

bool tls_server_refresh(struct tls_server *t, char *err, size_t errlen)
{
    SSL_CTX *ctx = context_from(t, &t->cfg, err, errlen);
    if (ctx == NULL)
        return false;
    pthread_mutex_lock(&t->lock);
    SSL_CTX *old = t->ctx;
    t->ctx = ctx;
    t->last_refresh = time(NULL);
    pthread_mutex_unlock(&t->lock);
    SSL_CTX_free(old);          /* open connections hold references of their own */
    return true;
}

uint64_t tls_server_handshake_errors(const struct tls_server *t)
{
    return __atomic_load_n(&t->handshake_errors, __ATOMIC_RELAXED);
}

uint64_t tls_server_new_sessions(const struct tls_server *t)
{
    return __atomic_load_n(&t->new_sessions, __ATOMIC_RELAXED);
}

time_t tls_server_last_refresh(const struct tls_server *t)
{
    pthread_mutex_lock((pthread_mutex_t *)&t->lock);
    time_t when = t->last_refresh;
    pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
    return when;
}

struct tls_conn *tls_conn_new(struct tls_server *t, int fd)
{
    struct tls_conn *tc = calloc(1, sizeof(*tc));
    if (tc == NULL)
        return NULL;
    tc->srv = t;
    pthread_mutex_lock(&t->lock);
    tc->ssl = SSL_new(t->ctx);
    pthread_mutex_unlock(&t->lock);
    if (tc->ssl == NULL || SSL_set_fd(tc->ssl, fd) != 1) {
        ERR_clear_error();
        SSL_free(tc->ssl);
        free(tc);
        return NULL;
    }
    SSL_set_accept_state(tc->ssl);
    return tc;
}

void tls_conn_free(struct tls_conn *tc)
{
    if (tc == NULL)
        return;
    /* Only after a finished handshake and no fatal error, and without
     * waiting for the peer's. */
    if (!tc->failed && SSL_is_init_finished(tc->ssl))
        SSL_shutdown(tc->ssl);
    ERR_clear_error();
    SSL_free(tc->ssl);
    free(tc);
}

/* What an SSL_read or SSL_write that returned rc <= 0 means, as read()
 * would say it: -1 with errno (EAGAIN to wait), or 0 for the end.  A wait
 * on the other direction than the call's own is recorded in *waits. */
static ssize_t outcome(struct tls_conn *tc, int rc, bool *waits, int other_way)
{
    int e = SSL_get_error(tc->ssl, rc);
    int saved = errno;
    *waits = e == other_way;
    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0 && saved == 0) {
            /* The peer closed without a word (OpenSSL before 3). */
            return 0;
        }
        /* fallthrough */
    default:
        tc->failed = true;
        if (!SSL_is_init_finished(tc->ssl) && tc->srv != NULL)
            __atomic_fetch_add(&tc->srv->handshake_errors, 1, __ATOMIC_RELAXED);
        if (ERR_peek_error() != 0 || SSL_get_verify_result(tc->ssl) != X509_V_OK)
            linktls_describe_failure(tc->ssl, tc->why, sizeof(tc->why));
        else
            snprintf(tc->why, sizeof(tc->why), "%s",
                     strerror(saved != 0 && saved != EAGAIN ? saved : ECONNRESET));
        ERR_clear_error();
        errno = saved != 0 && saved != EAGAIN ? saved : ECONNRESET;
        return -1;
    }
}

ssize_t tls_read(struct tls_conn *tc, void *buf, size_t n)
{
    if (n == 0)
        return 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_read(tc->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    if (rc > 0) {
        tc->read_waits_write = false;
        tc->starved = false;
        return rc;
    }
    ssize_t r = outcome(tc, rc, &tc->read_waits_write, SSL_ERROR_WANT_WRITE);
    if (r < 0 && errno == EAGAIN && !tc->read_waits_write)
        tc->starved = true;
    return r;
}

ssize_t tls_write(struct tls_conn *tc, const void *buf, size_t n)
{
    if (n == 0)
        return 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write(tc->ssl, buf, n > INT32_MAX ? INT32_MAX : (int)n);
    if (rc > 0) {
        tc->write_waits_read = false;
        return rc;
    }
    ssize_t r = outcome(tc, rc, &tc->write_waits_read, SSL_ERROR_WANT_READ);
    if (tc->write_waits_read)
        tc->starved = true;     /* it read what the socket had, as a read would */
    /* A write's end is the peer's reset as far as the writer goes. */
    if (r == 0) {
        errno = EPIPE;
        return -1;
    }
    return r;
}

bool tls_read_waits_write(const struct tls_conn *tc)
{
    return tc != NULL && tc->read_waits_write;
}

bool tls_write_waits_read(const struct tls_conn *tc)
{
    return tc != NULL && tc->write_waits_read;
}

size_t tls_pending(const struct tls_conn *tc)
{
    /* A part of a record is held too (SSL_has_pending says so), but a read
     * can do nothing with it until the socket brings the rest: claiming
     * it would make the caller read again at once, for ever, and never
     * return to its event loop. */
    /* And a read that waits for the socket to take bytes (a key update's
     * answer) is retried on the write event, not as input at once. */
    if (tc == NULL || tc->read_waits_write)
        return 0;
    /* decrypted bytes, or (read ahead) records not yet decrypted */
    int n = SSL_pending(tc->ssl);
    if (n > 0)
        return (size_t)n;
    return !tc->starved && SSL_has_pending(tc->ssl) ? 1 : 0;
}


/* ---- the dialling side ---- */

struct tls_dialer *tls_dialer_new(const char *ca, const char *cert, const char *key,
                                  int keyformat, char *err, size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    struct tls_dialer *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->ctx = SSL_CTX_new(TLS_client_method());
    if (d->ctx == NULL) {
        say_error(err, errlen, "cannot create a TLS context", NULL);
        goto fail;
    }
    if (ca != NULL ? SSL_CTX_load_verify_locations(d->ctx, ca, NULL) != 1
                   : SSL_CTX_set_default_verify_paths(d->ctx) != 1) {
        say_error(err, errlen, "Error loading the CA certificate:", ca ? ca : "(system default)");
        goto fail;
    }
    if (cert != NULL && !use_own_pair(d->ctx, cert, key, keyformat, err, errlen))
        goto fail;
    SSL_CTX_set_min_proto_version(d->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(d->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_read_ahead(d->ctx, 1);
    SSL_CTX_set_mode(d->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    long opts = SSL_OP_NO_RENEGOTIATION;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A server that is killed sends no close notice: its end reads as
     * the end of the connection, as it would without TLS. */
    opts |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
    SSL_CTX_set_options(d->ctx, opts);
    return d;
fail:
    tls_dialer_free(d);
    return NULL;
}

void tls_dialer_free(struct tls_dialer *d)
{
    if (d == NULL)
        return;
    SSL_CTX_free(d->ctx);
    free(d);
}

void *tls_dialer_ssl(struct tls_dialer *d, const char *host)
{
    ERR_clear_error();
    SSL *ssl = SSL_new(d->ctx);     /* a shared context: SSL_new is thread-safe */
    if (ssl == NULL || !linktls_expect_host(ssl, host)) {
        ERR_clear_error();
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_connect_state(ssl);
    return ssl;
}

struct tls_conn *tls_conn_dial(struct tls_dialer *d, int fd, const char *host)
{
    struct tls_conn *tc = calloc(1, sizeof(*tc));
    if (tc == NULL)
        return NULL;
    tc->ssl = tls_dialer_ssl(d, host);
    if (tc->ssl == NULL || SSL_set_fd(tc->ssl, fd) != 1) {
        ERR_clear_error();
        SSL_free(tc->ssl);
        free(tc);
        return NULL;
    }
    return tc;
}

enum tls_hs tls_handshake(struct tls_conn *tc)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(tc->ssl);
    if (rc == 1) {
        tc->read_waits_write = false;
        return TLS_HS_DONE;
    }
    bool waits_write = false;
    outcome(tc, rc, &waits_write, SSL_ERROR_WANT_WRITE);
    if (tc->failed)
        return TLS_HS_FAILED;
    if (errno == EAGAIN && !waits_write)
        tc->starved = true;
    if (errno != EAGAIN) {
        snprintf(tc->why, sizeof(tc->why), "the server closed the connection during the TLS handshake");
        tc->failed = true;
        return TLS_HS_FAILED;
    }
    return waits_write ? TLS_HS_WANTS_WRITE : TLS_HS_WANTS_READ;
}

const char *tls_conn_error(const struct tls_conn *tc)
{
    return tc != NULL && tc->why[0] != '\0' ? tc->why : "TLS: connection failed";
}

#else /* !HAVE_OPENSSL */

bool tls_built_in(void)
{
    return false;
}

struct tls_server *tls_server_new(const struct tls_config *cfg, char *err, size_t errlen)
{
    (void)cfg;
    snprintf(err, errlen, "this cocytus-server was built without TLS (configure found no "
             "OpenSSL: apt-get install libssl-dev)");
    return NULL;
}

void tls_server_free(struct tls_server *t)
{
    (void)t;
}

bool tls_server_refresh(struct tls_server *t, char *err, size_t errlen)
{
    (void)t;
    snprintf(err, errlen, "TLS not enabled");
    return false;
}

uint64_t tls_server_handshake_errors(const struct tls_server *t)
{
    (void)t;
    return 0;
}

uint64_t tls_server_new_sessions(const struct tls_server *t)
{
    (void)t;
    return 0;
}

time_t tls_server_last_refresh(const struct tls_server *t)
{
    (void)t;
    return 0;
}

struct tls_conn *tls_conn_new(struct tls_server *t, int fd)
{
    (void)t;
    (void)fd;
    return NULL;
}

void tls_conn_free(struct tls_conn *tc)
{
    (void)tc;
}

ssize_t tls_read(struct tls_conn *tc, void *buf, size_t n)
{
    (void)tc;
    (void)buf;
    (void)n;
    errno = ENOTSUP;
    return -1;
}

ssize_t tls_write(struct tls_conn *tc, const void *buf, size_t n)
{
    (void)tc;
    (void)buf;
    (void)n;
    errno = ENOTSUP;
    return -1;
}

bool tls_read_waits_write(const struct tls_conn *tc)
{
    (void)tc;
    return false;
}

bool tls_write_waits_read(const struct tls_conn *tc)
{
    (void)tc;
    return false;
}

size_t tls_pending(const struct tls_conn *tc)
{
    (void)tc;
    return 0;
}

struct tls_dialer *tls_dialer_new(const char *ca, const char *cert, const char *key,
                                  int keyformat, char *err, size_t errlen)
{
    (void)keyformat;
    (void)ca;
    (void)cert;
    (void)key;
    snprintf(err, errlen, "this program was built without TLS (configure found no "
             "OpenSSL: apt-get install libssl-dev)");
    return NULL;
}

void tls_dialer_free(struct tls_dialer *d)
{
    (void)d;
}

void *tls_dialer_ssl(struct tls_dialer *d, const char *host)
{
    (void)d;
    (void)host;
    return NULL;
}

struct tls_conn *tls_conn_dial(struct tls_dialer *d, int fd, const char *host)
{
    (void)d;
    (void)fd;
    (void)host;
    return NULL;
}

enum tls_hs tls_handshake(struct tls_conn *tc)
{
    (void)tc;
    return TLS_HS_FAILED;
}

const char *tls_conn_error(const struct tls_conn *tc)
{
    (void)tc;
    return "TLS not built in";
}

#endif
