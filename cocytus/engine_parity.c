/* engine_parity.c - the parity role of a coding group (`--role parity`).
 *
 * A parity process serves no keys.  It listens for links from the K data
 * processes of its group, buffers every record a data process sends and
 * acknowledges it at once, and applies buffered records up to the stable
 * xid that the next record (or a STABLE frame) carries: the piggybacked
 * commit of docs/coding-group.md.  The links, acknowledgements and
 * divergence handling are repl/receiver.c's (shared with primary-backup),
 * applying a record is parity.c's; this file ties them together and adds
 * stats and the `cocytus` admin commands that tools and tests use to
 * inspect the parity region and the backup tables.  A data process whose
 * records disagree with our replica is logged loudly, its link is dropped
 * and its HELLOs are rejected. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "cluster.h"
#include "engine.h"
#include "link.h"
#include "parity.h"
#include "receiver.h"

#define REGION_READ_MAX (16u << 20)

struct parity_engine {
    struct engine engine;
    struct event_base *base;
    struct parity state;
    struct repl_receiver *receiver;   /* the links of the k data processes */
    struct link_listener *listener;
    int group;
    int index;
    int verbose;
};

static const char NO_KEYS_MSG[] = "parity process: does not serve keys";

static struct parity_engine *pe_of(struct engine *e)
{
    return e->priv;
}

/* ---- logging ---- */

__attribute__((format(printf, 2, 3)))
static void pe_log(const struct parity_engine *pe, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cocytus-server parity g%d/p%d: %s\n", pe->group, pe->index, msg);
}

/* ---- the receiver's hooks ---- */

static int hook_apply(void *owner, int index, uint64_t stable)
{
    struct parity_engine *pe = owner;
    return parity_apply(&pe->state, index, stable);
}

static void hook_log(void *owner, const char *line)
{
    pe_log(owner, "%s", line);
}

/* ---- client requests: a parity process serves no keys ---- */

static eng_status parity_get(struct engine *e, const char *key, size_t nkey,
                             struct eng_value *out, struct eng_result *res)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_NOT_FOUND;
    return ENG_NOT_FOUND;
}

static void parity_release(struct engine *e, void *handle)
{
}

static eng_status parity_mutate(struct engine *e, const struct eng_mutation *m,
                                struct eng_result *res, eng_done_fn done, void *cookie)
{
    memset(res, 0, sizeof(*res));
    res->status = ENG_FAILED;
    res->msg = NO_KEYS_MSG;
    return ENG_FAILED;
}

/* ---- stats ---- */

static uint64_t total_items(const struct parity *p)
{
    uint64_t n = 0;
    for (int i = 0; i < p->k; i++)
        n += p->dps[i].meta.count;
    return n;
}

static uint64_t total_buffered(const struct parity *p)
{
    uint64_t n = 0;
    for (int i = 0; i < p->k; i++)
        n += p->dps[i].src.buffer.count;
    return n;
}

static void stats_peer(const struct parity_engine *pe, int dp, eng_stat_fn emit, void *ctx)
{
    struct repl_peer_stats st;
    char name[48];
    repl_receiver_peer_stats(pe->receiver, dp, &st);
    snprintf(name, sizeof(name), "dp%d_link", dp);
    emit(ctx, name, "%s", st.link_up ? "up" : "down");
    snprintf(name, sizeof(name), "dp%d_records", dp);
    emit(ctx, name, "%" PRIu64, st.records);
    snprintf(name, sizeof(name), "dp%d_duplicates", dp);
    emit(ctx, name, "%" PRIu64, st.duplicates);
}

