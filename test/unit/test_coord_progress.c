/* test_coord_progress.c - what a coordinator that starts knows: the work
 * in progress a leader saves beside the map for the next one
 * (cluster/coord_progress.c: what one leader encodes, a fresh one applies
 * back before anyone is heard from - views, takeover phases, handoff
 * migrations, the running move, pids, a PBR promotion), and the deaths it
 * learns from the dead process's peers (cluster/coord_lost.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "coord_group.h"
#include "coord_internal.h"
#include "slotmap.h"

static char err[512];
static char conf[64];
static struct cluster cl;

/* Cluster file text written to a new temporary file (its name in path,
 * 64 bytes) and loaded into c. */
static void cluster_from_text(char *path, const char *text, struct cluster *c)
{
    snprintf(path, 64, "/tmp/test_coord_progress.XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_msg(cluster_load(path, c, err, sizeof(err)) == 0, "%s", err);
}

static void setup(void)
{
    cluster_from_text(conf,
                      "cluster demo\nsecret s\nscheme rs 3 5\nbase_port 30000\n"
                      "node 0 10.0.0.1\nnode 1 10.0.0.2\nnode 2 10.0.0.3\nnode 3 10.0.0.4\n"
                      "node 4 10.0.0.5\ncoordinator 10.0.0.1 30100 30101\n",
                      &cl);
}

static void teardown(void)
{
    cluster_free(&cl);
    unlink(conf);
}

/* A coordinator of cluster c as coord_engine_new builds it, without a
 * server and without its scheme's state. */
static void coord_make_of(struct coord *co, struct cluster *c)
{
    memset(co, 0, sizeof(*co));
    co->c = c;
    co->running = -1;
    co->members = calloc((size_t)c->nprocs, sizeof(*co->members));
    ck_assert_ptr_nonnull(co->members);
    for (int i = 0; i < c->nprocs; i++) {
        co->members[i].co = co;
        co->members[i].proc = &c->procs[i];
    }
    co->nmembers = c->nprocs;
    co->dead_after_ms = COORD_DEAD_AFTER_MS;
    ck_assert_msg(slotmap_build(&co->map, c, 5, err, sizeof(err)) == 0, "%s", err);
}

/* The same for the RS cluster of setup(), with its coding groups. */
static void coord_make(struct coord *co)
{
    coord_make_of(co, &cl);
    ck_assert_int_eq(coord_recovery_init(co), 0);
}

static void coord_unmake(struct coord *co)
{
    coord_recovery_free(co);
    slotmap_free(&co->map);
    free(co->members);
    free(co->moves);
}

START_TEST(test_progress_round_trip)
{
    struct coord a, b;
    coord_make(&a);
    coord_make(&b);
    /* Group 1: dp 2 dead, parity process 0 chosen at stable xid 812,
     * truncating; parity 1 dead.  Group 3: dp 0 handed off by parity 1. */
    struct cgroup *g1 = &a.groups->g[1], *g3 = &a.groups->g[3];
    g1->view.dp_server[2] = -2;
    g1->view.pp_state[1] = GV_PP_DEAD;
    g1->view.version = 9000000000000ull;
    g1->tk[2].phase = PH_TRUNCATE;
    g1->tk[2].r = 0;
    g1->tk[2].stable = 812;
    g1->tk[2].participants = 1;
    g3->mig[0].phase = MIG_HANDOFF;
    g3->mig[0].r = 1;
    g3->view.pp_state[1] = GV_PP_SERVING;
    g3->view.pp_serves[1] = 0;
    g3->view.dp_server[0] = 1;
    a.members[4].pid = 4711;
    a.members[4].incarnation = 77;
    a.members[4].dead_incarnation = 55;     /* its predecessor, declared dead */
    /* Group 4: dp 1 died unseen; its takeover waits; its own process served
     * until then, so an admission would keep what it holds. */
    a.groups->g[4].tk[1].deferred = true;
    a.groups->g[4].view.dp_server[1] = -2;
    a.groups->g[4].own_state_newest[1] = true;

    size_t len;
    char *text = coord_progress_encode(&a, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(strstr(text, "tk 1 2 2 0 812 1 "));
    coord_progress_apply(&b, text, len);

    const struct cgroup *h1 = &b.groups->g[1], *h3 = &b.groups->g[3], *h4 = &b.groups->g[4];
    ck_assert_int_eq(h1->view.dp_server[2], -2);
    ck_assert_int_eq(h1->view.pp_state[1], GV_PP_DEAD);
    ck_assert_uint_ge(h1->view.version, 9000000000000ull);   /* never older */
    ck_assert_int_eq(h1->tk[2].phase, PH_TRUNCATE);
    ck_assert_int_eq(h1->tk[2].r, 0);
    ck_assert_uint_eq(h1->tk[2].stable, 812);
    ck_assert_uint_eq(h1->tk[2].waiting, 0);          /* participants minus r */
    ck_assert(!h1->lost);                             /* -2 with a takeover: not lost */
    ck_assert_int_eq(h3->mig[0].phase, MIG_HANDOFF);
    ck_assert_int_eq(h3->mig[0].r, 1);
    ck_assert_int_eq(h3->view.dp_server[0], 1);
    ck_assert_int_eq(h3->view.pp_state[1], GV_PP_SERVING);
    ck_assert(h4->tk[1].deferred);
    ck_assert(!h4->lost);
    ck_assert(h4->own_state_newest[1]);
    ck_assert(!h4->own_state_newest[0] && !h4->own_state_newest[2]);
    ck_assert(!h1->own_state_newest[2]);
    ck_assert_int_eq(b.members[4].saved_pid, 4711);
    ck_assert_uint_eq(b.members[4].saved_incarnation, 77);
    ck_assert_uint_eq(b.members[4].dead_incarnation, 55);
    /* b, started on that save, saves again before member 4's hello (a
     * hello from another member, a view): 4711 and its incarnations must
     * stay in the file for the coordinator after b. */
    b.members[2].pid = 999;
    b.members[2].incarnation = 5;
    size_t len2;
    char *again = coord_progress_encode(&b, &len2);
    ck_assert_ptr_nonnull(again);
    ck_assert_ptr_nonnull(strstr(again, "pid 4 4711 77 55\n"));
    ck_assert_ptr_nonnull(strstr(again, "pid 2 999 5 0\n"));
    free(again);
    /* An older build's line: the pid only. */
    const char *old = "progress 1\npid 3 1234\n";
    coord_progress_apply(&b, old, strlen(old));
    ck_assert_int_eq(b.members[3].saved_pid, 1234);
    ck_assert_uint_eq(b.members[3].saved_incarnation, 0);
    ck_assert_uint_eq(b.members[3].dead_incarnation, 0);
    free(text);
    coord_unmake(&a);
    coord_unmake(&b);
}
END_TEST

/* The last failure's timings survive a coordinator's restart, and a
 * takeover resumed counts from the death its old leader saw: `cocytus
 * groups` (and the drills that kill the coordinator) report what happened,
 * not the time since the restart. */
START_TEST(test_progress_figures)
{
    struct coord a, b;
    coord_make(&a);
    coord_make(&b);
    struct cgroup *g0 = &a.groups->g[0], *g2 = &a.groups->g[2];
    uint64_t wall = coord_wall_ms();
    /* Group 0: served 84 ms after a death 5 s ago, full again 2 s ago. */
    g0->last_serve_ms = 84;
    g0->last_prepare_us = 1234;
    g0->last_dead_wall_ms = wall - 5000;
    g0->last_served_wall_ms = wall - 4916;
    g0->last_full_ms = 3000;
    g0->last_full_wall_ms = wall - 2000;
    /* Group 2: dp 1 died 3 s ago, its takeover truncating; degraded since. */
    g2->last_dead_wall_ms = wall - 3000;
    g2->degraded_since_us = coord_now_us() - 3000 * 1000ull;
    g2->loss_wall_ms = wall - 60000;     /* an earlier loss, admitted since */
    g2->view.dp_server[1] = -2;
    g2->tk[1].phase = PH_TRUNCATE;
    g2->tk[1].r = 1;
    g2->tk[1].stable = 40;
    g2->tk[1].participants = 3;
    g2->tk[1].dead_at_us = coord_now_us() - 3000 * 1000ull;

    size_t len;
    char *text = coord_progress_encode(&a, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_null(strstr(text, "figures 1 "));     /* nothing happened there */
    ck_assert_ptr_nonnull(strstr(text, "figures 2 "));
    coord_progress_apply(&b, text, len);

    const struct cgroup *h0 = &b.groups->g[0], *h2 = &b.groups->g[2];
    ck_assert_uint_eq(h0->last_serve_ms, 84);
    ck_assert_uint_eq(h0->last_prepare_us, 1234);
    ck_assert_uint_eq(h0->last_dead_wall_ms, wall - 5000);
    ck_assert_uint_eq(h0->last_served_wall_ms, wall - 4916);
    ck_assert_uint_eq(h0->last_full_ms, 3000);
    ck_assert_uint_eq(h0->last_full_wall_ms, wall - 2000);
    ck_assert_uint_eq(h0->degraded_since_us, 0);
    ck_assert_uint_eq(h0->loss_wall_ms, 0);
    ck_assert_uint_eq(h2->loss_wall_ms, wall - 60000);
    /* About 3 s ago by b's clock (the test may be slow: up to 1 s more). */
    uint64_t now = coord_now_us();
    ck_assert_int_eq(h2->tk[1].phase, PH_TRUNCATE);
    ck_assert_uint_ge(now - h2->tk[1].dead_at_us, 2999 * 1000ull);
    ck_assert_uint_le(now - h2->tk[1].dead_at_us, 4000 * 1000ull);
    ck_assert_uint_ge(now - h2->degraded_since_us, 2999 * 1000ull);
    ck_assert_uint_le(now - h2->degraded_since_us, 4000 * 1000ull);
    /* A saved time ahead of our clock (another host's) counts from now. */
    char ahead[128];
    snprintf(ahead, sizeof(ahead), "figures 3 0 0 %llu 0 0 0 %llu 0\n",
             (unsigned long long)(wall + 60000), (unsigned long long)(wall + 60000));
    coord_progress_apply(&b, ahead, strlen(ahead));
    ck_assert_uint_le(coord_now_us() - b.groups->g[3].degraded_since_us, 1000 * 1000ull);
    /* A takeover line saved before it carried its death counts from now. */
    const char *old = "tk 3 0 2 0 5 3\n";
    coord_progress_apply(&b, old, strlen(old));
    ck_assert_int_eq(b.groups->g[3].tk[0].phase, PH_TRUNCATE);
    ck_assert_uint_le(coord_now_us() - b.groups->g[3].tk[0].dead_at_us, 1000 * 1000ull);
    free(text);
    coord_unmake(&a);
    coord_unmake(&b);
}
END_TEST

START_TEST(test_progress_rebuild_and_loss)
{
    struct coord a, b;
    coord_make(&a);
    coord_make(&b);
    /* A rebuild in progress starts over as dead; a dp nobody serves and
     * no takeover for it is lost. */
    a.groups->g[0].view.pp_state[0] = GV_PP_REBUILDING;
    a.groups->g[2].view.dp_server[1] = -2;
    size_t len;
    char *text = coord_progress_encode(&a, &len);
    coord_progress_apply(&b, text, len);
    ck_assert_int_eq(b.groups->g[0].view.pp_state[0], GV_PP_DEAD);
    ck_assert(b.groups->g[2].lost);
    ck_assert(!b.groups->g[0].lost);
    /* Malformed lines are ignored. */
    const char *junk = "view 99 1 -,-,- p,p\ntk 1 9 2 0 1 1\nmig x\npid -1 5\nmove 99999 0 6\n";
    coord_progress_apply(&b, junk, strlen(junk));
    ck_assert_int_eq(b.running, -1);
    free(text);
    coord_unmake(&a);
    coord_unmake(&b);
}
END_TEST

/* What `cocytus groups` writes, gathered. */
struct admin_out {
    char text[8192];
    size_t len;
};

static void admin_write(void *ctx, const void *p, size_t n)
{
    struct admin_out *o = ctx;
    ck_assert_uint_lt(o->len + n, sizeof(o->text));
    memcpy(o->text + o->len, p, n);
    o->len += n;
    o->text[o->len] = '\0';
}

/* A coordinator just started (on a saved state that says all is well)
 * reports a group as starting, not healthy, until it has heard from every
 * one of its processes or declared it dead. */
START_TEST(test_group_starting_until_heard)
{
    struct coord a;
    coord_make(&a);
    struct admin_out out = { .len = 0 };
    coord_recovery_admin(&a, admin_write, &out);
    ck_assert_msg(strstr(out.text, "group 0 starting redundancy 2/2 ") != NULL, "%s", out.text);
    int one = -1;
    for (int i = 0; i < a.nmembers; i++)
        if (a.members[i].proc->group == 0) {
            a.members[i].state = MEMBER_ALIVE;
            one = i;
        }
    ck_assert_int_ge(one, 0);
    a.members[one].state = MEMBER_DEAD;               /* dead counts as heard of */
    out.len = 0;
    coord_recovery_admin(&a, admin_write, &out);
    ck_assert_msg(strstr(out.text, "group 0 healthy redundancy 2/2 ") != NULL, "%s", out.text);
    ck_assert_msg(strstr(out.text, "group 1 starting ") != NULL, "%s", out.text);
    coord_unmake(&a);
}
END_TEST

/* A PBR(2) cluster of 3 nodes (its file's name in pconf, 64 bytes). */
static void pbr_cluster(char *pconf, struct cluster *pcl)
{
    cluster_from_text(pconf,
                      "cluster demo\nsecret s\nscheme pbr 2\nbase_port 30000\n"
                      "node 0 10.0.0.1\nnode 1 10.0.0.2\nnode 2 10.0.0.3\n"
                      "coordinator 10.0.0.1 30100 30101\n",
                      pcl);
}

static void pbr_coord_make(struct coord *co, struct cluster *pcl)
{
    coord_make_of(co, pcl);
    ck_assert_int_eq(coord_pbr_init(co), 0);
}

static void pbr_coord_unmake(struct coord *co)
{
    coord_pbr_free(co);
    slotmap_free(&co->map);
    free(co->members);
}

/* Two coordinators of one PBR(2) cluster: a, which saves, and b, started
 * on a's save. */
struct pbr_pair {
    char conf[64];
    struct cluster cl;
    struct coord a, b;
};

static void pbr_pair_make(struct pbr_pair *p)
{
    pbr_cluster(p->conf, &p->cl);
    pbr_coord_make(&p->a, &p->cl);
    pbr_coord_make(&p->b, &p->cl);
}

static void pbr_pair_free(struct pbr_pair *p)
{
    pbr_coord_unmake(&p->a);
    pbr_coord_unmake(&p->b);
    cluster_free(&p->cl);
    unlink(p->conf);
}

/* A PBR failover that told a backup to serve: a coordinator restarted
 * before the map named it promotes the same member again (fencing again
 * would wait forever for a member that is a primary by now); one that had
 * not chosen yet starts again (the map's primary is not confirmed). */
START_TEST(test_progress_pbr_promotion)
{
    struct pbr_pair p;
    pbr_pair_make(&p);
    struct coord *pa = &p.a, *pb = &p.b;
    char line[128];
    ck_assert(!coord_pbr_progress_line(pa, 1, line, sizeof(line)));
    /* Group 1: members 0 and 1 fenced, 0 chosen, both complete. */
    coord_pbr_resume(pa, "pbr 1 promote 0 3 3");
    ck_assert(coord_pbr_progress_line(pa, 1, line, sizeof(line)));
    ck_assert_str_eq(line, "pbr 1 promote 0 3 3");
    size_t len;
    char *saved = coord_progress_encode(pa, &len);
    ck_assert_ptr_nonnull(saved);
    ck_assert_ptr_nonnull(strstr(saved, "\npbr 1 promote 0 3 3\n"));
    coord_progress_apply(pb, saved, len);
    ck_assert(coord_pbr_progress_line(pb, 1, line, sizeof(line)));
    ck_assert_str_eq(line, "pbr 1 promote 0 3 3");
    ck_assert(!coord_pbr_progress_line(pb, 0, line, sizeof(line)));
    free(saved);
    /* Group 2: a failover not chosen yet (fencing, or due) starts again. */
    coord_pbr_resume(pa, "pbr 2 failover");
    ck_assert(coord_pbr_progress_line(pa, 2, line, sizeof(line)));
    ck_assert_str_eq(line, "pbr 2 failover");
    saved = coord_progress_encode(pa, &len);
    ck_assert_ptr_nonnull(saved);
    coord_progress_apply(pb, saved, len);
    ck_assert(coord_pbr_progress_line(pb, 2, line, sizeof(line)));
    ck_assert_str_eq(line, "pbr 2 failover");
    free(saved);
    /* Nonsense is ignored: the primary itself, a member that took no part,
     * a group or member out of range, a short line. */
    const char *junk = "pbr 0 promote 2 3 3\npbr 0 promote 1 1 1\npbr 7 promote 0 1 1\n"
                       "pbr 0 promote 9 3 3\npbr 0 promote 0 1\npbr 0 failovers\n"
                       "pbr 9 failover\n";
    coord_progress_apply(pb, junk, strlen(junk));
    ck_assert(!coord_pbr_progress_line(pb, 0, line, sizeof(line)));
    pbr_pair_free(&p);
}
END_TEST

/* A PBR group's last failover's timings survive a restart (saved before its
 * progress line), and a failover resumed dates from the death the earlier
 * coordinator saw, unless that death was served already. */
START_TEST(test_progress_pbr_figures)
{
    struct pbr_pair p;
    pbr_pair_make(&p);
    struct coord *pa = &p.a, *pb = &p.b;
    char line[128], want[128];
    unsigned long long wall = coord_wall_ms();
    ck_assert(!coord_pbr_figures_line(pa, 1, line, sizeof(line)));
    /* Group 1: a death 5 s ago, member 0 told to serve. */
    snprintf(line, sizeof(line), "pbr 1 figures 0 %llu 0 0", wall - 5000);
    coord_pbr_resume(pa, line);
    coord_pbr_resume(pa, "pbr 1 promote 0 3 3");
    /* Group 2: served 70 ms after a death 9 s ago; a new failover since. */
    snprintf(line, sizeof(line), "pbr 2 figures 70 %llu %llu %llu", wall - 9000, wall - 8930,
             wall - 20000);
    coord_pbr_resume(pa, line);
    coord_pbr_resume(pa, "pbr 2 failover");
    size_t len;
    char *saved = coord_progress_encode(pa, &len);
    ck_assert_ptr_nonnull(saved);
    ck_assert_ptr_nonnull(strstr(saved, "\npbr 1 figures "));
    ck_assert(strstr(saved, "\npbr 1 figures ") < strstr(saved, "\npbr 1 promote "));
    coord_progress_apply(pb, saved, len);
    free(saved);
    ck_assert(coord_pbr_figures_line(pb, 1, line, sizeof(line)));
    snprintf(want, sizeof(want), "pbr 1 figures 0 %llu 0 0", wall - 5000);
    ck_assert_str_eq(line, want);
    ck_assert(coord_pbr_figures_line(pb, 2, line, sizeof(line)));
    unsigned long long serve, dead, served;
    unsigned long long lost_at;
    ck_assert_int_eq(sscanf(line, "pbr 2 figures %llu %llu %llu %llu", &serve, &dead, &served,
                            &lost_at), 4);
    ck_assert_uint_eq(lost_at, wall - 20000);
    ck_assert_uint_eq(serve, 70);
    ck_assert_uint_eq(served, wall - 8930);
    ck_assert_uint_ge(dead, wall);          /* the new failover's death: now */
    ck_assert(!coord_pbr_figures_line(pb, 0, line, sizeof(line)));
    pbr_pair_free(&p);
}
END_TEST

/* ---- a death on the peers' word (coord_lost.c) ---- */

/* by says "lost <what>" with its heartbeat. */
static void report(struct coord *co, struct member *by, const char *what)
{
    struct ctl_msg msg;
    char text[64];
    snprintf(text, sizeof(text), "lost %s", what);
    ck_assert_int_eq(ctl_parse(text, strlen(text), &msg, err, sizeof(err)), 0);
    coord_lost_heard(co, by, &msg);
}

START_TEST(test_lost_evidence)
{
    struct coord co;
    coord_make(&co);
    char why[256];
    struct member *x = coord_member(&co, 0, ROLE_DATA, 1);
    struct member *p0 = coord_member(&co, 0, ROLE_PARITY, 0);
    struct member *p1 = coord_member(&co, 0, ROLE_PARITY, 1);
    struct member *d0 = coord_member(&co, 0, ROLE_DATA, 0);
    for (int i = 0; i < co.nmembers; i++)
        co.members[i].state = MEMBER_ALIVE;
    x->state = MEMBER_UNKNOWN;
    co.started_ms = coord_now_ms() - 2000;     /* listened long enough */

    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));   /* nobody said */
    report(&co, p0, "data 1 2000");
    report(&co, d0, "data 1 2000");            /* data processes are not its peers */
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));   /* parity 1 has not */
    report(&co, p1, "data 1 1400");
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));   /* not 1500 ms yet */
    report(&co, p1, "data 1 1600");
    ck_assert(coord_lost_evidence(&co, x, why, sizeof(why)));
    ck_assert_msg(strstr(why, "its 2 live peer(s)") && strstr(why, "1600 ms"), "%s", why);

    /* Not before the coordinator listened 1250 ms. */
    co.started_ms = coord_now_ms() - 500;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));
    co.started_ms = coord_now_ms() - 2000;

    /* Only with the reporter's last heartbeat: parity 1's next one came
     * without the word (its link is back). */
    p1->heartbeats++;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));
    report(&co, p1, "data 1 1700");
    ck_assert(coord_lost_evidence(&co, x, why, sizeof(why)));

    /* A linked peer not heard from yet may hold the link: wait for it;
     * one declared dead does not count. */
    p1->state = MEMBER_UNKNOWN;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));
    p1->state = MEMBER_DEAD;
    ck_assert(coord_lost_evidence(&co, x, why, sizeof(why)));
    ck_assert_msg(strstr(why, "its 1 live peer(s)"), "%s", why);

    /* A stale word (no heartbeat for long) is not evidence. */
    for (int i = 0; i < x->nlost; i++)
        if (x->lost[i].by == p0)
            x->lost[i].heard_ms -= 1000;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));

    /* Only for a member not heard from; heard, its reports are spent. */
    report(&co, p0, "data 1 2100");
    ck_assert(coord_lost_evidence(&co, x, why, sizeof(why)));
    x->state = MEMBER_ALIVE;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));
    coord_lost_forget(x);
    x->state = MEMBER_UNKNOWN;
    ck_assert(!coord_lost_evidence(&co, x, why, sizeof(why)));

    /* A parity process: its peers are the data processes. */
    struct member *px = coord_member(&co, 1, ROLE_PARITY, 0);
    px->state = MEMBER_UNKNOWN;
    report(&co, coord_member(&co, 1, ROLE_DATA, 0), "parity 0 3000");
    report(&co, coord_member(&co, 1, ROLE_DATA, 1), "parity 0 3000");
    ck_assert(!coord_lost_evidence(&co, px, why, sizeof(why)));
    report(&co, coord_member(&co, 1, ROLE_DATA, 2), "parity 0 3000");
    ck_assert(coord_lost_evidence(&co, px, why, sizeof(why)));
    ck_assert_msg(strstr(why, "its 3 live peer(s)"), "%s", why);
    coord_unmake(&co);
}
END_TEST

