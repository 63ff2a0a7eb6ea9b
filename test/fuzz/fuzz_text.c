/* fuzz_text.c - libFuzzer target for text_parse(), the pure ASCII-protocol
 * parser.  Each input is parsed as a connection's buffered bytes and the
 * result is checked against what proto_text.h promises: consumed bytes never
 * exceed the input, pointers stay inside it, every prefix of a complete
 * request is incomplete, more bytes never change a complete answer, and the
 * input parses to the same requests however it is split into reads.  Every
 * parse gets an exact-size heap copy so ASan sees any read past the end.
 * Build and run with scripts/fuzz. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_text.h"
#include "fuzz_util.h"

#define FULL_PREFIX_SWEEP 512   /* inputs up to this long: parse every prefix */
#define SAMPLED_PREFIXES 24     /* longer inputs: this many extra prefixes */
#define SMALL_ITEM_MAX 64       /* a tiny item limit, so "too large" is reachable */

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz_text: invariant failed: %s (%s:%d)\n", #cond,  \
                    __FILE__, __LINE__);                                         \
            abort();                                                             \
        }                                                                        \
    } while (0)

/* What one parse said, comparable across parses of different copies. */
struct outcome {
    enum text_parse_result r;
    enum text_cmd cmd;
    size_t total;
    size_t swallow;
    const char *error;   /* static string, compared by content */
};

static bool same_outcome(const struct outcome *a, const struct outcome *b)
{
    if (a->r != b->r)
        return false;
    if (a->r == TP_NEED_MORE || a->r == TP_CLOSE)
        return true;
    if (a->cmd != b->cmd || a->total != b->total || a->swallow != b->swallow)
        return false;
    if (a->r == TP_ERROR)
        return strcmp(a->error, b->error) == 0;
    return true;
}

static bool within(const char *p, size_t n, const char *buf, size_t len)
{
    return p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

static bool is_storage(enum text_cmd cmd)
{
    return cmd == TC_SET || cmd == TC_ADD || cmd == TC_REPLACE || cmd == TC_APPEND ||
           cmd == TC_PREPEND || cmd == TC_CAS;
}

static bool is_retrieval(enum text_cmd cmd)
{
    return cmd == TC_GET || cmd == TC_GETS || cmd == TC_GAT || cmd == TC_GATS;
}

/* Does the line's first word name a storage command?  (Independent of what
 * text_parse leaves in req when it answers NEED_MORE.) */
static bool line_is_storage(const char *buf, size_t line)
{
    static const char *const words[] = { "set", "add", "replace", "append", "prepend", "cas" };
    size_t i = 0;
    while (i < line && buf[i] == ' ')
        i++;
    size_t n = 0;
    while (i + n < line && buf[i + n] != ' ' && buf[i + n] != '\r' && buf[i + n] != '\n')
        n++;
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        if (strlen(words[w]) == n && memcmp(buf + i, words[w], n) == 0)
            return true;
    }
    return false;
}

static void check_key(const char *key, size_t nkey, const char *buf, size_t line)
{
    CHECK(key != NULL);
    CHECK(nkey >= 1 && nkey <= TEXT_KEY_MAX);
    CHECK(within(key, nkey, buf, line));
    CHECK(memchr(key, ' ', nkey) == NULL);
    CHECK(memchr(key, '\n', nkey) == NULL);
}

/* Checks one parse of buf[0..len) on its own terms. */
static void check_parse(const char *buf, size_t len, size_t max_item,
                        enum text_parse_result r, const struct text_req *q)
{
    const char *nl = memchr(buf, '\n', len);
    size_t line = nl ? (size_t)(nl - buf) + 1 : 0;

    switch (r) {
    case TP_NEED_MORE:
        if (nl) {
            /* Only a storage command waits beyond its line, for its data. */
            CHECK(line_is_storage(buf, line));
        } else {
            CHECK(len <= TEXT_GET_LINE_MAX);
        }
        return;
    case TP_CLOSE:
        /* Only an overlong line closes the connection. */
        CHECK(nl ? line > TEXT_LINE_MAX : len > TEXT_LINE_MAX);
        return;
    case TP_ERROR:
        CHECK(nl != NULL);
        CHECK(q->error != NULL);
        CHECK(strncmp(q->error, "ERROR", 5) == 0 || strncmp(q->error, "CLIENT_ERROR ", 13) == 0 ||
              strncmp(q->error, "SERVER_ERROR ", 13) == 0);
        CHECK(strpbrk(q->error, "\r\n") == NULL);
        CHECK(q->total >= line && q->total <= len);
        if (q->total != line) {
            /* Only a data block with a bad terminator is consumed with its line. */
            CHECK(strcmp(q->error, "CLIENT_ERROR bad data chunk") == 0);
            CHECK(is_storage(q->cmd));
            CHECK(q->vlen >= 0 && q->total == line + (size_t)q->vlen + 2);
        }
        if (q->swallow > 0)
            CHECK(q->total == line);
        return;
    case TP_OK:
        break;
    default:
        CHECK(!"text_parse returned no known result");
    }

