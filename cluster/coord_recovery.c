/* coord_recovery.c - what the coordinator does when a process of a coding
 * group dies (docs/recovery.md).
 *
 * Each group has a view: who serves each logical data process (its own
 * process, or a parity process that took it over) and the state of each
 * parity process (parity, serving a dead DP, dead).  Every member of the
 * group gets the view after each change ("group <g> <view>"), and again
 * after each hello.
 *
 * A dead parity process only changes the view: the group's data processes
 * leave it out of their ack set and writes go on with one parity less.
 *
 * A dead DP (or a dead recovery process, which is a dead DP too) is taken
 * over in three steps, each answered by the group's parity processes:
 *   prepare <g> <f> [gone]     -> prepared <g> <f> <received xid>
 *       the stable xid is the minimum over every parity process that still
 *       holds parity (paper 4.1.1); then one of them, r, is chosen;
 *       "gone": the process that streamed f came back with a new pid, so
 *       no read lease it held can be running (only in the first prepare);
 *   truncate <g> <f> <xid> <r> -> truncated <g> <f>      (all but r)
 *       they apply f's records up to the stable xid, drop the rest, and
 *       learn that r will send f's stream from now on;
 *   takeover <g> <f> <xid>     -> serving <g> <f>        (r)
 *       r serves f's keys.
 * Then the slot map gets a new epoch in which f's endpoint is r's client
 * port, and it is persisted and pushed like a move.  A step that stays
 * unanswered for a second is sent again; a participant that dies drops out
 * of it; the recovery process dying before it serves restarts the
 * takeover.  When no parity process is left to take over, the group has
 * lost data: that is logged and shown, and other groups go on. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_group.h"
#include "coord_internal.h"
#include "link.h"
#include "printable.h"

#define RESEND_AFTER_MS 1000

static bool rs_cluster(const struct coord *co)
{
    return co->c->scheme == SCHEME_RS && co->groups;
}

struct cgroup *coord_group_of(struct coord *co, int g)
{
    return rs_cluster(co) && g >= 0 && g < co->groups->n ? &co->groups->g[g] : NULL;
}

bool coord_alive(const struct member *m)
{
    return m && m->state == MEMBER_ALIVE && m->link;
}

struct member *coord_pp_member(struct coord *co, int g, int j)
{
    return coord_member(co, g, ROLE_PARITY, j);
}

/* ---- views ---- */

static void send_view_to(struct coord *co, struct cgroup *cg, struct member *m)
{
    char text[320], view[256];
    group_view_format(&cg->view, view, sizeof(view));
    snprintf(text, sizeof(text), "group %d %s", cg->g, view);
    coord_send(m, text);
}

void coord_broadcast_view(struct coord *co, struct cgroup *cg)
{
    cg->view.version++;
    char view[256];
    group_view_format(&cg->view, view, sizeof(view));
    fprintf(stderr, "coordinator: group %d view %s\n", cg->g, view);
    coord_save_progress(co);    /* before any member sees the view */
    for (int i = 0; i < co->nmembers; i++) {
        struct member *m = &co->members[i];
        if (m->proc->group == cg->g && coord_alive(m))
            send_view_to(co, cg, m);
    }
}

/* ---- the map ---- */

/* f's endpoint now points at r's client port.  1 when that map waits for
 * a running move (coord_publish_map). */
static int publish_takeover(struct coord *co, struct cgroup *cg, int f, int r)
{
    return coord_publish_dp(co, cg, f, coord_pp_member(co, cg->g, r)->proc);
}

/* A new map epoch in which logical DP f's endpoint is rp's client port. */
int coord_publish_dp(struct coord *co, struct cgroup *cg, int f, const struct cluster_proc *rp)
{
    struct slotmap next;
    if (coord_map_copy(&next, coord_map_base(co)) < 0) {
        fprintf(stderr, "coordinator: out of memory publishing group %d dp %d's takeover\n",
                cg->g, f);
        return -1;
    }
    int e = -1;
    for (int i = 0; i < next.nendpoints; i++)
        if (next.endpoints[i].group == cg->g && next.endpoints[i].role == ROLE_DATA &&
            next.endpoints[i].index == f)
            e = i;
    if (e < 0) {
        fprintf(stderr, "coordinator: group %d dp %d is not in the slot map\n", cg->g, f);
        slotmap_free(&next);
        return -1;
    }
    snprintf(next.endpoints[e].host, sizeof(next.endpoints[e].host), "%s", rp->host);
    next.endpoints[e].port = rp->port;
    next.epoch = coord_next_epoch(co);
    int rc = coord_publish_map(co, &next);
    if (rc < 0)
        fprintf(stderr, "coordinator: out of memory publishing epoch %llu\n",
                (unsigned long long)coord_next_epoch(co));
    return rc;
}

