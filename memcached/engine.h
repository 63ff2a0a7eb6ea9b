/* engine.h - the storage engine interface.
 *
 * The protocol front ends (proto_text.c, proto_bin.c) parse a request and hand
 * it to an engine; they never touch items or hash tables themselves.  An engine
 * is a table of operations plus private state.  Plain, data, parity, primary
 * and backup are engines.
 *
 * Reads complete at once.  Mutations may complete at once (plain engine) or
 * later (a replicated engine replies only once its backups or parity
 * processes have acknowledged): mutate() then returns ENG_PENDING and calls
 * the done callback from the event loop when the outcome is known.  The
 * front end keeps replies in request order either way. */
#ifndef MC_ENGINE_H
#define MC_ENGINE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "slabclass.h"

struct event_base;
struct sendq;
struct cluster;

/* Outcome of one engine call. */
typedef enum eng_status {
    ENG_SUCCESS = 0,  /* found / stored / deleted / touched / arith done */
    ENG_NOT_STORED,   /* add on existing key, replace/append/prepend on missing key */
    ENG_EXISTS,       /* cas mismatch */
    ENG_NOT_FOUND,    /* key absent (or expired / flushed) */
    ENG_TOO_LARGE,    /* item larger than the item size limit (-I) */
    ENG_NO_MEMORY,    /* no room and eviction disabled (-M) or impossible */
    ENG_NON_NUMERIC,  /* incr/decr on a value that is not a decimal number */
    ENG_MOVED,        /* this process does not serve the key's slot; msg holds "<slot> <epoch> <host>:<port>" */
    ENG_FAILED,       /* any other failure; msg says what */
    ENG_PENDING       /* only as mutate()'s return value: done() will be called later */
} eng_status;

typedef enum eng_op {
    ENG_OP_SET,
    ENG_OP_ADD,
    ENG_OP_REPLACE,
    ENG_OP_APPEND,
    ENG_OP_PREPEND,
    ENG_OP_CAS,       /* set only if the item's cas equals m->cas */
    ENG_OP_DELETE,
    ENG_OP_INCR,
    ENG_OP_DECR,
    ENG_OP_TOUCH,     /* change exptime only */
    ENG_OP_FLUSH,     /* invalidate everything, now or after m->exptime seconds */
    ENG_OP_MARK       /* meta commands: change an item's marks (m->marks set,
                       * m->marks_clear cleared), with m->new_cas give it a new
                       * cas, with m->touch set its exptime; m->cas as for DELETE */
} eng_op;

/* Marks memcached's meta commands keep with an item.  The process serving
 * the item keeps them; they are not replicated (docs/compat.md). */
enum eng_mark {
    ENG_MARK_STALE = 1,   /* invalidated (md I, ms I with an older cas): mg says X */
    ENG_MARK_WON = 2,     /* a reader was told it won the recache (W): others get Z */
    ENG_MARK_BINKEY = 4,  /* stored through a base64 key (b): shown in base64 */
    ENG_MARK_FETCHED = 8  /* in a store's m->marks only: the new item counts as read
                           * (mg N creates an item it has read) */
};
#define ENG_MARKS_ALL 7

/* A mutation request.  All pointers are borrowed for the duration of the
 * mutate() call only: an engine that completes later must copy what it keeps. */
struct eng_mutation {
    eng_op op;
    const char *key;
    size_t nkey;
    const char *data;     /* SET..CAS: value bytes (no trailing CRLF) */
    size_t nbytes;
    uint32_t flags;       /* client flags, stored opaque */
    int64_t exptime;      /* as the client sent it (see clock_exptime) ; FLUSH: delay */
    uint64_t cas;         /* CAS: expected cas.  Other ops: when nonzero, the op only
                           * applies if the item's cas matches (binary protocol) */
    uint64_t delta;       /* INCR/DECR */
    bool create;          /* INCR/DECR: when the key is missing, create it holding
                           * `initial` (binary protocol); otherwise ENG_NOT_FOUND */
    uint64_t initial;
    /* Meta commands (0/false for every other caller):
     * marks: SET..PREPEND and an INCR/DECR that creates or lengthens the
     * item: the new item's marks (ENG_MARK_*); MARK: marks to set.
     * marks_clear, new_cas, touch: see ENG_OP_MARK.
     * cas_stale: CAS also stores when m->cas is older (smaller) than the
     * item's cas, and the new item is then marked stale (ms C<cas> I). */
    uint8_t marks;
    uint8_t marks_clear;
    bool new_cas;
    bool touch;
    bool cas_stale;
};

