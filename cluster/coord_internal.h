/* coord_internal.h - the coordinator's state, shared by its files:
 * coord.c (membership, the map, moves, admin words), coord_recovery.c
 * (failure handling of coding groups: preparation, takeover, group views)
 * and coord_pbr.c (PBR groups: failover, rebuilding backups).  Not for use
 * outside cluster/. */
#ifndef CLUSTER_COORD_INTERNAL_H
#define CLUSTER_COORD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster.h"
#include "coord.h"
#include "engine.h"
#include "recovery.h"
#include "slotmap.h"

struct link;
struct link_listener;
struct event;
struct server;
struct coord_groups;
struct coord_pbr;
struct coord_zk;

#define MEMBER_NAME_MAX (CLUSTER_HOST_MAX + 64)
#define ADDR_MAX (SLOTMAP_HOST_MAX + 8)
#define REPLY_LINE_MAX 512
#define COORD_STARTUP_GRACE_MS 3000 /* never heard of after this: dead */

enum member_state { MEMBER_UNKNOWN, MEMBER_ALIVE, MEMBER_DEAD };

struct coord;
struct member;

#define COORD_LOST_REPORTS_MAX 64   /* peers reporting one member (a group's size) */

/* A peer's word that its replication link to a member is down (coord_lost.c). */
struct lost_report {
    const struct member *by;
    uint64_t heard_ms;              /* monotonic, when it said so last */
    uint64_t hb;                    /* by->heartbeats then: current while equal */
    uint64_t down_ms;               /* how long the link had been down then */
    bool up;                        /* the link was up, only silent */
};

/* One server process of the cluster file, as the coordinator sees it. */
struct member {
    struct coord *co;
    const struct cluster_proc *proc;
    struct link *link;              /* the control link, NULL while down */
    struct link *retired_link;      /* a replaced predecessor's, told to retire:
                                     * its frames are ignored until it drops */
    enum member_state state;
    long pid;
    uint64_t incarnation;           /* its hello's random start id (0: none sent) */
    uint64_t dead_incarnation;      /* the incarnation last declared dead: told to
                                     * retire if it returns while another serves */
    uint64_t epoch;                 /* last reported */
    uint64_t rss;
    uint64_t last_heard_ms;         /* monotonic; 0: never */
    uint64_t pushed_epoch;          /* the last map sent to it, and when */
    uint64_t pushed_at_ms;
    uint64_t warned_epoch;          /* last too-new epoch logged (once each) */
    long saved_pid;                 /* its pid as an earlier leader saved it (0: none) */
    uint64_t saved_incarnation;     /* and its incarnation (0: none, or an older build) */
    bool silence_waited;            /* silent past dead_after_ms, but not declared dead:
                                     * that would lose data (on_check) */
    uint64_t silence_logged_ms;     /* when that wait was last logged */
    struct lost_report lost[COORD_LOST_REPORTS_MAX];   /* peers that lost their link to it */
    int nlost;
    uint64_t heartbeats;            /* heard; its "lost" words follow each one */
};

enum move_state { MOVE_RUNNING, MOVE_DONE, MOVE_FAILED };

struct move {
    unsigned slot;
    char from[ADDR_MAX], to[ADDR_MAX];
    int to_endpoint;                /* index in the map */
    uint64_t epoch;                 /* the map's epoch once it is done */
    enum move_state state;
    char why[COORD_WHY_MAX];
    struct member *source, *dest;
    uint64_t source_dead_ms;        /* monotonic: the source died (0: it did not);
                                     * the destination's epoch tells the outcome */
    uint64_t dest_dead_ms;          /* the same for the destination */
    uint64_t source_incarnation;    /* of the one that died (coord_fail_move_of) */
    uint64_t dest_incarnation;
    uint64_t dest_start_incarnation; /* the destination's when the move started (saved
                                        with the move; 0 unknown): the one process
                                        whose memory holds the slot's copy */
};

#define COORD_REPAIR_STALL_MS 10000   /* struct coord, repair_stall_ms */

