/* watch.c - memcached's log streams (watch.h).
 *
 * The hub keeps a short list of watchers and the union of their streams,
 * so that code on the request path asks one bit before it builds a line.
 * Each event becomes one text line, built once and offered to every
 * watcher of its stream; a watcher whose connection will not take it
 * counts it as skipped and says how many before its next line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "urikey.h"
#include "watch.h"

struct watcher {
    struct watcher *next;
    void *conn;
    unsigned streams;
    uint64_t skipped;         /* lines lost since its last line went */
};

/* Longest line: the fixed words, a 250-byte key encoded (750) and room. */
#define WATCH_LINE_MAX 1200
/* "skipped=<count>\n" */
#define WATCH_NOTE_MAX 32

static const struct {
    const char *word;
    unsigned stream;
} stream_words[] = {
    { "fetchers", WATCH_FETCHERS },     { "mutations", WATCH_MUTATIONS },
    { "evictions", WATCH_EVICTIONS },   { "connevents", WATCH_CONNEVENTS },
    { "proxyreqs", WATCH_SILENT },      { "proxyevents", WATCH_SILENT },
    { "proxyuser", WATCH_SILENT },      { "sysevents", WATCH_SILENT },
    { "rawcmds", WATCH_SILENT },
};

void watch_init(struct watch_hub *h, watch_send_fn send)
{
    memset(h, 0, sizeof(*h));
    h->send = send;
}

void watch_destroy(struct watch_hub *h)
{
    while (h->list) {
        struct watcher *w = h->list;
        h->list = w->next;
        free(w);
    }
    h->streams = 0;
    h->watchers = 0;
}

int watch_parse(const char *args, size_t n, unsigned *streams)
{
    const char *p = args, *end = args ? args + n : NULL;
    unsigned want = 0;
    /* memcached takes at most 24 tokens on a line, "watch" among them */
    int words = 0;
    while (p && p < end) {
        while (p < end && *p == ' ')
            p++;
        const char *w = p;
        while (p < end && *p != ' ')
            p++;
        size_t len = (size_t)(p - w);
        if (len == 0)
            break;
        if (++words > 23)
            return -1;
        bool known = false;
        for (size_t i = 0; i < sizeof(stream_words) / sizeof(stream_words[0]); i++) {
            if (strlen(stream_words[i].word) == len && memcmp(stream_words[i].word, w, len) == 0) {
                want |= stream_words[i].stream;
                known = true;
            }
        }
        if (!known)
            return -1;
    }
    *streams = words == 0 ? WATCH_FETCHERS : want;
    return 0;
}

static void recompute_streams(struct watch_hub *h)
{
    h->streams = 0;
    for (struct watcher *w = h->list; w; w = w->next)
        h->streams |= w->streams;
}

enum watch_add_result watch_add(struct watch_hub *h, void *conn, unsigned streams)
{
    if (h->watchers >= WATCH_MAX_WATCHERS)
        return WATCH_TOO_MANY;
    struct watcher *w = calloc(1, sizeof(*w));
    if (!w)
        return WATCH_NO_MEMORY;
    w->conn = conn;
    w->streams = streams;
    w->next = h->list;
    h->list = w;
    h->watchers++;
    h->gid++;                 /* memcached's watcher takes an event id of its own */
    recompute_streams(h);
    return WATCH_ADDED;
}

/* Free the watchers removed while lines were being offered. */
static void sweep_removed(struct watch_hub *h)
{
    struct watcher **pw = &h->list;
    while (*pw) {
        struct watcher *w = *pw;
        if (w->conn == NULL) {
            *pw = w->next;
            free(w);
        } else {
            pw = &w->next;
        }
    }
    h->removed = false;
}

void watch_remove(struct watch_hub *h, void *conn)
{
    for (struct watcher **pw = &h->list; *pw; pw = &(*pw)->next) {
        struct watcher *w = *pw;
        if (w->conn != conn)
            continue;
        h->watchers--;
        if (h->delivering > 0) {
            /* deliver() holds w: it is freed once the offer is over */
            w->conn = NULL;
            w->streams = 0;
            h->removed = true;
        } else {
            *pw = w->next;
            free(w);
        }
        recompute_streams(h);
        return;
    }
}

/* Offer a finished line to every watcher of stream.  After skipping, a
 * watcher gets the count and the line in one piece or neither, so that a
 * connection with room for a short note only does not fill with notes. */
