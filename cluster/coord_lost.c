/* coord_lost.c - a death the coordinator learns from the dead process's
 * peers, not from its own control link.
 *
 * A coordinator that starts (the single coordinator restarted by its node,
 * or a ZooKeeper standby elected after the leader's host died) does not
 * know which processes died while nobody led: a process it never hears
 * from is declared dead only when the startup grace ends
 * (COORD_STARTUP_GRACE_MS), and until then its group cannot write, or
 * serve the dead data process's keys.
 *
 * The dead process's peers know sooner: a parity process saw the link from
 * a data process drop, a data process the link to a parity process, a
 * backup the one from its primary, a primary the one to a backup.  Each
 * process says so after every heartbeat ("lost <role> <index> <ms>",
 * engine_ops.lost_peers), while the link is down, or up but silent (no
 * keepalive for a second), with how long nothing has come from the peer
 * (a peer answering our dials is silent only since its last answer).  A
 * member not heard from since this coordinator started is dead as soon as
 * every peer linked with it that is not declared dead is alive and
 * reports (at least one), with its last heartbeat, its link down for
 * co->dead_after_ms (COORD_DEAD_AFTER_MS unless a test set
 * COCYTUS_DEAD_AFTER_MS): the same silence the heartbeat rule allows,
 * heard from the other end.  Not before the coordinator has listened for
 * LOST_LISTEN_MS, time for any live process to redial it, and not while a
 * linked peer is still unheard of (it may hold the link), nor for a PBR
 * group failing over (who leads is what is being decided).  A process
 * that was only slow to redial the new coordinator still has its links,
 * so nobody reports it; one that is alive but has lost every link cannot
 * commit a write anyway, and is taken over and rebuilt as after any
 * death. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "coord_internal.h"

#define LOST_FRESH_MS (3 * COORD_HEARTBEAT_MS)   /* a report older than this is stale */
/* How long a coordinator listens before it takes peers' word: a live
 * process redials it within a second (repl/link.c's longest back-off) and
 * says hello at once. */
#define LOST_LISTEN_MS 1250
/* How long a peer's "up, only silent" stands after it stopped saying so:
 * time for a process that resumed to redial us and say hello
 * (coord_lost_paused). */
#define LOST_UP_KEEP_MS 5000

/* The member of msg's group, role and index, as reporter `by` sees it. */
static struct member *lost_target(struct coord *co, const struct member *by,
                                  const struct ctl_msg *msg)
{
    return coord_member(co, by->proc->group, msg->role, msg->index);
}

void coord_lost_heard(struct coord *co, struct member *by, const struct ctl_msg *msg)
{
    struct member *x = lost_target(co, by, msg);
    if (!x || x == by)
        return;
    uint64_t now = coord_now_ms();
    int slot = -1;
    for (int i = 0; i < x->nlost; i++)
        if (x->lost[i].by == by)
            slot = i;
    if (slot < 0) {
        if (x->nlost >= COORD_LOST_REPORTS_MAX)
            return;
        slot = x->nlost++;
        x->lost[slot].by = by;
    }
    x->lost[slot].heard_ms = now;
    x->lost[slot].hb = by->heartbeats;
    x->lost[slot].down_ms = msg->down_ms;
    x->lost[slot].up = msg->link_up;
}

/* Are a and b linked by replication (one sends records to the other)? */
static bool linked(struct coord *co, const struct member *a, const struct member *b)
{
    if (a == b || a->proc->group != b->proc->group)
        return false;
    switch (co->c->scheme) {
    case SCHEME_RS:
        return (a->proc->role == ROLE_DATA && b->proc->role == ROLE_PARITY) ||
               (a->proc->role == ROLE_PARITY && b->proc->role == ROLE_DATA);
    case SCHEME_PBR:
        return coord_pbr_linked(co, a, b);
    default:
        return false;
    }
}

/* by's report about x, if it came with by's last heartbeat, recently, and
 * down for dead_after ms (the silence that declares a member dead); else
 * NULL. */
static const struct lost_report *report_of(const struct member *x, const struct member *by,
                                           uint64_t now, uint64_t dead_after)
{
    for (int i = 0; i < x->nlost; i++) {
        const struct lost_report *r = &x->lost[i];
        if (r->by != by)
            continue;
        if (r->hb != by->heartbeats || now - r->heard_ms > LOST_FRESH_MS ||
            r->down_ms < dead_after)
            return NULL;
        return r;
    }
    return NULL;
}

bool coord_lost_evidence(struct coord *co, const struct member *x, char *why, size_t len)
{
    uint64_t now = coord_now_ms();
    if (x->state != MEMBER_UNKNOWN || now - co->started_ms < LOST_LISTEN_MS)
        return false;
    int reporters = 0;
    uint64_t down = UINT64_MAX;
    for (int i = 0; i < co->nmembers; i++) {
        const struct member *p = &co->members[i];
        if (p->state == MEMBER_DEAD || !linked(co, x, p))
            continue;
        /* A peer not heard from yet may hold the link: wait for it. */
        const struct lost_report *r =
            p->state == MEMBER_ALIVE ? report_of(x, p, now, co->dead_after_ms) : NULL;
        if (!r)
            return false;
        reporters++;
        if (r->down_ms < down)
            down = r->down_ms;
    }
    if (reporters == 0)
        return false;
    snprintf(why, len, "not heard from since the coordinator started, and its %d live peer(s) "
             "report their links to it down for %" PRIu64 " ms or more", reporters, down);
    return true;
}

/* Is x, not heard from since this coordinator started, perhaps paused
 * rather than dead?  Its live peers say, with their last heartbeats, that
 * their links to it are up and only silent, and none that its link is
 * down: a stopped or frozen process's kernel keeps its connections, a
 * dead one's closes them (and a host that is gone stops acknowledging:
 * TCP_USER_TIMEOUT drops them after 10 s).  coord.c then waits for it as
 * for a silent member it heard from, where its death would lose data.
 *
 * A peer stops repeating "up" when its link to x carries something again:
 * x resumed, and its hello to us is a redial away (about 20 ms, but a
 * second or more on a loaded machine).  Spending the word at once declared
 * x dead in that gap, if the startup grace had ended: one run in a few of
 * pause_beyond.sh under load lost the group's writes that way.  So "up"
 * counts until LOST_UP_KEEP_MS after it was said last, unless a peer says
 * "down" since; "down" counts only while it is current. */
bool coord_lost_paused(const struct coord *co, const struct member *x)
{
    (void)co;
    if (x->state != MEMBER_UNKNOWN)
        return false;
    uint64_t now = coord_now_ms();
    bool up = false;
    for (int i = 0; i < x->nlost; i++) {
        const struct lost_report *r = &x->lost[i];
        if (r->by->state != MEMBER_ALIVE)
            continue;
        bool current = r->hb == r->by->heartbeats && now - r->heard_ms <= LOST_FRESH_MS;
        if (!r->up) {
            if (current)
                return false;
            continue;
        }
        if (current || now - r->heard_ms <= LOST_UP_KEEP_MS)
            up = true;
    }
    return up;
}

void coord_lost_forget(struct member *x)
{
    x->nlost = 0;
}
