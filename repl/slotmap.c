/* slotmap.c - the slot map: the key -> slot hash, the initial placement of
 * slots by consistent hashing, lookups, and the `config get cluster` text
 * form (encode and strict decode).  See slotmap.h and docs/routing.md. */
#include "config.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slotmap.h"

/* ---- key -> slot ---- */

uint32_t slotmap_hash(const char *key, size_t nkey)
{
    uint32_t h = 0;
    for (size_t i = 0; i < nkey; i++) {
        /* libhashkit adds (uint32_t)*ptr with ptr a char *: bytes >= 0x80
         * are sign-extended on x86, so do the same everywhere. */
        h += (uint32_t)(int32_t)(signed char)key[i];
        h += h << 10;
        h ^= h >> 6;
    }
    h += h << 3;
    h ^= h >> 11;
    h += h << 15;
    return h;
}

/* ---- messages ---- */

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- building from a cluster ---- */

static bool role_serves(enum cluster_role r)
{
    return r == ROLE_PLAIN || r == ROLE_DATA || r == ROLE_PRIMARY;
}

static int compare_endpoints(const void *pa, const void *pb)
{
    const struct slotmap_endpoint *a = pa, *b = pb;
    if (a->group != b->group)
        return a->group < b->group ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static void endpoint_from_proc(struct slotmap_endpoint *e, const struct cluster_proc *p)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->host, sizeof(e->host), "%s", p->host);
    e->port = p->port;
    e->group = p->group;
    e->role = p->role;
    e->index = p->index;
}

int slotmap_build(struct slotmap *m, const struct cluster *c, uint64_t epoch,
                  char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    int n = 0;
    for (int i = 0; i < c->nprocs; i++)
        n += role_serves(c->procs[i].role);
    if (n == 0)
        return fail(err, errlen, "the cluster has no serving process");
    if (n > SLOTMAP_MAX_ENDPOINTS)
        return fail(err, errlen, "%d serving processes, at most %d", n, SLOTMAP_MAX_ENDPOINTS);
    m->endpoints = calloc((size_t)n, sizeof(*m->endpoints));
    if (!m->endpoints)
        return fail(err, errlen, "out of memory");
    for (int i = 0; i < c->nprocs; i++)
        if (role_serves(c->procs[i].role))
            endpoint_from_proc(&m->endpoints[m->nendpoints++], &c->procs[i]);
    qsort(m->endpoints, (size_t)n, sizeof(*m->endpoints), compare_endpoints);
    m->epoch = epoch;
    slotmap_place(m);
    return 0;
}

/* ---- consistent hashing ---- */

struct ring_point {
    uint32_t pos;
    uint16_t endpoint;
};

static int compare_points(const void *pa, const void *pb)
{
    const struct ring_point *a = pa, *b = pb;
    if (a->pos != b->pos)
        return a->pos < b->pos ? -1 : 1;
    return (a->endpoint > b->endpoint) - (a->endpoint < b->endpoint);
}

/* Position of an endpoint's v-th virtual point: the hash of a name that
 * stays the same while the process keeps its place in its group. */
static uint32_t point_position(const struct slotmap_endpoint *e, int v)
{
    char name[SLOTMAP_HOST_MAX + 40];
    int n;
    if (e->group >= 0)
        n = snprintf(name, sizeof(name), "group %d index %d point %d", e->group, e->index, v);
    else
        n = snprintf(name, sizeof(name), "%s:%d point %d", e->host, e->port, v);
    return slotmap_hash(name, (size_t)n);
}

/* Slot s owns the ring arc [s, s+1) * 2^32 / SLOTMAP_SLOTS; it goes to the
 * first point at or after the middle of its arc. */
static uint32_t slot_position(unsigned slot)
{
    const uint32_t arc = (uint32_t)(((uint64_t)1 << 32) / SLOTMAP_SLOTS);
    return slot * arc + arc / 2;
}

/* Equal-weight fallback when there is no memory for the ring. */
static void place_round_robin(struct slotmap *m)
{
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        m->slot[s] = (uint16_t)(s % (unsigned)m->nendpoints);
}

