/* unit_loop.h - running a libevent loop in a unit test until a condition
 * holds or a deadline passes.
 *
 * Tests of links and receivers drive real sockets on the caller's loop; a
 * 2 ms persistent tick keeps event_base_loop(EVLOOP_ONCE) from blocking
 * longer than that, so the condition is re-checked often. */
#ifndef UNIT_LOOP_H
#define UNIT_LOOP_H

#include <stdbool.h>
#include <time.h>

#include <event2/event.h>

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static inline void test_loop_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

typedef bool (*pred_fn)(void *arg);

/* Run the loop until pred(arg) holds or ms pass; returns pred(arg). */
static inline bool run_until(struct event_base *base, pred_fn pred, void *arg, int ms)
{
    struct event *tick = event_new(base, -1, EV_PERSIST, test_loop_tick, NULL);
    struct timeval tv = { 0, 2000 };
    double deadline = now_ms() + ms;
    event_add(tick, &tv);
    while (!pred(arg) && now_ms() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(tick);
    return pred(arg);
}

#endif
