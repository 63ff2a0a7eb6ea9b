/* coord_pbr.c - what the coordinator does for primary-backup groups:
 * failover when a primary dies, and rebuilding backups (docs/pbr.md).
 *
 * Members: backup b is member b, the cluster file's primary line member M
 * (pbr/pbr_role.h).  Each group has a current primary, at first member M,
 * later whichever backup was promoted (read back from the slot map after a
 * coordinator restart: the group's endpoint names the primary's port).
 *
 * Failover, when the primary dies, in two steps answered by the backups:
 *   pbr fence <g> [gone]      -> pbrok fenced <g> <k> <received xid> <complete>
 *       each live backup waits until the dead primary's link has ended
 *       (everything its kernel still sent is read; "gone": the primary
 *       came back with a new pid, its links have ended), then refuses it; the
 *       complete backup that received the most is chosen: nothing any
 *       other backup holds is above it, and every acknowledged record is in
 *       it (full: every backup acked it; semi: every link had it in the
 *       kernel, which delivers it after a process kill);
 *   pbr follow <g> <best>      to the others: take only best's link;
 *   pbr promote <g> <peers>   -> pbrok serving <g> <best> <xid>
 *       best applies everything it received and continues the stream,
 *       resending to each peer what it lacks.
 * Then the map gets a new epoch in which the group's endpoint is best's
 * client port.  A step unanswered for a second is sent again; a backup
 * that dies leaves it; the chosen one dying starts the failover again.
 * A primary that died and came back while no coordinator watched (a new
 * pid in its hello) is failed over the same way, once its backups are
 * heard from.  The failover is saved with the work in progress
 * (coord_progress.c: "pbr <g> failover", then "pbr <g> promote ..."), so
 * that a coordinator restarted in its middle finishes it.
 *
 * Redundancy is kept by comparing, every check, what the primary reports
 * in its heartbeat (each member: in the ack set, being rebuilt, dropped)
 * with what each member reports (whom it follows, complete or not):
 *   a dead member still in the primary's ack set   -> pbr drop <g> <k> to it;
 *   a member that restarted, follows someone else, diverged, or is
 *   complete but dropped                          -> pbr rejoin <g> <P> to k;
 *   an empty member following the primary          -> pbr rebuild <g> <k>.
 * Each command about a member waits a second before it is repeated.
 *
 * A group whose primary died with no complete backup alive has lost its
 * data (PG_LOST).  Once its primary is alive again, or another member is
 * and the primary stayed away for ADMIT_PRIMARY_WAIT_MS, it serves the
 * group again:
 *   pbr admit <g> <keep> <n>  -> pbrok serving <g> <k> <xid>
 *       the group's last primary keeps its store (keep 1: empty if it
 *       restarted, the newest state if it was only cut off, since nobody
 *       served the group meanwhile), any other member starts empty; then
 *       the map, and backups as above. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_internal.h"
#include "link.h"
#include "printable.h"

#define PBR_MEMBERS_MAX 33
#define STEP_RESEND_MS 1000
#define COMMAND_GRACE_MS 1000
#define ADMIT_PRIMARY_WAIT_MS 5000      /* a lost group waits this long for its primary */

enum pg_phase { PG_SERVING, PG_FENCING, PG_PROMOTING, PG_LOST, PG_ADMITTING };

/* What the coordinator knows of one member. */
struct pmember {
    bool reported;                  /* a heartbeat with pbr words came */
    char kind;                      /* 'p' primary, 'b' backup */
    int leader;                     /* backup: the member it follows */
    uint64_t received;
    bool complete, diverged;
    bool stale;                     /* restarted: its copy is not to be trusted */
    char peer_state;                /* the primary's view: 'f' ack set, 'r' rebuilding,
                                     * 'd' dropped, '?' not reported */
    uint64_t reb_done, reb_total, reb_bytes, reb_rate, reb_at_ms;
    uint64_t cmd_at_ms;             /* last reconciling command about it */
    unsigned diverged_rejoins;      /* rejoins sent since it was last complete,
                                     * because it diverged (backs off) */
};

struct pgroup {
    int g;
    int primary;                    /* member number of the current primary */
    enum pg_phase phase;
    uint64_t participants, waiting; /* member bits of the failover */
    int best;
    uint64_t best_xid;
    uint64_t step_at_ms;
    uint64_t dead_at_ms;            /* monotonic: the primary's death was seen */
    uint64_t last_serve_ms, dead_wall_ms, served_wall_ms;
    char lost_why[160];
    uint64_t loss_wall_ms;          /* unix ms: the group last lost data (0: never) */
    uint64_t admit_number;          /* the admission's number, the same for every try */
    bool failover_due;              /* SERVING, but its primary restarted empty: fail
                                     * over once the backups are heard from */
    bool primary_restarted;         /* ... because its hello had a new pid: the old
                                     * process is gone, its link has ended */
    bool map_held;                  /* served, but the map that says so waits for a
                                     * running slot move (coord_publish_map) */
    bool fence_at_once;             /* this failover's fences need not wait for
                                     * the dead primary's link to end */
    struct pmember mem[PBR_MEMBERS_MAX];
};

struct coord_pbr {
    int m;
    int n;
    struct pgroup *g;
};

static bool alive(const struct member *m)
{
    return m && m->state == MEMBER_ALIVE && m->link;
}

static struct member *member_k(struct coord *co, int g, int k)
{
    int m = co->pbr->m;
    return k == m ? coord_member(co, g, ROLE_PRIMARY, 0) : coord_member(co, g, ROLE_BACKUP, k);
}

static int member_number(const struct coord *co, const struct member *m)
{
    return m->proc->role == ROLE_PRIMARY ? co->pbr->m : m->proc->index;
}

