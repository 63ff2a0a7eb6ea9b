/* lc_map.c - libcocytus internals: key -> slot, addresses, and the parsers
 * for the "config get cluster" reply and the MOVED error (formats in
 * docs/routing.md). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lc_map.h"

uint32_t lc_one_at_a_time(const char *key, size_t nkey)
{
    uint32_t h = 0;

    for (size_t i = 0; i < nkey; i++) {
        h += (uint32_t)(int32_t)(signed char)key[i];   /* as libhashkit on x86 */
        h += h << 10;
        h ^= h >> 6;
    }
    h += h << 3;
    h ^= h >> 11;
    h += h << 15;
    return h;
}

unsigned lc_key_slot(const char *key, size_t nkey)
{
    return lc_one_at_a_time(key, nkey) & (COCYTUS_SLOTS - 1);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A decimal number in s[0..n) that fits max; false otherwise. */
static bool parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (n == 0 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

/* ---- addresses ---- */

static bool copy_host(const char *s, size_t n, struct lc_addr *out)
{
    if (n == 0 || n >= LC_HOST_MAX)
        return false;
    memcpy(out->host, s, n);
    out->host[n] = '\0';
    return true;
}

bool lc_addr_parse(const char *s, size_t n, struct lc_addr *out)
{
    const char *port = NULL;
    size_t nport = 0;
    uint64_t p = LC_DEFAULT_PORT;

    if (n > 0 && s[0] == '[') {                    /* [v6]:port */
        const char *close = memchr(s, ']', n);
        if (close == NULL || !copy_host(s + 1, (size_t)(close - s - 1), out))
            return false;
        size_t rest = n - (size_t)(close - s) - 1;
        if (rest > 0) {
            if (close[1] != ':')
                return false;
            port = close + 2;
            nport = rest - 1;
        }
    } else {
        const char *colon = NULL;
        for (size_t i = 0; i < n; i++)
            if (s[i] == ':')
                colon = s + i;
        size_t nhost = colon ? (size_t)(colon - s) : n;
        if (!copy_host(s, nhost, out))
            return false;
        if (colon) {
            port = colon + 1;
            nport = n - nhost - 1;
        }
    }
    if (port != NULL && (!parse_uint(port, nport, 65535, &p) || p == 0))
        return false;
    out->port = (int)p;
    return true;
}

void lc_addr_format(const struct lc_addr *a, char *buf, size_t cap)
{
    if (strchr(a->host, ':') != NULL)
        snprintf(buf, cap, "[%s]:%d", a->host, a->port);
    else
        snprintf(buf, cap, "%s:%d", a->host, a->port);
}

bool lc_addr_equal(const struct lc_addr *a, const struct lc_addr *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

static bool is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

size_t lc_seeds_parse(const char *seeds, struct lc_addr **out, char *err, size_t errlen)
{
    size_t cap = 1, n = 0;
    struct lc_addr *list;

    *out = NULL;
    if (seeds == NULL) {
        set_err(err, errlen, "no seed servers given");
        return 0;
    }
    for (const char *p = seeds; *p; p++)
        cap += *p == ',';
    list = calloc(cap, sizeof(*list));
    if (list == NULL) {
        set_err(err, errlen, "out of memory");
        return 0;
    }
    const char *p = seeds;
    while (*p) {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        const char *s = p, *e = end;
        while (s < e && is_blank(*s))
            s++;
        while (e > s && is_blank(e[-1]))
            e--;
        if (s < e && !lc_addr_parse(s, (size_t)(e - s), &list[n++])) {
            set_err(err, errlen, "bad seed address '%.*s'", (int)(e - s), s);
            free(list);
            return 0;
        }
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        set_err(err, errlen, "no seed servers given");
        free(list);
        return 0;
    }
    *out = list;
    return n;
}

/* ---- maps ---- */

static struct lc_map *map_new(size_t n)
{
    struct lc_map *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->ep = calloc(n ? n : 1, sizeof(*m->ep));
    if (m->ep == NULL) {
        free(m);
        return NULL;
    }
    m->n = n;
    return m;
}

struct lc_map *lc_map_single(const struct lc_addr *a)
{
    struct lc_map *m = map_new(1);

    if (m == NULL)
        return NULL;
    m->ep[0] = *a;
    memset(m->owner, 0, sizeof(m->owner));
    return m;
}

struct lc_map *lc_map_dup(const struct lc_map *m)
{
    struct lc_map *d = map_new(m->n);

    if (d == NULL)
        return NULL;
    d->epoch = m->epoch;
    memcpy(d->ep, m->ep, m->n * sizeof(*m->ep));
    memcpy(d->owner, m->owner, sizeof(d->owner));
    return d;
}

enum lc_judged lc_map_judge(const struct lc_map *cur, const struct lc_map *m, bool no_cluster,
                            uint64_t min_epoch)
{
    if (cur == NULL)
        return LC_MAP_NEWER;
    if (no_cluster)
        return cur->epoch == 0 && min_epoch == 0 ? LC_MAP_SAME : LC_MAP_REFUSED;
    if (m->epoch < min_epoch || m->epoch < cur->epoch)
        return LC_MAP_REFUSED;
    return m->epoch > cur->epoch ? LC_MAP_NEWER : LC_MAP_SAME;
}

size_t lc_refresh_sources(const struct lc_addr *prefer, const struct lc_addr *avoid,
                          const struct lc_addr *seeds, size_t nseeds, const struct lc_map *cur,
                          struct lc_addr *out, size_t cap)
{
    size_t n = 0;
    size_t nmap = cur ? cur->n : 0;

    for (size_t k = 0; k < 1 + nseeds + nmap && n < cap; k++) {
        const struct lc_addr *a;
        if (k == 0)
            a = prefer;
        else if (k <= nseeds)
            a = &seeds[k - 1];
        else
            a = &cur->ep[k - 1 - nseeds];
        if (a == NULL)
            continue;
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = lc_addr_equal(&out[j], a);
        if (!seen)
            out[n++] = *a;
    }
    for (size_t j = 0; avoid != NULL && j + 1 < n; j++) {
        if (lc_addr_equal(&out[j], avoid)) {
            struct lc_addr last = out[j];
            memmove(&out[j], &out[j + 1], (n - j - 1) * sizeof(out[0]));
            out[n - 1] = last;
            break;
        }
    }
    return n;
}

void lc_map_free(struct lc_map *m)
{
    if (m == NULL)
        return;
    free(m->ep);
    free(m);
}

/* ---- the config reply ---- */

static const char config_prefix[] = "CONFIG cluster ";

/* The end of the line starting at p (the '\n'), or NULL. */
static const char *line_end(const char *p, const char *end)
{
    return memchr(p, '\n', (size_t)(end - p));
}

static bool starts_with(const char *p, size_t n, const char *word)
{
    size_t w = strlen(word);
    return n >= w && memcmp(p, word, w) == 0;
}

/* Parses "CONFIG cluster <flags> <bytes>" up to its '\n': *body is where
 * the data starts and *nbody its declared length. */
static bool parse_config_header(const char *buf, const char *nl, const char **body,
                                uint64_t *nbody)
{
    const char *p = buf + sizeof(config_prefix) - 1;
    const char *e = nl;

    if (e > p && e[-1] == '\r')
        e--;
    const char *sp = memchr(p, ' ', (size_t)(e - p));
    if (sp == NULL)
        return false;
    uint64_t flags;
    if (!parse_uint(p, (size_t)(sp - p), UINT32_MAX, &flags))
        return false;
    if (!parse_uint(sp + 1, (size_t)(e - sp - 1), 64u << 20, nbody))
        return false;
    *body = nl + 1;
    return true;
}

/* "END\r\n" at the start of a line at or after from, or NULL. */
static const char *find_end_line(const char *buf, const char *from, const char *end)
{
    for (const char *p = from; p + 5 <= end; p++) {
        if ((p == buf || p[-1] == '\n') && memcmp(p, "END\r\n", 5) == 0)
            return p;
    }
    return NULL;
}

size_t lc_config_reply_length(const char *buf, size_t len)
{
    const char *end = buf + len;
    const char *nl = line_end(buf, end);

    if (nl == NULL)
        return 0;
    if (!starts_with(buf, len, config_prefix))
        return (size_t)(nl - buf) + 1;        /* ERROR, CLIENT_ERROR, ...: one line */
    const char *body;
    uint64_t nbody;
    if (!parse_config_header(buf, nl, &body, &nbody))
        return (size_t)(nl - buf) + 1;        /* malformed: the parser says why */
    if ((uint64_t)(end - body) < nbody)
        return 0;
    const char *fin = find_end_line(buf, body + nbody, end);
    return fin ? (size_t)(fin - buf) + 5 : 0;
}

/* The next whitespace-separated token in [*p, end). */
static bool next_token(const char **p, const char *end, const char **tok, size_t *ntok)
{
    const char *s = *p;

    while (s < end && is_blank(*s))
        s++;
    if (s == end)
        return false;
    const char *t = s;
    while (s < end && !is_blank(*s))
        s++;
    *tok = t;
    *ntok = (size_t)(s - t);
    *p = s;
    return true;
}

/* One "host|ip|port": connect to ip when given, else to host. */
static bool parse_endpoint(const char *s, size_t n, struct lc_addr *out)
{
    const char *bar1 = memchr(s, '|', n);
    if (bar1 == NULL)
        return false;
    const char *rest = bar1 + 1;
    size_t nrest = n - (size_t)(rest - s);
    const char *bar2 = memchr(rest, '|', nrest);
    if (bar2 == NULL)
        return false;
    size_t nip = (size_t)(bar2 - rest);
    bool ok = nip > 0 ? copy_host(rest, nip, out) : copy_host(s, (size_t)(bar1 - s), out);
    uint64_t port;
    if (!ok || !parse_uint(bar2 + 1, (size_t)(s + n - bar2 - 1), 65535, &port) || port == 0)
        return false;
    out->port = (int)port;
    return true;
}

static size_t count_tokens(const char *p, const char *end)
{
    const char *tok;
    size_t ntok, n = 0;

    while (next_token(&p, end, &tok, &ntok))
        n++;
    return n;
}

static bool parse_endpoints(const char *p, const char *end, struct lc_map *m,
                            char *err, size_t errlen)
{
    const char *tok;
    size_t ntok, i = 0;

    while (next_token(&p, end, &tok, &ntok)) {
        if (!parse_endpoint(tok, ntok, &m->ep[i])) {
            set_err(err, errlen, "bad endpoint '%.*s'", (int)ntok, tok);
            return false;
        }
        i++;
    }
    return true;
}

/* One "<first>-<last>:<index>" (or "<slot>:<index>"). */
static bool parse_range(const char *s, size_t n, uint64_t *first, uint64_t *last,
                        uint64_t *index)
{
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return false;
    const char *dash = memchr(s, '-', (size_t)(colon - s));
    const char *idx = colon + 1;
    if (!parse_uint(idx, (size_t)(s + n - idx), UINT16_MAX, index))
        return false;
    if (dash == NULL) {
        if (!parse_uint(s, (size_t)(colon - s), COCYTUS_SLOTS - 1, first))
            return false;
        *last = *first;
        return true;
    }
    return parse_uint(s, (size_t)(dash - s), COCYTUS_SLOTS - 1, first) &&
           parse_uint(dash + 1, (size_t)(colon - dash - 1), COCYTUS_SLOTS - 1, last) &&
           *first <= *last;
}

/* The ranges must cover 0..16383 in order, each naming a known endpoint. */
static bool parse_ranges(const char *p, const char *end, struct lc_map *m,
                         char *err, size_t errlen)
{
    const char *tok;
    size_t ntok;
    uint64_t next = 0;

    while (next_token(&p, end, &tok, &ntok)) {
        uint64_t first, last, index;
        if (!parse_range(tok, ntok, &first, &last, &index)) {
            set_err(err, errlen, "bad slot range '%.*s'", (int)ntok, tok);
            return false;
        }
        if (first != next || index >= m->n) {
            set_err(err, errlen, "slot range '%.*s' out of order or naming no endpoint",
                    (int)ntok, tok);
            return false;
        }
        for (uint64_t s = first; s <= last; s++)
            m->owner[s] = (uint16_t)index;
        next = last + 1;
    }
    if (next != COCYTUS_SLOTS) {
        set_err(err, errlen, "slot ranges end at %llu, not %d",
                (unsigned long long)next, COCYTUS_SLOTS);
        return false;
    }
    return true;
}

/* Splits the body into its first three lines ('\n'-terminated). */
static size_t split_lines(const char *body, const char *end, const char *start[3],
                          const char *stop[3])
{
    size_t n = 0;
    const char *p = body;

    while (n < 3 && p < end) {
        const char *nl = line_end(p, end);
        const char *e = nl ? nl : end;
        start[n] = p;
        stop[n] = e;
        n++;
        p = nl ? nl + 1 : end;
    }
    return n;
}

static enum lc_config parse_body(const char *body, const char *end, struct lc_map **out,
                                 char *err, size_t errlen)
{
    const char *start[3], *stop[3];
    size_t nlines = split_lines(body, end, start, stop);
    uint64_t epoch;

    if (nlines < 2) {
        set_err(err, errlen, "config reply has no endpoint line");
        return LC_CONFIG_BAD;
    }
    const char *tok, *p = start[0];
    size_t ntok;
    if (!next_token(&p, stop[0], &tok, &ntok) || !parse_uint(tok, ntok, UINT64_MAX, &epoch)) {
        set_err(err, errlen, "bad epoch line");
        return LC_CONFIG_BAD;
    }
    size_t n = count_tokens(start[1], stop[1]);
    if (n == 0 || n > LC_MAX_ENDPOINTS) {
        set_err(err, errlen, "config reply lists %zu endpoints", n);
        return LC_CONFIG_BAD;
    }
    struct lc_map *m = map_new(n);
    if (m == NULL) {
        set_err(err, errlen, "out of memory");
        return LC_CONFIG_BAD;
    }
    m->epoch = epoch;
    bool has_ranges = nlines == 3 && count_tokens(start[2], stop[2]) > 0;
    bool ok = parse_endpoints(start[1], stop[1], m, err, errlen);
    if (ok && has_ranges)
        ok = parse_ranges(start[2], stop[2], m, err, errlen);
    else if (ok && n > 1) {
        set_err(err, errlen, "config reply has %zu endpoints but no slot ranges", n);
        ok = false;
    }
    if (!ok) {
        lc_map_free(m);
        return LC_CONFIG_BAD;
    }
    *out = m;
    return LC_CONFIG_MAP;
}

enum lc_config lc_config_parse(const char *buf, size_t len, struct lc_map **out,
                               char *err, size_t errlen)
{
    const char *end = buf + len;
    const char *nl = line_end(buf, end);

    *out = NULL;
    if (nl == NULL) {
        set_err(err, errlen, "incomplete config reply");
        return LC_CONFIG_BAD;
    }
    size_t first = (size_t)(nl - buf);
    if (first > 0 && buf[first - 1] == '\r')
        first--;
    if (first == 5 && memcmp(buf, "ERROR", 5) == 0)
        return LC_CONFIG_NO_CLUSTER;
    if (!starts_with(buf, len, config_prefix)) {
        set_err(err, errlen, "config get cluster: %.*s", (int)(first < 200 ? first : 200), buf);
        return LC_CONFIG_BAD;
    }
    const char *body;
    uint64_t nbody;
    if (!parse_config_header(buf, nl, &body, &nbody) || (uint64_t)(end - body) < nbody) {
        set_err(err, errlen, "bad CONFIG header line");
        return LC_CONFIG_BAD;
    }
    return parse_body(body, body + nbody, out, err, errlen);
}

/* ---- MOVED ---- */

bool lc_moved_parse(const char *text, struct lc_moved *out)
{
    const char *m = text ? strstr(text, "MOVED ") : NULL;
    const char *tok, *p, *end;
    size_t ntok;
    uint64_t slot, epoch;

    if (m == NULL)
        return false;
    p = m + 6;
    end = p + strlen(p);
    if (!next_token(&p, end, &tok, &ntok) || !parse_uint(tok, ntok, COCYTUS_SLOTS - 1, &slot))
        return false;
    if (!next_token(&p, end, &tok, &ntok) || !parse_uint(tok, ntok, UINT64_MAX, &epoch))
        return false;
    if (!next_token(&p, end, &tok, &ntok))
        return false;
    while (ntok > 0 && tok[ntok - 1] == ',')   /* libmemcached appends ", host: ..." */
        ntok--;
    if (!lc_addr_parse(tok, ntok, &out->to))
        return false;
    out->slot = (unsigned)slot;
    out->epoch = epoch;
    return true;
}

enum lc_config lc_config_to_map(const char *buf, size_t len, const struct lc_addr *a,
                                struct lc_map **out, char *err, size_t errlen)
{
    enum lc_config kind = lc_config_parse(buf, len, out, err, errlen);

    if (kind == LC_CONFIG_NO_CLUSTER) {
        *out = lc_map_single(a);
        if (*out == NULL) {
            snprintf(err, errlen, "out of memory");
            return LC_CONFIG_BAD;
        }
    }
    return kind;
}
