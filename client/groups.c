/* groups.c - parsing the coordinator's `cocytus groups` lines and the
 * arithmetic of their progress parts (per cent, ETA, a text progress
 * bar).  The line:
 *
 *   group <g> <state> redundancy <n>/<m> view <version> <dps> <pps>
 *     last_serve_ms <x> last_prepare_us <x> [dead_at_ms <x>] [served_at_ms <x>]
 *     [keys_lost_at_ms <x>]
 *     [rec pp<j> dp<f> units <d>/<t> bytes <b> rate <r>]...
 *     [mig dp<f> pp<r> units <d>/<t> bytes <b> rate <r>]...
 *     [reb pp<j> units <d>/<t> bytes <b> rate <r>]...
 *     [reb b<j> items <d>/<t> bytes <b> rate <r>]...
 *     [lost <why...>]
 *
 * The parity states 'm<f>' (handing f's data back) and 'b' (being rebuilt)
 * are kept in gview_group.pp[] and given to the shared view parser as 'x':
 * whatever decodes or verifies sees them as "not parity". */
#include "groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_WORD_MAX 200

/* ---- the view ---- */

static int count_entries(const char *list)
{
    int n = 1;
    for (; *list; list++)
        n += *list == ',';
    return n;
}

/* A non-negative decimal of at most 4 digits making up all of [s, s+n). */
static bool small_index(const char *s, size_t n, int *out)
{
    if (n == 0 || n > 4)
        return false;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* The state of one pps entry; the entry the shared parser understands
 * goes to *word ("p", "s<f>" or "x"). */
static enum group_pp pp_entry(const char *e, size_t n, int *dp, const char **word, size_t *wlen)
{
    *dp = -1;
    *word = e;
    *wlen = n;
    if (n == 1 && e[0] == 'p')
        return GROUP_PP_PARITY;
    if (e[0] == 's' && small_index(e + 1, n - 1, dp))
        return GROUP_PP_SERVING;
    *word = "x";
    *wlen = 1;
    if (n == 1 && e[0] == 'x')
        return GROUP_PP_DEAD;
    if (n == 1 && e[0] == 'b')
        return GROUP_PP_REBUILDING;
    if (e[0] == 'm' && small_index(e + 1, n - 1, dp))
        return GROUP_PP_MIGRATING;
    *dp = -1;
    return GROUP_PP_OTHER;
}

/* Fills out->pp[] and out->pp_dp[] from pps and writes into shared the
 * same list with every state but p and s<f> as x.  -1 when too long. */
static int split_pps(const char *pps, struct gview_group *out, char *shared, size_t cap)
{
    size_t used = 0;
    const char *p = pps;
    for (int j = 0; j < RECOV_MAX_M; j++) {
        size_t n = strcspn(p, ",");
        const char *word;
        size_t wlen;
        if (n == 0)
            return -1;
        out->pp[j] = pp_entry(p, n, &out->pp_dp[j], &word, &wlen);
        if (used + wlen + 2 > cap)
            return -1;
        if (j > 0)
            shared[used++] = ',';
        memcpy(shared + used, word, wlen);
        used += wlen;
        shared[used] = '\0';
        if (p[n] == '\0')
            return 0;
        p += n + 1;
    }
    return -1;
}

/* ---- progress parts ---- */

/* One "rec ...", "mig ...", "reb ..." part at p: into *out, its length in
 * *used.  0; 1 when p is no progress part; -1 when one is malformed. */
static int parse_progress(const char *p, struct group_progress *out, int *used)
{
    unsigned long long done, total, bytes, rate;
    int a = -1, b = -1, n = 0;
    memset(out, 0, sizeof *out);
    out->dp = -1;
    if (strncmp(p, "rec ", 4) == 0) {
        out->kind = PROGRESS_REC;
        if (sscanf(p, "rec pp%d dp%d units %llu/%llu bytes %llu rate %llu%n", &a, &b, &done,
                   &total, &bytes, &rate, &n) != 6 || n == 0)
            return -1;
        out->pp = a;
        out->dp = b;
    } else if (strncmp(p, "mig ", 4) == 0) {
        out->kind = PROGRESS_MIG;
        if (sscanf(p, "mig dp%d pp%d units %llu/%llu bytes %llu rate %llu%n", &b, &a, &done,
                   &total, &bytes, &rate, &n) != 6 || n == 0)
            return -1;
        out->pp = a;
        out->dp = b;
    } else if (strncmp(p, "reb pp", 6) == 0) {
        out->kind = PROGRESS_REB;
        if (sscanf(p, "reb pp%d units %llu/%llu bytes %llu rate %llu%n", &a, &done, &total,
                   &bytes, &rate, &n) != 5 || n == 0)
            return -1;
        out->pp = a;
    } else if (strncmp(p, "reb b", 5) == 0) {
        out->kind = PROGRESS_REB_PBR;
        if (sscanf(p, "reb b%d items %llu/%llu bytes %llu rate %llu%n", &a, &done, &total,
                   &bytes, &rate, &n) != 5 || n == 0)
            return -1;
        out->pp = a;
    } else {
        return 1;
    }
    if (out->pp < 0 || (out->kind <= PROGRESS_MIG && out->dp < 0))
        return -1;
    out->done = done;
    out->total = total;
    out->bytes = bytes;
    out->rate = rate;
    *used = n;
    return 0;
}

/* A "<name> <number>" pair at p for one of the optional numbers. */
static int parse_number_word(const char *p, struct gview_group *out, int *used)
{
    unsigned long long v;
    int n = 0;
    if (sscanf(p, "dead_at_ms %llu%n", &v, &n) == 1 && n > 0)
        out->dead_at_ms = v;
    else if (sscanf(p, "served_at_ms %llu%n", &v, &n) == 1 && n > 0)
        out->served_at_ms = v;
    else if (sscanf(p, "keys_lost_at_ms %llu%n", &v, &n) == 1 && n > 0)
        out->keys_lost_at_ms = v;
    else
        return 1;
    *used = n;
    return 0;
}

/* Everything after last_prepare_us. */
static int parse_tail(const char *p, struct gview_group *out)
{
    while (*p != '\0') {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (strncmp(p, "lost ", 5) == 0 || strcmp(p, "lost") == 0) {
            snprintf(out->lost, sizeof out->lost, "%s", p[4] ? p + 5 : "no reason given");
            return 0;
        }
        struct group_progress pg;
        int used = 0;
        int rc = parse_number_word(p, out, &used);
        if (rc == 1) {
            rc = parse_progress(p, &pg, &used);
            if (rc == 0 && out->nprogress < GROUPS_MAX_PROGRESS)
                out->progress[out->nprogress++] = pg;
        }
        if (rc < 0)
            return -1;
        if (rc == 0)
            p += used;
        else
            p += strcspn(p, " ");    /* a word of a newer coordinator */
    }
    return 0;
}

int gview_parse_group(const char *line, struct gview_group *out)
{
    char dps[VIEW_WORD_MAX], pps[VIEW_WORD_MAX], shared[VIEW_WORD_MAX + 8];
    char text[2 * VIEW_WORD_MAX + 40];
    unsigned long long version, serve_ms, prepare_us;
    int used = 0;
    memset(out, 0, sizeof *out);
    char members[VIEW_WORD_MAX];
    if (sscanf(line, "group %d %15s redundancy %d/%d view pbr primary m%d members %199s%n",
               &out->group, out->state, &out->redundancy, &out->target, &out->pbr_primary,
               members, &used) == 6 && used > 0) {
        if (out->group < 0 || out->redundancy < 0 || out->target < 0)
            return -1;
        out->pbr = true;
        return parse_tail(line + used, out);
    }
    used = 0;
    if (sscanf(line, "group %d %15s redundancy %d/%d view %llu %199s %199s last_serve_ms %llu "
               "last_prepare_us %llu%n", &out->group, out->state, &out->redundancy,
               &out->target, &version, dps, pps, &serve_ms, &prepare_us, &used) != 9 ||
        used == 0 || out->group < 0 || out->redundancy < 0 || out->target < 0)
        return -1;
    int m = count_entries(pps);
    if (m > RECOV_MAX_M || split_pps(pps, out, shared, sizeof shared) < 0)
        return -1;
    snprintf(text, sizeof text, "%llu %s %s", version, dps, shared);
    if (group_view_parse(&out->view, count_entries(dps), m, text, strlen(text)) < 0)
        return -1;
    for (int j = 0; j < m; j++)
        if (out->pp[j] == GROUP_PP_MIGRATING && out->pp_dp[j] >= out->view.k)
            return -1;
    out->last_serve_ms = serve_ms;
    out->last_prepare_us = prepare_us;
    return parse_tail(line + used, out);
}

/* ---- health ---- */

bool gview_group_healthy(const struct gview_group *gg)
{
    if (gg->pbr)
        return strcmp(gg->state, "healthy") == 0 && gg->redundancy >= gg->target;
    for (int i = 0; i < gg->view.k; i++)
        if (gg->view.dp_server[i] != -1)
            return false;
    for (int j = 0; j < gg->view.m; j++)
        if (gg->pp[j] != GROUP_PP_PARITY)
            return false;
    return gg->lost[0] == '\0';
}

bool group_at_full_redundancy(const struct gview_group *gg)
{
    if (strcmp(gg->state, "healthy") != 0 || !gview_group_healthy(gg) ||
        gg->redundancy < gg->target)
        return false;
    for (int n = 0; n < gg->nprogress; n++)
        if (!progress_done(&gg->progress[n]))
            return false;
    return true;
}

bool group_migrating_to(const struct gview_group *gg, int f)
{
    for (int j = 0; j < gg->view.m; j++)
        if (gg->pp[j] == GROUP_PP_MIGRATING && gg->pp_dp[j] == f)
            return true;
    return false;
}

/* ---- progress ---- */

bool progress_done(const struct group_progress *p)
{
    return p->total > 0 && p->done >= p->total;
}

double progress_percent(const struct group_progress *p)
{
    if (p->total == 0)
        return 0.0;
    if (p->done >= p->total)
        return 100.0;
    double pct = 100.0 * (double)p->done / (double)p->total;
    return pct > 99.9 ? 99.9 : pct;    /* never shows 100.0 before the end */
}

double progress_eta_s(const struct group_progress *p)
{
    if (p->rate == 0 || p->total == 0 || p->done >= p->total)
        return p->total > 0 && p->done >= p->total ? 0.0 : -1.0;
    double left = (double)(p->total - p->done);
    double bytes_left;
    if (p->kind == PROGRESS_REB_PBR) {
        if (p->done == 0 || p->bytes == 0)
            return -1.0;
        bytes_left = left * (double)p->bytes / (double)p->done;
    } else {
        bytes_left = left * RECOV_UNIT;
    }
    return bytes_left / (double)p->rate;
}

const char *progress_bar(const struct group_progress *p, int width, char *buf, size_t cap)
{
    if (cap < 3 || width < 1) {
        if (cap > 0)
            buf[0] = '\0';
        return buf;
    }
    if ((size_t)width + 3 > cap)
        width = (int)cap - 3;
    int full = (int)(progress_percent(p) * width / 100.0);
    if (full > width)
        full = width;
    buf[0] = '[';
    for (int i = 0; i < width; i++)
        buf[1 + i] = i < full ? '#' : '.';
    buf[width + 1] = ']';
    buf[width + 2] = '\0';
    return buf;
}

const char *progress_what(const struct group_progress *p, char *buf, size_t cap)
{
    bool done = progress_done(p);
    switch (p->kind) {
    case PROGRESS_REC:
        snprintf(buf, cap, "parity %d %s data %d", p->pp, done ? "rebuilt" : "rebuilding", p->dp);
        break;
    case PROGRESS_MIG:
        snprintf(buf, cap, "parity %d %s data %d to its data process", p->pp,
                 done ? "handed back" : "handing back", p->dp);
        break;
    case PROGRESS_REB:
        snprintf(buf, cap, "parity %d %s", p->pp, done ? "rebuilt" : "being rebuilt");
        break;
    case PROGRESS_REB_PBR:
        snprintf(buf, cap, "backup %d %s", p->pp, done ? "rebuilt" : "being rebuilt");
        break;
    }
    return buf;
}

const char *progress_text(const struct group_progress *p, int width, char *buf, size_t cap)
{
    char what[96], bar[PROGRESS_BAR_MAX + 4], eta[64];
    const char *unit = p->kind == PROGRESS_REB_PBR ? "items" : "units";
    progress_what(p, what, sizeof what);
    if (p->total == 0) {
        snprintf(buf, cap, "%s: no progress reported yet", what);
        return buf;
    }
    progress_bar(p, width, bar, sizeof bar);
    double secs = progress_eta_s(p);
    if (progress_done(p))
        snprintf(eta, sizeof eta, "done");
    else if (secs < 0)
        snprintf(eta, sizeof eta, "ETA unknown (no rate yet)");
    else
        snprintf(eta, sizeof eta, "%.2f MB/s, ETA %.1f s", (double)p->rate / 1e6, secs);
    snprintf(buf, cap, "%s %s %5.1f%%  %llu/%llu %s, %llu bytes transferred, %s", what, bar,
             progress_percent(p), (unsigned long long)p->done, (unsigned long long)p->total,
             unit, (unsigned long long)p->bytes, eta);
    return buf;
}
