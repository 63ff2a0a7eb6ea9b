/* coord.c - the coordinator: an engine that stores nothing, holds the
 * cluster's membership and authoritative slot map, and moves slots.
 *
 * Every server process of the cluster dials the coordinator's link port
 * (repl/link.c, one listener for every group) and sends FT_CONTROL text
 * messages (coord.h).  A member is alive from its hello while its link is
 * up and heartbeats arrive; it is dead when the link drops or nothing came
 * for COORD_DEAD_AFTER_MS.  A member whose epoch is older than ours gets
 * the map.  The map lives in the state file (coord_state.c), which is
 * rewritten before a new map is shown to anyone, so the epoch never goes
 * back, not even across a restart.
 *
 * A move ("cocytus move <slot> <group> [<index>]") is started by telling
 * the slot's current serving process "migrate <slot> <dest> <epoch+1>"; it
 * copies the items (cluster/migrate.c), switches itself and the
 * destination to the new map and answers "migrated ... ok".  Only then does
 * the coordinator adopt that map, persist it and push it to everyone else.
 * One move at a time.
 *
 * With "coordinator zookeeper ..." in the cluster file the state lives in
 * a znode instead of the file (coord_zk.c), several coordinator processes
 * wait in an election, and only the leader starts listening; it writes
 * the work in progress beside the map (coord_progress.c) so that the next
 * leader finishes it.  A leader that loses its session or finds the state
 * written by someone else exits (its node starts it again as a waiting
 * candidate): it must not go on acting on a state it no longer owns. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cluster.h"
#include "coord.h"
#include "engine.h"
#include "frame.h"
#include "link.h"
#include "migrate.h"
#include "server.h"
#include "coord_group.h"
#include "coord_internal.h"
#include "coord_zk.h"

#define CHECK_EVERY_MS 250          /* membership check period */
#define SILENCE_LOG_EVERY_MS 10000  /* a wait for a silent member is logged again */
#define COORD_STALL_MS 500          /* a check this late: we were not running */
#define REPUSH_AFTER_MS 1000        /* resend a map not yet taken */
/* A move that has held a failure's map this long is given up: beyond
 * every timeout of the move's own (a destination's purge before an
 * import may take 120 s, migrate.c), so its source is not running it. */
#define MOVE_HOLD_MAX_MS 150000
/* A move's source died: its destination's heartbeat (every 250 ms) says
 * by then whether it took the slot. */
#define SOURCE_DEAD_WAIT_MS 1500
/* A move's destination died: a source that has not switched by then never
 * sent the commit (give_up_orphan_move). */
#define DEST_DEAD_WAIT_MS 3000

static const char not_a_server[] = "this is the coordinator; use a server";

/* ---- small helpers ---- */

uint64_t coord_forgive_ms(uint64_t t, uint64_t late, uint64_t now)
{
    return t + late < now ? t + late : now;
}

