/* px_resolve.c - cocytus-proxy: the addresses of the servers' names.
 *
 * A worker remembers what each endpoint's host resolved to (up to
 * PX_ADDRS_MAX addresses, tried in the resolver's order), so reconnecting
 * to a dead server does not ask the resolver each time.  A name may move,
 * though: a node replaced on a spare host keeps its name and gets a new
 * address (docs/operations.md, "Replacing a node").  So a connection that
 * fails marks its entry stale, and the next connect has the name looked
 * up again, at most once per PX_RESOLVE_AGAIN_MS, doubling up to
 * PX_RESOLVE_AGAIN_MAX_MS while lookups fail fast (below).
 *
 * That lookup runs on a thread (repl/lookup.h): getaddrinfo waits seconds
 * per try on a name server that does not answer, and the worker's other
 * clients and servers must not.  Meanwhile connects go to the addresses
 * the entry had, which is right until the name has moved, and all there
 * is if the lookup fails.  A slow lookup does not hold the next one back:
 * while the name stays stale, another starts every interval, up to
 * PX_LOOKUPS_MAX at once, so a name that comes back (a spare host that
 * took it) is seen within about an interval, not when the lookups that
 * started before it end (6 s each on CI with a silent name server).
 *
 * An address found is taken unless a lookup that started later has given
 * one already.  A failure keeps the addresses.  One that came fast (a
 * name server that answers "no such name" or "failure") doubles the
 * interval, up to PX_RESOLVE_AGAIN_MAX_MS: such a server is asked every
 * 4 s per name at most.  One that took the interval or longer (a name
 * server that does not answer) does not: the lookups waiting on it are
 * bounded by PX_LOOKUPS_MAX and by their own timeouts, and a name that
 * comes back (the spare host) must be seen within about a second, not
 * seconds after the clients' requests for it have given up.  The interval
 * counts from the newest start, not from a failure's arrival: the
 * failures of lookups that began during an outage arrive after the name
 * may be back.
 *
 * The first lookup of a name has no addresses to go on with.  For a
 * server a client's request goes to (px_backend.c) it runs on a thread
 * too, and the requests wait for it: a name first seen in a newer map (a
 * node added) while the name server does not answer held the worker, and
 * every client on it, for the resolver's whole timeout (seconds per try).
 * A map fetch passes over a source whose name is being looked up (a
 * server a MOVED named, asked first) and asks the others; if none
 * answered it fetches again shortly.  The meta commands' connections
 * still look a new name up in place (in_place), and one to a server
 * whose first lookup is under way fails like any connect and is retried
 * with its back-off.  If a first lookup fails, the name is kept without
 * addresses (connects fail at once) and looked up again on a thread like
 * a stale one. */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lookup.h"
#include "px.h"

#define PX_RESOLVE_AGAIN_MS 1000
#define PX_RESOLVE_AGAIN_MAX_MS 4000
#define PX_LOOKUPS_MAX 8

struct px_resolved;

/* One lookup again in progress. */
struct px_lookup_slot {
    struct px_resolved *r;
    struct lookup *lookup;      /* NULL: the slot is free */
    int64_t started_ms;
};

struct px_resolved {
    struct px_worker *w;
    struct lc_addr addr;
    struct px_addrs now;        /* the addresses connects use */
    bool stale;                 /* a connection to it failed since the lookup */
    int64_t stale_since_ms;     /* when it last failed (px_resolved_stale) */
    bool moved;                 /* its addresses changed: the hook is due */
    struct px_lookup_slot slots[PX_LOOKUPS_MAX];
    int64_t last_start_ms;      /* the newest lookup's start */
    int64_t answer_start_ms;    /* the start of the lookup whose addresses are taken */
    bool lookup_failing;        /* the last lookup again failed (logged once) */
    bool answered;              /* some lookup of it has answered (or failed) */
    int64_t again_ms;           /* the least time from one lookup's start to the next */
    struct px_resolved *next;
};

/* The stream addresses of res, up to PX_ADDRS_MAX, into out (whole: compared
 * by addrs_differ).  0, or EAI_FAIL if none fits. */