/* Result of a call.  For ENG_MOVED/ENG_FAILED, msg points to a string owned by
 * the engine, valid until the next engine call. */
struct eng_result {
    eng_status status;
    uint64_t cas;         /* cas of the item after a successful store/arith/touch */
    uint64_t value;       /* INCR/DECR: the new value */
    const char *msg;
    bool created;         /* INCR/DECR with create: the key was missing, now `initial`
                           * (memcached counts neither hit nor miss then) */
};

/* A read result: views into engine memory, valid until release(handle).
 * data[nbytes] and data[nbytes+1] are '\r' '\n' (engines store the
 * terminator so the text protocol can send value and CRLF in one piece),
 * unless the engine sets bare.  Callers zero *out before get(), so an
 * engine that does not know the two flags below leaves them false. */
struct eng_value {
    const char *key;
    size_t nkey;
    const char *data;
    uint32_t nbytes;
    uint32_t flags;
    uint64_t cas;
    void *handle;
    /* Absolute unix time the item expires at, 0 = never.  Filled by the
     * engines that support slot migration (those with slot_keys), which
     * must send it on; callers that need it zero *out before get(). */
    int64_t exptime;
    /* Filled by get_ex() only, as they were before the call: the item's
     * ENG_MARK_* marks, whether it had been read since it was stored, and
     * the seconds since it was last accessed (an engine without access
     * times reports the seconds since it was written). */
    uint8_t marks;
    bool fetched;
    uint32_t idle;
    /* data is the value alone, without the "\r\n" after it (a data
     * process's region holds value bytes only). */
    bool bare;
    /* The bytes are only guaranteed until control returns to the event
     * loop: a data process answers from its region, where a range may be
     * reused once a later record commits (memcached pins its item instead).
     * handle is NULL and need not be released; a caller that keeps the
     * bytes longer (a reply the socket did not take at once) copies them. */
    bool transient;
};

/* Options of get_ex(). */
#define ENG_GET_PEEK 1    /* leave LRU position, fetched bit and access time alone */

