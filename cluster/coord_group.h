/* coord_group.h - the coordinator's state of one coding group: its view,
 * the takeovers of dead data processes (coord_recovery.c), and the work
 * that brings it back to full redundancy (coord_rebuild.c).  Not for use
 * outside cluster/. */
#ifndef CLUSTER_COORD_GROUP_H
#define CLUSTER_COORD_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "recovery.h"

struct coord;
struct member;

enum dp_phase { PH_NONE, PH_PREPARE, PH_TRUNCATE, PH_TAKEOVER };

struct takeover {
    enum dp_phase phase;
    uint32_t waiting;               /* parity processes yet to answer (bits) */
    uint32_t participants;
    uint64_t stable;
    int r;                          /* the chosen recovery process */
    uint64_t dead_at_us;            /* when the death was seen */
    uint64_t step_at_ms;            /* the last step was sent then */
    uint64_t prepare_us;            /* preparation time (prepare sent -> all answered) */
    uint64_t prepare_started_us;
    bool deferred;                  /* PH_NONE: start it once the group's parity
                                     * processes have said hello (a death seen late) */
    bool gone;                      /* what streamed f came back with a new pid: the
                                     * first prepare says so (coord_recovery.c) */
    bool map_held;                  /* served, but the map that says so waits for a
                                     * running slot move (coord_publish_map) */
};

struct progress {
    uint64_t done, total, bytes;
    uint64_t rate;                  /* bytes/s, from the last two heartbeats */
    uint64_t at_ms;
    uint64_t changed_at_ms;         /* done last changed then (recovery processes) */
    uint64_t abandon_at_ms;         /* "abandon" last sent then (coord_rebuild.c) */
};

/* A parity process being rebuilt (coord_rebuild.c). */
struct rebuild {
    bool running;
    bool ready;                     /* it started over empty: sources may send */
    uint64_t attempt;
    uint64_t started_us;
    uint64_t step_at_ms;
    uint64_t progress_at_ms;        /* its progress last changed then */
    uint64_t last_done, last_bytes;
};

/* MIG_ADMIT: a data process whose keys the group lost serves them again
 * (coord_rebuild.c, "a lost place taken again"); r is -1. */
enum mig_phase { MIG_NONE, MIG_COPY, MIG_HANDOFF, MIG_SERVE, MIG_ADMIT };

/* A data process taking its keys back from its recovery process. */
struct migration {
    enum mig_phase phase;
    int r;                          /* the recovery process */
    uint64_t xid;                   /* MIG_SERVE: where the stream continues */
    uint64_t started_us;
    uint64_t step_at_ms;
    uint64_t progress_at_ms;
    uint64_t last_done, last_bytes;
    struct progress prog;
};

struct cgroup {
    int g;
    struct group_view view;
    struct takeover tk[RECOV_MAX_K];
    struct progress prog[RECOV_MAX_M];
    bool lost;
    char lost_why[160];
    uint64_t loss_wall_ms;          /* unix ms: the group last lost data (0: never) */
    /* Place f's own process was serving when it was last declared dead and
     * nobody served f since: if that process was only cut off, its state is
     * the newest and admission keeps it.  Saved with the work in progress
     * (`own` lines), so a coordinator started again knows it; false when
     * unknown (a state saved before those lines): admission then empties
     * it. */
    bool own_state_newest[RECOV_MAX_K];
    /* The number of f's admission, the same for every try of it (a process
     * takes each number once), 0 when none is under way. */
    uint64_t admit_number[RECOV_MAX_K];
    /* Figures of the last takeover, for `cocytus groups` and drills. */
    uint64_t last_serve_ms;         /* death -> recovery process serving */
    uint64_t last_prepare_us;
    uint64_t last_dead_wall_ms;     /* unix ms: the death was seen */
    uint64_t last_served_wall_ms;   /* unix ms: the new map was published */
    struct rebuild rb[RECOV_MAX_M];
    struct migration mig[RECOV_MAX_K];
    uint64_t rebuild_attempts;
    uint64_t degraded_since_us;     /* first failure not yet repaired (0: none) */
    uint64_t last_full_ms;          /* death -> full redundancy again */
    uint64_t last_full_wall_ms;     /* unix ms: full redundancy again */
};

struct coord_groups {
    int n;
    struct cgroup *g;
};


struct cgroup *coord_group_of(struct coord *co, int g);
bool coord_alive(const struct member *m);
struct member *coord_pp_member(struct coord *co, int g, int j);
struct cluster_proc;
/* A new map epoch in which logical DP f's endpoint is p's client port:
 * coord_publish_map's answer. */
int coord_publish_dp(struct coord *co, struct cgroup *cg, int f, const struct cluster_proc *p);
/* A new view version to every live member of the group. */
void coord_broadcast_view(struct coord *co, struct cgroup *cg);

/* ---- coord_rebuild.c ---- */

/* Every check period: start migrations and rebuilds that can start,
 * resend unanswered steps, restart stalled ones. */
void coord_rebuild_check(struct coord *co, struct cgroup *cg);
/* An answer of a rebuild or migration; false if it is not one. */
bool coord_rebuild_on_answer(struct coord *co, struct cgroup *cg, struct member *m,
                             const char *verb, int a, uint64_t xid);
/* Heartbeat words "reb ..." (parity) or "mig ..." (data); false if not one. */
bool coord_rebuild_on_progress(struct coord *co, struct cgroup *cg, struct member *m,
                               const char *text);
/* The coordinator did not run for `late` ms (coord.c, forgive_own_stall):
 * progress it could not have heard is not a stall. */
void coord_rebuild_forgive(struct cgroup *cg, uint64_t late, uint64_t now);
/* A member of the group died: abort what it took part in. */
void coord_rebuild_on_dead(struct coord *co, struct cgroup *cg, struct member *m);
/* Progress words for "cocytus groups". */
int coord_rebuild_admin_words(struct coord *co, const struct cgroup *cg, char *buf, size_t len);
bool coord_rebuild_busy(const struct cgroup *cg, bool *migrating, bool *rebuilding);

#endif
