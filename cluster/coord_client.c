/* coord_client.c - a server process's side of the coordinator: the control
 * link, hello and heartbeats, pushed maps, and the moves it is told to run.
 *
 * The link (repl/link.c) redials by itself, so a coordinator that is down
 * or restarting costs nothing: the process keeps serving with the map it
 * has.  Once up, the process says "hello <pid> <epoch> <incarnation>" (a
 * random id of this start) and then "hb <pid>
 * <epoch> <rss>" every COORD_HEARTBEAT_MS, followed by "lost <role>
 * <index> <ms>" for each replication peer whose link is down.  A pushed map is installed only
 * when its epoch is newer than the process's own (a move's source and
 * destination already hold the new map when the coordinator publishes it).
 * "migrate" starts migrate_start(); its outcome goes back as "migrated";
 * "retire" (we were declared dead and replaced) ends the process;
 * an outcome that finds the link down is kept and sent after the next
 * hello.  With several coordinator lines (a ZooKeeper backend, where only
 * the elected leader listens) there is one link per coordinator, each
 * redialing by itself; whatever the process says goes on every link that
 * is up (normally the leader's only), so no link is ever closed to switch
 * and a new leader is reached as soon as it listens. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include <event2/event.h>

#include "auth.h"
#include "cluster.h"
#include "coord.h"
#include "engine.h"
#include "frame.h"
#include "link.h"
#include "migrate.h"
#include "server.h"

#define RESULT_MAX (COORD_WHY_MAX + 64)
#define LOST_PEERS_MAX 64               /* a group's processes, far above any */

struct coord_client {
    struct server *s;
    struct link *links[CLUSTER_MAX_COORDS];   /* one per coordinator line */
    int nlinks;
    struct link_identity me;
    uint64_t incarnation;           /* random, once per process: hello's last word */
    struct event *hb_timer;
    char pending[RESULT_MAX];       /* a "migrated" not yet delivered ("" if none) */
    /* Test fault (COCYTUS_TEST_MUTE_DIR): while this file exists, the
     * process neither says nor takes anything on its coordinator links, as
     * if cut off from the coordinator only (its replication links and
     * clients still reach it).  "" when not set. */
    char mute_file[256];
    /* Test fault (COCYTUS_TEST_HELLO_PID): the pid hello and hb give instead
     * of getpid(), as every process of a container started again would
     * give the same one.  0 when not set. */
    long hello_pid;
};

static bool muted(const struct coord_client *cc)
{
    return cc->mute_file[0] && access(cc->mute_file, F_OK) == 0;
}

/* A random id for this process's life, never 0.  The pid alone does not
 * tell two processes apart: a node's processes started in a container on
 * a spare host get the pids they had on the dead one. */
