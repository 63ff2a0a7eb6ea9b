/* rebuild.c - the messages of a rebuild and the per-unit xid tags that let
 * a replica take a source's region while the source keeps writing
 * (rebuild.h explains the rule).  No sockets here: engine_data.c sends,
 * engine_parity.c and engine_data.c receive. */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "pieceset.h"
#include "rebuild.h"
#include "recovery.h"

#define HDR 9u                 /* u64 id, u8 kind */
#define T_PIECE 1
#define T_ENTRY 2

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

bool rb_is_rebuild(const uint8_t *payload, size_t len)
{
    uint8_t k = rb_kind_of(payload, len);
    return k >= RB_BEGIN && k <= RB_END;
}

uint8_t rb_kind_of(const uint8_t *payload, size_t len)
{
    return len >= HDR ? payload[8] : 0;
}

/* ---- units ---- */

int rb_units_init(struct rb_units *u, uint64_t region_size)
{
    memset(u, 0, sizeof(*u));
    u->nunits = (size_t)((region_size + RECOV_UNIT - 1) / RECOV_UNIT);
    u->t = malloc((u->nunits ? u->nunits : 1) * sizeof(*u->t));
    if (!u->t)
        return -1;
    for (size_t i = 0; i < u->nunits; i++)
        u->t[i] = UINT64_MAX;
    return 0;
}

void rb_units_destroy(struct rb_units *u)
{
    free(u->t);
    memset(u, 0, sizeof(*u));
}

void rb_units_begin(struct rb_units *u, uint64_t x0, uint64_t end)
{
    size_t first_zero = (size_t)((end + RECOV_UNIT - 1) / RECOV_UNIT);
    u->begun = true;
    u->base = x0;
    for (size_t i = first_zero; i < u->nunits; i++) {
        if (u->t[i] == UINT64_MAX)
            u->arrived++;
        u->t[i] = x0;
    }
}

void rb_units_filter(const struct rb_units *u, uint64_t xid, uint64_t off, uint64_t len,
                     void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx)
{
    uint64_t end = off + len;
    uint64_t run_off = off, run_len = 0;
    while (off < end) {
        size_t unit = (size_t)(off / RECOV_UNIT);
        uint64_t unit_end = ((uint64_t)unit + 1) * RECOV_UNIT;
        uint64_t piece = (unit_end < end ? unit_end : end) - off;
        bool take = unit < u->nunits && u->t[unit] != UINT64_MAX && xid > u->t[unit];
        if (take) {
            if (run_len == 0)
                run_off = off;
            run_len += piece;
        } else if (run_len) {
            fn(ctx, run_off, run_len);
            run_len = 0;
        }
        off += piece;
    }
    if (run_len)
        fn(ctx, run_off, run_len);
}

void rb_units_arrive(struct rb_units *u, uint64_t t, uint64_t off, uint64_t len,
                     void (*fn)(void *ctx, uint64_t off, uint64_t len), void *ctx)
{
    for (uint64_t o = off; o < off + len; o += RECOV_UNIT) {
        size_t unit = (size_t)(o / RECOV_UNIT);
        if (unit >= u->nunits || u->t[unit] != UINT64_MAX)
            continue;
        u->t[unit] = t;
        u->arrived++;
        uint64_t n = off + len - o < RECOV_UNIT ? off + len - o : RECOV_UNIT;
        u->bytes += n;
        fn(ctx, o, n);
    }
}

/* ---- decoding ---- */

int rb_decode_begin(const uint8_t *p, size_t len, struct rb_begin *b)
{
    /* Without the attempt (28 bytes): from a sender before it was added. */
    if ((len != HDR + 4 + 24 && len != HDR + 4 + 32) || p[8] != RB_BEGIN)
        return -1;
    bool has_attempt = len == HDR + 4 + 32;
    p += HDR;
    b->source = (uint32_t)get_le(p, 4);
    b->x0 = get_le(p + 4, 8);
    b->end = get_le(p + 12, 8);
    b->max_cas = get_le(p + 20, 8);
    b->attempt = has_attempt ? get_le(p + 28, 8) : 0;
    return 0;
}