static int addrs_from(const struct addrinfo *res, struct px_addrs *out)
{
    memset(out, 0, sizeof(*out));
    for (const struct addrinfo *ai = res; ai != NULL && out->n < PX_ADDRS_MAX; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(out->sa[0]))
            continue;
        memcpy(&out->sa[out->n], ai->ai_addr, ai->ai_addrlen);
        out->salen[out->n++] = ai->ai_addrlen;
    }
    return out->n > 0 ? 0 : EAI_FAIL;
}

/* getaddrinfo for a, in place (it blocks): 0 or an EAI_ code. */
static int px_lookup_now(const struct lc_addr *a, struct px_addrs *out)
{
    struct addrinfo *res = NULL;
    /* A numeric host first: it never asks a resolver. */
    int rc = lookup_numeric(a->host, a->port, false, &res);
    if (rc == EAI_NONAME)
        rc = lookup_now(a->host, a->port, false, &res);
    if (rc != 0)
        return rc;
    rc = addrs_from(res, out);
    freeaddrinfo(res);
    return rc;
}

static bool addrs_differ(const struct px_addrs *x, const struct px_addrs *y)
{
    return x->n != y->n || memcmp(x->sa, y->sa, sizeof(x->sa[0]) * (size_t)x->n) != 0;
}

/* Where sa is among x's addresses, or -1. */
static int addr_index(const struct px_addrs *x, const struct sockaddr_storage *sa, socklen_t len)
{
    for (int i = 0; i < x->n; i++)
        if (x->salen[i] == len && memcmp(&x->sa[i], sa, len) == 0)
            return i;
    return -1;
}

static bool has_addr(const struct px_addrs *x, const struct sockaddr_storage *sa, socklen_t len)
{
    return addr_index(x, sa, len) >= 0;
}

bool px_addrs_have(const struct px_addrs *addrs, const struct px_at *at)
{
    return at->len > 0 && has_addr(addrs, &at->sa, at->len);
}

/* The same addresses, in whatever order. */
static bool same_set(const struct px_addrs *x, const struct px_addrs *y)
{
    if (x->n != y->n)
        return false;
    for (int i = 0; i < x->n; i++)
        if (!has_addr(y, &x->sa[i], x->salen[i]))
            return false;
    return true;
}

static struct px_resolved *resolved_find(struct px_worker *w, const struct lc_addr *a)
{
    for (struct px_resolved *r = w->resolved; r; r = r->next)
        if (lc_addr_equal(&r->addr, a))
            return r;
    return NULL;
}

/* A lookup again, started at started_ms, has failed with rc.  The
 * addresses the entry had are kept: the name may be back later, and they
 * are all there is. */
static void resolved_failed(struct px_resolved *r, int rc, int64_t started_ms)
{
    if (started_ms < r->answer_start_ms)
        return;                 /* a later lookup found it: this one is old news */
    if (px_now_ms() - started_ms < r->again_ms)     /* fast: see the file's comment */
        r->again_ms = r->again_ms * 2 < PX_RESOLVE_AGAIN_MAX_MS ? r->again_ms * 2
                                                                : PX_RESOLVE_AGAIN_MAX_MS;
    bool first = !r->answered;
    if (first)
        fprintf(stderr, "cocytus-proxy: cannot resolve %s:%d: %s\n", r->addr.host, r->addr.port,
                gai_strerror(rc));
    else if (!r->lookup_failing)
        fprintf(stderr, "cocytus-proxy: cannot resolve %s:%d again: %s (keeping its last address)\n",
                r->addr.host, r->addr.port, gai_strerror(rc));
    r->answered = true;
    r->lookup_failing = true;
    if (first)                  /* the requests waiting for a first answer fail now */
        px_backend_name_moved(r->w, &r->addr, &r->now);
}

/* A lookup, started at started_ms, has found addresses for r: taken,
 * unless a lookup that started later has given some already. */
