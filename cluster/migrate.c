/* migrate.c - moving one slot from this process to another serving process
 * (the source side), and the destination's "cocytus import" commands.
 *
 * The idea: the source copies the slot's items to the destination over an
 * ordinary memcached text connection while it keeps serving the slot, and
 * makes every write of the slot that completes meanwhile follow its copy on
 * the same connection.  Order on that one connection is the whole argument:
 * whatever the destination received last for a key reflects the key's state
 * after the last write any client was answered for.
 *
 * From the first move on, the server's engine is a thin wrapper around the
 * real one (struct migration.wrap).  While a move copies, a mutation of the
 * moving slot runs in the real engine; once it completes (at once or after
 * the replicas acknowledged), the wrapper reads the key's current state and
 * sends it (set or delete); the client is answered when the destination
 * acknowledged that command.  Every other request costs one comparison.
 *
 * Phases of a move (docs/routing.md, "Slot migration"):
 *   DRAIN   mutations in flight when the move began finish (they did not go
 *           through the wrapper, so the copy must not overtake them);
 *   COPY    the slot's keys are found by walking the hash table a piece per
 *           event-loop turn (engine slot_keys: a million items in one turn
 *           held the process for 150-200 ms, and every move walked the
 *           whole table three times), read and sent as `set`, within a
 *           window of commands and bytes, a bounded number per turn; a key
 *           stored after the walk passed its bucket is forwarded as any
 *           write of the slot is;
 *   SWITCH  the new map is installed here (the slot now answers MOVED), so
 *           no new write of the slot starts; the writes still in flight
 *           finish and their forwards are acknowledged;
 *   COMMIT  "cocytus import commit <slot> <epoch>": the destination takes
 *           the slot (redialled a few times if the connection breaks: it is
 *           idempotent);
 *   CLEAN   the local copies are deleted through the real engine (so parity
 *           processes and backups drop them too), walked and deleted a
 *           batch per turn.
 * Before COMMIT any failure abandons the move: the old map is restored and
 * writes in flight are answered with their local outcome (the source still
 * owns the slot). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "auth.h"
#include "cluster.h"
#include "conn.h"
#include "migrate.h"
#include "printable.h"
#include "server.h"
#include "slotmap.h"
#include "migrate_tls.h"

#define MG_WINDOW_CMDS 256             /* commands sent and not yet answered */
#define MG_WINDOW_BYTES (1u << 20)     /* bytes sent and not yet answered */
#define MG_KEYS_PER_TURN 64            /* items copied per event-loop turn */
#define MG_DELETES_PER_TURN 64         /* local copies deleted per turn */
#define MG_WALK_PIECE 2048             /* hash buckets and items looked at per turn
                                          for the slot's keys (0.2-0.3 ms) */
#define MG_DELETES_INFLIGHT 256
#define MG_CLEAN_RESTARTS 3            /* CLEAN walks begun again after a refusal */
#define MG_IO_TIMEOUT_SEC 5            /* no answer for this long: connection failed */
#define MG_PURGE_TIMEOUT_SEC 120       /* the same before "import begin <slot>" is
                                          answered: the destination walks its whole
                                          table first (about 5 s for 10M items) */
#define MG_COMMIT_TRIES 3              /* dials of the commit after the first */
#define MG_REDIAL_USEC 200000
#define MG_DRAIN_POLL_USEC 1000
#define MG_KEY_MAX 250                 /* longest key the text protocol carries */

enum mg_phase { MG_IDLE, MG_DRAIN, MG_COPY, MG_SWITCH, MG_COMMIT, MG_CLEAN };

static const char *const phase_names[] = {
    [MG_IDLE] = "idle", [MG_DRAIN] = "drain", [MG_COPY] = "copy",
    [MG_SWITCH] = "switch", [MG_COMMIT] = "commit", [MG_CLEAN] = "clean",
};

/* CMD_AUTH asks the destination for a nonce, CMD_PROOF answers it: the
 * import connection proves the cluster secret before anything else. */
enum mg_cmd_kind { CMD_AUTH, CMD_PROOF, CMD_BEGIN, CMD_ITEM, CMD_FORWARD, CMD_COMMIT };

struct mg_fwd;

/* One command sent on the import connection, waiting for its reply line. */
struct mg_cmd {
    enum mg_cmd_kind kind;
    struct mg_fwd *fwd;     /* CMD_FORWARD: the client write it answers */
    size_t bytes;
};

/* A client mutation of the moving slot: run by the real engine, then its
 * resulting state is forwarded before the client hears the outcome. */
struct mg_fwd {
    struct migration *mg;
    struct mg_fwd *next;    /* ready list */
    uint64_t gen;           /* the move it belongs to */
    eng_done_fn done;
    void *cookie;
    struct eng_result res;  /* the real engine's outcome */
    char msg[128];          /* res.msg, copied */
    size_t nkey;
    char key[];
};

/* Keys of the slot, packed in one buffer. */
struct keylist {
    char *bytes;
    size_t len, cap;
    size_t *off;            /* off[i]: start of key i; key i ends at off[i + 1] */
    size_t n, ncap;
};

struct migration {
    struct engine wrap;     /* s->engine from the first move on */
    struct engine_ops ops;  /* the wrapper's, named as the real engine */
    struct engine *inner;   /* the real engine */
    struct server *srv;
    enum mg_phase phase;
    uint64_t gen;           /* increases with every move */
    unsigned slot;
    char host[SLOTMAP_HOST_MAX];
    int port;
    uint64_t epoch;         /* the new epoch */
    migrate_done_fn done;
    void *done_ctx;

    struct bufferevent *bev;
    struct evbuffer *held;  /* commands written before the proof went out */
    bool authed;            /* the proof is written: commands go straight out */
    struct mg_cmd *fifo;    /* ring of commands in flight */
    size_t fifo_head, fifo_len, fifo_cap;
    size_t unacked_bytes;
    size_t items_unacked;   /* copied items not yet acknowledged */
    bool begun;             /* the destination accepted "import begin" */

    struct keylist keys;    /* the last piece of the walk's keys */
    size_t next_key;        /* the first of them not yet handled */
    struct eng_cursor cursor; /* the walk of the slot's keys (COPY, then CLEAN) */
    bool walked;            /* every bucket walked: keys holds the last of them */
    unsigned inner_pending; /* forwarded writes still in the real engine */
    struct mg_fwd *ready_head, *ready_tail;
    unsigned nready;        /* completed at once, forwarded on the next turn */
    unsigned clean_pending; /* local deletes in flight */

    struct slotmap *old_map; /* the map before the switch, to restore */
    bool switched;
    int commit_tries;

    struct event *kick;     /* next slice of work, on the next loop turn */
    struct event *timer;    /* drain poll, redial delay */

    bool may_walk;          /* the kick runs: one piece of the walk may be taken */
    int walk_restarts;      /* CLEAN: walks begun again after a refusal */
    int io_timeout_sec;     /* of the import connection now */
    size_t keys_total;      /* keys the copy found */
    size_t keys_cleaned;    /* local copies deleted (CLEAN) */
    uint64_t keys_sent, forwards, skipped;
    char last[320];         /* outcome of the last finished move */
};

static void mg_fail(struct migration *mg, const char *why);
static void mg_pump(struct migration *mg);
static struct evbuffer *mg_out(struct migration *mg);
static void mg_dial_commit(struct migration *mg);
static void set_io_timeout(struct migration *mg, int sec);

