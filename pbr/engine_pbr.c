/* engine_pbr.c - one process of a primary-backup group, whatever role it
 * plays at the moment (pbr_role.h).
 *
 * The server creates this engine for --role primary and --role backup.  It
 * owns the item store and its clock and passes every call to an inner
 * engine, a primary or a backup.  The coordinator's words switch roles:
 *   pbr promote <g> <peers>   a backup becomes the primary: it applies every
 *                             record it received, keeps those records for
 *                             peers that hold fewer, and continues the xid
 *                             stream to the listed members (comma list, or
 *                             "-" for none); answer "pbrok serving <g> <member>
 *                             <xid>"
 *   pbr rejoin <g> <leader>   the place of this process was taken, or its
 *                             copy is stale: empty the store and wait, as a
 *                             backup following leader, to be rebuilt
 *   pbr admit <g> <keep> <n>  the group lost its data (its primary died with
 *                             no complete backup left): serve it again as
 *                             its primary, from the store if keep is 1 and
 *                             this process is a primary (the group's last:
 *                             restarted, empty; cut off, the newest state),
 *                             else empty; answer as promote
 * and the rest goes to the inner engine (pbr_primary_control,
 * pbr_backup_control).  The heartbeat carries the inner engine's state. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cluster.h"
#include "engine.h"
#include "items.h"
#include "link.h"
#include "pbr_role.h"
#include "pbr_store.h"
#include "printable.h"
#include "read_waiters.h"
#include "reclog.h"

#define CONTROL_WORDS_MAX 8
#define CONTROL_TEXT_MAX 256

struct pbr_proc {
    struct engine engine;           /* what the server holds */
    struct pbr_shared sh;
    struct engine *inner;
    bool is_primary;
    uint64_t promoted_xid;          /* the last xid we took over at: a repeated promote's answer */
    uint64_t admitted;              /* the number of the last "pbr admit" taken */
    struct read_waiters waiters;    /* reads waiting for the primary's store, or a lease */
    bool lease_waiting;             /* a read in waiters waits for one */
    uint64_t lease_waits;           /* reads that waited for one */
};

static struct pbr_proc *pp_of(struct engine *e)
{
    return e->priv;
}

__attribute__((format(printf, 2, 3)))
static void pp_log(const struct pbr_proc *pp, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cocytus-server pbr g%d member %d: %s\n", pp->sh.cfg.group, pp->sh.member,
            msg);
}

/* ---- members ---- */

const struct cluster_proc *pbr_member_proc(const struct cluster *c, int g, int m, int k)
{
    if (k == m)
        return cluster_find(c, g, ROLE_PRIMARY, 0);
    if (k < 0 || k > m)
        return NULL;
    return cluster_find(c, g, ROLE_BACKUP, k);
}

void pbr_member_identity(int m, int k, uint8_t *role, uint32_t *index)
{
    *role = k == m ? LINK_ROLE_PRIMARY : LINK_ROLE_BACKUP;
    *index = k == m ? 0 : (uint32_t)k;
}

int pbr_member_of_identity(int m, uint8_t role, uint32_t index)
{
    if (role == LINK_ROLE_PRIMARY && index == 0)
        return m;
    if (role == LINK_ROLE_BACKUP && index < (uint32_t)m)
        return (int)index;
    return -1;
}

/* ---- delegation ---- */

static eng_status pp_get(struct engine *e, const char *key, size_t nkey, struct eng_value *out,
                         struct eng_result *res)
{
    struct engine *in = pp_of(e)->inner;
    return in->ops->get(in, key, nkey, out, res);
}

/* cachedump, metadump: the store, on a primary (or a backup promoted by
 * hand); a backup serves no keys: refused. */
static bool pp_visit_recent(struct engine *e, bool (*fn)(void *ctx, const struct eng_value *v),
                            void *ctx)
{
    struct pbr_proc *pp = pp_of(e);
    if (!pp->is_primary && !pbr_backup_promoted(pp->inner))
        return false;
    item_store_visit_recent(&pp->sh.store, pp->sh.cfg.cas_enabled, fn, ctx);
    return true;
}

