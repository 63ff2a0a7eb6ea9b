/* coord_progress.c - the work in progress that a new leader (or the one
 * coordinator, started again) must finish, as text lines saved beside the
 * slot map in ZooKeeper (coord_zk.c) or the state file (coord_state.c):
 *
 *   view <g> <version> <dps> <pps>                 each coding group's view
 *   tk <g> <f> <phase> <r> <stable> <participants> <dead_at>
 *                                                  a takeover of dead DP f
 *                                                  (phase 0: not started yet)
 *   mig <g> <f> <phase> <r> <xid>                  DP f taking its keys back
 *   own <g> <mask>                                 the places whose own process
 *                                                  served last: an admission
 *                                                  keeps what it holds
 *   figures <g> <serve_ms> <prepare_us> <dead_at> <served_at> <full_ms>
 *           <full_at> <degraded_since> <lost_at>   the last failure's timings
 *                                                  (`cocytus groups`; unix ms,
 *                                                  0: none)
 *   move <slot> <to endpoint> <epoch> <dest inc>   the running slot move (the
 *                                                  destination's incarnation at its start)
 *   pbr <g> failover                               a PBR group's failover that
 *                                                  has not chosen yet
 *   pbr <g> promote <best> <participants> <peers>  one that told best to serve
 *   pbr <g> primary <k>                            member k serves, but the map
 *                                                  that says so is held for a
 *                                                  slot move (not saved)
 *   pbr <g> figures <serve_ms> <dead_at> <served_at> <lost_at>
 *                                                  its last failover's timings
 *                                                  (unix ms), first
 *   pid <member> <pid> <incarnation> <dead>        each process's pid and
 *                                                  incarnation, as seen in its
 *                                                  last hello, and the
 *                                                  incarnation last declared
 *                                                  dead (0: none; an older
 *                                                  build wrote the pid only)
 *
 * The coordinator saves them at every step (a view change, a takeover or
 * migration phase, a move starting or ending).  A new leader applies them
 * before anyone is heard from, and each piece continues with the messages
 * that the old leader would have resent anyway (every step is resent until
 * answered, so the processes take a repeated step as the same step):
 *   - a takeover goes on from its phase (prepare again, or truncate/takeover
 *     with the recorded recovery process and stable xid);
 *   - a migration in handoff or serve goes on there (the recovery process
 *     holds writes in handoff: it must be answered); one still copying
 *     starts over later by itself;
 *   - a parity process being rebuilt is rebuilt again from the start;
 *   - a move waits for its source's outcome (its "migrated" is sent again
 *     after the hello, or its epoch shows the move done);
 *   - a PBR failover starts again (fence, choose) once the group's backups
 *     are heard from, and the map's primary is not confirmed meanwhile; a
 *     promotion is sent again (the chosen member, a primary by now or not,
 *     answers it), then the map names it.
 * A takeover resumed counts its time from the death the old leader saw (the
 * tk line's dead_at), not from the resume, and `cocytus groups` reports the
 * last failure's timings whichever coordinator handled it (a drill that
 * kills the coordinator reads them).
 * Without the view lines a restarted data process that came back empty
 * during a takeover would look like the original serving its keys; without
 * the pids, one that died and came back while no leader watched (between
 * the old leader's death and the new one's election) would too: a hello
 * with another pid or incarnation is that process's death, handled late
 * (pids alone repeat for a container's processes started again).  The
 * incarnation declared dead lets a new leader tell a process that was
 * declared dead and replaced (its host was cut off, and a spare took its
 * name) from its successor: it is told to exit, as by the old leader. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_group.h"
#include "coord_internal.h"

#define LINE_MAX_LEN 512

/* ---- saving ---- */

struct textbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void put(struct textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct textbuf *b, const char *fmt, ...)
{
    char line[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line) || b->failed) {
        b->failed = true;
        return;
    }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, line, (size_t)n + 1);
    b->len += (size_t)n;
}

static void put_group(struct textbuf *b, const struct cgroup *cg)
{
    char view[256];
    group_view_format(&cg->view, view, sizeof(view));
    put(b, "view %d %s\n", cg->g, view);
    uint64_t degraded_wall = coord_wall_of_mono_us(cg->degraded_since_us);
    if (cg->last_dead_wall_ms || cg->last_full_wall_ms || degraded_wall || cg->loss_wall_ms)
        put(b, "figures %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
            " %" PRIu64 " %" PRIu64 "\n", cg->g, cg->last_serve_ms, cg->last_prepare_us,
            cg->last_dead_wall_ms, cg->last_served_wall_ms, cg->last_full_ms,
            cg->last_full_wall_ms, degraded_wall, cg->loss_wall_ms);
    unsigned own = 0;
    for (int f = 0; f < cg->view.k; f++)
        if (cg->own_state_newest[f])
            own |= 1u << f;
    if (own)
        put(b, "own %d %u\n", cg->g, own);
    for (int f = 0; f < cg->view.k; f++) {
        const struct takeover *tk = &cg->tk[f];
        if (tk->phase != PH_NONE || tk->deferred)
            put(b, "tk %d %d %d %d %" PRIu64 " %u %" PRIu64 "\n", cg->g, f, (int)tk->phase,
                tk->r, tk->stable, (unsigned)tk->participants,
                coord_wall_of_mono_us(tk->dead_at_us));
        const struct migration *mg = &cg->mig[f];
        if (mg->phase != MIG_NONE)
            put(b, "mig %d %d %d %d %" PRIu64 "\n", cg->g, f, (int)mg->phase, mg->r, mg->xid);
    }
}