/* After a restart: a map the last run held for a move (coord_publish_map)
 * was not saved, so a logical DP's endpoint may still name the process
 * that served it before the view's change.  Published again from the
 * view (held again if the saved move still runs). */
void coord_recovery_republish(struct coord *co)
{
    if (!rs_cluster(co))
        return;
    for (int g = 0; g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        for (int f = 0; f < cg->view.k; f++) {
            int r = cg->view.dp_server[f];
            struct member *m = r >= 0 ? coord_pp_member(co, g, r)
                             : r == -1 ? coord_member(co, g, ROLE_DATA, f) : NULL;
            if (!m)
                continue;
            const struct slotmap *map = coord_map_base(co);
            int e = slotmap_find(map, m->proc->host, m->proc->port);
            if (e >= 0 && map->endpoints[e].group == g && map->endpoints[e].role == ROLE_DATA &&
                map->endpoints[e].index == f)
                continue;
            fprintf(stderr, "coordinator: group %d dp %d is served by %s:%d, which the saved map "
                    "does not name (a map held for a move when the last run ended): publishing "
                    "it\n", g, f, m->proc->host, m->proc->port);
            coord_publish_dp(co, cg, f, m->proc);
        }
    }
}

/* Takeovers whose map waited for a move serve from now: their time to
 * serve again counts to here. */
void coord_recovery_on_held_map_published(struct coord *co)
{
    if (!co->groups)
        return;
    for (int g = 0; g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        for (int f = 0; f < cg->view.k; f++) {
            struct takeover *tk = &cg->tk[f];
            if (!tk->map_held)
                continue;
            tk->map_held = false;
            cg->last_serve_ms = (coord_now_us() - tk->dead_at_us) / 1000;
            cg->last_served_wall_ms = coord_wall_ms();
            fprintf(stderr, "coordinator: group %d dp %d is served at epoch %llu, %llu ms after "
                    "its death was seen (its map waited for a slot move)\n", cg->g, f,
                    (unsigned long long)co->map.epoch, (unsigned long long)cg->last_serve_ms);
        }
    }
    coord_save_progress(co);
}

/* ---- the takeover of a dead DP ---- */

static void mark_lost(struct coord *co, struct cgroup *cg, int f, const char *why)
{
    struct takeover *tk = &cg->tk[f];
    tk->phase = PH_NONE;
    cg->view.dp_server[f] = -2;
    if (!cg->lost)
        snprintf(cg->lost_why, sizeof(cg->lost_why), "dp %d: %s", f, why);
    cg->loss_wall_ms = coord_wall_ms();
    cg->lost = true;
    fprintf(stderr, "coordinator: DATA LOSS in group %d: data process %d cannot be recovered "
            "(%s); the group's other keys are still served, other groups are not affected\n",
            cg->g, f, why);
    coord_broadcast_view(co, cg);
}

static void send_step(struct coord *co, struct cgroup *cg, int f)
{
    struct takeover *tk = &cg->tk[f];
    char text[128];
    tk->step_at_ms = coord_now_ms();
    for (int j = 0; j < cg->view.m; j++) {
        if (!(tk->waiting & (1u << j)))
            continue;
        if (tk->phase == PH_PREPARE)
            snprintf(text, sizeof(text), "prepare %d %d%s", cg->g, f, tk->gone ? " gone" : "");
        else if (tk->phase == PH_TRUNCATE)
            snprintf(text, sizeof(text), "truncate %d %d %" PRIu64 " %d", cg->g, f, tk->stable,
                     tk->r);
        else
            snprintf(text, sizeof(text), "takeover %d %d %" PRIu64, cg->g, f, tk->stable);
        coord_send(coord_pp_member(co, cg->g, j), text);
    }
    /* Sent again (unanswered for a second) as a plain prepare: one that
     * was lost, or a parity process built before "gone", then waits for
     * the lease at most. */
    if (tk->phase == PH_PREPARE)
        tk->gone = false;
}

