/* pbr_store.h - what a primary and its backups do alike with the plain
 * engine's item store (memcached/items.h): serve a read, drop everything,
 * convert exptimes between the store's relative clock and the absolute unix
 * times records carry, digest the live items for `cocytus meta`, report
 * stats, and write admin replies. */
#ifndef PBR_STORE_H
#define PBR_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "engine.h"
#include "items.h"

/* Relative store time -> absolute unix time (0 stays "never"). */
int64_t pbr_abs_exptime(const struct mc_clock *clock, rel_time_t rel);

/* A read from the store, as the plain engine serves it (bumps the LRU,
 * takes a reference that pbr_release drops).  cas_enabled false shows 0. */
eng_status pbr_get(struct item_store *s, bool cas_enabled, const char *key, size_t nkey,
                   struct eng_value *out, struct eng_result *res);
void pbr_release(struct item_store *s, void *handle);

/* Unlink every item (flush_all); referenced ones are freed on release. */
void pbr_unlink_all(struct item_store *s);

/* Unlink every dead item (expired or flushed).  Returns how many. */
size_t pbr_reclaim_dead(struct item_store *s);

/* Count and order-independent digest of the live items over (key, flags,
 * absolute exptime, cas, value).  Equal on a primary and its backups when
 * they hold the same live items. */
struct pbr_digest {
    uint64_t count;
    uint64_t digest;
    uint64_t value_bytes;
};
void pbr_digest_store(struct item_store *s, const struct mc_clock *clock,
                      struct pbr_digest *out);

/* General stats of the store (curr_items, bytes, evictions, ...). */
void pbr_store_stats(const struct item_store *s, eng_stat_fn emit, void *ctx);

/* Heap bytes beside the values: hash table and item headers. */
size_t pbr_store_meta_bytes(const struct item_store *s);

/* Admin replies. */
struct pbr_reply {
    eng_write_fn write;
    void *ctx;
};
void pbr_reply_printf(const struct pbr_reply *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* STAT lines for `cocytus meta`, then END. */
void pbr_reply_meta(const struct pbr_reply *r, const struct pbr_digest *d);

#endif