static void stats_general(struct parity_engine *pe, eng_stat_fn emit, void *ctx)
{
    const struct parity *p = &pe->state;
    emit(ctx, "group", "%d", pe->group);
    emit(ctx, "index", "%d", pe->index);
    emit(ctx, "curr_items", "0");
    emit(ctx, "backup_items", "%" PRIu64, total_items(p));
    emit(ctx, "buffered_records", "%" PRIu64, total_buffered(p));
    emit(ctx, "region_size", "%" PRIu64, p->region_size);
    emit(ctx, "region_touched", "%" PRIu64, p->touched_end);
    for (int i = 0; i < p->k; i++) {
        const struct parity_dp *d = &p->dps[i];
        char name[48];
        snprintf(name, sizeof(name), "dp%d_applied_xid", i);
        emit(ctx, name, "%" PRIu64, d->src.applied_xid);
        snprintf(name, sizeof(name), "dp%d_received_xid", i);
        emit(ctx, name, "%" PRIu64, d->src.received_xid);
        snprintf(name, sizeof(name), "dp%d_buffered", i);
        emit(ctx, name, "%zu", d->src.buffer.count);
        snprintf(name, sizeof(name), "dp%d_delta_bytes", i);
        emit(ctx, name, "%" PRIu64, d->delta_bytes);
        snprintf(name, sizeof(name), "dp%d_diverged", i);
        emit(ctx, name, "%d", d->src.diverged ? 1 : 0);
        stats_peer(pe, i, emit, ctx);
    }
}

static bool parity_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    if (group[0] == '\0') {
        stats_general(pe_of(e), emit, ctx);
        return true;
    }
    /* No items, slabs or sizes on a parity process; settings are the server's. */
    return strcmp(group, "items") == 0 || strcmp(group, "slabs") == 0 ||
           strcmp(group, "sizes") == 0 || strcmp(group, "settings") == 0;
}

static void parity_stats_reset(struct engine *e)
{
    repl_receiver_stats_reset(pe_of(e)->receiver);
}

static void parity_tick(struct engine *e, time_t now)
{
}

/* ---- admin: cocytus info | region | meta | used ---- */

struct reply {
    eng_write_fn write;
    void *ctx;
};

__attribute__((format(printf, 2, 3)))
static void reply_printf(const struct reply *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vreply(r->write, r->ctx, fmt, ap);
    va_end(ap);
}

static void reply_str(const struct reply *r, const char *s)
{
    r->write(r->ctx, s, strlen(s));
}

static bool client_error(const struct reply *r, const char *reason)
{
    reply_printf(r, "CLIENT_ERROR %s\r\n", reason);
    return true;
}

