/* gview.c - one coding group as cocytus-cli sees it: the coordinator's
 * `cocytus groups` lines (who serves each data block, which parity
 * processes are dead, recovery progress), connections to the processes
 * that hold the group's blocks, the waits before a check (recovery
 * processes done rebuilding, then quiescence), and region fetches.
 *
 * A data block served by a recovery process is read through that process:
 * `cocytus dpinfo` instead of `cocytus info`, `cocytus meta i` and
 * `cocytus used i` instead of `cocytus meta` / `cocytus used`, and its
 * region (the served data process's data once every unit is rebuilt). */
#include "gview.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUIET_POLL_MS 10
#define REBUILT_POLL_MS 20
#define GROUPS_MAX 100000        /* lines of `cocytus groups` taken */
#define GROUP_LINE_MAX 2048

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int nblocks(const struct gview *v)
{
    return v->k + v->m;
}

/* ---- `cocytus groups` ---- */

int gview_read_groups(struct admin_conn *c, struct gview_groups *out)
{
    char line[GROUP_LINE_MAX];
    out->n = 0;
    out->v = NULL;
    if (admin_send_line(c, "cocytus groups") < 0)
        return -1;
    for (int i = 0; i < GROUPS_MAX; i++) {
        if (admin_read_line(c, line, sizeof line) < 0)
            return -1;
        if (strcmp(line, "END") == 0)
            return 0;
        if (strcmp(line, "ERROR") == 0 || strncmp(line, "CLIENT_ERROR", 12) == 0 ||
            strncmp(line, "SERVER_ERROR", 12) == 0)
            return 1;    /* a coordinator without online recovery */
        if (strncmp(line, "group ", 6) != 0)
            continue;
        struct gview_group *v = realloc(out->v, (size_t)(out->n + 1) * sizeof *v);
        if (v == NULL) {
            snprintf(c->err, sizeof c->err, "out of memory");
            return -1;
        }
        out->v = v;
        if (gview_parse_group(line, &out->v[out->n]) < 0) {
            snprintf(c->err, sizeof c->err, "%s:%d: malformed `cocytus groups` line '%.120s'",
                     c->host, c->port, line);
            return -1;
        }
        out->n++;
    }
    snprintf(c->err, sizeof c->err, "%s:%d: `cocytus groups` without END", c->host, c->port);
    return -1;
}

void gview_groups_free(struct gview_groups *gs)
{
    free(gs->v);
    gs->v = NULL;
    gs->n = 0;
}

const struct gview_group *gview_groups_find(const struct gview_groups *gs, int g)
{
    for (int i = 0; i < gs->n; i++)
        if (gs->v[i].group == g)
            return &gs->v[i];
    return NULL;
}

/* ---- blocks ---- */

bool gview_present(const struct gview *v, int block)
{
    return v->kind[block] == GVIEW_DATA || v->kind[block] == GVIEW_SERVED ||
           v->kind[block] == GVIEW_PARITY;
}

int gview_nparity(const struct gview *v)
{
    int n = 0;
    for (int j = 0; j < v->m; j++)
        n += v->kind[v->k + j] == GVIEW_PARITY;
    return n;
}

bool gview_backs_up(const struct gview *v, int j, int i)
{
    enum gview_kind kind = v->kind[v->k + j];
    if (kind == GVIEW_PARITY)
        return true;
    return kind == GVIEW_RECOVERY && v->layout.view.pp_serves[j] != i;
}

/* Why parity process j holds no parity block: "dead", "being rebuilt",
 * "handing data f back". */
static const char *absent_pp_word(const struct gview *v, int j)
{
    static char word[48];
    if (!v->has_layout)
        return "dead";
    switch (v->layout.pp[j]) {
    case GROUP_PP_REBUILDING:
        return "being rebuilt";
    case GROUP_PP_MIGRATING:
        snprintf(word, sizeof word, "handing data %d back", v->layout.pp_dp[j]);
        return word;
    case GROUP_PP_OTHER:
        return "in a state this tool does not know";
    default:
        return "dead";
    }
}

const char *gview_layout_text(const struct gview *v, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int b = 0; b < nblocks(v) && n < cap; b++) {
        const char *sep = n > 0 ? ", " : "";
        if (v->kind[b] == GVIEW_SERVED)
            n += (size_t)snprintf(buf + n, cap - n, "%sdata %d served by parity %d", sep, b,
                                  v->server[b]);
        else if (v->kind[b] == GVIEW_ABSENT && b < v->k)
            n += (size_t)snprintf(buf + n, cap - n, "%sdata %d has no server", sep, b);
        else if (v->kind[b] == GVIEW_ABSENT)
            n += (size_t)snprintf(buf + n, cap - n, "%sparity %d %s", sep, b - v->k,
                                  absent_pp_word(v, b - v->k));
    }
    return buf;
}