void slotmap_place(struct slotmap *m)
{
    if (m->nendpoints <= 0)
        return;
    size_t npoints = (size_t)m->nendpoints * SLOTMAP_VNODES;
    struct ring_point *ring = malloc(npoints * sizeof(*ring));
    if (!ring) {
        place_round_robin(m);
        return;
    }
    size_t k = 0;
    for (int e = 0; e < m->nendpoints; e++)
        for (int v = 0; v < SLOTMAP_VNODES; v++, k++) {
            ring[k].pos = point_position(&m->endpoints[e], v);
            ring[k].endpoint = (uint16_t)e;
        }
    qsort(ring, npoints, sizeof(*ring), compare_points);
    size_t p = 0;
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++) {
        uint32_t pos = slot_position(s);
        while (p < npoints && ring[p].pos < pos)
            p++;
        m->slot[s] = ring[p < npoints ? p : 0].endpoint;
    }
    free(ring);
}

/* ---- lookups ---- */

void slotmap_free(struct slotmap *m)
{
    free(m->endpoints);
    m->endpoints = NULL;
    m->nendpoints = 0;
}

const struct slotmap_endpoint *slotmap_owner(const struct slotmap *m, unsigned slot)
{
    return &m->endpoints[m->slot[slot & (SLOTMAP_SLOTS - 1)]];
}

int slotmap_find(const struct slotmap *m, const char *host, int port)
{
    for (int i = 0; i < m->nendpoints; i++)
        if (m->endpoints[i].port == port && strcmp(m->endpoints[i].host, host) == 0)
            return i;
    return -1;
}