static void mg_log(const struct migration *mg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mg_log(const struct migration *mg, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "migrate slot %u to %s:%d epoch %" PRIu64 ": ", mg->slot, mg->host,
            mg->port, mg->epoch);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* why = what, then the destination's reply line as the log may show it. */
static void quote_reply(char *why, size_t n, const char *what, const char *line)
{
    char shown[151];
    snprintf(why, n, "%s: %s", what, printable_copy(shown, sizeof(shown), line, strlen(line)));
}

/* ---- small containers ---- */

static bool keylist_add(struct keylist *l, const char *key, size_t nkey)
{
    if (l->n + 2 > l->ncap) {
        size_t ncap = l->ncap ? l->ncap * 2 : 256;
        size_t *o = realloc(l->off, ncap * sizeof(*o));
        if (!o)
            return false;
        l->off = o;
        l->ncap = ncap;
    }
    if (l->len + nkey > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8192;
        while (cap < l->len + nkey)
            cap *= 2;
        char *b = realloc(l->bytes, cap);
        if (!b)
            return false;
        l->bytes = b;
        l->cap = cap;
    }
    memcpy(l->bytes + l->len, key, nkey);
    l->off[l->n] = l->len;
    l->len += nkey;
    l->n++;
    l->off[l->n] = l->len;
    return true;
}

static void keylist_clear(struct keylist *l)
{
    free(l->bytes);
    free(l->off);
    memset(l, 0, sizeof(*l));
}

static const char *keylist_key(const struct keylist *l, size_t i, size_t *nkey)
{
    *nkey = l->off[i + 1] - l->off[i];
    return l->bytes + l->off[i];
}

struct collect {
    struct keylist *list;
    bool failed;
};

static void collect_key(void *ctx, const char *key, size_t nkey)
{
    struct collect *c = ctx;
    if (!c->failed && !keylist_add(c->list, key, nkey))
        c->failed = true;
}

/* A walk of the slot's keys starts over. */
static void walk_start(struct migration *mg)
{
    keylist_clear(&mg->keys);
    mg->next_key = 0;
    memset(&mg->cursor, 0, sizeof(mg->cursor));
    mg->walked = false;
}

/* The keys of slot in the next piece of a walk of e (MG_WALK_PIECE), into
 * keys, emptied first; *oom when some could not be kept.  The source's
 * copy and clean-up and the destination's purge all walk this way. */
static enum eng_walk collect_piece(struct engine *e, unsigned slot, struct eng_cursor *cursor,
                                   struct keylist *keys, bool *oom)
{
    keylist_clear(keys);
    struct collect c = { keys, false };
    enum eng_walk how = e->ops->slot_keys(e, slot, cursor, MG_WALK_PIECE, collect_key, &c);
    *oom = c.failed;
    return how;
}

/* Every key of mg->keys was handled: the next piece of the walk replaces
 * them.  False with *why when the walk cannot go on. */
static bool walk_piece(struct migration *mg, const char **why)
{
    bool oom;
    mg->next_key = 0;
    enum eng_walk how = collect_piece(mg->inner, mg->slot, &mg->cursor, &mg->keys, &oom);
    if (oom) {
        *why = "out of memory listing the slot's keys";
        return false;
    }
    if (how == ENG_WALK_REFUSED) {
        *why = "the process's keys changed under the walk of the slot";
        return false;
    }
    mg->walked = how == ENG_WALK_DONE;
    if (mg->phase == MG_COPY)
        mg->keys_total += mg->keys.n;
    return true;
}

static bool fifo_push(struct migration *mg, enum mg_cmd_kind kind, struct mg_fwd *fwd,
                      size_t bytes)
{
    if (mg->fifo_len == mg->fifo_cap) {
        size_t ncap = mg->fifo_cap ? mg->fifo_cap * 2 : 64;
        struct mg_cmd *n = malloc(ncap * sizeof(*n));
        if (!n)
            return false;
        for (size_t i = 0; i < mg->fifo_len; i++)
            n[i] = mg->fifo[(mg->fifo_head + i) % mg->fifo_cap];
        free(mg->fifo);
        mg->fifo = n;
        mg->fifo_cap = ncap;
        mg->fifo_head = 0;
    }
    struct mg_cmd *c = &mg->fifo[(mg->fifo_head + mg->fifo_len) % mg->fifo_cap];
    c->kind = kind;
    c->fwd = fwd;
    c->bytes = bytes;
    if (kind == CMD_ITEM)
        mg->items_unacked++;
    mg->fifo_len++;
    mg->unacked_bytes += bytes;
    return true;
}

static struct mg_cmd fifo_pop(struct migration *mg)
{
    struct mg_cmd c = mg->fifo[mg->fifo_head];
    mg->fifo_head = (mg->fifo_head + 1) % mg->fifo_cap;
    mg->fifo_len--;
    mg->unacked_bytes -= c.bytes;
    if (c.kind == CMD_ITEM)
        mg->items_unacked--;
    return c;
}

/* ---- slot maps ---- */

static struct slotmap *map_copy(const struct slotmap *m)
{
    struct slotmap *c = malloc(sizeof(*c));
    if (!c)
        return NULL;
    *c = *m;
    c->endpoints = malloc((size_t)m->nendpoints * sizeof(*c->endpoints));
    if (!c->endpoints) {
        free(c);
        return NULL;
    }
    memcpy(c->endpoints, m->endpoints, (size_t)m->nendpoints * sizeof(*c->endpoints));
    return c;
}

static void map_free(struct slotmap *m)
{
    if (m) {
        slotmap_free(m);
        free(m);
    }
}

/* The current map with slot given to endpoint `to` at epoch: installed. */
static int install_owner(struct server *s, unsigned slot, int to, uint64_t epoch)
{
    struct slotmap *n = map_copy(s->slotmap);
    if (!n)
        return -1;
    n->slot[slot] = (uint16_t)to;
    n->epoch = epoch;
    server_set_slotmap(s, n);
    return 0;
}

/* ---- forwarded client writes ---- */

static bool mg_forwarding(const struct migration *mg)
{
    return mg->phase == MG_DRAIN || mg->phase == MG_COPY || mg->phase == MG_SWITCH;
}

/* Outcomes after which the key may hold something new (NOT_FOUND too: the
 * key may have expired here, so the destination must drop it as well). */
static bool may_have_changed(eng_status st)
{
    return st == ENG_SUCCESS || st == ENG_NOT_FOUND;
}

static void fwd_complete(struct mg_fwd *f)
{
    struct eng_result res = f->res;
    if (res.msg)
        res.msg = f->msg;
    f->done(f->cookie, &res);
    free(f);
}

static void fwd_keep_result(struct mg_fwd *f, const struct eng_result *res, eng_status st)
{
    f->res = *res;
    f->res.status = st;
    if (res->msg) {
        snprintf(f->msg, sizeof(f->msg), "%s", res->msg);
        f->res.msg = f->msg;
    }
}

/* Whether the key fits in a text request line to our servers: their parser
 * splits on spaces and ends lines at LF, and takes every other byte
 * (control bytes too, as memcached does; memcaslap's keys hold them) but
 * NUL, which the "%.*s" formatting below would cut the key at. */
static bool key_is_text(const char *key, size_t nkey)
{
    if (nkey == 0 || nkey > MG_KEY_MAX)
        return false;
    for (size_t i = 0; i < nkey; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch == ' ' || ch == '\r' || ch == '\n' || ch == '\0')
            return false;
    }
    return true;
}

enum send_result { SENT, SKIPPED, NOT_TEXT, SEND_FAILED };

/* Send the key's current state: "set" with its value, or "delete" when it
 * is absent (items only: an absent item is skipped). */
