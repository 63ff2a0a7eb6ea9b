/* restart.h - memcached's -e (a restartable cache) for the plain role.
 *
 * memcached keeps its items in a file it maps (-e FILE); stopped with
 * SIGUSR1 it writes FILE.meta, and started again with the same FILE it
 * finds them there and consumes the meta, so that a crash later starts
 * with a clean cache.  Here items live on the heap, so SIGUSR1 writes them
 * to FILE (most recently used first) and then FILE.meta, the commit point;
 * a start with -e reads FILE only when FILE.meta is there and describes
 * it whole, links every item not expired by then with its cas, client
 * flags, marks and absolute expiry time, in the same LRU order, with a
 * flush_all still pending, and, once the server started, removes
 * FILE.meta (restart_consume). */
#ifndef MC_RESTART_H
#define MC_RESTART_H

#include <stddef.h>
#include <stdint.h>

#include "items.h"

/* Writes every live item of s to path and then path.meta.  0 with *count
 * set; 1 when saved but the directory could not be synced after the
 * meta's rename (err says so: the next start restores the save, but a
 * power cut before the directory reaches the disk may lose it); -1 with
 * err set (nothing usable is left behind then). */
int restart_save(struct item_store *s, const char *path, uint64_t *count,
                 char *err, size_t errlen);

enum restart_load_result {
    RESTART_LOADED,     /* *count items linked (expired ones skipped) */
    RESTART_NONE,       /* no path.meta: a clean cache, as memcached */
    RESTART_REFUSED     /* a meta or file that does not check out: clean, err says why */
};

/* Links the items path holds into s (which must be empty).  On
 * RESTART_REFUSED nothing is linked.  The meta stays until
 * restart_consume: a start that fails after the load keeps the save. */
enum restart_load_result restart_load(struct item_store *s, const char *path, uint64_t *count,
                                      char *err, size_t errlen);
/* Removes path.meta: a later start without a new save begins clean. */
void restart_consume(const char *path);

#endif