/* The parity processes that still hold parity and are alive. */
static uint32_t holders(struct coord *co, struct cgroup *cg)
{
    uint32_t set = 0;
    for (int j = 0; j < cg->view.m; j++)
        if ((cg->view.pp_state[j] == GV_PP_PARITY || cg->view.pp_state[j] == GV_PP_SERVING) &&
            coord_alive(coord_pp_member(co, cg->g, j)))
            set |= 1u << j;
    return set;
}

static void start_takeover(struct coord *co, struct cgroup *cg, int f)
{
    struct takeover *tk = &cg->tk[f];
    uint64_t dead_at = tk->phase != PH_NONE ? tk->dead_at_us : coord_now_us();
    if (tk->phase == PH_NONE)
        cg->last_dead_wall_ms = coord_wall_ms();
    /* Only the first prepare of a deferred takeover says "gone" (send_step
     * clears it): one started over may fence a recovery process that was
     * told to serve, and may hold a lease. */
    bool gone = tk->gone && tk->deferred;
    memset(tk, 0, sizeof(*tk));
    tk->dead_at_us = dead_at;
    tk->gone = gone;
    if (cg->view.dp_server[f] == -1)
        cg->own_state_newest[f] = true;    /* its own process served until now */
    else if (cg->view.dp_server[f] >= 0)
        cg->own_state_newest[f] = false;   /* a recovery process served since */
    cg->view.dp_server[f] = -2;
    tk->participants = holders(co, cg);
    if (tk->participants == 0) {
        mark_lost(co, cg, f, "no parity process of the group is left");
        return;
    }
    tk->phase = PH_PREPARE;
    tk->waiting = tk->participants;
    tk->stable = UINT64_MAX;
    tk->prepare_started_us = coord_now_us();
    fprintf(stderr, "coordinator: group %d dp %d is dead: preparing its stream on %d parity "
            "process(es)%s\n", cg->g, f, __builtin_popcount(tk->participants),
            tk->gone ? " at once (what streamed it restarted: its links have ended)" : "");
    coord_broadcast_view(co, cg);
    send_step(co, cg, f);
}

/* Chosen for another takeover that is not serving yet? */
static bool promised(const struct cgroup *cg, int j)
{
    for (int f = 0; f < cg->view.k; f++) {
        const struct takeover *tk = &cg->tk[f];
        if ((tk->phase == PH_TRUNCATE || tk->phase == PH_TAKEOVER) && tk->r == j)
            return true;
    }
    return false;
}

/* The lowest-index parity process in parity state among the participants
 * (two data processes that die together get two different ones). */
static int choose_recovery_process(struct coord *co, struct cgroup *cg, uint32_t among)
{
    for (int j = 0; j < cg->view.m; j++)
        if ((among & (1u << j)) && cg->view.pp_state[j] == GV_PP_PARITY && !promised(cg, j) &&
            coord_alive(coord_pp_member(co, cg->g, j)))
            return j;
    return -1;
}

static void go_takeover(struct coord *co, struct cgroup *cg, int f)
{
    struct takeover *tk = &cg->tk[f];
    tk->phase = PH_TAKEOVER;
    tk->waiting = 1u << tk->r;
    coord_save_progress(co);
    send_step(co, cg, f);
}

static void prepared_all(struct coord *co, struct cgroup *cg, int f)
{
    struct takeover *tk = &cg->tk[f];
    tk->prepare_us = coord_now_us() - tk->prepare_started_us;
    cg->last_prepare_us = tk->prepare_us;
    tk->r = choose_recovery_process(co, cg, tk->participants);
    if (tk->r < 0) {
        mark_lost(co, cg, f, "every parity process left already serves another data process");
        return;
    }
    fprintf(stderr, "coordinator: group %d dp %d: stable xid %" PRIu64 " (preparation %.3f ms); "
            "parity process %d takes over\n", cg->g, f, tk->stable,
            (double)tk->prepare_us / 1000.0, tk->r);
    tk->phase = PH_TRUNCATE;
    tk->waiting = tk->participants & ~(1u << tk->r);
    coord_save_progress(co);
    if (tk->waiting == 0)
        go_takeover(co, cg, f);
    else
        send_step(co, cg, f);
}