/* PBR: a primary's peers are its backups, a backup's its primary; none
 * while the group fails over (who leads is what is being decided). */
START_TEST(test_lost_evidence_pbr)
{
    char pconf[64];
    struct cluster pcl;
    pbr_cluster(pconf, &pcl);
    struct coord co;
    pbr_coord_make(&co, &pcl);
    char why[256];
    for (int i = 0; i < co.nmembers; i++)
        co.members[i].state = MEMBER_ALIVE;
    co.started_ms = coord_now_ms() - 2000;
    struct member *prim = coord_member(&co, 0, ROLE_PRIMARY, 0);
    struct member *b0 = coord_member(&co, 0, ROLE_BACKUP, 0);
    struct member *b1 = coord_member(&co, 0, ROLE_BACKUP, 1);
    prim->state = MEMBER_UNKNOWN;
    report(&co, b0, "primary 0 1800");
    ck_assert(!coord_lost_evidence(&co, prim, why, sizeof(why)));
    report(&co, b1, "primary 0 1800");
    ck_assert(coord_lost_evidence(&co, prim, why, sizeof(why)));
    prim->state = MEMBER_ALIVE;

    b1->state = MEMBER_UNKNOWN;
    report(&co, b0, "backup 1 5000");          /* backups do not link with each other */
    ck_assert(!coord_lost_evidence(&co, b1, why, sizeof(why)));
    report(&co, prim, "backup 1 1500");
    ck_assert(coord_lost_evidence(&co, b1, why, sizeof(why)));
    ck_assert_msg(strstr(why, "its 1 live peer(s)"), "%s", why);

    /* Group 1 failing over (resumed): no evidence there. */
    coord_pbr_resume(&co, "pbr 1 failover");
    struct member *p1 = coord_member(&co, 1, ROLE_PRIMARY, 0);
    p1->state = MEMBER_UNKNOWN;
    report(&co, coord_member(&co, 1, ROLE_BACKUP, 0), "primary 0 4000");
    report(&co, coord_member(&co, 1, ROLE_BACKUP, 1), "primary 0 4000");
    ck_assert(!coord_lost_evidence(&co, p1, why, sizeof(why)));
    pbr_coord_unmake(&co);
    cluster_free(&pcl);
    unlink(pconf);
}
END_TEST

