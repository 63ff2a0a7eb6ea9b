/* sasl_auth.c - memcached's -S through Cyrus SASL (see sasl_auth.h).
 *
 * The library does the mechanisms, the password store (sasldb, saslauthd,
 * auxprop plugins) and the configuration; this file only names the
 * service "memcached", so the same memcached.conf and the same users
 * (realm: the host name unless a user gives one) serve both servers, and
 * turns the library's answers into three outcomes.  Cyrus SASL is
 * initialised per process and keeps the callback list it is given, so the
 * list and the configuration path live here, outside the server context:
 * the one exception to that rule, forced by the library. */
#include "config.h"

#include "sasl_auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_SASL
#include <unistd.h>
#include <sasl/sasl.h>

#define SERVICE "memcached"
#define CONF_FILE SERVICE ".conf"

/* Where memcached -S looks for its configuration when SASL_CONF_PATH is
 * not set, in its order. */
static const char *const conf_dirs[] = { "/etc/sasl", "/etc/sasl2" };

struct mcsasl {
    sasl_conn_t *conn;
    bool started;          /* sasl_server_start was called on conn */
};

static char conf_path[4096];
static char realm[256];            /* the host name, memcached's user realm */
static sasl_callback_t callbacks[3];

static int on_log(void *ctx, int level, const char *message)
{
    (void)ctx;
    fprintf(stderr, "cocytus-server: SASL (level %d): %s\n", level, message);
    return SASL_OK;
}

static int on_conf_path(void *ctx, char **path)
{
    (void)ctx;
    *path = conf_path;
    return SASL_OK;
}

/* Function pointers of every callback type go into one field. */
typedef int (*callback_fn)(void);

bool mcsasl_available(void)
{
    return true;
}

int mcsasl_init(bool verbose, char *err, size_t errlen)
{
    const char *env = getenv("SASL_CONF_PATH");
    int n = 0;

    conf_path[0] = '\0';
    if (env != NULL && *env != '\0') {
        snprintf(conf_path, sizeof(conf_path), "%s", env);
    } else {
        for (size_t i = 0; i < sizeof(conf_dirs) / sizeof(conf_dirs[0]); i++) {
            char file[256];
            snprintf(file, sizeof(file), "%s/%s", conf_dirs[i], CONF_FILE);
            if (access(file, R_OK) == 0) {
                snprintf(conf_path, sizeof(conf_path), "%s", conf_dirs[i]);
                break;
            }
        }
    }
    /* A user named without a realm is looked up in the host name's, as
     * memcached does (not the library's default, the fully qualified
     * name, which differs on many hosts). */
    if (gethostname(realm, sizeof(realm)) != 0)
        realm[0] = '\0';
    realm[sizeof(realm) - 1] = '\0';
    if (verbose) {
        callbacks[n].id = SASL_CB_LOG;
        callbacks[n].proc = (callback_fn)(void (*)(void))on_log;
        callbacks[n].context = NULL;
        n++;
    }
    if (conf_path[0] != '\0') {
        callbacks[n].id = SASL_CB_GETCONFPATH;
        callbacks[n].proc = (callback_fn)(void (*)(void))on_conf_path;
        callbacks[n].context = NULL;
        n++;
    }
    callbacks[n].id = SASL_CB_LIST_END;
    callbacks[n].proc = NULL;
    callbacks[n].context = NULL;

    int rc = sasl_server_init(callbacks, SERVICE);
    if (rc != SASL_OK) {
        snprintf(err, errlen, "-S: SASL could not start: %s", sasl_errstring(rc, NULL, NULL));
        return -1;
    }
    return 0;
}

void mcsasl_shutdown(void)
{
    sasl_server_done();
}

struct mcsasl *mcsasl_new(void)
{
    struct mcsasl *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    if (sasl_server_new(SERVICE, NULL, realm[0] != '\0' ? realm : NULL, NULL, NULL, NULL, 0,
                        &m->conn) != SASL_OK) {
        free(m);
        return NULL;
    }
    return m;
}

void mcsasl_free(struct mcsasl *m)
{
    if (m == NULL)
        return;
    sasl_dispose(&m->conn);
    free(m);
}

bool mcsasl_mechs(struct mcsasl *m, const char **list, size_t *len)
{
    unsigned n = 0;
    int count = 0;
    if (sasl_listmech(m->conn, NULL, "", " ", "", list, &n, &count) != SASL_OK)
        return false;
    *len = n;
    return true;
}

static enum mcsasl_outcome outcome(int rc, const char *out, unsigned n,
                                   const char **pout, size_t *poutlen)
{
    *pout = out != NULL ? out : "";
    *poutlen = out != NULL ? n : 0;
    if (rc == SASL_OK)
        return MCSASL_OK;
    if (rc == SASL_CONTINUE)
        return MCSASL_CONTINUE;
    return MCSASL_FAIL;
}

enum mcsasl_outcome mcsasl_start(struct mcsasl *m, const char *mech, size_t nmech,
                                 const char *in, size_t nin,
                                 const char **out, size_t *outlen)
{
    char name[MCSASL_MECH_MAX + 1];
    const char *sout = NULL;
    unsigned n = 0;

    *out = "";
    *outlen = 0;
    if (nmech > MCSASL_MECH_MAX || nin > (size_t)~0u)
        return MCSASL_FAIL;
    memcpy(name, mech, nmech);
    name[nmech] = '\0';
    int rc = sasl_server_start(m->conn, name, nin > 0 ? in : NULL, (unsigned)nin, &sout, &n);
    /* A start the library refused (an unknown mechanism) leaves nothing
     * to step: stepping it would crash the library. */
    m->started = rc == SASL_OK || rc == SASL_CONTINUE;
    return outcome(rc, sout, n, out, outlen);
}

enum mcsasl_outcome mcsasl_step(struct mcsasl *m, const char *in, size_t nin,
                                const char **out, size_t *outlen)
{
    const char *sout = NULL;
    unsigned n = 0;

    *out = "";
    *outlen = 0;
    if (!m->started || nin > (size_t)~0u)
        return MCSASL_FAIL;
    int rc = sasl_server_step(m->conn, nin > 0 ? in : NULL, (unsigned)nin, &sout, &n);
    return outcome(rc, sout, n, out, outlen);
}

#else /* !HAVE_SASL */

bool mcsasl_available(void)
{
    return false;
}

int mcsasl_init(bool verbose, char *err, size_t errlen)
{
    (void)verbose;
    snprintf(err, errlen, "-S: built without SASL (apt-get install libsasl2-dev, then configure again)");
    return -1;
}

void mcsasl_shutdown(void)
{
}

struct mcsasl *mcsasl_new(void)
{
    return NULL;
}

void mcsasl_free(struct mcsasl *m)
{
    (void)m;
}

bool mcsasl_mechs(struct mcsasl *m, const char **list, size_t *len)
{
    (void)m;
    *list = "";
    *len = 0;
    return false;
}

enum mcsasl_outcome mcsasl_start(struct mcsasl *m, const char *mech, size_t nmech,
                                 const char *in, size_t nin,
                                 const char **out, size_t *outlen)
{
    (void)m; (void)mech; (void)nmech; (void)in; (void)nin;
    *out = "";
    *outlen = 0;
    return MCSASL_FAIL;
}

enum mcsasl_outcome mcsasl_step(struct mcsasl *m, const char *in, size_t nin,
                                const char **out, size_t *outlen)
{
    (void)m; (void)in; (void)nin;
    *out = "";
    *outlen = 0;
    return MCSASL_FAIL;
}

#endif