static void serving(struct coord *co, struct cgroup *cg, int f)
{
    struct takeover *tk = &cg->tk[f];
    int r = tk->r;
    tk->phase = PH_NONE;
    cg->view.dp_server[f] = r;
    cg->own_state_newest[f] = false;
    cg->view.pp_state[r] = GV_PP_SERVING;
    cg->view.pp_serves[r] = f;
    memset(&cg->prog[r], 0, sizeof(cg->prog[r]));
    /* Before the view's save: a coordinator started after it reports them. */
    cg->last_serve_ms = (coord_now_us() - tk->dead_at_us) / 1000;
    cg->last_served_wall_ms = coord_wall_ms();
    tk->map_held = publish_takeover(co, cg, f, r) == 1;
    coord_broadcast_view(co, cg);
    fprintf(stderr, "coordinator: group %d dp %d is served by parity process %d at epoch %llu, "
            "%llu ms after its death was seen (preparation %.3f ms)%s\n", cg->g, f, r,
            (unsigned long long)co->map.epoch, (unsigned long long)cg->last_serve_ms,
            (double)tk->prepare_us / 1000.0, coord_held_note(co));
}

/* A participant is gone: it answers no more. */
static void drop_participant(struct coord *co, struct cgroup *cg, int j)
{
    for (int f = 0; f < cg->view.k; f++) {
        struct takeover *tk = &cg->tk[f];
        if (tk->phase == PH_NONE || !(tk->participants & (1u << j)))
            continue;
        if ((tk->phase == PH_TRUNCATE || tk->phase == PH_TAKEOVER) && tk->r == j) {
            /* The chosen one died before serving: start over without it. */
            start_takeover(co, cg, f);
            continue;
        }
        tk->participants &= ~(1u << j);
        tk->waiting &= ~(1u << j);
        if (tk->waiting != 0)
            continue;
        if (tk->phase == PH_PREPARE) {
            if (tk->participants == 0)
                mark_lost(co, cg, f, "no parity process of the group is left");
            else
                prepared_all(co, cg, f);
        } else if (tk->phase == PH_TRUNCATE) {
            go_takeover(co, cg, f);
        }
    }
}

/* ---- events ---- */

/* Nobody serves dp f's keys until its takeover, which starts once the
 * group's parity processes are heard from (they must all take part): a
 * death a coordinator learns of only from a restarted process's new pid,
 * maybe before the others have said hello.  That process is gone: its
 * prepares need not wait for a read lease. */
static void defer_takeover(struct coord *co, struct cgroup *cg, int f, bool own_state_newest,
                           const char *who)
{
    struct takeover *tk = &cg->tk[f];
    tk->deferred = true;
    tk->gone = true;
    tk->dead_at_us = coord_now_us();
    cg->view.dp_server[f] = -2;
    cg->own_state_newest[f] = own_state_newest;
    if (!cg->degraded_since_us)
        cg->degraded_since_us = coord_now_us();
    fprintf(stderr, "coordinator: group %d dp %d: %s died unseen; its takeover starts once "
            "the group's parity processes are heard from\n", cg->g, f, who);
}

/* Parity process j is dead.  The data process it served (if any) is taken
 * over again by another, at once or, when `defer`, once the group's parity
 * processes are heard from. */
static void parity_dead(struct coord *co, struct cgroup *cg, int j, bool defer)
{
    enum gv_pp was = cg->view.pp_state[j];
    int served = cg->view.pp_serves[j];
    if (was == GV_PP_DEAD)
        return;
    cg->view.pp_state[j] = GV_PP_DEAD;
    cg->view.pp_serves[j] = -1;
    memset(&cg->prog[j], 0, sizeof(cg->prog[j]));
    fprintf(stderr, "coordinator: group %d parity process %d is dead%s\n", cg->g, j,
            was == GV_PP_SERVING ? " (it served a dead data process)" :
            was == GV_PP_REBUILDING ? " (it was being rebuilt)" : "");
    drop_participant(co, cg, j);
    bool again = was == GV_PP_SERVING && served >= 0;
    if (again && defer && cg->tk[served].phase == PH_NONE) {
        defer_takeover(co, cg, served, false, "its recovery process");
        coord_broadcast_view(co, cg);
    } else if (again) {
        start_takeover(co, cg, served);   /* broadcasts the view */
    } else {
        coord_broadcast_view(co, cg);
    }
}

