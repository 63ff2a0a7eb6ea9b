/* parity.c - buffering and applying a coding group's records on a parity
 * process (see parity.h); no sockets here, so tests drive it directly.
 *
 * Per data process i: a record is checked (well formed, next xid) and
 * buffered when it arrives; when a stable xid arrives, buffered records up
 * to it are applied in order: their ops are replayed on the backup table
 * and replica allocator (meta_replay_op), then a(j,i) * delta is XORed into
 * the parity region.  Anything that disagrees marks DP i diverged with a
 * message; from then on its records are refused. */
#include "parity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "alloc.h"
#include "codec.h"

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

static int dp_init(struct parity_dp *d, int index, uint64_t region_size, unsigned hashpower)
{
    d->index = index;
    if (meta_init(&d->meta, hashpower) != 0)
        return -1;
    d->alloc = dalloc_new(region_size);
    return d->alloc != NULL ? 0 : -1;
}

static void dp_destroy(struct parity_dp *d)
{
    reclog_destroy(&d->buffer);
    meta_destroy(&d->meta);
    dalloc_destroy(d->alloc);
    d->alloc = NULL;
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
    for (int i = 0; i < k; i++)
        reclog_init(&p->dps[i].buffer);
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
        if (dp_init(&p->dps[i], i, region_size, hashpower) != 0) {
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
    free(p->ops);
    if (p->region != NULL)
        munmap(p->region, p->region_size);
    codec_free(p->codec);
    memset(p, 0, sizeof(*p));
}

/* ---- divergence ---- */

/* Marks d diverged with "xid X: <message>"; always returns -1. */
__attribute__((format(printf, 3, 4)))
static int diverge(struct parity_dp *d, uint64_t xid, const char *fmt, ...)
{
    int n = snprintf(d->why, sizeof(d->why), "xid %" PRIu64 ": ", xid);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why + n, sizeof(d->why) - (size_t)n, fmt, ap);
    va_end(ap);
    d->diverged = true;
    return -1;
}

/* ---- receive ---- */

static bool ops_reserve(struct parity *p, uint32_t nops)
{
    if (nops <= p->ops_cap && p->ops != NULL)
        return true;
    uint32_t cap = nops > 16 ? nops : 16;
    struct rec_op *ops = realloc(p->ops, (size_t)cap * sizeof(*ops));
    if (ops == NULL)
        return false;
    p->ops = ops;
    p->ops_cap = cap;
    return true;
}

/* Decode into p's scratch ops.  0, -1 if malformed, -2 if out of memory. */
static int record_decode(struct parity *p, const uint8_t *rec, size_t len, struct record *r)
{
    uint32_t nops = rec_peek_nops(rec, len);
    if (nops > len)   /* every op takes at least one byte */
        return -1;
    if (!ops_reserve(p, nops))
        return -2;
    return rec_decode(rec, len, r, p->ops, p->ops_cap) == 0 ? 0 : -1;
}

enum parity_rx parity_receive(struct parity *p, int dp, const uint8_t *rec, size_t len,
                              uint64_t *stable)
{
    struct parity_dp *d = &p->dps[dp];
    struct record r;
    *stable = 0;
    if (d->diverged)
        return PARITY_RX_REFUSED;
    int rc = record_decode(p, rec, len, &r);
    if (rc == -2)
        return PARITY_RX_FAILED;
    if (rc != 0) {
        diverge(d, d->received_xid + 1, "malformed record of %zu bytes", len);
        return PARITY_RX_REFUSED;
    }
    if (r.xid <= d->received_xid)
        return PARITY_RX_DUPLICATE;
    if (r.xid != d->received_xid + 1) {
        diverge(d, r.xid, "records %" PRIu64 "..%" PRIu64 " are missing",
                d->received_xid + 1, r.xid - 1);
        return PARITY_RX_REFUSED;
    }
    if (r.stable_xid >= r.xid) {
        diverge(d, r.xid, "claims stable xid %" PRIu64 ", not below its own", r.stable_xid);
        return PARITY_RX_REFUSED;
    }
    if (reclog_push(&d->buffer, r.xid, rec, len) != 0)
        return PARITY_RX_FAILED;
    d->received_xid = r.xid;
    *stable = r.stable_xid;
    return PARITY_RX_BUFFERED;
}

/* ---- apply ---- */

struct apply_ctx {
    struct parity *p;
    struct parity_dp *d;
};

static bool delta_in_region(const struct parity *p, const struct record *r)
{
    return r->data_off <= p->region_size && r->data_len <= p->region_size - r->data_off;
}

static int replay_ops(struct parity_dp *d, const struct record *r)
{
    char err[PARITY_WHY_MAX - 64];
    for (uint32_t n = 0; n < r->nops; n++) {
        if (meta_replay_op(&d->meta, d->alloc, &r->ops[n], err, sizeof(err)) != 0)
            return diverge(d, r->xid, "op %" PRIu32 " of %" PRIu32 ": %s",
                           n + 1, r->nops, err);
    }
    return 0;
}

static void xor_delta(struct parity *p, struct parity_dp *d, const struct record *r)
{
    if (r->data_len == 0)
        return;
    codec_delta_apply(p->codec, p->parity_index, d->index, p->region + r->data_off,
                      r->data, r->data_len);
    d->delta_bytes += r->data_len;
    if (r->data_off + r->data_len > p->touched_end)
        p->touched_end = r->data_off + r->data_len;
}

static int apply_record(void *ctx, const struct record *r)
{
    struct apply_ctx *a = ctx;
    struct parity_dp *d = a->d;
    if (r->xid != d->applied_xid + 1)
        return diverge(d, r->xid, "applied out of order after %" PRIu64, d->applied_xid);
    if (!delta_in_region(a->p, r))
        return diverge(d, r->xid, "delta at %" PRIu64 " of %" PRIu32
                       " bytes is outside the region (%" PRIu64 ")",
                       r->data_off, r->data_len, a->p->region_size);
    if (replay_ops(d, r) != 0)
        return -1;
    xor_delta(a->p, d, r);
    d->applied_xid = r->xid;
    return 0;
}

int parity_apply(struct parity *p, int dp, uint64_t stable)
{
    struct parity_dp *d = &p->dps[dp];
    if (d->diverged)
        return -1;
    if (stable > d->received_xid)
        return diverge(d, stable, "declared stable but only %" PRIu64 " was received",
                       d->received_xid);
    if (stable > d->stable_xid)
        d->stable_xid = stable;
    if (stable <= d->applied_xid)
        return 0;
    struct apply_ctx ctx = { .p = p, .d = d };
    if (reclog_apply(&d->buffer, stable, apply_record, &ctx) != 0) {
        if (!d->diverged)
            diverge(d, d->applied_xid + 1, "buffered record could not be decoded");
        return -1;
    }
    return 0;
}

int parity_truncate_after(struct parity *p, int dp, uint64_t xid)
{
    struct parity_dp *d = &p->dps[dp];
    if (xid < d->applied_xid)
        return -1;
    reclog_truncate_after(&d->buffer, xid);
    if (d->received_xid > xid)
        d->received_xid = xid;
    if (d->stable_xid > xid)
        d->stable_xid = xid;
    return 0;
}

size_t parity_meta_bytes(const struct parity *p)
{
    size_t total = 0;
    for (int i = 0; i < p->k; i++) {
        const struct parity_dp *d = &p->dps[i];
        total += d->meta.heap_bytes + assoc_bytes(&d->meta.table) + dalloc_meta_bytes(d->alloc);
    }
    return total;
}