uint64_t coord_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t coord_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t coord_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Times saved for a coordinator started later are unix ms; our own are
 * monotonic.  The monotonic us that was wall_ms by our clocks now (now if
 * wall_ms is 0 or ahead of our wall clock, another host's; at least 1). */
uint64_t coord_mono_us_of_wall(uint64_t wall_ms)
{
    uint64_t wall = coord_wall_ms(), now = coord_now_us();
    if (wall_ms == 0 || wall_ms > wall)
        return now;
    uint64_t ago_us = (wall - wall_ms) * 1000;
    return ago_us < now ? now - ago_us : 1;
}

/* The unix ms of a monotonic time in us (0 for 0: none; at least 1). */
uint64_t coord_wall_of_mono_us(uint64_t mono_us)
{
    if (mono_us == 0)
        return 0;
    uint64_t ago_ms = (coord_now_us() - mono_us) / 1000;
    uint64_t wall = coord_wall_ms();
    return wall > ago_ms ? wall - ago_ms : 1;
}

/* A period from the environment, for tests that must not wait the real one
 * (COCYTUS_REPAIR_STALL_MS, COCYTUS_DEAD_AFTER_MS) or must outlast it
 * (COCYTUS_STARTUP_GRACE_MS): 1 ms to an hour, or the default. */
static uint64_t env_ms(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long ms = strtoull(v, &end, 10);
    if (errno || end == v || *end || ms == 0 || ms > 3600000) {
        fprintf(stderr, "coordinator: %s '%s' is not 1-3600000 ms; using %" PRIu64 "\n", name,
                v, dflt);
        return dflt;
    }
    fprintf(stderr, "coordinator: %s=%llu (default %" PRIu64 ")\n", name, ms, dflt);
    return ms;
}

static void member_name(const struct member *m, char *buf, size_t len)
{
    const struct cluster_proc *p = m->proc;
    snprintf(buf, len, "group %d %s %d %s:%d", p->group, cluster_role_name(p->role), p->index,
             p->host, p->port);
}

void coord_log_member(const struct member *m, const char *fmt, ...)
{
    char name[MEMBER_NAME_MAX], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    member_name(m, name, sizeof(name));
    fprintf(stderr, "coordinator: %s %s\n", name, msg);
}

static void endpoint_addr(const struct slotmap_endpoint *e, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d", e->host, e->port);
}

static const char *state_name(enum member_state st)
{
    switch (st) {
    case MEMBER_ALIVE: return "alive";
    case MEMBER_DEAD: return "dead";
    default: return "unknown";
    }
}

static struct member *member_of(struct coord *co, const struct link_identity *id)
{
    for (int i = 0; i < co->nmembers; i++) {
        const struct cluster_proc *p = co->members[i].proc;
        if ((uint32_t)p->group == id->group && coord_link_role(p->role) == id->role &&
            (uint32_t)p->index == id->index)
            return &co->members[i];
    }
    return NULL;
}

/* The member serving endpoint e of the map, or NULL. */
static struct member *member_at(struct coord *co, const struct slotmap_endpoint *e)
{
    for (int i = 0; i < co->nmembers; i++) {
        const struct cluster_proc *p = co->members[i].proc;
        if (p->port == e->port && strcmp(p->host, e->host) == 0)
            return &co->members[i];
    }
    return NULL;
}

struct member *coord_member(struct coord *co, int group, enum cluster_role role, int index)
{
    for (int i = 0; i < co->nmembers; i++) {
        const struct cluster_proc *p = co->members[i].proc;
        if (p->group == group && p->role == role && p->index == index)
            return &co->members[i];
    }
    return NULL;
}

int coord_send(struct member *m, const char *text)
{
    if (!m->link || !link_is_up(m->link))
        return -1;
    return link_send(m->link, FT_CONTROL, text, (uint32_t)strlen(text));
}

/* ---- the map ---- */

/* A new authoritative map (co takes m's contents): re-encode it and show it
 * on the coordinator's own `config get cluster`.  The caller has persisted
 * it already. */
static int adopt_map(struct coord *co, struct slotmap *m)
{
    size_t nbody;
    char *body = slotmap_encode(m, &nbody);
    struct slotmap *own = calloc(1, sizeof(*own));
    if (!body || !own || coord_map_copy(own, m) < 0) {
        free(body);
        free(own);
        return -1;
    }
    slotmap_free(&co->map);
    co->map = *m;
    free(co->body);
    co->body = body;
    co->nbody = nbody;
    if (server_set_slotmap(co->s, own) < 0)
        fprintf(stderr, "coordinator: out of memory preparing the config reply\n");
    return 0;
}

static void send_map(struct member *m, uint64_t now)
{
    struct coord *co = m->co;
    struct iovec iov[2] = {
        { .iov_base = "map ", .iov_len = 4 },
        { .iov_base = co->body, .iov_len = co->nbody },
    };
    if (!m->link || !co->body || link_sendv(m->link, FT_CONTROL, iov, 2) < 0)
        return;
    m->pushed_epoch = co->map.epoch;
    m->pushed_at_ms = now;
}

/* Send the map to a member that reports an older epoch, unless it was
 * sent very recently (the member may not have taken it yet). */
static void push_if_behind(struct member *m, uint64_t now)
{
    struct coord *co = m->co;
    if (m->epoch >= co->map.epoch)
        return;
    if (m->pushed_epoch == co->map.epoch && now - m->pushed_at_ms < REPUSH_AFTER_MS)
        return;
    send_map(m, now);
}

static void push_to_all(struct coord *co)
{
    uint64_t now = coord_now_ms();
    for (int i = 0; i < co->nmembers; i++)
        if (co->members[i].link && co->members[i].state == MEMBER_ALIVE)
            push_if_behind(&co->members[i], now);
}

#define EXIT_NOT_LEADER 3

/* Not the leader any more: stop at once (no map, no step may leave here). */
static void step_down(const char *why)
{
    fprintf(stderr, "coordinator: stepping down: %s; exiting so that another coordinator "
            "leads\n", why);
    fflush(stderr);
    exit(EXIT_NOT_LEADER);
}

/* The loop was blocked for ms in a synchronous ZooKeeper or state-file
 * write.  The heartbeats that came meanwhile are still unread; nobody is
 * blamed for that time, since the membership check then runs late and
 * forgive_own_stall() discounts it like any other stall of ours. */
static void log_blocked(const struct coord *co, uint64_t ms)
{
    if (ms >= COORD_HEARTBEAT_MS)
        fprintf(stderr, "coordinator: %s took %llu ms\n",
                co->zk ? "a ZooKeeper write" : "writing the state file", (unsigned long long)ms);
}

/* Persist map m and the work in progress, in ZooKeeper or the state file
 * alike: a coordinator restarted on its state file must know, as a new
 * leader does, the pids it saw (a process that died and came back empty
 * while no coordinator ran is that process's death, handled late), the
 * groups' views and the takeovers under way.  With ZooKeeper a failure to
 * write ends the leadership: a map that is not saved must never be shown
 * (the next leader would hand out its epoch again with another map).
 * With the state file: 0 or -1 with a message in err. */
static int persist(struct coord *co, const struct slotmap *m, char *err, size_t errlen)
{
    size_t nmap = 0, nprog = 0;
    char *map = coord_state_encode(m, &nmap);
    char *prog = coord_progress_encode(co, &nprog);
    if (map && !prog && !co->zk) {
        /* The map alone still keeps the epoch from going back. */
        fprintf(stderr, "coordinator: cannot encode the work in progress; saving the map alone\n");
        nprog = 0;
    }
    char *all = map && (prog || !co->zk) ? malloc(nmap + nprog + 1) : NULL;
    if (!all) {
        free(map);
        free(prog);
        snprintf(err, errlen, "out of memory encoding the state");
        if (co->zk)
            step_down(err);
        return -1;
    }
    memcpy(all, map, nmap);
    if (prog)
        memcpy(all + nmap, prog, nprog);
    uint64_t start = coord_now_ms();
    int rc = co->zk ? coord_zk_save(co->zk, all, nmap + nprog, err, errlen)
                    : coord_state_write(co->c->coord_state, all, nmap + nprog, err, errlen);
    free(map);
    free(prog);
    free(all);
    if (rc < 0 && co->zk)
        step_down(err);
    log_blocked(co, coord_now_ms() - start);
    return rc;
}

void coord_save_progress(struct coord *co)
{
    char err[512];
    if (persist(co, &co->map, err, sizeof(err)) < 0)
        fprintf(stderr, "coordinator: cannot save the work in progress: %s\n", err);
}

const char *coord_held_note(const struct coord *co)
{
    return co->held ? " (the map that says so waits for a slot move: the epoch is the one before)"
                    : "";
}

const struct slotmap *coord_map_base(const struct coord *co)
{
    return co->held ? co->held : &co->map;
}

/* The epoch of a map the coordinator makes itself (a takeover's, a
 * failover's): above the map's, the running move's (its source and
 * destination switch to it by themselves), that of a move whose source or
 * destination died during it (either may have switched), and every epoch
 * a member reports: two different maps must never share an epoch, because
 * a process takes a map only if its epoch is newer than the one it holds.
 * A move is given the map's epoch + 1 (a destination takes a commit only
 * at its own epoch + 1, cluster/migrate.c); a move that failed cleanly
 * leaves its epoch to the next. */
uint64_t coord_next_epoch(const struct coord *co)
{
    uint64_t e = co->map.epoch;
    if (co->running >= 0 && co->moves[co->running].epoch > e)
        e = co->moves[co->running].epoch;
    if (co->unsure_epoch > e)
        e = co->unsure_epoch;
    for (int i = 0; i < co->nmembers; i++)
        if (co->members[i].epoch > e)
            e = co->members[i].epoch;
    return e + 1;
}

/* Hold next back until the running move ends.  A map published now would
 * either share the epoch the move's source and destination switch to by
 * themselves (two maps, one epoch: whoever holds the one ignores the
 * other) or, newer, leave the moved slot with its source, which has
 * handed the slot over, until the move's own map came: writes acknowledged
 * by the destination meanwhile were then lost. */
static int hold_map(struct coord *co, struct slotmap *next)
{
    if (!co->held) {
        co->held = calloc(1, sizeof(*co->held));
        if (!co->held) {
            slotmap_free(next);
            return -1;
        }
        co->held_since_ms = coord_now_ms();
    } else {
        slotmap_free(co->held);
    }
    *co->held = *next;
    const struct move *mv = &co->moves[co->running];
    fprintf(stderr, "coordinator: the map's change waits for the move of slot %u %s -> %s to "
            "end\n", mv->slot, mv->from, mv->to);
    return 1;
}

static void drop_held(struct coord *co)
{
    if (!co->held)
        return;
    slotmap_free(co->held);
    free(co->held);
    co->held = NULL;
}

/* What was held is out (published alone or in a move's map): the
 * takeovers and failovers that waited for it serve from now. */
static void held_map_out(struct coord *co)
{
    coord_recovery_on_held_map_published(co);
    coord_pbr_on_held_map_published(co);
}

/* The map held for a move that did not commit: published now, at a new
 * epoch. */
static void publish_held(struct coord *co)
{
    struct slotmap *held = co->held;
    co->held = NULL;
    held->epoch = coord_next_epoch(co);
    int rc = coord_publish_map(co, held);
    free(held);
    if (rc < 0) {
        fprintf(stderr, "coordinator: out of memory publishing the held map\n");
        return;
    }
    held_map_out(co);
}

int coord_publish_map(struct coord *co, struct slotmap *next)
{
    char err[512];
    if (co->running >= 0)
        return hold_map(co, next);
    /* Persisted (with the progress as the caller left it) before anyone
     * is told; then adopted and pushed. */
    struct slotmap copy;
    if (coord_map_copy(&copy, next) < 0) {
        slotmap_free(next);
        return -1;
    }
    if (persist(co, &copy, err, sizeof(err)) < 0)
        fprintf(stderr, "coordinator: cannot persist epoch %llu: %s (publishing it anyway)\n",
                (unsigned long long)next->epoch, err);
    slotmap_free(&copy);
    if (adopt_map(co, next) < 0) {
        slotmap_free(next);
        return -1;
    }
    push_to_all(co);
    return 0;
}

/* ---- moves ---- */

/* The source or the destination of mv may hold its epoch without the
 * coordinator's word (it died during the move, or reported the commit's
 * outcome unknown): the maps that follow must be newer. */
static void note_unsure_epoch(struct coord *co, const struct move *mv)
{
    if (mv->epoch > co->unsure_epoch)
        co->unsure_epoch = mv->epoch;
}

/* After a move failed whose source or destination died during it
 * (coord_fail_move_of, give_up_held_move): either may hold the move's
 * epoch, so the map goes out again above it, unless a held map just did.
 * unsure_epoch lives only in this run of the coordinator; the saved map's
 * epoch is what a coordinator started again builds on, and it must not
 * hand out that epoch again with another map. */
static void skip_unsure_epoch(struct coord *co)
{
    if (co->running >= 0 || co->unsure_epoch <= co->map.epoch)
        return;
    struct slotmap next;
    if (coord_map_copy(&next, &co->map) < 0) {
        fprintf(stderr, "coordinator: out of memory publishing the map past epoch %llu\n",
                (unsigned long long)co->unsure_epoch);
        return;
    }
    unsigned long long epoch = coord_next_epoch(co);
    next.epoch = epoch;
    fprintf(stderr, "coordinator: epoch %llu may be held by the failed move's source or "
            "destination: the map goes out again at epoch %llu\n",
            (unsigned long long)co->unsure_epoch, epoch);
    if (coord_publish_map(co, &next) < 0)
        fprintf(stderr, "coordinator: out of memory publishing the map at epoch %llu\n", epoch);
}

static void move_finish(struct coord *co, struct move *mv, enum move_state st, const char *why)
{
    mv->state = st;
    snprintf(mv->why, sizeof(mv->why), "%s", why ? why : "");
    if (co->running >= 0 && &co->moves[co->running] == mv)
        co->running = -1;
    fprintf(stderr, "coordinator: move of slot %u %s -> %s epoch %llu %s%s%s\n", mv->slot,
            mv->from, mv->to, (unsigned long long)mv->epoch,
            st == MOVE_DONE ? "done" : "failed", why && *why ? ": " : "", why ? why : "");
    /* Maps before the progress alone is saved: a held map, or the map
     * past a failed move's epoch, is saved with the progress, so no state
     * without the move and below its epoch is ever the last one written. */
    if (co->running < 0 && co->held)
        publish_held(co);
    if (st == MOVE_FAILED)
        skip_unsure_epoch(co);
    coord_save_progress(co);
}

/* The source reported the move done: the destination serves the slot at
 * mv->epoch.  Persist that map, then push it. */
static void move_commit(struct coord *co, struct move *mv, bool dest_switched)
{
    struct slotmap next;
    char err[512];
    /* With what was held back for the move (coord_publish_map). */
    bool had_held = co->held != NULL;
    if (coord_map_copy(&next, coord_map_base(co)) < 0) {
        move_finish(co, mv, MOVE_FAILED, "coordinator out of memory adopting the new map");
        return;
    }
    next.slot[mv->slot] = (uint16_t)mv->to_endpoint;
    /* Source and destination hold mv->epoch already, made from their own
     * map: with held changes in it, the map must be newer than theirs, or
     * they would keep their own (equal epochs are not taken). */
    next.epoch = had_held ? coord_next_epoch(co) : mv->epoch;
    if (next.epoch <= co->map.epoch) {
        /* Not expected (nothing is published while a move runs), but a
         * map at an epoch already used would be ignored. */
        next.epoch = coord_next_epoch(co);
        fprintf(stderr, "coordinator: the move of slot %u was given epoch %llu, already past; "
                "its map gets %llu\n", mv->slot, (unsigned long long)mv->epoch,
                (unsigned long long)next.epoch);
    }
    const char *note = NULL;
    int running = co->running;
    co->running = -1;     /* saved with the new map: the move is over */
    int saved = persist(co, &next, err, sizeof(err));
    co->running = running;
    if (saved < 0) {
        /* Source and destination already serve the new map: adopt it anyway
         * so the cluster converges, and say loudly that a restart would
         * start from the older state. */
        fprintf(stderr, "coordinator: cannot persist epoch %llu: %s\n",
                (unsigned long long)next.epoch, err);
        note = "state file not written";
    }
    if (adopt_map(co, &next) < 0) {
        slotmap_free(&next);
        move_finish(co, mv, MOVE_FAILED, "coordinator out of memory adopting the new map");
        return;
    }
    drop_held(co);          /* merged into next */
    /* Source and destination switched themselves before reporting (a
     * destination whose commit's outcome is unknown may not have: it is
     * pushed the map as a process behind). */
    if (mv->source)
        mv->source->epoch = mv->epoch;
    if (mv->dest && dest_switched)
        mv->dest->epoch = mv->epoch;
    move_finish(co, mv, MOVE_DONE, note);
    push_to_all(co);
    if (had_held)
        held_map_out(co);
}

/* For a commit whose outcome is unknown: does the destination's place
 * still hold the slot's copy?  Yes if the very process that took part in
 * the move is alive (the incarnation it had when the move started), or if
 * its group keeps its data through a takeover or failover (RS: not lost,
 * no more places failed than it has parity processes; PBR: not lost, and
 * the destination's death leaves a member that holds every acknowledged
 * write).  A plain process restarts empty, and a group past its limit
 * serves nothing: the source's copies are then the only ones, and the
 * move fails. */
static bool dest_place_keeps_copy(struct coord *co, const struct move *mv)
{
    struct member *d = mv->dest;
    if (!d || !d->proc)
        return false;
    if (coord_alive(d) && mv->dest_start_incarnation != 0 &&
        d->incarnation == mv->dest_start_incarnation)
        return true;
    switch (co->c->scheme) {
    case SCHEME_RS:
        return coord_recovery_recoverable(co, d->proc->group);
    case SCHEME_PBR:
        return !coord_pbr_group_lost(co, d->proc->group) && !coord_pbr_death_loses(co, d);
    default:
        return false;
    }
}

static void on_migrated(struct member *m, const struct ctl_msg *msg)
{
    struct coord *co = m->co;
    struct move *mv = co->running >= 0 ? &co->moves[co->running] : NULL;
    if (!mv || mv->source != m || mv->slot != msg->slot || mv->epoch != msg->epoch) {
        coord_log_member(m, "reports slot %u epoch %llu migrated (%s), but no such move is running; "
                   "ignored", msg->slot, (unsigned long long)msg->epoch, msg->ok ? "ok" : "failed");
        return;
    }
    bool unknown = !msg->ok &&
        strncmp(msg->why, MIGRATE_OUTCOME_UNKNOWN, strlen(MIGRATE_OUTCOME_UNKNOWN)) == 0;
    if (msg->ok) {
        move_commit(co, mv, true);
    } else if (unknown && dest_place_keeps_copy(co, mv)) {
        /* The destination may have taken the slot and acknowledged writes
         * of it before it died or its answer was lost; the source switched
         * and deleted nothing.  The destination's place (it, or the process
         * that took its data over) holds the whole slot either way, so the
         * move is done.  Failing it gave the slot back to the source's
         * stale copies, and lost those writes. */
        coord_log_member(m, "reports the commit of slot %u %s: the destination holds the slot "
                         "either way; the move counts as done", mv->slot, msg->why);
        move_commit(co, mv, false);
    } else {
        if (unknown) {
            coord_log_member(m, "reports the commit of slot %u %s, and the destination's place "
                             "kept no copy (it restarted empty, or its group lost its data): "
                             "the slot stays with the source", mv->slot, msg->why);
            /* The source holds the move's epoch, switched: the map goes
             * out past it (skip_unsure_epoch) and gives the slot back. */
            note_unsure_epoch(co, mv);
        }
        move_finish(co, mv, MOVE_FAILED, msg->why);
    }
}

/* ---- membership ---- */


/* After a start on saved progress, once every member was heard from (or
 * the startup grace ended): what the saved views name and the saved map
 * does not (a map held for a move when the last run ended) is published.
 * Not before: the epoch must be above what every process holds. */
static void republish_saved(struct coord *co, uint64_t now)
{
    if (!co->republish_due)
        return;
    bool all_heard = true;
    for (int i = 0; i < co->nmembers; i++)
        if (co->members[i].state == MEMBER_UNKNOWN)
            all_heard = false;
    if (!all_heard && now - co->started_ms <= co->startup_grace_ms)
        return;
    co->republish_due = false;
    coord_recovery_republish(co);
    coord_pbr_republish(co);
}

/* A move that has held a failure's map (coord_publish_map) for
 * MOVE_HOLD_MAX_MS without an outcome (a resumed move whose source never
 * got it, say) is given up, so that the failure's map is published; its
 * epoch may be held by its source or destination, so the map skips it.
 * (A source that switched reports the move's epoch in its next heartbeat,
 * which commits the move: member_heard.) */
static void give_up_held_move(struct coord *co, uint64_t now)
{
    if (!co->held || co->running < 0)
        return;
    struct move *mv = &co->moves[co->running];
    if (now - co->held_since_ms < MOVE_HOLD_MAX_MS)
        return;
    note_unsure_epoch(co, mv);
    char why[COORD_WHY_MAX];
    snprintf(why, sizeof(why), "no outcome after %d s while a failure's map waited for it "
             "(outcome not known here)", MOVE_HOLD_MAX_MS / 1000);
    move_finish(co, mv, MOVE_FAILED, why);
}

/* The source or the destination of the running move died, or came back
 * without its state.  The outcome is the other one's to tell:
 *   - the destination died: the source reports the move done (its commit
 *     was answered) or failed (it was not), as always, within its own
 *     timeouts;
 *   - the source died: the destination took the slot if it reports the
 *     move's epoch (member_heard commits the move then: its commit may
 *     have been sent just before the death); if it does not within
 *     SOURCE_DEAD_WAIT_MS, the move failed (give_up_orphan_move).
 * Failing it at once, as before, left a destination that had taken the
 * slot at the move's epoch while the next map gave the slot back to the
 * dead source's place: writes it acknowledged were lost.  Until the
 * outcome is known, the death's own map waits (coord_publish_map). */
void coord_fail_move_of(struct coord *co, const struct member *m, bool successor)
{
    struct move *mv = co->running >= 0 ? &co->moves[co->running] : NULL;
    if (!mv || (mv->source != m && mv->dest != m))
        return;
    /* Either may hold the move's epoch if nobody ever tells: the maps
     * that follow must be newer. */
    note_unsure_epoch(co, mv);
    const struct member *other = mv->source == m ? mv->dest : mv->source;
    if (!coord_alive(other)) {
        move_finish(co, mv, MOVE_FAILED, "source and destination died during the move (outcome "
                    "not known here)");
    } else if (mv->dest == m) {
        if (!mv->dest_dead_ms)
            mv->dest_dead_ms = coord_now_ms();
        mv->dest_incarnation = successor ? 0 : m->incarnation;
        fprintf(stderr, "coordinator: destination %s of the move of slot %u died: the source "
                "reports the outcome\n", mv->to, mv->slot);
    } else if (!mv->source_dead_ms) {
        mv->source_dead_ms = coord_now_ms();
        mv->source_incarnation = successor ? 0 : m->incarnation;
        fprintf(stderr, "coordinator: source %s of the move of slot %u died: waiting %d ms for "
                "the destination to report the move's epoch\n", mv->from, mv->slot,
                SOURCE_DEAD_WAIT_MS);
    }
}

/* The very process that was declared dead is heard from again (its link
 * dropped and came back), not a successor, which knows nothing of the
 * move. */
static bool back_again(const struct member *m, uint64_t incarnation)
{
    return coord_alive(m) && incarnation != 0 && m->incarnation == incarnation;
}

/* A move one of whose ends died (coord_fail_move_of):
 *   - the source: if the destination did not report the move's epoch in
 *     SOURCE_DEAD_WAIT_MS (or died too), it never took the slot; a source
 *     heard from again (its link dropped, the same process) goes on with
 *     the move and reports it as usual;
 *   - the destination: a source that has not switched to the move's epoch
 *     after DEST_DEAD_WAIT_MS (it waits in the import's first step, up to
 *     120 s) never sent the commit: the move failed, and the destination's
 *     own takeover map need not wait for it.  One that switched reports
 *     (its commit retries end within seconds). */
static void give_up_orphan_move(struct coord *co, uint64_t now)
{
    struct move *mv = co->running >= 0 ? &co->moves[co->running] : NULL;
    if (!mv)
        return;
    char reason[COORD_WHY_MAX];
    if (mv->source_dead_ms) {
        if (back_again(mv->source, mv->source_incarnation)) {
            mv->source_dead_ms = 0;
            return;
        }
        if (coord_alive(mv->dest) && now - mv->source_dead_ms < SOURCE_DEAD_WAIT_MS)
            return;
        snprintf(reason, sizeof(reason), "source %s died during the move; the destination did "
                 "not take the slot", mv->from);
        move_finish(co, mv, MOVE_FAILED, reason);
    } else if (mv->dest_dead_ms && back_again(mv->dest, mv->dest_incarnation)) {
        mv->dest_dead_ms = 0;     /* heard from again: the source reports */
    } else if (mv->dest_dead_ms && now - mv->dest_dead_ms >= DEST_DEAD_WAIT_MS &&
               mv->source && mv->source->epoch < mv->epoch) {
        snprintf(reason, sizeof(reason), "destination %s died during the move, before the "
                 "source switched", mv->to);
        move_finish(co, mv, MOVE_FAILED, reason);
    }
}

static void member_dead(struct member *m, const char *why)
{
    struct coord *co = m->co;
    struct link *l = m->link;
    m->link = NULL;
    if (l)
        link_close(l);
    if (m->state == MEMBER_DEAD)
        return;
    m->state = MEMBER_DEAD;
    m->dead_incarnation = m->incarnation;
    m->silence_waited = false;
    coord_lost_forget(m);
    coord_log_member(m, "dead: %s", why);
    coord_fail_move_of(co, m, false);
    coord_recovery_on_dead(co, m);
    coord_pbr_on_dead(co, m);
}

/* A new process says hello as m while m is still believed alive: the
 * process before it died without a word (its host fell silent: no FIN, no
 * RST) and its successor came up before that silence was noticed, e.g. a
 * replaced node's spare host (docs/operations.md).  The predecessor is
 * dead now, and its successor goes the way of any restart: it comes back
 * empty.  Treating it as the same process would have it serve, or count in
 * its group's ack set, as if it held what its predecessor held.  The new
 * process's link (already m->link, on_accept) is kept.  (A process killed
 * and started again on its own host whose new link comes before the old
 * one's close is handled here too: as a death not seen, so its takeover
 * waits out the read lease instead of fencing at once.) */
static void member_superseded(struct member *m, long new_pid)
{
    char why[160];
    struct link *successor = m->link;
    m->link = NULL;
    snprintf(why, sizeof(why), "pid %ld says hello in its place (its death was not seen: "
             "last heard %llu ms ago)", new_pid,
             (unsigned long long)(coord_now_ms() - m->last_heard_ms));
    member_dead(m, why);
    m->link = successor;
}

/* msg's hello comes from another process than the one known by pid and
 * incarnation (0: not known): another pid, or (both known) another
 * incarnation.  Pids alone are the same for a container's processes
 * started again on another host. */
static bool another_than(long pid, uint64_t incarnation, const struct ctl_msg *msg)
{
    if (pid != 0 && pid != msg->pid)
        return true;
    return incarnation != 0 && msg->incarnation != 0 && incarnation != msg->incarnation;
}

/* A process declared dead came back (its host was only cut off, and
 * healed) while a successor has its place (a spare host took its node's
 * name): what it holds is older than its group's, and its hello must not
 * replace the successor in turn.  It is told to exit; its
 * link, which replaced the successor's (on_accept), is set aside and
 * heard no more (closing it now could drop the "retire" unsent), and the
 * successor redials at once. */
static void retire_predecessor(struct member *m, struct link *l, const struct ctl_msg *msg)
{
    if (m->state == MEMBER_ALIVE)
        coord_log_member(m, "pid %ld, declared dead, says hello again while pid %ld has its "
                         "place: told to exit", msg->pid, m->pid);
    else
        coord_log_member(m, "pid %ld, declared dead by an earlier leader, says hello again "
                         "after pid %ld had its place: told to exit", msg->pid, m->saved_pid);
    link_send(l, FT_CONTROL, "retire", 6);
    if (m->link == l)
        m->link = NULL;
    if (m->retired_link && m->retired_link != l)
        link_close(m->retired_link);
    m->retired_link = l;
}

/* msg's hello comes from the incarnation declared dead in m's place while
 * another process has it: alive here, or (an earlier leader's save) the
 * last one heard there. */
static bool was_declared_dead(const struct member *m, const struct ctl_msg *msg, bool another)
{
    if (msg->incarnation == 0 || msg->incarnation != m->dead_incarnation)
        return false;
    if (m->state == MEMBER_ALIVE)
        return another;
    return m->saved_incarnation != 0 && m->saved_incarnation != msg->incarnation;
}

static void member_heard(struct member *m, const struct ctl_msg *msg)
{
    struct coord *co = m->co;
    uint64_t now = coord_now_ms();
    bool was_alive = m->state == MEMBER_ALIVE;
    m->pid = msg->pid;
    m->epoch = msg->epoch;
    if (msg->kind == CTL_HB)
        m->rss = msg->rss;
    m->last_heard_ms = now;
    m->state = MEMBER_ALIVE;
    if (m->silence_waited)
        coord_log_member(m, "heard again: its silence was waited out, not declared a death");
    m->silence_waited = false;
    coord_lost_forget(m);
    if (!was_alive)
        coord_log_member(m, "alive (pid %ld, epoch %llu)", m->pid, (unsigned long long)m->epoch);
    if (m->epoch > co->map.epoch && m->warned_epoch != m->epoch) {
        m->warned_epoch = m->epoch;
        coord_log_member(m, "reports epoch %llu, newer than the coordinator's %llu (a move whose "
                   "outcome was lost?)", (unsigned long long)m->epoch,
                   (unsigned long long)co->map.epoch);
    }
    struct move *mv = co->running >= 0 ? &co->moves[co->running] : NULL;
    if (mv && mv->dest == m && m->epoch == mv->epoch && mv->epoch > co->map.epoch) {
        /* The destination took the slot (it reaches the move's epoch only
         * by the commit): the move is done, whether its source's report is
         * on its way, lost with the source, or the move was started by an
         * earlier leader.  (The source's epoch says only that it switched:
         * a move that then failed before the commit puts its old map back,
         * and counting that as done gave the slot to a destination that
         * missed a write the source had acknowledged.) */
        coord_log_member(m, "holds epoch %llu: the move of slot %u is done",
                         (unsigned long long)m->epoch, mv->slot);
        move_commit(co, mv, true);
    }
    push_if_behind(m, now);
}

static struct coord *co_of(struct member *m)
{
    return m->co;
}

static void on_control(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len,
                       void *ctx)
{
    struct member *m = ctx;
    struct ctl_msg msg;
    char err[256];
    if (l == m->retired_link)
        return;
    if (type != FT_CONTROL) {
        coord_log_member(m, "sent a %s frame on its control link; ignored", frame_type_name(type));
        return;
    }
    if (coord_is_pbr_answer((const char *)payload, len)) {
        if (m->state == MEMBER_ALIVE)
            coord_pbr_on_answer(co_of(m), m, (const char *)payload, len);
        return;
    }
    if (coord_is_recovery_answer((const char *)payload, len)) {
        if (m->state == MEMBER_ALIVE)
            coord_recovery_on_answer(co_of(m), m, (const char *)payload, len);
        return;
    }
    if (ctl_parse((const char *)payload, len, &msg, err, sizeof(err)) < 0) {
        coord_log_member(m, "%s; ignored", err);
        return;
    }
    switch (msg.kind) {
    case CTL_HELLO: {
        bool another = another_than(m->pid, m->incarnation, &msg);
        if (was_declared_dead(m, &msg, another)) {
            retire_predecessor(m, l, &msg);
            break;
        }
        if (m->state == MEMBER_ALIVE && another)
            member_superseded(m, msg.pid);
        /* not the process an earlier leader saw last */
        bool unseen = another_than(m->saved_pid, m->saved_incarnation, &msg);
        bool restarted = m->state == MEMBER_DEAD || another || unseen;
        m->incarnation = msg.incarnation;
        bool new_pid = m->pid != msg.pid;
        m->pushed_epoch = 0;    /* a new process, or a new link: it has no pushed map */
        if (unseen) {
            coord_log_member(m, "restarted while no coordinator watched (pid %ld, an earlier "
                             "leader saw pid %ld%s): it comes back empty", msg.pid, m->saved_pid,
                             m->saved_pid == msg.pid ? " with another incarnation" : "");
            coord_recovery_on_unseen_restart(co_of(m), m);
            /* Its part of a running move died with its predecessor. */
            coord_fail_move_of(co_of(m), m, true);
        }
        m->saved_pid = 0;
        m->saved_incarnation = 0;
        member_heard(m, &msg);
        coord_recovery_on_hello(co_of(m), m);
        coord_pbr_on_hello(co_of(m), m, restarted);
        if (new_pid)
            coord_save_progress(co_of(m));   /* the next leader knows this pid */
        break;
    }
    case CTL_HB:
        member_heard(m, &msg);
        m->heartbeats++;
        if (msg.body && msg.body_len > 4 && memcmp(msg.body, "pbr ", 4) == 0)
            coord_pbr_on_progress(co_of(m), m, msg.body, msg.body_len);
        else if (msg.body)
            coord_recovery_on_progress(co_of(m), m, msg.body, msg.body_len);
        break;
    case CTL_MIGRATED:
        on_migrated(m, &msg);
        break;
    case CTL_LOST:
        if (m->state == MEMBER_ALIVE)
            coord_lost_heard(co_of(m), m, &msg);
        break;
    default:
        coord_log_member(m, "sent a coordinator's message; ignored");
        break;
    }
}

static void on_link_down(struct link *l, const char *why, void *ctx)
{
    struct member *m = ctx;
    char reason[300];
    if (l == m->retired_link) {
        m->retired_link = NULL;     /* an accepted link is freed after this */
        return;
    }
    if (m->link != l)
        return;
    m->link = NULL;   /* an accepted link is freed by link.c after this */
    if (m->state == MEMBER_UNKNOWN) {
        /* Dropped before its hello: no word of it yet, and no evidence
         * either.  A process whose handshake timed out on its side (this
         * coordinator stopped or starved while it dialed) closes such a
         * link and redials; declaring it dead had a live parity process
         * rebuilt from scratch.  The startup grace and its peers' word
         * decide, as for any member not heard from. */
        coord_log_member(m, "control link dropped before its hello (%s); it may redial", why);
        return;
    }
    snprintf(reason, sizeof(reason), "control link down (%s)", why);
    member_dead(m, reason);
}

static bool on_accept(void *owner, const struct link_identity *peer, struct link *l,
                      struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                      const char **reason)
{
    struct coord *co = owner;
    struct member *m = member_of(co, peer);
    if (!m) {
        fprintf(stderr, "coordinator: control link from %s: group %u role %u index %u is not "
                "in the cluster file; rejected\n", link_peer_name(l), (unsigned)peer->group,
                (unsigned)peer->role, (unsigned)peer->index);
        *reason = "no such process in the coordinator's cluster file";
        return false;
    }
    if (m->link) {
        /* The process restarted or redialed: the new link replaces the old. */
        struct link *old = m->link;
        m->link = NULL;
        link_close(old);
    }
    m->link = l;
    cb->on_frame = on_control;
    cb->on_down = on_link_down;
    *ctx = m;
    *welcome_xid = 0;
    return true;
}

/* The check ran late by `late` ms: this process did not run meanwhile (the
 * machine or VM was paused, the coordinator was stopped or starved).  It
 * could hear nobody then, and on a paused machine nobody could speak
 * either, so that silence is no evidence against anyone: without this, a
 * pause of two seconds had every process of the machine declared dead at
 * once and its groups LOST while all of them ran with their data.  Each
 * member's silence is counted from `late` ms later.  A killed process is
 * still seen at once (its link drops), a hung one after the usual time of
 * silence we could have heard. */
static void forgive_own_stall(struct coord *co, uint64_t now)
{
    uint64_t due = co->last_check_ms + CHECK_EVERY_MS;
    uint64_t late = co->last_check_ms != 0 && now > due ? now - due : 0;
    co->last_check_ms = now;
    if (late < COORD_STALL_MS)
        return;
    fprintf(stderr, "coordinator: did not run for %llu ms (paused or starved); that silence "
                    "counts against no member\n", (unsigned long long)(late + CHECK_EVERY_MS));
    co->started_ms = coord_forgive_ms(co->started_ms, late, now);
    for (int i = 0; i < co->nmembers; i++) {
        struct member *m = &co->members[i];
        /* the dead keep their last word; the unheard have the startup grace */
        if (m->state == MEMBER_ALIVE)
            m->last_heard_ms = coord_forgive_ms(m->last_heard_ms, late, now);
    }
    coord_recovery_forgive(co, late, now);
    coord_pbr_forgive(co, late, now);
}

/* m is waited for rather than declared dead: true when that is to be
 * logged, as the wait starts and then every SILENCE_LOG_EVERY_MS. */
static bool wait_log_due(struct member *m, uint64_t now)
{
    bool due = !m->silence_waited || now - m->silence_logged_ms >= SILENCE_LOG_EVERY_MS;
    if (due)
        m->silence_logged_ms = now;
    m->silence_waited = true;
    return due;
}

/* m has been silent past dead_after_ms, but its control link is up: it may
 * be paused (stopped, swapping, its VM frozen), not dead.  If declaring it
 * dead would leave its coding group more failed places than parity
 * processes, or its primary-backup group no live member that holds every
 * acknowledged write (coord_pbr_death_loses), the group would be declared
 * LOST and whatever the silent processes hold thrown away, though they
 * may come back with all of it: a recovery process that took writes, then
 * both parity processes paused, lost 19,621 acknowledged writes that way
 * with no process dead (docs/recovery.md, "When silence is not declared a
 * death").  So the
 * coordinator waits, for silence_hold_ms at most (COCYTUS_SILENCE_HOLD_MS,
 * default 30 s): the group waits with m (its writes need m's ack, its
 * reads m's lease), and m is declared dead earlier if its link drops (a
 * host that is really gone stops acknowledging: TCP_USER_TIMEOUT) or if
 * it restarts.  A process hung for good, whose kernel still acknowledges,
 * must not stop its group for ever: after the hold it is declared dead as
 * before.  Logged when the wait starts and every 10 s. */
static bool silence_would_lose(struct coord *co, struct member *m, uint64_t now)
{
    int failed = 0;
    uint64_t silent = now - m->last_heard_ms;
    bool pbr = m->proc->role == ROLE_PRIMARY || m->proc->role == ROLE_BACKUP;
    if (silent > co->silence_hold_ms)
        return false;
    if (pbr ? !coord_pbr_death_loses(co, m) : !coord_recovery_death_loses(co, m, &failed))
        return false;
    if (wait_log_due(m, now)) {
        char state[80];
        if (pbr)
            snprintf(state, sizeof(state), "no other member of its group holds every "
                     "acknowledged write");
        else
            snprintf(state, sizeof(state), "its group has %d failed place(s) already", failed);
        coord_log_member(m, "no heartbeat for %" PRIu64 " ms, but its link is up and %s: "
                         "declaring it dead would lose data, so the coordinator waits for "
                         "it (%" PRIu64 " ms at most)", silent, state, co->silence_hold_ms);
    }
    return true;
}

/* The same wait for m, not heard from since this coordinator started (a
 * coordinator elected, or restarted, while processes were paused): its
 * startup grace or its peers' word would declare it dead, but if its live
 * peers say their links to it are up, only silent (coord_lost_paused), it
 * may be paused like them, and where its death would lose data the
 * coordinator waits for it too, until silence_hold_ms after its own
 * start.  A dead process's peers see its links drop and say so, and then
 * it is declared dead as before.  Coding groups only: a primary-backup
 * group's failover decides who leads, and is not held. */
static bool unheard_would_lose(struct coord *co, struct member *m, uint64_t now)
{
    int failed = 0;
    if (now - co->started_ms > co->silence_hold_ms || !coord_lost_paused(co, m) ||
        !coord_recovery_death_loses(co, m, &failed))
        return false;
    if (wait_log_due(m, now))
        coord_log_member(m, "not heard from since the coordinator started, but its live peers "
                         "report their links to it up, only silent, and its group has %d "
                         "failed place(s) already: declaring it dead would lose data, so the "
                         "coordinator waits for it (until %" PRIu64 " ms after its start)",
                         failed, co->silence_hold_ms);
    return true;
}

/* Every CHECK_EVERY_MS: who has gone quiet. */
static void on_check(evutil_socket_t fd, short what, void *arg)
{
    struct coord *co = arg;
    uint64_t now = coord_now_ms();
    char why[256];
    forgive_own_stall(co, now);
    if (co->zk && !coord_zk_leading(co->zk, why, sizeof(why)))
        step_down(why);
    for (int i = 0; i < co->nmembers; i++) {
        struct member *m = &co->members[i];
        if (m->state == MEMBER_ALIVE && now - m->last_heard_ms > co->dead_after_ms) {
            if (silence_would_lose(co, m, now))
                continue;
            bool held_out = m->silence_waited && now - m->last_heard_ms > co->silence_hold_ms;
            snprintf(why, sizeof(why), "no heartbeat for %" PRIu64 " ms%s",
                     m->silence_waited ? now - m->last_heard_ms : co->dead_after_ms,
                     held_out ? " (waited out as long as the coordinator may)"
                     : m->silence_waited ? " (waited for while its death would have lost data)"
                                         : "");
            member_dead(m, why);
        } else if (m->state == MEMBER_UNKNOWN && now - co->started_ms > co->startup_grace_ms) {
            if (unheard_would_lose(co, m, now))
                continue;
            bool held_out = m->silence_waited && now - co->started_ms > co->silence_hold_ms;
            snprintf(why, sizeof(why), "not heard from in the %" PRIu64 " ms after the "
                     "coordinator started%s", m->silence_waited ? now - co->started_ms
                                                                : co->startup_grace_ms,
                     held_out ? " (waited out as long as the coordinator may)"
                     : m->silence_waited ? " (waited for while its peers' links to it were up)"
                                         : "");
            member_dead(m, why);
        } else if (m->state == MEMBER_UNKNOWN && coord_lost_evidence(co, m, why, sizeof(why))) {
            if (unheard_would_lose(co, m, now))
                continue;
            member_dead(m, why);
        }
    }
    republish_saved(co, now);
    give_up_orphan_move(co, now);
    give_up_held_move(co, now);
    coord_recovery_check(co);
    coord_pbr_check(co);
}

/* ---- admin words ---- */

static void reply(eng_write_fn write, void *wctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply(eng_write_fn write, void *wctx, const char *fmt, ...)
{
    char line[REPLY_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 2, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 3)
        n = (int)sizeof(line) - 3;
    line[n++] = '\r';
    line[n++] = '\n';
    write(wctx, line, (size_t)n);
}

static void admin_status(struct coord *co, eng_write_fn write, void *wctx)
{
    uint64_t now = coord_now_ms();
    reply(write, wctx, "epoch %llu", (unsigned long long)co->map.epoch);
    for (int i = 0; i < co->nmembers; i++) {
        const struct member *m = &co->members[i];
        const struct cluster_proc *p = m->proc;
        long long age = m->last_heard_ms ? (long long)(now - m->last_heard_ms) : -1;
        reply(write, wctx, "proc %d %s %d %d %s:%d %s pid=%ld rss=%llu epoch=%llu hb_age_ms=%lld",
              p->group, cluster_role_name(p->role), p->index, p->node, p->host, p->port,
              coord_recovery_joining(co, m) || coord_pbr_joining(co, m) ? "joining"
              : m->silence_waited && m->state != MEMBER_DEAD ? "silent"
                                                               : state_name(m->state),
              m->pid, (unsigned long long)m->rss,
              (unsigned long long)m->epoch, age);
    }
    reply(write, wctx, "END");
}

static void admin_moves(struct coord *co, eng_write_fn write, void *wctx)
{
    static const char *const names[] = { "running", "done", "failed" };
    for (int i = 0; i < co->nmoves; i++) {
        const struct move *mv = &co->moves[i];
        reply(write, wctx, "move %u %s %s %llu %s%s%s", mv->slot, mv->from, mv->to,
              (unsigned long long)mv->epoch, names[mv->state], mv->why[0] ? " " : "", mv->why);
    }
    reply(write, wctx, "END");
}

static bool parse_number(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end != '\0' || v > max)
        return false;
    *out = v;
    return true;
}

/* The destination endpoint in group g: index idx (>= 0) or the one of the
 * group's serving processes with the fewest slots.  -1 if none (or out of
 * memory). */
static int pick_destination(const struct coord *co, long g, long idx)
{
    const struct slotmap *m = &co->map;
    unsigned *count = calloc((size_t)m->nendpoints + 1, sizeof(*count));
    if (!count)
        return -1;
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        count[m->slot[s]]++;
    int best = -1;
    for (int i = 0; i < m->nendpoints; i++) {
        const struct slotmap_endpoint *e = &m->endpoints[i];
        if (e->group != g || (idx >= 0 && e->index != idx))
            continue;
        if (best < 0 || count[i] < count[best])
            best = i;
    }
    free(count);
    return best;
}

static int grow_moves(struct coord *co)
{
    if (co->nmoves < co->cap_moves)
        return 0;
    int cap = co->cap_moves ? co->cap_moves * 2 : 16;
    struct move *mv = realloc(co->moves, (size_t)cap * sizeof(*mv));
    if (!mv)
        return -1;
    co->moves = mv;
    co->cap_moves = cap;
    return 0;
}

/* A process that reported a map newer than ours (a move whose outcome the
 * coordinator lost), or NULL.  Dead processes count too, with the epoch
 * they last reported: a source that committed and then died still holds
 * that epoch, and a new move must not hand it out again with another map.
 * (Processes not heard from since this coordinator started are unknown
 * here; see docs/routing.md.) */
static const struct member *ahead_of_us(const struct coord *co)
{
    for (int i = 0; i < co->nmembers; i++) {
        const struct member *m = &co->members[i];
        if (m->epoch > co->map.epoch)
            return m;
    }
    return NULL;
}

/* Everything that can refuse a move; NULL when it may start. */
static const char *move_refusal(struct coord *co, unsigned slot, int to, char *why, size_t len)
{
    const struct slotmap *m = &co->map;
    char from_addr[ADDR_MAX], to_addr[ADDR_MAX];
    endpoint_addr(&m->endpoints[m->slot[slot]], from_addr, sizeof(from_addr));
    endpoint_addr(&m->endpoints[to], to_addr, sizeof(to_addr));
    struct member *src = member_at(co, &m->endpoints[m->slot[slot]]);
    struct member *dst = member_at(co, &m->endpoints[to]);
    const struct member *ahead = ahead_of_us(co);
    if (co->running >= 0) {
        const struct move *r = &co->moves[co->running];
        snprintf(why, len, "a move is already running (slot %u %s -> %s)", r->slot, r->from, r->to);
    } else if (ahead) {
        /* A new move would hand out that epoch again, with another map. */
        snprintf(why, len, "%s:%d holds epoch %llu, newer than the coordinator's %llu "
                 "(a move's outcome was lost); no moves until that is resolved",
                 ahead->proc->host, ahead->proc->port, (unsigned long long)ahead->epoch,
                 (unsigned long long)m->epoch);
    } else if (m->slot[slot] == to) {
        snprintf(why, len, "slot %u is already served by %s", slot, to_addr);
    } else if (!src || src->state != MEMBER_ALIVE || !src->link || !link_is_up(src->link)) {
        snprintf(why, len, "source %s is not connected to the coordinator (%s)", from_addr,
                 src ? state_name(src->state) : "unknown");
    } else if (!dst || dst->state != MEMBER_ALIVE) {
        snprintf(why, len, "destination %s is %s", to_addr, dst ? state_name(dst->state) : "unknown");
    } else if (src->epoch != m->epoch) {
        snprintf(why, len, "source %s is at epoch %llu, not the coordinator's %llu yet", from_addr,
                 (unsigned long long)src->epoch, (unsigned long long)m->epoch);
    } else if (dst->epoch != m->epoch) {
        /* The destination builds the new map from its own: it must be ours. */
        snprintf(why, len, "destination %s is at epoch %llu, not the coordinator's %llu yet",
                 to_addr, (unsigned long long)dst->epoch, (unsigned long long)m->epoch);
    } else {
        return NULL;
    }
    return why;
}

/* cocytus move <slot> <group> [<index>] */
static void admin_move(struct coord *co, int argc, char **argv, eng_write_fn write, void *wctx)
{
    unsigned long slot, group, index = 0;
    char why[COORD_WHY_MAX];
    if (argc < 3 || argc > 4) {
        reply(write, wctx, "SERVER_ERROR usage: cocytus move <slot> <group> [<index>]");
        return;
    }
    if (!parse_number(argv[1], SLOTMAP_SLOTS - 1, &slot)) {
        reply(write, wctx, "SERVER_ERROR bad slot '%.40s' (0 to %u)", argv[1], SLOTMAP_SLOTS - 1);
        return;
    }
    if (!parse_number(argv[2], 1u << 20, &group) || (argc == 4 && !parse_number(argv[3], 254, &index))) {
        reply(write, wctx, "SERVER_ERROR bad group or index");
        return;
    }
    int to = pick_destination(co, (long)group, argc == 4 ? (long)index : -1);
    if (to < 0) {
        if (argc == 4)
            reply(write, wctx, "SERVER_ERROR group %lu has no serving process %lu", group, index);
        else
            reply(write, wctx, "SERVER_ERROR no group %lu serves slots (groups 0 to %d)", group,
                  co->c->ngroups - 1);
        return;
    }
    if (move_refusal(co, (unsigned)slot, to, why, sizeof(why))) {
        reply(write, wctx, "SERVER_ERROR %s", why);
        return;
    }
    if (grow_moves(co) < 0) {
        reply(write, wctx, "SERVER_ERROR out of memory");
        return;
    }
    const struct slotmap_endpoint *dest = &co->map.endpoints[to];
    struct move *mv = &co->moves[co->nmoves];
    memset(mv, 0, sizeof(*mv));
    mv->slot = (unsigned)slot;
    endpoint_addr(&co->map.endpoints[co->map.slot[slot]], mv->from, sizeof(mv->from));
    endpoint_addr(dest, mv->to, sizeof(mv->to));
    mv->to_endpoint = to;
    mv->epoch = co->map.epoch + 1;
    mv->source = member_at(co, &co->map.endpoints[co->map.slot[slot]]);
    mv->dest = member_at(co, dest);
    mv->dest_start_incarnation = mv->dest ? mv->dest->incarnation : 0;
    char text[64 + ADDR_MAX];
    int n = snprintf(text, sizeof(text), "migrate %u %s %llu", mv->slot, mv->to,
                     (unsigned long long)mv->epoch);
    /* Saved before the source hears of it: a next leader waits for it. */
    mv->state = MOVE_RUNNING;
    co->running = co->nmoves++;
    coord_save_progress(co);
    if (link_send(mv->source->link, FT_CONTROL, text, (uint32_t)n) < 0) {
        co->running = -1;
        co->nmoves--;
        coord_save_progress(co);
        reply(write, wctx, "SERVER_ERROR cannot reach the source %s", mv->from);
        return;
    }
    fprintf(stderr, "coordinator: moving slot %u %s -> %s at epoch %llu\n", mv->slot, mv->from,
            mv->to, (unsigned long long)mv->epoch);
    reply(write, wctx, "OK moving %u %s -> %s epoch %llu", mv->slot, mv->from, mv->to,
          (unsigned long long)mv->epoch);
}

void coord_resume_move(struct coord *co, unsigned slot, int to, uint64_t epoch,
                       uint64_t dest_incarnation)
{
    if (slot >= SLOTMAP_SLOTS || to < 0 || to >= co->map.nendpoints || epoch <= co->map.epoch ||
        grow_moves(co) < 0)
        return;
    struct move *mv = &co->moves[co->nmoves];
    memset(mv, 0, sizeof(*mv));
    mv->slot = slot;
    endpoint_addr(&co->map.endpoints[co->map.slot[slot]], mv->from, sizeof(mv->from));
    endpoint_addr(&co->map.endpoints[to], mv->to, sizeof(mv->to));
    mv->to_endpoint = to;
    mv->epoch = epoch;
    mv->source = member_at(co, &co->map.endpoints[co->map.slot[slot]]);
    mv->dest = member_at(co, &co->map.endpoints[to]);
    mv->dest_start_incarnation = dest_incarnation;
    mv->state = MOVE_RUNNING;
    co->running = co->nmoves++;
    fprintf(stderr, "coordinator: an earlier leader was moving slot %u %s -> %s at epoch %llu; "
            "waiting for the source's outcome\n", slot, mv->from, mv->to,
            (unsigned long long)epoch);
}

static bool coord_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *wctx)
{
    struct coord *co = e->priv;
    if (strcmp(argv[0], "status") == 0 && argc == 1)
        admin_status(co, write, wctx);
    else if (strcmp(argv[0], "moves") == 0 && argc == 1)
        admin_moves(co, write, wctx);
    else if (strcmp(argv[0], "groups") == 0 && argc == 1 && co->pbr)
        coord_pbr_admin(co, write, wctx);
    else if (strcmp(argv[0], "groups") == 0 && argc == 1)
        coord_recovery_admin(co, write, wctx);
    else if (strcmp(argv[0], "move") == 0)
        admin_move(co, argc, argv, write, wctx);
    else
        return false;
    return true;
}

