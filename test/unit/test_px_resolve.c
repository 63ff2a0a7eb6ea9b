/* test_px_resolve.c - the proxy's name cache (client/px_resolve.c) on a
 * clock and a resolver the test drives: lookups are stubbed (lookup_start
 * records them, the test answers them when it likes), px_now_ms is the
 * test's clock.  What is checked is the policy a replaced node depends on:
 * a name that comes back (the spare host that took it) is used within
 * about a second of a connect needing it, whatever the lookups that began
 * during the outage answer afterwards and when; an older lookup's address
 * never replaces a newer one's; a resolver that fails fast is asked less
 * often, but at least every PX_RESOLVE_AGAIN_MAX_MS (4 s); a silent one
 * has at most 8 lookups of a name waiting on it, one started a second at
 * most, and a name back is seen within about a second; of a name's
 * several addresses, a connect that fails at the one tried first moves
 * on to the next. */
#include <check.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "lookup.h"
#include "px.h"

/* ---- the stubs ---- */

static int64_t clock_ms;

int64_t px_now_ms(void)
{
    return clock_ms;
}

/* What the name resolves to now (NULL: the resolver fails). */
static const char *name_is;

struct lookup {
    lookup_fn fn;
    void *ctx;
    int64_t started_ms;
    bool waiting;               /* started, not answered nor cancelled */
};

#define MAX_LOOKUPS 256
static struct lookup lookups[MAX_LOOKUPS];
static int nlookups;

struct lookup *lookup_start(struct event_base *base, const char *host, int port, lookup_fn fn,
                            void *ctx)
{
    (void)base, (void)host, (void)port;
    ck_assert_int_lt(nlookups, MAX_LOOKUPS);
    struct lookup *lk = &lookups[nlookups++];
    lk->fn = fn;
    lk->ctx = ctx;
    lk->started_ms = clock_ms;
    lk->waiting = true;
    return lk;
}

void lookup_cancel(struct lookup *lk)
{
    if (lk != NULL)
        lk->waiting = false;
}

int lookup_numeric(const char *host, int port, bool passive, struct addrinfo **res)
{
    (void)host, (void)port, (void)passive, (void)res;
    return EAI_NONAME;          /* the test's host is a name */
}

static int resolve_as(const char *ip, int port, struct addrinfo **res)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    return getaddrinfo(ip, p, &hints, res);
}

/* ip, or two addresses "a,b": a list of them in that order. */
static int resolve_list(const char *ip, int port, struct addrinfo **res)
{
    char first[64];
    const char *comma = strchr(ip, ',');
    if (comma == NULL)
        return resolve_as(ip, port, res);
    snprintf(first, sizeof(first), "%.*s", (int)(comma - ip), ip);
    struct addrinfo *a = NULL, *b = NULL;
    ck_assert_int_eq(resolve_as(first, port, &a), 0);
    ck_assert_int_eq(resolve_as(comma + 1, port, &b), 0);
    struct addrinfo *last = a;
    while (last->ai_next != NULL)
        last = last->ai_next;
    last->ai_next = b;          /* freeaddrinfo frees the chain */
    *res = a;
    return 0;
}

static int lookups_in_place;

int lookup_now(const char *host, int port, bool passive, struct addrinfo **res)
{
    (void)host, (void)passive;
    lookups_in_place++;
    return name_is == NULL ? EAI_AGAIN : resolve_list(name_is, port, res);
}

/* Answers lookup i: what the name resolves to now, or a failure. */
static void answer(int i, const char *ip)
{
    struct lookup *lk = &lookups[i];
    ck_assert(lk->waiting);
    lk->waiting = false;
    struct addrinfo *res = NULL;
    if (ip == NULL) {
        lk->fn(EAI_AGAIN, NULL, lk->ctx);
        return;
    }
    ck_assert_int_eq(resolve_list(ip, 21000, &res), 0);
    lk->fn(0, res, lk->ctx);
}

static int waiting(void)
{
    int n = 0;
    for (int i = 0; i < nlookups; i++)
        n += lookups[i].waiting;
    return n;
}

/* The stub of px_backend.c's hook: how often a name moved. */
static int moves;

void px_backend_name_moved(struct px_worker *w, const struct lc_addr *a,
                           const struct px_addrs *addrs)
{
    (void)w, (void)a, (void)addrs;
    moves++;
}