int rb_apply_meta(const uint8_t *p, size_t len, struct meta_table *t, struct pieceset *ps,
                  char *err, size_t errlen)
{
    if (len < HDR + 4 || p[8] != RB_META) {
        snprintf(err, errlen, "malformed metadata message");
        return -1;
    }
    const uint8_t *q = p + HDR + 4, *end = p + len;
    uint32_t count = (uint32_t)get_le(p + HDR, 4);
    for (uint32_t i = 0; i < count; i++) {
        if (q >= end)
            goto short_msg;
        uint8_t type = *q++;
        if (type == T_PIECE) {
            if (end - q < 16)
                goto short_msg;
            uint64_t off = get_le(q, 8), size = get_le(q + 8, 8);
            q += 16;
            if (pieceset_add(ps, off, size) != 0) {
                snprintf(err, errlen, "piece at %llu of %llu bytes cannot be reserved",
                         (unsigned long long)off, (unsigned long long)size);
                return -1;
            }
        } else if (type == T_ENTRY) {
            if (end - q < 1)
                goto short_msg;
            uint8_t nkey = *q++;
            if (nkey == 0 || end - q < (ptrdiff_t)nkey + 32)
                goto short_msg;
            if (nkey > ITEM_KEY_MAX) {
                snprintf(err, errlen, "entry with a %u-byte key (at most %d)", nkey, ITEM_KEY_MAX);
                return -1;
            }
            const char *key = (const char *)q;
            q += nkey;
            uint64_t off = get_le(q, 8);
            uint32_t nbytes = (uint32_t)get_le(q + 8, 4);
            uint32_t flags = (uint32_t)get_le(q + 12, 4);
            int64_t exptime = (int64_t)get_le(q + 16, 8);
            uint64_t cas = get_le(q + 24, 8);
            q += 32;
            /* As a PUT's replay requires: the value lies in the region
             * (readers take region + off, nbytes without looking again). */
            uint64_t region = pieceset_region_size(ps);
            if (off > region || nbytes > region - off) {
                snprintf(err, errlen, "entry of %u bytes at %llu is outside the region (%llu)",
                         (unsigned)nbytes, (unsigned long long)off,
                         (unsigned long long)region);
                return -1;
            }
            if (!meta_put(t, key, nkey, off, nbytes, flags, exptime, cas)) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
        } else {
            snprintf(err, errlen, "unknown metadata record type %u", type);
            return -1;
        }
    }
    if (q != end)
        goto short_msg;
    return 0;
short_msg:
    snprintf(err, errlen, "metadata message of %zu bytes does not add up", len);
    return -1;
}

int rb_decode_units(const uint8_t *p, size_t len, uint64_t region_size, uint64_t *t,
                    uint64_t *off, const uint8_t **bytes, uint32_t *nbytes)
{
    if (len < HDR + 16 || p[8] != RB_UNITS)
        return -1;
    *t = get_le(p + HDR, 8);
    *off = get_le(p + HDR + 8, 8);
    *bytes = p + HDR + 16;
    *nbytes = (uint32_t)(len - HDR - 16);
    if (*off % RECOV_UNIT != 0 || *off > region_size || *nbytes > region_size - *off)
        return -1;
    if (*nbytes % RECOV_UNIT != 0 && *off + *nbytes != region_size)
        return -1;
    return 0;
}

/* ---- encoding ---- */

static uint8_t *room(struct rb_msg *m, size_t n)
{
    if (m->oom)
        return NULL;
    if (m->len + n > m->cap) {
        size_t cap = m->cap ? m->cap : 1024;
        while (cap < m->len + n)
            cap *= 2;
        uint8_t *b = realloc(m->buf, cap);
        if (!b) {
            m->oom = true;
            return NULL;
        }
        m->buf = b;
        m->cap = cap;
    }
    uint8_t *p = m->buf + m->len;
    m->len += n;
    return p;
}

static void start(struct rb_msg *m, uint8_t kind)
{
    m->len = 0;
    m->count = 0;
    uint8_t *p = room(m, HDR);
    if (p) {
        put_le(p, 0, 8);
        p[8] = kind;
    }
}

void rb_msg_free(struct rb_msg *m)
{
    free(m->buf);
    memset(m, 0, sizeof(*m));
}

