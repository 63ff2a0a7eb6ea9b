/* gview.c - one coding group as cocytus-cli sees it: connections to its
 * processes, the quiescence wait before a check, and region fetches. */
#include "gview.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUIET_POLL_MS 10

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

const char *gview_name(const struct gview *v, int block, char *buf, size_t cap)
{
    const struct proc_info *p = v->proc[block];
    snprintf(buf, cap, "%s %d (%s:%d)", p->role, p->index, p->host, p->port);
    return buf;
}

/* Fills v->proc from the list: data 0..k-1, then parity 0..m-1. */
static int find_procs(struct gview *v, const struct proc_list *l, char *err, size_t errlen)
{
    for (int b = 0; b < nblocks(v); b++) {
        bool data = b < v->k;
        int idx = data ? b : b - v->k;
        v->proc[b] = procs_find(l, v->group, data ? "data" : "parity", idx);
        if (v->proc[b] == NULL) {
            snprintf(err, errlen, "group %d has no %s process %d in the process list",
                     v->group, data ? "data" : "parity", idx);
            return -1;
        }
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
    if (admin_open(v->conn[b], p->host, p->port, timeout_ms) < 0) {
        snprintf(err, errlen, "%s", v->conn[b]->err);
        return -1;
    }
    return 0;
}

/* k, m and region_size from the first data process's `cocytus info`. */
static int read_shape(struct gview *v, struct admin_conn *c, char *err, size_t errlen)
{
    struct admin_stats st = { 0 };
    uint64_t k = 0, m = 0, r = 0;
    int rc = admin_stats_cmd(c, "cocytus info", &st);
    if (rc < 0)
        snprintf(err, errlen, "%s", c->err);
    else if (!admin_stat_u64(&st, "k", &k) || !admin_stat_u64(&st, "m", &m) ||
             !admin_stat_u64(&st, "region_size", &r)) {
        snprintf(err, errlen, "%s:%d: `cocytus info` lacks k, m or region_size", c->host, c->port);
        rc = -1;
    } else if (k < 1 || m < 1 || k + m > GVIEW_MAX_BLOCKS) {
        snprintf(err, errlen, "%s:%d: unsupported k=%" PRIu64 " m=%" PRIu64, c->host, c->port, k, m);
        rc = -1;
    }
    admin_stats_free(&st);
    v->k = (int)k;
    v->m = (int)m;
    v->region_size = r;
    return rc;
}

int gview_open(struct gview *v, const struct proc_list *l, int group, int timeout_ms,
               char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->group = group;
    const struct proc_info *first = procs_find(l, group, "data", 0);
    if (first == NULL) {
        snprintf(err, errlen, "group %d has no data process 0", group);
        return -1;
    }
    struct admin_conn probe;
    if (admin_open(&probe, first->host, first->port, timeout_ms) < 0) {
        snprintf(err, errlen, "%s", probe.err);
        return -1;
    }
    int rc = read_shape(v, &probe, err, errlen);
    admin_close(&probe);
    if (rc < 0 || find_procs(v, l, err, errlen) < 0)
        return -1;
    for (int b = 0; b < nblocks(v); b++)
        if (open_conn(v, b, timeout_ms, err, errlen) < 0)
            return -1;
    return 0;
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

/* ---- quiescence ---- */

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

static int info_of(struct gview *v, int b, struct admin_stats *st, char *err, size_t errlen)
{
    if (admin_stats_cmd(v->conn[b], "cocytus info", st) < 0) {
        snprintf(err, errlen, "%s", v->conn[b]->err);
        return -1;
    }
    return 0;
}

/* Reads every data process's stable xid into stable[]; 1 if one still has a
 * record in flight. */
static int read_data_xids(struct gview *v, uint64_t *stable, char *err, size_t errlen)
{
    int busy = 0;
    char name[128];
    for (int i = 0; i < v->k; i++) {
        struct admin_stats st = { 0 };
        uint64_t xid;
        if (info_of(v, i, &st, err, errlen) < 0)
            return -1;
        bool ok = admin_stat_u64(&st, "stable_xid", &stable[i]);
        if (ok && admin_stat_u64(&st, "xid", &xid) && xid != stable[i] && !busy) {
            snprintf(err, errlen, "%s: xid %" PRIu64 " but stable_xid %" PRIu64,
                     gview_name(v, i, name, sizeof name), xid, stable[i]);
            busy = 1;
        }
        admin_stats_free(&st);
        if (!ok) {
            snprintf(err, errlen, "%s: `cocytus info` lacks stable_xid",
                     gview_name(v, i, name, sizeof name));
            return -1;
        }
    }
    return busy;
}

/* 1 if some parity process has not applied up to stable[] yet, 2 if one
 * has applied more than a data process has made stable (never right). */
static int check_parity_applied(struct gview *v, const uint64_t *stable, char *err,
                                size_t errlen)
{
    char name[128];
    for (int j = 0; j < v->m; j++) {
        int b = v->k + j;
        struct admin_stats st = { 0 };
        if (info_of(v, b, &st, err, errlen) < 0)
            return -1;
        int rc = 0;
        for (int i = 0; i < v->k && rc == 0; i++) {
            uint64_t applied;
            if (!applied_xid(&st, i, &applied)) {
                snprintf(err, errlen, "%s: `cocytus info` lacks dp%d_applied_xid",
                         gview_name(v, b, name, sizeof name), i);
                rc = -1;
            } else if (applied > stable[i]) {
                snprintf(err, errlen, "%s has applied xid %" PRIu64 " of data %d, beyond that "
                         "process's stable xid %" PRIu64 " (a wrong process list, or data %d "
                         "restarted)", gview_name(v, b, name, sizeof name), applied, i,
                         stable[i], i);
                rc = 2;
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

/* ---- ranges and regions ---- */

int gview_ranges(struct gview *v, bool full, struct admin_ranges *out, char *err,
                 size_t errlen)
{
    out->n = 0;
    if (full)
        return ranges_add(out, 0, v->region_size) < 0 ? -1 : 0;
    for (int i = 0; i < v->k; i++) {
        if (admin_used(v->conn[i], -1, out) < 0) {
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
        if (admin_region(v->conn[b], off, len, blocks[b]) < 0) {
            snprintf(err, errlen, "%s", v->conn[b]->err);
            return -1;
        }
    }
    return 0;
}