/* ---- the worker's side ---- */

static struct px_worker *worker;
static struct lc_addr name = { .host = "n0.example", .port = 21000 };

static void setup(void)
{
    clock_ms = 100000;
    name_is = "10.0.0.1";
    nlookups = 0;
    lookups_in_place = 0;
    moves = 0;
    memset(lookups, 0, sizeof(lookups));
    worker = calloc(1, sizeof(*worker));
    ck_assert_ptr_nonnull(worker);
}

static void teardown(void)
{
    px_resolved_free(worker);
    free(worker);
}

/* Which address the last connect_to used (-1: none), and the address. */
static int last_index;
static struct px_at last_at;


/* The address a connect would use now ("" if none). */
static const char *connect_to(void)
{
    static char buf[INET_ADDRSTRLEN];
    const struct px_addrs *r = px_resolved_get(worker, &name, true);
    ck_assert_ptr_nonnull(r);
    last_index = -1;
    last_at.len = 0;
    if (r->n == 0)
        return "";
    ck_assert(r->first >= 0 && r->first < r->n);
    last_index = r->first;
    memcpy(&last_at.sa, &r->sa[r->first], r->salen[r->first]);
    last_at.len = r->salen[r->first];
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&r->sa[r->first];
    ck_assert_int_eq(ntohs(sin->sin_port), 21000);
    return inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
}

/* A connect that fails (the host at the address is gone): the entry is
 * stale, and the connect after it may start a lookup. */
static const char *connect_fails(void)
{
    const char *at = connect_to();
    px_resolved_stale(worker, &name, &last_at);
    return at;
}

/* The outage of a replaced host, as the netns drill makes it: connects to
 * the name fail from t=1 s to t=2 s (ops routed to it until the map moves
 * them to a recovery process), then none until `check_at` (the spare
 * serves again and a client's get routes there).  Every lookup that starts
 * before the spare has the name (at 5.5 s) waits on a silent name server
 * and fails after lookup_ms; one that starts after it finds the new
 * address at once.  Returns how long after check_at connects went to the
 * new address (or -1). */
static int64_t replace_outage(int64_t lookup_ms, int64_t check_at)
{
    int64_t t0 = clock_ms;
    ck_assert_str_eq(connect_to(), "10.0.0.1");
    for (int64_t t = 0; t <= 20000; t += 100) {
        clock_ms = t0 + t;
        if (t == 1000)
            name_is = NULL;
        if (t == 5500)
            name_is = "10.0.0.2";
        for (int i = 0; i < nlookups; i++) {
            int64_t age = clock_ms - lookups[i].started_ms;
            if (!lookups[i].waiting)
                continue;
            if (lookups[i].started_ms - t0 < 5500 && age >= lookup_ms)
                answer(i, NULL);
            else if (lookups[i].started_ms - t0 >= 5500)
                answer(i, name_is);
        }
        if ((t >= 1000 && t < 2500) || t >= check_at) {
            const char *at = connect_to();
            if (strcmp(at, "10.0.0.2") == 0)
                return t - check_at;
            px_resolved_stale(worker, &name, &last_at);
        }
    }
    return -1;
}

START_TEST(test_outage_then_spare_3s_lookups)
{
    /* The lookups from the outage fail at 4 s and 5 s: before the spare.
     * The one the check's connect starts finds the spare. */
    int64_t took = replace_outage(3000, 6000);
    ck_assert_msg(took >= 0 && took <= 1100, "the spare's address used %lld ms after the check",
                  (long long)took);
}
END_TEST

START_TEST(test_outage_then_spare_failures_after_it)
{
    /* The outage's lookups (started at 1.1 s and 2.1 s) fail after the
     * spare took the name, as the check connects or just after: they
     * must not hold back the lookup that would find it. */
    static const int64_t checks[] = { 5600, 6000, 7000, 8000 };
    static const int64_t after[] = { 0, 100, 200, 500, 900 };
    for (size_t c = 0; c < sizeof(checks) / sizeof(checks[0]); c++)
        for (size_t a = 0; a < sizeof(after) / sizeof(after[0]); a++) {
            teardown();
            setup();
            int64_t took = replace_outage(checks[c] - 1100 + after[a], checks[c]);
            ck_assert_msg(took >= 0 && took <= 1100,
                          "check at %lld ms, first failure %lld ms after it: the spare's "
                          "address used %lld ms after the check",
                          (long long)checks[c], (long long)after[a], (long long)took);
        }
}
END_TEST