const char *gview_name(const struct gview *v, int block, char *buf, size_t cap)
{
    const struct proc_info *p = v->proc[block];
    bool data = block < v->k;
    int idx = data ? block : block - v->k;
    if (v->kind[block] == GVIEW_SERVED)
        snprintf(buf, cap, "data %d (served by parity %d, %s:%d)", idx, v->server[block],
                 p->host, p->port);
    else if (p == NULL)
        snprintf(buf, cap, "%s %d (%s)", data ? "data" : "parity", idx,
                 data ? "no server" : absent_pp_word(v, idx));
    else
        snprintf(buf, cap, "%s %d (%s:%d)", p->role, p->index, p->host, p->port);
    return buf;
}

static const struct proc_info *find_proc(struct gview *v, const struct proc_list *l,
                                         const char *role, int idx, char *err, size_t errlen)
{
    const struct proc_info *p = procs_find(l, v->group, role, idx);
    if (p == NULL)
        snprintf(err, errlen, "group %d has no %s process %d in the process list", v->group,
                 role, idx);
    return p;
}

/* Fills kind[], proc[] and server[]: from the layout when there is one,
 * else data 0..k-1, then parity 0..m-1. */
static int assign_blocks(struct gview *v, const struct proc_list *l, char *err, size_t errlen)
{
    const struct group_view *gv = &v->layout.view;
    for (int b = 0; b < nblocks(v); b++) {
        bool data = b < v->k;
        int idx = data ? b : b - v->k;
        const char *role = data ? "data" : "parity";
        v->kind[b] = data ? GVIEW_DATA : GVIEW_PARITY;
        if (v->has_layout && data && gv->dp_server[idx] == -2) {
            snprintf(err, errlen, "data %d has no server (being taken over, or lost)", idx);
            return -1;
        }
        if (v->has_layout && data && gv->dp_server[idx] >= 0) {
            v->kind[b] = GVIEW_SERVED;
            v->server[b] = gv->dp_server[idx];
            idx = gv->dp_server[idx];
            role = "parity";
        } else if (v->has_layout && !data && gv->pp_state[idx] == GV_PP_DEAD) {
            v->kind[b] = GVIEW_ABSENT;
            continue;
        } else if (v->has_layout && !data && gv->pp_state[idx] == GV_PP_SERVING) {
            v->kind[b] = GVIEW_RECOVERY;
        }
        if ((v->proc[b] = find_proc(v, l, role, idx, err, errlen)) == NULL)
            return -1;
    }
    return 0;
}

