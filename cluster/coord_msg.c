/* coord_msg.c - the parser of control messages between a server process and
 * the coordinator (coord.h lists them), and the link role a process
 * announces on its control link (both ends must agree on it).
 *
 * A message is one line of text: a verb, single-space separated fields, no
 * line terminator.  Numbers are plain decimals; anything else (a missing or
 * extra field, a sign, an out-of-range slot or port) is refused with a
 * message, so a confused peer is logged rather than obeyed.  A map body and
 * a failure reason are the rest of the line and are taken as they are. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "link.h"
#include "printable.h"

#define CTL_FIELDS_MAX 5
#define CTL_NUMBER_MAX 24       /* digits of a u64 plus room */
#define CTL_LOST_INDEX_MAX 1024 /* a role's index in a group, far above any */

/* The message's words, as views into the payload. */
struct words {
    const char *p[CTL_FIELDS_MAX];
    size_t n[CTL_FIELDS_MAX];
    int count;
    const char *rest;           /* after the last word taken */
    size_t nrest;
};

/* Split up to max words off the front of text; the remainder (after one
 * space) stays in w->rest.  False when a word is empty (two spaces, a
 * leading or trailing space). */
static bool split_words(const char *text, size_t len, int max, struct words *w)
{
    const char *p = text, *end = text + len;
    memset(w, 0, sizeof(*w));
    while (p < end && w->count < max) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *word_end = sp ? sp : end;
        if (word_end == p)
            return false;
        w->p[w->count] = p;
        w->n[w->count] = (size_t)(word_end - p);
        w->count++;
        if (!sp) {
            p = end;
            break;
        }
        p = sp + 1;
        if (p == end)
            return false;   /* trailing space */
    }
    w->rest = p;
    w->nrest = (size_t)(end - p);
    return true;
}

static bool word_is(const struct words *w, int i, const char *s)
{
    return i < w->count && strlen(s) == w->n[i] && memcmp(w->p[i], s, w->n[i]) == 0;
}

/* A decimal u64 of only digits. */
static bool parse_u64(const char *p, size_t n, uint64_t *out)
{
    char buf[CTL_NUMBER_MAX];
    if (n == 0 || n >= sizeof(buf))
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    if (errno)
        return false;
    *out = v;
    return true;
}

static bool parse_word_u64(const struct words *w, int i, uint64_t *out)
{
    return i < w->count && parse_u64(w->p[i], w->n[i], out);
}

static bool parse_slot(const struct words *w, int i, unsigned *out)
{
    uint64_t v;
    if (!parse_word_u64(w, i, &v) || v >= SLOTMAP_SLOTS)
        return false;
    *out = (unsigned)v;
    return true;
}

/* "<host>:<port>", the last colon separating (hosts with a colon are IPv6). */
static bool parse_host_port(const struct words *w, int i, struct ctl_msg *m)
{
    if (i >= w->count)
        return false;
    const char *p = w->p[i];
    size_t n = w->n[i];
    const char *colon = NULL;
    for (size_t k = 0; k < n; k++)
        if (p[k] == ':')
            colon = p + k;
    if (!colon || colon == p)
        return false;
    size_t hl = (size_t)(colon - p);
    uint64_t port;
    if (hl >= sizeof(m->host) || !parse_u64(colon + 1, n - hl - 1, &port) ||
        port < 1 || port > 65535)
        return false;
    memcpy(m->host, p, hl);
    m->host[hl] = '\0';
    m->port = (int)port;
    return true;
}

static int refuse(char *err, size_t errlen, const char *what, const char *payload, size_t len)
{
    char shown[81];
    snprintf(err, errlen, "malformed %s message '%s'", what,
             printable_copy(shown, sizeof(shown), payload, len));
    return -1;
}

/* hello <pid> <epoch> [<incarnation>]: a build before the incarnation
 * sends three words; an incarnation is never 0 (0 stands for "none"). */
static int parse_hello(const struct words *w, struct ctl_msg *m)
{
    uint64_t pid;
    if ((w->count != 3 && w->count != 4) || w->nrest != 0 || !parse_word_u64(w, 1, &pid) ||
        pid > 0x7fffffff || !parse_word_u64(w, 2, &m->epoch) ||
        (w->count == 4 && (!parse_word_u64(w, 3, &m->incarnation) || m->incarnation == 0)))
        return -1;
    m->kind = CTL_HELLO;
    m->pid = (long)pid;
    return 0;
}

static int parse_retire(const struct words *w, struct ctl_msg *m)
{
    if (w->count != 1 || w->nrest != 0)
        return -1;
    m->kind = CTL_RETIRE;
    return 0;
}

static int parse_hb(const struct words *w, struct ctl_msg *m)
{
    uint64_t pid;
    if (w->count != 4 || !parse_word_u64(w, 1, &pid) || pid > 0x7fffffff ||
        !parse_word_u64(w, 2, &m->epoch) || !parse_word_u64(w, 3, &m->rss))
        return -1;
    m->kind = CTL_HB;
    m->pid = (long)pid;
    /* Recovery progress words, if any (coord_recovery.c reads them). */
    m->body = w->nrest ? w->rest : NULL;
    m->body_len = w->nrest;
    return 0;
}

