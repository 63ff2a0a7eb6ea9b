/* authfile.c - the -Y credentials file and the ASCII / SASL PLAIN forms a
 * client presents its user and password in (see authfile.h).  The file is
 * read once at start; a check compares against every pair with a
 * comparison whose time does not depend on where a guess goes wrong. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authfile.h"

static bool field_ok(const char *p, size_t n)
{
    if (n == 0 || n > AUTHFILE_FIELD_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == ' ')
            return false;
    return true;
}

static int add_pair(struct authfile *af, const char *user, size_t nuser, const char *pass,
                    size_t npass)
{
    struct auth_pair *np = realloc(af->pairs, (af->n + 1) * sizeof(*np));
    if (np == NULL)
        return -1;
    af->pairs = np;
    struct auth_pair *pr = &af->pairs[af->n++];
    memset(pr, 0, sizeof(*pr));
    memcpy(pr->user, user, nuser);
    memcpy(pr->pass, pass, npass);
    return 0;
}

int authfile_load(struct authfile *af, const char *path, char *err, size_t errlen)
{
    char line[2 * AUTHFILE_FIELD_MAX + 8];
    int lineno = 0;
    FILE *f = fopen(path, "r");

    af->pairs = NULL;
    af->n = 0;
    if (f == NULL) {
        snprintf(err, errlen, "cannot open the auth file %s: %s", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t n = strcspn(line, "\r\n");
        if (line[n] == '\0' && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line too long", path, lineno);
            goto fail;
        }
        line[n] = '\0';
        if (n == 0)
            continue;
        const char *colon = strchr(line, ':');
        size_t nuser = colon ? (size_t)(colon - line) : 0;
        size_t npass = colon ? n - nuser - 1 : 0;
        if (colon == NULL || !field_ok(line, nuser) || !field_ok(colon + 1, npass)) {
            snprintf(err, errlen, "%s:%d: not user:password", path, lineno);
            goto fail;
        }
        if (add_pair(af, line, nuser, colon + 1, npass) < 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto fail;
        }
    }
    fclose(f);
    if (af->n == 0) {
        snprintf(err, errlen, "%s: no user:password line", path);
        return -1;
    }
    return 0;
fail:
    fclose(f);
    authfile_free(af);
    return -1;
}

void authfile_free(struct authfile *af)
{
    free(af->pairs);
    af->pairs = NULL;
    af->n = 0;
}

/* Compares a (length na) with the NUL-terminated field b, touching every
 * byte of b whatever a holds. */
static bool same_field(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    unsigned diff = (unsigned)(na != nb);
    for (size_t i = 0; i < nb; i++)
        diff |= (unsigned)(unsigned char)b[i] ^ (unsigned)(unsigned char)(i < na ? a[i] : 0);
    return diff == 0;
}

bool authfile_check(const struct authfile *af, const char *user, size_t nuser,
                    const char *pass, size_t npass)
{
    bool ok = false;
    for (size_t i = 0; i < af->n; i++) {
        bool u = same_field(user, nuser, af->pairs[i].user);
        bool p = same_field(pass, npass, af->pairs[i].pass);
        ok |= u & p;
    }
    return ok;
}

bool authfile_split_ascii(const char *p, size_t n, const char **user, size_t *nuser,
                          const char **pass, size_t *npass)
{
    const char *word[2];
    size_t len[2];
    int count = 0;
    size_t i = 0;

    while (i < n) {
        while (i < n && p[i] == ' ')
            i++;
        if (i == n)
            break;
        if (count == 2)
            return false;
        word[count] = p + i;
        while (i < n && p[i] != ' ') {
            if ((unsigned char)p[i] < 0x20)
                return false;
            i++;
        }
        len[count] = (size_t)(p + i - word[count]);
        count++;
    }
    if (count != 2)
        return false;
    *user = word[0];
    *nuser = len[0];
    *pass = word[1];
    *npass = len[1];
    return true;
}

bool authfile_split_plain(const char *p, size_t n, const char **user, size_t *nuser,
                          const char **pass, size_t *npass)
{
    const char *nul1 = memchr(p, '\0', n);
    if (nul1 == NULL)
        return false;
    const char *u = nul1 + 1;
    const char *nul2 = memchr(u, '\0', (size_t)(p + n - u));
    if (nul2 == NULL)
        return false;
    *user = u;
    *nuser = (size_t)(nul2 - u);
    *pass = nul2 + 1;
    *npass = (size_t)(p + n - *pass);
    return *nuser > 0 && memchr(*pass, '\0', *npass) == NULL;
}

size_t authfile_plain_message(const struct auth_pair *pair, char *buf, size_t cap)
{
    size_t nu = strlen(pair->user), np = strlen(pair->pass);
    size_t need = 1 + nu + 1 + np;
    if (need > cap)
        return 0;
    buf[0] = '\0';
    memcpy(buf + 1, pair->user, nu);
    buf[1 + nu] = '\0';
    memcpy(buf + 2 + nu, pair->pass, np);
    return need;
}