void coord_recovery_on_dead(struct coord *co, struct member *m)
{
    const struct cluster_proc *p = m->proc;
    struct cgroup *cg = coord_group_of(co, p->group);
    if (!cg)
        return;
    coord_rebuild_on_dead(co, cg, m);
    if (p->role == ROLE_DATA) {
        /* Only the process that serves it: a replaced one that died again
         * changes nothing. */
        if (cg->view.dp_server[p->index] == -1 && cg->tk[p->index].phase == PH_NONE)
            start_takeover(co, cg, p->index);
        return;
    }
    if (p->role == ROLE_PARITY)
        parity_dead(co, cg, p->index, false);
}

/* Alive; or, with `paused`, perhaps only paused while this coordinator
 * started (never heard from, but its peers' links to it are up:
 * coord_lost_paused). */
static bool holds_place(const struct coord *co, const struct member *m, bool paused)
{
    return coord_alive(m) || (paused && coord_lost_paused(co, m));
}

/* A data place is whole while the process that serves it (its own, or the
 * recovery process) holds it; a parity place while its process holds
 * parity and holds it (one that serves a data place gave its parity up).
 * `without` counts as dead. */
static int failed_places(struct coord *co, struct cgroup *cg, const struct member *without,
                         bool paused)
{
    int failed = 0;
    for (int f = 0; f < cg->view.k; f++) {
        int s = cg->view.dp_server[f];
        const struct member *by = s == -1 ? coord_member(co, cg->g, ROLE_DATA, f)
                                : s >= 0 ? coord_pp_member(co, cg->g, s) : NULL;
        if (by == NULL || by == without || !holds_place(co, by, paused))
            failed++;
    }
    for (int j = 0; j < cg->view.m; j++) {
        const struct member *pp = coord_pp_member(co, cg->g, j);
        if (cg->view.pp_state[j] != GV_PP_PARITY || pp == NULL || pp == without ||
            !holds_place(co, pp, paused))
            failed++;
    }
    return failed;
}

bool coord_recovery_recoverable(struct coord *co, int g)
{
    struct cgroup *cg = coord_group_of(co, g);
    return cg && !cg->lost && failed_places(co, cg, NULL, false) <= cg->view.m;
}

bool coord_recovery_death_loses(struct coord *co, const struct member *m, int *failed)
{
    struct cgroup *cg = coord_group_of(co, m->proc->group);
    if (cg == NULL || (m->proc->role != ROLE_DATA && m->proc->role != ROLE_PARITY))
        return false;
    /* A death that fails no more places than are failed now (its place
     * is failed already: joining, rebuilt, or taken over) loses nothing.
     * Members never heard from that may be paused hold their places only
     * when m is one of them: a member that was heard from and fell silent
     * is held rather than one whose silence may yet be a crash (its links
     * stay up until TCP_USER_TIMEOUT). */
    bool paused = m->state == MEMBER_UNKNOWN;
    int now = failed_places(co, cg, NULL, paused), after = failed_places(co, cg, m, paused);
    *failed = now;
    return after > now && after > cg->view.m;
}

void coord_recovery_on_hello(struct coord *co, struct member *m)
{
    struct cgroup *cg = coord_group_of(co, m->proc->group);
    if (!cg)
        return;
    send_view_to(co, cg, m);
    if (coord_recovery_joining(co, m))
        coord_log_member(m, "restarted, but its place is taken (group view); it stays "
                         "joining and serves nothing until it is rebuilt");
}

void coord_recovery_on_unseen_restart(struct coord *co, struct member *m)
{
    const struct cluster_proc *p = m->proc;
    struct cgroup *cg = coord_group_of(co, p->group);
    if (!cg)
        return;
    if (p->role == ROLE_PARITY) {
        /* No parity there (rebuilt later); what it served is taken over
         * again, by a process that may not have said hello yet. */
        coord_rebuild_on_dead(co, cg, m);
        parity_dead(co, cg, p->index, true);
        return;
    }
    if (p->role != ROLE_DATA || cg->view.dp_server[p->index] != -1 ||
        cg->tk[p->index].phase != PH_NONE)
        return;
    /* As for a death seen (coord_recovery_on_dead): a parity process being
     * rebuilt from it starts over. */
    coord_rebuild_on_dead(co, cg, m);
    defer_takeover(co, cg, p->index, true, "its process");   /* it served until now */
    coord_broadcast_view(co, cg);
}

