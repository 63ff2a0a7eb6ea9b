/* parity.c - what a parity process does with a coding group's records (see
 * parity.h); no sockets here, so tests drive it directly.
 *
 * Per data process i, a struct repl_source (repl/receiver.c) checks and
 * buffers records as they arrive and hands them back in order once they are
 * stable.  Applying one is this file's part: its ops are replayed on the
 * backup table and the used pieces (meta_replay_op), then a(j,i) * delta
 * is XORed into the parity region.  Anything that disagrees marks DP i
 * diverged with a message; from then on its records are refused. */
#include "parity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "alloc.h"
#include "pieceset.h"
#include "codec.h"
#include "rebuild.h"
#include "recovery.h"

/* ---- setup ---- */

static int region_map(struct parity *p, uint64_t size)
{
    void *r = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return -1;
    p->region = r;
    p->region_size = size;
    return 0;
}

static int dp_init(struct parity_dp *d, uint64_t region_size, unsigned hashpower)
{
    if (meta_init(&d->meta, hashpower) != 0)
        return -1;
    d->pieces = pieceset_new(region_size);
    return d->pieces != NULL ? 0 : -1;
}

static void dp_destroy(struct parity_dp *d)
{
    repl_source_destroy(&d->src);
    meta_destroy(&d->meta);
    pieceset_destroy(d->pieces);
    d->pieces = NULL;
}

int parity_init(struct parity *p, int k, int n, int parity_index, uint64_t region_size,
                unsigned hashpower, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    if (k < 1 || n <= k || n > 256 || parity_index < 0 || parity_index >= n - k) {
        snprintf(err, errlen, "bad coding group: k %d n %d parity index %d", k, n, parity_index);
        return -1;
    }
    if (region_size == 0 || region_size % DALLOC_GRAIN != 0) {
        snprintf(err, errlen, "region size %" PRIu64 " is not a positive multiple of %d",
                 region_size, DALLOC_GRAIN);
        return -1;
    }
    p->k = k;
    p->m = n - k;
    p->parity_index = parity_index;
    p->dps = calloc((size_t)k, sizeof(*p->dps));
    if (p->dps == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < k; i++) {
        p->dps[i].parity = p;
        p->dps[i].index = i;
        repl_source_init(&p->dps[i].src);
    }
    p->codec = codec_new(k, n, CODEC_BACKEND_DEFAULT);
    if (p->codec == NULL) {
        snprintf(err, errlen, "cannot create the RS(%d,%d) codec", k, n);
        goto fail;
    }
    if (region_map(p, region_size) != 0) {
        snprintf(err, errlen, "cannot map a parity region of %" PRIu64 " bytes: %s",
                 region_size, strerror(errno));
        goto fail;
    }
    for (int i = 0; i < k; i++) {
        if (dp_init(&p->dps[i], region_size, hashpower) != 0) {
            snprintf(err, errlen, "out of memory for data process %d's tables", i);
            goto fail;
        }
    }
    return 0;
fail:
    parity_destroy(p);
    return -1;
}

void parity_destroy(struct parity *p)
{
    for (int i = 0; p->dps != NULL && i < p->k; i++)
        dp_destroy(&p->dps[i]);
    free(p->dps);
    if (p->region != NULL)
        munmap(p->region, p->region_size);
    codec_free(p->codec);
    memset(p, 0, sizeof(*p));
}

/* ---- receive ---- */

enum repl_rx parity_receive(struct parity *p, int dp, const uint8_t *rec, size_t len,
                            uint64_t *stable)
{
    return repl_source_receive(&p->dps[dp].src, rec, len, stable);
}

/* ---- apply ---- */

static bool delta_in_region(const struct parity *p, const struct record *r)
{
    return r->data_off <= p->region_size && r->data_len <= p->region_size - r->data_off;
}

