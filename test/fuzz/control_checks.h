/* control_checks.h - what fuzz_control and fuzz_frame check about one
 * control message (the text payload of an FT_CONTROL frame, between a
 * server and the coordinator; docs/wire-format.md sections 5 and 6), and the
 * valid messages both targets seed their corpus with.
 *
 * A message goes through every pure parser that a receiver hands it to:
 *   - the dispatch words (coord_is_engine_message on a server,
 *     coord_is_pbr_answer and coord_is_recovery_answer on the coordinator);
 *   - ctl_parse(), which both sides call for everything else;
 *   - slotmap_decode() for the body of "map <body>", and
 *     slotmap_parse_config_reply() for the same body in a `config get
 *     cluster` reply (the clients' path to the same decoder);
 *   - group_view_parse() for "group <g> <version> <dps> <pps>", with the k
 *     and m its entry counts suggest (the receiving process's own k and m).
 * Besides "no crash, no sanitizer report", whatever a parser accepts must
 * format back into the same text (numbers without leading zeros) or at least
 * parse again into the same result, within the documented ranges.
 * Each parse gets an exact-size heap copy of its bytes. */
#ifndef FUZZ_CONTROL_CHECKS_H
#define FUZZ_CONTROL_CHECKS_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "recovery.h"
#include "slotmap.h"

#ifndef FUZZ_NAME
#define FUZZ_NAME "fuzz"
#endif

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, FUZZ_NAME ": invariant failed: %s (%s:%d)\n", #cond, \
                    __FILE__, __LINE__);                                         \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* An exact-size heap copy (one byte for an empty input, never read). */
static inline void *fuzz_copy(const void *p, size_t n)
{
    void *c = malloc(n ? n : 1);
    CHECK(c != NULL);
    if (n)
        memcpy(c, p, n);
    return c;
}

static inline bool fuzz_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Does the text hold a number written with a leading zero ("007")?  Only
 * such a text may parse to a value that formats differently. */
static inline bool fuzz_has_leading_zero(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '0' && fuzz_is_digit(p[i + 1]) && (i == 0 || !fuzz_is_digit(p[i - 1])))
            return true;
    return false;
}

static inline bool fuzz_all_printable(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] >= 0x7f)
            return false;
    return true;
}

/* ---- the slot map of "map <body>" ---- */

static inline bool fuzz_same_map(const struct slotmap *a, const struct slotmap *b)
{
    if (a->epoch != b->epoch || a->nendpoints != b->nendpoints)
        return false;
    for (int i = 0; i < a->nendpoints; i++)
        if (strcmp(a->endpoints[i].host, b->endpoints[i].host) != 0 ||
            a->endpoints[i].port != b->endpoints[i].port)
            return false;
    return memcmp(a->slot, b->slot, sizeof(a->slot)) == 0;
}

/* The name an endpoint token "<host>|<ip>|<port>" stands for: host, or ip
 * when host is empty.  Used to see that an accepted name is what the
 * decoder stored, byte for byte. */
static inline void fuzz_endpoint_name(const char *tok, size_t n, const char **name, size_t *len)
{
    const char *bar1 = memchr(tok, '|', n);
    CHECK(bar1 != NULL);
    const char *bar2 = memchr(bar1 + 1, '|', n - (size_t)(bar1 + 1 - tok));
    CHECK(bar2 != NULL);
    *name = bar1 > tok ? tok : bar1 + 1;
    *len = bar1 > tok ? (size_t)(bar1 - tok) : (size_t)(bar2 - bar1 - 1);
}