/* Strict unsigned decimal. */
static bool parse_u64(const char *s, uint64_t *out)
{
    if (*s == '\0')
        return false;
    uint64_t v = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static void info_dp(const struct reply *r, const struct parity_dp *d)
{
    int i = d->index;
    const struct repl_source *s = &d->src;
    reply_printf(r, "STAT dp%d_applied_xid %" PRIu64 "\r\n", i, s->applied_xid);
    reply_printf(r, "STAT dp%d_received_xid %" PRIu64 "\r\n", i, s->received_xid);
    reply_printf(r, "STAT dp%d_stable_xid %" PRIu64 "\r\n", i, s->stable_xid);
    reply_printf(r, "STAT dp%d_buffered %zu\r\n", i, s->buffer.count);
    reply_printf(r, "STAT dp%d_buffered_bytes %zu\r\n", i, s->buffer.bytes);
    reply_printf(r, "STAT dp%d_items %zu\r\n", i, d->meta.count);
    reply_printf(r, "STAT dp%d_region_used %" PRIu64 "\r\n", i, dalloc_used_bytes(d->alloc));
    reply_printf(r, "STAT dp%d_diverged %d\r\n", i, s->diverged ? 1 : 0);
}

static bool admin_info(struct parity_engine *pe, const struct reply *r)
{
    const struct parity *p = &pe->state;
    reply_str(r, "STAT role parity\r\n");
    reply_printf(r, "STAT group %d\r\n", pe->group);
    reply_printf(r, "STAT index %d\r\n", pe->index);
    reply_printf(r, "STAT k %d\r\n", p->k);
    reply_printf(r, "STAT m %d\r\n", p->m);
    reply_printf(r, "STAT region_size %" PRIu64 "\r\n", p->region_size);
    reply_printf(r, "STAT region_touched %" PRIu64 "\r\n", p->touched_end);
    reply_printf(r, "STAT items %" PRIu64 "\r\n", total_items(p));
    for (int i = 0; i < p->k; i++)
        info_dp(r, &p->dps[i]);
    reply_printf(r, "STAT meta_bytes %zu\r\n", parity_meta_bytes(p));
    reply_printf(r, "STAT rss %" PRIu64 "\r\n", engine_process_rss());
    reply_str(r, "END\r\n");
    return true;
}

static bool admin_region(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    uint64_t off, len;
    if (argc != 3 || !parse_u64(argv[1], &off) || !parse_u64(argv[2], &len))
        return client_error(r, "usage: cocytus region <off> <len>");
    if (len > REGION_READ_MAX)
        return client_error(r, "region read larger than 16777216 bytes");
    if (off > pe->state.region_size || len > pe->state.region_size - off)
        return client_error(r, "range outside the region");
    reply_printf(r, "VALUE region 0 %" PRIu64 "\r\n", len);
    r->write(r->ctx, pe->state.region + off, (size_t)len);
    reply_str(r, "\r\nEND\r\n");
    return true;
}

/* The DP a meta/used command names, or NULL after a CLIENT_ERROR. */
static const struct parity_dp *admin_dp(struct parity_engine *pe, int argc, char **argv,
                                        const struct reply *r, const char *usage)
{
    uint64_t dp;
    if (argc != 2 || !parse_u64(argv[1], &dp)) {
        client_error(r, usage);
        return NULL;
    }
    if (dp >= (uint64_t)pe->state.k) {
        client_error(r, "no such data process in this coding group");
        return NULL;
    }
    return &pe->state.dps[dp];
}

static bool admin_meta(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    const struct parity_dp *d = admin_dp(pe, argc, argv, r, "usage: cocytus meta <dp>");
    if (d == NULL)
        return true;
    reply_printf(r, "STAT count %zu\r\n", d->meta.count);
    reply_printf(r, "STAT digest %016" PRIx64 "\r\n", meta_digest(&d->meta));
    reply_printf(r, "STAT alloc_digest %016" PRIx64 "\r\n", dalloc_digest(d->alloc));
    reply_printf(r, "STAT used_bytes %" PRIu64 "\r\n", dalloc_used_bytes(d->alloc));
    reply_printf(r, "STAT applied_xid %" PRIu64 "\r\n", d->src.applied_xid);
    reply_str(r, "END\r\n");
    return true;
}

static bool admin_used(struct parity_engine *pe, int argc, char **argv, const struct reply *r)
{
    const struct parity_dp *d = admin_dp(pe, argc, argv, r, "usage: cocytus used <dp>");
    if (d == NULL)
        return true;
    struct dalloc_iter it;
    uint64_t off, size;
    dalloc_iter_init(d->alloc, &it);
    while (dalloc_iter_next_used(&it, &off, &size))
        reply_printf(r, "USED %" PRIu64 " %" PRIu64 "\r\n", off, size);
    reply_str(r, "END\r\n");
    return true;
}

static bool parity_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct parity_engine *pe = pe_of(e);
    struct reply r = { .write = write, .ctx = ctx };
    if (argc < 1)
        return false;
    if (strcmp(argv[0], "info") == 0)
        return argc == 1 ? admin_info(pe, &r) : client_error(&r, "usage: cocytus info");
    if (strcmp(argv[0], "region") == 0)
        return admin_region(pe, argc, argv, &r);
    if (strcmp(argv[0], "meta") == 0)
        return admin_meta(pe, argc, argv, &r);
    if (strcmp(argv[0], "used") == 0)
        return admin_used(pe, argc, argv, &r);
    return false;
}