static struct pgroup *group_of(struct coord *co, int g)
{
    return co->pbr && g >= 0 && g < co->pbr->n ? &co->pbr->g[g] : NULL;
}

bool coord_pbr_linked(struct coord *co, const struct member *a, const struct member *b)
{
    struct pgroup *pg = group_of(co, a->proc->group);
    if (!pg || a == b || b->proc->group != a->proc->group || pg->phase != PG_SERVING ||
        pg->failover_due)
        return false;
    return member_number(co, a) == pg->primary || member_number(co, b) == pg->primary;
}

static void send_to(struct coord *co, struct pgroup *pg, int k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_to(struct coord *co, struct pgroup *pg, int k, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    struct member *m = member_k(co, pg->g, k);
    if (m && coord_send(m, text) < 0)
        fprintf(stderr, "coordinator: group %d member %d: '%s' not sent (link down)\n", pg->g,
                k, text);
}

/* ---- the map ---- */

/* The group's endpoint now names member k's client port.  1 when that map
 * waits for a running move (coord_publish_map). */
static int publish_primary(struct coord *co, struct pgroup *pg, int k)
{
    const struct cluster_proc *p = member_k(co, pg->g, k)->proc;
    struct slotmap next;
    if (coord_map_copy(&next, coord_map_base(co)) < 0) {
        fprintf(stderr, "coordinator: out of memory publishing group %d's new primary\n", pg->g);
        return -1;
    }
    int e = -1;
    for (int i = 0; i < next.nendpoints; i++)
        if (next.endpoints[i].group == pg->g && next.endpoints[i].role == ROLE_PRIMARY)
            e = i;
    if (e < 0) {
        fprintf(stderr, "coordinator: group %d's primary is not in the slot map\n", pg->g);
        slotmap_free(&next);
        return -1;
    }
    snprintf(next.endpoints[e].host, sizeof(next.endpoints[e].host), "%s", p->host);
    next.endpoints[e].port = p->port;
    next.epoch = coord_next_epoch(co);
    int rc = coord_publish_map(co, &next);
    if (rc < 0)
        fprintf(stderr, "coordinator: out of memory publishing epoch %llu\n",
                (unsigned long long)coord_next_epoch(co));
    return rc;
}

/* After a restart: the map of a failover held for a move when the last
 * run ended was not saved; published again from the saved primary. */
void coord_pbr_republish(struct coord *co)
{
    if (!co->pbr)
        return;
    for (int g = 0; g < co->pbr->n; g++) {
        struct pgroup *pg = &co->pbr->g[g];
        if (pg->phase != PG_SERVING)
            continue;
        const struct cluster_proc *p = member_k(co, g, pg->primary)->proc;
        const struct slotmap *map = coord_map_base(co);
        int e = slotmap_find(map, p->host, p->port);
        if (e >= 0 && map->endpoints[e].group == g && map->endpoints[e].role == ROLE_PRIMARY)
            continue;
        fprintf(stderr, "coordinator: group %d's primary is member %d (%s:%d), which the saved "
                "map does not name (a map held for a move when the last run ended): publishing "
                "it\n", g, pg->primary, p->host, p->port);
        pg->map_held = publish_primary(co, pg, pg->primary) == 1;
        coord_save_progress(co);
    }
}

/* Failovers whose map waited for a move serve from now: their time to
 * serve again counts to here. */
void coord_pbr_on_held_map_published(struct coord *co)
{
    if (!co->pbr)
        return;
    for (int g = 0; g < co->pbr->n; g++) {
        struct pgroup *pg = &co->pbr->g[g];
        if (!pg->map_held)
            continue;
        pg->map_held = false;
        pg->last_serve_ms = coord_now_ms() - pg->dead_at_ms;
        pg->served_wall_ms = coord_wall_ms();
        fprintf(stderr, "coordinator: group %d is served by member %d at epoch %llu, %llu ms "
                "after the death was seen (its map waited for a slot move)\n", pg->g,
                pg->primary, (unsigned long long)co->map.epoch,
                (unsigned long long)pg->last_serve_ms);
    }
    coord_save_progress(co);
}

/* ---- failover ---- */

static void mark_lost(struct pgroup *pg, const char *why)
{
    pg->phase = PG_LOST;
    snprintf(pg->lost_why, sizeof(pg->lost_why), "%s", why);
    pg->loss_wall_ms = coord_wall_ms();
    fprintf(stderr, "coordinator: DATA LOSS in pbr group %d: %s; the group serves nothing "
            "until one of its members is alive again\n", pg->g, why);
}

/* ---- a group that lost its data serves again ---- */

/* Lost, or being admitted again: it serves nothing yet. */
static bool pg_lost(const struct pgroup *pg)
{
    return pg->phase == PG_LOST || pg->phase == PG_ADMITTING;
}

bool coord_pbr_group_lost(struct coord *co, int g)
{
    const struct pgroup *pg = group_of(co, g);
    return pg == NULL || pg_lost(pg);
}

/* Its primary if alive; else, once ADMIT_PRIMARY_WAIT_MS have passed since
 * the primary's death was seen, its lowest live member; -1 if none (yet).
 * The primary alone may hold the group's newest state (a process only cut
 * off or stopped, not restarted), which any other member would drop when it
 * rejoins; a restarted primary is back within a second under cocytus-node,
 * so the wait costs time only when it stays away. */
static int admission_member(struct coord *co, const struct pgroup *pg)
{
    if (alive(member_k(co, pg->g, pg->primary)))
        return pg->primary;
    /* From our start at the earliest: a death dated by an earlier
     * coordinator's figures leaves the wait whole (the primary redials us). */
    uint64_t since = pg->dead_at_ms > co->started_ms ? pg->dead_at_ms : co->started_ms;
    if (coord_now_ms() - since < ADMIT_PRIMARY_WAIT_MS)
        return -1;
    for (int k = 0; k <= co->pbr->m; k++)
        if (alive(member_k(co, pg->g, k)))
            return k;
    return -1;
}

static void admit_step(struct coord *co, struct pgroup *pg)
{
    int k = admission_member(co, pg);
    if (k < 0)
        return;
    if (pg->phase == PG_LOST || k != pg->best) {
        fprintf(stderr, "coordinator: group %d lost its data and member %d is alive: it serves "
                "the group again (%s)\n", pg->g, k,
                k == pg->primary ? "as the primary, with what it holds"
                                 : "empty: its primary stayed away");
        /* a new try, a new number */
        pg->admit_number = (uint64_t)coord_wall_ms() * 64u + (uint64_t)k;
    }
    pg->phase = PG_ADMITTING;
    pg->best = k;
    pg->step_at_ms = coord_now_ms();
    send_to(co, pg, k, "pbr admit %d %d %" PRIu64, pg->g, k == pg->primary ? 1 : 0,
            pg->admit_number);
}

static void admitted(struct coord *co, struct pgroup *pg)
{
    int k = pg->best;
    pg->primary = k;
    pg->phase = PG_SERVING;
    pg->waiting = 0;
    for (int j = 0; j <= co->pbr->m; j++) {
        pg->mem[j].peer_state = '?';
        /* Every other member rejoins with a fresh receiver (one fenced by
         * the failed failover would refuse the new primary's rebuild). */
        pg->mem[j].stale = j != k;
        pg->mem[j].cmd_at_ms = 0;
    }
    pg->served_wall_ms = coord_wall_ms();   /* before the map's save */
    pg->map_held = publish_primary(co, pg, k) == 1;
    send_to(co, pg, k, "pbr confirm %d", pg->g);
    fprintf(stderr, "coordinator: group %d serves again, member %d its primary at epoch %llu "
            "(lost: %s); its backups are rebuilt next%s\n", pg->g, k,
            (unsigned long long)co->map.epoch, pg->lost_why, coord_held_note(co));
    pg->lost_why[0] = '\0';
}

/* May k become the primary?  Its own word (complete), not restarted, and
 * not left out of the dead primary's ack set (its copy may lack records
 * that were acknowledged without it). */
static bool candidate(const struct pmember *pm)
{
    return pm->complete && !pm->stale && pm->peer_state != 'd' && pm->peer_state != 'r';
}

static void send_fences(struct coord *co, struct pgroup *pg)
{
    pg->step_at_ms = coord_now_ms();
    for (int k = 0; k <= co->pbr->m; k++)
        if (pg->waiting & (1ull << k))
            send_to(co, pg, k, "pbr fence %d%s", pg->g, pg->fence_at_once ? " gone" : "");
    /* Sent again (unanswered for a second) as a plain fence: a backup
     * built before "gone" ignores it, and waits 500 ms at most then. */
    pg->fence_at_once = false;
}

static void start_failover(struct coord *co, struct pgroup *pg)
{
    if (pg->phase == PG_SERVING && !pg->failover_due) {
        pg->dead_at_ms = coord_now_ms();
        pg->dead_wall_ms = coord_wall_ms();
    }
    pg->failover_due = false;
    /* A primary that came back with a new pid: the process that sent on
     * the backups' links is gone, so the fences need not wait for those
     * links to end; the one up now is the empty newcomer's.  In full sync
     * only: there every acknowledged record was already acknowledged by
     * every backup, while in semi sync one may still be in the dead
     * process's kernel, on its way (a lost packet is resent after 200 ms
     * or more), and the fence's wait is what reads it. */
    pg->fence_at_once = pg->primary_restarted && co->c->sync == SYNC_FULL;
    pg->primary_restarted = false;
    pg->participants = 0;
    for (int k = 0; k <= co->pbr->m; k++)
        if (k != pg->primary && alive(member_k(co, pg->g, k)))
            pg->participants |= 1ull << k;
    if (pg->participants == 0) {
        mark_lost(pg, "its primary died and no backup is alive");
        coord_save_progress(co);   /* no promotion or failover under way any more */
        return;
    }
    pg->phase = PG_FENCING;
    pg->waiting = pg->participants;
    pg->best = -1;
    pg->best_xid = 0;
    fprintf(stderr, "coordinator: group %d's primary (member %d) is dead: fencing its stream "
            "on %d backup(s)%s\n", pg->g, pg->primary, __builtin_popcountll(pg->participants),
            pg->fence_at_once ? " at once (it restarted: its links have ended)" : "");
    send_fences(co, pg);
    /* After the fences (they need not wait for the disk): a coordinator
     * started after this one dies fails the group over too, rather than
     * confirm a primary that restarted meanwhile (its new pid may be saved
     * by then) or that the fenced backups refuse. */
    coord_save_progress(co);
}

/* "<best's peers>": every other participant that is complete. */
static void peer_list(struct coord *co, struct pgroup *pg, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k <= co->pbr->m && n + 8 < len; k++) {
        const struct pmember *pm = &pg->mem[k];
        if (k == pg->best || !(pg->participants & (1ull << k)) || !candidate(pm))
            continue;
        n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", k);
    }
    if (n == 0)
        snprintf(buf, len, "-");
}