static enum send_result send_state(struct migration *mg, const char *key, size_t nkey,
                                   enum mg_cmd_kind kind, struct mg_fwd *fwd)
{
    if (!key_is_text(key, nkey)) {
        /* Only the binary protocol can store such a key.  Dropping it
         * would lose it: the move fails instead and the source keeps the
         * slot. */
        mg->skipped++;
        mg_log(mg, "a key of %zu bytes holds a space, CR, LF or NUL: the text import cannot carry it",
               nkey);
        return NOT_TEXT;
    }
    struct evbuffer *out = mg_out(mg);
    struct eng_value v;
    struct eng_result r = { .status = ENG_SUCCESS };
    memset(&v, 0, sizeof(v));
    eng_status st = mg->inner->ops->get(mg->inner, key, nkey, &v, &r);
    if (st != ENG_SUCCESS && st != ENG_NOT_FOUND) {
        mg_log(mg, "cannot read a key of %zu bytes: %s", nkey, r.msg ? r.msg : "engine error");
        return SEND_FAILED;
    }
    bool live = st == ENG_SUCCESS && (v.exptime == 0 || v.exptime > (int64_t)time(NULL));
    size_t before = evbuffer_get_length(out);
    int rc;
    if (live) {
        rc = evbuffer_add_printf(out, "set %.*s %" PRIu32 " %" PRId64 " %" PRIu32 "\r\n",
                                 (int)nkey, key, v.flags, v.exptime, v.nbytes);
        if (rc >= 0)
            rc = evbuffer_add(out, v.data, (size_t)v.nbytes + (v.bare ? 0 : 2));
        if (rc >= 0 && v.bare)
            rc = evbuffer_add(out, "\r\n", 2);
    } else if (kind == CMD_ITEM) {
        rc = 1;
    } else {
        rc = evbuffer_add_printf(out, "delete %.*s\r\n", (int)nkey, key);
    }
    if (st == ENG_SUCCESS)
        mg->inner->ops->release(mg->inner, v.handle);
    if (!live && kind == CMD_ITEM)
        return SKIPPED;
    size_t bytes = evbuffer_get_length(out) - before;
    if (rc < 0 || !fifo_push(mg, kind, fwd, bytes))
        return SEND_FAILED;
    return SENT;
}

static void fwd_forward(struct mg_fwd *f)
{
    struct migration *mg = f->mg;
    if (f->gen != mg->gen || !mg_forwarding(mg) || !may_have_changed(f->res.status)) {
        fwd_complete(f);
        return;
    }
    enum send_result sr = send_state(mg, f->key, f->nkey, CMD_FORWARD, f);
    if (sr == SENT) {
        mg->forwards++;
        mg->srv->stats.migrate_forwards++;
        return;
    }
    fwd_complete(f);
    if (sr == SEND_FAILED)
        mg_fail(mg, "out of memory forwarding a write");
    else if (sr == NOT_TEXT)
        mg_fail(mg, "the slot holds a key with a space, CR, LF or NUL (binary protocol only)");
}

static void ready_push(struct migration *mg, struct mg_fwd *f)
{
    f->next = NULL;
    if (mg->ready_tail)
        mg->ready_tail->next = f;
    else
        mg->ready_head = f;
    mg->ready_tail = f;
    mg->nready++;
    event_active(mg->kick, EV_TIMEOUT, 0);
}

static void forward_ready(struct migration *mg)
{
    while (mg->ready_head) {
        struct mg_fwd *f = mg->ready_head;
        mg->ready_head = f->next;
        if (!mg->ready_head)
            mg->ready_tail = NULL;
        mg->nready--;
        fwd_forward(f);
    }
}

/* The real engine completed a write of the moving slot later. */
static void fwd_inner_done(void *cookie, const struct eng_result *res)
{
    struct mg_fwd *f = cookie;
    struct migration *mg = f->mg;
    fwd_keep_result(f, res, res->status);
    mg->inner_pending--;
    fwd_forward(f);
    mg_pump(mg);
}

/* ---- the wrapper engine ---- */

static struct migration *mg_of(struct engine *e)
{
    return e->priv;
}

static eng_status wrap_get(struct engine *e, const char *key, size_t nkey,
                           struct eng_value *out, struct eng_result *res)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->get(in, key, nkey, out, res);
}

static void wrap_release(struct engine *e, void *handle)
{
    struct engine *in = mg_of(e)->inner;
    in->ops->release(in, handle);
}

static eng_status wrap_mutate(struct engine *e, const struct eng_mutation *m,
                              struct eng_result *res, eng_done_fn done, void *cookie)
{
    struct migration *mg = mg_of(e);
    struct engine *in = mg->inner;
    if (!mg_forwarding(mg) || m->op == ENG_OP_FLUSH || slotmap_slot(m->key, m->nkey) != mg->slot)
        return in->ops->mutate(in, m, res, done, cookie);
    struct mg_fwd *f = malloc(sizeof(*f) + m->nkey);
    if (!f) {
        res->status = ENG_FAILED;
        res->msg = "out of memory";
        return ENG_FAILED;
    }
    f->mg = mg;
    f->gen = mg->gen;
    f->done = done;
    f->cookie = cookie;
    f->nkey = m->nkey;
    memcpy(f->key, m->key, m->nkey);
    struct eng_result r = { .status = ENG_SUCCESS };
    mg->inner_pending++;
    eng_status st = in->ops->mutate(in, m, &r, fwd_inner_done, f);
    if (st != ENG_PENDING) {
        /* The engine contract: done() only from the event loop. */
        mg->inner_pending--;
        fwd_keep_result(f, &r, st);
        ready_push(mg, f);
    }
    return ENG_PENDING;
}

static bool wrap_stats(struct engine *e, const char *group, eng_stat_fn emit, void *ctx)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->stats(in, group, emit, ctx);
}

static void wrap_stats_reset(struct engine *e)
{
    struct engine *in = mg_of(e)->inner;
    in->ops->stats_reset(in);
}

static void wrap_tick(struct engine *e, time_t now)
{
    struct engine *in = mg_of(e)->inner;
    in->ops->tick(in, now);
}

static bool wrap_admin(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->admin && in->ops->admin(in, argc, argv, write, ctx);
}

static enum eng_walk wrap_slot_keys(struct engine *e, unsigned slot, struct eng_cursor *cursor,
                                    size_t budget,
                                    void (*fn)(void *ctx, const char *key, size_t nkey),
                                    void *ctx)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->slot_keys(in, slot, cursor, budget, fn, ctx);
}

static int wrap_lost_peers(struct engine *e, struct eng_lost_peer *out, int max)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->lost_peers ? in->ops->lost_peers(in, out, max) : 0;
}

/* The optional ops go straight to the engine (wrap_ops_for leaves out
 * those it lacks): after a move the coordinator's recovery messages, the
 * heartbeat's progress, the meta commands' marks and the dumps must reach
 * it as before. */
static bool wrap_read_wait(struct engine *e, const char *key, size_t nkey, eng_done_fn done,
                           void *cookie)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->read_wait(in, key, nkey, done, cookie);
}

static void wrap_control(struct engine *e, const char *text, size_t len)
{
    struct engine *in = mg_of(e)->inner;
    in->ops->control(in, text, len);
}

static size_t wrap_heartbeat_extra(struct engine *e, char *buf, size_t len)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->heartbeat_extra(in, buf, len);
}

static eng_status wrap_get_ex(struct engine *e, const char *key, size_t nkey, unsigned opts,
                              struct eng_value *out, struct eng_result *res)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->get_ex(in, key, nkey, opts, out, res);
}