/* ---- the engine: no keys here ---- */

static eng_status coord_get(struct engine *e, const char *key, size_t nkey,
                            struct eng_value *out, struct eng_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = not_a_server;
    return ENG_FAILED;
}

static void coord_release(struct engine *e, void *handle)
{
}

static eng_status coord_mutate(struct engine *e, const struct eng_mutation *m,
                               struct eng_result *res, eng_done_fn done, void *cookie)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = not_a_server;
    return ENG_FAILED;
}

static bool coord_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct coord *co = e->priv;
    if (group[0] != '\0')
        return strcmp(group, "settings") == 0;
    int alive = 0;
    for (int i = 0; i < co->nmembers; i++)
        alive += co->members[i].state == MEMBER_ALIVE;
    emit(ctx, "coord_epoch", "%llu", (unsigned long long)co->map.epoch);
    emit(ctx, "coord_processes", "%d", co->nmembers);
    emit(ctx, "coord_alive", "%d", alive);
    emit(ctx, "coord_moves", "%d", co->nmoves);
    return true;
}

static void coord_stats_reset(struct engine *e)
{
}

static void coord_tick(struct engine *e, time_t now)
{
}

static void coord_destroy(struct engine *e)
{
    struct coord *co = e->priv;
    for (int i = 0; i < co->nmembers; i++) {
        link_close(co->members[i].link);            /* NULL: nothing */
        link_close(co->members[i].retired_link);
    }
    link_listener_free(co->listener);
    if (co->timer)
        event_free(co->timer);
    coord_recovery_free(co);
    coord_pbr_free(co);
    coord_zk_close(co->zk);
    free(co->resume);
    drop_held(co);
    slotmap_free(&co->map);
    free(co->body);
    free(co->members);
    free(co->moves);
    free(co);
    free(e);
}

