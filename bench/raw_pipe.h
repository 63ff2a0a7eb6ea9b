/* raw_pipe.h - pipelined memcached text client routed by libcocytus's
 * cached slot map: cocytus-bench --depth D.
 *
 * libcocytus is synchronous: one request in flight per client.  To keep D
 * requests in flight on one thread, this client sends a batch of requests
 * back to back over raw text-protocol sockets and only then reads their
 * replies.  The route is libcocytus's: the caller's cocytus_t holds the
 * cached slot map (it fetched it when it connected), and each request goes
 * to the owner of its key's slot in that map, over one kept socket per
 * endpoint (raw_client.h's connection layer).
 *
 * A batch: raw_pipe_begin(), up to max_depth raw_pipe_add_get/set() (each
 * request is formatted into its server's send buffer at once), then
 * raw_pipe_finish(), which writes every server's requests back to back,
 * then reads each socket's replies in order and calls done() for each
 * request as its reply is read.  A server answers one connection's requests
 * in order, and the requests of one key all go to one server within a
 * batch, so done() sees the requests of one key in the order they were
 * added.
 *
 * A "SERVER_ERROR MOVED <slot> <epoch> <host>:<port>" reply is a redirect:
 * the map is fetched again (cocytus_refresh(), when it is older than the
 * MOVED or still names the server that refused), and that one request is
 * sent again, synchronously, to the named owner over a second set of kept
 * sockets (the batch's sockets still have replies pending), at most
 * RAW_PIPE_MAX_TRIES times.  A socket failure (I/O error, timeout, a reply
 * that breaks the protocol, an error reply after which the stream may be
 * out of step) fails every request still unanswered on that socket and
 * closes it; the next batch connects again.  Nothing is retried otherwise.
 *
 * One raw_pipe belongs to one thread, as does its cocytus_t. */
#ifndef COCYTUS_BENCH_RAW_PIPE_H
#define COCYTUS_BENCH_RAW_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "libcocytus.h"
#include "raw_client.h"

#define RAW_PIPE_MAX_DEPTH 256  /* requests in one batch */
#define RAW_PIPE_MAX_TRIES 4    /* sends of one request after a MOVED */

struct raw_pipe;

struct raw_pipe_stats {
    uint64_t requests;          /* requests added */
    uint64_t redirects;         /* MOVED replies received */
    uint64_t retries;           /* requests sent again after a MOVED */
    uint64_t connects;          /* sockets opened */
    uint64_t conn_failures;     /* sockets closed on a failure */
};

/* Called once per request of a batch, when its outcome is known: i is the
 * request's index in the batch (0 = the first added).  rc is RAW_OK (a
 * set stored, or a get hit with val[0..nval), valid only during the call),
 * RAW_MISS, or a failure with the reason in why. */
typedef void (*raw_pipe_done_fn)(void *ctx, size_t i, enum raw_rc rc, const char *val,
                                 size_t nval, const char *why);

/* A pipe routed by map's cached slot map (borrowed: it must outlive the
 * pipe; the pipe calls cocytus_refresh() on it after a MOVED), with batches
 * of up to max_depth requests (1..RAW_PIPE_MAX_DEPTH) and timeout_ms per
 * connect and per wait; auth ("user password", borrowed too, or NULL) is
 * given to servers that ask (raw_client_set_auth).  NULL if out of memory. */
struct raw_pipe *raw_pipe_new(cocytus_t *map, int timeout_ms, size_t max_depth, const char *auth,
                              size_t nauth);

/* Closes every socket and frees p.  NULL is allowed. */
void raw_pipe_free(struct raw_pipe *p);

/* Starts an empty batch. */
void raw_pipe_begin(struct raw_pipe *p);

/* Adds "get key" / "set key 0 0 nval" (the value is copied) to the batch.
 * Returns the request's index, or -1 when the batch is full.  A request
 * that cannot be routed or formatted still gets an index: it fails in
 * raw_pipe_finish() with the reason. */
int raw_pipe_add_get(struct raw_pipe *p, const char *key, size_t nkey);
int raw_pipe_add_set(struct raw_pipe *p, const char *key, size_t nkey, const char *val,
                     size_t nval);

/* Sends the batch, reads every reply, calls done() once per request. */
void raw_pipe_finish(struct raw_pipe *p, raw_pipe_done_fn done, void *ctx);

/* CLOCK_MONOTONIC ns when the last batch began to be sent. */
uint64_t raw_pipe_sent_ns(const struct raw_pipe *p);

void raw_pipe_get_stats(const struct raw_pipe *p, struct raw_pipe_stats *out);

#endif
