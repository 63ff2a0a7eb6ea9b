/* proto_meta.c - parsing memcached 1.6's meta commands (see proto_meta.h).
 *
 * The rules below were learned by sending memcached 1.6.18 requests (the
 * differential tester in test/difftest keeps them honest); its protocol.txt
 * describes the commands, not their errors. */
#include "proto_meta.h"

#include <string.h>

#include "mcnum.h"
#include "proto_text.h"      /* TEXT_BAD_DATA_CHUNK */

/* Every flag character any meta command accepts (others: "invalid flag"). */
static const char valid_flags[] = "bcfhklqstuvCDFIJLMNOPRT";

static const char *const bad_format = "CLIENT_ERROR bad command line format";
static const char *const bad_token = "CLIENT_ERROR bad token in command line format";
static const char *const invalid_or_dup = "CLIENT_ERROR invalid or duplicate flag";

struct mtoks {
    const char *s[META_MAX_TOKENS + 1];
    size_t n[META_MAX_TOKENS + 1];
    int count;            /* tokens stored */
    bool more;            /* the line has more than META_MAX_TOKENS + 1 */
};

/* Split line[0..n) on spaces, skipping empty tokens. */
static void tokenize(const char *p, const char *end, struct mtoks *t)
{
    t->count = 0;
    t->more = false;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        if (p == end)
            break;
        if (t->count == META_MAX_TOKENS + 1) {
            t->more = true;
            return;
        }
        const char *start = p;
        while (p < end && *p != ' ')
            p++;
        t->s[t->count] = start;
        t->n[t->count] = (size_t)(p - start);
        t->count++;
    }
}

static bool too_many_tokens(const struct mtoks *t)
{
    return t->more || t->count > META_MAX_TOKENS;
}

bool meta_is_command(const char *tok, size_t len)
{
    if (len != 2 || tok[0] != 'm')
        return false;
    switch (tok[1]) {
    case 'g': case 's': case 'd': case 'a': case 'n': case 'e':
        return true;
    default:
        return false;
    }
}

static enum meta_parse_result fail(struct meta_req *req, const char *msg)
{
    req->error = msg;
    return MP_ERROR;
}

/* ---- base64 ---- */

static const char b64_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t meta_base64_encode(const char *in, size_t n, char *out)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        out[o++] = b64_chars[(v >> 18) & 63];
        out[o++] = b64_chars[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64_chars[v & 63] : '=';
    }
    return o;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* memcached's decoding: characters outside the alphabet are skipped; the
 * ones inside it ('=' included, read as zero) must number a multiple of 4
 * and are taken four at a time; a group holding one '=' gives two bytes,
 * two give one, more is an error, and a group with any '=' ends the key
 * (what follows is ignored).  (Difftest seed 3011 case 1755: "ab_cd/x="
 * is "abcd/x=".) */
long meta_base64_decode(const char *in, size_t n, char *out)
{
    size_t valid = 0;
    for (size_t i = 0; i < n; i++)
        if (in[i] == '=' || b64_value(in[i]) >= 0)
            valid++;
    if (valid == 0 || valid % 4 != 0)
        return -1;
    size_t o = 0;
    int quad[4], got = 0, pads = 0;
    for (size_t i = 0; i < n; i++) {
        int v = in[i] == '=' ? 0 : b64_value(in[i]);
        if (v < 0)
            continue;
        if (in[i] == '=')
            pads++;
        quad[got++] = v;
        if (got < 4)
            continue;
        got = 0;
        if (pads > 2)
            return -1;
        out[o++] = (char)((quad[0] << 2) | (quad[1] >> 4));
        if (pads < 2)
            out[o++] = (char)(((quad[1] & 15) << 4) | (quad[2] >> 2));
        if (pads < 1)
            out[o++] = (char)(((quad[2] & 3) << 6) | quad[3]);
        if (pads > 0)
            break;
    }
    return (long)o;
}

static bool decode_key(struct meta_req *req)
{
    long n = meta_base64_decode(req->key_token, req->nkey_token, req->keybuf);
    if (n <= 0)
        return false;
    req->key = req->keybuf;
    req->nkey = (size_t)n;
    req->base64 = true;
    return true;
}

/* ---- numbers of flag tokens ---- */

/* TTLs are read as a long and kept as memcached's 32-bit exptime. */
static bool ttl_of(const struct meta_flag *f, int64_t *out)
{
    int64_t v;
    if (!mcnum_i64(f->tok, f->ntok, &v))
        return false;
    *out = (int32_t)(uint32_t)(uint64_t)v;
    return true;
}

static bool u64_of(const struct meta_flag *f, uint64_t *out)
{
    return mcnum_u64(f->tok, f->ntok, out);
}

