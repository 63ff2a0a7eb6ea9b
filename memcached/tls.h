/* tls.h - TLS on a server's client port (memcached's -Z), over OpenSSL.
 *
 * A connection keeps its file descriptor and its buffers; what changes is
 * how bytes move: tls_read and tls_write take the place of read() and
 * writev() and answer as they do (a count, 0 at the end, -1 with errno,
 * EAGAIN while TLS waits for the socket).  The handshake runs inside the
 * first reads.  Built without OpenSSL, tls_server_new says so and nothing
 * else is reachable. */
#ifndef MC_TLS_H
#define MC_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* What -o ssl_* chose; the files are read at start and by refresh_certs. */
struct tls_config {
    const char *chain_cert;   /* ssl_chain_cert: the certificate chain, PEM */
    const char *key;          /* ssl_key: the private key (if not in the chain file) */
    const char *ca_cert;      /* ssl_ca_cert: CAs that sign accepted client certificates */
    const char *ciphers;      /* ssl_ciphers: OpenSSL's cipher list for TLS <= 1.2 */
    int verify_mode;          /* ssl_verify_mode: 0 none, 1 request, 2 require, 3 once */
    int keyformat;            /* ssl_keyformat: 1 PEM, 2 DER (OpenSSL's SSL_FILETYPE_*) */
    int min_version;          /* ssl_min_version: 0 tlsv1, 1 tlsv1.1, 2 tlsv1.2, 3 tlsv1.3 */
    size_t wbuf_size;         /* ssl_wbuf_size: bytes per TLS write (16 KB) */
    bool session_cache;       /* ssl_session_cache: resumption from a server-side cache too */
};

#define TLS_VERIFY_MAX 3
#define TLS_MIN_VERSION_MAX 3

struct tls_server;
struct tls_conn;

/* Whether this build has TLS at all. */
bool tls_built_in(void);

void tls_config_defaults(struct tls_config *cfg);
/* "tlsv1.2" -> 2; -1 for an unknown name.  And back. */
int tls_min_version_parse(const char *name);
const char *tls_min_version_name(int v);

/* Reads the certificate, key and CAs; NULL with a reason in err. */
struct tls_server *tls_server_new(const struct tls_config *cfg, char *err, size_t errlen);
void tls_server_free(struct tls_server *t);
/* Reads the files again (refresh_certs); new connections use them, open
 * ones keep theirs.  On failure the old ones stay, and err says why. */
bool tls_server_refresh(struct tls_server *t, char *err, size_t errlen);
uint64_t tls_server_handshake_errors(const struct tls_server *t);
/* Sessions made (each full handshake, and each ticket TLS 1.3 issues):
 * memcached's ssl_new_sessions, counted with ssl_session_cache only. */
uint64_t tls_server_new_sessions(const struct tls_server *t);
time_t tls_server_last_refresh(const struct tls_server *t);

/* A connection on fd (non-blocking) that is still to shake hands. */
struct tls_conn *tls_conn_new(struct tls_server *t, int fd);
/* Sends a close_notify if the socket takes it at once, and frees. */
void tls_conn_free(struct tls_conn *tc);
/* As read() and write().  A write that waited (-1, EAGAIN) must be
 * retried with the same bytes first. */
ssize_t tls_read(struct tls_conn *tc, void *buf, size_t n);
ssize_t tls_write(struct tls_conn *tc, const void *buf, size_t n);
/* Whether the last read waits for the socket to become writable (a read
 * can, in a handshake), and the last write for it to become readable (a
 * write can, for a key update): the caller then waits for that event, not
 * the one it would wait for.  Each is cleared by its call's next success;
 * false for NULL (a plain connection). */
bool tls_read_waits_write(const struct tls_conn *tc);
bool tls_write_waits_read(const struct tls_conn *tc);
/* Bytes TLS holds that no read took yet (decrypted, or read ahead and
 * not yet decrypted: then at least 1): the socket will not say readable
 * for them.  0 for NULL (a plain connection), 0 while a read waits for
 * the socket to take bytes (tls_read_waits_write: read again on the write
 * event), and nothing for records not yet decrypted after a read that
 * waited for input (what TLS holds then is part of a record, which only
 * more input completes). */
size_t tls_pending(const struct tls_conn *tc);

/* The dialling side: the cluster's own clients of its processes' client
 * ports under -Z (cocytus-proxy's backends, cocytus-cli, a slot move's
 * copy).  ca: the CAs that sign the servers' certificates (NULL: the
 * system's); cert and key: this end's certificate, shown to a server that
 * requires one (NULL: none; key NULL: in the cert file), the key PEM or
 * DER (keyformat, as ssl_keyformat).  NULL with the reason in err. */
struct tls_dialer;
#define TLS_KEYFORMAT_PEM 1   /* ssl_keyformat's values: 1 PEM, 2 DER */
struct tls_dialer *tls_dialer_new(const char *ca, const char *cert, const char *key,
                                  int keyformat, char *err, size_t errlen);
void tls_dialer_free(struct tls_dialer *d);
/* A connection on fd (connected, or connecting) to host, whose
 * certificate must name it (an address or a DNS name); tls_read and
 * tls_write run the handshake on their way, or tls_handshake alone.  NULL
 * when out of memory. */
struct tls_conn *tls_conn_dial(struct tls_dialer *d, int fd, const char *host);
/* An OpenSSL SSL * in connect state for host, for libevent's
 * bufferevent_openssl (which owns it then: cluster/migrate_tls.c); NULL
 * when out of memory. */
void *tls_dialer_ssl(struct tls_dialer *d, const char *host);
enum tls_hs { TLS_HS_DONE, TLS_HS_WANTS_READ, TLS_HS_WANTS_WRITE, TLS_HS_FAILED };
enum tls_hs tls_handshake(struct tls_conn *tc);
/* Why the connection failed (a refused certificate names its reason). */
const char *tls_conn_error(const struct tls_conn *tc);

#endif