static void send_promotion(struct coord *co, struct pgroup *pg)
{
    char peers[128];
    pg->step_at_ms = coord_now_ms();
    for (int k = 0; k <= co->pbr->m; k++)
        if (k != pg->best && (pg->participants & (1ull << k)))
            send_to(co, pg, k, "pbr follow %d %d", pg->g, pg->best);
    peer_list(co, pg, peers, sizeof(peers));
    send_to(co, pg, pg->best, "pbr promote %d %s", pg->g, peers);
}

static void fenced_all(struct coord *co, struct pgroup *pg)
{
    if (pg->best < 0) {
        mark_lost(pg, "its primary died and no live backup holds a complete copy");
        coord_save_progress(co);
        return;
    }
    fprintf(stderr, "coordinator: group %d: member %d received the most (xid %" PRIu64
            "): promoting it (fencing took %llu ms since the death)\n", pg->g, pg->best,
            pg->best_xid, (unsigned long long)(coord_now_ms() - pg->dead_at_ms));
    pg->phase = PG_PROMOTING;
    pg->waiting = 1ull << pg->best;
    /* Saved before best is told: a coordinator restarted after best became
     * the primary, but before the map said so, would fence the group again
     * and wait forever for best's answer (a primary takes no fence); it
     * sends the promotion again instead (best answers it again). */
    coord_save_progress(co);
    send_promotion(co, pg);
}

