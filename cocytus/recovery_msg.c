/* recovery_msg.c - the plain data of recovery (see recovery.h): the group
 * view's text form, the bitmap of recovered units, and the byte layout of
 * the recovery messages.  No sockets and no state beyond the arguments, so
 * the unit tests drive every function directly. */
#include "recovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- group view ---- */

void group_view_init(struct group_view *v, int k, int m)
{
    memset(v, 0, sizeof(*v));
    v->k = k;
    v->m = m;
    for (int i = 0; i < RECOV_MAX_K; i++)
        v->dp_server[i] = -1;
    for (int j = 0; j < RECOV_MAX_M; j++) {
        v->pp_state[j] = GV_PP_PARITY;
        v->pp_serves[j] = -1;
    }
}

/* A small decimal: digits only, at most 3 of them. */
static bool small_number(const char *p, size_t n, int *out)
{
    if (n == 0 || n > 3)
        return false;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return true;
}

/* Next comma-separated entry of [*p, end): its start and length. */
static bool next_entry(const char **p, const char *end, const char **e, size_t *n)
{
    if (*p > end)
        return false;
    const char *comma = memchr(*p, ',', (size_t)(end - *p));
    *e = *p;
    *n = (size_t)((comma ? comma : end) - *p);
    *p = comma ? comma + 1 : end + 1;
    return *n > 0;
}

static bool parse_dps(struct group_view *v, const char *p, const char *end)
{
    for (int i = 0; i < v->k; i++) {
        const char *e;
        size_t n;
        int r;
        if (!next_entry(&p, end, &e, &n))
            return false;
        if (n == 1 && e[0] == '-')
            v->dp_server[i] = -1;
        else if (n == 1 && e[0] == 'x')
            v->dp_server[i] = -2;
        else if (e[0] == 'p' && small_number(e + 1, n - 1, &r) && r < v->m)
            v->dp_server[i] = r;
        else
            return false;
    }
    return p == end + 1;
}

static bool parse_pps(struct group_view *v, const char *p, const char *end)
{
    for (int j = 0; j < v->m; j++) {
        const char *e;
        size_t n;
        int f;
        if (!next_entry(&p, end, &e, &n))
            return false;
        v->pp_serves[j] = -1;
        if (n == 1 && e[0] == 'p')
            v->pp_state[j] = GV_PP_PARITY;
        else if (n == 1 && e[0] == 'x')
            v->pp_state[j] = GV_PP_DEAD;
        else if (n == 1 && e[0] == 'b')
            v->pp_state[j] = GV_PP_REBUILDING;
        else if (e[0] == 's' && small_number(e + 1, n - 1, &f) && f < v->k) {
            v->pp_state[j] = GV_PP_SERVING;
            v->pp_serves[j] = f;
        } else
            return false;
    }
    return p == end + 1;
}

int group_view_parse(struct group_view *v, int k, int m, const char *text, size_t len)
{
    if (k < 1 || k > RECOV_MAX_K || m < 1 || m > RECOV_MAX_M)
        return -1;
    const char *end = text + len;
    const char *sp1 = memchr(text, ' ', len);
    if (!sp1)
        return -1;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1));
    if (!sp2 || sp2 + 1 >= end || memchr(sp2 + 1, ' ', (size_t)(end - sp2 - 1)))
        return -1;
    /* The version: digits only (a NUL must not end it early), below 2^64. */
    uint64_t version = 0;
    if (sp1 == text)
        return -1;
    for (const char *p = text; p < sp1; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (*p < '0' || *p > '9' || version > (UINT64_MAX - d) / 10)
            return -1;
        version = version * 10 + d;
    }
    struct group_view nv;
    group_view_init(&nv, k, m);
    nv.version = version;
    if (!parse_dps(&nv, sp1 + 1, sp2) || !parse_pps(&nv, sp2 + 1, end))
        return -1;
    *v = nv;
    return 0;
}

size_t group_view_format(const struct group_view *v, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%llu ", (unsigned long long)v->version);
    for (int i = 0; i < v->k && n < len; i++) {
        const char *sep = i ? "," : "";
        if (v->dp_server[i] == -1)
            n += (size_t)snprintf(buf + n, len - n, "%s-", sep);
        else if (v->dp_server[i] < 0)
            n += (size_t)snprintf(buf + n, len - n, "%sx", sep);
        else
            n += (size_t)snprintf(buf + n, len - n, "%sp%d", sep, v->dp_server[i]);
    }
    for (int j = 0; j < v->m && n < len; j++) {
        const char *sep = j ? "," : " ";
        if (v->pp_state[j] == GV_PP_PARITY)
            n += (size_t)snprintf(buf + n, len - n, "%sp", sep);
        else if (v->pp_state[j] == GV_PP_DEAD)
            n += (size_t)snprintf(buf + n, len - n, "%sx", sep);
        else if (v->pp_state[j] == GV_PP_REBUILDING)
            n += (size_t)snprintf(buf + n, len - n, "%sb", sep);
        else
            n += (size_t)snprintf(buf + n, len - n, "%ss%d", sep, v->pp_serves[j]);
    }
    return n < len ? n : len - 1;
}

