/* authfile.h - memcached's -Y credentials file ("user:password" per line)
 * and the two ways a client presents a pair: the ASCII protocol's
 * authentication `set` (data "user password") and SASL PLAIN in the binary
 * protocol ("authzid NUL user NUL password").  Shared by cocytus-server and
 * cocytus-proxy, which check clients against the same file format. */
#ifndef MC_AUTHFILE_H
#define MC_AUTHFILE_H

#include <stdbool.h>
#include <stddef.h>

#define AUTHFILE_FIELD_MAX 255     /* longest user or password accepted */

struct auth_pair {
    char user[AUTHFILE_FIELD_MAX + 1];
    char pass[AUTHFILE_FIELD_MAX + 1];
};

struct authfile {
    struct auth_pair *pairs;
    size_t n;
};

/* Reads path into af (empty lines skipped).  0, or -1 with a message naming
 * the file and line in err. */
int authfile_load(struct authfile *af, const char *path, char *err, size_t errlen);
void authfile_free(struct authfile *af);

/* True if user/password is one of af's pairs.  Every pair is compared in
 * full, so the time taken does not tell how much of a guess was right. */
bool authfile_check(const struct authfile *af, const char *user, size_t nuser,
                    const char *pass, size_t npass);

/* "user password" (the data of the ASCII authentication set): exactly two
 * words separated by spaces, no control characters. */
bool authfile_split_ascii(const char *p, size_t n, const char **user, size_t *nuser,
                          const char **pass, size_t *npass);

/* A SASL PLAIN message: [authzid] NUL authcid NUL passwd.  The authzid, if
 * any, is ignored (no identity switching here). */
bool authfile_split_plain(const char *p, size_t n, const char **user, size_t *nuser,
                          const char **pass, size_t *npass);

/* Builds a SASL PLAIN message for pair into buf; its length, or 0 if it
 * does not fit. */
size_t authfile_plain_message(const struct auth_pair *pair, char *buf, size_t cap);

#endif