/* coord_recovery_death_loses: a silent process is not declared dead when
 * that would leave its RS(3,5) group more failed places than its 2 parity
 * processes (cluster/coord.c, silence_would_lose). */
/* A control link for members taken as alive (never used: any non-NULL). */
static char fake_link;

/* Every member of co alive: heard, with a control link. */
static void all_alive(struct coord *co)
{
    for (int i = 0; i < co->nmembers; i++) {
        co->members[i].state = MEMBER_ALIVE;
        co->members[i].link = (struct link *)&fake_link;
    }
}

START_TEST(test_silence_death_loses)
{
    struct coord co;
    coord_make(&co);
    all_alive(&co);
    struct cgroup *g = &co.groups->g[0];
    struct member *dp0 = coord_member(&co, 0, ROLE_DATA, 0);
    struct member *dp1 = coord_member(&co, 0, ROLE_DATA, 1);
    struct member *pp0 = coord_pp_member(&co, 0, 0), *pp1 = coord_pp_member(&co, 0, 1);
    int failed = -1;
    /* whole: any one death is fine */
    ck_assert(!coord_recovery_death_loses(&co, pp1, &failed));
    ck_assert_int_eq(failed, 0);
    /* dp 0 dead and served by parity 0 (which gave its parity up): one failed
     * place; parity 1 may die, parity 0 too (dp 0 unserved: 2 + nothing) */
    dp0->state = MEMBER_DEAD;
    g->view.dp_server[0] = 0;
    g->view.pp_state[0] = GV_PP_SERVING;
    ck_assert(!coord_recovery_death_loses(&co, pp1, &failed));
    ck_assert_int_eq(failed, 1);
    ck_assert(!coord_recovery_death_loses(&co, pp0, &failed));
    /* ... and once parity 1 is dead as well, parity 0 may not: dp 0's place
     * and both parity places would be failed */
    pp1->state = MEMBER_DEAD;
    g->view.pp_state[1] = GV_PP_DEAD;
    ck_assert(coord_recovery_death_loses(&co, pp0, &failed));
    ck_assert_int_eq(failed, 2);
    /* nor another data process */
    ck_assert(coord_recovery_death_loses(&co, dp1, &failed));
    /* parity 1's process back but joining (its place still dead): its
     * death fails nothing more, so it is declared as usual */
    pp1->state = MEMBER_ALIVE;
    ck_assert(!coord_recovery_death_loses(&co, pp1, &failed));
    ck_assert_int_eq(failed, 2);
    /* a group already beyond what it tolerates (dp 1 lost too): a death
     * that adds a failed place still waits, one that adds none does not */
    g->view.dp_server[1] = -2;
    ck_assert(!coord_recovery_death_loses(&co, dp1, &failed));
    ck_assert_int_eq(failed, 3);
    ck_assert(coord_recovery_death_loses(&co, coord_member(&co, 0, ROLE_DATA, 2), &failed));
    /* another group, whole, is not affected */
    ck_assert(!coord_recovery_death_loses(&co, coord_member(&co, 1, ROLE_DATA, 0), &failed));
    coord_unmake(&co);
}
END_TEST

