/* check.c - cocytus-cli verify and decode-check.
 *
 * verify: for every coding group, each data process's metadata (count,
 * digest, allocator digest, used bytes) must equal every parity process's
 * backup of it, and over the used byte ranges (or the whole region with
 * --full) each parity region must equal codec_encode of the K data regions,
 * byte for byte.
 *
 * decode-check: over the same ranges, for every choice of K survivors among
 * the N regions, codec_decode must rebuild the erased ones exactly (the
 * offline form of what recovery does).
 *
 * Both wait until the group is quiescent first and, if a data process's
 * stable xid moves during the check, start over (a few times at most).
 *
 * A degraded group (online recovery, docs/recovery.md): with a coordinator
 * the group's layout comes from its `cocytus groups` line.  A data block
 * served by a recovery process is read through it; only parity processes
 * in parity state are parity blocks; dead ones are absent.  The check
 * waits for every recovery process to finish rebuilding (its region is the
 * served process's data only then), compares every live parity block with
 * the code of the K data blocks and every live backup table with the table
 * of the data block's server, and decode-check tries every K of the
 * present blocks.  A lost group is a failure; a group whose layout changes
 * during the check is checked again.
 *
 * verify of a primary-backup group: once every backup has applied the
 * primary's stable xid, each backup's count and digest of live items
 * (`cocytus meta`) must equal the primary's. */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"
#include "codec.h"
#include "gview.h"

#define MAX_ATTEMPTS 3          /* starts of a check whose group kept changing */
#define MAX_PRINTED 20          /* problem lines printed per group */
#define PROBLEM_LEN 320
#define COALESCE_GAP 4096       /* fetch two used ranges at once when this close */
#define MAX_COMBINATIONS 100000
#define LAYOUT_POLL_MS 50       /* polling the coordinator while a takeover runs */
#define VIEW_CHANGE_WAIT_MS 1000 /* after an unanswered request: does the view change? */

enum attempt_result { ATTEMPT_DONE, ATTEMPT_RETRY };

/* Problems of one attempt: printed only once the attempt is known valid. */
struct problems {
    int n;
    char line[MAX_PRINTED][PROBLEM_LEN];
};

static void problem(struct problems *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void problem(struct problems *p, const char *fmt, ...)
{
    if (p->n < MAX_PRINTED) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->line[p->n], PROBLEM_LEN, fmt, ap);
        va_end(ap);
    }
    p->n++;
}

static void print_problems(const struct problems *p, int group)
{
    int shown = p->n < MAX_PRINTED ? p->n : MAX_PRINTED;
    for (int i = 0; i < shown; i++)
        printf("group %d: %s\n", group, p->line[i]);
    if (p->n > shown)
        printf("group %d: ... and %d more problems\n", group, p->n - shown);
}

/* ---- buffers ---- */

struct bufs {
    int n;
    uint8_t *blk[GVIEW_MAX_BLOCKS];    /* fetched regions */
    uint8_t *work[GVIEW_MAX_BLOCKS];   /* encode / decode output */
};

static int bufs_alloc(struct bufs *b, int n, size_t size)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    for (int i = 0; i < n; i++) {
        b->blk[i] = malloc(size);
        b->work[i] = malloc(size);
        if (b->blk[i] == NULL || b->work[i] == NULL)
            return -1;
    }
    return 0;
}

static void bufs_free(struct bufs *b)
{
    for (int i = 0; i < b->n; i++) {
        free(b->blk[i]);
        free(b->work[i]);
    }
}

/* ---- byte comparison ---- */

struct diff {
    uint64_t count;      /* differing bytes */
    uint64_t first;      /* offset within the chunk */
    uint64_t last;
};

static bool compare_bytes(const uint8_t *want, const uint8_t *have, size_t len, struct diff *d)
{
    if (memcmp(want, have, len) == 0)
        return true;
    memset(d, 0, sizeof *d);
    for (size_t x = 0; x < len; x++) {
        if (want[x] != have[x]) {
            if (d->count == 0)
                d->first = x;
            d->last = x;
            d->count++;
        }
    }
    return false;
}

/* Merges ranges closer than COALESCE_GAP, so a fragmented region is fetched
 * in few requests (parity holds for every byte, so the gaps check too). */
static void coalesce(struct admin_ranges *r)
{
    if (r->n == 0)
        return;
    size_t w = 0;
    for (size_t i = 1; i < r->n; i++) {
        uint64_t end = r->v[w].off + r->v[w].len;
        if (r->v[i].off <= end + COALESCE_GAP)
            r->v[w].len = r->v[i].off + r->v[i].len - r->v[w].off;
        else
            r->v[++w] = r->v[i];
    }
    r->n = w + 1;
}

/* ---- verify ---- */

struct verify_sum {
    uint64_t items;
    uint64_t bytes;
};

static bool meta_field_equal(const struct admin_stats *a, const struct admin_stats *b,
                             const char *name)
{
    const char *x = admin_stat_str(a, name), *y = admin_stat_str(b, name);
    return x != NULL && y != NULL && strcmp(x, y) == 0;
}

