/* conn.h - client connections and ordered response slots.
 *
 * A connection reads requests into one growable buffer and lets its protocol
 * (text or binary, chosen by the first byte) consume whole requests from it.
 * Each request gets a response slot (struct resp) appended to the
 * connection's queue; replies leave strictly in slot order, so an engine may
 * finish a write later (after replicas acknowledge) while later slots wait.
 * Value bytes returned by an engine are sent without copying: the slot keeps
 * the engine's handle and releases it once the bytes are written.
 *
 * A read that follows a mutation still in flight on the same connection is
 * held back until that mutation completes, so a connection always observes
 * its own writes; mutations themselves pipeline. */
#ifndef MC_CONN_H
#define MC_CONN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "engine.h"

struct server;
struct conn;
struct resp;
struct mcsasl;

/* One piece of a reply: either bytes in the slot's own buffer (ref == NULL,
 * at offset off) or borrowed engine memory (ref != NULL) released by
 * engine->release(handle) once written. */
struct out_seg {
    const char *ref;
    uint32_t off;
    uint32_t len;
    void *handle;
    bool transient;         /* ref is valid until the event loop runs again */
    bool copied;            /* ref is our own copy of transient bytes (handle) */
};

typedef void (*resp_complete_fn)(struct resp *r, const struct eng_result *res);

struct resp {
    struct resp *next;
    struct conn *c;
    bool done;              /* reply complete; may be sent once all earlier slots are */
    bool pending;           /* waiting for an engine completion */
    bool marked;            /* pending when a slot move began (conn_mark_inflight) */

    /* Copied reply bytes. */
    char *buf;
    uint32_t buflen, bufcap;
    char ibuf[192];

    struct out_seg *segs;
    uint32_t nsegs, segcap;
    struct out_seg isegs[4];

    /* Protocol scratch space kept across an asynchronous completion. */
    int cmd;                /* protocol's own command code */
    bool noreply;           /* text noreply / binary quiet: suppress the reply */
    uint8_t opcode;         /* binary */
    uint32_t opaque;        /* binary */
    uint64_t arg;           /* free for the protocol */
    int mop;                /* engine op of the mutation (for counting); -1: none */
    bool meta_delete;       /* an md: a wrong C (EXISTS) is a delete miss, and so is an
                             * invalidation (I) that finds nothing (memcached's) */
    uint32_t scratch;       /* buf[0..scratch): protocol bytes that are never sent */
    uint64_t seq;           /* order of the slot on its connection */
    uint64_t wkey;          /* pending mutation: hash of its key (conn_key_writes_inflight) */
    bool wall;              /* pending mutation without a key (flush_all): every read waits */
    bool dropped;           /* its reply is dropped (conn_discard_unflushed) */
    resp_complete_fn complete;
    struct watch_store *watch;  /* a store to log once it completes ("watch mutations") */
};

/* ---- Used by protocol code ---- */

