/* coord_zklog.c - the ZooKeeper client's log, rate-limited.
 *
 * While no server of the ensemble answers, the C client tries them again
 * every few tens of milliseconds and logs two lines per try (the refused
 * connection, "Delaying connection after exhaustively trying all
 * servers"): about 60 lines a second, 894 in the 15 s a coordinator waits
 * for a session, and a node restarts a coordinator that gave up, so a
 * host cut off from ZooKeeper filled its coordinator log at that rate.
 *
 * Every line the client logs names where it comes from,
 * "<time>:<pid>(<thread>):ZOO_ERROR@check_events@2985: <text>".  That
 * location is the key: a key prints at most once per ZKLOG_WINDOW_MS, and
 * the next line printed for it says how many like it were left out.  A
 * different failure (another location) prints at once.
 *
 * The client's log has no context argument, only a stream
 * (zoo_set_log_stream), so the limiter is a stdio stream of our own
 * (fopencookie) whose cookie is the limiter.  stdio calls its write
 * function with the stream locked, which orders the client's threads. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_zklog.h"

struct zklog {
    FILE *stream;                   /* handed to the client */
    FILE *sink;                     /* where admitted lines go */
    struct zklog_limit lim;
    char line[ZKLOG_LINE_MAX];      /* a line not yet ended */
    size_t len;
};

/* The location part of a client log line, or false if it has none. */
static bool line_key(const char *line, char *key, size_t keylen)
{
    const char *p = strstr(line, ":ZOO_");
    if (p == NULL)
        return false;
    p++;
    const char *end = strstr(p, ": ");
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == 0 || n >= keylen)
        return false;
    memcpy(key, p, n);
    key[n] = '\0';
    return true;
}

/* The slot of key, or a free one, or the one shown longest ago whose
 * window passed; -1 if every slot holds another key still in its window. */
static int find_slot(struct zklog_limit *lim, const char *key, uint64_t now_ms)
{
    int free_slot = -1, oldest = -1;
    for (int i = 0; i < ZKLOG_KEYS; i++) {
        if (strcmp(lim->slot[i].key, key) == 0)
            return i;
        if (lim->slot[i].key[0] == '\0') {
            if (free_slot < 0)
                free_slot = i;
        } else if (now_ms - lim->slot[i].shown_ms >= ZKLOG_WINDOW_MS &&
                   (oldest < 0 || lim->slot[i].shown_ms < lim->slot[oldest].shown_ms)) {
            oldest = i;
        }
    }
    return free_slot >= 0 ? free_slot : oldest;
}

bool zklog_admit(struct zklog_limit *lim, const char *line, uint64_t now_ms, unsigned *dropped)
{
    char key[ZKLOG_KEY_MAX];
    *dropped = 0;
    if (!line_key(line, key, sizeof(key)))
        return true;
    int i = find_slot(lim, key, now_ms);
    if (i < 0)
        return true;   /* too many kinds at once: print rather than forget */
    if (strcmp(lim->slot[i].key, key) != 0) {
        /* a new key, or one whose slot is taken over (more than
         * ZKLOG_KEYS locations at once): that one's count of lines left
         * out is dropped */
        snprintf(lim->slot[i].key, sizeof(lim->slot[i].key), "%s", key);
        lim->slot[i].dropped = 0;
    } else if (now_ms - lim->slot[i].shown_ms < ZKLOG_WINDOW_MS) {
        lim->slot[i].dropped++;
        return false;
    }
    *dropped = lim->slot[i].dropped;
    lim->slot[i].dropped = 0;
    lim->slot[i].shown_ms = now_ms;
    return true;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void line_done(struct zklog *zl)
{
    unsigned dropped;
    zl->line[zl->len] = '\0';
    zl->len = 0;
    if (!zklog_admit(&zl->lim, zl->line, now_ms(), &dropped))
        return;
    if (dropped > 0)
        fprintf(zl->sink, "%s (and %u more like it in the last %d s, not shown)\n", zl->line,
                dropped, ZKLOG_WINDOW_MS / 1000);
    else
        fprintf(zl->sink, "%s\n", zl->line);
    fflush(zl->sink);
}

static ssize_t zklog_write(void *cookie, const char *buf, size_t size)
{
    struct zklog *zl = cookie;
    for (size_t i = 0; i < size; i++) {
        if (buf[i] == '\n') {
            line_done(zl);
        } else {
            zl->line[zl->len++] = buf[i];
            if (zl->len == sizeof(zl->line) - 1)
                line_done(zl);   /* a line this long is cut, not lost */
        }
    }
    return (ssize_t)size;
}

/* At the end, what was left out since each location last printed (a
 * coordinator that gave up on ZooKeeper exits within the window). */
static int zklog_cookie_close(void *cookie)
{
    struct zklog *zl = cookie;
    if (zl->len > 0)
        line_done(zl);
    for (int i = 0; i < ZKLOG_KEYS; i++)
        if (zl->lim.slot[i].dropped > 0)
            fprintf(zl->sink, "ZooKeeper client: %u more lines from %s after the last shown, "
                    "not shown\n", zl->lim.slot[i].dropped, zl->lim.slot[i].key);
    fflush(zl->sink);
    return 0;
}

struct zklog *zklog_open(FILE *sink)
{
    struct zklog *zl = calloc(1, sizeof(*zl));
    if (zl == NULL)
        return NULL;
    zl->sink = sink;
    cookie_io_functions_t io = { .write = zklog_write, .close = zklog_cookie_close };
    zl->stream = fopencookie(zl, "w", io);
    if (zl->stream == NULL) {
        free(zl);
        return NULL;
    }
    setvbuf(zl->stream, NULL, _IOLBF, 0);
    return zl;
}

FILE *zklog_stream(struct zklog *zl)
{
    return zl->stream;
}

void zklog_close(struct zklog *zl)
{
    if (zl == NULL)
        return;
    fclose(zl->stream);
    free(zl);
}