/* A deferred takeover may start: every parity process holding parity is
 * alive, or the startup grace is over (the dead ones are known by then). */
static void start_deferred(struct coord *co, struct cgroup *cg)
{
    bool all = coord_now_ms() - co->started_ms > co->startup_grace_ms;
    if (!all) {
        all = true;
        for (int j = 0; j < cg->view.m; j++)
            if (cg->view.pp_state[j] != GV_PP_DEAD && !coord_alive(coord_pp_member(co, cg->g, j)))
                all = false;
    }
    for (int f = 0; all && f < cg->view.k; f++) {
        if (!cg->tk[f].deferred)
            continue;
        start_takeover(co, cg, f);   /* clears deferred */
    }
}

bool coord_recovery_joining(const struct coord *co, const struct member *m)
{
    const struct cluster_proc *p = m->proc;
    if (m->state != MEMBER_ALIVE || co->c->scheme != SCHEME_RS || !co->groups ||
        p->group < 0 || p->group >= co->groups->n)
        return false;
    const struct cgroup *cg = &co->groups->g[p->group];
    if (p->role == ROLE_DATA)
        return cg->view.dp_server[p->index] != -1;
    if (p->role == ROLE_PARITY)
        return cg->view.pp_state[p->index] == GV_PP_DEAD;
    return false;
}

/* "<verb> <g> <f> [<xid>]" */
static int parse_answer(const char *text, size_t len, char *verb, size_t vlen, int *g, int *f,
                        uint64_t *xid)
{
    char buf[128];
    if (len >= sizeof(buf))
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    unsigned long long x = 0;
    int gg, ff;
    char v[24];
    int n = sscanf(buf, "%23s %d %d %llu", v, &gg, &ff, &x);
    if (n < 3 || gg < 0 || ff < 0)
        return -1;
    snprintf(verb, vlen, "%s", v);
    *g = gg;
    *f = ff;
    *xid = x;
    return n;
}

void coord_recovery_on_answer(struct coord *co, struct member *m, const char *text, size_t len)
{
    char verb[24];
    int g, f;
    uint64_t xid;
    int n = parse_answer(text, len, verb, sizeof(verb), &g, &f, &xid);
    struct cgroup *cg = n >= 3 ? coord_group_of(co, g) : NULL;
    if (cg && m->proc->group == g && coord_rebuild_on_answer(co, cg, m, verb, f, xid))
        return;
    if (!cg || f >= cg->view.k || m->proc->role != ROLE_PARITY || m->proc->group != g) {
        char shown[81];
        coord_log_member(m, "sent a malformed recovery answer '%s'; ignored",
                         printable_copy(shown, sizeof(shown), text, len));
        return;
    }
    struct takeover *tk = &cg->tk[f];
    int j = m->proc->index;
    if (!(tk->waiting & (1u << j)))
        return;   /* late or repeated */
    if (strcmp(verb, "prepared") == 0 && tk->phase == PH_PREPARE && n == 4) {
        if (xid < tk->stable)
            tk->stable = xid;
        tk->waiting &= ~(1u << j);
        if (tk->waiting == 0)
            prepared_all(co, cg, f);
    } else if (strcmp(verb, "truncated") == 0 && tk->phase == PH_TRUNCATE) {
        tk->waiting &= ~(1u << j);
        if (tk->waiting == 0)
            go_takeover(co, cg, f);
    } else if (strcmp(verb, "serving") == 0 && tk->phase == PH_TAKEOVER && j == tk->r) {
        tk->waiting = 0;
        serving(co, cg, f);
    }
}

/* Data process f says it restarted without its state, while the view has
 * its own process serving its keys and no takeover of it is under way: its
 * death was never seen (it died before this coordinator heard from it, or
 * its new link replaced the old one first).  It is taken over as a process
 * that died unseen; the old one is gone. */
static void on_nostate(struct coord *co, struct cgroup *cg, struct member *m, int f)
{
    if (f != m->proc->index || f < 0 || f >= cg->view.k || cg->view.dp_server[f] != -1 ||
        cg->tk[f].phase != PH_NONE || cg->tk[f].deferred || cg->mig[f].phase != MIG_NONE)
        return;
    coord_log_member(m, "restarted without its state, and no death of it was seen: its keys "
                     "are taken over");
    coord_fail_move_of(co, m, true);
    coord_recovery_on_unseen_restart(co, m);
}