/* Append a new empty slot at the tail of the connection's queue. */
struct resp *conn_resp_new(struct conn *c);
/* Copy bytes / formatted text into the slot. */
void resp_add(struct resp *r, const void *p, size_t n);
void resp_str(struct resp *r, const char *s);   /* s, without its NUL */
void resp_printf(struct resp *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Send engine memory without copying; release(handle) after it is written.
 * handle may be NULL when the memory lives at least as long as the slot. */
void resp_add_ref(struct resp *r, const char *p, size_t n, void *handle);
/* Send a read's value (engine memory, copied only if it cannot leave
 * before control returns to the event loop: eng_value.transient). */
void resp_add_value(struct resp *r, const struct eng_value *v, size_t n);
/* Mark the slot complete. */
void resp_done(struct resp *r);
/* Scratch space of n bytes kept in the slot until it is recycled and never
 * sent: what a completion needs of a request whose bytes are gone.  Call
 * before adding reply bytes; resp_scratch() finds it again (the address
 * may change when reply bytes are added). */
void *resp_scratch_reserve(struct resp *r, size_t n);
void *resp_scratch(struct resp *r);

/* Run a mutation for slot r.  When the engine completes, complete(r, res)
 * formats the reply (or leaves the slot empty under noreply) and the slot is
 * marked done; this happens either before conn_mutate returns or later from
 * the event loop.  Counts the generic stats (cmd_set, hits, misses...). */
void conn_mutate(struct conn *c, struct resp *r, const struct eng_mutation *m,
                 resp_complete_fn complete);
/* The same for a write the client did not ask for (dropping the key of a
 * refused too-large set, the add of an mg that vivifies): memcached counts
 * none of them. */
void conn_mutate_uncounted(struct conn *c, struct resp *r, const struct eng_mutation *m,
                           resp_complete_fn complete);

/* Reads: look up key through the engine, counting get hits/misses. */
eng_status conn_get(struct conn *c, const char *key, size_t nkey,
                    struct eng_value *out, struct eng_result *res);
/* conn_get and conn_get_ex counting nothing: memcached counts a gat as a
 * touch, not a get (its touch counts it), and an mg with T that hits as a
 * touch. */
eng_status conn_lookup(struct conn *c, const char *key, size_t nkey,
                       struct eng_value *out, struct eng_result *res);
eng_status conn_lookup_ex(struct conn *c, const char *key, size_t nkey, unsigned opts,
                          struct eng_value *out, struct eng_result *res);
/* cmd_get and get_hits or get_misses for a read's status. */
void conn_count_get(struct conn *c, eng_status st);
/* The same with the engine's get_ex (meta commands): marks, fetched and
 * idle are filled (zero when the engine has no get_ex); counted as a get
 * unless opts has ENG_GET_PEEK. */
eng_status conn_get_ex(struct conn *c, const char *key, size_t nkey, unsigned opts,
                       struct eng_value *out, struct eng_result *res);
/* Count a touch/gat hit or miss (the touch itself goes through conn_mutate). */

/* True when a mutation of this connection is still in flight: a protocol
 * must not start a read that depends on every key (stats) now (return
 * CONN_PARSE_BLOCKED instead). */
bool conn_writes_inflight(const struct conn *c);
/* True when a mutation of this connection that may change key is still in
 * flight (one of key, by hash, or one without a key such as flush_all): a
 * read of key must wait for it (CONN_PARSE_BLOCKED), a read of another key
 * need not.  The connection parses again once its writes completed. */
bool conn_key_writes_inflight(const struct conn *c, const char *key, size_t nkey);
/* Before a read of key is served: true when the engine cannot serve it yet
 * (a recovery process rebuilding the value's units).  The protocol then
 * returns CONN_PARSE_BLOCKED without consuming the request; the connection
 * parses it again once the engine is ready. */
bool conn_read_waits(struct conn *c, const char *key, size_t nkey);

struct engine *conn_engine(const struct conn *c);
struct server *conn_server(const struct conn *c);

/* Ask the connection to close once queued replies are written. */
void conn_close_after_write(struct conn *c);
/* Close now (protocol violation that memcached answers by closing). */
void conn_close_now(struct conn *c);
/* Ask the server to shut down (the "shutdown" command, when enabled). */
void conn_request_shutdown(struct conn *c);

/* Set the connection to skip the next n input bytes (the data block of a
 * rejected oversized request) without buffering them. */
void conn_swallow(struct conn *c, size_t n);

/* ---- Admin authentication ("cocytus auth", proto_text.c) ---- */

struct auth_admin;
/* The connection's handshake state (nonce issued, secret proved). */
struct auth_admin *conn_admin_auth(struct conn *c);
/* Whether the peer proved the cluster secret on this connection. */
bool conn_is_admin(const struct conn *c);
/* "host:port" of the peer, for logs ("?" when unknown); returns buf. */
const char *conn_peer_name(const struct conn *c, char *buf, size_t cap);
/* true the first time it is asked on this connection: log one refusal per
 * connection, so a client repeating a refused command cannot fill the log. */
bool conn_first_refusal(struct conn *c);

/* ---- when replies are written: memcached's timing ----
 *
 * memcached writes the replies it has when it runs out of complete
 * requests, and at once after get, gets, gat, gats and mn (binary: noop).
 * While it waits for the rest of a data block (or drops one that was
 * refused) it writes nothing more, and a protocol violation that closes
 * the connection (a line too long, an HTTP request, a bad binary magic)
 * drops the replies it had not written.  A client sees the difference only
 * when it stops inside a data block or breaks the protocol; we follow it so
 * that even then the bytes are memcached's. */

/* The replies queued so far are final: memcached writes them here.  We
 * write them once the batch of input is parsed (conn.c), one system call
 * for many pipelined gets. */
void conn_flush_point(struct conn *c);
/* Writes now the final replies that wait for the end of the batch: called
 * before a request whose outcome depends on whether an earlier reply
 * still holds its item (incr/decr, ma: written in place only when nobody
 * does), so that it sees what memcached, which wrote them, sees. */
void conn_write_final(struct conn *c);
/* The replies up to and including slot r are written now (binary error
 * replies, which memcached writes at once). */
void conn_flush_through(struct resp *r);
/* Called by a protocol that returns CONN_PARSE_NEED_MORE inside a data
 * block (or a binary body): hold replies after the last flush point. */
void conn_hold_output(struct conn *c);
/* Close the connection, dropping replies after the last flush point
 * (return CONN_PARSE_CLOSE after calling it). */
void conn_close_discard(struct conn *c);
/* A protocol that sees len bytes without a newline: may more of the line
 * still come in what memcached's read buffer would already hold (our read
 * stopped short of it)?  Then it waits instead of closing for a line too
 * long (difftest seed 1414 cases 7503, 7648). */
bool conn_input_may_grow(const struct conn *c, size_t len);
/* Are there replies after the last flush point (memcached's "watch"
 * refuses to start behind them)? */
bool conn_has_unflushed(const struct conn *c);
/* Drop the replies after the last flush point (memcached does when a
 * retrieval command has a bad key); mutations still run. */
void conn_discard_unflushed(struct conn *c);

/* A reply written a piece at a time (lru_crawler metadump), so that a large
 * one neither holds the event loop nor sits in memory whole: step adds the
 * next piece to slot r and returns true when that was the last.  The
 * connection parses no requests meanwhile (input waits unread), is not
 * closed by an idle timeout or the client's end of input before the last
 * piece, and asks for a piece once the socket took all it could and less
 * than CONN_STREAM_LOW bytes are queued, at most one per event-loop pass.
 * done frees the state: after the last piece, or when the connection
 * closes first. */
struct conn_stream {
    bool (*step)(struct conn_stream *st, struct resp *r);
    void (*done)(struct conn_stream *st);
};
#define CONN_STREAM_LOW (64u << 10)
/* The request being parsed answers with st from its next piece on (its
 * first piece is the slot it already has, which it marks done). */
void conn_stream(struct conn *c, struct conn_stream *st);
/* Is a streamed reply still being written, or is the connection a
 * watcher (the idle timeout spares both)? */
bool conn_streaming(const struct conn *c);

/* -Y or -S: has the connection authenticated? */
bool conn_authenticated(const struct conn *c);
void conn_set_authenticated(struct conn *c);
void conn_clear_authenticated(struct conn *c);
/* -S: the connection's SASL session, made at its first SASL command;
 * NULL if the library refused one. */
struct mcsasl *conn_sasl(struct conn *c);

/* "watch": the connection carries log lines from now on (watch.h) and
 * drops its input. */
void conn_watch_begin(struct conn *c);
/* watch_send_fn for the server's hub: queues line on c, written after the
 * loop pass; false when c holds too much unsent output. */
bool conn_watch_send(void *c, const char *line, size_t n);

/* stats conns: memcached's lines for the listening sockets and every
 * connection (self is the one asking), then END. */
void conn_stats_conns(struct conn *self, struct resp *r);

/* ---- Slot migration (migrate.c) ---- */

/* Mark the connection as an import connection: its keyed requests skip the
 * slot check (the source of a slot move sends the slot's items on it). */
void conn_set_import(struct conn *c);
bool conn_is_import(const struct conn *c);
/* Mark every mutation now in flight on any connection of s; returns how
 * many.  conn_marked_inflight() counts the marked ones still in flight: a
 * move starts copying once they completed, so no write older than the
 * move can land behind its copy. */
size_t conn_mark_inflight(struct server *s);
size_t conn_marked_inflight(const struct server *s);

/* ---- Implemented by each protocol ---- */

enum conn_parse {
    CONN_PARSE_OK,        /* consumed > 0 bytes, call again */
    CONN_PARSE_NEED_MORE, /* incomplete request: read more (need bytes is set if known) */
    CONN_PARSE_BLOCKED,   /* request is a read behind an in-flight write: wait */
    CONN_PARSE_CLOSE      /* close the connection (after queued replies) */
};

/* Process one request at buf[0..len).  Sets *consumed to the bytes used. */
typedef enum conn_parse (*proto_process_fn)(struct conn *c, const char *buf, size_t len,
                                            size_t *consumed);

#endif
