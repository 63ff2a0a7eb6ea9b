/* mem.c - cocytus-cli mem and status.
 *
 * mem: per process, region bytes in use, metadata bytes and RSS (from
 * `cocytus info`; RSS falls back to VmRSS of the endpoints pid in /proc),
 * then totals per role and overall, and with --raw-bytes N the ratio of
 * total RSS to N raw value bytes.
 * status: whether each process answers, with its xids and item count,
 * then the epoch and the coordinator's view of membership (cli.c). */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"

#define MAX_ROLES 8
#define MIB (1024.0 * 1024.0)

struct mem_row {
    bool have_region, have_meta, have_rss;
    uint64_t region, meta, rss;
    const char *rss_source;      /* "info" or "proc" */
};

struct mem_total {
    char role[PROC_ROLE_MAX];
    int procs;
    uint64_t region, meta, rss;
};

/* VmRSS of a local pid in bytes; false when unknown. */
static bool proc_rss(long pid, uint64_t *out)
{
    char path[64], line[256];
    if (pid <= 0)
        return false;
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool found = false;
    for (int i = 0; i < 200 && !found && fgets(line, sizeof line, f) != NULL; i++) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            *out = (uint64_t)kb * 1024;
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* Fills row from the process's `cocytus info`, then /proc. */
static void measure(const struct proc_info *p, const struct cli_opts *o, struct mem_row *row,
                    char *err, size_t errlen)
{
    struct admin_conn *c = malloc(sizeof *c);
    struct admin_stats st = { 0 };
    memset(row, 0, sizeof *row);
    err[0] = '\0';
    if (c != NULL && admin_open(c, p->host, p->port, o->timeout_ms, o->secret, o->tls) == 0 &&
        admin_stats_cmd(c, "cocytus info", &st) == 0) {
        /* A parity process reports how far its region has been written. */
        row->have_region = admin_stat_u64(&st, "region_used", &row->region) ||
                           admin_stat_u64(&st, "region_touched", &row->region);
        row->have_meta = admin_stat_u64(&st, "meta_bytes", &row->meta);
        row->have_rss = admin_stat_u64(&st, "rss", &row->rss) && row->rss > 0;
        row->rss_source = "info";
    } else if (c != NULL) {
        snprintf(err, errlen, "%s", c->err);
    }
    if (!row->have_rss && proc_rss(p->pid, &row->rss)) {
        row->have_rss = true;
        row->rss_source = "proc";
    }
    admin_stats_free(&st);
    if (c != NULL)
        admin_close(c);
    free(c);
}

static void print_num(bool have, uint64_t v)
{
    if (have)
        printf(" %14" PRIu64, v);
    else
        printf(" %14s", "-");
}

static struct mem_total *total_for(struct mem_total *t, int *nt, const char *role)
{
    for (int i = 0; i < *nt; i++)
        if (strcmp(t[i].role, role) == 0)
            return &t[i];
    if (*nt == MAX_ROLES)
        return &t[MAX_ROLES - 1];
    memset(&t[*nt], 0, sizeof t[*nt]);
    snprintf(t[*nt].role, sizeof t[*nt].role, "%s", role);
    return &t[(*nt)++];
}

static void add_total(struct mem_total *t, const struct mem_row *row)
{
    t->procs++;
    t->region += row->have_region ? row->region : 0;
    t->meta += row->have_meta ? row->meta : 0;
    t->rss += row->have_rss ? row->rss : 0;
}

static void print_total(const char *label, const struct mem_total *t)
{
    printf("total %-8s %3d procs  region_used %14" PRIu64 "  meta_bytes %12" PRIu64
           "  rss %14" PRIu64 " (%.1f MiB)\n", label, t->procs, t->region, t->meta, t->rss,
           (double)t->rss / MIB);
}

int cmd_mem(const struct proc_list *l, const struct cli_opts *o)
{
    struct mem_total totals[MAX_ROLES], all = { .role = "all" };
    int nt = 0, code = CLI_OK;
    char err[ADMIN_ERR_MAX], addr[PROC_HOST_MAX + 8];
    printf("%-7s %5s %5s  %-21s %8s %14s %14s %14s  %s\n", "role", "group", "index",
           "address", "pid", "region_used", "meta_bytes", "rss", "rss_from");
    for (int i = 0; i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        if (o->group >= 0 && p->group != o->group)
            continue;
        struct mem_row row;
        measure(p, o, &row, err, sizeof err);
        snprintf(addr, sizeof addr, "%s:%d", p->host, p->port);
        printf("%-7s %5d %5d  %-21s %8ld", p->role, p->group, p->index, addr, p->pid);
        print_num(row.have_region, row.region);
        print_num(row.have_meta, row.meta);
        print_num(row.have_rss, row.rss);
        printf("  %s\n", row.have_rss ? row.rss_source : "?");
        if (err[0] != '\0' && !row.have_rss)
            printf("        (%s)\n", err);
        if (!row.have_rss)
            code = CLI_UNREACHABLE;
        add_total(total_for(totals, &nt, p->role), &row);
        add_total(&all, &row);
    }
    for (int i = 0; i < nt; i++)
        print_total(totals[i].role, &totals[i]);
    print_total("all", &all);
    if (o->raw_bytes > 0)
        printf("rss/raw %.3f (total rss %" PRIu64 " bytes, raw %" PRIu64 " bytes)\n",
               (double)all.rss / (double)o->raw_bytes, all.rss, o->raw_bytes);
    if (code != CLI_OK)
        printf("mem: some processes gave no RSS; totals are incomplete\n");
    return code;
}

/* ---- status ---- */

/* " items 12 xid 40 stable_xid 40" from whichever stats the process has. */
static void print_info_summary(const struct admin_stats *st)
{
    static const char *const names[] = { "items", "xid", "stable_xid", "region_used" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = admin_stat_str(st, names[i]);
        if (v != NULL)
            printf(" %s %s", names[i], v);
    }
    for (int i = 0; i < st->n; i++)
        if (strstr(st->v[i].name, "applied_xid") != NULL)
            printf(" %s %s", st->v[i].name, st->v[i].value);
}

int cmd_status(const struct proc_list *l, const struct cli_opts *o)
{
    int code = CLI_OK;
    struct admin_conn *c = malloc(sizeof *c);
    if (c == NULL)
        return CLI_UNREACHABLE;
    for (int i = 0; i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        if (o->group >= 0 && p->group != o->group)
            continue;
        printf("%-7s group %d index %d node %d %s:%d pid %ld:", p->role, p->group, p->index,
               p->node, p->host, p->port, p->pid);
        if (admin_open(c, p->host, p->port, o->timeout_ms, o->secret, o->tls) < 0) {
            printf(" DOWN (%s)\n", c->err);
            code = CLI_UNREACHABLE;
            continue;
        }
        struct admin_stats st = { 0 };
        char line[256];
        if (admin_stats_cmd(c, "cocytus info", &st) == 0) {
            printf(" up");
            print_info_summary(&st);
            printf("\n");
        } else if (admin_send_line(c, "version") == 0 &&
                   admin_read_line(c, line, sizeof line) == 0 &&
                   strncmp(line, "VERSION", 7) == 0) {
            printf(" up (%s)\n", line);
        } else {
            printf(" NOT ANSWERING (%s)\n", c->err);
            code = CLI_UNREACHABLE;
        }
        admin_stats_free(&st);
        admin_close(c);
    }
    free(c);
    int cluster_code = cli_cluster_status(l, o);
    return code != CLI_OK ? code : cluster_code;
}
