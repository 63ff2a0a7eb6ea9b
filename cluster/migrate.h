/* migrate.h - moving one slot from this process to another serving process.
 *
 * The source (this process) streams every item of the slot to the
 * destination over an ordinary client connection that it first marks as an
 * import connection ("cocytus import begin"), with plain text commands
 * (set / delete).  Writes that reach the source while the slot moves are
 * applied here first and then forwarded with the item's resulting state;
 * the client is answered only once the destination acknowledged the
 * forward, so no acknowledged write is left behind.  When the snapshot has
 * been sent, the source installs the new map (the slot now names the
 * destination, at the new epoch) and sends "cocytus import commit <slot>
 * <epoch>": the destination installs the same map and serves the slot.  The
 * source then deletes its copies through its engine (so parity/backups drop
 * them too).  The coordinator publishes the same map to everyone else.
 *
 * Text admin commands (answered by the server before the engine's own
 * admin words):
 *   cocytus migrate <slot> <host>:<port> <epoch>   start a move (OK / SERVER_ERROR ...)
 *   cocytus migrate status                         one line per move, then END
 *   cocytus import begin [<slot>]                  mark this connection as an import
 *                                                  (with slot: first drop stale copies
 *                                                  of it an abandoned import left)
 *   cocytus import commit <slot> <epoch>           take the slot (OK / SERVER_ERROR ...)
 * docs/routing.md ("Slot migration") describes them. */
#ifndef MC_MIGRATE_H
#define MC_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

struct server;
struct conn;

/* Called once when a move ends: ok true when the destination committed the
 * slot and the source has installed the new map (its local copies may still
 * be being deleted), false with why when the move was abandoned (the source
 * then still serves the slot, at its old epoch, unless why says the commit's
 * outcome is unknown). */
typedef void (*migrate_done_fn)(void *ctx, unsigned slot, uint64_t epoch, bool ok,
                                const char *why);

/* How such a why begins when the commit's outcome is unknown (the
 * destination took it or not; its answer never came): the source keeps the
 * new map and deletes nothing.  The destination holds every key of the slot
 * either way (the copy and every forward were acknowledged before the
 * commit was sent), so the coordinator counts the move done. */
#define MIGRATE_OUTCOME_UNKNOWN "commit outcome unknown"

/* Start moving slot to host:port (a serving endpoint of the current map,
 * not this process); new_epoch must be greater than the map's epoch.  One
 * move at a time per process.  0, or -1 with err (nothing started). */
int migrate_start(struct server *s, unsigned slot, const char *host, int port,
                  uint64_t new_epoch, migrate_done_fn done, void *ctx,
                  char *err, size_t errlen);

/* True while a move of slot is running on this process (source side). */
bool migrate_active(const struct server *s, unsigned slot);

/* The admin words "migrate" and "import" (argv holds the words after
 * "cocytus"), answered for connection c through write().  Returns false
 * when argv[0] is neither word (the engine's admin then gets the line). */
bool migrate_admin(struct server *s, struct conn *c, int argc, char **argv,
                   eng_write_fn write, void *ctx);

#endif