START_TEST(test_outage_many_failures)
{
    /* Every lookup of the outage fails just as the check begins. */
    for (int64_t lookup_ms = 2000; lookup_ms <= 9000; lookup_ms += 500) {
        teardown();
        setup();
        int64_t took = replace_outage(lookup_ms, 6000);
        ck_assert_msg(took >= 0 && took <= 1100,
                      "lookups of %lld ms: the spare's address used %lld ms after the check",
                      (long long)lookup_ms, (long long)took);
    }
}
END_TEST

START_TEST(test_newer_address_wins)
{
    ck_assert_str_eq(connect_fails(), "10.0.0.1");
    clock_ms += 1000;
    connect_fails();            /* lookup 0 */
    clock_ms += 1000;
    connect_fails();            /* lookup 1 */
    ck_assert_int_eq(nlookups, 2);
    answer(1, "10.0.0.3");
    ck_assert_str_eq(connect_to(), "10.0.0.3");
    answer(0, "10.0.0.2");      /* older: not taken */
    ck_assert_str_eq(connect_to(), "10.0.0.3");
}
END_TEST

START_TEST(test_failure_keeps_address)
{
    connect_fails();
    clock_ms += 1000;
    connect_fails();
    ck_assert_int_eq(nlookups, 1);
    answer(0, NULL);
    ck_assert_str_eq(connect_to(), "10.0.0.1");
}
END_TEST

START_TEST(test_fast_failures_back_off_to_4s)
{
    /* A resolver that fails at once, a connect every 100 ms for a minute:
     * the interval doubles from 1 s to 4 s and stays there. */
    connect_fails();
    name_is = NULL;
    int64_t last = -1, gap_max = 0;
    int64_t t0 = clock_ms;
    for (int64_t t = 100; t <= 60000; t += 100) {
        clock_ms = t0 + t;
        int before = nlookups;
        connect_fails();
        if (nlookups > before) {
            if (last >= 0 && t - last > gap_max)
                gap_max = t - last;
            last = t;
            answer(nlookups - 1, NULL);
        }
    }
    ck_assert_int_eq(gap_max, 4000);
    ck_assert_int_le(nlookups, 4 + 60000 / 4000);
    ck_assert_int_ge(nlookups, 60000 / 4000);
    /* The name back: found at the next lookup (within 4 s). */
    name_is = "10.0.0.2";
    for (int64_t t = 60100; t <= 64100; t += 100) {
        clock_ms = t0 + t;
        int before = nlookups;
        const char *at = connect_fails();
        if (nlookups > before)
            answer(nlookups - 1, name_is);
        if (strcmp(at, "10.0.0.2") == 0)
            return;
    }
    ck_abort_msg("the name back was not seen within 4 s");
}
END_TEST

START_TEST(test_silent_resolver_bounded)
{
    /* No lookup ever answers: at most 8 wait at once, one a second. */
    connect_fails();
    name_is = NULL;
    int64_t t0 = clock_ms;
    for (int64_t t = 100; t <= 30000; t += 100) {
        clock_ms = t0 + t;
        connect_fails();
        ck_assert_int_le(waiting(), 8);
    }
    ck_assert_int_eq(nlookups, 8);
    /* One answers: another may start, an interval after the last start. */
    answer(0, NULL);
    connect_fails();
    ck_assert_int_eq(nlookups, 9);
    connect_fails();
    ck_assert_int_eq(nlookups, 9);
}
END_TEST

START_TEST(test_slow_failures_back_off)
{
    /* A name server that does not answer (each lookup fails after 6 s), a
     * connect every 100 ms for a minute: a lookup a second at most, never
     * more than 8 waiting at once; and when the name comes back, it is
     * used within about a second, whatever is still waiting. */
    connect_fails();
    name_is = NULL;
    int64_t t0 = clock_ms, back_at = 60000, seen = -1;
    for (int64_t t = 100; t <= 70000 && seen < 0; t += 100) {
        clock_ms = t0 + t;
        if (t == back_at)
            name_is = "10.0.0.9";
        for (int i = 0; i < nlookups; i++) {
            if (!lookups[i].waiting)
                continue;
            if (lookups[i].started_ms - t0 >= back_at)
                answer(i, name_is);
            else if (clock_ms - lookups[i].started_ms >= 6000)
                answer(i, NULL);
        }
        if (strcmp(connect_fails(), "10.0.0.9") == 0)
            seen = t - back_at;
        ck_assert_int_le(waiting(), 8);
        if (t == back_at - 100)
            ck_assert_msg(nlookups <= 61, "%d lookups in a minute", nlookups);
    }
    ck_assert_msg(seen >= 0 && seen <= 1100, "the name back used %lld ms later", (long long)seen);
}
END_TEST

