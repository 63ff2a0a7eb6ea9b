/* px_auth.c - cocytus-proxy: client authentication, and the proxy's own
 * credentials towards the servers.
 *
 * With -Y FILE the proxy authenticates its clients as memcached does, with
 * the same file format (memcached/authfile.c):
 *   - ASCII: until a connection authenticates, only a `set <key> <flags>
 *     <exptime> <bytes>` whose data is "user password" is taken (answered
 *     STORED, or CLIENT_ERROR authentication failure); anything else gets
 *     CLIENT_ERROR unauthenticated and the rest of what arrived with it is
 *     dropped.
 *   - binary: SASL with the PLAIN mechanism: list mechanisms (0x20) answers
 *     "PLAIN", auth (0x21) with key "PLAIN" checks "\0user\0password";
 *     every other command before that gets status 0x20 (auth error).
 * Nothing of an unauthenticated client reaches a server.
 *
 * Towards the servers (which may run with -Y too) the proxy presents one
 * pair, --server-auth FILE's first line (none without the option), and
 * only to a server that asks for it: a server without -Y would store the
 * ASCII set as the item "auth", password included.  A backend connection
 * lists the SASL mechanisms first and authenticates (PLAIN) when PLAIN is
 * offered (px_backend.c); a map fetch or a meta text connection sends the
 * ASCII authentication set once its first request is answered CLIENT_ERROR
 * unauthenticated, then that request again (px_route.c, px_meta.c). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bin_wire.h"
#include "px.h"

#define AUTH_LINE_MAX 2048          /* a longer first line cannot be an auth set */
#define AUTH_DATA_MAX 1024          /* nor longer data */

enum {
    SASL_LIST_MECHS = 0x20,
    SASL_AUTH = 0x21,
    SASL_STEP = 0x22,
    STATUS_AUTH_ERROR = 0x20,
};

/* ---- ASCII ---- */

static void text_reply(struct px_client *c, const char *line)
{
    struct px_req *rq = px_req_new(c, PX_PROTO_TEXT, 0);
    if (rq == NULL)
        return;
    rq->text_cmd = TC_NONE;
    struct evbuffer *out = px_req_sink(rq);
    if (out != NULL)
        evbuffer_add_printf(out, "%s\r\n", line);
    px_req_finish(rq);
}

/* The data length of `set k f e n`, or -1 if line is not such a set. */
static long auth_set_length(const char *line, size_t n)
{
    const char *word[6];
    size_t len[6];
    int count = 0;
    size_t i = 0;

    while (i < n && count < 6) {
        while (i < n && line[i] == ' ')
            i++;
        if (i == n)
            break;
        word[count] = line + i;
        while (i < n && line[i] != ' ')
            i++;
        len[count] = (size_t)(line + i - word[count]);
        count++;
    }
    if (count < 5 || len[0] != 3 || memcmp(word[0], "set", 3) != 0)
        return -1;
    long v = 0;
    for (size_t k = 0; k < len[4]; k++) {
        if (word[4][k] < '0' || word[4][k] > '9' || v > AUTH_DATA_MAX)
            return -1;
        v = v * 10 + (word[4][k] - '0');
    }
    return len[4] > 0 && v <= AUTH_DATA_MAX ? v : -1;
}

static size_t text_auth(struct px_client *c, const char *buf, size_t len)
{
    const struct authfile *af = &c->w->px->auth;
    const char *nl = memchr(buf, '\n', len);

    if (nl == NULL)
        return len > AUTH_LINE_MAX ? SIZE_MAX : 0;
    size_t line = (size_t)(nl - buf) + 1;
    size_t nline = (size_t)(nl - buf) - (nl > buf && nl[-1] == '\r');
    long vlen = auth_set_length(buf, nline);
    if (vlen < 0) {
        px_count(&c->w->st.auth_errors, 1);
        text_reply(c, "CLIENT_ERROR unauthenticated");
        return len;
    }
    size_t need = line + (size_t)vlen + 2;
    if (len < need)
        return 0;
    const char *user, *pass;
    size_t nuser, npass;
    px_count(&c->w->st.auth_cmds, 1);
    if (memcmp(buf + line + vlen, "\r\n", 2) == 0 &&
        authfile_split_ascii(buf + line, (size_t)vlen, &user, &nuser, &pass, &npass) &&
        authfile_check(af, user, nuser, pass, npass)) {
        c->authed = true;
        text_reply(c, "STORED");
        return need;
    }
    px_count(&c->w->st.auth_errors, 1);
    text_reply(c, "CLIENT_ERROR authentication failure");
    return need;
}

/* ---- binary SASL PLAIN ---- */

