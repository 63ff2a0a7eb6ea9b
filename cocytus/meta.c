/* meta.c - the metadata table of a coding group (see meta.h).
 *
 * An entry is one malloc block: a struct item header, the key and the
 * 8-byte region offset.  Its size depends only on the key length, so an
 * overwrite updates the entry in place and pointers to it stay valid.
 * Entries live in a core hash table (memcached/assoc.c) and on an LRU list;
 * the LRU is also how whole-table walks are done, which keeps them usable
 * on a const table.  meta_replay_op is the single definition of what a
 * record op does to a replica: every parity process runs the same code. */
#include "meta.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "alloc.h"
#include "pieceset.h"
#include "hash.h"

/* ---- entries ---- */

static size_t entry_size(size_t nkey)
{
    return sizeof(struct item) + nkey + sizeof(uint64_t);
}

static void entry_set_off(struct item *e, uint64_t off)
{
    memcpy(e->data + e->nkey, &off, sizeof(off));
}

/* exptime is an absolute unix time kept in the header's 32-bit field:
 * a negative time is already past (1), a time beyond 2106 is the last one. */
static rel_time_t clamp_exptime(int64_t exptime)
{
    if (exptime < 0)
        return 1;
    if (exptime > (int64_t)UINT32_MAX)
        return UINT32_MAX;
    return (rel_time_t)exptime;
}

static void entry_fill(struct item *e, uint64_t off, uint32_t nbytes, uint32_t flags,
                       int64_t exptime, uint64_t cas)
{
    entry_set_off(e, off);
    e->nbytes = nbytes;
    e->flags = flags;
    e->exptime = clamp_exptime(exptime);
    e->cas = cas;
}

static uint64_t entry_hash(const struct item *e)
{
    return hash_key(item_key(e), e->nkey);
}

/* ---- LRU ---- */