/* Compares data block i's table (its server's) with every backup of it
 * that a live parity process keeps. */
static int compare_meta_of(struct gview *v, int i, struct problems *pr, struct verify_sum *sum,
                           char *err, size_t errlen)
{
    static const char *const fields[] = { "count", "digest", "alloc_digest", "used_bytes" };
    struct admin_stats dm = { 0 }, pm = { 0 };
    char name[128], cmd[64];
    int rc = 0;
    if (gview_data_meta(v, i, &dm, err, errlen) < 0) {
        admin_stats_free(&dm);
        return -1;
    }
    uint64_t count = 0;
    admin_stat_u64(&dm, "count", &count);
    sum->items += count;
    snprintf(cmd, sizeof cmd, "cocytus meta %d", i);
    for (int j = 0; j < v->m && rc == 0; j++) {
        int b = v->k + j;
        if (!gview_backs_up(v, j, i))
            continue;
        if (admin_stats_cmd(v->conn[b], cmd, &pm) < 0) {
            snprintf(err, errlen, "%s", v->conn[b]->err);
            rc = -1;
            break;
        }
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            if (admin_stat_str(&dm, fields[f]) == NULL && admin_stat_str(&pm, fields[f]) == NULL)
                continue;    /* a field neither side reports */
            if (!meta_field_equal(&dm, &pm, fields[f])) {
                const char *x = admin_stat_str(&dm, fields[f]), *y = admin_stat_str(&pm, fields[f]);
                problem(pr, "%s: backup metadata of data %d differs: %s %s, data has %s",
                        gview_name(v, b, name, sizeof name), i, fields[f],
                        y ? y : "(missing)", x ? x : "(missing)");
            }
        }
    }
    admin_stats_free(&dm);
    admin_stats_free(&pm);
    return rc;
}

/* A parity process that stopped applying a data process's records says so
 * in `cocytus info` (dp<i>_diverged 1). */
static int check_diverged(struct gview *v, struct problems *pr, char *err, size_t errlen)
{
    char name[128], stat[48];
    for (int j = 0; j < v->m; j++) {
        int b = v->k + j;
        struct admin_stats st = { 0 };
        if (v->conn[b] == NULL)
            continue;    /* dead */
        if (admin_stats_cmd(v->conn[b], "cocytus info", &st) < 0) {
            snprintf(err, errlen, "%s", v->conn[b]->err);
            admin_stats_free(&st);
            return -1;
        }
        for (int i = 0; i < v->k; i++) {
            uint64_t diverged = 0;
            if (!gview_backs_up(v, j, i))
                continue;
            snprintf(stat, sizeof stat, "dp%d_diverged", i);
            if (admin_stat_u64(&st, stat, &diverged) && diverged != 0)
                problem(pr, "%s: stopped applying records of data %d (diverged; see its log)",
                        gview_name(v, b, name, sizeof name), i);
        }
        admin_stats_free(&st);
    }
    return 0;
}

/* Encodes the fetched data chunk and compares each parity chunk that is
 * present (a dead parity process or a recovery process has none). */
static void compare_parity_chunk(struct gview *v, const struct codec *codec, struct bufs *b,
                                 uint64_t off, size_t len, struct problems *pr)
{
    char name[128];
    codec_encode(codec, b->blk, b->work, len);
    for (int j = 0; j < v->m; j++) {
        struct diff d;
        if (!gview_present(v, v->k + j))
            continue;
        const uint8_t *have = b->blk[v->k + j];
        if (compare_bytes(b->work[j], have, len, &d))
            continue;
        problem(pr, "%s: %" PRIu64 " parity bytes differ in [%" PRIu64 ", %" PRIu64
                "); first at %" PRIu64 ": expected 0x%02x, has 0x%02x",
                gview_name(v, v->k + j, name, sizeof name), d.count, off + d.first,
                off + d.last + 1, off + d.first, b->work[j][d.first], have[d.first]);
    }
}

/* Calls fn for each chunk of the ranges; stops on a fetch error. */
typedef void (*chunk_fn)(struct gview *v, const struct codec *codec, struct bufs *b,
                         uint64_t off, size_t len, struct problems *pr);

static int for_each_chunk(struct gview *v, const struct admin_ranges *r, uint64_t chunk,
                          const struct codec *codec, struct bufs *b, chunk_fn fn,
                          struct problems *pr, uint64_t *bytes, char *err, size_t errlen)
{
    for (size_t i = 0; i < r->n; i++) {
        uint64_t end = r->v[i].off + r->v[i].len;
        for (uint64_t off = r->v[i].off; off < end; off += chunk) {
            size_t len = (size_t)(end - off < chunk ? end - off : chunk);
            if (gview_fetch(v, off, len, b->blk, err, errlen) < 0)
                return -1;
            fn(v, codec, b, off, len, pr);
            *bytes += len;
        }
    }
    return 0;
}

/* ---- the group's layout (the coordinator's `cocytus groups`) ---- */

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

/* The coordinator's line for group g into *out.  1 got it; 0 no layout
 * applies (no coordinator, or one that does not report coding groups:
 * every block is its own process, as before online recovery); -1 the
 * coordinator does not answer (why in err). */
