/* fuzz_meta.c - libFuzzer target for meta_parse(), the pure parser of
 * memcached 1.6's meta commands (mg ms md ma mn me), which both the server
 * and cocytus-proxy run on client bytes.
 *
 * Each input is parsed from an exact-size heap copy (ASan sees any read
 * past the end) and the answer is checked against proto_meta.h's promises:
 * every pointer of a complete request lies in the input (the base64-decoded
 * key in the request's own buffer), the counts stay within their limits, a
 * request is never complete before its last byte, and bytes after a
 * complete request never change its answer.  The item limit comes from the
 * input's first byte, so that "too large" and its dropped data block are
 * reachable.  Build and run with scripts/fuzz. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_meta.h"
#include "fuzz_util.h"

#define SAMPLED_PREFIXES 32     /* prefixes parsed per input besides the edges */

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz_meta: invariant failed: %s (%s:%d)\n", #cond,  \
                    __FILE__, __LINE__);                                         \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* What one parse said, comparable across parses of different copies. */
struct outcome {
    enum meta_parse_result r;
    enum meta_cmd cmd;
    size_t total;
    size_t swallow;
    const char *error;   /* static string, compared by content */
};

static bool complete(enum meta_parse_result r)
{
    return r == MP_OK || r == MP_ERROR;
}

static bool same_outcome(const struct outcome *a, const struct outcome *b)
{
    if (a->r != b->r)
        return false;
    if (!complete(a->r))
        return true;
    if (a->cmd != b->cmd || a->total != b->total || a->swallow != b->swallow)
        return false;
    return a->r == MP_OK || strcmp(a->error, b->error) == 0;
}

static bool within(const char *p, size_t n, const char *buf, size_t len)
{
    return p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

/* Checks a complete request of buf[0..len) on its own terms. */
static void check_request(const char *buf, size_t len, enum meta_parse_result r,
                          const struct meta_req *q)
{
    const char *nl = memchr(buf, '\n', len);
    CHECK(nl != NULL);
    size_t line = (size_t)(nl - buf) + 1;
    CHECK(q->total >= line && q->total <= len);

    if (r == MP_ERROR) {
        CHECK(q->error != NULL);
        CHECK(strncmp(q->error, "CLIENT_ERROR ", 13) == 0 ||
              strncmp(q->error, "SERVER_ERROR ", 13) == 0 || strcmp(q->error, "ERROR") == 0);
        CHECK(strpbrk(q->error, "\r\n") == NULL);
        return;
    }

    CHECK(q->cmd != MC_NONE);
    CHECK(q->nflags >= 0 && q->nflags <= META_MAX_FLAGS);
    for (int i = 0; i < q->nflags; i++) {
        CHECK(meta_has(q, q->flags[i].flag));
        CHECK(q->flags[i].ntok == 0 || within(q->flags[i].tok, q->flags[i].ntok, buf, line));
    }
    if (q->cmd != MC_NOOP) {
        CHECK(q->nkey >= 1 && q->nkey <= META_KEY_MAX);
        CHECK(within(q->key_token, q->nkey_token, buf, line));
        if (q->base64)
            CHECK(within(q->key, q->nkey, q->keybuf, sizeof(q->keybuf)));
        else
            CHECK(q->key == q->key_token && q->nkey == q->nkey_token);
    }
    if (q->opaque != NULL)
        CHECK(q->nopaque <= META_OPAQUE_MAX + 0u || q->opaque_too_long);
    if (q->opaque != NULL && q->nopaque > 0)
        CHECK(within(q->opaque, q->nopaque, buf, line));
    if (q->cmd == MC_SET) {
        /* The data block follows the line and ends in CRLF. */
        CHECK(q->vlen >= 0);
        CHECK(q->data == buf + line);
        CHECK(q->total == line + (size_t)q->vlen + 2);
        CHECK(q->data[q->vlen] == '\r' && q->data[q->vlen + 1] == '\n');
    } else {
        CHECK(q->total == line);
    }
}

/* Parses an exact-size heap copy of data[0..len) and checks the result. */
static struct outcome parse_copy(const uint8_t *data, size_t len, size_t max_item)
{
    char *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    if (len)
        memcpy(buf, data, len);
    struct meta_req *q = malloc(sizeof(*q));
    CHECK(q != NULL);
    memset(q, 0xa5, sizeof(*q));    /* nothing may rely on a zeroed request */
    enum meta_parse_result r = meta_parse(buf, len, max_item, q);
    CHECK(r == MP_NOT_META || r == MP_NEED_MORE || r == MP_OK || r == MP_ERROR ||
          r == MP_CLOSE);
    struct outcome o = { r, MC_NONE, 0, 0, NULL };
    if (complete(r)) {
        check_request(buf, len, r, q);
        o.cmd = q->cmd;
        o.total = q->total;
        o.swallow = r == MP_ERROR ? q->swallow : 0;
        o.error = r == MP_ERROR ? q->error : NULL;
    } else if (r == MP_CLOSE) {
        /* Only a line that cannot end within the limits closes. */
        const char *nl = memchr(buf, '\n', len);
        CHECK(nl ? (size_t)(nl - buf) + 1 > META_LINE_MAX : len > META_LINE_MAX);
    }
    free(q);
    free(buf);
    return o;
}

/* A prefix of p bytes of an input whose full answer is full. */
static void check_prefix(const uint8_t *data, size_t p, size_t max_item,
                         const struct outcome *full)
{
    struct outcome o = parse_copy(data, p, max_item);
    if (!complete(full->r))
        return;
    if (p >= full->total) {
        /* Bytes after a complete request never change its answer. */
        CHECK(same_outcome(&o, full));
    } else {
        /* Nothing is acted on before its last byte arrived. */
        CHECK(!complete(o.r));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* The first byte picks the item limit: tiny, small or memcached's 1 MB. */
    static const size_t limits[] = { 16, 64, 1024, 1024 * 1024 };
    size_t max_item = limits[data[0] % 4];
    data++;
    size--;

    struct outcome full = parse_copy(data, size, max_item);
    uint64_t seed = hash_input(data, size);
    check_prefix(data, 0, max_item, &full);
    if (size > 0)
        check_prefix(data, size - 1, max_item, &full);
    if (complete(full.r) && full.total > 0) {
        check_prefix(data, full.total - 1, max_item, &full);
        check_prefix(data, full.total, max_item, &full);
    }
    for (int i = 0; i < SAMPLED_PREFIXES && size > 1; i++)
        check_prefix(data, (size_t)(mix(&seed) % size), max_item, &full);
    return 0;
}