static void lru_unlink(struct meta_table *t, struct item *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        t->lru_head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        t->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_head(struct meta_table *t, struct item *e)
{
    e->prev = NULL;
    e->next = t->lru_head;
    if (t->lru_head != NULL)
        t->lru_head->prev = e;
    else
        t->lru_tail = e;
    t->lru_head = e;
}

void meta_bump(struct meta_table *t, struct item *e)
{
    if (t->lru_head == e)
        return;
    lru_unlink(t, e);
    lru_push_head(t, e);
}

/* ---- table ---- */

int meta_init(struct meta_table *t, unsigned hashpower)
{
    memset(t, 0, sizeof(*t));
    return assoc_init(&t->table, hashpower);
}

/* Unlinks e from table and LRU, fixes the counters, frees it. */
static void entry_remove(struct meta_table *t, struct item *e)
{
    assoc_delete(&t->table, e, entry_hash(e));
    lru_unlink(t, e);
    t->count--;
    t->heap_bytes -= malloc_usable_size(e);
    t->value_bytes -= e->nbytes;
    free(e);
}

/* ---- dropping a whole table ----
 *
 * A parity process that starts over drops tables of millions of entries
 * (become_empty), and so does a recovery process's data engine when it
 * goes.  One free() per entry costs about 0.1 s per million on the event
 * loop: long enough for its peers to wait on it and for the coordinator
 * to miss its heartbeats (1.5 s for three tables on a busy machine).  So a
 * dropped table is unhooked at once (its buckets zeroed, its LRU list cut
 * off) and a large list is freed on a thread of its own; nothing else can
 * reach those entries any more. */

#define FREE_ON_THREAD_MIN 4096   /* entries: fewer are freed at once */

/* Frees up to max entries of the list from e; returns the rest. */
static struct item *free_entries(struct item *e, size_t max)
{
    for (size_t n = 0; n < max && e != NULL; n++) {
        struct item *next = e->next;
        free(e);
        e = next;
    }
    return e;
}

/* The entries were allocated by the event loop's thread, and every free()
 * takes their arena's lock, which that thread's own mallocs need too: a
 * thread freeing millions in a row starves it (a parity process that
 * started over waited 0.1-0.2 s on single mallocs).  So the frees go in
 * small batches with a pause between them. */
#define FREE_BATCH 512
#define FREE_PAUSE_USEC 100

static void *free_entries_thread(void *arg)
{
    struct item *e = arg;
    while ((e = free_entries(e, FREE_BATCH)) != NULL)
        usleep(FREE_PAUSE_USEC);
    return NULL;
}

static void free_entries_later(struct item *head, size_t count)
{
    pthread_t thread;
    pthread_attr_t attr;
    if (count >= FREE_ON_THREAD_MIN && pthread_attr_init(&attr) == 0) {
        bool started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                       pthread_create(&thread, &attr, free_entries_thread, head) == 0;
        pthread_attr_destroy(&attr);
        if (started)
            return;
    }
    free_entries(head, SIZE_MAX);
}

void meta_clear(struct meta_table *t)
{
    struct item *head = t->lru_head;
    size_t count = t->count;
    assoc_clear(&t->table);
    t->lru_head = t->lru_tail = NULL;
    t->count = 0;
    t->heap_bytes = 0;
    t->value_bytes = 0;
    free_entries_later(head, count);
}

void meta_destroy(struct meta_table *t)
{
    struct item *head = t->lru_head;
    size_t count = t->count;
    assoc_destroy(&t->table);
    memset(t, 0, sizeof(*t));
    free_entries_later(head, count);
}

struct item *meta_find(struct meta_table *t, const char *key, size_t nkey)
{
    return assoc_find(&t->table, key, nkey, hash_key(key, nkey));
}

static struct item *entry_new(struct meta_table *t, const char *key, size_t nkey,
                              uint64_t hv)
{
    struct item *e = calloc(1, entry_size(nkey));
    if (e == NULL)
        return NULL;
    e->nkey = (uint8_t)nkey;
    e->iflags = ITEM_LINKED;
    memcpy(e->data, key, nkey);
    assoc_insert(&t->table, e, hv);
    lru_push_head(t, e);
    t->count++;
    t->heap_bytes += malloc_usable_size(e);
    return e;
}

struct item *meta_put(struct meta_table *t, const char *key, size_t nkey, uint64_t off,
                      uint32_t nbytes, uint32_t flags, int64_t exptime, uint64_t cas)
{
    if (nkey == 0 || nkey > ITEM_KEY_MAX)
        return NULL;
    uint64_t hv = hash_key(key, nkey);
    struct item *e = assoc_find(&t->table, key, nkey, hv);
    if (e != NULL) {
        t->value_bytes -= e->nbytes;
        meta_bump(t, e);
    } else {
        e = entry_new(t, key, nkey, hv);
        if (e == NULL)
            return NULL;
    }
    entry_fill(e, off, nbytes, flags, exptime, cas);
    t->value_bytes += nbytes;
    return e;
}

bool meta_del(struct meta_table *t, const char *key, size_t nkey)
{
    struct item *e = meta_find(t, key, nkey);
    if (e == NULL)
        return false;
    entry_remove(t, e);
    return true;
}

void meta_iterate(struct meta_table *t, assoc_visit_fn visit, void *ctx)
{
    assoc_iterate(&t->table, visit, ctx);
}

/* ---- digest ---- */

static size_t put_le(uint8_t *p, uint64_t v, size_t width)
{
    for (size_t i = 0; i < width; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return width;
}

/* Hash of one entry's fields in a fixed encoding:
 * u8 nkey | key | u64 off | u32 nbytes | u32 flags | i64 exptime | u64 cas. */
static uint64_t entry_digest(const struct item *e)
{
    uint8_t buf[1 + ITEM_KEY_MAX + 8 + 4 + 4 + 8 + 8];
    size_t n = 0;
    buf[n++] = e->nkey;
    memcpy(buf + n, item_key(e), e->nkey);
    n += e->nkey;
    n += put_le(buf + n, meta_off(e), 8);
    n += put_le(buf + n, e->nbytes, 4);
    n += put_le(buf + n, e->flags, 4);
    n += put_le(buf + n, (uint64_t)(int64_t)e->exptime, 8);
    n += put_le(buf + n, e->cas, 8);
    return hash_key(buf, n);
}

/* A sum is independent of the visiting order; the table's order is not
 * part of its state. */
uint64_t meta_digest(const struct meta_table *t)
{
    uint64_t sum = 0;
    for (const struct item *e = t->lru_head; e != NULL; e = e->next)
        sum += entry_digest(e);
    return sum;
}

/* ---- replay ---- */

/* The key as printable text for a message (non-printable bytes as '?'). */
static void key_text(char *out, size_t outlen, const char *key, size_t nkey)
{
    size_t n = nkey < outlen - 1 ? nkey : outlen - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        out[i] = (c > 32 && c < 127) ? (char)c : '?';
    }
    out[n] = '\0';
}

/* The replica does not run the allocator: the sender chose the offset, and
 * the set of used pieces is all of an allocator's state (pieceset.h). */
static int replay_alloc(struct pieceset *ps, const struct rec_op *op, bool lenient, char *err,
                        size_t errlen)
{
    int rc = lenient ? pieceset_put(ps, op->off, op->size) : pieceset_add(ps, op->off, op->size);
    if (rc == -EEXIST) {
        snprintf(err, errlen, "ALLOC size %" PRIu64 " at %" PRIu64
                 ": a piece already starts there on the replica", op->size, op->off);
        return -1;
    }
    if (rc != 0) {
        snprintf(err, errlen, "ALLOC size %" PRIu64 " at %" PRIu64 ": replica failed (%s)",
                 op->size, op->off,
                 rc == -EINVAL   ? "outside the region or misaligned"
                 : rc == -ENOSPC ? "its pieces would hold more than the region"
                                 : strerror(-rc));
        return -1;
    }
    return 0;
}

static int replay_free(struct pieceset *ps, const struct rec_op *op, bool lenient, char *err,
                       size_t errlen)
{
    if (pieceset_remove(ps, op->off, NULL) != 0 && !lenient) {
        snprintf(err, errlen, "FREE off %" PRIu64 ": not an allocated piece on the replica",
                 op->off);
        return -1;
    }
    return 0;
}

static int replay_put(struct meta_table *t, const struct pieceset *ps, const struct rec_op *op,
                      bool lenient, char *err, size_t errlen)
{
    char key[ITEM_KEY_MAX + 1];
    key_text(key, sizeof(key), op->key, op->nkey);
    if (op->nkey == 0) {
        snprintf(err, errlen, "PUT with an empty key");
        return -1;
    }
    uint64_t region = pieceset_region_size(ps);
    if (op->off > region || op->nbytes > region - op->off) {
        snprintf(err, errlen, "PUT key %s: off %" PRIu64 " + %" PRIu32
                 " bytes is outside the region (%" PRIu64 ")", key, op->off, op->nbytes, region);
        return -1;
    }
    /* A value lies in a piece of dalloc_value_piece(nbytes) (an overwrite
     * in place, a touch and a mark keep the piece): with the set, this is
     * one lookup, and it is
     * the part of the allocator's old cross-check that a lone PUT allows. */
    uint64_t want = dalloc_value_piece(op->nbytes);
    if (!lenient && pieceset_size_of(ps, op->off) != want) {
        snprintf(err, errlen, "PUT key %s: no piece of %" PRIu64 " bytes starts at %" PRIu64
                 " on the replica", key, want, op->off);
        return -1;
    }
    if (meta_put(t, op->key, op->nkey, op->off, op->nbytes, op->flags, op->exptime,
                 op->cas) == NULL) {
        snprintf(err, errlen, "PUT key %s: out of memory", key);
        return -1;
    }
    return 0;
}

static int replay_del(struct meta_table *t, const struct rec_op *op, bool lenient, char *err,
                      size_t errlen)
{
    if (!meta_del(t, op->key, op->nkey) && !lenient) {
        char key[ITEM_KEY_MAX + 1];
        key_text(key, sizeof(key), op->key, op->nkey);
        snprintf(err, errlen, "DEL key %s: no such entry on the replica", key);
        return -1;
    }
    return 0;
}

int meta_replay_op(struct meta_table *t, struct pieceset *ps, const struct rec_op *op,
                   bool lenient, char *err, size_t errlen)
{
    switch (op->type) {
    case ROP_ALLOC:
        return replay_alloc(ps, op, lenient, err, errlen);
    case ROP_FREE:
        return replay_free(ps, op, lenient, err, errlen);
    case ROP_PUT:
        return replay_put(t, ps, op, lenient, err, errlen);
    case ROP_DEL:
        return replay_del(t, op, lenient, err, errlen);
    case ROP_FLUSH:
        meta_clear(t);
        pieceset_reset(ps);
        return 0;
    default:
        snprintf(err, errlen, "unknown op type %u", (unsigned)op->type);
        return -1;
    }
}

