/* parity.h - the state of a parity process without its sockets: the parity
 * region and, per data process of the group, its record stream, the backup
 * metadata table and the used pieces of its allocator.
 *
 * engine_parity.c feeds it the frames its links receive; tests drive it
 * directly.  Receiving, buffering up to the piggybacked stable xid,
 * truncation and divergence are repl/receiver.h's (struct repl_source),
 * shared with primary-backup; this file adds what applying one record means
 * for a parity process: replay its ops on the backup table and the
 * used pieces and XOR the coded delta into the parity region.  Once a data
 * process's records disagree with its replica it is marked diverged and
 * nothing more of it is accepted: parity is never corrupted to keep going. */
#ifndef COCYTUS_PARITY_H
#define COCYTUS_PARITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta.h"
#include "receiver.h"

struct codec;
struct pieceset;
struct unit_map;
struct rb_units;

struct parity;

/* What the parity process holds for data process i. */
struct parity_dp {
    struct parity *parity;       /* the owner, for applying records */
    int index;
    struct repl_source src;      /* DP i's records: buffer, xids, divergence;
                                  * parity includes them up to src.applied_xid */
    struct meta_table meta;      /* backup of DP i's table */
    struct pieceset *pieces;     /* DP i's used pieces: its allocator's
                                  * state (pieceset.h) */
    uint64_t delta_bytes;        /* bytes XORed into the parity region */
    uint64_t touched_end;        /* furthest byte its deltas reached: beyond it
                                  * its region is known to be zero */
    uint64_t max_cas;            /* largest cas of its applied PUTs */
    /* Being rebuilt (rebuild.h): which units of its region arrived; a
     * delta touches only those, and only if newer.  NULL otherwise. */
    struct rb_units *rb;
};

struct parity {
    struct codec *codec;
    int k, m;
    int parity_index;            /* j: this process's row of the coding matrix */
    uint8_t *region;             /* R bytes, mmap(MAP_NORESERVE) */
    uint64_t region_size;
    uint64_t touched_end;        /* highest region offset a delta reached */
    struct parity_dp *dps;       /* k of them */
    /* A recovery process: units of the region that hold the served DP's
     * data instead of parity (recovery.h); deltas skip them.  NULL on a
     * plain parity process. */
    const struct unit_map *data_units;
};

/* 0, or -1 with a message in err.  region_size must be a positive multiple
 * of DALLOC_GRAIN; 1 <= k < n; 0 <= parity_index < n - k. */
int parity_init(struct parity *p, int k, int n, int parity_index, uint64_t region_size,
                unsigned hashpower, char *err, size_t errlen);
void parity_destroy(struct parity *p);

/* A RECORD frame from DP dp: repl_source_receive on its stream.  On
 * BUFFERED, *stable gets the record's piggybacked stable xid (else 0);
 * REFUSED means the DP diverged (dps[dp].src.why says why). */
enum repl_rx parity_receive(struct parity *p, int dp, const uint8_t *rec, size_t len,
                            uint64_t *stable);

/* Apply DP dp's buffered records with xid <= stable, in order.  0, or -1
 * when the DP diverged (dps[dp].src.why says why; nothing more is applied). */
int parity_apply(struct parity *p, int dp, uint64_t stable);

/* Drop DP dp's buffered records above xid (they were never stable).
 * -1 if xid < applied_xid: applied records cannot be taken back. */
int parity_truncate_after(struct parity *p, int dp, uint64_t xid);

/* Forget everything (a parity process that is rebuilt from scratch): empty
 * tables, allocators and streams, a zero region, no data units. */
void parity_reset(struct parity *p);
/* Start rebuilding from DP dp (a BEGIN message, rebuild.h): its table,
 * allocator and stream start over at x0; rb (owned by the caller) tracks
 * its units.  0, or -1 when malformed. */
int parity_rebuild_begin(struct parity *p, int dp, struct rb_units *rb, const uint8_t *msg,
                         size_t len);
/* META and UNITS messages of DP dp's rebuild.  0, or -1 with a message. */
int parity_rebuild_message(struct parity *p, int dp, const uint8_t *msg, size_t len, char *err,
                           size_t errlen);
/* Heap bytes of tables and allocators, without buffered records. */
size_t parity_meta_bytes(const struct parity *p);

#endif
