/* engine_data.h - what the data engine offers beyond the engine interface:
 * group views (dead parity processes leave the ack set), and the recovery
 * process's instance of it.
 *
 * A recovery process is a parity process that took over a dead data
 * process's keys (docs/recovery.md).  It runs the very same data engine,
 * built from the state the parity process already holds: the backup table
 * of that data process and an allocator built from its used pieces
 * (pieceset.h), its parity region (which
 * becomes the data region unit by unit), and the xid stream continued from
 * the stable xid.  The only difference is that bytes of a unit not yet
 * rebuilt cannot be read or overwritten: the engine asks for the unit and
 * the request waits (reads through engine_ops.read_wait, writes in the
 * write queue) until engine_data_units_arrived(). */
#ifndef COCYTUS_ENGINE_DATA_H
#define COCYTUS_ENGINE_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster.h"
#include "engine.h"
#include "meta.h"
#include "recovery.h"

struct pieceset;

struct data_unit_hooks {
    void *ctx;
    /* Every unit of [off, off+len) holds data? */
    bool (*ready)(void *ctx, uint64_t off, uint64_t len);
    /* Ask for the missing units of [off, off+len) (deduplicated there). */
    void (*need)(void *ctx, uint64_t off, uint64_t len);
    /* Every unit rebuilt?  (Blocked mode: writes wait until then.) */
    bool (*complete)(void *ctx);
    /* A recovery message that is not for the data source role (a residual
     * coming back to the leader on this process's links). */
    void (*message)(void *ctx, int peer, uint16_t type, const uint8_t *payload, uint32_t len);
};

struct data_recovery_config {
    int dp;                        /* the logical data process served */
    int self_pp;                   /* our parity index: our identity on links */
    struct meta_table *meta;       /* moved into the engine at _take (left empty) */
    struct pieceset **pieces;      /* the dead DP's used pieces: moved in at _take (an
                                    * empty set left), its allocator built from them */
    uint8_t *region;               /* borrowed: the parity engine's region */
    const int *peers;              /* parity processes to replicate to */
    int npeers;
    uint64_t start_xid;            /* the stable xid of the preparation */
    uint64_t cas_start;            /* larger than any cas the dead DP gave out */
    uint64_t touched_end;          /* beyond it the dead DP's region is zero */
    struct data_unit_hooks units;
    unsigned test_faults;          /* DR_FAULT_*: a test's faults in the allocator's build */
};

/* Test faults of a recovery process's allocator build (the parity engine
 * reads them from COCYTUS_TEST_TAKEOVER_FAIL): the first build fails as if
 * out of memory; every build finds pieces that overlap. */
#define DR_FAULT_BUILD_ONCE 1u
#define DR_FAULT_OVERLAP 2u

/* A recovery process's data engine, in two steps so that a takeover either
 * completes or changes nothing: _new makes everything that can fail and
 * takes nothing from rc (NULL on failure: rc's table, pieces and region
 * are still the caller's); _take, which cannot fail, then moves rc's table
 * and pieces into the engine (leaving empty ones), starts its stream at
 * rc->start_xid and starts building its allocator from the pieces on a
 * thread (allocbuild.h): it serves at once, and writes that need space
 * wait for the allocator.  rc must be the same for both calls. */
struct engine *engine_data_recovery_new(const struct engine_config *cfg,
                                        const struct data_recovery_config *rc);
void engine_data_recovery_take(struct engine *e, const struct data_recovery_config *rc);

/* Units arrived: waiting reads are retried, queued writes drained. */
void engine_data_units_arrived(struct engine *e);

/* A new group view: parity processes it marks dead leave the ack set. */
void engine_data_set_view(struct engine *e, const struct group_view *v);

/* The data source side of unit recovery: answer an RK_FETCH (from the
 * leader, on any link) by sending each contributor the units and our
 * committed xid, on our own link to it.  Exposed so the leader, when it
 * serves a DP itself, can be its own source. */
void engine_data_fetch(struct engine *e, const struct recov_msg *m);

/* The committed xid (its logical timestamp T). */
uint64_t engine_data_committed(struct engine *e);

/* A REQUEST/REPLY frame on our link to parity process pp (recovery
 * traffic of a recovery process).  0, or -1 when that link is down. */
int engine_data_sendv_to(struct engine *e, int pp, uint16_t type, const struct iovec *iov,
                         int n);

/* "rec ..." progress words are the parity engine's; this gives the number
 * of keys served (for status). */
size_t engine_data_items(struct engine *e);
/* A recovery process whose missing units can never be rebuilt (its group
 * lost more than it tolerates): every key whose value lies in such a unit
 * is deleted through a record, as expiry deletes them.  Returns how many
 * deletions it sent (keys already in flight wait for a later call); *xid
 * is the last record's xid (engine_data_committed tells when it applied). */
size_t engine_data_drop_unready(struct engine *e, uint64_t *xid);

/* Send a copy of our state to a process that joins our stream (rebuild.h):
 * parity process `index` (role ROLE_PARITY) being rebuilt, in the
 * coordinator's rebuild attempt `attempt` (its BEGIN says so), or the data
 * process we serve coming back (ROLE_DATA, attempt 0).  A recovery process
 * starts it once every unit is rebuilt.  A request for the attempt of a
 * copy under way is the same copy; any other replaces what is left of an
 * earlier one.  0, or -1 when too many run. */
int engine_data_rebuild(struct engine *e, enum cluster_role role, int index, uint64_t attempt);
/* Hold every write from now on; quiet(ctx, xid) once nothing is in flight
 * (the handoff of a recovery process to the data process it served). */
void engine_data_hold(struct engine *e, void (*quiet)(void *ctx, uint64_t xid), void *ctx);
/* The migration back to our data process was abandoned (while it copied,
 * or at the handoff): it leaves the ack set and writes go on. */
void engine_data_resume(struct engine *e);
/* Answer held writes with MOVED to host:port, and wake waiting reads to be
 * routed again (the engine is about to be destroyed, or it handed its keys
 * back and the map moved them). */
void engine_data_release(struct engine *e, const char *host, int port);
/* Quiet at a handoff (engine_data_hold's quiet() was called, no resume
 * since): it holds every request. */
bool engine_data_handed(const struct engine *e);

#endif