/* coord_pbr_death_loses: a serving PBR(2) group's silent primary is
 * waited for unless a backup that holds every acknowledged write was
 * heard from lately, and lately is two heartbeat periods inside the
 * silence that declares a death: a backup paused with the primary, its
 * last heartbeat a period after the primary's, must not count (it would
 * be failed over to, stopped). */
static void pbr_progress(struct coord *co, struct member *m, const char *words)
{
    coord_pbr_on_progress(co, m, words, strlen(words));
}

START_TEST(test_pbr_silence_death_loses)
{
    char pconf[64];
    struct cluster pcl;
    pbr_cluster(pconf, &pcl);
    struct coord co;
    pbr_coord_make(&co, &pcl);
    all_alive(&co);
    struct member *prim = coord_member(&co, 0, ROLE_PRIMARY, 0);
    struct member *b0 = coord_member(&co, 0, ROLE_BACKUP, 0);
    struct member *b1 = coord_member(&co, 0, ROLE_BACKUP, 1);
    uint64_t now = coord_now_ms();
    for (int i = 0; i < co.nmembers; i++)
        co.members[i].last_heard_ms = now;
    /* PBR(2): backups are members 0 and 1, the primary member 2 */
    pbr_progress(&co, prim, "pbr p 10 0=f 1=f");
    pbr_progress(&co, b0, "pbr b 2 10 1 0");
    pbr_progress(&co, b1, "pbr b 2 10 1 0");
    prim->last_heard_ms = now - 1600;
    /* both backups complete and heard now: the primary may die */
    ck_assert(!coord_pbr_death_loses(&co, prim));
    ck_assert(!coord_pbr_death_loses(&co, b0));
    /* a backup's death never loses while the primary serves */
    b0->last_heard_ms = b1->last_heard_ms = now - 1600;
    ck_assert(!coord_pbr_death_loses(&co, b0));
    /* both backups paused with it, heard a period after its last word:
     * still under dead_after_ms (1500), but not lately */
    b0->last_heard_ms = b1->last_heard_ms = now - 1350;
    ck_assert(coord_pbr_death_loses(&co, prim));
    /* one backup heard a period ago: it counts */
    b1->last_heard_ms = now - 250;
    ck_assert(!coord_pbr_death_loses(&co, prim));
    /* ... unless it does not hold every acknowledged write */
    pbr_progress(&co, b1, "pbr b 2 10 0 0");
    ck_assert(coord_pbr_death_loses(&co, prim));
    /* a longer death silence keeps the margin of two heartbeats */
    co.dead_after_ms = 5000;
    pbr_progress(&co, b1, "pbr b 2 10 1 0");
    b1->last_heard_ms = now - 4400;
    ck_assert(!coord_pbr_death_loses(&co, prim));
    b0->last_heard_ms = b1->last_heard_ms = now - 4600;
    ck_assert(coord_pbr_death_loses(&co, prim));
    pbr_coord_unmake(&co);
    cluster_free(&pcl);
    unlink(pconf);
}
END_TEST