static void take_found(struct px_resolved *r, const struct px_addrs *found, int64_t started_ms)
{
    if (started_ms < r->answer_start_ms)
        return;
    r->answered = true;
    r->answer_start_ms = started_ms;
    r->again_ms = PX_RESOLVE_AGAIN_MS;
    if (r->lookup_failing)
        fprintf(stderr, "cocytus-proxy: %s:%d resolves again\n", r->addr.host, r->addr.port);
    r->lookup_failing = false;
    if (started_ms >= r->stale_since_ms)
        r->stale = false;       /* (one that began before the failure proves little) */
    if (addrs_differ(found, &r->now)) {
        bool moved = !same_set(found, &r->now);
        if (moved && r->now.n > 0)
            fprintf(stderr, "cocytus-proxy: %s:%d now resolves to another address\n",
                    r->addr.host, r->addr.port);
        /* The address tried first stays, if the name still has it (a
         * resolver may give the same ones in another order); else the
         * first of the new list. */
        int keep = r->now.n > 0 ? addr_index(found, &r->now.sa[r->now.first],
                                             r->now.salen[r->now.first]) : -1;
        r->now = *found;
        r->now.first = keep >= 0 ? keep : 0;
        r->moved = r->moved || moved;
    }
}

/* addrs, with every address's port set to port. */
static void with_port(struct px_addrs *addrs, int port)
{
    for (int i = 0; i < addrs->n; i++) {
        if (addrs->sa[i].ss_family == AF_INET)
            ((struct sockaddr_in *)&addrs->sa[i])->sin_port = htons((uint16_t)port);
        else if (addrs->sa[i].ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&addrs->sa[i])->sin6_port = htons((uint16_t)port);
    }
}

/* A lookup of r's name has found addresses: they are the name's, so every
 * entry of the same host (a node's servers listen on several ports) takes
 * them, each with its own port.  Entries are per host and port, and each
 * looked its name up on its own: after a node moved to a spare host, a
 * server whose entry's lookups were still waiting on a silent name server
 * was dialled at the old address while another of the same host already
 * had the new one (a netns drill's check read nothing back in 2 s, in the
 * distcheck pass of a fresh-clone CI of fbc60ca). */
static void resolved_found(struct px_resolved *r, const struct px_addrs *found, int64_t started_ms,
                           bool hook_r)
{
    take_found(r, found, started_ms);
    if (!hook_r)
        r->moved = false;       /* its caller connects now: nothing waits for it */
    for (struct px_resolved *o = r->w->resolved; o != NULL; o = o->next) {
        if (o == r || strcmp(o->addr.host, r->addr.host) != 0)
            continue;
        struct px_addrs theirs = *found;
        with_port(&theirs, o->addr.port);
        take_found(o, &theirs, started_ms);
    }
    /* Last, with every entry whole (the hook may connect, or mark one
     * stale): a connection being made to an address the name no longer
     * has would wait out its timeout (the host is gone).  Entries are
     * only freed with the worker, and new ones go first in the list. */
    for (struct px_resolved *o = r->w->resolved; o != NULL; o = o->next) {
        if (!o->moved)
            continue;
        o->moved = false;
        px_backend_name_moved(o->w, &o->addr, &o->now);
    }
}

static void resolved_answer(struct px_resolved *r, int rc, const struct px_addrs *found,
                            int64_t started_ms)
{
    if (rc == 0)
        resolved_found(r, found, started_ms, true);
    else
        resolved_failed(r, rc, started_ms);
}

static void on_looked_up(int rc, struct addrinfo *res, void *arg)
{
    struct px_lookup_slot *slot = arg;
    struct px_addrs found;

    slot->lookup = NULL;
    if (rc == 0) {
        rc = addrs_from(res, &found);
        freeaddrinfo(res);
    }
    resolved_answer(slot->r, rc, &found, slot->started_ms);
}

/* Another lookup of stale r may start now: the last one started at least
 * an interval ago, and a slot is free. */
static struct px_lookup_slot *slot_for_lookup(struct px_resolved *r, int64_t now)
{
    if (!r->stale || now - r->last_start_ms < r->again_ms)
        return NULL;
    for (int i = 0; i < PX_LOOKUPS_MAX; i++)
        if (r->slots[i].lookup == NULL)
            return &r->slots[i];
    return NULL;
}

/* ---- the worker's side ---- */

/* An entry of a's host (another port) that has addresses, or NULL. */
static const struct px_resolved *answered_sibling(const struct px_worker *w,
                                                  const struct lc_addr *a)
{
    for (const struct px_resolved *o = w->resolved; o != NULL; o = o->next)
        if (o->answered && o->now.n > 0 && strcmp(o->addr.host, a->host) == 0)
            return o;
    return NULL;
}