static bool wrap_set_mem_limit(struct engine *e, size_t bytes)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->set_mem_limit(in, bytes);
}

static bool wrap_visit_recent(struct engine *e, bool (*fn)(void *ctx, const struct eng_value *v),
                              void *ctx)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->visit_recent(in, fn, ctx);
}

static enum eng_walk wrap_walk(struct engine *e, struct eng_cursor *cursor, size_t budget,
                               void (*fn)(void *ctx, const struct eng_value *v), void *ctx)
{
    struct engine *in = mg_of(e)->inner;
    return in->ops->walk(in, cursor, budget, fn, ctx);
}

static void wrap_map_changed(struct engine *e)
{
    struct engine *in = mg_of(e)->inner;
    in->ops->map_changed(in);
}

/* Server shutdown: the real engine goes, and the migration state with it. */
static void wrap_destroy(struct engine *e)
{
    struct migration *mg = mg_of(e);
    struct engine *in = mg->inner;
    mg->phase = MG_IDLE;    /* nothing may start from a late callback now */
    if (mg->bev)
        bufferevent_free(mg->bev);
    while (mg->ready_head) {
        struct mg_fwd *f = mg->ready_head;
        mg->ready_head = f->next;
        free(f);
    }
    while (mg->fifo_len > 0) {
        struct mg_cmd c = fifo_pop(mg);
        free(c.fwd);
    }
    in->ops->destroy(in);
    event_free(mg->kick);
    event_free(mg->timer);
    keylist_clear(&mg->keys);
    map_free(mg->old_map);
    free(mg->fifo);
    mg->srv->migration = NULL;
    free(mg);
}

static const struct engine_ops wrap_ops_template = {
    .get = wrap_get,
    .release = wrap_release,
    .mutate = wrap_mutate,
    .stats = wrap_stats,
    .stats_reset = wrap_stats_reset,
    .tick = wrap_tick,
    .destroy = wrap_destroy,
    .admin = wrap_admin,
    .slot_keys = wrap_slot_keys,
    .lost_peers = wrap_lost_peers,
    .read_wait = wrap_read_wait,
    .control = wrap_control,
    .heartbeat_extra = wrap_heartbeat_extra,
    .get_ex = wrap_get_ex,
    .set_mem_limit = wrap_set_mem_limit,
    .visit_recent = wrap_visit_recent,
    .walk = wrap_walk,
    .map_changed = wrap_map_changed,
};

/* The wrapper's ops for inner: each optional op only where inner has it,
 * since callers test an op for NULL to learn whether the engine can. */
static void wrap_ops_for(struct engine_ops *ops, const struct engine_ops *inner)
{
    *ops = wrap_ops_template;
    ops->name = inner->name;
    if (!inner->admin)
        ops->admin = NULL;
    if (!inner->slot_keys)
        ops->slot_keys = NULL;
    if (!inner->lost_peers)
        ops->lost_peers = NULL;
    if (!inner->read_wait)
        ops->read_wait = NULL;
    if (!inner->control)
        ops->control = NULL;
    if (!inner->heartbeat_extra)
        ops->heartbeat_extra = NULL;
    if (!inner->get_ex)
        ops->get_ex = NULL;
    if (!inner->set_mem_limit)
        ops->set_mem_limit = NULL;
    if (!inner->visit_recent)
        ops->visit_recent = NULL;
    if (!inner->walk)
        ops->walk = NULL;
    if (!inner->map_changed)
        ops->map_changed = NULL;
}

/* ---- ending a move ---- */

static void close_import(struct migration *mg)
{
    if (mg->bev) {
        bufferevent_free(mg->bev);
        mg->bev = NULL;
    }
    if (mg->held) {
        evbuffer_free(mg->held);
        mg->held = NULL;
    }
    mg->authed = false;
}

/* Where commands go: held back until the proof of the secret is written
 * (the destination refuses control commands before it), then the socket. */
static struct evbuffer *mg_out(struct migration *mg)
{
    return mg->authed ? bufferevent_get_output(mg->bev) : mg->held;
}

/* The destination's nonce arrived: write the proof, then everything held. */
static void answer_nonce(struct migration *mg, const char *line)
{
    char proof[96], why[200];
    struct evbuffer *out = bufferevent_get_output(mg->bev);
    if (auth_admin_reply_line(mg->srv->cluster ? mg->srv->cluster->secret : NULL, line,
                              proof, sizeof(proof)) < 0) {
        quote_reply(why, sizeof(why), "destination did not offer authentication", line);
        mg_fail(mg, why);
        return;
    }
    if (evbuffer_add_printf(out, "%s\r\n", proof) < 0 || evbuffer_add_buffer(out, mg->held) < 0) {
        mg_fail(mg, "out of memory sending the proof");
        return;
    }
    mg->authed = true;
}

/* Take every forwarded write still waiting (sent or about to be) out of
 * the move, in order, to be answered with its local outcome. */
static struct mg_fwd *take_waiting_forwards(struct migration *mg)
{
    struct mg_fwd *head = NULL, **tail = &head;
    while (mg->fifo_len > 0) {
        struct mg_cmd c = fifo_pop(mg);
        if (c.kind == CMD_FORWARD) {
            *tail = c.fwd;
            tail = &c.fwd->next;
        }
    }
    mg->unacked_bytes = 0;
    mg->items_unacked = 0;
    *tail = mg->ready_head;
    mg->ready_head = mg->ready_tail = NULL;
    mg->nready = 0;
    return head;
}

/* Answering may run client requests (even start the next move): only
 * once the move's own state is settled. */
static void answer_forwards(struct mg_fwd *list)
{
    while (list) {
        struct mg_fwd *f = list;
        list = f->next;
        fwd_complete(f);
    }
}

static void mg_finish(struct migration *mg, bool ok, const char *why)
{
    snprintf(mg->last, sizeof(mg->last), "%u %s:%d %" PRIu64 " %s keys %zu sent %" PRIu64
             " forwards %" PRIu64 "%s%s", mg->slot, mg->host, mg->port, mg->epoch,
             ok ? "ok" : "failed", mg->keys_total, mg->keys_sent, mg->forwards, ok ? "" : " ",
             ok ? "" : why);
    mg_log(mg, "%s (%" PRIu64 " keys sent, %" PRIu64 " writes forwarded)%s%s",
           ok ? "done" : "failed", mg->keys_sent, mg->forwards, ok ? "" : ": ", ok ? "" : why);
    mg->phase = MG_IDLE;
    close_import(mg);
    keylist_clear(&mg->keys);
    map_free(mg->old_map);
    mg->old_map = NULL;
    evtimer_del(mg->timer);
    if (mg->done)
        mg->done(mg->done_ctx, mg->slot, mg->epoch, ok, why);
}

/* Before the commit: give up, the slot stays here at the old epoch. */
static void mg_abandon(struct migration *mg, const char *why)
{
    struct server *s = mg->srv;
    if (mg->switched && mg->old_map && s->slotmap && s->slotmap->epoch == mg->epoch) {
        server_set_slotmap(s, mg->old_map);
        mg->old_map = NULL;
        mg_log(mg, "old map restored (epoch %" PRIu64 ")", s->slotmap->epoch);
    }
    mg->switched = false;
    struct mg_fwd *waiting = take_waiting_forwards(mg);
    mg_finish(mg, false, why);
    answer_forwards(waiting);
}