static const struct engine_ops coord_ops = {
    .name = "coordinator",
    .get = coord_get,
    .release = coord_release,
    .mutate = coord_mutate,
    .stats = coord_stats,
    .stats_reset = coord_stats_reset,
    .tick = coord_tick,
    .destroy = coord_destroy,
    .admin = coord_admin,
};

/* ---- start ---- */

/* Our coordinator line: the one whose port (and address, if given) the
 * command line names, else the first.  -1 if none matches. */
static int own_line(const struct cluster *c, const struct settings *st)
{
    if (!st->port_given)
        return 0;
    for (int i = 0; i < c->ncoords; i++)
        if (c->coords[i].port == st->port &&
            (!st->listen_addr || strcmp(st->listen_addr, c->coords[i].host) == 0))
            return i;
    return -1;
}

int coord_settings(const struct cluster *c, struct settings *st)
{
    if (!c->has_coordinator) {
        fprintf(stderr, "cocytus-server: %s has no 'coordinator <host> <port> <link_port>' line\n",
                st->cluster_file);
        return -1;
    }
    int self = own_line(c, st);
    if (self < 0 && c->ncoords > 1) {
        fprintf(stderr, "cocytus-server: no coordinator line of %s has port %d%s%s; which "
                "coordinator is this?\n", st->cluster_file, st->port,
                st->listen_addr ? " on " : "", st->listen_addr ? st->listen_addr : "");
        return -1;
    }
    if (self < 0)
        self = 0;
    if (!st->port_given)
        st->port = c->coords[self].port;
    if (!st->listen_addr)
        st->listen_addr = c->coords[self].host;
    return 0;
}

