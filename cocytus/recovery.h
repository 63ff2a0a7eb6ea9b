/* recovery.h - online recovery of a coding group's lost data (paper 4.1):
 * the group view every process of a group holds, the recovery messages
 * that travel on the group's links, and the unit recovery that a group's
 * recovery leader drives.
 *
 * When a data process (DP) f dies, the coordinator prepares its stream on
 * every parity process (PP) that still holds parity (the minimum received
 * xid is the stable xid; records above it are dropped) and makes one PP r
 * the recovery process: it serves DP f's keys from the replicated metadata
 * it already holds, and its parity region becomes DP f's data region unit
 * by unit (4 KB recovery units) as they are rebuilt.  A unit of DP f is
 * rebuilt like this (the five steps of the paper):
 *
 *   1. the group's recovery leader (the lowest-index recovery process) asks
 *      every process that serves a logical DP whose unit is intact (a live
 *      DP, or a recovery process that already rebuilt it) for the unit;
 *   2. each sends the unit and its logical timestamp T (its committed xid)
 *      to every contributor: the recovery processes whose unit is still
 *      parity (one per lost DP), on its own link to them, so the unit
 *      travels behind every record it reflects;
 *   3. a contributor applies that source's buffered records up to T and
 *      holds back later ones until the batch is done, and subtracts the
 *      unit (times its coefficient) from a copy of its parity unit;
 *   4. once every source is in, the copy depends on the lost DPs only: the
 *      contributor sends it to the leader;
 *   5. the leader solves for the lost DPs' units and sends each recovery
 *      process its own, which overwrites the parity unit there; from then
 *      on deltas no longer touch that unit (it is data now).
 *
 * Units beyond the furthest byte a DP ever wrote are known to be zero and
 * are not transferred.  Requested units (a read or write of the recovery
 * process that touches them) go first; idle time rebuilds the rest in
 * batches of consecutive units.  With two lost DPs a unit that the first
 * recovery process already rebuilt is sent as data, so only one unknown is
 * solved for (the paper's short-cut rule for consecutive failures).
 *
 * This file: the group view, the recovered-unit bitmap, and the encoding of
 * the messages (all little-endian, docs/wire-format.md section 6).  The
 * leader and contributor logic is in recovery.c; the data source side is in
 * engine_data.c. */
#ifndef COCYTUS_RECOVERY_H
#define COCYTUS_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECOV_UNIT 4096u                 /* bytes per recovery unit */
#define RECOV_MAX_RANGES 64              /* unit ranges in one batch */
#define RECOV_MAX_K 32
#define RECOV_MAX_M 32

/* ---- the group view (pushed by the coordinator as "group ...") ---- */

/* REBUILDING: alive, joined the data processes' streams again, but its
 * parity is incomplete until every data process sent its state (rebuild.h);
 * it counts for nothing in recovery until then. */
enum gv_pp { GV_PP_PARITY = 0, GV_PP_SERVING = 1, GV_PP_DEAD = 2, GV_PP_REBUILDING = 3 };

struct group_view {
    uint64_t version;
    int k, m;
    int dp_server[RECOV_MAX_K];   /* -1: the original DP; r >= 0: PP r; -2: nobody (lost) */
    enum gv_pp pp_state[RECOV_MAX_M];
    int pp_serves[RECOV_MAX_M];   /* GV_PP_SERVING: the logical DP it serves, else -1 */
};

/* All original, all parity. */
void group_view_init(struct group_view *v, int k, int m);
/* Parse "group <g> <version> <dps> <pps>" (the words after "group <g> ").
 * dps: k comma-separated entries "-" (original), "p<r>" (PP r), "x" (lost);
 * pps: m entries "p" (parity), "s<f>" (serving DP f), "x" (dead), "b"
 * (being rebuilt).
 * 0, or -1 when malformed (v unchanged). */
