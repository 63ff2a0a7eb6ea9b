/* recovery_int.h - the unit recovery state a parity process keeps
 * (recovery.c) and what it needs from its owner (engine_parity.c): links,
 * holding a source's stream at an xid, and its own data engine.  Private to
 * those two files and the unit tests. */
#ifndef COCYTUS_RECOVERY_INT_H
#define COCYTUS_RECOVERY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "recovery.h"

struct event;
struct event_base;
struct parity;

struct recovery_env {
    void *ctx;
    struct event_base *base;
    struct parity *p;
    /* A REQUEST/REPLY frame on the link of the process serving logical dp
     * (our receiver's link from it).  0, or -1 when it is down. */
    int (*to_source)(void *ctx, int dp, uint16_t type, const struct iovec *iov, int n);
    /* A frame on our own (sender) link to parity process pp. */
    int (*to_pp)(void *ctx, int pp, uint16_t type, const struct iovec *iov, int n);
    /* We serve a logical DP and are a data source of a batch. */
    void (*local_fetch)(void *ctx, const struct recov_msg *m);
    /* Apply source dp's records exactly up to xid and apply no further
     * until release.  0, or -1 when that is impossible (xid beyond what
     * was received, or below what was applied). */
    int (*hold)(void *ctx, int dp, uint64_t xid);
    void (*release)(void *ctx, int dp);
    /* Units of ours became data: wake what waits for them. */
    void (*arrived)(void *ctx);
    /* Zero [off, off+len) of the region (page-aligned). */
    void (*zero)(void *ctx, uint64_t off, uint64_t len);
    void (*log)(void *ctx, const char *line);
};

/* What a contributor holds for the batch in progress. */
struct contrib {
    bool active, announced;
    uint64_t id;
    int leader_dp;                  /* what the batch's leader serves (its BATCH said), or -1 */
    int nranges;
    struct recov_range ranges[RECOV_MAX_RANGES];
    uint64_t bytes;
    uint32_t want, got;             /* source dps (bits) */
    int nsources;
    bool held[RECOV_MAX_K];
    uint64_t t[RECOV_MAX_K];        /* the batch ahead: each source's T, held once it leads */
    uint8_t *acc;                   /* sum of coefficient x source data */
    uint64_t acc_cap;
    uint64_t started_ms;
};

/* The leader's batch in flight. */
struct lbatch {
    bool active;
    uint64_t id;
    uint32_t pattern;               /* F: lost dps whose units are rebuilt (bits) */
    int nranges;
    struct recov_range ranges[RECOV_MAX_RANGES];
    uint64_t bytes;
    uint32_t want, got;             /* contributor pps (bits) */
    uint8_t *residual[RECOV_MAX_M];
    uint8_t *out[RECOV_MAX_K];
    uint64_t started_us, started_ms;
};

struct recovery {
    struct recovery_env env;
    int self;                       /* our parity index */
    int serving;                    /* the logical dp we serve, -1 if none */
    struct group_view view;
    int view_leader;
    /* Our region's units (valid while serving). */
    struct unit_map own;
    bool own_valid;
    /* Leader: shadows of the other recovery processes' maps. */
    struct unit_map shadow[RECOV_MAX_M];
    bool shadow_valid[RECOV_MAX_M];
    size_t *needs;                  /* requested units, oldest first */
    size_t nneeds, needs_cap;
    size_t cursor;                  /* background walk */
    struct lbatch batch;            /* the oldest batch in flight */
    /* A second batch in flight, while the first one's sources send: only
     * when both need nothing but our own parity (one lost data process,
     * served by us), so their data all come to us (pipelining). */
    struct lbatch ahead;
    uint64_t next_id;
    uint8_t *scratch[RECOV_MAX_M];  /* decoder output of parities not used */
    uint8_t *zero;
    uint64_t bufcap;
    struct contrib contrib;         /* the oldest batch we contribute to */
    struct contrib contrib_ahead;   /* the leader's batch ahead (see ahead) */
    struct event *kick;
    /* Figures. */
    uint64_t serving_since_us;
    uint64_t recovered_bytes;       /* our units rebuilt */
    uint64_t bytes_decoded;         /* leader: all units it decoded */
    uint64_t batches_done, batches_dropped, units_requested;
    uint64_t batch_us_max;
    bool complete_logged;
    uint64_t complete_us;           /* serving -> every unit rebuilt */
    uint64_t first_batch_us;        /* the first batch (of any process) we led started */
    bool debug;                     /* COCYTUS_RECOVERY_DEBUG set: log each batch */
    bool abandoned;                 /* recovery_abandon: out of the protocol */
};

int recovery_init(struct recovery *rc, const struct recovery_env *env, int self, int k, int m);
void recovery_destroy(struct recovery *rc);
/* We now serve logical dp: our region becomes its data, unit by unit. */
int recovery_serve(struct recovery *rc, int dp);
void recovery_set_view(struct recovery *rc, const struct group_view *v);
bool recovery_units_ready(struct recovery *rc, uint64_t off, uint64_t len);
void recovery_need(struct recovery *rc, uint64_t off, uint64_t len);
/* A recovery message, from any link. */
void recovery_on_message(struct recovery *rc, uint16_t type, const uint8_t *payload,
                         uint32_t len);
/* The units still missing can never be rebuilt (the group lost more than
 * it tolerates): they become zero data, and this process takes no further
 * part in the group's recovery, neither as a source nor as a contributor
 * or leader, so no other unit is ever solved from those zeros. */
void recovery_abandon(struct recovery *rc);
/* Once a second: drop a contribution whose batch never completed; ask the
 * leader again for requested units still missing here. */
void recovery_tick(struct recovery *rc);
void recovery_progress(const struct recovery *rc, size_t *done, size_t *total, uint64_t *bytes);
/* Microseconds from serving until every unit was rebuilt (or until now). */
uint64_t recovery_elapsed_us(const struct recovery *rc);
/* Microseconds from the first batch this process led until every unit of
 * its own was rebuilt (the rebuild rate's time base; 0 if it led none). */
uint64_t recovery_rebuild_us(const struct recovery *rc);

/* Internal to recovery.c, declared for its forward use. */
void leader_take_have(struct recovery *rc, const struct recov_msg *m);
void leader_take_residual(struct recovery *rc, uint64_t id, int pp, const uint8_t *bytes,
                          uint64_t n);

#endif
