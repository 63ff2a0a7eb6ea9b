/* clock.h - the server clock and memcached's expiration-time rules.
 *
 * Time inside the server is kept as seconds since a point shortly before the
 * process started ("relative time"), so 32 bits last for a century and 0 can
 * mean "never".  The clock is advanced by the server's once-a-second timer
 * rather than by calling time() on every request. */
#ifndef MC_CLOCK_H
#define MC_CLOCK_H

#include <stdint.h>
#include <time.h>

typedef uint32_t rel_time_t;

/* Relative time at the start: memcached's (60 + 2 seconds). */
#define CLOCK_START 62

/* Relative times above 30 days in a request are absolute unix times. */
#define CLOCK_MAX_RELATIVE_EXPTIME (60 * 60 * 24 * 30)

struct mc_clock {
    time_t epoch;      /* wall time that relative time 0 stands for */
    rel_time_t now;    /* current relative time, always >= CLOCK_START */
};

void clock_init(struct mc_clock *c, time_t started);
void clock_set(struct mc_clock *c, time_t wall_now);
time_t clock_wall(const struct mc_clock *c);

/* Convert a client exptime to relative time: 0 means never; an already
 * past time (negative exptime, or an absolute time not after now) gives 1,
 * which is always in the past. */
rel_time_t clock_exptime(const struct mc_clock *c, int64_t exptime);

static inline int clock_expired(const struct mc_clock *c, rel_time_t exptime)
{
    return exptime != 0 && exptime <= c->now;
}

#endif