START_TEST(test_first_lookup_fails)
{
    /* A name that does not resolve at first has no addresses, and is
     * looked up again on a thread. */
    name_is = NULL;
    ck_assert_str_eq(connect_fails(), "");
    ck_assert_int_eq(nlookups, 0);
    name_is = "10.0.0.4";
    clock_ms += 2000;
    connect_fails();
    ck_assert_int_eq(nlookups, 1);
    answer(0, name_is);
    ck_assert_str_eq(connect_to(), "10.0.0.4");
}
END_TEST

START_TEST(test_first_lookup_on_thread)
{
    /* A name a backend's connect meets first (a node a newer map added)
     * is looked up on a thread, never in place: the connect waits
     * (EAGAIN) until the answer, which wakes it (the hook). */
    errno = 0;
    const struct px_addrs *r = px_resolved_get(worker, &name, false);
    int err = errno;
    ck_assert_ptr_null(r);
    ck_assert_int_eq(err, EAGAIN);
    ck_assert_int_eq(nlookups, 1);
    clock_ms += 500;
    r = px_resolved_get(worker, &name, false);
    err = errno;
    ck_assert_ptr_null(r);
    ck_assert_int_eq(err, EAGAIN);
    ck_assert_int_eq(nlookups, 1);      /* one at a time, within the interval */
    ck_assert_int_eq(moves, 0);
    answer(0, "10.0.0.5");
    ck_assert_int_eq(moves, 1);
    ck_assert_str_eq(connect_to(), "10.0.0.5");
    ck_assert_int_eq(lookups_in_place, 0);
}
END_TEST

START_TEST(test_first_lookup_on_thread_fails)
{
    /* The name server does not answer: after its failure the waiting
     * connects are woken to fail at once, and the name is looked up again
     * on a thread until it resolves. */
    name_is = NULL;
    ck_assert_ptr_null(px_resolved_get(worker, &name, false));
    clock_ms += 6000;
    answer(0, NULL);
    ck_assert_int_eq(moves, 1);
    const struct px_addrs *r = px_resolved_get(worker, &name, false);
    ck_assert_ptr_nonnull(r);           /* no addresses: connects fail at once */
    ck_assert_int_eq(r->n, 0);
    ck_assert_int_eq(nlookups, 2);      /* and the next lookup is under way */
    name_is = "10.0.0.6";
    clock_ms += 1000;
    px_resolved_get(worker, &name, false);
    ck_assert_int_eq(nlookups, 3);
    answer(2, name_is);
    ck_assert_str_eq(connect_to(), "10.0.0.6");
    ck_assert_int_eq(lookups_in_place, 0);
}
END_TEST

/* The address a connect to a would use now, and its port. */
static const char *connect_to_port(const struct lc_addr *a, int *port)
{
    static char buf[INET_ADDRSTRLEN];
    const struct px_addrs *r = px_resolved_get(worker, a, true);
    ck_assert_ptr_nonnull(r);
    *port = 0;
    if (r->n == 0)
        return "";
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&r->sa[r->first];
    *port = ntohs(sin->sin_port);
    return inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
}

