/* coord_rebuild.c - how the coordinator brings a coding group back to full
 * redundancy after a failure was survived (paper 4.2; docs/recovery.md,
 * "Back to full redundancy").
 *
 * Two kinds of work, started from the periodic check when a process is
 * alive again in a place that another process took or that holds nothing:
 *
 *   migration: data process f restarted while parity process r serves its
 *   keys.  Once r rebuilt every unit:
 *     replica <g> <f> <r>  -> f       it listens for the copy
 *     copy <g> <f>         -> r       r joins f to its stream and sends it
 *                                     the metadata, then the units
 *     copied <g> <f>       <- f       everything arrived
 *     (copy-failed <g> <f> <- f       a metadata message it could not
 *                                     apply: the migration starts over)
 *     handoff <g> <f>      -> r       r holds writes until nothing is in
 *     handed <g> <f> <x>   <- r       flight: f's stream ends at x there
 *   then the view (f back, r without parity) and a new map epoch (f's
 *   endpoint is f again) are published, and
 *     serve <g> <f> <x>    -> f       f applies up to x and serves
 *     serving-dp <g> <f>   <- f
 *   r has no parity any more: it is rebuilt like a restarted parity process.
 *
 *   admission: the group lost data process f's keys (more failures than it
 *   tolerates: nobody serves them) and f's own process is alive again:
 *     admit <g> <f> <keep> <a> -> f   it serves f's keys: keep 1, from what
 *     serving-dp <g> <f>   <- f       it holds if it holds anything, else
 *                                     empty (once per admission number a)
 *   then the view (f back) and a new map epoch (f's endpoint is f) are
 *   published.  A cache that lost keys serves them as misses from then on,
 *   rather than refusing them for ever.
 *
 *   rebuild: parity process j is alive but holds no parity (restarted, or
 *   the recovery process above).  Once every logical data process is served
 *   by a process that holds all of its data:
 *     rebuild <g> <j> <a>  -> j       it starts over empty (attempt a)
 *     rebuild-ready <g> <j> <- j
 *     rebuild <g> <j> <a>  -> every process serving a logical DP: it joins
 *                                     j to its stream, sends metadata, units
 *     rebuilt <g> <j>      <- j       every source sent everything
 *   and j is a parity process again.  j answers instead
 *     rebuild-failed <g> <j> <a> <- j a copy arrived that it cannot use:
 *                                     the rebuild starts over at once
 *
 * One piece of work per group at a time, and none while a takeover runs.
 * Steps unanswered for a second are sent again; a rebuild or migration
 * whose progress stops for co->repair_stall_ms (10 s) is started over: a
 * rebuild with its process declared dead first, so that every source drops
 * it (and the stream it was sent) before it is asked to copy again; a
 * participant
 * that dies aborts it (a dead data process is then taken over as usual). */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_group.h"
#include "coord_internal.h"

#define STEP_RESEND_MS 1000
#define ABANDON_AFTER_MS 5000

static struct member *dp_member(struct coord *co, int g, int f)
{
    return coord_member(co, g, ROLE_DATA, f);
}

/* The process that serves logical DP i now, or NULL. */
static struct member *server_of(struct coord *co, struct cgroup *cg, int i)
{
    int s = cg->view.dp_server[i];
    if (s == -1)
        return dp_member(co, cg->g, i);
    if (s >= 0)
        return coord_pp_member(co, cg->g, s);
    return NULL;
}