static bool flags_of(const struct meta_flag *f, uint32_t *out)
{
    uint64_t v;
    if (!mcnum_u64(f->tok, f->ntok, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

/* Records flag token tok; false if its character is not a flag or repeats. */
static bool add_flag(struct meta_req *req, const char *tok, size_t n, bool *dup)
{
    char c = tok[0];
    *dup = false;
    if (c == '\0' || !strchr(valid_flags, c))
        return false;
    if (meta_has(req, c)) {
        *dup = true;
        return false;
    }
    req->has |= meta_bit(c);
    struct meta_flag *f = &req->flags[req->nflags++];
    f->flag = c;
    f->tok = tok + 1;
    f->ntok = n - 1;
    switch (c) {
    case 'O':
        req->opaque = f->tok;
        req->nopaque = f->ntok;
        break;
    default:
        break;
    }
    return true;
}

/* mg and ms: a flag character that is not one, or a repeated one, is
 * answered at once; the numbers, the M token's length and the base64 key
 * are checked in order, and the last failure among them is reported. */
static const char *preparse(struct meta_req *req, const struct mtoks *t, int first)
{
    const char *err = NULL;
    for (int i = first; i < t->count; i++) {
        bool dup;
        if (!add_flag(req, t->s[i], t->n[i], &dup))
            return dup ? "CLIENT_ERROR duplicate flag" : "CLIENT_ERROR invalid flag";
        const struct meta_flag *f = &req->flags[req->nflags - 1];
        switch (f->flag) {
        case 'b':
            if (!decode_key(req))
                err = "CLIENT_ERROR error decoding key";
            break;
        case 'N':
            if (!ttl_of(f, &req->vivify_ttl))
                err = bad_token;
            break;
        case 'R':
            if (!ttl_of(f, &req->recache_ttl))
                err = bad_token;
            break;
        case 'T':
            if (!ttl_of(f, &req->ttl))
                err = bad_token;
            break;
        case 'C':
            if (!u64_of(f, &req->cas))
                err = bad_token;
            break;
        case 'D':
            if (!u64_of(f, &req->delta))
                err = "CLIENT_ERROR invalid numeric delta value";
            break;
        case 'J':
            if (!u64_of(f, &req->initial))
                err = "CLIENT_ERROR invalid numeric initial value";
            break;
        case 'M':
            if (f->ntok != 1)
                err = "CLIENT_ERROR incorrect length for M token";
            else
                req->mode = f->tok[0];
            break;
        default:
            break;
        }
    }
    return err;
}

/* After preparse: F, then ms's mode, then the opaque. */
static const char *postparse(struct meta_req *req, bool ms)
{
    for (int i = 0; i < req->nflags; i++) {
        const struct meta_flag *f = &req->flags[i];
        if (f->flag == 'F' && !flags_of(f, &req->client_flags))
            return bad_format;
    }
    if (ms && meta_has(req, 'M') && !strchr("EAPRS", req->mode))
        return "CLIENT_ERROR invalid mode for ms M token";
    if (req->opaque && req->nopaque > META_OPAQUE_MAX) {
        if (ms)
            return "CLIENT_ERROR opaque token too long";
        /* memcached's mg meets it while writing the reply: the lookup (and
         * N's item) and the flags before the O have happened by then
         * (difftest seed 2411 case 5531) */
        req->opaque_too_long = true;
    }
    return NULL;
}

static bool set_key(struct meta_req *req, const struct mtoks *t)
{
    req->key_token = req->key = t->s[1];
    req->nkey_token = req->nkey = t->n[1];
    return t->n[1] <= META_KEY_MAX;
}

static enum meta_parse_result parse_mg(struct meta_req *req, const struct mtoks *t)
{
    if (t->count < 2)
        return fail(req, "ERROR");
    if (!set_key(req, t))
        return fail(req, bad_format);
    if (too_many_tokens(t))
        return fail(req, "CLIENT_ERROR options flags are too long");
    const char *err = preparse(req, t, 2);
    if (!err)
        err = postparse(req, false);
    return err ? fail(req, err) : MP_OK;
}

static enum meta_parse_result parse_ms(struct meta_req *req, const struct mtoks *t,
                                       const char *buf, size_t len, size_t max_item)
{
    if (t->count < 2)
        return fail(req, "ERROR");
    if (t->count < 3 || !set_key(req, t))
        return fail(req, bad_format);
    if (too_many_tokens(t))
        return fail(req, "CLIENT_ERROR options flags too long");
    int64_t v;
    if (!mcnum_i64(t->s[2], t->n[2], &v))
        return fail(req, bad_format);
    int64_t vlen = (int32_t)(uint32_t)(uint64_t)v;     /* kept as a 32-bit int */
    if (vlen < 0 || vlen > INT32_MAX - 2)
        return fail(req, bad_format);
    req->vlen = vlen;
    const char *err = preparse(req, t, 3);
    if (!err)
        err = postparse(req, true);
    if (err) {
        req->swallow = (size_t)vlen + 2;
        return fail(req, err);
    }
    if ((size_t)vlen > max_item) {
        req->swallow = (size_t)vlen + 2;
        req->too_large = true;
        return fail(req, "SERVER_ERROR object too large for cache");
    }
    size_t line = req->total;
    size_t need = line + (size_t)vlen + 2;
    if (len < need)
        return MP_NEED_MORE;
    req->data = buf + line;
    req->total = need;
    if (buf[need - 2] != '\r' || buf[need - 1] != '\n')
        return fail(req, TEXT_BAD_DATA_CHUNK);
    return MP_OK;
}

/* md and ma: one pass; any flag problem is "invalid or duplicate flag". */
static enum meta_parse_result parse_md_ma(struct meta_req *req, const struct mtoks *t)
{
    if (t->count < 2)
        return fail(req, "ERROR");
    if (!set_key(req, t))
        return fail(req, bad_format);
    if (too_many_tokens(t))
        return fail(req, "CLIENT_ERROR options flags too long");
    for (int i = 2; i < t->count; i++) {
        bool dup;
        if (!add_flag(req, t->s[i], t->n[i], &dup))
            return fail(req, invalid_or_dup);
        const struct meta_flag *f = &req->flags[req->nflags - 1];
        bool ok = true;
        switch (f->flag) {
        case 'b': ok = decode_key(req); break;
        case 'N': ok = ttl_of(f, &req->vivify_ttl); break;
        case 'R': ok = ttl_of(f, &req->recache_ttl); break;
        case 'T': ok = ttl_of(f, &req->ttl); break;
        case 'C': ok = u64_of(f, &req->cas); break;
        case 'D': ok = u64_of(f, &req->delta); break;
        case 'J': ok = u64_of(f, &req->initial); break;
        case 'F': ok = flags_of(f, &req->client_flags); break;
        case 'M':
            ok = f->ntok == 1;
            if (ok)
                req->mode = f->tok[0];
            break;
        default: break;
        }
        if (!ok)
            return fail(req, invalid_or_dup);
    }
    if (req->cmd == MC_ARITH && req->mode) {
        switch (req->mode) {
        case 'I': case '+': req->mode = META_MODE_INCR; break;
        case 'D': case '-': req->mode = META_MODE_DECR; break;
        default: return fail(req, "CLIENT_ERROR invalid mode for ma M token");
        }
    }
    if (req->opaque && req->nopaque > META_OPAQUE_MAX) {
        /* memcached's ma runs first and then answers this instead. */
        if (req->cmd != MC_ARITH)
            return fail(req, "CLIENT_ERROR opaque token too long");
        req->opaque_too_long = true;
    }
    return MP_OK;
}

static enum meta_parse_result parse_me(struct meta_req *req, const struct mtoks *t)
{
    if (t->count < 2 || !set_key(req, t))
        return fail(req, bad_format);
    /* me's only flag: exactly "b" (not "bx", nor "b\r" from a line ending
     * in \r\r\n; difftest seed 5150 case 2951) */
    if (t->count >= 3 && t->n[2] == 1 && t->s[2][0] == 'b' && !decode_key(req))
        return fail(req, bad_format);
    return MP_OK;
}

enum meta_parse_result meta_parse_line(const char *buf, size_t len, size_t nline,
                                       size_t line_total, size_t max_item,
                                       struct meta_req *req)
{
    memset(req, 0, offsetof(struct meta_req, keybuf));
    struct mtoks t;
    tokenize(buf, buf + nline, &t);
    if (t.count == 0 || !meta_is_command(t.s[0], t.n[0]))
        return MP_NOT_META;
    req->total = line_total;
    req->delta = 1;
    switch (t.s[0][1]) {
    case 'n':
        req->cmd = MC_NOOP;
        return MP_OK;
    case 'e':
        req->cmd = MC_DEBUG;
        return parse_me(req, &t);
    case 'g':
        req->cmd = MC_GET;
        return parse_mg(req, &t);
    case 's':
        req->cmd = MC_SET;
        return parse_ms(req, &t, buf, len, max_item);
    case 'd':
        req->cmd = MC_DELETE;
        return parse_md_ma(req, &t);
    default:
        req->cmd = MC_ARITH;
        return parse_md_ma(req, &t);
    }
}

enum meta_parse_result meta_parse(const char *buf, size_t len, size_t max_item,
                                  struct meta_req *req)
{
    memset(req, 0, offsetof(struct meta_req, keybuf));
    const char *nl = memchr(buf, '\n', len);
    if (!nl)
        return len > META_LINE_MAX ? MP_CLOSE : MP_NEED_MORE;
    size_t total = (size_t)(nl - buf) + 1;
    if (total > META_READ_CHUNK)
        return MP_CLOSE;          /* never whole in memcached's 16 KB buffer */
    size_t nline = (size_t)(nl - buf);
    if (nline > 0 && buf[nline - 1] == '\r')
        nline--;
    /* memcached reads the line as a C string: a NUL ends it. */
    const char *nul = memchr(buf, '\0', nline);
    if (nul)
        nline = (size_t)(nul - buf);
    return meta_parse_line(buf, len, nline, total, max_item, req);
}