int group_view_parse(struct group_view *v, int k, int m, const char *text, size_t len);
/* The inverse: "<version> <dps> <pps>" into buf.  Returns the length. */
size_t group_view_format(const struct group_view *v, char *buf, size_t len);
/* The recovery leader: the lowest-index PP serving a DP, or -1. */
int group_view_leader(const struct group_view *v);

/* ---- recovered units of one region ---- */

struct unit_map {
    uint64_t region_size;
    size_t nunits;
    uint8_t *bits;               /* 1: the unit holds data (recovered or known zero) */
    size_t done;                 /* units with their bit set */
};

int unit_map_init(struct unit_map *u, uint64_t region_size);
void unit_map_destroy(struct unit_map *u);
static inline bool unit_map_has(const struct unit_map *u, size_t unit)
{
    return (u->bits[unit >> 3] >> (unit & 7)) & 1;
}
void unit_map_set(struct unit_map *u, size_t unit);
/* Every unit of [off, off+len) set? (len 0: true) */
bool unit_map_covers(const struct unit_map *u, uint64_t off, uint64_t len);
/* First unit >= from without its bit, or nunits. */
size_t unit_map_next_missing(const struct unit_map *u, size_t from);
/* Bytes of unit `unit` (the last unit of a region may be short). */
static inline uint64_t unit_map_unit_len(const struct unit_map *u, size_t unit)
{
    uint64_t off = (uint64_t)unit * RECOV_UNIT;
    return u->region_size - off < RECOV_UNIT ? u->region_size - off : RECOV_UNIT;
}

/* ---- messages (the body after the u64 request id of FT_REQUEST/FT_REPLY) ---- */

enum recov_kind {
    RK_FETCH = 1,      /* leader -> data source:  REQUEST  contributors + ranges */
    RK_DATA = 2,       /* data source -> contrib:  REPLY    source dp, T, ranges, bytes */
    RK_BATCH = 3,      /* leader -> contributor:  REQUEST  the leader's dp, sources + ranges */
    RK_RESIDUAL = 4,   /* contributor -> leader:  REPLY    contributor, bytes */
    RK_DECODED = 5,    /* leader -> recovery p.:  REQUEST  dp, ranges, bytes */
    RK_NEED = 6,       /* recovery p. -> leader:  REQUEST  ranges (units wanted now) */
    RK_HAVE = 7        /* contributor -> leader:  REPLY    ranges it holds as data already */
};

struct recov_range {
    uint64_t off;      /* multiple of RECOV_UNIT */
    uint32_t len;
};

/* A decoded message; pointers refer into the payload. */
struct recov_msg {
    uint64_t id;                       /* batch id (RK_NEED: 0) */
    uint8_t kind;
    uint32_t who;                      /* DATA: source dp; BATCH: the dp its leader
                                        * serves (replies go on that dp's link);
                                        * RESIDUAL, HAVE: contributor pp; DECODED: dp */
    uint64_t t;                        /* DATA: the source's committed xid */
    int nlist;                         /* FETCH: contributors; BATCH: sources */
    uint8_t list[RECOV_MAX_K + RECOV_MAX_M];
    int nranges;
    struct recov_range ranges[RECOV_MAX_RANGES];
    const uint8_t *bytes;              /* DATA, RESIDUAL, DECODED: sum of range lengths */
    uint64_t nbytes;
};

/* Total bytes of the ranges. */
uint64_t recov_ranges_bytes(const struct recov_range *r, int n);
/* Decode a REQUEST/REPLY payload.  0, or -1 when malformed (lengths that
 * do not add up, too many ranges, an unaligned or empty range). */
int recov_decode(const uint8_t *payload, size_t len, struct recov_msg *m);
/* Encode the header of m (everything but the bytes) into buf (at least
 * recov_header_max() bytes).  Returns its length. */
size_t recov_encode_header(const struct recov_msg *m, uint8_t *buf);
size_t recov_header_max(void);

#endif