static void promoted(struct coord *co, struct pgroup *pg, uint64_t xid)
{
    int old = pg->primary;
    pg->primary = pg->best;
    pg->phase = PG_SERVING;
    pg->waiting = 0;
    for (int k = 0; k <= co->pbr->m; k++) {
        pg->mem[k].peer_state = '?';
        pg->mem[k].cmd_at_ms = coord_now_ms();   /* let them settle before reconciling */
    }
    /* Before the map's save: a coordinator started after it reports them. */
    pg->last_serve_ms = coord_now_ms() - pg->dead_at_ms;
    pg->served_wall_ms = coord_wall_ms();
    pg->map_held = publish_primary(co, pg, pg->primary) == 1;
    fprintf(stderr, "coordinator: group %d is served by member %d (was member %d) from xid %"
            PRIu64 " at epoch %llu, %llu ms after the death was seen%s\n", pg->g, pg->primary,
            old, xid, (unsigned long long)co->map.epoch, (unsigned long long)pg->last_serve_ms,
            coord_held_note(co));
}

/* A participant is gone: it answers no more. */
static void drop_participant(struct coord *co, struct pgroup *pg, int k)
{
    if (!(pg->participants & (1ull << k)))
        return;
    if (pg->phase == PG_PROMOTING && k == pg->best) {
        fprintf(stderr, "coordinator: group %d: member %d died before serving; failing over "
                "again\n", pg->g, k);
        pg->phase = PG_FENCING;   /* keeps dead_at_ms */
        start_failover(co, pg);
        return;
    }
    pg->participants &= ~(1ull << k);
    pg->waiting &= ~(1ull << k);
    if (pg->phase == PG_FENCING && pg->best == k)
        pg->best = -1;   /* fence answers are kept per member: choose again */
    if (pg->phase == PG_FENCING && pg->waiting == 0) {
        for (int j = 0; j <= co->pbr->m; j++) {
            const struct pmember *pm = &pg->mem[j];
            if ((pg->participants & (1ull << j)) && candidate(pm) &&
                (pg->best < 0 || pm->received > pg->best_xid)) {
                pg->best = j;
                pg->best_xid = pm->received;
            }
        }
        fenced_all(co, pg);
    }
}

/* ---- events ---- */

void coord_pbr_on_dead(struct coord *co, struct member *m)
{
    struct pgroup *pg = group_of(co, m->proc->group);
    if (!pg)
        return;
    int k = member_number(co, m);
    pg->mem[k].reported = false;
    if (pg->phase == PG_FENCING || pg->phase == PG_PROMOTING) {
        drop_participant(co, pg, k);
        return;
    }
    if (pg_lost(pg) && k == pg->primary)
        pg->dead_at_ms = coord_now_ms();   /* back and gone again: wait for it again */
    if (pg->phase == PG_ADMITTING && k == pg->best) {
        pg->phase = PG_LOST;   /* another live member, if any, at the next check */
        return;
    }
    if (pg->phase != PG_SERVING)
        return;
    if (k == pg->primary) {
        start_failover(co, pg);
        return;
    }
    fprintf(stderr, "coordinator: group %d member %d (a backup) is dead: the primary leaves "
            "it out of its ack set\n", pg->g, k);
    send_to(co, pg, pg->primary, "pbr drop %d %d", pg->g, k);
    pg->mem[k].cmd_at_ms = coord_now_ms();
}

void coord_pbr_on_hello(struct coord *co, struct member *m, bool restarted)
{
    struct pgroup *pg = group_of(co, m->proc->group);
    if (!pg)
        return;
    int k = member_number(co, m);
    if (restarted && k != pg->primary) {
        pg->mem[k].stale = true;
        pg->mem[k].cmd_at_ms = 0;
        pg->mem[k].diverged_rejoins = 0;
        /* Died unseen during a failover resumed from the saved progress:
         * it holds nothing now (promoting it would serve an empty store). */
        if (pg->phase == PG_FENCING || pg->phase == PG_PROMOTING)
            drop_participant(co, pg, k);
    }
    if (restarted && k == pg->primary && pg->phase == PG_SERVING && !pg->failover_due) {
        /* Its death went unseen: no coordinator ran, or the new process's
         * link replaced the old one before the old one was seen to drop.
         * It holds nothing, while its backups hold the group: confirming
         * it would serve an empty store (and the backups would be told to
         * empty themselves to follow it).  Fail over as for a death seen,
         * once the backups are heard from, so that every one of them can
         * be chosen. */
        pg->mem[k].stale = true;
        pg->failover_due = true;   /* saved with its new pid (coord.c, the hello) */
        pg->primary_restarted = true;
        pg->dead_at_ms = coord_now_ms();
        pg->dead_wall_ms = coord_wall_ms();
        coord_log_member(m, "is group %d's primary and restarted empty: failing over to a "
                         "backup once they are heard from", pg->g);
        return;
    }
    /* A lost group's primary that restarted holds nothing more than any
     * other member: not one to wait for (coord_pbr_death_loses).  The
     * admission still takes it first, empty (keep 1 of an empty store). */
    if (restarted && k == pg->primary && pg_lost(pg))
        pg->mem[k].stale = true;
    if (k == pg->primary && pg->phase == PG_SERVING && !pg->failover_due)
        send_to(co, pg, k, "pbr confirm %d", pg->g);
}

