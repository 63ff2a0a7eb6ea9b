/* groups.h - the coordinator's `cocytus groups` lines as cocytus-cli reads
 * them: one line per coding group with its state, its redundancy, who
 * serves each data process, the state of each parity process, the last
 * takeover's figures and the progress of every running recovery,
 * migration or rebuild (docs/cli.md, "status").  Pure parsing and
 * arithmetic, no sockets: the unit tests link this alone. */
#ifndef CLIENT_GROUPS_H
#define CLIENT_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recovery.h"

#define GROUPS_MAX_PROGRESS 16   /* progress parts kept per line */
#define PROGRESS_BAR_MAX 60      /* cells of a progress bar at most */

/* What a parity process (or, in a pbr group, a backup) is doing.  Only
 * GROUP_PP_PARITY holds usable parity. */
enum group_pp {
    GROUP_PP_PARITY,      /* "p" */
    GROUP_PP_SERVING,     /* "s<f>": serves data process f (recovery process) */
    GROUP_PP_MIGRATING,   /* "m<f>": hands f's data back to its restarted data process */
    GROUP_PP_REBUILDING,  /* "b": being rebuilt as parity, holds no usable parity yet */
    GROUP_PP_DEAD,        /* "x" */
    GROUP_PP_OTHER        /* a word this tool does not know: not parity */
};

enum group_progress_kind {
    PROGRESS_REC,         /* rec pp<j> dp<f> units ...: unit recovery */
    PROGRESS_MIG,         /* mig dp<f> pp<r> units ...: data migration to the replacement */
    PROGRESS_REB,         /* reb pp<j> units ...: parity rebuild */
    PROGRESS_REB_PBR      /* reb b<j> items ...: a pbr backup being rebuilt */
};

/* One progress part of a line. */
struct group_progress {
    enum group_progress_kind kind;
    int pp;                      /* REC, MIG, REB: the parity process; REB_PBR: the backup */
    int dp;                      /* REC, MIG: the data process; else -1 */
    uint64_t done, total;        /* units (4 KB) or, for REB_PBR, items */
    uint64_t bytes;              /* bytes transferred so far */
    uint64_t rate;               /* bytes per second, 0 when not known yet */
};

/* One line of `cocytus groups`. */
struct gview_group {
    int group;
    char state[16];              /* healthy, degraded, taking-over, recovering,
                                  * migrating, rebuilding, lost */
    int redundancy, target;      /* failures it tolerates now / its target */
    struct group_view view;      /* who serves each DP; each PP's state ('m' and
                                  * 'b' are GV_PP_DEAD here: not parity) */
    enum group_pp pp[RECOV_MAX_M];
    int pp_dp[RECOV_MAX_M];      /* SERVING, MIGRATING: the data process, else -1 */
    uint64_t last_serve_ms, last_prepare_us;
    uint64_t dead_at_ms, served_at_ms;   /* unix ms of the last death / serving map, 0 never */
    uint64_t keys_lost_at_ms;    /* unix ms the group last lost data, 0 never */
    int nprogress;
    struct group_progress progress[GROUPS_MAX_PROGRESS];
    char lost[192];              /* why the group lost data ("" if it did not) */
    bool pbr;                    /* a primary-backup group: no view, only the state,
                                  * redundancy and progress words count */
    int pbr_primary;             /* its primary's member number */
};

/* Parse one `cocytus groups` line.  Unknown words after the fixed part
 * are skipped, so a newer coordinator's additions do not break the tool.
 * 0, or -1 when malformed. */
int gview_parse_group(const char *line, struct gview_group *out);

/* Every DP served by its own process, every PP parity, nothing lost (the
 * layout is the original one). */
bool gview_group_healthy(const struct gview_group *gg);
/* Healthy, in its original layout, at its target redundancy and with no
 * recovery, migration or rebuild running: what `status` exits 0 for. */
bool group_at_full_redundancy(const struct gview_group *gg);
/* Whether some parity process hands data back to data process f. */
bool group_migrating_to(const struct gview_group *gg, int f);

/* A progress part is finished (done == total, total > 0). */
bool progress_done(const struct group_progress *p);
/* Per cent done (0 when total is 0). */
double progress_percent(const struct group_progress *p);
/* Seconds left at the current rate, or -1 when unknown (no rate yet, or
 * nothing to go on).  Units are 4 KB each; items are taken at the bytes
 * per item seen so far. */
double progress_eta_s(const struct group_progress *p);
/* "[#########...........]" of width cells between the brackets into buf
 * (cap >= width + 3).  Returns buf. */
const char *progress_bar(const struct group_progress *p, int width, char *buf, size_t cap);
/* "parity 0 rebuilding data 2" and the like, for messages. */
const char *progress_what(const struct group_progress *p, char *buf, size_t cap);
/* The whole progress text: what, a bar of width cells (at most
 * PROGRESS_BAR_MAX), per cent, counts, bytes, rate and ETA, e.g.
 * "parity 0 rebuilding data 2 [######....] 66.2%  10852/16384 units,
 * 6815744 bytes transferred, 41.20 MB/s, ETA 0.6 s". */
const char *progress_text(const struct group_progress *p, int width, char *buf, size_t cap);

#endif