static int fetch_layout(const struct cli_opts *o, int g, struct gview_group *out, char *err,
                        size_t errlen)
{
    if (o->coord_port <= 0)
        return 0;
    struct admin_conn *c = malloc(sizeof *c);
    struct gview_groups gs = { 0 };
    int rc = -1;
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (admin_open(c, o->coord_host, o->coord_port, o->timeout_ms, o->secret, o->tls) < 0 ||
        (rc = gview_read_groups(c, &gs)) < 0) {
        snprintf(err, errlen, "%s", c->err);
        rc = -1;
    } else if (rc == 1) {
        rc = 0;
    } else {
        const struct gview_group *gg = gview_groups_find(&gs, g);
        if (gg != NULL)
            *out = *gg;
        rc = gg != NULL;
    }
    gview_groups_free(&gs);
    admin_close(c);
    free(c);
    return rc;
}

/* A data block without a server: a takeover is running (or it is lost). */
static int unserved_dp(const struct gview_group *gg)
{
    for (int i = 0; i < gg->view.k; i++)
        if (gg->view.dp_server[i] < -1)
            return i;
    return -1;
}

/* A data block whose data is being handed back to its restarted data
 * process: that process's region is incomplete until the migration ends. */
static int migrating_dp(const struct gview_group *gg)
{
    for (int i = 0; i < gg->view.k; i++)
        if (group_migrating_to(gg, i))
            return i;
    return -1;
}

/* The layout to check group g with, once no takeover is running (polled
 * up to --quiet-wait).  *layout is NULL when none applies.  CLI_OK, or the
 * exit code after a printed verdict. */
static int settled_layout(const struct cli_opts *o, int g, struct gview_group *gg,
                          const struct gview_group **layout)
{
    char err[512];
    int64_t deadline = mono_ms() + o->quiet_ms;
    *layout = NULL;
    for (;;) {
        int rc = fetch_layout(o, g, gg, err, sizeof err);
        if (rc < 0) {
            printf("group %d: coordinator %s:%d not answering (%s); taking the layout from "
                   "the process list\n", g, o->coord_host, o->coord_port, err);
            return CLI_OK;
        }
        if (rc == 0)
            return CLI_OK;
        if (strcmp(gg->state, "lost") == 0 || gg->lost[0] != '\0') {
            printf("group %d: LOST: %s (the group lost data; nothing else is checked)\n", g,
                   gg->lost[0] ? gg->lost : "no process serves a data block");
            return CLI_MISMATCH;
        }
        int f = unserved_dp(gg), mig = migrating_dp(gg);
        if (f < 0 && mig < 0 && strcmp(gg->state, "taking-over") != 0) {
            *layout = gg;
            return CLI_OK;
        }
        if (mono_ms() >= deadline) {
            char why[96];
            if (f >= 0)
                snprintf(why, sizeof why, "data %d has no server yet (being taken over)", f);
            else if (mig >= 0)
                snprintf(why, sizeof why, "data %d is being handed back to its data process "
                         "(migration running)", mig);
            else
                snprintf(why, sizeof why, "the coordinator reports a takeover in progress");
            printf("group %d: NOT READY after %d ms: %s; retry when the %s is done\n", g,
                   o->quiet_ms, why, f < 0 && mig >= 0 ? "migration" : "takeover");
            return CLI_UNREACHABLE;
        }
        pause_ms(LAYOUT_POLL_MS);
    }
}

/* Opens the group (in the coordinator's layout, when there is one), waits
 * until every recovery process has rebuilt its units and the group is
 * quiescent; prints why not and returns the exit code, or CLI_OK when
 * ready. */