static void bin_reply(struct px_client *c, const char *h, uint16_t status, const char *body)
{
    struct px_req *rq = px_req_new(c, PX_PROTO_BINARY, 0);
    if (rq == NULL)
        return;
    rq->bin_opcode = (uint8_t)h[BIN_OFF_OPCODE];
    rq->bin_opaque = bin_load32(h + BIN_OFF_OPAQUE);
    struct evbuffer *out = px_req_sink(rq);
    if (out != NULL) {
        char r[BIN_HEADER_LEN];
        size_t n = strlen(body);
        memset(r, 0, sizeof(r));
        r[BIN_OFF_MAGIC] = (char)BIN_MAGIC_RESPONSE;
        r[BIN_OFF_OPCODE] = h[BIN_OFF_OPCODE];
        bin_store16(r + BIN_OFF_STATUS, status);
        bin_store32(r + BIN_OFF_BODYLEN, (uint32_t)n);
        memcpy(r + BIN_OFF_OPAQUE, h + BIN_OFF_OPAQUE, 4);
        evbuffer_add(out, r, sizeof(r));
        evbuffer_add(out, body, n);
    }
    px_req_finish(rq);
}

static size_t bin_auth(struct px_client *c, const char *buf, size_t len)
{
    if (len < BIN_HEADER_LEN)
        return 0;
    if ((unsigned char)buf[BIN_OFF_MAGIC] != BIN_MAGIC_REQUEST)
        return SIZE_MAX;
    uint8_t op = (uint8_t)buf[BIN_OFF_OPCODE];
    size_t nkey = bin_load16(buf + BIN_OFF_KEYLEN);
    size_t next = (unsigned char)buf[BIN_OFF_EXTLEN];
    size_t body = bin_load32(buf + BIN_OFF_BODYLEN);
    if (nkey + next > body || body > AUTH_DATA_MAX + BIN_KEY_MAX)
        return SIZE_MAX;            /* not a request anyone could authenticate with */
    size_t total = BIN_HEADER_LEN + body;
    if (len < total)
        return 0;
    const char *key = buf + BIN_HEADER_LEN + next;
    const char *val = key + nkey;
    size_t nval = body - next - nkey;

    if (op == SASL_LIST_MECHS) {
        bin_reply(c, buf, 0, "PLAIN");
        return total;
    }
    if (op == SASL_AUTH || op == SASL_STEP) {
        const char *user, *pass;
        size_t nuser, npass;
        px_count(&c->w->st.auth_cmds, 1);
        if (op == SASL_AUTH && nkey == 5 && memcmp(key, "PLAIN", 5) == 0 &&
            authfile_split_plain(val, nval, &user, &nuser, &pass, &npass) &&
            authfile_check(&c->w->px->auth, user, nuser, pass, npass)) {
            c->authed = true;
            bin_reply(c, buf, 0, "Authenticated");
            return total;
        }
    }
    px_count(&c->w->st.auth_errors, 1);
    bin_reply(c, buf, STATUS_AUTH_ERROR, "Auth failure");
    return total;
}

size_t px_auth_request(struct px_client *c, const char *buf, size_t len)
{
    return c->proto == PX_PROTO_TEXT ? text_auth(c, buf, len) : bin_auth(c, buf, len);
}

/* ---- the proxy's own pair ---- */

bool px_auth_setup(struct proxy *px, const char *client_file, const char *server_file)
{
    char err[300];

    if (client_file != NULL && authfile_load(&px->auth, client_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-proxy: %s\n", err);
        return false;
    }
    if (server_file == NULL)
        return true;
    struct authfile own;
    if (authfile_load(&own, server_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "cocytus-proxy: --server-auth: %s\n", err);
        return false;
    }
    px->server_auth = own.pairs[0];
    px->has_server_auth = true;
    authfile_free(&own);
    return true;
}

/* SASL list mechanisms, opaque 0: asked first, so that the pair goes
 * only to a server that offers PLAIN (one without -Y answers "unknown
 * command"). */
size_t px_auth_sasl_list_request(char *buf, size_t cap)
{
    if (cap < BIN_HEADER_LEN)
        return 0;
    memset(buf, 0, BIN_HEADER_LEN);
    buf[BIN_OFF_MAGIC] = (char)BIN_MAGIC_REQUEST;
    buf[BIN_OFF_OPCODE] = SASL_LIST_MECHS;
    return BIN_HEADER_LEN;
}

size_t px_auth_sasl_request(const struct proxy *px, char *buf, size_t cap)
{
    char msg[2 * AUTHFILE_FIELD_MAX + 3];
    size_t n = authfile_plain_message(&px->server_auth, msg, sizeof(msg));
    size_t total = BIN_HEADER_LEN + 5 + n;

    if (n == 0 || total > cap)
        return 0;
    memset(buf, 0, BIN_HEADER_LEN);
    buf[BIN_OFF_MAGIC] = (char)BIN_MAGIC_REQUEST;
    buf[BIN_OFF_OPCODE] = SASL_AUTH;
    bin_store16(buf + BIN_OFF_KEYLEN, 5);
    bin_store32(buf + BIN_OFF_BODYLEN, (uint32_t)(5 + n));
    memcpy(buf + BIN_HEADER_LEN, "PLAIN", 5);
    memcpy(buf + BIN_HEADER_LEN + 5, msg, n);
    return total;
}

size_t px_auth_ascii_request(const struct proxy *px, char *buf, size_t cap)
{
    const struct auth_pair *p = &px->server_auth;
    size_t nu = strlen(p->user), np = strlen(p->pass);
    int n = snprintf(buf, cap, "set auth 0 0 %zu\r\n%s %s\r\n", nu + 1 + np, p->user, p->pass);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}