/* The import connection failed or the destination answered an error. */
static void mg_fail(struct migration *mg, const char *why)
{
    if (mg->phase == MG_IDLE || mg->phase == MG_CLEAN)
        return;
    if (mg->phase != MG_COMMIT) {
        mg_abandon(mg, why);
        return;
    }
    /* The commit may or may not have been applied: ask again.  Nothing
     * but begin and commit is in flight now (writes were all answered
     * before the commit was sent). */
    close_import(mg);
    mg->fifo_len = 0;
    mg->unacked_bytes = 0;
    mg->items_unacked = 0;
    if (mg->commit_tries >= MG_COMMIT_TRIES) {
        mg_finish(mg, false, MIGRATE_OUTCOME_UNKNOWN);
        return;
    }
    mg->commit_tries++;
    mg_log(mg, "%s; asking for the commit again (%d of %d)", why, mg->commit_tries,
           MG_COMMIT_TRIES);
    struct timeval tv = { 0, MG_REDIAL_USEC };
    evtimer_add(mg->timer, &tv);
}

/* ---- the import connection ---- */

static bool line_is(const char *line, const char *word)
{
    return strcmp(line, word) == 0;
}

static void start_clean(struct migration *mg)
{
    struct server *s = mg->srv;
    s->stats.migrate_moves++;
    close_import(mg);
    mg->phase = MG_CLEAN;
    mg->clean_pending = 0;
    mg->keys_cleaned = 0;
    mg->walk_restarts = 0;
    walk_start(mg);
    mg_log(mg, "committed; deleting the local copies");
    mg_pump(mg);
}

/* One reply line for the oldest command in flight. */
static void on_reply(struct migration *mg, const char *line)
{
    if (mg->fifo_len == 0) {
        mg_fail(mg, "unexpected reply from the destination");
        return;
    }
    struct mg_cmd c = fifo_pop(mg);
    char why[200];
    switch (c.kind) {
    case CMD_AUTH:
        answer_nonce(mg, line);
        return;
    case CMD_PROOF:
        if (line_is(line, "OK"))
            return;
        quote_reply(why, sizeof(why), "destination refused our proof of the cluster secret", line);
        mg_fail(mg, why);
        return;
    case CMD_BEGIN:
        if (line_is(line, "OK")) {
            mg->begun = true;
            set_io_timeout(mg, MG_IO_TIMEOUT_SEC);
            return;
        }
        quote_reply(why, sizeof(why), "destination refused the import", line);
        mg_fail(mg, why);
        return;
    case CMD_ITEM:
        if (line_is(line, "STORED"))
            return;
        quote_reply(why, sizeof(why), "destination did not store an item", line);
        mg_fail(mg, why);
        return;
    case CMD_FORWARD:
        fwd_complete(c.fwd);
        if (line_is(line, "STORED") || line_is(line, "DELETED") || line_is(line, "NOT_FOUND"))
            return;
        quote_reply(why, sizeof(why), "destination did not take a write", line);
        mg_fail(mg, why);
        return;
    case CMD_COMMIT:
        if (line_is(line, "OK")) {
            start_clean(mg);
            return;
        }
        quote_reply(why, sizeof(why), "destination refused the commit", line);
        if (mg->commit_tries > 0) {
            /* An earlier try's outcome is not known (the destination may
             * have taken it and died since: this may be its successor):
             * the slot stays with the destination here, nothing deleted. */
            char unknown[sizeof(why) + 32];
            snprintf(unknown, sizeof(unknown), MIGRATE_OUTCOME_UNKNOWN " (%s)", why);
            mg_finish(mg, false, unknown);
            return;
        }
        /* A definite no: the destination did not take the slot. */
        mg->phase = MG_SWITCH;
        mg_abandon(mg, why);
        return;
    }
}

static void on_import_read(struct bufferevent *bev, void *arg)
{
    struct migration *mg = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    uint64_t gen = mg->gen;
    char *line;
    size_t n;
    while (mg->bev == bev && (line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF)) != NULL) {
        on_reply(mg, line);
        free(line);
        if (mg->gen != gen || mg->phase == MG_IDLE)
            return;
    }
    mg_pump(mg);
}

static void on_import_event(struct bufferevent *bev, short what, void *arg)
{
    struct migration *mg = arg;
    if (what & BEV_EVENT_CONNECTED)
        return;
    if ((what & BEV_EVENT_TIMEOUT) && mg->fifo_len == 0) {
        /* Idle is fine (nothing asked); keep listening. */
        bufferevent_enable(bev, EV_READ | EV_WRITE);
        return;
    }
    char why[160];
    if (what & BEV_EVENT_TIMEOUT)
        snprintf(why, sizeof(why), "no answer from the destination for %d s", mg->io_timeout_sec);
    else if (what & BEV_EVENT_EOF)
        snprintf(why, sizeof(why), "the destination closed the import connection");
    else {
        char tls_why[120] = "";
        if (mg->srv->tls_dialer != NULL)
            migrate_tls_error(bev, tls_why, sizeof(tls_why));
        snprintf(why, sizeof(why), "import connection failed: %s",
                 tls_why[0] ? tls_why : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    }
    mg_fail(mg, why);
}

/* Until it answers "import begin <slot>", the destination reads nothing
 * (it walks its table for stale copies: purge_slot), so neither side of
 * the connection moves for a while. */
static void set_io_timeout(struct migration *mg, int sec)
{
    struct timeval tv = { sec, 0 };
    mg->io_timeout_sec = sec;
    bufferevent_set_timeouts(mg->bev, &tv, &tv);
}

/* Open the import connection and send "cocytus import begin". */
static int open_import(struct migration *mg, bool purge, char *err, size_t errlen)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", mg->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(mg->host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", mg->host, gai_strerror(rc));
        return -1;
    }
    /* Under -Z the destination's client port speaks TLS: dial it so,
     * checking that its certificate names the host of the slot map. */
    struct tls_dialer *d = mg->srv->tls_dialer;
    struct bufferevent *bev =
        d != NULL ? migrate_tls_dial(d, mg->srv->base, mg->host, BEV_OPT_DEFER_CALLBACKS)
                  : bufferevent_socket_new(mg->srv->base, -1,
                                           BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (!bev || bufferevent_socket_connect(bev, ai->ai_addr, (int)ai->ai_addrlen) < 0) {
        snprintf(err, errlen, "cannot connect to %s:%d", mg->host, mg->port);
        freeaddrinfo(ai);
        if (bev)
            bufferevent_free(bev);
        return -1;
    }
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bufferevent_setcb(bev, on_import_read, NULL, on_import_event, mg);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    mg->bev = bev;
    set_io_timeout(mg, purge ? MG_PURGE_TIMEOUT_SEC : MG_IO_TIMEOUT_SEC);
    /* Only the first dial of a move asks the destination to drop stale
     * copies of the slot: a redial for the commit must not wipe what this
     * move has just copied (the first commit may not have been applied). */
    char begin[64];
    int n = purge ? snprintf(begin, sizeof(begin), "cocytus import begin %u\r\n", mg->slot)
                  : snprintf(begin, sizeof(begin), "cocytus import begin\r\n");
    static const char ask[] = "cocytus auth\r\n";
    mg->held = evbuffer_new();
    mg->authed = false;
    if (!mg->held || bufferevent_write(bev, ask, sizeof(ask) - 1) < 0 ||
        !fifo_push(mg, CMD_AUTH, NULL, sizeof(ask) - 1) || !fifo_push(mg, CMD_PROOF, NULL, 0) ||
        evbuffer_add(mg->held, begin, (size_t)n) < 0 || !fifo_push(mg, CMD_BEGIN, NULL, (size_t)n)) {
        snprintf(err, errlen, "out of memory");
        close_import(mg);
        return -1;
    }
    return 0;
}