static uint64_t new_incarnation(void)
{
    uint64_t v = 0;
    if (auth_random((uint8_t *)&v, sizeof(v)) < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    v &= 0x7fffffffffffffffULL;     /* plain decimal, below 2^63 */
    return v ? v : 1;
}

static uint64_t current_epoch(const struct coord_client *cc)
{
    return cc->s->slotmap ? cc->s->slotmap->epoch : 0;
}

/* Send on every link that is up: 0 if one took it, -1 if none is up. */
static int send_text(struct coord_client *cc, const char *text)
{
    int rc = -1;
    for (int i = 0; i < cc->nlinks; i++)
        if (cc->links[i] && link_is_up(cc->links[i]) &&
            link_send(cc->links[i], FT_CONTROL, text, (uint32_t)strlen(text)) == 0)
            rc = 0;
    return rc;
}

int coord_client_send(struct coord_client *cc, const char *text)
{
    return send_text(cc, text);
}

/* The pid this process gives in its hello and heartbeats. */
static long reported_pid(const struct coord_client *cc)
{
    return cc->hello_pid ? cc->hello_pid : (long)getpid();
}

static void send_hello(struct coord_client *cc, struct link *l)
{
    char text[64];
    snprintf(text, sizeof(text), "hello %ld %llu %llu", reported_pid(cc),
             (unsigned long long)current_epoch(cc), (unsigned long long)cc->incarnation);
    link_send(l, FT_CONTROL, text, (uint32_t)strlen(text));
}

/* After each heartbeat, one "lost" per replication peer whose link is
 * down: a coordinator that started after that peer died learns it here
 * instead of waiting out its startup grace.  "up" at the end: the link is
 * up and only silent (the peer may be paused, not dead). */
static void send_lost(struct coord_client *cc, struct engine *e)
{
    struct eng_lost_peer lost[LOST_PEERS_MAX];
    if (!e || !e->ops->lost_peers)
        return;
    int n = e->ops->lost_peers(e, lost, LOST_PEERS_MAX);
    for (int i = 0; i < n; i++) {
        char text[96];
        snprintf(text, sizeof(text), "lost %s %d %llu%s",
                 cluster_role_name((enum cluster_role)lost[i].role), lost[i].index,
                 (unsigned long long)lost[i].down_ms, lost[i].link_up ? " up" : "");
        send_text(cc, text);
    }
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg)
{
    struct coord_client *cc = arg;
    struct engine *e = cc->s->engine;
    if (muted(cc))
        return;
    char text[256];
    int n = snprintf(text, sizeof(text), "hb %ld %llu %llu", reported_pid(cc),
                     (unsigned long long)current_epoch(cc),
                     (unsigned long long)engine_process_rss());
    if (e && e->ops->heartbeat_extra && n > 0 && (size_t)n + 2 < sizeof(text)) {
        size_t extra = e->ops->heartbeat_extra(e, text + n + 1, sizeof(text) - (size_t)n - 1);
        if (extra > 0)
            text[n] = ' ';
    }
    send_text(cc, text);
    send_lost(cc, e);
}

static void on_up(struct link *l, uint64_t peer_xid, void *ctx)
{
    struct coord_client *cc = ctx;
    fprintf(stderr, "coordinator link to %s up (epoch %llu)\n", link_peer_name(l),
            (unsigned long long)current_epoch(cc));
    send_hello(cc, l);
    if (cc->pending[0] && send_text(cc, cc->pending) == 0)
        cc->pending[0] = '\0';
}

/* A pushed map: installed when newer than ours.  Decoded maps know only
 * host and port; group, role and index are carried over from our map. */
static void take_map(struct coord_client *cc, const char *body, size_t len)
{
    struct server *s = cc->s;
    char err[256];
    struct slotmap *m = calloc(1, sizeof(*m));
    if (!m) {
        fprintf(stderr, "coordinator map: out of memory\n");
        return;
    }
    if (slotmap_decode(m, body, len, err, sizeof(err)) < 0) {
        fprintf(stderr, "coordinator sent a bad map: %s; ignored\n", err);
        free(m);
        return;
    }
    if (m->epoch <= current_epoch(cc)) {
        slotmap_free(m);
        free(m);
        return;
    }
    for (int i = 0; s->slotmap && i < m->nendpoints; i++) {
        int j = slotmap_find(s->slotmap, m->endpoints[i].host, m->endpoints[i].port);
        if (j >= 0) {
            m->endpoints[i].group = s->slotmap->endpoints[j].group;
            m->endpoints[i].role = s->slotmap->endpoints[j].role;
            m->endpoints[i].index = s->slotmap->endpoints[j].index;
        }
    }
    uint64_t old = current_epoch(cc);
    unsigned moved = s->slotmap ? slotmap_moved(s->slotmap, m) : SLOTMAP_SLOTS;
    if (server_set_slotmap(s, m) < 0)
        fprintf(stderr, "coordinator map: out of memory preparing the config reply\n");
    fprintf(stderr, "slot map epoch %llu -> %llu from the coordinator (%u slots changed owner)\n",
            (unsigned long long)old, (unsigned long long)m->epoch, moved);
}

static void on_migrate_done(void *ctx, unsigned slot, uint64_t epoch, bool ok, const char *why)
{
    struct coord_client *cc = ctx;
    char text[RESULT_MAX];
    if (ok)
        snprintf(text, sizeof(text), "migrated %u %llu ok", slot, (unsigned long long)epoch);
    else
        snprintf(text, sizeof(text), "migrated %u %llu failed %.*s", slot,
                 (unsigned long long)epoch, COORD_WHY_MAX - 1,
                 why && *why ? why : "unknown reason");
    /* A reason must stay one line. */
    for (char *p = text; *p; p++)
        if (*p == '\r' || *p == '\n')
            *p = ' ';
    if (send_text(cc, text) < 0)
        snprintf(cc->pending, sizeof(cc->pending), "%s", text);
}

static void start_migration(struct coord_client *cc, const struct ctl_msg *msg)
{
    char err[COORD_WHY_MAX];
    fprintf(stderr, "coordinator asks to move slot %u to %s:%d at epoch %llu\n", msg->slot,
            msg->host, msg->port, (unsigned long long)msg->epoch);
    if (migrate_start(cc->s, msg->slot, msg->host, msg->port, msg->epoch, on_migrate_done, cc,
                      err, sizeof(err)) < 0) {
        fprintf(stderr, "move of slot %u not started: %s\n", msg->slot, err);
        on_migrate_done(cc, msg->slot, msg->epoch, false, err);
    }
}

static void on_frame(struct link *l, uint16_t type, const uint8_t *payload, uint32_t len,
                     void *ctx)
{
    struct coord_client *cc = ctx;
    struct ctl_msg msg;
    char err[256];
    if (type != FT_CONTROL || muted(cc))
        return;
    struct engine *e = cc->s->engine;
    if (coord_is_engine_message((const char *)payload, len)) {
        if (e && e->ops->control)
            e->ops->control(e, (const char *)payload, len);
        return;
    }
    if (ctl_parse((const char *)payload, len, &msg, err, sizeof(err)) < 0) {
        fprintf(stderr, "coordinator link: %s; ignored\n", err);
        return;
    }
    if (msg.kind == CTL_RETIRE) {
        /* Declared dead while it still ran, and another process has its
         * place since (its node was replaced on another host): nothing it
         * holds may come back. */
        fprintf(stderr, "the coordinator says another process took this one's place (pid %ld "
                "was declared dead: its host fell silent, and was replaced?); exiting\n",
                (long)getpid());
        exit(EXIT_FAILURE);
    }
    if (msg.kind == CTL_MAP)
        take_map(cc, msg.body, msg.body_len);
    else if (msg.kind == CTL_MIGRATE)
        start_migration(cc, &msg);
    else
        fprintf(stderr, "coordinator link: unexpected message from the coordinator; ignored\n");
}

static void on_down(struct link *l, const char *why, void *ctx)
{
    /* link.c logs it and redials; the map stays as it is. */
}

/* Our link role: the cluster role of --role (plain when it is not one). */
static uint8_t own_link_role(const char *role)
{
    enum cluster_role r;
    if (cluster_role_from_name(role, &r) < 0)
        r = ROLE_PLAIN;
    return coord_link_role(r);
}

static int dial(struct coord_client *cc, int i)
{
    const struct cluster_coord *k = &cc->s->cluster->coords[i];
    struct link_callbacks cb = { .on_up = on_up, .on_frame = on_frame, .on_down = on_down };
    cc->links[i] = link_connect(cc->s->base, k->host, k->link_port, &cc->me,
                                cc->s->cluster->secret, &cb, cc);
    if (!cc->links[i])
        return -1;
    link_set_tls(cc->links[i], cc->s->cluster->link_tls);
    if (cc->s->settings.verbose)
        fprintf(stderr, "dialing the coordinator at %s:%d\n", k->host, k->link_port);
    return 0;
}

struct coord_client *coord_client_start(struct server *s)
{
    const struct cluster *c = s->cluster;
    struct coord_client *cc = calloc(1, sizeof(*cc));
    if (!cc) {
        fprintf(stderr, "cocytus-server: out of memory; running without the coordinator\n");
        return NULL;
    }
    cc->s = s;
    cc->incarnation = new_incarnation();
    snprintf(cc->me.cluster, sizeof(cc->me.cluster), "%s", c->name);
    cc->me.group = (uint32_t)s->settings.group;
    cc->me.role = own_link_role(s->settings.role);
    cc->me.index = (uint32_t)s->settings.index;
    const char *fake_pid = getenv("COCYTUS_TEST_HELLO_PID");
    if (fake_pid && atol(fake_pid) > 0) {
        cc->hello_pid = atol(fake_pid);
        fprintf(stderr, "cocytus-server: test fault: hello says pid %ld\n", cc->hello_pid);
    }
    if (server_test_fault_path(s, "mute", cc->mute_file, sizeof(cc->mute_file))) {
        /* The second test fault: with DIR/unlinked-<role>-<g>-<i> at the
         * start, this process never links to the coordinator, which then
         * never hears of it (restart_unheard.sh). */
        char unlinked[sizeof(cc->mute_file)];
        server_test_fault_path(s, "unlinked", unlinked, sizeof(unlinked));
        if (access(unlinked, F_OK) == 0) {
            fprintf(stderr, "cocytus-server: test fault: %s exists; not linking to the "
                    "coordinator\n", unlinked);
            free(cc);
            return NULL;
        }
    }
    struct timeval period = { .tv_sec = 0, .tv_usec = COORD_HEARTBEAT_MS * 1000 };
    cc->hb_timer = event_new(s->base, -1, EV_PERSIST, on_heartbeat, cc);
    int dialed = 0;
    cc->nlinks = c->ncoords;
    for (int i = 0; i < cc->nlinks; i++)
        dialed += dial(cc, i) == 0;
    if (dialed < cc->nlinks || !cc->hb_timer || event_add(cc->hb_timer, &period) < 0) {
        fprintf(stderr, "cocytus-server: cannot start the coordinator link to %s:%d; "
                "running without the coordinator\n", c->coord_host, c->coord_link_port);
        coord_client_stop(cc);
        return NULL;
    }
    return cc;
}

void coord_client_stop(struct coord_client *cc)
{
    if (!cc)
        return;
    for (int i = 0; i < cc->nlinks; i++)
        if (cc->links[i])
            link_close(cc->links[i]);
    if (cc->hb_timer)
        event_free(cc->hb_timer);
    free(cc);
}