static void send_to(struct member *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_to(struct member *m, const char *fmt, ...)
{
    char text[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (m)
        coord_send(m, text);
}

bool coord_rebuild_busy(const struct cgroup *cg, bool *migrating, bool *rebuilding)
{
    *migrating = *rebuilding = false;
    for (int f = 0; f < cg->view.k; f++)
        if (cg->mig[f].phase != MIG_NONE)
            *migrating = true;
    for (int j = 0; j < cg->view.m; j++)
        if (cg->rb[j].running)
            *rebuilding = true;
    return *migrating || *rebuilding;
}

static bool takeover_running(const struct cgroup *cg)
{
    for (int f = 0; f < cg->view.k; f++)
        if (cg->tk[f].phase != PH_NONE || cg->tk[f].deferred)
            return true;
    return false;
}

/* Has recovery process r rebuilt every unit of the DP it serves? */
static bool recovery_complete(const struct cgroup *cg, int r)
{
    const struct progress *pg = &cg->prog[r];
    return pg->total > 0 && pg->done == pg->total;
}

static void note_full_redundancy(struct coord *co, struct cgroup *cg)
{
    for (int j = 0; j < cg->view.m; j++)
        if (cg->view.pp_state[j] != GV_PP_PARITY)
            return;
    for (int f = 0; f < cg->view.k; f++)
        if (cg->view.dp_server[f] != -1)
            return;
    if (cg->degraded_since_us) {
        cg->last_full_ms = (coord_now_us() - cg->degraded_since_us) / 1000;
        cg->last_full_wall_ms = coord_wall_ms();
        cg->degraded_since_us = 0;
        fprintf(stderr, "coordinator: group %d is at full redundancy again (%d of %d parity "
                "processes), %" PRIu64 " ms after the first failure\n", cg->g, cg->view.m,
                cg->view.m, cg->last_full_ms);
    }
}

/* ---- migration ---- */

static void mig_send_step(struct coord *co, struct cgroup *cg, int f)
{
    struct migration *mg = &cg->mig[f];
    struct member *n = dp_member(co, cg->g, f), *r = coord_pp_member(co, cg->g, mg->r);
    mg->step_at_ms = coord_now_ms();
    switch (mg->phase) {
    case MIG_COPY:
        send_to(n, "replica %d %d %d", cg->g, f, mg->r);
        send_to(r, "copy %d %d", cg->g, f);
        break;
    case MIG_HANDOFF:
        send_to(r, "handoff %d %d", cg->g, f);
        break;
    case MIG_SERVE:
        send_to(n, "serve %d %d %" PRIu64, cg->g, f, mg->xid);
        break;
    case MIG_ADMIT:
        send_to(n, "admit %d %d %d %" PRIu64, cg->g, f, cg->own_state_newest[f] ? 1 : 0,
                cg->admit_number[f]);
        break;
    default:
        break;
    }
}

static void mig_start(struct coord *co, struct cgroup *cg, int f, int r)
{
    struct migration *mg = &cg->mig[f];
    memset(mg, 0, sizeof(*mg));
    mg->phase = MIG_COPY;
    mg->r = r;
    mg->started_us = coord_now_us();
    mg->progress_at_ms = coord_now_ms();
    fprintf(stderr, "coordinator: group %d dp %d is back: it takes its keys back from parity "
            "process %d (metadata, then data)\n", cg->g, f, r);
    mig_send_step(co, cg, f);
}

static void mig_abort(struct coord *co, struct cgroup *cg, int f, const char *why)
{
    struct migration *mg = &cg->mig[f];
    if (mg->phase == MIG_NONE)
        return;
    if (mg->phase == MIG_ADMIT) {
        fprintf(stderr, "coordinator: group %d dp %d: admission abandoned: %s\n", cg->g, f, why);
        mg->phase = MIG_NONE;
        return;
    }
    fprintf(stderr, "coordinator: group %d dp %d: migration from parity process %d abandoned "
            "in the %s: %s\n", cg->g, f, mg->r,
            mg->phase == MIG_COPY ? "copy" : mg->phase == MIG_HANDOFF ? "handoff" : "serve", why);
    /* From the copy on, f is in r's ack set: r must let it go (and, at the
     * handoff, take writes again), or its writes wait for a dead f. */
    if (mg->phase == MIG_COPY || mg->phase == MIG_HANDOFF)
        send_to(coord_pp_member(co, cg->g, mg->r), "resume %d %d", cg->g, f);
    mg->phase = MIG_NONE;
    coord_save_progress(co);
}

/* r holds f's writes at xid: f takes over. */
static void mig_handed(struct coord *co, struct cgroup *cg, int f, uint64_t xid)
{
    struct migration *mg = &cg->mig[f];
    int r = mg->r;
    mg->xid = xid;
    mg->phase = MIG_SERVE;
    cg->view.dp_server[f] = -1;
    cg->view.pp_state[r] = GV_PP_DEAD;   /* no parity there: rebuilt next */
    cg->view.pp_serves[r] = -1;
    memset(&cg->prog[r], 0, sizeof(cg->prog[r]));
    coord_broadcast_view(co, cg);
    coord_publish_dp(co, cg, f, dp_member(co, cg->g, f)->proc);
    fprintf(stderr, "coordinator: group %d dp %d takes over at xid %" PRIu64 " (epoch %llu); "
            "parity process %d will be rebuilt%s\n", cg->g, f, xid,
            (unsigned long long)co->map.epoch, r, coord_held_note(co));
    mig_send_step(co, cg, f);
}

static void mig_served(struct coord *co, struct cgroup *cg, int f)
{
    struct migration *mg = &cg->mig[f];
    fprintf(stderr, "coordinator: group %d dp %d serves its keys again (migration took %.1f ms)\n",
            cg->g, f, (double)(coord_now_us() - mg->started_us) / 1000.0);
    mg->phase = MIG_NONE;
    coord_save_progress(co);
}

/* ---- a lost place taken again ---- */

/* Does any logical DP of the group have no server? */
static bool has_lost_place(const struct cgroup *cg)
{
    for (int f = 0; f < cg->view.k; f++)
        if (cg->view.dp_server[f] == -2)
            return true;
    return false;
}

/* Nobody served f's keys since the group lost them (coord_recovery.c,
 * mark_lost), so what f's own process holds is all there is: nothing if it
 * restarted, every key if it was only cut off.  A parity process still
 * marked as holding parity holds f's old share: it is rebuilt first like
 * any other (in a group that lost data none is left, so this is a guard). */
static void admit_start(struct coord *co, struct cgroup *cg, int f)
{
    struct migration *mg = &cg->mig[f];
    bool demoted = false;
    for (int j = 0; j < cg->view.m; j++) {
        if (cg->view.pp_state[j] != GV_PP_PARITY)
            continue;
        cg->view.pp_state[j] = GV_PP_DEAD;
        demoted = true;
        fprintf(stderr, "coordinator: group %d parity process %d holds dp %d's lost share: it "
                "will be rebuilt\n", cg->g, j, f);
    }
    if (demoted)
        coord_broadcast_view(co, cg);
    memset(mg, 0, sizeof(*mg));
    mg->phase = MIG_ADMIT;
    mg->r = -1;
    if (cg->admit_number[f] == 0)
        cg->admit_number[f] = ++cg->rebuild_attempts + (uint64_t)cg->view.version;
    mg->started_us = coord_now_us();
    mg->progress_at_ms = coord_now_ms();
    fprintf(stderr, "coordinator: group %d dp %d is alive again after its keys were lost: it "
            "serves them again from what it holds\n", cg->g, f);
    mig_send_step(co, cg, f);
}

/* A group that lost more than it tolerates may leave recovery processes
 * with units nobody can rebuild any more (their decoding needs a share that
 * is gone).  Once one made no progress for ABANDON_AFTER_MS it is told to
 * give them up (engine_parity.c, ctl_abandon: the keys there are deleted,
 * the rest is served and taken back as usual).  Nothing is admitted while
 * any recovery of the group is unfinished: an admitted process's empty
 * region must never be taken for a lost share and decoded from.  True
 * while some recovery is unfinished. */
static bool abandon_stalled(struct coord *co, struct cgroup *cg)
{
    uint64_t now = coord_now_ms();
    bool unfinished = false;
    for (int j = 0; j < cg->view.m; j++) {
        struct progress *pg = &cg->prog[j];
        if (cg->view.pp_state[j] != GV_PP_SERVING || recovery_complete(cg, j))
            continue;
        unfinished = true;
        if (pg->changed_at_ms == 0 || now - pg->changed_at_ms < ABANDON_AFTER_MS ||
            now - pg->abandon_at_ms < STEP_RESEND_MS)
            continue;
        if (pg->abandon_at_ms == 0)
            fprintf(stderr, "coordinator: group %d parity process %d: dp %d's recovery made no "
                    "progress for %llu ms (%llu of %llu units) and cannot finish: the keys in "
                    "the missing units are given up\n", cg->g, j, cg->view.pp_serves[j],
                    (unsigned long long)(now - pg->changed_at_ms),
                    (unsigned long long)pg->done, (unsigned long long)pg->total);
        pg->abandon_at_ms = now;
        send_to(coord_pp_member(co, cg->g, j), "abandon %d %d", cg->g, cg->view.pp_serves[j]);
    }
    return unfinished;
}

static void admit_done(struct coord *co, struct cgroup *cg, int f)
{
    cg->mig[f].phase = MIG_NONE;
    cg->view.dp_server[f] = -1;
    cg->own_state_newest[f] = false;
    cg->admit_number[f] = 0;
    if (!has_lost_place(cg)) {
        fprintf(stderr, "coordinator: group %d serves every key again (lost: %s); its parity "
                "processes are rebuilt next\n", cg->g, cg->lost_why);
        cg->lost = false;
        cg->lost_why[0] = '\0';
    }
    coord_broadcast_view(co, cg);
    coord_publish_dp(co, cg, f, dp_member(co, cg->g, f)->proc);
    fprintf(stderr, "coordinator: group %d dp %d serves its keys again (epoch %llu)%s\n", cg->g,
            f, (unsigned long long)co->map.epoch, coord_held_note(co));
    coord_save_progress(co);
}

/* ---- rebuild of a parity process ---- */

static void rb_send_sources(struct coord *co, struct cgroup *cg, int j)
{
    struct rebuild *rb = &cg->rb[j];
    for (int i = 0; i < cg->view.k; i++)
        send_to(server_of(co, cg, i), "rebuild %d %d %" PRIu64, cg->g, j, rb->attempt);
}

static void rb_send_step(struct coord *co, struct cgroup *cg, int j)
{
    struct rebuild *rb = &cg->rb[j];
    rb->step_at_ms = coord_now_ms();
    if (!rb->ready)
        send_to(coord_pp_member(co, cg->g, j), "rebuild %d %d %" PRIu64, cg->g, j, rb->attempt);
}

static void rb_start(struct coord *co, struct cgroup *cg, int j)
{
    struct rebuild *rb = &cg->rb[j];
    bool restart = rb->running;
    memset(rb, 0, sizeof(*rb));
    rb->running = true;
    rb->attempt = ++cg->rebuild_attempts + (uint64_t)cg->view.version;
    rb->started_us = coord_now_us();
    rb->progress_at_ms = coord_now_ms();
    memset(&cg->prog[j], 0, sizeof(cg->prog[j]));
    if (restart) {
        /* The sources whose copy ended hold j as a settled peer, still
         * streaming to it: dead first, so that each drops it (engine_data.c,
         * engine_data_set_view) and can join it afresh, as on the first
         * attempt; j starts over empty. */
        cg->view.pp_state[j] = GV_PP_DEAD;
        coord_broadcast_view(co, cg);
    }
    cg->view.pp_state[j] = GV_PP_REBUILDING;
    cg->view.pp_serves[j] = -1;
    coord_broadcast_view(co, cg);
    fprintf(stderr, "coordinator: group %d parity process %d is rebuilt from the %d data "
            "processes (attempt %" PRIu64 ")\n", cg->g, j, cg->view.k, rb->attempt);
    rb_send_step(co, cg, j);
}

static void rb_abort(struct coord *co, struct cgroup *cg, int j, const char *why)
{
    struct rebuild *rb = &cg->rb[j];
    if (!rb->running)
        return;
    fprintf(stderr, "coordinator: group %d parity process %d: rebuild abandoned: %s\n", cg->g, j,
            why);
    rb->running = false;
    if (cg->view.pp_state[j] == GV_PP_REBUILDING) {
        cg->view.pp_state[j] = GV_PP_DEAD;
        coord_broadcast_view(co, cg);
    }
}

static void rb_done(struct coord *co, struct cgroup *cg, int j)
{
    struct rebuild *rb = &cg->rb[j];
    rb->running = false;
    cg->view.pp_state[j] = GV_PP_PARITY;
    cg->view.pp_serves[j] = -1;
    memset(&cg->prog[j], 0, sizeof(cg->prog[j]));
    fprintf(stderr, "coordinator: group %d parity process %d holds parity again (rebuild took "
            "%.1f ms)\n", cg->g, j, (double)(coord_now_us() - rb->started_us) / 1000.0);
    note_full_redundancy(co, cg);   /* first: the view's save keeps its figures */
    coord_broadcast_view(co, cg);
}

/* Every logical DP is served by a process holding all its data. */
static bool sources_ready(struct coord *co, struct cgroup *cg)
{
    for (int i = 0; i < cg->view.k; i++) {
        int s = cg->view.dp_server[i];
        if (s == -2 || !coord_alive(server_of(co, cg, i)))
            return false;
        if (s >= 0 && !recovery_complete(cg, s))
            return false;
    }
    return true;
}

/* ---- the periodic check ---- */

static bool start_work(struct coord *co, struct cgroup *cg)
{
    /* In a group that lost data: recoveries that cannot finish first, then
     * data processes alive again in places whose keys were lost. */
    if (cg->lost && abandon_stalled(co, cg))
        return false;
    for (int f = 0; cg->lost && f < cg->view.k; f++) {
        if (cg->view.dp_server[f] == -2 && cg->tk[f].phase == PH_NONE && !cg->tk[f].deferred &&
            coord_alive(dp_member(co, cg->g, f))) {
            admit_start(co, cg, f);
            return true;
        }
    }
    /* A data process back in a place a recovery process serves. */
    for (int f = 0; f < cg->view.k; f++) {
        int r = cg->view.dp_server[f];
        if (r >= 0 && coord_alive(dp_member(co, cg->g, f)) &&
            coord_alive(coord_pp_member(co, cg->g, r)) && recovery_complete(cg, r)) {
            mig_start(co, cg, f, r);
            return true;
        }
    }
    /* A live parity process without parity. */
    if (!sources_ready(co, cg))
        return false;
    for (int j = 0; j < cg->view.m; j++) {
        if (cg->view.pp_state[j] == GV_PP_DEAD && coord_alive(coord_pp_member(co, cg->g, j))) {
            rb_start(co, cg, j);
            return true;
        }
    }
    return false;
}

void coord_rebuild_forgive(struct cgroup *cg, uint64_t late, uint64_t now)
{
    for (int f = 0; f < cg->view.k; f++)
        if (cg->mig[f].phase != MIG_NONE)
            cg->mig[f].progress_at_ms = coord_forgive_ms(cg->mig[f].progress_at_ms, late, now);
    for (int j = 0; j < cg->view.m; j++)
        if (cg->rb[j].running)
            cg->rb[j].progress_at_ms = coord_forgive_ms(cg->rb[j].progress_at_ms, late, now);
}

void coord_rebuild_check(struct coord *co, struct cgroup *cg)
{
    if (takeover_running(cg))
        return;
    uint64_t now = coord_now_ms();
    bool busy = false;
    for (int f = 0; f < cg->view.k; f++) {
        struct migration *mg = &cg->mig[f];
        if (mg->phase == MIG_NONE)
            continue;
        busy = true;
        if (now - mg->progress_at_ms > co->repair_stall_ms) {
            mig_abort(co, cg, f, "no progress");
            continue;
        }
        if (now - mg->step_at_ms > STEP_RESEND_MS && mg->phase != MIG_COPY)
            mig_send_step(co, cg, f);
    }
    for (int j = 0; j < cg->view.m; j++) {
        struct rebuild *rb = &cg->rb[j];
        if (!rb->running)
            continue;
        busy = true;
        if (now - rb->progress_at_ms > co->repair_stall_ms) {
            fprintf(stderr, "coordinator: group %d parity process %d: rebuild made no progress "
                    "for %" PRIu64 " ms; starting over\n", cg->g, j, co->repair_stall_ms);
            rb_start(co, cg, j);
        } else if (!rb->ready && now - rb->step_at_ms > STEP_RESEND_MS) {
            rb_send_step(co, cg, j);
        }
    }
    /* Nothing new starts while a map is held for a slot move
     * (coord_publish_map), or may have been when the last run ended (not
     * saved: republish_saved has not compared yet): a rebuild would empty
     * a recovery process that the map still sends its data process's keys
     * to. */
    if (!busy && !co->held && !co->republish_due)
        start_work(co, cg);
}

/* ---- events ---- */

bool coord_rebuild_on_answer(struct coord *co, struct cgroup *cg, struct member *m,
                             const char *verb, int a, uint64_t xid)
{
    const struct cluster_proc *p = m->proc;
    if (strcmp(verb, "rebuild-failed") == 0) {
        if (p->role != ROLE_PARITY || p->index != a || a >= cg->view.m)
            return false;
        struct rebuild *rb = &cg->rb[a];
        /* j cannot finish this attempt (a copy it cannot use arrived):
         * start over now rather than after repair_stall_ms. */
        if (rb->running && rb->ready && xid == rb->attempt) {
            fprintf(stderr, "coordinator: group %d parity process %d cannot finish rebuild "
                    "attempt %" PRIu64 "; starting over\n", cg->g, a, rb->attempt);
            rb_start(co, cg, a);
        }
        return true;
    }
    if (strcmp(verb, "rebuild-ready") == 0 || strcmp(verb, "rebuilt") == 0) {
        if (p->role != ROLE_PARITY || p->index != a || a >= cg->view.m)
            return false;
        struct rebuild *rb = &cg->rb[a];
        if (!rb->running)
            return true;
        if (verb[7] == '-') {
            if (!rb->ready) {
                rb->ready = true;
                rb->progress_at_ms = coord_now_ms();
                rb_send_sources(co, cg, a);
            }
        } else if (rb->ready) {
            rb_done(co, cg, a);
        }
        return true;
    }
    if (strcmp(verb, "copied") == 0 || strcmp(verb, "serving-dp") == 0) {
        if (p->role != ROLE_DATA || p->index != a || a >= cg->view.k)
            return false;
        struct migration *mg = &cg->mig[a];
        if (verb[0] == 'c' && mg->phase == MIG_COPY) {
            mg->phase = MIG_HANDOFF;
            mg->progress_at_ms = coord_now_ms();
            coord_save_progress(co);
            mig_send_step(co, cg, a);
        } else if (verb[0] == 's' && mg->phase == MIG_SERVE) {
            mig_served(co, cg, a);
        } else if (verb[0] == 's' && mg->phase == MIG_ADMIT) {
            admit_done(co, cg, a);
        }
        return true;
    }
    if (strcmp(verb, "copy-failed") == 0) {
        if (p->role != ROLE_DATA || p->index != a || a >= cg->view.k)
            return false;
        /* f's copy cannot be handed off (a metadata message it could not
         * apply): over now, rather than once its progress stopped for
         * repair_stall_ms; the next check starts it again, and f makes a
         * new replica. */
        if (cg->mig[a].phase == MIG_COPY)
            mig_abort(co, cg, a, "the data process could not apply its copy");
        return true;
    }
    if (strcmp(verb, "handed") == 0) {
        if (p->role != ROLE_PARITY || a >= cg->view.k)
            return false;
        struct migration *mg = &cg->mig[a];
        if (mg->phase == MIG_HANDOFF && mg->r == p->index)
            mig_handed(co, cg, a, xid);
        return true;
    }
    return false;
}

static void set_progress(struct progress *pg, uint64_t done, uint64_t total, uint64_t bytes)
{
    uint64_t now = coord_now_ms();
    if (pg->at_ms && now > pg->at_ms && bytes >= pg->bytes)
        pg->rate = (bytes - pg->bytes) * 1000u / (now - pg->at_ms);
    pg->done = done;
    pg->total = total;
    pg->bytes = bytes;
    pg->at_ms = now;
}

bool coord_rebuild_on_progress(struct coord *co, struct cgroup *cg, struct member *m,
                               const char *text)
{
    unsigned long long done, total, bytes;
    int f;
    const struct cluster_proc *p = m->proc;
    if (p->role == ROLE_PARITY && sscanf(text, "reb %llu %llu %llu", &done, &total, &bytes) == 3) {
        int j = p->index;
        struct rebuild *rb = &cg->rb[j];
        if (!rb->running) {
            /* A coordinator that restarted during a rebuild: whatever it
             * thought, that process holds no usable parity. */
            if (cg->view.pp_state[j] == GV_PP_PARITY) {
                fprintf(stderr, "coordinator: group %d parity process %d is still being rebuilt; "
                        "it holds no parity\n", cg->g, j);
                cg->view.pp_state[j] = GV_PP_DEAD;
                coord_broadcast_view(co, cg);
            }
            return true;
        }
        /* Units arrived or bytes taken: while a copy's metadata goes (a
         * large table takes seconds), only the bytes move. */
        if (done != rb->last_done || bytes != rb->last_bytes) {
            rb->last_done = done;
            rb->last_bytes = bytes;
            rb->progress_at_ms = coord_now_ms();
        }
        set_progress(&cg->prog[j], done, total, bytes);
        return true;
    }
    if (p->role == ROLE_DATA && sscanf(text, "mig %d %llu %llu %llu", &f, &done, &total,
                                       &bytes) == 4) {
        if (f != p->index || f >= cg->view.k)
            return true;
        struct migration *mg = &cg->mig[f];
        if (mg->phase == MIG_NONE)
            return true;
        if (done != mg->last_done || bytes != mg->last_bytes) {
            mg->last_done = done;
            mg->last_bytes = bytes;
            mg->progress_at_ms = coord_now_ms();
        }
        set_progress(&mg->prog, done, total, bytes);
        return true;
    }
    return false;
}

void coord_rebuild_on_dead(struct coord *co, struct cgroup *cg, struct member *m)
{
    const struct cluster_proc *p = m->proc;
    if (!cg->degraded_since_us)
        cg->degraded_since_us = coord_now_us();
    for (int f = 0; f < cg->view.k; f++) {
        struct migration *mg = &cg->mig[f];
        if (mg->phase == MIG_NONE)
            continue;
        if ((p->role == ROLE_DATA && p->index == f) ||
            (p->role == ROLE_PARITY && p->index == mg->r))
            mig_abort(co, cg, f, p->role == ROLE_DATA ? "the data process died"
                                                      : "the recovery process died");
    }
    for (int j = 0; j < cg->view.m; j++) {
        if (!cg->rb[j].running)
            continue;
        if (p->role == ROLE_PARITY && p->index == j)
            rb_abort(co, cg, j, "it died");
        else if (p->role == ROLE_DATA && cg->view.dp_server[p->index] == -1)
            rb_abort(co, cg, j, "a data process it is rebuilt from died");
        else if (p->role == ROLE_PARITY && cg->view.pp_state[p->index] == GV_PP_SERVING)
            rb_abort(co, cg, j, "a recovery process it is rebuilt from died");
    }
}

int coord_rebuild_admin_words(struct coord *co, const struct cgroup *cg, char *buf, size_t len)
{
    int n = 0;
    for (int f = 0; f < cg->view.k && (size_t)n < len; f++) {
        const struct migration *mg = &cg->mig[f];
        if (mg->phase == MIG_NONE || mg->phase == MIG_ADMIT)
            continue;
        n += snprintf(buf + n, len - (size_t)n, " mig dp%d pp%d units %llu/%llu bytes %llu rate %llu",
                      f, mg->r, (unsigned long long)mg->prog.done,
                      (unsigned long long)mg->prog.total, (unsigned long long)mg->prog.bytes,
                      (unsigned long long)mg->prog.rate);
    }
    for (int j = 0; j < cg->view.m && (size_t)n < len; j++) {
        const struct progress *pg = &cg->prog[j];
        if (!cg->rb[j].running)
            continue;
        n += snprintf(buf + n, len - (size_t)n, " reb pp%d units %llu/%llu bytes %llu rate %llu",
                      j, (unsigned long long)pg->done, (unsigned long long)pg->total,
                      (unsigned long long)pg->bytes, (unsigned long long)pg->rate);
    }
    if ((size_t)n < len && cg->last_full_wall_ms)
        n += snprintf(buf + n, len - (size_t)n, " last_full_ms %llu full_at_ms %llu",
                      (unsigned long long)cg->last_full_ms,
                      (unsigned long long)cg->last_full_wall_ms);
    return (size_t)n < len ? n : (int)len - 1;
}