static inline void check_map_body(const char *data, size_t len)
{
    char *body = fuzz_copy(data, len);
    struct slotmap m, again, reply;
    char err[256];
    err[0] = '\0';
    int rc = slotmap_decode(&m, body, len, err, sizeof(err));
    if (rc < 0) {
        CHECK(rc == -1 && err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        CHECK(m.endpoints == NULL && m.nendpoints == 0);
    } else {
        CHECK(rc == 0);
        CHECK(m.nendpoints >= 1 && m.nendpoints <= (int)SLOTMAP_MAX_ENDPOINTS);
        for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
            CHECK(m.slot[s] < m.nendpoints);
        /* Line 2, token by token: each accepted name is stored whole. */
        const char *line2 = memchr(body, '\n', len) + 1;
        const char *end2 = memchr(line2, '\n', len - (size_t)(line2 - body));
        const char *tok = line2;
        for (int i = 0; i < m.nendpoints; i++) {
            const char *sp = memchr(tok, ' ', (size_t)(end2 - tok));
            size_t tn = (size_t)((sp ? sp : end2) - tok);
            const char *name;
            size_t nn;
            fuzz_endpoint_name(tok, tn, &name, &nn);
            const struct slotmap_endpoint *e = &m.endpoints[i];
            CHECK(nn >= 1 && nn < sizeof(e->host));
            CHECK(strlen(e->host) == nn && memcmp(e->host, name, nn) == 0);
            CHECK(e->port >= 1 && e->port <= 65535);
            CHECK(e->group == -1 && e->index == -1 && e->role == ROLE_PLAIN);
            tok = sp ? sp + 1 : end2;
        }
        CHECK(tok == end2);
        /* Encode and decode again: the same map. */
        size_t n;
        char *text = slotmap_encode(&m, &n);
        CHECK(text != NULL);
        CHECK(slotmap_decode(&again, text, n, err, sizeof(err)) == 0);
        CHECK(fuzz_same_map(&m, &again));
        slotmap_free(&again);
        free(text);
    }
    /* The same body in a `config get cluster` reply, as clients read it. */
    size_t rlen = len + 64;
    char *wrapped = malloc(rlen);
    CHECK(wrapped != NULL);
    int h = snprintf(wrapped, rlen, "CONFIG cluster 0 %zu\r\n", len);
    memcpy(wrapped + h, body, len);
    memcpy(wrapped + h + len, "\r\nEND\r\n", 7);
    rlen = (size_t)h + len + 7;
    char *exact = fuzz_copy(wrapped, rlen);
    free(wrapped);
    size_t used = 0;
    int rrc = slotmap_parse_config_reply(&reply, exact, rlen, &used, err, sizeof(err));
    CHECK(rrc == rc);
    if (rrc == 0) {
        CHECK(used == rlen);
        CHECK(fuzz_same_map(&m, &reply));
        slotmap_free(&reply);
    }
    free(exact);
    if (rc == 0)
        slotmap_free(&m);
    free(body);
}

/* The client side reads a whole reply stream with the same function: any
 * bytes, and the count it consumes never exceeds them. */
static inline void check_config_reply(const char *data, size_t len)
{
    char *text = fuzz_copy(data, len);
    struct slotmap m;
    char err[256];
    size_t used = (size_t)-1;
    memset(&m, 0, sizeof(m));
    int rc = slotmap_parse_config_reply(&m, text, len, &used, err, sizeof(err));
    CHECK(rc == 0 || rc == 1 || rc == -1);
    if (rc == 0) {
        CHECK(used <= len);
        CHECK(m.nendpoints >= 1);
        slotmap_free(&m);
    } else if (rc == -1) {
        CHECK(err[0] != '\0');
    }
    free(text);
}

/* ---- ctl_parse ---- */

/* The text of m, as the sender writes it (a body is raw bytes: NUL too). */
static inline size_t format_ctl(const struct ctl_msg *m, char *buf, size_t cap)
{
    int n = 0;
    switch (m->kind) {
    case CTL_HELLO:
        if (m->incarnation)
            n = snprintf(buf, cap, "hello %ld %" PRIu64 " %" PRIu64, m->pid, m->epoch,
                         m->incarnation);
        else
            n = snprintf(buf, cap, "hello %ld %" PRIu64, m->pid, m->epoch);
        break;
    case CTL_RETIRE:
        n = snprintf(buf, cap, "retire");
        break;
    case CTL_HB:
        n = snprintf(buf, cap, "hb %ld %" PRIu64 " %" PRIu64 "%s", m->pid, m->epoch, m->rss,
                     m->body ? " " : "");
        break;
    case CTL_MIGRATED:
        if (m->ok)
            n = snprintf(buf, cap, "migrated %u %" PRIu64 " ok", m->slot, m->epoch);
        else
            n = snprintf(buf, cap, "migrated %u %" PRIu64 " failed %s", m->slot, m->epoch,
                         m->why);
        break;
    case CTL_MAP:
        n = snprintf(buf, cap, "map ");
        break;
    case CTL_MIGRATE:
        n = snprintf(buf, cap, "migrate %u %s:%d %" PRIu64, m->slot, m->host, m->port, m->epoch);
        break;
    case CTL_LOST:
        n = snprintf(buf, cap, "lost %s %d %" PRIu64 "%s", cluster_role_name(m->role), m->index,
                     m->down_ms, m->link_up ? " up" : "");
        break;
    }
    CHECK(n >= 0 && (size_t)n < cap);
    if ((m->kind == CTL_HB || m->kind == CTL_MAP) && m->body) {
        CHECK((size_t)n + m->body_len <= cap);
        memcpy(buf + n, m->body, m->body_len);
        return (size_t)n + m->body_len;
    }
    return (size_t)n;
}

static inline bool same_ctl(const struct ctl_msg *a, const struct ctl_msg *b)
{
    if (a->kind != b->kind || a->pid != b->pid || a->epoch != b->epoch || a->rss != b->rss ||
        a->incarnation != b->incarnation ||
        a->slot != b->slot || a->ok != b->ok || a->port != b->port ||
        a->role != b->role || a->index != b->index || a->down_ms != b->down_ms ||
        a->link_up != b->link_up ||
        strcmp(a->why, b->why) != 0 || strcmp(a->host, b->host) != 0 ||
        a->body_len != b->body_len || (a->body == NULL) != (b->body == NULL))
        return false;
    return a->body == NULL || memcmp(a->body, b->body, a->body_len) == 0;
}

static inline void check_ctl_parse(const char *data, size_t len)
{
    char *text = fuzz_copy(data, len);
    struct ctl_msg m, again;
    char err[256];
    memset(err, 'x', sizeof(err));
    int rc = ctl_parse(text, len, &m, err, sizeof(err));
    if (rc < 0) {
        CHECK(rc == -1 && err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        /* the coordinator logs it: a quoted message must stay on its line */
        CHECK(fuzz_all_printable(err, strlen(err)));
        free(text);
        return;
    }
    CHECK(rc == 0);
    /* Fields within the documented ranges. */
    switch (m.kind) {
    case CTL_HELLO:
    case CTL_HB:
        CHECK(m.pid >= 0 && m.pid <= 0x7fffffff);
        if (m.kind == CTL_HB && m.body) {
            CHECK(m.body > text && m.body + m.body_len == text + len && m.body_len > 0);
            CHECK(m.body[-1] == ' ');
        }
        if (m.kind == CTL_HB && !m.body)
            CHECK(m.body_len == 0);
        break;
    case CTL_MIGRATED:
        CHECK(m.slot < SLOTMAP_SLOTS);
        CHECK(strlen(m.why) < sizeof(m.why) && fuzz_all_printable(m.why, strlen(m.why)));
        CHECK(m.ok ? m.why[0] == '\0' : m.why[0] != '\0');
        break;
    case CTL_MIGRATE:
        CHECK(m.slot < SLOTMAP_SLOTS && m.port >= 1 && m.port <= 65535);
        CHECK(m.host[0] != '\0' && strlen(m.host) < sizeof(m.host));
        break;
    case CTL_MAP:
        CHECK(len > 4 && m.body == text + 4 && m.body_len == len - 4);
        break;
    case CTL_RETIRE:
        CHECK(len == 6);
        break;
    case CTL_LOST:
        /* a peer in the sender's group: a cluster role, an index it can have */
        CHECK(m.role != ROLE_PLAIN && m.index >= 0 && m.index < 1024);
        break;
    default:
        CHECK(!"unknown kind");
    }
    /* Formatted again, it parses to the same message; and it is the very
     * text received unless a number had leading zeros or a failure reason
     * was cut or made printable. */
    size_t cap = len + 128;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    size_t n = format_ctl(&m, buf, cap);
    char *exact = fuzz_copy(buf, n);
    free(buf);
    CHECK(ctl_parse(exact, n, &again, err, sizeof(err)) == 0);
    CHECK(same_ctl(&m, &again));
    bool cut = m.kind == CTL_MIGRATED && !m.ok;
    if (!cut && !fuzz_has_leading_zero(text, len))
        CHECK(n == len && memcmp(exact, text, len) == 0);
    if (m.kind == CTL_MAP)
        check_map_body(m.body, m.body_len);
    free(exact);
    free(text);
}

/* ---- the group view ---- */

static inline int fuzz_count_entries(const char *p, size_t n)
{
    int c = 1;
    for (size_t i = 0; i < n; i++)
        c += p[i] == ',';
    return c;
}

/* A plain decimal of digits only that fits in 64 bits. */
static inline bool fuzz_u64(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!fuzz_is_digit(p[i]))
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* "<version> <dps> <pps>", what follows "group <g> ". */
static inline void check_group_view_k_m(const char *text, size_t len, int k, int m)
{
    struct group_view v, again;
    memset(&v, 0x5a, sizeof(v));
    struct group_view before = v;
    int rc = group_view_parse(&v, k, m, text, len);
    if (rc < 0) {
        CHECK(rc == -1 && memcmp(&v, &before, sizeof(v)) == 0);
        return;
    }
    CHECK(rc == 0 && v.k == k && v.m == m);
    for (int i = 0; i < k; i++)
        CHECK(v.dp_server[i] == -1 || v.dp_server[i] == -2 ||
              (v.dp_server[i] >= 0 && v.dp_server[i] < m));
    for (int j = 0; j < m; j++) {
        CHECK(v.pp_state[j] >= GV_PP_PARITY && v.pp_state[j] <= GV_PP_REBUILDING);
        if (v.pp_state[j] == GV_PP_SERVING)
            CHECK(v.pp_serves[j] >= 0 && v.pp_serves[j] < k);
        else
            CHECK(v.pp_serves[j] == -1);
    }
    CHECK(group_view_leader(&v) >= -1 && group_view_leader(&v) < m);
    /* The version is the first word, a plain decimal of 64 bits. */
    const char *sp = memchr(text, ' ', len);
    CHECK(sp != NULL);
    uint64_t version;
    CHECK(fuzz_u64(text, (size_t)(sp - text), &version));
    CHECK(version == v.version);
    char buf[512];
    size_t n = group_view_format(&v, buf, sizeof(buf));
    CHECK(n < sizeof(buf));
    char *exact = fuzz_copy(buf, n);
    CHECK(group_view_parse(&again, k, m, exact, n) == 0);
    CHECK(memcmp(&again, &v, sizeof(v)) == 0);
    if (!fuzz_has_leading_zero(text, len))
        CHECK(n == len && memcmp(exact, text, len) == 0);
    free(exact);
}

static inline void check_group_view(const char *data, size_t len)
{
    char *text = fuzz_copy(data, len);
    /* k and m as the receiving process has them: the entry counts of the
     * two lists (when the text has them), then fixed ones. */
    const char *sp1 = memchr(text, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - text)) : NULL;
    int k = 4, m = 2;
    if (sp2) {
        k = fuzz_count_entries(sp1 + 1, (size_t)(sp2 - sp1 - 1));
        m = fuzz_count_entries(sp2 + 1, len - (size_t)(sp2 + 1 - text));
    }
    if (k >= 1 && k <= RECOV_MAX_K && m >= 1 && m <= RECOV_MAX_M)
        check_group_view_k_m(text, len, k, m);
    check_group_view_k_m(text, len, 4, 2);
    check_group_view_k_m(text, len, RECOV_MAX_K, RECOV_MAX_M);
    free(text);
}

/* ---- one message, as every receiver sees it ---- */

static inline void check_control(const uint8_t *data, size_t len)
{
    char *text = fuzz_copy(data, len);
    /* The dispatch words: a message goes to one handler at most. */
    int routes = coord_is_engine_message(text, len) + coord_is_pbr_answer(text, len) +
                 coord_is_recovery_answer(text, len);
    CHECK(routes <= 1);
    check_ctl_parse(text, len);
    /* "group <g> <view>" as the data and parity engines take it. */
    if (len > 6 && memcmp(text, "group ", 6) == 0) {
        const char *sp = memchr(text + 6, ' ', len - 6);
        if (sp)
            check_group_view(sp + 1, len - (size_t)(sp + 1 - text));
    }
    /* Any bytes as a `config get cluster` reply stream. */
    check_config_reply(text, len);
    free(text);
}

/* ---- valid messages, for the seed corpora ---- */

/* A two-endpoint map with a numeric and a named host. */
static inline char *seed_map_body(size_t *len)
{
    struct slotmap m;
    struct slotmap_endpoint ep[2];
    memset(&m, 0, sizeof(m));
    memset(ep, 0, sizeof(ep));
    snprintf(ep[0].host, sizeof(ep[0].host), "127.0.0.1");
    ep[0].port = 11211;
    snprintf(ep[1].host, sizeof(ep[1].host), "node-b.example");
    ep[1].port = 11311;
    m.epoch = 7;
    m.nendpoints = 2;
    m.endpoints = ep;
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        m.slot[s] = s < 5000 || s >= 12000 ? 0 : 1;
    return slotmap_encode(&m, len);
}

/* Calls fn(ctx, text, len) for one valid message of every kind of
 * docs/wire-format.md sections 5 and 6. */
static inline void seed_control_messages(void (*fn)(void *, const char *, size_t), void *ctx)
{
    static const char *const fixed[] = {
        "hello 4242 7", "hb 4242 7 10485760", "hb 4242 7 10485760 rec 1 17 4096 69632",
        "hb 4242 7 10485760 reb 3 12 12288", "hb 4242 7 10485760 mig 0 5 9 20480",
        "hb 4242 7 10485760 pbr p 99 0=f 1=d 2=r:3:10:4096",
        "hb 4242 7 10485760 pbr b 2 98 1 0",
        "migrated 9000 8 ok", "migrated 9000 8 failed the destination refused: busy",
        "migrate 9000 127.0.0.1:11411 8", "migrate 1 [::1]:11411 9",
        "group 0 12 -,p1,x,- p,s1,x,b", "group 3 1 - p", "prepare 0 2", "prepared 0 2 1234",
        "truncate 0 2 1200 1", "truncated 0 2", "takeover 0 2 1200", "serving 0 2",
        "rebuild 0 1 3", "rebuild-ready 0 1", "rebuilt 0 1", "rebuild-failed 0 1 3",
        "replica 0 2 1", "copy 0 2",
        "copied 0 2", "handoff 0 2", "resume 0 2", "handed 0 2 1300", "serve 0 2 1300",
        "serving-dp 0 2", "pbr confirm 1", "pbr fence 1", "pbrok fenced 1 0 555 1",
        "pbr follow 1 2", "pbr promote 1 0,2", "pbr promote 1 -", "pbrok serving 1 2 556",
        "pbr drop 1 0", "pbr rebuild 1 0", "pbr rejoin 1 2", "lost parity 1 2000",
        "lost data 0 1750 up", "retire",
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        fn(ctx, fixed[i], strlen(fixed[i]));
    /* The group view and the map from their encoders. */
    struct group_view v;
    group_view_init(&v, 3, 2);
    v.version = 40;
    v.dp_server[1] = 0;
    v.pp_state[0] = GV_PP_SERVING;
    v.pp_serves[0] = 1;
    char view[256], msg[300];
    group_view_format(&v, view, sizeof(view));
    int n = snprintf(msg, sizeof(msg), "group 2 %s", view);
    fn(ctx, msg, (size_t)n);
    size_t blen;
    char *body = seed_map_body(&blen);
    CHECK(body != NULL);
    char *map = malloc(blen + 4);
    CHECK(map != NULL);
    memcpy(map, "map ", 4);
    memcpy(map + 4, body, blen);
    fn(ctx, map, blen + 4);
    free(map);
    free(body);
}

#endif