/* A coordinator that started while processes were paused: members never
 * heard from whose live peers report their links up, only silent, hold
 * their places (coord_lost_paused), so the one whose death would leave
 * RS(3,5) beyond its 2 parity processes is waited for; a current "down"
 * report, or none at all, says nothing of a pause, and an "up" no longer
 * repeated stands for 5 s. */
START_TEST(test_unheard_paused)
{
    struct coord co;
    coord_make(&co);
    all_alive(&co);
    co.started_ms = coord_now_ms() - 2000;
    struct member *dp[3], *pp0 = coord_pp_member(&co, 0, 0), *pp1 = coord_pp_member(&co, 0, 1);
    for (int i = 0; i < 3; i++) {
        dp[i] = coord_member(&co, 0, ROLE_DATA, i);
        dp[i]->state = MEMBER_UNKNOWN;
        dp[i]->link = NULL;
    }
    int failed = -1;
    /* nobody reported them: not paused, all three count as failed */
    ck_assert(!coord_lost_paused(&co, dp[0]));
    ck_assert(!coord_recovery_death_loses(&co, dp[2], &failed));
    ck_assert_int_eq(failed, 3);
    /* both parity processes: up, only silent */
    for (int i = 0; i < 3; i++) {
        char what[32];
        snprintf(what, sizeof(what), "data %d 2000 up", i);
        report(&co, pp0, what);
        report(&co, pp1, what);
    }
    ck_assert(coord_lost_paused(&co, dp[0]));
    ck_assert(!coord_recovery_death_loses(&co, dp[0], &failed));
    ck_assert_int_eq(failed, 0);
    /* A member heard from that fell silent is held rather than the
     * unheard ones, whose silence may yet be a crash: for it they count
     * as failed. */
    dp[2]->state = MEMBER_ALIVE;
    dp[2]->link = (struct link *)&fake_link;
    ck_assert(coord_recovery_death_loses(&co, dp[2], &failed));
    ck_assert_int_eq(failed, 2);
    dp[2]->state = MEMBER_UNKNOWN;
    dp[2]->link = NULL;
    /* two declared dead: the third may not be */
    dp[0]->state = MEMBER_DEAD;
    dp[1]->state = MEMBER_DEAD;
    ck_assert(coord_recovery_death_loses(&co, dp[2], &failed));
    ck_assert_int_eq(failed, 2);
    /* one peer sees its link down: dead, not paused */
    report(&co, pp1, "data 2 2100");
    ck_assert(!coord_lost_paused(&co, dp[2]));
    ck_assert(!coord_recovery_death_loses(&co, dp[2], &failed));
    report(&co, pp1, "data 2 2100 up");
    ck_assert(coord_lost_paused(&co, dp[2]));
    /* Peers that stop repeating "up" have links that carry something
     * again: dp 2 resumed and its hello is a redial away.  The word stands
     * for 5 s (pause_beyond.sh lost a group's writes in that gap). */
    pp0->heartbeats++;
    pp1->heartbeats++;
    ck_assert(coord_lost_paused(&co, dp[2]));
    ck_assert(coord_recovery_death_loses(&co, dp[2], &failed));
    for (int i = 0; i < dp[2]->nlost; i++)
        dp[2]->lost[i].heard_ms -= 5100;
    ck_assert(!coord_lost_paused(&co, dp[2]));
    /* ... unless a peer says its link went down since */
    report(&co, pp0, "data 2 2200 up");
    ck_assert(coord_lost_paused(&co, dp[2]));
    pp0->heartbeats++;
    report(&co, pp1, "data 2 2300");
    ck_assert(!coord_lost_paused(&co, dp[2]));
    /* a "down" that is no longer said does not count against "up" */
    pp1->heartbeats++;
    ck_assert(coord_lost_paused(&co, dp[2]));
    /* heard from: alive, not "paused" */
    report(&co, pp0, "data 2 2200 up");
    ck_assert(coord_lost_paused(&co, dp[2]));
    dp[2]->state = MEMBER_ALIVE;
    ck_assert(!coord_lost_paused(&co, dp[2]));
    coord_unmake(&co);
}
END_TEST