static void send_commit(struct migration *mg)
{
    struct evbuffer *out = mg_out(mg);
    size_t before = evbuffer_get_length(out);
    if (evbuffer_add_printf(out, "cocytus import commit %u %" PRIu64 "\r\n", mg->slot,
                            mg->epoch) < 0 ||
        !fifo_push(mg, CMD_COMMIT, NULL, evbuffer_get_length(out) - before))
        mg_fail(mg, "out of memory sending the commit");
}

/* Redial after a failure during the commit: begin, then commit again. */
static void mg_dial_commit(struct migration *mg)
{
    char err[160];
    if (open_import(mg, false, err, sizeof(err)) < 0) {
        mg_fail(mg, err);
        return;
    }
    send_commit(mg);
}

/* ---- progress ---- */

/* Install the new map here: from now on the slot answers MOVED, so no new
 * write of it starts; those in flight finish and are forwarded. */
static void mg_switch(struct migration *mg)
{
    struct server *s = mg->srv;
    char why[160];
    int to = s->slotmap ? slotmap_find(s->slotmap, mg->host, mg->port) : -1;
    if (to < 0 || s->slotmap->epoch >= mg->epoch) {
        snprintf(why, sizeof(why), "the map changed during the move (epoch %" PRIu64 ")",
                 s->slotmap ? s->slotmap->epoch : 0);
        mg_abandon(mg, why);
        return;
    }
    mg->old_map = map_copy(s->slotmap);
    if (!mg->old_map || install_owner(s, mg->slot, to, mg->epoch) < 0) {
        mg_abandon(mg, "out of memory switching the map");
        return;
    }
    mg->switched = true;
    mg->phase = MG_SWITCH;
    mg_log(mg, "%zu keys copied, map switched; committing once writes in flight are acknowledged",
           mg->keys_total);
}

/* The pump goes on in the next loop iteration, after the sockets were
 * polled: a zero timeout, not event_active, which libevent runs in the
 * same iteration, so a pump that kept rescheduling itself that way held
 * the loop until the whole slot was done. */
static void next_turn(struct migration *mg)
{
    static const struct timeval now = { 0, 0 };
    event_add(mg->kick, &now);
}

/* Is there a key to handle now?  Takes the next piece of the walk when
 * the last one is used up, only from the kick and one piece per kick
 * (may_walk): acks and completions that pump the copy between kicks use
 * the keys listed, or a burst of them would walk the table in one turn.
 * False when not (now); with *why set, the walk cannot go on. */
static bool next_key_ready(struct migration *mg, const char **why)
{
    *why = NULL;
    while (mg->next_key == mg->keys.n) {
        if (mg->walked || !mg->may_walk)
            return false;
        mg->may_walk = false;
        if (!walk_piece(mg, why))
            return false;
    }
    return true;
}

static bool window_full(const struct migration *mg)
{
    return mg->fifo_len >= MG_WINDOW_CMDS || mg->unacked_bytes >= MG_WINDOW_BYTES;
}

static void copy_some(struct migration *mg)
{
    int budget = MG_KEYS_PER_TURN;
    const char *why = NULL;
    while (budget > 0 && !window_full(mg)) {
        if (!next_key_ready(mg, &why))
            break;
        budget--;
        size_t nkey;
        const char *key = keylist_key(&mg->keys, mg->next_key, &nkey);
        mg->next_key++;
        enum send_result sr = send_state(mg, key, nkey, CMD_ITEM, NULL);
        if (sr == SEND_FAILED) {
            mg_fail(mg, "out of memory copying an item");
            return;
        }
        if (sr == NOT_TEXT) {
            mg_fail(mg, "the slot holds a key with a space, CR, LF or NUL (binary protocol only)");
            return;
        }
        if (sr == SENT) {
            mg->keys_sent++;
            mg->srv->stats.migrate_keys_sent++;
        }
    }
    if (why != NULL) {
        mg_fail(mg, why);
        return;
    }
    /* Switch once every copy is acknowledged: a dead or refusing
     * destination is noticed before the slot answers MOVED here, and the
     * time it answers MOVED before the destination takes it stays short. */
    if (mg->walked && mg->next_key == mg->keys.n) {
        if (mg->begun && mg->items_unacked == 0)
            mg_switch(mg);
        return;
    }
    if (!window_full(mg))
        next_turn(mg);   /* more next turn; acks also resume */
}

static void clean_done(void *cookie, const struct eng_result *res)
{
    struct migration *mg = cookie;
    (void)res;
    mg->clean_pending--;
    mg_pump(mg);
}

static void clean_some(struct migration *mg)
{
    struct engine *in = mg->inner;
    int budget = MG_DELETES_PER_TURN;
    const char *why = NULL;
    while (budget > 0 && mg->clean_pending < MG_DELETES_INFLIGHT && next_key_ready(mg, &why)) {
        budget--;
        size_t nkey;
        const char *key = keylist_key(&mg->keys, mg->next_key, &nkey);
        mg->next_key++;
        mg->keys_cleaned++;
        struct eng_mutation m = { .op = ENG_OP_DELETE, .key = key, .nkey = nkey };
        struct eng_result r = { .status = ENG_SUCCESS };
        if (in->ops->mutate(in, &m, &r, clean_done, mg) == ENG_PENDING)
            mg->clean_pending++;
    }
    if (why != NULL) {
        /* Committed: the destination has the slot.  Deletes are
         * idempotent, so the walk begins again (a table replaced by a
         * copy, memory back); after a few tries what is left here
         * answers MOVED until it is evicted or expires. */
        if (mg->walk_restarts++ < MG_CLEAN_RESTARTS) {
            mg_log(mg, "%s; deleting the local copies again from the start", why);
            walk_start(mg);
        } else {
            mg_log(mg, "%s; %zu local copies deleted, the others stay until evicted or expired",
                   why, mg->keys_cleaned);
            mg->walked = true;
            keylist_clear(&mg->keys);
            mg->next_key = 0;
        }
    }
    if (!mg->walked || mg->next_key < mg->keys.n) {
        if (mg->clean_pending < MG_DELETES_INFLIGHT)
            next_turn(mg);   /* more next turn; deletes also resume */
        return;
    }
    if (mg->clean_pending == 0) {
        mg_log(mg, "%zu local copies deleted", mg->keys_cleaned);
        mg_finish(mg, true, NULL);
    }
}

