/* health.c - the cluster's health as the coordinator sees it: the cluster
 * half of `cocytus-cli status` (membership from `cocytus status`, each
 * coding group's redundancy, layout and the progress of every recovery,
 * migration or rebuild from `cocytus groups`) and `cocytus-cli
 * wait-healthy`, which polls the same until every group is healthy at
 * full redundancy and every process alive, or a deadline passes.
 * docs/cli.md, "status" and "wait-healthy". */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"
#include "cli.h"
#include "gview.h"
#include "groups.h"

#define COORD_LINE_MAX 512
#define COORD_PROCS_MAX 4096
#define WAIT_POLL_MS 200
#define WAIT_MIN_SOCKET_MS 100      /* socket bound near the deadline */
#define MISSING_LINES_MAX 40        /* lines of "still missing" kept */
#define BAR_WIDTH 30

/* ---- one look at the coordinator ---- */

struct coord_snapshot {
    unsigned long long epoch;
    char (*proc)[COORD_LINE_MAX];   /* its `proc ...` lines */
    int nproc;
    int alive, dead, joining, unknown;
    int groups_rc;                  /* 0 read; 1 it reports no coding groups; -1 failed */
    struct gview_groups groups;
    char groups_err[ADMIN_ERR_MAX];
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Counts "alive", "dead", "joining", "unknown" in a `proc ...` status line
 * ("silent": waited for by the coordinator, counts as unknown). */
static void count_state(const char *line, struct coord_snapshot *s)
{
    if (strstr(line, " alive pid="))
        s->alive++;
    else if (strstr(line, " dead pid="))
        s->dead++;
    else if (strstr(line, " joining pid="))
        s->joining++;
    else
        s->unknown++;
}

/* The proc lines after the epoch line, up to END.  0, or -1 (err). */
static int read_proc_lines(struct admin_conn *c, struct coord_snapshot *s)
{
    char line[COORD_LINE_MAX];
    s->proc = malloc(sizeof(*s->proc) * COORD_PROCS_MAX);
    if (s->proc == NULL) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    for (int i = 0; i < COORD_PROCS_MAX + 64; i++) {
        if (admin_read_line(c, line, sizeof line) < 0)
            return -1;
        if (strcmp(line, "END") == 0)
            return 0;
        if (strncmp(line, "proc ", 5) != 0 || s->nproc == COORD_PROCS_MAX)
            continue;
        snprintf(s->proc[s->nproc++], COORD_LINE_MAX, "%s", line);
        count_state(line, s);
    }
    snprintf(c->err, sizeof c->err, "`cocytus status` without END");
    return -1;
}

static void snapshot_free(struct coord_snapshot *s)
{
    free(s->proc);
    s->proc = NULL;
    gview_groups_free(&s->groups);
}

/* `cocytus status` and `cocytus groups` of the coordinator.  0, or -1
 * when it does not answer or its status is incomplete (why in err). */
static int snapshot_read(const struct cli_opts *o, int timeout_ms, struct coord_snapshot *s,
                         char *err, size_t errlen)
{
    char line[COORD_LINE_MAX];
    memset(s, 0, sizeof *s);
    struct admin_conn *c = malloc(sizeof *c);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    if (admin_open(c, o->coord_host, o->coord_port, timeout_ms, o->secret, o->tls) < 0 ||
        admin_send_line(c, "cocytus status") < 0 || admin_read_line(c, line, sizeof line) < 0)
        snprintf(err, errlen, "NOT ANSWERING (%s)", c->err);
    else if (sscanf(line, "epoch %llu", &s->epoch) != 1)
        snprintf(err, errlen, "answered '%.80s'", line);
    else if (read_proc_lines(c, s) < 0)
        snprintf(err, errlen, "incomplete status (%s)", c->err);
    else
        rc = 0;
    if (rc == 0) {
        s->groups_rc = gview_read_groups(c, &s->groups);
        if (s->groups_rc < 0)
            snprintf(s->groups_err, sizeof s->groups_err, "%s", c->err);
    }
    admin_close(c);
    free(c);
    return rc;
}

/* Address and liveness word of a process in the proc lines; false when
 * not listed. */
static bool coord_proc(const struct coord_snapshot *s, int g, const char *role, int idx,
                       char *addr, size_t addrcap, char *state, size_t statecap)
{
    for (int i = 0; i < s->nproc; i++) {
        int pg, pidx, node;
        char prole[PROC_ROLE_MAX], paddr[128], pstate[16];
        if (sscanf(s->proc[i], "proc %d %15s %d %d %127s %15s", &pg, prole, &pidx, &node,
                   paddr, pstate) == 6 && pg == g && pidx == idx && strcmp(prole, role) == 0) {
            snprintf(addr, addrcap, "%s", paddr);
            snprintf(state, statecap, "%s", pstate);
            return true;
        }
    }
    return false;
}

/* " (127.0.0.1:21266)" or "" when the process is not listed. */
static const char *proc_addr(const struct coord_snapshot *s, int g, const char *role, int idx,
                             char *buf, size_t cap)
{
    char addr[128], state[16];
    if (coord_proc(s, g, role, idx, addr, sizeof addr, state, sizeof state))
        snprintf(buf, cap, " (%s)", addr);
    else
        buf[0] = '\0';
    return buf;
}

static bool group_selected(const struct cli_opts *o, const struct gview_group *gg)
{
    return o->group < 0 || gg->group == o->group;
}

/* "DEGRADED", "healthy": the state, in capitals unless at full redundancy. */
static const char *state_word(const struct gview_group *gg, char *buf, size_t cap)
{
    bool ok = group_at_full_redundancy(gg);
    snprintf(buf, cap, "%s", gg->state);
    for (char *w = buf; !ok && *w; w++)
        *w = (char)(*w >= 'a' && *w <= 'z' ? *w - 'a' + 'A' : *w);
    return buf;
}

/* ---- status: printing ---- */

/* One progress part with its bar: what, per cent, counts, rate, ETA. */
static void print_progress(int g, const struct group_progress *p)
{
    char text[COORD_LINE_MAX];
    printf("group %d: %s\n", g, progress_text(p, BAR_WIDTH, text, sizeof text));
}

/* Who serves each data block that is not served by its own process. */
static bool print_data_servers(const struct gview_group *gg, const struct coord_snapshot *s)
{
    const struct group_view *v = &gg->view;
    int g = gg->group;
    char addr[128], state[16], paddr[160];
    bool unserved = false;
    for (int i = 0; i < v->k; i++) {
        int r = v->dp_server[i];
        if (r == -1)
            continue;
        unserved |= r < 0;
        bool known = coord_proc(s, g, "data", i, addr, sizeof addr, state, sizeof state);
        if (r >= 0)
            printf("group %d: data %d served by recovery process parity %d%s", g, i, r,
                   proc_addr(s, g, "parity", r, paddr, sizeof paddr));
        else
            printf("group %d: data %d has no server (%s)", g, i,
                   gg->lost[0] ? "lost" : "being taken over");
        if (known)
            printf("; its own process %s is %s", addr, state);
        printf("\n");
    }
    return unserved;
}

/* Parity processes that hold no parity: dead, dropped, handing data back
 * or being rebuilt. */
static void print_parity_states(const struct gview_group *gg, const struct coord_snapshot *s)
{
    int g = gg->group;
    char addr[128], state[16], paddr[160];
    for (int j = 0; j < gg->view.m; j++) {
        switch (gg->pp[j]) {
        case GROUP_PP_DEAD: {
            bool known = coord_proc(s, g, "parity", j, addr, sizeof addr, state, sizeof state);
            printf("group %d: parity %d%s%s%s is %s: the group runs with one parity fewer\n", g,
                   j, known ? " (" : "", known ? addr : "", known ? ")" : "",
                   !known || strcmp(state, "dead") == 0 ? "dead"
                   : strcmp(state, "joining") == 0 ? "joining (it restarted empty) and dropped"
                   : "dropped");
            break;
        }
        case GROUP_PP_MIGRATING:
            printf("group %d: parity %d%s hands data %d back to its restarted data process "
                   "(it holds that data, not parity, until the migration ends)\n", g, j,
                   proc_addr(s, g, "parity", j, paddr, sizeof paddr), gg->pp_dp[j]);
            break;
        case GROUP_PP_REBUILDING:
            printf("group %d: parity %d%s is being rebuilt (no usable parity yet)\n", g, j,
                   proc_addr(s, g, "parity", j, paddr, sizeof paddr));
            break;
        case GROUP_PP_OTHER:
            printf("group %d: parity %d%s is in a state this tool does not know (not parity)\n",
                   g, j, proc_addr(s, g, "parity", j, paddr, sizeof paddr));
            break;
        default:
            break;
        }
    }
}

/* The details of a group short of full redundancy. */
static void print_group_detail(const struct gview_group *gg, const struct coord_snapshot *s)
{
    int g = gg->group;
    bool unserved = print_data_servers(gg, s);
    print_parity_states(gg, s);
    for (int n = 0; n < gg->nprogress; n++)
        print_progress(g, &gg->progress[n]);
    /* While a data block has no server the last figures are of a takeover
     * that has not served (yet): only its preparation is known. */
    if (unserved && gg->lost[0] == '\0')
        printf("group %d: last takeover: preparation %.3f ms, not serving yet\n", g,
               (double)gg->last_prepare_us / 1000.0);
    else if (gg->last_serve_ms > 0 || gg->last_prepare_us > 0)
        printf("group %d: last takeover: served %llu ms after the death was seen "
               "(preparation %.3f ms)\n", g, (unsigned long long)gg->last_serve_ms,
               (double)gg->last_prepare_us / 1000.0);
}

/* A group that lost data and serves every key again says since when its
 * lost keys are misses (the coordinator's log says which ones). */
static void print_past_loss(const struct gview_group *gg)
{
    time_t t = (time_t)(gg->keys_lost_at_ms / 1000);
    struct tm tm;
    char when[32];
    if (gmtime_r(&t, &tm) == NULL || strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(when, sizeof when, "%llu ms", (unsigned long long)gg->keys_lost_at_ms);
    printf("group %d: lost keys at %s (coordinator log: DATA LOSS); every key is served again, "
           "the lost ones as misses\n", gg->group, when);
}

/* One line per coding group and details for those short of full
 * redundancy.  CLI_OK when every group shown is at full redundancy (or
 * the coordinator reports no coding groups), CLI_MISMATCH when one is
 * not, CLI_UNREACHABLE when the answer was incomplete. */
static int print_groups(const struct coord_snapshot *s, const struct cli_opts *o)
{
    if (s->groups_rc < 0) {
        printf("coordinator %s:%d: no coding group health (%s)\n", o->coord_host, o->coord_port,
               s->groups_err);
        return CLI_UNREACHABLE;
    }
    int code = CLI_OK, shown = 0, full = 0;
    char word[16];
    for (int i = 0; i < s->groups.n; i++) {
        const struct gview_group *gg = &s->groups.v[i];
        if (!group_selected(o, gg))
            continue;
        printf("group %d: %s, tolerates %d of %d failures", gg->group,
               state_word(gg, word, sizeof word), gg->redundancy, gg->target);
        if (strcmp(gg->state, "lost") == 0 || gg->lost[0] != '\0')
            printf(" (data lost: %s)", gg->lost[0] ? gg->lost : "no reason given");
        printf("\n");
        if (gg->keys_lost_at_ms && gg->lost[0] == '\0' && strcmp(gg->state, "lost") != 0)
            print_past_loss(gg);
        shown++;
        if (group_at_full_redundancy(gg)) {
            full++;
            continue;
        }
        print_group_detail(gg, s);
        code = CLI_MISMATCH;
    }
    if (shown > 0)
        printf("groups: %d of %d at full redundancy\n", full, shown);
    return code;
}

int health_print_coordinator(const struct cli_opts *o)
{
    struct coord_snapshot s;
    char err[ADMIN_ERR_MAX + 64];
    if (snapshot_read(o, o->timeout_ms, &s, err, sizeof err) < 0) {
        printf("coordinator %s:%d: %s\n", o->coord_host, o->coord_port, err);
        snapshot_free(&s);
        return CLI_UNREACHABLE;
    }
    printf("coordinator %s:%d: epoch %llu, %d alive, %d dead, %d unknown", o->coord_host,
           o->coord_port, s.epoch, s.alive, s.dead, s.unknown);
    if (s.joining > 0)
        printf(", %d joining", s.joining);
    printf("\n");
    for (int i = 0; i < s.nproc; i++)
        printf("%s\n", s.proc[i]);
    int groups = print_groups(&s, o);
    int code = CLI_OK;
    /* A joining process answers but holds nothing yet: like a group
     * short of redundancy, the cluster is not whole. */
    if (s.dead || s.unknown || groups == CLI_UNREACHABLE)
        code = CLI_UNREACHABLE;
    else if (s.joining || groups == CLI_MISMATCH)
        code = CLI_MISMATCH;
    snapshot_free(&s);
    return code;
}

/* ---- wait-healthy ---- */

/* What keeps the cluster from being healthy, one line each. */
struct missing {
    int n;                     /* things missing (may exceed the lines kept) */
    int nlines;
    char line[MISSING_LINES_MAX][COORD_LINE_MAX];
};

static void missing_add(struct missing *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void missing_add(struct missing *m, const char *fmt, ...)
{
    m->n++;
    if (m->nlines == MISSING_LINES_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->line[m->nlines++], COORD_LINE_MAX, fmt, ap);
    va_end(ap);
}

/* Processes the coordinator does not see alive. */
static void missing_procs(const struct coord_snapshot *s, struct missing *m)
{
    for (int i = 0; i < s->nproc; i++) {
        int g, idx, node;
        char role[PROC_ROLE_MAX], addr[128], state[16];
        if (sscanf(s->proc[i], "proc %d %15s %d %d %127s %15s", &g, role, &idx, &node, addr,
                   state) != 6)
            missing_add(m, "a process line the tool cannot read: %.200s", s->proc[i]);
        else if (strcmp(state, "alive") != 0)
            missing_add(m, "%s %d of group %d on node %d (%s) is %s", role, idx, g, node, addr,
                        state);
    }
}

/* Groups short of full redundancy, with what runs in them. */
static void missing_groups(const struct coord_snapshot *s, const struct cli_opts *o,
                           struct missing *m)
{
    char word[16], text[COORD_LINE_MAX];
    if (s->groups_rc < 0) {
        missing_add(m, "the coordinator gives no coding group health (%s)", s->groups_err);
        return;
    }
    for (int i = 0; i < s->groups.n; i++) {
        const struct gview_group *gg = &s->groups.v[i];
        if (!group_selected(o, gg) || group_at_full_redundancy(gg))
            continue;
        missing_add(m, "group %d: %s, tolerates %d of %d failures%s%s", gg->group,
                    state_word(gg, word, sizeof word), gg->redundancy, gg->target,
                    gg->lost[0] ? "; data lost: " : "", gg->lost);
        for (int n = 0; n < gg->nprogress; n++)
            if (!progress_done(&gg->progress[n]))
                missing_add(m, "group %d: %s", gg->group,
                            progress_text(&gg->progress[n], BAR_WIDTH, text, sizeof text));
    }
}

/* Every process of the list answers `version` (after the cluster secret,
 * when we have it: a server started with -Y answers nothing else before its
 * clients authenticate). */
static void missing_answers(const struct proc_list *l, const struct cli_opts *o,
                            int timeout_ms, struct missing *m)
{
    struct admin_conn *c = malloc(sizeof *c);
    char line[128];
    if (c == NULL) {
        missing_add(m, "out of memory");
        return;
    }
    for (int i = 0; i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        if (o->group >= 0 && p->group != o->group)
            continue;
        if (admin_open(c, p->host, p->port, timeout_ms, o->secret, o->tls) < 0 ||
            admin_send_line(c, "version") < 0 || admin_read_line(c, line, sizeof line) < 0)
            missing_add(m, "%s %d of group %d (%s:%d) does not answer (%s)", p->role, p->index,
                        p->group, p->host, p->port, c->err);
        else if (strncmp(line, "VERSION", 7) != 0)
            missing_add(m, "%s %d of group %d (%s:%d) answers '%s' to version", p->role,
                        p->index, p->group, p->host, p->port, line);
        admin_close(c);
    }
    free(c);
}

/* One look: fills m with what is missing; counts in *groups, *procs. */
static void look(const struct proc_list *l, const struct cli_opts *o, int timeout_ms,
                 struct missing *m, int *groups, int *procs)
{
    memset(m, 0, sizeof *m);
    *groups = 0;
    *procs = l->n;
    if (o->coord_port > 0) {
        struct coord_snapshot s;
        char err[ADMIN_ERR_MAX + 64];
        if (snapshot_read(o, timeout_ms, &s, err, sizeof err) < 0) {
            missing_add(m, "coordinator %s:%d: %s", o->coord_host, o->coord_port, err);
        } else {
            missing_procs(&s, m);
            missing_groups(&s, o, m);
            for (int i = 0; i < s.groups.n; i++)
                *groups += group_selected(o, &s.groups.v[i]);
            *procs = s.nproc;
        }
        snapshot_free(&s);
    }
    /* The coordinator takes up to its heartbeat timeout to notice a hung
     * process: ask every process itself once the coordinator is content. */
    if (m->n == 0)
        missing_answers(l, o, timeout_ms, m);
}

int cmd_wait_healthy(const struct proc_list *l, const struct cli_opts *o)
{
    int64_t start = mono_ms(), deadline = start + o->wait_ms;
    int max_rounds = o->wait_ms / WAIT_POLL_MS + 2;
    struct missing *m = malloc(sizeof *m);
    if (m == NULL)
        return CLI_UNREACHABLE;
    int code = CLI_MISMATCH, groups = 0, procs = 0;
    for (int round = 0; round < max_rounds; round++) {
        int64_t left = deadline - mono_ms();
        int timeout_ms = left < WAIT_MIN_SOCKET_MS ? WAIT_MIN_SOCKET_MS
                         : left < o->timeout_ms ? (int)left : o->timeout_ms;
        look(l, o, timeout_ms, m, &groups, &procs);
        if (m->n == 0) {
            code = CLI_OK;
            break;
        }
        left = deadline - mono_ms();
        if (left <= 0)
            break;
        pause_ms(left < WAIT_POLL_MS ? (int)left : WAIT_POLL_MS);
    }
    double took = (double)(mono_ms() - start) / 1000.0;
    if (code == CLI_OK) {
        printf("wait-healthy: healthy after %.1f s (%d processes alive", took, procs);
        if (o->coord_port > 0)
            printf(", %d coding group%s at full redundancy", groups, groups == 1 ? "" : "s");
        else
            printf("; no coordinator, so only that every process answers");
        printf(")\n");
    } else {
        printf("wait-healthy: NOT healthy after %.1f s (timeout %.1f s); still missing:\n", took,
               o->wait_ms / 1000.0);
        for (int i = 0; i < m->nlines; i++)
            printf("  %s\n", m->line[i]);
        if (m->n > m->nlines)
            printf("  ... and %d more\n", m->n - m->nlines);
    }
    free(m);
    return code;
}
