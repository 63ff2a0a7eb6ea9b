/* sasl_auth.h - memcached's -S: binary clients authenticate through Cyrus
 * SASL, with the mechanisms, password store and configuration file that a
 * memcached -S on the same host would use.
 *
 * The process initialises the library once (mcsasl_init); each connection
 * that sends a SASL command gets a session (mcsasl_new), kept until the
 * connection closes, so an exchange of several steps (CRAM-MD5, SCRAM) and
 * a restart after a failed one behave as the library makes them behave for
 * memcached.  Without libsasl2 at build time mcsasl_available() is false
 * and -S is refused at start. */
#ifndef COCYTUS_SASL_AUTH_H
#define COCYTUS_SASL_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* memcached answers EINVAL for a mechanism name longer than this. */
#define MCSASL_MECH_MAX 32

enum mcsasl_outcome {
    MCSASL_OK,         /* authenticated */
    MCSASL_CONTINUE,   /* a challenge to send back; the client steps next */
    MCSASL_FAIL        /* wrong credentials, unknown mechanism, bad exchange */
};

struct mcsasl;

/* Was the server built with Cyrus SASL? */
bool mcsasl_available(void);

/* Once per process, before -u drops root: the configuration is read from
 * $SASL_CONF_PATH, else /etc/sasl or /etc/sasl2, the first that holds
 * memcached.conf, else the library's own places (as memcached -S).  verbose: the library's
 * log lines go to stderr.  0, or -1 with err set. */
int mcsasl_init(bool verbose, char *err, size_t errlen);
void mcsasl_shutdown(void);

/* One connection's session; NULL if the library refused one. */
struct mcsasl *mcsasl_new(void);
void mcsasl_free(struct mcsasl *m);

/* The mechanisms offered, space-separated ("PLAIN CRAM-MD5"); false if
 * none could be listed. */
bool mcsasl_mechs(struct mcsasl *m, const char **list, size_t *len);

/* The first message of an exchange (binary auth, 0x21): mech is the
 * request's key (at most MCSASL_MECH_MAX bytes), in its value.  On
 * MCSASL_CONTINUE, *out / *outlen is the challenge (valid until the next
 * call on m). */
enum mcsasl_outcome mcsasl_start(struct mcsasl *m, const char *mech, size_t nmech,
                                 const char *in, size_t nin,
                                 const char **out, size_t *outlen);

/* A later message (binary step, 0x22); fails when no exchange started. */
enum mcsasl_outcome mcsasl_step(struct mcsasl *m, const char *in, size_t nin,
                                const char **out, size_t *outlen);

#endif