/* pbrok fenced <g> <k> <xid> <complete> | pbrok serving <g> <k> <xid> |
 * pbrok following <g> <k> */
void coord_pbr_on_answer(struct coord *co, struct member *m, const char *text, size_t len)
{
    char buf[160], verb[16];
    int g, k, complete = 0;
    unsigned long long xid = 0;
    if (len >= sizeof(buf))
        return;
    memcpy(buf, text, len);
    buf[len] = '\0';
    int n = sscanf(buf, "pbrok %15s %d %d %llu %d", verb, &g, &k, &xid, &complete);
    struct pgroup *pg = n >= 3 ? group_of(co, g) : NULL;
    if (!pg || g != m->proc->group || k != member_number(co, m)) {
        char shown[81];
        coord_log_member(m, "sent a malformed pbr answer '%s'; ignored",
                         printable_copy(shown, sizeof(shown), text, len));
        return;
    }
    if (strcmp(verb, "fenced") == 0 && n == 5 && pg->phase == PG_FENCING &&
        (pg->waiting & (1ull << k))) {
        pg->waiting &= ~(1ull << k);
        pg->mem[k].received = xid;
        pg->mem[k].complete = complete != 0;
        if (candidate(&pg->mem[k]) && (pg->best < 0 || xid > pg->best_xid)) {
            pg->best = k;
            pg->best_xid = xid;
        }
        if (pg->waiting == 0)
            fenced_all(co, pg);
    } else if (strcmp(verb, "serving") == 0 && n >= 4 && pg->phase == PG_PROMOTING &&
               k == pg->best) {
        promoted(co, pg, xid);
    } else if (strcmp(verb, "serving") == 0 && n >= 4 && pg->phase == PG_ADMITTING &&
               k == pg->best) {
        admitted(co, pg);
    }
}

static void take_primary_words(struct coord *co, struct pgroup *pg, const char *p)
{
    uint64_t now = coord_now_ms();
    int k, used;
    char st;
    for (;;) {
        while (*p == ' ')
            p++;
        if (sscanf(p, "%d=%c%n", &k, &st, &used) != 2 || k < 0 || k > co->pbr->m)
            return;
        p += used;
        struct pmember *pm = &pg->mem[k];
        pm->peer_state = st;
        unsigned long long d, t, b;
        if (st == 'r' && sscanf(p, ":%llu:%llu:%llu%n", &d, &t, &b, &used) == 3) {
            p += used;
            if (pm->reb_at_ms && now > pm->reb_at_ms && b >= pm->reb_bytes)
                pm->reb_rate = (b - pm->reb_bytes) * 1000u / (now - pm->reb_at_ms);
            pm->reb_done = d;
            pm->reb_total = t;
            pm->reb_bytes = b;
            pm->reb_at_ms = now;
        } else if (st != 'r') {
            pm->reb_at_ms = 0;
            pm->reb_rate = 0;
        }
        while (*p && *p != ' ')
            p++;
    }
}

/* Heartbeat words: "pbr p <xid> <k>=<f|d|r:done:total:bytes>..." from a
 * primary, "pbr b <leader> <received> <complete> <diverged>" from a backup. */
void coord_pbr_on_progress(struct coord *co, struct member *m, const char *text, size_t len)
{
    struct pgroup *pg = group_of(co, m->proc->group);
    char buf[320];
    if (!pg || len >= sizeof(buf) || len < 6 || memcmp(text, "pbr ", 4) != 0)
        return;
    memcpy(buf, text, len);
    buf[len] = '\0';
    int k = member_number(co, m);
    struct pmember *pm = &pg->mem[k];
    unsigned long long xid;
    int leader, complete, diverged, used;
    if (sscanf(buf, "pbr p %llu%n", &xid, &used) == 1) {
        pm->reported = true;
        pm->kind = 'p';
        pm->received = xid;
        if (k == pg->primary)
            take_primary_words(co, pg, buf + used);
    } else if (sscanf(buf, "pbr b %d %llu %d %d", &leader, &xid, &complete, &diverged) == 4) {
        pm->reported = true;
        pm->kind = 'b';
        pm->leader = leader;
        pm->received = xid;
        pm->complete = complete != 0;
        pm->diverged = diverged != 0;
        if (pm->stale && !pm->complete && leader == pg->primary && !pm->diverged)
            pm->stale = false;   /* it took the rejoin: it waits for its rebuild */
        if (pm->complete && !pm->diverged)
            pm->diverged_rejoins = 0;
    }
}