/* Starts another lookup of r if one may start now (slot_for_lookup), on a
 * thread, or in place if no thread can start. */
static void maybe_look_up(struct px_resolved *r)
{
    int64_t now = px_now_ms();
    struct px_lookup_slot *slot = slot_for_lookup(r, now);
    if (slot == NULL)
        return;
    slot->r = r;
    slot->started_ms = now;
    r->last_start_ms = now;
    slot->lookup = lookup_start(r->w->base, r->addr.host, r->addr.port, on_looked_up, slot);
    if (slot->lookup == NULL) {
        /* No thread: look it up here, as the worker would have to (a
         * failure then always backs off: it held the worker). */
        struct px_addrs found;
        int rc = px_lookup_now(&r->addr, &found);
        resolved_answer(r, rc, &found, px_now_ms());
    }
}

/* r's addresses, or NULL and EAGAIN while its first lookup is under way. */
static const struct px_addrs *addrs_of(struct px_resolved *r)
{
    if (!r->answered && r->now.n == 0) {
        errno = EAGAIN;
        return NULL;
    }
    return &r->now;
}

const struct px_addrs *px_resolved_get(struct px_worker *w, const struct lc_addr *a,
                                       bool in_place)
{
    struct px_resolved *r = resolved_find(w, a);
    if (r != NULL) {
        maybe_look_up(r);
        return addrs_of(r);
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->w = w;
    r->addr = *a;
    r->again_ms = PX_RESOLVE_AGAIN_MS;
    const struct px_resolved *sib = answered_sibling(w, a);
    r->next = w->resolved;
    w->resolved = r;
    if (sib != NULL) {
        /* Another server of a host we know (a node's servers listen on
         * several ports): its addresses, with this port, and no lookup. */
        r->now = sib->now;
        with_port(&r->now, a->port);
        r->answered = true;
        r->answer_start_ms = sib->answer_start_ms;
        r->last_start_ms = sib->last_start_ms;
        r->stale = sib->stale;
        r->stale_since_ms = sib->stale_since_ms;
        maybe_look_up(r);       /* a stale host's may be due */
        return &r->now;
    }
    struct addrinfo *numeric = NULL;
    if (!in_place && lookup_numeric(a->host, a->port, false, &numeric) == EAI_NONAME) {
        /* A name: looked up on a thread, like a stale one. */
        r->stale = true;
        r->last_start_ms = px_now_ms() - r->again_ms;
        maybe_look_up(r);
        return addrs_of(r);
    }
    if (numeric != NULL)
        freeaddrinfo(numeric);
    int64_t t0 = px_now_ms();
    struct px_addrs found;
    int rc = px_lookup_now(a, &found);
    r->last_start_ms = t0;
    if (rc != 0) {
        fprintf(stderr, "cocytus-proxy: cannot resolve %s:%d: %s\n", a->host, a->port,
                gai_strerror(rc));
        r->answered = true;
        r->stale = true;
        r->lookup_failing = true;
        r->again_ms = PX_RESOLVE_AGAIN_MS * 2;
    } else {
        resolved_found(r, &found, t0, false);   /* and its host's other entries */
    }
    return &r->now;
}

void px_resolved_stale(struct px_worker *w, const struct lc_addr *a, const struct px_at *failed)
{
    struct px_resolved *r = resolved_find(w, a);
    if (r == NULL)
        return;
    r->stale = true;
    r->stale_since_ms = px_now_ms();
    /* A name may have several addresses (a host on two networks), and the
     * server need not listen on the one the resolver put first.  Only a
     * failure at the address tried first moves on: two connections that
     * failed there move once, not back to it. */
    int i = r->now.first;
    if (failed != NULL && r->now.n > 0 && failed->len == r->now.salen[i] &&
        memcmp(&failed->sa, &r->now.sa[i], failed->len) == 0)
        r->now.first = (i + 1) % r->now.n;
}

void px_resolved_free(struct px_worker *w)
{
    while (w->resolved) {
        struct px_resolved *r = w->resolved;
        w->resolved = r->next;
        for (int i = 0; i < PX_LOOKUPS_MAX; i++)
            lookup_cancel(r->slots[i].lookup);
        free(r);
    }
}