static enum eng_walk pp_walk(struct engine *e, struct eng_cursor *cursor, size_t budget,
                             void (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct pbr_proc *pp = pp_of(e);
    if (!pp->is_primary && !pbr_backup_promoted(pp->inner))
        return ENG_WALK_REFUSED;
    return item_store_walk(&pp->sh.store, pp->sh.cfg.cas_enabled, cursor, budget, fn, ctx);
}

/* The meta commands' read: the inner engine's, when it has one (a backup
 * serves no keys and has none). */
static eng_status pp_get_ex(struct engine *e, const char *key, size_t nkey, unsigned opts,
                            struct eng_value *out, struct eng_result *res)
{
    struct engine *in = pp_of(e)->inner;
    if (in->ops->get_ex)
        return in->ops->get_ex(in, key, nkey, opts, out, res);
    return in->ops->get(in, key, nkey, out, res);
}

/* A primary whose store may not be the group's (it waits for the
 * coordinator's confirmation, or found that it restarted without its
 * state) would answer misses for keys its backups hold: a restarted
 * primary its coordinator did not see die, until the group fails over.
 * Its reads wait instead, until it is confirmed or changes role (the
 * connection parses them again: served, or MOVED by the new map). */
static bool pp_read_wait(struct engine *e, const char *key, size_t nkey, eng_done_fn done,
                         void *cookie)
{
    struct pbr_proc *pp = pp_of(e);
    (void)key;
    (void)nkey;
    /* Without a coordinator nothing would ever end the wait (nobody fails
     * the group over): served from the store as it is. */
    if (!pp->sh.has_coordinator || !pp->is_primary)
        return false;
    if (pbr_primary_reads_ready(pp->inner)) {
        /* Nor does anybody promote a backup while we hold a lease from
         * each: a primary cut off or hung past it waits instead of
         * answering from a store that may be old. */
        if (pbr_primary_lease_held(pp->inner) || !read_waiters_add(&pp->waiters, done, cookie))
            return false;
        pp->lease_waiting = true;   /* until a backup's PONG (pp_lease) */
        pp->lease_waits++;
        return true;
    }
    /* Out of memory (beyond the reserve), it cannot wait: served from the
     * store as it is. */
    return read_waiters_add(&pp->waiters, done, cookie);
}

/* The primary's lease may be held again (a backup's PONG, a backup
 * dropped): see dp_lease in cocytus/engine_data.c. */
static void pp_lease(void *arg)
{
    struct pbr_proc *pp = arg;
    if (pp->lease_waiting && pp->is_primary && pbr_primary_reads_ready(pp->inner) &&
        pbr_primary_lease_held(pp->inner)) {
        pp->lease_waiting = false;
        read_waiters_wake(&pp->waiters);
    }
}

/* Waiting reads are parsed again once they need not wait. */
static void wake_readers(struct pbr_proc *pp)
{
    if (pp->waiters.n == 0 || (pp->is_primary && !pbr_primary_reads_ready(pp->inner)))
        return;
    read_waiters_wake(&pp->waiters);
}

/* Handles are items of the shared store, whichever engine handed them out. */
static void pp_release(struct engine *e, void *handle)
{
    item_release(&pp_of(e)->sh.store, handle);
}

static eng_status pp_mutate(struct engine *e, const struct eng_mutation *m,
                            struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct engine *in = pp_of(e)->inner;
    return in->ops->mutate(in, m, res, done, cookie);
}

static bool pp_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct pbr_proc *pp = pp_of(e);
    bool known = pp->inner->ops->stats(pp->inner, group, emit, ctx);
    if (known && group[0] == '\0')
        emit(ctx, "lease_waits", "%" PRIu64, pp->lease_waits);
    return known;
}

static void pp_stats_reset(struct engine *e)
{
    struct pbr_proc *pp = pp_of(e);
    pp->inner->ops->stats_reset(pp->inner);
    pp->lease_waits = 0;
}

static void pp_tick(struct engine *e, time_t now)
{
    struct engine *in = pp_of(e)->inner;
    in->ops->tick(in, now);
    wake_readers(pp_of(e));
}

/* The server serves the group's slots though its map names another member
 * (yes), until a map names this one or another; or no longer (rejoined). */
static void tell_promoted(const struct pbr_proc *pp, bool yes)
{
    const struct engine_config *cfg = &pp->sh.cfg;
    if (cfg->promoted)
        cfg->promoted(cfg->ctl_arg, yes);
}