/* One member against the primary's view (SERVING, primary alive). */
static void reconcile_member(struct coord *co, struct pgroup *pg, int k, uint64_t now)
{
    struct pmember *pm = &pg->mem[k];
    int P = pg->primary;
    if (now - pm->cmd_at_ms < COMMAND_GRACE_MS)
        return;
    if (!alive(member_k(co, pg->g, k))) {
        if (pm->peer_state == 'f' || pm->peer_state == 'r') {
            send_to(co, pg, P, "pbr drop %d %d", pg->g, k);
            pm->cmd_at_ms = now;
        }
        return;
    }
    if (!pm->reported)
        return;
    if (pm->kind == 'p' || pm->leader != P || pm->diverged || pm->stale) {
        if (pm->diverged && !pm->stale && pm->kind != 'p' && pm->leader == P) {
            /* A rejoin rebuilds it from a full copy: one that diverges
             * again and again (a record it cannot apply) is rebuilt less
             * and less often, not every second. */
            unsigned n = pm->diverged_rejoins;
            uint64_t wait = n <= 2 ? 0 : (uint64_t)COMMAND_GRACE_MS << (n - 2 < 6 ? n - 2 : 6);
            if (now - pm->cmd_at_ms < wait)
                return;
            pm->diverged_rejoins++;
        }
        /* Still in the primary's ack set (it restarted while no coordinator
         * watched, so nobody dropped it): the primary keeps dialing it as a
         * peer that holds the stream, it refuses that link as diverged, and
         * writes wait for its acks.  Out of the set first; rebuilt next. */
        if (pm->peer_state == 'f' || pm->peer_state == 'r')
            send_to(co, pg, P, "pbr drop %d %d", pg->g, k);
        coord_log_member(member_k(co, pg->g, k), "is %s; it rejoins group %d as an empty "
                         "backup of member %d", pm->kind == 'p' ? "a primary without a place" :
                         pm->stale ? "restarted" : pm->diverged ? "diverged" :
                         "following another member", pg->g, P);
        send_to(co, pg, k, "pbr rejoin %d %d", pg->g, P);
    } else if (!pm->complete && pm->peer_state == 'd') {
        send_to(co, pg, P, "pbr rebuild %d %d", pg->g, k);
    } else if (!pm->complete && pm->peer_state == 'f') {
        send_to(co, pg, P, "pbr drop %d %d", pg->g, k);
    } else if (pm->complete && pm->peer_state == 'd') {
        send_to(co, pg, k, "pbr rejoin %d %d", pg->g, P);
    } else {
        return;
    }
    pm->cmd_at_ms = now;
}

void coord_pbr_forgive(struct coord *co, uint64_t late, uint64_t now)
{
    if (!co->pbr)
        return;
    /* a lost group's wait for its primary did not run while we did not */
    for (int g = 0; g < co->pbr->n; g++)
        if (pg_lost(&co->pbr->g[g]))
            co->pbr->g[g].dead_at_ms = coord_forgive_ms(co->pbr->g[g].dead_at_ms, late, now);
}

/* Every member but the primary has been heard from (alive or declared dead),
 * or the coordinator's startup grace is over: the dead are known by then. */
static bool backups_heard(struct coord *co, const struct pgroup *pg)
{
    if (coord_now_ms() - co->started_ms > co->startup_grace_ms)
        return true;
    for (int k = 0; k <= co->pbr->m; k++) {
        const struct member *mk = member_k(co, pg->g, k);
        if (k != pg->primary && mk && mk->state == MEMBER_UNKNOWN)
            return false;
    }
    return true;
}

void coord_pbr_check(struct coord *co)
{
    if (!co->pbr)
        return;
    uint64_t now = coord_now_ms();
    for (int g = 0; g < co->pbr->n; g++) {
        struct pgroup *pg = &co->pbr->g[g];
        if (pg->failover_due) {
            if (pg->phase == PG_SERVING && !backups_heard(co, pg))
                continue;
            if (pg->phase == PG_SERVING)
                start_failover(co, pg);
            pg->failover_due = false;
        }
        if (pg->phase == PG_FENCING && now - pg->step_at_ms > STEP_RESEND_MS)
            send_fences(co, pg);
        else if (pg->phase == PG_PROMOTING && now - pg->step_at_ms > STEP_RESEND_MS)
            send_promotion(co, pg);
        else if (pg->phase == PG_LOST ||
                 (pg->phase == PG_ADMITTING && now - pg->step_at_ms > STEP_RESEND_MS))
            admit_step(co, pg);
        if (pg->phase != PG_SERVING || !alive(member_k(co, g, pg->primary)) ||
            !pg->mem[pg->primary].reported)
            continue;
        for (int k = 0; k <= co->pbr->m; k++)
            if (k != pg->primary)
                reconcile_member(co, pg, k, now);
    }
}

/* ---- status ---- */

static bool counts(struct coord *co, const struct pgroup *pg, int k)
{
    const struct pmember *pm = &pg->mem[k];
    return k != pg->primary && alive(member_k(co, pg->g, k)) && pm->peer_state == 'f' &&
           pm->reported && pm->kind == 'b' && pm->complete && !pm->stale &&
           pm->leader == pg->primary;
}

/* Heard from lately: one that is silent itself (still alive until the
 * check reaches it) is no one to count on.  Lately is well inside the
 * silence that declares a death, by two heartbeat periods: two members
 * paused together sent their last heartbeats up to one period apart, and
 * a check that finds the primary silent past dead_after_ms could find a
 * paused backup, silent a period less, still under it, call the primary's
 * death harmless and fail over to a stopped backup (lost_group.sh 3c, once
 * in CI).  A live backup heartbeats every period, so it is always heard
 * within the margin.  Never under half the death's silence, for tests
 * that shorten it. */
static uint64_t lately_ms(uint64_t dead_after_ms)
{
    uint64_t margin = 2 * COORD_HEARTBEAT_MS;
    return dead_after_ms > 2 * margin ? dead_after_ms - margin : dead_after_ms / 2;
}

static bool heard_lately(struct coord *co, const struct member *m)
{
    return alive(m) && coord_now_ms() - m->last_heard_ms <= lately_ms(co->dead_after_ms);
}

/* Would declaring m dead leave its group nobody to serve it from, the group
 * LOST and what m holds thrown away (coord.c, silence_would_lose)?
 *   serving: m is the primary (not one that restarted empty) and no backup
 *     heard from lately holds every acknowledged write (counts);
 *   failing over: m takes part and no other participant heard from lately
 *     may become the primary;
 *   lost, or being admitted again: m is the group's last primary, not
 *     restarted, the one member that may hold its newest state (without
 *     it, another is admitted empty after ADMIT_PRIMARY_WAIT_MS).
 * So when a primary and its backups fall silent together, the backups are
 * declared dead and the primary waited for, in whatever order the check
 * meets them. */
