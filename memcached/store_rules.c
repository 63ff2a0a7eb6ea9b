/* store_rules.c - whether a store applies (see store_rules.h). */
#include "store_rules.h"

static eng_status cas_outcome(const struct eng_mutation *m, uint64_t cas, bool cas_enabled)
{
    return store_cas_matches(cas_enabled, cas, m->cas) ? ENG_SUCCESS : ENG_EXISTS;
}

eng_status store_outcome(const struct eng_mutation *m, bool found, uint64_t cas, bool cas_enabled)
{
    switch (m->op) {
    case ENG_OP_ADD:
        return found ? ENG_NOT_STORED : ENG_SUCCESS;
    case ENG_OP_REPLACE:
        if (!found)
            return m->cas != 0 ? ENG_NOT_FOUND : ENG_NOT_STORED;
        return m->cas == 0 ? ENG_SUCCESS : cas_outcome(m, cas, cas_enabled);
    case ENG_OP_APPEND:
    case ENG_OP_PREPEND:
        if (!found)
            return ENG_NOT_STORED;
        /* memcached -C drops the request's cas before an append or prepend
         * compares it, so the append applies (difftest seed 1124 case 1720) */
        if (m->cas == 0 || !cas_enabled)
            return ENG_SUCCESS;
        return cas_outcome(m, cas, cas_enabled);
    case ENG_OP_CAS:
        if (!found)
            return ENG_NOT_FOUND;
        /* memcached: a cas of 0, or any cas without cas support (-C), has
         * nothing to match (difftest seed 14014 case 4829) */
        if (!cas_enabled || m->cas == 0)
            return ENG_EXISTS;
        if (m->cas_stale && cas_enabled && m->cas != 0 && m->cas < cas)
            return ENG_SUCCESS;   /* stored, marked stale (store_marks) */
        return cas_outcome(m, cas, cas_enabled);
    default: /* SET */
        if (m->cas == 0)
            return ENG_SUCCESS;
        return found ? cas_outcome(m, cas, cas_enabled) : ENG_NOT_FOUND;
    }
}

bool store_is_stale(const struct eng_mutation *m, bool found, uint64_t cas, bool cas_enabled)
{
    return m->op == ENG_OP_CAS && m->cas_stale && found && cas_enabled && m->cas != 0 &&
           m->cas < cas;
}

uint8_t store_marks(const struct eng_mutation *m, bool found, uint64_t cas, uint8_t old_marks,
                    bool cas_enabled)
{
    /* memcached builds an append's or prepend's result as a new item with
     * none of the item flags (base64 key included: difftest seed 2511 case
     * 4073), whatever either part had */
    if (m->op == ENG_OP_APPEND || m->op == ENG_OP_PREPEND)
        return 0;
    if (!store_is_stale(m, found, cas, cas_enabled))
        return m->marks;
    return (uint8_t)(m->marks | ENG_MARK_STALE | (old_marks & ENG_MARK_WON));
}