    CHECK(nl != NULL);
    CHECK(q->cmd != TC_NONE);
    CHECK(q->total >= line && q->total <= len);
    if (is_storage(q->cmd)) {
        check_key(q->key, q->nkey, buf, line);
        CHECK(q->vlen >= 0 && (uint64_t)q->vlen <= max_item);
        CHECK(q->total == line + (size_t)q->vlen + 2);
        CHECK(q->data == buf + line);
        CHECK(q->data[q->vlen] == '\r' && q->data[q->vlen + 1] == '\n');
        return;
    }
    CHECK(q->total == line);
    if ((q->cmd == TC_GAT || q->cmd == TC_GATS) && q->nkeys_len == 0) {
        /* "gat <exptime>" without a key (or with the line cut by a NUL
         * before it): memcached answers an empty END. */
        CHECK(q->key == NULL && q->nkey == 0);
        CHECK(within(q->keys, 0, buf, line));
    } else if (is_retrieval(q->cmd)) {
        check_key(q->key, q->nkey, buf, line);
        CHECK(within(q->keys, q->nkeys_len, buf, line));
        const char *p = q->keys, *end = q->keys + q->nkeys_len, *key;
        size_t nkey, count = 0;
        while (text_next_key(&p, end, &key, &nkey)) {
            check_key(key, nkey, buf, line);
            CHECK(p <= end);
            count++;
            CHECK(count <= q->nkeys_len);
        }
        CHECK(count >= 1);
    } else if (q->cmd == TC_DELETE || q->cmd == TC_INCR || q->cmd == TC_DECR ||
               q->cmd == TC_TOUCH) {
        check_key(q->key, q->nkey, buf, line);
    } else if ((q->cmd == TC_STATS || q->cmd == TC_ADMIN) && q->arg != NULL) {
        CHECK(within(q->arg, q->narg, buf, line));
    }
    if (q->cmd == TC_ADMIN)
        CHECK(q->arg != NULL && q->narg > 0);
}

/* Parses an exact-size heap copy of data[0..len) and checks the result. */
static struct outcome parse_copy(const uint8_t *data, size_t len, size_t max_item)
{
    char *buf = malloc(len ? len : 1);
    CHECK(buf != NULL);
    if (len)
        memcpy(buf, data, len);
    struct text_req q;
    enum text_parse_result r = text_parse(buf, len, max_item, &q);
    check_parse(buf, len, max_item, r, &q);
    struct outcome o = { r, q.cmd, q.total, q.swallow, q.error };
    if (r != TP_OK && r != TP_ERROR)
        o.cmd = TC_NONE;
    free(buf);
    return o;
}

/* The answer for a prefix of p bytes of an input whose full answer is full. */
static void check_prefix(const uint8_t *data, size_t p, size_t max_item,
                         const struct outcome *full)
{
    struct outcome o = parse_copy(data, p, max_item);
    bool complete = full->r == TP_OK || full->r == TP_ERROR;
    if (complete && p >= full->total) {
        /* Bytes after a complete request never change its answer. */
        CHECK(same_outcome(&o, full));
        return;
    }
    /* A prefix of an incomplete or not yet complete request is incomplete;
     * the one exception is a line already too long without its newline. */
    bool long_line = memchr(data, '\n', p) == NULL && p > TEXT_LINE_MAX;
    CHECK(o.r == TP_NEED_MORE || (o.r == TP_CLOSE && long_line));
}

/* Feeds data to the parser as a connection would: received in chunks of
 * the given sizes (chunk == 0: one read of everything), consuming whole
 * requests and skipping swallowed bytes.  Records each answer; stops at
 * TP_CLOSE.  Returns the number of outcomes written to ev. */
