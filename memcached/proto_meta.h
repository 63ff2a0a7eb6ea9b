/* proto_meta.h - memcached 1.6's meta commands (mg ms md ma mn me): parsing.
 *
 * meta_parse() is pure: given the bytes at the front of a connection's
 * input it says whether a whole meta request is there and, if so, what it
 * asks for (command, key decoded from base64 when the b flag is given,
 * every flag with its token in request order, the values of the flags
 * that carry numbers, and the data block of ms), or which error line
 * memcached 1.6.18 answers and how many data bytes it then drops.  It
 * depends on nothing but libc and mcnum.h, so cocytus-proxy can compile it
 * as it is.  The server runs parsed requests in proto_meta_run.c.
 *
 * Usage:
 *
 *     struct meta_req req;            // holds the decoded key: do not copy it
 *     switch (meta_parse(buf, len, item_size_max, &req)) {
 *     case MP_NOT_META:  ...           // another text command: text_parse()
 *     case MP_NEED_MORE: ...           // read more
 *     case MP_CLOSE:     ...           // line too long: close the connection
 *     case MP_ERROR:     reply req.error + "\r\n", consume req.total,
 *                        then drop req.swallow more bytes
 *     case MP_OK:        run req, consume req.total
 *     }
 *
 * Errors follow memcached exactly (docs/compat.md): for mg and ms a wrong
 * flag character or a repeated flag is reported at once, then the numbers
 * of the C D J N R T flags, the M token's length and the base64 key are
 * checked in request order with the last failure reported, then F, the ms
 * mode and the opaque length; md and ma answer "invalid or duplicate flag"
 * for any flag problem.  An ms refused after its size was read drops its
 * data block (swallow); one refused before (a bad key, too many tokens, a
 * bad size) does not, and memcached then reads the data block as a
 * command, as we do. */
#ifndef MC_PROTO_META_H
#define MC_PROTO_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define META_KEY_MAX 250          /* key token, base64 or not */
#define META_MAX_TOKENS 19        /* command, key, ms size, flags: more is an error */
#define META_MAX_FLAGS 17
#define META_OPAQUE_MAX 31        /* longer O tokens are refused */
#define META_LINE_MAX 2048        /* a longer line without a newline closes the connection */
#define META_READ_CHUNK 16384     /* and so does any line longer than memcached's buffer */

enum meta_cmd {
    MC_NONE = 0,
    MC_GET,     /* mg */
    MC_SET,     /* ms */
    MC_DELETE,  /* md */
    MC_ARITH,   /* ma */
    MC_NOOP,    /* mn */
    MC_DEBUG    /* me */
};

enum meta_parse_result {
    MP_NOT_META,  /* the line is not a meta command */
    MP_NEED_MORE, /* no complete request yet */
    MP_OK,        /* req is complete; consume req->total bytes */
    MP_ERROR,     /* reply req->error, consume req->total, then drop req->swallow bytes */
    MP_CLOSE      /* no newline within META_LINE_MAX bytes: close the connection */
};

/* One flag of the request: its character and the token after it (possibly
 * empty), pointing into the request buffer. */
struct meta_flag {
    char flag;
    const char *tok;
    size_t ntok;
};

/* ms modes (M token) */
#define META_MODE_SET 'S'
#define META_MODE_ADD 'E'
#define META_MODE_APPEND 'A'
#define META_MODE_PREPEND 'P'
#define META_MODE_REPLACE 'R'
/* ma modes */
#define META_MODE_INCR 'I'
#define META_MODE_DECR 'D'

struct meta_req {
    enum meta_cmd cmd;
    size_t total;             /* bytes of the request including any data block */
    const char *error;        /* MP_ERROR: the reply line without CRLF */
    size_t swallow;           /* MP_ERROR: data bytes to drop beyond total */
    bool too_large;           /* MP_ERROR of ms: the value is over the item size limit
                               * (memcached then also drops the key's current value) */

    const char *key;          /* the key: the decoded bytes with b */
    size_t nkey;
    const char *key_token;    /* the key token as sent */
    size_t nkey_token;
    bool base64;              /* b: key_token is the base64 form of key */

    int nflags;               /* flags in request order (replies follow it) */
    struct meta_flag flags[META_MAX_FLAGS];
    uint64_t has;             /* meta_bit(c) for every flag c present */

    /* Values of the flags that carry one; meaningful when the flag is there. */
    int64_t ttl;              /* T: new TTL (memcached's exptime rules) */
    int64_t vivify_ttl;       /* N: mg/ma create on miss with this TTL */
    int64_t recache_ttl;      /* R: mg wins the recache below this TTL */
    uint32_t client_flags;    /* F */
    uint64_t cas;             /* C: compare cas */
    uint64_t delta;           /* D: ma delta, 1 without D */
    uint64_t initial;         /* J: ma initial value, 0 without J */
    char mode;                /* M: as sent ('I' for '+' and 'D' for '-' in ma);
                               * 0 without M */
    const char *opaque;       /* O: token to echo (NULL without O) */
    size_t nopaque;
    bool opaque_too_long;     /* mg and ma: the O token is over META_OPAQUE_MAX; memcached
                               * applies the ma (the mg's lookup, N and the flags
                               * before the O) and then answers "CLIENT_ERROR opaque
                               * token too long" (unless the ma itself failed with an
                               * error line) */

    int64_t vlen;             /* ms: data block length */
    const char *data;         /* ms: the data block (vlen bytes, CRLF not included) */

    char keybuf[META_KEY_MAX + 1];   /* the decoded key lives here */
};

static inline uint64_t meta_bit(char c)
{
    return c >= 'A' && c <= 'z' ? (uint64_t)1 << (c - 'A') : 0;
}

static inline bool meta_has(const struct meta_req *r, char c)
{
    return (r->has & meta_bit(c)) != 0;
}

/* Is buf[0..len) (a token) one of the meta command names? */
bool meta_is_command(const char *tok, size_t len);

/* Parse the request at buf[0..len).  max_item is the item size limit (-I):
 * an ms whose value cannot fit is refused with its data dropped. */
enum meta_parse_result meta_parse(const char *buf, size_t len, size_t max_item,
                                  struct meta_req *req);

/* The same for a request whose line is known: line[0..nline) without its
 * line ending, line_total bytes with it; more bytes (the data block of ms)
 * follow in buf, which starts at line and holds len bytes. */
enum meta_parse_result meta_parse_line(const char *buf, size_t len, size_t nline,
                                       size_t line_total, size_t max_item,
                                       struct meta_req *req);

/* Standard base64 (with padding) of in[0..n) into out; returns the length
 * (4 * ceil(n / 3) bytes; no NUL is written). */
size_t meta_base64_encode(const char *in, size_t n, char *out);

/* Decodes base64 in[0..n) into out (room for 3 * n / 4 bytes) as
 * memcached does: n a multiple of 4, the first padded quad ends the key.
 * Returns the length, or -1. */
long meta_base64_decode(const char *in, size_t n, char *out);

#endif
