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
    return k >= RB_BEGIN && k <= RB_TAKEN;
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

static void drop_held(struct rb_units *u)
{
    while (u->held) {
        struct rb_held *h = u->held;
        u->held = h->next;
        free(h);
    }
    u->held_tail = NULL;
    u->held_bytes = 0;
}

void rb_units_destroy(struct rb_units *u)
{
    drop_held(u);
    free(u->t);
    memset(u, 0, sizeof(*u));
}

void rb_units_begin(struct rb_units *u, uint64_t x0, uint64_t end)
{
    size_t first_zero = (size_t)((end + RECOV_UNIT - 1) / RECOV_UNIT);
    drop_held(u);
    u->meta_done = false;
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
    u->taken++;
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
            if (pieceset_put(ps, off, size) != 0) {   /* what it is now replaces what it was */
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

static int apply_meta_message(struct rb_units *u, const uint8_t *p, size_t len,
                              struct meta_table *t, struct pieceset *ps, char *err,
                              size_t errlen)
{
    if (rb_kind_of(p, len) == RB_META_DONE) {
        if (len != HDR + 16) {
            snprintf(err, errlen, "malformed end of the metadata");
            return -1;
        }
        u->meta_done = true;
        return 0;
    }
    return rb_apply_meta(p, len, t, ps, err, errlen);
}

int rb_meta_arrive(struct rb_units *u, uint64_t after, uint64_t applied, const uint8_t *p,
                   size_t len, struct meta_table *t, struct pieceset *ps, char *err,
                   size_t errlen)
{
    u->taken++;
    u->meta_bytes += len;
    if (u->held == NULL && applied >= after)
        return apply_meta_message(u, p, len, t, ps, err, errlen);
    struct rb_held *h = malloc(sizeof(*h) + len);
    if (!h) {
        snprintf(err, errlen, "out of memory keeping a metadata message");
        return -1;
    }
    h->next = NULL;
    h->after = after;
    h->len = len;
    memcpy(h->bytes, p, len);
    if (u->held_tail)
        u->held_tail->next = h;
    else
        u->held = h;
    u->held_tail = h;
    u->held_bytes += len;
    return 0;
}

int rb_meta_catch_up(struct rb_units *u, uint64_t applied, struct meta_table *t,
                     struct pieceset *ps, char *err, size_t errlen)
{
    int rc = 0;
    char later[64];   /* the first error is reported; the rest still apply */
    while (u->held && u->held->after <= applied) {
        struct rb_held *h = u->held;
        u->held = h->next;
        if (!u->held)
            u->held_tail = NULL;
        u->held_bytes -= h->len;
        if (apply_meta_message(u, h->bytes, h->len, t, ps, rc ? later : err,
                               rc ? sizeof(later) : errlen) != 0)
            rc = -1;
        free(h);
    }
    return rc;
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

void rb_msg_meta_done(struct rb_msg *m, uint64_t pieces, uint64_t entries)
{
    start(m, RB_META_DONE);
    uint8_t *p = room(m, 16);
    if (p) {
        put_le(p, pieces, 8);
        put_le(p + 8, entries, 8);
    }
}

void rb_msg_taken(struct rb_msg *m, uint8_t role, uint32_t index, uint64_t taken)
{
    start(m, RB_TAKEN);
    uint8_t *p = room(m, 13);
    if (p) {
        p[0] = role;
        put_le(p + 1, index, 4);
        put_le(p + 5, taken, 8);
    }
}

int rb_decode_taken(const uint8_t *p, size_t len, uint8_t *role, uint32_t *index,
                    uint64_t *taken)
{
    if (len != HDR + 13 || p[8] != RB_TAKEN)
        return -1;
    *role = p[HDR];
    *index = (uint32_t)get_le(p + HDR + 1, 4);
    *taken = get_le(p + HDR + 5, 8);
    return 0;
}

/* ---- the metadata, walked while it changes ---- */

struct meta_walk {
    struct rb_meta_walk *w;
    struct rb_msg *m;
    rb_skip_fn skip;
    void *skip_ctx;
    rb_send_fn send;
    void *ctx;
    size_t sent;             /* bytes this step */
    int rc;
};

static void flush_meta(struct meta_walk *mw, bool force)
{
    size_t chunk = mw->w->chunk ? mw->w->chunk : RB_META_CHUNK;
    if (mw->rc != 0 || (!force && mw->m->len < chunk))
        return;
    if (rb_msg_meta_finish(mw->m)) {
        if (mw->send(mw->ctx, mw->m->buf, mw->m->len) != 0)
            mw->rc = -1;
        mw->sent += mw->m->len;
        mw->w->messages++;
    }
    if (mw->m->oom)
        mw->rc = -1;
    rb_msg_meta_start(mw->m);
}

static void visit_entry(void *ctx, struct item *e)
{
    struct meta_walk *mw = ctx;
    if (mw->skip && mw->skip(mw->skip_ctx, e))
        return;
    rb_msg_meta_entry(mw->m, e);
    mw->w->entries++;
    flush_meta(mw, false);
}

/* Pieces from w->piece_next on until about `bytes` are sent. */
static bool walk_pieces(struct meta_walk *mw, const struct dalloc *a, size_t bytes)
{
    struct dalloc_iter it;
    dalloc_iter_seek(a, &it, mw->w->piece_next);
    uint64_t off, size;
    while (mw->rc == 0 && mw->sent < bytes) {
        if (!dalloc_iter_next_used(&it, &off, &size))
            return true;
        rb_msg_meta_piece(mw->m, off, size);
        mw->w->pieces++;
        mw->w->piece_next = off + size;
        flush_meta(mw, false);
    }
    return false;
}

/* Buckets and entries assoc_walk is given per call: about one message's
 * worth (an entry takes 40-300 bytes), so that a step stops near its
 * byte budget. */
static size_t entry_walk_budget(const struct rb_meta_walk *w)
{
    size_t chunk = w->chunk ? w->chunk : RB_META_CHUNK;
    return chunk / 40 > 8 ? chunk / 40 : 8;
}

int rb_meta_walk_step(struct rb_meta_walk *w, struct meta_table *t, const struct dalloc *a,
                      size_t bytes, rb_skip_fn skip, void *skip_ctx, rb_send_fn send,
                      void *ctx)
{
    struct rb_msg m = { 0 };
    struct meta_walk mw = { w, &m, skip, skip_ctx, send, ctx, 0, 0 };
    rb_msg_meta_start(&m);
    if (w->phase == 0 && walk_pieces(&mw, a, bytes))
        w->phase = 1;
    while (w->phase == 1 && mw.rc == 0 && mw.sent < bytes) {
        if (assoc_walk(&t->table, &w->entry_cursor, entry_walk_budget(w), visit_entry, &mw))
            w->phase = 2;
    }
    flush_meta(&mw, true);
    if (w->phase == 2 && mw.rc == 0) {
        rb_msg_meta_done(&m, w->pieces, w->entries);
        if (m.oom || send(ctx, m.buf, m.len) != 0)
            mw.rc = -1;
        w->messages++;
    }
    rb_msg_free(&m);
    if (mw.rc != 0)
        return -1;
    return w->phase == 2 ? 1 : 0;
}

int rb_send_meta(struct meta_table *t, const struct dalloc *a, rb_send_fn send, void *ctx)
{
    struct rb_meta_walk w = { 0 };
    int rc;
    while ((rc = rb_meta_walk_step(&w, t, a, SIZE_MAX, NULL, NULL, send, ctx)) == 0)
        ;
    return rc < 0 ? -1 : 0;
}