char *coord_progress_encode(struct coord *co, size_t *len)
{
    struct textbuf b = { NULL, 0, 0, false };
    put(&b, "progress 1\n");
    for (int g = 0; co->groups && g < co->groups->n; g++)
        put_group(&b, &co->groups->g[g]);
    /* A process not heard from since we started keeps the pid an earlier
     * save gave it: were we to die again before its hello, the next
     * coordinator must still see its restart. */
    for (int i = 0; i < co->nmembers; i++) {
        const struct member *m = &co->members[i];
        long pid = m->pid > 0 ? m->pid : m->saved_pid;
        uint64_t inc = m->pid > 0 ? m->incarnation : m->saved_incarnation;
        if (pid > 0)
            put(&b, "pid %d %ld %" PRIu64 " %" PRIu64 "\n", i, pid, inc, m->dead_incarnation);
    }
    char line[LINE_MAX_LEN];
    for (int g = 0; co->pbr && g < co->c->ngroups; g++) {
        if (coord_pbr_figures_line(co, g, line, sizeof(line)))
            put(&b, "%s\n", line);
        if (coord_pbr_progress_line(co, g, line, sizeof(line)))
            put(&b, "%s\n", line);
    }
    if (co->running >= 0) {
        const struct move *mv = &co->moves[co->running];
        put(&b, "move %u %d %" PRIu64 " %" PRIu64 "\n", mv->slot, mv->to_endpoint, mv->epoch,
            mv->dest_start_incarnation);
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ---- resuming ---- */

static void apply_view(struct coord *co, const char *line)
{
    int g, off = 0;
    if (sscanf(line, "view %d %n", &g, &off) != 1 || off == 0)
        return;
    struct cgroup *cg = coord_group_of(co, g);
    if (!cg)
        return;
    const char *rest = line + off;
    struct group_view v = cg->view;
    if (group_view_parse(&v, cg->view.k, cg->view.m, rest, strlen(rest)) < 0) {
        fprintf(stderr, "coordinator: saved view of group %d is malformed; ignored\n", g);
        return;
    }
    /* Versions only grow, whichever clock this leader has. */
    uint64_t now_version = (uint64_t)time(NULL) * 1000u;
    v.version = v.version > now_version ? v.version : now_version;
    for (int j = 0; j < v.m; j++) {
        if (v.pp_state[j] == GV_PP_REBUILDING)
            v.pp_state[j] = GV_PP_DEAD;       /* rebuilt again from the start */
    }
    cg->view = v;
    for (int f = 0; f < v.k; f++)
        if (v.dp_server[f] == -2 && !cg->lost) {
            cg->lost = true;                  /* unless a takeover line follows */
            snprintf(cg->lost_why, sizeof(cg->lost_why), "dp %d: lost before this leader", f);
        }
}

static void apply_figures(struct coord *co, const char *line)
{
    int g;
    unsigned long long serve, prep, dead, served, full, full_at, degraded, lost_at;
    if (sscanf(line, "figures %d %llu %llu %llu %llu %llu %llu %llu %llu", &g, &serve, &prep,
               &dead, &served, &full, &full_at, &degraded, &lost_at) != 9)
        return;
    struct cgroup *cg = coord_group_of(co, g);
    if (!cg)
        return;
    cg->last_serve_ms = serve;
    cg->last_prepare_us = prep;
    cg->last_dead_wall_ms = dead;
    cg->last_served_wall_ms = served;
    cg->last_full_ms = full;
    cg->last_full_wall_ms = full_at;
    cg->degraded_since_us = degraded ? coord_mono_us_of_wall(degraded) : 0;
    cg->loss_wall_ms = lost_at;
}

static void apply_own(struct coord *co, const char *line)
{
    int g;
    unsigned own;
    if (sscanf(line, "own %d %u", &g, &own) != 2)
        return;
    struct cgroup *cg = coord_group_of(co, g);
    for (int f = 0; cg && f < cg->view.k; f++)
        cg->own_state_newest[f] = (own >> f) & 1u;
}

static void apply_takeover(struct coord *co, const char *line)
{
    int g, f, phase, r;
    unsigned long long stable, dead_wall = 0;
    unsigned participants;
    int n = sscanf(line, "tk %d %d %d %d %llu %u %llu", &g, &f, &phase, &r, &stable, &participants,
                   &dead_wall);
    if (n < 6)
        return;
    struct cgroup *cg = coord_group_of(co, g);
    if (!cg || f < 0 || f >= cg->view.k || phase < PH_NONE || phase > PH_TAKEOVER)
        return;
    struct takeover *tk = &cg->tk[f];
    memset(tk, 0, sizeof(*tk));
    if (phase == PH_NONE) {
        /* A death seen late whose takeover had not started. */
        tk->deferred = true;
        tk->dead_at_us = coord_mono_us_of_wall(dead_wall);
        return;
    }
    tk->phase = (enum dp_phase)phase;
    tk->participants = participants;
    tk->r = r;
    /* From the death the old leader saw (now for a line without it). */
    tk->dead_at_us = coord_mono_us_of_wall(dead_wall);
    tk->prepare_started_us = coord_now_us();
    tk->step_at_ms = 0;                       /* sent at the first check */
    if (tk->phase == PH_PREPARE) {
        tk->stable = UINT64_MAX;
        tk->waiting = participants;
    } else {
        tk->stable = stable;
        tk->waiting = tk->phase == PH_TAKEOVER ? 1u << r : participants & ~(1u << r);
    }
    if (!cg->degraded_since_us)
        cg->degraded_since_us = coord_now_us();
    fprintf(stderr, "coordinator: resuming the takeover of group %d dp %d in phase %d "
            "(recovery process %d, stable xid %llu)\n", g, f, phase, r, stable);
}

static void apply_migration(struct coord *co, const char *line)
{
    int g, f, phase, r;
    unsigned long long xid;
    if (sscanf(line, "mig %d %d %d %d %llu", &g, &f, &phase, &r, &xid) != 5)
        return;
    struct cgroup *cg = coord_group_of(co, g);
    if (!cg || f < 0 || f >= cg->view.k || r < 0 || r >= cg->view.m)
        return;
    if (phase != MIG_HANDOFF && phase != MIG_SERVE)
        return;                               /* a copy starts over by itself */
    struct migration *mg = &cg->mig[f];
    memset(mg, 0, sizeof(*mg));
    mg->phase = (enum mig_phase)phase;
    mg->r = r;
    mg->xid = xid;
    mg->started_us = coord_now_us();
    mg->progress_at_ms = coord_now_ms();
    mg->step_at_ms = 0;
    fprintf(stderr, "coordinator: resuming the migration of group %d dp %d from parity process "
            "%d in phase %s\n", g, f, r, phase == MIG_HANDOFF ? "handoff" : "serve");
}

static void apply_move(struct coord *co, const char *line)
{
    unsigned slot;
    int to;
    unsigned long long epoch, inc = 0;
    /* the destination's incarnation: absent in a state saved before it */
    if (sscanf(line, "move %u %d %llu %llu", &slot, &to, &epoch, &inc) < 3)
        return;
    coord_resume_move(co, slot, to, epoch, inc);
}

static void apply_pid(struct coord *co, const char *line)
{
    int i;
    long pid;
    uint64_t inc = 0, dead = 0;
    int n = sscanf(line, "pid %d %ld %" SCNu64 " %" SCNu64, &i, &pid, &inc, &dead);
    if (n < 2 || i < 0 || i >= co->nmembers || pid <= 0)
        return;
    co->members[i].saved_pid = pid;
    co->members[i].saved_incarnation = n >= 3 ? inc : 0;
    co->members[i].dead_incarnation = n >= 4 ? dead : 0;
}

/* After every line: a group has lost data when a place without a server has
 * no takeover to resume (a takeover line speaks for its own place only). */
static void settle_lost(struct coord *co)
{
    for (int g = 0; co->groups && g < co->groups->n; g++) {
        struct cgroup *cg = &co->groups->g[g];
        cg->lost = false;
        for (int f = 0; f < cg->view.k; f++)
            if (cg->view.dp_server[f] == -2 && cg->tk[f].phase == PH_NONE && !cg->tk[f].deferred)
                cg->lost = true;
        if (!cg->lost)
            cg->lost_why[0] = '\0';
    }
}

void coord_progress_apply(struct coord *co, const char *text, size_t len)
{
    char line[LINE_MAX_LEN];
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n < sizeof(line)) {
            memcpy(line, p, n);
            line[n] = '\0';
            if (strncmp(line, "view ", 5) == 0)
                apply_view(co, line);
            else if (strncmp(line, "own ", 4) == 0)
                apply_own(co, line);
            else if (strncmp(line, "figures ", 8) == 0)
                apply_figures(co, line);
            else if (strncmp(line, "tk ", 3) == 0)
                apply_takeover(co, line);
            else if (strncmp(line, "mig ", 4) == 0)
                apply_migration(co, line);
            else if (strncmp(line, "move ", 5) == 0)
                apply_move(co, line);
            else if (strncmp(line, "pid ", 4) == 0)
                apply_pid(co, line);
            else if (strncmp(line, "pbr ", 4) == 0)
                coord_pbr_resume(co, line);
        }
        p += n + 1;
    }
    settle_lost(co);
}