START_TEST(test_same_host_other_port)
{
    /* A node's servers share its host name on several ports.  A second
     * port takes the first's addresses without a lookup, and when a
     * lookup for one port finds the name moved (a spare host), every
     * port of that host uses the new address at once: each port's own
     * lookups, started while the name server was silent, answer late. */
    struct lc_addr other = name;
    other.port = 21001;
    int port;
    ck_assert_str_eq(connect_to(), "10.0.0.1");
    ck_assert_int_eq(lookups_in_place, 1);
    ck_assert_str_eq(connect_to_port(&other, &port), "10.0.0.1");
    ck_assert_int_eq(port, 21001);
    ck_assert_int_eq(lookups_in_place, 1);
    name_is = NULL;
    connect_fails();
    px_resolved_stale(worker, &other, NULL);
    clock_ms += 1000;
    connect_fails();                          /* lookup 0, for 21000 */
    connect_to_port(&other, &port);           /* lookup 1, for 21001: silent */
    ck_assert_int_eq(nlookups, 2);
    name_is = "10.0.0.7";
    clock_ms += 1000;
    connect_fails();                          /* lookup 2, for 21000 */
    ck_assert_int_eq(nlookups, 3);
    answer(2, name_is);
    ck_assert_str_eq(connect_to_port(&other, &port), "10.0.0.7");
    ck_assert_int_eq(port, 21001);
    ck_assert_str_eq(connect_to(), "10.0.0.7");
    /* 21001's own lookup fails later, and its older answer is ignored */
    clock_ms += 4000;
    answer(1, NULL);
    answer(0, "10.0.0.1");
    ck_assert_str_eq(connect_to_port(&other, &port), "10.0.0.7");
    ck_assert_str_eq(connect_to(), "10.0.0.7");
}
END_TEST

START_TEST(test_next_address_after_a_failure)
{
    /* A name with two addresses, the server on the second only: a failed
     * connect moves on to it, and a connect that works keeps it, across
     * lookups that give the same two. */
    name_is = "10.0.0.1,10.0.0.2";
    ck_assert_str_eq(connect_fails(), "10.0.0.1");
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    clock_ms += 1000;
    ck_assert_str_eq(connect_to(), "10.0.0.2");     /* starts a lookup: stale */
    ck_assert_int_eq(nlookups, 1);
    answer(0, name_is);
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    /* Both fail in turn: tried alternately. */
    ck_assert_str_eq(connect_fails(), "10.0.0.2");
    ck_assert_str_eq(connect_fails(), "10.0.0.1");
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    /* Two connections that failed at the same address move on once. */
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    struct px_at at = last_at;
    px_resolved_stale(worker, &name, &at);
    px_resolved_stale(worker, &name, &at);
    ck_assert_str_eq(connect_to(), "10.0.0.1");
    /* A connection that worked, then broke, blames no address. */
    px_resolved_stale(worker, &name, NULL);
    ck_assert_str_eq(connect_to(), "10.0.0.1");
    ck_assert_str_eq(connect_fails(), "10.0.0.1");
    /* The same two in another order: the one tried first stays. */
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    ck_assert_int_eq(last_index, 1);
    clock_ms += 4000;
    connect_to();
    px_resolved_stale(worker, &name, NULL);
    connect_to();               /* starts a lookup */
    answer(nlookups - 1, "10.0.0.2,10.0.0.1");
    ck_assert_str_eq(connect_to(), "10.0.0.2");
    ck_assert_int_eq(last_index, 0);
    ck_assert_int_eq(moves, 0);         /* the same addresses: nothing moved */
    /* Other addresses: tried from their first. */
    clock_ms += 1000;
    connect_fails();
    int before = nlookups;
    connect_to();               /* stale: starts a lookup */
    ck_assert_int_eq(nlookups, before + 1);
    answer(nlookups - 1, "10.0.0.3,10.0.0.4");
    ck_assert_str_eq(connect_to(), "10.0.0.3");
    ck_assert_int_eq(moves, 1);         /* connections to the old ones are dropped */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("px_resolve");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_outage_then_spare_3s_lookups);
    tcase_add_test(tc, test_outage_then_spare_failures_after_it);
    tcase_add_test(tc, test_outage_many_failures);
    tcase_add_test(tc, test_newer_address_wins);
    tcase_add_test(tc, test_failure_keeps_address);
    tcase_add_test(tc, test_fast_failures_back_off_to_4s);
    tcase_add_test(tc, test_silent_resolver_bounded);
    tcase_add_test(tc, test_slow_failures_back_off);
    tcase_add_test(tc, test_first_lookup_fails);
    tcase_add_test(tc, test_first_lookup_on_thread);
    tcase_add_test(tc, test_first_lookup_on_thread_fails);
    tcase_add_test(tc, test_same_host_other_port);
    tcase_add_test(tc, test_next_address_after_a_failure);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
