/* migrate_tls.c - a slot move's import connection over TLS (migrate_tls.h).
 *
 * The destination's client port speaks TLS when the cluster file has a
 * client_tls line (or the processes run with -Z).  The copy keeps its
 * bufferevent; libevent's OpenSSL flavour of it does the handshake and
 * the records, with an SSL object from the process's dialler (tls.h),
 * which checks the destination's certificate against the CA and the
 * host of the slot map. */
#include "config.h"

#include <stdio.h>

#include "migrate_tls.h"
#include "tls.h"

#ifdef HAVE_OPENSSL

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

struct bufferevent *migrate_tls_dial(struct tls_dialer *d, struct event_base *base,
                                     const char *host, int options)
{
    SSL *ssl = tls_dialer_ssl(d, host);
    if (ssl == NULL)
        return NULL;
    /* libevent reads on only while SSL_pending says so, which does not
     * count records read ahead and not yet decrypted: a reply that came
     * behind another in one segment would wait for more input forever. */
    SSL_set_read_ahead(ssl, 0);
    struct bufferevent *bev = bufferevent_openssl_socket_new(base, -1, ssl,
                                                             BUFFEREVENT_SSL_CONNECTING,
                                                             options | BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    /* A destination that closes without TLS's close notice is closed, as
     * it would be without TLS: the copy decides what an early end means. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void migrate_tls_error(struct bufferevent *bev, char *out, size_t outlen)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    unsigned long e = bufferevent_get_openssl_error(bev);
    long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK) {
        snprintf(out, outlen, "TLS: peer certificate refused: %s",
                 X509_verify_cert_error_string(v));
    } else if (e != 0) {
        char why[256];
        ERR_error_string_n(e, why, sizeof(why));
        snprintf(out, outlen, "TLS: %s", why);
    } else if (outlen > 0) {
        out[0] = '\0';
    }
    while (bufferevent_get_openssl_error(bev) != 0)
        ;
}

#else /* !HAVE_OPENSSL */

struct bufferevent *migrate_tls_dial(struct tls_dialer *d, struct event_base *base,
                                     const char *host, int options)
{
    (void)d;
    (void)base;
    (void)host;
    (void)options;
    return NULL;
}

void migrate_tls_error(struct bufferevent *bev, char *out, size_t outlen)
{
    (void)bev;
    if (outlen > 0)
        out[0] = '\0';
}

#endif