bool coord_pbr_death_loses(struct coord *co, const struct member *m)
{
    struct pgroup *pg = group_of(co, m->proc->group);
    if (pg == NULL)
        return false;
    int k = member_number(co, m);
    switch (pg->phase) {
    case PG_SERVING:
        if (k != pg->primary || pg->failover_due || pg->mem[k].stale)
            return false;
        for (int j = 0; j <= co->pbr->m; j++)
            if (counts(co, pg, j) && heard_lately(co, member_k(co, pg->g, j)))
                return false;
        return true;
    case PG_FENCING:
    case PG_PROMOTING:
        if (!(pg->participants & (1ull << k)))
            return false;
        for (int j = 0; j <= co->pbr->m; j++)
            if (j != k && (pg->participants & (1ull << j)) &&
                heard_lately(co, member_k(co, pg->g, j)) && candidate(&pg->mem[j]))
                return false;
        return true;
    case PG_LOST:
    case PG_ADMITTING:
        return k == pg->primary && !pg->mem[k].stale;
    }
    return false;
}

static const char *group_state(struct coord *co, const struct pgroup *pg, int *redundancy)
{
    bool rebuilding = false;
    *redundancy = 0;
    for (int k = 0; k <= co->pbr->m; k++) {
        *redundancy += counts(co, pg, k);
        if (k != pg->primary && pg->mem[k].peer_state == 'r')
            rebuilding = true;
    }
    if (pg_lost(pg)) {
        *redundancy = 0;
        return "lost";
    }
    if (pg->phase != PG_SERVING || pg->failover_due)
        return "taking-over";
    if (rebuilding)
        return "rebuilding";
    if (coord_group_unheard(co, pg->g))
        return "starting";
    return *redundancy < co->pbr->m ? "degraded" : "healthy";
}

static char member_letter(struct coord *co, const struct pgroup *pg, int k)
{
    if (k == pg->primary)
        return 'P';
    if (!alive(member_k(co, pg->g, k)))
        return 'x';
    if (counts(co, pg, k))
        return 'f';
    return pg->mem[k].peer_state == 'r' ? 'r' : 'j';
}

void coord_pbr_admin(struct coord *co, eng_write_fn write, void *wctx)
{
    char line[768];
    for (int g = 0; co->pbr && g < co->pbr->n; g++) {
        const struct pgroup *pg = &co->pbr->g[g];
        int red;
        const char *st = group_state(co, pg, &red);
        int n = snprintf(line, sizeof(line), "group %d %s redundancy %d/%d view pbr primary m%d "
                         "members ", g, st, red, co->pbr->m, pg->primary);
        for (int k = 0; k <= co->pbr->m && n > 0 && (size_t)n < sizeof(line); k++)
            line[n++] = member_letter(co, pg, k);
        n += snprintf(line + n, sizeof(line) - (size_t)n, " last_serve_ms %llu dead_at_ms %llu "
                      "served_at_ms %llu", (unsigned long long)pg->last_serve_ms,
                      (unsigned long long)pg->dead_wall_ms,
                      (unsigned long long)pg->served_wall_ms);
        for (int k = 0; k <= co->pbr->m && n > 0 && (size_t)n < sizeof(line); k++) {
            const struct pmember *pm = &pg->mem[k];
            if (k == pg->primary || pm->peer_state != 'r')
                continue;
            n += snprintf(line + n, sizeof(line) - (size_t)n,
                          " reb b%d items %llu/%llu bytes %llu rate %llu", k,
                          (unsigned long long)pm->reb_done, (unsigned long long)pm->reb_total,
                          (unsigned long long)pm->reb_bytes, (unsigned long long)pm->reb_rate);
        }
        if (pg->loss_wall_ms && n > 0 && (size_t)n < sizeof(line))
            n += snprintf(line + n, sizeof(line) - (size_t)n, " keys_lost_at_ms %llu",
                          (unsigned long long)pg->loss_wall_ms);
        if (pg_lost(pg) && n > 0 && (size_t)n < sizeof(line))
            n += snprintf(line + n, sizeof(line) - (size_t)n, " lost %s", pg->lost_why);
        if (n > 0) {
            size_t l = (size_t)n < sizeof(line) - 3 ? (size_t)n : sizeof(line) - 3;
            line[l++] = '\r';
            line[l++] = '\n';
            write(wctx, line, l);
        }
    }
    write(wctx, "END\r\n", 5);
}

bool coord_pbr_joining(struct coord *co, const struct member *m)
{
    struct pgroup *pg = group_of(co, m->proc->group);
    if (!pg || m->state != MEMBER_ALIVE)
        return false;
    int k = member_number(co, m);
    return k != pg->primary && pg->mem[k].reported && !counts(co, pg, k);
}

/* ---- work in progress ---- */

bool coord_pbr_progress_line(struct coord *co, int g, char *line, size_t len)
{
    const struct pgroup *pg = group_of(co, g);
    if (!pg)
        return false;
    if (pg->phase == PG_FENCING || (pg->phase == PG_SERVING && pg->failover_due)) {
        int n = snprintf(line, len, "pbr %d failover", g);
        return n > 0 && (size_t)n < len;
    }
    if (pg->phase == PG_SERVING && pg->map_held) {
        /* The map that names the new primary is held for a slot move and
         * not saved: the primary is, for coord_pbr_republish. */
        int n = snprintf(line, len, "pbr %d primary %d", g, pg->primary);
        return n > 0 && (size_t)n < len;
    }
    if (pg->phase != PG_PROMOTING)
        return false;
    uint64_t peers = 0;   /* the participants that may be best's peers */
    for (int k = 0; k <= co->pbr->m; k++)
        if ((pg->participants & (1ull << k)) && candidate(&pg->mem[k]))
            peers |= 1ull << k;
    int n = snprintf(line, len, "pbr %d promote %d %" PRIu64 " %" PRIu64, g, pg->best,
                     pg->participants, peers);
    return n > 0 && (size_t)n < len;
}