static int prepare_group(struct gview *v, const struct proc_list *l, int g,
                         const struct cli_opts *o)
{
    char err[512];
    struct gview_group gg;
    const struct gview_group *layout;
    memset(v, 0, sizeof *v);
    int code = settled_layout(o, g, &gg, &layout);
    if (code != CLI_OK)
        return code;
    if (gview_open(v, l, g, layout, o->timeout_ms, err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        return CLI_UNREACHABLE;
    }
    int r = gview_wait_rebuilt(v, o->quiet_ms, err, sizeof err);
    if (r == 2) {
        printf("group %d: FAILED: %s\n", g, err);
        return CLI_MISMATCH;
    }
    if (r != 0) {
        printf("group %d: %s: %s%s\n", g, r > 0 ? "NOT READY" : "ERROR", err,
               r > 0 ? "; retry when the recovery is done" : "");
        return CLI_UNREACHABLE;
    }
    int q = gview_wait_quiet(v, o->quiet_ms, err, sizeof err);
    if (q < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        return CLI_UNREACHABLE;
    }
    if (q == 2) {
        printf("group %d: FAILED: %s\n", g, err);
        return CLI_MISMATCH;
    }
    if (q > 0) {
        printf("group %d: NOT QUIESCENT after %d ms (%s); stop writes and retry\n",
               g, o->quiet_ms, err);
        return CLI_UNREACHABLE;
    }
    return CLI_OK;
}

/* Ranges to check, coalesced.  -1 (message printed) on error. */
static int check_ranges(struct gview *v, const struct cli_opts *o, struct admin_ranges *r)
{
    char err[512];
    if (gview_ranges(v, o->full, r, err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", v->group, err);
        return -1;
    }
    coalesce(r);
    return 0;
}

/* Whether the coordinator's view of the group is still the one checked. */
static bool layout_unchanged(const struct gview *v, const struct cli_opts *o)
{
    struct gview_group now;
    char err[512];
    if (!v->has_layout)
        return true;
    if (fetch_layout(o, v->group, &now, err, sizeof err) <= 0)
        return true;    /* no newer word: keep the verdict */
    if (now.view.version == v->layout.view.version)
        return true;
    printf("group %d: the group's view changed during the check (version %" PRIu64 " -> %"
           PRIu64 ", %s); starting over\n", v->group, v->layout.view.version, now.view.version,
           now.state);
    return false;
}

/* At the end of an attempt: a process that does not answer may just have
 * died.  When the coordinator's view of the group changes within
 * VIEW_CHANGE_WAIT_MS, ATTEMPT_RETRY (the group is checked again in its
 * new layout); otherwise result. */
static int retry_if_view_changes(const struct gview *v, const struct cli_opts *o, int result,
                                 int code)
{
    if (result != ATTEMPT_DONE || code != CLI_UNREACHABLE || !v->has_layout ||
        gview_all_answer(v, o->timeout_ms))
        return result;
    int64_t deadline = mono_ms() + VIEW_CHANGE_WAIT_MS;
    for (;;) {
        if (!layout_unchanged(v, o))
            return ATTEMPT_RETRY;
        if (mono_ms() >= deadline)
            return result;
        pause_ms(LAYOUT_POLL_MS);
    }
}

/* After the comparisons: ATTEMPT_RETRY if the group changed meanwhile;
 * otherwise *code is CLI_OK, or CLI_UNREACHABLE (message printed). */
static int confirm_unchanged(struct gview *v, const struct cli_opts *o, int *code)
{
    char err[512];
    if (!layout_unchanged(v, o))
        return ATTEMPT_RETRY;
    int rc = gview_check_unchanged(v, err, sizeof err);
    if (rc < 0) {
        printf("group %d: ERROR: %s\n", v->group, err);
        *code = CLI_UNREACHABLE;
        return ATTEMPT_DONE;
    }
    if (rc > 0) {
        printf("group %d: writes arrived during the check (%s); starting over\n", v->group, err);
        return ATTEMPT_RETRY;
    }
    *code = CLI_OK;
    return ATTEMPT_DONE;
}

/* "; layout: data 1 served by parity 0, parity 1 dead" for a verdict on
 * a group that is not in its original layout, else "". */
static const char *layout_note(const struct gview *v, char *buf, size_t cap)
{
    char text[256];
    gview_layout_text(v, text, sizeof text);
    if (!v->has_layout || text[0] == '\0')
        buf[0] = '\0';
    else
        snprintf(buf, cap, "; layout: %s", text);
    return buf;
}

static int verify_attempt(const struct proc_list *l, int g, const struct cli_opts *o, int *code)
{
    struct gview v;
    struct problems pr = { 0 };
    struct verify_sum sum = { 0 };
    struct admin_ranges r = { 0 };
    struct bufs b = { 0 };
    struct codec *codec = NULL;
    char err[512], note[320];
    int result = ATTEMPT_DONE;

    *code = prepare_group(&v, l, g, o);
    if (*code != CLI_OK)
        goto out;
    *code = CLI_UNREACHABLE;
    if (check_diverged(&v, &pr, err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        goto out;
    }
    for (int i = 0; i < v.k; i++) {
        if (compare_meta_of(&v, i, &pr, &sum, err, sizeof err) < 0) {
            printf("group %d: ERROR: %s\n", g, err);
            goto out;
        }
    }
    if (check_ranges(&v, o, &r) < 0)
        goto out;
    codec = codec_new(v.k, v.k + v.m, CODEC_BACKEND_DEFAULT);
    if (codec == NULL || bufs_alloc(&b, v.k + v.m, (size_t)o->chunk) < 0) {
        printf("group %d: ERROR: cannot set up RS(%d,%d) (out of memory?)\n", g, v.k, v.k + v.m);
        goto out;
    }
    if (for_each_chunk(&v, &r, o->chunk, codec, &b, compare_parity_chunk, &pr, &sum.bytes,
                       err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        goto out;
    }
    result = confirm_unchanged(&v, o, code);
    if (result == ATTEMPT_RETRY || *code == CLI_UNREACHABLE)
        goto out;
    print_problems(&pr, g);
    if (pr.n == 0) {
        printf("group %d: OK (%d data, %d parity, %" PRIu64 " items, %" PRIu64 " bytes checked%s%s)\n",
               g, v.k, gview_nparity(&v), sum.items, sum.bytes, o->full ? ", full regions" : "",
               layout_note(&v, note, sizeof note));
        *code = CLI_OK;
    } else {
        printf("group %d: FAILED (%d problems; %d data, %d parity, %" PRIu64 " items, %" PRIu64
               " bytes checked%s)\n", g, pr.n, v.k, gview_nparity(&v), sum.items, sum.bytes,
               layout_note(&v, note, sizeof note));
        *code = CLI_MISMATCH;
    }
out:
    result = retry_if_view_changes(&v, o, result, *code);
    bufs_free(&b);
    codec_free(codec);
    ranges_free(&r);
    gview_close(&v);
    return result;
}

/* ---- decode-check ---- */

/* Next M-subset of {0..n-1} in lexicographic order; false after the last. */
static bool next_combination(int *c, int m, int n)
{
    int i = m - 1;
    while (i >= 0 && c[i] == n - m + i)
        i--;
    if (i < 0)
        return false;
    c[i]++;
    for (int j = i + 1; j < m; j++)
        c[j] = c[j - 1] + 1;
    return true;
}

static const char *block_name(const struct gview *v, int b, char *buf, size_t cap)
{
    if (b < v->k)
        snprintf(buf, cap, "data %d", b);
    else
        snprintf(buf, cap, "parity %d", b - v->k);
    return buf;
}

/* "{0,1,3}": the survivors when the blocks in erased[0..m) are lost. */
static const char *survivors_text(const struct gview *v, const int *erased, char *buf, size_t cap)
{
    size_t n = 0;
    int e = 0;
    n += (size_t)snprintf(buf + n, cap - n, "{");
    for (int b = 0; b < v->k + v->m && n < cap; b++) {
        if (e < v->m && erased[e] == b) {
            e++;
            continue;
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%d", n > 1 ? "," : "",
                              b < v->k ? "d" : "p", b < v->k ? b : b - v->k);
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "}");
    return buf;
}

/* One erasure pattern on one chunk: rebuild and compare. */
static void decode_one(struct gview *v, const struct codec *codec, struct bufs *b,
                       const int *erased, uint64_t off, size_t len, struct problems *pr)
{
    char bname[32], sname[160];
    for (int x = 0; x < v->k + v->m; x++)
        memcpy(b->work[x], b->blk[x], len);
    for (int e = 0; e < v->m; e++)
        memset(b->work[erased[e]], 0xa5, len);
    if (codec_decode(codec, erased, v->m, b->work, b->work + v->k, len) < 0) {
        problem(pr, "survivors %s: codec_decode refused the erasure pattern",
                survivors_text(v, erased, sname, sizeof sname));
        return;
    }
    for (int e = 0; e < v->m; e++) {
        struct diff d;
        int x = erased[e];
        if (!gview_present(v, x) || compare_bytes(b->blk[x], b->work[x], len, &d))
            continue;
        problem(pr, "survivors %s: rebuilt %s differs in %" PRIu64 " bytes of [%" PRIu64
                ", %" PRIu64 "); first at %" PRIu64, survivors_text(v, erased, sname, sizeof sname),
                block_name(v, x, bname, sizeof bname), d.count, off + d.first,
                off + d.last + 1, off + d.first);
    }
}

/* Whether the M-subset erases every absent block (so that the survivors
 * are K present blocks). */
static bool erases_absent(const struct gview *v, const int *erased)
{
    int e = 0;
    for (int b = 0; b < v->k + v->m; b++) {
        while (e < v->m && erased[e] < b)
            e++;
        if (!gview_present(v, b) && (e == v->m || erased[e] != b))
            return false;
    }
    return true;
}

/* Calls fn for every M-subset of the N blocks that erases every absent
 * block (at most MAX_COMBINATIONS subsets looked at); returns how many
 * there were: C(present, K). */
static int for_each_erasure(struct gview *v, void (*fn)(struct gview *v, const int *erased,
                                                        void *ctx), void *ctx)
{
    int erased[GVIEW_MAX_BLOCKS];
    for (int e = 0; e < v->m; e++)
        erased[e] = e;
    int count = 0, looked = 0;
    do {
        looked++;
        if (!erases_absent(v, erased))
            continue;
        if (fn != NULL)
            fn(v, erased, ctx);
        count++;
    } while (looked < MAX_COMBINATIONS && next_combination(erased, v->m, v->k + v->m));
    return count;
}

static int npresent(const struct gview *v)
{
    int n = 0;
    for (int b = 0; b < v->k + v->m; b++)
        n += gview_present(v, b);
    return n;
}

struct decode_ctx {
    const struct codec *codec;
    struct bufs *b;
    uint64_t off;
    size_t len;
    struct problems *pr;
};

static void decode_pattern(struct gview *v, const int *erased, void *ctx)
{
    struct decode_ctx *d = ctx;
    decode_one(v, d->codec, d->b, erased, d->off, d->len, d->pr);
}

static void decode_chunk(struct gview *v, const struct codec *codec, struct bufs *b,
                         uint64_t off, size_t len, struct problems *pr)
{
    struct decode_ctx d = { codec, b, off, len, pr };
    for_each_erasure(v, decode_pattern, &d);
}

static int decode_attempt(const struct proc_list *l, int g, const struct cli_opts *o, int *code)
{
    struct gview v;
    struct problems pr = { 0 };
    struct admin_ranges r = { 0 };
    struct bufs b = { 0 };
    struct codec *codec = NULL;
    uint64_t bytes = 0;
    char err[512], note[320];
    int result = ATTEMPT_DONE;

    *code = prepare_group(&v, l, g, o);
    if (*code != CLI_OK)
        goto out;
    *code = CLI_UNREACHABLE;
    if (check_ranges(&v, o, &r) < 0)
        goto out;
    codec = codec_new(v.k, v.k + v.m, CODEC_BACKEND_DEFAULT);
    if (codec == NULL || bufs_alloc(&b, v.k + v.m, (size_t)o->chunk) < 0) {
        printf("group %d: ERROR: cannot set up RS(%d,%d) (out of memory?)\n", g, v.k, v.k + v.m);
        goto out;
    }
    if (for_each_chunk(&v, &r, o->chunk, codec, &b, decode_chunk, &pr, &bytes,
                       err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        goto out;
    }
    result = confirm_unchanged(&v, o, code);
    if (result == ATTEMPT_RETRY || *code == CLI_UNREACHABLE)
        goto out;
    print_problems(&pr, g);
    int present = npresent(&v);
    if (pr.n == 0 && present == v.k) {
        printf("group %d: OK (no parity block left, nothing to decode: %" PRIu64 " bytes per "
               "region fetched from the %d data blocks%s%s)\n", g, bytes, v.k,
               o->full ? ", full regions" : "", layout_note(&v, note, sizeof note));
        *code = CLI_OK;
    } else if (pr.n == 0) {
        char among[96];
        if (present == v.k + v.m)
            snprintf(among, sizeof among, "%d", present);
        else
            snprintf(among, sizeof among, "%d present blocks of %d", present, v.k + v.m);
        printf("group %d: OK (%d survivor sets of %d among %s, %" PRIu64
               " bytes per region decoded and matched%s%s)\n",
               g, for_each_erasure(&v, NULL, NULL), v.k, among, bytes,
               o->full ? ", full regions" : "", layout_note(&v, note, sizeof note));
        *code = CLI_OK;
    } else {
        printf("group %d: FAILED (%d problems over %" PRIu64 " bytes per region%s)\n",
               g, pr.n, bytes, layout_note(&v, note, sizeof note));
        *code = CLI_MISMATCH;
    }
out:
    result = retry_if_view_changes(&v, o, result, *code);
    bufs_free(&b);
    codec_free(codec);
    ranges_free(&r);
    gview_close(&v);
    return result;
}

/* ---- verify of a primary-backup group ---- */

#define PBR_POLL_MS 10
#define PBR_MISMATCH_PAUSE_MS 1100   /* items expire by each process's own clock */

/* Process 0 is the primary, 1..m backup 0..m-1. */
struct pbr_view {
    int group, m;
    const struct proc_info *proc[GVIEW_MAX_BLOCKS];
    struct admin_conn *conn[GVIEW_MAX_BLOCKS];
    uint64_t stable;                  /* the primary's stable xid when quiescent */
};

static const char *pbr_name(const struct pbr_view *v, int i, char *buf, size_t cap)
{
    const struct proc_info *p = v->proc[i];
    if (i == 0)
        snprintf(buf, cap, "primary (%s:%d)", p->host, p->port);
    else
        snprintf(buf, cap, "backup (%s:%d)", p->host, p->port);
    return buf;
}

static void pbr_close(struct pbr_view *v)
{
    for (int i = 0; i <= v->m; i++) {
        if (v->conn[i] != NULL) {
            admin_close(v->conn[i]);
            free(v->conn[i]);
            v->conn[i] = NULL;
        }
    }
}

/* After a failover a backup is the primary: the member whose `cocytus
 * info` says role primary takes place 0 (the others keep their order). */
static void pbr_find_primary(struct pbr_view *v)
{
    for (int i = 1; i <= v->m; i++) {
        struct admin_stats st = { 0 };
        bool primary = admin_stats_cmd(v->conn[i], "cocytus info", &st) == 0 &&
                       admin_stat_str(&st, "role") != NULL &&
                       strcmp(admin_stat_str(&st, "role"), "primary") == 0;
        admin_stats_free(&st);
        if (!primary)
            continue;
        const struct proc_info *p = v->proc[0];
        struct admin_conn *c = v->conn[0];
        v->proc[0] = v->proc[i];
        v->conn[0] = v->conn[i];
        v->proc[i] = p;
        v->conn[i] = c;
        return;
    }
}

static int pbr_open(struct pbr_view *v, const struct proc_list *l, int g, int timeout_ms,
                    char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->group = g;
    v->m = procs_count(l, g, "backup");
    if (v->m < 1 || v->m + 1 > GVIEW_MAX_BLOCKS) {
        snprintf(err, errlen, "%d backups (1 to %d supported)", v->m, GVIEW_MAX_BLOCKS - 1);
        return -1;
    }
    for (int i = 0; i <= v->m; i++) {
        v->proc[i] = procs_find(l, g, i == 0 ? "primary" : "backup", i == 0 ? 0 : i - 1);
        if (v->proc[i] == NULL) {
            snprintf(err, errlen, "no %s %d in the process list", i == 0 ? "primary" : "backup",
                     i == 0 ? 0 : i - 1);
            return -1;
        }
        v->conn[i] = malloc(sizeof *v->conn[i]);
        if (v->conn[i] == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (admin_open(v->conn[i], v->proc[i]->host, v->proc[i]->port, timeout_ms,
                       l->secret, l->tls) < 0) {
            char name[128];
            snprintf(err, errlen, "%s: %s", pbr_name(v, i, name, sizeof name), v->conn[i]->err);
            free(v->conn[i]);
            v->conn[i] = NULL;
            return -1;
        }
    }
    pbr_find_primary(v);
    return 0;
}

/* One numeric stat of `cocytus info` (or meta).  0, or -1 with err. */
static int pbr_stat(struct pbr_view *v, int i, const char *cmd, const char *stat, uint64_t *out,
                    char *err, size_t errlen)
{
    struct admin_stats st = { 0 };
    char name[128];
    int rc = admin_stats_cmd(v->conn[i], cmd, &st);
    if (rc < 0)
        snprintf(err, errlen, "%s: %s", pbr_name(v, i, name, sizeof name), v->conn[i]->err);
    else if (!admin_stat_u64(&st, stat, out)) {
        snprintf(err, errlen, "%s: no %s in `%s`", pbr_name(v, i, name, sizeof name), stat, cmd);
        rc = -1;
    }
    admin_stats_free(&st);
    return rc;
}

/* 0 when quiescent now, 1 when not yet (why in err), 2 when a backup is
 * diverged or ahead of the primary, -1 on errors. */
static int pbr_quiet_now(struct pbr_view *v, char *err, size_t errlen)
{
    uint64_t xid, stable, applied, diverged;
    char name[128];
    if (pbr_stat(v, 0, "cocytus info", "xid", &xid, err, errlen) < 0 ||
        pbr_stat(v, 0, "cocytus info", "stable_xid", &stable, err, errlen) < 0)
        return -1;
    if (xid != stable) {
        snprintf(err, errlen, "primary: xid %" PRIu64 ", stable xid %" PRIu64, xid, stable);
        return 1;
    }
    for (int i = 1; i <= v->m; i++) {
        if (pbr_stat(v, i, "cocytus info", "applied_xid", &applied, err, errlen) < 0 ||
            pbr_stat(v, i, "cocytus info", "diverged", &diverged, err, errlen) < 0)
            return -1;
        pbr_name(v, i, name, sizeof name);
        if (diverged != 0) {
            snprintf(err, errlen, "%s stopped applying the primary's records (diverged; see "
                     "its log)", name);
            return 2;
        }
        if (applied > stable) {
            snprintf(err, errlen, "%s applied xid %" PRIu64 ", beyond the primary's stable xid %"
                     PRIu64, name, applied, stable);
            return 2;
        }
        if (applied < stable) {
            snprintf(err, errlen, "%s applied xid %" PRIu64 " of stable %" PRIu64, name, applied,
                     stable);
            return 1;
        }
    }
    v->stable = stable;
    return 0;
}

static int pbr_wait_quiet(struct pbr_view *v, int max_ms, char *err, size_t errlen)
{
    int64_t deadline = mono_ms() + max_ms;
    for (;;) {
        int rc = pbr_quiet_now(v, err, errlen);
        if (rc != 1 || mono_ms() >= deadline)
            return rc;
        pause_ms(PBR_POLL_MS);
    }
}

/* Each backup's count and digest against the primary's. */
static int pbr_compare(struct pbr_view *v, struct problems *pr, uint64_t *items, char *err,
                       size_t errlen)
{
    struct admin_stats want = { 0 }, have = { 0 };
    char name[128];
    int rc = 0;
    if (admin_stats_cmd(v->conn[0], "cocytus meta", &want) < 0) {
        snprintf(err, errlen, "%s: %s", pbr_name(v, 0, name, sizeof name), v->conn[0]->err);
        admin_stats_free(&want);
        return -1;
    }
    admin_stat_u64(&want, "count", items);
    for (int i = 1; i <= v->m && rc == 0; i++) {
        pbr_name(v, i, name, sizeof name);
        if (admin_stats_cmd(v->conn[i], "cocytus meta", &have) < 0) {
            snprintf(err, errlen, "%s: %s", name, v->conn[i]->err);
            rc = -1;
            break;
        }
        static const char *const fields[] = { "count", "digest", "value_bytes" };
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            if (!meta_field_equal(&want, &have, fields[f])) {
                const char *x = admin_stat_str(&want, fields[f]);
                const char *y = admin_stat_str(&have, fields[f]);
                problem(pr, "%s: %s %s, primary has %s", name, fields[f], y ? y : "(missing)",
                        x ? x : "(missing)");
            }
        }
    }
    admin_stats_free(&want);
    admin_stats_free(&have);
    return rc;
}

/* One try: wait, compare, confirm nothing moved.  ATTEMPT_RETRY when the
 * primary's xid moved or the copies differed while retries remain (an item
 * can be live on one process and expired on another for a second). */
static int pbr_verify_attempt(const struct proc_list *l, int g, const struct cli_opts *o,
                              bool last, int *code)
{
    struct pbr_view v;
    struct problems pr = { 0 };
    uint64_t items = 0, xid = 0;
    char err[512];
    int result = ATTEMPT_DONE;
    *code = CLI_UNREACHABLE;
    if (pbr_open(&v, l, g, o->timeout_ms, err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        goto out;
    }
    int q = pbr_wait_quiet(&v, o->quiet_ms, err, sizeof err);
    if (q != 0) {
        if (q == 2)
            *code = CLI_MISMATCH;
        printf("group %d: %s: %s%s\n", g, q == 2 ? "FAILED" : q == 1 ? "NOT QUIESCENT" : "ERROR",
               err, q == 1 ? "; stop writes and retry" : "");
        goto out;
    }
    if (pbr_compare(&v, &pr, &items, err, sizeof err) < 0 ||
        pbr_stat(&v, 0, "cocytus info", "xid", &xid, err, sizeof err) < 0) {
        printf("group %d: ERROR: %s\n", g, err);
        goto out;
    }
    if (xid != v.stable || (pr.n > 0 && !last)) {
        printf("group %d: %s; starting over\n", g, xid != v.stable ?
               "writes arrived during the check" : "copies differ (an item may have expired "
               "between the reads)");
        if (pr.n > 0)
            pause_ms(PBR_MISMATCH_PAUSE_MS);
        result = ATTEMPT_RETRY;
        goto out;
    }
    print_problems(&pr, g);
    *code = pr.n == 0 ? CLI_OK : CLI_MISMATCH;
    printf("group %d: %s (pbr, 1 primary, %d backups, %" PRIu64 " items, stable xid %" PRIu64
           ")\n", g, pr.n == 0 ? "OK" : "FAILED", v.m, items, v.stable);
out:
    pbr_close(&v);
    return result;
}

static int run_pbr_group(const struct proc_list *l, int g, const struct cli_opts *o)
{
    int code = CLI_UNREACHABLE;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        if (pbr_verify_attempt(l, g, o, attempt == MAX_ATTEMPTS - 1, &code) == ATTEMPT_DONE)
            return code;
    }
    printf("group %d: NOT QUIESCENT: it changed during %d attempts; stop writes and retry\n",
           g, MAX_ATTEMPTS);
    return CLI_UNREACHABLE;
}

/* ---- drivers ---- */

typedef int (*attempt_fn)(const struct proc_list *l, int g, const struct cli_opts *o, int *code);

static int run_group(const struct proc_list *l, int g, const struct cli_opts *o, attempt_fn fn)
{
    int code = CLI_UNREACHABLE;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        if (fn(l, g, o, &code) == ATTEMPT_DONE)
            return code;
    }
    printf("group %d: NOT QUIESCENT: it changed during %d attempts; stop writes and retry\n",
           g, MAX_ATTEMPTS);
    return CLI_UNREACHABLE;
}

/* Worst code wins: unreachable > mismatch > ok. */
static int worse(int a, int b)
{
    static const int rank[] = { [CLI_OK] = 0, [CLI_MISMATCH] = 1, [CLI_USAGE] = 3,
                                [CLI_UNREACHABLE] = 2 };
    return rank[b] > rank[a] ? b : a;
}

static bool is_coding_group(const struct proc_list *l, int g)
{
    return procs_count(l, g, "data") > 0 && procs_count(l, g, "parity") > 0;
}

static bool is_pbr_group(const struct proc_list *l, int g)
{
    return procs_count(l, g, "primary") > 0 && procs_count(l, g, "backup") > 0;
}

/* fn checks coding groups; with_pbr also verifies primary-backup groups. */
static int run_all_groups(const struct proc_list *l, const struct cli_opts *o, attempt_fn fn,
                          bool with_pbr, const char *what)
{
    int code = CLI_OK, checked = 0;
    int ngroups = procs_ngroups(l);
    for (int g = 0; g < ngroups; g++) {
        if (o->group >= 0 && g != o->group)
            continue;
        if (is_coding_group(l, g))
            code = worse(code, run_group(l, g, o, fn));
        else if (with_pbr && is_pbr_group(l, g))
            code = worse(code, run_pbr_group(l, g, o));
        else
            continue;
        checked++;
    }
    if (checked == 0) {
        printf("%s: no %s to check\n", what, with_pbr ?
               "coding group (data + parity) or primary-backup group" :
               "coding group (data + parity processes)");
        return CLI_USAGE;
    }
    printf("%s: %s\n", what, code == CLI_OK ? "all groups OK" : "FAILED");
    return code;
}

int cmd_verify(const struct proc_list *l, const struct cli_opts *o)
{
    return run_all_groups(l, o, verify_attempt, true, "verify");
}

int cmd_decode_check(const struct proc_list *l, const struct cli_opts *o)
{
    return run_all_groups(l, o, decode_attempt, false, "decode-check");
}