struct coord {
    struct server *s;
    const struct cluster *c;
    struct slotmap map;             /* authoritative */
    char *body;                     /* slotmap_encode(map), sent as "map <body>" */
    size_t nbody;
    struct member *members;
    int nmembers;
    struct link_listener *listener;
    struct event *timer;
    uint64_t started_ms;
    uint64_t last_check_ms;         /* when on_check last ran (coord.c) */
    struct move *moves;             /* every move of this run, oldest first */
    int nmoves, cap_moves;
    int running;                    /* index in moves, -1 if none */
    /* A map change made while a move runs (a takeover, a new primary):
     * held until the move ends, then published with the move's outcome
     * (coord_publish_map).  NULL if none. */
    struct slotmap *held;
    uint64_t held_since_ms;         /* monotonic: first held for the running move */
    bool republish_due;             /* started on saved progress (republish_saved) */
    uint64_t unsure_epoch;          /* of a move whose source or destination died
                                     * during it: maybe held by the other */
    char msg[REPLY_LINE_MAX];       /* engine result text */
    struct coord_groups *groups;    /* coding groups' failure state (coord_recovery.c) */
    struct coord_pbr *pbr;          /* PBR groups' state (coord_pbr.c) */
    struct coord_zk *zk;            /* the ZooKeeper backend, NULL: the state file */
    int self;                       /* our line in cluster->coords */
    char *resume;                   /* saved progress lines, applied once at start */
    size_t nresume;
    /* A repair (migration or parity rebuild) whose progress stops this
     * long starts over: 10 s, or COCYTUS_REPAIR_STALL_MS (for tests that
     * make a rebuild start over without waiting that long). */
    uint64_t repair_stall_ms;
    /* A member not heard from this long is dead: COORD_DEAD_AFTER_MS, or
     * COCYTUS_DEAD_AFTER_MS (for tests that stop a process for longer). */
    uint64_t dead_after_ms;
    uint64_t silence_hold_ms;       /* the longest silence waited out (on_check) */
    uint64_t startup_grace_ms;      /* COORD_STARTUP_GRACE_MS, or COCYTUS_STARTUP_GRACE_MS */
};

/* ---- coord.c, for coord_recovery.c ---- */

uint64_t coord_now_ms(void);
uint64_t coord_now_us(void);
uint64_t coord_wall_ms(void);   /* unix ms */
uint64_t coord_mono_us_of_wall(uint64_t wall_ms);
uint64_t coord_wall_of_mono_us(uint64_t mono_us);
/* t moved forward by late ms, but not past now: a timestamp of silence or
 * progress, after a stall of the coordinator (coord.c, forgive_own_stall). */