static void deliver(struct watch_hub *h, unsigned stream, const char *line, size_t n)
{
    h->delivering++;
    for (struct watcher *w = h->list; w; w = w->next) {
        if (w->conn == NULL || !(w->streams & stream))
            continue;
        bool taken;
        if (w->skipped > 0) {
            char both[WATCH_NOTE_MAX + WATCH_LINE_MAX];
            int nn = snprintf(both, WATCH_NOTE_MAX, "skipped=%" PRIu64 "\n", w->skipped);
            memcpy(both + nn, line, n);
            taken = h->send(w->conn, both, (size_t)nn + n);
        } else {
            taken = h->send(w->conn, line, n);
        }
        if (taken) {
            w->skipped = 0;
            h->sent++;
        } else {
            w->skipped++;
            h->skipped++;
        }
    }
    if (--h->delivering == 0 && h->removed)
        sweep_removed(h);
}

/* "ts=<sec>.<usec> gid=<id> " with memcached's unpadded microseconds. */
static size_t line_start(struct watch_hub *h, char *line)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    h->written++;
    return (size_t)snprintf(line, WATCH_LINE_MAX, "ts=%lld.%ld gid=%" PRIu64 " ",
                            (long long)tv.tv_sec, (long)tv.tv_usec, ++h->gid);
}

/* " key=<encoded>" appended at line[o]. */
static size_t put_key(char *line, size_t o, const char *key, size_t nkey)
{
    if (nkey > 250)
        nkey = 250;           /* no key is longer; a bound for the buffer */
    memcpy(line + o, "key=", 4);
    o += 4;
    return o + uri_key_encode(line + o, key, nkey);
}

static void finish(struct watch_hub *h, unsigned stream, char *line, size_t o, int n)
{
    if (n < 0)
        return;
    o += (size_t)n;
    if (o >= WATCH_LINE_MAX)
        return;
    deliver(h, stream, line, o);
}

void watch_item_get(struct watch_hub *h, const char *key, size_t nkey, bool found,
                    unsigned clsid, uint32_t size, int cfd)
{
    char line[WATCH_LINE_MAX];
    size_t o = line_start(h, line);
    memcpy(line + o, "type=item_get ", 14);
    o = put_key(line, o + 14, key, nkey);
    int n = snprintf(line + o, WATCH_LINE_MAX - o, " status=%s clsid=%u cfd=%d size=%u\n",
                     found ? "found" : "not_found", found ? clsid : 0u, cfd, found ? size : 0);
    finish(h, WATCH_FETCHERS, line, o, n);
}

void watch_item_store(struct watch_hub *h, const char *key, size_t nkey, const char *status,
                      const char *cmd, uint32_t ttl, unsigned clsid, uint32_t size, int cfd)
{
    char line[WATCH_LINE_MAX];
    size_t o = line_start(h, line);
    memcpy(line + o, "type=item_store ", 16);
    o = put_key(line, o + 16, key, nkey);
    int n = snprintf(line + o, WATCH_LINE_MAX - o,
                     " status=%s cmd=%s ttl=%u clsid=%u cfd=%d size=%u\n", status, cmd, ttl,
                     clsid, cfd, size);
    finish(h, WATCH_MUTATIONS, line, o, n);
}

void watch_eviction(struct watch_hub *h, const char *key, size_t nkey, bool fetched,
                    int64_t ttl, uint32_t idle, unsigned clsid, uint32_t size)
{
    char line[WATCH_LINE_MAX];
    size_t o = line_start(h, line);
    memcpy(line + o, "type=eviction ", 14);
    o = put_key(line, o + 14, key, nkey);
    int n = snprintf(line + o, WATCH_LINE_MAX - o, " fetch=%s ttl=%lld la=%u clsid=%u size=%u\n",
                     fetched ? "yes" : "no", (long long)ttl, idle, clsid, size);
    finish(h, WATCH_EVICTIONS, line, o, n);
}

void watch_conn_event(struct watch_hub *h, bool opened, const char *rip, int rport,
                      const char *transport, const char *reason, int cfd)
{
    char line[WATCH_LINE_MAX];
    size_t o = line_start(h, line);
    int n;
    if (opened)
        n = snprintf(line + o, WATCH_LINE_MAX - o,
                     "type=conn_new rip=%s rport=%d transport=%s cfd=%d\n", rip, rport,
                     transport, cfd);
    else
        n = snprintf(line + o, WATCH_LINE_MAX - o,
                     "type=conn_close rip=%s rport=%d transport=%s reason=%s cfd=%d\n", rip,
                     rport, transport, reason, cfd);
    finish(h, WATCH_CONNEVENTS, line, o, n);
}