void rb_msg_begin(struct rb_msg *m, const struct rb_begin *b)
{
    /* Attempt 0 (a migration's copy) in the form without it, which a
     * receiver older than the field also takes. */
    start(m, RB_BEGIN);
    uint8_t *p = room(m, b->attempt ? 36 : 28);
    if (!p)
        return;
    put_le(p, b->source, 4);
    put_le(p + 4, b->x0, 8);
    put_le(p + 12, b->end, 8);
    put_le(p + 20, b->max_cas, 8);
    if (b->attempt)
        put_le(p + 28, b->attempt, 8);
}

void rb_msg_meta_start(struct rb_msg *m)
{
    start(m, RB_META);
    uint8_t *p = room(m, 4);
    if (p)
        put_le(p, 0, 4);
}

void rb_msg_meta_piece(struct rb_msg *m, uint64_t off, uint64_t size)
{
    uint8_t *p = room(m, 17);
    if (!p)
        return;
    p[0] = T_PIECE;
    put_le(p + 1, off, 8);
    put_le(p + 9, size, 8);
    m->count++;
}

void rb_msg_meta_entry(struct rb_msg *m, const struct item *e)
{
    uint8_t *p = room(m, 2u + e->nkey + 32u);
    if (!p)
        return;
    p[0] = T_ENTRY;
    p[1] = e->nkey;
    memcpy(p + 2, item_key(e), e->nkey);
    p += 2 + e->nkey;
    put_le(p, meta_off(e), 8);
    put_le(p + 8, e->nbytes, 4);
    put_le(p + 12, e->flags, 4);
    put_le(p + 16, (uint64_t)(int64_t)e->exptime, 8);
    put_le(p + 24, e->cas, 8);
    m->count++;
}

bool rb_msg_meta_finish(struct rb_msg *m)
{
    if (m->oom || m->len < HDR + 4)
        return false;
    put_le(m->buf + HDR, m->count, 4);
    return m->count > 0;
}

void rb_msg_units(struct rb_msg *m, uint64_t t, uint64_t off, const uint8_t *bytes,
                  uint32_t len)
{
    start(m, RB_UNITS);
    uint8_t *p = room(m, 16u + len);
    if (!p)
        return;
    put_le(p, t, 8);
    put_le(p + 8, off, 8);
    memcpy(p + 16, bytes, len);
}

void rb_msg_end(struct rb_msg *m, uint64_t units)
{
    start(m, RB_END);
    uint8_t *p = room(m, 8);
    if (p)
        put_le(p, units, 8);
}

/* ---- the whole metadata ---- */

struct meta_walk {
    struct rb_msg *m;
    int (*send)(void *ctx, const uint8_t *p, size_t len);
    void *ctx;
    int rc;
};

static void flush_meta(struct meta_walk *w, bool force)
{
    if (w->rc != 0 || (!force && w->m->len < RB_META_CHUNK))
        return;
    if (rb_msg_meta_finish(w->m) && w->send(w->ctx, w->m->buf, w->m->len) != 0)
        w->rc = -1;
    if (w->m->oom)
        w->rc = -1;
    rb_msg_meta_start(w->m);
}

static void visit_entry(void *ctx, struct item *e)
{
    struct meta_walk *w = ctx;
    rb_msg_meta_entry(w->m, e);
    flush_meta(w, false);
}

int rb_send_meta(struct meta_table *t, const struct dalloc *a,
                 int (*send)(void *ctx, const uint8_t *p, size_t len), void *ctx)
{
    struct rb_msg m = { 0 };
    struct meta_walk w = { &m, send, ctx, 0 };
    rb_msg_meta_start(&m);
    struct dalloc_iter it;
    dalloc_iter_init(a, &it);
    uint64_t off, size;
    while (w.rc == 0 && dalloc_iter_next_used(&it, &off, &size)) {
        rb_msg_meta_piece(&m, off, size);
        flush_meta(&w, false);
    }
    if (w.rc == 0)
        meta_iterate(t, visit_entry, &w);
    flush_meta(&w, true);
    rb_msg_free(&m);
    return w.rc;
}
