/* parity.h - the state of a parity process without its sockets: the parity
 * region and, per data process of the group, the buffer of received records,
 * the backup metadata table and the replica allocator.
 *
 * engine_parity.c feeds it the frames its links receive; tests drive it
 * directly.  Records are buffered on receipt (parity_receive) and applied
 * only up to a stable xid (parity_apply), as the piggybacked commit of
 * docs/coding-group.md requires; parity_truncate_after drops records that
 * never became stable (recovery preparation, paper 4.1.1).  Once a data
 * process's records disagree with its replica the data process is marked
 * diverged and nothing more of it is accepted: parity is never corrupted to
 * keep going. */
#ifndef COCYTUS_PARITY_H
#define COCYTUS_PARITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta.h"
#include "reclog.h"

struct codec;
struct dalloc;

#define PARITY_WHY_MAX 256

/* What the parity process holds for data process i. */
struct parity_dp {
    int index;
    struct meta_table meta;      /* backup of DP i's table */
    struct dalloc *alloc;        /* replica of DP i's allocator */
    struct reclog buffer;        /* received, not yet applied */
    uint64_t applied_xid;        /* parity includes DP i's records up to this one */
    uint64_t received_xid;       /* newest record buffered or applied */
    uint64_t stable_xid;         /* newest stable xid DP i told us */
    uint64_t delta_bytes;        /* bytes XORed into the parity region */
    bool diverged;
    char why[PARITY_WHY_MAX];    /* what diverged, for logs and HELLO rejects */
};

struct parity {
    struct codec *codec;
    int k, m;
    int parity_index;            /* j: this process's row of the coding matrix */
    uint8_t *region;             /* R bytes, mmap(MAP_NORESERVE) */
    uint64_t region_size;
    uint64_t touched_end;        /* highest region offset a delta reached */
    struct parity_dp *dps;       /* k of them */
    struct rec_op *ops;          /* decode scratch */
    uint32_t ops_cap;
};

/* 0, or -1 with a message in err.  region_size must be a positive multiple
 * of DALLOC_GRAIN; 1 <= k < n; 0 <= parity_index < n - k. */
int parity_init(struct parity *p, int k, int n, int parity_index, uint64_t region_size,
                unsigned hashpower, char *err, size_t errlen);
void parity_destroy(struct parity *p);

enum parity_rx {
    PARITY_RX_BUFFERED = 0,      /* new record, buffered */
    PARITY_RX_DUPLICATE = 1,     /* xid already held: ignore, ack again */
    PARITY_RX_REFUSED = -1,      /* DP diverged (now or before): see dps[i].why */
    PARITY_RX_FAILED = -2        /* out of memory: not buffered, not acked; drop
                                  * the link and let the DP resend */
};

/* A RECORD frame from DP dp.  On BUFFERED or DUPLICATE, *stable gets the
 * record's piggybacked stable xid (0 for a duplicate). */
enum parity_rx parity_receive(struct parity *p, int dp, const uint8_t *rec, size_t len,
                              uint64_t *stable);

/* Apply DP dp's buffered records with xid <= stable, in order.  0, or -1
 * when the DP diverged (dps[dp].why says why; nothing more is applied). */
int parity_apply(struct parity *p, int dp, uint64_t stable);

/* Drop DP dp's buffered records above xid (they were never stable).
 * -1 if xid < applied_xid: applied records cannot be taken back. */
int parity_truncate_after(struct parity *p, int dp, uint64_t xid);

/* Heap bytes of tables and allocators, without buffered records. */
size_t parity_meta_bytes(const struct parity *p);

#endif