bool coord_pbr_figures_line(struct coord *co, int g, char *line, size_t len)
{
    const struct pgroup *pg = group_of(co, g);
    if (!pg || (!pg->dead_wall_ms && !pg->served_wall_ms && !pg->loss_wall_ms))
        return false;
    int n = snprintf(line, len, "pbr %d figures %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, g,
                     pg->last_serve_ms, pg->dead_wall_ms, pg->served_wall_ms, pg->loss_wall_ms);
    return n > 0 && (size_t)n < len;
}

/* A failover resumed: from the death an earlier coordinator saw, if its
 * figures say one is not served yet; else from now. */
static void resume_dead_at(struct pgroup *pg)
{
    if (pg->dead_wall_ms && pg->dead_wall_ms > pg->served_wall_ms) {
        pg->dead_at_ms = coord_mono_us_of_wall(pg->dead_wall_ms) / 1000;
        return;
    }
    pg->dead_at_ms = coord_now_ms();
    pg->dead_wall_ms = coord_wall_ms();
}

void coord_pbr_resume(struct coord *co, const char *line)
{
    int g, best, used = 0;
    unsigned long long participants, peers, serve, dead, served, lost_at;
    if (sscanf(line, "pbr %d figures %llu %llu %llu %llu", &g, &serve, &dead, &served,
               &lost_at) == 5) {
        struct pgroup *pg = group_of(co, g);
        if (pg) {
            pg->last_serve_ms = serve;
            pg->dead_wall_ms = dead;
            pg->served_wall_ms = served;
            pg->loss_wall_ms = lost_at;
        }
        return;
    }
    if (sscanf(line, "pbr %d failover%n", &g, &used) == 1 && used > 0 && line[used] == '\0') {
        struct pgroup *pg = group_of(co, g);
        if (!pg)
            return;
        /* Fenced, or about to be: the map's primary is not confirmed, the
         * failover starts again once the backups are heard from. */
        pg->failover_due = true;
        resume_dead_at(pg);
        fprintf(stderr, "coordinator: resuming group %d's failover: it starts again once the "
                "backups are heard from\n", g);
        return;
    }
    if (sscanf(line, "pbr %d primary %d%n", &g, &best, &used) == 2 && used > 0 &&
        line[used] == '\0') {
        struct pgroup *pg = group_of(co, g);
        if (pg && best >= 0 && best <= co->pbr->m && best != pg->primary) {
            fprintf(stderr, "coordinator: group %d's primary is member %d (an earlier run's "
                    "failover, whose map was held for a slot move)\n", g, best);
            pg->primary = best;
            pg->map_held = true;    /* saved again until its map is out */
        }
        return;
    }
    if (sscanf(line, "pbr %d promote %d %llu %llu", &g, &best, &participants, &peers) != 4)
        return;
    struct pgroup *pg = group_of(co, g);
    if (!pg || best < 0 || best > co->pbr->m || best == pg->primary ||
        !(participants & (1ull << best)))
        return;
    pg->phase = PG_PROMOTING;
    pg->best = best;
    pg->participants = participants;
    pg->waiting = 1ull << best;
    pg->step_at_ms = 0;   /* sent again at the first check */
    resume_dead_at(pg);
    for (int k = 0; k <= co->pbr->m; k++)
        pg->mem[k].complete = (peers & (1ull << k)) != 0 || k == best;
    fprintf(stderr, "coordinator: resuming group %d's failover: promoting member %d again "
            "(an earlier coordinator chose it)\n", g, best);
}

/* ---- setup ---- */

/* After a restart: the group's endpoint in the map names its primary. */
static void primary_from_map(struct coord *co, struct pgroup *pg)
{
    for (int e = 0; e < co->map.nendpoints; e++) {
        const struct slotmap_endpoint *ep = &co->map.endpoints[e];
        if (ep->group != pg->g || ep->role != ROLE_PRIMARY)
            continue;
        for (int k = 0; k <= co->pbr->m; k++) {
            const struct member *mk = member_k(co, pg->g, k);
            if (mk && mk->proc->port == ep->port && strcmp(mk->proc->host, ep->host) == 0)
                pg->primary = k;
        }
    }
}

int coord_pbr_init(struct coord *co)
{
    if (co->c->scheme != SCHEME_PBR)
        return 0;
    if (co->c->n > PBR_MEMBERS_MAX) {
        fprintf(stderr, "coordinator: pbr %d is beyond what failover handles\n", co->c->n - 1);
        return -1;
    }
    co->pbr = calloc(1, sizeof(*co->pbr));
    if (!co->pbr)
        return -1;
    co->pbr->m = co->c->n - 1;
    co->pbr->n = co->c->ngroups;
    co->pbr->g = calloc((size_t)co->c->ngroups + 1, sizeof(*co->pbr->g));
    if (!co->pbr->g)
        return -1;
    for (int g = 0; g < co->pbr->n; g++) {
        struct pgroup *pg = &co->pbr->g[g];
        pg->g = g;
        pg->primary = co->pbr->m;
        pg->best = -1;
        primary_from_map(co, pg);
        if (pg->primary != co->pbr->m)
            fprintf(stderr, "coordinator: group %d's primary is member %d (the slot map says "
                    "so)\n", g, pg->primary);
    }
    return 0;
}

void coord_pbr_free(struct coord *co)
{
    if (!co->pbr)
        return;
    free(co->pbr->g);
    free(co->pbr);
    co->pbr = NULL;
}
