/*
 * An allocator built from a set of used pieces in a thread of its own.
 *
 * When a parity process takes a dead data process over, its data engine
 * needs that process's allocator, and building it from the parity process's
 * set of pieces (pieceset_build()) takes about 100 ns per piece: 0.1 s for
 * a million keys, on the failover path.  Only writes that allocate need it;
 * reads, overwrites in place and deletes do not.  So the recovery process
 * starts serving at once and builds the allocator here, on a thread that
 * only reads the set, while the event loop goes on; writes that need space
 * wait for it (engine_data.c).
 *
 * The event loop hears of the end through a pipe: done(ctx) runs on it,
 * after which alloc_build_finish() joins the thread and hands over the
 * result.  The set must not change while a build runs (nobody else holds
 * it: the data engine took it from the parity process).
 */
#ifndef COCYTUS_ALLOCBUILD_H
#define COCYTUS_ALLOCBUILD_H

#include <event2/event.h>

#include "alloc.h"
#include "pieceset.h"

struct alloc_build;

/* Starts building an allocator from set (read, not taken) on a new thread;
 * done(ctx) runs on base's loop once it is built or has failed.  NULL, with
 * errno, when no thread, pipe or event can be had: the caller may build on
 * the spot or try again later. */
struct alloc_build *alloc_build_start(struct event_base *base, const struct pieceset *set,
                                      void (*done)(void *ctx), void *ctx);

/* After done(): joins the thread, frees b and returns the allocator, or NULL
 * with *err set to ENOSPC (two pieces overlap) or ENOMEM; *us is how long the
 * build took on its thread. */
struct dalloc *alloc_build_finish(struct alloc_build *b, int *err, uint64_t *us);

/* The same build on the caller's thread, timed as the threaded one is:
 * for when no thread can be had. */
struct dalloc *alloc_build_now(const struct pieceset *set, int *err, uint64_t *us);

/* Waits for a build still running (if any), discards its result, frees b.
 * NULL is accepted. */
void alloc_build_cancel(struct alloc_build *b);

#endif
