/* proto_text.h - memcached's ASCII protocol: parsing and dispatch.
 *
 * text_parse() is pure: given the bytes at the front of a connection's input
 * it says whether a whole request is there and, if so, what it asks for, or
 * which error line memcached would answer.  proto_text_process() runs a
 * parsed request against the engine and formats the replies. */
#ifndef MC_PROTO_TEXT_H
#define MC_PROTO_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"

#define TEXT_KEY_MAX 250
/* The reply to a value not followed by CRLF (text and meta parsers):
 * memcached counts the store in cmd_set all the same. */
#define TEXT_BAD_DATA_CHUNK "CLIENT_ERROR bad data chunk"
#define TEXT_MAX_TOKENS 8         /* non-retrieval commands never need more */
#define TEXT_LINE_MAX 2048        /* a longer line without newline closes the connection */
#define TEXT_GET_LINE_MAX (1u << 20) /* ...unless it is a (long multi-)get */
#define TEXT_READ_CHUNK 16384     /* memcached's read buffer: a longer line (but a
                                     get's) closes the connection */

enum text_cmd {
    TC_NONE = 0,
    TC_GET, TC_GETS, TC_GAT, TC_GATS,
    TC_SET, TC_ADD, TC_REPLACE, TC_APPEND, TC_PREPEND, TC_CAS,
    TC_DELETE, TC_INCR, TC_DECR, TC_TOUCH,
    TC_FLUSH_ALL, TC_VERSION, TC_VERBOSITY, TC_STATS, TC_QUIT, TC_SHUTDOWN,
    TC_ADMIN,       /* "cocytus <words>": engine admin commands */
    TC_CACHE_MEMLIMIT,
    TC_WATCH,
    TC_LRU_CRAWLER, /* only "lru_crawler metadump" is served */
    TC_REFRESH_CERTS /* -Z: read the certificate and key again */
};

enum text_parse_result {
    TP_NEED_MORE,   /* no complete request yet */
    TP_OK,          /* req is complete; consume req->total bytes */
    TP_ERROR,       /* reply req->error (unless noreply), consume req->total,
                       then discard req->swallow more input bytes */
    TP_CLOSE        /* protocol violation: close the connection */
};

struct text_req {
    enum text_cmd cmd;
    size_t total;             /* bytes of the request including any data block */
    const char *error;        /* TP_ERROR: reply line without CRLF */
    size_t swallow;           /* TP_ERROR: data bytes to discard beyond total */
    bool noreply;

    const char *key;          /* first key */
    size_t nkey;
    const char *keys;         /* retrieval: the key list, space separated */
    size_t nkeys_len;
    uint32_t flags;
    int64_t exptime;          /* also gat exptime, touch, flush_all delay */
    int64_t vlen;
    uint64_t cas;
    uint64_t delta;           /* incr/decr; verbosity level */
    const char *data;         /* value bytes (vlen of them) */
    const char *arg;          /* stats: group name (NULL = general); admin: the words */
    size_t narg;
};

/* Parse the request at buf[0..len).  max_item is the largest value the
 * server accepts (beyond it the data block is swallowed with an error). */
enum text_parse_result text_parse(const char *buf, size_t len, size_t max_item,
                                  struct text_req *req);

/* Iterate the keys of a retrieval command: returns false at the end. */
bool text_next_key(const char **p, const char *end, const char **key, size_t *nkey);
/* `lru_crawler metadump <classes>`: the classes argument, or NULL for any
 * other crawler command (ERROR). */
const char *text_metadump_arg(const struct text_req *req, size_t *n);
/* The slab classes an `lru_crawler metadump` argument names (all, hash,
 * or ids 1..63 separated by commas) as a mask, bit c for class c; 0 when
 * one is not a class (memcached's BADCLASS). */
uint64_t text_metadump_classes(const char *arg, size_t n);
/* A stats request's words, split as memcached splits them (on spaces, in
 * line, a copy of the arguments): at most max of them in argv, their
 * number; -1 when the arguments do not fit in cap bytes (ERROR). */
#define TEXT_STATS_LINE 256
#define TEXT_STATS_WORDS 8
int text_stats_words(const struct text_req *req, char *line, size_t cap, char **argv, int max);
/* `stats cachedump <class> <limit>`'s words (argv[0] is "cachedump"):
 * NULL with *cls and *limit set, else the error line memcached answers
 * (without its CRLF). */
const char *text_cachedump_args(int argc, char **argv, uint32_t *cls, uint32_t *limit);

enum conn_parse proto_text_process(struct conn *c, const char *buf, size_t len,
                                   size_t *consumed);

#endif
