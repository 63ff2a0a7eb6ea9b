/* lookup.h - a host name looked up on a thread of its own, the answer
 * delivered on the caller's event loop (lookup.c).
 *
 * getaddrinfo blocks for as long as the resolver takes: seconds per try
 * when a name server does not answer.  A process that serves clients on
 * one loop must not wait there: a link redialling a dead peer whose name
 * no longer resolves would stop it (docs/operations.md, "Replacing a
 * node").  Numeric hosts need no resolver and are parsed in place. */
#ifndef COCYTUS_LOOKUP_H
#define COCYTUS_LOOKUP_H

#include <netdb.h>
#include <stdbool.h>
#include <event2/event.h>

struct lookup;

/* The answer: rc 0 and res (the caller's, to freeaddrinfo), or an EAI_
 * code and NULL. */
typedef void (*lookup_fn)(int rc, struct addrinfo *res, void *ctx);

/* host:port as a numeric address (no resolver), for a stream socket
 * (AI_PASSIVE if passive): 0 and *res, EAI_NONAME if host is a name, or
 * another EAI_ code. */
int lookup_numeric(const char *host, int port, bool passive, struct addrinfo **res);

/* getaddrinfo in place, for a stream socket: 0 and *res or an EAI_ code. */
int lookup_now(const char *host, int port, bool passive, struct addrinfo **res);

/* Starts looking host:port up on a thread; fn(ctx) runs on base's loop
 * with the answer, unless the lookup was cancelled first.  NULL (and
 * errno) if no thread could start: the caller may look it up in place.
 * Every lookup ends exactly once: fn runs, or the caller cancels it, and
 * that before base is freed (the lookup's event is on it). */
struct lookup *lookup_start(struct event_base *base, const char *host, int port, lookup_fn fn,
                            void *ctx);

/* fn will not be called (not after fn ran: the lookup is gone then; NULL
 * is a no-op).  The thread, if still waiting on the resolver, drops its
 * answer when it ends. */
void lookup_cancel(struct lookup *lk);

#endif
