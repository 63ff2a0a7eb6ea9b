/* conn_internal.h - the connection structure, shared by conn.c and server.c
 * only; protocol code uses the functions of conn.h. */
#ifndef MC_CONN_INTERNAL_H
#define MC_CONN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "auth.h"
#include "conn.h"

struct event;

struct conn {
    struct conn *next, *prev;     /* the server's list of open connections */
    struct server *srv;
    int fd;
    struct event *ev;
    short ev_flags;               /* events currently watched */
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

    unsigned inflight;            /* mutations the engine has not completed */
    bool blocked;                 /* a read waits for inflight to reach 0 */
    bool throttled;               /* too many mutations in flight: not parsing */
    bool out_blocked;             /* the socket would not take more */
    bool paused;                  /* not reading: too much unsent output */
    bool close_after_write;
    bool closing;
    bool import;                  /* "cocytus import begin": no slot check */
    bool refusal_logged;          /* a refused admin command was logged */
    unsigned long last_read;      /* server tick (seconds) of the last bytes read */
    struct auth_admin admin;      /* "cocytus auth": proved the cluster secret? */
    bool flush_queued;            /* on srv->flush_queue (holds c alive) */
    struct conn *flush_next;
};

struct conn *conn_new(struct server *s, int fd);
void conn_close(struct conn *c);
void conn_close_all(struct server *s);

#endif