static int replay_ops(struct parity_dp *d, const struct record *r)
{
    char err[REPL_WHY_MAX - 64];
    /* A rebuild's metadata that came right after the record before this
     * one goes first (rebuild.h). */
    if (d->rb && rb_meta_catch_up(d->rb, r->xid - 1, &d->meta, d->pieces, err, sizeof(err)) != 0)
        return repl_source_mark_diverged(&d->src, r->xid, "rebuild metadata: %s", err);
    bool lenient = rb_meta_lenient(d->rb);
    for (uint32_t n = 0; n < r->nops; n++) {
        if (meta_replay_op(&d->meta, d->pieces, &r->ops[n], lenient, err, sizeof(err)) != 0)
            return repl_source_mark_diverged(&d->src, r->xid, "op %" PRIu32 " of %" PRIu32
                                             ": %s", n + 1, r->nops, err);
    }
    return 0;
}

/* On a recovery process only the units that are still parity take the
 * delta: the others hold the served DP's data now. */
static void xor_parity_units(struct parity *p, struct parity_dp *d, const struct record *r)
{
    const struct unit_map *u = p->data_units;
    uint64_t off = r->data_off, end = r->data_off + r->data_len;
    while (off < end) {
        uint64_t unit_end = (off / RECOV_UNIT + 1) * RECOV_UNIT;
        uint64_t run_end = unit_end < end ? unit_end : end;
        bool parity = !unit_map_has(u, (size_t)(off / RECOV_UNIT));
        /* Extend the run over following units of the same kind. */
        while (run_end < end &&
               !unit_map_has(u, (size_t)(run_end / RECOV_UNIT)) == parity) {
            run_end += RECOV_UNIT;
            if (run_end > end)
                run_end = end;
        }
        if (parity)
            codec_delta_apply(p->codec, p->parity_index, d->index, p->region + off,
                              r->data + (off - r->data_off), (size_t)(run_end - off));
        off = run_end;
    }
}

struct rb_apply {
    struct parity *p;
    struct parity_dp *d;
    const struct record *r;
};

static void xor_rebuilt_run(void *ctx, uint64_t off, uint64_t len)
{
    struct rb_apply *a = ctx;
    codec_delta_apply(a->p->codec, a->p->parity_index, a->d->index, a->p->region + off,
                      a->r->data + (off - a->r->data_off), (size_t)len);
}

static void xor_delta(struct parity *p, struct parity_dp *d, const struct record *r)
{
    if (r->data_len == 0)
        return;
    if (d->rb) {
        struct rb_apply a = { p, d, r };
        rb_units_filter(d->rb, r->xid, r->data_off, r->data_len, xor_rebuilt_run, &a);
    } else if (p->data_units)
        xor_parity_units(p, d, r);
    else
        codec_delta_apply(p->codec, p->parity_index, d->index, p->region + r->data_off,
                          r->data, r->data_len);
    d->delta_bytes += r->data_len;
    if (r->data_off + r->data_len > p->touched_end)
        p->touched_end = r->data_off + r->data_len;
    if (r->data_off + r->data_len > d->touched_end)
        d->touched_end = r->data_off + r->data_len;
}

/* The repl_apply_fn of a parity process: ctx is the DP's parity_dp. */
static int apply_record(void *ctx, const struct record *r)
{
    struct parity_dp *d = ctx;
    struct parity *p = d->parity;
    if (!delta_in_region(p, r))
        return repl_source_mark_diverged(&d->src, r->xid, "delta at %" PRIu64 " of %" PRIu32
                                         " bytes is outside the region (%" PRIu64 ")",
                                         r->data_off, r->data_len, p->region_size);
    if (replay_ops(d, r) != 0)
        return -1;
    for (uint32_t i = 0; i < r->nops; i++)
        if (r->ops[i].type == ROP_PUT && r->ops[i].cas > d->max_cas)
            d->max_cas = r->ops[i].cas;
    xor_delta(p, d, r);
    return 0;
}

