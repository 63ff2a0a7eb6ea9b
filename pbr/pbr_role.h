/* pbr_role.h - how the process of a PBR group changes role at runtime
 * (docs/pbr.md, "Failover" and "Rebuilding a backup").
 *
 * Every process of a group is one engine_pbr (engine_pbr.c) that holds the
 * item store and its clock, and delegates to an inner engine: a primary
 * (engine_primary.c) or a backup (engine_backup.c).  A role switch
 * destroys the inner engine and creates the other kind on the same store:
 * a promoted backup keeps its items and continues the old primary's xid
 * stream; a process whose place was taken empties the store and becomes a
 * backup that is rebuilt from the live primary.
 *
 * Members.  The coordinator and the engines name the M+1 processes of a
 * group by member number: backup b is member b (0..M-1), the process of
 * the cluster file's primary line is member M. */
#ifndef PBR_ROLE_H
#define PBR_ROLE_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "engine.h"
#include "items.h"
#include "link.h"
#include "reclog.h"

#define PBR_MAX_MEMBERS 32           /* M + 1 processes per group at most */

struct cluster;
struct cluster_proc;

/* What survives a role switch; owned by engine_pbr. */
struct pbr_shared {
    struct engine_config cfg;       /* as the process was started */
    struct item_store store;
    struct mc_clock clock;
    int m;                          /* backups per group */
    int member;                     /* this process */
    bool has_coordinator;
    /* The primary's word that its read lease may be held again (its
     * sender's lease callback); set by the owner of the waiting reads. */
    void (*lease)(void *arg);
    void *lease_arg;
};

/* The cluster file's process of member k of group g (NULL if none). */
const struct cluster_proc *pbr_member_proc(const struct cluster *c, int g, int m, int k);
/* The link identity role/index a member announces when it sends records. */
void pbr_member_identity(int m, int k, uint8_t *role, uint32_t *index);
/* Which member a link identity is, or -1. */
int pbr_member_of_identity(int m, uint8_t role, uint32_t index);

/* ---- primary (engine_primary.c) ---- */

struct primary_params {
    struct pbr_shared *sh;
    const int *peers;               /* members to replicate to */
    int npeers;
    uint64_t from;                  /* continue the stream (0: a new one) */
    const struct reclog *carry;     /* records above from to keep for peers */
    bool confirmed;                 /* may commit writes now (else wait for "pbr confirm") */
};
struct engine *pbr_primary_create(const struct primary_params *p);
/* "pbr drop|rebuild|confirm ..." words for a primary; false if unknown. */
bool pbr_primary_control(struct engine *e, int argc, char **argv);
/* engine_ops.lost_peers: the backups (by cluster file line) it lost. */
int pbr_primary_lost_peers(struct engine *e, struct eng_lost_peer *out, int max);
/* Heartbeat words "pbr p <xid> <peer states>" (see coord_pbr.c). */
size_t pbr_primary_heartbeat(struct engine *e, char *buf, size_t len);
/* Its store is the group's: confirmed (or no coordinator) and not found to
 * have restarted without its state.  Else a read could miss a key its
 * backups hold. */
bool pbr_primary_reads_ready(struct engine *e);
/* It holds a read lease from every backup of its ack set (repl/link.h):
 * none of them can have been promoted meanwhile. */
bool pbr_primary_lease_held(struct engine *e);

/* ---- backup (engine_backup.c) ---- */

struct backup_params {
    struct pbr_shared *sh;
    int leader;                     /* member whose records we take */
    bool complete;                  /* false: empty, waits for a snapshot */
};
struct engine *pbr_backup_create(const struct backup_params *p);
/* "pbr fence|follow ..." words for a backup; false if unknown. */
bool pbr_backup_control(struct engine *e, int argc, char **argv);
size_t pbr_backup_heartbeat(struct engine *e, char *buf, size_t len);
/* engine_ops.lost_peers: the leader, if its link dropped and is not back. */
int pbr_backup_lost_peers(struct engine *e, struct eng_lost_peer *out, int max);
/* Promotion: apply every record received, copy the records above the
 * applied xid before that into carry, return the applied xid before
 * (*from) and after (the new primary's xid).  -1 when the stream diverged
 * or memory ran out. */
int pbr_backup_handover(struct engine *e, struct reclog *carry, uint64_t *from, uint64_t *last);
bool pbr_backup_complete(struct engine *e);
/* Its receiver refused the leader's stream (it stays refused until a rejoin). */
bool pbr_backup_diverged(struct engine *e);
int pbr_backup_following(struct engine *e);
/* Promoted by hand (`cocytus promote`): it serves reads. */
bool pbr_backup_promoted(struct engine *e);

#endif
