/* clock.c - relative server time and exptime conversion (see clock.h). */
#include "clock.h"

void clock_init(struct mc_clock *c, time_t started)
{
    /* Start back so relative time is never 0 or 1, values that mean
     * "never" and "already expired"; as far back as memcached does, so
     * that the wrapped TTLs it prints for expired items are ours too. */
    c->epoch = started - CLOCK_START;
    c->now = CLOCK_START;
}

void clock_set(struct mc_clock *c, time_t wall_now)
{
    if (wall_now > c->epoch + CLOCK_START)
        c->now = (rel_time_t)(wall_now - c->epoch);
}

time_t clock_wall(const struct mc_clock *c)
{
    return c->epoch + (time_t)c->now;
}

rel_time_t clock_exptime(const struct mc_clock *c, int64_t exptime)
{
    if (exptime == 0)
        return 0;
    if (exptime < 0)
        return 1;
    if (exptime > CLOCK_MAX_RELATIVE_EXPTIME) {
        /* Absolute unix time. */
        if (exptime <= (int64_t)c->epoch + (int64_t)c->now)
            return 1;
        int64_t rel = exptime - (int64_t)c->epoch;
        return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    }
    int64_t rel = (int64_t)c->now + exptime;
    return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
}
