/* conn_internal.h - the connection structure, shared by conn.c and server.c
 * only; protocol code uses the functions of conn.h. */
#ifndef MC_CONN_INTERNAL_H
#define MC_CONN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "auth.h"
#include "conn.h"
#include "sendq.h"

struct event;

struct conn {
    struct conn *next, *prev;     /* the server's list of open (or closed, unreleased) connections */
    struct server *srv;
    int fd;
    struct event *ev;
    short ev_flags;               /* events currently watched */
    struct tls_conn *tls;         /* -Z: bytes move through TLS (tls.h) */
    char *tls_held;               /* ...a record TLS took in part: retried first */
    size_t tls_held_len;
    proto_process_fn process;     /* chosen from the first byte */

    char *rbuf;                   /* unread input is rbuf[rstart..rend) */
    size_t rcap, rstart, rend;
    size_t swallow;               /* input bytes still to discard */

    struct resp *head, *tail;     /* reply queue, in request order */
    uint32_t head_seg, head_off;  /* write progress inside head */
    int niov;
    unsigned transient;           /* queued segments with transient engine bytes */
    struct resp *free_resps;
    unsigned nfree_resps;

    unsigned inflight;            /* mutations the engine has not completed, and
                                     reads waiting in it (conn_read_waits) */
    unsigned mutations_pending;   /* of those, the mutations */
    struct event *hold_ev;        /* bounds how long ready replies wait for a
                                     write (conn_holds_ready); made on first use,
                                     pending while they wait */
    unsigned nresps;              /* slots in the queue (head..tail) */
    size_t held_bytes;            /* transient value bytes queued (copied or not) */
    bool blocked;                 /* a read waits for inflight to reach 0 */
    bool throttled;               /* too many mutations in flight: not parsing */
    bool out_blocked;             /* the socket would not take more */
    bool paused;                  /* not reading: too much unsent output */
    bool close_after_write;
    bool closing;
    bool import;                  /* "cocytus import begin": no slot check */
    bool refusal_logged;          /* a refused admin command was logged */
    struct auth_admin admin;      /* "cocytus auth": proved the cluster secret? */
    bool flush_queued;            /* on srv->flush_queue (holds c alive) */
    struct conn *flush_next;
    struct sendq_writer wr;       /* listed in srv->sq: written after the loop
                                     pass (holds c alive while listed) */

    /* memcached's reply timing (conn.h) */
    uint64_t next_seq;            /* seq of the next slot */
    uint64_t flush_seq;           /* slots with seq < this may be written while holding */
    bool holding;                 /* inside a data block: write only up to flush_seq */
    bool hold_request;            /* the protocol asked to hold (this parse call) */
    bool flush_now;               /* a flush point was reached: write before parsing on */
    unsigned deferred_flushes;    /* flush points passed since the last write (conn_process) */
    bool discard;                 /* closing: replies not yet flushable are dropped */
    bool in_data;                 /* inside a data block memcached reads directly */
    size_t win_left;              /* input memcached's buffer holds from rstart */
    bool read_more;               /* the last read filled our buffer: the socket may
                                   * hold more that memcached's read would have had */

    time_t last_cmd;              /* wall time of the last request (idle_timeout, stats conns) */
    bool authenticated;           /* -Y or -S: the connection has authenticated */
    struct mcsasl *sasl;          /* -S: its SASL session, from its first SASL command */
    struct conn_stream *stream;   /* a reply still being written piece by piece */
    bool watching;                /* "watch": only log lines go out, input is dropped */
    struct resp *watch_open;      /* the slot log lines join until a write takes it */
    size_t watch_queued;          /* log line bytes not yet written */
    char peer_ip[48];             /* the peer, kept for the watch lines of a close */
    int peer_port;                /* (a reset peer has no address any more) */
    const char *close_reason;     /* for a watcher's conn_close line (NULL: normal) */
    bool looked;                  /* this request logged a lookup of the key hashed... */
    uint64_t looked_hash;         /* ...here: its mutation does not log another */
};

/* tls: the client shakes hands first (a -Z listener's). */
struct conn *conn_new(struct server *s, int fd, bool tls);
void conn_close(struct conn *c);
void conn_close_all(struct server *s);
void conn_free_closed(struct server *s);
/* Writes what can be written and closes if it was asked to (idle timeout). */
void conn_kick(struct conn *c);

#endif