/* migrated <slot> <epoch> ok | migrated <slot> <epoch> failed <why> */
static int parse_migrated(const struct words *w, struct ctl_msg *m)
{
    if (w->count != 4 || !parse_slot(w, 1, &m->slot) || !parse_word_u64(w, 2, &m->epoch))
        return -1;
    m->kind = CTL_MIGRATED;
    if (word_is(w, 3, "ok") && w->nrest == 0) {
        m->ok = true;
        return 0;
    }
    if (!word_is(w, 3, "failed") || w->nrest == 0)
        return -1;
    m->ok = false;
    printable_copy(m->why, sizeof(m->why), w->rest, w->nrest);
    return 0;
}

static int parse_migrate(const struct words *w, struct ctl_msg *m)
{
    if (w->count != 4 || w->nrest != 0 || !parse_slot(w, 1, &m->slot) ||
        !parse_host_port(w, 2, m) || !parse_word_u64(w, 3, &m->epoch))
        return -1;
    m->kind = CTL_MIGRATE;
    return 0;
}

/* lost <role> <index> <down_ms> [up] */
static int parse_lost(const struct words *w, struct ctl_msg *m)
{
    char role[16];
    uint64_t index;
    if (w->nrest == 2 && memcmp(w->rest, "up", 2) == 0)
        m->link_up = true;
    else if (w->nrest != 0)
        return -1;
    if (w->count != 4 || w->n[1] >= sizeof(role) ||
        !parse_word_u64(w, 2, &index) || index >= CTL_LOST_INDEX_MAX ||
        !parse_word_u64(w, 3, &m->down_ms))
        return -1;
    memcpy(role, w->p[1], w->n[1]);
    role[w->n[1]] = '\0';
    if (cluster_role_from_name(role, &m->role) < 0 || m->role == ROLE_PLAIN)
        return -1;
    m->kind = CTL_LOST;
    m->index = (int)index;
    return 0;
}

int ctl_parse(const char *payload, size_t len, struct ctl_msg *m, char *err, size_t errlen)
{
    struct words w;
    memset(m, 0, sizeof(*m));
    /* "map" first: its body holds spaces and newlines, so only the verb is split. */
    if (len >= 4 && memcmp(payload, "map ", 4) == 0) {
        m->kind = CTL_MAP;
        m->body = payload + 4;
        m->body_len = len - 4;
        if (m->body_len == 0)
            return refuse(err, errlen, "map", payload, len);
        return 0;
    }
    if (memchr(payload, '\n', len) || memchr(payload, '\r', len) || memchr(payload, '\0', len) ||
        !split_words(payload, len, 4, &w) || w.count == 0) {
        return refuse(err, errlen, "control", payload, len);
    }
    static const struct {
        const char *verb;
        int (*parse)(const struct words *, struct ctl_msg *);
    } verbs[] = {
        { "hello", parse_hello }, { "hb", parse_hb },
        { "migrated", parse_migrated }, { "migrate", parse_migrate },
        { "lost", parse_lost }, { "retire", parse_retire },
    };
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (!word_is(&w, 0, verbs[i].verb))
            continue;
        if (verbs[i].parse(&w, m) < 0)
            return refuse(err, errlen, verbs[i].verb, payload, len);
        return 0;
    }
    char shown[81];
    snprintf(err, errlen, "unknown control message '%s'",
             printable_copy(shown, sizeof(shown), payload, len));
    return -1;
}

uint8_t coord_link_role(enum cluster_role r)
{
    switch (r) {
    case ROLE_DATA: return LINK_ROLE_DATA;
    case ROLE_PARITY: return LINK_ROLE_PARITY;
    case ROLE_PRIMARY: return LINK_ROLE_PRIMARY;
    case ROLE_BACKUP: return LINK_ROLE_BACKUP;
    default: return LINK_ROLE_PLAIN;
    }
}

bool coord_is_engine_message(const char *payload, size_t len)
{
    static const char *const words[] = { "prepare ", "truncate ", "takeover ", "group ",
                                         "fence ", "rebuild ", "copy ", "handoff ",
                                         "replica ", "serve ", "resume ", "pbr ", "admit ",
                                         "abandon " };
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);
        if (len >= n && memcmp(payload, words[i], n) == 0)
            return true;
    }
    return false;
}

bool coord_is_pbr_answer(const char *payload, size_t len)
{
    return len >= 6 && memcmp(payload, "pbrok ", 6) == 0;
}

bool coord_is_recovery_answer(const char *payload, size_t len)
{
    static const char *const words[] = { "prepared ", "truncated ", "serving ",
                                         "rebuild-ready ", "rebuilt ", "rebuild-failed ",
                                         "copied ", "handed ", "serving-dp ", "copy-failed " };
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);
        if (len >= n && memcmp(payload, words[i], n) == 0)
            return true;
    }
    return false;
}
