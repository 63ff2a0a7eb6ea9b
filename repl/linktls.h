/* linktls.h - TLS for the links between a cluster's processes (link.c).
 *
 * A link keeps its own socket, buffers and batched writes; TLS sits
 * between them as a filter over two memory buffers: ciphertext the socket
 * gave goes in with linktls_feed() and comes out as plaintext frames from
 * linktls_read(); frames queued for the peer go in with linktls_write()
 * and leave as ciphertext from linktls_take_output().  So nothing about
 * how a link reads, writes or batches changes, and the handshake needs no
 * state of the link's own: it runs inside those calls.
 *
 * Both ends hold a certificate that the cluster's CA signed and check the
 * other's (mutual TLS, 1.3 only); the connector also checks that the
 * acceptor's certificate names the host it dialled.  The link's own
 * handshake (the cluster secret's proof) still runs inside the TLS
 * connection. */
#ifndef REPL_LINKTLS_H
#define REPL_LINKTLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct linktls_ctx;     /* one per process: certificate, key, CA */
struct linktls;         /* one per connection */

/* Loads the PEM files: cert (may hold the chain), its key, and the CA that
 * signed every process's certificate.  NULL with the reason in err (a file
 * that does not load, a key that does not match, a build without OpenSSL). */
struct linktls_ctx *linktls_ctx_new(const char *cert, const char *key, const char *ca,
                                    char *err, size_t errlen);
void linktls_ctx_free(struct linktls_ctx *ctx);
/* Reads the files again (a renewed certificate): connections made from
 * now on use them, those up keep theirs.  0, or -1 with the reason in err
 * and the context as it was. */
int linktls_ctx_reload(struct linktls_ctx *ctx, const char *cert, const char *key,
                       const char *ca, char *err, size_t errlen);

/* A connection's TLS.  connector: this end dialled host (a name or an
 * address), which the peer's certificate must name.  NULL when out of
 * memory. */
struct linktls *linktls_new(struct linktls_ctx *ctx, bool connector, const char *host);
void linktls_free(struct linktls *t);

/* Ciphertext the socket gave.  0, or -1 when out of memory. */
int linktls_feed(struct linktls *t, const void *p, size_t n);
/* Plaintext into out: the number of bytes (> 0), 0 when nothing more can
 * be read until more ciphertext comes, -1 on a TLS error (why says which:
 * a certificate the CA did not sign, a peer that does not speak TLS, ...),
 * -2 when the peer closed its side of the TLS connection (its close notice:
 * a close that TLS vouches for). */
ssize_t linktls_read(struct linktls *t, void *out, size_t room, char *why, size_t whylen);
/* Takes plaintext to send: the number of bytes of p taken (all of them
 * once the handshake is done), 0 while the handshake is under way (call
 * again after the next read), -1 on a TLS error (why).  n = 0 only moves
 * the handshake on (the connector's first message). */
ssize_t linktls_write(struct linktls *t, const void *p, size_t n, char *why, size_t whylen);
/* Ciphertext waiting for the socket, and taking it (up to room bytes). */
size_t linktls_output(const struct linktls *t);
size_t linktls_take_output(struct linktls *t, void *out, size_t room);
bool linktls_established(const struct linktls *t);
/* This end closes: TLS's close notice goes into the output (to be sent
 * before the socket is closed).  Only such a notice tells the peer that
 * the connection ended by our will: a FIN or a reset alone may come from
 * anyone on the path. */
void linktls_close_notify(struct linktls *t);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384" once established, for the log. */
void linktls_describe(const struct linktls *t, char *out, size_t outlen);

/* Shared with the client ports' TLS (memcached/tls.c), for an OpenSSL
 * connection (SSL *) of this build: make the handshake check that the
 * peer's certificate names host (an address against its IP entries, a
 * name against its DNS entries, and the name sent as SNI); false when out
 * of memory.  And, after a failed handshake or I/O, why, for the log: a
 * refused certificate names its reason. */
struct ssl_st;
bool linktls_expect_host(struct ssl_st *ssl, const char *host);
void linktls_describe_failure(struct ssl_st *ssl, char *why, size_t whylen);

#endif