/* With ZooKeeper: wait to lead, then read the state (a map, maybe
 * progress lines after it).  0 loaded, 1 none yet, -1 failed. */
static int load_from_zookeeper(struct coord *co, struct slotmap *m, char *err, size_t errlen)
{
    const struct cluster_coord *me = &co->c->coords[co->self];
    char who[128];
    snprintf(who, sizeof(who), "%s:%d pid %ld", me->host, me->port, (long)getpid());
    co->zk = coord_zk_open(co->c->zk_connect, co->c->name, err, errlen);
    if (!co->zk || coord_zk_lead(co->zk, who, err, errlen) < 0)
        return -1;
    char *text = NULL;
    size_t len = 0, used = 0;
    int rc = coord_zk_load(co->zk, &text, &len, err, errlen);
    if (rc != 0)
        return rc;
    rc = coord_state_decode("the ZooKeeper state", text, len, co->c, m, &used, err, errlen);
    if (rc == 0 && used < len) {
        co->resume = malloc(len - used + 1);
        if (co->resume) {
            memcpy(co->resume, text + used, len - used);
            co->nresume = len - used;
        }
    }
    free(text);
    return rc;
}

/* The state file's map, or at a first start the server's initial map
 * (saved at once, so the file exists from the first moment). */
static int load_map(struct coord *co)
{
    char err[768];
    struct slotmap m;
    const char *where = co->c->has_zookeeper ? "ZooKeeper" : co->c->coord_state;
    int rc = co->c->has_zookeeper
                 ? load_from_zookeeper(co, &m, err, sizeof(err))
                 : coord_state_load(co->c->coord_state, co->c, &m, &co->resume, &co->nresume, err,
                                    sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "cocytus-server: coordinator refuses to start: %s\n", err);
        return -1;
    }
    if (rc == 1) {
        if (coord_map_copy(&m, co->s->slotmap) < 0) {
            fprintf(stderr, "cocytus-server: out of memory\n");
            return -1;
        }
        if (persist(co, &m, err, sizeof(err)) < 0) {
            fprintf(stderr, "cocytus-server: coordinator cannot write its state file: %s\n", err);
            slotmap_free(&m);
            return -1;
        }
        fprintf(stderr, "coordinator: no saved state; starting at epoch %llu (%s written)\n",
                (unsigned long long)m.epoch, where);
    } else {
        fprintf(stderr, "coordinator: state in %s: epoch %llu%s\n", where,
                (unsigned long long)m.epoch, co->nresume ? ", with work in progress" : "");
    }
    if (adopt_map(co, &m) < 0) {
        fprintf(stderr, "cocytus-server: out of memory\n");
        slotmap_free(&m);
        return -1;
    }
    return 0;
}

