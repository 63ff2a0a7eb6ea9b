/* store_rules.h - memcached's rules for whether a store applies, shared by
 * every engine: add needs the key absent, replace/append/prepend need it
 * present, cas needs the item's cas to match, and any other store that
 * carries a cas (the binary protocol) applies only if it matches.  The
 * meta commands' ms C<cas> I also stores over a newer item, marking the
 * result stale. */
#ifndef MC_STORE_RULES_H
#define MC_STORE_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

/* A request's (nonzero) cas against the item's.  With cas disabled (-C)
 * memcached's items have no cas, so nothing matches: cas, ms/md/ma C and a
 * binary delete or incr with a cas answer EXISTS (a binary store ignores
 * its cas there: proto_bin.c, and so does an append or prepend:
 * store_outcome). */
static inline bool store_cas_matches(bool cas_enabled, uint64_t have, uint64_t want)
{
    return cas_enabled && have == want;
}

/* ENG_SUCCESS if store mutation m (SET..CAS) applies; otherwise the status
 * to answer.  found: the key holds a live item, whose cas is cas. */
eng_status store_outcome(const struct eng_mutation *m, bool found, uint64_t cas, bool cas_enabled);

/* Is a successful store a stale one (a cas_stale CAS whose cas was older)?
 * memcached then keeps the old item's TTL and its won mark. */
bool store_is_stale(const struct eng_mutation *m, bool found, uint64_t cas, bool cas_enabled);

/* The marks (ENG_MARK_*) of the item a successful store creates: none for
 * an append or prepend; else the request's, and for a stale store stale
 * plus the old item's won mark (old_marks). */
uint8_t store_marks(const struct eng_mutation *m, bool found, uint64_t cas, uint8_t old_marks,
                    bool cas_enabled);

#endif