static bool pp_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct pbr_proc *pp = pp_of(e);
    struct engine *in = pp->inner;
    bool handled = in->ops->admin && in->ops->admin(in, argc, argv, write, ctx);
    /* `cocytus promote` (each time: a newer map may have ended the last one) */
    if (handled && !pp->is_primary && argc >= 1 && strcmp(argv[0], "promote") == 0 &&
        pbr_backup_promoted(in))
        tell_promoted(pp, true);
    return handled;
}

static enum eng_walk pp_slot_keys(struct engine *e, unsigned slot, struct eng_cursor *cursor,
                                  size_t budget,
                                  void (*fn)(void *ctx, const char *key, size_t nkey), void *ctx)
{
    struct engine *in = pp_of(e)->inner;
    return in->ops->slot_keys ? in->ops->slot_keys(in, slot, cursor, budget, fn, ctx)
                              : ENG_WALK_REFUSED;
}

static size_t pp_heartbeat_extra(struct engine *e, char *buf, size_t len)
{
    struct pbr_proc *pp = pp_of(e);
    return pp->is_primary ? pbr_primary_heartbeat(pp->inner, buf, len)
                          : pbr_backup_heartbeat(pp->inner, buf, len);
}

static int pp_lost_peers(struct engine *e, struct eng_lost_peer *out, int max)
{
    struct pbr_proc *pp = pp_of(e);
    return pp->is_primary ? pbr_primary_lost_peers(pp->inner, out, max)
                          : pbr_backup_lost_peers(pp->inner, out, max);
}

/* ---- role switches ---- */

static void answer(struct pbr_proc *pp, const char *text)
{
    const struct engine_config *cfg = &pp->sh.cfg;
    if (!cfg->ctl_send || cfg->ctl_send(cfg->ctl_arg, text) < 0)
        pp_log(pp, "cannot answer the coordinator ('%s'): control link down", text);
}