void coord_recovery_on_progress(struct coord *co, struct member *m, const char *text,
                                size_t len)
{
    struct cgroup *cg = coord_group_of(co, m->proc->group);
    char buf[128];
    if (!cg || len >= sizeof(buf))
        return;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (coord_rebuild_on_progress(co, cg, m, buf))
        return;
    int f;
    if (m->proc->role == ROLE_DATA && sscanf(buf, "nostate %d", &f) == 1) {
        on_nostate(co, cg, m, f);
        return;
    }
    if (m->proc->role != ROLE_PARITY)
        return;
    unsigned long long done, total, bytes;
    if (sscanf(buf, "rec %d %llu %llu %llu", &f, &done, &total, &bytes) != 4)
        return;
    int j = m->proc->index;
    if (cg->view.pp_state[j] == GV_PP_PARITY && f >= 0 && f < cg->view.k &&
        cg->view.dp_server[f] != j) {
        /* It still runs a data engine for f, which its data process took
         * back (a coordinator that restarted during a handoff): its region
         * is not parity.  It is rebuilt. */
        fprintf(stderr, "coordinator: group %d parity process %d still holds dp %d's data, not "
                "parity; it will be rebuilt\n", cg->g, j, f);
        cg->view.pp_state[j] = GV_PP_DEAD;
        coord_broadcast_view(co, cg);
        return;
    }
    struct progress *pg = &cg->prog[j];
    uint64_t now = coord_now_ms();
    if (pg->at_ms && now > pg->at_ms && bytes >= pg->bytes)
        pg->rate = (bytes - pg->bytes) * 1000u / (now - pg->at_ms);
    if (done != pg->done || pg->changed_at_ms == 0)
        pg->changed_at_ms = now;
    pg->done = done;
    pg->total = total;
    pg->bytes = bytes;
    pg->at_ms = now;
}

void coord_recovery_forgive(struct coord *co, uint64_t late, uint64_t now)
{
    if (!rs_cluster(co))
        return;
    for (int g = 0; g < co->groups->n; g++)
        coord_rebuild_forgive(&co->groups->g[g], late, now);
}

void coord_recovery_check(struct coord *co)
{
    if (!rs_cluster(co))
        return;
    uint64_t now = coord_now_ms();
    for (int g = 0; g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        start_deferred(co, cg);
        for (int f = 0; f < cg->view.k; f++) {
            struct takeover *tk = &cg->tk[f];
            if (tk->phase != PH_NONE && now - tk->step_at_ms > RESEND_AFTER_MS)
                send_step(co, cg, f);
        }
        coord_rebuild_check(co, cg);
    }
}

/* ---- status ---- */

bool coord_group_unheard(const struct coord *co, int g)
{
    for (int i = 0; i < co->nmembers; i++)
        if (co->members[i].proc->group == g && co->members[i].state == MEMBER_UNKNOWN)
            return true;
    return false;
}

static const char *group_state(const struct coord *co, const struct cgroup *cg, int *redundancy)
{
    int parity = 0;
    bool busy = false, degraded = false, recovering = false;
    for (int j = 0; j < cg->view.m; j++) {
        if (cg->view.pp_state[j] == GV_PP_PARITY)
            parity++;
        else
            degraded = true;
        if (cg->view.pp_state[j] == GV_PP_SERVING && cg->prog[j].done < cg->prog[j].total)
            recovering = true;
        if (cg->view.pp_state[j] == GV_PP_SERVING && cg->prog[j].total == 0)
            recovering = true;   /* no progress heard yet */
    }
    for (int f = 0; f < cg->view.k; f++)
        if (cg->tk[f].phase != PH_NONE || cg->tk[f].deferred)
            busy = true;
    bool migrating, rebuilding;
    coord_rebuild_busy(cg, &migrating, &rebuilding);
    *redundancy = cg->lost ? 0 : parity;
    if (cg->lost)
        return "lost";
    if (busy)
        return "taking-over";
    if (recovering)
        return "recovering";
    if (migrating)
        return "migrating";
    if (rebuilding)
        return "rebuilding";
    if (coord_group_unheard(co, cg->g))
        return "starting";
    return degraded ? "degraded" : "healthy";
}