static int open_conn(struct gview *v, int b, int timeout_ms, char *err, size_t errlen)
{
    v->conn[b] = malloc(sizeof *v->conn[b]);
    if (v->conn[b] == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const struct proc_info *p = v->proc[b];
    if (admin_open(v->conn[b], p->host, p->port, timeout_ms, v->secret, v->tls) < 0) {
        snprintf(err, errlen, "%s", v->conn[b]->err);
        return -1;
    }
    return 0;
}

/* k, m and region_size from a process's `cocytus info` (a data and a
 * parity process both report them). */
static int read_shape(struct admin_conn *c, int *k, int *m, uint64_t *region_size,
                      char *err, size_t errlen)
{
    struct admin_stats st = { 0 };
    uint64_t kk = 0, mm = 0, r = 0;
    int rc = admin_stats_cmd(c, "cocytus info", &st);
    if (rc < 0)
        snprintf(err, errlen, "%s", c->err);
    else if (!admin_stat_u64(&st, "k", &kk) || !admin_stat_u64(&st, "m", &mm) ||
             !admin_stat_u64(&st, "region_size", &r)) {
        snprintf(err, errlen, "%s:%d: `cocytus info` lacks k, m or region_size", c->host, c->port);
        rc = -1;
    } else if (kk < 1 || mm < 1 || kk + mm > GVIEW_MAX_BLOCKS) {
        snprintf(err, errlen, "%s:%d: unsupported k=%" PRIu64 " m=%" PRIu64, c->host, c->port,
                 kk, mm);
        rc = -1;
    }
    admin_stats_free(&st);
    *k = (int)kk;
    *m = (int)mm;
    *region_size = r;
    return rc;
}

/* The process to read the shape from: data process 0, or with a layout
 * the first process that holds a block. */
static const struct proc_info *shape_source(struct gview *v, const struct proc_list *l,
                                            char *err, size_t errlen)
{
    if (!v->has_layout) {
        const struct proc_info *first = procs_find(l, v->group, "data", 0);
        if (first == NULL)
            snprintf(err, errlen, "group %d has no data process 0", v->group);
        return first;
    }
    for (int b = 0; b < nblocks(v); b++)
        if (v->proc[b] != NULL)
            return v->proc[b];
    snprintf(err, errlen, "no process of group %d is alive", v->group);
    return NULL;
}

int gview_open(struct gview *v, const struct proc_list *l, int group,
               const struct gview_group *layout, int timeout_ms, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->group = group;
    v->secret = l->secret;
    v->tls = l->tls;
    if (layout != NULL) {
        v->has_layout = true;
        v->layout = *layout;
        v->k = layout->view.k;
        v->m = layout->view.m;
        if (v->k + v->m > GVIEW_MAX_BLOCKS) {
            snprintf(err, errlen, "unsupported k=%d m=%d", v->k, v->m);
            return -1;
        }
        if (assign_blocks(v, l, err, errlen) < 0)
            return -1;
    }
    const struct proc_info *src = shape_source(v, l, err, errlen);
    if (src == NULL)
        return -1;
    struct admin_conn probe;
    if (admin_open(&probe, src->host, src->port, timeout_ms, l->secret, l->tls) < 0) {
        snprintf(err, errlen, "%s", probe.err);
        return -1;
    }
    int k, m;
    int rc = read_shape(&probe, &k, &m, &v->region_size, err, errlen);
    admin_close(&probe);
    if (rc < 0)
        return -1;
    if (v->has_layout && (k != v->k || m != v->m)) {
        snprintf(err, errlen, "the coordinator's view has k=%d m=%d, %s:%d reports k=%d m=%d",
                 v->k, v->m, src->host, src->port, k, m);
        return -1;
    }
    v->k = k;
    v->m = m;
    if (!v->has_layout && assign_blocks(v, l, err, errlen) < 0)
        return -1;
    for (int b = 0; b < nblocks(v); b++)
        if (v->proc[b] != NULL && open_conn(v, b, timeout_ms, err, errlen) < 0)
            return -1;
    return 0;
}

bool gview_all_answer(const struct gview *v, int timeout_ms)
{
    for (int b = 0; b < nblocks(v); b++) {
        struct admin_conn probe;
        if (v->proc[b] == NULL)
            continue;
        if (admin_open(&probe, v->proc[b]->host, v->proc[b]->port, timeout_ms, NULL, v->tls) < 0)
            return false;
        admin_close(&probe);
    }
    return true;
}

void gview_close(struct gview *v)
{
    for (int b = 0; b < GVIEW_MAX_BLOCKS; b++) {
        if (v->conn[b] != NULL) {
            admin_close(v->conn[b]);
            free(v->conn[b]);
            v->conn[b] = NULL;
        }
    }
}

/* ---- waits ---- */

/* The applied xid a parity process reports for data process dp. */
static bool applied_xid(const struct admin_stats *st, int dp, uint64_t *out)
{
    static const char *const patterns[] = { "dp%d_applied_xid", "applied_xid_dp%d",
                                            "applied_xid_%d" };
    char name[64];
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        snprintf(name, sizeof name, patterns[i], dp);
        if (admin_stat_u64(st, name, out))
            return true;
    }
    return false;
}

static int stats_of(struct gview *v, int b, const char *cmd, struct admin_stats *st,
                    char *err, size_t errlen)
{
    if (admin_stats_cmd(v->conn[b], cmd, st) < 0) {
        snprintf(err, errlen, "%s", v->conn[b]->err);
        return -1;
    }
    return 0;
}

/* 1 (why in err) while recovery process block b has units to rebuild; 2
 * when it serves another data process than the coordinator says. */