static int make_members(struct coord *co)
{
    co->members = calloc((size_t)co->c->nprocs + 1, sizeof(*co->members));
    if (!co->members)
        return -1;
    for (int i = 0; i < co->c->nprocs; i++) {
        co->members[i].co = co;
        co->members[i].proc = &co->c->procs[i];
    }
    co->nmembers = co->c->nprocs;
    return 0;
}

static int start_listening(struct coord *co)
{
    const struct cluster *c = co->c;
    const struct cluster_coord *me = &c->coords[co->self];
    co->listener = link_listen(co->s->base, me->host, me->link_port, c->name,
                               LINK_GROUP_ANY, c->secret, on_accept, co);
    if (!co->listener) {
        fprintf(stderr, "cocytus-server: coordinator cannot listen for control links on %s port %d\n",
                me->host, me->link_port);
        return -1;
    }
    link_listener_set_tls(co->listener, c->link_tls);
    struct timeval tv = { .tv_sec = 0, .tv_usec = CHECK_EVERY_MS * 1000 };
    co->timer = event_new(co->s->base, -1, EV_PERSIST, on_check, co);
    if (!co->timer || event_add(co->timer, &tv) < 0)
        return -1;
    return 0;
}

struct engine *coord_engine_new(struct server *s)
{
    struct engine *e = calloc(1, sizeof(*e));
    struct coord *co = calloc(1, sizeof(*co));
    if (!e || !co || !s->cluster || !s->slotmap) {
        fprintf(stderr, "cocytus-server: cannot start the coordinator%s\n",
                e && co ? " without a cluster file" : ": out of memory");
        free(e);
        free(co);
        return NULL;
    }
    co->s = s;
    co->c = s->cluster;
    co->running = -1;
    co->self = own_line(co->c, &s->settings);
    if (co->self < 0)
        co->self = 0;
    e->ops = &coord_ops;
    e->priv = co;
    if (make_members(co) < 0 || load_map(co) < 0 || coord_recovery_init(co) < 0 ||
        coord_pbr_init(co) < 0) {
        coord_destroy(e);
        return NULL;
    }
    if (co->resume) {
        coord_progress_apply(co, co->resume, co->nresume);
        free(co->resume);
        co->resume = NULL;
        co->republish_due = true;
    }
    co->repair_stall_ms = env_ms("COCYTUS_REPAIR_STALL_MS", COORD_REPAIR_STALL_MS);
    co->dead_after_ms = env_ms("COCYTUS_DEAD_AFTER_MS", COORD_DEAD_AFTER_MS);
    co->silence_hold_ms = env_ms("COCYTUS_SILENCE_HOLD_MS", COORD_SILENCE_HOLD_MS);
    co->startup_grace_ms = env_ms("COCYTUS_STARTUP_GRACE_MS", COORD_STARTUP_GRACE_MS);
    /* Startup grace counts from now: a waiting candidate may have waited long. */
    co->started_ms = coord_now_ms();
    /* A stall before the first check is forgiven like any other: a
     * coordinator stopped for 3 s just after it started declared every
     * process of the cluster dead, heard or not (forgive_own_stall). */
    co->last_check_ms = co->started_ms;
    if (start_listening(co) < 0) {
        coord_destroy(e);
        return NULL;
    }
    fprintf(stderr, "coordinator: %d processes in %s, epoch %llu, control links on %s:%d\n",
            co->nmembers, s->settings.cluster_file, (unsigned long long)co->map.epoch,
            co->c->coords[co->self].host, link_listener_port(co->listener));
    return e;
}
