/* coord_zklog.h - the ZooKeeper client's log lines, rate-limited by where
 * in the client they come from (coord_zklog.c). */
#ifndef COCYTUS_COORD_ZKLOG_H
#define COCYTUS_COORD_ZKLOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define ZKLOG_WINDOW_MS 30000       /* one line per source location per window */
#define ZKLOG_KEYS 16
#define ZKLOG_KEY_MAX 96
#define ZKLOG_LINE_MAX 4096

/* Which source locations printed when, and how many lines of each were
 * left out since. */
struct zklog_limit {
    struct {
        char key[ZKLOG_KEY_MAX];    /* "ZOO_ERROR@check_events@2985"; "" unused */
        uint64_t shown_ms;
        unsigned dropped;
    } slot[ZKLOG_KEYS];
};

/* One log line at now_ms: true to print it, with *dropped the lines of the
 * same location left out since it last printed; false to leave it out.
 * A line without a "ZOO_<level>@" location always prints. */
bool zklog_admit(struct zklog_limit *lim, const char *line, uint64_t now_ms, unsigned *dropped);

/* A stdio stream for zoo_set_log_stream: the lines written to it go to
 * sink through a zklog_limit.  NULL on failure (then leave the client's
 * log on stderr). */
struct zklog;
struct zklog *zklog_open(FILE *sink);
FILE *zklog_stream(struct zklog *zl);
/* Closes the stream; the client must no longer log to it. */
void zklog_close(struct zklog *zl);

#endif