/* "3,0" -> members; "-" -> none.  The count, or -1. */
static int parse_members(const char *text, int *out, int max)
{
    int n = 0;
    if (strcmp(text, "-") == 0)
        return 0;
    for (const char *p = text; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > PBR_MAX_MEMBERS)
            return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

static void send_serving(struct pbr_proc *pp, uint64_t xid)
{
    char text[128];
    snprintf(text, sizeof(text), "pbrok serving %d %d %" PRIu64, pp->sh.cfg.group,
             pp->sh.member, xid);
    answer(pp, text);
}

/* pbr promote <g> <peers> */
static void promote(struct pbr_proc *pp, const char *peer_list)
{
    int peers[PBR_MAX_MEMBERS + 1];
    int npeers = parse_members(peer_list, peers, PBR_MAX_MEMBERS);
    if (pp->is_primary) {
        send_serving(pp, pp->promoted_xid);   /* a repeated word: we serve already */
        return;
    }
    if (npeers < 0) {
        pp_log(pp, "bad member list '%s' in a promotion; ignored", peer_list);
        return;
    }
    struct reclog carry;
    uint64_t from = 0, last = 0;
    reclog_init(&carry);
    if (pbr_backup_handover(pp->inner, &carry, &from, &last) < 0) {
        pp_log(pp, "cannot be promoted: this backup's copy is not complete, or its stream "
               "diverged");
        reclog_destroy(&carry);
        return;
    }
    struct primary_params p = { .sh = &pp->sh, .peers = peers, .npeers = npeers,
                                .from = from, .carry = &carry, .confirmed = true };
    struct engine *old = pp->inner;
    old->ops->destroy(old);
    pp->inner = pbr_primary_create(&p);
    reclog_destroy(&carry);
    if (!pp->inner) {
        pp_log(pp, "FAILED to become the primary after xid %" PRIu64 "; exiting", last);
        exit(1);
    }
    pp->is_primary = true;
    pp->promoted_xid = last;
    tell_promoted(pp, true);
    pp_log(pp, "promoted: primary after xid %" PRIu64 " (the %" PRIu64 " record(s) above xid %"
           PRIu64 " kept for the other backups), %d peer(s)", last, last - from, from, npeers);
    send_serving(pp, last);
}

/* pbr admit <g> <keep> <n>: nobody served the group since it lost its
 * data, so its last primary, only cut off, holds the newest state and
 * keeps it (keep 1, said only to that member; restarted, it is empty
 * anyway); a backup's copy may lack acknowledged writes and an older
 * primary's is older, so they start empty.  Either way a new primary
 * engine with no backups and a new stream: the old one's ack set may name
 * members that restarted (and would refuse us) or hold writes that can no
 * longer commit (they are answered with an error).  The coordinator then
 * rejoins and rebuilds every other member.  n numbers the admission: a
 * resent word is only answered. */
static void admit(struct pbr_proc *pp, bool keep, uint64_t n)
{
    if (n == pp->admitted) {
        send_serving(pp, 0);
        return;
    }
    pp->admitted = n;
    bool kept = keep && pp->is_primary;
    pp->inner->ops->destroy(pp->inner);
    pp->inner = NULL;
    if (!kept)
        pbr_unlink_all(&pp->sh.store);
    struct primary_params p = { .sh = &pp->sh, .peers = NULL, .npeers = 0, .from = 0,
                                .carry = NULL, .confirmed = true };
    pp->inner = pbr_primary_create(&p);
    if (!pp->inner) {
        pp_log(pp, "FAILED to become the primary of a group that lost its data; exiting");
        exit(1);
    }
    pp->is_primary = true;
    tell_promoted(pp, true);
    pp_log(pp, "the group lost its data: serving it again as its primary, %s",
           kept ? "with the items this process holds" : "empty");
    send_serving(pp, 0);
}

/* pbr rejoin <g> <leader> */
static void rejoin(struct pbr_proc *pp, int leader)
{
    /* Waiting for, or in, a rebuild from that leader already.  Not a
     * receiver that refused the leader's stream as diverged (a restarted
     * backup the primary still counted in its ack set dialed it as holding
     * the stream): it stays refused until replaced here. */
    if (!pp->is_primary && !pbr_backup_complete(pp->inner) &&
        !pbr_backup_diverged(pp->inner) && pbr_backup_following(pp->inner) == leader)
        return;
    pp->inner->ops->destroy(pp->inner);
    pp->inner = NULL;
    pbr_unlink_all(&pp->sh.store);
    struct backup_params p = { .sh = &pp->sh, .leader = leader, .complete = false };
    pp->inner = pbr_backup_create(&p);
    if (!pp->inner) {
        pp_log(pp, "FAILED to become a backup of member %d; exiting", leader);
        exit(1);
    }
    pp->is_primary = false;
    tell_promoted(pp, false);
    pp_log(pp, "rejoins as an empty backup of member %d, to be rebuilt", leader);
}

static void pp_control(struct engine *e, const char *text, size_t len)
{
    struct pbr_proc *pp = pp_of(e);
    char buf[CONTROL_TEXT_MAX], shown[81];
    char *argv[CONTROL_WORDS_MAX];
    int argc = 0;
    if (len >= sizeof(buf))
        return;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && argc < CONTROL_WORDS_MAX;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    if (argc < 3 || strcmp(argv[0], "pbr") != 0 || atoi(argv[2]) != pp->sh.cfg.group) {
        pp_log(pp, "unexpected control message '%s'; ignored",
               printable_copy(shown, sizeof(shown), text, len));
        return;
    }
    if (strcmp(argv[1], "promote") == 0 && argc == 4)
        promote(pp, argv[3]);
    else if (strcmp(argv[1], "rejoin") == 0 && argc == 4)
        rejoin(pp, atoi(argv[3]));
    else if (strcmp(argv[1], "admit") == 0 && argc == 5 &&
             (strcmp(argv[3], "0") == 0 || strcmp(argv[3], "1") == 0))
        admit(pp, argv[3][0] == '1', strtoull(argv[4], NULL, 10));
    else if (pp->is_primary ? !pbr_primary_control(pp->inner, argc, argv)
                            : !pbr_backup_control(pp->inner, argc, argv))
        pp_log(pp, "control message '%s' does not apply to a %s; ignored",
               printable_copy(shown, sizeof(shown), text, len),
               pp->is_primary ? "primary" : "backup");
    wake_readers(pp);   /* confirmed, or another role */
}

/* ---- lifetime ---- */

static void pp_destroy(struct engine *e)
{
    struct pbr_proc *pp = pp_of(e);
    if (pp->inner)
        pp->inner->ops->destroy(pp->inner);
    if (pp->sh.store.table.buckets != NULL)
        item_store_destroy(&pp->sh.store);
    read_waiters_free(&pp->waiters);   /* the server is going away with its connections */
    free(pp);
}

/* A new slot map: reads waiting for a key that moved away are answered
 * MOVED when parsed again (conn_read_waits). */
static void pp_map_changed(struct engine *e)
{
    read_waiters_wake(&pp_of(e)->waiters);
}

static const struct engine_ops pbr_ops = {
    .name = "pbr",
    .get = pp_get,
    .get_ex = pp_get_ex,
    .release = pp_release,
    .mutate = pp_mutate,
    .stats = pp_stats,
    .stats_reset = pp_stats_reset,
    .tick = pp_tick,
    .destroy = pp_destroy,
    .admin = pp_admin,
    .slot_keys = pp_slot_keys,
    .visit_recent = pp_visit_recent,
    .walk = pp_walk,
    .control = pp_control,
    .map_changed = pp_map_changed,
    .heartbeat_extra = pp_heartbeat_extra,
    .lost_peers = pp_lost_peers,
    .read_wait = pp_read_wait,
};

/* The cluster must be pbr with 1..PBR_MAX_MEMBERS-1 backups and name this
 * process.  0, or -1 after a message. */
static int check_cluster(const struct engine_config *cfg, enum cluster_role role)
{
    const struct cluster *c = cfg->cluster;
    if (c == NULL || c->scheme != SCHEME_PBR) {
        fprintf(stderr, "cocytus-server: the %s role needs a cluster file with scheme pbr\n",
                cluster_role_name(role));
        return -1;
    }
    if (c->n - 1 < 1 || c->n > PBR_MAX_MEMBERS) {
        fprintf(stderr, "cocytus-server: pbr %d: 1 to %d backups are supported\n", c->n - 1,
                PBR_MAX_MEMBERS - 1);
        return -1;
    }
    if ((role == ROLE_PRIMARY && cfg->index != 0) ||
        cluster_find(c, cfg->group, role, cfg->index) == NULL) {
        fprintf(stderr, "cocytus-server: the cluster has no %s %d in group %d\n",
                cluster_role_name(role), cfg->index, cfg->group);
        return -1;
    }
    return 0;
}

static struct engine *pbr_new(const struct engine_config *cfg, enum cluster_role role)
{
    if (check_cluster(cfg, role) < 0)
        return NULL;
    struct pbr_proc *pp = calloc(1, sizeof(*pp));
    if (!pp)
        return NULL;
    pp->engine.ops = &pbr_ops;
    pp->engine.priv = pp;
    pp->sh.cfg = *cfg;
    pp->sh.m = cfg->cluster->n - 1;
    pp->sh.member = role == ROLE_PRIMARY ? pp->sh.m : cfg->index;
    pp->sh.has_coordinator = cfg->cluster->has_coordinator;
    pp->sh.lease = pp_lease;
    pp->sh.lease_arg = pp;
    if (read_waiters_reserve_conns(&pp->waiters, cfg->max_conns) != 0) {
        read_waiters_free(&pp->waiters);
        free(pp);
        return NULL;
    }
    struct engine_config store_cfg = *cfg;
    store_cfg.evict = false;    /* the primary evicts, so that backups hear of it */
    clock_init(&pp->sh.clock, cfg->started);
    clock_set(&pp->sh.clock, time(NULL));
    if (item_store_init(&pp->sh.store, &store_cfg, &pp->sh.clock) != 0) {
        pp_log(pp, "out of memory setting up the store");
        read_waiters_free(&pp->waiters);
        free(pp);
        return NULL;
    }
    if (role == ROLE_PRIMARY) {
        int peers[PBR_MAX_MEMBERS];
        for (int b = 0; b < pp->sh.m; b++)
            peers[b] = b;
        struct primary_params p = { .sh = &pp->sh, .peers = peers, .npeers = pp->sh.m,
                                    .confirmed = !pp->sh.has_coordinator };
        pp->inner = pbr_primary_create(&p);
        pp->is_primary = true;
    } else {
        struct backup_params p = { .sh = &pp->sh, .leader = pp->sh.m, .complete = true };
        pp->inner = pbr_backup_create(&p);
    }
    if (!pp->inner) {
        pp_destroy(&pp->engine);
        return NULL;
    }
    return &pp->engine;
}

struct engine *engine_primary_new(const struct engine_config *cfg)
{
    return pbr_new(cfg, ROLE_PRIMARY);
}

struct engine *engine_backup_new(const struct engine_config *cfg)
{
    return pbr_new(cfg, ROLE_BACKUP);
}