int parity_apply(struct parity *p, int dp, uint64_t stable)
{
    struct parity_dp *d = &p->dps[dp];
    int rc = repl_source_apply(&d->src, stable, apply_record, d);
    char err[REPL_WHY_MAX - 64];
    if (rc == 0 && d->rb &&
        rb_meta_catch_up(d->rb, d->src.applied_xid, &d->meta, d->pieces, err, sizeof(err)) != 0)
        rc = repl_source_mark_diverged(&d->src, d->src.applied_xid, "rebuild metadata: %s", err);
    return rc;
}

int parity_truncate_after(struct parity *p, int dp, uint64_t xid)
{
    return repl_source_truncate_after(&p->dps[dp].src, xid);
}

/* ---- rebuild ---- */

void parity_reset(struct parity *p)
{
    for (int i = 0; i < p->k; i++) {
        struct parity_dp *d = &p->dps[i];
        repl_source_await_start(&d->src);
        meta_clear(&d->meta);
        pieceset_reset(d->pieces);
        d->delta_bytes = d->touched_end = d->max_cas = 0;
        d->rb = NULL;
    }
    /* Zero without touching pages: they read as zero again. */
    madvise(p->region, p->region_size, MADV_DONTNEED);
    p->touched_end = 0;
    p->data_units = NULL;
}

int parity_rebuild_begin(struct parity *p, int dp, struct rb_units *rb, const uint8_t *msg,
                         size_t len)
{
    struct rb_begin b;
    if (rb_decode_begin(msg, len, &b) != 0 || b.source != (uint32_t)dp || b.end > p->region_size)
        return -1;
    struct parity_dp *d = &p->dps[dp];
    meta_clear(&d->meta);
    pieceset_reset(d->pieces);
    repl_source_reset(&d->src, b.x0);
    rb_units_begin(rb, b.x0, b.end);
    d->rb = rb;
    d->max_cas = b.max_cas;
    d->touched_end = b.end;
    if (b.end > p->touched_end)
        p->touched_end = b.end;
    return 0;
}

struct rb_arrive {
    struct parity *p;
    int dp;
    const uint8_t *bytes;
    uint64_t off;
};

static void add_unit_run(void *ctx, uint64_t off, uint64_t len)
{
    struct rb_arrive *a = ctx;
    codec_delta_apply(a->p->codec, a->p->parity_index, a->dp, a->p->region + off,
                      a->bytes + (off - a->off), (size_t)len);
}

int parity_rebuild_message(struct parity *p, int dp, const uint8_t *msg, size_t len, char *err,
                           size_t errlen)
{
    struct parity_dp *d = &p->dps[dp];
    if (!d->rb) {
        snprintf(err, errlen, "rebuild message before its BEGIN");
        return -1;
    }
    switch (rb_kind_of(msg, len)) {
    case RB_META:
    case RB_META_DONE:
        return rb_meta_arrive(d->rb, d->src.received_xid, d->src.applied_xid, msg, len, &d->meta,
                              d->pieces, err, errlen);
    case RB_UNITS: {
        uint64_t t, off;
        const uint8_t *bytes;
        uint32_t n;
        if (rb_decode_units(msg, len, p->region_size, &t, &off, &bytes, &n) != 0) {
            snprintf(err, errlen, "malformed units message");
            return -1;
        }
        struct rb_arrive a = { p, dp, bytes, off };
        rb_units_arrive(d->rb, t, off, n, add_unit_run, &a);
        return 0;
    }
    case RB_END:
        d->rb->ended = true;
        return 0;
    default:
        snprintf(err, errlen, "unknown rebuild message");
        return -1;
    }
}

size_t parity_meta_bytes(const struct parity *p)
{
    size_t total = 0;
    for (int i = 0; i < p->k; i++) {
        const struct parity_dp *d = &p->dps[i];
        total += d->meta.heap_bytes + assoc_bytes(&d->meta.table) + pieceset_meta_bytes(d->pieces);
    }
    return total;
}