bool slotmap_endpoint_same(const struct slotmap_endpoint *a, const struct slotmap_endpoint *b)
{
    if (a->group >= 0 && b->group >= 0)
        return a->group == b->group && a->index == b->index;
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

unsigned slotmap_moved(const struct slotmap *a, const struct slotmap *b)
{
    unsigned moved = 0;
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        moved += !slotmap_endpoint_same(slotmap_owner(a, s), slotmap_owner(b, s));
    return moved;
}

size_t slotmap_moved_text(const struct slotmap *m, unsigned slot, char *buf, size_t buflen)
{
    const struct slotmap_endpoint *e = slotmap_owner(m, slot);
    int n = snprintf(buf, buflen, "%u %llu %s:%d", slot, (unsigned long long)m->epoch,
                     e->host, e->port);
    if (n < 0)
        return 0;
    return (size_t)n < buflen ? (size_t)n : buflen - 1;
}

/* ---- encoding ---- */

/* A growing string; failed stays set after a failed allocation. */
struct strbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(struct strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static bool sb_start(struct strbuf *b, size_t cap)
{
    b->p = malloc(cap);
    b->len = 0;
    b->cap = cap;
    b->failed = b->p == NULL;
    if (b->p)
        b->p[0] = '\0';
    return !b->failed;
}

static char *sb_finish(struct strbuf *b, size_t *len)
{
    if (b->failed) {
        free(b->p);
        return NULL;
    }
    *len = b->len;
    return b->p;
}

static bool host_is_numeric(const char *host)
{
    unsigned char addr[16];
    return inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
}

/* "<host>|<ip>|<port>": the ip field repeats a numeric host and is empty
 * for a name. */
static void encode_endpoints(struct strbuf *b, const struct slotmap *m)
{
    for (int i = 0; i < m->nendpoints; i++) {
        const struct slotmap_endpoint *e = &m->endpoints[i];
        sb_printf(b, "%s%s|%s|%d", i ? " " : "", e->host,
                  host_is_numeric(e->host) ? e->host : "", e->port);
    }
    sb_printf(b, "\n");
}

static void encode_ranges(struct strbuf *b, const struct slotmap *m)
{
    unsigned first = 0;
    for (unsigned s = 1; s <= SLOTMAP_SLOTS; s++) {
        if (s < SLOTMAP_SLOTS && m->slot[s] == m->slot[first])
            continue;
        sb_printf(b, "%s%u-%u:%u", first ? " " : "", first, s - 1, (unsigned)m->slot[first]);
        first = s;
    }
    sb_printf(b, "\n");
}

static void encode_body(struct strbuf *b, const struct slotmap *m)
{
    sb_printf(b, "%llu\n", (unsigned long long)m->epoch);
    encode_endpoints(b, m);
    encode_ranges(b, m);
}

char *slotmap_encode(const struct slotmap *m, size_t *len)
{
    struct strbuf b;
    if (!sb_start(&b, 4096))
        return NULL;
    encode_body(&b, m);
    return sb_finish(&b, len);
}

char *slotmap_config_reply(const struct slotmap *m, size_t *len)
{
    size_t nbody;
    char *body = slotmap_encode(m, &nbody);
    if (!body)
        return NULL;
    struct strbuf b;
    if (sb_start(&b, nbody + 64))
        sb_printf(&b, "CONFIG cluster 0 %zu\r\n%s\r\nEND\r\n", nbody, body);
    free(body);
    return sb_finish(&b, len);
}

/* ---- decoding ---- */

/* A view of part of the input. */
struct span {
    const char *p;
    size_t n;
};

static bool span_u64(struct span s, uint64_t *out)
{
    if (s.n == 0 || s.n > 20)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
        unsigned d = (unsigned)(s.p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Decimal in [lo, hi]. */
static bool span_uint(struct span s, uint64_t lo, uint64_t hi, unsigned *out)
{
    uint64_t v;
    if (!span_u64(s, &v) || v < lo || v > hi)
        return false;
    *out = (unsigned)v;
    return true;
}

/* Split *rest at the first ch: *head gets what is before it.  False when
 * ch does not occur. */
static bool span_split(struct span *rest, char ch, struct span *head)
{
    const char *at = memchr(rest->p, ch, rest->n);
    if (!at)
        return false;
    head->p = rest->p;
    head->n = (size_t)(at - rest->p);
    rest->n -= head->n + 1;
    rest->p = at + 1;
    return true;
}

/* Space-separated tokens of a line.  Two spaces in a row or a leading or
 * trailing space yield an empty token, which the callers refuse. */
struct tokens {
    struct span rest;
    bool done;
};

static void tokens_start(struct tokens *t, struct span line)
{
    t->rest = line;
    t->done = line.n == 0;
}

static bool next_token(struct tokens *t, struct span *tok)
{
    if (t->done)
        return false;
    if (!span_split(&t->rest, ' ', tok)) {
        *tok = t->rest;
        t->done = true;
    }
    return true;
}

static int decode_epoch(struct slotmap *m, struct span line, char *err, size_t errlen)
{
    if (!span_u64(line, &m->epoch))
        return fail(err, errlen, "line 1: epoch '%.*s' is not a decimal number",
                    (int)(line.n > 40 ? 40 : line.n), line.p);
    return 0;
}

static size_t count_tokens(struct span line)
{
    size_t n = line.n ? 1 : 0;
    for (size_t i = 0; i < line.n; i++)
        n += line.p[i] == ' ';
    return n;
}

/* "<host>|<ip>|<port>" into e. */
static int decode_endpoint(struct slotmap_endpoint *e, struct span tok, int i,
                           char *err, size_t errlen)
{
    struct span host, ip, rest = tok;
    unsigned port;
    if (!span_split(&rest, '|', &host) || !span_split(&rest, '|', &ip) ||
        memchr(rest.p, '|', rest.n))
        return fail(err, errlen, "line 2: endpoint %d is not <host>|<ip>|<port>", i);
    if (!span_uint(rest, 1, 65535, &port))
        return fail(err, errlen, "line 2: endpoint %d has a bad port", i);
    struct span name = host.n ? host : ip;
    if (name.n == 0 || name.n >= sizeof(e->host))
        return fail(err, errlen, "line 2: endpoint %d has %s host", i,
                    name.n ? "too long a" : "no");
    /* A NUL would cut the name short (to nothing, even) and a control byte
     * would end up in MOVED lines: neither is any host's name. */
    for (size_t k = 0; k < name.n; k++)
        if ((unsigned char)name.p[k] < 0x20 || name.p[k] == 0x7f)
            return fail(err, errlen, "line 2: endpoint %d has a control byte in its host", i);
    memset(e, 0, sizeof(*e));
    memcpy(e->host, name.p, name.n);
    e->port = (int)port;
    e->group = -1;
    e->role = ROLE_PLAIN;
    e->index = -1;
    return 0;
}

static int decode_endpoints(struct slotmap *m, struct span line, char *err, size_t errlen)
{
    size_t n = count_tokens(line);
    if (n == 0)
        return fail(err, errlen, "line 2: no endpoint");
    if (n > SLOTMAP_MAX_ENDPOINTS)
        return fail(err, errlen, "line 2: more than %d endpoints", SLOTMAP_MAX_ENDPOINTS);
    m->endpoints = calloc(n, sizeof(*m->endpoints));
    if (!m->endpoints)
        return fail(err, errlen, "out of memory");
    struct tokens t;
    struct span tok;
    tokens_start(&t, line);
    while (next_token(&t, &tok)) {
        if (tok.n == 0)
            return fail(err, errlen, "line 2: empty endpoint %d", m->nendpoints);
        if (decode_endpoint(&m->endpoints[m->nendpoints], tok, m->nendpoints, err, errlen) < 0)
            return -1;
        m->nendpoints++;
    }
    return 0;
}

/* "<first>-<last>:<index>", which must start at *next; advances *next. */
static int decode_range(struct slotmap *m, struct span tok, unsigned *next,
                        char *err, size_t errlen)
{
    struct span first, last, rest = tok;
    unsigned a, b, idx;
    if (!span_split(&rest, '-', &first) || !span_split(&rest, ':', &last) ||
        !span_uint(first, 0, SLOTMAP_SLOTS - 1, &a) || !span_uint(last, 0, SLOTMAP_SLOTS - 1, &b) ||
        !span_uint(rest, 0, (uint64_t)m->nendpoints - 1, &idx))
        return fail(err, errlen, "line 3: bad range '%.*s' (want <first>-<last>:<endpoint>)",
                    (int)(tok.n > 40 ? 40 : tok.n), tok.p);
    if (a != *next || b < a)
        return fail(err, errlen, "line 3: range %u-%u does not follow slot %u (ranges must "
                    "cover 0-%u in order)", a, b, *next, SLOTMAP_SLOTS - 1);
    for (unsigned s = a; s <= b; s++)
        m->slot[s] = (uint16_t)idx;
    *next = b + 1;
    return 0;
}

static int decode_ranges(struct slotmap *m, struct span line, char *err, size_t errlen)
{
    unsigned next = 0;
    struct tokens t;
    struct span tok;
    tokens_start(&t, line);
    while (next_token(&t, &tok)) {
        if (tok.n == 0)
            return fail(err, errlen, "line 3: empty range after slot %u", next);
        if (next == SLOTMAP_SLOTS)
            return fail(err, errlen, "line 3: ranges beyond slot %u", SLOTMAP_SLOTS - 1);
        if (decode_range(m, tok, &next, err, errlen) < 0)
            return -1;
    }
    if (next != SLOTMAP_SLOTS)
        return fail(err, errlen, "line 3: slots %u-%u are not covered", next, SLOTMAP_SLOTS - 1);
    return 0;
}

static int decode_lines(struct slotmap *m, struct span body, char *err, size_t errlen)
{
    struct span line[3];
    for (int i = 0; i < 3; i++)
        if (!span_split(&body, '\n', &line[i]))
            return fail(err, errlen, "line %d is missing or not terminated by a newline", i + 1);
    if (body.n != 0)
        return fail(err, errlen, "%zu bytes after line 3", body.n);
    if (decode_epoch(m, line[0], err, errlen) < 0 || decode_endpoints(m, line[1], err, errlen) < 0)
        return -1;
    return decode_ranges(m, line[2], err, errlen);
}

int slotmap_decode(struct slotmap *m, const char *body, size_t len, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    struct span s = { body, len };
    if (decode_lines(m, s, err, errlen) < 0) {
        slotmap_free(m);
        return -1;
    }
    return 0;
}

#define CONFIG_PREFIX "CONFIG cluster 0 "
#define CONFIG_TRAILER "\r\nEND\r\n"
#define CONFIG_HEADER_MAX 64
#define CONFIG_BODY_MAX (64u << 20)

int slotmap_parse_config_reply(struct slotmap *m, const char *text, size_t len, size_t *used,
                               char *err, size_t errlen)
{
    const size_t nprefix = sizeof(CONFIG_PREFIX) - 1, ntrailer = sizeof(CONFIG_TRAILER) - 1;
    size_t window = len < CONFIG_HEADER_MAX ? len : CONFIG_HEADER_MAX;
    const char *nl = memchr(text, '\n', window);
    if (!nl)
        return window < CONFIG_HEADER_MAX ? 1 : fail(err, errlen, "no CONFIG line");
    if ((size_t)(nl - text) < nprefix + 2 || memcmp(text, CONFIG_PREFIX, nprefix) != 0 ||
        nl[-1] != '\r')
        return fail(err, errlen, "not a 'CONFIG cluster 0 <bytes>' line");
    struct span count = { text + nprefix, (size_t)(nl - text) - nprefix - 1 };
    uint64_t nbody;
    if (!span_u64(count, &nbody) || nbody > CONFIG_BODY_MAX)
        return fail(err, errlen, "bad byte count in the CONFIG line");
    size_t header = (size_t)(nl - text) + 1;
    if (len - header < nbody + ntrailer)
        return 1;
    if (memcmp(text + header + nbody, CONFIG_TRAILER, ntrailer) != 0)
        return fail(err, errlen, "the body is not followed by \\r\\nEND\\r\\n");
    if (slotmap_decode(m, text + header, (size_t)nbody, err, errlen) < 0)
        return -1;
    *used = header + (size_t)nbody + ntrailer;
    return 0;
}