/* Do whatever the phase allows now. */
static void mg_pump(struct migration *mg)
{
    switch (mg->phase) {
    case MG_COPY:
        copy_some(mg);
        if (mg->phase != MG_SWITCH)
            break;
        __attribute__((fallthrough));
    case MG_SWITCH:
        if (mg->inner_pending == 0 && mg->nready == 0 && mg->fifo_len == 0) {
            mg->phase = MG_COMMIT;
            mg->commit_tries = 0;
            send_commit(mg);
        }
        break;
    case MG_CLEAN:
        clean_some(mg);
        break;
    default:
        break;
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    struct migration *mg = arg;
    forward_ready(mg);
    mg->may_walk = true;
    mg_pump(mg);
    mg->may_walk = false;
}

/* DRAIN: poll until the writes older than the move completed; COMMIT:
 * the redial delay is over. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct migration *mg = arg;
    if (mg->phase == MG_COMMIT) {
        mg_dial_commit(mg);
        return;
    }
    if (mg->phase != MG_DRAIN)
        return;
    if (conn_marked_inflight(mg->srv) > 0) {
        struct timeval tv = { 0, MG_DRAIN_POLL_USEC };
        evtimer_add(mg->timer, &tv);
        return;
    }
    walk_start(mg);
    mg->phase = MG_COPY;
    mg->keys_total = 0;
    mg_log(mg, "copying the slot's keys (the table walked a piece per turn)");
    mg_pump(mg);
}

/* ---- starting a move ---- */

/* The wrapper goes in once, at the first move, and stays. */
static struct migration *mg_install(struct server *s)
{
    if (s->migration)
        return s->migration;
    struct migration *mg = calloc(1, sizeof(*mg));
    if (!mg)
        return NULL;
    mg->kick = event_new(s->base, -1, 0, on_kick, mg);
    mg->timer = evtimer_new(s->base, on_timer, mg);
    if (!mg->kick || !mg->timer) {
        if (mg->kick)
            event_free(mg->kick);
        if (mg->timer)
            event_free(mg->timer);
        free(mg);
        return NULL;
    }
    mg->srv = s;
    mg->inner = s->engine;
    wrap_ops_for(&mg->ops, mg->inner->ops);
    mg->wrap.ops = &mg->ops;
    mg->wrap.priv = mg;
    s->engine = &mg->wrap;
    s->migration = mg;
    return mg;
}

static int start_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int start_error(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_start(struct server *s, unsigned slot, const char *host, int port,
                       uint64_t new_epoch, char *err, size_t errlen)
{
    if (!s->slotmap || !s->routes || s->slot_self < 0)
        return start_error(err, errlen, "this process serves no slots");
    if (slot >= SLOTMAP_SLOTS)
        return start_error(err, errlen, "slot %u out of range", slot);
    struct engine *e = s->migration ? s->migration->inner : s->engine;
    if (!e->ops->slot_keys)
        return start_error(err, errlen, "the %s engine cannot move slots", e->ops->name);
    if (s->slotmap->slot[slot] != s->slot_self)
        return start_error(err, errlen, "slot %u is not served here", slot);
    int to = slotmap_find(s->slotmap, host, port);
    if (to < 0)
        return start_error(err, errlen, "%s:%d is not a serving process of the map", host, port);
    if (to == s->slot_self)
        return start_error(err, errlen, "%s:%d is this process", host, port);
    if (new_epoch <= s->slotmap->epoch)
        return start_error(err, errlen, "epoch %" PRIu64 " is not newer than %" PRIu64,
                           new_epoch, s->slotmap->epoch);
    if (s->migration && s->migration->phase != MG_IDLE)
        return start_error(err, errlen, "slot %u is moving already", s->migration->slot);
    if (s->shutting_down)
        return start_error(err, errlen, "shutting down");
    return 0;
}

int migrate_start(struct server *s, unsigned slot, const char *host, int port,
                  uint64_t new_epoch, migrate_done_fn done, void *ctx,
                  char *err, size_t errlen)
{
    if (check_start(s, slot, host, port, new_epoch, err, errlen) < 0)
        return -1;
    if (strlen(host) >= SLOTMAP_HOST_MAX)
        return start_error(err, errlen, "host name too long");
    struct migration *mg = mg_install(s);
    if (!mg)
        return start_error(err, errlen, "out of memory");
    mg->gen++;
    mg->slot = slot;
    snprintf(mg->host, sizeof(mg->host), "%s", host);
    mg->port = port;
    mg->epoch = new_epoch;
    mg->done = done;
    mg->done_ctx = ctx;
    mg->fifo_len = 0;
    mg->fifo_head = 0;
    mg->unacked_bytes = 0;
    mg->items_unacked = 0;
    mg->begun = false;
    mg->keys_sent = mg->forwards = mg->skipped = 0;
    mg->keys_total = 0;
    mg->switched = false;
    mg->commit_tries = 0;
    keylist_clear(&mg->keys);
    if (open_import(mg, true, err, errlen) < 0)
        return -1;
    mg->phase = MG_DRAIN;
    size_t older = conn_mark_inflight(s);
    mg_log(mg, "started (%zu writes in flight to wait for)", older);
    struct timeval now = { 0, 0 };
    evtimer_add(mg->timer, &now);
    return 0;
}

bool migrate_active(const struct server *s, unsigned slot)
{
    const struct migration *mg = s->migration;
    return mg && mg->phase != MG_IDLE && mg->slot == slot;
}

/* ---- admin words ---- */

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* "host:port" (the last colon splits). */
static bool parse_endpoint(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(s, ':');
    uint64_t p;
    if (!colon || colon == s || (size_t)(colon - s) >= hostlen || !parse_u64(colon + 1, &p) ||
        p == 0 || p > 65535)
        return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = (int)p;
    return true;
}

static void admin_done(void *ctx, unsigned slot, uint64_t epoch, bool ok, const char *why)
{
    (void)ctx;
    (void)slot;
    (void)epoch;
    (void)ok;
    (void)why;   /* logged by mg_finish; `cocytus migrate status` shows it */
}

static void admin_status(struct server *s, eng_write_fn write, void *ctx)
{
    const struct migration *mg = s->migration;
    if (mg && mg->phase != MG_IDLE)
        engine_reply(write, ctx, "MIGRATE %u %s:%d %" PRIu64 " %s keys %zu sent %" PRIu64
              " forwards %" PRIu64 "\r\n", mg->slot, mg->host, mg->port, mg->epoch,
              phase_names[mg->phase], mg->keys_total, mg->keys_sent, mg->forwards);
    if (mg && mg->last[0])
        engine_reply(write, ctx, "LAST %s\r\n", mg->last);
    engine_reply(write, ctx, "END\r\n");
}

static void admin_migrate(struct server *s, int argc, char **argv, eng_write_fn write,
                          void *ctx)
{
    if (argc == 2 && strcmp(argv[1], "status") == 0) {
        admin_status(s, write, ctx);
        return;
    }
    uint64_t slot, epoch;
    char host[SLOTMAP_HOST_MAX];
    int port;
    if (argc != 4 || !parse_u64(argv[1], &slot) || slot >= SLOTMAP_SLOTS ||
        !parse_endpoint(argv[2], host, sizeof(host), &port) || !parse_u64(argv[3], &epoch)) {
        engine_reply(write, ctx, "CLIENT_ERROR usage: cocytus migrate <slot 0-16383> <host>:<port> "
              "<epoch> | cocytus migrate status\r\n");
        return;
    }
    char err[200];
    if (migrate_start(s, (unsigned)slot, host, port, epoch, admin_done, NULL, err,
                      sizeof(err)) < 0) {
        engine_reply(write, ctx, "SERVER_ERROR %s\r\n", err);
        return;
    }
    engine_reply(write, ctx, "OK\r\n");
}

static void note_import_begun(struct server *s, unsigned slot)
{
    s->imports_begun[slot / 64] |= 1ull << (slot % 64);
}

static bool import_begun(const struct server *s, unsigned slot)
{
    return (s->imports_begun[slot / 64] >> (slot % 64)) & 1;
}

/* Does this process serve slot, by its map? */
static bool served_here(const struct server *s, unsigned slot)
{
    return s->slotmap && s->slot_self >= 0 && s->slotmap->slot[slot] == s->slot_self;
}

/* A test fault (move_commit_lost.sh): with COCYTUS_TEST_MUTE_DIR/
 * commit-lost-<role>-<group>-<index> present, this destination takes a
 * commit without answering it and refuses the source's retries, as if its
 * answer had been lost with it: the source then reports the outcome
 * unknown. */
static bool commit_answer_lost(const struct server *s)
{
    char path[512];
    return server_test_fault_path(s, "commit-lost", path, sizeof(path)) &&
           access(path, F_OK) == 0;
}

/* Destination: take the slot (idempotent: the source may ask again). */
static void import_commit(struct server *s, struct conn *c, uint64_t slot, uint64_t epoch,
                          eng_write_fn write, void *ctx)
{
    if (!conn_is_import(c)) {
        engine_reply(write, ctx, "CLIENT_ERROR not an import connection (cocytus import begin)\r\n");
        return;
    }
    if (!s->slotmap || s->slot_self < 0) {
        engine_reply(write, ctx, "SERVER_ERROR this process serves no slots\r\n");
        return;
    }
    bool lost = commit_answer_lost(s);
    if (epoch <= s->slotmap->epoch) {
        if (lost) {
            engine_reply(write, ctx, "SERVER_ERROR test fault: commit answers lost\r\n");
            return;
        }
        if (served_here(s, (unsigned)slot)) {
            engine_reply(write, ctx, "OK\r\n");
            return;
        }
        engine_reply(write, ctx, "SERVER_ERROR epoch %" PRIu64 " is not newer than %" PRIu64 "\r\n",
              epoch, s->slotmap->epoch);
        return;
    }
    /* The new map is this process's map with one slot changed: that is
     * only the source's map too when this one is the epoch just before.
     * A process that missed a map would otherwise hold, at the new epoch,
     * a map nobody else has, and never be corrected (equal epochs are not
     * pushed again). */
    if (epoch != s->slotmap->epoch + 1) {
        engine_reply(write, ctx,
                     "SERVER_ERROR this process's map is at epoch %" PRIu64 ", the commit is for "
                     "%" PRIu64 ": it missed a map\r\n",
                     s->slotmap->epoch, epoch);
        return;
    }
    /* Only the process that received the copy: a commit retried after a
     * lost answer may reach a successor at the same address (a restarted
     * process, empty), which would serve the slot without its keys.  The
     * source then reports the outcome unknown, and the coordinator
     * decides. */
    if (!import_begun(s, (unsigned)slot)) {
        engine_reply(write, ctx, "SERVER_ERROR this process did not receive slot %" PRIu64
                     "'s copy (import begin %" PRIu64 "): it may have restarted\r\n", slot, slot);
        return;
    }
    if (install_owner(s, (unsigned)slot, s->slot_self, epoch) < 0) {
        engine_reply(write, ctx, "SERVER_ERROR out of memory\r\n");
        return;
    }
    fprintf(stderr, "import: took slot %" PRIu64 " at epoch %" PRIu64 "%s\n", slot, epoch,
            lost ? " (test fault: not answered)" : "");
    if (!lost)
        engine_reply(write, ctx, "OK\r\n");
}

/* Destination, before an import of slot: drop what an earlier, abandoned
 * import of it left here, so a key deleted at the source since then cannot
 * come back.  The table is walked a piece per event-loop turn, as a
 * streamed reply of the "import begin" (conn_stream): the connection reads
 * nothing else meanwhile, and answers OK after the last piece.  The
 * deletes run as silent requests of the import connection itself: engines
 * apply a key's mutations in order, so the import's sets of the same keys
 * land after them, and the commit (an admin command waits for its
 * connection's writes) only after all of them. */
struct purge {
    struct conn_stream st;      /* first: the stream is the purge */
    unsigned slot;
    struct eng_cursor cursor;
    size_t dropped;
};

static bool purge_step(struct conn_stream *st, struct resp *r)
{
    struct purge *pu = (struct purge *)st;
    struct conn *c = r->c;
    struct server *s = conn_server(c);
    /* A slot served here meanwhile holds no stale keys any more: the
     * purge ends (as one that never began, purge_slot). */
    if (!served_here(s, pu->slot)) {
        struct keylist stale = { 0 };
        bool oom;
        enum eng_walk how = collect_piece(conn_engine(c), pu->slot, &pu->cursor, &stale, &oom);
        if (oom) {
            keylist_clear(&stale);
            resp_str(r, "SERVER_ERROR out of memory\r\n");
            return true;
        }
        for (size_t i = 0; i < stale.n; i++) {
            size_t nkey;
            const char *key = keylist_key(&stale, i, &nkey);
            struct eng_mutation m = { .op = ENG_OP_DELETE, .key = key, .nkey = nkey };
            struct resp *d = conn_resp_new(c);
            d->noreply = true;
            conn_mutate(c, d, &m, NULL);
        }
        pu->dropped += stale.n;
        keylist_clear(&stale);
        if (how == ENG_WALK_MORE)
            return false;
        if (how == ENG_WALK_REFUSED) {
            resp_str(r, "SERVER_ERROR this process serves no keys now, or its keys changed "
                        "during the import\r\n");
            return true;
        }
        if (pu->dropped > 0)
            fprintf(stderr, "import: dropped %zu stale keys of slot %u left by an earlier "
                    "import\n", pu->dropped, pu->slot);
    }
    conn_set_import(c);
    note_import_begun(s, pu->slot);
    resp_str(r, "OK\r\n");
    return true;
}

static void purge_done(struct conn_stream *st)
{
    free(st);
}

/* "import begin <slot>": 1 when a purge streams the reply, 0 when none is
 * needed (a slot served here already: the source asks again after a lost
 * commit reply), -1 out of memory. */
static int purge_slot(struct server *s, struct conn *c, unsigned slot)
{
    if (!s->engine->ops->slot_keys || !s->slotmap || s->slot_self < 0 || served_here(s, slot))
        return 0;
    struct purge *pu = calloc(1, sizeof(*pu));
    if (pu == NULL)
        return -1;
    pu->st.step = purge_step;
    pu->st.done = purge_done;
    pu->slot = slot;
    conn_stream(c, &pu->st);
    return 1;
}

static void admin_import(struct server *s, struct conn *c, int argc, char **argv,
                         eng_write_fn write, void *ctx)
{
    uint64_t slot, epoch;
    if (argc == 2 && strcmp(argv[1], "begin") == 0) {
        conn_set_import(c);
        engine_reply(write, ctx, "OK\r\n");
        return;
    }
    if (argc == 3 && strcmp(argv[1], "begin") == 0 && parse_u64(argv[2], &slot) &&
        slot < SLOTMAP_SLOTS) {
        int purging = purge_slot(s, c, (unsigned)slot);
        if (purging < 0) {
            engine_reply(write, ctx, "SERVER_ERROR out of memory\r\n");
            return;
        }
        if (purging > 0)
            return;   /* purge_step answers */
        conn_set_import(c);
        note_import_begun(s, (unsigned)slot);
        engine_reply(write, ctx, "OK\r\n");
        return;
    }
    if (argc == 4 && strcmp(argv[1], "commit") == 0 && parse_u64(argv[2], &slot) &&
        slot < SLOTMAP_SLOTS && parse_u64(argv[3], &epoch)) {
        import_commit(s, c, slot, epoch, write, ctx);
        return;
    }
    engine_reply(write, ctx, "CLIENT_ERROR usage: cocytus import begin [<slot 0-16383>] | "
          "cocytus import commit <slot 0-16383> <epoch>\r\n");
}

bool migrate_admin(struct server *s, struct conn *c, int argc, char **argv,
                   eng_write_fn write, void *ctx)
{
    if (strcmp(argv[0], "migrate") == 0) {
        admin_migrate(s, argc, argv, write, ctx);
        return true;
    }
    if (strcmp(argv[0], "import") == 0) {
        admin_import(s, c, argc, argv, write, ctx);
        return true;
    }
    return false;
}