/* "lost" words: the optional "up", nothing else after the figure. */
START_TEST(test_lost_words)
{
    struct ctl_msg m;
    ck_assert_int_eq(ctl_parse("lost data 1 1500", 16, &m, err, sizeof(err)), 0);
    ck_assert(!m.link_up);
    ck_assert_int_eq(ctl_parse("lost data 1 1500 up", 19, &m, err, sizeof(err)), 0);
    ck_assert(m.link_up);
    ck_assert_int_eq(m.down_ms, 1500);
    ck_assert_int_lt(ctl_parse("lost data 1 1500 down", 21, &m, err, sizeof(err)), 0);
    ck_assert_int_lt(ctl_parse("lost data 1 1500 up up", 22, &m, err, sizeof(err)), 0);
    ck_assert_int_lt(ctl_parse("lost data 1 1500 ", 17, &m, err, sizeof(err)), 0);
}
END_TEST

static Suite *progress_suite(void)
{
    Suite *s = suite_create("coord_progress");
    TCase *tc = tcase_create("progress");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_progress_round_trip);
    tcase_add_test(tc, test_progress_rebuild_and_loss);
    tcase_add_test(tc, test_progress_figures);
    tcase_add_test(tc, test_group_starting_until_heard);
    tcase_add_test(tc, test_progress_pbr_figures);
    tcase_add_test(tc, test_progress_pbr_promotion);
    tcase_add_test(tc, test_silence_death_loses);
    tcase_add_test(tc, test_pbr_silence_death_loses);
    suite_add_tcase(s, tc);
    TCase *lost = tcase_create("lost");
    tcase_add_checked_fixture(lost, setup, teardown);
    tcase_add_test(lost, test_lost_evidence);
    tcase_add_test(lost, test_lost_evidence_pbr);
    tcase_add_test(lost, test_unheard_paused);
    tcase_add_test(lost, test_lost_words);
    suite_add_tcase(s, lost);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(progress_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