/* ---- lifetime ---- */

static void parity_destroy_engine(struct engine *e)
{
    struct parity_engine *pe = pe_of(e);
    if (pe->listener != NULL)
        link_listener_free(pe->listener);
    repl_receiver_free(pe->receiver);
    parity_destroy(&pe->state);
    free(pe);
}

static const struct engine_ops parity_ops = {
    .name = "parity",
    .get = parity_get,
    .release = parity_release,
    .mutate = parity_mutate,
    .stats = parity_stats,
    .stats_reset = parity_stats_reset,
    .tick = parity_tick,
    .destroy = parity_destroy_engine,
    .admin = parity_admin,
};

static int receiver_start(struct parity_engine *pe)
{
    int k = pe->state.k;
    struct repl_source **sources = calloc((size_t)k, sizeof(*sources));
    if (sources == NULL)
        return -1;
    for (int i = 0; i < k; i++)
        sources[i] = &pe->state.dps[i].src;
    struct repl_receiver_config cfg = {
        .base = pe->base,
        .sender_role = LINK_ROLE_DATA,
        .nsources = k,
        .sources = sources,
        .tag = "dp",
        .noun = "data process",
        .wrong_role = "a parity process takes links from data processes only",
        .no_such = "no such data process in this coding group",
        .verbose = pe->verbose != 0,
        .hooks = { .apply = hook_apply, .log = hook_log },
        .owner = pe,
    };
    pe->receiver = repl_receiver_new(&cfg);
    free(sources);
    return pe->receiver != NULL ? 0 : -1;
}

/* The cluster's view of this process, or NULL after a message. */
static const struct cluster_proc *own_proc(const struct engine_config *cfg)
{
    const struct cluster *c = cfg->cluster;
    if (c == NULL || c->scheme != SCHEME_RS) {
        fprintf(stderr, "cocytus-server: the parity role needs a cluster file with scheme rs\n");
        return NULL;
    }
    const struct cluster_proc *me = cluster_find(c, cfg->group, ROLE_PARITY, cfg->index);
    if (me == NULL)
        fprintf(stderr, "cocytus-server: the cluster has no parity process %d in group %d\n",
                cfg->index, cfg->group);
    return me;
}

static int start_listener(struct parity_engine *pe, const struct cluster *c,
                          const struct cluster_proc *me)
{
    pe->listener = link_listen(pe->base, me->host, me->link_port, c->name,
                               (uint32_t)pe->group, c->secret, repl_receiver_accept,
                               pe->receiver);
    if (pe->listener == NULL) {
        pe_log(pe, "cannot listen for data processes on %s:%d", me->host, me->link_port);
        return -1;
    }
    pe_log(pe, "RS(%d,%d), region %" PRIu64 " bytes, waiting for data processes on %s:%d",
           c->k, c->n, pe->state.region_size, me->host, link_listener_port(pe->listener));
    return 0;
}

struct engine *engine_parity_new(const struct engine_config *cfg)
{
    const struct cluster_proc *me = own_proc(cfg);
    if (me == NULL)
        return NULL;
    const struct cluster *c = cfg->cluster;
    struct parity_engine *pe = calloc(1, sizeof(*pe));
    if (pe == NULL)
        return NULL;
    pe->base = cfg->base;
    pe->group = cfg->group;
    pe->index = cfg->index;
    pe->verbose = cfg->verbose;
    pe->engine.ops = &parity_ops;
    pe->engine.priv = pe;
    char err[256];
    if (parity_init(&pe->state, c->k, c->n, cfg->index, c->region_size, cfg->hashpower,
                    err, sizeof(err)) != 0) {
        pe_log(pe, "%s", err);
        free(pe);
        return NULL;
    }
    if (receiver_start(pe) != 0 || start_listener(pe, c, me) != 0) {
        parity_destroy_engine(&pe->engine);
        return NULL;
    }
    return &pe->engine;
}