static int rebuilding(struct gview *v, int b, char *err, size_t errlen)
{
    struct admin_stats st = { 0 };
    uint64_t done = 0, total = 0, serving, index;
    int j = b - v->k, f = v->layout.view.pp_serves[j];
    char name[128];
    if (stats_of(v, b, "cocytus info", &st, err, errlen) < 0) {
        admin_stats_free(&st);
        return -1;
    }
    int rc = 0;
    if (admin_stat_u64(&st, "index", &index) && index != (uint64_t)j) {
        snprintf(err, errlen, "%s says it is parity process %" PRIu64 " (a wrong process list?)",
                 gview_name(v, b, name, sizeof name), index);
        rc = 2;
    } else if (!admin_stat_u64(&st, "serving_dp", &serving)) {
        snprintf(err, errlen, "dp %d still being taken over: %s does not serve it yet", f,
                 gview_name(v, b, name, sizeof name));
        rc = 1;
    } else if (serving != (uint64_t)f) {
        snprintf(err, errlen, "%s serves data %" PRIu64 ", but the coordinator says it serves "
                 "data %d (a wrong process list?)", gview_name(v, b, name, sizeof name),
                 serving, f);
        rc = 2;
    } else if (!admin_stat_u64(&st, "recovery_units_done", &done) ||
               !admin_stat_u64(&st, "recovery_units_total", &total)) {
        snprintf(err, errlen, "parity %d serves dp %d but its `cocytus info` lacks "
                 "recovery_units_done/total", j, f);
        rc = -1;
    } else if (done != total) {
        snprintf(err, errlen, "dp %d still being rebuilt: %" PRIu64 "/%" PRIu64 " units",
                 f, done, total);
        rc = 1;
    }
    admin_stats_free(&st);
    return rc;
}

int gview_wait_rebuilt(struct gview *v, int max_ms, char *err, size_t errlen)
{
    int64_t deadline = now_ms() + max_ms;
    int max_rounds = max_ms / REBUILT_POLL_MS + 2;
    for (int round = 0; round < max_rounds; round++) {
        int rc = 0;
        for (int b = v->k; b < nblocks(v) && rc == 0; b++)
            if (v->kind[b] == GVIEW_RECOVERY)
                rc = rebuilding(v, b, err, errlen);
        if (rc != 1 || now_ms() >= deadline)
            return rc;
        sleep_ms(REBUILT_POLL_MS);
    }
    return 1;
}

/* Data block i's stable xid; 1 (why in err, unless busy already) if its
 * server still has a record in flight (a recovery process: also one not
 * committed yet, which may wait for its unit to be rebuilt). */
static int read_data_xid(struct gview *v, int i, uint64_t *stable, int busy, char *err,
                         size_t errlen)
{
    struct admin_stats st = { 0 };
    uint64_t xid, committed;
    char name[128];
    bool served = v->kind[i] == GVIEW_SERVED;
    const char *cmd = served ? "cocytus dpinfo" : "cocytus info";
    if (stats_of(v, i, cmd, &st, err, errlen) < 0) {
        admin_stats_free(&st);
        return -1;
    }
    int rc = 0;
    if (!admin_stat_u64(&st, "stable_xid", stable)) {
        snprintf(err, errlen, "%s: `%s` lacks stable_xid", gview_name(v, i, name, sizeof name),
                 cmd);
        rc = -1;
    } else if (admin_stat_u64(&st, "xid", &xid) && xid != *stable) {
        if (!busy)
            snprintf(err, errlen, "%s: xid %" PRIu64 " but stable_xid %" PRIu64,
                     gview_name(v, i, name, sizeof name), xid, *stable);
        rc = 1;
    } else if (served && admin_stat_u64(&st, "committed_xid", &committed) &&
               committed != *stable) {
        if (!busy)
            snprintf(err, errlen, "%s: stable_xid %" PRIu64 " but committed_xid %" PRIu64,
                     gview_name(v, i, name, sizeof name), *stable, committed);
        rc = 1;
    }
    admin_stats_free(&st);
    return rc;
}

/* Reads every data block's stable xid into stable[]; 1 if one still has a
 * record in flight. */
static int read_data_xids(struct gview *v, uint64_t *stable, char *err, size_t errlen)
{
    int busy = 0;
    for (int i = 0; i < v->k; i++) {
        int rc = read_data_xid(v, i, &stable[i], busy, err, errlen);
        if (rc < 0)
            return -1;
        busy |= rc;
    }
    return busy;
}

/* A parity process reports more of data block i applied than the stable
 * xid read before: 1 (busy) when that block's stable xid has moved since
 * (a write became stable between the two reads), 2 when it has not (the
 * parity process is really ahead). */
static int ahead_or_moved(struct gview *v, int i, uint64_t was, char *err, size_t errlen)
{
    uint64_t now;
    char name[128];
    int rc = read_data_xid(v, i, &now, 0, err, errlen);
    if (rc < 0)
        return -1;
    if (rc > 0 || now != was) {
        if (rc == 0)
            snprintf(err, errlen, "%s: stable xid moved from %" PRIu64 " to %" PRIu64,
                     gview_name(v, i, name, sizeof name), was, now);
        return 1;
    }
    return 2;
}

/* 1 if some parity process has not applied up to stable[] yet, 2 if one
 * has applied more than a data block's server has made stable (never
 * right). */