/* Stats are emitted one name/value pair at a time. */
typedef void (*eng_stat_fn)(void *ctx, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes reply bytes of an admin command. */
typedef void (*eng_write_fn)(void *ctx, const void *p, size_t n);

/* Called by an engine when a pending mutation completes. */
typedef void (*eng_done_fn)(void *cookie, const struct eng_result *res);

struct engine;

enum eng_walk {
    ENG_WALK_MORE,      /* call again with the cursor */
    ENG_WALK_DONE,      /* every bucket walked */
    ENG_WALK_REFUSED,   /* no keys served now */
};

/* Where a walk is; all zero at its start. */
struct eng_cursor {
    uint64_t pos;       /* the hash table's (assoc_walk) */
    uint64_t owner;     /* a parity process's note of which serving it walks */
    uint64_t table;     /* a data engine's note of which table it walks */
};

/* A replication peer without its link (engine_ops.lost_peers). */
struct eng_lost_peer {
    int role;                   /* its enum cluster_role */
    int index;                  /* within its role in this process's group */
    uint64_t down_ms;           /* how long its link has been down */
    bool link_up;               /* only silent: its link is up (a paused process's
                                 * kernel keeps it; a dead one's closes it) */
};

struct engine_ops {
    const char *name;

    /* Look up key.  ENG_SUCCESS fills *out (caller must release(out->handle));
     * ENG_NOT_FOUND or ENG_MOVED otherwise (res->msg for MOVED). */
    eng_status (*get)(struct engine *e, const char *key, size_t nkey,
                      struct eng_value *out, struct eng_result *res);
    void (*release)(struct engine *e, void *handle);

    /* Apply a mutation.  Returns the final status with *res filled, or
     * ENG_PENDING, in which case done(cookie, res) is called later from the
     * event loop (never from inside mutate). */
    eng_status (*mutate)(struct engine *e, const struct eng_mutation *m,
                         struct eng_result *res, eng_done_fn done, void *cookie);

    /* Emit stats of group "" (general: curr_items, bytes, ...), "items",
     * "slabs", "sizes", "settings".  Returns false for an unknown group. */
    bool (*stats)(struct engine *e, const char *group, eng_stat_fn emit, void *ctx);
    void (*stats_reset)(struct engine *e);

    /* Called about once a second by the server with the wall clock: the
     * engine advances its clock and does a bounded slice of background work
     * (expiry sweep). */
    void (*tick)(struct engine *e, time_t now);

    void (*destroy)(struct engine *e);

    /* Optional (may be NULL): an admin command, "cocytus <word>..." on the
     * text protocol; argv holds the words after "cocytus".  Writes the whole
     * reply (CRLF-terminated lines) through write().  Returns false for an
     * unknown command (the caller then replies ERROR). */
    bool (*admin)(struct engine *e, int argc, char **argv, eng_write_fn write, void *ctx);

    /* Optional (may be NULL; serving engines have it): call fn for every
     * live key whose slotmap_slot() is slot among about `budget` hash
     * buckets and items from *cursor on (0 starts; as walk: a key present
     * all along is visited exactly once however the table grows; a key
     * with a mutation still in flight may or may not be).  fn must not
     * call the engine; the engine may be used between calls.  ENG_WALK_MORE
     * until every bucket was walked; ENG_WALK_REFUSED when the keys walked
     * so far are no longer this engine's (another table, another serving).
     * Slot migration (migrate.c) collects a slot's keys with it, a piece
     * per event-loop turn: a whole table at once stalled the process for
     * about 150 ms per million items. */
    enum eng_walk (*slot_keys)(struct engine *e, unsigned slot, struct eng_cursor *cursor,
                               size_t budget,
                               void (*fn)(void *ctx, const char *key, size_t nkey), void *ctx);
    /* Optional: called before a read of key is served.  Returns false when
     * the read can be served now; true when it must wait (a recovery
     * process rebuilding the value's units): done(cookie, NULL-free result)
     * is then called later from the event loop and the read is retried. */
    bool (*read_wait)(struct engine *e, const char *key, size_t nkey, eng_done_fn done,
                      void *cookie);
    /* Optional: a recovery message from the coordinator (one line of text,
     * not NUL-terminated; docs/recovery.md).  Answers go back through the
     * config's ctl_send. */
    void (*control)(struct engine *e, const char *text, size_t len);
    /* Optional: words appended to the heartbeat (recovery progress);
     * returns their length (0: none). */
    size_t (*heartbeat_extra)(struct engine *e, char *buf, size_t len);
    /* Optional (engines that replicate): fill out[] (at most max) with the
     * peers whose replication link is down (not closed by us) or up but
     * silent, and how long nothing has come from each; returns how many.  Sent to the coordinator with
     * each heartbeat ("lost", coord.h): its evidence that a process it
     * has not heard from is dead. */
    int (*lost_peers)(struct engine *e, struct eng_lost_peer *out, int max);
    /* Optional (the engines serving keys have it): get() for the meta
     * commands, also filling out->marks, fetched and idle; opts is
     * ENG_GET_* bits.  Without it the meta commands use get() and see
     * no marks, never fetched, idle 0. */
    eng_status (*get_ex)(struct engine *e, const char *key, size_t nkey, unsigned opts,
                         struct eng_value *out, struct eng_result *res);
    /* Optional: cache_memlimit: a new memory limit in bytes (items over it
     * are evicted as new ones come).  False when it cannot be changed. */
    bool (*set_mem_limit)(struct engine *e, size_t bytes);
    /* Optional: stats cachedump, lru_crawler metadump: fn for the most
     * recently used live items (newest first) until it returns false.
     * False when the engine serves no keys now (a backup, a parity process
     * serving nobody): the command is refused. */
    bool (*visit_recent)(struct engine *e, bool (*fn)(void *ctx, const struct eng_value *v),
                         void *ctx);
    /* Optional: lru_crawler metadump, a piece per event-loop pass, so a
     * large cache is listed without holding the loop or building the
     * whole listing: fn for the live items of about `budget` hash buckets
     * and items from *cursor on (0 starts; assoc_walk: an item present all
     * along is listed once however the table grows meanwhile).
     * ENG_WALK_REFUSED when the engine serves no keys now (as
     * visit_recent's false), also in the middle of a walk. */
    enum eng_walk (*walk)(struct engine *e, struct eng_cursor *cursor, size_t budget,
                          void (*fn)(void *ctx, const struct eng_value *v), void *ctx);
    /* Optional: the server installed a newer slot map (the routing of new
     * requests follows it from now on). */
    void (*map_changed)(struct engine *e);
};

struct engine {
    const struct engine_ops *ops;
    void *priv;
};

/* Settings an engine is created with (from the command line). */
struct engine_config {
    size_t mem_limit;        /* -m, bytes */
    size_t item_size_max;    /* -I, bytes */
    bool evict;              /* false with -M: out of memory errors instead */
    bool cas_enabled;        /* false with -C */
    unsigned hashpower;      /* initial hash table size 2^hashpower */
    time_t started;          /* process start, wall clock */
    int verbose;
    struct event_base *base; /* for engines that need timers or links */
    struct sendq *sq;        /* the loop's batched writes, for their links (sendq.h) */
    int max_conns;           /* -c: the reads that can wait at once (read_waiters_reserve) */
    /* Replicated roles: the cluster (repl/cluster.h) and this process's place. */
    const struct cluster *cluster;
    int group;
    int index;
    /* Sends one control message to the coordinator (0, or -1 when its link
     * is down); NULL without a coordinator. */
    int (*ctl_send)(void *arg, const char *text);
    void *ctl_arg;
    /* Tells the server (with ctl_arg) that this process now serves its
     * group's keys though the slot map it holds names another member: a PBR
     * backup promoted, by the coordinator (its new map follows) or by hand
     * (yes); or that it no longer does (no: it rejoined as a backup). */
    void (*promoted)(void *arg, bool yes);
    /* Optional: told of every item evicted to make room ("watch
     * evictions", watch.h), as a listing shows it (key, nbytes, flags,
     * exptime, fetched, idle; valid during the call only). */
    void (*evicted)(void *arg, const struct eng_value *v);
    void *evicted_arg;
};

/* The plain engine: an ordinary memcached cache. */
struct engine *engine_plain_new(const struct engine_config *cfg);
/* The plain engine's item store (-e saves and restores it: restart.h). */
struct item_store *engine_plain_store(struct engine *e);
/* Coding group roles (cocytus/). */
struct engine *engine_data_new(const struct engine_config *cfg);
struct engine *engine_parity_new(const struct engine_config *cfg);
/* Primary-backup roles (pbr/). */
struct engine *engine_primary_new(const struct engine_config *cfg);
struct engine *engine_backup_new(const struct engine_config *cfg);

/* Helpers shared by engines. */

/* memcached 1.6's item size limit: its header (48 bytes, 8 more for the
 * cas unless -C), the key and a NUL, the value and CRLF, 4 bytes for
 * nonzero client flags.  Every engine refuses larger items with
 * ENG_TOO_LARGE, so that the same requests are refused as by memcached. */
static inline bool engine_too_large(size_t item_size_max, bool cas_enabled, size_t nkey,
                                    size_t nbytes, uint32_t flags)
{
    return mc_item_size(nkey, nbytes, flags, cas_enabled) > item_size_max;
}

/* memcached's largest item its slab allocator stores in one chunk (512 KB,
 * whatever -I says): a larger one is kept in chunks, which incr/decr
 * refuse as non-numeric and a SASL exchange cannot be given. */
static inline bool engine_needs_chunks(bool cas_enabled, size_t nkey, size_t nbytes,
                                       uint32_t flags)
{
    return engine_too_large(512u << 10, cas_enabled, nkey, nbytes, flags);
}

/* Resident set size of this process in bytes (0 if unknown), for the
 * memory figures engines report. */
uint64_t engine_process_rss(void);

/* Formats one reply line of an admin command (at most 511 bytes; longer
 * text is cut) and writes it through write(ctx, ...). */
void engine_reply(eng_write_fn write, void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void engine_vreply(eng_write_fn write, void *ctx, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static inline eng_status engine_get(struct engine *e, const char *key, size_t nkey,
                                    struct eng_value *out, struct eng_result *res)
{
    return e->ops->get(e, key, nkey, out, res);
}

#endif