uint64_t coord_forgive_ms(uint64_t t, uint64_t late, uint64_t now);
void coord_log_member(const struct member *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Send one control message to a member; -1 when its link is down. */
int coord_send(struct member *m, const char *text);
/* Make next (co takes its contents) the authoritative map: persist, adopt,
 * push to everyone.  0; 1 held until the running move ends (then
 * published, coord_on_held_map_published); -1 out of memory (next is
 * freed).  Make next from coord_map_base() with coord_next_epoch(). */
int coord_publish_map(struct coord *co, struct slotmap *next);
/* What a new map is made from: the one held back for a running move (it
 * has the changes made meanwhile), else the authoritative one. */
const struct slotmap *coord_map_base(const struct coord *co);
/* For a log line about a map change: "" or " (its map waits for ...)". */
const char *coord_held_note(const struct coord *co);
/* The epoch of a map the coordinator makes itself: above every epoch a
 * map, the running move or a process may hold (coord.c). */
uint64_t coord_next_epoch(const struct coord *co);
/* A held map was published now: the takeovers and failovers that waited
 * for it serve from now on (coord_recovery.c, coord_pbr.c). */
void coord_recovery_on_held_map_published(struct coord *co);
/* After the saved progress is applied: views whose map was held and not
 * saved are published again (coord_recovery.c, coord_pbr.c). */
void coord_recovery_republish(struct coord *co);
void coord_pbr_republish(struct coord *co);
void coord_pbr_on_held_map_published(struct coord *co);
struct member *coord_member(struct coord *co, int group, enum cluster_role role, int index);
/* Alive with its control link up (coord_recovery.c). */
bool coord_alive(const struct member *m);
/* Save the work in progress beside the map (ZooKeeper backend; nothing
 * with the state file).  A leader that cannot save steps down. */
void coord_save_progress(struct coord *co);
/* A saved running move (coord_progress.c): wait for its outcome. */
void coord_resume_move(struct coord *co, unsigned slot, int to_endpoint, uint64_t epoch,
                       uint64_t dest_incarnation);

/* ---- coord_progress.c ---- */

/* The progress lines of co (malloc'd), NULL when out of memory. */
char *coord_progress_encode(struct coord *co, size_t *len);
/* Apply saved lines at start, before anyone is heard from. */
void coord_progress_apply(struct coord *co, const char *text, size_t len);

/* ---- coord_recovery.c ---- */

int coord_recovery_init(struct coord *co);
void coord_recovery_free(struct coord *co);
/* A member died / said hello. */
void coord_recovery_on_dead(struct coord *co, struct member *m);
void coord_recovery_on_hello(struct coord *co, struct member *m);
/* A recovery answer (prepared, truncated, serving) from m. */
void coord_recovery_on_answer(struct coord *co, struct member *m, const char *text, size_t len);
/* Heartbeat progress words of m ("rec <dp> <done> <total> <bytes>"). */
void coord_recovery_on_progress(struct coord *co, struct member *m, const char *text,
                                size_t len);
/* Every CHECK_EVERY_MS: resend what was not answered. */
void coord_recovery_check(struct coord *co);
/* The coordinator did not run for `late` ms: the coding groups' rebuilds
 * and migrations are not held to progress it could not have heard. */
void coord_recovery_forgive(struct coord *co, uint64_t late, uint64_t now);
/* "cocytus groups": one line per group. */
void coord_recovery_admin(struct coord *co, eng_write_fn write, void *wctx);
/* A process of group g this coordinator has not heard from yet, nor
 * declared dead: until then (its startup grace at most) the saved state may
 * hide a death, so `cocytus groups` says "starting", not "healthy". */
bool coord_group_unheard(const struct coord *co, int g);
/* m restarted while no leader watched (a new pid or incarnation in its hello): its death
 * was never handled.  Called before coord_recovery_on_hello. */
void coord_recovery_on_unseen_restart(struct coord *co, struct member *m);
/* m, the source or destination of the running move, died, or (successor)
 * a process came in its place without its state: the move's outcome is
 * the other end's to tell (coord.c). */
void coord_fail_move_of(struct coord *co, const struct member *m, bool successor);
/* The processes that restarted empty in a place another process serves. */
bool coord_recovery_joining(const struct coord *co, const struct member *m);
/* Would m's death leave its coding group more failed places than it has
 * parity processes (data lost)?  *failed: the group's failed places now.
 * For m never heard from, members never heard from that may be paused
 * (coord_lost_paused) count as holding their places. */
bool coord_recovery_death_loses(struct coord *co, const struct member *m, int *failed);

/* ---- coord_lost.c ---- */

/* by said "lost ...": remember it against the member it names. */
void coord_lost_heard(struct coord *co, struct member *by, const struct ctl_msg *msg);
/* x, never heard from since this coordinator started, may be paused: its
 * live peers report their links to it up, only silent (coord_lost.c). */
bool coord_lost_paused(const struct coord *co, const struct member *x);
/* x has not been heard from, this coordinator has run long enough for
 * any live process to have said hello, and every peer linked with x that
 * is not declared dead is alive and reports (at least one), with its last
 * heartbeat, its link to x down for co->dead_after_ms or more: x is
 * dead.  why gets the reason. */
bool coord_lost_evidence(struct coord *co, const struct member *x, char *why, size_t len);
/* x was heard from or declared dead: its reports are spent. */
void coord_lost_forget(struct member *x);

/* ---- coord_pbr.c ---- */

int coord_pbr_init(struct coord *co);
void coord_pbr_free(struct coord *co);
/* A member died / said hello (restarted: a new process, or one that was dead). */
void coord_pbr_on_dead(struct coord *co, struct member *m);
void coord_pbr_on_hello(struct coord *co, struct member *m, bool restarted);
/* "pbrok ..." answers. */
void coord_pbr_on_answer(struct coord *co, struct member *m, const char *text, size_t len);
/* Heartbeat words "pbr ...". */
void coord_pbr_on_progress(struct coord *co, struct member *m, const char *text, size_t len);
/* Every CHECK_EVERY_MS: resend failover steps, reconcile members. */
void coord_pbr_check(struct coord *co);
/* The coordinator did not run for `late` ms: a lost group's wait for its
 * primary is counted from later. */
void coord_pbr_forgive(struct coord *co, uint64_t late, uint64_t now);
/* "cocytus groups" for a PBR cluster: one line per group. */
void coord_pbr_admin(struct coord *co, eng_write_fn write, void *wctx);
/* A live member that is not (yet) a complete backup of its group. */
bool coord_pbr_joining(struct coord *co, const struct member *m);
/* Declaring m (a primary or backup) dead would leave its group nobody to
 * serve its data from. */
bool coord_pbr_death_loses(struct coord *co, const struct member *m);
/* Has PBR group g lost its data (or is it being admitted again after)? */
bool coord_pbr_group_lost(struct coord *co, int g);
/* Can RS group g still rebuild every place it lost (not lost, and no more
 * places failed than it has parity processes)? */
bool coord_recovery_recoverable(struct coord *co, int g);
/* a and b are the primary of their group and one of its backups, in a
 * group not failing over (else who leads is not known here). */
bool coord_pbr_linked(struct coord *co, const struct member *a, const struct member *b);
/* Work in progress (coord_progress.c): group g's failover under way as the
 * line "pbr <g> promote <best> <participants> <peers>" (member bit masks)
 * once a member was told to serve, "pbr <g> failover" before (fencing, or
 * due), without newline, in line; false if none.  coord_pbr_resume takes
 * such a line back. */
bool coord_pbr_progress_line(struct coord *co, int g, char *line, size_t len);
/* "pbr <g> figures ...": the group's last failover's timings, saved before
 * its progress line (a resumed failover dates from the saved death); false
 * if it never failed over. */
bool coord_pbr_figures_line(struct coord *co, int g, char *line, size_t len);
void coord_pbr_resume(struct coord *co, const char *line);

#endif