static int check_parity_applied(struct gview *v, const uint64_t *stable, char *err,
                                size_t errlen)
{
    char name[128];
    for (int j = 0; j < v->m; j++) {
        int b = v->k + j;
        if (v->conn[b] == NULL)
            continue;
        struct admin_stats st = { 0 };
        if (stats_of(v, b, "cocytus info", &st, err, errlen) < 0) {
            admin_stats_free(&st);
            return -1;
        }
        int rc = 0;
        for (int i = 0; i < v->k && rc == 0; i++) {
            uint64_t applied;
            if (!gview_backs_up(v, j, i))
                continue;
            if (!applied_xid(&st, i, &applied)) {
                snprintf(err, errlen, "%s: `cocytus info` lacks dp%d_applied_xid",
                         gview_name(v, b, name, sizeof name), i);
                rc = -1;
            } else if (applied > stable[i]) {
                rc = ahead_or_moved(v, i, stable[i], err, errlen);
                if (rc == 2)
                    snprintf(err, errlen, "%s has applied xid %" PRIu64 " of data %d, beyond "
                             "that process's stable xid %" PRIu64 " (a wrong process list, or "
                             "data %d restarted)", gview_name(v, b, name, sizeof name), applied,
                             i, stable[i], i);
            } else if (applied != stable[i]) {
                snprintf(err, errlen, "%s: applied xid %" PRIu64 " of data %d, whose "
                         "stable xid is %" PRIu64, gview_name(v, b, name, sizeof name),
                         applied, i, stable[i]);
                rc = 1;
            }
        }
        admin_stats_free(&st);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int gview_wait_quiet(struct gview *v, int max_ms, char *err, size_t errlen)
{
    int64_t deadline = now_ms() + max_ms;
    int max_rounds = max_ms / QUIET_POLL_MS + 2;
    for (int round = 0; round < max_rounds; round++) {
        int rc = read_data_xids(v, v->stable, err, errlen);
        if (rc == 0)
            rc = check_parity_applied(v, v->stable, err, errlen);
        if (rc <= 0 || rc == 2)
            return rc;
        if (now_ms() >= deadline)
            return 1;
        sleep_ms(QUIET_POLL_MS);
    }
    return 1;
}

int gview_check_unchanged(struct gview *v, char *err, size_t errlen)
{
    uint64_t now[GVIEW_MAX_BLOCKS];
    char name[128];
    int rc = read_data_xids(v, now, err, errlen);
    if (rc != 0)
        return rc;
    for (int i = 0; i < v->k; i++) {
        if (now[i] != v->stable[i]) {
            snprintf(err, errlen, "%s: stable xid moved from %" PRIu64 " to %" PRIu64
                     " during the check", gview_name(v, i, name, sizeof name),
                     v->stable[i], now[i]);
            return 1;
        }
    }
    return 0;
}

/* ---- tables, ranges and regions ---- */

int gview_data_meta(struct gview *v, int i, struct admin_stats *out, char *err, size_t errlen)
{
    char cmd[64];
    if (v->kind[i] == GVIEW_SERVED)
        snprintf(cmd, sizeof cmd, "cocytus meta %d", i);
    else
        snprintf(cmd, sizeof cmd, "cocytus meta");
    return stats_of(v, i, cmd, out, err, errlen);
}

int gview_ranges(struct gview *v, bool full, struct admin_ranges *out, char *err,
                 size_t errlen)
{
    out->n = 0;
    if (full)
        return ranges_add(out, 0, v->region_size) < 0 ? -1 : 0;
    for (int i = 0; i < v->k; i++) {
        if (admin_used(v->conn[i], v->kind[i] == GVIEW_SERVED ? i : -1, out) < 0) {
            snprintf(err, errlen, "%s", v->conn[i]->err);
            return -1;
        }
    }
    ranges_normalize(out);
    if (out->n > 0 && out->v[out->n - 1].off + out->v[out->n - 1].len > v->region_size) {
        snprintf(err, errlen, "a used piece ends at %" PRIu64 ", beyond the region size %"
                 PRIu64, out->v[out->n - 1].off + out->v[out->n - 1].len, v->region_size);
        return -1;
    }
    return 0;
}

int gview_fetch(struct gview *v, uint64_t off, uint64_t len, uint8_t *const *blocks,
                char *err, size_t errlen)
{
    for (int b = 0; b < nblocks(v); b++) {
        if (!gview_present(v, b))
            continue;
        if (admin_region(v->conn[b], off, len, blocks[b]) < 0) {
            snprintf(err, errlen, "%s", v->conn[b]->err);
            return -1;
        }
    }
    return 0;
}