void coord_recovery_admin(struct coord *co, eng_write_fn write, void *wctx)
{
    char line[1024], view[256];
    int n;
    for (int g = 0; rs_cluster(co) && g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        int red;
        const char *st = group_state(co, cg, &red);
        group_view_format(&cg->view, view, sizeof(view));
        n = snprintf(line, sizeof(line), "group %d %s redundancy %d/%d view %s "
                     "last_serve_ms %llu last_prepare_us %llu dead_at_ms %llu served_at_ms %llu",
                     g, st, red, cg->view.m, view, (unsigned long long)cg->last_serve_ms,
                     (unsigned long long)cg->last_prepare_us,
                     (unsigned long long)cg->last_dead_wall_ms,
                     (unsigned long long)cg->last_served_wall_ms);
        for (int j = 0; j < cg->view.m && n > 0 && (size_t)n < sizeof(line); j++) {
            const struct progress *pg = &cg->prog[j];
            if (cg->view.pp_state[j] != GV_PP_SERVING)
                continue;
            n += snprintf(line + n, sizeof(line) - (size_t)n,
                          " rec pp%d dp%d units %llu/%llu bytes %llu rate %llu", j,
                          cg->view.pp_serves[j], (unsigned long long)pg->done,
                          (unsigned long long)pg->total, (unsigned long long)pg->bytes,
                          (unsigned long long)pg->rate);
        }
        if (n > 0 && (size_t)n < sizeof(line))
            n += coord_rebuild_admin_words(co, cg, line + n, sizeof(line) - (size_t)n);
        if (cg->loss_wall_ms && n > 0 && (size_t)n < sizeof(line))
            n += snprintf(line + n, sizeof(line) - (size_t)n, " keys_lost_at_ms %llu",
                          (unsigned long long)cg->loss_wall_ms);
        if (cg->lost && n > 0 && (size_t)n < sizeof(line))
            n += snprintf(line + n, sizeof(line) - (size_t)n, " lost %s", cg->lost_why);
        if (n > 0) {
            size_t len = (size_t)n < sizeof(line) - 3 ? (size_t)n : sizeof(line) - 3;
            line[len++] = '\r';
            line[len++] = '\n';
            write(wctx, line, len);
        }
    }
    write(wctx, "END\r\n", 5);
}

/* ---- setup ---- */

/* A map whose DP endpoint points at a parity process of its group means
 * that parity process serves it (a coordinator restarted after a takeover). */
static void view_from_map(struct coord *co, struct cgroup *cg)
{
    for (int e = 0; e < co->map.nendpoints; e++) {
        const struct slotmap_endpoint *ep = &co->map.endpoints[e];
        if (ep->group != cg->g || ep->role != ROLE_DATA || ep->index < 0 ||
            ep->index >= cg->view.k)
            continue;
        for (int j = 0; j < cg->view.m; j++) {
            const struct member *pm = coord_pp_member(co, cg->g, j);
            if (pm && pm->proc->port == ep->port && strcmp(pm->proc->host, ep->host) == 0) {
                cg->view.dp_server[ep->index] = j;
                cg->view.pp_state[j] = GV_PP_SERVING;
                cg->view.pp_serves[j] = ep->index;
            }
        }
    }
}

int coord_recovery_init(struct coord *co)
{
    if (co->c->scheme != SCHEME_RS)
        return 0;
    int k = co->c->k, m = co->c->n - co->c->k;
    if (k > RECOV_MAX_K || m > RECOV_MAX_M) {
        fprintf(stderr, "coordinator: RS(%d,%d) is beyond what recovery handles\n", k, co->c->n);
        return -1;
    }
    co->groups = calloc(1, sizeof(*co->groups));
    if (!co->groups)
        return -1;
    co->groups->n = co->c->ngroups;
    co->groups->g = calloc((size_t)co->c->ngroups + 1, sizeof(*co->groups->g));
    if (!co->groups->g)
        return -1;
    for (int g = 0; g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        cg->g = g;
        group_view_init(&cg->view, k, m);
        /* Versions must grow across coordinator restarts too: processes
         * ignore a view older than the one they hold. */
        cg->view.version = (uint64_t)time(NULL) * 1000u;
        view_from_map(co, cg);
    }
    return 0;
}

void coord_recovery_free(struct coord *co)
{
    if (!co->groups)
        return;
    free(co->groups->g);
    free(co->groups);
    co->groups = NULL;
}