static size_t run_stream(const uint8_t *data, size_t len, size_t max_item, uint64_t seed,
                         int chunking, struct outcome *ev, size_t cap, size_t *close_at)
{
    size_t pos = 0, recv = 0, swallow = 0, n = 0;
    *close_at = SIZE_MAX;
    while (recv < len) {
        size_t chunk;
        if (chunking == 0)
            chunk = len;
        else if (chunking == 1)
            chunk = 1;
        else
            chunk = 1 + mix(&seed) % (mix(&seed) % 2 ? 7 : 600);
        recv = chunk >= len - recv ? len : recv + chunk;
        for (;;) {
            if (swallow > 0) {
                size_t skip = recv - pos < swallow ? recv - pos : swallow;
                pos += skip;
                swallow -= skip;
                if (swallow > 0)
                    break;
                continue;
            }
            if (pos == recv)
                break;
            struct outcome o = parse_copy(data + pos, recv - pos, max_item);
            if (o.r == TP_NEED_MORE)
                break;
            CHECK(n < cap);
            ev[n++] = o;
            if (o.r == TP_CLOSE) {
                *close_at = pos;
                return n;
            }
            CHECK(o.total >= 1 && o.total <= recv - pos);
            pos += o.total;
            swallow += o.swallow;
        }
    }
    return n;
}

/* Whole input in one read versus the same bytes split into many reads. */
static void check_splits(const uint8_t *data, size_t len, size_t max_item, int chunking)
{
    size_t cap = len + 1;
    struct outcome *one = calloc(cap, sizeof(*one));
    struct outcome *split = calloc(cap, sizeof(*split));
    CHECK(one != NULL && split != NULL);
    size_t close_one, close_split;
    size_t n1 = run_stream(data, len, max_item, 0, 0, one, cap, &close_one);
    size_t n2 = run_stream(data, len, max_item, hash_input(data, len), chunking, split, cap,
                           &close_split);
    /* Up to a close, both see the same requests. */
    size_t agreed = n2 - (close_split != SIZE_MAX ? 1 : 0);
    CHECK(agreed <= n1);
    for (size_t i = 0; i < agreed; i++)
        CHECK(same_outcome(&one[i], &split[i]));
    if (close_split == SIZE_MAX) {
        /* Without a close, the same requests and the same end state. */
        CHECK(n1 == n2 && close_one == SIZE_MAX);
    } else if (!(n1 == n2 && close_one == close_split)) {
        /* A split read may see an overlong line without its newline where
         * one read saw the whole line; closing there is memcached's
         * behaviour too.  The line must really be that long. */
        size_t rest = len - close_split;
        size_t look = rest < TEXT_LINE_MAX + 1 ? rest : TEXT_LINE_MAX + 1;
        CHECK(rest > TEXT_LINE_MAX);
        CHECK(memchr(data + close_split, '\n', look) == NULL);
    }
    free(one);
    free(split);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    const size_t limits[] = { 1u << 20, (len * 7) % SMALL_ITEM_MAX, 0 };
    for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
        size_t max_item = limits[l];
        struct outcome full = parse_copy(data, len, max_item);

        if (l == 0 || l == 1) {
            if (len <= FULL_PREFIX_SWEEP) {
                for (size_t p = 0; p < len; p++)
                    check_prefix(data, p, max_item, &full);
            } else {
                uint64_t seed = hash_input(data, len);
                size_t picks[SAMPLED_PREFIXES + 4] = { 0, 1, len - 1, len / 2 };
                for (int i = 4; i < SAMPLED_PREFIXES + 4; i++)
                    picks[i] = mix(&seed) % len;
                if (full.r == TP_OK || full.r == TP_ERROR) {
                    picks[4] = full.total - 1;
                    picks[5] = full.total < len ? full.total : len - 1;
                }
                for (int i = 0; i < SAMPLED_PREFIXES + 4; i++)
                    check_prefix(data, picks[i], max_item, &full);
            }
        }

        /* An incomplete request with its line in is a storage command waiting
         * for at most max_item + 2 data bytes: add them and it must complete. */
        if (full.r == TP_NEED_MORE && memchr(data, '\n', len) != NULL && max_item < 4096) {
            size_t more = max_item + 2;
            uint8_t *ext = malloc(len + more);
            CHECK(ext != NULL);
            memcpy(ext, data, len);
            memset(ext + len, 'x', more);
            struct outcome o = parse_copy(ext, len + more, max_item);
            CHECK(o.r != TP_NEED_MORE);
            free(ext);
        }

        check_splits(data, len, max_item, 2);
        if (len <= FULL_PREFIX_SWEEP && l == 0)
            check_splits(data, len, max_item, 1);
    }
    return 0;
}