int group_view_leader(const struct group_view *v)
{
    for (int j = 0; j < v->m; j++)
        if (v->pp_state[j] == GV_PP_SERVING)
            return j;
    return -1;
}

/* ---- units ---- */

int unit_map_init(struct unit_map *u, uint64_t region_size)
{
    memset(u, 0, sizeof(*u));
    u->region_size = region_size;
    u->nunits = (size_t)((region_size + RECOV_UNIT - 1) / RECOV_UNIT);
    u->bits = calloc((u->nunits + 7) / 8 + 1, 1);
    return u->bits ? 0 : -1;
}

void unit_map_destroy(struct unit_map *u)
{
    free(u->bits);
    memset(u, 0, sizeof(*u));
}

void unit_map_set(struct unit_map *u, size_t unit)
{
    if (unit >= u->nunits || unit_map_has(u, unit))
        return;
    u->bits[unit >> 3] |= (uint8_t)(1u << (unit & 7));
    u->done++;
}

bool unit_map_covers(const struct unit_map *u, uint64_t off, uint64_t len)
{
    if (len == 0)
        return true;
    size_t first = (size_t)(off / RECOV_UNIT), last = (size_t)((off + len - 1) / RECOV_UNIT);
    for (size_t i = first; i <= last && i < u->nunits; i++)
        if (!unit_map_has(u, i))
            return false;
    return true;
}

size_t unit_map_next_missing(const struct unit_map *u, size_t from)
{
    size_t i = from;
    while (i < u->nunits) {
        if ((i & 7) == 0 && u->bits[i >> 3] == 0xff) {
            i += 8;
            continue;
        }
        if (!unit_map_has(u, i))
            return i;
        i++;
    }
    return u->nunits;
}

/* ---- messages ----
 *
 *   u64 id, u8 kind, u32 who, u64 t, u8 nlist, u8[nlist] list,
 *   u16 nranges, nranges x (u64 off, u32 len), then the bytes (DATA,
 *   RESIDUAL, DECODED: exactly the ranges' total; others: none). */

#define HDR_FIXED (8 + 1 + 4 + 8 + 1 + 2)

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t recov_ranges_bytes(const struct recov_range *r, int n)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += r[i].len;
    return total;
}

size_t recov_header_max(void)
{
    return HDR_FIXED + RECOV_MAX_K + RECOV_MAX_M + (size_t)RECOV_MAX_RANGES * 12;
}

size_t recov_encode_header(const struct recov_msg *m, uint8_t *buf)
{
    uint8_t *p = buf;
    put_le(p, m->id, 8);
    p += 8;
    *p++ = m->kind;
    put_le(p, m->who, 4);
    p += 4;
    put_le(p, m->t, 8);
    p += 8;
    *p++ = (uint8_t)m->nlist;
    memcpy(p, m->list, (size_t)m->nlist);
    p += m->nlist;
    put_le(p, (uint64_t)m->nranges, 2);
    p += 2;
    for (int i = 0; i < m->nranges; i++) {
        put_le(p, m->ranges[i].off, 8);
        put_le(p + 8, m->ranges[i].len, 4);
        p += 12;
    }
    return (size_t)(p - buf);
}

static bool kind_has_bytes(uint8_t kind)
{
    return kind == RK_DATA || kind == RK_RESIDUAL || kind == RK_DECODED;
}

int recov_decode(const uint8_t *payload, size_t len, struct recov_msg *m)
{
    memset(m, 0, sizeof(*m));
    if (len < HDR_FIXED)
        return -1;
    const uint8_t *p = payload, *end = payload + len;
    m->id = get_le(p, 8);
    p += 8;
    m->kind = *p++;
    if (m->kind < RK_FETCH || m->kind > RK_HAVE)
        return -1;
    m->who = (uint32_t)get_le(p, 4);
    p += 4;
    m->t = get_le(p, 8);
    p += 8;
    m->nlist = *p++;
    if (m->nlist > (int)sizeof(m->list) || (size_t)(end - p) < (size_t)m->nlist + 2)
        return -1;
    memcpy(m->list, p, (size_t)m->nlist);
    p += m->nlist;
    m->nranges = (int)get_le(p, 2);
    p += 2;
    if (m->nranges > RECOV_MAX_RANGES || (size_t)(end - p) < (size_t)m->nranges * 12)
        return -1;
    for (int i = 0; i < m->nranges; i++) {
        m->ranges[i].off = get_le(p, 8);
        m->ranges[i].len = (uint32_t)get_le(p + 8, 4);
        p += 12;
        if (m->ranges[i].len == 0 || m->ranges[i].off % RECOV_UNIT != 0 ||
            m->ranges[i].off + m->ranges[i].len < m->ranges[i].off)
            return -1;
    }
    m->bytes = p;
    m->nbytes = (uint64_t)(end - p);
    uint64_t want = kind_has_bytes(m->kind) ? recov_ranges_bytes(m->ranges, m->nranges) : 0;
    return m->nbytes == want ? 0 : -1;
}
